"""rtl.fpread.Fp32TileReader against sim.models.fpread: its jobs, its beats bit for bit
(inf, NaN and -0.0 included) and its read commands, under random stalls on every stream."""

import random

import numpy as np
import pytest

from rtl.fpread import Fp32TileReader
from sim.models import conv, fpread
from sim.testbenches.convcursor import geometry_fields
from sim.testbenches.harness import run, stream_recv

from .test_sideload import memory_reader

MEM = 1 << 17


def _ceil_to(x: int, a: int) -> int:
    return -(-x // a) * a


def walk(dut, desc, next_desc, jobs, want, rows, memory, bpw, regions, seed, stall, slack):
    """Start ``dut`` on ``desc`` (``next_desc`` set the cycle after: taken at start, the
    engine goes on to the next descriptor meanwhile), answer its reads from ``memory``
    (each within ``regions``) and take its jobs and beats under random stalls: the jobs
    are ``jobs``, the beats ``want`` bit for bit, ``last`` on each tile's last row, and it
    ends idle. Returns the read commands' log."""
    log, got_jobs, got_rows = [], [], []

    async def drive(ctx):
        ctx.set(dut.desc, desc)
        ctx.set(dut.start, 1)
        await ctx.tick()
        ctx.set(dut.start, 0)
        ctx.set(dut.desc, next_desc)

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
        deadline_cycles=slack + 40 * len(jobs) * rows * max(1, 4 * dut.cols // bpw))
    assert [(int(j.m0), int(j.n0)) for j in got_jobs] == jobs
    beats = np.array([[int(v) for v in b.data] for b in got_rows], np.uint32)
    np.testing.assert_array_equal(beats.reshape(want.shape), want)
    assert [int(b.last) for b in got_rows] == [int(i % rows == rows - 1)
                                              for i in range(len(got_rows))]
    return log


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
    log = walk(dut, {"m": m, "n": n, "a_addr": base, "a_stride": stride},
               {"m": 3, "n": 5, "a_addr": 0, "a_stride": 0}, jobs, want, rows, memory, bpw,
               regions, seed, stall, 200)
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


# ---- unfolding a convolution's input (im2col in the CHWN layout) ---------------------------

def check_unfold(rows, cols, data_width, geometry, seed, stall=0.3):
    """The reader with ``unfold``: the beats of :func:`sim.models.conv.unfold`'s matrix in
    walk order, a read command for each of its rows whose pixel is inside the image (none
    for padding or rows beyond M), each inside the input's rows."""
    g = geometry
    rng = random.Random(seed)
    bpw = data_width // 8
    row_bytes = 4 * g.positions
    stride = _ceil_to(row_bytes, bpw) + bpw * rng.randint(0, 2)
    size = g.channels * stride + 4 * bpw
    memory = np.frombuffer(rng.randbytes(size), np.uint8).copy()
    base = _ceil_to(rng.randrange(0, 2 * bpw), bpw)
    x = np.random.default_rng(seed).standard_normal((g.channels, g.positions)).astype(
        np.float32)
    x.flat[::11] = np.resize(np.array([np.inf, np.nan, -0.0], np.float32), x.flat[::11].shape)
    for c in range(g.channels):
        memory[base + c * stride:base + c * stride + row_bytes] = x[c].view(np.uint8)
    u = conv.unfold(x, g)
    m, n = u.shape
    jobs = fpread.tile_jobs(m, n, rows, cols)
    want = fpread.tile_rows(u, rows, cols).view(np.uint32)
    index = {off: g.input_index(*off) for off in g.offsets}
    reads = sum(1 for m0, n0 in jobs for r in range(min(rows, m - m0))
                if index[g.offsets[(m0 + r) % len(g.offsets)]][n0] >= 0)
    dut = Fp32TileReader(rows, cols, data_width=data_width, addr_width=32, unfold=True)
    regions = [(base + c * stride, base + c * stride + row_bytes) for c in range(g.channels)]
    log = walk(dut, {"m": m, "n": n, "a_addr": base, "a_stride": stride, "unfold": 1,
                     "geometry": geometry_fields(g, 1)},
               {"m": 3, "n": 5, "a_addr": 0, "a_stride": 0, "unfold": 0}, jobs, want, rows,
               memory, bpw, regions, seed, stall, 400)
    assert len(log) == reads


UNFOLDS = {
    # (the first layers this is for: one and three channels, 3 x 3, padding 1)
    "fashion": conv.ConvGeometry(32, 1, 5, 4, 8, 3, padding=1),
    "cifar": conv.ConvGeometry(32, 3, 3, 4, 8, 3, padding=1),
    # strides, dilations, rectangular kernels, no padding, two images a unit
    "strided": conv.ConvGeometry(64, 2, 7, 6, 4, (3, 2), stride=(2, 3), padding=(1, 2)),
    "dilated": conv.ConvGeometry(32, 2, 6, 7, 4, (2, 3), dilation=(2, 2), padding=(0, 1)),
    # more than a unit of rows: 5 * 9 = 45 rows, units re-entered in each unit row
    "rows": conv.ConvGeometry(32, 5, 3, 3, 4, 3, padding=1),
    # a kernel one row high, and one column wide (a kernel offset each row or column)
    "one-row": conv.ConvGeometry(32, 2, 4, 5, 4, (1, 3), padding=(0, 1)),
    "one-column": conv.ConvGeometry(32, 3, 5, 3, 4, (3, 1), stride=(2, 1), padding=(1, 0)),
}


@pytest.mark.parametrize(("rows", "cols", "data_width", "name"), [
    (8, 8, 128, "fashion"), (8, 8, 128, "cifar"), (4, 8, 64, "strided"),
    (16, 16, 256, "dilated"), pytest.param(8, 4, 64, "rows", marks=pytest.mark.slow),
    (32, 32, 512, "rows"), (8, 8, 128, "one-row"), (8, 8, 64, "one-column"),
])
def test_unfold_matches_numpy(rows, cols, data_width, name):
    check_unfold(rows, cols, data_width, UNFOLDS[name], seed=rows + cols + len(name))


def test_unfold_unstalled_and_plain_after():
    """No stalls; and the same reader walks a plain matrix after an unfold."""
    check_unfold(8, 8, 128, UNFOLDS["strided"], seed=9, stall=0.0)
    check(8, 8, 128, 13, 21, seed=4)
