"""rtl.fpread.Fp32TileReader against sim.models.fpread: its jobs, its beats bit for bit
(inf, NaN and -0.0 included) and its read commands, under random stalls on every stream."""

import random

import numpy as np
import pytest

from rtl.fpread import Fp32TileReader
from sim.models import fpread
from sim.testbenches.harness import run, stream_recv

from .test_sideload import memory_reader

MEM = 1 << 17


def _ceil_to(x: int, a: int) -> int:
    return -(-x // a) * a


def check(rows, cols, data_width, m, n, seed, stall=0.3):
    rng = random.Random(seed)
    bpw = data_width // 8
    memory = np.frombuffer(rng.randbytes(MEM), np.uint8).copy()
    stride = _ceil_to(4 * n, bpw) + bpw * rng.randint(0, 2)
    base = _ceil_to(rng.randrange(0, MEM - m * stride - bpw), bpw)
    x = np.random.default_rng(seed).standard_normal((m, n)).astype(np.float32)
    specials = np.array([np.inf, -np.inf, np.nan, -0.0, 1e-45, 3e38], np.float32)
    x.flat[::7] = np.resize(specials, x.flat[::7].shape)
    for r in range(m):
        memory[base + r * stride:base + r * stride + 4 * n] = x[r].view(np.uint8)
    jobs = fpread.tile_jobs(m, n, rows, cols)
    want = fpread.tile_rows(x, rows, cols).view(np.uint32)
    dut = Fp32TileReader(rows, cols, data_width=data_width, addr_width=32)
    # a read may touch the row's words up to its last element's, never beyond
    regions = [(base + r * stride, base + r * stride + _ceil_to(4 * n, bpw)) for r in range(m)]
    log, got_jobs, got_rows = [], [], []

    async def drive(ctx):
        ctx.set(dut.desc, {"m": m, "n": n, "a_addr": base, "a_stride": stride})
        ctx.set(dut.start, 1)
        await ctx.tick()
        ctx.set(dut.start, 0)
        # (taken at start: the engine goes on to the next descriptor meanwhile)
        ctx.set(dut.desc, {"m": 3, "n": 5, "a_addr": 0, "a_stride": 0})

    async def take_jobs(ctx):
        got_jobs.extend(await stream_recv(ctx, dut.o_write, len(jobs),
                                          rng=random.Random(seed + 1), stall=stall))

    async def take_rows(ctx):
        got_rows.extend(await stream_recv(ctx, dut.o_stream, len(jobs) * rows,
                                          rng=random.Random(seed + 2), stall=stall))
        for _ in range(4):
            await ctx.tick()
        assert ctx.get(dut.idle) and not ctx.get(dut.walking)

    run(dut, drive, take_jobs, take_rows,
        processes=[memory_reader(dut, memory, bpw, regions, log, rng=random.Random(seed + 3),
                                 stall=stall)],
        deadline_cycles=200 + 40 * len(jobs) * rows * max(1, 4 * cols // bpw))
    assert [(int(j.m0), int(j.n0)) for j in got_jobs] == jobs
    beats = np.array([[int(v) for v in b.data] for b in got_rows], np.uint32)
    np.testing.assert_array_equal(beats.reshape(want.shape), want)
    assert [int(b.last) for b in got_rows] == [int(i % rows == rows - 1)
                                              for i in range(len(got_rows))]
    # a command a row inside the matrix, none for the rows beyond
    assert len(log) == sum(min(rows, m - m0) for m0, _ in jobs)


@pytest.mark.parametrize(("rows", "cols", "data_width"),
                         [(4, 4, 64), (8, 8, 128), (16, 16, 64), (32, 32, 512), (8, 8, 256)])
def test_tiles_match_numpy(rows, cols, data_width):
    check(rows, cols, data_width, 45, 70, seed=rows * 7 + data_width)


@pytest.mark.parametrize("seed", range(4))
def test_random_shapes(seed):
    rng = random.Random(seed)
    rows = rng.choice([4, 8, 16])
    dw = rng.choice([w for w in (64, 128, 256) if (4 * rows) % (w // 8) == 0])
    check(rows, rows, dw, rng.randint(1, 80), rng.randint(1, 80), seed=seed + 50,
          stall=rng.choice([0.0, 0.3, 0.6]))


def test_one_element():
    check(8, 8, 128, 1, 1, seed=3)


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"rows": 6, "cols": 8}, "rows must be a power of two dividing 32, not 6"),
    ({"rows": 8, "cols": 64}, "cols must be a power of two dividing 32, not 64"),
    ({"rows": 4, "cols": 4, "data_width": 256}, "whole words of a 256-bit bus"),
])
def test_arguments_checked(kwargs, message):
    with pytest.raises(ValueError, match=message):
        Fp32TileReader(**kwargs)
