"""cocotb testbench of the generated register block with cocotbext-axi's AxiLiteMaster."""

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, ReadOnly, RisingEdge
from cocotbext.axi import AxiLiteBus, AxiLiteMaster

from firmware.spec import regmap
from rtl.csr import RESP_OKAY, RESP_SLVERR


async def setup(dut):
    cocotb.start_soon(Clock(dut.clk, 10, unit="ns").start())
    for reg in regmap.REGISTERS:
        name = reg.name.lower()
        if reg.access == "ro":
            getattr(dut, name).value = 0
        if reg.access == "w1c":
            getattr(dut, f"{name}_set").value = 0
    dut.id.value = regmap.MAGIC
    dut.version.value = regmap.VERSION
    dut.rst.value = 1
    await ClockCycles(dut.clk, 3)
    dut.rst.value = 0
    return AxiLiteMaster(AxiLiteBus.from_prefix(dut, "bus_"), dut.clk, dut.rst)


@cocotb.test()
async def identification_and_readback(dut):
    axi = await setup(dut)
    assert await axi.read_dword(regmap.offset("ID")) == regmap.MAGIC
    assert await axi.read_dword(regmap.offset("VERSION")) == regmap.VERSION
    # rw registers hold what was written, each independently
    rw = [r for r in regmap.REGISTERS if r.access == "rw"]
    for i, reg in enumerate(rw):
        await axi.write_dword(reg.offset, 0x1000_0001 * (i + 1) & 0xFFFFFFFF)
    for i, reg in enumerate(rw):
        assert await axi.read_dword(reg.offset) == 0x1000_0001 * (i + 1) & 0xFFFFFFFF, reg.name
        assert int(getattr(dut, reg.name.lower()).value) == 0x1000_0001 * (i + 1) & 0xFFFFFFFF
    # byte strobes
    off = regmap.offset("DESC_A_STRIDE")
    await axi.write_dword(off, 0x11223344)
    await axi.write(off + 2, b"\xAA")
    assert await axi.read_dword(off) == 0x11AA3344


@cocotb.test()
async def pulses_and_write_one_to_clear(dut):
    axi = await setup(dut)
    seen = []

    async def watch():
        while True:
            await RisingEdge(dut.clk)
            await ReadOnly()
            v = int(dut.ctrl.value)
            if v:
                seen.append(v)
    cocotb.start_soon(watch())
    await axi.write_dword(regmap.offset("CTRL"), regmap.pack("CTRL", ENQUEUE=1, SOFT_RESET=1))
    await ClockCycles(dut.clk, 5)
    assert seen == [0b11], f"CTRL pulses seen: {seen}"
    assert await axi.read_dword(regmap.offset("CTRL")) == 0

    irq = regmap.offset("IRQ_STATUS")
    await RisingEdge(dut.clk)
    dut.irq_status_set.value = regmap.pack("IRQ_STATUS", DONE=1, ERROR=1)
    await RisingEdge(dut.clk)
    dut.irq_status_set.value = 0
    assert await axi.read_dword(irq) == 0b11
    await axi.write_dword(irq, regmap.pack("IRQ_STATUS", DONE=1))
    assert await axi.read_dword(irq) == 0b10
    await axi.write_dword(irq, 0b10)
    assert await axi.read_dword(irq) == 0


@cocotb.test()
async def errors_and_latched_counters(dut):
    axi = await setup(dut)
    resp = await axi.read(0x1F0, 4)             # unmapped
    assert resp.resp == RESP_SLVERR
    resp = await axi.write(regmap.offset("STATUS"), b"\x01\x00\x00\x00")   # read-only
    assert resp.resp == RESP_SLVERR
    resp = await axi.write(regmap.offset("IRQ_ENABLE"), b"\x03\x00\x00\x00")
    assert resp.resp == RESP_OKAY

    dut.cycles_lo.value = 0xDEADBEEF
    dut.cycles_hi.value = 0x1
    await RisingEdge(dut.clk)
    assert await axi.read_dword(regmap.offset("CYCLES_LO")) == 0xDEADBEEF
    dut.cycles_hi.value = 0x2                    # the counter moved on after LO was read
    await RisingEdge(dut.clk)
    assert await axi.read_dword(regmap.offset("CYCLES_HI")) == 0x1
    dut.status.value = regmap.pack("STATUS", BUSY=1, ERROR_CODE=int(regmap.ErrorCode.READ_ERROR))
    await RisingEdge(dut.clk)
    word = await axi.read_dword(regmap.offset("STATUS"))
    assert regmap.field_value("STATUS", "ERROR_CODE", word) == regmap.ErrorCode.READ_ERROR
