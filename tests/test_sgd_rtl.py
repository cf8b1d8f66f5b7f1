"""The optimiser's step on the RTL (``Accelerator(epilogue=True, sgd=True)``,
``Device("rtl", epilogue=True, sgd=True)``): ``Device.sgd_update`` steps BFP8 weights in
place, bit for bit the golden backend, the functional model and
:func:`sim.models.bfp.sgd_step` then :func:`sim.models.bfp.quantize_tiles`; what the build
lacks is refused."""

import numpy as np
import pytest

from firmware import Device
from firmware.runtime.device import AcceleratorError
from firmware.spec import regmap
from firmware.spec.regmap import ErrorCode
from sim.models import bfp


@pytest.fixture(scope="module")
def dev():
    # the Pynq-Z1's shape and bus: a tile row of 16 lanes folded in two on the 64-bit port
    device = Device("rtl", rows=16, cols=16, data_width=64, depth=64, block=8, latency=24,
                    pause=0.2, seed=3, k_blocks=True, epilogue=True, sgd=True)
    yield device
    assert device.sim.violations == 0, "AXI protocol violations"


@pytest.mark.parametrize("m,n,k,ta,rounding,lr,wd", [
    (40, 70, 33, True, "stochastic", 0.3, 0.01), (33, 20, 64, False, "nearest", 0.05, 0.0),
    (64, 64, 16, True, "stochastic", 1.5, 0.1), (5, 7, 40, True, "nearest", 0.7, 0.5)])
def test_sgd_update_matches_golden(dev, m, n, k, ta, rounding, lr, wd):
    """``w = decay * w - lr * g`` over the stored tile blocks, quantised with the seeded
    rounding, as the golden backend and the functional model give it."""
    rng = np.random.default_rng(m * 5 + n + k)
    x = rng.standard_normal((k, m) if ta else (m, k)).astype(np.float32)
    d = rng.standard_normal((k, n)).astype(np.float32)
    w0 = (rng.standard_normal((m, n)) * 0.1).astype(np.float32)
    got = {}
    for name, device in (("rtl", dev), ("golden", Device("golden")),
                         ("model", Device("model", rows=16, cols=16, data_width=64))):
        w = device.quantize(w0)
        device.sgd_update(device.quantize(x), device.quantize(d), w, lr=lr, weight_decay=wd,
                          transpose_a=ta, rounding=rounding, seed=m * 1000 + n)
        got[name] = (w.mantissas(), w.exponents())
    qx, ex = bfp.quantize_tiles(x)
    qd, ed = bfp.quantize_tiles(d)
    g = bfp.gemm_kblocks(qx, ex, qd, ed, transpose_a=ta)
    qw, ew = bfp.quantize_tiles(w0)
    want = bfp.quantize_tiles(bfp.sgd_step(bfp.dequantize_tiles(qw, ew), g, lr, wd),
                              rounding=rounding, seed=m * 1000 + n)
    for name, (q, e) in got.items():
        np.testing.assert_array_equal(q, want[0], err_msg=name)
        np.testing.assert_array_equal(e, want[1], err_msg=name)


def test_steps_repeat_in_place(dev):
    """Three steps of the same weights, each reading what the last wrote, queued behind a
    plain BFP8 GEMM: the golden backend's weights after each."""
    rng = np.random.default_rng(5)
    x = rng.standard_normal((32, 48)).astype(np.float32)
    d = rng.standard_normal((32, 24)).astype(np.float32)
    w0 = (rng.standard_normal((48, 24)) * 0.2).astype(np.float32)
    gold = Device("golden")
    ws = [dev.quantize(w0), gold.quantize(w0)]
    for step in range(3):
        for device, w in zip((dev, gold), ws, strict=True):
            qx, qd = device.quantize(x * (step + 1)), device.quantize(d)
            device.bfp_gemm(qx, qd, transpose_a=True, out="bfp8")
            device.sgd_update(qx, qd, w, lr=0.1, weight_decay=0.001, transpose_a=True,
                              rounding="stochastic", seed=step)
        np.testing.assert_array_equal(ws[0].mantissas(), ws[1].mantissas())
        np.testing.assert_array_equal(ws[0].exponents(), ws[1].exponents())


def test_sgd_offered_and_what_it_lacks_refused(dev):
    """CONFIG_FEATURES.OPS has SGD; SGD on a float32 target, or with a bias, ReLU, a stored
    mask or a quantise-only descriptor, stops the accelerator with UNSUPPORTED, and the
    runtime refuses a float32 target first."""
    assert dev.driver.info.epilogue_ops == regmap.pack(
        "DESC_EPILOGUE", BFP8=1, STOCHASTIC=1, BIAS=3, RELU=1, MASK_IN=1, QUANTIZE_ONLY=1,
        SGD=1)
    for option in ({"BFP8": 0}, {"BIAS": 1}, {"RELU": 1}, {"MASK_IN": 1},
                   {"QUANTIZE_ONLY": 1}):
        with pytest.raises(AcceleratorError) as e:
            dev.driver.run(dict(m=1, n=1, k=1, flags={},
                                epilogue=dict({"BFP8": 1, "SGD": 1}, **option)))
        assert e.value.code is ErrorCode.UNSUPPORTED, option
    q, ex = bfp.quantize_tiles(np.ones((4, 4), np.float32))
    t = dev.bfp_tensor(q, ex)
    with pytest.raises(RuntimeError, match="SGD only with a BFP8 C"):
        dev.sgd_update(t, t, dev.tensor(np.ones((4, 4), np.float32)), lr=0.1)
