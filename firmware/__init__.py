"""The board-side software: :class:`Device` over a board, a simulator or the golden model.

Subpackages, in import order: :mod:`firmware.spec` (plain-Python descriptions the hardware
shares), :mod:`firmware.runtime` (device, driver, performance model), :mod:`firmware.ml`
(layers, optimiser, training) and :mod:`firmware.torch` (the PyTorch front end).
"""

__all__ = ["Device", "AcceleratorError"]


def __getattr__(name: str):
    # Loaded on first use, so that importing firmware.spec (as the RTL does) loads nothing else.
    if name in __all__:
        from firmware.runtime import device
        return getattr(device, name)
    raise AttributeError(f"module 'firmware' has no attribute {name!r}")
