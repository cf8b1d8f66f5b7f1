"""firmware.torch.ResidentSequential: a fully connected torch model trained with its
activations, masks and deltas on the device, bit for bit as firmware.ml.resident.ResidentMLP."""

import copy

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="PyTorch is the optional extra 'torch': "
                                            "pip install -e '.[torch]'")

import firmware.torch as ft  # noqa: E402
from firmware import Device  # noqa: E402
from firmware.ml.data import digits  # noqa: E402
from firmware.ml.nn import softmax_cross_entropy  # noqa: E402
from firmware.ml.resident import ResidentMLP  # noqa: E402
from firmware.runtime.device import DeviceTensor  # noqa: E402
from sim.models import bfp  # noqa: E402

SIZES, BATCH, LR, SEED = [64, 32, 10], 32, 0.05, 3


@pytest.fixture(scope="module")
def data():
    xtr, ytr, xte, yte = digits()
    return xtr.astype(np.float32), ytr, xte.astype(np.float32), yte


def _batch(data, s):
    xtr, ytr = data[:2]
    i = (s * BATCH) % (len(xtr) - BATCH)
    return xtr[i:i + BATCH], ytr[i:i + BATCH]


def _model(ref: ResidentMLP, flatten=False) -> torch.nn.Sequential:
    """A torch Sequential holding ResidentMLP's initial weights (torch's out x in layout)."""
    layers = [torch.nn.Flatten()] if flatten else []
    p = [a for _, a in ref.params]
    for i, (w, b) in enumerate(zip(p[::2], p[1::2], strict=True)):
        lin = torch.nn.Linear(*w.shape)
        with torch.no_grad():
            lin.weight.copy_(torch.from_numpy(w.T.copy()))
            lin.bias.copy_(torch.from_numpy(b))
        layers += [lin] + ([torch.nn.ReLU()] if i < len(p) // 2 - 1 else [])
    return torch.nn.Sequential(*layers)


def _step(model, opt, x, y, image=False):
    """One step whose loss gradient is ResidentMLP's (softmax_cross_entropy's) exactly."""
    opt.zero_grad()
    xt = torch.from_numpy(x.reshape(-1, 1, 8, 8) if image else x)
    logits = model(xt)
    loss, grad = softmax_cross_entropy(logits.detach().numpy(), y)
    (logits * torch.from_numpy(grad)).sum().backward()
    opt.step()
    return loss


def _weights(model):
    """The master weights in ResidentMLP's order and layout (W as in x out)."""
    out = []
    for m in model.children():
        if isinstance(m, torch.nn.Linear):
            out += [m.weight.detach().numpy().T, m.bias.detach().numpy()]
    return out


def _step_bytes(sizes=SIZES, batch=BATCH):
    """What one step must move: batch and logits, loss gradient, weights and gradients."""
    params = sum(4 * (i * o + o) for i, o in zip(sizes, sizes[1:], strict=False))
    return {"input batch": 4 * batch * sizes[0], "weights": params,
            "logits": 4 * batch * sizes[-1], "loss gradient": 4 * batch * sizes[-1],
            "gradients": params}


def _train_pair(data, device, steps=3, seed=SEED, flatten=False):
    """ResidentMLP and a ResidentSequential with its initial weights (drawn with SEED),
    trained side by side; ``seed`` seeds the latter's descriptors."""
    ref = ResidentMLP(SIZES, Device("golden"), seed=SEED, lr=LR)
    rs = ft.ResidentSequential(_model(ref, flatten), device, seed=seed)
    opt = ft.SGD(rs.parameters(), lr=LR, momentum=0.9, weights="fp32")
    for s in range(steps):
        x, y = _batch(data, s)
        loss, ref_loss = _step(rs, opt, x, y, image=flatten), ref.step(x, y)
        assert seed != SEED or loss == ref_loss
    return ref, rs


@pytest.mark.parametrize("backend", ["golden", "model"])
def test_same_weights_as_resident_mlp(data, backend):
    """With ResidentMLP's initial weights, seed, data and loss gradient, and the same plain
    SGD, the torch module trains to the same weights bit for bit, on golden and on the
    functional accelerator; a step moves exactly the batch, logits, loss gradient, weights
    and gradients."""
    dev = Device(backend) if backend == "golden" else Device("model", rows=8, cols=8)
    ref, rs = _train_pair(data, dev, flatten=backend == "model")
    for (name, p), q in zip(ref.params, _weights(rs), strict=True):
        np.testing.assert_array_equal(p.view(np.uint32), q.view(np.uint32), err_msg=name)
    assert rs.traffic == ref.traffic == _step_bytes()
    assert rs.passes == ref.chain.passes == 3


def test_the_seed_matters(data):
    """From the same initial weights, another seed gives other weights (the rounding is
    stochastic and seeded per descriptor); the same seed gives the same ones."""
    a = _weights(_train_pair(data, Device("golden"), 2)[1])
    b = _weights(_train_pair(data, Device("golden"), 2)[1])
    c = _weights(_train_pair(data, Device("golden"), 2, seed=SEED + 1)[1])
    assert all(np.array_equal(p, q) for p, q in zip(a, b, strict=True))
    assert not np.array_equal(a[0], c[0])


def _count_crossings(monkeypatch):
    """Count the bytes written to and read from device memory by the host."""
    moved = {"bytes": 0}
    write, read = DeviceTensor.write, DeviceTensor.numpy

    def counted_write(self, x):
        moved["bytes"] += x.nbytes
        return write(self, x)

    def counted_read(self):
        out = read(self)
        moved["bytes"] += out.nbytes
        return out
    monkeypatch.setattr(DeviceTensor, "write", counted_write)
    monkeypatch.setattr(DeviceTensor, "numpy", counted_read)
    return moved


def test_only_the_batch_logits_gradients_and_weights_cross(data, monkeypatch):
    """On the functional accelerator the bytes the host actually writes and reads in a
    training step are those ``traffic`` records, and no others."""
    ref = ResidentMLP(SIZES, Device("golden"), seed=SEED)
    rs = ft.ResidentSequential(_model(ref), Device("model", rows=8, cols=8), seed=SEED)
    opt = torch.optim.SGD(rs.parameters(), lr=LR)
    _step(rs, opt, *_batch(data, 0))        # the first step also writes a row of ones, once
    moved = _count_crossings(monkeypatch)
    _step(rs, opt, *_batch(data, 1))
    assert moved["bytes"] == sum(rs.traffic.values()) == sum(_step_bytes().values())


def test_it_learns_with_a_torch_optimiser(data):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 32), torch.nn.ReLU(),
                                torch.nn.Linear(32, 10))
    rs = ft.ResidentSequential(model, Device("golden"), seed=1)
    opt = torch.optim.SGD(rs.parameters(), lr=0.05, momentum=0.9)
    losses = []
    for s in range(60):
        x, y = _batch(data, s)
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(rs(torch.from_numpy(x)), torch.from_numpy(y))
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert np.mean(losses[-10:]) < 0.5 * np.mean(losses[:5])
    rs.eval()
    _, _, xte, yte = data
    with torch.no_grad():
        assert (rs(torch.from_numpy(xte)).argmax(1).numpy() == yte).mean() > 0.85


def test_eval_rounds_to_nearest(data):
    """eval(): ResidentMLP's inference logits bit for bit, the same every call, no pass
    counted; train() without grad: stochastic, a new pass (new seeds) every call."""
    ref = ResidentMLP(SIZES, Device("golden"), seed=SEED)
    rs = ft.ResidentSequential(_model(ref), Device("golden"), seed=SEED).eval()
    x, _ = _batch(data, 0)
    y1, y2 = rs(torch.from_numpy(x)), rs(torch.from_numpy(x))
    assert torch.equal(y1, y2) and torch.equal(y1, torch.from_numpy(ref.forward(x)))
    assert rs.passes == 0
    rs.train()
    with torch.no_grad():
        t1, t2 = rs(torch.from_numpy(x)), rs(torch.from_numpy(x))
    assert rs.passes == 2 and not torch.equal(t1, t2)


def test_frozen_layers_input_gradient_and_no_bias(data):
    """A frozen layer's gradients are skipped, the others' unchanged; an input that
    requires grad gets one (one more GEMM, read back as 'input gradient'); a Linear may
    have no bias and no ReLU after it."""
    ref = ResidentMLP(SIZES, Device("golden"), seed=SEED)
    x, y = _batch(data, 0)
    _, grad = softmax_cross_entropy(ref.forward(x), y)

    def grads(model, xt):
        rs = ft.ResidentSequential(model, Device("golden"), seed=SEED)
        (rs(xt) * torch.from_numpy(grad)).sum().backward()
        return rs, [None if p.grad is None else p.grad.clone() for p in model.parameters()]

    _, full = grads(_model(ref), torch.from_numpy(x))
    frozen = _model(ref)
    frozen[0].weight.requires_grad_(False)
    xt = torch.from_numpy(x).requires_grad_()
    rs, part = grads(frozen, xt)
    assert part[0] is None and all(torch.equal(a, b) for a, b in zip(full[1:], part[1:],
                                                                        strict=True))
    assert xt.grad.shape == xt.shape and rs.traffic["input gradient"] == x.nbytes
    # one layer, rounding to nearest: dx = Q(dy) Q(W)ᵀ (BFP8 tile blocks, float32 out)
    one = torch.nn.Sequential(torch.nn.Linear(64, 10))
    rs = ft.ResidentSequential(one, Device("golden")).eval()
    xt = torch.from_numpy(x).requires_grad_()
    (rs(xt) * torch.from_numpy(grad)).sum().backward()
    q = [bfp.dequantize_tiles(*bfp.quantize_tiles(a)) for a in (grad, one[0].weight.detach()
                                                                 .numpy().T.copy())]
    np.testing.assert_allclose(xt.grad.numpy(), q[0] @ q[1].T, rtol=1e-5, atol=1e-7)
    plain = torch.nn.Sequential(torch.nn.Linear(64, 32, bias=False), torch.nn.Linear(32, 10))
    rs = ft.ResidentSequential(plain, Device("golden"))
    assert rs.chain.relu == [False]
    rs(torch.from_numpy(x)).sum().backward()
    assert plain[0].weight.grad is not None and plain[1].bias.grad is not None


def test_a_module_like_its_sequential():
    """Same state_dict keys and Parameters as the source Sequential; copies (AveragedModel)
    share the device; to_sequential gives the float32 torch model back."""
    seq = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(64, 32), torch.nn.ReLU(),
                              torch.nn.Linear(32, 10))
    dev = Device("golden")
    rs = ft.ResidentSequential(seq, dev, seed=5)
    assert list(rs.state_dict()) == list(seq.state_dict())
    assert all(p is q for p, q in zip(rs.parameters(), seq.parameters(), strict=True))
    rs.load_state_dict(seq.state_dict())
    avg = torch.optim.swa_utils.AveragedModel(rs)
    assert avg.module.chain.device is dev and avg.module.chain is not rs.chain
    assert copy.deepcopy(rs).chain.seed == 5
    x = torch.randn(4, 1, 8, 8)
    assert torch.equal(rs.to_sequential()(x), seq(x))


def test_one_backward_per_forward():
    rs = ft.ResidentSequential(torch.nn.Sequential(torch.nn.Linear(8, 4)), Device("golden"))
    y = rs(torch.randn(3, 8)).sum()
    y.backward(retain_graph=True)
    with pytest.raises(RuntimeError, match="one backward pass"):
        y.backward()
    w = rs.get_submodule("0").weight
    with pytest.raises(RuntimeError, match="double backward"):
        torch.autograd.grad(rs(torch.randn(3, 8)).sum(), [w], create_graph=True)


def _relu():
    return torch.nn.ReLU()


def _lin(i, o):
    return torch.nn.Linear(i, o)


BAD_MODELS = [
    ([_lin(8, 4), torch.nn.Tanh(), _lin(4, 2)], "'1' \\(Tanh\\) is not Linear, ReLU"),
    ([_lin(8, 4), _relu()], "'1' \\(ReLU\\) is last"),
    ([_relu(), _lin(8, 4)], "'0' \\(ReLU\\): a ReLU must follow a Linear"),
    ([_lin(8, 4), _relu(), _relu(), _lin(4, 2)], "'2' \\(ReLU\\): a ReLU must follow"),
    ([_lin(8, 4), _relu(), _lin(5, 2)], "'2' \\(Linear\\) takes 5 features, but the layer "
                                        "before gives 4"),
    ([_lin(8, 4), torch.nn.Flatten(), _lin(4, 2)], "'1' \\(Flatten\\): a Flatten may only"),
    ([torch.nn.Flatten(2), _lin(8, 4)], "'0' \\(Flatten\\): a Flatten may only"),
    ([torch.nn.Flatten()], "model has no Linear layer"),
]


@pytest.mark.parametrize("layers,match", BAD_MODELS)
def test_bad_models(layers, match):
    with pytest.raises(ValueError, match=match):
        ft.ResidentSequential(torch.nn.Sequential(*layers), Device("golden"))


def test_bad_arguments():
    seq = torch.nn.Sequential(_lin(8, 4), _relu(), _lin(4, 2))
    with pytest.raises(TypeError, match="model must be a torch.nn.Sequential"):
        ft.ResidentSequential(list(seq), Device("golden"))
    with pytest.raises(TypeError, match="device must be a firmware.Device"):
        ft.ResidentSequential(seq, "golden")
    with pytest.raises(ValueError, match="device: this model accelerator has no write-back "
                                         "epilogue"):
        ft.ResidentSequential(seq, Device("model", epilogue=False))
    with pytest.raises(ValueError, match="seed must be an integer in"):
        ft.ResidentSequential(seq, Device("golden"), seed=-1)
    with pytest.raises(TypeError, match="parameter 0.weight is torch.float64"):
        ft.ResidentSequential(copy.deepcopy(seq).double(), Device("golden"))
    rs = ft.ResidentSequential(seq, Device("golden"))
    with pytest.raises(TypeError, match="x must be a floating-point torch.Tensor"):
        rs(torch.zeros(2, 8, dtype=torch.int64))
    with pytest.raises(ValueError, match="x must be batch x features"):
        rs(torch.zeros(2, 2, 8))
    with pytest.raises(ValueError, match="x has 7 features, the network takes 8"):
        rs(torch.zeros(2, 7))
