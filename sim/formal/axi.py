"""AXI property checkers for formal verification (SymbiYosys).

Each checker is a :class:`~amaranth.lib.wiring.Component` that only watches a bus: its ``bus``
port has the members of the AXI signature it checks, all as inputs, and a proof harness
connects them with :func:`watch`. The checker emits ``Assert``, ``Assume`` and ``Cover``
statements, which become ``$check`` cells in the RTLIL.

A checker is told which side of the bus is the design under test (``dut="manager"`` or
``dut="subordinate"``). Every property is about the signals one side drives: if that side is
the DUT it is asserted, otherwise it is assumed. So the environment of a proof is any legal
AXI partner: arbitrary back-pressure, responses at any time they are allowed, and (for AXI4
writes) W beats before or after their AW.

The sync domain's reset is a free input of a harness: every check is off in a cycle with reset
high, and all VALIDs must be low in the cycle after it. The checkers keep their own state
(handshake history, queues of burst lengths, outstanding counts) in registers of their own.

The AXI4 checkers cover one ID (the DMA masters use ID 0): ``*ID`` must be 0.

The checkers spell out the AXI encodings (:data:`BURST_INCR`, :data:`RESP_OKAY`, ...) from the
AXI specification themselves: they share only the bus signatures with the design, so a wrong
constant in the design is checked against the specification's, not against itself.
"""

from amaranth import Array, Cat, Module, Mux, ResetSignal, Signal
from amaranth.hdl import Assert, Assume, Cover
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from rtl.csr import AXI4LiteSignature
from rtl.dma import AXI4ReadSignature, AXI4WriteSignature

__all__ = ["AXI4LiteChecker", "AXI4ReadChecker", "AXI4WriteChecker", "monitor_signature",
           "watch", "Queue", "BURST_FIXED", "BURST_INCR", "BURST_WRAP", "RESP_OKAY",
           "RESP_EXOKAY", "RESP_SLVERR", "RESP_DECERR", "axsize"]

#: AxBURST encodings (AXI specification, table "Burst type encoding").
BURST_FIXED, BURST_INCR, BURST_WRAP = 0b00, 0b01, 0b10
#: xRESP encodings (AXI specification, table "RRESP and BRESP encoding").
RESP_OKAY, RESP_EXOKAY, RESP_SLVERR, RESP_DECERR = 0b00, 0b01, 0b10, 0b11


def axsize(data_width: int) -> int:
    """AxSIZE of a full-width beat: log2 of the bytes a beat carries (1 byte is 0b000)."""
    nbytes = data_width // 8
    if data_width % 8 or nbytes & (nbytes - 1) or not 1 <= nbytes <= 128:
        raise ValueError(f"data_width must be 8 times a power of 2 up to 1024, not "
                         f"{data_width!r}")
    return {1: 0b000, 2: 0b001, 4: 0b010, 8: 0b011, 16: 0b100, 32: 0b101, 64: 0b110,
            128: 0b111}[nbytes]

MANAGER, SUBORDINATE = "manager", "subordinate"


def monitor_signature(signature: wiring.Signature) -> wiring.Signature:
    """``signature``'s members, every one an input: the port of something that only watches."""
    return wiring.Signature({name: In(member.shape)
                             for name, member in signature.members.items()})


def watch(m: Module, monitor, bus) -> None:
    """Drive a checker's ``monitor`` port from the bus interface ``bus`` (comb)."""
    for name in monitor.signature.members:
        m.d.comb += getattr(monitor, name).eq(getattr(bus, name))


class Queue:
    """A small register FIFO inside a checker (``push``/``pop`` are comb, the rest sync).

    ``level`` counts the entries; ``head`` is the oldest (valid when ``level != 0``). Pushing
    into a full queue is left to the caller to forbid, by an assertion or an assumption.
    """

    def __init__(self, m: Module, name: str, width: int, depth: int):
        self.depth = depth
        self.entries = Array(Signal(width, name=f"{name}_{i}") for i in range(depth))
        self.rd = Signal(range(depth), name=f"{name}_rd")
        self.wr = Signal(range(depth), name=f"{name}_wr")
        self.level = Signal(range(depth + 1), name=f"{name}_level")
        self.push = Signal(name=f"{name}_push")
        self.pop = Signal(name=f"{name}_pop")
        self.w_data = Signal(width, name=f"{name}_w_data")
        self.head = Signal(width, name=f"{name}_head")
        self.full = Signal(name=f"{name}_full")
        m.d.comb += [self.head.eq(self.entries[self.rd]), self.full.eq(self.level == depth)]
        with m.If(self.push):
            m.d.sync += [self.entries[self.wr].eq(self.w_data),
                         self.wr.eq(Mux(self.wr == depth - 1, 0, self.wr + 1))]
        with m.If(self.pop):
            m.d.sync += self.rd.eq(Mux(self.rd == depth - 1, 0, self.rd + 1))
        m.d.sync += self.level.eq(self.level + self.push - self.pop)


class _Checker(wiring.Component):
    """What the checkers share: the side under test, reset tracking, handshake rules."""

    def __init__(self, signature: wiring.Signature, dut: str):
        if dut not in (MANAGER, SUBORDINATE):
            raise ValueError(f"dut must be {MANAGER!r} or {SUBORDINATE!r}, not {dut!r}")
        self.dut = dut
        self._props = []
        super().__init__({"bus": Out(monitor_signature(signature))})

    def _by(self, side: str, test, message: str):
        """A property of what ``side`` drives: asserted on the DUT, assumed of the rest."""
        kind = Assert if side == self.dut else Assume
        return kind(test, f"{side} {message}", src_loc_at=1)

    def _setup(self, m: Module):
        """Sets ``self.live`` (no reset now) and ``self.after_reset`` (reset last cycle)."""
        self.live = Signal()
        self.after_reset = Signal()
        past_rst = Signal(init=1)       # reset to 1 by the reset itself, and at the start
        m.d.sync += past_rst.eq(ResetSignal())
        m.d.comb += [self.live.eq(~ResetSignal()), self.after_reset.eq(past_rst)]

    def _handshake(self, m: Module, side: str, channel: str, valid, ready, payload):
        """VALID low after reset; once up, VALID and the payload hold until READY."""
        prev_valid = Signal(name=f"{channel}_prev_valid")
        prev_ready = Signal(name=f"{channel}_prev_ready")
        payload = Cat(*payload)
        prev_payload = Signal(len(payload), name=f"{channel}_prev_payload")
        m.d.sync += [prev_valid.eq(valid), prev_ready.eq(ready), prev_payload.eq(payload)]
        with m.If(self.live):
            with m.If(self.after_reset):
                m.d.comb += self._by(side, ~valid, f"{channel}: VALID low after reset")
            with m.Elif(prev_valid & ~prev_ready):
                m.d.comb += [
                    self._by(side, valid, f"{channel}: VALID held until READY"),
                    self._by(side, payload == prev_payload,
                             f"{channel}: payload stable while VALID and not READY"),
                ]
            m.d.comb += Cover(valid & ~ready, f"{channel}: back-pressure")
        hs = Signal(name=f"{channel}_handshake")
        m.d.comb += hs.eq(self.live & valid & ready)
        return hs


class _AXI4Checker(_Checker):
    """Burst format rules of an AXI4 address channel, and the optional address window."""

    def __init__(self, signature, dut, *, data_width, addr_width, max_burst, max_bursts,
                 window):
        if not isinstance(max_burst, int) or not 1 <= max_burst <= 256:
            raise ValueError(f"max_burst must be in 1..256, not {max_burst!r}")
        if not isinstance(max_bursts, int) or max_bursts < 1:
            raise ValueError(f"max_bursts must be a positive integer, not {max_bursts!r}")
        self.data_width, self.addr_width = data_width, addr_width
        self.max_burst, self.max_bursts, self.window = max_burst, max_bursts, window
        self.shift = (data_width // 8).bit_length() - 1
        super().__init__(signature, dut)
        if window:
            # [window_lo, window_hi): the byte range every burst must stay in.
            self.window_lo = Signal(addr_width + 1)
            self.window_hi = Signal(addr_width + 1)

    def _address(self, m, ch: str, hs):
        """Format of the address channel ``ch`` ("ar"/"aw"): INCR, full size, no 4 KB crossing,
        at most ``max_burst`` beats, inside the window."""
        bus = self.bus
        valid = getattr(bus, f"{ch}valid")
        addr = getattr(bus, f"{ch}addr")
        beats = Signal(9, name=f"{ch}_beats")
        m.d.comb += beats.eq(getattr(bus, f"{ch}len") + 1)
        end = Signal(self.addr_width + 1, name=f"{ch}_end")    # one past the last byte
        m.d.comb += end.eq(addr + (beats << self.shift))
        ch_up = ch.upper()
        with m.If(self.live & valid):
            m.d.comb += [
                self._by(MANAGER, getattr(bus, f"{ch}burst") == BURST_INCR, f"{ch_up}: INCR"),
                self._by(MANAGER, getattr(bus, f"{ch}size") == axsize(self.data_width),
                         f"{ch_up}: full bus size"),
                self._by(MANAGER, addr[:self.shift] == 0, f"{ch_up}: aligned to the bus"),
                self._by(MANAGER, beats <= self.max_burst, f"{ch_up}: at most max_burst beats"),
                self._by(MANAGER, addr[:12] + (beats << self.shift) <= 4096,
                         f"{ch_up}: no 4 KB boundary crossed"),
                self._by(MANAGER, getattr(bus, f"{ch}id") == 0, f"{ch_up}: ID 0"),
            ]
            if self.window:
                m.d.comb += self._by(
                    MANAGER, (self.window_lo <= addr) & (end <= self.window_hi),
                    f"{ch_up}: burst inside [window_lo, window_hi)")
        m.d.comb += Cover(hs & (beats == self.max_burst), f"{ch_up}: a burst of max_burst beats")
        return beats


class AXI4ReadChecker(_AXI4Checker):
    """The AR and R channels of AXI4.

    Properties: handshake rules of AR and R; every AR an INCR burst of the full bus size, of at
    most ``max_burst`` beats, aligned, not crossing 4 KB (and inside ``[window_lo, window_hi)``
    if ``window``); at most ``max_bursts`` bursts in flight; an R beat only for a burst in
    flight, RLAST on exactly its last beat, RID 0.

    Parameters
    ----------
    data_width, addr_width : int
    dut : {"manager", "subordinate"}
    max_burst : int
        Longest burst, in beats.
    max_bursts : int
        Bursts in flight (accepted on AR, last R beat not yet seen) the manager may have.
    window : bool
        Add ``window_lo``/``window_hi`` inputs and check every burst lies inside.

    Members
    -------
    bus : all of AXI4ReadSignature's members, as inputs
    beats_in_flight : Out(range(max_burst * max_bursts + 1))
        Beats asked for and not yet received.
    """

    def __init__(self, data_width: int, addr_width: int, *, dut: str = MANAGER,
                 max_burst: int = 16, max_bursts: int = 4, window: bool = False):
        super().__init__(AXI4ReadSignature(addr_width, data_width), dut, data_width=data_width,
                         addr_width=addr_width, max_burst=max_burst, max_bursts=max_bursts,
                         window=window)
        self.beats_in_flight = Signal(range(max_burst * max_bursts + 1))

    def elaborate(self, platform):
        m = Module()
        bus = self.bus
        self._setup(m)
        ar = self._handshake(m, MANAGER, "AR", bus.arvalid, bus.arready,
                             [bus.arid, bus.araddr, bus.arlen, bus.arsize, bus.arburst,
                              bus.arcache, bus.arprot])
        r = self._handshake(m, SUBORDINATE, "R", bus.rvalid, bus.rready,
                            [bus.rid, bus.rdata, bus.rresp, bus.rlast])
        beats = self._address(m, "ar", ar)

        bursts = Queue(m, "ar_q", 9, self.max_bursts)
        count = Signal(8)                                  # beats of the head burst received
        head_done = Signal()
        m.d.comb += [bursts.push.eq(ar), bursts.w_data.eq(beats),
                     head_done.eq(count + 1 == bursts.head), bursts.pop.eq(r & head_done)]
        with m.If(r):
            m.d.sync += count.eq(Mux(head_done, 0, count + 1))
        m.d.sync += self.beats_in_flight.eq(self.beats_in_flight + Mux(ar, beats, 0) - r)
        with m.If(self.live):
            m.d.comb += self._by(MANAGER, ~(ar & bursts.full),
                                 f"AR: at most max_bursts={self.max_bursts} bursts in flight")
            with m.If(bus.rvalid):
                m.d.comb += [
                    self._by(SUBORDINATE, bursts.level != 0, "R: only for a burst in flight"),
                    self._by(SUBORDINATE, bus.rlast == head_done, "R: RLAST on the last beat"),
                    self._by(SUBORDINATE, bus.rid == 0, "R: RID 0"),
                ]
        m.d.comb += Cover(bursts.level == self.max_bursts, "R: max_bursts in flight")
        return m


class AXI4WriteChecker(_AXI4Checker):
    """The AW, W and B channels of AXI4, with W beats allowed before their AW.

    Properties: handshake rules of AW, W and B; AW bursts as in :class:`AXI4ReadChecker`;
    WLAST on exactly the last beat of each burst, bursts matched to AWs in order: a W burst
    that starts before its AW is checked when the AW arrives, with at most ``max_w_ahead``
    whole W bursts ahead of their AWs; at most ``max_bursts`` AWs without a response; a B
    response only for a burst whose AW and last W beat have both been accepted, BID 0.

    Parameters
    ----------
    data_width, addr_width, dut, max_burst, window
        As :class:`AXI4ReadChecker`.
    max_bursts : int
        AWs accepted whose response has not arrived.
    max_w_ahead : int
        Whole W bursts sent before their AW.

    Members
    -------
    bus : all of AXI4WriteSignature's members, as inputs
    """

    def __init__(self, data_width: int, addr_width: int, *, dut: str = MANAGER,
                 max_burst: int = 16, max_bursts: int = 4, max_w_ahead: int = 2,
                 window: bool = False):
        if not isinstance(max_w_ahead, int) or max_w_ahead < 1:
            raise ValueError(f"max_w_ahead must be a positive integer, not {max_w_ahead!r}")
        self.max_w_ahead = max_w_ahead
        super().__init__(AXI4WriteSignature(addr_width, data_width), dut, data_width=data_width,
                         addr_width=addr_width, max_burst=max_burst, max_bursts=max_bursts,
                         window=window)

    def elaborate(self, platform):
        m = Module()
        bus = self.bus
        self._setup(m)
        aw = self._handshake(m, MANAGER, "AW", bus.awvalid, bus.awready,
                             [bus.awid, bus.awaddr, bus.awlen, bus.awsize, bus.awburst,
                              bus.awcache, bus.awprot])
        w = self._handshake(m, MANAGER, "W", bus.wvalid, bus.wready,
                            [bus.wdata, bus.wstrb, bus.wlast])
        b = self._handshake(m, SUBORDINATE, "B", bus.bvalid, bus.bready, [bus.bid, bus.bresp])
        beats = self._address(m, "aw", aw)
        wend = Signal()
        m.d.comb += wend.eq(w & bus.wlast)

        # AW lengths whose W burst is not finished, and lengths of W bursts finished before
        # their AW; at most one of the two holds entries.
        aws = Queue(m, "aw_q", 9, self.max_bursts)
        early = Queue(m, "w_early", 9, self.max_w_ahead)
        wcount = Signal(9)                                 # beats of the current W burst
        m.d.sync += wcount.eq(Mux(wend, 0, wcount + w))

        # The length of the W burst in progress, if its AW is known (queued, or this cycle's).
        known, length, aw_now = Signal(), Signal(9), Signal()
        m.d.comb += aw_now.eq(aw & (aws.level == 0) & (early.level == 0))
        m.d.comb += [known.eq((aws.level != 0) | aw_now),
                     length.eq(Mux(aws.level != 0, aws.head, beats))]
        m.d.comb += [
            aws.push.eq(aw & (early.level == 0) & ~(aw_now & wend)),
            aws.w_data.eq(beats),
            aws.pop.eq(wend & (aws.level != 0)),
            early.push.eq(wend & ~known),
            early.w_data.eq(wcount + 1),
            early.pop.eq(aw & (early.level != 0)),
        ]
        with m.If(self.live):
            with m.If(bus.wvalid & known):
                m.d.comb += [
                    self._by(MANAGER, wcount < length, "W: no more beats than AWLEN + 1"),
                    self._by(MANAGER, bus.wlast == (wcount + 1 == length),
                             "W: WLAST on exactly the last beat of its AW's burst"),
                ]
            with m.If(bus.wvalid & ~known):
                m.d.comb += self._by(MANAGER, bus.wlast | (wcount + 1 < self.max_burst),
                                     "W: a burst before its AW ends within max_burst beats")
            with m.If(aw_now):
                m.d.comb += self._by(MANAGER, wcount < beats,
                                     "AW: no more beats already sent than AWLEN + 1")
            with m.If(aw & (early.level != 0)):
                m.d.comb += self._by(MANAGER, beats == early.head,
                                     "AW: length of the W burst sent before it")
            m.d.comb += [
                self._by(MANAGER, ~(aws.push & ~aws.pop & aws.full),
                         f"AW: at most max_bursts={self.max_bursts} bursts ahead of their data"),
                self._by(MANAGER, ~(early.push & ~early.pop & early.full),
                         f"W: at most max_w_ahead={self.max_w_ahead} bursts ahead of their AW"),
            ]

        # Responses: one per burst whose AW and last W beat were both accepted.
        aw_open = Signal(range(self.max_bursts + 2))      # AWs without a response
        w_open = Signal(range(self.max_bursts + self.max_w_ahead + 2))
        m.d.sync += [aw_open.eq(aw_open + aw - b), w_open.eq(w_open + wend - b)]
        with m.If(self.live):
            m.d.comb += self._by(MANAGER, ~(aw & (aw_open == self.max_bursts) & ~b),
                                 f"AW: at most max_bursts={self.max_bursts} without response")
            with m.If(bus.bvalid):
                m.d.comb += [
                    self._by(SUBORDINATE, (aw_open != 0) & (w_open != 0),
                             "B: only after the burst's AW and last W beat"),
                    self._by(SUBORDINATE, bus.bid == 0, "B: BID 0"),
                ]
        m.d.comb += [Cover(early.level != 0, "W: a whole burst before its AW"),
                     Cover(b & (aw_open == self.max_bursts), "B: max_bursts awaiting response")]
        return m


class AXI4LiteChecker(_Checker):
    """AXI4-Lite: handshakes, and responses matched to requests.

    Properties: handshake rules of all five channels (BVALID/RVALID and their payloads held
    until accepted); a B response only when an AW and a W are both accepted and not answered,
    an R response only for an accepted AR; at most ``max_outstanding`` of each; a response at
    most ``max_latency`` cycles after it is owed (so every request gets exactly one).

    Parameters
    ----------
    addr_width, data_width : int
    dut : {"manager", "subordinate"}
    max_outstanding : int
        Requests of one direction accepted and not yet answered.
    max_latency : int
        Cycles from a request being accepted (AW and W both, or AR) to its response's VALID.

    Members
    -------
    bus : all of AXI4LiteSignature's members, as inputs
    """

    def __init__(self, addr_width: int, data_width: int = 32, *, dut: str = SUBORDINATE,
                 max_outstanding: int = 1, max_latency: int = 4):
        self.max_outstanding, self.max_latency = max_outstanding, max_latency
        super().__init__(AXI4LiteSignature(addr_width, data_width), dut)
        n = range(max_outstanding + 2)
        self.aw_open, self.w_open, self.ar_open = Signal(n), Signal(n), Signal(n)

    def elaborate(self, platform):
        m = Module()
        bus = self.bus
        self._setup(m)
        aw = self._handshake(m, MANAGER, "AW", bus.awvalid, bus.awready,
                             [bus.awaddr, bus.awprot])
        w = self._handshake(m, MANAGER, "W", bus.wvalid, bus.wready, [bus.wdata, bus.wstrb])
        b = self._handshake(m, SUBORDINATE, "B", bus.bvalid, bus.bready, [bus.bresp])
        ar = self._handshake(m, MANAGER, "AR", bus.arvalid, bus.arready,
                             [bus.araddr, bus.arprot])
        r = self._handshake(m, SUBORDINATE, "R", bus.rvalid, bus.rready,
                            [bus.rdata, bus.rresp])
        m.d.sync += [self.aw_open.eq(self.aw_open + aw - b), self.w_open.eq(self.w_open + w - b),
                     self.ar_open.eq(self.ar_open + ar - r)]
        top = self.max_outstanding
        b_wait = Signal(range(self.max_latency + 2))
        r_wait = Signal(range(self.max_latency + 2))
        b_owed = (self.aw_open != 0) & (self.w_open != 0)
        m.d.sync += [b_wait.eq(Mux(b_owed & ~bus.bvalid, b_wait + 1, 0)),
                     r_wait.eq(Mux((self.ar_open != 0) & ~bus.rvalid, r_wait + 1, 0))]
        with m.If(self.live):
            m.d.comb += [
                self._by(SUBORDINATE, ~(aw & (self.aw_open == top) & ~b),
                         f"AW: at most {top} outstanding"),
                self._by(SUBORDINATE, ~(w & (self.w_open == top) & ~b),
                         f"W: at most {top} outstanding"),
                self._by(SUBORDINATE, ~(ar & (self.ar_open == top) & ~r),
                         f"AR: at most {top} outstanding"),
                self._by(SUBORDINATE, ~bus.bvalid | b_owed, "B: only for an accepted AW and W"),
                self._by(SUBORDINATE, ~bus.rvalid | (self.ar_open != 0),
                         "R: only for an accepted AR"),
                self._by(SUBORDINATE, b_wait < self.max_latency,
                         f"B: within {self.max_latency} cycles of being owed"),
                self._by(SUBORDINATE, r_wait < self.max_latency,
                         f"R: within {self.max_latency} cycles of being owed"),
                self._by(SUBORDINATE, (self.aw_open <= top) & (self.w_open <= top)
                         & (self.ar_open <= top), "outstanding counts in range"),
            ]
        m.d.comb += [Cover(b, "B: a write answered"), Cover(r, "R: a read answered")]
        return m
