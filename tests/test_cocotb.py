"""The datapath's generated Verilog under cocotb, on Icarus and on Verilator."""

import os
from pathlib import Path

import pytest

from rtl.export import generate_verilog
from sim.cocotb_runner import available, run_cocotb

ROOT = Path(__file__).resolve().parent.parent
BUILD = ROOT / "build" / "cocotb"


@pytest.mark.parametrize("simulator", ["icarus", "verilator"])
@pytest.mark.parametrize("rows,cols,depth,seed,packing", [
    (4, 4, 12, 1, 1), (2, 3, 7, 2, 1), (8, 8, 20, 3, 1), (5, 4, 12, 4, 2)])
def test_datapath(simulator, rows, cols, depth, seed, packing):
    # packing=2 simulates the two-MACs-per-DSP48E2 array with the slice's behavioural model.
    if not available(simulator):
        pytest.fail(f"{simulator} is not installed: run scripts/bootstrap.sh")
    name = f"gemm_datapath_{rows}x{cols}_d{depth}_p{packing}"
    verilog = generate_verilog("datapath", BUILD / "rtl", name=name,
                               rows=rows, cols=cols, depth=depth, packing=packing)
    env = {"DP_ROWS": str(rows), "DP_COLS": str(cols), "DP_DEPTH": str(depth),
           "DP_SEED": str(seed), "DP_TILES": "6", "DP_STALL": "0.3",
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    tests, failed = run_cocotb(simulator, verilog, name, "sim.cocotb_datapath",
                               BUILD / f"{simulator}_{name}", env)
    assert tests == 1 and failed == 0, f"{failed} of {tests} cocotb tests failed"
