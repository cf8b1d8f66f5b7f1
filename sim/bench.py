"""Benchmarks of the datapath: resources (Yosys) and cycle counts (simulation).

``python -m sim.bench resources``  Yosys ``synth_xilinx`` of the systolic array for xc7 and
                                   xcup at 8x8 and 16x16: LUT, FF, DSP, BRAM and per MAC.
``python -m sim.bench cycles``     Cycle counts of tile GEMMs in the Amaranth simulator against
                                   the ideal, single tiles and back-to-back streams.
``python -m sim.bench utilization`` PE utilisation of whole GEMMs on the accelerator (native
                                   Verilator model, memory latency 32 cycles) at several bus
                                   widths: the three GEMMs of a training step at M = N = 8x
                                   and K = 16x the array, MNIST logistic regression; and the
                                   simulator's speed.

Each prints a Markdown table and writes JSON (``--out``).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

__all__ = ["resources", "cycles", "utilization", "main"]

ROOT = Path(__file__).resolve().parent.parent


def _size(text: str) -> tuple[int, int]:
    try:
        rows, cols = (int(x) for x in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"size must look like 8x8, not {text!r}") from None
    if rows < 1 or cols < 1:
        raise argparse.ArgumentTypeError(f"size must be positive, not {text!r}")
    return rows, cols


def resources(sizes, families, work_dir: Path) -> list[dict]:
    from platforms.estimate import synthesize
    from rtl.export import generate_verilog

    rows_out = []
    variants = {"xc7": [("xc7", {})],
                "xcup": [("xcup", {"packing": 1, "primitive": False}), ("xcup", {})]}
    for rows, cols in sizes:
        for family in families:
            for target, override in variants[family]:
                params = {"family": family} if not override else override
                mapping = ("1 MAC/DSP48E1, inferred" if family == "xc7" else
                           "1 MAC/DSP48E2, inferred" if override else
                           "2 MACs/DSP48E2, instantiated")
                name = f"gemm_array_{rows}x{cols}_{family}_{'p' if not override else 'i'}"
                netlist = generate_verilog("array", work_dir, name=name, fmt="il",
                                           rows=rows, cols=cols, **params)
                t0 = time.monotonic()
                res = synthesize(netlist, name, target)
                macs = rows * cols
                rows_out.append({
                    "component": "array", "rows": rows, "cols": cols, "family": family,
                    "mapping": mapping, "macs": macs, "resources": res,
                    "per_mac": {k: round(res[k] / macs, 2)
                                for k in ("LUT", "FF", "DSP", "CARRY")},
                    "seconds": round(time.monotonic() - t0, 1),
                })
                print(f"  synthesized {rows}x{cols} for {family} ({mapping}) in "
                      f"{rows_out[-1]['seconds']} s", file=sys.stderr)
    return rows_out


def resources_table(results) -> str:
    lines = ["| array | family | DSP mapping | LUT | FF | DSP | CARRY | BRAM36 | LUT/MAC | FF/MAC "
             "| DSP/MAC |",
             "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in results:
        res, pm = r["resources"], r["per_mac"]
        lines.append(f"| {r['rows']}x{r['cols']} | {r['family']} | {r['mapping']} | "
                     f"{res['LUT']} | {res['FF']} | "
                     f"{res['DSP']} | {res['CARRY']} | {res['BRAM36']:g} | {pm['LUT']} | "
                     f"{pm['FF']} | {pm['DSP']} |")
    return "\n".join(lines)


def _run_datapath(rows, cols, k, tiles, packing=1):
    """Simulate ``tiles`` back-to-back tile GEMMs of length ``k``; return cycle marks."""
    from rtl.datapath import GemmDatapath
    from sim import models
    from sim.harness import run, stream_recv, stream_send

    rng = np.random.default_rng(0)
    dut = GemmDatapath(rows, cols, depth=k, packing=packing)
    cmds = [models.TileCommand(
        a=rng.integers(-128, 128, (rows, k)).astype(np.int8),
        b=rng.integers(-128, 128, (k, cols)).astype(np.int8),
        row_exp=np.zeros(rows, np.int8), col_exp=np.zeros(cols, np.int8)) for _ in range(tiles)]
    marks = {"cycle": 0, "steps": 0, "first_step": None, "last_step": None, "last_row": None}
    got = []

    async def cmd(ctx):
        await stream_send(ctx, dut.cmd, [c.fields(t, rows, cols) for t, c in enumerate(cmds)])

    def feed(stream, which, lanes, k_major):
        async def process(ctx):
            beats = [[int(x) for x in v] for c in cmds
                     for v in models.operand_beats(getattr(c, which), lanes, k_major)]
            await stream_send(ctx, stream, beats)
        return process

    async def sink(ctx):
        got.extend(await stream_recv(ctx, dut.o_stream, rows * tiles,
                                     convert=lambda p: [int(w) for w in p.data]))

    async def monitor(ctx):
        while len(got) < rows * tiles:
            _, _, step, out = await ctx.tick().sample(
                dut.step, dut.o_stream.valid & dut.o_stream.ready)
            c = marks["cycle"]
            if step:
                marks["steps"] += 1
                marks["first_step"] = c if marks["first_step"] is None else marks["first_step"]
                marks["last_step"] = c
            if out:
                marks["last_row"] = c
            marks["cycle"] = c + 1

    run(dut, cmd, feed(dut.a_stream, "a", rows, False), feed(dut.b_stream, "b", cols, True),
        sink, monitor, deadline_cycles=tiles * (k + 4) + 10 * (rows + cols) + 200)
    want = np.concatenate(models.datapath(cmds, rows, cols))
    if not np.array_equal(np.array(got, dtype=np.uint32), want):
        raise AssertionError("benchmark results differ from the golden model")
    return marks, dut


def cycles(sizes, ks, tiles, packings=(1, 2)) -> list[dict]:
    out = []
    for (rows, cols), packing, k in ((s, p, k) for s in sizes for p in packings for k in ks):
        t0 = time.monotonic()
        single, dut = _run_datapath(rows, cols, k, 1, packing)
        stream, _ = _run_datapath(rows, cols, k, tiles, packing)
        array_span = single["last_row"] - single["first_step"] + 1
        busy_span = stream["last_step"] - stream["first_step"] + 1
        out.append({
            "rows": rows, "cols": cols, "packing": packing, "k": k, "tiles": tiles,
            "single_tile": {
                "total_cycles": single["last_row"] + 1,
                "load_cycles": single["first_step"],
                "array_cycles": array_span,
                "ideal_array_cycles": k + rows + cols - 2 + rows,
                "overhead_cycles": array_span - k,
            },
            "stream": {
                "total_cycles": stream["last_row"] + 1,
                "steps": stream["steps"],
                "step_span": busy_span,
                "array_utilization": round(stream["steps"] / busy_span, 4),
                "end_to_end_utilization": round(stream["steps"] / (stream["last_row"] + 1),
                                                4),
            },
            "fill_latency": dut.fill_latency,
            "seconds": round(time.monotonic() - t0, 1),
        })
        print(f"  simulated {rows}x{cols} packing={packing} k={k} in "
              f"{out[-1]['seconds']} s", file=sys.stderr)
    return out


def cycles_table(results) -> str:
    lines = ["| array | MACs/DSP | K | 1 tile: first step to last row | ideal K+2R+C-2 "
             "| overhead over K | stream of T tiles: array busy "
             "| end to end (incl. first load, last drain) |",
             "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in results:
        s, t = r["single_tile"], r["stream"]
        lines.append(
            f"| {r['rows']}x{r['cols']} | {r['packing']} | {r['k']} | {s['array_cycles']} | "
            f"{s['ideal_array_cycles']} | {s['overhead_cycles']} | "
            f"{100 * t['array_utilization']:.1f}% (T={r['tiles']}) | "
            f"{100 * t['end_to_end_utilization']:.1f}% |")
    return "\n".join(lines)


#: The GEMMs of one training step of a layer y = x W (x: batch x in, W: in x out), as
#: (name, M, N, K, transpose_a, transpose_b) with operands stored as the layer keeps them.
def _training_gemms(batch, fan_in, fan_out):
    return [("forward y = x W", batch, fan_out, fan_in, False, False),
            ("backward-data dx = dy W^T", batch, fan_in, fan_out, False, True),
            ("weight-gradient dW = x^T dy", fan_in, fan_out, batch, True, False)]


def utilization(sizes, widths, latency=32) -> list[dict]:
    from firmware import Device

    out = []
    for (rows, cols), width in ((s, w) for s in sizes for w in widths):
        t0 = time.monotonic()
        dev = Device("rtl", rows=rows, cols=cols, data_width=width, latency=latency)
        print(f"  built {rows}x{cols} at {width} bits in {time.monotonic() - t0:.0f} s",
              file=sys.stderr)
        d = max(rows, cols)
        cases = [("square", *g) for g in (
            ("forward", 8 * d, 8 * d, 16 * d, False, False),
            ("A transposed", 8 * d, 8 * d, 16 * d, True, False),
            ("B transposed", 8 * d, 8 * d, 16 * d, False, True),
            ("both transposed", 8 * d, 8 * d, 16 * d, True, True))]
        cases += [("mnist-logreg", *g) for g in _training_gemms(128, 784, 10)]
        rng = np.random.default_rng(0)
        for group, name, m, n, k, ta, tb in cases:
            a = rng.integers(-128, 128, (k, m) if ta else (m, k), dtype=np.int8)
            b = rng.integers(-128, 128, (n, k) if tb else (k, n), dtype=np.int8)
            t1 = time.monotonic()
            c = dev.gemm(a, b, transpose_a=ta, transpose_b=tb, out="int32")
            wall = time.monotonic() - t1
            from sim import golden
            if not np.array_equal(c, golden.gemm(a, b, ta, tb)):
                raise AssertionError(f"{name}: the accelerator's result differs from golden")
            st = dev.stats
            out.append({"rows": rows, "cols": cols, "data_width": width, "latency": latency,
                        "group": group, "gemm": name, "m": m, "n": n, "k": k,
                        "transpose_a": ta, "transpose_b": tb, "cycles": st["cycles"],
                        "active_cycles": st["active_cycles"],
                        "dma_stall_cycles": st["dma_stall_cycles"],
                        "utilization": round(st["utilization"], 4),
                        "sim_cycles_per_second": round(st["cycles"] / wall)})
    return out


def utilization_table(results) -> str:
    lines = ["| array | bus | GEMM | M x N x K | cycles | PE utilisation | DMA stall cycles "
             "| simulated cycles/s |", "|---|---:|---|---|---:|---:|---:|---:|"]
    for r in results:
        lines.append(f"| {r['rows']}x{r['cols']} | {r['data_width']} | {r['group']}: "
                     f"{r['gemm']} | {r['m']}x{r['n']}x{r['k']} | {r['cycles']} | "
                     f"{100 * r['utilization']:.1f}% | {r['dma_stall_cycles']} | "
                     f"{r['sim_cycles_per_second']:,} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sim.bench", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="what", required=True)
    p = sub.add_parser("resources", help="Yosys resource estimates of the systolic array")
    p.add_argument("--sizes", type=_size, nargs="+", default=[(8, 8), (16, 16)])
    p.add_argument("--families", nargs="+", choices=["xc7", "xcup"], default=["xc7", "xcup"])
    p.add_argument("--out", type=Path, default=ROOT / "results" / "resources.json")
    p = sub.add_parser("cycles", help="cycle counts of tile GEMMs in simulation")
    p.add_argument("--sizes", type=_size, nargs="+", default=[(8, 8), (16, 16)])
    p.add_argument("--k", type=int, nargs="+", default=[64, 256])
    p.add_argument("--tiles", type=int, default=8)
    p.add_argument("--packing", type=int, nargs="+", choices=[1, 2], default=[1, 2])
    p.add_argument("--out", type=Path, default=ROOT / "results" / "cycles.json")
    p = sub.add_parser("utilization", help="PE utilisation of whole GEMMs on the accelerator")
    p.add_argument("--sizes", type=_size, nargs="+", default=[(8, 8), (16, 16)])
    p.add_argument("--widths", type=int, nargs="+", choices=[64, 128, 256, 512],
                   default=[64, 128, 512])
    p.add_argument("--latency", type=int, default=32)
    p.add_argument("--out", type=Path, default=ROOT / "results" / "utilization.json")
    args = parser.parse_args(argv)

    if args.what == "utilization":
        for rows, cols in args.sizes:
            if rows & (rows - 1) or cols & (cols - 1) or min(rows, cols) < 2:
                parser.error(f"--sizes: the accelerator needs powers of two >= 2, "
                             f"not {rows}x{cols}")
        if args.latency < 1:
            parser.error("--latency must be positive")
        results = utilization(args.sizes, args.widths, args.latency)
        table = utilization_table(results)
    elif args.what == "resources":
        results = resources(args.sizes, args.families, ROOT / "build" / "bench")
        table = resources_table(results)
    else:
        if any(k < 1 or k > 65535 for k in args.k):
            parser.error("--k values must be in [1, 65535]")
        if args.tiles < 1:
            parser.error("--tiles must be positive")
        results = cycles(args.sizes, args.k, args.tiles, args.packing)
        table = cycles_table(results)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"command": f"python -m sim.bench {args.what}",
                                    "results": results}, indent=2) + "\n")
    print(table)
    print(f"\nwrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
