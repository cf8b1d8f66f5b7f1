"""Counter-based random bits: Threefry-2x32-20 and the stochastic-rounding bits.

:func:`threefry2x32` is Random123's Threefry-2x32 with 20 rounds (Salmon et al., "Parallel
random numbers: as easy as 1, 2, 3", SC'11; the generator JAX uses), vectorised over numpy
arrays. :func:`random_bits` derives the 16 random bits of element ``(m, n)`` of a matrix from a
64-bit seed: the bits depend on the seed and the element's coordinates only, not on the order
or the tiles in which the elements are produced, so every board and the golden model agree.
:class:`rtl.prng.RandomLanes` computes the same bits in hardware.
"""

from __future__ import annotations

import numpy as np

__all__ = ["ROTATIONS", "KS_PARITY", "ROUNDS", "threefry2x32", "random_bits", "random_matrix"]

#: Rotation constants of Threefry-2x32, one per round modulo 8.
ROTATIONS = (13, 15, 26, 6, 17, 29, 16, 24)
#: The key schedule's parity constant: ``ks2 = KS_PARITY ^ k0 ^ k1``.
KS_PARITY = 0x1BD11BDA
#: Number of rounds (a key injection after every 4).
ROUNDS = 20

_MASK32 = 0xFFFFFFFF


def _uint32(name: str, x) -> np.ndarray:
    """``x`` as a uint32 array; TypeError for non-integers, ValueError outside [0, 2**32)."""
    return _unsigned(name, x, 32).astype(np.uint32)


def _unsigned(name: str, x, bits: int) -> np.ndarray:
    if isinstance(x, (bool, np.bool_)):
        raise TypeError(f"{name} must be an integer or an integer array, not bool")
    arr = np.asarray(x)
    if arr.dtype == object:
        try:
            ok = all(isinstance(v, (int, np.integer)) and not isinstance(v, bool)
                     for v in arr.flat)
        except TypeError:
            ok = False
        if not ok:
            raise TypeError(f"{name} must hold integers")
        if any(v < 0 or v >= 1 << bits for v in arr.flat):
            raise ValueError(f"{name} must lie in [0, 2**{bits})")
        return arr.astype(np.uint64)
    if not np.issubdtype(arr.dtype, np.integer):
        raise TypeError(f"{name} must be an integer or an integer array, not dtype {arr.dtype}")
    if arr.size:
        if np.issubdtype(arr.dtype, np.signedinteger) and arr.min() < 0:
            raise ValueError(f"{name} must lie in [0, 2**{bits}), not {arr.min()}")
        if int(arr.max()) >= 1 << bits:
            raise ValueError(f"{name} must lie in [0, 2**{bits}), not {arr.max()}")
    return arr.astype(np.uint64)


def _rotl(x: np.ndarray, r: int) -> np.ndarray:
    return (x << np.uint32(r)) | (x >> np.uint32(32 - r))


def threefry2x32(key0, key1, ctr0, ctr1) -> tuple[np.ndarray, np.ndarray]:
    """Threefry-2x32-20 of the counter ``(ctr0, ctr1)`` under the key ``(key0, key1)``.

    Parameters
    ----------
    key0, key1, ctr0, ctr1 : int or array_like of int
        Words in ``[0, 2**32)``; the four are broadcast together.

    Returns
    -------
    (x0, x1) : tuple of numpy.ndarray
        The two output words, uint32 arrays of the broadcast shape.

    Raises
    ------
    TypeError
        If an argument is not integer-valued (the message names it).
    ValueError
        If a word lies outside ``[0, 2**32)`` or the shapes do not broadcast.

    Examples
    --------
    >>> x0, x1 = threefry2x32(0, 0, 0, 0)
    >>> hex(int(x0)), hex(int(x1))
    ('0x6b200159', '0x99ba4efe')
    """
    words = [_uint32(n, v) for n, v in
             (("key0", key0), ("key1", key1), ("ctr0", ctr0), ("ctr1", ctr1))]
    try:
        k0, k1, c0, c1 = np.broadcast_arrays(*words)
    except ValueError as exc:
        raise ValueError(f"key0, key1, ctr0 and ctr1 must broadcast together: {exc}") from None
    ks = (k0, k1, k0 ^ k1 ^ np.uint32(KS_PARITY))
    with np.errstate(over="ignore"):
        x0 = c0 + ks[0]
        x1 = c1 + ks[1]
        for r in range(ROUNDS):
            x0 = x0 + x1
            x1 = _rotl(x1, ROTATIONS[r % 8]) ^ x0
            if r % 4 == 3:
                s = (r + 1) // 4
                x0 = x0 + ks[s % 3]
                x1 = x1 + ks[(s + 1) % 3] + np.uint32(s)
    return x0.astype(np.uint32), x1.astype(np.uint32)


def random_bits(seed: int, m, n) -> np.ndarray:
    """The 16 random bits of element ``(m, n)`` under a 64-bit ``seed``.

    With ``key = (seed & 0xFFFFFFFF, seed >> 32)``, ``ctr = (m, n >> 2)`` and
    ``w = x0 | (x1 << 32)`` from :func:`threefry2x32`, the bits are
    ``(w >> (16 * (n & 3))) & 0xFFFF``: one Threefry block serves four consecutive columns.

    Parameters
    ----------
    seed : int
        The descriptor's seed, in ``[0, 2**64)``.
    m, n : int or array_like of int
        Row and column indices, broadcast together; ``m`` in ``[0, 2**32)``, ``n`` in
        ``[0, 2**34)``.

    Returns
    -------
    numpy.ndarray
        uint16 array of the broadcast shape of ``m`` and ``n``.

    Raises
    ------
    TypeError
        If ``seed``, ``m`` or ``n`` is not integer-valued.
    ValueError
        If one is out of range or ``m`` and ``n`` do not broadcast.

    Examples
    --------
    >>> random_bits(1, np.arange(2)[:, None], np.arange(4)[None, :]).shape
    (2, 4)
    """
    if isinstance(seed, (bool, np.bool_)) or not isinstance(seed, (int, np.integer)):
        raise TypeError(f"seed must be an integer, not {type(seed).__name__}")
    seed = int(seed)
    if not 0 <= seed < 1 << 64:
        raise ValueError(f"seed must lie in [0, 2**64), not {seed}")
    m_arr = _unsigned("m", m, 32)
    n_arr = _unsigned("n", n, 34)
    try:
        m_arr, n_arr = np.broadcast_arrays(m_arr, n_arr)
    except ValueError as exc:
        raise ValueError(f"m and n must broadcast together: {exc}") from None
    x0, x1 = threefry2x32(seed & _MASK32, seed >> 32, m_arr, n_arr >> np.uint64(2))
    lane = (n_arr & np.uint64(3)).astype(np.uint32)
    word = np.where(lane < 2, x0, x1)
    return ((word >> (np.uint32(16) * (lane & np.uint32(1)))) & np.uint32(0xFFFF)).astype(
        np.uint16)


def random_matrix(seed: int, m: int, n: int, *, row0: int = 0) -> np.ndarray:
    """:func:`random_bits` of every element of an ``m x n`` matrix, computed with one
    Threefry block per four columns (it holds their four 16-bit numbers).

    Parameters
    ----------
    seed : int
        The descriptor's seed, in ``[0, 2**64)``.
    m, n : int
        The matrix's rows and columns.
    row0 : int
        The first row's index: a matrix of a stack takes its rows' indices in the stack.

    Returns
    -------
    numpy.ndarray of uint16, shape (m, n)
        Element ``(i, j)`` is ``random_bits(seed, row0 + i, j)``.
    """
    if isinstance(seed, (bool, np.bool_)) or not isinstance(seed, (int, np.integer)):
        raise TypeError(f"seed must be an integer, not {type(seed).__name__}")
    seed = int(seed)
    if not 0 <= seed < 1 << 64:
        raise ValueError(f"seed must lie in [0, 2**64), not {seed}")
    if isinstance(row0, (bool, np.bool_)) or not isinstance(row0, (int, np.integer)) \
            or not 0 <= row0 <= (1 << 32) - m:
        raise ValueError(f"row0 must be an int in [0, 2**32 - m], not {row0!r}")
    quads = -(-n // 4)
    rows = np.arange(int(row0), int(row0) + m, dtype=np.uint32)
    x0, x1 = threefry2x32(seed & _MASK32, seed >> 32, rows[:, None],
                          np.arange(quads, dtype=np.uint32)[None, :])
    bits = np.empty((m, quads, 4), np.uint16)
    for i, (word, shift) in enumerate(((x0, 0), (x0, 16), (x1, 0), (x1, 16))):
        bits[:, :, i] = (word >> np.uint32(shift)) & np.uint32(0xFFFF)
    return bits.reshape(m, 4 * quads)[:, :n]
