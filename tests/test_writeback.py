"""rtl.writeback.WriteBack against sim.models.engine.write_back: C rows narrower, as wide as and
wider than a bus word, ragged edges in M and N, random stalls and delayed write responses."""

import random

import numpy as np
import pytest

from rtl.writeback import WriteBack, phase_rows, tile_phase
from sim.models import engine as em
from sim.testbenches.harness import run, stream_recv, stream_send


@pytest.mark.parametrize("rows,cols,data_width,phase,ports", [
    (4, 4, 128, 0, 1), (2, 8, 64, 0, 1), (4, 2, 128, 0, 1), (8, 8, 512, 0, 1),
    (2, 16, 128, 0, 1), (4, 4, 128, 1, 2), (8, 4, 64, 0, 2), (2, 16, 128, 1, 2),
    # copies of the word select: two (16 words of 128 bits a row), four (8 of 512)
    (2, 64, 128, 0, 1), (1, 128, 512, 0, 1),
    # ports that do not divide the rows: each tile's first row here rotates (tile_phase), so
    # a tile's rows here are three or two (3 over 8), or two or one (6 over 8; the row step
    # 6 * c_stride)
    (8, 4, 64, 0, 3), (8, 8, 128, 2, 3), (8, 4, 128, 5, 6)])
@pytest.mark.parametrize("seed,addr_width", [(0, 32), (1, 32), (2, 40), (3, 64)])
def test_matches_model(rows, cols, data_width, phase, ports, seed, addr_width):
    """Wider addresses carry out of the low 32 bits (the carry-save row address): a base just
    below a 2**32 multiple and strides near 2**32. With ``ports`` > 1, one phase of the rows
    (the row step ``ports * c_stride`` carries further)."""
    rng = random.Random(seed)
    bpw = data_width // 8
    m, n = rng.randint(1, 3 * rows), rng.randint(1, 3 * cols)
    if addr_width == 32:
        c_addr, c_stride = rng.getrandbits(34) // bpw * bpw, rng.randint(1, 40) * bpw
    else:
        c_addr = (rng.getrandbits(addr_width - 32) << 32) + 2**32 - 3 * bpw
        c_stride = (2**32 - 1) // bpw * bpw - rng.randint(0, 4) * bpw
    desc = em.descriptor(m=m, n=n, k=1, c_addr=c_addr, c_stride=c_stride)
    jobs = [{"m0": m0, "n0": n0} for m0 in range(0, m, rows) for n0 in range(0, n, cols)]
    rng.shuffle(jobs)
    c_rows = np.random.default_rng(seed).integers(0, 2**32, (len(jobs) * rows, cols),
                                                  dtype=np.uint32)
    c_rows = c_rows[:sum(phase_rows(rows, ports, tile_phase(t, rows, ports, phase))
                         for t in range(len(jobs)))]
    want_cmds, want_words = em.write_back(jobs, c_rows, desc, rows, cols, data_width,
                                          addr_width, phase, ports)
    dut = WriteBack(rows, cols, data_width=data_width, addr_width=addr_width, queue=4,
                    phase=phase, ports=ports)
    got = {}
    issued = []

    async def send_jobs(ctx):
        ctx.set(dut.desc, desc)
        await stream_send(ctx, dut.jobs, jobs, rng=random.Random(seed + 1), stall=0.3)

    async def send_rows(ctx):             # ("last" is not read here)
        beats = [{"data": [int(x) for x in r], "last": 0} for r in c_rows]
        await stream_send(ctx, dut.i_stream, beats, rng=random.Random(seed + 2), stall=0.3)
        got["rows_sent"] = True

    async def take_cmds(ctx):
        got["cmds"] = await stream_recv(
            ctx, dut.wr_cmd, len(want_cmds), rng=random.Random(seed + 3), stall=0.3,
            convert=lambda p: issued.append(1) or {"addr": int(p.addr), "beats": int(p.beats)})

    async def take_words(ctx):
        got["words"] = await stream_recv(ctx, dut.wr_data, len(want_words),
                                         rng=random.Random(seed + 4), stall=0.3,
                                         convert=lambda p: (int(p.data), int(p.strb)))

    async def respond(ctx):         # one wr_done per command, some cycles later
        rng_d = random.Random(seed + 5)
        done = 0
        while done < len(want_cmds):
            if done < len(issued) and rng_d.random() < 0.3:
                ctx.set(dut.wr_done, 1)
                done += 1
            else:
                ctx.set(dut.wr_done, 0)
            await ctx.tick()
        ctx.set(dut.wr_done, 0)
        while "words" not in got or "rows_sent" not in got:
            await ctx.tick()
        # idle within a few cycles a tile: the command side may still pass tiles with no
        # rows of this phase (a few cycles each) after the data side dropped their rows
        for _ in range(4 * len(jobs) + 4):
            await ctx.tick()
            got["idle"] = ctx.get(dut.idle)
            if got["idle"]:
                break

    run(dut, send_jobs, send_rows, take_cmds, take_words, respond, deadline_cycles=20_000)
    assert got["cmds"] == want_cmds
    assert got["words"] == want_words
    assert got["idle"]


def test_model_strobes_leave_columns_beyond_n():
    desc = em.descriptor(m=1, n=3, c_addr=0x100, c_stride=0x40)
    cmds, words = em.write_back([{"m0": 0, "n0": 0}], np.arange(8).reshape(2, 4), desc,
                                2, 4, 128, 32)
    assert cmds == [{"addr": 0x100, "beats": 1}]
    assert words == [(int.from_bytes(np.arange(4, dtype="<u4").tobytes(), "little"), 0x0FFF)]


@pytest.mark.parametrize("rows,cols,data_width,ports,seed", [
    (4, 4, 64, 2, 0), (2, 8, 128, 2, 1), (8, 16, 64, 2, 2),
    # ports that do not divide the rows: the deal runs on across tiles
    (8, 4, 64, 3, 3), (8, 8, 128, 6, 4), (4, 4, 64, 3, 5)])
def test_ports_match_model(rows, cols, data_width, ports, seed):
    """WriteBackPorts: each writer gets its phase's commands and words (the model per phase),
    under random stalls on every stream and done pulses on all writers at once."""
    from rtl.writeback import WriteBackPorts

    rng = random.Random(seed)
    bpw = data_width // 8
    m, n = rng.randint(1, 3 * rows), rng.randint(1, 3 * cols)
    desc = em.descriptor(m=m, n=n, k=1, c_addr=rng.getrandbits(30) // bpw * bpw,
                         c_stride=rng.randint(1, 40) * bpw)
    jobs = [{"m0": m0, "n0": n0} for m0 in range(0, m, rows) for n0 in range(0, n, cols)]
    rng.shuffle(jobs)
    c_rows = np.random.default_rng(seed).integers(0, 2**32, (len(jobs) * rows, cols),
                                                  dtype=np.uint32)
    P = ports
    want = [em.write_back(jobs, c_rows[p::P], desc, rows, cols, data_width, 32, p, P)
            for p in range(P)]
    dut = WriteBackPorts(rows, cols, data_width=data_width, addr_width=32, queue=4, ports=P)
    got = {}
    issued = [0] * P

    async def send_jobs(ctx):
        ctx.set(dut.desc, desc)
        await stream_send(ctx, dut.jobs, jobs, rng=random.Random(seed + 1), stall=0.3)

    async def send_rows(ctx):
        beats = [{"data": [int(x) for x in r], "last": int(i % rows == rows - 1)}
                 for i, r in enumerate(c_rows)]
        await stream_send(ctx, dut.i_stream, beats, rng=random.Random(seed + 2), stall=0.2)
        got["rows_sent"] = True

    def taker(p):
        async def take_cmds(ctx):
            got[p, "cmds"] = await stream_recv(
                ctx, dut.wr_cmd[p], len(want[p][0]), rng=random.Random(seed + 3 + p),
                stall=0.3, convert=lambda x: issued.__setitem__(p, issued[p] + 1) or
                {"addr": int(x.addr), "beats": int(x.beats)})

        async def take_words(ctx):
            got[p, "words"] = await stream_recv(
                ctx, dut.wr_data[p], len(want[p][1]), rng=random.Random(seed + 5 + p),
                stall=0.3, convert=lambda x: (int(x.data), int(x.strb)))
        return take_cmds, take_words

    async def respond(ctx):
        rng_d = random.Random(seed + 7)
        done = [0] * P
        while done != [len(w[0]) for w in want]:
            for p in range(P):
                fire = done[p] < issued[p] and rng_d.random() < 0.5
                ctx.set(dut.wr_done[p], fire)
                done[p] += fire
            await ctx.tick()
        for p in range(P):
            ctx.set(dut.wr_done[p], 0)
        while any((p, "words") not in got for p in range(P)) or "rows_sent" not in got:
            await ctx.tick()
        await ctx.tick().repeat(3)
        got["idle"] = ctx.get(dut.idle)

    run(dut, send_jobs, send_rows, *(f for p in range(P) for f in taker(p)), respond,
        deadline_cycles=20_000)
    for p in range(P):
        assert got[p, "cmds"] == want[p][0]
        assert got[p, "words"] == want[p][1]
    assert got["idle"]


def test_ports_args():
    from rtl.writeback import WriteBackPorts

    for ports in (1, 5, 8, True, 2.0):
        with pytest.raises(ValueError, match="ports"):
            WriteBackPorts(4, 4, ports=ports)
    with pytest.raises(ValueError, match="phase"):
        WriteBack(4, 4, phase=2, ports=2)
    with pytest.raises(ValueError, match="ports"):
        WriteBack(4, 4, phase=0, ports=5)


def test_phase_rows():
    """The rows of a tile a phase takes add up to the rows for every count of ports. The
    ZCU104's 32 rows over six ports: a tile's first row goes to port 0, 2 and 4 in turn
    (tile_phase), so each port takes 6, 5 and 5 rows of three tiles, 16 each — as
    sim.models.engine.write_back deals them, and as the datapath's stream dealt in turn
    gives them."""
    assert [phase_rows(32, 6, p) for p in range(6)] == [6, 6, 5, 5, 5, 5]
    for p in range(6):
        assert [phase_rows(32, 6, tile_phase(t, 32, 6, p)) for t in range(3)] in (
            [6, 5, 5], [5, 6, 5], [5, 5, 6])
    for rows, ports in ((32, 6), (16, 3), (8, 3), (8, 4), (4, 3)):
        for p in range(ports):
            taken = [t * rows + r for t in range(2 * ports)
                     for r in range(tile_phase(t, rows, ports, p), rows, ports)]
            assert taken == list(range(p, 2 * ports * rows, ports))
    for rows in range(1, 17):
        for ports in range(1, rows + 1):
            assert sum(phase_rows(rows, ports, p) for p in range(ports)) == rows


def test_select_copies_follow_the_words_a_row():
    """``select_bits``: a copy of the word select per 128 bits of the word up to eight words
    a row, proportionally fewer bits beyond (the ZCU104's 16 words of 128 bits: two copies),
    never more than the word (the Pynq-Z1's 64-bit word: one)."""
    from rtl.writeback import select_bits
    assert select_bits(512, 8) == 128           # VU9P default: four copies
    assert select_bits(128, 16) == 64           # ZCU104 default: two
    assert select_bits(64, 8) == 64             # Pynq-Z1 default: one
    assert select_bits(128, 2) == 128
    assert select_bits(512, 1024) == 16
