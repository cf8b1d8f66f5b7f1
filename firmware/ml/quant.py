"""Block floating point quantiser: int8 mantissas with one power-of-two exponent per block.

For a block ``x`` with ``e = floor(log2(max|x|))`` — taken from the IEEE exponent with
``numpy.frexp``, exact for every float, where a ratio of logarithms is off by one just below
powers of two — and ``F = bits - 2 - e``::

    q = clamp(floor(x * 2**F + u), -(2**(bits-1) - 1), 2**(bits-1) - 1)
    x ~ q * 2**exp,   exp = e - (bits - 2) = -F

with ``u = 0.5`` (round to nearest) or ``u ~ U[0, 1)`` drawn from a seeded
``numpy.random.Generator`` (stochastic rounding, unbiased inside the range). ``exp`` is an
int8 in the form :meth:`firmware.Device.gemm` takes as ``row_exp`` / ``col_exp``.

The clamp is symmetric (−127..127 for 8 bits, never −128), so quantising an already
quantised tensor again changes nothing: its largest magnitude ``|q| 2**exp`` with
``|q| <= 127`` gives back the same exponent (or, when no mantissa reaches 64, a smaller one
whose mantissas are the old ones doubled), every ``x 2**F`` is an integer, and
``floor(integer + u)`` with ``0 <= u < 1`` is that integer — whatever ``u`` is drawn. With a
−128 allowed, a block whose extreme is −128 would get a larger exponent and every odd
mantissa would be rounded again (at random). An all-zero
block gives zeros and exponent 0, never NaN. Blocks are the whole tensor (``axis=None``) or
the slices along one axis (``axis=0``: one exponent per sample / row; ``axis=1``: per column
or channel).

:func:`quantize_tiles` quantises a matrix to the accelerator's BFP8 tile blocks instead
(:mod:`sim.models.bfp`: one exponent per 32 x 32 tile, counter-based random bits), with the
stochastic rounding's 64-bit seed drawn from a ``numpy.random.Generator``.
"""

from __future__ import annotations

import numpy as np

from sim.models import bfp

__all__ = ["quantize", "dequantize", "block_exponent", "ROUNDING", "quantize_tiles",
           "random_seed"]

ROUNDING = ("nearest", "stochastic")


def block_exponent(maxabs: np.ndarray) -> np.ndarray:
    """``floor(log2(maxabs))``, exactly (from the IEEE exponent).

    Parameters
    ----------
    maxabs : numpy.ndarray
        Non-negative magnitudes.

    Returns
    -------
    numpy.ndarray
        int64 exponents, 0 where ``maxabs`` is 0.
    """
    _, e = np.frexp(np.asarray(maxabs, np.float64))
    return np.where(np.asarray(maxabs) > 0, e - 1, 0).astype(np.int64)


def _check(x, bits, axis, rounding, rng):
    if not isinstance(x, np.ndarray) or x.dtype.kind != "f":
        raise TypeError(f"x must be a floating-point numpy array, not "
                        f"{getattr(x, 'dtype', type(x).__name__)}")
    if not np.all(np.isfinite(x)):
        raise ValueError("x must be finite (it has inf or NaN)")
    if not isinstance(bits, int) or isinstance(bits, bool) or not 2 <= bits <= 8:
        raise ValueError(f"bits must be an integer in [2, 8], not {bits!r}")
    if axis is not None and (not isinstance(axis, int) or not -x.ndim <= axis < x.ndim):
        raise ValueError(f"axis must be None or an axis of x (ndim {x.ndim}), not {axis!r}")
    if rounding not in ROUNDING:
        raise ValueError(f"rounding must be one of {ROUNDING}, not {rounding!r}")
    if rounding == "stochastic" and not isinstance(rng, np.random.Generator):
        raise TypeError("stochastic rounding needs rng, a numpy.random.Generator")


def quantize(x: np.ndarray, *, bits: int = 8, axis: int | None = None,
             rounding: str = "nearest", rng: np.random.Generator | None = None):
    """Quantise to block floating point (see the module documentation).

    Parameters
    ----------
    x : numpy.ndarray
        A finite floating-point array.
    bits : int
        Mantissa bits, 2 to 8.
    axis : int, optional
        None: one block, the whole tensor; else one block per slice along ``axis``.
    rounding : {"nearest", "stochastic"}
        Round to nearest, or stochastically with ``rng``'s draws.
    rng : numpy.random.Generator, optional
        Needed for stochastic rounding.

    Returns
    -------
    q : numpy.ndarray
        int8 mantissas shaped like ``x``, in ``-(2**(bits-1) - 1)..2**(bits-1) - 1``.
    exp : numpy.int8 or numpy.ndarray
        The blocks' exponents: a scalar, or a vector of length ``x.shape[axis]``.

    Raises
    ------
    TypeError
        ``x`` is not a floating-point array, or stochastic rounding has no ``rng``.
    ValueError
        ``x`` is not finite, or ``bits``, ``axis`` or ``rounding`` is out of range.
    """
    _check(x, bits, axis, rounding, rng)
    x64 = np.asarray(x, np.float64)
    if axis is None:
        maxabs = np.max(np.abs(x64)) if x64.size else 0.0
        shape = ()
    else:
        axis = axis % x.ndim
        others = tuple(i for i in range(x.ndim) if i != axis)
        maxabs = np.max(np.abs(x64), axis=others) if x64.size else np.zeros(x.shape[axis])
        shape = [1] * x.ndim
        shape[axis] = x.shape[axis]
    e = block_exponent(maxabs)
    exp = np.clip(e - (bits - 2), -128, 127)        # below 2**-128 everything rounds to 0
    exp = np.where(np.asarray(maxabs) > 0, exp, 0)
    scale = np.exp2(-exp.astype(np.float64)).reshape(shape)
    u = 0.5 if rounding == "nearest" else rng.random(x.shape)
    hi = (1 << (bits - 1)) - 1
    lo = -hi                                    # symmetric: re-quantising is the identity
    q = np.clip(np.floor(x64 * scale + u), lo, hi).astype(np.int8)
    exp = exp.astype(np.int8)
    return q, (exp[()] if axis is None else exp)


def dequantize(q: np.ndarray, exp, axis: int | None = None) -> np.ndarray:
    """``q * 2**exp`` as float32.

    Parameters
    ----------
    q : numpy.ndarray
        Mantissas.
    exp : int or numpy.ndarray
        Exponents, as :func:`quantize` returns them.
    axis : int, optional
        The axis ``exp`` runs along (None: a scalar exponent).

    Returns
    -------
    numpy.ndarray
    """
    q = np.asarray(q)
    exp = np.asarray(exp, np.float64)
    if axis is not None:
        shape = [1] * q.ndim
        shape[axis % q.ndim] = -1
        exp = exp.reshape(shape)
    return (q.astype(np.float64) * np.exp2(exp)).astype(np.float32)


def random_seed(rng: np.random.Generator) -> int:
    """A 64-bit seed for the tile quantiser's counter-based random bits, drawn from ``rng``.

    Parameters
    ----------
    rng : numpy.random.Generator
        The run's stream of stochastic-rounding draws.

    Returns
    -------
    int
        In ``[0, 2**64)``: what a descriptor of the on-chip epilogue carries as its seed.
    """
    return int(rng.integers(0, 2**64, dtype=np.uint64))


def quantize_tiles(x: np.ndarray, *, rounding: str = "nearest",
                   rng: np.random.Generator | None = None, block: int = 32):
    """Quantise a matrix to BFP8 tile blocks, the accelerator's format: bit for bit
    :func:`sim.models.bfp.quantize_tiles` with ``seed`` drawn from ``rng``.

    Parameters
    ----------
    x : numpy.ndarray
        A finite floating-point matrix (cast to float32).
    rounding : {"nearest", "stochastic"}
        Round half up, or stochastically with the random bits of one seed drawn from ``rng``
        (:func:`random_seed`).
    rng : numpy.random.Generator, optional
        Needed for stochastic rounding.
    block : int
        The tile side ``T``, one of :data:`sim.models.bfp.BLOCKS`.

    Returns
    -------
    q : numpy.ndarray of int8
        The mantissas, shaped like ``x``.
    exp : numpy.ndarray of int8, shape (ceil(M/T), ceil(N/T))
        The tile exponents.

    Raises
    ------
    TypeError
        ``x`` is not a floating-point array, or stochastic rounding has no ``rng``.
    ValueError
        ``x`` is not a finite, nonempty 2-D matrix, or ``rounding`` or ``block`` is out of
        range.

    """
    if not isinstance(x, np.ndarray) or x.dtype.kind != "f":
        raise TypeError(f"x must be a floating-point numpy array, not "
                        f"{getattr(x, 'dtype', type(x).__name__)}")
    if x.ndim != 2 or 0 in x.shape:
        raise ValueError(f"x must be a nonempty 2-D matrix, not an array of shape {x.shape}")
    if rounding not in ROUNDING:
        raise ValueError(f"rounding must be one of {ROUNDING}, not {rounding!r}")
    if rounding == "stochastic" and not isinstance(rng, np.random.Generator):
        raise TypeError("stochastic rounding needs rng, a numpy.random.Generator")
    if block not in bfp.BLOCKS:
        raise ValueError(f"block must be one of {bfp.BLOCKS}, not {block!r}")
    x = np.ascontiguousarray(x, np.float32)
    if not np.isfinite(x).all():
        raise ValueError("x must be finite (it has inf or NaN)")
    seed = random_seed(rng) if rounding == "stochastic" else 0
    return bfp.quantize_tiles(x, block=block, rounding=rounding, seed=seed)
