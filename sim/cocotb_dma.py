"""cocotb testbenches of the DMA masters against cocotbext-axi's AXI RAM model.

The RAM pauses every channel at random and the stream side stalls at random; the RAM model
itself asserts that no burst crosses a 4 KB boundary (and, for writes, that ``wlast`` is
right). Accesses to ``BAD`` answer SLVERR. Which tests run is chosen by ``COCOTB_TEST_FILTER``
(reader or writer Verilog).
"""

import logging
import os
import random

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, ReadOnly, RisingEdge
from cocotbext.axi import AxiRamRead, AxiRamWrite, AxiReadBus, AxiWriteBus

from sim.cocotb_streams import receive, send

BAD = range(0xF000, 0x10000)


class FaultyRam(AxiRamRead):
    async def _read(self, address, length):
        if address in BAD:
            raise OSError("injected bus error")
        return await super()._read(address, length)


def pauses(seed, p):
    rng = random.Random(seed)
    while True:
        yield rng.random() < p


async def _start(dut, bus, ram_class, seed, level):
    """Clock, reset, and a RAM model on ``bus`` with random pauses on every channel."""
    cocotb.start_soon(Clock(dut.clk, 10, unit="ns").start())
    dut.cmd__valid.value = 0
    dut.abort.value = 0
    dut.rst.value = 1
    for channel in vars(bus).values():   # absent optional signals (IDs, user...) are None
        for name in [n for n, v in vars(channel).items() if v is None]:
            delattr(channel, name)
    ram = ram_class(bus, dut.clk, dut.rst, size=0x10000)
    ram.log.setLevel(level)
    channels = [c for c in ("ar", "r", "aw", "w", "b") if hasattr(ram, f"{c}_channel")]
    for i, c in enumerate(channels):
        getattr(ram, f"{c}_channel").set_pause_generator(pauses(seed + i, 0.3))
    await ClockCycles(dut.clk, 3)
    dut.rst.value = 0
    await ClockCycles(dut.clk, 2)
    return ram


async def setup(dut, seed):
    dut.o_stream__ready.value = 0
    return await _start(dut, AxiReadBus.from_prefix(dut, "bus_"), FaultyRam, seed,
                        logging.WARNING)


def send_commands(dut, commands, rng):
    shift = int(os.environ["DMA_ADDR_WIDTH"])
    return send(dut, "cmd", [addr | (beats << shift) for addr, beats in commands], rng, 0.3)


async def receive_words(dut, count, rng, width):
    words = await receive(dut, "o_stream", count, rng, 0.3)
    return [(v & ((1 << width) - 1), v >> width) for v in words]


@cocotb.test(timeout_time=2, timeout_unit="ms")
async def random_reads(dut):
    width = int(os.environ["DMA_DATA_WIDTH"])
    bpb = width // 8
    seed = int(os.environ.get("DMA_SEED", "1"))
    ram = await setup(dut, seed)
    rng = random.Random(seed)
    ram.write(0, bytes(rng.randrange(256) for _ in range(0xF000)))
    commands = []
    for _ in range(12):
        beats = rng.choice([1, 2, 7, 16, 17, 40, 100])
        start = rng.choice([0, 0x1000 - bpb, 0x2000 - 3 * bpb, rng.randrange(0, 0xE000)])
        start -= start % bpb
        commands.append((start, beats))
    cocotb.start_soon(send_commands(dut, commands, random.Random(seed + 7)))
    total = sum(b for _, b in commands)
    got = await receive_words(dut, total, random.Random(seed + 9), width)
    i = 0
    for addr, beats in commands:
        for n in range(beats):
            want = int.from_bytes(ram.read(addr + n * bpb, bpb), "little")
            data, last = got[i]
            assert data == want, f"command @{addr:#x} beat {n}: {data:#x} != {want:#x}"
            assert last == (n == beats - 1), f"command @{addr:#x} beat {n}: last={last}"
            i += 1
    await ClockCycles(dut.clk, 20)
    assert str(dut.o_stream__valid.value) == "0", "extra beats"
    assert str(dut.busy.value) == "0"
    assert str(dut.error.value) == "0"


@cocotb.test(timeout_time=1, timeout_unit="ms")
async def bus_error_is_reported_and_does_not_hang(dut):
    width = int(os.environ["DMA_DATA_WIDTH"])
    await setup(dut, 3)
    commands = [(BAD.start - 2 * (width // 8), 5), (0, 3)]
    cocotb.start_soon(send_commands(dut, commands, random.Random(4)))
    got = await receive_words(dut, 8, random.Random(5), width)
    assert [last for _, last in got] == [0, 0, 0, 0, 1, 0, 0, 1]
    assert str(dut.error.value) == "1"


class FaultyRamWrite(AxiRamWrite):
    async def _write(self, address, data):
        if address in BAD:
            raise OSError("injected bus error")
        return await super()._write(address, data)


async def setup_writer(dut, seed):
    dut.i_stream__valid.value = 0
    return await _start(dut, AxiWriteBus.from_prefix(dut, "bus_"), FaultyRamWrite, seed,
                        logging.ERROR)


def send_words(dut, words, rng):
    return send(dut, "i_stream", words, rng, 0.3)


async def count_done(dut, n):
    seen = 0
    while seen < n:
        await RisingEdge(dut.clk)
        await ReadOnly()
        seen += str(dut.done.value) == "1"


@cocotb.test(timeout_time=2, timeout_unit="ms")
async def random_writes(dut):
    width = int(os.environ["DMA_DATA_WIDTH"])
    bpb = width // 8
    seed = int(os.environ.get("DMA_SEED", "1"))
    ram = await setup_writer(dut, seed)
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
    await count_done(dut, len(commands))
    assert ram.read(0, 0xF000) == bytes(expected[:0xF000])
    await ClockCycles(dut.clk, 10)
    assert str(dut.busy.value) == "0"
    assert str(dut.error.value) == "0"


@cocotb.test(timeout_time=1, timeout_unit="ms")
async def write_error_is_reported(dut):
    width = int(os.environ["DMA_DATA_WIDTH"])
    await setup_writer(dut, 5)
    commands = [(BAD.start - width // 8, 3), (0x100, 2)]
    cocotb.start_soon(send_commands(dut, commands, random.Random(6)))
    strobes = ((1 << width // 8) - 1) << width
    cocotb.start_soon(send_words(dut, [w | strobes for w in range(1, 6)], random.Random(7)))
    await count_done(dut, 2)
    assert str(dut.error.value) == "1"
