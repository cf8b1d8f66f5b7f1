"""``firmware.Device``: one GEMM API over the golden model, the simulated RTL and a board.

The result always equals :func:`sim.models.golden.gemm_scaled` (the raw int32 GEMM with
``out="int32"``) bit for bit, whatever the backend:

* ``"golden"``: numpy only, instant; nothing is timed.
* ``"rtl"``: the accelerator's Verilog as a native Verilator model with an AXI memory model
  (:mod:`sim.native`), cycle-accurate, driven by :class:`firmware.runtime.driver.Driver`.
* ``"pynq"``: the same driver over a board through the ``pynq`` package
  (:mod:`firmware.runtime.pynq_backend`).
* ``"model"``: the same driver over :class:`sim.models.functional.FunctionalAccelerator`:
  results from the golden models, cycles from :mod:`firmware.runtime.perfmodel`.

On ``rtl`` and ``pynq`` the product is the accelerator's; the host only copies operands
into device buffers. It adds partial sums only where one descriptor cannot express the GEMM
(a dimension above :data:`MAX_DIM`, or ``k_exp`` with several runs of equal values), timed
as ``combine`` in :attr:`Device.profile`.

Examples
--------
.. code-block:: python

    from firmware import Device
    dev = Device("rtl", rows=16, cols=16, data_width=64, port="zynq7-hp")
    w = dev.tensor(w_q)                       # resident int8 weights
    y = dev.gemm(x_q, w, row_exp=x_e, col_exp=w_e)
    dx = dev.gemm(d_q, w, transpose_b=True, row_exp=d_e, col_exp=w_e)
    dev.stats     # of the last call
    dev.profile   # host time and accelerator cycles, accumulated
"""

from __future__ import annotations

import contextlib
import inspect

import numpy as np

from firmware.runtime.driver import AcceleratorError, Driver
from firmware.runtime.profile import Profile
from firmware.spec import regmap
from sim.models import golden

__all__ = ["Device", "DeviceTensor", "AcceleratorError", "BACKENDS", "MAX_DIM", "POOL_SHARE"]

BACKENDS = ("golden", "rtl", "pynq", "model")

#: Largest M, N or K of one descriptor (16-bit fields of the register map).
MAX_DIM = 65535

#: The share of a board's CMA (:attr:`firmware.runtime.pynq_backend.Target.cma_bytes`) the
#: ``pynq`` backend's buffer pool may hold by default: the rest is left to the program's other
#: buffers and other programs.
POOL_SHARE = 0.5

#: Bytes of C buffers one driver run may hold (beyond the queue's depth of pieces): GEMMs cut
#: into many pieces (``k_exp`` runs, K chunks) run this much at a time.
C_BUDGET = 8 << 20


class _Call:
    """One GEMM of a :meth:`Device.gemms` run: its checked arguments, then its pieces and
    partial results while it runs."""

    def __init__(self, a, b, m, n, k, ta, tb, re, ce, k_exp, runs, out, as_tensor, block):
        self.a, self.b, self.m, self.n, self.k, self.ta, self.tb = a, b, m, n, k, ta, tb
        self.re, self.ce, self.k_exp, self.runs = re, ce, k_exp, runs
        self.out, self.as_tensor, self.block = out, as_tensor, block
        self.turned = False             # run as C^T = op(B)^T op(A)^T (Device._plan)
        self.chunk = 0                  # DESC_FLAGS.CHUNK (Device._plan)
        self.result = None


def _round_up(x: int, to: int) -> int:
    return -(-x // to) * to


class DeviceTensor:
    """A matrix in device memory (on the golden backend, the array itself).

    Made by :meth:`Device.tensor` or :meth:`Device.empty`, or returned by :meth:`Device.gemm`
    with ``as_tensor=True``; any GEMM of the same device takes it in place of an array.

    Attributes
    ----------
    shape : tuple of int
        The matrix's shape.
    dtype : numpy.dtype
        Its element type.
    stride : int
        Bytes between its rows in the buffer: a whole number of bus words, or the row's
        bytes for int8 rows shorter than a bus word (stored packed).
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
        """Overwrite the tensor with ``x``.

        Parameters
        ----------
        x : numpy.ndarray
            Of the tensor's shape and dtype.

        Raises
        ------
        ValueError
            ``x`` has another shape or dtype, or the tensor was freed.
        """
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
        """A host copy of the tensor.

        Raises
        ------
        ValueError
            The tensor was freed.
        """
        self._live()
        if self.buffer is None:
            return self._array
        with self.device.profile.time("layout"):
            self.buffer.invalidate()
            # np.array, not .copy(): a plain ndarray, never the board's buffer class
            return np.array(self._rows()).view(self.dtype).reshape(self.shape)

    def free(self) -> None:
        """Return the buffer to the device's pool; the handle is unusable afterwards."""
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


def _out_of_memory(e: BaseException) -> bool:
    """Whether an allocator's exception says the memory is full: a ``MemoryError``, or the
    ``RuntimeError("BO allocation failed: ...")`` of ``pynq.allocate`` when the CMA is."""
    return isinstance(e, MemoryError) or (isinstance(e, RuntimeError)
                                          and "BO allocation failed" in str(e))


class _Pool:
    """Device buffers kept for reuse, keyed by size (bytes).

    A buffer asked for takes an idle one of its size, else a new one from the memory. Before
    a new buffer would take the bytes held (in use and idle) past ``budget``, idle buffers go
    back to the memory, least recently used first, whatever their size. When the memory is
    full (:func:`_out_of_memory`), every idle buffer goes back and the allocation is tried
    again; if it still fails, a ``MemoryError`` names the bytes asked for, what was freed and
    what stays in use. :meth:`reserve` takes a call's buffers largest first, so that its
    small ones do not split the memory its large one needs.

    Parameters
    ----------
    memory : object
        The driver's memory (``buffer(nbytes)``, ``free(buf)``).
    budget : int, optional
        Bytes the pool may hold before it frees idle buffers; None: as many as the memory
        gives. Buffers in use are never freed: the budget is exceeded when they alone need
        more.
    profile : callable, optional
        Returns the :class:`firmware.runtime.profile.Profile` (the device's, which an engine
        may replace) that counts ``pool_trims`` (idle buffers freed) and
        ``pool_trimmed_bytes``, and keeps ``pool_high_water_bytes``.

    Attributes
    ----------
    live : int
        Buffers in use.
    held : int
        Bytes of the buffers in use and idle.
    high_water : int
        The most bytes held at once.
    """

    def __init__(self, memory, budget: int | None = None, profile=None):
        self.memory, self.budget, self.profile = memory, budget, profile
        self.idle: list = []                  # least recently used first
        self.live = self.held = self.high_water = 0

    def get(self, nbytes: int):
        # the most recently used idle buffer of this size, if any
        i = next((i for i in range(len(self.idle) - 1, -1, -1)
                  if self.idle[i].pool_size == nbytes), None)
        if i is not None:
            buf = self.idle.pop(i)
        else:
            if self.budget is not None:
                self._trim_to(self.budget - nbytes)
            buf = self._allocate(nbytes)
            buf.pool_size = nbytes
            self.held += nbytes
            self.high_water = max(self.high_water, self.held)
            if self.profile is not None:
                counts = self.profile().counts
                counts["pool_high_water_bytes"] = max(
                    counts.get("pool_high_water_bytes", 0), self.held)
        self.live += 1
        return buf

    def _allocate(self, nbytes: int):
        try:
            return self.memory.buffer(nbytes)
        except (MemoryError, RuntimeError) as e:
            if not _out_of_memory(e):
                raise
        buffers, freed = self.idle_buffers, self.trim()
        try:
            return self.memory.buffer(nbytes)
        except (MemoryError, RuntimeError) as e:
            if not _out_of_memory(e):
                raise
            raise MemoryError(
                f"cannot allocate {nbytes} bytes of device memory: the buffer pool gave back "
                f"all its {buffers} idle buffers ({freed} bytes) and still holds {self.held} "
                f"bytes in {self.live} buffers in use (free DeviceTensors no longer needed, "
                f"use smaller batches, or give the board more memory; the allocator said: "
                f"{e})") from e

    def put(self, buf):
        self.live -= 1
        self.idle.append(buf)

    def reserve(self, sizes) -> None:
        """Make buffers of ``sizes`` (bytes, one buffer each) idle and the most recently
        used, for the :meth:`get` calls that follow.

        They are allocated largest first; when the memory cannot hold them all, the ones
        taken go back with every idle buffer and they are allocated again, largest first,
        in the memory that is left: a large buffer taken after small ones can find no room
        that is contiguous although enough bytes are free.

        Parameters
        ----------
        sizes : iterable of int
            The bytes of each buffer.

        Raises
        ------
        MemoryError
            The buffers do not fit at once beside the ones in use (:meth:`get`'s message).
        """
        sizes = sorted(sizes, reverse=True)
        for last in (False, True):
            taken = []
            try:
                for nbytes in sizes:
                    taken.append(self.get(nbytes))
                return
            except MemoryError:
                if last:
                    raise
            finally:
                for buf in reversed(taken):        # the largest ends most recently used
                    self.put(buf)
            self.trim()

    def _free(self, buf):
        free = getattr(self.memory, "free", None)
        if free is not None:
            free(buf)
        elif hasattr(buf, "free"):
            buf.free()
        self.held -= buf.pool_size
        if self.profile is not None:
            self.profile().count("pool_trims")
            self.profile().count("pool_trimmed_bytes", buf.pool_size)

    def _trim_to(self, limit: int) -> None:
        """Free idle buffers, least recently used first, until at most ``limit`` bytes are
        held or none is idle."""
        while self.idle and self.held > limit:
            self._free(self.idle.pop(0))

    def trim(self) -> int:
        """Give every idle buffer back to the memory.

        Returns
        -------
        int
            The bytes freed.
        """
        before = self.held
        for buf in self.idle:
            self._free(buf)
        self.idle = []
        return before - self.held

    @property
    def idle_buffers(self) -> int:
        return len(self.idle)

    def stats(self) -> dict:
        """``pool_bytes`` (held now), ``pool_high_water`` and ``pool_budget``."""
        return {"pool_bytes": self.held, "pool_high_water": self.high_water,
                "pool_budget": self.budget}


def _int_arg(name, v, allow_none=False):
    if v is None and allow_none:
        return
    if not isinstance(v, int) or isinstance(v, bool) or v < 1:
        raise ValueError(f"{name} must be a positive integer, not {v!r}")


class Device:
    """An int8 GEMM accelerator behind one of :data:`BACKENDS`.

    Parameters
    ----------
    backend : {"golden", "rtl", "pynq", "model"}
        Where the GEMMs run (see the module documentation).
    rows, cols : int, optional
        The systolic array's shape. Default 8, or on ``pynq`` the hardware's (checked
        against it when given).
    data_width : {64, 128, 256, 512}, optional
        The memory bus in bits. Default 128, or on ``pynq`` the hardware's.
    max_dim : int
        Every backend but ``golden``: the largest M, N or K of one descriptor (default
        :data:`MAX_DIM`); smaller values exercise the splitting.
    depth, block, packing, queue, write_ports, read_ports : int
        ``rtl`` and ``model``: the hardware configuration
        (:class:`rtl.accelerator.Accelerator`); ``queue`` on ``model`` only.
    dsp_slice : {"DSP48E2", "DSP48E1"}
        ``rtl`` with ``packing=2``: the DSP slice the pairs model.
    slr_groups : int
        ``rtl``: the array's columns in that many SLR groups.
    port : str or dict
        ``rtl`` and ``model``: the memory port's timing, a preset of
        :data:`firmware.spec.ports.PORTS` (default ``"ideal"``) or a dict of knobs.
    burst_beats : int, optional
        ``rtl`` and ``model``: the DMA's longest burst in bus words, which the accelerator
        is built (``rtl``) or predicted (``model``) with. Default: what the port takes
        (:func:`firmware.spec.ports.burst_beats`: 16, or the port's ``max_burst`` where
        shorter).
    latency, pause, seed : optional
        ``rtl``: the port's read latency, its random pauses, their seed.
    memory : int
        ``rtl`` and ``model``: bytes of simulated memory.
    addr_width : int
        ``model``: the address width the registers report.
    board, bitfile, report, base_addr, ip_name, clock_hz :
        ``pynq``: which board and build (:func:`firmware.runtime.pynq_backend.connect`).
    pool_budget : int, optional
        Every backend but ``golden``: bytes of device buffers the pool may hold (in use and
        idle) before it gives idle ones back, least recently used first. Default on ``pynq``
        :data:`POOL_SHARE` of the board's CMA
        (:attr:`firmware.runtime.pynq_backend.Target.cma_bytes`), elsewhere no limit but the
        simulated memory's. Whatever the budget, a full memory makes the pool give back every
        idle buffer and try again.

    Attributes
    ----------
    stats : dict
        The last call's MACs, descriptors, cycles, utilisation, block, chunk and transpose;
        and the buffer pool's bytes: ``pool_bytes`` held after the call, ``pool_high_water``
        (the most held at once since the device was made) and ``pool_budget``.
    profile : firmware.runtime.profile.Profile
        Host time by kind and accelerator cycles, accumulated over calls; its ``counts``
        have the pool's ``pool_high_water_bytes``, and ``pool_trims`` / ``pool_trimmed_bytes``
        (idle buffers given back to the memory).
    driver : firmware.runtime.driver.Driver or None
        The register-level driver (None on ``golden``).
    dma_burst : int or None
        The DMA's longest burst the schedule is planned with: the one built (``rtl``),
        configured (``model``) or the board's port takes (``pynq``); None on ``golden``.

    Raises
    ------
    ValueError
        An unknown backend, a bad ``rows``, ``cols``, ``data_width``, ``max_dim`` or
        ``pool_budget``, a board whose hardware differs from what was asked, or a
        ``burst_beats`` longer than the port takes (naming both lengths).
    TypeError
        An option the backend does not take.
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
        pool_budget = options.pop("pool_budget", None)
        if pool_budget is not None and (not isinstance(pool_budget, int)
                                        or isinstance(pool_budget, bool) or pool_budget < 1):
            raise ValueError(f"pool_budget must be a positive number of bytes or None, not "
                             f"{pool_budget!r}")
        if backend == "golden" and pool_budget is not None:
            raise TypeError("the golden backend takes no options, not ['pool_budget'] (it has "
                            "no device memory)")
        self.backend = backend
        self.stats: dict = {}
        self.profile = Profile()
        self._recording = None          # a Program while Device.record() collects one
        self.driver = None
        self.dma_burst = None
        if backend == "pynq":
            from firmware.runtime.pynq_backend import connect
            self.driver = connect(**options)
            info = self.driver.info
            want = (rows or info.rows, cols or info.cols, data_width or info.data_width)
            if (info.rows, info.cols, info.data_width) != want:
                raise ValueError(f"the board has a {info.rows}x{info.cols} array on a "
                                 f"{info.data_width}-bit bus, not {want[0]}x{want[1]} on "
                                 f"{want[2]} bits")
            rows, cols, data_width = info.rows, info.cols, info.data_width
            if pool_budget is None:
                pool_budget = int(POOL_SHARE * self.driver.target.cma_bytes)
            from firmware.spec.ports import BOARD_PORTS, burst_beats
            board = getattr(self.driver.target, "board", None)
            # the bitstream's burst length, from CONFIG_DMA; checked against the board's port
            # before any GEMM runs
            self.dma_burst = info.burst_beats
            if board in BOARD_PORTS:
                burst_beats(BOARD_PORTS[board], self.dma_burst)
        rows, cols, data_width = rows or 8, cols or 8, data_width or 128
        self.rows, self.cols, self.data_width = rows, cols, data_width
        if backend == "rtl":
            allowed = {"depth", "block", "packing", "port", "latency", "pause", "memory",
                       "seed", "write_ports", "read_ports", "slr_groups", "dsp_slice",
                       "burst_beats", "k_blocks", "epilogue", "sgd", "conv",
                       "unfold"}
            unknown = set(options) - allowed
            if unknown:
                raise TypeError(f"unknown option(s) for the rtl backend: {sorted(unknown)}; "
                                f"valid: {sorted(allowed)}")
            from sim.native import NativeSim
            self.sim = NativeSim(rows=rows, cols=cols, data_width=data_width, **options)
            self.dma_burst = self.sim.params["burst_beats"]
            self.driver = Driver(_SimRegs(self.sim), _SimMemory(self.sim))
        elif backend == "model":
            allowed = {"depth", "block", "packing", "queue", "port", "memory", "addr_width",
                       "write_ports", "read_ports", "burst_beats", "epilogue"}
            unknown = set(options) - allowed
            if unknown:
                raise TypeError(f"unknown option(s) for the model backend: {sorted(unknown)}; "
                                f"valid: {sorted(allowed)}")
            from functools import partial

            from firmware.runtime.perfmodel import predict, predict_quantize
            from firmware.spec.ports import burst_beats
            from sim.models.functional import FunctionalAccelerator
            self.dma_burst = burst_beats(options.get("port", "ideal"),
                                         options.pop("burst_beats", None))
            self.sim = FunctionalAccelerator(rows=rows, cols=cols, data_width=data_width,
                                             burst_beats=self.dma_burst,
                                             predict=partial(predict, dma_burst=self.dma_burst),
                                             predict_quantize=partial(
                                                 predict_quantize, dma_burst=self.dma_burst),
                                             **options)
            self.driver = Driver(_SimRegs(self.sim), _SimMemory(self.sim))
        elif backend == "golden" and options:
            raise TypeError(f"the golden backend takes no options, not {sorted(options)}")
        self.pool = _Pool(self.driver.memory, pool_budget, lambda: self.profile) if self.driver \
            else None
        self.bytes_per_word = data_width // 8

    # -- device memory -----------------------------------------------------------------------
    def _release(self, buf):
        self.pool.put(buf)

    def empty(self, shape, dtype=np.int8) -> DeviceTensor:
        """An uninitialised device matrix.

        Parameters
        ----------
        shape : tuple of int
            Rows and columns, each at least 1.
        dtype : numpy.dtype
            The element type.

        Returns
        -------
        DeviceTensor
            Rows a whole number of bus words apart, or ``shape[1]`` bytes apart for an int8
            matrix of rows shorter than a bus word (stored packed).

        Raises
        ------
        ValueError
            ``shape`` is not two positive integers.
        """
        shape = tuple(int(s) for s in shape)
        if len(shape) != 2 or min(shape) < 1:
            raise ValueError(f"shape must be two positive integers, not {shape}")
        dtype = np.dtype(dtype)
        if self.driver is None:
            return DeviceTensor(self, shape, dtype, array=np.empty(shape, dtype))
        stride = self._stride(shape, dtype)
        buf = self.pool.get(shape[0] * stride)
        return DeviceTensor(self, shape, dtype, buf, stride)

    def _stride(self, shape, dtype) -> int:
        """Bytes between the rows of a device matrix of ``shape`` and ``dtype``."""
        itemsize = np.dtype(dtype).itemsize
        if regmap.stored_packed(shape[1], itemsize, self.bytes_per_word):
            # an int8 operand of rows shorter than a bus word is stored packed: one run of
            # words read for all its rows, not a word a row (rtl.loader.LoadSequencer)
            return shape[1]
        return _round_up(shape[1] * itemsize, self.bytes_per_word)

    def _bytes(self, shape, dtype) -> int:
        """The pool bytes of a device matrix of ``shape`` and ``dtype`` (:meth:`empty`)."""
        return shape[0] * self._stride(shape, dtype)

    def tensor(self, x: np.ndarray, *, into: DeviceTensor | None = None) -> DeviceTensor:
        """Copy a matrix into device memory.

        Parameters
        ----------
        x : numpy.ndarray
            A non-empty matrix (int8 for a GEMM operand); a vector is taken as one row.
        into : DeviceTensor, optional
            A tensor of this device, of ``x``'s shape and dtype, to overwrite instead of
            allocating one.

        Returns
        -------
        DeviceTensor

        Raises
        ------
        TypeError
            ``x`` is not a numpy array.
        ValueError
            ``x`` is empty or has more than two dimensions, or ``into`` is not a tensor of
            this device of ``x``'s shape and dtype.
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
        """``C = op(A) op(B)``, rescaled to float32 or raw int32.

        Parameters
        ----------
        a, b : numpy.ndarray or DeviceTensor
            int8 matrices.
        transpose_a, transpose_b : bool
            Use ``A^T`` (``B^T``): ``a`` is stored K x M (``b`` N x K).
        row_exp, col_exp : int or numpy.ndarray
            int8 exponents, a scalar or one per row of C (per column of C).
        k_exp : numpy.ndarray, optional
            One exponent per k: blocks along the reduction axis
            (:func:`sim.models.golden.gemm_scaled`); only with ``out="float32"``.
        out : {"float32", "int32"}
            :func:`sim.models.golden.gemm_scaled` as float32, or the exact int32 GEMM.
        as_tensor : bool
            Leave C in device memory and return it as a :class:`DeviceTensor`.
        block : int, optional
            The side, in C tiles, of the blocks C is walked in (1 to the hardware's
            ``CONFIG_BUFFER.BLOCK_LOG2``). None: :func:`firmware.runtime.perfmodel.best_plan`
            chooses it for the device's memory port, with whether to run the GEMM as its
            transpose ``C^T = op(B)^T op(A)^T`` (never with ``as_tensor``) and the K chunk
            (:func:`firmware.runtime.perfmodel.best_chunk`); the hardware's largest block
            where the port is unknown. The choice changes the time, never the result.

        Returns
        -------
        numpy.ndarray or DeviceTensor
            C, M x N, row-major. :attr:`stats` says how it ran (``block``, ``transposed``,
            ``chunk``, ``cycles``...).

        Raises
        ------
        TypeError
            An operand is not an int8 matrix, a flag not a bool, an exponent not int8.
        ValueError
            Shapes do not match, a dimension is 0, K above :data:`sim.models.golden.MAX_K`, an
            exponent vector has the wrong length, ``k_exp`` with ``out="int32"``, ``out`` is
            not ``"float32"`` / ``"int32"``, or ``block`` is outside ``1..`` the hardware's.
        AcceleratorError
            The hardware reported an error code.

        See Also
        --------
        gemms : several independent GEMMs queued together, faster.
        """
        return self._gemms([dict(a=a, b=b, transpose_a=transpose_a, transpose_b=transpose_b,
                                 row_exp=row_exp, col_exp=col_exp, k_exp=k_exp, out=out,
                                 as_tensor=as_tensor, block=block)], single=True)[0]

    def gemms(self, calls) -> list:
        """Several independent GEMMs queued on the accelerator together.

        Each call's descriptors go to the queue back to back with ``DESC_FLAGS.OVERLAP``, so
        a GEMM's loads run under the last C rows of the one before; a call after the first
        takes its block from the queued prediction. Every call is checked before any runs.

        Parameters
        ----------
        calls : sequence of dict
            Each the keyword arguments of one :meth:`gemm`, ``a`` and ``b`` included.

        Returns
        -------
        list
            The results in order, each bit for bit what :meth:`gemm` returns for its call.
            :attr:`stats` covers the whole run, with ``gemms``: each call's shape and block.

        Raises
        ------
        TypeError
            ``calls`` is not a sequence of dicts, or as :meth:`gemm` (the message names the
            call, ``calls[i]``).
        ValueError
            ``calls`` is empty, or as :meth:`gemm`.

        Examples
        --------
        A layer's weight gradient and backward-data GEMMs::

            dw, dx = dev.gemms([dict(a=x, b=d, transpose_a=True),
                                dict(a=d, b=w, transpose_b=True)])
        """
        if isinstance(calls, dict) or not isinstance(calls, (list, tuple)):
            raise TypeError(f"calls must be a list of dicts (gemm's keyword arguments), not "
                            f"{type(calls).__name__}")
        if not calls:
            raise ValueError("calls must name at least one GEMM")
        for i, call in enumerate(calls):
            if not isinstance(call, dict):
                raise TypeError(f"calls[{i}] must be a dict of gemm's keyword arguments, not "
                                f"{type(call).__name__}")
            unknown = set(call) - _GEMM_ARGS
            if unknown:
                raise TypeError(f"calls[{i}] has unknown argument(s) {sorted(unknown)}; "
                                f"valid: {sorted(_GEMM_ARGS)}")
            missing = {"a", "b"} - set(call)
            if missing:
                raise TypeError(f"calls[{i}] needs {sorted(missing)}")
        return self._gemms([{**_GEMM_DEFAULTS, **call} for call in calls], single=False)

    def _check(self, a, b, transpose_a, transpose_b, row_exp, col_exp, k_exp, out,
               as_tensor, block) -> _Call:
        """One GEMM's arguments checked and normalised (nothing allocated)."""
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
        return _Call(a, b, m, n, k, bool(transpose_a), bool(transpose_b), re, ce, k_exp, runs,
                     out, as_tensor, block)

    def _golden(self, c: _Call):
        """The golden model standing in for the hardware."""
        a_ = c.a.numpy() if isinstance(c.a, DeviceTensor) else c.a
        b_ = c.b.numpy() if isinstance(c.b, DeviceTensor) else c.b
        if c.out == "int32":
            r = golden.gemm(a_, b_, c.ta, c.tb)
        else:
            r = golden.gemm_scaled(a_, b_, c.ta, c.tb, _int8(c.re), _int8(c.ce),
                                   c.k_exp if c.runs is not None else None)
        return DeviceTensor(self, r.shape, r.dtype, array=r) if c.as_tensor else r

    def _gemms(self, kwargs: list[dict], single: bool) -> list:
        calls = []
        for i, kw in enumerate(kwargs):
            try:
                calls.append(self._check(**kw))
            except (TypeError, ValueError) as e:
                if single:
                    raise
                raise type(e)(f"calls[{i}]: {e}") from e
        self.stats = {"backend": self.backend, "macs": sum(c.m * c.n * c.k for c in calls),
                      "descriptors": 0, "cycles": None, "utilization": None,
                      "dma_stall_cycles": None}
        if single:
            c = calls[0]
            self.stats.update(m=c.m, n=c.n, k=c.k, block=None, transposed=False)
        else:
            self.stats["gemms"] = [dict(m=c.m, n=c.n, k=c.k, block=None, transposed=False)
                                   for c in calls]
        if self.driver is None:
            with self.profile.time("wait"):
                return [self._golden(c) for c in calls]
        self.profile.count("gemms", len(calls))
        for i, c in enumerate(calls):
            if c.block is None:            # behind the GEMM before it: chosen queued
                self._plan(c, queued=i > 0)
            (self.stats if single else self.stats["gemms"][i]).update(
                block=int(c.block), transposed=c.turned, chunk=int(c.chunk))
            self._cut(c)
        temps = []
        try:
            # every buffer of the run's start, largest first, then taken from the pool
            self.pool.reserve(self._start_bytes(calls))
            for c in calls:
                if not isinstance(c.a, DeviceTensor):
                    c.a = self.tensor(c.a)
                    temps.append(c.a)
                if not isinstance(c.b, DeviceTensor):
                    c.b = self.tensor(c.b)
                    temps.append(c.b)
            results = self._run(calls, temps)
            for i, c in enumerate(calls):
                if c.turned:
                    # C^T was written: C is its transpose, made row-major as an unturned
                    # result is. (A transposed view holds the same values, but numpy's float
                    # reductions sum in memory order, so the host's float work on it rounded
                    # differently: training on the simulated Pynq-Z1 left the golden backend's
                    # weights.)
                    c.result = results[i] = np.ascontiguousarray(results[i].T)
            for i, (c, r) in enumerate(zip(calls, results, strict=True)):
                if c.as_tensor and not isinstance(r, DeviceTensor):     # combined on the host
                    c.result = results[i] = self.tensor(r)
            return results
        except BaseException:        # C buffers already handed to results go back too
            for c in calls:
                if isinstance(c.result, DeviceTensor):
                    c.result.free()
            raise
        finally:
            for t in temps:
                t.free()
            self.stats.update(self.pool.stats())

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

    # -- BFP8 tile blocks, kept on the device ---------------------------------------------------
    def quantize(self, x, *, rounding: str = "nearest", seed: int = 0, unfold=None):
        """Quantise a float32 matrix to BFP8 tile blocks on the device.

        One quantise-only descriptor (``DESC_EPILOGUE.QUANTIZE_ONLY``): the input batch or
        the loss gradient enters the device's number format without host quantisation.
        With ``unfold``, the matrix quantised is the convolution's input unfolded
        (:func:`sim.models.conv.unfold`, read so by the device: ``DESC_CONV.MODE`` 1,
        ``CONFIG_FEATURES.UNFOLD``), which makes a layer of few input channels one plain
        GEMM of ``Cin * kh * kw`` reduction rows instead of ``kh * kw`` short K runs.

        Parameters
        ----------
        x : numpy.ndarray or DeviceTensor
            A float32 matrix.
        rounding : {"nearest", "stochastic"}
            :func:`sim.models.bfp.quantize_tiles`'s rounding.
        seed : int
            The 64-bit seed of stochastic rounding (``DESC_SEED``).
        unfold : sim.models.conv.ConvGeometry, optional
            ``x`` is this convolution's ``Cin x H*W*batch`` input; its batch a multiple of
            :data:`firmware.spec.regmap.TILE_BLOCK`.

        Returns
        -------
        firmware.runtime.epilogue.BfpTensor
            Bit for bit :func:`sim.models.bfp.quantize_tiles` of ``x`` (with ``unfold``, of
            ``sim.models.conv.unfold(x, unfold)``: ``Cin * kh * kw x OH*OW*batch``).

        Raises
        ------
        TypeError
            ``x`` is not a float32 matrix (with ``unfold``, the geometry's input);
            ``unfold`` is not a :class:`sim.models.conv.ConvGeometry`.
        ValueError
            ``rounding`` or ``seed`` is out of range; a dimension above :data:`MAX_DIM`; on
            the golden backend, ``x`` holds inf or NaN; ``unfold``'s batch is not whole
            tile blocks or a field exceeds ``DESC_CONV``'s, or on the RTL its input or
            output positions exceed 65535.
        RuntimeError
            The accelerator has no epilogue (``CONFIG_FEATURES``), or with ``unfold`` does
            not unfold (``CONFIG_FEATURES.UNFOLD``).
        AcceleratorError
            The hardware reported an error (``NONFINITE`` for inf or NaN in ``x``).
        """
        from firmware.runtime import epilogue
        return epilogue.quantize(self, x, rounding=rounding, seed=seed, unfold=unfold)

    def bfp_tensor(self, q: np.ndarray, exp: np.ndarray):
        """Copy a matrix already in BFP8 tile blocks (mantissas and exponent grid) to the
        device.

        Parameters
        ----------
        q : numpy.ndarray of int8
            Mantissas, M x N.
        exp : numpy.ndarray of int8
            The tile exponents, shape ``sim.models.bfp.tile_grid((M, N))``.

        Returns
        -------
        firmware.runtime.epilogue.BfpTensor

        Raises
        ------
        TypeError, ValueError
            ``q`` or ``exp`` has the wrong dtype or shape.
        """
        from firmware.runtime import epilogue
        return epilogue.upload(self, q, exp)

    def offers_chains(self) -> bool:
        """Whether :meth:`record` works here: descriptor chains (``CONFIG_FEATURES.CHAIN``)."""
        return self.driver is not None and self.driver.info.chain

    @contextlib.contextmanager
    def record(self):
        """Record the descriptors that the calls keeping tensors on the device make
        (:meth:`quantize`, :meth:`bfp_gemm`, :meth:`sgd_update`, :meth:`conv2d` and its
        backward passes) as a :class:`firmware.runtime.program.Program`, instead of running
        them: replay it with :meth:`~firmware.runtime.program.Program.run`, one doorbell
        for the whole sequence.

        Inside the block the calls return their output tensors as usual, but nothing is
        computed until a replay: read none of them there.

        Yields
        ------
        firmware.runtime.program.Program
            Finished (its chain written to device memory) when the block ends without an
            exception.

        Raises
        ------
        RuntimeError
            The device runs no descriptor chains (``CONFIG_FEATURES.CHAIN``; the ``golden``
            backend has none), or is recording already.

        Examples
        --------
        >>> dev = Device("model")
        >>> x = dev.tensor(np.ones((4, 40), np.float32))
        >>> with dev.record() as prog:
        ...     q = dev.quantize(x)
        >>> _ = prog.run()
        >>> q.numpy()[0, :2]
        array([1., 1.], dtype=float32)
        """
        from firmware.runtime.program import Program
        if not self.offers_chains():
            raise RuntimeError(f"this {self.backend} accelerator runs no descriptor chains "
                               f"(CONFIG_FEATURES.CHAIN): run the calls one by one")
        if self._recording is not None:
            raise RuntimeError("this device is recording already")
        prog = self._recording = Program(self)
        self.driver.recording = True
        try:
            yield prog
        finally:
            self._recording, self.driver.recording = None, False
        prog.finish()

    def bfp_stack(self, q: np.ndarray, exp: np.ndarray):
        """Copy a convolution's weights in BFP8 (one tile-blocked ``Cout x Cin`` matrix per
        kernel offset, :func:`sim.models.conv.weight_stack`) to the device.

        Parameters
        ----------
        q : numpy.ndarray of int8, shape (offsets, Cout, Cin)
        exp : numpy.ndarray of int8, shape (offsets, ceil(Cout/T), ceil(Cin/T))

        Returns
        -------
        firmware.runtime.convolution.BfpStack

        Raises
        ------
        TypeError, ValueError
            ``q`` or ``exp`` has the wrong dtype or shape.
        """
        from firmware.runtime import convolution
        return convolution.upload_stack(self, q, exp)

    def conv2d(self, x, w, geometry, *, bias=None, relu: bool = False, pool=None, add=None,
               out: str = "bfp8", rounding: str = "nearest", seed: int = 0):
        """A convolution's forward pass as one implicit-GEMM descriptor (``DESC_CONV``
        mode 1): no im2col, padding read as zeros; optionally pooled on the write path.

        Parameters
        ----------
        x : BfpTensor
            The input, ``Cin x H*W*N`` in the ``CHWN`` layout (:mod:`sim.models.conv`).
        w : firmware.runtime.convolution.BfpStack
            The weights (:meth:`bfp_stack`).
        geometry : sim.models.conv.ConvGeometry
            Kernel up to 15, stride and dilation up to 7, padding up to 15.
        bias, relu, out, rounding, seed :
            As :meth:`bfp_gemm` takes them; the bias is one value per output channel.
        pool : sim.models.conv.Pooling, optional
            Max or average pooling after ReLU (``DESC_POOL`` mode 1), its geometry's input
            this convolution's output; window and stride up to 15.
        add : BfpTensor, optional
            ``Cout x OH*OW*N`` added before the bias (``DESC_CONV.ADD``): a residual
            connection's shortcut, so that ReLU sees the sum.

        Returns
        -------
        BfpTensor or DeviceTensor, then a MaskTensor with ``relu``, then with a max pool its
        argmax (a uint8 DeviceTensor, the pooled shape)
            ``Cout x OH*OW*N`` (or the pool's output), the next layer's input as written:
            :func:`sim.models.conv.conv_epilogue` of
            :func:`sim.models.conv.conv2d_forward`. ReLU's mask is the pool's input's.

        Raises
        ------
        TypeError, ValueError
            Bad operands, geometry or options (naming them).
        RuntimeError
            The accelerator has no convolution descriptors (``CONFIG_FEATURES.CONV``),
            no pooling stage (``CONFIG_FEATURES.POOL``) or no residual sum
            (``CONFIG_FEATURES.ADD``).
        """
        from firmware.runtime import convolution
        return convolution.conv2d(self, x, w, geometry, bias=bias, relu=relu, pool=pool,
                                  add=add, out=out, rounding=rounding, seed=seed)

    def conv2d_backward_data(self, d, w, geometry, *, mask_in=None, unpool=None, argmax=None,
                             add=None, out: str = "bfp8", rounding: str = "nearest",
                             seed: int = 0):
        """A convolution's backward-data pass as one implicit-GEMM descriptor (``DESC_CONV``
        mode 2): the deltas convolved with the 180-degree-rotated kernel, channel roles
        swapped, no col2im and no inserted zeros; optionally routed back through the pool
        below on the write path.

        Parameters
        ----------
        d : BfpTensor
            The output's deltas, ``Cout x OH*OW*N``.
        w : firmware.runtime.convolution.BfpStack
        geometry : sim.models.conv.ConvGeometry
        mask_in, out, rounding, seed :
            As :meth:`bfp_gemm` takes them (the layer below's ReLU mask, ``Cin x H*W*N``,
            or the pool's input's with ``unpool``).
        unpool : sim.models.conv.Pooling, optional
            The pool below (``DESC_POOL`` mode 2), its geometry's output this convolution's
            input: the deltas leave in the pool's input layout.
        argmax : DeviceTensor, optional
            A max pool's argmax, as :meth:`conv2d` wrote it.
        add : BfpTensor, optional
            ``Cin x H*W*N`` (the pool's input with ``unpool``) added before the mask
            (``DESC_CONV.ADD``): the deltas another path gives the same input, such as a
            residual connection's shortcut.

        Returns
        -------
        BfpTensor or DeviceTensor
            ``Cin x H*W*N`` (or the pool's input):
            :func:`sim.models.conv.conv_epilogue` of
            :func:`sim.models.conv.conv2d_backward_data`.

        Raises
        ------
        TypeError, ValueError, RuntimeError
            As :meth:`conv2d`.
        """
        from firmware.runtime import convolution
        return convolution.conv2d_backward_data(self, d, w, geometry, mask_in=mask_in,
                                                unpool=unpool, argmax=argmax, add=add,
                                                out=out, rounding=rounding, seed=seed)

    def conv2d_weight_grad(self, d, x, geometry):
        """A convolution's weight gradient as one implicit-GEMM descriptor (``DESC_CONV``
        mode 3): ``D * im2col(X)^T`` with K the output positions, no im2col.

        Parameters
        ----------
        d : BfpTensor
            The output's deltas, ``Cout x OH*OW*N``.
        x : BfpTensor
            The forward input, ``Cin x H*W*N``.
        geometry : sim.models.conv.ConvGeometry

        Returns
        -------
        DeviceTensor
            float32, ``kh*kw*Cout x Cin``: :func:`sim.models.conv.conv2d_weight_grad`'s
            stack, its matrices one after another.

        Raises
        ------
        TypeError, ValueError, RuntimeError
            As :meth:`conv2d`.
        """
        from firmware.runtime import convolution
        return convolution.conv2d_weight_grad(self, d, x, geometry)

    def conv2d_sgd_update(self, d, x, target, geometry, *, lr, weight_decay=0.0,
                          rounding: str = "nearest", seed: int = 0, bias=None) -> None:
        """One SGD step of a convolution's weights in place, the weight gradient
        (:meth:`conv2d_weight_grad`) never leaving the device (``DESC_CONV`` mode 3 with
        ``DESC_EPILOGUE.SGD``).

        Parameters
        ----------
        d, x, geometry :
            As :meth:`conv2d_weight_grad`.
        target : BfpStack or DeviceTensor
            The weights (:meth:`bfp_stack`): stepped with
            :func:`sim.models.bfp.sgd_step` and quantised again
            (:func:`sim.models.conv.quantize_stack`); or a float32 ``kh*kw*Cout x Cin``
            matrix (a 1x1 geometry's against a row of ones steps a bias row).
        lr, weight_decay, rounding, seed :
            As :meth:`sgd_update`.
        bias : DeviceTensor, optional
            The layer's float32 ``1 x Cout`` bias row, stepped in the same descriptor
            (``DESC_CONV.BIAS_GRAD``) with the same learning rate and weight decay by its
            gradient, the sums of ``d``'s rows (:func:`sim.models.conv.bias_grad`): bit for
            bit the step of a 1 x 1 weight gradient against a row of ones, without reading
            ``d`` again.

        Raises
        ------
        TypeError, ValueError, RuntimeError
            As :meth:`conv2d` and :meth:`sgd_update`; RuntimeError also for ``bias`` on an
            accelerator without ``CONFIG_FEATURES.BIAS_GRAD``.
        """
        from firmware.runtime import convolution
        convolution.conv2d_sgd_update(self, d, x, target, geometry, lr=lr,
                                      weight_decay=weight_decay, rounding=rounding, seed=seed,
                                      bias=bias)

    def sgd_update(self, a, b, target, *, lr, weight_decay=0.0, transpose_a: bool = False,
                   transpose_b: bool = False, rounding: str = "nearest", seed: int = 0):
        """One SGD step of ``target`` in place, its gradient ``op(A) op(B)`` never leaving
        the device (``DESC_EPILOGUE.SGD``).

        The gradient is computed as :meth:`bfp_gemm` computes it; then, per element,
        ``target = target - lr * (G + weight_decay * target)``
        (:func:`sim.models.bfp.sgd_step`), a BFP8 target dequantised first and quantised
        again with ``rounding`` (SWALP's 8-bit SGD), a float32 one (a bias) kept in
        float32. The learning rate is the descriptor's: a schedule stays on the host.

        Parameters
        ----------
        a, b : firmware.runtime.epilogue.BfpTensor
            ``op(a)`` is M x K, ``op(b)`` K x N: the gradient's factors.
        target : BfpTensor or DeviceTensor
            The M x N weights (BFP8 tile blocks) or a float32 matrix, updated in place.
        lr, weight_decay : float
            Rounded to float32.
        transpose_a, transpose_b : bool
        rounding : {"nearest", "stochastic"}
            A BFP8 target's quantiser.
        seed : int
            The 64-bit seed of stochastic rounding.

        Raises
        ------
        TypeError, ValueError
            A bad argument, named in the message.
        RuntimeError
            The accelerator does not offer ``SGD`` (``CONFIG_FEATURES.OPS``).
        AcceleratorError
            The hardware reported an error (``NONFINITE`` where the weights cannot be
            quantised).
        """
        from firmware.runtime import epilogue
        epilogue.sgd_update(self, a, b, target, lr=lr, weight_decay=weight_decay,
                            transpose_a=transpose_a, transpose_b=transpose_b,
                            rounding=rounding, seed=seed)

    def bfp_gemm(self, a, b, *, transpose_a: bool = False, transpose_b: bool = False,
                 bias=None, bias_axis: str = "col", relu: bool = False, mask_in=None,
                 out: str = "bfp8", rounding: str = "nearest", seed: int = 0):
        """``C = op(A) op(B)`` of two BFP8 tensors, through the write-back epilogue, kept on
        the device.

        One descriptor with tile exponents along K (``DESC_EPILOGUE.A_TILES``, ``B_TILES``):
        each K block's exact int32 partial is rescaled once and accumulated in float32
        (:func:`sim.models.bfp.gemm_kblocks`); then :func:`sim.models.bfp.epilogue`: the
        bias, ReLU and its mask, a stored mask, and BFP8 or float32 output.

        Parameters
        ----------
        a, b : firmware.runtime.epilogue.BfpTensor
            ``op(a)`` is M x K, ``op(b)`` K x N.
        transpose_a, transpose_b : bool
            Read the operand transposed (its exponent grid with it).
        bias : numpy.ndarray or DeviceTensor of float32, optional
            One value per row of C (``bias_axis="row"``) or per column (``"col"``).
        bias_axis : {"row", "col"}
        relu : bool
            Apply ReLU; the call then also returns its mask.
        mask_in : firmware.runtime.epilogue.MaskTensor, optional
            Zero C where this mask is 0 (ReLU's backward pass). Not with ``relu``.
        out : {"bfp8", "float32"}
            C as BFP8 tile blocks (:class:`~firmware.runtime.epilogue.BfpTensor`) or as a
            float32 :class:`DeviceTensor` (a weight gradient for the optimiser).
        rounding : {"nearest", "stochastic"}
        seed : int
            The 64-bit seed of stochastic rounding.

        Returns
        -------
        BfpTensor or DeviceTensor, or a tuple of it and a MaskTensor (with ``relu``)
            Bit for bit what :mod:`sim.models.bfp` computes, on every backend.

        Raises
        ------
        TypeError
            An operand is not a BfpTensor, a flag is not a bool, the bias is not float32.
        ValueError
            Shapes do not match; an option is out of range; ``relu`` with ``mask_in``.
        RuntimeError
            The accelerator has no epilogue or tile exponents (``CONFIG_FEATURES``).
        AcceleratorError
            The hardware reported an error (``NONFINITE`` where C cannot be quantised).
        """
        from firmware.runtime import epilogue
        return epilogue.bfp_gemm(self, a, b, transpose_a=transpose_a, transpose_b=transpose_b,
                                 bias=bias, bias_axis=bias_axis, relu=relu, mask_in=mask_in,
                                 out=out, rounding=rounding, seed=seed)

    def memory_port(self) -> dict | None:
        """The memory port the schedule is planned for.

        Returns
        -------
        dict or None
            The port's knobs (:func:`firmware.spec.ports.resolve_port`): the simulator's, or
            the preset of the board the pynq backend found; None where unknown.
        """
        from firmware.spec.ports import BOARD_PORTS, resolve_port
        if self.backend in ("rtl", "model"):
            return self.sim.port
        board = getattr(getattr(self.driver, "target", None), "board", None)
        return resolve_port(BOARD_PORTS[board]) if board in BOARD_PORTS else None

    def _plan(self, c: _Call, queued=False) -> None:
        """``c``'s block, chunk and whether it runs as its transpose
        (:func:`firmware.runtime.perfmodel.best_plan` for the device's memory port; the
        hardware's largest block where the port is unknown). A transposed call (never one
        kept ``as_tensor``) has its operands, shape, flags and exponents turned here; its
        result is turned back after the run."""
        info = self.driver.info
        port = self.memory_port()
        if port is None:
            c.block = info.block
            return
        from firmware.runtime.perfmodel import best_block, best_chunk, best_plan, run_shape
        config = dict(rows=info.rows, cols=info.cols, depth=info.depth, block=info.block,
                      data_width=info.data_width, port=port, write_ports=info.write_ports,
                      read_ports=info.read_ports, queued=queued, dma_burst=self.dma_burst)
        if c.as_tensor:                # C stays in device memory as written: never turned
            c.block = best_block(c.m, c.n, c.k, c.ta, c.tb, **config)
        else:
            c.turned, c.block = best_plan(c.m, c.n, c.k, c.ta, c.tb, **config)
        if c.turned:
            c.m, c.n, _, c.ta, c.tb = run_shape(c.m, c.n, c.k, c.ta, c.tb, True)
            c.a, c.b, c.re, c.ce = c.b, c.a, c.ce, c.re
        c.chunk = best_chunk(c.m, c.n, c.k, c.ta, c.tb, **{**config, "block": c.block})

    def _run(self, calls: list[_Call], temps: list) -> list:
        """Every call's descriptors, queued back to back; returns the calls' results in order.

        One driver run takes pieces until their C buffers pass :data:`C_BUDGET` bytes (at
        least the queue's depth of pieces); the driver feeds the queue as it drains (a poll
        away: the queue may run dry between polls). Between runs the accelerator waits while
        the host reads and combines C.

        A call is one descriptor set (``single``) when one chunk of K covers it and ``k_exp``
        has one run; else each chunk of each run is a raw int32 piece of its own C buffer,
        combined on the host in order (int64 within a run, float64 across runs).
        """
        items = []                                # (call, piece index)
        for c in calls:
            exact = c.runs is None
            c.row = self._exponents(c.re, temps) if c.single else 0
            c.col = self._exponents(c.ce, temps) if c.single else 0
            c.raw = c.out == "int32" or not c.single
            c.acc = None if c.single else np.zeros((c.m, c.n), np.int64)  # the run's sum
            c.total = None if exact else np.zeros((c.m, c.n), np.float64)
            items += [(c, i) for i in range(len(c.pieces))]
        counters = {"busy_cycles": 0, "active_cycles": 0, "stall_cycles": 0}
        for batch in _batches(items, max(1, self.driver.info.queue), C_BUDGET):
            cs = [self.empty((c.m, c.n), np.int32 if c.raw else np.float32) for c, _ in batch]
            descs = []
            try:
                with self.profile.time("driver"):
                    for (call, i), c in zip(batch, cs, strict=True):
                        descs += self._descriptors(call, call.pieces[i], c, temps)
                cnt = self.driver.run(*descs, profile=self.profile)
                self.stats["descriptors"] += len(descs)
                for key in counters:
                    counters[key] += cnt[key]
                for j, ((call, i), c) in enumerate(zip(batch, cs, strict=True)):
                    if call.single and call.as_tensor:   # C stays where it was written
                        call.result, cs[j] = c, None
                    elif call.single:
                        call.result = c.numpy()
                    else:
                        with self.profile.time("combine"):
                            self._combine(call, i, c.numpy())
            finally:
                for c in cs:
                    if c is not None:
                        c.free()
        for c in calls:
            if not c.single:
                with self.profile.time("combine"), np.errstate(over="ignore"):
                    if c.runs is not None:
                        c.result = c.total.astype(np.float32)
                    elif c.out == "int32":
                        c.result = c.acc.astype(np.int32)
                    else:
                        c.result = np.float32(np.float64(c.acc)
                                              * np.exp2(c.re[:, None] + c.ce[None, :]))
        cycles = counters["busy_cycles"]
        self.profile.cycles += cycles
        self.stats.update(
            cycles=cycles, active_cycles=counters["active_cycles"],
            dma_stall_cycles=counters["stall_cycles"],
            utilization=self.stats["macs"] / (self.rows * self.cols * cycles)
            if cycles else None)
        return [c.result for c in calls]

    def _cut(self, c: _Call) -> None:
        """``c``'s pieces (run index, k0, k1, exponent): its ``k_exp`` runs cut into chunks
        the descriptor can take; ``single`` when one piece covers it exactly."""
        chunk = self._chunk
        runs = [(0, c.k, 0)] if c.runs is None else c.runs
        c.pieces = [(r, k0, min(k0 + chunk, stop), e)
                    for r, (start, stop, e) in enumerate(runs)
                    for k0 in range(start, stop, chunk)]
        c.single = len(c.pieces) == 1 and c.runs is None

    def _start_bytes(self, calls: list[_Call]) -> list[int]:
        """The bytes of each buffer a run of ``calls`` (planned and cut) holds at once as
        its first batch runs: operands given as arrays, exponent vectors, the batch's C."""
        sizes = []
        for c in calls:
            for x in (c.a, c.b):
                if not isinstance(x, DeviceTensor):
                    sizes.append(self._bytes(x.shape if x.ndim == 2 else (1, x.size), x.dtype))
            if c.single:
                sizes += [self._bytes((1, len(e)), np.int8) for e in (c.re, c.ce)
                          if not np.all(e == e[0])]
        items = [(c, i) for c in calls for i in range(len(c.pieces))]
        first = next(_batches(items, max(1, self.driver.info.queue), C_BUDGET))
        return sizes + [self._bytes((c.m, c.n), np.int32) for c, _ in first]

    def _descriptors(self, call: _Call, piece, c, temps) -> list[dict]:
        """The descriptors of one piece of ``call``, writing ``c``."""
        _, k0, k1, _ = piece
        a, b, j0, j1 = call.a, call.b, k0, k1
        # the operands' first byte at K offset k0 (inside a row, or k0 rows on), off a bus
        # word: inside a row, or rows on in a packed operand (rows shorter than a word)
        a_off = k0 * a.stride if call.ta else k0
        b_off = k0 if call.tb else k0 * b.stride
        if (a_off | b_off) % self.bytes_per_word:
            with self.profile.time("layout"):
                a = self._k_slice(call.a, call.ta, k0, k1, temps)
                b = self._k_slice(call.b, not call.tb, k0, k1, temps)
            j0, j1 = 0, k1 - k0
        return self.driver.descriptors(
            a, b, c, m=call.m, n=call.n, k0=j0, k1=j1, transpose_a=call.ta,
            transpose_b=call.tb, row_exp=call.row, col_exp=call.col, raw=call.raw,
            limit=self._chunk, block=call.block, chunk=call.chunk)

    @property
    def _chunk(self) -> int:
        """The largest K of one piece: :attr:`max_dim`, aligned to the bus."""
        bpw = self.bytes_per_word
        return self.max_dim // bpw * bpw or self.max_dim

    @staticmethod
    def _combine(call: _Call, i: int, part: np.ndarray) -> None:
        """Add piece ``i``'s exact partial sums; at its run's end, the run's scaled term."""
        call.acc += part
        r = call.pieces[i][0]
        last = i + 1 == len(call.pieces) or call.pieces[i + 1][0] != r
        if call.runs is not None and last:          # one term per run, in run order
            with np.errstate(over="ignore"):
                call.total += call.acc.astype(np.float64) * np.exp2(
                    call.re[:, None] + call.ce[None, :] + call.pieces[i][3])
            call.acc[...] = 0

    def close(self) -> None:
        """Give every idle pooled buffer back to the device's memory."""
        if self.pool is not None:
            self.pool.trim()


#: :meth:`Device.gemm`'s keyword arguments and their defaults, which :meth:`Device.gemms`
#: fills in for each call.
_GEMM_DEFAULTS = {name: p.default for name, p in inspect.signature(Device.gemm).parameters.items()
                  if p.kind == p.KEYWORD_ONLY}
_GEMM_ARGS = {"a", "b", *_GEMM_DEFAULTS}


def _batches(items, least: int, budget: int):
    """``items`` (``(call, piece)``) cut into consecutive runs: each takes at least ``least``
    pieces, then more while their C buffers stay within ``budget`` bytes."""
    batch, nbytes = [], 0
    for item in items:
        size = item[0].m * item[0].n * 4
        if len(batch) >= least and nbytes + size > budget:
            yield batch
            batch, nbytes = [], 0
        batch.append(item)
        nbytes += size
    if batch:
        yield batch


def _shaped(x):
    """``x``, or for a :class:`DeviceTensor` an int8 array of its shape that costs nothing."""
    if isinstance(x, DeviceTensor):
        return np.lib.stride_tricks.as_strided(np.zeros(1, np.int8), x.shape, (0, 0))
    return x


def _int8(e: np.ndarray):
    """``e`` as an exponent argument of :mod:`sim.models.golden` (a scalar when it is constant)."""
    if np.all(e == e[0]) and golden.EXP_MIN <= e[0] <= golden.EXP_MAX:
        return int(e[0])
    return e.astype(np.int8)
