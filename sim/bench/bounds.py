"""Roofline bounds on PE utilisation: the array's occupancy and compulsory traffic."""

from __future__ import annotations

from firmware.spec.ports import dram_bytes_per_cycle

__all__ = ["roofline", "dram_bound"]


def roofline(m, n, k, rows, cols, data_width, port, write_ports=1, read_ports=1):
    """The bound on PE utilisation from the array's occupancy and compulsory traffic.

    Parameters
    ----------
    m, n, k : int
        The GEMM's shape, as given.
    rows, cols, data_width : int
        The array and the bus width in bits.
    port : dict
        A resolved port (:func:`firmware.spec.ports.resolve_port`).
    write_ports, read_ports : int
        The AXI write and read ports.

    Returns
    -------
    dict
        ``compute_cycles``, ``traffic_cycles``, ``read_bytes``, ``write_bytes``,
        ``dram_bytes_per_cycle`` (None without a DRAM limit), ``bound``, ``bound_by``
        (``"compute"``, ``"port"`` or ``"dram"``), ``latency_cycles`` and
        ``latency_bound``.

    Notes
    -----
    ``compute = ceil(M/rows) * ceil(N/cols) * K`` cycles (partly filled tiles count whole).
    The traffic is A and B read once (int8) and C written once (float32) over the
    sustainable bytes per cycle: the port's bus width on each of the read and write
    channels, and the DRAM's ``dram_gbps * DRAM_EFFICIENCY`` at the board clock, shared by
    both directions (:func:`firmware.spec.ports.dram_bytes_per_cycle`, which the memory model
    enforces too). With ``write_ports`` write ports, C is written at that many bus words a
    cycle; with ``read_ports`` 2, A is read through one port and B through the other (the
    larger of the two takes its bus words a cycle); with 3, B through two, striped by row,
    or, where the GEMM may run as its transpose (:func:`firmware.runtime.perfmodel.best_plan`),
    A in B's place: the ports' term is the smaller of the two orientations'.
    ``bound = MACs / (PEs * max(compute, traffic))``.

    ``latency_bound`` adds what no schedule of an output-stationary array can hide: the read
    latency before its first step, and after its last the array's skew (``rows + cols - 1``
    cycles until the last sum is out), the write latency and the writing of the smallest C
    tile (its rows dealt over the write ports, a bus word a cycle each):
    ``MACs / (PEs * (max(compute, traffic) + latency_cycles))``.

    :func:`dram_bound` leaves the ports out.
    """
    bus = data_width // 8
    compute = -(-m // rows) * -(-n // cols) * k
    rd, wr = m * k + k * n, 4 * m * n
    per_port = rd if read_ports == 1 else min(max(m * k, k * n / (read_ports - 1)),
                                              max(k * n, m * k / (read_ports - 1)))
    port_cycles = max(per_port / bus, wr / (bus * write_ports))
    traffic = port_cycles
    dram = dram_bytes_per_cycle(port, bus)
    if dram is not None:
        traffic = max(traffic, (rd + wr) / dram)
    cycles = max(compute, traffic)
    by = "compute" if compute >= traffic else "port" if port_cycles >= traffic else "dram"
    # the smallest C tile (the corner one), its rows over the write ports
    tile_rows, tile_cols = (m - 1) % rows + 1, (n - 1) % cols + 1
    last_tile = -(-tile_rows // write_ports) * -(-4 * tile_cols // bus)
    latency = port["read_latency"] + rows + cols - 1 + port["write_latency"] + last_tile
    return {"compute_cycles": compute, "traffic_cycles": round(traffic),
            "read_bytes": rd, "write_bytes": wr,
            "dram_bytes_per_cycle": None if dram is None else round(dram, 2),
            "bound": m * n * k / (rows * cols * cycles), "bound_by": by,
            "latency_cycles": latency,
            "latency_bound": m * n * k / (rows * cols * (cycles + latency))}


def dram_bound(record: dict) -> float:
    """A utilisation record's bound against the DRAM alone, the ports left out.

    ``MACs / (PEs * max(compute, DRAM traffic))``, from the compute cycles, compulsory bytes
    and DRAM rate the record's ``roofline`` (:func:`roofline`) carries; the compute bound
    alone where the port has no DRAM limit.

    Parameters
    ----------
    record : dict
        One record of :func:`sim.bench.utilization`.

    Returns
    -------
    float
    """
    rl = record["roofline"]
    cycles = rl["compute_cycles"]
    if rl.get("dram_bytes_per_cycle"):
        cycles = max(cycles, (rl["read_bytes"] + rl["write_bytes"]) / rl["dram_bytes_per_cycle"])
    return record["m"] * record["n"] * record["k"] / (record["rows"] * record["cols"] * cycles)


def _rounded_bound(bound: dict, util: float) -> tuple[dict, float, float]:
    """A :func:`roofline` for the JSON (its bounds to 4 places), and ``util`` over its
    ``bound`` and over its ``latency_bound``."""
    return ({**bound, "bound": round(bound["bound"], 4),
             "latency_bound": round(bound["latency_bound"], 4)},
            round(util / bound["bound"], 4), round(util / bound["latency_bound"], 4))
