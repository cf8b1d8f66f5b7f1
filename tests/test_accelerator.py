"""The whole accelerator (Verilog, natively simulated with an AXI memory model) through the
register-level driver: bit-exact GEMMs, every error path, queued descriptors, soft reset."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from firmware import Device
from firmware.runtime.device import AcceleratorError
from firmware.spec.regmap import ErrorCode, pack
from sim.models import golden

# (rows, cols, data_width, write_ports, read_ports): lanes below, equal to and above the bus
# width; C rows narrower and wider than a bus word; C rows dealt to two and to four write ports
# (one row of each tile a port), and to three (two, one and one of a tile, each tile's first
# row to the next port: the ZCU104's six over 32 rows in small); A and B read through two read
# ports, and B's rows striped
# over two more, and over three; and the Pynq-Z1 default's shape in small (four write ports,
# two read ports, two MACs per DSP48E1).
# (the widest array, the deepest buffer and two write ports with B over three more read
# ports take minutes each: slow; three write ports with B over three stay; two write ports
# with one read port, which the two-read-port builds cover but for its reads, slow; two
# write ports with B over two read ports, the build the hostile-port tests below compile
# too, stay, and with B on one read port, which the packed build covers, slow)
CONFIGS = [(8, 8, 128, 1, 1), pytest.param((4, 16, 64, 1, 1), marks=pytest.mark.slow),
           pytest.param((8, 8, 512, 1, 1), marks=pytest.mark.slow),
           pytest.param((4, 8, 64, 2, 1), marks=pytest.mark.slow),
           (4, 4, 128, 4, 1), pytest.param((4, 8, 64, 2, 2), marks=pytest.mark.slow),
           (4, 8, 64, 2, 3),
           pytest.param((4, 8, 64, 2, 4), marks=pytest.mark.slow),
           (4, 8, 64, 3, 4),
           (4, 8, 64, 4, 2, "DSP48E1")]


@pytest.fixture(scope="module", params=CONFIGS, ids=lambda c: "x".join(map(str, c[:3]))
                + (f"-{c[3]}w" if c[3] > 1 else "") + (f"-{c[4]}r" if c[4] > 1 else "")
                + (f"-2{c[5][-2:].lower()}" if len(c) > 5 else ""))
def dev(request):
    rows, cols, width, ports, read_ports, *packed = request.param
    device = Device("rtl", rows=rows, cols=cols, data_width=width, latency=32, pause=0.2,
                    seed=7, write_ports=ports, read_ports=read_ports,
                    **({"packing": 2, "dsp_slice": packed[0]} if packed else {}))
    yield device
    assert device.sim.violations == 0, "AXI protocol violations"


def _operands(rng, m, n, k, ta, tb, extremes=False):
    lo, hi = (-128, 127) if not extremes else (-128, -127)
    a = rng.integers(lo, hi + 1, (k, m) if ta else (m, k), dtype=np.int8)
    b = rng.integers(-128, 128, (n, k) if tb else (k, n), dtype=np.int8)
    return a, b


def _check(dev, a, b, ta, tb, row_exp, col_exp, out, block=None):
    got = dev.gemm(a, b, transpose_a=ta, transpose_b=tb, row_exp=row_exp, col_exp=col_exp,
                   out=out, block=block)
    if block is not None:
        assert dev.stats["block"] == block
    acc = golden.gemm(a, b, ta, tb)
    if out == "int32":
        np.testing.assert_array_equal(got, acc)
    else:
        want = golden.rescale(acc, row_exp, col_exp)
        np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))


dims = st.one_of(st.integers(1, 20), st.integers(21, 80))


@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(m=dims, n=dims, k=st.one_of(st.integers(1, 40), st.integers(500, 1100)),
       ta=st.booleans(), tb=st.booleans(), out=st.sampled_from(["float32", "int32"]),
       exps=st.sampled_from(["scalar", "vector", "extreme"]), seed=st.integers(0, 2**16),
       extremes=st.booleans(), block=st.sampled_from([None, 1, 2, 3, 4]))
def test_gemm_matches_golden(dev, m, n, k, ta, tb, out, exps, seed, extremes, block):
    rng = np.random.default_rng(seed)
    a, b = _operands(rng, m, n, k, ta, tb, extremes)
    if exps == "scalar":
        row_exp, col_exp = int(rng.integers(-128, 128)), int(rng.integers(-128, 128))
    elif exps == "vector":
        row_exp = rng.integers(-40, 40, m).astype(np.int8)
        col_exp = rng.integers(-40, 40, n).astype(np.int8)
    else:
        row_exp = rng.choice(np.array([-128, 127, 0], np.int8), m)
        col_exp = rng.choice(np.array([-128, 127, -1], np.int8), n)
    _check(dev, a, b, ta, tb, row_exp, col_exp, out, block)


def test_three_training_gemms(dev):
    """Forward, backward-data (A transposed) and weight-gradient (B transposed) of one layer."""
    rng = np.random.default_rng(3)
    batch, fan_in, fan_out = 24, 70, 18
    x = rng.integers(-128, 128, (batch, fan_in), dtype=np.int8)
    w = rng.integers(-128, 128, (fan_in, fan_out), dtype=np.int8)
    dy = rng.integers(-128, 128, (batch, fan_out), dtype=np.int8)
    _check(dev, x, w, False, False, 0, 0, "int32")           # y = x W
    _check(dev, dy, w, False, True, 0, 0, "int32")           # dx = dy W^T
    _check(dev, x, dy, True, False, 0, 0, "int32")           # dW = x^T dy


def _layout(dev, base, rows, cols, stride, data):
    mem = dev.sim.memory
    view = mem[base:base + rows * stride].reshape(rows, stride)
    view[:, :cols] = data.view(np.uint8).reshape(rows, cols)


def test_wide_strides_and_queued_descriptors(dev):
    """Rows further apart than their length, and four descriptors queued back to back."""
    drv, rng = dev.driver, np.random.default_rng(11)
    bpw = drv.bytes_per_word
    jobs = []
    base = 0x10000
    for i in range(4):
        m, n, k = 9 + i, 13, 21 + 3 * i
        a = rng.integers(-128, 128, (m, k), dtype=np.int8)
        b = rng.integers(-128, 128, (k, n), dtype=np.int8)
        sa, sb, sc = 3 * bpw * 2, 2 * bpw * 3, 4 * bpw * 2
        a_addr, b_addr, c_addr = base, base + 0x4000, base + 0x8000
        _layout(dev, a_addr, m, k, sa, a)
        _layout(dev, b_addr, k, n, sb, b)
        dev.sim.memory[c_addr:c_addr + m * sc] = 0xEE
        jobs.append((dict(m=m, n=n, k=k, flags={"RAW": 1}, a_addr=a_addr, a_stride=sa,
                          b_addr=b_addr, b_stride=sb, c_addr=c_addr, c_stride=sc),
                     golden.gemm(a, b), c_addr, sc))
        base += 0x10000
    drv.set_window(0x10000, base)
    done_before = drv.read("DONE_COUNT")
    counters = drv.run(*[j[0] for j in jobs])
    assert drv.read("DONE_COUNT") - done_before == 4
    assert counters["macs"] == sum(j[0]["m"] * j[0]["n"] * j[0]["k"] for j in jobs)
    for desc, want, c_addr, sc in jobs:
        m, n = desc["m"], desc["n"]
        rows = dev.sim.memory[c_addr:c_addr + m * sc].reshape(m, sc)
        np.testing.assert_array_equal(rows[:, :4 * n].copy().view(np.int32), want)
        assert np.all(rows[:, 4 * n:] == 0xEE), "bytes beyond column N were written"


def _overlap_jobs(dev, rng, count, overlap):
    """``count`` GEMM descriptors of varied shapes, transposes, exponents and K chunkings,
    each in regions of its own, the later ones with ``DESC_FLAGS.OVERLAP`` = ``overlap``;
    (descriptor, the expected C as uint32)."""
    drv = dev.driver
    bpw = drv.bytes_per_word
    rows, cols, depth = drv.info.rows, drv.info.cols, drv.info.depth
    jobs, base = [], 0x10000
    for i in range(count):
        m, n = int(rng.integers(1, 3 * rows)), int(rng.integers(1, 3 * cols))
        k = int(rng.choice([int(rng.integers(1, 40)), depth + int(rng.integers(1, 60))]))
        ta, tb, raw = (bool(x) for x in rng.integers(0, 2, 3))
        a, b = _operands(rng, m, n, k, ta, tb)
        sa, sb = (-(-x.shape[1] // bpw) * bpw for x in (a, b))
        sc = -(-4 * n // bpw) * bpw
        a_addr, b_addr, c_addr = base, base + 0x10000, base + 0x20000     # 64 KB each
        _layout(dev, a_addr, *a.shape, sa, a)
        _layout(dev, b_addr, *b.shape, sb, b)
        # (each K chunking in turn, DESC_FLAGS.CHUNK: the schedule, never the result)
        flags = {"TRANSPOSE_A": ta, "TRANSPOSE_B": tb, "RAW": raw, "OVERLAP": overlap and i > 0,
                 "CHUNK": i % 4}
        acc = golden.gemm(a, b, ta, tb)
        if raw:
            want = acc.view(np.uint32)
        else:
            re, ce = (int(x) for x in rng.integers(-20, 20, 2))
            flags.update(ROW_EXP=re, COL_EXP=ce)
            want = golden.rescale(acc, re, ce).view(np.uint32)
        desc = dict(m=m, n=n, k=k, flags={f: int(v) for f, v in flags.items()},
                    a_addr=a_addr, a_stride=sa, b_addr=b_addr, b_stride=sb, c_addr=c_addr,
                    c_stride=sc)
        jobs.append((desc, want))
        base += 0x30000
    drv.set_window(0x10000, base)
    return jobs


def test_overlapped_descriptors(dev):
    """Descriptors with ``DESC_FLAGS.OVERLAP`` start while the one before writes its C:
    every C bit-exact, DONE_COUNT and MACS per descriptor, and the run shorter than the
    same descriptors run one after the other (without the flag)."""
    drv = dev.driver
    busy = {}
    for overlap in (False, True):
        jobs = _overlap_jobs(dev, np.random.default_rng(5), 5, overlap)
        done_before = drv.read("DONE_COUNT")
        counters = drv.run(*[j[0] for j in jobs])
        busy[overlap] = counters["busy_cycles"]
        assert drv.read("DONE_COUNT") - done_before == len(jobs)
        assert counters["macs"] == sum(j[0]["m"] * j[0]["n"] * j[0]["k"] for j in jobs)
        for desc, want in jobs:
            np.testing.assert_array_equal(_c(dev, desc).view(np.uint32), want)
    assert busy[True] < busy[False], busy


@pytest.mark.parametrize("port,read_ports", [
    ({"write_order": "w-first", "outstanding_reads": 2, "outstanding_writes": 1, "pause": 0.3},
     3),
    ({"write_order": "random", "outstanding_reads": 1, "read_latency": 90, "pause": 0.1}, 3),
    ("zynq7-hp", 3),
    pytest.param({"write_order": "random", "outstanding_reads": 2, "read_latency": 70,
                  "pause": 0.25}, 4, marks=pytest.mark.slow)],
    ids=["w-first", "random", "zynq7-hp", "random-4r"])
def test_overlapped_descriptors_behind_hostile_ports(port, read_ports):
    """Queued descriptors with OVERLAP behind subordinates that order W before AW (or at
    random), take few bursts in flight, answer late: every C bit-exact, no protocol
    violation, no hang, one DONE per descriptor."""
    dev = Device("rtl", rows=4, cols=8, data_width=64, port=port, seed=3, write_ports=2,
                 read_ports=read_ports)
    drv = dev.driver
    jobs = _overlap_jobs(dev, np.random.default_rng(13), 6, True)
    done_before = drv.read("DONE_COUNT")
    drv.run(*[j[0] for j in jobs])
    assert drv.read("DONE_COUNT") - done_before == len(jobs)
    for desc, want in jobs:
        np.testing.assert_array_equal(_c(dev, desc).view(np.uint32), want)
    assert dev.sim.violations == 0


def test_descriptor_without_overlap_reads_what_the_one_before_wrote(dev):
    """Without OVERLAP a descriptor waits for the C of the one before it: here it reads that
    C (int32 sums, as int8 bytes) as its A, with no host in between."""
    drv, rng = dev.driver, np.random.default_rng(8)
    bpw = drv.bytes_per_word
    first = _overlap_jobs(dev, rng, 1, False)[0]
    d1 = {**first[0], "flags": {"RAW": 1}}
    a1 = dev.sim.memory[d1["a_addr"]:d1["a_addr"] + d1["m"] * d1["a_stride"]]
    a1 = a1.reshape(d1["m"], d1["a_stride"])[:, :d1["k"]].view(np.int8)
    b1 = dev.sim.memory[d1["b_addr"]:d1["b_addr"] + d1["k"] * d1["b_stride"]]
    b1 = b1.reshape(d1["k"], d1["b_stride"])[:, :d1["n"]].view(np.int8)
    c1 = golden.gemm(a1, b1)
    # the second: A = C1's bytes (M1 x 4 N1), B = 4 N1 x 3 of its own
    k2, n2 = 4 * d1["n"], 3
    b2 = rng.integers(-128, 128, (k2, n2), dtype=np.int8)
    sb2 = -(-n2 // bpw) * bpw
    b2_addr, c2_addr = 0x100000, 0x110000
    _layout(dev, b2_addr, k2, n2, sb2, b2)
    sc2 = -(-4 * n2 // bpw) * bpw
    d2 = dict(m=d1["m"], n=n2, k=k2, flags={"RAW": 1}, a_addr=d1["c_addr"],
              a_stride=d1["c_stride"], b_addr=b2_addr, b_stride=sb2, c_addr=c2_addr,
              c_stride=sc2)
    drv.set_window(0x10000, 0x120000)
    dev.sim.memory[d1["c_addr"]:d1["c_addr"] + d1["m"] * d1["c_stride"]] = 0x5A  # stale
    drv.run(d1, d2)
    want = golden.gemm(c1.view(np.int8).reshape(d1["m"], k2), b2)
    np.testing.assert_array_equal(_c(dev, d2), want)


def test_rejected_descriptor_behind_an_overlapped_one(dev):
    """A rejected descriptor started behind one still writing its C: that one completes
    (DONE_COUNT, its C) before the error stops the engine."""
    drv = dev.driver
    jobs = _overlap_jobs(dev, np.random.default_rng(9), 2, True)
    bad = {**jobs[1][0], "k": 0}
    done_before = drv.read("DONE_COUNT")
    with pytest.raises(AcceleratorError) as info:
        drv.run(jobs[0][0], bad)
    assert info.value.code == ErrorCode.ZERO_DIMENSION
    assert drv.read("DONE_COUNT") - done_before == 1
    desc, want = jobs[0]
    np.testing.assert_array_equal(_c(dev, desc).view(np.uint32), want)


def test_writes_stop_at_column_n(dev):
    """No write burst reaches past the last bus word holding column N - 1 (the memory model
    answers SLVERR to anything touching the bytes just after it)."""
    drv, sim = dev.driver, dev.sim
    bpw = drv.bytes_per_word
    rng = np.random.default_rng(2)
    m, n, k = 3, 9, 5
    a = rng.integers(-128, 128, (m, k), dtype=np.int8)
    b = rng.integers(-128, 128, (k, n), dtype=np.int8)
    sa = sb = -(-max(k, n) // bpw) * bpw
    sc = -(-4 * n // bpw) * bpw
    _layout(dev, 0x100000, m, k, sa, a)
    _layout(dev, 0x104000, k, n, sb, b)
    c_addr = 0x110000 - m * sc                      # C's last row ends at 0x110000
    desc = dict(m=m, n=n, k=k, flags={"RAW": 1}, a_addr=0x100000, a_stride=sa,
                b_addr=0x104000, b_stride=sb, c_addr=c_addr, c_stride=sc)
    drv.set_window(0x100000, 0x110000)
    sim.set_error_range(0x110000, 0x110000 + 4096)
    try:
        drv.run(desc)
    finally:
        sim.set_error_range(0, 0)
    np.testing.assert_array_equal(_c(dev, desc), golden.gemm(a, b))


def _good_desc(dev):
    """A small valid descriptor in the window [0x100000, 0x200000) and its expected C."""
    rng = np.random.default_rng(5)
    bpw = dev.driver.bytes_per_word
    m, n, k = 5, 7, 9
    a = rng.integers(-128, 128, (m, k), dtype=np.int8)
    b = rng.integers(-128, 128, (k, n), dtype=np.int8)
    sa, sb, sc = (-(-x // bpw) * bpw for x in (k, n, 4 * n))
    _layout(dev, 0x100000, m, k, sa, a)
    _layout(dev, 0x104000, k, n, sb, b)
    desc = dict(m=m, n=n, k=k, flags={"RAW": 1}, a_addr=0x100000, a_stride=sa,
                b_addr=0x104000, b_stride=sb, c_addr=0x108000, c_stride=sc)
    return desc, golden.gemm(a, b)


def _c(dev, desc):
    m, n, sc = desc["m"], desc["n"], desc["c_stride"]
    mem = dev.sim.memory[desc["c_addr"]:desc["c_addr"] + m * sc]
    return mem.reshape(m, sc)[:, :4 * n].copy().view(np.int32)


BAD = [
    ("zero M", dict(m=0), ErrorCode.ZERO_DIMENSION),
    ("zero K", dict(k=0), ErrorCode.ZERO_DIMENSION),
    ("M too large", dict(m=70000), ErrorCode.DIMENSION_TOO_LARGE),
    ("K too large", dict(k=65536), ErrorCode.K_TOO_LARGE),
    ("misaligned A", dict(a_addr=0x100001), ErrorCode.MISALIGNED),
    ("misaligned stride", dict(b_stride=24), ErrorCode.MISALIGNED),
    ("stride shorter than a row", dict(c_stride=0), ErrorCode.BAD_STRIDE),
    ("A below the window", dict(a_addr=0x0F0000), ErrorCode.OUT_OF_WINDOW),
    ("C beyond the window", dict(c_addr=0x1FFFC0), ErrorCode.OUT_OF_WINDOW),
    ("exponents beyond the window", dict(flags={"RAW": 1, "ROW_EXP_VECTOR": 1},
                                         row_exp_addr=0x300000), ErrorCode.OUT_OF_WINDOW),
]


@pytest.mark.parametrize("what,change,code", BAD, ids=[b[0] for b in BAD])
def test_rejected_descriptor_touches_nothing(dev, what, change, code):
    desc, want = _good_desc(dev)
    drv, sim = dev.driver, dev.sim
    drv.set_window(0x100000, 0x200000)
    if what == "misaligned stride":
        # over a bus word and not a multiple of it (a stride below a word is a packed one)
        change = dict(b_stride=drv.bytes_per_word * 3 // 2)
    reads, writes = sim.read_beats, sim.write_beats
    with pytest.raises(AcceleratorError) as info:
        drv.run({**desc, **change})
    assert info.value.code == code
    assert (sim.read_beats, sim.write_beats) == (reads, writes), "memory was touched"
    assert drv.status() == {"busy": 0, "error": 0, "queue_full": 0, "queue_level": 0,
                            "error_code": 0}
    drv.run(desc)                                   # the same engine works again
    np.testing.assert_array_equal(_c(dev, desc), want)


@pytest.mark.parametrize("where", ["read", "read A", "write", "write row 1"])
def test_bus_error_stops_cleanly(dev, where):
    """"write row 1": C's second row (written by the second writer where there are two);
    "read" is B's (the second reader's where there are two read ports), "read A" A's."""
    desc, want = _good_desc(dev)
    drv, sim = dev.driver, dev.sim
    drv.set_window(0x100000, 0x200000)
    lo = {"read": desc["b_addr"], "read A": desc["a_addr"], "write": desc["c_addr"],
          "write row 1": desc["c_addr"] + desc["c_stride"]}[where]
    sim.set_error_range(lo, lo + 64)
    try:
        with pytest.raises(AcceleratorError) as info:
            drv.run(desc)
    finally:
        sim.set_error_range(0, 0)
    assert info.value.code == (ErrorCode.READ_ERROR if where.startswith("read")
                               else ErrorCode.WRITE_ERROR)
    assert sim.outstanding == 0
    drv.run(desc)
    np.testing.assert_array_equal(_c(dev, desc), want)


def test_an_epilogue_build_lacks_relu_below_8_columns():
    """Accelerator(epilogue=True) offers RELU (``CONFIG_FEATURES.OPS``) with its BFP8 output
    from 8 columns on; with 4 a tile row's mask is half a byte, so RELU is not offered (and
    its BFP8 write-back refuses to be built with it). BIAS and MASK_IN come with the BFP8
    output, QUANTIZE_ONLY where a tile row is whole bus words."""
    from rtl.accelerator import Accelerator
    from rtl.bfpwrite import BfpWriteBack
    out = pack("DESC_EPILOGUE", BFP8=1, STOCHASTIC=1, BIAS=3, MASK_IN=1)
    only = pack("DESC_EPILOGUE", QUANTIZE_ONLY=1)
    assert Accelerator(8, 8, epilogue=True).ops == out | only | pack("DESC_EPILOGUE", RELU=1)
    assert Accelerator(4, 4, block=8, depth=64, epilogue=True).ops == out | only
    assert Accelerator(8, 8, data_width=512, epilogue=True).ops == out | pack(
        "DESC_EPILOGUE", RELU=1)
    assert Accelerator(8, 8).ops == 0
    with pytest.raises(ValueError, match="relu needs at least 8 columns"):
        BfpWriteBack(4, 4, relu=True)


def test_an_epilogue_this_build_lacks_is_refused(dev):
    """A build without the epilogue's options (``CONFIG_FEATURES`` says so): a descriptor
    asking for one stops with ``UNSUPPORTED`` and is not run; the next plain one runs."""
    info = dev.driver.info
    assert not info.epilogue and not info.epilogue_ops and not info.k_blocks
    assert info.tile_block == 32
    desc, want = _good_desc(dev)
    dev.driver.set_window(0x100000, 0x200000)
    for epilogue in ({"RELU": 1}, {"A_TILES": 1}):
        dev.sim.memory[desc["c_addr"]:desc["c_addr"] + 4096] = 0
        with pytest.raises(AcceleratorError) as info:
            dev.driver.run(dict(desc, flags={}, epilogue=epilogue))
        assert info.value.code is ErrorCode.UNSUPPORTED
        assert not _c(dev, desc).any()
    dev.driver.run(desc)
    np.testing.assert_array_equal(_c(dev, desc), want)
    # the runtime asks CONFIG_FEATURES first and says so
    with pytest.raises(RuntimeError, match="BFP8, QUANTIZE_ONLY"):
        dev.quantize(np.zeros((4, 4), np.float32))


def test_soft_reset_mid_run_and_queue_overflow(dev):
    drv, sim = dev.driver, dev.sim
    desc, want = _good_desc(dev)
    big = dict(desc, m=64, n=64, k=600, a_stride=1024, b_stride=1024, c_stride=256)
    drv.set_window(0x100000, 0x200000)
    drv.submit(big)
    sim.step(700)                                   # mid-burst, mid-tile
    assert drv.status()["busy"]
    drv.soft_reset()
    assert sim.outstanding == 0
    assert drv.status()["queue_level"] == 0
    drv.run(desc)
    np.testing.assert_array_equal(_c(dev, desc), want)
    # one running + a full queue, then one more
    for _ in range(drv.info.queue + 1):
        drv.submit(big)
    drv.submit(big)
    st = drv.wait_idle(10_000)
    assert st["error"] and st["error_code"] == ErrorCode.QUEUE_OVERFLOW
    drv.soft_reset()
    drv.run(desc)
    np.testing.assert_array_equal(_c(dev, desc), want)


def test_interrupt_and_identification(dev):
    drv = dev.driver
    assert (drv.info.rows, drv.info.cols) == (dev.rows, dev.cols)
    assert drv.info.data_width == dev.data_width
    assert drv.info.write_ports == dev.sim.params.get("write_ports", 1)
    assert drv.info.read_ports == dev.sim.params.get("read_ports", 1)
    assert drv.info.block == 4          # Accelerator's default
    desc, _ = _good_desc(dev)
    drv.set_window(0x100000, 0x200000)
    drv.write("IRQ_STATUS", 3)
    drv.write("IRQ_ENABLE", pack("IRQ_ENABLE", DONE=1))
    drv.run(desc)
    dev.sim.step(2)
    assert dev.sim.irq
    drv.write("IRQ_STATUS", pack("IRQ_STATUS", DONE=1))
    dev.sim.step(2)
    assert not dev.sim.irq
    drv.write("IRQ_ENABLE", 0)


def test_device_options_are_checked():
    with pytest.raises(TypeError, match="unknown option"):
        Device("rtl", rows=8, cols=8, speed=3)
    for bad, match in ((7, "write_ports must be one of 1, 2, 3, 4, 5, 6"),
                       (True, "write_ports must be"),
                       (3, r"write_ports \(3\) must be at most rows \(2\)")):
        for backend in ("rtl", "model"):          # before any model is built
            with pytest.raises(ValueError, match=match):
                Device(backend, rows=2, cols=8, write_ports=bad)
    with pytest.raises(TypeError, match="golden backend takes no options"):
        Device("golden", latency=3)


def test_pynq_backend_over_the_simulated_board(monkeypatch):
    """The pynq layer is thin: run it over a stand-in ``pynq`` module whose MMIO and
    ``allocate`` reach the simulated accelerator, and check a GEMM."""
    import sys
    import types

    from sim.native import NativeSim

    sim = NativeSim(rows=8, cols=8, data_width=128, latency=32)
    fake = types.ModuleType("pynq")
    state = {"next": 0x4000}

    class MMIO:
        def __init__(self, base, length):
            assert base == 0x4000_0000 and length >= 0x150

        def read(self, offset):
            sim.step(64)                    # time passes on the board while the ARM polls
            return sim.read32(offset)

        def write(self, offset, value):
            sim.write32(offset, value)

    class Buffer(np.ndarray):
        def flush(self):
            pass

        def invalidate(self):
            pass

        def freebuffer(self):
            pass

    def allocate(shape, dtype):
        addr = state["next"]
        state["next"] += -(-shape[0] // 4096) * 4096
        buf = sim.memory[addr:addr + shape[0]].view(Buffer)
        buf.device_address = addr
        return buf

    fake.MMIO, fake.allocate = MMIO, allocate
    monkeypatch.setitem(sys.modules, "pynq", fake)
    dev = Device("pynq", rows=8, cols=8, data_width=128, base_addr=0x4000_0000)
    rng = np.random.default_rng(9)
    a = rng.integers(-128, 128, (30, 19), dtype=np.int8)
    b = rng.integers(-128, 128, (12, 19), dtype=np.int8)
    _check(dev, a, b, False, True, np.arange(30, dtype=np.int8) - 15, 3, "float32")
    with pytest.raises(ValueError, match="8x8 array"):
        Device("pynq", rows=16, cols=16, data_width=128, base_addr=0x4000_0000)


def test_block_side_changes_the_schedule_not_the_result(dev):
    """One GEMM at every reuse-block side: the same bits, the cycles the model predicts for
    each side (within 15 %: this port pauses at random), and the automatic choice the
    model's."""
    from firmware.runtime.perfmodel import best_plan, predict
    rng = np.random.default_rng(11)
    m, n, k = 5 * dev.rows + 3, 6 * dev.cols + 1, 100
    a, b = _operands(rng, m, n, k, True, False)
    want = golden.gemm(a, b, True, False)
    info = dev.driver.info
    cfg = dict(rows=info.rows, cols=info.cols, depth=info.depth, data_width=info.data_width,
               port=dev.memory_port(), write_ports=info.write_ports,
               read_ports=info.read_ports)
    cycles = {}
    for side in range(1, info.block + 1):
        np.testing.assert_array_equal(dev.gemm(a, b, transpose_a=True, out="int32",
                                               block=side), want)
        cycles[side] = dev.stats["cycles"]
        model = predict(m, n, k, True, False, block=side, **cfg)["cycles"]
        assert abs(model / cycles[side] - 1) < 0.15, (side, model, cycles[side])
    assert len(set(cycles.values())) > 1
    np.testing.assert_array_equal(dev.gemm(a, b, transpose_a=True, out="int32"), want)
    assert (dev.stats["transposed"], dev.stats["block"]) == best_plan(
        m, n, k, True, False, block=info.block, **cfg)
    from firmware.runtime.perfmodel import best_chunk, run_shape
    assert dev.stats["chunk"] == best_chunk(
        *run_shape(m, n, k, True, False, dev.stats["transposed"]), block=dev.stats["block"],
        **cfg)


def test_block_argument_is_checked(dev):
    a, b = np.zeros((2, 3), np.int8), np.zeros((3, 4), np.int8)
    for bad in (0, 5, -1):
        with pytest.raises(ValueError, match="block must be in 1..4"):
            dev.gemm(a, b, block=bad)
    for bad in (True, 2.0, "4"):
        with pytest.raises(TypeError, match="block"):
            dev.gemm(a, b, block=bad)


@pytest.mark.parametrize("packing", [pytest.param(1, marks=pytest.mark.slow), 2])
def test_slr_groups_bit_exact(packing):
    # The array split into SLR groups (the VU9P default's two, here three) with crossing
    # registers: a longer pipeline, the same results, on a hostile port.
    dev = Device("rtl", rows=4, cols=8, data_width=64, packing=packing, slr_groups=3,
                 port="zynqmp-hp", seed=3)
    assert dev.sim.params["slr_groups"] == 3
    rng = np.random.default_rng(packing)
    for m, n, k, ta, tb in ((4, 8, 1, False, False), (13, 21, 37, True, False),
                            (9, 30, 700, False, True), (33, 17, 64, True, True)):
        a, b = _operands(rng, m, n, k, ta, tb, extremes=m == 4)
        _check(dev, a, b, ta, tb, 0, 0, "int32")
    assert dev.sim.violations == 0


def test_chunk_field_reaches_the_walker():
    """``DESC_FLAGS.CHUNK`` through the register block to the walker: the same GEMM at each
    chunking, on a port without pauses (so a run's cycles are its schedule's alone), is
    bit-exact each time, takes cycles that differ with the chunking, each within 15 % of the
    model's."""
    from firmware.runtime.perfmodel import predict
    dev = Device("rtl", rows=4, cols=8, data_width=64, write_ports=2, read_ports=3,
                 port={"pause": 0.0, "read_latency": 20})
    drv, info = dev.driver, dev.driver.info
    rng = np.random.default_rng(3)
    m, n, k = 8, 16, 2 * info.depth + 40
    a, b = _operands(rng, m, n, k, False, False)
    x, y = dev.tensor(a), dev.tensor(b)
    c = dev.empty((m, n), np.int32)
    cfg = dict(rows=info.rows, cols=info.cols, depth=info.depth, data_width=info.data_width,
               port=dev.memory_port(), write_ports=info.write_ports,
               read_ports=info.read_ports, block=info.block)
    cycles = {}
    for chunk in range(4):
        descs = drv.descriptors(x, y, c, m=m, n=n, k0=0, k1=k, transpose_a=False,
                                transpose_b=False, row_exp=0, col_exp=0, raw=True,
                                chunk=chunk)
        cycles[chunk] = drv.run(*descs)["busy_cycles"]
        np.testing.assert_array_equal(c.numpy(), golden.gemm(a, b, False, False))
        model = predict(m, n, k, chunk=chunk, **cfg)["cycles"]
        assert abs(model / cycles[chunk] - 1) < 0.15, (chunk, model, cycles[chunk])
    assert cycles[3] != cycles[0], cycles
    assert dev.sim.violations == 0


# ---- exponents along K (Accelerator(k_blocks=True)) ---------------------------------------

# (rows, cols, data_width): lanes below and equal to the bus width, each dividing the tile
# block of 32; and a tile of 64 columns, over two tile blocks of B's exponents
# (the 64 columns' elaboration and walk take minutes: slow)
KB_CONFIGS = [(4, 8, 64), (8, 8, 128), pytest.param((4, 64, 128), marks=pytest.mark.slow)]


@pytest.fixture(scope="module", params=KB_CONFIGS, ids=["4x8x64", "8x8x128", "4x64x128"])
def kb_dev(request):
    """A Device("rtl") whose model is built with ``k_blocks``."""
    rows, cols, width = request.param
    device = Device("rtl", rows=rows, cols=cols, data_width=width, depth=64, latency=24,
                    pause=0.2, seed=11, k_blocks=True)
    yield device
    assert device.sim.violations == 0, "AXI protocol violations"


@pytest.mark.parametrize("m,n,k,ta,tb", [(5, 7, 40, False, False), (33, 20, 70, True, False),
                                         (16, 40, 96, False, True), (40, 9, 33, True, True),
                                         (8, 8, 32, False, False), (70, 66, 130, False, False)])
def test_k_blocks_bfp_gemm_matches_golden(kb_dev, m, n, k, ta, tb):
    """bfp_gemm with a float32 C on tile-quantised operands whose exponents change along K:
    each K block rescaled on chip and added in float32, bit for bit
    :func:`sim.models.bfp.gemm_kblocks`, every transpose (the grids read transposed)."""
    from sim.models import bfp

    info = kb_dev.driver.info
    assert info.k_blocks and not info.epilogue
    rng = np.random.default_rng(m * 1000 + n * 10 + k)
    a = rng.standard_normal((k, m) if ta else (m, k)).astype(np.float32)
    b = rng.standard_normal((n, k) if tb else (k, n)).astype(np.float32)
    # (scales that differ from K block to K block, over a wide range)
    a *= np.float32(2.0) ** rng.integers(-30, 30, a.shape[0] if ta else a.shape[1]).reshape(
        (-1, 1) if ta else (1, -1)).astype(np.float32)
    # (and from column block to column block of B)
    b *= np.float32(2.0) ** rng.integers(-20, 20, n).reshape(
        (-1, 1) if tb else (1, -1)).astype(np.float32)
    qa, ea = bfp.quantize_tiles(a)
    qb, eb = bfp.quantize_tiles(b)
    got = kb_dev.bfp_gemm(kb_dev.bfp_tensor(qa, ea), kb_dev.bfp_tensor(qb, eb),
                          transpose_a=ta, transpose_b=tb, out="float32").numpy()
    want = bfp.gemm_kblocks(qa, ea, qb, eb, transpose_a=ta, transpose_b=tb)
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))


def test_k_blocks_round_each_block_then_add(kb_dev):
    """The subnormal case where the order of rounding matters: K-block terms 2**-149 and
    2**-150; the second rounds to 0 on its own, so C is 2**-149 (not 2**-148)."""
    from sim.models import bfp

    a = np.zeros((1, 64), np.int8)
    a[0, 0] = a[0, 32] = 1
    got = kb_dev.bfp_gemm(kb_dev.bfp_tensor(a, np.array([[-128, -128]], np.int8)),
                          kb_dev.bfp_tensor(a.T.copy(), np.array([[-21], [-22]], np.int8)),
                          out="float32").numpy()
    assert got[0, 0] == np.float32(2.0 ** -149)
    assert got.view(np.uint32)[0, 0] == bfp.gemm_kblocks(
        a, np.array([[-128, -128]], np.int8), a.T.copy(),
        np.array([[-21], [-22]], np.int8)).view(np.uint32)[0, 0]


def test_k_blocks_other_epilogue_bits_refused_and_grids_checked(kb_dev):
    """A K-block build runs ``A_TILES`` with ``B_TILES`` only: any other ``DESC_EPILOGUE``
    stops with ``UNSUPPORTED``; a grid beyond the window is ``OUT_OF_WINDOW``; plain
    descriptors run as before."""
    dev = kb_dev
    desc, want = _good_desc(dev)
    dev.driver.set_window(0x100000, 0x200000)
    tiles = {"A_TILES": 1, "B_TILES": 1}
    for epilogue in ({"A_TILES": 1}, {"RELU": 1}, dict(tiles, BFP8=1)):
        with pytest.raises(AcceleratorError) as info:
            dev.driver.run(dict(desc, flags={}, epilogue=epilogue))
        assert info.value.code is ErrorCode.UNSUPPORTED
    # A's grid (1 x 1 byte) just inside the window's end, then one byte beyond a word
    for addr, code in ((0x200000 - dev.driver.bytes_per_word, None),
                       (0x200000, ErrorCode.OUT_OF_WINDOW)):
        run = dict(desc, flags={}, epilogue=tiles, row_exp_addr=addr, col_exp_addr=0x10c000)
        if code is None:
            dev.driver.run(run)
        else:
            with pytest.raises(AcceleratorError) as info:
                dev.driver.run(run)
            assert info.value.code is code
    dev.sim.memory[desc["c_addr"]:desc["c_addr"] + 4096] = 0
    dev.driver.run(desc)
    np.testing.assert_array_equal(_c(dev, desc), want)


@pytest.mark.parametrize("m,n,k,ta,tb", [(64, 64, 256, False, False), (128, 32, 64, False, True),
                                         (16, 16, 512, False, False)])
def test_k_blocks_cycles_match_the_performance_model(kb_dev, m, n, k, ta, tb):
    """The performance model's K-block cycles (``predict(k_blocks=True)``: a chunk per tile
    block, every tile read out) against the K-block build's, for K a multiple of the tile
    block: within 5 %. (Not on the 4-row array of 64 columns: there a chunk's four tiles
    compute for less time than its exponents and operands take to arrive, a stall per chunk
    the model does not count; see the architecture page's known limits.)"""
    from firmware.runtime import perfmodel
    from sim.models import bfp

    dev = kb_dev
    if dev.driver.info.cols > 32:
        pytest.skip("the model does not count the per-chunk exponent stall of a 4 x 64 array")
    rng = np.random.default_rng(k)
    qa, ea = bfp.quantize_tiles(rng.standard_normal((k, m) if ta else (m, k)).astype(np.float32))
    qb, eb = bfp.quantize_tiles(rng.standard_normal((n, k) if tb else (k, n)).astype(np.float32))
    dev.bfp_gemm(dev.bfp_tensor(qa, ea), dev.bfp_tensor(qb, eb), transpose_a=ta,
                 transpose_b=tb, out="float32")
    info = dev.driver.info
    p = perfmodel.predict(m, n, k, ta, tb, rows=info.rows, cols=info.cols, depth=info.depth,
                          block=info.block, data_width=info.data_width, port=dev.sim.port,
                          dma_burst=dev.sim.params["burst_beats"], k_blocks=True)
    assert abs(p["cycles"] / dev.stats["cycles"] - 1) < 0.05


def test_native_model_found_again_without_generating_verilog(monkeypatch):
    """A model built before from the same RTL sources and parameters is found without
    generating the Verilog again; with the sources changed it is generated (and, the
    Verilog being the same, the model found by its digest)."""
    import rtl.export
    import sim.native
    params = dict(rows=8, cols=8, data_width=128, burst_beats=16)
    lib = sim.native._build(0, **params)
    made = []
    real = rtl.export.to_verilog
    monkeypatch.setattr(rtl.export, "to_verilog", lambda *a: made.append(a) or real(*a))
    assert sim.native._build(0, **params) == lib and made == []
    monkeypatch.setattr(rtl.export, "_source_digest", lambda: "changed")
    assert sim.native._build(0, **params) == lib and len(made) == 1


def test_native_vcd_needs_a_model_built_to_trace(tmp_path):
    """A model loaded as a library writes no waveforms: asking for them is a ValueError
    naming ``vcd``."""
    from sim.native import NativeSim, build
    lib = build(rows=8, cols=8, data_width=128, burst_beats=16)
    with pytest.raises(ValueError, match="vcd"):
        NativeSim(rows=8, cols=8, data_width=128, library=lib, vcd=tmp_path / "x.vcd")


@pytest.mark.slow
def test_native_vcd_records_the_run(tmp_path, monkeypatch):
    """``BFP_NATIVE_VCD`` writes the run's waveforms: the engine's ``step`` is high in as
    many cycles as the accelerator's active-cycle counter says (compiles a traced model,
    about a minute)."""
    path = tmp_path / "run.vcd"
    monkeypatch.setenv("BFP_NATIVE_VCD", str(path))
    monkeypatch.setenv("BFP_NATIVE_VCD_DEPTH", "3")
    dev = Device("rtl", rows=4, cols=4, data_width=64)
    rng = np.random.default_rng(2)
    a, b = _operands(rng, 9, 10, 37, False, False)
    np.testing.assert_array_equal(dev.gemm(a, b, out="int32"), golden.gemm(a, b))
    active = dev.stats["active_cycles"]
    del dev
    import gc
    gc.collect()                                    # (the VCD is closed with the model)
    assert active > 0
    from sim.native.vcd import STEP, sample
    assert sum(step for step, in sample(path, [STEP])) == active


VCD = """$timescale 1ps $end
$scope module TOP $end
$scope module bfp_accel $end
$var wire 1 ! clk $end
$scope module engine $end
$var wire 1 " step $end
$var wire 4 # walk_state $end
$upscope $end
$upscope $end
$upscope $end
$enddefinitions $end
#0
0"
b0 #
#1
#2
1"
b101 #
#3
#4
#5
0"
b1001 #
#6
#7
"""


def test_vcd_samples_each_rising_edge(tmp_path, capsys):
    """:func:`sim.native.vcd.sample` reads each rising edge's values (odd times); a name
    not traced is a ValueError naming it; the command line exits 2 without a VCD."""
    from sim.native import vcd
    path = tmp_path / "run.vcd"
    path.write_text(VCD)
    got = list(vcd.sample(path, ["bfp_accel.engine.step", "bfp_accel.engine.walk_state"]))
    assert got == [(0, 0), (1, 5), (0, 9), (0, 9)]
    with pytest.raises(ValueError, match="walker.walk_state"):
        list(vcd.sample(path, [vcd.WALK_STATE]))
    states = vcd.walker_states(k_blocks=True, conv=True)
    assert states[0] == "IDLE" and "PROBE" in states.values()
    assert "PROBE" not in vcd.walker_states().values()
    with pytest.raises(SystemExit) as e:
        vcd.main([str(tmp_path / "none.vcd")])
    assert e.value.code == 2 and "no VCD" in capsys.readouterr().err
