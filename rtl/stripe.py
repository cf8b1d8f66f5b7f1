"""One operand over two, three or four read ports: load jobs striped by row, and their
vectors interleaved."""

from amaranth import Array, Cat, Const, Module, Mux, Signal, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from firmware.spec.regmap import STRIPE_MIN_WORDS

from ._util import carry_select_add
from .fifo import Fifo
from .loader import load_job_layout

__all__ = ["LoadStriper", "VectorInterleave", "interleave_job_layout", "STRIPE_MIN_WORDS",
           "STRIPE_WAYS", "div3"]

#: The ways an operand's rows may be striped over (``Accelerator(read_ports=3)``: 2,
#: ``read_ports=4``: 3, ``read_ports=5``: 4).
STRIPE_WAYS = (2, 3, 4)


def _check_ways(ways) -> int:
    if ways not in STRIPE_WAYS or isinstance(ways, bool):
        raise ValueError(f"ways must be 2, 3 or 4, not {ways!r}")
    return ways


def div3(x, width: int = 17):
    """``(x // 3, x % 3)`` of an unsigned ``width``-bit value (at most 18): the quotient as a
    product by ``2**(width+2) // 3 + 1`` shifted right (exact below ``2**width``, checked for
    every 17- and 18-bit value by ``tests/test_stripe.py``), the remainder from the low two
    bits of ``x - 3 * q``. Combinational; a DSP slice or a constant multiplier."""
    shift = width + 2
    q = (x * ((1 << shift) // 3 + 1)) >> shift
    return q[:width], (x[:2] - (q[:2] + (q[:2] << 1)))[:2]


def interleave_job_layout() -> data.StructLayout:
    """What :class:`VectorInterleave` needs of one load job: its rows read (``nrows``), its
    zero rows after them (``nzero``), the vectors of a row (``nbeats``) and whether its rows
    are dealt to the gearboxes in turn (``striped``; else all come from the first)."""
    return data.StructLayout({"nrows": unsigned(17), "nzero": unsigned(17),
                              "nbeats": unsigned(16), "striped": 1})


class LoadStriper(wiring.Component):
    """Deals a load job's rows to ``ways`` load sequencers in turn.

    A job of ``rows >= ways`` rows of ``nwords >= STRIPE_MIN_WORDS`` words whose stride times
    ``ways`` fits 32 bits is *striped*: :attr:`o_job0` gets rows 0, S, 2S, ... (``S`` =
    ``ways``) and the job's zero rows, :attr:`o_job1` rows 1, S + 1, ..., each as a job of
    ``ceil((rows - w) / S)`` rows at ``S`` times the stride. Each first row's address stays
    ``base + (row0 + w) * stride + col``: with ``row0 + w = S q + r``, the way's job has
    ``row0 = q`` and ``base + r * stride``. Any other job goes whole to :attr:`o_job0`.
    Either way :attr:`o_merge` gets the job's :func:`interleave_job_layout` entry. The numpy
    model is :func:`sim.models.engine.stripe`.

    Attributes
    ----------
    i_stream : In(stream.Signature(load_job_layout(tag_width)))
    o_job0, o_job1 (, o_job2, o_job3) : Out(stream.Signature(load_job_layout(tag_width)))
    o_merge : Out(stream.Signature(interleave_job_layout()))

    Latency
    -------
    The outputs are registers: ``LATENCY`` cycles from a job to its outputs (1 with two ways;
    3 with three or four: the job registered (with four, its stride times three beside it),
    then ``row0`` and ``rows`` divided by the ways -- :func:`div3`, or a shift -- and the
    base plus 0 to ``ways - 1`` strides into registers, then the outputs, which only select
    among them).

    Throughput
    ----------
    Two ways: a job taken when all outputs are empty (one every two cycles at most). Three
    or four ways: the next job is taken and divided while the outputs wait for the load
    sequencers.
    """

    def __init__(self, tag_width: int = 1, ways: int = 2):
        self.tag_width = tag_width
        self.ways = _check_ways(ways)
        self.LATENCY = 1 if ways == 2 else 3
        layout = load_job_layout(tag_width)
        super().__init__({
            "i_stream": In(stream.Signature(layout)),
            **{f"o_job{w}": Out(stream.Signature(layout)) for w in range(ways)},
            "o_merge": Out(stream.Signature(interleave_job_layout())),
        })

    @property
    def o_jobs(self) -> list:
        """:attr:`o_job0`, :attr:`o_job1` ..., one per way."""
        return [getattr(self, f"o_job{w}") for w in range(self.ways)]

    def elaborate(self, platform):
        m = Module()
        S = self.ways
        outs = (*self.o_jobs, self.o_merge)
        busy = Signal()
        m.d.comb += busy.eq(Cat(o.valid for o in outs).any())
        for o in outs:
            with m.If(o.ready):
                m.d.sync += o.valid.eq(0)
        fire = Signal()                      # the outputs take the next job this cycle
        stripe = Signal()                    # the job is dealt to the ways
        if S == 2:
            job = self.i_stream.payload
            m.d.comb += [self.i_stream.ready.eq(~busy), fire.eq(self.i_stream.valid & ~busy),
                         stripe.eq((job.rows >= S) & (job.nwords >= STRIPE_MIN_WORDS)
                                   & ~job.stride[31])]
            q0, r0, nq, nr = job.row0 >> 1, job.row0[0], job.rows >> 1, job.rows[0]
            q0p1, nqp1 = q0 + 1, nq + 1
            stride_s = job.stride << 1
            # the way's first row is r rows into the base: base + r * stride
            bases = Array([job.base, carry_select_add(job.base, job.stride, 64)])
        else:
            # The job is registered (held; with four ways its stride times three beside it),
            # then divided into registers: row0 and rows by the ways, the ways times its
            # stride, whether it is striped, and its base plus 0 to ways - 1 strides. The
            # outputs then only select and increment (no compare or 64-bit add after the
            # division's product).
            # (data registers without reset: only the valid flags need one, and the part's
            # reset copy would otherwise drive a thousand flip-flops)
            layout = load_job_layout(self.tag_width)
            held = Signal(layout, reset_less=True)
            job = Signal(layout, reset_less=True)
            h_valid, d_valid = Signal(), Signal()
            q0, nq, q0p1, nqp1 = (Signal(17, name=n, reset_less=True)
                                  for n in ("q0", "nq", "q0p1", "nqp1"))
            r0, nr = Signal(2, reset_less=True), Signal(2, reset_less=True)
            stride_s = Signal(32, reset_less=True)
            base_r = [Signal(64, name=f"base_r{r}", reset_less=True) for r in range(S)]
            bases = Array(base_r)
            advance = Signal()
            m.d.comb += [fire.eq(d_valid & ~busy),
                         advance.eq(h_valid & (~d_valid | fire)),
                         self.i_stream.ready.eq(~h_valid | advance)]
            with m.If(self.i_stream.valid & self.i_stream.ready):
                m.d.sync += [held.eq(self.i_stream.payload), h_valid.eq(1)]
                if S == 4:
                    thrice = Signal(34, reset_less=True)     # the held stride * 3
                    pay = self.i_stream.payload
                    m.d.sync += thrice.eq(carry_select_add(Cat(pay.stride, Const(0, 2)),
                                                           Cat(Const(0, 1), pay.stride,
                                                               Const(0, 1)), 34))
            with m.Elif(advance):
                m.d.sync += h_valid.eq(0)
            with m.If(advance):
                if S == 3:
                    (hq0, hr0), (hnq, hnr) = div3(held.row0), div3(held.rows)
                else:
                    (hq0, hr0), (hnq, hnr) = ((held.row0 >> 2, held.row0[:2]),
                                              (held.rows >> 2, held.rows[:2]))
                twice = held.stride << 1
                # (three: the stride plus twice it; four: four times it)
                times = (carry_select_add(held.stride, twice, 32) if S == 3
                         else held.stride << 2)
                m.d.sync += [job.eq(held), d_valid.eq(1), q0.eq(hq0), r0.eq(hr0),
                             nq.eq(hnq), nr.eq(hnr),
                             # the quotients plus one, for the ways whose first row wraps
                             # (and those that get one row more)
                             q0p1.eq(carry_select_add(hq0, 1, 17)),
                             nqp1.eq(carry_select_add(hnq, 1, 17)),
                             stride_s.eq(times),
                             stripe.eq((held.rows >= S) & (held.nwords >= STRIPE_MIN_WORDS)
                                       & (held.stride <= (2**32 - 1) // S)),
                             base_r[0].eq(held.base),
                             base_r[1].eq(carry_select_add(held.base, held.stride, 64)),
                             base_r[2].eq(carry_select_add(held.base, twice, 64)),
                             *([base_r[3].eq(carry_select_add(held.base, thrice, 64))]
                               if S == 4 else [])]
            with m.Elif(fire):
                m.d.sync += d_valid.eq(0)
        # each output's payload from a register without reset (valid has one)
        pays = [Signal(o.payload.shape(), name=f"pay{w}", reset_less=True)
                for w, o in enumerate(self.o_jobs)]
        merge = Signal(self.o_merge.payload.shape(), reset_less=True)
        m.d.comb += [self.o_merge.payload.eq(merge),
                     *(o.payload.eq(p) for o, p in zip(self.o_jobs, pays, strict=True))]
        with m.If(fire):
            m.d.sync += [pays[0].eq(job), self.o_job0.valid.eq(1),
                         self.o_merge.valid.eq(1),
                         merge.nrows.eq(job.rows), merge.nzero.eq(job.nzero),
                         merge.nbeats.eq(job.nbeats), merge.striped.eq(stripe)]
            for w in range(1, S):
                m.d.sync += pays[w].eq(job)
            with m.If(stripe):
                # row0 + w = S * (q0 + wrap) + r: the way's first row, and r strides into
                # the base
                for w, (o, pay) in enumerate(zip(self.o_jobs, pays, strict=True)):
                    t = Signal(range(2 * S), name=f"t{w}")
                    wrap = Signal(name=f"wrap{w}")
                    m.d.comb += [t.eq(r0 + w), wrap.eq(t >= S)]
                    m.d.sync += [
                        pay.base.eq(bases[Mux(wrap, t - S, t)]),
                        pay.row0.eq(Mux(wrap, q0p1, q0)), pay.stride.eq(stride_s),
                        # (a way beyond the remainder's range never has a row more: the
                        # second of two ways, whose compare with a 1-bit remainder is constant)
                        pay.rows.eq(Mux(nr > w, nqp1, nq) if w < (1 << len(nr)) - 1 else nq),
                        pay.nzero.eq(job.nzero if w == 0 else 0),
                        o.valid.eq(1)]
        return m


class VectorInterleave(wiring.Component):
    """Puts ``ways`` gearboxes' vectors back in the order of the jobs they were striped from.

    For each entry on :attr:`jobs` (:func:`interleave_job_layout`): for each of its
    ``nrows`` rows, ``nbeats`` vectors from input ``row mod ways`` (:attr:`i_stream0`,
    :attr:`i_stream1` ...) of a striped job, or from :attr:`i_stream0` for every row of a
    job not striped; then ``nzero * nbeats`` vectors from :attr:`i_stream0`. The numpy model
    is :func:`sim.models.engine.interleave`.

    Attributes
    ----------
    jobs : In(stream.Signature(interleave_job_layout()))
    i_stream0, i_stream1 (, i_stream2, i_stream3) : In(stream.Signature(shape))
    o_stream : Out(stream.Signature(shape))

    Latency
    -------
    Combinational from an input vector to :attr:`o_stream` (a ``ways``:1 multiplexer;
    ``ready`` follows the chosen input's). A job's first vector passes the cycle after its
    entry reaches the queue's head.

    Throughput
    ----------
    One vector a cycle; one idle cycle between jobs (the queue is popped from a register).
    """

    def __init__(self, shape, depth: int = 8, ways: int = 2):
        self.depth = depth
        self.ways = _check_ways(ways)
        super().__init__({
            "jobs": In(stream.Signature(interleave_job_layout())),
            **{f"i_stream{w}": In(stream.Signature(shape)) for w in range(ways)},
            "o_stream": Out(stream.Signature(shape)),
        })

    @property
    def i_streams(self) -> list:
        """:attr:`i_stream0`, :attr:`i_stream1` ..., one per way."""
        return [getattr(self, f"i_stream{w}") for w in range(self.ways)]

    def elaborate(self, platform):
        m = Module()
        S = self.ways
        # The queue holds what the sequencing compares with, precomputed: the row and beat
        # indices of a job's last row read, its last row and a row's last vector.
        layout = data.StructLayout({"nrows_m1": unsigned(17), "rows_m1": unsigned(18),
                                    "nbeats_m1": unsigned(16), "striped": 1})
        m.submodules.queue = queue = Fifo(width=layout.size, depth=self.depth)
        entry = data.View(layout, queue.w_data)
        job = self.jobs.payload
        m.d.comb += [entry.nrows_m1.eq(job.nrows - 1), entry.rows_m1.eq(job.nrows + job.nzero - 1),
                     entry.nbeats_m1.eq(job.nbeats - 1), entry.striped.eq(job.striped),
                     queue.w_en.eq(self.jobs.valid), self.jobs.ready.eq(queue.w_rdy)]
        head = data.View(layout, queue.r_data)
        beat = Signal(16)
        row = Signal(18)
        phase = Signal(range(S))   # row mod ways
        src = Signal(range(S))     # the input this row's vectors come from
        pop = Signal()             # the head's job ended last cycle
        ok = Signal()
        m.d.comb += ok.eq(queue.r_rdy & ~pop)
        ins, out = self.i_streams, self.o_stream
        m.d.comb += [out.valid.eq(ok & Array(i.valid for i in ins)[src]),
                     out.payload.eq(Array(i.payload for i in ins)[src])]
        for w, i in enumerate(ins):
            m.d.comb += i.ready.eq(ok & (src == w) & out.ready)
        last_beat = beat == head.nbeats_m1
        last_row = row == head.rows_m1
        with m.If(out.valid & out.ready):
            m.d.sync += beat.eq(Mux(last_beat, 0, beat + 1))
            with m.If(last_beat):
                nxt = Mux(last_row | (phase == S - 1), 0, phase + 1)
                m.d.sync += [row.eq(Mux(last_row, 0, row + 1)), phase.eq(nxt),
                             # the next row is a striped job's and read (row < nrows)
                             src.eq(Mux(~last_row & head.striped & (row < head.nrows_m1),
                                        nxt, 0))]
        m.d.sync += pop.eq(out.valid & out.ready & last_beat & last_row)
        m.d.comb += queue.r_en.eq(pop)
        return m
