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
* ``"rtl"`` and ``"pynq"``: the register-level driver over the simulated accelerator and over a
  board. Not available yet: they need the DMA engine (the accelerator issue); asking for them
  raises ``NotImplementedError`` saying so.
"""

from __future__ import annotations

import numpy as np

from sim import golden

from .regmap import ErrorCode

__all__ = ["Device", "AcceleratorError", "BACKENDS", "MAX_DIM"]

BACKENDS = ("golden", "rtl", "pynq")

#: Largest M, N or K of one descriptor (16-bit fields of the register map).
MAX_DIM = 65535


class AcceleratorError(RuntimeError):
    """The accelerator stopped with an error code (``STATUS.ERROR_CODE``)."""

    def __init__(self, code: int):
        self.code = ErrorCode(code)
        super().__init__(f"accelerator error {int(self.code)} ({self.code.name}): "
                         f"{self.code.meaning}")


class Device:
    """An int8 GEMM accelerator (see the module documentation).

    Parameters
    ----------
    backend : {"golden", "rtl", "pynq"}
    rows, cols : int
        Systolic array shape (used by the ``rtl`` backend; checked everywhere).
    data_width : {64, 128, 256, 512}
        Memory bus width in bits.
    """

    def __init__(self, backend: str = "golden", *, rows: int = 8, cols: int = 8,
                 data_width: int = 128):
        if not isinstance(backend, str) or backend not in BACKENDS:
            raise ValueError(f"backend must be one of {BACKENDS}, not {backend!r}")
        for name, v in (("rows", rows), ("cols", cols)):
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise ValueError(f"{name} must be a positive integer, not {v!r}")
        if data_width not in (64, 128, 256, 512):
            raise ValueError(f"data_width must be 64, 128, 256 or 512, not {data_width!r}")
        if backend != "golden":
            raise NotImplementedError(
                f"the {backend!r} backend needs the accelerator's DMA engine, which is not "
                "built yet; use backend='golden'")
        self.backend, self.rows, self.cols, self.data_width = backend, rows, cols, data_width
        self.stats: dict = {}

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
        result = acc if out == "int32" else golden.rescale(acc, row_exp, col_exp)
        self.stats = {"backend": self.backend, "m": m, "n": n, "k": k, "macs": m * n * k,
                      "cycles": None, "utilization": None, "dma_stall_cycles": None}
        return result
