"""A hostile AXI4 subordinate memory for cocotb testbenches, and a checker of its manager.

:class:`AxiMemory` answers a manager's AR/R and AW/W/B channels from a ``bytearray``, as harshly
as the AXI4 specification lets a subordinate: it limits the bursts in flight, answers after a
latency, waits for a burst's write data before taking its address if it likes (A3.3.1), pauses
any channel at random, and rejects bursts longer than the port takes. Its knobs have the names
and meanings of the native model's (``firmware/spec/ports.py``): ``outstanding_reads``,
``outstanding_writes``, ``read_latency``, ``write_latency``, ``max_burst``, ``write_order``,
``pause``.

It also checks the manager and lists what it got wrong in :attr:`AxiMemory.violations`: VALID
dropped or the payload changed before READY on AR, AW and W; a burst crossing 4 KB; ARSIZE or
AWSIZE other than the bus width; WLAST off the burst's last beat; a burst longer than
``max_burst``; X on a VALID or a payload; and (:meth:`AxiMemory.finish`) read data or write
responses left undelivered, write data without its address, or the reverse. Two legal things
the model does not implement are listed too: burst types other than INCR, and start addresses
not aligned to the bus width. Responses come in order, whatever their IDs (legal).

Timing, per rising edge: the manager's signals are sampled in the ``ReadOnly`` phase before the
edge (so the DUT's combinational answers to this cycle's READY/VALID are settled), the
handshakes are those seen there, and the memory's outputs for the next cycle are written right
after the edge, as the manager's flip-flops have already taken the old ones.

.. code-block:: python

    mem = AxiMemory(dut, dut.clk, dut.rst, read="mem_r__", write="mem_w__", size=1 << 20,
                    outstanding_reads=8, read_latency=40, max_burst=16, write_order="random",
                    pause=0.2, seed=1)
    mem.write(0x1000, data)
    ...
    mem.finish()
    assert not mem.violations, mem.violations
"""

from __future__ import annotations

import json
import logging
import random
from collections import deque
from dataclasses import dataclass, field

import cocotb
from cocotb.triggers import ReadOnly, RisingEdge

__all__ = ["AxiMemory", "KNOBS", "PRESETS", "ProtocolViolation", "port_knobs"]

#: The knobs, as in ``firmware/spec/ports.py``, and their values in the ``"ideal"`` port.
KNOBS = {"outstanding_reads": None, "outstanding_writes": None, "read_latency": 32,
         "write_latency": 9, "max_burst": 256, "write_order": "aw-first", "pause": 0.0}

#: Settings the testbenches run (``"zynq7-hp"``: the Pynq-Z1 port, made harsher: a longer read
#: latency, a random write order and more back-pressure than ``firmware/spec/ports.py``'s preset).
PRESETS = {
    "ideal": {},
    "deep": {"outstanding_reads": 8, "outstanding_writes": 8, "read_latency": 40,
             "write_latency": 40, "max_burst": 16, "write_order": "aw-first"},
    "narrow-w-first": {"outstanding_reads": 2, "outstanding_writes": 2, "read_latency": 12,
                       "write_latency": 12, "write_order": "w-first"},
    "random-pause": {"outstanding_reads": 4, "outstanding_writes": 4, "read_latency": 5,
                     "write_latency": 5, "write_order": "random", "pause": 0.3},
    "zynq7-hp": {"outstanding_reads": 8, "outstanding_writes": 8, "read_latency": 40,
                 "write_latency": 40, "max_burst": 16, "write_order": "random", "pause": 0.2},
}

WRITE_ORDERS = ("aw-first", "w-first", "random")


def port_knobs(port: str) -> dict:
    """The knobs of ``port``: a key of :data:`PRESETS` or a JSON object of knobs.

    >>> port_knobs('{"outstanding_reads": 1, "pause": 0.5}')
    {'outstanding_reads': 1, 'pause': 0.5}
    """
    if port in PRESETS:
        return dict(PRESETS[port])
    try:
        knobs = json.loads(port)
    except ValueError:
        raise ValueError(f"port must be one of {sorted(PRESETS)} or a JSON object of knobs, "
                         f"not {port!r}") from None
    unknown = set(knobs) - set(KNOBS)
    if unknown:
        raise ValueError(f"unknown knobs {sorted(unknown)}; the knobs are {list(KNOBS)}")
    return knobs
OKAY, SLVERR, DECERR = 0b00, 0b10, 0b11
INCR = 0b01


class ProtocolViolation(AssertionError):
    """The manager broke an AXI rule (raised only with ``raise_on_violation``)."""


@dataclass
class _Burst:
    addr: int
    beats: int
    size: int
    kind: int
    id: int
    cycle: int                      # of its AW/AR handshake; write data: of its last beat
                                    # (-1 while it is being received)
    too_long: bool = False
    reported: bool = False          # write data: its WLAST error is already listed
    beat: int = 0                   # read: beats sent; write: beats received
    data: list = field(default_factory=list)   # write: (data, strb) per beat
    due: int = 0                    # read: first beat; write: response


def _bit(signal) -> str:
    """``"0"``, ``"1"`` or an X/Z letter."""
    return str(signal.value)


def _int(value) -> int | None:
    try:
        return int(value)
    except ValueError:       # X or Z in it
        return None


class AxiMemory:
    """An AXI4 memory that answers a cocotb DUT's manager port, with knobs and a checker.

    Parameters
    ----------
    dut
        The cocotb handle whose signals are named ``<prefix><channel signal>``.
    clock, reset
        The DUT's clock and active-high synchronous reset handles.
    read, write : str or None
        Prefix of the read half (``araddr`` ... ``rready``) and of the write half (``awaddr``
        ... ``bready``), e.g. ``"bus__"``; ``None`` for a half the DUT lacks. ID signals are
        optional.
    size : int
        Bytes of memory, from address 0; beats beyond it are answered DECERR.
    outstanding_reads, outstanding_writes : int or None
        AR bursts accepted and not fully returned; AW bursts accepted whose B has not been
        taken. READY is low at the limit. ``None``: unlimited.
    read_latency : int
        Cycles from an AR handshake to the burst's first R beat (at least 1).
    write_latency : int
        Cycles from a burst's completion (its AW and last W beat) to its B (at least 1).
    max_burst : int
        Longest burst in beats; a longer one is a violation, answered SLVERR (and not written).
    write_order : {"aw-first", "w-first", "random"}
        ``"aw-first"``: W beats are taken only for bursts whose AW was taken. ``"w-first"``:
        AWREADY rises only once the burst's W beats have all arrived. ``"random"``: one of the
        two per burst.
    pause : float
        Probability, per channel per cycle, of ARREADY, AWREADY or WREADY low, or of a gap
        before the next RVALID or BVALID.
    seed : int
        Seed of the pauses and of the random write order.
    error : range
        Addresses answered SLVERR: read beats touching it, and write bursts touching it (whose
        beats inside it are not written), like a slave error from a peripheral.
    raise_on_violation : bool
        Raise :class:`ProtocolViolation` at the first violation as well as listing it.

    Attributes
    ----------
    violations : list of str
        What the manager got wrong, with the cycle and the channel, in order.
    mem : bytearray
        The memory.
    reads, writes : int
        Bursts answered so far.
    stats : dict
        What the knobs did: the most read and write bursts in flight (``"reads_in_flight"``,
        ``"writes_in_flight"``) and the write bursts whose AW was taken after all their data
        (``"aw_after_w"``), so that a test can tell that a setting bit.
    """

    def __init__(self, dut, clock, reset, read: str | None = None, write: str | None = None,
                 size: int = 1 << 16, *, outstanding_reads: int | None = None,
                 outstanding_writes: int | None = None, read_latency: int = 32,
                 write_latency: int = 9, max_burst: int = 256, write_order: str = "aw-first",
                 pause: float = 0.0, seed: int = 0, error: range = range(0),
                 raise_on_violation: bool = False, log: logging.Logger | None = None):
        if write_order not in WRITE_ORDERS:
            raise ValueError(f"write_order must be one of {WRITE_ORDERS}, not {write_order!r}")
        for name, value in (("outstanding_reads", outstanding_reads),
                            ("outstanding_writes", outstanding_writes)):
            if value is not None and (not isinstance(value, int) or value < 1):
                raise ValueError(f"{name} must be a positive integer or None, not {value!r}")
        if not isinstance(max_burst, int) or not 1 <= max_burst <= 256:
            raise ValueError(f"max_burst must be in 1..256, not {max_burst!r}")
        if not 0.0 <= pause < 1.0:
            raise ValueError(f"pause must be in [0, 1), not {pause!r}")
        self.clock, self.reset = clock, reset
        self.mem = bytearray(size)
        self.outstanding_reads, self.outstanding_writes = outstanding_reads, outstanding_writes
        self.read_latency, self.write_latency = max(1, read_latency), max(1, write_latency)
        self.max_burst, self.write_order, self.pause = max_burst, write_order, pause
        self.error = error
        self.raise_on_violation = raise_on_violation
        self.log = log or logging.getLogger(f"cocotb.{dut._name}.mem")
        self.violations: list[str] = []
        self.reads = self.writes = 0
        self.stats = {"reads_in_flight": 0, "writes_in_flight": 0, "aw_after_w": 0}
        self.cycle = 0
        self._rng = {c: random.Random(f"{seed}:{c}") for c in ("ar", "r", "aw", "w", "b", "order")}
        self._r = self._w = None
        if read is not None:
            self._r = self._signals(dut, read, ["araddr", "arlen", "arsize", "arburst", "arvalid",
                                                "arready", "rdata", "rresp", "rlast", "rvalid",
                                                "rready"], ["arid", "rid"])
            self.width = len(self._r["rdata"]) // 8
        if write is not None:
            self._w = self._signals(dut, write, ["awaddr", "awlen", "awsize", "awburst",
                                                 "awvalid", "awready", "wdata", "wstrb", "wlast",
                                                 "wvalid", "wready", "bresp", "bvalid", "bready"],
                                    ["awid", "bid"])
            self.width = len(self._w["wdata"]) // 8
        if read is None and write is None:
            raise ValueError("give the prefix of a read half, a write half or both")
        self._size_code = self.width.bit_length() - 1
        self._handles = {name: half[name]
                         for half, names in ((self._r, ("arready", "rvalid", "rdata", "rresp",
                                                        "rlast", "rid")),
                                             (self._w, ("awready", "wready", "bvalid", "bresp",
                                                        "bid")))
                         if half is not None for name in names}
        self._clear()
        self._task = cocotb.start_soon(self._run())

    @staticmethod
    def _signals(dut, prefix, names, optional):
        signals = {}
        for name in names + optional:
            handle = getattr(dut, prefix + name, None)
            if handle is None and name not in optional:
                raise AttributeError(f"{dut._name} has no {prefix + name}")
            signals[name] = handle
        return signals

    # -- memory ------------------------------------------------------------------------------

    def read(self, addr: int, length: int) -> bytes:
        """``length`` bytes from ``addr``."""
        return bytes(self.mem[addr:addr + length])

    def write(self, addr: int, data: bytes) -> None:
        """Store ``data`` at ``addr``."""
        self.mem[addr:addr + len(data)] = data

    # -- checks ------------------------------------------------------------------------------

    def _violation(self, channel: str, message: str) -> None:
        text = f"cycle {self.cycle}, {channel.upper()}: {message}"
        self.violations.append(text)
        self.log.error("AXI violation: %s", text)
        if self.raise_on_violation:
            raise ProtocolViolation(text)

    def finish(self) -> list[str]:
        """Call when the manager should be idle: anything left in flight is a violation.

        Read data not taken, write responses not taken, write data whose address never came
        (or the reverse) are listed, and :attr:`violations` is returned.
        """
        if self._ar_q or self._r_q:
            self._violation("r", f"{len(self._ar_q) + len(self._r_q)} read burst(s) never "
                                 "fully returned (RREADY never came?)")
        pending = len(self._b_q) + (self._b_out is not None)
        if pending:
            self._violation("b", f"{pending} write response(s) never taken")
        if self._aw_q or self._w_q:
            self._violation("w", f"{len(self._aw_q)} burst address(es) and {len(self._w_q)} "
                                 "burst(s) of write data left unmatched")
        return self.violations

    def status(self) -> str:
        """What is in flight: for the message of a time-out."""
        return (f"cycle {self.cycle}: {len(self._ar_q) + len(self._r_q)} read burst(s) in "
                f"flight ({self._r_q[0].beat if self._r_q else 0} beats of the oldest sent), "
                f"{len(self._aw_q)} AW waiting for data, {len(self._w_q)} W burst(s) waiting "
                f"for AW, {len(self._b_q) + (self._b_out is not None)} B pending; "
                f"{self.reads} reads and {self.writes} writes answered; VALID without READY "
                f"last cycle on {[c.upper() for c, h in self._held.items() if h] or 'none'}; "
                f"violations: {self.violations}")

    def _check_address(self, channel, burst):
        nbytes = burst.beats << burst.size
        if burst.kind != INCR:
            self._violation(channel, f"burst type {burst.kind:#04b} (only INCR is modelled)")
        if burst.size != self._size_code:
            self._violation(channel, f"size {burst.size} is not the bus width "
                                     f"({self._size_code})")
        if burst.addr % self.width:
            self._violation(channel, f"address {burst.addr:#x} not aligned to the bus width "
                                     "(unaligned bursts are not modelled)")
        if (burst.addr & ~0xFFF) != ((burst.addr + nbytes - 1) & ~0xFFF):
            self._violation(channel, f"burst {burst.addr:#x}+{nbytes} crosses 4 KB")
        if burst.beats > self.max_burst:
            burst.too_long = True
            self._violation(channel, f"burst of {burst.beats} beats > max_burst "
                                     f"{self.max_burst} (answered SLVERR)")

    def _check_held(self, channel, held, valid, payload):
        """AXI A3.2.1: once VALID is up, it and the payload stay until the handshake."""
        if held is None:
            return
        if valid != "1":
            self._violation(channel, "VALID dropped before READY")
        elif payload != held:
            self._violation(channel, f"payload changed while VALID and not READY: {held} -> "
                                     f"{payload}")

    # -- the per-cycle machine ---------------------------------------------------------------

    def _clear(self):
        self._ar_q: deque[_Burst] = deque()    # accepted, waiting for their latency
        self._r_q: deque[_Burst] = deque()     # latency passed: returning, in order
        self._aw_q: deque[_Burst] = deque()    # AW taken, data not complete
        self._w_q: deque[_Burst] = deque()     # data (complete or being received) without AW
        self._b_q: deque[tuple] = deque()   # (due cycle, resp, id), in order
        self._writes_open = 0                  # AW taken, B not taken
        self._aw_seen = self._w_seen = 0       # bursts whose AW / whose last W beat came
        self._orders: list[str] = []
        self._r_beat = None                    # (data, resp, last, id) being offered
        self._b_out = None
        self._held = {"ar": None, "aw": None, "w": None}
        self._out = {}

    def _order(self, index):
        while len(self._orders) <= index:
            order = self.write_order
            if order == "random":
                order = self._rng["order"].choice(("aw-first", "w-first"))
            self._orders.append(order)
        return self._orders[index]

    def _paused(self, channel):
        return self.pause and self._rng[channel].random() < self.pause

    def _drive(self, in_reset):
        out = {}
        if self._r is not None:
            room = (self.outstanding_reads is None
                    or len(self._ar_q) + len(self._r_q) < self.outstanding_reads)
            out["arready"] = int(not in_reset and room and not self._paused("ar"))
            if self._r_beat is None and not in_reset:
                self._next_read_beat()
            out["rvalid"] = int(self._r_beat is not None)
        if self._w is not None:
            aw_room = (self.outstanding_writes is None
                       or self._writes_open < self.outstanding_writes)
            aw_ok = self._order(self._aw_seen) == "aw-first" or self._w_seen > self._aw_seen
            w_ok = self._order(self._w_seen) == "w-first" or self._aw_seen > self._w_seen
            w_ahead = self._w_seen - self._aw_seen   # complete data bursts without their AW
            w_room = self.outstanding_writes is None or w_ahead < self.outstanding_writes
            out["awready"] = int(not in_reset and aw_room and aw_ok and not self._paused("aw"))
            out["wready"] = int(not in_reset and w_ok and w_room and not self._paused("w"))
            if self._b_out is None and not in_reset and self._b_q and \
                    self._b_q[0][0] <= self.cycle and not self._paused("b"):
                self._b_out = self._b_q.popleft()[1:]
            out["bvalid"] = int(self._b_out is not None)
        if self._r_beat is not None:
            data, resp, last, ident = self._r_beat
            out.update(rdata=data, rresp=resp, rlast=last, rid=ident)
        if self._b_out is not None:
            out.update(bresp=self._b_out[0], bid=self._b_out[1])
        for name, value in out.items():
            if self._out.get(name) != value:
                handle = self._handles.get(name)
                if handle is not None:
                    handle.value = value
                self._out[name] = value

    def _next_read_beat(self):
        while self._ar_q and self._ar_q[0].due <= self.cycle:
            self._r_q.append(self._ar_q.popleft())
        if not self._r_q or self._paused("r"):
            return
        burst = self._r_q[0]
        addr = burst.addr + (burst.beat << burst.size)
        nbytes = 1 << burst.size
        if burst.too_long:
            data, resp = 0, SLVERR
        elif addr + nbytes > len(self.mem):
            data, resp = 0, DECERR
        else:
            data = int.from_bytes(self.mem[addr:addr + nbytes], "little")
            resp = SLVERR if self._touches_error(addr, nbytes) else OKAY
        self._r_beat = (data, resp, int(burst.beat == burst.beats - 1), burst.id)

    def _touches_error(self, addr, nbytes):
        return bool(self.error) and addr < self.error.stop and self.error.start < addr + nbytes

    def _sample(self):
        """In ReadOnly: the handshakes of this cycle, and the checks of the held payloads."""
        got = {}
        if self._r is not None:
            s = self._r
            valid = _bit(s["arvalid"])
            payload = None
            if valid not in "01":
                self._violation("ar", f"ARVALID is {valid}")
            elif valid == "1":
                payload = tuple(_int(s[n].value) for n in ("araddr", "arlen", "arsize",
                                                           "arburst"))
                payload += (_int(s["arid"].value) if s["arid"] is not None else 0,)
                if None in payload:
                    self._violation("ar", f"X in the payload {payload}")
            self._check_held("ar", self._held["ar"], valid, payload)
            taken = valid == "1" and self._out["arready"]
            self._held["ar"] = payload if valid == "1" and not taken else None
            got["ar"] = payload if taken else None
            got["r"] = self._out["rvalid"] and _bit(s["rready"]) == "1"
        if self._w is not None:
            s = self._w
            valid = _bit(s["awvalid"])
            payload = None
            if valid not in "01":
                self._violation("aw", f"AWVALID is {valid}")
            elif valid == "1":
                payload = tuple(_int(s[n].value) for n in ("awaddr", "awlen", "awsize",
                                                           "awburst"))
                payload += (_int(s["awid"].value) if s["awid"] is not None else 0,)
                if None in payload:
                    self._violation("aw", f"X in the payload {payload}")
            self._check_held("aw", self._held["aw"], valid, payload)
            taken = valid == "1" and self._out["awready"]
            self._held["aw"] = payload if valid == "1" and not taken else None
            got["aw"] = payload if taken else None

            valid = _bit(s["wvalid"])
            payload = None
            if valid not in "01":
                self._violation("w", f"WVALID is {valid}")
            elif valid == "1":
                payload = (s["wdata"].value, _int(s["wstrb"].value), _int(s["wlast"].value))
                if None in payload[1:]:
                    self._violation("w", f"X in WSTRB or WLAST {payload[1:]}")
            self._check_held("w", self._held["w"], valid, payload)
            taken = valid == "1" and self._out["wready"]
            self._held["w"] = payload if valid == "1" and not taken else None
            got["w"] = payload if taken else None
            got["b"] = self._out["bvalid"] and _bit(s["bready"]) == "1"
        return got

    def _update(self, got):
        """After the edge: the handshakes of the cycle that ended take effect."""
        cycle = self.cycle - 1
        if got.get("ar"):
            addr, length, size, kind, ident = (v or 0 for v in got["ar"])
            burst = _Burst(addr, length + 1, size, kind, ident, cycle)
            burst.due = cycle + self.read_latency
            self._check_address("ar", burst)
            self._ar_q.append(burst)
            in_flight = len(self._ar_q) + len(self._r_q)
            self.stats["reads_in_flight"] = max(self.stats["reads_in_flight"], in_flight)
        if got.get("r"):
            self._r_beat = None
            burst = self._r_q[0]
            burst.beat += 1
            if burst.beat == burst.beats:
                self._r_q.popleft()
                self.reads += 1
        if got.get("aw"):
            addr, length, size, kind, ident = (v or 0 for v in got["aw"])
            burst = _Burst(addr, length + 1, size, kind, ident, cycle)
            self._check_address("aw", burst)
            self._aw_seen += 1
            self._writes_open += 1
            self.stats["writes_in_flight"] = max(self.stats["writes_in_flight"],
                                                 self._writes_open)
            if self._w_q and self._w_q[0].cycle >= 0:     # its data is all here
                self.stats["aw_after_w"] += 1
                data = self._w_q.popleft()
                self._complete(burst, data.data, max(cycle, data.cycle))
            else:
                self._aw_q.append(burst)
        if got.get("w"):
            self._take_w(*got["w"], cycle)
        if got.get("b"):
            self._b_out = None
            self._writes_open -= 1
            self.writes += 1

    def _take_w(self, data, strb, last, cycle):
        if not self._w_q or self._w_q[-1].cycle >= 0:
            # a new burst of data; cycle stays -1 until its last beat
            self._w_q.append(_Burst(0, 0, 0, INCR, 0, -1))
        pending = self._w_q[-1]
        pending.data.append((data, strb or 0))
        pending.beat += 1
        if self._aw_q and self._w_q[0] is pending and not pending.reported:
            beats = self._aw_q[0].beats
            if pending.beat == beats and not last or last and pending.beat < beats:
                pending.reported = True    # reported now, not again at completion
                self._violation("w", f"WLAST={int(bool(last))} on beat {pending.beat} of a "
                                     f"{beats}-beat burst at {self._aw_q[0].addr:#x}")
        if not last:
            return
        pending.cycle = cycle
        self._w_seen += 1
        # the oldest data burst pairs with the oldest address without data
        if self._aw_q and self._w_q[0] is pending:
            self._w_q.popleft()
            self._complete(self._aw_q.popleft(), pending.data, cycle, pending.reported)

    def _complete(self, burst, beats, cycle, reported=False):
        """Both halves of a write burst are here: check, store, schedule its response."""
        resp = OKAY
        if len(beats) != burst.beats and not reported:
            self._violation("w", f"WLAST on beat {len(beats)} of a {burst.beats}-beat burst "
                                 f"at {burst.addr:#x}")
        if burst.too_long:
            resp = SLVERR
        else:
            nbytes = 1 << burst.size
            for n, (data, strb) in enumerate(beats[:burst.beats]):
                addr = burst.addr + n * nbytes
                if addr + nbytes > len(self.mem):
                    resp = DECERR
                    continue
                if self._touches_error(addr, nbytes):
                    resp = SLVERR
                    continue
                value = _int(data)
                if value is None:
                    value = int(str(data).lower().replace("x", "0").replace("z", "0"), 2)
                    if strb:
                        self._violation("w", f"X in WDATA at {addr:#x}")
                raw = value.to_bytes(self.width, "little")
                for i in range(nbytes):
                    if strb >> i & 1:
                        self.mem[addr + i] = raw[i]
        self._b_q.append((cycle + self.write_latency, resp, burst.id))

    async def _run(self):
        await RisingEdge(self.clock)
        in_reset = True
        while True:
            self._drive(in_reset)
            await ReadOnly()
            in_reset = _bit(self.reset) != "0"
            got = None if in_reset else self._sample()
            await RisingEdge(self.clock)
            self.cycle += 1
            if in_reset:
                self._clear()
            else:
                self._update(got)
