"""``firmware.torch.train_on_device``: a torch CNN trained with its whole step on the device,
bit for bit the network it converts to; per-layer calls, named, where a layer cannot run
there."""

import numpy as np
import pytest
import torch

import firmware.torch as ft
from firmware import Device
from firmware.ml.resident_conv import ResidentConvNet
from firmware.torch.step import to_network


def _model():
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Conv2d(1, 4, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(4, 8, 3, stride=2, padding=1), torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(8, 5))


def _batch(n=6, seed=1):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, 1, 12, 12, generator=g), torch.randint(0, 5, (n,), generator=g)


def test_whole_step_recorded_and_bit_identical():
    """The model's step runs recorded on the model backend; after two steps its weights
    (synced into the torch Parameters) are those of ResidentConvNet on the converted network
    bit for bit, and its logits match torch's forward of the synced model."""
    model = _model()
    x, y = _batch()
    trainer = ft.train_on_device(model, Device("model", rows=4, cols=8), (1, 12, 12),
                                 lr=0.1, seed=3)
    assert trainer.plan.resident and trainer.plan.recorded, trainer.plan
    assert "the whole step on the device (recorded and replayed)" in str(trainer.plan)
    net, _ = to_network(_model())
    ref = ResidentConvNet(net, (1, 12, 12), Device("golden"), seed=3, lr=0.1)
    for _ in range(2):
        assert trainer.step(x, y) == ref.step(x.numpy(), y.numpy())
    trainer.sync()
    got = [p.detach().numpy() for p in model.parameters()]
    want = [v for _, v in ref.params]
    for g, (name, w) in zip(got, ref.params, strict=True):
        w = w.T.reshape(g.shape) if name.startswith("W") else w
        np.testing.assert_array_equal(g, w, err_msg=name)
    assert len(got) == len(want)
    # (the synced float32 model computes what the device does, up to its quantisation)
    with torch.no_grad():
        torch_logits = model(x)
    dev_logits = trainer.logits(x)
    assert torch.corrcoef(torch.stack([torch_logits.ravel(), dev_logits.ravel()]))[0, 1] > 0.95


def test_conversion_computes_the_models_forward_pass():
    """The converted network (firmware.ml.nn, float32 on the host) gives torch's logits:
    the weights' layouts and the layers' order are the model's."""
    from firmware.ml import nn
    model = _model()
    x, _ = _batch()
    net, sources = to_network(model)
    assert [type(m).__name__ if m is not None else None for m in sources] == [
        "Conv2d", None, None, "Conv2d", None, None, "Linear"]
    with torch.no_grad():
        want = model(x).numpy()
    np.testing.assert_allclose(net.forward(x.numpy(), nn.Engine("fp32")), want, rtol=1e-4,
                               atol=1e-5)


@pytest.mark.parametrize("layer, features, why", [
    (lambda: torch.nn.Conv2d(1, 4, 3, padding=1, bias=False), 4 * 12 * 12, "no bias"),
    (lambda: torch.nn.Conv2d(1, 4, 3, padding=1, dilation=2), 4 * 10 * 10, "dilation"),
    (lambda: torch.nn.BatchNorm2d(1), 12 * 12, "no counterpart on the device"),
])
def test_unsupported_layers_fall_back_named(layer, features, why):
    """A layer the device's step cannot run: the trainer falls back to per-layer calls
    (firmware.torch.convert, 8-bit SGD), names the layer and the reason, and still trains."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(layer(), torch.nn.Flatten(), torch.nn.Linear(features, 5))
    trainer = ft.train_on_device(model, Device("golden"), (1, 12, 12), lr=0.05)
    assert not trainer.plan.resident
    assert "layer '0'" in trainer.plan.reason and why in trainer.plan.reason
    assert str(trainer.plan).startswith("per-layer calls")
    x, y = _batch()
    before = [p.detach().clone() for p in trainer.model.parameters()]
    trainer.step(x, y)
    assert any(not torch.equal(a, b) for a, b in zip(before, trainer.model.parameters(),
                                                    strict=True))


def test_bad_arguments_named():
    with pytest.raises(TypeError, match="model must be a torch.nn.Module"):
        ft.train_on_device([torch.nn.ReLU()], Device("golden"), (1, 4, 4), lr=0.1)
    with pytest.raises(ValueError, match="need lr > 0"):
        ft.train_on_device(_model(), Device("golden"), (1, 12, 12), lr=0.0)
    trainer = ft.train_on_device(_model(), Device("golden"), (1, 12, 12), lr=0.1)
    x, y = _batch()
    with pytest.raises(TypeError, match="y must be an integer"):
        trainer.step(x, y.float())
    with pytest.raises(TypeError, match="x must be a floating-point"):
        trainer.step(x.int(), y)
