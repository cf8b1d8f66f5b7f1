"""A unit's side data for the write-back epilogue: its bias values, its stored mask rows, and
for the optimiser's step its stored BFP8 weights."""

from amaranth import Array, Cat, Const, Module, Mux, Signal, signed, unsigned
from amaranth.lib import data, memory, stream, wiring
from amaranth.lib.wiring import In, Out

from firmware.spec.regmap import TILE_BLOCK

from .dma import dma_command_layout
from .readshare import read_word_layout

__all__ = ["UnitSideLoader", "side_desc_layout", "side_job_layout"]


def side_job_layout(conv: bool = False) -> data.StructLayout:
    """A unit (a tile block of C): its first element (``m0``, ``n0``, multiples of the tile
    block) and its rows and columns inside the matrix (1 to the tile block). With ``conv``
    (C a stack of matrices, :func:`rtl.writeback.write_job_layout`) ``m0`` is the unit's
    row in the stack, any row, ``er`` its row of the stack's exponent grid and ``mc`` its
    column of the stored mask (a pool's input's, :func:`rtl.writeback.write_job_layout`)."""
    T = TILE_BLOCK
    return data.StructLayout({"m0": unsigned(17), "n0": unsigned(17),
                              "rows_in": range(T + 1), "cols_in": range(T + 1),
                              **({"er": unsigned(17), "mc": unsigned(21)} if conv else {})})


def side_desc_layout(addr_width: int = 32, argmax: bool = False) -> data.StructLayout:
    """What :class:`UnitSideLoader` reads of the running descriptor (``DESC_EPILOGUE.BIAS``,
    ``MASK_IN`` and ``SGD``, ``DESC_BIAS_ADDR``, ``DESC_MASK_ADDR``, ``DESC_MASK_STRIDE``;
    for ``SGD`` the stored weights: ``DESC_C_ADDR``, ``DESC_C_STRIDE``, ``DESC_C_EXP_ADDR``
    and ``DESC_N``; with ``argmax``, a max pool's backward pass, ``unpool``, whose argmax
    rows are read as the weights' are, from ``w_addr`` and ``w_stride``, without an
    exponent)."""
    return data.StructLayout({"bias": 2, "bias_addr": unsigned(addr_width), "mask_in": 1,
                              "mask_addr": unsigned(addr_width), "mask_stride": unsigned(32),
                              "sgd": 1, "w_addr": unsigned(addr_width),
                              "w_stride": unsigned(32), "w_exp_addr": unsigned(addr_width),
                              "n": unsigned(17), **({"unpool": 1} if argmax else {})})


def _info_layout(conv: bool = False) -> data.StructLayout:
    """A held unit: its job and what it loads (``bias`` 0, 1 per row or 2 per column; the
    mask rows; the weights; with ``conv`` the argmax rows)."""
    return data.StructLayout({"job": side_job_layout(conv), "bias": 2, "mask_in": 1,
                              "sgd": 1, **({"unpool": 1} if conv else {})})


# a buffer slot's state; each moves on in this order, by its own pointer
FREE, LOADING, FULL, OUT = range(4)


class UnitSideLoader(wiring.Component):
    """Reads each unit's bias values and mask rows into a buffer, for a lookup by row and
    segment.

    For each job on :attr:`jobs` (a unit of T x T elements of C, T =
    :data:`firmware.spec.regmap.TILE_BLOCK`, clipped to ``rows_in`` x ``cols_in``) it takes
    a free buffer slot and issues, on :attr:`rd_cmd`: with a bias (``desc.bias`` 1: one a
    row, 2: one a column), one command of the whole bus words holding the unit's ``rows_in``
    floats at ``bias_addr + 4 * m0`` (per column: ``cols_in`` at ``bias_addr + 4 * n0``);
    with ``mask_in``, one command of one word per row ``r < rows_in``, at ``mask_addr + (m0
    + r) * mask_stride + n0 / 8``, whose ``ceil(cols_in / 8)`` bytes lie in its 32-bit lane
    ``(n0 / 32) mod (bus bytes / 4)``. (Bases and the stride are multiples of the bus word,
    the checker's rule, so a unit's bias starts a word and a mask row never spans two.)
    With ``sgd`` built and the descriptor's ``sgd`` (the optimiser's step, whose C is the
    stored BFP8 weights, read before they are written): one command of one word for the
    unit's exponent at ``w_exp_addr + (m0 / T) * ceil(n / T) + n0 / T`` (with ``conv``
    the job's ``er`` for ``m0 / T``), then one command a
    row ``r < rows_in`` of the ``ceil(cols_in / bus bytes)`` words at ``w_addr + (m0 + r) *
    w_stride + n0`` (the row's ``T`` bytes lie in the word's lane ``(n0 / T) mod (bus bytes
    / T)`` where a word holds more). A
    command is issued only into a slot held for its unit, so every word on :attr:`rd_words`
    is taken as it comes: ``ready`` waits for nothing but a cycle between units, as
    :class:`rtl.readshare.ReadShare` asks of its port ``b``.

    When a unit's words are all in, it is offered on :attr:`o_unit` (its job), in job
    order. The lookup port reads the oldest unit not yet released, combinationally: for
    :attr:`row` and :attr:`seg` (columns ``seg * cols`` to ``+ cols`` of the unit),
    :attr:`bias_row` (the row's bias with ``bias`` 1, else 0), :attr:`bias_lanes` (the
    segment's column biases with ``bias`` 2, else 0) and :attr:`mask_lanes` (the row's
    stored mask bits in the segment with ``mask_in``, else ones); each is 0 beyond
    ``rows_in`` and ``cols_in``; with ``sgd``, :attr:`w_lanes` (the segment's stored int8
    mantissas of the row, 0 beyond the edges) and :attr:`w_exp` (the unit's exponent).
    :attr:`release` frees that unit (after its :attr:`o_unit` beat). The numpy model is a
    slice of the bias vector, of :func:`sim.models.bfp.unpack_mask` of the mask rows and of
    the stored mantissas and exponent grid.

    Parameters
    ----------
    cols : int
        Lanes of a segment: 4 to T, dividing T.
    data_width : {64, 128, 256, 512}
    addr_width : int
    slots : int
        Units held (a power of two, at least 2: one read while the next loads).
    sgd : bool
        Build the stored weights' loads and lookups (the descriptor's ``sgd``).
    conv : bool
        Jobs of :func:`side_job_layout` with ``conv``: a unit of a stack of matrices, its
        first row any row, its exponent's row in the job.

    Attributes
    ----------
    jobs : In(stream.Signature(side_job_layout(``conv``)))
    desc : In(side_desc_layout(addr_width))
        Held while the descriptor's units pass.
    rd_cmd : Out(stream.Signature(rtl.dma.dma_command_layout(addr_width)))
    rd_words : In(stream.Signature(rtl.readshare.read_word_layout(data_width)))
    o_unit : Out(stream.Signature(side_job_layout(``conv``)))
    row : In(range(T))
    seg : In(range(T // cols))
    bias_row : Out(32)
    bias_lanes : Out(data.ArrayLayout(32, cols))
    mask_lanes : Out(cols)
    w_lanes : Out(data.ArrayLayout(signed(8), cols))
        With ``sgd``.
    w_exp : Out(signed(8))
        With ``sgd``.
    phase : In(8)
        With ``argmax``: the pool's window phase a lane's argmax is compared with.
    a_match : Out(cols)
        With ``argmax``: per lane, whether :attr:`w_lanes` equals :attr:`phase` (compared
        before the segment's lanes are picked from the row: the comparison and the pick are
        one level of logic less deep than the pick and the comparison).
    release : In(1)
    idle : Out(1)
        No unit is held.
    issuing : Out(1)
        A taken job's commands are not all issued yet (from the cycle after it is taken).

    Latency
    -------
    A unit's first command is offered 4 cycles after its job is taken (the addresses, in
    three registered stages), the next ones a cycle apart while :attr:`rd_cmd` is ready: a
    unit needs ``(bias != 0) + rows_in * mask_in`` commands (with ``sgd``, ``1 +
    rows_in``). It is offered on :attr:`o_unit`
    the cycle after its last word is taken (without a command, 2 cycles after its job). The
    lookups are combinational from :attr:`row` and :attr:`seg`: a distributed-RAM read, a
    small multiplexer and the edge's gating (a consumer registers them).

    Throughput
    ----------
    A command a cycle; a word a cycle, less a cycle between units. Through a
    :class:`rtl.dma.DmaReader`, which takes one single-burst command every other cycle, a
    unit with a mask loads in about ``2 * (rows_in + 1)`` cycles plus the memory's latency.
    """

    def __init__(self, cols: int, data_width: int = 128, addr_width: int = 32, *,
                 slots: int = 2, sgd: bool = False, conv: bool = False,
                 argmax: bool = False):
        T = TILE_BLOCK
        if not isinstance(cols, int) or cols < 4 or cols > T or T % cols:
            raise ValueError(f"cols must be 4 to {T} and divide {T}, not {cols!r}")
        if data_width not in (64, 128, 256, 512):
            raise ValueError(f"data_width must be 64, 128, 256 or 512, not {data_width!r}")
        if not isinstance(slots, int) or slots < 2 or slots & (slots - 1):
            raise ValueError(f"slots must be a power of two of at least 2, not {slots!r}")
        self.cols, self.data_width, self.addr_width, self.slots = cols, data_width, \
            addr_width, slots
        if argmax and not conv:
            raise ValueError("argmax needs conv (a pool's backward pass is a convolution's)")
        self.sgd, self.conv, self.argmax = bool(sgd), bool(conv), bool(argmax)
        #: Rows of T bytes are loaded: the weights (``sgd``), or the argmax (``argmax``).
        self.rows8 = self.sgd or self.argmax
        super().__init__({
            "jobs": In(stream.Signature(side_job_layout(conv))),
            "desc": In(side_desc_layout(addr_width, self.argmax)),
            "rd_cmd": Out(stream.Signature(dma_command_layout(addr_width))),
            "rd_words": In(stream.Signature(read_word_layout(data_width))),
            "o_unit": Out(stream.Signature(side_job_layout(conv))),
            "row": In(range(T)),
            "seg": In(range(T // cols)),
            "bias_row": Out(32),
            "bias_lanes": Out(data.ArrayLayout(32, cols)),
            "mask_lanes": Out(cols),
            **({"w_lanes": Out(data.ArrayLayout(signed(8), cols))} if self.rows8 else {}),
            **({"w_exp": Out(signed(8))} if self.sgd else {}),
            **({"phase": In(8), "a_match": Out(cols)} if self.argmax else {}),
            "release": In(1),
            "idle": Out(1),
            "issuing": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        T, NS = TILE_BLOCK, self.slots
        F = self.data_width // 32            # floats a bus word
        L = max(self.cols, F)                # floats a row of the lanes' copy of the bias
        m.submodules.info = info = memory.Memory(shape=_info_layout(self.conv), depth=NS, init=[])
        # The bias twice, each copy read with one memory read and a small multiplexer:
        # ``brow`` a bus word a row (the rows' lookup), ``blanes`` L floats a row, a
        # segment's floats side by side (the lanes' lookup, a word written into its lanes).
        # The mask rows, 32 bits each. Small and read combinationally: distributed RAM.
        m.submodules.brow = brow = memory.Memory(shape=data.ArrayLayout(32, F),
                                                 depth=NS * T // F, init=[])
        m.submodules.blanes = blanes = memory.Memory(shape=data.ArrayLayout(32, L),
                                                     depth=NS * T // L, init=[])
        m.submodules.mask = mask = memory.Memory(shape=unsigned(T), depth=NS * T, init=[])
        # the stored weights' mantissa rows (T bytes each) and each slot's exponent
        wmem = wexp = None
        if self.rows8:
            m.submodules.wmem = wmem = memory.Memory(shape=unsigned(8 * T), depth=NS * T,
                                                     init=[])
        if self.sgd:
            wexp = Array(Signal(8, name=f"wexp{s}", reset_less=True) for s in range(NS))
        # the exponent's byte in its word, per slot (written as its command is issued)
        lb = (self.data_width // 8).bit_length() - 1
        self._woff = Array(Signal(lb, name=f"woff{s}", reset_less=True) for s in range(NS))
        state = Array(Signal(range(4), name=f"state{s}") for s in range(NS))
        ptr = {name: Signal(range(NS), name=f"{name}_slot")
               for name in ("issue", "fill", "offer", "read")}
        self._issue(m, info.write_port(), state, ptr["issue"])
        self._fill(m, info.read_port(domain="comb"), brow.write_port(),
                   blanes.write_port(granularity=1), mask.write_port(), state, ptr["fill"],
                   wmem.write_port(granularity=8 * min(T, self.data_width // 8))
                   if self.rows8 else None, wexp)
        self._consume(m, info.read_port(domain="comb"), info.read_port(),
                      brow.read_port(domain="comb"), blanes.read_port(domain="comb"),
                      mask.read_port(domain="comb"), state, ptr["offer"], ptr["read"],
                      wmem.read_port(domain="comb") if self.rows8 else None, wexp)
        m.d.comb += self.idle.eq(Cat(s == FREE for s in state).all())
        return m

    # ---- jobs -> a slot each, and the read commands of its side data --------------------

    def _issue(self, m, info_w, state, slot):
        """(The descriptor's addresses and stride are registered with the job: the running
        descriptor may change once its last job is taken.)"""
        T = TILE_BLOCK
        d, job = self.desc, self.jobs.payload
        AW = self.addr_width
        F = self.data_width // 32
        j = Signal(side_job_layout(self.conv), reset_less=True)
        has_bias = Signal()
        mask_in = Signal()
        per_row = Signal()
        # m0 * mask_stride as (m0 / T) * stride, in halves of the stride: two small products
        # from registers into registers (a DSP slice each), then their sum
        # (with ``conv`` m0 is any row of a stack: the whole product, and the exponent's
        # row from the job)
        mul_i = Signal(17 if self.conv else 17 - 5, reset_less=True)
        mul_s = Signal(32, reset_less=True)
        p_lo = Signal(33 if self.conv else 28, reset_less=True)
        p_hi = Signal(33 if self.conv else 28, reset_less=True)
        prod = Signal(AW, reset_less=True)                        # m0 * mask_stride
        mbase = Signal(AW, reset_less=True)                       # mask_addr + n0 / 8
        baddr = Signal(AW, reset_less=True)                       # the bias command's address
        j_baddr = Signal(AW, reset_less=True)                     # bias_addr, mask_addr
        j_maddr = Signal(AW, reset_less=True)
        bwords = Signal(range(T + 1), reset_less=True)            # and its words
        row_addr = Signal(AW, reset_less=True)                    # the next mask row's
        r = Signal(range(T))
        cmd = self.rd_cmd
        # the stored weights (sgd): their rows take the mask rows' path with w_addr and
        # w_stride; the exponent's address is w_exp_addr + n0 / T + (m0 / T) * ceil(n / T)
        wsgd = Signal()
        # a pool's backward pass (``argmax``): the argmax rows after any mask rows, at
        # w_addr (the argmax's) + m0 * w_stride + n0
        unpool = Signal()
        j_wstride = Signal(32, reset_less=True)
        j_eaddr = Signal(AW, reset_less=True)
        j_waddr = Signal(AW, reset_less=True)
        gn = Signal(12, reset_less=True)
        eprod = Signal(29 if self.conv else 24, reset_less=True)
        erow = Signal(17, reset_less=True) if self.conv else mul_i
        eaddr = Signal(AW, reset_less=True)
        wbeats = Signal(range(T + 1), reset_less=True)
        lb = (self.data_width // 8).bit_length() - 1
        with m.FSM(name="issue") as fsm:
            with m.State("JOB"):
                m.d.comb += [self.jobs.ready.eq(state[slot] == FREE),
                             info_w.addr.eq(slot), info_w.data.job.eq(job),
                             info_w.data.bias.eq(Mux(d.bias == 3, 0, d.bias)),
                             info_w.data.mask_in.eq(d.mask_in),
                             info_w.data.sgd.eq(d.sgd if self.sgd else 0),
                             *([info_w.data.unpool.eq(d.unpool if self.argmax else 0)]
                               if self.conv else [])]
                with m.If(self.jobs.valid & self.jobs.ready):
                    m.d.comb += info_w.en.eq(1)
                    m.d.sync += [state[slot].eq(LOADING), slot.eq(slot + 1), j.eq(job),
                                 mul_i.eq(job.m0 if self.conv else job.m0 >> 5),
                                 mul_s.eq(d.mask_stride),
                                 j_baddr.eq(d.bias_addr), j_maddr.eq(d.mask_addr),
                                 has_bias.eq((d.bias == 1) | (d.bias == 2)),
                                 per_row.eq(d.bias == 1), mask_in.eq(d.mask_in)]
                    if self.rows8:
                        m.d.sync += j_waddr.eq(d.w_addr + job.n0)
                    if self.argmax:
                        m.d.sync += [unpool.eq(d.unpool), j_wstride.eq(d.w_stride)]
                    if self.sgd:
                        m.d.sync += [wsgd.eq(d.sgd),
                                     j_eaddr.eq(d.w_exp_addr + (job.n0 >> 5)),
                                     *([erow.eq(job.er)] if self.conv else []),
                                     gn.eq((d.n + (T - 1)) >> 5)]
                        with m.If(d.sgd):
                            m.d.sync += mul_s.eq(d.w_stride)
                    m.next = "GEOMETRY"
            with m.State("GEOMETRY"):
                count = Mux(per_row, j.rows_in, j.cols_in)
                m.d.sync += [p_lo.eq(mul_i * mul_s[:16]), p_hi.eq(mul_i * mul_s[16:]),
                             mbase.eq(j_maddr + ((j.mc if self.conv else j.n0) >> 3)),
                             baddr.eq(j_baddr + (Mux(per_row, j.m0, j.n0) << 2)),
                             bwords.eq((count + F - 1) >> (F.bit_length() - 1))]
                if self.rows8:
                    m.d.sync += wbeats.eq((j.cols_in + (1 << lb) - 1) >> lb)
                if self.sgd:
                    m.d.sync += eprod.eq(erow * gn)
                    with m.If(wsgd):
                        m.d.sync += mbase.eq(j_waddr)
                m.next = "PRODUCT"
            with m.State("PRODUCT"):
                m.d.sync += prod.eq((p_lo + (p_hi << 16)) << (0 if self.conv else 5))
                if self.sgd:
                    m.d.sync += eaddr.eq(j_eaddr + eprod)
                m.next = "BASE"
            with m.State("BASE"):
                m.d.sync += [row_addr.eq(mbase + prod), r.eq(0)]
                if self.sgd:
                    m.d.sync += self._woff[(slot - 1)[:len(slot)]].eq(eaddr[:lb])
                with m.If(has_bias):
                    m.next = "BIAS"
                if self.sgd:
                    with m.Elif(wsgd):
                        m.next = "WEXP"
                with m.Elif(mask_in):
                    m.next = "MASK"
                if self.argmax:
                    with m.Elif(unpool):
                        m.next = "AGEO"
                with m.Else():
                    m.next = "JOB"
            if self.argmax:
                # the argmax rows: their stride's product, the first row's address, a
                # command a row of the unit's T bytes
                with m.State("AGEO"):
                    m.d.sync += [p_lo.eq(mul_i * j_wstride[:16]),
                                 p_hi.eq(mul_i * j_wstride[16:]), r.eq(0)]
                    m.next = "APROD"
                with m.State("APROD"):
                    m.d.sync += prod.eq(p_lo + (p_hi << 16))
                    m.next = "ABASE"
                with m.State("ABASE"):
                    m.d.sync += row_addr.eq(j_waddr + prod)
                    m.next = "AROWS"
                with m.State("AROWS"):
                    m.d.comb += [cmd.valid.eq(1), cmd.payload.addr.eq(row_addr),
                                 cmd.payload.beats.eq(wbeats)]
                    with m.If(cmd.ready):
                        m.d.sync += [row_addr.eq(row_addr + j_wstride), r.eq(r + 1)]
                        with m.If(r == j.rows_in - 1):
                            m.next = "JOB"
            if self.sgd:
                with m.State("WEXP"):
                    m.d.comb += [cmd.valid.eq(1), cmd.payload.addr.eq(eaddr),
                                 cmd.payload.beats.eq(1)]
                    with m.If(cmd.ready):
                        m.next = "MASK"
            with m.State("BIAS"):
                m.d.comb += [cmd.valid.eq(1), cmd.payload.addr.eq(baddr),
                             cmd.payload.beats.eq(bwords)]
                with m.If(cmd.ready & mask_in):
                    m.next = "MASK"
                if self.argmax:
                    with m.Elif(cmd.ready & unpool):
                        m.next = "AGEO"
                with m.Elif(cmd.ready):
                    m.next = "JOB"
            with m.State("MASK"):                    # (the weights' rows with sgd)
                m.d.comb += [cmd.valid.eq(1), cmd.payload.addr.eq(row_addr),
                             cmd.payload.beats.eq(Mux(wsgd, wbeats, 1) if self.sgd else 1)]
                with m.If(cmd.ready):
                    m.d.sync += [row_addr.eq(row_addr + mul_s), r.eq(r + 1)]
                    with m.If(r == j.rows_in - 1):
                        m.next = "JOB"
                        if self.argmax:
                            with m.If(unpool):
                                m.next = "AGEO"
        m.d.comb += self.issuing.eq(~fsm.ongoing("JOB"))

    # ---- words -> the slot being filled -------------------------------------------------

    def _fill(self, m, info_r, brow_w, blanes_w, mask_w, state, slot, wmem_w, wexp):
        T, C = TILE_BLOCK, self.cols
        F = self.data_width // 32
        L = max(C, F)
        lf, ll = F.bit_length() - 1, L.bit_length() - 1
        u = info_r.data
        w = self.rd_words
        word = Signal(range(T // F), reset_less=True)    # the bias word
        r = Signal(range(T), reset_less=True)            # the mask row
        # a mask row's 32 bits in the word (at the mask's column: with ``conv`` a pool's
        # input's)
        lane = (u.job.mc if self.conv else u.job.n0)[5:5 + lf]
        first = Cat(Const(0, lf), word)                  # the word's first float
        took = w.valid & w.ready
        done = Signal()
        floats = w.payload.data[:32 * F]
        m.d.comb += [info_r.addr.eq(slot),
                     brow_w.addr.eq(Cat(word, slot)), brow_w.data.eq(floats),
                     blanes_w.addr.eq(Cat(first[ll:], slot)),
                     blanes_w.data.eq(Cat(floats for _ in range(L // F))),
                     mask_w.addr.eq(Cat(r, slot)),
                     mask_w.data.eq(w.payload.data.word_select(lane, 32))]
        bpw = self.data_width // 8
        wword = Signal(range(max(2, T // bpw)), reset_less=True)   # a weights row's word
        if self.rows8:
            if bpw >= T:          # the row's T bytes: one lane of the word
                m.d.comb += [wmem_w.addr.eq(Cat(r, slot)),
                             wmem_w.data.eq(w.payload.data.word_select(
                                 u.job.n0[5:5 + (bpw // T).bit_length() - 1]
                                 if bpw > T else 0, 8 * T))]
            else:                 # bpw bytes of the row a word
                m.d.comb += [wmem_w.addr.eq(Cat(r, slot)),
                             wmem_w.data.eq(Cat(w.payload.data for _ in range(T // bpw)))]
        with m.FSM(name="fill"):
            with m.State("WAIT"):
                m.d.sync += [word.eq(0), r.eq(0), wword.eq(0)]
                with m.If(state[slot] == LOADING):
                    with m.If(u.bias != 0):
                        m.next = "BIAS"
                    if self.sgd:
                        with m.Elif(u.sgd):
                            m.next = "WEXP"
                    with m.Elif(u.mask_in):
                        m.next = "MASK"
                    if self.argmax:
                        with m.Elif(u.unpool):
                            m.next = "WROWS"
                    with m.Else():
                        m.d.comb += done.eq(1)
            if self.sgd:
                with m.State("WEXP"):
                    m.d.comb += w.ready.eq(1)
                    with m.If(took):
                        m.d.sync += wexp[slot].eq(
                            w.payload.data.word_select(self._woff[slot], 8))
                        m.next = "WROWS"
            if self.rows8:
                with m.State("WROWS"):
                    m.d.comb += [w.ready.eq(1),
                                 wmem_w.en.eq(Mux(took, 1 << wword, 0) if bpw < T else took)]
                    with m.If(took):
                        m.d.sync += wword.eq(wword + 1)
                        with m.If(w.payload.last):
                            m.d.sync += [wword.eq(0), r.eq(r + 1)]
                            with m.If(r == u.job.rows_in - 1):
                                m.d.comb += done.eq(1)
                                m.next = "WAIT"
            with m.State("BIAS"):
                m.d.comb += [w.ready.eq(1), brow_w.en.eq(took),
                             blanes_w.en.eq(Mux(took, Const((1 << F) - 1, L) << first[:ll],
                                                0))]
                with m.If(took):
                    m.d.sync += word.eq(word + 1)
                    with m.If(w.payload.last & u.mask_in):
                        m.next = "MASK"
                    if self.argmax:
                        with m.Elif(w.payload.last & u.unpool):
                            m.next = "WROWS"
                    with m.Elif(w.payload.last):
                        m.d.comb += done.eq(1)
                        m.next = "WAIT"
            with m.State("MASK"):
                m.d.comb += [w.ready.eq(1), mask_w.en.eq(took)]
                with m.If(took):
                    m.d.sync += r.eq(r + 1)
                    with m.If(r == u.job.rows_in - 1):
                        if self.argmax:       # (then the argmax rows, from the first)
                            with m.If(u.unpool):
                                m.d.sync += r.eq(0)
                                m.next = "WROWS"
                            with m.Else():
                                m.d.comb += done.eq(1)
                                m.next = "WAIT"
                        else:
                            m.d.comb += done.eq(1)
                            m.next = "WAIT"
        with m.If(done):
            m.d.sync += [state[slot].eq(FULL), slot.eq(slot + 1)]

    # ---- full units -> o_unit; the oldest's lookups, and its release --------------------

    def _consume(self, m, info_o, info_l, brow_r, blanes_r, mask_r, state, offer, read,
                 wmem_r, wexp):
        T, C = TILE_BLOCK, self.cols
        F = self.data_width // 32
        L = max(C, F)
        lf, lc, ll = F.bit_length() - 1, C.bit_length() - 1, L.bit_length() - 1
        o = self.o_unit
        m.d.comb += [info_o.addr.eq(offer), o.payload.eq(info_o.data.job),
                     o.valid.eq(state[offer] == FULL)]
        with m.If(o.valid & o.ready):
            m.d.sync += [state[offer].eq(OUT), offer.eq(offer + 1)]
        freed = Signal()
        m.d.comb += freed.eq(self.release & (state[read] == OUT))
        with m.If(freed):
            m.d.sync += [state[read].eq(FREE), read.eq(read + 1)]

        # the oldest unit's record, a register: read at the slot that is oldest next cycle
        # (a unit's record is written well before it is offered)
        u = info_l.data
        row, seg = self.row, self.seg
        col0 = Cat(Const(0, lc), seg)                    # the segment's first column
        m.d.comb += [info_l.addr.eq(Mux(freed, read + 1, read)),
                     brow_r.addr.eq(Cat(row[lf:], read)),
                     blanes_r.addr.eq(Cat(col0[ll:T.bit_length() - 1], read)),
                     mask_r.addr.eq(Cat(row, read))]
        row_in = row < u.job.rows_in
        m.d.comb += self.bias_row.eq(Mux((u.bias == 1) & row_in,
                                         brow_r.data[row[:lf]], 0))
        seg_bias = blanes_r.data.as_value()
        if L > C:                                        # the segment's group in the row
            seg_bias = seg_bias.word_select(col0[lc:ll], 32 * C)
        bits = mask_r.data.word_select(seg, C)
        for lane in range(C):
            inside = Cat(Const(lane, lc), seg) < u.job.cols_in     # seg * C + lane
            m.d.comb += [
                self.bias_lanes[lane].eq(Mux((u.bias == 2) & inside,
                                             seg_bias[32 * lane:32 * lane + 32], 0)),
                self.mask_lanes[lane].eq(inside & row_in & (bits[lane] | ~u.mask_in)),
            ]
        if self.rows8:
            m.d.comb += wmem_r.addr.eq(Cat(row, read))
            if self.sgd:
                m.d.comb += self.w_exp.eq(wexp[read])
            wrow = wmem_r.data.word_select(seg, 8 * C)
            rows8 = (u.sgd | u.unpool) if self.argmax else u.sgd
            if self.argmax:
                # each of the row's T bytes against the phase, then the segment's lanes
                hits = Cat(*(wmem_r.data[8 * i:8 * i + 8] == self.phase for i in range(T)))
                seg_hits = hits.word_select(seg, C)
            for lane in range(C):
                inside = Cat(Const(lane, lc), seg) < u.job.cols_in
                m.d.comb += self.w_lanes[lane].eq(Mux(inside & row_in & rows8,
                                                      wrow[8 * lane:8 * lane + 8], 0))
                if self.argmax:
                    # (w_lanes == phase, w_lanes 0 where the lane reads nothing)
                    m.d.comb += self.a_match[lane].eq(Mux(inside & row_in & rows8,
                                                          seg_hits[lane], self.phase == 0))
