"""The memory model's board-like ports (:mod:`firmware.spec.ports`): the accelerator stays
bit-exact and finishes under every preset and every AW/W order with pauses, with no AXI
protocol violation; the port's limits hold; a burst over the port's limit is flagged; bad ports
are refused.

"w-first" (AWREADY only after the burst's W data) needs a manager that raises WVALID without
waiting for AWREADY, as AXI requires: the DmaWriter does."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from firmware import AcceleratorError, Device
from firmware.spec.ports import (
    BOARD_PORTS,
    DRAM_ARBITRATIONS,
    KNOBS,
    PORTS,
    WRITE_ORDERS,
    resolve_port,
)
from firmware.spec.regmap import ErrorCode
from platforms import PLATFORMS
from sim.models import golden

# Configurations tests/test_accelerator.py builds, so no extra compile: one write port, two,
# four; two write ports and two read ports ("2r": A and B each through a read port of its own)
# or three ("3r": B's rows striped over two), four ("4r": over three) or five ("5r": over
# four); three write ports with four read ports ("3w"; test_accelerator's "4x8x64-3w-4r").
CONFIG = {"rows": 8, "cols": 8, "data_width": 128}
CONFIGS_BY_PORTS = {1: CONFIG, 2: {"rows": 4, "cols": 8, "data_width": 64, "write_ports": 2},
                    4: {"rows": 4, "cols": 4, "data_width": 128, "write_ports": 4},
                    "2r": {"rows": 4, "cols": 8, "data_width": 64, "write_ports": 2,
                           "read_ports": 2},
                    "3r": {"rows": 4, "cols": 8, "data_width": 64, "write_ports": 2,
                           "read_ports": 3},
                    "4r": {"rows": 4, "cols": 8, "data_width": 64, "write_ports": 2,
                           "read_ports": 4},
                    "5r": {"rows": 4, "cols": 8, "data_width": 64, "write_ports": 2,
                           "read_ports": 5},
                    # three write ports over four rows (two, one, one a tile): the ZCU104's
                    # six write ports over 32 rows in small, with its four read ports
                    "3w": {"rows": 4, "cols": 8, "data_width": 64, "write_ports": 3,
                           "read_ports": 4}}


def _device(port, seed=5, write_ports=1):
    return Device("rtl", **CONFIGS_BY_PORTS[write_ports], port=port, seed=seed)


def _gemm(dev, rng, m, n, k, ta, tb):
    a = rng.integers(-128, 128, (k, m) if ta else (m, k), dtype=np.int8)
    b = rng.integers(-128, 128, (n, k) if tb else (k, n), dtype=np.int8)
    got = dev.gemm(a, b, transpose_a=ta, transpose_b=tb, out="int32")
    np.testing.assert_array_equal(got, golden.gemm(a, b, ta, tb))


def _check_port_kept(dev):
    port, c = dev.sim.port, dev.sim.counters
    assert dev.sim.violations == 0, c
    assert c["read_bursts"] > 0 and c["write_bursts"] > 0
    for way in ("reads", "writes"):
        limit = port[f"outstanding_{way}"]
        assert limit is None or c[f"max_{way}_in_flight"] <= limit, (way, c)


# (two write ports with one read port with -m slow: "2r" and "3r" have two write ports, 1
# and 4 the single read port)
@pytest.mark.parametrize("write_ports", [1, pytest.param(2, marks=pytest.mark.slow), 4, "2r",
                                         "3r", "3w"])
@pytest.mark.parametrize("order", WRITE_ORDERS)
@pytest.mark.parametrize("preset", sorted(PORTS))
def test_every_preset_and_write_order_is_exact(preset, order, write_ports):
    """All four transpose forms at odd shapes, with at least 10 % pauses on every channel;
    with two or four write ports, or two read ports, each port with the preset's limits (the
    DRAM's shared)."""
    dev = _device({"preset": preset, "write_order": order,
                   "pause": max(PORTS[preset]["pause"], 0.1)}, write_ports=write_ports)
    rng = np.random.default_rng(sorted(PORTS).index(preset))
    for ta, tb in ((False, False), (True, False), (False, True), (True, True)):
        m, n, k = (int(x) for x in rng.integers(1, 40, 3))
        _gemm(dev, rng, m, n, 2 * k + 1, ta, tb)
    _gemm(dev, rng, 19, 70, 301, True, False)       # long A^T columns: many short bursts
    _check_port_kept(dev)


@settings(max_examples=12, deadline=None)
@given(preset=st.sampled_from(sorted(PORTS)),
       outstanding=st.one_of(st.none(), st.integers(1, 3)),
       latency=st.integers(1, 80), pause=st.sampled_from([0.0, 0.3]),
       m=st.integers(1, 50), n=st.integers(1, 50), k=st.integers(1, 200),
       ta=st.booleans(), tb=st.booleans(), seed=st.integers(0, 2**16),
       order=st.sampled_from(WRITE_ORDERS),
       write_ports=st.sampled_from([1, 4, "2r", "3r", "3w"]),
       arbitration=st.sampled_from(DRAM_ARBITRATIONS))
def test_random_knobs(preset, order, outstanding, latency, pause, m, n, k, ta, tb, seed,
                      write_ports, arbitration):
    """Tight limits (one burst in flight), short and long latencies, heavy pauses, either
    DRAM arbitration (where the preset has a DRAM)."""
    dev = _device({"preset": preset, "outstanding_reads": outstanding,
                   "outstanding_writes": outstanding, "read_latency": latency,
                   "write_latency": max(1, latency // 2), "pause": pause,
                   "write_order": order, "dram_arbitration": arbitration}, seed=seed,
                  write_ports=write_ports)
    _gemm(dev, np.random.default_rng(seed), m, n, k, ta, tb)
    _check_port_kept(dev)


def test_a_burst_over_the_port_limit_is_flagged_and_refused():
    dev = _device("ideal")                          # the DMA issues bursts of up to 16 beats
    with pytest.raises(ValueError, match="burst_beats 16 is longer .*max_burst 4"):
        dev.sim.configure({"max_burst": 4})         # refused before anything runs ...
    dev.sim.configure({"max_burst": 4}, check=False)    # ... or the memory model's check
    rng = np.random.default_rng(0)
    with pytest.raises(AcceleratorError) as info:
        _gemm(dev, rng, 8, 8, 200, False, False)    # rows of 200 bytes: 13-beat bursts
    assert info.value.code is ErrorCode.READ_ERROR
    assert dev.sim.counters["burst_violations"] > 0
    assert dev.sim.violations >= dev.sim.counters["burst_violations"]
    assert dev.sim.counters["stability_violations"] == 0


# test_accelerator's 4x4 build with four write ports, at each burst length (16: its own build)
BURST_CONFIG = CONFIGS_BY_PORTS[4]


@pytest.mark.parametrize("burst", [16, *(pytest.param(b, marks=pytest.mark.slow)
                                        for b in (1, 2, 4, 8))])
def test_the_bursts_follow_the_port(burst):
    """On a port that takes bursts of at most ``burst`` beats the accelerator is built with
    that length: GEMMs of every transpose form, with long rows and pauses, are bit-exact, and
    no burst is over the port's limit."""
    dev = Device("rtl", **BURST_CONFIG, port={"max_burst": burst, "pause": 0.1}, seed=burst)
    assert dev.sim.params["burst_beats"] == dev.dma_burst == burst
    # the build says its burst length in CONFIG_DMA
    assert dev.driver.info.burst_beats == burst and dev.driver.info.outstanding >= 1
    rng = np.random.default_rng(burst)
    for ta, tb in ((False, False), (True, False), (False, True), (True, True)):
        m, n, k = (int(x) for x in rng.integers(1, 30, 3))
        _gemm(dev, rng, m, n, 8 * k + 1, ta, tb)
    _gemm(dev, rng, 19, 21, 301, True, False)       # long A^T columns: many short bursts
    _check_port_kept(dev)
    c = dev.sim.counters
    assert c["burst_violations"] == 0 and c["read_bursts"] >= c["read_beats"] / burst


def test_bursts_longer_than_the_port_takes_are_refused_before_a_gemm():
    """Asked for, bursts longer than the port takes are refused naming both lengths (nothing
    built); an AXI3 port takes at most 16."""
    from firmware.spec.ports import burst_beats

    for backend in ("rtl", "model"):
        with pytest.raises(ValueError, match=r"burst_beats 16 is longer than port 'ideal\+' "
                                             r"takes \(max_burst 4 beats\)"):
            Device(backend, **CONFIG, port={"max_burst": 4}, burst_beats=16)
    assert burst_beats("ideal") == 16 and burst_beats("vcu118-ddr4") == 16
    assert burst_beats({"max_burst": 2}) == 2 and burst_beats("vcu118-ddr4", 256) == 256
    with pytest.raises(ValueError, match="AXI3 limit of 16"):
        burst_beats({"preset": "zynq7-hp", "max_burst": 64}, 32)
    with pytest.raises(ValueError, match=r"burst_beats must be in 1\.\.256, not 0"):
        burst_beats("ideal", 0)
    with pytest.raises(TypeError, match="burst_beats must be an integer"):
        burst_beats("ideal", 4.0)


def test_the_dram_limits_every_channel_together():
    """A DRAM of 4 bytes a cycle behind a 16-byte port: a GEMM whose reads and writes
    computes in ~4,400 cycles on the bare port takes its bytes over 4 (reads and writes
    together), within a few per cent, bit-exact; the perf model follows; None lifts it."""
    from firmware.runtime.perfmodel import predict
    from firmware.spec.ports import dram_bytes_per_cycle

    port = {"dram_gbps": 0.5, "clock_mhz": 100.0, "data_width": 128}
    assert dram_bytes_per_cycle(resolve_port(port), 16) == pytest.approx(4.0)
    assert dram_bytes_per_cycle(resolve_port(port), 8) == pytest.approx(2.0)  # a stand-in
    cycles, moved = {}, {}
    for name, p in (("dram", port), ("bare", {**port, "dram_gbps": None})):
        dev = _device(p)
        _gemm(dev, np.random.default_rng(1), 64, 64, 64, False, False)
        cycles[name] = dev.stats["cycles"]
        c = dev.sim.counters
        moved[name] = 16 * (c["read_beats"] + c["write_beats"])
        assert dev.sim.violations == 0
        want = predict(64, 64, 64, port=dev.sim.port, block=dev.stats["block"], depth=512,
                       rows=8, cols=8, data_width=128, chunk=dev.stats["chunk"])["cycles"]
        assert abs(want / cycles[name] - 1) < 0.08, (name, cycles[name], want)
    # (the DRAM's budget starts with 32 bus words banked)
    assert (moved["dram"] - 32 * 16) / 4 <= cycles["dram"] <= 1.1 * moved["dram"] / 4
    assert cycles["bare"] < 0.7 * cycles["dram"]             # compute-bound without it


@pytest.mark.parametrize("arbitration", DRAM_ARBITRATIONS)
def test_write_ports_share_the_dram_budget(arbitration):
    """Two write ports and two read ports ("2r") behind a DRAM of 6.4 bytes a cycle, less
    than one 8-byte port: a write-bound GEMM (K = 16) and a read-heavier one. Each W beat
    takes a word of what the R beats left, however many ports offer one in a cycle, so the
    budget never ends a cycle overdrawn. (Before, both ports could each take a beat on the
    last word, starving the reads after them: 1460 and 251 overdrawn cycles here.) The bytes
    stay within the DRAM's, bit-exact, no violation."""
    port = {"dram_gbps": 0.8, "clock_mhz": 100.0, "data_width": 64,
            "dram_arbitration": arbitration}
    dev = _device(port, write_ports="2r")
    rng = np.random.default_rng(3)
    for m, n, k, ta, tb in ((64, 64, 16, False, False), (64, 64, 64, False, True)):
        dev.sim.clear_counters()
        _gemm(dev, rng, m, n, k, ta, tb)
        c = dev.sim.counters
        assert dev.sim.violations == 0
        assert c["dram_overdrawn_cycles"] == 0, c
        assert 8 * (c["read_beats"] + c["write_beats"]) - 32 * 8 <= 6.4 * dev.stats["cycles"]


def test_round_robin_dram_gives_c_writes_their_turn():
    """Reads and C's writes both want more than a DRAM of 5.6 bytes a cycle (a 16-byte
    port): served reads first (the MIG's default), the next block's loads hold C's writes
    back and the array waits on its output FIFO; round-robin (what the VCU118's block design
    sets) alternates them and finishes sooner (here about 4 %). Both bit-exact, within the
    DRAM's bytes, no violation. (Since blocks keep the operand they share, a GEMM whose K
    fits one chunk re-reads less, and the difference is smaller than it was.)"""
    base = {"dram_gbps": 0.7, "clock_mhz": 100.0, "data_width": 128}
    cycles = {}
    for arb in ("reads-first", "round-robin"):
        dev = _device({**base, "dram_arbitration": arb})
        _gemm(dev, np.random.default_rng(1), 64, 128, 128, False, True)
        c = dev.sim.counters
        cycles[arb] = dev.stats["cycles"]
        assert dev.sim.violations == 0
        assert 16 * (c["read_beats"] + c["write_beats"]) - 32 * 16 <= 5.6 * cycles[arb]
    assert cycles["round-robin"] < 0.98 * cycles["reads-first"], cycles


def test_latency_and_pause_options_still_override_the_port():
    dev = Device("rtl", **CONFIG, port="zynq7-hp", latency=7, pause=0.0)
    assert dev.sim.port["read_latency"] == 7 and dev.sim.port["pause"] == 0.0
    assert dev.sim.port["max_burst"] == 16 and dev.sim.port["outstanding_reads"] == 8
    assert Device("rtl", **CONFIG).sim.port == resolve_port("ideal")


def test_presets_are_complete_and_every_board_has_one():
    for name, preset in PORTS.items():
        assert resolve_port(name) == {"name": name, **preset}
        assert preset["source"]
    assert set(BOARD_PORTS) == set(PLATFORMS)
    for board, name in BOARD_PORTS.items():
        assert PORTS[name]["data_width"] == PLATFORMS[board].data_width
        assert PORTS[name]["clock_mhz"] == PLATFORMS[board].clock_mhz
    full = resolve_port({"outstanding_reads": 2})
    assert full["outstanding_reads"] == 2 and full["read_latency"] == 32
    assert full["name"] == "ideal+"
    assert resolve_port({"preset": "zynq7-hp", "pause": 0})["max_burst"] == 16


@pytest.mark.parametrize("port,exc,match", [
    ("zynq", ValueError, r"port must be one of \['ideal', 'vcu118-ddr4'"),
    (3, TypeError, "port must be a preset name"),
    ({"preset": "nope"}, ValueError, r"port\['preset'\] must be one of"),
    ({"latency": 3}, ValueError, "unknown key.*'latency'.*valid"),
    ({"outstanding_reads": 0}, ValueError, r"port\['outstanding_reads'\] must be in 1\.\."),
    ({"outstanding_writes": 2.5}, TypeError, r"port\['outstanding_writes'\] must be an integer"),
    ({"read_latency": None}, TypeError, r"port\['read_latency'\] must be an integer,"),
    ({"write_latency": 0}, ValueError, r"port\['write_latency'\]"),
    ({"max_burst": 257}, ValueError, r"port\['max_burst'\] must be in 1\.\.256"),
    ({"max_burst": True}, TypeError, r"port\['max_burst'\]"),
    ({"write_order": "any"}, ValueError, r"write_order'\] must be one of \['aw-first', 'w-first"),
    ({"pause": 1.0}, ValueError, r"port\['pause'\] must be in \[0, 1\)"),
    ({"pause": "often"}, TypeError, r"port\['pause'\] must be a number"),
    ({"dram_gbps": 0, "clock_mhz": 100}, ValueError, r"port\['dram_gbps'\] must be positive"),
    ({"dram_gbps": True, "clock_mhz": 100}, TypeError, r"port\['dram_gbps'\] must be a num"),
    ({"dram_gbps": 2.0}, ValueError, r"port\['dram_gbps'\] needs port\['clock_mhz'\]"),
    ({"dram_arbitration": "fair"}, ValueError,
     r"port\['dram_arbitration'\] must be one of \['reads-first', 'round-robin'\]"),
])
def test_bad_ports_are_refused(port, exc, match):
    with pytest.raises(exc, match=match):
        resolve_port(port)
    with pytest.raises(exc, match=match):           # before any model is built
        Device("rtl", **CONFIG, port=port)


def test_knob_names_are_the_models():
    assert set(KNOBS) <= set(PORTS["ideal"])


def test_roofline_counts_partly_filled_tiles_and_traffic():
    from sim.bench import DRAM_EFFICIENCY, roofline

    # N = 10 fills 10 of 16 columns: compute-bound at 10/16 of the PEs.
    r = roofline(256, 10, 64, 16, 16, 512, PORTS["ideal"])
    assert r["compute_cycles"] == 16 * 1 * 64 and r["bound_by"] == "compute"
    assert r["bound"] == pytest.approx(10 / 16)
    # K = 10: writing 128x784 float32 at 8 bytes per cycle bounds it.
    r = roofline(128, 784, 10, 16, 16, 64, PORTS["zynq7-hp"])
    assert r["bound_by"] == "port" and r["traffic_cycles"] == 128 * 784 * 4 // 8
    # The VU9P stand-in (64-bit bus for the board's 512): DRAM scaled by 8/64.
    r = roofline(64, 64, 64, 8, 16, 64, PORTS["vcu118-ddr4"])
    assert r["dram_bytes_per_cycle"] == pytest.approx(
        19.2 * DRAM_EFFICIENCY * 1e3 / 250 / 8, abs=0.01)
    assert r["bound_by"] == "dram"                  # 7.68 bytes per cycle for 8 on the bus
    # Two write ports: C leaves at twice the bus width (K = 10 above: the bound doubles).
    r2 = roofline(128, 784, 10, 16, 16, 64, PORTS["zynq7-hp"] | {"dram_gbps": None}, 2)
    assert r2["traffic_cycles"] == 128 * 784 * 4 // 16 and r2["bound_by"] == "port"
    # Three read ports (the Pynq-Z1's): 256->10's forward reads A (64 x 256) through one port
    # as given, but run as its transpose A^T takes B's two: the bound is the better one's.
    r3 = roofline(64, 10, 256, 16, 16, 64, PORTS["zynq7-hp"] | {"dram_gbps": None}, 4, 3)
    assert r3["traffic_cycles"] == 64 * 256 // 2 // 8 and r3["bound_by"] == "compute"
    r1 = roofline(64, 10, 256, 16, 16, 64, PORTS["zynq7-hp"] | {"dram_gbps": None}, 4, 2)
    assert r1["traffic_cycles"] == 64 * 256 // 8 and r1["bound_by"] == "port"


def test_dram_bound_leaves_the_ports_out():
    """The DRAM bound: the ZCU104 default's batch-64 weight gradient of 256->256 writes
    256 KB of C through four 16-byte write ports (4096 cycles: port-bound at half the array)
    but the DRAM alone would take it with A and B in (256 + 32 KB) / 84 bytes a cycle; a
    port without a DRAM leaves the compute bound."""
    from sim.bench import dram_bound, roofline

    port = PORTS["zynqmp-hp"]
    m, n, k = 256, 256, 64
    r = roofline(m, n, k, 32, 64, 128, port, 4, 4)
    assert r["bound_by"] == "port" and r["bound"] == pytest.approx(2048 / 4096)
    record = {"m": m, "n": n, "k": k, "rows": 32, "cols": 64, "roofline": r}
    dram = (m * k + k * n + 4 * m * n) / r["dram_bytes_per_cycle"]
    assert dram_bound(record) == pytest.approx(2048 / dram)
    assert 0.5 < dram_bound(record) < 0.6
    r = roofline(m, n, k, 32, 64, 128, port | {"dram_gbps": None}, 4, 4)
    assert dram_bound({**record, "roofline": r}) == 1.0


def test_latency_bound_adds_what_no_schedule_hides():
    from sim.bench import roofline

    # The ZCU104 default (32x64 @ 128, four write ports) on its forward GEMM of a 256->256
    # layer at batch 64: 2,048 compute cycles; then the read latency (40), the array's skew
    # (95), the write latency (24) and the last 32x64 C tile, 8 rows a port of 16 words.
    port = PORTS["zynqmp-hp"]
    r = roofline(64, 256, 256, 32, 64, 128, port, 4, 3)
    assert r["bound_by"] == "compute" and r["bound"] == 1.0
    assert r["latency_cycles"] == 40 + 95 + 24 + 8 * 16
    assert r["latency_bound"] == pytest.approx(2048 / (2048 + 287))
    assert r["latency_bound"] < 0.9            # 90 % of the roofline is out of reach
    # The corner tile: M = 70, N = 10 leave 6 rows of 10 columns (3 words of 16 bytes).
    r = roofline(70, 10, 64, 32, 64, 128, port | {"dram_gbps": None}, 4, 3)
    assert r["latency_cycles"] == 40 + 95 + 24 + 2 * 3
    cycles = max(r["compute_cycles"], r["traffic_cycles"])
    assert r["latency_bound"] == pytest.approx(70 * 10 * 64 / (32 * 64 * (cycles + 165)),
                                               rel=1e-3)


def test_bench_cli_checks_its_arguments():
    import re
    import subprocess
    import sys

    run = [sys.executable, "-m", "sim.bench", "utilization"]
    assert subprocess.run([*run, "--help"], capture_output=True).returncode == 0
    for option, bad, message in (
            ("--port", "fast", "must be a preset name"),
            ("--port", '{"max_burst": 0}', r"port\['max_burst'\] must be in 1..256"),
            ("--block", "3", r"--block: a power of two in 1\.\.16"),
            ("--block", "0", r"--block: a power of two in 1\.\.16"),
            ("--block", "32", r"--block: a power of two in 1\.\.16"),
            ("--write-ports", "7", r"--write-ports: invalid choice")):
        res = subprocess.run([*run, option, bad], capture_output=True, text=True)
        assert res.returncode == 2
        assert option in res.stderr
        assert re.search(message, res.stderr), res.stderr
    # the boards' defaults, not with arrays of one's own
    res = subprocess.run([*run, "--default", "--sizes", "8x8"], capture_output=True, text=True)
    assert res.returncode == 2
    assert "--default runs the boards' defaults: not with --sizes" in res.stderr


def test_two_read_ports_overlap_a_and_b():
    """A read-bound GEMM — a 4x8 array at reuse block 1 on a 64-bit bus, both operands read
    in rows of 64 bus words, two K chunks so that no block keeps an operand; A's 4-byte
    vectors take its gearbox two cycles a bus word, B's a cycle — behind a Zynq-like port:
    with A and B each through its own read port (and gearbox, and buffer loads) the two
    overlap, and the GEMM takes at most 60 % of its one-port cycles (about half); the model
    follows the two-port run. (Reading B through a second port while the load jobs, and the
    datapath's loads, still ran one after the other gained under 1 %. The model misses the
    one-port run here, by -24 %: it lets B's words past the router while A's narrow vectors
    are still being made — the case of vectors narrower than a bus word, which no board
    configuration has.)"""
    from firmware.runtime.perfmodel import predict

    port = {"preset": "zynqmp-hp", "pause": 0.0}
    m, n, k = 32, 32, 1024
    rng = np.random.default_rng(3)
    a = rng.integers(-128, 128, (m, k), dtype=np.int8)
    b = rng.integers(-128, 128, (n, k), dtype=np.int8)          # B^T as stored
    cycles = {}
    for key in (2, "2r"):
        dev = _device(port, write_ports=key)
        got = dev.gemm(a, b, transpose_b=True, out="int32", block=1)
        np.testing.assert_array_equal(got, golden.gemm(a, b, False, True))
        cycles[key] = dev.stats["cycles"]
        _check_port_kept(dev)
    assert dev.driver.info.read_ports == 2
    model = predict(m, n, k, False, True, rows=4, cols=8, depth=dev.driver.info.depth,
                    block=1, data_width=64, port=resolve_port(port), write_ports=2,
                    read_ports=2)["cycles"]
    assert abs(model / cycles["2r"] - 1) < 0.05, (model, cycles)
    assert cycles["2r"] < 0.6 * cycles[2], cycles


@pytest.mark.slow
def test_three_to_five_read_ports_stripe_b():
    """A B-bound GEMM — one tile row (M = 4 on a 4x8 array), so every B vector is used once
    and B must arrive at a bus word a cycle — behind a port that returns well under one
    (two bursts in flight, 60 cycles of latency: about 0.4 words a cycle): with B's rows
    striped over two read ports (and two gearboxes whose vectors are interleaved) it takes
    at most 65 % of its two-port cycles (about half), over three at most 80 % of those
    (about two thirds), over four at most 85 % of those (about three quarters), and the
    model follows every run."""
    from firmware.runtime.perfmodel import predict

    port = {"preset": "zynqmp-hp", "pause": 0.0, "outstanding_reads": 2, "read_latency": 60}
    m, n, k = 4, 256, 512
    rng = np.random.default_rng(4)
    a = rng.integers(-128, 128, (m, k), dtype=np.int8)
    b = rng.integers(-128, 128, (k, n), dtype=np.int8)
    cycles = {}
    for key in ("2r", "3r", "4r", "5r"):
        dev = _device(port, write_ports=key)
        got = dev.gemm(a, b, out="int32", block=4)
        np.testing.assert_array_equal(got, golden.gemm(a, b, False, False))
        cycles[key] = dev.stats["cycles"]
        _check_port_kept(dev)
        model = predict(m, n, k, rows=4, cols=8, depth=dev.driver.info.depth, block=4,
                        data_width=64, port=resolve_port(port), write_ports=2,
                        read_ports=dev.driver.info.read_ports)["cycles"]
        assert abs(model / cycles[key] - 1) < 0.05, (key, model, cycles)
    assert dev.driver.info.read_ports == 5
    assert cycles["3r"] < 0.65 * cycles["2r"], cycles
    assert cycles["4r"] < 0.8 * cycles["3r"], cycles
    assert cycles["5r"] < 0.85 * cycles["4r"], cycles


def test_small_n_runs_as_its_transpose():
    """A GEMM of small N on three write and four read ports (the ZCU104's shape in small):
    the driver runs it as C^T = op(B)^T op(A)^T (firmware.runtime.perfmodel.best_plan), the 3
    columns on the array's rows and A read as B is, striped over three ports; C comes back as the
    transpose of the C^T written, bit for bit — int32, float32 with row and column exponent
    vectors, and a K cut into runs by k_exp (pieces combined on the host) — faster than the
    GEMM as given (a block given, nothing turned) and as the model predicts. Kept on the
    device (``as_tensor``), C is never left transposed."""
    from firmware.runtime.perfmodel import best_plan, predict

    dev = _device("zynqmp-hp", write_ports="3w")
    info = dev.driver.info
    cfg = dict(rows=info.rows, cols=info.cols, depth=info.depth, data_width=info.data_width,
               port=dev.sim.port, write_ports=info.write_ports, read_ports=info.read_ports)
    rng = np.random.default_rng(11)
    m, n, k = 64, 3, 128
    for ta in (False, True):
        a = rng.integers(-128, 128, (k, m) if ta else (m, k), dtype=np.int8)
        b = rng.integers(-128, 128, (k, n), dtype=np.int8)
        turned, side = best_plan(m, n, k, ta, False, block=info.block, **cfg)
        assert turned
        got = dev.gemm(a, b, transpose_a=ta, out="int32")
        np.testing.assert_array_equal(got, golden.gemm(a, b, ta, False))
        assert dev.stats["transposed"] and dev.stats["block"] == side
        turned_cycles = dev.stats["cycles"]
        want = predict(n, m, k, True, not ta, block=side, chunk=dev.stats["chunk"],
                       **cfg)["cycles"]
        assert abs(want / turned_cycles - 1) < 0.05, (turned_cycles, want)
        as_given = dev.gemm(a, b, transpose_a=ta, out="int32", block=side)
        np.testing.assert_array_equal(as_given, got)
        assert not dev.stats["transposed"]
        assert turned_cycles < 0.7 * dev.stats["cycles"], (turned_cycles, dev.stats["cycles"])
        # scaled: each output's exponent is its row's plus its column's
        re = rng.integers(-20, 20, m).astype(np.int8)
        ce = rng.integers(-20, 20, n).astype(np.int8)
        got = dev.gemm(a, b, transpose_a=ta, row_exp=re, col_exp=ce)
        assert dev.stats["transposed"]
        np.testing.assert_array_equal(got, golden.gemm_scaled(a, b, ta, False, re, ce))
        # row-major, as an unturned result: the host's float reductions over it (which sum
        # in memory order) round as they do over the golden backend's
        assert got.flags.c_contiguous
        np.testing.assert_array_equal(got.sum(axis=0), golden.gemm_scaled(
            a, b, ta, False, re, ce).sum(axis=0))
        k_exp = np.repeat([3, -2], [k // 2, k - k // 2])
        got = dev.gemm(a, b, transpose_a=ta, row_exp=re, col_exp=ce, k_exp=k_exp)
        assert dev.stats["transposed"]
        np.testing.assert_array_equal(got, golden.gemm_scaled(a, b, ta, False, re, ce, k_exp))
        kept = dev.gemm(a, b, transpose_a=ta, out="int32", as_tensor=True)
        assert not dev.stats["transposed"] and kept.shape == (m, n)
        np.testing.assert_array_equal(kept.numpy(), golden.gemm(a, b, ta, False))
        kept.free()
    _check_port_kept(dev)


def test_the_harness_names_every_port_of_the_widest_build():
    """The native harness reaches every AXI bus of the build with the most ports (six write,
    four read) by Verilator's spelling of its ports (``mem_w5___05Fwdata``): a name left as
    written (``mem_w5__``) fails the model's C++ build after the minutes Verilator takes."""
    import re

    from firmware.spec import regmap
    from rtl.accelerator import Accelerator
    from sim.native import harness_source

    text = harness_source()
    acc = Accelerator(rows=8, cols=8, depth=512, data_width=64,
                      write_ports=max(regmap.WRITE_PORTS), read_ports=4)
    buses = [name for name in acc.signature.members if name.startswith("mem_")]
    assert len(buses) == 1 + 1 + 5 + 3
    for bus in buses:
        assert f"{bus}___05F" in text, bus
    assert not re.search(r"\bmem_[rw]\d*__(?!_05F)", text)


def test_narrow_operands_are_stored_and_read_packed():
    """An int8 matrix of rows shorter than a bus word is stored packed (its stride its row
    bytes) and read as one run of words, not a word a row: on a 16-byte bus a 256 x 3 B
    (k-major) takes 48 words a pass instead of 256, a 40 x 5 A (lane runs) 13 instead of
    40. Bit-exact behind a port that pauses; the RTL reads the words the performance model
    counts (``read_words``), each narrow operand's packed."""
    from firmware.runtime.perfmodel import predict

    dev = _device({"preset": "zynq7-hp", "pause": 0.2})
    port = dev.sim.port
    rng = np.random.default_rng(7)
    for m, n, k, ta, tb in ((16, 3, 256, False, False), (40, 16, 5, False, False),
                            (5, 16, 64, True, False), (16, 7, 64, False, True),
                            (9, 2, 3, True, True)):
        a = rng.integers(-128, 128, (k, m) if ta else (m, k), dtype=np.int8)
        b = rng.integers(-128, 128, (n, k) if tb else (k, n), dtype=np.int8)
        da, db = dev.tensor(a), dev.tensor(b)
        for x, t in ((a, da), (b, db)):
            assert t.stride == (x.shape[1] if x.shape[1] < 16 else -(-x.shape[1] // 16) * 16)
        dev.sim.clear_counters()
        got = dev.gemm(da, db, transpose_a=ta, transpose_b=tb, out="int32", block=2)
        np.testing.assert_array_equal(got, golden.gemm(a, b, ta, tb))
        assert not dev.stats["transposed"]
        model = predict(m, n, k, ta, tb, rows=8, cols=8, data_width=128, block=2,
                        depth=dev.driver.info.depth, port=port)
        assert dev.sim.counters["read_beats"] == model["read_words"], (m, n, k, ta, tb)
        _check_port_kept(dev)
        da.free()
        db.free()


@pytest.mark.slow
def test_a_board_build_longer_than_its_port_is_refused(monkeypatch, tmp_path):
    """The pynq backend reads the bitstream's burst length from ``CONFIG_DMA`` and refuses a
    build whose bursts are longer than the board's port takes, naming both lengths, before any
    GEMM runs."""
    from firmware.runtime import pynq_backend
    from firmware.spec import ports
    from sim.native.pynq_sim import SimBoard, write_bitstream_dir

    monkeypatch.setattr(pynq_backend, "OVERLAY_DIR", tmp_path / "no-overlays")
    monkeypatch.setattr(pynq_backend, "_REPO", tmp_path / "repo")
    monkeypatch.chdir(tmp_path)
    SimBoard("pynq-z1").install(monkeypatch)
    bit = write_bitstream_dir(tmp_path / "overlay", "pynq-z1")
    dev = Device("pynq", board="pynq-z1", bitfile=bit)
    assert dev.dma_burst == dev.driver.info.burst_beats == 16
    monkeypatch.setitem(ports.BOARD_PORTS, "pynq-z1", {"max_burst": 4})
    with pytest.raises(ValueError, match="burst_beats 16 is longer than port .*max_burst 4"):
        Device("pynq", board="pynq-z1", bitfile=bit)
