"""rtl.router.ReadRouter against sim.models.engine.route, random stalls on every stream."""

import random

import pytest

from rtl.router import ReadRouter
from sim.models import engine as em
from sim.testbenches.harness import run, stream_collect, stream_send


@pytest.mark.parametrize("data_width", [64, 512])
@pytest.mark.parametrize("seed", range(4))
def test_matches_model(data_width, seed):
    rng = random.Random(seed)
    routes = [{"path": rng.randint(0, 1), "rows": rng.choice([1, 1, 2, rng.randint(1, 6)])}
              for _ in range(20)]
    words = []
    for r in routes:
        for _ in range(r["rows"]):
            n = rng.choice([1, 1, 2, 5])
            words += [{"data": rng.getrandbits(data_width), "last": int(i == n - 1)}
                      for i in range(n)]
    want_a, want_b = em.route([(w["data"], w["last"]) for w in words], routes)
    dut = ReadRouter(data_width)
    got = {}

    async def send_routes(ctx):
        await stream_send(ctx, dut.routes, routes, rng=random.Random(seed + 1), stall=0.5)

    async def send_words(ctx):
        await stream_send(ctx, dut.i_stream, words, rng=random.Random(seed + 2), stall=0.3)

    def receiver(name, stream, count, salt):
        return stream_collect(got, name, stream, count, rng=random.Random(seed + salt),
                              stall=0.3, convert=int)

    run(dut, send_routes, send_words, receiver("a", dut.a_stream, len(want_a), 3),
        receiver("b", dut.b_stream, len(want_b), 4), deadline_cycles=3000)
    assert got["a"] == want_a and got["b"] == want_b


def test_words_wait_for_their_route():
    """No word passes before a routing entry names its gearbox."""
    dut = ReadRouter(64)

    async def bench(ctx):
        ctx.set(dut.a_stream.ready, 1)
        ctx.set(dut.b_stream.ready, 1)
        ctx.set(dut.i_stream.payload, {"data": 7, "last": 1})
        ctx.set(dut.i_stream.valid, 1)
        for _ in range(3):
            await ctx.tick()
            assert not ctx.get(dut.i_stream.ready)
        ctx.set(dut.routes.payload, {"path": 1, "rows": 1})
        ctx.set(dut.routes.valid, 1)
        await ctx.tick()
        ctx.set(dut.routes.valid, 0)
        await ctx.tick()            # the entry reaches the queue's head
        assert ctx.get(dut.b_stream.valid) and not ctx.get(dut.a_stream.valid)

    run(dut, bench, deadline_cycles=50)
