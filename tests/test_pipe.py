"""RegisterSlice: the stream passes unchanged under any valid/ready pattern, and nothing
passes through it combinationally."""

import random

import pytest
from amaranth.sim import Simulator

from rtl.pipe import RegisterSlice


@pytest.mark.parametrize("slice_bits", [None, 5])
@pytest.mark.parametrize("seed,p_valid,p_ready", [(1, 1.0, 1.0), (2, 0.5, 0.5),
                                                  (3, 0.9, 0.2), (4, 0.2, 0.9)])
def test_slice_passes_every_word_in_order(seed, p_valid, p_ready, slice_bits):
    # (slice_bits 5: three slices of 5, 5 and 2 bits side by side, the same stream)
    rng = random.Random(seed)
    dut = RegisterSlice(12, slice_bits=slice_bits)
    words = [rng.randrange(1 << 12) for _ in range(300)]
    got, cycles = [], []

    async def bench(ctx):
        sent, cycle = 0, 0
        held = False                        # a word offered stays offered until taken
        while len(got) < len(words):
            assert cycle < 20 * len(words), "the slice hangs"
            if sent < len(words) and (held or rng.random() < p_valid):
                ctx.set(dut.i_stream.valid, 1)
                ctx.set(dut.i_stream.payload, words[sent])
                held = True
            else:
                ctx.set(dut.i_stream.valid, 0)
            ctx.set(dut.o_stream.ready, rng.random() < p_ready)
            i_ready, o_valid, o_payload = (ctx.get(dut.i_stream.ready),
                                           ctx.get(dut.o_stream.valid),
                                           ctx.get(dut.o_stream.payload))
            # no combinational path: flipping the other side's signals changes nothing here
            for v, r in ((0, 0), (1, 1), (0, 1), (1, 0)):
                ctx.set(dut.i_stream.valid, v if not held else 1)
                ctx.set(dut.o_stream.ready, r)
                assert ctx.get(dut.i_stream.ready) == i_ready
                assert ctx.get(dut.o_stream.valid) == o_valid
                assert ctx.get(dut.o_stream.payload) == o_payload
            ctx.set(dut.i_stream.valid, held)
            ready = rng.random() < p_ready
            ctx.set(dut.o_stream.ready, ready)
            if o_valid and ready:
                got.append(o_payload)
                cycles.append(cycle)
            if held and i_ready:
                sent += 1
                held = False
            await ctx.tick()
            cycle += 1

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    assert got == words
    if p_valid == 1.0 and p_ready == 1.0:
        # one word a cycle, each one cycle after it is taken
        assert cycles == list(range(RegisterSlice.LATENCY, RegisterSlice.LATENCY + len(words)))


@pytest.mark.parametrize("bad", [0, -1, 2.5, "8"])
def test_bad_slice_bits(bad):
    with pytest.raises(ValueError, match="slice_bits"):
        RegisterSlice(12, slice_bits=bad)
