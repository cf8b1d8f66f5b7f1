"""Training with activations, masks and deltas on the device (:mod:`firmware.ml.resident`)."""

import numpy as np
import pytest

from firmware import Device
from firmware.ml.data import digits
from firmware.ml.resident import ResidentMLP
from firmware.runtime.device import DeviceTensor


@pytest.fixture(scope="module")
def data():
    xtr, ytr, xte, yte = digits()
    return (xtr.astype(np.float32), ytr, xte.astype(np.float32), yte)


def _train(dev, data, steps, batch=64, seed=3, lr=0.05, **options):
    xtr, ytr, _, _ = data
    net = ResidentMLP([64, 48, 10], dev, seed=seed, lr=lr, **options)
    losses = []
    for s in range(steps):
        i = (s * batch) % (len(xtr) - batch)
        losses.append(net.step(xtr[i:i + batch], ytr[i:i + batch]))
    return net, losses


def test_golden_and_model_train_to_the_same_weights(data):
    """The same steps on the golden model and on the functional accelerator (descriptors
    through the driver) leave bit-identical weights; and the host moved only the batch, the
    logits, the loss gradient and the optimiser's gradients and weights."""
    a, _ = _train(Device("golden"), data, 4)
    b, _ = _train(Device("model", rows=8, cols=8), data, 4)
    for (name, p), (_, q) in zip(a.params, b.params, strict=True):
        np.testing.assert_array_equal(p.view(np.uint32), q.view(np.uint32), err_msg=name)
    assert set(b.traffic) == {"input batch", "weights", "logits", "loss gradient", "gradients"}
    # a different seed gives different weights (the rounding is stochastic and seeded)
    c, _ = _train(Device("golden"), data, 4, seed=4)
    assert not np.array_equal(a.params[0][1], c.params[0][1])


def test_it_learns(data):
    net, losses = _train(Device("golden"), data, 60)
    assert np.mean(losses[-10:]) < 0.5 * np.mean(losses[:5])
    _, _, xte, yte = data
    assert (net.predict(xte) == yte).mean() > 0.85


def test_bad_input():
    net = ResidentMLP([8, 4], Device("golden"))
    with pytest.raises(TypeError, match="x must be a float32 matrix"):
        net.forward(np.zeros((2, 8)))
    with pytest.raises(ValueError, match="x has 7 features"):
        net.forward(np.zeros((2, 7), np.float32))
    with pytest.raises(ValueError, match="sizes must be"):
        ResidentMLP([8], Device("golden"))


def test_only_the_batch_logits_gradients_and_weights_cross(data, monkeypatch):
    """On the functional accelerator the bytes the host writes and reads in a step are
    those ``traffic`` records: the batch, the weights, the logits, the loss gradient and the
    gradients, and nothing else."""
    xtr, ytr, _, _ = data
    net = ResidentMLP([64, 32, 10], Device("model", rows=8, cols=8), seed=1)
    net.step(xtr[:32], ytr[:32])            # the first step also writes a row of ones, once
    moved = []
    write, read = DeviceTensor.write, DeviceTensor.numpy
    monkeypatch.setattr(DeviceTensor, "write",
                        lambda self, x: moved.append(x.nbytes) or write(self, x))
    monkeypatch.setattr(DeviceTensor, "numpy",
                        lambda self: (lambda out: moved.append(out.nbytes) or out)(read(self)))
    net.step(xtr[32:64], ytr[32:64])
    params = 4 * (64 * 32 + 32 + 32 * 10 + 10)
    assert net.traffic == {"input batch": 4 * 32 * 64, "weights": params,
                           "logits": 4 * 32 * 10, "loss gradient": 4 * 32 * 10,
                           "gradients": params}
    assert sum(moved) == sum(net.traffic.values())


def test_refuses_a_device_without_the_epilogue():
    with pytest.raises(ValueError, match="device: this model accelerator has no write-back "
                                         "epilogue"):
        ResidentMLP([8, 4], Device("model", epilogue=False))
    with pytest.raises(TypeError, match="device must be a firmware.Device"):
        ResidentMLP([8, 4], "golden")


def _train_on_device(dev, data, steps, batch=64, seed=3, lr=0.05):
    return _train(dev, data, steps, batch=batch, seed=seed, lr=lr, momentum=0.0,
                  optimizer="device")


def test_device_optimizer_golden_and_model_agree_and_only_batch_and_logits_cross(data):
    """With the optimiser on the device (DESC_EPILOGUE.SGD: the BFP8 weights and float32
    biases stepped in the weight gradients' epilogues) the golden model and the functional
    accelerator leave bit-identical weights, and per step the host writes the batch and
    the loss gradient and reads the logits, nothing else."""
    a, _ = _train_on_device(Device("golden"), data, 4)
    b, _ = _train_on_device(Device("model", rows=8, cols=8), data, 4)
    for (name, p), (_, q) in zip(a.params, b.params, strict=True):
        np.testing.assert_array_equal(p.view(np.uint32), q.view(np.uint32), err_msg=name)
    assert set(b.traffic) == {"input batch", "logits", "loss gradient"}
    assert b.traffic["input batch"] == 64 * 64 * 4 and b.traffic["logits"] == 64 * 10 * 4
    # the weights moved, and each is a BFP8 value (a mantissa times its tile's power of 2)
    c, _ = _train_on_device(Device("golden"), data, 0)
    assert not np.array_equal(a.params[0][1], c.params[0][1])


def test_device_optimizer_learns(data):
    """8-bit weights stepped by stochastic rounding learn digits (no momentum: a larger
    step than the host path's 0.05 with momentum 0.9)."""
    net, losses = _train_on_device(Device("golden"), data, 60, lr=0.5)
    assert np.mean(losses[-10:]) < 0.5 * np.mean(losses[:5])
    _, _, xte, yte = data
    assert (net.predict(xte) == yte).mean() > 0.85


def test_device_optimizer_refuses_momentum_and_a_device_without_sgd():
    with pytest.raises(ValueError, match="momentum must be 0"):
        ResidentMLP([8, 4], Device("golden"), optimizer="device")
    with pytest.raises(ValueError, match="optimizer must be"):
        ResidentMLP([8, 4], Device("golden"), optimizer="chip")


def test_device_optimizer_with_swa_averaged_by_the_host(data):
    """SWALP's average with the optimiser on the device: the host reads the weights once
    per averaging period (here a step) and averages them in float64; the average, written
    back (quantised to nearest), is what the network then computes with."""
    from firmware.ml.optim import SWA
    from sim.models import bfp
    xtr, ytr, xte, yte = data
    net, _ = _train_on_device(Device("golden"), data, 40, lr=0.5)
    swa = SWA(net.params)
    for s in range(5):
        i = s * 64
        net.step(xtr[i:i + 64], ytr[i:i + 64])
        swa.update(net.params)
    avg = swa.averaged()
    net.load_params(avg)
    for name, got in net.params:
        want = avg[name]
        if name.startswith("W"):
            want = bfp.dequantize_tiles(*bfp.quantize_tiles(want))
        np.testing.assert_array_equal(got, want, err_msg=name)
    assert (net.predict(xte) == yte).mean() > 0.85
    with pytest.raises(ValueError, match="W0 must be a float32 array of shape"):
        net.load_params({**avg, "W0": avg["W0"][:3]})


def test_load_params_on_the_host_path():
    net = ResidentMLP([8, 4], Device("golden"))
    values = {"W0": np.full((8, 4), 0.5, np.float32), "b0": np.ones(4, np.float32)}
    net.load_params(values)
    np.testing.assert_array_equal(net.params[0][1], values["W0"])
    np.testing.assert_array_equal(net.params[1][1], values["b0"])
    with pytest.raises(ValueError, match="b0 must be a float32 array"):
        net.load_params({"W0": values["W0"]})
