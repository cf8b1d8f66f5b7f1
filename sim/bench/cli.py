"""The command line, ``python -m sim.bench``: one subcommand per benchmark."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from firmware.spec import regmap
from firmware.spec.ports import DRAM_EFFICIENCY

from .bounds import roofline
from .bus_trace import trace, trace_table
from .cases import BENCH_CONFIGS, BENCH_SCALE, _bench_cases, _bench_params, _port_spec
from .datapath import cycles, cycles_table, resources, resources_table
from .pe_utilization import _by_board, board_summary, utilization, utilization_table
from .perfmodel_check import MODEL_PORTS, model_check, model_check_table
from .schedules import _random_gemms, sweep, sweep_table

__all__ = ["main"]


ROOT = Path(__file__).resolve().parents[2]


def _size(text: str) -> tuple[int, int]:
    try:
        rows, cols = (int(x) for x in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"size must look like 8x8, not {text!r}") from None
    if rows < 1 or cols < 1:
        raise argparse.ArgumentTypeError(f"size must be positive, not {text!r}")
    return rows, cols


def _block_arg(text: str) -> int:
    try:
        block = int(text)
    except ValueError:
        block = None
    if block is None or block < 1 or block > 16 or block & (block - 1):
        raise argparse.ArgumentTypeError(f"a power of two in 1..16, not {text!r}")
    return block


def _gemm_arg(text: str) -> tuple[int, int, int]:
    try:
        m, n, k = (int(x) for x in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"must look like 64x256x128, not {text!r}") from None
    if min(m, n, k) < 1 or max(m, n, k) > 65535:
        raise argparse.ArgumentTypeError(f"M, N and K must be in 1..65535, not {text!r}")
    return m, n, k


def _port_arg(text: str):
    from firmware.spec.ports import PORTS, resolve_port

    if text in PORTS:
        return text
    try:
        port = json.loads(text)
    except json.JSONDecodeError:
        raise argparse.ArgumentTypeError(
            f"must be a preset name {sorted(PORTS)} or a JSON object of port knobs, "
            f"not {text!r}") from None
    try:
        resolve_port(port)
    except (TypeError, ValueError) as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    return port


def main(argv=None) -> int:
    """The command line, ``python -m sim.bench``.

    Parameters
    ----------
    argv : list of str, optional
        The arguments (default ``sys.argv[1:]``).

    Returns
    -------
    int
        0; bad arguments exit with status 2 (:class:`SystemExit`).
    """
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["host"]:
        from sim.bench.host import main as host
        return host(argv[1:])
    if argv[:1] == ["step"]:
        from sim.bench.step import main as step
        return step(argv[1:])
    if argv[:1] == ["formats"]:
        from sim.bench.formats import main as formats
        return formats(argv[1:])
    if argv[:1] == ["convs"]:
        from sim.bench.conv_layers import main as convs
        return convs(argv[1:])
    if argv[:1] == ["conv-rtl"]:
        from sim.bench.conv_rtl import main as conv_rtl
        return conv_rtl(argv[1:])
    parser = argparse.ArgumentParser(prog="python -m sim.bench",
                                     description=sys.modules[__package__].__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="what", required=True)
    sub.add_parser("host", help="host share of a training step (python -m sim.bench host -h)")
    sub.add_parser("step", help="a training step end to end against PyTorch fp32 "
                                "(python -m sim.bench step -h)")
    sub.add_parser("formats", help="quantisation error of block formats "
                                   "(python -m sim.bench formats -h)")
    sub.add_parser("convs", help="every convolution's descriptors against their bounds "
                                 "(python -m sim.bench convs -h)")
    sub.add_parser("conv-rtl", help="fashion-cnn's convolutions on the RTL against the "
                                    "model (python -m sim.bench conv-rtl -h)")
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
    p = sub.add_parser(
        "utilization", help="PE utilisation of whole GEMMs on the accelerator, per board port",
        description="PE utilisation of whole GEMMs (native Verilator model) beside their "
                    "roofline bound, on each board's memory port preset.")
    p.add_argument("--board", choices=sorted(BENCH_CONFIGS), nargs="+",
                   default=sorted(BENCH_CONFIGS),
                   help="boards to run (default: all), each with its port preset and the "
                        "configuration of BENCH_CONFIGS")
    p.add_argument("--port", type=_port_arg, default=None,
                   help="a port preset name of firmware.spec.ports.PORTS, or a JSON object of "
                        "knobs (e.g. '{\"preset\": \"zynq7-hp\", \"pause\": 0}'), instead of "
                        "each board's preset")
    p.add_argument("--sizes", type=_size, nargs="+", default=None,
                   help="instead of the boards: these arrays (e.g. 8x8 16x16) at --widths, on "
                        "--port (default ideal)")
    p.add_argument("--widths", type=int, nargs="+", choices=[64, 128, 256, 512], default=None,
                   help="bus widths for --sizes (default 128)")
    p.add_argument("--block", type=_block_arg, default=None,
                   help="reuse block (C tiles a side) instead of each board's default (a "
                        "power of two in 1..16)")
    p.add_argument("--write-ports", type=int, choices=list(regmap.WRITE_PORTS), default=None,
                   help="AXI write ports C rows are dealt to (default: BENCH_CONFIGS's, or 1 "
                        "with --sizes)")
    p.add_argument("--read-ports", type=int, choices=list(regmap.READ_PORTS), default=None,
                   help="AXI read ports (2: A and B each through its own; 3 to 5: B's rows "
                        "striped over two to four; default: BENCH_CONFIGS's, or 1 with "
                        "--sizes)")
    p.add_argument("--quick", action="store_true",
                   help="smaller square GEMMs and one layer (256->10, batch 64) only")
    p.add_argument("--default", action="store_true",
                   help="each board at its own default configuration (firmware.spec.boards) and "
                        "its own GEMM shapes, not through a BENCH_CONFIGS stand-in (slow to "
                        "compile: the ZCU104's 32x64 model takes minutes, once, the VU9P's "
                        "64x128 hours)")
    p.add_argument("--out", type=Path, default=ROOT / "results" / "utilization.json")
    p = sub.add_parser("trace", help="one GEMM's bus words per interval of its run")
    p.add_argument("--board", choices=sorted(BENCH_CONFIGS), default="pynq-z1",
                   help="the benchmark array (BENCH_CONFIGS) at the board's depth, behind its "
                        "port preset")
    p.add_argument("--gemm", type=_gemm_arg, required=True, metavar="MxNxK")
    p.add_argument("--transpose-a", action="store_true")
    p.add_argument("--transpose-b", action="store_true")
    p.add_argument("--block", type=int, default=None,
                   help="reuse block side, 1 to the board's (default: the driver's choice, "
                        "firmware.runtime.perfmodel.best_block)")
    p.add_argument("--chunk", type=int, choices=[0, 1, 2, 3], default=0,
                   help="DESC_FLAGS.CHUNK")
    p.add_argument("--queued", action="store_true",
                   help="two descriptors of the GEMM back to back (the second with OVERLAP)")
    p.add_argument("--every", type=int, default=32, help="cycles per interval")
    p.add_argument("--port", type=_port_arg, default=None,
                   help="a preset name or JSON knobs instead of the board's preset")
    p.add_argument("--out", type=Path, default=ROOT / "build" / "trace.json")
    p = sub.add_parser(
        "sweep", help="every schedule of GEMMs against the driver's choice",
        description="Every schedule the driver can give each GEMM (as given or turned, each "
                    "reuse block side, each DESC_FLAGS.CHUNK), run on a board's benchmark "
                    "array behind its port and predicted: how far the driver's choice and "
                    "the model's fastest are from the fastest measured.")
    p.add_argument("--board", choices=sorted(BENCH_CONFIGS), default="pynq-z1",
                   help="the benchmark array (BENCH_CONFIGS) at the board's depth and block, "
                        "behind its port preset")
    p.add_argument("--gemm", type=_gemm_arg, nargs="+", default=None, metavar="MxNxK",
                   help="GEMMs to sweep (default: the board's benchmark GEMMs, as "
                        "python -m sim.bench utilization runs them)")
    p.add_argument("--transpose-a", action="store_true", help="with --gemm")
    p.add_argument("--transpose-b", action="store_true", help="with --gemm")
    p.add_argument("--only", default=None,
                   help="of the benchmark GEMMs, those whose name contains this text "
                        "(e.g. '256->10')")
    p.add_argument("--random", type=int, default=None, metavar="COUNT",
                   help="instead: COUNT random GEMMs (shapes around the array, random "
                        "transposes; held out from the benchmark), drawn from --seed")
    p.add_argument("--seed", type=int, default=45, help="with --random")
    p.add_argument("--queued", action="store_true",
                   help="each schedule behind a copy of itself (the second with OVERLAP)")
    p.add_argument("--port", type=_port_arg, default=None,
                   help="a preset name or JSON knobs instead of the board's preset")
    p.add_argument("--out", type=Path, default=ROOT / "build" / "sweep.json")
    p = sub.add_parser(
        "model", help="the performance model against the RTL on random GEMMs",
        description="Random GEMMs (shapes, transposes, block sides) on the RTL behind each "
                    "port, beside the performance model's prediction.")
    p.add_argument("--size", type=_size, default=(8, 8))
    p.add_argument("--width", type=int, choices=[64, 128, 256, 512], default=128)
    p.add_argument("--depth", type=int, default=512)
    p.add_argument("--block", type=_block_arg, default=4)
    p.add_argument("--port", type=_port_arg, nargs="+", default=None,
                   help="ports (preset names or JSON knobs; default: ideal and a Zynq-like "
                        "port without pauses)")
    p.add_argument("--count", type=int, default=40, help="GEMMs per port")
    p.add_argument("--write-ports", type=int, choices=list(regmap.WRITE_PORTS), default=1,
                   help="AXI write ports C rows are dealt to (default 1)")
    p.add_argument("--read-ports", type=int, choices=list(regmap.READ_PORTS), default=1,
                   help="AXI read ports (default 1)")
    p.add_argument("--seed", type=int, default=5)
    p.add_argument("--k-blocks", action="store_true",
                   help="build the K-block mode and run BFP8 GEMMs with tile exponents "
                        "along K against the model's K-block prediction")
    p.add_argument("--out", type=Path, default=ROOT / "results" / "model_check.json")
    args = parser.parse_args(argv)

    if args.what == "utilization":
        from firmware.spec.boards import BOARDS
        from firmware.spec.ports import BOARD_PORTS

        blk = {} if args.block is None else {"block": args.block}
        wports = {} if args.write_ports is None else {"write_ports": args.write_ports}
        if args.read_ports is not None:
            wports["read_ports"] = args.read_ports
        configs = []
        for rows, cols in args.sizes or []:
            if rows & (rows - 1) or cols & (cols - 1) or min(rows, cols) < 2:
                parser.error(f"--sizes: the accelerator needs powers of two >= 2, "
                             f"not {rows}x{cols}")
            for width in args.widths or [128]:
                configs.append((f"{rows}x{cols}", {"rows": rows, "cols": cols,
                                                   "data_width": width, **blk, **wports},
                                args.port or "ideal"))
        if args.widths and not args.sizes:
            parser.error("--widths needs --sizes")
        if args.default and args.sizes:
            parser.error("--default runs the boards' defaults: not with --sizes")
        for board in [] if args.sizes else args.board:
            if args.default:
                # the board's own array, bus, reuse block and ports (the options the native
                # model takes), its GEMMs at their own shapes
                cfg = BOARDS[board].config(block=args.block, write_ports=args.write_ports,
                                           read_ports=args.read_ports)
                configs.append((f"{board} (default)", {key: cfg[key] for key in (
                    "rows", "cols", "data_width", "depth", "block", "packing", "dsp_slice",
                    "write_ports", "read_ports") if key in cfg},
                    args.port or BOARD_PORTS[board]))
                continue
            params = {**_bench_params(board), **blk, **wports}
            configs.append((board, params, args.port or BOARD_PORTS[board]))
            if BENCH_SCALE[board] > 1:     # a stand-in: the board's own default beside it
                configs[-1] += (BOARDS[board].config(block=args.block,
                                                     write_ports=args.write_ports,
                                                     read_ports=args.read_ports),
                                BENCH_SCALE[board])
        t0 = time.monotonic()
        results = utilization(configs, args.quick)
        table = utilization_table(results)
        cycles_run = sum(r["cycles"] for r in results)
        wall = sum(r["wall_seconds"] for r in results)
        print(f"simulated {cycles_run:,} cycles of {len(results)} GEMMs in {wall:.0f} s of "
              f"GEMM calls ({cycles_run / max(wall, 1e-9):,.0f} cycles per second of "
              f"simulation); {time.monotonic() - t0:.0f} s in all, builds included",
              file=sys.stderr)
    elif args.what == "trace":
        from firmware import Device
        from firmware.runtime.perfmodel import best_block
        from firmware.spec.ports import BOARD_PORTS, resolve_port

        params = _bench_params(args.board)
        if args.every < 1:
            parser.error(f"--every must be positive, not {args.every}")
        if args.block is not None and not 1 <= args.block <= params["block"]:
            parser.error(f"--block must be in 1..{params['block']}, not {args.block}")
        m, n, k = args.gemm
        port = resolve_port(args.port or BOARD_PORTS[args.board])
        block = args.block or best_block(
            m, n, k, args.transpose_a, args.transpose_b, rows=params["rows"],
            cols=params["cols"], depth=params["depth"], block=params["block"],
            data_width=params["data_width"], port=port,
            write_ports=params.get("write_ports", 1), read_ports=params.get("read_ports", 1),
            queued=args.queued)
        dev = Device("rtl", port=port, **params)
        results = {"board": args.board, **params, "port": port["name"], "m": m, "n": n,
                   "k": k, "transpose_a": args.transpose_a, "transpose_b": args.transpose_b,
                   "block_used": block, "chunk": args.chunk, "queued": args.queued,
                   **trace(dev, m, n, k, args.transpose_a, args.transpose_b, block=block,
                           chunk=args.chunk, queued=args.queued, every=args.every)}
        table = trace_table(results)
    elif args.what == "sweep":
        from firmware import Device
        from firmware.spec.ports import BOARD_PORTS, resolve_port

        params = _bench_params(args.board)
        if sum(x is not None for x in (args.gemm, args.only, args.random)) > 1:
            parser.error("--gemm, --only and --random are alternatives: give one")
        if (args.transpose_a or args.transpose_b) and not args.gemm:
            parser.error("--transpose-a/-b go with --gemm")
        if args.random is not None and args.random < 1:
            parser.error(f"--random must be positive, not {args.random}")
        if args.gemm:
            cases = [("", m, n, k, args.transpose_a, args.transpose_b)
                     for m, n, k in args.gemm]
        elif args.random:
            cases = _random_gemms(params["rows"], params["cols"], args.random, args.seed)
        else:
            cases = [(f"{group} {name}", m, n, k, ta, tb) for group, name, m, n, k, ta, tb, _, _
                     in _bench_cases(params["rows"], params["cols"], False,
                                     BENCH_SCALE[args.board])
                     if args.only is None or args.only in f"{group} {name}"]
            if not cases:
                parser.error(f"--only {args.only!r}: no benchmark GEMM's name contains it")
        port = resolve_port(args.port or BOARD_PORTS[args.board])
        config = {**{key: params.get(key, 1) for key in (
            "rows", "cols", "data_width", "depth", "block", "write_ports", "read_ports")},
            "port": port}
        dev = Device("rtl", port=port, **params)
        results = []
        for i, (name, m, n, k, ta, tb) in enumerate(cases):
            r = {"name": name, **sweep(dev, m, n, k, ta, tb, config=config,
                                       queued=args.queued, seed=i if args.random else 0)}
            bound = roofline(m, n, k, config["rows"], config["cols"], config["data_width"],
                             port, config["write_ports"], config["read_ports"])["bound"]
            for which in ("driver", "fastest", "model_fastest"):
                util = m * n * k / (config["rows"] * config["cols"] * r[which]["cycles"])
                r[which] = {**r[which], "over_bound": round(util / bound, 4)}
            results.append(r)
            print(f"  {name} {m}x{n}x{k}: driver {r['driver']['cycles']}, fastest "
                  f"{r['fastest']['cycles']}", file=sys.stderr)
        results = [{"board": args.board, **params, "port": port["name"],
                    "port_spec": _port_spec(port), **r}
                   for r in results]
        table = sweep_table(results)
    elif args.what == "model":
        if args.count < 1:
            parser.error(f"--count must be positive, not {args.count}")
        try:
            results = model_check(*args.size, args.width, args.depth, args.block,
                                  args.port or MODEL_PORTS, args.count, args.seed,
                                  args.write_ports, args.read_ports, args.k_blocks)
        except ValueError as e:          # a configuration the accelerator refuses
            parser.error(str(e))
        table = model_check_table(results)
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
    command = "python -m sim.bench " + " ".join(
        argv if argv is not None else sys.argv[1:])
    record = {"command": command, "results": results}
    if args.what == "utilization":
        record["dram_efficiency"] = DRAM_EFFICIENCY
        record["bench_configs"] = BENCH_CONFIGS
        record["bench_scale"] = BENCH_SCALE
        record["summary"] = {label: board_summary(rs) for label, rs in _by_board(results)}
    args.out.write_text(json.dumps(record, indent=2) + "\n")
    print(table)
    print(f"\nwrote {args.out}")
    return 0
