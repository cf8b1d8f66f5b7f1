"""rtl.stripe: LoadStriper against sim.models.engine.stripe and VectorInterleave against
sim.models.engine.interleave, over two, three and four ways, random stalls on every stream; the
model's striped rows are the job's rows (each row's address, in order once interleaved); and
div3 is exact on every 17- and 18-bit value."""

import random

import numpy as np
import pytest
from amaranth import Module, Signal
from amaranth.sim import Simulator

from rtl.loader import load_job_layout
from rtl.stripe import (
    STRIPE_MIN_WORDS,
    STRIPE_WAYS,
    LoadStriper,
    VectorInterleave,
    div3,
    interleave_job_layout,
)
from sim.models import engine as em
from sim.testbenches.harness import layout_fields, run, stream_collect, stream_recv, stream_send


def random_job(rng, tag_width=3):
    return {"base": rng.getrandbits(rng.choice([32, 64])),
            "stride": rng.choice([rng.getrandbits(20), rng.getrandbits(32), 64, 128,
                                  (1 << 32) // 3, (1 << 32) // 3 + 1, (1 << 32) // 4,
                                  (1 << 32) // 4 + 1]),
            "row0": rng.choice([rng.getrandbits(rng.choice([4, 17])), (1 << 17) - 1]),
            "col": rng.getrandbits(rng.choice([16, 64])),
            "rows": rng.choice([0, 1, 2, 3, 4, rng.randint(1, 11)]), "nzero": rng.randint(0, 5),
            "nwords": rng.randint(1, 8), "nbeats": rng.randint(1, 4),
            "valid": rng.randint(0, 70), "sel": rng.getrandbits(8),
            "tag": rng.getrandbits(tag_width), "path": 1}


def _row_addresses(job):
    return [(job["base"] + (job["row0"] + i) * job["stride"] + job["col"]) % (1 << 64)
            for i in range(job["rows"])]


@pytest.mark.parametrize("width", [17, 18])
def test_div3_is_exact(width):
    """The quotient and remainder of ``width``-bit values in the simulator (every 64th value
    and the top 200), and of every value through the same arithmetic in numpy."""
    x = Signal(width)
    q, r = div3(x, width)
    m = Module()
    qs, rs = Signal(width), Signal(2)
    m.d.comb += [qs.eq(q), rs.eq(r)]
    values = np.arange(1 << width, dtype=np.int64)
    step = (1 << width) // 64
    got = []

    async def bench(ctx):
        for v in list(range(0, 1 << width, step)) + list(range((1 << width) - 200, 1 << width)):
            ctx.set(x, v)
            got.append((v, ctx.get(qs), ctx.get(rs)))

    sim = Simulator(m)
    sim.add_testbench(bench)
    sim.run()
    assert all(q_ == v // 3 and r_ == v % 3 for v, q_, r_ in got)
    # every value, through the same arithmetic on Python integers
    shift = width + 2
    magic = (1 << shift) // 3 + 1
    q = (values * magic) >> shift
    assert np.array_equal(q, values // 3)
    assert np.array_equal(((values & 3) - 3 * (q & 3)) & 3, values % 3)


@pytest.mark.parametrize("ways", STRIPE_WAYS)
def test_model_stripes_rows_in_place(ways):
    """Every striped job's rows, taken way 0, 1, ..., 0, 1, ..., are the job's rows at the
    same addresses; zero rows stay on way 0; short or narrow jobs, or those whose stride
    times the ways does not fit 32 bits, are not striped."""
    rng = random.Random(ways)
    striped = 0
    for _ in range(2000):
        job = random_job(rng)
        jobs, merge = em.stripe(job, ways=ways)
        assert (merge["nrows"], merge["nzero"], merge["nbeats"]) == (
            job["rows"], job["nzero"], job["nbeats"])
        if len(jobs) == 1:
            assert jobs[0] == job and not merge["striped"]
            assert job["rows"] < ways or job["nwords"] < STRIPE_MIN_WORDS \
                or job["stride"] * ways >= 1 << 32
            continue
        striped += 1
        assert len(jobs) == ways and merge["striped"]
        rows = _row_addresses(job)
        for w, part in enumerate(jobs):
            assert _row_addresses(part) == rows[w::ways]
            assert part["nzero"] == (job["nzero"] if w == 0 else 0)
            assert part["nwords"] == job["nwords"] and part["row0"] < 1 << 17
            assert part["stride"] < 1 << 32
    assert striped > 150


@pytest.mark.parametrize("ways", STRIPE_WAYS)
@pytest.mark.parametrize("seed", range(3))
def test_striper_matches_model(seed, ways):
    rng = random.Random(seed)
    jobs = [random_job(rng) for _ in range(24)]
    model = [em.stripe(j, ways=ways) for j in jobs]
    want = [[parts[w] for parts, _ in model if w < len(parts)] for w in range(ways)]
    want_merge = [g for _, g in model]
    assert want[-1] and len(want[-1]) < len(jobs)
    dut = LoadStriper(tag_width=3, ways=ways)
    got = {}

    async def send(ctx):
        await stream_send(ctx, dut.i_stream, jobs, rng=random.Random(seed), stall=0.3)

    def receiver(name, stream, layout, count, salt):
        return stream_collect(got, name, stream, count, rng=random.Random(seed + salt),
                              stall=0.4, convert=layout_fields(layout))

    run(dut, send,
        *(receiver(w, o, load_job_layout(3), len(want[w]), 1 + w)
          for w, o in enumerate(dut.o_jobs)),
        receiver("merge", dut.o_merge, interleave_job_layout(), len(want_merge), 7),
        deadline_cycles=1500)
    for w in range(ways):
        assert got[w] == want[w], w
    assert got["merge"] == want_merge


@pytest.mark.parametrize("ways", STRIPE_WAYS)
@pytest.mark.parametrize("seed", range(3))
def test_interleave_matches_model(seed, ways):
    rng = random.Random(seed)
    merges = []
    for _ in range(12):
        nrows = rng.choice([0, 1, 2, 3, 4, rng.randint(1, 8)])
        merges.append({"nrows": nrows, "nzero": rng.randint(0 if nrows else 1, 3),
                       "nbeats": rng.randint(1, 3),
                       "striped": int(nrows >= ways and rng.random() < 0.7)})
    counts = [0] * ways
    for j in merges:
        for r in range(j["nrows"] + j["nzero"]):
            counts[r % ways if j["striped"] and r < j["nrows"] else 0] += j["nbeats"]
    inputs = [[rng.getrandbits(16) | w << 16 for _ in range(c)] for w, c in enumerate(counts)]
    want = em.interleave(merges, *inputs)
    assert all(counts) and len(want) == sum(counts)
    dut = VectorInterleave(18, depth=4, ways=ways)
    got = []

    async def jobs(ctx):
        await stream_send(ctx, dut.jobs, merges, rng=random.Random(seed), stall=0.3)

    def feed(w):
        async def process(ctx):
            await stream_send(ctx, dut.i_streams[w], inputs[w], rng=random.Random(seed + 1 + w),
                              stall=0.3)
        return process

    async def take(ctx):
        got.extend(await stream_recv(ctx, dut.o_stream, len(want),
                                     rng=random.Random(seed + 9), stall=0.3))

    run(dut, jobs, *(feed(w) for w in range(ways)), take, deadline_cycles=3000)
    assert got == want


@pytest.mark.parametrize("ways", STRIPE_WAYS)
def test_interleave_passes_a_vector_a_cycle(ways):
    """Unstalled, a striped job's vectors leave one a cycle, across the switches between the
    inputs (no bubble at a row's end)."""
    dut = VectorInterleave(8, ways=ways)
    job = {"nrows": 2 * ways, "nzero": 1, "nbeats": 2, "striped": 1}
    rows = [[2 * r + 1, 2 * r + 2] for r in range(job["nrows"] + job["nzero"])]
    inputs = [[] for _ in range(ways)]
    for r, vs in enumerate(rows):
        inputs[r % ways if r < job["nrows"] else 0] += vs
    trace = []

    async def bench(ctx):
        ctx.set(dut.jobs.payload, job)
        ctx.set(dut.jobs.valid, 1)
        await ctx.tick()
        ctx.set(dut.jobs.valid, 0)
        ctx.set(dut.o_stream.ready, 1)
        at = [0] * ways
        for cycle in range(4 * len(rows) + 6):
            for w, i in enumerate(dut.i_streams):
                ctx.set(i.payload, inputs[w][min(at[w], len(inputs[w]) - 1)])
                ctx.set(i.valid, at[w] < len(inputs[w]))
            if ctx.get(dut.o_stream.valid):
                trace.append((cycle, ctx.get(dut.o_stream.payload)))
            for w, i in enumerate(dut.i_streams):
                at[w] += ctx.get(i.ready) and at[w] < len(inputs[w])
            await ctx.tick()

    run(dut, bench, deadline_cycles=80)
    n = 2 * len(rows)
    assert [v for _, v in trace] == list(range(1, n + 1))
    first = trace[0][0]
    assert [c for c, _ in trace] == list(range(first, first + n))
