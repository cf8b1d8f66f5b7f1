"""The analytic performance model (firmware.runtime.perfmodel) against the RTL's cycle counts."""

import json
from pathlib import Path

import numpy as np
import pytest

from firmware import Device
from firmware.runtime import perfmodel
from firmware.runtime.perfmodel import best_block, predict, read_rate
from firmware.spec.ports import dram_bytes_per_cycle, resolve_port
from sim.models import golden

# The hardware configuration the accelerator tests already build (no extra compile).
CONFIG = {"rows": 8, "cols": 8, "data_width": 128, "depth": 512, "block": 4}
# Ports without random pauses (the model has none): ideal and a board-like one.
PORTS = {"ideal": "ideal",
         "hp": {"outstanding_reads": 8, "outstanding_writes": 8, "read_latency": 40,
                "write_latency": 20, "max_burst": 16, "pause": 0.0}}
# Shapes and forms not used to calibrate the model's constants.
GEMMS = [(96, 80, 200, False, False), (72, 64, 300, True, False), (64, 88, 160, False, True),
         (80, 72, 256, True, True), (200, 64, 64, True, False), (200, 32, 64, True, False),
         # one block whose k-major reads merge: paced by the gearboxes (a vector a cycle),
         # not the port (the model without them: -17 to -24 %)
         (32, 32, 64, True, False),
         # a one-tile-wide edge block with short k-major reads: predicted up to 10 % slow
         # when each block reloaded B; since the blocks go down the column keeping B
         # (sim.models.engine.block_order), within 2.2 %
         (200, 40, 64, True, False)]


@pytest.fixture(scope="module", params=sorted(PORTS))
def device(request):
    return request.param, Device("rtl", port=PORTS[request.param], seed=3, **{
        k: v for k, v in CONFIG.items()})


@pytest.mark.parametrize("m,n,k,ta,tb", GEMMS)
def test_prediction_within_5_percent(device, m, n, k, ta, tb):
    name, dev = device
    rng = np.random.default_rng(m * n + k)
    a = rng.integers(-128, 128, (k, m) if ta else (m, k), dtype=np.int8)
    b = rng.integers(-128, 128, (n, k) if tb else (k, n), dtype=np.int8)
    got = dev.gemm(a, b, transpose_a=ta, transpose_b=tb, out="int32")
    np.testing.assert_array_equal(got, golden.gemm(a, b, ta, tb))
    side = dev.stats["block"]            # the side the driver chose for this GEMM
    # (and whether it ran it as its transpose, perfmodel.best_plan)
    want = predict(*perfmodel.run_shape(m, n, k, ta, tb, dev.stats["transposed"]),
                   port=resolve_port(PORTS[name]), chunk=dev.stats["chunk"],
                   **{**CONFIG, "block": side})["cycles"]
    measured = dev.stats["cycles"]
    assert abs(want / measured - 1) <= 0.05, (name, measured, want)


def test_read_rate():
    assert read_rate(16, 8, 40) == 1.0
    assert read_rate(1, 8, 40) == pytest.approx(8 / 41)


def test_read_rate_under_pauses():
    """A paused channel: each burst's beats take 1 / (1 - pause) cycles, the latency does
    not stretch, and the rate never passes 1 - pause."""
    assert read_rate(1, 8, 32, 0.8) == pytest.approx(8 / (32 + 1 / 0.8))
    assert read_rate(16, 8, 0, 0.8) == pytest.approx(0.8)


def test_best_block_is_the_largest_near_the_fastest():
    """On the ZCU104 stand-in (16x32 @ 64) a 64x256x256 forward fits in one block of 8 and
    writes all of C at its end: a smaller side is faster; the choice is the largest side
    within BLOCK_MARGIN of the fastest, and is cached."""
    geometry = {"rows": 16, "cols": 32, "depth": 256, "data_width": 64}
    port = resolve_port("zynqmp-hp")
    cycles = {s: predict(64, 256, 256, block=s, port=port, **geometry)["cycles"]
              for s in range(1, 9)}
    side = best_block(64, 256, 256, block=8, port=port, **geometry)
    fastest = min(cycles.values())
    assert side < 8 and cycles[side] < cycles[8]
    assert cycles[side] <= fastest * (1 + perfmodel.BLOCK_MARGIN)
    assert all(c > fastest * (1 + perfmodel.BLOCK_MARGIN) for s, c in cycles.items() if s > side)
    hits = perfmodel._best_block.cache_info().hits
    assert best_block(64, 256, 256, block=8, port=port, **geometry) == side
    assert perfmodel._best_block.cache_info().hits == hits + 1


def test_best_block_queued_departs_only_for_a_clear_gain():
    """Queued (behind another GEMM), the block is the one chosen alone unless another is
    predicted QUEUED_BLOCK_MARGIN faster queued: on the Pynq-Z1 default's and the ZCU104
    stand-in's GEMMs. The stand-in's 784->256 batch-128 weight gradient, run turned
    (128x392x64 there, A transposed), takes a larger block queued than alone (its longer
    first loads hide under the one before)."""
    from firmware.runtime.perfmodel import predict_queued
    pynq = {"rows": 16, "cols": 16, "depth": 256, "data_width": 64, "write_ports": 4,
            "read_ports": 3, "port": resolve_port("zynq7-hp")}
    zcu = {"rows": 16, "cols": 32, "depth": 256, "data_width": 64, "write_ports": 3,
           "read_ports": 4, "port": resolve_port("zynqmp-hp")}
    cases = [(pynq, (128, 128, 256, True, False)), (pynq, (64, 10, 256, False, False)),
             (pynq, (64, 256, 10, False, True)), (pynq, (256, 10, 64, True, False)),
             (pynq, (10, 128, 256, True, True)), (zcu, (128, 392, 64, True, False))]
    departed = []
    for config, shape in cases:
        alone = best_block(*shape, block=8, **config)
        queued = best_block(*shape, block=8, queued=True, **config)
        q = {s: predict_queued(*shape, block=s, **config) for s in range(1, 9)}
        if queued != alone:
            departed.append(shape)
            assert q[queued] < q[alone] * (1 - perfmodel.QUEUED_BLOCK_MARGIN)
            assert q[queued] == min(q.values())
        else:
            best = min(q.values())
            assert best >= q[alone] * (1 - perfmodel.QUEUED_BLOCK_MARGIN)
    assert (128, 392, 64, True, False) in departed


def test_best_chunk_departs_from_the_ramp_only_for_a_clear_gain():
    """DESC_FLAGS.CHUNK queued: 0 (the ramp) unless another is predicted CHUNK_MARGIN faster,
    then the fastest; alone, the fastest (the lowest of a tie). A load-bound descriptor of one
    block on the VU9P stand-in (256->10's forward at batch 64, 8x2x256) leaves the ramp
    queued, a compute-bound square does not; cached."""
    from firmware.runtime.perfmodel import best_chunk, predict_queued
    config = {"rows": 8, "cols": 16, "depth": 512, "data_width": 64,
              "port": resolve_port("vcu118-ddr4")}
    for shape in [(8, 2, 256, False, False), (64, 64, 128, False, False),
                  (98, 32, 128, True, False)]:
        for queued in (False, True):
            chunk = best_chunk(*shape, block=8, queued=queued, **config)
            cycles = {c: (predict_queued(*shape, block=8, chunk=c, **config) if queued else
                          predict(*shape, block=8, chunk=c, **config)["cycles"])
                      for c in range(4)}
            if not queued:
                assert chunk == min(range(4), key=lambda c: (cycles[c], c))
            elif chunk:
                assert cycles[chunk] < cycles[0] * (1 - perfmodel.CHUNK_MARGIN)
                assert cycles[chunk] == min(cycles.values())
            else:
                assert min(cycles.values()) >= cycles[0] * (1 - perfmodel.CHUNK_MARGIN)
    assert best_chunk(8, 2, 256, block=8, queued=True, **config) != 0
    assert best_chunk(64, 64, 128, block=8, queued=True, **config) == 0
    hits = perfmodel._best_chunk.cache_info().hits
    best_chunk(8, 2, 256, block=8, queued=True, **config)
    assert perfmodel._best_chunk.cache_info().hits == hits + 1


def test_alone_block_and_chunk_are_chosen_together():
    """Alone, best_block takes the side whose fastest chunk is fastest (the largest of a
    tie), best_chunk that chunk, and best_plan compares the orientations at those: the pair
    predicted fastest over every side and chunk (here the VU9P stand-in's 576->128 batch-128
    weight gradient, 72x16x128: at the ramp block 8 is fastest, but block 6 with chunk 3 is
    faster still — measured 2,658 -> 2,404 cycles by python -m sim.bench sweep)."""
    from firmware.runtime.perfmodel import best_chunk, best_plan, run_shape
    config = {"rows": 8, "cols": 16, "depth": 512, "data_width": 64,
              "port": resolve_port("vcu118-ddr4")}
    for shape in [(72, 16, 128, True, False), (16, 32, 256, False, True),
                  (64, 64, 128, False, False)]:
        turned, side = best_plan(*shape, block=8, **config)
        chunk = best_chunk(*run_shape(*shape, turned), block=side, **config)
        table = {(t, b, c): predict(*run_shape(*shape, t), block=b, chunk=c,
                                    **config)["cycles"]
                 for t in (False, True) for b in range(1, 9) for c in range(4)}
        fastest = {t: min(v for (tt, _, _), v in table.items() if tt == t) for t in (0, 1)}
        # the transpose only for a clear gain (TRANSPOSE_MARGIN), as before
        assert turned == (fastest[1] < fastest[0] * (1 - perfmodel.TRANSPOSE_MARGIN))
        assert table[turned, side, chunk] == fastest[turned]
        assert side == max(b for (t, b, _), v in table.items()
                           if t == turned and v == fastest[turned])
    assert best_plan(72, 16, 128, True, False, block=8, **config) == (False, 6)
    assert best_chunk(72, 16, 128, True, False, block=6, **config) != 0


def test_best_block_follows_the_dram_arbitration():
    """The side is cached by every knob the model reads, the DRAM's arbitration too: the
    VU9P stand-in's 72x16x128 weight gradient (A transposed) takes block 6 behind its
    round-robin DRAM, 4 behind a reads-first one (alone, each side at its fastest chunk),
    and best_block agrees with the predictions made directly."""
    geometry = {"rows": 8, "cols": 16, "depth": 512, "data_width": 64}
    sides = {}
    for arb in ("round-robin", "reads-first"):
        port = resolve_port({"preset": "vcu118-ddr4", "dram_arbitration": arb})
        cycles = {s: min(predict(72, 16, 128, True, block=s, chunk=c, port=port,
                                 **geometry)["cycles"] for c in range(4))
                  for s in range(1, 9)}     # alone, each side at its fastest chunk
        fastest = min(cycles.values())
        want = max(s for s, c in cycles.items() if c <= fastest * (1 + perfmodel.BLOCK_MARGIN))
        sides[arb] = best_block(72, 16, 128, True, block=8, port=port, **geometry)
        assert sides[arb] == want, (arb, cycles)
    assert sides["round-robin"] != sides["reads-first"], sides


def test_cli_prints_the_chosen_sides(capsys):
    assert perfmodel.main(["--board", "pynq-z1", "--blocks", "8", "--ports", "1",
                           "--batch", "64"]) == 0
    out = capsys.readouterr().out
    assert "chosen side <= 8" in out and out.count("(side ") == 15


def test_bad_ports_argument():
    with pytest.raises(ValueError, match="read_ports"):
        predict(8, 8, 8, rows=8, cols=8, depth=512, block=4, data_width=128,
                port=resolve_port("ideal"), read_ports=6)
    with pytest.raises(ValueError, match="write_ports must be one of"):
        predict(8, 8, 8, rows=8, cols=8, depth=512, block=4, data_width=128,
                port=resolve_port("ideal"), write_ports=7)
    with pytest.raises(ValueError, match=r"write_ports \(6\) must be at most rows \(4\)"):
        predict(8, 8, 8, rows=4, cols=8, depth=512, block=4, data_width=128,
                port=resolve_port("ideal"), write_ports=6)


def test_write_ports_that_do_not_divide_the_rows_pace_c_by_them_all():
    """Three write ports over 16 rows (the ZCU104 stand-in's; the board's six over 32 alike):
    the rows are dealt on across tiles (each tile's first row to the next port), so each
    port takes every third row and C leaves at three ports' pace, not at that of the ports
    with the most rows of a tile (16 / 6 = 2.7). A GEMM bound by C's writes (a batch-64
    weight gradient at K = 16, on a port without a DRAM limit or pauses) is predicted at
    that pace."""
    cfg = dict(rows=16, cols=32, depth=256, block=2, data_width=64, read_ports=4,
               port={**resolve_port("zynqmp-hp"), "dram_gbps": None, "pause": 0.0})
    cycles = {wp: predict(392, 128, 16, True, False, write_ports=wp, **cfg)["cycles"]
              for wp in (1, 2, 3, 4)}
    for wp in (2, 3, 4):
        assert cycles[1] / cycles[wp] == pytest.approx(wp, rel=0.03), cycles


def test_two_write_ports_halve_a_write_bound_gemm():
    """K = 8: C rows dominate; two write ports take about half the cycles, a compute-bound
    GEMM (K = 2048) the same."""
    port = resolve_port("zynqmp-hp")
    one, two = (predict(256, 256, 8, port=port, write_ports=w, **CONFIG)["cycles"]
                for w in (1, 2))
    assert 0.45 < two / one < 0.6
    one, two = (predict(64, 64, 2048, port=port, write_ports=w, **CONFIG)["cycles"]
                for w in (1, 2))
    assert abs(two / one - 1) < 0.01


def test_k_runs_replace_the_tile_blocks_of_k():
    """A K-block GEMM's chunks are its tile blocks of K, or the runs it is given (a
    convolution's, one per kernel offset and block of channels): the tile blocks as runs
    predict the same cycles, and nine runs of 16 steps, each read out on its own in 32
    cycles, more than the five tile blocks of the same 144 steps. Where the tiles hold 16
    of the array's 32 rows, the seven runs between a tile's first and last read out in 16
    cycles."""
    port = resolve_port("zynqmp-hp")
    cfg = dict(rows=32, cols=64, depth=256, block=8, data_width=128, port=port,
               read_ports=4, write_ports=6, k_blocks=True)
    blocks = predict(16, 2048, 144, **cfg)["cycles"]
    assert predict(16, 2048, 144, k_runs=(32, 32, 32, 32, 16), **cfg)["cycles"] == blocks
    full = predict(32, 2048, 144, k_runs=(16,) * 9, **cfg)["cycles"]
    # (32 tiles, each nine read-outs of 32 cycles at least)
    assert full >= 32 * 9 * 32 > predict(32, 2048, 144, **cfg)["cycles"]
    runs = predict(16, 2048, 144, k_runs=(16,) * 9, **cfg)["cycles"]
    # (two of 32 and seven of 16 at least, or the loads; not nine of 32)
    assert 32 * (2 * 32 + 7 * 16) <= runs < 32 * 9 * 32 <= full
    assert runs > blocks
    for bad in ((16,) * 8, (48, 48, 48), (0, 144)):
        with pytest.raises(ValueError, match="k_runs must be"):
            predict(16, 2048, 144, k_runs=bad, **cfg)
    with pytest.raises(ValueError, match="k_runs must be"):
        predict(16, 2048, 144, k_runs=(16,) * 9, **dict(cfg, k_blocks=False))


def test_skipped_offsets_take_no_compute():
    """``k_walked`` (the kernel offsets a convolution's block walks): the runs of a skipped
    offset take no compute and no loads, only the probe; walking every offset predicts the
    same as no ``k_walked``; a malformed one is refused."""
    port = resolve_port("zynqmp-hp")
    cfg = dict(rows=32, cols=32, depth=256, block=8, data_width=128, port=port,
               read_ports=5, write_ports=6, k_blocks=True, k_runs=(32, 32) * 9,
               b_per_tile=True, b_group=4)
    # (a backward-data GEMM of 64 x 1024 columns: four blocks of eight tiles)
    full = predict(64, 1024, 576, **cfg)
    assert predict(64, 1024, 576, k_walked=((True,) * 9,) * 4, **cfg) == full
    some = ((True,) + (False,) * 3 + (True,) * 5,) * 4
    part = predict(64, 1024, 576, k_walked=some, **cfg)
    assert part["compute_cycles"] == full["compute_cycles"] * 6 // 9
    assert part["cycles"] < full["cycles"] * 0.8
    assert part["read_words"] < full["read_words"]
    for bad in (((True,) * 9,) * 3, ((True,) * 7,) * 4, ((),) * 4):
        with pytest.raises(ValueError, match="k_walked must"):
            predict(64, 1024, 576, k_walked=bad, **cfg)
    with pytest.raises(ValueError, match="k_walked must"):
        predict(64, 1024, 576, k_walked=some, **dict(cfg, k_runs=None))


def test_replays_add_a_step_a_tile_a_phase():
    """``replays`` (a backward-data convolution through a max pool): the GEMM's compute once
    and a step a tile for each phase after the first, each phase's C written; cheaper than
    computing the GEMM again a phase; a negative count, or one without runs, refused."""
    port = resolve_port("zynqmp-hp")
    cfg = dict(rows=32, cols=32, depth=256, block=8, data_width=128, port=port,
               read_ports=5, write_ports=6, k_blocks=True, k_runs=(32, 32) * 9,
               b_per_tile=True, b_group=4)
    once = predict(64, 1024, 576, **cfg)
    four = predict(64, 1024, 576, replays=3, **cfg)
    tiles = 2 * 32
    assert four["compute_cycles"] == once["compute_cycles"] + 3 * tiles
    assert four["write_words"] == 4 * once["write_words"]
    assert once["cycles"] < four["cycles"] < predict(64, 1024, 576, copies=4, **cfg)["cycles"]
    for bad in (-1, 1.0):
        with pytest.raises(ValueError, match="replays must"):
            predict(64, 1024, 576, replays=bad, **cfg)
    with pytest.raises(ValueError, match="replays must"):
        predict(64, 1024, 576, replays=3, **dict(cfg, k_runs=None))


def test_a_weight_gradients_offsets_inside_the_chunk_read_a_once():
    """``offsets`` (a weight gradient's kernel offsets walked inside each K chunk): A's
    words are read once a chunk, not once an offset as the outer loop of GEMMs
    (``copies``) reads them; the array computes every offset's tiles; the utilisation
    counts every offset's MACs. On ResNet-20's 64-channel layer behind ``zynqmp-hp``
    (A's rows 32 bytes a chunk, a burst each, on one port) the outer loop is bound by A's
    reads and the inner walk by the array."""
    port = resolve_port("zynqmp-hp")
    cfg = dict(rows=32, cols=32, depth=256, block=8, data_width=128, port=port,
               write_ports=6, read_ports=5, k_blocks=True)
    inner = predict(64, 64, 2048, offsets=9, **cfg)
    outer = predict(64, 64, 2048, copies=9, **cfg)
    a_words = 64 * 2048 // 16
    assert outer["read_words"] - inner["read_words"] == 8 * a_words
    assert inner["compute_cycles"] == outer["compute_cycles"] == 9 * 2 * 2 * 2048
    assert inner["cycles"] < 0.5 * outer["cycles"]
    assert inner["bound_by"] == "compute" and outer["bound_by"] == "reads"
    assert inner["utilization"] == pytest.approx(
        9 * 64 * 64 * 2048 / (32 * 32 * inner["cycles"]), rel=1e-4)
    for bad in (0, 1.5, True):
        with pytest.raises(ValueError, match="offsets"):
            predict(64, 64, 2048, offsets=bad, **cfg)
    with pytest.raises(ValueError, match="offsets"):
        predict(64, 64, 2048, offsets=9, **dict(cfg, k_blocks=False))


def test_k_block_chunks_wait_for_their_exponents():
    """K blocks: a chunk's exponents go to the bank the chunk before last used, once its
    commands have left, so chunks of one tile (a 16-channel weight gradient's, an offset
    each) take at least half the read latency and ``EXP_TRIP`` each, more than their 32
    steps."""
    port = resolve_port("zynqmp-hp")
    cfg = dict(rows=32, cols=32, depth=256, block=8, data_width=128, port=port,
               write_ports=6, read_ports=5, k_blocks=True)
    p = predict(16, 16, 2048, offsets=9, **cfg)
    chunks = 9 * 2048 // 32
    assert p["cycles"] >= (chunks - 2) / 2 * (port["read_latency"] + perfmodel.EXP_TRIP)
    assert p["compute_cycles"] == chunks * 32 < 0.8 * p["cycles"]


def test_wg_offsets_inner_follows_the_slots():
    """:func:`firmware.spec.hw.wg_offsets_inner`: the GEMM of an offset one block, and its
    tiles times the offsets no more than the block's slots."""
    from firmware.spec.hw import wg_offsets_inner
    kw = dict(rows=32, cols=32, block=8)
    assert wg_offsets_inner(64, 64, 9, **kw)           # 2 x 2 tiles x 9 = 36
    assert wg_offsets_inner(16, 1, 49, **kw)
    assert not wg_offsets_inner(128, 128, 9, **kw)     # 16 x 9 = 144 > 64
    assert not wg_offsets_inner(16, 16, 81, **kw)
    assert not wg_offsets_inner(288, 32, 1, **kw)      # 9 tiles down: more than a block
    assert wg_offsets_inner(64, 64, 9, **kw, side=2)
    assert not wg_offsets_inner(96, 32, 1, **kw, side=2)
    assert wg_offsets_inner(96, 32, 1, **kw, side=0)   # (0: the build's block)


def test_a_convolutions_b_is_read_a_job_per_group_of_tiles():
    """``b_per_tile`` (a convolution's B): each group of ``b_group`` tiles' rows (32 bytes a
    tile, aligned: two words a row on a 16-byte bus) a burst. Read a tile a job, a
    16-channel layer's B takes longer than as the block's spans of 256 bytes a row; striped
    over three B ports it takes under half of one port's time (rows of two words or more
    are striped, :data:`firmware.spec.regmap.STRIPE_MIN_WORDS`), and over four less than
    over three; groups of four tiles (a position's 128 images) take fewer bursts than single
    tiles and no more than the spans' time on one port."""
    from firmware.spec.regmap import STRIPE_MIN_WORDS
    assert STRIPE_MIN_WORDS <= 2
    port = resolve_port("zynqmp-hp")
    cfg = dict(rows=32, cols=32, depth=256, block=8, data_width=128, port=port,
               write_ports=6, k_blocks=True, k_runs=(16,) * 9)
    span = predict(16, 2048, 144, read_ports=4, **cfg)
    tiles = predict(16, 2048, 144, read_ports=4, b_per_tile=True, **cfg)
    four_ways = predict(16, 2048, 144, read_ports=5, b_per_tile=True, **cfg)
    one_port = predict(16, 2048, 144, read_ports=2, b_per_tile=True, **cfg)
    assert span["cycles"] < tiles["cycles"] < one_port["cycles"]
    assert four_ways["cycles"] < 0.9 * tiles["cycles"]
    assert tiles["read_words"] == span["read_words"]         # (aligned: 2 words a row)
    # one port: 16 bursts a tile, 8 in flight, 40 cycles each, for 64 tiles and 9 offsets
    assert one_port["cycles"] >= 64 * 9 * 16 * 40 / 8
    assert one_port["cycles"] > 2 * tiles["cycles"]
    grouped = predict(16, 2048, 144, read_ports=2, b_per_tile=True, b_group=4, **cfg)
    assert grouped["cycles"] < 0.5 * one_port["cycles"]
    assert grouped["read_words"] == span["read_words"]
    for bad in (0, 1.5, True):
        with pytest.raises(ValueError, match="b_group"):
            predict(16, 2048, 144, b_per_tile=True, b_group=bad, **cfg)


def test_pauses_slow_the_data_channels():
    """A port that holds its channels back 10 % of cycles: a write-bound GEMM (K = 8, C rows
    dominate) takes about 1 / 0.9 as long; a missing ``pause`` means none."""
    port = dict(resolve_port("ideal"))
    base = predict(256, 256, 8, port=port, **CONFIG)["cycles"]
    del port["pause"]
    assert predict(256, 256, 8, port=port, **CONFIG)["cycles"] == base
    port["pause"] = 0.1
    slow = predict(256, 256, 8, port=port, **CONFIG)["cycles"]
    assert base / 0.9 * 0.95 < slow <= base / 0.9 * 1.001


def test_bench_model_check(tmp_path, capsys):
    """``python -m sim.bench model``: random GEMMs on the RTL behind both ports, each beside
    its prediction, bit-exact (checked inside), with the summary line; bad counts exit 2."""
    import json

    from sim import bench
    out = tmp_path / "model.json"
    assert bench.main(["model", "--count", "3", "--out", str(out)]) == 0
    record = json.loads(out.read_text())
    assert record["command"].startswith("python -m sim.bench model")
    results = record["results"]
    assert len(results) == 6 and {r["port"] for r in results} == {"ideal", "ideal+"}
    for r in results:
        assert r["cycles"] > 0 and 1 <= r["block"] <= 4
        assert r["error"] == round(r["predicted_cycles"] / r["cycles"] - 1, 4)
    assert "within 5 %" in capsys.readouterr().out
    # each record carries its port as resolved, so that --check predicts the dict port's
    # GEMMs again (its name, "ideal+", is no preset) to the cycle
    summary = perfmodel.check_records([out])
    assert {label.split(": ")[1] for label in summary} == {"ideal", "ideal+"}
    errors = [abs(r["error"]) for r in results if r["port"] == "ideal+"]
    assert summary["model: ideal+"]["max_abs_error"] == pytest.approx(max(errors), abs=1e-4)
    with pytest.raises(SystemExit) as e:
        bench.main(["model", "--count", "0", "--out", str(out)])
    assert e.value.code == 2


def test_dram_ledger_serves_reads_first_and_keeps_every_byte():
    """Reads first: a read booked over writes already booked takes its own rate, and the
    writes' bytes move to the buckets after (none over the DRAM, none lost); a write booked
    over reads gets only what they leave. Round-robin: each direction is sure of
    FAIR_SHARE of a bucket."""
    B = perfmodel._DramLedger.BUCKET
    ledger = perfmodel._DramLedger(10.0, (1.0, 0.0))
    assert ledger.move(0, 10 * B, 9.0 * 10 * B, way=1) == pytest.approx(10 * B)
    assert ledger.move(0, 2 * B, 8.0 * 2 * B, way=0) == pytest.approx(2 * B)
    assert all(sum(u) <= 10.0 * B + 1e-6 for u in ledger.used.values())
    assert sum(u[1] for u in ledger.used.values()) == pytest.approx(9.0 * 10 * B)
    assert sum(u[0] for u in ledger.used.values()) == pytest.approx(8.0 * 2 * B)
    assert ledger.used[0] == pytest.approx([8.0 * B, 2.0 * B])
    # a write after the reads: 2 bytes a cycle of what is left in their buckets
    ledger = perfmodel._DramLedger(10.0, (1.0, 0.0))
    ledger.move(0, 4 * B, 8.0 * 4 * B, way=0)
    assert ledger.move(0, B, 8.0 * B, way=1) == pytest.approx(4 * B)
    # reads first, as the model books them: a write over reads that take every byte still
    # has WRITE_FLOOR of each bucket
    floor = perfmodel._DramLedger(10.0, (1.0, perfmodel.WRITE_FLOOR))
    floor.move(0, 8 * B, 10.0 * 8 * B, way=0)
    assert floor.move(0, B, 10.0 * perfmodel.WRITE_FLOOR * 2 * B, way=1) == pytest.approx(2 * B)
    # round-robin: the write gets half of the buckets the read filled
    fair = perfmodel._DramLedger(10.0, (perfmodel.FAIR_SHARE,) * 2)
    fair.move(0, 4 * B, 10.0 * 4 * B, way=0)
    assert fair.move(0, B, 5.0 * B, way=1) == pytest.approx(B)
    assert all(sum(u) <= 10.0 * B + 1e-6 for u in fair.used.values())


def _committed_runs():
    """Each record of ``results/utilization.json`` and of the ZCU104 default measured
    directly (``results/utilization_zcu104_default.json``, ``--board zcu104 --default``),
    with the model's configuration of it and whether its DRAM moves less than a bus word a
    cycle."""
    import json
    from pathlib import Path

    results = Path(__file__).parents[1] / "results"
    record = json.loads((results / "utilization.json").read_text())
    default = json.loads((results / "utilization_zcu104_default.json").read_text())
    assert len(record["results"]) >= 100 and len(default["results"]) == 34
    for r in record["results"] + default["results"]:
        config = {**perfmodel.record_config(r), "block": r["block_used"],
                  "chunk": r.get("chunk_used", 0)}
        narrow = (dram_bytes_per_cycle(config["port"], r["data_width"] // 8) or np.inf) \
            < r["data_width"] // 8
        yield r, narrow, config


def test_model_within_5_percent_of_the_committed_benchmark():
    """Every GEMM of ``results/utilization.json`` (``python -m sim.bench utilization``: the
    three boards' configurations behind their port presets, DRAM limits, pauses and two or
    more write ports, which the tests above do not build) against the model at the block
    side it ran with. The benchmark is run again after a change to the RTL's schedule."""
    off = []
    for r, narrow, config in _committed_runs():
        # Below K = 12 the model misses the datapath's own tile rate: those GEMMs of a few
        # hundred cycles are held to 15 %. Behind a DRAM narrower than a bus word a cycle
        # (the VU9P stand-in's, round-robin), where the DRAM ledger's shares of a bucket are
        # coarsest, to 12 % (576->128's batch-128 backward-data, 16 x 72 x 128 at CHUNK 1,
        # measures 11.4 % slower than predicted).
        tolerance = 0.15 if r["k"] < 12 else 0.12 if narrow else 0.05
        if r.get("transposed") and r["n"] <= r["rows"]:
            tolerance = max(tolerance, TURNED_ONE_ROW_TOLERANCE)
        want = predict(*_as_run(r, r.get("transposed")), **config)["cycles"]
        if abs(want / r["cycles"] - 1) > tolerance:
            off.append((r["board"], r["gemm"], r["m"], r["n"], r["k"], r["cycles"], want))
    assert not off, off


#: GEMMs alone the driver ran as their transpose (perfmodel.best_plan) whose turned M — the N as
#: given — fills one partial tile row: the 256->10 forwards and weight gradients (10 of the
#: ZCU104 default's 32 rows, 5 of its stand-in's 16), 350-900 cycles, are over-predicted by
#: 3.5-6.5 % (about 50 cycles: the model's fixed costs of a GEMM of one tile row), and the
#: Pynq-Z1's 256->10 batch-128 weight gradient (10 x 256 x 128, A^T's rows of 10 bytes on one
#: port, block 2) under-predicted by 7-10 %, as where its buffers lie moves its DRAM pages;
#: held to this.
TURNED_ONE_ROW_TOLERANCE = 0.10


def _as_run(r, turned) -> tuple:
    """A record's GEMM as the accelerator ran it: its transpose where the driver turned it
    (``transposed``, ``transposed_queued``: perfmodel.best_plan)."""
    return perfmodel.run_shape(r["m"], r["n"], r["k"], r["transpose_a"], r["transpose_b"],
                               bool(turned))


def test_queued_model_within_the_committed_benchmark():
    """Every GEMM of ``results/utilization.json`` queued behind another (``queued_cycles``:
    two copies with ``DESC_FLAGS.OVERLAP`` less one, at the block chosen queued) against
    :func:`predict_queued`: within
    7 % behind the Zynq ports, 15 % behind the VU9P stand-in's DRAM narrower than a bus word
    a cycle (as alone, above, plus the noise of a difference of two runs: the port's random
    pauses are drawn from one stream for all the GEMMs run, so the same GEMM measures a few
    per cent apart from run to run), 10 % for the ZCU104 default's transposed-B GEMMs: with
    B's lane runs striped over its four B ways the RTL overlaps a queued copy's first loads
    with the one before's last tiles less than the model counts (64x784x256 with B
    transposed: 7,309 cycles queued, 6,656 predicted; 6,662 over three ways)."""
    from firmware.runtime.perfmodel import predict_queued

    off = []
    for r, narrow, config in _committed_runs():
        tolerance = 0.15 if narrow or r["k"] < 12 else 0.07
        if r["board"] == "zcu104 (default)" and r["transpose_b"]:
            tolerance = 0.10
        config["block"] = r.get("block_used_queued", r["block_used"])    # as queued
        config["chunk"] = r.get("chunk_used_queued", 0)
        want = predict_queued(*_as_run(r, r.get("transposed_queued")), **config)
        if abs(want / r["queued_cycles"] - 1) > tolerance:
            off.append((r["board"], r["gemm"], r["m"], r["n"], r["k"], r["queued_cycles"],
                        want))
    assert not off, off


def test_queued_copies_hide_the_fill():
    """A GEMM whose first chunk's loads and last tiles' C are long against its compute (the
    ZCU104 stand-in's 256->10 forward) takes much less behind a copy of itself than alone;
    a square that computes for long gains little; ``copies`` is checked."""
    cfg = dict(rows=16, cols=32, data_width=64, depth=256, block=8,
               port=resolve_port("zynqmp-hp"), write_ports=2, read_ports=3)
    from firmware.runtime.perfmodel import predict_queued
    alone = predict(32, 5, 256, **cfg)["cycles"]
    assert predict_queued(32, 5, 256, **cfg) < 0.85 * alone
    alone = predict(256, 256, 512, **cfg)["cycles"]
    assert 0.9 * alone < predict_queued(256, 256, 512, **cfg) <= alone
    with pytest.raises(ValueError, match="copies must be a positive integer"):
        predict(32, 5, 256, copies=0, **cfg)


def test_committed_zcu104_stand_in_tracks_its_default():
    """The benchmark's ZCU104 stand-in (16x32 @ 64 running the board's GEMMs with M and N
    halved) is what the documentation reports for the board: its simulated utilisation must stay
    near the model's prediction of the 32x64 @ 128 default at the board's shapes (never
    more pessimistic than 5 %, at most 25 % optimistic: the board's tiles wait rows + cols - 1
    = 95 cycles between read-outs, the stand-in's 47; 256->10's batch-64 forward alone, a
    few hundred cycles, is the furthest, 18 % and, since both run it at a DESC_FLAGS.CHUNK,
    23 %) — as it was not before the shapes were scaled (68 % simulated against 35 %
    predicted for 64x256x256)."""
    import json
    from pathlib import Path

    record = json.loads((Path(__file__).parents[1] / "results" / "utilization.json")
                        .read_text())
    rows = [r for r in record["results"] if r["board"] == "zcu104"]
    assert len(rows) == 34
    for r in rows:
        board = r["stand_in"]
        assert board["scale"] == 2 and board["board_config"]["rows"] == 2 * r["rows"]
        assert (board["m"], board["n"], board["k"]) != (r["m"], r["n"], r["k"])
        ratio = r["utilization"] / board["predicted_utilization"]
        assert 0.95 <= ratio <= 1.25, (r["group"], r["gemm"], ratio)


def test_bench_cases_scale_the_boards_gemms():
    """A stand-in ``scale`` times smaller runs each layer GEMM with M and N divided by it
    (rounded up) and K kept, and its squares stand for ``scale`` times their M and N."""
    from sim.bench import LAYERS, _bench_cases

    plain = _bench_cases(16, 32, False)
    scaled = _bench_cases(16, 32, False, scale=8)
    assert len(plain) == len(scaled) == 4 + 2 * 3 * len(LAYERS)
    for (g, _name, m, n, k, ta, tb, bm, bn), s in zip(plain, scaled, strict=True):
        assert (bm, bn) == (m, n)
        if g == "square":
            assert s[2:9] == (m, n, k, ta, tb, 8 * m, 8 * n)
        else:
            assert s[2:9] == (-(-m // 8), -(-n // 8), k, ta, tb, m, n)
    assert ("fc 256->10 b64", "forward y = x W", 8, 2, 256, False, False, 64, 10) in scaled


def test_cli_checks_committed_measurements(capsys, tmp_path):
    """``python -m firmware.runtime.perfmodel --check``: the committed model check predicted
    again, one table row per file and port; a missing file exits 2 naming the option."""
    from pathlib import Path

    from firmware.runtime.perfmodel import check_records, main

    path = Path(__file__).parents[1] / "results" / "model_check_zcu104.json"
    assert main(["--check", str(path)]) == 0
    out = capsys.readouterr().out
    assert "| model_check_zcu104: zynqmp-hp | 24 |" in out
    summary = check_records([path])["model_check_zcu104: zynqmp-hp"]
    assert summary["within_5_percent"] <= summary["gemms"] == 24
    assert 0 < summary["mean_abs_error"] <= summary["max_abs_error"]
    with pytest.raises(SystemExit) as e:
        main(["--check", str(tmp_path / "missing.json")])
    assert e.value.code == 2 and "--check" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:
        main([])
    assert e.value.code == 2


def test_bench_trace_counts_every_bus_word(device):
    """``sim.bench.trace``: the words read and written per interval of one GEMM's run sum to
    its totals; it writes C's words exactly (M rows of two 16-byte words per 8-column tile),
    twice behind a copy of itself, and reads at least A and B once each."""
    from sim.bench import trace

    _, dev = device
    one = trace(dev, 48, 40, 64, block=2, every=16)
    two = trace(dev, 48, 40, 64, block=2, every=16, queued=True)
    for record in (one, two):
        samples = np.array(record["samples"])
        assert samples[:, 1].sum() == record["read_words"]
        assert samples[:, 2].sum() == record["write_words"]
        assert (np.diff(samples[:, 0]) >= 16).all()
        assert samples[-1, 0] >= record["busy_cycles"]
    assert one["write_words"] == 48 * 5 * 2 and two["write_words"] == 2 * one["write_words"]
    assert one["read_words"] >= (48 * 64 + 64 * 40) // 16
    assert one["busy_cycles"] < two["busy_cycles"] < 2 * one["busy_cycles"]
    with pytest.raises(ValueError, match="every"):
        trace(dev, 48, 40, 64, block=2, every=0)


@pytest.mark.parametrize("argv", [["--gemm", "8x8"], ["--gemm", "0x8x8"],
                                  ["--gemm", "8x8x8", "--every", "0"],
                                  ["--gemm", "8x8x8", "--block", "9"]])
def test_bench_trace_bad_arguments_exit_2(argv, capsys):
    from sim import bench

    with pytest.raises(SystemExit) as e:
        bench.main(["trace", *argv])
    assert e.value.code == 2 and capsys.readouterr().err


def test_sides_walk_c_differently():
    """``_sides``: every side up to the first that covers C's larger tile count."""
    from sim.bench import _sides

    assert _sides(8, 8, 8, 8, 4) == [1]
    assert _sides(48, 40, 8, 8, 4) == [1, 2, 3, 4]    # 6 x 5 tiles: 4 is not one block
    assert _sides(24, 8, 8, 8, 8) == [1, 2, 3]        # 3 tiles: 3 covers them
    assert _sides(512, 8, 8, 8, 8) == list(range(1, 9))   # up to the buffers' block


def test_bench_sweep_measures_every_schedule(device):
    """``sim.bench.sweep`` runs one GEMM at each (turned, side, chunk), checking each C; the
    driver's schedule is among them, and the fastest is no slower than it or the model's
    fastest; the driver's schedule measures what the driver's own run of the GEMM does
    (``Device.gemm``, a run alone with the same schedule)."""
    from firmware.runtime.perfmodel import run_shape
    from sim import bench

    name, dev = device
    config = {**CONFIG, "port": resolve_port(PORTS[name]), "write_ports": 1, "read_ports": 1}
    m, n, k, ta, tb = 48, 24, 64, True, False
    r = bench.sweep(dev, m, n, k, ta, tb, config=config)
    sides = {t: bench._sides(*run_shape(m, n, k, ta, tb, t)[:2], 8, 8, 4) for t in (0, 1)}
    assert len(r["schedules"]) == 4 * (len(sides[0]) + len(sides[1]))
    assert {(s["turned"], s["block"], s["chunk"]) for s in r["schedules"]} == {
        (t, side, c) for t in (False, True) for side in sides[t] for c in range(4)}
    assert r["driver"] in r["schedules"]
    assert r["fastest"]["cycles"] == min(s["cycles"] for s in r["schedules"])
    assert r["model_fastest"]["predicted"] == min(s["predicted"] for s in r["schedules"])
    assert r["driver_regret"] >= 0 and r["model_regret"] >= 0
    rng = np.random.default_rng(1)
    a = rng.integers(-128, 128, (k, m), dtype=np.int8)
    b = rng.integers(-128, 128, (k, n), dtype=np.int8)
    dev.gemm(a, b, transpose_a=ta, transpose_b=tb, out="int32")
    st = dev.stats
    assert (st["transposed"], st["chunk"]) == (r["driver"]["turned"], r["driver"]["chunk"])
    assert st["cycles"] == r["driver"]["cycles"]         # (neither port pauses)
    assert "driver within" in bench.sweep_table([{**r, "name": "t"}])


@pytest.mark.parametrize("argv", [["--gemm", "8x8"], ["--only", "no such layer"],
                                  ["--gemm", "8x8x8", "--only", "256"],
                                  ["--random", "2", "--only", "256"], ["--random", "0"],
                                  ["--transpose-a"]])
def test_bench_sweep_bad_arguments_exit_2(argv, capsys):
    from sim import bench

    with pytest.raises(SystemExit) as e:
        bench.main(["sweep", *argv])
    assert e.value.code == 2 and capsys.readouterr().err


SWEEPS = sorted((Path(__file__).parents[1] / "results").glob("sweep_*.json"))


@pytest.mark.slow
def test_model_on_every_swept_schedule():
    """The model against every schedule of the committed sweeps (``python -m sim.bench
    sweep``: each benchmark GEMM, and 16 random ones on the Pynq-Z1 and the VU9P stand-in,
    at every orientation, reuse block side and chunk; 6,712 runs): mean error within 2 %,
    95 % of them within 5 %, none past 15 %."""
    assert len(SWEEPS) == 5
    summary = perfmodel.check_records(SWEEPS)
    assert len(summary) == 5
    for label, s in summary.items():
        assert s["gemms"] >= 16 * 24, label
        assert s["mean_abs_error"] <= 0.02, (label, s)
        assert s["within_5_percent"] >= 0.95 * s["gemms"], (label, s)
        assert s["max_abs_error"] <= 0.15, (label, s)


@pytest.mark.parametrize("every", [3, pytest.param(1, marks=pytest.mark.slow)])
def test_committed_sweeps_hold_the_drivers_choice(every):
    """Each committed sweep's ``driver`` schedule is what the driver chooses today (so the
    file is re-measured when the rule changes; by default every third record of each
    sweep, all with ``-m slow``), and the regret fields follow from the schedules."""
    from firmware.runtime.perfmodel import record_config
    from sim.bench import _driver_schedule

    for path in SWEEPS:
        for i, r in enumerate(json.loads(path.read_text())["results"]):
            driver = r["driver"]
            if i % every == 0:
                config = {**record_config(r), "block": r["block"]}
                want = _driver_schedule(r["m"], r["n"], r["k"], r["transpose_a"],
                                        r["transpose_b"], config=config, queued=r["queued"])
                assert (driver["turned"], driver["block"], driver["chunk"]) == want, \
                    (path, r["name"])
            fastest = min(s["cycles"] for s in r["schedules"])
            assert r["fastest"]["cycles"] == fastest
            assert r["driver_regret"] == round(driver["cycles"] / fastest - 1, 4)
