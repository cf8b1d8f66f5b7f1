"""cocotb testbench of the generated ``gemm_datapath`` Verilog against :mod:`sim.models.datapath`.

Parameters come from the environment (set by ``tests/test_cocotb.py``): ``DP_ROWS``,
``DP_COLS``, ``DP_DEPTH``, ``DP_SEED``, ``DP_TILES``, ``DP_STALL`` (probability of an idle
cycle on every stream, both valid and ready).
"""

from __future__ import annotations

import os
import random

import cocotb
import numpy as np
from amaranth import signed
from amaranth.lib import data
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles

from rtl.datapath import command_layout
from rtl.rescale import rescale_output_layout
from sim.models import datapath as models
from sim.testbenches.streams import receive, send


def _env(name, default):
    return type(default)(os.environ.get(name, default))


def random_commands(rng, rows, cols, depth, n):
    cmds = []
    for t in range(n):
        k = int(rng.integers(1, depth + 1))
        ta, tb = bool(rng.integers(2)), bool(rng.integers(2))
        extreme = rng.random() < 0.15

        def op(shape, extreme=extreme):
            if extreme:
                return np.full(shape, -128, np.int8)
            return rng.integers(-128, 128, shape).astype(np.int8)
        exp_span = 127 if rng.random() < 0.3 else 6
        cmds.append(models.TileCommand(
            a=op((k, rows) if ta else (rows, k)), b=op((cols, k) if tb else (k, cols)),
            transpose_a=ta, transpose_b=tb,
            clear=t == 0 or bool(rng.random() < 0.7),
            emit=t == n - 1 or bool(rng.random() < 0.7),
            raw=bool(rng.random() < 0.3),
            row_exp=rng.integers(-exp_span - 1, exp_span + 1, rows).astype(np.int8),
            col_exp=rng.integers(-exp_span - 1, exp_span + 1, cols).astype(np.int8)))
    return cmds


@cocotb.test(timeout_time=int(os.environ.get("DP_TIMEOUT_US", "2000")), timeout_unit="us")
async def random_tile_gemms(dut):
    rows, cols = _env("DP_ROWS", 4), _env("DP_COLS", 4)
    depth, seed = _env("DP_DEPTH", 16), _env("DP_SEED", 1)
    n, stall = _env("DP_TILES", 6), _env("DP_STALL", 0.3)
    rng = np.random.default_rng(seed)
    prng = random.Random(seed)
    cmds = random_commands(rng, rows, cols, depth, n)

    cocotb.start_soon(Clock(dut.clk, 10, unit="ns").start())
    for sig in (dut.cmd__valid, dut.a_stream__valid, dut.b_stream__valid, dut.o_stream__ready):
        sig.value = 0
    dut.rst.value = 1
    await ClockCycles(dut.clk, 3)
    dut.rst.value = 0
    await ClockCycles(dut.clk, 2)

    cmd_layout = command_layout(rows, cols)
    a_layout = data.ArrayLayout(signed(8), rows)
    b_layout = data.ArrayLayout(signed(8), cols)
    cmd_beats = [cmd_layout.const(c.fields(t, rows, cols)).as_bits()
                 for t, c in enumerate(cmds)]
    a_beats = [a_layout.const([int(x) for x in v]).as_bits() for c in cmds
               for v in models.operand_beats(c.a, rows, k_major=c.transpose_a)]
    b_beats = [b_layout.const([int(x) for x in v]).as_bits() for c in cmds
               for v in models.operand_beats(c.b, cols, k_major=not c.transpose_b)]

    cocotb.start_soon(send(dut, "cmd", cmd_beats, random.Random(seed + 1), stall))
    cocotb.start_soon(send(dut, "a_stream", a_beats, random.Random(seed + 2), stall))
    cocotb.start_soon(send(dut, "b_stream", b_beats, random.Random(seed + 3), stall))
    want = models.datapath(cmds, rows, cols)
    out_layout = rescale_output_layout(cols)
    got = [out_layout.from_bits(word) for word in await cocotb.start_soon(
        receive(dut, "o_stream", rows * len(want), prng, stall))]
    got = [([int(w) for w in beat.data], int(beat.last)) for beat in got]

    for t, tile in enumerate(want):
        chunk = got[t * rows:(t + 1) * rows]
        assert [last for _, last in chunk] == [0] * (rows - 1) + [1], f"tile {t}: last flags"
        np.testing.assert_array_equal(
            np.array([w for w, _ in chunk], dtype=np.uint32), tile, err_msg=f"tile {t}")
    await ClockCycles(dut.clk, 40)
    assert int(dut.busy.value) == 0, "datapath still busy after its last result"
    assert int(dut.error.value) == 0
    assert int(dut.o_stream__valid.value) == 0, "extra output beats"
