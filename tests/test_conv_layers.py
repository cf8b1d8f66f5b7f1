"""``python -m sim.bench convs``: every descriptor of a step on the device labelled with its
layer and pass, and never faster than its bound."""

import json

import pytest

from sim.bench import conv_layers


def test_every_descriptor_labelled_and_within_its_bound(tmp_path):
    """fashion-cnn and ResNet-20 (batch 8) on the ZCU104's default: each layer has its
    forward and weight-gradient descriptors (the latter stepping the bias too) and a
    backward-data one but the first;
    the model's cycles are never below a descriptor's bound, nor is the bound below the
    bound without the K-block read-out, nor that below the bound of any mapping; the
    step's sums are the descriptors', and its products that are not padding's are the
    network's (the step benchmark's count)."""
    from sim.bench.step import step_macs
    out = tmp_path / "convs.json"
    assert conv_layers.main(["--net", "fashion-cnn", "resnet20", "--board", "zcu104",
                             "--batch", "8", "--out", str(out)]) == 0
    data = json.loads(out.read_text())
    assert [r["net"] for r in data["results"]] == ["fashion-cnn", "resnet20"]
    assert [len({d["layer"] for d in r["descriptors"]}) - 2 for r in data["results"]] \
        == [4, 22]
    for r in data["results"]:
        descs = r["descriptors"]
        layers = sorted({d["layer"] for d in descs if isinstance(d["layer"], int)})
        for i in layers:
            passes = sorted(d["pass"] for d in descs if d["layer"] == i)
            want = ["forward", "weight gradient"] + (["backward-data"] if i else [])
            assert passes == sorted(want), (r["net"], i)
        for d in descs:
            assert d["cycles"] >= d["bound_cycles"] >= d["ideal_cycles"] \
                >= d["any_mapping_cycles"] > 0, d
            assert d["kblock_cycles"] >= d["compute_cycles"], d
            assert d["macs_made"] <= d["macs"], d
        assert r["cycles"] == sum(d["cycles"] for d in descs)
        assert r["bound_cycles"] == sum(d["bound_cycles"] for d in descs)
        assert r["any_mapping_cycles"] == sum(d["any_mapping_cycles"] for d in descs)
        assert r["utilization"] <= r["bound"] <= r["ideal"]
        assert r["macs_made"] == step_macs(r["net"], 8)
        # the input's and the loss gradient's quantisations, and per layer a forward and a
        # weight-gradient descriptor (the latter stepping the bias) and a backward-data one
        # but the first layer's; ResNet-20's shortcuts summed with none of their own
        assert len(descs) == 2 + 3 * len(layers) - 1
        # (a weight gradient's padding products left out: fewer than the engine makes)
        assert r["macs_made"] < r["macs"]
        # the 32 x 64 array reads out a row a cycle: 32 cycles, and a layer of few input
        # channels (K blocks shorter than 32 steps) is bound by it
        assert r["kblock_interval"] == 32
        assert any(d["bound_by"] == "k-blocks" for d in descs)
    assert data["command"].startswith("python -m sim.bench convs")


def test_another_array_is_measured_as_configured(tmp_path):
    """--cols 32: the ZCU104's step on a 32 x 32 array, its configuration named and its
    utilisation over that array's peak; the same products in more cycles than on 32 x 64."""
    out = tmp_path / "convs.json"
    runs = []
    for argv in ([], ["--cols", "32"]):
        assert conv_layers.main(["--net", "fashion-cnn", "--board", "zcu104", "--batch", "64",
                                 "--out", str(out), *argv]) == 0
        runs += json.loads(out.read_text())["results"]
    wide, narrow = runs
    assert (wide["config"], narrow["config"]) == ("32x64@128", "32x32@128")
    assert narrow["macs"] == wide["macs"] and narrow["cycles"] > wide["cycles"]
    assert narrow["utilization"] == pytest.approx(narrow["macs"] / (1024 * narrow["cycles"]))


@pytest.mark.parametrize("argv", [["--batch", "0"], ["--net", "alexnet"],
                                  ["--board", "zedboard"], ["--cols", "0"]])
def test_bad_options_exit_2(argv):
    with pytest.raises(SystemExit) as e:
        conv_layers.main(argv)
    assert e.value.code == 2


@pytest.mark.parametrize("mode", [1, 2])
def test_a_convolution_takes_at_least_its_products(mode):
    """The functional model walks a whole number of kernel offsets (the mean a tile reads,
    rounded) and scales its cycles to the mean: a compute-bound convolution (B a job per
    four tiles on the ideal port) never takes fewer cycles than its exact products over
    the array's PEs."""
    import numpy as np

    from firmware import Device
    from sim.models import bfp
    from sim.models import conv as convm
    g = convm.ConvGeometry(32, 16, 7, 7, 32, 3, padding=1)
    dev = Device("model", rows=8, cols=8, data_width=64, depth=64, block=4, epilogue=True)
    rng = np.random.default_rng(0)
    w = rng.standard_normal((32, 16, 3, 3)).astype(np.float32)
    qs, es = zip(*(bfp.quantize_tiles(m) for m in convm.weight_stack(w)), strict=True)
    stack = dev.bfp_stack(np.stack(qs), np.stack(es))
    if mode == 1:
        x = dev.bfp_tensor(*bfp.quantize_tiles(
            rng.standard_normal((16, g.positions)).astype(np.float32)))
        dev.conv2d(x, stack, g, out="float32")
    else:
        d = dev.bfp_tensor(*bfp.quantize_tiles(
            rng.standard_normal((32, g.out_positions)).astype(np.float32)))
        dev.conv2d_backward_data(d, stack, g, out="float32")
    _, _, _, macs = g.implicit_gemm(mode)
    assert dev.stats["cycles"] >= macs / 64
