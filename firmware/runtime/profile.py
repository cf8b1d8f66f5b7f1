"""Where a training step's time goes: host time by kind, beside the accelerator's cycles.

:class:`Profile` accumulates wall-clock seconds per kind of host work and the accelerator's
busy cycles. :class:`firmware.Device` and :class:`firmware.ml.nn.Engine` share one:

``quantize``
    float to int8 block floating point (and exponents), on the host.
``layout``
    Copies into and out of device buffers, ``im2col`` / ``col2im``, transposes.
``driver``
    Descriptor planning and register writes.
``wait``
    Polling for the accelerator (on ``rtl`` the simulator's own run time, on ``golden`` the
    numpy model standing in for the hardware: neither is host work a board would do).
``combine``
    Host arithmetic over GEMM results where one descriptor cannot express a GEMM (K chunks
    above the register map's limit, blocks along K).
``float``
    The rest of the step in float32 on the host: bias, activations, pooling, loss,
    optimiser.

The accelerator's time is ``cycles / clock``; a board's host share of a step is
``host / (host + accelerator)`` with ``host`` the sum of every kind but ``wait``.
"""

from __future__ import annotations

import time
from contextlib import contextmanager

__all__ = ["Profile", "KINDS", "HOST_KINDS"]

KINDS = ("quantize", "layout", "driver", "wait", "combine", "float")
#: The kinds a board's ARM spends itself (``wait`` is the accelerator's time or a stand-in).
HOST_KINDS = ("quantize", "layout", "driver", "combine", "float")


class Profile:
    """Seconds per kind (:data:`KINDS`), accelerator cycles, and event counts.

    :meth:`time` blocks nest: an inner block's seconds go to its own kind and are taken out
    of the enclosing one, so every second is counted once.
    """

    def __init__(self):
        self.seconds = dict.fromkeys(KINDS, 0.0)
        self.cycles = 0
        self.counts: dict[str, int] = {}
        self._stack: list[list] = []

    @contextmanager
    def time(self, kind: str):
        if kind not in self.seconds:
            raise ValueError(f"kind must be one of {KINDS}, not {kind!r}")
        t0 = time.perf_counter()
        frame = [kind, 0.0]                    # seconds taken by inner blocks
        self._stack.append(frame)
        try:
            yield
        finally:
            self._stack.pop()
            spent = time.perf_counter() - t0
            self.seconds[kind] += spent - frame[1]
            if self._stack:
                self._stack[-1][1] += spent

    def count(self, name: str, n: int = 1) -> None:
        self.counts[name] = self.counts.get(name, 0) + n

    def reset(self) -> None:
        self.__init__()

    @property
    def host_seconds(self) -> float:
        return sum(self.seconds[k] for k in HOST_KINDS)

    def summary(self, clock_hz: float | None = None) -> dict:
        """A JSON-ready dictionary: seconds per kind, host total, cycles, and with
        ``clock_hz`` the accelerator's seconds and the host share."""
        out = {"seconds": {k: round(v, 6) for k, v in self.seconds.items()},
               "host_seconds": round(self.host_seconds, 6), "accelerator_cycles": self.cycles,
               "counts": dict(self.counts)}
        if clock_hz:
            acc = self.cycles / clock_hz
            out["clock_mhz"] = clock_hz / 1e6
            out["accelerator_seconds"] = round(acc, 6)
            total = self.host_seconds + acc
            out["host_share"] = round(self.host_seconds / total, 4) if total else None
        return out

    def table(self, clock_hz: float | None = None) -> str:
        """A few printable lines."""
        s = self.summary(clock_hz)
        host = s["host_seconds"] or 1e-12
        lines = [f"{'host ' + k:16s} {v:9.3f} s  {100 * v / host:5.1f} % of host"
                 for k, v in s["seconds"].items() if k != "wait"]
        lines.append(f"{'host total':16s} {s['host_seconds']:9.3f} s")
        lines.append(f"{'waiting':16s} {s['seconds']['wait']:9.3f} s  (simulator / golden "
                     f"model / board)")
        lines.append(f"{'accelerator':16s} {s['accelerator_cycles']:9d} cycles")
        if clock_hz:
            lines.append(f"{'':16s} {s['accelerator_seconds']:9.3f} s at "
                         f"{clock_hz / 1e6:g} MHz; host share of the step "
                         f"{100 * (s['host_share'] or 0):.1f} %")
        return "\n".join(lines)
