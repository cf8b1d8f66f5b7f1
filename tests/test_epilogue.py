"""rtl.epilogue against sim.models.bfp: TileQuantizer quantises whole matrices fed as units
(block-rows of column strips) in tiles of any order, with ragged edges, garbage beyond them,
zero and subnormal blocks, ties, rounding carries to 128, inf/NaN, random stalls on every
stream; ReluMask on special values."""

import random
import threading

import numpy as np
import pytest
from amaranth import ClockDomain, Module

from rtl.epilogue import ReluMask, TileQuantizer
from sim.models import bfp
from sim.models.prng import random_bits
from sim.testbenches.harness import run, stream_recv, stream_send

T = 32


def in_thread(fn, *args, **kwargs):
    """``fn(*args, **kwargs)`` in a thread of its own. The simulator's generated step
    functions have frames of many kilobytes; at the depth pytest calls from, CPython 3.11
    can push and free a frame-stack chunk (an mmap and a munmap) on every call, several times
    slower. A fresh thread starts with an empty frame stack."""
    out = {}

    def body():
        try:
            out["value"] = fn(*args, **kwargs)
        except BaseException as exc:   # re-raised in the caller
            out["error"] = exc
    thread = threading.Thread(target=body)
    thread.start()
    thread.join()
    if "error" in out:
        raise out["error"]
    return out["value"]


# ---- a second reference: the integer form, written down directly in float64, for any r ------

def ref_quantize(x, r, block=T):
    """``(q, exp, nonfinite)`` of float32 ``x`` with the 16-bit ``r`` of each element (same
    shape): exp = max(floor(log2(maxabs)) - 6, -128) per block (0 if all zero),
    q = clamp((floor(v * 2**(16 - exp)) + r) >> 16, -127, 127); a block with inf/NaN: zeros,
    exp 0, flagged."""
    M, N = x.shape
    gm, gn = -(-M // block), -(-N // block)
    q = np.zeros((M, N), np.int64)
    exp = np.zeros((gm, gn), np.int64)
    nonf = np.zeros((gm, gn), bool)
    for bi in range(gm):
        for bj in range(gn):
            sl = np.s_[bi * block:(bi + 1) * block, bj * block:(bj + 1) * block]
            v = x[sl].astype(np.float64)
            if not np.all(np.isfinite(v)):
                nonf[bi, bj] = True
                continue
            maxabs = np.abs(v).max()
            if maxabs == 0:
                continue
            e = int(np.frexp(maxabs)[1]) - 1
            ex = max(e - 6, -128)
            y = np.floor(v * 2.0 ** (16 - ex)).astype(np.int64)   # exact: 24-bit significands
            assert -2**23 <= y.min() and y.max() < 2**23    # floor: -2**23 is reached
            q[sl] = np.clip((y + r[sl].astype(np.int64)) >> 16, -127, 127)
            exp[bi, bj] = ex
    return q, exp, nonf


# ---- driving whole matrices through the quantiser --------------------------------------------

def units_of(M, N, cols, block=T):
    """The units covering an M x N matrix: (m0, n0, rows_valid, cols_valid)."""
    width = max(cols, block)
    return [(m0, n0, min(block, M - m0), min(width, N - n0))
            for m0 in range(0, M, block) for n0 in range(0, N, width)]


def quantize_rtl(x, *, cols, r=None, tile_rows=8, seed=0, stall=0.3, garbage=True,
                 slots=4, deadline=None, timing=None):
    """Quantise float32 ``x`` (M x N) with TileQuantizer: each unit's rows arrive in tiles
    of ``tile_rows`` rows x ``cols`` columns in a shuffled order, the matrix's ragged edge
    padded with garbage words (NaN and inf among them). ``r``: the 16-bit r of each element
    (stochastic jobs), else round half up. Returns (q, exp grid, nonfinite grid, beats)."""
    rng = random.Random(seed)
    nrng = np.random.default_rng(seed)
    dut = TileQuantizer(cols, T, slots=slots)
    S, B, W = dut.segs, dut.blocks, dut.width
    M, N = x.shape
    units = units_of(M, N, cols)
    MP = -(-M // T) * T + T
    NP = -(-N // W) * W
    bits = nrng.integers(0, 2**32, (MP, NP), dtype=np.uint32)
    if garbage:
        bits[::7, ::5] = 0x7F800000          # inf and NaN beyond the edge must not count
        bits[3::7, 1::5] = 0xFFC00001
    else:
        bits[:] = 0
    bits[:M, :N] = x.view(np.uint32)
    rbits = nrng.integers(0, 2**16, (MP, NP), dtype=np.uint16)
    if r is not None:
        rbits[:M, :N] = r
    jobs, beats, rbeats, want_meta = [], [], [], []
    for (m0, n0, rv, cv) in units:
        rows = -(-rv // tile_rows) * tile_rows
        rows = min(rows, T)
        jobs.append({"rows": rows, "rows_valid": rv, "cols_valid": cv,
                     "stochastic": int(r is not None)})
        groups = [(t0, sg) for t0 in range(0, rows, tile_rows) for sg in range(S)]
        rng.shuffle(groups)
        for t0, sg in groups:
            for row in range(t0, min(t0 + tile_rows, rows)):
                c0 = n0 + sg * cols
                beats.append({"data": [int(w) for w in bits[m0 + row, c0:c0 + cols]],
                              "row": row, "seg": sg})
        for row in range(rows):
            for sg in range(S):
                c0 = n0 + sg * cols
                if r is not None:
                    rbeats.append([int(v) for v in rbits[m0 + row, c0:c0 + cols]])
                want_meta.append((row, sg, int(row == rows - 1 and sg == S - 1)))
    got = {}

    async def send_jobs(ctx):
        await stream_send(ctx, dut.jobs, jobs, rng=random.Random(seed + 1), stall=stall)

    async def send_rows(ctx):
        await stream_send(ctx, dut.i_stream, beats, rng=random.Random(seed + 2), stall=stall)

    async def send_r(ctx):
        await stream_send(ctx, dut.r_stream, rbeats, rng=random.Random(seed + 3), stall=stall)

    async def take(ctx):
        got["out"] = await stream_recv(
            ctx, dut.o_stream, len(want_meta), rng=random.Random(seed + 4), stall=stall,
            convert=lambda p: ([int(v) for v in p.q], [int(v) for v in p.exp], int(p.row),
                               int(p.seg), int(p.nonfinite), int(p.last)))
        for _ in range(4):
            await ctx.tick()
        got["idle"] = ctx.get(dut.idle)

    async def watch(ctx):
        if timing is None:
            return
        cycle = 0
        while "out" not in got:
            i_take = ctx.get(dut.i_stream.valid) and ctx.get(dut.i_stream.ready)
            o_take = ctx.get(dut.o_stream.valid) and ctx.get(dut.o_stream.ready)
            if i_take:
                timing.setdefault("in", []).append(cycle)
            if o_take:
                timing.setdefault("out", []).append(cycle)
            await ctx.tick()
            cycle += 1

    benches = [send_jobs, send_rows, take, watch] + ([send_r] if r is not None else [])
    in_thread(run, dut, *benches, deadline_cycles=deadline or 8 * len(beats) + 300)
    out = got.get("out")
    assert out is not None and len(out) == len(want_meta), "the quantiser lost beats"
    assert got["idle"], "not idle after the last beat"
    q = np.zeros((MP, NP), np.int64)
    gm, gn = -(-M // T), -(-N // T)
    exp = np.full((gm, gn), 999, np.int64)
    nonf = np.zeros((gm, gn), bool)
    k = 0
    for (m0, n0, rv, cv) in units:
        rows = min(-(-rv // tile_rows) * tile_rows, T)
        for _ in range(rows * S):
            qs, exps, row, sg, nf, last = out[k]
            assert (row, sg, last) == want_meta[k], f"beat {k}: order {(row, sg, last)}"
            c0 = n0 + sg * cols
            q[m0 + row, c0:c0 + cols] = qs
            for b in range(B):
                bj = (c0 + b * T) // T
                if bj < gn:
                    if exp[m0 // T, bj] == 999:
                        exp[m0 // T, bj] = exps[b]
                    assert exp[m0 // T, bj] == exps[b], "a block's exponent changed"
                    nonf[m0 // T, bj] |= bool(nf)
            k += 1
        # beyond the matrix: zero mantissas
        assert not q[m0 + rv:m0 + rows, n0:n0 + W].any(), "rows beyond M not zero"
        assert not q[m0:m0 + rows, n0 + cv:n0 + W].any(), "columns beyond N not zero"
    return q[:M, :N], exp, nonf


def check(x, *, cols, rounding="nearest", rseed=0, r=None, **kw):
    """The quantiser on ``x`` against the golden model, :func:`sim.models.bfp.quantize_tiles`
    (``rounding``, its ``seed`` ``rseed``: the r stream carries ``random_bits(rseed, m, n)``);
    with an explicit ``r`` matrix, against :func:`ref_quantize`."""
    if r is None:
        want_q, want_exp = bfp.quantize_tiles(x, rounding=rounding, seed=rseed)
        want_nonf = np.zeros(want_exp.shape, bool)
        if rounding == "stochastic":
            mm, nn = np.indices(x.shape, dtype=np.uint64)
            r = random_bits(rseed, mm, nn)
    else:
        want_q, want_exp, want_nonf = ref_quantize(x, r)
    q, exp, nonf = quantize_rtl(x, cols=cols, r=r, **kw)
    bad = np.argwhere(q != want_q)
    assert not len(bad), (f"{len(bad)} mantissas differ, first at {tuple(bad[0])}: "
                          f"x={x[tuple(bad[0])]!r} got {q[tuple(bad[0])]} "
                          f"want {want_q[tuple(bad[0])]}")
    np.testing.assert_array_equal(exp, want_exp)
    if not want_nonf.any():
        assert not nonf.any()
    else:
        # the flag rides on each beat of the unit; blocks beside a flagged one share a beat
        assert nonf[want_nonf].all()
    return q, exp


# ---- matrices -------------------------------------------------------------------------------

def wide_range(M, N, seed):
    """Each block at its own scale, 2**-150 .. 2**125 (subnormals, the exponent floor, near
    the float32 maximum), with zero blocks and zero rows inside blocks."""
    rng = np.random.default_rng(seed)
    x = np.zeros((M, N), np.float32)
    for bi in range(0, M, T):
        for bj in range(0, N, T):
            kind = rng.integers(0, 6)
            shape = x[bi:bi + T, bj:bj + T].shape
            if kind == 0:
                continue                                   # an all-zero block
            scale = {1: rng.uniform(-150, -120), 2: rng.uniform(-128, -100)}.get(
                int(kind), rng.uniform(-60, 125))
            v = rng.standard_normal(shape) * 2.0 ** scale
            v *= rng.random(shape) < 0.9                   # some zeros
            with np.errstate(over="ignore"):
                x[bi:bi + T, bj:bj + T] = v.astype(np.float32)
    return np.nan_to_num(x, posinf=3e38, neginf=-3e38)


def special_blocks():
    """A 64 x 96 matrix of hand-made blocks: ties both signs, carries to 128, powers of two,
    subnormal maxima, tiny normal maxima (exp clamped at -128), the float32 maximum."""
    x = np.zeros((64, 96), np.float32)
    k = np.arange(-64, 64, dtype=np.float64)
    # ties: (k + 0.5) * 2**-3 with max 127.5 * 2**-3 -> e = 3, exp = -3: q = floor(k + 1);
    # 127.5 -> 128 -> clamped 127; -127.5 -> -127
    t = np.concatenate([k + 0.5, [127.5, -127.5, 126.5, -0.5, -1.5]])
    x[0:32, 0:32] = np.resize(t * 2.0**-3, (32, 32))
    # just beyond a negative tie, by less than 2**-16: floor(v * 2**16) is one below the
    # tie's, so q = -k - 1 (the bits shifted out count for negatives)
    x[20, 0:8] = -(np.arange(8) + 0.5 + 2.0**-20) * 2.0**-3
    # powers of two and their neighbours
    p = np.array([2.0**j for j in range(-20, 1)] + [-(2.0**j) for j in range(-20, 1)])
    x[0:32, 32:64] = np.resize(np.concatenate([p, np.nextafter(p.astype(np.float32), 0)]),
                               (32, 32))
    # subnormal maximum: exp = -128, q = floor(v * 2**128 + 0.5)
    sub = np.arange(1, 1025, dtype=np.uint32).reshape(32, 32) * 4099 % (1 << 23)
    x[0:32, 64:96] = sub.view(np.float32) * np.where(np.arange(32) % 3 == 0, -1, 1)
    # a tiny normal maximum (E < 5: exp clamped at -128) with subnormal neighbours
    tiny = np.frombuffer(np.array([(e << 23) | f for e in range(0, 5) for f in (0, 1, 0x7FFFFF)],
                                  np.uint32).tobytes(), np.float32)
    x[32:64, 0:32] = np.resize(np.concatenate([tiny, -tiny]), (32, 32))
    # the largest floats
    big = np.float32(3.4028235e38)
    x[32:64, 32:64] = np.resize(np.array([big, -big, big / 3, -1.0, 2.0**100], np.float32),
                                (32, 32))
    # one element alone, negative, the rest zero: -128 < q <= -64
    x[40, 70] = -np.float32(1.0e-30)
    return x


# ---- TileQuantizer ---------------------------------------------------------------------------

@pytest.mark.parametrize("cols", [16, 32, 64])
def test_special_blocks_nearest(cols):
    q, exp = check(special_blocks(), cols=cols, stall=0.2)
    assert q[0, 0] == -63 and exp[0, 0] == -3     # -63.5 + 0.5 -> -63
    assert list(q[20, :8]) == [-1, -2, -3, -4, -5, -6, -7, -8]
    assert q[4, 0] == 127 and q[4, 1] == -127    # 127.5 + 0.5 -> 128 -> 127; -127.5 -> -127
    assert exp[1, 2] == np.frexp(np.float32(1.0e-30))[1] - 7 and -128 < q[40, 70] <= -64


@pytest.mark.parametrize("cols,tile_rows,M,N,seed", [
    (16, 8, 70, 50, 0), (32, 16, 45, 70, 1), (64, 32, 40, 100, 2), (64, 8, 33, 64, 3),
    (32, 32, 64, 33, 4)])
def test_wide_range_with_ragged_edges(cols, tile_rows, M, N, seed):
    check(wide_range(M, N, seed), cols=cols, tile_rows=tile_rows, seed=seed)


@pytest.mark.parametrize("cols", [16, 64])
def test_stochastic_r_from_the_stream(cols):
    # r of element (m, n): random_bits(seed, m, n), streamed in the output's order
    check(wide_range(48, 80, 7), cols=cols, rounding="stochastic", rseed=0x1234_5678_9ABC,
          seed=9)
    check(special_blocks(), cols=cols, rounding="stochastic", rseed=cols, seed=10, stall=0.1)


def test_r_extremes_on_ties_and_carries():
    # r = 0 floors, r = 0xFFFF rounds every inexact value up (a carry to 128 -> 127); against
    # ref_quantize, as the golden model draws r from the seed
    x = special_blocks()
    for fill in (0, 0xFFFF):
        check(x, cols=32, r=np.full(x.shape, fill, np.uint16), stall=0.0, seed=fill)


def test_nonfinite_blocks_are_zeros_with_exponent_zero():
    """Where the golden model refuses (ValueError), the hardware flags the blocks and writes
    them as the golden model writes all-zero blocks."""
    x = wide_range(64, 64, 11)
    x[3, 40] = np.inf
    x[35, 5] = np.nan
    x[40, 33] = -np.inf
    with pytest.raises(ValueError, match="finite"):
        bfp.quantize_tiles(x)
    want_nonf = np.zeros((2, 2), bool)
    want_nonf[0, 1] = want_nonf[1, 0] = want_nonf[1, 1] = True
    zeroed = x.copy()
    for bi, bj in np.argwhere(want_nonf):
        zeroed[bi * T:(bi + 1) * T, bj * T:(bj + 1) * T] = 0
    want_q, want_exp = bfp.quantize_tiles(zeroed)
    q, exp, nonf = quantize_rtl(x, cols=32, seed=12)
    np.testing.assert_array_equal(q, want_q)
    np.testing.assert_array_equal(exp, want_exp)
    np.testing.assert_array_equal(nonf, want_nonf)


@pytest.mark.parametrize("rounding", ["nearest", "stochastic"])
def test_reference_agrees_with_the_golden_model(rounding):
    """ref_quantize (the format written down directly, any r) is the golden model where both
    apply: the r = 0 / 0xFFFF tests rest on it."""
    for x in (special_blocks(), wide_range(70, 50, 3)):
        mm, nn = np.indices(x.shape, dtype=np.uint64)
        r = (random_bits(77, mm, nn) if rounding == "stochastic"
             else np.full(x.shape, 1 << 15, np.uint16))
        q, exp, _ = ref_quantize(x, r)
        want_q, want_exp = bfp.quantize_tiles(x, rounding=rounding, seed=77)
        np.testing.assert_array_equal(q, want_q)
        np.testing.assert_array_equal(exp, want_exp)


def test_full_rate_and_latency():
    """Units back to back with every stream always ready: one beat a cycle in and out after
    the first unit's latency (fill_latency + DRAIN_LATENCY)."""
    x = wide_range(128, 64, 13)
    timing = {}
    check(x, cols=64, tile_rows=32, stall=0.0, garbage=False, timing=timing)
    ins, outs = timing["in"], timing["out"]
    assert ins == list(range(ins[0], ins[0] + len(ins))), "input not at full rate"
    assert outs == list(range(outs[0], outs[0] + len(outs))), "output not at full rate"
    dut = TileQuantizer(64)
    assert outs[0] - ins[T - 1] == dut.fill_latency + dut.DRAIN_LATENCY


def test_bad_parameters():
    with pytest.raises(ValueError, match="cols"):
        TileQuantizer(0)
    with pytest.raises(ValueError, match="cols"):
        TileQuantizer(24)
    with pytest.raises(ValueError, match="block"):
        TileQuantizer(32, 48)
    with pytest.raises(ValueError, match="slots"):
        TileQuantizer(32, slots=3)
    with pytest.raises(ValueError, match="out_depth"):
        TileQuantizer(32, out_depth=4)


# ---- ReluMask --------------------------------------------------------------------------------

def test_relu_mask_forward_and_backward():
    """Against :func:`sim.models.bfp.epilogue` (``out="fp32"``): ReLU, its mask, and the
    stored mask, on zeros of both signs, infinities, NaNs, subnormals and random words."""
    cols = 8
    dut = ReluMask(cols)
    specials = np.array([0x00000000, 0x80000000, 0x3F800000, 0xBF800000, 0x7F800000,
                         0xFF800000, 0x7FC00000, 0xFFC00001, 0x00000001, 0x80000001,
                         0x7F7FFFFF, 0xFF7FFFFF], np.uint32)
    rng = np.random.default_rng(0)
    words = np.concatenate([specials, rng.integers(0, 2**32, 36, dtype=np.uint32)])
    words = words.reshape(-1, cols)
    c = words.view(np.float32)
    mask_in = rng.random(words.shape) < 0.5
    beats, want = [], []
    for relu, backward in ((0, 0), (1, 0), (0, 1), (1, 1)):
        gold = bfp.epilogue(c, relu=bool(relu), mask_in=mask_in if backward else None)
        with np.errstate(invalid="ignore"):
            positive = c > 0
        if relu:
            np.testing.assert_array_equal(gold.mask, positive)
        for i, row in enumerate(words):
            beats.append({"data": [int(w) for w in row],
                          "mask_in": int(np.packbits(mask_in[i], bitorder="little")[0]),
                          "relu": relu, "backward": backward, "last": i % 2})
            want.append(([int(w) for w in gold.value[i].view(np.uint32)],
                         int(np.packbits(positive[i], bitorder="little")[0]), i % 2))
    got = {}

    async def send(ctx):
        await stream_send(ctx, dut.i_stream, beats, rng=random.Random(1), stall=0.3)

    async def take(ctx):
        got["out"] = await stream_recv(
            ctx, dut.o_stream, len(beats), rng=random.Random(2), stall=0.3,
            convert=lambda p: ([int(w) for w in p.data], int(p.mask), int(p.last)))

    top = Module()                        # combinational: a clock for the testbenches only
    top.domains.sync = ClockDomain()
    top.submodules.dut = dut
    run(top, send, take, deadline_cycles=20 * len(beats))
    assert got["out"] == want
    # under ReLU, -0.0 and NaN become +0.0 (never a negative zero)
    relu_rows = want[len(words):2 * len(words)]
    assert relu_rows[0][0][1] == 0 and relu_rows[0][0][6] == 0


def test_relu_bad_cols():
    with pytest.raises(ValueError, match="cols"):
        ReluMask(0)
