"""The register-level driver: GEMM descriptors through the register map, on any backend.

The same code drives the simulated accelerator (``sim.native.NativeSim``) and a board (PYNQ's
``MMIO`` and ``allocate``). A backend supplies two objects:

* ``regs`` with ``read32(offset)``, ``write32(offset, value)`` and ``wait(cycles)`` (let the
  hardware run a while: steps the simulator's clock; sleeps, or nothing, on a board);
* ``memory`` with ``buffer(nbytes) -> Buffer`` (``.addr`` the bus address, ``.array`` a uint8
  numpy view, ``.flush()`` after the CPU wrote it, ``.invalidate()`` before the CPU reads it),
  ``free(buffer)`` to give one back (optional) and ``release()`` to free everything.

Buffers, their layout (rows aligned to the bus width) and reuse are :class:`firmware.Device`'s
business; the driver turns matrices in device memory into descriptors
(:meth:`Driver.descriptors`, tiling dimensions above the register map's 16 bits) and runs them
(:meth:`Driver.run`).
"""

from __future__ import annotations

import numpy as np

from firmware.spec import regmap
from firmware.spec.regmap import ErrorCode, field_value, offset, pack

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
        self.block = 1 << field_value("CONFIG_BUFFER", "BLOCK_LOG2", buf)
        self.data_width = field_value("CONFIG_BUS", "DATA_WIDTH", bus)
        self.addr_width = field_value("CONFIG_BUS", "ADDR_WIDTH", bus)
        # (0 on register maps before 1.4: one port)
        self.write_ports = max(1, field_value("CONFIG_BUS", "WRITE_PORTS", bus))
        # (0 on register maps before 1.5: one port)
        self.read_ports = max(1, field_value("CONFIG_BUS", "READ_PORTS", bus))
        dma = regs.read32(offset("CONFIG_DMA"))
        # (0 on register maps before 1.7: 16-beat bursts, 8 in flight)
        self.burst_beats = field_value("CONFIG_DMA", "BURST_BEATS", dma) or 16
        self.outstanding = field_value("CONFIG_DMA", "OUTSTANDING", dma) or 8
        features = regs.read32(offset("CONFIG_FEATURES"))
        self.epilogue = bool(field_value("CONFIG_FEATURES", "EPILOGUE", features))
        #: the ``DESC_EPILOGUE`` bits 7..0 the build runs (all of them with ``epilogue``)
        self.epilogue_ops = 0xFF if self.epilogue else field_value("CONFIG_FEATURES", "OPS",
                                                                   features)
        self.k_blocks = bool(field_value("CONFIG_FEATURES", "K_BLOCKS", features))
        #: where ``epilogue`` is 0: RELU, BIAS and MASK_IN on a float32 C too, and SGD of a
        #: float32 row (0 on register maps before 1.11)
        self.fp32 = self.epilogue or bool(field_value("CONFIG_FEATURES", "FP32", features))
        #: convolution descriptors (``DESC_CONV``; 0 on register maps before 1.12)
        self.conv = bool(field_value("CONFIG_FEATURES", "CONV", features))
        #: pooling on a convolution's write path (``DESC_POOL``; 0 before 1.13)
        self.pool = bool(field_value("CONFIG_FEATURES", "POOL", features))
        #: descriptor chains in memory (``CTRL.RUN_CHAIN``; 0 before 1.14)
        self.chain = bool(field_value("CONFIG_FEATURES", "CHAIN", features))
        #: a residual's sum on a convolution's write path (``DESC_CONV.ADD``; 0 before 1.15)
        self.add = bool(field_value("CONFIG_FEATURES", "ADD", features))
        #: where ``conv`` is 0: forward convolutions with the batch a multiple of ``cols``
        #: (``CONFIG_FEATURES.CONV_FORWARD``; 0 before 1.16)
        self.conv_forward = bool(field_value("CONFIG_FEATURES", "CONV_FORWARD", features))
        #: ... and backward-data ones (``CONFIG_FEATURES.CONV_BACKWARD_DATA``; 0 before 1.16)
        self.conv_backward_data = bool(field_value("CONFIG_FEATURES", "CONV_BACKWARD_DATA",
                                                   features))
        #: ... and weight gradients (``CONFIG_FEATURES.CONV_WEIGHT_GRAD``; 0 before 1.16)
        self.conv_weight_grad = bool(field_value("CONFIG_FEATURES", "CONV_WEIGHT_GRAD",
                                                 features))
        #: where ``pool`` is 0: max pooling after forward convolutions, windows as their
        #: stride tiling the output (``CONFIG_FEATURES.POOL_FORWARD``; 0 before 1.18)
        self.pool_forward = bool(field_value("CONFIG_FEATURES", "POOL_FORWARD", features))
        #: ... and its backward pass before backward-data convolutions, the batch a multiple
        #: of the tile size (``CONFIG_FEATURES.POOL_BACKWARD``; 0 before 1.19)
        self.pool_backward = bool(field_value("CONFIG_FEATURES", "POOL_BACKWARD", features))
        #: a weight gradient's bias gradient in the same descriptor (``DESC_CONV.BIAS_GRAD``,
        #: ``CONFIG_FEATURES.BIAS_GRAD``; 0 before 1.20)
        self.bias_grad = bool(field_value("CONFIG_FEATURES", "BIAS_GRAD", features))
        #: quantise-only descriptors that unfold a convolution's input (``DESC_CONV.MODE``
        #: 1 with ``DESC_EPILOGUE.QUANTIZE_ONLY``, ``CONFIG_FEATURES.UNFOLD``; 0 before 1.21)
        self.unfold = bool(field_value("CONFIG_FEATURES", "UNFOLD", features))
        self.tile_block = 1 << field_value("CONFIG_FEATURES", "TILE_LOG2", features)

    def __repr__(self):
        return (f"HardwareInfo(rows={self.rows}, cols={self.cols}, depth={self.depth}, "
                f"queue={self.queue}, packing={self.packing}, block={self.block}, "
                f"data_width={self.data_width}, "
                f"addr_width={self.addr_width}, write_ports={self.write_ports}, "
                f"read_ports={self.read_ports}, burst_beats={self.burst_beats}, "
                f"outstanding={self.outstanding}, epilogue={self.epilogue}, "
                f"epilogue_ops={self.epilogue_ops:#04x}, fp32={self.fp32}, "
                f"k_blocks={self.k_blocks})")


def _round_up(x: int, to: int) -> int:
    return -(-x // to) * to


class Driver:
    """Runs GEMM descriptors on an accelerator through its registers.

    Parameters
    ----------
    regs : object
        ``read32(offset)``, ``write32(offset, value)`` and ``wait(cycles)`` (see the module
        documentation).
    memory : object
        ``buffer(nbytes)``, optionally ``free(buffer)``, and ``release()``.
    poll_cycles : int
        Cycles to let the hardware run between two STATUS reads.

    Attributes
    ----------
    info : HardwareInfo
        What the configuration registers say (array, buffers, bus, ports).

    Raises
    ------
    RuntimeError
        No accelerator answers with the register map's ID, or its version is not this
        driver's.
    """

    def __init__(self, regs, memory, *, poll_cycles: int = 256):
        self.regs, self.memory, self.poll_cycles = regs, memory, poll_cycles
        self.info = HardwareInfo(regs)
        self._staged: dict[str, int] = {}   # what the DESC_* staging registers hold
        self._recording: list | None = None  # a chain's entries while recording
        #: a caller is recording descriptors to run later (firmware.Device.record): run()
        #: would run out of order
        self.recording = False
        self.bytes_per_word = self.info.data_width // 8

    # -- registers ---------------------------------------------------------------------------
    def write(self, name: str, value: int) -> None:
        self._staged.pop(name, None)          # written behind submit()'s back: forget it
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
        """``STATUS``'s fields, by lower-case name."""
        word = self.read("STATUS")
        return {f.name.lower(): field_value("STATUS", f.name, word)
                for f in regmap.by_name("STATUS").fields}

    def soft_reset(self, max_polls: int = 10_000) -> None:
        """Abort everything, clear the error, and wait until the engine is idle."""
        self._staged = {}
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

    # -- descriptors -------------------------------------------------------------------------
    def set_window(self, base: int, limit: int) -> None:
        """Let the DMA touch only ``[base, limit)``."""
        self.write64("WINDOW_BASE", base)
        self.write64("WINDOW_LIMIT", limit)

    def submit(self, desc: dict) -> None:
        """Stage one descriptor and enqueue it.

        Parameters
        ----------
        desc : dict
            ``m``, ``n``, ``k``, ``flags`` (a dict of ``DESC_FLAGS`` fields) and ``a_addr``,
            ``a_stride``, ``b_addr``, ``b_stride``, ``c_addr``, ``c_stride``,
            ``row_exp_addr``, ``col_exp_addr`` (0 where missing); and for the write-back
            epilogue ``epilogue`` (a dict of ``DESC_EPILOGUE`` fields), ``bias_addr``,
            ``mask_addr``, ``mask_stride``, ``c_exp_addr``, ``seed`` (64 bits), and for
            ``DESC_EPILOGUE.SGD`` ``lr`` and ``decay`` (floats, written as float32: the
            learning rate and the weights' factor, :func:`sim.models.bfp.sgd_decay`; 0.0
            and 1.0 where missing); for a convolution ``conv``: ``fields`` (of
            ``DESC_CONV``), ``height``, ``width``, ``channels``, ``out_channels`` and
            ``batch``; for its pooling stage ``pool``: ``fields`` (of ``DESC_POOL``),
            ``height`` and ``width`` (the pool's input image), with ``argmax_addr`` and
            ``argmax_stride``; for ``DESC_CONV.ADD`` (in ``conv``'s fields) ``add_addr``,
            ``add_stride`` and ``add_exp_addr``.

        Notes
        -----
        The staging registers keep their values after ``CTRL.ENQUEUE``: only those that
        differ from the previous descriptor's are written.
        """
        words = {f"DESC_{name.upper()}": desc[name] for name in ("m", "n", "k")}
        words["DESC_FLAGS"] = pack("DESC_FLAGS", **desc.get("flags", {}))
        for name in ("a", "b", "c"):
            addr = desc.get(f"{name}_addr", 0)
            words[f"DESC_{name.upper()}_ADDR_LO"] = addr & 0xFFFFFFFF
            words[f"DESC_{name.upper()}_ADDR_HI"] = addr >> 32
            words[f"DESC_{name.upper()}_STRIDE"] = desc.get(f"{name}_stride", 0)
        for name in ("row_exp", "col_exp", "bias", "mask", "c_exp", "argmax", "add", "add_exp"):
            addr = desc.get(f"{name}_addr", 0)
            words[f"DESC_{name.upper()}_ADDR_LO"] = addr & 0xFFFFFFFF
            words[f"DESC_{name.upper()}_ADDR_HI"] = addr >> 32
        words["DESC_EPILOGUE"] = pack("DESC_EPILOGUE", **desc.get("epilogue", {}))
        words["DESC_MASK_STRIDE"] = desc.get("mask_stride", 0)
        words["DESC_ARGMAX_STRIDE"] = desc.get("argmax_stride", 0)
        words["DESC_ADD_STRIDE"] = desc.get("add_stride", 0)
        pool = desc.get("pool")                  # a convolution's pooling stage (DESC_POOL)
        words["DESC_POOL"] = pack("DESC_POOL", **pool["fields"]) if pool else 0
        words["DESC_POOL_IMAGE"] = pack("DESC_POOL_IMAGE", HEIGHT=pool["height"],
                                        WIDTH=pool["width"]) if pool else 0
        conv = desc.get("conv")                  # a convolution (DESC_CONV), or a GEMM
        words["DESC_CONV"] = pack("DESC_CONV", **conv["fields"]) if conv else 0
        words["DESC_CONV_IMAGE"] = pack("DESC_CONV_IMAGE", HEIGHT=conv["height"],
                                        WIDTH=conv["width"]) if conv else 0
        words["DESC_CONV_CHANNELS"] = pack("DESC_CONV_CHANNELS", IN=conv["channels"],
                                           OUT=conv["out_channels"]) if conv else 0
        words["DESC_CONV_BATCH"] = conv["batch"] if conv else 0
        seed = desc.get("seed", 0)
        words["DESC_SEED_LO"], words["DESC_SEED_HI"] = seed & 0xFFFFFFFF, seed >> 32
        for name, default in (("lr", 0.0), ("decay", 1.0)):   # float32 bits
            words[f"DESC_{name.upper()}"] = int(np.array([desc.get(name, default)], np.float32)
                                                .view(np.uint32)[0])
        if self._recording is not None:      # a chain's entries: (offset, value)
            for reg, value in words.items():
                if self._staged.get(reg) != value:
                    self._recording.append((offset(reg), value))
                    self._staged[reg] = value
            self._recording.append((offset("CTRL"), pack("CTRL", ENQUEUE=1)))
            return
        for reg, value in words.items():
            if self._staged.get(reg) != value:
                self.write(reg, value)
                self._staged[reg] = value
        self.write("CTRL", pack("CTRL", ENQUEUE=1))

    def record(self, descs) -> list[tuple[int, int]]:
        """The chain of register writes that enqueues ``descs`` (as :meth:`submit` takes
        them), self-contained: its first descriptor writes every staging register, the rest
        those that change. Nothing is written to the accelerator.

        Returns
        -------
        list of (int, int)
            ``(offset, value)`` entries, the layout ``CHAIN_ADDR`` points at.
        """
        saved, self._staged, self._recording = self._staged, {}, []
        try:
            for d in descs:
                self.submit(d)
            return self._recording
        finally:
            self._staged, self._recording = saved, None

    def run_chain(self, addr: int, entries: int, *, seed: int = 0, regions=(),
                  max_cycles: int, profile=None) -> dict:
        """Run the descriptor chain of ``entries`` entries at ``addr`` (:meth:`record`'s,
        in device memory) with one doorbell (``CTRL.RUN_CHAIN``), ``seed`` XORed into each
        descriptor's seed; wait for it to finish.

        Parameters
        ----------
        addr, entries : int
            Where the chain is and its length.
        seed : int
            ``CHAIN_SEED``.
        regions : sequence of (int, int)
            Byte ranges the chain's descriptors and the chain itself touch: the window.
        max_cycles : int
            How long to wait.
        profile : firmware.runtime.profile.Profile, optional

        Returns
        -------
        dict
            The counters, as :meth:`run` returns them.

        Raises
        ------
        RuntimeError
            The accelerator has no descriptor chains (``CONFIG_FEATURES.CHAIN``).
        AcceleratorError, TimeoutError
            As :meth:`run`.
        """
        from firmware.runtime.profile import Profile
        if not self.info.chain:
            raise RuntimeError("this accelerator runs no descriptor chains "
                               "(CONFIG_FEATURES.CHAIN)")
        prof = profile or Profile()
        with prof.time("driver"):
            self._start(regions)
            self.write64("CHAIN_ADDR", addr)
            self.write("CHAIN_ENTRIES", entries)
            self.write64("CHAIN_SEED", seed)
            self._staged = {}                 # the chain rewrites the staging registers
            self.write("CTRL", pack("CTRL", RUN_CHAIN=1))
        return self._finish(max(4, max_cycles // self.poll_cycles), prof)

    def _start(self, regions) -> None:
        """Before a run: the window over ``regions`` (``(start, end)`` byte ranges), the
        counters cleared."""
        if regions:
            self.set_window(min(r[0] for r in regions),
                            _round_up(max(r[1] for r in regions), self.bytes_per_word))
        self.write("CTRL", pack("CTRL", CLEAR_COUNTERS=1))

    def _finish(self, polls: int, prof) -> dict:
        """After a run's last enqueue: wait until idle; on an error soft-reset and raise
        AcceleratorError; else the counters."""
        with prof.time("wait"):
            st = self.wait_idle(polls)
        if st["error"]:
            self.soft_reset()
            raise AcceleratorError(st["error_code"])
        with prof.time("driver"):
            return self.counters()

    def counters(self) -> dict:
        """The 64-bit counters, by lower-case register name."""
        return {name.lower(): self.read64(name) for name in (
            "CYCLES", "BUSY_CYCLES", "ACTIVE_CYCLES", "STALL_CYCLES", "MACS")}

    def cycle_bound(self, descs) -> int:
        """A generous bound on the cycles ``descs`` take (from their sizes): how long
        :meth:`run` waits by default."""
        def mnk(d):
            conv = d.get("conv")
            if conv and conv["fields"].get("MODE"):
                # a convolution's implicit GEMM, padding's products counted
                from sim.models.conv import ConvGeometry
                f = conv["fields"]
                try:
                    g = ConvGeometry(conv["batch"], conv["channels"], conv["height"],
                                     conv["width"], conv["out_channels"],
                                     (f["KERNEL_H"], f["KERNEL_W"]),
                                     stride=(f["STRIDE_H"], f["STRIDE_W"]),
                                     padding=(f.get("PAD_H", 0), f.get("PAD_W", 0)),
                                     dilation=(f["DILATION_H"], f["DILATION_W"]))
                except (TypeError, ValueError):
                    return d["m"], d["n"], d["k"]
                m, n, k, _ = g.implicit_gemm(f["MODE"])
                kk = len(g.offsets)
                return m, n, {1: kk * g.channels, 2: kk * g.out_channels}.get(f["MODE"], k)
            return d["m"], d["n"], d["k"]
        return 64 * 256 + sum(
            20 * ((-(-m // self.info.rows)) * (-(-n // self.info.cols)) * (k + 256)
                  + m * n // 4) for m, n, k in map(mnk, descs))

    def run(self, *descs: dict, max_cycles: int | None = None, profile=None) -> dict:
        """Run descriptors to completion, queued back to back.

        More descriptors than the queue holds are fed in as it drains
        (``STATUS.QUEUE_LEVEL``). The address window is set to cover every ``regions``
        entry the descriptors carry.

        Parameters
        ----------
        *descs : dict
            Descriptors as :meth:`submit` takes them, each optionally with ``regions``:
            ``(start, end)`` byte ranges it touches.
        max_cycles : int, optional
            How long to wait; default a generous bound from the descriptors' sizes.
        profile : firmware.runtime.profile.Profile, optional
            Gets the time spent writing registers (``driver``) and polling (``wait``).

        Returns
        -------
        dict
            The counters: ``cycles``, ``busy_cycles``, ``active_cycles``,
            ``stall_cycles``, ``macs``.

        Raises
        ------
        AcceleratorError
            The engine stopped on an error code (it is soft-reset first, so it works again).
        TimeoutError
            The descriptors did not finish within ``max_cycles``.
        """
        from firmware.runtime.profile import Profile
        if self._recording is not None or self.recording:
            raise RuntimeError("descriptors are being recorded: run() would run out of order")
        prof = profile or Profile()
        if max_cycles is None:
            max_cycles = self.cycle_bound(descs)
        polls = max(4, max_cycles // self.poll_cycles)
        with prof.time("driver"):
            self._start([r for d in descs for r in d.get("regions", ())])
        queue = max(1, self.info.queue)
        for i, desc in enumerate(descs):
            if i >= queue:                       # wait for room in the queue
                with prof.time("wait"):
                    for _ in range(polls):
                        st = self.status()
                        if st["error"] or st["queue_level"] < queue:
                            break
                        self.regs.wait(self.poll_cycles)
                    else:
                        raise TimeoutError(f"the accelerator's queue did not drain in "
                                           f"{polls} polls")
                if st["error"]:
                    break
            with prof.time("driver"):
                self.submit(desc)
        return self._finish(polls, prof)

    # -- GEMM descriptors --------------------------------------------------------------------
    def descriptors(self, a, b, c, *, m: int, n: int, k0: int, k1: int, transpose_a: bool,
                    transpose_b: bool, row_exp, col_exp, raw: bool,
                    limit: int = 65535, block: int = 0, overlap: bool = True,
                    chunk: int = 0) -> list[dict]:
        """Descriptors for ``C = op(A)[:, k0:k1] @ op(B)[k0:k1, :]``, tiled so that no
        dimension exceeds ``limit``.

        Parameters
        ----------
        a, b, c : DeviceTensor
            Device matrices (``addr``, ``stride``).
        m, n, k0, k1 : int
            C's shape and the range of K.
        transpose_a, transpose_b, raw : bool
            ``DESC_FLAGS`` fields.
        row_exp, col_exp : int or DeviceTensor
            A scalar exponent, or a device vector.
        limit : int
            The largest dimension of one descriptor; tiles start at its multiples, so it
            must be a multiple of the bus width in bytes.
        block : int
            ``DESC_FLAGS.BLOCK``: the reuse blocks' side in C tiles (0: the hardware's
            largest).
        overlap : bool
            ``DESC_FLAGS.OVERLAP``: a descriptor may start while the one before it writes
            its C (false where A, B or an exponent vector is the C of a descriptor queued
            before it in the same :meth:`run`).
        chunk : int
            ``DESC_FLAGS.CHUNK``: the longest K chunk
            (:func:`sim.models.engine.chunk_depth`).

        Returns
        -------
        list of dict
            Descriptors for :meth:`run`, each with its ``regions``.

        Raises
        ------
        ValueError
            ``limit`` is not a multiple of the bus width where it cuts a dimension.

        Notes
        -----
        The other arguments are trusted (:class:`firmware.Device` checks them).
        """
        if limit % self.bytes_per_word and max(m, n, k1 - k0) > limit:
            raise ValueError(f"limit={limit} is not a multiple of the bus width "
                             f"({self.bytes_per_word} bytes)")
        k = k1 - k0
        flags = {"TRANSPOSE_A": int(transpose_a), "TRANSPOSE_B": int(transpose_b),
                 "RAW": int(raw), "BLOCK": int(block), "OVERLAP": int(overlap),
                 "CHUNK": int(chunk)}
        for name, e in (("ROW", row_exp), ("COL", col_exp)):
            if isinstance(e, (int, np.integer)):
                flags[f"{name}_EXP"] = int(e)
            else:
                flags[f"{name}_EXP_VECTOR"] = 1
        size = 4
        descs = []
        for m0 in range(0, m, limit):
            mt = min(limit, m - m0)
            for n0 in range(0, n, limit):
                nt = min(limit, n - n0)
                a_addr = a.addr + (k0 * a.stride + m0 if transpose_a else m0 * a.stride + k0)
                b_addr = b.addr + (n0 * b.stride + k0 if transpose_b else k0 * b.stride + n0)
                c_addr = c.addr + m0 * c.stride + n0 * size
                a_rows, a_bytes = (k, mt) if transpose_a else (mt, k)
                b_rows, b_bytes = (nt, k) if transpose_b else (k, nt)
                regions = [(a_addr, a_addr + (a_rows - 1) * a.stride + a_bytes),
                           (b_addr, b_addr + (b_rows - 1) * b.stride + b_bytes),
                           (c_addr, c_addr + (mt - 1) * c.stride + nt * size)]
                d = dict(m=mt, n=nt, k=k, flags=flags, a_addr=a_addr, a_stride=a.stride,
                         b_addr=b_addr, b_stride=b.stride, c_addr=c_addr, c_stride=c.stride)
                for name, e, off, count in (("row", row_exp, m0, mt), ("col", col_exp, n0, nt)):
                    if not isinstance(e, (int, np.integer)):
                        d[f"{name}_exp_addr"] = e.addr + off
                        regions.append((e.addr + off, e.addr + off + count))
                d["regions"] = regions
                descs.append(d)
        return descs
