"""Training results: fp32 SGD, int8 SGD, fp32 SWA and int8 SWALP on every task, over seeds.

``python -m firmware.ml.results [--seeds 5] [--epochs 20] [--tasks ...] [--schedule swalp]
[--methods ...] [--jobs N]`` trains each (task, method, seed) on the golden backend
(bit-identical to the simulated accelerator, see the hardware-in-the-loop test), prints
Markdown tables, and writes ``results/training.json`` (every run, its per-epoch history, the
summaries and the test-set sizes) and ``results/training.png`` (test metric per epoch, mean
and 95 % interval).

Every method runs under the same learning-rate schedule (``--schedule``, SWALP's by default:
see :func:`firmware.ml.optim.swalp_lr`) over the same pre-averaging budget, the first
``round(0.75 epochs)`` epochs; the averaging methods (fp32 SWA, int8 SWALP) then run the rest
at the constant ``swa_lr`` = 0.1 ``lr0`` and are evaluated with the averaged weights, the
others continue at the schedule's last rate. So int8 SGD − fp32 SGD and int8 SWALP − fp32 SWA
differ only in precision, fp32 SWA − fp32 SGD only in the averaging.

Statistics, per (task, method): the mean over seeds, the sample standard deviation (ddof 1)
and the 95 % confidence interval of the mean (Student t with n − 1 degrees of freedom).
Differences between methods are paired by seed (the seed fixes the initial weights and the
data order, which every method shares): the mean of the per-seed differences and its 95 %
t interval; a difference whose interval contains 0 is inside the seed-to-seed noise.
"""

from __future__ import annotations

import argparse
import json
import math
import shlex
import sys
import time
from pathlib import Path

import numpy as np

from firmware.ml.optim import SCHEDULES
from firmware.ml.train import TASKS, TrainConfig, run

__all__ = ["METHODS", "CONTRASTS", "t975", "summarize", "paired_difference", "sizes_of_test_sets",
           "collect", "summaries", "table", "plot", "main"]

ROOT = Path(__file__).resolve().parents[2]
#: method -> (precision, weight averaging); int8 with averaging is SWALP (8-bit weights)
METHODS = {"fp32 SGD": ("fp32", False), "int8 SGD": ("int8", False),
           "fp32 SWA": ("fp32", True), "int8 SWALP": ("int8", True)}
#: the paired differences reported, (a, b) meaning a − b; the first is the headline
CONTRASTS = [("int8 SWALP", "fp32 SGD"), ("int8 SGD", "fp32 SGD"),
             ("int8 SWALP", "fp32 SWA"), ("fp32 SWA", "fp32 SGD")]

# the 0.975 quantile of Student's t with df = 1 .. 30 degrees of freedom
_T975 = (12.706205, 4.302653, 3.182446, 2.776445, 2.570582, 2.446912, 2.364624, 2.306004,
         2.262157, 2.228139, 2.200985, 2.178813, 2.160369, 2.144787, 2.131450, 2.119905,
         2.109816, 2.100922, 2.093024, 2.085963, 2.079614, 2.073873, 2.068658, 2.063899,
         2.059539, 2.055529, 2.051831, 2.048407, 2.045230, 2.042272)


def t975(df: int) -> float:
    """The 0.975 quantile of Student's t with ``df`` degrees of freedom (the half-width of a
    95 % interval is ``t975(n - 1) * s / sqrt(n)``): a table for ``df`` <= 30, beyond it the
    Cornish-Fisher expansion about the normal quantile (error < 1e-5)."""
    if not isinstance(df, (int, np.integer)) or df < 1:
        raise ValueError(f"df must be a positive integer, not {df!r}")
    if df <= len(_T975):
        return _T975[df - 1]
    z = 1.959963984540054
    return (z + (z ** 3 + z) / (4 * df) + (5 * z ** 5 + 16 * z ** 3 + 3 * z) / (96 * df ** 2)
            + (3 * z ** 7 + 19 * z ** 5 + 17 * z ** 3 - 15 * z) / (384 * df ** 3))


def summarize(values) -> dict:
    """Mean, sample standard deviation (ddof 1) and 95 % t interval of the mean of
    ``values`` (at least two)."""
    v = np.asarray(values, np.float64).ravel()
    if v.size < 2:
        raise ValueError(f"values must hold at least 2 numbers for a sample standard "
                         f"deviation, not {v.size}")
    n, mean, std = int(v.size), float(v.mean()), float(v.std(ddof=1))
    half = t975(n - 1) * std / math.sqrt(n)
    return {"n": n, "mean": mean, "std": std, "ci95": [mean - half, mean + half],
            "ci95_half_width": half}


def paired_difference(a, b) -> dict:
    """``a − b`` paired element by element (by seed): :func:`summarize` of the differences,
    and ``inside_noise``, whether their 95 % interval contains 0."""
    a, b = np.asarray(a, np.float64).ravel(), np.asarray(b, np.float64).ravel()
    if a.shape != b.shape:
        raise ValueError(f"a and b must pair up, not {a.size} and {b.size} values")
    s = summarize(a - b)
    s["inside_noise"] = bool(s["ci95"][0] <= 0 <= s["ci95"][1])
    return s


def sizes_of_test_sets(tasks) -> dict:
    """Per task: the test-set size, and for accuracy what one example is worth in points
    (for rf-anomaly, the number of anomalous windows too)."""
    out = {}
    for task in tasks:
        y = TASKS[task].load()[3]
        d = {"n": int(len(y))}
        if TASKS[task].metric == "accuracy":
            d["points_per_example"] = 100 / len(y)
        else:
            d["anomalies"] = int(np.sum(y == 1))
        out[task] = d
    return out


#: What ``python -m firmware.ml.results`` trains unless told otherwise (minutes, not hours).
DEFAULT_TASKS = tuple(t for t in TASKS if not t.startswith("fashion-"))


def _train_one(task, method, seed, epochs, schedule, config) -> dict:
    precision, swa = METHODS[method]
    t0 = time.monotonic()
    r = run(TrainConfig(task=task, precision=precision, swa=swa, epochs=epochs, seed=seed,
                        schedule=schedule, **config), quiet=True)
    r["method"], r["schedule"] = method, schedule
    print(f"  {task:13s} {method:10s} seed {seed}: {r['metric']} "
          f"{r['test_metric']:.4f} ({time.monotonic() - t0:.1f} s)", file=sys.stderr, flush=True)
    return r


def collect(tasks, seeds, epochs, schedule: str = "swalp", *, methods=None, jobs: int = 1,
            on_result=None, **config) -> list[dict]:
    """Train every (task, method, seed) with ``seeds`` seeds 0, 1, ...; the run dictionaries
    of :func:`firmware.ml.train.run` with ``method`` and ``schedule`` added, in (task, method,
    seed) order. ``methods``: names of :data:`METHODS` (default all). ``config``: more
    :class:`firmware.ml.train.TrainConfig` fields, the same for every run (``blocks``,
    ``swa_every``, ``train_subset``, ``momentum``).

    ``jobs`` = 1 trains seed by seed (every method of seed 0, then of seed 1, ...), so that
    the runs saved so far pair up by seed; ``jobs`` > 1 trains that many runs at once in
    separate processes (each run is seeded on its own, so the results are those of ``jobs=1``
    bit for bit; set ``OPENBLAS_NUM_THREADS=1`` so the processes do not fight over cores).
    ``on_result(results_so_far)`` is called after each run completes (for saving partial
    results of a long campaign)."""
    methods = list(METHODS) if methods is None else list(methods)
    for m in methods:
        if m not in METHODS:
            raise ValueError(f"methods: unknown method {m!r}; known: {', '.join(METHODS)}")
    if not isinstance(jobs, int) or jobs < 1:
        raise ValueError(f"jobs must be a positive integer, not {jobs!r}")
    keys = [(task, method, seed) for task in tasks for method in methods
            for seed in range(seeds)]
    done: dict[tuple, dict] = {}

    def finished(key, r):
        done[key] = r
        if on_result is not None:
            on_result([done[k] for k in keys if k in done])

    if jobs == 1:
        # seed by seed, every method of a seed together: a partial campaign holds paired runs
        for key in sorted(keys, key=lambda k: (k[0], k[2])):
            finished(key, _train_one(*key, epochs, schedule, config))
    else:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor, as_completed

        # int8 runs first: they take longest, so the pool ends with the short ones
        order = sorted(keys, key=lambda k: METHODS[k[1]][0] != "int8")
        with ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("spawn")) as ex:
            futures = {ex.submit(_train_one, *key, epochs, schedule, config): key
                       for key in order}
            for f in as_completed(futures):
                finished(futures[f], f.result())
    return [done[k] for k in keys]


def _scale(task) -> float:
    return 100.0 if TASKS[task].metric == "accuracy" else 1.0


def summaries(results) -> dict:
    """Per task: each method's :func:`summarize` and each contrast's
    :func:`paired_difference`, in the table's units (accuracy in %, F1 as is)."""
    out = {}
    for task in dict.fromkeys(r["task"] for r in results):
        scale = _scale(task)
        by_seed = {}
        for r in results:
            if r["task"] == task:
                by_seed.setdefault(r["method"], {})[r["seed"]] = r["test_metric"] * scale
        methods = [m for m in METHODS if m in by_seed]
        s = {"metric": TASKS[task].metric, "unit": "%" if scale == 100 else "",
             "methods": {m: summarize(list(by_seed[m].values())) for m in methods},
             "differences": {}}
        for a, b in CONTRASTS:
            if a in by_seed and b in by_seed:
                seeds = sorted(set(by_seed[a]) & set(by_seed[b]))
                s["differences"][f"{a} − {b}"] = paired_difference(
                    [by_seed[a][k] for k in seeds], [by_seed[b][k] for k in seeds])
        out[task] = s
    return out


def _num(x, digits, sign=False) -> str:
    return f"{x:+.{digits}f}" if sign else f"{x:.{digits}f}"


def _interval(s, digits, sign=False) -> str:
    lo, hi = s["ci95"]
    return f"[{_num(lo, digits, sign)}, {_num(hi, digits, sign)}]"


def table(results, sizes: dict | None = None) -> str:
    """Markdown: per task and method ``mean ± s [95 % CI]``, the headline paired difference
    int8 SWALP − fp32 SGD with its interval and whether it is inside the noise, and a second
    table of the other paired differences. ``sizes`` (:func:`sizes_of_test_sets`) adds the test-set
    size and the worth of one example."""
    summ = summaries(results)
    methods = [m for m in METHODS if any(r["method"] == m for r in results)]
    head = f"{CONTRASTS[0][0]} − {CONTRASTS[0][1]}"
    lines = ["| task | metric | test set | " + " | ".join(methods)
             + f" | {head} (paired) | inside the noise? |",
             "|---|---|---:|" + "---:|" * len(methods) + "---:|:---:|"]
    for task, s in summ.items():
        digits = 2 if s["unit"] == "%" else 3
        size = "" if sizes is None or task not in sizes else str(sizes[task]["n"])
        if size and "points_per_example" in sizes[task]:
            size += f" (1 = {sizes[task]['points_per_example']:.2f} pp)"
        elif size and "anomalies" in sizes[task]:
            size += f" ({sizes[task]['anomalies']} anomalous)"
        cells = [f"{_num(m['mean'], digits)} ± {_num(m['std'], digits)} "
                 f"{_interval(m, digits)}" for m in (s["methods"][k] for k in methods)]
        d = s["differences"].get(head)
        unit = " pp" if s["unit"] == "%" else ""
        diff = (f"{_num(d['mean'], digits, True)}{unit} {_interval(d, digits, True)}",
                "yes" if d["inside_noise"] else "**no**") if d else ("", "")
        metric = s["metric"] + (" (%)" if s["unit"] == "%" else "")
        lines.append(f"| {task} | {metric} | {size} | " + " | ".join(cells)
                     + f" | {diff[0]} | {diff[1]} |")
    n = sorted({m["n"] for s in summ.values() for m in s["methods"].values()})
    lines += ["", f"mean ± sample standard deviation (ddof 1) [95 % confidence interval of the "
              f"mean, Student t] over n = {', '.join(map(str, n))} seeds; differences paired "
              "by seed (mean of the per-seed differences [95 % t interval]); inside the noise: "
              "the interval contains 0."]
    rest = [(task, name, d) for task, s in summ.items()
            for name, d in s["differences"].items() if name != head]
    if rest:
        lines += ["", "| task | paired difference | mean | 95 % CI | inside the noise? |",
                  "|---|---|---:|---:|:---:|"]
        for task, name, d in rest:
            digits = 2 if summ[task]["unit"] == "%" else 3
            unit = " pp" if summ[task]["unit"] == "%" else ""
            lines.append(f"| {task} | {name} | {_num(d['mean'], digits, True)}{unit} | "
                         f"{_interval(d, digits, True)} | "
                         f"{'yes' if d['inside_noise'] else '**no**'} |")
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
            if not runs:
                continue
            curves = np.array([[h[metric] for h in r["history"]] for r in runs])
            epochs = np.arange(1, curves.shape[1] + 1)
            mean = curves.mean(0)
            ax.plot(epochs, mean, label=method)
            if len(runs) > 1:       # 95 % t interval of the mean
                half = t975(len(runs) - 1) * curves.std(0, ddof=1) / math.sqrt(len(runs))
                ax.fill_between(epochs, mean - half, mean + half, alpha=0.2)
        ax.set_title(task)
        ax.set_xlabel("epoch")
        ax.set_ylabel(f"test {metric}")
        ax.grid(alpha=0.3)
    axes[0][0].legend()
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m firmware.ml.results", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tasks", nargs="+", choices=sorted(TASKS), default=list(DEFAULT_TASKS),
                   help=f"default: {' '.join(DEFAULT_TASKS)} (the Fashion-MNIST tasks take "
                        f"hours at full size: name them)")
    p.add_argument("--blocks", default="fox",
                   help="block granularity of the int8 methods: fox, tensor, tile (BFP8 "
                        "tile blocks) or 'weights,activations,deltas' (firmware.ml.train); "
                        "or device: a CNN's whole step on the device (with --momentum 0)")
    p.add_argument("--momentum", type=float, default=0.9,
                   help="SGD momentum of every method (default 0.9)")
    p.add_argument("--swa-every", choices=["epoch", "iteration"], default="epoch",
                   help="average once per epoch or every step of the averaging phase")
    p.add_argument("--train-subset", type=int, help="train on the first N images only")
    p.add_argument("--seeds", type=int, default=5, help="seeds 0 .. N-1 (default 5)")
    p.add_argument("--epochs", type=int, default=20)
    p.add_argument("--schedule", choices=SCHEDULES, default="swalp",
                   help="learning-rate schedule of every method (default: swalp)")
    p.add_argument("--methods", nargs="+", choices=list(METHODS), default=list(METHODS),
                   metavar="METHOD", help=f"arms to train (default: all of "
                                          f"{', '.join(repr(m) for m in METHODS)})")
    p.add_argument("--jobs", type=int, default=1,
                   help="runs trained at once, one process each (default 1; results are "
                        "identical; set OPENBLAS_NUM_THREADS=1)")
    p.add_argument("--out", type=Path, default=ROOT / "results" / "training.json")
    args = p.parse_args(argv)
    if args.jobs < 1:
        p.error("--jobs must be at least 1")
    if args.seeds < 2:
        p.error("--seeds must be at least 2 (a sample standard deviation needs two)")
    if args.epochs < 1:
        p.error("--epochs must be at least 1")
    config = {"blocks": args.blocks, "swa_every": args.swa_every,
              "train_subset": args.train_subset, "momentum": args.momentum}
    try:
        TrainConfig(task=args.tasks[0], **config).check()
    except ValueError as e:
        p.error(str(e))
    sizes = sizes_of_test_sets(args.tasks)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    command = "python -m firmware.ml.results " + shlex.join(sys.argv[1:] if argv is None
                                                            else argv)

    def save(results, complete):
        doc = {"command": command.strip(), "schedule": args.schedule,
               "seeds": list(range(args.seeds)), "epochs": args.epochs,
               "methods": args.methods, "config": config, "test_sizes": sizes}
        if not complete:
            doc["partial"] = True   # a campaign still running (or interrupted)
        else:
            doc["summary"] = summaries(results)
        args.out.write_text(json.dumps({**doc, "results": results}, indent=2) + "\n")

    results = collect(args.tasks, args.seeds, args.epochs, args.schedule, methods=args.methods,
                      jobs=args.jobs, on_result=lambda rs: save(rs, False), **config)
    save(results, True)
    png = args.out.with_suffix(".png")
    plot(results, png)
    print(table(results, sizes))
    print(f"\nwrote {args.out} and {png}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
