"""The register map and its AXI4-Lite register block."""

import os
from pathlib import Path

import pytest
from amaranth.sim import Simulator

from firmware.spec import regmap
from rtl.csr import RegisterBlock
from rtl.export import generate_verilog
from sim.testbenches.runner import available, run_cocotb

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
    tests, failed = run_cocotb(simulator, verilog, "csr_block", "sim.testbenches.csr",
                               build / f"{simulator}_csr", env)
    assert tests == 3 and failed == 0, f"{failed} of {tests} cocotb tests failed"


def _axi_write(bus, addr, data, strb):
    """An Amaranth-simulator AXI4-Lite write: AW and W together, then B accepted."""
    async def write(ctx):
        ctx.set(bus.awaddr, addr)
        ctx.set(bus.wdata, data)
        ctx.set(bus.wstrb, strb)
        ctx.set(bus.awvalid, 1)
        ctx.set(bus.wvalid, 1)
        ctx.set(bus.bready, 1)
        await ctx.tick().until(bus.awready)
        ctx.set(bus.awvalid, 0)
        ctx.set(bus.wvalid, 0)
        await ctx.tick().until(bus.bvalid)
        ctx.set(bus.bready, 0)
    return write


def test_w1p_and_w1c_honour_byte_strobes():
    """Bytes written with their strobe low neither pulse a w1p bit nor clear a w1c bit."""
    dut = RegisterBlock()
    pulses = []

    async def testbench(ctx):
        ctx.set(dut.irq_status_set, 0b11)
        await ctx.tick()
        ctx.set(dut.irq_status_set, 0)
        # strobe only on byte 1: the 1s in byte 0 are not written
        await _axi_write(dut.bus, regmap.offset("IRQ_STATUS"), 0xFFFF_FFFF, 0b0010)(ctx)
        await ctx.tick()
        assert ctx.get(dut.irq_status) == 0b11
        await _axi_write(dut.bus, regmap.offset("IRQ_STATUS"), 0x0000_0001, 0b0001)(ctx)
        await ctx.tick()
        assert ctx.get(dut.irq_status) == 0b10
        await _axi_write(dut.bus, regmap.offset("CTRL"), 0x0000_0007, 0b1110)(ctx)
        await _axi_write(dut.bus, regmap.offset("CTRL"), 0x0000_0102, 0b0001)(ctx)
        await ctx.tick().repeat(2)

    async def watch(ctx):
        async for ctrl, in ctx.changed(dut.ctrl):
            if ctrl:
                pulses.append(ctrl)

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(testbench)
    sim.add_process(watch)
    sim.run()
    assert pulses == [0b010]
