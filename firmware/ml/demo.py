"""``python -m firmware.ml.demo``: train digits-mlp in float32 and in int8 on the simulated
accelerator (the generated Verilog, natively simulated), and print both accuracies.

Options: ``--epochs N`` (default 5), ``--seed S``, ``--rows R --cols C`` (default 8x8),
``--blocks`` (block granularity, default Fox et al.'s). Ends with the int8 run's profile: the
host's time per step by kind beside the accelerator's cycles (at 100 MHz).
"""

from __future__ import annotations

import argparse
import sys
import time

from firmware.ml.train import TrainConfig, _profile_text, run


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m firmware.ml.demo", description=__doc__)
    p.add_argument("--epochs", type=int, default=5)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--rows", type=int, default=8)
    p.add_argument("--cols", type=int, default=8)
    p.add_argument("--blocks", default="fox",
                   help="fox (default), tensor, or 'weights,activations,deltas'")
    args = p.parse_args(argv)
    if args.epochs < 1:
        p.error("--epochs must be at least 1")
    for name, v in (("--rows", args.rows), ("--cols", args.cols)):
        if v < 2 or v & (v - 1):
            p.error(f"{name} must be a power of two >= 2, not {v}")
    t0 = time.monotonic()
    fp32 = run(TrainConfig(task="digits-mlp", precision="fp32", epochs=args.epochs,
                           seed=args.seed), quiet=True)
    print(f"digits-mlp fp32 (numpy):           accuracy {100 * fp32['test_metric']:.2f} %"
          f"  ({time.monotonic() - t0:.1f} s)")
    t0 = time.monotonic()
    print(f"building / loading the simulated {args.rows}x{args.cols} accelerator "
          "(first time: about a minute)...", file=sys.stderr)
    cfg = TrainConfig(task="digits-mlp", precision="int8", epochs=args.epochs, seed=args.seed,
                      blocks=args.blocks)
    try:
        cfg.check()
    except ValueError as e:
        p.error(str(e))
    int8 = run(cfg, backend="rtl", rows=args.rows, cols=args.cols, clock_mhz=100)
    print(f"digits-mlp int8 (simulated RTL):   accuracy {100 * int8['test_metric']:.2f} %"
          f"  ({time.monotonic() - t0:.1f} s, {int8['gemms']} GEMMs, "
          f"{int8['accelerator_cycles']:,} accelerator cycles)")
    print(_profile_text(int8["profile"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
