"""Resource estimates of small arrays with Yosys."""

from pathlib import Path

import pytest

from platforms.estimate import bram_model, group_cells, synthesize, uram_model
from rtl.export import generate_verilog

ROOT = Path(__file__).resolve().parent.parent


def test_group_cells():
    got = group_cells({"LUT6": 3, "LUT2": 1, "FDRE": 5, "RAMB18E2": 3, "RAMB36E2": 1,
                       "DSP48E2": 2, "CARRY8": 1, "BUFG": 1, "XYZ": 2})
    assert (got["LUT"], got["FF"], got["BRAM36"], got["DSP"], got["CARRY"]) == (4, 5, 2.5, 2, 1)
    assert got["other"] == 2


def test_small_array_on_xc7_accumulates_in_dsps(tmp_path):
    # One DSP48E1 per MAC with the accumulator inside it: no carry chains in the fabric.
    netlist = generate_verilog("array", tmp_path, name="arr", fmt="il", rows=2, cols=3)
    res = synthesize(netlist, "arr", "xc7")
    assert res["DSP"] == 6
    assert res["CARRY"] <= 1
    assert res["LUT"] / 6 <= 30


def test_small_packed_array_on_xcup_uses_half_a_dsp_per_mac(tmp_path):
    # rows 3 -> pairs (0, 1) and (2, zero): 2 DSP48E2 per column.
    netlist = generate_verilog("array", tmp_path, name="arr", fmt="il", rows=3, cols=2,
                               family="xcup")
    res = synthesize(netlist, "arr", "xcup")
    assert res["DSP"] == 4


def test_synthesize_rejects_unknown_family(tmp_path):
    with pytest.raises(ValueError, match="family"):
        synthesize(tmp_path / "x.il", "x", "ice40")


def test_ultraram_accumulation_slots_leave_block_ram(tmp_path):
    # 4x4 PEs, block 4: 16 slots x 4 rows deep, 4 x 32 bits wide -> two URAM288 (72 bits
    # each) on xcup, as the model counts them.
    netlist = generate_verilog("datapath", tmp_path, name="dp", fmt="il", rows=4, cols=4,
                               depth=64, slots=8, acc_slots=16, acc_ram="ultra")
    assert synthesize(netlist, "dp", "xcup")["URAM"] == 2
    assert uram_model({"rows": 4, "cols": 4, "block": 4, "acc_ram": "ultra"}) == 2


def test_uram_and_bram_models_of_the_accumulation_slots():
    # The ZCU104 default at block 8: 64 C tiles x 32 rows of 64 int32 = 2048 x 2048 bits.
    cfg = {"rows": 32, "cols": 64, "depth": 256, "block": 8, "data_width": 128}
    assert uram_model(cfg) == 0
    assert uram_model({**cfg, "acc_ram": "ultra"}) == 1 * 29          # 2048 deep, 2048 / 72
    assert bram_model(cfg) - bram_model({**cfg, "acc_ram": "ultra"}) == 114   # 2048 x 18


def test_a_write_back_build_is_fitted_on_square_rest_points(tmp_path, monkeypatch):
    # the BFP8 write-back builds on square arrays alone: its rest is synthesized at 8x8 and
    # 16x16 and extrapolated along the diagonal; a non-square array is refused
    import platforms.estimate as est
    seen = []

    def rest(params, family, work_dir, name, progress=None):
        r, c = params["rows"], params["cols"]
        seen.append((r, c))
        if params.get("epilogue") and r != c:
            raise ValueError("not square")
        return {"LUT": 1000 + 30 * r + 20 * c, "BRAM36": 10}

    monkeypatch.setattr(est, "_cached_rest", rest)
    monkeypatch.setattr(est, "_cached_array",
                        lambda r, c, *a, **k: {"LUT": 5 * r * c})
    cfg = {"rows": 32, "cols": 32, "data_width": 128, "depth": 256, "block": 8,
           "k_blocks": True, "epilogue": True}
    res, method = est.estimate_accelerator(cfg, "xcup", tmp_path)
    assert seen == [(8, 8), (16, 16)]
    assert res["LUT"] == 1000 + 50 * 32 + 5 * 32 * 32
    assert "8x8, 16x16, bus" in method
    seen.clear()
    est.estimate_accelerator({**cfg, "epilogue": False}, "xcup", tmp_path)
    assert seen == list(est.REST_POINTS)
    with pytest.raises(ValueError, match="square"):
        est.estimate_accelerator({**cfg, "cols": 64}, "xcup", tmp_path)
