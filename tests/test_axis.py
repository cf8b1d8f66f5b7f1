"""The AXI4-Stream compute core: tiles in, C rows out, against the golden model."""

import numpy as np

from rtl.axis import StreamCore
from rtl.datapath import command_layout
from sim.models import datapath as models
from sim.models import golden
from sim.testbenches.harness import run


def test_stream_core_tiles_match_golden():
    rows, cols, k = 4, 4, 10
    rng = np.random.default_rng(1)
    cmds = [models.TileCommand(a=rng.integers(-128, 128, (k, rows)).astype(np.int8),
                               b=rng.integers(-128, 128, (cols, k)).astype(np.int8),
                               transpose_a=True, transpose_b=True, raw=bool(t),
                               row_exp=rng.integers(-5, 5, rows).astype(np.int8),
                               col_exp=rng.integers(-5, 5, cols).astype(np.int8))
             for t in range(2)]
    dut = StreamCore(rows, cols, depth=16)
    layout = command_layout(rows, cols, dut.core.slots, dut.core.acc_slots)
    got, lasts = [], []

    async def send(ctx, axis, beats):
        for beat in beats:
            ctx.set(axis.tdata, beat)
            ctx.set(axis.tvalid, 1)
            await ctx.tick().until(axis.tready)
        ctx.set(axis.tvalid, 0)

    def pack(vec):
        return int.from_bytes(np.asarray(vec, np.int8).tobytes(), "little")

    async def cmd(ctx):
        words = [layout.const(c.fields(i, rows, cols)).as_bits()
                 for i, c in enumerate(cmds)]
        await send(ctx, dut.s_axis_cmd, words)

    async def a(ctx):
        await send(ctx, dut.s_axis_a, [pack(v) for c in cmds
                                       for v in models.operand_beats(c.a, rows, True)])

    async def b(ctx):
        await send(ctx, dut.s_axis_b, [pack(v) for c in cmds
                                       for v in models.operand_beats(c.b, cols, False)])

    async def sink(ctx):
        ctx.set(dut.m_axis_c.tready, 1)
        while len(got) < rows * len(cmds):
            _, _, valid, word, last = await ctx.tick().sample(
                dut.m_axis_c.tvalid, dut.m_axis_c.tdata, dut.m_axis_c.tlast)
            if valid:
                got.append([(word >> (32 * j)) & 0xFFFFFFFF for j in range(cols)])
                lasts.append(last)

    run(dut, cmd, a, b, sink, deadline_cycles=2000)
    want = np.concatenate(models.datapath(cmds, rows, cols))
    np.testing.assert_array_equal(np.array(got, np.uint32), want)
    assert lasts == [0, 0, 0, 1] * 2
    acc = golden.gemm(cmds[1].a, cmds[1].b, True, True)
    np.testing.assert_array_equal(np.array(got[rows:], np.uint32).view(np.int32), acc)
