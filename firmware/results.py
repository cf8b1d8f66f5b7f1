"""Training results: fp32 SGD, int8 SGD and int8 SWALP on every task, over several seeds.

``python -m firmware.results [--seeds 3] [--epochs 20] [--tasks ...]`` trains each
(task, method, seed) on the golden backend (bit-identical to the simulated accelerator, see
the hardware-in-the-loop test), prints a Markdown table of mean ± std of the test metric,
and writes ``results/training.json`` and ``results/training.png`` (test metric per epoch).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

from .train import TASKS, TrainConfig, run

__all__ = ["METHODS", "collect", "table", "plot", "main"]

ROOT = Path(__file__).resolve().parent.parent
METHODS = {"fp32 SGD": ("fp32", False), "int8 SGD": ("int8", False),
           "int8 SWALP": ("int8", True)}


def collect(tasks, seeds, epochs) -> list[dict]:
    out = []
    for task in tasks:
        for method, (precision, swa) in METHODS.items():
            for seed in range(seeds):
                t0 = time.monotonic()
                r = run(TrainConfig(task=task, precision=precision, swa=swa, epochs=epochs,
                                    seed=seed), quiet=True)
                r["method"] = method
                out.append(r)
                print(f"  {task:13s} {method:10s} seed {seed}: {r['metric']} "
                      f"{r['test_metric']:.4f} ({time.monotonic() - t0:.1f} s)",
                      file=sys.stderr)
    return out


def _summary(results):
    rows = {}
    for r in results:
        rows.setdefault((r["task"], r["method"]), []).append(r["test_metric"])
    return rows


def table(results) -> str:
    rows = _summary(results)
    tasks = list(dict.fromkeys(r["task"] for r in results))
    lines = ["| task | metric | " + " | ".join(METHODS) + " | SWALP − fp32 |",
             "|---|---|" + "---:|" * (len(METHODS) + 1)]
    for task in tasks:
        metric = TASKS[task].metric
        cells, means = [], {}
        for method in METHODS:
            v = np.array(rows[(task, method)])
            scale = 100 if metric == "accuracy" else 1
            means[method] = v.mean() * scale
            cells.append(f"{v.mean() * scale:.2f} ± {v.std() * scale:.2f}" if scale == 100
                         else f"{v.mean():.3f} ± {v.std():.3f}")
        gap = means["int8 SWALP"] - means["fp32 SGD"]
        unit = " pp" if metric == "accuracy" else ""
        lines.append(f"| {task} | {metric}{' (%)' if metric == 'accuracy' else ''} | "
                     + " | ".join(cells) + f" | {gap:+.2f}{unit} |"
                     if metric == "accuracy" else
                     f"| {task} | {metric} | " + " | ".join(cells) + f" | {gap:+.3f} |")
    return "\n".join(lines)


def plot(results, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    tasks = list(dict.fromkeys(r["task"] for r in results))
    fig, axes = plt.subplots(1, len(tasks), figsize=(4.2 * len(tasks), 3.4), squeeze=False)
    for ax, task in zip(axes[0], tasks, strict=True):
        metric = TASKS[task].metric
        for method in METHODS:
            runs = [r for r in results if r["task"] == task and r["method"] == method]
            curves = np.array([[h[metric] for h in r["history"]] for r in runs])
            epochs = np.arange(1, curves.shape[1] + 1)
            mean, std = curves.mean(0), curves.std(0)
            ax.plot(epochs, mean, label=method)
            ax.fill_between(epochs, mean - std, mean + std, alpha=0.2)
        ax.set_title(task)
        ax.set_xlabel("epoch")
        ax.set_ylabel(f"test {metric}")
        ax.grid(alpha=0.3)
    axes[0][0].legend()
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m firmware.results", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tasks", nargs="+", choices=sorted(TASKS), default=list(TASKS))
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--epochs", type=int, default=20)
    p.add_argument("--out", type=Path, default=ROOT / "results" / "training.json")
    args = p.parse_args(argv)
    if args.seeds < 1 or args.epochs < 1:
        p.error("--seeds and --epochs must be at least 1")
    results = collect(args.tasks, args.seeds, args.epochs)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    command = "python -m firmware.results " + " ".join(argv or sys.argv[1:])
    args.out.write_text(json.dumps({"command": command.strip(), "results": results},
                                   indent=2) + "\n")
    png = args.out.with_suffix(".png")
    plot(results, png)
    print(table(results))
    print(f"\nwrote {args.out} and {png}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
