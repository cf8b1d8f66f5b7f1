"""IEEE binary32 addition on bit patterns: the specification of :class:`rtl.fp32.Fp32Add`.

:func:`fp32_add` is numpy's float32 ``a + b`` (round to nearest, ties to even; subnormals in
and out; +-inf on overflow; ``-0 + -0 = -0`` and ``x + (-x) = +0``) with every NaN result
replaced by the canonical quiet NaN :data:`CANONICAL_NAN`. :func:`fp32_add_bits` is the same
function with integer operations only, stage by stage as the hardware computes it; the tests
check it against :func:`fp32_add`.
"""

from __future__ import annotations

import numpy as np

__all__ = ["CANONICAL_NAN", "fp32_add", "fp32_add_bits"]

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
    a, b = _bits("a_bits", a_bits), _bits("b_bits", b_bits)
    try:
        a, b = np.broadcast_arrays(a, b)
    except ValueError as exc:
        raise ValueError(f"a_bits and b_bits must broadcast together: {exc}") from None
    with np.errstate(all="ignore"):
        s = np.asarray(a.view(np.float32) + b.view(np.float32), np.float32)
    out = s.view(np.uint32).copy()
    out[np.isnan(s)] = CANONICAL_NAN
    return out


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
