"""rtl.issue.CommandIssue against sim.models.engine.issue: exponent vectors per block, commands
that wait for them, operand vectors passed through; random stalls on every stream."""

import random

import pytest

from rtl.issue import CommandIssue, exp_tag_width
from sim.models import engine as em
from sim.testbenches.harness import run, stream_collect, stream_send

ROWS, COLS, BLOCK, TAG = 4, 8, 2, 2


def _convert(p):
    out = {name: int(getattr(p, name)) for name, _ in p.shape()
           if name not in ("row_exp", "col_exp")}
    out["row_exp"] = [int(x) for x in p.row_exp]
    out["col_exp"] = [int(x) for x in p.col_exp]
    return out


def _vec(rng, lanes):
    return [rng.randint(-128, 127) for _ in range(lanes)]


@pytest.mark.parametrize("row_vec,col_vec", [(0, 0), (1, 0), (0, 1), (1, 1)])
@pytest.mark.parametrize("seed", range(2))
def test_matches_model(row_vec, col_vec, seed):
    _run(row_vec, col_vec, seed)


@pytest.mark.parametrize("seed", range(3))
def test_k_blocks_broadcast_lane_zero(seed):
    """CommandIssue(k_blocks=True): blocks of commands with ``tiles`` (their exponent
    vectors loaded per K chunk, the one grid exponent in lane 0) leave with ``kblock`` and
    that exponent in every lane; blocks without it as before."""
    _run(1, 1, seed, k_blocks=True)


@pytest.mark.parametrize("seed", range(2))
def test_k_blocks_two_tile_blocks_of_columns(seed):
    """CommandIssue(k_blocks=True) on 64 columns: a B tile's lanes 32..63 lie in the next
    tile block and take lane 0 of the vector tagged with the top bit, lanes 0..31 that of
    the plain one."""
    _run(1, 1, seed, k_blocks=True, cols=64)


def _run(row_vec, col_vec, seed, k_blocks=False, cols=COLS):
    COLS = cols
    halves = k_blocks and cols == 64
    TAG = exp_tag_width(BLOCK, cols, k_blocks) if k_blocks else globals()["TAG"]
    rng = random.Random(seed)
    blocks = []       # (exponent vectors a / b, tile commands, operand vectors a / b, bank)
    bank = 0
    for _ in range(4):
        # each block's commands carry a descriptor of their own (as the first block of the
        # next descriptor's do, queued behind the last of the one before)
        desc = {"transpose_a": rng.randint(0, 1), "transpose_b": rng.randint(0, 1),
                "raw": rng.randint(0, 1), "row_vec": row_vec, "col_vec": col_vec,
                "row_exp": rng.randint(-128, 127), "col_exp": rng.randint(-128, 127),
                **({"tiles": rng.randint(0, 1)} if k_blocks else {})}
        bm, bn = rng.randint(1, BLOCK), rng.randint(1, BLOCK)
        if k_blocks and (row_vec or col_vec):       # (a block's vectors: the other bank)
            bank ^= 1
        exps = ([(i, _vec(rng, ROWS)) for i in range(bm)] if row_vec else [],
                [(j, _vec(rng, COLS)) for j in range(bn)] if col_vec else [],
                [(j, _vec(rng, COLS)) for j in range(bn) if rng.random() < 0.7]
                if col_vec and halves else [])
        cmds = [{"k": rng.randint(1, 64), "a_slot": rng.randint(0, 3), "b_slot": rng.randint(0, 3),
                 "load_a": rng.randint(0, 1), "load_b": rng.randint(0, 1),
                 "a_extra": rng.randint(0, 3), "b_extra": rng.randint(0, 3),
                 "emit": rng.randint(0, 1), "store": rng.randint(0, 1), "add": rng.randint(0, 1),
                 "acc_slot": rng.randint(0, 3), "i": i, "j": j, **desc,
                 **({"bank": bank} if k_blocks else {})}
                for i in range(bm) for j in range(bn)]
        ops = ([_vec(rng, ROWS) for _ in range(rng.randint(0, 5))],
               [_vec(rng, COLS) for _ in range(rng.randint(0, 5))])
        blocks.append((exps, cmds, ops, bank))
    program = []
    for exps, cmds, _, bank in blocks:
        program += [("exp", p, i, v, False, bank) for p in (0, 1) for i, v in exps[p]]
        program += [("exp", 1, j, v, True, bank) for j, v in exps[2]]
        program += [("cmd", c) for c in cmds]
    want = em.issue(program, ROWS, COLS)
    want_ops = [sum((b[2][p] for b in blocks), []) for p in (0, 1)]
    dut = CommandIssue(ROWS, COLS, block=BLOCK, tag_width=TAG, k_blocks=k_blocks)
    got = {}

    async def walker(ctx):
        """The walker's protocol: a block's exponent loads only once the previous block's
        commands have left (with K blocks, the commands of the bank it loads, the block
        before last's); then its commands, which wait for the vectors (without vectors,
        a block's commands queue behind the block before's)."""
        for exps, cmds, ops, bank in blocks:
            if row_vec or col_vec:
                await ctx.tick().until(dut.free[bank] if k_blocks else dut.drained)
            for _ in range(len(exps[0]) + len(exps[1]) + len(exps[2])):
                ctx.set(dut.exp_issued, 1 << bank)
                await ctx.tick()
            ctx.set(dut.exp_issued, 0)
            await stream_send(ctx, dut.i_cmd, cmds, rng=rng, stall=0.3)
            if (exps[0] or exps[1] or exps[2]) and not k_blocks:  # waiting for the vectors
                for _ in range(3):
                    assert not ctx.get(dut.cmd.valid)
                    await ctx.tick()
            top = bank << (TAG - 1) if k_blocks else 0
            for p, port in ((0, dut.a_vectors), (1, dut.b_vectors)):
                beats = [{"data": v, "tag": 1 | i << 1 | top} for i, v in exps[p]]
                if p == 1:
                    beats += [{"data": v, "tag": 1 | j << 1 | 1 << (TAG - 2) | top}
                              for j, v in exps[2]]
                beats += [{"data": v, "tag": 0} for v in ops[p]]
                await stream_send(ctx, port, beats, rng=rng, stall=0.3)

    def receiver(name, stream, count, convert, salt):
        return stream_collect(got, name, stream, count, rng=random.Random(seed + salt),
                              stall=0.3, convert=convert)

    run(dut, walker, receiver("cmds", dut.cmd, len(want), _convert, 1),
        receiver("a", dut.a_stream, len(want_ops[0]), lambda p: [int(x) for x in p], 2),
        receiver("b", dut.b_stream, len(want_ops[1]), lambda p: [int(x) for x in p], 3),
        deadline_cycles=5000)
    assert got["cmds"] == want
    assert [got["a"], got["b"]] == want_ops


def test_k_blocks_two_banks_overlap():
    """CommandIssue(k_blocks=True): a chunk's exponents go to one bank while the chunk
    before's commands, queued on the other, still leave with theirs (before the new
    vectors arrive, and after); the new chunk's commands wait for their own vectors alone,
    and ``free`` follows each bank."""
    tag = exp_tag_width(BLOCK, COLS, True)
    dut = CommandIssue(ROWS, COLS, block=BLOCK, tag_width=tag, k_blocks=True)
    rng = random.Random(5)
    desc = {"transpose_a": 0, "transpose_b": 0, "raw": 0, "row_vec": 1, "col_vec": 1,
            "row_exp": 0, "col_exp": 0, "tiles": 1}

    def command(i, bank):
        return {"k": 32, "a_slot": i, "b_slot": 0, "load_a": 0, "load_b": 0, "a_extra": 0,
                "b_extra": 0, "emit": 0, "store": 1, "add": 0, "acc_slot": i, "i": i, "j": 0,
                **desc, "bank": bank}

    # four chunks on banks 1, 0, 1, 0: (bank, commands, A's vectors, B's vector)
    chunks = [(bank, [command(i, bank) for i in range(2)],
               [_vec(rng, ROWS) for _ in range(2)], _vec(rng, COLS)) for bank in (1, 0, 1, 0)]
    program = []
    for bank, cmds, a_vecs, b_vec in chunks:
        program += [("exp", 0, i, v, False, bank) for i, v in enumerate(a_vecs)]
        program += [("exp", 1, 0, b_vec, False, bank)] + [("cmd", c) for c in cmds]
    want = em.issue(program, ROWS, COLS)
    assert want[0]["row_exp"] != want[2]["row_exp"]      # (the banks' values differ)

    async def walker(ctx):
        got = []

        async def vectors(chunk):
            bank, _, a_vecs, b_vec = chunk
            top = bank << (tag - 1)
            await stream_send(ctx, dut.a_vectors, [{"data": v, "tag": 1 | i << 1 | top}
                                                   for i, v in enumerate(a_vecs)])
            await stream_send(ctx, dut.b_vectors, [{"data": b_vec, "tag": 1 | top}])

        async def announce(chunk):
            ctx.set(dut.exp_issued, 1 << chunk[0])
            await ctx.tick().repeat(3)
            ctx.set(dut.exp_issued, 0)
            await stream_send(ctx, dut.i_cmd, chunk[1])
            await ctx.tick()

        async def take(count):
            for _ in range(count):
                assert ctx.get(dut.cmd.valid)
                got.append(_convert(ctx.get(dut.cmd.payload)))
                ctx.set(dut.cmd.ready, 1)
                await ctx.tick()
                ctx.set(dut.cmd.ready, 0)

        for first, second in (chunks[:2], chunks[2:]):
            await announce(first)
            await vectors(first)
            await ctx.tick().repeat(3)
            # the first chunk's commands queued (not taken): its bank busy, the other free
            assert ctx.get(dut.cmd.valid)
            assert ctx.get(dut.free) == 1 << second[0]
            # the second chunk's exponents announced into the other bank, its commands behind
            await announce(second)
            assert ctx.get(dut.free) == 0
            if first is chunks[0]:
                # the first chunk's commands leave while the second's vectors are awaited;
                # then the second's wait
                await take(2)
                await ctx.tick().repeat(3)
                assert not ctx.get(dut.cmd.valid)
                assert ctx.get(dut.free) == 1 << first[0]
                await vectors(second)
            else:
                # the second's vectors arrive with the first's commands still queued: theirs
                # stay
                await vectors(second)
                await ctx.tick().repeat(3)
                await take(2)
            await ctx.tick().repeat(2)
            await take(2)
            await ctx.tick()
            assert ctx.get(dut.free) == 3 and ctx.get(dut.drained)
        assert got == want

    run(dut, walker, deadline_cycles=500)
