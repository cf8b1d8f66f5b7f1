"""C tiles -> DMA write commands and bus words with byte strobes."""

from types import SimpleNamespace

from amaranth import Array, Cat, Const, Module, Mux, Signal, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from firmware.spec.regmap import TILE_BLOCK

from ._util import SLICE_BITS, delay, occupancy, own_reset
from .checker import descriptor_layout
from .dma import dma_command_layout, dma_write_layout
from .fifo import Fifo
from .pipe import RegisterSlice
from .rescale import rescale_output_layout
from .xilinx import register_copies

__all__ = ["WORD_BITS_PER_SELECT", "WriteBack", "WriteBackPorts", "job_grid_row", "job_row",
           "phase_rows", "select_bits", "tile_phase", "write_job_layout"]

#: Bits of a write word one copy of the word select chooses where a row is at most eight
#: words (two LUT6s a bit: 256 loads a copy bit); where a row has more, proportionally fewer
#: (:func:`select_bits`), so that a copy's loads stay the same as the rows grow.
WORD_BITS_PER_SELECT = 128


def select_bits(word_bits: int, words_per_row: int) -> int:
    """Bits of a ``word_bits``-bit write word one copy of the word select chooses, for rows
    of ``words_per_row`` words: :data:`WORD_BITS_PER_SELECT` for up to eight words, then
    halved as the words double (at least 16 bits), and never more than the word."""
    bits = WORD_BITS_PER_SELECT * 8 // max(8, words_per_row)
    return max(16, min(word_bits, bits))


def phase_rows(rows: int, ports: int, phase: int) -> int:
    """Rows ``phase``, ``phase + ports``, ... below ``rows``: the rows of a tile of ``rows``
    rows that a write-back takes whose first row of the tile is ``phase``."""
    return len(range(phase, rows, ports))


def tile_phase(tile: int, rows: int, ports: int, phase: int) -> int:
    """The first row of tile ``tile`` (counted from 0 since reset) that the write-back of
    ``phase`` of ``ports`` takes: the datapath's rows are dealt to the ports in turn without a
    break between tiles, row ``i`` of the stream to port ``i % ports``, so tile ``t`` starts
    at port ``t * rows % ports`` and port ``phase`` takes its rows ``(phase - t * rows) %
    ports``, that plus ``ports``, ... Where ``ports`` divides ``rows`` that is ``phase`` for
    every tile."""
    return (phase - tile * rows) % ports


def write_job_layout(conv: bool = False) -> data.StructLayout:
    """A C tile to write: its first row and column in the matrix.

    With ``conv`` (a convolution's engine) C may be a stack of matrices (a weight
    gradient's, one per kernel offset, each with its own tile grid), and a job says more:
    ``m0`` is the tile's row in the stack (its address, its random bits' row), ``mr`` its
    row in its matrix (the matrix's edges clip it: ``M`` is a matrix's rows) and ``er`` the
    row of the matrix's tile block in the stack's exponent grid (``eb + mr / T``, ``eb`` the
    matrix's first). Without a stack ``mr`` is ``m0`` and ``er`` is ``m0 / T``
    (:func:`job_row`, :func:`job_grid_row`). A forward convolution's max pool walks each
    tile of its output once per window phase: ``ph`` is the phase, ``pf`` and ``pl`` say
    it is the first and the last, and ``mc`` is the tile's column in the pool's input (its
    ReLU mask's); without one ``ph`` is 0, ``pf`` and ``pl`` are 1 and ``mc`` is ``n0``."""
    return data.StructLayout({"m0": unsigned(17), "n0": unsigned(17),
                              **({"mr": unsigned(17), "er": unsigned(17), "mc": unsigned(21),
                                  "ph": unsigned(8), "pf": 1, "pl": 1} if conv else {})})


def job_row(job):
    """A write job's row in its matrix (:func:`write_job_layout`)."""
    return job.mr if "mr" in job.shape().members else job.m0


def job_grid_row(job):
    """A write job's tile block row in C's exponent grid (:func:`write_job_layout`)."""
    lt = TILE_BLOCK.bit_length() - 1
    return job.er if "er" in job.shape().members else job.m0 >> lt


def _queue_layout(rows: int, cols: int, addr_width: int, words: int, bpw: int,
                  rotate_rows: int = 0):
    """A job as queued, with what each side needs precomputed (see :class:`WriteBack`);
    ``rotate_rows``: the most rows of a tile the write-back takes, where that varies."""
    rotating = {"rp_m1": range(max(2, rotate_rows)),  # the tile's rows here - 1
                "rp_one": 1} if rotate_rows else {}   # rp_m1 == 0
    return data.StructLayout({
        **rotating,
        "rows_in": range(rows + 1),       # rows of the tile inside the matrix
        "n_valid": range(cols + 1),       # columns of the tile inside the matrix
        "words_m1": range(max(2, words)),  # bus words a row - 1
        "off": range(max(2, bpw)),        # (n0 * 4) mod bus bytes
        "addr": unsigned(addr_width),     # the first row's address, rounded to a bus word
        "rows_nz": 1,                     # rows_in != 0
        "words_one": 1,                   # words_m1 == 0
    })



def _reg(name, shape):
    """A register without reset (read only under its stage's valid)."""
    return Signal(shape, name=name, reset_less=True)


class WriteBack(wiring.Component):
    """Writes C tiles, row by row, leaving memory beyond the matrix untouched.

    Each job on :attr:`jobs` announces the next ``rows`` C rows on :attr:`i_stream` (one tile,
    ``cols`` 32-bit words a row). A command side issues one DMA write command on
    :attr:`wr_cmd` per row inside the matrix, of the bus words holding columns below ``N``; a
    data side cuts each such row into those words on :attr:`wr_data`, with strobes on the
    bytes of columns below ``N``. Rows beyond ``M`` are taken and dropped. A job first passes
    :data:`PREP_STAGES` registered stages that compute its geometry and first address, so
    neither side does wide arithmetic on its handshake paths. With ``ports = P > 1`` it
    writes one phase of the rows (see :class:`WriteBackPorts`). The numpy model is
    :func:`sim.models.engine.write_back`; the write-back is described in the architecture
    page of the documentation.

    Parameters
    ----------
    rows, cols : int
        Array shape: rows of a C tile, 32-bit words of a C row.
    data_width, addr_width : int
        AXI bus.
    queue : int
        Jobs queued on each side.
    phase, ports : int
        The rows this write-back takes: ``phase`` modulo ``ports`` (1 to ``rows``; where
        ``ports`` does not divide ``rows`` a tile's rows here are a row more or fewer as the
        tiles' first rows rotate over the ports, the same over ``ports`` tiles).
    conv : bool
        Jobs of :func:`write_job_layout` with ``conv``: a tile's rows are clipped by its
        matrix's ``M`` (``desc.m``) at its row in the matrix, and written at its row in C.

    Attributes
    ----------
    jobs : In(stream.Signature(write_job_layout(``conv``)))
    i_stream : In(stream.Signature(rtl.rescale.rescale_output_layout(cols)))
    desc : In(descriptor_layout())
        The running descriptor (``m``, ``n``, ``c_addr``, ``c_stride``); held while its tiles
        pass.
    wr_cmd : Out(stream.Signature(rtl.dma.dma_command_layout(addr_width)))
    wr_data : Out(stream.Signature(rtl.dma.dma_write_layout(data_width)))
    wr_done : In(1)
        Pulses once per completed write command.
    idle : Out(1)
        No job is queued or running and every issued write has been acknowledged.

    Latency
    -------
    A tile's first write command leaves ``PREP_STAGES + 4`` cycles after its job arrives; a
    row's first word leaves combinationally from the row (once its job is at the queue head).

    Throughput
    ----------
    One write command and one word a cycle; jobs are taken one a cycle while the queues have
    room. One idle cycle per tile between write commands (the command queue is popped from a
    register, the cycle after its tile's last row).
    """

    #: Registered stages between a job and the queues (see the class documentation).
    PREP_STAGES = 6

    def __init__(self, rows: int = 8, cols: int = 8, *, data_width: int = 128,
                 addr_width: int = 32, queue: int = 16, phase: int = 0, ports: int = 1,
                 primitive: bool = False, conv: bool = False):
        if (not isinstance(ports, int) or isinstance(ports, bool) or not 1 <= ports <= rows
                or not isinstance(phase, int) or not 0 <= phase < ports):
            raise ValueError(f"ports must be 1 .. rows ({rows}) and phase in 0 .. ports - 1, "
                             f"not ports={ports!r}, phase={phase!r}")
        self.phase, self.ports, self.primitive = phase, ports, bool(primitive)
        self.rows, self.cols, self.queue = rows, cols, queue
        self.data_width, self.addr_width = data_width, addr_width
        super().__init__({
            "jobs": In(stream.Signature(write_job_layout(conv))),
            "i_stream": In(stream.Signature(rescale_output_layout(cols))),
            "desc": In(descriptor_layout()),
            "wr_cmd": Out(stream.Signature(dma_command_layout(addr_width))),
            "wr_data": Out(stream.Signature(dma_write_layout(data_width))),
            "wr_done": In(1),
            "idle": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        R, C, AW = self.rows, self.cols, self.addr_width
        P, ph = self.ports, self.phase
        pow2 = not P & (P - 1)
        plog = (P - 1).bit_length()       # bits of P * c_stride beyond c_stride's
        rotate = R % P != 0               # each tile's first row here: tile_phase()
        # rows of a tile this write-back takes (rotating: the most)
        RP = -(-R // P) if rotate else phase_rows(R, P, ph)
        bpw = self.data_width // 8
        wlog = bpw.bit_length() - 1
        d = self.desc
        row_bytes = 4 * C
        words_per_row = max(1, row_bytes // bpw)
        qlayout = _queue_layout(R, C, AW, words_per_row, bpw, RP if rotate else 0)
        m.submodules.wq_cmd = wq_cmd = Fifo(width=qlayout.size, depth=self.queue)
        m.submodules.wq_data = wq_data = Fifo(width=qlayout.size, depth=self.queue)

        s = SimpleNamespace(m=m, R=R, C=C, AW=AW, P=P, ph=ph, pow2=pow2, plog=plog,
                            rotate=rotate, RP=RP, bpw=bpw, wlog=wlog, d=d, row_bytes=row_bytes,
                            words_per_row=words_per_row, qlayout=qlayout, wq_cmd=wq_cmd,
                            wq_data=wq_data)
        self._prep(s)
        self._command_side(s)
        self._data_side(s)
        return m

    def _prep(self, s):
        """A job -> its queue entry, through :data:`PREP_STAGES` registered stages (``s.in_prep``
        counts the jobs in them)."""
        rotate, m, ph, pow2, row_bytes, bpw = s.rotate, s.m, s.ph, s.pow2, s.row_bytes, s.bpw
        qlayout, wq_data, wq_cmd, R, P, AW = s.qlayout, s.wq_data, s.wq_cmd, s.R, s.P, s.AW
        wlog, C, words_per_row, RP, plog, d = s.wlog, s.C, s.words_per_row, s.RP, s.plog, s.d
        # ---- prep: a job -> its queue entry, PREP_STAGES registered stages -------------------
        # M, N <= 65535 (checked), so m0, n0 and the distances to the edges fit 17 bits.
        PS = self.PREP_STAGES
        pv = [Signal(name=f"prep_v{i}") for i in range(PS)]
        in_prep = Signal(range(PS + 1))
        room = Signal()
        # a job is taken when both queues will have room for it and every job in the pipe:
        # each queue's entries and the jobs in the pipe counted together (taken -> popped),
        # with the room flags registers (rtl._util.occupancy), not compares of FIFO levels
        # (the command queue's pop is a register, below; the data queue's is counted a cycle
        # late: the room errs low for a cycle, and a tile's last row is not followed by the
        # count)
        take = Signal()
        data_popped = Signal()
        m.d.sync += data_popped.eq(wq_data.r_en)
        cmd_room = occupancy(m, "wq_cmd", self.queue, take, wq_cmd.r_en)
        data_room = occupancy(m, "wq_data", self.queue, take, data_popped)
        m.d.comb += room.eq(cmd_room & data_room)
        m.d.comb += self.jobs.ready.eq(room)
        m.d.comb += take.eq(self.jobs.valid & self.jobs.ready)
        m.d.sync += [pv[0].eq(take)] + [pv[i].eq(pv[i - 1]) for i in range(1, PS)]
        m.d.sync += in_prep.eq(in_prep + take - pv[-1])
        # 0: the job (m0: its first row in its matrix; mp: this phase's first row in C)
        p0_m0, p0_n0 = _reg("p0_m0", 17), _reg("p0_n0", 17)
        p0_mp = _reg("p0_mp", 17)
        if rotate:
            # the first row here of the next job's tile (tile_phase()): rows mod P less
            # for each job taken; and down the prep stages with its job
            S = R % P
            tph = Signal(range(P), init=ph, name="tile_phase")
            with m.If(take):
                m.d.sync += tph.eq(Mux(tph >= S, tph - S, tph + (P - S)))
            p0_ph, p1_ph, p2_ph = (_reg(f"p{i}_ph", range(P)) for i in range(3))
            m.d.sync += [p0_ph.eq(tph), p1_ph.eq(p0_ph), p2_ph.eq(p1_ph),
                         p0_mp.eq(self.jobs.payload.m0 + tph)]
        else:
            m.d.sync += p0_mp.eq(self.jobs.payload.m0 + ph if ph else self.jobs.payload.m0)
        m.d.sync += [p0_m0.eq(job_row(self.jobs.payload)), p0_n0.eq(self.jobs.payload.n0)]
        # 1: distances to the edges; m0 * c_stride as two 16 x 16 products; the column offset
        p1_left_n, p1_left_m = _reg("p1_left_n", 17), _reg("p1_left_m", 17)
        p1_plo, p1_phi = _reg("p1_plo", 32), _reg("p1_phi", 32)
        col_byte = Cat(Const(0, 2), p0_n0)                         # n0 * 4 (19 bits)
        p1_col, p1_off = _reg("p1_col", 19), _reg("p1_off", max(1, wlog))
        m.d.sync += [p1_left_n.eq(d.n[:17] - p0_n0), p1_left_m.eq(d.m[:17] - p0_m0),
                     p1_plo.eq(p0_mp[:16] * d.c_stride[:16]),
                     p1_phi.eq(p0_mp[:16] * d.c_stride[16:]),
                     p1_col.eq(col_byte >> wlog << wlog),
                     p1_off.eq(col_byte[:wlog] if wlog else 0)]
        # 2: clamped counts; the product (48 bits, one 32-bit add)
        p2_nv, p2_rows = _reg("p2_nv", range(C + 1)), _reg("p2_rows", range(R + 1))
        p2_prod, p2_col, p2_off = _reg("p2_prod", 48), _reg("p2_col", 19), _reg("p2_off", 8)
        m.d.sync += [p2_nv.eq(Mux(p1_left_n < C, p1_left_n, C)),
                     p2_rows.eq(Mux(p1_left_m < R, p1_left_m, R)),
                     p2_prod.eq(Cat(p1_plo[:16], p1_plo[16:] + p1_phi)),
                     p2_col.eq(p1_col), p2_off.eq(p1_off)]
        # 3: words a row; offset = product + column, low 32 bits (with carry)
        p3_words_m1 = _reg("p3_words_m1", range(max(2, words_per_row)))
        p3_lo, p3_hi = _reg("p3_lo", 33), _reg("p3_hi", 16)
        # this phase's rows of those inside: rows r = first (mod P) below p2_rows, ``first``
        # the tile's first row here (the phase, or rotating its register down the stages)
        first = p2_ph if rotate else ph
        p3_rows = _reg("p3_rows", range(RP + 1))
        if pow2 and not rotate:
            m.d.sync += p3_rows.eq((p2_rows + (P - 1 - ph)) >> plog if P > 1 else p2_rows)
        else:                             # a table: R + 1 entries (a LUT6 a bit), P x that
            m.d.sync += p3_rows.eq(Array(Array(phase_rows(n, P, f) for n in range(R + 1))
                                         for f in range(P))[first][p2_rows])
        if rotate:                        # and the tile's rows here, less one
            p3_rp_m1 = _reg("p3_rp_m1", range(RP))
            m.d.sync += p3_rp_m1.eq(Array(phase_rows(R, P, f) - 1 for f in range(P))[p2_ph])
        if row_bytes <= bpw:
            words_m1 = 0
        else:
            words_m1 = ((p2_nv << 2) + bpw - 1 >> wlog) - 1
        m.d.sync += [p3_words_m1.eq(words_m1),
                     p3_lo.eq(p2_prod[:32] + p2_col), p3_hi.eq(p2_prod[32:])]
        # 4: the offset's high bits; 5: + c_addr, low 32 bits (the high bits after it)
        p4_offset = _reg("p4_offset", 49)
        m.d.sync += p4_offset.eq(Cat(p3_lo[:32], p3_hi + p3_lo[32]))
        p5_lo = _reg("p5_lo", 33)
        p5_hi_a, p5_hi_b = _reg("p5_hi_a", 32), _reg("p5_hi_b", 17)
        m.d.sync += [p5_lo.eq(d.c_addr[:32] + p4_offset[:32]),
                     p5_hi_a.eq(d.c_addr[32:64]), p5_hi_b.eq(p4_offset[32:])]
        assert PS == 6
        entry = Signal(qlayout)
        addr = Cat(p5_lo[:32], p5_hi_a + p5_hi_b + p5_lo[32]) if AW > 32 else p5_lo[:32]
        m.d.comb += [                 # the counts, delayed to meet the address at stage 5
            entry.rows_in.eq(delay(m, p3_rows, 2, "q_rows", reset_less=True)),
            entry.n_valid.eq(delay(m, p2_nv, 3, "q_nv", reset_less=True)),
            entry.off.eq(delay(m, p2_off, 3, "q_off", reset_less=True)),
            entry.words_m1.eq(delay(m, p3_words_m1, 2, "q_words_m1", reset_less=True)),
            entry.rows_nz.eq(delay(m, p2_rows > first, 3, "q_rows_nz", reset_less=True)),
            entry.words_one.eq(delay(m, p3_words_m1 == 0, 2, "q_words_one", reset_less=True)),
            entry.addr.eq(addr)]
        if rotate:
            m.d.comb += [entry.rp_m1.eq(delay(m, p3_rp_m1, 2, "q_rp_m1", reset_less=True)),
                         entry.rp_one.eq(delay(m, p3_rp_m1 == 0, 2, "q_rp_one",
                                               reset_less=True))]
        m.d.comb += [wq_cmd.w_data.eq(entry), wq_data.w_data.eq(entry),
                     wq_cmd.w_en.eq(pv[-1]), wq_data.w_en.eq(pv[-1])]
        vars(s).update(in_prep=in_prep)

    def _command_side(self, s):
        """One DMA write command per C row inside the matrix, from the command queue; and
        :attr:`idle`."""
        pow2, qlayout, m, wq_cmd, plog, AW, R = s.pow2, s.qlayout, s.m, s.wq_cmd, s.plog, s.AW, s.R
        d, rotate, RP, wq_data, P, in_prep = s.d, s.rotate, s.RP, s.wq_data, s.P, s.in_prep

        # write commands issued, not yet done (at most the writer's queue and bursts in
        # flight); wr_done registered first, so no path runs from the writer into the count
        outstanding = Signal(16)
        done_q = Signal()
        m.d.sync += done_q.eq(self.wr_done)

        # ---- command side: one DMA write per C row inside the matrix -----------------------
        # The row address in carry-save form: lo (32 bits) + (hi + carry) << 32.
        wc = data.View(qlayout, wq_cmd.r_data)
        wc_row = Signal(range(R + 1))
        wc_lo = _reg("wc_lo", 32)
        wc_hi = _reg("wc_hi", max(1, AW - 32))
        wc_carry = _reg("wc_carry", 1 + plog)
        wc_setup = Signal()           # the row address holds the tile's first row
        cmd_valid = Signal()          # the registered command output holds a command
        cmd = self.wr_cmd.payload
        row_in = wc_row < wc.rows_in
        advance = wc_setup & (~row_in | ~cmd_valid | self.wr_cmd.ready)
        # (the command queue is popped the cycle after its tile's last row, from a register,
        # so that the command handshake is not followed by the queue's counts; that cycle its
        # head is still the old tile and is not used)
        cmd_pop_now = Signal()
        m.d.comb += wq_cmd.r_en.eq(cmd_pop_now)
        m.d.sync += cmd_pop_now.eq(0)
        with m.If(wq_cmd.r_rdy & ~wc_setup & ~cmd_pop_now):
            m.d.sync += [wc_lo.eq(wc.addr[:32]), wc_carry.eq(0), wc_setup.eq(1),
                         wc_row.eq(0)]
            if AW > 32:
                m.d.sync += wc_hi.eq(wc.addr[32:])
        if pow2:
            step = d.c_stride << plog
        else:                             # P * c_stride by shift and add (no DSP slice),
            step = _reg("wc_step", 32 + plog)  # registered: c_stride is held while tiles pass
            m.d.sync += step.eq(sum(d.c_stride << i for i in range(P.bit_length())
                                    if P >> i & 1))
        with m.If(advance):
            nxt = wc_lo + step                                     # 33 + plog bits
            m.d.sync += [wc_row.eq(wc_row + 1), wc_lo.eq(nxt[:32]), wc_carry.eq(nxt[32:])]
            if AW > 32:
                m.d.sync += wc_hi.eq(wc_hi + wc_carry)
            with m.If(wc_row == (wc.rp_m1 if rotate else RP - 1)):
                m.d.sync += [cmd_pop_now.eq(1), wc_setup.eq(0)]
        # the registered command output (the carry resolved here)
        with m.If(self.wr_cmd.ready | ~cmd_valid):
            m.d.sync += cmd_valid.eq(advance & row_in)
            with m.If(advance & row_in):
                m.d.sync += [cmd.addr.eq(Cat(wc_lo, wc_hi + wc_carry) if AW > 32 else wc_lo),
                             cmd.beats.eq(wc.words_m1 + 1)]
        m.d.comb += self.wr_cmd.valid.eq(cmd_valid)
        m.d.sync += outstanding.eq(outstanding + (self.wr_cmd.valid & self.wr_cmd.ready)
                                   - done_q)
        m.d.comb += self.idle.eq((in_prep == 0) & wq_cmd.empty & wq_data.empty
                                 & ~wc_setup & ~cmd_valid & (outstanding == 0))

    def _data_side(self, s):
        """The C rows, cut into words with strobes, from the data queue."""
        rotate, qlayout, row_bytes, bpw = s.rotate, s.qlayout, s.row_bytes, s.bpw
        wq_data, C, m, RP, words_per_row, wlog = s.wq_data, s.C, s.m, s.RP, s.words_per_row, s.wlog

        # ---- data side: the C rows, cut into words ------------------------------------------
        wd = data.View(qlayout, wq_data.r_data)
        wd_row = Signal(range(max(2, RP)))
        wd_word = Signal(range(max(2, words_per_row)))
        orow = self.i_stream.payload
        row_bits = Signal(32 * C)
        m.d.comb += row_bits.eq(orow.data.as_value())
        n_valid = wd.n_valid
        wdata = self.wr_data.payload
        if row_bytes >= bpw:
            chunks = [row_bits[8 * bpw * w:8 * bpw * (w + 1)] for w in range(words_per_row)]
            for t in range(bpw):
                m.d.comb += wdata.strb[t].eq(
                    ((Cat(Const(t, wlog), wd_word) if wlog else wd_word) >> 2) < n_valid)
        else:
            off = wd.off
            m.d.comb += wdata.data.eq(row_bits << (off * 8))
            row_strb = Cat(*[(c < n_valid).replicate(4) for c in range(C)])
            m.d.comb += wdata.strb.eq(row_strb << off)
        # "this row is inside the matrix" and "this word ends the row" from registers: for a
        # tile's first row and a row's first word the queue entry's flags, else registers
        # set as the previous row or word went, so that no compare with the queue head lies
        # before the handshakes
        tile_start = Signal(init=1)
        row_start = Signal(init=1)
        wd_in_r = Signal()
        row_end_r = Signal()
        wd_in = Mux(tile_start, wd.rows_nz, wd_in_r)
        row_end = Mux(row_start, wd.words_one, row_end_r)
        if rotate:                        # "this row is the tile's last here", the same way
            wd_last_r = Signal()
            wd_last = Mux(tile_start, wd.rp_one, wd_last_r)
        else:
            wd_last = wd_row == RP - 1
        shake = self.wr_data.valid & self.wr_data.ready
        wd_word_next = Mux(row_end, 0, wd_word + 1)       # (the copies below take it too)
        if row_bytes >= bpw:
            # the word select again, in a register per select_bits() bits of the word
            # (FDRE instances with ``primitive``), each taking the value wd_word takes: after
            # a reset they agree again a cycle later, before the queue (reset with them) can
            # give a word (one select for a whole 512-bit word would drive a thousand LUTs)
            lanes = -(-8 * bpw // select_bits(8 * bpw, words_per_row))
            step = -(-8 * bpw // lanes)
            sels = register_copies(m, Mux(shake, wd_word_next, wd_word),
                                   lanes, primitive=self.primitive, name="wd_word_copy")
            for q, sel in enumerate(sels):
                m.d.comb += wdata.data[q * step:(q + 1) * step].eq(
                    Array(c[q * step:(q + 1) * step] for c in chunks)[sel])
        m.d.comb += [
            self.wr_data.valid.eq(wq_data.r_rdy & self.i_stream.valid & wd_in),
            self.i_stream.ready.eq(wq_data.r_rdy & (~wd_in | (self.wr_data.ready & row_end))),
        ]
        with m.If(shake):
            m.d.sync += [wd_word.eq(wd_word_next), row_start.eq(row_end),
                         row_end_r.eq(wd_word + 1 == wd.words_m1)]
        with m.If(self.i_stream.valid & self.i_stream.ready):
            m.d.sync += [wd_row.eq(wd_row + 1), tile_start.eq(0),
                         wd_in_r.eq(wd_row + 1 < wd.rows_in)]
            if rotate:
                m.d.sync += wd_last_r.eq(wd_row + 1 == wd.rp_m1)
            with m.If(wd_last):
                m.d.comb += wq_data.r_en.eq(1)
                m.d.sync += [wd_row.eq(0), tile_start.eq(1)]



class WriteBackPorts(wiring.Component):
    """C tiles written through ``ports`` DMA writers at once, one :class:`WriteBack` per
    phase of the rows.

    The datapath's rows are dealt in turn, row ``i`` of its stream to phase ``i % ports`` with
    no break between tiles, each into a :class:`rtl.pipe.RegisterSlice` that holds it while its
    write-back cuts it, so the next phase's row passes meanwhile. Every job goes to every
    write-back (a fork: each takes it when it has room). Each phase has its own write commands
    and words for its own writer and AXI port. The numpy model is
    :func:`sim.models.engine.write_back` per phase.

    Parameters
    ----------
    rows, cols, data_width, addr_width, queue, conv :
        As :class:`WriteBack`.
    ports : int
        Write-backs (and writers): 2 to ``rows``. Where ``ports`` does not divide ``rows``
        the tiles' first rows rotate over the phases (:func:`tile_phase`), so that each phase
        takes every ``ports``-th row of the stream and every port writes at the same pace.
    part_resets : bool
        Give :attr:`part_resets`: each write-back's (and its row slice's) only reset
        (:func:`rtl._util.own_reset`), instead of the domain's: the engine gives each its
        own registered copy, so that no one reset net reaches every write-back.

    Attributes
    ----------
    jobs, i_stream, desc, idle :
        As :class:`WriteBack`.
    wr_cmd, wr_data, wr_done :
        As :class:`WriteBack`'s, an array of ``ports``.
    part_resets : In(ports)
        With ``part_resets``: write-back ``p``'s reset, bit ``p``.

    Latency
    -------
    A row reaches its write-back ``RegisterSlice.LATENCY`` cycles after it is taken;
    otherwise as :class:`WriteBack`.

    Throughput
    ----------
    ``ports`` words a cycle.
    """

    def __init__(self, rows: int = 8, cols: int = 8, *, data_width: int = 128,
                 addr_width: int = 32, queue: int = 16, ports: int = 2,
                 primitive: bool = False, part_resets: bool = False, conv: bool = False):
        if not isinstance(ports, int) or isinstance(ports, bool) or not 2 <= ports <= rows:
            raise ValueError(f"ports must be 2 .. rows ({rows}), not {ports!r}")
        self.parts = [WriteBack(rows, cols, data_width=data_width, addr_width=addr_width,
                                queue=queue, phase=p, ports=ports, primitive=primitive,
                                conv=conv)
                      for p in range(ports)]
        self.rows, self.cols, self.ports = rows, cols, ports
        super().__init__({
            "jobs": In(stream.Signature(write_job_layout(conv))),
            "i_stream": In(stream.Signature(rescale_output_layout(cols))),
            "desc": In(descriptor_layout()),
            "wr_cmd": Out(stream.Signature(dma_command_layout(addr_width))).array(ports),
            "wr_data": Out(stream.Signature(dma_write_layout(data_width))).array(ports),
            "wr_done": In(1).array(ports),
            "idle": Out(1),
            **({"part_resets": In(ports)} if part_resets else {}),
        })
        self.has_part_resets = bool(part_resets)

    def elaborate(self, platform):
        m = Module()
        P = self.ports
        jobs = self.jobs
        taken = Signal(P)                 # write-backs that took the job on offer
        turn = Signal(range(P))           # the phase of the next row
        rows_in = []
        for p, wb in enumerate(self.parts):
            row = RegisterSlice(rescale_output_layout(self.cols), slice_bits=SLICE_BITS)
            if self.has_part_resets:      # the write-back and its row slice, reset together
                phase = Module()
                phase.submodules.wb, phase.submodules.row = wb, row
                m.submodules[f"phase{p}"] = own_reset(m, f"rst_phase{p}", phase,
                                                      self.part_resets[p])
            else:
                m.submodules[f"wb{p}"], m.submodules[f"row{p}"] = wb, row
            rows_in.append(row.i_stream)
            wiring.connect(m, row.o_stream, wb.i_stream)
            wiring.connect(m, wb.wr_cmd, wiring.flipped(self.wr_cmd[p]))
            wiring.connect(m, wb.wr_data, wiring.flipped(self.wr_data[p]))
            m.d.comb += [wb.wr_done.eq(self.wr_done[p]), wb.desc.eq(self.desc),
                         wb.jobs.payload.eq(jobs.payload),
                         wb.jobs.valid.eq(jobs.valid & ~taken[p]),
                         row.i_stream.payload.eq(self.i_stream.payload),
                         row.i_stream.valid.eq(self.i_stream.valid & (turn == p))]
        # the job fork: taken by all once each has (or now does)
        got = Cat(*(taken[p] | wb.jobs.ready for p, wb in enumerate(self.parts)))
        m.d.comb += jobs.ready.eq(got.all())
        with m.If(jobs.valid):
            m.d.sync += taken.eq(Mux(jobs.ready, 0, got))
        # the rows dealt in turn
        m.d.comb += self.i_stream.ready.eq(Cat(*(r.ready for r in rows_in)).bit_select(turn, 1))
        with m.If(self.i_stream.valid & self.i_stream.ready):
            if P & (P - 1):
                m.d.sync += turn.eq(Mux(turn == P - 1, 0, turn + 1))
            else:
                m.d.sync += turn.eq(turn + 1)
        m.d.comb += self.idle.eq(Cat(*(wb.idle for wb in self.parts)).all())
        return m
