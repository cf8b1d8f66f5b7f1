"""The register-level driver: one GEMM descriptor through the register map, on any backend.

The same code drives the simulated accelerator (``sim.native.NativeSim``) and a board (PYNQ's
``MMIO`` and ``allocate``). A backend supplies two objects:

* ``regs`` with ``read32(offset)``, ``write32(offset, value)`` and ``wait(cycles)`` (let the
  hardware run a while: steps the simulator's clock; sleeps, or nothing, on a board);
* ``memory`` with ``buffer(nbytes) -> Buffer`` (``.addr`` the bus address, ``.array`` a uint8
  numpy view, ``.flush()`` after the CPU wrote it, ``.invalidate()`` before the CPU reads it),
  and ``release()`` to free every buffer of the call.

Operands are copied into buffers whose row strides are rounded up to the bus width (the
engine requires aligned rows); C is read back from its own buffer.
"""

from __future__ import annotations

import numpy as np

from . import regmap
from .regmap import ErrorCode, field_value, offset, pack

__all__ = ["Driver", "AcceleratorError", "HardwareInfo"]


class AcceleratorError(RuntimeError):
    """The accelerator stopped with an error code (``STATUS.ERROR_CODE``)."""

    def __init__(self, code: int):
        self.code = ErrorCode(code)
        super().__init__(f"accelerator error {int(self.code)} ({self.code.name}): "
                         f"{self.code.meaning}")


class HardwareInfo:
    """What the configuration registers say about the hardware."""

    def __init__(self, regs):
        ident = regs.read32(offset("ID"))
        if ident != regmap.MAGIC:
            raise RuntimeError(f"no accelerator here: ID reads {ident:#010x}, "
                               f"expected {regmap.MAGIC:#010x}")
        version = regs.read32(offset("VERSION"))
        if version >> 16 != regmap.VERSION >> 16:
            raise RuntimeError(f"register map version {version:#x} is not supported "
                               f"(this driver: {regmap.VERSION:#x})")
        arr = regs.read32(offset("CONFIG_ARRAY"))
        buf = regs.read32(offset("CONFIG_BUFFER"))
        bus = regs.read32(offset("CONFIG_BUS"))
        self.rows = field_value("CONFIG_ARRAY", "ROWS", arr)
        self.cols = field_value("CONFIG_ARRAY", "COLS", arr)
        self.depth = field_value("CONFIG_BUFFER", "DEPTH", buf)
        self.queue = field_value("CONFIG_BUFFER", "QUEUE", buf)
        self.packing = field_value("CONFIG_BUFFER", "PACKING", buf)
        self.data_width = field_value("CONFIG_BUS", "DATA_WIDTH", bus)
        self.addr_width = field_value("CONFIG_BUS", "ADDR_WIDTH", bus)

    def __repr__(self):
        return (f"HardwareInfo(rows={self.rows}, cols={self.cols}, depth={self.depth}, "
                f"queue={self.queue}, packing={self.packing}, data_width={self.data_width}, "
                f"addr_width={self.addr_width})")


def _round_up(x: int, to: int) -> int:
    return -(-x // to) * to


class Driver:
    """Runs GEMMs on an accelerator through its registers (see the module documentation).

    ``poll_cycles``: how long to let the hardware run between two STATUS reads.
    """

    def __init__(self, regs, memory, *, poll_cycles: int = 256):
        self.regs, self.memory, self.poll_cycles = regs, memory, poll_cycles
        self.info = HardwareInfo(regs)
        self.bytes_per_word = self.info.data_width // 8

    # -- registers ---------------------------------------------------------------------------
    def write(self, name: str, value: int) -> None:
        self.regs.write32(offset(name), value)

    def read(self, name: str) -> int:
        return self.regs.read32(offset(name))

    def write64(self, name: str, value: int) -> None:
        self.write(f"{name}_LO", value & 0xFFFFFFFF)
        self.write(f"{name}_HI", value >> 32)

    def read64(self, name: str) -> int:
        lo = self.read(f"{name}_LO")          # latches HI
        return self.read(f"{name}_HI") << 32 | lo

    def status(self) -> dict:
        word = self.read("STATUS")
        return {f.name.lower(): field_value("STATUS", f.name, word)
                for f in regmap.by_name("STATUS").fields}

    def soft_reset(self, max_polls: int = 10_000) -> None:
        """Abort everything, clear the error, and wait until the engine is idle."""
        self.write("CTRL", pack("CTRL", SOFT_RESET=1))
        for _ in range(max_polls):
            if not self.status()["busy"]:
                return
            self.regs.wait(self.poll_cycles)
        raise TimeoutError("the accelerator did not return to idle after a soft reset")

    def wait_idle(self, max_polls: int) -> dict:
        """Poll STATUS until the engine is idle or stopped on an error; return the status."""
        for _ in range(max_polls):
            st = self.status()
            if not st["busy"] or st["error"]:
                return st
            self.regs.wait(self.poll_cycles)
        raise TimeoutError(f"the accelerator is still busy after {max_polls} polls")

    # -- memory ------------------------------------------------------------------------------
    def _matrix(self, x: np.ndarray):
        """Copy a 2-D array into a buffer with rows aligned to the bus: (buffer, stride)."""
        rows, cols = x.shape
        itemsize = x.dtype.itemsize
        stride = _round_up(cols * itemsize, self.bytes_per_word)
        buf = self.memory.buffer(max(rows * stride, self.bytes_per_word))
        view = buf.array[:rows * stride].reshape(rows, stride)
        view[:, :cols * itemsize] = np.ascontiguousarray(x).view(np.uint8).reshape(
            rows, cols * itemsize)
        buf.flush()
        return buf, stride

    # -- descriptors -------------------------------------------------------------------------
    def set_window(self, base: int, limit: int) -> None:
        """Let the DMA touch only ``[base, limit)``."""
        self.write64("WINDOW_BASE", base)
        self.write64("WINDOW_LIMIT", limit)

    def submit(self, desc: dict) -> None:
        """Stage one descriptor and enqueue it.

        ``desc`` has ``m, n, k``, ``flags`` (a dict of ``DESC_FLAGS`` fields), and
        ``a_addr, a_stride, b_addr, b_stride, c_addr, c_stride, row_exp_addr,
        col_exp_addr`` (missing addresses and strides are 0).
        """
        for name in ("m", "n", "k"):
            self.write(f"DESC_{name.upper()}", desc[name])
        self.write("DESC_FLAGS", pack("DESC_FLAGS", **desc.get("flags", {})))
        for name in ("a", "b", "c"):
            self.write64(f"DESC_{name.upper()}_ADDR", desc.get(f"{name}_addr", 0))
            self.write(f"DESC_{name.upper()}_STRIDE", desc.get(f"{name}_stride", 0))
        self.write64("DESC_ROW_EXP_ADDR", desc.get("row_exp_addr", 0))
        self.write64("DESC_COL_EXP_ADDR", desc.get("col_exp_addr", 0))
        self.write("CTRL", pack("CTRL", ENQUEUE=1))

    def counters(self) -> dict:
        return {name.lower(): self.read64(name) for name in (
            "CYCLES", "BUSY_CYCLES", "ACTIVE_CYCLES", "STALL_CYCLES", "MACS")}

    def run(self, *descs: dict, max_cycles: int = 1 << 26) -> dict:
        """Run descriptors (queued back to back) to completion; returns the counters.

        On an error code: soft-resets the engine (so it works again) and raises
        :class:`AcceleratorError`. Raises ``TimeoutError`` if the engine is still busy after
        ``max_cycles``.
        """
        self.write("CTRL", pack("CTRL", CLEAR_COUNTERS=1))
        for desc in descs:
            self.submit(desc)
        st = self.wait_idle(max(4, max_cycles // self.poll_cycles))
        if st["error"]:
            self.soft_reset()
            raise AcceleratorError(st["error_code"])
        return self.counters()

    # -- one GEMM ----------------------------------------------------------------------------
    def gemm(self, a: np.ndarray, b: np.ndarray, *, transpose_a: bool, transpose_b: bool,
             row_exp, col_exp, raw: bool) -> tuple[np.ndarray, dict]:
        """Run one checked GEMM descriptor; returns (C, counters). Arguments are trusted."""
        m = a.shape[1] if transpose_a else a.shape[0]
        k = a.shape[0] if transpose_a else a.shape[1]
        n = b.shape[0] if transpose_b else b.shape[1]
        try:
            a_buf, a_stride = self._matrix(a)
            b_buf, b_stride = self._matrix(b)
            c_stride = _round_up(4 * n, self.bytes_per_word)
            c_buf = self.memory.buffer(m * c_stride)
            buffers = [a_buf, b_buf, c_buf]
            flags = {"TRANSPOSE_A": int(transpose_a), "TRANSPOSE_B": int(transpose_b),
                     "RAW": int(raw)}
            exp_addr = {}
            for name, value in (("ROW", row_exp), ("COL", col_exp)):
                if np.ndim(value) == 0:
                    flags[f"{name}_EXP"] = int(value)
                    exp_addr[name] = 0
                else:
                    vec = np.asarray(value, np.int8).reshape(1, -1)
                    buf, _ = self._matrix(vec)
                    buffers.append(buf)
                    flags[f"{name}_EXP_VECTOR"] = 1
                    exp_addr[name] = buf.addr
            lo = min(x.addr for x in buffers)
            hi = max(x.addr + x.array.size for x in buffers)
            self.set_window(lo, _round_up(hi, self.bytes_per_word))
            tiles = (-(-m // self.info.rows)) * (-(-n // self.info.cols))
            counters = self.run(dict(
                m=m, n=n, k=k, flags=flags, a_addr=a_buf.addr, a_stride=a_stride,
                b_addr=b_buf.addr, b_stride=b_stride, c_addr=c_buf.addr, c_stride=c_stride,
                row_exp_addr=exp_addr["ROW"], col_exp_addr=exp_addr["COL"]),
                max_cycles=64 * 256 + 20 * (tiles * (k + 256) + m * n // 4))
            c_buf.invalidate()
            rows = c_buf.array[:m * c_stride].reshape(m, c_stride)[:, :4 * n]
            c = rows.copy().view(np.int32 if raw else np.float32).reshape(m, n)
            return c, counters
        finally:
            self.memory.release()
