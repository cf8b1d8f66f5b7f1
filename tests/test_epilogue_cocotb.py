"""The generated TileQuantizer and ReluMask Verilog under cocotb (sim.testbenches.epilogue), on
Icarus and on Verilator, against sim.models.bfp."""

import os
from pathlib import Path

import pytest

from rtl.epilogue import ReluMask, TileQuantizer
from rtl.export import to_verilog
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


def run_epilogue(simulator, name, component, test, **env):
    if not available(simulator):
        pytest.fail(f"{simulator} is not installed: run scripts/bootstrap.sh")
    verilog = write_verilog(component, name)
    env = {**{k: str(v) for k, v in env.items()}, "COCOTB_TEST_FILTER": test,
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    tests, failed = run_cocotb(simulator, verilog, name, "sim.testbenches.epilogue",
                               BUILD / f"{simulator}_{name}", env)
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
