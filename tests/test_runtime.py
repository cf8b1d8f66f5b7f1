"""The host runtime: no host GEMM, device tensors and the buffer pool, GEMMs split beyond the
descriptor's limits, blocks along K, and the profile."""

import numpy as np
import pytest

from firmware import Device
from firmware.ml import nn
from firmware.ml.quant import dequantize, quantize
from firmware.runtime.device import DeviceTensor
from firmware.runtime.profile import Profile
from sim.models import golden


def _same(x, y):
    return x.shape == y.shape and x.dtype == y.dtype and np.array_equal(
        x.view(np.uint32), y.view(np.uint32))


def _operands(rng, m, n, k, ta, tb):
    a = rng.integers(-127, 128, (k, m) if ta else (m, k), dtype=np.int8)
    b = rng.integers(-127, 128, (n, k) if tb else (k, n), dtype=np.int8)
    return a, b


@pytest.fixture(scope="module")
def rtl():
    return Device("rtl", rows=8, cols=8, data_width=128)


@pytest.fixture(scope="module")
def rtl_small_limit():
    """Descriptors of at most 16 in every dimension: every GEMM below is split."""
    return Device("rtl", rows=8, cols=8, data_width=128, max_dim=16)


class _Poison(np.ndarray):
    """An array on which any arithmetic (every ufunc, ``@`` included, and numpy functions
    such as ``dot``) raises: the device may copy its bytes, nothing else."""

    def __array_ufunc__(self, *args, **kwargs):
        raise AssertionError(f"host arithmetic on an operand: {args[0].__name__}")

    def __array_function__(self, func, types, args, kwargs):
        if func.__name__ in ("ascontiguousarray", "asarray", "shape", "ndim"):
            return super().__array_function__(func, types, args, kwargs)
        raise AssertionError(f"host numpy function on an operand: {func.__name__}")


@pytest.mark.parametrize("ta,tb", [(False, False), (True, False), (False, True), (True, True)])
def test_no_host_arithmetic_over_the_operands_on_rtl(rtl, ta, tb):
    rng = np.random.default_rng(0)
    a, b = _operands(rng, 19, 13, 37, ta, tb)
    re = rng.integers(-3, 3, 19).astype(np.int8)
    c = rtl.gemm(a.view(_Poison), b.view(_Poison), transpose_a=ta, transpose_b=tb,
                 row_exp=re, col_exp=2)
    assert _same(c, golden.rescale(golden.gemm(a, b, ta, tb), re, 2))
    assert rtl.stats["descriptors"] == 1
    with pytest.raises(AssertionError, match="host"):       # the check can fail
        Device("golden").gemm(a.view(_Poison), b.view(_Poison), transpose_a=ta,
                              transpose_b=tb)


def test_training_on_rtl_calls_no_golden_model(monkeypatch):
    """Two int8 steps on the simulated accelerator with the golden models booby-trapped."""
    from firmware.ml import train
    r = train.build(train.TrainConfig(task="digits-mlp", precision="int8", epochs=1,
                                      batch=32, blocks="tensor"), "rtl", 8, 8)
    r.data = tuple(a[:64] for a in r.data)

    def trap(*args, **kwargs):
        raise AssertionError("a golden model ran on the host")

    for name in ("gemm", "gemm_scaled", "rescale"):
        monkeypatch.setattr(golden, name, trap)
    r.train_epoch()
    assert r.eng.gemms == 2 * 5 and r.eng.cycles > 0
    prof = r.eng.profile.summary()
    assert prof["seconds"]["combine"] == 0.0          # one block per tensor: no host sums
    assert prof["counts"]["gemms"] == 10 and prof["counts"]["steps"] == 2


@pytest.mark.parametrize("seed", range(6))
def test_split_gemms_are_bit_exact(rtl_small_limit, seed):
    rng = np.random.default_rng(seed)
    ta, tb = bool(seed & 1), bool(seed & 2)
    m, n, k = (int(v) for v in rng.integers(1, 60, 3))
    a, b = _operands(rng, m, n, k, ta, tb)
    re = rng.integers(-128, 128, m).astype(np.int8)
    ce = rng.integers(-20, 20, n).astype(np.int8) if seed % 3 else np.int8(rng.integers(-9, 9))
    dev = rtl_small_limit
    c = dev.gemm(a, b, transpose_a=ta, transpose_b=tb, row_exp=re, col_exp=ce)
    assert _same(c, golden.rescale(golden.gemm(a, b, ta, tb), re, ce))
    tiles = -(-m // 16) * -(-n // 16) * -(-k // 16)
    assert dev.stats["descriptors"] == tiles
    raw = dev.gemm(a, b, transpose_a=ta, transpose_b=tb, out="int32")
    np.testing.assert_array_equal(raw, golden.gemm(a, b, ta, tb))


@pytest.mark.parametrize("ta,tb", [(False, False), (True, False), (False, True), (True, True)])
def test_blocks_along_k_are_bit_exact_on_every_backend(rtl, rtl_small_limit, ta, tb):
    rng = np.random.default_rng(7)
    m, n, k = 11, 9, 45
    a, b = _operands(rng, m, n, k, ta, tb)
    # runs of 1..9 equal exponents, starting anywhere (misaligned K offsets included)
    k_exp = np.repeat(rng.integers(-30, 30, k), rng.integers(1, 10, k))[:k].astype(np.int16)
    re = rng.integers(-5, 5, m).astype(np.int8)
    want = golden.gemm_scaled(a, b, ta, tb, re, 3, k_exp)
    for dev in (Device("golden"), rtl, rtl_small_limit):
        got = dev.gemm(a, b, transpose_a=ta, transpose_b=tb, row_exp=re, col_exp=3,
                       k_exp=k_exp)
        assert _same(got, want), dev.backend
    # a constant k_exp folds into the exponents: one descriptor, equal to plain rescale
    got = rtl.gemm(a, b, transpose_a=ta, transpose_b=tb, row_exp=re, col_exp=3,
                   k_exp=np.full(k, -7, np.int16))
    assert rtl.stats["descriptors"] == 1
    assert _same(got, golden.rescale(golden.gemm(a, b, ta, tb), re - 7, 3))


def test_gemm_scaled_is_the_sum_of_its_runs():
    rng = np.random.default_rng(1)
    a, b = _operands(rng, 4, 5, 12, False, False)
    k_exp = np.array([0] * 5 + [3] * 7, np.int16)
    want = (golden.gemm(a[:, :5], b[:5]).astype(np.float64)
            + golden.gemm(a[:, 5:], b[5:]).astype(np.float64) * 8).astype(np.float32)
    assert _same(golden.gemm_scaled(a, b, k_exp=k_exp), want)
    assert golden.k_runs(k_exp) == [(0, 5, 0), (5, 12, 3)]
    with pytest.raises(ValueError, match="k_exp"):
        golden.gemm_scaled(a, b, k_exp=np.full(12, 300, np.int16))


def test_dimensions_above_the_register_map(rtl):
    """M above 65535 (tiles) and K above 65535 (chunks summed exactly) on the real limit."""
    rng = np.random.default_rng(2)
    a, b = _operands(rng, 65600, 8, 16, False, False)
    c = rtl.gemm(a, b, row_exp=-3, out="float32")
    assert rtl.stats["descriptors"] == 2
    assert _same(c, golden.rescale(golden.gemm(a, b), -3, 0))
    a, b = _operands(rng, 8, 8, 70000, True, False)
    a[:] = -127
    b[:] = -127                                  # sums beyond 2**30: exact in int32 still
    c = rtl.gemm(a, b, transpose_a=True, out="int32")
    assert rtl.stats["descriptors"] == 2
    np.testing.assert_array_equal(c, golden.gemm(a, b, True, False))
    assert c[0, 0] == 70000 * 127 * 127


def test_device_tensors_and_the_pool(rtl):
    rng = np.random.default_rng(3)
    dev = rtl
    w = rng.integers(-127, 128, (24, 10), dtype=np.int8)
    t = dev.tensor(w)
    assert isinstance(t, DeviceTensor) and t.shape == (24, 10)
    np.testing.assert_array_equal(t.numpy(), w)
    x = rng.integers(-127, 128, (5, 24), dtype=np.int8)
    calls = []
    alloc = dev.driver.memory.buffer
    dev.driver.memory.buffer = lambda n: calls.append(n) or alloc(n)
    try:
        for _ in range(3):                   # the same shapes: buffers come from the pool
            c = dev.gemm(x, t, row_exp=1)
            d = dev.gemm(x, t, transpose_b=False, out="int32")
        first = len(calls)
        for _ in range(3):
            dev.gemm(x, t, row_exp=1)
        assert len(calls) == first           # no allocation once every shape was seen
    finally:
        dev.driver.memory.buffer = alloc
    assert _same(c, golden.rescale(golden.gemm(x, w), 1, 0))
    np.testing.assert_array_equal(d, golden.gemm(x, w))
    w2 = rng.integers(-127, 128, (24, 10), dtype=np.int8)
    assert dev.tensor(w2, into=t) is t                 # overwrite in place
    np.testing.assert_array_equal(dev.gemm(x, t, out="int32"), golden.gemm(x, w2))
    with pytest.raises(ValueError, match="shape"):
        t.write(w2[:3])
    other = Device("golden")
    with pytest.raises(ValueError, match="another device"):
        other.gemm(x, t)
    t.free()
    with pytest.raises(ValueError, match="freed"):
        dev.gemm(x, t)


def test_quantising_an_8_bit_tensor_again_changes_nothing():
    rng = np.random.default_rng(4)
    for axis in (None, 0, 1):
        x = (rng.normal(size=(32, 16)) * np.exp2(rng.integers(-8, 8, (32, 1)))).astype(
            np.float32)
        x[3, 2] = -np.abs(x).max() * 1.5           # a negative extreme
        q, e = quantize(x, axis=axis, rounding="stochastic", rng=rng)
        assert q.min() >= -127
        y = dequantize(q, e, axis)
        for _ in range(3):
            q2, e2 = quantize(y, axis=axis, rounding="stochastic", rng=rng)
            np.testing.assert_array_equal(q2, q)
            np.testing.assert_array_equal(e2, e)


def test_profile_counts_every_second_once():
    p = Profile()
    with p.time("float"):
        with p.time("quantize"):
            sum(range(20000))
        sum(range(20000))
    s = p.summary(clock_hz=200e6)
    assert s["seconds"]["quantize"] > 0 and s["seconds"]["float"] > 0
    assert s["host_seconds"] == pytest.approx(s["seconds"]["quantize"] + s["seconds"]["float"],
                                              abs=2e-6)
    with pytest.raises(ValueError, match="kind"):
        with p.time("gpu"):
            pass


@pytest.mark.parametrize("blocks", ["fox", "tensor", "channel,channel,channel",
                                    "tensor,row,row"])
def test_block_policies_train_bit_identically_on_golden_and_rtl(blocks):
    """A conv + linear network, a few steps, every policy: the same weights on both."""
    digests = []
    for backend in ("golden", "rtl"):
        dev = Device(backend) if backend == "golden" else Device("rtl", rows=8, cols=8)
        rng = np.random.default_rng(5)
        net = nn.Network([nn.Conv2d(1, 4, 3, rng, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                          nn.Flatten(), nn.Linear(16, 3, rng)])
        eng = nn.Engine("int8", dev, rng=np.random.default_rng(6),
                        blocks=nn.Blocks.parse(blocks))
        x = rng.normal(size=(6, 1, 4, 4)).astype(np.float32)
        y = rng.integers(0, 3, 6)
        for _ in range(2):
            out = net.forward(x, eng)
            _, grad = nn.softmax_cross_entropy(out, y)
            net.backward(grad, eng)
            for (_, p), g in zip(net.parameters(), net.gradients(), strict=True):
                p -= 0.1 * g
        digests.append([p.tobytes() for _, p in net.parameters()])
    assert digests[0] == digests[1]


def test_bad_block_policies():
    with pytest.raises(ValueError, match="weights"):
        nn.Blocks("sample", "sample", "sample")
    with pytest.raises(ValueError, match="blocks"):
        nn.Blocks.parse("tensor,sample")
    with pytest.raises(TypeError, match="blocks"):
        nn.Engine("int8", Device(), blocks="fox")


def test_command_line_profile_blocks_and_the_model_backend(capsys):
    from firmware.ml.train import main
    assert main(["--task", "rf-anomaly", "--backend", "model", "--board", "zcu104",
                 "--epochs", "1", "--profile", "--blocks", "tensor"]) == 0
    out = capsys.readouterr()
    assert "host quantize" in out.err and "at 200 MHz" in out.err
    import json
    result = json.loads(out.out)
    assert result["array"] == [32, 64] and result["blocks"] == "tensor"
    prof = result["profile"]
    assert prof["clock_mhz"] == 200 and prof["accelerator_cycles"] > 0
    assert 0 < prof["host_share"] < 1
    for bad in (["--blocks", "sample,sample,sample"], ["--board", "zcu104"],
                ["--clock-mhz", "0"], ["--backend", "rtl", "--bitfile", "x.bit"]):
        with pytest.raises(SystemExit) as e:
            main(["--task", "rf-anomaly", "--epochs", "1", *bad])
        assert e.value.code == 2


def test_functional_model_checks_descriptors_like_the_hardware():
    from firmware.runtime.driver import AcceleratorError
    from firmware.spec.regmap import ErrorCode
    dev = Device("model", rows=8, cols=8, data_width=128)
    drv = dev.driver
    t = dev.tensor(np.ones((4, 16), np.int8))
    for desc, code in (
            (dict(m=0, n=1, k=1), ErrorCode.ZERO_DIMENSION),
            (dict(m=4, n=4, k=16, a_addr=t.addr + 3, a_stride=16, b_addr=t.addr,
                  b_stride=16, c_addr=t.addr, c_stride=16), ErrorCode.MISALIGNED),
            (dict(m=4, n=4, k=16, a_addr=t.addr, a_stride=0, b_addr=t.addr, b_stride=16,
                  c_addr=t.addr, c_stride=16), ErrorCode.BAD_STRIDE),
            (dict(m=4, n=4, k=16, a_addr=1 << 30, a_stride=16, b_addr=t.addr, b_stride=16,
                  c_addr=t.addr, c_stride=16), ErrorCode.OUT_OF_WINDOW)):
        with pytest.raises(AcceleratorError) as e:
            drv.run(desc)
        assert e.value.code == code
    c = dev.gemm(t, t, transpose_b=True, out="int32")       # works again after the errors
    np.testing.assert_array_equal(c, np.full((4, 4), 16))


def test_host_benchmark_measures_a_step():
    from sim.bench import host as hostbench
    r = hostbench.measure("pynq-z1", "tensor", batch=4, steps=1)
    assert r["config"] == "16x16@64" and r["clock_mhz"] == 100
    assert r["gemms_per_step"] == 4 * 3 - 1                  # the first layer: no dx
    assert r["descriptors_per_step"] >= r["gemms_per_step"]
    assert r["accelerator_cycles"] > 0 and 0 < r["host_share"] < 1
    assert r["host_total"] == pytest.approx(sum(        # each kind rounded to 1 µs
        v for k, v in r["host_seconds"].items() if k != "wait"), abs=1e-5)
    assert "| pynq-z1 (16x16@64" in hostbench.table([r])


def test_host_benchmark_cnn_on_the_device_lays_out_the_batch_only():
    """The CNN with its whole step on the device (resident-sgd): the host's layout time is
    the input batch's copy to the CHWN layout, its quantise and combine rows zero."""
    from sim.bench import host as hostbench
    r = hostbench.measure("pynq-z1", "resident-sgd", batch=4, steps=1)
    assert r["host_seconds"]["quantize"] == r["host_seconds"]["combine"] == 0.0
    assert 0 < r["host_seconds"]["layout"] < 0.01
    # the batch and the loss gradient quantised, 4 layers forward, 3 backward-data, 4
    # weight steps (each stepping its bias too)
    assert r["descriptors_per_step"] == 2 + 4 + 3 + 4


@pytest.mark.parametrize("backend", ["golden", "rtl", "model"])
def test_results_can_stay_on_the_device(rtl, backend):
    dev = {"golden": Device("golden"), "rtl": rtl,
           "model": Device("model", rows=8, cols=8)}[backend]
    rng = np.random.default_rng(8)
    a, b = _operands(rng, 12, 10, 40, False, True)
    want = golden.rescale(golden.gemm(a, b, False, True), 2, 0)
    c = dev.gemm(a, b, transpose_b=True, row_exp=2, as_tensor=True)
    assert isinstance(c, DeviceTensor) and c.shape == (12, 10)
    assert _same(c.numpy(), want)
    if backend != "golden":                     # C is where the accelerator wrote it
        assert c.buffer is not None
    k_exp = np.repeat(np.arange(4, dtype=np.int16), 10)
    c2 = dev.gemm(a, b, transpose_b=True, k_exp=k_exp, as_tensor=True)   # combined on host
    assert _same(c2.numpy(), golden.gemm_scaled(a, b, False, True, k_exp=k_exp))
    c.free()
    c2.free()


def _mixed_calls(rng, dev):
    """Six independent GEMMs of every kind: plain, transposed, exponent vectors, K blocks
    (several runs), int32, a result left on the device, device-tensor operands."""
    calls = []
    for i, (ta, tb) in enumerate([(False, False), (True, False), (False, True), (True, True),
                                  (True, False), (False, True)]):
        m, n, k = (int(v) for v in rng.integers(1, 40, 3))
        a, b = _operands(rng, m, n, k, ta, tb)
        call = dict(a=a, b=b, transpose_a=ta, transpose_b=tb,
                    row_exp=rng.integers(-9, 9, m).astype(np.int8), col_exp=int(i) - 3)
        if i == 1:                                  # per-sample blocks along K
            call["k_exp"] = np.repeat(rng.integers(-9, 9, k), 4)[:k].astype(np.int16)
        if i == 2:
            call = dict(a=a, b=b, transpose_a=ta, transpose_b=tb, out="int32")
        if i == 3:
            call["as_tensor"] = True
        if i == 5:
            call["a"], call["b"] = dev.tensor(a), dev.tensor(b)
        calls.append(call)
    return calls


def _want(call):
    host = {key: v.numpy() if isinstance(v, DeviceTensor) else v for key, v in call.items()
            if key != "as_tensor"}
    return Device("golden").gemm(**host)


@pytest.mark.parametrize("which", ["rtl", "rtl_small_limit", "model", "golden"])
def test_queued_gemms_equal_one_by_one(rtl, rtl_small_limit, which):
    dev = {"rtl": rtl, "rtl_small_limit": rtl_small_limit,
           "model": Device("model", rows=8, cols=8), "golden": Device("golden")}[which]
    calls = _mixed_calls(np.random.default_rng(5), dev)
    got = dev.gemms(calls)
    assert len(got) == len(calls)
    descriptors = dev.stats["descriptors"]
    for call, c in zip(calls, got, strict=True):
        if call.get("as_tensor"):
            assert isinstance(c, DeviceTensor)
            c = c.numpy()
        assert _same(c, _want(call))
    assert [g["m"] for g in dev.stats["gemms"]] == [
        (c["a"].shape[1] if c["transpose_a"] else c["a"].shape[0]) for c in calls]
    assert dev.stats["macs"] == sum(g["m"] * g["n"] * g["k"] for g in dev.stats["gemms"])
    if which != "golden":
        one_by_one = 0
        for call in calls:
            dev.gemm(**call)
            one_by_one += dev.stats["descriptors"]
        assert descriptors == one_by_one
        assert all(1 <= g["block"] for g in dev.stats.get("gemms", [dev.stats]))


def test_a_layers_backward_gemms_queued_take_fewer_cycles(rtl):
    """The weight gradient and backward-data GEMMs of a layer, queued: one run, the second
    GEMM's loads under the first one's last C rows; bit-exact, and fewer busy cycles than
    the two one after the other."""
    rng = np.random.default_rng(6)
    x = rng.integers(-127, 128, (32, 64), dtype=np.int8)      # batch x fan_in
    d = rng.integers(-127, 128, (32, 48), dtype=np.int8)      # batch x fan_out
    w = rtl.tensor(rng.integers(-127, 128, (64, 48), dtype=np.int8))
    calls = [dict(a=x, b=d, transpose_a=True, col_exp=-2), dict(a=d, b=w, transpose_b=True)]
    dw, dx = rtl.gemms(calls)
    queued = rtl.stats["cycles"]
    assert _same(dw, _want(calls[0])) and _same(dx, _want(calls[1]))
    alone = 0
    for call in calls:
        rtl.gemm(**call)
        alone += rtl.stats["cycles"]
    assert queued < alone - 50, (queued, alone)


def test_queued_gemms_bad_arguments(rtl):
    a = np.zeros((4, 8), np.int8)
    for calls, err, match in [
            (dict(a=a, b=a), TypeError, "calls must be a list"),
            ([], ValueError, "at least one"),
            ([(a, a)], TypeError, r"calls\[0\] must be a dict"),
            ([dict(a=a)], TypeError, r"calls\[0\] needs \['b'\]"),
            ([dict(a=a, b=a.T.copy(), tranpose_a=True)], TypeError, "tranpose_a"),
            ([dict(a=a, b=a.T.copy()), dict(a=a, b=a)], ValueError, r"calls\[1\]"),
            ([dict(a=a, b=a.T.copy(), out="int16")], ValueError, r"calls\[0\]: out")]:
        with pytest.raises(err, match=match):
            rtl.gemms(calls)


def test_queued_gemms_free_every_buffer_when_a_run_fails(monkeypatch):
    """A C left on the device for an earlier call goes back to the pool when a later run of
    the same queued call fails: nothing leaks."""
    import firmware.runtime.device as device
    dev = Device("model", rows=8, cols=8, queue=1)
    monkeypatch.setattr(device, "C_BUDGET", 1)            # one piece per driver run
    real, seen = dev.driver.run, []

    def run(*descs, **kw):
        seen.append(len(descs))
        if len(seen) == 2:
            raise RuntimeError("the board went away")
        return real(*descs, **kw)

    monkeypatch.setattr(dev.driver, "run", run)
    a = np.ones((8, 8), np.int8)
    with pytest.raises(RuntimeError, match="went away"):
        dev.gemms([dict(a=a, b=a, as_tensor=True), dict(a=a, b=a)])
    assert seen == [1, 1]
    assert dev.pool.live == 0 and dev.pool.idle_buffers > 0


def test_engine_queued_gemms_names_a_bad_option():
    eng = nn.Engine("int8", Device("golden"))
    q = nn.Q(np.ones((2, 3), np.int8))
    with pytest.raises(TypeError, match=r"calls\[0\].*tranpose_a"):
        eng.queued_gemms([(q, q, {"tranpose_a": True})])


@pytest.mark.parametrize("board", ["pynq-z1", "zcu104"])
def test_command_line_board_gives_the_model_backend_its_ports(monkeypatch, board, capsys):
    """--board on the model backend runs the board's default as built: its array, port
    preset and its read and write ports."""
    from firmware.ml import train
    from firmware.runtime import device
    from firmware.spec import boards
    from firmware.spec.ports import BOARD_PORTS
    made = []
    real = device.Device

    def spy(backend, **options):
        made.append(options)
        return real(backend, **options)

    monkeypatch.setattr(device, "Device", spy)
    assert train.main(["--task", "rf-anomaly", "--backend", "model", "--board", board,
                       "--epochs", "1"]) == 0
    cfg = boards.config(board)
    (options,) = made
    assert (options["rows"], options["cols"]) == (cfg["rows"], cfg["cols"])
    assert options["read_ports"] == cfg["read_ports"]
    assert options["write_ports"] == cfg["write_ports"]
    assert options["port"] == BOARD_PORTS[board]
