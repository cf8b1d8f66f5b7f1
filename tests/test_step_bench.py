"""``python -m sim.bench step``: its networks, their PyTorch counterparts, the MAC count and
the record it writes."""

import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from firmware.ml import nn  # noqa: E402
from sim.bench import step  # noqa: E402


def _copy_weights(net, model):
    """The Network's weights into its :func:`step.to_torch` counterpart, layer by layer."""
    def layers(seq):
        for layer in seq:
            if isinstance(layer, nn.Residual):
                yield from layers(layer.body)
                yield from layers(layer.shortcut)
            elif isinstance(layer, (nn.Conv2d, nn.Linear)):
                yield layer
    mods = [m for m in model.modules() if isinstance(m, (torch.nn.Conv2d, torch.nn.Linear))]
    ours = list(layers(net.layers))
    assert len(mods) == len(ours)
    with torch.no_grad():
        for layer, mod in zip(ours, mods, strict=True):
            w = layer.params["W"]
            mod.weight.copy_(torch.from_numpy(w.T.reshape(mod.weight.shape).copy()))
            mod.bias.copy_(torch.from_numpy(layer.params["b"]))


@pytest.mark.parametrize("name", ["fashion-cnn", "resnet20"])
def test_torch_counterpart_computes_the_same_step(name):
    """The fp32 Network and its torch counterpart with the same weights: the same logits
    and the same weight gradients (float32 rounding only): the benchmark times the same
    network on both sides."""
    build, shape = step.NETS[name]
    net = build(np.random.default_rng(3))
    model = step.to_torch(net).double()
    _copy_weights(net, model)
    x, y = step._data(shape, 2, seed=1)
    eng = nn.Engine("fp32")
    out = net.forward(x, eng)
    _, grad = nn.softmax_cross_entropy(out, y)
    net.backward(grad, eng)
    xt = torch.from_numpy(x).double()
    logits = model(xt)
    np.testing.assert_allclose(out, logits.detach().numpy(), rtol=1e-3, atol=1e-4)
    torch.nn.functional.cross_entropy(logits, torch.from_numpy(y)).backward()
    mods = [m for m in model.modules() if isinstance(m, torch.nn.Conv2d)]
    first = next(layer for layer in net.layers if isinstance(layer, nn.Conv2d))
    np.testing.assert_allclose(first.grads["W"].T.reshape(mods[0].weight.shape),
                               mods[0].weight.grad.numpy(), rtol=1e-3, atol=1e-5)


def test_residual_backward_is_the_sum_of_both_paths():
    """A Residual block's input gradient against finite differences (fp32 engine, float64
    data): identity shortcut and a strided 1 x 1 convolution."""
    rng = np.random.default_rng(0)
    for short in ([], [nn.Conv2d(2, 3, 1, rng, stride=2)]):
        cout, stride = (2, 1) if not short else (3, 2)
        block = nn.Residual([nn.Conv2d(2, cout, 3, rng, stride=stride, padding=1), nn.ReLU(),
                             nn.Conv2d(cout, cout, 3, rng, padding=1)], short)
        for p in block.params.values():
            p[...] = rng.standard_normal(p.shape)
        x = rng.standard_normal((1, 2, 4, 4))
        eng = nn.Engine("fp32")
        y = block.forward(x, eng)
        dy = rng.standard_normal(y.shape)
        dx = block.backward(dy, eng)
        assert set(block.grads) == set(block.params)
        i = (0, 1, 2, 3)
        eps = 1e-6
        xp, xm = x.copy(), x.copy()
        xp[i] += eps
        xm[i] -= eps
        num = ((block.forward(xp, eng) - block.forward(xm, eng)) * dy).sum() / (2 * eps)
        assert dx[i] == pytest.approx(num, rel=1e-5)


def test_global_average_pool():
    x = np.arange(2 * 3 * 2 * 2, dtype=np.float32).reshape(2, 3, 2, 2)
    pool = nn.GlobalAvgPool2d()
    np.testing.assert_array_equal(pool.forward(x, None), x.mean(axis=(2, 3)))
    g = pool.backward(np.ones((2, 3), np.float32), None)
    assert g.shape == x.shape and (g == 0.25).all()


def test_step_macs_counts_three_gemms_but_the_first_backward_data():
    """fashion-cnn at batch 2, by hand: conv1 2*28*28*32*9, conv2 2*14*14*64*288, fc1
    2*3136*128, fc2 2*128*10; three times that, less conv1 once. Without the padding's
    products a 3 x 3 kernel with padding 1 on an n x n image has (3n - 2)^2 taps inside it,
    as the engine counts them."""
    fwd = [2 * 28 * 28 * 32 * 9, 2 * 14 * 14 * 64 * 288, 2 * 3136 * 128, 2 * 128 * 10]
    assert step.step_macs("fashion-cnn", 2, padding=True) == 3 * sum(fwd) - fwd[0]
    fwd[:2] = [2 * 82 ** 2 * 32, 2 * 40 ** 2 * 64 * 32]
    assert step.step_macs("fashion-cnn", 2) == 3 * sum(fwd) - fwd[0]


@pytest.mark.parametrize("net", ["fashion-cnn", "resnet20"])
def test_step_macs_are_the_engines_without_the_padding(net):
    """The step's products without the padding's (counted from PyTorch's layers) are those
    the engine counts forward and backward-data, and the forward's again for the weight
    gradients, whose walk also multiplies the padding's zeros."""
    from firmware.ml.resident_conv import stages_of
    from sim.bench.conv_layers import trace_step
    records, _, _, _ = trace_step("zcu104", net, 32)
    by = {p: sum(r["macs"] for r in records if r["pass"] == p)
          for p in ("forward", "backward-data", "weight gradient")}
    # (the first layer runs over its input unfolded, multiplying its padding's zeros too)
    build, shape = step.NETS[net]
    first = stages_of(build(np.random.default_rng(0)), shape)[0][0].geometry(32)
    fwd0 = [r["macs"] for r in records if r["layer"] == 0 and r["pass"] == "forward"]
    assert records[1]["layer_shape"].endswith("unfolded") and len(fwd0) == 1
    assert fwd0[0] == first.out_channels * first.channels * len(first.offsets) \
        * first.out_positions > first.implicit_gemm(1)[3]
    by["forward"] += first.implicit_gemm(1)[3] - fwd0[0]
    assert step.step_macs(net, 32) == 2 * by["forward"] + by["backward-data"]
    assert by["forward"] < by["weight gradient"] < step.step_macs(net, 32, padding=True)


def test_command_writes_a_record(tmp_path):
    out = tmp_path / "step.json"
    assert step.main(["--net", "fashion-cnn", "--batch", "4", "--out", str(out)]) == 0
    data = json.loads(out.read_text())
    r = data["results"][0]
    assert data["command"].startswith("python -m sim.bench step")
    assert r["step_seconds"] == pytest.approx(r["host_total"] + r["accelerator_seconds"])
    assert r["speedup"] == pytest.approx(r["torch_seconds"] / r["step_seconds"])
    assert r["utilization"] == pytest.approx(
        r["macs_per_step"] / (r["peak_macs_per_cycle"] * r["clock_mhz"] * 1e6
                              * r["step_seconds"]))
    assert 0 < r["host_share"] < 1 and r["descriptors_per_step"] > 0
    # the line the demo ends with
    text = step.line(r)
    assert text.startswith("fashion-cnn on zcu104: step ")
    assert f"speedup {r['speedup']:.2f}" in text and f"{100 * r['host_share']:.1f} %" in text


def test_plot_draws_every_record(tmp_path):
    """--plot writes a PNG with a bar group per record; no records is an error."""
    rec = {"net": "fashion-cnn", "board": "zcu104", "blocks": "resident-sgd", "batch": 128,
           "host_total": 0.001, "accelerator_seconds": 0.01, "torch_seconds": 0.05,
           "speedup": 4.5, "utilization": 0.4}
    out = tmp_path / "step.png"
    step.plot([rec, {**rec, "net": "vgg11", "speedup": 3.1}], out)
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and out.stat().st_size > 5000
    with pytest.raises(ValueError, match="records"):
        step.plot([], out)


def test_whole_step_on_the_device_where_the_network_allows(tmp_path, capsys, monkeypatch):
    """resident-sgd: fashion-cnn's step on the device (a record, host share below the host
    path's); a network the device cannot run is skipped with its reason (ResNet-20's step,
    its shortcuts summed with no descriptor of their own, is counted descriptor by
    descriptor in tests/test_conv_layers.py)."""
    out = tmp_path / "step.json"
    assert step.main(["--net", "fashion-cnn", "--blocks", "fox", "resident-sgd",
                      "--batch", "4", "--out", str(out)]) == 0
    recs = {(r["net"], r["blocks"]): r for r in json.loads(out.read_text())["results"]}
    assert set(recs) == {("fashion-cnn", blocks) for blocks in ("fox", "resident-sgd")}
    r = recs["fashion-cnn", "resident-sgd"]
    # the input and loss-gradient quantisations; per layer a forward descriptor and a
    # weight gradient stepping the weights and the bias, and a backward-data descriptor but
    # the first layer's
    assert r["descriptors_per_step"] == 2 + 4 + 3 + 4
    assert r["host_share"] < recs["fashion-cnn", "fox"]["host_share"]
    assert step.line(r).endswith("(resident-sgd)")

    def odd(rng):
        return nn.Network([nn.Residual([nn.Conv2d(3, 3, 3, rng, padding=1), nn.ReLU()]),
                           nn.Flatten(), nn.Linear(3 * 32 * 32, 10, rng)])
    monkeypatch.setitem(step.NETS, "odd", (odd, (3, 32, 32)))
    assert step.main(["--net", "odd", "--blocks", "resident-sgd", "--batch", "2", "--out",
                      str(out)]) == 0
    assert "odd: not resident-sgd: layer 0 (Residual): its body" in capsys.readouterr().err


def test_the_array_can_be_other_than_the_default(tmp_path):
    """--rows and --cols configure the model's array in place of the board default's: the
    record names it, and the peak and the cycles are that array's."""
    out = tmp_path / "step.json"
    records = []
    for argv in ([], ["--cols", "32"]):
        assert step.main(["--board", "zcu104", "--net", "fashion-cnn", "--blocks",
                          "resident-sgd", "--batch", "4", "--steps", "1", "--out", str(out),
                          *argv]) == 0
        records += json.loads(out.read_text())["results"]
    wide, narrow = records
    assert (wide["config"], narrow["config"]) == ("32x64@128", "32x32@128")
    assert (wide["peak_macs_per_cycle"], narrow["peak_macs_per_cycle"]) == (2048, 1024)
    assert narrow["macs_per_step"] == wide["macs_per_step"]
    assert narrow["accelerator_cycles"] != wide["accelerator_cycles"]


@pytest.mark.parametrize("argv", [["--batch", "0"], ["--net", "alexnet"], ["--blocks", "x"],
                                  ["--board", "zedboard"], ["--plot", "step.svg"],
                                  ["--cols", "0"], ["--rows", "-8"]])
def test_bad_options_exit_2(argv, capsys):
    with pytest.raises(SystemExit) as e:
        step.main(argv)
    assert e.value.code == 2


def test_a_reduction_above_max_k_runs_in_parts(monkeypatch):
    """K above MAX_K (a weight gradient over batch x positions): the Engine runs the GEMM
    in parts of at most MAX_K steps and adds them in float32 in K order; below it, one
    GEMM as before."""
    from firmware import Device
    rng = np.random.default_rng(0)
    eng = nn.Engine("int8", Device("golden"), rng=np.random.default_rng(1))
    a = nn.Q(rng.integers(-127, 128, (12, 3), dtype=np.int8), row_exp=rng.integers(
        -5, 5, 12).astype(np.int8))
    b = nn.Q(rng.integers(-127, 128, (12, 4), dtype=np.int8), exp=-3)
    whole = eng.gemm(a, b, transpose_a=True)
    monkeypatch.setattr(nn, "MAX_K", 5)
    parts = [eng.gemm(nn.Q(a.data[s], row_exp=a.row_exp[s]), nn.Q(b.data[s], exp=-3),
                      transpose_a=True) for s in (slice(0, 5), slice(5, 10), slice(10, 12))]
    split = eng.gemm(a, b, transpose_a=True)
    np.testing.assert_array_equal(split, (parts[0] + parts[1]) + parts[2])
    np.testing.assert_allclose(split, whole, rtol=1e-5)


@pytest.mark.parametrize("board", ["pynq-z1", "zcu104", "vu9p"])
def test_board_device_is_the_board_default(board):
    """The benchmarks' functional model reports the board default's configuration in every
    register the driver reads (a port count left at 1 slows the model's operand reads)."""
    from platforms import PLATFORMS
    from sim.bench.host import board_device
    cfg = PLATFORMS[board].config()
    info = board_device(board, memory=1 << 20).driver.info
    for key in ("rows", "cols", "data_width", "depth", "block", "packing", "queue",
                "write_ports", "read_ports"):
        assert getattr(info, key) == cfg.get(key, 1), key
