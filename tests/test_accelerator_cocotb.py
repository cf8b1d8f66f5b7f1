"""The whole accelerator's generated Verilog under cocotb (AxiLiteMaster + the hostile AXI memory
of :mod:`sim.testbenches.mem`), on Icarus and on Verilator."""

import os
from pathlib import Path

import pytest

from rtl.export import generate_verilog
from sim.testbenches.runner import available, run_cocotb

ROOT = Path(__file__).resolve().parent.parent
BUILD = ROOT / "build" / "cocotb"


@pytest.mark.parametrize("simulator,rows,cols,width,seed,ports,write_ports,read_ports", [
    ("icarus", 4, 4, 64, 1, "zynq7-hp;narrow-w-first", 1, 1),
    ("verilator", 4, 4, 64, 1, "zynq7-hp;narrow-w-first", 1, 1),
    ("icarus", 2, 8, 128, 2, "random-pause", 1, 1),
    ("icarus", 4, 4, 64, 3, "zynq7-hp;narrow-w-first", 2, 1),
    ("icarus", 4, 4, 64, 4, "random-pause", 4, 1),
    ("icarus", 4, 8, 64, 5, "zynq7-hp;narrow-w-first", 2, 2),
    ("icarus", 4, 16, 64, 6, "random-pause", 2, 3),
    ("icarus", 4, 16, 64, 7, "zynq7-hp;narrow-w-first", 2, 5),
    # three write ports over four rows (two, one and one of each tile's)
    pytest.param("icarus", 4, 16, 64, 8, "deep;random-pause", 3, 4, marks=pytest.mark.slow),
    # minutes to verilate; `pytest -m slow`
    pytest.param("verilator", 2, 8, 128, 2, "random-pause", 1, 1, marks=pytest.mark.slow),
    pytest.param("verilator", 4, 4, 64, 3, "random-pause", 2, 1, marks=pytest.mark.slow),
    pytest.param("verilator", 4, 8, 64, 5, "random-pause", 2, 2, marks=pytest.mark.slow)])
def test_accelerator(simulator, rows, cols, width, seed, ports, write_ports, read_ports):
    if not available(simulator):
        pytest.fail(f"{simulator} is not installed: run scripts/bootstrap.sh")
    name = (f"accel_{rows}x{cols}_{width}" + (f"_{write_ports}w" if write_ports > 1 else "")
            + (f"_{read_ports}r" if read_ports > 1 else ""))
    # small buffers (depth 16, 2x2 tile blocks) so that K chunks and block changes happen
    verilog = generate_verilog("accelerator", BUILD / "rtl", name=name, rows=rows, cols=cols,
                               depth=16, data_width=width, block=2, outstanding=8,
                               write_ports=write_ports, read_ports=read_ports)
    env = {"ACC_WIDTH": str(width), "ACC_SEED": str(seed), "ACC_PORTS": ports,
           "ACC_WRITE_PORTS": str(write_ports), "ACC_READ_PORTS": str(read_ports),
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    tests, failed = run_cocotb(simulator, verilog, name, "sim.testbenches.accel",
                               BUILD / f"{simulator}_{name}", env)
    want = len(ports.split(";"))
    assert tests == want and failed == 0, f"{failed} of {tests} cocotb tests failed"
