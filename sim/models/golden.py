"""Golden models: the specification of record for the int8 GEMM datapath.

Every hardware block in :mod:`rtl` is checked bit for bit against these functions.

``gemm(a, b, transpose_a=False, transpose_b=False)``
    ``op(a) @ op(b)`` for int8 operands, computed exactly and returned as int32. ``op(x)`` is
    ``x.T`` when the matching ``transpose_*`` flag is set. The reduction length ``K`` is limited
    to :data:`MAX_K` so that no partial sum can leave the int32 range: the largest product of
    two int8 values is ``(-128) * (-128) = 2**14`` and ``MAX_K * 2**14 <= 2**31 - 1``.

``rescale(acc, row_exp, col_exp)``
    For each element the float32 nearest to ``acc[m, n] * 2**(row_exp[m] + col_exp[n])``: a
    single rounding, ties to even, subnormals produced correctly, +-inf on overflow. Exactly
    ``np.float32(np.float64(acc) * np.exp2(row_exp[:, None] + col_exp[None, :]))``: the float64
    product is exact because an int32 times a power of two in ``[2**-256, 2**254]`` needs no
    rounding in float64.

:func:`rescale_bits` is the same function written with integer operations only, stage by stage
as :class:`rtl.rescale.Rescaler` computes it; it is tested against :func:`rescale`.
"""

from __future__ import annotations

import numpy as np

__all__ = ["MAX_K", "EXP_MIN", "EXP_MAX", "gemm", "gemm_shape", "gemm_scaled", "k_runs",
           "K_EXP_MIN", "K_EXP_MAX",
           "rescale", "rescale_bits", "float32_bits", "exponent_vector"]

#: Largest reduction length for which an int8 x int8 -> int32 dot product cannot overflow.
MAX_K = (2**31 - 1) // (128 * 128)  # 131071

#: Range of one block exponent (int8).
EXP_MIN, EXP_MAX = -128, 127


def _check_int8_matrix(name: str, x) -> np.ndarray:
    if not isinstance(x, np.ndarray):
        raise TypeError(f"{name} must be a numpy.ndarray of dtype int8, not {type(x).__name__}")
    if x.dtype != np.int8:
        raise TypeError(f"{name} must have dtype int8, not {x.dtype}")
    if x.ndim != 2:
        raise ValueError(f"{name} must be a 2-D matrix, not an array of shape {x.shape}")
    return x


def gemm(a: np.ndarray, b: np.ndarray, transpose_a: bool = False,
         transpose_b: bool = False) -> np.ndarray:
    """Exact int8 GEMM: ``op(a) @ op(b)`` as int32.

    Parameters
    ----------
    a : numpy.ndarray of int8
        M x K matrix, or K x M when ``transpose_a``.
    b : numpy.ndarray of int8
        K x N matrix, or N x K when ``transpose_b``.
    transpose_a, transpose_b : bool
        Use the transpose of the operand as stored.

    Returns
    -------
    numpy.ndarray of int32, shape (M, N)

    Raises
    ------
    TypeError
        An operand is not an int8 ndarray, or a flag is not a bool.
    ValueError
        An operand is not 2-D, the inner dimensions differ, a dimension is zero, or
        ``K > MAX_K``.
    """
    gemm_shape(a, b, transpose_a, transpose_b)
    return _exact_product(a.T if transpose_a else a, b.T if transpose_b else b).astype(np.int32)


#: The longest reduction a float32 product computes exactly: every partial sum of at most
#: 1024 products of int8 values (each at most 2**14 in magnitude) is an integer of at most
#: 2**24, which float32 represents exactly (with or without fused multiply-adds).
_F32_EXACT_K = 1024


def _exact_product(op_a: np.ndarray, op_b: np.ndarray) -> np.ndarray:
    """``op_a @ op_b`` of int8 matrices, exactly, as float64 (integer values).

    BLAS does it, in float32 over chunks of at most ``_F32_EXACT_K`` along the reduction (each
    chunk's product is exact whatever order BLAS sums in) whose results are summed in float64
    (exact: every partial sum of at most ``MAX_K`` products is below 2**31, far inside
    float64's 53-bit integers). numpy's int64 matmul is exact too, but has no BLAS and is
    ~100x slower."""
    k = op_a.shape[1]
    fa = op_a.astype(np.float32)
    fb = op_b.astype(np.float32)
    total = (fa[:, :_F32_EXACT_K] @ fb[:_F32_EXACT_K]).astype(np.float64)
    for start in range(_F32_EXACT_K, k, _F32_EXACT_K):
        stop = start + _F32_EXACT_K
        total += fa[:, start:stop] @ fb[start:stop]
    return total


def gemm_shape(a: np.ndarray, b: np.ndarray, transpose_a: bool = False,
               transpose_b: bool = False) -> tuple[int, int, int]:
    """``(M, N, K)`` of :func:`gemm`'s arguments, checked as :func:`gemm` checks them, without
    computing anything over the operands (what a driver needs before it hands the GEMM to
    the hardware)."""
    _check_int8_matrix("a", a)
    _check_int8_matrix("b", b)
    for name, flag in (("transpose_a", transpose_a), ("transpose_b", transpose_b)):
        if not isinstance(flag, (bool, np.bool_)):
            raise TypeError(f"{name} must be a bool, not {type(flag).__name__}")
    m, k = a.shape[::-1] if transpose_a else a.shape
    k_b, n = b.shape[::-1] if transpose_b else b.shape
    if k != k_b:
        raise ValueError(f"inner dimensions differ: op(a) is {m}x{k} but op(b) is {k_b}x{n}")
    if 0 in (m, n, k):
        raise ValueError(f"dimensions must be nonzero, got M={m}, N={n}, K={k}")
    if k > MAX_K:
        raise ValueError(f"K={k} exceeds MAX_K={MAX_K}: the int32 accumulator could overflow")
    return m, n, k


def exponent_vector(name: str, e, length: int, axis: str) -> np.ndarray:
    """``e`` (an int8 scalar or a length-``length`` int8 vector) as an int64 vector.

    Raises ``TypeError`` / ``ValueError`` naming ``name``; ``axis`` ("row" or "column") is
    used in the message.
    """
    if isinstance(e, (bool, np.bool_)):
        raise TypeError(f"{name} must be an int8 scalar or vector, not a bool")
    if isinstance(e, (int, np.integer)):
        if not EXP_MIN <= int(e) <= EXP_MAX:
            raise ValueError(f"{name}={int(e)} is outside the int8 range [{EXP_MIN}, {EXP_MAX}]")
        return np.full(length, int(e), dtype=np.int64)
    if not isinstance(e, np.ndarray):
        raise TypeError(f"{name} must be an int8 scalar or numpy vector, not {type(e).__name__}")
    if e.dtype != np.int8:
        raise TypeError(f"{name} must have dtype int8, not {e.dtype}")
    if e.ndim == 0:
        return np.full(length, int(e), dtype=np.int64)
    if e.shape != (length,):
        raise ValueError(f"{name} must be a scalar or have shape ({length},) (one per {axis}), "
                         f"not {e.shape}")
    return e.astype(np.int64)


def rescale(acc: np.ndarray, row_exp=0, col_exp=0) -> np.ndarray:
    """Fixed-to-float rescaling: ``float32(acc[m, n] * 2**(row_exp[m] + col_exp[n]))``.

    Parameters
    ----------
    acc : numpy.ndarray of int32, shape (M, N)
    row_exp : int or numpy.ndarray of int8
        Scalar, or one exponent per row (shape (M,)).
    col_exp : int or numpy.ndarray of int8
        Scalar, or one exponent per column (shape (N,)).

    Returns
    -------
    numpy.ndarray of float32, shape (M, N)
        Rounded once, to nearest with ties to even; subnormal and infinite results as IEEE 754.

    Raises
    ------
    TypeError
        ``acc`` is not an int32 ndarray, or an exponent is not int8.
    ValueError
        ``acc`` is not 2-D, or an exponent has the wrong length or is out of the int8 range.
    """
    if not isinstance(acc, np.ndarray):
        raise TypeError(f"acc must be a numpy.ndarray of dtype int32, not {type(acc).__name__}")
    if acc.dtype != np.int32:
        raise TypeError(f"acc must have dtype int32, not {acc.dtype}")
    if acc.ndim != 2:
        raise ValueError(f"acc must be a 2-D matrix, not an array of shape {acc.shape}")
    m, n = acc.shape
    re = exponent_vector("row_exp", row_exp, m, "row")
    ce = exponent_vector("col_exp", col_exp, n, "column")
    with np.errstate(over="ignore"):
        return np.float32(np.float64(acc) * np.exp2(re[:, None] + ce[None, :]))


#: Range of one entry of a ``k_exp`` vector (the sum of two int8 exponents).
K_EXP_MIN, K_EXP_MAX = 2 * EXP_MIN, 2 * EXP_MAX


def k_runs(k_exp: np.ndarray) -> list[tuple[int, int, int]]:
    """The maximal runs of equal values of ``k_exp``: ``[(start, stop, exponent), ...]``."""
    k_exp = np.asarray(k_exp)
    edges = np.flatnonzero(np.diff(k_exp)) + 1
    starts = np.concatenate(([0], edges))
    stops = np.concatenate((edges, [len(k_exp)]))
    return [(int(a), int(b), int(k_exp[a])) for a, b in zip(starts, stops, strict=True)]


def _k_exp_vector(k_exp, k: int) -> np.ndarray:
    if not isinstance(k_exp, np.ndarray) or k_exp.dtype.kind not in "iu":
        raise TypeError(f"k_exp must be an integer numpy vector, not "
                        f"{getattr(k_exp, 'dtype', type(k_exp).__name__)}")
    if k_exp.shape != (k,):
        raise ValueError(f"k_exp must have shape ({k},) (one per k), not {k_exp.shape}")
    if k_exp.size and (k_exp.min() < K_EXP_MIN or k_exp.max() > K_EXP_MAX):
        raise ValueError(f"k_exp must lie in [{K_EXP_MIN}, {K_EXP_MAX}]")
    return k_exp.astype(np.int64)


def gemm_scaled(a: np.ndarray, b: np.ndarray, transpose_a: bool = False,
                transpose_b: bool = False, row_exp=0, col_exp=0, k_exp=None) -> np.ndarray:
    """A block-floating-point GEMM whose blocks may also run along the reduction axis.

    ``sum_k op(a)[m, k] * op(b)[k, n] * 2**(row_exp[m] + col_exp[n] + k_exp[k])`` as float32,
    computed as the hardware and the runtime compute it: ``k_exp`` is cut into its maximal
    runs of equal values (:func:`k_runs`); each run's partial GEMM ``P_r`` is exact (int32);
    then, in run order, ``S = S + float64(P_r) * 2**(k_r + row_exp[m] + col_exp[n])`` in
    float64 from ``S = 0``, and the result is ``float32(S)`` (round to nearest even). Each term
    is exact in float64, so with one run (``k_exp`` constant or ``None``) this is
    :func:`rescale` of :func:`gemm` with the exponents added; with several runs the float64
    additions round (deterministically, in this order). This is Fox et al.'s weight-gradient
    loop (one GEMM per sample, accumulated on the host) with the accumulation in float64.

    ``k_exp``: ``None`` or an integer vector of length ``K`` with values in
    [:data:`K_EXP_MIN`, :data:`K_EXP_MAX`]; the other arguments as :func:`gemm` and
    :func:`rescale`.
    """
    m, n, k = gemm_shape(a, b, transpose_a, transpose_b)
    re = exponent_vector("row_exp", row_exp, m, "row")
    ce = exponent_vector("col_exp", col_exp, n, "column")
    runs = [(0, k, 0)] if k_exp is None else k_runs(_k_exp_vector(k_exp, k))
    op_a = a.T if transpose_a else a
    op_b = b.T if transpose_b else b
    # S = sum_r P_r * 2**(k_r + row_exp + col_exp) in run order equals
    # (sum_r P_r * 2**k_r) * 2**row_exp * 2**col_exp bit for bit: multiplying by a power of two
    # commutes with float64 rounding, and no float64 overflow or underflow is reachable from
    # these exponents (|P_r| < 2**31, |k_r + row_exp + col_exp| < 2**10). Starting from +0
    # keeps an exact zero +0, as the rescaler makes it.
    total = np.zeros((m, n), np.float64)
    for start, stop, e in runs:
        part = _exact_product(op_a[:, start:stop], op_b[start:stop])
        if e:
            part *= 2.0 ** e
        total += part
    total *= np.exp2(re.astype(np.float64))[:, None]
    total *= np.exp2(ce.astype(np.float64))[None, :]
    with np.errstate(over="ignore"):
        return total.astype(np.float32)


def float32_bits(x: np.ndarray) -> np.ndarray:
    """The IEEE 754 bit patterns of a float32 array, as uint32."""
    return np.asarray(x, dtype=np.float32).view(np.uint32)


def rescale_bits(acc: int, exp: int) -> int:
    """Bit pattern of ``float32(acc * 2**exp)`` computed with integers only.

    This is the algorithm :class:`rtl.rescale.Rescaler` implements, one comment per stage:

    1. sign and magnitude ``|acc|`` (33-bit, so -2**31 is representable);
    2. leading-zero count ``lz`` and trailing-zero count ``tz`` of the magnitude;
    3. normalise: ``mant = mag << lz`` (bit 31 set), unbiased exponent ``E = 31 - lz + exp``;
    4. right shift ``sh = max(8, -E - 118)`` (8 keeps 24 significant bits; more denormalises),
       guard bit ``mant[sh - 1]``, sticky ``tz + lz < sh - 1``;
    5. ``q = (mant >> sh) + round_up`` and ``bits = (E + 126 if normal else 0) << 23 + q``:
       adding the significand with its hidden bit into ``E + 126`` carries a mantissa that rounds
       up to ``2**24`` (or a subnormal that rounds up to ``2**23``) into the exponent for free;
    6. saturate to infinity when ``E > 127`` or the sum reaches ``0x7F800000``; OR in the sign.
    """
    acc = int(acc)
    exp = int(exp)
    if acc == 0:
        return 0
    sign = 1 if acc < 0 else 0
    mag = -acc if sign else acc
    lz = 32 - mag.bit_length()
    tz = (mag & -mag).bit_length() - 1
    mant = mag << lz
    e = 31 - lz + exp
    sh = max(8, -e - 118)
    if sh > 33:  # everything, guard bit included, is shifted out: rounds to zero
        return sign << 31
    guard = (mant >> (sh - 1)) & 1
    sticky = (tz + lz) < (sh - 1)
    q = mant >> sh
    q += guard & (sticky | (q & 1))
    base = (e + 126) << 23 if sh == 8 else 0
    bits = base + q
    if e > 127 or bits >= 0x7F800000:
        bits = 0x7F800000
    return (sign << 31) | bits
