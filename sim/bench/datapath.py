"""The datapath alone: Yosys resources of the systolic array and cycle counts of tile GEMMs.

``python -m sim.bench resources`` and ``python -m sim.bench cycles``."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

__all__ = ["resources", "resources_table", "cycles", "cycles_table"]


def resources(sizes, families, work_dir: Path) -> list[dict]:
    """Yosys ``synth_xilinx`` of the systolic array at each size and family.

    Parameters
    ----------
    sizes : list of (int, int)
        Array shapes ``(rows, cols)``.
    families : list of str
        ``"xc7"`` (one MAC per DSP48E1) and/or ``"xcup"`` (one MAC per DSP48E2, inferred,
        and two per DSP48E2, instantiated).
    work_dir : Path
        Where the netlists and Yosys' logs go.

    Returns
    -------
    list of dict
        One record per array and mapping: resources, resources per MAC, seconds.
    """
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
    """Records of :func:`resources` as a Markdown table."""
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
    from sim.models import datapath as models
    from sim.testbenches.harness import run, stream_recv, stream_send

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
    """Cycle counts of tile GEMMs on the datapath in the Amaranth simulator.

    Each configuration runs one tile alone and ``tiles`` tiles back to back; the results
    are checked against :func:`sim.models.datapath.datapath`.

    Parameters
    ----------
    sizes : list of (int, int)
        Array shapes ``(rows, cols)``.
    ks : list of int
        Tile lengths K.
    tiles : int
        Tiles in the back-to-back stream.
    packings : tuple of int
        MACs per DSP slice.

    Returns
    -------
    list of dict
        One record per configuration: the single tile's cycles against the ideal
        ``K + 2R + C - 2``, and the stream's array and end-to-end utilisation.
    """
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
    """Records of :func:`cycles` as a Markdown table."""
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
