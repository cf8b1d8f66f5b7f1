"""The write-back epilogue's core: float32 rows -> BFP8 tile blocks, and the ReLU mask."""

from amaranth import Array, Cat, Const, Module, Mux, Signal, signed, unsigned
from amaranth.lib import data, memory, stream, wiring
from amaranth.lib.wiring import In, Out

from ._util import FIFO_SLICE_BITS, counter, delay
from .fifo import Fifo
from .xilinx import lane_copies

__all__ = ["ReluMask", "TileQuantizer", "quantizer_input_layout", "quantizer_job_layout",
           "quantizer_output_layout", "relu_input_layout", "relu_output_layout"]


def _check_cols(cols):
    if not isinstance(cols, int) or isinstance(cols, bool) or cols < 1:
        raise ValueError(f"cols must be a positive integer, not {cols!r}")


def _geometry(cols: int, block: int):
    """``(segs, blocks, width)``: beats a block-row's matrix row spans, blocks a beat
    touches, columns of a unit (:class:`TileQuantizer`)."""
    segs = max(1, block // cols)
    return segs, max(1, cols // block), cols * segs


def quantizer_job_layout(block: int, width: int) -> data.StructLayout:
    """Payload of :attr:`TileQuantizer.jobs`: one unit (a block-row of ``block`` rows and
    ``width`` columns).

    ``rows`` (1 .. ``block``) rows arrive; rows from ``rows_valid`` and columns from
    ``cols_valid`` on lie beyond the matrix: they count as 0 for the block maxima and leave
    as zero mantissas. ``stochastic`` takes each lane's ``r`` from
    :attr:`TileQuantizer.r_stream`; otherwise ``r = 2**15`` (round half up).
    """
    return data.StructLayout({
        "rows": range(block + 1),
        "rows_valid": range(block + 1),
        "cols_valid": range(width + 1),
        "stochastic": 1,
    })


def quantizer_input_layout(cols: int, block: int = 32) -> data.StructLayout:
    """Payload of :attr:`TileQuantizer.i_stream`: ``cols`` float32 words (bit patterns) of
    row ``row`` of the unit, columns ``seg * cols`` onwards."""
    segs, _, _ = _geometry(cols, block)
    return data.StructLayout({
        "data": data.ArrayLayout(unsigned(32), cols),
        "row": range(block),
        "seg": range(segs),
    })


def quantizer_output_layout(cols: int, block: int = 32) -> data.StructLayout:
    """Payload of :attr:`TileQuantizer.o_stream`: a row's int8 mantissas and the exponents
    of the blocks the beat lies in (block ``b`` of the beat: lanes ``b * block`` onwards)."""
    segs, blocks, _ = _geometry(cols, block)
    return data.StructLayout({
        "q": data.ArrayLayout(signed(8), cols),
        "exp": data.ArrayLayout(signed(8), blocks),
        "row": range(block),
        "seg": range(segs),
        "nonfinite": 1,   # a block of the beat held inf or NaN (written as zeros, exp 0)
        "last": 1,        # the unit's last beat
    })


class TileQuantizer(wiring.Component):
    """Quantises float32 rows to BFP8 square tile blocks: int8 mantissas, an exponent a block.

    The stream is cut into *units*: a block-row of ``block`` rows (T) and ``width = max(cols,
    T)`` columns, i.e. ``cols // T`` whole blocks side by side, or one block whose rows span
    ``T // cols`` beats (*segments*). A job on :attr:`jobs` announces a unit; its ``rows *
    segs`` beats then arrive on :attr:`i_stream`, each tagged with its row and segment, in
    any order (for example in tiles of 8, 16 or 32 rows, a column strip at a time: each
    (row, segment) once). The unit is written to block RAM while the largest magnitude of
    each block is found (float32 magnitudes order as integers, so the largest biased
    exponent field, and whether any bit is set, decide the exponent). Once the unit is in,
    its rows leave on :attr:`o_stream` in row-major order (row 0 segment 0, row 0 segment 1,
    row 1 ...), ``rows * segs`` beats, ``last`` on the final one, with the exponents of the
    beat's blocks on every beat. Each element is quantised as written down in the number
    format's integer form::

        exp = max(floor(log2(maxabs)) - 6, -128)   (0 for an all-zero block)
        Y = floor(v * 2**(16 - exp));  q = clamp((Y + r) >> 16, -127, 127)

    Elements beyond ``rows_valid`` / ``cols_valid`` count as zero for the maximum and leave
    as 0. A block holding inf or NaN (within the valid region) leaves as zeros with exponent
    0 and ``nonfinite`` set. The numpy model of record is
    :func:`sim.models.bfp.quantize_tiles` (the test reassembles whole matrices from units).

    The 16-bit ``r`` of each lane comes from :attr:`r_stream` for stochastic jobs: one beat
    per *output* beat, in output order, lane ``l`` of it for column ``seg * cols + l`` of
    the output beat's row (so element (``m0 + row``, ``n0 + seg * cols + l``) of the
    matrix, where the unit starts at (``m0``, ``n0``)). It is consumed as the beat is read
    out of the block RAM; jobs with ``stochastic = 0`` consume none.

    Parameters
    ----------
    cols : int
        Lanes a beat (the datapath's columns): a multiple of ``block`` or a divisor of it.
    block : int
        T, the blocks' side: a power of two from 4 to 64.
    slots : int
        Units the block RAM holds (a power of two, at least 2): one fills while others
        wait or drain. With 2, a unit waits the fill pipeline's latency for the slot two
        units back, so 4 (the default, the same block RAMs while ``slots * T * segs <=
        512``) keep the stream at full rate.
    out_depth : int
        Entries of the output FIFO (at least 8 for full rate). The drain pipeline never
        stalls: a beat is read from the block RAM only while the FIFO has room for every beat
        in flight (credits), so no clock enable reaches its registers.
    primitive : bool
        The copies of the stochastic flag that reach the lanes (one per
        :data:`LANES_PER_COPY`) as ``FDRE`` instances, so that synthesis keeps them apart
        (:func:`rtl.xilinx.register_copies`).

    Attributes
    ----------
    jobs : In(stream.Signature(quantizer_job_layout(block, width)))
        ``rows`` from 1 to ``block``.
    i_stream : In(stream.Signature(quantizer_input_layout(cols, block)))
    r_stream : In(stream.Signature(data.ArrayLayout(unsigned(16), cols)))
    o_stream : Out(stream.Signature(quantizer_output_layout(cols, block)))
    idle : Out(1)
        No unit is held and no beat is in flight.

    Latency
    -------
    A unit's first beat is on :attr:`o_stream` ``fill_latency + DRAIN_LATENCY`` cycles after
    its last input beat is taken (when no earlier unit is draining): ``fill_latency`` (the
    input register, the lane maxima, one register a level of the maximum tree over
    ``min(cols, block)`` lanes, the running maxima, the exponents) and
    :data:`DRAIN_LATENCY` (the read-out, the block RAM and its output register, the
    exponent arithmetic, the shift, the rounding add, the output FIFO).

    Throughput
    ----------
    One beat a cycle in and out, units back to back, while the output is taken; the input
    waits only while every slot is full.
    """

    #: Cycles from a slot's exponents being ready to its first beat on :attr:`o_stream`.
    DRAIN_LATENCY = 8
    #: Lanes one copy of the drain's stochastic flag reaches (16 loads a lane).
    LANES_PER_COPY = 16

    def __init__(self, cols: int, block: int = 32, *, slots: int = 4, out_depth: int = 16,
                 primitive: bool = False):
        _check_cols(cols)
        if (not isinstance(block, int) or isinstance(block, bool) or not 4 <= block <= 64
                or block & (block - 1)):
            raise ValueError(f"block must be a power of two from 4 to 64, not {block!r}")
        if cols % block and block % cols:
            raise ValueError(f"cols must be a multiple or a divisor of block ({block}), "
                             f"not {cols!r}")
        if (not isinstance(slots, int) or isinstance(slots, bool) or slots < 2
                or slots & (slots - 1)):
            raise ValueError(f"slots must be a power of two of at least 2, not {slots!r}")
        if not isinstance(out_depth, int) or isinstance(out_depth, bool) or out_depth < 8:
            raise ValueError(f"out_depth must be an integer of at least 8, not {out_depth!r}")
        self.cols, self.block, self.slots, self.out_depth = cols, block, slots, out_depth
        self.primitive = bool(primitive)
        self.segs, self.blocks, self.width = _geometry(cols, block)
        #: lanes one maximum tree reduces (a block's share of a beat)
        self.tree_lanes = min(cols, block)
        self.tree_levels = (self.tree_lanes - 1).bit_length()
        #: cycles from the last input beat taken to the unit's exponents ready
        self.fill_latency = self.tree_levels + 4
        super().__init__({
            "jobs": In(stream.Signature(quantizer_job_layout(block, self.width))),
            "i_stream": In(stream.Signature(quantizer_input_layout(cols, block))),
            "r_stream": In(stream.Signature(data.ArrayLayout(unsigned(16), cols))),
            "o_stream": Out(stream.Signature(quantizer_output_layout(cols, block))),
            "idle": Out(1),
        })

    # ---- helpers ---------------------------------------------------------------------------

    def _lane_block(self, lane: int) -> int:
        return lane // self.block if self.cols >= self.block else 0

    def elaborate(self, platform):
        m = Module()
        C, T, S, B, NS = self.cols, self.block, self.segs, self.blocks, self.slots
        mem = m.submodules.units = memory.Memory(
            shape=data.ArrayLayout(unsigned(32), C), depth=NS * T * S, init=[])
        wr = mem.write_port()
        rd = mem.read_port()

        # Per slot: its job (taken by the fill side, read by the drain side) and, once the
        # unit is in, each block's exponent, nonfinite flag and kd = 134 + exp (the right
        # shift of an element of biased exponent field E is kd - E, see the drain).
        s_beats_m1 = [Signal(range(T * S), name=f"slot{s}_beats_m1") for s in range(NS)]
        s_rows_valid = [Signal(range(T + 1), name=f"slot{s}_rows_valid") for s in range(NS)]
        s_cols_valid = [Signal(range(self.width + 1), name=f"slot{s}_cols_valid")
                        for s in range(NS)]
        s_stoch = [Signal(name=f"slot{s}_stochastic") for s in range(NS)]
        s_exp = [[Signal(signed(8), name=f"slot{s}_exp{b}") for b in range(B)]
                 for s in range(NS)]
        s_kd = [[Signal(8, name=f"slot{s}_kd{b}") for b in range(B)] for s in range(NS)]
        s_nonf = [[Signal(name=f"slot{s}_nonfinite{b}") for b in range(B)] for s in range(NS)]
        busy = Signal(NS)    # a job holds the slot (set when taken, cleared when read out)
        full = Signal(NS)    # the slot's unit is in with its exponents (until drained)

        fill_busy = self._fill(m, wr, busy, full, s_beats_m1, s_rows_valid, s_cols_valid,
                               s_stoch, s_exp, s_kd, s_nonf)
        drain_busy = self._drain(m, rd, busy, full, s_beats_m1, s_rows_valid, s_cols_valid,
                                 s_stoch, s_exp, s_kd, s_nonf)
        m.d.comb += self.idle.eq(~busy.any() & ~fill_busy & ~drain_busy)
        return m

    # ---- the fill side: rows -> block RAM, block maxima -> exponents -------------------------

    def _fill(self, m, wr, busy, full, s_beats_m1, s_rows_valid, s_cols_valid, s_stoch,
              s_exp, s_kd, s_nonf):
        C, T, S, B, NS = self.cols, self.block, self.segs, self.blocks, self.slots
        i, jobs = self.i_stream, self.jobs
        filling = Signal()
        wslot = Signal(range(NS))          # the slot being filled (or the next to fill)
        count = Signal(range(T * S))
        beats_m1 = Signal(range(T * S))
        rows_valid = Signal(range(T + 1))
        cols_valid = Signal(range(self.width + 1))

        accept = Signal()
        at_end = Signal()
        m.d.comb += [i.ready.eq(filling), accept.eq(i.valid & filling),
                     at_end.eq(count == beats_m1)]
        done = accept & at_end
        # a job is taken into the next slot when it is free: while idle, or with the current
        # unit's last beat (no gap between units)
        take_slot = Mux(filling, wslot + 1, wslot)[:len(wslot)]
        take = Signal()
        m.d.comb += [jobs.ready.eq((~filling | done) & ~busy.bit_select(take_slot, 1)),
                     take.eq(jobs.valid & jobs.ready)]
        job = jobs.payload
        with m.If(take):
            m.d.sync += [filling.eq(1), count.eq(0),
                         beats_m1.eq(job.rows * S - 1), rows_valid.eq(job.rows_valid),
                         cols_valid.eq(job.cols_valid)]
        with m.Elif(done):
            m.d.sync += filling.eq(0)
        with m.If(accept):
            m.d.sync += count.eq(Mux(at_end, 0, count + 1))
        with m.If(done):
            m.d.sync += wslot.eq(wslot + 1)
        for s in range(NS):
            with m.If(take & (take_slot == s)):
                m.d.sync += [s_beats_m1[s].eq(job.rows * S - 1),
                             s_rows_valid[s].eq(job.rows_valid),
                             s_cols_valid[s].eq(job.cols_valid),
                             s_stoch[s].eq(job.stochastic)]

        # F0: the beat registered, written to the block RAM; which lanes lie in the matrix
        p = i.payload
        f0_valid, f0_first, f0_last = Signal(), Signal(), Signal()
        f0_slot = Signal(range(NS))
        f0_data = Signal(data.ArrayLayout(unsigned(32), C), reset_less=True)
        f0_addr = Signal(len(wr.addr), reset_less=True)
        f0_ok = Signal(C, reset_less=True)
        m.d.sync += [f0_valid.eq(accept), f0_first.eq(count == 0), f0_last.eq(at_end),
                     f0_slot.eq(wslot)]
        row_ok = p.row < rows_valid
        m.d.sync += [f0_data.eq(p.data), f0_addr.eq(Cat(p.seg, p.row, wslot)),
                     f0_ok.eq(Cat(*(row_ok & (p.seg * C + lane < cols_valid)
                                    for lane in range(C))))]
        m.d.comb += [wr.addr.eq(f0_addr), wr.data.eq(f0_data), wr.en.eq(f0_valid)]

        # F1: per lane, the exponent field, whether any magnitude bit is set, whether inf/NaN
        # (all 0 outside the matrix)
        f1_e = [Signal(8, name=f"f1_e{lane}", reset_less=True) for lane in range(C)]
        f1_nz = [Signal(name=f"f1_nz{lane}", reset_less=True) for lane in range(C)]
        f1_inf = [Signal(name=f"f1_inf{lane}", reset_less=True) for lane in range(C)]
        for lane in range(C):
            word = f0_data[lane]
            ok = f0_ok[lane]
            m.d.sync += [f1_e[lane].eq(Mux(ok, word[23:31], 0)),
                         f1_nz[lane].eq(ok & word[:31].any()),
                         f1_inf[lane].eq(ok & word[23:31].all())]
        side = Cat(f0_valid, f0_first, f0_last, f0_slot)
        f1_side = Signal.like(side, name="f1_side")
        m.d.sync += f1_side.eq(side)

        # the maximum trees, one register a level
        trees = []
        for b in range(B):
            lanes = range(b * self.tree_lanes, (b + 1) * self.tree_lanes)
            level = [(f1_e[lane], f1_nz[lane], f1_inf[lane]) for lane in lanes]
            depth = 0
            while len(level) > 1:
                nxt = []
                for j in range(0, len(level), 2):
                    (ea, za, ia), (eb, zb, ib) = level[j], level[j + 1]
                    e = Signal(8, name=f"t{b}_l{depth}_e{j // 2}", reset_less=True)
                    z = Signal(name=f"t{b}_l{depth}_nz{j // 2}", reset_less=True)
                    inf = Signal(name=f"t{b}_l{depth}_inf{j // 2}", reset_less=True)
                    m.d.sync += [e.eq(Mux(ea > eb, ea, eb)), z.eq(za | zb), inf.eq(ia | ib)]
                    nxt.append((e, z, inf))
                level = nxt
                depth += 1
            trees.append(level[0])
        t_side = delay(m, f1_side, self.tree_levels, "tree_side")
        t_valid, t_first, t_last = t_side[0], t_side[1], t_side[2]
        t_slot = t_side[3:]

        # the running maxima of the unit
        acc_valid, acc_last = Signal(), Signal()
        acc_slot = Signal(range(NS))
        acc_e = [Signal(8, name=f"acc_e{b}", reset_less=True) for b in range(B)]
        acc_nz = [Signal(name=f"acc_nz{b}", reset_less=True) for b in range(B)]
        acc_inf = [Signal(name=f"acc_inf{b}", reset_less=True) for b in range(B)]
        m.d.sync += [acc_valid.eq(t_valid), acc_last.eq(t_valid & t_last), acc_slot.eq(t_slot)]
        for b, (e, z, inf) in enumerate(trees):
            with m.If(t_valid):
                with m.If(t_first):
                    m.d.sync += [acc_e[b].eq(e), acc_nz[b].eq(z), acc_inf[b].eq(inf)]
                with m.Else():
                    m.d.sync += [acc_e[b].eq(Mux(e > acc_e[b], e, acc_e[b])),
                                 acc_nz[b].eq(acc_nz[b] | z), acc_inf[b].eq(acc_inf[b] | inf)]

        # the exponents: maxabs of field E >= 1 has floor(log2) = E - 127, so exp =
        # max(E - 133, -128); a subnormal maximum (E = 0, a bit set) has floor(log2) <= -127,
        # so exp = -128; an all-zero block 0; inf/NaN 0. kd = 134 + exp.
        for s in range(NS):
            with m.If(acc_last & (acc_slot == s)):
                m.d.sync += full[s].eq(1)
                for b in range(B):
                    e, z, inf = acc_e[b], acc_nz[b], acc_inf[b]
                    small = e < 5
                    m.d.sync += [
                        s_exp[s][b].eq(Mux(inf | ((e == 0) & ~z), 0,
                                           Mux(small, -128, (e - 133)[:8]))),
                        s_kd[s][b].eq(Mux(inf | ((e == 0) & ~z), 134,
                                          Mux(small, 6, e + 1))),
                        s_nonf[s][b].eq(inf),
                    ]
        for s in range(NS):
            with m.If(take & (take_slot == s)):
                m.d.sync += busy[s].eq(1)
        in_fill = Signal()
        tree_valid = [f0_valid, f1_side[0], acc_valid]
        if self.tree_levels:
            tree_valid += [delay(m, f1_side[0], n, f"tv{n}") for n in
                           range(1, self.tree_levels + 1)]
        m.d.comb += in_fill.eq(filling | Cat(*tree_valid).any())
        return in_fill

    # ---- the drain side: block RAM -> quantised rows -----------------------------------------

    def _drain(self, m, rd, busy, full, s_beats_m1, s_rows_valid, s_cols_valid, s_stoch,
               s_exp, s_kd, s_nonf):
        C, T, S, B, NS = self.cols, self.block, self.segs, self.blocks, self.slots
        o, rs = self.o_stream, self.r_stream
        out_layout = quantizer_output_layout(C, T)
        m.submodules.out_fifo = out_fifo = Fifo(width=out_layout.size, depth=self.out_depth,
                                                slice_bits=FIFO_SLICE_BITS)
        popped = Signal()
        m.d.comb += [o.valid.eq(out_fifo.r_rdy), o.payload.eq(out_fifo.r_data),
                     out_fifo.r_en.eq(o.ready), popped.eq(o.valid & o.ready)]

        draining = Signal()
        rslot = Signal(range(NS))
        count = Signal(range(T * S))
        row = Signal(range(T))
        seg = Signal(range(S))
        beats_m1 = Signal(range(T * S))
        rows_valid = Signal(range(T + 1))
        cols_valid = Signal(range(self.width + 1))
        stoch = Signal()
        kd = [Signal(8, name=f"d_kd{b}") for b in range(B)]
        exp = [Signal(signed(8), name=f"d_exp{b}") for b in range(B)]
        nonf = [Signal(name=f"d_nonfinite{b}") for b in range(B)]

        issue = Signal()
        credit_count, room, in_flight = counter(m, "credit", self.out_depth, issue, popped)
        del credit_count
        at_end = Signal()
        m.d.comb += [
            at_end.eq(count == beats_m1),
            rs.ready.eq(draining & room & stoch),
            issue.eq(draining & room & (~stoch | rs.valid)),
            rd.addr.eq(Cat(seg, row, rslot)),
            rd.en.eq(1),
        ]
        next_slot = (rslot + 1)[:len(rslot)]
        load = Signal()
        ld_slot = Mux(draining, next_slot, rslot)[:len(rslot)]
        m.d.comb += load.eq(Mux(draining, issue & at_end, 1) & full.bit_select(ld_slot, 1))
        with m.If(issue):
            m.d.sync += count.eq(count + 1)
            if S > 1:
                m.d.sync += seg.eq(seg + 1)
                with m.If(seg == S - 1):
                    m.d.sync += row.eq(row + 1)
            else:
                m.d.sync += row.eq(row + 1)
            with m.If(at_end):
                m.d.sync += [rslot.eq(next_slot), draining.eq(0)]
        with m.If(load):
            m.d.sync += [draining.eq(1), count.eq(0), row.eq(0), seg.eq(0),
                         beats_m1.eq(Array(s_beats_m1)[ld_slot]),
                         rows_valid.eq(Array(s_rows_valid)[ld_slot]),
                         cols_valid.eq(Array(s_cols_valid)[ld_slot]),
                         stoch.eq(Array(s_stoch)[ld_slot])]
            for b in range(B):
                m.d.sync += [kd[b].eq(Array(s_kd[s][b] for s in range(NS))[ld_slot]),
                             exp[b].eq(Array(s_exp[s][b] for s in range(NS))[ld_slot]),
                             nonf[b].eq(Array(s_nonf[s][b] for s in range(NS))[ld_slot])]
        for s in range(NS):
            with m.If(load & (ld_slot == s)):
                m.d.sync += full[s].eq(0)
            with m.If(issue & at_end & (rslot == s)):
                m.d.sync += busy[s].eq(0)

        # The pipeline (no enable): issue -> the block RAM (m) -> its output register (raw) ->
        # decoded (d) -> shifted (s) -> rounded (a) -> the output FIFO.
        valid_a = delay(m, issue, 5, "drain_valid")
        raw = Signal(data.ArrayLayout(unsigned(32), C), reset_less=True)
        m.d.sync += raw.eq(rd.data)
        # side band to the raw stage (2 cycles after issue)
        row_ok = Signal()
        m.d.comb += row_ok.eq(row < rows_valid)
        x_row_ok = delay(m, row_ok, 2, "x_row_ok", reset_less=True)
        x_seg = delay(m, seg, 2, "x_seg", reset_less=True)
        x_cols_valid = delay(m, cols_valid, 2, "x_cols_valid", reset_less=True)
        x_kd = [delay(m, kd[b], 2, f"x_kd{b}", reset_less=True) for b in range(B)]
        x_nonf = [delay(m, nonf[b], 2, f"x_nonf{b}", reset_less=True) for b in range(B)]
        # r to the shifted stage (4 cycles after issue); 2**15 for round-half-up, chosen a
        # cycle after issue by a copy of the stochastic flag per LANES_PER_COPY lanes
        r_m = Signal(16 * C, reset_less=True)
        m.d.sync += r_m.eq(rs.payload)
        stoch_m = lane_copies(m, stoch, C, self.LANES_PER_COPY, primitive=self.primitive,
                              name="stochastic_lanes")
        r_in = Cat(*(Mux(stoch_m[lane], r_m[16 * lane:16 * (lane + 1)], 1 << 15)
                     for lane in range(C)))
        r_s = delay(m, r_in, 3, "r", reset_less=True)
        # the output beat's fields, to the FIFO's input (5 cycles after issue)
        fields = {"exp": Cat(*exp), "row": row, "seg": seg,
                  "nonfinite": Cat(*nonf).any(), "last": at_end}
        a_fields = {k: delay(m, v, 5, f"a_{k}", reset_less=True) for k, v in fields.items()}

        q_out = []
        for lane in range(C):
            b = self._lane_block(lane)
            word = raw[lane]
            e = word[23:31]
            # d: the signed significand D = +-M with |v| = M * 2**(E - 150) (a subnormal's
            # fraction doubled, E = 0), so v * 2**(16 - exp) = D / 2**k with k = kd - E, in
            # 1 .. 255 inside the matrix (outside, where the lane is zeroed, it may wrap);
            # k clamped at 24 (|D| <= 2**24). -M is ~(M - 1), from the fraction less one.
            d_d = Signal(signed(25), name=f"l{lane}_d_d", reset_less=True)
            d_k = Signal(range(25), name=f"l{lane}_d_k", reset_less=True)
            d_zero = Signal(name=f"l{lane}_d_zero", reset_less=True)
            k = Signal(8, name=f"l{lane}_k")
            m.d.comb += k.eq(x_kd[b] - e)
            frac = word[:23]
            fm1 = Signal(24, name=f"l{lane}_fm1")       # frac - 1; bit 23: frac == 0
            m.d.comb += fm1.eq(Cat(frac, Const(0, 1)) - 1)
            normal = e.any()
            mant = Mux(normal, Cat(frac, 1, 0), Cat(0, frac, 0))
            mant_m1 = Mux(normal, Cat(fm1[:23], ~fm1[23], 0), Cat(1, fm1[:23], fm1[23]))
            col_ok = x_seg * C + lane < x_cols_valid
            m.d.sync += [
                d_d.eq(Mux(word[31], ~mant_m1, mant)),
                d_k.eq(Mux(k >= 24, 24, k[:5])),
                d_zero.eq(~x_row_ok | ~col_ok | x_nonf[b]),
            ]
            # s: Y = floor(D / 2**k), an arithmetic shift
            s_y = Signal(signed(25), name=f"l{lane}_s_y", reset_less=True)
            s_zero = Signal(name=f"l{lane}_s_zero", reset_less=True)
            shifted = d_d
            for j in reversed(range(5)):           # a 2:1 multiplexer a bit of k
                shifted = Mux(d_k[j], shifted >> (1 << j), shifted)
            m.d.sync += [s_y.eq(shifted), s_zero.eq(d_zero)]
            # a: (Y + r) >> 16
            a_q = Signal(signed(10), name=f"l{lane}_a_q", reset_less=True)
            a_zero = Signal(name=f"l{lane}_a_zero", reset_less=True)
            total = Signal(signed(27), name=f"l{lane}_sum")
            m.d.comb += total.eq(r_s[16 * lane:16 * (lane + 1)] + s_y)
            m.d.sync += [a_q.eq(total[16:26].as_signed()), a_zero.eq(s_zero)]
            q_out.append(Mux(a_zero, 0, Mux(a_q > 127, 127, Mux(a_q < -127, -127, a_q[:8]))))

        beat = Signal(out_layout)
        m.d.comb += [beat.q.as_value().eq(Cat(*(q[:8] for q in q_out))),
                     beat.exp.as_value().eq(a_fields["exp"]),
                     beat.row.eq(a_fields["row"]), beat.seg.eq(a_fields["seg"]),
                     beat.nonfinite.eq(a_fields["nonfinite"]), beat.last.eq(a_fields["last"]),
                     out_fifo.w_data.eq(beat), out_fifo.w_en.eq(valid_a)]
        return draining | in_flight


# ---- ReLU and its mask ------------------------------------------------------------------------

def relu_input_layout(cols: int) -> data.StructLayout:
    """Payload of :attr:`ReluMask.i_stream`: ``cols`` float32 words, a stored mask bit a
    lane (bit ``l`` for lane ``l``), and what to apply."""
    return data.StructLayout({
        "data": data.ArrayLayout(unsigned(32), cols),
        "mask_in": cols,
        "relu": 1,       # forward: v if v > 0 else +0.0, and the mask v > 0
        "backward": 1,   # v if mask_in else +0.0 (after relu, when both are set)
        "last": 1,
    })


def relu_output_layout(cols: int) -> data.StructLayout:
    """Payload of :attr:`ReluMask.o_stream`: the words and the mask ``v > 0`` of the input
    (bit ``l`` for lane ``l``, the order of a row's bytes packed LSB first)."""
    return data.StructLayout({
        "data": data.ArrayLayout(unsigned(32), cols),
        "mask": cols,
        "last": 1,
    })


class ReluMask(wiring.Component):
    """ReLU with its 1-bit mask, and the backward pass through a stored mask, on float32 lanes.

    Per lane, in the epilogue's order: ``mask = v > 0`` (false for -0.0, +0.0, NaN and
    negatives); with ``relu``, ``v = v if mask else +0.0``; then with ``backward``,
    ``v = v if mask_in else +0.0``. The output's ``mask`` is ``v > 0`` of the input word
    whatever the flags. The numpy model is :func:`sim.models.bfp.epilogue`.

    Parameters
    ----------
    cols : int
        Lanes.

    Attributes
    ----------
    i_stream : In(stream.Signature(relu_input_layout(cols)))
    o_stream : Out(stream.Signature(relu_output_layout(cols)))

    Latency
    -------
    0 cycles: combinational, from :attr:`i_stream` to :attr:`o_stream` (``ready`` passes
    back unchanged), for the enclosing pipeline to register.

    Throughput
    ----------
    One beat a cycle.
    """

    def __init__(self, cols: int):
        _check_cols(cols)
        self.cols = cols
        super().__init__({
            "i_stream": In(stream.Signature(relu_input_layout(cols))),
            "o_stream": Out(stream.Signature(relu_output_layout(cols))),
        })

    def elaborate(self, platform):
        m = Module()
        i, o = self.i_stream, self.o_stream
        p = i.payload
        m.d.comb += [o.valid.eq(i.valid), i.ready.eq(o.ready), o.payload.last.eq(p.last)]
        for lane in range(self.cols):
            word = p.data[lane]
            nan = word[23:31].all() & word[:23].any()
            positive = Signal(name=f"positive{lane}")
            m.d.comb += positive.eq(~word[31] & word[:31].any() & ~nan)
            keep = (~p.relu | positive) & (~p.backward | p.mask_in[lane])
            m.d.comb += [o.payload.mask[lane].eq(positive),
                         o.payload.data[lane].eq(Mux(keep, word, 0))]
        return m
