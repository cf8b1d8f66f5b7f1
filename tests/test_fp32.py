"""IEEE binary32 addition and multiplication: the numpy models, their integer algorithms,
and the pipelined RTL."""

import os
import random
from pathlib import Path

import cocotb
import numpy as np
import pytest
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles

from rtl.export import to_verilog
from rtl.fp32 import Fp32Add, Fp32Mul
from sim.models.fp32 import CANONICAL_NAN, fp32_add, fp32_add_bits, fp32_mul, fp32_mul_bits
from sim.testbenches.harness import run, stream_recv, stream_send
from sim.testbenches.runner import available, run_cocotb
from sim.testbenches.streams import receive, send

ROOT = Path(__file__).resolve().parent.parent
COCOTB_LANES = 4

POS_EDGES = [
    0x00000000,              # +0
    0x00000001, 0x00000002, 0x00000003,   # smallest subnormals
    0x00400000, 0x007FFFFE, 0x007FFFFF,   # subnormals up to the largest
    0x00800000, 0x00800001, 0x00FFFFFF, 0x01000000,   # smallest normals
    0x33800000, 0x33800001, 0x34000000,   # 2**-24 (half an ulp of 1.0) and around it
    0x3F800000, 0x3F800001, 0x3F7FFFFF, 0x3FC00000, 0x3FFFFFFF,   # around 1.0
    0x4B7FFFFF, 0x4B800000, 0x4B800001,   # around 2**24
    0x7F000000, 0x7F7FFFFE, 0x7F7FFFFF,   # the largest normals
    0x7F800000,              # +inf
    0x7F800001, 0x7FBFFFFF, 0x7FC00000, 0x7FFFFFFF,   # signalling and quiet NaNs
]
EDGES = POS_EDGES + [w | 0x80000000 for w in POS_EDGES]


def edge_pairs():
    a, b = np.meshgrid(np.array(EDGES, np.uint32), np.array(EDGES, np.uint32))
    return a.ravel(), b.ravel()


def tie_pairs(rng, count):
    """``a`` normal, ``b`` exactly half an ulp of ``a`` (either sign), and ``b`` a quarter
    above or below that: ties (both ways to even) and their neighbours."""
    e = rng.integers(25, 255, count)
    a = (rng.integers(0, 2**23, count) | (e << 23) | (rng.integers(0, 2, count) << 31))
    half = (e - 24) << 23
    b = np.where(rng.random(count) < 0.5, half, half + rng.integers(-1, 2, count) * (1 << 21))
    b = b | (rng.integers(0, 2, count) << 31)
    return a.astype(np.uint32), b.astype(np.uint32)


def random_pairs(rng, count):
    """A third uniform bit patterns; a third with close exponents and opposite or equal signs
    (cancellation, carries); a third with small exponents (subnormals in and out)."""
    k = count // 3
    a = rng.integers(0, 2**32, count, dtype=np.uint64).astype(np.uint32)
    b = rng.integers(0, 2**32, count, dtype=np.uint64).astype(np.uint32)
    shift = rng.integers(-3, 4, k).astype(np.int64)
    ea = ((a[k:2 * k] >> 23) & 0xFF).astype(np.int64)
    eb = np.clip(ea + shift, 0, 254)
    b[k:2 * k] = ((b[k:2 * k] & 0x807FFFFF) | (eb << 23).astype(np.uint32))
    # some exact near-cancellations: b = -a with low bits changed
    b[k:k + k // 3] = (a[k:k + k // 3] ^ 0x80000000) ^ rng.integers(0, 16, k // 3).astype(
        np.uint32)
    small = np.uint32(0x83FFFFFF)   # exponent field below 8
    a[2 * k:] &= small
    b[2 * k:] &= small
    return a, b


def hexs(x):
    return f"0x{int(x):08x}"


# --- the model -------------------------------------------------------------------------------

def test_model_special_values():
    inf, ninf = 0x7F800000, 0xFF800000
    assert int(fp32_add(0, 0)) == 0
    assert int(fp32_add(0x80000000, 0x80000000)) == 0x80000000        # -0 + -0 = -0
    assert int(fp32_add(0x80000000, 0)) == 0                          # -0 + +0 = +0
    assert int(fp32_add(0x3F800000, 0xBF800000)) == 0                 # x + (-x) = +0
    assert int(fp32_add(0x00000001, 0x80000001)) == 0
    assert int(fp32_add(inf, ninf)) == CANONICAL_NAN
    assert int(fp32_add(inf, 0x7F7FFFFF)) == inf
    assert int(fp32_add(0x7F7FFFFF, 0x7F7FFFFF)) == inf               # overflow
    assert int(fp32_add(0xFF7FFFFF, 0xFF7FFFFF)) == ninf
    assert int(fp32_add(0x7F7FFFFF, 0x72FFFFFF)) == 0x7F7FFFFF        # below half an ulp
    assert int(fp32_add(0x7F7FFFFF, 0x73000000)) == inf               # the tie: odd, up
    assert int(fp32_add(0xFFFFFFFF, 0)) == CANONICAL_NAN              # NaN payloads dropped
    assert int(fp32_add(0x7F800001, inf)) == CANONICAL_NAN
    assert int(fp32_add(0x00400000, 0x00400000)) == 0x00800000        # subnormal to normal
    assert int(fp32_add(0x3F800000, 0x33800000)) == 0x3F800000        # tie to even (down)
    assert int(fp32_add(0x3F800001, 0x33800000)) == 0x3F800002        # tie to even (up)
    assert int(fp32_add(0x3F800000, 0xB3800000)) == 0x3F7FFFFF        # exact below 1.0


def test_model_bits_algorithm_matches_numpy():
    # the integer algorithm the RTL follows, against numpy float32 addition
    rng = np.random.default_rng(5)
    pairs = [edge_pairs(), tie_pairs(rng, 3000), random_pairs(rng, 12000)]
    for a, b in pairs:
        want = fp32_add(a, b)
        got = [fp32_add_bits(int(x), int(y)) for x, y in zip(a, b, strict=True)]
        bad = np.flatnonzero(np.array(got, np.uint32) != want)
        assert bad.size == 0, [(hexs(a[i]), hexs(b[i]), hexs(got[i]), hexs(want[i]))
                               for i in bad[:5]]


def test_model_commutes_and_broadcasts():
    a, b = edge_pairs()
    np.testing.assert_array_equal(fp32_add(a, b), fp32_add(b, a))
    out = fp32_add(np.array([0x3F800000], np.uint32), np.array([[0], [0x3F800000]]))
    assert out.shape == (2, 1) and out.dtype == np.uint32
    assert [int(v) for v in out.ravel()] == [0x3F800000, 0x40000000]


@pytest.mark.parametrize("args, exc, name", [
    ((1.0, 0), TypeError, "a_bits"),
    ((0, np.zeros(2, np.float32)), TypeError, "b_bits"),
    ((-1, 0), ValueError, "a_bits"),
    ((0, 2**32), ValueError, "b_bits"),
    ((np.zeros(2, int), np.zeros(3, int)), ValueError, "broadcast"),
])
def test_model_bad_input(args, exc, name):
    with pytest.raises(exc, match=name):
        fp32_add(*args)


# --- the RTL ---------------------------------------------------------------------------------

def simulate(lanes, a, b, *, seed=0, stall=0.3, unit=Fp32Add):
    """The results ``a[i] op b[i]`` from ``unit`` (:class:`Fp32Add` or :class:`Fp32Mul`,
    ``lanes`` pairs a beat)."""
    a = np.concatenate([a, np.zeros(-len(a) % lanes, np.uint32)])
    b = np.concatenate([b, np.zeros(-len(b) % lanes, np.uint32)])
    beats = len(a) // lanes
    dut = unit(lanes)
    field = "s" if unit is Fp32Add else "p"
    rng = random.Random(seed)
    payloads = [{"a": [int(v) for v in a[i * lanes:(i + 1) * lanes]],
                 "b": [int(v) for v in b[i * lanes:(i + 1) * lanes]]} for i in range(beats)]
    got = []

    async def producer(ctx):
        await stream_send(ctx, dut.i_stream, payloads, rng=rng, stall=stall)

    async def consumer(ctx):
        got.extend(await stream_recv(ctx, dut.o_stream, beats, rng=rng, stall=stall,
                                     convert=lambda p: [int(v) for v in getattr(p, field)]))

    run(dut, producer, consumer, deadline_cycles=(5 if stall else 1) * beats + 100)
    assert len(got) == beats, "the unit lost or withheld beats"
    return np.array(got, np.uint32).ravel()


def check(lanes, a, b, *, unit=Fp32Add, **kw):
    got = simulate(lanes, a, b, unit=unit, **kw)[:len(a)]
    want = (fp32_add if unit is Fp32Add else fp32_mul)(a, b)
    op = "+" if unit is Fp32Add else "*"
    bad = np.flatnonzero(got != want)
    assert bad.size == 0, (f"{bad.size} wrong results, e.g. " + ", ".join(
        f"{hexs(a[i])} {op} {hexs(b[i])} = {hexs(got[i])}, not {hexs(want[i])}"
        for i in bad[:4]))


def test_rtl_edge_classes_all_pairs():
    # every pair of zeros, subnormals, normals near 1, 2**24 and the top, infinities and NaNs
    a, b = edge_pairs()
    check(8, a, b, stall=0.2)


def test_rtl_ties_and_cancellations():
    rng = np.random.default_rng(11)
    a, b = tie_pairs(rng, 1600)
    check(8, a, b, stall=0.0)
    # x + (-x) for every class, and near-cancellations with every leading-zero count
    x = rng.integers(0, 2**31, 800, dtype=np.uint64).astype(np.uint32)
    lz_pairs = []
    for k in range(25):   # b = -(a - 2**k ulp): differences of every size
        lz_pairs.append((x[:32] | np.uint32(1 << 24),
                         (x[:32] | np.uint32(1 << 24)) - np.uint32(1 << k) ^ np.uint32(1 << 31)))
    a2 = np.concatenate([x] + [p for p, _ in lz_pairs])
    b2 = np.concatenate([x ^ np.uint32(1 << 31)] + [q for _, q in lz_pairs])
    check(8, a2, b2, stall=0.0)


def test_rtl_random_pairs():
    # ~20k pairs over the bit patterns, with random valid/ready stalls on a few lanes
    rng = np.random.default_rng(2026)
    a, b = random_pairs(rng, 19200)
    check(16, a[:18000], b[:18000], stall=0.0)
    check(3, a[18000:], b[18000:], stall=0.4, seed=1)


@pytest.mark.parametrize("unit, model, a0", [(Fp32Add, fp32_add, 0x3F800000),
                                               (Fp32Mul, fp32_mul, 0x3FC00000)])
def test_rtl_latency_full_rate(unit, model, a0):
    """A result a cycle, :attr:`LATENCY` cycles after its operands."""
    dut = unit(1)
    out = getattr(dut.o_stream.payload, unit.OUTPUT)
    seen = []

    async def bench(ctx):
        ctx.set(dut.o_stream.ready, 1)
        ctx.set(dut.i_stream.valid, 1)
        for cycle in range(dut.LATENCY + 10):
            ctx.set(dut.i_stream.payload, {"a": [a0], "b": [cycle << 23]})
            assert ctx.get(dut.i_stream.ready)
            _, _, valid, r = await ctx.tick().sample(dut.o_stream.valid, out)
            if valid:
                seen.append((cycle, int(r[0])))

    run(dut, bench, deadline_cycles=dut.LATENCY + 12)
    assert seen[0][0] == dut.LATENCY
    want = model(a0, np.arange(len(seen), dtype=np.uint32) << 23)
    assert [r for _, r in seen] == [int(w) for w in want]


@pytest.mark.slow
def test_rtl_random_pairs_sweep():
    rng = np.random.default_rng(7)
    a, b = random_pairs(rng, 240_000)
    check(32, a, b, stall=0.0)
    a, b = tie_pairs(rng, 40_000)
    check(32, a, b, stall=0.0)


@pytest.mark.parametrize("unit", [Fp32Add, Fp32Mul])
def test_rejects_lanes(unit):
    for bad in (0, -1, 2.0, True):
        with pytest.raises(ValueError, match="lanes"):
            unit(bad)


# --- the generated Verilog under cocotb on Icarus ----------------------------------------------

def cocotb_pairs(mul=False):
    """The pairs the cocotb run checks: every edge pair, ties, and random pairs."""
    rng = np.random.default_rng(99)
    parts = [edge_pairs(), mul_pairs(rng, 2000) if mul else tie_pairs(rng, 400),
             random_pairs(rng, 3000)]
    return (np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts]))


@cocotb.test()
async def cocotb_fp32(dut):
    """The generated ``fp32_add`` or ``fp32_mul`` Verilog (``FP32_OP``) against
    :func:`fp32_add` or :func:`fp32_mul`, with stalls."""
    lanes = COCOTB_LANES
    mul = os.environ.get("FP32_OP") == "mul"
    a, b = cocotb_pairs(mul)
    pad = -len(a) % lanes
    a = np.concatenate([a, np.zeros(pad, np.uint32)])
    b = np.concatenate([b, np.zeros(pad, np.uint32)])
    beats = [sum(int(a[i * lanes + j]) << (32 * j) for j in range(lanes))
             | sum(int(b[i * lanes + j]) << (32 * (lanes + j)) for j in range(lanes))
             for i in range(len(a) // lanes)]
    cocotb.start_soon(Clock(dut.clk, 10, unit="ns").start())
    dut.rst.value = 1
    dut.i_stream__valid.value = 0
    dut.o_stream__ready.value = 0
    await ClockCycles(dut.clk, 2)
    dut.rst.value = 0
    rng = random.Random(5)
    cocotb.start_soon(send(dut, "i_stream", beats, rng, 0.2))
    got = await receive(dut, "o_stream", len(beats), rng, 0.2)
    words = np.array([(w >> (32 * j)) & 0xFFFFFFFF for w in got for j in range(lanes)],
                     np.uint32)
    want = (fp32_mul if mul else fp32_add)(a, b)
    bad = np.flatnonzero(words != want)
    assert bad.size == 0, [(hexs(a[i]), hexs(b[i]), hexs(words[i]), hexs(want[i]))
                           for i in bad[:4]]


@pytest.mark.parametrize("op", ["add", "mul"])
def test_cocotb_icarus(tmp_path, op):
    if not available("icarus"):
        pytest.fail("icarus is not installed: run scripts/bootstrap.sh")
    top = f"fp32_{op}"
    verilog = tmp_path / f"{top}.v"
    verilog.write_text(to_verilog((Fp32Mul if op == "mul" else Fp32Add)(COCOTB_LANES), top))
    env = {"PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
           "FP32_OP": op}
    tests, failed = run_cocotb("icarus", verilog, top, "tests.test_fp32",
                               tmp_path / "icarus", env)
    assert tests == 1 and failed == 0, f"{failed} of {tests} cocotb tests failed"


# --- multiplication --------------------------------------------------------------------------

def mul_pairs(rng, count):
    """Products that land everywhere: a quarter near the subnormal range and zero (half of
    them of few significant bits, so that ties and the bits shifted out decide), a quarter
    near overflow, a quarter with ``b`` of three significant bits (exact ties to even both
    ways), a quarter of subnormal operands times large normals."""
    q = count // 4
    a = (rng.integers(0, 2**31, count, dtype=np.uint64)).astype(np.int64)
    sign = rng.integers(0, 2, count).astype(np.int64) << 31
    ea = rng.integers(1, 255, count)
    # e_a + e_b - 127 is the product's field (+1 on a carry): aim it at -26 .. 3, 250 .. 258
    eb = np.concatenate([np.clip(rng.integers(-26, 4, q) + 127 - ea[:q], 0, 254),
                         np.clip(rng.integers(250, 259, q) + 127 - ea[q:2 * q], 0, 254),
                         rng.integers(1, 255, count - 2 * q)])
    fb = rng.integers(0, 2**23, count)
    fb[2 * q:3 * q] &= 0x700000
    fb[:q // 2] &= 0x700000                              # short products shifted right:
    a[:q // 2] &= 0x7C0000                               # ties and the sticky bit alone
    eb[3 * q:] = 0                                       # subnormal b
    ea[3 * q:] = rng.integers(120, 255, count - 3 * q)
    a = (a & 0x7FFFFF) | (ea << 23)
    b = fb | (eb << 23) | sign
    return a.astype(np.uint32), b.astype(np.uint32)


def sticky_pairs():
    """Products ``(2**24 + 1) * 2**23`` (97 * 257 * 673 = 2**24 + 1) shifted right into the
    subnormal range by 1 to 30: at a shift of 24 the guard bit is set, the 23 bits below it
    clear and only a bit shifted out tells the tie from above it."""
    pairs = []
    for ma, mb in ((24929 << 9, 673 << 14), (673 << 14, 24929 << 9),
                   ((97 * 673) << 8, 257 << 15)):
        for e_sum in range(126 - 30, 127):           # k = e_a + e_b - 127
            ea = e_sum // 2
            eb = e_sum - ea
            for sign in (0, 1 << 31):
                pairs.append(((ea << 23) | (ma & 0x7FFFFF),
                              sign | (eb << 23) | (mb & 0x7FFFFF)))
    a, b = zip(*pairs, strict=True)
    return np.array(a, np.uint32), np.array(b, np.uint32)


def test_mul_model_special_values():
    inf, ninf, one = 0x7F800000, 0xFF800000, 0x3F800000
    assert int(fp32_mul(one, one)) == one
    assert int(fp32_mul(0x80000000, one)) == 0x80000000                # -0 * 1 = -0
    assert int(fp32_mul(0x80000000, 0x80000000)) == 0                  # -0 * -0 = +0
    assert int(fp32_mul(0, inf)) == CANONICAL_NAN
    assert int(fp32_mul(ninf, 0x00000001)) == ninf                      # -inf * subnormal
    assert int(fp32_mul(0x7F7FFFFF, 0x40000000)) == inf                 # overflow
    assert int(fp32_mul(0x00000001, 0x3F000000)) == 0                   # 2**-150: tie, even
    assert int(fp32_mul(0x00000003, 0x3F000000)) == 0x00000002          # 1.5 ulp: to even
    assert int(fp32_mul(0x00800000, 0x3F000000)) == 0x00400000          # normal to subnormal
    assert int(fp32_mul(0x00400000, 0x40000000)) == 0x00800000          # subnormal to normal
    assert int(fp32_mul(0x7FC00001, one)) == CANONICAL_NAN              # payloads dropped


def test_mul_model_bits_algorithm_matches_numpy():
    rng = np.random.default_rng(7)
    for a, b in [edge_pairs(), sticky_pairs(), mul_pairs(rng, 16000),
                 random_pairs(rng, 6000)]:
        want = fp32_mul(a, b)
        got = np.array([fp32_mul_bits(int(x), int(y)) for x, y in zip(a, b, strict=True)],
                       np.uint32)
        bad = np.flatnonzero(got != want)
        assert bad.size == 0, [(hexs(a[i]), hexs(b[i]), hexs(got[i]), hexs(want[i]))
                               for i in bad[:5]]


@pytest.mark.parametrize("args, exc, name", [
    ((1.5, 0), TypeError, "a_bits"),
    ((0, -2), ValueError, "b_bits"),
    ((np.zeros(2, int), np.zeros(3, int)), ValueError, "broadcast"),
])
def test_mul_model_bad_input(args, exc, name):
    with pytest.raises(exc, match=name):
        fp32_mul(*args)


def check_mul(lanes, a, b, **kw):
    check(lanes, a, b, unit=Fp32Mul, **kw)


def test_mul_rtl_edge_classes_all_pairs():
    a, b = edge_pairs()
    check_mul(8, a, b, stall=0.2)
    a, b = sticky_pairs()
    check_mul(4, a, b, stall=0.0)


def test_mul_rtl_random_pairs():
    rng = np.random.default_rng(2027)
    a, b = mul_pairs(rng, 8000)
    check_mul(16, a, b, stall=0.0)
    a, b = random_pairs(rng, 3000)
    check_mul(3, a, b, stall=0.4, seed=1)
