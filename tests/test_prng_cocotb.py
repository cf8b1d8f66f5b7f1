"""The generated Threefry2x32 and RandomLanes Verilog under cocotb (sim.testbenches.prng), on
Icarus and on Verilator, against sim.models.prng."""

import os
from pathlib import Path

import pytest

from rtl.export import to_verilog
from rtl.prng import RandomLanes, Threefry2x32
from sim.testbenches.runner import available, run_cocotb

ROOT = Path(__file__).resolve().parent.parent
BUILD = ROOT / "build" / "cocotb"


def write_verilog(component, name: str) -> Path:
    """``<BUILD>/rtl/<name>.v``, rewritten only when the text changes (so that a simulator's
    build directory is reused)."""
    path = BUILD / "rtl" / f"{name}.v"
    text = to_verilog(component, name)
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.exists() or path.read_text() != text:
        path.write_text(text)
    return path


def run_prng(simulator, name, component, test, **env):
    if not available(simulator):
        pytest.fail(f"{simulator} is not installed: run scripts/bootstrap.sh")
    verilog = write_verilog(component, name)
    env = {**{k: str(v) for k, v in env.items()}, "COCOTB_TEST_FILTER": test,
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    tests, failed = run_cocotb(simulator, verilog, name, "sim.testbenches.prng",
                               BUILD / f"{simulator}_{name}", env)
    assert tests == 1 and failed == 0, f"{failed} of {tests} cocotb tests failed"


@pytest.mark.parametrize("simulator", ["icarus", "verilator"])
def test_threefry(simulator):
    run_prng(simulator, "threefry2x32", Threefry2x32(), "threefry_streams",
             PRNG_SEED=3, PRNG_BEATS=200, PRNG_STALL=0.3)


@pytest.mark.parametrize("simulator", ["icarus", "verilator"])
def test_random_lanes(simulator):
    run_prng(simulator, "random_lanes_8", RandomLanes(8), "random_lanes_streams",
             PRNG_LANES=8, PRNG_SEED=5, PRNG_BEATS=200, PRNG_STALL=0.3)


@pytest.mark.slow
@pytest.mark.parametrize("simulator", ["icarus", "verilator"])
def test_random_lanes_long(simulator):
    run_prng(simulator, "random_lanes_32", RandomLanes(32), "random_lanes_streams",
             PRNG_LANES=32, PRNG_SEED=11, PRNG_BEATS=3000, PRNG_STALL=0.5)
