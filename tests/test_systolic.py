import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rtl.systolic import SystolicArray
from sim.models import datapath as models
from sim.models import golden
from sim.testbenches.harness import run


def simulate(rows, cols, schedule, packing=1, dsp_rows=None, slr_cols=(), dsp_slice="DSP48E2",
             partial=False):
    """``schedule``: per cycle, ``None`` (bubble) or ``(a_col, b_row, first, last)``, with
    ``partial`` ``(a_col, b_row, first, last, read_rows)`` (0: all rows).

    Returns the tiles seen on ``o_stream`` (rows checked to arrive in order) and asserts the
    output protocol: rows 0..R-1 of a tile (0..read_rows - 1) on consecutive cycles,
    ``last`` on the last, row 0 exactly :attr:`SystolicArray.latency` cycles after the
    tile's ``last`` step.
    """
    dut = SystolicArray(rows, cols, packing=packing, dsp_rows=dsp_rows, slr_cols=slr_cols,
                        dsp_slice=dsp_slice, partial=partial)
    tiles, current = [], []
    last_steps = [c for c, s in enumerate(schedule) if s is not None and s[3]]
    read = [(s[4] or rows) if partial else rows for s in schedule if s is not None and s[3]]
    n_emit = len(last_steps)
    done = {"cycles": 0}

    async def bench(ctx):
        for step in schedule:
            if step is None:
                ctx.set(dut.i_stream.valid, 0)
            else:
                a, b, first, last = step[:4]
                ctx.set(dut.i_stream.valid, 1)
                ctx.set(dut.i_stream.payload,
                        {"a": [int(x) for x in a], "b": [int(x) for x in b],
                         "first": first, "last": last,
                         **({"rows": step[4]} if partial else {})})
            await ctx.tick()
        ctx.set(dut.i_stream.valid, 0)

    async def monitor(ctx):
        cycles, valid = 0, False
        while len(tiles) < n_emit:
            prev_valid = cycles > 0 and valid
            _, _, valid, p = await ctx.tick().sample(dut.o_stream.valid, dut.o_stream.payload)
            cycles += 1
            assert cycles < len(schedule) + dut.latency + rows + 10, "array output hung"
            if valid:
                assert p.row == len(current), "rows out of order"
                if p.row == 0:   # sampled at the end of cycle ``cycles - 1``
                    assert cycles - 1 - last_steps[len(tiles)] == dut.latency, "latency"
                else:
                    assert prev_valid, "a tile's rows are not on consecutive cycles"
                current.append([int(x) for x in p.data])
                assert p.last == (len(current) == read[len(tiles)])
                if p.last:
                    tiles.append(np.array(current, dtype=np.int32))
                    current.clear()
        done["cycles"] = cycles

    run(dut, bench, monitor, deadline_cycles=len(schedule) + 4 * (rows + cols) + 50)
    assert len(tiles) == n_emit, f"expected {n_emit} tiles, got {len(tiles)}"
    return tiles


def random_schedule(rng, rows, cols, ks, *, bubbles=0.0, accumulate=(), interval=None,
                    packing=1, slr_cols=(), read_rows=None):
    """Tiles of reduction lengths ``ks`` (tile t continues tile t-1 if t in ``accumulate``);
    with ``read_rows``, each tile's rows read out (0: all; steps of five fields), each
    ``last`` step the emit interval of the tile before it after that tile's (``interval``:
    one for all)."""
    array = SystolicArray(rows, cols, packing=packing, slr_cols=slr_cols, partial=True)
    gaps = [interval if interval is not None else
            array.emit_interval((read_rows[t - 1] if read_rows and t else 0) or rows)
            for t in range(len(ks))]
    schedule, last_emit = [], -10**9
    extreme = rng.random() < 0.3
    for t, k in enumerate(ks):
        emit = t == len(ks) - 1 or (t + 1) not in accumulate
        for s in range(k):
            while rng.random() < bubbles:
                schedule.append(None)
            if extreme:
                a = np.full(rows, -128, np.int8)
                b = np.full(cols, -128, np.int8)
            else:
                a = rng.integers(-128, 128, rows).astype(np.int8)
                b = rng.integers(-128, 128, cols).astype(np.int8)
            first = s == 0 and t not in accumulate
            last = s == k - 1 and emit
            if last:
                while len(schedule) - last_emit < gaps[t]:
                    schedule.append(None)
                last_emit = len(schedule)
            step = (a, b, first, last)
            schedule.append(step + (read_rows[t] if last else 0,) if read_rows else step)
    return schedule


def check(rows, cols, schedule, packing=1, slr_cols=(), dsp_slice="DSP48E2"):
    partial = any(s is not None and len(s) == 5 for s in schedule)
    want = models.systolic_array([s[:4] for s in schedule if s is not None], rows, cols)
    read = [(s[4] or rows) if partial else rows for s in schedule if s is not None and s[3]]
    got = simulate(rows, cols, schedule, packing, slr_cols=slr_cols, dsp_slice=dsp_slice,
                   partial=partial)
    for t, (g, w, r) in enumerate(zip(got, want, read, strict=True)):
        np.testing.assert_array_equal(g, w[:r], err_msg=f"tile {t}")


#: The MAC mappings: one per DSP48E1 (or LUTs), two per DSP48E2, two per DSP48E1.
MAPPINGS = [(1, "DSP48E2"), (2, "DSP48E2"), (2, "DSP48E1")]


@pytest.mark.parametrize("packing,dsp_slice", MAPPINGS)
@pytest.mark.parametrize("rows,cols", [(1, 1), (2, 3), (3, 2), (4, 4), (8, 8), (16, 16)])
def test_back_to_back_tiles(rows, cols, packing, dsp_slice):
    rng = np.random.default_rng(rows * 100 + cols)
    # K = 1 tiles at the minimum emit interval, then longer ones, with no gaps between them.
    ks = [1, 1, rows + cols, 5, 2 * (rows + cols)]
    check(rows, cols, random_schedule(rng, rows, cols, ks, packing=packing), packing,
          dsp_slice=dsp_slice)


@pytest.mark.parametrize("packing,dsp_slice", MAPPINGS)
@pytest.mark.parametrize("rows,cols", [(1, 3), (4, 4), (5, 3), (8, 8)])
def test_partial_read_out(rows, cols, packing, dsp_slice):
    # Tiles reading out 1..R rows (0: all), odd and even counts, back to back at each
    # tile's emit interval after the one before: the rows read equal the model's first
    # rows, the last one marked; a partial tile's interval is no more than a full one's.
    rng = np.random.default_rng(rows * 10 + cols + packing)
    read = [int(r) for r in rng.integers(0, rows + 1, 10)] + [1, rows, 1, 0]
    ks = [int(k) for k in rng.integers(1, 4, len(read))]
    array = SystolicArray(rows, cols, packing=packing, dsp_slice=dsp_slice, partial=True)
    assert all(array.emit_interval(r) <= array.min_emit_interval for r in range(1, rows + 1))
    assert array.emit_interval(rows) == array.min_emit_interval
    check(rows, cols, random_schedule(rng, rows, cols, ks, packing=packing, read_rows=read),
          packing, dsp_slice=dsp_slice)


@pytest.mark.parametrize("packing", [1, 2])
@pytest.mark.parametrize("rows,cols", [(4, 4), (5, 3), (8, 2)])
def test_partial_emit_interval_is_tight(rows, cols, packing):
    # One cycle under a partial tile's emit interval corrupts a later result for some data
    array = SystolicArray(rows, cols, packing=packing, partial=True)
    for r in range(1, rows):
        iv = array.emit_interval(r)
        if iv < 2:              # (one cycle apart is the least there is)
            continue
        failures = 0
        for seed in range(3):
            rng = np.random.default_rng(seed)
            read = [r, r, r, r]
            sched = random_schedule(rng, rows, cols, [1, 1, 1, 1], packing=packing,
                                    read_rows=read, interval=iv - 1)
            try:
                check(rows, cols, sched, packing)
            except AssertionError:
                failures += 1
        assert failures, f"packing={packing}, rows={r}: interval {iv} is not tight"


def test_partial_rows_refused():
    array = SystolicArray(4, 4, partial=True)
    for bad in (0, 5, 1.0, True):
        with pytest.raises(ValueError, match="rows must be an integer in 1..4"):
            array.emit_interval(bad)


@pytest.mark.parametrize("packing", [1, 2])
@pytest.mark.parametrize("rows,cols,slr_cols", [(1, 2, (1,)), (4, 6, (2, 5)), (5, 4, (3,)),
                                                 (8, 8, (4,))])
def test_slr_groups(rows, cols, slr_cols, packing):
    # Columns in SLR groups: the crossings' registers lengthen the skew and the read-out,
    # the results and the output protocol (checked against the declared latency) stay.
    dut = SystolicArray(rows, cols, packing=packing, slr_cols=slr_cols)
    plain = SystolicArray(rows, cols, packing=packing)
    stages = SystolicArray.SLR_STAGES * len(slr_cols)
    assert dut.latency == plain.latency + 2 * stages
    assert dut.min_emit_interval >= plain.min_emit_interval
    rng = np.random.default_rng(rows * 10 + cols)
    ks = [1, 1, rows + cols, 5, 2 * (rows + cols)]
    check(rows, cols, random_schedule(rng, rows, cols, ks, packing=packing,
                                      slr_cols=slr_cols), packing, slr_cols)


def test_slr_groups_are_submodules_with_crossing_registers():
    # Each group is an instance ``slr{g}`` (what the placement constraints name); every
    # crossing register is kept out of SRLs.
    from rtl.export import to_verilog
    text = to_verilog(SystolicArray(4, 6, packing=2, slr_cols=(2, 4)), "arr")
    for g in (1, 2):
        assert f"\\arr.slr{g}  slr{g} (" in text
    for name in ("hi0_c4_slr_tx1", "hi0_c4_slr_rx2", "readout_data5_slr_tx2",
                 "readout_data5_slr_rx1", "readout_cur4_slr_rx2", "b5_slr_tx0"):
        assert re.search(r'\(\* shreg_extract = "no" \*\)\s+(output|reg)[^;]*\b'
                         + name + r"\b", text), name


@pytest.mark.parametrize("slr_cols", [(), (2,)])
@pytest.mark.parametrize("rows,cols", [(2, 3), (4, 4), (5, 3)])
def test_min_emit_interval_is_tight(rows, cols, slr_cols):
    # One cycle less than the documented interval corrupts a result for some data.
    for packing in (1, 2):
        interval = SystolicArray(rows, cols, packing=packing,
                                 slr_cols=slr_cols).min_emit_interval
        failures = 0
        for seed in range(3):
            rng = np.random.default_rng(seed)
            sched = random_schedule(rng, rows, cols, [1, 1, 1, 1], interval=interval - 1)
            try:
                check(rows, cols, sched, packing, slr_cols)
            except AssertionError:
                failures += 1
        assert failures, f"packing={packing}: interval {interval} is not tight"


@pytest.mark.parametrize("dsp_slice", ["DSP48E2", "DSP48E1"])
@pytest.mark.parametrize("rows,k", [(2, 700), (3, 700), (2, 40000)])
def test_packed_long_sums_wrap_both_fields(rows, k, dsp_slice):
    # K = 700 steps of (-128)(-128) wrap the low 18-bit (16-bit on a DSP48E1) field of P many
    # times; K = 40000 also wraps the whole 48-bit P (S_hi * 2**18 > 2**47; on a DSP48E1,
    # S_hi * 2**16 does not, but the low field wraps at every fourth step). Mixed signs wrap
    # both ways.
    cols = 2
    rng = np.random.default_rng(rows)
    a = np.full((rows, k), -128, np.int8)
    a[-1, ::3] = 127
    b = np.full((k, cols), -128, np.int8)
    b[rng.integers(0, k, 50), 1] = 127
    steps = [(a[:, s], b[s, :], s == 0, s == k - 1) for s in range(k)]
    (tile,) = simulate(rows, cols, steps, packing=2, dsp_slice=dsp_slice)
    np.testing.assert_array_equal(tile, golden.gemm(a, b))


@pytest.mark.parametrize("dsp_rows", [0, 2])
def test_fabric_multiplier_rows(dsp_rows):
    """PEs that multiply in LUTs (shift-and-add) give the same sums, extremes included."""
    rows, cols, k = 4, 3, 40
    rng = np.random.default_rng(dsp_rows)
    a = rng.integers(-128, 128, (rows, k)).astype(np.int8)
    b = rng.integers(-128, 128, (k, cols)).astype(np.int8)
    a[:, :4] = -128
    b[:4, :] = np.array([-128, 127, -1], np.int8)
    steps = [(a[:, s], b[s, :], s == 0, s == k - 1) for s in range(k)]
    (tile,) = simulate(rows, cols, steps, dsp_rows=dsp_rows)
    np.testing.assert_array_equal(tile, golden.gemm(a, b))
    with pytest.raises(ValueError, match="dsp_rows"):
        SystolicArray(rows, cols, dsp_rows=rows + 1)


def test_extremes_all_minus_128_longest_sum():
    rows, cols, k = 2, 3, 300
    a = np.full((rows, k), -128, np.int8)
    b = np.full((k, cols), -128, np.int8)
    steps = [(a[:, s], b[s, :], s == 0, s == k - 1) for s in range(k)]
    (tile,) = simulate(rows, cols, steps)
    np.testing.assert_array_equal(tile, golden.gemm(a, b))
    assert tile[0, 0] == 300 * 16384


def test_zeros_and_accumulation_across_tiles():
    rows, cols = 3, 4
    rng = np.random.default_rng(7)
    check(rows, cols, random_schedule(rng, rows, cols, [4, 3, 6], accumulate={1, 2}))
    zeros = [(np.zeros(rows, np.int8), np.zeros(cols, np.int8), True, True)]
    (tile,) = simulate(rows, cols, zeros)
    assert not tile.any()


@settings(max_examples=20, deadline=None)
@given(rows=st.integers(1, 5), cols=st.integers(1, 5), seed=st.integers(0, 2**32 - 1),
       ks=st.lists(st.integers(1, 12), min_size=1, max_size=4),
       bubbles=st.sampled_from([0.0, 0.3]), data=st.data())
def test_random_shapes(rows, cols, seed, ks, bubbles, data):
    accumulate = {t for t in range(1, len(ks)) if data.draw(st.booleans())}
    packing, dsp_slice = data.draw(st.sampled_from(MAPPINGS))
    rng = np.random.default_rng(seed)
    check(rows, cols, random_schedule(rng, rows, cols, ks, bubbles=bubbles,
                                      accumulate=accumulate, packing=packing), packing,
          dsp_slice=dsp_slice)


def test_bad_shape():
    with pytest.raises(ValueError, match="rows"):
        SystolicArray(0, 4)
    with pytest.raises(ValueError, match="cols"):
        SystolicArray(4, True)
    with pytest.raises(ValueError, match="packing"):
        SystolicArray(4, 4, packing=3)
    with pytest.raises(ValueError, match="dsp_slice"):
        SystolicArray(4, 4, packing=2, dsp_slice="DSP48A1")
    for bad in [(0,), (4,), (2, 2), (3, 1), ("1",), (True,), 2]:
        with pytest.raises(ValueError, match="slr_cols"):
            SystolicArray(4, 4, slr_cols=bad)


def test_packed_b_goes_down_the_dsp_cascade():
    # Packed, b enters each column's first slice on B (a fabric register before it) and goes
    # down the column on BCOUT -> BCIN: no fabric b register below the first pair row.
    from rtl.export import to_verilog
    text = to_verilog(SystolicArray(6, 2, packing=2, primitive=True), "arr")
    modules = {body.split(None, 1)[0].lstrip("\\").split("(")[0]: body
               for body in re.split(r"^module ", text, flags=re.M)[1:]}
    assert '.B_INPUT("DIRECT")' in modules["bfp_pair_dsp48e2.mac"]
    assert '.B_INPUT("CASCADE")' in modules["bfp_pair_dsp48e2_casc.mac"]
    assert ".BCIN(bcin)" in modules["bfp_pair_dsp48e2_casc.mac"]
    assert "reg [7:0] b = " in modules["bfp_pair_dsp48e2"]
    assert "reg [7:0] b = " not in modules["bfp_pair_dsp48e2_casc"]
    insts = re.findall(r"^\s*(bfp_pair\S*) (pe_\d+_\d+) \(", modules["arr"], re.M)
    assert sorted(insts) == sorted([("bfp_pair_dsp48e2", f"pe_0_{j}") for j in range(2)]
                                   + [("bfp_pair_dsp48e2_casc", f"pe_{q}_{j}")
                                      for q in (1, 2) for j in range(2)])
    for q, j in ((1, 0), (2, 1)):     # bc_i of pair q from bc_o of pair q - 1, same column
        src = re.search(rf"pe_{q}_{j} \((.*?)\);", modules["arr"], re.S).group(1)
        wire = re.search(r"\.bc_i\(([^)]*)\)", src).group(1).strip()
        above = re.search(rf"pe_{q - 1}_{j} \((.*?)\);", modules["arr"], re.S).group(1)
        assert re.search(rf"\.bc_o\({re.escape(wire)}\s*\)", above), (q, j, wire)


@pytest.mark.parametrize("packing,slr_cols", [(1, ()), (2, ()), (2, (2,))])
def test_reset_drops_a_tile_in_flight(packing, slr_cols):
    # The read-out's start chains hold no reset (SRLs): a tile whose last step is in them
    # when the domain resets must not come out; the next tile after the reset does.
    from amaranth import ClockDomain, Module
    from amaranth.sim import Simulator
    rows, cols = 4, 4
    m = Module()
    m.domains.sync = cd = ClockDomain()
    m.submodules.dut = dut = SystolicArray(rows, cols, packing=packing, slr_cols=slr_cols)
    rng = np.random.default_rng(5)
    a = rng.integers(-128, 128, (rows, 3)).astype(np.int8)
    b = rng.integers(-128, 128, (3, cols)).astype(np.int8)
    seen = []

    async def bench(ctx):
        for reset_at in (3, None):
            for s in range(3):
                ctx.set(dut.i_stream.valid, 1)
                ctx.set(dut.i_stream.payload, {"a": [int(x) for x in a[:, s]],
                                               "b": [int(x) for x in b[s]],
                                               "first": s == 0, "last": s == 2})
                await ctx.tick()
            ctx.set(dut.i_stream.valid, 0)
            for t in range(dut.latency + rows + 10):
                if t == reset_at:
                    ctx.set(cd.rst, 1)
                await ctx.tick()
                ctx.set(cd.rst, 0)
                if ctx.get(dut.o_stream.valid):
                    seen.append((reset_at, [int(x) for x in ctx.get(dut.o_stream.payload.data)]))

    sim = Simulator(m)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    assert all(r is None for r, _ in seen), "a tile reset in flight came out"
    np.testing.assert_array_equal(np.array([d for _, d in seen]), golden.gemm(a, b))
