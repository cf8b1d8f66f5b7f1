"""BFP8 tile blocks (``bfp8-t32``): the number format of the on-chip training step, and the
write-back epilogue that produces it. The golden model of record: the RTL and every backend
are checked bit for bit against these functions.

The format
    A float32 matrix ``X`` (M x N) is cut into square blocks of ``T x T`` elements aligned at
    (0, 0), edge blocks partial (``block=T``, a power of two from 4 to 64; the hardware uses
    32). Each block stores int8 mantissas ``q`` in [-127, 127] and one int8 exponent ``exp``:
    ``x ~ q * 2**exp``. Mantissas are the int8 matrix (row-major); exponents a separate int8
    matrix of shape ``(ceil(M/T), ceil(N/T))``. Read transposed, the exponent grid transposes
    with its matrix, so one quantised copy serves ``X`` and ``X.T``.

The block exponent
    ``e = floor(log2(max|x|))`` over the block, exact (from the IEEE exponent, as
    :func:`numpy.frexp` gives it; subnormals included), and ``exp = max(e - 6, -128)``. An
    all-zero block has ``exp = 0``. Inf or NaN in the input is an error.

One element (the integer form, bit-exact in every implementation)::

    Y = floor(v * 2**(16 - exp))            # an exact integer, |Y| <= 2**23
    q = clamp((Y + r) >> 16, -127, 127)     # >> the arithmetic (floor) shift
    r = 2**15                               # rounding="nearest" (round half up)
    r = random_bits(seed, m, n)             # rounding="stochastic": 16 bits, 0..65535

that is ``q = clamp(floor(v * 2**-exp + r / 2**16), -127, 127)``. ``random_bits`` is
:func:`sim.models.prng.random_bits` (Threefry-2x32-20, counter-based): the bits of element
``(m, n)`` depend only on the seed and the element's coordinates in the matrix as stored.

The epilogue (:func:`epilogue`), per element of a GEMM's float32 result, in this order: plus
a bias per row or per column (an IEEE binary32 add), ReLU (recording its 1-bit mask),
multiplication by a stored mask (``mask_in``, the backward pass of ReLU), then float32 out or
quantisation to tile blocks.

Exponents along K (:func:`gemm_kblocks`, :func:`gemm_kruns`): each K block's exact int32
partial is rescaled once to float32 (:func:`sim.models.golden.rescale`) and the partials are
summed in float32, in K order, from +0.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sim.models.fp32 import fp32_mul
from sim.models.golden import EXP_MAX, EXP_MIN, gemm, gemm_shape, rescale
from sim.models.prng import random_matrix

__all__ = ["FORMAT_NAME", "BLOCKS", "ROUNDING", "FRACTION_BITS", "MX_BLOCK", "MX_SCALE_BIAS",
           "quantize_tiles", "dequantize_tiles", "tile_exponents", "tile_grid", "ones_row",
           "gemm_kblocks", "gemm_kruns", "Epilogue", "epilogue", "add_float32", "BIAS_AXES",
           "OUTPUTS", "CANONICAL_NAN", "pack_mask", "unpack_mask", "to_mxint8", "from_mxint8",
           "sgd_decay", "sgd_step"]

#: The format's name.
FORMAT_NAME = "bfp8-t32"

#: Block sizes the golden model accepts (the hardware uses 32).
BLOCKS = (4, 8, 16, 32, 64)

#: Rounding modes of the quantiser.
ROUNDING = ("nearest", "stochastic")

#: Fraction bits below the mantissa's LSB that the quantiser keeps before rounding (and the
#: width of the random number ``r``).
FRACTION_BITS = 16

#: Mantissa bits below the exponent of the block's largest element: ``exp = e - 6``.
_MANT_SHIFT = 6

#: Largest mantissa magnitude (symmetric clamp: quantising again changes nothing).
_QMAX = 127

#: Elements per OCP MXINT8 block.
MX_BLOCK = 32

#: ``E8M0 = exp + MX_SCALE_BIAS``: the E8M0 bias (127) plus the 6 fraction bits MXINT8 gives its
#: int8 elements.
MX_SCALE_BIAS = 127 + _MANT_SHIFT

#: Where a bias runs: ``"row"`` adds ``bias[m]`` to row ``m``, ``"col"`` ``bias[n]`` to column n.
BIAS_AXES = ("row", "col")

#: What the epilogue writes: float32, or BFP8 tile blocks.
OUTPUTS = ("fp32", "bfp8")

#: The bit pattern of the NaN an IEEE addition returns when it returns a NaN.
CANONICAL_NAN = 0x7FC00000


# --------------------------------------------------------------------------- argument checks

def _check_block(block) -> int:
    if isinstance(block, (bool, np.bool_)) or not isinstance(block, (int, np.integer)):
        raise TypeError(f"block must be an int, not {type(block).__name__}")
    if int(block) not in BLOCKS:
        raise ValueError(f"block must be one of {BLOCKS}, not {block}")
    return int(block)


def _check_matrix(name: str, x, dtype) -> np.ndarray:
    if not isinstance(x, np.ndarray):
        raise TypeError(f"{name} must be a numpy.ndarray of dtype {np.dtype(dtype)}, "
                        f"not {type(x).__name__}")
    if x.dtype != dtype:
        raise TypeError(f"{name} must have dtype {np.dtype(dtype)}, not {x.dtype}")
    if x.ndim != 2:
        raise ValueError(f"{name} must be a 2-D matrix, not an array of shape {x.shape}")
    if 0 in x.shape:
        raise ValueError(f"{name} must have nonzero dimensions, not shape {x.shape}")
    return x


def _check_rounding(rounding: str, seed) -> int:
    if rounding not in ROUNDING:
        raise ValueError(f"rounding must be one of {ROUNDING}, not {rounding!r}")
    if isinstance(seed, (bool, np.bool_)) or not isinstance(seed, (int, np.integer)):
        raise TypeError(f"seed must be an int, not {type(seed).__name__}")
    if not 0 <= int(seed) < 2**64:
        raise ValueError(f"seed must lie in [0, 2**64), not {seed}")
    return int(seed)


def tile_grid(shape, *, block: int = 32) -> tuple[int, int]:
    """The shape of the exponent matrix of an M x N matrix: ``(ceil(M/T), ceil(N/T))``.

    Parameters
    ----------
    shape : tuple of int
        ``(M, N)``.
    block : int
        The block size ``T``.

    Returns
    -------
    tuple of int
    """
    block = _check_block(block)
    try:
        m, n = (int(s) for s in shape)
    except (TypeError, ValueError):
        raise TypeError(f"shape must be a pair of ints, not {shape!r}") from None
    if m < 1 or n < 1:
        raise ValueError(f"shape must be positive, not {shape!r}")
    return -(-m // block), -(-n // block)


def ones_row(columns: int, *, block: int = 32) -> tuple[np.ndarray, np.ndarray]:
    """A ``1 x columns`` row of ones in BFP8 tile blocks: mantissas 64, exponents -6 (each
    exactly 1), so that ``1^T d`` sums a matrix's rows exactly.

    Returns
    -------
    (numpy.ndarray of int8, numpy.ndarray of int8)
        The mantissas and their tile exponents (:func:`tile_grid`).
    """
    return (np.full((1, columns), 64, np.int8),
            np.full(tile_grid((1, columns), block=block), -6, np.int8))


def _check_exp(name: str, exp, shape, block: int) -> np.ndarray:
    _check_matrix(name, exp, np.int8)
    grid = tile_grid(shape, block=block)
    if exp.shape != grid:
        raise ValueError(f"{name} must have shape {grid} (blocks of {block} over a "
                         f"{shape[0]}x{shape[1]} matrix), not {exp.shape}")
    return exp


# --------------------------------------------------------------------------- the format

def _block_maxabs(x: np.ndarray, block: int) -> np.ndarray:
    """Each tile's largest magnitude (the tiles' rows first, then their columns)."""
    m, n = x.shape
    gm, gn = tile_grid((m, n), block=block)
    pad = np.zeros((gm * block, gn * block), x.dtype)
    pad[:m, :n] = np.abs(x)
    return pad.reshape(gm, block, gn * block).max(axis=1).reshape(gm, gn, block).max(axis=2)


def _block_exponents(maxabs: np.ndarray) -> np.ndarray:
    """``max(floor(log2(maxabs)) - 6, -128)``, 0 where ``maxabs`` is 0 (int64)."""
    _, e = np.frexp(maxabs)                 # maxabs = f * 2**e, 0.5 <= f < 1: exact
    exp = np.maximum(e.astype(np.int64) - 1 - _MANT_SHIFT, EXP_MIN)
    return np.where(maxabs > 0, exp, 0)


def tile_exponents(exp: np.ndarray, shape, *, block: int = 32) -> np.ndarray:
    """Each element's exponent: ``exp`` expanded over its blocks.

    Parameters
    ----------
    exp : numpy.ndarray of int8, shape (ceil(M/T), ceil(N/T))
        The block exponents.
    shape : tuple of int
        ``(M, N)``, the matrix's shape.
    block : int
        The block size ``T``.

    Returns
    -------
    numpy.ndarray of int64, shape (M, N)
        ``exp[m // T, n // T]`` at ``(m, n)``.

    Raises
    ------
    TypeError
        ``exp`` is not an int8 ndarray, or ``block`` or ``shape`` is not made of ints.
    ValueError
        ``block`` is not one of :data:`BLOCKS`, or ``exp`` does not have the grid's shape.
    """
    block = _check_block(block)
    _check_exp("exp", exp, shape, block)
    m, n = (int(s) for s in shape)
    full = np.repeat(np.repeat(exp.astype(np.int64), block, axis=0), block, axis=1)
    return full[:m, :n]


def quantize_tiles(x: np.ndarray, *, block: int = 32, rounding: str = "nearest",
                   seed: int = 0, row0: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Quantise a float32 matrix to BFP8 tile blocks.

    Parameters
    ----------
    x : numpy.ndarray of float32, shape (M, N)
        Finite values.
    block : int
        The block size ``T``, one of :data:`BLOCKS`.
    rounding : {"nearest", "stochastic"}
        ``r = 2**15`` (round half up), or ``r = random_bits(seed, m, n)``.
    seed : int
        The 64-bit seed of the random bits (stochastic rounding only).
    row0 : int
        The row index of ``x``'s first row in the random bits, ``r = random_bits(seed, row0 +
        m, n)``: a matrix of a stack (:func:`sim.models.conv.quantize_stack`) takes its rows'
        indices in the stack.

    Returns
    -------
    q : numpy.ndarray of int8, shape (M, N)
        ``clamp(floor(x[m, n] * 2**-exp + r / 2**16), -127, 127)`` with ``exp`` the element's
        block exponent; computed as ``(floor(x * 2**(16 - exp)) + r) >> 16``, exactly.
    exp : numpy.ndarray of int8, shape (ceil(M/T), ceil(N/T))
        ``max(floor(log2(max|x|)) - 6, -128)`` per block; 0 for an all-zero block.

    Raises
    ------
    TypeError
        ``x`` is not a float32 ndarray, or ``block`` or ``seed`` is not an int.
    ValueError
        ``x`` is not 2-D or is empty or holds inf or NaN; ``block``, ``rounding`` or ``seed``
        is out of range.

    Notes
    -----
    ``x * 2**(16 - exp)`` is exact in float64 (a float32 times a power of two that keeps it in
    range), so its floor ``Y`` is exact too, and ``|Y| <= 2**23``. The clamp only acts on a
    block's extreme elements, which can round to +-128. Quantising ``dequantize_tiles(q, exp)``
    again gives back ``q`` and ``exp`` whatever the rounding: every scaled value is an integer
    and ``r < 2**16`` rounds an integer to itself.

    Stochastic rounding: ``E[q] = floor(v * 2**(16 - exp)) / 2**16`` over uniform ``r``, so it
    is exactly unbiased when ``v * 2**-exp`` has at most 16 fraction bits, and otherwise
    biased by ``(-2**-16, 0]`` of the mantissa's LSB (clamped extremes aside).
    """
    _check_matrix("x", x, np.float32)
    block = _check_block(block)
    seed = _check_rounding(rounding, seed)
    if not np.isfinite(x).all():
        raise ValueError("x must be finite (it holds inf or NaN)")
    exp = _block_exponents(_block_maxabs(x, block).astype(np.float64)).astype(np.int8)
    # Y = floor(v * 2**(16 - exp)), then (Y + r) >> 16, in float64: every value is an
    # integer below 2**24 in magnitude, so each step is exact
    m, n = x.shape
    gm = exp.shape[0]
    bands = np.zeros((gm * block, n), np.float64)      # whole bands of tile rows
    bands[:m] = x
    bands = bands.reshape(gm, block, n)
    scale = np.exp2(FRACTION_BITS - exp.astype(np.float64))            # per tile, exact
    y = np.floor(bands * np.repeat(scale, block, axis=1)[:, None, :n])
    if rounding == "nearest":
        y += 1 << (FRACTION_BITS - 1)
    else:                                               # random_bits(seed, m, n)
        y += random_matrix(seed, gm * block, n, row0=row0).reshape(y.shape)
    q = np.clip(np.floor(y * 2.0 ** -FRACTION_BITS), -_QMAX, _QMAX).astype(np.int8)
    return np.ascontiguousarray(q.reshape(gm * block, n)[:m]), exp


def dequantize_tiles(q: np.ndarray, exp: np.ndarray, *, block: int = 32) -> np.ndarray:
    """``q * 2**exp`` per element, as float32 (exact).

    Parameters
    ----------
    q : numpy.ndarray of int8, shape (M, N)
    exp : numpy.ndarray of int8, shape (ceil(M/T), ceil(N/T))
    block : int

    Returns
    -------
    numpy.ndarray of float32, shape (M, N)
        Exact: ``|q| <= 128`` needs 8 significant bits and ``2**-128 * q`` down to ``2**-128``
        is a float32 (subnormal); ``127 * 2**127`` overflows to inf, which no quantised block
        produces (its exponent is at most 121).

    Raises
    ------
    TypeError
        ``q`` or ``exp`` is not an int8 ndarray.
    ValueError
        ``q`` is not 2-D, or ``exp`` does not have the grid's shape.
    """
    _check_matrix("q", q, np.int8)
    block = _check_block(block)
    e = tile_exponents(exp, q.shape, block=block)
    with np.errstate(over="ignore"):
        return np.ldexp(q.astype(np.float64), e).astype(np.float32)


# --------------------------------------------------------------------------- exponents along K

def gemm_kruns(a: np.ndarray, a_exp: np.ndarray, b: np.ndarray, b_exp: np.ndarray,
               k_stops, *, transpose_a: bool = False, transpose_b: bool = False,
               start: np.ndarray | None = None) -> np.ndarray:
    """A GEMM whose operands' exponents change along K, in runs: the general form of
    :func:`gemm_kblocks` (it also covers a weight gradient's per-sample exponents).

    The reduction axis is cut at ``k_stops`` into runs ``[k_0, k_1), [k_1, k_2), ...``
    (``k_0 = 0``, the last stop ``K``). Run ``j``'s exact int32 partial ``P_j`` is rescaled
    once to float32 with the exponent ``a_exp[m, j] + b_exp[j, n]``
    (:func:`sim.models.golden.rescale`: round to nearest even) and accumulated in float32::

        S = +0.0;  for j in order: S = float32(S + rescale(P_j, a_exp[:, j] + b_exp[j, :]))

    Parameters
    ----------
    a, b : numpy.ndarray of int8
        The operands as for :func:`sim.models.golden.gemm`: ``op(a)`` is M x K, ``op(b)`` K x N.
    a_exp : numpy.ndarray of int8, shape (M, R)
        Row ``m`` of ``op(a)``'s exponent in each run.
    b_exp : numpy.ndarray of int8, shape (R, N)
        Column ``n`` of ``op(b)``'s exponent in each run.
    k_stops : sequence of int
        The R increasing ends of the runs, the last ``K``.
    transpose_a, transpose_b : bool
    start : numpy.ndarray of float32, shape (M, N), optional
        ``S``'s value before the first run (default +0): a reduction cut into several calls
        continues the same float32 sum.

    Returns
    -------
    numpy.ndarray of float32, shape (M, N)

    Raises
    ------
    TypeError
        An operand or exponent matrix has the wrong dtype; a flag is not a bool.
    ValueError
        Shapes do not agree; ``k_stops`` is not increasing or does not end at K.
    """
    m, n, k = gemm_shape(a, b, transpose_a, transpose_b)
    stops = [int(s) for s in np.asarray(k_stops).reshape(-1)]
    if (not stops or stops[-1] != k or stops[0] <= 0
            or any(s1 <= s0 for s0, s1 in zip(stops, stops[1:], strict=False))):
        raise ValueError(f"k_stops must increase from above 0 to K={k}, not {stops}")
    runs = len(stops)
    _check_matrix("a_exp", a_exp, np.int8)
    _check_matrix("b_exp", b_exp, np.int8)
    if a_exp.shape != (m, runs):
        raise ValueError(f"a_exp must have shape {(m, runs)} (rows of op(a) x runs), "
                         f"not {a_exp.shape}")
    if b_exp.shape != (runs, n):
        raise ValueError(f"b_exp must have shape {(runs, n)} (runs x columns of op(b)), "
                         f"not {b_exp.shape}")
    op_a = a.T if transpose_a else a
    op_b = b.T if transpose_b else b
    if start is not None:
        _check_matrix("start", start, np.float32)
        if start.shape != (m, n):
            raise ValueError(f"start must have shape {(m, n)}, not {start.shape}")
    total = np.zeros((m, n), np.float32) if start is None else start.copy()
    length = stops[0]
    # (the batched form where every run but the last is `length` long and the last is not
    # longer than `length`)
    if length <= _BATCH_K and k <= runs * length \
            and all(s == (j + 1) * length for j, s in enumerate(stops[:-1])):
        return _uniform_runs(op_a, a_exp, op_b, b_exp, length, total)
    start = 0
    for j, stop in enumerate(stops):
        part = gemm(np.ascontiguousarray(op_a[:, start:stop]),
                    np.ascontiguousarray(op_b[start:stop]))
        with np.errstate(over="ignore", invalid="ignore"):
            total = total + rescale(part, a_exp[:, j].copy(), b_exp[j].copy())
        start = stop
    return total


#: The longest run :func:`_uniform_runs` sums in float32, exactly: every partial sum of at most
#: 1024 products of int8 values is an integer of at most 2**24.
_BATCH_K = 1024


def _uniform_runs(op_a, a_exp, op_b, b_exp, length, total):
    """:func:`gemm_kruns` where every run but the last is ``length`` long, bit for bit, with
    the runs' partial products batched into one float32 matmul (exact, ``length <=
    _BATCH_K``; the last run padded with zero products), each rescaled as
    :func:`sim.models.golden.rescale` does (one rounding to float32) and added to ``total``
    (updated in place and returned) in float32 in run order."""
    m, k = op_a.shape
    n = op_b.shape[1]
    runs = -(-k // length)
    fa = np.zeros((m, runs * length), np.float32)
    fa[:, :k] = op_a
    fb = np.zeros((runs * length, n), np.float32)
    fb[:k] = op_b
    parts = np.matmul(fa.reshape(m, runs, length).transpose(1, 0, 2),
                      fb.reshape(runs, length, n))                       # (runs, M, N)
    # each term P * 2**(a + b) is exact, so its one rounding is the cast to float32: in
    # float32 itself when every product and partial stays normal (|P| < 2**24 and the
    # exponents within [-60, 50]), else in float64
    wide = np.float32 if min(a_exp.min(), b_exp.min()) >= -60 \
        and max(a_exp.max(), b_exp.max()) <= 50 else np.float64
    row = np.exp2(a_exp.T.astype(wide))                                  # (runs, M)
    col = np.exp2(b_exp.astype(wide))                                    # (runs, N)
    with np.errstate(over="ignore", invalid="ignore"):
        terms = ((parts.astype(wide, copy=False) * row[:, :, None]) * col[:, None, :]
                 ).astype(np.float32, copy=False)
        for term in terms:
            total += term
    return total


def gemm_kblocks(a: np.ndarray, a_exp: np.ndarray, b: np.ndarray, b_exp: np.ndarray, *,
                 transpose_a: bool = False, transpose_b: bool = False,
                 block: int = 32) -> np.ndarray:
    """``op(A) @ op(B)`` of two tile-quantised operands, one K block of ``T`` at a time.

    Parameters
    ----------
    a : numpy.ndarray of int8
        Mantissas of ``A`` as stored: M x K, or K x M when ``transpose_a``.
    a_exp : numpy.ndarray of int8
        ``a``'s tile exponents, the grid of ``a`` as stored (it is read transposed with it).
    b : numpy.ndarray of int8
        Mantissas of ``B`` as stored: K x N, or N x K when ``transpose_b``.
    b_exp : numpy.ndarray of int8
        ``b``'s tile exponents, as stored.
    transpose_a, transpose_b : bool
    block : int
        The block size ``T`` of both operands.

    Returns
    -------
    numpy.ndarray of float32, shape (M, N)
        With ``P_kb`` the exact int32 product over K block ``kb`` (K columns ``kb*T`` up to
        ``(kb+1)*T``) and ``E_kb[m, n] = op(a_exp)[m//T, kb] + op(b_exp)[kb, n//T]``::

            S = +0.0;  for kb in order: S = float32(S + rescale(P_kb, E_kb))

        Each term is rounded once (to nearest even) and each addition once: with ``nb`` K
        blocks, ``|S - exact| <= (nb + 1) * 2**-24 * sum_kb |P_kb * 2**E_kb|`` (to first
        order, away from the subnormal range).

    Raises
    ------
    TypeError
        An operand or exponent grid is not int8, a flag not a bool.
    ValueError
        Shapes disagree, or ``block`` is not one of :data:`BLOCKS`.
    """
    block = _check_block(block)
    m, n, k = gemm_shape(a, b, transpose_a, transpose_b)
    _check_exp("a_exp", a_exp, a.shape, block)
    _check_exp("b_exp", b_exp, b.shape, block)
    ea = a_exp.T if transpose_a else a_exp          # (ceil(M/T), ceil(K/T))
    eb = b_exp.T if transpose_b else b_exp          # (ceil(K/T), ceil(N/T))
    row_exp = np.repeat(ea, block, axis=0)[:m]      # (M, runs)
    col_exp = np.repeat(eb, block, axis=1)[:, :n]   # (runs, N)
    stops = list(range(block, k, block)) + [k]
    return gemm_kruns(a, np.ascontiguousarray(row_exp), b, np.ascontiguousarray(col_exp), stops,
                      transpose_a=transpose_a, transpose_b=transpose_b)


# --------------------------------------------------------------------------- the epilogue

def sgd_decay(lr, weight_decay=0.0) -> np.float32:
    """The factor :func:`sgd_step` multiplies the stored weights by: ``float32(1 -
    float32(lr * weight_decay))`` in float32 arithmetic (``DESC_DECAY``; 1.0 without weight
    decay).

    Raises
    ------
    TypeError
        ``lr`` or ``weight_decay`` is not a number.
    """
    for name, v in (("lr", lr), ("weight_decay", weight_decay)):
        if not isinstance(v, (int, float, np.floating)) or isinstance(v, bool):
            raise TypeError(f"{name} must be a number, not {type(v).__name__}")
    with np.errstate(over="ignore", invalid="ignore"):
        return np.float32(np.float32(1.0) - np.float32(lr) * np.float32(weight_decay))


def sgd_step(w: np.ndarray, g: np.ndarray, lr, weight_decay=0.0, *,
             decay=None) -> np.ndarray:
    """The optimiser's step of ``DESC_EPILOGUE.SGD``, per element, in float32::

        w' = add_float32(float32(decay * w), float32(-lr * g))
        decay = sgd_decay(lr, weight_decay) = float32(1 - float32(lr * weight_decay))

    that is ``w - lr * (g + weight_decay * w)`` with each product rounded to nearest even
    (:func:`sim.models.fp32.fp32_mul`) and the sum by :func:`add_float32`, NaNs canonical.
    This is SGD without momentum on the stored weights: with BFP8 weights, ``w`` is
    :func:`dequantize_tiles` of them and ``w'`` is quantised again (SWALP's 8-bit SGD).

    Parameters
    ----------
    w, g : numpy.ndarray of float32, the same shape
        The weights and their gradient.
    lr, weight_decay : float
        Rounded to float32 first.
    decay : float, optional
        The weights' factor as ``DESC_DECAY`` holds it, in place of
        ``sgd_decay(lr, weight_decay)`` (``weight_decay`` is then unused).

    Returns
    -------
    numpy.ndarray of float32

    Raises
    ------
    TypeError
        ``w`` or ``g`` is not a float32 ndarray, or ``lr`` / ``weight_decay`` not a number.
    ValueError
        ``w`` and ``g`` differ in shape.
    """
    for name, v in (("w", w), ("g", g)):
        if not isinstance(v, np.ndarray) or v.dtype != np.float32:
            raise TypeError(f"{name} must be a float32 ndarray, not "
                            f"{getattr(v, 'dtype', type(v).__name__)}")
    if w.shape != g.shape:
        raise ValueError(f"w is {w.shape} but g is {g.shape}")
    keep = sgd_decay(lr, weight_decay if decay is None else 0.0)
    if decay is not None:
        sgd_decay(decay)                               # (a number)
        keep = np.float32(decay)
    step = np.float32(lr)
    neg = np.array([step], np.float32).view(np.uint32) ^ np.uint32(0x80000000)
    kept = fp32_mul(np.array([keep], np.float32).view(np.uint32), w.view(np.uint32))
    moved = fp32_mul(neg, g.view(np.uint32))
    return add_float32(kept.view(np.float32).reshape(w.shape),
                       moved.view(np.float32).reshape(w.shape))


def add_float32(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """IEEE binary32 addition as the epilogue's adder computes it.

    Parameters
    ----------
    a, b : numpy.ndarray of float32
        Broadcast together.

    Returns
    -------
    numpy.ndarray of float32
        ``a + b`` rounded to nearest even, subnormals kept, +-inf on overflow,
        ``-0 + -0 = -0``, ``x + (-x) = +0``: numpy's float32 addition bit for bit, except that
        every NaN result (a NaN operand, or ``inf + -inf``) is the quiet NaN
        :data:`CANONICAL_NAN` (``0x7FC00000``), whatever the operands' payloads and signs.

    Raises
    ------
    TypeError
        An operand is not a float32 ndarray.
    """
    for name, v in (("a", a), ("b", b)):
        if not isinstance(v, np.ndarray) or v.dtype != np.float32:
            raise TypeError(f"{name} must be a float32 numpy.ndarray, not "
                            f"{getattr(v, 'dtype', type(v).__name__)}")
    with np.errstate(over="ignore", invalid="ignore"):
        s = np.add(a, b, dtype=np.float32)
    nan = np.isnan(s)
    if nan.any():
        s = np.where(nan, np.uint32(CANONICAL_NAN).view(np.float32), s)
    return np.asarray(s, np.float32)


@dataclass(frozen=True)
class Epilogue:
    """What :func:`epilogue` writes back.

    Attributes
    ----------
    value : numpy.ndarray of float32, shape (M, N)
        The result after bias, ReLU and ``mask_in``, before quantisation (what ``out="fp32"``
        writes).
    q : numpy.ndarray of int8 or None
        The BFP8 mantissas (``out="bfp8"``), else None.
    exp : numpy.ndarray of int8 or None
        The tile exponents (``out="bfp8"``), else None.
    mask : numpy.ndarray of bool or None
        ReLU's mask ``v > 0`` (taken after the bias), shape (M, N), when ``relu``; else None.
    """

    value: np.ndarray
    q: np.ndarray | None
    exp: np.ndarray | None
    mask: np.ndarray | None


def epilogue(c: np.ndarray, *, bias: np.ndarray | None = None, bias_axis: str = "row",
             relu: bool = False, mask_in: np.ndarray | None = None, out: str = "fp32",
             rounding: str = "nearest", seed: int = 0, block: int = 32) -> Epilogue:
    """The write-back epilogue of one descriptor, per element of ``c``, in this order::

        v = c[m, n]
        bias:     v = add_float32(v, bias[m])      (bias_axis="row"; bias[n] for "col")
        relu:     mask[m, n] = v > 0;  v = v if mask[m, n] else +0.0
        mask_in:  v = v if mask_in[m, n] else +0.0
        out:      v as float32, or quantize_tiles(v, block, rounding, seed)

    Parameters
    ----------
    c : numpy.ndarray of float32, shape (M, N)
        A GEMM's result (or, for a quantise-only descriptor, a matrix from memory).
    bias : numpy.ndarray of float32, optional
        Length M (``bias_axis="row"``) or N (``"col"``).
    bias_axis : {"row", "col"}
    relu : bool
        Apply ReLU and return its mask. ``-0.0`` and NaN are not ``> 0``: they become +0.0.
    mask_in : numpy.ndarray of bool, shape (M, N), optional
        A stored mask (the backward pass of ReLU): elements where it is False become +0.0.
    out : {"fp32", "bfp8"}
    rounding : {"nearest", "stochastic"}
        The quantiser's rounding (``out="bfp8"``).
    seed : int
        The 64-bit seed of stochastic rounding.
    block : int
        The tile block size of the quantised output.

    Returns
    -------
    Epilogue

    Raises
    ------
    TypeError
        An array has the wrong type or dtype, or a flag is not a bool.
    ValueError
        A shape does not match ``c``; ``bias_axis``, ``out``, ``rounding``, ``seed`` or
        ``block`` is out of range; ``out="bfp8"`` and the value to quantise holds inf or NaN.
    """
    _check_matrix("c", c, np.float32)
    m, n = c.shape
    if bias_axis not in BIAS_AXES:
        raise ValueError(f"bias_axis must be one of {BIAS_AXES}, not {bias_axis!r}")
    if out not in OUTPUTS:
        raise ValueError(f"out must be one of {OUTPUTS}, not {out!r}")
    if not isinstance(relu, (bool, np.bool_)):
        raise TypeError(f"relu must be a bool, not {type(relu).__name__}")
    _check_rounding(rounding, seed)
    block = _check_block(block)
    v = c.copy()
    if bias is not None:
        length = m if bias_axis == "row" else n
        if not isinstance(bias, np.ndarray) or bias.dtype != np.float32:
            raise TypeError(f"bias must be a float32 numpy.ndarray, not "
                            f"{getattr(bias, 'dtype', type(bias).__name__)}")
        if bias.shape != (length,):
            raise ValueError(f"bias must have shape ({length},) (bias_axis={bias_axis!r}), "
                             f"not {bias.shape}")
        v = add_float32(v, bias[:, None] if bias_axis == "row" else bias[None, :])
    mask = None
    if relu:
        mask = v > 0
        v = np.where(mask, v, np.float32(0.0))
    if mask_in is not None:
        if not isinstance(mask_in, np.ndarray) or mask_in.dtype != np.bool_:
            raise TypeError(f"mask_in must be a bool numpy.ndarray, not "
                            f"{getattr(mask_in, 'dtype', type(mask_in).__name__)}")
        if mask_in.shape != c.shape:
            raise ValueError(f"mask_in must have the shape of c, {c.shape}, not {mask_in.shape}")
        v = np.where(mask_in, v, np.float32(0.0))
    v = np.asarray(v, np.float32)
    if out == "fp32":
        return Epilogue(v, None, None, mask)
    if not np.isfinite(v).all():
        raise ValueError("c must give finite values to quantise (it gives inf or NaN)")
    q, exp = quantize_tiles(v, block=block, rounding=rounding, seed=seed)
    return Epilogue(v, q, exp, mask)


# --------------------------------------------------------------------------- masks

def pack_mask(mask: np.ndarray) -> np.ndarray:
    """A bool mask as the epilogue writes it: each row packed into bytes, LSB first.

    Parameters
    ----------
    mask : numpy.ndarray of bool, shape (M, N)

    Returns
    -------
    numpy.ndarray of uint8, shape (M, ceil(N/8))
        Bit ``n % 8`` of byte ``n // 8`` of row ``m`` is ``mask[m, n]``; the unused high bits of a
        row's last byte are 0. (In memory, rows lie ``mask_stride`` bytes apart.)

    Raises
    ------
    TypeError
        ``mask`` is not a bool ndarray.
    ValueError
        ``mask`` is not 2-D or is empty.
    """
    _check_matrix("mask", mask, np.bool_)
    return np.packbits(mask, axis=1, bitorder="little")


def unpack_mask(bits: np.ndarray, n: int) -> np.ndarray:
    """The inverse of :func:`pack_mask`.

    Parameters
    ----------
    bits : numpy.ndarray of uint8, shape (M, B)
        Packed rows (``B >= ceil(n/8)``; bytes beyond are ignored, as a row stride's padding).
    n : int
        Columns of the mask.

    Returns
    -------
    numpy.ndarray of bool, shape (M, n)

    Raises
    ------
    TypeError
        ``bits`` is not a uint8 ndarray, or ``n`` not an int.
    ValueError
        ``bits`` is not 2-D, or has fewer than ``ceil(n/8)`` bytes a row, or ``n < 1``.
    """
    _check_matrix("bits", bits, np.uint8)
    if isinstance(n, (bool, np.bool_)) or not isinstance(n, (int, np.integer)):
        raise TypeError(f"n must be an int, not {type(n).__name__}")
    if n < 1:
        raise ValueError(f"n must be positive, not {n}")
    if bits.shape[1] * 8 < n:
        raise ValueError(f"bits must have at least {-(-n // 8)} bytes a row for n={n}, "
                         f"not {bits.shape[1]}")
    return np.unpackbits(bits, axis=1, count=n, bitorder="little").astype(bool)


# --------------------------------------------------------------------------- OCP MXINT8

def _check_axis(axis) -> int:
    if isinstance(axis, (bool, np.bool_)) or not isinstance(axis, (int, np.integer)):
        raise TypeError(f"axis must be 0 or 1, not {type(axis).__name__}")
    if axis not in (0, 1):
        raise ValueError(f"axis must be 0 or 1, not {axis}")
    return int(axis)


def _check_mx_block(block) -> int:
    block = _check_block(block)
    if block % MX_BLOCK:
        raise ValueError(f"block must be a multiple of {MX_BLOCK} for a lossless MXINT8 "
                         f"conversion, not {block}")
    return block


def to_mxint8(q: np.ndarray, exp: np.ndarray, *, axis: int,
              block: int = 32) -> tuple[np.ndarray, np.ndarray]:
    """Export tile blocks as OCP Microscaling MXINT8, losslessly.

    An MXINT8 block is 32 consecutive elements along ``axis`` with one E8M0 scale ``E`` and
    int8 elements ``P`` read as ``P * 2**-6``: ``x = 2**(E - 127) * P * 2**-6``. Tiles of
    ``T >= 32`` (a multiple of 32) hold whole MXINT8 blocks along either axis, so
    ``P = q`` and ``E = exp + 133`` (:data:`MX_SCALE_BIAS`). A partial block at the edge
    is the MXINT8 block of the elements that exist.

    Parameters
    ----------
    q : numpy.ndarray of int8, shape (M, N)
    exp : numpy.ndarray of int8, shape (ceil(M/T), ceil(N/T))
    axis : {0, 1}
        The axis the MXINT8 blocks run along: 1, 32 consecutive elements of a row; 0, of a
        column.
    block : int
        The tile block size ``T`` (32 or 64).

    Returns
    -------
    elements : numpy.ndarray of int8, shape (M, N)
        ``q`` itself (in [-127, 127]).
    scales : numpy.ndarray of uint8
        E8M0 scales, shape (M, ceil(N/32)) for ``axis=1``, (ceil(M/32), N) for ``axis=0``.

    Raises
    ------
    TypeError
        ``q`` or ``exp`` is not int8, or ``axis`` is not an int.
    ValueError
        ``block`` is not a multiple of 32; ``exp`` has the wrong shape or an exponent above
        121 (E8M0 stops at 254; 255 is NaN).
    """
    _check_matrix("q", q, np.int8)
    block = _check_mx_block(block)
    axis = _check_axis(axis)
    _check_exp("exp", exp, q.shape, block)
    if int(exp.max()) + MX_SCALE_BIAS > 254:
        raise ValueError(f"exp must be at most {254 - MX_SCALE_BIAS} to have an E8M0 scale, "
                         f"not {int(exp.max())}")
    m, n = q.shape
    per = block // MX_BLOCK
    scales = exp.astype(np.int64) + MX_SCALE_BIAS
    if axis == 1:       # one scale per row and 32 columns
        scales = np.repeat(np.repeat(scales, block, axis=0), per, axis=1)[:m, :-(-n // MX_BLOCK)]
    else:
        scales = np.repeat(np.repeat(scales, per, axis=0), block, axis=1)[:-(-m // MX_BLOCK), :n]
    return q.copy(), scales.astype(np.uint8)


def from_mxint8(elements: np.ndarray, scales: np.ndarray, *, axis: int,
                block: int = 32) -> tuple[np.ndarray, np.ndarray]:
    """Import OCP MXINT8 as tile blocks, losslessly, when the data has tile structure.

    Parameters
    ----------
    elements : numpy.ndarray of int8, shape (M, N)
        In [-127, 127] (MXINT8's -128 has no tile-block mantissa).
    scales : numpy.ndarray of uint8
        E8M0 scales laid out as :func:`to_mxint8` returns them for ``axis``.
    axis : {0, 1}
    block : int
        The tile block size ``T`` (32 or 64).

    Returns
    -------
    q : numpy.ndarray of int8, shape (M, N)
    exp : numpy.ndarray of int8, shape (ceil(M/T), ceil(N/T))
        ``E - 133`` of the tile's scales.

    Raises
    ------
    TypeError
        ``elements`` is not int8 or ``scales`` not uint8.
    ValueError
        ``scales`` has the wrong shape, a NaN scale (255) or one below 5 (exponent below
        -128); the MXINT8 blocks of one tile have different scales; an element is -128.
    """
    _check_matrix("elements", elements, np.int8)
    _check_matrix("scales", scales, np.uint8)
    block = _check_mx_block(block)
    axis = _check_axis(axis)
    m, n = elements.shape
    want = (m, -(-n // MX_BLOCK)) if axis == 1 else (-(-m // MX_BLOCK), n)
    if scales.shape != want:
        raise ValueError(f"scales must have shape {want} for axis={axis}, not {scales.shape}")
    if (elements == -128).any():
        raise ValueError("elements must lie in [-127, 127] (tile blocks have no -128)")
    if (scales == 255).any() or (scales < EXP_MIN + MX_SCALE_BIAS).any():
        raise ValueError(f"scales must lie in [{EXP_MIN + MX_SCALE_BIAS}, 254]")
    gm, gn = tile_grid((m, n), block=block)
    sm, sn = scales.shape
    # Group the scales by tile: a tile holds block / 32 scales along the axis, block across it.
    rows = block if axis == 1 else block // MX_BLOCK
    cols = block // MX_BLOCK if axis == 1 else block
    pad = np.full((gm * rows, gn * cols), -1, np.int64)
    pad[:sm, :sn] = scales
    tiles = pad.reshape(gm, rows, gn, cols).transpose(0, 2, 1, 3).reshape(gm, gn, -1)
    valid = tiles >= 0
    hi = np.where(valid, tiles, -1).max(axis=2)
    lo = np.where(valid, tiles, 10**6).min(axis=2)
    if (hi != lo).any():
        i, j = np.argwhere(hi != lo)[0]
        raise ValueError(f"scales differ within tile ({i}, {j}): MXINT8 data without a "
                         f"common scale per {block}x{block} tile is not tile blocks")
    exp = hi - MX_SCALE_BIAS
    assert exp.min() >= EXP_MIN and exp.max() <= EXP_MAX
    return elements.copy(), exp.astype(np.int8)
