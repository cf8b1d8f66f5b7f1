"""The training runtime: layers, optimiser, checkpoints, the command line, and training on
the simulated accelerator (hardware in the loop)."""

import json

import numpy as np
import pytest

from firmware import Device
from firmware.ml import nn
from firmware.ml.optim import SGD, SWA, schedule_lr, swalp_lr
from firmware.ml.train import TrainConfig, main, run


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
    dx = net.backward(grad.astype(np.float64), eng, need_input_grad=True)
    np.testing.assert_allclose(dx, _numeric_grad(loss, x), rtol=1e-3, atol=1e-6)
    for layer in net.layers:
        for k, p in layer.params.items():
            np.testing.assert_allclose(layer.grads[k], _numeric_grad(loss, p), rtol=1e-3,
                                       atol=1e-6)


class _Recorder:
    """A stand-in Device that records the calls and computes them with the golden model."""

    def __init__(self):
        self.inner = Device("golden")
        self.calls, self.uploads, self.stats, self.profile = [], [], {}, None
        self.queued = []                # GEMMs per device run

    def tensor(self, x, into=None):
        self.uploads.append(x.shape)
        return self.inner.tensor(x, into=into)

    def gemms(self, calls):
        for kw in calls:
            self.calls.append((kw["a"].dtype, kw["b"].dtype, kw["transpose_a"],
                               kw["transpose_b"], np.ndim(kw["row_exp"]),
                               np.ndim(kw["col_exp"]), len(set(kw["k_exp"].tolist()))))
        self.queued.append(len(calls))
        self.inner.profile = self.profile
        out = self.inner.gemms(calls)
        self.stats = self.inner.stats
        return out


def test_int8_runs_the_three_gemms_on_the_device_quantising_each_tensor_once():
    rng = np.random.default_rng(1)
    dev = _Recorder()
    layer = nn.Linear(6, 5, rng)
    eng = nn.Engine("int8", dev, rng=np.random.default_rng(2))
    x = rng.uniform(1, 1.9, (7, 6)) * np.exp2(2 * np.arange(7))[:, None]   # exponents 2i
    y = layer.forward(x.astype(np.float32), eng)
    layer.backward(np.ones_like(y), eng)
    assert dev.calls == [
        (np.int8, np.int8, False, False, 1, 0, 1),  # forward: x per sample, W per tensor
        (np.int8, np.int8, True, False, 0, 0, 7),   # weight gradient: x^T dy, 7 blocks along K
        (np.int8, np.int8, False, True, 1, 0, 1),   # backward data: dy W^T
    ]
    # x, W in the forward pass, dy once in the backward pass: three uploads, no more
    assert dev.uploads == [(7, 6), (6, 5), (7, 5)]
    assert dev.queued == [1, 2]      # the backward pass's two GEMMs queued together


def test_fox_blocks_put_the_per_sample_exponents_of_the_weight_gradient_along_k():
    rng = np.random.default_rng(3)
    dev = _Recorder()
    net = nn.Network([nn.Linear(6, 5, rng), nn.ReLU(), nn.Linear(5, 3, rng)])
    eng = nn.Engine("int8", dev, rng=np.random.default_rng(2))
    x = (rng.normal(size=(8, 6)) * np.exp2(rng.integers(-4, 4, (8, 1)))).astype(np.float32)
    out = net.forward(x, eng)
    _, grad = nn.softmax_cross_entropy(out, rng.integers(0, 3, 8))
    assert net.backward(grad, eng) is None          # the first layer's dx is not computed
    kinds = [(c[2], c[3]) for c in dev.calls]
    assert kinds == [(False, False), (False, False),      # forward, two layers
                     (True, False), (False, True),        # layer 2: wgrad, backward-data
                     (True, False)]                       # layer 1: wgrad only
    assert dev.calls[2][6] > 1 and dev.calls[4][6] > 1    # several K blocks: per sample
    assert dev.queued == [1, 1, 2, 1]
    big = nn.Engine("int8", dev, rng=np.random.default_rng(2), blocks=nn.BIG_BLOCK)
    dev.calls = []
    net.forward(x, big)
    net.backward(grad, big)
    assert all(c[4:] == (0, 0, 1) for c in dev.calls)     # one block: one descriptor each


def test_engine_close_frees_its_device_buffers_and_the_engine_goes_on():
    """close() hands every buffer the engine kept back to the pool, twice is harmless, and
    a step interrupted by it (forward before, backward after) gives the uninterrupted
    step's gradients, its operands uploaded again."""
    rng = np.random.default_rng(4)
    x = rng.normal(size=(8, 6)).astype(np.float32)
    grads = []
    for interrupt in (False, True):
        dev = Device("model", rows=4, cols=4)
        net = nn.Network([nn.Linear(6, 5, np.random.default_rng(1)), nn.ReLU(),
                          nn.Linear(5, 3, np.random.default_rng(2))])
        eng = nn.Engine("int8", dev, rng=np.random.default_rng(3))
        out = net.forward(x, eng)
        assert dev.pool.live > 0                   # x and W of each layer kept on the device
        if interrupt:
            eng.close()
            assert dev.pool.live == 0
            eng.close()
            assert dev.pool.live == 0
        _, grad = nn.softmax_cross_entropy(out, np.arange(8) % 3)
        net.backward(grad, eng)
        grads.append([g.tobytes() for g in net.gradients()])
        eng.close()
        dev.close()
        assert dev.pool.live == 0 and dev.pool.held == 0
    assert grads[0] == grads[1]


def test_swalp_schedule_and_averaging():
    # SWALP (Yang et al. 2019): lr0 to half the budget, linear to 0.01 lr0 at 90 %, constant
    # to the budget's end, then the averaging phase at swa_lr
    lr0, budget, swa_lr = 0.1, 10, 0.01
    assert swalp_lr(0, lr0, budget, swa_lr) == lr0                      # start
    assert swalp_lr(5, lr0, budget, swa_lr) == lr0                      # 50 %
    assert swalp_lr(7, lr0, budget, swa_lr) == pytest.approx(lr0 * (1 - 0.99 * 0.5))
    assert swalp_lr(9, lr0, budget, swa_lr) == pytest.approx(0.01 * lr0)  # 90 %
    assert swalp_lr(9.5, lr0, budget, swa_lr) == pytest.approx(0.01 * lr0)
    assert swalp_lr(10, lr0, budget, swa_lr) == swa_lr                  # averaging phase
    assert swalp_lr(12, lr0, budget, swa_lr) == swa_lr
    assert swalp_lr(12, lr0, budget) == pytest.approx(0.01 * lr0)       # no averaging
    assert [schedule_lr("constant", e, lr0, budget, swa_lr) for e in (0, 9, 10)] == \
        [lr0, lr0, swa_lr]
    assert schedule_lr("constant", 12, lr0, budget) == lr0
    with pytest.raises(ValueError, match="schedule"):
        schedule_lr("cosine", 0, lr0, budget)
    with pytest.raises(ValueError, match="budget"):
        swalp_lr(0, lr0, 0)
    w = np.zeros(3, np.float32)
    swa = SWA([("w", w)])
    for v in (1.0, 2.0, 6.0):
        w[:] = v
        swa.update([("w", w)])
    assert np.allclose(swa.averaged()["w"], 3.0)



@pytest.mark.parametrize("schedule", ["swalp", "constant"])
def test_every_arm_runs_the_same_schedule_until_the_averaging_phase(schedule):
    """fp32 SGD, int8 SGD, fp32 SWA and int8 SWALP see the same learning rate over the
    pre-averaging budget (15 of 20 epochs); the averaging arms then run at swa_lr."""
    from firmware.ml import train
    arms = {(p, swa): train.build(TrainConfig(task="digits-mlp", precision=p, swa=swa,
                                              epochs=20, schedule=schedule))
            for p in ("fp32", "int8") for swa in (False, True)}
    lrs = {}
    for arm, r in arms.items():
        assert r.swa_start == 15
        lrs[arm] = []
        for e in range(20):
            r.epoch = e
            lrs[arm].append(r.lr())
    lr0 = train.TASKS["digits-mlp"].lr
    for arm, curve in lrs.items():
        assert curve[:15] == lrs[("fp32", False)][:15], arm
        assert curve[15:] == [0.1 * lr0 if arm[1] else lrs[("fp32", False)][14]] * 5, arm
    curve = lrs[("int8", True)]
    if schedule == "swalp":
        assert curve[:8] == [lr0] * 8                       # t = e / 15 <= 0.5
        assert curve[10] == pytest.approx(lr0 * (1 - 0.99 * (10 / 15 - 0.5) / 0.4))
        assert curve[14] == pytest.approx(0.01 * lr0)       # t > 0.9
    else:
        assert curve[:15] == [lr0] * 15
    with pytest.raises(ValueError, match="schedule"):
        train.build(TrainConfig(schedule="cosine"))
    with pytest.raises(ValueError, match="swa_lr"):
        train.build(TrainConfig(swa=True, swa_lr=-1.0))


def test_the_history_records_the_schedule_and_resume_keeps_it(tmp_path):
    cfg = dict(task="digits-mlp", precision="fp32", epochs=4, seed=2, swa=True, swa_lr=0.02)
    full = run(TrainConfig(**cfg), quiet=True)
    lrs = [swalp_lr(e, 0.05, 3, 0.02) for e in range(4)]
    assert [h["lr"] for h in full["history"]] == pytest.approx(lrs)
    assert lrs[0] == 0.05 and lrs[3] == 0.02 and lrs[1] > lrs[2] > 0.02
    run(TrainConfig(**cfg), quiet=True, checkpoint=tmp_path, stop_after=3)
    resumed = run(TrainConfig(**cfg), quiet=True, checkpoint=tmp_path, resume=True)
    assert resumed["weights_digest"] == full["weights_digest"]
    assert resumed["history"] == full["history"]

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
    from firmware.ml import train
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
        from firmware.ml import train
        r = train.build(TrainConfig(**cfg), backend, 8, 8)
        r.data = tuple(a[:256] for a in r.data)
        r.train_epoch()
        results[backend] = (train._digest(r.net.parameters()), r.eng.cycles, r.eng.gemms)
    assert results["rtl"][0] == results["golden"][0]
    # 4 steps of 5 GEMMs (two layers of 3, less the first layer's backward-data)
    assert results["rtl"][2] == results["golden"][2] == 4 * 5
    assert results["rtl"][1] > 0 and results["golden"][1] == 0


def test_max_pool_sends_the_gradient_to_the_first_maximum():
    """MaxPool2d against a direct loop over windows, ties included (the gradient goes to the
    first maximum in row-major order, once)."""
    rng = np.random.default_rng(5)
    x = rng.integers(-2, 3, (3, 2, 6, 4)).astype(np.float32)   # many ties
    dy = rng.standard_normal((3, 2, 3, 2)).astype(np.float32)
    pool = nn.MaxPool2d(2)
    y = pool.forward(x, None)
    dx = pool.backward(dy, None)
    want_y = np.zeros_like(dy)
    want_dx = np.zeros_like(x)
    for idx in np.ndindex(*dy.shape):
        n, c, i, j = idx
        win = x[n, c, 2 * i:2 * i + 2, 2 * j:2 * j + 2]
        want_y[idx] = win.max()
        first = int(np.argmax(win.ravel() == win.max()))
        want_dx[n, c, 2 * i + first // 2, 2 * j + first % 2] = dy[idx]
    assert np.array_equal(y, want_y)
    assert np.array_equal(dx, want_dx)
