"""Convolutions as implicit-GEMM descriptors (``DESC_CONV``) on the functional accelerator
and the golden backend: forward and backward-data bit for bit
:func:`sim.models.conv.conv2d_forward` / :func:`sim.models.conv.conv2d_backward_data`
through :func:`sim.models.bfp.epilogue`, on random shapes (strides 1 and 2, padding 0 to 2,
kernels 1 x 1 to 5 x 5, odd sizes, one input channel); bad arguments named; descriptors the
model refuses."""

import numpy as np
import pytest

from firmware import Device
from firmware.runtime.device import AcceleratorError
from firmware.spec.regmap import ErrorCode
from sim.models import bfp
from sim.models import conv as convm

GEOMETRIES = [
    # batch, Cin, H, W, Cout, kernel, stride, padding, dilation
    (4, 1, 9, 7, 8, 3, 1, 1, 1), (3, 5, 8, 8, 6, 3, 2, 1, 1), (2, 40, 6, 5, 33, 1, 1, 0, 1),
    (5, 3, 11, 9, 4, 5, 2, 2, 1), (2, 7, 7, 7, 9, (3, 2), (1, 2), (0, 1), 1),
    (3, 2, 9, 9, 5, 3, 1, 2, 2)]


def _geometry(spec):
    n, cin, h, w, cout, k, s, p, d = spec
    return convm.ConvGeometry(n, cin, h, w, cout, k, stride=s, padding=p, dilation=d)


def _stack(rng, g):
    w = (rng.standard_normal((g.out_channels, g.channels, *g.kernel)) * 0.3).astype(
        np.float32)
    stack = convm.weight_stack(w)
    qs, es = zip(*(bfp.quantize_tiles(m) for m in stack), strict=True)
    return np.stack(qs), np.stack(es)


def _activations(rng, rows, cols):
    x = (rng.standard_normal((rows, cols)) * 2.0 ** rng.integers(-3, 3, (rows, 1))).astype(
        np.float32)
    return bfp.quantize_tiles(x)


@pytest.fixture(scope="module")
def model():
    return Device("model", rows=8, cols=8)


@pytest.mark.parametrize("spec", GEOMETRIES)
def test_forward_matches_golden_model(model, spec):
    """conv2d with a bias per output channel and ReLU, quantised stochastically: the model's
    mantissas, exponents and mask are the golden backend's and the reference's."""
    g = _geometry(spec)
    rng = np.random.default_rng(sum(map(hash, map(str, spec))) % 2**32)
    qw, ew = _stack(rng, g)
    qx, ex = _activations(rng, g.channels, g.positions)
    bias = rng.standard_normal(g.out_channels).astype(np.float32)
    ref = bfp.epilogue(convm.conv2d_forward(qx, ex, qw, ew, g), bias=bias, bias_axis="row",
                       relu=True, out="bfp8", rounding="stochastic", seed=11)
    for dev in (model, Device("golden")):
        y, mask = dev.conv2d(dev.bfp_tensor(qx, ex), dev.bfp_stack(qw, ew), g, bias=bias,
                             relu=True, rounding="stochastic", seed=11)
        np.testing.assert_array_equal(y.mantissas(), ref.q, err_msg=dev.backend)
        np.testing.assert_array_equal(y.exponents(), ref.exp, err_msg=dev.backend)
        np.testing.assert_array_equal(mask.numpy(), ref.mask, err_msg=dev.backend)
    assert model.stats["macs"] == g.implicit_gemm(1)[3]


@pytest.mark.parametrize("spec", GEOMETRIES)
def test_backward_data_matches_golden_model(model, spec):
    """conv2d_backward_data through a stored mask, as float32: the model's and the golden
    backend's C are the reference's bit for bit."""
    g = _geometry(spec)
    rng = np.random.default_rng(sum(map(hash, map(str, spec))) % 2**32 + 1)
    qw, ew = _stack(rng, g)
    qd, ed = _activations(rng, g.out_channels, g.out_positions)
    stored = rng.random((g.channels, g.positions)) < 0.5
    want = bfp.epilogue(convm.conv2d_backward_data(qd, ed, qw, ew, g), mask_in=stored,
                        out="fp32").value
    for dev in (model, Device("golden")):
        # the stored mask: ReLU's of (+-1) @ I
        _, mask = dev.bfp_gemm(dev.quantize(np.where(stored, 1.0, -1.0).astype(np.float32)),
                               dev.quantize(np.eye(g.positions, dtype=np.float32)), relu=True)
        got = dev.conv2d_backward_data(dev.bfp_tensor(qd, ed), dev.bfp_stack(qw, ew), g,
                                       mask_in=mask, out="float32")
        np.testing.assert_array_equal(got.numpy().view(np.uint32), want.view(np.uint32),
                                      err_msg=dev.backend)


@pytest.mark.parametrize("spec", GEOMETRIES)
def test_weight_grad_matches_golden_model(model, spec):
    """conv2d_weight_grad (float32) and conv2d_sgd_update (BFP8 stack, stochastic): the
    model's and the golden backend's are the reference's bit for bit."""
    g = _geometry(spec)
    rng = np.random.default_rng(sum(map(hash, map(str, spec))) % 2**32 + 2)
    qw, ew = _stack(rng, g)
    qd, ed = _activations(rng, g.out_channels, g.out_positions)
    qx, ex = _activations(rng, g.channels, g.positions)
    grad = convm.conv2d_weight_grad(qd, ed, qx, ex, g)
    w = convm.dequantize_stack(qw, ew)
    stepped = bfp.sgd_step(w.reshape(-1, g.channels), grad.reshape(-1, g.channels), 0.05,
                           1e-3).reshape(w.shape)
    want_q, want_e = convm.quantize_stack(stepped, rounding="stochastic", seed=7)
    for dev in (model, Device("golden")):
        d, x = dev.bfp_tensor(qd, ed), dev.bfp_tensor(qx, ex)
        got = dev.conv2d_weight_grad(d, x, g)
        np.testing.assert_array_equal(got.numpy().view(np.uint32),
                                      grad.reshape(got.shape).view(np.uint32),
                                      err_msg=dev.backend)
        stack = dev.bfp_stack(qw, ew)
        dev.conv2d_sgd_update(d, x, stack, g, lr=0.05, weight_decay=1e-3,
                              rounding="stochastic", seed=7)
        np.testing.assert_array_equal(stack.mantissas(), want_q, err_msg=dev.backend)
        np.testing.assert_array_equal(stack.exponents(), want_e, err_msg=dev.backend)
    assert model.stats["macs"] == g.out_channels * g.out_positions * len(g.offsets) \
        * g.channels


def test_bias_step_is_a_1x1_weight_gradient(model):
    """A bias row stepped by the 1x1 weight gradient of a row of ones against the deltas:
    db = sum over positions, bit for bit on both backends."""
    g = _geometry(GEOMETRIES[1])
    rng = np.random.default_rng(5)
    qd, ed = _activations(rng, g.out_channels, g.out_positions)
    ones = (np.full((1, g.out_positions), 64, np.int8),
            np.full(bfp.tile_grid((1, g.out_positions)), -6, np.int8))
    one = convm.ConvGeometry(g.batch, g.out_channels, g.out_height, g.out_width, 1, 1)
    b = rng.standard_normal((1, g.out_channels)).astype(np.float32)
    db = convm.conv2d_weight_grad(*ones, qd, ed, one).reshape(1, -1)
    np.testing.assert_allclose(db, bfp.dequantize_tiles(qd, ed).sum(1)[None], rtol=1e-5)
    want = bfp.sgd_step(b, db, 0.1)
    for dev in (model, Device("golden")):
        target = dev.tensor(b)
        dev.conv2d_sgd_update(dev.bfp_tensor(*ones), dev.bfp_tensor(qd, ed), target, one,
                              lr=0.1)
        np.testing.assert_array_equal(target.numpy(), want, err_msg=dev.backend)


@pytest.mark.parametrize("spec", GEOMETRIES[:3])
def test_bias_stepped_by_the_weight_gradient(model, spec):
    """DESC_CONV.BIAS_GRAD: one weight-gradient descriptor steps the stack (BFP8 or float32)
    and the bias row, the bias bit for bit as the 1x1 weight gradient of a row of ones
    steps it, and the stack as without the bias; one descriptor, no more cycles than the
    stack's alone and the bias's row."""
    g = _geometry(spec)
    rng = np.random.default_rng(len(str(spec)) + 31)
    qw, ew = _stack(rng, g)
    qd, ed = _activations(rng, g.out_channels, g.out_positions)
    qx, ex = _activations(rng, g.channels, g.positions)
    ones = (np.full((1, g.out_positions), 64, np.int8),
            np.full(bfp.tile_grid((1, g.out_positions)), -6, np.int8))
    one = convm.ConvGeometry(g.batch, g.out_channels, g.out_height, g.out_width, 1, 1)
    db = convm.bias_grad(qd, ed)
    np.testing.assert_array_equal(
        db.view(np.uint32), convm.conv2d_weight_grad(*ones, qd, ed, one).reshape(-1)
        .view(np.uint32))
    np.testing.assert_allclose(db, bfp.dequantize_tiles(qd, ed).astype(np.float64).sum(1),
                               rtol=1e-5, atol=1e-6)
    b = rng.standard_normal((1, g.out_channels)).astype(np.float32)
    want_b = bfp.sgd_step(b, db[None], 0.05, 1e-3)
    grad = convm.conv2d_weight_grad(qd, ed, qx, ex, g).reshape(-1, g.channels)
    w = convm.dequantize_stack(qw, ew)
    stepped = bfp.sgd_step(w.reshape(-1, g.channels), grad, 0.05, 1e-3)
    want_q, want_e = convm.quantize_stack(stepped.reshape(w.shape), rounding="stochastic",
                                          seed=7)
    for dev in (model, Device("golden")):
        d, x = dev.bfp_tensor(qd, ed), dev.bfp_tensor(qx, ex)
        stack, bias = dev.bfp_stack(qw, ew), dev.tensor(b)
        dev.conv2d_sgd_update(d, x, stack, g, lr=0.05, weight_decay=1e-3,
                              rounding="stochastic", seed=7, bias=bias)
        np.testing.assert_array_equal(stack.mantissas(), want_q, err_msg=dev.backend)
        np.testing.assert_array_equal(stack.exponents(), want_e, err_msg=dev.backend)
        np.testing.assert_array_equal(bias.numpy().view(np.uint32), want_b.view(np.uint32),
                                      err_msg=dev.backend)
        if dev is model:
            assert model.stats["descriptors"] == 1
            fused = model.stats["cycles"]
            model.conv2d_sgd_update(d, x, model.bfp_stack(qw, ew), g, lr=0.05,
                                    rounding="stochastic", seed=7)
            assert model.stats["cycles"] <= fused <= model.stats["cycles"] + 1
        flat, bias = dev.tensor(w.reshape(-1, g.channels)), dev.tensor(b)
        dev.conv2d_sgd_update(d, x, flat, g, lr=0.05, weight_decay=1e-3, bias=bias)
        np.testing.assert_array_equal(flat.numpy().view(np.uint32), stepped.view(np.uint32),
                                      err_msg=dev.backend)
        np.testing.assert_array_equal(bias.numpy().view(np.uint32), want_b.view(np.uint32),
                                      err_msg=dev.backend)


def test_bias_step_refused(model):
    """A bad bias row is named; BIAS_GRAD outside a weight gradient stops the engine with
    UNSUPPORTED."""
    g = _geometry(GEOMETRIES[1])
    rng = np.random.default_rng(3)
    qw, ew = _stack(rng, g)
    d = model.bfp_tensor(*_activations(rng, g.out_channels, g.out_positions))
    x = model.bfp_tensor(*_activations(rng, g.channels, g.positions))
    stack = model.bfp_stack(qw, ew)
    with pytest.raises(TypeError, match=r"bias must be a float32 1x6 DeviceTensor"):
        model.conv2d_sgd_update(d, x, stack, g, lr=0.1,
                                bias=model.tensor(np.zeros((6, 1), np.float32)))
    with pytest.raises(TypeError, match="bias must be a float32"):
        model.conv2d_sgd_update(d, x, stack, g, lr=0.1, bias=np.zeros((1, 6), np.float32))
    with pytest.raises(ValueError, match="bias belongs to another device"):
        model.conv2d_sgd_update(d, x, stack, g, lr=0.1,
                                bias=Device("golden").tensor(np.zeros((1, 6), np.float32)))
    conv = {"fields": {"MODE": 1, "KERNEL_H": 3, "KERNEL_W": 3, "STRIDE_H": 1,
                       "STRIDE_W": 1, "DILATION_H": 1, "DILATION_W": 1, "BIAS_GRAD": 1},
            "height": 5, "width": 5, "channels": 2, "out_channels": 3, "batch": 2}
    for mode, epi in ((0, {}), (1, {"A_TILES": 1, "B_TILES": 1}),
                      (2, {"A_TILES": 1, "B_TILES": 1})):
        c = dict(conv, fields=dict(conv["fields"], MODE=mode))
        with pytest.raises(AcceleratorError) as e:
            model.driver.run(dict(m=1, n=1, k=1, flags={}, epilogue=epi, conv=c))
        assert e.value.code is ErrorCode.UNSUPPORTED, mode


POOLS = [("max", 2, 2), ("avg", 2, 2), ("max", 3, 2), ("avg", (3, 2), 1)]


@pytest.mark.parametrize("pool", POOLS)
def test_pooling_on_the_write_path(model, pool):
    """A forward convolution pooled after ReLU, then the backward-data pass of the layer
    above routed back through the pool and the mask: the model's and the golden backend's
    outputs, masks and argmax are the reference's bit for bit."""
    kind, k, s = pool
    g = convm.ConvGeometry(4, 3, 9, 8, 6, 3, padding=1)
    pg = convm.pool_geometry(4, 6, g.out_height, g.out_width, k, s)
    pooling = convm.Pooling(kind, pg)
    up = convm.ConvGeometry(4, 6, pg.out_height, pg.out_width, 5, 3, padding=1)
    rng = np.random.default_rng(len(str(pool)))
    qw, ew = _stack(rng, g)
    qu, eu = _stack(rng, up)
    qx, ex = _activations(rng, g.channels, g.positions)
    qd, ed = _activations(rng, up.out_channels, up.out_positions)
    bias = rng.standard_normal(g.out_channels).astype(np.float32)
    fwd = convm.conv_epilogue(convm.conv2d_forward(qx, ex, qw, ew, g), bias=bias, relu=True,
                              pool_out=pooling, out="bfp8", rounding="stochastic", seed=3)
    back = convm.conv_epilogue(convm.conv2d_backward_data(qd, ed, qu, eu, up),
                               mask_in=fwd.mask, unpool_in=pooling, argmax=fwd.argmax,
                               out="bfp8", rounding="stochastic", seed=4)
    assert fwd.q.shape == (6, pg.out_positions) and back.q.shape == (6, pg.positions)
    for dev in (model, Device("golden")):
        y, mask, *arg = dev.conv2d(dev.bfp_tensor(qx, ex), dev.bfp_stack(qw, ew), g,
                                   bias=bias, relu=True, pool=pooling, rounding="stochastic",
                                   seed=3)
        np.testing.assert_array_equal(y.mantissas(), fwd.q, err_msg=dev.backend)
        np.testing.assert_array_equal(y.exponents(), fwd.exp, err_msg=dev.backend)
        np.testing.assert_array_equal(mask.numpy(), fwd.mask, err_msg=dev.backend)
        assert len(arg) == (kind == "max")
        if arg:
            np.testing.assert_array_equal(arg[0].numpy(), fwd.argmax, err_msg=dev.backend)
        dx = dev.conv2d_backward_data(dev.bfp_tensor(qd, ed), dev.bfp_stack(qu, eu), up,
                                      mask_in=mask, unpool=pooling,
                                      argmax=arg[0] if arg else None,
                                      rounding="stochastic", seed=4)
        np.testing.assert_array_equal(dx.mantissas(), back.q, err_msg=dev.backend)
        np.testing.assert_array_equal(dx.exponents(), back.exp, err_msg=dev.backend)


@pytest.mark.parametrize("spec", [GEOMETRIES[0], GEOMETRIES[1]])
def test_residual_sum_on_the_write_path(model, spec):
    """DESC_CONV.ADD: a forward convolution with a shortcut added before its bias and ReLU,
    and a backward-data convolution with another path's deltas added before the mask (and
    after an unpool): the model's and the golden backend's outputs and masks are the
    reference's bit for bit, and the model counts the shortcut's reads in the traffic."""
    g = _geometry(spec)
    rng = np.random.default_rng(len(str(spec)) + 7)
    qw, ew = _stack(rng, g)
    qx, ex = _activations(rng, g.channels, g.positions)
    qs, es = _activations(rng, g.out_channels, g.out_positions)
    qd, ed = _activations(rng, g.out_channels, g.out_positions)
    qo, eo = _activations(rng, g.channels, g.positions)
    bias = rng.standard_normal(g.out_channels).astype(np.float32)
    shortcut = bfp.dequantize_tiles(qs, es)
    fwd = convm.conv_epilogue(convm.conv2d_forward(qx, ex, qw, ew, g), bias=bias, relu=True,
                              residual=shortcut, out="bfp8", rounding="stochastic", seed=5)
    # (the sum is not the convolution's alone)
    plain = convm.conv_epilogue(convm.conv2d_forward(qx, ex, qw, ew, g), bias=bias,
                                relu=True, out="bfp8", rounding="stochastic", seed=5)
    assert not np.array_equal(fwd.q, plain.q)
    stored = rng.random((g.channels, g.positions)) < 0.5
    back = convm.conv_epilogue(convm.conv2d_backward_data(qd, ed, qw, ew, g), mask_in=stored,
                               residual=bfp.dequantize_tiles(qo, eo), out="fp32")
    for dev in (model, Device("golden")):
        y, mask = dev.conv2d(dev.bfp_tensor(qx, ex), dev.bfp_stack(qw, ew), g, bias=bias,
                             relu=True, add=dev.bfp_tensor(qs, es), rounding="stochastic",
                             seed=5)
        np.testing.assert_array_equal(y.mantissas(), fwd.q, err_msg=dev.backend)
        np.testing.assert_array_equal(y.exponents(), fwd.exp, err_msg=dev.backend)
        np.testing.assert_array_equal(mask.numpy(), fwd.mask, err_msg=dev.backend)
        _, m_in = dev.bfp_gemm(dev.quantize(np.where(stored, 1.0, -1.0).astype(np.float32)),
                               dev.quantize(np.eye(g.positions, dtype=np.float32)), relu=True)
        got = dev.conv2d_backward_data(dev.bfp_tensor(qd, ed), dev.bfp_stack(qw, ew), g,
                                       mask_in=m_in, add=dev.bfp_tensor(qo, eo), out="float32")
        np.testing.assert_array_equal(got.numpy().view(np.uint32), back.value.view(np.uint32),
                                      err_msg=dev.backend)
        if dev is model:
            cycles = model.stats["cycles"]
            model.conv2d_backward_data(model.bfp_tensor(qd, ed), model.bfp_stack(qw, ew), g,
                                       mask_in=m_in, out="float32")
            assert model.stats["cycles"] <= cycles
            # (the summand's bytes in the descriptor's traffic floor, read beside the GEMM)
            a, b, _ = g.compulsory_bytes(1)
            c = g.out_channels * g.out_positions
            sim = model.sim
            for summand in (c, 0):
                model.conv2d(model.bfp_tensor(qx, ex), model.bfp_stack(qw, ew), g,
                             add=model.bfp_tensor(qs, es) if summand else None)
                want = max(a + b + summand, c // sim.write_ports)
                assert sim.last_floor == -(-want // sim.bpw), summand


def test_residual_sum_refused(model):
    """DESC_CONV.ADD with the wrong shape, or off a device, is named; on a GEMM (MODE 0) or
    a weight gradient it stops the engine with UNSUPPORTED."""
    g = _geometry(GEOMETRIES[1])
    rng = np.random.default_rng(2)
    qw, ew = _stack(rng, g)
    x, w = model.bfp_tensor(*_activations(rng, g.channels, g.positions)), \
        model.bfp_stack(qw, ew)
    with pytest.raises(ValueError, match="add is 5x6, the sum is"):
        model.conv2d(x, w, g, add=model.bfp_tensor(*_activations(rng, 5, 6)))
    with pytest.raises(TypeError, match="add must be a BfpTensor"):
        model.conv2d(x, w, g, add=np.zeros((g.out_channels, g.out_positions), np.float32))
    with pytest.raises(ValueError, match="add belongs to another device"):
        model.conv2d(x, w, g, add=Device("golden").bfp_tensor(
            *_activations(rng, g.out_channels, g.out_positions)))
    conv = {"fields": {"MODE": 1, "KERNEL_H": 3, "KERNEL_W": 3, "STRIDE_H": 1,
                       "STRIDE_W": 1, "DILATION_H": 1, "DILATION_W": 1, "ADD": 1},
            "height": 5, "width": 5, "channels": 2, "out_channels": 3, "batch": 2}
    for mode, epi in ((0, {"BFP8": 1}), (0, {}), (3, {"A_TILES": 1, "B_TILES": 1})):
        c = dict(conv, fields=dict(conv["fields"], MODE=mode))
        with pytest.raises(AcceleratorError) as e:
            model.driver.run(dict(m=1, n=1, k=1, flags={}, epilogue=epi, conv=c))
        assert e.value.code is ErrorCode.UNSUPPORTED, mode


def test_pooling_arguments_named(model):
    g = convm.ConvGeometry(2, 3, 8, 8, 4, 3, padding=1)
    rng = np.random.default_rng(1)
    qw, ew = _stack(rng, g)
    x, w = model.bfp_tensor(*_activations(rng, 3, g.positions)), model.bfp_stack(qw, ew)
    good = convm.Pooling("max", convm.pool_geometry(2, 4, 8, 8, 2))
    with pytest.raises(TypeError, match="pool must be a sim.models.conv.Pooling"):
        model.conv2d(x, w, g, pool=("max", 2))
    with pytest.raises(ValueError, match="pool: its input is"):
        model.conv2d(x, w, g, pool=convm.Pooling("max", convm.pool_geometry(2, 4, 7, 8, 2)))
    with pytest.raises(ValueError, match="kind must be one of"):
        convm.Pooling("min", good.geometry)
    d = model.bfp_tensor(*_activations(rng, 4, 2 * 4 * 4))
    up = convm.ConvGeometry(2, 4, 4, 4, 4, 3, padding=1)
    wu = model.bfp_stack(*_stack(rng, up))
    with pytest.raises(TypeError, match="argmax must be the uint8"):
        model.conv2d_backward_data(d, wu, up, unpool=good)
    with pytest.raises(ValueError, match="argmax: only with unpool"):
        model.conv2d_backward_data(d, wu, up, argmax=model.tensor(np.zeros((4, 32), np.uint8)))
    with pytest.raises(ValueError, match="the geometry's"):
        model.conv2d_weight_grad(d, x, g)


def test_bad_arguments_named(model):
    g = _geometry(GEOMETRIES[0])
    rng = np.random.default_rng(0)
    qw, ew = _stack(rng, g)
    qx, ex = _activations(rng, g.channels, g.positions)
    x, w = model.bfp_tensor(qx, ex), model.bfp_stack(qw, ew)
    with pytest.raises(TypeError, match="geometry must be"):
        model.conv2d(x, w, (1, 2, 3))
    with pytest.raises(TypeError, match="w must be a BfpStack"):
        model.conv2d(x, x, g)
    with pytest.raises(ValueError, match="the activations are"):
        model.conv2d(model.bfp_tensor(*bfp.quantize_tiles(np.ones((2, 5), np.float32))), w,
                     g)
    with pytest.raises(ValueError, match="stride"):
        model.conv2d(x, w, convm.ConvGeometry(1, 1, 20, 20, 8, 3, stride=8))
    with pytest.raises(ValueError, match="a tile grid per offset"):
        model.bfp_stack(qw, ew[:, :, :0])


def test_descriptors_the_model_refuses(model):
    """A weight gradient with ReLU or a bias, SGD on a forward convolution, a convolution
    without tile exponents, with a transpose or quantise-only, a pooling stage its mode does
    not take or on a GEMM, a pool window that does not match the image: UNSUPPORTED; a zero
    size with ZERO_DIMENSION."""
    conv = {"fields": {"MODE": 1, "KERNEL_H": 3, "KERNEL_W": 3, "STRIDE_H": 1,
                       "STRIDE_W": 1, "DILATION_H": 1, "DILATION_W": 1},
            "height": 5, "width": 5, "channels": 2, "out_channels": 3, "batch": 2}
    tiles = {"A_TILES": 1, "B_TILES": 1}
    for code, conv_fields, flags, epi in (
            (ErrorCode.UNSUPPORTED, {"MODE": 3}, {}, dict(tiles, RELU=1, BFP8=1)),
            (ErrorCode.UNSUPPORTED, {"MODE": 3}, {}, dict(tiles, BIAS=1)),
            (ErrorCode.UNSUPPORTED, {}, {}, dict(tiles, SGD=1, BFP8=1)),
            (ErrorCode.UNSUPPORTED, {}, {}, {}),
            (ErrorCode.UNSUPPORTED, {}, {"TRANSPOSE_A": 1}, tiles),
            (ErrorCode.UNSUPPORTED, {}, {}, dict(tiles, QUANTIZE_ONLY=1, BFP8=1)),
            (ErrorCode.ZERO_DIMENSION, {"STRIDE_H": 0}, {}, tiles)):
        c = dict(conv, fields=dict(conv["fields"], **conv_fields))
        with pytest.raises(AcceleratorError) as e:
            model.driver.run(dict(m=1, n=1, k=1, flags=flags, epilogue=epi, conv=c))
        assert e.value.code is code, (conv_fields, flags, epi)
    pool = {"fields": {"MODE": 1, "KERNEL_H": 2, "KERNEL_W": 2, "STRIDE_H": 2,
                       "STRIDE_W": 2}, "height": 5, "width": 5}
    for code, conv_mode, pool_fields, image in (
            (ErrorCode.UNSUPPORTED, 0, {}, {}),
            (ErrorCode.UNSUPPORTED, 2, {}, {}),
            (ErrorCode.UNSUPPORTED, 3, {"MODE": 3}, {}),
            (ErrorCode.UNSUPPORTED, 1, {}, {"height": 4}),
            (ErrorCode.ZERO_DIMENSION, 1, {"STRIDE_W": 0}, {})):
        p = dict(pool, fields=dict(pool["fields"], **pool_fields), **image)
        c = dict(conv, fields=dict(conv["fields"], MODE=conv_mode, PAD_H=1, PAD_W=1))
        with pytest.raises(AcceleratorError) as e:
            model.driver.run(dict(m=1, n=1, k=1, flags={}, epilogue=tiles, conv=c, pool=p))
        assert e.value.code is code, (conv_mode, pool_fields, image)


def test_activation_matrix_quantised_in_one_descriptor(model):
    """A device with convolution descriptors quantises an activation matrix's H*W*batch
    columns (over 65535) in one quantise-only descriptor, as the golden backend does."""
    x = np.random.default_rng(3).standard_normal((2, 70_000)).astype(np.float32)
    want = bfp.quantize_tiles(x, rounding="stochastic", seed=9)
    for dev in (model, Device("golden")):
        got = dev.quantize(x, rounding="stochastic", seed=9)
        np.testing.assert_array_equal(got.mantissas(), want[0], err_msg=dev.backend)
        np.testing.assert_array_equal(got.exponents(), want[1], err_msg=dev.backend)
    assert model.stats["n"] == 70_000 and model.stats["descriptors"] == 1
    with pytest.raises(ValueError, match="M=70000 exceeds 65535"):
        model.quantize(np.ascontiguousarray(x.T))
