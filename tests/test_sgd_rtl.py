"""The optimiser's step on the RTL (``Accelerator(epilogue=True, sgd=True)``,
``Device("rtl", epilogue=True, sgd=True)``): ``Device.sgd_update`` steps BFP8 weights and
float32 bias rows in place, bit for bit the golden backend, the functional model and
:func:`sim.models.bfp.sgd_step` (then :func:`sim.models.bfp.quantize_tiles`); a float32 C
goes through the epilogue (bias, ReLU, stored mask); a fully connected network trains with
only the batch, the loss gradient and the logits crossing; what the build lacks is
refused."""

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


@pytest.mark.parametrize("k,n", [(40, 70), (128, 10), (33, 1)])
def test_float32_row_steps_match_golden(dev, k, n):
    """A bias vector (a float32 row) stepped by ``1^T d`` in place: its stored values read
    as the column biases, the step written as a float32 row."""
    rng = np.random.default_rng(k + n)
    d = rng.standard_normal((k, n)).astype(np.float32)
    b0 = rng.standard_normal((1, n)).astype(np.float32)
    ones = bfp.quantize_tiles(np.ones((1, k), np.float32))
    got = []
    for device in (dev, Device("golden")):
        b = device.tensor(b0)
        device.sgd_update(device.bfp_tensor(*ones), device.quantize(d), b, lr=0.2,
                          weight_decay=0.05)
        got.append(b.numpy())
    np.testing.assert_array_equal(got[0].view(np.uint32), got[1].view(np.uint32))
    assert not np.array_equal(got[0], b0)


@pytest.mark.parametrize("m,n,k,bias,relu,mask_in", [
    (40, 70, 33, "col", True, False), (33, 20, 64, "row", False, False),
    (5, 7, 40, None, True, False), (64, 10, 48, "col", False, True)])
def test_float32_output_through_the_epilogue(dev, m, n, k, bias, relu, mask_in):
    """bfp_gemm(out="float32") with a bias, ReLU (and its mask) or a stored mask: the
    golden backend's float32 C and mask bit for bit."""
    rng = np.random.default_rng(m + n + k)
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    vec = rng.standard_normal(m if bias == "row" else n).astype(np.float32)
    stored = rng.random((m, n)) < 0.5
    got = []
    for device in (dev, Device("golden")):
        kw = {}
        if bias:
            kw.update(bias=vec, bias_axis=bias)
        if mask_in:
            _, mk = device.bfp_gemm(device.quantize(np.where(stored, 1.0, -1.0)
                                                    .astype(np.float32)),
                                    device.quantize(np.eye(n, dtype=np.float32)),
                                    relu=True, out="bfp8")
            kw["mask_in"] = mk
        out = device.bfp_gemm(device.quantize(a), device.quantize(b), relu=relu,
                              out="float32", **kw)
        got.append(out if relu else (out,))
    for x, y in zip(got[0], got[1], strict=True):
        np.testing.assert_array_equal(x.numpy().view(np.uint8), y.numpy().view(np.uint8))


def test_device_optimizer_mlp_bit_identical_and_only_batch_and_logits_cross(dev):
    """ResidentMLP(optimizer="device") on the RTL: the BFP8 weights and the float32 biases
    stay on the device and are stepped in the weight gradients' epilogues; after three steps
    they are the golden backend's bit for bit, and per step the host wrote the batch and the
    loss gradient and read the logits, nothing else."""
    from firmware.ml.data import digits
    from firmware.ml.resident import ResidentMLP
    xtr, ytr, _, _ = digits()
    xtr = xtr.astype(np.float32)
    nets = [ResidentMLP([64, 32, 10], d, seed=4, lr=0.3, momentum=0.0, optimizer="device")
            for d in (dev, Device("golden"))]
    assert not nets[0].chain.host_quantize and not nets[0].chain.host_bias
    dev.profile.reset()
    for net in nets:
        for s in range(3):
            net.step(xtr[s * 40:(s + 1) * 40], ytr[s * 40:(s + 1) * 40])
    assert dev.profile.seconds["quantize"] == 0 and dev.profile.seconds["combine"] == 0
    for (name, p), (_, q) in zip(nets[0].params, nets[1].params, strict=True):
        np.testing.assert_array_equal(p.view(np.uint32), q.view(np.uint32), err_msg=name)
    assert set(nets[0].traffic) == {"input batch", "logits", "loss gradient"}
    assert nets[0].traffic["input batch"] == 40 * 64 * 4          # (the last step's)


def test_sgd_offered_and_what_it_lacks_refused(dev):
    """CONFIG_FEATURES.OPS has SGD and FP32 is set; SGD on a float32 target of more than one
    row, or with a bias, ReLU, a stored mask or a quantise-only descriptor, stops the
    accelerator with UNSUPPORTED, and the runtime refuses such a target first."""
    info = dev.driver.info
    assert info.epilogue_ops == regmap.pack(
        "DESC_EPILOGUE", BFP8=1, STOCHASTIC=1, BIAS=3, RELU=1, MASK_IN=1, QUANTIZE_ONLY=1,
        SGD=1)
    assert info.fp32 and not info.epilogue
    for m, option in ((2, {"BFP8": 0}), (1, {"BIAS": 1}), (1, {"RELU": 1}),
                      (1, {"MASK_IN": 1}), (1, {"QUANTIZE_ONLY": 1})):
        with pytest.raises(AcceleratorError) as e:
            dev.driver.run(dict(m=m, n=1, k=1, flags={},
                                epilogue=dict({"BFP8": 1, "SGD": 1}, **option)))
        assert e.value.code is ErrorCode.UNSUPPORTED, option
    with pytest.raises(AcceleratorError) as e:         # an epilogue on RAW int32 sums
        dev.driver.run(dict(m=1, n=1, k=1, flags={"RAW": 1}, epilogue={"BIAS": 2}))
    assert e.value.code is ErrorCode.UNSUPPORTED
    # no convolution descriptors on this RTL (CONFIG_FEATURES.CONV 0)
    assert not info.conv
    with pytest.raises(AcceleratorError) as e:
        dev.driver.run(dict(m=1, n=1, k=1, flags={}, epilogue={"A_TILES": 1, "B_TILES": 1},
                            conv={"fields": {"MODE": 1, "KERNEL_H": 1, "KERNEL_W": 1,
                                             "STRIDE_H": 1, "STRIDE_W": 1,
                                             "DILATION_H": 1, "DILATION_W": 1},
                                  "height": 1, "width": 1, "channels": 1,
                                  "out_channels": 1, "batch": 1}))
    assert e.value.code is ErrorCode.UNSUPPORTED
    # nor pooling stages (CONFIG_FEATURES.POOL 0)
    assert not info.pool
    with pytest.raises(AcceleratorError) as e:
        dev.driver.run(dict(m=1, n=1, k=1, flags={}, epilogue={"A_TILES": 1, "B_TILES": 1},
                            pool={"fields": {"MODE": 1, "KERNEL_H": 1, "KERNEL_W": 1,
                                             "STRIDE_H": 1, "STRIDE_W": 1},
                                  "height": 1, "width": 1}))
    assert e.value.code is ErrorCode.UNSUPPORTED
    q, ex = bfp.quantize_tiles(np.ones((4, 4), np.float32))
    t = dev.bfp_tensor(q, ex)
    with pytest.raises(RuntimeError, match="float32 C of one row only"):
        dev.sgd_update(t, t, dev.tensor(np.ones((4, 4), np.float32)), lr=0.1)
    from sim.models.conv import ConvGeometry
    g = ConvGeometry(1, 4, 2, 2, 4, 1)
    with pytest.raises(RuntimeError, match="no convolution descriptors"):
        dev.conv2d(t, dev.bfp_stack(q[None], ex[None]), g)
