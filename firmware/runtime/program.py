"""Recorded descriptor chains: a sequence of descriptors written once to device memory and
replayed with one doorbell (``CTRL.RUN_CHAIN``).

:meth:`firmware.Device.record` collects the descriptors that the device calls made inside
it (:meth:`~firmware.Device.quantize`, :meth:`~firmware.Device.bfp_gemm`,
:meth:`~firmware.Device.conv2d` and the others that keep tensors on the device) instead of
running them; the calls still allocate and return their output tensors, which the program
keeps, so a replay writes the same buffers. :meth:`Program.run` replays the whole sequence
in order with no host action between descriptors: the engine runs queued descriptors one
after another, each reading what the ones before it wrote. ``seed`` is XORed into every
descriptor's seed (``CHAIN_SEED``), so a recorded training step draws new stochastic
rounding bits each time: recorded with pass 0 in the seeds' pass bits, it replays pass
``p`` with ``seed = p << 8`` (:func:`firmware.ml.resident.descriptor_seed`).
"""

from __future__ import annotations

import numpy as np

__all__ = ["Program"]


class Program:
    """A recorded descriptor chain (see the module documentation).

    Attributes
    ----------
    descriptors : int
        Descriptors in the chain.
    entries : int
        Its register writes (8 bytes each in device memory).
    """

    def __init__(self, dev):
        self.dev = dev
        self._descs: list[dict] = []
        self._gemms = 0
        self._chain = None
        self.entries = 0

    @property
    def descriptors(self) -> int:
        return len(self._descs)

    def add(self, desc: dict) -> None:
        """Called by the runtime for each descriptor made while recording."""
        if self._chain is not None:
            raise RuntimeError("this program is recorded already")
        self._descs.append(desc)
        if not desc.get("epilogue", {}).get("QUANTIZE_ONLY"):
            self._gemms += 1

    def finish(self) -> None:
        """Write the chain to device memory (once, at the end of the recording)."""
        if not self._descs:
            raise ValueError("the recording made no descriptor")
        entries = self.dev.driver.record(self._descs)
        words = np.array(entries, np.uint32).reshape(1, -1)
        self._chain = self.dev.tensor(words)
        self.entries = len(entries)
        self._regions = [r for d in self._descs for r in d.get("regions", ())]
        span = self._chain.addr, self._chain.addr + words.nbytes
        self._regions.append(span)
        self._bound = self.dev.driver.cycle_bound(self._descs)

    def run(self, seed: int = 0) -> dict:
        """Replay the chain with one doorbell and wait for it.

        Parameters
        ----------
        seed : int
            XORed into every descriptor's seed, in ``[0, 2**64)``.

        Returns
        -------
        dict
            The counters over the whole chain (``busy_cycles`` and the others).

        Raises
        ------
        RuntimeError
            The program was not finished, or is freed.
        ValueError
            A bad ``seed``.
        firmware.runtime.driver.AcceleratorError
            A descriptor stopped the engine (the chain stops there).
        """
        if self._chain is None:
            raise RuntimeError("this program is not recorded (or freed)")
        if not isinstance(seed, (int, np.integer)) or isinstance(seed, bool) \
                or not 0 <= int(seed) < 1 << 64:
            raise ValueError(f"seed must be an integer in [0, 2**64), not {seed!r}")
        dev = self.dev
        cnt = dev.driver.run_chain(self._chain.addr, self.entries, seed=int(seed),
                                   regions=self._regions, max_cycles=self._bound,
                                   profile=dev.profile)
        from firmware.runtime.epilogue import _account
        dev.profile.count("gemms", self._gemms)
        dev.stats = {"backend": dev.backend, "macs": cnt["macs"]}
        _account(dev, cnt, len(self._descs))
        return cnt

    def free(self) -> None:
        """Give the chain's buffer back (the tensors the recorded calls returned are the
        caller's to free)."""
        if self._chain is not None:
            self._chain.free()
            self._chain = None

    def __repr__(self):
        return f"Program(descriptors={self.descriptors}, entries={self.entries})"
