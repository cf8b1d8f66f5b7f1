"""The statistics and tables of ``firmware.ml.results``: sample standard deviations, Student t
intervals, paired differences, and a two-seed run of the command line."""

import json
import math

import pytest

from firmware.ml.results import (
    CONTRASTS,
    METHODS,
    collect,
    main,
    paired_difference,
    sizes_of_test_sets,
    summarize,
    t975,
    table,
)


def test_t_quantiles():
    # the 0.975 quantiles of Student's t (any statistics table)
    assert t975(1) == pytest.approx(12.7062, abs=1e-4)
    assert t975(2) == pytest.approx(4.3027, abs=1e-4)
    assert t975(4) == pytest.approx(2.7764, abs=1e-4)
    assert t975(30) == pytest.approx(2.0423, abs=1e-4)
    assert t975(60) == pytest.approx(2.0003, abs=1e-4)      # past the table
    assert t975(120) == pytest.approx(1.9799, abs=1e-4)
    assert t975(10 ** 6) == pytest.approx(1.95996, abs=1e-4)
    for bad in (0, -1, 2.5):
        with pytest.raises(ValueError, match="df"):
            t975(bad)


def test_summary_uses_the_sample_standard_deviation():
    # 90, 92, 94: mean 92, squared deviations 4 + 0 + 4 = 8, sample variance 8 / 2 = 4
    s = summarize([90, 92, 94])
    assert (s["n"], s["mean"]) == (3, 92)
    assert s["std"] == pytest.approx(2.0)        # the population std would be 1.633
    half = 4.302653 * 2 / math.sqrt(3)           # t(0.975, 2) s / sqrt(n) = 4.968
    assert s["ci95_half_width"] == pytest.approx(half, rel=1e-6)
    assert s["ci95"] == pytest.approx([92 - half, 92 + half], rel=1e-6)
    # 1 .. 5: sample variance 10 / 4 = 2.5
    s = summarize([1, 2, 3, 4, 5])
    assert s["std"] == pytest.approx(math.sqrt(2.5))
    assert s["ci95"][1] - 3 == pytest.approx(2.776445 * math.sqrt(2.5 / 5), rel=1e-6)
    with pytest.raises(ValueError, match="values"):
        summarize([1.0])


def test_paired_difference_by_seed():
    # per-seed differences 1, 0, 2: mean 1, s 1, half-width 4.3027 / sqrt(3) = 2.484
    d = paired_difference([97, 96, 98], [96, 96, 96])
    assert d["mean"] == pytest.approx(1) and d["std"] == pytest.approx(1)
    assert d["ci95"] == pytest.approx([1 - 2.484138, 1 + 2.484138], rel=1e-5)
    assert d["inside_noise"]
    # large seed-to-seed spread that both methods share: paired, the difference is clear
    b = [90.0, 95.0, 85.0]
    d = paired_difference([x + 1.0 + e for x, e in zip(b, (0.1, -0.1, 0.0), strict=True)], b)
    assert d["mean"] == pytest.approx(1) and d["std"] == pytest.approx(0.1)
    assert d["ci95"][0] > 0 and not d["inside_noise"]
    with pytest.raises(ValueError, match="pair"):
        paired_difference([1, 2, 3], [1, 2])


def _fake(task, method, seed, value):
    return {"task": task, "method": method, "seed": seed, "test_metric": value}


def test_table_gives_sample_std_ci_and_the_paired_difference():
    values = {"fp32 SGD": [0.90, 0.92, 0.94], "int8 SGD": [0.91, 0.92, 0.93],
              "fp32 SWA": [0.90, 0.92, 0.94], "int8 SWALP": [0.91, 0.93, 0.95]}
    results = [_fake("digits-mlp", m, s, v) for m, vs in values.items()
               for s, v in enumerate(vs)]
    results += [_fake("rf-anomaly", m, s, v) for m, vs in values.items()
                for s, v in enumerate(vs)]
    sizes = {"digits-mlp": {"n": 360, "points_per_example": 100 / 360},
             "rf-anomaly": {"n": 2000, "anomalies": 1000}}
    text = table(results, sizes)
    row = next(line for line in text.splitlines() if line.startswith("| digits-mlp |"))
    # fp32 SGD: mean 92.00 %, sample std 2.00 (population: 1.63), 95 % CI 92 ± 4.97
    assert "92.00 ± 2.00 [87.03, 96.97]" in row
    assert "1.63" not in row
    # int8 SWALP − fp32 SGD: +1 point on every seed -> s = 0, interval [+1, +1], not noise
    assert "+1.00 pp [+1.00, +1.00] | **no** |" in row
    assert "360 (1 = 0.28 pp)" in row
    rf = next(line for line in text.splitlines() if line.startswith("| rf-anomaly |"))
    assert "0.920 ± 0.020 [0.870, 0.970]" in rf and "2000 (1000 anomalous)" in rf
    assert "sample standard deviation (ddof 1)" in text and "paired by seed" in text
    # the other contrasts, in the second table: int8 SGD − fp32 SGD = 0.01, 0, -0.01 points
    assert "| digits-mlp | int8 SGD − fp32 SGD | +0.00 pp | [-2.48, +2.48] | yes |" in text
    assert {a for a, _ in CONTRASTS} | {b for _, b in CONTRASTS} <= set(METHODS)


def test_the_test_set_sizes():
    sizes = sizes_of_test_sets(["digits-mlp", "rf-anomaly"])
    assert sizes["digits-mlp"]["n"] == 360
    assert sizes["digits-mlp"]["points_per_example"] == pytest.approx(0.2778, abs=1e-4)
    assert sizes["rf-anomaly"]["n"] > 0 and "anomalies" in sizes["rf-anomaly"]


def test_command_line_two_seeds(tmp_path, capsys):
    out = tmp_path / "r.json"
    assert main(["--seeds", "2", "--epochs", "1", "--tasks", "digits-mlp",
                 "--out", str(out)]) == 0
    saved = json.loads(out.read_text())
    assert saved["schedule"] == "swalp" and saved["seeds"] == [0, 1]
    assert len(saved["results"]) == 2 * len(METHODS)
    assert {r["schedule"] for r in saved["results"]} == {"swalp"}
    summary = saved["summary"]["digits-mlp"]
    assert set(summary["methods"]) == set(METHODS)
    assert summary["methods"]["fp32 SGD"]["n"] == 2
    assert "int8 SWALP − fp32 SGD" in summary["differences"]
    assert saved["test_sizes"]["digits-mlp"]["n"] == 360
    assert out.with_suffix(".png").exists()
    assert "inside the noise?" in capsys.readouterr().out
    for bad in (["--seeds", "1"], ["--epochs", "0"], ["--schedule", "cosine"]):
        with pytest.raises(SystemExit) as e:
            main(bad)
        assert e.value.code == 2


def test_parallel_jobs_give_the_sequential_results(tmp_path):
    """Runs trained in two processes are those of one process, bit for bit, in the same
    order; a partial file is written as runs complete; a method subset is honoured."""
    kw = dict(methods=["int8 SGD", "fp32 SGD"], blocks="tensor", train_subset=256)
    seen = []
    one = collect(["digits-mlp"], 2, 1, **kw)
    two = collect(["digits-mlp"], 2, 1, jobs=2, on_result=lambda rs: seen.append(len(rs)),
                  **kw)
    assert [(r["method"], r["seed"]) for r in two] == [
        ("int8 SGD", 0), ("int8 SGD", 1), ("fp32 SGD", 0), ("fp32 SGD", 1)]
    assert [r["weights_digest"] for r in two] == [r["weights_digest"] for r in one]
    assert len({r["weights_digest"] for r in two}) == 4
    assert seen == [1, 2, 3, 4]
    with pytest.raises(ValueError, match="methods"):
        collect(["digits-mlp"], 2, 1, methods=["bf16 SGD"])
    with pytest.raises(ValueError, match="jobs"):
        collect(["digits-mlp"], 2, 1, jobs=0)
    for bad in (["--jobs", "0"], ["--methods", "bf16"]):
        with pytest.raises(SystemExit) as e:
            main(bad)
        assert e.value.code == 2
