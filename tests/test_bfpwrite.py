"""rtl.bfpwrite.BfpWriteBack against sim.models.bfp.quantize_tiles and bfp.epilogue: C tiles
in, BFP8 tile blocks in memory out (mantissa rows and the exponent grid), ReLU and its mask
rows, a bias and a stored mask (with a UnitSideLoader), ragged edges, nearest and stochastic
rounding, random stalls and delayed write responses; memory beyond the matrix, the grid and
the mask untouched."""

import random

import numpy as np
import pytest
from amaranth import Elaboratable, Module, Signal
from amaranth.lib import wiring

from rtl.bfpwrite import BfpWriteBack, bfp8_to_float32
from rtl.sideload import UnitSideLoader
from sim.models import bfp
from sim.testbenches.harness import run, stream_send

T = 32


def _jobs(m, n, r, c):
    """Tile jobs as the engine's walker issues them for a BFP8 descriptor: blocks of T / r
    tiles a side (row-major over the matrix), tiles ``j`` inner."""
    out = []
    for mb in range(0, m, T):
        for nb in range(0, n, T):
            bm, bn = min(-(-(m - mb) // r), T // r), min(-(-(n - nb) // c), T // c)
            out += [{"m0": mb + i * r, "n0": nb + j * c} for i in range(bm) for j in range(bn)]
    return out


async def _take_writes(ctx, dut, got, rng, exp_addr, bpw, units, idle):
    """Take the write-back's commands and words under random stalls into ``got``, answer
    each command with ``wr_done`` some cycles later, and return once the rows are sent,
    every unit's exponent command is out (those at ``exp_addr`` onwards) and ``idle()``
    has held for 8 cycles."""
    pending = idle_for = 0
    while True:
        ctx.set(dut.wr_cmd.ready, rng.random() > 0.3)
        ctx.set(dut.wr_data.ready, rng.random() > 0.3)
        done = pending and rng.random() < 0.4
        ctx.set(dut.wr_done, int(bool(done)))
        await ctx.delay(1e-9)
        if ctx.get(dut.wr_cmd.valid) and ctx.get(dut.wr_cmd.ready):
            p = ctx.get(dut.wr_cmd.payload)
            got["cmds"].append({"addr": int(p.addr), "beats": int(p.beats)})
            pending += 1
        if ctx.get(dut.wr_data.valid) and ctx.get(dut.wr_data.ready):
            p = ctx.get(dut.wr_data.payload)
            got["words"].append((int(p.data), int(p.strb)))
        pending -= bool(done)
        await ctx.tick()
        exps = sum(1 for cm in got["cmds"]
                   if exp_addr // bpw * bpw <= cm["addr"] < exp_addr + units)
        if "rows_sent" in got and exps >= units and idle():
            idle_for += 1
            if idle_for > 8:
                break
    ctx.set(dut.wr_done, 0)


def _apply(mem, cmds, words, bpw):
    it = iter(words)
    for cmd in cmds:
        base = cmd["addr"] // bpw * bpw
        for w in range(cmd["beats"]):
            data, strb = next(it)
            for b in range(bpw):
                if strb >> b & 1:
                    mem[base + w * bpw + b] = data >> (8 * b) & 0xFF
    assert next(it, None) is None


# (four rows to sixteen, both buses, both roundings and ReLU by default; the other cases,
# each a minute of Amaranth's simulator, slow)
@pytest.mark.parametrize("rows,data_width,m,n,rounding,seed,relu", [
    pytest.param(8, 128, 40, 70, "nearest", 0, False, marks=pytest.mark.slow),
    pytest.param(8, 128, 33, 20, "stochastic", 1, False, marks=pytest.mark.slow),
    pytest.param(16, 64, 70, 45, "stochastic", 2, False, marks=pytest.mark.slow),
    pytest.param(16, 64, 32, 32, "nearest", 3, False, marks=pytest.mark.slow),
    pytest.param(8, 64, 5, 7, "stochastic", 4, False, marks=pytest.mark.slow),
    (4, 128, 37, 9, "nearest", 5, False),
    pytest.param(16, 128, 64, 100, "stochastic", 6, False, marks=pytest.mark.slow),
    pytest.param(8, 128, 40, 70, "stochastic", 7, True, marks=pytest.mark.slow),
    (16, 64, 45, 37, "nearest", 8, True),
    pytest.param(32, 128, 33, 100, "nearest", 9, True, marks=pytest.mark.slow),
    (8, 64, 3, 5, "stochastic", 10, True)])
def test_matches_quantize_tiles(rows, data_width, m, n, rounding, seed, relu):
    """Mantissa rows, the exponent grid and, with ``relu``, the ReLU'd values' blocks and
    the mask rows (:func:`sim.models.bfp.epilogue`, :func:`sim.models.bfp.pack_mask`) in
    memory; every other byte (rows beyond M, bytes beyond a row's, the gaps) untouched."""
    rng = random.Random(seed)
    r = c = rows
    bpw = data_width // 8
    nprng = np.random.default_rng(seed)
    value = (nprng.standard_normal((m, n))
             * 2.0 ** nprng.integers(-20, 20, (m, 1))).astype(np.float32)
    value[0, :3] = 0.0
    if m > 33:
        value[32:, :] = 0.0 if seed % 2 else value[32:, :]   # an all-zero block-row
    key = rng.getrandbits(64)
    if relu:
        value[-1, :2] = [-0.0, np.nan]     # neither is > 0: +0.0, mask bit 0
        out = bfp.epilogue(value, relu=True, out="bfp8", rounding=rounding, seed=key)
        want_q, want_e = out.q, out.exp
    else:
        want_q, want_e = bfp.quantize_tiles(value, block=T, rounding=rounding, seed=key)
    c_stride = -(-n // bpw) * bpw + rng.randint(0, 3) * bpw
    c_addr = 0x1000
    exp_addr = 0x1000 + m * c_stride + rng.randint(0, 40)
    gm, gn = -(-m // T), -(-n // T)
    mask_addr = -(-(exp_addr + gm * gn) // bpw) * bpw + rng.randint(0, 2) * bpw
    mask_bytes = -(-n // 8)
    mask_stride = -(-mask_bytes // bpw) * bpw + rng.randint(0, 2) * bpw
    size = mask_addr + m * mask_stride + 64
    mem = bytearray(np.random.default_rng(seed + 100).integers(0, 256, size, dtype=np.uint8))
    want = bytearray(mem)
    for i in range(m):
        want[c_addr + i * c_stride:c_addr + i * c_stride + n] = want_q[i].tobytes()
    want[exp_addr:exp_addr + gm * gn] = want_e.reshape(-1).tobytes()
    if relu:
        bits = bfp.pack_mask(out.mask)
        for i in range(m):
            want[mask_addr + i * mask_stride:mask_addr + i * mask_stride + bits.shape[1]] = (
                bits[i].tobytes())

    jobs = _jobs(m, n, r, c)
    # (the tiles' elements beyond the matrix positive: neither quantised nor in the mask)
    padded = np.ones((-(-m // r) * r, -(-n // c) * c), np.float32)
    padded[:m, :n] = value
    beats = [{"data": [int(x) for x in padded[j["m0"] + i, j["n0"]:j["n0"] + c].view(np.uint32)],
              "last": 0} for j in jobs for i in range(r)]
    dut = BfpWriteBack(r, c, data_width=data_width, addr_width=32, relu=rows >= 8)
    desc = {"m": m, "n": n, "c_addr": c_addr, "c_stride": c_stride, "c_exp_addr": exp_addr,
            "stochastic": int(rounding == "stochastic"), "seed": key, "relu": int(relu),
            "mask_addr": mask_addr, "mask_stride": mask_stride}
    got = {"cmds": [], "words": []}
    n_units = gm * gn

    async def send_jobs(ctx):
        ctx.set(dut.desc, desc)
        await stream_send(ctx, dut.jobs, jobs, rng=random.Random(seed + 1), stall=0.3)

    async def send_rows(ctx):
        await stream_send(ctx, dut.i_stream, beats, rng=random.Random(seed + 2), stall=0.2)
        got["rows_sent"] = True

    async def take_writes(ctx):
        await _take_writes(ctx, dut, got, random.Random(seed + 3), exp_addr, bpw, n_units,
                           lambda: ctx.get(dut.idle))

    run(dut, send_jobs, send_rows, take_writes, deadline_cycles=60_000)
    _apply(mem, got["cmds"], got["words"], bpw)
    assert bytes(mem) == bytes(want)


def test_refuses_other_arrays():
    for r, c in ((8, 16), (64, 64), (2, 2)):
        with pytest.raises(ValueError, match="square array"):
            BfpWriteBack(r, c)
    with pytest.raises(ValueError, match="relu needs at least 8 columns"):
        BfpWriteBack(4, 4, relu=True)


def _serve_reads(side, mem, bpw, seed, log=None):
    """A process answering the side loader's read commands from ``mem`` under random
    stalls (a command's words in order, ``last`` on its last), each command's address
    appended to ``log``."""
    async def serve_reads(ctx):
        rng_r = random.Random(seed + 5)
        queue = []
        while True:
            ctx.set(side.rd_cmd.ready, rng_r.random() > 0.3)
            if queue:
                ctx.set(side.rd_words.payload, {"data": queue[0][0], "last": queue[0][1]})
            ctx.set(side.rd_words.valid, bool(queue) and rng_r.random() > 0.3)
            await ctx.delay(1e-9)
            if ctx.get(side.rd_words.valid) and ctx.get(side.rd_words.ready):
                queue.pop(0)
            if ctx.get(side.rd_cmd.valid) and ctx.get(side.rd_cmd.ready):
                p = ctx.get(side.rd_cmd.payload)
                base, beats_ = int(p.addr) // bpw * bpw, int(p.beats)
                if log is not None:
                    log.append(base)
                queue += [(int.from_bytes(mem[base + w * bpw:base + (w + 1) * bpw], "little"),
                           int(w == beats_ - 1)) for w in range(beats_)]
            await ctx.tick()
    return serve_reads


def _run_with_side(top, value, rows, desc, side_desc, mem, bpw, seed, *, exp_addr, exps,
                   pad=0.0, send_units=True, reads=None, deadline=60_000):
    """Run a :class:`_WithSide` over ``value``'s C tiles (padded with ``pad``) as the
    walker hands them, its side loader answered from ``mem`` (commands logged in
    ``reads``), and apply its writes to ``mem``; ``exp_addr`` and ``exps`` are the exponent
    grid's address and size :func:`_take_writes` waits for. Returns the units."""
    m, n = value.shape
    dut, side = top.wb, top.side
    jobs = _jobs(m, n, rows, rows)
    units = [{"m0": j["m0"], "n0": j["n0"], "rows_in": min(T, m - j["m0"]),
              "cols_in": min(T, n - j["n0"])} for j in jobs
             if j["m0"] % T == 0 and j["n0"] % T == 0]
    padded = np.full((-(-m // rows) * rows, -(-n // rows) * rows), pad, np.float32)
    padded[:m, :n] = value
    beats = [{"data": [int(x) for x in
                       padded[j["m0"] + i, j["n0"]:j["n0"] + rows].view(np.uint32)],
              "last": 0} for j in jobs for i in range(rows)]
    got = {"cmds": [], "words": []}

    async def send_jobs(ctx):
        ctx.set(dut.desc, desc)
        ctx.set(side.desc, side_desc)
        await stream_send(ctx, dut.jobs, jobs, rng=random.Random(seed + 1), stall=0.3)

    async def send_units(ctx):
        await stream_send(ctx, side.jobs, units if send_units else [],
                          rng=random.Random(seed + 4), stall=0.3)

    async def send_rows(ctx):
        await stream_send(ctx, dut.i_stream, beats, rng=random.Random(seed + 2), stall=0.2)
        got["rows_sent"] = True

    async def take_writes(ctx):
        await _take_writes(ctx, dut, got, random.Random(seed + 3), exp_addr, bpw, exps,
                           lambda: ctx.get(dut.idle) and ctx.get(side.idle))

    run(top, send_jobs, send_units, send_rows, take_writes,
        _serve_reads(side, mem, bpw, seed, reads), deadline_cycles=deadline)
    _apply(mem, got["cmds"], got["words"], bpw)
    return units


class _WithSide(Elaboratable):
    """A BfpWriteBack(side=True) and the UnitSideLoader it looks its units up in."""

    def __init__(self, rows, data_width, sgd=False, fp32=False):
        self.sgd = sgd
        self.wb = BfpWriteBack(rows, rows, data_width=data_width, relu=rows >= 8, side=True,
                               sgd=sgd, fp32=fp32)
        self.side = UnitSideLoader(rows, data_width, sgd=sgd)

    def elaborate(self, platform):
        m = Module()
        m.submodules.wb, m.submodules.side = wb, side = self.wb, self.side
        wiring.connect(m, side.o_unit, wb.side_unit)
        m.d.comb += [side.row.eq(wb.side_row), side.seg.eq(wb.side_seg),
                     wb.bias_row.eq(side.bias_row), wb.bias_lanes.eq(side.bias_lanes),
                     wb.mask_lanes.eq(side.mask_lanes), side.release.eq(wb.release)]
        if self.sgd:
            m.d.comb += [wb.w_lanes.eq(side.w_lanes), wb.w_exp.eq(side.w_exp)]
        return m


# (the bias on either axis and the stored mask run bit for bit through the whole RTL in
# tests/test_bfp_output.py by default; here, under random stalls, one case by default)
@pytest.mark.parametrize("rows,data_width,m,n,bias,mask_in,seed,sgd", [
    pytest.param(8, 128, 40, 70, 2, False, 0, False, marks=pytest.mark.slow),
    pytest.param(16, 64, 45, 37, 1, True, 1, False, marks=pytest.mark.slow),
    pytest.param(4, 128, 37, 9, 0, True, 2, False, marks=pytest.mark.slow),
    (4, 64, 33, 40, 2, True, 3, False),
    pytest.param(32, 128, 33, 100, 1, False, 4, False, marks=pytest.mark.slow),
    pytest.param(8, 64, 5, 7, 0, True, 5, False, marks=pytest.mark.slow),
    pytest.param(16, 64, 45, 37, 1, True, 6, True, marks=pytest.mark.slow),
    pytest.param(8, 128, 40, 70, 2, False, 7, True, marks=pytest.mark.slow)])
def test_bias_and_mask_in(rows, data_width, m, n, bias, mask_in, seed, sgd):
    """With ``side``: the bias (a row's or a column's) added in float32 and the stored mask
    applied before the quantiser, the unit's side data read by a UnitSideLoader from a
    memory answering at random (:func:`sim.models.bfp.epilogue`), under random stalls; on a
    build with ``sgd`` too (the multipliers' 1.0 leaves the sums unchanged)."""
    rng = random.Random(seed)
    bpw = data_width // 8
    nprng = np.random.default_rng(seed)
    value = (nprng.standard_normal((m, n))
             * 2.0 ** nprng.integers(-6, 6, (m, 1))).astype(np.float32)
    bvec = (nprng.standard_normal(m if bias == 1 else n)).astype(np.float32)
    stored = nprng.random((m, n)) < 0.6
    key = rng.getrandbits(64)
    out = bfp.epilogue(value, bias=bvec if bias else None,
                       bias_axis="row" if bias == 1 else "col",
                       mask_in=stored if mask_in else None, out="bfp8", rounding="stochastic",
                       seed=key)
    c_stride = -(-n // bpw) * bpw
    c_addr, exp_addr = 0x1000, 0x1000 + m * c_stride
    gm, gn = -(-m // T), -(-n // T)
    bias_addr = -(-(exp_addr + gm * gn) // bpw) * bpw
    mask_addr = bias_addr + -(-4 * len(bvec) // bpw) * bpw
    bits = bfp.pack_mask(stored)
    mask_stride = -(-bits.shape[1] // bpw) * bpw + rng.randint(0, 1) * bpw
    mem = bytearray(mask_addr + m * mask_stride + 64)
    mem[bias_addr:bias_addr + 4 * len(bvec)] = bvec.tobytes()
    for i in range(m):
        mem[mask_addr + i * mask_stride:mask_addr + i * mask_stride + bits.shape[1]] = (
            bits[i].tobytes())
    want = bytearray(mem)
    for i in range(m):
        want[c_addr + i * c_stride:c_addr + i * c_stride + n] = out.q[i].tobytes()
    want[exp_addr:exp_addr + gm * gn] = out.exp.reshape(-1).tobytes()

    top = _WithSide(rows, data_width, sgd)
    desc = {"m": m, "n": n, "c_addr": c_addr, "c_stride": c_stride, "c_exp_addr": exp_addr,
            "stochastic": 1, "seed": key, "relu": 0, "mask_addr": mask_addr,
            "mask_stride": mask_stride, "bias": bias, "mask_in": int(mask_in)}
    if sgd:
        desc.update(sgd=0, lr=0x40000000, decay=0x3F000000)      # (unused: not an SGD)
    _run_with_side(top, value, rows, desc,
                   {"bias": bias, "bias_addr": bias_addr, "mask_in": int(mask_in),
                    "mask_addr": mask_addr, "mask_stride": mask_stride}, mem, bpw, seed,
                   exp_addr=exp_addr, exps=gm * gn, pad=1.0)
    assert bytes(mem) == bytes(want)


@pytest.mark.parametrize("rows,data_width,m,n,rounding,seed", [
    pytest.param(16, 64, 45, 37, "stochastic", 0, marks=pytest.mark.slow),
    pytest.param(8, 128, 70, 40, "nearest", 1, marks=pytest.mark.slow),
    pytest.param(4, 64, 33, 9, "stochastic", 2, marks=pytest.mark.slow),
    pytest.param(32, 256, 40, 64, "stochastic", 3, marks=pytest.mark.slow)])
def test_sgd_step(rows, data_width, m, n, rounding, seed):
    """With ``sgd``: the stored BFP8 weights (read by the side loader from C itself) stepped
    by the tiles' gradient, ``decay * w - lr * g`` in float32, and quantised back over
    them (:func:`sim.models.bfp.sgd_step`, :func:`sim.models.bfp.quantize_tiles`)."""
    rng = random.Random(seed)
    bpw = data_width // 8
    nprng = np.random.default_rng(seed)
    w0 = (nprng.standard_normal((m, n)) * 2.0 ** nprng.integers(-4, 2, (m, 1))
          ).astype(np.float32)
    qw, ew = bfp.quantize_tiles(w0)
    ew[0, 0] = -128                                  # a tile of subnormal weights
    g = (nprng.standard_normal((m, n)) * 2.0 ** nprng.integers(-6, 3, (m, 1))
         ).astype(np.float32)
    lr, wd = 0.0625 * (1 + seed), 0.01 * seed
    decay = bfp.sgd_decay(lr, wd)
    key = rng.getrandbits(64)
    stepped = bfp.sgd_step(bfp.dequantize_tiles(qw, ew), g, lr, wd)
    q_want, e_want = bfp.quantize_tiles(stepped, rounding=rounding, seed=key)
    c_stride = -(-n // max(bpw, T)) * max(bpw, T) + rng.randint(0, 1) * bpw
    c_addr = 0x1000
    gm, gn = -(-m // T), -(-n // T)
    exp_addr = c_addr + m * c_stride + rng.randint(0, 3)
    mem = bytearray(np.frombuffer(rng.randbytes(exp_addr + gm * gn + 256), np.uint8))
    for i in range(m):
        mem[c_addr + i * c_stride:c_addr + i * c_stride + n] = qw[i].tobytes()
    mem[exp_addr:exp_addr + gm * gn] = ew.reshape(-1).tobytes()
    want = bytearray(mem)
    for i in range(m):
        want[c_addr + i * c_stride:c_addr + i * c_stride + n] = q_want[i].tobytes()
    want[exp_addr:exp_addr + gm * gn] = e_want.reshape(-1).tobytes()

    top = _WithSide(rows, data_width, sgd=True)
    f32 = np.array([lr, decay], np.float32).view(np.uint32)
    desc = {"m": m, "n": n, "c_addr": c_addr, "c_stride": c_stride, "c_exp_addr": exp_addr,
            "stochastic": int(rounding == "stochastic"), "seed": key, "relu": 0,
            "mask_addr": 0, "mask_stride": 0, "bias": 0, "mask_in": 0, "sgd": 1,
            "lr": int(f32[0]), "decay": int(f32[1])}
    reads = []
    units = _run_with_side(top, g, rows, desc,
                           {"bias": 0, "bias_addr": 0, "mask_in": 0, "mask_addr": 0,
                            "mask_stride": 0, "sgd": 1, "w_addr": c_addr,
                            "w_stride": c_stride, "w_exp_addr": exp_addr, "n": n},
                           mem, bpw, seed, exp_addr=exp_addr, exps=gm * gn, reads=reads,
                           deadline=80_000)
    assert len(reads) == sum(1 + u["rows_in"] for u in units)
    bad = [i for i in range(len(mem)) if mem[i] != want[i]]
    assert not bad, f"{len(bad)} bytes differ, first at {bad[0]:#x}"


def test_bfp8_to_float32_every_pattern():
    """Every int8 mantissa with every int8 exponent, against dequantize_tiles."""
    m = Module()
    q = Signal(8)
    es = [Signal(8, name=f"e{i}") for i in range(256)]
    outs = [Signal(32, name=f"o{i}") for i in range(256)]
    for e, o in zip(es, outs, strict=True):
        m.d.comb += o.eq(bfp8_to_float32(q, e))
    m.d.sync += Signal().eq(q[0])                     # (a clock for the harness)
    got = np.zeros((256, 256), np.uint32)

    async def bench(ctx):
        for i, e in enumerate(es):
            ctx.set(e, i)
        for qv in range(256):
            ctx.set(q, qv)
            await ctx.delay(1e-9)
            got[qv] = [ctx.get(o) for o in outs]

    run(m, bench, deadline_cycles=10)
    grid = np.arange(256, dtype=np.uint8).view(np.int8).reshape(1, 256)
    want = np.stack([bfp.dequantize_tiles(np.full((4, 1024), qv, np.uint8).view(np.int8),
                                          grid, block=4)[0, ::4].view(np.uint32)
                     for qv in range(256)])
    bad = np.argwhere(got != want)
    assert bad.size == 0, [(i, j, hex(got[i, j]), hex(want[i, j])) for i, j in bad[:5]]


# (a float32 C through the bias, ReLU and a stored mask runs bit for bit through the whole
# RTL in tests/test_sgd_rtl.py by default, as does a float32 row's SGD step; here, under
# random stalls, slow)
@pytest.mark.parametrize("rows,data_width,m,n,bias,relu,sgd,seed", [
    pytest.param(8, 128, 40, 70, 2, True, False, 0, marks=pytest.mark.slow),
    pytest.param(16, 64, 5, 37, 1, False, False, 1, marks=pytest.mark.slow),
    pytest.param(4, 64, 5, 22, 2, False, False, 4, marks=pytest.mark.slow),
    pytest.param(16, 64, 1, 45, 0, False, True, 2, marks=pytest.mark.slow),
    pytest.param(8, 128, 1, 10, 0, False, True, 3, marks=pytest.mark.slow)])
def test_float32_output(rows, data_width, m, n, bias, relu, sgd, seed):
    """With ``fp32``: a float32 C through the epilogue (the bias added, ReLU and its mask)
    written as float32 rows, :func:`sim.models.bfp.epilogue` with ``out="fp32"``; or, with
    ``sgd``, one row of float32 weights (a bias vector) stepped in place (its stored values
    read as column biases from C), :func:`sim.models.bfp.sgd_step`. Memory beyond the
    matrix untouched."""
    rng = random.Random(seed)
    bpw = data_width // 8
    nprng = np.random.default_rng(seed)
    value = (nprng.standard_normal((m, n))
             * 2.0 ** nprng.integers(-6, 6, (m, 1))).astype(np.float32)
    bvec = (nprng.standard_normal(m if bias == 1 else n)).astype(np.float32)
    w0 = nprng.standard_normal((m, n)).astype(np.float32)
    lr, wd = 0.25, 0.125
    ep = bfp.epilogue(value, bias=bvec if bias else None,
                      bias_axis="row" if bias == 1 else "col", relu=relu, out="fp32")
    out = bfp.sgd_step(w0, value, lr, wd) if sgd else ep.value
    c_stride = -(-4 * n // bpw) * bpw + rng.randint(0, 1) * bpw
    c_addr = 0x1000
    bias_addr = c_addr + m * c_stride + bpw
    mask_addr = bias_addr + -(-4 * len(bvec) // bpw) * bpw
    mask_bytes = -(-n // 8)
    mask_stride = -(-mask_bytes // bpw) * bpw
    mem = bytearray(np.frombuffer(rng.randbytes(mask_addr + m * mask_stride + 64), np.uint8))
    mem[bias_addr:bias_addr + 4 * len(bvec)] = bvec.tobytes()
    if sgd:
        for i in range(m):
            mem[c_addr + i * c_stride:c_addr + i * c_stride + 4 * n] = w0[i].tobytes()
    want = bytearray(mem)
    for i in range(m):
        want[c_addr + i * c_stride:c_addr + i * c_stride + 4 * n] = out[i].tobytes()
    if relu:
        bits = bfp.pack_mask(ep.mask)
        for i in range(m):
            want[mask_addr + i * mask_stride:mask_addr + i * mask_stride + bits.shape[1]] = (
                bits[i].tobytes())

    top = _WithSide(rows, data_width, sgd=sgd, fp32=True)
    f32 = np.array([lr, bfp.sgd_decay(lr, wd)], np.float32).view(np.uint32)
    desc = {"m": m, "n": n, "c_addr": c_addr, "c_stride": c_stride, "c_exp_addr": 0,
            "stochastic": 0, "seed": 0, "relu": int(relu), "mask_addr": mask_addr,
            "mask_stride": mask_stride, "bias": bias, "mask_in": 0, "sgd": int(sgd),
            "lr": int(f32[0]), "decay": int(f32[1]), "f32": 1}
    side_desc = {"bias": 2 if sgd else bias, "bias_addr": c_addr if sgd else bias_addr,
                 "mask_in": 0, "mask_addr": mask_addr, "mask_stride": mask_stride}
    if sgd:
        side_desc.update(sgd=0, w_addr=0, w_stride=0, w_exp_addr=0, n=n)
    _run_with_side(top, value, rows, desc, side_desc, mem, bpw, seed, exp_addr=1 << 30,
                   exps=0, send_units=bool(bias or sgd))
    bad = [i for i in range(len(mem)) if mem[i] != want[i]]
    assert not bad, f"{len(bad)} bytes differ, first at {bad[0]:#x}"
