"""Bus words -> operand vectors: the read side's width converter, with edge zero-padding."""

from amaranth import Array, Cat, Module, Mux, Signal, signed, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from .fifo import Fifo
from .xilinx import byte_shift, register_copies

__all__ = ["Gearbox", "gearbox_job_layout"]


def gearbox_job_layout(data_width: int, lanes: int, tag_width: int = 1) -> data.StructLayout:
    """One run of bus words to turn into ``nbeats`` vectors of ``lanes`` bytes."""
    bus_bytes = data_width // 8
    return data.StructLayout({
        "nrows": unsigned(16),     # runs of words (rows) taken from i_stream
        "nzero": unsigned(16),     # rows of zeros after them (no words taken)
        "nwords": unsigned(16),    # bus words of each row (0: all zeros)
        "nbeats": unsigned(16),    # vectors made of each row (>= 1)
        "valid": unsigned(17),     # bytes of each row that are data; the rest read as 0
        "sel": range(max(2, bus_bytes // lanes)),  # first vector's position in the first word
        "tag": unsigned(tag_width),  # passed through to every vector of the job
        # rows packed closer than a word: pstride bytes apart from byte off of in_words words
        "pack": 1, "off": range(bus_bytes), "pstride": range(bus_bytes),
        "in_words": unsigned(24),
    })


class Gearbox(wiring.Component):
    """Cuts bus words into ``lanes``-byte vectors, one job (a tile's rows) at a time.

    A job is ``nrows`` rows read from memory followed by ``nzero`` rows of zeros. A row read
    takes ``nwords`` words from :attr:`i_stream` and makes ``nbeats`` vectors of the byte run
    they hold, starting ``sel * lanes`` bytes into the first word; byte ``i`` of the run is
    kept when ``i < valid`` and reads as 0 otherwise (so columns beyond the matrix edge, and
    the padding of a lane run, are zeros). A zero row makes ``nbeats`` zero vectors and takes
    no word (rows beyond the matrix edge). ``lanes`` and the bus width are powers of two; when
    ``lanes`` exceeds the bus width a vector gathers several words.

    A *packed* job (``pack``: a matrix whose rows are fewer bytes than a bus word, stored
    ``pstride < bus bytes`` apart and read as one run of ``in_words`` words) has its rows
    realigned first: row ``r`` is handed on as the word of bytes from ``off + r * pstride``
    on, as if it began a word (its ``nwords`` must be 1: the row's data lies within its
    first ``bus bytes - 1`` bytes). A two-word window (the word held and the next on
    :attr:`i_stream`) and a byte shifter into a row register do it: one row a cycle, two
    cycles from the job's first word to its first row.

    The numpy model is :func:`sim.models.datapath.gearbox`.

    Parameters
    ----------
    data_width : int
        Bus width (64, 128, 256 or 512 bits).
    lanes : int
        Bytes of a vector (a power of two).
    tag_width : int
        Width of the job's tag.
    job_depth : int
        Jobs queued.
    primitive : bool
        The realigner's byte shifter from ``LUT6``/``MUXF7``/``MUXF8`` instances
        (:func:`rtl.xilinx.byte_shift`: four levels at 512 bits, where Yosys maps the plain
        one eight deep), and the copies of its byte offset (one per :attr:`REALIGN_BYTES`
        output bytes, on buses wider than that) as ``FDRE`` instances, which synthesis keeps
        apart (:func:`rtl.xilinx.register_copies`).

    Attributes
    ----------
    jobs : In(stream.Signature(gearbox_job_layout(data_width, lanes, tag_width)))
    i_stream : In(stream.Signature(data_width))
    o_stream : Out(stream.Signature({"data": ArrayLayout(signed(8), lanes), "tag": tag_width}))

    Latency
    -------
    Combinational from a word to its first vector; a packed job's first row 2 cycles after
    its first word.

    Throughput
    ----------
    One vector per cycle while ``lanes <= bus bytes``, else one word per cycle. One idle
    cycle between jobs (the queue is popped from a register).
    """

    #: Output bytes of the packed realigner's shifter steered by one copy of its byte offset.
    REALIGN_BYTES = 16

    def __init__(self, data_width: int, lanes: int, tag_width: int = 1, job_depth: int = 4,
                 *, primitive: bool = False):
        if data_width not in (64, 128, 256, 512):
            raise ValueError(f"data_width must be 64, 128, 256 or 512, not {data_width!r}")
        if not isinstance(lanes, int) or lanes < 1 or lanes & (lanes - 1):
            raise ValueError(f"lanes must be a power of two, not {lanes!r}")
        self.data_width, self.lanes, self.tag_width = data_width, lanes, tag_width
        self.job_depth, self.primitive = job_depth, bool(primitive)
        super().__init__({
            "jobs": In(stream.Signature(gearbox_job_layout(data_width, lanes, tag_width))),
            "i_stream": In(stream.Signature(data_width)),
            "o_stream": Out(stream.Signature(data.StructLayout({
                "data": data.ArrayLayout(signed(8), lanes), "tag": tag_width}))),
        })

    def elaborate(self, platform):
        m = Module()
        W, bpw = self.lanes, self.data_width // 8
        wide = W > bpw
        ratio = W // bpw if wide else bpw // W      # words per vector, or vectors per word
        job = self.jobs.payload
        # The queue holds the job with what its first row needs precomputed (whether it is
        # read, its words, the words of its first vector, whether it has one beat and is the
        # only row) and the indices the per-row registers below are compared with, so that
        # the sequencing compares registers and never does arithmetic on the head before
        # deciding to fire.
        layout = data.StructLayout({
            "nbeats_m2": unsigned(16), "nbeats_one": 1,
            "rows_m2": unsigned(17), "rows_one": 1,
            "nwords": unsigned(16), "nwords_nz": 1, "valid": unsigned(17),
            "sel": job.sel.shape(), "tag": unsigned(self.tag_width), "reading0": 1,
            "avail0": unsigned(17), "mask0": W, "vmask": W, "more0": 1,
            "nrows_m2": unsigned(16),
            "pack": 1, "off": job.off.shape(), "pstride": job.pstride.shape(),
            "in_words": unsigned(24),
            **({"cnt_row": unsigned(16), "row_one": 1, "tail_m1": range(max(2, ratio)),
                "cnt0": unsigned(16), "nz0": 1, "one0": 1, "two0": 1} if wide else {})})
        m.submodules.queue = queue = Fifo(width=layout.size, depth=self.job_depth)
        entry = data.View(layout, queue.w_data)
        m.d.comb += [entry.nbeats_m2.eq(job.nbeats - 2),
                     entry.nbeats_one.eq(job.nbeats == 1),
                     entry.rows_m2.eq(job.nrows + job.nzero - 2),
                     # (a compare of each, not of their sum: no carry chain before it)
                     entry.rows_one.eq(((job.nrows == 1) & (job.nzero == 0))
                                       | ((job.nrows == 0) & (job.nzero == 1))),
                     entry.nwords.eq(job.nwords),
                     entry.nwords_nz.eq(job.nwords != 0),
                     entry.valid.eq(job.valid), entry.sel.eq(job.sel), entry.tag.eq(job.tag),
                     entry.reading0.eq(job.nrows != 0),
                     entry.avail0.eq(Mux(job.nrows != 0, job.valid, 0)),
                     entry.mask0.eq(Cat((job.nrows != 0) & (job.valid > t) for t in range(W))),
                     # the lanes a row's data fills; a second row to read; rows - 2
                     entry.vmask.eq(Cat(job.valid > t for t in range(W))),
                     entry.more0.eq(job.nrows != 1), entry.nrows_m2.eq(job.nrows - 2),
                     entry.pack.eq(job.pack & (job.nrows != 0)), entry.off.eq(job.off),
                     # (as it comes: no arithmetic on it before the queue)
                     entry.pstride.eq(job.pstride), entry.in_words.eq(job.in_words),
                     queue.w_en.eq(self.jobs.valid), self.jobs.ready.eq(queue.w_rdy)]
        lr = ratio.bit_length() - 1
        if wide:
            # A row of ``nwords`` words takes them in ceil(nwords / ratio) vectors, all but
            # the last ``ratio`` words each, the last (nwords - 1) % ratio + 1. Whether a row
            # has one or two such vectors are compares of nwords with constants (no add).
            reading0 = job.nrows != 0
            row_one = (job.nwords != 0) & (job.nwords <= ratio)
            row_two = (job.nwords > ratio) & (job.nwords <= 2 * ratio)
            cnt_row = job.nwords[lr:] + (job.nwords[:lr] != 0)
            m.d.comb += [entry.cnt_row.eq(cnt_row), entry.row_one.eq(row_one),
                         entry.tail_m1.eq(job.nwords[:lr] - 1),
                         entry.cnt0.eq(Mux(reading0, cnt_row, 0)),
                         entry.nz0.eq(reading0 & (job.nwords != 0)),
                         entry.one0.eq(reading0 & row_one), entry.two0.eq(reading0 & row_two)]
        head = data.View(layout, queue.r_data)
        beat = Signal(16)
        row = Signal(17)
        last_beat = Signal()       # of the row
        last_row = Signal()
        fire = Signal()
        pop = Signal()             # the head's job ended last cycle
        head_ok = Signal()         # the head is a job to work on
        m.d.comb += head_ok.eq(queue.r_rdy & ~pop)
        out = self.o_stream
        m.d.comb += [fire.eq(out.valid & out.ready),
                     out.payload.tag.eq(head.tag)]

        # Per-row state as registers, valid from the job's second vector on; for its first
        # (`job_start`) the queue entry's precomputed fields stand in. The vector's last
        # beat and row, and the bytes of the row from this vector's first on that are data
        # (``avail``, meaningful while the lane mask's bit 0 says some are left), are
        # registers too, set when a vector fires, so that no counter compare or byte-index
        # arithmetic lies before the fire decision or the lane mask.
        job_start = Signal(init=1)
        reading_r = Signal()       # the row comes from memory (else zeros)
        reading = Mux(job_start, head.reading0, reading_r)
        last_beat_r = Signal()
        last_row_r = Signal()
        avail_r = Signal(17)
        m.d.comb += [last_beat.eq(Mux(job_start, head.nbeats_one, last_beat_r)),
                     last_row.eq(Mux(job_start, head.rows_one, last_row_r))]
        avail = Signal(17)
        m.d.comb += avail.eq(Mux(job_start, head.avail0, avail_r))
        # The words the row logic below takes: the input's as they come, or a packed job's
        # rows realigned (``_realign``)
        word = Signal(self.data_width)
        w_valid = Signal()
        w_ready = Signal()
        self._realign(m, head, head_ok, pop, word, w_valid, w_ready)

        # the next row's state, for when this vector ends its row: another row to read
        # (row != nrows - 1) is a register, set as the previous row ended (row - 1 !=
        # nrows - 2), or from the entry's flag for the first row
        more_r = Signal()
        reading_next = reading & Mux(job_start, head.more0, more_r)

        vector = Signal(8 * W)
        if not wide:
            pos = Signal(range(max(2, ratio)))
            m.d.comb += pos.eq((head.sel + beat)[:max(1, ratio.bit_length() - 1)]
                               if ratio > 1 else 0)
            needs_word = reading & head.nwords_nz
            m.d.comb += [
                out.valid.eq(head_ok & (~needs_word | w_valid)),
                vector.eq(Mux(needs_word,
                              Array(word[8 * W * i:8 * W * (i + 1)] for i in range(ratio))[pos],
                              0)),
                w_ready.eq(fire & needs_word & ((pos == ratio - 1) | last_beat)),
            ]
        else:
            # The row's word-taking vectors left, this one included, and as registers
            # whether any is left and whether this is the last: the next vector's flags come
            # from these and from a compare of the count register with 2, never from the
            # count's decrement, so no carry chain lies before a compare.
            cnt_r = Signal(16)
            nz_r = Signal()
            one_r = Signal()
            cnt = Mux(job_start, head.cnt0, cnt_r)
            need_nz = Mux(job_start, head.nz0, nz_r)       # this vector takes words
            one = Mux(job_start, head.one0, one_r)         # ... the row's last ones
            two = Mux(job_start, head.two0, cnt_r == 2)    # the next vector takes the last
            need_m1 = Mux(one, head.tail_m1, ratio - 1)    # words of this vector - 1
            held = [Signal(self.data_width, name=f"held{i}") for i in range(ratio - 1)]
            got = Signal(range(ratio))
            collecting = head_ok & need_nz & (got != need_m1)
            m.d.comb += [
                out.valid.eq(head_ok & (~need_nz | ((got == need_m1) & w_valid))),
                w_ready.eq(collecting | (fire & need_nz)),
                vector.eq(Cat(*(Mux(need_nz & (j < need_m1), held[j] if j < ratio - 1 else 0,
                                    Mux(need_nz & (j == need_m1), word, 0))
                                for j in range(ratio)))),
            ]
            with m.If(collecting & w_valid):
                m.d.sync += [Array(held)[got].eq(word), got.eq(got + 1)]
            with m.If(fire):
                m.d.sync += [
                    got.eq(0),
                    cnt_r.eq(Mux(last_beat, Mux(reading_next, head.cnt_row, 0),
                                 Mux(need_nz, cnt - 1, 0))),
                    nz_r.eq(Mux(last_beat, reading_next & head.nwords_nz, need_nz & ~one)),
                    one_r.eq(Mux(last_beat, reading_next & head.row_one, need_nz & two)),
                ]
        # The lanes that carry data (``avail > lane`` while the row has data left): a
        # register too, set for the next vector from compares of ``avail`` with constants,
        # so that no compare lies between the byte counters and the output. Its bit 0 says
        # whether any data is left in the row at all.
        mask_r = Signal(W)
        mask = Mux(job_start, head.mask0, mask_r)
        left_any = mask[0]
        for t in range(W):
            m.d.comb += out.payload.data[t].eq(Mux(mask[t], vector[8 * t:8 * t + 8], 0))
        with m.If(fire):
            m.d.sync += [beat.eq(Mux(last_beat, 0, beat + 1)), job_start.eq(0),
                         reading_r.eq(Mux(last_beat, reading_next, reading)),
                         last_beat_r.eq(Mux(last_beat, head.nbeats_one, beat == head.nbeats_m2)),
                         last_row_r.eq(Mux(last_beat, row == head.rows_m2, last_row)),
                         avail_r.eq(Mux(last_beat, head.valid, avail - W)),
                         mask_r.eq(Mux(last_beat, reading_next.replicate(W) & head.vmask,
                                       Cat(left_any & (avail > t + W) for t in range(W))))]
            with m.If(last_beat):
                m.d.sync += [row.eq(Mux(last_row, 0, row + 1)),
                             more_r.eq(row[:16] != head.nrows_m2)]
                with m.If(last_row):
                    m.d.sync += job_start.eq(1)
            with m.Elif(job_start):
                m.d.sync += more_r.eq(head.more0)
        # The queue is popped the cycle after a job's last vector, from a register, so that
        # the fire decision is not followed by the queue's counts; that cycle (``pop``) the
        # head is still the old job, and nothing is taken or sent.
        m.d.sync += pop.eq(fire & last_beat & last_row)
        m.d.comb += queue.r_en.eq(pop)
        return m

    def _realign(self, m, head, head_ok, pop, word, w_valid, w_ready):
        """Drives ``word`` and ``w_valid`` from :attr:`i_stream` (and its ``ready`` from
        ``w_ready``): as they are, or, for a packed head job, its rows realigned.

        A packed job's first word is taken into ``cur``, ``p`` set to ``off``; then each row
        is made into a register (``row``, so that the shifter is all that lies between the
        input's registers and it) as ``Cat(cur, next word)`` from byte ``p`` on, while the
        row before is taken. ``p`` then steps by ``pstride``; past a word, the next word
        becomes ``cur``. The next word is waited for while one is left (``in_left``) even
        where the row ends in ``cur``: it is on its way, in the same read. With the job's
        last row the word left, if any, is taken too, and nothing more until the job is
        popped (its zero rows). Two cycles from a packed job's first word to its first row.
        """
        bpw = self.data_width // 8
        wlog = bpw.bit_length() - 1
        i = self.i_stream
        cur = Signal(self.data_width, reset_less=True)     # (read under ``have`` only)
        have = Signal()                  # cur holds a word, and rows are left to make
        done = Signal()                  # the job's rows are all made
        p = Signal(range(bpw))
        in_left = Signal(24)             # the job's words from cur on (cur's included)
        in_none = Signal()               # ... cur's alone: none after it to take
        rows_m2 = Signal(16)             # rows to make, less 2 (from the entry's nrows_m2)
        last_row = Signal()              # ... one left (the entry's ~more0 at the start)
        row = Signal(self.data_width, reset_less=True)     # (read under ``row_v`` only)
        row_v = Signal()
        packed = head_ok & head.pack
        take = Signal()                  # the row logic takes the made row
        make = Signal()                  # the next row is made
        step = Signal(wlog + 1)
        carry = step[wlog]
        consume = (carry | last_row) & ~in_none
        m.d.comb += [take.eq(packed & row_v & w_ready), step.eq(p + head.pstride),
                     make.eq(packed & have & (~row_v | take) & (in_none | i.valid))]
        with m.If(~packed):
            m.d.comb += [word.eq(i.payload), w_valid.eq(i.valid), i.ready.eq(w_ready)]
        with m.Else():
            m.d.comb += [word.eq(row), w_valid.eq(row_v),
                         i.ready.eq((~have & ~done) | (make & consume))]
        # ``p``: the job's offset with its first word, then a step with each row made
        p_next = Signal.like(p)
        p_en = Signal()
        first = packed & ~have & ~done & i.valid
        m.d.comb += [p_en.eq(first | make), p_next.eq(Mux(first, head.off, step[:wlog]))]
        with m.If(p_en):
            m.d.sync += p.eq(p_next)
        with m.If(first):
            m.d.sync += [cur.eq(i.payload), have.eq(1),
                         in_left.eq(head.in_words), in_none.eq(head.in_words == 1),
                         rows_m2.eq(head.nrows_m2), last_row.eq(~head.more0)]
        # ``row`` loads the shifter whenever it is free (its bits are only read under
        # ``row_v``), so that ``make`` does not reach its enable; with a wide word the
        # shifter is cut into :attr:`REALIGN_BYTES`-byte parts, each steered by its own
        # copy of ``p`` (at 512 bits one ``p`` would steer over a thousand LUTs).
        window = Cat(cur, i.payload)
        parts = max(1, bpw // self.REALIGN_BYTES)
        part = self.data_width // parts
        copies = [p] if parts == 1 else register_copies(m, p_next, parts, name="p_copy",
                                                         primitive=self.primitive, enable=p_en)
        shifted = Cat(byte_shift(m, window[g * part:(g + 1) * part + self.data_width - 8],
                                 copies[g], part // 8, primitive=self.primitive,
                                 name=f"realign{g}") for g in range(parts))
        with m.If(~row_v | take):
            m.d.sync += row.eq(shifted)
        with m.If(make):
            m.d.sync += [row_v.eq(1), rows_m2.eq(rows_m2 - 1),
                         last_row.eq(rows_m2 == 0)]
            with m.If(consume):
                m.d.sync += [cur.eq(i.payload), in_left.eq(in_left - 1),
                             in_none.eq(in_left == 2)]
            with m.If(last_row):
                m.d.sync += [have.eq(0), done.eq(1)]
        with m.Elif(take):
            m.d.sync += row_v.eq(0)
        with m.If(pop):
            m.d.sync += done.eq(0)
