import numpy as np
import pytest

from firmware import AcceleratorError, Device
from firmware.spec.regmap import ErrorCode
from sim.models import golden


@pytest.mark.parametrize("ta,tb", [(False, False), (True, False), (False, True), (True, True)])
def test_golden_backend_matches_the_golden_models(ta, tb):
    rng = np.random.default_rng(1)
    m, k, n = 5, 7, 3
    a = rng.integers(-128, 128, (k, m) if ta else (m, k)).astype(np.int8)
    b = rng.integers(-128, 128, (n, k) if tb else (k, n)).astype(np.int8)
    re = rng.integers(-128, 128, m).astype(np.int8)
    dev = Device("golden", rows=4, cols=4)
    c = dev.gemm(a, b, transpose_a=ta, transpose_b=tb, row_exp=re, col_exp=-3)
    want = golden.rescale(golden.gemm(a, b, ta, tb), re, -3)
    np.testing.assert_array_equal(c.view(np.uint32), want.view(np.uint32))
    raw = dev.gemm(a, b, transpose_a=ta, transpose_b=tb, out="int32")
    np.testing.assert_array_equal(raw, golden.gemm(a, b, ta, tb))
    assert dev.stats["macs"] == m * n * k


@pytest.mark.parametrize("kwargs,exc,name", [
    ({"backend": "fpga"}, ValueError, "backend"),
    ({"rows": 0}, ValueError, "rows"),
    ({"data_width": 100}, ValueError, "data_width"),
])
def test_bad_device_arguments(kwargs, exc, name):
    with pytest.raises(exc, match=name):
        Device(**kwargs)


def test_pynq_backend_off_the_board_says_what_it_needs():
    with pytest.raises(RuntimeError, match="'pynq' package"):
        Device("pynq")


def test_rtl_backend_rejects_shapes_the_hardware_does_not_have():
    with pytest.raises(ValueError, match="rows must be a power of two"):
        Device("rtl", rows=6, cols=8)


def test_bad_gemm_arguments():
    dev = Device()
    a = np.zeros((2, 3), np.int8)
    b = np.zeros((3, 4), np.int8)
    with pytest.raises(TypeError, match="b"):
        dev.gemm(a, b.astype(np.float32))
    with pytest.raises(ValueError, match="inner"):
        dev.gemm(a, b, transpose_a=True)
    with pytest.raises(TypeError, match="transpose_b"):
        dev.gemm(a, b, transpose_b="yes")
    with pytest.raises(ValueError, match="out"):
        dev.gemm(a, b, out="float16")
    with pytest.raises(ValueError, match="col_exp"):
        dev.gemm(a, b, col_exp=np.zeros(3, np.int8), out="int32")
    with pytest.raises(ValueError, match="MAX_K"):
        dev.gemm(np.zeros((1, 131072), np.int8), np.zeros((131072, 1), np.int8))
    with pytest.raises(ValueError, match="k_exp"):
        dev.gemm(a, b, k_exp=np.zeros(3, np.int16), out="int32")
    with pytest.raises(ValueError, match="k_exp"):
        dev.gemm(a, b, k_exp=np.zeros(4, np.int16))
    with pytest.raises(TypeError, match="k_exp"):
        dev.gemm(a, b, k_exp=np.zeros(3, np.float32))
    with pytest.raises(ValueError, match="block"):
        dev.gemm(a, b, block=0)
    with pytest.raises(TypeError, match="block"):
        dev.gemm(a, b, block=1.5)


def test_accelerator_error_names_the_code():
    err = AcceleratorError(int(ErrorCode.OUT_OF_WINDOW))
    assert err.code is ErrorCode.OUT_OF_WINDOW
    assert "OUT_OF_WINDOW" in str(err) and "window" in str(err)


def test_the_model_predicts_with_the_bursts_it_is_configured_with():
    """``Device("model")`` takes its bursts from the port (or ``burst_beats``) and predicts,
    and plans, with them: 2-beat bursts behind a 32-cycle read latency take longer."""
    from firmware.runtime.perfmodel import predict

    rng = np.random.default_rng(0)
    a = rng.integers(-128, 128, (8, 4096), dtype=np.int8)         # bound by its reads
    b = rng.integers(-128, 128, (4096, 8), dtype=np.int8)
    cycles = {}
    for name, options in (("16", {}), ("2", {"port": {"max_burst": 2}}),
                          ("2 asked", {"burst_beats": 2})):
        dev = Device("model", rows=8, cols=8, **options)
        np.testing.assert_array_equal(dev.gemm(a, b, out="int32"), golden.gemm(a, b))
        cycles[name] = dev.stats["cycles"]
        assert dev.dma_burst == int(name.split()[0]) == dev.driver.info.burst_beats
    assert cycles["2"] > 1.2 * cycles["16"] and cycles["2 asked"] > 1.2 * cycles["16"]
    config = dict(rows=8, cols=8, depth=512, block=1, data_width=128,
                  port=Device("model").memory_port())
    assert predict(8, 8, 4096, dma_burst=2, **config)["cycles"] > \
        1.2 * predict(8, 8, 4096, **config)["cycles"]
