"""One operand over two read ports: load jobs striped by row, and their vectors interleaved."""

from amaranth import Module, Mux, Signal, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from firmware.regmap import STRIPE_MIN_WORDS

from ._util import carry_select_add
from .fifo import Fifo
from .loader import load_job_layout

__all__ = ["LoadStriper", "VectorInterleave", "interleave_job_layout", "STRIPE_MIN_WORDS"]

def interleave_job_layout() -> data.StructLayout:
    """What :class:`VectorInterleave` needs of one load job: its rows read (``nrows``), its
    zero rows after them (``nzero``), the vectors of a row (``nbeats``) and whether its rows
    alternate between the two gearboxes (``striped``; else all come from the first)."""
    return data.StructLayout({"nrows": unsigned(17), "nzero": unsigned(17),
                              "nbeats": unsigned(16), "striped": 1})


class LoadStriper(wiring.Component):
    """Splits a load job into its even rows and its odd rows, for two load sequencers.

    A job of ``rows >= 2`` rows of ``nwords >= STRIPE_MIN_WORDS`` words (and a stride below
    2**31) is *striped*: :attr:`o_even` gets rows 0, 2, 4, ... and the job's zero rows, as a
    job of ``ceil(rows / 2)`` rows at twice the stride; :attr:`o_odd` rows 1, 3, ... as a job
    of ``floor(rows / 2)``. Each first row's address stays ``base + row0 * stride + col``: the
    job's ``row0 * stride`` becomes ``(row0 & 1) * stride`` added to ``base`` and
    ``(row0 >> 1) * (2 * stride)``. Any other job goes whole to :attr:`o_even`. Either way
    :attr:`o_merge` gets the job's :func:`interleave_job_layout` entry. The numpy model is
    :func:`sim.engine_models.stripe`.

    Latency and throughput: the outputs are registers, offered the cycle after a job is
    taken; a job is taken when all three are empty, so one job every two cycles at most.

    Members
    -------
    i_stream : In(stream.Signature(load_job_layout(tag_width)))
    o_even, o_odd : Out(stream.Signature(load_job_layout(tag_width)))
    o_merge : Out(stream.Signature(interleave_job_layout()))
    """

    def __init__(self, tag_width: int = 1):
        self.tag_width = tag_width
        layout = load_job_layout(tag_width)
        super().__init__({
            "i_stream": In(stream.Signature(layout)),
            "o_even": Out(stream.Signature(layout)),
            "o_odd": Out(stream.Signature(layout)),
            "o_merge": Out(stream.Signature(interleave_job_layout())),
        })

    def elaborate(self, platform):
        m = Module()
        job = self.i_stream.payload
        outs = (self.o_even, self.o_odd, self.o_merge)
        busy = Signal()
        m.d.comb += busy.eq(self.o_even.valid | self.o_odd.valid | self.o_merge.valid)
        for o in outs:
            with m.If(o.ready):
                m.d.sync += o.valid.eq(0)
        m.d.comb += self.i_stream.ready.eq(~busy)
        stripe = (job.rows[1:] != 0) & (job.nwords >= STRIPE_MIN_WORDS) & ~job.stride[31]
        row1 = Signal(17)
        m.d.comb += row1.eq(job.row0 + 1)
        with m.If(self.i_stream.valid & ~busy):
            m.d.sync += [self.o_even.payload.eq(job), self.o_odd.payload.eq(job),
                         self.o_even.valid.eq(1), self.o_merge.valid.eq(1),
                         self.o_merge.payload.nrows.eq(job.rows),
                         self.o_merge.payload.nzero.eq(job.nzero),
                         self.o_merge.payload.nbeats.eq(job.nbeats),
                         self.o_merge.payload.striped.eq(stripe)]
            with m.If(stripe):
                for o, first, rows, nzero in (
                        (self.o_even, job.row0, (job.rows + 1) >> 1, job.nzero),
                        (self.o_odd, row1, job.rows >> 1, 0)):
                    m.d.sync += [
                        o.payload.base.eq(carry_select_add(
                            job.base, Mux(first[0], job.stride, 0), 64)),
                        o.payload.row0.eq(first >> 1), o.payload.stride.eq(job.stride << 1),
                        o.payload.rows.eq(rows), o.payload.nzero.eq(nzero)]
                m.d.sync += self.o_odd.valid.eq(1)
        return m


class VectorInterleave(wiring.Component):
    """Puts two gearboxes' vectors back in the order of the jobs they were striped from.

    For each entry on :attr:`jobs` (:func:`interleave_job_layout`): for each of its
    ``nrows`` rows, ``nbeats`` vectors from :attr:`i_stream0` (even rows, and every row of a
    job not striped) or :attr:`i_stream1` (odd rows of a striped job), then ``nzero * nbeats``
    vectors from :attr:`i_stream0`. The numpy model is :func:`sim.engine_models.interleave`.

    Latency and throughput: combinational from an input vector to :attr:`o_stream` (a 2:1
    multiplexer; ``ready`` follows the chosen input's); one vector a cycle. A job's first
    vector passes the cycle after its entry reaches the queue's head; one idle cycle between
    jobs (the queue is popped from a register).

    Members
    -------
    jobs : In(stream.Signature(interleave_job_layout()))
    i_stream0, i_stream1 : In(stream.Signature(shape))
    o_stream : Out(stream.Signature(shape))
    """

    def __init__(self, shape, depth: int = 8):
        self.depth = depth
        super().__init__({
            "jobs": In(stream.Signature(interleave_job_layout())),
            "i_stream0": In(stream.Signature(shape)),
            "i_stream1": In(stream.Signature(shape)),
            "o_stream": Out(stream.Signature(shape)),
        })

    def elaborate(self, platform):
        m = Module()
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
        src = Signal()             # the vector comes from i_stream1
        pop = Signal()             # the head's job ended last cycle
        ok = Signal()
        m.d.comb += ok.eq(queue.r_rdy & ~pop)
        i0, i1, out = self.i_stream0, self.i_stream1, self.o_stream
        m.d.comb += [out.valid.eq(ok & Mux(src, i1.valid, i0.valid)),
                     out.payload.eq(Mux(src, i1.payload, i0.payload)),
                     i0.ready.eq(ok & ~src & out.ready),
                     i1.ready.eq(ok & src & out.ready)]
        last_beat = beat == head.nbeats_m1
        last_row = row == head.rows_m1
        with m.If(out.valid & out.ready):
            m.d.sync += beat.eq(Mux(last_beat, 0, beat + 1))
            with m.If(last_beat):
                m.d.sync += [row.eq(Mux(last_row, 0, row + 1)),
                             # the next row is odd and read (a striped job's row < nrows)
                             src.eq(~last_row & head.striped & ~row[0]
                                    & (row < head.nrows_m1))]
        m.d.sync += pop.eq(out.valid & out.ready & last_beat & last_row)
        m.d.comb += queue.r_en.eq(pop)
        return m
