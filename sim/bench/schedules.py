"""Every schedule the driver can give a GEMM, run and predicted (``python -m sim.bench
sweep``)."""

from __future__ import annotations

import numpy as np

from .cases import _run_plan

__all__ = ["sweep", "sweep_table"]


def _sides(m: int, n: int, rows: int, cols: int, block: int) -> list[int]:
    """The reuse block sides (``1..block``, as :func:`firmware.runtime.perfmodel.best_block`
    chooses among) that walk an ``m x n`` C differently: a side at least the larger count of tile
    rows and columns is one block of the whole C, as every larger side is."""
    return list(range(1, min(block, max(-(-m // rows), -(-n // cols))) + 1))


def _driver_schedule(m: int, n: int, k: int, transpose_a: bool, transpose_b: bool, *,
                     config: dict, queued: bool = False) -> tuple[bool, int, int]:
    """``(turned, side, chunk)``: the schedule the driver gives the GEMM
    (:func:`firmware.runtime.perfmodel.best_plan`,
    :func:`~firmware.runtime.perfmodel.best_chunk`) among those :func:`sweep` runs: a side
    past those that walk C differently (:func:`_sides`) as the last of them, which walks it
    alike. ``config`` as :func:`sweep`'s."""
    from firmware.runtime.perfmodel import best_chunk, best_plan, run_shape

    kw = {key: config[key] for key in ("rows", "cols", "depth", "data_width", "port",
                                       "write_ports", "read_ports")}
    turned, side = best_plan(m, n, k, transpose_a, transpose_b, block=config["block"],
                             queued=queued, **kw)
    run = run_shape(m, n, k, transpose_a, transpose_b, turned)
    chunk = best_chunk(*run, block=side, queued=queued, **kw)
    sides = _sides(run[0], run[1], kw["rows"], kw["cols"], config["block"])
    return turned, side if side in sides else sides[-1], chunk


def sweep(dev, m: int, n: int, k: int, transpose_a: bool = False, transpose_b: bool = False,
          *, config: dict, queued: bool = False, seed: int = 0) -> dict:
    """Every schedule the driver can give one GEMM, each run on ``dev`` and predicted.

    The schedules: as given and as its transpose (:func:`firmware.runtime.perfmodel.run_shape`),
    at each reuse block side that walks C differently and each ``DESC_FLAGS.CHUNK``; alone,
    or with ``queued`` behind a copy of itself. Each C is checked bit for bit. It answers how
    far the driver's choice (:func:`firmware.runtime.perfmodel.best_plan`,
    :func:`~firmware.runtime.perfmodel.best_chunk`, margins included) is from the fastest
    schedule the RTL can run, and how far the model's own fastest (no margins) is. The
    port's random pauses come from one stream for the whole sweep, so schedules a few cycles
    apart are within its noise.

    Parameters
    ----------
    dev : firmware.Device
        A ``Device("rtl")`` of ``config``.
    m, n, k : int
        The GEMM's shape.
    transpose_a, transpose_b : bool
        Whether A and B are stored transposed.
    config : dict
        :func:`firmware.runtime.perfmodel.predict`'s keywords (``rows``, ``cols``,
        ``depth``, ``data_width``, ``port``, ``write_ports``, ``read_ports``) with the
        buffers' ``block``.
    queued : bool
        Measure each schedule behind a copy of itself.
    seed : int
        Seeds the operands' random stream.

    Returns
    -------
    dict
        ``schedules``: ``{"turned", "block", "chunk", "cycles", "predicted"}`` each;
        ``driver``, ``fastest`` and ``model_fastest``: the schedule so chosen (the driver's
        and the model's measured in the sweep); ``driver_regret`` and ``model_regret``:
        their cycles over the fastest's, less 1.
    """
    from firmware.runtime.perfmodel import predict_cycles, run_shape
    from sim.models.engine import CHUNK_CHOICES

    kw = {key: config[key] for key in ("rows", "cols", "depth", "data_width", "port",
                                       "write_ports", "read_ports")}
    rng = np.random.default_rng(seed)
    label = f"{m}x{n}x{k}"
    schedules = []
    for turned in (False, True):
        shape = run_shape(m, n, k, transpose_a, transpose_b, turned)
        for side in _sides(shape[0], shape[1], kw["rows"], kw["cols"], config["block"]):
            for chunk in CHUNK_CHOICES:
                cycles = _run_plan(dev, label, m, n, k, transpose_a, transpose_b, rng, side,
                                   turned, chunk, queued)
                predicted = predict_cycles(*shape, block=side, chunk=chunk, queued=queued,
                                           **kw)
                schedules.append({"turned": turned, "block": side, "chunk": chunk,
                                  "cycles": cycles, "predicted": predicted})
    want = _driver_schedule(m, n, k, transpose_a, transpose_b, config=config, queued=queued)
    driver = next(s for s in schedules if (s["turned"], s["block"], s["chunk"]) == want)
    fastest = min(schedules, key=lambda s: s["cycles"])
    model_fastest = min(schedules, key=lambda s: s["predicted"])
    return {"m": m, "n": n, "k": k, "transpose_a": transpose_a, "transpose_b": transpose_b,
            "queued": queued, "schedules": schedules, "driver": driver, "fastest": fastest,
            "model_fastest": model_fastest,
            "driver_regret": round(driver["cycles"] / fastest["cycles"] - 1, 4),
            "model_regret": round(model_fastest["cycles"] / fastest["cycles"] - 1, 4)}


def _random_gemms(rows: int, cols: int, count: int, seed: int) -> list[tuple]:
    """``count`` random GEMMs ``(name, M, N, K, transpose_a, transpose_b)`` for an array of
    ``rows x cols``: M and N from partial, whole and many tiles (N = 10 too), K from 24 to
    520, each transpose a coin's throw; drawn from ``seed``."""
    import random

    rng = random.Random(seed)
    out = []
    for i in range(count):
        m = rng.choice([rows // 2 + 3, rows, 3 * rows, 5 * rows + 7, 8 * rows, 12 * rows])
        n = rng.choice([10, cols, 2 * cols + 5, 4 * cols, 9 * cols, 12 * cols])
        k = rng.choice([24, 72, 160, 300, 520])
        out.append((f"random {i}", m, n, k, rng.random() < 0.5, rng.random() < 0.5))
    return out


def _schedule(s: dict) -> str:
    return f"{'turned, ' if s['turned'] else ''}block {s['block']}, chunk {s['chunk']}"


def sweep_table(results) -> str:
    """Sweeps (:func:`sweep`) as a Markdown table, one row per GEMM: the driver's schedule,
    the fastest and the model's fastest, their cycles and utilisation over the GEMM's bound,
    followed by a summary of the driver's regret and the model's error."""
    lines = ["| GEMM | schedules | driver: schedule, cycles (util / bound) | fastest "
             "| model's fastest | driver / fastest | model's / fastest |",
             "|---|---:|---|---|---|---:|---:|"]
    for r in results:
        form = "".join(t for t, on in (("A^T ", r["transpose_a"]), ("B^T", r["transpose_b"]))
                       if on).strip() or "as stored"
        name = f"{r.get('name', '')} {r['m']}x{r['n']}x{r['k']} {form}".strip()
        cells = [f"{_schedule(r[w])}: {r[w]['cycles']}"
                 + (f" ({100 * r[w]['over_bound']:.1f}%)" if "over_bound" in r[w] else "")
                 for w in ("driver", "fastest", "model_fastest")]
        lines.append(f"| {name} | {len(r['schedules'])} | {' | '.join(cells)} | "
                     f"{100 * r['driver_regret']:+.1f}% | {100 * r['model_regret']:+.1f}% |")
    regrets = np.array([r["driver_regret"] for r in results])
    lines.append(f"\ndriver within 1 % of the fastest schedule on {int(np.sum(regrets <= 0.01))} "
                 f"of {len(results)}, within 5 % on {int(np.sum(regrets <= 0.05))}; mean "
                 f"{100 * regrets.mean():.1f} %, largest {100 * regrets.max():.1f} %")
    errors = np.abs([s["predicted"] / s["cycles"] - 1 for r in results for s in r["schedules"]])
    lines.append(f"the model on all {len(errors)} schedules: mean |error| "
                 f"{100 * errors.mean():.1f} %, within 5 %: {int(np.sum(errors <= 0.05))}, "
                 f"largest {100 * errors.max():.1f} %")
    return "\n".join(lines)
