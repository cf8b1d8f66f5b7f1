"""rtl.stripe: LoadStriper against sim.engine_models.stripe and VectorInterleave against
sim.engine_models.interleave, random stalls on every stream; and the model's striped rows
are the job's rows (each row's address, in order once interleaved)."""

import random

import pytest

from rtl.loader import load_job_layout
from rtl.stripe import STRIPE_MIN_WORDS, LoadStriper, VectorInterleave, interleave_job_layout
from sim import engine_models as em
from sim.harness import layout_fields, run, stream_collect, stream_recv, stream_send


def random_job(rng, tag_width=3):
    return {"base": rng.getrandbits(rng.choice([32, 64])),
            "stride": rng.choice([rng.getrandbits(20), rng.getrandbits(32), 64, 128]),
            "row0": rng.getrandbits(rng.choice([4, 17])),
            "col": rng.getrandbits(rng.choice([16, 64])),
            "rows": rng.choice([0, 1, 2, 3, rng.randint(1, 9)]), "nzero": rng.randint(0, 5),
            "nwords": rng.randint(1, 8), "nbeats": rng.randint(1, 4),
            "valid": rng.randint(0, 70), "sel": rng.getrandbits(8),
            "tag": rng.getrandbits(tag_width), "path": 1}


def _row_addresses(job):
    return [(job["base"] + (job["row0"] + i) * job["stride"] + job["col"]) % (1 << 64)
            for i in range(job["rows"])]


def test_model_stripes_rows_in_place():
    """Every striped job's rows, taken even, odd, even, ..., are the job's rows at the same
    addresses; zero rows stay on the even side; short or narrow jobs are not striped."""
    rng = random.Random(1)
    striped = 0
    for _ in range(2000):
        job = random_job(rng)
        even, odd, merge = em.stripe(job)
        assert (merge["nrows"], merge["nzero"], merge["nbeats"]) == (
            job["rows"], job["nzero"], job["nbeats"])
        if odd is None:
            assert even == job and not merge["striped"]
            assert job["rows"] < 2 or job["nwords"] < STRIPE_MIN_WORDS \
                or job["stride"] >= 1 << 31
            continue
        striped += 1
        rows = _row_addresses(job)
        assert _row_addresses(even) == rows[0::2] and _row_addresses(odd) == rows[1::2]
        assert (even["nzero"], odd["nzero"]) == (job["nzero"], 0)
        assert even["nwords"] == odd["nwords"] == job["nwords"]
    assert striped > 300


@pytest.mark.parametrize("seed", range(3))
def test_striper_matches_model(seed):
    rng = random.Random(seed)
    jobs = [random_job(rng) for _ in range(16)]
    model = [em.stripe(j) for j in jobs]
    want_even = [e for e, _, _ in model]
    want_odd = [o for _, o, _ in model if o is not None]
    want_merge = [g for _, _, g in model]
    assert want_odd and len(want_odd) < len(jobs)
    dut = LoadStriper(tag_width=3)
    got = {}

    async def send(ctx):
        await stream_send(ctx, dut.i_stream, jobs, rng=random.Random(seed), stall=0.3)

    def receiver(name, stream, layout, count, salt):
        return stream_collect(got, name, stream, count, rng=random.Random(seed + salt),
                              stall=0.4, convert=layout_fields(layout))

    run(dut, send,
        receiver("even", dut.o_even, load_job_layout(3), len(want_even), 1),
        receiver("odd", dut.o_odd, load_job_layout(3), len(want_odd), 2),
        receiver("merge", dut.o_merge, interleave_job_layout(), len(want_merge), 3),
        deadline_cycles=1000)
    assert got["even"] == want_even
    assert got["odd"] == want_odd
    assert got["merge"] == want_merge


@pytest.mark.parametrize("seed", range(3))
def test_interleave_matches_model(seed):
    rng = random.Random(seed)
    merges = []
    for _ in range(12):
        nrows = rng.choice([0, 1, 2, 3, rng.randint(1, 7)])
        merges.append({"nrows": nrows, "nzero": rng.randint(0 if nrows else 1, 3),
                       "nbeats": rng.randint(1, 3),
                       "striped": int(nrows >= 2 and rng.random() < 0.7)})
    n0 = sum(j["nbeats"] * (j["nrows"] + j["nzero"] - (j["nrows"] // 2 if j["striped"] else 0))
             for j in merges)
    n1 = sum(j["nbeats"] * (j["nrows"] // 2) for j in merges if j["striped"])
    v0 = [rng.getrandbits(16) for _ in range(n0)]
    v1 = [rng.getrandbits(16) | 1 << 16 for _ in range(n1)]
    want = em.interleave(merges, v0, v1)
    assert n1 and len(want) == n0 + n1
    dut = VectorInterleave(17, depth=4)
    got = []

    async def jobs(ctx):
        await stream_send(ctx, dut.jobs, merges, rng=random.Random(seed), stall=0.3)

    async def feed0(ctx):
        await stream_send(ctx, dut.i_stream0, v0, rng=random.Random(seed + 1), stall=0.3)

    async def feed1(ctx):
        await stream_send(ctx, dut.i_stream1, v1, rng=random.Random(seed + 2), stall=0.3)

    async def take(ctx):
        got.extend(await stream_recv(ctx, dut.o_stream, len(want),
                                     rng=random.Random(seed + 3), stall=0.3))

    run(dut, jobs, feed0, feed1, take, deadline_cycles=3000)
    assert got == want


def test_interleave_passes_a_vector_a_cycle():
    """Unstalled, a striped job's vectors leave one a cycle, across the switches between the
    two inputs (no bubble at a row's end)."""
    dut = VectorInterleave(8)
    job = {"nrows": 4, "nzero": 1, "nbeats": 2, "striped": 1}
    v0, v1 = [1, 2, 5, 6, 9, 10], [3, 4, 7, 8]
    trace = []

    async def bench(ctx):
        ctx.set(dut.jobs.payload, job)
        ctx.set(dut.jobs.valid, 1)
        await ctx.tick()
        ctx.set(dut.jobs.valid, 0)
        ctx.set(dut.o_stream.ready, 1)
        i0 = i1 = 0
        for cycle in range(14):
            ctx.set(dut.i_stream0.payload, v0[min(i0, len(v0) - 1)])
            ctx.set(dut.i_stream0.valid, i0 < len(v0))
            ctx.set(dut.i_stream1.payload, v1[min(i1, len(v1) - 1)])
            ctx.set(dut.i_stream1.valid, i1 < len(v1))
            if ctx.get(dut.o_stream.valid):
                trace.append((cycle, ctx.get(dut.o_stream.payload)))
            i0 += ctx.get(dut.i_stream0.ready) and i0 < len(v0)
            i1 += ctx.get(dut.i_stream1.ready) and i1 < len(v1)
            await ctx.tick()

    run(dut, bench, deadline_cycles=40)
    assert [v for _, v in trace] == list(range(1, 11))
    first = trace[0][0]
    assert [c for c, _ in trace] == list(range(first, first + 10))
