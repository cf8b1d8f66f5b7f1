import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rtl.buffer import TransposableBuffer
from sim.models import datapath as models
from sim.testbenches.harness import run, stream_send


def simulate(lanes, depth, tiles, *, seed=0, stall=0.3):
    """Write each ``(stored, k_major)`` tile into alternating slots, then read it back.

    Reads of a tile start while the next tile is being written (double buffering).
    Returns, per tile, the vectors read for steps 0..k-1.
    """
    dut = TransposableBuffer(lanes, depth)
    rng = random.Random(seed)
    count = {"written": 0}
    results = []

    async def writer(ctx):
        for t, (stored, k_major) in enumerate(tiles):
            k = stored.shape[0] if k_major else stored.shape[1]
            while len(results) < t - 1:     # slot t % 2 is free once tile t-2 has been read
                await ctx.tick()
            ctx.set(dut.w_cmd.payload, {"slot": t % 2, "k": k, "k_major": k_major,
                                        "first_last": TransposableBuffer.first_is_last(
                                            k, k_major, 0, lanes)})
            ctx.set(dut.w_cmd.valid, 1)
            await ctx.tick().until(dut.w_cmd.ready)
            ctx.set(dut.w_cmd.valid, 0)
            beats = [[int(x) for x in v] for v in models.operand_beats(stored, lanes, k_major)]
            await stream_send(ctx, dut.w_stream, beats, rng=rng, stall=stall)

    async def done_counter(ctx):
        # w_done is high in the cycle a tile's last beat is accepted.
        while count["written"] < len(tiles):
            _, _, done = await ctx.tick().sample(dut.w_done)
            count["written"] += done

    async def reader(ctx):
        for t, (stored, k_major) in enumerate(tiles):
            k = stored.shape[0] if k_major else stored.shape[1]
            while count["written"] <= t:
                await ctx.tick()
            got = []
            step = 0
            while len(got) < k:
                issue = step < k and rng.random() >= stall
                ctx.set(dut.r_en, issue)
                ctx.set(dut.r_slot, t % 2)
                ctx.set(dut.r_k, step if issue else 0)
                _, _, valid, vec = await ctx.tick().sample(dut.r_valid, dut.r_data)
                if valid:
                    got.append([int(x) for x in vec])
                if issue:
                    step += 1
            ctx.set(dut.r_en, 0)
            results.append(np.array(got, dtype=np.int8))

    total = sum(s.size for s, _ in tiles)
    run(dut, writer, reader, done_counter, deadline_cycles=20 * total + 400)
    assert len(results) == len(tiles)
    return results


def check(lanes, depth, tiles, **kw):
    got = simulate(lanes, depth, tiles, **kw)
    for t, ((stored, k_major), g) in enumerate(zip(tiles, got, strict=True)):
        np.testing.assert_array_equal(g, models.buffer_read(stored, k_major), err_msg=f"tile {t}")


def random_tile(rng, lanes, k, k_major):
    shape = (k, lanes) if k_major else (lanes, k)
    return rng.integers(-128, 128, shape).astype(np.int8)


@pytest.mark.parametrize("lanes", [1, 2, 3, 4, 8, 16])
def test_both_forms_alternating(lanes):
    rng = np.random.default_rng(lanes)
    depth = 4 * lanes + 3
    tiles = [(random_tile(rng, lanes, k, km), km)
             for k, km in [(depth, False), (depth, True), (1, False), (1, True),
                           (lanes + 1, False), (2 * lanes, True)]]
    check(lanes, depth, tiles)


@settings(max_examples=20, deadline=None)
@given(lanes=st.integers(1, 6), seed=st.integers(0, 2**32 - 1), data=st.data())
def test_random(lanes, seed, data):
    depth = data.draw(st.integers(1, 20))
    rng = np.random.default_rng(seed)
    ks = data.draw(st.lists(st.tuples(st.integers(1, depth), st.booleans()),
                            min_size=1, max_size=4))
    check(lanes, depth, [(random_tile(rng, lanes, k, km), km) for k, km in ks], seed=seed)


def test_bad_parameters():
    with pytest.raises(ValueError, match="lanes"):
        TransposableBuffer(0, 16)
    with pytest.raises(ValueError, match="depth"):
        TransposableBuffer(4, 0)
