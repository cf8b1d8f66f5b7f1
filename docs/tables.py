"""Regenerate the tables of figures in README.md and docs/*.md from the JSON files in results/.

A generated table sits between two markers in a Markdown file::

    <!-- table: NAME -->
    ...
    <!-- end table -->

and everything between them is rewritten from the table's sources: the JSON in ``results/``
and, for the register map and the boards, the descriptions in ``firmware/spec/`` and
``platforms/``. Each table ends with the command that produced its figures.

Usage::

    .venv/bin/python docs/tables.py            # rewrite every stale table
    .venv/bin/python docs/tables.py --check    # exit 1 and print a diff if any is stale

Exit status 2 on a marker naming an unknown table, a missing or unreadable JSON file, or a
marker without its end.
"""

from __future__ import annotations

import argparse
import difflib
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

RESULTS = ROOT / "results"
BOARD_NAMES = ("pynq-z1", "zcu104", "vu9p")
TITLES = {"pynq-z1": "Pynq-Z1", "zcu104": "ZCU104", "vu9p": "VU9P"}
PY = ".venv/bin/python"

MARKER = re.compile(r"<!-- table: ([\w-]+) -->\n(.*?)<!-- end table -->", re.S)
START = re.compile(r"<!-- table: ([\w-]+) -->")


class TableError(Exception):
    """A table that cannot be made: unknown name, missing JSON, bad markers."""


# ---------------------------------------------------------------------------------------------
# Sources


def load(name: str) -> dict:
    """``results/<name>``, parsed; TableError if it is missing or not JSON."""
    path = RESULTS / name
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise TableError(f"missing JSON: results/{name}") from None
    except json.JSONDecodeError as e:
        raise TableError(f"results/{name} is not JSON: {e}") from None


def command(data: dict) -> str:
    """The command recorded in a results file, as run from the repository's root."""
    return re.sub(r"(^|\s)python ", rf"\g<1>{PY} ", data["command"].strip(), count=1)


def build(board: str) -> dict:
    """``results/build_<board>.json``: ``build.py``'s ``report.json`` of the board default."""
    return load(f"build_{board}.json")


def board_default(board: str) -> dict:
    from firmware.spec.boards import config

    return config(board)


def is_default(cfg: dict, board: str) -> bool:
    """Whether a recorded configuration is the board's default (every parameter the
    default states, and the array, equal)."""
    default = board_default(board)
    keys = ("rows", "cols", "depth", "block", "data_width", "packing", "write_ports",
            "read_ports", "slr_groups")
    return all(cfg.get(k, default.get(k)) == default.get(k) for k in keys if k in default)


# ---------------------------------------------------------------------------------------------
# Formatting


def table(header: list[str], rows: list[list], align: str | None = None) -> str:
    """A Markdown table; ``align`` one of ``l``/``r`` per column (default: first left)."""
    align = align or "l" + "r" * (len(header) - 1)
    sep = ["---" if a == "l" else "---:" for a in align]
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(sep) + "|"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def pct(x: float, digits: int = 1) -> str:
    return f"{100 * x:.{digits}f} %"


def num(x) -> str:
    if isinstance(x, float) and not x.is_integer():
        return f"{x:,.1f}"
    return f"{int(x):,}"


def _source(c) -> str:
    """A command in a code span, with its note outside (``(command, note)``), or a sentence
    (a string that starts with "the ")."""
    if isinstance(c, tuple):
        return f"`{c[0]}` ({c[1]})"
    return c if c.startswith("the ") else f"`{c}`"


def produced_by(*commands) -> str:
    cmds = list(dict.fromkeys(commands))
    if len(cmds) == 1:
        return f"Produced by {_source(cmds[0])}."
    return "Produced by:\n\n" + "\n".join(f"- {_source(c)}" for c in cmds)


def array(cfg: dict) -> str:
    return f"{cfg['rows']}×{cfg['cols']}"


def used(report: dict, kind: str) -> str:
    return f"{num(report['resources'][kind])} ({pct(report['utilization'][kind], 0)})"


def build_command(board: str) -> tuple[str, str]:
    return (f"{PY} build.py --platform {board}",
            f"its build/{board}/report.json is results/build_{board}.json")


# ---------------------------------------------------------------------------------------------
# Tables: each returns (Markdown, the commands that produced its figures)


def t_headline():
    util = load("utilization.json")
    direct = load("utilization_zcu104_default.json")
    # the ZCU104's default array is simulated as it is; the VU9P's runs as a scaled stand-in
    summary = {**util["summary"], "zcu104": direct["summary"]["zcu104 (default)"]}
    rows, cmds = [], []
    for b in BOARD_NAMES:
        r, s = build(b), summary[b]
        cfg = r["config"]
        rows.append([
            TITLES[b], array(cfg), num(r["macs_per_cycle"]), f"{r['timing']['target_mhz']:g} MHz",
            used(r, "LUT"), used(r, "DSP"), used(r, "BRAM36"),
            f"{pct(s['mean_util_over_bound'])}, {s['at_90_percent_of_bound']} / {s['gemms']}",
            f"{pct(s['queued_mean_util_over_bound'])}, "
            f"{s['queued_at_90_percent_of_bound']} / {s['gemms']}",
            pct(s["model_error"][0]),
        ])
        cmds.append(build_command(b))
    md = table(["board", "array", "MACs/cycle", "clock", "LUT", "DSP", "BRAM36",
                "utilisation / bound alone: mean, GEMMs ≥ 90 %",
                "queued: mean, GEMMs ≥ 90 %", "model's mean error"], rows)
    note = ("Utilisation is measured in simulation of the accelerator's Verilog on the board's "
            "benchmark GEMMs behind its memory port model, each GEMM alone and queued behind "
            "another; the Pynq-Z1 and ZCU104 defaults are simulated as they are, the VU9P as a "
            "scaled stand-in array (see the performance page). These GEMMs have a row and a "
            "column exponent; a GEMM whose operands change exponent every tile block of 32 "
            "steps (BFP8, as a training step on the device runs) reads the array out after "
            "each block, which on arrays whose read-out takes longer (a row a cycle: the "
            "VU9P's 64 rows) bounds it lower: see 'What bounds the "
            "step on the device' on the performance page.")
    return md + "\n\n" + note, [*cmds, command(util), command(direct)]


TRAINING_FILES = ("training.json", "fashion.json", "fashion_cnn.json")
METHODS = ("fp32 SGD", "int8 SGD", "fp32 SWA", "int8 SWALP")


def t_training_accuracy():
    rows, cmds = [], []
    for name in TRAINING_FILES:
        data = load(name)
        cmds.append(command(data))
        for task, s in data["summary"].items():
            cells = []
            for m in METHODS:
                v = s["methods"].get(m)
                cells.append("—" if v is None else f"{v['mean']:.2f} ± {v['std']:.2f}")
            n = max(v["n"] for v in s["methods"].values())
            metric = f"{s['metric']} ({s['unit']})" if s["unit"] else s["metric"]
            rows.append([f"`{task}`", metric, data["epochs"], n, *cells])
    md = table(["task", "metric", "epochs", "seeds", *METHODS], rows)
    return md + "\n\nMean ± standard deviation over the seeds.", cmds


def t_regmap():
    from firmware.spec import regmap

    rows = []
    for r in regmap.REGISTERS:
        rows.append([f"`0x{r.offset:03X}`", f"`{r.name}`", r.access, "",
                     r.doc.replace("|", "\\|")])
        for f in r.fields:
            bits = f"[{f.lsb + f.width - 1}:{f.lsb}]" if f.width > 1 else f"[{f.lsb}]"
            rows.append(["", "", "", f"`{bits}` {f.name}", f.doc.replace("|", "\\|")])
    md = table(["offset", "register", "access", "field", "description"], rows, "rllll")
    return md, ["the register descriptions `REGISTERS` in `firmware/spec/regmap.py`"]


def _timing_of_default(board: str) -> tuple[str, dict]:
    """The board default's timing: the build's report where it synthesised the default whole,
    else the timing.json entry that measured the default (by parts), else the build's."""
    if build(board)["timing"].get("whole_design"):
        return build_command(board), build(board)["timing"]
    data = load("timing.json")
    for key, entry in data.items():
        if key.startswith(board + " ") and is_default(entry["config"], board) \
                and "without" not in key and "only" not in key:
            return command(entry), entry
    return build_command(board), build(board)["timing"]


def t_boards():
    from firmware.spec.boards import board as board_info
    from firmware.spec.ports import BOARD_PORTS, PORTS
    from platforms import PLATFORMS

    cols = {b: [] for b in BOARD_NAMES}
    cmds = []
    for b in BOARD_NAMES:
        info, plat, r = board_info(b), PLATFORMS[b], build(b)
        cfg = board_default(b)
        port = PORTS[BOARD_PORTS[b]]
        tcmd, timing = _timing_of_default(b)
        cmds += [build_command(b), tcmd]
        cols[b] = [
            f"`{plat.part}`",
            f"{info.family}, {info.dsp_slice}",
            f"{array(cfg)}, {cfg['packing']} MACs/DSP, block {cfg['block']}, "
            f"depth {cfg['depth']}",
            num(r["macs_per_cycle"]),
            f"{cfg['data_width']} bits",
            f"{cfg.get('read_ports', 1)} read, {cfg.get('write_ports', 1)} write",
            f"`{BOARD_PORTS[b]}`: {port['protocol']}, bursts ≤ {port['max_burst']}, "
            f"DRAM {port['dram_gbps']:g} GB/s",
            f"{info.clock_mhz:g} MHz",
            used(r, "LUT"), used(r, "FF"), used(r, "DSP"), used(r, "BRAM36"),
            used(r, "URAM"),
            ("fits" if r["fits"] else "does not fit")
            + f" (≤ {pct(r['headroom_limit'], 0)} of each)" * bool(r["within_headroom"]),
            f"{timing['max_levels']} of {timing['budget_levels']}",
            f"{timing['max_fanout']} (budget {timing['fanout_budget']})",
        ]
    names = ["device", "family, DSP slice", "array (default)", "MACs/cycle", "memory bus",
             "AXI ports", "port preset", "clock", "LUT", "FF", "DSP", "BRAM36", "URAM",
             "fit", "logic levels (deepest / budget)", "largest fan-out"]
    rows = [[n, *(cols[b][i] for b in BOARD_NAMES)] for i, n in enumerate(names)]
    md = table(["", *(TITLES[b] for b in BOARD_NAMES)], rows, "llll")
    return md, cmds


def t_port_presets():
    from firmware.spec.ports import PORTS

    rows = []
    for name, p in PORTS.items():
        def lim(v):
            return "∞" if v is None else v
        rows.append([f"`{name}`", p["protocol"], lim(p["outstanding_reads"]),
                     lim(p["outstanding_writes"]), p["read_latency"], p["write_latency"],
                     p["max_burst"], p["write_order"], f"{p['pause']:g}",
                     "∞" if p["dram_gbps"] is None else f"{p['dram_gbps']:g}",
                     p["dram_arbitration"]])
    md = table(["preset", "protocol", "reads in flight", "writes in flight", "read latency",
                "write response", "longest burst", "write order", "pause", "DRAM GB/s",
                "DRAM arbitration"], rows, "llrrrrrlrrl")
    return md, ["the presets `PORTS` in `firmware/spec/ports.py`"]


def t_utilization():
    util = load("utilization.json")
    rows = []
    for b in BOARD_NAMES:
        s = util["summary"][b]
        recs = [r for r in util["results"] if r["board"] == b]
        cfg = util["bench_configs"][b]
        scale = util["bench_scale"][b]
        rows.append([
            TITLES[b], f"{array(cfg)} @ {cfg['data_width']}" + (f" (1/{scale})" if scale > 1
                                                              else ""),
            s["gemms"],
            pct(s["mean_util_over_bound"]),
            pct(min(r["utilization_over_bound"] for r in recs)),
            f"{s['at_90_percent_of_bound']}",
            f"{s['at_90_percent_of_latency_bound']}",
            pct(s["queued_mean_util_over_bound"]),
            pct(min(r["queued_over_bound"] for r in recs)),
            f"{s['queued_at_90_percent_of_bound']}",
        ])
    md = table(["board", "benchmark array (scale)", "GEMMs", "alone: mean util / bound", "min",
                "≥ 90 % of bound", "≥ 90 % of latency bound", "queued: mean", "min",
                "≥ 90 % of bound"], rows)
    return md, [command(util)]


def t_utilization_default():
    data = load("utilization_zcu104_default.json")
    s = data["summary"]["zcu104 (default)"]
    recs = data["results"]
    md = table(["board", "array", "GEMMs", "alone: mean util / bound", "min", "≥ 90 %",
                "queued: mean", "≥ 90 %", "model's mean error"],
               [["ZCU104", f"{array(recs[0])} @ {recs[0]['data_width']}", s["gemms"],
                 pct(s["mean_util_over_bound"]),
                 pct(min(r["utilization_over_bound"] for r in recs)),
                 s["at_90_percent_of_bound"], pct(s["queued_mean_util_over_bound"]),
                 s["queued_at_90_percent_of_bound"], pct(s["model_error"][0])]])
    return md, [command(data)]


def _errors(data: dict) -> dict[str, list[float]]:
    """Recorded relative errors of the model's predictions per group of a results file."""
    out: dict[str, list[float]] = {}
    for r in data["results"]:
        if "schedules" in r:
            key = r["board"] + (" queued" if r["queued"] else "")
            out.setdefault(key, []).extend(s["predicted"] / s["cycles"] - 1
                                           for s in r["schedules"])
        elif "model_error" in r:
            out.setdefault(r["board"], []).append(r["model_error"])
            if "queued_model_error" in r:
                out.setdefault(r["board"] + " queued", []).append(r["queued_model_error"])
        else:
            out.setdefault(r["port"], []).append(r["predicted_cycles"] / r["cycles"] - 1)
    return out


MODEL_FILES = (
    ("utilization.json", "benchmark GEMMs, the driver's schedule"),
    ("sweep_pynq-z1.json", "every schedule of the benchmark GEMMs"),
    ("sweep_zcu104.json", "every schedule of the benchmark GEMMs"),
    ("sweep_vu9p.json", "every schedule of the benchmark GEMMs"),
    ("queued_sweep_vu9p.json", "every schedule, queued"),
    ("queued_sweep_pynq-z1_256-10.json", "every schedule of the 256→10 GEMMs, queued"),
    ("sweep_pynq-z1_random.json", "random shapes held out from the benchmark"),
    ("sweep_vu9p_random.json", "random shapes held out from the benchmark"),
    ("model_check_pynq-z1.json", "random configurations and shapes"),
    ("model_check_zcu104.json", "random configurations and shapes"),
    ("model_check_vu9p.json", "random configurations and shapes"),
    ("model_check.json", "random configurations and shapes behind the ideal port (ideal) and "
                         "a Zynq-like port without pauses (ideal+)"),
    ("model_check_zcu104_kblocks.json", "the ZCU104's default with --k-blocks: random BFP8 "
                                        "GEMMs with tile exponents along K"),
)


def t_model_accuracy():
    rows, cmds = [], []
    for name, what in MODEL_FILES:
        data = load(name)
        cmds.append(command(data))
        for group, errs in _errors(data).items():
            a = [abs(e) for e in errs]
            rows.append([f"`{name}`", group, what, len(a), pct(sum(a) / len(a)),
                         pct(max(a)), pct(sum(x <= 0.05 for x in a) / len(a), 0)])
    md = table(["results", "board or port", "what ran", "runs", "mean error", "largest",
                "within ±5 %"], rows, "lllrrrr")
    return md, [*cmds, (f"{PY} -m firmware.runtime.perfmodel --check results/FILE.json",
                        "predicts every run of a file again")]


def t_timing():
    data = load("timing.json")
    rows, cmds = [], []
    for key, e in data.items():
        b = key.split()[0]
        if not is_default(e["config"], b):
            continue
        rows.append([TITLES[b], e["measured_on"], f"{e['target_mhz']:g} MHz",
                     f"{e['max_levels']} / {e['budget_levels']}",
                     f"{e['max_fanout']} / {e['fanout_budget']}"])
        cmds.append(command(e))
    md = table(["board", "measured on", "clock", "logic levels: deepest / budget",
                "fan-out: largest / budget"], rows, "llrrr")
    return md, cmds


def t_timing_budget():
    rows, cmds = [], []
    for b in BOARD_NAMES:
        t = build(b)["timing"]
        period = 1000 / t["target_mhz"]
        rows.append([TITLES[b], f"`{build(b)['device']}`", t["family"], t["speed_grade"],
                     f"{t['target_mhz']:g} MHz", f"{t['level_ns']:.2f} ns",
                     f"{t['overhead_ns']:.1f} ns",
                     f"⌊({period:g} − {t['overhead_ns']:g}) / {t['level_ns']:g}⌋ = "
                     f"{t['budget_levels']}"])
        cmds.append(build_command(b))
    md = table(["board", "device", "family", "speed grade", "clock", "LUT + net", "overhead",
                "budget (levels)"], rows, "lllllrrl")
    return md, cmds


def t_resources():
    rows, cmds = [], []
    for b in BOARD_NAMES:
        r = build(b)
        macs = r["macs_per_cycle"]
        method = r["estimate_method"].split(":")[0].split(" (")[0]
        rows.append([TITLES[b], array(r["config"]), num(macs), used(r, "LUT"), used(r, "FF"),
                     used(r, "DSP"), used(r, "BRAM36"), used(r, "URAM"),
                     f"{r['resources']['LUT'] / macs:.0f}", "yes" if r["fits"] else "no",
                     method])
        cmds.append(build_command(b))
    md = table(["board", "array", "MACs/cycle", "LUT", "FF", "DSP", "BRAM36", "URAM",
                "LUT/MAC", "fits", "estimate"], rows, "llrrrrrrrll")
    return md, cmds


def t_array_resources():
    data = load("resources.json")
    rows = []
    for r in data["results"]:
        res, per = r["resources"], r["per_mac"]
        rows.append([f"{r['rows']}×{r['cols']}", r["family"], r["mapping"], num(res["LUT"]),
                     num(res["FF"]), num(res["DSP"]), f"{per['LUT']:.1f}", f"{per['FF']:.1f}",
                     f"{per['DSP']:g}"])
    md = table(["array", "family", "DSP mapping", "LUT", "FF", "DSP", "LUT/MAC", "FF/MAC",
                "DSP/MAC"], rows, "lllrrrrrr")
    return md, [command(data)]


def t_host_profile(name="host_profile.json"):
    data = load(name)
    kinds = list(data["results"][0]["host_seconds"])
    rows = []
    for r in data["results"]:
        hs = r["host_seconds"]
        rows.append([TITLES.get(r["board"], r["board"]), r["config"], r["blocks"], r["batch"],
                     *(f"{1000 * hs[k]:.0f}" for k in kinds),
                     f"{1000 * r['accelerator_seconds']:.1f}", pct(r["host_share"], 0)])
    md = table(["board", "array @ bus", "blocks", "batch", *(f"{k} (ms)" for k in kinds),
                "accelerator (ms)", "host share"], rows, "lllr" + "r" * (len(kinds) + 2))
    note = (f"Milliseconds per training step, measured on {data['machine']} (Python "
            f"{data['python']}); a float32 step on the host alone takes "
            f"{1000 * data['fp32_step_seconds']:.0f} ms.")
    return md + "\n\n" + note, [command(data)]


def t_cycles():
    data = load("cycles.json")
    rows = []
    for r in data["results"]:
        t, s = r["single_tile"], r["stream"]
        rows.append([f"{r['rows']}×{r['cols']}", r["packing"], r["k"], t["array_cycles"],
                     t["ideal_array_cycles"], t["overhead_cycles"],
                     f"{pct(s['array_utilization'])} (T={r['tiles']})",
                     pct(s["end_to_end_utilization"])])
    md = table(["array", "MACs/DSP", "K", "1 tile: first step to last row",
                "ideal K+2R+C−2", "overhead over K", "stream of T tiles: array busy",
                "end to end"], rows)
    return md, [command(data)]


def t_proofs():
    from sim.formal import proofs

    rows = []
    for p in [*proofs.PROOFS.values(), *proofs.FLAWED.values()]:
        rows.append([f"`{p.name}`", p.doc + ("" if p.expect_pass else " (must fail)"),
                     "k-induction" if p.mode == "prove" else "BMC", p.depth,
                     "no (`-m slow`)" if p.slow else "yes"])
    md = table(["proof", "what it checks", "mode", "depth", "default `pytest` run"], rows,
               "lllrl")
    return md, [(f"{PY} -m sim.formal.proofs --list", "lists the registry in sim/formal/proofs.py")]


def t_formats():
    data = load("formats.json")
    fmts = list(data["formats"])
    title = {"per-tensor": "per tensor", "rows": "rows (Fox et al.)", "mxint8": "MXINT8 1×32"}
    head = ["tensor", *(title[f] if f in title else "tile {0}×{0}".format(f.split("-")[1])
                        for f in fmts)]
    rows = []
    for t in data["tensors"]:
        mine = {r["format"]: r for r in data["rows"] if r["tensor"] == t["name"]}
        shape = "×".join(str(s) for s in t["shape"])
        rows.append([f"{t['name']} ({shape})",
                     *(f"{100 * mine[f]['rel_rms_nearest']:.2f} %" for f in fmts)])
    by = {s["format"]: s for s in data["summary"]}
    rows.append(["**geometric mean, nearest**",
                 *(f"**{100 * by[f]['rel_rms_nearest_geomean']:.2f} %**" for f in fmts)])
    rows.append(["geometric mean, stochastic",
                 *(f"{100 * by[f]['rel_rms_stochastic_geomean']:.2f} %" for f in fmts)])
    rows.append(["exponent bits per element (mean)",
                 *(f"{by[f]['exp_bits_per_element_mean']:.3f}" for f in fmts)])
    rows.append(["one copy serves X and Xᵀ",
                 *("yes" if data["formats"][f]["transposable"] else "no" for f in fmts)])
    md = table(head, rows)
    note = ("Relative RMS error ‖Q(x) − x‖ / ‖x‖ of int8 mantissas with one power-of-two "
            "exponent per block, round to nearest unless stated.")
    return md + "\n\n" + note, [command(data)]


#: (results file, the block format's name in the table); a file absent from results/ or still
#: partial (a campaign under way) is skipped, so the table can go in before every file exists.
FORMAT_FILES = (("fashion.json", "per tensor (`--blocks tensor`)"),
                ("fashion_tile.json", "BFP8 tile blocks (`--blocks tile`)"),
                ("fashion_cnn.json", "Fox et al. (`--blocks fox`)"),
                ("fashion_cnn_tile.json", "BFP8 tile blocks (`--blocks tile`)"),
                ("fashion_cnn_device.json",
                 "whole step on the device (`--blocks device`; both arms without momentum)"))
#: the accuracy target: int8 within this many points of fp32
FORMAT_TARGET = 0.3


def t_training_formats():
    rows, cmds = [], []
    for name, fmt in FORMAT_FILES:
        if not (RESULTS / name).exists():
            continue
        data = load(name)
        if data.get("partial") or "summary" not in data:
            continue
        cmds.append(command(data))
        for task, s in data["summary"].items():
            fp32 = s["methods"]["fp32 SGD"]
            for arm in ("int8 SGD", "int8 SWALP"):
                v = s["methods"].get(arm)
                d = s["differences"].get(f"{arm} − fp32 SGD")
                if v is None or d is None:
                    continue
                lo, hi = d["ci95"]
                verdict = ("yes" if lo >= -FORMAT_TARGET
                           else "mean only" if d["mean"] >= -FORMAT_TARGET else "**no**")
                rows.append([f"`{task}`", fmt, arm, v["n"],
                             f"{fp32['mean']:.2f} [{fp32['ci95'][0]:.2f}, {fp32['ci95'][1]:.2f}]",
                             f"{v['mean']:.2f} [{v['ci95'][0]:.2f}, {v['ci95'][1]:.2f}]",
                             f"{d['mean']:+.2f} [{lo:+.2f}, {hi:+.2f}]", verdict])
    md = table(["task", "blocks", "int8 arm", "seeds", "fp32 SGD (%)", "int8 (%)",
                "int8 − fp32 SGD (pp, paired)", f"within {FORMAT_TARGET} pp?"], rows,
               align="lllrrrrl")
    note = ("Test accuracy, mean [95 % confidence interval of the mean, Student t] over the "
            "seeds; the difference is paired by seed (mean of the per-seed differences [its "
            f"95 % t interval]). Within {FORMAT_TARGET} pp: yes when the whole interval lies "
            f"above −{FORMAT_TARGET}, mean only when the mean does.")
    return md + "\n\n" + note, cmds


#: The Pynq-Z1 builds of the kblocks-build table: (results file, what, its command's flags).
KBLOCK_BUILDS = (("build_pynq-z1.json", "pynq-z1", ""),
                 ("build_pynq-z1_kblocks.json", "pynq-z1", " --k-blocks"),
                 ("build_pynq-z1_epilogue.json", "pynq-z1",
                  " --k-blocks --epilogue --write-ports 2"),
                 ("build_pynq-z1_sgd.json", "pynq-z1",
                  " --k-blocks --epilogue --sgd --write-ports 2"),
                 ("build_pynq-z1_conv.json", "pynq-z1", " --k-blocks --conv"),
                 ("build_zcu104.json", "zcu104", ""),
                 ("build_zcu104_kblocks.json", "zcu104", " --k-blocks"),
                 ("build_zcu104_step.json", "zcu104",
                  " --cols 32 --k-blocks --epilogue --sgd --conv"))


def t_kblocks_build():
    rows, cmds = [], []
    for name, board, flags in KBLOCK_BUILDS:
        if not (RESULTS / name).exists():
            continue
        r = load(name)
        # (a build recorded with other read ports than the default's now names them)
        rp = r["config"].get("read_ports", 1)
        if "--read-ports" not in flags and rp != board_default(board).get("read_ports", 1):
            flags += f" --read-ports {rp}"
        cmds.append(f".venv/bin/python build.py --platform {board}{flags}")
        res, use, t = r["resources"], r["utilization"], r["timing"]
        what = f"{TITLES[board]} default" + (f" with `{flags.strip()}`" if flags else "")
        rows.append([what, *(f"{res[k]:,g} ({pct(use[k], 0)})" for k in ("LUT", "FF", "DSP",
                                                                         "BRAM36")),
                     f"{t['max_levels']} of {t['budget_levels']} at {t['target_mhz']:g} MHz",
                     f"{t['max_fanout']} of {t['fanout_budget']}"])
    md = table(["build", "LUT", "FF", "DSP", "BRAM36", "logic levels", "largest fan-out"],
               rows, "lrrrrrr")
    return md, cmds


def t_conv_rtl():
    data = load("conv_rtl.json")
    c = data["config"]
    rows = []
    small = f"{c['rows']}x{c['cols']}@{c['data_width']}, {c['port']}"
    for r in data["results"]:
        macs = r.get("array_macs", c["array_macs"])
        rows.append([r.get("array", small), r["layer"], r["mode"],
                     f"{r['m']}×{r['n']}×{r['k']}",
                     f"{r['rtl_cycles']:,}", f"{r['model_cycles']:,}",
                     f"{r['rtl_cycles'] / r['model_cycles']:.2f}",
                     pct(r["macs"] / macs / r["rtl_cycles"], 0),
                     pct(r["macs"] / macs / r["model_cycles"], 0)])
    r0 = data["results"][0]
    md = table(["array", "layer", "descriptor", "M×N×K", "RTL cycles", "model cycles",
                "RTL / model", "RTL utilisation", "model utilisation"], rows, "lllrrrrrr")
    note = (f"fashion-cnn's 3×3 convolutions (padding 1) at batch {r0['batch']}, the first "
            f"on a {r0['height']}×{r0['width']} input (fashion-cnn's is 28×28) and the "
            f"second on half its side, alone and with the step's 2×2 max pools (the second "
            f"layer's backward-data routing its deltas back through the first layer's pool; "
            f"the RTL computes its GEMM once and writes it at each window phase), on "
            f"`Device(\"rtl\")` built with "
            f"convolutions ({c['rows']}x{c['cols']} array, {c['data_width']}-bit bus, depth "
            f"{c['depth']}, block {c['block']}, {c['port']} port) and the performance "
            f"model of the same configuration"
            + ("; last, ResNet-20's 16-channel convolution forward and weight gradient "
               "(16 -> 16 channels, 32×32 input) on the ZCU104's whole-step shape, its "
               "default with 32 columns behind its port model (its depth, block, packing "
               "and ports), likewise."
               if any("array" in r for r in data["results"]) else "."))
    return md + "\n\n" + note, [command(data)]


def t_conv_layouts():
    data = load("conv_format.json")
    rows = []
    for r in data["layouts"]:
        rows.append([r["network"], r["layer"], f"{r['kernel']}×{r['kernel']}/{r['stride']}",
                     r["order"], f"{r['runs_per_block']:.2f}", pct(r["straddled_blocks"], 0),
                     f"{r['forward_segment_bytes']:,.0f}"])
    md = table(["network", "layer", "kernel/stride", "order", "weight-gradient runs per K "
                "block", "K blocks straddled", "forward read segment (bytes, mean)"], rows,
               "llllrrr")
    note = (f"Batch {data['layouts'][0]['batch']}; CHWN: the batch innermost, NCHW: the "
            "image's columns innermost.")
    return md + "\n\n" + note, [command(data)]


def t_conv_straddle():
    data = load("conv_format.json")
    rows = [[r["layer"], r["batch"], r["order"], f"{r['runs_per_block']:.2f}",
             pct(r["error_x"], 2), pct(r["error_delta"], 2), pct(r["error_split"], 2),
             pct(r["error_reblock"], 2)] for r in data["straddle"]]
    md = table(["layer", "batch", "order", "runs per K block", "error of X", "error of δ",
                "weight gradient, split runs", "weight gradient, re-blocked"], rows,
               "lrlrrrrr")
    note = ("Relative RMS error against float32 on fashion-cnn's tensors after float32 "
            "training; the weight gradient's with each straddle rule.")
    return md + "\n\n" + note, [command(data)]


def t_step_bound():
    data = load("conv_layers.json")
    rows = []
    for r in data["results"]:
        rows.append([r["net"], f"{TITLES.get(r['board'], r['board'])} ({r['config']}, "
                     f"{r['clock_mhz']:g} MHz)", r["kblock_interval"],
                     f"{r['step_ms']:,.1f}", pct(r["utilization"], 1),
                     f"{r['bound_ms']:,.1f}", pct(r["bound"], 1),
                     f"{r['ideal_ms']:,.1f}", pct(r["ideal"], 1),
                     f"{r['any_mapping_ms']:,.1f}", pct(r["any_mapping"], 1)])
    md = table(["network", "board default", "K-block read-out (cycles)", "accelerator (ms)",
                "utilisation", "bound (ms)", "bound", "without the read-out (ms)",
                "without the read-out", "any mapping (ms)", "any mapping"], rows,
               "llrrrrrrrrr")
    note = (f"Batch {data['results'][0]['batch']}, the whole step on the device "
            "(`ResidentConvNet`), every descriptor's cycles from the performance model "
            "summed; multiply-accumulates as the engine counts them (forward and "
            "backward-data without the products of padding, the weight gradients with "
            "them). Bound: each descriptor at the larger of its K-block compute bound and "
            "its compulsory traffic; without the read-out: at the larger of its compute and "
            "traffic bounds; any mapping: at the larger of its products that are not "
            "padding's over the array's peak and its compulsory traffic, and the "
            "utilisation over those products (the step benchmark's).")
    return md + "\n\n" + note, [command(data)]


def t_layers(net: str, board: str = "zcu104"):
    data = load("conv_layers.json")
    r = next(r for r in data["results"] if r["net"] == net and r["board"] == board)
    rows = []
    for d in r["descriptors"]:
        macs = bool(d["macs"])               # (none: a quantise-only descriptor)
        rows.append([d["layer"], d["pass"], d.get("layer_shape", ""),
                     f"{d['m']}×{d['n']}×{d['k']}", f"{d['macs'] / 1e6:,.1f}",
                     f"{d['cycles'] / 1e3:,.1f}",
                     pct(d["utilization"], 1) if macs else "—",
                     pct(d["bound"], 1) if macs else "—", d["bound_by"],
                     pct(d["ideal"], 1) if macs else "—",
                     pct(d["any_mapping"], 1) if macs else "—"])
    md = table(["layer", "pass", "input -> output channels, kernel", "M×N×K (mean K)",
                "MACs (M)", "cycles (k)", "utilisation", "bound", "bound by",
                "without the read-out", "any mapping"], rows, "lllrrrrrlrr")
    note = (f"{TITLES.get(board, board)} default ({r['config']}, {r['port']}, "
            f"{r['clock_mhz']:g} MHz), batch {r['batch']}, in the order the step runs them. "
            "Any mapping: the descriptor's products that are not padding's over the array's "
            "peak in the larger of their cycles on every PE and its compulsory traffic's.")
    return md + "\n\n" + note, [command(data)]


#: The step benchmark's records: the host path's, the whole step on the device, and that
#: on the ZCU104 with the 32 x 32 array its build of the whole step has.
STEP_FILES = ("step.json", "step_resident.json", "step_resident_zcu104_32x32.json")


def t_step():
    from firmware.spec.boards import config
    files = [load(name) for name in STEP_FILES if (RESULTS / name).exists()]
    rows = []
    for r in (r for d in files for r in d["results"]):
        cfg = config(r["board"])
        default = r["config"] == f"{cfg['rows']}x{cfg['cols']}@{cfg['data_width']}"
        rows.append([r["net"], f"{TITLES.get(r['board'], r['board'])} ({r['config']}, "
                     f"{r['clock_mhz']:g} MHz{'' if default else ', not the default'})",
                     r["blocks"], r["batch"],
                     f"{1000 * r['host_total']:,.0f}", f"{1000 * r['accelerator_seconds']:,.1f}",
                     f"{1000 * r['step_seconds']:,.0f}", pct(r["host_share"], 1),
                     f"{1000 * r['torch_seconds']:,.0f}", f"{r['speedup']:.2f}×",
                     pct(r["utilization"], 2), pct(r["accelerator_utilization"], 0)])
    md = table(["network", "board (array@bus)", "blocks", "batch", "host (ms)",
                "accelerator (ms)",
                "step (ms)", "host share", "PyTorch fp32, one core (ms)", "speedup",
                "end-to-end utilisation", "accelerator busy utilisation"], rows,
               "lllrrrrrrrrr")
    where = sorted({(d["machine"], d["python"], d["torch"]) for d in files})
    note = ("Measured on " + "; ".join(f"{m} (Python {p}, torch {t})" for m, p, t in where)
            + ". End-to-end utilisation: the step's multiply-accumulates (without the products "
            "of zero padding) over the board's peak in the step's time; busy utilisation: over "
            "its peak in the accelerator's time alone.")
    return md + "\n\n" + note, [command(d) for d in files]


TABLES = {
    "proofs": t_proofs,
    "headline": t_headline,
    "training-accuracy": t_training_accuracy,
    "training-formats": t_training_formats,
    "regmap": t_regmap,
    "formats": t_formats,
    "kblocks-build": t_kblocks_build,
    "conv-rtl": t_conv_rtl,
    "boards": t_boards,
    "port-presets": t_port_presets,
    "utilization": t_utilization,
    "utilization-default": t_utilization_default,
    "model-accuracy": t_model_accuracy,
    "timing": t_timing,
    "timing-budget": t_timing_budget,
    "resources": t_resources,
    "array-resources": t_array_resources,
    "host-profile": t_host_profile,
    "host-profile-mlp": lambda: t_host_profile("host_profile_mlp.json"),
    "cycles": t_cycles,
    "conv-layouts": t_conv_layouts,
    "conv-straddle": t_conv_straddle,
    "step": t_step,
    "step-bound": t_step_bound,
    "layers-fashion-cnn": lambda: t_layers("fashion-cnn"),
    "layers-vgg11": lambda: t_layers("vgg11"),
    "layers-resnet20": lambda: t_layers("resnet20"),
}


# ---------------------------------------------------------------------------------------------
# Files


def render(name: str, cache: dict) -> str:
    """What goes between the markers of table ``name``."""
    if name not in TABLES:
        raise TableError(f"unknown table {name!r}; known: {', '.join(TABLES)}")
    if name not in cache:
        md, cmds = TABLES[name]()
        cache[name] = f"\n{md}\n\n{produced_by(*cmds)}\n\n"
    return cache[name]


def pages(root: Path = ROOT) -> list[Path]:
    return [p for p in [root / "README.md", *sorted((root / "docs").glob("**/*.md"))]
            if "_build" not in p.parts and p.exists()]


def regenerate(text: str, cache: dict, where: str = "") -> str:
    starts = START.findall(text)
    blocks = MARKER.findall(text)
    if len(starts) != len(blocks):
        raise TableError(f"{where}: a '<!-- table: NAME -->' marker without "
                         "'<!-- end table -->'")
    return MARKER.sub(lambda m: f"<!-- table: {m.group(1)} -->\n"
                                f"{render(m.group(1), cache)}<!-- end table -->", text)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true",
                        help="change nothing; exit 1 with a diff if a table is stale")
    parser.add_argument("--root", type=Path, default=ROOT,
                        help="the repository whose README.md and docs/ to treat")
    args = parser.parse_args(argv)
    cache: dict = {}
    stale = 0
    try:
        for path in pages(args.root):
            old = path.read_text()
            new = regenerate(old, cache, str(path.relative_to(args.root)))
            if new == old:
                continue
            stale += 1
            rel = str(path.relative_to(args.root))
            if args.check:
                sys.stdout.writelines(difflib.unified_diff(
                    old.splitlines(True), new.splitlines(True), f"{rel} (committed)",
                    f"{rel} (from results/)"))
            else:
                path.write_text(new)
                print(f"rewrote tables in {rel}")
    except TableError as e:
        print(f"docs/tables.py: {e}", file=sys.stderr)
        return 2
    if args.check and stale:
        print(f"{stale} file(s) with stale tables: run {PY} docs/tables.py", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
