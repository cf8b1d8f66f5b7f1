"""rtl.gearbox.Gearbox against sim.models.datapath.gearbox, with random stalls on every stream."""

import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rtl.gearbox import Gearbox
from sim.models import datapath as models
from sim.testbenches.harness import run, stream_recv, stream_send


def _jobs(draw, data_width, lanes):
    bpw = data_width // 8
    jobs = []
    for _ in range(draw(st.integers(1, 6))):
        kind = draw(st.sampled_from(["run", "row", "zeros", "packed"]))
        nrows, nzero = draw(st.integers(1, 3)), draw(st.integers(0, 2))
        tag = draw(st.integers(0, 3))
        if kind == "run":                              # lane runs of k bytes
            k = draw(st.integers(1, 3 * max(bpw, lanes) + 5))
            jobs.append(models.GearboxJob(-(-k // bpw), -(-k // lanes), k, tag=tag,
                                          nrows=nrows, nzero=nzero))
        elif kind == "row":                            # one vector from part of each row
            valid = draw(st.integers(1, lanes))
            sel = draw(st.integers(0, max(1, bpw // lanes) - 1))
            jobs.append(models.GearboxJob(-(-(sel * lanes + valid) // bpw) if lanes <= bpw
                                          else -(-valid // bpw), 1, valid, sel, tag,
                                          nrows=nrows, nzero=nzero))
        elif kind == "packed":                         # rows closer than a word
            pstride, off = draw(st.integers(1, bpw - 1)), draw(st.integers(0, bpw - 1))
            sel = draw(st.integers(0, (pstride - 1) // lanes)) if lanes < bpw else 0
            valid = draw(st.integers(1, min(pstride - sel * lanes,
                                            lanes if lanes < bpw else pstride)))
            nbeats = 1 if lanes < bpw else -(-valid // lanes)
            in_words = -(-(off + (nrows - 1) * pstride + sel * lanes + valid) // bpw)
            jobs.append(models.GearboxJob(1, nbeats, valid, sel, tag, nrows=nrows, nzero=nzero,
                                          pack=1, off=off, pstride=pstride,
                                          in_words=in_words))
        else:
            jobs.append(models.GearboxJob(0, draw(st.integers(1, 3)), 0, tag=tag,
                                          nrows=0, nzero=nzero + 1))
    return jobs


def check(data_width, lanes, jobs, seed):
    rng = random.Random(seed)
    words = [rng.getrandbits(data_width)
             for _ in range(sum(j.in_words if j.pack else j.nwords * j.nrows for j in jobs))]
    expected = models.gearbox(words, jobs, data_width, lanes)
    dut = Gearbox(data_width, lanes, tag_width=2)
    got = []

    async def feed_jobs(ctx):
        await stream_send(ctx, dut.jobs, [
            {"nwords": j.nwords, "nbeats": j.nbeats, "valid": j.valid, "sel": j.sel,
             "tag": j.tag, "nrows": j.nrows, "nzero": j.nzero, "pack": j.pack, "off": j.off,
             "pstride": j.pstride, "in_words": j.in_words} for j in jobs],
            rng=random.Random(seed + 1), stall=0.3)

    async def feed_words(ctx):
        await stream_send(ctx, dut.i_stream, words, rng=random.Random(seed + 2), stall=0.3)

    async def take(ctx):
        got.extend(await stream_recv(
            ctx, dut.o_stream, len(expected), rng=random.Random(seed + 3), stall=0.3,
            convert=lambda p: ([int(x) for x in p.data], int(p.tag))))
        for _ in range(5):      # nothing more comes out
            assert not ctx.get(dut.o_stream.valid)
            await ctx.tick()

    run(dut, feed_jobs, feed_words, take, deadline_cycles=20_000)
    assert len(got) == len(expected)
    for (vec, tag), (want, want_tag) in zip(got, expected, strict=True):
        assert vec == list(want) and tag == want_tag


@pytest.mark.parametrize("data_width,lanes", [(64, 8), (128, 8), (64, 16), (512, 16),
                                              (64, 32)])
@settings(max_examples=8, deadline=None)
@given(data=st.data())
def test_gearbox_matches_model(data_width, lanes, data):
    check(data_width, lanes, _jobs(data.draw, data_width, lanes), data.draw(st.integers(0, 99)))


def test_packed_rows_one_a_cycle():
    """Eight 3-byte rows packed from byte 5 of four 8-byte words: after the cycle that takes
    the first word, a row (vector) a cycle, each the row's bytes, and all four words taken."""
    data = bytes(range(1, 33))
    words = [int.from_bytes(data[i:i + 8], "little") for i in range(0, 32, 8)]
    job = models.GearboxJob(1, 1, 3, nrows=8, pack=1, off=5, pstride=3, in_words=4)
    want = [list(data[5 + 3 * r:8 + 3 * r]) + [0] * 5 for r in range(8)]
    assert [list(v) for v, _ in models.gearbox(words, [job], 64, 8)] == want
    dut = Gearbox(64, 8)
    got = []

    async def bench(ctx):
        ctx.set(dut.jobs.payload, {"nwords": 1, "nbeats": 1, "valid": 3, "nrows": 8, "pack": 1,
                                   "off": 5, "pstride": 3, "in_words": 4})
        ctx.set(dut.jobs.valid, 1)
        await ctx.tick()
        ctx.set(dut.jobs.valid, 0)
        ctx.set(dut.o_stream.ready, 1)
        ctx.set(dut.i_stream.valid, 1)
        left = list(words)
        for cycle in range(16):
            ctx.set(dut.i_stream.payload, left[0] if left else 0)
            ctx.set(dut.i_stream.valid, bool(left))
            _, _, taken, out, vec = await ctx.tick().sample(
                dut.i_stream.ready, dut.o_stream.valid, dut.o_stream.payload.data)
            if taken and left:
                left.pop(0)
            if out:
                got.append((cycle, [int(x) & 0xFF for x in vec]))
        assert not left

    run(dut, bench, deadline_cycles=100)
    assert [v for _, v in got] == want
    assert [c for c, _ in got] == list(range(got[0][0], got[0][0] + 8))  # a row a cycle


@pytest.mark.parametrize("data_width,lanes,pstride,off,sel,valid", [
    (512, 64, 61, 50, 0, 61), (512, 16, 63, 62, 3, 14), (256, 32, 29, 31, 0, 29),
    (256, 8, 30, 3, 2, 13)])
def test_packed_rows_through_every_part_of_the_shifter(data_width, lanes, pstride, off, sel,
                                                       valid):
    """At 256 and 512 bits the realigner's shifter is cut into 16-byte parts, each steered by
    its own copy of the byte offset: rows whose bytes reach the last part, starting at
    offsets that wrap past a word, come out as the model makes them."""
    bpw = data_width // 8
    assert bpw // Gearbox.REALIGN_BYTES > 1
    nrows = 7
    used = sel * lanes + valid if lanes < bpw else valid
    assert used <= pstride < bpw
    in_words = -(-(off + (nrows - 1) * pstride + used) // bpw)
    nbeats = 1 if lanes < bpw else -(-valid // lanes)
    jobs = [models.GearboxJob(1, nbeats, valid, sel, 1, nrows=nrows, nzero=1, pack=1, off=off,
                              pstride=pstride, in_words=in_words),
            models.GearboxJob(1, nbeats, valid, sel, 2, nrows=2, pack=1, off=bpw - 1,
                              pstride=pstride, in_words=-(-(bpw - 1 + pstride + used) // bpw))]
    check(data_width, lanes, jobs, seed=bpw)


def test_model_pads_and_selects():
    word = int.from_bytes(bytes(range(1, 17)), "little")
    got = models.gearbox([word], [models.GearboxJob(1, 1, 5, sel=1)], 128, 8)
    assert list(got[0][0]) == [9, 10, 11, 12, 13, 0, 0, 0]
    assert np.all(models.gearbox([], [models.GearboxJob(0, 2, 0)], 128, 8)[1][0] == 0)


@pytest.mark.parametrize("kwargs", [{"data_width": 96, "lanes": 8}, {"data_width": 128,
                                                                     "lanes": 6}])
def test_bad_parameters(kwargs):
    with pytest.raises(ValueError, match=next(k for k in ("data_width", "lanes")
                                              if kwargs[k] in (96, 6))):
        Gearbox(**kwargs)
