"""The datapath's generated Verilog under cocotb, on Icarus and on Verilator."""

import os
from pathlib import Path

import pytest

from rtl.export import generate_verilog
from sim.testbenches.runner import available, run_cocotb, xilinx_cell_models

ROOT = Path(__file__).resolve().parent.parent
BUILD = ROOT / "build" / "cocotb"


# The largest two configurations, and the packed xc7 netlist with its DSP48E1 cell models,
# take minutes to verilate: on Verilator they run with `pytest -m slow` (Icarus runs every
# configuration by default).
_SLOW_ON_VERILATOR = {(8, 8, 20, 3, 1, False), (6, 3, 10, 5, 1, True), (5, 3, 10, 6, 2, True)}


@pytest.mark.parametrize("simulator,rows,cols,depth,seed,packing,primitive", [
    pytest.param(sim, *cfg, marks=[pytest.mark.slow] if sim == "verilator"
                 and cfg in _SLOW_ON_VERILATOR else [])
    for cfg in [(4, 4, 12, 1, 1, False), (2, 3, 7, 2, 1, False), (8, 8, 20, 3, 1, False),
                (5, 4, 12, 4, 2, False), (6, 3, 10, 5, 1, True), (5, 3, 10, 6, 2, True)]
    for sim in ("icarus", "verilator")])
def test_datapath(simulator, rows, cols, depth, seed, packing, primitive):
    # packing=2 simulates the two-MACs-per-DSP48E2 array with the slice's behavioural model;
    # primitive=True simulates the xc7 build netlist (LUT6/MUXF7/MUXF8 read-out multiplexers
    # and, packed, the pairs' DSP48E1 instances, as the Pynq-Z1 builds them) with Yosys'
    # models of those primitives.
    if not available(simulator):
        pytest.fail(f"{simulator} is not installed: run scripts/bootstrap.sh")
    name = f"gemm_datapath_{rows}x{cols}_d{depth}_p{packing}{'x' if primitive else ''}"
    extra = {"dsp_slice": "DSP48E1"} if primitive and packing == 2 else {}
    verilog = generate_verilog("datapath", BUILD / "rtl", name=name, rows=rows, cols=cols,
                               depth=depth, packing=packing, primitive=primitive, **extra)
    if primitive:
        verilog = [verilog, xilinx_cell_models()]
    env = {"DP_ROWS": str(rows), "DP_COLS": str(cols), "DP_DEPTH": str(depth),
           "DP_SEED": str(seed), "DP_TILES": "6", "DP_STALL": "0.3",
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    tests, failed = run_cocotb(simulator, verilog, name, "sim.testbenches.datapath",
                               BUILD / f"{simulator}_{name}", env)
    assert tests == 1 and failed == 0, f"{failed} of {tests} cocotb tests failed"
