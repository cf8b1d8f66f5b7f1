"""The performance model against the RTL on random GEMMs (``python -m sim.bench model``)."""

from __future__ import annotations

import numpy as np

from .cases import _port_spec, _run_checked

__all__ = ["MODEL_PORTS", "model_check", "model_check_table"]


#: The ports ``python -m sim.bench model`` checks the model behind by default: the ideal
#: memory and a Zynq-like port without pauses (``tests/test_perfmodel.py``'s two).
MODEL_PORTS = ["ideal", {"outstanding_reads": 8, "outstanding_writes": 8, "read_latency": 40,
                         "write_latency": 20, "max_burst": 16, "pause": 0.0}]


def model_check(rows, cols, data_width, depth, block, ports, count, seed,
                write_ports=1, read_ports=1, k_blocks=False) -> list[dict]:
    """Random GEMMs on the RTL behind each port, beside the performance model's prediction.

    M and N are drawn from multiples of the array (edge tiles and blocks included), K from
    16 to 300, the transposes and the block side at random.

    Parameters
    ----------
    rows, cols, data_width, depth, block : int
        The accelerator's configuration.
    ports : list of str or dict
        Port presets or knobs (:func:`firmware.spec.ports.resolve_port`).
    count : int
        GEMMs per port.
    seed : int
        Seeds the shapes.
    write_ports, read_ports : int
        The AXI write and read ports.
    k_blocks : bool
        Build the K-block mode and run BFP8 GEMMs with tile exponents along K
        (:meth:`firmware.Device.bfp_gemm`, float32 C, checked bit for bit against
        :func:`sim.models.bfp.gemm_kblocks`) at the device's block, against
        ``predict(k_blocks=True)``.

    Returns
    -------
    list of dict
        One record per GEMM and port: configuration, shape, block side, measured and
        predicted cycles, and ``error`` (predicted over measured, less 1).

    Raises
    ------
    ValueError
        A configuration the accelerator refuses.
    """
    import random

    from firmware import Device
    from firmware.runtime.perfmodel import predict
    from firmware.spec.ports import resolve_port

    rng = random.Random(seed)
    ms = [max(1, d * rows // 8) for d in (8, 24, 40, 72, 136, 200)]
    ns = [max(1, d * cols // 8) for d in (8, 16, 40, 64, 100)]
    cases = [(rng.choice(ms), rng.choice(ns), rng.choice([16, 64, 100, 300]),
              rng.random() < 0.5, rng.random() < 0.5, rng.randint(1, block))
             for _ in range(count)]
    out = []
    for port in ports:
        port = resolve_port(port)
        dev = Device("rtl", rows=rows, cols=cols, data_width=data_width, depth=depth,
                     block=block, port=port, seed=3, write_ports=write_ports,
                     read_ports=read_ports, **({"k_blocks": True} if k_blocks else {}))
        for m, n, k, ta, tb, side in cases:
            if k_blocks:
                side = dev.driver.info.block
                _run_kblocks(dev, f"{m}x{n}x{k}", m, n, k, ta, tb,
                             np.random.default_rng(m * n + k))
            else:
                _run_checked(dev, f"{m}x{n}x{k}", m, n, k, ta, tb,
                             np.random.default_rng(m * n + k), block=side)
            measured = dev.stats["cycles"]
            predicted = predict(m, n, k, ta, tb, rows=rows, cols=cols, depth=depth,
                                block=side, data_width=data_width, port=port,
                                write_ports=write_ports, read_ports=read_ports,
                                k_blocks=k_blocks)["cycles"]
            out.append({"port": port["name"],
                        "port_spec": _port_spec(port),
                        "rows": rows, "cols": cols,
                        "data_width": data_width, "write_ports": write_ports,
                        "read_ports": read_ports, "k_blocks": bool(k_blocks),
                        "depth": depth, "block": side, "m": m,
                        "n": n, "k": k, "transpose_a": ta, "transpose_b": tb,
                        "cycles": measured, "predicted_cycles": predicted,
                        "error": round(predicted / measured - 1, 4)})
    return out


def _run_kblocks(dev, label, m, n, k, ta, tb, rng) -> None:
    """One BFP8 GEMM with tile exponents along K on ``dev`` (a K-block build), float32 C
    checked bit for bit against :func:`sim.models.bfp.gemm_kblocks`."""
    from sim.models import bfp
    a = rng.standard_normal((k, m) if ta else (m, k)).astype(np.float32)
    b = rng.standard_normal((n, k) if tb else (k, n)).astype(np.float32)
    qa, ea = bfp.quantize_tiles(a)
    qb, eb = bfp.quantize_tiles(b)
    got = dev.bfp_gemm(dev.bfp_tensor(qa, ea), dev.bfp_tensor(qb, eb), transpose_a=ta,
                       transpose_b=tb, out="float32").numpy()
    want = bfp.gemm_kblocks(qa, ea, qb, eb, transpose_a=ta, transpose_b=tb)
    if not np.array_equal(got.view(np.uint32), want.astype(np.float32).view(np.uint32)):
        raise AssertionError(f"{label}: the accelerator's result differs from golden")
    if dev.sim.violations:
        raise AssertionError(f"{label}: {dev.sim.violations} AXI protocol violations")


def model_check_table(results) -> str:
    """Records of :func:`model_check` as a Markdown table, with the error's summary."""
    errors = np.abs([r["error"] for r in results])
    lines = ["| port | GEMM | block | cycles | model (error) |", "|---|---|---:|---:|---:|"]
    for r in results:
        form = "".join(t for t, on in (("A^T ", r["transpose_a"]), ("B^T", r["transpose_b"]))
                       if on).strip() or "as stored"
        lines.append(f"| {r['port']} | {r['m']}x{r['n']}x{r['k']} {form} | {r['block']} | "
                     f"{r['cycles']} | {r['predicted_cycles']} ({100 * r['error']:+.1f}%) |")
    lines.append(f"\nmean |error| {100 * errors.mean():.1f} %, within 5 %: "
                 f"{int(np.sum(errors <= 0.05))} of {len(errors)}, largest "
                 f"{100 * errors.max():.1f} %")
    return "\n".join(lines)
