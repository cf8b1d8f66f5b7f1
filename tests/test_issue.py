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
    TAG = exp_tag_width(BLOCK, cols, k_blocks) if halves else globals()["TAG"]
    rng = random.Random(seed)
    blocks = []       # (exponent vectors a / b, tile commands, operand vectors a / b)
    for _ in range(4):
        # each block's commands carry a descriptor of their own (as the first block of the
        # next descriptor's do, queued behind the last of the one before)
        desc = {"transpose_a": rng.randint(0, 1), "transpose_b": rng.randint(0, 1),
                "raw": rng.randint(0, 1), "row_vec": row_vec, "col_vec": col_vec,
                "row_exp": rng.randint(-128, 127), "col_exp": rng.randint(-128, 127),
                **({"tiles": rng.randint(0, 1)} if k_blocks else {})}
        bm, bn = rng.randint(1, BLOCK), rng.randint(1, BLOCK)
        exps = ([(i, _vec(rng, ROWS)) for i in range(bm)] if row_vec else [],
                [(j, _vec(rng, COLS)) for j in range(bn)] if col_vec else [],
                [(j, _vec(rng, COLS)) for j in range(bn) if rng.random() < 0.7]
                if col_vec and halves else [])
        cmds = [{"k": rng.randint(1, 64), "a_slot": rng.randint(0, 3), "b_slot": rng.randint(0, 3),
                 "load_a": rng.randint(0, 1), "load_b": rng.randint(0, 1),
                 "a_extra": rng.randint(0, 3), "b_extra": rng.randint(0, 3),
                 "emit": rng.randint(0, 1), "store": rng.randint(0, 1), "add": rng.randint(0, 1),
                 "acc_slot": rng.randint(0, 3), "i": i, "j": j, **desc}
                for i in range(bm) for j in range(bn)]
        ops = ([_vec(rng, ROWS) for _ in range(rng.randint(0, 5))],
               [_vec(rng, COLS) for _ in range(rng.randint(0, 5))])
        blocks.append((exps, cmds, ops))
    program = []
    for exps, cmds, _ in blocks:
        program += [("exp", p, i, v) for p in (0, 1) for i, v in exps[p]]
        program += [("exp", 1, j, v, True) for j, v in exps[2]]
        program += [("cmd", c) for c in cmds]
    want = em.issue(program, ROWS, COLS)
    want_ops = [sum((b[2][p] for b in blocks), []) for p in (0, 1)]
    dut = CommandIssue(ROWS, COLS, block=BLOCK, tag_width=TAG, k_blocks=k_blocks)
    got = {}

    async def walker(ctx):
        """The walker's protocol: a block's exponent loads only once the previous block's
        commands have left; then its commands, which wait for the vectors (without vectors,
        a block's commands queue behind the block before's)."""
        for exps, cmds, ops in blocks:
            if row_vec or col_vec:
                await ctx.tick().until(dut.drained)
            for _ in range(len(exps[0]) + len(exps[1]) + len(exps[2])):
                ctx.set(dut.exp_issued, 1)
                await ctx.tick()
            ctx.set(dut.exp_issued, 0)
            await stream_send(ctx, dut.i_cmd, cmds, rng=rng, stall=0.3)
            if exps[0] or exps[1] or exps[2]:     # queued, waiting for the vectors
                for _ in range(3):
                    assert not ctx.get(dut.cmd.valid)
                    await ctx.tick()
            for p, port in ((0, dut.a_vectors), (1, dut.b_vectors)):
                beats = [{"data": v, "tag": 1 | i << 1} for i, v in exps[p]]
                if p == 1:
                    beats += [{"data": v, "tag": 1 | j << 1 | 1 << (TAG - 1)}
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
