"""The generated Threefry2x32 and RandomLanes Verilog under cocotb (sim.testbenches.prng), on
Icarus and on Verilator, against sim.models.prng."""


import pytest

from rtl.prng import RandomLanes, Threefry2x32
from sim.testbenches.runner import run_component


def run_prng(simulator, name, component, test, **env):
    tests, failed = run_component(simulator, component, name, "sim.testbenches.prng", test, **env)
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
