"""The DMA reader's words -> the A or B gearbox, by routing entries."""

from amaranth import Module, Mux, Signal, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from .fifo import Fifo
from .loader import route_layout

__all__ = ["ReadRouter"]


class ReadRouter(wiring.Component):
    """Sends each read row's words to the gearbox of its operand.

    A routing entry on :attr:`routes` says that the next ``rows`` rows (runs of words ending
    with ``last``) on :attr:`i_stream` go to :attr:`a_stream` (``path`` 0) or :attr:`b_stream`
    (``path`` 1). Entries queue in a FIFO of ``depth``, so the loads ahead of the reader's
    words can be announced early. The numpy model is :func:`sim.models.engine.route`.

    Parameters
    ----------
    data_width : int
        Bus width.
    depth : int
        Routing entries queued.

    Attributes
    ----------
    routes : In(stream.Signature(route_layout()))
    i_stream : In(stream.Signature({"data": data_width, "last": 1}))
    a_stream, b_stream : Out(stream.Signature(data_width))

    Latency
    -------
    Combinational from a word to its output (``ready`` follows the chosen output's). An
    entry can route words from the second cycle after it arrives.

    Throughput
    ----------
    One word a cycle. An entry of ``rows = 0`` would stall (the load sequencer never sends
    one).
    """

    def __init__(self, data_width: int = 128, depth: int = 8):
        self.data_width, self.depth = data_width, depth
        super().__init__({
            "routes": In(stream.Signature(route_layout())),
            "i_stream": In(stream.Signature(data.StructLayout({"data": data_width,
                                                               "last": 1}))),
            "a_stream": Out(stream.Signature(data_width)),
            "b_stream": Out(stream.Signature(data_width)),
        })

    def elaborate(self, platform):
        m = Module()
        # The queue holds rows - 2 (a row after the first is the entry's last when that many
        # have passed) and whether the entry is a single row.
        layout = data.StructLayout({"path": 1, "rows_m2": unsigned(16), "single": 1})
        m.submodules.queue = queue = Fifo(width=layout.size, depth=self.depth)
        entry = data.View(layout, queue.w_data)
        rows = self.routes.payload.rows
        m.d.comb += [entry.path.eq(self.routes.payload.path),
                     entry.rows_m2.eq(rows - 2),
                     entry.single.eq(rows == 1),
                     queue.w_en.eq(self.routes.valid), self.routes.ready.eq(queue.w_rdy)]
        head = data.View(layout, queue.r_data)
        lasts = Signal(16)           # rows of the head entry already passed
        # The next row ends the head entry: for a head not yet started (``fresh``) its
        # ``single`` bit, else a register set as each row passes, so that the queue's read
        # enable (and through it its level) is a few gates from registers.
        fresh = Signal(init=1)
        at_end_r = Signal()
        at_end = Mux(fresh, head.single, at_end_r)
        word = self.i_stream
        to_a = queue.r_rdy & (head.path == 0)
        to_b = queue.r_rdy & (head.path == 1)
        m.d.comb += [
            self.a_stream.payload.eq(word.payload.data),
            self.b_stream.payload.eq(word.payload.data),
            self.a_stream.valid.eq(word.valid & to_a),
            self.b_stream.valid.eq(word.valid & to_b),
            word.ready.eq((to_a & self.a_stream.ready) | (to_b & self.b_stream.ready)),
        ]
        with m.If(word.valid & word.ready & word.payload.last):
            with m.If(at_end):
                m.d.comb += queue.r_en.eq(1)
                m.d.sync += [lasts.eq(0), fresh.eq(1)]
            with m.Else():
                m.d.sync += [lasts.eq(lasts + 1), fresh.eq(0),
                             at_end_r.eq(lasts == head.rows_m2)]
        return m
