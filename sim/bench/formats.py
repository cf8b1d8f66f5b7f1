"""``python -m sim.bench formats``: the quantisation error of block-floating-point formats.

Every format quantises int8 mantissas with one power-of-two exponent per block, as
:func:`sim.models.bfp.quantize_tiles` does (``exp = max(floor(log2 max|x|) - 6, -128)``,
round to nearest or stochastically, clamp to [-127, 127]); they differ in the blocks:

- ``per-tensor``: one exponent for the whole matrix;
- ``rows``: one per row, Fox et al.'s per-sample blocks for activations and deltas (batch
  along the rows);
- ``mxint8``: OCP MXINT8's blocks, 32 consecutive elements of a row (1 x 32);
- ``tile-T``: square T x T tiles (BFP8 tile blocks), T = 8, 16, 32, 64.

The tensors are those of the Fashion-MNIST MLP (784 -> 256 -> 10, ReLU, batch 128) after
one epoch of float32 SGD steps with :mod:`firmware.ml` (the input batch, the weights, the hidden
activations, the deltas and the weight gradients of the last step), and synthetic Gaussian
and heavy-tailed (Student t, 3 degrees of freedom) matrices. For each tensor and format:
the relative RMS error ``||Q(x) - x|| / ||x||`` with each rounding, the fraction of nonzero
elements that quantise to zero, and the exponents' storage in bits per element (8 bits per
block, partial edge blocks included).

Writes JSON (``--out``, default ``results/formats.json``) and prints a Markdown table.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import numpy as np

from sim.models.bfp import quantize_tiles

__all__ = ["FORMATS", "quantize_blocks", "measure", "fashion_tensors", "synthetic_tensors",
           "formats", "formats_table", "main", "STEPS"]

ROOT = Path(__file__).resolve().parents[2]

#: Float32 SGD steps of the Fashion-MNIST MLP before its tensors are measured: one epoch of
#: 60,000 samples at batch 128.
STEPS = 469

#: Format name -> block shape; None stands for the whole dimension.
FORMATS = {
    "per-tensor": (None, None),
    "rows": (1, None),
    "mxint8": (1, 32),
    "tile-8": (8, 8),
    "tile-16": (16, 16),
    "tile-32": (32, 32),
    "tile-64": (64, 64),
}


def quantize_blocks(x: np.ndarray, rows: int | None, cols: int | None, *,
                    rounding: str = "nearest", rng: np.random.Generator | None = None):
    """Quantise ``x`` with one exponent per ``rows x cols`` block (None: the whole dimension).

    Parameters
    ----------
    x : numpy.ndarray of float32, shape (M, N)
    rows, cols : int or None
    rounding : {"nearest", "stochastic"}
    rng : numpy.random.Generator, optional
        The stochastic draws (``u`` uniform on [0, 1) in 2**-16 steps, as 16 random bits).

    Returns
    -------
    values : numpy.ndarray of float64
        The quantised values ``q * 2**exp``.
    blocks : int
        The number of blocks (exponents stored).
    """
    m, n = x.shape
    br, bc = rows or m, cols or n
    gm, gn = -(-m // br), -(-n // bc)
    pad = np.zeros((gm * br, gn * bc), np.float64)
    pad[:m, :n] = x
    tiles = pad.reshape(gm, br, gn, bc)
    maxabs = np.abs(tiles).max(axis=(1, 3), keepdims=True)
    _, e = np.frexp(maxabs)
    exp = np.where(maxabs > 0, np.maximum(e.astype(np.int64) - 7, -128), 0)
    scaled = np.ldexp(tiles, -exp)
    if rounding == "nearest":
        u = 0.5
    else:
        u = rng.integers(0, 2**16, tiles.shape) / 2.0**16
    q = np.clip(np.floor(scaled + u), -127, 127)
    values = np.ldexp(q, exp).reshape(gm * br, gn * bc)[:m, :n]
    return values, gm * gn


def measure(x: np.ndarray, name: str, *, seed: int = 0) -> list[dict]:
    """One row per format of :data:`FORMATS` for tensor ``x`` (see the module docstring)."""
    x = np.asarray(x, np.float32)
    x64 = x.astype(np.float64)
    norm = math.sqrt(float((x64 ** 2).sum()))
    nonzero = x64 != 0
    rows = []
    for fmt, (br, bc) in FORMATS.items():
        err = {}
        for rounding in ("nearest", "stochastic"):
            rng = np.random.default_rng(seed)
            values, blocks = quantize_blocks(x, br, bc, rounding=rounding, rng=rng)
            err[rounding] = math.sqrt(float(((values - x64) ** 2).sum())) / norm
            if rounding == "nearest":
                flushed = float((nonzero & (values == 0)).sum() / max(1, nonzero.sum()))
                if br is not None and br == bc:      # square tiles: the model of record agrees
                    q, exp = quantize_tiles(x, block=br)
                    e = np.repeat(np.repeat(exp.astype(np.int64), br, 0), br, 1)
                    tiled = np.ldexp(q.astype(np.float64), e[:x.shape[0], :x.shape[1]])
                    assert (tiled == values).all(), (name, fmt)
        rows.append({"tensor": name, "format": fmt, "rel_rms_nearest": err["nearest"],
                     "rel_rms_stochastic": err["stochastic"], "flushed_to_zero": flushed,
                     "exp_bits_per_element": 8 * blocks / x.size})
    return rows


def fashion_tensors(steps: int = STEPS, seed: int = 0) -> dict[str, np.ndarray]:
    """The tensors of the Fashion-MNIST MLP's last of ``steps`` float32 SGD steps (batch 128,
    learning rate 0.05), each as the matrix a GEMM reads: batch along the rows."""
    from firmware.ml import data, nn
    from firmware.ml.train import TASKS

    task = TASKS["fashion-mlp"]
    xtr, ytr, _, _ = data.fashion_mnist()
    rng = np.random.default_rng(seed)
    net = task.make(rng)
    eng = nn.Engine("fp32")
    lin1, relu, lin2 = net.layers
    out = {}
    for step in range(steps):
        idx = rng.choice(len(xtr), task.batch, replace=False)
        x, y = xtr[idx], ytr[idx]
        h = relu.forward(lin1.forward(x, eng), eng)
        _, dlogits = nn.softmax_cross_entropy(lin2.forward(h, eng), y)
        dh = lin2.backward(dlogits, eng, need_input_grad=True)
        dz = relu.backward(dh, eng)
        lin1.backward(dz, eng, need_input_grad=False)
        if step == steps - 1:
            out = {"input x": x, "W1": lin1.params["W"], "W2": lin2.params["W"],
                   "hidden h": h, "delta out": dlogits, "delta hidden": dz,
                   "grad W1": lin1.grads["W"], "grad W2": lin2.grads["W"]}
            out = {k: np.array(v, np.float32) for k, v in out.items()}
        for p, g in zip((p for _, p in net.parameters()), net.gradients(), strict=True):
            p -= task.lr * g
    return out


def synthetic_tensors(seed: int = 0) -> dict[str, np.ndarray]:
    """A 256 x 256 Gaussian matrix and a Student-t (3 degrees of freedom) one."""
    rng = np.random.default_rng(seed)
    return {"gaussian": rng.standard_normal((256, 256)).astype(np.float32),
            "student-t3": rng.standard_t(3, (256, 256)).astype(np.float32)}


def formats(*, steps: int = STEPS, seed: int = 0, fashion: bool = True) -> dict:
    """Every tensor's rows and a per-format summary (the JSON written by :func:`main`)."""
    tensors = {}
    source = {}
    if fashion:
        for k, v in fashion_tensors(steps, seed).items():
            tensors[f"fashion-mlp {k}"], source[f"fashion-mlp {k}"] = v, "fashion-mlp"
    for k, v in synthetic_tensors(seed).items():
        tensors[k], source[k] = v, "synthetic"
    rows = []
    for name, x in tensors.items():
        rows += measure(x, name, seed=seed)
    summary = []
    for fmt in FORMATS:
        mine = [r for r in rows if r["format"] == fmt]
        summary.append({
            "format": fmt,
            "rel_rms_nearest_geomean": _geomean(r["rel_rms_nearest"] for r in mine),
            "rel_rms_stochastic_geomean": _geomean(r["rel_rms_stochastic"] for r in mine),
            "rel_rms_nearest_max": max(r["rel_rms_nearest"] for r in mine),
            "exp_bits_per_element_mean": float(np.mean([r["exp_bits_per_element"]
                                                        for r in mine])),
        })
    return {
        "command": "python -m sim.bench formats"
                   + ("" if fashion else " --synthetic-only")
                   + (f" --steps {steps}" if steps != STEPS else "")
                   + (f" --seed {seed}" if seed else ""),
        "formats": {k: {"block_rows": v[0], "block_cols": v[1],
                        "nominal_exp_bits_per_element":
                            8 / (v[0] * v[1]) if v[0] and v[1] else None,
                        # one quantised copy serves the matrix and its transpose
                        "transposable": v[0] == v[1]}
                    for k, v in FORMATS.items()},
        "tensors": [{"name": k, "source": source[k], "shape": list(v.shape)}
                    for k, v in tensors.items()],
        "rows": rows,
        "summary": summary,
    }


def _geomean(values) -> float:
    values = list(values)
    return float(math.exp(sum(math.log(max(v, 1e-300)) for v in values) / len(values)))


def formats_table(result: dict) -> str:
    """The summary and every tensor's nearest-rounding error, as Markdown."""
    names = list(FORMATS)
    lines = ["| tensor | " + " | ".join(names) + " |", "|---" * (len(names) + 1) + "|"]
    for t in result["tensors"]:
        mine = {r["format"]: r for r in result["rows"] if r["tensor"] == t["name"]}
        lines.append(f"| {t['name']} | "
                     + " | ".join(f"{mine[f]['rel_rms_nearest']:.2e}" for f in names) + " |")
    by = {s["format"]: s for s in result["summary"]}
    lines.append("| geometric mean, nearest | "
                 + " | ".join(f"{by[f]['rel_rms_nearest_geomean']:.2e}" for f in names) + " |")
    lines.append("| geometric mean, stochastic | "
                 + " | ".join(f"{by[f]['rel_rms_stochastic_geomean']:.2e}" for f in names)
                 + " |")
    lines.append("| exponent bits per element | "
                 + " | ".join(f"{by[f]['exp_bits_per_element_mean']:.3f}" for f in names) + " |")
    return "\n".join(lines)


def main(argv=None) -> int:
    """The command line.

    Parameters
    ----------
    argv : list of str, optional
        The arguments (default ``sys.argv[1:]``).

    Returns
    -------
    int
        0; bad arguments exit with status 2.
    """
    parser = argparse.ArgumentParser(prog="python -m sim.bench formats",
                                     description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=STEPS,
                        help="float32 SGD steps of the Fashion-MNIST MLP before measuring")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--synthetic-only", action="store_true",
                        help="skip the Fashion-MNIST tensors (no dataset needed)")
    parser.add_argument("--out", type=Path, default=ROOT / "results" / "formats.json")
    args = parser.parse_args(argv)
    if args.steps < 1:
        parser.error(f"--steps must be positive, not {args.steps}")
    if args.seed < 0:
        parser.error(f"--seed must be non-negative, not {args.seed}")
    try:
        result = formats(steps=args.steps, seed=args.seed, fashion=not args.synthetic_only)
    except FileNotFoundError as e:
        parser.error(f"Fashion-MNIST is not available ({e}); use --synthetic-only")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(formats_table(result))
    print(f"\nwrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
