#!/usr/bin/env python3
"""Build the accelerator for a board: Verilog, constraints, Vivado project script, resource
estimate, bitstream, programming.

    python build.py --platform {pynq-z1,zcu104,vu9p} [--rows R --cols C --depth D --block B
                    --dsp-rows N] [--k-blocks] [--epilogue] [--conv] [--out DIR]
                    [--synth {yosys,vivado,none}] [--timing] [--[no-]timing-strict]
                    [--program [--host HOST]] [--dry-run] [--list]

Writes ``DIR`` (default ``build/<platform>/``): ``bfp_accel.v`` (the accelerator),
``bfp_accel_top.v`` (board-level wrapper with Xilinx AXI port names), ``<stem>.xdc``,
``build.tcl`` (Vivado: block design with the PS7 / PS8 / XDMA, bitstream, and the ``.hwh``
for ``pynq.Overlay`` on the Zynq boards), ``report.json`` (the configuration and a ``"host"``
section: register base address, clock, bitstream name, array shape and bus width -- what
``python -m firmware.ml.train --backend pynq --board B`` reads). ``--synth yosys`` (default)
estimates resources with Yosys and adds them to ``report.json`` / ``report.md``; a
configuration that does not fit the device exits with status 1 naming the resource. The
estimate carries a timing report (``"timing"``: logic levels and fan-out against a budget for
the board's family and clock, :mod:`platforms.timing`, ``docs/performance.md``), measured on the
configured design up to 256 PEs (the Pynq-Z1 default) and on the estimate's 8x8 fit point
above that, unless the configured design has been measured before (``--timing`` or
``python -m platforms.timing --default``: its cached report is used). ``--timing`` measures
the configured design: synthesized whole up to :data:`platforms.timing.WHOLE_LIMIT` PEs, by
parts above it (the accelerator without its array and the array alone, as for the ZCU104 and
VU9P defaults, which take long). A report over budget exits with status 1 naming the path or
net (``--no-timing-strict``: only report it).
``--k-blocks`` builds the K-block mode (tile exponents along K, ``CONFIG_FEATURES.K_BLOCKS``,
``docs/architecture.md``), recorded in the report's ``"config"``; a configuration that
cannot have it (depth below 32, or the largest of rows, columns and bus bytes not dividing 32,
as the ZCU104 and VU9P defaults) exits with status 2 saying which.
``--epilogue`` builds BFP8 output (``CONFIG_FEATURES.OPS``), for square arrays whose side
divides 32 (the Pynq-Z1's), and exits with status 2 elsewhere; ``--sgd`` (with it) adds the
optimiser's step of BFP8 weights (``DESC_EPILOGUE.SGD``).
``--conv`` (with ``--k-blocks``) adds forward convolutions as implicit GEMMs
(``CONFIG_FEATURES.CONV_FORWARD``), for arrays of at most 32 columns (the Pynq-Z1's), and
exits with status 2 elsewhere; with ``--epilogue`` too, the quantiser also reads a first
layer's float32 input unfolded (``CONFIG_FEATURES.UNFOLD``).
``--synth vivado`` runs ``build.tcl`` when Vivado is on PATH. ``--program`` loads the
bitstream (openFPGALoader over JTAG, or a copy of the ``.bit``, ``.hwh`` and ``report.json``
to a PYNQ board with ``--host``; Vivado's hardware manager for the VCU118); ``--dry-run``
prints the commands instead. Outputs are cached by digest: a repeated build is instant.
Bad arguments exit with status 2.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import threading
import time
import warnings
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT))

from firmware.spec import regmap  # noqa: E402
from platforms import PLATFORMS, RESOURCES  # noqa: E402

# Components built only to read their ports (the board top, argument checks) are never
# elaborated; that is intended here.
warnings.filterwarnings("ignore", message=".*created but never used")

#: Defaults must leave this much of the device free.
HEADROOM = 0.8


def _integer(least: int):
    """An argparse type: an integer of at least ``least``."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer >= {least}, got {text!r}") \
                from None
        if value < least:
            raise argparse.ArgumentTypeError(f"expected an integer >= {least}, got {value}")
        return value
    return parse


_positive, _natural = _integer(1), _integer(0)


@contextmanager
def step(message: str):
    """Show ``message`` with a running clock while the step runs."""
    t0 = time.monotonic()
    stop = threading.Event()
    tty = sys.stderr.isatty()

    def tick():
        while not stop.wait(1.0):
            if tty:
                sys.stderr.write(f"\r{message} ... {time.monotonic() - t0:.0f} s")
                sys.stderr.flush()

    sys.stderr.write(f"{message} ...")
    sys.stderr.flush()
    thread = threading.Thread(target=tick, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
        done = f"{time.monotonic() - t0:.1f} s\n"
        sys.stderr.write(f"\r{message} ... {done}" if tty else f" {done}")
        sys.stderr.flush()


def list_platforms() -> str:
    """The platforms as a Markdown table (``--list``): device, family, bus, clock, default."""
    lines = ["| platform | device | family | memory bus | clock | default array | MACs/cycle |",
             "|---|---|---|---:|---:|---|---:|"]
    for b in PLATFORMS.values():
        cfg = b.config()
        macs = cfg["rows"] * cfg["cols"]
        lines.append(f"| {b.name} | {b.part} | {b.family} | {b.data_width} | "
                     f"{b.clock_mhz:g} MHz | {cfg['rows']}x{cfg['cols']}"
                     f"{' (' + str(cfg['dsp_rows']) + ' DSP rows)' if 'dsp_rows' in cfg else ''}"
                     f"{' (2 MACs/' + cfg['dsp_slice'] + ')' if cfg['packing'] == 2 else ''}"
                     f" | {macs} |")
    return "\n".join(lines)


def parse_args(argv):
    """Parse and check the command line.

    Parameters
    ----------
    argv : list of str or None
        The arguments (None: ``sys.argv[1:]``).

    Returns
    -------
    parser : argparse.ArgumentParser
    args : argparse.Namespace
        With ``board`` (the :class:`platforms.base.Board`) and ``cfg`` (the accelerator's
        configuration) added, unless ``--list``.

    Raises
    ------
    SystemExit
        Status 2 on a bad argument or a configuration the RTL or the board refuses.
    """
    from platforms.timing import WHOLE_LIMIT

    parser = argparse.ArgumentParser(prog="build.py", description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--platform", choices=sorted(PLATFORMS),
                        help="board to build for (see --list)")
    parser.add_argument("--list", action="store_true", help="list the platforms and exit")
    parser.add_argument("--rows", type=_positive, help="array rows (default: the platform's)")
    parser.add_argument("--cols", type=_positive, help="array columns")
    parser.add_argument("--depth", type=_positive, help="K chunk / buffer depth per slot")
    parser.add_argument("--block", type=_positive, help="C tiles per block side")
    parser.add_argument("--packing", type=int, choices=[1, 2],
                        help="MACs per DSP slice: 2 (every board's default) packs two "
                             "sharing an operand into a DSP48E1 (7-series) or DSP48E2; 1, "
                             "one MAC per slice (with --dsp-rows, some in LUTs)")
    parser.add_argument("--dsp-rows", type=_natural,
                        help="with --packing 1: array rows whose PEs use DSP slices (the "
                             "rest use LUTs)")
    parser.add_argument("--acc-ram", choices=["auto", "ultra"],
                        help="what the accumulation slots are built of: what synthesis "
                             "chooses, or UltraRAM (UltraScale+ boards)")
    parser.add_argument("--write-ports", type=int, choices=list(regmap.WRITE_PORTS),
                        help="AXI write ports C rows are dealt to (default: the platform's)")
    parser.add_argument("--read-ports", type=int, choices=list(regmap.READ_PORTS),
                        help="AXI read ports: 2 reads B through a port of its own, 3 "
                             "to 5 stripe B's rows over two to four (default: the "
                             "platform's)")
    parser.add_argument("--slr-groups", type=_positive,
                        help="the array's columns in this many groups, one per SLR, with "
                             "crossing registers and a pblock each (default: the platform's; "
                             "1: none)")
    parser.add_argument("--burst-beats", type=_positive,
                        help="the DMA's longest burst in bus words (default: 16, or what the "
                             "platform's memory port takes where shorter; at most what it "
                             "takes)")
    parser.add_argument("--k-blocks", action="store_true",
                        help="build the K-block mode (tile exponents along K, "
                             "CONFIG_FEATURES.K_BLOCKS); needs --depth >= "
                             f"{regmap.TILE_BLOCK}, rows and bus bytes dividing "
                             f"{regmap.TILE_BLOCK}, and columns dividing {regmap.TILE_BLOCK} "
                             f"or {2 * regmap.TILE_BLOCK}")
    parser.add_argument("--epilogue", action="store_true",
                        help="build BFP8 output (DESC_EPILOGUE.BFP8, STOCHASTIC; "
                             "CONFIG_FEATURES.OPS); needs rows == cols dividing "
                             f"{regmap.TILE_BLOCK} and --block >= {regmap.TILE_BLOCK} / rows")
    parser.add_argument("--sgd", action="store_true",
                        help="with --epilogue: build the optimiser's step of BFP8 weights "
                             "(DESC_EPILOGUE.SGD)")
    parser.add_argument("--conv", action="store_true",
                        help="with --k-blocks: build forward convolutions as implicit GEMMs "
                             "(DESC_CONV.MODE 1, CONFIG_FEATURES.CONV_FORWARD), and with "
                             "--epilogue a first layer's input unfolded by the quantiser "
                             "(CONFIG_FEATURES.UNFOLD); needs at most "
                             f"{regmap.TILE_BLOCK} columns")
    parser.add_argument("--out", type=Path, help="output directory (default build/<platform>)")
    parser.add_argument("--synth", choices=["yosys", "vivado", "none"], default="yosys",
                        help="yosys: a resource estimate and timing report (default); vivado: "
                             "the bitstream and .hwh through Vivado; none: Verilog and the "
                             "project files only")
    parser.add_argument("--timing", action="store_true",
                        help="timing report on the configured design, synthesized whole "
                             f"(by parts above {WHOLE_LIMIT} PEs; default: whole up to 256 "
                             "PEs, else "
                             "a report of the configured design measured before, else the "
                             "8x8 fit point)")
    parser.add_argument("--timing-strict", action=argparse.BooleanOptionalAction,
                        default=None,
                        help="exit 1 when the timing report is over budget (the default "
                             "with --synth yosys; --no-timing-strict only reports it)")
    parser.add_argument("--program", action="store_true", help="load the bitstream")
    parser.add_argument("--host", help="PYNQ board to copy the overlay to (with --program)")
    parser.add_argument("--dry-run", action="store_true",
                        help="print the programming / Vivado commands instead of running them")
    args = parser.parse_args(argv)
    if args.list:
        return parser, args
    if args.platform is None:
        parser.error(f"--platform is required: one of {', '.join(sorted(PLATFORMS))}")
    board = PLATFORMS[args.platform]
    try:
        cfg = board.config(rows=args.rows, cols=args.cols, depth=args.depth, block=args.block,
                           dsp_rows=args.dsp_rows, acc_ram=args.acc_ram, packing=args.packing,
                           write_ports=args.write_ports, read_ports=args.read_ports,
                           slr_groups=args.slr_groups, burst_beats=args.burst_beats,
                           k_blocks=args.k_blocks or None, epilogue=args.epilogue or None,
                           sgd=args.sgd or None, conv=args.conv or None,
                           unfold=(args.conv and args.epilogue) or None)
    except ValueError as e:
        parser.error(f"--burst-beats: {e}")
    if cfg.get("slr_groups", 1) == 1:
        cfg.pop("slr_groups", None)
    elif cfg["slr_groups"] != len(board.slrs):
        parser.error(f"--slr-groups must be 1 or {len(board.slrs)} on the {board.name} (its "
                     f"SLR plan: {', '.join(board.slrs)})" if board.slrs else
                     f"--slr-groups must be 1 on the {board.name}: it has one SLR")
    if args.rows is not None or args.cols is not None:
        if args.dsp_rows is None:      # a user-chosen shape: every PE on a DSP by default
            cfg.pop("dsp_rows", None)
    if "dsp_rows" in cfg and cfg["dsp_rows"] > cfg["rows"]:
        parser.error(f"--dsp-rows must be at most --rows ({cfg['rows']}), got {cfg['dsp_rows']}")
    if "dsp_rows" in cfg and cfg["packing"] != 1:
        parser.error(f"--dsp-rows applies with one MAC per DSP slice (--packing 1); the "
                     f"{board.name} packs two MACs per {board.config()['dsp_slice']}")
    if cfg.get("acc_ram") == "ultra" and not board.capacity.get("URAM"):
        parser.error(f"--acc-ram ultra needs UltraRAM; the {board.name}'s {board.part} has none")
    if (args.timing or args.timing_strict) and args.synth != "yosys":
        parser.error("--timing and --timing-strict need --synth yosys")
    if args.host and not args.program:
        parser.error("--host is used with --program")
    if args.host and board.program != "pynq":
        parser.error(f"--host copies an overlay to a PYNQ board; {board.name} is programmed "
                     "over JTAG")
    if args.sgd and not args.epilogue:
        parser.error("--sgd needs --epilogue (the step is the BFP8 write-back's)")
    if args.conv and not args.k_blocks:
        parser.error("--conv needs --k-blocks (a convolution's operands have tile exponents)")
    from rtl.accelerator import Accelerator
    try:
        Accelerator(**cfg)
    except ValueError as e:
        if cfg.get("epilogue") and "epilogue" in str(e):
            parser.error(f"--epilogue is not available for this {board.name} configuration: "
                         f"{e}")
        if cfg.get("conv") and "conv" in str(e):
            parser.error(f"--conv is not available for this {board.name} configuration: {e}")
        parser.error(f"unsupported configuration for the RTL: {e}")
    if cfg.get("k_blocks"):
        # what the mode asks of the shape, which the walker checks (at elaboration)
        from rtl.issue import exp_tag_width
        from rtl.walker import Walker
        try:
            Walker(cfg["rows"], cfg["cols"], depth=cfg["depth"], data_width=cfg["data_width"],
                   k_blocks=True, tag_width=exp_tag_width(4, cfg["cols"], True))
        except ValueError as e:
            parser.error(f"--k-blocks is not available for this {board.name} configuration: "
                         f"{e}")
    from platforms import vivado
    try:
        vivado.check_memory_ports(board.name, cfg.get("write_ports", 1),
                                  cfg.get("read_ports", 1))
    except ValueError as e:
        parser.error(f"--write-ports / --read-ports: {e}")
    args.board, args.cfg = board, cfg
    return parser, args


def _shown(path: Path) -> str:
    return str(path.relative_to(Path.cwd())) if path.is_relative_to(Path.cwd()) else str(path)


def generate(board, cfg, out: Path) -> dict:
    """Write the Verilog, the board top, the XDC, the Vivado scripts and ``report.json``.

    Parameters
    ----------
    board : platforms.base.Board
    cfg : dict
        The accelerator's configuration.
    out : Path
        The output directory.

    Returns
    -------
    dict
        The files written, by role (``"core"``, ``"top"``, ``"xdc"``, ``"tcl"``, ...).
    """
    from platforms import vivado
    from rtl.accelerator import Accelerator
    from rtl.export import FAMILY_DSP, generate_verilog

    out.mkdir(parents=True, exist_ok=True)
    stem = f"bfp_{board.name.replace('-', '_')}"
    files = {}
    with step(f"generating the accelerator's Verilog ({cfg['rows']}x{cfg['cols']})"):
        files["core"] = generate_verilog("accelerator", out, name=vivado.CORE,
                                         family=board.family, **cfg)
    params = {**cfg, **FAMILY_DSP[board.family]}
    top = out / f"{vivado.TOP}.v"
    top.write_text(vivado.top_verilog(Accelerator(**params)))
    files["top"] = top
    (out / f"{stem}.xdc").write_text(vivado.xdc(board, cfg.get("slr_groups", 1)))
    files["xdc"] = out / f"{stem}.xdc"
    (out / "build.tcl").write_text(vivado.build_tcl(board, cfg.get("write_ports", 1),
                                                    cfg.get("read_ports", 1)))
    files["tcl"] = out / "build.tcl"
    shutil.copyfile(ROOT / "platforms" / "lint.vlt", out / "lint.vlt")
    files["lint"] = out / "lint.vlt"
    if board.program == "vivado":
        (out / "program.tcl").write_text(vivado.program_tcl(board, out.resolve()))
        files["program_tcl"] = out / "program.tcl"
    files["report"] = _host_report(board, cfg, out)
    for f in files.values():
        print(f"wrote {_shown(f)}")
    return files


def _host_section(board, cfg) -> dict:
    from firmware.spec.boards import host_section
    return host_section(board.name, cfg)


def _host_report(board, cfg, out: Path) -> Path:
    """``report.json`` with at least the configuration and the ``"host"`` section (what the
    board-side driver reads beside the bitstream). An estimate of the same configuration
    already there is kept; the estimate step rewrites the whole report."""
    path = out / "report.json"
    report = {}
    if path.exists():
        try:
            report = json.loads(path.read_text())
        except ValueError:
            report = {}
        if report.get("platform") != board.name or report.get("config") != cfg:
            report = {}
    report = {"platform": board.name, "device": board.part, "config": cfg,
              "macs_per_cycle": cfg["rows"] * cfg["cols"], **report,
              "host": _host_section(board, cfg)}
    text = json.dumps(report, indent=2) + "\n"
    if not path.exists() or path.read_text() != text:
        path.write_text(text)
    return path


def estimate(board, cfg, out: Path, whole: bool = False) -> tuple[dict, bool]:
    """Estimate resources and timing with Yosys; write ``report.json`` and ``report.md``.

    Parameters
    ----------
    board : platforms.base.Board
    cfg : dict
        The accelerator's configuration.
    out : Path
        The output directory.
    whole : bool
        Measure timing on the configured design (``--timing``).

    Returns
    -------
    report : dict
        The report written to ``report.json``.
    fits : bool
        Whether every resource fits the device.
    """
    from platforms.estimate import estimate_accelerator
    from platforms.timing import WHOLE_LIMIT, accelerator_timing, markdown

    def progress(message):
        sys.stderr.write(f"\n  {message}")
        sys.stderr.flush()

    # first: the timing report (its own ABC9 netlist of the design the estimate synthesizes)
    work = ROOT / "build" / "estimates"
    if cfg.get("k_blocks") or cfg.get("epilogue") or cfg.get("sgd") or cfg.get("conv"):
        # the cached designs are named by shape and bus (platforms.estimate.design_tag): the
        # K-block mode's and the epilogue's go apart, so that the same shape's without them
        # stay cached
        work = work / "_".join(name for name in ("k_blocks", "epilogue", "sgd", "conv",
                                                 "unfold") if cfg.get(name))
    parts = cfg["rows"] * cfg["cols"] > WHOLE_LIMIT
    with step(f"timing report from Yosys for {board.family} at {board.clock_mhz:g} MHz"):
        # the configured design's report if it was measured before (whole or by parts),
        # else whole (--timing), else what accelerator_timing measures by default
        timing = None if whole else accelerator_timing(
            cfg, board.family, board.clock_mhz, work, whole=True, parts=parts,
            cached_only=True)
        if timing is None:
            timing = accelerator_timing(cfg, board.family, board.clock_mhz, work,
                                        whole=whole, parts=parts, progress=progress)
    with step(f"estimating resources with Yosys for {board.family}"):
        res, method = estimate_accelerator(cfg, board.family, work, progress)
    resources = {k: res[k] for k in RESOURCES}
    cap = board.capacity
    util = {k: (round(resources[k] / cap[k], 4) if cap[k] else (0.0 if not resources[k]
                                                                 else float("inf")))
            for k in RESOURCES}
    over = [k for k in RESOURCES if resources[k] > cap[k]]
    report = {"platform": board.name, "device": board.part, "config": cfg,
              "macs_per_cycle": cfg["rows"] * cfg["cols"], "resources": resources,
              "capacity": dict(cap), "utilization": util, "fits": not over,
              "over_capacity": over, "headroom_limit": HEADROOM,
              "within_headroom": all(util[k] <= HEADROOM for k in ("LUT", "DSP", "BRAM36")),
              "estimate_method": method, "other": {k: res[k] for k in ("CARRY", "LUTRAM")},
              "timing": timing, "host": _host_section(board, cfg)}
    (out / "report.json").write_text(json.dumps(report, indent=2) + "\n")
    lines = [f"# {board.title}: {cfg['rows']}x{cfg['cols']} array, "
             f"{report['macs_per_cycle']} MACs/cycle", "",
             f"Device {board.part}; {board.data_width}-bit memory bus; target "
             f"{board.clock_mhz:g} MHz. Estimate: {method}.", "",
             "| resource | estimate | device | utilisation |", "|---|---:|---:|---:|"]
    for k in RESOURCES:
        lines.append(f"| {k} | {resources[k]:g} | {cap[k]} | {100 * util[k]:.1f}% |")
    lines.append("")
    lines.append("Fits." if not over else f"Does NOT fit: {', '.join(over)} over capacity.")
    lines.append("")
    lines.append(f"Timing: deepest path {timing['max_levels']} logic levels (budget "
                 f"{timing['budget_levels']} at {board.clock_mhz:g} MHz), highest fan-out "
                 f"{timing['max_fanout']} (budget {timing['fanout_budget']}): "
                 f"{'within budget' if timing['within_budget'] else 'OVER BUDGET'}; measured "
                 f"on {timing['measured_on']}.")
    (out / "report.md").write_text("\n".join(lines) + "\n\n" + markdown(timing))
    print("\n".join(lines))
    print(f"wrote {_shown(out / 'report.json')} and {_shown(out / 'report.md')}")
    return report, not over


def run_vivado(out: Path, dry_run: bool) -> int:
    """Run ``build.tcl`` in Vivado (or print the command); the exit status."""
    cmd = ["vivado", "-mode", "batch", "-source", "build.tcl"]
    if dry_run:
        print(f"(cd {_shown(out)} && {' '.join(cmd)})")
        return 0
    if shutil.which("vivado") is None:
        print(f"Vivado is not on PATH. On a machine with Vivado (2022.1 or later):\n"
              f"    cd {_shown(out)} && vivado -mode batch -source build.tcl\n"
              "It writes the bitstream (and the .hwh for PYNQ) into that directory.",
              file=sys.stderr)
        return 1
    with step("running Vivado (synthesis, implementation, bitstream)"):
        result = subprocess.run(cmd, cwd=out)
    return 0 if result.returncode == 0 else 1


def program(board, out: Path, host, dry_run: bool) -> int:
    """Load the bitstream onto ``board`` (or copy the overlay to ``host``); the exit status."""
    from platforms.vivado import program_commands
    cmds = program_commands(board, out.resolve(), host)
    if dry_run:
        for cmd in cmds:
            print(" ".join(cmd))
        return 0
    stem = f"bfp_{board.name.replace('-', '_')}"
    if not (out / f"{stem}.bit").exists():
        print(f"error: no bitstream {_shown(out / (stem + '.bit'))}: build it first with "
              "--synth vivado (see README)", file=sys.stderr)
        return 1
    tool = cmds[0][0]
    if shutil.which(tool) is None:
        print(f"error: {tool} is not installed or not on PATH", file=sys.stderr)
        return 1
    for cmd in cmds:
        result = subprocess.run(cmd)
        if result.returncode:
            print(f"error: {' '.join(cmd)} failed (exit {result.returncode}): is the board "
                  f"connected{' and reachable' if host else ' with its JTAG cable'}?",
                  file=sys.stderr)
            return 1
    return 0


def main(argv=None) -> int:
    """The command line; the exit status (0, 1 on a failed step, 2 on bad arguments)."""
    parser, args = parse_args(argv)
    if args.list:
        print(list_platforms())
        return 0
    board, cfg = args.board, args.cfg
    out = args.out or ROOT / "build" / board.name
    generate(board, cfg, out)
    status = 0
    if args.synth == "yosys":
        report, fits = estimate(board, cfg, out, whole=args.timing)
        status = 0 if fits else 1
        if args.timing_strict is not False:
            from platforms.timing import violations
            for line in violations(report["timing"]):
                print(f"error: timing: {line}", file=sys.stderr)
                status = 1
    elif args.synth == "vivado":
        status = run_vivado(out, args.dry_run)
    if status == 0 and args.program:
        status = program(board, out, args.host, args.dry_run)
    return status


if __name__ == "__main__":
    sys.exit(main())
