"""cocotb testbenches of the generated :class:`rtl.prng.Threefry2x32` and
:class:`rtl.prng.RandomLanes` Verilog against :mod:`sim.models.prng`.

Parameters come from the environment (set by ``tests/test_prng_cocotb.py``): ``PRNG_LANES``
(the lanes of ``RandomLanes``), ``PRNG_SEED``, ``PRNG_BEATS`` (random beats after the fixed
ones) and ``PRNG_STALL`` (probability of an idle cycle on the input and of ``ready`` low on
the output). ``COCOTB_TEST_FILTER`` picks the test that fits the top level.
"""

from __future__ import annotations

import os
import random

import cocotb
import numpy as np
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles

from rtl.prng import (
    random_input_layout,
    random_output_layout,
    threefry_input_layout,
    threefry_output_layout,
)
from sim.models.prng import random_bits, threefry2x32
from sim.testbenches.streams import receive, send

__all__ = ["KAT", "threefry_streams", "random_lanes_streams"]

M32 = 0xFFFFFFFF

#: Random123's known-answer vectors of threefry2x32_20: key, counter -> output.
KAT = [
    ((0, 0), (0, 0), (0x6B200159, 0x99BA4EFE)),
    ((M32, M32), (M32, M32), (0x1CB996FC, 0xBB002BE7)),
    ((0x13198A2E, 0x03707344), (0x243F6A88, 0x85A308D3), (0xC4923A9C, 0x483DF7A0)),
]


def _env(name, default):
    return type(default)(os.environ.get(name, default))


async def _reset(dut):
    cocotb.start_soon(Clock(dut.clk, 10, unit="ns").start())
    dut.rst.value = 1
    dut.i_stream__valid.value = 0
    dut.o_stream__ready.value = 0
    await ClockCycles(dut.clk, 3)
    dut.rst.value = 0
    await ClockCycles(dut.clk, 1)


async def _exchange(dut, beats, seed, stall):
    """Send ``beats`` (integers) on ``i_stream``; the same number of payloads from
    ``o_stream``, then check that no extra beat follows."""
    cocotb.start_soon(send(dut, "i_stream", beats, random.Random(seed + 1), stall))
    got = await receive(dut, "o_stream", len(beats), random.Random(seed + 2), stall)
    dut.o_stream__ready.value = 1
    await ClockCycles(dut.clk, 40)
    assert str(dut.o_stream__valid.value) == "0", "extra output beats"
    return got


@cocotb.test()
async def threefry_streams(dut):
    """``Threefry2x32``: the known answers, corner words and random (key, counter) pairs."""
    seed, count, stall = _env("PRNG_SEED", 1), _env("PRNG_BEATS", 200), _env("PRNG_STALL", 0.3)
    rng = np.random.default_rng(seed)
    items = [(*key, *ctr) for key, ctr, _ in KAT]
    items += [(0, 0, M32, M32), (M32, M32, 0, 0), (1, 0, 0, 0), (0, 0, 0, 1),
              (0x80000000,) * 4]
    items += [tuple(int(w) for w in row)
              for row in rng.integers(0, 2**32, size=(count, 4), dtype=np.uint64)]
    layout, out_layout = threefry_input_layout(), threefry_output_layout()
    beats = [layout.const({"key": [k0, k1], "ctr": [c0, c1]}).as_bits()
             for k0, k1, c0, c1 in items]
    await _reset(dut)
    got = [out_layout.from_bits(w) for w in await _exchange(dut, beats, seed, stall)]
    got = [(int(p.x[0]), int(p.x[1])) for p in got]
    assert got[:len(KAT)] == [want for _, _, want in KAT], "known answers"
    x0, x1 = threefry2x32(*np.array(items, dtype=np.uint64).T)
    want = list(zip(map(int, x0), map(int, x1), strict=True))
    bad = [i for i, (g, w) in enumerate(zip(got, want, strict=True)) if g != w]
    assert not bad, [(items[i], got[i], want[i]) for i in bad[:4]]


def kat_lane_words(lanes):
    """``(seed, m, n0)`` beats of ``RandomLanes`` whose first four lanes are Threefry's known
    answers (``key = (seed & M32, seed >> 32)``, ``ctr = (m, n0 // 4)``), with those four
    16-bit words: ``x0`` low, ``x0`` high, ``x1`` low, ``x1`` high."""
    beats, words = [], []
    for (k0, k1), (c0, c1), (x0, x1) in KAT:
        beats.append((k0 | k1 << 32, c0, 4 * c1))
        words.append([x0 & 0xFFFF, x0 >> 16, x1 & 0xFFFF, x1 >> 16])
    return beats, words


@cocotb.test()
async def random_lanes_streams(dut):
    """``RandomLanes``: Threefry's known answers in the first four lanes, the corners of the
    counter (``n0`` wrapping at ``2**34``) and random ``(seed, m, n0)``, against
    :func:`sim.models.prng.random_bits`."""
    lanes, seed = _env("PRNG_LANES", 8), _env("PRNG_SEED", 1)
    count, stall = _env("PRNG_BEATS", 200), _env("PRNG_STALL", 0.3)
    rng = random.Random(seed)
    items, kat_words = kat_lane_words(lanes)
    items += [(0, 0, 0), (2**64 - 1, M32, 2**34 - lanes), (2**64 - 1, M32, 2**34 - 4),
              (1 << 63, 1 << 31, 1 << 33)]
    items += [(rng.getrandbits(64), rng.getrandbits(32), 4 * rng.getrandbits(32))
              for _ in range(count)]
    # runs of consecutive columns of one row, as the quantiser asks for them
    for _ in range(4):
        s, row, n0 = rng.getrandbits(64), rng.getrandbits(32), 4 * rng.getrandbits(20)
        items += [(s, row, n0 + lanes * j) for j in range(8)]
    layout, out_layout = random_input_layout(), random_output_layout(lanes)
    beats = [layout.const({"seed": s, "m": row, "n0": n0}).as_bits() for s, row, n0 in items]
    await _reset(dut)
    got = [[int(v) for v in out_layout.from_bits(w).r]
           for w in await _exchange(dut, beats, seed, stall)]
    assert [g[:4] for g in got[:len(kat_words)]] == kat_words, "known answers"
    for k, ((s, row, n0), words) in enumerate(zip(items, got, strict=True)):
        n = (n0 + np.arange(lanes, dtype=np.uint64)) % 2**34   # the column block wraps
        want = [int(v) for v in random_bits(s, row, n)]
        assert words == want, f"beat {k} (seed={s:#x}, m={row}, n0={n0}): {words} != {want}"
