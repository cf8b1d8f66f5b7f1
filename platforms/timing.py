"""Logic depth and fan-out of a Yosys ``synth_xilinx`` netlist, like Vivado's
``report_design_analysis``.

The build runs without Vivado, so it states how deep its paths are instead. The netlist is
the flat one Yosys writes (``synth_xilinx -flatten``, ``write_json``; see
:func:`platforms.estimate.synthesize`), analysed in Python:

* **Start and end points** are the sequential cells -- flip-flops and latches (``FD*``,
  ``LD*``), shift registers (``SRL16E``, ``SRLC32E``), block RAM (``RAMB18E1/E2``,
  ``RAMB36E1/E2``, ``FIFO*``), UltraRAM, DSP slices (``DSP48E1/E2``) -- and the top-level
  ports. Every input pin bit of a sequential cell that is not its clock, and every output port
  bit, is an end point; every output of a sequential cell, and every input port bit, starts
  paths at level 0.
* **DSP slices are start and end points** where their registers are on: the systolic array's
  PEs register their inputs, product and accumulator (A/B, M, P), so paths end at the input
  pins and start at P. An input pin with no register between it and the outputs (its own
  ``AREG``/``BREG``/... off, ``MREG`` off for the multiplier's inputs, ``PREG`` off) is
  crossed combinationally -- the engine's inferred multipliers are -- and counts
  :data:`DSP_LEVELS` levels (its delay is several LUT levels'); such slices are counted in
  ``combinational_dsps`` and shown as ``DSP48E1(comb)`` on a path.
* **Distributed RAM and SRL reads are combinational**: a LUTRAM's (``RAM32M``, ``RAM64M``,
  ``RAM32X1D``, ``RAM64X1D``, ...) or an SRL's read port is the LUT's address-to-output path.
  The write side (data, write enable, and the address, which is also the write address) is an
  end point; the output is a start point of its own (the stored bits) and *also* one level
  after its read-address inputs. The cascade outputs (``Q15``, ``Q31``) are sequential only.
* **Logic levels** are counted as Vivado counts them: LUT1--LUT6 (and ``LUT6_2``, ``INV``) one
  level each, ``MUXF7``/``MUXF8``/``MUXF9`` one level each, ``CARRY4``/``CARRY8`` one level
  per carry cell crossed (a ripple through CI -> CO of *n* cells is *n* levels; the arcs inside
  a carry cell follow its bit order), buffers (``BUF``, ``IBUF``, ``OBUF``, ``BUFG``...) and
  constants none.

The longest path to every end point is found by a depth-first walk over the combinational
graph of net bits (Yosys' ``ltp -noff`` does not know that ``FDRE`` is a flip-flop and sees
loops everywhere); combinational loops are reported, cut at the edge that closes them. The
per-clock histogram keys end points by the net on their clock pin (output ports have none).
Fan-out counts the loads of every net bit (cell input pins plus output ports), clock nets and
constants excluded. Net names are the ones Yosys keeps (public wire names, i.e. the RTL's
signal names with their hierarchy, ``hdlname``), so a reader can find the RTL.

The budget (:data:`FAMILY_TIMING`, :func:`budget_levels`, :data:`FANOUT_BUDGET`) and where
its numbers come from are in ``docs/performance.md``.
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from pathlib import Path

#: What ``without_array`` empties: the systolic array (its ports stay, as a cell).
from .estimate import ARRAY_MODULE

__all__ = ["FAMILY_TIMING", "FANOUT_BUDGET", "budget_levels", "analyse", "analyse_file",
           "synthesize_netlist", "accelerator_timing", "array_timing", "by_parts", "MAPPING",
           "violations", "markdown", "WHOLE_LIMIT"]

#: Per family: the speed grade the boards use, the delay of one logic level (a LUT and the
#: net after it) and the fixed part of a register-to-register path (clock-to-out, setup,
#: clock uncertainty, a reserve for the first and last net); see ``docs/performance.md``.
FAMILY_TIMING = {
    "xc7": {"speed_grade": "-1", "level_ns": 0.60, "overhead_ns": 2.0,
            "devices": "Zynq-7000 / Artix-7 fabric, -1 (Pynq-Z1: xc7z020clg400-1)"},
    "xcup": {"speed_grade": "-2", "level_ns": 0.45, "overhead_ns": 1.2,
             "devices": "Zynq / Virtex UltraScale+, -2 (ZCU104: xczu7ev-2, VCU118: xcvu9p-2L)"},
}

#: Most loads on one non-clock net before it counts as over budget (see ``docs/performance.md``).
FANOUT_BUDGET = 1000

#: Bump when the analysis changes: cached reports are keyed by it.
VERSION = 4


def budget_levels(family: str, target_mhz: float) -> int:
    """Logic levels a register-to-register path may have at ``target_mhz`` on ``family``:
    ``floor((period - overhead) / level)`` with :data:`FAMILY_TIMING`'s figures."""
    if family not in FAMILY_TIMING:
        raise ValueError(f"family must be one of {sorted(FAMILY_TIMING)}, not {family!r}")
    if target_mhz <= 0:
        raise ValueError(f"target_mhz must be positive, not {target_mhz}")
    t = FAMILY_TIMING[family]
    return max(0, math.floor((1000.0 / target_mhz - t["overhead_ns"]) / t["level_ns"] + 1e-9))


# ---- cell classes ------------------------------------------------------------------------

_LEVEL1 = re.compile(r"^(LUT[1-6](_2)?|MUXF[789]|INV|CARRY[48])$")
_BUFFER = re.compile(r"^(BUF|IBUF\w*|OBUF\w*|IOBUF\w*|BUFG\w*|BUFH\w*|BUFR|BUFIO|BUFCE\w*)$")
_CONST = {"GND", "VCC"}
_SEQUENTIAL = re.compile(r"^(FD[RSCP]E(_1)?|LD[CP]E?(_1)?|RAMB(18|36)E[12]|FIFO(18|36)E[12]"
                         r"|DSP48E[12]?|URAM288(_BASE)?)$")
_LUTRAM = re.compile(r"^RAM(32|64|128|256|512)(M\d*|X\d+\w*?)(_1)?$")
_SRL = re.compile(r"^SRLC?(16|32)E(_1)?$")
_READ_ADDRESS = re.compile(r"^(ADDR[A-H]?|DPRA\d*|A\d*|RADR\w*)$")
_CASCADE_OUT = {"Q15", "Q31", "MC31"}


#: Level equivalents of a DSP slice crossed combinationally (its registers off): a multiply-add
#: through an unregistered DSP48 costs about as much as four LUT levels (docs/performance.md).
DSP_LEVELS = 4

#: DSP input pins -> the parameters whose registers (any > 0) end the path at that pin; the
#: multiplier's inputs also end at the M register, everything at the P register.
_DSP_INPUT_REGS = {"A": ("AREG",), "ACIN": ("AREG",), "B": ("BREG",), "BCIN": ("BREG",),
                   "D": ("DREG", "ADREG"), "C": ("CREG",), "INMODE": ("INMODEREG",),
                   "OPMODE": ("OPMODEREG",), "ALUMODE": ("ALUMODEREG",),
                   "CARRYIN": ("CARRYINREG",), "CARRYINSEL": ("CARRYINSELREG",),
                   "PCIN": (), "CARRYCASCIN": (), "MULTSIGNIN": ()}
_DSP_MULTIPLIER_INPUTS = {"A", "ACIN", "B", "BCIN", "D", "INMODE"}


def _param_int(params: dict, name: str, default: int) -> int:
    value = str(params.get(name, default)).strip()
    try:
        return int(value, 2) if value and set(value) <= {"0", "1"} and len(value) > 1 \
            else int(value)
    except ValueError:
        return default


def _dsp_comb_pins(params: dict, pins) -> set:
    """The input pins of a DSP48 from which a combinational path reaches its outputs: no
    input register on the pin, no M register on the multiplier's inputs, no P register."""
    if _param_int(params, "PREG", 1):
        return set()
    mreg = _param_int(params, "MREG", 1)
    out = set()
    for pin in pins:
        regs = _DSP_INPUT_REGS.get(pin)
        if regs is None:
            continue
        if any(_param_int(params, r, 1) for r in regs):
            continue
        if pin in _DSP_MULTIPLIER_INPUTS and mreg:
            continue
        out.add(pin)
    return out


def _is_clock_pin(cell_type: str, pin: str) -> bool:
    if "CLK" in pin:
        return True
    return (pin == "C" and cell_type.startswith("FD")) or (pin == "G" and
                                                          cell_type.startswith("LD"))


def _carry_arcs(cell_type: str, conns: dict, dirs: dict) -> dict:
    """Output bit -> ``(input bit, pin)`` of a carry cell, following its bit order: bit ``i``
    of O and CO depends on CI (CYINIT, and CI_TOP for the upper half of a CARRY8) and on S and
    DI up to ``i``."""
    width = 4 if cell_type == "CARRY4" else 8
    arcs = {}
    common = [(b, p) for p in ("CI", "CYINIT") for b in conns.get(p, [])]
    for i in range(width):
        ins = list(common)
        if cell_type == "CARRY8" and i >= 4:
            ins += [(b, "CI_TOP") for b in conns.get("CI_TOP", [])]
        for pin in ("S", "DI"):
            ins += [(b, pin) for b in conns.get(pin, [])[:i + 1]]
        for pin in ("O", "CO"):
            bits = conns.get(pin, [])
            if i < len(bits):
                arcs[bits[i]] = ins
    # anything not covered (unexpected pins): all inputs to it
    rest = [(b, p) for p, d in dirs.items() if d == "input" for b in conns.get(p, [])]
    for p, d in dirs.items():
        if d == "output":
            for b in conns.get(p, []):
                arcs.setdefault(b, rest)
    return arcs


def _carry4_index(cells: dict) -> dict:
    """CARRY4 cell -> its position in its chain (0 for the first; the next one's CI is the
    previous one's CO[3])."""
    co3 = {c["connections"]["CO"][3]: n for n, c in cells.items()
           if c["type"] == "CARRY4" and len(c["connections"].get("CO", [])) == 4}
    index: dict = {}
    for name, cell in cells.items():
        if cell["type"] != "CARRY4" or name in index:
            continue
        chain, n = [], name
        while n is not None and n not in index and n not in chain:
            chain.append(n)
            ci = cells[n]["connections"].get("CI", ["0"])[0]
            n = co3.get(ci)
        base = index[n] + 1 if n in index else 0
        for k, c in enumerate(reversed(chain)):
            index[c] = base + k
    return index


# ---- the analysis ------------------------------------------------------------------------

def _names(module: dict) -> dict:
    """Net bit -> the most readable name Yosys kept for it (public before private, fewest
    ``$``, shortest), as ``name[i]`` for buses."""
    best = {}
    for name, net in module.get("netnames", {}).items():
        bits = net["bits"]
        key = (net.get("hide_name", 0), name.count("$"), len(name))
        for i, b in enumerate(bits):
            if isinstance(b, str):
                continue
            if b not in best or key < best[b][0]:
                best[b] = (key, f"{name}[{i}]" if len(bits) > 1 else name)
    return {b: v[1] for b, v in best.items()}


def analyse(netlist: dict, family: str, target_mhz: float, *, top: str | None = None,
            paths: int = 10, fanouts: int = 10) -> dict:
    """The timing report of a flat Yosys JSON netlist (``write_json`` after ``synth_xilinx``).

    Parameters
    ----------
    netlist : dict
        The parsed JSON.
    family : str
        ``"xc7"`` or ``"xcup"`` (:data:`FAMILY_TIMING`).
    target_mhz : float
        The target clock.
    top : str, optional
        The module to analyse; by default the one with the ``top`` attribute (or the only one).
    paths, fanouts : int
        How many deepest paths and highest fan-out nets to list.

    Returns
    -------
    dict
        ``target_mhz``, ``family``, ``budget_levels``, ``max_levels``, ``levels_histogram``
        (levels -> end points, all clocks), ``clocks`` (per clock: end points, max levels,
        histogram), ``deepest_paths`` (``start``, ``end``, ``levels``, ``clock``, ``cells``,
        ``nets``), ``fanout_budget``, ``max_fanout``, ``high_fanout_nets`` (``net``,
        ``fanout``, ``driver``, ``driver_type``, and for a net Yosys left unnamed the named
        nets its driver reads, ``driver_inputs``), ``combinational_loops``,
        ``combinational_dsps``, ``unknown_cells``, ``within_budget``.
    """
    modules = netlist["modules"]
    if top is None:
        tops = [n for n, m in modules.items() if m.get("attributes", {}).get("top")]
        top = tops[0] if tops else next(iter(modules))
    module = modules[top]
    names = _names(module)

    def net(b) -> str:
        return names.get(b, f"net{b}") if not isinstance(b, str) else f"const {b}"

    # Drivers: net bit -> (kind, cell or port name, type)
    arcs: dict = {}         # combinational output bit -> ([(input bit, levels)], cell, label)
    starts: dict = {}       # bit -> (start description) for sequential outputs / input ports
    endpoints = []          # (bit, description, clock bit or None)
    driver: dict = {}       # bit -> (cell name or port, type)
    loads: Counter = Counter()
    clock_bits: set = set()
    unknown: Counter = Counter()
    dsp_comb: dict = {}     # DSP cells with combinational input pins -> those pins
    # UltraScale+ has CARRY8 where Yosys writes two CARRY4 (the upper one fed by CI): Vivado
    # would count the pair as one level, so a ripple into an odd CARRY4 of a chain adds none.
    carry_index = _carry4_index(module.get("cells", {})) if family == "xcup" else {}

    for pname, port in module.get("ports", {}).items():
        for i, b in enumerate(port["bits"]):
            label = f"port {pname}[{i}]" if len(port["bits"]) > 1 else f"port {pname}"
            if port["direction"] == "input" and not isinstance(b, str):
                starts[b] = label
                driver[b] = (label, "port")
            elif port["direction"] == "output":
                endpoints.append((b, label, None))
                if not isinstance(b, str):
                    loads[b] += 1

    for cname, cell in module.get("cells", {}).items():
        ctype = cell["type"]
        if ctype.startswith("$scopeinfo"):
            continue
        conns, dirs = cell.get("connections", {}), cell.get("port_directions", {})
        outs = [(p, b) for p, d in dirs.items() if d == "output" for b in conns.get(p, [])]
        ins = [(p, b) for p, d in dirs.items() if d != "output" for b in conns.get(p, [])]
        for _, b in outs:
            if not isinstance(b, str):
                driver[b] = (cname, ctype)
        for p, b in ins:
            if isinstance(b, str):
                continue
            if _is_clock_pin(ctype, p):
                clock_bits.add(b)
            loads[b] += 1
        if ctype in _CONST:
            continue
        if _LEVEL1.match(ctype) or _BUFFER.match(ctype):
            weight = 1 if _LEVEL1.match(ctype) else 0
            if ctype.startswith("CARRY"):
                label, upper = ctype, False
                if ctype == "CARRY4" and family == "xcup":
                    label, upper = "CARRY8", carry_index.get(cname, 0) % 2 == 1
                for o, i in _carry_arcs(ctype, conns, dirs).items():
                    if not isinstance(o, str):
                        arcs[o] = ([(b, 0 if upper and p == "CI" else 1) for b, p in i],
                                   cname, label)
            else:
                in_bits = [(b, weight) for _, b in ins]
                for _, o in outs:
                    if not isinstance(o, str):
                        arcs[o] = (in_bits, cname, ctype)
            continue
        # sequential, memory-like or unknown: a boundary
        kind = "seq"
        if _LUTRAM.match(ctype) or _SRL.match(ctype):
            kind = "mem"
        elif not _SEQUENTIAL.match(ctype):
            unknown[ctype] += 1
        comb_pins: set = set()
        if ctype.startswith("DSP48"):
            comb_pins = _dsp_comb_pins(cell.get("parameters", {}), [p for p, _ in ins])
            if comb_pins:
                dsp_comb[cname] = sorted(comb_pins)
        clock = next((b for p, b in ins if _is_clock_pin(ctype, p)), None)
        for p, o in outs:
            if isinstance(o, str):
                continue
            starts[o] = cname
            if kind == "mem" and p not in _CASCADE_OUT:
                address = [(b, 1) for q, b in ins if _READ_ADDRESS.match(q)]
                arcs[o] = (address, cname, ctype)
            elif comb_pins:
                cascade = {"ACOUT": ("A", "ACIN"), "BCOUT": ("B", "BCIN")}.get(p)
                through = [(b, 0 if cascade else DSP_LEVELS) for q, b in ins
                           if q in comb_pins and (cascade is None or q in cascade)]
                if through:
                    arcs[o] = (through, cname, f"{ctype}(comb)")
        for p, b in ins:
            if not _is_clock_pin(ctype, p) and p not in comb_pins:
                endpoints.append((b, (cname, ctype, p), clock))

    # Longest path to every bit: iterative depth-first walk; a bit on the stack seen again
    # closes a combinational loop, cut there.
    level: dict = {}
    pred: dict = {}
    loops = []
    on_stack: set = set()

    def solve(root):
        stack = [(root, 0)]
        on_stack.add(root)
        while stack:
            b, i = stack[-1]
            ins = arcs[b][0]
            while i < len(ins):
                d = ins[i][0]
                i += 1
                if isinstance(d, str) or d in level or d not in arcs:
                    continue
                if d in on_stack:
                    if len(loops) < 10:
                        cycle = [x for x, _ in stack]
                        cycle = cycle[cycle.index(d):]
                        loops.append([f"{arcs[x][2]} {net(x)}" for x in cycle])
                    continue
                stack[-1] = (b, i)
                stack.append((d, 0))
                on_stack.add(d)
                break
            else:
                best, arg = None, None
                for d, w in ins:
                    if isinstance(d, str):
                        continue
                    lv = level.get(d) if d in arcs else (0 if d in starts else None)
                    if lv is not None and lv >= 0 and (best is None or lv + w > best):
                        best, arg = lv + w, (d, w)
                if best is None:
                    level[b] = 0 if b in starts else -1     # -1: driven only by constants
                else:
                    level[b] = best
                    if b in starts and best <= 0:
                        arg = None
                pred[b] = arg
                on_stack.discard(b)
                stack.pop()

    def level_of(b):
        if isinstance(b, str):
            return None
        if b in arcs:
            if b not in level:
                solve(b)
            return level[b] if level[b] >= 0 else None
        return 0 if b in starts else None

    def clock_name(c):
        return net(c) if c is not None else "(output ports)"

    def start_label(b):
        s = starts.get(b)
        if s is None:
            return net(b)
        if s.startswith("port "):
            return s
        return f"{net(b)} ({module['cells'][s]['type']})"

    def end_label(desc):
        if isinstance(desc, str):
            return desc
        cname, ctype, pin = desc
        cell = module["cells"][cname]
        dirs, conns = cell["port_directions"], cell["connections"]
        outs = [b for p, d in dirs.items() if d == "output" for b in conns.get(p, [])
                if not isinstance(b, str) and names.get(b)]
        public = [b for b in outs if not names[b].startswith("$")]
        shown = names[(public or outs)[0]] if outs else cname
        return f"{shown} ({ctype}.{pin})"

    hist: Counter = Counter()
    per_clock: dict = {}
    ends = []
    for b, desc, clock in endpoints:
        lv = level_of(b)
        if lv is None:
            continue
        hist[lv] += 1
        key = clock_name(clock)
        c = per_clock.setdefault(key, Counter())
        c[lv] += 1
        ends.append((lv, b, desc, key))

    ends.sort(key=lambda e: -e[0])
    deepest, seen = [], set()
    for lv, b, desc, key in ends:
        end = end_label(desc)
        stem = re.sub(r"\[\d+\]", "", end)
        if stem in seen:
            continue
        seen.add(stem)
        chain, x = [], b
        while x in arcs:
            if pred.get(x) is None:     # a memory output read at level 0: a start point
                break
            chain.append((x, pred[x][1]))
            x = pred[x][0]
        chain.reverse()
        start = start_label(x)
        deepest.append({"start": start, "end": end, "levels": lv, "clock": key,
                        "cells": [arcs[c][2] for c, w in chain if w],
                        "nets": [net(c) for c, _ in chain]})
        if len(deepest) >= paths:
            break

    fan = [(n, b) for b, n in loads.items() if b not in clock_bits and b in driver]
    fan.sort(key=lambda t: (-t[0], t[1]))
    def fed_by(b):
        """For a net Yosys left unnamed: the named nets its driver reads."""
        cell = module["cells"].get(driver[b][0])
        if cell is None or not net(b).startswith("$"):
            return []
        bits = [x for p, d in cell["port_directions"].items() if d == "input"
                for x in cell["connections"].get(p, []) if not isinstance(x, str)]
        return sorted({net(x) for x in bits if not net(x).startswith("$")})[:4]

    high = [{"net": net(b), "fanout": n, "driver": driver[b][0], "driver_type": driver[b][1],
             "driver_inputs": fed_by(b)}
            for n, b in fan[:fanouts]]

    budget = budget_levels(family, target_mhz)
    max_levels = max(hist) if hist else 0
    max_fanout = fan[0][0] if fan else 0
    return {
        "target_mhz": target_mhz, "family": family,
        "speed_grade": FAMILY_TIMING[family]["speed_grade"],
        "level_ns": FAMILY_TIMING[family]["level_ns"],
        "overhead_ns": FAMILY_TIMING[family]["overhead_ns"],
        "budget_levels": budget, "max_levels": max_levels,
        "levels_histogram": {str(k): hist[k] for k in sorted(hist)},
        "endpoints": sum(hist.values()),
        "clocks": {k: {"endpoints": sum(c.values()), "max_levels": max(c),
                       "levels_histogram": {str(x): c[x] for x in sorted(c)}}
                   for k, c in sorted(per_clock.items())},
        "deepest_paths": deepest,
        "fanout_budget": FANOUT_BUDGET, "max_fanout": max_fanout,
        "high_fanout_nets": high,
        "combinational_loops": loops,
        "combinational_dsps": len(dsp_comb),
        "unknown_cells": dict(unknown),
        "within_budget": max_levels <= budget and max_fanout <= FANOUT_BUDGET and not loops,
    }


def analyse_file(path: str | Path, family: str, target_mhz: float, **kwargs) -> dict:
    """:func:`analyse` of a Yosys JSON netlist file."""
    return analyse(json.loads(Path(path).read_text()), family, target_mhz, **kwargs)


def violations(report: dict) -> list[str]:
    """What breaks the budget, one line each naming the path or net; empty when within."""
    out = []
    budget = report["budget_levels"]
    for p in report["deepest_paths"]:
        if p["levels"] > budget:
            out.append(f"{p['levels']} logic levels > budget {budget} at "
                       f"{report['target_mhz']:g} MHz: {p['start']} -> {p['end']} "
                       f"({' '.join(p['cells'])})")
    for n in report["high_fanout_nets"]:
        if n["fanout"] > report["fanout_budget"]:
            out.append(f"fan-out {n['fanout']} > budget {report['fanout_budget']}: "
                       f"{n['net']} (driven by {n['driver_type']} {n['driver']})")
    for loop in report["combinational_loops"]:
        out.append(f"combinational loop: {' -> '.join(loop[:8])}"
                   f"{' ...' if len(loop) > 8 else ''}")
    return out


# ---- synthesis -----------------------------------------------------------------------------

#: The LUT mapping the timing reports are measured on (:data:`platforms.estimate.MAPPINGS`):
#: Yosys' timing-driven ABC9, as Vivado's synthesis is timing-driven. The area-oriented
#: default maps many 7- and 8-input functions into LUT6 + MUXF7 + MUXF8 chains (three
#: levels) where a timing-driven mapper spends a LUT more instead (docs/performance.md).
MAPPING = "abc9"


def synthesize_netlist(verilog: str | Path, top: str, family: str, *,
                       work_dir: str | Path | None = None, mapping: str = MAPPING,
                       blackbox: tuple = ()) -> Path:
    """Run Yosys ``synth_xilinx -flatten`` (with ``-abc9`` for the ``abc9`` mapping) on
    ``verilog`` (``.v`` or ``.il``), the modules named in ``blackbox`` emptied, and return
    the path of the flat JSON netlist (:func:`platforms.estimate.synthesize`)."""
    from .estimate import netlist_path, synthesize
    verilog = Path(verilog).resolve()
    work = Path(work_dir or verilog.parent)
    synthesize(verilog, top, family, work_dir=work, netlist=True, mapping=mapping,
               blackbox=blackbox)
    return netlist_path(work, top, family, mapping)



#: Largest array (rows * cols) ``build.py --timing`` synthesizes whole; above it the design is
#: measured by parts (:func:`accelerator_timing` ``parts``): whole, the ZCU104 default's 2048
#: PEs run Yosys out of YoWASP's 4 GB of WebAssembly memory in ABC9, as the VU9P's 8192 do.
WHOLE_LIMIT = 1024


def _method(family: str) -> str:
    from .estimate import ABC9_WIRE_PS
    return (f"Yosys synth_xilinx -family {family} -flatten -{MAPPING} (wire delay "
            f"{ABC9_WIRE_PS[family]} ps), write_json; platforms/timing.py (docs/performance.md)")


def _measured(kind: str, name: str, params: dict, family: str, target_mhz: float,
              work_dir: Path, *, blackbox: tuple = (), cached_only: bool = False,
              progress=None) -> dict | None:
    """The report of component ``kind`` synthesized flat (:data:`MAPPING`), ``blackbox``
    emptied; cached by the design's digest. With ``cached_only``, the cached report or None,
    without generating or synthesizing anything."""
    from rtl.export import verilog_key

    from .estimate import _synth_once, _tag, netlist_path

    cache = work_dir / f"{name}.{_tag(family, MAPPING)}.timing.json"
    stamp = work_dir / f"{name}.il.digest"

    def ident():
        key = stamp.read_text() + (" noarray" if blackbox else "")
        return {"key": key, "mhz": target_mhz, "version": VERSION}

    def cached():
        if cache.exists() and stamp.exists():
            saved = json.loads(cache.read_text())
            if saved.get("ident") == ident():
                return saved["timing"]
        return None
    # a report of exactly this design (the RTL and parameters) needs neither the Verilog
    # nor the netlist again (the netlists, hundreds of megabytes, may have been deleted)
    fresh = stamp.exists() and stamp.read_text() == verilog_key(kind, name, family=family,
                                                                **params)
    report = cached() if fresh else None
    if report is not None or cached_only:
        return report
    work_dir.mkdir(parents=True, exist_ok=True)
    _synth_once(kind, name, family, work_dir, progress, netlist=True, mapping=MAPPING,
                blackbox=blackbox, **params)
    report = cached()
    if report is not None:
        return report
    if progress:
        progress(f"analysing the netlist of {name}")
    report = analyse_file(netlist_path(work_dir, name, family, MAPPING), family, target_mhz,
                          top=name)
    cache.write_text(json.dumps({"ident": ident(), "timing": report}))
    return report


def _array_part(params: dict, cols: int) -> dict:
    """``params`` with the array cut to ``cols`` columns in one SLR group (what
    :func:`array_timing` measures of an array too large, or in several groups)."""
    part = {k: v for k, v in params.items() if k != "slr_groups"}
    part["cols"] = cols
    return part


def _array_params(params: dict) -> tuple[str, dict]:
    """The cached name and parameters of the systolic array of ``Accelerator(**params)``."""
    rows, cols = params["rows"], params["cols"]
    packing, groups = params.get("packing"), params.get("slr_groups", 1)
    name = (f"array_{rows}x{cols}" + (f"_p{packing}" if packing else "")
            + (f"_slr{groups}" if groups != 1 else "") + "_timing")
    extra = {k: params[k] for k in ("packing", "slr_groups") if params.get(k) is not None}
    return name, {"rows": rows, "cols": cols, **extra}


def array_timing(params: dict, family: str, target_mhz: float, work_dir: Path, *,
                 cached_only: bool = False, progress=None) -> dict | None:
    """The timing report of the systolic array of ``Accelerator(**params)`` alone, at its
    configured size (rows, columns, packing, SLR groups; the family's DSP slice): the
    complement of ``accelerator_timing(..., without_array=True)``. The array registers its
    inputs and outputs, so no path crosses the seam between the two."""
    name, used = _array_params(params)
    report = _measured("array", f"{name}_{family}", used, family, target_mhz, work_dir,
                       cached_only=cached_only, progress=progress)
    if report is None:
        return None
    return {**report, "whole_design": False, "mapping": MAPPING, "method": _method(family),
            "measured_on": f"the {params['rows']}x{params['cols']} systolic array alone, as "
                           "configured (the rest of the accelerator: --without-array)"}


def by_parts(rest: dict, array: dict, prefix: str = ARRAY_MODULE, copies: int = 1) -> dict:
    """One report from the accelerator without its array (``rest``) and the array alone
    (``array``), measured at the same family and clock: end points and histograms added, the
    deepest paths and highest fan-out nets of both (the array's named below ``prefix``),
    the emptied array cell not counted as unknown. Exact for logic levels, as no path crosses the
    seam (the array registers its inputs and outputs); a net that reaches the array counts
    its loads on each side separately (outside: one load per array input bit it drives).
    ``copies``: ``array`` is one of that many identical parts of the array (an SLR group,
    registered at its edges): its end points and cells are counted that many times."""
    def joined(key, fields, order):
        """Both reports' ``key`` lists, the array's ``fields`` named below ``prefix``,
        sorted by ``order`` (largest first) and cut to the rest's length."""
        inside = [{**item, **{f: f"{prefix}.{item[f]}" for f in fields if f in item}}
                  for item in array[key]]
        return sorted(rest[key] + inside, key=lambda x: -x[order])[:len(rest[key])]
    paths = joined("deepest_paths", ("start", "end"), "levels")
    nets = joined("high_fanout_nets", ("net", "driver"), "fanout")
    clocks = {}
    for r, times in ((rest, 1), (array, copies)):
        for name, c in r["clocks"].items():
            clocks.setdefault(name, Counter()).update(
                {int(k): times * v for k, v in c["levels_histogram"].items()})
    hist = sum(clocks.values(), Counter())
    # the emptied array is a cell whose type is its module's name below the rest's top
    unknown = {k: v for k, v in rest["unknown_cells"].items()
               if k != prefix and not k.endswith("." + prefix)}
    for k, v in array["unknown_cells"].items():
        unknown[k] = unknown.get(k, 0) + copies * v
    max_levels = max(hist) if hist else 0
    max_fanout = max(rest["max_fanout"], array["max_fanout"])
    loops = rest["combinational_loops"] + array["combinational_loops"]
    return {
        **{k: rest[k] for k in ("target_mhz", "family", "speed_grade", "level_ns",
                                "overhead_ns", "budget_levels", "fanout_budget")},
        "max_levels": max_levels,
        "levels_histogram": {str(k): hist[k] for k in sorted(hist)},
        "endpoints": sum(hist.values()),
        "clocks": {k: {"endpoints": sum(c.values()), "max_levels": max(c),
                       "levels_histogram": {str(x): c[x] for x in sorted(c)}}
                   for k, c in sorted(clocks.items())},
        "deepest_paths": paths, "max_fanout": max_fanout, "high_fanout_nets": nets,
        "combinational_loops": loops,
        "combinational_dsps": rest["combinational_dsps"]
        + copies * array["combinational_dsps"],
        "unknown_cells": unknown,
        "within_budget": (max_levels <= rest["budget_levels"]
                          and max_fanout <= rest["fanout_budget"] and not loops),
    }


def accelerator_timing(params: dict, family: str, target_mhz: float, work_dir: Path, *,
                       whole: bool = False, without_array: bool = False,
                       parts: bool = False, cached_only: bool = False,
                       progress=None) -> dict | None:
    """The timing report of ``Accelerator(**params)`` on ``family`` at ``target_mhz``.

    Arrays up to :data:`platforms.estimate.FULL_LIMIT` PEs, or any with ``whole``, are
    synthesized flat as configured. Larger ones are measured on the largest whole-accelerator
    fit point of the resource estimate (8x8, everything else as configured, all PEs on DSP
    slices) -- the same design the estimate synthesizes, mapped once more with :data:`MAPPING`
    -- and the report says so (``measured_on``, ``whole_design`` false): the depth of the
    engine, buffers and DMA does not grow with the array, but array-wide muxes and the fan-out
    of broadcast nets do. Results are cached by the design's digest.

    ``without_array`` (with ``whole``) synthesizes everything but the systolic array
    (:data:`ARRAY_MODULE`, emptied): the engine, buffers, rescaler and DMA at the configured
    lanes; the nets inside the array, and its loads on the nets that reach it, are not
    counted (``measured_on`` says so). ``parts`` (with ``whole``) measures that and the array
    alone (:func:`array_timing`) and joins them (:func:`by_parts`): the configured design at
    its size, for one too large to synthesize whole (the VU9P's).

    With ``cached_only``, a report already measured for exactly this design (the RTL and
    parameters), or None, without synthesizing anything: what ``build.py`` reports when a
    slower measurement of the configured design was run before.
    """
    from .estimate import FIT_POINTS, FULL_LIMIT, design_tag

    rows, cols = params["rows"], params["cols"]
    tag = design_tag(params, family)
    kw = {"cached_only": cached_only, "progress": progress}
    if parts and whole:
        rest = accelerator_timing(params, family, target_mhz, work_dir, whole=True,
                                  without_array=True, **kw)
        # an array of several SLR groups (registered where they meet) as one group, counted
        # that many times: the VU9P's 64x128 whole runs Yosys out of its memory
        groups = params.get("slr_groups", 1)
        part, copies = params, 1
        if groups > 1 and cols % groups == 0:
            part, copies = _array_part(params, cols // groups), groups
        array = rest and array_timing(part, family, target_mhz, work_dir, **kw)
        if array is None:
            return None
        alone = ("the array alone" if copies == 1 else
                 f"the array alone as {copies} SLR groups of {rows}x{cols // groups}, one "
                 "measured (the groups meet through registers)")
        return {**by_parts(rest, array, copies=copies), "whole_design": True,
                "mapping": MAPPING,
                "method": _method(family) + "; by parts (platforms.timing.by_parts)",
                "measured_on": f"{rows}x{cols} as configured, by parts: the accelerator "
                               f"without its array and {alone} (no path crosses the seam: "
                               "the array registers its inputs and outputs)"}
    if whole or rows * cols <= FULL_LIMIT:
        used, name = dict(params), f"accel_{rows}x{cols}_{tag}"
        if rows * cols > FULL_LIMIT:
            name += "_noarray" if without_array else "_whole"
    else:
        r, c = max(FIT_POINTS, key=lambda p: p[0] * p[1])
        used = {k: v for k, v in params.items() if k != "dsp_rows"}
        used.update(rows=r, cols=c)
        name = f"accel_{r}x{c}_{tag}"
    without_array = without_array and whole
    report = _measured("accelerator", name, used, family, target_mhz, work_dir,
                       blackbox=(ARRAY_MODULE,) if without_array else (), **kw)
    if report is None:
        return None
    whole_design = used == params and not without_array
    return {**report, "whole_design": whole_design, "mapping": MAPPING,
            "method": _method(family),
            "measured_on": (f"{used['rows']}x{used['cols']} as configured"
                            if whole_design else
                            f"{used['rows']}x{used['cols']} as configured, without the "
                            "systolic array (emptied: its own nets and its loads not "
                            "counted)" if without_array else
                            f"{used['rows']}x{used['cols']} (the estimate's largest whole "
                            f"fit point, all PEs on DSPs), not {rows}x{cols}: "
                            "run build.py --timing for the configured array")}


# ---- report.md -----------------------------------------------------------------------------

def markdown(report: dict) -> str:
    """A readable section for ``report.md``."""
    t = FAMILY_TIMING[report["family"]]
    lines = ["## Timing (logic levels, from Yosys)", "",
             f"Measured on: {report.get('measured_on', 'the netlist given')}. "
             f"Method: {report.get('method', 'platforms/timing.py')}.", "",
             f"Budget at {report['target_mhz']:g} MHz on {t['devices']}: "
             f"**{report['budget_levels']} levels** = floor(({1000 / report['target_mhz']:g} ns"
             f" - {t['overhead_ns']} ns) / {t['level_ns']} ns per LUT+net); fan-out budget "
             f"{report['fanout_budget']} (docs/performance.md).", "",
             f"Deepest path: **{report['max_levels']} levels** "
             f"({'within' if report['max_levels'] <= report['budget_levels'] else 'OVER'} "
             f"budget); highest fan-out: **{report['max_fanout']}** "
             f"({'within' if report['max_fanout'] <= report['fanout_budget'] else 'OVER'} "
             "budget, clock nets excluded).", ""]
    for clock, c in report["clocks"].items():
        lines += [f"End points by logic levels, clock `{clock}` ({c['endpoints']} end points):",
                  "", "| levels | " + " | ".join(c["levels_histogram"]) + " |",
                  "|---|" + "---:|" * len(c["levels_histogram"]),
                  "| end points | " + " | ".join(str(v) for v in c["levels_histogram"].values())
                  + " |", ""]
    lines += ["Deepest paths:", "", "| levels | start | end | cells |", "|---:|---|---|---|"]
    for p in report["deepest_paths"]:
        lines.append(f"| {p['levels']} | `{p['start']}` | `{p['end']}` | "
                     f"{' '.join(p['cells'])} |")
    lines += ["", "Highest fan-out nets (clock nets excluded):", "",
              "| fan-out | net | driver |", "|---:|---|---|"]
    for n in report["high_fanout_nets"]:
        hint = f" reading {', '.join(n['driver_inputs'])}" if n.get("driver_inputs") else ""
        lines.append(f"| {n['fanout']} | `{n['net']}` | {n['driver_type']}{hint} |")
    if report["combinational_loops"]:
        lines += ["", f"Combinational loops: {len(report['combinational_loops'])} "
                  "(first cells listed in report.json)."]
    if report.get("combinational_dsps"):
        lines += ["", f"{report['combinational_dsps']} DSP slices are crossed combinationally "
                  f"(registers off): counted as {DSP_LEVELS} levels each, shown as `(comb)`."]
    if report.get("unknown_cells"):
        lines += ["", "Cells of unknown timing treated as start/end points: "
                  + ", ".join(f"{k} x{v}" for k, v in report["unknown_cells"].items())]
    return "\n".join(lines) + "\n"


# ---- command line --------------------------------------------------------------------------

def _summary(board: str, report: dict) -> list[str]:
    lines = [f"{board}: {report['measured_on']}, {report['target_mhz']:g} MHz: deepest path "
             f"{report['max_levels']} levels (budget {report['budget_levels']}), highest "
             f"fan-out {report['max_fanout']} (budget {report['fanout_budget']})"]
    seen = set()
    for p in report["deepest_paths"]:
        key = (p["start"].split("[")[0], p["end"].split("[")[0])
        if key not in seen and len(seen) < 8:
            seen.add(key)
            lines.append(f"  {p['levels']:3d} levels  {p['start']} -> {p['end']}")
    for n in report["high_fanout_nets"][:5]:
        hint = f" reading {', '.join(n['driver_inputs'])}" if n.get("driver_inputs") else ""
        lines.append(f"  fan-out {n['fanout']:5d}  {n['driver_type']}{hint}")
    return lines


def main(argv=None) -> int:
    """``python -m platforms.timing --board B [--rows R --cols C] [--out F] [--strict]``:
    the timing report of a board's configuration (every other setting its default) at an
    array size small enough to synthesise whole (8x8 by default, the estimate's fit point
    the default builds report on), printed and merged into ``--out`` (JSON, one entry per
    board and size). ``--default`` measures the board's default configuration as configured
    (its packing and any LUT-multiplier rows included) instead. ``--strict`` exits 1 when
    over budget; bad arguments exit 2."""
    import argparse

    from . import PLATFORMS

    root = Path(__file__).resolve().parent.parent
    p = argparse.ArgumentParser(prog="python -m platforms.timing", description=main.__doc__)
    p.add_argument("--board", required=True, choices=sorted(PLATFORMS))
    p.add_argument("--rows", type=int, default=8)
    p.add_argument("--cols", type=int, default=8)
    p.add_argument("--out", type=Path, default=root / "results" / "timing.json")
    p.add_argument("--work-dir", type=Path, default=root / "build" / "estimates")
    p.add_argument("--strict", action="store_true", help="exit 1 when over budget")
    p.add_argument("--default", action="store_true",
                   help="the board's default configuration exactly as configured (its array "
                        "and packing), synthesized whole; --rows/--cols ignored")
    p.add_argument("--without-array", action="store_true",
                   help="with --default: everything but the systolic array (emptied), for a "
                        "default too large to synthesize whole (the VU9P's)")
    p.add_argument("--array-only", action="store_true",
                   help="with --default: the systolic array alone, as configured (what "
                        "--without-array leaves out)")
    p.add_argument("--by-parts", action="store_true",
                   help="with --default: both of those, joined into the report of the whole "
                        f"design (what build.py --timing does above {WHOLE_LIMIT} PEs)")
    p.add_argument("--array-cols", type=int, metavar="N",
                   help="with --array-only: the array at N of its columns (its rows as "
                        "configured, one SLR group), for an array too large for Yosys "
                        "(the VU9P's 64x128 runs out of the 4 GB of WebAssembly memory; its "
                        "columns are two SLR groups of 64, each cut off by registers)")
    args = p.parse_args(argv)
    # the measurement modes: the argument and what the entry's key in --out says
    modes = {"without_array": "without array", "array_only": "array only",
             "by_parts": "by parts"}
    flags = [f for f in modes if getattr(args, f)]
    for flag in flags:
        if not args.default:
            p.error(f"--{flag.replace('_', '-')} needs --default")
    if len(flags) > 1:
        p.error("--without-array, --array-only and --by-parts exclude each other")
    if args.array_cols is not None and not args.array_only:
        p.error("--array-cols needs --array-only")
    board = PLATFORMS[args.board]
    if args.default:
        cfg = board.config()
        args.rows, args.cols = cfg["rows"], cfg["cols"]
    else:
        cfg = board.config(rows=args.rows, cols=args.cols)
        cfg.pop("dsp_rows", None)             # every PE on a DSP slice, as the fit points
    from rtl.accelerator import Accelerator
    try:
        Accelerator(**cfg)
    except ValueError as e:
        p.error(f"unsupported configuration: {e}")
    progress = lambda s: print(s, flush=True)  # noqa: E731
    if args.array_only:
        part = cfg
        if args.array_cols is not None:
            if not 1 <= args.array_cols <= cfg["cols"]:
                p.error(f"--array-cols must be in 1..{cfg['cols']}, not {args.array_cols}")
            part = _array_part(cfg, args.array_cols)
        report = array_timing(part, board.family, board.clock_mhz, args.work_dir,
                              progress=progress)
        if args.array_cols is not None:
            report["measured_on"] = (
                f"the {cfg['rows']}x{args.array_cols} systolic array alone, one SLR group: "
                f"the default's rows and {args.array_cols} of its {cfg['cols']} columns")
    else:
        report = accelerator_timing(cfg, board.family, board.clock_mhz, args.work_dir,
                                    whole=True, without_array=args.without_array,
                                    parts=args.by_parts, progress=progress)
    print("\n".join(_summary(board.name, report)))
    saved = json.loads(args.out.read_text()) if args.out.exists() else {}
    cut = [] if args.array_cols is None else ["--array-cols", str(args.array_cols)]
    key = (f"{board.name} {args.rows}x{args.cols}" + (" default" if args.default else "")
           + "".join(f" {modes[f]}" for f in flags)
           + (f" ({args.array_cols} columns)" if cut else ""))
    saved[key] = {
        "command": "python -m platforms.timing " + " ".join(
            ["--board", board.name] + (["--default"] if args.default else
                                       ["--rows", str(args.rows), "--cols", str(args.cols)])
            + [f"--{f.replace('_', '-')}" for f in flags] + cut),
        "config": cfg, **{k: report[k] for k in (
            "target_mhz", "budget_levels", "max_levels", "fanout_budget", "max_fanout",
            "measured_on", "deepest_paths", "high_fanout_nets")}}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(saved, indent=1) + "\n")
    print(f"wrote {args.out}")
    return 1 if args.strict and violations(report) else 0


if __name__ == "__main__":
    import sys
    sys.exit(main())
