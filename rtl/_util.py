"""Small helpers shared by the RTL components."""

from amaranth import Cat, ClockDomain, ClockSignal, Const, DomainRenamer, Mux, Signal, Value

__all__ = ["FIFO_SLICE_BITS", "SLICE_BITS", "bit_slices", "carry_select_add", "counter",
           "delay", "occupancy", "wide_accumulator"]

#: The widest a row of C (``cols`` int32 and flags) is held under one set of control flops:
#: the write-back's row slices are built in slices of this many bits
#: (``RegisterSlice(slice_bits=...)``), so that a skid flag drives a few hundred loads, not
#: ``32 * cols``.
SLICE_BITS = 256
#: The same for the output FIFO, whose slices are whole FIFOs (each with its own count and
#: flags, all reset): twice as wide, so that their reset loads grow half as fast with the
#: columns, while a slice's read enable still drives about 512 loads.
FIFO_SLICE_BITS = 2 * SLICE_BITS


def bit_slices(width: int, slice_bits: int | None) -> list:
    """``(lo, hi)`` of each slice of a ``width``-bit word cut every ``slice_bits`` bits (one
    slice when ``slice_bits`` is ``None`` or at least ``width``); ValueError naming
    ``slice_bits`` unless it is ``None`` or a positive integer."""
    if slice_bits is None:
        return [(0, width)]
    if not isinstance(slice_bits, int) or isinstance(slice_bits, bool) or slice_bits < 1:
        raise ValueError(f"slice_bits must be None or a positive integer, not {slice_bits!r}")
    return [(lo, min(width, lo + slice_bits)) for lo in range(0, width, slice_bits)] \
        or [(0, width)]


def delay(m, sig, n: int, name: str, *, reset_less: bool = False):
    """``sig`` delayed by ``n`` registers in ``m``'s ``sync`` domain (``sig`` itself if 0).

    ``reset_less``: for data whose every use is qualified by a (reset) flag — the registers
    then hang on no reset net (neither ``rst`` nor a ``ResetInserter``'s soft reset) and a
    synthesiser may pack the chain into SRLs."""
    for s in range(n):
        r = Signal.like(sig, name=f"{name}_d{s}", reset_less=reset_less)
        m.d.sync += r.eq(sig)
        sig = r
    return sig


def wide_accumulator(m, name: str, addend, clear, *, width: int = 64):
    """A ``width``-bit register that accumulates ``addend`` (added every cycle; drive 0 for
    none), with no carry chain longer than 32 bits: the addend is registered, the low 32 bits
    add it with their carry registered, and the high bits add the addend's high bits and that
    carry the next cycle. The value (returned, ``width`` bits) trails the additions by 2 to 3
    cycles; ``clear`` zeroes it (an addition in flight is dropped). For counters and
    statistics, where a few cycles of lag do not matter."""
    hi_width = width - 32
    add_q = Signal(len(addend), name=f"{name}_add")
    lo = Signal(32, name=f"{name}_lo")
    carry = Signal(name=f"{name}_carry")
    hi_add = Signal(max(1, len(addend) - 32), name=f"{name}_hi_add")
    hi = Signal(hi_width, name=f"{name}_hi")
    lo_sum = lo + add_q[:32]
    with m.If(clear):
        m.d.sync += [add_q.eq(0), lo.eq(0), carry.eq(0), hi_add.eq(0), hi.eq(0)]
    with m.Else():
        m.d.sync += [add_q.eq(addend), lo.eq(lo_sum[:32]), carry.eq(lo_sum[32]),
                     hi_add.eq(add_q[32:] if len(addend) > 32 else 0),
                     hi.eq(hi + hi_add + carry)]
    return Cat(lo, hi)


def occupancy(m, name: str, capacity: int, push, pop):
    """A count of entries (``0..capacity``) that ``push`` adds one to and ``pop`` takes one
    from each cycle, with ``room`` (count < capacity) as a register of its own.

    The count's neighbours, count + 1 and count - 1, are registers too, so ``push`` and
    ``pop`` only select the next count (a LUT, no carry chain after them), and ``room`` is set
    from the old count compared with constants: a handshake that depends on ``room`` and feeds
    ``push`` is followed by a LUT or two before the next register. Use it beside a
    ``SyncFIFO`` of ``capacity`` entries, pushed and popped as the FIFO is, instead of its
    ``w_rdy`` (which is ``level != depth``; a ``SyncFIFOBuffered``'s, or a
    :class:`rtl.fifo.Fifo`'s, follows its inner queue, which can be full while the whole holds
    fewer than ``depth``), or beside a queue with no flags at all. Returns ``room``; see
    :func:`counter` for the count itself."""
    return counter(m, name, capacity, push, pop)[1]


def counter(m, name: str, capacity: int, push, pop):
    """:func:`occupancy`'s count: returns ``(count, room, filled)``, the count (a register)
    and the registers ``count < capacity`` and ``count != 0``."""
    shape = range(-1, capacity + 2)
    count = Signal(shape, name=f"{name}_count")
    up = Signal(shape, name=f"{name}_up", init=1)         # count + 1
    down = Signal(shape, name=f"{name}_down", init=-1)    # count - 1
    room = Signal(name=f"{name}_room", init=1)
    filled = Signal(name=f"{name}_filled")
    with m.If(push & ~pop):
        m.d.sync += [count.eq(up), up.eq(up + 1), down.eq(count),
                     room.eq(count != capacity - 1), filled.eq(1)]
    with m.Elif(pop & ~push):
        m.d.sync += [count.eq(down), up.eq(count), down.eq(down - 1), room.eq(1),
                     filled.eq(count != 1)]
    return count, room, filled


def carry_select_add(a, b, width: int, *, piece: int | None = None) -> Value:
    """``(a + b) mod 2**width`` as a carry-select adder: no carry chain longer than ``piece``
    (by default a third of ``width``, at least 8).

    Each ``piece``-bit slice of the operands is added twice in parallel, with a carry in of 0
    and of 1; the slices' carries then resolve in a LUT each (carry out = the carry-0 sum's
    carry, or the carry-1 sum's when a carry comes in), and a multiplexer per slice picks its
    sum. A 64-bit add is then about ``piece / 8`` carry blocks, a LUT or two and a multiplexer
    deep instead of ``width / 8`` carry blocks. For ``b = 1`` (an incrementer) a slice's carry
    in is the AND of the bits below it. Combinational; the result is ``width`` bits."""
    increment = isinstance(b, int) and b == 1
    if piece is None:
        # three slices at most: the last slice's carry in is then a function of the first
        # two slices' carries (3 inputs), which the sum's multiplexer LUT takes in
        piece = max(8, -(-width // 3))
    a = Value.cast(a)
    b = Value.cast(b)
    a = a[:width] if len(a) >= width else a.as_unsigned()
    b = b[:width] if len(b) >= width else b.as_unsigned()
    sums = []
    if increment:
        # an incrementer: a piece takes the carry when every bit below it is one (an AND in
        # LUTs beside the pieces' chains, not a ripple through their carry outs)
        for lo in range(0, width, piece):
            n = min(piece, width - lo)
            a_i = a[lo:lo + n] if lo < len(a) else Const(0, n)
            up = (a_i + 1)[:n]
            sums.append(up if lo == 0 else Mux(a[:lo].all(), up, a_i))
        return Cat(*sums)
    carry = Const(0)
    for lo in range(0, width, piece):
        n = min(piece, width - lo)
        a_i = a[lo:lo + n] if lo < len(a) else Const(0, n)
        b_i = b[lo:lo + n] if lo < len(b) else Const(0, n)
        s0 = a_i + b_i                                       # n + 1 bits
        s1 = (Cat(Const(1, 1), a_i) + Cat(Const(1, 1), b_i))[1:]   # a_i + b_i + 1, one adder
        sums.append(Mux(carry, s1[:n], s0[:n]))
        carry = s0[n] | (s1[n] & carry)
    return Cat(*sums)


def own_reset(m, name: str, part, reset: Signal):
    """``part`` in a clock domain of its own, ``sync``'s clock with ``reset`` as its only
    reset (added to ``m``; returns the renamed part to add as a submodule).

    ``reset`` must be a register that the domain reset sets (a per-part registered copy of a
    soft reset, initialised to 1): the part is then reset by the external reset too, a cycle
    later, but no flip-flop or LUT of the part reads the external reset net itself, which
    (as ``rst | copy`` in every part) reached over a thousand loads."""
    cd = ClockDomain(f"{name}_d", local=True)
    m.domains += cd
    m.d.comb += [cd.clk.eq(ClockSignal()), cd.rst.eq(reset)]
    return DomainRenamer(cd.name)(part)
