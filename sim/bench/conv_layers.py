"""Every convolution's descriptors against their bounds: ``python -m sim.bench convs``.

For each network (``--net``: fashion-cnn, and VGG-11 and ResNet-20 on 3x32x32 as
:mod:`sim.bench.step` builds them) and board default (``--board``), one training step of
:class:`firmware.ml.resident_conv.ResidentConvNet` (batch ``--batch``) runs on
``Device("model")`` configured as the board's default on its memory port, with the
functional model's trace on (:attr:`sim.models.functional.FunctionalAccelerator.trace`).
Each descriptor is recorded with the layer and pass it belongs to (the input's and the loss
gradient's quantisation; per layer its forward, backward-data and weight-gradient
descriptors, the last stepping the bias too where the device offers it, else a bias
descriptor of its own), the GEMM the engine schedules (:meth:`sim.models.conv.ConvGeometry.
implicit_gemm`), its multiply-accumulates and the performance model's cycles, and three
bounds on its cycles:

* **compute**: ``ceil(M / rows) * ceil(N / cols) * K`` (``K`` the steps the engine walks:
  forward and backward-data, in each block of tiles, the runs of the kernel offsets the
  block walks (:func:`sim.models.conv.walked_offsets`: the first, the last and each one
  between that a tile of the block reads B at), over padding on zero rows;
  a weight gradient's ``N`` is its kernel offsets' GEMMs of ``Cin`` columns each, as the
  engine walks them: ``offsets * ceil(Cin / cols)`` tiles across);
* **K blocks**: the same with every K block a read-out of the array, which takes the
  datapath's K-block interval (:func:`firmware.runtime.perfmodel.kblock_interval`) however
  short the block: a weight gradient's blocks are tile blocks of ``T`` output positions
  (:data:`firmware.spec.regmap.TILE_BLOCK`); forward and backward-data each kernel offset's
  blocks of at most ``T`` channels are rescaled on their own
  (:meth:`sim.models.conv.ConvGeometry.k_runs`): each tile ``sum(max(run, interval))`` over
  its runs, a run between the tile's first and last read out over only the tile's rows
  inside M (the interval of those rows). On an array whose interval exceeds ``T`` (the
  VU9P's 64 x 128: 64 cycles) this, not the MACs, bounds a BFP8 GEMM, and on every array it
  bounds a layer of fewer channels than ``T``;
* **traffic**: the compulsory bytes (each operand read once, int8, the input only where a
  kernel offset reads it; C written once, int8, or
  float32 for a float32 C; an SGD target read and written; masks, argmax and exponents
  left out) over the port's sustainable bytes a cycle (:func:`sim.bench.bounds.roofline`'s
  rule: the bus width on each of the read and write channels, and the DRAM's rate shared).

``bound = MACs / (PEs * max(K blocks, traffic))``; ``ideal`` leaves the K-block read-out
out (``max(compute, traffic)``): what an array that reads out while it computes would
reach. ``any_mapping`` drops the mapping too: each descriptor at the larger of its
products that are not padding's (``macs_made``: a weight gradient's are the forward
convolution's, an unfolded first layer's those before its input was unfolded) over the
array's PEs, and its compulsory traffic -- what any schedule of these descriptors on this
array and port takes at least, whichever of its operands it puts on the rows and the
columns, so long as each descriptor reads its operands from memory and writes its result
there. The step's rows sum them over its descriptors. JSON to ``--out``; the docs' tables
(``docs/layers.md``, the step bound in ``docs/performance.md``) come from it.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from firmware.spec.regmap import TILE_BLOCK
from sim.bench.host import add_array_options, array_overrides, board_device

ROOT = Path(__file__).resolve().parents[2]

__all__ = ["bounds", "trace_step", "measure", "main"]


def bounds(rec: dict, cfg: dict, port: dict, walked: tuple | None = None) -> dict:
    """The bounds (module documentation) of one traced descriptor ``rec`` (with its
    ``bytes_read``, ``bytes_written`` and ``macs_made``) on configuration ``cfg`` and
    resolved ``port``; ``walked``, a convolution's kernel offsets each block of tiles walks
    (:func:`sim.models.conv.walked_offsets`, :func:`trace_step`'s), else every offset."""
    from firmware.runtime.perfmodel import kblock_interval
    from firmware.spec.ports import dram_bytes_per_cycle
    from firmware.spec.regmap import TILE_BLOCK
    rows, cols, bus = cfg["rows"], cfg["cols"], cfg["data_width"] // 8
    m, n, k = rec["m"], rec["n"], rec["k"]
    # (a weight gradient: a GEMM of Cin columns per kernel offset)
    offsets = rec.get("offsets") or 1
    across = offsets * -(-(n // offsets) // cols)
    packing = cfg.get("packing", 1)
    # (a convolution's runs, or tile blocks of K: each a read-out however short, those
    # between a tile's first and last of only the tile's rows inside M)
    runs = rec.get("k_runs") or [min(TILE_BLOCK, k - k0) for k0 in range(0, k, TILE_BLOCK)]
    # (the steps walked: a convolution's kernel offsets each block of tiles walks, over
    # padding too; as (tiles across, runs) per block)
    if walked:
        side, per = -(-across // len(walked)), len(runs) // len(walked[0])
        blocks = [(min(side, across - b * side), [r for j, r in enumerate(runs) if w[j // per]])
                  for b, w in enumerate(walked)]
    else:
        blocks = [(across, runs)]
    compute = -(-m // rows) * sum(t * sum(rs) for t, rs in blocks)
    kb = 0
    for i in range(-(-m // rows)):
        read = min(rows, m - i * rows)
        kb += sum(t * max(sum(rs), sum(
            max(r, kblock_interval(rows, cols, packing,
                                   read if 0 < j < len(rs) - 1 else None))
            for j, r in enumerate(rs))) for t, rs in blocks)
    rd, wr = rec["bytes_read"], rec["bytes_written"]
    traffic = max(rd / bus, wr / (bus * cfg.get("write_ports", 1)))
    dram = dram_bytes_per_cycle(port, bus)
    if dram is not None:
        traffic = max(traffic, (rd + wr) / dram)
    pes = rows * cols
    best, ideal = max(kb, traffic), max(compute, traffic)
    made = rec["macs_made"]
    anyway = max(-(-made // pes), traffic)
    by = "traffic" if traffic >= kb else "k-blocks" if kb > compute else "compute"
    return {"compute_cycles": compute, "kblock_cycles": kb, "traffic_cycles": round(traffic),
            "bound_cycles": round(best), "ideal_cycles": round(ideal), "bound_by": by,
            "bound": rec["macs"] / (pes * best) if best else None,
            "ideal": rec["macs"] / (pes * ideal) if ideal else None,
            "any_mapping_cycles": round(anyway),
            "any_mapping": made / (pes * anyway) if made and anyway else None}


def _traffic(pass_: str, g, st, last: bool, bias: bool = False) -> tuple[int, int]:
    """Compulsory bytes read and written by one descriptor (module documentation);
    ``bias``: a weight gradient's that steps the float32 bias row too."""
    if pass_ == "bias":
        # a row of ones against the deltas, a float32 row read and written
        d = g.out_channels * g.out_positions
        return g.out_positions + d + 4 * g.out_channels, 4 * g.out_channels
    mode = {"forward": 1, "backward-data": 2, "weight gradient": 3}[pass_]
    a, b, c = g.compulsory_bytes(mode)
    if mode == 3:
        # (the stack stepped in place, and the float32 bias row)
        row = 4 * g.out_channels if bias else 0
        return a + b + c + row, c + row
    if mode == 2:
        return a + b, c
    p = st.pooling(g.batch)
    out = c if p is None else g.out_channels * p.geometry.out_positions
    extra = c if st.add is not None else 0
    return a + b + extra, 4 * out if last else out


def trace_step(board: str, net_name: str, batch: int = 128,
               **overrides) -> tuple[list, dict, dict, list]:
    """One traced training step of ``net_name`` on ``board``'s default (module
    documentation; ``overrides``: its array's ``rows`` and ``cols`` instead): the records
    (layer, pass, shape, MACs, cycles, bytes), the board's configuration, its resolved
    port, and per record the kernel offsets each block walks (``None``: every one), which
    :func:`bounds` takes."""
    from firmware.ml.resident_conv import ResidentConvNet
    from firmware.spec.ports import BOARD_PORTS, resolve_port
    from platforms import PLATFORMS
    from sim.bench.step import NETS, _data
    cfg = PLATFORMS[board].config(**overrides)
    dev = board_device(board, memory=1 << 30, **overrides)
    build, shape = NETS[net_name]
    r = ResidentConvNet(build(np.random.default_rng(0)), shape, dev, seed=0, lr=0.01,
                        record=False)
    x, y = _data(shape, batch)
    dev.sim.trace = trace = []
    r.step(x, y)
    dev.sim.trace = None
    # (a first layer over its input unfolded runs the batch padded to whole tile blocks;
    # the images added make no products of their own)
    images = batch
    if r.stages[0].unfold is not None:
        batch += -batch % TILE_BLOCK
    # what ran, in the order ResidentConvNet runs it
    stages, n = r.stages, len(r.stages)
    plan = [("input", "quantise", None)]
    plan += [(i, "forward", st) for i, st in enumerate(stages)]
    plan.append(("loss gradient", "quantise", None))
    for i in reversed(range(n)):
        st = stages[i]
        plan += [(i, "backward-data", st)] if st.src >= 0 else []
        # (the bias stepped by the weight gradient's descriptor, DESC_CONV.BIAS_GRAD, or by
        # its own)
        plan += [(i, "weight gradient", st)] + ([] if r.fused_bias else [(i, "bias", st)])
    if len(plan) != len(trace):
        raise RuntimeError(f"{net_name}: traced {len(trace)} descriptors, expected "
                           f"{len(plan)}")
    records, walks = [], []
    for (layer, pass_, st), t in zip(plan, trace, strict=True):
        rec = {"layer": layer, "pass": pass_, "m": t["m"], "n": t["n"], "k": t["k"],
               "macs": t["macs"], "cycles": t["cycles"]}
        if t.get("k_runs"):
            rec["k_runs"] = list(t["k_runs"])
        if t.get("offsets"):
            rec["offsets"] = t["offsets"]
        walks.append(t.get("k_walked") or None)
        if st is None:
            rec.update(bytes_read=4 * t["m"] * t["n"], bytes_written=t["m"] * t["n"],
                       macs_made=0)
        else:
            g = st.geometry(batch)
            want = {"forward": 1, "backward-data": 2, "weight gradient": 3, "bias": 3}[pass_]
            if t["mode"] != want or (pass_ != "bias" and t["geometry"] != g):
                raise RuntimeError(f"{net_name}: descriptor {len(records)} is not layer "
                                   f"{layer}'s {pass_}")
            rd, wr = _traffic(pass_, g, st, layer == n - 1, r.fused_bias)
            rec.update(layer_shape=_shape(st), bytes_read=rd, bytes_written=wr,
                       macs_made=_made(pass_, st, images))
        records.append(rec)
    return records, cfg, resolve_port(BOARD_PORTS[board]), walks


def _made(pass_: str, st, images: int) -> int:
    """The products of a layer's ``pass_`` over ``images`` images that are not padding's:
    a weight gradient's are the forward convolution's; a first layer over its input
    unfolded makes its convolution's before the input was unfolded (the engine multiplies
    the zeros the unfolded matrix holds at padding, and a batch padded to whole tile blocks);
    a bias of its own, the deltas summed over the positions."""
    g = (st.unfold or st).geometry(images)
    if pass_ == "bias":
        return g.out_channels * g.out_positions
    return g.implicit_gemm(2 if pass_ == "backward-data" else 1)[3]


def _shape(st) -> str:
    if st.unfold is not None:      # (a first layer over its input unfolded)
        return _shape(st.unfold) + ", unfolded"
    k = "x".join(map(str, st.kernel))
    s = f", stride {st.stride[0]}" if st.stride != (1, 1) else ""
    p = f", pad {st.padding[0]}" if st.padding != (0, 0) else ""
    return (f"{st.channels}x{st.height}x{st.width} -> {st.out_channels}, {k}{s}{p}"
            + (", +shortcut" if st.add is not None else ""))


def measure(board: str, net_name: str, batch: int = 128, **overrides) -> dict:
    """:func:`trace_step`'s records with their :func:`bounds`, and the step's sums."""
    from firmware.runtime.perfmodel import kblock_interval
    from firmware.spec.ports import BOARD_PORTS
    from platforms import PLATFORMS
    records, cfg, port, walks = trace_step(board, net_name, batch, **overrides)
    for rec, walked in zip(records, walks, strict=True):
        rec.update(bounds(rec, cfg, port, walked))
        rec["utilization"] = rec["macs"] / (cfg["rows"] * cfg["cols"] * rec["cycles"]) \
            if rec["cycles"] else None
    pes = cfg["rows"] * cfg["cols"]
    macs = sum(r["macs"] for r in records)
    cycles = sum(r["cycles"] for r in records)
    bound = sum(r["bound_cycles"] for r in records)
    ideal = sum(r["ideal_cycles"] for r in records)
    made = sum(r["macs_made"] for r in records)
    anyway = sum(r["any_mapping_cycles"] for r in records)
    clock = PLATFORMS[board].clock_mhz
    return {"board": board, "config": f"{cfg['rows']}x{cfg['cols']}@{cfg['data_width']}",
            "port": BOARD_PORTS[board], "clock_mhz": clock, "net": net_name, "batch": batch,
            "kblock_interval": kblock_interval(cfg["rows"], cfg["cols"], cfg.get("packing", 1)),
            "macs": macs, "cycles": cycles, "utilization": macs / (pes * cycles),
            "bound_cycles": bound, "bound": macs / (pes * bound),
            "ideal_cycles": ideal, "ideal": macs / (pes * ideal),
            "macs_made": made, "any_mapping_cycles": anyway,
            "any_mapping": made / (pes * anyway),
            "step_ms": 1e3 * cycles / (clock * 1e6),
            "bound_ms": 1e3 * bound / (clock * 1e6), "ideal_ms": 1e3 * ideal / (clock * 1e6),
            "any_mapping_ms": 1e3 * anyway / (clock * 1e6),
            "descriptors": records}


def main(argv=None) -> int:
    """The command line, ``python -m sim.bench convs``; the exit status."""
    from sim.bench.step import NETS
    p = argparse.ArgumentParser(prog="python -m sim.bench convs", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--board", nargs="+", default=["zcu104", "pynq-z1", "vu9p"],
                   choices=["pynq-z1", "zcu104", "vu9p"], help="board defaults (default: all)")
    p.add_argument("--net", nargs="+", default=list(NETS), choices=list(NETS),
                   help="networks (default: all)")
    add_array_options(p)
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--out", type=Path, default=ROOT / "results" / "conv_layers.json")
    args = p.parse_args(argv)
    if not 1 <= args.batch <= 0xFFFF:
        p.error("--batch must be in [1, 65535]")
    overrides = array_overrides(p, args, args.board)
    results = []
    for net in args.net:
        for board in args.board:
            r = measure(board, net, args.batch, **overrides)
            print(f"  {net} on {board}: {r['step_ms']:.1f} ms, utilisation "
                  f"{100 * r['utilization']:.1f} %, bound {100 * r['bound']:.1f} % "
                  f"({r['bound_ms']:.1f} ms), without the K-block read-out "
                  f"{100 * r['ideal']:.1f} % ({r['ideal_ms']:.1f} ms), any mapping "
                  f"{100 * r['any_mapping']:.1f} % ({r['any_mapping_ms']:.1f} ms)",
                  file=sys.stderr)
            results.append(r)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({
        "command": "python -m sim.bench convs " + " ".join(argv if argv is not None
                                                           else sys.argv[1:]),
        "results": results}, indent=1) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
