"""rtl.readshare.ReadShare: each side gets the words of its own commands, in order, from a
reader model that answers the commands in the order it takes them."""

import random
from collections import deque

import pytest

from rtl.readshare import ReadShare
from sim.testbenches.harness import run, stream_collect, stream_send


def _word(addr: int, i: int) -> int:
    """The reader model's ``i``-th word of the command at ``addr``."""
    return addr << 8 | i


def expected(cmds: list) -> list:
    """The routing rule: a side receives the words of its commands, in its order, the last
    word of each with ``last`` (a command of 0 beats returns none)."""
    return [(_word(c["addr"], i), int(i == c["beats"] - 1))
            for c in cmds for i in range(c["beats"])]


def reader(dut, ncmds: int, *, rng: random.Random | None = None, stall: float = 0.0,
           log: list | None = None):
    """A testbench standing for :class:`rtl.dma.DmaReader`: takes ``ncmds`` commands on
    ``cmd`` (``ready`` low with probability ``stall``) and returns each one's words in
    order on ``words`` (``valid`` withheld with probability ``stall``, held once offered),
    a command's words only after it is taken. ``log`` records each command taken."""
    async def bench(ctx):
        queue = deque()              # words of taken commands, not yet returned
        taken = 0
        offered = None
        while taken < ncmds or queue or offered is not None:
            ready = taken < ncmds and not (rng and rng.random() < stall)
            ctx.set(dut.cmd.ready, ready)
            if offered is None and queue and not (rng and rng.random() < stall):
                offered = queue.popleft()
            ctx.set(dut.words.valid, offered is not None)
            if offered is not None:
                ctx.set(dut.words.payload, {"data": offered[0], "last": offered[1]})
            _, _, valid, payload, w_ready = await ctx.tick().sample(
                dut.cmd.valid, dut.cmd.payload, dut.words.ready)
            if ready and valid:
                cmd = {"addr": payload.addr, "beats": payload.beats}
                taken += 1
                queue.extend(expected([cmd]))
                if log is not None:
                    log.append(cmd)
            if offered is not None and w_ready:
                offered = None
        ctx.set(dut.words.valid, 0)
    return bench


def random_cmds(rng: random.Random, n: int, beats: list) -> list:
    return [{"addr": rng.getrandbits(20) << 4, "beats": rng.choice(beats)} for _ in range(n)]


def _as_word(p):
    return int(p.data), int(p.last)


@pytest.mark.parametrize("seed", range(6))
def test_words_reach_their_side(seed):
    rng = random.Random(seed)
    a_cmds = random_cmds(rng, 30, [0, 1, 1, 2, 5, 16])
    b_cmds = random_cmds(rng, 20, [1, 1, 1, 3, 8])
    dut = ReadShare(64, 32, depth=rng.choice([2, 4, 16]))
    got = {}

    def sender(port, cmds, salt):
        async def bench(ctx):
            await stream_send(ctx, port, cmds, rng=random.Random(seed * 7 + salt), stall=0.4)
        return bench

    want_a, want_b = expected(a_cmds), expected(b_cmds)
    run(dut, sender(dut.a_cmd, a_cmds, 1), sender(dut.b_cmd, b_cmds, 2),
        reader(dut, len(a_cmds) + len(b_cmds), rng=random.Random(seed * 7 + 3), stall=0.3),
        stream_collect(got, "a", dut.a_words, len(want_a), rng=random.Random(seed * 7 + 4),
                       stall=0.3, convert=_as_word),
        stream_collect(got, "b", dut.b_words, len(want_b), rng=random.Random(seed * 7 + 5),
                       stall=0.3, convert=_as_word),
        deadline_cycles=20_000)
    assert got["a"] == want_a
    assert got["b"] == want_b


@pytest.mark.parametrize("side", ["a", "b"])
@pytest.mark.parametrize("beats", [[1], [16, 3, 1, 7]])
def test_one_word_a_cycle(side, beats):
    """With one side busy and nothing stalled, the words pass one a cycle, across commands
    as well as within them."""
    cmds = [{"addr": 0x100 * (i + 1), "beats": beats[i % len(beats)]} for i in range(12)]
    dut = ReadShare(128, 32)
    cycles = []
    want = expected(cmds)
    port, words = getattr(dut, f"{side}_cmd"), getattr(dut, f"{side}_words")

    async def send(ctx):
        await stream_send(ctx, port, cmds)

    async def recv(ctx):
        ctx.set(words.ready, 1)
        cycle = 0
        while len(cycles) < len(want):
            _, _, valid = await ctx.tick().sample(words.valid)
            if valid:
                cycles.append(cycle)
            cycle += 1

    run(dut, send, reader(dut, len(cmds)), recv, deadline_cycles=2000)
    assert cycles[-1] - cycles[0] == len(want) - 1


def test_b_goes_first():
    dut = ReadShare(64, 32)
    log = []

    async def send_a(ctx):
        await stream_send(ctx, dut.a_cmd, [{"addr": 0x10, "beats": 1}])

    async def send_b(ctx):
        await stream_send(ctx, dut.b_cmd, [{"addr": 0x20, "beats": 1}])

    got = {}
    run(dut, send_a, send_b, reader(dut, 2, log=log),
        stream_collect(got, "a", dut.a_words, 1), stream_collect(got, "b", dut.b_words, 1),
        deadline_cycles=200)
    assert [c["addr"] for c in log] == [0x20, 0x10]


def test_issues_only_with_tag_room():
    """With no words returned, at most ``depth`` commands are issued (0-beat ones take no
    tag)."""
    depth = 4
    dut = ReadShare(64, 32, depth=depth)
    cmds = [{"addr": 0x40 * i, "beats": 0 if i == 1 else 2} for i in range(10)]
    taken = []

    async def bench(ctx):        # offers commands, takes those issued, returns no word
        ctx.set(dut.cmd.ready, 1)
        ctx.set(dut.a_cmd.valid, 1)
        sent = 0
        for _ in range(60):
            ctx.set(dut.a_cmd.payload, cmds[sent])
            _, _, ready, valid = await ctx.tick().sample(dut.a_cmd.ready, dut.cmd.valid)
            sent += ready
            taken.extend([1] * valid)

    run(dut, bench, deadline_cycles=100)
    assert len(taken) == depth + 1


def test_depth_checked():
    with pytest.raises(ValueError, match="depth must be an integer of at least 2, not 1"):
        ReadShare(64, 32, depth=1)
