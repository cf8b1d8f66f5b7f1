"""The analytic performance model (sim.perfmodel) against the RTL's cycle counts."""

import numpy as np
import pytest

from firmware import Device
from sim import golden
from sim.perfmodel import predict, read_rate
from sim.ports import resolve_port

# The hardware configuration the accelerator tests already build (no extra compile).
CONFIG = {"rows": 8, "cols": 8, "data_width": 128, "depth": 512, "block": 4}
# Ports without random pauses (the model has none): ideal and a board-like one.
PORTS = {"ideal": "ideal",
         "hp": {"outstanding_reads": 8, "outstanding_writes": 8, "read_latency": 40,
                "write_latency": 20, "max_burst": 16, "pause": 0.0}}
# Shapes and forms not used to calibrate the model's constants.
GEMMS = [(96, 80, 200, False, False), (72, 64, 300, True, False), (64, 88, 160, False, True),
         (80, 72, 256, True, True), (200, 64, 64, True, False), (200, 32, 64, True, False),
         # A known gap: a one-tile-wide edge block after a full one, with short k-major
         # reads, is predicted up to 12 % slow (README, "The performance model").
         pytest.param(200, 40, 64, True, False, marks=pytest.mark.xfail(
             reason="model over-predicts a narrow k-major edge block", strict=False))]


@pytest.fixture(scope="module", params=sorted(PORTS))
def device(request):
    return request.param, Device("rtl", port=PORTS[request.param], seed=3, **{
        k: v for k, v in CONFIG.items()})


@pytest.mark.parametrize("m,n,k,ta,tb", GEMMS)
def test_prediction_within_5_percent(device, m, n, k, ta, tb):
    name, dev = device
    rng = np.random.default_rng(m * n + k)
    a = rng.integers(-128, 128, (k, m) if ta else (m, k), dtype=np.int8)
    b = rng.integers(-128, 128, (n, k) if tb else (k, n), dtype=np.int8)
    got = dev.gemm(a, b, transpose_a=ta, transpose_b=tb, out="int32")
    np.testing.assert_array_equal(got, golden.gemm(a, b, ta, tb))
    want = predict(m, n, k, ta, tb, port=resolve_port(PORTS[name]), **CONFIG)["cycles"]
    measured = dev.stats["cycles"]
    assert abs(want / measured - 1) <= 0.05, (name, measured, want)


def test_read_rate():
    assert read_rate(16, 8, 40) == 1.0
    assert read_rate(1, 8, 40) == pytest.approx(8 / 41)


def test_bad_ports_argument():
    with pytest.raises(ValueError, match="ports"):
        predict(8, 8, 8, rows=8, cols=8, depth=512, block=4, data_width=128,
                port=resolve_port("ideal"), ports=3)


def test_pauses_slow_the_data_channels():
    """A port that holds its channels back 10 % of cycles: a write-bound GEMM (K = 8, C rows
    dominate) takes about 1 / 0.9 as long; a missing ``pause`` means none."""
    port = dict(resolve_port("ideal"))
    base = predict(256, 256, 8, port=port, **CONFIG)["cycles"]
    del port["pause"]
    assert predict(256, 256, 8, port=port, **CONFIG)["cycles"] == base
    port["pause"] = 0.1
    slow = predict(256, 256, 8, port=port, **CONFIG)["cycles"]
    assert base / 0.9 * 0.95 < slow <= base / 0.9 * 1.001
