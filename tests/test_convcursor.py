"""rtl.convcursor.ConvCursor against sim.models.conv.tile_columns and pool_tile_columns
(themselves against loops over the image): random geometries in both modes, with and
without pooling phases, random walks of tiles, offsets and phases, in the Amaranth
simulator and under cocotb on Icarus and Verilator (sim.testbenches.convcursor)."""

import random

import numpy as np
import pytest

from firmware.spec.regmap import TILE_BLOCK
from rtl.convcursor import ConvCursor, OffOp, PosOp
from sim.models.conv import ConvGeometry, pool_tile_columns, tile_columns
from sim.testbenches.convcursor import geometry_fields, random_walk, sweep
from sim.testbenches.harness import run
from sim.testbenches.runner import run_component


def loop_columns(g, mode, cols):
    """tile_columns by loops over positions and the kernel, as the textbook writes them."""
    kh, kw = g.kernel
    order = [(dy, dx) for dy in range(kh) for dx in range(kw)]
    if mode == 2:
        order = order[::-1]
    if mode == 1:
        positions = [(a, b, n) for a in range(g.out_height) for b in range(g.out_width)
                     for n in range(g.batch)]
    else:
        positions = [(a, b, n) for a in range(g.height) for b in range(g.width)
                     for n in range(g.batch)]
    out = np.full((len(positions) // cols, len(order)), -1, np.int64)
    for t in range(len(positions) // cols):
        a, b, n = positions[t * cols]
        for i, (dy, dx) in enumerate(order):
            if mode == 1:      # output (a, b) reads input (h, w)
                h = a * g.stride[0] + dy * g.dilation[0] - g.padding[0]
                w = b * g.stride[1] + dx * g.dilation[1] - g.padding[1]
                if 0 <= h < g.height and 0 <= w < g.width:
                    out[t, i] = (h * g.width + w) * g.batch + n
            else:              # input (a, b) is read by output (oh, ow), if any
                for oh in range(g.out_height):
                    for ow in range(g.out_width):
                        if (oh * g.stride[0] + dy * g.dilation[0] - g.padding[0] == a
                                and ow * g.stride[1] + dx * g.dilation[1] - g.padding[1] == b):
                            out[t, i] = (oh * g.out_width + ow) * g.batch + n
    return out


def random_geometry(rng, cols):
    while True:
        k = (rng.randint(1, 5), rng.randint(1, 5))
        try:
            return ConvGeometry(cols * rng.randint(1, 3), rng.randint(1, 3), rng.randint(1, 9),
                                rng.randint(1, 9), rng.randint(1, 3), k,
                                stride=(rng.randint(1, 3), rng.randint(1, 3)),
                                padding=(rng.randint(0, 2), rng.randint(0, 2)),
                                dilation=(rng.randint(1, 2), rng.randint(1, 2)))
        except ValueError:
            continue


@pytest.mark.parametrize("seed", range(12))
def test_model_matches_loops(seed):
    rng = random.Random(seed)
    cols = rng.choice([1, 2, 4])
    g = random_geometry(rng, cols)
    for mode in (1, 2):
        np.testing.assert_array_equal(tile_columns(g, mode, cols), loop_columns(g, mode, cols))


def test_model_refuses():
    g = ConvGeometry(6, 1, 4, 4, 1, 3, padding=1)
    with pytest.raises(ValueError, match="cols 4 must divide the batch"):
        tile_columns(g, 1, 4)
    with pytest.raises(ValueError, match="mode must be 1 or 2"):
        tile_columns(g, 3, 2)


async def _set_up(ctx, dut, fields) -> int:
    """Set the cursor's geometry ``fields`` and start it; the cycles until it is ready."""
    for name, v in fields.items():
        ctx.set(getattr(dut.geometry, name), v)
    ctx.set(dut.start, 1)
    await ctx.tick()
    ctx.set(dut.start, 0)
    cycles = 1
    while not ctx.get(dut.ready):
        await ctx.tick()
        cycles += 1
    return cycles


async def _drive(ctx, dut, ops, check):
    """Apply each of ``ops`` (``(pos_op, off_op, *state)``, ``state`` where the ops lead) a
    cycle, then three holds; ``check(ctx, *state)`` each cycle ``LATENCY`` cycles after."""
    history = []
    hold = (PosOp.HOLD, OffOp.HOLD, None)
    for pos_op, off_op, *state in list(ops) + [hold] * 3:
        ctx.set(dut.pos_op, pos_op)
        ctx.set(dut.off_op, off_op)
        history.append(tuple(state) if state[0] is not None else history[-1])
        await ctx.tick()
        if len(history) >= ConvCursor.LATENCY:
            check(ctx, *history[-ConvCursor.LATENCY])


def simulate(g, mode, cols, seed, walk=random_walk):
    """Sets the cursor up for ``g`` and moves it by ``walk``, checking every cycle's outputs
    ``LATENCY`` cycles after its ops against the model; returns the (tile, offset) pairs
    checked."""
    # (mode 3: the forward map, TILE_BLOCK positions a tile)
    want = tile_columns(g, 1, TILE_BLOCK) if mode == 3 else tile_columns(g, mode, cols)
    tiles, kk = want.shape
    dut = ConvCursor(cols)
    ops = list(walk(random.Random(seed), tiles, kk))
    fields = geometry_fields(g, mode)
    checked = []

    def check(ctx, tt, kt):
        col = int(want[tt, kt])
        got = (ctx.get(dut.inside), ctx.get(dut.offset), ctx.get(dut.last_offset))
        assert got == (int(col >= 0), kk - 1 - kt if mode == 2 else kt,
                       int(kt == kk - 1)), (tt, kt)
        if col >= 0:
            assert ctx.get(dut.column) == col, (tt, kt)
        checked.append((tt, kt))

    async def bench(ctx):
        assert await _set_up(ctx, dut, fields) == ConvCursor.SETUP_CYCLES
        assert ctx.get(dut.positions) == (g.positions if mode == 2 else g.out_positions)
        assert ctx.get(dut.out_positions) == g.out_positions
        await _drive(ctx, dut, ops, check)

    run(dut, bench, deadline_cycles=len(ops) + 400)
    return checked


@pytest.mark.parametrize("mode", [1, 2])
@pytest.mark.parametrize("seed", range(6))
def test_cursor_random(mode, seed):
    rng = random.Random(100 * mode + seed)
    cols = rng.choice([1, 2, 4, 8])
    g = random_geometry(rng, cols)
    checked = simulate(g, mode, cols, seed)
    assert len(checked) == 300


@pytest.mark.parametrize("mode", [1, 2])
def test_cursor_edges(mode):
    """Stride 2 with padding 2 and dilation 2 on an odd image, a 1 x 1 kernel with stride 2
    (a quarter of the input read), and one input channel: every tile at every offset."""
    for g, cols in ((ConvGeometry(4, 1, 7, 5, 2, (3, 5), stride=2, padding=2, dilation=(2, 1)),
                     4),
                    (ConvGeometry(2, 3, 6, 6, 2, 1, stride=2), 2),
                    (ConvGeometry(8, 1, 5, 5, 1, 5, padding=2), 8)):
        want = tile_columns(g, mode, cols)
        checked = simulate(g, mode, cols, seed=7, walk=sweep)
        assert set(checked) == {(t, k) for t in range(want.shape[0])
                                for k in range(want.shape[1])}


def test_cursor_refuses():
    with pytest.raises(ValueError, match="cols must be a power of two"):
        ConvCursor(6)


@pytest.mark.parametrize("simulator", ["icarus", "verilator"])
@pytest.mark.parametrize("mode", [1, 2])
def test_cursor_cocotb(simulator, mode):
    """The generated Verilog: a random walk and a full sweep of stride 2, padding 2 and
    dilation 2 on an odd image with a non-square kernel."""
    g = (8, 1, 7, 5, 2, 3, 5, 2, 2, 2, 2, 2, 1)
    for ops in (300, 0):
        tests, failed = run_component(simulator, ConvCursor(4), "conv_cursor_4",
                                      "sim.testbenches.convcursor", "cursor_random",
                                      CONV_COLS=4, CONV_MODE=mode,
                                      CONV_GEOMETRY=",".join(map(str, g)), CONV_SEED=mode,
                                      CONV_OPS=ops)
        assert tests == 1 and failed == 0, f"{failed} of {tests} cocotb tests failed"


@pytest.mark.parametrize("simulator", ["icarus", "verilator"])
def test_cursor_pool_cocotb(simulator):
    """The generated Verilog with pooling phases: a random walk over a 2 x 3 window of a
    strided, padded, dilated convolution."""
    g = (8, 1, 9, 9, 2, 3, 2, 2, 1, 2, 1, 1, 2)
    conv = ConvGeometry(*g[:5], kernel=g[5:7], stride=g[7:9], padding=g[9:11],
                        dilation=g[11:13])
    assert (conv.out_height, conv.out_width) == (6, 9)
    tests, failed = run_component(simulator, ConvCursor(4), "conv_cursor_4",
                                  "sim.testbenches.convcursor", "cursor_pool", CONV_COLS=4,
                                  CONV_GEOMETRY=",".join(map(str, g)), CONV_POOL="2,3",
                                  CONV_SEED=3, CONV_OPS=300)
    assert tests == 1 and failed == 0, f"{failed} of {tests} cocotb tests failed"


@pytest.mark.parametrize("seed", range(3))
def test_cursor_weight_gradient_runs(seed):
    """Mode 3: a tile is a K run of TILE_BLOCK output positions (the batch a multiple of
    it), read through the forward map."""
    rng = random.Random(300 + seed)
    while True:
        try:
            g = ConvGeometry(TILE_BLOCK * rng.randint(1, 2), 2, rng.randint(2, 6),
                             rng.randint(2, 6), 3, (rng.randint(1, 3), rng.randint(1, 3)),
                             stride=rng.randint(1, 2), padding=rng.randint(0, 1))
            break
        except ValueError:
            continue
    want = tile_columns(g, 1, TILE_BLOCK)
    checked = simulate(g, 3, 8, seed, walk=sweep)
    assert set(checked) == {(t, k) for t in range(want.shape[0]) for k in range(want.shape[1])}


def loop_pool_columns(g, pool, cols):
    """pool_tile_columns by loops: each pooled position's window, phase by phase."""
    ph, pw = pool
    kh, kw = g.kernel
    b, c = [], []
    for poh in range(g.out_height // ph):
        for pw_ in range(g.out_width // pw):
            for n in range(0, g.batch, cols):
                tb, tc = [], []
                for a in range(ph):
                    for bb in range(pw):
                        oh, ow = poh * ph + a, pw_ * pw + bb
                        tc.append((oh * g.out_width + ow) * g.batch + n)
                        row = []
                        for dy in range(kh):
                            for dx in range(kw):
                                h = oh * g.stride[0] + dy * g.dilation[0] - g.padding[0]
                                w = ow * g.stride[1] + dx * g.dilation[1] - g.padding[1]
                                inside = 0 <= h < g.height and 0 <= w < g.width
                                row.append((h * g.width + w) * g.batch + n if inside else -1)
                        tb.append(row)
                b.append(tb)
                c.append(tc)
    return np.array(b, np.int64), np.array(c, np.int64)


def random_pooled(rng, cols):
    """A random convolution whose output a random window divides."""
    while True:
        g = random_geometry(rng, cols)
        pool = (rng.randint(1, 3), rng.randint(1, 3))
        if g.out_height % pool[0] == 0 and g.out_width % pool[1] == 0 and pool != (1, 1):
            return g, pool


@pytest.mark.parametrize("seed", range(6))
def test_pool_model_matches_loops(seed):
    rng = random.Random(50 + seed)
    cols = rng.choice([1, 2, 4])
    g, pool = random_pooled(rng, cols)
    for got, want in zip(pool_tile_columns(g, pool, cols), loop_pool_columns(g, pool, cols),
                         strict=True):
        np.testing.assert_array_equal(got, want)
    with pytest.raises(ValueError, match="must divide the output"):
        pool_tile_columns(ConvGeometry(2, 1, 5, 5, 1, 1), 2, 2)


def simulate_pool(g, pool, cols, seed, ops=300, mode=1):
    """As :func:`simulate` with pooling phases (``mode`` 1: a forward convolution's pool;
    2: a backward-data convolution's deltas routed back through it): every output against
    :func:`pool_tile_columns` ``LATENCY`` cycles after its ops."""
    want_b, want_c = pool_tile_columns(g, pool, cols, mode)
    tiles, phases, kk = want_b.shape
    dut = ConvCursor(cols)
    walk = list(random_walk(random.Random(seed), tiles, kk, ops, phases))
    checked = []

    def check(ctx, t, p, k):
        col = int(want_b[t, p, k])
        got = (ctx.get(dut.inside), ctx.get(dut.offset), ctx.get(dut.last_offset),
               ctx.get(dut.phase), ctx.get(dut.last_phase), ctx.get(dut.c_column))
        assert got == (int(col >= 0), kk - 1 - k if mode == 2 else k, int(k == kk - 1),
                       p, int(p == phases - 1), int(want_c[t, p])), (t, p, k, got)
        if col >= 0:
            assert ctx.get(dut.column) == col, (t, p, k)
        checked.append((t, p, k))

    async def bench(ctx):
        await _set_up(ctx, dut, geometry_fields(g, mode, pool))
        phases_n = pool[0] * pool[1]
        if mode == 1:
            assert ctx.get(dut.pool_exact) == 1
            assert ctx.get(dut.positions) == g.out_positions // phases_n
            assert ctx.get(dut.c_positions) == g.out_positions
        else:
            assert ctx.get(dut.positions) == g.positions
            assert ctx.get(dut.c_positions) == g.positions * phases_n
        assert ctx.get(dut.out_positions) == g.out_positions
        await _drive(ctx, dut, walk, check)

    run(dut, bench, deadline_cycles=len(walk) + 400)
    return checked


@pytest.mark.parametrize("seed", range(6))
def test_cursor_pool_phases(seed):
    """Forward with pooling windows of 1 to 3 a side: random walks of tiles, offsets and
    phases, every output (C's column at the phase too)."""
    rng = random.Random(400 + seed)
    cols = rng.choice([1, 2, 4, 8])
    g, pool = random_pooled(rng, cols)
    assert len(simulate_pool(g, pool, cols, seed)) == 300


@pytest.mark.parametrize("seed", range(4))
def test_cursor_unpool_phases(seed):
    """Backward-data under a pool's backward pass (windows of 1 to 3 a side): B as without
    it, C's column at each phase the pool's input's."""
    rng = random.Random(500 + seed)
    cols = rng.choice([1, 2, 4, 8])
    g = random_geometry(rng, cols)
    pool = (rng.randint(1, 3), rng.randint(1, 3))
    assert len(simulate_pool(g, pool, cols, seed, mode=2)) == 300


def test_cursor_pool_not_exact():
    """A window that does not divide the output: pool_exact low."""
    g, dut = ConvGeometry(2, 1, 5, 4, 1, 1), ConvCursor(2)

    async def bench(ctx):
        for name, v in geometry_fields(g, 1, (2, 2)).items():
            ctx.set(getattr(dut.geometry, name), v)
        ctx.set(dut.start, 1)
        await ctx.tick()
        ctx.set(dut.start, 0)
        while not ctx.get(dut.ready):
            await ctx.tick()
        assert ctx.get(dut.pool_exact) == 0

    run(dut, bench, deadline_cycles=400)
