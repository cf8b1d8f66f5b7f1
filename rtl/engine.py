"""The descriptor engine: one whole GEMM per descriptor, tiled over the datapath, through DMA."""

from types import SimpleNamespace

from amaranth import Cat, ClockSignal, Const, Instance, Module, Mux, ResetSignal, Signal, signed
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from firmware.spec import regmap

from ._util import SLICE_BITS, bit_slices, carry_select_add, own_reset
from .bfpwrite import BfpWriteBack
from .checker import DescriptorChecker, descriptor_layout
from .convcursor import ConvCursor
from .datapath import GemmDatapath
from .dma import dma_command_layout, dma_write_layout
from .fifo import Fifo
from .fpread import Fp32TileReader
from .gearbox import Gearbox
from .issue import CommandIssue, exp_tag_width
from .loader import LoadSequencer
from .pipe import RegisterSlice
from .readshare import ReadShare, read_word_layout
from .router import ReadRouter
from .sideload import UnitSideLoader
from .stripe import LoadStriper, VectorInterleave
from .walker import Walker
from .writeback import WriteBack, WriteBackPorts, job_row
from .xilinx import lut_copies

__all__ = ["GemmEngine", "descriptor_layout"]


def _log2(x):
    return x.bit_length() - 1


class GemmEngine(wiring.Component):
    """Runs GEMM descriptors: checks each, tiles it, moves it by DMA and computes it.

    ``C[M x N] = rescale(op(A) op(B), row_exp, col_exp)`` with A, B int8 and C float32 (or raw
    int32) in memory, row-major with byte strides. A composition of
    :class:`rtl.checker.DescriptorChecker`, :class:`rtl.walker.Walker`,
    :class:`rtl.loader.LoadSequencer`, :class:`rtl.router.ReadRouter`, two
    :class:`rtl.gearbox.Gearbox`, :class:`rtl.issue.CommandIssue`,
    :class:`rtl.datapath.GemmDatapath` and :class:`rtl.writeback.WriteBack`, joined by streams
    through register slices (:data:`SLICES`) and FIFOs. Two descriptors may be in flight: the
    front is checked and walked while the back's last C rows are written (``overlap``). Memory
    is read through ``rd_cmd`` / ``rd_data`` (a :class:`rtl.dma.DmaReader` each) and written
    through ``wr_cmd`` / ``wr_data`` / ``wr_done`` (a :class:`rtl.dma.DmaWriter` each). The
    block diagram, the walk, the overlap of descriptors, the reset copies and the read and
    write ports are described in the architecture page of the documentation.

    Parameters
    ----------
    rows, cols : int
        Array shape; powers of two.
    depth : int
        K chunk (operand buffer depth per slot); a power of two >= the bus width in bytes.
    data_width, addr_width : int
        AXI bus.
    block : int
        C tiles per block side (buffer slots ``2 * block``, accumulation slots ``block**2``).
    packing, primitive, dsp_rows, acc_ram, slr_groups, dsp_slice :
        Passed to :class:`rtl.datapath.GemmDatapath`.
    write_ports : {1, 2, 3, 4, 5, 6}
        DMA writers C rows are written through (at most ``rows``): row ``i`` of the
        datapath's stream of C rows through writer ``i % write_ports``
        (:class:`rtl.writeback.WriteBackPorts`).
    read_ports : {1, 2, 3, 4, 5}
        DMA readers: one for A and B, one for A and one for B, or one for A and two to four
        for B.
    k_blocks : bool
        Run descriptors with ``tiles`` (A's and B's exponents their tile grids, changing
        along K): K chunks of one tile block each, the grid exponents loaded per chunk, the
        datapath in its K-block mode (:class:`rtl.datapath.GemmDatapath`,
        :class:`rtl.walker.Walker`).
    epilogue : bool
        Run descriptors with ``bfp8`` (:func:`rtl.checker.descriptor_layout`): C written as
        BFP8 tile blocks by a :class:`rtl.bfpwrite.BfpWriteBack` beside the float32
        write-back, the walk in blocks of one tile block (``TILE_BLOCK / rows`` tiles a
        side, whatever the descriptor's ``block``), through the first write port. Needs
        ``rows == cols`` dividing :data:`firmware.spec.regmap.TILE_BLOCK` and ``block`` at
        least ``TILE_BLOCK / rows``. With at least 8 columns (``self.relu``) such descriptors
        may also have ``relu``: ReLU on C before it is quantised, its mask written at
        ``mask_addr`` (:class:`rtl.bfpwrite.BfpWriteBack`). They may have ``bias`` (added
        before the ReLU) and ``mask_in`` (C zeroed where the mask stored at ``mask_addr``
        is 0): a :class:`rtl.sideload.UnitSideLoader` reads each unit's bias and mask rows
        through the first read port, shared with its load sequencer by a
        :class:`rtl.readshare.ReadShare`, for the BFP8 write-back's lookups. Where a tile
        row is whole bus words (``4 * cols`` a multiple of the bus's bytes,
        :attr:`quantize`), also ``quantize_only`` descriptors with ``bfp8`` (never without:
        the accelerator refuses them): no GEMM, an
        :class:`rtl.fpread.Fp32TileReader` reads the M x N float32 matrix at ``a_addr``
        through the first read port as the C tiles the BFP8 write-back takes. Such a
        descriptor starts only once the one before is written, and the one after it only
        once it is written (the reader and the load sequencer share the port's side).
        With ``conv`` and ``unfold`` too, a quantise-only descriptor with ``conv``
        (``DESC_CONV.MODE`` 1) reads the convolution's input unfolded: its M and N are
        derived in the shape stage (``Cin * kh * kw``, the output positions), A is the
        input's ``Cin`` rows.
    sgd : bool
        With ``epilogue``: run ``sgd`` descriptors with ``bfp8``, the optimiser's step of the
        BFP8 weights stored at C: the side loader reads each unit's exponent and mantissa
        rows before the unit is written, and the BFP8 write-back writes ``decay * w - lr *
        g`` quantised over them (:class:`rtl.bfpwrite.BfpWriteBack`).
    conv : bool
        With ``k_blocks`` and at most ``TILE_BLOCK`` columns: run ``conv`` descriptors, a
        convolution's forward, backward-data or weight-gradient GEMM
        (:func:`rtl.checker.descriptor_layout`). The front first sets a
        :class:`rtl.convcursor.ConvCursor` up for its geometry and derives the implicit GEMM
        (M, N, K, backward-data's transposed A, the weight gradient's transposed B) and the
        operands' extents for the checks; the walker then walks it
        (:class:`rtl.walker.Walker`'s ``conv``), reading B where the cursor says, or zeros.
        The accelerator refuses batches the walk cannot take
        (:class:`rtl.accelerator.Accelerator`'s ``conv``). With ``epilogue`` too and a tile
        row's ``cols`` bytes within a bus word (:attr:`pool`), a forward convolution may
        max-pool on the write path (``pool``): the walker walks each block of the pool's
        output once per window phase and the BFP8 write-back keeps the running maximum and
        argmax (:class:`rtl.bfpwrite.BfpWriteBack`'s ``pool``); windows that do not tile
        the output exactly are ``UNSUPPORTED``.
    unfold : bool
        With ``conv`` and :attr:`quantize`: the float32 reader also unfolds a
        convolution's input (see ``epilogue``).

    Attributes
    ----------
    soft_reset : In(1)
        Synchronous reset of every part of the engine, effective the next cycle.
    start : In(1)
        Pulse: run :attr:`desc` (sampled in that cycle). Only when :attr:`ready` is high.
    desc : In(descriptor_layout())
    window_base, window_limit : In(64)
    busy : Out(1)
        A descriptor is in flight, or a part still works.
    ready : Out(1)
        The front is free: :attr:`start` is taken (the back may still hold one).
    done : Out(1)
        Pulses when every C row of a descriptor is in memory (one pulse each, in order).
    fail : Out(1)
        The descriptor was rejected (nothing touched); :attr:`code` says why. Stays set until
        reset.
    code : Out(8)
    macs : Out(48)
        ``M * N * K`` of the descriptor :attr:`done` pulses for (0 for a quantise-only one;
        computed in
        :data:`MACS_CYCLES` cycles after its ``start``; the move to the back waits for it).
    step, wait_dma : Out(1)
        The array does useful MACs this cycle; the datapath waits for operand data.
    rd_cmd, rd_data : Out / In (stream)
        DMA read commands and the words read (``rd_cmd1`` ... with more ``read_ports``).
    wr_cmd, wr_data : Out (stream)
        DMA write commands and words with strobes (``wr_cmd1`` ... with more
        ``write_ports``).
    wr_done : In(1)
        Pulses once per completed write command (``wr_done1`` ...).

    Latency
    -------
    A descriptor is checked ``DescriptorChecker.LATENCY + 1`` cycles after :attr:`start`;
    its walk starts :data:`WALK_START_DELAY` cycles later; :attr:`macs` is ready
    :data:`MACS_CYCLES` cycles after :attr:`start`. Each slice of :data:`SLICES` adds
    ``RegisterSlice.LATENCY`` cycles on its path, each word FIFO 2.

    Throughput
    ----------
    One descriptor's check, loads and compute overlap the last C rows of the one before
    (with ``overlap``), but for a quantise-only descriptor and the one after it.
    """

    def __init__(self, rows: int = 8, cols: int = 8, *, depth: int = 512,
                 data_width: int = 128, addr_width: int = 32, block: int = 4,
                 packing: int = 1, primitive: bool = False, dsp_rows: int | None = None,
                 acc_ram: str = "auto", write_ports: int = 1, slr_groups: int = 1,
                 read_ports: int = 1, dsp_slice: str = "DSP48E2", k_blocks: bool = False,
                 epilogue: bool = False, sgd: bool = False, conv: bool = False,
                 unfold: bool = False):
        self.write_ports = regmap.check_write_ports(write_ports, rows)
        self.k_blocks, self.epilogue = bool(k_blocks), bool(epilogue)
        #: Runs convolution descriptors (``conv``): see the ``conv`` parameter.
        self.conv = bool(conv)
        if self.conv and (not self.k_blocks or cols > regmap.TILE_BLOCK):
            raise ValueError(f"conv needs k_blocks and cols at most {regmap.TILE_BLOCK}, not "
                             f"k_blocks={k_blocks}, cols={cols}")
        if sgd and not epilogue:
            raise ValueError("sgd needs epilogue (the step is the BFP8 write-back's)")
        #: The BFP8 write-back runs ``sgd`` descriptors: the optimiser's step of the stored
        #: weights at C (:class:`rtl.bfpwrite.BfpWriteBack`'s ``sgd``).
        self.sgd = bool(sgd)
        self.read_ports = regmap.check_read_ports(read_ports)
        for name, v in (("rows", rows), ("cols", cols)):
            if not isinstance(v, int) or v < 2 or v & (v - 1) or v > 256:
                raise ValueError(f"{name} must be a power of two in 2..256, not {v!r}")
        if data_width not in (64, 128, 256, 512):
            raise ValueError(f"data_width must be 64, 128, 256 or 512, not {data_width!r}")
        if addr_width not in (32, 40, 64):
            raise ValueError(f"addr_width must be 32, 40 or 64, not {addr_width!r}")
        if (not isinstance(depth, int) or depth & (depth - 1) or depth < data_width // 8
                or depth < max(rows, cols) or depth > 32768):
            raise ValueError(f"depth must be a power of two from max(rows, cols, bus bytes) "
                             f"to 32768, not {depth!r}")
        if not isinstance(block, int) or block < 1 or block & (block - 1) or block > 16:
            raise ValueError(f"block must be a power of two in 1..16, not {block!r}")
        self.rows, self.cols, self.depth, self.block = rows, cols, depth, block
        if self.epilogue and (rows != cols or regmap.TILE_BLOCK % rows or rows < 4
                              or block < regmap.TILE_BLOCK // rows):
            raise ValueError(f"epilogue (BFP8 output) needs rows == cols dividing "
                             f"{regmap.TILE_BLOCK} (at least 4) and block >= "
                             f"{regmap.TILE_BLOCK} / rows, not {rows}x{cols}, block {block}")
        #: The BFP8 write-back applies ReLU and writes its mask (``epilogue`` with at least 8
        #: columns: a tile row's mask in whole bytes).
        self.relu = self.epilogue and cols >= 8
        #: Forward convolutions may max-pool on the write path (``conv`` and ``epilogue``,
        #: with a tile row's argmax, ``cols`` bytes, within a bus word): see ``conv``.
        self.pool = self.conv and self.epilogue and cols <= data_width // 8
        #: The BFP8 write-back also takes quantise-only descriptors (``epilogue`` with a tile
        #: row of whole bus words).
        self.quantize = self.epilogue and (4 * cols) % (data_width // 8) == 0
        #: Quantise-only descriptors unfold a convolution's input (``unfold``, with ``conv``
        #: and :attr:`quantize`).
        self.unfold = bool(unfold) and self.conv and self.quantize
        #: The BFP8 write-back also writes a float32 C through the epilogue (bias, ReLU and
        #: its mask, a stored mask; with ``sgd`` the step of a float32 row): ``epilogue``
        #: with a tile row of whole bus words, as :attr:`quantize`.
        self.fp32 = self.quantize
        self.primitive = bool(primitive)
        self.data_width, self.addr_width = data_width, addr_width
        self.datapath = GemmDatapath(rows, cols, depth, slots=max(2, 2 * block),
                                     acc_slots=block * block, lookahead=block * block + 2,
                                     packing=packing,
                                     primitive=primitive, dsp_rows=dsp_rows,
                                     acc_ram=acc_ram, slr_groups=slr_groups,
                                     dsp_slice=dsp_slice, part_resets=True,
                                     k_blocks=self.k_blocks)
        super().__init__({
            "soft_reset": In(1),
            "start": In(1),
            "desc": In(descriptor_layout(self.k_blocks, self.epilogue, self.conv)),
            "window_base": In(64),
            "window_limit": In(64),
            "busy": Out(1), "ready": Out(1), "done": Out(1), "fail": Out(1), "code": Out(8),
            "macs": Out(48), "step": Out(1), "wait_dma": Out(1),
            # (sticky: a BFP8 output block held inf or NaN; cleared by soft_reset)
            "nonfinite": Out(1),
            **{f"{name}{p or ''}": member for p in range(read_ports) for name, member in (
                ("rd_cmd", Out(stream.Signature(dma_command_layout(addr_width)))),
                ("rd_data", In(stream.Signature(data.StructLayout({"data": data_width,
                                                                   "last": 1})))))},
            **{f"{name}{p or ''}": member for p in range(write_ports) for name, member in (
                ("wr_cmd", Out(stream.Signature(dma_command_layout(addr_width)))),
                ("wr_data", Out(stream.Signature(dma_write_layout(data_width)))),
                ("wr_done", In(1)))},
        })

    #: Width of M, N and K in :attr:`macs`' product (each at most 65535, checked).
    MACS_OPERAND_BITS = 16
    #: Cycles from a descriptor's verdict to its walk's first job (the queue's read, the
    #: walker's start register).
    WALK_START_DELAY = 2
    #: Cycles from ``start`` to :attr:`macs` (shift and add: a step per bit of N, a reload,
    #: a step per bit of K).
    MACS_CYCLES = 2 * MACS_OPERAND_BITS + 1
    #: The parts with their own registered copy of :attr:`soft_reset`. With two or more read
    #: ports the router is not there and B's load sequencer, ``loader1``, is; with three to
    #: five also ``loader2``, ``gb_b2``, the ``striper`` and the ``interleave``, with four
    #: or five ``loader3`` and ``gb_b3``, and with five ``loader4`` and ``gb_b4``. The
    #: datapath's buffers and FIFOs
    #: (``GemmDatapath.RESET_SUBPARTS``) and, with two or more write ports, each write port's
    #: write-back (``writeback_0`` ...) have copies of their own beside these.
    RESET_PARTS = ("datapath", "checker", "walker", "loader", "router", "gb_a", "gb_b", "issue",
                   "writeback", "slices", "control")

    #: The register slices: router -> gearbox and gearbox -> issue, for A and for B; the
    #: load sequencer's read commands -> :attr:`rd_cmd`; the write-back's write commands ->
    #: :attr:`wr_cmd` (and with more write ports ``wr_cmd1`` ... -> :attr:`wr_cmd1` ...; with
    #: two read ports, ``rd_cmd1`` -> :attr:`rd_cmd1`, and the load job queues ``jobs_a``,
    #: ``jobs_b``, :data:`LOAD_QUEUE` jobs each).
    SLICES = ("a_in", "b_in", "a_out", "b_out", "rd_cmd", "wr_cmd")
    #: With one read port, bus words queued per operand between the router and its gearbox
    #: (``a_words``, ``b_words``): a packed job's words (a chunk of 10-byte rows of 256->10's
    #: W is 40 words on the VU9P's bus, or 80 at its depth of 512) pass at the bus's pace.
    WORD_FIFO = 64
    #: With two read ports, load jobs queued per operand: a block's A jobs (one per tile row,
    #: plus its exponent vector) fit, so B's next job is not held behind them.
    LOAD_QUEUE = 16

    @staticmethod
    def B_MID_DEPTH(block: int, depth: int, cols: int) -> int:
        """With three or four read ports, the vectors queued after each B gearbox: two rows of the
        longest (``block`` vectors of a k-major span, ``depth / cols`` of a lane run), a
        power of two, at least 4."""
        need = 2 * max(block, depth // cols, 2)
        return 1 << (need - 1).bit_length()

    # ------------------------------------------------------------------------------------------
    def elaborate(self, platform):
        top = Module()
        p = self._parts()
        slices, mid_names = self._slices(p)
        control = Module()            # the engine's own registers are a part too
        self._add_parts(top, p, slices, control)
        m = control                   # below: the engine's own logic, reset with its part
        sl = slices.submodules

        # the front's descriptor (data)
        layout = descriptor_layout(self.k_blocks, self.epilogue, self.conv)
        d = Signal(layout, reset_less=True)
        # Two descriptors may be in flight: the back, walked, its C still being written
        # (b_valid; d_back, b_gen, macs_back), and the front, being checked or walked (d,
        # f_gen). The walker's write jobs queue (wjobs) tagged with the front's generation
        # bit; the queue's head passes to the write-back only if it is the back's (head.gen
        # == b_gen), so the write-back only ever holds jobs of d_back. While the back is
        # empty it follows the front, a cycle late (the front's jobs reach the queue's head
        # long after its start).
        d_back = Signal(layout, reset_less=True)
        self._d_back, self._d_front = d_back, d
        b_valid = Signal()
        f_gen = Signal()
        b_gen = Signal()
        macs_back = Signal(48)

        wq_back = self._connect_jobs(m, p, sl, f_gen, b_gen)
        self._connect_reads(m, p, sl, mid_names)
        self._connect_writes(m, p, sl)
        # an exponent vector load is issued (with K blocks: one bit per bank)
        exp_job = Signal(2 if self.k_blocks else 1)
        shaped = Signal()                        # a convolution's GEMM is derived (front)
        macs_ready, macs = self._macs_counter(m, d, macs_back, shaped)
        self._announce_exponents(m, p, exp_job)
        wb_idle = Signal()               # every write-back is idle
        m.d.comb += wb_idle.eq(p.writeback.idle & (p.bfpwb.idle if self.epilogue else 1))
        # (the back's fields that the write-backs would read through the descriptor's
        # multiplexers, registered beside d_back: loaded from d as it is, below)
        back = SimpleNamespace(rows=Signal(32, reset_less=True), unpool=Signal(reset_less=True),
                               pool=Signal(reset_less=True), c_n=Signal(32, reset_less=True))
        with m.If(~b_valid):
            m.d.sync += back.rows.eq(self._matrix_rows(d))
            if self.pool:
                m.d.sync += [back.unpool.eq(d.conv & d.unpool),
                             back.pool.eq(d.conv & d.pool & ~d.unpool),
                             back.c_n.eq(Mux(d.conv & d.unpool, d.mask_n, d.n))]
        if self.epilogue:
            bd = p.bfpwb.desc
            m.d.comb += [bd.m.eq(back.rows), bd.n.eq(d_back.n),
                         bd.c_addr.eq(d_back.c_addr),
                         bd.c_stride.eq(d_back.c_stride), bd.c_exp_addr.eq(d_back.c_exp_addr),
                         bd.stochastic.eq(d_back.stochastic), bd.seed.eq(d_back.seed),
                         bd.relu.eq(d_back.relu), bd.mask_addr.eq(d_back.mask_addr),
                         bd.mask_stride.eq(d_back.mask_stride), bd.bias.eq(d_back.bias),
                         bd.mask_in.eq(d_back.mask_in),
                         bd.sgd.eq(d_back.sgd if self.sgd else 0), bd.lr.eq(d_back.lr),
                         bd.decay.eq(d_back.decay), bd.f32.eq(~d_back.bfp8),
                         *([bd.pool.eq(back.pool), bd.unpool.eq(back.unpool),
                            bd.c_n.eq(back.c_n),
                            bd.argmax_addr.eq(d_back.argmax_addr),
                            bd.argmax_stride.eq(d_back.argmax_stride)] if self.pool else []),
                         p.bfpwb.clear.eq(self.soft_reset),
                         self.nonfinite.eq(p.bfpwb.nonfinite)]
        m.d.comb += [
            p.issue.exp_issued.eq(exp_job),
            p.walker.drained.eq(p.issue.drained),
            *([p.walker.bank_free.eq(p.issue.free)] if self.k_blocks else []),
            p.writeback.desc.eq(d_back),
            *([p.writeback.desc.m.eq(back.rows)] if self.conv else []),
            p.checker.i_stream.payload.eq(d), p.walker.i_stream.payload.eq(d),
            p.checker.window_base.eq(self.window_base),
            p.checker.window_limit.eq(self.window_limit),
            self.step.eq(p.dp.step),
            self.wait_dma.eq((p.dp.a_stream.ready & ~p.dp.a_stream.valid)
                             | (p.dp.b_stream.ready & ~p.dp.b_stream.valid)),
        ]

        # ---- the back: done once its C is in memory ----------------------------------------
        handoff = Signal()           # the front's walk is over: its descriptor to the back
        with m.If(~b_valid):
            m.d.sync += [d_back.eq(d), b_gen.eq(f_gen)]
        with m.If(b_valid & wb_idle & ~wq_back):
            # the back was walked (its jobs are all queued) and none of its jobs is left
            # in the queue or the write-back: its C rows are all written
            m.d.comb += self.done.eq(1)
            m.d.sync += b_valid.eq(0)
        with m.If(handoff):          # (only with the back empty: never with the above)
            m.d.sync += [b_valid.eq(1), macs_back.eq(macs)]

        if self.conv:
            self._conv_shape(m, p, d)
        fsm = self._front(m, p, d, f_gen, b_valid, macs_ready, handoff, shaped)
        m.d.comb += [self.busy.eq((~fsm.ongoing("IDLE") & ~fsm.ongoing("FAIL")) | b_valid
                                  | sl.wjobs.r_rdy | ~p.issue.drained | p.dp.busy
                                  | ~wb_idle | (~p.side.idle if self.epilogue else 0)
                                  | (~p.fpread.idle if self.quantize else 0)),
                     self.ready.eq(fsm.ongoing("IDLE"))]
        return top

    def _parts(self):
        """The engine's components, by the names of :data:`RESET_PARTS` (``None`` where a
        configuration has no such part), with the extra read ways' and the write ports'."""
        R, C, BL = self.rows, self.cols, self.block
        tag_width = exp_tag_width(BL, C, self.k_blocks)
        dp = self.datapath
        kb = self.k_blocks
        checker = DescriptorChecker(self.data_width, self.addr_width, k_blocks=kb,
                                    epilogue=self.epilogue, conv=self.conv,
                                    unfold=self.unfold)
        walker = Walker(R, C, depth=self.depth, block=BL, data_width=self.data_width,
                        tag_width=tag_width, k_blocks=kb, conv=self.conv)
        cursor = ConvCursor(C) if self.conv else None
        loader = LoadSequencer(self.data_width, self.addr_width, a_lanes=R, b_lanes=C,
                               tag_width=tag_width)
        RP = self.read_ports
        router = ReadRouter(self.data_width) if RP == 1 else None
        # with two read ports, B's load jobs have a load sequencer (and reader) of their own;
        # with three, two: B's jobs striped by row (LoadStriper), loader1 and its reader the
        # even rows into gb_b, loader2 and its reader the odd rows into gb_b2, and the two
        # gearboxes' vectors interleaved back in order
        # (with four, three: the rows dealt in turn to loader1, loader2 and loader3; with
        # five, four: to loader1 ... loader4)
        b_loaders = [LoadSequencer(self.data_width, self.addr_width, a_lanes=R, b_lanes=C,
                                   tag_width=tag_width) for _ in range(1, RP)]
        gb_a, gb_b = (Gearbox(self.data_width, lanes, tag_width, primitive=self.primitive)
                      for lanes in (R, C))
        b_gearboxes = [gb_b] + [Gearbox(self.data_width, C, tag_width,
                                        primitive=self.primitive) for _ in range(2, RP)]
        WAYS = RP - 1                # B's ways with three to five read ports
        striper = LoadStriper(tag_width, ways=WAYS) if RP >= 3 else None
        interleave = VectorInterleave(gb_b.o_stream.payload.shape(),
                                      ways=WAYS) if RP >= 3 else None
        issue = CommandIssue(R, C, block=BL, tag_width=tag_width, primitive=self.primitive,
                             k_blocks=kb)
        WP = self.write_ports
        if WP == 1:
            writeback = WriteBack(R, C, data_width=self.data_width,
                                  addr_width=self.addr_width, queue=max(4, BL * BL),
                                  primitive=self.primitive, conv=self.conv)
            wb_cmd, wb_data, wb_done = [writeback.wr_cmd], [writeback.wr_data], \
                [writeback.wr_done]
        else:
            writeback = WriteBackPorts(R, C, data_width=self.data_width,
                                       addr_width=self.addr_width, queue=max(4, BL * BL),
                                       ports=WP, primitive=self.primitive, part_resets=True,
                                       conv=self.conv)
            wb_cmd, wb_data, wb_done = writeback.wr_cmd, writeback.wr_data, writeback.wr_done
        bfpwb = BfpWriteBack(R, C, data_width=self.data_width, addr_width=self.addr_width,
                             relu=self.relu, side=True, sgd=self.sgd,
                             fp32=self.fp32, conv=self.conv,
                             pool=self.pool) if self.epilogue else None
        # the BFP8 output's side data (bias, stored mask, stored weights), read through the
        # first reader
        side = UnitSideLoader(C, self.data_width, self.addr_width,
                              sgd=self.sgd, conv=self.conv,
                              argmax=self.pool) if self.epilogue else None
        share = ReadShare(self.data_width, self.addr_width) if self.epilogue else None
        # a quantise-only descriptor's float32 tiles, read through the first reader
        # (with convolutions, also a convolution's input unfolded)
        fpread = Fp32TileReader(R, C, data_width=self.data_width, addr_width=self.addr_width,
                                unfold=self.unfold) if self.quantize else None
        return SimpleNamespace(
            bfpwb=bfpwb, side=side, share=share, fpread=fpread, dp=dp, checker=checker,
            side_held=Signal() if self.epilogue else None,
            cursor=cursor,
            walker=walker, loader=loader, router=router,
            loader1=b_loaders[0] if b_loaders else None, b_loaders=b_loaders,
            gb_a=gb_a, gb_b=gb_b, b_gearboxes=b_gearboxes,
            ways=WAYS, striper=striper, interleave=interleave, issue=issue,
            writeback=writeback, wb_cmd=wb_cmd, wb_data=wb_data, wb_done=wb_done)

    def _slices(self, p):
        """The register slices and FIFOs between the parts, in a module of their own (the
        ``slices`` part), and the names of B's vector FIFOs (three to five read ports)."""
        BL, C = self.block, self.cols
        RP, WP = self.read_ports, self.write_ports
        slice_shapes = dict(a_in=self.data_width, b_in=self.data_width,
                            a_out=p.gb_a.o_stream.payload.shape(),
                            b_out=p.gb_b.o_stream.payload.shape(),
                            rd_cmd=dma_command_layout(self.addr_width),
                            wr_cmd=dma_command_layout(self.addr_width))
        assert tuple(slice_shapes) == self.SLICES
        for q in range(1, WP):
            slice_shapes[f"wr_cmd{q}"] = dma_command_layout(self.addr_width)
        for q in range(1, RP):
            slice_shapes[f"rd_cmd{q}"] = dma_command_layout(self.addr_width)
        for q in range(2, RP):
            # B's second (third, fourth) reader's words -> gb_b2 (gb_b3, gb_b4), as gb_b's
            slice_shapes[f"b_in{q}"] = self.data_width
        slices = Module()
        for name, shape in slice_shapes.items():
            # (the gearboxes' vectors, a lane's byte each, in skid slices of SLICE_BITS, so
            # that no one skid flag selects every lane)
            slices.submodules[name] = RegisterSlice(
                shape, slice_bits=SLICE_BITS if name in ("a_out", "b_out") else None)
        if RP == 1:
            # each operand's words queued between the router and its gearbox: the router
            # hands the reader's words over in read order, so a gearbox slower than the bus
            # (a packed job, a row a cycle; lanes narrower than a word) would hold the other
            # operand's words behind it. With WORD_FIFO words queued, it takes a job's words
            # at the bus's pace and goes on to the next job while the gearbox works.
            for name in ("a_words", "b_words"):
                slices.submodules[name] = Fifo(width=self.data_width, depth=self.WORD_FIFO,
                                               slice_bits=256)
        # each B gearbox's vector FIFO, by way
        mid_names = tuple(f"b_mid{w + 1 if w else ''}" for w in range(p.ways)) if RP >= 3 \
            else ()
        if RP >= 3:
            # each B gearbox's vectors queued for the interleave: while it takes a row from
            # one, the others make their next rows' (a row is up to `block` vectors, or
            # depth / cols), so all gearboxes run at once
            vec = p.gb_b.o_stream.payload.shape().size
            for name in mid_names:
                slices.submodules[name] = Fifo(width=vec, depth=self.B_MID_DEPTH(
                    BL, self.depth, C), slice_bits=256)
        # the walker's write jobs, each with its descriptor's generation bit: a block's worth
        # of the next descriptor's jobs queue while the one before writes its C
        slices.submodules["wjobs"] = Fifo(width=p.walker.o_write.payload.shape().size + 1,
                                          depth=max(4, BL * BL))
        if RP >= 2:
            # the walker's load jobs, A's and B's, each queued for its load sequencer
            job_bits = p.walker.o_load.payload.shape().size
            for name in ("jobs_a", "jobs_b"):
                slices.submodules[name] = Fifo(width=job_bits, depth=self.LOAD_QUEUE)
        return slices, mid_names

    def _add_parts(self, m, p, slices, control):
        """Each part into ``m``, reset by a registered copy of :attr:`soft_reset` of its own
        (and the datapath's and write-backs' sub-parts by theirs)."""
        RP, WP = self.read_ports, self.write_ports
        parts = dict(datapath=p.dp, checker=p.checker, walker=p.walker, loader=p.loader,
                     router=p.router, gb_a=p.gb_a, gb_b=p.gb_b, issue=p.issue,
                     writeback=p.writeback, slices=slices, control=control)
        assert tuple(parts) == self.RESET_PARTS
        if p.router is None:
            del parts["router"]
            parts["loader1"] = p.loader1
        if RP >= 3:
            parts.update(striper=p.striper, interleave=p.interleave)
            for q in range(2, RP):
                parts.update({f"loader{q}": p.b_loaders[q - 1],
                              f"gb_b{q}": p.b_gearboxes[q - 1]})
        if self.epilogue:
            parts.update(bfpwb=p.bfpwb, side=p.side, share=p.share)
        if self.quantize:
            parts.update(fpread=p.fpread)
        if self.conv:
            parts.update(cursor=p.cursor)

        def reset_copy(name):
            copy = Signal(init=1, name=f"rst_{name}", attrs={"keep": "true"})
            if self.primitive:
                # an FDSE instance: Yosys merges equal plain registers whatever their
                # attributes (Vivado honours KEEP); instances stay apart in both
                m.submodules[f"rst_{name}_ff"] = Instance(
                    "FDSE", p_INIT=1, i_C=ClockSignal(), i_CE=1, i_S=ResetSignal(),
                    i_D=self.soft_reset, o_Q=copy, a_keep="true")
            else:
                m.d.sync += copy.eq(self.soft_reset)
            return copy
        for name, part in parts.items():
            # the part's only reset is its copy (which the domain reset sets): no flip-flop of
            # it reads the external reset net
            m.submodules[name] = own_reset(m, f"rst_{name}", part, reset_copy(name))
        # the datapath's buffers and FIFOs have copies of their own, taken on the same edge
        # (GemmDatapath.RESET_SUBPARTS)
        m.d.comb += p.dp.part_resets.eq(Cat(reset_copy(f"datapath_{sub}")
                                            for sub in p.dp.RESET_SUBPARTS))
        if WP > 1:                # each write port's write-back a copy of its own too
            m.d.comb += p.writeback.part_resets.eq(Cat(reset_copy(f"writeback_{q}")
                                                       for q in range(WP)))

    def _connect_jobs(self, m, p, sl, f_gen, b_gen):
        """The walker's tile commands to the issue, its write jobs through ``wjobs`` (tagged
        ``f_gen``) to the write-back, the back's (``b_gen``) only, and its load jobs to the
        load sequencers. Returns the signal that a job of the back's is at ``wjobs``'s head."""
        walker, writeback, loader = p.walker, p.writeback, p.loader
        wiring.connect(m, walker.o_cmd, p.issue.i_cmd)
        wjob = walker.o_write.payload.shape()
        wq = sl.wjobs
        wq_head = data.View(data.StructLayout({"job": wjob, "gen": 1}), wq.r_data)
        head_back = wq_head.gen == b_gen    # the queue's head, if any, is a job of the back's
        wq_back = Signal()                  # ... and there is one
        w = self._write_jobs(m, p)
        m.d.comb += [wq.w_data.eq(Cat(w.payload, f_gen)),
                     wq_back.eq(wq.r_rdy & head_back),
                     writeback.jobs.payload.eq(wq_head.job)]
        if self.epilogue:
            self._connect_side(m, p, wq, w)
            # the back's jobs to the BFP8 write-back where it writes BFP8, else as below
            bfp8, bfpwb = self._epi(self._d_back), p.bfpwb
            m.d.comb += [writeback.jobs.valid.eq(wq_back & ~bfp8),
                         bfpwb.jobs.payload.eq(wq_head.job),
                         bfpwb.jobs.valid.eq(wq_back & bfp8),
                         wq.r_en.eq(Mux(bfp8, bfpwb.jobs.ready, writeback.jobs.ready)
                                    & head_back)]
        else:
            m.d.comb += [wq.w_en.eq(walker.o_write.valid), walker.o_write.ready.eq(wq.w_rdy),
                         writeback.jobs.valid.eq(wq_back),
                         wq.r_en.eq(writeback.jobs.ready & head_back)]
        wiring.connect(m, loader.a_jobs, p.gb_a.jobs)
        return wq_back

    def _write_jobs(self, m, p):
        """The front's write jobs: the walker's, or a quantise-only descriptor's reader's
        (never both at once: the reader walks only while the walker is idle)."""
        walker = p.walker
        if not self.quantize:
            return walker.o_write
        reader = p.fpread.o_write
        if self.conv:                 # (a reader's job is of a matrix: its rows in it)
            reader = stream.Signature(walker.o_write.payload.shape()).create(
                path=("fpread_write",))
            job, lt = p.fpread.o_write.payload, _log2(regmap.TILE_BLOCK)
            m.d.comb += [reader.valid.eq(p.fpread.o_write.valid),
                         p.fpread.o_write.ready.eq(reader.ready),
                         reader.payload.m0.eq(job.m0), reader.payload.n0.eq(job.n0),
                         reader.payload.mr.eq(job.m0), reader.payload.er.eq(job.m0 >> lt),
                         reader.payload.mc.eq(job.n0), reader.payload.pf.eq(1),
                         reader.payload.pl.eq(1)]
        return _either(m, walker.o_write, reader, "front_write")

    def _matrix_rows(self, d):
        """The rows of each matrix of descriptor ``d``'s C: M, or a weight gradient's Cout
        (its C a stack of Cout x Cin matrices, one per kernel offset)."""
        if not self.conv:
            return d.m
        return Mux(d.conv & (d.geometry.mode == 3), d.cout, d.m)

    def _epi(self, d):
        """Whether descriptor ``d`` goes through the BFP8 write-back: a BFP8 C, or (with
        :attr:`fp32`) a float32 C with a bias, ReLU, a stored mask or an SGD step."""
        if not self.fp32:
            return d.bfp8
        return d.bfp8 | d.relu | (d.bias != 0) | d.mask_in | (d.sgd if self.sgd else 0)

    def _connect_side(self, m, p, wq, w):
        """The BFP8 output's side data: a unit's job for the side loader as the walker hands
        over the unit's first write job (held until the loader has a slot for it), the
        loader's lookups to the BFP8 write-back, and the write jobs into ``wq``.

        The side loader reads through the first reader, shared with the load sequencer
        there (:class:`rtl.readshare.ReadShare`), and no load command passes that share
        while the loader still issues a unit's commands. The walker hands over a unit's
        first write job before any load of the unit's last K chunk, and every later load,
        so each load command that can only complete once the unit's C rows are written
        (the datapath's buffers and accumulators wait for them) reaches the reader after
        the unit's side commands, whose words thus never wait behind it: the side loader
        takes its words as they come (a slot is held for them), and the loads queued
        before them are of the unit and the units before it, which complete without it.
        The walker waits for a slot only until the unit two before is written, whose loads
        and side data were all asked for before. A quantise-only descriptor's reader hands
        over its jobs the same way, and its read commands for a tile come at least 5 cycles
        after the tile's job, when ``issuing`` has risen for the unit it starts."""
        d, side = self._d_front, p.side
        T = regmap.TILE_BLOCK
        lt = _log2(T)
        job = Signal(side.jobs.payload.shape())
        row = job_row(w.payload)
        first = (row[:lt] == 0) & (w.payload.n0[:lt] == 0)
        sgd = d.sgd if self.sgd else 0
        unpool = (d.conv & d.unpool) if self.pool else 0
        need = first & self._epi(d) & ((d.bias != 0) | d.mask_in | sgd | unpool)
        # (an SGD step of a float32 row reads its stored values as the column biases)
        f32_sgd = sgd & ~d.bfp8
        ready = Signal()
        # The job waits a cycle in a register (p.side_held) on its way to the side loader,
        # so that the walker's state and the job's decoding end there, not in the loader's
        # slot states. It is taken only while the loader is ready for it, and stays so
        # until the next cycle (only a job it takes uses up its slot), so the walker still
        # waits for a slot as above; the first reader holds back the loads while the
        # register is full as while the loader issues (_connect_reads), so the unit's side
        # commands still come first there.
        held = p.side_held
        held_ok = ~held & side.jobs.ready
        m.d.sync += held.eq(Mux(held, ~side.jobs.ready, w.valid & need & wq.w_rdy & held_ok))
        with m.If(~held):
            m.d.sync += side.jobs.payload.eq(job)
        m.d.comb += side.jobs.valid.eq(held)
        # The unit's rows and columns inside its matrix, at most T: ``min(T, rows - row)``
        # as ``row <= rows - T`` or the low bits of the difference (the job is inside the
        # matrix), with ``rows - T`` and ``rows``' low bits registered from d, as for N: the
        # geometry's decoding, the multiplexer and a carry chain of the matrix's width are
        # then no part of the job's path. (d is set at least two cycles before its first
        # write job: in IDLE or SHAPE, then CHECK.)
        rows_t, n_t = Signal(signed(18), reset_less=True), Signal(signed(18), reset_less=True)
        rows_lo, n_lo = Signal(lt + 1, reset_less=True), Signal(lt + 1, reset_less=True)
        rows = self._matrix_rows(d)[:17]
        m.d.sync += [rows_t.eq(rows - T), n_t.eq(d.n[:17] - T),
                     rows_lo.eq(rows[:lt + 1]), n_lo.eq(d.n[:lt + 1])]
        n0 = w.payload.n0
        if self.conv:
            m.d.comb += [job.er.eq(w.payload.er), job.mc.eq(w.payload.mc)]
        m.d.comb += [job.m0.eq(w.payload.m0), job.n0.eq(n0),
                     job.rows_in.eq(Mux(row <= rows_t, T, (rows_lo - row[:lt + 1])[:lt + 1])),
                     job.cols_in.eq(Mux(n0 <= n_t, T, (n_lo - n0[:lt + 1])[:lt + 1])),
                     ready.eq(wq.w_rdy & (~need | held_ok)),
                     w.ready.eq(ready), wq.w_en.eq(w.valid & ready),
                     side.desc.bias.eq(Mux(f32_sgd, 2, d.bias)),
                     side.desc.bias_addr.eq(Mux(f32_sgd, d.c_addr, d.bias_addr)),
                     side.desc.mask_in.eq(d.mask_in), side.desc.mask_addr.eq(d.mask_addr),
                     side.desc.mask_stride.eq(d.mask_stride), side.desc.sgd.eq(sgd & d.bfp8),
                     side.desc.w_addr.eq(d.c_addr), side.desc.w_stride.eq(d.c_stride),
                     side.desc.w_exp_addr.eq(d.c_exp_addr), side.desc.n.eq(d.n)]
        if self.pool:             # (a pool's backward pass reads the argmax as weights)
            m.d.comb += [side.desc.unpool.eq(unpool),
                         side.desc.w_addr.eq(Mux(unpool, d.argmax_addr, d.c_addr)),
                         side.desc.w_stride.eq(Mux(unpool, d.argmax_stride, d.c_stride))]
        bfpwb = p.bfpwb
        wiring.connect(m, side.o_unit, bfpwb.side_unit)
        m.d.comb += [side.row.eq(bfpwb.side_row), side.seg.eq(bfpwb.side_seg),
                     bfpwb.bias_row.eq(side.bias_row), bfpwb.bias_lanes.eq(side.bias_lanes),
                     bfpwb.mask_lanes.eq(side.mask_lanes), side.release.eq(bfpwb.release)]
        if self.sgd:
            m.d.comb += [bfpwb.w_lanes.eq(side.w_lanes), bfpwb.w_exp.eq(side.w_exp)]
        if self.pool:
            m.d.comb += [side.phase.eq(bfpwb.side_phase), bfpwb.a_match.eq(side.a_match)]

    def _connect_reads(self, m, p, sl, mid_names):
        """Load jobs -> load sequencers -> DMA read commands; the words read -> the
        gearboxes -> the issue: through the router with one read port, else each operand's
        (or way's) reader straight into its gearbox."""
        RP = self.read_ports
        walker, loader, router = p.walker, p.loader, p.router
        # the first reader's commands and words: the load sequencer's, or with the
        # epilogue shared with the side loader (see _connect_side)
        cmd0, words0 = loader.rd_cmd, wiring.flipped(self.rd_data)
        if self.epilogue:
            share, side = p.share, p.side
            a_cmd = loader.rd_cmd
            if self.quantize:
                # the load sequencer's commands, or a quantise-only descriptor's reader's:
                # never both at once (see the docstring)
                a_cmd = _either(m, loader.rd_cmd, p.fpread.rd_cmd, "a_cmd")
            hold = side.issuing | p.side_held
            m.d.comb += [share.a_cmd.payload.eq(a_cmd.payload),
                         share.a_cmd.valid.eq(a_cmd.valid & ~hold),
                         a_cmd.ready.eq(share.a_cmd.ready & ~hold)]
            wiring.connect(m, side.rd_cmd, share.b_cmd)
            wiring.connect(m, share.b_words, side.rd_words)
            wiring.connect(m, wiring.flipped(self.rd_data), share.words)
            cmd0, words0 = share.cmd, share.a_words
            if self.quantize:
                # the words to the reader while it has rows out, else to the loads
                words0 = stream.Signature(read_word_layout(self.data_width)).create(
                    path=("a_words",))
                aw, fp_on = share.a_words, ~p.fpread.idle
                m.d.comb += [words0.payload.eq(aw.payload), p.fpread.rd_words.payload.eq(
                                 aw.payload),
                             words0.valid.eq(aw.valid & ~fp_on),
                             p.fpread.rd_words.valid.eq(aw.valid & fp_on),
                             aw.ready.eq(Mux(fp_on, p.fpread.rd_words.ready, words0.ready))]
        if RP == 1:
            wiring.connect(m, walker.o_load, loader.i_stream)
            wiring.connect(m, loader.b_jobs, p.gb_b.jobs)
            wiring.connect(m, cmd0, sl.rd_cmd.i_stream)
            wiring.connect(m, loader.routes, router.routes)
            wiring.connect(m, words0, router.i_stream)
            _through_fifo(m, router.a_stream, sl.a_words, sl.a_in.i_stream)
            _through_fifo(m, router.b_stream, sl.b_words, sl.b_in.i_stream)
        else:
            # Each load job is queued by its operand (``path``) for that operand's load
            # sequencer, whose read commands go to that operand's reader and whose words go
            # straight to that operand's gearbox: A's and B's jobs each in the walker's order,
            # neither waiting for the other's reads. (No router: the routing entries are
            # dropped.)
            job = walker.o_load
            path = job.payload.path
            queues = (sl.jobs_a, sl.jobs_b)
            m.d.comb += [*(q.w_data.eq(job.payload) for q in queues),
                         queues[0].w_en.eq(job.valid & ~path),
                         queues[1].w_en.eq(job.valid & path),
                         job.ready.eq(Mux(path, queues[1].w_rdy, queues[0].w_rdy))]
            # (with three to five read ports B's queue feeds the striper, which feeds
            # loader1, loader2 (and loader3, loader4))
            takers = (loader.i_stream,
                      p.loader1.i_stream if RP == 2 else p.striper.i_stream)
            for q, into in zip(queues, takers, strict=True):
                _from_fifo(m, q, into)
            for q, ld in enumerate((loader, *p.b_loaders)):
                m.d.comb += ld.routes.ready.eq(1)
                wiring.connect(m, cmd0 if q == 0 else ld.rd_cmd,
                               sl[f"rd_cmd{q or ''}"].i_stream)
            wiring.connect(m, p.loader1.b_jobs, p.gb_b.jobs)
            words = [(words0 if self.epilogue else self.rd_data, sl.a_in),
                     (self.rd_data1, sl.b_in)]
            if RP >= 3:
                for o, ld in zip(p.striper.o_jobs, p.b_loaders, strict=True):
                    wiring.connect(m, o, ld.i_stream)
                wiring.connect(m, p.striper.o_merge, p.interleave.jobs)
                for q in range(2, RP):
                    ld, gb, b_in = p.b_loaders[q - 1], p.b_gearboxes[q - 1], sl[f"b_in{q}"]
                    wiring.connect(m, ld.b_jobs, gb.jobs)
                    words.append((getattr(self, f"rd_data{q}"), b_in))
                    wiring.connect(m, b_in.o_stream, gb.i_stream)
            for word, into in words:
                m.d.comb += [into.i_stream.payload.eq(word.payload.data),
                             into.i_stream.valid.eq(word.valid),
                             word.ready.eq(into.i_stream.ready)]
        for q in range(RP):
            suffix = str(q or "")
            wiring.connect(m, sl[f"rd_cmd{suffix}"].o_stream,
                           wiring.flipped(getattr(self, f"rd_cmd{suffix}")))
        wiring.connect(m, sl.a_in.o_stream, p.gb_a.i_stream)
        wiring.connect(m, sl.b_in.o_stream, p.gb_b.i_stream)
        wiring.connect(m, p.gb_a.o_stream, sl.a_out.i_stream)
        wiring.connect(m, sl.a_out.o_stream, p.issue.a_vectors)
        if RP >= 3:
            mids = [sl[name] for name in mid_names]
            for gb, q, into in zip(p.b_gearboxes, mids, p.interleave.i_streams, strict=True):
                _through_fifo(m, gb.o_stream, q, into)
            wiring.connect(m, p.interleave.o_stream, sl.b_out.i_stream)
        else:
            wiring.connect(m, p.gb_b.o_stream, sl.b_out.i_stream)
        wiring.connect(m, sl.b_out.o_stream, p.issue.b_vectors)

    def _connect_writes(self, m, p, sl):
        """The issue -> the datapath -> the write-back -> DMA write commands and words."""
        dp = p.dp
        wiring.connect(m, p.issue.cmd, dp.cmd)
        wiring.connect(m, p.issue.a_stream, dp.a_stream)
        wiring.connect(m, p.issue.b_stream, dp.b_stream)
        o = dp.o_stream
        if self.epilogue:
            # C rows to the BFP8 write-back while the back's descriptor goes through it
            bfp8, bfpwb, wb = self._epi(self._d_back), p.bfpwb, p.writeback
            rows = o
            if self.quantize:
                # a quantise-only descriptor's rows come from its reader (the datapath has
                # none meanwhile: the descriptors before it are written, those after wait)
                fo, only = p.fpread.o_stream, self._d_back.quantize_only
                rows = stream.Signature(o.payload.shape()).create(path=("bfp_rows",))
                m.d.comb += [rows.payload.eq(Mux(only, fo.payload, o.payload)),
                             rows.valid.eq(Mux(only, fo.valid, o.valid)),
                             fo.ready.eq(bfpwb.i_stream.ready & only)]
            m.d.comb += [wb.i_stream.payload.eq(o.payload),
                         bfpwb.i_stream.payload.eq(rows.payload),
                         wb.i_stream.valid.eq(o.valid & ~bfp8),
                         bfpwb.i_stream.valid.eq(rows.valid & bfp8),
                         o.ready.eq(Mux(bfp8, bfpwb.i_stream.ready, wb.i_stream.ready))]
        else:
            wiring.connect(m, o, p.writeback.i_stream)
        for q in range(self.write_ports):
            suffix = str(q or "")
            cmd_in, data_out = sl[f"wr_cmd{suffix}"].i_stream, getattr(self, f"wr_data{suffix}")
            done = getattr(self, f"wr_done{suffix}")
            srcs = [(p.wb_cmd[q], p.wb_data[q], p.wb_done[q], None)]
            if self.epilogue and q == 0:
                # the BFP8 write-back writes through the first port (a BFP8 C is a quarter
                # of the bytes of a float32 C; a float32 C through the epilogue takes the
                # one port): it has the port while the back's descriptor goes through it
                bfp8 = self._epi(self._d_back)
                srcs = [(p.wb_cmd[0], p.wb_data[0], p.wb_done[0], ~bfp8),
                        (p.bfpwb.wr_cmd, p.bfpwb.wr_data, p.bfpwb.wr_done, bfp8)]
            for cmd, wdata, wdone, sel in srcs:
                with m.If(1 if sel is None else sel):
                    m.d.comb += [cmd_in.payload.eq(cmd.payload), cmd_in.valid.eq(cmd.valid),
                                 cmd.ready.eq(cmd_in.ready),
                                 data_out.payload.eq(wdata.payload),
                                 data_out.valid.eq(wdata.valid), wdata.ready.eq(data_out.ready),
                                 wdone.eq(done)]
            wiring.connect(m, sl[f"wr_cmd{suffix}"].o_stream,
                           wiring.flipped(getattr(self, f"wr_cmd{suffix}")))

    def _macs_counter(self, m, d, macs_back, shaped):
        """``m * n * k`` of the descriptor started (for :attr:`macs`, which shows
        ``macs_back``). Returns the signal that it is ready and its value."""
        # By shift and add: no DSP slice (the Pynq-Z1 needs its slices for the array and the
        # ports), one 33-bit add a cycle. m * n over n's 16 bits, a cycle to reload, then
        # that times k over k's: MACS_CYCLES after a start, and HANDOFF waits for it (a
        # descriptor takes longer anyway). Each step adds the multiplicand to the high half
        # if the low half's bit 0 is set and shifts both right by one.
        W = self.MACS_OPERAND_BITS
        mul_a = Signal(2 * W, reset_less=True)   # the multiplicand: m, then m * n
        mul_hi = Signal(2 * W, reset_less=True)  # the partial product's high half
        mul_lo = Signal(W, reset_less=True)      # the multiplier's bits left, and product's low
        mul_step = Signal(range(self.MACS_CYCLES + 1), init=self.MACS_CYCLES)
        mul_sum = Signal(2 * W + 1)
        m.d.comb += [mul_sum.eq(mul_hi + Mux(mul_lo[0], mul_a, 0)),
                     self.macs.eq(macs_back)]
        macs_ready = Signal()
        m.d.comb += macs_ready.eq(mul_step == self.MACS_CYCLES)
        shaped_q = Signal()
        if self.conv:
            m.d.sync += shaped_q.eq(shaped)
        with m.If(self.start & self.ready):
            m.d.sync += [mul_a.eq(self.desc.m[:W]), mul_hi.eq(0), mul_lo.eq(self.desc.n[:W]),
                         mul_step.eq(0)]
        if self.conv:
            with m.Elif(shaped_q):                   # a convolution's M, N and K are in d
                m.d.sync += [mul_a.eq(d.m[:W]), mul_hi.eq(0), mul_lo.eq(d.n[:W]),
                             mul_step.eq(0)]
        with m.Elif(mul_step == W):                  # m * n is in: times k next
            m.d.sync += [mul_a.eq(Cat(mul_lo, mul_hi[:W])), mul_hi.eq(0),
                         mul_lo.eq(Mux(d.quantize_only, 0, d.k[:W]) if self.quantize
                                   else d.k[:W]), mul_step.eq(W + 1)]
        with m.Elif(~macs_ready):
            m.d.sync += [mul_hi.eq(mul_sum[1:]), mul_lo.eq(Cat(mul_lo[1:], mul_sum[0])),
                         mul_step.eq(mul_step + 1)]
        return macs_ready, Cat(mul_lo, mul_hi)

    def _announce_exponents(self, m, p, exp_job):
        """``exp_job``: an exponent vector load is issued (for the issue's count; with K
        blocks, bit ``b`` for one of bank ``b``, the tag's top bit)."""
        def announce(job):
            tag = job.payload.tag
            take = job.valid & job.ready & tag[0]
            if self.k_blocks:
                return Cat(take & ~tag[-1], take & tag[-1])
            return take
        if self.read_ports == 1:
            m.d.comb += exp_job.eq(announce(p.loader.a_jobs) | announce(p.loader.b_jobs))
        else:
            # announced as the walker hands the job to its queue: before any command after
            # it (a load sequencer takes the job from its queue cycles later)
            m.d.comb += exp_job.eq(announce(p.walker.o_load))

    def _conv_shape(self, m, p, d):
        """A convolution's implicit GEMM and extents from its geometry, in free-running
        registered stages behind the front's descriptor (settled long before the cursor's
        set-up ends): the cursor follows the walker's ops."""
        cur, walker = p.cursor, p.walker
        lg = regmap.TILE_BLOCK.bit_length() - 1
        g = d.geometry
        r = {name: Signal(width, name=f"conv_{name}", reset_less=True) for name, width in (
            ("kk", 8), ("gm", 12), ("gk", 12), ("k", 24), ("a_rows", 24), ("a_grid_rows", 20),
            ("a_grid_step", 24), ("hw", 32), ("bc_lo", 32), ("bc_hi", 32), ("b_cols", 48),
            ("as_lo", 32), ("as_hi", 32), ("a_step", 64), ("a_back", 64), ("kk1c", 24),
            ("af_lo", 40), ("af_hi", 40), ("a_first", 64), ("a_grid_first", 32),
            ("a_grid_back", 32), ("zero", 1), ("span_h", signed(16)), ("span_w", signed(16)),
            ("fits", 1))}
        bwd = g.mode == 2
        m.d.sync += [
            r["kk"].eq(g.kernel_h * g.kernel_w),
            r["gm"].eq((d.cout + regmap.TILE_BLOCK - 1) >> lg),
            r["gk"].eq((d.cin + regmap.TILE_BLOCK - 1) >> lg),
            r["k"].eq(r["kk"] * Mux(bwd, d.cout, d.cin)), r["a_rows"].eq(r["kk"] * d.cout),
            r["a_grid_rows"].eq(r["kk"] * r["gm"]), r["a_grid_step"].eq(r["gm"] * r["gk"]),
            r["hw"].eq(g.height * g.width),
            r["bc_lo"].eq(r["hw"][:16] * g.batch), r["bc_hi"].eq(r["hw"][16:] * g.batch),
            r["b_cols"].eq(carry_select_add(r["bc_lo"], r["bc_hi"] << 16, 48)),
            r["as_lo"].eq(d.cout * d.a_stride[:16]), r["as_hi"].eq(d.cout * d.a_stride[16:]),
            r["a_step"].eq(carry_select_add(r["as_lo"], r["as_hi"] << 16, 48)),
            # (backward-data: from the stack's last matrix back to its first)
            r["a_back"].eq(carry_select_add(~r["a_step"], 1, 64)),
            r["kk1c"].eq(r["a_rows"] - d.cout),
            r["af_lo"].eq(r["kk1c"] * d.a_stride[:16]), r["af_hi"].eq(r["kk1c"] * d.a_stride[16:]),
            r["a_first"].eq(carry_select_add(r["af_lo"], r["af_hi"] << 16, 64)),
            r["a_grid_first"].eq((r["kk"] - 1) * r["a_grid_step"]),
            r["a_grid_back"].eq(carry_select_add(~Cat(r["a_grid_step"], Const(0, 8)), 1, 32)),
            # (a zero stride, dilation or image size, as a zero dimension; a dilated kernel
            # beyond the padded image: refused)
            r["zero"].eq((g.stride_h == 0) | (g.stride_w == 0) | (g.dilation_h == 0)
                         | (g.dilation_w == 0) | (g.height == 0) | (g.width == 0)),
            # (the dilated kernels' spans a stage before their comparison)
            r["span_h"].eq(g.dilation_h * (g.kernel_h - 1)),
            r["span_w"].eq(g.dilation_w * (g.kernel_w - 1)),
            r["fits"].eq((r["span_h"] < g.height + 2 * g.pad_h)
                         & (r["span_w"] < g.width + 2 * g.pad_w)),
        ]
        m.d.comb += [cur.geometry.eq(g),
                     cur.pos_op.eq(walker.cur_pos_op), cur.off_op.eq(walker.cur_off_op),
                     walker.cur_column.eq(cur.column), walker.cur_inside.eq(cur.inside),
                     walker.cur_phase.eq(cur.phase), walker.cur_last_phase.eq(cur.last_phase),
                     walker.cur_c_column.eq(cur.c_column)]
        self._conv_regs = r

    def _front(self, m, p, d, f_gen, b_valid, macs_ready, handoff, shaped):
        """The front's sequence: take a descriptor, (a convolution: derive its GEMM,) check
        it, wait for the back where it must, walk it, hand it to the back. Returns the
        FSM."""
        checker, walker = p.checker, p.walker
        # a quantise-only descriptor, or any after one, waits for the one before: the reader
        # and the load sequencer share the first read port's side
        q_wait = Const(0, 1)
        if self.quantize:
            q_wait = d.quantize_only | (b_valid & self._d_back.quantize_only)
            fd = p.fpread.desc
            m.d.comb += [fd.m.eq(d.m), fd.n.eq(d.n), fd.a_addr.eq(d.a_addr),
                         fd.a_stride.eq(d.a_stride)]
            if self.unfold:      # (a convolution's input, unfolded as it is read)
                m.d.comb += [fd.unfold.eq(d.conv), fd.geometry.eq(d.geometry)]
        with m.FSM(name="engine") as fsm:
            with m.State("IDLE"):
                with m.If(self.start):
                    m.d.sync += f_gen.eq(~f_gen)         # (d is taken below)
                    m.next = "CHECK"
                    if self.conv:
                        with m.If(self.desc.conv):
                            m.next = "SHAPE_START"
            if self.conv:
                r, g = self._conv_regs, d.geometry
                with m.State("SHAPE_START"):     # the cursor's set-up, from d's geometry
                    m.d.comb += p.cursor.start.eq(1)
                    m.next = "SHAPE"
                with m.State("SHAPE"):           # the implicit GEMM into d, then the checks
                    # (a pool's windows must tile the output exactly, and its input's mask
                    # rows stay within the checker's reach: at most 2**20 columns)
                    bad_pool = (d.pool & ((~p.cursor.pool_exact & ~d.unpool)
                                          | (p.cursor.c_positions[20:] != 0))
                                if self.pool else 0)
                    with m.If(p.cursor.ready & ((~r["zero"] & ~r["fits"] & (g.kernel_h != 0)
                                                 & (g.kernel_w != 0)) | bad_pool)):
                        m.d.sync += self.code.eq(int(regmap.ErrorCode.UNSUPPORTED))
                        m.next = "FAILING"
                    with m.Elif(p.cursor.ready):
                        def saturated(x):     # (over 32 bits: refused as too large)
                            return Mux(x[32:].any(), 0xFFFFFFFF, x[:32])
                        pos = saturated(p.cursor.positions)
                        m.d.comb += shaped.eq(1)
                        # (backward-data: M the input channels, the stack read transposed
                        # from its last matrix back, B the deltas)
                        bwd = g.mode == 2
                        # (a weight gradient: M the stack's rows, N Cin, K the output
                        # positions; A the deltas, B the input read transposed, each K run
                        # of TILE_BLOCK positions where the cursor says)
                        wg = g.mode == 3
                        outs = saturated(p.cursor.out_positions)
                        # (a quantise-only one unfolds the input: M its Cin * kh * kw rows,
                        # N the output positions, A the input's Cin rows)
                        qo = d.quantize_only if self.unfold else 0
                        m.d.sync += [d.m.eq(Mux(wg, r["a_rows"],
                                                Mux(bwd, d.cin, Mux(qo, Mux(r["zero"], 0, r["k"]),
                                                                      d.cout)))),
                                     d.k.eq(Mux(r["zero"], 0, Mux(wg, outs, r["k"]))),
                                     d.n.eq(Mux(wg, d.cin, pos)),
                                     d.transpose_a.eq(bwd), d.transpose_b.eq(wg),
                                     d.a_rows.eq(Mux(wg, d.cout, Mux(qo, d.cin, r["a_rows"]))),
                                     d.a_bytes.eq(Mux(wg, outs, d.cin)),
                                     d.a_grid_rows.eq(Mux(wg, r["gm"], r["a_grid_rows"])),
                                     d.b_rows.eq(Mux(bwd, d.cout, d.cin)),
                                     d.b_cols.eq(Mux(bwd, p.cursor.out_positions,
                                                     r["b_cols"])),
                                     d.a_first.eq(Mux(bwd, r["a_first"], 0)),
                                     d.a_step.eq(Mux(bwd, r["a_back"],
                                                     Mux(wg, 0, r["a_step"]))),
                                     d.a_grid_first.eq(Mux(bwd, r["a_grid_first"], 0)),
                                     d.a_grid_step.eq(Mux(bwd, r["a_grid_back"],
                                                          Mux(wg, 0, r["a_grid_step"]))),
                                     d.mask_n.eq(Mux(d.pool, p.cursor.c_positions[:32],
                                                     Mux(wg, d.cin, pos)))]
                        m.next = "CHECK"
            with m.State("CHECK"):
                m.d.comb += [checker.i_stream.valid.eq(1), checker.o_stream.ready.eq(1)]
                with m.If(checker.o_stream.valid):
                    with m.If(checker.o_stream.payload.code != 0):
                        m.d.sync += self.code.eq(checker.o_stream.payload.code)
                        m.next = "FAILING"
                    with m.Elif(d.overlap & ~q_wait):
                        m.next = "WALK"
                    with m.Else():
                        m.next = "WAIT"
            with m.State("FAILING"):     # the descriptor before it finishes first
                with m.If(~b_valid):
                    m.d.sync += self.fail.eq(1)
                    m.next = "FAIL"
            with m.State("FAIL"):
                pass
            with m.State("WAIT"):        # no OVERLAP: the descriptor before it finishes first
                with m.If(~b_valid):
                    m.next = "WALK"
                    if self.quantize:
                        with m.If(d.quantize_only):
                            m.next = "QSTART"
            if self.quantize:
                with m.State("QSTART"):  # a quantise-only descriptor: its reader walks it
                    m.d.comb += p.fpread.start.eq(1)
                    m.next = "QWALK"
                with m.State("QWALK"):
                    with m.If(~p.fpread.walking):
                        m.next = "HANDOFF"
            with m.State("WALK"):
                m.d.comb += walker.i_stream.valid.eq(1)
                with m.If(walker.i_stream.ready):
                    m.next = "HANDOFF"
            with m.State("HANDOFF"):     # once the back is empty, and its M * N * K is in
                with m.If(macs_ready & ~b_valid):
                    m.d.comb += handoff.eq(1)
                    m.next = "IDLE"
        # The descriptor is taken in IDLE at start, in slices of SLICE_BITS, each under its
        # own copy of that enable (one net would drive the enable of every bit).
        slices = bit_slices(len(d.as_value()), SLICE_BITS)
        take = lut_copies(m, lambda idle, start: idle & start, [fsm.ongoing("IDLE"), self.start],
                          len(slices), 1, primitive=self.primitive, name="take_desc")
        for (lo, hi), en in zip(slices, take, strict=True):
            with m.If(en):
                m.d.sync += d.as_value()[lo:hi].eq(self.desc.as_value()[lo:hi])
        if self.epilogue:
            # a BFP8 output (or a float32 one through the epilogue) is walked in blocks of
            # one tile block
            with m.If(take[0] & self._epi(self.desc)):
                m.d.sync += d.block.eq(regmap.TILE_BLOCK // self.rows)
        return fsm


def _either(m, first, second, name: str):
    """One stream from two that are never valid at once: the second's payload while it is
    valid, else the first's; both see the one ``ready``."""
    out = stream.Signature(first.payload.shape()).create(path=(name,))
    m.d.comb += [out.valid.eq(first.valid | second.valid),
                 out.payload.eq(Mux(second.valid, second.payload, first.payload)),
                 first.ready.eq(out.ready), second.ready.eq(out.ready)]
    return out


def _from_fifo(m, q, into):
    """A :class:`rtl.fifo.Fifo`'s head -> stream ``into``."""
    m.d.comb += [into.payload.eq(q.r_data), into.valid.eq(q.r_rdy), q.r_en.eq(into.ready)]


def _through_fifo(m, src, q, into):
    """Stream ``src`` -> :class:`rtl.fifo.Fifo` ``q`` -> stream ``into``."""
    m.d.comb += [q.w_data.eq(src.payload), q.w_en.eq(src.valid), src.ready.eq(q.w_rdy)]
    _from_fifo(m, q, into)
