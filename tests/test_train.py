"""The training runtime: layers, optimiser, checkpoints, the command line, and training on
the simulated accelerator (hardware in the loop)."""

import json

import numpy as np
import pytest

from firmware import Device, nn
from firmware.optim import SGD, SWA, swalp_lr
from firmware.train import TrainConfig, main, run


def _numeric_grad(f, x, eps=1e-3):
    g = np.zeros_like(x, dtype=np.float64)
    it = np.nditer(x, flags=["multi_index"])
    for _ in it:
        i = it.multi_index
        old = x[i]
        x[i] = old + eps
        hi = f()
        x[i] = old - eps
        lo = f()
        x[i] = old
        g[i] = (hi - lo) / (2 * eps)
    return g


@pytest.mark.parametrize("make", [
    lambda r: nn.Network([nn.Linear(5, 4, r), nn.ReLU(), nn.Linear(4, 3, r)]),
    lambda r: nn.Network([nn.Conv2d(2, 3, 3, r, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                          nn.Flatten(), nn.Linear(12, 3, r)]),
    lambda r: nn.Network([nn.Conv2d(1, 2, 3, r, stride=2), nn.Flatten(),
                          nn.Linear(8, 3, r)]),
], ids=["mlp", "cnn", "strided-conv"])
def test_fp32_gradients_match_finite_differences(make):
    rng = np.random.default_rng(0)
    net = make(rng)
    eng = nn.Engine("fp32")
    shape = (4, 5) if isinstance(net.layers[0], nn.Linear) else (
        (4, 2, 4, 4) if net.layers[0].cin == 2 else (4, 1, 5, 5))
    x = rng.normal(size=shape).astype(np.float64)
    y = rng.integers(0, 3, 4)
    for layer in net.layers:                       # float64 for the check
        for k in layer.params:
            layer.params[k] = layer.params[k].astype(np.float64)

    def loss():
        return nn.softmax_cross_entropy(net.forward(x, eng), y)[0]

    _, grad = nn.softmax_cross_entropy(net.forward(x, eng), y)
    dx = net.backward(grad.astype(np.float64), eng)
    np.testing.assert_allclose(dx, _numeric_grad(loss, x), rtol=1e-3, atol=1e-6)
    for layer in net.layers:
        for k, p in layer.params.items():
            np.testing.assert_allclose(layer.grads[k], _numeric_grad(loss, p), rtol=1e-3,
                                       atol=1e-6)


class _Recorder:
    """A stand-in Device that records the calls and computes them with the golden model."""

    def __init__(self):
        self.calls, self.inner, self.stats = [], Device("golden"), {}

    def gemm(self, a, b, **kw):
        self.calls.append((a.dtype, b.dtype, kw["transpose_a"], kw["transpose_b"],
                           np.ndim(kw["row_exp"]), np.ndim(kw["col_exp"])))
        out = self.inner.gemm(a, b, **kw)
        self.stats = self.inner.stats
        return out


def test_int8_runs_all_three_gemms_on_the_device_with_its_transposes():
    rng = np.random.default_rng(1)
    dev = _Recorder()
    layer = nn.Linear(6, 5, rng)
    eng = nn.Engine("int8", dev, rng=np.random.default_rng(2))
    y = layer.forward(rng.normal(size=(7, 6)).astype(np.float32), eng)
    layer.backward(np.ones_like(y), eng)
    assert dev.calls == [
        (np.int8, np.int8, False, False, 1, 0),    # forward: x per sample, W per layer
        (np.int8, np.int8, True, False, 1, 1),     # weight gradient: x^T dy, per feature
        (np.int8, np.int8, False, True, 1, 0),     # backward data: dy W^T
    ]


def test_swalp_schedule_and_averaging():
    assert swalp_lr(0, 0.1, 10, 0.01) == 0.1
    assert swalp_lr(7, 0.1, 10, 0.01) == pytest.approx(0.1 * (1 - 0.9 * 0.5))
    assert swalp_lr(12, 0.1, 10, 0.01) == 0.01
    w = np.zeros(3, np.float32)
    swa = SWA([("w", w)])
    for v in (1.0, 2.0, 6.0):
        w[:] = v
        swa.update([("w", w)])
    assert np.allclose(swa.averaged()["w"], 3.0)


def test_int8_optimizer_keeps_weights_on_the_8bit_grid():
    rng = np.random.default_rng(3)
    w = rng.normal(size=(4, 4)).astype(np.float32)
    opt = SGD([("w", w)], lr=0.1, weights="int8", rng=np.random.default_rng(4))
    opt.step([rng.normal(size=(4, 4)).astype(np.float32)])
    _, e = np.frexp(np.abs(w).max())
    step = 2.0 ** (e - 1 - 6)
    assert np.allclose(w / step, np.round(w / step))


def test_checkpoint_resume_is_bit_identical(tmp_path):
    cfg = dict(task="digits-mlp", precision="int8", swa=True, seed=5)
    full = run(TrainConfig(epochs=4, **cfg), quiet=True)
    # interrupted after two epochs, then resumed to four
    ck = tmp_path / "ck"
    run(TrainConfig(epochs=4, **cfg), quiet=True, checkpoint=ck, stop_after=2)
    assert not list(ck.glob(".*tmp*")), "a temporary checkpoint file was left behind"
    resumed = run(TrainConfig(epochs=4, **cfg), quiet=True, checkpoint=ck, resume=True)
    assert resumed["weights_digest"] == full["weights_digest"]
    assert resumed["history"] == full["history"]
    assert (resumed["gemms"], resumed["accelerator_cycles"]) == \
        (full["gemms"], full["accelerator_cycles"])
    with pytest.raises(ValueError, match="different configuration"):
        run(TrainConfig(epochs=5, **cfg), quiet=True, checkpoint=ck, resume=True)


def test_swa_every_iteration_and_8bit_weights_without_swa():
    from firmware import train
    counts = {}
    for every in ("epoch", "iteration"):
        r = train.build(TrainConfig(task="mnist-logreg", precision="int8", swa=True, epochs=4,
                                    swa_every=every))
        for _ in range(4):
            r.train_epoch()
        counts[every] = r.swa.count
    steps = -(-len(r.data[0]) // 64)
    assert counts == {"epoch": 2, "iteration": 2 * steps}     # epochs 3 and 4 averaged
    c = run(TrainConfig(task="mnist-logreg", precision="int8", weights="int8", epochs=1),
            quiet=True)
    assert 0.5 < c["test_metric"] <= 1
    with pytest.raises(ValueError, match="swa_every"):
        run(TrainConfig(task="mnist-logreg", swa_every="step"), quiet=True)


def test_command_line(tmp_path, capsys):
    out = tmp_path / "r.json"
    assert main(["--task", "rf-anomaly", "--precision", "int8", "--epochs", "2",
                 "--out", str(out)]) == 0
    result = json.loads(out.read_text())
    assert result["task"] == "rf-anomaly" and result["metric"] == "f1"
    assert len(result["history"]) == 2 and 0 <= result["test_metric"] <= 1
    assert result["gemms"] > 0
    for bad in (["--task", "nope", "--epochs", "1"], ["--task", "digits-mlp", "--epochs", "0"],
                ["--task", "digits-mlp", "--epochs", "1", "--resume"],
                ["--task", "digits-mlp", "--epochs", "1", "--precision", "fp32", "--swa"]):
        with pytest.raises(SystemExit) as e:
            main(bad)
        assert e.value.code == 2


def test_hardware_in_the_loop_rtl_equals_golden():
    """One epoch of int8 digits-mlp (batch 64, 256 samples) on the simulated accelerator
    gives weights bit-identical to the golden backend with the same seed."""
    cfg = dict(task="digits-mlp", precision="int8", epochs=1, seed=3, batch=64)
    results = {}
    for backend in ("golden", "rtl"):
        from firmware import train
        r = train.build(TrainConfig(**cfg), backend, 8, 8)
        r.data = tuple(a[:256] for a in r.data)
        r.train_epoch()
        results[backend] = (train._digest(r.net), r.eng.cycles, r.eng.gemms)
    assert results["rtl"][0] == results["golden"][0]
    assert results["rtl"][2] == results["golden"][2] == 4 * 3 * 2
    assert results["rtl"][1] > 0 and results["golden"][1] == 0
