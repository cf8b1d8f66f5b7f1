"""A checked descriptor -> tile commands, load jobs and write-back jobs, block by block."""

from contextlib import nullcontext
from types import SimpleNamespace

from amaranth import Cat, Const, Module, Mux, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from firmware.spec.regmap import TILE_BLOCK

from ._util import carry_select_add
from .checker import descriptor_layout
from .convcursor import ConvCursor, OffOp, PosOp
from .issue import DESC_FIELDS, exp_halves, exp_tag_width, tile_command_layout
from .loader import load_job_layout
from .writeback import write_job_layout

__all__ = ["Walker"]


def _log2(x):
    return x.bit_length() - 1


def _below(x, lim):
    """``x < lim`` for a narrow ``lim``: a compare of ``len(lim)`` bits and a NOR of the rest,
    not a carry chain over ``x``."""
    w = len(lim)
    return (x[w:] == 0) & (x[:w] < lim)


def _above(x, lim):
    """``x > lim`` for a narrow ``lim``, as :func:`_below`."""
    w = len(lim)
    return (x[w:] != 0) | (x[:w] > lim)


class Walker(wiring.Component):
    """Walks a checked descriptor: tile commands, load jobs and write jobs, block by block.

    For the descriptor on :attr:`i_stream` it visits blocks of ``b x b`` C tiles (``b`` the
    descriptor's ``block`` field, or ``block`` where that is 0 or larger), each over K chunks
    of at most ``depth`` steps. Per block it first loads the block's exponent vectors (once
    :attr:`drained`), then, per K chunk and C tile, offers the tile command on :attr:`o_cmd`
    (on the last chunk with the tile's write job on :attr:`o_write`) and then the loads that
    command needs on :attr:`o_load`. The descriptor stays on :attr:`i_stream` for the whole
    walk and is taken with its last job. The numpy model is :func:`sim.models.engine.walk`;
    the chunking, block order and loads are described in the architecture page of the
    documentation.

    Parameters
    ----------
    rows, cols, depth, block : int
        As :class:`rtl.engine.GemmEngine`.
    data_width : int
        Bus width (the geometry of the loads).
    tag_width : int
        Width of the gearbox tags (``1 + max(1, log2(block))``; at least
        :func:`rtl.issue.exp_tag_width`).
    k_blocks : bool
        Descriptors may have ``tiles`` (:func:`rtl.checker.descriptor_layout`): then every K
        chunk is one tile block of :data:`firmware.spec.regmap.TILE_BLOCK` steps (the last
        one shorter; no ramp), and before each chunk the walker loads per tile of the block
        the one exponent of A's grid (row ``i``) and of B's (column ``j``) that the chunk
        uses, a byte each, into lane 0 of the exponent vector (a packed job of one row; 3
        cycles an index, the grid offset a cycle more). Exponents (a K chunk's, or a block's
        vectors) go to the other of the issue stage's two banks of exponent registers each
        time (the tag's top bit, and each command's ``bank``), once :attr:`bank_free` says
        no command reads it: the chunk before's commands may still be queued. Needs ``depth``
        >= ``TILE_BLOCK``, ``max(rows, bus bytes)`` dividing it and ``cols`` dividing it or
        twice it; with ``cols == 2 * TILE_BLOCK`` a B tile whose columns reach past the
        first ``TILE_BLOCK`` takes a second byte, of the next tile block of columns, after
        the block's first ones (indices ``2 * block`` on, the tag's bit below the bank's
        set).
    conv : bool
        With ``k_blocks`` and at most ``TILE_BLOCK`` columns: descriptors may have ``conv``,
        a forward or backward-data convolution whose M, N and K (and, backward, A's
        transpose) the engine has derived. Its K chunks are (kernel offset, tile block of
        B's rows): A's loads read the offset's matrix of the stack (``a_first`` bytes in,
        ``a_step`` on per offset) and its exponent grid (``a_grid_first``,
        ``a_grid_step``), B's each tile on its own, at the column a
        :class:`rtl.convcursor.ConvCursor` gives through :attr:`cur_pos_op` /
        :attr:`cur_off_op` (moved with the tile and the offset; the walker waits its
        latency before a load or exponent that reads it), as zero rows where it reads
        nothing (and no exponent then); a command adds to the accumulator after the block's
        first chunk. A weight gradient (``geometry.mode`` 3; M the stack's rows, B the input
        transposed) is a GEMM of Cout x Cin per kernel offset, its write jobs
        (:func:`rtl.writeback.write_job_layout` with ``conv``) Cout rows of the stack
        further on each offset, and ``ceil(Cout / TILE_BLOCK)`` rows of its exponent grid, a
        tile's row in its matrix beside; its K chunks are plain K blocks of output
        positions, each lane of B reading the chunk's run at the column the cursor gives
        (moved per chunk and offset), or zeros. Where one block holds the offset's GEMM and
        the accumulation slots hold every offset's tiles (``ceil(Cout / rows) *
        ceil(Cin / cols) * offsets <= block ** 2``,
        :func:`firmware.spec.hw.wg_offsets_inner`) the offsets are walked inside each K
        chunk: A's tiles are loaded once a chunk and kept for every
        offset, B's and the exponents loaded per offset, each offset's tiles in their own
        accumulation slots. Else the offsets are an outer loop of GEMMs, each loading A.
        A forward convolution with ``pool`` (a max pool on the
        write path) walks each block once per window phase (:data:`OffOp.PHASE
        <rtl.convcursor.OffOp.PHASE>` at each block's end; the next block after the last),
        its write jobs offered once the cursor is at their tile and carrying the phase and
        the tile's column of the pool's input. A backward-data convolution through a max
        pool's argmax walks each block's GEMM at the window's first phase, keeping its sums
        in their slots, and at each later phase replays it: a chunk of one step a tile, B
        zeros and no exponents, adding nothing and emitting the sums at that phase.
        Between a forward (without pooling phases) or backward-data block's first and last
        kernel offsets, an offset that no tile of the block reads B at is probed (state
        PROBE, the cursor's latency a tile) and skipped.

    Attributes
    ----------
    i_stream : In(stream.Signature(descriptor_layout(k_blocks)))
    o_cmd : Out(stream.Signature(rtl.issue.tile_command_layout(block, k_blocks)))
    o_load : Out(stream.Signature(rtl.loader.load_job_layout(tag_width)))
    o_write : Out(stream.Signature(rtl.writeback.write_job_layout(``conv``)))
    drained : In(1)
        No command is queued and no exponent vector is awaited downstream (without
        ``k_blocks``: the cue for a block's exponent vectors).
    bank_free : In(2)
        With ``k_blocks``: per bank of exponent registers, no command of it is queued and no
        vector of it awaited (:attr:`rtl.issue.CommandIssue.free`).
    cur_pos_op, cur_off_op : Out(3), Out(2)
        With ``conv``: the cursor's ops (:class:`rtl.convcursor.PosOp`, ``OffOp``).
    cur_column, cur_inside, cur_phase, cur_last_phase, cur_c_column : In
        With ``conv``: the cursor's outputs.

    Latency
    -------
    A block's first command is offered 2 cycles after the descriptor arrives
    (:data:`CUT_WAIT` more with ``chunk``) or after the previous block's last command (its
    first exponent load 4 cycles after, once drained, or with ``k_blocks`` once the bank
    is free).

    Throughput
    ----------
    A tile command every 5 cycles, plus, for each of its load jobs, the cycles until the job is
    taken; the exponent vectors take 2 cycles per index (``2 * block`` indices) plus the same
    wait per load. The descriptor is taken in the last tile's fifth cycle.
    """

    #: Cycles a descriptor with ``chunk`` (``DESC_FLAGS.CHUNK``) not 0 waits before its first
    #: block, while the balanced cut of its K (three registered stages behind the chunk's
    #: depth, itself a register) follows it.
    CUT_WAIT = 3

    def __init__(self, rows: int = 8, cols: int = 8, *, depth: int = 512, block: int = 4,
                 data_width: int = 128, tag_width: int = 2, k_blocks: bool = False,
                 conv: bool = False):
        self.rows, self.cols, self.depth, self.block = rows, cols, depth, block
        self.data_width, self.tag_width = data_width, tag_width
        self.k_blocks, self.conv = bool(k_blocks), bool(conv)
        if self.conv and (not self.k_blocks or cols > TILE_BLOCK):
            raise ValueError(f"conv needs k_blocks and cols at most {TILE_BLOCK}, not "
                             f"k_blocks={k_blocks}, cols={cols}")
        if self.k_blocks and (depth < TILE_BLOCK
                              or TILE_BLOCK % max(rows, data_width // 8)
                              or (TILE_BLOCK % cols and cols != 2 * TILE_BLOCK)):
            raise ValueError(f"k_blocks needs depth >= {TILE_BLOCK}, max(rows, bus bytes) "
                             f"dividing {TILE_BLOCK} and cols dividing {TILE_BLOCK} or "
                             f"{2 * TILE_BLOCK}, not depth {depth}, rows {rows}, cols {cols}, "
                             f"{data_width // 8} bus bytes")
        #: K blocks over two tile blocks of columns (``cols == 2 * TILE_BLOCK``): each tile
        #: of B takes a second exponent byte per chunk, for its columns from ``TILE_BLOCK``
        #: on, tagged with the bit below the bank's (:func:`exp_tag_width`).
        self.exp_halves = exp_halves(cols, self.k_blocks)
        if self.k_blocks and tag_width < exp_tag_width(block, cols, self.k_blocks):
            raise ValueError(f"tag_width must be at least "
                             f"{exp_tag_width(block, cols, self.k_blocks)}, not {tag_width}")
        super().__init__({
            "i_stream": In(stream.Signature(descriptor_layout(self.k_blocks,
                                                              conv=self.conv))),
            "o_cmd": Out(stream.Signature(tile_command_layout(block, self.k_blocks, rows))),
            "o_load": Out(stream.Signature(load_job_layout(tag_width))),
            "o_write": Out(stream.Signature(write_job_layout(self.conv))),
            "drained": In(1),
            **({"bank_free": In(2)} if self.k_blocks else {}),
            **({"cur_pos_op": Out(3), "cur_off_op": Out(2), "cur_column": In(32),
                "cur_inside": In(1), "cur_phase": In(8), "cur_last_phase": In(1),
                "cur_c_column": In(32)} if self.conv else {}),
        })

    def elaborate(self, platform):
        m = Module()
        R, C, D, BL = self.rows, self.cols, self.depth, self.block
        bpw = self.data_width // 8
        s = SimpleNamespace(m=m, R=R, C=C, D=D, BL=BL, bpw=bpw, wlog=_log2(bpw),
                            tag_width=self.tag_width, d=self.i_stream.payload)
        self._walk_state(s)
        self._conv_state(s)
        self._chunks(s)
        self._load_geometry(s)
        self._jobs(s)
        self._counts(s)
        with m.FSM(name="walk"):
            self._walk_start(s)
            self._walk_exponents(s)
            self._walk_command(s)
            self._walk_next(s)
            if self.conv:
                self._walk_probe(s)
            with m.State("LOAD"):
                m.d.comb += self.o_load.valid.eq(1)
                with m.If(self.o_load.ready):
                    with m.If(s.ld_exp):
                        m.next = "EXP_PREP"
                    with m.Else():
                        m.next = "CMD"
        return m

    def _walk_state(self, s):
        """The walk's registers: the block, the tile, the K chunk's start, the slot
        parities, the reuse block's size and the walk's order."""
        BL, R, C = s.BL, s.R, s.C
        m_blk = Signal(17)       # first row / column of the block
        n_blk = Signal(17)
        k0 = Signal(17)
        ti = Signal(range(BL))
        tj = Signal(range(BL))
        bm = Signal(range(BL + 1))
        bn = Signal(range(BL + 1))
        # Slot parities of A's and B's tiles: flipped at every chunk, but kept for a block
        # that keeps the block before's tiles of that operand (keep_a / keep_b).
        a_par = Signal()
        b_par = Signal()
        keep_a = Signal()
        keep_b = Signal()
        col_order = Signal()     # the descriptor's blocks are walked M inner
        k_fits = Signal()        # K is one chunk (a block after the first keeps an operand)
        wider = Signal()         # more columns than rows (or as many, and M > N)
        multi = Signal()         # the block walked has more than one K chunk
        # The descriptor's reuse block (its ``block`` field, 1..BL; 0 or more than BL: BL),
        # and its rows and columns: set with the descriptor, constant through the walk.
        blk = Signal(range(BL + 1))
        blk_r = Signal(range(BL * R + 1))
        blk_c = Signal(range(BL * C + 1))
        # K blocks: the bank of exponent registers the last exponents went to (and the
        # commands since read): the next chunk's go to the other
        bank = Signal()
        vars(s).update(m_blk=m_blk, n_blk=n_blk, k0=k0, ti=ti, tj=tj, bm=bm, bn=bn, a_par=a_par,
                       bank=bank,
                       b_par=b_par, keep_a=keep_a, keep_b=keep_b, col_order=col_order,
                       k_fits=k_fits, wider=wider, multi=multi, blk=blk, blk_r=blk_r, blk_c=blk_c)

    def _conv_state(self, s):
        """A convolution's registers (``conv``): the kernel offsets left after this one, the
        offset's matrix of A and its exponent grid, whether the chunk is the offset's last
        (forward, backward-data), a weight gradient's first row of C, and the wait for the
        cursor's outputs after each op. ``cur_op`` moves the cursor (comb, in the cycle of a
        state's decision); ``dm`` is the M walked (a weight gradient's: Cout)."""
        m, d = s.m, s.d
        if not self.conv:
            vars(s).update(conv=Const(0, 1), wg=Const(0, 1), pool=Const(0, 1),
                           wg_in=Const(0, 1), a_held=Const(0, 1), unpool=Const(0, 1),
                           replay=Const(0, 1),
                           cur_ok=Const(1, 1), cur_op=None, dm=d.m, dm_now=d.m)
            return
        # forward and backward-data (K chunks per offset, a B tile per C tile), or a weight
        # gradient (the offsets an outer loop of GEMMs of Cout x Cin, B a K run per chunk)
        conv = Signal()
        wg = Signal()
        pool = Signal()                    # a max pool or its backward pass: phases
        m.d.comb += [conv.eq(d.conv & (d.geometry.mode != 3)),
                     wg.eq(d.conv & (d.geometry.mode == 3)),
                     pool.eq(d.conv & d.pool)]
        # (reset-less: IDLE and BLOCK set each before its use, kk and dm every cycle -- off
        # the walker's reset, whose fan-out the timing budget bounds)
        # (the M walked, and registered: the descriptor is held while it is walked, and IDLE,
        # which takes it, reads dm_now; the decoding and multiplexer are then no part of the
        # later paths that subtract from it)
        dm_now = Mux(wg, d.cout, d.m)
        dm = Signal(32, reset_less=True)
        m.d.sync += dm.eq(dm_now)
        c_row = Signal(24, reset_less=True)    # a weight gradient's offset's first row of C
        c_erow = Signal(17, reset_less=True)   # ... and of C's exponent grid
        offs_left = Signal(8, reset_less=True)
        # (whether none or one is left, set with it: no comparison in front of the
        # decisions that read them, and the cursor's operations after those)
        offs_zero, offs_one = Signal(reset_less=True), Signal(reset_less=True)
        kk = Signal(8, reset_less=True)
        a_base = Signal(64, reset_less=True)
        a_gbase = Signal(24, reset_less=True)
        ochunk_last = Signal(reset_less=True)
        cur_wait = Signal(range(ConvCursor.LATENCY))
        cur_ok = Signal()
        m.d.sync += kk.eq(d.geometry.kernel_h * d.geometry.kernel_w)
        m.d.comb += cur_ok.eq(cur_wait == 0)
        with m.If(~cur_ok):
            m.d.sync += cur_wait.eq(cur_wait - 1)

        def offs_first():                  # (the first kernel offset: kk - 1 after it)
            m.d.sync += [offs_left.eq(kk - 1), offs_zero.eq(kk == 1), offs_one.eq(kk == 2)]

        def offs_step():                   # (the next one)
            m.d.sync += [offs_left.eq(offs_left - 1), offs_zero.eq(offs_one),
                         offs_one.eq(offs_left == 2)]

        def cur_op(pos=PosOp.HOLD, off=OffOp.HOLD):
            m.d.comb += [self.cur_pos_op.eq(pos), self.cur_off_op.eq(off)]
            m.d.sync += cur_wait.eq(ConvCursor.LATENCY - 1)

        def cur_phase_next():              # (with the position's op, if any)
            m.d.comb += self.cur_off_op.eq(OffOp.PHASE)
            m.d.sync += cur_wait.eq(ConvCursor.LATENCY - 1)
        # a weight gradient's offsets walked inside each K chunk (wg_offsets_inner, from
        # the counts _counts keeps, three registered stages behind them): A's tiles kept
        # after the chunk's first offset (a_held), each offset's tiles their own
        # accumulation slots (wslot, counted over the chunk's commands)
        # (reset-less as above: wg_in is recomputed every cycle, BLOCK sets a_held and wslot)
        wg_in = Signal(reset_less=True)
        a_held = Signal(reset_less=True)
        wslot = Signal(range(s.BL * s.BL), reset_less=True)
        # a forward (without pooling phases) or backward-data offset between the first and
        # the last: probed (PROBE: the cursor over the block's tiles, pj the tile) before its
        # exponents, and skipped where no tile reads B at it (pj reset-less as above: each
        # offset's set-up clears it)
        pj = Signal(range(max(2, s.BL)), reset_less=True)
        skippable = Signal()
        m.d.comb += skippable.eq(conv & ~(pool & (d.geometry.mode == 1)))
        # a pool's backward pass (backward-data through a max pool's argmax): the block's
        # GEMM computed at the window's first phase, its sums kept in their slots; at each
        # phase after (replay) a step of zeros added to them, emitted at that phase
        unpool = Signal()
        replay = Signal()
        m.d.comb += unpool.eq(pool & (d.geometry.mode == 2))

        def conv_next_offset():
            # a convolution's next kernel offset: its first K run, A's next matrix and
            # exponent grid, the cursor back at the block's first tile at the offset
            f_kc, f_after, f_last = s.kb_first
            offs_step()
            m.d.sync += [s.kc.eq(f_kc), s.k_after.eq(f_after), s.k0.eq(0),
                         ochunk_last.eq(f_last), s.last_chunk.eq(f_last & offs_one),
                         a_base.eq(carry_select_add(a_base, d.a_step, 64)),
                         a_gbase.eq(a_gbase + d.a_grid_step),
                         pj.eq(0)]
            cur_op(PosOp.BACK, OffOp.NEXT)
        vars(s).update(conv=conv, wg=wg, pool=pool, c_row=c_row, c_erow=c_erow,
                       wg_in=wg_in, a_held=a_held, wslot=wslot, pj=pj, skippable=skippable,
                       unpool=unpool, replay=replay,
                       conv_next_offset=conv_next_offset,
                       dm=dm, dm_now=dm_now,
                       offs_zero=offs_zero, offs_one=offs_one, offs_first=offs_first,
                       offs_step=offs_step, kk=kk, a_base=a_base, a_gbase=a_gbase,
                       ochunk_last=ochunk_last, cur_ok=cur_ok, cur_op=cur_op,
                       cur_phase_next=cur_phase_next)

    def _chunks(self, s):
        """The K chunks: ``kc`` steps in this chunk, ``k_after`` after it, the first block's
        ramp and the balanced cuts, all computed in registers ahead of their use."""
        R, C, bpw, D, m, d = s.R, s.C, s.bpw, s.D, s.m, s.d
        # K chunks (sim.models.engine.k_chunks): ``kc`` steps in this chunk, ``k_after`` in
        # the chunks after it; ``ramping`` while the descriptor's first block doubles its
        # chunks. The next chunk's pair is computed in registers from the current one (which
        # holds for at least the 4 cycles of a command before NEXT uses it), and the first
        # chunk's from the descriptor (held for the whole walk; ready in BLOCK).
        align = max(R, C, bpw) - 1
        # the ramp's first chunk (sim.models.engine.ramp_start): a multiple of the alignment
        # no shorter than the array's least read-out interval, rows + cols - 1
        start = -(-(R + C - 1) // (align + 1)) * (align + 1)
        kc = Signal(17)
        k_after = Signal(17)
        last_chunk = Signal()
        ramping = Signal()
        first_block = Signal()
        # (last_chunk, k_after == 0, is a register set with k_after: the FSM's decisions in
        # NEXT and CMD read it, and a 17-bit compare before them would add two levels)

        def split(rest, kc_reg, after_reg):
            """The short-first cut of ``rest`` steps: its first chunk and what follows."""
            r_m1 = Signal(17, name=f"{kc_reg.name}_m1")
            m.d.comb += r_m1.eq(rest - 1)
            with m.If(rest <= D):
                m.d.sync += [kc_reg.eq(rest), after_reg.eq(0)]
            with m.Else():
                m.d.sync += [kc_reg.eq((r_m1[:_log2(D)] | align) + 1),
                             after_reg.eq((r_m1 & ~Const(D - 1, 17)) - (~r_m1 & align))]

        # The longest chunk of the descriptor's balanced cuts (sim.models.engine.chunk_depth):
        # D, or with CHUNK 2 or 3 half or a quarter of it (no less than the alignment);
        # ``plain`` (CHUNK 0) ramps the first block, else every block is cut balanced.
        depths = [max(D >> max(0, c - 1), align + 1) for c in range(4)]
        cdepth = Signal(range(D + 1))
        cmask = Signal(range(D))                          # cdepth - 1
        cplus = Signal(range(D + 2 * (align + 1)))        # cdepth + 2 A - 1
        with m.Switch(d.chunk):
            for c, dc in enumerate(depths):
                with m.Case(c):
                    m.d.sync += [cdepth.eq(dc), cmask.eq(dc - 1),
                                 cplus.eq(dc + 2 * (align + 1) - 1)]
        plain = Signal()
        m.d.comb += plain.eq(d.chunk == 0)

        def balanced(rest, name):
            """The balanced cut of ``rest`` steps (the blocks after the first): over ``cdepth``
            (``D`` where CHUNK is 0 or 1), a chunk of ``ceil((s + cdepth) / 2A) * A`` steps
            (``s`` the short-first chunk below ``cdepth``, ``A`` the alignment), else all of
            it. Three registered stages, none with more than one
            short carry chain: ``s``; the chunk; what follows it. Returns the chunk, what
            follows, and whether this is the last chunk."""
            lg = _log2(D)
            s_r = Signal(max(lg, _log2(align + 1)) + 1, name=f"{name}_s")
            # (the cut's depth is ``cdepth``, a power of two no larger than D: the low bits
            # of rest - 1 below it are those below D masked with ``cdepth - 1``)
            rest1, rest2 = Signal(17, name=f"{name}_rest1"), Signal(17, name=f"{name}_rest2")
            big1, big2 = Signal(name=f"{name}_big1"), Signal(name=f"{name}_big2")
            kcb = Signal(17, name=f"{name}_kcb")
            kc_o, after_o = Signal(17, name=f"{name}_kc"), Signal(17, name=f"{name}_after")
            last_o = Signal(name=f"{name}_last")
            low_m1 = ((rest[:lg] - 1)[:lg] & cmask[:lg]) if lg else Const(0, 1)
            la = _log2(align + 1)
            m.d.sync += [s_r.eq((low_m1 | align) + 1), rest1.eq(rest), big1.eq(rest > cdepth),
                         kcb.eq((s_r + cplus) >> (la + 1) << la),
                         rest2.eq(rest1), big2.eq(big1),
                         kc_o.eq(Mux(big2, kcb, rest2)),
                         after_o.eq(Mux(big2, rest2 - kcb, 0)), last_o.eq(~big2)]
            return kc_o, after_o, last_o

        first_kc, first_after = Signal(17), Signal(17)
        split(d.k, first_kc, first_after)
        # (the balanced pairs trail k_after by 3 cycles: NEXT reads them at least 4 after it
        # (or BLOCK) sets k_after; from the descriptor (and ``cdepth``, a cycle behind it),
        # by 4: a block after the first reads them long after; the first block's first
        # chunk is the short-first cut, a cycle after the descriptor, or the ramp's, or with
        # CHUNK (no ramp, balanced from the first block) the balanced cut, read after CUT's
        # wait)
        bfirst_kc, bfirst_after, bfirst_last = balanced(d.k, "bfirst")
        bnext_kc, bnext_after, bnext_last = balanced(k_after, "bnext")
        ramp_start = Signal()        # the first block starts a ramp at ``start`` steps
        ramp_after0 = Signal(17)
        ramp_more = Signal()         # the next chunk doubles this one
        ramp_after = Signal(17)
        # (6 kc registered first: ramp_more trails kc by 2 cycles, read 4 after it changes)
        kc6 = Signal(20)
        if self.k_blocks:
            # K blocks: chunks of TILE_BLOCK steps (the first from K, the next from k_after)
            T = TILE_BLOCK
            kb_first = (Signal(17, name="kb_first_kc"), Signal(17, name="kb_first_after"),
                        Signal(name="kb_first_last"))
            kb_next = (Signal(17, name="kb_next_kc"), Signal(17, name="kb_next_after"),
                       Signal(name="kb_next_last"))
            # (a convolution's first chunk of each kernel offset from Cin)
            k_first = Mux(s.conv, d.b_rows, d.k) if self.conv else d.k
            for (kc_r, after_r, last_r), rest in ((kb_first, k_first), (kb_next, k_after)):
                big = rest > T
                m.d.sync += [kc_r.eq(Mux(big, T, rest)), after_r.eq(Mux(big, rest - T, 0)),
                             last_r.eq(~big)]
            vars(s).update(kb_first=kb_first, kb_next=kb_next)
        ramps = ((d.k >= 3 * start) if start <= D else 0) & plain
        m.d.sync += [ramp_start.eq(ramps & ~d.tiles if self.k_blocks else ramps),
                     ramp_after0.eq(d.k - start),
                     kc6.eq((kc << 2) + (kc << 1)),
                     ramp_more.eq(ramping & ((kc << 1) <= D) & (k_after >= kc6)),
                     ramp_after.eq(k_after - (kc << 1))]
        vars(s).update(start=start, kc=kc, k_after=k_after, last_chunk=last_chunk, ramping=ramping,
                       first_block=first_block, depths=depths, plain=plain, ramp_start=ramp_start,
                       ramp_after0=ramp_after0, ramp_more=ramp_more, ramp_after=ramp_after,
                       first_kc=first_kc, first_after=first_after, bfirst_kc=bfirst_kc,
                       bfirst_after=bfirst_after, bfirst_last=bfirst_last, bnext_kc=bnext_kc,
                       bnext_after=bnext_after, bnext_last=bnext_last)

    def _load_geometry(self, s):
        """What a load job needs, in registers: the tile's and exponent vector's corner, its
        lanes inside the matrix, the words and beats of a chunk."""
        R, C, BL, m, m_blk, n_blk, ti, tj = s.R, s.C, s.BL, s.m, s.m_blk, s.n_blk, s.ti, s.tj
        blk_r, blk_c, wlog, d, bm, bn, kc = s.blk_r, s.blk_c, s.wlog, s.d, s.bm, s.bn, s.kc
        bpw = s.bpw
        # The first row / column of tile (ti, tj), kept beside ti and tj by the FSM.
        m0 = Signal(17)
        n0 = Signal(17)
        # exponent vector being fetched: A's 0..BL-1, B's BL..2BL-1 and, with exp_halves and
        # tiles, the second tile block of B's BL tiles 2BL..3BL-1
        halves = self.exp_halves
        ei = Signal(range((3 if halves else 2) * BL + 1))
        e_hi_now = ei >= 2 * BL if halves else Const(0, 1)
        eidx = ei[:max(1, _log2(BL))] if BL > 1 else Const(0, 1)   # row vector ei
        cidx = (Mux(e_hi_now, ei - 2 * BL, ei - BL) if halves
                else (ei - BL))[:len(eidx)]                             # column vector
        # EXP's decisions on ei, registers (read in EXP, a cycle after EXP_PREP follows ei)
        e_end = Signal()                     # every vector done
        e_row = Signal()                     # ei names a row vector (else a column one)
        e_load_row = Signal()                # ... that the block has and the descriptor wants
        e_load_col = Signal()
        e_hi = Signal()                      # ... of a B tile's second tile block
        if halves:
            m.d.sync += e_hi.eq(e_hi_now)
        m.d.sync += [e_end.eq(ei == (Mux(d.tiles, 3 * BL, 2 * BL) if halves else 2 * BL)),
                     e_row.eq(ei < BL),
                     e_load_row.eq((d.row_vec | d.tiles if self.k_blocks else d.row_vec)
                                   & (ei < bm)),
                     e_load_col.eq((d.col_vec | d.tiles if self.k_blocks else d.col_vec)
                                   & (ei - BL < bn))]
        if halves:
            with m.If(e_hi_now):
                m.d.sync += e_load_col.eq(d.tiles & (cidx < bn))

        # What a load job needs, in registers computed every cycle from the walk's state: a
        # tile's (or span's, or vector's) lanes inside the matrix, words and beats of a chunk.
        # Each is read at least 2 cycles after what it depends on changes (NEXT or BLOCK ->
        # CMD phase 0 -> phase 1; BLOCK -> EXP_WAIT -> EXP_PREP -> EXP).
        rem_m = Signal(18)                   # rows and columns from the block's corner on
        rem_n = Signal(18)
        m.d.sync += [rem_m.eq(s.dm - m_blk), rem_n.eq(d.n - n_blk)]

        def lanes_valid(name, lanes, rest):
            v = Signal(range(lanes + 1), name=name)      # narrow: the sums below stay short
            m.d.sync += v.eq(Mux(rest < lanes, rest, lanes))
            return v

        v_a = lanes_valid("v_a", R, rem_m - (ti << _log2(R)))
        v_b = lanes_valid("v_b", C, rem_n - (tj << _log2(C)))
        v_as = Signal(range(BL * R + 1))               # a span of k-major A tiles
        v_bs = Signal(range(BL * C + 1))
        m.d.sync += [v_as.eq(Mux(_below(rem_m, blk_r), rem_m, blk_r)),
                     v_bs.eq(Mux(_below(rem_n, blk_c), rem_n, blk_c))]
        v_re = lanes_valid("v_re", R, rem_m - (eidx << _log2(R)))
        v_ce = lanes_valid("v_ce", C, rem_n - (cidx << _log2(C)))
        ex_m0 = Signal(17)
        ex_n0 = Signal(17)
        kc_words = Signal(17)
        kc_beats = {lanes: Signal(17, name=f"kc_beats_{lanes}") for lanes in {R, C}}
        m.d.sync += [ex_m0.eq(m_blk + (eidx << _log2(R))),
                     ex_n0.eq(n_blk + (cidx << _log2(C))),
                     kc_words.eq((kc + bpw - 1) >> wlog)]
        m.d.sync += [b.eq((kc + lanes - 1) >> _log2(lanes)) for lanes, b in kc_beats.items()]
        if self.k_blocks:
            # K blocks: the byte of A's grid (tile block row mb, column kb: transposed,
            # the grid is stored kb-major) and of B's (kb, nb) for exponent vector ei: the
            # tile block's row and column registered from ei (as ex_m0 / ex_n0), then the
            # offset's product and addend a cycle later (EXP_PREP2), summed into the job
            # (EXP): no product and carry chain in one cycle
            lg = _log2(TILE_BLOCK)
            gm, gn, gk = (Signal(12, name=f"grid_{x}") for x in "mnk")
            # (a convolution's A grid per kernel offset is Cout x Cin; B's the input's)
            g_n = Mux(d.conv, d.b_cols[:17], d.n) if self.conv else d.n
            g_k = Mux(s.conv, d.b_rows, d.k) if self.conv else d.k
            m.d.sync += [g.eq((x + TILE_BLOCK - 1) >> lg)
                         for g, x in ((gm, s.dm_now), (gn, g_n), (gk, g_k))]
            kb = s.k0 >> lg
            mb, nb = Signal(12, name="kb_mb"), Signal(12, name="kb_nb")
            col0 = n_blk + (cidx << _log2(C))
            if halves:
                col0 = col0 + Mux(e_hi_now, TILE_BLOCK, 0)
            m.d.sync += [mb.eq((m_blk + (eidx << _log2(R))) >> lg), nb.eq(col0 >> lg)]
            if self.conv:
                # (a convolution's B tile: the input's column block the cursor reads)
                with m.If(s.conv):
                    m.d.sync += nb.eq(self.cur_column >> lg)
            # (a convolution's addend also steps over the stack's grids: wider)
            kb_a_off = (Signal(24, name="kb_a_prod"),
                        Signal(24 if self.conv else 12, name="kb_a_add"))
            kb_b_off = (Signal(24, name="kb_b_prod"), Signal(12, name="kb_b_add"))
            ta, tb = d.transpose_a, d.transpose_b
            a_add = Mux(ta, mb, kb)
            if self.conv:
                a_add = a_add + Mux(s.conv, s.a_gbase, 0)
            m.d.sync += [kb_a_off[0].eq(Mux(ta, kb, mb) * Mux(ta, gm, gk)),
                         kb_a_off[1].eq(a_add),
                         kb_b_off[0].eq(Mux(tb, nb, kb) * Mux(tb, gk, gn)),
                         kb_b_off[1].eq(Mux(tb, kb, nb))]
            if self.conv:
                # (a weight gradient's B is the input read transposed: its grid's row nb,
                # the column block of the K run's first position's column)
                with m.If(s.wg):
                    m.d.sync += [kb_b_off[0].eq(nb * gn),
                                 kb_b_off[1].eq(self.cur_column >> lg)]
            vars(s).update(kb_a_off=kb_a_off, kb_b_off=kb_b_off)
        vars(s).update(e_hi=e_hi, cidx=cidx)
        vars(s).update(m0=m0, n0=n0, ei=ei, e_end=e_end, e_row=e_row, e_load_row=e_load_row,
                       e_load_col=e_load_col, v_a=v_a, v_b=v_b, v_as=v_as, v_bs=v_bs, v_re=v_re,
                       v_ce=v_ce, ex_m0=ex_m0, ex_n0=ex_n0, kc_words=kc_words, kc_beats=kc_beats)

    def _jobs(self, s):
        """The load job (:attr:`o_load`), set up by ``setup_load``, and the tile command and
        write job (:attr:`o_cmd`, :attr:`o_write`) offered for the current tile."""
        wlog, ti, tj, m, R, v_a, m0, C, v_b = s.wlog, s.ti, s.tj, s.m, s.R, s.v_a, s.m0, s.C, s.v_b
        n0, kc, last_chunk, bpw, k0, kc_words = s.n0, s.kc, s.last_chunk, s.bpw, s.k0, s.kc_words
        d, bm, v_as, bn, v_bs, a_par, b_par = s.d, s.bm, s.v_as, s.bn, s.v_bs, s.a_par, s.b_par
        kc_beats, keep_a, keep_b, BL = s.kc_beats, s.keep_a, s.keep_b, s.BL

        ld = self.o_load.payload           # the load job being offered (registered)
        ld_exp = Signal()                  # it fetches an exponent vector (return to EXP)

        def setup_load(path, lanes, lane_run, v, x0, base, stride, tag=0, exp=False,
                       span=1, v_span=None):
            """Registers the load job of one operand tile, a span of k-major tiles, or an
            exponent vector.

            k-major loads read, per step, the ``span`` neighbouring tiles' bytes of the row
            (``v_span`` of them inside the matrix) as one run of bus words: one burst per row
            instead of one per row and tile.
            """
            v_k = v if v_span is None else v_span
            sel = (x0 & (bpw - 1)) >> _log2(lanes) if lanes <= bpw else 0
            kmaj_words = (((x0 & (bpw - 1)) if lanes <= bpw else 0) + v_k + bpw - 1) >> wlog
            m.d.sync += [ld.base.eq(base), ld.stride.eq(stride), ld.path.eq(path),
                         ld.tag.eq(tag), ld_exp.eq(exp)]
            kmaj = [ld.row0.eq(0 if exp else k0), ld.col.eq(x0 >> wlog << wlog),
                    ld.rows.eq(1 if exp else kc), ld.nzero.eq(0),
                    ld.nwords.eq(kmaj_words), ld.nbeats.eq(span), ld.valid.eq(v_k),
                    ld.sel.eq(sel)]
            run = [ld.row0.eq(x0), ld.col.eq(k0), ld.rows.eq(v),
                   ld.nzero.eq(lanes - v), ld.nwords.eq(kc_words),
                   ld.nbeats.eq(kc_beats[lanes]), ld.valid.eq(kc),
                   ld.sel.eq(0)]
            if exp:
                m.d.sync += kmaj
            else:
                with m.If(lane_run):
                    m.d.sync += run
                with m.Else():
                    m.d.sync += kmaj

        # k-major operands (A transposed, B as stored) load the block's tiles as one span
        # with its first command; the others load each tile with the first command using it.
        first_cmd = (ti == 0) & (tj == 0)
        load_a = Signal()
        load_b = Signal()
        # (a convolution's B tiles where the cursor says: one job for each group of `grp`
        # tiles, with the group's first command. A group's tiles are one position's images
        # -- the batch is a multiple of the columns -- so they read consecutive columns, or
        # all only padding: `grp` is the largest power of two dividing both the tiles of a
        # position, batch / C, and the block's side)
        b_each = (d.transpose_b | s.conv) if self.conv else d.transpose_b
        b_tile = ti == 0
        grp = Const(1, range(BL + 1))
        if self.conv:
            grp = Signal(range(BL + 1))
            per_pos = Signal(16)
            low_pos = Signal(16)
            low_side = Signal(range(BL + 1))
            m.d.sync += [per_pos.eq(d.geometry.batch >> _log2(C)),
                         low_pos.eq(per_pos & (~per_pos + 1)),
                         low_side.eq(s.blk & (~s.blk + 1)),
                         grp.eq(Mux(low_pos < low_side, low_pos, low_side))]
            b_tile = (ti == 0) & ~(s.conv & ((tj & (grp - 1)) != 0))
        m.d.comb += [load_a.eq(Mux(d.transpose_a, first_cmd, tj == 0) & ~keep_a
                               & ~s.a_held),
                     load_b.eq(Mux(b_each, b_tile, first_cmd) & ~keep_b)]
        # A command's loads go out A's first, or B's where B alone is stored packed
        # (sim.models.engine.b_first): its gearbox, a row a cycle, is slower than the bus, and
        # behind A's words it would start last.
        b_first = Signal()
        m.d.sync += b_first.eq(~d.transpose_b & (d.b_stride[wlog:] == 0)
                               & ~(d.transpose_a & (d.a_stride[wlog:] == 0)))

        def load_a_job():
            # (a convolution's A: the kernel offset's matrix of the stack)
            base = Mux(s.conv, s.a_base, d.a_addr) if self.conv else d.a_addr
            setup_load(0, R, ~d.transpose_a, v_a, m0, base, d.a_stride, span=bm,
                       v_span=v_as)
            m.next = "LOAD"

        def load_b_job():
            if self.conv:
                with m.If(s.conv):
                    # the group's columns of the input at the kernel offset (k-major,
                    # grp * C bytes a row, a vector a tile), or zero rows where it reads
                    # only padding
                    setup_load(1, C, Const(0, 1), C, self.cur_column, d.b_addr, d.b_stride,
                               span=grp, v_span=grp << _log2(C))
                    with m.If(~self.cur_inside | s.replay):
                        m.d.sync += [ld.rows.eq(0), ld.nzero.eq(kc)]
                with m.Else():
                    setup_load(1, C, d.transpose_b, v_b, n0, d.b_addr, d.b_stride, span=bn,
                               v_span=v_bs)
                    with m.If(s.wg):
                        # a weight gradient's K run: each lane (an input channel) reads the
                        # run's positions from the column the cursor gives, or zeros
                        m.d.sync += ld.col.eq(self.cur_column)
                        with m.If(~self.cur_inside):
                            m.d.sync += [ld.rows.eq(0), ld.nzero.eq(C)]
            else:
                setup_load(1, C, d.transpose_b, v_b, n0, d.b_addr, d.b_stride, span=bn,
                           v_span=v_bs)
            m.next = "LOAD"

        cmd = self.o_cmd.payload
        m.d.comb += [cmd.k.eq(kc), cmd.a_slot.eq(Cat(ti, a_par) if BL > 1 else a_par),
                     cmd.b_slot.eq(Cat(tj, b_par) if BL > 1 else b_par),
                     cmd.load_a.eq(load_a), cmd.load_b.eq(load_b),
                     cmd.a_extra.eq(Mux(d.transpose_a, bm - 1, 0)),
                     cmd.b_extra.eq(Mux(b_each, Mux(s.conv, grp - 1, 0), bn - 1)),
                     cmd.emit.eq(last_chunk),
                     # (a pool's backward pass keeps its sums for the window's next phase)
                     cmd.store.eq(~last_chunk | (s.unpool & ~self.cur_last_phase)
                                  if self.conv else ~last_chunk),
                     cmd.add.eq(Mux(s.conv, s.multi, k0 != 0) if self.conv else k0 != 0),
                     cmd.acc_slot.eq(Mux(s.wg_in, s.wslot, ti * BL + tj) if self.conv
                                     else ti * BL + tj),
                     cmd.i.eq(ti), cmd.j.eq(tj),
                     *(getattr(cmd, f).eq(getattr(d, f)) for f in DESC_FIELDS),
                     self.o_write.payload.m0.eq(m0 + s.c_row if self.conv else m0),
                     self.o_write.payload.n0.eq(n0)]
        if self.conv:
            lt = _log2(TILE_BLOCK)
            w = self.o_write.payload
            m.d.comb += [w.mr.eq(m0), w.er.eq(s.c_erow + (m0 >> lt)),
                         # (a pool's: the phase, the column of the pool's input)
                         w.mc.eq(Mux(s.pool, self.cur_c_column, n0)),
                         w.ph.eq(Mux(s.pool, self.cur_phase, 0)),
                         w.pf.eq(~s.pool | (self.cur_phase == 0)),
                         w.pl.eq(~s.pool | self.cur_last_phase)]
        if self.k_blocks:
            # a middle K block of a tile (stored, added to): only A's rows inside M read out
            # where they are fewer than R (the first and the last read out every row: the
            # slot's other rows stay +0). (From m0, which is the tile's when the command
            # is: not v_a, which follows the tile a cycle later.)
            middle = d.tiles & ~last_chunk & cmd.add
            left = Signal(18, name="rows_left")
            m.d.comb += [left.eq(s.dm - m0), cmd.tiles.eq(d.tiles), cmd.bank.eq(s.bank),
                         cmd.read_rows.eq(Mux(middle & (left < R), left, 0))]
        vars(s).update(setup_load=setup_load, load_a_job=load_a_job, load_b_job=load_b_job,
                       ld_exp=ld_exp, load_a=load_a, load_b=load_b, b_first=b_first)

    def _counts(self, s):
        """Whether another tile or block follows in each direction (registers), and the
        tiles left to the matrix's edges."""
        m, first_block, bn, bm, blk, col_order = s.m, s.first_block, s.bn, s.bm, s.blk, s.col_order
        tj, ti, k_fits, wider = s.tj, s.ti, s.k_fits, s.wider

        # Another tile to the right in the block, or below: likewise (ti, tj, bm and bn change
        # at least 4 cycles before NEXT).
        more_tj = Signal()
        more_ti = Signal()
        m.d.sync += [more_tj.eq(tj + 1 < bn), more_ti.eq(ti + 1 < bm)]
        # Tiles from the block's corner to the matrix's edge, counted down as the blocks
        # advance (set from M and N when a descriptor starts), so that a block's size is a
        # compare with a constant, not a subtraction from the corner first.
        tiles_m = Signal(18)
        tiles_n = Signal(18)
        tiles_n0 = Signal(18)              # of the whole N, for the next row of blocks
        tiles_m0 = Signal(18)              # of the whole M, for the next column of blocks
        # Another block to the right, or below (n_blk + b * C < N, as tiles): registers,
        # computed every cycle from the counts (which change at least 4 cycles before NEXT
        # reads them), so that no compare lies before the FSM's next state.
        more_n = Signal()
        more_m = Signal()
        m.d.sync += [more_n.eq(_above(tiles_n, blk)), more_m.eq(_above(tiles_m, blk))]
        # The walk's order (sim.models.engine.column_order), set through the first block from
        # registers that hold for all of it (its more_m and more_n: whole M and N).
        with m.If(first_block):
            m.d.sync += col_order.eq(k_fits & more_m & (~more_n | wider))
        if self.conv:
            # wg_offsets_inner: the GEMM one block (both counts at most the side) and its
            # tiles times the offsets at most the slots -- the product of two counts below
            # the block, then with the offsets, each registered
            BL = s.BL
            small = Signal(reset_less=True)      # (all recomputed every cycle)
            mn = Signal(range(BL * BL + 1), reset_less=True)
            mnk = Signal(range(BL * BL * 256), reset_less=True)
            m.d.sync += [small.eq(~_above(tiles_m0, blk) & ~_above(tiles_n0, blk)),
                         mn.eq(tiles_m0[:_log2(BL) + 1] * tiles_n0[:_log2(BL) + 1]),
                         mnk.eq(mn * s.kk),
                         s.wg_in.eq(s.wg & small & (mnk <= BL * BL))]

        phase = Signal(2)        # CMD: 0 issue, 1 load A (or B), 2 load B (or A), 3 next
        cut_wait = Signal(range(max(2, self.CUT_WAIT)))
        cmd_sent = Signal()      # phase 0: the command (write job) is already taken
        write_sent = Signal()
        vars(s).update(more_tj=more_tj, more_ti=more_ti, tiles_m=tiles_m, tiles_n=tiles_n,
                       tiles_n0=tiles_n0, tiles_m0=tiles_m0, more_n=more_n, more_m=more_m,
                       phase=phase, cut_wait=cut_wait, cmd_sent=cmd_sent, write_sent=write_sent)

    def _walk_start(self, s):
        """States IDLE, CUT and BLOCK: take a descriptor, wait for its balanced cut, set up a
        block."""
        m, BL, cut_wait, m_blk, n_blk, C, d = s.m, s.BL, s.cut_wait, s.m_blk, s.n_blk, s.C, s.d
        R, depths, plain, bm, tiles_m, blk = s.R, s.depths, s.plain, s.bm, s.tiles_m, s.blk
        bn, tiles_n, ti, tj, m0, n0, k0 = s.bn, s.tiles_n, s.ti, s.tj, s.m0, s.n0, s.k0
        phase, ei, multi, kc, first_kc = s.phase, s.ei, s.multi, s.kc, s.first_kc
        bfirst_kc, k_after, first_after = s.bfirst_kc, s.k_after, s.first_after
        bfirst_after, ramping, last_chunk = s.bfirst_after, s.ramping, s.last_chunk
        bfirst_last, cmd_sent, write_sent = s.bfirst_last, s.cmd_sent, s.write_sent
        first_block, ramp_start, start = s.first_block, s.ramp_start, s.start
        ramp_after0, blk_r, blk_c, tiles_m0 = s.ramp_after0, s.blk_r, s.blk_c, s.tiles_m0
        tiles_n0, keep_a, keep_b, wider, k_fits = s.tiles_n0, s.keep_a, s.keep_b, s.wider, s.k_fits
        with m.State("IDLE"):
            with m.If(self.i_stream.valid):
                n_tiles = (d.n + C - 1) >> _log2(C)
                side = Mux((d.block == 0) | (d.block > BL), BL, d.block)
                m.d.sync += [blk.eq(side), blk_r.eq(side << _log2(R)),
                             blk_c.eq(side << _log2(C))]
                m_tiles = (s.dm_now + R - 1) >> _log2(R)
                if self.conv:
                    s.offs_first()
                    m.d.sync += [s.c_row.eq(0), s.c_erow.eq(0), s.replay.eq(0)]
                m.d.sync += [m_blk.eq(0), n_blk.eq(0), k0.eq(0), first_block.eq(1),
                             tiles_m.eq(m_tiles), tiles_m0.eq(m_tiles),
                             tiles_n.eq(n_tiles), tiles_n0.eq(n_tiles),
                             keep_a.eq(0), keep_b.eq(0),
                             wider.eq(1 if C > R else (s.dm_now > d.n) if C == R else 0)]
                with m.Switch(d.chunk):
                    for c, dc in enumerate(depths):
                        with m.Case(c):
                            m.d.sync += k_fits.eq(d.k <= dc)
                if self.k_blocks:
                    with m.If(d.tiles):
                        m.d.sync += k_fits.eq(d.k <= TILE_BLOCK)
                with m.If(plain):
                    m.next = "BLOCK"
                with m.Else():
                    m.d.sync += cut_wait.eq(self.CUT_WAIT - 1)
                    m.next = "CUT"
        with m.State("CUT"):           # CHUNK: the balanced cut follows cdepth and K
            m.d.sync += cut_wait.eq(cut_wait - 1)
            with m.If(cut_wait == 0):
                m.next = "BLOCK"
        with m.State("BLOCK"):
            m.d.sync += [bm.eq(Mux(_below(tiles_m, blk), tiles_m, blk)),
                         bn.eq(Mux(_below(tiles_n, blk), tiles_n, blk)),
                         ti.eq(0), tj.eq(0), m0.eq(m_blk), n0.eq(n_blk), k0.eq(0),
                         phase.eq(0), ei.eq(0), multi.eq(0),
                         kc.eq(Mux(first_block & plain, first_kc, bfirst_kc)),
                         k_after.eq(Mux(first_block & plain, first_after, bfirst_after)),
                         ramping.eq(0),
                         last_chunk.eq(Mux(first_block & plain, first_after == 0,
                                           bfirst_last)),
                         cmd_sent.eq(0), write_sent.eq(0)]
            with m.If(first_block & ramp_start):
                m.d.sync += [kc.eq(start), k_after.eq(ramp_after0), ramping.eq(1),
                             last_chunk.eq(ramp_after0 == 0)]
            if self.k_blocks:
                kb_kc, kb_after, kb_last = s.kb_first
                with m.If(d.tiles):
                    m.d.sync += [kc.eq(kb_kc), k_after.eq(kb_after), last_chunk.eq(kb_last)]
            if self.conv:
                # a convolution: the first kernel offset (A's first matrix), its first
                # chunk; the cursor back at the block's first tile
                with m.If(s.conv):
                    s.offs_first()
                    m.d.sync += [s.a_base.eq(carry_select_add(d.a_addr, d.a_first, 64)),
                                 s.a_gbase.eq(d.a_grid_first), s.ochunk_last.eq(kb_last),
                                 last_chunk.eq(kb_last & (s.kk == 1))]
                    s.cur_op(PosOp.BACK, OffOp.ZERO)
                with m.If(s.wg):             # (a weight gradient's K from its first run)
                    s.cur_op(PosOp.ZERO)
                m.d.sync += [s.wslot.eq(0), s.a_held.eq(0)]
            with m.If(d.row_vec | d.col_vec | d.tiles if self.k_blocks
                      else d.row_vec | d.col_vec):
                m.next = "EXP_WAIT"
            with m.Else():
                m.next = "CMD"
            if self.conv:
                # (a pool's backward pass after its first phase: one chunk of one step, B
                # zeros, added to the kept sums and emitted; no exponents: zero sums
                # rescale to zero)
                with m.If(s.replay):
                    m.d.sync += [kc.eq(1), k_after.eq(0), last_chunk.eq(1), multi.eq(1)]
                    m.next = "CMD"

    def _walk_exponents(self, s):
        """States EXP_WAIT, EXP_PREP and EXP: load the block's exponent vectors once the
        previous block's commands have left."""
        m, e_end, e_row, ei, e_load_row = s.m, s.e_end, s.e_row, s.ei, s.e_load_row
        setup_load, R, v_re, ex_m0, e_load_col = s.setup_load, s.R, s.v_re, s.ex_m0, s.e_load_col
        C, v_ce, ex_n0, d, BL, tag_width = s.C, s.v_ce, s.ex_n0, s.d, s.BL, s.tag_width
        if self.k_blocks:
            # K blocks: the exponents go to the other bank of registers, once no command
            # reads it (those of the chunk before last) and none of its vectors is awaited
            with m.State("EXP_WAIT"):
                with m.If(Mux(s.bank, self.bank_free[0], self.bank_free[1])):
                    m.d.sync += s.bank.eq(~s.bank)
                    m.next = "EXP_PREP"
        else:
            with m.State("EXP_WAIT"):      # the previous block's commands have taken theirs
                with m.If(self.drained):
                    m.next = "EXP_PREP"
        with m.State("EXP_PREP"):      # the registers above follow ei
            m.next = "EXP"
            if self.k_blocks:
                with m.If(d.tiles):
                    m.next = "EXP_PREP2"
            if self.conv:
                # (a convolution's column vectors: once the cursor is at ei's tile)
                with m.If(~s.cur_ok):
                    m.next = "EXP_PREP"
        if self.k_blocks:
            with m.State("EXP_PREP2"):     # K blocks: the grid offset follows ei's block
                m.next = "EXP"
        ld = self.o_load.payload

        def exp_tag(index, hi=None):
            """An exponent vector's tag (:func:`rtl.issue.exp_tag_width`): bit 0 set, the
            index, [the second tile block's bit], [the bank] at the top."""
            extra = [] if hi is None else [hi]
            if self.k_blocks:
                extra.append(s.bank)
            width = tag_width - 1 - len(extra)
            return Cat(Const(1, 1), index[:width], Const(0, max(0, width - len(index))), *extra)

        def kb_load(base, off):
            """K blocks: the grid's byte ``off`` (a product and its addend) as a packed job
            of one row of one byte, so the gearbox puts it in lane 0 (overrides
            ``setup_load``'s fields)."""
            if self.k_blocks:
                with m.If(d.tiles):
                    m.d.sync += [ld.base.eq(base), ld.stride.eq(1), ld.row0.eq(0),
                                 ld.col.eq(off[0] + off[1]), ld.rows.eq(1), ld.nzero.eq(0),
                                 ld.nwords.eq(1), ld.nbeats.eq(1), ld.valid.eq(1),
                                 ld.sel.eq(0)]
        with m.State("EXP"):
            # (a convolution: the cursor at the block's first tile for the first column
            # vector and for the commands, at the next tile for each next column vector)
            with m.If(e_end):
                m.next = "CMD"
                if self.conv:
                    with m.If(s.conv):
                        s.cur_op(PosOp.BACK)
            with m.Elif(e_row):
                # (past the block's rows, or none wanted: on to the column vectors -- the
                # rows loaded are the first bm, so none after this one is)
                m.d.sync += ei.eq(Mux(e_load_row, ei + 1, BL))
                m.next = "EXP_PREP"
                if self.conv:
                    with m.If(s.conv & ((ei == BL - 1) | ~e_load_row)):
                        s.cur_op(PosOp.BACK)
                with m.If(e_load_row):
                    setup_load(0, R, 0, v_re, ex_m0, d.row_exp_addr, 0,
                               tag=exp_tag(ei), exp=True)
                    kb_load(d.row_exp_addr, s.kb_a_off if self.k_blocks else None)
                    m.next = "LOAD"
            with m.Else():
                m.d.sync += ei.eq(ei + 1)
                m.next = "EXP_PREP"
                if self.exp_halves:
                    # (a tile's second exponent only where its columns reach the next block)
                    load_col = e_load_col & (~s.e_hi | (v_ce > TILE_BLOCK))
                    tag = exp_tag(s.cidx, s.e_hi)
                else:
                    # (past the block's columns, or none wanted: the end; the commands'
                    # cursor goes back to the block's first tile at the end)
                    with m.If(~e_load_col):
                        m.d.sync += ei.eq(2 * BL)
                    load_col = e_load_col
                    tag = exp_tag((ei - BL)[:len(ei)])
                if self.conv:
                    # (a tile that reads only padding has no exponent to load)
                    load_col = load_col & (~(s.conv | s.wg) | self.cur_inside)
                    with m.If(s.conv):
                        s.cur_op(PosOp.NEXT)
                with m.If(load_col):
                    setup_load(1, C, 0, v_ce, ex_n0, d.col_exp_addr, 0, tag=tag, exp=True)
                    kb_load(d.col_exp_addr, s.kb_b_off if self.k_blocks else None)
                    m.next = "LOAD"

    def _walk_command(self, s):
        """State CMD: offer the tile command (and write job), then its loads."""
        m, cmd_sent, phase, write_sent, b_first = s.m, s.cmd_sent, s.phase, s.write_sent, s.b_first
        load_a, load_a_job, load_b, load_b_job = s.load_a, s.load_a_job, s.load_b, s.load_b_job
        last_chunk = s.last_chunk
        with m.State("CMD"):
            with m.If(phase == 0):
                # (a pool's write job once the cursor is at the tile: its phase and column)
                w_valid = last_chunk & ~write_sent
                w_ready = self.o_write.ready
                if self.conv:
                    w_ok = s.cur_ok | ~s.pool
                    w_valid, w_ready = w_valid & w_ok, w_ready & w_ok
                m.d.comb += [self.o_cmd.valid.eq(~cmd_sent), self.o_write.valid.eq(w_valid)]
                cmd_out = cmd_sent | self.o_cmd.ready
                write_out = ~last_chunk | write_sent | w_ready
                m.d.sync += [cmd_sent.eq(cmd_out), write_sent.eq(write_out)]
                with m.If(cmd_out & write_out):
                    m.d.sync += [phase.eq(1), cmd_sent.eq(0), write_sent.eq(0)]
            with m.Elif(phase == 1):      # the first operand's load (A's, or B's)
                # (a convolution's: once the cursor is at the tile)
                with m.If(s.cur_ok) if self.conv else nullcontext():
                    m.d.sync += phase.eq(2)
                    with m.If(b_first):
                        with m.If(load_b):
                            load_b_job()
                    with m.Elif(load_a):
                        load_a_job()
            with m.Elif(phase == 2):      # the other's
                m.d.sync += phase.eq(3)
                with m.If(b_first):
                    with m.If(load_a):
                        load_a_job()
                with m.Elif(load_b):
                    load_b_job()
            with m.Else():
                m.d.sync += phase.eq(0)
                m.next = "NEXT"

    def _walk_probe(self, s):
        """State PROBE: a convolution's kernel offset between its first and last, set up by
        :meth:`_walk_next` with the cursor at the block's first tile: the cursor steps over
        the block's tiles (``bn``, ``pj`` the tile) until one reads B at the offset, then the
        offset's exponents and commands (EXP_WAIT); where none does, the next offset,
        probed the same way unless it is the last (:func:`sim.models.conv.walked_offsets`).
        Each tile takes the cursor's latency; the walk is ahead of the array while it
        probes (a chunk's exponents wait for the chunk before last to compute)."""
        m = s.m
        with m.State("PROBE"):
            with m.If(s.cur_ok):
                with m.If(self.cur_inside):
                    s.cur_op(PosOp.BACK)
                    m.next = "EXP_WAIT"
                with m.Elif(s.pj + 1 < s.bn):
                    m.d.sync += s.pj.eq(s.pj + 1)
                    s.cur_op(PosOp.NEXT)
                with m.Else():
                    s.conv_next_offset()
                    with m.If(s.offs_one):               # (the next one is the last)
                        m.next = "EXP_WAIT"

    def _walk_next(self, s):
        """State NEXT: the block's next tile, the next K chunk or the next block."""
        m, col_order, more_m, more_n, more_tj = s.m, s.col_order, s.more_m, s.more_n, s.more_tj
        more_ti, n_blk, m_blk, last_chunk = s.more_ti, s.n_blk, s.m_blk, s.last_chunk
        ramp_more, multi, tj, n0, C, ti, m0 = s.ramp_more, s.multi, s.tj, s.n0, s.C, s.ti, s.m0
        R, d, k0, kc, a_par, b_par = s.R, s.d, s.k0, s.kc, s.a_par, s.b_par
        ramp_after, bnext_kc, bnext_after = s.ramp_after, s.bnext_kc, s.bnext_after
        bnext_last, first_block, keep_a, keep_b = s.bnext_last, s.first_block, s.keep_a, s.keep_b
        k_after, ramping, tiles_m0, tiles_n0 = s.k_after, s.ramping, s.tiles_m0, s.tiles_n0
        blk_r, tiles_m, blk, blk_c, tiles_n = s.blk_r, s.tiles_m, s.blk, s.blk_c, s.tiles_n

        def next_offset():
            # a weight gradient's next kernel offset: the cursor on to it, its C rows (and
            # rows of C's exponent grid) Cout further on
            s.offs_step()
            m.d.sync += [s.c_row.eq(s.c_row + d.cout),
                         s.c_erow.eq(s.c_erow + ((d.cout + (TILE_BLOCK - 1))
                                                 >> _log2(TILE_BLOCK)))]
            s.cur_op(PosOp.HOLD, OffOp.NEXT)

        with m.State("NEXT"):
            # the block's next tile (sim.models.engine.tile_order): j inner, or i inner
            # where B is transposed
            # (a convolution's cursor follows the tile and the kernel offset)
            def conv_op(*ops):
                if self.conv:
                    with m.If(s.conv):
                        s.cur_op(*ops)
            if self.conv:
                # (a weight gradient's offsets inside the chunk: a slot a command)
                m.d.sync += s.wslot.eq(s.wslot + 1)
            with m.If(more_tj & ~d.transpose_b):
                m.d.sync += [tj.eq(tj + 1), n0.eq(n0 + C)]
                m.next = "CMD"
                conv_op(PosOp.NEXT)
            with m.Elif(more_ti & ~d.transpose_b):
                m.d.sync += [tj.eq(0), ti.eq(ti + 1), m0.eq(m0 + R), n0.eq(n_blk)]
                m.next = "CMD"
                conv_op(PosOp.BACK)
            with m.Elif(more_ti & d.transpose_b):
                m.d.sync += [ti.eq(ti + 1), m0.eq(m0 + R)]
                m.next = "CMD"
            with m.Elif(more_tj & d.transpose_b):
                m.d.sync += [ti.eq(0), tj.eq(tj + 1), n0.eq(n0 + C), m0.eq(m_blk)]
                m.next = "CMD"
            if self.conv:
                # a weight gradient's offsets inside the chunk: its next offset, A's tiles
                # kept, B's to the other slots, its exponents, its C rows Cout further on
                with m.Elif(s.wg_in & ~s.offs_zero):
                    m.d.sync += [tj.eq(0), ti.eq(0), m0.eq(m_blk), n0.eq(n_blk),
                                 b_par.eq(~b_par), s.a_held.eq(1), s.ei.eq(0)]
                    next_offset()
                    m.next = "EXP_WAIT"
            with m.Elif(~last_chunk):
                m.d.sync += [tj.eq(0), ti.eq(0), m0.eq(m_blk), n0.eq(n_blk),
                             k0.eq(k0 + kc), a_par.eq(~a_par), b_par.eq(~b_par),
                             multi.eq(1)]
                with m.If(ramp_more):
                    m.d.sync += [kc.eq(kc << 1), k_after.eq(ramp_after),
                                 last_chunk.eq(ramp_after == 0)]
                with m.Else():
                    m.d.sync += [kc.eq(bnext_kc), k_after.eq(bnext_after),
                                 ramping.eq(0), last_chunk.eq(bnext_last)]
                m.next = "CMD"
                if self.k_blocks:
                    # K blocks: the next block of T steps, with its exponents
                    kb_kc, kb_after, kb_last = s.kb_next
                    with m.If(d.tiles):
                        m.d.sync += [kc.eq(kb_kc), k_after.eq(kb_after),
                                     last_chunk.eq(kb_last), s.ei.eq(0)]
                        m.next = "EXP_WAIT"
                if self.conv:
                    with m.If(s.wg_in):
                        # (a weight gradient's offsets inside the chunk: the next K run at
                        # the first offset, A's tiles loaded again, the slots from the first)
                        s.offs_first()
                        m.d.sync += [s.c_row.eq(0), s.c_erow.eq(0), s.a_held.eq(0),
                                     s.wslot.eq(0)]
                        s.cur_op(PosOp.NEXT, OffOp.ZERO)
                    with m.Elif(s.wg):       # (a weight gradient: the next K run)
                        s.cur_op(PosOp.NEXT)
                    # a convolution: the kernel offset's next chunk, or the next offset's
                    # first (A's next matrix and exponent grid)
                    with m.If(s.conv):
                        with m.If(s.ochunk_last):
                            s.conv_next_offset()
                            with m.If(s.skippable & ~s.offs_one):
                                m.next = "PROBE"
                        with m.Else():
                            m.d.sync += [s.ochunk_last.eq(kb_last),
                                         last_chunk.eq(kb_last & s.offs_zero)]
                            s.cur_op(PosOp.BACK)
            if self.conv:
                with m.Elif(s.pool & ~self.cur_last_phase):
                    # a pool's block again, at the window's next phase (its operands anew;
                    # a pool's backward pass replays its kept sums)
                    m.d.sync += [first_block.eq(0), keep_a.eq(0), keep_b.eq(0),
                                 a_par.eq(~a_par), b_par.eq(~b_par), s.replay.eq(s.unpool)]
                    s.cur_op(PosOp.HOLD, OffOp.PHASE)
                    m.next = "BLOCK"
            with m.Else():
                # The next block along the walk's inner direction keeps the operand
                # they share (A along a row of blocks, B down a column) if this block
                # was one K chunk (then so is every block after the first): its tiles
                # stay in their slots, the other operand's go to the other set.
                inner = Mux(col_order, more_m, more_n)
                outer = Mux(col_order, more_n, more_m)
                keep = inner & ~multi
                m.d.sync += [first_block.eq(0), keep_a.eq(keep & ~col_order),
                             keep_b.eq(keep & col_order),
                             a_par.eq(a_par ^ ~(keep & ~col_order)),
                             b_par.eq(b_par ^ ~(keep & col_order))]
                if self.conv:
                    m.d.sync += s.replay.eq(0)
                with m.If(inner | outer):
                    m.next = "BLOCK"
                if self.conv:
                    # a weight gradient's next kernel offset: its GEMM from the first block,
                    # its C rows Cout further on
                    with m.Elif(s.wg & ~s.offs_zero):
                        m.d.sync += [m_blk.eq(0), n_blk.eq(0), first_block.eq(1),
                                     tiles_m.eq(tiles_m0), tiles_n.eq(tiles_n0)]
                        next_offset()
                        m.next = "BLOCK"
                with m.Else():
                    m.d.comb += self.i_stream.ready.eq(1)
                    m.next = "IDLE"
                # (a convolution's cursor: on past the block's last tile to the next
                # block's first, or back to the first block's)
                with m.If(col_order):
                    with m.If(more_m):
                        m.d.sync += [m_blk.eq(m_blk + blk_r), tiles_m.eq(tiles_m - blk)]
                    with m.Elif(more_n):
                        m.d.sync += [m_blk.eq(0), n_blk.eq(n_blk + blk_c),
                                     tiles_m.eq(tiles_m0), tiles_n.eq(tiles_n - blk)]
                        conv_op(PosOp.ADVANCE)
                with m.Else():
                    with m.If(more_n):
                        m.d.sync += [n_blk.eq(n_blk + blk_c), tiles_n.eq(tiles_n - blk)]
                        conv_op(PosOp.ADVANCE)
                    with m.Elif(more_m):
                        m.d.sync += [n_blk.eq(0), m_blk.eq(m_blk + blk_r),
                                     tiles_n.eq(tiles_n0), tiles_m.eq(tiles_m - blk)]
                        conv_op(PosOp.ZERO)
                if self.conv:
                    # (a pool's last phase: the next block's first, or the walk's end)
                    with m.If(s.pool):
                        s.cur_phase_next()
