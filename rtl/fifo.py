"""A first-word-fall-through FIFO whose flags and counts are registers."""

from amaranth import Module, Mux, Signal
from amaranth.lib import memory, wiring
from amaranth.lib.wiring import In, Out

from ._util import bit_slices, counter

__all__ = ["Fifo"]


class Fifo(wiring.Component):
    """A drop-in for :class:`amaranth.lib.fifo.SyncFIFOBuffered`, cycle for cycle, built so
    that no carry chain follows a handshake.

    The same ports, the same behaviour on every cycle (``tests/test_fifo.py`` runs both side
    by side on random traffic): ``depth - 1`` entries in a memory read through its registered
    port, and one in the output register; ``w_rdy`` is high while the memory has room, and a
    word written to an empty FIFO is on ``r_data`` two cycles later (``r_rdy``).

    The difference is in how it is built. In ``SyncFIFOBuffered`` the memory's count is
    ``count + 1`` or ``count - 1`` after the write and read handshakes, and ``w_rdy`` and the
    inner "not empty" are compares of that count; a handshake that depends on other logic
    is followed by the count's adder. Here the count's neighbours (count + 1, count - 1) and
    both flags are registers, set from the old count and picked by the handshakes
    (:func:`rtl._util.counter`), so ``w_en``, ``r_en`` and the flags are a LUT or two
    from the next register.

    Parameters
    ----------
    width : int
    depth : int
        Entries (at least 2).
    slice_bits : int or None
        Build a wide FIFO as side-by-side FIFOs of at most this many bits, each with its own
        pointers and flags (the same on every cycle: they see the same handshakes), so that no
        pointer or read enable drives the memory of every bit; the flags are the first
        slice's. ``None``: one FIFO.
    lookahead : bool
        Also give the word the output register takes next (:attr:`r_next`) and when it takes
        it (:attr:`r_load`), so that a user can keep copies of a field of :attr:`r_data` in
        registers of its own, each driving a share of that field's loads (an asynchronous
        read port beside the registered one: distributed RAM has both).

    Attributes
    ----------
    w_data : In(width)
    w_en : In(1)
    w_rdy : Out(1)
    r_data : Out(width)
    r_en : In(1)
    r_rdy : Out(1)
    level : Out(range(depth + 1))
        Entries held (combinational: the memory's count plus the output register).
    empty : Out(1)
        No entry held (``level == 0``, from two registers: no add before it).
    r_next : Out(width)
        With ``lookahead``: the word the output register holds after a cycle with
        :attr:`r_load` high (``r_data`` is a register taking ``r_next`` when ``r_load``).
    r_load : Out(1)
        With ``lookahead``: the output register takes :attr:`r_next` at the next clock edge.

    Latency
    -------
    A word written to an empty FIFO is readable 2 cycles later.

    Throughput
    ----------
    One word a cycle in and out.
    """

    def __init__(self, *, width: int, depth: int, slice_bits: int | None = None,
                 lookahead: bool = False):
        if not isinstance(width, int) or width < 0:
            raise TypeError(f"width must be a non-negative integer, not {width!r}")
        if not isinstance(depth, int) or depth < 2:
            raise ValueError(f"depth must be an integer of at least 2, not {depth!r}")
        self.slices = bit_slices(width, slice_bits)      # validates slice_bits
        self.width, self.depth, self.slice_bits = width, depth, slice_bits
        self.lookahead = bool(lookahead)
        super().__init__({
            "w_data": In(width), "w_en": In(1), "w_rdy": Out(1),
            "r_data": Out(width), "r_en": In(1), "r_rdy": Out(1),
            "level": Out(range(depth + 1)), "empty": Out(1),
            **({"r_next": Out(width), "r_load": Out(1)} if self.lookahead else {}),
        })

    def elaborate(self, platform):
        m = Module()
        if len(self.slices) > 1:
            parts = []
            for lo, hi in self.slices:
                part = m.submodules[f"slice{len(parts)}"] = Fifo(
                    width=hi - lo, depth=self.depth, lookahead=self.lookahead)
                m.d.comb += [part.w_data.eq(self.w_data[lo:hi]), part.w_en.eq(self.w_en),
                             part.r_en.eq(self.r_en), self.r_data[lo:hi].eq(part.r_data)]
                if self.lookahead:
                    m.d.comb += self.r_next[lo:hi].eq(part.r_next)
                parts.append(part)
            if self.lookahead:
                m.d.comb += self.r_load.eq(parts[0].r_load)
            m.d.comb += [self.w_rdy.eq(parts[0].w_rdy), self.r_rdy.eq(parts[0].r_rdy),
                         self.level.eq(parts[0].level), self.empty.eq(parts[0].empty)]
            return m
        inner = self.depth - 1
        write = Signal()
        read = Signal()
        # the memory's count, with "room" (w_rdy) and "not empty" as registers
        count, w_rdy, filled = counter(m, "mem", inner, write, read)

        m.d.comb += [
            self.w_rdy.eq(w_rdy),
            write.eq(self.w_en & w_rdy),
            read.eq(filled & (~self.r_rdy | self.r_en)),
        ]

        storage = m.submodules.storage = memory.Memory(shape=self.width, depth=inner, init=[])
        w_port = storage.write_port()
        r_port = storage.read_port(domain="sync")
        produce = Signal(range(inner))
        consume = Signal(range(inner))

        def incr(p):
            return Mux(p == inner - 1, 0, p + 1) if inner & (inner - 1) else p + 1

        m.d.comb += [w_port.addr.eq(produce), w_port.data.eq(self.w_data), w_port.en.eq(write),
                     r_port.addr.eq(consume), r_port.en.eq(read), self.r_data.eq(r_port.data)]
        with m.If(write):
            m.d.sync += produce.eq(incr(produce))
        with m.If(read):
            m.d.sync += consume.eq(incr(consume))
        if self.lookahead:
            # the same word as the registered port's: the addresses read and written differ
            # whenever ``read`` is high (the memory is neither empty nor written at the head)
            peek = storage.read_port(domain="comb")
            m.d.comb += [peek.addr.eq(consume), self.r_next.eq(peek.data), self.r_load.eq(read)]

        with m.If(read):
            m.d.sync += self.r_rdy.eq(1)
        with m.Elif(self.r_en):
            m.d.sync += self.r_rdy.eq(0)
        m.d.comb += [self.level.eq(count + self.r_rdy), self.empty.eq(~filled & ~self.r_rdy)]
        return m
