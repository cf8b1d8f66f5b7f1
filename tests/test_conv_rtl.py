"""Convolutions on the RTL (``Accelerator(conv=True)``, ``Device("rtl")``): bit for bit
:func:`sim.models.conv.conv2d_forward`, :func:`sim.models.conv.conv2d_backward_data` and
:func:`sim.models.conv.conv2d_weight_grad` through :func:`sim.models.bfp.epilogue` on
random shapes (strides 1 and 2, padding 0 to 2, kernels 1 x 1 to 5 x 5, dilation 2, odd
sizes, one input channel, several tile blocks of channels), forward convolutions
max-pooled on the write path and backward-data ones routed back through the pool, through
:func:`sim.models.conv.conv_epilogue`; the descriptors it refuses, in the runtime and in
the hardware."""

import numpy as np
import pytest

from firmware import Device
from firmware.runtime.device import AcceleratorError
from firmware.spec.regmap import ErrorCode
from sim.models import bfp
from sim.models import conv as convm
from tests.test_conv_device import _geometry

GEOMETRIES = [
    # batch, Cin, H, W, Cout, kernel, stride, padding, dilation
    (8, 1, 9, 7, 8, 3, 1, 1, 1), (8, 5, 8, 8, 6, 3, 2, 1, 1), (16, 40, 5, 3, 33, 1, 1, 0, 1),
    (8, 3, 11, 9, 4, 5, 2, 2, 1), (8, 7, 7, 7, 9, (3, 2), (1, 2), (0, 1), 1),
    (8, 2, 9, 9, 5, 3, 1, 2, 2), (24, 2, 4, 4, 3, 2, 2, 0, 1),
    # four tiles of a position's images, B read as one job a group (sim.models.conv.b_group)
    (32, 3, 6, 5, 6, 3, 2, 1, 1)]


def _operands(rng, g):
    w = (rng.standard_normal((g.out_channels, g.channels, *g.kernel)) * 0.3).astype(
        np.float32)
    qs, es = zip(*(bfp.quantize_tiles(m) for m in convm.weight_stack(w)), strict=True)
    x = (rng.standard_normal((g.channels, g.positions))
         * 2.0 ** rng.integers(-3, 3, (g.channels, 1))).astype(np.float32)
    return (np.stack(qs), np.stack(es)), bfp.quantize_tiles(x)


def _deltas(rng, g):
    return bfp.quantize_tiles(rng.standard_normal((g.out_channels, g.out_positions))
                              .astype(np.float32))


def _stored_mask(dev, stored):
    """A ReLU mask on ``dev`` that is ``stored``: ReLU's of (+-1) @ I."""
    _, mask = dev.bfp_gemm(dev.quantize(np.where(stored, 1.0, -1.0).astype(np.float32)),
                           dev.quantize(np.eye(stored.shape[1], dtype=np.float32)), relu=True)
    return mask


@pytest.fixture(scope="module")
def rtl():
    return Device("rtl", rows=8, cols=8, data_width=64, depth=64, block=4, k_blocks=True,
                  epilogue=True, sgd=True, conv=True, unfold=True)


def test_features(rtl):
    info = rtl.driver.info
    assert info.conv_forward and info.conv_backward_data and info.conv_weight_grad
    assert info.pool_forward and info.pool_backward
    assert not info.conv and not info.pool and not info.add


@pytest.mark.parametrize("spec", GEOMETRIES)
def test_forward_float32_bit_exact(rtl, spec):
    """A float32 C: the reference's bits."""
    g = _geometry(spec)
    rng = np.random.default_rng(sum(map(hash, map(str, spec))) % 2**32)
    (qw, ew), (qx, ex) = _operands(rng, g)
    want = convm.conv2d_forward(qx, ex, qw, ew, g)
    got = rtl.conv2d(rtl.bfp_tensor(qx, ex), rtl.bfp_stack(qw, ew), g, out="float32")
    np.testing.assert_array_equal(got.numpy().view(np.uint32), want.view(np.uint32))


@pytest.mark.parametrize("spec", GEOMETRIES)
def test_backward_data_float32_bit_exact(rtl, spec):
    """The deltas through the rotated kernel, as float32: the reference's bits."""
    g = _geometry(spec)
    rng = np.random.default_rng(sum(map(hash, map(str, spec))) % 2**32 + 2)
    (qw, ew), _ = _operands(rng, g)
    qd, ed = _deltas(rng, g)
    want = convm.conv2d_backward_data(qd, ed, qw, ew, g)
    got = rtl.conv2d_backward_data(rtl.bfp_tensor(qd, ed), rtl.bfp_stack(qw, ew), g,
                                   out="float32")
    np.testing.assert_array_equal(got.numpy().view(np.uint32), want.view(np.uint32))


@pytest.mark.parametrize("spec", GEOMETRIES[1:3])
def test_backward_data_through_a_mask_matches_golden(rtl, spec):
    """Backward-data through a stored ReLU mask, quantised to BFP8: the golden backend's
    mantissas and exponents."""
    g = _geometry(spec)
    rng = np.random.default_rng(sum(map(hash, map(str, spec))) % 2**32 + 3)
    (qw, ew), _ = _operands(rng, g)
    qd, ed = _deltas(rng, g)
    stored = rng.random((g.channels, g.positions)) < 0.5
    out = []
    for dev in (rtl, Device("golden")):
        mask = _stored_mask(dev, stored)
        y = dev.conv2d_backward_data(dev.bfp_tensor(qd, ed), dev.bfp_stack(qw, ew), g,
                                     mask_in=mask)
        out.append((y.mantissas(), y.exponents()))
    for got, want in zip(*out, strict=True):
        np.testing.assert_array_equal(got, want)


#: Weight gradients: batches of a multiple of the tile size; output channels of the rows,
#: and not (3, 10: a tile of each offset's matrix cut by its edge; 40: its tile grid two
#: rows, the second cut).
WG_GEOMETRIES = [
    (32, 1, 5, 5, 8, 3, 1, 1, 1), (32, 5, 6, 6, 8, 3, 2, 1, 1), (64, 40, 3, 3, 16, 1, 1, 0, 1),
    (32, 3, 7, 5, 8, 5, 2, 2, 1), (32, 7, 5, 5, 24, (3, 2), (1, 2), (0, 1), 1),
    (32, 2, 6, 6, 8, 3, 1, 2, 2), (32, 3, 5, 5, 3, 3, 1, 1, 1), (32, 4, 4, 4, 10, 3, 1, 1, 1),
    (32, 2, 4, 4, 40, 3, 1, 1, 1)]


@pytest.mark.parametrize("spec", WG_GEOMETRIES)
def test_weight_grad_float32_bit_exact(rtl, spec):
    """D * im2col(X)^T as a float32 stack: the reference's bits."""
    g = _geometry(spec)
    rng = np.random.default_rng(sum(map(hash, map(str, spec))) % 2**32 + 4)
    _, (qx, ex) = _operands(rng, g)
    qd, ed = _deltas(rng, g)
    want = convm.conv2d_weight_grad(qd, ed, qx, ex, g)
    got = rtl.conv2d_weight_grad(rtl.bfp_tensor(qd, ed), rtl.bfp_tensor(qx, ex), g)
    np.testing.assert_array_equal(got.numpy().view(np.uint32),
                                  want.reshape(got.shape).view(np.uint32))


@pytest.mark.parametrize("spec, inner", [((32, 1, 9, 7, 8, 3, 1, 1, 1), True),
                                         ((32, 7, 7, 7, 9, (3, 2), (1, 2), (0, 1), 1), True),
                                         ((32, 16, 6, 6, 16, 3, 1, 1, 1), False)])
def test_weight_grad_cycles_follow_the_model(rtl, spec, inner):
    """A weight gradient's cycles on the RTL within 12 % of the performance model's, its
    kernel offsets walked inside each K chunk (A loaded once a chunk) where
    :func:`firmware.spec.hw.wg_offsets_inner` says, else as an outer loop of GEMMs."""
    from firmware.spec.hw import wg_offsets_inner
    g = _geometry(spec)
    assert wg_offsets_inner(g.out_channels, g.channels, len(g.offsets), rows=8, cols=8,
                            block=4) == inner
    rng = np.random.default_rng(1)
    _, (qx, ex) = _operands(rng, g)
    qd, ed = _deltas(rng, g)
    cycles = []
    for dev in (rtl, Device("model", rows=8, cols=8, data_width=64, depth=64, block=4,
                            epilogue=True)):
        dev.conv2d_weight_grad(dev.bfp_tensor(qd, ed), dev.bfp_tensor(qx, ex), g)
        cycles.append(dev.stats["cycles"])
    assert cycles[0] == pytest.approx(cycles[1], rel=0.12)


@pytest.mark.parametrize("spec, mode", [((32, 1, 8, 8, 16, 3, 1, 1, 1), 1),
                                        ((32, 1, 8, 8, 8, 3, 1, 1, 1), 1),
                                        ((32, 16, 6, 6, 16, 3, 1, 1, 1), 1),
                                        ((32, 8, 6, 6, 8, 3, 1, 1, 1), 2),
                                        ((32, 1, 8, 8, 16, 3, 1, 1, 1), "pool")])
def test_convolution_cycles_follow_the_model(rtl, spec, mode):
    """A forward or backward-data convolution's cycles on the RTL within 12 % of the
    performance model's, where the walker's cycles bound them (one input channel: a step a
    tile a kernel offset, each tile's command and B load and each exponent byte the
    walker's to offer) and where the array's do; and a forward one with ReLU and a max
    pool into BFP8, whose C rows go out a byte an element."""
    g = _geometry(spec)
    rng = np.random.default_rng(5)
    (qw, ew), (qx, ex) = _operands(rng, g)
    qd, ed = _deltas(rng, g)
    pool = convm.Pooling("max", convm.pool_geometry(g.batch, g.out_channels, g.height,
                                                    g.width, 2))
    cycles = []
    for dev in (rtl, Device("model", rows=8, cols=8, data_width=64, depth=64, block=4,
                            epilogue=True)):
        w = dev.bfp_stack(qw, ew)
        if mode == "pool":
            dev.conv2d(dev.bfp_tensor(qx, ex), w, g, relu=True, pool=pool)
        elif mode == 1:
            dev.conv2d(dev.bfp_tensor(qx, ex), w, g, out="float32")
        else:
            dev.conv2d_backward_data(dev.bfp_tensor(qd, ed), w, g, out="float32")
        cycles.append(dev.stats["cycles"])
    assert cycles[0] == pytest.approx(cycles[1], rel=0.12), cycles


@pytest.mark.parametrize("spec", [(32, 1, 5, 5, 32, 3, 1, 1, 1), (32, 5, 6, 6, 32, 3, 2, 1, 1),
                                  (32, 40, 3, 3, 64, 1, 1, 0, 1), (32, 1, 6, 6, 16, 3, 1, 1, 1),
                                  (32, 12, 3, 3, 10, 1, 1, 0, 1), (32, 3, 4, 4, 40, 3, 1, 1, 1)])
def test_sgd_update_of_a_stack_matches_golden(rtl, spec):
    """conv2d_sgd_update, stochastic (each offset's matrix its own tile grid, whether or not
    the output channels are a multiple of 32): the golden backend's mantissas and
    exponents."""
    g = _geometry(spec)
    rng = np.random.default_rng(sum(map(hash, map(str, spec))) % 2**32 + 5)
    (qw, ew), (qx, ex) = _operands(rng, g)
    qd, ed = _deltas(rng, g)
    out = []
    for dev in (rtl, Device("golden")):
        stack = dev.bfp_stack(qw, ew)
        dev.conv2d_sgd_update(dev.bfp_tensor(qd, ed), dev.bfp_tensor(qx, ex), stack, g,
                              lr=0.05, weight_decay=1e-3, rounding="stochastic", seed=7)
        out.append((stack.mantissas(), stack.exponents()))
    for got, want in zip(*out, strict=True):
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("cout, size", [(16, 5), (10, 3), (40, 2)])
def test_sgd_update_of_a_bias_matches_golden(rtl, cout, size):
    """A bias's step (a float32 row): the weight gradient of a row of ones against the
    deltas, a 1 x 1 convolution with one output channel, as ResidentConvNet runs it."""
    rng = np.random.default_rng(cout)
    g = convm.ConvGeometry(32, cout, size, size, 1, 1)
    qd, ed = bfp.quantize_tiles(rng.standard_normal((cout, g.positions)).astype(np.float32))
    ones = (np.full((1, g.positions), 64, np.int8),
            np.full(bfp.tile_grid((1, g.positions)), -6, np.int8))
    bias = rng.standard_normal((1, cout)).astype(np.float32)
    out = []
    for dev in (rtl, Device("golden")):
        b = dev.tensor(bias)
        dev.conv2d_sgd_update(dev.bfp_tensor(*ones), dev.bfp_tensor(qd, ed), b, g, lr=0.05,
                              weight_decay=1e-3)
        out.append(b.numpy())
    np.testing.assert_array_equal(out[0].view(np.uint32), out[1].view(np.uint32))


@pytest.mark.parametrize("spec", GEOMETRIES[:3])
def test_forward_epilogue_matches_golden(rtl, spec):
    """A bias per output channel and ReLU, quantised stochastically: the golden backend's
    mantissas, exponents and mask."""
    g = _geometry(spec)
    rng = np.random.default_rng(sum(map(hash, map(str, spec))) % 2**32 + 1)
    (qw, ew), (qx, ex) = _operands(rng, g)
    bias = rng.standard_normal(g.out_channels).astype(np.float32)
    gold = Device("golden")
    out = []
    for dev in (rtl, gold):
        y, mask = dev.conv2d(dev.bfp_tensor(qx, ex), dev.bfp_stack(qw, ew), g, bias=bias,
                             relu=True, rounding="stochastic", seed=5)
        out.append((y.mantissas(), y.exponents(), mask.numpy()))
    for got, want in zip(*out, strict=True):
        np.testing.assert_array_equal(got, want)


#: Forward convolutions max-pooled on the write path: (convolution, window); the batch
#: of one tile (8) or two (16); square and oblong windows; 40 channels (two tile blocks of
#: rows, the second cut).
POOL_GEOMETRIES = [
    ((8, 1, 8, 8, 8, 3, 1, 1, 1), 2), ((16, 3, 6, 6, 5, 3, 1, 1, 1), 2),
    ((8, 2, 6, 9, 12, 3, 1, 1, 1), (2, 3)), ((8, 4, 9, 9, 40, 3, 1, 1, 1), 3),
    ((8, 3, 7, 6, 6, 3, 2, 2, 1), (1, 2))]


@pytest.mark.parametrize("spec, window", POOL_GEOMETRIES)
def test_forward_max_pool_matches_golden(rtl, spec, window):
    """Bias, ReLU and a max pool, quantised stochastically: the golden backend's mantissas,
    exponents, mask (at the pool's input) and argmax."""
    g = _geometry(spec)
    rng = np.random.default_rng(sum(map(hash, map(str, spec))) % 2**32 + 6)
    (qw, ew), (qx, ex) = _operands(rng, g)
    bias = rng.standard_normal(g.out_channels).astype(np.float32)
    pool = convm.Pooling("max", convm.pool_geometry(g.batch, g.out_channels, g.out_height,
                                                    g.out_width, window))
    out = []
    for dev in (rtl, Device("golden")):
        y, mask, arg = dev.conv2d(dev.bfp_tensor(qx, ex), dev.bfp_stack(qw, ew), g,
                                  bias=bias, relu=True, pool=pool, rounding="stochastic",
                                  seed=5)
        out.append((y.mantissas(), y.exponents(), mask.numpy(), arg.numpy()))
    for got, want in zip(*out, strict=True):
        np.testing.assert_array_equal(got, want)


#: Backward-data convolutions routed back through a max pool: (convolution, window); the
#: batch one tile block; 40 input channels (the second block of rows cut).
@pytest.mark.parametrize("spec, mode", [((32, 8, 5, 5, 16, 5, 1, 0, 1), 2),
                                        ((32, 16, 4, 4, 16, 3, 1, 1, 1), 1),
                                        ((32, 8, 2, 2, 8, 3, 1, 1, 1), 2),
                                        ((32, 6, 6, 5, 8, 3, 2, 1, 1), 2)])
def test_skipped_offsets_follow_the_model(rtl, spec, mode):
    """The kernel offsets no tile of a block reads B at are skipped (a fully connected
    layer's backward-data descriptor walks three of its 25 offsets): the array's active
    cycles on the RTL are the performance model's compute cycles
    (:func:`sim.models.conv.walked_offsets`), fewer than every offset's, and the results
    are the golden model's."""
    g = _geometry(spec)
    rng = np.random.default_rng(3)
    (qw, ew), (qx, ex) = _operands(rng, g)
    qd, ed = _deltas(rng, g)
    active, results = [], []
    for dev in (rtl, Device("model", rows=8, cols=8, data_width=64, depth=64, block=4,
                            epilogue=True)):
        w = dev.bfp_stack(qw, ew)
        y = (dev.conv2d(dev.bfp_tensor(qx, ex), w, g, out="float32") if mode == 1 else
             dev.conv2d_backward_data(dev.bfp_tensor(qd, ed), w, g, out="float32"))
        active.append(dev.stats["active_cycles"])
        results.append(y.numpy().view(np.uint32))
    m, n, _, _ = g.implicit_gemm(mode)
    every = -(-m // 8) * (n // 8) * sum(g.k_runs(mode))
    assert active[0] == active[1] < every
    np.testing.assert_array_equal(*results)


def _random_geometry(rng):
    """A small convolution whose output has positions: batch a multiple of the columns."""
    while True:
        k, s, p = int(rng.integers(1, 4)), int(rng.integers(1, 3)), int(rng.integers(0, 3))
        h, w = int(rng.integers(2, 8)), int(rng.integers(2, 8))
        if p < k and h + 2 * p >= k and w + 2 * p >= k:
            return convm.ConvGeometry(32 * int(rng.integers(1, 3)), int(rng.integers(1, 13)),
                                      h, w, int(rng.integers(1, 13)), k, stride=s, padding=p)


@pytest.mark.parametrize("seed", range(6))
def test_walks_match_the_model_on_random_convolutions(rtl, seed):
    """Which kernel offsets a forward or backward-data block walks is decided twice, by
    the walker's probe and by the model (:func:`sim.models.conv.walked_offsets`): on random
    geometries, in each mode (a weight gradient's too), the array's active cycles on the
    RTL are the model's compute cycles, and the results agree. (A weight gradient's
    offsets inside each chunk or as GEMMs compute alike; their cycles differ, which
    :func:`test_weight_grad_cycles_follow_the_model` holds.)"""
    rng = np.random.default_rng(100 + seed)
    g = _random_geometry(rng)
    (qw, ew), (qx, ex) = _operands(rng, g)
    qd, ed = _deltas(rng, g)
    model = Device("model", rows=8, cols=8, data_width=64, depth=64, block=4, epilogue=True)
    for mode in (1, 2, 3):
        active, results = [], []
        for dev in (rtl, model):
            if mode == 1:
                y = dev.conv2d(dev.bfp_tensor(qx, ex), dev.bfp_stack(qw, ew), g,
                               out="float32")
            elif mode == 2:
                y = dev.conv2d_backward_data(dev.bfp_tensor(qd, ed), dev.bfp_stack(qw, ew),
                                             g, out="float32")
            else:
                y = dev.conv2d_weight_grad(dev.bfp_tensor(qd, ed), dev.bfp_tensor(qx, ex), g)
            active.append(dev.stats["active_cycles"])
            results.append(np.asarray(y.numpy() if hasattr(y, "numpy") else y))
        assert active[0] == active[1], (g, mode, active)
        np.testing.assert_array_equal(*results)


UNPOOL_GEOMETRIES = [
    ((32, 8, 4, 4, 6, 3, 1, 1, 1), 2), ((32, 40, 3, 2, 5, 3, 1, 1, 1), (2, 3)),
    ((32, 3, 2, 2, 12, 1, 1, 0, 1), 3)]


def _unpool_operands(rng, g, window):
    """A backward-data convolution's weights and deltas, a max pool of ``window`` whose
    output is its input, and the pool's argmax."""
    (qw, ew), _ = _operands(rng, g)
    qd, ed = _deltas(rng, g)
    ph, pw = (window, window) if isinstance(window, int) else window
    pool = convm.Pooling("max", convm.pool_geometry(g.batch, g.channels, g.height * ph,
                                                    g.width * pw, window))
    argmax = rng.integers(0, ph * pw, (g.channels, g.positions)).astype(np.uint8)
    return (qw, ew), (qd, ed), pool, argmax


@pytest.mark.parametrize("spec, window", UNPOOL_GEOMETRIES)
def test_backward_data_unpool_matches_golden(rtl, spec, window):
    """The deltas routed back through a max pool's argmax and masked by ReLU's mask at the
    pool's input, quantised stochastically there: the golden backend's mantissas and
    exponents."""
    from firmware.runtime.epilogue import MaskTensor
    g = _geometry(spec)
    rng = np.random.default_rng(sum(map(hash, map(str, spec))) % 2**32 + 7)
    (qw, ew), (qd, ed), pool, argmax = _unpool_operands(rng, g, window)
    stored = rng.random((g.channels, pool.geometry.positions)) < 0.7
    out = []
    for dev in (rtl, Device("golden")):
        mask = MaskTensor(dev.tensor(bfp.pack_mask(stored)), stored.shape)
        y = dev.conv2d_backward_data(dev.bfp_tensor(qd, ed), dev.bfp_stack(qw, ew), g,
                                     mask_in=mask, unpool=pool, argmax=dev.tensor(argmax),
                                     rounding="stochastic", seed=9)
        out.append((y.mantissas(), y.exponents()))
    for got, want in zip(*out, strict=True):
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("spec, window", [((32, 8, 4, 4, 6, 3, 1, 1, 1), 2),
                                          ((32, 40, 3, 2, 5, 3, 1, 1, 1), (2, 3))])
def test_backward_data_unpool_computes_once(rtl, spec, window):
    """A backward-data convolution through a max pool computes its GEMM once: each block's
    sums are kept, and each phase of the window after the first adds one step of zeros a
    tile and writes them. The RTL's active cycles are the performance model's compute
    cycles (the GEMM's and a step a tile a phase after the first), its cycles within a
    third of the model's and under twice those of the same GEMM without the pool."""
    g = _geometry(spec)
    (qw, ew), (qd, ed), pool, argmax = _unpool_operands(np.random.default_rng(7), g, window)
    phases = pool.geometry.kernel[0] * pool.geometry.kernel[1]
    runs = []
    for dev in (rtl, Device("model", rows=8, cols=8, data_width=64, depth=64, block=4,
                            epilogue=True)):
        w, d = dev.bfp_stack(qw, ew), dev.bfp_tensor(qd, ed)
        dev.conv2d_backward_data(d, w, g, unpool=pool, argmax=dev.tensor(argmax),
                                 rounding="stochastic", seed=9)
        pooled = (dev.stats["cycles"], dev.stats["active_cycles"])
        dev.conv2d_backward_data(d, w, g, out="float32")
        runs.append((*pooled, dev.stats["cycles"], dev.stats["active_cycles"]))
    (rc, ra, plain, plain_a), (mc, ma, _, _) = runs
    tiles = -(-g.channels // 8) * (g.positions // 8)
    assert ra == ma == plain_a + (phases - 1) * tiles
    assert mc == pytest.approx(rc, rel=1 / 3)
    assert rc < 2 * plain


def _step_matches_golden(rtl, net, x, y, monkeypatch):
    """One ResidentConvNet step of ``net`` on the batch ``x``, ``y`` on the RTL and on the
    golden backend, with the host's im2col, col2im and pooling refused: the same loss,
    weights and biases bit for bit."""
    from firmware.ml.resident_conv import ResidentConvNet
    from tests.test_resident_conv import _no_host_layout, _same_params
    _no_host_layout(monkeypatch)
    runs = []
    for dev in (rtl, Device("golden")):
        r = ResidentConvNet(net, x.shape[1:], dev, seed=5, lr=0.05, weight_decay=1e-4)
        runs.append((r.step(x, y), r.params))
    (la, pa), (lb, pb) = runs
    assert la == lb
    _same_params(pa, pb)


def test_resident_cnn_step_matches_golden(rtl, monkeypatch):
    """A training step of a fashion-cnn-shaped network (two convolutions with ReLU and 2 x 2
    max pools, two fully connected layers) on 8 x 8 images, batch 32, with the whole step on
    the RTL: the golden backend's loss, weights and biases bit for bit; no host im2col,
    col2im or pooling."""
    from firmware.ml import nn
    rng = np.random.default_rng(11)
    net = nn.Network([nn.Conv2d(1, 8, 3, rng, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                      nn.Conv2d(8, 8, 3, rng, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                      nn.Flatten(), nn.Linear(8 * 2 * 2, 16, rng), nn.ReLU(),
                      nn.Linear(16, 10, rng)])
    x = rng.standard_normal((32, 1, 8, 8)).astype(np.float32)
    y = rng.integers(0, 10, 32)
    _step_matches_golden(rtl, net, x, y, monkeypatch)


@pytest.mark.slow
def test_fashion_cnn_step_matches_golden(rtl, monkeypatch):
    """A training step of fashion-cnn itself (firmware.ml.train's: 1 x 28 x 28 images,
    convolutions 1 -> 16 and 16 -> 32 with ReLU and 2 x 2 max pools, 1568 -> 64 -> 10), batch
    32, with the whole step on the RTL: the golden backend's loss, weights and biases bit
    for bit; no host im2col, col2im or pooling. (A few minutes in the simulator.)"""
    from firmware.ml import train
    rng = np.random.default_rng(12)
    net = train.TASKS["fashion-cnn"].make(rng)
    x = rng.standard_normal((32, 1, 28, 28)).astype(np.float32)
    y = rng.integers(0, 10, 32)
    _step_matches_golden(rtl, net, x, y, monkeypatch)


def test_padded_batch_beyond_the_positions_is_named(rtl):
    """A first layer over its input unfolded pads 80 images of 28 x 28 to 96: 75264
    positions, beyond the RTL's 65535; refused naming the padding, before anything runs."""
    from firmware.ml import nn
    from firmware.ml.resident_conv import ResidentConvNet
    rng = np.random.default_rng(2)
    net = nn.Network([nn.Conv2d(1, 8, 3, rng, padding=1), nn.ReLU(), nn.MaxPool2d(4),
                      nn.Flatten(), nn.Linear(8 * 7 * 7, 10, rng)])
    r = ResidentConvNet(net, (1, 28, 28), rtl, record=False)
    assert r.stages[0].unfold is not None
    with pytest.raises(ValueError, match="x: 80 images, padded to 96 .* 75264 input positions"):
        r.forward(np.zeros((80, 1, 28, 28), np.float32))


def test_runtime_refuses_what_the_build_lacks(rtl):
    """Batches not a multiple of the columns (forward, backward-data) or of the tile size
    (weight gradient), SGD of a float32 C of more than one row, pools the write path does
    not take, a bias stepped by the weight gradient's descriptor: named before anything
    runs."""
    rng = np.random.default_rng(3)

    def tensors(spec):
        g = _geometry(spec)
        (qw, ew), (qx, ex) = _operands(rng, g)
        d = rtl.bfp_tensor(*_deltas(rng, g))
        return g, d, rtl.bfp_tensor(qx, ex), rtl.bfp_stack(qw, ew)

    g, d, x, w = tensors((4, 2, 5, 5, 3, 3, 1, 1, 1))
    with pytest.raises(ValueError, match="batch 4: .* forward .* multiple of its 8 columns"):
        rtl.conv2d(x, w, g)
    with pytest.raises(ValueError, match="batch 4: .* backward-data .* multiple of its 8"):
        rtl.conv2d_backward_data(d, w, g)
    g, d, x, w = tensors((8, 2, 5, 5, 8, 3, 1, 1, 1))
    with pytest.raises(ValueError, match="batch 8: .* weight gradients .* multiple of 32"):
        rtl.conv2d_weight_grad(d, x, g)
    g, d, x, w = tensors((8, 2, 5, 5, 3, 3, 1, 1, 1))
    for kind, window, stride in (("avg", 2, 2), ("max", 2, 1), ("max", 3, 3)):
        pool = convm.Pooling(kind, convm.pool_geometry(8, 3, 5, 5, window, stride))
        with pytest.raises(RuntimeError, match="max pool after a forward convolution"):
            rtl.conv2d(x, w, g, relu=True, pool=pool)
    pool = convm.Pooling("max", convm.pool_geometry(8, 3, 5, 5, 5))
    with pytest.raises(RuntimeError, match="only into a BFP8 output"):
        rtl.conv2d(x, w, g, relu=True, pool=pool, out="float32")
    unpool = convm.Pooling("max", convm.pool_geometry(8, 2, 10, 10, 2))
    with pytest.raises(ValueError, match="batch 8: .* back through a max pool .* of 32"):
        rtl.conv2d_backward_data(d, w, g, unpool=unpool)
    g, d, x, w = tensors((32, 2, 3, 3, 1, 3, 1, 1, 1))
    with pytest.raises(RuntimeError, match="float32 C of one row .* not 9 rows"):
        rtl.conv2d_sgd_update(d, x, rtl.tensor(np.zeros((9, 2), np.float32)), g, lr=0.1)
    with pytest.raises(RuntimeError, match=r"does not step a bias .*CONFIG_FEATURES.BIAS_GRAD"):
        rtl.conv2d_sgd_update(d, x, rtl.tensor(np.zeros((9, 2), np.float32)), g, lr=0.1,
                              bias=rtl.tensor(np.zeros((1, 1), np.float32)))


def test_hardware_refuses(rtl):
    """Descriptors the runtime would not send: a weight gradient of a batch not a multiple
    of the tile size, or with SGD of a float32 stack of more than one row (a 3 x 3 kernel),
    a batch not a multiple of the columns, no tile exponents, a transpose, SGD of a forward
    convolution, a bias gradient (BIAS_GRAD), a pool into a float32 C, an average pool,
    windows not their stride or with a stored mask (UNSUPPORTED at enqueue), windows not
    tiling the output;
    a dilated kernel beyond the padded image (UNSUPPORTED once derived); a zero stride
    (ZERO_DIMENSION)."""
    conv = {"fields": {"MODE": 1, "KERNEL_H": 3, "KERNEL_W": 3, "STRIDE_H": 1,
                       "STRIDE_W": 1, "DILATION_H": 1, "DILATION_W": 1},
            "height": 5, "width": 5, "channels": 2, "out_channels": 3, "batch": 8}
    tiles = {"A_TILES": 1, "B_TILES": 1}
    pool = {"fields": {"MODE": 1, "KERNEL_H": 2, "KERNEL_W": 2, "STRIDE_H": 2,
                       "STRIDE_W": 2}, "height": 3, "width": 3}
    for code, fields, extra, flags, epi in (
            (ErrorCode.UNSUPPORTED, {"MODE": 3}, {"batch": 16, "out_channels": 8}, {}, tiles),
            (ErrorCode.UNSUPPORTED, {"MODE": 3}, {"batch": 32, "out_channels": 1}, {},
             dict(tiles, SGD=1)),
            (ErrorCode.UNSUPPORTED, {}, {"batch": 12}, {}, tiles),
            (ErrorCode.UNSUPPORTED, {}, {}, {}, {}),
            (ErrorCode.UNSUPPORTED, {}, {}, {"TRANSPOSE_B": 1}, tiles),
            (ErrorCode.UNSUPPORTED, {}, {}, {}, dict(tiles, SGD=1, BFP8=1)),
            (ErrorCode.UNSUPPORTED, {"ADD": 1}, {}, {}, tiles),
            (ErrorCode.UNSUPPORTED, {"MODE": 3, "BIAS_GRAD": 1}, {"batch": 32}, {}, tiles),
            (ErrorCode.UNSUPPORTED, {"DILATION_H": 3}, {}, {}, tiles),
            (ErrorCode.ZERO_DIMENSION, {"STRIDE_H": 0}, {}, {}, tiles)):
        c = dict(conv, fields=dict(conv["fields"], **fields), **extra)
        with pytest.raises(AcceleratorError) as e:
            rtl.driver.run(dict(m=1, n=1, k=1, flags=flags, epilogue=epi, conv=c))
        assert e.value.code is code, (fields, extra, flags, epi)
    # pooling: a float32 C, an average pool, windows not their stride, windows not tiling
    # the output (3 x 3), a stored mask
    bfp8 = dict(tiles, BFP8=1)
    # and a pool's backward pass after a forward convolution, or on a batch not a multiple
    # of 32
    back = dict(conv, fields=dict(conv["fields"], MODE=2))
    for fields, epi, c in (({}, tiles, conv), ({"KIND": 1}, bfp8, conv),
                           ({"STRIDE_H": 1}, bfp8, conv), ({}, bfp8, conv),
                           ({}, dict(bfp8, MASK_IN=1), conv), ({"MODE": 2}, bfp8, conv),
                           ({"MODE": 2}, bfp8, back)):
        with pytest.raises(AcceleratorError) as e:
            rtl.driver.run(dict(m=1, n=1, k=1, flags={}, epilogue=epi, conv=c,
                                pool=dict(pool, fields=dict(pool["fields"], **fields))))
        assert e.value.code is ErrorCode.UNSUPPORTED, (fields, epi, c["fields"]["MODE"])
    # and the engine runs again afterwards
    g = _geometry(GEOMETRIES[0])
    (qw, ew), (qx, ex) = _operands(np.random.default_rng(9), g)
    got = rtl.conv2d(rtl.bfp_tensor(qx, ex), rtl.bfp_stack(qw, ew), g, out="float32")
    np.testing.assert_array_equal(got.numpy(), convm.conv2d_forward(qx, ex, qw, ew, g))


UNFOLDS = [
    # batch, Cin, H, W, Cout (unused), kernel, stride, padding, dilation
    (32, 1, 6, 5, 1, 3, 1, 1, 1), (32, 3, 5, 4, 1, 3, 1, 1, 1),
    (64, 2, 7, 6, 1, (3, 2), (2, 3), (1, 2), 1), (32, 4, 5, 5, 1, 3, 1, 0, 2)]


@pytest.mark.parametrize("spec", UNFOLDS)
def test_unfold_matches_golden(rtl, spec):
    """Device.quantize(unfold=g) on the RTL (a quantise-only descriptor with DESC_CONV.MODE
    1: the reader walks the input unfolded): mantissas and exponents bit for bit
    :func:`sim.models.bfp.quantize_tiles` of :func:`sim.models.conv.unfold`, stochastic
    rounding's seed included. Its cycles are at most 15 % over those of quantising the
    unfolded matrix itself (a set-up, and rows read at scattered addresses; under them
    where padding rows are skipped, not read), and within 20 % of the performance
    model's: :func:`firmware.runtime.perfmodel.predict_quantize` counts whole units where
    these matrices of few rows overlap a unit's reads with the one before's write-back
    only in part (on the plain quantiser's matrices of 9 or 17 rows its error is 10 to
    15 %, of whole tile rows under 1 %)."""
    g = _geometry(spec)
    rng = np.random.default_rng(g.positions + g.channels)
    x = (rng.standard_normal((g.channels, g.positions))
         * 2.0 ** rng.integers(-6, 6, (g.channels, 1))).astype(np.float32)
    seed = int(rng.integers(0, 2**63))
    want_q, want_e = bfp.quantize_tiles(convm.unfold(x, g), rounding="stochastic", seed=seed)
    unfolded, plain = [], []
    for dev in (rtl, Device("model", rows=8, cols=8, data_width=64, depth=64, block=4,
                            epilogue=True)):
        got = dev.quantize(x, rounding="stochastic", seed=seed, unfold=g)
        np.testing.assert_array_equal(got.mantissas(), want_q)
        np.testing.assert_array_equal(got.exponents(), want_e)
        unfolded.append(dev.stats["cycles"])
        dev.quantize(convm.unfold(x, g), rounding="stochastic", seed=seed)
        plain.append(dev.stats["cycles"])
    print("cycles, unfolded and plain (rtl, model):", unfolded, plain)
    assert rtl.driver.info.unfold
    assert unfolded[0] <= 1.15 * plain[0], (unfolded, plain)
    assert unfolded[1] == pytest.approx(unfolded[0], rel=0.2), (unfolded, plain)


def test_unfold_refused(rtl):
    """What the runtime refuses (ValueError or TypeError naming the argument) and what the
    hardware refuses (UNSUPPORTED): a batch not whole tile blocks, another mode, tile
    exponent flags, ReLU, pooling."""
    g = _geometry((32, 1, 6, 5, 1, 3, 1, 1, 1))
    x = np.zeros((1, g.positions), np.float32)
    with pytest.raises(ValueError, match="unfold: the batch"):
        rtl.quantize(np.zeros((1, 6 * 5 * 8), np.float32), unfold=_geometry(
            (8, 1, 6, 5, 1, 3, 1, 1, 1)))
    with pytest.raises(TypeError, match="input matrix of unfold's geometry"):
        rtl.quantize(np.zeros((2, g.positions), np.float32), unfold=g)
    with pytest.raises(TypeError, match="geometry must be"):
        rtl.quantize(x, unfold=(3, 3))
    conv = {"fields": {"MODE": 1, "KERNEL_H": 3, "KERNEL_W": 3, "STRIDE_H": 1,
                       "STRIDE_W": 1, "DILATION_H": 1, "DILATION_W": 1},
            "height": 5, "width": 5, "channels": 1, "out_channels": 1, "batch": 32}
    only = {"QUANTIZE_ONLY": 1, "BFP8": 1}
    pool = {"fields": {"MODE": 1, "KERNEL_H": 1, "KERNEL_W": 1, "STRIDE_H": 1,
                       "STRIDE_W": 1}, "height": 5, "width": 5}
    for fields, extra, epi, pooled in (
            ({}, {"batch": 16}, only, None), ({"MODE": 2}, {}, only, None),
            ({}, {}, dict(only, A_TILES=1, B_TILES=1), None), ({}, {}, dict(only, RELU=1), None),
            ({}, {}, {"QUANTIZE_ONLY": 1}, None), ({"ADD": 1}, {}, only, None),
            ({}, {}, only, pool)):
        c = dict(conv, fields=dict(conv["fields"], **fields), **extra)
        for dev in (rtl, Device("model", rows=8, cols=8, epilogue=True)):
            with pytest.raises(AcceleratorError) as e:
                dev.driver.run(dict(m=1, n=1, k=1, flags={}, epilogue=epi, conv=c,
                                    **({"pool": pooled} if pooled else {})))
            assert e.value.code is ErrorCode.UNSUPPORTED, (dev.backend, fields, extra, epi)
    # more than 65535 positions, the checker's limit on the RTL: named before anything runs
    # (the hardware's DIMENSION_TOO_LARGE otherwise), a forward convolution's too
    wide = _geometry((128, 1, 24, 24, 8, 3, 1, 1, 1))
    with pytest.raises(ValueError, match=r"73728 input positions .* at most 113 images"):
        rtl.quantize(np.zeros((1, wide.positions), np.float32), unfold=wide)
    (qw, ew), (qx, ex) = _operands(np.random.default_rng(1), wide)
    with pytest.raises(ValueError, match="exceed 65535"):
        rtl.conv2d(rtl.bfp_tensor(qx, ex), rtl.bfp_stack(qw, ew), wide, out="float32")
    with pytest.raises(AcceleratorError) as e:
        rtl.driver.run(dict(m=1, n=1, k=1, flags={}, epilogue=only,
                            conv=dict(conv, height=24, width=24, batch=128)))
    assert e.value.code is ErrorCode.DIMENSION_TOO_LARGE
    # the input's extent, Cin rows of 4 H*W*batch bytes, is checked: one float short of it
    # at the window's end is OUT_OF_WINDOW
    from firmware.runtime.convolution import _conv_fields
    from firmware.runtime.epilogue import _empty_bfp, _span
    for dev in (rtl, Device("model", rows=8, cols=8, data_width=64, epilogue=True)):
        out = _empty_bfp(dev, (9, g.out_positions))
        short = dev.tensor(np.zeros((1, g.positions - 2), np.float32))
        with pytest.raises(AcceleratorError) as e:
            dev.driver.run(dict(m=1, n=1, k=1, flags={}, a_addr=short.addr,
                                a_stride=short.stride, c_addr=out.q.addr, c_stride=out.q.stride,
                                c_exp_addr=out.exp.addr, conv=_conv_fields(g, 1), epilogue=only,
                                regions=[_span(t) for t in (out.q, out.exp, short)]))
        assert e.value.code is ErrorCode.OUT_OF_WINDOW, dev.backend


@pytest.mark.parametrize("argv, message", [
    (["--batch", "16"], "--batch must be a multiple of 32"),
    (["--size", "5"], "--size must be even"),
])
def test_conv_rtl_bench_bad_options_exit_2(argv, message, capsys):
    from sim.bench.conv_rtl import main
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2
    assert message in capsys.readouterr().err
