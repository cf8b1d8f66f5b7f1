"""build.py and the board platforms: generation, Tcl/XDC, lint, estimates, programming."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from platforms import PLATFORMS
from sim.testbenches.runner import verilator_env, xilinx_cell_models

ROOT = Path(__file__).resolve().parent.parent


def run_build(*args, cwd=ROOT):
    return subprocess.run([sys.executable, str(ROOT / "build.py"), *args],
                          capture_output=True, text=True, cwd=cwd)


def test_list_names_every_platform():
    proc = run_build("--list")
    assert proc.returncode == 0, proc.stderr
    for name, board in PLATFORMS.items():
        assert name in proc.stdout and board.part in proc.stdout


def test_platform_defaults_meet_the_mac_targets():
    targets = {"pynq-z1": 256, "zcu104": 2048, "vu9p": 8192}
    for name, board in PLATFORMS.items():
        cfg = board.config()
        assert cfg["rows"] * cfg["cols"] >= targets[name]
        dsps = (cfg.get("dsp_rows", cfg["rows"]) * cfg["cols"]) // board.packing
        assert dsps <= 0.8 * board.capacity["DSP"], name


# (the VU9P's larger build, generated and linted, takes minutes: slow)
@pytest.fixture(scope="module", params=[pytest.param(p, marks=pytest.mark.slow)
                                        if p == "vu9p" else p for p in sorted(PLATFORMS)])
def generated(request, tmp_path_factory):
    out = tmp_path_factory.mktemp(request.param)
    proc = run_build("--platform", request.param, "--rows", "8", "--cols", "8", "--synth",
                     "none", "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    return request.param, out


def test_generates_verilog_top_constraints_and_scripts(generated):
    name, out = generated
    stem = f"bfp_{name.replace('-', '_')}"
    core = (out / "bfp_accel.v").read_text()
    top = (out / "bfp_accel_top.v").read_text()
    assert "module bfp_accel(" in core
    assert ("DSP48E2" in core) == (PLATFORMS[name].family == "xcup")
    for port in ("ap_clk", "ap_rst_n", "s_axi_control_awaddr", "m_axi_mem_araddr",
                 "m_axi_mem_wstrb", "interrupt"):
        assert port in top
    tcl = (out / "build.tcl").read_text()
    assert PLATFORMS[name].part in tcl and "write_bitstream" in tcl
    # write port p on the PS's HP port p (Pynq-Z1: 4; ZCU104: 6, the last two on its HPC
    # ports); the VU9P has one; the second and third read ports (Pynq-Z1, ZCU104) are
    # m_axi_mem1's and m_axi_mem2's read channels, the fourth and fifth (ZCU104) m_axi_mem3's
    # and m_axi_mem4's
    ports = PLATFORMS[name].config().get("write_ports", 1)
    read_ports = PLATFORMS[name].config().get("read_ports", 1)
    assert ("m_axi_mem1_awaddr" in top) == (ports > 1)
    assert ("m_axi_mem1_araddr" in top) == (read_ports > 1) == (name != "vu9p")
    assert ("m_axi_mem2_araddr" in top) == (read_ports >= 3) == (name != "vu9p")
    assert ("m_axi_mem3_araddr" in top) == (read_ports >= 4) == (name == "zcu104")
    assert ("m_axi_mem4_araddr" in top) == (read_ports == 5) == (name == "zcu104")
    assert ("m_axi_mem3_awaddr" in top) == (ports >= 4)
    assert ("m_axi_mem5_awaddr" in top) == (ports == 6) == (name == "zcu104")
    assert "m_axi_mem5_araddr" not in top and "m_axi_mem6" not in top
    assert ('/ps/S_AXI_HPC1_FPD" Clk' in tcl) == (name == "zcu104")
    assert ("accel/m_axi_mem1" in tcl) == (ports > 1)
    assert ("S_AXI_HP3_FPD" in tcl) == (name == "zcu104")
    assert ("/ps/S_AXI_HP1\"" in tcl) == (name == "pynq-z1")
    assert ("/ps/S_AXI_HP3\"" in tcl) == (name == "pynq-z1")
    assert ("hw_handoff" in tcl) == (name != "vu9p")       # .hwh for pynq.Overlay
    xdc = (out / f"{stem}.xdc").read_text()
    # the VU9P's array in two SLR groups: a pblock each, crossing registers in Laguna sites
    groups = PLATFORMS[name].config().get("slr_groups", 1)
    assert ("create_pblock bfp_group1" in xdc) == (groups == 2 and name == "vu9p")
    if groups > 1:
        assert "resize_pblock [get_pblocks bfp_group0] -add {SLR1}" in xdc
        assert "resize_pblock [get_pblocks bfp_group1] -add {SLR0}" in xdc
        assert 'NAME =~ "*/core/engine/datapath/array/slr1/*"' in xdc
        assert "USER_SLL_REG TRUE" in xdc
        assert "slr1 (" in core and "_slr_tx0" in core and 'shreg_extract = "no"' in core


def test_four_write_ports_go_to_four_hp_ports(tmp_path):
    proc = run_build("--platform", "zcu104", "--rows", "8", "--cols", "8", "--write-ports", "4",
                     "--read-ports", "4", "--synth", "none", "--out", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    top = (tmp_path / "bfp_accel_top.v").read_text()
    tcl = (tmp_path / "build.tcl").read_text()
    assert "m_axi_mem3_wdata" in top and "m_axi_mem4" not in top
    assert "ASSOCIATED_BUSIF s_axi_control:m_axi_mem:m_axi_mem1:m_axi_mem2:m_axi_mem3" in top
    for p in (1, 2, 3):
        assert f'/ps/S_AXI_HP{p}_FPD" Clk' in tcl and f"accel/m_axi_mem{p}]" in tcl
        assert f"PSU__USE__S_AXI_GP{p + 2} {{1}}" in tcl


def test_six_write_ports_take_the_zcu104_hpc_ports(tmp_path):
    """Write ports 4 and 5 are write-only interfaces on S_AXI_HPC0_FPD and S_AXI_HPC1_FPD
    (the PS8's S_AXI_GP0 and GP1); the Pynq-Z1's PS has four HP ports, so five are refused
    with exit status 2."""
    proc = run_build("--platform", "zcu104", "--rows", "8", "--cols", "8", "--write-ports", "6",
                     "--read-ports", "2", "--synth", "none", "--out", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    top = (tmp_path / "bfp_accel_top.v").read_text()
    tcl = (tmp_path / "build.tcl").read_text()
    assert "m_axi_mem5_wdata" in top and "m_axi_mem5_araddr" not in top
    assert "m_axi_mem2_araddr" not in top and "m_axi_mem6" not in top
    for p, gp, slave in ((4, 0, "S_AXI_HPC0_FPD"), (5, 1, "S_AXI_HPC1_FPD")):
        assert f'/ps/{slave}" Clk' in tcl and f"accel/m_axi_mem{p}]" in tcl
        assert f"PSU__USE__S_AXI_GP{gp} {{1}}" in tcl
    proc = run_build("--platform", "pynq-z1", "--write-ports", "5", "--synth", "none",
                     "--out", str(tmp_path / "pynq"))
    assert proc.returncode == 2
    assert "pynq-z1's PS has 4 memory ports" in proc.stderr


def test_generated_tcl_and_xdc_parse_in_tclsh(generated):
    name, out = generated
    tclsh = shutil.which("tclsh")
    if tclsh is None:
        pytest.fail("tclsh is not installed: run scripts/bootstrap.sh")
    files = [out / "build.tcl", *out.glob("*.xdc"), *out.glob("program.tcl")]
    for f in files:
        proc = subprocess.run([tclsh, str(ROOT / "platforms" / "tclcheck.tcl"), str(f)],
                              capture_output=True, text=True)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert proc.stdout.splitlines()[-1] == f"ok {f}"


def test_tcl_checker_catches_broken_scripts(tmp_path):
    bad = tmp_path / "bad.tcl"
    bad.write_text("create_project x\nif {1} {\n  puts [get_files\n")
    proc = subprocess.run(["tclsh", str(ROOT / "platforms" / "tclcheck.tcl"), str(bad)],
                          capture_output=True, text=True)
    assert proc.returncode == 1


def test_generated_verilog_is_lint_clean(generated):
    """`verilator --lint-only -Wall` with the waivers of platforms/lint.vlt, each justified
    there, reports nothing."""
    name, out = generated
    verilator_env()
    proc = subprocess.run(
        ["verilator", "--lint-only", "-Wall", "--no-timing", str(out / "lint.vlt"),
         str(out / "bfp_accel_top.v"), str(out / "bfp_accel.v"), "-v",
         str(xilinx_cell_models()), "-v", str(xilinx_cell_models().with_name("cells_xtra.v")),
         "--top-module", "bfp_accel_top"],
        capture_output=True, text=True, env=os.environ)
    assert proc.returncode == 0 and "%Warning" not in proc.stderr, proc.stderr[-3000:]


def test_repeated_generation_is_cached(generated):
    name, out = generated
    before = (out / "bfp_accel.v").stat().st_mtime_ns
    proc = run_build("--platform", name, "--rows", "8", "--cols", "8", "--synth", "none",
                     "--out", str(out))
    assert proc.returncode == 0
    assert (out / "bfp_accel.v").stat().st_mtime_ns == before


@pytest.mark.parametrize("args,message", [
    (["--platform", "de10"], "invalid choice"),
    ([], "--platform is required"),
    (["--platform", "zcu104", "--rows", "0"], "--rows"),
    (["--platform", "zcu104", "--rows", "6"], "power of two"),
    (["--platform", "zcu104", "--cols", "x"], "--cols"),
    (["--platform", "pynq-z1", "--rows", "8", "--dsp-rows", "9"], "--dsp-rows"),
    (["--platform", "zcu104", "--dsp-rows", "2"], "--dsp-rows"),
    (["--platform", "pynq-z1", "--acc-ram", "ultra"], "UltraRAM"),
    (["--platform", "zcu104", "--acc-ram", "bram"], "--acc-ram"),
    (["--platform", "vu9p", "--program", "--host", "board"], "--host"),
    (["--platform", "zcu104", "--host", "board"], "--host"),
    (["--platform", "zcu104", "--synth", "quartus"], "--synth"),
    (["--platform", "zcu104", "--synth", "none", "--timing-strict"], "--timing-strict"),
    (["--platform", "zcu104", "--slr-groups", "2"], "one SLR"),
    (["--platform", "vu9p", "--slr-groups", "3"], "SLR1, SLR0"),
    (["--platform", "vu9p", "--slr-groups", "0"], "--slr-groups"),
    (["--platform", "pynq-z1", "--burst-beats", "32"], "burst_beats 32 is longer than port "
                                                       "'zynq7-hp' takes (max_burst 16"),
    (["--platform", "zcu104", "--burst-beats", "0"], "--burst-beats"),
    (["--platform", "zcu104", "--k-blocks", "--cols", "128"],
     "--k-blocks is not available for this zcu104 configuration: k_blocks needs depth >= 32, "
     "max(rows, bus bytes) dividing 32 and cols dividing 32 or 64"),
    (["--platform", "vu9p", "--k-blocks"], "cols 128, 64 bus bytes"),
    (["--platform", "pynq-z1", "--k-blocks", "--rows", "8", "--cols", "8", "--depth", "16"],
     "not depth 16"),
    (["--platform", "zcu104", "--epilogue"], "--epilogue is not available for this zcu104 "
                                             "configuration: epilogue (BFP8 output) needs "
                                             "rows == cols"),
    (["--platform", "pynq-z1", "--epilogue", "--block", "1"], "block >= 32 / rows, not 16x16"),
    (["--platform", "pynq-z1", "--conv"], "--conv needs --k-blocks"),
    (["--platform", "zcu104", "--k-blocks", "--conv"],
     "--conv is not available for this zcu104 configuration: conv needs k_blocks and cols at "
     "most 32"),
])
def test_bad_arguments_exit_2_with_the_choices(args, message):
    proc = run_build(*args)
    assert proc.returncode == 2
    assert message in proc.stderr


def test_program_dry_run_prints_the_commands(tmp_path):
    proc = run_build("--platform", "pynq-z1", "--rows", "8", "--cols", "8", "--synth", "none",
                     "--out", str(tmp_path), "--program", "--host", "pynq", "--dry-run")
    assert proc.returncode == 0, proc.stderr
    assert "scp" in proc.stdout and "bfp_pynq_z1.hwh" in proc.stdout
    proc = run_build("--platform", "zcu104", "--rows", "8", "--cols", "8", "--synth", "none",
                     "--out", str(tmp_path), "--program", "--dry-run")
    assert "openFPGALoader" in proc.stdout


def test_program_without_a_bitstream_or_vivado_fails_clearly(tmp_path):
    proc = run_build("--platform", "zcu104", "--rows", "8", "--cols", "8", "--synth", "none",
                     "--out", str(tmp_path), "--program")
    assert proc.returncode == 1 and "no bitstream" in proc.stderr
    if shutil.which("vivado") is None:
        proc = run_build("--platform", "zcu104", "--rows", "8", "--cols", "8", "--synth",
                         "vivado", "--out", str(tmp_path))
        assert proc.returncode == 1
        assert "vivado -mode batch -source build.tcl" in proc.stderr


@pytest.mark.slow
def test_yosys_estimate_of_a_small_configuration(tmp_path):
    """The whole estimate flow (two Yosys runs of a 4x4 accelerator, so ``slow``; the
    report's fit logic runs by default below, on a given estimate)."""
    proc = run_build("--platform", "pynq-z1", "--rows", "4", "--cols", "4", "--out",
                     str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    report = json.loads((tmp_path / "report.json").read_text())
    keys = {"LUT", "FF", "DSP", "BRAM36", "URAM"}
    assert {"platform", "device", "config", "macs_per_cycle", "resources", "capacity",
            "utilization", "fits", "estimate_method"} <= set(report)
    assert set(report["resources"]) == set(report["capacity"]) == set(report["utilization"]) \
        == keys
    assert report["fits"] and report["macs_per_cycle"] == 16
    assert report["resources"]["DSP"] >= 16 and report["estimate_method"].startswith("full")
    assert (tmp_path / "report.md").read_text().startswith("# Pynq-Z1")


def test_a_configuration_that_does_not_fit_exits_1_naming_the_resource(tmp_path, monkeypatch):
    import dataclasses

    import build
    import platforms.estimate
    import platforms.timing

    # the estimate and the timing report as Yosys would give them (the flow itself:
    # test_yosys_estimate_of_a_small_configuration, slow); what is checked is what build.py
    # makes of them
    resources = {"LUT": 9000, "FF": 12000, "DSP": 16, "BRAM36": 8.0, "URAM": 0, "CARRY": 300,
                 "LUTRAM": 200}
    timing = {"family": "xc7", "target_mhz": 100.0, "budget_levels": 13, "max_levels": 9,
              "fanout_budget": 1000, "max_fanout": 400, "within_budget": True,
              "measured_on": "the whole design", "clocks": {}, "deepest_paths": [],
              "high_fanout_nets": [], "combinational_loops": []}
    monkeypatch.setattr(platforms.estimate, "estimate_accelerator",
                        lambda *args, **kwargs: (dict(resources), "full (given)"))
    monkeypatch.setattr(platforms.timing, "accelerator_timing",
                        lambda *args, **kwargs: dict(timing))
    tiny = dataclasses.replace(PLATFORMS["pynq-z1"],
                               capacity={"LUT": 53200, "FF": 106400, "DSP": 10, "BRAM36": 140,
                                         "URAM": 0})
    monkeypatch.setitem(build.PLATFORMS, "pynq-z1", tiny)
    code = build.main(["--platform", "pynq-z1", "--rows", "4", "--cols", "4", "--out",
                       str(tmp_path)])
    assert code == 1
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["over_capacity"] == ["DSP"] and not report["fits"]
    assert "DSP over capacity" in (tmp_path / "report.md").read_text()


# The configuration the hierarchical estimate is checked on against full synthesis: 32x32
# with the ZCU104's settings (xcup, two MACs per DSP48E2, block 8, accumulation slots in
# URAM: the quadratic parts at four times the fit points' size). The Pynq-Z1 default, 16x16
# with two MACs per DSP48E1, is synthesised whole (platforms.estimate.FULL_LIMIT).
FULL_CHECKS = {
    "zcu104 32x32": ("zcu104", {"rows": 32, "cols": 32}, "xcup", "accel_32x32_full",
                     lambda c: c["acc_ram"] == "ultra" and c["packing"] == 2),
}


@pytest.mark.slow
@pytest.mark.parametrize("check", sorted(FULL_CHECKS))
def test_hierarchical_estimate_matches_full_synthesis(check):
    """The fitted estimate against a full Yosys run of the same configuration: within 5 % for
    LUT and FF, exact for DSP and URAM, within 2 BRAM36."""
    from platforms.estimate import _cached_synth, estimate_accelerator
    board, overrides, family, name, shape = FULL_CHECKS[check]
    cfg = PLATFORMS[board].config(**overrides)
    assert shape(cfg)
    est, method = estimate_accelerator(cfg, family, ROOT / "build" / "estimates")
    assert method.startswith("hierarchical")
    full = _cached_synth(cfg, family, ROOT / "build" / "estimates", name)
    print(f"estimate {est}\nfull synthesis {full}")
    assert abs(est["LUT"] - full["LUT"]) <= 0.05 * full["LUT"]
    assert abs(est["FF"] - full["FF"]) <= 0.05 * full["FF"]
    assert est["DSP"] == full["DSP"] and est["URAM"] == full.get("URAM", 0)
    assert abs(est["BRAM36"] - full["BRAM36"]) <= 2


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(PLATFORMS))
def test_default_configuration_builds_and_fits_with_headroom(name):
    proc = run_build("--platform", name)
    assert proc.returncode == 0, proc.stderr
    report = json.loads((ROOT / "build" / name / "report.json").read_text())
    assert report["fits"] and report["within_headroom"]


@pytest.mark.slow
def test_one_slr_group_drops_the_pblocks(tmp_path):
    from platforms import vivado
    proc = run_build("--platform", "vu9p", "--rows", "8", "--cols", "8", "--slr-groups", "1",
                     "--synth", "none", "--out", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    assert "pblock" not in (tmp_path / "bfp_vu9p.xdc").read_text()
    assert "_slr_tx" not in (tmp_path / "bfp_accel.v").read_text()
    with pytest.raises(ValueError, match="SLR plan"):
        vivado.xdc(PLATFORMS["zcu104"], 2)


def test_a_second_read_port_alone_gets_an_hp_port_of_its_own(tmp_path):
    """``--read-ports 2`` with one write port: m_axi_mem1 is read-only, on HP1 (and with 3,
    m_axi_mem2 on HP2); 4 is refused."""
    proc = run_build("--platform", "pynq-z1", "--rows", "8", "--cols", "8", "--write-ports", "1",
                     "--read-ports", "2", "--synth", "none", "--out", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    top = (tmp_path / "bfp_accel_top.v").read_text()
    tcl = (tmp_path / "build.tcl").read_text()
    assert "m_axi_mem1_araddr" in top and "m_axi_mem1_rdata" in top
    assert "m_axi_mem1_awaddr" not in top and "m_axi_mem2" not in top
    assert "ASSOCIATED_BUSIF s_axi_control:m_axi_mem:m_axi_mem1," in top
    assert '/ps/S_AXI_HP1" Clk' in tcl and "accel/m_axi_mem1]" in tcl
    assert "S_AXI_HP2" not in tcl
    # three read ports with one write port: m_axi_mem2 read-only too, on HP2
    proc = run_build("--platform", "pynq-z1", "--rows", "8", "--cols", "8", "--write-ports", "1",
                     "--read-ports", "3", "--synth", "none", "--out", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    top = (tmp_path / "bfp_accel_top.v").read_text()
    tcl = (tmp_path / "build.tcl").read_text()
    assert "m_axi_mem2_araddr" in top and "m_axi_mem2_awaddr" not in top
    assert '/ps/S_AXI_HP2" Clk' in tcl and "accel/m_axi_mem2]" in tcl
    assert "S_AXI_HP3" not in tcl
    proc = run_build("--platform", "pynq-z1", "--read-ports", "5", "--synth", "none",
                     "--out", str(tmp_path))
    assert proc.returncode == 2 and "--read-ports" in proc.stderr


def test_the_pynq_z1_default_is_synthesised_whole():
    """Its resources and timing are of the design itself, not of the hierarchical fit."""
    from platforms.estimate import FULL_LIMIT
    cfg = PLATFORMS["pynq-z1"].config()
    assert cfg["rows"] * cfg["cols"] <= FULL_LIMIT
    assert cfg["packing"] == 2 and cfg["dsp_slice"] == "DSP48E1" and "dsp_rows" not in cfg


def test_the_dma_bursts_follow_the_boards_port(tmp_path):
    """Every board's default bursts are the accelerator's default 16 beats (the Zynq ports'
    limit; the VCU118's MIG takes 256, the design keeps 16), so the default configuration
    does not name them; a shorter or (where the port takes it) longer burst is built and
    recorded for the host."""
    from firmware.spec import boards
    from firmware.spec.ports import PORTS

    for name, board in PLATFORMS.items():
        assert "burst_beats" not in board.config(), name
        assert board.config(burst_beats=8)["burst_beats"] == 8
        assert boards.host_section(name, board.config())["burst_beats"] == 16
    assert PORTS[boards.board("pynq-z1").port]["protocol"] == "AXI3"
    assert PLATFORMS["vu9p"].config(burst_beats=64)["burst_beats"] == 64
    with pytest.raises(ValueError, match=r"burst_beats 32 .*max_burst 16"):
        PLATFORMS["zcu104"].config(burst_beats=32)
    proc = run_build("--platform", "pynq-z1", "--rows", "8", "--cols", "8", "--burst-beats",
                     "4", "--synth", "none", "--out", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["config"]["burst_beats"] == 4 and report["host"]["burst_beats"] == 4


def test_the_k_block_mode_is_built_and_recorded(tmp_path):
    """``--k-blocks`` builds the mode (its float32 adder is in the Verilog) and the report's
    configuration says so; without it the configuration does not name it."""
    proc = run_build("--platform", "pynq-z1", "--rows", "8", "--cols", "8", "--k-blocks",
                     "--synth", "none", "--out", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["config"]["k_blocks"] is True
    assert "kb_adder" in (tmp_path / "bfp_accel.v").read_text()
    assert all("k_blocks" not in board.config() for board in PLATFORMS.values())


def test_bfp8_output_is_built_and_recorded(tmp_path):
    """``--epilogue`` builds BFP8 output (the tile quantiser is in the Verilog) and the
    report's configuration says so; no board's default has it."""
    proc = run_build("--platform", "pynq-z1", "--rows", "8", "--cols", "8", "--k-blocks",
                     "--epilogue", "--synth", "none", "--out", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["config"]["epilogue"] is True
    assert "quantizer" in (tmp_path / "bfp_accel.v").read_text()
    assert all("epilogue" not in board.config() for board in PLATFORMS.values())


def test_forward_convolutions_are_built_and_recorded(tmp_path):
    """``--conv`` builds the convolution cursor and the report's configuration says so; no
    board's default has it."""
    proc = run_build("--platform", "pynq-z1", "--rows", "8", "--cols", "8", "--k-blocks",
                     "--conv", "--synth", "none", "--out", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["config"]["conv"] is True
    assert "unfold" not in report["config"]
    verilog = (tmp_path / "bfp_accel.v").read_text()
    assert "div_num_h" in verilog and "uf_nb" not in verilog
    assert all("conv" not in board.config() for board in PLATFORMS.values())


def test_convolutions_with_the_epilogue_build_the_unfolding_reader():
    """``--conv`` with ``--epilogue`` also builds the quantiser's unfolding reader (a first
    layer's float32 input unfolded): the configuration the build elaborates and records has
    ``unfold``; ``--conv`` alone has not (its Verilog lacks the reader, above)."""
    import build
    base = ["--platform", "pynq-z1", "--rows", "8", "--cols", "8", "--k-blocks", "--conv"]
    assert build.parse_args([*base, "--epilogue"])[1].cfg["unfold"] is True
    assert "unfold" not in build.parse_args(base)[1].cfg
