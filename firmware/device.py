"""``firmware.Device``: one GEMM API over the golden model, the simulated RTL and a board.

```python
from firmware import Device
dev = Device(backend="golden", rows=8, cols=8)
c = dev.gemm(a, b, transpose_a=False, transpose_b=False, row_exp=0, col_exp=0, out="float32")
dev.stats     # of the last call
dev.profile   # host time and accelerator cycles, accumulated (firmware.profile.Profile)
```

The result always equals :func:`sim.golden.gemm_scaled` (``sim.golden.rescale(
sim.golden.gemm(...), row_exp, col_exp)`` without ``k_exp``; the raw int32 GEMM with
``out="int32"``) bit for bit. Backends:

* ``"golden"``: numpy only, instant; ``stats`` has the MAC count (no cycles: nothing is timed).
* ``"rtl"``: the generated Verilog of the whole accelerator (:class:`rtl.accelerator.Accelerator`)
  as a native Verilator model with an AXI memory model (:mod:`sim.native`), cycle-accurate,
  driven by the register-level :class:`firmware.driver.Driver`. The model is compiled once per
  configuration and cached. ``stats`` has the hardware's counters.
* ``"pynq"``: the same driver over a board, through the ``pynq`` package (``MMIO`` and
  ``allocate``); see :mod:`firmware.pynq_backend`. ``rows``, ``cols`` and ``data_width``
  default to what the hardware's configuration registers say.
* ``"model"``: the same driver over :class:`sim.functional.FunctionalAccelerator`, a
  register-level functional model: results from the golden models at once, cycles from the
  analytic performance model. For measuring the host's side at board sizes the
  cycle-accurate model cannot reach; not a test of the hardware.

On ``rtl`` and ``pynq`` the host computes nothing over the operands: the arguments are checked
from their shapes and dtypes, operands are copied into device buffers (layout only), and the
product is the accelerator's. Host arithmetic happens only where one descriptor cannot
express the GEMM, and :attr:`Device.profile` times it as ``combine``:

* a dimension above :data:`MAX_DIM` (the register map's 16-bit fields): M and N are cut into
  tiles (descriptors over sub-ranges of the same buffers, no arithmetic); K is cut into
  chunks whose exact int32 partial sums the host adds in int64 (then rescales);
* ``k_exp`` with more than one run of equal values (blocks along the reduction axis, as in
  Fox et al.'s per-sample weight gradient): one descriptor per run, raw int32 partials
  combined in float64 as :func:`sim.golden.gemm_scaled` specifies.

Device memory (``rtl``, ``pynq``): :meth:`Device.tensor` copies an int8 matrix into a device
buffer once and returns a :class:`DeviceTensor` handle that any number of GEMMs can take in
place of the array (weights across a step's three GEMMs, the quantised activations from the
forward pass to the weight gradient). Buffers come from a pool keyed by size: a training loop
allocates once per shape and reuses them every step. On ``golden`` a handle simply wraps the
array.

Backend options (keyword arguments of :class:`Device`): ``depth``, ``block``, ``packing``,
``write_ports`` (hardware configuration, ``rtl`` and ``model``; 2 or 4 deal C rows to that
many AXI write ports, each with the ``port``'s limits); ``read_ports`` (the same; 2 reads A
and B through an AXI read port each, 3 stripes B's rows over two); ``slr_groups``
(``rtl``: the array's columns in that many SLR groups with crossing registers, as on the
VU9P); ``port`` (the
memory port's timing, ``rtl``: a preset name of :data:`sim.ports.PORTS` -- ``"ideal"`` (the
default), ``"zynq7-hp"``, ``"zynqmp-hp"``, ``"vcu118-ddr4"`` -- or a dict of knobs, see
:mod:`sim.ports`); ``latency``, ``pause``,
``memory`` (bytes), ``seed`` (``rtl``); ``board``, ``bitfile``, ``report``, ``base_addr``,
``ip_name``, ``clock_hz`` (``pynq``, see :func:`firmware.pynq_backend.connect`); ``max_dim``
(every backend but golden: the largest M, N or K of one descriptor, :data:`MAX_DIM` by
default; smaller values exercise the splitting).

```python
dev = Device("rtl", rows=16, cols=16, data_width=64, port="zynq7-hp")
w = dev.tensor(w_q)                       # resident int8 weights
y = dev.gemm(x_q, w, row_exp=x_e, col_exp=w_e)
dx = dev.gemm(d_q, w, transpose_b=True, row_exp=d_e, col_exp=w_e)
```
"""

from __future__ import annotations

import numpy as np

from sim import golden

from .driver import AcceleratorError, Driver
from .profile import Profile

__all__ = ["Device", "DeviceTensor", "AcceleratorError", "BACKENDS", "MAX_DIM"]

BACKENDS = ("golden", "rtl", "pynq", "model")

#: Largest M, N or K of one descriptor (16-bit fields of the register map).
MAX_DIM = 65535


def _round_up(x: int, to: int) -> int:
    return -(-x // to) * to


class DeviceTensor:
    """A matrix in device memory (or, on the golden backend, the array itself).

    ``shape`` and ``dtype`` are the matrix's; ``stride`` the bytes between its rows in the
    buffer (rounded up to the bus width). :meth:`numpy` copies it back; :meth:`write`
    overwrites it with an array of the same shape and dtype; :meth:`free` returns the buffer
    to the device's pool (the handle is unusable afterwards).
    """

    def __init__(self, device, shape, dtype, buffer=None, stride=0, array=None):
        self.device, self.shape, self.dtype = device, tuple(shape), np.dtype(dtype)
        self.buffer, self.stride, self._array = buffer, stride, array

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def addr(self) -> int:
        self._live()
        return self.buffer.addr

    def _live(self):
        if self.device is None:
            raise ValueError("this DeviceTensor was freed")

    def _rows(self):
        rows, cols = self.shape
        view = self.buffer.array[:rows * self.stride].reshape(rows, self.stride)
        return view[:, :cols * self.dtype.itemsize]

    def write(self, x: np.ndarray) -> None:
        """Copy ``x`` (same shape and dtype) into the tensor's buffer."""
        self._live()
        if not isinstance(x, np.ndarray) or x.shape != self.shape or x.dtype != self.dtype:
            raise ValueError(f"x must be a {self.dtype} array of shape {self.shape}, not "
                             f"{getattr(x, 'dtype', type(x).__name__)} "
                             f"{getattr(x, 'shape', '')}")
        if self.buffer is None:
            self._array = x
            return
        with self.device.profile.time("layout"):
            self._rows()[...] = np.ascontiguousarray(x).view(np.uint8).reshape(
                self.shape[0], -1)
            self.buffer.flush()

    def numpy(self) -> np.ndarray:
        """A host copy of the tensor."""
        self._live()
        if self.buffer is None:
            return self._array
        with self.device.profile.time("layout"):
            self.buffer.invalidate()
            return self._rows().copy().view(self.dtype).reshape(self.shape)

    def free(self) -> None:
        if self.device is not None and self.buffer is not None:
            self.device._release(self.buffer)
        self.device, self.buffer, self._array = None, None, None

    def __repr__(self):
        return f"DeviceTensor(shape={self.shape}, dtype={self.dtype}, " \
               f"addr={None if self.buffer is None else hex(self.buffer.addr)})"


class _Buffer:
    def __init__(self, addr, array):
        self.addr, self.array = addr, array

    def flush(self):
        pass

    def invalidate(self):
        pass


class _SimMemory:
    """A first-fit allocator over the simulated memory: 4 KB aligned buffers, freed one by
    one (neighbouring free ranges merge)."""

    BASE = 0x1000

    def __init__(self, sim):
        self.sim = sim
        self.free_ranges = [(self.BASE, sim.size)]      # sorted, disjoint [start, end)

    def buffer(self, nbytes):
        size = _round_up(max(nbytes, 1), 4096)
        for i, (start, end) in enumerate(self.free_ranges):
            if end - start >= size:
                self.free_ranges[i:i + 1] = [(start + size, end)] if end - start > size else []
                buf = _Buffer(start, self.sim.memory[start:start + nbytes])
                buf.size = size
                return buf
        raise MemoryError(f"the simulated memory ({self.sim.size} bytes) has no free "
                          f"{size}-byte range left; pass a larger memory= to Device")

    def free(self, buf):
        start, end = buf.addr, buf.addr + buf.size
        ranges = sorted(self.free_ranges + [(start, end)])
        merged = [ranges[0]]
        for s, e in ranges[1:]:
            if s == merged[-1][1]:
                merged[-1] = (merged[-1][0], e)
            else:
                merged.append((s, e))
        self.free_ranges = merged

    def release(self):
        pass


class _SimRegs:
    def __init__(self, sim):
        self.sim = sim

    def read32(self, offset):
        return self.sim.read32(offset)

    def write32(self, offset, value):
        self.sim.write32(offset, value)

    def wait(self, cycles):
        self.sim.step(cycles)


class _Pool:
    """Device buffers kept for reuse, keyed by size (bytes)."""

    def __init__(self, memory):
        self.memory, self.idle, self.live = memory, {}, 0

    def get(self, nbytes):
        stack = self.idle.get(nbytes)
        if stack:
            buf = stack.pop()
        else:
            try:
                buf = self.memory.buffer(nbytes)
            except MemoryError:
                self.trim()
                buf = self.memory.buffer(nbytes)
            buf.pool_size = nbytes
        self.live += 1
        return buf

    def put(self, buf):
        self.live -= 1
        self.idle.setdefault(buf.pool_size, []).append(buf)

    def trim(self):
        """Give every idle buffer back to the memory."""
        free = getattr(self.memory, "free", None)
        for stack in self.idle.values():
            for buf in stack:
                if free is not None:
                    free(buf)
                elif hasattr(buf, "free"):
                    buf.free()
        self.idle = {}

    @property
    def idle_buffers(self) -> int:
        return sum(len(s) for s in self.idle.values())


def _int_arg(name, v, allow_none=False):
    if v is None and allow_none:
        return
    if not isinstance(v, int) or isinstance(v, bool) or v < 1:
        raise ValueError(f"{name} must be a positive integer, not {v!r}")


class Device:
    """An int8 GEMM accelerator (see the module documentation).

    Parameters
    ----------
    backend : {"golden", "rtl", "pynq"}
    rows, cols : int
        Systolic array shape (used by the ``rtl`` backend; checked everywhere). Default 8, or
        on ``pynq`` the hardware's.
    data_width : {64, 128, 256, 512}
        Memory bus width in bits. Default 128, or on ``pynq`` the hardware's.
    **options
        Backend options (see the module documentation).
    """

    def __init__(self, backend: str = "golden", *, rows: int | None = None,
                 cols: int | None = None, data_width: int | None = None, **options):
        if not isinstance(backend, str) or backend not in BACKENDS:
            raise ValueError(f"backend must be one of {BACKENDS}, not {backend!r}")
        _int_arg("rows", rows, allow_none=True)
        _int_arg("cols", cols, allow_none=True)
        if data_width is not None and data_width not in (64, 128, 256, 512):
            raise ValueError(f"data_width must be 64, 128, 256 or 512, not {data_width!r}")
        self.max_dim = options.pop("max_dim", MAX_DIM)
        if (not isinstance(self.max_dim, int) or isinstance(self.max_dim, bool)
                or not 1 <= self.max_dim <= MAX_DIM):
            raise ValueError(f"max_dim must be an integer in [1, {MAX_DIM}], not "
                             f"{self.max_dim!r}")
        self.backend = backend
        self.stats: dict = {}
        self.profile = Profile()
        self.driver = None
        if backend == "pynq":
            from .pynq_backend import connect
            self.driver = connect(**options)
            info = self.driver.info
            want = (rows or info.rows, cols or info.cols, data_width or info.data_width)
            if (info.rows, info.cols, info.data_width) != want:
                raise ValueError(f"the board has a {info.rows}x{info.cols} array on a "
                                 f"{info.data_width}-bit bus, not {want[0]}x{want[1]} on "
                                 f"{want[2]} bits")
            rows, cols, data_width = info.rows, info.cols, info.data_width
        rows, cols, data_width = rows or 8, cols or 8, data_width or 128
        self.rows, self.cols, self.data_width = rows, cols, data_width
        if backend == "rtl":
            allowed = {"depth", "block", "packing", "port", "latency", "pause", "memory",
                       "seed", "write_ports", "read_ports", "slr_groups"}
            unknown = set(options) - allowed
            if unknown:
                raise TypeError(f"unknown option(s) for the rtl backend: {sorted(unknown)}; "
                                f"valid: {sorted(allowed)}")
            from sim.native import NativeSim
            self.sim = NativeSim(rows=rows, cols=cols, data_width=data_width, **options)
            self.driver = Driver(_SimRegs(self.sim), _SimMemory(self.sim))
        elif backend == "model":
            allowed = {"depth", "block", "packing", "queue", "port", "memory", "addr_width",
                       "write_ports", "read_ports"}
            unknown = set(options) - allowed
            if unknown:
                raise TypeError(f"unknown option(s) for the model backend: {sorted(unknown)}; "
                                f"valid: {sorted(allowed)}")
            from sim.functional import FunctionalAccelerator
            self.sim = FunctionalAccelerator(rows=rows, cols=cols, data_width=data_width,
                                             **options)
            self.driver = Driver(_SimRegs(self.sim), _SimMemory(self.sim))
        elif backend == "golden" and options:
            raise TypeError(f"the golden backend takes no options, not {sorted(options)}")
        self.pool = _Pool(self.driver.memory) if self.driver else None
        self.bytes_per_word = data_width // 8

    # -- device memory -----------------------------------------------------------------------
    def _release(self, buf):
        self.pool.put(buf)

    def empty(self, shape, dtype=np.int8) -> DeviceTensor:
        """An uninitialised device matrix (rows aligned to the bus)."""
        shape = tuple(int(s) for s in shape)
        if len(shape) != 2 or min(shape) < 1:
            raise ValueError(f"shape must be two positive integers, not {shape}")
        dtype = np.dtype(dtype)
        if self.driver is None:
            return DeviceTensor(self, shape, dtype, array=np.empty(shape, dtype))
        stride = _round_up(shape[1] * dtype.itemsize, self.bytes_per_word)
        buf = self.pool.get(shape[0] * stride)
        return DeviceTensor(self, shape, dtype, buf, stride)

    def tensor(self, x: np.ndarray, *, into: DeviceTensor | None = None) -> DeviceTensor:
        """Copy the matrix ``x`` (int8; a vector is taken as one row) into device memory.

        ``into``: an existing tensor of the same shape and dtype to overwrite (no allocation).
        """
        if not isinstance(x, np.ndarray):
            raise TypeError(f"x must be a numpy array, not {type(x).__name__}")
        if x.ndim == 1:
            x = x.reshape(1, -1)
        if x.ndim != 2 or 0 in x.shape:
            raise ValueError(f"x must be a non-empty matrix or vector, not shape {x.shape}")
        if into is not None:
            if not isinstance(into, DeviceTensor) or into.device is not self:
                raise ValueError("into must be a DeviceTensor of this device")
            into.write(x)
            return into
        if self.driver is None:
            return DeviceTensor(self, x.shape, x.dtype, array=x)
        t = self.empty(x.shape, x.dtype)
        t.write(x)
        return t

    # -- GEMM --------------------------------------------------------------------------------
    def _operand(self, name, x):
        if isinstance(x, DeviceTensor):
            x._live()
            if x.device is not self:
                raise ValueError(f"{name} is a DeviceTensor of another device")
            if x.dtype != np.int8 or x.ndim != 2:
                raise TypeError(f"{name} must hold an int8 matrix, not {x.dtype} {x.shape}")
            return x
        if not isinstance(x, np.ndarray):
            raise TypeError(f"{name} must be a numpy.ndarray of dtype int8 or a DeviceTensor, "
                            f"not {type(x).__name__}")
        return x

    def gemm(self, a, b, *, transpose_a: bool = False, transpose_b: bool = False,
             row_exp=0, col_exp=0, k_exp=None, out: str = "float32",
             as_tensor: bool = False, block: int | None = None):
        """:func:`sim.golden.gemm_scaled` as float32, or the int32 GEMM (``out="int32"``).

        ``as_tensor``: return C as a :class:`DeviceTensor` left in device memory (not read
        back; ``.numpy()`` reads it) instead of a numpy array.

        ``block``: the side, in C tiles, of the blocks the accelerator walks C in (1 up to
        the buffers' block, ``CONFIG_BUFFER.BLOCK_LOG2``): A and B are read once per block
        row and column, C leaves block by block. ``None`` lets
        :func:`sim.perfmodel.best_block` choose for the device's memory port (the hardware's
        largest where the port is unknown). It changes the time, never the result;
        ``stats["block"]`` says which was used.

        ``a``, ``b``: int8 matrices, as numpy arrays or :class:`DeviceTensor`. ``row_exp``,
        ``col_exp``: int8 scalars or vectors. ``k_exp``: ``None`` or an integer vector, one
        exponent per k (blocks along the reduction axis; only with ``out="float32"``).

        Raises
        ------
        TypeError
            An operand is not an int8 matrix, a flag not a bool, an exponent not int8.
        ValueError
            Shapes do not match, a dimension is 0, K above :data:`sim.golden.MAX_K`, an
            exponent vector has the wrong length, ``k_exp`` with ``out="int32"``, ``out`` is
            not ``"float32"`` / ``"int32"``, or ``block`` is outside ``1..`` the hardware's.
        AcceleratorError
            The hardware reported an error code.
        """
        if out not in ("float32", "int32"):
            raise ValueError(f"out must be 'float32' or 'int32', not {out!r}")
        if block is not None:
            if not isinstance(block, (int, np.integer)) or isinstance(block, bool):
                raise TypeError(f"block must be an int or None, not {type(block).__name__}")
            top = self.driver.info.block if self.driver else None
            if block < 1 or (top is not None and block > top):
                raise ValueError(f"block must be in 1..{top or 'the hardware block'}, "
                                 f"not {block}")
        a, b = self._operand("a", a), self._operand("b", b)
        m, n, k = golden.gemm_shape(_shaped(a), _shaped(b), transpose_a, transpose_b)
        re = golden.exponent_vector("row_exp", row_exp, m, "row")
        ce = golden.exponent_vector("col_exp", col_exp, n, "column")
        runs = None
        if k_exp is not None:
            if out == "int32":
                raise ValueError("k_exp scales the partial sums: it needs out='float32'")
            runs = golden.k_runs(golden._k_exp_vector(k_exp, k))
            if len(runs) == 1:                # one block along K: fold it into the exponents
                e = runs[0][2]
                if golden.EXP_MIN <= re.min() + e and re.max() + e <= golden.EXP_MAX:
                    re, runs = re + e, None
                elif golden.EXP_MIN <= ce.min() + e and ce.max() + e <= golden.EXP_MAX:
                    ce, runs = ce + e, None
        self.stats = {"backend": self.backend, "m": m, "n": n, "k": k, "macs": m * n * k,
                      "descriptors": 0, "cycles": None, "utilization": None,
                      "dma_stall_cycles": None, "block": None}
        if self.driver is None:
            with self.profile.time("wait"):       # the golden model stands in for the hardware
                a_ = a.numpy() if isinstance(a, DeviceTensor) else a
                b_ = b.numpy() if isinstance(b, DeviceTensor) else b
                if out == "int32":
                    c = golden.gemm(a_, b_, transpose_a, transpose_b)
                else:
                    c = golden.gemm_scaled(a_, b_, transpose_a, transpose_b, _int8(re),
                                           _int8(ce), k_exp if runs is not None else None)
                return DeviceTensor(self, c.shape, c.dtype, array=c) if as_tensor else c
        self.profile.count("gemms")
        temps = []
        try:
            if not isinstance(a, DeviceTensor):
                a = self.tensor(a)
                temps.append(a)
            if not isinstance(b, DeviceTensor):
                b = self.tensor(b)
                temps.append(b)
            side = int(block) if block is not None else self._choose_block(
                m, n, k, transpose_a, transpose_b)
            self.stats["block"] = side
            c = self._run(a, b, m, n, k, transpose_a, transpose_b, re, ce, runs, out, temps,
                          as_tensor, side)
            if as_tensor and not isinstance(c, DeviceTensor):     # combined on the host
                c = self.tensor(c)
            return c
        finally:
            for t in temps:
                t.free()

    def _exponents(self, e, temps):
        """A scalar for the descriptor's flags, or a device vector."""
        if np.all(e == e[0]):
            return int(e[0])
        t = self.tensor(e.astype(np.int8))
        temps.append(t)
        return t

    def _k_slice(self, x, t, k0, k1, temps):
        """A copy of the operand's rows or columns ``k0:k1`` (its K axis), as a new tensor."""
        host = x.numpy()
        part = host[k0:k1] if t else host[:, k0:k1]
        y = self.tensor(np.ascontiguousarray(part))
        temps.append(y)
        return y

    def memory_port(self) -> dict | None:
        """The memory port's knobs (:func:`sim.ports.resolve_port`) where known: the
        simulators', or the preset of the board the pynq backend found; else None."""
        from sim.ports import BOARD_PORTS, resolve_port
        if self.backend in ("rtl", "model"):
            return self.sim.port
        board = getattr(getattr(self.driver, "target", None), "board", None)
        return resolve_port(BOARD_PORTS[board]) if board in BOARD_PORTS else None

    def _choose_block(self, m, n, k, ta, tb) -> int:
        info = self.driver.info
        port = self.memory_port()
        if port is None:
            return info.block
        from sim.perfmodel import best_block
        return best_block(m, n, k, ta, tb, rows=info.rows, cols=info.cols, depth=info.depth,
                          block=info.block, data_width=info.data_width, port=port,
                          write_ports=info.write_ports, read_ports=info.read_ports)

    def _run(self, a, b, m, n, k, ta, tb, re, ce, runs, out, temps, as_tensor=False, side=0):
        bpw = self.bytes_per_word
        chunk = self.max_dim // bpw * bpw or self.max_dim
        exact = runs is None
        if exact:
            runs = [(0, k, 0)]
        # (run index, k0, k1, exponent): runs cut into chunks the descriptor can take
        pieces = [(r, k0, min(k0 + chunk, stop), e) for r, (start, stop, e) in enumerate(runs)
                  for k0 in range(start, stop, chunk)]
        single = len(pieces) == 1 and exact
        row = self._exponents(re, temps) if single else 0
        col = self._exponents(ce, temps) if single else 0
        raw = out == "int32" or not single
        counters = {"busy_cycles": 0, "active_cycles": 0, "stall_cycles": 0}
        acc = np.zeros((m, n), np.int64) if not single else None    # the current run's sum
        total = np.zeros((m, n), np.float64) if not exact else None
        result = None
        group = max(1, self.driver.info.queue)
        for g in range(0, len(pieces), group):
            batch = pieces[g:g + group]
            cs = [self.empty((m, n), np.int32 if raw else np.float32) for _ in batch]
            temps.extend(cs)
            descs = []
            with self.profile.time("driver"):
                for (_, k0, k1, _), c in zip(batch, cs, strict=True):
                    a_, b_, j0, j1 = a, b, k0, k1
                    if k0 % bpw and (not ta or tb):   # a K offset inside a row: not aligned
                        with self.profile.time("layout"):
                            a_ = self._k_slice(a, ta, k0, k1, temps)
                            b_ = self._k_slice(b, not tb, k0, k1, temps)
                        j0, j1 = 0, k1 - k0
                    descs += self.driver.descriptors(
                        a_, b_, c, m=m, n=n, k0=j0, k1=j1, transpose_a=ta, transpose_b=tb,
                        row_exp=row, col_exp=col, raw=raw, limit=chunk, block=side)
            cnt = self.driver.run(*descs, profile=self.profile)
            self.stats["descriptors"] += len(descs)
            for key in counters:
                counters[key] += cnt[key]
            if single and as_tensor:            # C stays where the accelerator wrote it
                temps.remove(cs[0])
                result = cs[0]
                break
            parts = [c.numpy() for c in cs]
            if single:
                result = parts[0]
                break
            with self.profile.time("combine"):
                for idx, p in enumerate(parts):
                    r, _, _, e = batch[idx]
                    acc += p
                    last = g + idx + 1 == len(pieces) or pieces[g + idx + 1][0] != r
                    if not exact and last:    # one term per run, in run order
                        with np.errstate(over="ignore"):
                            total += acc.astype(np.float64) * np.exp2(
                                re[:, None] + ce[None, :] + e)
                        acc[...] = 0
        if not single:
            with self.profile.time("combine"), np.errstate(over="ignore"):
                if not exact:
                    result = total.astype(np.float32)
                elif out == "int32":
                    result = acc.astype(np.int32)
                else:
                    result = np.float32(np.float64(acc) * np.exp2(re[:, None] + ce[None, :]))
        cycles = counters["busy_cycles"]
        self.profile.cycles += cycles
        self.stats.update(
            cycles=cycles, active_cycles=counters["active_cycles"],
            dma_stall_cycles=counters["stall_cycles"],
            utilization=m * n * k / (self.rows * self.cols * cycles) if cycles else None)
        return result

    def close(self) -> None:
        """Free every pooled buffer."""
        if self.pool is not None:
            self.pool.trim()


def _shaped(x):
    """``x``, or for a :class:`DeviceTensor` an int8 array of its shape that costs nothing."""
    if isinstance(x, DeviceTensor):
        return np.lib.stride_tricks.as_strided(np.zeros(1, np.int8), x.shape, (0, 0))
    return x


def _int8(e: np.ndarray):
    """``e`` as an exponent argument of :mod:`sim.golden` (a scalar when it is constant)."""
    if np.all(e == e[0]) and golden.EXP_MIN <= e[0] <= golden.EXP_MAX:
        return int(e[0])
    return e.astype(np.int8)
