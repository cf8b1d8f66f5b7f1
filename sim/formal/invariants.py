"""Invariants that let k-induction close on the DMA masters.

A bounded check starts from reset; k-induction starts from *any* state that satisfies the
properties for k cycles, including states no trace from reset reaches (a credit counter that
disagrees with the beats in flight, a queue whose head is not its oldest entry, ...). The
functions here assert relations between the masters' internal registers and the checkers'
own (counts, queues, handshake history), all of them true of every reachable state: asserted,
so they are proven along with the properties, and they exclude the unreachable states.

The internals are reached with :class:`Opened`, which elaborates a design by hand, down to its
memories, so that the harness can name its registers and add read ports to its memories; the
design is then used as elaborated (``m.submodules.dut = opened.top``), unchanged.
"""

from __future__ import annotations

from amaranth import Cat, Const, Module, Mux, ResetSignal, Signal, Value
from amaranth.hdl import Assert
from amaranth.lib import memory

from rtl.dma import _burst_splitter

__all__ = ["Opened", "count_invariants", "reader_ends_invariants", "reader_invariants",
           "tracked_invariants", "writer_invariants"]


class Opened:
    """``design`` elaborated into :class:`Module` objects, recursively (memories excepted),
    so that a harness can find a register by its module path and name (:meth:`reg`) and read
    a memory word (:meth:`word`). Add :attr:`top` to the harness instead of ``design``."""

    def __init__(self, design, m: Module):
        self.m = m
        self.modules: dict[str, Module] = {}
        self.memories: dict[str, memory.Memory] = {}
        self.designs: dict[str, object] = {}
        self.top = self._open(design, "")

    def _open(self, obj, path: str) -> Module:
        self.designs[path] = obj
        while not isinstance(obj, Module):
            if hasattr(obj, "_MustUse__used"):
                obj._MustUse__used = True        # elaborated here, not by Fragment.get
            obj = obj.elaborate(None)
        self.modules[path] = obj
        for name, (sub, src_loc) in list(obj._named_submodules.items()):
            sub_path = f"{path}.{name}" if path else name
            if isinstance(sub, memory.Memory):
                self.memories[sub_path] = sub
            else:
                obj._named_submodules[name] = (self._open(sub, sub_path), src_loc)
        return obj

    def reg(self, path: str, name: str) -> Signal:
        """The register (a signal driven in ``sync``) ``name`` of the module at ``path``."""
        found = [s for s, domains in self.modules[path]._driving.items()
                 if s.name == name and "sync" in domains]
        if len(found) != 1:
            raise KeyError(f"{len(found)} registers named {name!r} in {path or 'the top'!r}")
        return found[0]

    def word(self, path: str, index: int) -> Value:
        """Word ``index`` of the memory at ``path`` (through a new combinational read port,
        whose address is driven in ``m``'s current control block: call it outside any)."""
        port = self.memories[path].read_port(domain="comb")
        self.m.d.comb += port.addr.eq(index)
        return port.data


def _check(m: Module, test, message: str) -> None:
    m.d.comb += Assert(test, f"invariant: {message}", src_loc_at=1)


def counter_invariants(m: Module, d: Opened, path: str, name: str, capacity: int):
    """:func:`rtl._util.counter`'s registers agree with its count; returns the count."""
    count = d.reg(path, f"{name}_count")
    up, down = d.reg(path, f"{name}_up"), d.reg(path, f"{name}_down")
    room, filled = d.reg(path, f"{name}_room"), d.reg(path, f"{name}_filled")
    _check(m, (count >= 0) & (count <= capacity), f"{name}: count in range")
    _check(m, (up == count + 1) & (down == count - 1), f"{name}: count +- 1")
    _check(m, (room == (count < capacity)) & (filled == (count != 0)), f"{name}: flags")
    return count


def _wrap(value, size: int):
    """``value mod size`` for ``value < 2 * size``."""
    value = Value.cast(value)
    if size & (size - 1) == 0:
        return value.as_unsigned()[:(size - 1).bit_length()]
    return Mux(value >= size, value - size, value)


def fifo_invariants(m: Module, d: Opened, path: str):
    """:class:`rtl.fifo.Fifo`'s registers agree. Returns its level and a function of ``j``
    giving its ``j``-th oldest entry (meaningful when ``j < level``): the output register's
    word, then the memory's in order, or while the output register is empty (then the
    memory holds at most one word) the memory's from the read pointer on."""
    fifo = d.designs[path]
    inner = fifo.depth - 1
    count = counter_invariants(m, d, path, "mem", inner)
    produce, consume = d.reg(path, "produce"), d.reg(path, "consume")
    _check(m, fifo.r_rdy | (count <= 1), f"{path}: output register loaded when it can be")
    _check(m, produce == _wrap(consume + count, inner), f"{path}: pointers and count")
    _check(m, consume < inner, f"{path}: read pointer in range")
    # (read ports made here, not in a caller's m.If: their addresses are driven here)
    words = [d.word(f"{path}.storage", i) for i in range(inner)]

    def entry(j: int):
        in_memory = _select(words, _wrap(consume + j, inner))
        if j == 0:
            return Mux(fifo.r_rdy, fifo.r_data, in_memory)
        return Mux(fifo.r_rdy, _select(words, _wrap(consume + j - 1, inner)), in_memory)

    return fifo.r_rdy + count, entry


def _select(words, index):
    result = words[0]
    for i, word in enumerate(words[1:], 1):
        result = Mux(index == i, word, result)
    return result


def splitter_invariants(m: Module, d: Opened, master, shift: int, window=None) -> None:
    """The command splitter of ``_DmaMaster._bursts``: the address aligned, a command being
    split has words left, and a burst's length and "last" flag, once computed (``fresh``),
    are the splitter's for the address and the words left; with ``window`` (``lo, hi``),
    the words left lie in it."""
    addr, remaining = d.reg("", "addr"), d.reg("", "remaining")
    active, fresh = d.reg("", "active"), d.reg("", "fresh")
    n, last = d.reg("", "n"), d.reg("", "last_burst")
    want_n, want_last = _burst_splitter(m, addr, remaining, master.burst_beats, shift)
    _check(m, addr[:shift] == 0, "burst address aligned")
    _check(m, ~active | (remaining != 0), "a command being split has words left")
    _check(m, ~fresh | ((n == want_n) & (last == want_last)),
           "burst length and last flag are the splitter's")
    took = d.reg("", "took")
    _check(m, ~(took & fresh), "the first burst computed the cycle after the take")
    page_after = d.reg("", "page_after")
    page_after_cmd = d.reg("", "page_after_cmd")
    page = addr[12:]
    _check(m, ~fresh | (page_after == (page + 1)[:len(page)]), "next page of the address")
    _check(m, ~took | (page_after_cmd == (page + 1)[:len(page)]),
           "next page of the command's address")
    if window is not None:
        lo, hi = window
        _check(m, ~active | ((lo <= addr) & (addr + (remaining << shift) <= hi)),
               "the words left of a command inside the window")


def queue_invariants(m: Module, c: Opened, path: str, name: str, depth: int):
    """A checker :class:`~sim.formal.axi.Queue`: pointers and level agree. Returns its entries,
    oldest first, as ``(present, value)`` pairs, and its level."""
    rd, wr = c.reg(path, f"{name}_rd"), c.reg(path, f"{name}_wr")
    level = c.reg(path, f"{name}_level")
    slots = [c.reg(path, f"{name}_{i}") for i in range(depth)]
    _check(m, level <= depth, f"{name}: level in range")
    _check(m, wr == _wrap(rd + level, depth)[:len(wr)] if depth > 1 else wr == 0,
           f"{name}: pointers and level")
    _check(m, (rd < depth) & (wr < depth), f"{name}: pointers in range")
    return [(level > i, _select(slots, _wrap(rd + i, depth))) for i in range(depth)], level


def _run_entry(length, width: int):
    """How :func:`rtl.dma._run_ends` stores a run of ``length`` words."""
    return Cat((length - 1)[:width], length == 1)


def run_ends_invariants(m: Module, d: Opened, name: str, depth: int, gap: int, width: int,
                        runs, count_c, beat_last):
    """:func:`rtl.dma._run_ends` ``name`` (of ``depth`` runs and ``gap``) holds the runs
    ``runs`` (``(present, length)``, oldest first) of which ``count_c`` words of the oldest
    have arrived; its ``last`` is ``beat_last`` ("the next beat ends the run")."""
    level = counter_invariants(m, d, "", f"{name}_runs", depth - gap + 1)
    _check(m, level == sum(present for present, _ in runs), f"{name}: runs waiting")
    size = max(2, 1 << (depth - 1).bit_length())
    produce, consume = d.reg("", f"{name}_produce"), d.reg("", f"{name}_consume")
    after = d.reg("", f"{name}_after")
    rem = d.reg("", f"{name}_rem")
    head, last = d.reg("", f"{name}_head"), d.reg("", f"{name}_last")
    _check(m, after == (consume + 1)[:len(after)], f"{name}: read pointer + 1")
    _check(m, produce == (consume + level)[:len(produce)], f"{name}: pointers and level")
    _check(m, (level != 0) | (count_c == 0), f"{name}: no words of no run")
    words = [[d.word(f"{name}{copy}", i) for i in range(size)] for copy in (0, 1)]
    for i, (present, length) in enumerate(runs):
        _check(m, ~present | ((length >= 1) & (length < 1 << width)), f"{name}: run length")
        for copy in (0, 1):
            word = _select(words[copy], (consume + i)[:len(consume)])
            _check(m, ~present | (word == _run_entry(length, width)),
                   f"{name}: run {i} in the queue (copy {copy})")
    present, length = runs[0]
    with m.If(present):
        _check(m, head == _run_entry(length, width), f"{name}: head register")
        _check(m, count_c < length, f"{name}: the oldest run not over")
        _check(m, rem == (length - 1 - count_c)[:len(rem)], f"{name}: words left, less one")
        _check(m, last == beat_last, f"{name}: last")
    return level


def reader_invariants(m: Module, d: Opened, c: Opened, dut, axi, window=None):
    """DmaReader (``d``) against its AXI4ReadChecker (``c``); ``window``: ``(lo, hi)``.
    Returns the data FIFO's level and entries (:func:`fifo_invariants`)."""
    shift = (dut.data_width // 8).bit_length() - 1
    B, N = dut.burst_beats, dut.outstanding
    splitter_invariants(m, d, dut, shift, window)
    bus = dut.bus
    active, fresh = d.reg("", "active"), d.reg("", "fresh")
    room = d.reg("", "room")
    bursts_room = d.reg("", "bursts_runs_room")
    waiting = d.reg("", "waiting")
    prev_valid, prev_ready = c.reg("", "AR_prev_valid"), c.reg("", "AR_prev_ready")
    payload = Cat(bus.arid, bus.araddr, bus.arlen, bus.arsize, bus.arburst, bus.arcache,
                  bus.arprot)
    _check(m, waiting == (prev_valid & ~prev_ready), "AR: a burst waits for ARREADY")
    _check(m, ~waiting | (c.reg("", "AR_prev_payload") == payload), "AR: waiting payload")
    _check(m, ~waiting | (active & fresh & room & bursts_room), "AR: a waiting burst allowed")

    runs, _ = queue_invariants(m, c, "", "ar_q", N)
    count_c = c.reg("", "count")
    head = runs[0][1]
    run_ends_invariants(m, d, "bursts", N, 1, len(d.reg("", "n")), runs, count_c,
                        count_c + 1 == head)
    in_flight = sum(Mux(present, length, 0) for present, length in runs) - count_c
    _check(m, axi.beats_in_flight == in_flight, "beats in flight: the bursts' words left")

    credits = d.reg("", "credits")
    level, entry = fifo_invariants(m, d, "data_fifo")
    _check(m, credits + level + axi.beats_in_flight == B * N,
           "credits: the FIFO's room less the beats in flight")
    _check(m, room == (credits >= B), "room: credits for a longest burst")
    _check(m, ~dut.protocol, "no protocol error flagged (in a reset cycle too)")
    return level, entry


def reader_ends_invariants(m: Module, d: Opened, c: Opened, dut, cmds, r_done, flags,
                           data_fifo, aborted) -> None:
    """DmaReader's ``last`` flags (``d``, with its AXI4ReadChecker ``c``) against the harness's
    commands ``cmds`` (a :class:`~sim.formal.axi.Queue` of lengths, pushed as a command is
    taken and popped as its last word is read; ``r_done`` words of the oldest read) and the
    flags ``flags`` (a Queue of one bit a word, "it ends its command", pushed as it is read
    and popped as it leaves ``o_stream``). ``data_fifo``: ``(level, entry)`` of
    :func:`fifo_invariants`; ``aborted``: an abort has been raised since reset.

    Without summing command lengths: each burst in flight carries a tag, whether it is its
    command's last (kept here in a queue beside the checker's ``ar_q``), so the commands
    waiting are those of the tagged bursts plus the one being split, and each command's
    words left are its bursts' in flight and, for the one being split, the splitter's words
    left. Written for two bursts in flight (the proofs' ``outstanding``)."""
    from sim.formal.axi import Queue

    N = dut.outstanding
    assert N == 2, "the case analysis below is written for two bursts in flight"
    rst = ResetSignal()
    bus = dut.bus
    active, remaining = d.reg("", "active"), d.reg("", "remaining")
    fresh, last_burst = d.reg("", "fresh"), d.reg("", "last_burst")
    # an abort ends the splitting with words left (the command then waits until reset)
    stuck = Signal(name="ends_stuck")
    with m.If(active & dut.abort & ~bus.arvalid & ~rst):
        m.d.sync += stuck.eq(1)
    splitting = active | stuck
    _check(m, ~stuck | (aborted & ~active & (remaining != 0)),
           "splitting ended early only by an abort, with words left")
    runs, ar_level = queue_invariants(m, c, "", "ar_q", N)
    count_c = c.reg("", "count")
    (p0, len0), (p1, len1) = runs
    tags = Queue(m, "tag_q", 1, N)
    m.d.comb += [tags.push.eq(bus.arvalid & bus.arready & ~rst), tags.w_data.eq(last_burst),
                 tags.pop.eq(bus.rvalid & bus.rready & ~rst & (count_c + 1 == len0))]
    _check(m, (tags.level == ar_level) & (tags.rd < N)
           & (tags.wr == _wrap(tags.rd + tags.level, N)[:len(tags.wr)]),
           "tags: one per burst in flight, pointers")
    t0, t1 = tags.entries[tags.rd], tags.entries[_wrap(tags.rd + 1, N)]
    e0, e1 = p0 & t0, p1 & t1                       # a burst in flight ends its command
    w0, w1 = Mux(p0, len0 - count_c, 0), Mux(p1, len1, 0)   # its words still to come
    D = cmds.depth
    h = [cmds.entries[_wrap(cmds.rd + i, D)] for i in range(D)]
    q = [cmds.level > i for i in range(D)]
    _check(m, (cmds.rd < D) & (cmds.wr == _wrap(cmds.rd + cmds.level, D)[:len(cmds.wr)]),
           "commands: pointers and level")
    _check(m, cmds.level == e0 + e1 + splitting,
           "commands: one per burst in flight that ends one, and the one being split")
    _check(m, ~p0 | t0 | e1 | splitting,
           "an untagged burst's command ends with a later burst in flight, or is being split")
    _check(m, ~p1 | t1 | splitting, "the newest burst's command ends with it or is split")
    _check(m, q[0] | (r_done == 0), "no words read of no command")
    for i in range(D):
        _check(m, ~q[i] | (h[i] != 0), f"command {i}: at least one word")
    with m.If(q[0]):
        _check(m, r_done < h[0], "the oldest command not over")
        _check(m, h[0] - r_done == Mux(e0, w0, Mux(e1, w0 + w1, w0 + w1 + remaining)),
               "the oldest command's words left: in flight, and not yet issued")
    with m.If(q[1]):
        _check(m, h[1] == Mux(e0 & e1, w1, Mux(e0, w1, 0) + remaining),
               "the second command's words: in flight, and not yet issued")
    with m.If(q[2]):
        _check(m, h[2] == remaining, "a third command: being split, nothing issued")
    # The reader's own queue of command lengths (`_run_ends` "commands", gap 2): pushed the
    # cycle after the take, from registers.
    push_r = d.reg("", "commands_push")
    length_r, one_r = d.reg("", "commands_length"), d.reg("", "commands_one")
    newest = cmds.entries[_wrap(cmds.wr + D - 1, D)]
    _check(m, ~push_r | (active & ~fresh & (remaining == newest) & (cmds.level != 0)
                         & (length_r == newest) & (one_r == (newest == 1))),
           "a command being queued: taken last cycle, nothing issued")
    queued = cmds.level - push_r
    depth = 2 * N + 2
    runs_dut = [(queued > i, h[i]) for i in range(D)] + [(Const(0), Const(0))] * (depth - D)
    run_ends_invariants(m, d, "commands", depth, 2, len(length_r), runs_dut, r_done,
                        r_done + 1 == h[0])
    # the flags in the data FIFO, word for word
    level, entry = data_fifo
    F = flags.depth
    _check(m, (flags.level == level) & (flags.rd < F)
           & (flags.wr == _wrap(flags.rd + flags.level, F)[:len(flags.wr)]),
           "flags: one per word in the data FIFO, pointers")
    for j in range(F):
        with m.If(j < level):
            _check(m, entry(j)[dut.data_width] == flags.entries[_wrap(flags.rd + j, F)],
                   f"the data FIFO's word {j}: its last flag")


def writer_invariants(m: Module, d: Opened, c: Opened, dut, window=None):
    """DmaWriter (``d``) against its AXI4WriteChecker (``c``); ``window``: ``(lo, hi)``.

    The bursts formed and not yet answered are, oldest first: those in the B queue; of
    them, the newest is in none of the AW and W queues yet while ``formed``, and the AW
    queue and the W queue each hold a newest part (the rest went out on that channel). The
    checker's queue of AWs whose W burst is unfinished, or of W bursts finished before
    their AW, holds the difference. Returns the data FIFO's level and entries
    (:func:`fifo_invariants`)."""
    shift = (dut.data_width // 8).bit_length() - 1
    B, N = dut.burst_beats, dut.outstanding
    splitter_invariants(m, d, dut, shift, window)
    bus = dut.bus
    _check(m, d.reg("", "waiting") == 0, "bursts are taken when offered")

    # handshakes in progress
    for ch, valid, payload in [
            ("AW", bus.awvalid, Cat(bus.awid, bus.awaddr, bus.awlen, bus.awsize, bus.awburst,
                                    bus.awcache, bus.awprot)),
            ("W", bus.wvalid, Cat(bus.wdata, bus.wstrb, bus.wlast))]:
        waited = c.reg("", f"{ch}_prev_valid") & ~c.reg("", f"{ch}_prev_ready")
        _check(m, ~waited | (valid & (c.reg("", f"{ch}_prev_payload") == payload)),
               f"{ch}: a waiting beat still offered, unchanged")

    # queues and counts
    responses = counter_invariants(m, d, "", "responses", N)
    formed = d.reg("", "formed")
    formed_n, formed_addr = d.reg("", "formed_n"), d.reg("", "formed_addr")
    a, aw_entry = fifo_invariants(m, d, "aw_fifo")
    w, w_entry = fifo_invariants(m, d, "w_fifo")
    data_level, data_entry = fifo_invariants(m, d, "data_fifo")
    b_level = d.reg("b_fifo", "level")
    b_depth = d.designs["b_fifo"].depth
    b_produce, b_consume = d.reg("b_fifo", "produce"), d.reg("b_fifo", "consume")
    _check(m, (b_level <= b_depth) & (b_consume < b_depth)
           & (b_produce == _wrap(b_consume + b_level, b_depth)[:len(b_produce)]),
           "b_fifo: pointers and level")
    aw_open, w_open = c.reg("", "aw_open"), c.reg("", "w_open")
    _check(m, b_level + formed == responses, "responses: the bursts formed, unanswered")
    _check(m, aw_open + a + formed == responses, "AW: the bursts unanswered, sent or not")
    _check(m, w_open + w + formed == responses, "W: the bursts unanswered, sent or not")

    aws, aws_level = queue_invariants(m, c, "", "aw_q", N)
    early, early_level = queue_invariants(m, c, "", "w_early", c.designs[""].max_w_ahead)
    wcount, count = c.reg("", "wcount"), d.reg("", "count")
    free_words = d.reg("", "free_words")

    def aw_len(j):
        return aw_entry(j)[len(formed_addr):]

    def aw_addr(j):
        return aw_entry(j)[:len(formed_addr)]

    def burst_ok(what, addr, n):
        _check(m, (n >= 1) & (n <= B), f"{what}: 1 to burst_beats words")
        _check(m, (addr[:shift] == 0) & (addr[:12] + (n << shift) <= 4096),
               f"{what}: aligned, inside a 4 KB page")
        if window is not None:
            lo, hi = window
            _check(m, (lo <= addr) & (addr + (n << shift) <= hi), f"{what}: inside the window")

    with m.If(formed):
        burst_ok("formed burst", formed_addr, formed_n)
    for na in range(N + 1):
        for nw in range(N + 1):
            with m.If((a == na) & (w == nw)):
                for j in range(na):
                    burst_ok(f"AW queue entry {j}", aw_addr(j), aw_len(j))
                for j in range(nw):
                    _check(m, w_entry(j) < B, f"W queue entry {j}: 1 to burst_beats words")
                for j in range(min(na, nw)):
                    _check(m, aw_len(na - 1 - j) == w_entry(nw - 1 - j) + 1,
                           "a burst's length in the AW and W queues")
                _check(m, aws_level == max(0, nw - na), "AWs ahead of their W bursts")
                _check(m, early_level == max(0, na - nw), "W bursts ahead of their AWs")
                for j in range(nw - na):
                    _check(m, aws[j][1] == w_entry(j) + 1, f"AW ahead {j}: its length")
                for j in range(na - nw):
                    _check(m, early[j][1] == aw_len(j), f"W burst ahead {j}: its length")
                if nw:
                    _check(m, (count == wcount) & (wcount <= w_entry(0)),
                           "W: beats of the burst in progress")
                else:
                    _check(m, (count == 0) & (wcount == 0), "W: no burst in progress")
                words = sum(w_entry(j) + 1 for j in range(nw)) - count
                _check(m, data_level == free_words + Mux(formed, formed_n, 0) + words,
                       "data FIFO: free words and the words of bursts formed")
    _check(m, (a <= N) & (w <= N), "AW and W queues: at most outstanding bursts")
    return data_level, data_entry


def count_invariants(m: Module, into, out_of, level) -> None:
    """The words counted into a FIFO and out of it (modulo ``2 ** len(into)``) differ by its
    level."""
    _check(m, (into - out_of)[:len(into)] == level, "words in less words out: the FIFO's level")


def tracked_invariants(m: Module, out_of, index, kept, have, fifo, depth: int,
                       width: int) -> None:
    """An ordered-data check's tracking (:func:`sim.formal.proofs._track`): if the word at
    position ``index`` is in the FIFO (``out_of`` words having left it, counted modulo
    ``2 ** len``), it is the one ``kept``. ``fifo``: ``(level, entry)`` of
    :func:`fifo_invariants`, of ``depth`` entries, the word in an entry's low ``width``
    bits."""
    level, entry = fifo
    bits = len(out_of)
    for j in range(depth):
        with m.If((j < level) & ((out_of + j)[:bits] == index)):
            _check(m, have & (entry(j)[:width] == kept), f"the tracked word in the FIFO ({j})")
