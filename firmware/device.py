"""``firmware.Device``: one GEMM API over the golden model, the simulated RTL and a board.

```python
from firmware import Device
dev = Device(backend="golden", rows=8, cols=8)
c = dev.gemm(a, b, transpose_a=False, transpose_b=False, row_exp=0, col_exp=0, out="float32")
dev.stats   # of the last call
```

The result always equals ``sim.golden.rescale(sim.golden.gemm(...), row_exp, col_exp)`` (or the
raw int32 GEMM with ``out="int32"``) bit for bit. Backends:

* ``"golden"``: numpy only, instant; ``stats`` has the MAC count (no cycles: nothing is timed).
* ``"rtl"``: the generated Verilog of the whole accelerator (:class:`rtl.accelerator.Accelerator`)
  as a native Verilator model with an AXI memory model (:mod:`sim.native`), cycle-accurate,
  driven by the register-level :class:`firmware.driver.Driver`. The model is compiled once per
  configuration and cached. ``stats`` has the hardware's counters.
* ``"pynq"``: the same driver over a board, through the ``pynq`` package (``MMIO`` and
  ``allocate``); see :mod:`firmware.pynq_backend`.

Backend options (keyword arguments of :class:`Device`): ``depth``, ``block``, ``packing``
(hardware configuration, ``rtl``); ``port`` (the memory port's timing, ``rtl``: a preset name
of :data:`sim.ports.PORTS` -- ``"ideal"`` (the default), ``"zynq7-hp"``, ``"zynqmp-hp"``,
``"vcu118-ddr4"`` -- or a dict of knobs ``outstanding_reads``, ``outstanding_writes``,
``read_latency``, ``write_latency``, ``max_burst``, ``write_order``, ``pause``, the rest from
``"ideal"``; see :mod:`sim.ports`); ``latency`` (overrides the port's read latency in cycles),
``pause`` (overrides the port's probability of a random pause on each AXI channel per cycle),
``memory`` (bytes), ``seed`` (``rtl``); ``bitfile``, ``ip_name`` (``pynq``).

```python
dev = Device("rtl", rows=16, cols=16, data_width=64, port="zynq7-hp")
dev = Device("rtl", port={"outstanding_reads": 2, "write_order": "w-first", "pause": 0.1})
dev.sim.counters    # the memory model's traffic counters (bursts, beats, most in flight)
```
"""

from __future__ import annotations

import numpy as np

from sim import golden

from .driver import AcceleratorError, Driver

__all__ = ["Device", "AcceleratorError", "BACKENDS", "MAX_DIM"]

BACKENDS = ("golden", "rtl", "pynq")

#: Largest M, N or K of one descriptor (16-bit fields of the register map).
MAX_DIM = 65535


class _Buffer:
    def __init__(self, addr, array):
        self.addr, self.array = addr, array

    def flush(self):
        pass

    def invalidate(self):
        pass


class _SimMemory:
    """Buffers carved out of the simulated memory, 4 KB aligned, freed together."""

    BASE = 0x1000

    def __init__(self, sim):
        self.sim, self.next = sim, self.BASE

    def buffer(self, nbytes):
        addr = self.next
        end = addr + nbytes
        if end > self.sim.size:
            self.release()
            raise ValueError(f"the operands need more than the simulated memory "
                             f"({self.sim.size} bytes); pass a larger memory= to Device")
        self.next = -(-end // 4096) * 4096
        return _Buffer(addr, self.sim.memory[addr:end])

    def release(self):
        self.next = self.BASE


class _SimRegs:
    def __init__(self, sim):
        self.sim = sim

    def read32(self, offset):
        return self.sim.read32(offset)

    def write32(self, offset, value):
        self.sim.write32(offset, value)

    def wait(self, cycles):
        self.sim.step(cycles)


class Device:
    """An int8 GEMM accelerator (see the module documentation).

    Parameters
    ----------
    backend : {"golden", "rtl", "pynq"}
    rows, cols : int
        Systolic array shape (used by the ``rtl`` backend; checked everywhere).
    data_width : {64, 128, 256, 512}
        Memory bus width in bits.
    **options
        Backend options (see the module documentation).
    """

    def __init__(self, backend: str = "golden", *, rows: int = 8, cols: int = 8,
                 data_width: int = 128, **options):
        if not isinstance(backend, str) or backend not in BACKENDS:
            raise ValueError(f"backend must be one of {BACKENDS}, not {backend!r}")
        for name, v in (("rows", rows), ("cols", cols)):
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise ValueError(f"{name} must be a positive integer, not {v!r}")
        if data_width not in (64, 128, 256, 512):
            raise ValueError(f"data_width must be 64, 128, 256 or 512, not {data_width!r}")
        self.backend, self.rows, self.cols, self.data_width = backend, rows, cols, data_width
        self.stats: dict = {}
        self.driver = None
        if backend == "rtl":
            allowed = {"depth", "block", "packing", "port", "latency", "pause", "memory",
                       "seed"}
            unknown = set(options) - allowed
            if unknown:
                raise TypeError(f"unknown option(s) for the rtl backend: {sorted(unknown)}; "
                                f"valid: {sorted(allowed)}")
            from sim.native import NativeSim
            self.sim = NativeSim(rows=rows, cols=cols, data_width=data_width, **options)
            self.driver = Driver(_SimRegs(self.sim), _SimMemory(self.sim))
        elif backend == "pynq":
            from .pynq_backend import connect
            self.driver = connect(**options)
            info = self.driver.info
            if (info.rows, info.cols, info.data_width) != (rows, cols, data_width):
                raise ValueError(f"the board has a {info.rows}x{info.cols} array on a "
                                 f"{info.data_width}-bit bus, not {rows}x{cols} on "
                                 f"{data_width} bits")
        elif options:
            raise TypeError(f"the golden backend takes no options, not {sorted(options)}")

    def gemm(self, a: np.ndarray, b: np.ndarray, *, transpose_a: bool = False,
             transpose_b: bool = False, row_exp=0, col_exp=0, out: str = "float32"):
        """``rescale(op(a) @ op(b), row_exp, col_exp)`` as float32, or the int32 GEMM.

        Raises
        ------
        TypeError
            An operand is not an int8 array, a flag not a bool, an exponent not int8.
        ValueError
            Shapes do not match, a dimension is 0 or above :data:`MAX_DIM`, an exponent vector
            has the wrong length, or ``out`` is not ``"float32"`` / ``"int32"``.
        AcceleratorError
            The hardware reported an error code.
        """
        if out not in ("float32", "int32"):
            raise ValueError(f"out must be 'float32' or 'int32', not {out!r}")
        for name, x in (("a", a), ("b", b)):
            if isinstance(x, np.ndarray) and x.ndim == 2 and max(x.shape) > MAX_DIM:
                raise ValueError(f"{name} has shape {x.shape}: each dimension must be at most "
                                 f"{MAX_DIM}")
        acc = golden.gemm(a, b, transpose_a, transpose_b)   # validates a, b and the flags
        m, n = acc.shape
        k = a.shape[0] if transpose_a else a.shape[1]
        # Exponents are checked in both output modes, so a bad call fails the same way.
        golden.exponent_vector("row_exp", row_exp, m, "row")
        golden.exponent_vector("col_exp", col_exp, n, "column")
        self.stats = {"backend": self.backend, "m": m, "n": n, "k": k, "macs": m * n * k,
                      "cycles": None, "utilization": None, "dma_stall_cycles": None}
        if self.driver is None:
            return acc if out == "int32" else golden.rescale(acc, row_exp, col_exp)
        result, counters = self.driver.gemm(
            np.asarray(a), np.asarray(b), transpose_a=transpose_a, transpose_b=transpose_b,
            row_exp=row_exp, col_exp=col_exp, raw=out == "int32")
        cycles = counters["busy_cycles"]
        self.stats.update(
            cycles=cycles, active_cycles=counters["active_cycles"],
            dma_stall_cycles=counters["stall_cycles"],
            utilization=m * n * k / (self.rows * self.cols * cycles) if cycles else None)
        return result
