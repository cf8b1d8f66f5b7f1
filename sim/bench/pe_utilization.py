"""PE utilisation of whole GEMMs on the native model behind each board's port (``python -m
sim.bench utilization``), and its tables and summaries."""

from __future__ import annotations

import sys
import time

import numpy as np

from firmware.spec.ports import DRAM_EFFICIENCY

from .bounds import _rounded_bound, dram_bound, roofline
from .cases import _bench_cases, _run_checked, _run_plan

__all__ = ["utilization", "utilization_table", "board_table", "board_summary", "AT_90"]


def _board_prediction(board, bm, bn, k, ta, tb, port) -> dict:
    """The board default's roofline and the model's prediction of the GEMM ``bm x bn x k``
    on it (at the block side its driver would choose), alone and queued behind another
    (:func:`firmware.runtime.perfmodel.predict_queued`), for a stand-in's record."""
    from firmware.runtime.perfmodel import (
        best_chunk,
        best_plan,
        predict,
        predict_queued,
        run_shape,
    )

    kw = {"rows": board["rows"], "cols": board["cols"], "data_width": board["data_width"],
          "depth": board["depth"], "port": port, "write_ports": board.get("write_ports", 1),
          "read_ports": board.get("read_ports", 1)}
    turned, side = best_plan(bm, bn, k, ta, tb, block=board["block"], **kw)
    shape = run_shape(bm, bn, k, ta, tb, turned)
    chunk = best_chunk(*shape, block=side, **kw)
    cycles = predict(*shape, block=side, chunk=chunk, **kw)["cycles"]
    bound = roofline(bm, bn, k, board["rows"], board["cols"], board["data_width"], port,
                     kw["write_ports"], kw["read_ports"])
    util = bm * bn * k / (board["rows"] * board["cols"] * cycles)
    rounded, over, over_latency = _rounded_bound(bound, util)
    q_turned, q_side = best_plan(bm, bn, k, ta, tb, block=board["block"], queued=True, **kw)
    q_shape = run_shape(bm, bn, k, ta, tb, q_turned)
    q_chunk = best_chunk(*q_shape, block=q_side, queued=True, **kw)
    queued = predict_queued(*q_shape, block=q_side, chunk=q_chunk, **kw)
    q_util = bm * bn * k / (board["rows"] * board["cols"] * queued)
    return {"m": bm, "n": bn, "k": k, "block": side, "chunk": chunk, "transposed": turned,
            "transposed_queued": q_turned, "predicted_cycles": cycles,
            "predicted_utilization": round(util, 4), "roofline": rounded,
            "predicted_over_bound": over, "predicted_over_latency_bound": over_latency,
            "block_queued": q_side, "chunk_queued": q_chunk, "predicted_queued_cycles": queued,
            "predicted_queued_over_bound": round(q_util / rounded["bound"], 4)}


def utilization(configs, quick=False) -> list[dict]:
    """PE utilisation of the benchmark GEMMs on ``Device("rtl")``, one record per GEMM.

    Each GEMM runs alone and queued behind a copy of itself, checked bit for bit, beside its
    :func:`~sim.bench.roofline` bound and the performance model's prediction.

    Parameters
    ----------
    configs : list of tuple
        ``(label, accelerator params, port[, board config, scale])`` each. With a board
        config (``firmware.spec.boards``' default) and its :data:`~sim.bench.BENCH_SCALE`
        (> 1), the simulated array stands in for the board's: the board's GEMMs run scaled
        and each record carries, under ``"stand_in"``, the scale, the board's configuration
        and shape, its roofline there, and the model's prediction of the default itself.
    quick : bool
        Smaller square GEMMs and one layer only.

    Returns
    -------
    list of dict
        One record per GEMM and configuration: shape, schedule used, cycles, utilisation,
        roofline, queued cycles, model errors, memory counters, wall time.
    """
    from firmware import Device
    from firmware.runtime.perfmodel import (
        best_chunk,
        best_plan,
        predict,
        predict_queued,
        run_shape,
    )
    from firmware.spec.ports import resolve_port

    out = []
    for label, params, port, *stand_for in configs:
        board, scale = stand_for if stand_for else (None, 1)
        port = resolve_port(port)
        rows, cols, width = params["rows"], params["cols"], params["data_width"]
        t0 = time.monotonic()
        dev = Device("rtl", port=port, **params)
        print(f"  {label}: {rows}x{cols} at {width} bits, port {port['name']}, built in "
              f"{time.monotonic() - t0:.0f} s", file=sys.stderr)
        rng = np.random.default_rng(0)
        for group, name, m, n, k, ta, tb, bm, bn in _bench_cases(rows, cols, quick, scale):
            dev.sim.clear_counters()
            wall = _run_checked(dev, name, m, n, k, ta, tb, rng)
            st, mem = dict(dev.stats), dict(dev.sim.counters)
            write_ports = params.get("write_ports", 1)
            read_ports = params.get("read_ports", 1)
            config = dict(rows=rows, cols=cols, data_width=width,
                          depth=params.get("depth", 512), port=port,
                          write_ports=write_ports, read_ports=read_ports)
            # queued, the driver chooses the block (and the transpose) by the queued
            # prediction
            q_turned, q_side = best_plan(m, n, k, ta, tb, block=dev.driver.info.block,
                                         queued=True, **config)
            q_shape = run_shape(m, n, k, ta, tb, q_turned)
            q_chunk = best_chunk(*q_shape, block=q_side, queued=True, **config)
            queued = _run_plan(dev, name, m, n, k, ta, tb, rng, q_side, q_turned, q_chunk)
            bound = roofline(m, n, k, rows, cols, width, port, write_ports, read_ports)
            util = st["utilization"]
            rounded, over, over_latency = _rounded_bound(bound, util)
            model = predict(*run_shape(m, n, k, ta, tb, st["transposed"]),
                            block=st["block"], chunk=st["chunk"], **config)
            model_queued = predict_queued(*q_shape, block=q_side, chunk=q_chunk, **config)
            q_util = m * n * k / (rows * cols * queued)
            out.append({
                "board": label, **params, "port": port["name"],
                "port_knobs": {key: port[key] for key in (
                    "outstanding_reads", "outstanding_writes", "read_latency", "write_latency",
                    "max_burst", "write_order", "pause")},
                "group": group, "gemm": name, "m": m, "n": n, "k": k,
                "transpose_a": ta, "transpose_b": tb, "block_used": st["block"],
                "block_used_queued": q_side,
                # DESC_FLAGS.CHUNK (firmware.runtime.perfmodel.best_chunk), alone and queued
                "chunk_used": st["chunk"], "chunk_used_queued": q_chunk,
                # run as C^T = op(B)^T op(A)^T (firmware.runtime.perfmodel.best_plan); the
                # roofline is the GEMM's as given
                "transposed": st["transposed"], "transposed_queued": q_turned,
                "cycles": st["cycles"],
                "active_cycles": st["active_cycles"],
                "dma_stall_cycles": st["dma_stall_cycles"],
                "utilization": round(util, 4),
                "roofline": {**rounded, "dram_efficiency": DRAM_EFFICIENCY},
                "utilization_over_bound": over,
                "utilization_over_latency_bound": over_latency,
                # behind another GEMM in the queue (its fill under that one's drain)
                "queued_cycles": queued,
                "queued_utilization": round(q_util, 4),
                "queued_over_bound": round(q_util / rounded["bound"], 4),
                "predicted_queued_cycles": model_queued,
                "queued_model_error": round(model_queued / queued - 1, 4),
                "predicted_cycles": model["cycles"],
                "model_error": round(model["cycles"] / st["cycles"] - 1, 4),
                **({} if board is None else {"stand_in": {
                    "scale": scale, "board_config": {key: board.get(key, 1) for key in (
                        "rows", "cols", "data_width", "depth", "block", "write_ports",
                        "read_ports")},
                    **_board_prediction(board, bm, bn, k, ta, tb, port)}}),
                "memory": {key: mem[key] for key in (
                    "read_bursts", "write_bursts", "read_beats", "write_beats",
                    "max_reads_in_flight", "max_writes_in_flight", "ar_stall_cycles")},
                "wall_seconds": round(wall, 2),
                "sim_cycles_per_second": round(st["cycles"] / wall)})
    return out


def _shape(m, n, k):
    return f"{m}x{n}x{k}"


def _stand_in(record) -> dict | None:
    """A record's ``stand_in`` section, where a smaller array stood in for the board; None
    otherwise, and for a section with ``scale`` 1."""
    s = record.get("stand_in")
    return s if s and s["scale"] > 1 else None


def _by_board(results):
    """``(label, records)`` per board (or configuration), in the order first seen."""
    for label in dict.fromkeys(r["board"] for r in results):
        yield label, [r for r in results if r["board"] == label]


def board_table(results) -> str:
    """One board's (or configuration's) records as a Markdown table.

    Parameters
    ----------
    results : list of dict
        Records of :func:`utilization`, of one board.

    Returns
    -------
    str

    Notes
    -----
    *PE utilisation*, *bound* (:func:`~sim.bench.roofline`), *util / bound* and *util /
    latency bound* (the bound with the latencies no schedule hides, ``latency_bound``) are
    the simulated array's, at the simulated shape. For a stand-in (``scale`` > 1) the last
    column is the model's prediction of the board's default itself at the board's shape: its
    utilisation, the roofline bound at the board's configuration, their ratio and what
    binds. *queued*: the GEMM behind another in the descriptor queue (``queued_cycles``) —
    its cycles, its utilisation over the bound and
    :func:`firmware.runtime.perfmodel.predict_queued`'s error, and its block where the
    queued choice differs."""
    lines = ["| GEMM | board M x N x K | simulated | block | cycles | PE utilisation | bound "
             "| util / bound | util / latency bound | queued: cycles (util / bound) "
             "| bound by | model (error) | the default, "
             "predicted: util / bound (ratio, by) |",
             "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|"]
    for r in results:
        board = _stand_in(r)
        rl = r["roofline"]
        sim = _shape(r["m"], r["n"], r["k"])
        shape = _shape(board["m"], board["n"], board["k"]) if board else sim
        default = (f"{100 * board['predicted_utilization']:.1f}% / "
                   f"{100 * board['roofline']['bound']:.1f}% "
                   f"({100 * board['predicted_over_bound']:.0f}%, "
                   f"{board['roofline']['bound_by']})") if board else "—"
        lat = r.get("utilization_over_latency_bound")
        lat = "—" if lat is None else f"{100 * lat:.0f}%"
        q_block = r.get("block_used_queued", r["block_used"])
        queued = (f"{r['queued_cycles']} ({100 * r['queued_over_bound']:.0f}%; model "
                  f"{100 * r['queued_model_error']:+.1f}%"
                  + (f"; block {q_block}" if q_block != r["block_used"] else "")
                  + ("; as C^T" if r.get("transposed_queued") else "") + ")"
                  if "queued_model_error" in r else "—")
        block = f"{r['block_used']}" + (" (C^T)" if r.get("transposed") else "")
        lines.append(
            f"| {r['group']}: {r['gemm']} | {shape} | {'as board' if sim == shape else sim} | "
            f"{block} | {r['cycles']} | {100 * r['utilization']:.1f}% | "
            f"{100 * rl['bound']:.1f}% | {100 * r['utilization_over_bound']:.0f}% | "
            f"{lat} | {queued} | {rl['bound_by']} | "
            f"{r['predicted_cycles']} ({100 * r['model_error']:+.1f}%) | "
            f"{default} |")
    return "\n".join(lines)


#: What "at >= 90 % of the bound" counts: the ratio itself at least 0.9.
AT_90 = 0.9


def board_summary(results) -> dict:
    """Counts and means of one board's records, for the headline figures.

    Parameters
    ----------
    results : list of dict
        Records of :func:`utilization`, of one board.

    Returns
    -------
    dict
        GEMMs at >= 90 % (:data:`AT_90`) of their bound (simulated; and, for a stand-in, the
        default's predicted over the board's bound), alone, queued, against the latency
        bound and against the DRAM alone (:func:`~sim.bench.dram_bound`); the utilisation
        of the compute-bound ones; the mean util / bound; the model's error on the simulated
        runs (mean and largest). A figure the records do not carry is None.

    Notes
    -----
    The means of util / bound take each GEMM at most at 1: a GEMM the driver ran as its
    transpose (``transposed``) can pass its bound, which is the GEMM's as given, and would
    hide the others.
    """
    sim = [r["utilization_over_bound"] for r in results]
    pred = [_stand_in(r)["predicted_over_bound"] for r in results if _stand_in(r)]
    # a record without the latency bound: None
    lat = [r.get("utilization_over_latency_bound") for r in results]
    lat_pred = [_stand_in(r).get("predicted_over_latency_bound") for r in results
                if _stand_in(r)]
    comp = [r["utilization"] for r in results if r["roofline"]["bound_by"] == "compute"]
    err = [abs(r["model_error"]) for r in results]
    # records without the queued runs: None
    queued = [r["queued_over_bound"] for r in results] \
        if all("queued_over_bound" in r for r in results) else None
    # against the DRAM alone (ports left out)
    by_dram = [r["utilization"] / dram_bound(r) for r in results]
    queued_by_dram = [r["queued_utilization"] / dram_bound(r) for r in results] \
        if queued else None
    return {"gemms": len(results), "cycles": sum(r["cycles"] for r in results),
            "at_90_percent_of_bound": sum(x >= AT_90 for x in sim),
            "queued_cycles": sum(r["queued_cycles"] for r in results) if queued else None,
            "queued_at_90_percent_of_bound": sum(x >= AT_90 for x in queued)
            if queued else None,
            "queued_mean_util_over_bound": round(float(np.mean(np.minimum(queued, 1))), 4)
            if queued else None,
            "at_90_percent_of_dram_bound": sum(x >= AT_90 for x in by_dram),
            "queued_at_90_percent_of_dram_bound": sum(x >= AT_90 for x in queued_by_dram)
            if queued else None,
            "queued_model_error": [
                round(float(np.mean([abs(r["queued_model_error"]) for r in results])), 4),
                round(max(abs(r["queued_model_error"]) for r in results), 4)]
            if all("queued_model_error" in r for r in results) else None,
            "default_predicted_at_90_percent_of_bound": sum(x >= AT_90 for x in pred)
            if pred else None,
            "default_predicted_queued_at_90_percent_of_bound": sum(
                _stand_in(r)["predicted_queued_over_bound"] >= AT_90 for r in results)
            if pred and all("predicted_queued_over_bound" in _stand_in(r) for r in results)
            else None,
            "at_90_percent_of_latency_bound": sum(x >= AT_90 for x in lat)
            if None not in lat else None,
            "default_predicted_at_90_percent_of_latency_bound":
                sum(x >= AT_90 for x in lat_pred) if lat_pred and None not in lat_pred
                else None,
            "compute_bound": len(comp),
            "compute_bound_utilization": [round(min(comp), 4), round(max(comp), 4),
                                          round(float(np.mean(comp)), 4)] if comp else None,
            "mean_util_over_bound": round(float(np.mean(np.minimum(sim, 1))), 4),
            "default_predicted_mean_util_over_bound": round(float(np.mean(np.minimum(pred, 1))),
                                                            4)
            if pred else None,
            "model_error": [round(float(np.mean(err)), 4), round(max(err), 4)]}


def utilization_table(results) -> str:
    """Every board's :func:`board_table`, each under its configuration and summary.

    Parameters
    ----------
    results : list of dict
        Records of :func:`utilization`.

    Returns
    -------
    str
    """
    out = []
    for label, rs in _by_board(results):
        r0 = rs[0]
        wp, rp = r0.get("write_ports", 1), r0.get("read_ports", 1)
        conf = (f"{r0['rows']}x{r0['cols']} @ {r0['data_width']}"
                f"{f', {wp} write ports' if wp > 1 else ''}"
                f"{f', {rp} read ports' if rp > 1 else ''}")
        if _stand_in(r0):
            b = _stand_in(r0)["board_config"]
            conf += (f", standing in for {b['rows']}x{b['cols']} @ {b['data_width']} "
                     f"(M and N / {_stand_in(r0)['scale']})")
        sm = board_summary(rs)
        out += [f"{label}: {conf}, port {r0['port']}", "", board_table(rs), "",
                f"{sm['at_90_percent_of_bound']} of {sm['gemms']} at >= 90 % of the bound"
                + (f" (the default, predicted: "
                   f"{sm['default_predicted_at_90_percent_of_bound']} at >= 90 % of its "
                   f"bound, mean {100 * sm['default_predicted_mean_util_over_bound']:.1f} %)"
                   if sm["default_predicted_at_90_percent_of_bound"] is not None else "")
                + (f"; {sm['at_90_percent_of_latency_bound']} at >= 90 % of the latency "
                   f"bound" if sm["at_90_percent_of_latency_bound"] is not None else "")
                + (f"; queued behind another: {sm['queued_at_90_percent_of_bound']} at >= 90 "
                   f"% of the bound (mean, each at most 100 %: "
                   f"{100 * sm['queued_mean_util_over_bound']:.1f} %"
                   + (f", model error mean {100 * sm['queued_model_error'][0]:.2f} %, "
                      f"largest {100 * sm['queued_model_error'][1]:.1f} %"
                      if sm.get("queued_model_error") else "") + ")"
                   if sm["queued_at_90_percent_of_bound"] is not None else "")
                + (f" (the default, predicted: "
                   f"{sm['default_predicted_at_90_percent_of_latency_bound']})"
                   if sm["default_predicted_at_90_percent_of_latency_bound"] is not None
                   else "")
                + (f"; the default queued, predicted: "
                   f"{sm['default_predicted_queued_at_90_percent_of_bound']} at >= 90 % of its "
                   f"bound" if sm.get("default_predicted_queued_at_90_percent_of_bound")
                   is not None else "")
                + (f"; against the DRAM alone (ports left out): "
                   f"{sm['at_90_percent_of_dram_bound']}"
                   + (f", queued {sm['queued_at_90_percent_of_dram_bound']}"
                      if sm["queued_at_90_percent_of_dram_bound"] is not None else ""))
                + f"; mean util / bound (each at most 100 %) "
                f"{100 * sm['mean_util_over_bound']:.1f} %; model "
                f"error mean {100 * sm['model_error'][0]:.2f} %, largest "
                f"{100 * sm['model_error'][1]:.1f} %", ""]
    return "\n".join(out)
