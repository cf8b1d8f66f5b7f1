"""rtl.checker.DescriptorChecker against sim.models.engine.check: every error code, random
descriptors, back-to-back descriptors with random stalls."""

import random

import pytest

from firmware.spec.regmap import ErrorCode
from rtl.checker import DescriptorChecker
from sim.models import engine as em
from sim.testbenches.harness import run, stream_recv, stream_send

WINDOW = (0x1000, 0x4000_0000)


def good(rng, bpw):
    """A descriptor that passes: regions laid out one after another inside the window."""
    m, n, k = (rng.choice([1, 2, rng.randint(1, 300)]) for _ in range(3))
    ta, tb = rng.randint(0, 1), rng.randint(0, 1)
    d = dict(m=m, n=n, k=k, transpose_a=ta, transpose_b=tb, raw=rng.randint(0, 1),
             row_vec=rng.randint(0, 1), col_vec=rng.randint(0, 1),
             row_exp=rng.randint(-128, 127), col_exp=rng.randint(-128, 127))
    addr = WINDOW[0] + bpw * rng.randint(0, 8)
    for name, rows, nbytes in (("a", k if ta else m, m if ta else k),
                               ("b", n if tb else k, k if tb else n), ("c", m, 4 * n)):
        stride = -(-nbytes // bpw) * bpw + bpw * rng.choice([0, 0, 1, 3])
        d[f"{name}_addr"], d[f"{name}_stride"] = addr, stride
        addr += rows * stride + bpw * rng.randint(0, 2)
    for name, nbytes in (("row_exp_addr", m), ("col_exp_addr", n)):
        d[name] = addr
        addr += -(-nbytes // bpw) * bpw
    return d


def faulty(rng, bpw):
    d = good(rng, bpw)
    fault = rng.choice(["zero", "big", "bigk", "align", "stride", "window", "low", "random",
                        "exp_off", "top"])
    region = rng.choice(["a", "b", "c"])
    if fault == "zero":
        d[rng.choice("mnk")] = 0
    elif fault == "big":
        d[rng.choice("mn")] = rng.choice([65536, 2**32 - 1])
    elif fault == "bigk":
        d["k"] = rng.choice([65536, 2**32 - 1])
    elif fault == "align":
        key = rng.choice([f"{region}_addr", f"{region}_stride"])
        d[key] += rng.randint(1, bpw - 1)
    elif fault == "stride":
        d[f"{region}_stride"] = max(0, d[f"{region}_stride"] - bpw * rng.randint(1, 4))
    elif fault == "window":
        d[f"{region}_addr"] = WINDOW[1] - bpw * rng.randint(0, 4)
    elif fault == "low":
        d[f"{region}_addr"] = WINDOW[0] - bpw
    elif fault == "exp_off":          # an unused exponent region may hold anything
        d["row_vec"] = 0
        d["row_exp_addr"] = rng.getrandbits(64)
    elif fault == "top":              # past the end of a 32-bit address space
        d[f"{region}_stride"] = rng.getrandbits(32) // bpw * bpw
    else:
        for key in ("m", "n", "k", "a_stride", "b_stride", "c_stride"):
            d[key] = rng.choice([rng.getrandbits(32), rng.randint(1, 70000)])
        for key in ("a_addr", "b_addr", "c_addr", "row_exp_addr", "col_exp_addr"):
            d[key] = rng.getrandbits(rng.choice([16, 31, 40, 64]))
    return d


def check(descs, data_width, addr_width, seed, window=WINDOW, k_blocks=False, epilogue=False):
    descs = [em.descriptor(**d) for d in descs]
    want = [em.check(d, *window, data_width, addr_width) for d in descs]
    dut = DescriptorChecker(data_width, addr_width, k_blocks=k_blocks, epilogue=epilogue)
    got = []

    async def send(ctx):
        ctx.set(dut.window_base, window[0])
        ctx.set(dut.window_limit, window[1])
        await stream_send(ctx, dut.i_stream, descs, rng=random.Random(seed), stall=0.3)

    async def take(ctx):
        got.extend(await stream_recv(ctx, dut.o_stream, len(descs), rng=random.Random(seed + 1),
                                     stall=0.3, convert=lambda p: int(p.code)))

    run(dut, send, take, deadline_cycles=40 * len(descs) + 100)
    assert got == want
    return want


@pytest.mark.parametrize("data_width,addr_width", [(128, 32), (64, 40), (512, 64)])
@pytest.mark.parametrize("seed", range(3))
def test_random_descriptors(data_width, addr_width, seed):
    rng = random.Random(seed)
    bpw = data_width // 8
    descs = [good(rng, bpw) if rng.random() < 0.3 else faulty(rng, bpw) for _ in range(30)]
    codes = check(descs, data_width, addr_width, seed)
    assert 0 in codes and len(set(codes)) >= 4


def test_every_code_and_its_priority():
    rng = random.Random(5)
    d = good(rng, 16)
    cases = [
        (dict(d), 0),
        (dict(d, k=0, a_addr=3), ErrorCode.ZERO_DIMENSION),
        (dict(d, n=65536, k=65536), ErrorCode.DIMENSION_TOO_LARGE),
        (dict(d, k=65536), ErrorCode.K_TOO_LARGE),
        (dict(d, c_addr=d["c_addr"] + 4, a_stride=0), ErrorCode.MISALIGNED),
        (dict(d, m=3, k=40, transpose_a=0, a_stride=32, b_addr=2**40), ErrorCode.BAD_STRIDE),
        (dict(d, b_addr=2**31), ErrorCode.OUT_OF_WINDOW),
        (dict(d, row_vec=1, row_exp_addr=WINDOW[1]), ErrorCode.OUT_OF_WINDOW),
        (dict(d, row_vec=0, row_exp_addr=5), 0),
    ]
    codes = check([c for c, _ in cases], 128, 32, 1)
    assert codes == [int(code) for _, code in cases]


def test_packed_strides():
    """A and B may have a stride below the bus width (rows stored packed), C may not; a
    packed region's end is its last byte rounded up to a word, not its rows' strides plus
    the row rounded up."""
    base = dict(m=3, n=5, k=7, transpose_a=0, transpose_b=0, a_addr=0x1000, a_stride=16,
                b_addr=0x2000, b_stride=16, c_addr=0x3000, c_stride=32)
    # B of 7 rows of 5 bytes ends at 0x2000 + 6 * 5 + 5 = 0x2023 -> 0x2030
    cases = [
        (dict(base, b_stride=5), 0),
        (dict(base, a_stride=7), 0),
        (dict(base, b_stride=7, transpose_b=1, n=2), 0),      # B^T: 2 rows of 7 bytes
        (dict(base, b_stride=4), ErrorCode.BAD_STRIDE),       # rows of 5 bytes overlap
        (dict(base, c_stride=20), ErrorCode.MISALIGNED),
        (dict(base, b_stride=24), ErrorCode.MISALIGNED),      # over a word, not a multiple
        (dict(base, b_stride=5, b_addr=0x2003), ErrorCode.MISALIGNED),
    ]
    codes = check([c for c, _ in cases], 128, 32, 2, window=(0x1000, 0x4000))
    assert codes == [int(code) for _, code in cases]
    edge = dict(base, c_addr=0x1800)
    assert check([dict(edge, b_stride=5)], 128, 32, 3, window=(0x1000, 0x2030)) == [0]
    assert check([dict(edge, b_stride=5)], 128, 32, 3, window=(0x1000, 0x202F)) == [
        int(ErrorCode.OUT_OF_WINDOW)]


def test_latency():
    """A good descriptor's verdict ``LATENCY`` cycles after it, a bad dimension's
    ``DIMENSION_LATENCY`` after."""
    dut = DescriptorChecker(128, 32)
    seen = {}

    async def bench(ctx):
        ctx.set(dut.window_base, 0)
        ctx.set(dut.window_limit, 2**32)
        for name, d in (("good", good(random.Random(1), 16)), ("zero", dict(m=0))):
            ctx.set(dut.i_stream.payload, em.descriptor(**d))
            ctx.set(dut.i_stream.valid, 1)
            ctx.set(dut.o_stream.ready, 1)
            for cycle in range(40):
                await ctx.tick()
                if ctx.get(dut.o_stream.valid):
                    seen[name] = cycle + 1
                    break
            await ctx.tick()
            ctx.set(dut.i_stream.valid, 0)
            await ctx.tick()

    run(dut, bench, deadline_cycles=200)
    assert seen == {"good": DescriptorChecker.LATENCY, "zero": DescriptorChecker.DIMENSION_LATENCY}


@pytest.mark.parametrize("data_width,addr_width", [(128, 32), (64, 40)])
@pytest.mark.parametrize("seed", range(2))
def test_k_blocks_grid_regions(data_width, addr_width, seed):
    """DescriptorChecker(k_blocks=True): with ``tiles`` the exponent regions are the tile
    grids (ceil(M/32) x ceil(K/32) and ceil(K/32) x ceil(N/32) bytes, any stride): bases
    just inside and beyond the window's end, misaligned bases, mixed with plain
    descriptors, as :func:`sim.models.engine.check` says."""
    rng = random.Random(seed + 40)
    bpw = data_width // 8
    descs = []
    for _ in range(24):
        d = good(rng, bpw) if rng.random() < 0.5 else faulty(rng, bpw)
        d["tiles"] = rng.randint(0, 1)
        if d["tiles"] and rng.random() < 0.6:
            m, n, k = (max(1, min(d[x], 65535)) for x in "mnk")
            size = -(-m // 32) * -(-k // 32) if rng.random() < 0.5 else -(-k // 32) * -(-n // 32)
            key = rng.choice(["row_exp_addr", "col_exp_addr"])
            d[key] = rng.choice([WINDOW[1] - -(-size // bpw) * bpw,            # fits
                                 WINDOW[1] - -(-size // bpw) * bpw + bpw,      # one word over
                                 WINDOW[0] + 3])                               # misaligned
        descs.append(d)
    codes = check(descs, data_width, addr_width, seed, k_blocks=True)
    assert 0 in codes and len(set(codes)) >= 3


@pytest.mark.parametrize("data_width,addr_width,k_blocks", [(128, 32, True), (64, 40, False)])
@pytest.mark.parametrize("seed", range(2))
def test_bfp8_output_regions(data_width, addr_width, k_blocks, seed):
    """DescriptorChecker(epilogue=True): with ``bfp8`` C's rows are N bytes and C's tile grid
    (ceil(M/32) x ceil(N/32) bytes at ``c_exp_addr``) is a sixth region, with ``relu`` the
    mask (M rows of ceil(N/8) bytes at ``mask_addr``, ``mask_stride`` apart) a seventh: C,
    the grid and the mask just inside and beyond the window's end, misaligned grids and
    masks, mask rows overlapping, as :func:`sim.models.engine.check` says."""
    rng = random.Random(seed + 60)
    bpw = data_width // 8
    descs = []
    for _ in range(24):
        d = good(rng, bpw) if rng.random() < 0.5 else faulty(rng, bpw)
        if k_blocks:
            d["tiles"] = rng.randint(0, 1)
        d.update(bfp8=rng.randint(0, 1), stochastic=rng.randint(0, 1),
                 seed=rng.getrandbits(64), c_exp_addr=rng.getrandbits(30) // bpw * bpw)
        m, n = (max(1, min(d[x], 65535)) for x in "mn")
        if d["bfp8"] and rng.random() < 0.6:
            size = -(-m // 32) * -(-n // 32)
            d["c_exp_addr"] = rng.choice([WINDOW[1] - -(-size // bpw) * bpw,       # fits
                                          WINDOW[1] - -(-size // bpw) * bpw + bpw,  # over
                                          WINDOW[0] + 3])                          # misaligned
        elif d["bfp8"] and rng.random() < 0.5 and d["c_stride"] >= n:
            # C's n bytes a row fit where its 4 n would not
            d["c_addr"] = WINDOW[1] - (m - 1) * d["c_stride"] - -(-n // bpw) * bpw
        d["relu"] = rng.randint(0, 1)
        row = -(-n // 8)
        d["mask_stride"] = -(-row // bpw) * bpw + bpw * rng.choice([0, 1])
        size = (m - 1) * d["mask_stride"] + -(-row // bpw) * bpw
        d["mask_addr"] = rng.choice([WINDOW[1] - size,                    # fits
                                     WINDOW[1] - size + bpw,              # one word over
                                     WINDOW[0] + bpw * rng.randint(0, 4),
                                     rng.getrandbits(30) // bpw * bpw])
        fault = rng.random()
        if d["relu"] and fault < 0.15:
            d["mask_addr"] += rng.randint(1, bpw - 1)                     # misaligned
        elif d["relu"] and fault < 0.3:
            d["mask_stride"] += rng.randint(1, bpw - 1)                   # misaligned
        elif d["relu"] and fault < 0.45 and m > 1 and row > bpw:
            d["mask_stride"] -= bpw                                       # rows overlap
        descs.append(d)
    codes = check(descs, data_width, addr_width, seed, k_blocks=k_blocks, epilogue=True)
    assert 0 in codes and len(set(codes)) >= 3
    relu = [c for d, c in zip(descs, codes, strict=True) if d["relu"]]
    assert 0 in relu and len(set(relu)) >= 3


def test_relu_mask_region():
    """The mask region's own cases, one at a time: a fitting mask, its last word one over
    the window, a misaligned base or stride, overlapping rows, a mask whose last row ends
    exactly at the window's end; with ``relu`` 0 the mask fields are not looked at."""
    base = dict(m=5, n=70, k=3, a_addr=0x1000, a_stride=16, b_addr=0x1100, b_stride=144,
                c_addr=0x1400, c_stride=144, bfp8=1, c_exp_addr=0x1800, relu=1,
                mask_addr=0x1900, mask_stride=16)
    # the mask: 5 rows of 9 bytes, 16 apart -> ends at 0x1900 + 4 * 16 + 16 = 0x1950
    cases = [
        (dict(base), 0),
        (dict(base, mask_addr=0x1908), ErrorCode.MISALIGNED),
        (dict(base, mask_stride=24), ErrorCode.MISALIGNED),
        (dict(base, mask_stride=0), ErrorCode.BAD_STRIDE),
        (dict(base, mask_stride=0, m=1), 0),
        (dict(base, mask_addr=0x1910), ErrorCode.OUT_OF_WINDOW),
        (dict(base, mask_addr=0x800), ErrorCode.OUT_OF_WINDOW),
        (dict(base, relu=0, mask_addr=3, mask_stride=5), 0),
        (dict(base, n=128, mask_stride=16), 0),
        (dict(base, n=129, mask_stride=16), ErrorCode.BAD_STRIDE),
    ]
    codes = check([c for c, _ in cases], 128, 32, 4, window=(0x1000, 0x1950), epilogue=True)
    assert codes == [int(code) for _, code in cases]


def test_bias_and_mask_in_regions():
    """The bias region (one row of 4 M bytes with ``bias`` 1, 4 N with 2, at ``bias_addr``)
    and the stored mask's (``mask_in``: the mask region as with ``relu``), one case at a
    time, as :func:`sim.models.engine.check` says; with ``bias`` 0 and ``mask_in`` 0 their
    fields are not looked at."""
    base = dict(m=5, n=70, k=3, a_addr=0x1000, a_stride=16, b_addr=0x1100, b_stride=144,
                c_addr=0x1400, c_stride=144, bfp8=1, c_exp_addr=0x1800, mask_addr=0x1900,
                mask_stride=16, bias_addr=0x1950)
    # the mask ends at 0x1950; a column bias is 280 bytes (to 0x1a68), a row bias 20
    cases = [
        (dict(base, bias=2), 0),
        (dict(base, bias=1, bias_addr=0x1a50), 0),
        (dict(base, bias=2, bias_addr=0x1a60), ErrorCode.OUT_OF_WINDOW),
        (dict(base, bias=2, bias_addr=0x1958), ErrorCode.MISALIGNED),
        (dict(base, bias=1, bias_addr=0xf00), ErrorCode.OUT_OF_WINDOW),
        (dict(base, bias=0, bias_addr=3), 0),
        (dict(base, mask_in=1), 0),
        (dict(base, mask_in=1, mask_addr=0x1908), ErrorCode.MISALIGNED),
        (dict(base, mask_in=1, mask_stride=0), ErrorCode.BAD_STRIDE),
        (dict(base, mask_in=1, mask_addr=0x1a30), ErrorCode.OUT_OF_WINDOW),
        (dict(base, mask_in=0, mask_addr=3, mask_stride=5), 0),
        (dict(base, mask_in=1, bias=1), 0),
    ]
    codes = check([c for c, _ in cases], 128, 32, 4, window=(0x1000, 0x1a70), epilogue=True)
    assert codes == [int(code) for _, code in cases]


def test_quantize_only_regions():
    """``quantize_only``: K is not looked at, A is M rows of 4 N bytes (base and stride
    multiples of the bus word, as C's), and neither B nor an exponent vector is checked; one
    case at a time, as :func:`sim.models.engine.check` says."""
    base = dict(m=5, n=70, k=0, a_addr=0x1000, a_stride=288, b_addr=3, b_stride=1,
                c_addr=0x1600, c_stride=80, bfp8=1, c_exp_addr=0x1800, quantize_only=1,
                row_exp_addr=5, col_exp_addr=7)
    # A: 5 rows of 280 bytes, 288 apart -> ends at 0x1000 + 4 * 288 + 288 = 0x15a0
    cases = [
        (dict(base), 0),
        (dict(base, k=65536), 0),
        (dict(base, k=2**32 - 1, row_vec=1, col_vec=1), 0),
        (dict(base, m=0), ErrorCode.ZERO_DIMENSION),
        (dict(base, n=65536), ErrorCode.DIMENSION_TOO_LARGE),
        (dict(base, a_addr=0x1008), ErrorCode.MISALIGNED),
        (dict(base, a_stride=280), ErrorCode.MISALIGNED),
        (dict(base, a_stride=272), ErrorCode.BAD_STRIDE),
        (dict(base, a_addr=0x1480), ErrorCode.OUT_OF_WINDOW),
        (dict(base, quantize_only=0, k=3), ErrorCode.MISALIGNED),   # B's odd base, as a GEMM
    ]
    codes = check([c for c, _ in cases], 128, 32, 4, window=(0x1000, 0x1900), epilogue=True)
    assert codes == [int(code) for _, code in cases]
