"""C tiles -> DMA write commands and bus words with byte strobes."""

from amaranth import Array, Cat, Const, Module, Mux, Signal, unsigned
from amaranth.lib import data, fifo, stream, wiring
from amaranth.lib.wiring import In, Out

from .checker import descriptor_layout
from .dma import dma_command_layout, dma_write_layout
from .rescale import rescale_output_layout

__all__ = ["WriteBack", "write_job_layout"]


def write_job_layout() -> data.StructLayout:
    """A C tile to write: its first row and column in the matrix."""
    return data.StructLayout({"m0": unsigned(17), "n0": unsigned(17)})


class WriteBack(wiring.Component):
    """Writes C tiles, row by row, leaving memory beyond the matrix untouched.

    Each job on :attr:`jobs` announces the next ``rows`` C rows on :attr:`i_stream` (one tile,
    ``cols`` 32-bit words a row). A command side issues, per row inside the matrix
    (``m0 + row < M``), one DMA write command on :attr:`wr_cmd` at
    ``c_addr + (m0 + row) * c_stride + n0 * 4`` (rounded down to a bus word) of the bus words
    holding columns below ``N``; a data side cuts each such row into those words on
    :attr:`wr_data`, with strobes on the bytes of columns below ``N``. Rows beyond ``M`` are
    taken and dropped. :attr:`idle` says that no job is queued or running and every issued
    write has been acknowledged on :attr:`wr_done`. The numpy model is
    :func:`sim.engine_models.write_back`.

    This is where output quantisation will go.

    Latency and throughput: jobs queue (``queue`` entries for each side); a tile's first write
    command leaves 3 cycles after its job arrives, then one per cycle; a row's first word
    leaves combinationally from the row (once its job is at the queue head), then one word a
    cycle.

    Parameters
    ----------
    rows, cols : int
        Array shape: rows of a C tile, 32-bit words of a C row.
    data_width, addr_width : int
        AXI bus.
    queue : int
        Jobs queued on each side.

    Members
    -------
    jobs : In(stream.Signature(write_job_layout()))
    i_stream : In(stream.Signature(rtl.rescale.rescale_output_layout(cols)))
    desc : In(descriptor_layout())
        The running descriptor (``m``, ``n``, ``c_addr``, ``c_stride``); held while its tiles
        pass.
    wr_cmd : Out(stream.Signature(rtl.dma.dma_command_layout(addr_width)))
    wr_data : Out(stream.Signature(rtl.dma.dma_write_layout(data_width)))
    wr_done : In(1)
        Pulses once per completed write command.
    idle : Out(1)
    """

    def __init__(self, rows: int = 8, cols: int = 8, *, data_width: int = 128,
                 addr_width: int = 32, queue: int = 16):
        self.rows, self.cols, self.queue = rows, cols, queue
        self.data_width, self.addr_width = data_width, addr_width
        super().__init__({
            "jobs": In(stream.Signature(write_job_layout())),
            "i_stream": In(stream.Signature(rescale_output_layout(cols))),
            "desc": In(descriptor_layout()),
            "wr_cmd": Out(stream.Signature(dma_command_layout(addr_width))),
            "wr_data": Out(stream.Signature(dma_write_layout(data_width))),
            "wr_done": In(1),
            "idle": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        R, C = self.rows, self.cols
        bpw = self.data_width // 8
        wlog = bpw.bit_length() - 1
        d = self.desc
        layout = write_job_layout()
        m.submodules.wq_cmd = wq_cmd = fifo.SyncFIFOBuffered(width=layout.size, depth=self.queue)
        m.submodules.wq_data = wq_data = fifo.SyncFIFOBuffered(width=layout.size,
                                                               depth=self.queue)
        m.d.comb += [wq_cmd.w_data.eq(self.jobs.payload), wq_data.w_data.eq(self.jobs.payload),
                     self.jobs.ready.eq(wq_cmd.w_rdy & wq_data.w_rdy),
                     wq_cmd.w_en.eq(self.jobs.valid & self.jobs.ready),
                     wq_data.w_en.eq(self.jobs.valid & self.jobs.ready)]
        row_bytes = 4 * C
        words_per_row = max(1, row_bytes // bpw)

        def row_words(n0):
            """Bus words of a C row holding columns of the matrix: none beyond them."""
            if row_bytes <= bpw:
                return 1
            left = d.n - n0
            cols_in = Mux(left < C, left, C)
            return ((cols_in << 2) + bpw - 1) >> wlog
        outstanding = Signal(32)        # write commands issued, not yet done

        # command side: one DMA write per C row inside the matrix
        wc = data.View(layout, wq_cmd.r_data)
        wc_row = Signal(range(R))
        wc_addr = Signal(64)
        wc_setup = Signal()           # wc_addr holds the tile's first row address
        with m.If(wq_cmd.r_rdy & ~wc_setup):
            col_byte = Cat(Const(0, 2), wc.n0)          # n0 * 4
            m.d.sync += [wc_addr.eq(d.c_addr + wc.m0 * d.c_stride
                                    + (col_byte >> wlog << wlog)),
                         wc_setup.eq(1), wc_row.eq(0)]
        row_in = (wc.m0 + wc_row) < d.m
        m.d.comb += [self.wr_cmd.payload.addr.eq(wc_addr),
                     self.wr_cmd.payload.beats.eq(row_words(wc.n0)),
                     self.wr_cmd.valid.eq(wc_setup & row_in)]
        with m.If(wc_setup & (~row_in | self.wr_cmd.ready)):
            m.d.sync += [wc_row.eq(wc_row + 1), wc_addr.eq(wc_addr + d.c_stride)]
            with m.If(wc_row == R - 1):
                m.d.comb += wq_cmd.r_en.eq(1)
                m.d.sync += wc_setup.eq(0)
        m.d.sync += outstanding.eq(outstanding + (self.wr_cmd.valid & self.wr_cmd.ready)
                                   - self.wr_done)
        m.d.comb += self.idle.eq((wq_cmd.level == 0) & (wq_data.level == 0) & ~wc_setup
                                 & (outstanding == 0))

        # data side: the C rows, cut into words
        wd = data.View(layout, wq_data.r_data)
        wd_row = Signal(range(R))
        wd_word = Signal(range(max(2, words_per_row)))
        orow = self.i_stream.payload
        row_bits = Signal(32 * C)
        m.d.comb += row_bits.eq(orow.data.as_value())
        n_valid = Signal(18)            # columns of this tile inside the matrix
        left = d.n - wd.n0
        m.d.comb += n_valid.eq(Mux(left < C, left, C))
        wdata = self.wr_data.payload
        if row_bytes >= bpw:
            chunks = [row_bits[8 * bpw * w:8 * bpw * (w + 1)] for w in range(words_per_row)]
            m.d.comb += wdata.data.eq(Array(chunks)[wd_word])
            for t in range(bpw):
                m.d.comb += wdata.strb[t].eq(
                    ((Cat(Const(t, wlog), wd_word) if wlog else wd_word) >> 2) < n_valid)
        else:
            off = Signal(range(bpw))
            m.d.comb += off.eq(Cat(Const(0, 2), wd.n0)[:wlog])   # (n0 * 4) mod bus bytes
            m.d.comb += wdata.data.eq(row_bits << (off * 8))
            row_strb = Cat(*[(c < n_valid).replicate(4) for c in range(C)])
            m.d.comb += wdata.strb.eq(row_strb << off)
        wd_in = (wd.m0 + wd_row) < d.m
        row_end = wd_word == row_words(wd.n0) - 1
        m.d.comb += [
            self.wr_data.valid.eq(wq_data.r_rdy & self.i_stream.valid & wd_in),
            self.i_stream.ready.eq(wq_data.r_rdy & (~wd_in | (self.wr_data.ready & row_end))),
        ]
        with m.If(self.wr_data.valid & self.wr_data.ready):
            m.d.sync += wd_word.eq(Mux(row_end, 0, wd_word + 1))
        with m.If(self.i_stream.valid & self.i_stream.ready):
            m.d.sync += wd_row.eq(wd_row + 1)
            with m.If(wd_row == R - 1):
                m.d.comb += wq_data.r_en.eq(1)
                m.d.sync += wd_row.eq(0)
        return m
