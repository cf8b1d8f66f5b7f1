"""rtl.gearbox.Gearbox against sim.models.gearbox, with random stalls on every stream."""

import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rtl.gearbox import Gearbox
from sim import models
from sim.harness import run, stream_recv, stream_send


def _jobs(draw, data_width, lanes):
    bpw = data_width // 8
    jobs = []
    for _ in range(draw(st.integers(1, 6))):
        kind = draw(st.sampled_from(["run", "row", "zeros"]))
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
        else:
            jobs.append(models.GearboxJob(0, draw(st.integers(1, 3)), 0, tag=tag,
                                          nrows=0, nzero=nzero + 1))
    return jobs


def check(data_width, lanes, jobs, seed):
    rng = random.Random(seed)
    words = [rng.getrandbits(data_width) for _ in range(sum(j.nwords * j.nrows for j in jobs))]
    expected = models.gearbox(words, jobs, data_width, lanes)
    dut = Gearbox(data_width, lanes, tag_width=2)
    got = []

    async def feed_jobs(ctx):
        await stream_send(ctx, dut.jobs, [
            {"nwords": j.nwords, "nbeats": j.nbeats, "valid": j.valid, "sel": j.sel,
             "tag": j.tag, "nrows": j.nrows, "nzero": j.nzero} for j in jobs],
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
