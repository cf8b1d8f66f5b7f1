"""BFP8 tensors kept on the device: :meth:`firmware.Device.quantize`, ``bfp_tensor`` and
``bfp_gemm`` give the golden model's results bit for bit on the ``golden`` and ``model``
backends, and a build without the epilogue refuses them clearly."""

import numpy as np
import pytest

from firmware import Device
from firmware.runtime.device import AcceleratorError, DeviceTensor
from firmware.runtime.epilogue import BfpTensor, MaskTensor
from firmware.spec.regmap import ErrorCode
from sim.models import bfp

BACKENDS = ["golden", "model"]


def _layer_step(dev, x, w, b, dy, seed):
    """A linear layer with ReLU, forward and backward, all on the device: the input batch
    quantised there, ``y = relu(x w^T + b)`` quantised with its mask, the incoming delta
    masked and multiplied back (``dx``), and the weight gradient ``dW = dy^T x`` in float32."""
    qx = dev.quantize(x, rounding="stochastic", seed=seed)
    qw = dev.quantize(w)
    y, mask = dev.bfp_gemm(qx, qw, transpose_b=True, bias=b, relu=True, rounding="stochastic",
                           seed=seed + 1)
    qdy = dev.quantize(dy, rounding="stochastic", seed=seed + 2)
    dx = dev.bfp_gemm(qdy, qw, rounding="stochastic", seed=seed + 3)
    dw = dev.bfp_gemm(qdy, qx, transpose_a=True, out="float32")
    return dict(y=(y.mantissas(), y.exponents()), mask=mask.numpy(),
                dx=(dx.mantissas(), dx.exponents()), dw=dw.numpy(), yv=y.numpy())


def _want(x, w, b, dy, seed):
    qx, ex = bfp.quantize_tiles(x, rounding="stochastic", seed=seed)
    qw, ew = bfp.quantize_tiles(w)
    fwd = bfp.epilogue(bfp.gemm_kblocks(qx, ex, qw, ew, transpose_b=True), bias=b,
                       bias_axis="col", relu=True, out="bfp8", rounding="stochastic",
                       seed=seed + 1)
    qd, ed = bfp.quantize_tiles(dy, rounding="stochastic", seed=seed + 2)
    dx = bfp.epilogue(bfp.gemm_kblocks(qd, ed, qw, ew), out="bfp8", rounding="stochastic",
                      seed=seed + 3)
    return dict(y=(fwd.q, fwd.exp), mask=fwd.mask, dx=(dx.q, dx.exp),
                dw=bfp.gemm_kblocks(qd, ed, qx, ex, transpose_a=True),
                yv=bfp.dequantize_tiles(fwd.q, fwd.exp))


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_layer_step_on_the_device_is_the_golden_model(backend):
    rng = np.random.default_rng(0)
    batch, fan_in, fan_out = 50, 75, 40
    x = (rng.standard_normal((batch, fan_in)) * 2).astype(np.float32)
    w = (rng.standard_normal((fan_out, fan_in)) * 0.1).astype(np.float32)
    b = (rng.standard_normal(fan_out) * 0.1).astype(np.float32)
    dy = (rng.standard_normal((batch, fan_out)) * 1e-2).astype(np.float32)
    dev = Device(backend) if backend == "golden" else Device(backend, rows=8, cols=8)
    got, want = _layer_step(dev, x, w, b, dy, 11), _want(x, w, b, dy, 11)
    for key in ("y", "dx"):
        for g, e in zip(got[key], want[key], strict=True):
            np.testing.assert_array_equal(g, e, err_msg=key)
    np.testing.assert_array_equal(got["mask"], want["mask"])
    for key in ("dw", "yv"):
        np.testing.assert_array_equal(got[key].view(np.uint32), want[key].view(np.uint32),
                                      err_msg=key)
    if backend == "model":
        assert dev.stats["macs"] == fan_in * fan_out * batch and dev.stats["cycles"] > 0


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_mask_flows_back_and_tensors_round_trip(backend):
    rng = np.random.default_rng(1)
    dev = Device(backend) if backend == "golden" else Device(backend, rows=8, cols=8)
    q = rng.integers(-127, 128, (33, 70), dtype=np.int8)
    e = rng.integers(-20, 5, bfp.tile_grid(q.shape), dtype=np.int8)
    t = dev.bfp_tensor(q, e)
    assert isinstance(t, BfpTensor) and t.grid == e.shape
    np.testing.assert_array_equal(t.mantissas(), q)
    np.testing.assert_array_equal(t.exponents(), e)
    np.testing.assert_array_equal(t.numpy(), bfp.dequantize_tiles(q, e))
    ones = dev.bfp_tensor(np.ones((70, 70), np.int8), np.zeros((3, 3), np.int8))
    y, mask = dev.bfp_gemm(t, ones, relu=True)
    assert isinstance(mask, MaskTensor) and mask.shape == (33, 70)
    dx = dev.bfp_gemm(t, ones, mask_in=mask, out="float32")
    assert isinstance(dx, DeviceTensor)
    c = bfp.gemm_kblocks(q, e, np.ones((70, 70), np.int8), np.zeros((3, 3), np.int8))
    np.testing.assert_array_equal(mask.numpy(), c > 0)
    np.testing.assert_array_equal(dx.numpy(), np.where(c > 0, c, np.float32(0)))
    for x in (t, ones, y, mask, dx):
        x.free()


def test_bad_calls_are_refused_clearly():
    dev = Device("model", rows=8, cols=8)
    rng = np.random.default_rng(2)
    a = dev.quantize(rng.standard_normal((8, 40)).astype(np.float32))
    with pytest.raises(TypeError, match="x must be a non-empty float32 matrix"):
        dev.quantize(np.zeros((4, 4), np.float64))
    with pytest.raises(ValueError, match="rounding must be one of"):
        dev.quantize(np.zeros((4, 4), np.float32), rounding="up")
    with pytest.raises(TypeError, match="b must be a BfpTensor"):
        dev.bfp_gemm(a, np.zeros((40, 4), np.int8))
    with pytest.raises(ValueError, match="inner dimensions differ"):
        dev.bfp_gemm(a, a)
    with pytest.raises(ValueError, match="bias must have 8 values"):
        dev.bfp_gemm(a, a, transpose_b=True, bias=np.zeros(7, np.float32))
    with pytest.raises(ValueError, match="out must be"):
        dev.bfp_gemm(a, a, transpose_b=True, out="int8")
    with pytest.raises(ValueError, match="exp must have the shape"):
        dev.bfp_tensor(np.zeros((40, 40), np.int8), np.zeros((1, 1), np.int8))
    bad = np.zeros((8, 8), np.float32)
    bad[1, 1] = np.nan
    with pytest.raises(AcceleratorError) as err:
        dev.quantize(bad)
    assert err.value.code is ErrorCode.NONFINITE
    with pytest.raises(ValueError, match="finite"):
        Device("golden").quantize(bad)
    plain = Device("model", rows=8, cols=8, epilogue=False)
    with pytest.raises(RuntimeError,
                       match="does not offer the write-back epilogue's BFP8, QUANTIZE_ONLY"):
        plain.quantize(np.zeros((4, 4), np.float32))
