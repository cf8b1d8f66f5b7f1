"""A first-word-fall-through FIFO whose flags and counts are registers."""

from amaranth import Module, Mux, Signal
from amaranth.lib import memory, wiring
from amaranth.lib.wiring import In, Out

from ._util import counter

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

    Latency and throughput: a word written to an empty FIFO is readable 2 cycles later; one
    word a cycle in and out.

    Parameters
    ----------
    width : int
    depth : int
        Entries (at least 2).
    slice_bits : int or None
        Build a wide FIFO's memory as side-by-side memories of at most this many bits, each
        with its own copy of the read and write pointers (the same on every cycle), so that
        no pointer drives the memory of every bit; one count and one set of flags decide for
        all. ``None``: one memory.

    Members
    -------
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
    """

    def __init__(self, *, width: int, depth: int, slice_bits: int | None = None):
        if not isinstance(width, int) or width < 0:
            raise TypeError(f"width must be a non-negative integer, not {width!r}")
        if not isinstance(depth, int) or depth < 2:
            raise ValueError(f"depth must be an integer of at least 2, not {depth!r}")
        if slice_bits is not None and (not isinstance(slice_bits, int) or slice_bits < 1):
            raise ValueError(f"slice_bits must be None or a positive integer, not "
                             f"{slice_bits!r}")
        self.width, self.depth, self.slice_bits = width, depth, slice_bits
        super().__init__({
            "w_data": In(width), "w_en": In(1), "w_rdy": Out(1),
            "r_data": Out(width), "r_en": In(1), "r_rdy": Out(1),
            "level": Out(range(depth + 1)), "empty": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
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

        def incr(p):
            return Mux(p == inner - 1, 0, p + 1) if inner & (inner - 1) else p + 1

        step = self.slice_bits if self.slice_bits is not None else max(1, self.width)
        for k, lo in enumerate(range(0, max(1, self.width), step)):
            hi = min(self.width, lo + step)
            sfx = f"{k}" if k else ""
            storage = memory.Memory(shape=hi - lo, depth=inner, init=[])
            m.submodules[f"storage{sfx}"] = storage
            w_port = storage.write_port()
            r_port = storage.read_port(domain="sync")
            produce = Signal(range(inner), name=f"produce{sfx}")
            consume = Signal(range(inner), name=f"consume{sfx}")
            m.d.comb += [w_port.addr.eq(produce), w_port.data.eq(self.w_data[lo:hi]),
                         w_port.en.eq(write), r_port.addr.eq(consume), r_port.en.eq(read),
                         self.r_data[lo:hi].eq(r_port.data)]
            with m.If(write):
                m.d.sync += produce.eq(incr(produce))
            with m.If(read):
                m.d.sync += consume.eq(incr(consume))

        with m.If(read):
            m.d.sync += self.r_rdy.eq(1)
        with m.Elif(self.r_en):
            m.d.sync += self.r_rdy.eq(0)
        m.d.comb += [self.level.eq(count + self.r_rdy), self.empty.eq(~filled & ~self.r_rdy)]
        return m
