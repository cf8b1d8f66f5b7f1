"""rtl.walker.Walker against sim.models.engine.walk: random GEMM shapes on several array and
bus shapes, back-to-back descriptors (slot parity carried over), random stalls everywhere."""

import random

import pytest

from rtl.issue import exp_tag_width, tile_command_layout
from rtl.loader import load_job_layout
from rtl.walker import Walker
from rtl.writeback import write_job_layout
from sim.models import engine as em
from sim.testbenches.harness import layout_fields, run, stream_collect, stream_send


def simulate(descs, rows, cols, depth, block, data_width, seed, stall=0.3, k_blocks=False):
    tag_width = exp_tag_width(block, cols, k_blocks)
    dut = Walker(rows, cols, depth=depth, block=block, data_width=data_width,
                 tag_width=tag_width, k_blocks=k_blocks)
    want = ([], [], [])
    parity = bank = 0
    for d in descs:
        cmds, loads, writes, parity, bank = em.walk(d, rows, cols, depth, block, data_width,
                                                    tag_width, parity, bank)
        for acc, part in zip(want, (cmds, loads, writes), strict=True):
            acc += part
    got = {}

    async def send(ctx):
        await stream_send(ctx, dut.i_stream, descs, rng=random.Random(seed), stall=stall)

    def receiver(name, stream, layout, count, salt):
        return stream_collect(got, name, stream, count, rng=random.Random(seed + salt),
                              stall=stall, convert=layout_fields(layout))

    async def drained(ctx):       # downstream drains (or frees a bank) now and then
        rng = random.Random(seed + 9)
        while True:
            ctx.set(dut.drained, rng.random() < 0.5)
            if k_blocks:
                ctx.set(dut.bank_free, rng.randrange(4))
            await ctx.tick()

    run(dut, send,
        receiver("cmds", dut.o_cmd, tile_command_layout(block, k_blocks, rows), len(want[0]),
                 1),
        receiver("loads", dut.o_load, load_job_layout(tag_width), len(want[1]), 2),
        receiver("writes", dut.o_write, write_job_layout(), len(want[2]), 3),
        processes=[drained], deadline_cycles=60 * sum(map(len, want)) + 200)
    assert got["cmds"] == want[0]
    assert got["loads"] == want[1]
    assert got["writes"] == want[2]
    return want


def random_desc(rng, rows, cols, depth, block):
    def dims(lanes):
        return rng.choice([1, lanes, lanes * block + 1, rng.randint(1, 3 * lanes * block)])
    return em.descriptor(
        m=dims(rows), n=dims(cols),
        k=rng.choice([1, depth, depth + 1, rng.randint(1, 3 * depth)]),
        transpose_a=rng.randint(0, 1), transpose_b=rng.randint(0, 1),
        row_vec=rng.randint(0, 1), col_vec=rng.randint(0, 1),
        # strides under a bus word too (packed operands: B's load goes first where B alone
        # is packed, em.b_first)
        a_addr=rng.getrandbits(32), a_stride=rng.choice([rng.getrandbits(16), rng.randint(1, 7)]),
        b_addr=rng.getrandbits(32), b_stride=rng.choice([rng.getrandbits(16), rng.randint(1, 7)]),
        row_exp_addr=rng.getrandbits(32), col_exp_addr=rng.getrandbits(32),
        # the descriptor's reuse block: the buffers' (0 or too large) or any smaller side
        block=rng.choice([0, block, rng.randint(1, block), block + 1, 31]),
        # the longest K chunk (DESC_FLAGS.CHUNK): ramped to the depth, or balanced at it,
        # half or a quarter of it
        chunk=rng.choice([0, 0, 1, 2, 3]))


CONFIGS = [  # rows, cols, depth, block, data_width
    (8, 8, 16, 2, 128), (4, 16, 16, 4, 64), (2, 8, 16, 1, 128), (16, 4, 64, 2, 512),
    (8, 8, 32, 4, 256), (4, 4, 128, 2, 64),   # this one ramps its first block 8, 16, 32, ...
    (8, 8, 64, 2, 64)]   # and this one 16, 32, ...: the read-out interval (15), not align (8)


@pytest.mark.parametrize("rows,cols,depth,block,data_width", CONFIGS)
@pytest.mark.parametrize("seed", range(2))
def test_walk_matches_model(rows, cols, depth, block, data_width, seed):
    rng = random.Random(seed)
    descs = [random_desc(rng, rows, cols, depth, block) for _ in range(3)]
    simulate(descs, rows, cols, depth, block, data_width, seed)


def test_edges():
    """One tile; exactly one block; a ragged last block in both directions; K one past a
    chunk; both exponent vectors; all transposes."""
    rows, cols, depth, block = 4, 4, 16, 2
    descs = [em.descriptor(m=m, n=n, k=k, transpose_a=ta, transpose_b=tb, row_vec=1,
                           col_vec=1, a_addr=0x100, a_stride=0x40, b_addr=0x2000,
                           b_stride=0x40, row_exp_addr=0x3000, col_exp_addr=0x3100)
             for m, n, k, ta, tb in [(1, 1, 1, 0, 0), (8, 8, 16, 1, 1), (9, 13, 17, 1, 0),
                                     (13, 9, 33, 0, 1)]]
    want = simulate(descs, rows, cols, depth, block, 128, seed=4, stall=0.0)
    assert want[0][0]["a_slot"] == 0 and want[0][1]["a_slot"] == 2   # parity carried over


def test_model_spans():
    """k-major A (transposed) loads the block's tiles with the first command, as one span."""
    d = em.descriptor(m=20, n=8, k=5, transpose_a=1, a_addr=0x1000, a_stride=0x40,
                      b_stride=0x40)
    cmds, loads, _, _, _ = em.walk(d, 8, 8, 16, 4, 128)
    assert [c["load_a"] for c in cmds] == [1, 0, 0]
    assert [c["a_extra"] for c in cmds] == [2, 2, 2]
    a = loads[0]
    assert (a["rows"], a["nbeats"], a["valid"], a["nwords"], a["row0"]) == (5, 3, 20, 2, 0)


@pytest.mark.parametrize("k,depth,align,want", [
    (1, 16, 1, [(0, 1)]), (16, 16, 4, [(0, 16)]), (17, 16, 1, [(0, 1), (1, 16)]),
    (17, 16, 4, [(0, 4), (4, 13)]), (40, 16, 1, [(0, 8), (8, 16), (24, 16)]),
    (40, 16, 8, [(0, 8), (8, 16), (24, 16)]), (42, 16, 8, [(0, 16), (16, 16), (32, 10)]),
    (48, 16, 4, [(0, 16), (16, 16), (32, 16)])])
def test_k_chunks_short_first(k, depth, align, want):
    """The short chunk comes first, rounded up to the alignment; the chunks tile 0..k."""
    assert em.k_chunks(k, depth, align) == want


@pytest.mark.parametrize("k,want", [
    (23, [(0, 23)]),                                          # under 3 x align: no ramp
    (24, [(0, 8), (8, 16)]),
    (100, [(0, 8), (8, 16), (24, 16), (40, 60)]),
    (300, [(0, 8), (8, 16), (24, 32), (56, 64), (120, 56), (176, 64), (240, 60)])])
def test_k_chunks_ramp(k, want):
    """The first block doubles its chunks from ``align`` while what is left is at least twice
    the next one (depth 64, align 8), then cuts the rest short-first."""
    assert em.k_chunks(k, 64, 8, ramp=True) == want
    assert sum(kc for _, kc in want) == k


@pytest.mark.parametrize("side,want", [(0, 4), (1, 1), (3, 3), (4, 4), (5, 4), (31, 4)])
def test_model_block_side(side, want):
    """A descriptor's ``block`` sets the reuse blocks' side (1..the buffers' 4; 0 or more: 4):
    a 10 x 10-tile GEMM walks ceil(10 / side)**2 blocks, each tile once per K chunk."""
    d = em.descriptor(m=40, n=40, k=3, a_stride=0x10, b_stride=0x40, block=side)
    cmds, _, writes, _, _ = em.walk(d, 4, 4, 16, 4, 128)
    assert len(cmds) == len(writes) == 100
    corners = {(w["m0"] // (4 * want), w["n0"] // (4 * want)) for w in writes}
    assert len(corners) == (-(-10 // want)) ** 2
    firsts = [c for c in cmds if c["i"] == 0 and c["j"] == 0]
    assert len(firsts) == len(corners)


def test_block_side_in_rtl():
    """Back-to-back descriptors of sides 3, 0 (the buffers') and 1 on a block-4 walker."""
    descs = [em.descriptor(m=m, n=n, k=k, transpose_a=ta, transpose_b=tb, a_addr=0x100,
                           a_stride=0x100, b_addr=0x4000, b_stride=0x100, block=side)
             for m, n, k, ta, tb, side in [(30, 26, 20, 0, 1, 3), (17, 33, 9, 1, 0, 0),
                                           (9, 9, 40, 1, 1, 1)]]
    simulate(descs, 4, 4, 16, 4, 128, seed=7)


@pytest.mark.parametrize("k,depth,align,want", [
    (576, 512, 16, [(0, 288), (288, 288)]),                  # not 64 + 512
    (1152, 512, 16, [(0, 320), (320, 416), (736, 416)]),
    (100, 64, 8, [(0, 56), (56, 44)]), (40, 64, 8, [(0, 40)]),
    (200, 64, 64, [(0, 64), (64, 64), (128, 64), (192, 8)])])  # alignment = depth: no change
def test_k_chunks_balanced(k, depth, align, want):
    """The blocks after the first cut K into chunks of about equal length, each but the last
    a multiple of ``align``, none over ``depth``."""
    assert em.k_chunks(k, depth, align, balanced=True) == want
    assert all(kc % align == 0 for _, kc in want[:-1])


def test_first_block_ramps_then_balances():
    """After its ramp the first block cuts what is left into about equal chunks, not short
    first: at depth 256 from 32, 784 -> 32, 64, 128, 160, 224, 176 (not 64, 256, 240, whose
    256-step chunk loads behind a 64-step one); too short to ramp, it cuts short first."""
    assert em.block_chunks(784, 256, 32, first=True) == [
        (0, 32), (32, 64), (96, 128), (224, 160), (384, 224), (608, 176)]
    assert em.k_chunks(784, 256, 32, ramp=True) == [
        (0, 32), (32, 64), (96, 128), (224, 64), (288, 256), (544, 240)]
    assert em.block_chunks(40, 16, 16, first=True) == em.k_chunks(40, 16, 16) == [
        (0, 16), (16, 16), (32, 8)]


def test_first_block_ramp_then_balanced_in_rtl():
    """The walker's first block: ramp 8, 16, 32, 64, then 72, 96, 96 (K = 384, depth 128):
    the model's cut, not the short-first one (8, 128, 128 after the ramp)."""
    d = em.descriptor(m=8, n=8, k=384, a_addr=0x100, a_stride=0x200, b_addr=0x8000,
                      b_stride=0x100, block=2)
    want = simulate([d], 4, 4, 128, 2, 64, seed=5)
    assert sorted({c["k"] for c in want[0]}) == [8, 16, 32, 64, 72, 96]


def test_ramp_starts_at_the_readout_interval():
    """The ramp's first chunk is the least multiple of the alignment no shorter than the
    array's read-out interval (rows + cols - 1): 16 steps on 8x8 at 64 bits (alignment 8),
    then 32; then balanced (K = 200, depth 64). Where that exceeds the depth, no ramp."""
    assert em.ramp_start(8, 8, 64) == 16 and em.ramp_start(4, 4, 64) == 8
    assert em.ramp_start(16, 16, 64) == 32 and em.ramp_start(32, 64, 128) == 128
    d = em.descriptor(m=16, n=16, k=200, a_addr=0x100, a_stride=0x400, b_addr=0x8000,
                      b_stride=0x100, block=2)
    cmds = simulate([d], 8, 8, 64, 2, 64, seed=6)[0]
    assert [c["k"] for c in cmds[::4]] == [16, 32, 48, 56, 48]
    assert em.block_chunks(200, 16, 16, first=True, start=32) == \
        em.k_chunks(200, 16, 16, balanced=True)


def test_balanced_chunks_in_rtl():
    """Descriptors of several blocks whose K spans 2 to 4 chunks: the first block's chunks
    ramp and then are balanced, as the later blocks' are (depth 16, alignment 8)."""
    descs = [em.descriptor(m=m, n=n, k=k, transpose_a=ta, transpose_b=tb, a_addr=0x100,
                           a_stride=0x100, b_addr=0x4000, b_stride=0x100, block=side)
             for m, n, k, ta, tb, side in [(20, 12, 37, 0, 0, 2), (9, 30, 50, 1, 0, 1),
                                           (17, 17, 33, 0, 1, 0), (30, 8, 64, 1, 1, 2)]]
    want = simulate(descs, 4, 4, 16, 2, 64, seed=3)
    ks = [c["k"] for c in want[0]]
    assert 9 in ks          # 37 = 12 + 16 + 9 after the first block (4 + 8 + 12 + 13 in it)


@pytest.mark.parametrize("rows,cols,m,n,down", [
    (4, 8, 40, 40, True),       # more columns than rows: down the columns, B kept
    (8, 8, 72, 40, True),       # square, M > N: down the columns
    (8, 8, 40, 72, False),      # square, M < N: along the rows, A kept
    (8, 4, 40, 40, False),
    (4, 8, 8, 40, False),       # one row of blocks: along it, whatever the array
    (8, 8, 40, 16, True)])      # one column of blocks: down it
def test_blocks_keep_the_shared_operand(rows, cols, m, n, down):
    """K in one chunk: the walk goes along the inner direction of
    :func:`sim.models.engine.column_order`, and every block after the first of its row
    (column) of blocks loads no A (B) tile, reading the one before's slots; a K of two
    chunks walks the rows and keeps nothing. The RTL walks it the same."""
    depth, block, k = 16, 2, 12
    d = em.descriptor(m=m, n=n, k=k, transpose_a=1, a_addr=0x100, a_stride=0x100,
                      b_addr=0x4000, b_stride=0x100, block=block)
    assert em.column_order(m, n, k, rows, cols, depth, block) == down
    cmds, loads, writes, _, _ = em.walk(d, rows, cols, depth, block, 128)
    order = em.block_order(m, n, k, rows, cols, depth, 128, block)
    blocks_m, blocks_n = -(-m // (block * rows)), -(-n // (block * cols))
    assert [b[3 if down else 2] for b in order] == [
        i % (blocks_m if down else blocks_n) != 0 for i in range(blocks_m * blocks_n)]
    assert not any(b[2 if down else 3] for b in order)
    kept_path = 1 if down else 0
    assert sum(j["path"] == kept_path for j in loads) == (blocks_n if down else blocks_m)
    assert sum(j["path"] != kept_path for j in loads) > blocks_m * blocks_n - 1
    # a kept operand's commands read the slots the block before loaded
    firsts = [c for c in cmds if c["i"] == 0 and c["j"] == 0]
    slot = "b_slot" if down else "a_slot"
    for prev, cur, blk in zip(firsts, firsts[1:], order[1:], strict=False):
        if blk[3 if down else 2]:
            assert cur[slot] == prev[slot] and not cur["load_b" if down else "load_a"]
    assert em.block_order(m, n, 2 * depth, rows, cols, depth, 128, block)[1][2:] == (
        False, False)
    simulate([d, {**d, "k": 2 * depth}], rows, cols, depth, block, 128, seed=11)


def test_chunk_field_cuts_every_block_balanced():
    """``DESC_FLAGS.CHUNK``: no ramp, every block cut into about equal chunks of at most the
    depth, half or a quarter of it, never under the alignment (the model, then the RTL)."""
    # an 8 x 16 array on a 64-bit bus (align 16, ramp from 32) at depth 512: K = 256
    rows, cols, depth, width = 8, 16, 512, 64
    want = {0: [32, 64, 160], 1: [256], 2: [256], 3: [128, 128]}
    for chunk, kcs in want.items():
        got = em.array_block_chunks(256, rows, cols, depth, width, first=True, chunk=chunk)
        assert [kc for _, kc in got] == kcs, chunk
    # later blocks: the balanced cut at the chunk's depth (0 and 1 alike)
    assert [kc for _, kc in em.array_block_chunks(600, rows, cols, depth, width, first=False,
                                                  chunk=3)] == [112, 128, 128, 128, 104]
    assert em.chunk_depth(16, 3, 4, 16, 64) == 16          # a quarter of 16, not under 16
    with pytest.raises(ValueError, match="chunk"):
        em.chunk_depth(512, 4, 8, 8, 128)
    # in the RTL: one descriptor per choice, back to back, at a depth where each differs
    descs = [em.descriptor(m=20, n=9, k=k, chunk=c, transpose_a=ta, a_addr=0x1000,
                           a_stride=0x400, b_addr=0x8000, b_stride=0x40)
             for c, k, ta in [(3, 256, 0), (2, 100, 1), (1, 200, 0), (0, 256, 1), (3, 33, 0)]]
    simulate(descs, 4, 4, 64, 2, 64, seed=7)


def test_packed_b_loads_first():
    """A command's B load goes before its A load where B alone is stored packed (k-major,
    stride under a bus word): in the model, then the RTL."""
    base = dict(m=8, n=2, k=64, a_addr=0x1000, b_addr=0x8000)
    cases = [  # (transpose_a, a_stride, transpose_b, b_stride), B first
        ((0, 0x40, 0, 2), True), ((0, 0x40, 0, 0x10), False), ((0, 0x40, 1, 2), False),
        ((1, 8, 0, 2), False), ((1, 0x10, 0, 2), True)]
    descs = []
    for (ta, sa, tb, sb), first in cases:
        d = em.descriptor(**base, transpose_a=ta, a_stride=sa, transpose_b=tb, b_stride=sb)
        assert em.b_first(d, 128) == first
        _, loads, _, _, _ = em.walk(d, 4, 4, 64, 2, 128)
        assert [j["path"] for j in loads[:2]] == ([1, 0] if first else [0, 1])
        descs.append(d)
    simulate(descs, 4, 4, 64, 2, 128, seed=5)


@pytest.mark.parametrize("rows,cols,depth,block,data_width", [
    (8, 8, 32, 4, 256), (4, 4, 128, 2, 64), (8, 8, 64, 2, 64), (2, 8, 64, 1, 128),
    (4, 64, 64, 2, 128), (2, 64, 64, 1, 64)])
@pytest.mark.parametrize("seed", range(2))
def test_k_blocks_walk_matches_model(rows, cols, depth, block, data_width, seed):
    """Walker(k_blocks=True): descriptors with ``tiles`` walk K in tile blocks of 32, each
    chunk with its grid exponents' one-byte loads (row ``i`` of A's grid, column ``j`` of
    B's, read transposed with their operand; on 64 columns a second one for a B tile's
    columns in the next tile block, where there are any), mixed with plain descriptors, as
    :func:`sim.models.engine.walk` says."""
    rng = random.Random(seed * 7 + rows)
    descs = []
    for t in range(4):
        d = random_desc(rng, rows, cols, depth, block)
        d["tiles"] = int(t != 2)
        d["k"] = rng.choice([1, 32, 33, 64, rng.randint(1, 200)])
        descs.append(d)
    simulate(descs, rows, cols, depth, block, data_width, seed, k_blocks=True)


@pytest.mark.parametrize("rows,cols,depth,block,data_width", [
    (8, 8, 32, 4, 256), (4, 64, 64, 2, 128)])
@pytest.mark.parametrize("ta", [0, 1])
def test_k_blocks_middle_blocks_read_out_a_tiles_rows(rows, cols, depth, block, data_width,
                                                      ta):
    """K blocks between a tile's first and last (stored and added to) name the rows of A's
    tile inside M (``read_rows``, the datapath reads out only those); the first and the
    last, and tiles full of rows, name none (0)."""
    rng = random.Random(rows + ta)
    d = random_desc(rng, rows, cols, depth, block)
    d.update(m=rows * block + 3, k=100, tiles=1, transpose_a=ta, block=0)
    cmds = simulate([d], rows, cols, depth, block, data_width, 0, k_blocks=True)[0]
    assert {c["read_rows"] for c in cmds} == {0, 3}
    assert all(c["read_rows"] == 0 for c in cmds if c["emit"] or not c["add"])


def test_k_blocks_exponents_wait_for_their_bank():
    """Walker(k_blocks=True): each K chunk's exponent loads go to the other bank than the
    chunk before's, and wait until ``bank_free`` says that bank is free, whatever the other
    bank says; its commands carry the bank."""
    rows = cols = 4
    block, depth = 2, 64
    tag_width = exp_tag_width(block, cols, True)
    dut = Walker(rows, cols, depth=depth, block=block, data_width=64, tag_width=tag_width,
                 k_blocks=True)
    d = random_desc(random.Random(3), rows, cols, depth, block)
    d.update(m=8, n=8, k=96, tiles=1, row_vec=0, col_vec=0, block=0)
    cmds, loads, _, _, _ = em.walk(d, rows, cols, depth, block, 64, tag_width)
    hold = 40                  # cycles each bank is held busy before it is freed
    seen = []                  # (cycle, tag) of each exponent load; (cycle, bank) of commands
    freed, clock = [], [0]     # the cycles each bank was freed; the cycle

    async def send(ctx):
        await stream_send(ctx, dut.i_stream, [d])

    async def banks(ctx):
        # chunk 1 loads bank 1, chunk 2 bank 0, chunk 3 bank 1: each held busy for `hold`
        # cycles once the chunk before's loads are out (the other bank free all along)
        for n, free in enumerate((0b01, 0b10, 0b01)):
            while sum(kind == "exp" for kind, _, _ in seen) < 4 * n:
                await ctx.tick()
            ctx.set(dut.bank_free, free)
            await ctx.tick().repeat(hold)
            freed.append(clock[0])
            ctx.set(dut.bank_free, 0b11)

    async def collect(ctx):
        ctx.set(dut.o_load.ready, 1)
        ctx.set(dut.o_cmd.ready, 1)
        ctx.set(dut.o_write.ready, 1)
        while True:
            _, _, lv, lp, cv, cp = await ctx.tick().sample(
                dut.o_load.valid, dut.o_load.payload, dut.o_cmd.valid, dut.o_cmd.payload)
            clock[0] += 1
            if lv and lp.tag & 1:
                seen.append(("exp", clock[0], int(lp.tag)))
            if cv:
                seen.append(("cmd", clock[0], int(cp.bank)))

    run(dut, send, processes=[banks, collect], deadline_cycles=2000)
    exps = [(c, t >> (tag_width - 1)) for kind, c, t in seen if kind == "exp"]
    assert len(exps) == sum(j["tag"] & 1 for j in loads) == 3 * 4
    assert [b for _, b in exps] == [1] * 4 + [0] * 4 + [1] * 4
    # each chunk's first exponent load only after its bank was freed
    assert len(freed) == 3
    assert all(exps[4 * n][0] >= freed[n] for n in range(3))
    assert [b for kind, _, b in seen if kind == "cmd"] == [c["bank"] for c in cmds] == (
        [1] * 4 + [0] * 4 + [1] * 4)


def test_k_blocks_needs_the_tile_block_to_fit():
    with pytest.raises(ValueError, match="k_blocks needs depth"):
        Walker(8, 8, depth=16, block=2, data_width=64, k_blocks=True)
    with pytest.raises(ValueError, match="dividing 32"):
        Walker(64, 8, depth=64, block=2, data_width=64, k_blocks=True)
    with pytest.raises(ValueError, match="cols dividing 32 or 64"):
        Walker(8, 128, depth=64, block=2, data_width=64, k_blocks=True)
    with pytest.raises(ValueError, match="cols dividing 32 or 64"):
        Walker(8, 48, depth=64, block=2, data_width=64, k_blocks=True)
    with pytest.raises(ValueError, match="tag_width must be at least 4"):
        Walker(8, 64, depth=64, block=2, data_width=64, k_blocks=True, tag_width=3)
    with pytest.raises(ValueError, match="tag_width must be at least 3"):
        Walker(8, 8, depth=64, block=2, data_width=64, k_blocks=True, tag_width=2)
