"""cocotb testbench of the generated :class:`rtl.convcursor.ConvCursor` Verilog against
:func:`sim.models.conv.tile_columns`, and the walks both it and the Amaranth simulator's
test move the cursor by.

Parameters come from the environment (set by ``tests/test_convcursor.py``): ``CONV_COLS``
(the cursor's ``cols``), ``CONV_MODE`` (1 or 2), ``CONV_GEOMETRY`` (``batch, channels,
height, width, out_channels, kh, kw, sy, sx, py, px, ry, rx``), ``CONV_SEED`` and
``CONV_OPS`` (the random walk's length; 0 sweeps every tile at every offset in order), and
for :func:`cursor_pool` ``CONV_POOL`` (the pooling window, ``ph,pw``).
"""

from __future__ import annotations

import os
import random

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, FallingEdge, RisingEdge

from rtl.convcursor import ConvCursor, OffOp, PosOp, conv_geometry_layout
from sim.models.conv import ConvGeometry, pool_tile_columns, tile_columns

__all__ = ["sweep", "random_walk", "geometry_fields", "cursor_walk"]


def sweep(rng, tiles, kk):
    """Every tile at every offset, in order: ``(pos_op, off_op, tile, offset)`` a cycle."""
    for t in range(tiles):
        for k in range(kk):
            yield (PosOp.NEXT if t and not k else PosOp.HOLD,
                   OffOp.NEXT if k else OffOp.ZERO if t else OffOp.HOLD, t, k)


def random_walk(rng, tiles, kk, ops=300, phases=None):
    """Tiles forward, back to the mark, on to the next block (marked) or to the first;
    offsets forward or back to the first: ``(pos_op, off_op, tile, offset)`` a cycle. With
    ``phases``, the pooling phase moved on now and then too (:data:`OffOp.PHASE`, back to
    the first offset): ``(pos_op, off_op, tile, phase, offset)``."""
    pooled = phases is not None
    # (the chances of the moves, each the first where the draw is below it; a pooled walk
    # leaves room for the phase's)
    nxt, back, adv, zero = (0.5, 0.6, 0.7, 0.73) if pooled else (0.55, 0.65, 0.75, 0.78)
    o_next, o_zero = (0.45, 0.55) if pooled else (0.5, 0.6)
    t = mark = k = p = 0
    for _ in range(ops):
        pos_op, off_op = PosOp.HOLD, OffOp.HOLD
        r = rng.random()
        if r < nxt and t + 1 < tiles:
            pos_op, t = PosOp.NEXT, t + 1
        elif r < back:
            pos_op, t = PosOp.BACK, mark
        elif r < adv and t + 1 < tiles:
            pos_op, t = PosOp.ADVANCE, t + 1
            mark = t
        elif r < zero:
            pos_op, t, mark = PosOp.ZERO, 0, 0
        r = rng.random()
        if r < o_next and k + 1 < kk:
            off_op, k = OffOp.NEXT, k + 1
        elif r < o_zero:
            off_op, k = OffOp.ZERO, 0
        elif pooled and r < 0.7:
            off_op, k, p = OffOp.PHASE, 0, (p + 1) % phases
        yield (pos_op, off_op, t, p, k) if pooled else (pos_op, off_op, t, k)


def geometry_fields(g: ConvGeometry, mode: int, pool=(1, 1)) -> dict:
    """The cursor's :func:`rtl.convcursor.conv_geometry_layout` fields for ``g`` (and a
    forward convolution's pooling windows ``pool``)."""
    return dict(mode=mode, kernel_h=g.kernel[0], kernel_w=g.kernel[1], stride_h=g.stride[0],
                stride_w=g.stride[1], pad_h=g.padding[0], pad_w=g.padding[1],
                dilation_h=g.dilation[0], dilation_w=g.dilation[1], height=g.height,
                width=g.width, batch=g.batch, pool_h=pool[0], pool_w=pool[1])


def cursor_walk(want, ops):
    """The expected outputs a cycle of a walk: ``(inside, column, offset, last_offset)``
    for each of ``ops`` (the walk's tuples), ``want`` the model's
    :func:`~sim.models.conv.tile_columns` in K order."""
    kk = want.shape[1]
    return [(int(want[t, k] >= 0), int(want[t, k]), k, int(k == kk - 1)) for *_, t, k in ops]


@cocotb.test()
async def cursor_random(dut):
    """Set the cursor up, then move it a cycle at a time, each cycle's outputs checked
    ``LATENCY`` cycles after its ops."""
    cols, mode = int(os.environ["CONV_COLS"]), int(os.environ["CONV_MODE"])
    v = [int(x) for x in os.environ["CONV_GEOMETRY"].split(",")]
    g = ConvGeometry(*v[:5], kernel=tuple(v[5:7]), stride=tuple(v[7:9]),
                     padding=tuple(v[9:11]), dilation=tuple(v[11:13]))
    seed, count = int(os.environ.get("CONV_SEED", 1)), int(os.environ.get("CONV_OPS", 300))
    want = tile_columns(g, mode, cols)
    tiles, kk = want.shape
    rng = random.Random(seed)
    ops = list(sweep(rng, tiles, kk) if count == 0 else random_walk(rng, tiles, kk, count))
    expect = cursor_walk(want, ops)
    cocotb.start_soon(Clock(dut.clk, 10, unit="ns").start())
    dut.rst.value = 1
    dut.start.value = 0
    dut.pos_op.value = PosOp.HOLD
    dut.off_op.value = OffOp.HOLD
    dut.geometry.value = conv_geometry_layout().const(geometry_fields(g, mode)).as_bits()
    await ClockCycles(dut.clk, 3)
    dut.rst.value = 0
    await FallingEdge(dut.clk)
    dut.start.value = 1
    await FallingEdge(dut.clk)
    dut.start.value = 0
    cycles = 1
    while str(dut.ready.value) != "1":
        await FallingEdge(dut.clk)
        cycles += 1
    assert cycles == ConvCursor.SETUP_CYCLES, cycles
    positions = g.out_positions if mode == 1 else g.positions
    assert int(dut.positions.value) == positions
    tail = [(PosOp.HOLD, OffOp.HOLD)] * (ConvCursor.LATENCY - 1)   # the last ops' outputs
    for i, (pos_op, off_op, *_) in enumerate(ops + tail):
        dut.pos_op.value = pos_op
        dut.off_op.value = off_op
        await RisingEdge(dut.clk)
        await FallingEdge(dut.clk)
        j = min(i + 1 - ConvCursor.LATENCY, len(ops) - 1)
        if j < 0:
            continue
        inside, column, k, last = expect[j]
        stack = k if mode == 1 else kk - 1 - k
        got = (int(dut.inside.value), int(dut.offset.value), int(dut.last_offset.value))
        assert got == (inside, stack, last), (j, ops[j], got)
        if inside:
            assert int(dut.column.value) == column, (j, int(dut.column.value), column)


@cocotb.test()
async def cursor_pool(dut):
    """A forward convolution with pooling windows ``CONV_POOL`` (``ph,pw``): a random walk
    of tiles, offsets and phases, each cycle's outputs (C's column at the phase too)
    checked ``LATENCY`` cycles after its ops against
    :func:`~sim.models.conv.pool_tile_columns`."""
    cols = int(os.environ["CONV_COLS"])
    v = [int(x) for x in os.environ["CONV_GEOMETRY"].split(",")]
    g = ConvGeometry(*v[:5], kernel=tuple(v[5:7]), stride=tuple(v[7:9]),
                     padding=tuple(v[9:11]), dilation=tuple(v[11:13]))
    pool = tuple(int(x) for x in os.environ["CONV_POOL"].split(","))
    want_b, want_c = pool_tile_columns(g, pool, cols)
    tiles, phases, kk = want_b.shape
    ops = list(random_walk(random.Random(int(os.environ.get("CONV_SEED", 1))), tiles, kk,
                           int(os.environ.get("CONV_OPS", 300)), phases))
    cocotb.start_soon(Clock(dut.clk, 10, unit="ns").start())
    dut.rst.value = 1
    dut.start.value = 0
    dut.pos_op.value = PosOp.HOLD
    dut.off_op.value = OffOp.HOLD
    dut.geometry.value = conv_geometry_layout().const(
        geometry_fields(g, 1, pool)).as_bits()
    await ClockCycles(dut.clk, 3)
    dut.rst.value = 0
    await FallingEdge(dut.clk)
    dut.start.value = 1
    await FallingEdge(dut.clk)
    dut.start.value = 0
    while str(dut.ready.value) != "1":
        await FallingEdge(dut.clk)
    assert int(dut.pool_exact.value) == 1
    tail = [(PosOp.HOLD, OffOp.HOLD)] * (ConvCursor.LATENCY - 1)
    for i, (pos_op, off_op, *_) in enumerate(ops + tail):
        dut.pos_op.value = pos_op
        dut.off_op.value = off_op
        await RisingEdge(dut.clk)
        await FallingEdge(dut.clk)
        j = min(i + 1 - ConvCursor.LATENCY, len(ops) - 1)
        if j < 0:
            continue
        _, _, t, p, k = ops[j]
        col = int(want_b[t, p, k])
        got = (int(dut.inside.value), int(dut.offset.value), int(dut.last_offset.value),
               int(dut.phase.value), int(dut.last_phase.value), int(dut.c_column.value))
        assert got == (int(col >= 0), k, int(k == kk - 1), p, int(p == phases - 1),
                       int(want_c[t, p])), (j, ops[j], got)
        if col >= 0:
            assert int(dut.column.value) == col, (j, int(dut.column.value), col)
