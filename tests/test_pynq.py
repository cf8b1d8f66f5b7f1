"""The board path: firmware.spec.boards, the pynq backend's resolution of bitstream, report, .hwh
and base address, the command line (``--backend pynq --board B``), and the simulated board
(sim.native.pynq_sim) it all runs on here."""

import ast
import dataclasses
import json
import sys
from pathlib import Path

import numpy as np
import pytest

from firmware import Device
from firmware.ml import train
from firmware.runtime import pynq_backend
from firmware.spec import boards
from sim.native.pynq_sim import SimBoard, hwh_text, write_bitstream_dir, write_hwh, write_report

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def board(monkeypatch, tmp_path):
    """The Pynq-Z1 (its default configuration from firmware.spec.boards) as a simulated board,
    installed as ``pynq``; no real overlay directory or repository build is looked at."""
    monkeypatch.setattr(pynq_backend, "OVERLAY_DIR", tmp_path / "no-overlays")
    monkeypatch.setattr(pynq_backend, "_REPO", tmp_path / "repo")
    monkeypatch.chdir(tmp_path)
    b = SimBoard("pynq-z1")
    b.install(monkeypatch)
    return b


def _operands(seed=4, m=37, k=70, n=29):
    rng = np.random.default_rng(seed)
    return (rng.integers(-128, 128, (m, k), dtype=np.int8),
            rng.integers(-128, 128, (k, n), dtype=np.int8))


# -- firmware.spec.boards and the build ------------------------------------------------------
def test_board_facts_are_stated_once():
    from platforms import PLATFORMS
    from platforms.vivado import build_tcl
    assert boards.BOARDS["pynq-z1"].base_addr == 0x43C0_0000
    assert boards.BOARDS["zcu104"].base_addr == 0xA000_0000
    for name, p in PLATFORMS.items():
        b = boards.BOARDS[name]
        assert (p.base_addr, p.clock_mhz, p.data_width, p.addr_width) == \
            (b.base_addr, b.clock_mhz, b.data_width, b.addr_width)
        assert p.config() == b.config() and p.packing == b.packing
        assert f"set_property offset 0x{b.base_addr:08X}" in build_tcl(p)
    # the VCU118's MIG arbitrates as its port preset (the memory model) says
    from firmware.spec.ports import MIG_ARBITRATION, PORTS
    mig = MIG_ARBITRATION[PORTS["vcu118-ddr4"]["dram_arbitration"]]
    assert f"DDR4_AxiArbitrationScheme {{{mig}}}" in build_tcl(PLATFORMS["vu9p"])
    cfg = boards.config("pynq-z1")
    assert (cfg["rows"], cfg["cols"], cfg["data_width"]) == (16, 16, 64)
    with pytest.raises(ValueError, match="pynq-z1"):
        boards.board("de10")


def test_build_writes_the_host_section(tmp_path):
    """build.py's report.json has the "host" section with or without an estimate (the
    generation step writes it; an estimate of the same configuration is kept)."""
    import build
    from platforms import PLATFORMS
    board = PLATFORMS["zcu104"]
    cfg = board.config(rows=4, cols=4)
    path = build._host_report(board, cfg, tmp_path)
    report = json.loads(path.read_text())
    assert report["config"] == cfg and report["platform"] == "zcu104"
    host = report["host"]
    assert host["base_addr"] == "0xA0000000" and host["clock_mhz"] == 200.0
    assert host["bitfile"] == "bfp_zcu104.bit" and host["ip_name"] == "accel"
    assert (host["rows"], host["cols"], host["data_width"]) == (4, 4, 128)
    path.write_text(json.dumps({**report, "fits": True, "resources": {"LUT": 1}}))
    build._host_report(board, cfg, tmp_path)
    kept = json.loads(path.read_text())
    assert kept["fits"] and kept["host"] == host
    build._host_report(board, board.config(rows=8, cols=8), tmp_path)   # another build
    fresh = json.loads(path.read_text())
    assert "fits" not in fresh and fresh["host"]["rows"] == 8
    t = pynq_backend.resolve(report=path)
    assert t.board == "zcu104" and t.base_addr == 0xA000_0000 and t.clock_hz == 200e6


# -- the .hwh ------------------------------------------------------------------------------------
def test_hwh_parsing(tmp_path):
    for name, b in boards.BOARDS.items():
        path = write_hwh(tmp_path / f"{name}.hwh", name)
        assert pynq_backend.hwh_base_addr(path) == b.base_addr
        ranges = pynq_backend.hwh_ranges(path)
        assert set(ranges) == {"accel", "axi_gpio_0"}
        assert ranges["accel"]["high_addr"] == b.base_addr + 0xFFFF
    # as Vivado writes it: attributes in any order, other instances around
    text = """<?xml version="1.0"?><EDKSYSTEM><MODULES>
      <MODULE INSTANCE="processing_system7_0"><MEMORYMAP>
        <MEMRANGE ADDRESSBLOCK="S_AXI_LITE" BASENAME="C_BASEADDR" BASEVALUE="0x40400000"
          HIGHNAME="C_HIGHADDR" HIGHVALUE="0x4040FFFF" INSTANCE="axi_dma_0"
          MASTERBUSINTERFACE="M_AXI_GP0" MEMTYPE="REGISTER" SLAVEBUSINTERFACE="S_AXI_LITE"/>
        <MEMRANGE INSTANCE="ddr4_0" MEMTYPE="MEMORY" BASEVALUE="0x400000000"
          HIGHVALUE="0x47FFFFFFF" MASTERBUSINTERFACE="M_AXI_HPM1_FPD"/>
        <MEMRANGE INSTANCE="my_accel" MEMTYPE="REGISTER" BASEVALUE="0x43C10000"
          HIGHVALUE="0x43C1FFFF" MASTERBUSINTERFACE="M_AXI_GP0"/>
      </MEMORYMAP></MODULE></MODULES></EDKSYSTEM>"""
    assert pynq_backend.hwh_base_addr(text, "my_accel") == 0x43C1_0000
    with pytest.raises(ValueError, match=r"'accel'.*axi_dma_0.*my_accel"):
        pynq_backend.hwh_base_addr(text)
    with pytest.raises(ValueError, match="not valid XML"):
        pynq_backend.hwh_ranges("<EDKSYSTEM><MEMRANGE")


def test_resolution_order(tmp_path, monkeypatch):
    monkeypatch.setattr(pynq_backend, "OVERLAY_DIR", tmp_path / "none")
    monkeypatch.setattr(pynq_backend, "_REPO", tmp_path / "repo")
    monkeypatch.chdir(tmp_path)
    # nothing but the board: firmware.spec.boards
    t = pynq_backend.resolve(board="zcu104")
    assert (t.base_addr, t.clock_hz, t.bitfile, t.report) == (0xA000_0000, 200e6, None, None)
    assert t.sources["base_addr"] == "board default" and t.expected is None
    assert t.configuration() == {"rows": 32, "cols": 64, "data_width": 128}
    # a .hwh beside the bitfile, no report
    bit = write_bitstream_dir(tmp_path / "a", "pynq-z1", report=False)
    write_hwh(bit.with_suffix(".hwh"), "pynq-z1", base_addr=0x43C4_0000)
    t = pynq_backend.resolve(bitfile=bit, board="pynq-z1")
    assert (t.base_addr, t.sources["base_addr"]) == (0x43C4_0000, "hwh")
    # the report beside the bitfile wins over the board; an explicit argument over both
    bit = write_bitstream_dir(tmp_path / "b", "pynq-z1", {"rows": 8, "cols": 8})
    t = pynq_backend.resolve(bitfile=bit)
    assert t.board == "pynq-z1" and t.report == bit.parent / "report.json"
    assert t.expected == {"rows": 8, "cols": 8, "data_width": 64}
    assert (t.base_addr, t.sources["base_addr"], t.clock_hz) == (0x43C0_0000, "report", 100e6)
    t = pynq_backend.resolve(bitfile=bit, base_addr="0x43C20000", clock_hz=50e6)
    assert (t.base_addr, t.clock_hz) == (0x43C2_0000, 50e6)
    # found from the board alone: build/<board>/ of the repository, bitfile beside it
    repo_bit = write_bitstream_dir(tmp_path / "repo" / "build" / "pynq-z1", "pynq-z1")
    t = pynq_backend.resolve(board="pynq-z1")
    assert t.bitfile == repo_bit and t.report == repo_bit.parent / "report.json"
    # a report and a .hwh that disagree, a report of another board, missing files
    write_report(tmp_path / "b" / "report.json", "pynq-z1", base_addr="0x40000000")
    with pytest.raises(ValueError, match="0x40000000.*0x43c00000.*same build"):
        pynq_backend.resolve(bitfile=bit)
    with pytest.raises(ValueError, match="for pynq-z1, not zcu104"):
        pynq_backend.resolve(board="zcu104", report=tmp_path / "b")
    with pytest.raises(FileNotFoundError, match="no bitstream"):
        pynq_backend.resolve(bitfile=tmp_path / "nope.bit")
    with pytest.raises(FileNotFoundError, match="no build report"):
        pynq_backend.resolve(report=tmp_path / "nope.json")


# -- the backend on the simulated board ----------------------------------------------------------
def test_device_takes_everything_from_the_build(board, tmp_path):
    bit = write_bitstream_dir(tmp_path / "overlay", "pynq-z1")
    dev = Device("pynq", board="pynq-z1", bitfile=bit)
    assert (dev.rows, dev.cols, dev.data_width) == (16, 16, 64)
    assert board.loaded == [str(bit)]
    t = dev.driver.target
    assert t.base_addr == 0x43C0_0000 and t.clock_hz == 100e6
    a, b = _operands()
    assert np.array_equal(dev.gemm(a, b, out="int32"), a.astype(np.int32) @ b)
    assert board.flushes >= 2 and board.invalidates >= 1


@pytest.mark.parametrize("skip", ["flush", "invalidate"])
def test_a_missing_cache_operation_is_caught(board, tmp_path, monkeypatch, skip):
    """The simulated board keeps the CPU's view and the DRAM apart: a driver that does not
    flush what it wrote, or invalidate what it reads, gets a wrong product."""
    bit = write_bitstream_dir(tmp_path / "overlay", "pynq-z1")
    dev = Device("pynq", board="pynq-z1", bitfile=bit)
    a, b = _operands()
    assert np.array_equal(dev.gemm(a, b, out="int32"), a.astype(np.int32) @ b)
    monkeypatch.setattr(pynq_backend._Buffer, skip, lambda self: None)
    a, b = _operands(seed=5)
    assert not np.array_equal(dev.gemm(a, b, out="int32"), a.astype(np.int32) @ b)


def test_report_and_hardware_disagree(board, tmp_path):
    bit = write_bitstream_dir(tmp_path / "overlay", "pynq-z1",
                              {"rows": 8, "cols": 8, "data_width": 128})
    with pytest.raises(ValueError) as e:
        Device("pynq", board="pynq-z1", bitfile=bit)
    msg = str(e.value)
    assert "16x16 array on a 64-bit bus" in msg and "8x8 array on a 128-bit bus" in msg
    assert str(tmp_path / "overlay" / "report.json") in msg
    with pytest.raises(ValueError, match="nothing at 0x40000000"):
        Device("pynq", base_addr=0x4000_0000)
    with pytest.raises(ValueError, match="board has a 16x16 array"):
        Device("pynq", rows=8, board="pynq-z1")


def _small_digits(monkeypatch, n_train=192, n_test=64):
    task = train.TASKS["digits-mlp"]
    full = task.load()

    def load():
        return full[0][:n_train], full[1][:n_train], full[2][:n_test], full[3][:n_test]
    monkeypatch.setitem(train.TASKS, "digits-mlp", dataclasses.replace(task, load=load))


def _train(tmp_path, name, *args):
    out = tmp_path / f"{name}.json"
    code = train.main(["--task", "digits-mlp", "--precision", "int8", "--epochs", "1",
                       "--batch", "64", "--seed", "2", "--out", str(out), *args])
    assert code == 0
    return json.loads(out.read_text())


def test_command_line_trains_on_the_board_from_its_report(board, tmp_path, monkeypatch,
                                                           capsys):
    """``--backend pynq --board pynq-z1`` and nothing else: the build is found in
    build/pynq-z1/, the array and bus (16x16, 64 bits) come from its report and the hardware,
    and the weights are the golden backend's bit for bit."""
    _small_digits(monkeypatch)
    write_bitstream_dir(tmp_path / "repo" / "build" / "pynq-z1", "pynq-z1")
    got = _train(tmp_path, "pynq", "--backend", "pynq", "--board", "pynq-z1")
    want = _train(tmp_path, "golden", "--backend", "golden")
    assert got["backend"] == "pynq" and got["array"] == [16, 16]
    assert got["weights_digest"] == want["weights_digest"]
    assert got["accelerator_cycles"] > 0 and board.loaded


@pytest.mark.parametrize("args,message", [
    (["--backend", "golden", "--board", "pynq-z1"], "--board: only with --backend pynq"),
    (["--backend", "rtl", "--base-addr", "0x43C00000"], "--base-addr: only with"),
    (["--backend", "pynq"], "needs --board"),
    (["--backend", "pynq", "--board", "de10"], "invalid choice"),
    (["--backend", "pynq", "--board", "pynq-z1", "--base-addr", "x"], "--base-addr"),
    (["--backend", "pynq", "--board", "pynq-z1", "--report", "nope.json"], "no build report"),
    (["--backend", "pynq", "--board", "pynq-z1", "--data-width", "96"], "--data-width"),
])
def test_bad_board_arguments_exit_2(args, message, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as e:
        train.main(["--task", "digits-mlp", "--epochs", "1", *args])
    assert e.value.code == 2
    assert message in capsys.readouterr().err


def test_without_pynq_the_error_says_so(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "pynq", None)
    with pytest.raises(RuntimeError, match="needs the 'pynq' package"):
        pynq_backend.connect(board="pynq-z1", base_addr=0x43C0_0000)


# -- installing on the board (the numpy-only run: tests/test_numpy_only.py) -----------------
def test_board_side_code_parses_as_python_3_10():
    """PYNQ's image has Python 3.10: no 3.11 syntax, no 3.11-only modules in firmware/."""
    for path in sorted((ROOT / "firmware").rglob("*.py")):
        tree = ast.parse(path.read_text(), feature_version=(3, 10))
        for node in ast.walk(tree):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                     [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            for name in names:
                assert name.split(".")[0] not in ("tomllib", "wsgiref.types"), (path, name)
            if isinstance(node, ast.Attribute) and node.attr in ("Self", "ExceptionGroup"):
                pytest.fail(f"{path}: {node.attr} is Python 3.11")


def test_hwh_text_is_the_generated_one_of_each_board():
    for name in boards.BOARDS:
        assert f'INSTANCE="{boards.IP_NAME}"' in hwh_text(name)


@pytest.mark.slow
def test_command_line_full_epoch_on_the_board_equals_golden(board, tmp_path):
    """A whole epoch of digits-mlp at the Pynq-Z1's default (all 1437 training images)."""
    bit = write_bitstream_dir(tmp_path / "overlay", "pynq-z1")
    got = _train(tmp_path, "pynq", "--backend", "pynq", "--board", "pynq-z1",
                 "--bitfile", str(bit))
    want = _train(tmp_path, "golden", "--backend", "golden")
    assert got["array"] == [16, 16] and got["weights_digest"] == want["weights_digest"]
