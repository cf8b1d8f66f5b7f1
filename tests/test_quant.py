"""firmware.ml.quant: block floating point quantiser."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from firmware.ml.quant import block_exponent, dequantize, quantize

floats = hnp.arrays(np.float32, hnp.array_shapes(min_dims=2, max_dims=2, max_side=12),
                    elements=st.floats(-1e6, 1e6, width=32))


def test_exponent_is_exact_just_below_powers_of_two():
    for p in range(-140, 128):
        below = np.nextafter(np.float32(2.0) ** p, np.float32(0))
        if below > 0:
            assert block_exponent(below) == p - 1
        assert block_exponent(np.float32(2.0) ** p) == p


@settings(max_examples=60, deadline=None)
@given(x=floats, axis=st.sampled_from([None, 0, 1]),
       rounding=st.sampled_from(["nearest", "stochastic"]), seed=st.integers(0, 99))
def test_round_trip_within_one_step_and_bounds(x, axis, rounding, seed):
    q, exp = quantize(x, axis=axis, rounding=rounding, rng=np.random.default_rng(seed))
    assert q.dtype == np.int8 and q.shape == x.shape
    assert exp.dtype == np.int8
    assert np.asarray(exp).shape == (() if axis is None else (x.shape[axis],))
    back = dequantize(q, exp, axis).astype(np.float64)
    step = np.exp2(np.asarray(exp, np.float64))
    if axis is not None:
        step = step.reshape([-1, 1] if axis == 0 else [1, -1])
    # one step of the block (the clamp at +127 costs at most one more step at the top)
    assert np.all(np.abs(back - x) <= 2 * step * (1 + 1e-12))
    if rounding == "nearest":                  # half a step, away from the clamp
        step = np.broadcast_to(step, x.shape)
        inside = np.abs(x / step) < 127
        assert np.all(np.abs(back - x)[inside] <= 0.5 * step[inside] * (1 + 1e-12))
    # the largest magnitude uses the top of the range: |q| in [64, 128]
    if np.any(x != 0) and axis is None and exp > -128:   # -128: the exponent floor
        assert 63 <= np.max(np.abs(q.astype(int))) <= 128


def test_all_zero_block_gives_zeros_not_nan():
    q, e = quantize(np.zeros((3, 4), np.float32), axis=0)
    assert np.all(q == 0) and np.all(e == 0)
    assert np.all(np.isfinite(dequantize(q, e, 0)))


def test_stochastic_rounding_is_unbiased():
    rng = np.random.default_rng(0)
    x = np.full((200_000,), 0.3 + 1 / 1024, np.float32).reshape(-1, 1)
    x[0] = 1.0                        # sets the block exponent: step 2**-6
    q, e = quantize(x, rounding="stochastic", rng=rng)
    mean = dequantize(q, e).astype(np.float64)[1:].mean()
    assert abs(mean - float(x[1, 0])) < 2e-4          # 1/64 step, 200k draws
    qn, en = quantize(x)                               # nearest is biased here
    assert abs(dequantize(qn, en)[1:].mean() - float(x[1, 0])) > 2e-3


def test_clamp_bounds_and_small_bits():
    x = np.array([[-1.0, 0.999, 0.5]], np.float32)
    q, e = quantize(x, bits=4)
    assert q.min() >= -8 and q.max() <= 7
    q, e = quantize(np.array([[-128.0, 127.9]], np.float32))
    assert q.min() >= -128 and q.max() <= 127


def test_seeded_stochastic_rounding_repeats():
    x = np.random.default_rng(1).normal(size=(5, 7)).astype(np.float32)
    a = quantize(x, rounding="stochastic", rng=np.random.default_rng(3))
    b = quantize(x, rounding="stochastic", rng=np.random.default_rng(3))
    assert np.array_equal(a[0], b[0]) and a[1] == b[1]


@pytest.mark.parametrize("kwargs,exc,name", [
    ({"x": [1.0]}, TypeError, "x"), ({"bits": 9}, ValueError, "bits"),
    ({"axis": 2}, ValueError, "axis"), ({"rounding": "up"}, ValueError, "rounding"),
    ({"rounding": "stochastic"}, TypeError, "rng"),
    ({"x": np.array([[np.inf]], np.float32)}, ValueError, "x")])
def test_bad_arguments(kwargs, exc, name):
    args = {"x": np.ones((2, 2), np.float32), **kwargs}
    x = args.pop("x")
    with pytest.raises(exc, match=name):
        quantize(x, **args)
