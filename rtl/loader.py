"""Load jobs -> DMA read commands, gearbox jobs and routing entries."""

from amaranth import Module, Mux, Signal, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from ._util import carry_select_add
from .dma import dma_command_layout
from .gearbox import gearbox_job_layout

__all__ = ["LoadSequencer", "load_job_layout", "route_layout"]


def load_job_layout(tag_width: int = 1) -> data.StructLayout:
    """One operand tile, span of k-major tiles, or exponent vector to fetch.

    ``rows`` DMA reads of ``nwords`` bus words, the first at ``base + row0 * stride + col``, the
    next ``stride`` bytes further each; the remaining fields are the gearbox job that turns
    them into vectors (see :func:`rtl.gearbox.gearbox_job_layout`), for the A (``path`` 0) or
    B (``path`` 1) gearbox.
    """
    return data.StructLayout({
        "base": unsigned(64), "stride": unsigned(32), "row0": unsigned(17),
        "col": unsigned(64), "rows": unsigned(17), "nzero": unsigned(17),
        "nwords": unsigned(16), "nbeats": unsigned(16), "valid": unsigned(17),
        "sel": unsigned(8), "tag": unsigned(tag_width), "path": 1,
    })


def route_layout() -> data.StructLayout:
    """A routing entry of :class:`rtl.router.ReadRouter`: the next ``rows`` reads go to ``path``."""
    return data.StructLayout({"path": 1, "rows": unsigned(16)})


class LoadSequencer(wiring.Component):
    """Turns a load job into the DMA reads of its rows and the jobs that take their words.

    For each job on :attr:`i_stream` it first hands the gearbox job to :attr:`a_jobs` or
    :attr:`b_jobs` (by ``path``) and, when the job reads rows, a routing entry to
    :attr:`routes`; then it issues one DMA read command per row on :attr:`rd_cmd`. The job
    stays on :attr:`i_stream` while it runs and is taken with its last read command (or, with
    no rows, once its gearbox job is out). Own two 17 x 16 multipliers for ``row0 * stride``,
    one for ``rows * nwords`` and one 17 x log2(bus bytes) for a packed job's span. The numpy
    model is :func:`sim.models.engine.load_sequence`.

    Rows that follow one another in memory (``stride == nwords * bus bytes``: a tile or span
    that covers its matrix's whole rows, such as a narrow B stored k-major or a lane-run tile
    of a single K chunk) are read as one command of ``rows * nwords`` words (if that fits the
    command's 24 bits) with a routing entry of one row: the DMA cuts it into bursts of the
    port's longest length instead of one short burst per row, and the gearbox receives the
    same words.

    Rows closer together than a bus word (``0 < stride < bus bytes``: a matrix of fewer
    bytes a row than a word, stored without padding) are *packed*: one command reads the
    words from the first row's start to the last row's last byte used (``sel * lanes +
    valid`` bytes of each row, where ``lanes`` is below the bus bytes, else ``valid``), its
    address rounded down to a word, and the gearbox job says where the rows are in them
    (``pack``, ``off``, ``pstride``, ``in_words``; ``nwords`` 1), with a routing entry of one
    row. A packed job's rows must each lie within a word's bytes less one (``sel * lanes +
    valid < bus bytes``), as the gearbox's realigner needs; the walker's always do, since a
    packed matrix's rows are no longer than its stride.

    Parameters
    ----------
    data_width, addr_width : int
        AXI bus.
    a_lanes, b_lanes : int
        Lanes of the A and B gearboxes (array rows and columns).
    tag_width : int
        Width of the gearbox tags.

    Attributes
    ----------
    i_stream : In(stream.Signature(load_job_layout(tag_width)))
    rd_cmd : Out(stream.Signature(dma_command_layout(addr_width)))
    a_jobs : Out(stream.Signature(gearbox_job_layout(data_width, a_lanes, tag_width)))
    b_jobs : Out(stream.Signature(gearbox_job_layout(data_width, b_lanes, tag_width)))
    routes : Out(stream.Signature(route_layout()))

    Latency
    -------
    The gearbox job and routing entry leave :data:`JOB_LATENCY` cycles after the job arrives
    (the products, then the sums, registered), the first read command :data:`READ_LATENCY`
    cycle after them (the address, summed in registered steps, is registered with them).

    Throughput
    ----------
    One read command a cycle; the next job may start in the cycle after the last read
    command.
    """

    def __init__(self, data_width: int = 128, addr_width: int = 32, *, a_lanes: int = 8,
                 b_lanes: int = 8, tag_width: int = 1):
        self.data_width, self.addr_width, self.tag_width = data_width, addr_width, tag_width
        self.a_lanes, self.b_lanes = a_lanes, b_lanes
        super().__init__({
            "i_stream": In(stream.Signature(load_job_layout(tag_width))),
            "rd_cmd": Out(stream.Signature(dma_command_layout(addr_width))),
            "a_jobs": Out(stream.Signature(gearbox_job_layout(data_width, a_lanes, tag_width))),
            "b_jobs": Out(stream.Signature(gearbox_job_layout(data_width, b_lanes, tag_width))),
            "routes": Out(stream.Signature(route_layout())),
        })

    #: Cycles from a job arriving to its gearbox job and routing entry being offered.
    JOB_LATENCY = 2
    #: Cycles from those to the job's first read command.
    READ_LATENCY = 1

    def elaborate(self, platform):
        m = Module()
        job = self.i_stream.payload
        # The first row's address in registered steps, no carry chain over 16 bits: in MUL the
        # two 17 x 16 halves of ``row0 * stride`` (a DSP slice each) and ``base + col``; in
        # PREP the halves' sum; in JOBS the address.
        p_lo = Signal(33)
        p_hi = Signal(33)
        base_col = Signal(64)
        offset = Signal(64)
        m.d.sync += [p_lo.eq(job.row0 * job.stride[:16]), p_hi.eq(job.row0 * job.stride[16:]),
                     base_col.eq(carry_select_add(job.base, job.col, 64)),
                     offset.eq(carry_select_add(p_lo, p_hi << 16, 64))]
        addr = Signal(64)
        # One adder for the first row's address (in JOBS: base + col, plus the offset) and
        # the next rows' (in ROWS: the address plus the stride): its operands selected in
        # the LUTs in front of its carry chains, by a register, so that no multiplexer
        # follows the sum.
        at_addr = Signal()
        next_addr = carry_select_add(Mux(at_addr, base_col, addr),
                                     Mux(at_addr, offset, job.stride), 64)
        # Contiguous rows merged into one command (see above): ``contig`` and the product in
        # MUL, ``merged`` from them in JOBS (where the routing entry and the count need it).
        wlog = (self.data_width // 8).bit_length() - 1
        contig = Signal()
        all_words = Signal(33)
        m.d.sync += [contig.eq((job.stride == (job.nwords << wlog)) & (job.nwords != 0)
                               & (job.rows != 0)),
                     all_words.eq(job.rows * job.nwords)]
        merged = Signal()
        m.d.comb += merged.eq(contig & (all_words[24:] == 0))
        # Packed rows (see above): ``packed`` in MUL. The first row's byte offset in its
        # word, ``pk_off``, is the low bits of base + col + row0 * stride, summed in PREP from
        # MUL's ``base_col`` and ``p_lo``. The words to read, ceil((pk_off + (rows - 1) * s +
        # used) / bpw) with ``s`` the stride and ``used`` the bytes a row uses (below bpw), are
        # (pk_off + rows * s + used + bpw - 1 - s) >> log2(bpw): ``rows * s`` (a DSP slice)
        # and ``used + bpw - 1 - s`` (``~s``: s is below bpw) in MUL, their sum in PREP, and
        # ``pk_off`` added in JOBS, where the gearbox job and ``beats`` take them.
        bpw = self.data_width // 8
        packed = Signal()
        pk_prod = Signal(17 + wlog)
        pk_small = Signal(wlog + 2)
        pk_sum = Signal(17 + wlog + 1)
        pk_off = Signal(wlog)

        def sel_bytes(lanes):
            return job.sel[:(bpw // lanes).bit_length() - 1] * lanes if lanes < bpw else 0

        s = job.stride[:wlog]
        m.d.sync += [packed.eq((job.stride[wlog:] == 0) & (s != 0) & (job.rows != 0)),
                     pk_prod.eq(job.rows * s),
                     pk_small.eq(job.valid[:wlog] + Mux(job.path, sel_bytes(self.b_lanes),
                                                         sel_bytes(self.a_lanes)) + ~s),
                     pk_sum.eq(pk_prod + pk_small),
                     pk_off.eq(base_col[:wlog] + p_lo[:wlog])]
        pk_words = Signal(24)
        m.d.comb += pk_words.eq(carry_select_add(pk_sum, pk_off, len(pk_sum) + 1) >> wlog)
        # the read commands' length where not packed, a register set in PREP
        np_beats = Signal(24)
        m.d.sync += np_beats.eq(Mux(merged, all_words, job.nwords))
        # The read commands' length, a register set in JOBS: the DMA's burst splitter reads
        # it, so no multiplexer lies in front of that.
        beats = Signal(24)
        job_sent = Signal()        # the gearbox job is out
        route_sent = Signal()      # the routing entry is out (or none is needed)
        # Read commands still to issue, and whether that is none or one: registers (set in
        # MUL and JOBS from the job, then counted down), so that no 17-bit compare lies
        # between the job and the handshakes that end it.
        left = Signal(17)
        rows_nz = Signal()
        one_left = Signal()
        none_left = Signal()

        for gb in (self.a_jobs, self.b_jobs):
            m.d.comb += [gb.payload.nrows.eq(job.rows), gb.payload.nzero.eq(job.nzero),
                         gb.payload.nwords.eq(Mux(packed, 1, job.nwords)),
                         gb.payload.nbeats.eq(job.nbeats),
                         gb.payload.valid.eq(job.valid), gb.payload.sel.eq(job.sel),
                         gb.payload.tag.eq(job.tag), gb.payload.pack.eq(packed),
                         # (0 unless packed)
                         gb.payload.off.eq(Mux(packed, pk_off, 0)),
                         gb.payload.pstride.eq(Mux(packed, job.stride[:wlog], 0)),
                         gb.payload.in_words.eq(Mux(packed, pk_words, 0))]
        m.d.comb += [self.routes.payload.path.eq(job.path),
                     self.routes.payload.rows.eq(Mux(merged | packed, 1, job.rows)),
                     self.rd_cmd.payload.addr.eq(Mux(packed, addr >> wlog << wlog, addr)),
                     self.rd_cmd.payload.beats.eq(beats)]

        with m.FSM(name="load"):
            with m.State("MUL"):
                m.d.sync += [job_sent.eq(0), route_sent.eq(0), rows_nz.eq(job.rows != 0)]
                with m.If(self.i_stream.valid):
                    m.next = "PREP"
            with m.State("PREP"):
                m.d.sync += at_addr.eq(1)
                m.next = "JOBS"
            with m.State("JOBS"):
                m.d.comb += [self.a_jobs.valid.eq((job.path == 0) & ~job_sent),
                             self.b_jobs.valid.eq((job.path == 1) & ~job_sent),
                             self.routes.valid.eq(rows_nz & ~route_sent)]
                job_out = job_sent | ((self.a_jobs.valid & self.a_jobs.ready)
                                      | (self.b_jobs.valid & self.b_jobs.ready))
                route_out = route_sent | ~rows_nz | self.routes.ready
                m.d.sync += [job_sent.eq(job_out), route_sent.eq(route_out),
                             addr.eq(next_addr),
                             left.eq(Mux(merged | packed, 1, job.rows)),
                             none_left.eq(~rows_nz),
                             one_left.eq(merged | packed | (job.rows == 1)),
                             beats.eq(Mux(packed, pk_words, np_beats))]
                with m.If(job_out & route_out):
                    m.d.sync += at_addr.eq(0)
                    m.next = "ROWS"
            with m.State("ROWS"):
                m.d.comb += self.rd_cmd.valid.eq(~none_left)
                with m.If(self.rd_cmd.ready & ~none_left):
                    m.d.sync += [addr.eq(next_addr), left.eq(left - 1),
                                 one_left.eq(left == 2), none_left.eq(one_left)]
                with m.If(none_left | (self.rd_cmd.ready & one_left)):
                    m.d.comb += self.i_stream.ready.eq(1)
                    m.next = "MUL"
        return m
