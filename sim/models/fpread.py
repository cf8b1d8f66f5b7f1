"""The quantise-only descriptor's source: a float32 matrix walked as C tiles.

The numpy model of record of :class:`rtl.fpread.Fp32TileReader`: the order of the tiles
(:func:`tile_jobs`) and the rows it hands to the BFP8 write-back (:func:`tile_rows`). What
the write-back makes of them is :func:`sim.models.bfp.quantize_tiles`'s.
"""

from __future__ import annotations

import numpy as np

from firmware.spec.regmap import TILE_BLOCK

__all__ = ["tile_jobs", "tile_rows"]


def tile_jobs(m: int, n: int, rows: int, cols: int) -> list[tuple[int, int]]:
    """The ``(m0, n0)`` of each ``rows x cols`` C tile of an ``m x n`` matrix, in walk order:
    units (tile blocks of ``TILE_BLOCK`` a side) row by row, and in each unit its tiles
    inside the matrix row by row."""
    T = TILE_BLOCK
    return [(m0, n0)
            for um in range(0, m, T) for un in range(0, n, T)
            for m0 in range(um, min(um + T, m), rows)
            for n0 in range(un, min(un + T, n), cols)]


def tile_rows(x: np.ndarray, rows: int, cols: int) -> np.ndarray:
    """The beats of ``x`` (float32, ``m x n``) in walk order: ``(tiles, rows, cols)``
    float32, each tile's rows ``m0 .. m0 + rows - 1`` and columns ``n0 .. n0 + cols - 1``,
    zeros beyond the matrix."""
    if not isinstance(x, np.ndarray) or x.dtype != np.float32 or x.ndim != 2:
        raise TypeError(f"x must be a float32 matrix, not "
                        f"{getattr(x, 'dtype', type(x).__name__)} {getattr(x, 'shape', '')}")
    m, n = x.shape
    padded = np.zeros((-(-m // rows) * rows, -(-n // cols) * cols), np.float32)
    padded[:m, :n] = x
    jobs = tile_jobs(m, n, rows, cols)
    return np.stack([padded[m0:m0 + rows, n0:n0 + cols] for m0, n0 in jobs]) if jobs \
        else np.zeros((0, rows, cols), np.float32)
