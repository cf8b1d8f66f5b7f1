"""Threefry-2x32-20 and the stochastic-rounding bits: the numpy model and the RTL."""

import random

import numpy as np
import pytest

from rtl.prng import RandomLanes, Threefry2x32
from sim.models.prng import random_bits, threefry2x32
from sim.testbenches.harness import run, stream_recv, stream_send

M32 = 0xFFFFFFFF

#: Random123's kat_vectors for threefry2x32_20 (also JAX's tests): key, counter -> output.
KAT = [
    ((0, 0), (0, 0), (0x6B200159, 0x99BA4EFE)),
    ((M32, M32), (M32, M32), (0x1CB996FC, 0xBB002BE7)),
    ((0x13198A2E, 0x03707344), (0x243F6A88, 0x85A308D3), (0xC4923A9C, 0x483DF7A0)),
]


def threefry_scalar(k0, k1, c0, c1):
    """Threefry-2x32-20 with Python integers, written the way Random123's C code reads."""
    rot = (13, 15, 26, 6, 17, 29, 16, 24)
    ks = (k0, k1, 0x1BD11BDA ^ k0 ^ k1)
    x0, x1 = (c0 + ks[0]) & M32, (c1 + ks[1]) & M32
    for r in range(20):
        x0 = (x0 + x1) & M32
        x1 = ((x1 << rot[r % 8]) | (x1 >> (32 - rot[r % 8]))) & M32
        x1 ^= x0
        if r % 4 == 3:
            s = r // 4 + 1
            x0 = (x0 + ks[s % 3]) & M32
            x1 = (x1 + ks[(s + 1) % 3] + s) & M32
    return x0, x1


@pytest.mark.parametrize("key, ctr, want", KAT)
def test_known_answers(key, ctr, want):
    x0, x1 = threefry2x32(*key, *ctr)
    assert (int(x0), int(x1)) == want
    assert x0.dtype == np.uint32 and x1.dtype == np.uint32
    assert threefry_scalar(*key, *ctr) == want


def test_vectorised_matches_scalar_and_broadcasts():
    rng = np.random.default_rng(1)
    words = rng.integers(0, 2**32, size=(4, 50), dtype=np.uint64)
    x0, x1 = threefry2x32(*words)
    for i in range(50):
        assert (int(x0[i]), int(x1[i])) == threefry_scalar(*(int(w[i]) for w in words))
    # a scalar key against an array of counters
    b0, b1 = threefry2x32(7, 9, np.arange(6).reshape(2, 3), 0)
    assert b0.shape == (2, 3)
    assert int(b0[1, 2]) == threefry_scalar(7, 9, 5, 0)[0]
    assert int(b1[1, 2]) == threefry_scalar(7, 9, 5, 0)[1]


def test_random_bits_definition():
    seed = 0x0123456789ABCDEF
    m = np.arange(5)[:, None]
    n = np.arange(11)[None, :]
    r = random_bits(seed, m, n)
    assert r.dtype == np.uint16 and r.shape == (5, 11)
    for i in range(5):
        for j in range(11):
            x0, x1 = threefry_scalar(seed & M32, seed >> 32, i, j >> 2)
            w = x0 | (x1 << 32)
            assert int(r[i, j]) == (w >> (16 * (j & 3))) & 0xFFFF


def test_random_bits_order_independent():
    # The bits of an element depend on (seed, m, n) alone: a whole matrix, its tiles computed
    # in any order, and single elements agree; a transposed call gives the transpose.
    seed = 42
    full = random_bits(seed, np.arange(40)[:, None], np.arange(70)[None, :])
    rng = np.random.default_rng(0)
    tiles = [(r0, c0) for r0 in range(0, 40, 8) for c0 in range(0, 70, 32)]
    rebuilt = np.zeros_like(full)
    for k in rng.permutation(len(tiles)):
        r0, c0 = tiles[k]
        rows, cols = np.arange(r0, min(r0 + 8, 40)), np.arange(c0, min(c0 + 32, 70))
        rebuilt[np.ix_(rows, cols)] = random_bits(seed, rows[:, None], cols[None, :])
    np.testing.assert_array_equal(rebuilt, full)
    assert int(random_bits(seed, 39, 69)) == int(full[39, 69])
    mm, nn = rng.integers(0, 40, 100), rng.integers(0, 70, 100)
    np.testing.assert_array_equal(random_bits(seed, mm, nn), full[mm, nn])
    tr = random_bits(seed, np.arange(40)[None, :], np.arange(70)[:, None])
    np.testing.assert_array_equal(tr, full.T)
    assert not np.array_equal(random_bits(seed + 1, np.arange(40)[:, None],
                                          np.arange(70)[None, :]), full)


def test_random_bits_uniform():
    # 16-bit lanes: every bit position near 1/2 and the 16 coarse bins near flat (chi-square
    # with 15 degrees of freedom; 50 is far beyond its 99.99th percentile).
    r = random_bits(2024, np.arange(256)[:, None], np.arange(1024)[None, :]).astype(np.int64)
    n = r.size
    assert abs(r.mean() - 32767.5) < 6 * 18918 / np.sqrt(n)
    for b in range(16):
        ones = ((r >> b) & 1).sum()
        assert abs(ones - n / 2) < 6 * np.sqrt(n / 4), b
    counts = np.bincount((r >> 12).ravel(), minlength=16)
    chi2 = ((counts - n / 16) ** 2 / (n / 16)).sum()
    assert chi2 < 50
    for lane in range(4):   # each 16-bit slice of the 64-bit block on its own
        assert abs(r[:, lane::4].mean() - 32767.5) < 6 * 18918 / np.sqrt(n / 4)


@pytest.mark.parametrize("args, exc, name", [
    ((1.5, 0, 0, 0), TypeError, "key0"),
    ((0, -1, 0, 0), ValueError, "key1"),
    ((0, 0, 2**32, 0), ValueError, "ctr0"),
    ((0, 0, 0, np.zeros(3, np.float32)), TypeError, "ctr1"),
    ((0, 0, np.zeros(3, int), np.zeros(4, int)), ValueError, "broadcast"),
])
def test_threefry_bad_input(args, exc, name):
    with pytest.raises(exc, match=name):
        threefry2x32(*args)


@pytest.mark.parametrize("args, exc, name", [
    ((1.0, 0, 0), TypeError, "seed"),
    ((-1, 0, 0), ValueError, "seed"),
    ((2**64, 0, 0), ValueError, "seed"),
    ((0, -1, 0), ValueError, "m"),
    ((0, 0, 2**34), ValueError, "n"),
    ((0, np.zeros(2), 0), TypeError, "m"),
    ((0, np.zeros(3, int), np.zeros(2, int)), ValueError, "broadcast"),
])
def test_random_bits_bad_input(args, exc, name):
    with pytest.raises(exc, match=name):
        random_bits(*args)


def test_random_bits_large_indices():
    seed = 2**64 - 1
    x0, x1 = threefry_scalar(M32, M32, M32, 2**32 - 1)
    w = x0 | (x1 << 32)
    assert int(random_bits(seed, M32, 2**34 - 1)) == w >> 48


# --- the RTL ---------------------------------------------------------------------------------

def simulate_threefry(items, *, seed=0, stall=0.3):
    """``items``: (k0, k1, c0, c1) tuples; returns the (x0, x1) the pipeline emits."""
    dut = Threefry2x32()
    rng = random.Random(seed)
    payloads = [{"key": [k0, k1], "ctr": [c0, c1]} for k0, k1, c0, c1 in items]
    got = []

    async def producer(ctx):
        await stream_send(ctx, dut.i_stream, payloads, rng=rng, stall=stall)

    async def consumer(ctx):
        got.extend(await stream_recv(ctx, dut.o_stream, len(items), rng=rng, stall=stall,
                                     convert=lambda p: (int(p.x[0]), int(p.x[1]))))

    run(dut, producer, consumer, deadline_cycles=10 * len(items) + 200)
    return got


def test_rtl_threefry_known_answers_and_random():
    rng = np.random.default_rng(3)
    items = [(*key, *ctr) for key, ctr, _ in KAT]
    items += [(0, 0, M32, M32), (M32, M32, 0, 0), (1, 0, 0, 0), (0, 0, 0, 1), (0x80000000,) * 4]
    items += [tuple(int(w) for w in row) for row in
              rng.integers(0, 2**32, size=(300, 4), dtype=np.uint64)]
    got = simulate_threefry(items)
    assert got[:3] == [want for _, _, want in KAT]
    arr = np.array(items, dtype=np.uint64).T
    x0, x1 = threefry2x32(*arr)
    assert got == list(zip(map(int, x0), map(int, x1), strict=True))


def test_rtl_threefry_latency_full_rate():
    # Without stalls a beat goes in every cycle and the first comes out LATENCY cycles later.
    dut = Threefry2x32()
    count = 8
    seen = []

    async def bench(ctx):
        ctx.set(dut.o_stream.ready, 1)
        ctx.set(dut.i_stream.valid, 1)
        for cycle in range(count + dut.LATENCY + 2):
            ctx.set(dut.i_stream.payload, {"key": [5, 6], "ctr": [cycle, 0]})
            assert ctx.get(dut.i_stream.ready)
            _, _, valid, x = await ctx.tick().sample(dut.o_stream.valid, dut.o_stream.payload.x)
            if valid:
                seen.append((cycle, int(x[0])))

    run(dut, bench, deadline_cycles=count + dut.LATENCY + 4)
    assert seen[0][0] == dut.LATENCY
    want = threefry2x32(5, 6, np.arange(len(seen)), 0)[0]
    assert [x for _, x in seen] == [int(w) for w in want]


@pytest.mark.parametrize("lanes", [4, 12])
def test_rtl_random_lanes(lanes):
    rng = random.Random(lanes)
    beats = [(0, 0, 0), (2**64 - 1, M32, 2**34 - 4 * (lanes // 4)), (2**64 - 1, M32, 2**34 - 4)]
    beats += [(rng.getrandbits(64), rng.getrandbits(32), 4 * rng.getrandbits(32))
              for _ in range(60)]
    dut = RandomLanes(lanes)
    got = []

    async def producer(ctx):
        await stream_send(ctx, dut.i_stream,
                          [{"seed": s, "m": row, "n0": n0} for s, row, n0 in beats],
                          rng=rng, stall=0.3)

    async def consumer(ctx):
        got.extend(await stream_recv(ctx, dut.o_stream, len(beats), rng=rng, stall=0.3,
                                     convert=lambda p: [int(v) for v in p.r]))

    run(dut, producer, consumer, deadline_cycles=10 * len(beats) + 200)
    for (s, row, n0), words in zip(beats, got, strict=True):
        n = (n0 + np.arange(lanes)) % 2**34   # the column block counter wraps at 2**32
        assert words == [int(v) for v in random_bits(s, row, n)], (s, row, n0)


def test_random_lanes_rejects_lanes():
    for bad in (0, 2, 6, -4, 4.0, True):
        with pytest.raises(ValueError, match="lanes"):
            RandomLanes(bad)


def test_random_matrix_is_random_bits_of_every_element():
    from sim.models.prng import random_bits, random_matrix
    for seed, m, n in ((0, 3, 5), (2**64 - 1, 7, 13), (12345, 1, 4)):
        mm, nn = np.indices((m, n), dtype=np.uint64)
        np.testing.assert_array_equal(random_matrix(seed, m, n), random_bits(seed, mm, nn))


@pytest.mark.parametrize("stall", [0.0, 0.8])
def test_random_lanes_with_an_output_fifo(stall):
    """RandomLanes(out_fifo=...): the same beats in order under output stalls, the pipeline
    never stalled (requests wait for credits instead)."""
    lanes, seed = 8, 0x0123456789ABCDEF
    dut = RandomLanes(lanes, out_fifo=32)
    reqs = [{"seed": seed, "m": m, "n0": n0} for m in range(40) for n0 in (0, 8, 40)]
    got = []

    async def send(ctx):
        await stream_send(ctx, dut.i_stream, reqs, rng=random.Random(1), stall=0.1)

    async def take(ctx):
        got.extend(await stream_recv(ctx, dut.o_stream, len(reqs), rng=random.Random(2),
                                     stall=stall, convert=lambda p: [int(x) for x in p.r]))

    run(dut, send, take, deadline_cycles=20000)
    for req, beat in zip(reqs, got, strict=True):
        want = random_bits(seed, req["m"], np.arange(req["n0"], req["n0"] + lanes))
        assert beat == [int(x) for x in want]
    with pytest.raises(ValueError, match="out_fifo"):
        RandomLanes(8, out_fifo=2)
