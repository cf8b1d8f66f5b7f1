"""A CNN trained with its whole step on the device (:class:`ResidentConvNet`): the
``golden`` and ``model`` backends' weights bit for bit; no host im2col, col2im or pooling;
only the batch, the logits and the loss gradient cross; it learns; layers it cannot run are
refused by name."""

import numpy as np
import pytest

from firmware import Device
from firmware.ml import data, nn, train
from firmware.ml.resident_conv import ResidentConvNet, stages_of


def _fashion_like(rng):
    """fashion-cnn's layers (firmware.ml.train) at a quarter of the channels."""
    return nn.Network([nn.Conv2d(1, 4, 3, rng, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                       nn.Conv2d(4, 8, 3, rng, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                       nn.Flatten(), nn.Linear(8 * 7 * 7, 16, rng), nn.ReLU(),
                       nn.Linear(16, 10, rng)])


def _same_params(pa, pb):
    """Two runs' parameters (``(name, array)`` pairs) the same bit for bit."""
    for (name, a), (_, b) in zip(pa, pb, strict=True):
        np.testing.assert_array_equal(a.view(np.uint32), b.view(np.uint32), err_msg=name)


def _no_host_layout(monkeypatch):
    def refuse(*_args, **_kw):
        raise AssertionError("the host ran a layer's layout or pooling")
    for cls, name in ((nn.Conv2d, "_cols"), (nn.Conv2d, "_col2im"), (nn.MaxPool2d, "forward"),
                      (nn.MaxPool2d, "backward"), (nn.GlobalAvgPool2d, "forward")):
        monkeypatch.setattr(cls, name, refuse)


def test_fashion_cnn_golden_and_model_bit_identical(monkeypatch):
    """Two steps of a fashion-cnn-shaped network on 28 x 28 images (batch 8): the same
    weights and biases bit for bit on both backends, the same losses; per step only the
    input batch, the logits and the loss gradient cross (the first layer runs over its
    input unfolded, so the batch is padded to a tile block of 32 images)."""
    rng = np.random.default_rng(0)
    net = _fashion_like(rng)
    x = rng.standard_normal((8, 1, 28, 28)).astype(np.float32)
    y = rng.integers(0, 10, 8)
    _no_host_layout(monkeypatch)
    runs = {}
    for dev in (Device("golden"), Device("model", rows=8, cols=8)):
        r = ResidentConvNet(net, (1, 28, 28), dev, seed=5, lr=0.05, weight_decay=1e-4)
        losses = [r.step(x, y) for _ in range(2)]
        assert r.stages[0].unfold is not None
        assert r.traffic == {"input batch": 4 * x.nbytes, "logits": 32 * 10 * 4,
                             "loss gradient": 32 * 10 * 4}
        runs[dev.backend] = (losses, r.params)
    (la, pa), (lb, pb) = runs["golden"], runs["model"]
    assert la == lb
    _same_params(pa, pb)
    # and the step changed every layer
    for (name, a), (_, w) in zip(pa, [(n, p) for layer in net.layers
                                      for n, p in layer.params.items()], strict=True):
        assert not np.array_equal(a, w), name


@pytest.mark.slow
def test_fashion_cnn_on_the_board_default_model_bit_identical(monkeypatch):
    """fashion-cnn itself (firmware.ml.train's) at batch 128, two steps on the functional
    model as the ZCU104's default and on the golden backend: the same losses, weights and
    biases bit for bit; no host im2col, col2im or pooling; per step only the input batch,
    the logits and the loss gradient cross. (About a minute and a half.)"""
    from sim.bench.host import board_device
    rng = np.random.default_rng(3)
    net = train.TASKS["fashion-cnn"].make(rng)
    x = rng.standard_normal((128, 1, 28, 28)).astype(np.float32)
    y = rng.integers(0, 10, 128)
    _no_host_layout(monkeypatch)
    runs = []
    for dev in (board_device("zcu104", memory=1 << 30), Device("golden")):
        r = ResidentConvNet(net, (1, 28, 28), dev, seed=5, lr=0.05, weight_decay=1e-4)
        losses = [r.step(x, y) for _ in range(2)]
        assert r.traffic == {"input batch": x.nbytes, "logits": 128 * 10 * 4,
                             "loss gradient": 128 * 10 * 4}
        runs.append((losses, r.params))
    (la, pa), (lb, pb) = runs
    assert la == lb
    _same_params(pa, pb)


def test_bias_in_the_weight_gradient_or_its_own_descriptor(monkeypatch):
    """A strided convolution, a pool and a classifier: each bias stepped by its layer's
    weight-gradient descriptor (DESC_CONV.BIAS_GRAD, where the device offers it) or by a 1 x
    1 weight gradient of its own (as on the RTL), the same weights and biases bit for bit,
    one descriptor a layer fewer."""
    rng = np.random.default_rng(4)
    net = nn.Network([nn.Conv2d(3, 8, 3, rng, stride=2, padding=1), nn.ReLU(),
                      nn.MaxPool2d(2), nn.Flatten(), nn.Linear(8 * 3 * 3, 5, rng)])
    x = rng.standard_normal((8, 3, 12, 12)).astype(np.float32)
    y = rng.integers(0, 5, 8)
    _no_host_layout(monkeypatch)
    runs = []
    for fused in (True, False):
        dev = Device("model", rows=4, cols=8)
        r = ResidentConvNet(net, (3, 12, 12), dev, seed=2, lr=0.1, weight_decay=1e-3,
                            record=False)
        assert r.fused_bias
        r.fused_bias = fused
        dev.sim.trace = trace = []
        losses = [r.step(x, y) for _ in range(2)]
        runs.append((losses, r.params, len(trace), sum(t["cycles"] for t in trace)))
    (la, pa, da, ca), (lb, pb, db, cb) = runs
    assert la == lb
    _same_params(pa, pb)
    assert db - da == 2 * 2 and ca < cb


def test_step_follows_float32_gradients():
    """One step with a large learning rate (so the update dwarfs the weights' quantum): every
    layer's change is the float32 network's gradient step (firmware.ml.nn on the host),
    correlation above 0.95 and size within 10 %. A wrong route (mask, argmax, kernel
    rotation, layout) decorrelates the layers below it."""
    rng = np.random.default_rng(0)
    _follows_float32(_fashion_like(rng), (1, 28, 28), 10, rng, seed=5)


def _follows_float32(net, shape, classes, rng, seed):
    """One step of ``net`` at learning rate 1 on the device against the float32 gradients
    of firmware.ml.nn on the host, layer by layer."""
    x = rng.standard_normal((16, *shape)).astype(np.float32)
    y = rng.integers(0, classes, 16)
    r = ResidentConvNet(net, shape, Device("golden"), seed=seed, lr=1.0)
    before = r.params
    r.step(x, y)
    eng = nn.Engine("fp32")
    _, grad = nn.softmax_cross_entropy(net.forward(x, eng), y)
    net.backward(grad, eng)
    grads = [layer.grads[k] for _, layer in stages_of(net, shape) for k in ("W", "b")]
    for (name, a), (_, b), g in zip(before, r.params, grads, strict=True):
        step, want = (b - a).ravel(), -g.ravel()
        assert np.corrcoef(step, want)[0, 1] > 0.95, name
        assert 0.9 < np.abs(step).sum() / np.abs(want).sum() < 1.1, name


def test_global_average_pool_and_strides_bit_identical(monkeypatch):
    """A strided convolution, a global average pool and a 1 x 1 classifier: both backends
    agree bit for bit."""
    rng = np.random.default_rng(1)
    net = nn.Network([nn.Conv2d(3, 8, 3, rng, stride=2, padding=1), nn.ReLU(),
                      nn.Conv2d(8, 8, 3, rng, padding=1), nn.ReLU(), nn.GlobalAvgPool2d(),
                      nn.Linear(8, 5, rng)])
    x = rng.standard_normal((6, 3, 9, 9)).astype(np.float32)
    y = rng.integers(0, 5, 6)
    _no_host_layout(monkeypatch)
    got = []
    for dev in (Device("golden"), Device("model", rows=4, cols=8)):
        r = ResidentConvNet(net, (3, 9, 9), dev, seed=2, lr=0.1)
        r.step(x, y)
        got.append(r.params)
    _same_params(*got)


def _resnet_like(rng):
    """ResNet-20's kinds of block: an identity shortcut, then a strided one through a 1 x 1
    convolution, a global average pool and a classifier."""
    return nn.Network([
        nn.Conv2d(3, 4, 3, rng, padding=1), nn.ReLU(),
        nn.Residual([nn.Conv2d(4, 4, 3, rng, padding=1), nn.ReLU(),
                     nn.Conv2d(4, 4, 3, rng, padding=1)]), nn.ReLU(),
        nn.Residual([nn.Conv2d(4, 8, 3, rng, stride=2, padding=1), nn.ReLU(),
                     nn.Conv2d(8, 8, 3, rng, padding=1)], [nn.Conv2d(4, 8, 1, rng, stride=2)]),
        nn.ReLU(), nn.GlobalAvgPool2d(), nn.Linear(8, 5, rng)])


def test_residual_blocks_bit_identical(monkeypatch):
    """Residual blocks (the shortcut added on the body's write path, the deltas summed on
    the backward-data one's): two steps agree bit for bit on both backends, the model's
    replayed from its recording; only the batch, the logits and the loss gradient cross."""
    rng = np.random.default_rng(3)
    net = _resnet_like(rng)
    stages = [st for st, _ in stages_of(net, (3, 8, 8))]
    assert [(st.src, st.add) for st in stages] == [(-1, None), (0, None), (1, 0), (2, None),
                                                   (2, None), (4, 3), (5, None)]
    x = rng.standard_normal((6, 3, 8, 8)).astype(np.float32)
    y = rng.integers(0, 5, 6)
    _no_host_layout(monkeypatch)
    runs = {}
    for dev in (Device("golden"), Device("model", rows=4, cols=8)):
        r = ResidentConvNet(net, (3, 8, 8), dev, seed=4, lr=0.1)
        assert r.recorded == (dev.backend == "model")
        losses = [r.step(x, y) for _ in range(2)]
        assert set(r.traffic) == {"input batch", "logits", "loss gradient"}
        runs[dev.backend] = (losses, r.params)
    (la, pa), (lb, pb) = runs["golden"], runs["model"]
    assert la == lb
    _same_params(pa, pb)


def test_residual_step_follows_float32_gradients():
    """One large-rate step of residual blocks: each layer's change is the float32
    network's gradient step (correlation above 0.95, size within 10 %). A shortcut's deltas
    dropped or summed in the wrong place decorrelates the layers below it."""
    rng = np.random.default_rng(4)
    _follows_float32(_resnet_like(rng), (3, 8, 8), 5, rng, seed=6)


def test_digits_cnn_learns():
    """digits-cnn (firmware.ml.train) trained on the device for two epochs reaches the
    accuracy its float32 training reaches."""
    x, y, xt, yt = data.digits(image=True)
    x, xt = x.astype(np.float32), xt.astype(np.float32)
    r = ResidentConvNet(train.TASKS["digits-cnn"].make(np.random.default_rng(0)), (1, 8, 8),
                        Device("model"), seed=3, lr=0.05)
    for epoch in range(2):
        perm = np.random.default_rng(epoch).permutation(len(x))
        for i in range(0, len(x) - 31, 32):
            r.step(x[perm[i:i + 32]], y[perm[i:i + 32]])
    assert (r.predict(xt) == yt).mean() > 0.8


def test_params_round_trip():
    """load_params(params) leaves the weights as they were; a bad array is named."""
    rng = np.random.default_rng(2)
    r = ResidentConvNet(_fashion_like(rng), (1, 28, 28), Device("golden"))
    before = r.params
    r.load_params(dict(before))
    for (name, a), (_, b) in zip(before, r.params, strict=True):
        np.testing.assert_array_equal(a, b, err_msg=name)
    with pytest.raises(ValueError, match="W1 must be a float32 array"):
        r.load_params(dict(before, W1=before[2][1][:, :3]))


@pytest.mark.parametrize("layers, match", [
    (lambda r: [nn.Residual([nn.Conv2d(1, 1, 3, r, padding=1), nn.ReLU()]), nn.Flatten(),
                nn.Linear(64, 2, r)], "layer 0 \\(Residual\\): its body must end in a"),
    (lambda r: [nn.Residual([nn.Conv2d(1, 2, 3, r, padding=1)]), nn.Flatten(),
                nn.Linear(128, 2, r)], "the body gives \\(2, 8, 8\\), the shortcut"),
    (lambda r: [nn.Residual([nn.Conv2d(1, 2, 3, r, padding=1)],
                            [nn.Conv2d(1, 2, 1, r), nn.ReLU()]), nn.Flatten(),
                nn.Linear(128, 2, r)], "layer 0: its ReLU's output is only added"),
    (lambda r: [nn.Conv2d(1, 2, 3, r, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                nn.Residual([nn.Conv2d(2, 2, 3, r, padding=1)]), nn.Flatten(),
                nn.Linear(32, 2, r)], "layer 0: its pooled output is read by 2 layers"),
    (lambda r: [nn.MaxPool2d(2), nn.Flatten(), nn.Linear(16, 2, r)], "a pool not right"),
    (lambda r: [nn.Flatten(), nn.Linear(64, 2, r), nn.ReLU()], "last layer"),
    (lambda r: [nn.Linear(64, 2, r)], "needs Flatten first"),
    (lambda r: [nn.Flatten(), nn.Linear(63, 2, r)], "takes 63 features"),
])
def test_layers_it_cannot_run_are_named(layers, match):
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match=match):
        stages_of(nn.Network(layers(rng)), (1, 8, 8))
    with pytest.raises(ValueError, match="exceeds DESC_CONV's kernel field"):
        stages_of(nn.Network([nn.Flatten(), nn.Linear(784, 2, rng)]), (1, 28, 28))


def test_bad_arguments_named():
    rng = np.random.default_rng(0)
    net = train.TASKS["digits-cnn"].make(rng)
    with pytest.raises(ValueError, match="seed must be"):
        ResidentConvNet(net, (1, 8, 8), Device("golden"), seed=-1)
    with pytest.raises(ValueError, match="need lr > 0"):
        ResidentConvNet(net, (1, 8, 8), Device("golden"), lr=0.0)
    with pytest.raises(ValueError, match="no write-back"):
        ResidentConvNet(net, (1, 8, 8), Device("model", rows=4, cols=4, epilogue=False))
    r = ResidentConvNet(net, (1, 8, 8), Device("golden"))
    with pytest.raises(TypeError, match="x must be a float32 \\(N, 1, 8, 8\\)"):
        r.step(np.zeros((2, 1, 8, 7), np.float32), np.zeros(2, int))


def test_training_harness_runs_the_step_on_the_device(tmp_path):
    """firmware.ml.train with blocks 'device': a CNN task trains through ResidentConvNet
    (its descriptors counted), with SWA, and a run stopped and resumed from its checkpoint
    ends with the uninterrupted run's weights."""
    from firmware.ml.train import TrainConfig, run
    cfg = TrainConfig(task="digits-cnn", precision="int8", blocks="device", momentum=0.0,
                      epochs=2, train_subset=192, swa=True, swa_every="iteration")
    full = run(cfg, backend="model", quiet=True)
    assert full["gemms"] > 0 and full["accelerator_cycles"] > 0
    assert 0.2 < full["test_metric"] <= 1.0
    run(cfg, backend="model", quiet=True, checkpoint=tmp_path, stop_after=1)
    resumed = run(cfg, backend="model", quiet=True, checkpoint=tmp_path, resume=True)
    assert resumed["weights_digest"] == full["weights_digest"]
    assert resumed["test_metric"] == full["test_metric"]
    with pytest.raises(ValueError, match="momentum must be 0"):
        TrainConfig(task="digits-cnn", precision="int8", blocks="device").check()
    with pytest.raises(ValueError, match="classifiers of images"):
        run(TrainConfig(task="digits-mlp", precision="int8", blocks="device", momentum=0.0,
                        epochs=1), quiet=True)


def test_unfolded_batches_padded_within_the_limits():
    """The first layer over its input unfolded pads batches to whole tile blocks: a batch or
    eval_batch whose padding would exceed 65535 images is refused naming the padding;
    unfold=False keeps the stacked layer and pads nothing; unfold=True where the first
    layer does not qualify (32 input channels) is refused."""
    rng = np.random.default_rng(1)
    net = _fashion_like(rng)
    with pytest.raises(ValueError, match="eval_batch: 65530 images, padded to whole tile"):
        ResidentConvNet(net, (1, 28, 28), Device("golden"), eval_batch=65530)
    r = ResidentConvNet(net, (1, 28, 28), Device("golden"), unfold=False)
    assert r.stages[0].unfold is None and r.stages[0].kernel == (3, 3)
    x = rng.standard_normal((8, 1, 28, 28)).astype(np.float32)
    r.step(x, rng.integers(0, 10, 8))
    assert r.traffic["input batch"] == x.nbytes
    wide = nn.Network([nn.Conv2d(32, 4, 3, rng, padding=1), nn.ReLU(), nn.Flatten(),
                       nn.Linear(4 * 4 * 4, 10, rng)])
    with pytest.raises(ValueError, match="unfold: the first layer"):
        ResidentConvNet(wide, (32, 4, 4), Device("golden"), unfold=True)
