"""The pynq backend's buffer pool on a board whose memory runs short: a full CMA (``pynq``'s
``RuntimeError("BO allocation failed: ...")``) makes the pool give back its idle buffers and
try again, a byte budget keeps it below a share of the CMA, and results come back as plain
ndarrays. The board is sim.native.pynq_sim's SimBoard with a small CMA."""

import numpy as np
import pytest

from firmware import Device
from firmware.ml.train import TrainConfig, run
from firmware.runtime import device, pynq_backend
from sim.native.pynq_sim import PAGE, SimBoard, write_bitstream_dir


@pytest.fixture
def overlay(monkeypatch, tmp_path):
    """A board build's directory; no real overlay directory or repository build is looked
    at, and /proc/meminfo is a file of the test's (no CmaTotal unless a test writes one)."""
    monkeypatch.setattr(pynq_backend, "OVERLAY_DIR", tmp_path / "no-overlays")
    monkeypatch.setattr(pynq_backend, "_REPO", tmp_path / "repo")
    monkeypatch.setattr(pynq_backend, "MEMINFO", tmp_path / "meminfo")
    monkeypatch.chdir(tmp_path)
    return write_bitstream_dir(tmp_path / "overlay", "pynq-z1")


def _board(monkeypatch, **options):
    b = SimBoard("pynq-z1", **options)
    b.install(monkeypatch)
    return b


def _i8(rng, *shape):
    return rng.integers(-128, 128, shape, dtype=np.int8)


def _train(bit):
    """Three int8 steps of rf-anomaly (batches of 32, 32 and 16) and its evaluation."""
    cfg = TrainConfig(task="rf-anomaly", precision="int8", epochs=1, batch=32,
                      train_subset=80, seed=3)
    return run(cfg, backend="pynq", rows=None, cols=None, quiet=True, board="pynq-z1",
               bitfile=str(bit))


def test_training_goes_on_when_the_cma_is_full(overlay, monkeypatch):
    """With a CMA smaller than the buffers the pool keeps, the board refuses allocations
    (as pynq does, with a RuntimeError); the pool gives back its idle buffers of every shape
    and training ends with the weights of a board with room to spare."""
    roomy = _board(monkeypatch)
    want = _train(overlay)
    assert roomy.refused == 0
    kept = roomy.cma_peak                       # every shape's buffers, none given back
    tight = _board(monkeypatch, cma=max(kept // 2 // PAGE, 1) * PAGE)
    got = _train(overlay)
    assert tight.refused > 0 and tight.cma_peak < kept
    assert got["weights_digest"] == want["weights_digest"]
    assert got["history"] == want["history"]


def test_when_giving_back_is_not_enough_the_error_says_what_was_asked(overlay, monkeypatch):
    _board(monkeypatch, cma=8 * PAGE)
    dev = Device("pynq", board="pynq-z1", bitfile=overlay)
    rng = np.random.default_rng(1)
    small = _i8(rng, 16, 64)
    dev.gemm(small, small.T.copy())              # leaves idle buffers in the pool
    assert dev.pool.idle_buffers > 0
    with pytest.raises(MemoryError) as e:
        dev.gemm(_i8(rng, 128, 512), _i8(rng, 512, 64))
    msg = str(e.value)
    assert "cannot allocate 65536 bytes of device memory" in msg
    assert "gave back all its" in msg and "in use" in msg and "BO allocation failed" in msg
    assert isinstance(e.value.__cause__, RuntimeError)
    # the device is still usable for what fits
    a, b = _i8(rng, 16, 64), _i8(rng, 64, 16)
    assert np.array_equal(dev.gemm(a, b, out="int32"), a.astype(np.int32) @ b)


def test_other_allocator_errors_are_not_taken_for_a_full_memory(overlay, monkeypatch):
    _board(monkeypatch)
    dev = Device("pynq", board="pynq-z1", bitfile=overlay)

    def broken(nbytes):
        raise RuntimeError("the board's driver is not loaded")
    monkeypatch.setattr(dev.driver.memory, "buffer", broken)
    with pytest.raises(RuntimeError, match="not loaded"):
        dev.tensor(np.ones((3, 5), np.int8))


def test_the_budget_keeps_the_pool_below_it(overlay, monkeypatch):
    """GEMMs of changing shapes: below the budget every shape's buffers are kept; past it
    the least recently used idle buffers go first, whatever their size."""
    board = _board(monkeypatch)
    budget = 64 << 10
    dev = Device("pynq", board="pynq-z1", bitfile=overlay, pool_budget=budget)
    assert dev.pool.budget == budget
    rng = np.random.default_rng(2)
    for m in (96, 80, 64, 48, 32, 16, 96):
        a, b = _i8(rng, m, 256), _i8(rng, 256, 32)
        assert np.array_equal(dev.gemm(a, b, out="int32"), a.astype(np.int32) @ b)
        assert dev.stats["pool_high_water"] <= budget
        assert dev.stats["pool_bytes"] <= budget and dev.stats["pool_budget"] == budget
    assert dev.profile.counts["pool_trims"] > 0
    assert dev.profile.counts["pool_high_water_bytes"] == dev.pool.high_water
    assert board.refused == 0
    dev.close()
    assert dev.pool.held == 0 and board.live == 0 and board.cma_used == 0


def test_the_default_budget_is_a_share_of_the_cma(overlay, monkeypatch, tmp_path):
    _board(monkeypatch)
    dev = Device("pynq", board="pynq-z1", bitfile=overlay)     # no CmaTotal: PYNQ's default
    t = dev.driver.target
    assert (t.cma_bytes, t.sources["cma_bytes"]) == (128 << 20, "PYNQ's kernel default")
    assert dev.pool.budget == int(device.POOL_SHARE * (128 << 20))
    (tmp_path / "meminfo").write_text("MemTotal:  510000 kB\nCmaTotal:  262144 kB\n"
                                      "CmaFree:   200000 kB\n")
    dev = Device("pynq", board="pynq-z1", bitfile=overlay)
    assert dev.driver.target.cma_bytes == 256 << 20
    assert dev.pool.budget == int(device.POOL_SHARE * (256 << 20))
    assert pynq_backend.cma_size(tmp_path / "nope") == (128 << 20, "PYNQ's kernel default")


@pytest.mark.parametrize("budget", [0, -1, 1.5, True, "1M"])
def test_a_bad_budget_is_refused(budget):
    with pytest.raises(ValueError, match="pool_budget"):
        Device("model", pool_budget=budget)


def test_the_golden_backend_has_no_budget():
    with pytest.raises(TypeError, match="pool_budget"):
        Device("golden", pool_budget=1 << 20)


def test_results_are_plain_ndarrays(overlay, monkeypatch):
    _board(monkeypatch)
    dev = Device("pynq", board="pynq-z1", bitfile=overlay)
    rng = np.random.default_rng(3)
    a, b = _i8(rng, 37, 70), _i8(rng, 70, 29)
    for out in ("int32", "float32"):
        c = dev.gemm(a, b, out=out)
        assert type(c) is np.ndarray
    t = dev.tensor(a)
    assert type(t.numpy()) is np.ndarray
    y = dev.gemm(a, b, as_tensor=True)
    assert type(y.numpy()) is np.ndarray
    c, d = dev.gemms([dict(a=a, b=b), dict(a=a, b=a, transpose_b=True, out="int32")])
    assert type(c) is np.ndarray and type(d) is np.ndarray


def test_the_simulated_cma_is_checked():
    for cma in (0, PAGE + 1, 16 << 20, 1.0):
        with pytest.raises(ValueError, match="cma must be"):
            SimBoard("pynq-z1", cma=cma)


def test_a_gemm_fits_a_cma_a_little_larger_than_its_buffers(overlay, monkeypatch):
    """A CMA about 1.2 times one GEMM's buffers, after a smaller GEMM left its idle buffers
    at the bottom: the call takes its largest buffer first, so the operands do not split the
    memory the idle buffers give back, and the product is exact."""
    rng = np.random.default_rng(4)
    small = _i8(rng, 64, 128), _i8(rng, 128, 64)
    big = _i8(rng, 128, 256), _i8(rng, 256, 128)
    roomy = _board(monkeypatch)
    Device("pynq", board="pynq-z1", bitfile=overlay).gemm(*big, out="int32")
    need = roomy.cma_peak                       # the large GEMM's buffers, alone
    board = _board(monkeypatch, cma=-(-need * 6 // 5 // PAGE) * PAGE)
    dev = Device("pynq", board="pynq-z1", bitfile=overlay)
    for a, b in (small, big, small, big):
        assert np.array_equal(dev.gemm(a, b, out="int32"), a.astype(np.int32) @ b)
    assert board.refused > 0 and dev.profile.counts["pool_trims"] > 0
    dev.close()
    assert board.live == 0 and board.cma_used == 0
