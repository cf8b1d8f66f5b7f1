"""A functional model of the whole accelerator at the register level: fast, untimed, any size.

:class:`FunctionalAccelerator` has the interface of :class:`sim.native.NativeSim`
(``read32``, ``write32``, ``step``, ``memory``, ``size``) and the register map of
:mod:`firmware.spec.regmap`, so :class:`firmware.runtime.driver.Driver` drives it unchanged
(``Device("model", ...)``). ``CTRL.ENQUEUE`` copies the staged descriptor into the queue
(``STATUS.BUSY`` and ``QUEUE_LEVEL`` show it; ``QUEUE_OVERFLOW`` when full); the next
:meth:`~FunctionalAccelerator.step` runs everything queued: each descriptor is checked as
:class:`rtl.checker.DescriptorChecker` checks it (same error codes, same order: dimensions,
then alignment, strides, the address window), its operands are read from memory, the result
computed with the golden models (:mod:`sim.models.golden`) and C written. So the model's own
computing happens while the driver waits, as the hardware's would. The counters advance by
the cycles ``predict`` gives (``Device("model")`` passes the analytic performance model's
:func:`firmware.runtime.perfmodel.predict`) for the configuration and port, one descriptor
after the other (the RTL starts a descriptor with
``DESC_FLAGS.OVERLAP`` while the one before it writes its C, so its runs of several
descriptors are shorter than these counters say).

What it is for: measuring the host side — the driver, buffer copies, quantisation,
everything a board's ARM does — at the boards' default sizes (a ZCU104 32×64 array, a
CIFAR-sized layer), where the cycle-accurate Verilator model would take hours. What it is not:
a test of the hardware (the RTL is tested against the same golden models elsewhere) or a
measurement of cycles (those are the model's, within its stated accuracy).
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from firmware.spec import hw, regmap
from firmware.spec.ports import resolve_port
from firmware.spec.regmap import ErrorCode, field_value, offset
from sim.models import bfp, golden
from sim.models import conv as convm
from sim.models.engine import block_side, check, check_dimensions, check_regions, descriptor

__all__ = ["FunctionalAccelerator", "bfp8_block"]

_COUNTERS = ("CYCLES", "BUSY_CYCLES", "ACTIVE_CYCLES", "STALL_CYCLES", "MACS")


#: ``CONFIG_FEATURES.OPS`` of a build with the whole epilogue: every ``DESC_EPILOGUE`` bit
#: from 7 down.
_ALL_OPS = regmap.pack("DESC_EPILOGUE", BFP8=1, STOCHASTIC=1, BIAS=3, RELU=1, MASK_IN=1,
                       QUANTIZE_ONLY=1)


def bfp8_block(rows: int, cols: int) -> int | None:
    """The walker's block side (C tiles) for a descriptor with a BFP8 C: one tile block of
    the format a block, as :class:`rtl.engine.GemmEngine` walks it (``TILE_BLOCK / rows``
    on a square array, at least 1); None on an array whose sides are multiples of
    ``TILE_BLOCK`` (the ZCU104's and VU9P's defaults), where every C tile holds whole tile
    blocks and the walk keeps its block (a write-back of whole tiles' units, which the RTL
    does not build for such arrays yet)."""
    if rows % regmap.TILE_BLOCK == 0 and cols % regmap.TILE_BLOCK == 0:
        return None
    return max(1, regmap.TILE_BLOCK // max(rows, cols))


#: The registers a descriptor chain's entries may write (besides CTRL.ENQUEUE).
_CHAIN_REGISTERS = frozenset(r.offset for r in regmap.REGISTERS if r.name.startswith("DESC_"))


def _signed8(v: int) -> int:
    return v - 256 if v & 0x80 else v


@lru_cache(maxsize=256)
def _walked_offsets(geometry, mode: int, cols: int, side: int):
    """:func:`sim.models.conv.walked_offsets` of a descriptor, kept for the next step's."""
    return convm.walked_offsets(geometry, mode, cols, side)


class FunctionalAccelerator:
    """See the module documentation.

    Parameters
    ----------
    rows, cols, depth, block, data_width, addr_width, packing, queue, write_ports, read_ports,\
    burst_beats, outstanding :
        The configuration the registers report (and the performance model uses).
    epilogue : bool
        Offer the write-back epilogue and tile exponents (``CONFIG_FEATURES``): the
        ``DESC_EPILOGUE`` options, computed with :mod:`sim.models.bfp`. False: such
        descriptors stop with ``UNSUPPORTED``, as on a build without them.
    port : str or dict
        The memory port (:func:`firmware.spec.ports.resolve_port`), for the cycle prediction.
    memory : int
        Bytes of memory at address 0.
    predict : callable, optional
        ``predict(m, n, k, transpose_a, transpose_b, *, rows, cols, depth, block, data_width,
        port, write_ports, read_ports, chunk)`` returning a dict with ``cycles`` and
        ``compute_cycles`` (:func:`firmware.runtime.perfmodel.predict`). Default: the
        array's compute cycles alone, ``ceil(m / rows) * ceil(n / cols) * k``.
    predict_quantize : callable, optional
        ``predict_quantize(m, n, *, rows, cols, depth, block, data_width, port)`` for a
        quantise-only descriptor, likewise
        (:func:`firmware.runtime.perfmodel.predict_quantize`), and ``unfold=`` the
        convolution's geometry for one that unfolds its input. Default: a row a cycle,
        ``m * ceil(n / cols)``.
    """

    def __init__(self, *, rows: int = 8, cols: int = 8, depth: int = 512, block: int = 4,
                 data_width: int = 128, addr_width: int = 32, packing: int = 1,
                 queue: int = 4, port: str | dict = "ideal", memory: int = 256 << 20,
                 write_ports: int = 1, read_ports: int = 1, burst_beats: int = 16,
                 outstanding: int = 8, epilogue: bool = True, predict=None,
                 predict_quantize=None):
        regmap.check_write_ports(write_ports, rows)
        if predict is not None and not callable(predict):
            raise TypeError(f"predict must be callable or None, not {type(predict).__name__}")
        if predict_quantize is not None and not callable(predict_quantize):
            raise TypeError(f"predict_quantize must be callable or None, not "
                            f"{type(predict_quantize).__name__}")
        self.predict, self.predict_quantize = predict, predict_quantize
        regmap.check_read_ports(read_ports)
        self.cfg = dict(rows=rows, cols=cols, depth=depth, block=block,
                        data_width=data_width)
        self.addr_width, self.packing, self.queue = addr_width, packing, queue
        self.write_ports, self.read_ports = write_ports, read_ports
        for name, value, top in (("burst_beats", burst_beats, 256),
                                 ("outstanding", outstanding, 255)):
            if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= top:
                raise ValueError(f"{name} must be an integer in [1, {top}], not {value!r}")
        self.burst_beats, self.outstanding = burst_beats, outstanding
        if not isinstance(epilogue, bool):
            raise TypeError(f"epilogue must be a bool, not {type(epilogue).__name__}")
        self.epilogue = epilogue
        self.port = resolve_port(port)
        self.memory = np.zeros(memory, np.uint8)
        self.size = memory
        self.bpw = data_width // 8
        self.regs: dict[int, int] = {}
        self.counters = dict.fromkeys(_COUNTERS, 0)
        self.latched = dict.fromkeys(_COUNTERS, 0)
        self.error = 0
        self.done = 0
        self.descriptors = 0
        self.pending: list[dict] = []
        #: a list to append a record to per descriptor run (None: no trace): ``mode`` (0 a
        #: GEMM or quantise-only, else ``DESC_CONV.MODE``), ``geometry`` (a convolution's
        #: :class:`sim.models.conv.ConvGeometry`, else None), ``m``, ``n``, ``k`` (0:
        #: quantise-only), ``macs`` and ``cycles``
        self.trace: list | None = None
        self.last_conv = self.last_unfold = None

    # -- the register block --------------------------------------------------------------------
    def read32(self, off: int) -> int:
        ro = {
            offset("ID"): regmap.MAGIC, offset("VERSION"): regmap.VERSION,
            offset("CONFIG_ARRAY"): regmap.pack("CONFIG_ARRAY", ROWS=self.cfg["rows"],
                                                COLS=self.cfg["cols"]),
            offset("CONFIG_BUFFER"): regmap.pack("CONFIG_BUFFER", DEPTH=self.cfg["depth"],
                                                 QUEUE=self.queue, PACKING=self.packing,
                                                 BLOCK_LOG2=self.cfg["block"].bit_length() - 1),
            offset("CONFIG_BUS"): regmap.pack("CONFIG_BUS", DATA_WIDTH=self.cfg["data_width"],
                                              ADDR_WIDTH=self.addr_width,
                                              WRITE_PORTS=self.write_ports,
                                              READ_PORTS=self.read_ports),
            offset("CONFIG_DMA"): regmap.pack("CONFIG_DMA", BURST_BEATS=self.burst_beats,
                                              OUTSTANDING=self.outstanding),
            offset("CONFIG_FEATURES"): regmap.pack(
                "CONFIG_FEATURES", EPILOGUE=int(self.epilogue), K_BLOCKS=int(self.epilogue),
                CONV=int(self.epilogue), POOL=int(self.epilogue), CHAIN=int(self.epilogue),
                ADD=int(self.epilogue), BIAS_GRAD=int(self.epilogue),
                UNFOLD=int(self.epilogue),
                TILE_LOG2=regmap.TILE_BLOCK.bit_length() - 1,
                OPS=_ALL_OPS if self.epilogue else 0),
            offset("STATUS"): regmap.pack(
                "STATUS", BUSY=int(bool(self.pending)), ERROR=int(self.error != 0),
                QUEUE_FULL=int(len(self.pending) >= self.queue),
                QUEUE_LEVEL=len(self.pending), ERROR_CODE=self.error),
            offset("DONE_COUNT"): self.done & 0xFFFFFFFF,
        }
        if off in ro:
            return ro[off]
        for name in _COUNTERS:
            if off == offset(f"{name}_LO"):
                self.latched[name] = self.counters[name] >> 32
                return self.counters[name] & 0xFFFFFFFF
            if off == offset(f"{name}_HI"):
                return self.latched[name] & 0xFFFFFFFF
        if off in (offset("CTRL"),):
            return 0
        return self.regs.get(off, 0)

    def write32(self, off: int, value: int) -> None:
        value &= 0xFFFFFFFF
        if off == offset("CTRL"):
            if field_value("CTRL", "SOFT_RESET", value):
                self.error = 0
                self.pending = []
            if field_value("CTRL", "CLEAR_COUNTERS", value):
                self.counters = dict.fromkeys(_COUNTERS, 0)
            if field_value("CTRL", "ENQUEUE", value) and not self.error:
                if len(self.pending) >= self.queue:
                    self.error = int(ErrorCode.QUEUE_OVERFLOW)
                    self.pending = []
                else:
                    self.pending.append(dict(self.regs))
            if field_value("CTRL", "RUN_CHAIN", value) and not self.error and self.epilogue:
                self._run_chain()
            return
        self.regs[off] = value

    def _run_chain(self) -> None:
        """``CTRL.RUN_CHAIN``: apply the chain's entries in order as register writes, each
        ``CTRL.ENQUEUE`` queueing the staged descriptor with ``CHAIN_SEED`` XORed into its
        seed (the chain's front end waits for room in the queue: no overflow). Stops with
        ``BAD_CHAIN`` at an entry that writes anything else, or with the checker's code if
        the chain's bytes lie outside the window or off a bus word."""
        def reg64(name):
            return self.regs.get(offset(f"{name}_HI"), 0) << 32 \
                | self.regs.get(offset(f"{name}_LO"), 0)
        addr, count = reg64("CHAIN_ADDR"), self.regs.get(offset("CHAIN_ENTRIES"), 0)
        if not count:
            return
        code = check_regions([(addr, 1, 0, 8 * count, 0)], reg64("WINDOW_BASE"),
                             min(reg64("WINDOW_LIMIT"), self.size), 8 * self.bpw,
                             self.addr_width)
        if code:
            self.error = code
            return
        seed = reg64("CHAIN_SEED")
        lo, hi = offset("DESC_SEED_LO"), offset("DESC_SEED_HI")
        enqueue = regmap.pack("CTRL", ENQUEUE=1)
        entries = self.memory[addr:addr + 8 * count].view(np.uint32).reshape(count, 2)
        for off, value in entries.tolist():
            if off == offset("CTRL") and value == enqueue:
                d = dict(self.regs)
                d[lo] = d.get(lo, 0) ^ (seed & 0xFFFFFFFF)
                d[hi] = d.get(hi, 0) ^ (seed >> 32)
                self.pending.append(d)
            elif off in _CHAIN_REGISTERS:
                self.regs[off] = value
            else:
                self.error = int(ErrorCode.BAD_CHAIN)
                return

    def step(self, cycles: int) -> None:
        """Run every queued descriptor to completion (or to the first error)."""
        while self.pending and not self.error:
            self.staged = self.pending.pop(0)
            self.error = int(self._execute())
            self.done += 1
        if self.error:
            self.pending = []

    # -- one descriptor ------------------------------------------------------------------------
    def _reg(self, name: str) -> int:
        return self.staged.get(offset(name), 0)

    def _reg64(self, name: str) -> int:
        return self._reg(f"{name}_HI") << 32 | self._reg(f"{name}_LO")

    def _fields(self, name: str) -> dict:
        """The staged register ``name``'s fields, by name, in the register map's order."""
        word = self._reg(name)
        return {fl.name: field_value(name, fl.name, word) for fl in regmap.by_name(name).fields}

    def _matrix(self, addr, rows, cols, stride, dtype=np.uint8):
        nbytes = cols * np.dtype(dtype).itemsize
        view = np.lib.stride_tricks.as_strided(self.memory[addr:], (rows, nbytes),
                                               (stride, 1))
        return view.view(dtype) if dtype != np.uint8 else view

    def _execute(self) -> ErrorCode:
        m, n, k = self._reg("DESC_M"), self._reg("DESC_N"), self._reg("DESC_K")
        self.last_conv = self.last_unfold = None
        f = self._fields("DESC_FLAGS")
        epi = self._reg("DESC_EPILOGUE")
        if epi:
            if not self.epilogue or f["RAW"]:
                return ErrorCode.UNSUPPORTED
            code = self._execute_epilogue(m, n, k, f, epi)
            if code:
                return code
            tiles = all(field_value("DESC_EPILOGUE", name, epi) for name in ("A_TILES",
                                                                              "B_TILES"))
            # (a convolution's implicit GEMM: its own M, N and K; forward and backward-data
            # its K runs, a kernel offset's block of channels each)
            runs = batch = offsets = walk = None
            replays = 0
            pool_mode = field_value("DESC_POOL", "MODE", self._reg("DESC_POOL"))
            if tiles and self.last_conv is not None and self.last_conv[0] in (1, 2):
                runs = self.last_conv[1].k_runs(self.last_conv[0], block=regmap.TILE_BLOCK)
                batch = self.last_conv[1].batch
                # (the offsets a block's tiles read B at, but a forward one's walked once
                # per pooling phase)
                if self.last_conv[0] == 2 or not pool_mode:
                    walk = self.last_conv
                if pool_mode == 2:
                    # (a backward-data convolution through a max pool's argmax: its sums
                    # written once per window phase, the phases after the first replayed)
                    pv = self._fields("DESC_POOL")
                    replays = pv["KERNEL_H"] * pv["KERNEL_W"] - 1
            if tiles and self.last_conv is not None and self.last_conv[0] == 3:
                offsets = len(self.last_conv[1].offsets)
            self._count(*self.last_mnk, f, k_blocks=tiles,
                        bfp8=bool(field_value("DESC_EPILOGUE", "BFP8", epi)),
                        macs=self.last_macs, floor=self.last_floor, k_runs=runs,
                        batch=batch, offsets=offsets, walk=walk, replays=replays,
                        unfold=self.last_unfold)
            return ErrorCode.NONE
        if field_value("DESC_CONV", "MODE", self._reg("DESC_CONV")) \
                or field_value("DESC_CONV", "ADD", self._reg("DESC_CONV")) \
                or field_value("DESC_CONV", "BIAS_GRAD", self._reg("DESC_CONV")) \
                or field_value("DESC_POOL", "MODE", self._reg("DESC_POOL")):
            return ErrorCode.UNSUPPORTED           # (a convolution needs tile exponents)
        ta, tb = bool(f["TRANSPOSE_A"]), bool(f["TRANSPOSE_B"])
        a = (self._reg64("DESC_A_ADDR"), (k, m) if ta else (m, k), self._reg("DESC_A_STRIDE"))
        b = (self._reg64("DESC_B_ADDR"), (n, k) if tb else (k, n), self._reg("DESC_B_STRIDE"))
        c = (self._reg64("DESC_C_ADDR"), (m, 4 * n), self._reg("DESC_C_STRIDE"))
        regions = [a, b, c]
        if f["ROW_EXP_VECTOR"]:
            regions.append((self._reg64("DESC_ROW_EXP_ADDR"), (1, m), 0))
        if f["COL_EXP_VECTOR"]:
            regions.append((self._reg64("DESC_COL_EXP_ADDR"), (1, n), 0))
        # the checker's rules (sim.models.engine.check), with the end of this model's memory
        # as a limit too
        desc = descriptor(
            m=m, n=n, k=k, transpose_a=ta, transpose_b=tb, row_vec=f["ROW_EXP_VECTOR"],
            col_vec=f["COL_EXP_VECTOR"], a_addr=a[0], a_stride=a[2], b_addr=b[0],
            b_stride=b[2], c_addr=c[0], c_stride=c[2],
            row_exp_addr=self._reg64("DESC_ROW_EXP_ADDR"),
            col_exp_addr=self._reg64("DESC_COL_EXP_ADDR"))
        code = check(desc, self._reg64("WINDOW_BASE"),
                     min(self._reg64("WINDOW_LIMIT"), self.size), 8 * self.bpw, self.addr_width)
        if code:
            return ErrorCode(code)
        am = self._matrix(a[0], *a[1], a[2]).view(np.int8)
        bm = self._matrix(b[0], *b[1], b[2]).view(np.int8)
        acc = golden.gemm(am, bm, ta, tb)
        if f["RAW"]:
            out = acc
        else:
            re = (self.memory[regions[3][0]:regions[3][0] + m].view(np.int8)
                  if f["ROW_EXP_VECTOR"] else _signed8(f["ROW_EXP"]))
            at = 3 + f["ROW_EXP_VECTOR"]
            ce = (self.memory[regions[at][0]:regions[at][0] + n].view(np.int8)
                  if f["COL_EXP_VECTOR"] else _signed8(f["COL_EXP"]))
            out = golden.rescale(acc, re, ce)
        self._matrix(c[0], m, n, c[2], np.int32)[...] = out.view(np.int32)
        self._count(m, n, k, f)
        return ErrorCode.NONE

    def _count(self, m: int, n: int, k: int, f: dict, k_blocks: bool = False,
               bfp8: bool = False, macs: int | None = None, floor: int = 0,
               k_runs: tuple[int, ...] | None = None, batch: int | None = None,
               offsets: int | None = None, walk: tuple | None = None,
               replays: int = 0, unfold=None) -> None:
        """Advance the counters by a descriptor's predicted cycles (``k = 0``: a
        quantise-only descriptor, ``predict_quantize``'s cycles, or a row a cycle without it;
        ``k_blocks``: tile exponents along K, the datapath's K-block mode; ``bfp8``: a BFP8
        C, walked in blocks of one tile block, :func:`bfp8_block`; ``macs``: the
        multiply-accumulates where they are not ``m * n * k``, a convolution's; ``floor``:
        the least cycles of the prediction, a convolution's compulsory traffic, a residual's
        summand included; ``k_runs``: with ``k_blocks``, a convolution's K runs, each its
        own K block, and ``batch`` its batch; ``offsets``: a weight gradient's kernel
        offsets, ``n`` theirs together, walked as the engine walks them,
        :func:`firmware.spec.hw.wg_offsets_inner`; ``walk``: with ``k_runs``, the
        convolution's ``(mode, geometry)`` whose blocks skip the kernel offsets their tiles
        do not read B at, :func:`sim.models.conv.walked_offsets`; ``replays``: a
        backward-data convolution's pooling phases after the first, each a chunk of one
        step a block, :func:`firmware.runtime.perfmodel.predict`; ``unfold``: a quantise-only
        descriptor's convolution geometry, its input unfolded)."""
        ta, tb = bool(f["TRANSPOSE_A"]), bool(f["TRANSPOSE_B"])
        side = block_side(f["BLOCK"], self.cfg["block"])
        flags = None
        unit = bfp8_block(self.cfg["rows"], self.cfg["cols"]) if bfp8 else None
        if unit is not None:
            side = min(side, unit)
        cfg = {**self.cfg, "block": side}
        if k == 0 and self.predict_quantize is None:
            p = {"cycles": m * -(-n // cfg["cols"]), "compute_cycles": 0}
        elif k == 0:
            extra = {} if unfold is None else {"unfold": unfold}
            p = self.predict_quantize(m, n, port=self.port, **extra, **cfg)
        elif self.predict is None:
            compute = -(-m // cfg["rows"]) * -(-n // cfg["cols"]) * k
            p = {"cycles": compute, "compute_cycles": compute}
        else:
            kb, walked = ({"k_blocks": True} if k_blocks else {}), k
            if k_blocks and k_runs is not None:
                # (the runs walked: each block's kernel offsets, over padding on zero rows)
                kb["k_runs"], walked = tuple(k_runs), sum(k_runs)
                # (a convolution's B: a job per group of a position's tiles)
                kb["b_per_tile"] = True
                kb["b_group"] = convm.b_group(batch, cfg["cols"], side)
                if replays:
                    kb["replays"] = replays
                if walk is not None and batch % cfg["cols"] == 0:
                    # (the walker's cursor, a position's images a tile: the batch a
                    # multiple of the columns)
                    kb["k_walked"] = flags = _walked_offsets(walk[1], walk[0], cfg["cols"],
                                                              side)
            if offsets:
                # a weight gradient: a GEMM of Cout x Cin per kernel offset, the offsets
                # inside each K chunk (A loaded once a chunk) or an outer loop of GEMMs
                inner = hw.wg_offsets_inner(m, n // offsets, offsets, rows=cfg["rows"],
                                            cols=cfg["cols"], block=self.cfg["block"],
                                            side=side)
                kb["offsets" if inner else "copies"] = offsets
            p = self.predict(m, n // (offsets or 1), walked, ta, tb, port=self.port,
                             write_ports=self.write_ports, read_ports=self.read_ports,
                             chunk=f["CHUNK"], c_bytes=1 if bfp8 else 4, **cfg, **kb)
        self.descriptors += 1
        cycles = max(p["cycles"], floor)
        if self.trace is not None:
            mode, g = self.last_conv or (0, None)
            self.trace.append({"mode": mode, "geometry": g, "m": m, "n": n, "k": k,
                               "k_runs": None if k_runs is None else tuple(k_runs),
                               "offsets": offsets, "k_walked": flags,
                               "macs": m * n * k if macs is None else macs,
                               "cycles": int(cycles)})
        for name, v in (("CYCLES", cycles), ("BUSY_CYCLES", cycles),
                        ("ACTIVE_CYCLES", p["compute_cycles"]),
                        ("STALL_CYCLES", cycles - p["compute_cycles"]),
                        ("MACS", m * n * k if macs is None else macs)):
            self.counters[name] += int(v)

    def _execute_epilogue(self, m: int, n: int, k: int, f: dict, epi: int) -> ErrorCode:
        """A descriptor with ``DESC_EPILOGUE`` options: its checks, its GEMM with tile
        exponents where asked (:func:`sim.models.bfp.gemm_kruns`), then
        :func:`sim.models.bfp.epilogue`, written where the descriptor says."""
        e = self._fields("DESC_EPILOGUE")
        tile = regmap.TILE_BLOCK
        ta, tb = bool(f["TRANSPOSE_A"]), bool(f["TRANSPOSE_B"])
        only = bool(e["QUANTIZE_ONLY"])
        unfold = None
        if only and self._fields("DESC_CONV")["MODE"]:
            # a convolution's input unfolded: M and N its own
            unfold = self._unfold(f, epi)
            if isinstance(unfold, ErrorCode):
                return unfold
            m, n = len(unfold.offsets) * unfold.channels, unfold.out_positions
            self.last_unfold = unfold
        conv = None if unfold else self._conv(f, e)
        if isinstance(conv, ErrorCode):
            return conv
        if conv is not None:
            return self._execute_conv(conv, f, e)
        if field_value("DESC_POOL", "MODE", self._reg("DESC_POOL")):
            return ErrorCode.UNSUPPORTED           # (pooling is a convolution's)
        # (with convolution descriptors the position counters are 32 bits wide, so a
        # quantise-only descriptor takes an activation matrix's H*W*batch columns)
        code = check_dimensions(m, min(n, 0xFFFF) if only else n, 1 if only else k)
        if code:
            return ErrorCode(code)
        self.last_mnk, self.last_macs = (m, n, 0 if only else k), None
        self.last_floor = 0
        if e["BIAS"] == 3 or (only and (e["A_TILES"] or e["B_TILES"])) or (
                e["SGD"] and (e["BIAS"] or e["RELU"] or e["MASK_IN"] or only)):
            return ErrorCode.UNSUPPORTED
        a_addr, a_stride = self._reg64("DESC_A_ADDR"), self._reg("DESC_A_STRIDE")
        b_addr, b_stride = self._reg64("DESC_B_ADDR"), self._reg("DESC_B_STRIDE")
        c_addr, c_stride = self._reg64("DESC_C_ADDR"), self._reg("DESC_C_STRIDE")
        a_shape = (m, n) if only else ((k, m) if ta else (m, k))
        b_shape = (n, k) if tb else (k, n)
        regions = []     # (base, rows, stride, bytes a row, may be packed)
        grids = {}
        if unfold is not None:
            regions.append((a_addr, unfold.channels, a_stride, 4 * unfold.positions, 0))
        elif only:
            regions.append((a_addr, m, a_stride, 4 * n, 0))
        else:
            regions += [(a_addr, a_shape[0], a_stride, a_shape[1], 1),
                        (b_addr, b_shape[0], b_stride, b_shape[1], 1)]
        regions.append((c_addr, m, c_stride, n if e["BFP8"] else 4 * n, 0))
        for name, on, shape, addr in (
                ("a", e["A_TILES"], a_shape, "DESC_ROW_EXP_ADDR"),
                ("b", e["B_TILES"], b_shape, "DESC_COL_EXP_ADDR"),
                ("c", e["BFP8"], (m, n), "DESC_C_EXP_ADDR")):
            if on and name not in grids:
                grids[name] = (self._reg64(addr), bfp.tile_grid(shape, block=tile))
                regions.append((grids[name][0], 1, 0, int(np.prod(grids[name][1])), 0))
        if not only:
            if f["ROW_EXP_VECTOR"] and not e["A_TILES"]:
                regions.append((self._reg64("DESC_ROW_EXP_ADDR"), 1, 0, m, 0))
            if f["COL_EXP_VECTOR"] and not e["B_TILES"]:
                regions.append((self._reg64("DESC_COL_EXP_ADDR"), 1, 0, n, 0))
        if e["BIAS"]:
            regions.append((self._reg64("DESC_BIAS_ADDR"), 1, 0, 4 * (m if e["BIAS"] == 1
                                                                         else n), 0))
        if e["RELU"] or e["MASK_IN"]:
            regions.append((self._reg64("DESC_MASK_ADDR"), m, self._reg("DESC_MASK_STRIDE"),
                            -(-n // 8), 0))
        code = self._check_regions(regions)
        if code:
            return code

        def grid(name):
            return self._grid(*grids[name])

        if unfold is not None:
            c = convm.unfold(self._matrix(a_addr, unfold.channels, unfold.positions, a_stride,
                                          np.float32).copy(), unfold)
        elif only:
            c = self._matrix(a_addr, m, n, a_stride, np.float32).copy()
        else:
            am = self._matrix(a_addr, *a_shape, a_stride).view(np.int8)
            bm = self._matrix(b_addr, *b_shape, b_stride).view(np.int8)
            if e["A_TILES"] or e["B_TILES"]:
                stops = list(range(tile, k, tile)) + [k] if k > tile else [k]
                runs = len(stops)
                if e["A_TILES"]:
                    ga = grid("a")
                    ga = ga.T if ta else ga
                    a_exp = np.repeat(ga, tile, axis=0)[:m]
                else:
                    a_exp = np.repeat(self._row_exp(m, f)[:, None], runs, axis=1)
                if e["B_TILES"]:
                    gb = grid("b")
                    gb = gb.T if tb else gb
                    b_exp = np.repeat(gb, tile, axis=1)[:, :n]
                else:
                    b_exp = np.repeat(self._col_exp(n, f)[None, :], runs, axis=0)
                c = bfp.gemm_kruns(am, np.ascontiguousarray(a_exp, np.int8), bm,
                                   np.ascontiguousarray(b_exp, np.int8), stops,
                                   transpose_a=ta, transpose_b=tb)
            else:
                c = golden.rescale(golden.gemm(am, bm, ta, tb), self._row_exp(m, f),
                                   self._col_exp(n, f))
        bias = None
        if e["BIAS"]:
            at, length = self._reg64("DESC_BIAS_ADDR"), m if e["BIAS"] == 1 else n
            bias = self.memory[at:at + 4 * length].view(np.float32).copy()
        mask_addr, mask_stride = self._reg64("DESC_MASK_ADDR"), self._reg("DESC_MASK_STRIDE")
        mask_in = None
        if e["MASK_IN"]:
            bits = self._matrix(mask_addr, m, -(-n // 8), mask_stride)
            mask_in = bfp.unpack_mask(np.ascontiguousarray(bits), n)
        seed = self._reg("DESC_SEED_HI") << 32 | self._reg("DESC_SEED_LO")
        if e["SGD"]:
            # the optimiser's step: the stored weights, read before they are written
            if e["BFP8"]:
                w = bfp.dequantize_tiles(
                    np.ascontiguousarray(self._matrix(c_addr, m, n, c_stride).view(np.int8)),
                    grid("c").copy(), block=tile)
            else:
                w = self._matrix(c_addr, m, n, c_stride, np.float32).copy()
            lr, decay = (np.array([self._reg(r)], np.uint32).view(np.float32)[0]
                         for r in ("DESC_LR", "DESC_DECAY"))
            c = bfp.sgd_step(w, np.ascontiguousarray(c, np.float32), lr, decay=decay)
        value = bfp.epilogue(c, bias=bias, bias_axis="row" if e["BIAS"] == 1 else "col",
                             relu=bool(e["RELU"]), mask_in=mask_in, out="fp32")
        if e["BFP8"] and not np.isfinite(value.value).all():
            return ErrorCode.NONFINITE
        if e["BFP8"]:
            q, exp = bfp.quantize_tiles(value.value, block=tile,
                                        rounding="stochastic" if e["STOCHASTIC"] else "nearest",
                                        seed=seed)
            self._matrix(c_addr, m, n, c_stride).view(np.int8)[...] = q
            addr, shape = grids["c"]
            self.memory[addr:addr + exp.size] = exp.reshape(-1).view(np.uint8)
        else:
            self._matrix(c_addr, m, n, c_stride, np.int32)[...] = value.value.view(np.int32)
        if e["RELU"]:
            self._matrix(mask_addr, m, -(-n // 8), mask_stride)[...] = bfp.pack_mask(value.mask)
        return ErrorCode.NONE

    def _check_regions(self, regions) -> ErrorCode:
        """:func:`sim.models.engine.check_regions` in this model's window and memory."""
        return ErrorCode(check_regions(regions, self._reg64("WINDOW_BASE"),
                                       min(self._reg64("WINDOW_LIMIT"), self.size),
                                       8 * self.bpw, self.addr_width))

    def _grid(self, addr: int, shape) -> np.ndarray:
        """A tile exponent grid in memory (int8, row-major)."""
        return self.memory[addr:addr + shape[0] * shape[1]].view(np.int8).reshape(shape)

    def _conv(self, f: dict, e: dict):
        """A convolution descriptor's geometry (``DESC_CONV``), or None for a GEMM, or the
        error that stops it: ``UNSUPPORTED`` without both tile exponent flags, with
        transposes or quantise-only, SGD but on a weight gradient, a weight gradient with
        bias, ReLU or a mask, or a geometry that does not fit
        (:class:`sim.models.conv.ConvGeometry`); ``ZERO_DIMENSION`` for a zero size.
        Returns a dict: ``mode``, ``geometry``, the implicit GEMM's ``m``, ``n``, ``k``,
        ``offsets``, and the shapes of A, B and C (``a``, ``b``, ``c``: C before a pooling
        stage) and whether A and C are stacks (``a_stack``, ``c_stack``)."""
        v = self._fields("DESC_CONV")
        mode = v["MODE"]
        if not mode:
            return ErrorCode.UNSUPPORTED if v["ADD"] or v["BIAS_GRAD"] else None
        sizes = self._conv_sizes(v)
        if 0 in sizes.values():
            return ErrorCode.ZERO_DIMENSION
        if not (e["A_TILES"] and e["B_TILES"]) or f["TRANSPOSE_A"] or f["TRANSPOSE_B"] \
                or e["QUANTIZE_ONLY"] or (e["SGD"] and mode != 3) \
                or (mode == 3 and (e["BIAS"] or e["RELU"] or e["MASK_IN"] or v["ADD"])) \
                or (mode != 3 and v["BIAS_GRAD"]):
            return ErrorCode.UNSUPPORTED
        g = self._conv_geometry(v, sizes)
        if isinstance(g, ErrorCode):
            return g
        cin, cout = g.channels, g.out_channels
        kk = len(g.offsets)
        x, d, stack = (cin, g.positions), (cout, g.out_positions), (kk * cout, cin)
        if mode == 1:
            return {"mode": 1, "geometry": g, "m": cout, "n": g.out_positions, "k": kk * cin,
                    "offsets": kk, "a": stack, "b": x, "c": d, "a_stack": True,
                    "c_stack": False}
        if mode == 2:
            return {"mode": 2, "geometry": g, "m": cin, "n": g.positions, "k": kk * cout,
                    "offsets": kk, "a": stack, "b": d, "c": x, "a_stack": True,
                    "c_stack": False}
        return {"mode": 3, "geometry": g, "m": kk * cout, "n": cin, "k": g.out_positions,
                "offsets": kk, "a": d, "b": x, "c": stack, "a_stack": False, "c_stack": True}

    def _unfold(self, f: dict, epi: int):
        """A quantise-only descriptor's convolution (``DESC_CONV.MODE`` 1: its input
        unfolded), or the error that stops it: ``ZERO_DIMENSION`` for a zero size;
        ``UNSUPPORTED`` for another mode, transposes, pooling, ``ADD`` or ``BIAS_GRAD``, any
        ``DESC_EPILOGUE`` bit but ``QUANTIZE_ONLY``, ``BFP8`` and ``STOCHASTIC`` (``BFP8``
        set), a batch not a multiple of ``TILE_BLOCK``, or a geometry that does not fit."""
        v = self._fields("DESC_CONV")
        # (Cout unused: not checked)
        sizes = dict(self._conv_sizes(v), cout=1)
        if 0 in sizes.values():
            return ErrorCode.ZERO_DIMENSION
        allowed = regmap.pack("DESC_EPILOGUE", QUANTIZE_ONLY=1, BFP8=1, STOCHASTIC=1)
        if v["MODE"] != 1 or v["ADD"] or v["BIAS_GRAD"] or f["TRANSPOSE_A"] \
                or f["TRANSPOSE_B"] or (epi & ~allowed) \
                or not field_value("DESC_EPILOGUE", "BFP8", epi) \
                or field_value("DESC_POOL", "MODE", self._reg("DESC_POOL")) \
                or sizes["batch"] % regmap.TILE_BLOCK:
            return ErrorCode.UNSUPPORTED
        return self._conv_geometry(v, sizes)

    def _conv_sizes(self, v: dict) -> dict:
        """A convolution descriptor's sizes, each 0 where unset (``ZERO_DIMENSION``): the
        image, channels and batch registers and ``DESC_CONV``'s (``v``) kernel, stride and
        dilation."""
        image, chans = self._fields("DESC_CONV_IMAGE"), self._fields("DESC_CONV_CHANNELS")
        return {"h": image["HEIGHT"], "w": image["WIDTH"], "cin": chans["IN"],
                "cout": chans["OUT"], "batch": self._reg("DESC_CONV_BATCH") & 0xFFFF,
                **{k: v[k] for k in ("KERNEL_H", "KERNEL_W", "STRIDE_H", "STRIDE_W",
                                     "DILATION_H", "DILATION_W")}}

    def _conv_geometry(self, v: dict, sizes: dict):
        """The :class:`sim.models.conv.ConvGeometry` of :meth:`_conv_sizes` and ``v``'s
        padding, or ``UNSUPPORTED`` where the dilated kernel does not fit."""
        try:
            return convm.ConvGeometry(sizes["batch"], sizes["cin"], sizes["h"], sizes["w"],
                                      sizes["cout"], (v["KERNEL_H"], v["KERNEL_W"]),
                                      stride=(v["STRIDE_H"], v["STRIDE_W"]),
                                      padding=(v["PAD_H"], v["PAD_W"]),
                                      dilation=(v["DILATION_H"], v["DILATION_W"]))
        except ValueError:
            return ErrorCode.UNSUPPORTED

    def _pool(self, conv: dict):
        """The pooling stage of a convolution descriptor (``DESC_POOL``): None, or ``(mode,
        Pooling)``, or ``UNSUPPORTED`` (a stage its convolution's mode does not take, or a
        window that does not fit) or ``ZERO_DIMENSION``."""
        v = self._fields("DESC_POOL")
        mode = v["MODE"]
        if not mode:
            return None
        image = self._fields("DESC_POOL_IMAGE")
        h, w = image["HEIGHT"], image["WIDTH"]
        if 0 in (h, w, v["KERNEL_H"], v["KERNEL_W"], v["STRIDE_H"], v["STRIDE_W"]):
            return ErrorCode.ZERO_DIMENSION
        if mode == 3 or mode != conv["mode"]:
            return ErrorCode.UNSUPPORTED       # (pool a forward C, unpool a backward-data C)
        g = conv["geometry"]
        channels = conv["c"][0]
        try:
            pg = convm.pool_geometry(g.batch, channels, h, w, (v["KERNEL_H"], v["KERNEL_W"]),
                                     (v["STRIDE_H"], v["STRIDE_W"]))
            pooling = convm.Pooling(convm.POOL_KINDS[v["KIND"]], pg)
        except ValueError:
            return ErrorCode.UNSUPPORTED
        # the pool's input is the forward C; its output the backward-data C
        if (mode == 1 and (h, w) != (g.out_height, g.out_width)) \
                or (mode == 2 and (pg.out_height, pg.out_width) != (g.height, g.width)):
            return ErrorCode.UNSUPPORTED
        return mode, pooling

    def _execute_conv(self, conv: dict, f: dict, e: dict) -> ErrorCode:
        """A convolution descriptor (:meth:`_conv`): its implicit GEMM
        (:mod:`sim.models.conv`), then the write path of
        :func:`sim.models.conv.conv_epilogue` or, for a weight gradient, the SGD step and
        :func:`sim.models.conv.quantize_stack`, written where the descriptor says."""
        tile = regmap.TILE_BLOCK
        stage = self._pool(conv)
        if isinstance(stage, ErrorCode):
            return stage
        g, kk, mode = conv["geometry"], conv["offsets"], conv["mode"]
        # (the GEMM the engine schedules: offsets over padding skipped)
        *self.last_mnk, self.last_macs = g.implicit_gemm(mode)
        self.last_conv = (mode, g)
        pooling = None if stage is None else stage[1]
        # C as written, and the shape the bias, ReLU and masks see
        mid = conv["c"]
        if stage is not None and stage[0] == 2:
            mid = (mid[0], pooling.geometry.positions)
        out = (mid[0], pooling.geometry.out_positions) if stage and stage[0] == 1 else mid
        # (no fewer cycles than its compulsory traffic: the GEMM-shaped prediction reuses A
        # across column tiles, where a backward-data pass over a kernel as large as the
        # image reads a different offset's matrix for every position)
        rd_a, rd_b, _ = g.compulsory_bytes(mode)
        wr = out[0] * out[1] * (1 if e["BFP8"] else 4)
        rd = rd_a + rd_b + (wr if e["SGD"] else 0)
        fields = self._fields("DESC_CONV")
        add, bias_grad = fields["ADD"], mode == 3 and fields["BIAS_GRAD"]
        if add:
            # (the summand's bytes, read per unit by the side loader as a stored mask's rows
            # are, while the array computes: in the traffic, not after the GEMM)
            rd += mid[0] * mid[1]
        if bias_grad:
            # (the biases' float32 read for SGD and written: the row sums come from an adder
            # per row beside the array, taking A's tiles as the stack's first matrix does)
            wr += 4 * conv["a"][0]
            rd += 4 * conv["a"][0] if e["SGD"] else 0
        self.last_floor = -(-max(rd, wr // self.write_ports) // self.bpw)
        a_addr, a_stride = self._reg64("DESC_A_ADDR"), self._reg("DESC_A_STRIDE")
        b_addr, b_stride = self._reg64("DESC_B_ADDR"), self._reg("DESC_B_STRIDE")
        c_addr, c_stride = self._reg64("DESC_C_ADDR"), self._reg("DESC_C_STRIDE")
        bias_addr = self._reg64("DESC_BIAS_ADDR")

        def grid_shape(shape, stack):
            gm, gn = bfp.tile_grid((shape[0] // kk, shape[1]) if stack else shape, block=tile)
            return (kk * gm, gn) if stack else (gm, gn)

        grids = {"a": (self._reg64("DESC_ROW_EXP_ADDR"), grid_shape(conv["a"], conv["a_stack"])),
                 "b": (self._reg64("DESC_COL_EXP_ADDR"), grid_shape(conv["b"], False))}
        if e["BFP8"]:
            grids["c"] = (self._reg64("DESC_C_EXP_ADDR"), grid_shape(out, conv["c_stack"]))
        regions = [(a_addr, conv["a"][0], a_stride, conv["a"][1], 1),
                   (b_addr, conv["b"][0], b_stride, conv["b"][1], 1),
                   (c_addr, out[0], c_stride, out[1] * (1 if e["BFP8"] else 4), 0)]
        regions += [(addr, 1, 0, shape[0] * shape[1], 0) for addr, shape in grids.values()]
        if e["BIAS"]:
            if e["BIAS"] != 1:
                return ErrorCode.UNSUPPORTED         # (a channel's bias: one per row)
            regions.append((bias_addr, 1, 0, 4 * mid[0], 0))
        if bias_grad:
            regions.append((bias_addr, 1, 0, 4 * conv["a"][0], 0))
        mask_addr, mask_stride = self._reg64("DESC_MASK_ADDR"), self._reg("DESC_MASK_STRIDE")
        if e["RELU"] or e["MASK_IN"]:
            regions.append((mask_addr, mid[0], mask_stride, -(-mid[1] // 8), 0))
        add_addr, add_stride = self._reg64("DESC_ADD_ADDR"), self._reg("DESC_ADD_STRIDE")
        if add:
            grids["add"] = (self._reg64("DESC_ADD_EXP_ADDR"), grid_shape(mid, False))
            regions += [(add_addr, mid[0], add_stride, mid[1], 1),
                        (grids["add"][0], 1, 0, grids["add"][1][0] * grids["add"][1][1], 0)]
        arg_addr, arg_stride = self._reg64("DESC_ARGMAX_ADDR"), self._reg("DESC_ARGMAX_STRIDE")
        pooled = None
        if pooling is not None and pooling.kind == "max":
            pooled = (mid[0], pooling.geometry.out_positions)
            regions.append((arg_addr, pooled[0], arg_stride, pooled[1], 0))
        code = self._check_regions(regions)
        if code:
            return code

        def grid(name):
            return self._grid(*grids[name])

        def operand(name, addr, stride):
            rows, cols = conv[name]
            return np.ascontiguousarray(self._matrix(addr, rows, cols, stride).view(np.int8))

        a, b = operand("a", a_addr, a_stride), operand("b", b_addr, b_stride)
        ga, gb = grid("a").copy(), grid("b").copy()
        if mode == 3:
            c = convm.conv2d_weight_grad(a, ga, b, gb, g, block=tile).reshape(conv["c"])
        else:
            w = a.reshape(kk, -1, a.shape[1])
            wg = ga.reshape(kk, -1, ga.shape[1])
            run = convm.conv2d_forward if mode == 1 else convm.conv2d_backward_data
            c = run(b, gb, w, wg, g, block=tile)
        seed = self._reg("DESC_SEED_HI") << 32 | self._reg("DESC_SEED_LO")
        rounding = "stochastic" if e["STOCHASTIC"] else "nearest"
        if mode == 3:
            stack = (kk, conv["c"][0] // kk, conv["c"][1])
            bias = convm.bias_grad(a, ga, block=tile) if bias_grad else None
            if e["SGD"]:
                if e["BFP8"]:
                    q = self._matrix(c_addr, *conv["c"], c_stride).view(np.int8)
                    w = convm.dequantize_stack(np.ascontiguousarray(q).reshape(stack),
                                               grid("c").reshape(kk, -1, grid("c").shape[1]),
                                               block=tile).reshape(conv["c"])
                else:
                    w = self._matrix(c_addr, *conv["c"], c_stride, np.float32).copy()
                lr, decay = (np.array([self._reg(r)], np.uint32).view(np.float32)[0]
                             for r in ("DESC_LR", "DESC_DECAY"))
                c = bfp.sgd_step(w, c, lr, decay=decay)
                if bias is not None:
                    old = self.memory[bias_addr:bias_addr + bias.nbytes].view(np.float32)
                    bias = bfp.sgd_step(old.copy(), bias, lr, decay=decay)
            if e["BFP8"] and not np.isfinite(c).all():
                return ErrorCode.NONFINITE
            if bias is not None:
                self.memory[bias_addr:bias_addr + bias.nbytes] = bias.view(np.uint8)
            if not e["BFP8"]:
                self._matrix(c_addr, *conv["c"], c_stride, np.int32)[...] = c.view(np.int32)
                return ErrorCode.NONE
            q, exp = convm.quantize_stack(c.reshape(stack), block=tile, rounding=rounding,
                                          seed=seed)
            self._matrix(c_addr, *conv["c"], c_stride).view(np.int8)[...] = \
                q.reshape(conv["c"])
            addr = grids["c"][0]
            self.memory[addr:addr + exp.size] = exp.reshape(-1).view(np.uint8)
            return ErrorCode.NONE
        bias = None
        if e["BIAS"]:
            bias = self.memory[bias_addr:bias_addr + 4 * mid[0]].view(np.float32).copy()
        mask_in = argmax = None
        if e["MASK_IN"]:
            bits = self._matrix(mask_addr, mid[0], -(-mid[1] // 8), mask_stride)
            mask_in = bfp.unpack_mask(np.ascontiguousarray(bits), mid[1])
        if stage is not None and stage[0] == 2 and pooled is not None:
            argmax = np.ascontiguousarray(
                self._matrix(arg_addr, *pooled, arg_stride)).view(convm.ARGMAX_DTYPE)
        residual = None
        if add:
            q = np.ascontiguousarray(self._matrix(add_addr, *mid, add_stride).view(np.int8))
            residual = bfp.dequantize_tiles(q, grid("add"), block=tile)
        try:
            r = convm.conv_epilogue(c, bias=bias, relu=bool(e["RELU"]), mask_in=mask_in,
                                    pool_out=pooling if stage and stage[0] == 1 else None,
                                    unpool_in=pooling if stage and stage[0] == 2 else None,
                                    argmax=argmax, residual=residual, out="fp32")
        except ValueError:
            return ErrorCode.UNSUPPORTED             # (an argmax beyond the window)
        if e["BFP8"]:
            if not np.isfinite(r.value).all():
                return ErrorCode.NONFINITE
            q, exp = bfp.quantize_tiles(r.value, block=tile, rounding=rounding, seed=seed)
            self._matrix(c_addr, *out, c_stride).view(np.int8)[...] = q
            addr = grids["c"][0]
            self.memory[addr:addr + exp.size] = exp.reshape(-1).view(np.uint8)
        else:
            self._matrix(c_addr, *out, c_stride, np.int32)[...] = r.value.view(np.int32)
        if e["RELU"]:
            self._matrix(mask_addr, mid[0], -(-mid[1] // 8), mask_stride)[...] = \
                bfp.pack_mask(r.mask)
        if r.argmax is not None:
            self._matrix(arg_addr, *pooled, arg_stride)[...] = r.argmax.view(np.uint8)
        return ErrorCode.NONE

    def _row_exp(self, m: int, f: dict) -> np.ndarray:
        if f["ROW_EXP_VECTOR"]:
            at = self._reg64("DESC_ROW_EXP_ADDR")
            return self.memory[at:at + m].view(np.int8).astype(np.int8)
        return np.full(m, _signed8(f["ROW_EXP"]), np.int8)

    def _col_exp(self, n: int, f: dict) -> np.ndarray:
        if f["COL_EXP_VECTOR"]:
            at = self._reg64("DESC_COL_EXP_ADDR")
            return self.memory[at:at + n].view(np.int8).astype(np.int8)
        return np.full(n, _signed8(f["COL_EXP"]), np.int8)
