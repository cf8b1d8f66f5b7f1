"""``python -m sim.bench.conv_format``: the activation layout and the weight gradient's
straddle rule of the implicit-GEMM convolutions (:mod:`sim.models.conv`), measured.

Two parts, written to one JSON file (``--out``, default ``results/conv_format.json``):

``layouts``
    For every 3 x 3 convolution of fashion-cnn, a CIFAR-10 VGG-11 and a CIFAR-10 ResNet-20
    (its two 1 x 1 stride-2 shortcuts too) at batch 128, and each position order of the
    ``C x Q`` activation matrix -- ``CHWN`` (``q = (h * W + w) * N + n``, batch innermost,
    the layout of record) and ``NCHW`` (``q = (n * H + h) * W + w``) -- from the geometry
    alone: the weight gradient's K runs per K block of 32 positions
    (:func:`sim.models.conv.position_runs`; 1 means no block straddles two tiles of ``X``),
    the fraction of K blocks that straddle, and the mean length in bytes of the contiguous
    column segments the forward GEMM reads from a row of ``X`` (an upper bound on a read
    burst).

``straddle``
    The weight gradients of fashion-cnn's two convolutions, from their inputs and output
    deltas after :data:`STEPS` float32 SGD steps on Fashion-MNIST (``--steps``; the dataset
    is needed), computed from BFP8 tile blocks with each straddle rule:
    ``split`` (the rule of record: a K block is cut where it straddles, each run rescaled
    with its own exponents) and ``reblock`` (each K block read with the larger exponent of
    the tiles it straddles, the other tile's mantissas shifted right with round-half-up).
    For each: the relative RMS error ``||G - G64|| / ||G64||`` against the float64 gradient
    of the unquantised tensors, the K runs per block, and each operand's quantisation error
    in each order (tiles of 32 samples at one position in ``CHWN``, of 32 neighbouring
    positions of one sample in ``NCHW``).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from sim.models.bfp import dequantize_tiles, gemm_kruns, quantize_tiles
from sim.models.conv import ConvGeometry, position_runs, weight_grad_offset

__all__ = ["LAYERS", "ORDERS", "BLOCK", "index_map", "layout_figures", "reblock_offset",
           "straddle_figures", "fashion_cnn_tensors", "STEPS", "main"]

ROOT = Path(__file__).resolve().parents[2]

#: The tile size of the hardware.
BLOCK = 32

#: Network -> layers ``(name, in channels, out channels, input side, kernel, stride,
#: padding)`` of square inputs.
LAYERS = {
    "fashion-cnn": [("conv1", 1, 16, 28, 3, 1, 1), ("conv2", 16, 32, 14, 3, 1, 1)],
    "vgg11-cifar": [("conv1", 3, 64, 32, 3, 1, 1), ("conv2", 64, 128, 16, 3, 1, 1),
                    ("conv3", 128, 256, 8, 3, 1, 1), ("conv4", 256, 256, 8, 3, 1, 1),
                    ("conv5", 256, 512, 4, 3, 1, 1), ("conv6", 512, 512, 4, 3, 1, 1),
                    ("conv7", 512, 512, 2, 3, 1, 1), ("conv8", 512, 512, 2, 3, 1, 1)],
    "resnet20-cifar": [("conv1", 3, 16, 32, 3, 1, 1), ("stage1", 16, 16, 32, 3, 1, 1),
                       ("stage2-down", 16, 32, 32, 3, 2, 1), ("stage2", 32, 32, 16, 3, 1, 1),
                       ("shortcut2", 16, 32, 32, 1, 2, 0),
                       ("stage3-down", 32, 64, 16, 3, 2, 1), ("stage3", 64, 64, 8, 3, 1, 1),
                       ("shortcut3", 32, 64, 16, 1, 2, 0)],
}

#: Position orders of the activation matrix's columns.
ORDERS = ("CHWN", "NCHW")

#: The batch of the layout figures and of fashion-cnn's training.
BATCH = 128

#: Float32 SGD steps of fashion-cnn before its tensors are measured.
STEPS = 200


def index_map(g: ConvGeometry, dy: int, dx: int, order: str) -> np.ndarray:
    """:meth:`ConvGeometry.input_index` with input and output positions in ``order``.

    Parameters
    ----------
    g : ConvGeometry
    dy, dx : int
    order : {"CHWN", "NCHW"}

    Returns
    -------
    numpy.ndarray of int64, shape (g.out_positions,)
        The input column read at each output column, both numbered in ``order``; -1 for
        padding.
    """
    idx = g.input_index(dy, dx)
    if order == "CHWN":
        return idx
    n, oh, ow = np.meshgrid(np.arange(g.batch), np.arange(g.out_height),
                            np.arange(g.out_width), indexing="ij")
    q = idx[((oh * g.out_width + ow) * g.batch + n).reshape(-1)]
    h, w, b = q // (g.width * g.batch), (q // g.batch) % g.width, q % g.batch
    return np.where(q >= 0, (b * g.height + h) * g.width + w, -1)


def _segments(idx: np.ndarray) -> float:
    """Mean length of the maximal runs of consecutive columns among the valid reads."""
    valid = idx >= 0
    if not valid.any():
        return 0.0
    step = (idx[1:] == idx[:-1] + 1) & valid[1:] & valid[:-1]
    return float(valid.sum() / (valid.sum() - step.sum()))


def _geometry(cin, cout, side, k, stride, pad, batch) -> ConvGeometry:
    return ConvGeometry(batch, cin, side, side, cout, k, stride=stride, padding=pad)


def layout_figures(batch: int = BATCH) -> list[dict]:
    """The geometry-only figures of every layer of :data:`LAYERS` in each order.

    Returns
    -------
    list of dict
        ``network``, ``layer``, ``batch``, ``order``, ``runs_per_block``,
        ``straddled_blocks`` (a fraction) and ``forward_segment_bytes``.
    """
    rows = []
    for network, layers in LAYERS.items():
        for name, cin, cout, side, k, stride, pad in layers:
            g = _geometry(cin, cout, side, k, stride, pad, batch)
            blocks = -(-g.out_positions // BLOCK)
            for order in ORDERS:
                runs = straddled = 0
                seg = []
                for dy, dx in g.offsets:
                    idx = index_map(g, dy, dx, order)
                    r = position_runs(idx, block=BLOCK)
                    runs += len(r)
                    straddled += len({s // BLOCK for s, _, _ in r
                                      if s % BLOCK})   # blocks holding a cut inside
                    seg.append(_segments(idx))
                kk = len(g.offsets)
                rows.append({"network": network, "layer": name, "batch": batch,
                             "order": order, "kernel": k, "stride": stride,
                             "runs_per_block": runs / (kk * blocks),
                             "straddled_blocks": straddled / (kk * blocks),
                             "forward_segment_bytes": float(np.mean(seg))})
    return rows


def reblock_offset(d, d_exp, x, x_exp, index, *, block: int = BLOCK) -> np.ndarray:
    """One offset's weight gradient with the ``reblock`` rule: each K block of ``block``
    positions reads ``x`` with, per row, the largest exponent of the tiles it touches;
    mantissas of a tile with a smaller exponent ``e`` are shifted right by ``s = emax - e``
    with round half up (``(m + 2**(s - 1)) >> s``).

    Returns
    -------
    numpy.ndarray of float32, shape (d rows, x rows)
    """
    m, k = d.shape
    c = x.shape[0]
    nb = -(-k // block)
    valid = index >= 0
    safe = np.where(valid, index, 0)
    mant = np.zeros((c, nb * block), np.int64)
    mant[:, :k] = np.where(valid[None, :], x[:, safe], 0)
    exps = np.full((c, nb * block), -10**4, np.int64)
    rows = np.repeat(x_exp.astype(np.int64), block, axis=0)[:c]
    exps[:, :k] = np.where(valid[None, :], rows[:, safe // block], -10**4)
    e3 = exps.reshape(c, nb, block)
    emax = e3.max(axis=2)
    emax = np.where(emax < -10**3, 0, emax)
    s = np.clip(emax[:, :, None] - e3, 0, 62)
    m3 = mant.reshape(c, nb, block)
    half = np.where(s > 0, np.left_shift(1, np.maximum(s - 1, 0)), 0)
    shifted = np.where(s > 0, (m3 + half) >> s, m3).reshape(c, nb * block)[:, :k]
    a_exp = np.repeat(d_exp, block, axis=0)[:m]
    stops = list(range(block, k, block)) + [k]
    return gemm_kruns(d, np.ascontiguousarray(a_exp[:, :nb]), shifted.astype(np.int8),
                      np.ascontiguousarray(emax.T.astype(np.int8)), stops, transpose_b=True)


def fashion_cnn_tensors(steps: int = STEPS, seed: int = 0) -> dict[str, tuple]:
    """Each convolution's input and output delta (NCHW, float32) at the last of ``steps``
    float32 SGD steps of fashion-cnn (batch 128, :mod:`firmware.ml`)."""
    from firmware.ml import data, nn
    from firmware.ml.train import TASKS

    task = TASKS["fashion-cnn"]
    xtr, ytr, _, _ = data.fashion_mnist(image=True)
    rng = np.random.default_rng(seed)
    net = task.make(rng)
    eng = nn.Engine("fp32")
    convs = [i for i, layer in enumerate(net.layers) if isinstance(layer, nn.Conv2d)]
    out = {}
    for step in range(steps):
        idx = rng.choice(len(xtr), task.batch, replace=False)
        y = xtr[idx]
        inputs = {}
        for i, layer in enumerate(net.layers):
            inputs[i] = y
            y = layer.forward(y, eng)
        _, dy = nn.softmax_cross_entropy(y, ytr[idx])
        deltas = {}
        for i in range(len(net.layers) - 1, -1, -1):
            deltas[i] = dy
            dy = net.layers[i].backward(dy, eng, need_input_grad=False) if i == 0 \
                else net.layers[i].backward(dy, eng)
        if step == steps - 1:
            out = {f"conv{j + 1}": (np.array(inputs[i], np.float32),
                                    np.array(deltas[i], np.float32))
                   for j, i in enumerate(convs)}
        for p, g in zip((p for _, p in net.parameters()), net.gradients(), strict=True):
            p -= task.lr * g
    return out


def _matrix(t: np.ndarray, order: str) -> np.ndarray:
    """An NCHW tensor as the ``C x Q`` matrix in ``order``."""
    axes = (1, 2, 3, 0) if order == "CHWN" else (1, 0, 2, 3)
    return np.ascontiguousarray(t.transpose(axes).reshape(t.shape[1], -1))


def _relative(a, b) -> float:
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


def _quantised_error(m: np.ndarray) -> float:
    q, e = quantize_tiles(m, block=BLOCK)
    return _relative(dequantize_tiles(q, e, block=BLOCK).astype(np.float64),
                     m.astype(np.float64))


def straddle_figures(tensors: dict, batches=(1, 8, 20, BATCH)) -> list[dict]:
    """Weight-gradient error of each straddle rule on fashion-cnn's convolutions.

    Parameters
    ----------
    tensors : dict
        :func:`fashion_cnn_tensors`.
    batches : sequence of int
        The first ``batch`` samples of each tensor; both orders at :data:`BATCH`, ``CHWN``
        only below.

    Returns
    -------
    list of dict
        ``layer``, ``batch``, ``order``, ``runs_per_block``, ``error_x`` and ``error_delta``
        (each operand's quantisation error), and the weight gradient's ``error_split`` and
        ``error_reblock``.
    """
    rows = []
    for layer, (x_all, d_all) in tensors.items():
        for batch in batches:
            for order in ORDERS if batch == BATCH else ("CHWN",):
                xt, dt = x_all[:batch], d_all[:batch]
                n, cin, side, _ = xt.shape
                cout = dt.shape[1]
                g = ConvGeometry(n, cin, side, side, cout, 3, padding=1)
                xm, dm = _matrix(xt, order), _matrix(dt, order)
                xq, xe = quantize_tiles(xm, block=BLOCK)
                dq, de = quantize_tiles(dm, block=BLOCK)
                ref, split, reblock, runs = [], [], [], 0
                for dy, dx in g.offsets:
                    idx = index_map(g, dy, dx, order)
                    valid = idx >= 0
                    cols = np.where(valid[None, :], xm[:, np.where(valid, idx, 0)], 0)
                    ref.append(dm.astype(np.float64) @ cols.T.astype(np.float64))
                    split.append(weight_grad_offset(dq, de, xq, xe, idx, block=BLOCK))
                    reblock.append(reblock_offset(dq, de, xq, xe, idx, block=BLOCK))
                    runs += len(position_runs(idx, block=BLOCK))
                ref = np.stack(ref)
                rows.append({"layer": f"fashion-cnn {layer}", "batch": batch, "order": order,
                             "runs_per_block": runs / (9 * -(-g.out_positions // BLOCK)),
                             "error_x": _quantised_error(xm),
                             "error_delta": _quantised_error(dm),
                             "error_split": _relative(np.stack(split), ref),
                             "error_reblock": _relative(np.stack(reblock), ref)})
    return rows


def main(argv=None) -> int:
    """Measure and write the JSON (``--out``); print a summary. Returns the exit status."""
    parser = argparse.ArgumentParser(prog="python -m sim.bench.conv_format",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "results" / "conv_format.json",
                        help="the JSON to write (default: results/conv_format.json)")
    parser.add_argument("--steps", type=int, default=STEPS,
                        help=f"float32 SGD steps of fashion-cnn before its tensors are "
                             f"measured (default {STEPS})")
    args = parser.parse_args(argv)
    if args.steps < 1:
        parser.error(f"--steps must be at least 1, not {args.steps}")
    layouts = layout_figures()
    try:
        tensors = fashion_cnn_tensors(args.steps)
    except FileNotFoundError as err:
        print(f"python -m sim.bench.conv_format: {err}", file=sys.stderr)
        return 2
    straddle = straddle_figures(tensors)
    result = {"command": "python -m sim.bench.conv_format", "block": BLOCK,
              "steps": args.steps, "layouts": layouts, "straddle": straddle}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    for r in layouts:
        print(f"{r['network']:15s} {r['layer']:12s} {r['order']}  runs/block "
              f"{r['runs_per_block']:.3f}  straddled {r['straddled_blocks']:.3f}  "
              f"segment {r['forward_segment_bytes']:.1f} B")
    for r in straddle:
        print(f"{r['layer']:18s} N={r['batch']:<4d} {r['order']}  runs/block "
              f"{r['runs_per_block']:.3f}  x {r['error_x']:.3%}  delta {r['error_delta']:.3%}  "
              f"split {r['error_split']:.4%}  "
              f"reblock {r['error_reblock']:.4%}")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
