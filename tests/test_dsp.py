import numpy as np
import pytest

from rtl.dsp import PackedMac
from sim.harness import run


@pytest.mark.parametrize("cascade", [False, True])
def test_packed_mac_model_matches_its_definition(cascade):
    # P <- (clear ? 0 : P) + (hi * 2**18 + lo) * b, 48-bit wrapping, with the documented
    # latencies: operands at cycle t, clear at t + 2, P at t + 4; with ``cascade``, b comes
    # on BCIN (a slice above's BCOUT), also at t. BCOUT is b one cycle later.
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
    dut = PackedMac(cascade=cascade)
    got, bcout = [], []

    async def bench(ctx):
        for t in range(n + PackedMac.LATENCY):
            if t < n:
                ctx.set(dut.hi, int(hi[t]))
                ctx.set(dut.lo, int(lo[t]))
                ctx.set(dut.b, 0 if cascade else int(b[t]))
                ctx.set(dut.bcin, int(b[t]) if cascade else 0)
            bcout.append(ctx.get(dut.bcout))
            c = t - PackedMac.CLEAR_DELAY
            ctx.set(dut.clear, bool(clear[c]) if 0 <= c < n else False)
            if t >= PackedMac.LATENCY:
                got.append(ctx.get(dut.p))
            await ctx.tick()

    run(dut, bench, deadline_cycles=n + 10)
    assert len(got) == n
    assert got == want
    assert bcout[1:n] == [int(x) for x in b[:n - 1]]      # b of step t at cycle t + 1


def test_primitive_instance_elaborates():
    from rtl.export import to_verilog
    text = to_verilog(PackedMac(primitive=True), "mac")
    assert "DSP48E2" in text
    assert ".AMULTSEL(\"AD\")" in text
    assert '.B_INPUT("DIRECT")' in text and ".BCOUT(bcout)" in text
    text = to_verilog(PackedMac(primitive=True, cascade=True), "mac")
    assert '.B_INPUT("CASCADE")' in text and ".BCIN(bcin)" in text
