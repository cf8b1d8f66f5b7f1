"""The write-back epilogue and tile exponents at the register level, on the functional model.

Descriptors with ``DESC_EPILOGUE`` options go through :class:`firmware.runtime.driver.Driver`
to :class:`sim.models.functional.FunctionalAccelerator` (``Device("model")``), whose results
must be those of the golden model of record, :mod:`sim.models.bfp`, bit for bit; a build
without the epilogue (the RTL's ``CONFIG_FEATURES``) refuses them with ``UNSUPPORTED``.
"""

import numpy as np
import pytest

from firmware import Device
from firmware.runtime.driver import AcceleratorError
from firmware.spec.regmap import TILE_BLOCK, ErrorCode
from sim.models import bfp, golden

T = TILE_BLOCK


class Mem:
    """Bump allocation in the functional model's memory, every region on a 64-byte line."""

    def __init__(self, dev):
        self.sim, self.at = dev.sim, 0x1000

    def put(self, x: np.ndarray) -> int:
        addr = self.at
        raw = np.ascontiguousarray(x).view(np.uint8).reshape(-1)
        self.sim.memory[addr:addr + raw.size] = raw
        self.at = -(-(addr + max(raw.size, 1)) // 64) * 64
        return addr

    def rows(self, x: np.ndarray, stride: int) -> int:
        """``x`` with its rows ``stride`` bytes apart."""
        raw = np.ascontiguousarray(x).view(np.uint8)
        padded = np.zeros((raw.shape[0], stride), np.uint8)
        padded[:, :raw.shape[1]] = raw
        return self.put(padded)

    def alloc(self, nbytes: int) -> int:
        return self.put(np.zeros(nbytes, np.uint8))

    def get(self, addr: int, shape, dtype) -> np.ndarray:
        n = int(np.prod(shape)) * np.dtype(dtype).itemsize
        return self.sim.memory[addr:addr + n].copy().view(dtype).reshape(shape)


def _run(dev, desc):
    dev.driver.set_window(0, dev.sim.size)
    dev.driver.run(desc)


@pytest.fixture
def dev():
    return Device("model", rows=8, cols=8)


def _quantized(rng, shape, scale=1.0, seed=0):
    """A random matrix in tile blocks whose tiles' scales differ by up to 2**+-5 (so that
    reading an exponent grid wrongly, or the wrong way round, changes the result)."""
    grid = bfp.tile_grid(shape, block=T)
    spread = np.exp2(rng.integers(-5, 6, grid)).repeat(T, 0).repeat(T, 1)[:shape[0], :shape[1]]
    x = (rng.standard_normal(shape) * scale * spread).astype(np.float32)
    q, exp = bfp.quantize_tiles(x, rounding="stochastic", seed=seed)
    assert len(np.unique(exp)) > 1 or exp.size == 1
    return q, exp


@pytest.mark.parametrize("rounding", ["nearest", "stochastic"])
def test_a_linear_layer_forward_stays_in_bfp8(dev, rounding):
    """``Y = X W^T + b``, ReLU, quantised: X and W in tile blocks (so their exponents change
    along K), the bias per column, the mask and Y's tiles written back — bit for bit
    :func:`sim.models.bfp.gemm_kblocks` then :func:`sim.models.bfp.epilogue`."""
    rng = np.random.default_rng(1)
    batch, fan_in, fan_out = 45, 100, 70          # partial tiles on every side
    qx, ex = _quantized(rng, (batch, fan_in), 3.0, seed=1)
    qw, ew = _quantized(rng, (fan_out, fan_in), 0.1, seed=2)
    bias = (rng.standard_normal(fan_out) * 0.5).astype(np.float32)
    mem = Mem(dev)
    mask_stride = 64
    desc = dict(m=batch, n=fan_out, k=fan_in, flags={"TRANSPOSE_B": 1},
                a_addr=mem.rows(qx, 112), a_stride=112, b_addr=mem.rows(qw, 112), b_stride=112,
                row_exp_addr=mem.put(ex), col_exp_addr=mem.put(ew),
                c_addr=mem.alloc(batch * 128), c_stride=128,
                c_exp_addr=mem.alloc(ex.shape[0] * 3), bias_addr=mem.put(bias),
                mask_addr=mem.alloc(batch * mask_stride), mask_stride=mask_stride,
                seed=0x1234_5678_9ABC_DEF0,
                epilogue={"BFP8": 1, "STOCHASTIC": int(rounding == "stochastic"), "BIAS": 2,
                          "RELU": 1, "A_TILES": 1, "B_TILES": 1})
    _run(dev, desc)
    c = bfp.gemm_kblocks(qx, ex, qw, ew, transpose_b=True)
    want = bfp.epilogue(c, bias=bias, bias_axis="col", relu=True, out="bfp8",
                        rounding=rounding, seed=desc["seed"])
    q = mem.get(desc["c_addr"], (batch, 128), np.int8)[:, :fan_out]
    np.testing.assert_array_equal(q, want.q)
    np.testing.assert_array_equal(
        mem.get(desc["c_exp_addr"], want.exp.shape, np.int8), want.exp)
    bits = mem.get(desc["mask_addr"], (batch, mask_stride), np.uint8)
    np.testing.assert_array_equal(bfp.unpack_mask(bits[:, :-(-fan_out // 8)], fan_out),
                                  want.mask)
    assert want.mask.any() and not want.mask.all()
    # memory beyond the rows is untouched
    assert not mem.get(desc["c_addr"], (batch, 128), np.int8)[:, fan_out:].any()


def test_the_backward_pass_through_the_mask_and_the_weight_gradient(dev):
    """``dX = (dY * mask) W`` quantised, with dY and W as stored (W read as stored, its
    tiles along K); and ``dW = dY^T X`` in float32 with both read transposed."""
    rng = np.random.default_rng(2)
    batch, fan_in, fan_out = 40, 66, 35
    qd, ed = _quantized(rng, (batch, fan_out), 1e-3, seed=3)
    qw, ew = _quantized(rng, (fan_out, fan_in), 0.1, seed=4)
    qx, ex = _quantized(rng, (batch, fan_in), 2.0, seed=5)
    mask = rng.random((batch, fan_in)) < 0.6
    mem = Mem(dev)
    dx = dict(m=batch, n=fan_in, k=fan_out, a_addr=mem.rows(qd, 48), a_stride=48,
              b_addr=mem.rows(qw, 80), b_stride=80, row_exp_addr=mem.put(ed),
              col_exp_addr=mem.put(ew), c_addr=mem.alloc(batch * 128), c_stride=128,
              c_exp_addr=mem.alloc(16), mask_addr=mem.put(bfp.pack_mask(mask)),
              mask_stride=-(-fan_in // 8), seed=7,
              epilogue={"BFP8": 1, "STOCHASTIC": 1, "MASK_IN": 1, "A_TILES": 1, "B_TILES": 1})
    # the mask's rows are 9 bytes apart: not a multiple of the bus word
    with pytest.raises(AcceleratorError) as err:
        _run(dev, dx)
    assert err.value.code is ErrorCode.MISALIGNED
    dev.driver.soft_reset()
    dx.update(mask_addr=mem.put(np.pad(bfp.pack_mask(mask), ((0, 0), (0, 7)))),
              mask_stride=16)
    _run(dev, dx)
    want = bfp.epilogue(bfp.gemm_kblocks(qd, ed, qw, ew), mask_in=mask, out="bfp8",
                        rounding="stochastic", seed=7)
    np.testing.assert_array_equal(mem.get(dx["c_addr"], (batch, 128), np.int8)[:, :fan_in],
                                  want.q)
    np.testing.assert_array_equal(mem.get(dx["c_exp_addr"], want.exp.shape, np.int8),
                                  want.exp)
    dw = dict(m=fan_out, n=fan_in, k=batch, flags={"TRANSPOSE_A": 1},
              a_addr=mem.rows(qd, 48), a_stride=48, b_addr=mem.rows(qx, 80), b_stride=80,
              row_exp_addr=mem.put(ed), col_exp_addr=mem.put(ex),
              c_addr=mem.alloc(fan_out * 4 * 80), c_stride=4 * 80,
              epilogue={"A_TILES": 1, "B_TILES": 1})
    _run(dev, dw)
    got = mem.get(dw["c_addr"], (fan_out, 80), np.float32)[:, :fan_in]
    want = bfp.gemm_kblocks(qd, ed, qx, ex, transpose_a=True)
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))


def test_mixed_exponents_and_quantise_only(dev):
    """A in tile blocks against B with one exponent per column (constant along K): the same
    as :func:`sim.models.bfp.gemm_kruns`; and a quantise-only descriptor (the input batch)
    is :func:`sim.models.bfp.quantize_tiles` of the float32 matrix it reads."""
    rng = np.random.default_rng(3)
    m, n, k = 20, 24, 90
    qa, ea = _quantized(rng, (m, k), seed=6)
    b = rng.integers(-127, 128, (k, n), dtype=np.int8)
    col_exp = rng.integers(-10, 3, n, dtype=np.int8)
    mem = Mem(dev)
    desc = dict(m=m, n=n, k=k, flags={"COL_EXP_VECTOR": 1}, a_addr=mem.rows(qa, 96),
                a_stride=96, b_addr=mem.rows(b, 32), b_stride=32, row_exp_addr=mem.put(ea),
                col_exp_addr=mem.put(col_exp), c_addr=mem.alloc(m * 128), c_stride=128,
                epilogue={"A_TILES": 1})
    _run(dev, desc)
    stops = [32, 64, 90]
    want = bfp.gemm_kruns(qa, np.repeat(ea, T, axis=0)[:m].copy(), b,
                          np.repeat(col_exp[None, :], 3, axis=0), stops)
    got = mem.get(desc["c_addr"], (m, 32), np.float32)[:, :n]
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))
    # with one run the tile path is the plain rescaled GEMM
    np.testing.assert_array_equal(
        bfp.gemm_kruns(qa, np.zeros((m, 1), np.int8), b, col_exp[None, :].copy(), [k]),
        golden.rescale(golden.gemm(qa, b), 0, col_exp))

    x = (rng.standard_normal((37, 50)) * 100).astype(np.float32)
    xa = np.zeros((37, 64), np.float32)
    xa[:, :50] = x
    q = dict(m=37, n=50, k=1, a_addr=mem.put(xa), a_stride=256, c_addr=mem.alloc(37 * 64),
             c_stride=64, c_exp_addr=mem.alloc(16), seed=99,
             epilogue={"QUANTIZE_ONLY": 1, "BFP8": 1, "STOCHASTIC": 1})
    _run(dev, q)
    wq, we = bfp.quantize_tiles(x, rounding="stochastic", seed=99)
    np.testing.assert_array_equal(mem.get(q["c_addr"], (37, 64), np.int8)[:, :50], wq)
    np.testing.assert_array_equal(mem.get(q["c_exp_addr"], we.shape, np.int8), we)
    assert dev.driver.counters()["macs"] == 0      # quantise-only (run alone): no MACs


def test_what_a_build_does_not_offer_is_refused(dev):
    """``UNSUPPORTED`` for an epilogue on a build without one (``CONFIG_FEATURES``), with
    ``RAW``, or a bias mode that does not exist; ``NONFINITE`` for an inf to quantise."""
    assert dev.driver.info.epilogue and dev.driver.info.tile_block == T
    plain = Device("model", rows=8, cols=8, epilogue=False)
    assert not plain.driver.info.epilogue and not plain.driver.info.k_blocks
    rng = np.random.default_rng(4)
    x = np.zeros((8, 16), np.float32)
    x[3, 5] = np.inf
    for d, epilogue, flags, code in (
            (plain, {"QUANTIZE_ONLY": 1, "BFP8": 1}, {}, ErrorCode.UNSUPPORTED),
            (dev, {"BFP8": 1}, {"RAW": 1}, ErrorCode.UNSUPPORTED),
            (dev, {"BIAS": 3}, {}, ErrorCode.UNSUPPORTED),
            (dev, {"QUANTIZE_ONLY": 1, "BFP8": 1}, {}, ErrorCode.NONFINITE)):
        mem = Mem(d)
        a = mem.put(x)
        desc = dict(m=8, n=16, k=1 if epilogue.get("QUANTIZE_ONLY") else 16, flags=flags,
                    a_addr=a, a_stride=64, b_addr=a, b_stride=64, c_addr=mem.alloc(1024),
                    c_stride=64, c_exp_addr=mem.alloc(64), bias_addr=mem.alloc(64),
                    epilogue=epilogue)
        with pytest.raises(AcceleratorError) as err:
            _run(d, desc)
        assert err.value.code is code, (epilogue, flags)
        d.driver.soft_reset()
    # and a plain descriptor after them still runs
    a = rng.integers(-128, 128, (8, 16), dtype=np.int8)
    np.testing.assert_array_equal(plain.gemm(a, a.T.copy(), out="int32"), golden.gemm(a, a.T))


@pytest.mark.parametrize("m,n,k,out", [(30, 20, 40, "bfp8"), (1, 20, 40, "float32"),
                                       (70, 33, 5, "bfp8"), (5, 7, 64, "float32")])
def test_sgd_update_matches_golden(m, n, k, out):
    """Device.sgd_update (DESC_EPILOGUE.SGD) on the functional accelerator: the weights
    stepped in place, bit for bit the golden backend and sim.models.bfp.sgd_step on the
    dequantised weights, then quantised with the seeded rounding (BFP8) or kept (float32)."""
    rng = np.random.default_rng(m + n + k)
    x = rng.standard_normal((k, m)).astype(np.float32)
    d = rng.standard_normal((k, n)).astype(np.float32)
    w0 = rng.standard_normal((m, n)).astype(np.float32)
    got = []
    for dev in (Device("golden"), Device("model", rows=8, cols=8)):
        w = dev.quantize(w0) if out == "bfp8" else dev.tensor(w0)
        dev.sgd_update(dev.quantize(x), dev.quantize(d), w, lr=0.3, weight_decay=0.01,
                       transpose_a=True, rounding="stochastic", seed=77)
        got.append((w.mantissas(), w.exponents()) if out == "bfp8" else (w.numpy(),))
    qx, ex = bfp.quantize_tiles(x)
    qd, ed = bfp.quantize_tiles(d)
    g = bfp.gemm_kblocks(qx, ex, qd, ed, transpose_a=True)
    if out == "bfp8":
        qw, ew = bfp.quantize_tiles(w0)
        want = bfp.quantize_tiles(bfp.sgd_step(bfp.dequantize_tiles(qw, ew), g, 0.3, 0.01),
                                  rounding="stochastic", seed=77)
    else:
        want = (bfp.sgd_step(w0, g, 0.3, 0.01),)
    for arrays in got:
        for a, b in zip(arrays, want, strict=True):
            np.testing.assert_array_equal(a.view(np.uint8), b.view(np.uint8))


def test_sgd_step_rounds_each_operation_in_float32():
    w = np.array([1.0, -2.5, 3e38, 1e-45, np.inf], np.float32)
    g = np.array([0.1, 0.2, -3e38, 0.0, np.inf], np.float32)
    got = bfp.sgd_step(w, g, 0.1, 0.5)
    decay = np.float32(1) - np.float32(0.1) * np.float32(0.5)
    assert bfp.sgd_decay(0.1, 0.5) == decay and bfp.sgd_decay(0.1) == 1.0
    with np.errstate(over="ignore", invalid="ignore"):
        want = decay * w + np.float32(-0.1) * g
    np.testing.assert_array_equal(got[:4].view(np.uint32), want[:4].view(np.uint32))
    assert got[4].view(np.uint32) == bfp.CANONICAL_NAN      # inf - inf
    # DESC_DECAY as the register holds it, in place of the weight decay
    np.testing.assert_array_equal(bfp.sgd_step(w, g, 0.1, decay=decay).view(np.uint32),
                                  got.view(np.uint32))
    with pytest.raises(ValueError, match="w is"):
        bfp.sgd_step(w, g[:2], 0.1)
    with pytest.raises(TypeError, match="lr must be a number"):
        bfp.sgd_step(w, g, "0.1")
