"""AXI4 DMA read master: memory -> stream, in INCR bursts that never cross 4 KB."""

from amaranth import Module, Mux, Signal
from amaranth.lib import data, fifo, stream, wiring
from amaranth.lib.wiring import In, Out

__all__ = ["AXI4ReadSignature", "DmaReader", "read_command_layout"]

BURST_INCR = 0b01
RESP_OKAY = 0b00


class AXI4ReadSignature(wiring.Signature):
    """The read half of AXI4 (AR and R channels), from the manager's side."""

    def __init__(self, addr_width: int, data_width: int):
        super().__init__({
            "arid": Out(1), "araddr": Out(addr_width), "arlen": Out(8), "arsize": Out(3),
            "arburst": Out(2),
            "arcache": Out(4), "arprot": Out(3), "arvalid": Out(1), "arready": In(1),
            "rid": In(1), "rdata": In(data_width), "rresp": In(2), "rlast": In(1), "rvalid": In(1),
            "rready": Out(1),
        })


def read_command_layout(addr_width: int) -> data.StructLayout:
    """Payload of :attr:`DmaReader.cmd`: a run of bus words starting at ``addr``."""
    return data.StructLayout({"addr": addr_width, "beats": 24})


class DmaReader(wiring.Component):
    """Reads runs of bus words from memory and streams them out, in order.

    Each command names a byte address (aligned to the bus width; the low bits are ignored) and
    a number of bus words (``beats >= 1``; a command of 0 beats is consumed and does
    nothing). The reader splits it into INCR bursts of at most ``burst_beats`` words that do
    not cross a 4 KB boundary, and keeps up to ``outstanding`` bursts in flight. An address
    is issued only once the output FIFO has room for its whole burst, so ``rready`` is always
    high and a slow consumer never blocks the memory bus. The last word of each command has
    ``last`` set.

    A read answered with SLVERR or DECERR sets :attr:`error` (sticky until reset); the words
    are still delivered, so nothing downstream hangs.

    Parameters
    ----------
    data_width : {64, 128, 256, 512}
    addr_width : {32, 40, 64}
    burst_beats : int
        Longest burst (1..256 words).
    outstanding : int
        Bursts in flight (the output FIFO holds ``burst_beats * outstanding`` words).

    Members
    -------
    cmd : In(stream.Signature(read_command_layout(addr_width)))
    o_stream : Out(stream.Signature({"data": data_width, "last": 1}))
    bus : Out(AXI4ReadSignature(addr_width, data_width))
    error, busy : Out(1)
    """

    def __init__(self, data_width: int = 128, addr_width: int = 32, *, burst_beats: int = 16,
                 outstanding: int = 4):
        if data_width not in (64, 128, 256, 512):
            raise ValueError(f"data_width must be 64, 128, 256 or 512, not {data_width!r}")
        if addr_width not in (32, 40, 64):
            raise ValueError(f"addr_width must be 32, 40 or 64, not {addr_width!r}")
        if not isinstance(burst_beats, int) or not 1 <= burst_beats <= 256:
            raise ValueError(f"burst_beats must be in 1..256, not {burst_beats!r}")
        if not isinstance(outstanding, int) or outstanding < 1:
            raise ValueError(f"outstanding must be a positive integer, not {outstanding!r}")
        self.data_width, self.addr_width = data_width, addr_width
        self.burst_beats, self.outstanding = burst_beats, outstanding
        super().__init__({
            "cmd": In(stream.Signature(read_command_layout(addr_width))),
            "o_stream": Out(stream.Signature(data.StructLayout(
                {"data": data_width, "last": 1}))),
            "bus": Out(AXI4ReadSignature(addr_width, data_width)),
            "error": Out(1),
            "busy": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        bus = self.bus
        bpb = self.data_width // 8                    # bytes per beat
        shift = bpb.bit_length() - 1
        depth = self.burst_beats * self.outstanding
        m.submodules.data_fifo = data_fifo = fifo.SyncFIFOBuffered(
            width=self.data_width + 1, depth=depth)
        m.submodules.len_fifo = len_fifo = fifo.SyncFIFO(width=24, depth=4)

        # ---- address side -----------------------------------------------------------------
        active = Signal()
        addr = Signal(self.addr_width)
        remaining = Signal(24)
        credits = Signal(range(depth + 1), init=depth)
        to_boundary = Signal(range(4096 // bpb + 1))
        m.d.comb += to_boundary.eq((4096 - addr[:12]) >> shift)
        n = Signal(range(self.burst_beats + 1))
        limit = Signal(range(4096 // bpb + self.burst_beats + 1))
        m.d.comb += limit.eq(Mux(to_boundary < self.burst_beats, to_boundary, self.burst_beats))
        m.d.comb += n.eq(Mux(remaining < limit, remaining, limit))

        cmd = self.cmd.payload
        m.d.comb += self.cmd.ready.eq(~active & len_fifo.w_rdy)
        with m.If(self.cmd.valid & self.cmd.ready & (cmd.beats != 0)):
            m.d.sync += [active.eq(1), addr.eq(cmd.addr >> shift << shift),
                         remaining.eq(cmd.beats)]
        m.d.comb += [len_fifo.w_en.eq(self.cmd.valid & self.cmd.ready & (cmd.beats != 0)),
                     len_fifo.w_data.eq(cmd.beats)]

        issued = Signal()
        m.d.comb += [
            bus.arid.eq(0), bus.araddr.eq(addr), bus.arlen.eq(n - 1), bus.arsize.eq(shift),
            bus.arburst.eq(BURST_INCR), bus.arcache.eq(0b0011), bus.arprot.eq(0),
            issued.eq(bus.arvalid & bus.arready),
        ]
        # arvalid, once raised, stays up until accepted (credits only grow meanwhile).
        with m.If(issued):
            m.d.sync += [bus.arvalid.eq(0), addr.eq(addr + (n << shift)),
                         remaining.eq(remaining - n)]
            with m.If(remaining == n):
                m.d.sync += active.eq(0)
        with m.Elif(active & ~bus.arvalid & (credits >= n)):
            m.d.sync += bus.arvalid.eq(1)

        popped = Signal()
        m.d.comb += popped.eq(self.o_stream.valid & self.o_stream.ready)
        m.d.sync += credits.eq(credits - Mux(issued, n, 0) + popped)

        # ---- data side --------------------------------------------------------------------
        count = Signal(24)
        beat = Signal()
        m.d.comb += [bus.rready.eq(1), beat.eq(bus.rvalid)]
        last = Signal()
        m.d.comb += last.eq(count == len_fifo.r_data - 1)
        with m.If(beat):
            m.d.sync += count.eq(Mux(last, 0, count + 1))
            with m.If(bus.rresp != RESP_OKAY):
                m.d.sync += self.error.eq(1)
        m.d.comb += [
            len_fifo.r_en.eq(beat & last),
            data_fifo.w_en.eq(beat),
            data_fifo.w_data.eq(bus.rdata | (last << self.data_width)),
            self.o_stream.valid.eq(data_fifo.r_rdy),
            self.o_stream.payload.data.eq(data_fifo.r_data[:self.data_width]),
            self.o_stream.payload.last.eq(data_fifo.r_data[self.data_width]),
            data_fifo.r_en.eq(self.o_stream.ready),
            self.busy.eq(active | len_fifo.r_rdy | data_fifo.r_rdy),
        ]
        return m
