"""The accelerator top: register block, descriptor queue, engine and AXI4 DMA masters."""

import operator
from functools import reduce
from types import SimpleNamespace

from amaranth import ClockSignal, Instance, Module, Mux, ResetInserter, ResetSignal, Signal, Value
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from firmware.spec import regmap
from firmware.spec.regmap import ErrorCode

from ._util import FIFO_SLICE_BITS, own_reset, wide_accumulator
from .csr import AXI4LiteSignature, RegisterBlock
from .dma import AXI4ReadSignature, AXI4WriteSignature, DmaReader, DmaWriter
from .engine import GemmEngine, descriptor_layout
from .fifo import Fifo

__all__ = ["Accelerator"]



def _field(csr, reg, name):
    """Field ``name`` of register ``reg``'s port on ``csr``."""
    f = regmap.by_name(reg).field(name)
    return getattr(csr, reg.lower())[f.lsb:f.lsb + f.width]


def _pack(csr, reg, **values):
    """Statements driving the named fields of register ``reg``'s port on ``csr``."""
    port = getattr(csr, reg.lower())
    return [port[regmap.by_name(reg).field(k).lsb:][:regmap.by_name(reg).field(k).width]
            .eq(v) for k, v in values.items()]


class Accelerator(wiring.Component):
    """The int8 GEMM accelerator a host drives through :data:`firmware.spec.regmap.REGISTERS`.

    The host stages a descriptor in the ``DESC_*`` registers and writes ``CTRL.ENQUEUE``; the
    descriptor is copied into a queue of ``queue`` entries and run by :class:`GemmEngine` in
    order, a descriptor with ``DESC_FLAGS.OVERLAP`` started while the one before it still
    writes its C (``QUEUE_LEVEL`` counts the queue and the engine's two). The engine reads
    A, B and exponent vectors and writes C through an AXI4 manager (read half
    :attr:`mem_r`, write half :attr:`mem_w`), never outside
    ``[WINDOW_BASE, WINDOW_LIMIT)``. With ``write_ports`` P of 2 to 6, P - 1 more AXI4 write
    managers, :attr:`mem_w1` ..., write the C tiles' rows ``p mod P``
    (:class:`rtl.writeback.WriteBackPorts`): connected to other memory ports (the Zynq PS's
    other HP ports), C leaves at up to P bus words a cycle. With ``read_ports`` 2, a second
    AXI4 read manager, :attr:`mem_r1`, reads B (and the column exponents) while :attr:`mem_r`
    reads A (and the row exponents): connected to another memory port, the operands arrive
    at up to two bus words a cycle. With ``read_ports`` 3, B's rows are striped over
    :attr:`mem_r1` (even rows) and :attr:`mem_r2` (odd rows; :mod:`rtl.stripe`): B arrives
    at up to two bus words a cycle, A at one; with 4, over :attr:`mem_r1`, :attr:`mem_r2`
    and :attr:`mem_r3` (rows 0, 1 and 2 mod 3): B at up to three; with 5, over :attr:`mem_r1`
    to :attr:`mem_r4` (rows 0 to 3 mod 4): B at up to four.

    Errors stop the engine with ``STATUS.ERROR`` and a code: a rejected descriptor (nothing
    touched), SLVERR/DECERR on a read or a write, or an ENQUEUE into a full queue. After a bus
    error the engine aborts: it stops issuing, completes the bursts in flight (writes with no
    strobes), and resets its datapath. ``CTRL.SOFT_RESET`` does the same from any state,
    empties the queue and clears the error, so the engine works again afterwards.

    :attr:`irq` is high while an enabled ``IRQ_STATUS`` bit is set.

    Parameters
    ----------
    rows, cols, depth, block, packing, primitive, dsp_rows, acc_ram, slr_groups, dsp_slice :
        As :class:`rtl.engine.GemmEngine`.
    data_width, addr_width : int
        AXI4 manager data width (64/128/256/512) and address width (32/40/64).
    queue : int
        Descriptor queue depth.
    burst_beats, outstanding : int
        DMA bursts (see :class:`rtl.dma.DmaReader`).
    write_ports : {1, 2, 3, 4, 5, 6}
        AXI4 write managers (``CONFIG_BUS.WRITE_PORTS``); at most ``rows``.
    read_ports : {1, 2, 3, 4, 5}
        AXI4 read managers (``CONFIG_BUS.READ_PORTS``).
    k_blocks : bool
        Offer tile exponents along K (``CONFIG_FEATURES.K_BLOCKS``): a descriptor whose
        ``DESC_EPILOGUE`` is exactly ``A_TILES`` and ``B_TILES`` runs as
        :func:`sim.models.bfp.gemm_kblocks` (:class:`rtl.engine.GemmEngine`); any other
        ``DESC_EPILOGUE`` bits are refused with ``UNSUPPORTED``.
    epilogue : bool
        Also offer BFP8 output (``DESC_EPILOGUE.BFP8`` with or without ``STOCHASTIC``,
        ``CONFIG_FEATURES.OPS``): C written as BFP8 tile blocks at ``DESC_C_ADDR`` and
        ``DESC_C_EXP_ADDR`` (:class:`rtl.engine.GemmEngine`'s ``epilogue``); a block holding
        inf or NaN stops the accelerator with ``NONFINITE`` once it is written (as zeros).
        With at least 8 columns also ``RELU`` on a BFP8 C: ReLU before the quantiser, its
        mask written at ``DESC_MASK_ADDR`` (``DESC_MASK_STRIDE`` bytes a row). Also
        ``BIAS`` (1: a float32 a row, 2: a column, at ``DESC_BIAS_ADDR``, added before the
        ReLU) and ``MASK_IN`` (C zeroed where the mask stored at ``DESC_MASK_ADDR`` is 0) on
        a BFP8 C. Where a tile row is whole bus words (the engine's ``quantize`` and
        ``fp32``), also ``QUANTIZE_ONLY`` with ``BFP8``: the M x N float32 matrix at
        ``DESC_A_ADDR`` quantised (with the options above) instead of a GEMM's C, and with
        ``conv`` and ``unfold`` a convolution's input unfolded (``DESC_CONV.MODE`` 1,
        ``CONFIG_FEATURES.UNFOLD``: BFP8 alone, the batch whole tile blocks); and
        ``RELU``, ``BIAS`` and ``MASK_IN`` on a float32 C (``CONFIG_FEATURES.FP32``).
        ``RELU``, ``BIAS`` or ``MASK_IN`` without ``BFP8`` elsewhere, ``QUANTIZE_ONLY``
        without ``BFP8`` or with ``A_TILES`` or ``B_TILES``, ``BIAS`` 3, and any epilogue
        bit with ``DESC_FLAGS.RAW``, are refused with ``UNSUPPORTED``, as are the epilogue's
        other bits.
    sgd : bool
        With ``epilogue``, also ``SGD`` with ``BFP8``: the BFP8 weights stored at
        ``DESC_C_ADDR`` and ``DESC_C_EXP_ADDR`` stepped by the GEMM's result, ``DESC_DECAY
        * w - DESC_LR * g`` rounded to float32 and quantised over them (the engine's
        ``sgd``). ``SGD`` without ``BFP8`` (a float32 target) or with ``BIAS``, ``RELU``,
        ``MASK_IN`` or ``QUANTIZE_ONLY`` is refused with ``UNSUPPORTED``. Where a tile row
        is whole bus words (the engine's ``fp32``, ``CONFIG_FEATURES.FP32``), ``RELU``,
        ``BIAS``, ``MASK_IN`` and ``SGD`` of one row (M = 1, a bias vector) run on a float32
        C too: written as float32 rows through the first write port.
    conv : bool
        With ``k_blocks`` and at most ``TILE_BLOCK`` columns, also convolutions: forward
        and backward-data (``DESC_CONV.MODE`` 1 and 2, ``CONFIG_FEATURES.CONV_FORWARD`` and
        ``CONV_BACKWARD_DATA``) with ``A_TILES`` and ``B_TILES``, the batch a multiple of
        ``cols``, without transposes, pooling, a residual sum, ``QUANTIZE_ONLY`` or ``SGD``;
        weight gradients (mode 3, ``CONV_WEIGHT_GRAD``) with ``A_TILES`` and ``B_TILES``
        alone (a float32 stack), the batch a multiple of ``TILE_BLOCK`` and the output
        channels of ``rows``. Others are refused with ``UNSUPPORTED``. The engine's
        ``conv``.
    unfold : bool
        With ``conv`` and the epilogue's quantiser: quantise-only descriptors that unfold a
        convolution's input (``CONFIG_FEATURES.UNFOLD``; ``build.py --conv --epilogue``
        builds it, :doc:`architecture`, "A first layer over its input unfolded").

    Attributes
    ----------
    ctrl : In(AXI4LiteSignature(12))
    mem_r : Out(AXI4ReadSignature(addr_width, data_width))
    mem_w : Out(AXI4WriteSignature(addr_width, data_width))
    mem_w1 ... mem_w5 : Out(AXI4WriteSignature(addr_width, data_width))
        With ``write_ports`` 2 (``mem_w1``) to 6.
    mem_r1, mem_r2, mem_r3, mem_r4 : Out(AXI4ReadSignature(addr_width, data_width))
        With ``read_ports`` 2 (``mem_r1``), 3 (and ``mem_r2``), 4 (and ``mem_r3``) or 5.
    irq : Out(1)
    """

    def __init__(self, rows: int = 8, cols: int = 8, *, depth: int = 512,
                 data_width: int = 128, addr_width: int = 32, queue: int = 4, block: int = 4,
                 packing: int = 1, primitive: bool = False, burst_beats: int = 16,
                 outstanding: int = 8, dsp_rows: int | None = None, acc_ram: str = "auto",
                 write_ports: int = 1, slr_groups: int = 1, read_ports: int = 1,
                 dsp_slice: str = "DSP48E2", k_blocks: bool = False, epilogue: bool = False,
                 sgd: bool = False, conv: bool = False, unfold: bool = False):
        # (+ the two the engine may hold: QUEUE_LEVEL's 8 bits)
        if not isinstance(queue, int) or not 1 <= queue <= 253:
            raise ValueError(f"queue must be an integer in 1..253, not {queue!r}")
        # (the engine checks write_ports)
        self.engine = GemmEngine(rows, cols, depth=depth, data_width=data_width,
                                 addr_width=addr_width, block=block, packing=packing,
                                 primitive=primitive, dsp_rows=dsp_rows, acc_ram=acc_ram,
                                 write_ports=write_ports, slr_groups=slr_groups,
                                 read_ports=read_ports, dsp_slice=dsp_slice,
                                 k_blocks=k_blocks, epilogue=epilogue, sgd=sgd, conv=conv,
                                 unfold=unfold)
        self.k_blocks, self.epilogue, self.sgd = bool(k_blocks), bool(epilogue), bool(sgd)
        self.conv = bool(conv)
        #: ``CONFIG_FEATURES.OPS``: the ``DESC_EPILOGUE`` bits 7..0 this build runs
        self.ops = regmap.pack("DESC_EPILOGUE", BFP8=1, STOCHASTIC=1, BIAS=3, MASK_IN=1,
                               RELU=int(self.engine.relu),
                               QUANTIZE_ONLY=int(self.engine.quantize),
                               SGD=int(self.sgd)) if self.epilogue else 0
        self.burst_beats, self.outstanding = burst_beats, outstanding
        self.readers = [DmaReader(data_width, addr_width, burst_beats=burst_beats,
                                  outstanding=outstanding) for _ in range(read_ports)]
        self.reader = self.readers[0]
        self.read_ports = read_ports
        self.writers = [DmaWriter(data_width, addr_width, burst_beats=burst_beats,
                                  outstanding=outstanding) for _ in range(write_ports)]
        self.writer = self.writers[0]
        self.write_ports = write_ports
        self.csr = RegisterBlock(12)
        self.rows, self.cols, self.depth, self.queue = rows, cols, depth, queue
        self.block, self.primitive = block, bool(primitive)
        self.data_width, self.addr_width, self.packing = data_width, addr_width, packing
        super().__init__({
            "ctrl": In(AXI4LiteSignature(12)),
            **{f"mem_r{p or ''}": Out(AXI4ReadSignature(addr_width, data_width))
               for p in range(read_ports)},
            "mem_w": Out(AXI4WriteSignature(addr_width, data_width)),
            **{f"mem_w{p}": Out(AXI4WriteSignature(addr_width, data_width))
               for p in range(1, write_ports)},
            "irq": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        core_rst = Signal()
        dma_rst = Signal()
        queue_rst = Signal()
        s = SimpleNamespace(m=m, core_rst=core_rst, dma_rst=dma_rst, queue_rst=queue_rst)
        self._submodules(s)
        self._identification(s)
        self._descriptor_queue(s)
        self._control(s)
        self._dma(s)
        self._status(s)
        return m

    def _submodules(self, s):
        """The register block, the engine and the DMA masters, each master reset through a
        registered copy of ``dma_rst`` of its own; the bus ports."""
        core_rst, m, dma_rst = s.core_rst, s.m, s.dma_rst
        m.submodules.csr = csr = self.csr
        # The engine resets through its own registered, per-part copies of core_rst (one cycle
        # later, see GemmEngine.soft_reset); core_rst_d tracks them, so that nothing starts
        # the engine in the cycle its parts are still being reset.
        m.submodules.engine = engine = self.engine
        core_rst_d = Signal(init=1)
        m.d.sync += core_rst_d.eq(core_rst)
        m.d.comb += engine.soft_reset.eq(core_rst)
        # Each DMA master resets through its own registered copy of dma_rst (kept apart, as
        # the engine's parts are), so that no one net reaches every master's flip-flops; the
        # abort lasts a cycle longer (`settled`) for the copies to act.
        readers, writers = self.readers, self.writers
        masters = {**{f"reader{p or ''}": r for p, r in enumerate(readers)},
                   **{f"writer{p or ''}": w for p, w in enumerate(writers)}}
        for name, master in masters.items():
            # set by the domain reset, and the master's only reset (no flip-flop of it reads
            # the external reset net)
            copy = Signal(init=1, name=f"rst_{name}", attrs={"keep": "true"})
            if self.primitive:       # an instance: Yosys would merge equal plain registers
                m.submodules[f"rst_{name}_ff"] = Instance(
                    "FDSE", p_INIT=1, i_C=ClockSignal(), i_CE=1, i_S=ResetSignal(),
                    i_D=dma_rst, o_Q=copy, a_keep="true")
            else:
                m.d.sync += copy.eq(dma_rst)
            m.submodules[name] = own_reset(m, f"rst_{name}", master, copy)
        wiring.connect(m, wiring.flipped(self.ctrl), csr.bus)
        for p, r in enumerate(readers):
            wiring.connect(m, r.bus, wiring.flipped(getattr(self, f"mem_r{p or ''}")))
        for p, w in enumerate(writers):
            wiring.connect(m, w.bus, wiring.flipped(getattr(self, f"mem_w{p or ''}")))
        vars(s).update(csr=csr, engine=engine, core_rst_d=core_rst_d, readers=readers,
                       writers=writers)

    def _identification(self, s):
        """The identification and configuration registers."""
        m, csr = s.m, s.csr
        # ---- identification and configuration ---------------------------------------------
        m.d.comb += [
            csr.id.eq(regmap.MAGIC), csr.version.eq(regmap.VERSION),
            *_pack(csr, "CONFIG_ARRAY", ROWS=self.rows, COLS=self.cols),
            *_pack(csr, "CONFIG_BUFFER", DEPTH=self.depth, QUEUE=self.queue, PACKING=self.packing,
                   BLOCK_LOG2=self.block.bit_length() - 1),
            *_pack(csr, "CONFIG_BUS", DATA_WIDTH=self.data_width, ADDR_WIDTH=self.addr_width,
                   WRITE_PORTS=self.write_ports, READ_PORTS=self.read_ports),
            *_pack(csr, "CONFIG_DMA", BURST_BEATS=self.burst_beats,
                   OUTSTANDING=self.outstanding),
            # tile exponents with k_blocks, BFP8 output with epilogue: other descriptors'
            # DESC_EPILOGUE bits are refused
            *_pack(csr, "CONFIG_FEATURES", EPILOGUE=0, K_BLOCKS=int(self.k_blocks),
                   FP32=int(self.epilogue and self.engine.fp32),
                   CONV_FORWARD=int(self.conv), CONV_BACKWARD_DATA=int(self.conv),
                   CONV_WEIGHT_GRAD=int(self.conv), POOL_FORWARD=int(self.engine.pool),
                   UNFOLD=int(self.engine.unfold),
                   POOL_BACKWARD=int(self.engine.pool),
                   TILE_LOG2=regmap.TILE_BLOCK.bit_length() - 1, OPS=self.ops),
        ]

    def _descriptor_queue(self, s):
        """The descriptor staged in the ``DESC_*`` registers, and the queue it is enqueued
        into."""
        m, queue_rst, csr = s.m, s.queue_rst, s.csr
        # ---- descriptor queue -------------------------------------------------------------
        layout = descriptor_layout(self.k_blocks, self.epilogue, self.conv)
        # (in slices, each with its own read enable: one would drive every bit's)
        m.submodules.queue = q = ResetInserter(queue_rst)(
            Fifo(width=layout.size, depth=self.queue, slice_bits=FIFO_SLICE_BITS))
        staged = Signal(layout)

        def addr(name):
            return (getattr(csr, f"{name}_hi"), getattr(csr, f"{name}_lo"))

        for name in ("a_addr", "b_addr", "c_addr", "row_exp_addr", "col_exp_addr",
                     *(("c_exp_addr", "mask_addr", "bias_addr") if self.epilogue else ())):
            hi, lo = addr(f"desc_{name}")
            m.d.comb += getattr(staged, name).eq(hi << 32 | lo)
        if self.epilogue:
            m.d.comb += [staged.bfp8.eq(_field(csr, "DESC_EPILOGUE", "BFP8")),
                         staged.stochastic.eq(_field(csr, "DESC_EPILOGUE", "STOCHASTIC")),
                         staged.seed.eq(csr.desc_seed_hi << 32 | csr.desc_seed_lo),
                         staged.relu.eq(_field(csr, "DESC_EPILOGUE", "RELU")
                                        if self.engine.relu else 0),
                         staged.mask_stride.eq(csr.desc_mask_stride),
                         staged.bias.eq(_field(csr, "DESC_EPILOGUE", "BIAS")),
                         staged.mask_in.eq(_field(csr, "DESC_EPILOGUE", "MASK_IN")),
                         staged.quantize_only.eq(_field(csr, "DESC_EPILOGUE", "QUANTIZE_ONLY")
                                                 if self.engine.quantize else 0),
                         staged.sgd.eq(_field(csr, "DESC_EPILOGUE", "SGD") if self.sgd else 0),
                         staged.lr.eq(csr.desc_lr), staged.decay.eq(csr.desc_decay)]
        m.d.comb += [
            staged.m.eq(csr.desc_m), staged.n.eq(csr.desc_n), staged.k.eq(csr.desc_k),
            staged.transpose_a.eq(_field(csr, "DESC_FLAGS", "TRANSPOSE_A")),
            staged.transpose_b.eq(_field(csr, "DESC_FLAGS", "TRANSPOSE_B")),
            staged.raw.eq(_field(csr, "DESC_FLAGS", "RAW")),
            staged.row_vec.eq(_field(csr, "DESC_FLAGS", "ROW_EXP_VECTOR")),
            staged.col_vec.eq(_field(csr, "DESC_FLAGS", "COL_EXP_VECTOR")),
            staged.row_exp.eq(_field(csr, "DESC_FLAGS", "ROW_EXP")),
            staged.col_exp.eq(_field(csr, "DESC_FLAGS", "COL_EXP")),
            staged.block.eq(_field(csr, "DESC_FLAGS", "BLOCK")),
            staged.overlap.eq(_field(csr, "DESC_FLAGS", "OVERLAP")),
            staged.chunk.eq(_field(csr, "DESC_FLAGS", "CHUNK")),
            staged.a_stride.eq(csr.desc_a_stride), staged.b_stride.eq(csr.desc_b_stride),
            staged.c_stride.eq(csr.desc_c_stride),
            q.w_data.eq(staged),
        ]
        enqueue = _field(csr, "CTRL", "ENQUEUE")
        soft_reset = _field(csr, "CTRL", "SOFT_RESET")
        # a descriptor that asks for what CONFIG_FEATURES does not offer (any DESC_EPILOGUE
        # bit) stops the engine with UNSUPPORTED instead of being queued
        unsupported = Signal()
        # (A_TILES and B_TILES together, with K blocks; BFP8 and STOCHASTIC, with the
        # epilogue (STOCHASTIC alone rounds nothing), RELU with BFP8 where the engine has
        # it, BIAS 1 or 2 and MASK_IN with BFP8, QUANTIZE_ONLY with BFP8 and without tile
        # exponents where the engine has it, SGD with BFP8 alone where built; nothing else)
        tiles = regmap.pack("DESC_EPILOGUE", A_TILES=1, B_TILES=1)
        out = self.ops
        e = csr.desc_epilogue
        rest = e & ~((tiles if self.k_blocks else 0) | out)
        bad_tiles = ((e & tiles) != 0) & ((e & tiles) != tiles) if self.k_blocks else 0
        side_fp32 = 0
        if self.epilogue:           # what a float32 C may not have (all but BFP8 without fp32)
            bias = _field(csr, "DESC_EPILOGUE", "BIAS")
            only = _field(csr, "DESC_EPILOGUE", "QUANTIZE_ONLY")
            sgd = _field(csr, "DESC_EPILOGUE", "SGD")
            bfp8 = _field(csr, "DESC_EPILOGUE", "BFP8")
            side = (_field(csr, "DESC_EPILOGUE", "RELU") | (bias != 0)
                    | _field(csr, "DESC_EPILOGUE", "MASK_IN"))
            relu_etc = side | only
            if self.engine.fp32:
                # a float32 C through the epilogue: not quantise-only; SGD of one row only
                fp32_bad = ~bfp8 & (only | (sgd & (csr.desc_m != 1)))
            else:
                fp32_bad = ~bfp8 & (relu_etc | sgd)
            side_fp32 = (fp32_bad | (bias == 3) | (only & ((e & tiles) != 0))
                         | (sgd & relu_etc))
        # (and, as the functional model, any epilogue bit on a RAW descriptor)
        raw_epi = _field(csr, "DESC_FLAGS", "RAW") & (e != 0)
        # (no general convolutions, residual sums or bias gradients on this RTL:
        # CONFIG_FEATURES.CONV, POOL, ADD and BIAS_GRAD are 0; with ``conv`` forward,
        # backward-data and weight-gradient convolutions, CONFIG_FEATURES.CONV_FORWARD,
        # CONV_BACKWARD_DATA and CONV_WEIGHT_GRAD, with tile exponents and without
        # transposes, quantise-only or SGD, the batch a multiple of the columns; a weight
        # gradient's, the batch a multiple of TILE_BLOCK, as a float32 or BFP8 stack, SGD
        # of a BFP8 stack, or of a float32 row from a 1 x 1 one)
        mode = _field(csr, "DESC_CONV", "MODE")
        conv = ((mode != 0) | _field(csr, "DESC_CONV", "ADD")
                | _field(csr, "DESC_CONV", "BIAS_GRAD")
                | (_field(csr, "DESC_POOL", "MODE") != 0))
        if self.conv:
            batch = csr.desc_conv_batch[:16]
            cout = _field(csr, "DESC_CONV_CHANNELS", "OUT")
            common = (((e & tiles) == tiles)
                      & ~_field(csr, "DESC_FLAGS", "TRANSPOSE_A")
                      & ~_field(csr, "DESC_FLAGS", "TRANSPOSE_B")
                      & ~_field(csr, "DESC_CONV", "ADD")
                      & ~_field(csr, "DESC_CONV", "BIAS_GRAD")
                      & self._pool_ok(csr, mode)
                      & ((batch & (self.cols - 1)) == 0))
            data_ok = (mode == 1) | (mode == 2)
            if self.epilogue:
                data_ok = data_ok & ~_field(csr, "DESC_EPILOGUE", "QUANTIZE_ONLY") \
                    & ~_field(csr, "DESC_EPILOGUE", "SGD")
            # (a weight gradient: a float32 stack, the batch whole K runs)
            grad_out = e == tiles
            if self.epilogue:
                # (or a BFP8 stack, each offset's matrix with its own tile grid, and SGD on
                # one; or SGD on a float32 row: a bias)
                bfp = regmap.pack("DESC_EPILOGUE", BFP8=1, STOCHASTIC=1,
                                  SGD=int(self.sgd))
                grad_out = grad_out | (((e & ~(tiles | bfp)) == 0)
                                       & _field(csr, "DESC_EPILOGUE", "BFP8"))
                if self.sgd and self.engine.fp32:
                    # (a 1 x 1 weight gradient of one row: a bias's, from a row of ones)
                    f32_sgd = regmap.pack("DESC_EPILOGUE", SGD=1)
                    grad_out = grad_out | ((e == (tiles | f32_sgd)) & (cout == 1)
                                           & (_field(csr, "DESC_CONV", "KERNEL_H") == 1)
                                           & (_field(csr, "DESC_CONV", "KERNEL_W") == 1))
            grad_ok = ((mode == 3) & grad_out
                       & ((batch & (regmap.TILE_BLOCK - 1)) == 0))
            forward = common & (data_ok | grad_ok)
            if self.engine.unfold:
                # (quantise-only: a forward convolution's input unfolded, BFP8 alone, the
                # batch whole tile blocks)
                qo = regmap.pack("DESC_EPILOGUE", QUANTIZE_ONLY=1, BFP8=1)
                unfold = ((mode == 1) & ((e & ~regmap.pack("DESC_EPILOGUE", STOCHASTIC=1))
                                         == qo)
                          & ~_field(csr, "DESC_FLAGS", "TRANSPOSE_A")
                          & ~_field(csr, "DESC_FLAGS", "TRANSPOSE_B")
                          & ~_field(csr, "DESC_CONV", "ADD")
                          & ~_field(csr, "DESC_CONV", "BIAS_GRAD")
                          & (_field(csr, "DESC_POOL", "MODE") == 0)
                          & ((batch & (regmap.TILE_BLOCK - 1)) == 0))
                forward = forward | unfold
            conv = conv & ~forward
            m.d.comb += [staged.conv.eq(mode != 0),
                         staged.cin.eq(_field(csr, "DESC_CONV_CHANNELS", "IN")),
                         staged.cout.eq(cout),
                         *(getattr(staged.geometry, f.lower()).eq(_field(csr, "DESC_CONV", f))
                           for f in ("KERNEL_H", "KERNEL_W", "STRIDE_H", "STRIDE_W", "PAD_H",
                                     "PAD_W", "DILATION_H", "DILATION_W")),
                         staged.geometry.mode.eq(mode),
                         *self._pool_staging(csr, staged),
                         staged.geometry.height.eq(_field(csr, "DESC_CONV_IMAGE", "HEIGHT")),
                         staged.geometry.width.eq(_field(csr, "DESC_CONV_IMAGE", "WIDTH")),
                         staged.geometry.batch.eq(batch)]
        m.d.comb += unsupported.eq((rest != 0) | bad_tiles | side_fp32 | raw_epi | conv)
        if self.k_blocks:
            m.d.comb += staged.tiles.eq((e & tiles) == tiles)
        vars(s).update(q=q, enqueue=enqueue, soft_reset=soft_reset, unsupported=unsupported)

    def _pool_ok(self, csr, mode):
        """Whether this build runs the descriptor's pooling stage (``DESC_POOL``): none, or
        with ``pool`` built a max pool, its windows as their stride, into a BFP8 C: after a
        forward convolution without a stored mask or a bias per column, or its backward
        pass before a backward-data one's write path, the batch whole tile blocks."""
        pool = _field(csr, "DESC_POOL", "MODE")
        if not self.engine.pool:
            return pool == 0
        kh, kw = _field(csr, "DESC_POOL", "KERNEL_H"), _field(csr, "DESC_POOL", "KERNEL_W")
        windows = (~_field(csr, "DESC_POOL", "KIND")
                   & (kh == _field(csr, "DESC_POOL", "STRIDE_H"))
                   & (kw == _field(csr, "DESC_POOL", "STRIDE_W"))
                   & (kh != 0) & (kw != 0) & _field(csr, "DESC_EPILOGUE", "BFP8"))
        forward = ((pool == 1) & (mode == 1) & ~_field(csr, "DESC_EPILOGUE", "MASK_IN")
                   & (_field(csr, "DESC_EPILOGUE", "BIAS") != 2))
        # (backward: a unit of the pool's output is one position's images, and so is the
        # pool's input's it is written to, with the batch a multiple of TILE_BLOCK)
        backward = ((pool == 2) & (mode == 2) & (_field(csr, "DESC_EPILOGUE", "BIAS") == 0)
                    & ((csr.desc_conv_batch[:16] & (regmap.TILE_BLOCK - 1)) == 0))
        return (pool == 0) | (windows & (forward | backward))

    def _pool_staging(self, csr, staged):
        """A convolution's pooling fields as staged (``pool``, the windows in the cursor's
        geometry, the argmax), and the mask's columns (N; the engine derives a pool's)."""
        mode = _field(csr, "DESC_POOL", "MODE")
        on = (mode != 0) if self.engine.pool else 0
        return [staged.pool.eq(on), staged.unpool.eq(on & (mode == 2)),
                staged.mask_n.eq(csr.desc_n),
                staged.geometry.pool_h.eq(Mux(on, _field(csr, "DESC_POOL", "KERNEL_H"), 0)),
                staged.geometry.pool_w.eq(Mux(on, _field(csr, "DESC_POOL", "KERNEL_W"), 0)),
                staged.argmax_addr.eq(csr.desc_argmax_addr_hi << 32 | csr.desc_argmax_addr_lo),
                staged.argmax_stride.eq(csr.desc_argmax_stride)]

    def _control(self, s):
        """Starts the engine on the queue's descriptors; aborts on an error or a soft reset,
        draining and resetting the DMA masters."""
        m, core_rst_d, soft_reset, q, engine = s.m, s.core_rst_d, s.soft_reset, s.q, s.engine
        writers, readers, core_rst, csr = s.writers, s.readers, s.core_rst, s.csr
        enqueue, queue_rst, dma_rst = s.enqueue, s.queue_rst, s.dma_rst
        unsupported = s.unsupported
        # ---- control ----------------------------------------------------------------------
        error_code = Signal(8)
        # descriptors the engine holds: 0, 1, or 2 (one walked and writing C, the next
        # started behind it: GemmEngine.ready)
        running = Signal(2)
        aborting = Signal()
        halted = Signal()
        clear_after = Signal()      # the abort was a soft reset: clear the error and queue
        settled = Signal()          # drained a cycle ago: the masters' reset copies act now
        drained = Signal()
        m.d.comb += [
            engine.window_base.eq(csr.window_base_hi << 32 | csr.window_base_lo),
            engine.window_limit.eq(csr.window_limit_hi << 32 | csr.window_limit_lo),
            engine.desc.eq(q.r_data),
            drained.eq(~reduce(operator.or_, (x.busy for x in (*readers, *writers)))
                       & ~reduce(operator.or_, (r.bus.arvalid for r in readers))
                       & ~reduce(operator.or_, (w.bus.awvalid for w in writers))),
        ]
        can_start = q.r_rdy & engine.ready & ~aborting & ~halted & ~core_rst_d
        m.d.comb += [engine.start.eq(can_start), q.r_en.eq(can_start),
                     q.w_en.eq(enqueue & ~aborting & q.w_rdy & ~unsupported)]
        m.d.sync += running.eq(running + can_start - engine.done)

        irq_done = Signal()
        irq_error = Signal()
        write_error = reduce(operator.or_, (w.error for w in writers))
        read_error = reduce(operator.or_, (r.error for r in readers))
        read_protocol = reduce(operator.or_, (r.protocol for r in readers))
        bus_error = read_error | read_protocol | write_error
        with m.If(aborting):
            m.d.comb += [core_rst.eq(1), *(r.abort.eq(1) for r in readers),
                         *(w.abort.eq(1) for w in writers),
                         queue_rst.eq(clear_after | soft_reset)]
            with m.If(soft_reset):             # a soft reset during an abort on an error
                m.d.sync += clear_after.eq(1)
            with m.If(drained):
                m.d.comb += dma_rst.eq(1)
                m.d.sync += settled.eq(1)
                with m.If(settled):              # the masters are reset at this cycle's end
                    m.d.sync += [aborting.eq(0), running.eq(0), settled.eq(0)]
                    with m.If(clear_after | soft_reset):
                        m.d.sync += [halted.eq(0), error_code.eq(0)]
                    with m.Else():
                        m.d.sync += halted.eq(1)
        with m.Elif(soft_reset):
            m.d.sync += [aborting.eq(1), clear_after.eq(1)]
        with m.Elif(halted):
            m.d.comb += core_rst.eq(1)
        # (a BFP8 block with inf or NaN stops the engine like a failed check)
        engine_fail = engine.fail | engine.nonfinite if self.epilogue else engine.fail
        engine_code = (Mux(engine.fail, engine.code, int(ErrorCode.NONFINITE))
                       if self.epilogue else engine.code)
        with m.Elif(bus_error | engine_fail | (enqueue & (~q.w_rdy | unsupported))):
            m.d.comb += irq_error.eq(1)
            with m.If(read_error):
                m.d.sync += error_code.eq(int(ErrorCode.READ_ERROR))
            with m.Elif(read_protocol):
                m.d.sync += error_code.eq(int(ErrorCode.PROTOCOL_ERROR))
            with m.Elif(write_error):
                m.d.sync += error_code.eq(int(ErrorCode.WRITE_ERROR))
            with m.Elif(engine_fail):
                m.d.sync += error_code.eq(engine_code)
            with m.Elif(enqueue & unsupported):
                m.d.sync += error_code.eq(int(ErrorCode.UNSUPPORTED))
            with m.Else():
                m.d.sync += error_code.eq(int(ErrorCode.QUEUE_OVERFLOW))
            m.d.sync += [aborting.eq(1), clear_after.eq(0)]
        m.d.comb += irq_done.eq(engine.done & ~aborting & ~halted)
        vars(s).update(error_code=error_code, running=running, aborting=aborting, halted=halted,
                       irq_done=irq_done, irq_error=irq_error)

    def _dma(self, s):
        """The engine's DMA commands and words to and from the masters, held off while
        aborting."""
        readers, writers, m, engine, aborting = s.readers, s.writers, s.m, s.engine, s.aborting
        # ---- engine <-> DMA ---------------------------------------------------------------
        def gated(src, dst, drain=False):
            """``src`` -> ``dst``, held off while aborting; with ``drain``, ``src``'s words are
            taken and dropped meanwhile (a reader's bursts in flight still arrive)."""
            m.d.comb += [dst.payload.eq(src.payload), dst.valid.eq(src.valid & ~aborting),
                         src.ready.eq(dst.ready | aborting if drain else dst.ready & ~aborting)]

        for p, reader in enumerate(readers):    # reader p: A, or B (with three, B's odd rows)
            gated(getattr(engine, f"rd_cmd{p or ''}"), reader.cmd)
            gated(reader.o_stream, getattr(engine, f"rd_data{p or ''}"), drain=True)
        for p, writer in enumerate(writers):            # C rows: writer p, tile rows p mod P
            gated(getattr(engine, f"wr_cmd{p or ''}"), writer.cmd)
            gated(getattr(engine, f"wr_data{p or ''}"), writer.i_stream)
            m.d.comb += getattr(engine, f"wr_done{p or ''}").eq(writer.done)

    def _status(self, s):
        """``STATUS``, the interrupts and the counters."""
        q, irq_done, m, queue_rst, aborting = s.q, s.irq_done, s.m, s.queue_rst, s.aborting
        running, engine, csr, error_code = s.running, s.engine, s.csr, s.error_code
        irq_error, halted = s.irq_error, s.halted
        # ---- status, interrupts, counters -------------------------------------------------
        # The queue's entries counted here, with "any" as a register of its own: the FIFO's
        # level is a sum (its inner level and its output register), which would lie before
        # the CSR read multiplexer. Both are exact, not late: the driver polls BUSY right
        # after an ENQUEUE.
        entries = Signal(range(self.queue + 1))
        queued = Signal()
        pushed = q.w_en
        popped = q.r_en & q.r_rdy
        m.d.sync += entries.eq(entries + pushed - popped)
        with m.If(pushed):
            m.d.sync += queued.eq(1)
        with m.Elif(popped):
            m.d.sync += queued.eq(entries != 1)
        with m.If(queue_rst):                       # emptied with the queue
            m.d.sync += [entries.eq(0), queued.eq(0)]
        busy = Signal()
        m.d.comb += busy.eq((queued & ~halted) | (running != 0) | engine.busy | aborting)
        # QUEUE_LEVEL is a register (its sum would lie before the read multiplexer): a cycle
        # behind, which the register block's read (registered address, then data) makes up,
        # so a host still reads, after an ENQUEUE's write response, the level that counts it.
        level = Signal(8)
        m.d.sync += level.eq(entries + running)
        m.d.comb += [
            *_pack(csr, "STATUS", BUSY=busy, ERROR=halted | (error_code != 0), QUEUE_FULL=~q.w_rdy,
                   QUEUE_LEVEL=level, ERROR_CODE=error_code),
            csr.irq_status_set.eq(irq_done | (irq_error << 1)),
            self.irq.eq((csr.irq_status & csr.irq_enable)[:2] != 0),
        ]
        done_count = Signal(32)
        with m.If(irq_done):
            m.d.sync += done_count.eq(done_count + 1)
        m.d.comb += csr.done_count.eq(done_count)

        counters = {
            "cycles": 1, "busy_cycles": busy, "active_cycles": engine.step,
            "stall_cycles": busy & ~engine.step & engine.wait_dma,
        }
        # 64-bit counters in 32-bit pieces with their increments registered (a few cycles of
        # lag; no wide carry chain, no path from the datapath's control into one)
        clear = _field(csr, "CTRL", "CLEAR_COUNTERS")
        counters["macs"] = Mux(irq_done, engine.macs, 0)
        for name, inc in counters.items():
            count = wide_accumulator(m, name, Value.cast(inc), clear)
            m.d.comb += [getattr(csr, f"{name}_lo").eq(count[:32]),
                         getattr(csr, f"{name}_hi").eq(count[32:])]
