"""cocotb testbench of the whole accelerator: cocotbext-axi's AxiLiteMaster on the control
port and the hostile AXI memory of :mod:`sim.testbenches.mem` on the memory port.

GEMMs of random shapes (not multiples of the array), every transpose combination, scalar and
vector exponents at the extremes, float32 and int32 output, checked bit for bit against
:mod:`sim.models.golden`; then a rejected descriptor, a soft reset, and a correct GEMM again.
The test runs once per memory port in ``ACC_PORTS``: ``;``-separated keys of
:data:`sim.testbenches.mem.PRESETS` or JSON objects of knobs, e.g. ``"zynq7-hp"`` (8 reads and 8
writes in flight, latency 40, 16-beat bursts, a random write order and 20 % pauses). The
memory must see no AXI violation and be left with nothing in flight.
Configuration from the environment: ``ACC_ROWS``, ``ACC_COLS``, ``ACC_WIDTH``, ``ACC_SEED``,
``ACC_WRITE_PORTS`` (2 to 6: the accelerator's other write ports ``mem_w1`` ... are each
answered by a memory of the same knobs on the same bytes, checked the same way),
``ACC_READ_PORTS`` (2: the second read port ``mem_r1``, which reads B, likewise).
"""

import os

import cocotb
import numpy as np
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles
from cocotbext.axi import AxiLiteBus, AxiLiteMaster

from firmware.spec.regmap import ErrorCode, field_value, offset, pack
from sim.models import golden
from sim.testbenches.mem import AxiMemory, port_knobs

MEM = 1 << 20


async def setup(dut, seed, port):
    cocotb.start_soon(Clock(dut.clk, 10, unit="ns").start())
    dut.rst.value = 1
    ram = AxiMemory(dut, dut.clk, dut.rst, read="mem_r__", write="mem_w__", size=MEM,
                    seed=seed, **port_knobs(port))
    ram.others = []
    write_ports = int(os.environ.get("ACC_WRITE_PORTS", "1"))
    read_ports = int(os.environ.get("ACC_READ_PORTS", "1"))
    for p in range(1, max(write_ports, read_ports)):   # mem_w1, mem_r1 ...: the same bytes
        other = AxiMemory(dut, dut.clk, dut.rst,
                          read=f"mem_r{p}__" if p < read_ports else None,
                          write=f"mem_w{p}__" if p < write_ports else None,
                          size=0, seed=seed + 1000 * p, **port_knobs(port))
        other.mem = ram.mem
        ram.others.append(other)
    ram.ports = write_ports, read_ports
    lite = AxiLiteMaster(AxiLiteBus.from_prefix(dut, "ctrl_"), dut.clk, dut.rst)
    await ClockCycles(dut.clk, 4)
    dut.rst.value = 0
    await ClockCycles(dut.clk, 2)
    return lite, ram


class Host:
    """The register sequence of :class:`firmware.runtime.driver.Driver`, over cocotbext-axi."""

    def __init__(self, lite, ram, bpw):
        self.lite, self.ram, self.bpw = lite, ram, bpw

    async def write(self, name, value):
        await self.lite.write_dword(offset(name), value & 0xFFFFFFFF)

    async def read(self, name):
        return await self.lite.read_dword(offset(name))

    def stride(self, nbytes):
        return -(-nbytes // self.bpw) * self.bpw

    def put(self, addr, x):
        rows, cols = x.shape
        stride = self.stride(cols * x.dtype.itemsize)
        buf = np.zeros((rows, stride), np.uint8)
        buf[:, :cols * x.dtype.itemsize] = np.ascontiguousarray(x).view(np.uint8).reshape(
            rows, -1)
        self.ram.write(addr, buf.tobytes())
        return stride

    async def run(self, *descs):
        """Enqueue ``descs`` back to back (at most the queue's four), wait until idle."""
        for desc in descs:
            for name in ("M", "N", "K", "FLAGS", "A_STRIDE", "B_STRIDE", "C_STRIDE"):
                await self.write(f"DESC_{name}", desc[name])
            for name in ("A_ADDR", "B_ADDR", "C_ADDR", "ROW_EXP_ADDR", "COL_EXP_ADDR"):
                await self.write(f"DESC_{name}_LO", desc.get(name, 0))
                await self.write(f"DESC_{name}_HI", 0)
            await self.write("CTRL", pack("CTRL", ENQUEUE=1))
        for _ in range(2000):
            st = await self.read("STATUS")
            if not field_value("STATUS", "BUSY", st) or field_value("STATUS", "ERROR", st):
                return field_value("STATUS", "ERROR_CODE", st)
            await ClockCycles(self.lite.write_if.aw_channel.clock, 20)
        raise TimeoutError(f"the accelerator stayed busy; memory: {self.ram.status()}")

    def describe(self, a, b, ta, tb, a_addr, b_addr, c_addr, **flags):
        """A descriptor of ``op(a) @ op(b)`` with A, B put at their addresses and C at
        ``c_addr``; ``flags``: ``DESC_FLAGS`` fields besides the transposes."""
        m = a.shape[1] if ta else a.shape[0]
        k = a.shape[0] if ta else a.shape[1]
        n = b.shape[0] if tb else b.shape[1]
        return {"M": m, "N": n, "K": k, "A_ADDR": a_addr, "A_STRIDE": self.put(a_addr, a),
                "B_ADDR": b_addr, "B_STRIDE": self.put(b_addr, b), "C_ADDR": c_addr,
                "C_STRIDE": self.stride(4 * n),
                "FLAGS": pack("DESC_FLAGS", TRANSPOSE_A=int(ta), TRANSPOSE_B=int(tb), **flags)}

    def c(self, desc, dtype):
        """The descriptor's C, as ``dtype`` (int32 or uint32) words."""
        m, n = desc["M"], desc["N"]
        raw_c = self.ram.read(desc["C_ADDR"], m * desc["C_STRIDE"])
        rows = np.frombuffer(raw_c, np.uint8).reshape(m, -1)[:, :4 * n].copy()
        return rows.view(dtype).reshape(m, n)

    async def gemm(self, a, b, ta, tb, row_exp, col_exp, raw):
        flags = {"RAW": int(raw)}
        exps = {"ROW_EXP_ADDR": 0x80000, "COL_EXP_ADDR": 0x81000}
        for name, value in (("ROW", row_exp), ("COL", col_exp)):
            if np.ndim(value):
                self.put(exps[f"{name}_EXP_ADDR"], np.asarray(value, np.int8).reshape(1, -1))
                flags[f"{name}_EXP_VECTOR"] = 1
            else:
                flags[f"{name}_EXP"] = int(value)
        desc = {**self.describe(a, b, ta, tb, 0x1000, 0x20000, 0x40000, **flags), **exps}
        code = await self.run(desc)
        assert code == 0, f"error code {ErrorCode(code).name}"
        return self.c(desc, np.int32 if raw else np.uint32)


def _operands(rng, m, n, k, ta, tb):
    """Random int8 A and B of an ``m x n x k`` GEMM, stored transposed or not."""
    return (rng.integers(-128, 128, (k, m) if ta else (m, k), dtype=np.int8),
            rng.integers(-128, 128, (n, k) if tb else (k, n), dtype=np.int8))


PORTS = os.environ.get("ACC_PORTS", "zynq7-hp").split(";")


@cocotb.test(timeout_time=20, timeout_unit="ms")
@cocotb.parametrize(port=[cocotb.Param(p, f"port{i}") for i, p in enumerate(PORTS)])
async def gemms_errors_and_recovery(dut, port):
    width = int(os.environ["ACC_WIDTH"])
    seed = int(os.environ.get("ACC_SEED", "1"))
    lite, ram = await setup(dut, seed, port)
    host = Host(lite, ram, width // 8)
    await host.write("WINDOW_BASE_LO", 0)
    await host.write("WINDOW_LIMIT_LO", MEM)
    rng = np.random.default_rng(seed)
    for case in range(6):
        ta, tb = bool(case & 1), bool(case & 2)
        m, n, k = (int(rng.integers(1, 12)), int(rng.integers(1, 12)),
                   int(rng.integers(1, 40)))
        a, b = _operands(rng, m, n, k, ta, tb)
        raw = case == 5
        if case % 2:
            row_exp = rng.choice(np.array([-128, 127, 3], np.int8), m)
            col_exp = rng.integers(-128, 128, n).astype(np.int8)
        else:
            row_exp, col_exp = int(rng.integers(-128, 128)), -128
        got = await host.gemm(a, b, ta, tb, row_exp, col_exp, raw)
        acc = golden.gemm(a, b, ta, tb)
        want = acc if raw else golden.float32_bits(golden.rescale(acc, row_exp, col_exp))
        assert np.array_equal(got, want), f"case {case}: {m}x{n}x{k} ta={ta} tb={tb}"
    # B's rows long enough to be striped over two read ports where there are three (B as
    # stored on a wide array: each K step's row of a block is 2 x cols bytes, 4 bus words
    # and more from 16 columns on)
    a = rng.integers(-128, 128, (6, 40), dtype=np.int8)
    b = rng.integers(-128, 128, (40, 70), dtype=np.int8)
    got = await host.gemm(a, b, False, False, 0, 0, True)
    assert np.array_equal(got, golden.gemm(a, b)), "striped B"
    # three descriptors queued, the later two with OVERLAP (their loads and first tiles under
    # the C rows of the one before), each over several K chunks (depth 16)
    descs, wants, base = [], [], 0x1000
    for i in range(3):
        ta, tb = bool(i & 1), bool(i & 2)
        m, n, k = int(rng.integers(3, 12)), int(rng.integers(3, 12)), int(rng.integers(20, 60))
        a, b = _operands(rng, m, n, k, ta, tb)
        descs.append(host.describe(a, b, ta, tb, base, base + 0x8000, base + 0x10000, RAW=1,
                                   OVERLAP=int(i > 0)))
        wants.append(golden.gemm(a, b, ta, tb))
        base += 0x18000
    done = await host.read("DONE_COUNT")
    assert await host.run(*descs) == 0
    assert await host.read("DONE_COUNT") - done == 3
    for i, (desc, want) in enumerate(zip(descs, wants, strict=True)):
        assert np.array_equal(host.c(desc, np.int32), want), f"queued descriptor {i}"
    # a misaligned descriptor is rejected; a soft reset clears it; the engine works again
    code = await host.run({"M": 3, "N": 3, "K": 3, "FLAGS": 0, "A_ADDR": 0x1001,
                           "A_STRIDE": host.bpw, "B_ADDR": 0x20000, "B_STRIDE": host.bpw,
                           "C_ADDR": 0x40000, "C_STRIDE": host.stride(12)})
    assert code == ErrorCode.MISALIGNED
    await host.write("CTRL", pack("CTRL", SOFT_RESET=1))
    await ClockCycles(dut.clk, 10)
    assert field_value("STATUS", "ERROR", await host.read("STATUS")) == 0
    a = rng.integers(-128, 128, (5, 9), dtype=np.int8)
    b = rng.integers(-128, 128, (9, 6), dtype=np.int8)
    got = await host.gemm(a, b, False, False, 0, 0, True)
    assert np.array_equal(got, golden.gemm(a, b))
    await ClockCycles(dut.clk, 20)
    for r in (ram, *ram.others):
        assert not r.finish(), f"AXI violations: {r.violations}"
        dut._log.info("memory (%s): %d reads, %d writes, %s", port, r.reads, r.writes, r.stats)
    write_ports, read_ports = ram.ports
    assert all(r.writes for r in ram.others[:write_ports - 1]), "a write port wrote nothing"
    assert all(r.reads for r in ram.others[:read_ports - 1]), "a read port read nothing"
