import numpy as np

from rtl.dsp import PackedMac
from sim.harness import run


def test_packed_mac_model_matches_its_definition():
    # P <- (clear ? 0 : P) + (hi * 2**18 + lo) * b, 48-bit wrapping, with the documented
    # latencies: operands at cycle t, clear at t + 2, P at t + 4.
    rng = np.random.default_rng(0)
    n = 400
    hi = rng.integers(-128, 128, n)
    lo = rng.integers(-128, 128, n)
    b = rng.integers(-128, 128, n)
    hi[50:300] = -128
    lo[50:300] = -128
    b[50:300] = -128            # long runs of the largest product: P wraps at 48 bits
    clear = rng.random(n) < 0.05
    clear[0] = True
    want, acc = [], 0
    for t in range(n):
        acc = (0 if clear[t] else acc) + (int(hi[t]) * 2**18 + int(lo[t])) * int(b[t])
        acc = (acc + 2**47) % 2**48 - 2**47
        want.append(acc)
    dut = PackedMac()
    got = []

    async def bench(ctx):
        for t in range(n + PackedMac.LATENCY):
            if t < n:
                ctx.set(dut.hi, int(hi[t]))
                ctx.set(dut.lo, int(lo[t]))
                ctx.set(dut.b, int(b[t]))
            c = t - PackedMac.CLEAR_DELAY
            ctx.set(dut.clear, bool(clear[c]) if 0 <= c < n else False)
            if t >= PackedMac.LATENCY:
                got.append(ctx.get(dut.p))
            await ctx.tick()

    run(dut, bench, deadline_cycles=n + 10)
    assert len(got) == n
    assert got == want


def test_primitive_instance_elaborates():
    from rtl.export import to_verilog
    text = to_verilog(PackedMac(primitive=True), "mac")
    assert "DSP48E2" in text
    assert ".AMULTSEL(\"AD\")" in text
