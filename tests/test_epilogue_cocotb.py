"""The generated TileQuantizer and ReluMask Verilog under cocotb (sim.testbenches.epilogue), on
Icarus and on Verilator, against sim.models.bfp."""

import pytest

from rtl.epilogue import ReluMask, TileQuantizer
from sim.testbenches.runner import run_component


def run_epilogue(simulator, name, component, test, **env):
    tests, failed = run_component(simulator, component, name, "sim.testbenches.epilogue", test,
                                  **env)
    assert tests == 1 and failed == 0, f"{failed} of {tests} cocotb tests failed"


# cols=16: a block's rows span two beats (segments); cols=32: one block a beat; cols=64: two
# blocks a beat (one nonfinite flag for both).
@pytest.mark.parametrize("simulator,cols,shapes", [
    ("icarus", 16, "45x70,32x32,7x5"),
    ("icarus", 32, "40x33,9x64"),
    ("icarus", 64, "40x100,31x97"),
    ("verilator", 16, "45x70,32x32,7x5"),
])
def test_tile_quantizer(simulator, cols, shapes):
    run_epilogue(simulator, f"tile_quantizer_c{cols}", TileQuantizer(cols), "quantizer_matrices",
                 EPI_COLS=cols, EPI_BLOCK=32, EPI_SEED=cols, EPI_SHAPES=shapes, EPI_STALL=0.3)


@pytest.mark.slow
@pytest.mark.parametrize("simulator,cols,shapes", [
    ("icarus", 64, "100x150,64x64,31x97"),
    ("verilator", 32, "100x150,64x64,31x97"),
    ("verilator", 64, "100x150,64x64,31x97"),
])
def test_tile_quantizer_long(simulator, cols, shapes):
    run_epilogue(simulator, f"tile_quantizer_c{cols}", TileQuantizer(cols), "quantizer_matrices",
                 EPI_COLS=cols, EPI_BLOCK=32, EPI_SEED=cols + 1, EPI_SHAPES=shapes,
                 EPI_STALL=0.5, EPI_TIMEOUT_US=50000)


@pytest.mark.parametrize("simulator", ["icarus", "verilator"])
def test_relu_mask(simulator):
    run_epilogue(simulator, "relu_mask_16", ReluMask(16), "relu_vectors",
                 EPI_COLS=16, EPI_SEED=4, EPI_BEATS=300, EPI_STALL=0.3)
