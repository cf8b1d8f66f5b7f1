"""rtl.sideload.UnitSideLoader: every (row, seg) lookup of every unit against numpy slices of
the bias vector and sim.models.bfp.unpack_mask of the mask rows, with a memory model that
answers the read commands under random stalls."""

import random
from collections import deque

import numpy as np
import pytest

from firmware.spec.regmap import TILE_BLOCK as T
from rtl.sideload import UnitSideLoader
from sim.models import bfp
from sim.testbenches.harness import run, stream_send

MEM = 1 << 16


def _ceil_to(x: int, a: int) -> int:
    return -(-x // a) * a


def make_case(rng: random.Random, bpw: int, bias: int, mask_in: int, sgd: int = 0):
    """A matrix's bias vector and mask (or, with ``sgd``, its stored BFP8 weights: mantissa
    rows and the exponent grid) in a random memory, and some of its units (edge units
    included). Returns ``(memory, desc, units, regions)``: ``regions`` are the byte ranges
    a read may touch (rounded out to bus words)."""
    m, n = rng.randint(1, 3 * T), rng.randint(1, 3 * T)
    memory = np.frombuffer(rng.randbytes(MEM), np.uint8).copy()
    bias_addr = _ceil_to(rng.randrange(0, MEM // 4), bpw)
    mask_stride = _ceil_to(-(-n // 8), bpw) + bpw * rng.randint(0, 2)
    mask_addr = _ceil_to(rng.randrange(MEM // 2, MEM - m * mask_stride - bpw), bpw)
    w_stride = _ceil_to(n, max(bpw, T)) + bpw * rng.randint(0, 2)
    w_addr = _ceil_to(rng.randrange(MEM // 4, MEM // 2 - m * w_stride - bpw), bpw)
    w_exp_addr = rng.randrange(MEM - 64, MEM - 48)
    desc = {"bias": bias, "bias_addr": bias_addr, "mask_in": mask_in, "mask_addr": mask_addr,
            "mask_stride": mask_stride, "sgd": sgd, "w_addr": w_addr, "w_stride": w_stride,
            "w_exp_addr": w_exp_addr, "n": n}
    grid = [(m0, n0) for m0 in range(0, m, T) for n0 in range(0, n, T)]
    picks = rng.sample(grid, min(len(grid), 5)) + [grid[-1]]        # the corner too
    units = [{"m0": m0, "n0": n0, "rows_in": min(T, m - m0), "cols_in": min(T, n - n0)}
             for m0, n0 in picks]
    length = m if bias == 1 else n
    regions = [(bias_addr, bias_addr + _ceil_to(4 * length, bpw)),
               (mask_addr, mask_addr + m * mask_stride), (w_addr, w_addr + m * w_stride),
               (MEM - 128, MEM)]
    return memory, desc, units, regions, (m, n)


def expected(memory, desc, shape, unit, cols):
    """Each (row, seg) lookup of ``unit``: ``{(row, seg): (bias_row, bias_lanes,
    mask_lanes, w_lanes, w_exp)}`` from numpy slices of the vector, the unpacked mask and
    the stored weights (``w_*`` None without ``sgd``)."""
    m, n = shape
    length = m if desc["bias"] == 1 else n
    vec = memory[desc["bias_addr"]:desc["bias_addr"] + 4 * length].view(np.uint32)
    rows = np.stack([memory[desc["mask_addr"] + r * desc["mask_stride"]:][:-(-n // 8)]
                     for r in range(m)])
    mask = bfp.unpack_mask(rows, n)
    m0, n0, ri, ci = unit["m0"], unit["n0"], unit["rows_in"], unit["cols_in"]
    out = {}
    for row in range(T):
        for seg in range(T // cols):
            c0 = seg * cols
            inside = [row < ri and c0 + lane < ci for lane in range(cols)]
            b_row = int(vec[m0 + row]) if desc["bias"] == 1 and row < ri else 0
            lanes = [int(vec[n0 + c0 + lane]) if desc["bias"] == 2 and c0 + lane < ci else 0
                     for lane in range(cols)]
            bits = [inside[lane] and (not desc["mask_in"] or mask[m0 + row, n0 + c0 + lane])
                    for lane in range(cols)]
            w_lanes = w_exp = None
            if desc.get("sgd"):
                at = desc["w_addr"] + (m0 + row) * desc["w_stride"] + n0 + c0
                w_lanes = [int(memory[at + lane].view(np.int8)) if inside[lane] else 0
                           for lane in range(cols)]
                grid_n = -(-n // T)
                w_exp = int(memory[desc["w_exp_addr"] + (m0 // T) * grid_n + n0 // T]
                            .view(np.int8))
            out[row, seg] = (b_row, lanes, sum(int(b) << lane for lane, b in enumerate(bits)),
                             w_lanes, w_exp)
    return out


def memory_reader(dut, memory, bpw, regions, log, *, rng, stall):
    """A process (in the background) answering :attr:`rd_cmd` from ``memory``: whole bus
    words from the command's address (low bits ignored), its last word with ``last``;
    ``ready`` and ``valid`` stalled at random. Each command is checked to lie in a region
    and logged."""
    async def bench(ctx):
        queue = deque()
        offered = None
        while True:
            ready = rng.random() >= stall
            ctx.set(dut.rd_cmd.ready, ready)
            if offered is None and queue and rng.random() >= stall:
                offered = queue.popleft()
            ctx.set(dut.rd_words.valid, offered is not None)
            if offered is not None:
                ctx.set(dut.rd_words.payload, {"data": offered[0], "last": offered[1]})
            _, _, valid, cmd, w_ready = await ctx.tick().sample(
                dut.rd_cmd.valid, dut.rd_cmd.payload, dut.rd_words.ready)
            if ready and valid:
                base, beats = cmd.addr & ~(bpw - 1), cmd.beats
                assert beats >= 1
                assert any(lo <= base and base + beats * bpw <= hi for lo, hi in regions), \
                    (cmd.addr, beats, regions)
                log.append((cmd.addr, beats))
                for i in range(beats):
                    word = memory[base + i * bpw:base + (i + 1) * bpw]
                    queue.append((int.from_bytes(word.tobytes(), "little"), int(i == beats - 1)))
            if offered is not None and w_ready:
                offered = None
    return bench


def check_units(cols, data_width, seed, bias, mask_in, slots=2, sgd=0, build_sgd=None):
    rng = random.Random(seed)
    bpw = data_width // 8
    memory, desc, units, regions, shape = make_case(rng, bpw, bias, mask_in, sgd)
    built = bool(sgd) if build_sgd is None else build_sgd
    dut = UnitSideLoader(cols, data_width, 32, slots=slots, sgd=built)
    if not built:
        desc = {k: v for k, v in desc.items()
                if k not in ("sgd", "w_addr", "w_stride", "w_exp_addr", "n")}
    log, seen = [], []

    async def take_unit(ctx):
        ctx.set(dut.o_unit.ready, 1)
        valid = False
        while not valid:
            _, _, valid, payload = await ctx.tick().sample(dut.o_unit.valid, dut.o_unit.payload)
        ctx.set(dut.o_unit.ready, 0)
        return {k: int(getattr(payload, k)) for k in units[0]}

    async def consumer(ctx):
        """Takes each unit, checks every lookup, releases it; sometimes takes the next
        unit before the release and looks it up in the cycle right after."""
        crng = random.Random(seed + 1)
        got = await take_unit(ctx)
        for i, unit in enumerate(units):
            assert got == unit
            want = expected(memory, desc, shape, unit, cols)
            for (row, seg), (b_row, lanes, bits, w_lanes, w_exp) in want.items():
                ctx.set(dut.row, row)
                ctx.set(dut.seg, seg)
                assert (ctx.get(dut.bias_row), [int(v) for v in ctx.get(dut.bias_lanes)],
                        ctx.get(dut.mask_lanes)) == (b_row, lanes, bits), (unit, row, seg)
                if sgd:
                    assert ([int(v) for v in ctx.get(dut.w_lanes)],
                            ctx.get(dut.w_exp)) == (w_lanes, w_exp), (unit, row, seg)
                if crng.random() < 0.05:
                    await ctx.tick()
            for _ in range(crng.choice([0, 0, 3, 40])):
                await ctx.tick()
            early = crng.random() < 0.5
            if early and i + 1 < len(units):
                got = await take_unit(ctx)
            ctx.set(dut.release, 1)
            await ctx.tick()
            ctx.set(dut.release, 0)
            seen.append(unit)
            if not early and i + 1 < len(units):
                got = await take_unit(ctx)
        assert ctx.get(dut.idle)

    async def send(ctx):
        ctx.set(dut.desc, desc)
        await stream_send(ctx, dut.jobs, units, rng=random.Random(seed + 2), stall=0.3)

    cycles = 40 * T * len(units)
    run(dut, send, consumer,
        processes=[memory_reader(dut, memory, bpw, regions, log, rng=random.Random(seed + 3),
                                 stall=0.3)],
        deadline_cycles=cycles)
    assert seen == units
    assert len(log) == sum((bias != 0) + mask_in * u["rows_in"] + sgd * (1 + u["rows_in"])
                           for u in units)


@pytest.mark.parametrize(("cols", "data_width"), [(4, 64), (8, 128), (16, 512), (32, 128)])
@pytest.mark.parametrize(("bias", "mask_in"), [(1, 1), (2, 1), (2, 0), (0, 1)])
def test_lookups_match_numpy(cols, data_width, bias, mask_in):
    check_units(cols, data_width, seed=cols * 31 + data_width + 7 * bias + mask_in,
                bias=bias, mask_in=mask_in)


@pytest.mark.parametrize("seed", range(3))
def test_random_descriptors(seed):
    rng = random.Random(100 + seed)
    check_units(rng.choice([4, 8, 16, 32]), rng.choice([64, 128, 256, 512]), seed,
                bias=rng.choice([0, 1, 2]), mask_in=rng.choice([0, 1]),
                slots=rng.choice([2, 4]))


@pytest.mark.parametrize(("cols", "data_width"), [(4, 64), (8, 128), (16, 64), (16, 256),
                                                  (32, 512)])
def test_stored_weights_match_numpy(cols, data_width):
    """With ``sgd``: the unit's exponent and every row's int8 mantissas, from their
    commands (an exponent, then a row each), whatever the bus width against the row."""
    check_units(cols, data_width, seed=cols + data_width, bias=0, mask_in=0, sgd=1,
                slots=4 if cols == 16 else 2)


@pytest.mark.parametrize("seed", range(2))
def test_sgd_build_runs_bias_and_mask(seed):
    """A build with ``sgd`` loads the bias and mask as before for other descriptors."""
    check_units(8, 128, seed, bias=1 + seed, mask_in=1, sgd=0, build_sgd=True)


def test_unit_without_side_data():
    """Neither bias nor mask: no command, the units pass and the lookups give the unit's
    extent (mask ones inside, zeros beyond)."""
    check_units(8, 128, seed=5, bias=0, mask_in=0)


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"cols": 3}, "cols must be 4 to 32 and divide 32, not 3"),
    ({"cols": 8, "data_width": 32}, "data_width must be 64, 128, 256 or 512, not 32"),
    ({"cols": 8, "slots": 3}, "slots must be a power of two of at least 2, not 3"),
])
def test_arguments_checked(kwargs, message):
    with pytest.raises(ValueError, match=message):
        UnitSideLoader(**kwargs)
