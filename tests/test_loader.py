"""rtl.loader.LoadSequencer against sim.models.engine.load_sequence, random stalls on every
stream (the gearbox jobs, routing entries and read commands each stall on their own)."""

import random

import pytest

from rtl.dma import dma_command_layout
from rtl.gearbox import gearbox_job_layout
from rtl.loader import LoadSequencer, route_layout
from sim.models import engine as em
from sim.testbenches.harness import layout_fields, run, stream_collect, stream_recv, stream_send


def random_job(rng, tag_width, data_width, a_lanes, b_lanes):
    job = {"base": rng.getrandbits(rng.choice([32, 64])),
            "stride": rng.getrandbits(rng.choice([20, 32])),
            "row0": rng.getrandbits(17), "col": rng.getrandbits(rng.choice([16, 64])),
            "rows": rng.choice([0, 1, 2, rng.randint(1, 9)]), "nzero": rng.randint(0, 7),
            "nwords": rng.randint(1, 5), "nbeats": rng.randint(1, 4),
            "valid": rng.randint(0, 70), "sel": rng.getrandbits(8),
            "tag": rng.getrandbits(tag_width), "path": rng.randint(0, 1)}
    r = rng.random()
    if r < 0.4:                  # rows that follow one another: one merged read command
        job["stride"] = job["nwords"] * data_width // 8
    elif r < 0.6:                # rows closer than a word: packed, one read command
        job["stride"] = rng.randint(1, data_width // 8 - 1)
        # a packed row's bytes lie within a word's less one (from its lane run's start)
        lanes = (a_lanes, b_lanes)[job["path"]]
        sel = job["sel"] & ((1 << em._sel_bits(data_width, lanes)) - 1)
        job["valid"] = rng.randint(0, data_width // 8 - 1 - (sel * lanes
                                                             if lanes < data_width // 8 else 0))
    return job


@pytest.mark.parametrize("data_width,addr_width,a_lanes,b_lanes", [
    (128, 32, 8, 8), (64, 40, 4, 16), (512, 64, 16, 4)])
@pytest.mark.parametrize("seed", range(3))
def test_matches_model(data_width, addr_width, a_lanes, b_lanes, seed):
    rng = random.Random(seed)
    tag_width = 3
    jobs = [random_job(rng, tag_width, data_width, a_lanes, b_lanes) for _ in range(12)]
    jobs[0].update(stride=3, rows=5, valid=3, sel=0)     # a packed job in every case
    want = em.load_sequence(jobs, data_width, addr_width, a_lanes, b_lanes)
    assert len(want[0]) < sum(j["rows"] for j in jobs), "no rows merged in this case"
    assert any(j["pack"] for j in want[1] + want[2])
    dut = LoadSequencer(data_width, addr_width, a_lanes=a_lanes, b_lanes=b_lanes,
                        tag_width=tag_width)
    got = {}

    async def send(ctx):
        await stream_send(ctx, dut.i_stream, jobs, rng=random.Random(seed), stall=0.3)

    def receiver(name, stream, layout, count, salt):
        return stream_collect(got, name, stream, count, rng=random.Random(seed + salt),
                              stall=0.4, convert=layout_fields(layout))

    run(dut, send,
        receiver("rd", dut.rd_cmd, dma_command_layout(addr_width), len(want[0]), 1),
        receiver("a", dut.a_jobs, gearbox_job_layout(data_width, a_lanes, tag_width),
                 len(want[1]), 2),
        receiver("b", dut.b_jobs, gearbox_job_layout(data_width, b_lanes, tag_width),
                 len(want[2]), 3),
        receiver("routes", dut.routes, route_layout(), len(want[3]), 4),
        deadline_cycles=2000)
    assert (got["rd"], got["a"], got["b"], got["routes"]) == want


def test_packed_rows_must_fit_a_word():
    """A packed job whose rows would reach past a word's last byte is refused by the model
    (the realigner cannot make such rows), naming the job."""
    job = {"base": 0, "stride": 5, "row0": 0, "col": 0, "rows": 3, "nzero": 0, "nwords": 1,
           "nbeats": 1, "valid": 6, "sel": 0, "tag": 0, "path": 1}
    em.load_sequence([{**job, "valid": 7}], 64, 32, 8, 8)        # 7 of 8 bytes: fits
    with pytest.raises(ValueError, match=r"jobs\[1\] is packed .* use 8 bytes"):
        em.load_sequence([job, {**job, "valid": 8}], 64, 32, 8, 8)


def test_latency():
    """Jobs out JOB_LATENCY (2) cycles after the job, read commands READ_LATENCY (1) cycle
    later, one a cycle; the next job starts the cycle after the last read command."""
    assert (LoadSequencer.JOB_LATENCY, LoadSequencer.READ_LATENCY) == (2, 1)
    dut = LoadSequencer(128, 32, tag_width=2)
    job = {"base": 0x1000, "stride": 0x100, "row0": 2, "col": 0x30, "rows": 3, "nzero": 0,
           "nwords": 1, "nbeats": 1, "valid": 8, "sel": 0, "tag": 0, "path": 1}
    trace = []

    async def bench(ctx):
        for s in (dut.rd_cmd, dut.a_jobs, dut.b_jobs, dut.routes):
            ctx.set(s.ready, 1)
        ctx.set(dut.i_stream.payload, job)
        ctx.set(dut.i_stream.valid, 1)
        for cycle in range(10):
            _, _, b, r, rd, addr, taken = await ctx.tick().sample(
                dut.b_jobs.valid, dut.routes.valid, dut.rd_cmd.valid, dut.rd_cmd.payload.addr,
                dut.i_stream.ready)
            trace.append((cycle, b, r, rd, addr if rd else None, taken))
            if taken:
                break

    run(dut, bench, deadline_cycles=50)
    assert trace == [(0, 0, 0, 0, None, 0), (1, 0, 0, 0, None, 0), (2, 1, 1, 0, None, 0),
                     (3, 0, 0, 1, 0x1230, 0), (4, 0, 0, 1, 0x1330, 0), (5, 0, 0, 1, 0x1430, 1)]


def test_merge_limit():
    """Contiguous rows whose words would not fit a read command's 24 bits stay one command a
    row; one word fewer and they are one command."""
    dut = LoadSequencer(64, 32, tag_width=1)
    big = {"base": 0, "stride": 8 * 4096, "row0": 0, "col": 0, "rows": 4097, "nzero": 0,
           "nwords": 4096, "nbeats": 1, "valid": 8, "sel": 0, "tag": 0, "path": 0}
    fits = {**big, "rows": 4095}
    jobs = [fits, big]
    want = em.load_sequence(jobs, 64, 32, 8, 8)
    assert want[0][0] == {"addr": 0, "beats": 4095 * 4096} and len(want[0]) == 1 + 4097
    assert want[3] == [{"path": 0, "rows": 1}, {"path": 0, "rows": 4097}]
    got = {}

    async def send(ctx):
        await stream_send(ctx, dut.i_stream, jobs)

    async def take_rd(ctx):
        got["rd"] = await stream_recv(ctx, dut.rd_cmd, len(want[0]),
                                      convert=layout_fields(dma_command_layout(32)))

    async def take_routes(ctx):
        got["routes"] = await stream_recv(ctx, dut.routes, 2, convert=layout_fields(route_layout()))

    async def take_jobs(ctx):
        await stream_recv(ctx, dut.a_jobs, 2)

    run(dut, send, take_rd, take_routes, take_jobs, deadline_cycles=6000)
    assert (got["rd"], got["routes"]) == (want[0], want[3])
