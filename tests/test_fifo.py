"""rtl.fifo.Fifo against amaranth.lib.fifo.SyncFIFOBuffered, cycle for cycle."""

import random

import pytest
from amaranth import Module
from amaranth.lib import fifo
from amaranth.sim import Simulator

from rtl.fifo import Fifo


@pytest.mark.parametrize("lookahead", [False, True])
@pytest.mark.parametrize("slice_bits", [None, 3])
@pytest.mark.parametrize("depth", [2, 3, 4, 5, 8, 17])
def test_same_as_sync_fifo_buffered(depth, slice_bits, lookahead):
    """Both FIFOs get the same random writes and reads (bursts of each, long stalls, both
    at once); every output (``w_rdy``, ``r_rdy``, ``r_data`` while ready, ``level``; ``empty``
    against ``level == 0``) agrees on every cycle, and the words come out in order. Built
    in slices of 3 bits (three FIFOs side by side), the same. With ``lookahead``, a
    register that takes ``r_next`` whenever ``r_load`` is high equals ``r_data`` on every
    cycle, ready or not."""
    m = Module()
    m.submodules.ours = ours = Fifo(width=8, depth=depth, slice_bits=slice_bits,
                                    lookahead=lookahead)
    m.submodules.ref = ref = fifo.SyncFIFOBuffered(width=8, depth=depth)
    rng = random.Random(depth)
    out = []

    async def bench(ctx):
        word = 0
        p_write, p_read = 0.5, 0.5
        shadow, loads = 0, 0
        for cycle in range(3000):
            if cycle % 200 == 0:          # phases: filling, draining, balanced, idle
                p_write, p_read = rng.choice([(0.9, 0.2), (0.2, 0.9), (0.6, 0.6), (0, 0),
                                              (1, 1)])
            w_en, r_en = rng.random() < p_write, rng.random() < p_read
            for f in (ours, ref):
                ctx.set(f.w_en, w_en)
                ctx.set(f.w_data, word)
                ctx.set(f.r_en, r_en)
            got = [(ctx.get(f.w_rdy), ctx.get(f.r_rdy), ctx.get(f.level)) for f in (ours, ref)]
            assert got[0] == got[1], (cycle, got)
            assert ctx.get(ours.empty) == (ctx.get(ref.level) == 0), cycle
            if ctx.get(ref.r_rdy):
                assert ctx.get(ours.r_data) == ctx.get(ref.r_data), cycle
                if r_en:
                    out.append(ctx.get(ours.r_data))
            if w_en and ctx.get(ref.w_rdy):
                word = (word + 1) % 256
            if lookahead:
                assert ctx.get(ours.r_data) == shadow, cycle
                if ctx.get(ours.r_load):
                    shadow, loads = ctx.get(ours.r_next), loads + 1
            await ctx.tick()
        assert not lookahead or loads > 500

    sim = Simulator(m)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    assert out == [i % 256 for i in range(len(out))]
    assert len(out) > 500


@pytest.mark.parametrize("kwargs", [dict(width=8, depth=1), dict(width=8, depth=0),
                                    dict(width=-1, depth=4), dict(width=8, depth=2.5),
                                    dict(width=8, depth=4, slice_bits=0)])
def test_bad_parameters(kwargs):
    with pytest.raises((TypeError, ValueError), match="width|depth|slice_bits"):
        Fifo(**kwargs)
