import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from sim.models.golden import MAX_K, float32_bits, gemm, gemm_scaled, k_runs, rescale, rescale_bits

int8_matrices = hnp.arrays(np.int8, hnp.array_shapes(min_dims=2, max_dims=2, max_side=12))


@settings(max_examples=100, deadline=None)
@given(data=st.data(), ta=st.booleans(), tb=st.booleans())
def test_gemm_is_exact(data, ta, tb):
    m, k, n = (data.draw(st.integers(1, 9)) for _ in range(3))
    a = data.draw(hnp.arrays(np.int8, (k, m) if ta else (m, k)))
    b = data.draw(hnp.arrays(np.int8, (n, k) if tb else (k, n)))
    got = gemm(a, b, transpose_a=ta, transpose_b=tb)
    assert got.dtype == np.int32 and got.shape == (m, n)
    oa = a.T if ta else a
    ob = b.T if tb else b
    for i in range(m):
        for j in range(n):
            assert got[i, j] == sum(int(oa[i, x]) * int(ob[x, j]) for x in range(k))


def test_gemm_largest_k_does_not_overflow():
    assert MAX_K == 131071
    a = np.full((1, MAX_K), -128, np.int8)
    b = np.full((MAX_K, 1), -128, np.int8)
    assert gemm(a, b)[0, 0] == MAX_K * 16384 == 2**31 - 2**14
    with pytest.raises(ValueError, match="MAX_K"):
        gemm(np.zeros((1, MAX_K + 1), np.int8), np.zeros((MAX_K + 1, 1), np.int8))


@pytest.mark.parametrize("a,b,kwargs,exc,name", [
    (np.zeros((2, 3), np.int16), np.zeros((3, 2), np.int8), {}, TypeError, "a"),
    (np.zeros((2, 3), np.int8), [[1]], {}, TypeError, "b"),
    (np.zeros(3, np.int8), np.zeros((3, 2), np.int8), {}, ValueError, "a"),
    (np.zeros((2, 3), np.int8), np.zeros((4, 2), np.int8), {}, ValueError, "inner"),
    (np.zeros((2, 0), np.int8), np.zeros((0, 2), np.int8), {}, ValueError, "nonzero"),
    (np.zeros((2, 3), np.int8), np.zeros((3, 2), np.int8), {"transpose_a": 1}, TypeError,
     "transpose_a"),
])
def test_gemm_bad_arguments(a, b, kwargs, exc, name):
    with pytest.raises(exc, match=name):
        gemm(a, b, **kwargs)


def reference(acc, re, ce):
    re = np.broadcast_to(np.asarray(re, np.int64), (acc.shape[0],))
    ce = np.broadcast_to(np.asarray(ce, np.int64), (acc.shape[1],))
    out = np.empty(acc.shape, np.uint32)
    for i in range(acc.shape[0]):
        for j in range(acc.shape[1]):
            out[i, j] = rescale_bits(int(acc[i, j]), int(re[i] + ce[j]))
    return out


@settings(max_examples=100, deadline=None)
@given(acc=hnp.arrays(np.int32, (3, 4)),
       re=hnp.arrays(np.int8, (3,)), ce=hnp.arrays(np.int8, (4,)))
def test_rescale_matches_integer_algorithm(acc, re, ce):
    np.testing.assert_array_equal(float32_bits(rescale(acc, re, ce)), reference(acc, re, ce))


def test_rescale_edges():
    acc = np.array([[0, 1, -1, 2**31 - 1, -2**31, 2**24 + 1, 2**24 + 3, -(2**24 + 1)]],
                   np.int32)
    for e in (-128 - 128, -150, -149, -127, -126, 0, 100, 127, 127 + 127):
        got = rescale(acc, e // 2, e - e // 2)
        assert got.dtype == np.float32
        np.testing.assert_array_equal(float32_bits(got), reference(acc, e // 2, e - e // 2))
    # ties to even, subnormal, flush, overflow
    assert rescale(np.array([[2**24 + 1]], np.int32))[0, 0] == np.float32(2**24)
    assert rescale(np.array([[1]], np.int32), -100, -49)[0, 0] == np.float32(2.0**-149)
    assert rescale(np.array([[1]], np.int32), -100, -50)[0, 0] == 0.0     # tie -> even (0)
    assert rescale(np.array([[3]], np.int32), -100, -51)[0, 0] == np.float32(2.0**-149)
    assert np.isinf(rescale(np.array([[-1]], np.int32), 127, 1)[0, 0])
    assert np.signbit(rescale(np.array([[-1]], np.int32), -128, -128)[0, 0])


def test_rescale_scalar_and_vector_exponents():
    acc = np.arange(6, dtype=np.int32).reshape(2, 3)
    np.testing.assert_array_equal(rescale(acc, 1, np.int8(2)), acc * 8.0)
    np.testing.assert_array_equal(rescale(acc, np.array([0, 1], np.int8), 0),
                                  acc * np.array([[1.0], [2.0]]))
    np.testing.assert_array_equal(rescale(acc, 0, np.array([0, 1, 2], np.int8)),
                                  acc * np.array([1.0, 2.0, 4.0]))


@pytest.mark.parametrize("args,exc,name", [
    ((np.zeros((2, 2), np.int64),), TypeError, "acc"),
    ((np.zeros(2, np.int32),), ValueError, "acc"),
    ((np.zeros((2, 2), np.int32), 128), ValueError, "row_exp"),
    ((np.zeros((2, 2), np.int32), 0, -129), ValueError, "col_exp"),
    ((np.zeros((2, 2), np.int32), np.zeros(3, np.int8)), ValueError, "row_exp"),
    ((np.zeros((2, 2), np.int32), 0, np.zeros(2, np.int16)), TypeError, "col_exp"),
    ((np.zeros((2, 2), np.int32), 1.5), TypeError, "row_exp"),
    ((np.zeros((2, 2), np.int32), True), TypeError, "row_exp"),
])
def test_rescale_bad_arguments(args, exc, name):
    with pytest.raises(exc, match=name):
        rescale(*args)


def _gemm_scaled_reference(a, b, re, ce, k_exp):
    """The specification of gemm_scaled, term by term: exact int64 partial products per run
    of equal k exponents, each scaled and added in run order in float64 from +0."""
    total = np.zeros((a.shape[0], b.shape[1]))
    for start, stop, e in k_runs(k_exp):
        part = (a[:, start:stop].astype(np.int64) @ b[start:stop].astype(np.int64))
        total = total + part.astype(np.float64) * np.exp2(re[:, None] + ce[None, :] + e)
    with np.errstate(over="ignore"):
        return total.astype(np.float32)


@pytest.mark.parametrize("k, run", [(7, 1), (4 * 196, 196), (3 * 800, 800), (2600, 2600),
                                    (96, 3), (1, 1)])
def test_gemm_scaled_matches_its_specification(k, run):
    """Per-sample runs (batched products), short runs, runs longer than a float32-exact
    chunk, merged neighbouring runs and the extreme exponents, bit for bit; an exact zero is
    +0 (as the rescaler makes it), not a -0 from BLAS."""
    rng = np.random.default_rng(k + run)
    m, n = 5, 6
    a = rng.integers(-128, 128, (m, k)).astype(np.int8)
    b = rng.integers(-128, 128, (k, n)).astype(np.int8)
    a[0] = 0                                  # a zero row: 0 * negative b is -0 in BLAS
    b[:, 0] = -1
    re = rng.integers(-128, 128, m).astype(np.int8)
    ce = rng.integers(-128, 128, n).astype(np.int8)
    re[1], ce[1] = 127, 127                   # overflows float32: inf
    re[2], ce[2] = -128, -128                 # subnormal or zero in float32
    k_exp = np.repeat(rng.integers(-256, 255, -(-k // run)), run)[:k]
    if k >= 3 * run:
        k_exp[run:2 * run] = k_exp[0]         # neighbouring runs with one exponent merge
    got = gemm_scaled(a, b, row_exp=re, col_exp=ce, k_exp=k_exp)
    want = _gemm_scaled_reference(a, b, re.astype(np.int64), ce.astype(np.int64), k_exp)
    assert np.array_equal(float32_bits(got), float32_bits(want))
    assert (float32_bits(got)[0] == 0).all()
    for ta, tb in ((True, False), (False, True), (True, True)):
        got_t = gemm_scaled(np.ascontiguousarray(a.T) if ta else a,
                            np.ascontiguousarray(b.T) if tb else b, ta, tb,
                            row_exp=re, col_exp=ce, k_exp=k_exp)
        assert np.array_equal(float32_bits(got_t), float32_bits(want))
