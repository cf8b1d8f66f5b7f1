"""cocotb tests of :mod:`sim.testbenches.mem` itself: its checker catches a broken manager.

The DUT is a shell whose ports are all inputs (``tests/test_cocotb_mem.py`` writes it), so the
memory drives its outputs into it and a scripted manager here drives the rest; each test breaks
one AXI rule, on purpose, and requires the memory to report it (and no other). The manager
writes its signals right after a rising edge and reads the memory's in ``ReadOnly``, like the
flip-flops of a real one.
"""

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, ReadOnly, RisingEdge

from sim.testbenches.mem import SLVERR, AxiMemory

MANAGER = {"arvalid": 0, "rready": 0, "awvalid": 0, "wvalid": 0, "bready": 0, "arsize": 3,
           "awsize": 3, "arburst": 1, "awburst": 1, "arlen": 0, "awlen": 0, "wlast": 0,
           "wstrb": 0xFF, "arid": 0, "awid": 0, "araddr": 0, "awaddr": 0, "wdata": 0}


async def setup(dut, **knobs):
    """Clock, reset, idle manager outputs and a 64-bit memory with ``knobs``."""
    cocotb.start_soon(Clock(dut.clk, 10, unit="ns").start())
    dut.rst.value = 1
    for name, value in MANAGER.items():
        getattr(dut, f"bus__{name}").value = value
    mem = AxiMemory(dut, dut.clk, dut.rst, read="bus__", write="bus__", size=0x10000,
                    **{"read_latency": 3, "write_latency": 3, **knobs})
    await ClockCycles(dut.clk, 3)
    dut.rst.value = 0
    await ClockCycles(dut.clk, 2)
    return mem


async def offer(dut, channel, payload, drop_after=None, change=None):
    """Offer one transfer on ``channel`` ("ar", "aw" or "w"); ``True`` once it is taken.

    ``drop_after``: lower VALID after that many cycles without READY (and return ``False``).
    ``change``: ``(cycles, payload)``, a payload put up after that many cycles without READY.
    """
    for name, value in payload.items():
        getattr(dut, f"bus__{channel}{name}").value = value
    valid = getattr(dut, f"bus__{channel}valid")
    ready = getattr(dut, f"bus__{channel}ready")
    valid.value = 1
    waited = 0
    while True:
        await ReadOnly()
        taken = str(ready.value) == "1"
        await RisingEdge(dut.clk)
        if taken:
            valid.value = 0
            return True
        waited += 1
        if waited == drop_after:
            valid.value = 0
            return False
        if change is not None and waited == change[0]:
            for name, value in change[1].items():
                getattr(dut, f"bus__{channel}{name}").value = value


async def take(dut, channel, count, fields):
    """Hold ``<channel>ready`` up and collect ``count`` transfers' ``fields``."""
    ready = getattr(dut, f"bus__{channel}ready")
    valid = getattr(dut, f"bus__{channel}valid")
    ready.value = 1
    got = []
    while len(got) < count:
        await ReadOnly()
        if str(valid.value) == "1":
            got.append(tuple(int(getattr(dut, f"bus__{channel}{f}").value) for f in fields))
        await RisingEdge(dut.clk)
    ready.value = 0
    return got


async def write_burst(dut, addr, words, last_on=None, awlen=None):
    """AW then W beats (WLAST on beat ``last_on``, default the last)."""
    last_on = len(words) if last_on is None else last_on
    await offer(dut, "aw", {"addr": addr, "len": len(words) - 1 if awlen is None else awlen})
    for n, word in enumerate(words, 1):
        await offer(dut, "w", {"data": word, "last": int(n == last_on)})
    dut.bus__wlast.value = 0


async def expect(dut, mem, *fragments):
    """The violations are exactly one per fragment, each containing it."""
    await ClockCycles(dut.clk, 2)      # the memory has seen the last handshakes
    mem.finish()
    assert len(mem.violations) == len(fragments), mem.violations
    for fragment, text in zip(fragments, mem.violations, strict=True):
        assert fragment in text, (fragment, mem.violations)


@cocotb.test()
async def arvalid_dropped(dut):
    mem = await setup(dut, outstanding_reads=1, read_latency=20)
    assert await offer(dut, "ar", {"addr": 0x100})
    assert not await offer(dut, "ar", {"addr": 0x200}, drop_after=2)   # the limit holds it
    await take(dut, "r", 1, ["resp"])
    assert await offer(dut, "ar", {"addr": 0x200})
    await take(dut, "r", 1, ["resp"])
    await expect(dut, mem, "AR: VALID dropped before READY")


@cocotb.test()
async def awaddr_changed_while_waiting(dut):
    mem = await setup(dut, write_order="w-first")    # AWREADY waits for the data
    aw = cocotb.start_soon(offer(dut, "aw", {"addr": 0x100}, change=(2, {"addr": 0x180})))
    await ClockCycles(dut.clk, 4)
    assert not aw.done(), "AWREADY rose before the burst's data came (w-first)"
    assert await offer(dut, "w", {"data": 7, "last": 1})
    await aw
    assert await take(dut, "b", 1, ["resp"]) == [(0,)]
    await expect(dut, mem, "AW: payload changed while VALID and not READY")
    assert mem.read(0x180, 8) == (7).to_bytes(8, "little")


@cocotb.test()
async def wvalid_dropped(dut):
    mem = await setup(dut)               # aw-first: W waits for its address
    assert not await offer(dut, "w", {"data": 1, "last": 1}, drop_after=3)
    await write_burst(dut, 0x40, [2])
    await take(dut, "b", 1, ["resp"])
    await expect(dut, mem, "W: VALID dropped before READY")


@cocotb.test()
async def read_crosses_4k(dut):
    mem = await setup(dut)
    assert await offer(dut, "ar", {"addr": 0xFF8, "len": 1, "id": 1})
    assert await take(dut, "r", 2, ["resp", "id", "last"]) == [(0, 1, 0), (0, 1, 1)]
    await expect(dut, mem, "AR: burst 0xff8+16 crosses 4 KB")


@cocotb.test()
async def write_crosses_4k_with_the_wrong_size(dut):
    mem = await setup(dut)
    await offer(dut, "aw", {"addr": 0x1FFC, "len": 1, "size": 2})
    dut.bus__awsize.value = 3
    for n in (1, 2):
        await offer(dut, "w", {"data": n, "last": int(n == 2)})
    await take(dut, "b", 1, ["resp"])
    await expect(dut, mem, "AW: size 2 is not the bus width (3)",
                 "AW: address 0x1ffc not aligned", "AW: burst 0x1ffc+8 crosses 4 KB")


@cocotb.test()
async def wlast_early_and_missing(dut):
    mem = await setup(dut)
    await write_burst(dut, 0x300, [1, 2], awlen=3)    # WLAST early
    await write_burst(dut, 0x400, [1, 2], awlen=0)    # WLAST missing on the only beat
    await write_burst(dut, 0x500, [5])
    await take(dut, "b", 3, ["resp"])
    await expect(dut, mem, "W: WLAST=1 on beat 2 of a 4-beat burst at 0x300",
                 "W: WLAST=0 on beat 1 of a 1-beat burst at 0x400")
    assert mem.read(0x500, 8) == (5).to_bytes(8, "little")


@cocotb.test()
async def burst_longer_than_the_port_takes(dut):
    mem = await setup(dut, max_burst=4)
    mem.write(0, bytes(range(64)))
    assert await offer(dut, "ar", {"addr": 0, "len": 7})
    assert await take(dut, "r", 8, ["resp"]) == [(SLVERR,)] * 8
    assert await offer(dut, "ar", {"addr": 0, "len": 3})
    assert await take(dut, "r", 4, ["resp", "data"]) == [
        (0, int.from_bytes(bytes(range(8 * n, 8 * n + 8)), "little")) for n in range(4)]
    await expect(dut, mem, "AR: burst of 8 beats > max_burst 4")


@cocotb.test()
async def responses_never_taken(dut):
    mem = await setup(dut, write_order="w-first")
    assert await offer(dut, "ar", {"addr": 0x100, "len": 2})
    assert await offer(dut, "w", {"data": 1, "last": 1})
    assert await offer(dut, "aw", {"addr": 0x100})
    assert await offer(dut, "w", {"data": 2, "last": 1})   # data whose address never comes
    await ClockCycles(dut.clk, 10)
    await expect(dut, mem, "R: 1 read burst(s) never fully returned",
                 "B: 1 write response(s) never taken",
                 "W: 0 burst address(es) and 1 burst(s) of write data left unmatched")
