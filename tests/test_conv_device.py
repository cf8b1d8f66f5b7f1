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
    assert model.stats["macs"] == g.out_channels * g.out_positions * len(g.offsets) \
        * g.channels


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
    """The weight gradient's mode, a convolution without tile exponents, with a transpose or
    quantise-only stop with UNSUPPORTED; a zero size with ZERO_DIMENSION."""
    conv = {"fields": {"MODE": 1, "KERNEL_H": 3, "KERNEL_W": 3, "STRIDE_H": 1,
                       "STRIDE_W": 1, "DILATION_H": 1, "DILATION_W": 1},
            "height": 5, "width": 5, "channels": 2, "out_channels": 3, "batch": 2}
    tiles = {"A_TILES": 1, "B_TILES": 1}
    for code, conv_fields, flags, epi in (
            (ErrorCode.UNSUPPORTED, {"MODE": 3}, {}, tiles),
            (ErrorCode.UNSUPPORTED, {}, {}, {}),
            (ErrorCode.UNSUPPORTED, {}, {"TRANSPOSE_A": 1}, tiles),
            (ErrorCode.UNSUPPORTED, {}, {}, dict(tiles, QUANTIZE_ONLY=1, BFP8=1)),
            (ErrorCode.ZERO_DIMENSION, {"STRIDE_H": 0}, {}, tiles)):
        c = dict(conv, fields=dict(conv["fields"], **conv_fields))
        with pytest.raises(AcceleratorError) as e:
            model.driver.run(dict(m=1, n=1, k=1, flags=flags, epilogue=epi, conv=c))
        assert e.value.code is code, (conv_fields, flags, epi)
