"""cocotb testbenches of the DMA masters against the hostile AXI memory (sim.testbenches.mem).

Each data test runs under several memory ports (:data:`PORTS`: ideal; 8 bursts in flight,
latency 40, bursts of at most 16 beats; 2 in flight with write data before its address;
a random write order with every channel paused 30 % of cycles), with the stream side stalling
at random; the data must be bit-exact, the masters idle and error-free afterwards, and the
memory's checker must have found no AXI violation. Accesses to ``BAD`` answer SLVERR. Which
tests run is chosen by ``COCOTB_TEST_FILTER`` (reader or writer Verilog).
"""

import os
import random

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, ReadOnly, RisingEdge, SimTimeoutError, with_timeout

from sim.testbenches.mem import AxiMemory, port_knobs
from sim.testbenches.streams import receive, send

BAD = range(0xF000, 0x10000)
#: The memory ports every data test runs under (keys of :data:`sim.testbenches.mem.PRESETS`);
#: ``DMA_PORTS`` (``;``-separated preset names or JSON knobs) replaces them.
DEFAULT_PORTS = ("ideal", "deep", "narrow-w-first", "random-pause")
PORTS = tuple(os.environ.get("DMA_PORTS", ";".join(DEFAULT_PORTS)).split(";"))
PARAMS = [cocotb.Param(p, p.replace("-", "_") if p in DEFAULT_PORTS else f"custom{i}")
          for i, p in enumerate(PORTS)]
#: Longest a test may take to move its data (far above the slowest port's need).
HANG_US = 400


async def _start(dut, seed, port, read=None, write=None):
    """Clock, reset, and the memory on the ``bus__`` port."""
    cocotb.start_soon(Clock(dut.clk, 10, unit="ns").start())
    dut.cmd__valid.value = 0
    dut.abort.value = 0
    dut.rst.value = 1
    mem = AxiMemory(dut, dut.clk, dut.rst, read=read, write=write, size=0x10000, error=BAD,
                    seed=seed, **port_knobs(port))
    await ClockCycles(dut.clk, 3)
    dut.rst.value = 0
    await ClockCycles(dut.clk, 2)
    return mem


async def setup(dut, seed, port="random-pause"):
    dut.o_stream__ready.value = 0
    return await _start(dut, seed, port, read="bus__")


async def setup_writer(dut, seed, port="random-pause"):
    dut.i_stream__valid.value = 0
    return await _start(dut, seed, port, write="bus__")


async def within(mem, coro, what):
    """Await ``coro``; fail with the memory's state if it takes longer than ``HANG_US``."""
    try:
        return await with_timeout(coro, HANG_US, "us")
    except SimTimeoutError:
        raise AssertionError(f"hang: {what} not done after {HANG_US} us; memory: "
                             f"{mem.status()}") from None


async def finish(dut, mem):
    """Let the bus drain, then require an idle, error-free master and no AXI violation."""
    await ClockCycles(dut.clk, 20)
    assert not mem.finish(), f"AXI violations: {mem.violations}"
    dut._log.info("memory: %d reads, %d writes, %s", mem.reads, mem.writes, mem.stats)
    limit = mem.outstanding_reads or 1 << 30
    assert mem.stats["reads_in_flight"] <= limit
    limit = mem.outstanding_writes or 1 << 30
    assert mem.stats["writes_in_flight"] <= limit
    if mem.write_order == "w-first":
        assert mem.stats["aw_after_w"] == mem.writes, "an AW was taken before its data"
    assert str(dut.busy.value) == "0"
    assert str(dut.error.value) == "0"


def send_commands(dut, commands, rng):
    shift = int(os.environ["DMA_ADDR_WIDTH"])
    return send(dut, "cmd", [addr | (beats << shift) for addr, beats in commands], rng, 0.3)


async def receive_words(dut, count, rng, width):
    words = await receive(dut, "o_stream", count, rng, 0.3)
    return [(v & ((1 << width) - 1), v >> width) for v in words]


@cocotb.test(timeout_time=2, timeout_unit="ms")
@cocotb.parametrize(port=PARAMS)
async def random_reads(dut, port):
    width = int(os.environ["DMA_DATA_WIDTH"])
    bpb = width // 8
    seed = int(os.environ.get("DMA_SEED", "1"))
    mem = await setup(dut, seed, port)
    rng = random.Random(seed)
    mem.write(0, bytes(rng.randrange(256) for _ in range(0xF000)))
    commands = []
    for _ in range(12):
        beats = rng.choice([1, 2, 7, 16, 17, 40, 100])
        start = rng.choice([0, 0x1000 - bpb, 0x2000 - 3 * bpb, rng.randrange(0, 0xE000)])
        start -= start % bpb
        commands.append((start, beats))
    cocotb.start_soon(send_commands(dut, commands, random.Random(seed + 7)))
    total = sum(b for _, b in commands)
    got = await within(mem, receive_words(dut, total, random.Random(seed + 9), width),
                       f"{total} read beats")
    assert not mem.violations, f"AXI violations: {mem.violations}"
    i = 0
    for addr, beats in commands:
        for n in range(beats):
            want = int.from_bytes(mem.read(addr + n * bpb, bpb), "little")
            data, last = got[i]
            assert data == want, f"command @{addr:#x} beat {n}: {data:#x} != {want:#x}"
            assert last == (n == beats - 1), f"command @{addr:#x} beat {n}: last={last}"
            i += 1
    await finish(dut, mem)
    assert str(dut.o_stream__valid.value) == "0", "extra beats"


@cocotb.test(timeout_time=1, timeout_unit="ms")
async def bus_error_is_reported_and_does_not_hang(dut):
    width = int(os.environ["DMA_DATA_WIDTH"])
    mem = await setup(dut, 3)
    commands = [(BAD.start - 2 * (width // 8), 5), (0, 3)]
    cocotb.start_soon(send_commands(dut, commands, random.Random(4)))
    got = await within(mem, receive_words(dut, 8, random.Random(5), width), "8 read beats")
    assert [last for _, last in got] == [0, 0, 0, 0, 1, 0, 0, 1]
    assert str(dut.error.value) == "1"
    await ClockCycles(dut.clk, 20)
    assert not mem.finish(), f"AXI violations: {mem.violations}"


def send_words(dut, words, rng):
    return send(dut, "i_stream", words, rng, 0.3)


async def count_done(dut, n):
    seen = 0
    while seen < n:
        await RisingEdge(dut.clk)
        await ReadOnly()
        seen += str(dut.done.value) == "1"


@cocotb.test(timeout_time=2, timeout_unit="ms")
@cocotb.parametrize(port=PARAMS)
async def random_writes(dut, port):
    width = int(os.environ["DMA_DATA_WIDTH"])
    bpb = width // 8
    seed = int(os.environ.get("DMA_SEED", "1"))
    mem = await setup_writer(dut, seed, port)
    rng = random.Random(seed)
    commands, words, cursor = [], [], 0
    for _ in range(10):
        beats = rng.choice([1, 3, 16, 17, 40])
        start = rng.choice([0x1000 - bpb, 0x3000 - 5 * bpb, cursor])
        start -= start % bpb
        cursor = (start + beats * bpb + 0x100) % 0xD000
        commands.append((start, beats))
    expected = bytearray(0x10000)
    for addr, beats in commands:
        for n in range(beats):
            word = rng.getrandbits(width)
            strb = rng.choice([(1 << bpb) - 1, rng.getrandbits(bpb)])
            words.append(word | strb << width)     # payload: data, then strobes above it
            for i, byte in enumerate(word.to_bytes(bpb, "little")):
                if strb >> i & 1:
                    expected[addr + n * bpb + i] = byte
    cocotb.start_soon(send_commands(dut, commands, random.Random(seed + 3)))
    cocotb.start_soon(send_words(dut, words, random.Random(seed + 4)))
    await within(mem, count_done(dut, len(commands)), f"{len(commands)} write commands")
    assert not mem.violations, f"AXI violations: {mem.violations}"
    assert mem.read(0, 0xF000) == bytes(expected[:0xF000])
    await finish(dut, mem)


@cocotb.test(timeout_time=1, timeout_unit="ms")
async def write_error_is_reported(dut):
    width = int(os.environ["DMA_DATA_WIDTH"])
    mem = await setup_writer(dut, 5)
    commands = [(BAD.start - width // 8, 3), (0x100, 2)]
    cocotb.start_soon(send_commands(dut, commands, random.Random(6)))
    strobes = ((1 << width // 8) - 1) << width
    cocotb.start_soon(send_words(dut, [w | strobes for w in range(1, 6)], random.Random(7)))
    await within(mem, count_done(dut, 2), "2 write commands")
    assert str(dut.error.value) == "1"
    await ClockCycles(dut.clk, 20)
    assert not mem.finish(), f"AXI violations: {mem.violations}"
