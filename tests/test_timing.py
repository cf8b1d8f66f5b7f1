"""The timing report (platforms/timing.py): logic levels and fan-out of known-answer designs,
synthesized with Yosys or written by hand as netlists."""

import json
from collections import Counter

import pytest

from platforms.timing import (
    FANOUT_BUDGET,
    analyse,
    analyse_file,
    budget_levels,
    markdown,
    synthesize_netlist,
    violations,
)

# Known answers: five LUT1 between two flip-flops (5 levels); a 32-bit adder between
# registers (LUT2 + 8 CARRY4 = 9 levels on xc7, LUT2 + 4 CARRY8 = 5 on xcup); four LUT6 into
# two MUXF7 into a MUXF8 (3 levels); one flip-flop driving 100 LUT2 (fan-out 100).
KNOWN = r"""
module known(input clk, input [31:0] x, input [31:0] y, input [99:0] b, input [23:0] m,
             input [2:0] sel, output reg chain_q, output reg [31:0] sum_q,
             output reg mux_q, output reg [99:0] fan_q);
  reg chain_d;
  wire [5:0] c;
  assign c[0] = chain_d;
  genvar i;
  generate for (i = 0; i < 5; i = i + 1) begin : chain
    (* keep *) LUT1 #(.INIT(2'b01)) lut (.I0(c[i]), .O(c[i + 1]));
  end endgenerate
  reg [31:0] xr, yr;
  reg [23:0] mr;
  reg [2:0] sr;
  wire [3:0] l;
  wire [1:0] f7;
  wire f8;
  generate for (i = 0; i < 4; i = i + 1) begin : luts
    (* keep *) LUT6 #(.INIT(64'h6996966996696996)) lut (.I0(mr[6*i]), .I1(mr[6*i+1]),
      .I2(mr[6*i+2]), .I3(mr[6*i+3]), .I4(mr[6*i+4]), .I5(mr[6*i+5]), .O(l[i]));
  end endgenerate
  (* keep *) MUXF7 f7a (.I0(l[0]), .I1(l[1]), .S(sr[0]), .O(f7[0]));
  (* keep *) MUXF7 f7b (.I0(l[2]), .I1(l[3]), .S(sr[1]), .O(f7[1]));
  (* keep *) MUXF8 f8a (.I0(f7[0]), .I1(f7[1]), .S(sr[2]), .O(f8));
  reg fan_src;
  always @(posedge clk) begin
    chain_d <= x[0] ^ y[1]; chain_q <= c[5];
    xr <= x; yr <= y; sum_q <= xr + yr;
    mr <= m; sr <= sel; mux_q <= f8;
    fan_src <= y[0] ^ x[1];
    fan_q <= b ^ {100{fan_src}};
  end
endmodule
"""


@pytest.fixture(scope="module", params=["xc7", "xcup"])
def known(request, tmp_path_factory):
    family = request.param
    work = tmp_path_factory.mktemp(f"known_{family}")
    (work / "known.v").write_text(KNOWN)
    path = synthesize_netlist(work / "known.v", "known", family)
    return family, analyse_file(path, family, 100.0, paths=1000)


def _path_to(report, end):
    found = [p for p in report["deepest_paths"] if p["end"].startswith(end)]
    assert found, f"no path to {end}: {[p['end'] for p in report['deepest_paths']]}"
    return max(found, key=lambda p: p["levels"])


def test_lut_chain_counts_each_lut(known):
    _, r = known
    p = _path_to(r, "chain_q")
    assert p["levels"] == 5
    assert p["cells"] == ["LUT1"] * 5
    assert p["start"].startswith("c[0]") and p["clock"] == "clk"


def test_carry_chain_counts_each_carry_cell(known):
    family, r = known
    p = _path_to(r, "sum_q")
    # Yosys writes CARRY4 for both families; on UltraScale+ a pair is one CARRY8 (one level)
    carry, n = ("CARRY4", 8) if family == "xc7" else ("CARRY8", 4)
    assert p["levels"] == 1 + n
    assert p["cells"].count(carry) == n and p["start"].startswith(("xr", "yr"))
    assert r["max_levels"] == 1 + n


def test_wide_muxes_count_one_level_each(known):
    _, r = known
    p = _path_to(r, "mux_q")
    assert p["levels"] == 3 and p["cells"] == ["LUT6", "MUXF7", "MUXF8"]


def test_fanout_counts_loads_and_excludes_the_clock(known):
    _, r = known
    top = r["high_fanout_nets"][0]
    assert (top["net"], top["fanout"], top["driver_type"]) == ("fan_src", 100, "FDRE")
    assert r["max_fanout"] == 100       # clk drives ~300 flip-flops, but is a clock net
    assert all(n["net"] != "clk" for n in r["high_fanout_nets"])


def test_histogram_is_per_clock_and_sums(known):
    family, r = known
    clk = r["clocks"]["clk"]
    assert sum(clk["levels_histogram"].values()) == clk["endpoints"]
    assert clk["levels_histogram"]["5"] >= 1        # the LUT chain
    assert sum(r["levels_histogram"].values()) == r["endpoints"]
    assert r["combinational_loops"] == [] and r["unknown_cells"] == {}


# ---- hand-written netlists ------------------------------------------------------------------

def _netlist(cells, ports=None, names=None):
    """A Yosys JSON netlist: ``cells`` name -> (type, {pin: bits} inputs, {pin: bits} outputs)."""
    out = {}
    for name, (ctype, ins, outs, *params) in cells.items():
        out[name] = {"type": ctype, "parameters": params[0] if params else {},
                     "port_directions": {**{p: "input" for p in ins},
                                         **{p: "output" for p in outs}},
                     "connections": {**ins, **outs}}
    return {"modules": {"top": {"attributes": {"top": 1}, "ports": ports or {},
                                "cells": out,
                                "netnames": {n: {"bits": b, "hide_name": 0}
                                             for n, b in (names or {}).items()}}}}


def _ff(d, q, clk=1):
    return ("FDRE", {"C": [clk], "CE": ["1"], "R": ["0"], "D": [d]}, {"Q": [q]})


def test_combinational_loop_is_reported_not_fatal():
    r = analyse(_netlist({"a": ("LUT2", {"I0": [10], "I1": [12]}, {"O": [11]}),
                          "b": ("LUT1", {"I0": [11]}, {"O": [12]}),
                          "f": _ff(11, 10)}), "xc7", 100)
    assert r["combinational_loops"] and not r["within_budget"]
    assert any("combinational loop" in v for v in violations(r))


def test_carry_bit_order_is_not_a_loop():
    # CO[0] -> LUT -> S[3] of the same CARRY4 is a path, not a loop: 1 + 1 + 1 levels.
    cells = {"src": _ff(20, 10),
             "c": ("CARRY4", {"CI": ["0"], "CYINIT": ["0"], "DI": ["0", "0", "0", "0"],
                              "S": [10, 10, 10, 13]}, {"CO": [11, 30, 31, 32],
                                                        "O": [40, 41, 42, 14]}),
             "l": ("LUT1", {"I0": [11]}, {"O": [13]}),
             "dst": _ff(14, 15)}
    r = analyse(_netlist(cells, names={"dst_q": [15], "src_q": [10]}), "xc7", 100)
    assert r["combinational_loops"] == []
    assert r["max_levels"] == 3
    assert r["deepest_paths"][0]["cells"] == ["CARRY4", "LUT1", "CARRY4"]


def test_lutram_read_is_one_level_and_write_side_an_end_point():
    # FF -> LUT -> RAM64X1D read address (DPRA) -> DPO -> LUT -> FF: 3 levels; the write
    # data is an end point.
    cells = {"a": _ff(20, 10),
             "l1": ("LUT1", {"I0": [10]}, {"O": [11]}),
             "ram": ("RAM64X1D", {"WCLK": [1], "WE": [10], "D": [11],
                                  "A0": [10], "DPRA0": [11]}, {"DPO": [12], "SPO": [13]}),
             "l2": ("LUT1", {"I0": [12]}, {"O": [14]}),
             "z": _ff(14, 15)}
    r = analyse(_netlist(cells, names={"z_q": [15]}), "xc7", 100)
    assert r["max_levels"] == 3
    assert r["deepest_paths"][0]["cells"] == ["LUT1", "RAM64X1D", "LUT1"]
    assert any(p["end"].endswith("(RAM64X1D.D)") and p["levels"] == 1
               for p in r["deepest_paths"])
    assert 1 not in [n for n in r["high_fanout_nets"] if n["net"] == "net1"]


def test_dsp_and_srl_are_start_and_end_points():
    cells = {"a": _ff(20, 10),
             "l": ("LUT1", {"I0": [10]}, {"O": [11]}),
             "dsp": ("DSP48E1", {"CLK": [1], "A": [11, 11], "B": [11]}, {"P": [12, 13]},
                     {"AREG": "1", "BREG": "0", "MREG": "1", "PREG": "0"}),
             "l2": ("LUT1", {"I0": [12]}, {"O": [14]}),
             "srl": ("SRL16E", {"CLK": [1], "CE": ["1"], "D": [14], "A0": ["0"]},
                     {"Q": [16]}),
             "z": _ff(16, 17)}
    r = analyse(_netlist(cells), "xc7", 100)
    assert r["max_levels"] == 1            # FF -> LUT -> DSP, DSP -> LUT -> SRL, SRL -> FF
    assert r["levels_histogram"] == {"0": 1, "1": 4}
    assert r["combinational_dsps"] == 0


def test_unregistered_dsp_is_crossed_as_four_levels():
    # FF -> LUT -> A of a DSP48E1 with no A, M, P register -> P -> LUT -> FF: 1 + 4 + 1.
    regs = {"AREG": "0", "BREG": "1", "MREG": "0", "PREG": "0",
            "OPMODEREG": "00000000000000000000000000000001"}
    cells = {"a": _ff(20, 10),
             "l": ("LUT1", {"I0": [10]}, {"O": [11]}),
             "dsp": ("DSP48E1", {"CLK": [1], "A": [11], "B": [10], "OPMODE": [10]},
                     {"P": [12]}, regs),
             "l2": ("LUT1", {"I0": [12]}, {"O": [14]}),
             "z": _ff(14, 17)}
    r = analyse(_netlist(cells), "xc7", 100)
    assert r["max_levels"] == 6 and r["combinational_dsps"] == 1
    assert r["deepest_paths"][0]["cells"] == ["LUT1", "DSP48E1(comb)", "LUT1"]
    ends = {p["end"] for p in r["deepest_paths"]}
    assert any("(DSP48E1.B)" in e for e in ends)          # registered: an end point
    assert not any("(DSP48E1.A)" in e for e in ends)      # crossed: not an end point


def test_xcup_counts_a_carry4_pair_as_one_carry8():
    # Three CARRY4 in a chain from a LUT: 1 + 3 levels on xc7, 1 + 2 (CARRY8s) on xcup; a
    # path entering the upper CARRY4 of a pair through S still crosses a CARRY8 (1 level).
    def carry(ci, s, co):
        return ("CARRY4", {"CI": [ci], "CYINIT": ["0"], "DI": ["0"] * 4, "S": [s] * 4},
                {"CO": co, "O": [x + 100 for x in co]})
    cells = {"a": _ff(20, 10),
             "l": ("LUT1", {"I0": [10]}, {"O": [11]}),
             "c0": carry("0", 11, [30, 31, 32, 33]),
             "c1": carry(33, 10, [40, 41, 42, 43]),
             "c2": carry(43, 10, [50, 51, 52, 53]),
             "z": _ff(53, 60), "y": _ff(43, 61)}
    assert analyse(_netlist(cells), "xc7", 100)["max_levels"] == 4
    r = analyse(_netlist(cells), "xcup", 100)
    assert r["max_levels"] == 3
    assert r["deepest_paths"][0]["cells"] == ["LUT1", "CARRY8", "CARRY8"]
    assert r["levels_histogram"] == {"2": 1, "3": 1}
    # the upper CARRY4 entered through S (its CI chain is constant): one level
    cells["c0"] = carry("0", "0", [30, 31, 32, 33])
    r = analyse(_netlist(cells), "xcup", 100)
    assert r["levels_histogram"] == {"1": 1, "2": 1}
    assert r["deepest_paths"][-1]["cells"] == ["CARRY8"]


def test_budget_levels_per_family():
    assert budget_levels("xc7", 100) == 13
    assert budget_levels("xcup", 200) == 8
    assert budget_levels("xcup", 250) == 6
    assert budget_levels("xc7", 50) > budget_levels("xc7", 100) > budget_levels("xc7", 150)
    with pytest.raises(ValueError, match="family"):
        budget_levels("ice40", 100)


def test_over_budget_names_the_path():
    # 15 LUT1 in a row at 100 MHz on xc7 (budget 13).
    cells = {"a": _ff(20, 100)}
    for i in range(15):
        cells[f"l{i}"] = ("LUT1", {"I0": [100 + i]}, {"O": [101 + i]})
    cells["z"] = _ff(115, 116)
    r = analyse(_netlist(cells, names={"deep_src": [100], "deep_dst": [116]}), "xc7", 100)
    assert r["max_levels"] == 15 and not r["within_budget"]
    (v,) = violations(r)
    assert "15 logic levels > budget 13" in v and "deep_src" in v and "deep_dst" in v
    assert "OVER" in markdown(r)


def test_fanout_budget_violation_names_the_net():
    n = FANOUT_BUDGET + 1
    cells = {"a": _ff(20, 10)}
    for i in range(n):
        cells[f"z{i}"] = _ff(10, 1000 + i)
    r = analyse(_netlist(cells, names={"busy": [10]}), "xc7", 100)
    assert r["max_fanout"] == n
    assert any(v.startswith(f"fan-out {n}") and "busy" in v for v in violations(r))


# ---- build.py -------------------------------------------------------------------------------

def test_build_timing_needs_yosys():
    import build
    with pytest.raises(SystemExit) as e:
        build.parse_args(["--platform", "pynq-z1", "--synth", "none", "--timing"])
    assert e.value.code == 2


@pytest.mark.slow
def test_build_reports_timing_and_strict_fails_naming_the_path(tmp_path):
    """A 4x4 Pynq-Z1 build (the estimate's 4x4 fit point, so the synthesis is shared):
    report.json carries the timing section; over budget, --timing-strict exits 1."""
    import json
    import subprocess
    import sys
    from pathlib import Path
    root = Path(__file__).resolve().parent.parent
    proc = subprocess.run([sys.executable, str(root / "build.py"), "--platform", "pynq-z1",
                           "--rows", "4", "--cols", "4", "--out", str(tmp_path),
                           "--timing-strict"], capture_output=True, text=True, cwd=root)
    t = json.loads((tmp_path / "report.json").read_text())["timing"]
    assert {"target_mhz", "budget_levels", "max_levels", "levels_histogram", "deepest_paths",
            "fanout_budget", "max_fanout"} <= set(t)
    assert t["target_mhz"] == 100.0 and t["budget_levels"] == 13 and t["whole_design"]
    assert {"start", "end", "levels"} <= set(t["deepest_paths"][0])
    assert "## Timing" in (tmp_path / "report.md").read_text()
    if t["within_budget"]:
        assert proc.returncode == 0, proc.stderr
    else:
        assert proc.returncode == 1
        assert "error: timing:" in proc.stderr and t["deepest_paths"][0]["end"] in proc.stderr


def test_command_line_rejects_bad_arguments(capsys):
    """``python -m platforms.timing``: an unknown board or an array the RTL does not support
    exits 2 with a message, before any synthesis."""
    from platforms.timing import main
    for bad in (["--board", "nope"], ["--board", "pynq-z1", "--rows", "3"], [],
                ["--board", "vu9p", "--without-array"], ["--board", "vu9p", "--array-only"],
                ["--board", "vu9p", "--default", "--array-only", "--without-array"],
                ["--board", "vu9p", "--default", "--array-cols", "64"],
                ["--board", "vu9p", "--default", "--array-only", "--array-cols", "0"],
                ["--board", "vu9p", "--default", "--array-only", "--array-cols", "129"]):
        with pytest.raises(SystemExit) as e:
            main(bad)
        assert e.value.code == 2
    assert "rows" in capsys.readouterr().err


BOXED = """
module inner(input clk, input [5:0] a, output reg q);
  always @(posedge clk) q <= (a[0] & a[1]) ^ (a[2] | a[3]) ^ (a[4] & ~a[5]);
endmodule
module outer(input clk, input [5:0] a, output reg q);
  reg [5:0] ar;
  wire w;
  inner u (.clk(clk), .a(ar), .q(w));
  always @(posedge clk) begin ar <= a; q <= w; end
endmodule
"""


def test_blackbox_empties_a_module_and_keeps_its_ports_as_boundaries(tmp_path):
    """``synthesize_netlist(blackbox=...)`` (what ``--without-array`` empties the systolic
    array with): the module's logic is gone, its instance stays as a cell of unknown timing
    whose inputs are loads and whose outputs start paths; synthesized whole, the same
    design has no unknown cell and one flip-flop more."""
    reports = {}
    for boxed in (False, True):
        work = tmp_path / f"boxed{int(boxed)}"
        work.mkdir()
        (work / "outer.v").write_text(BOXED)
        path = synthesize_netlist(work / "outer.v", "outer", "xcup",
                                  blackbox=("inner",) if boxed else ())
        reports[boxed] = analyse_file(path, "xcup", 200.0, paths=100)
        reports[boxed]["cells"] = Counter(
            c["type"] for c in json.loads(path.read_text())["modules"]["outer"]["cells"].values())
    assert reports[False]["unknown_cells"] == {}
    assert reports[True]["unknown_cells"] == {"inner": 1}
    assert reports[False]["cells"]["FDRE"] == reports[True]["cells"]["FDRE"] + 1 == 8
    assert reports[False]["max_levels"] >= 1
    paths = reports[True]["deepest_paths"]
    assert any(p["start"] == "w (inner)" for p in paths), paths
    assert any(p["end"].endswith("(inner.a)") for p in paths), paths


def test_array_timing_measures_the_array_alone(tmp_path):
    """``array_timing`` (``--array-only``): the array of a configuration synthesized alone at
    its size, its DSP slices registered (start and end points, none crossed
    combinationally), the report saying what it measured, and cached."""
    from platforms.timing import array_timing
    cfg = {"rows": 2, "cols": 4, "packing": 2}
    assert array_timing(cfg, "xcup", 200.0, tmp_path, cached_only=True) is None
    t = array_timing(cfg, "xcup", 200.0, tmp_path)
    assert not t["whole_design"] and "2x4 systolic array alone" in t["measured_on"]
    assert 1 <= t["max_levels"] <= t["budget_levels"] == 8
    assert t["unknown_cells"] == {}
    assert t["combinational_dsps"] == 0          # every pair's slice registered
    assert t["clocks"]["clk"]["endpoints"] > 1000
    assert array_timing(cfg, "xcup", 200.0, tmp_path) == t
    # measured once, the report is there without synthesis; not at another clock
    assert array_timing(cfg, "xcup", 200.0, tmp_path, cached_only=True) == t
    assert array_timing(cfg, "xcup", 250.0, tmp_path, cached_only=True) is None
    # nor without the netlist (hundreds of megabytes at size, may be deleted): a report of
    # exactly this design is returned, not synthesized again (the result is not rewritten)
    for netlist in tmp_path.glob("*.netlist.json"):
        netlist.unlink()
    result = next(tmp_path.glob("*.result.json"))
    before = result.stat().st_mtime_ns
    assert array_timing(cfg, "xcup", 200.0, tmp_path) == t
    assert result.stat().st_mtime_ns == before


def test_array_cols_measures_part_of_the_array(tmp_path, monkeypatch, capsys):
    """``--array-only --array-cols N``: the array at the default's rows and N columns, one
    SLR group, saved under its own key with the command that reproduces it."""
    import json

    import platforms.timing as timing
    seen = {}

    def fake(params, family, mhz, work_dir, **kw):
        seen.update(params)
        return _fake({4: 10, 5: 2}, [("a", "b", 5)], [("n", 642)])
    monkeypatch.setattr(timing, "array_timing", fake)
    out = tmp_path / "t.json"
    assert timing.main(["--board", "vu9p", "--default", "--array-only", "--array-cols", "64",
                        "--out", str(out)]) == 0
    assert seen["rows"] == 64 and seen["cols"] == 64 and "slr_groups" not in seen
    entry = json.loads(out.read_text())["vu9p 64x128 default array only (64 columns)"]
    assert entry["command"].endswith("--default --array-only --array-cols 64")
    assert "64 of its 128 columns" in entry["measured_on"] and entry["max_levels"] == 5


def _fake(levels: dict, paths: list, nets: list, unknown=None) -> dict:
    return {"target_mhz": 250.0, "family": "xcup", "speed_grade": "-2", "level_ns": 0.45,
            "overhead_ns": 1.2, "budget_levels": 6, "fanout_budget": 1000,
            "max_levels": max(levels), "levels_histogram": {str(k): v for k, v in levels.items()},
            "endpoints": sum(levels.values()),
            "clocks": {"clk": {"endpoints": sum(levels.values()), "max_levels": max(levels),
                               "levels_histogram": {str(k): v for k, v in levels.items()}}},
            "deepest_paths": [{"start": s, "end": e, "levels": n, "cells": []}
                              for s, e, n in paths],
            "max_fanout": max(f for _, f in nets),
            "high_fanout_nets": [{"net": n, "fanout": f, "driver": n + "_ff",
                                  "driver_type": "FDRE"} for n, f in nets],
            "combinational_loops": [], "combinational_dsps": 0,
            "unknown_cells": unknown or {}, "within_budget": True}


def test_by_parts_joins_the_two_reports():
    """``by_parts``: histograms added per level and per clock, the deepest paths and the
    highest fan-out nets of both sorted together (the array's named below its instance), the
    emptied array not counted as an unknown cell, the budget verdict taken on the join."""
    from platforms.timing import by_parts
    rest = _fake({0: 10, 3: 5, 6: 2}, [("a", "b", 6), ("c", "d", 3)],
                 [("rst", 900), ("sel", 400)], unknown={"engine.datapath.array": 1})
    array = _fake({0: 100, 2: 50, 7: 1}, [("pe.p", "pe.q", 7), ("x", "y", 2)],
                  [("readout_cur", 1200), ("gate", 30)])
    j = by_parts(rest, array)
    assert j["levels_histogram"] == {"0": 110, "2": 50, "3": 5, "6": 2, "7": 1}
    assert j["clocks"]["clk"]["endpoints"] == j["endpoints"] == 168
    assert j["max_levels"] == 7 and j["max_fanout"] == 1200
    assert [p["levels"] for p in j["deepest_paths"]] == [7, 6]
    assert j["deepest_paths"][0]["start"] == "engine.datapath.array.pe.p"
    assert [n["net"] for n in j["high_fanout_nets"]] == ["engine.datapath.array.readout_cur",
                                                          "rst"]
    assert j["unknown_cells"] == {} and not j["within_budget"]
    assert violations(j)[0].startswith("7 logic levels > budget 6")
    # an array of two SLR groups, one measured: its end points counted twice
    two = by_parts(rest, array, copies=2)
    assert two["levels_histogram"] == {"0": 210, "2": 100, "3": 5, "6": 2, "7": 2}
    assert two["endpoints"] == 168 + 151 and two["max_levels"] == 7


def test_by_parts_measures_one_slr_group(tmp_path, monkeypatch):
    """``accelerator_timing(whole=True, parts=True)`` of an array in SLR groups (the
    VU9P's) measures one group's array, at the configured rows and cols / groups columns,
    and counts it once per group."""
    import platforms.timing as timing
    from platforms import PLATFORMS
    asked = []

    def fake_array(params, *a, **kw):
        asked.append(dict(params))
        return _fake({0: 100, 5: 1}, [("pe.p", "pe.q", 5)], [("clear", 642)])

    def fake_measured(kind, name, params, *a, **kw):
        return _fake({0: 10, 6: 2}, [("a", "b", 6)], [("rst", 734)],
                     unknown={"engine.datapath.array": 1})
    monkeypatch.setattr(timing, "array_timing", fake_array)
    monkeypatch.setattr(timing, "_measured", fake_measured)
    board = PLATFORMS["vu9p"]
    cfg = board.config()
    assert cfg["slr_groups"] == 2 and cfg["cols"] == 128
    t = timing.accelerator_timing(cfg, board.family, board.clock_mhz, tmp_path, whole=True,
                                  parts=True)
    assert asked == [{**{k: v for k, v in cfg.items() if k != "slr_groups"}, "cols": 64}]
    assert t["levels_histogram"] == {"0": 210, "5": 2, "6": 2}
    assert "2 SLR groups of 64x64" in t["measured_on"] and t["within_budget"]


def test_cached_only_never_synthesizes(tmp_path):
    """``accelerator_timing(cached_only=True)`` (what ``build.py`` asks first): for a design
    not measured before, None at once, nothing generated or synthesized -- whole, by parts
    or at the fit point."""
    from platforms import PLATFORMS
    from platforms.timing import accelerator_timing
    board = PLATFORMS["vu9p"]
    for kw in ({"whole": True, "parts": True}, {"whole": True}, {}):
        assert accelerator_timing(board.config(), board.family, board.clock_mhz, tmp_path,
                                  cached_only=True, **kw) is None
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow
def test_whole_step_build_is_within_budget_at_its_fit_point(tmp_path):
    """The ZCU104's whole-step configuration (``build.py --platform zcu104 --cols 32
    --k-blocks --epilogue --sgd --conv``) at the 8x8 fit point its build reports timing on
    (about 12 minutes of synthesis): every path within the 200 MHz logic-level budget and
    every net within the fan-out budget."""
    from platforms import PLATFORMS
    from platforms.timing import accelerator_timing
    board = PLATFORMS["zcu104"]
    cfg = board.config(cols=32, k_blocks=True, epilogue=True, sgd=True, conv=True,
                       unfold=True)
    report = accelerator_timing(cfg, board.family, board.clock_mhz, tmp_path)
    assert report["measured_on"].startswith("8x8"), report["measured_on"]
    assert report["budget_levels"] == 8
    over = [p for p in report["deepest_paths"] if p["levels"] > report["budget_levels"]]
    assert report["max_levels"] <= report["budget_levels"], over
    assert report["max_fanout"] <= report["fanout_budget"], report["high_fanout_nets"][:3]
