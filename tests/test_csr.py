"""The register map and its AXI4-Lite register block."""

import os
from pathlib import Path

import pytest

from firmware import regmap
from rtl.csr import RegisterBlock
from rtl.export import generate_verilog
from sim.cocotb_runner import available, run_cocotb

ROOT = Path(__file__).resolve().parent.parent


def test_readme_register_table_is_generated_from_the_map():
    assert regmap.markdown_table() in (ROOT / "README.md").read_text()


def test_pack_and_field_value():
    word = regmap.pack("DESC_FLAGS", TRANSPOSE_B=1, ROW_EXP=-3, COL_EXP=127)
    assert regmap.field_value("DESC_FLAGS", "TRANSPOSE_B", word) == 1
    assert regmap.field_value("DESC_FLAGS", "ROW_EXP", word) == 0xFD
    assert regmap.field_value("DESC_FLAGS", "COL_EXP", word) == 127
    with pytest.raises(ValueError, match="ROWS"):
        regmap.pack("CONFIG_ARRAY", ROWS=1 << 16)
    with pytest.raises(KeyError, match="NOPE"):
        regmap.offset("NOPE")


def test_error_codes_have_meanings():
    for code in regmap.ErrorCode:
        assert code.meaning


def test_addr_width_must_cover_the_map():
    with pytest.raises(ValueError, match="addr_width"):
        RegisterBlock(addr_width=4)


@pytest.mark.parametrize("simulator", ["icarus", "verilator"])
def test_register_block_with_axi_lite_master(simulator):
    if not available(simulator):
        pytest.fail(f"{simulator} is not installed: run scripts/bootstrap.sh")
    build = ROOT / "build" / "cocotb"
    verilog = generate_verilog("csr", build / "rtl", name="csr_block", addr_width=12)
    env = {"PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    tests, failed = run_cocotb(simulator, verilog, "csr_block", "sim.cocotb_csr",
                               build / f"{simulator}_csr", env)
    assert tests == 3 and failed == 0, f"{failed} of {tests} cocotb tests failed"
