"""The AXI4 DMA masters under cocotb against the hostile AXI memory, under several ports."""

import os
from pathlib import Path

import pytest

from rtl.dma import DmaReader, DmaWriter
from rtl.export import generate_verilog
from sim.testbenches.dma import PORTS
from sim.testbenches.runner import available, run_cocotb

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("kind", ["reader", "writer"])
@pytest.mark.parametrize("simulator,data_width,burst", [
    ("icarus", 128, 16), ("icarus", 64, 4), ("verilator", 512, 16)])
def test_dma(kind, simulator, data_width, burst):
    if not available(simulator):
        pytest.fail(f"{simulator} is not installed: run scripts/bootstrap.sh")
    build = ROOT / "build" / "cocotb"
    name = f"dma_{kind}_{data_width}_{burst}"
    verilog = generate_verilog(f"dma_{kind}", build / "rtl", name=name, data_width=data_width,
                               addr_width=32, burst_beats=burst, outstanding=3)
    env = {"PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
           "DMA_DATA_WIDTH": str(data_width), "DMA_ADDR_WIDTH": "32", "DMA_SEED": str(burst),
           "COCOTB_TEST_FILTER": "random_reads|bus_error" if kind == "reader" else
                                 "random_writes|write_error"}
    tests, failed = run_cocotb(simulator, verilog, name, "sim.testbenches.dma",
                               build / f"{simulator}_{name}", env)
    assert tests == len(PORTS) + 1 and failed == 0, f"{failed} of {tests} cocotb tests failed"


@pytest.mark.parametrize("kwargs,name", [
    ({"data_width": 100}, "data_width"), ({"addr_width": 48}, "addr_width"),
    ({"burst_beats": 300}, "burst_beats"), ({"outstanding": 0}, "outstanding")])
def test_bad_parameters(kwargs, name):
    for cls in (DmaReader, DmaWriter):
        with pytest.raises(ValueError, match=name):
            cls(**kwargs)


@pytest.mark.parametrize("data_width", [64, 128, 512])
@pytest.mark.parametrize("burst", [1, 3, 16, 17, 64, 256])
def test_burst_splitter(data_width, burst):
    """The next burst's length and last flag, against min(burst, words to the 4 KB page's
    end, words left), for every word of a page (the compare with a constant and the narrow
    negation that replace the page-wide subtraction), both sides of every limit."""
    from amaranth import Module, Signal
    from amaranth.sim import Simulator

    from rtl.dma import _burst_splitter
    shift = (data_width // 8).bit_length() - 1
    page = 4096 >> shift
    m = Module()
    addr, rem = Signal(32), Signal(24)
    n, last = _burst_splitter(m, addr, rem, burst, shift)
    checked = []

    async def bench(ctx):
        for w in range(page):
            for r in {1, 2, burst - 1, burst, burst + 1, page - w, page - w + 1, 70000} - {0}:
                ctx.set(addr, 0x7000 + (w << shift) + 1)   # low bits ignored
                ctx.set(rem, r)
                bound = min(burst, page - w)
                assert (ctx.get(n), ctx.get(last)) == (min(bound, r), r <= bound), (w, r)
                checked.append(r)
    sim = Simulator(m)
    sim.add_testbench(bench)
    sim.run()
    assert len(checked) >= page


@pytest.mark.parametrize("outstanding", [1, 3])
def test_writer_busy_until_done(outstanding):
    """``busy`` stays high from a command's handshake until its last response (``done``),
    on every cycle, for one-beat and multi-burst commands back to back: the formed bursts
    wait a cycle in registers before their queues, and ``busy`` must cover that cycle."""
    from amaranth.sim import Simulator

    dut = DmaWriter(64, 32, burst_beats=4, outstanding=outstanding)
    log = []

    async def memory(ctx):            # takes AW and W at once, answers B a cycle after WLAST
        ctx.set(dut.bus.awready, 1)
        ctx.set(dut.bus.wready, 1)
        pending = 0
        async for _, _, wvalid, wlast, bready in ctx.tick().sample(
                dut.bus.wvalid, dut.bus.wlast, dut.bus.bready):
            if pending and bready:
                pending -= 1
            ctx.set(dut.bus.bvalid, pending > 0)
            if wvalid and wlast:
                pending += 1
                ctx.set(dut.bus.bvalid, 1)

    async def bench(ctx):
        for beats in (1, 1, 9, 1, 5):
            ctx.set(dut.cmd.payload.addr, 0x1000)
            ctx.set(dut.cmd.payload.beats, beats)
            ctx.set(dut.cmd.valid, 1)
            ctx.set(dut.i_stream.valid, 1)
            ctx.set(dut.i_stream.payload.strb, 0xFF)
            await ctx.tick().until(dut.cmd.ready)
            ctx.set(dut.cmd.valid, 0)
            for _ in range(200):
                await ctx.tick()
                if ctx.get(dut.done):
                    break
                log.append(ctx.get(dut.busy))
            else:
                raise AssertionError(f"no done for a command of {beats} beats")
            ctx.set(dut.i_stream.valid, 0)

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_process(memory)
    sim.add_testbench(bench)
    sim.run()
    assert len(log) > 20 and all(log), log
