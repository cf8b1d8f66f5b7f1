"""The PyTorch front end (firmware.torch): fp32 mode against torch's own layers and finite
differences, int8 mode against firmware.ml.nn and golden against rtl bit for bit, convert(), the
8-bit optimiser, weight averaging, argument checks."""

import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="PyTorch is the optional extra 'torch': "
                                            "pip install -e '.[torch]'")

import firmware.torch as ft  # noqa: E402
from firmware import Device  # noqa: E402
from firmware.ml import nn, optim  # noqa: E402
from firmware.ml.quant import quantize  # noqa: E402

F = torch.nn.functional


def _same(a, b):
    return a.shape == b.shape and a.dtype == b.dtype and torch.equal(a, b)


@pytest.fixture(scope="module")
def golden():
    return Device("golden")


@pytest.fixture(scope="module")
def rtl():
    return Device("rtl", rows=8, cols=8)


# -- fp32 mode: torch's own layers, finite differences -------------------------------------
LINEARS = [dict(), dict(bias=False)]
CONVS = [dict(kernel_size=3, padding=1), dict(kernel_size=3, stride=2, bias=False),
         dict(kernel_size=(3, 2), stride=(2, 1), padding=(1, 0), dilation=(1, 2)),
         dict(kernel_size=4, padding="same"), dict(kernel_size=2, padding="valid")]


@pytest.mark.parametrize("kw", LINEARS)
@pytest.mark.parametrize("shape", [(4, 5), (2, 3, 5)])
def test_fp32_linear_matches_torch(kw, shape):
    torch.manual_seed(0)
    ref = torch.nn.Linear(5, 3, **kw)
    mine = ft.Linear(5, 3, precision="fp32", **kw)
    mine.load_state_dict(ref.state_dict())
    _compare(ref, mine, torch.randn(*shape))


@pytest.mark.filterwarnings("ignore:Using padding='same'")
@pytest.mark.parametrize("kw", CONVS)
def test_fp32_conv_matches_torch(kw):
    torch.manual_seed(0)
    ref = torch.nn.Conv2d(2, 3, **kw)
    mine = ft.Conv2d(2, 3, precision="fp32", **kw)
    mine.load_state_dict(ref.state_dict())
    _compare(ref, mine, torch.randn(3, 2, 7, 6))


def _compare(ref, mine, x):
    x1, x2 = x.clone().requires_grad_(), x.clone().requires_grad_()
    y1, y2 = ref(x1), mine(x2)
    torch.testing.assert_close(y2, y1, rtol=1e-5, atol=1e-6)
    g = torch.randn_like(y1)
    y1.backward(g)
    y2.backward(g)
    torch.testing.assert_close(x2.grad, x1.grad, rtol=1e-5, atol=1e-5)
    for p1, p2 in zip(ref.parameters(), mine.parameters(), strict=True):
        torch.testing.assert_close(p2.grad, p1.grad, rtol=1e-5, atol=1e-5)


def test_fp32_gradients_against_finite_differences():
    torch.manual_seed(0)
    lin = ft.Linear(4, 3, precision="fp32", dtype=torch.float64)
    conv = ft.Conv2d(2, 3, 3, stride=2, padding=1, precision="fp32", dtype=torch.float64)
    x = torch.randn(2, 4, dtype=torch.float64, requires_grad=True)
    xi = torch.randn(2, 2, 5, 5, dtype=torch.float64, requires_grad=True)
    for layer, inp in ((lin, x), (conv, xi)):
        args = (inp, layer.weight, layer.bias)
        assert torch.autograd.gradcheck(
            lambda a, w, b, layer=layer: ft._Function.apply(a, w, b, layer), args,
            fast_mode=True)


# -- int8 mode: firmware.ml.nn semantics, golden == rtl -----------------------------------------
def test_int8_linear_is_firmware_nn(golden):
    rng = np.random.default_rng(1)
    ref = nn.Linear(6, 4, rng)
    ref.params["b"][:] = rng.normal(size=4)
    eng = nn.Engine("int8", golden, rng=np.random.default_rng(5))
    x = rng.normal(size=(3, 6)).astype(np.float32)
    dy = rng.normal(size=(3, 4)).astype(np.float32)
    y, dx = ref.forward(x, eng), None
    dx = ref.backward(dy, eng)
    layer = ft.Linear(6, 4, accel=ft.Accel(golden, seed=5))
    with torch.no_grad():
        layer.weight.copy_(torch.from_numpy(ref.params["W"].T))
        layer.bias.copy_(torch.from_numpy(ref.params["b"]))
    xt = torch.from_numpy(x).requires_grad_()
    yt = layer(xt)
    yt.backward(torch.from_numpy(dy))
    assert _same(yt.detach(), torch.from_numpy(y))
    assert _same(xt.grad, torch.from_numpy(dx))
    assert _same(layer.weight.grad, torch.from_numpy(ref.grads["W"].T.copy()))
    assert _same(layer.bias.grad, torch.from_numpy(ref.grads["b"]))


@pytest.mark.parametrize("blocks", ["fox", "tensor", "channel,channel,row"])
def test_int8_conv_is_firmware_nn(golden, blocks):
    rng = np.random.default_rng(2)
    b = nn.Blocks.parse(blocks)
    ref = nn.Conv2d(2, 3, 3, rng, stride=1, padding=1)
    eng = nn.Engine("int8", golden, rng=np.random.default_rng(5), blocks=b)
    x = rng.normal(size=(2, 2, 5, 5)).astype(np.float32)
    y = ref.forward(x, eng)
    dy = rng.normal(size=y.shape).astype(np.float32)
    dx = ref.backward(dy, eng)
    layer = ft.Conv2d(2, 3, 3, padding=1, accel=ft.Accel(golden, seed=5, blocks=b))
    with torch.no_grad():
        layer.weight.copy_(torch.from_numpy(ref.params["W"].T.reshape(3, 2, 3, 3)))
        layer.bias.zero_()
    xt = torch.from_numpy(x).requires_grad_()
    yt = layer(xt)
    yt.backward(torch.from_numpy(dy))
    assert _same(yt.detach(), torch.from_numpy(y))
    assert _same(xt.grad, torch.from_numpy(dx))
    assert _same(layer.weight.grad,
                 torch.from_numpy(ref.grads["W"].T.reshape(3, 2, 3, 3).copy()))


def test_first_layer_input_gradient_skipped(golden):
    accel = ft.Accel(golden)
    layer = ft.Linear(5, 3, accel=accel)
    x = torch.randn(4, 5)
    layer(x).sum().backward()
    assert accel.gemms == 2                     # forward and weight gradient only
    layer(x.requires_grad_()).sum().backward()
    assert accel.gemms == 5 and x.grad is not None
    layer.weight.requires_grad_(False)
    layer(torch.randn(4, 5)).sum().backward()   # bias only: no GEMM after the forward
    assert accel.gemms == 6 and layer.bias.grad is not None


@pytest.mark.parametrize("per_sample", [False, True])
def test_backward_gemms_are_queued_together(monkeypatch, per_sample):
    """A layer's weight gradient and data gradient go to the device in one queued run
    (``Device.gemms``); per sample, the weight gradient's runs do, and the data gradient
    follows on its own. Queued or not, the gradients are the same bit for bit."""
    dev = Device("golden")
    runs = []
    real = dev.gemms

    def record(calls):
        runs.append(len(calls))
        return real(calls)

    monkeypatch.setattr(dev, "gemms", record)
    accel = ft.Accel(dev, per_sample=per_sample, rounding="nearest")
    layer = ft.Linear(5, 3, accel=accel)
    x = torch.randn(4, 5, generator=torch.Generator().manual_seed(0))
    x = (x * torch.exp2(2 * torch.arange(4.0))[:, None]).requires_grad_()   # exponents 2i
    layer(x).sum().backward()
    assert runs[0] == 1                                     # the forward
    assert runs[1:] == ([4, 1] if per_sample else [2])      # 4 samples, 4 exponents: 4 runs
    dx, dw = x.grad.clone(), layer.weight.grad.clone()
    monkeypatch.setattr(dev, "gemms", lambda calls: [real([c])[0] for c in calls])
    x.grad, layer.weight.grad = None, None
    layer(x).sum().backward()
    assert _same(x.grad, dx) and _same(layer.weight.grad, dw)


def test_per_sample_weight_gradient_is_the_devices(golden):
    """per_sample forms the weight gradient from the runs' int32 partials: with rounding to
    nearest (no draws) it equals the Device's k_exp GEMM of the default mode bit for bit."""
    torch.manual_seed(0)
    x = torch.randn(6, 2, 6, 6)
    x[3] *= 64                                 # runs of unequal exponents
    grads = []
    for per_sample in (False, True):
        accel = ft.Accel(golden, rounding="nearest", per_sample=per_sample)
        m = torch.nn.Sequential(ft.Conv2d(2, 3, 3, accel=accel), torch.nn.ReLU(),
                                torch.nn.Flatten(), ft.Linear(48, 4, accel=accel))
        torch.manual_seed(1)
        for p in m.parameters():
            torch.nn.init.normal_(p)
        xr = x.clone().requires_grad_()
        F.cross_entropy(m(xr), torch.arange(6) % 4).backward()
        grads.append([m[0].weight.grad, m[3].weight.grad, xr.grad, m[0].bias.grad])
    for a, b in zip(grads[0][:3], grads[1][:3], strict=True):
        assert _same(a, b)
    torch.testing.assert_close(grads[0][3], grads[1][3])      # bias: float64 sum in order


def _tiny(accel, seed=0):
    torch.manual_seed(seed)
    return torch.nn.Sequential(
        ft.Conv2d(1, 4, 3, padding=1, accel=accel), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Flatten(), ft.Linear(4 * 4 * 4, 5, accel=accel))


def _train(device, steps=3, twice=False, **accel_kw):
    accel = ft.Accel(device, seed=1, **accel_kw)
    m = _tiny(accel)
    opt = ft.SGD(m.parameters(), lr=0.1, momentum=0.9, seed=2)
    g = torch.Generator().manual_seed(3)
    for _ in range(steps):
        x = torch.randn(6, 1, 8, 8, generator=g)
        y = torch.randint(0, 5, (6,), generator=g)
        opt.zero_grad()
        out = m(x)
        if twice:                              # a layer called again before backward
            out = out + m(x.flip(0))
        F.cross_entropy(out, y).backward()
        opt.step()
    return [p.detach().clone() for p in m.parameters()]


@pytest.mark.parametrize("kw", [dict(), dict(per_sample=True), dict(twice=True),
                                dict(blocks="tensor")])
def test_golden_and_rtl_bit_identical(golden, rtl, kw):
    a, b = _train(golden, **kw), _train(rtl, **kw)
    assert all(_same(u, v) for u, v in zip(a, b, strict=True))


# -- convert ---------------------------------------------------------------------------------
def test_convert_sequential(golden):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(1, 4, 3, padding=1), torch.nn.ReLU(),
                                torch.nn.Sequential(torch.nn.Flatten(),
                                                    torch.nn.Linear(4 * 36, 5)))
    model[0].bias.requires_grad_(False)
    x = torch.randn(2, 1, 6, 6)
    want = model(x)
    ref = [p.detach().clone() for p in model.parameters()]
    assert ft.convert(model, None, precision="fp32") is model
    assert type(model[0]) is ft.Conv2d and type(model[2][1]) is ft.Linear
    assert all(_same(p.detach(), q) for p, q in zip(model.parameters(), ref, strict=True))
    assert not model[0].bias.requires_grad
    torch.testing.assert_close(model(x), want)
    accel = ft.Accel(golden)
    model2 = ft.convert(torch.nn.Sequential(torch.nn.Linear(3, 2)), accel)
    assert model2[0].accel is accel and model2[0].precision == "int8"
    model2(torch.randn(4, 3)).sum().backward()
    assert accel.gemms == 2
    single = ft.convert(torch.nn.Linear(3, 2), golden)
    assert isinstance(single, ft.Linear) and isinstance(single.accel, ft.Accel)
    with pytest.raises(ValueError, match=r"accelerator.*: 1: a Conv2d with groups=2"):
        ft.convert(torch.nn.Sequential(torch.nn.ReLU(), torch.nn.Conv2d(2, 2, 3, groups=2)),
                   golden)


def test_convert_is_all_or_nothing(golden):
    class MyLinear(torch.nn.Linear):
        pass

    def build():
        torch.manual_seed(0)
        return torch.nn.Sequential(
            torch.nn.Conv2d(2, 4, 3, padding=1), torch.nn.ReLU(),
            torch.nn.Conv2d(4, 4, 3, padding=1, groups=4),                  # depthwise
            torch.nn.Conv2d(4, 4, 3, padding=1, padding_mode="reflect"),
            torch.nn.Flatten(), torch.nn.Linear(4 * 25, 6), MyLinear(6, 5),
            torch.nn.Linear(5, 3, device="meta"))

    model = build()
    before = list(model)
    with pytest.raises(ValueError, match=r"nothing was converted") as e:
        ft.convert(model, golden)
    for name, what in [("2", "groups=4"), ("3", "padding_mode='reflect'"),
                       ("6", "MyLinear is a subclass"), ("7", "parameters on meta")]:
        assert f"; {name}: " in str(e.value) or f": {name}: " in str(e.value)
        assert what in str(e.value)
    assert list(model) == before and not hasattr(model, "conversion")       # untouched
    with pytest.warns(UserWarning, match=r"stay in torch.*2: a Conv2d with groups=4"):
        assert ft.convert(model, golden, unsupported="keep") is model
    assert model.conversion.swapped == ["0", "5"]
    assert list(model.conversion.kept) == ["2", "3", "6", "7"]
    assert [type(m) for m in model] == [ft.Conv2d, torch.nn.ReLU, torch.nn.Conv2d,
                                        torch.nn.Conv2d, torch.nn.Flatten, ft.Linear, MyLinear,
                                        torch.nn.Linear]
    assert "on the accelerator: 0, 5" in str(model.conversion)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert ft.convert(build()[:2], golden).conversion.kept == {}


def test_convert_keeps_shared_layers_and_parameters(golden):
    lin = torch.nn.Linear(4, 4)
    model = torch.nn.Sequential(lin, torch.nn.ReLU(), lin, torch.nn.Linear(4, 2))
    model[3].weight.requires_grad_(False)
    params = list(model.parameters())
    opt = torch.optim.SGD(model.parameters(), lr=0.1)          # built before the conversion
    ft.convert(model, golden)
    assert model[0] is model[2] and type(model[0]) is ft.Linear
    assert all(p is q for p, q in zip(model.parameters(), params, strict=True))
    assert not model[3].weight.requires_grad
    model(torch.randn(3, 4)).sum().backward()
    w = lin.weight.detach().clone()
    opt.step()
    assert not torch.equal(model[0].weight, w)


def test_convert_refuses_what_bypasses_the_accelerator(golden):
    torch.manual_seed(0)
    enc = torch.nn.TransformerEncoderLayer(8, 2, dim_feedforward=16, batch_first=True)
    model = torch.nn.Sequential(enc, torch.nn.Flatten(), torch.nn.Linear(3 * 8, 2))
    with pytest.raises(ValueError, match=r"0: in eval\(\) under no_grad.*fast path"):
        ft.convert(model, golden)
    assert type(enc.linear1) is torch.nn.Linear
    accel = ft.Accel(golden)
    with pytest.warns(UserWarning, match=r"0: in eval\(\).*fast path"):
        ft.convert(model, accel, unsupported="keep")
    assert model.conversion.swapped == ["2"] and list(model.conversion.kept) == ["0"]
    assert type(enc.linear1) is torch.nn.Linear and type(enc.linear2) is torch.nn.Linear
    model.eval()
    with torch.no_grad():
        model(torch.randn(2, 3, 8))
    assert accel.gemms == 1            # the head, the one layer the report says is swapped
    attn = torch.nn.Sequential(torch.nn.MultiheadAttention(8, 2))
    with pytest.warns(UserWarning, match=r"0: MultiheadAttention .*in_proj_weight"):
        ft.convert(attn, golden, unsupported="keep")
    tr = torch.nn.Transformer(8, 2, 1, 1, 16, batch_first=True)
    with pytest.raises(ValueError) as e:
        ft.convert(tr, golden)
    assert [n for n in tr.state_dict() if n.endswith("linear1.weight")]        # untouched
    for name in ("encoder.layers.0", "decoder.layers.0.self_attn",
                 "decoder.layers.0.multihead_attn"):
        assert f" {name}: " in str(e.value)
    assert "decoder.layers.0.linear1" not in str(e.value)          # that one runs as a module


@pytest.mark.parametrize("dtype", [torch.uint8, torch.int64, torch.int32, torch.bool,
                                   torch.complex64])
def test_non_float_input_refused(golden, dtype):
    model = ft.convert(torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(4, 2)), golden)
    with pytest.raises(TypeError, match=rf"^Linear '1': x must be a floating-point .*, not "
                                        rf"{dtype}$"):
        model(torch.ones(3, 2, 2, dtype=dtype))
    conv = ft.Conv2d(1, 2, 3, accel=golden)
    with pytest.raises(TypeError, match=rf"^Conv2d: x must be .*{dtype}$"):
        conv(torch.ones(1, 1, 4, 4, dtype=dtype))
    fp32 = ft.Linear(4, 2, precision="fp32")
    with pytest.raises(TypeError, match=rf"^Linear: x must be .*{dtype}$"):
        fp32(torch.ones(3, 4, dtype=dtype))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("half_weights", [False, True])
@pytest.mark.parametrize("precision", ["int8", "fp32"])
@pytest.mark.parametrize("kind", ["linear", "conv"])
def test_half_precision_is_computed_in_float32(golden, dtype, half_weights, precision, kind):
    torch.manual_seed(0)
    x = torch.randn(3, 2, 5, 5).to(dtype)
    if kind == "linear":
        x = x.reshape(3, 5, 10)
    runs = {}
    for inp in (x, x.float()):
        accel = ft.Accel(golden, seed=3) if precision == "int8" else None
        layer = ft.Linear(10, 4, accel=accel, precision=precision) if kind == "linear" \
            else ft.Conv2d(2, 4, 3, accel=accel, precision=precision)
        torch.manual_seed(1)
        with torch.no_grad():
            for p in layer.parameters():
                p.copy_(torch.randn_like(p).to(dtype))                # on the half grid
        if half_weights and inp.dtype == dtype:
            layer.to(dtype)
        xi = inp.clone().requires_grad_()
        y = layer(xi)
        assert y.dtype == inp.dtype
        y.backward(torch.linspace(-1, 1, y.numel()).reshape(y.shape).to(dtype).to(inp.dtype))
        runs[inp.dtype] = y.detach(), xi.grad, [p.grad for p in layer.parameters()]
    (y, dx, dps), (y32, dx32, dps32) = runs[dtype], runs[torch.float32]
    assert dx.dtype == dtype
    assert all(p.dtype == (dtype if half_weights else torch.float32) for p in dps)
    assert _same(y, y32.to(dtype)) and _same(dx, dx32.to(dtype))
    assert all(_same(p, q.to(p.dtype)) for p, q in zip(dps, dps32, strict=True))


@pytest.mark.parametrize("precision, accel_kw", [
    ("int8", dict(rounding="nearest")), ("int8", dict(per_sample=True, seed=2)),
    ("fp32", None)])
def test_backward_twice_with_retain_graph(golden, precision, accel_kw):
    torch.manual_seed(0)
    accel = ft.Accel(golden, **accel_kw) if accel_kw is not None else None
    model = torch.nn.Sequential(ft.Conv2d(1, 2, 3, accel=accel, precision=precision),
                                torch.nn.Flatten(),
                                ft.Linear(8, 3, accel=accel, precision=precision))
    x = torch.randn(2, 1, 4, 4, requires_grad=True)
    loss = model(x).square().sum()
    loss.backward(retain_graph=True)
    once = [t.grad.clone() for t in (x, *model.parameters())]
    loss.backward()                    # quantised operands kept by retain_graph: same grads
    assert all(torch.equal(t.grad, 2 * g) for t, g in zip((x, *model.parameters()), once,
                                                          strict=True))
    with pytest.raises(RuntimeError, match="backward through the graph a second time"):
        loss.backward()


@pytest.mark.parametrize("precision", ["int8", "fp32"])
def test_double_backward_refused(golden, precision):
    model = ft.convert(torch.nn.Sequential(torch.nn.Linear(4, 3)),
                       golden if precision == "int8" else None, precision=precision)
    x = torch.randn(2, 4, requires_grad=True)
    with pytest.raises(RuntimeError, match=r"^Linear '0': double backward .*create_graph"):
        torch.autograd.grad(model(x).square().sum(), x, create_graph=True)


# -- the optimiser and weight averaging ------------------------------------------------------
def _on_grid(p):
    x = p.detach().numpy()
    q, e = quantize(x, rounding="nearest")
    return np.array_equal(q.astype(np.float64) * 2.0 ** int(e), x.astype(np.float64))


def test_sgd_int8_is_firmware_optim_and_on_the_grid():
    rng = np.random.default_rng(0)
    shapes = [(4, 3), (3,)]
    arrays = [rng.normal(size=s).astype(np.float32) for s in shapes]
    ref_params = [(str(i), a.copy()) for i, a in enumerate(arrays)]
    ref = optim.SGD(ref_params, lr=0.05, momentum=0.9, weight_decay=1e-3, weights="int8",
                    rng=np.random.default_rng(7))
    params = [torch.nn.Parameter(torch.from_numpy(a.copy())) for a in arrays]
    opt = ft.SGD(params, lr=0.05, momentum=0.9, weight_decay=1e-3, seed=7)
    for _ in range(4):
        grads = [rng.normal(size=s).astype(np.float32) for s in shapes]
        ref.step(grads)
        for p, g in zip(params, grads, strict=True):
            p.grad = torch.from_numpy(g.copy())
        opt.step()
        for p, (_, r) in zip(params, ref_params, strict=True):
            assert np.array_equal(p.detach().numpy(), r)
            assert _on_grid(p)
            assert _on_grid(torch.from_numpy(opt.state[p]["momentum_buffer"].numpy()))
    sd = opt.state_dict()
    opt2 = ft.SGD([torch.nn.Parameter(p.detach().clone()) for p in params], lr=0.05, seed=99)
    opt2.load_state_dict(sd)
    assert opt2.rng.bit_generator.state == opt.rng.bit_generator.state


def test_sgd_fp32_param_group():
    w = torch.nn.Parameter(torch.tensor([0.3, -0.7]))
    b = torch.nn.Parameter(torch.tensor([0.123456]))
    opt = ft.SGD([{"params": [w]}, {"params": [b], "weights": "fp32"}], lr=0.1, momentum=0.5)
    assert _on_grid(w) and b.item() == pytest.approx(0.123456)      # fp32 master weights
    for _ in range(2):
        w.grad, b.grad = torch.tensor([0.01, 0.02]), torch.tensor([0.5])
        opt.step()
    assert _on_grid(w)
    assert b.item() == pytest.approx(0.123456 - 0.1 * 0.5 - 0.1 * (0.5 * 0.5 + 0.5), rel=1e-6)


def test_swalp_with_averaged_model(golden):
    from torch.optim.swa_utils import AveragedModel
    accel = ft.Accel(golden, seed=0)
    model = _tiny(accel)
    opt = ft.SGD(model.parameters(), lr=0.1, seed=0)
    sched = ft.swalp_scheduler(opt, budget=2, swa_lr=0.01)
    swa = AveragedModel(model)
    assert swa.module[0].accel is accel                # the copy shares the accelerator
    g = torch.Generator().manual_seed(0)
    snaps = []
    for epoch in range(4):
        for _ in range(2):
            x, y = torch.randn(4, 1, 8, 8, generator=g), torch.randint(0, 5, (4,), generator=g)
            opt.zero_grad()
            F.cross_entropy(model(x), y).backward()
            opt.step()
        if epoch >= 2:
            swa.update_parameters(model)
            snaps.append([p.detach().clone() for p in model.parameters()])
        sched.step()
        assert opt.param_groups[0]["lr"] == pytest.approx(
            optim.swalp_lr(epoch + 1, 0.1, 2, 0.01))
    for avg, *ps in zip(swa.module.parameters(), *snaps, strict=True):
        torch.testing.assert_close(avg.detach(), (ps[0] + ps[1]) / 2)
    swa.eval()
    x = torch.randn(3, 1, 8, 8)
    with torch.no_grad():
        assert _same(swa(x), swa(x))                     # eval rounds to nearest


# -- arguments --------------------------------------------------------------------------------
@pytest.mark.parametrize("call, exc, name", [
    (lambda d: ft.Linear(3, 2, accel="golden"), TypeError, "accel"),
    (lambda d: ft.Linear(3, 2, accel=d, precision="int4"), ValueError, "precision"),
    (lambda d: ft.Linear(3, 2), ValueError, "accel"),
    (lambda d: ft.Conv2d(2, 2, 3, groups=2, accel=d), ValueError, "groups"),
    (lambda d: ft.Conv2d(2, 2, 3, padding_mode="reflect", accel=d), ValueError, "padding_mode"),
    (lambda d: ft.Accel("golden"), TypeError, "device"),
    (lambda d: ft.Accel(d, blocks=3), TypeError, "blocks"),
    (lambda d: ft.Accel(d, blocks="sample,sample,sample"), ValueError, "blocks.weights"),
    (lambda d: ft.Accel(d, blocks="tile"), ValueError, "tile"),
    (lambda d: ft.Accel(d, rounding="up"), ValueError, "rounding"),
    (lambda d: ft.Accel(d, seed=-1), ValueError, "seed"),
    (lambda d: ft.Accel(d, per_sample=1), TypeError, "per_sample"),
    (lambda d: ft.Accel(d, blocks="tensor", per_sample=True), ValueError, "per_sample"),
    (lambda d: ft.Linear(3, 2, accel=d)(torch.zeros(2, 4)), ValueError, "x"),
    (lambda d: ft.Linear(3, 2, accel=d)(np.zeros((2, 3))), TypeError, "x"),
    (lambda d: ft.Conv2d(1, 2, 3, accel=d)(torch.zeros(2, 3, 5)), ValueError, "x"),
    (lambda d: ft.convert([torch.nn.Linear(2, 2)], d), TypeError, "model"),
    (lambda d: ft.convert(torch.nn.Linear(2, 2), d, unsupported="skip"), ValueError,
     "unsupported"),
    (lambda d: ft.SGD([torch.nn.Parameter(torch.zeros(2))], lr=-1), ValueError, "lr"),
    (lambda d: ft.SGD([torch.nn.Parameter(torch.zeros(2))], momentum=1), ValueError,
     "momentum"),
    (lambda d: ft.SGD([torch.nn.Parameter(torch.zeros(2))], weight_decay=-1), ValueError,
     "weight_decay"),
    (lambda d: ft.SGD([torch.nn.Parameter(torch.zeros(2))], weights="int4"), ValueError,
     "weights"),
    (lambda d: ft.SGD([torch.nn.Parameter(torch.zeros(2))], lr="0.1"), TypeError, "lr"),
    (lambda d: ft.SGD([{"params": [torch.nn.Parameter(torch.zeros(2))], "weights": "x"}]),
     ValueError, "weights"),
    (lambda d: ft.swalp_scheduler("opt", 3), TypeError, "optimizer"),
    (lambda d: ft.swalp_scheduler(ft.SGD([torch.nn.Parameter(torch.zeros(2))]), 0),
     ValueError, "budget"),
])
def test_bad_arguments(golden, call, exc, name):
    with pytest.raises(exc, match=name):
        call(golden)
