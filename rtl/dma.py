"""AXI4 DMA read master: memory -> stream, in INCR bursts that never cross 4 KB."""

from amaranth import Cat, Module, Mux, Signal, unsigned
from amaranth.lib import data, fifo, memory, stream, wiring
from amaranth.lib.wiring import In, Out

from ._util import carry_select_add, occupancy
from .fifo import Fifo

__all__ = ["AXI4ReadSignature", "AXI4WriteSignature", "DmaReader", "DmaWriter",
           "dma_command_layout", "dma_write_layout"]

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


class AXI4WriteSignature(wiring.Signature):
    """The write half of AXI4 (AW, W and B channels), from the manager's side."""

    def __init__(self, addr_width: int, data_width: int):
        super().__init__({
            "awid": Out(1), "awaddr": Out(addr_width), "awlen": Out(8), "awsize": Out(3),
            "awburst": Out(2), "awcache": Out(4), "awprot": Out(3), "awvalid": Out(1),
            "awready": In(1),
            "wdata": Out(data_width), "wstrb": Out(data_width // 8), "wlast": Out(1),
            "wvalid": Out(1), "wready": In(1),
            "bid": In(1), "bresp": In(2), "bvalid": In(1), "bready": Out(1),
        })


def _check_params(data_width, addr_width, burst_beats, outstanding):
    if data_width not in (64, 128, 256, 512):
        raise ValueError(f"data_width must be 64, 128, 256 or 512, not {data_width!r}")
    if addr_width not in (32, 40, 64):
        raise ValueError(f"addr_width must be 32, 40 or 64, not {addr_width!r}")
    if not isinstance(burst_beats, int) or not 1 <= burst_beats <= 256:
        raise ValueError(f"burst_beats must be in 1..256, not {burst_beats!r}")
    if not isinstance(outstanding, int) or outstanding < 1:
        raise ValueError(f"outstanding must be a positive integer, not {outstanding!r}")


def _select_count(m, name, count, n, spend, add, at_least=None):
    """``count - (spend ? n : 0) + add``, and whether that is ``>= at_least``: the four sums
    (and compares) are computed from ``count`` and ``n`` (registers) beside the late
    ``spend`` and ``add`` decisions, which then only select one (a LUT after them, no carry
    chain). Returns ``(next, at_least_next)`` (the second None without ``at_least``)."""
    sums = {}
    for s in (0, 1):
        for a in (0, 1):
            v = Signal.like(count, name=f"{name}_s{s}a{a}")
            m.d.comb += v.eq(count - (n if s else 0) + a)
            sums[s, a] = v
    nxt = Signal.like(count, name=f"{name}_next")
    ok = Signal(name=f"{name}_ok") if at_least is not None else None
    with m.Switch(Cat(add, spend)):
        for (s, a), v in sums.items():
            with m.Case(a | s << 1):
                m.d.comb += nxt.eq(v)
                if ok is not None:
                    m.d.comb += ok.eq(v >= at_least)
    return nxt, ok


def _burst_splitter(m, addr, remaining, burst_beats, shift):
    """The next burst of a run of ``remaining`` words at ``addr``: its length (at most
    ``burst_beats``, the rest, and the way to the next 4 KB boundary) and whether it is the
    run's last. Combinational; every comparison is as narrow as ``burst_beats``.

    The words to the boundary, ``page - a`` with ``a`` the word index in the 4 KB page, are
    fewer than ``min(burst_beats, page)`` exactly when ``a > page - burst_beats`` and
    ``a != 0`` (a compare with a constant); they are then below ``2 ** k``, where ``2 ** k``
    divides ``page`` and exceeds ``burst_beats - 1`` or ``page - 1``, and so equal ``-a``
    modulo ``2 ** k``: no page-wide subtraction precedes the compare."""
    page = 4096 >> shift
    width = burst_beats.bit_length()           # limit < 2 ** width
    k = min(width, page.bit_length() - 1)
    word = addr[shift:12]
    near = Signal()
    m.d.comb += near.eq((word > page - burst_beats) if burst_beats < page else (word != 0))
    limit = Signal(range(burst_beats + 1))
    m.d.comb += limit.eq(Mux(near, (-word[:k])[:k], min(burst_beats, page)))
    small = Signal()
    m.d.comb += small.eq(remaining[width:] == 0)
    n = Signal(range(burst_beats + 1))
    last = Signal()
    # ``rest < limit`` without waiting for the negation: near the boundary the limit is
    # 2 ** k - a, so rest < limit exactly when rest + a < 2 ** k (one adder beside the
    # negation); elsewhere it is a compare with a constant.
    rest = remaining[:width]
    total = Signal(width + 1)
    m.d.comb += total.eq(rest + word[:k])
    below = Signal()
    at = Signal()
    m.d.comb += [below.eq(Mux(near, total[k:] == 0, rest < min(burst_beats, page))),
                 at.eq(Mux(near, total == (1 << k), rest == min(burst_beats, page)))]
    m.d.comb += [n.eq(Mux(small & below, rest, limit)),
                 last.eq(small & (below | at))]
    return n, last


def _queue(m, name, width, depth, push, data, pop):
    """A FIFO of ``depth`` entries (rounded up to a power of two) with no level, full or empty
    flags: the caller pushes only with room and pops only what it pushed (it counts them
    itself). The head is a register: each cycle it takes the entry that will be at the
    read pointer next cycle, read ahead from distributed RAM at the pointer or the one after
    it (``pop``), or the entry pushed this cycle when that one will be the oldest. So the head
    is exactly what an asynchronous read at the read pointer would give, with no LUTRAM read
    between it and what it feeds; ``push`` and ``pop`` only select it and advance the
    pointers. Returns ``(head, popped, to_head)``: the head, its next value if ``pop``
    (combinational, independent of ``pop``), and whether the entry pushed now is next cycle's
    head."""
    size = max(2, 1 << (depth - 1).bit_length())
    produce = Signal(range(size), name=f"{name}_produce")
    consume = Signal(range(size), name=f"{name}_consume")
    after = Signal(range(size), name=f"{name}_after", init=1)     # consume + 1
    head = Signal(width, name=f"{name}_head")
    # Two copies, one read at each pointer: two read ports of one memory whose outputs are
    # multiplexed would be merged by synthesis into one port with a multiplexed address,
    # putting ``pop`` before the read.
    rp0, rp1 = [], []
    for copy, rp in ((0, rp0), (1, rp1)):
        mem = memory.Memory(shape=unsigned(width), depth=size, init=[])
        m.submodules[f"{name}{copy}"] = mem
        wp = mem.write_port()
        rp.append(mem.read_port(domain="comb"))
        m.d.comb += [wp.addr.eq(produce), wp.data.eq(data), wp.en.eq(push)]
    rp0, rp1 = rp0[0], rp1[0]
    m.d.comb += [rp0.addr.eq(consume), rp1.addr.eq(after)]
    with m.If(push):
        m.d.sync += produce.eq(produce + 1)        # wraps at size
    with m.If(pop):
        m.d.sync += [consume.eq(after), after.eq(after + 1)]
    # the entry pushed now is next cycle's head when the pointer will then be at it; the
    # head after a pop and the head if none, each without ``pop``, which only picks
    to_head = Signal(name=f"{name}_to_head")
    popped, kept = Signal(width, name=f"{name}_popped"), Signal(width, name=f"{name}_kept")
    m.d.comb += [
        to_head.eq(push & Mux(pop, produce == after, produce == consume)),
        popped.eq(Mux(push & (produce == after), data, rp1.data)),
        kept.eq(Mux(push & (produce == consume), data, rp0.data)),
    ]
    m.d.sync += head.eq(Mux(pop, popped, kept))
    return head, popped, to_head


def _run_ends(m, name, depth, push, length, beat, *, gap=1):
    """The last word of each run: runs of ``length`` words (``length >= 1``, pushed with
    ``push``, at most ``depth`` waiting) arrive one word per ``beat``, in order; ``last``, a
    register, says that the next beat ends the oldest run.

    The lengths wait in a :func:`_queue` as ``length - 1`` with a flag for ``length == 1``;
    the oldest run's words still to come (less one) are a register counted down from its
    entry, so ``last`` is set from that register compared with 1, or on the beat that ends a
    run from the flag of the next head. A run's first
    beat must come at least ``gap`` cycles after its push (1: AXI's R after AR;
    with 2, the push and the length are registered first, so that nothing of the pusher's
    handshake precedes the queue). Returns ``(last, room)``: ``room`` (a register) is
    whether another run may be pushed (a run counts from its push, or with ``gap`` 2 from
    the cycle after, so ``room`` keeps a run in reserve). ``last`` is exact: in the cycle of
    a push the flag is taken from the pushed length when that run becomes the head."""
    assert gap in (1, 2)
    width = len(length)
    one = length == 1
    if gap == 2:
        # (the flag ``length == 1`` too: a compare of the whole length, which would otherwise
        # stand between the registered length and ``last``)
        push_r = Signal(name=f"{name}_push")
        length_r = Signal(width, name=f"{name}_length", reset_less=True)
        one_r = Signal(name=f"{name}_one", reset_less=True)
        m.d.sync += [push_r.eq(push), length_r.eq(length), one_r.eq(one)]
        push, length, one = push_r, length_r, one_r
    entry = Signal(width + 1, name=f"{name}_entry")
    m.d.comb += entry.eq(Cat((length - 1)[:width], one))
    last = Signal(name=f"{name}_last")
    pop = Signal(name=f"{name}_pop")
    m.d.comb += pop.eq(beat & last)
    room = occupancy(m, f"{name}_runs", depth - gap + 1, push, pop)
    head, popped, to_head = _queue(m, name, width + 1, depth, push, entry, pop)
    # the words of the oldest run still to come, less one: counted down from the run's
    # entry, so that ``last`` is set from a compare of one register with a constant, not
    # of a 24-bit count against the head
    rem = Signal(width, name=f"{name}_rem")
    with m.If(beat):
        m.d.sync += rem.eq(Mux(last, popped[:width], rem - 1))
    with m.Elif(to_head):
        m.d.sync += rem.eq(entry[:width])
    # a run's end: the next head's flag; within a run: whether one word is left after this
    # one; no beat: as it was, or a run pushed into the empty queue its flag
    m.d.sync += last.eq(Mux(beat, Mux(last, popped[width], rem == 1),
                            Mux(to_head, entry[width], last)))
    return last, room


class _DmaMaster(wiring.Component):
    """What the two DMA masters share: parameters, their checks, the command port."""

    def __init__(self, data_width, addr_width, burst_beats, outstanding, members):
        _check_params(data_width, addr_width, burst_beats, outstanding)
        self.data_width, self.addr_width = data_width, addr_width
        self.burst_beats, self.outstanding = burst_beats, outstanding
        super().__init__({
            "cmd": In(stream.Signature(dma_command_layout(addr_width))),
            **members,
            "error": Out(1),
            "busy": Out(1),
            "abort": In(1),
        })

    def _bursts(self, m, may_raise, cmd_room=1, first_from_registers=False):
        """The address side both masters share: commands -> INCR bursts.

        Splits each command into bursts (:func:`_burst_splitter`). A burst's length and
        whether it is its command's last are registers: computed from the command's payload
        when it is taken (its first burst is offered the next cycle), and for each further
        burst in the cycle after the previous one goes (so the bursts of one command go at
        most every other cycle; single-burst commands one a cycle). ``valid`` (returned) is
        combinational: it rises when ``may_raise(n)`` allows a burst of ``n`` beats (which
        must only go from false to true while a burst waits) and stays up until ``ready``
        (set by the caller) takes it, an abort included; an abort stops further bursts.
        ``addr`` and ``n`` only change when a burst is taken or none is offered, so they are
        stable while it waits. With ``first_from_registers`` the first burst's length, too, is
        computed from the address and count registers, the cycle after the take (its burst
        is offered 2 cycles after the take, not 1), so no splitter follows the command's
        payload. The next command is taken in the cycle its predecessor's last
        burst goes, if ``cmd_room``.

        Returns ``(active, valid, ready, issued, last_burst, addr, n, take)``: a command is
        being split, a burst is offered, the caller takes it, it is taken this cycle, it is
        its command's last, its address and length, and a command of at least one beat is
        taken this cycle.
        """
        shift = (self.data_width // 8).bit_length() - 1
        active = Signal()
        addr = Signal(self.addr_width)
        remaining = Signal(24)
        n = Signal(range(self.burst_beats + 1))
        last_burst = Signal()
        fresh = Signal()          # n and last_burst are those of addr and remaining
        valid = Signal()
        ready = Signal()
        issued = Signal()
        waiting = Signal()
        m.d.comb += [
            valid.eq(active & fresh & may_raise(n) & (~self.abort | waiting)),
            issued.eq(valid & ready),
        ]
        m.d.sync += waiting.eq(valid & ~ready)
        n_next, last_next = _burst_splitter(m, addr, remaining, self.burst_beats, shift)
        # A burst never crosses 4 KB: the next address is the offset in the page plus the
        # burst, and the page number, or the next page's when the burst ends on the
        # boundary -- registers, from the address and from the offered command's, a cycle
        # ahead: the next burst goes 2 cycles after a burst or 1 after a take (``took``
        # picks the command's).
        in_page = Signal(13)
        page_after = Signal(self.addr_width - 12)      # the address's next page
        page_after_cmd = Signal(self.addr_width - 12)  # the offered command's next page
        took = Signal()                                # a command was taken last cycle
        page_next = Mux(took, page_after_cmd, page_after)
        m.d.comb += in_page.eq(addr[:12] + (n << shift))
        with m.If(issued):
            m.d.sync += [addr.eq(Cat(in_page[:12], Mux(in_page[12], page_next, addr[12:]))),
                         remaining.eq(remaining - n),
                         fresh.eq(0)]
            with m.If(last_burst):
                m.d.sync += active.eq(0)
        # (not an Elif: a burst is only offered when fresh, so the two never coincide, and
        # n's next value then does not wait for the handshake)
        with m.If(~fresh):
            m.d.sync += [n.eq(n_next), last_burst.eq(last_next), fresh.eq(1)]
        with m.If(self.abort & ~valid):
            m.d.sync += active.eq(0)

        cmd = self.cmd.payload
        take = Signal()
        m.d.comb += [
            self.cmd.ready.eq((~active | (issued & last_burst)) & cmd_room & ~self.abort),
            take.eq(self.cmd.valid & self.cmd.ready & (cmd.beats != 0)),
        ]
        cmd_addr = Signal(self.addr_width)
        m.d.comb += cmd_addr.eq(cmd.addr >> shift << shift)
        if not first_from_registers:
            n_first, last_first = _burst_splitter(m, cmd_addr, cmd.beats, self.burst_beats,
                                                  shift)
        # (carry-select incrementers: 52 bits at a 64-bit address would chain 7 carry blocks)
        page_bits = self.addr_width - 12
        m.d.sync += [page_after.eq(carry_select_add(addr[12:], 1, page_bits)),
                     page_after_cmd.eq(carry_select_add(cmd_addr[12:], 1, page_bits)),
                     took.eq(take)]
        with m.If(take):
            m.d.sync += [active.eq(1), addr.eq(cmd_addr), remaining.eq(cmd.beats)]
            if first_from_registers:
                m.d.sync += fresh.eq(0)
            else:
                m.d.sync += [n.eq(n_first), last_burst.eq(last_first), fresh.eq(1)]
        return active, valid, ready, issued, last_burst, addr, n, take

    def _drive_address(self, m, channel, valid, addr, n):
        """Drive AXI address channel ``channel`` ("ar" or "aw") with an INCR burst."""
        bus = self.bus
        shift = (self.data_width // 8).bit_length() - 1
        m.d.comb += [
            getattr(bus, f"{channel}valid").eq(valid),
            getattr(bus, f"{channel}id").eq(0), getattr(bus, f"{channel}addr").eq(addr),
            getattr(bus, f"{channel}len").eq(n - 1), getattr(bus, f"{channel}size").eq(shift),
            getattr(bus, f"{channel}burst").eq(BURST_INCR),
            getattr(bus, f"{channel}cache").eq(0b0011), getattr(bus, f"{channel}prot").eq(0),
        ]


def dma_command_layout(addr_width: int) -> data.StructLayout:
    """Payload of the DMA masters' ``cmd``: a run of bus words starting at ``addr``."""
    return data.StructLayout({"addr": addr_width, "beats": 24})


def dma_write_layout(data_width: int) -> data.StructLayout:
    """Payload of :attr:`DmaWriter.i_stream`: a bus word and its byte strobes."""
    return data.StructLayout({"data": data_width, "strb": data_width // 8})


class DmaReader(_DmaMaster):
    """Reads runs of bus words from memory and streams them out, in order.

    Each command names a byte address (aligned to the bus width; the low bits are ignored) and
    a number of bus words (``beats >= 1``; a command of 0 beats is consumed and does
    nothing). The reader splits it into INCR bursts of at most ``burst_beats`` words that do
    not cross a 4 KB boundary, and keeps up to ``outstanding`` bursts in flight. An address
    is issued only once the output FIFO has room for a longest burst, so ``rready`` is always
    high and a slow consumer never blocks the memory bus. The last word of each command has
    ``last`` set.

    A read answered with SLVERR or DECERR sets :attr:`error`; an ``RLAST`` that disagrees
    with the burst's length sets :attr:`protocol` (both sticky until reset). The words are
    still delivered (counted by the reader's own burst lengths), so nothing downstream hangs.

    :attr:`abort` stops it issuing further bursts (a request already raised is still
    completed, as AXI requires) and refuses commands; the bursts in flight still arrive.
    :attr:`busy` falls once nothing is in flight or buffered; reset the reader then.

    Parameters
    ----------
    data_width : {64, 128, 256, 512}
    addr_width : {32, 40, 64}
    burst_beats : int
        Longest burst (1..256 words; 16 for AXI3 ports).
    outstanding : int
        Bursts in flight (the output FIFO holds ``burst_beats * outstanding`` words).

    Attributes
    ----------
    cmd : In(stream.Signature(dma_command_layout(addr_width)))
    o_stream : Out(stream.Signature({"data": data_width, "last": 1}))
    bus : Out(AXI4ReadSignature(addr_width, data_width))
    error, protocol, busy : Out(1)
    abort : In(1)

    Latency
    -------
    A command's first burst address is offered 2 cycles after the command is taken (its
    length computed from registers).

    Throughput
    ----------
    Further bursts every other cycle at most (so single-burst commands go one every 2
    cycles), the next command taken in the cycle the previous one's last burst is issued; at
    most ``outstanding`` bursts in flight, so a memory of latency ``L`` streams at full rate
    when ``outstanding`` bursts hold ``L`` beats.
    """

    def __init__(self, data_width: int = 128, addr_width: int = 32, *, burst_beats: int = 16,
                 outstanding: int = 4):
        super().__init__(data_width, addr_width, burst_beats, outstanding, {
            "o_stream": Out(stream.Signature(data.StructLayout(
                {"data": data_width, "last": 1}))),
            "bus": Out(AXI4ReadSignature(addr_width, data_width)),
            "protocol": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        bus = self.bus
        depth = self.burst_beats * self.outstanding
        m.submodules.data_fifo = data_fifo = Fifo(
            width=self.data_width + 1, depth=depth)
        # The lengths of the commands whose words are still to arrive, and of the bursts in
        # flight (at most `outstanding`): a beat's "last" and "last of its burst" are
        # registers (:func:`_run_ends`). A command waits in the queue from its take to its
        # last word's arrival (not its consumption: the flag travels with the word), and the
        # next command is taken only once the previous one's last burst is issued, so at most
        # `outstanding` commands with bursts in flight and the one being split wait: a queue
        # of `2 * outstanding + 2` (its room never binds) is a LUT-RAM read of one level
        # before ``last``, where one of `burst_beats * outstanding` would be a multiplexer
        # tree.
        beat = Signal()
        take_, issued_ = Signal(), Signal()
        n_ = Signal(range(self.burst_beats + 1))
        # (a command's first word comes 2 cycles after it is taken at the earliest: its first
        # burst is offered the cycle after, and R follows AR)
        last, cmd_room = _run_ends(m, "commands", 2 * self.outstanding + 2, take_,
                                   self.cmd.payload.beats, beat, gap=2)
        burst_last, burst_room = _run_ends(m, "bursts", self.outstanding, issued_, n_, beat)

        # ---- address side -----------------------------------------------------------------
        # A burst is asked for only when the data FIFO has room for a longest burst and
        # fewer than `outstanding` are in flight (both only grow while it waits). The room is
        # a register (`credits >= burst_beats`, set from the next count), so no compare of
        # the count with the burst's length lies between the FIFO and the address channel.
        # The two length queues' room likewise (:func:`rtl._util.occupancy`).
        credits = Signal(range(depth + 1), init=depth)
        credits_next = Signal.like(credits)
        room = Signal(init=1)
        # (the first burst's length from registers too, as the writer's, so that the
        # command's splitter is not behind the command slice on one path; a command's first
        # burst goes a cycle later)
        active, valid, ready, issued, _, addr, n, take = self._bursts(
            m, lambda n: room & burst_room, cmd_room, first_from_registers=True)
        self._drive_address(m, "ar", valid, addr, n)
        m.d.comb += [ready.eq(bus.arready), issued_.eq(issued), take_.eq(take), n_.eq(n)]

        popped = Signal()
        m.d.comb += popped.eq(self.o_stream.valid & self.o_stream.ready)
        room_next = Signal()
        c_next, r_next = _select_count(m, "credits", credits, n, issued, popped,
                                       at_least=self.burst_beats)
        m.d.comb += [credits_next.eq(c_next), room_next.eq(r_next)]
        m.d.sync += [credits.eq(credits_next), room.eq(room_next)]

        # ---- data side --------------------------------------------------------------------
        m.d.comb += [bus.rready.eq(1), beat.eq(bus.rvalid)]
        with m.If(beat):
            with m.If(bus.rresp != RESP_OKAY):
                m.d.sync += self.error.eq(1)
            with m.If(bus.rlast != burst_last):
                m.d.sync += self.protocol.eq(1)
        m.d.comb += [
            data_fifo.w_en.eq(beat),
            data_fifo.w_data.eq(bus.rdata | (last << self.data_width)),
            self.o_stream.valid.eq(data_fifo.r_rdy),
            self.o_stream.payload.data.eq(data_fifo.r_data[:self.data_width]),
            self.o_stream.payload.last.eq(data_fifo.r_data[self.data_width]),
            data_fifo.r_en.eq(self.o_stream.ready),
            self.busy.eq(active | (credits != depth)),
        ]
        return m


class DmaWriter(_DmaMaster):
    """Writes a stream of bus words to memory, one run of words per command.

    Each command names a byte address (aligned to the bus width) and a number of words; that
    many words are taken from :attr:`i_stream` and written in INCR bursts of at most
    ``burst_beats`` words that do not cross a 4 KB boundary, with up to ``outstanding`` bursts
    awaiting their write response. Each word carries its byte strobes.

    Words first enter a FIFO of ``2 * burst_beats``; a burst is formed only once all of its
    words are there, and then goes into two queues: its address to the AW channel, its
    length to the W channel. The two channels are independent, so the write data never waits
    for ``AWREADY`` (a subordinate may wait for ``WVALID`` before raising ``AWREADY``, AXI
    A3.3.1) and an address is never announced before its data can follow. Every payload
    comes from a FIFO head or a register and is held while its ``VALID`` waits.

    Every response is checked: SLVERR or DECERR sets :attr:`error` (sticky until reset).
    :attr:`done` pulses when the last response of a command has arrived, i.e. when its data
    is in memory.

    :attr:`abort` stops it forming bursts and refuses commands; bursts already formed are
    completed (their words are in the FIFO), from the next beat on with every strobe low
    (memory unchanged), and their responses awaited. :attr:`busy` falls once nothing is
    outstanding; reset the writer then.

    Attributes
    ----------
    cmd : In(stream.Signature(dma_command_layout(addr_width)))
    i_stream : In(stream.Signature(dma_write_layout(data_width)))
    bus : Out(AXI4WriteSignature(addr_width, data_width))
    error, busy, done : Out(1)
    abort : In(1)

    Latency
    -------
    A burst's address and first word go out :data:`FORM_LATENCY` cycles after its last word
    arrives.

    Throughput
    ----------
    One word per cycle.
    """

    #: Cycles from a burst's last word entering the FIFO to its address and first word on the
    #: bus.
    FORM_LATENCY = 3

    def __init__(self, data_width: int = 128, addr_width: int = 32, *, burst_beats: int = 16,
                 outstanding: int = 4):
        super().__init__(data_width, addr_width, burst_beats, outstanding, {
            "i_stream": In(stream.Signature(dma_write_layout(data_width))),
            "bus": Out(AXI4WriteSignature(addr_width, data_width)),
            "done": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        bus = self.bus
        B = self.burst_beats
        layout = dma_write_layout(self.data_width)
        m.submodules.data_fifo = data_fifo = Fifo(width=layout.size, depth=2 * B)
        # Formed bursts: address for AW, length for W, "ends a command" for B.
        aw_layout = data.StructLayout({"addr": self.addr_width, "len": range(B + 1)})
        # (at least 3 entries: see below)
        depth = max(3, self.outstanding)
        m.submodules.aw_fifo = aw_fifo = Fifo(width=aw_layout.size, depth=depth)
        m.submodules.w_fifo = w_fifo = Fifo(width=B.bit_length(), depth=depth)
        m.submodules.b_fifo = b_fifo = fifo.SyncFIFO(width=1, depth=self.outstanding)

        # Words in the data FIFO not yet given to a burst.
        free_words = Signal(range(2 * B + 1))
        taken_in = Signal()
        m.d.comb += [
            data_fifo.w_data.eq(self.i_stream.payload),
            data_fifo.w_en.eq(self.i_stream.valid),
            self.i_stream.ready.eq(data_fifo.w_rdy),
            taken_in.eq(self.i_stream.valid & data_fifo.w_rdy),
        ]

        # A burst is formed when its words are buffered and fewer than `outstanding` bursts
        # await a response (counted from the decision on: :func:`rtl._util.occupancy`, a
        # register). The three queues then have room: a burst leaves the AW and W queues
        # before its response can arrive (AXI A3.3.1), so they hold fewer than
        # `outstanding` bursts, and a FIFO of 3 or more entries holding fewer than its depth
        # accepts a write; the decision has few inputs and no FIFO level compare.
        issued_ = Signal()
        b_room = occupancy(m, "responses", self.outstanding, issued_,
                              bus.bvalid & b_fifo.r_rdy)
        def may_raise(n):
            return (free_words >= n) & b_room
        # (the first burst's length from registers: a C row's words take longer to buffer
        # than the cycle that costs, and the command's splitter stays off the burst's path)
        active, valid, ready, issued, last_burst, addr, n, _ = self._bursts(
            m, may_raise, first_from_registers=True)
        m.d.comb += issued_.eq(issued)
        # A formed burst enters the three queues a cycle later, from registers, so that the
        # burst decision is not followed by the queues' counts (their room is b_room's, which
        # counts the burst from the decision on).
        formed = Signal()
        formed_addr = Signal(self.addr_width, reset_less=True)
        formed_n = Signal(range(B + 1), reset_less=True)
        formed_last = Signal(reset_less=True)
        m.d.sync += [formed.eq(issued), formed_addr.eq(addr), formed_n.eq(n),
                     formed_last.eq(last_burst)]
        aw_in = data.View(aw_layout, aw_fifo.w_data)
        m.d.comb += [ready.eq(1),
                     aw_in.addr.eq(formed_addr), aw_in.len.eq(formed_n), aw_fifo.w_en.eq(formed),
                     w_fifo.w_data.eq(formed_n - 1), w_fifo.w_en.eq(formed),   # beats - 1
                     b_fifo.w_data.eq(formed_last), b_fifo.w_en.eq(formed)]
        m.d.sync += free_words.eq(_select_count(m, "free_words", free_words, n, issued,
                                                taken_in)[0])

        # ---- AW: the head of the address queue ---------------------------------------------
        aw_head = data.View(aw_layout, aw_fifo.r_data)
        self._drive_address(m, "aw", aw_fifo.r_rdy, aw_head.addr, aw_head.len)
        m.d.comb += aw_fifo.r_en.eq(bus.awready)

        # ---- W: the words of the head burst of the length queue ---------------------------
        # Strobes are cleared from the first beat after an abort (never during a beat).
        word = data.View(layout, data_fifo.r_data)
        count = Signal(range(B))
        wlast = Signal()
        kill = Signal()
        with m.If(~bus.wvalid | bus.wready):
            m.d.sync += kill.eq(self.abort)
        m.d.comb += [
            wlast.eq(count == w_fifo.r_data),
            bus.wdata.eq(word.data),
            bus.wstrb.eq(Mux(kill, 0, word.strb)),
            bus.wlast.eq(wlast),
            bus.wvalid.eq(w_fifo.r_rdy & data_fifo.r_rdy),
            data_fifo.r_en.eq(bus.wvalid & bus.wready),
            w_fifo.r_en.eq(bus.wvalid & bus.wready & wlast),
        ]
        with m.If(bus.wvalid & bus.wready):
            m.d.sync += count.eq(Mux(wlast, 0, count + 1))

        # ---- B ----------------------------------------------------------------------------
        m.d.comb += [bus.bready.eq(1), b_fifo.r_en.eq(bus.bvalid)]
        m.d.sync += self.done.eq(bus.bvalid & b_fifo.r_data)
        with m.If(bus.bvalid & (bus.bresp != RESP_OKAY)):
            m.d.sync += self.error.eq(1)
        m.d.comb += self.busy.eq(active | formed | b_fifo.r_rdy)
        return m
