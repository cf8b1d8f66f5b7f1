"""Host runtime: the ``Device`` driver and the register map."""

from firmware.runtime.device import AcceleratorError, Device

__all__ = ["Device", "AcceleratorError"]
