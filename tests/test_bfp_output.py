"""BFP8 output on the RTL (``Accelerator(epilogue=True)``, Device("rtl", epilogue=True)):
C written as BFP8 tile blocks by the write-back, with or without a bias, ReLU and its mask,
or a stored mask applied, bit for bit :mod:`sim.models.bfp`, Device("golden") and the
functional model, memory beyond the matrix and the mask untouched, the mask region checked
as the functional model checks it, the options it lacks refused, inf and NaN reported."""

import numpy as np
import pytest

from firmware import Device
from firmware.ml.resident import ResidentMLP
from firmware.runtime.device import AcceleratorError
from firmware.spec import regmap
from firmware.spec.regmap import ErrorCode
from sim.models import bfp, golden

# (rows = cols, data_width, options): lanes above and below the bus width; the Pynq-Z1's
# shape, bus and ports (BFP8 C through the first of its four write ports)
# (the latter's elaboration and runs take minutes: slow)
CONFIGS = [(8, 128, {}), pytest.param((16, 64, {"block": 8, "write_ports": 4,
                                                "read_ports": 3}), marks=pytest.mark.slow)]


@pytest.fixture(scope="module", params=CONFIGS, ids=["8x8@128", "16x16@64"])
def dev(request):
    rows, width, options = request.param
    device = Device("rtl", rows=rows, cols=rows, data_width=width, depth=64, latency=24,
                    pause=0.2, seed=7, k_blocks=True, epilogue=True, **options)
    yield device
    assert device.sim.violations == 0, "AXI protocol violations"


def _tiles(rng, shape, spread=20):
    x = rng.standard_normal(shape).astype(np.float32)
    x *= np.float32(2.0) ** rng.integers(-spread, spread, (1, shape[1])).astype(np.float32)
    return bfp.quantize_tiles(x)


@pytest.mark.parametrize("m,n,k,ta,tb,rounding", [
    (40, 70, 33, False, False, "nearest"), (33, 20, 64, True, False, "stochastic"),
    (5, 7, 40, False, True, "stochastic"), (64, 64, 96, True, True, "nearest"),
    (1, 100, 32, False, False, "stochastic"), (97, 3, 17, False, False, "nearest")])
def test_bfp8_output_matches_golden(dev, m, n, k, ta, tb, rounding):
    """bfp_gemm(out="bfp8") on tile operands: each K block rescaled and added in float32
    (:func:`sim.models.bfp.gemm_kblocks`), then quantised to tile blocks with the seeded
    rounding (:func:`sim.models.bfp.quantize_tiles`), mantissas and exponents bit for bit;
    the same as the functional model's."""
    rng = np.random.default_rng(m * 7 + n * 3 + k)
    qa, ea = _tiles(rng, (k, m) if ta else (m, k))
    qb, eb = _tiles(rng, (n, k) if tb else (k, n))
    seed = int(rng.integers(0, 2**63))
    got = dev.bfp_gemm(dev.bfp_tensor(qa, ea), dev.bfp_tensor(qb, eb), transpose_a=ta,
                       transpose_b=tb, out="bfp8", rounding=rounding, seed=seed)
    c = bfp.gemm_kblocks(qa, ea, qb, eb, transpose_a=ta, transpose_b=tb)
    want_q, want_e = bfp.quantize_tiles(c, rounding=rounding, seed=seed)
    np.testing.assert_array_equal(got.mantissas(), want_q)
    np.testing.assert_array_equal(got.exponents(), want_e)
    model = Device("model", rows=dev.rows, cols=dev.cols, data_width=dev.data_width)
    ref = model.bfp_gemm(model.bfp_tensor(qa, ea), model.bfp_tensor(qb, eb), transpose_a=ta,
                         transpose_b=tb, out="bfp8", rounding=rounding, seed=seed)
    np.testing.assert_array_equal(ref.mantissas(), want_q)
    np.testing.assert_array_equal(ref.exponents(), want_e)


@pytest.mark.parametrize("m,n,k,ta,tb,rounding", [
    (40, 70, 33, False, False, "stochastic"), (33, 13, 64, True, False, "nearest"),
    (5, 7, 40, False, True, "stochastic"), (97, 45, 17, True, True, "nearest")])
def test_bfp8_relu_matches_golden(dev, m, n, k, ta, tb, rounding):
    """bfp_gemm(relu=True, out="bfp8"): ReLU before the quantiser, its mask (v > 0 of C,
    :func:`sim.models.bfp.epilogue`) written a bit an element, each row's bytes as
    :func:`sim.models.bfp.pack_mask` packs them (the unused high bits of a row's last byte
    0); the blocks and the packed mask bytes the same as Device("golden")'s and the
    functional model's."""
    rng = np.random.default_rng(m * 5 + n * 11 + k)
    qa, ea = _tiles(rng, (k, m) if ta else (m, k))
    qb, eb = _tiles(rng, (n, k) if tb else (k, n))
    seed = int(rng.integers(0, 2**63))
    got, got_mask = dev.bfp_gemm(dev.bfp_tensor(qa, ea), dev.bfp_tensor(qb, eb),
                                 transpose_a=ta, transpose_b=tb, relu=True, out="bfp8",
                                 rounding=rounding, seed=seed)
    c = bfp.gemm_kblocks(qa, ea, qb, eb, transpose_a=ta, transpose_b=tb)
    want = bfp.epilogue(c, relu=True, out="bfp8", rounding=rounding, seed=seed)
    assert 0 < want.mask.sum() < m * n
    np.testing.assert_array_equal(got.mantissas(), want.q)
    np.testing.assert_array_equal(got.exponents(), want.exp)
    np.testing.assert_array_equal(got_mask.bits.numpy(), bfp.pack_mask(want.mask))
    np.testing.assert_array_equal(got_mask.numpy(), want.mask)
    for ref in (Device("golden"), Device("model", rows=dev.rows, cols=dev.cols,
                                         data_width=dev.data_width)):
        q, mask = ref.bfp_gemm(ref.bfp_tensor(qa, ea), ref.bfp_tensor(qb, eb),
                               transpose_a=ta, transpose_b=tb, relu=True, out="bfp8",
                               rounding=rounding, seed=seed)
        np.testing.assert_array_equal(q.mantissas(), want.q)
        np.testing.assert_array_equal(q.exponents(), want.exp)
        np.testing.assert_array_equal(mask.bits.numpy(), got_mask.bits.numpy())


def _refs(dev):
    return (Device("golden"), Device("model", rows=dev.rows, cols=dev.cols,
                                      data_width=dev.data_width))


@pytest.mark.parametrize("m,n,k,axis,relu,rounding", [
    (40, 70, 33, "col", False, "stochastic"), (33, 13, 64, "row", False, "nearest"),
    (5, 7, 40, "col", True, "stochastic"), (97, 45, 17, "row", True, "nearest"),
    (64, 32, 32, "col", True, "stochastic"), (1, 100, 32, "row", True, "stochastic")])
def test_bfp8_bias_matches_golden(dev, m, n, k, axis, relu, rounding):
    """bfp_gemm(bias=..., out="bfp8"), with and without ReLU: the bias added to C in float32
    (round to nearest even) a row or a column at a time, then ReLU and its mask, then the
    quantiser (:func:`sim.models.bfp.epilogue`); the blocks and the mask the same as
    Device("golden")'s and the functional model's."""
    rng = np.random.default_rng(m * 3 + n * 13 + k)
    qa, ea = _tiles(rng, (m, k))
    qb, eb = _tiles(rng, (k, n))
    c = bfp.gemm_kblocks(qa, ea, qb, eb)
    # a bias of C's magnitude, so that the sum rounds and changes signs
    scale = np.float32(np.abs(c).mean() or 1)
    bias = (rng.standard_normal(m if axis == "row" else n) * scale).astype(np.float32)
    seed = int(rng.integers(0, 2**63))
    want = bfp.epilogue(c, bias=bias, bias_axis=axis, relu=relu, out="bfp8",
                        rounding=rounding, seed=seed)
    assert not np.array_equal(want.q, bfp.epilogue(c, relu=relu, out="bfp8",
                                                   rounding=rounding, seed=seed).q)
    for d in (dev, *_refs(dev)):
        got = d.bfp_gemm(d.bfp_tensor(qa, ea), d.bfp_tensor(qb, eb), bias=bias,
                         bias_axis=axis, relu=relu, out="bfp8", rounding=rounding, seed=seed)
        if relu:
            got, mask = got
            np.testing.assert_array_equal(mask.numpy(), want.mask)
            np.testing.assert_array_equal(mask.bits.numpy(), bfp.pack_mask(want.mask))
        np.testing.assert_array_equal(got.mantissas(), want.q)
        np.testing.assert_array_equal(got.exponents(), want.exp)


@pytest.mark.parametrize("m,n,k,rounding", [
    (40, 70, 33, "stochastic"), (33, 13, 64, "nearest"), (97, 45, 17, "stochastic"),
    (32, 64, 10, "stochastic")])
def test_bfp8_mask_in_matches_golden(dev, m, n, k, rounding):
    """bfp_gemm(mask_in=mask, out="bfp8"), ReLU's backward: C zeroed where a mask stored by
    a ReLU GEMM before it is 0, then quantised; on each device with the mask it made
    itself, the same blocks as :func:`sim.models.bfp.epilogue`'s."""
    rng = np.random.default_rng(m * 17 + n + k)
    q1, e1 = _tiles(rng, (m, 24))
    q2, e2 = _tiles(rng, (24, n))
    qa, ea = _tiles(rng, (m, k))
    qb, eb = _tiles(rng, (k, n))
    seed = int(rng.integers(0, 2**63))
    stored = bfp.epilogue(bfp.gemm_kblocks(q1, e1, q2, e2), relu=True).mask
    assert 0 < stored.sum() < m * n
    want = bfp.epilogue(bfp.gemm_kblocks(qa, ea, qb, eb), mask_in=stored, out="bfp8",
                        rounding=rounding, seed=seed)
    for d in (dev, *_refs(dev)):
        _, mask = d.bfp_gemm(d.bfp_tensor(q1, e1), d.bfp_tensor(q2, e2), relu=True,
                             out="bfp8")
        np.testing.assert_array_equal(mask.numpy(), stored)
        got = d.bfp_gemm(d.bfp_tensor(qa, ea), d.bfp_tensor(qb, eb), mask_in=mask,
                         out="bfp8", rounding=rounding, seed=seed)
        np.testing.assert_array_equal(got.mantissas(), want.q)
        np.testing.assert_array_equal(got.exponents(), want.exp)


@pytest.mark.parametrize("m,n,k,ta,tb", [(128, 96, 200, False, True), (70, 130, 96, True, False)])
def test_side_data_of_many_units_beside_long_loads(dev, m, n, k, ta, tb):
    """Many units, each over several K blocks, so that the operands' loads and the units'
    side reads share the first reader for a long time: a column bias with ReLU (a hidden
    layer's forward), then its mask applied to the next GEMM (its backward), bit for bit
    :func:`sim.models.bfp.epilogue` with stochastic rounding."""
    rng = np.random.default_rng(m + n + k)
    qa, ea = _tiles(rng, (k, m) if ta else (m, k))
    qb, eb = _tiles(rng, (n, k) if tb else (k, n))
    c = bfp.gemm_kblocks(qa, ea, qb, eb, transpose_a=ta, transpose_b=tb)
    bias = (rng.standard_normal(n) * np.abs(c).mean()).astype(np.float32)
    fwd = bfp.epilogue(c, bias=bias, bias_axis="col", relu=True, out="bfp8",
                       rounding="stochastic", seed=11)
    bwd = bfp.epilogue(c, mask_in=fwd.mask, out="bfp8", rounding="stochastic", seed=12)
    a, b = dev.bfp_tensor(qa, ea), dev.bfp_tensor(qb, eb)
    got, mask = dev.bfp_gemm(a, b, transpose_a=ta, transpose_b=tb, bias=bias, relu=True,
                             out="bfp8", rounding="stochastic", seed=11)
    np.testing.assert_array_equal(got.mantissas(), fwd.q)
    np.testing.assert_array_equal(got.exponents(), fwd.exp)
    np.testing.assert_array_equal(mask.numpy(), fwd.mask)
    got = dev.bfp_gemm(a, b, transpose_a=ta, transpose_b=tb, mask_in=mask, out="bfp8",
                       rounding="stochastic", seed=12)
    np.testing.assert_array_equal(got.mantissas(), bwd.q)
    np.testing.assert_array_equal(got.exponents(), bwd.exp)


@pytest.mark.parametrize("m,n,rounding", [
    (40, 70, "nearest"), (33, 20, "stochastic"), (1, 1, "nearest"), (97, 3, "stochastic"),
    (64, 64, "stochastic")])
def test_quantize_only_matches_golden(dev, m, n, rounding):
    """Device.quantize on the RTL (a quantise-only descriptor: the float32 matrix read as C
    tiles by rtl.fpread.Fp32TileReader, then the BFP8 write-back): mantissas and exponents
    bit for bit :func:`sim.models.bfp.quantize_tiles` with the same seed, edge units
    included; a GEMM on the tensor it wrote reads it as written."""
    rng = np.random.default_rng(m * 5 + n)
    x = rng.standard_normal((m, n)).astype(np.float32)
    x *= np.float32(2.0) ** rng.integers(-20, 20, (1, n)).astype(np.float32)
    seed = int(rng.integers(0, 2**63))
    got = dev.quantize(x, rounding=rounding, seed=seed)
    want_q, want_e = bfp.quantize_tiles(x, rounding=rounding, seed=seed)
    np.testing.assert_array_equal(got.mantissas(), want_q)
    np.testing.assert_array_equal(got.exponents(), want_e)
    qb, eb = _tiles(rng, (n, 24))
    c = dev.bfp_gemm(got, dev.bfp_tensor(qb, eb), out="float32")
    np.testing.assert_array_equal(c.numpy(), bfp.gemm_kblocks(want_q, want_e, qb, eb))


def test_unfold_needs_the_build_option(dev):
    """A build without ``unfold`` (or convolutions) does not offer it
    (``CONFIG_FEATURES.UNFOLD`` 0): Device.quantize(unfold=...) is refused naming the
    feature before anything runs."""
    from sim.models import conv as convm
    g = convm.ConvGeometry(32, 1, 4, 4, 8, 3, padding=1)
    assert not dev.driver.info.unfold
    with pytest.raises(RuntimeError, match="CONFIG_FEATURES.UNFOLD"):
        dev.quantize(np.zeros((1, g.positions), np.float32), unfold=g)


def test_quantize_only_queued_between_gemms_with_side_data(dev):
    """Four descriptors queued back to back with OVERLAP: a GEMM, a quantise-only one with
    a column bias and ReLU, a GEMM, a quantise-only one with the stored mask applied. Each
    quantise-only descriptor waits for the one before and the next waits for it (the
    reader takes the load side of the first read port, shared with the side loader); every
    result is bit for bit sim.models.bfp's."""
    from firmware.runtime.epilogue import MaskTensor, _empty, _empty_bfp, _span
    rng = np.random.default_rng(11)
    m, n, k = 40, 70, 48
    qa, ea = _tiles(rng, (m, k))
    qb, eb = _tiles(rng, (k, n))
    a, b = dev.bfp_tensor(qa, ea), dev.bfp_tensor(qb, eb)
    xs = [(rng.standard_normal((m, n)) * 8).astype(np.float32) for _ in range(2)]
    xt = [dev.tensor(x) for x in xs]
    bias = rng.standard_normal(n).astype(np.float32)
    bt = dev.tensor(bias.reshape(1, -1))
    outs = [_empty_bfp(dev, (m, n)) for _ in range(4)]
    mask = MaskTensor(_empty(dev, (m, -(-n // 8)), np.uint8), (m, n))
    seeds = [int(s) for s in rng.integers(0, 2**63, 4)]
    flags = {"OVERLAP": 1}

    def out(i):
        t = outs[i]
        return dict(c_addr=t.q.addr, c_stride=t.q.stride, c_exp_addr=t.exp.addr,
                    seed=seeds[i])

    gemm = dict(m=m, n=n, k=k, flags=flags, a_addr=a.q.addr, a_stride=a.q.stride,
                b_addr=b.q.addr, b_stride=b.q.stride, row_exp_addr=a.exp.addr,
                col_exp_addr=b.exp.addr,
                epilogue={"A_TILES": 1, "B_TILES": 1, "BFP8": 1, "STOCHASTIC": 1})
    only = {"QUANTIZE_ONLY": 1, "BFP8": 1, "STOCHASTIC": 1}
    descs = [
        dict(gemm, **out(0)),
        dict(m=m, n=n, k=1, flags=flags, a_addr=xt[0].addr, a_stride=xt[0].stride,
             bias_addr=bt.addr, mask_addr=mask.bits.addr, mask_stride=mask.bits.stride,
             epilogue=dict(only, BIAS=2, RELU=1), **out(1)),
        dict(gemm, **out(2)),
        dict(m=m, n=n, k=1, flags=flags, a_addr=xt[1].addr, a_stride=xt[1].stride,
             mask_addr=mask.bits.addr, mask_stride=mask.bits.stride,
             epilogue=dict(only, MASK_IN=1), **out(3)),
    ]
    tensors = [a.q, a.exp, b.q, b.exp, *xt, bt, mask.bits,
               *(x for t in outs for x in (t.q, t.exp))]
    for d in descs:
        d["regions"] = [_span(t) for t in tensors]
    dev.driver.run(*descs)
    c = bfp.gemm_kblocks(qa, ea, qb, eb)
    r1 = bfp.epilogue(xs[0], bias=bias, bias_axis="col", relu=True, out="bfp8",
                      rounding="stochastic", seed=seeds[1])
    want = [bfp.quantize_tiles(c, rounding="stochastic", seed=seeds[0]), (r1.q, r1.exp),
            bfp.quantize_tiles(c, rounding="stochastic", seed=seeds[2])]
    r3 = bfp.epilogue(xs[1], mask_in=r1.mask, out="bfp8", rounding="stochastic",
                      seed=seeds[3])
    want.append((r3.q, r3.exp))
    for i, (q, e) in enumerate(want):
        np.testing.assert_array_equal(outs[i].mantissas(), q, err_msg=f"descriptor {i}")
        np.testing.assert_array_equal(outs[i].exponents(), e, err_msg=f"descriptor {i}")
    np.testing.assert_array_equal(mask.numpy(), r1.mask)


def test_resident_mlp_trains_bit_identical_to_golden(dev):
    """A fully connected network trained on the RTL with its activations, masks and deltas
    on the device gives the golden model's weights bit for bit after two steps. Everything
    but the host optimiser runs on the device: the quantise-only descriptors of what the
    host writes (the batch, the loss gradient, the weights), every GEMM, bias (the last
    layer's on its float32 logits too), ReLU, mask and delta quantisation."""
    from firmware.ml.data import digits
    xtr, ytr, _, _ = digits()
    xtr = xtr.astype(np.float32)
    nets = [ResidentMLP([64, 32, 10], d, seed=5, lr=0.05) for d in (dev, Device("golden"))]
    assert not nets[0].chain.host_quantize and not nets[0].chain.host_bias
    assert not nets[1].chain.host_quantize and not nets[1].chain.host_bias
    dev.profile.reset()
    for net in nets:
        for s in range(2):
            net.step(xtr[s * 40:(s + 1) * 40], ytr[s * 40:(s + 1) * 40])
    # the host benchmark's rows: no host quantisation, no host sums of partials
    assert dev.profile.seconds["quantize"] == 0 and dev.profile.seconds["combine"] == 0
    assert dev.profile.seconds["driver"] > 0
    for (name, p), (_, q) in zip(nets[0].params, nets[1].params, strict=True):
        np.testing.assert_array_equal(p.view(np.uint32), q.view(np.uint32), err_msg=name)
    assert set(nets[0].traffic) == {"input batch", "weights", "logits", "loss gradient",
                                    "gradients"}


def _plain_operands(mem, rng, m, n, k, bpw, base):
    """A and B (int8, rows a bus word apart) written at ``base`` and ``base + 0x4000``;
    returns the descriptor fields and the float32 C they give with exponents -3 and 2."""
    a = rng.integers(-128, 128, (m, k), dtype=np.int8)
    b = rng.integers(-128, 128, (k, n), dtype=np.int8)
    sa, sb = (-(-x // bpw) * bpw for x in (k, n))
    for addr, x, stride in ((base, a, sa), (base + 0x4000, b, sb)):
        for i, row in enumerate(x):
            mem[addr + i * stride:addr + i * stride + row.size] = row.view(np.uint8)
    c = golden.rescale(golden.gemm(a, b), np.full(m, -3, np.int8), np.full(n, 2, np.int8))
    return dict(m=m, n=n, k=k, flags={"ROW_EXP": -3, "COL_EXP": 2}, a_addr=base,
                a_stride=sa, b_addr=base + 0x4000, b_stride=sb), c


def test_bfp8_relu_leaves_the_rest_of_memory(dev):
    """ReLU through the registers on a plain GEMM with N not a multiple of 8: the mask's M
    rows of ceil(N/8) bytes at DESC_MASK_ADDR, DESC_MASK_STRIDE (wider) apart, hold
    pack_mask's bytes; C's mantissas and grid as :func:`sim.models.bfp.epilogue` says;
    every other byte of the region (beyond a mask row, beyond M) is as it was."""
    drv, mem = dev.driver, dev.sim.memory
    bpw = drv.bytes_per_word
    m, n, k = 45, 37, 21
    base = 0x100000
    desc, c = _plain_operands(mem, np.random.default_rng(4), m, n, k, bpw, base)
    sc = -(-n // bpw) * bpw + bpw
    c_addr, exp_addr, mask_addr = base + 0x8000, base + 0xA000, base + 0xB000
    mask_stride = 2 * bpw
    mem[c_addr:c_addr + 0x8000] = 0xA5
    before = mem[c_addr:c_addr + 0x8000].copy()
    drv.set_window(base, base + 0x10000)
    drv.run(dict(desc, c_addr=c_addr, c_stride=sc, c_exp_addr=exp_addr, seed=5,
                 mask_addr=mask_addr, mask_stride=mask_stride,
                 epilogue={"BFP8": 1, "RELU": 1}))
    out = bfp.epilogue(c, relu=True, out="bfp8")
    bits = bfp.pack_mask(out.mask)
    want = before.copy()
    for i in range(m):
        want[i * sc:i * sc + n] = out.q[i].view(np.uint8)
        at = mask_addr - c_addr + i * mask_stride
        want[at:at + bits.shape[1]] = bits[i]
    want[exp_addr - c_addr:exp_addr - c_addr + out.exp.size] = out.exp.reshape(-1).view(
        np.uint8)
    np.testing.assert_array_equal(mem[c_addr:c_addr + 0x8000], want)


def test_mask_region_checked_as_the_functional_model_checks_it(dev):
    """A ReLU descriptor whose mask is misaligned, has overlapping rows or leaves the window
    stops with the same error code on the RTL as on the functional model, and nothing is
    written; a fitting one runs on both."""
    bpw = dev.driver.bytes_per_word
    m, n, k = 9, 70, 8
    base = 0x100000
    row = -(-n // 8)
    stride = -(-row // bpw) * bpw
    end = base + 0x10000
    cases = [
        (dict(mask_addr=end - m * stride), ErrorCode.NONE),
        (dict(mask_addr=base + 0xB000 + 1), ErrorCode.MISALIGNED),
        (dict(mask_stride=stride + 1), ErrorCode.MISALIGNED),
        (dict(mask_stride=stride - bpw), ErrorCode.BAD_STRIDE),     # rows of 9 bytes
        (dict(mask_addr=end - m * stride + bpw), ErrorCode.OUT_OF_WINDOW),
        (dict(mask_addr=base - bpw), ErrorCode.OUT_OF_WINDOW),
    ]
    model = Device("model", rows=dev.rows, cols=dev.cols, data_width=dev.data_width)
    for case, code in cases:
        codes = []
        for d in (dev, model):
            mem = d.sim.memory
            desc, _ = _plain_operands(mem, np.random.default_rng(6), m, n, k, bpw, base)
            desc.update(c_addr=base + 0x8000, c_stride=-(-n // bpw) * bpw,
                        c_exp_addr=base + 0xA000, mask_addr=base + 0xB000,
                        mask_stride=stride, epilogue={"BFP8": 1, "RELU": 1})
            desc.update(case)
            mem[base + 0x8000:end] = 0x5A
            d.driver.set_window(base, end)
            try:
                d.driver.run(desc)
                codes.append(ErrorCode.NONE)
            except AcceleratorError as e:
                codes.append(e.code)
                assert (mem[base + 0x8000:end] == 0x5A).all()
        assert codes == [code, code], case


def test_bfp8_output_of_a_plain_gemm_leaves_the_rest_of_memory(dev):
    """A GEMM with scalar exponents (no tile operands) and a BFP8 C: C's rows hold N bytes
    of mantissas at DESC_C_ADDR (stride wider than N), the exponent grid ceil(M/32) x
    ceil(N/32) at DESC_C_EXP_ADDR; every other byte of the region is as it was."""
    drv, mem = dev.driver, dev.sim.memory
    bpw = drv.bytes_per_word
    rng = np.random.default_rng(3)
    m, n, k = 45, 37, 21
    a = rng.integers(-128, 128, (m, k), dtype=np.int8)
    b = rng.integers(-128, 128, (k, n), dtype=np.int8)
    sa, sb = (-(-x // bpw) * bpw for x in (k, n))
    sc = -(-n // bpw) * bpw + 2 * bpw
    base = 0x100000
    for addr, x, stride in ((base, a, sa), (base + 0x4000, b, sb)):
        for i, row in enumerate(x):
            mem[addr + i * stride:addr + i * stride + row.size] = row.view(np.uint8)
    c_addr, exp_addr = base + 0x8000, base + 0xC000
    mem[c_addr:c_addr + 0x8000] = 0xA5
    before = mem[c_addr:c_addr + 0x8000].copy()
    drv.set_window(base, base + 0x10000)
    drv.run(dict(m=m, n=n, k=k, flags={"ROW_EXP": -3, "COL_EXP": 2}, a_addr=base,
                 a_stride=sa, b_addr=base + 0x4000, b_stride=sb, c_addr=c_addr, c_stride=sc,
                 c_exp_addr=exp_addr, seed=99, epilogue={"BFP8": 1, "STOCHASTIC": 1}))
    c = golden.rescale(golden.gemm(a, b), np.full(m, -3, np.int8), np.full(n, 2, np.int8))
    want_q, want_e = bfp.quantize_tiles(c, rounding="stochastic", seed=99)
    want = before.copy()
    for i in range(m):
        want[i * sc:i * sc + n] = want_q[i].view(np.uint8)
    want[exp_addr - c_addr:exp_addr - c_addr + want_e.size] = want_e.reshape(-1).view(np.uint8)
    np.testing.assert_array_equal(mem[c_addr:c_addr + 0x8000], want)


@pytest.mark.parametrize("option", [{"BIAS": 3}, {"QUANTIZE_ONLY": 1, "BFP8": 0},
                                    {"QUANTIZE_ONLY": 1, "A_TILES": 1, "B_TILES": 1},
                                    {"A_TILES": 1}, {"SGD": 1}])
def test_options_it_lacks_are_refused(dev, option):
    """CONFIG_FEATURES.OPS says BFP8, STOCHASTIC, BIAS, RELU, MASK_IN and QUANTIZE_ONLY
    (EPILOGUE 0, FP32 1: QUANTIZE_ONLY only with BFP8); any other epilogue bit (or half of
    the tile pair, or SGD, not built), BIAS 3, QUANTIZE_ONLY on a float32 C or with tile
    exponents, stops the accelerator with UNSUPPORTED, and the runtime refuses the call
    first, naming what is missing."""
    info = dev.driver.info
    assert info.epilogue_ops == regmap.pack("DESC_EPILOGUE", BFP8=1, STOCHASTIC=1, BIAS=3,
                                            RELU=1, MASK_IN=1, QUANTIZE_ONLY=1)
    assert not info.epilogue and info.k_blocks and info.fp32
    with pytest.raises(AcceleratorError) as e:
        dev.driver.run(dict(m=1, n=1, k=1, flags={}, epilogue=dict({"BFP8": 1}, **option)))
    assert e.value.code is ErrorCode.UNSUPPORTED
    q, ex = bfp.quantize_tiles(np.ones((4, 4), np.float32))
    t = dev.bfp_tensor(q, ex)
    with pytest.raises(RuntimeError, match="SGD"):
        dev.sgd_update(t, t, dev.quantize(np.ones((4, 4), np.float32)), lr=0.1)
    with pytest.raises(ValueError, match="does not offer DESC_EPILOGUE.SGD"):
        ResidentMLP([4, 4], dev, momentum=0.0, optimizer="device")


def test_inf_stops_with_nonfinite_then_runs_again(dev):
    """A C holding inf (operand exponents too large for float32) is written as zero blocks
    and stops the accelerator with NONFINITE, as the functional model does; after a soft
    reset the next descriptor runs."""
    q = np.full((32, 32), 127, np.int8)
    big = dev.bfp_tensor(q, np.array([[127]], np.int8))
    with pytest.raises(AcceleratorError) as e:
        dev.bfp_gemm(big, big, out="bfp8")
    assert e.value.code is ErrorCode.NONFINITE
    model = Device("model")
    mbig = model.bfp_tensor(q, np.array([[127]], np.int8))
    with pytest.raises(AcceleratorError) as e:
        model.bfp_gemm(mbig, mbig, out="bfp8")
    assert e.value.code is ErrorCode.NONFINITE
    dev.driver.soft_reset()
    small = dev.bfp_tensor(q, np.array([[-10]], np.int8))
    got = dev.bfp_gemm(small, small, out="bfp8")
    want = bfp.quantize_tiles(bfp.gemm_kblocks(q, np.array([[-10]], np.int8), q,
                                               np.array([[-10]], np.int8)))
    np.testing.assert_array_equal(got.mantissas(), want[0])
    np.testing.assert_array_equal(got.exponents(), want[1])
