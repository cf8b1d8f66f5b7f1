import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rtl.datapath import GemmDatapath
from sim.models import datapath as models
from sim.models import golden
from sim.testbenches.harness import run, stream_recv, stream_send


def simulate(rows, cols, commands, *, depth=None, seed=0, stall=0.3, extra_cmds=(), packing=1,
             slots=2, acc_slots=2, lookahead=2, k_blocks=False):
    """Drive the datapath with random stalls on every stream; return (tiles, cycles, steps)."""
    depth = depth or max(c.k for c in commands)
    dut = GemmDatapath(rows, cols, depth=depth, packing=packing, slots=slots,
                       acc_slots=acc_slots, lookahead=lookahead, k_blocks=k_blocks)
    rng = random.Random(seed)
    n_out = sum(rows for c in commands if c.emit)
    rows_out = []
    stats = {"steps": 0, "cycles": 0}

    def beats(cmd, which):
        if which == "a":
            return models.operand_beats(cmd.a, rows, k_major=cmd.transpose_a) \
                if cmd.load_a else []
        return models.operand_beats(cmd.b, cols, k_major=not cmd.transpose_b) \
            if cmd.load_b else []

    async def commander(ctx):
        payloads = [c.fields(t, rows, cols) for t, c in enumerate(commands)]
        await stream_send(ctx, dut.cmd, list(extra_cmds) + payloads, rng=rng, stall=stall)

    def feeder(which, stream):
        async def feed(ctx):
            for c in commands:
                data = [[int(x) for x in v] for v in beats(c, which)]
                await stream_send(ctx, stream, data, rng=rng, stall=stall)
        return feed

    async def sink(ctx):
        rows_out.extend(await stream_recv(
            ctx, dut.o_stream, n_out, rng=rng, stall=stall,
            convert=lambda p: ([int(w) for w in p.data], int(p.last))))

    async def counter(ctx):
        # also the cycles of the array's last steps and of each tile's first C row
        stats["last_steps"], stats["first_rows"] = [], []
        beats = 0
        while len(rows_out) < n_out:
            _, _, step, error, a_valid, a_last, o_valid, o_ready = await ctx.tick().sample(
                dut.step, dut.error, dut.array.i_stream.valid,
                dut.array.i_stream.payload.last, dut.o_stream.valid, dut.o_stream.ready)
            if a_valid and a_last:
                stats["last_steps"].append(stats["cycles"])
            if o_valid and o_ready:
                if beats % rows == 0:
                    stats["first_rows"].append(stats["cycles"])
                beats += 1
            stats["steps"] += step
            stats["error"] = error
            stats["cycles"] += 1

    total = sum(c.k * max(rows, cols) for c in commands)
    run(dut, commander, feeder("a", dut.a_stream), feeder("b", dut.b_stream), sink, counter,
        deadline_cycles=int(total * (4 if stall else 2)) + 200 * len(commands) + 500)
    assert len(rows_out) == n_out, f"got {len(rows_out)} of {n_out} C rows: lost or hung"
    tiles = []
    for t in range(len(rows_out) // rows):
        chunk = rows_out[t * rows:(t + 1) * rows]
        assert [last for _, last in chunk] == [0] * (rows - 1) + [1]
        tiles.append(np.array([words for words, _ in chunk], dtype=np.uint32))
    return tiles, stats, dut


def random_command(rng, rows, cols, k, *, ta, tb, clear=True, emit=True, raw=False,
                   exp_range=(-128, 127), extreme=False):
    def op(shape):
        if extreme:
            return np.full(shape, -128, np.int8)
        return rng.integers(-128, 128, shape).astype(np.int8)
    return models.TileCommand(
        a=op((k, rows) if ta else (rows, k)), b=op((cols, k) if tb else (k, cols)),
        transpose_a=ta, transpose_b=tb, clear=clear, emit=emit, raw=raw,
        row_exp=rng.integers(*exp_range, rows, endpoint=True).astype(np.int8),
        col_exp=rng.integers(*exp_range, cols, endpoint=True).astype(np.int8))


def check(rows, cols, commands, *, with_dut=False, **kw):
    tiles, stats, dut = simulate(rows, cols, commands, **kw)
    want = models.datapath(commands, rows, cols)
    assert len(tiles) == len(want)
    for t, (g, w) in enumerate(zip(tiles, want, strict=True)):
        np.testing.assert_array_equal(g, w, err_msg=f"tile {t}")
    return (stats, dut) if with_dut else stats


@pytest.mark.parametrize("rows,cols,packing", [(1, 1, 1), (2, 3, 1), (4, 4, 1), (8, 8, 1),
                                                (16, 16, 1), (3, 2, 2), (8, 8, 2), (16, 16, 2)])
def test_all_transposes(rows, cols, packing):
    # The three training GEMMs: forward (A, B), backward-data (A^T), weight-gradient (B^T),
    # plus A^T B^T; K = 1 and a K that is not a multiple of the lane count.
    rng = np.random.default_rng(rows * 31 + cols)
    cmds = [random_command(rng, rows, cols, k, ta=ta, tb=tb, exp_range=(-4, 4))
            for k, ta, tb in [(5, False, False), (1, True, False), (7, False, True),
                              (rows + 2, True, True)]]
    check(rows, cols, cmds, packing=packing)


def test_raw_output_extremes_and_accumulation():
    rows, cols = 2, 3
    rng = np.random.default_rng(3)
    cmds = [random_command(rng, rows, cols, 9, ta=False, tb=False, extreme=True, raw=True),
            random_command(rng, rows, cols, 4, ta=True, tb=False, emit=False),
            random_command(rng, rows, cols, 6, ta=False, tb=True, clear=False, raw=True),
            random_command(rng, rows, cols, 3, ta=False, tb=False,
                           exp_range=(-128, 127))]
    check(rows, cols, cmds)


def test_bad_command_sets_error_and_is_dropped():
    rows, cols = 2, 2
    rng = np.random.default_rng(4)
    cmds = [random_command(rng, rows, cols, 3, ta=False, tb=False)]
    bad = [cmds[0].fields(0, rows, cols) | {"k": 0},
           cmds[0].fields(0, rows, cols) | {"k": 4}]   # depth is 3
    tiles, stats, dut = simulate(rows, cols, cmds, extra_cmds=bad)
    assert stats["error"] == 1
    np.testing.assert_array_equal(tiles[0], models.datapath(cmds, rows, cols)[0])


def test_full_throughput_without_stalls():
    # Back-to-back tiles with k >= the array's fill: the array steps every cycle but the
    # first tile's load and the last tile's drain.
    rows, cols, k, n = 4, 4, 32, 6
    rng = np.random.default_rng(5)
    cmds = [random_command(rng, rows, cols, k, ta=t % 2 == 1, tb=False) for t in range(n)]
    stats = check(rows, cols, cmds, stall=0.0)
    assert stats["steps"] == n * k
    assert stats["error"] == 0


@pytest.mark.parametrize("packing", [1, 2])
def test_fill_latency_is_exact(packing):
    """A tile's first C row leaves ``fill_latency`` cycles after its last step is issued,
    which is ``TransposableBuffer.READ_LATENCY`` cycles before the array takes it."""
    from rtl.buffer import TransposableBuffer

    rows, cols = 3, 4
    rng = np.random.default_rng(6)
    cmds = [random_command(rng, rows, cols, k, ta=False, tb=False) for k in (5, 9)]
    stats, dut = check(rows, cols, cmds, stall=0.0, packing=packing, with_dut=True)
    assert len(stats["last_steps"]) == len(stats["first_rows"]) == 2
    for issued, out in zip(stats["last_steps"], stats["first_rows"], strict=True):
        assert out - issued == dut.fill_latency - TransposableBuffer.READ_LATENCY


def test_operand_reuse_across_slots():
    # A blocked GEMM as the engine will issue it: two A tiles and two B tiles stay in their
    # slots and are combined four ways; one command reuses only part of a longer tile.
    rows, cols, k = 3, 2, 6
    rng = np.random.default_rng(11)
    a = [rng.integers(-128, 128, (rows, k)).astype(np.int8) for _ in range(2)]
    b = [rng.integers(-128, 128, (cols, k)).astype(np.int8) for _ in range(2)]
    cmds = []
    for i in range(2):
        for j in range(2):
            cmds.append(models.TileCommand(
                a=a[i], b=b[j], transpose_b=True, a_slot=i, b_slot=2 + j,
                load_a=j == 0, load_b=i == 0, raw=True))
    cmds.append(models.TileCommand(a=a[1][:, :4], b=b[0][:, :4], transpose_b=True,
                                   a_slot=1, b_slot=2, load_a=False, load_b=False, raw=True))
    check(rows, cols, cmds, slots=4)
    want = a[1][:, :4].astype(np.int32) @ b[0][:, :4].T.astype(np.int32)
    assert models.datapath(cmds, rows, cols)[-1].view(np.int32).tolist() == want.tolist()


def test_blocked_gemm_over_k_chunks_with_partial_sums():
    # C (2 x 2 tiles) = A (2 tiles) . B (2 tiles) over 3 K chunks, the four C tiles
    # interleaved: partial sums go to accumulation slots 0..3 and come back for the next chunk.
    rows, cols, kc, chunks = 2, 3, 4, 3
    rng = np.random.default_rng(13)
    a = rng.integers(-128, 128, (2 * rows, kc * chunks)).astype(np.int8)
    b = rng.integers(-128, 128, (kc * chunks, 2 * cols)).astype(np.int8)
    cmds = []
    for c in range(chunks):
        for i in range(2):
            for j in range(2):
                cmds.append(models.TileCommand(
                    a=a[i * rows:(i + 1) * rows, c * kc:(c + 1) * kc],
                    b=b[c * kc:(c + 1) * kc, j * cols:(j + 1) * cols],
                    a_slot=i, b_slot=2 + j, load_a=j == 0, load_b=i == 0,
                    store=c < chunks - 1, emit=c == chunks - 1, add=c > 0,
                    acc_slot=2 * i + j, raw=True))
    tiles, _, _ = simulate(rows, cols, cmds, slots=4, acc_slots=4, stall=0.2)
    full = golden.gemm(a, b)
    for t, (i, j) in enumerate([(0, 0), (0, 1), (1, 0), (1, 1)]):
        np.testing.assert_array_equal(
            tiles[t].view(np.int32), full[i * rows:(i + 1) * rows, j * cols:(j + 1) * cols])


@pytest.mark.parametrize("lookahead,stall", [(2, 0.0), (6, 0.0), (6, 0.3)])
def test_span_loads_of_k_major_tiles(lookahead, stall):
    # A transposed and B as stored (both k-major): each K chunk's first command loads the
    # block's two A tiles and two B tiles as spans (interleaved beats, as the rows of the
    # block lie in memory); the chunks alternate between slot sets 0-1 and 2-3.
    rows, cols, kc, chunks, bl = 2, 3, 4, 3, 2
    rng = np.random.default_rng(14)
    at = rng.integers(-128, 128, (kc * chunks, bl * rows)).astype(np.int8)   # A^T as stored
    b = rng.integers(-128, 128, (kc * chunks, bl * cols)).astype(np.int8)
    cmds = []
    for c in range(chunks):
        base = bl * (c % 2)
        for i in range(bl):
            for j in range(bl):
                first = i == 0 and j == 0
                cmds.append(models.TileCommand(
                    a=at[c * kc:(c + 1) * kc] if first else None,
                    b=b[c * kc:(c + 1) * kc] if first else None,
                    transpose_a=True, a_slot=base + i, b_slot=base + j,
                    load_a=first, load_b=first, a_span=bl, b_span=bl,
                    store=c < chunks - 1, emit=c == chunks - 1, add=c > 0,
                    acc_slot=2 * i + j, raw=True))
    for cmd in cmds:
        cmd.a = cmd.a if cmd.a is not None else np.zeros((kc, bl * rows), np.int8)
        cmd.b = cmd.b if cmd.b is not None else np.zeros((kc, bl * cols), np.int8)
    tiles, _, _ = simulate(rows, cols, cmds, slots=2 * bl, acc_slots=bl * bl, stall=stall,
                           lookahead=lookahead)
    full = golden.gemm(at, b, transpose_a=True)
    for t, (i, j) in enumerate([(0, 0), (0, 1), (1, 0), (1, 1)]):
        np.testing.assert_array_equal(
            tiles[t].view(np.int32), full[i * rows:(i + 1) * rows, j * cols:(j + 1) * cols])
    assert [t.tolist() for t in tiles] == [t.tolist() for t in models.datapath(cmds, rows, cols)]


def test_reloading_a_slot_waits_for_its_readers():
    # Slot 0 of A is reloaded while earlier commands that read it may still be queued.
    rows, cols = 2, 2
    rng = np.random.default_rng(12)
    cmds = []
    for t in range(5):
        cmds.append(random_command(rng, rows, cols, 5, ta=False, tb=False, raw=True))
        cmds[-1].a_slot, cmds[-1].b_slot = 0, t % 2
    check(rows, cols, cmds, stall=0.0)


@pytest.mark.parametrize("rows,cols,packing", [(1, 1, 1), (1, 2, 1), (2, 1, 1), (1, 1, 2)])
def test_back_to_back_chunks_of_one_slot(rows, cols, packing):
    """The arrays that read out fastest (1x1, 1x2, 2x1) running one tile's K chunks of one
    step back to back, each adding the slot's last partial sums: each read of the slot must
    see the write of the chunk before (GemmDatapath spaces read-outs by at least
    ACCUMULATE_STAGES + 1 cycles; closer, the sum of a chunk would be lost)."""
    rng = np.random.default_rng(5)
    cmds = []
    for t in range(6):
        cmds.append(random_command(rng, rows, cols, 1, ta=False, tb=False, clear=t == 0,
                                   emit=t == 5, raw=True))
        cmds[-1].store, cmds[-1].add, cmds[-1].acc_slot = t < 5, t > 0, 0
    check(rows, cols, cmds, stall=0.0, packing=packing)


@settings(max_examples=15, deadline=None)
@given(rows=st.integers(1, 4), cols=st.integers(1, 4), seed=st.integers(0, 2**32 - 1),
       data=st.data())
def test_random(rows, cols, seed, data):
    rng = np.random.default_rng(seed)
    n = data.draw(st.integers(1, 4))
    cmds = []
    for t in range(n):
        cmds.append(random_command(
            rng, rows, cols, data.draw(st.integers(1, 10)),
            ta=data.draw(st.booleans()), tb=data.draw(st.booleans()),
            clear=t == 0 or data.draw(st.booleans()),
            emit=t == n - 1 or data.draw(st.booleans()),
            raw=data.draw(st.booleans())))
        cmds[-1].store = data.draw(st.booleans())
        cmds[-1].add = any(c.store for c in cmds[:-1]) and data.draw(st.booleans())
        cmds[-1].acc_slot = 0
    check(rows, cols, cmds, seed=seed, stall=data.draw(st.sampled_from([0.0, 0.2, 0.5])),
          packing=data.draw(st.sampled_from([1, 2])))


def test_bad_parameters():
    with pytest.raises(ValueError, match="out_rows"):
        GemmDatapath(4, 4, out_rows=3)
    with pytest.raises(ValueError, match="acc_ram"):
        GemmDatapath(4, 4, acc_ram="bram")


def test_accumulation_slots_in_ultraram_only_when_asked():
    # The attribute Vivado and Yosys map to URAM288; without it synthesis chooses.
    from rtl.export import to_verilog
    assert 'ram_style = "ultra"' in to_verilog(GemmDatapath(2, 3, acc_slots=4,
                                                            acc_ram="ultra"), "dp")
    assert "ram_style" not in to_verilog(GemmDatapath(2, 3, acc_slots=4), "dp")


# ---- K-block mode -----------------------------------------------------------------------


def kblock_commands(rng, rows, cols, a, b, a_exp, b_exp, stops, bl):
    """A blocked GEMM of ``bl x bl`` C tiles in K-block mode: per K run (the ends ``stops``),
    the ``bl**2`` tile commands, each rescaling its run's partial and adding it in float32
    to its accumulation slot; the last run emits. Row ``m`` of the tile takes the run's
    ``a_exp[m, run]``, column ``n`` its ``b_exp[run, n]``."""
    cmds = []
    starts = [0, *stops[:-1]]
    for r, (k0, k1) in enumerate(zip(starts, stops, strict=True)):
        for i in range(bl):
            for j in range(bl):
                rs, cs = slice(i * rows, (i + 1) * rows), slice(j * cols, (j + 1) * cols)
                cmds.append(models.TileCommand(
                    a=a[rs, k0:k1], b=b[k0:k1, cs], a_slot=(r % 2) * bl + i,
                    b_slot=(r % 2) * bl + j, load_a=j == 0, load_b=i == 0,
                    row_exp=a_exp[rs, r].copy(), col_exp=b_exp[r, cs].copy(),
                    store=r < len(stops) - 1, emit=r == len(stops) - 1, add=r > 0,
                    acc_slot=i * bl + j, kblock=True, raw=bool(rng.integers(2))))
    return cmds


@pytest.mark.parametrize("rows,cols,packing,stall", [(2, 3, 1, 0.3), (4, 4, 1, 0.0),
                                                     (3, 2, 2, 0.2), (1, 1, 1, 0.0)])
def test_k_blocks_random_against_model_and_golden(rows, cols, packing, stall):
    """Random K runs (uneven lengths, random exponents per row and column, exponent sums that
    reach subnormals) of a 2 x 2 block of C tiles, with an int32 tile before
    and after (the switch into and out of the mode): the emitted float32 words equal the
    model's and :func:`sim.models.bfp.gemm_kruns`'s, bit for bit; ``raw`` is ignored."""
    from sim.models import bfp

    rng = np.random.default_rng(rows * 7 + cols + packing)
    bl = 2
    stops = [int(x) for x in np.cumsum(rng.integers(1, 9, 4))]
    k = stops[-1]
    a = rng.integers(-128, 128, (bl * rows, k)).astype(np.int8)
    b = rng.integers(-128, 128, (k, bl * cols)).astype(np.int8)
    a_exp = rng.integers(-128, 65, (bl * rows, len(stops))).astype(np.int8)
    b_exp = rng.integers(-40, 41, (len(stops), bl * cols)).astype(np.int8)
    before = random_command(rng, rows, cols, 5, ta=False, tb=True, raw=True)
    after = random_command(rng, rows, cols, 3, ta=True, tb=False, exp_range=(-4, 4))
    before.a_slot = before.b_slot = after.a_slot = after.b_slot = 0
    cmds = [before, *kblock_commands(rng, rows, cols, a, b, a_exp, b_exp, stops, bl), after]
    tiles, _, dut = simulate(rows, cols, cmds, slots=2 * bl, acc_slots=bl * bl, stall=stall,
                             packing=packing, k_blocks=True)
    want = models.datapath(cmds, rows, cols)
    assert [t.tolist() for t in tiles] == [t.tolist() for t in want]
    full = bfp.gemm_kruns(a, a_exp, b, b_exp, stops).view(np.uint32)
    for t, (i, j) in enumerate([(0, 0), (0, 1), (1, 0), (1, 1)]):
        np.testing.assert_array_equal(
            tiles[1 + t], full[i * rows:(i + 1) * rows, j * cols:(j + 1) * cols])


def test_k_blocks_round_each_block_then_add():
    """The subnormal case where the order of rounding matters: K blocks of 32 whose terms are
    2**-149 and 2**-150; the second rounds (to even) to 0 on its own, so the sum is 2**-149
    (rounding the exact sum once would give 2**-148), as :func:`sim.models.bfp.gemm_kblocks`."""
    from sim.models import bfp

    rows, cols = 2, 2
    a = np.zeros((rows, 64), np.int8)
    a[0, 0] = a[0, 32] = 1
    b = a.T.copy()
    a_exp = np.full((rows, 2), -128, np.int8)
    b_exp = np.array([[-21, -21], [-22, -22]], np.int8)
    cmds = kblock_commands(np.random.default_rng(0), rows, cols, a, b, a_exp, b_exp,
                           [32, 64], 1)
    tiles, _, _ = simulate(rows, cols, cmds, stall=0.0, k_blocks=True)
    assert tiles[0][0, 0] == np.float32(2.0 ** -149).view(np.uint32)
    want = bfp.gemm_kblocks(a, np.array([[-128, -128]], np.int8), b,
                            np.array([[-21], [-22]], np.int8))
    assert tiles[0][0, 0] == want.view(np.uint32)[0, 0]


@pytest.mark.parametrize("rows,cols,packing", [(1, 1, 1), (2, 1, 1), (1, 1, 2)])
def test_k_blocks_back_to_back_on_one_slot(rows, cols, packing):
    """K blocks of one step, back to back, each adding the one slot's float32 sum: each read
    of the slot must see the write of the block before (:attr:`GemmDatapath.kb_interval`
    apart; closer, a block's term would be lost), and the first C row leaves
    ``kb_fill_latency`` cycles after the last step is issued."""
    from rtl.buffer import TransposableBuffer

    rng = np.random.default_rng(9)
    cmds = []
    for t in range(6):
        cmds.append(random_command(rng, rows, cols, 1, ta=False, tb=False, emit=t == 5,
                                   exp_range=(-3, 3)))
        cmds[-1].store, cmds[-1].add, cmds[-1].kblock = t < 5, t > 0, True
    stats, dut = check(rows, cols, cmds, stall=0.0, packing=packing, k_blocks=True,
                       with_dut=True)
    gaps = np.diff(stats["last_steps"])
    assert gaps.min() >= dut.kb_interval
    assert (stats["first_rows"][0] - stats["last_steps"][-1]
            == dut.kb_fill_latency - TransposableBuffer.READ_LATENCY)


def test_k_blocks_full_rate_from_kb_interval():
    """K-block tiles of ``kb_interval`` steps and more keep the array stepping every cycle."""
    rows, cols = 4, 4
    k = GemmDatapath(rows, cols, k_blocks=True).kb_interval
    rng = np.random.default_rng(10)
    cmds = []
    for t in range(6):
        cmds.append(random_command(rng, rows, cols, k, ta=t % 2 == 1, tb=False,
                                   emit=t % 2 == 1, exp_range=(-3, 3)))
        cmds[-1].store, cmds[-1].add, cmds[-1].kblock = t % 2 == 0, t % 2 == 1, True
        cmds[-1].acc_slot = 0
        # (operands reused from their slots after the first two: no load limits the rate)
        cmds[-1].load_a = cmds[-1].load_b = t < 2
        cmds[-1].a_slot = cmds[-1].b_slot = t % 2
    stats = check(rows, cols, cmds, stall=0.0, k_blocks=True)
    assert np.diff(stats["last_steps"]).tolist()[1:] == [k] * 4   # (after the loads)


@pytest.mark.parametrize("rows,cols,packing", [(4, 3, 1), (5, 2, 2), (3, 3, 2), (1, 2, 1)])
def test_k_blocks_partial_read_out_against_model(rows, cols, packing):
    """Stored K-block tiles that read out only their first rows (random counts, 0 for all)
    between full ones: what the model says, bit for bit — the slot's other rows keep the
    sum before — where A's rows beyond those read are not zero (so a row read or left out
    changes the result), stalled streams and unstalled."""
    rng = np.random.default_rng(rows * 5 + cols + packing)
    bl = 2
    stops = [int(x) for x in np.cumsum(rng.integers(1, 6, 5))]
    a = rng.integers(-128, 128, (bl * rows, stops[-1])).astype(np.int8)
    b = rng.integers(-128, 128, (stops[-1], bl * cols)).astype(np.int8)
    a_exp = rng.integers(-20, 21, (bl * rows, len(stops))).astype(np.int8)
    b_exp = rng.integers(-20, 21, (len(stops), bl * cols)).astype(np.int8)
    cmds = kblock_commands(rng, rows, cols, a, b, a_exp, b_exp, stops, bl)
    for c in cmds:
        if c.store and not c.emit:
            c.read_rows = int(rng.integers(0, rows + 1))
    assert any(0 < c.read_rows < rows for c in cmds) or rows == 1
    want = models.datapath(cmds, rows, cols)
    full = models.datapath([models.TileCommand(**{**vars(c), "read_rows": 0}) for c in cmds],
                           rows, cols)
    if rows > 1:      # (the partial tiles make a difference)
        assert any(not np.array_equal(w, f) for w, f in zip(want, full, strict=True))
    for stall in (0.0, 0.3):
        tiles, _, _ = simulate(rows, cols, cmds, slots=2 * bl, acc_slots=bl * bl, stall=stall,
                               packing=packing, k_blocks=True)
        assert [t.tolist() for t in tiles] == [t.tolist() for t in want]


@pytest.mark.parametrize("rows,cols,packing", [(16, 2, 1), (15, 3, 2), (4, 4, 1)])
def test_k_blocks_partial_tiles_keep_their_own_interval(rows, cols, packing):
    """K-block tiles of one step, back to back on one slot, each reading out a random count
    of rows: each last step follows the one before exactly ``kb_interval_after`` its rows
    later (no sooner: the model's results hold; no later: the info FIFO never holds a
    tile back), and the results are the model's."""
    rng = np.random.default_rng(rows + 10 * cols + packing)
    read = [int(x) for x in rng.integers(1, rows + 1, 12)]
    cmds = []
    for t, r in enumerate(read):
        cmds.append(random_command(rng, rows, cols, 1, ta=False, tb=False, emit=t == 11,
                                   exp_range=(-3, 3)))
        c = cmds[-1]
        c.store, c.add, c.kblock, c.read_rows = t < 11, t > 0, True, r if t < 11 else 0
        c.a_slot = c.b_slot = 0
        c.load_a = c.load_b = t == 0
    stats, dut = check(rows, cols, cmds, stall=0.0, packing=packing, k_blocks=True,
                       with_dut=True)
    gaps = np.diff(stats["last_steps"]).tolist()
    assert gaps == [dut.kb_interval_after(r) for r in read[:-1]]
    # (under the float32 add's floor, reading fewer rows gains nothing)
    floor = dut.kb_interval_after(1)
    assert min(gaps) < dut.kb_interval or floor == dut.kb_interval


def test_k_blocks_only_when_built():
    from rtl.datapath import command_layout
    assert "kblock" not in command_layout(4, 4).members
    assert "kblock" in command_layout(4, 4, k_blocks=True).members
