"""The hostile AXI memory of the cocotb testbenches (:mod:`sim.testbenches.mem`) catches a broken
manager: a scripted one, through a shell module with nothing but input ports, on Icarus."""

import os
from pathlib import Path

import pytest

from sim.testbenches.mem import KNOBS, PRESETS, AxiMemory, port_knobs
from sim.testbenches.runner import available, run_cocotb

ROOT = Path(__file__).resolve().parent.parent
BUILD = ROOT / "build" / "cocotb"

#: (name, width) of every AXI signal of the shell, both directions, all inputs.
SIGNALS = [("araddr", 32), ("arlen", 8), ("arsize", 3), ("arburst", 2), ("arid", 1),
           ("arvalid", 1), ("arready", 1), ("rdata", 64), ("rresp", 2), ("rlast", 1),
           ("rid", 1), ("rvalid", 1), ("rready", 1), ("awaddr", 32), ("awlen", 8),
           ("awsize", 3), ("awburst", 2), ("awid", 1), ("awvalid", 1), ("awready", 1),
           ("wdata", 64), ("wstrb", 8), ("wlast", 1), ("wvalid", 1), ("wready", 1),
           ("bresp", 2), ("bid", 1), ("bvalid", 1), ("bready", 1)]


def shell_verilog(path: Path) -> Path:
    """A module whose ports, all inputs, the memory and the scripted manager both drive."""
    ports = ["input clk", "input rst"] + [
        f"input {f'[{w - 1}:0] ' if w > 1 else ''}bus__{name}" for name, w in SIGNALS]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("module axi_shell(\n  " + ",\n  ".join(ports) + "\n);\nendmodule\n")
    return path


def test_checker_catches_a_broken_manager():
    if not available("icarus"):
        pytest.fail("icarus is not installed: run scripts/bootstrap.sh")
    verilog = shell_verilog(BUILD / "rtl" / "axi_shell.v")
    env = {"PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    tests, failed = run_cocotb("icarus", verilog, "axi_shell", "sim.testbenches.mem_check",
                               BUILD / "icarus_axi_shell", env)
    assert tests == 8 and failed == 0, f"{failed} of {tests} cocotb tests failed"


@pytest.mark.parametrize("knobs,message", [
    ({"write_order": "b-first"}, "write_order must be one of"),
    ({"outstanding_reads": 0}, "outstanding_reads must be a positive integer or None, not 0"),
    ({"max_burst": 300}, "max_burst must be in 1..256, not 300"),
    ({"pause": 1.0}, r"pause must be in \[0, 1\), not 1.0")])
def test_bad_knobs(knobs, message):
    with pytest.raises(ValueError, match=message):
        AxiMemory(None, None, None, read="bus__", **knobs)


def test_port_knobs():
    assert port_knobs("zynq7-hp") == PRESETS["zynq7-hp"]
    assert port_knobs('{"pause": 0.5}') == {"pause": 0.5}
    for port in PRESETS:
        assert set(port_knobs(port)) <= set(KNOBS)
    with pytest.raises(ValueError, match="unknown knobs \\['latency'\\]"):
        port_knobs('{"latency": 3}')
    with pytest.raises(ValueError, match="port must be one of"):
        port_knobs("zynq9")
