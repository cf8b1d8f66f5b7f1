"""cocotb testbenches of the generated :class:`rtl.epilogue.TileQuantizer` and
:class:`rtl.epilogue.ReluMask` Verilog against :mod:`sim.models.bfp`.

Parameters come from the environment (set by ``tests/test_epilogue_cocotb.py``):
``EPI_COLS`` (lanes), ``EPI_BLOCK`` (the quantiser's T), ``EPI_SEED``, ``EPI_SHAPES`` (the
matrices, ``"MxN,MxN,..."``), ``EPI_BEATS`` (ReluMask's beats) and ``EPI_STALL`` (probability
of an idle cycle on every input stream and of ``ready`` low on the output; for the
combinational ReluMask, of ``valid`` and of ``ready`` low).
``COCOTB_TEST_FILTER`` picks the test that fits the top level.
"""

from __future__ import annotations

import os
import random

import cocotb
import numpy as np
from amaranth import unsigned
from amaranth.lib import data
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, Timer

from rtl.epilogue import (
    quantizer_input_layout,
    quantizer_job_layout,
    quantizer_output_layout,
    relu_input_layout,
    relu_output_layout,
)
from sim.models import bfp
from sim.models.prng import random_bits
from sim.testbenches.streams import receive, send

__all__ = ["units_of", "random_matrix", "quantizer_traffic", "quantizer_matrices",
           "relu_vectors"]


def _env(name, default):
    return type(default)(os.environ.get(name, default))


async def _reset(dut, inputs, outputs):
    cocotb.start_soon(Clock(dut.clk, 10, unit="ns").start())
    dut.rst.value = 1
    for port in inputs:
        getattr(dut, f"{port}__valid").value = 0
    for port in outputs:
        getattr(dut, f"{port}__ready").value = 0
    await ClockCycles(dut.clk, 3)
    dut.rst.value = 0
    await ClockCycles(dut.clk, 1)


# ---- TileQuantizer ---------------------------------------------------------------------------

def units_of(M, N, cols, block):
    """The units covering an M x N matrix, in the order they are sent:
    ``(m0, n0, rows_valid, cols_valid)``."""
    width = max(cols, block)
    return [(m0, n0, min(block, M - m0), min(width, N - n0))
            for m0 in range(0, M, block) for n0 in range(0, N, width)]


def random_matrix(rng, M, N, block):
    """A float32 matrix whose blocks each have a scale of their own: normal values over the
    whole exponent range, all-zero blocks, subnormal blocks, blocks of exact ties (``k + 1/2``
    mantissa LSBs), blocks whose largest element rounds to 128 (clamped to 127), signed
    zeros."""
    x = np.zeros((M, N), np.float32)
    for m0 in range(0, M, block):
        for n0 in range(0, N, block):
            sl = np.s_[m0:m0 + block, n0:n0 + block]
            shape = x[sl].shape
            kind = rng.choice(["normal", "normal", "wide", "zero", "subnormal", "ties", "clamp"])
            if kind == "normal":
                v = rng.standard_normal(shape) * 2.0 ** int(rng.integers(-120, 120))
            elif kind == "wide":     # magnitudes spread over 40 binades: many flush to 0
                v = rng.choice([-1, 1], shape) * 2.0 ** rng.uniform(-40, 0, shape)
            elif kind == "zero":
                v = np.where(rng.random(shape) < 0.5, -0.0, 0.0)
            elif kind == "subnormal":
                v = rng.integers(-2**23, 2**23, shape) * 2.0 ** -149
            elif kind == "ties":     # exp = 0: ties at k + 1/2, both signs
                v = (rng.integers(-127, 127, shape) + 0.5) * rng.choice([0.5, 1.0], shape)
                v.flat[0] = 127.0
            else:                    # 127.5 * 2**k rounds (half up) to 128, clamped
                v = rng.uniform(-127.5, 127.5, shape) * 2.0 ** -20
                v.flat[int(rng.integers(v.size))] = rng.choice([-127.5, 127.5]) * 2.0 ** -20
            x[sl] = v.astype(np.float32)
    return x


def quantizer_traffic(x, *, cols, block, stochastic, seed, rseed, tile_rows, rng):
    """The jobs, the input beats and the r beats (as dicts) that quantise ``x``, and the
    ``(unit, row, seg, last)`` of each output beat in the order it must leave.

    A unit's rows arrive in tiles of ``tile_rows`` rows x ``cols`` columns, the tiles in a
    shuffled order; rows beyond the matrix up to a whole tile, and columns beyond it up to a
    whole unit, carry garbage (inf and NaN among it). The r stream holds one beat per output
    beat, in output order: lane ``l`` of the beat of (``row``, ``seg``) of the unit at
    (``m0``, ``n0``) is ``random_bits(rseed, m0 + row, n0 + seg * cols + l)``.
    """
    segs = max(1, block // cols)
    width = cols * segs
    M, N = x.shape
    units = units_of(M, N, cols, block)
    MP = -(-M // block) * block
    NP = -(-N // width) * width
    nrng = np.random.default_rng(seed)
    bits = nrng.integers(0, 2**32, (MP, NP), dtype=np.uint32)
    bits[::7, ::5] = 0x7F800000
    bits[3::7, 1::5] = 0xFFC00001
    bits[:M, :N] = x.view(np.uint32)
    mm, nn = np.indices((MP, NP), dtype=np.uint64)
    rbits = random_bits(rseed, mm, nn)
    jobs, beats, rbeats, order = [], [], [], []
    for u, (m0, n0, rv, cv) in enumerate(units):
        rows = min(-(-rv // tile_rows) * tile_rows, block)
        jobs.append({"rows": rows, "rows_valid": rv, "cols_valid": cv,
                     "stochastic": int(stochastic)})
        tiles = [(t0, sg) for t0 in range(0, rows, tile_rows) for sg in range(segs)]
        rng.shuffle(tiles)
        for t0, sg in tiles:
            for row in range(t0, min(t0 + tile_rows, rows)):
                c0 = n0 + sg * cols
                beats.append({"data": [int(w) for w in bits[m0 + row, c0:c0 + cols]],
                              "row": row, "seg": sg})
        for row in range(rows):
            for sg in range(segs):
                c0 = n0 + sg * cols
                if stochastic:
                    rbeats.append([int(v) for v in rbits[m0 + row, c0:c0 + cols]])
                order.append((u, row, sg, int(row == rows - 1 and sg == segs - 1)))
    return units, jobs, beats, rbeats, order


def reassemble(out, units, order, shape, *, cols, block):
    """The output beats ``out`` (decoded payloads) back into ``(q, exp, flags)`` of the
    whole matrix, checking their order, the exponents' consistency and the zeros beyond the
    matrix. ``flags``: each beat's block-row, the block columns it covers inside the matrix
    and its ``nonfinite`` flag (one for all the beat's blocks)."""
    segs = max(1, block // cols)
    blocks = max(1, cols // block)
    M, N = shape
    width = cols * segs
    gm, gn = -(-M // block), -(-N // block)
    q = np.zeros((gm * block, -(-N // width) * width), np.int64)
    exp = np.full((gm, gn), 999, np.int64)
    flags = []
    assert len(out) == len(order), f"{len(out)} output beats, not {len(order)}"
    for k, (p, (u, row, sg, last)) in enumerate(zip(out, order, strict=True)):
        got_meta = (int(p.row), int(p.seg), int(p.last))
        assert got_meta == (row, sg, last), f"beat {k}: (row, seg, last) {got_meta}"
        m0, n0, rv, cv = units[u]
        c0 = n0 + sg * cols
        qs = [int(v) for v in p.q]
        q[m0 + row, c0:c0 + cols] = qs
        if row >= rv:
            assert not any(qs), f"beat {k}: row {row} beyond the matrix not zero"
        assert not any(qs[max(0, cv - sg * cols):]), f"beat {k}: columns beyond N not zero"
        bjs = [bj for bj in ((c0 + b * block) // block for b in range(blocks)) if bj < gn]
        flags.append((m0 // block, bjs, bool(int(p.nonfinite))))
        for b, bj in enumerate(bjs):          # the beat's blocks from the first, in order
            e = int(p.exp[b])
            if exp[m0 // block, bj] == 999:
                exp[m0 // block, bj] = e
            assert exp[m0 // block, bj] == e, f"beat {k}: block ({m0 // block}, {bj})'s " \
                                              "exponent changed"
    return q[:M, :N], exp, flags


async def _quantize(dut, x, *, cols, block, stochastic, seed, rseed, tile_rows, stall):
    rng = random.Random(seed)
    units, jobs, beats, rbeats, order = quantizer_traffic(
        x, cols=cols, block=block, stochastic=stochastic, seed=seed, rseed=rseed,
        tile_rows=tile_rows, rng=rng)
    width = cols * max(1, block // cols)
    job_layout = quantizer_job_layout(block, width)
    in_layout = quantizer_input_layout(cols, block)
    r_layout = data.ArrayLayout(unsigned(16), cols)
    out_layout = quantizer_output_layout(cols, block)
    cocotb.start_soon(send(dut, "jobs", [job_layout.const(j).as_bits() for j in jobs],
                           random.Random(seed + 1), stall))
    cocotb.start_soon(send(dut, "i_stream", [in_layout.const(b).as_bits() for b in beats],
                           random.Random(seed + 2), stall))
    if stochastic:
        cocotb.start_soon(send(dut, "r_stream", [r_layout.const(r).as_bits() for r in rbeats],
                               random.Random(seed + 3), stall))
    words = await receive(dut, "o_stream", len(order), random.Random(seed + 4), stall)
    await ClockCycles(dut.clk, 4)
    assert str(dut.idle.value) == "1", "not idle after the last beat"
    assert str(dut.o_stream__valid.value) == "0", "extra output beats"
    return reassemble([out_layout.from_bits(w) for w in words], units, order, x.shape,
                      cols=cols, block=block)


def _check_matrix(got, x, *, block, rounding, rseed, nonfinite_block=None):
    """``got`` against :func:`sim.models.bfp.quantize_tiles` of ``x``; a block holding inf or
    NaN (``nonfinite_block``) must leave as zeros with exponent 0 and flag the beats that
    cover it, the others as the model has them with that block zeroed."""
    q, exp, flags = got
    want_nonf = np.zeros(exp.shape, bool)
    if nonfinite_block is not None:
        bi, bj = nonfinite_block
        want_nonf[bi, bj] = True
        x = x.copy()
        x[bi * block:(bi + 1) * block, bj * block:(bj + 1) * block] = 0
    want_q, want_exp = bfp.quantize_tiles(x, block=block, rounding=rounding, seed=rseed)
    tag = f"{x.shape} {rounding}"
    for k, (bi, bjs, flag) in enumerate(flags):
        assert flag == bool(want_nonf[bi, bjs].any()), f"{tag}: beat {k}: nonfinite {flag}"
    np.testing.assert_array_equal(exp, want_exp.astype(np.int64), err_msg=f"{tag}: exponents")
    bad = np.argwhere(q != want_q)
    assert bad.size == 0, f"{tag}: {len(bad)} wrong mantissas, e.g. " + ", ".join(
        f"({m}, {n}): {q[m, n]} not {want_q[m, n]} (x={x[m, n]!r})" for m, n in bad[:4])


@cocotb.test(timeout_time=int(os.environ.get("EPI_TIMEOUT_US", "5000")), timeout_unit="us")
async def quantizer_matrices(dut):
    """Whole matrices with ragged edges through ``TileQuantizer``, fed in shuffled tiles,
    each with nearest and with stochastic rounding (r from
    :func:`sim.models.prng.random_bits`), back to back, with random stalls on every stream;
    the last matrix has a block holding inf and NaN."""
    cols, block = _env("EPI_COLS", 16), _env("EPI_BLOCK", 32)
    seed, stall = _env("EPI_SEED", 1), _env("EPI_STALL", 0.3)
    shapes = [tuple(int(d) for d in s.split("x"))
              for s in _env("EPI_SHAPES", "45x70,32x32,7x5").split(",")]
    rng = np.random.default_rng(seed)
    await _reset(dut, ["jobs", "i_stream", "r_stream"], ["o_stream"])
    for k, (M, N) in enumerate(shapes):
        x = random_matrix(rng, M, N, block)
        nonfinite_block = None
        if k == len(shapes) - 1:
            bi, bj = int(rng.integers(-(-M // block))), int(rng.integers(-(-N // block)))
            m, n = bi * block + int(rng.integers(min(block, M - bi * block))), \
                bj * block + int(rng.integers(min(block, N - bj * block)))
            x[m, n] = rng.choice([np.inf, -np.inf, np.nan])
            nonfinite_block = (bi, bj)
        for rounding in ("nearest", "stochastic"):
            rseed = int(rng.integers(0, 2**63)) * 2 + 1
            tile_rows = int(rng.choice([8, 16, 32]))
            got = await _quantize(dut, x, cols=cols, block=block,
                                  stochastic=rounding == "stochastic", seed=seed + 10 * k,
                                  rseed=rseed, tile_rows=tile_rows, stall=stall)
            _check_matrix(got, x, block=block, rounding=rounding, rseed=rseed,
                          nonfinite_block=nonfinite_block)


# ---- ReluMask --------------------------------------------------------------------------------

SPECIAL = [0x00000000, 0x80000000, 0x00000001, 0x80000001, 0x3F800000, 0xBF800000,
           0x7F7FFFFF, 0xFF7FFFFF, 0x7F800000, 0xFF800000, 0x7FC00000, 0xFFC00000,
           0x7F800001, 0xFFFFFFFF]


@cocotb.test()
async def relu_vectors(dut):
    """Random float32 vectors (special values among them) with random ``relu``,
    ``backward`` and ``mask_in`` through ``ReluMask`` (combinational: no clock), against
    :func:`sim.models.bfp.epilogue`; ``valid`` and ``ready`` toggled at random, each passing
    through unchanged."""
    cols, seed = _env("EPI_COLS", 16), _env("EPI_SEED", 1)
    count, stall = _env("EPI_BEATS", 300), _env("EPI_STALL", 0.3)
    rng = np.random.default_rng(seed)
    words = rng.integers(0, 2**32, (count, cols), dtype=np.uint64).astype(np.uint32)
    special = rng.random((count, cols)) < 0.3
    words[special] = rng.choice(np.array(SPECIAL, np.uint32), int(special.sum()))
    mask_in = rng.random((count, cols)) < 0.5
    flags = rng.integers(0, 2, (count, 3))    # relu, backward, last
    layout, out_layout = relu_input_layout(cols), relu_output_layout(cols)
    prng = random.Random(seed + 1)
    for i in range(count):
        c = words[i:i + 1].view(np.float32)
        gold = bfp.epilogue(c, relu=bool(flags[i, 0]),
                            mask_in=mask_in[i:i + 1] if flags[i, 1] else None)
        want_mask = bfp.epilogue(c, relu=True).mask[0]
        dut.i_stream__payload.value = layout.const({
            "data": [int(w) for w in words[i]],
            "mask_in": sum(int(b) << lane for lane, b in enumerate(mask_in[i])),
            "relu": int(flags[i, 0]), "backward": int(flags[i, 1]), "last": int(flags[i, 2]),
        }).as_bits()
        valid, ready = int(prng.random() >= stall), int(prng.random() >= stall)
        dut.i_stream__valid.value = valid
        dut.o_stream__ready.value = ready
        await Timer(1, unit="ns")
        assert int(dut.o_stream__valid.value) == valid, f"beat {i}: valid"
        assert int(dut.i_stream__ready.value) == ready, f"beat {i}: ready"
        p = out_layout.from_bits(int(dut.o_stream__payload.value))
        got_words = np.array([int(v) for v in p.data], np.uint32)
        got_mask = np.array([(int(p.mask) >> lane) & 1 for lane in range(cols)], bool)
        np.testing.assert_array_equal(got_words, gold.value[0].view(np.uint32),
                                      err_msg=f"beat {i} (flags {flags[i]}): words")
        np.testing.assert_array_equal(got_mask, want_mask, err_msg=f"beat {i}: mask")
        assert int(p.last) == flags[i, 2], f"beat {i}: last"
