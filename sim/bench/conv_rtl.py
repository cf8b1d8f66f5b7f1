"""``python -m sim.bench conv-rtl``: a network's convolutions on the RTL against the model.

Runs each convolution of fashion-cnn (its two 3 x 3 layers, padding 1) in its three modes,
and as fashion-cnn's step runs them with its 2 x 2 max pools (forward with ReLU and the
pool into BFP8; the second layer's backward-data routing its deltas back through the first
layer's pool under ReLU's mask), on ``Device("rtl")`` built with convolutions (a small
array, so that the simulator runs the layers in minutes) and on ``Device("model")`` of the
same configuration, and records the RTL's cycles, the performance model's and the
utilisation of each (the MACs without padding's over the array's MACs a cycle). Then
ResNet-20's 16-channel convolution forward and weight gradient (:data:`BOARD_LAYER`) on
the ZCU104's whole-step shape (its default with 32 columns, behind its port model,
:data:`BOARD`), likewise. Writes JSON (default ``results/conv_rtl.json``), the docs'
*convolutions on the RTL* table.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]

#: The RTL's configuration: the tests' (tests/test_conv_rtl.py), on the ideal port.
CONFIG = {"rows": 8, "cols": 8, "data_width": 64, "depth": 64, "block": 4}
#: fashion-cnn's convolutions: (name, Cin, H, W, Cout) of 3 x 3, padding 1.
LAYERS = (("conv1", 1, 28, 28, 16), ("conv2", 16, 14, 14, 32))
#: The board shape of the last record: the ZCU104's default with these overrides (the
#: shape whose build holds the whole step), behind its port model.
BOARD = ("zcu104", {"cols": 32})

#: ResNet-20's 16-channel convolution on its 32 x 32 input: (name, Cin, H, W, Cout).
BOARD_LAYER = ("resnet20 16-ch", 16, 32, 32, 16)

MODES = {1: "forward", 2: "backward-data", 3: "weight gradient",
         "pool": "forward, ReLU, max pool", "unpool": "backward-data through the pool"}


def measure(batch: int, size: int) -> list[dict]:
    """The records of every layer and mode: ``layer``, ``mode``, ``m``, ``n``, ``k``,
    ``macs``, ``rtl_cycles``, ``model_cycles``."""
    from firmware import Device
    from firmware.runtime.epilogue import MaskTensor
    from sim.models import bfp
    from sim.models import conv as convm

    def operands(rng, g):
        wt = (rng.standard_normal((g.out_channels, g.channels, 3, 3)) * 0.3).astype(np.float32)
        qs, es = zip(*(bfp.quantize_tiles(m) for m in convm.weight_stack(wt)), strict=True)
        qx, ex = bfp.quantize_tiles(rng.standard_normal((g.channels, g.positions))
                                    .astype(np.float32))
        return (np.stack(qs), np.stack(es)), (qx, ex)

    rtl = Device("rtl", **CONFIG, k_blocks=True, epilogue=True, conv=True)
    model = Device("model", **CONFIG, epilogue=True)
    out = []
    for i, (name, cin, h, w, cout) in enumerate(LAYERS):
        h, w = (h * size) // 28, (w * size) // 28
        g = convm.ConvGeometry(batch, cin, h, w, cout, 3, padding=1)
        rng = np.random.default_rng(1)
        (qw, ew), (qx, ex) = operands(rng, g)
        qd, ed = bfp.quantize_tiles(rng.standard_normal((cout, g.out_positions))
                                    .astype(np.float32))
        pool = convm.Pooling("max", convm.pool_geometry(batch, cout, h, w, 2))
        # (the layer before's pool, whose backward pass this layer's backward-data takes)
        below = convm.Pooling("max", convm.pool_geometry(batch, cin, 2 * h, 2 * w, 2))
        argmax = rng.integers(0, 4, (cin, g.positions)).astype(np.uint8)
        stored = rng.random((cin, below.geometry.positions)) < 0.5
        # (a pool where the windows tile the output; its backward pass above the first)
        modes = [1, 2, 3] + (["pool"] if h % 2 == 0 and w % 2 == 0 else []) \
            + (["unpool"] if i else [])
        for mode in modes:
            cycles = []
            for dev in (rtl, model):
                if mode == "pool":
                    dev.conv2d(dev.bfp_tensor(qx, ex), dev.bfp_stack(qw, ew), g, relu=True,
                               pool=pool)
                elif mode == "unpool":
                    dev.conv2d_backward_data(
                        dev.bfp_tensor(qd, ed), dev.bfp_stack(qw, ew), g, unpool=below,
                        argmax=dev.tensor(argmax),
                        mask_in=MaskTensor(dev.tensor(bfp.pack_mask(stored)), stored.shape))
                elif mode == 1:
                    dev.conv2d(dev.bfp_tensor(qx, ex), dev.bfp_stack(qw, ew), g, out="float32")
                elif mode == 2:
                    dev.conv2d_backward_data(dev.bfp_tensor(qd, ed), dev.bfp_stack(qw, ew), g,
                                             out="float32")
                else:
                    dev.conv2d_weight_grad(dev.bfp_tensor(qd, ed), dev.bfp_tensor(qx, ex), g)
                cycles.append(int(dev.stats["cycles"]))
            m, n, k, macs = g.implicit_gemm({"pool": 1, "unpool": 2}.get(mode, mode))
            out.append({"layer": name, "mode": MODES[mode], "batch": batch, "height": h,
                        "width": w, "m": m, "n": n, "k": k, "macs": int(macs),
                        "rtl_cycles": cycles[0], "model_cycles": cycles[1]})
            print(f"  {name} {MODES[mode]}: RTL {cycles[0]} cycles, model {cycles[1]}",
                  file=sys.stderr)
    out += _board_layer(batch, operands)
    return out


def board_config() -> dict:
    """The configuration of :data:`BOARD`, as the last record's ``array`` names it."""
    from firmware.spec.ports import BOARD_PORTS
    from platforms import PLATFORMS
    board, overrides = BOARD
    cfg = PLATFORMS[board].config(**overrides)
    keys = ("rows", "cols", "data_width", "depth", "block", "packing", "write_ports",
            "read_ports")
    return {**{k: cfg[k] for k in keys}, "port": BOARD_PORTS[board], "board": board}


def _board_layer(batch: int, operands) -> list[dict]:
    """:data:`BOARD_LAYER` forward and weight gradient (float32 out) on the RTL and the
    model of :func:`board_config`, bit for bit: their two records."""
    from firmware import Device
    from sim.models import bfp
    from sim.models import conv as convm
    cfg = board_config()
    opts = {k: v for k, v in cfg.items() if k != "board"}
    name, cin, h, w, cout = BOARD_LAYER
    g = convm.ConvGeometry(batch, cin, h, w, cout, 3, padding=1)
    (qw, ew), (qx, ex) = operands(np.random.default_rng(1), g)
    qd, ed = bfp.quantize_tiles(np.random.default_rng(2).standard_normal(
        (cout, g.out_positions)).astype(np.float32))
    array = (f"{cfg['rows']}x{cfg['cols']}@{cfg['data_width']}, {cfg['port']} "
             f"({cfg['board']}, {cfg['write_ports']}w {cfg['read_ports']}r)")
    devs = (Device("rtl", **opts, k_blocks=True, conv=True), Device("model", **opts))
    out = []
    for mode in (1, 3):
        cycles, results = [], []
        for dev in devs:
            if mode == 1:
                y = dev.conv2d(dev.bfp_tensor(qx, ex), dev.bfp_stack(qw, ew), g,
                               out="float32")
            else:
                y = dev.conv2d_weight_grad(dev.bfp_tensor(qd, ed), dev.bfp_tensor(qx, ex), g)
            results.append(y.numpy().view(np.uint32).copy())
            cycles.append(int(dev.stats["cycles"]))
        if not np.array_equal(*results):
            raise AssertionError(f"{name} {MODES[mode]}: the RTL's result differs from the "
                                 f"model's")
        m, n, k, macs = g.implicit_gemm(mode)
        print(f"  {name} {MODES[mode]} on {array}: RTL {cycles[0]} cycles, model "
              f"{cycles[1]}", file=sys.stderr)
        out.append({"layer": name, "mode": MODES[mode], "batch": batch, "height": h,
                    "width": w, "m": m, "n": n, "k": k, "macs": int(macs),
                    "rtl_cycles": cycles[0], "model_cycles": cycles[1], "array": array,
                    "array_macs": cfg["rows"] * cfg["cols"]})
    return out


def main(argv=None) -> int:
    """The command line, ``python -m sim.bench conv-rtl``; the exit status."""
    p = argparse.ArgumentParser(prog="python -m sim.bench conv-rtl", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--batch", type=int, default=32,
                   help="images (a multiple of 32: the RTL's weight gradient; default 32)")
    p.add_argument("--size", type=int, default=14,
                   help="the input image's side (fashion-cnn's is 28; default 14, a quarter "
                        "of the positions, for simulation time)")
    p.add_argument("--out", type=Path, default=ROOT / "results" / "conv_rtl.json")
    args = p.parse_args(argv)
    if args.batch < 32 or args.batch % 32 or args.batch > 0xFFFF:
        p.error(f"--batch must be a multiple of 32 up to 65535, not {args.batch}")
    if not 4 <= args.size <= 28 or args.size % 2:
        p.error(f"--size must be even, in [4, 28], not {args.size}")
    records = measure(args.batch, args.size)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({
        "command": "python -m sim.bench conv-rtl " + " ".join(argv if argv is not None
                                                              else sys.argv[1:]),
        "config": {**CONFIG, "port": "ideal", "array_macs": CONFIG["rows"] * CONFIG["cols"]},
        "board_config": board_config(),
        "results": records}, indent=1) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
