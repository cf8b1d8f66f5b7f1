"""rtl._util: the shared arithmetic and counting helpers against Python integers."""

import random

import pytest
from amaranth import Module, Signal
from amaranth.sim import Simulator

from rtl._util import carry_select_add, occupancy


@pytest.mark.parametrize("a_width, b_width, width, piece", [
    (64, 64, 64, 16),      # the loader's base + col
    (52, 1, 52, 16),       # the DMA's next page (an incrementer)
    (64, 32, 64, 16),      # an address plus a stride
    (33, 49, 64, 16),      # operands narrower than the result
    (17, 5, 20, 8),        # a result wider than both, pieces not dividing it
    (40, 40, 28, 16),      # a result narrower than the operands (wraps)
])
def test_carry_select_add(a_width, b_width, width, piece):
    """``(a + b) mod 2**width`` on random operands and on the carry-chain edge cases (all
    ones, one bit clear, zero), for every split of the pieces."""
    a, b, out = Signal(a_width), Signal(b_width), Signal(width)
    m = Module()
    m.d.comb += out.eq(carry_select_add(a, b, width, piece=piece))
    rng = random.Random(a_width * 1000 + b_width)

    def operand(bits):
        ones = (1 << bits) - 1
        return rng.choice([0, 1, ones, ones ^ (1 << rng.randrange(bits)), rng.getrandbits(bits),
                           ones ^ ((1 << rng.randrange(bits)) - 1)])

    async def bench(ctx):
        for _ in range(600):
            x, y = operand(a_width), operand(b_width)
            ctx.set(a, x)
            ctx.set(b, y)
            assert ctx.get(out) == (x + y) % (1 << width), (x, y)

    sim = Simulator(m)
    sim.add_testbench(bench)
    sim.run()


def test_carry_select_increment():
    """A constant operand (an incrementer) gives the same sums as a signal one."""
    a, out = Signal(24), Signal(24)
    m = Module()
    m.d.comb += out.eq(carry_select_add(a, 1, 24, piece=8))

    async def bench(ctx):
        for x in (0, 0xFF, 0xFFFF, 0xFFFFFF, 0x00FF00, 0x123456):
            ctx.set(a, x)
            assert ctx.get(out) == (x + 1) % (1 << 24)

    sim = Simulator(m)
    sim.add_testbench(bench)
    sim.run()


def test_occupancy_room():
    """``room`` is ``count < capacity`` one cycle after each push and pop, for random
    traffic that never pushes into a full count."""
    capacity = 3
    push, pop = Signal(), Signal()
    m = Module()
    room = occupancy(m, "q", capacity, push, pop)

    async def bench(ctx):
        rng = random.Random(7)
        count = 0
        for _ in range(400):
            assert ctx.get(room) == (count < capacity)
            do_push = int(count < capacity and rng.random() < 0.6)
            do_pop = int(count > 0 and rng.random() < 0.5)
            ctx.set(push, do_push)
            ctx.set(pop, do_pop)
            await ctx.tick()
            count += do_push - do_pop

    sim = Simulator(m)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
