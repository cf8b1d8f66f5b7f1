"""Memory ports of the boards, as timing presets for the native model's AXI subordinate.

The simulated accelerator (:mod:`sim.native`) talks to its memory through one AXI port. How
board-like that port is, is set by these knobs (the C++ model, ``sim/native/harness.cpp``,
implements them):

``outstanding_reads``
    AR bursts accepted and not yet fully returned; ARREADY is low at the limit (``None``:
    unlimited).
``outstanding_writes``
    AW bursts accepted whose write response has not been sent (``None``: unlimited).
``read_latency``
    Cycles from an AR handshake to the burst's first R beat (then one beat per cycle).
``write_latency``
    Cycles from a burst's completion (its last W beat and its AW) to its B response.
``max_burst``
    Longest burst, in beats, the port takes: a longer one is counted as a protocol violation
    and answered with SLVERR.
``write_order``
    ``"aw-first"``: W beats are accepted only for bursts whose AW was accepted.
    ``"w-first"``: AWREADY rises only once the burst's W beats have all arrived (W is buffered
    ahead of its AW; AXI lets the subordinate wait for both, and forbids a manager to wait for
    AWREADY before raising WVALID). ``"random"``: one of the two per burst, from the seed.
``pause``
    Probability, per channel per cycle, of back-pressure on ARREADY, AWREADY, WREADY or of a
    gap before RVALID, BVALID.
``dram_gbps``
    The DRAM's peak bandwidth behind the port (GB/s; ``None``: unlimited). The model moves
    at most :data:`DRAM_EFFICIENCY` of it, at the board's ``clock_mhz``, reads and writes of
    every port together: :func:`dram_bytes_per_cycle` bytes a cycle, scaled by the simulated
    bus over the board's ``data_width`` where a smaller configuration stands in (so that the
    DRAM's share of a bus word a cycle is the board's).
``dram_arbitration``
    Who gets the DRAM when reads and writes both want more than it has, as the DDR4 MIG's
    AXI arbitration scheme (PG150: ``C0.DDR4_AxiArbitrationScheme``): ``"reads-first"`` (its
    default, ``RD_PRI_REG``; the Zynq DDR controllers also favour reads) or
    ``"round-robin"`` (``ROUND_ROBIN``: an R beat and a W beat take turns while both wait).

and, as metadata (used by benchmarks, not by the model): ``data_width`` (bits), ``protocol``
(``"AXI3"``/``"AXI4"``), ``clock_mhz`` (the accelerator's clock on that board) and
``source``.

The accelerator's DMA bursts follow the port: :func:`burst_beats` is the longest burst it is
built with for a port (:data:`firmware.spec.hw.DMA_BURST` or the port's ``max_burst``,
whichever is shorter, at most 16 beats on an AXI3 port), and refuses a length the port does
not take. ``Device("rtl")`` and ``Device("model")`` build or configure their accelerator so,
and the board builds from their presets.

``PORTS["ideal"]`` is the simplest memory (unlimited bursts in flight, read latency 32, any
burst length, AW before W, no pauses). :func:`resolve_port` turns a preset
name, or a dict overriding some knobs of ``"ideal"``, into a checked full dict;
:data:`BOARD_PORTS` names each board's preset.

.. code-block:: python

    from firmware import Device
    dev = Device("rtl", rows=8, cols=8, data_width=64, port="zynq7-hp")
    dev = Device("rtl", rows=8, cols=8, port={"outstanding_reads": 2, "write_order": "w-first"})
    dev = Device("rtl", rows=8, cols=8, port={"max_burst": 4})   # bursts of at most 4 beats
"""

from __future__ import annotations

__all__ = ["PORTS", "BOARD_PORTS", "KNOBS", "METADATA", "WRITE_ORDERS", "DRAM_ARBITRATIONS",
           "MIG_ARBITRATION", "DRAM_EFFICIENCY", "AXI3_MAX_BURST", "resolve_port",
           "dram_bytes_per_cycle", "burst_beats"]

from firmware.spec.hw import DMA_BURST

#: The knobs the memory model implements.
KNOBS = ("outstanding_reads", "outstanding_writes", "read_latency", "write_latency",
         "max_burst", "write_order", "pause", "dram_gbps", "dram_arbitration")
#: Descriptive fields of a preset (the model uses ``clock_mhz`` and ``data_width`` only to
#: turn ``dram_gbps`` into bytes a cycle).
METADATA = ("data_width", "protocol", "clock_mhz", "source")
#: The fraction of the DRAM's peak bandwidth a streaming DMA sustains (refresh, bank and
#: read/write turnarounds): an assumption, not a measurement.
DRAM_EFFICIENCY = 0.8
WRITE_ORDERS = ("aw-first", "w-first", "random")
#: ``dram_arbitration`` values, in the order the C++ model numbers them, and the DDR4 MIG's
#: name for each (PG150, ``C0.DDR4_AxiArbitrationScheme``): what the VCU118's block design
#: sets from its preset.
DRAM_ARBITRATIONS = ("reads-first", "round-robin")
MIG_ARBITRATION = {"reads-first": "RD_PRI_REG", "round-robin": "ROUND_ROBIN"}

PORTS: dict[str, dict] = {
    "ideal": {
        "outstanding_reads": None, "outstanding_writes": None, "read_latency": 32,
        "write_latency": 9, "max_burst": 256, "write_order": "aw-first", "pause": 0.0,
        "data_width": None, "protocol": "AXI4", "clock_mhz": None, "dram_gbps": None,
        "dram_arbitration": "reads-first",
        "source": "The model before board presets: a new burst every cycle, no limit on bursts "
                  "in flight, read latency 32 cycles, write response 9 cycles after the last "
                  "W beat, AXI4's longest burst (256), no back-pressure. Not a board.",
    },
    "zynq7-hp": {
        "outstanding_reads": 8, "outstanding_writes": 8, "read_latency": 30,
        "write_latency": 20, "max_burst": 16, "write_order": "aw-first", "pause": 0.05,
        "data_width": 64, "protocol": "AXI3", "clock_mhz": 100.0, "dram_gbps": 2.1,
        "dram_arbitration": "reads-first",
        "source": "Zynq-7000 S_AXI_HP0 (Pynq-Z1): UG585 (Zynq-7000 TRM) ch. 5, AXI_HP "
                  "interfaces: AXI3, 32/64-bit, bursts of at most 16 beats, separate read and "
                  "write command and data FIFOs (128 x 64-bit data), read and write command "
                  "acceptance of about 8 each; the AFI also accepts write data ahead of its "
                  "command. DRAM: Pynq-Z1 16-bit DDR3-1050, 2.1 GB/s peak. Assumptions, not "
                  "from UG585: read latency 30 cycles and write response 20 cycles at 100 MHz "
                  "(~300/200 ns through the AFI, interconnect and DDR controller), 5 % "
                  "back-pressure per channel for the CPU's DDR traffic.",
    },
    "zynqmp-hp": {
        "outstanding_reads": 8, "outstanding_writes": 8, "read_latency": 40,
        "write_latency": 24, "max_burst": 16, "write_order": "aw-first", "pause": 0.05,
        "data_width": 128, "protocol": "AXI4", "clock_mhz": 200.0, "dram_gbps": 21.0,
        "dram_arbitration": "reads-first",
        "source": "Zynq UltraScale+ S_AXI_HP0_FPD (ZCU104): UG1085 (Zynq UltraScale+ TRM), "
                  "PL-PS AXI interfaces: AXI4 in the PL limited to bursts of 16 beats (the PS "
                  "side is AXI3), 32/64/128-bit, 'read and write command acceptance capability "
                  "of eight', 128 x 128-bit read and write data FIFOs, write data may be "
                  "written to the FIFO before its command; no early BRESP (the write response "
                  "comes from the DDR controller). DRAM: ZCU104 PS 64-bit DDR4-2666, 21 GB/s "
                  "peak. Assumptions, not from UG1085: read latency 40 cycles and write "
                  "response 24 cycles at 200 MHz (~200/120 ns), 5 % back-pressure per channel.",
    },
    "vcu118-ddr4": {
        "outstanding_reads": 16, "outstanding_writes": 16, "read_latency": 32,
        "write_latency": 16, "max_burst": 256, "write_order": "aw-first", "pause": 0.02,
        "data_width": 512, "protocol": "AXI4", "clock_mhz": 250.0, "dram_gbps": 19.2,
        "dram_arbitration": "round-robin",
        "source": "VCU118 DDR4 C1 through the DDR4 MIG: PG150 (UltraScale Memory IP), AXI4 "
                  "slave interface: AXI4 INCR bursts (up to 256 beats), data width up to the "
                  "controller's native 512 bits for a 64-bit DDR4 at 4:1. DRAM: 64-bit "
                  "DDR4-2400, 19.2 GB/s peak. Assumptions, not from PG150: 16 bursts accepted "
                  "each way (the AXI shim's queues), read latency 32 cycles and write response "
                  "16 cycles at 250 MHz (~130/65 ns), 2 % back-pressure (refresh, bank "
                  "conflicts). The generated block design sets the MIG's AXI arbitration to "
                  "ROUND_ROBIN (C0.DDR4_AxiArbitrationScheme; its default, RD_PRI_REG, lets "
                  "the next block's reads starve C's writes).",
    },
}

#: The longest burst AXI3 has (AWLEN/ARLEN of 4 bits).
AXI3_MAX_BURST = 16

#: Board name (``platforms/``) -> its port preset.
BOARD_PORTS = {"pynq-z1": "zynq7-hp", "zcu104": "zynqmp-hp", "vu9p": "vcu118-ddr4"}


def _count(name, value, lo, hi, allow_none):
    if value is None and allow_none:
        return None
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"port[{name!r}] must be an integer{' or None' if allow_none else ''}, "
                        f"not {value!r}")
    if not lo <= value <= hi:
        raise ValueError(f"port[{name!r}] must be in {lo}..{hi}"
                         f"{' (or None: unlimited)' if allow_none else ''}, not {value!r}")
    return value


def resolve_port(port: str | dict = "ideal") -> dict:
    """The full, checked knobs and metadata of a port.

    Parameters
    ----------
    port : str or dict
        A name in :data:`PORTS`, or a dict with any of :data:`KNOBS` (and optionally
        ``"preset"``, the preset the rest comes from, default ``"ideal"``, and metadata).

    Returns
    -------
    dict
        Every knob and metadata field; ``name`` is the preset's name, with ``+`` if overridden.

    Raises
    ------
    TypeError
        ``port`` is neither a str nor a dict, or a knob has the wrong type.
    ValueError
        An unknown preset or knob name, or a knob out of range (names the valid choices).
    """
    if isinstance(port, str):
        if port not in PORTS:
            raise ValueError(f"port must be one of {sorted(PORTS)} or a dict, not {port!r}")
        return {"name": port, **PORTS[port]}
    if not isinstance(port, dict):
        raise TypeError(f"port must be a preset name {sorted(PORTS)} or a dict, "
                        f"not {type(port).__name__}")
    unknown = set(port) - set(KNOBS) - set(METADATA) - {"preset", "name"}
    if unknown:
        raise ValueError(f"port has unknown key(s) {sorted(unknown)}; valid: "
                         f"{sorted(KNOBS + METADATA + ('preset',))}")
    base = port.get("preset", "ideal")
    if not isinstance(base, str) or base not in PORTS:
        raise ValueError(f"port['preset'] must be one of {sorted(PORTS)}, not {base!r}")
    out = {"name": base + ("+" if set(port) - {"preset", "name"} else ""), **PORTS[base]}
    out.update({k: v for k, v in port.items() if k != "preset"})
    out["name"] = port.get("name", out["name"])
    _count("outstanding_reads", out["outstanding_reads"], 1, 1 << 16, True)
    _count("outstanding_writes", out["outstanding_writes"], 1, 1 << 16, True)
    _count("read_latency", out["read_latency"], 1, 1 << 16, False)
    _count("write_latency", out["write_latency"], 1, 1 << 16, False)
    _count("max_burst", out["max_burst"], 1, 256, False)
    if out["write_order"] not in WRITE_ORDERS:
        raise ValueError(f"port['write_order'] must be one of {list(WRITE_ORDERS)}, "
                         f"not {out['write_order']!r}")
    pause = out["pause"]
    if not isinstance(pause, (int, float)) or isinstance(pause, bool):
        raise TypeError(f"port['pause'] must be a number, not {pause!r}")
    if not 0.0 <= pause < 1.0:
        raise ValueError(f"port['pause'] must be in [0, 1), not {pause!r}")
    out["pause"] = float(pause)
    if out["dram_arbitration"] not in DRAM_ARBITRATIONS:
        raise ValueError(f"port['dram_arbitration'] must be one of {list(DRAM_ARBITRATIONS)}, "
                         f"not {out['dram_arbitration']!r}")
    dram = out["dram_gbps"]
    if dram is not None:
        if not isinstance(dram, (int, float)) or isinstance(dram, bool):
            raise TypeError(f"port['dram_gbps'] must be a number or None, not {dram!r}")
        if not dram > 0:
            raise ValueError(f"port['dram_gbps'] must be positive (or None: unlimited), "
                             f"not {dram!r}")
        clock = out["clock_mhz"]
        if not isinstance(clock, (int, float)) or isinstance(clock, bool) or not clock > 0:
            raise ValueError(f"port['dram_gbps'] needs port['clock_mhz'] (the accelerator's "
                             f"clock, MHz), not {clock!r}")
        out["dram_gbps"] = float(dram)
    return out


def dram_bytes_per_cycle(port: dict, bus_bytes: int) -> float | None:
    """What the DRAM behind ``port`` (:func:`resolve_port`'s) moves a cycle, reads and writes
    together, for an accelerator on a ``bus_bytes`` bus: ``dram_gbps * DRAM_EFFICIENCY`` at
    ``clock_mhz``, times ``bus_bytes`` over the board's bus (``data_width / 8``, if known)
    — a stand-in on a narrower bus keeps the board's ratio. ``None``: unlimited."""
    if port.get("dram_gbps") is None:
        return None
    rate = port["dram_gbps"] * DRAM_EFFICIENCY * 1e3 / port["clock_mhz"]
    board_bus = (port.get("data_width") or 8 * bus_bytes) // 8
    return rate * bus_bytes / board_bus


def burst_beats(port: str | dict, given: int | None = None) -> int:
    """The longest DMA burst, in bus words, of an accelerator on ``port``.

    Parameters
    ----------
    port : str or dict
        A preset name or dict of knobs (:func:`resolve_port`), or a resolved port.
    given : int, optional
        The length asked for (``Accelerator(burst_beats=...)``). None:
        :data:`firmware.spec.hw.DMA_BURST`, or the port's ``max_burst`` where that is
        shorter (and :data:`AXI3_MAX_BURST` on an AXI3 port).

    Returns
    -------
    int
        The burst length to build, in ``1..256``.

    Raises
    ------
    TypeError
        ``given`` is not an integer.
    ValueError
        ``given`` is out of ``1..256``, or longer than the port takes (the message names
        both lengths).
    """
    p = resolve_port(port)
    limit = min(p["max_burst"], AXI3_MAX_BURST if p.get("protocol") == "AXI3" else 256)
    if given is None:
        return min(DMA_BURST, limit)
    if not isinstance(given, int) or isinstance(given, bool):
        raise TypeError(f"burst_beats must be an integer, not {given!r}")
    if not 1 <= given <= 256:
        raise ValueError(f"burst_beats must be in 1..256, not {given!r}")
    if given > limit:
        what = f"max_burst {p['max_burst']}" if limit == p["max_burst"] else \
            f"AXI3 limit of {limit}"
        raise ValueError(f"burst_beats {given} is longer than port {p['name']!r} takes "
                         f"({what} beats): build the accelerator with burst_beats <= {limit}")
    return given
