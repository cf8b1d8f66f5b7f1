"""IEEE binary32 addition and multiplication on bit patterns: the specifications of
:class:`rtl.fp32.Fp32Add` and :class:`rtl.fp32.Fp32Mul`.

:func:`fp32_add` is numpy's float32 ``a + b`` (round to nearest, ties to even; subnormals in
and out; +-inf on overflow; ``-0 + -0 = -0`` and ``x + (-x) = +0``) with every NaN result
replaced by the canonical quiet NaN :data:`CANONICAL_NAN`; :func:`fp32_mul` is numpy's
float32 ``a * b`` with the same rounding and the same NaN rule. :func:`fp32_add_bits` and
:func:`fp32_mul_bits` are the same functions with integer operations only, stage by stage
as the hardware computes them; the tests check them against numpy.
"""

from __future__ import annotations

import numpy as np

__all__ = ["CANONICAL_NAN", "fp32_add", "fp32_add_bits", "fp32_mul", "fp32_mul_bits"]

#: The quiet NaN every NaN result becomes.
CANONICAL_NAN = 0x7FC00000


def _bits(name: str, x) -> np.ndarray:
    if isinstance(x, (bool, np.bool_)):
        raise TypeError(f"{name} must hold float32 bit patterns (integers), not bool")
    arr = np.asarray(x)
    if arr.dtype == np.uint32:
        return arr
    if not np.issubdtype(arr.dtype, np.integer):
        raise TypeError(f"{name} must hold float32 bit patterns (integers), "
                        f"not dtype {arr.dtype}")
    if arr.size and (int(arr.min()) < 0 or int(arr.max()) >= 1 << 32):
        raise ValueError(f"{name} must lie in [0, 2**32)")
    return arr.astype(np.uint32)


def _pair(a_bits, b_bits):
    a, b = _bits("a_bits", a_bits), _bits("b_bits", b_bits)
    try:
        return np.broadcast_arrays(a, b)
    except ValueError as exc:
        raise ValueError(f"a_bits and b_bits must broadcast together: {exc}") from None


def _numpy(op, a_bits, b_bits) -> np.ndarray:
    """numpy's float32 ``op`` on the bit patterns, NaN results made canonical."""
    a, b = _pair(a_bits, b_bits)
    with np.errstate(all="ignore"):
        r = np.asarray(op(a.view(np.float32), b.view(np.float32)), np.float32)
    out = r.view(np.uint32).copy()
    out[np.isnan(r)] = CANONICAL_NAN
    return out


def fp32_add(a_bits, b_bits) -> np.ndarray:
    """The bit pattern of ``float32(a) + float32(b)``, NaNs made canonical.

    Parameters
    ----------
    a_bits, b_bits : int or array_like of int
        float32 bit patterns in ``[0, 2**32)`` (e.g. ``x.view(numpy.uint32)``), broadcast
        together.

    Returns
    -------
    numpy.ndarray
        uint32 bit patterns of the sums: numpy's float32 addition (round to nearest even,
        subnormals, +-inf on overflow), except that any NaN result (a NaN operand, or
        ``inf - inf``) is :data:`CANONICAL_NAN`.

    Raises
    ------
    TypeError
        If an argument is not integer-valued (the message names it).
    ValueError
        If a pattern lies outside ``[0, 2**32)`` or the shapes do not broadcast.

    Examples
    --------
    >>> hex(int(fp32_add(0x3F800000, 0x3F800000)))     # 1.0 + 1.0
    '0x40000000'
    >>> hex(int(fp32_add(0x7F800000, 0xFF800000)))     # inf - inf
    '0x7fc00000'
    """
    return _numpy(np.add, a_bits, b_bits)


def fp32_mul(a_bits, b_bits) -> np.ndarray:
    """The bit pattern of ``float32(a) * float32(b)``, NaNs made canonical.

    Parameters
    ----------
    a_bits, b_bits : int or array_like of int
        float32 bit patterns in ``[0, 2**32)``, broadcast together.

    Returns
    -------
    numpy.ndarray
        uint32 bit patterns of the products: numpy's float32 multiplication (round to
        nearest even, subnormals in and out, +-inf on overflow, the sign the XOR of the
        operands' even for zeros), except that any NaN result (a NaN operand, or ``0 *
        inf``) is :data:`CANONICAL_NAN`.

    Raises
    ------
    TypeError
        If an argument is not integer-valued (the message names it).
    ValueError
        If a pattern lies outside ``[0, 2**32)`` or the shapes do not broadcast.

    Examples
    --------
    >>> hex(int(fp32_mul(0x40000000, 0x3FC00000)))     # 2.0 * 1.5
    '0x40400000'
    >>> hex(int(fp32_mul(0x00000000, 0xFF800000)))     # 0 * -inf
    '0x7fc00000'
    """
    return _numpy(np.multiply, a_bits, b_bits)


def fp32_add_bits(a: int, b: int) -> int:
    """:func:`fp32_add` of two bit patterns, with integer operations in the order of
    :class:`rtl.fp32.Fp32Add`'s stages.

    The operand of larger magnitude is ``A``; the other's significand is shifted right by the
    difference of the exponents into a 26-bit window (24 bits, guard and round) plus a sticky
    bit; the two are added or subtracted (28 bits); the leading zeros ``lz`` of the sum set
    the normalising left shift ``min(lz, e_A)`` (``e_A`` the larger exponent, 1 for
    subnormals), which stops at the subnormal range; the result is rounded to nearest even
    with one increment of the packed exponent and fraction, whose carry moves a subnormal to
    the normal range or the largest finite value to infinity.

    Parameters
    ----------
    a, b : int
        float32 bit patterns in ``[0, 2**32)``.

    Returns
    -------
    int
        The bit pattern of the sum.
    """
    # Stage 1: unpack, order by magnitude, special values.
    def unpack(x):
        e, f = (x >> 23) & 0xFF, x & 0x7FFFFF
        return x >> 31, e, f, max(e, 1), f | ((e != 0) << 23)

    sa, ea, fa, _, _ = unpack(a)
    sb, eb, fb, _, _ = unpack(b)
    a_nan, b_nan = ea == 255 and fa != 0, eb == 255 and fb != 0
    a_inf, b_inf = ea == 255 and fa == 0, eb == 255 and fb == 0
    if a_nan or b_nan or (a_inf and b_inf and sa != sb):
        return CANONICAL_NAN
    if a_inf or b_inf:
        return ((sa if a_inf else sb) << 31) | 0x7F800000
    if (a & 0x7FFFFFFF) < (b & 0x7FFFFFFF):
        a, b = b, a
    sign, _, _, e_big, m_big = unpack(a)
    sign_b, _, _, e_small, m_small = unpack(b)
    sub = sign != sign_b
    d = e_big - e_small
    # Stage 2: alignment into 26 bits plus the sticky bit.
    if d > 26:
        kept, sticky = 0, int(m_small != 0)
    else:
        wide = (m_small << 26) >> d
        kept, sticky = wide >> 24, int(wide & 0xFFFFFF != 0)
    # Stage 3: the sum, 28 bits (bit 26 the hidden bit of A).
    big = m_big << 3
    small = (kept << 1) | sticky
    total = big - small if sub else big + small
    if total == 0:
        return (sign & (not sub)) << 31          # x + (-x) = +0; -0 + -0 = -0
    # Stages 4-6: leading zeros, the shift and the exponent field before rounding.
    lz = 28 - total.bit_length()
    sh = min(lz, e_big)
    field = e_big + 1 - lz if lz <= e_big else 0
    # Stage 7: normalise; stage 8: round to nearest even, pack.
    n = (total << sh) & 0xFFFFFFF
    if field >= 255:
        return (sign << 31) | 0x7F800000
    guard, rest, lsb = (n >> 3) & 1, n & 7, (n >> 4) & 1
    word = ((field << 23) | ((n >> 4) & 0x7FFFFF)) + (guard & int(rest != 0 or lsb))
    return (sign << 31) | word                     # a carry to 255 << 23 is the infinity


def fp32_mul_bits(a: int, b: int) -> int:
    """:func:`fp32_mul` of two bit patterns, with integer operations in the order of
    :class:`rtl.fp32.Fp32Mul`'s stages.

    The significands (24 bits, the hidden bit 0 for subnormals, whose exponent counts as 1)
    multiply exactly into 48 bits ``P``; ``e = e_a + e_b - 126`` is the exponent field of
    the result if ``P``'s top bit were set. With ``lz`` the leading zeros of ``P`` and ``k
    = e - 1``: ``P`` moves left by ``lz`` where ``lz <= k`` (a normal result, field ``e -
    lz``), else left by ``k`` where ``k >= 0`` (a subnormal), else right by ``-k`` with the
    bits shifted out kept as a sticky bit (a subnormal or zero); bits 47..24 are then the
    significand, bit 23 the guard bit and the rest sticky, rounded to nearest even with one
    increment of the packed field and fraction as in :func:`fp32_add_bits`.

    Parameters
    ----------
    a, b : int
        float32 bit patterns in ``[0, 2**32)``.

    Returns
    -------
    int
        The bit pattern of the product.
    """
    # Stage 1: unpack, the special values, the exponent, the exact product.
    sa, ea, fa = a >> 31, (a >> 23) & 0xFF, a & 0x7FFFFF
    sb, eb, fb = b >> 31, (b >> 23) & 0xFF, b & 0x7FFFFF
    sign = sa ^ sb
    a_nan, b_nan = ea == 255 and fa != 0, eb == 255 and fb != 0
    a_inf, b_inf = ea == 255 and fa == 0, eb == 255 and fb == 0
    a_zero, b_zero = (a & 0x7FFFFFFF) == 0, (b & 0x7FFFFFFF) == 0
    if a_nan or b_nan or (a_inf and b_zero) or (b_inf and a_zero):
        return CANONICAL_NAN
    if a_inf or b_inf:
        return (sign << 31) | 0x7F800000
    if a_zero or b_zero:
        return sign << 31
    ma, mb = fa | ((ea != 0) << 23), fb | ((eb != 0) << 23)
    e = max(ea, 1) + max(eb, 1) - 126
    p = ma * mb                                   # 48 bits, not zero
    # Stages 2-4: leading zeros, the shift and the exponent field.
    lz = 48 - p.bit_length()
    k = e - 1
    if lz <= k:
        n, sticky, field = (p << lz) & (2**48 - 1), 0, e - lz
    elif k >= 0:
        n, sticky, field = p << k, 0, 0
    else:
        r = min(-k, 49)
        n, sticky, field = p >> r, int(p & ((1 << r) - 1) != 0), 0
    # Stage 5: the overflow and the rounding bit; stage 6: the increment, packed.
    if field >= 255:
        return (sign << 31) | 0x7F800000
    guard, lsb = (n >> 23) & 1, (n >> 24) & 1
    rest = int(n & 0x7FFFFF != 0) | sticky
    word = ((field << 23) | ((n >> 24) & 0x7FFFFF)) + (guard & (rest | lsb))
    return (sign << 31) | word
