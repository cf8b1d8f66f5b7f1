"""Convolutions as implicit GEMMs on BFP8 tile blocks, and pooling: the golden model of record.

The engine generates a convolution's operand addresses from a :class:`ConvGeometry`; these
functions read the BFP8 tensors in place through the same index maps and compute, bit for
bit, what the datapath's K-block mode computes (:func:`sim.models.bfp.gemm_kruns`: each K
run's exact int32 partial rescaled once to float32, the runs summed in float32 in K order).

The layout (``CHWN``)
    An activation or delta with C channels over a batch of N images of H x W is the matrix
    ``X[c, q]`` of C rows and ``Q = H * W * N`` columns, position ``q = (h * W + w) * N + n``
    (batch innermost), stored as BFP8 tile blocks (:func:`sim.models.bfp.quantize_tiles`).
    A convolution's output ``C[co, p]`` (positions ``p = (oh * OW + ow) * N + n``) is the next
    layer's input as written. Weights are a stack of one ``Cout x Cin`` tile-blocked matrix
    per kernel offset, offsets in row-major order (:func:`weight_stack`).

The three GEMMs
    forward (:func:`conv2d_forward`)
        ``C[co, p] = sum_(dy, dx, ci) W[dy, dx][co, ci] * X[ci, q(p, dy, dx)]``; K runs are
        (kernel offset, block of T input channels), offsets in row-major order.
    backward-data (:func:`conv2d_backward_data`)
        ``dX[ci, q] = sum_(dy, dx, co) W[dy, dx][co, ci] * D[co, p(q, dy, dx)]``: the
        convolution of D with the 180-degree-rotated kernel, channel roles swapped; K runs
        are (kernel offset, block of T output channels), offsets in the rotated kernel's
        row-major order (the forward order reversed). Positions that no output reads (padding,
        or between the strided positions) contribute nothing: no zeros are stored.
    weight gradient (:func:`conv2d_weight_grad`)
        ``G[dy, dx][co, ci] = sum_p D[co, p] * X[ci, q(p, dy, dx)]``, K = the output
        positions in stored order, cut into runs by :meth:`ConvGeometry.weight_grad_runs`.

Padding reads as zero and takes no memory traffic; a run's partial over zeros is +0 whatever
its exponent, and adding +0 never changes the float32 sum (which is never -0), so the
engine may skip such runs or columns without changing a bit.

Pooling (:func:`max_pool`, :func:`avg_pool`, :func:`global_avg_pool` and their backward
passes) works on float32 matrices in the same layout, window offsets in row-major order.

The write path (:func:`conv_epilogue`)
    A convolution descriptor's C goes through the stages of
    :func:`sim.models.bfp.epilogue` with two more: a forward pass pools C after ReLU
    (:class:`Pooling`; ReLU's mask is the pool's input's, the argmax the output's), and a
    backward-data pass first routes C through a pool's backward pass (``unpool``: through
    the stored argmax for max pooling), so the delta leaves in the pool's input layout where
    the mask applies. A weight gradient's C is a stack (:func:`quantize_stack`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sim.models import bfp
from sim.models.bfp import _check_block, gemm_kruns, tile_grid
from sim.models.golden import MAX_K

__all__ = ["LAYOUT", "ConvGeometry", "pool_geometry", "pool_tile_columns", "b_group",
           "walked_offsets",
           "activation_matrix", "activation_tensor", "unfold",
           "weight_stack", "weight_tensor", "conv2d_forward", "conv2d_backward_data",
           "conv2d_weight_grad", "bias_grad", "position_runs", "tile_columns", "weight_grad_offset",
           "max_pool", "max_pool_backward", "avg_pool", "avg_pool_backward", "global_avg_pool",
           "global_avg_pool_backward", "ARGMAX_DTYPE", "POOL_KINDS", "Pooling", "pool",
           "unpool", "ConvEpilogue", "conv_epilogue", "quantize_stack", "dequantize_stack"]

#: The position order of an activation matrix's columns: ``q = (h * W + w) * N + n``.
LAYOUT = "CHWN"

#: The dtype of max-pooling's argmax indices (``ceil(log2(kh * kw))`` bits of each are used).
ARGMAX_DTYPE = np.uint8


# --------------------------------------------------------------------------- geometry

def _pair(name: str, value, minimum: int) -> tuple[int, int]:
    items = value if isinstance(value, (tuple, list)) else (value, value)
    if len(items) != 2:
        raise ValueError(f"{name} must be an int or a pair of ints, not {value!r}")
    out = []
    for v in items:
        if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)):
            raise TypeError(f"{name} must be an int or a pair of ints, not {value!r}")
        if int(v) < minimum:
            raise ValueError(f"{name} must be at least {minimum}, not {value!r}")
        out.append(int(v))
    return out[0], out[1]


def _positive(name: str, value) -> int:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be an int, not {value!r}")
    if int(value) < 1:
        raise ValueError(f"{name} must be at least 1, not {value}")
    return int(value)


@dataclass(frozen=True)
class ConvGeometry:
    """A 2-D convolution's shape: the descriptor the engine generates addresses from.

    Parameters
    ----------
    batch, channels, height, width : int
        The input: N images of C channels, H x W each.
    out_channels : int
        Cout.
    kernel : int or (int, int)
        The kernel's height and width.
    stride, padding, dilation : int or (int, int)
        As :func:`torch.nn.functional.conv2d` takes them (padding is zeros, on both sides).

    Attributes
    ----------
    kernel, stride, padding, dilation : tuple of int
        The pairs, ``(vertical, horizontal)``.
    out_height, out_width : int
        ``(H + 2 * pad - dil * (k - 1) - 1) // stride + 1`` along each axis.
    positions, out_positions : int
        ``H * W * N`` and ``OH * OW * N``: the columns of the input and output matrices.
    offsets : tuple of (int, int)
        The kernel offsets ``(dy, dx)`` in row-major order: the forward K order.

    Raises
    ------
    TypeError
        An argument is not an int (or a pair of ints).
    ValueError
        A size is below 1 (padding below 0), naming the argument; or the dilated kernel
        does not fit the padded input (naming ``height`` or ``width``).
    """

    batch: int
    channels: int
    height: int
    width: int
    out_channels: int
    kernel: int | tuple[int, int]
    stride: int | tuple[int, int] = 1
    padding: int | tuple[int, int] = 0
    dilation: int | tuple[int, int] = 1

    def __post_init__(self):
        for name in ("batch", "channels", "height", "width", "out_channels"):
            object.__setattr__(self, name, _positive(name, getattr(self, name)))
        for name, minimum in (("kernel", 1), ("stride", 1), ("padding", 0), ("dilation", 1)):
            object.__setattr__(self, name, _pair(name, getattr(self, name), minimum))
        for axis, name in enumerate(("height", "width")):
            span = self.dilation[axis] * (self.kernel[axis] - 1) + 1
            size = getattr(self, name) + 2 * self.padding[axis]
            if span > size:
                raise ValueError(f"{name} {getattr(self, name)} with padding "
                                 f"{self.padding[axis]} is smaller than the dilated kernel "
                                 f"({span})")

    @property
    def out_height(self) -> int:
        return (self.height + 2 * self.padding[0] - self.dilation[0] * (self.kernel[0] - 1)
                - 1) // self.stride[0] + 1

    @property
    def out_width(self) -> int:
        return (self.width + 2 * self.padding[1] - self.dilation[1] * (self.kernel[1] - 1)
                - 1) // self.stride[1] + 1

    @property
    def positions(self) -> int:
        return self.height * self.width * self.batch

    @property
    def out_positions(self) -> int:
        return self.out_height * self.out_width * self.batch

    @property
    def offsets(self) -> tuple[tuple[int, int], ...]:
        return tuple((dy, dx) for dy in range(self.kernel[0]) for dx in range(self.kernel[1]))

    def implicit_gemm(self, mode: int) -> tuple[int, int, int, int]:
        """The GEMM a descriptor of ``mode`` runs, as the engine schedules it.

        The multiply-accumulates leave out the kernel offsets whose reads are all padding
        (forward) or that no output reads (backward-data), per image position: with the
        batch innermost a tile of columns holds one position's images, so when the batch
        fills the tiles nothing else is a product. The engine still steps the array through
        those offsets, on zero rows (:meth:`k_runs`). The weight gradient is
        ``D * im2col(X)^T``: ``Cout`` rows, one column per (kernel offset, input channel), K
        the output positions.

        Parameters
        ----------
        mode : {1, 2, 3}
            Forward, backward-data, weight gradient (``DESC_CONV.MODE``).

        Returns
        -------
        (m, n, k, macs)
            C's rows and columns, the mean reduction length (rounded up) and the exact
            multiply-accumulates.
        """
        kk = len(self.offsets)
        if mode == 3:
            m, n, k = self.out_channels, kk * self.channels, self.out_positions
            return m, n, k, m * n * k
        if mode not in (1, 2):
            raise ValueError(f"mode must be 1, 2 or 3, not {mode!r}")
        one = ConvGeometry(1, 1, self.height, self.width, 1, self.kernel, self.stride,
                           self.padding, self.dilation)
        index = one.input_index if mode == 1 else one.output_index
        pairs = sum(int((index(dy, dx) >= 0).sum()) for dy, dx in self.offsets)
        if mode == 1:
            m, n, per = self.out_channels, self.out_positions, self.channels
        else:
            m, n, per = self.channels, self.positions, self.out_channels
        macs = m * per * pairs * self.batch
        return m, n, -(-macs // (m * n)), macs

    def k_runs(self, mode: int, *, block: int = 32) -> tuple[int, ...]:
        """The K runs of a tile of a forward (``mode`` 1) or backward-data (2) descriptor
        as the engine walks them, each rescaled on its own (the datapath's K blocks): one
        per kernel offset and block of at most ``block`` channels it reduces over (forward
        the input's, backward-data the output's), for every kernel offset -- where a tile
        reads only padding the walker loads zero rows and the array computes them. A layer
        of fewer channels than ``block`` has runs shorter than a tile block.

        Raises
        ------
        ValueError
            ``mode`` is not 1 or 2.
        """
        if mode not in (1, 2):
            raise ValueError(f"mode must be 1 or 2, not {mode!r}")
        block = _check_block(block)
        per = self.channels if mode == 1 else self.out_channels
        one = (block,) * (per // block) + ((per % block,) if per % block else ())
        return one * len(self.offsets)

    def compulsory_bytes(self, mode: int) -> tuple[int, int, int]:
        """The int8 operand bytes a descriptor of ``mode`` must read at least, and C's
        elements: ``(A, B, C)``. A is the weight stack (forward and backward-data; every
        offset's matrix is read once, whichever positions use it) or the deltas (weight
        gradient); B the input (only where some kernel offset reads it: a strided 1 x 1
        convolution reads a quarter) or the deltas; C the output, the input's gradient or
        the stack."""
        stack = len(self.offsets) * self.out_channels * self.channels
        d = self.out_channels * self.out_positions
        one = ConvGeometry(1, 1, self.height, self.width, 1, self.kernel, self.stride,
                           self.padding, self.dilation)
        read = np.zeros(self.height * self.width, bool)
        for dy, dx in one.offsets:
            at = one.input_index(dy, dx)
            read[at[at >= 0]] = True
        x = self.channels * self.batch * int(read.sum())
        if mode == 1:
            return stack, x, d
        if mode == 2:
            return stack, d, self.channels * self.positions
        if mode == 3:
            return d, x, stack
        raise ValueError(f"mode must be 1, 2 or 3, not {mode!r}")

    def _check_offset(self, dy, dx) -> None:
        for name, v, k in (("dy", dy, self.kernel[0]), ("dx", dx, self.kernel[1])):
            if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)):
                raise TypeError(f"{name} must be an int, not {type(v).__name__}")
            if not 0 <= v < k:
                raise ValueError(f"{name} must lie in [0, {k}), not {v}")

    def input_index(self, dy: int, dx: int) -> np.ndarray:
        """The input column each output position reads at kernel offset ``(dy, dx)``.

        Parameters
        ----------
        dy, dx : int
            The kernel offset.

        Returns
        -------
        numpy.ndarray of int64, shape (out_positions,)
            ``q = (h * W + w) * N + n`` for output position ``p = (oh * OW + ow) * N + n``,
            with ``h = oh * sy + dy * ry - py`` and ``w = ow * sx + dx * rx - px``
            (s the stride, r the dilation, p the padding); -1 where ``(h, w)`` is padding.
        """
        self._check_offset(dy, dx)
        oh, ow, n = np.meshgrid(np.arange(self.out_height), np.arange(self.out_width),
                                np.arange(self.batch), indexing="ij")
        h = oh * self.stride[0] + dy * self.dilation[0] - self.padding[0]
        w = ow * self.stride[1] + dx * self.dilation[1] - self.padding[1]
        valid = (h >= 0) & (h < self.height) & (w >= 0) & (w < self.width)
        q = (h * self.width + w) * self.batch + n
        return np.where(valid, q, -1).reshape(-1).astype(np.int64)

    def output_index(self, dy: int, dx: int) -> np.ndarray:
        """The output position that reads each input column at kernel offset ``(dy, dx)``:
        the inverse of :meth:`input_index`, the backward-data GEMM's read of the deltas.

        Parameters
        ----------
        dy, dx : int
            The kernel offset.

        Returns
        -------
        numpy.ndarray of int64, shape (positions,)
            ``p`` with ``input_index(dy, dx)[p] == q`` for each input column ``q``, or -1 where
            no output position reads ``q`` at this offset (it lies in no window, or between
            the strided positions).
        """
        self._check_offset(dy, dx)
        h, w, n = np.meshgrid(np.arange(self.height), np.arange(self.width),
                              np.arange(self.batch), indexing="ij")
        ty = h + self.padding[0] - dy * self.dilation[0]
        tx = w + self.padding[1] - dx * self.dilation[1]
        oh, ow = ty // self.stride[0], tx // self.stride[1]
        valid = ((ty % self.stride[0] == 0) & (tx % self.stride[1] == 0) & (oh >= 0)
                 & (oh < self.out_height) & (ow >= 0) & (ow < self.out_width))
        p = (oh * self.out_width + ow) * self.batch + n
        return np.where(valid, p, -1).reshape(-1).astype(np.int64)

    def weight_grad_runs(self, dy: int, dx: int, *,
                         block: int = 32) -> list[tuple[int, int, int]]:
        """The K runs of the weight gradient at kernel offset ``(dy, dx)``.

        K is the output positions ``p`` in stored order. A run ends at every multiple of ``T``
        (the deltas' tile columns) and before every position whose input column lies in
        another tile column of ``X`` (``q // T``) than the run's earlier positions; padding
        positions join the run they fall in and never end one.

        Parameters
        ----------
        dy, dx : int
            The kernel offset.
        block : int
            The tile size ``T``.

        Returns
        -------
        list of (start, stop, tile)
            ``[start, stop)`` of each run in order, and the tile column ``q // T`` of ``X``
            it reads (-1 for a run of padding only).
        """
        return position_runs(self.input_index(dy, dx), block=block)


def position_runs(index: np.ndarray, *, block: int = 32) -> list[tuple[int, int, int]]:
    """Cut a reduction over positions into K runs of constant tile column: the rule of
    :meth:`ConvGeometry.weight_grad_runs` for any index map.

    Parameters
    ----------
    index : numpy.ndarray of int, shape (K,)
        The column of ``X`` read at each step of K, -1 for padding.
    block : int
        The tile size ``T``.

    Returns
    -------
    list of (start, stop, tile)
        A run ends at every multiple of ``T`` and before every step whose tile column
        ``index // T`` differs from that of the run's earlier non-padding steps; ``tile`` is
        the run's tile column (-1 when it is all padding).

    Raises
    ------
    TypeError, ValueError
        ``block`` is not one of :data:`sim.models.bfp.BLOCKS`; ``index`` is not a non-empty
        integer vector.
    """
    block = _check_block(block)
    if not isinstance(index, np.ndarray) or index.ndim != 1 or index.dtype.kind not in "iu" \
            or not index.size:
        raise ValueError("index must be a non-empty integer vector")
    k = index.size
    steps = np.arange(k)
    tiles = np.where(index >= 0, index // block, -1)
    last = np.maximum.accumulate(np.where(tiles >= 0, steps, -1))   # last valid step <= p
    prev = np.concatenate(([-1], last[:-1]))                          # last valid step < p
    same_block = prev >= steps - steps % block
    cut = (steps % block == 0) | ((tiles >= 0) & same_block
                                  & (tiles != tiles[np.maximum(prev, 0)]))
    starts = np.flatnonzero(cut)
    stops = np.append(starts[1:], k)
    ends = last[stops - 1]
    run_tiles = np.where(ends >= starts, tiles[np.maximum(ends, 0)], -1)
    return [(int(a), int(b), int(t)) for a, b, t in zip(starts, stops, run_tiles, strict=True)]


def tile_columns(geometry: ConvGeometry, mode: int, cols: int) -> np.ndarray:
    """Where each tile of an implicit GEMM's C columns reads B at each kernel offset: the
    addresses :class:`rtl.convcursor.ConvCursor` generates.

    With the batch a multiple of ``cols``, a tile of ``cols`` consecutive columns of C holds
    one image position's images, so at each kernel offset it reads ``cols`` consecutive
    columns of B, or only padding.

    Parameters
    ----------
    geometry : ConvGeometry
    mode : {1, 2}
        Forward (C's columns the output positions, B the input; :meth:`ConvGeometry.input_index`)
        or backward-data (C's columns the input positions, B the deltas;
        :meth:`ConvGeometry.output_index`).
    cols : int
        The tile's columns (the array's), dividing the batch.

    Returns
    -------
    numpy.ndarray of int64, shape (tiles, offsets)
        Row ``t`` for the tile of C's columns ``t * cols`` on, column ``i`` for the ``i``-th
        kernel offset in K order (forward: row-major; backward-data: reversed, the rotated
        kernel's row-major order): B's column read by the tile's first lane, the others
        following it; -1 where the tile reads only padding (forward) or no output position
        reads its columns (backward-data).

    Raises
    ------
    TypeError, ValueError
        ``mode`` is not 1 or 2, ``cols`` is not a positive int or does not divide the batch.
    """
    g = _check_geometry(geometry)
    if mode not in (1, 2) or isinstance(mode, bool):
        raise ValueError(f"mode must be 1 or 2, not {mode!r}")
    cols = _positive("cols", cols)
    if g.batch % cols:
        raise ValueError(f"cols {cols} must divide the batch ({g.batch})")
    index = g.input_index if mode == 1 else g.output_index
    order = g.offsets if mode == 1 else g.offsets[::-1]
    out = []
    for dy, dx in order:
        tiles = index(dy, dx).reshape(-1, cols)
        first = tiles[:, 0]
        # (one position's images: all read, consecutive, or none)
        expect = np.where(first[:, None] >= 0, first[:, None] + np.arange(cols), -1)
        assert (tiles == expect).all()
        out.append(first)
    return np.stack(out, axis=1)


def walked_offsets(geometry: ConvGeometry, mode: int, cols: int,
                   side: int) -> tuple[tuple[bool, ...], ...]:
    """The kernel offsets the walker (:class:`rtl.walker.Walker`) walks (their K runs,
    :meth:`ConvGeometry.k_runs`) in each block of ``side`` tiles of C's columns of a
    forward (without pooling phases) or backward-data descriptor: the first and the last,
    and each between them where a tile of the block reads B (:func:`tile_columns`); an
    offset that no tile of the block reads B at is probed and skipped.

    Returns
    -------
    tuple of tuple of bool
        One per block of columns (``side * cols`` columns each, in order), one per kernel
        offset in K order.

    Raises
    ------
    TypeError, ValueError
        As :func:`tile_columns`; ``side`` not a positive int.
    """
    g = _check_geometry(geometry)
    side = _positive("side", side)
    inside = tile_columns(g, mode, cols) >= 0          # (tiles, offsets)
    out = []
    for t in range(0, inside.shape[0], side):
        walk = inside[t:t + side].any(axis=0)
        walk[0] = walk[-1] = True
        out.append(tuple(bool(v) for v in walk))
    return tuple(out)


def b_group(batch: int, cols: int, side: int) -> int:
    """The tiles of C's columns whose B the walker (:class:`rtl.walker.Walker`) loads as one
    job in a forward or backward-data convolution: the largest power of two dividing both
    ``batch // cols`` (the tiles of one position's images, which read consecutive columns
    of B at every kernel offset, or only padding) and the block's side ``side`` (so that
    no group straddles two blocks). 1 where ``cols`` does not divide ``batch`` (a tile's
    columns then span positions: the RTL refuses such a convolution, the functional model
    counts its B a tile a job).

    Raises
    ------
    TypeError, ValueError
        An argument is not a positive int.
    """
    batch, cols, side = (_positive(n, v) for n, v in (("batch", batch), ("cols", cols),
                                                       ("side", side)))
    if batch % cols:
        return 1
    per_pos = batch // cols
    return min(per_pos & -per_pos, side & -side)


def pool_tile_columns(geometry: ConvGeometry, pool, cols: int,
                      mode: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """The addresses :class:`rtl.convcursor.ConvCursor` generates for a forward convolution
    whose output a pool of ``pool`` windows (their stride the same) reads on the write path:
    C's columns are the pool's output positions, each tile walked once per *phase* ``(a,
    b)`` of the window, in row-major order, a phase reading the convolution's output
    position ``(poh * ph + a, pow * pw + b)``. With ``mode`` 2, for a backward-data
    convolution whose C (at its input, the pool's output) is routed back through the pool:
    each tile is walked once per phase, reading B as :func:`tile_columns` says, and written
    at the pool's input position ``(h * ph + a, w * pw + b)``.

    Parameters
    ----------
    geometry : ConvGeometry
        The convolution.
    pool : int or (int, int)
        The window ``(ph, pw)``, dividing the output's height and width.
    cols : int
        The tile's columns, dividing the batch.
    mode : {1, 2}
        Forward, or backward-data.

    Returns
    -------
    b_columns : numpy.ndarray of int64, shape (tiles, phases, offsets)
        As :func:`tile_columns` for each tile of the pool's output and phase.
    c_columns : numpy.ndarray of int64, shape (tiles, phases)
        The column of the pool's input (forward: the convolution's C; backward-data: where
        the deltas are written) of the tile's first lane at the phase.

    Raises
    ------
    TypeError, ValueError
        As :func:`tile_columns`; a window that does not divide the output.
    """
    g = _check_geometry(geometry)
    ph, pw = _pair("pool", pool, 1)
    if mode == 2:
        conv = tile_columns(g, 2, cols)           # a tile per (h, w, images)
        per = g.batch // cols
        c = [[((h * ph + a) * g.width * pw + w * pw + bb) * g.batch + k * cols
              for a in range(ph) for bb in range(pw)]
             for h in range(g.height) for w in range(g.width) for k in range(per)]
        return (np.repeat(conv[:, None, :], ph * pw, axis=1), np.array(c, np.int64))
    if mode != 1:
        raise ValueError(f"mode must be 1 or 2, not {mode!r}")
    if g.out_height % ph or g.out_width % pw:
        raise ValueError(f"pool {(ph, pw)} must divide the output ({g.out_height} x "
                         f"{g.out_width})")
    conv = tile_columns(g, 1, cols)               # a tile per (oh, ow, images)
    per = g.batch // cols
    b, c = [], []
    for poh in range(g.out_height // ph):
        for pow_ in range(g.out_width // pw):
            for k in range(per):
                tiles = [((poh * ph + a) * g.out_width + pow_ * pw + bb) * per + k
                         for a in range(ph) for bb in range(pw)]
                b.append(conv[tiles])
                c.append([t * cols for t in tiles])
    return np.stack(b), np.array(c, np.int64)


def pool_geometry(batch: int, channels: int, height: int, width: int, kernel,
                  stride=None, dilation=1) -> ConvGeometry:
    """The geometry of a pooling layer: a :class:`ConvGeometry` with ``out_channels ==
    channels`` and no padding; ``stride`` defaults to ``kernel``.

    Returns
    -------
    ConvGeometry

    Raises
    ------
    TypeError, ValueError
        As :class:`ConvGeometry`.
    """
    return ConvGeometry(batch, channels, height, width, channels, kernel,
                        kernel if stride is None else stride, 0, dilation)


# --------------------------------------------------------------------------- layouts

def activation_matrix(x: np.ndarray) -> np.ndarray:
    """An NCHW tensor as the ``C x (H * W * N)`` matrix of the CHWN layout.

    Parameters
    ----------
    x : numpy.ndarray, shape (N, C, H, W)

    Returns
    -------
    numpy.ndarray, shape (C, H * W * N)
        ``x[n, c, h, w]`` at row ``c``, column ``(h * W + w) * N + n`` (a contiguous copy).

    Raises
    ------
    ValueError
        ``x`` is not 4-D.
    """
    if not isinstance(x, np.ndarray) or x.ndim != 4:
        raise ValueError(f"x must be a 4-D (N, C, H, W) array, not {getattr(x, 'shape', x)!r}")
    n, c, h, w = x.shape
    return np.ascontiguousarray(x.transpose(1, 2, 3, 0).reshape(c, h * w * n))


def unfold(x: np.ndarray, geometry: ConvGeometry) -> np.ndarray:
    """A convolution's input unfolded (im2col in the CHWN layout): the matrix that makes the
    convolution a plain GEMM of the weights as one ``Cout x (Cin * kh * kw)`` matrix
    (``weight.reshape(Cout, -1)`` of an ``(Cout, Cin, kh, kw)`` tensor).

    Parameters
    ----------
    x : numpy.ndarray, shape (Cin, H * W * N)
        The input as an activation matrix.
    geometry : ConvGeometry

    Returns
    -------
    numpy.ndarray, shape (Cin * kh * kw, OH * OW * N), x's dtype
        Row ``(ci * kh + dy) * kw + dx`` is ``x``'s row ``ci`` read at
        :meth:`ConvGeometry.input_index` ``(dy, dx)``: zero where that is padding.

    Raises
    ------
    TypeError, ValueError
        ``geometry`` is not a :class:`ConvGeometry`; ``x`` is not its input's matrix.
    """
    g = _check_geometry(geometry)
    if not isinstance(x, np.ndarray) or x.shape != (g.channels, g.positions):
        raise ValueError(f"x must be the {g.channels} x {g.positions} input matrix, not "
                         f"{getattr(x, 'shape', type(x).__name__)}")
    out = np.zeros((g.channels, len(g.offsets), g.out_positions), x.dtype)
    for k, (dy, dx) in enumerate(g.offsets):
        idx = g.input_index(dy, dx)
        inside = idx >= 0
        out[:, k, inside] = x[:, idx[inside]]
    return out.reshape(-1, g.out_positions)


def activation_tensor(m: np.ndarray, batch: int, height: int, width: int) -> np.ndarray:
    """The inverse of :func:`activation_matrix`.

    Parameters
    ----------
    m : numpy.ndarray, shape (C, H * W * N)
    batch, height, width : int
        N, H and W.

    Returns
    -------
    numpy.ndarray, shape (N, C, H, W)

    Raises
    ------
    ValueError
        ``m`` is not 2-D or its columns are not ``height * width * batch``.
    """
    if not isinstance(m, np.ndarray) or m.ndim != 2 or m.shape[1] != height * width * batch:
        raise ValueError(f"m must have shape (C, {height * width * batch}), "
                         f"not {getattr(m, 'shape', m)!r}")
    return np.ascontiguousarray(m.reshape(m.shape[0], height, width, batch).transpose(3, 0, 1, 2))


def weight_stack(w: np.ndarray) -> np.ndarray:
    """Torch-ordered weights ``(Cout, Cin, kh, kw)`` as the stack of one ``Cout x Cin``
    matrix per kernel offset, offsets in row-major order.

    Parameters
    ----------
    w : numpy.ndarray, shape (Cout, Cin, kh, kw)

    Returns
    -------
    numpy.ndarray, shape (kh * kw, Cout, Cin)
        ``w[co, ci, dy, dx]`` at ``[dy * kw + dx, co, ci]``; quantise each offset's matrix
        with :func:`sim.models.bfp.quantize_tiles`.

    Raises
    ------
    ValueError
        ``w`` is not 4-D.
    """
    if not isinstance(w, np.ndarray) or w.ndim != 4:
        raise ValueError(f"w must be a 4-D (Cout, Cin, kh, kw) array, "
                         f"not {getattr(w, 'shape', w)!r}")
    co, ci, kh, kw = w.shape
    return np.ascontiguousarray(w.transpose(2, 3, 0, 1).reshape(kh * kw, co, ci))


def weight_tensor(stack: np.ndarray, kernel) -> np.ndarray:
    """The inverse of :func:`weight_stack`.

    Parameters
    ----------
    stack : numpy.ndarray, shape (kh * kw, Cout, Cin)
    kernel : int or (int, int)

    Returns
    -------
    numpy.ndarray, shape (Cout, Cin, kh, kw)

    Raises
    ------
    ValueError
        ``stack`` is not 3-D with ``kh * kw`` matrices.
    """
    kh, kw = _pair("kernel", kernel, 1)
    if not isinstance(stack, np.ndarray) or stack.ndim != 3 or stack.shape[0] != kh * kw:
        raise ValueError(f"stack must have shape ({kh * kw}, Cout, Cin), "
                         f"not {getattr(stack, 'shape', stack)!r}")
    _, co, ci = stack.shape
    return np.ascontiguousarray(stack.reshape(kh, kw, co, ci).transpose(2, 3, 0, 1))


# --------------------------------------------------------------------------- argument checks

def _check_geometry(geometry) -> ConvGeometry:
    if not isinstance(geometry, ConvGeometry):
        raise TypeError(f"geometry must be a ConvGeometry, not {type(geometry).__name__}")
    return geometry


def _check_array(name: str, x, dtype, shape) -> np.ndarray:
    if not isinstance(x, np.ndarray):
        raise TypeError(f"{name} must be a numpy.ndarray of dtype {np.dtype(dtype)}, "
                        f"not {type(x).__name__}")
    if x.dtype != dtype:
        raise TypeError(f"{name} must have dtype {np.dtype(dtype)}, not {x.dtype}")
    if x.shape != tuple(shape):
        raise ValueError(f"{name} must have shape {tuple(shape)}, not {x.shape}")
    return x


def _check_tiles(name: str, q, exp, shape, block: int) -> None:
    """A tile-blocked matrix: int8 mantissas of ``shape`` and their int8 exponent grid."""
    _check_array(name, q, np.int8, shape)
    _check_array(f"{name}_exp", exp, np.int8, tile_grid(shape, block=block))


def _check_stack(name: str, q, exp, count: int, shape, block: int) -> None:
    _check_array(name, q, np.int8, (count, *shape))
    _check_array(f"{name}_exp", exp, np.int8, (count, *tile_grid(shape, block=block)))


def _gather(q: np.ndarray, exp: np.ndarray, idx: np.ndarray, block: int):
    """Columns ``idx`` of a tile-blocked matrix as the engine reads them: the mantissas
    (zero where ``idx < 0``) and each column's exponent per row block (0 there)."""
    valid = idx >= 0
    safe = np.where(valid, idx, 0)
    cols = np.where(valid[None, :], q[:, safe], np.int8(0)).astype(np.int8)
    col_exp = np.where(valid[None, :], exp[:, safe // block], np.int8(0)).astype(np.int8)
    return cols, col_exp


def _row_exp(exp_row: np.ndarray, rows: int, block: int) -> np.ndarray:
    """One exponent per row of a tile column: ``exp_row[m // T]`` as an ``(rows, 1)`` grid."""
    return np.ascontiguousarray(np.repeat(exp_row, block)[:rows, None])


# --------------------------------------------------------------------------- the three GEMMs

def _sum_runs(a, a_exp, b, b_exp, stops):
    """``op(a) @ op(b)`` with ``op(b) = b.T``, K cut at ``stops``: what
    :func:`sim.models.bfp.gemm_kruns` defines (``S = +0``; ``S = float32(S + term)`` per
    run, each term the run's rescaled exact partial), batched where the runs are uniform."""
    # (in calls of whole runs of at most MAX_K steps, the int32 partials' bound, each
    # continuing the float32 sum)
    total, first = np.zeros((a.shape[0], b.shape[0]), np.float32), 0
    while first < len(stops):
        base = stops[first - 1] if first else 0
        last = first
        while last + 1 < len(stops) and stops[last + 1] - base <= MAX_K:
            last += 1
        cut = [s - base for s in stops[first:last + 1]]
        total = gemm_kruns(a[:, base:stops[last]], a_exp[:, first:last + 1],
                           b[:, base:stops[last]], b_exp[first:last + 1], cut,
                           transpose_b=True, start=total)
        first = last + 1
    return total


def conv2d_forward(x: np.ndarray, x_exp: np.ndarray, w: np.ndarray, w_exp: np.ndarray,
                   geometry: ConvGeometry, *, block: int = 32) -> np.ndarray:
    """The forward convolution ``W * X`` as the datapath computes it from BFP8 operands.

    Parameters
    ----------
    x : numpy.ndarray of int8, shape (channels, positions)
        The input's mantissas in the CHWN layout.
    x_exp : numpy.ndarray of int8
        Their tile exponents, shape ``tile_grid(x.shape)``.
    w : numpy.ndarray of int8, shape (kh * kw, out_channels, channels)
        The weight stack's mantissas (:func:`weight_stack`).
    w_exp : numpy.ndarray of int8, shape (kh * kw, ceil(out_channels / T), ceil(channels / T))
        Each offset's tile exponents.
    geometry : ConvGeometry
    block : int
        The tile size ``T``.

    Returns
    -------
    numpy.ndarray of float32, shape (out_channels, out_positions)
        ``S = +0``; for each kernel offset ``o = (dy, dx)`` in row-major order and each block
        ``j`` of ``T`` input channels: ``S = float32(S + rescale(P, E))`` with ``P[co, p]`` the
        exact int32 sum over the block of ``w[o, co, ci] * x[ci, q]``, ``q =
        geometry.input_index(dy, dx)[p]`` (0 where padding), and ``E[co, p] =
        w_exp[o, co // T, j] + x_exp[j, q // T]`` (0 for padding's exponent).

    Raises
    ------
    TypeError
        An array has the wrong type or dtype, ``geometry`` is not a :class:`ConvGeometry`.
    ValueError
        An array's shape does not match ``geometry``; ``block`` is not one of
        :data:`sim.models.bfp.BLOCKS`.
    """
    g = _check_geometry(geometry)
    block = _check_block(block)
    kk, cin, cout = len(g.offsets), g.channels, g.out_channels
    _check_tiles("x", x, x_exp, (cin, g.positions), block)
    _check_stack("w", w, w_exp, kk, (cout, cin), block)
    total = np.zeros((cout, g.out_positions), np.float32)
    for o, (dy, dx) in enumerate(g.offsets):
        cols, col_exp = _gather(x, x_exp, g.input_index(dy, dx), block)
        for j, lo in enumerate(range(0, cin, block)):
            hi = min(lo + block, cin)
            total = total + gemm_kruns(w[o][:, lo:hi], _row_exp(w_exp[o][:, j], cout, block),
                                       cols[lo:hi], col_exp[j:j + 1], [hi - lo])
    return total


def conv2d_backward_data(d: np.ndarray, d_exp: np.ndarray, w: np.ndarray, w_exp: np.ndarray,
                         geometry: ConvGeometry, *, block: int = 32) -> np.ndarray:
    """The backward-data convolution: the gradient with respect to the input.

    Parameters
    ----------
    d : numpy.ndarray of int8, shape (out_channels, out_positions)
        The deltas' mantissas (the gradient with respect to the output), CHWN layout.
    d_exp : numpy.ndarray of int8
        Their tile exponents.
    w, w_exp : numpy.ndarray of int8
        The weight stack as for :func:`conv2d_forward`, read transposed.
    geometry : ConvGeometry
        The forward convolution's geometry.
    block : int

    Returns
    -------
    numpy.ndarray of float32, shape (channels, positions)
        ``S = +0``; for each kernel offset ``o = (dy, dx)`` in the order of the 180-degree
        rotated kernel (row-major over ``(kh - 1 - dy, kw - 1 - dx)``, the forward order
        reversed) and each block ``j`` of ``T`` output channels: ``S = float32(S +
        rescale(P, E))``, ``P[ci, q]`` the exact int32 sum over the block of ``w[o, co, ci] *
        d[co, p]``, ``p = geometry.output_index(dy, dx)[q]`` (0 where no output reads ``q``),
        ``E[ci, q] = w_exp[o, j, ci // T] + d_exp[j, p // T]``.

    Raises
    ------
    TypeError, ValueError
        As :func:`conv2d_forward`.
    """
    g = _check_geometry(geometry)
    block = _check_block(block)
    kk, cin, cout = len(g.offsets), g.channels, g.out_channels
    _check_tiles("d", d, d_exp, (cout, g.out_positions), block)
    _check_stack("w", w, w_exp, kk, (cout, cin), block)
    total = np.zeros((cin, g.positions), np.float32)
    for o in reversed(range(kk)):
        dy, dx = g.offsets[o]
        cols, col_exp = _gather(d, d_exp, g.output_index(dy, dx), block)
        for j, lo in enumerate(range(0, cout, block)):
            hi = min(lo + block, cout)
            total = total + gemm_kruns(w[o][lo:hi], _row_exp(w_exp[o][j], cin, block),
                                       cols[lo:hi], col_exp[j:j + 1], [hi - lo],
                                       transpose_a=True)
    return total


def conv2d_weight_grad(d: np.ndarray, d_exp: np.ndarray, x: np.ndarray, x_exp: np.ndarray,
                       geometry: ConvGeometry, *, block: int = 32) -> np.ndarray:
    """The weight gradient ``D * X^T`` with K = the output positions.

    Parameters
    ----------
    d, d_exp : numpy.ndarray of int8
        The deltas as for :func:`conv2d_backward_data`.
    x, x_exp : numpy.ndarray of int8
        The forward input as for :func:`conv2d_forward`, read transposed.
    geometry : ConvGeometry
    block : int

    Returns
    -------
    numpy.ndarray of float32, shape (kh * kw, out_channels, channels)
        Per kernel offset ``o = (dy, dx)``, with the runs ``(start, stop, t)`` of
        :meth:`ConvGeometry.weight_grad_runs`: ``S = +0``; for each run in order ``S =
        float32(S + rescale(P, E))``, ``P[co, ci]`` the exact int32 sum over ``p`` in the run
        of ``d[co, p] * x[ci, q]`` (``q = geometry.input_index(dy, dx)[p]``, 0 where
        padding), ``E[co, ci] = d_exp[co // T, start // T] + x_exp[ci // T, t]`` (0 for
        ``x``'s part when ``t = -1``). Each offset is its own sum (a stack as
        :func:`weight_stack` lays it out).

    Raises
    ------
    TypeError, ValueError
        As :func:`conv2d_forward`.
    """
    g = _check_geometry(geometry)
    block = _check_block(block)
    cin, cout = g.channels, g.out_channels
    _check_tiles("d", d, d_exp, (cout, g.out_positions), block)
    _check_tiles("x", x, x_exp, (cin, g.positions), block)
    out = np.zeros((len(g.offsets), cout, cin), np.float32)
    for o, (dy, dx) in enumerate(g.offsets):
        out[o] = weight_grad_offset(d, d_exp, x, x_exp, g.input_index(dy, dx), block=block)
    return out


def weight_grad_offset(d: np.ndarray, d_exp: np.ndarray, x: np.ndarray, x_exp: np.ndarray,
                       index: np.ndarray, *, block: int = 32) -> np.ndarray:
    """One kernel offset's weight gradient for any index map: ``sum_p d[:, p] *
    x[:, index[p]]``, K cut into the runs of :func:`position_runs`.

    Parameters
    ----------
    d, d_exp : numpy.ndarray of int8
        The deltas (M x K) and their tile exponents.
    x, x_exp : numpy.ndarray of int8
        The input (C x Q) and its tile exponents.
    index : numpy.ndarray of int, shape (K,)
        The column of ``x`` each step of K reads; -1 reads zero.
    block : int

    Returns
    -------
    numpy.ndarray of float32, shape (M, C)
        As :func:`conv2d_weight_grad` gives each offset.

    Raises
    ------
    TypeError, ValueError
        An array's dtype or shape is wrong, or ``index`` points outside ``x``.
    """
    block = _check_block(block)
    if not isinstance(d, np.ndarray) or d.ndim != 2 or not isinstance(x, np.ndarray) \
            or x.ndim != 2:
        raise ValueError("d and x must be 2-D matrices")
    _check_tiles("d", d, d_exp, d.shape, block)
    _check_tiles("x", x, x_exp, x.shape, block)
    if not isinstance(index, np.ndarray) or index.shape != (d.shape[1],) \
            or index.dtype.kind not in "iu" or (index >= x.shape[1]).any():
        raise ValueError(f"index must be an integer vector of {d.shape[1]} columns of x")
    m, c = d.shape[0], x.shape[0]
    valid = index >= 0
    cols = np.where(valid[None, :], x[:, np.where(valid, index, 0)], np.int8(0))
    runs = position_runs(index, block=block)
    starts = np.array([r[0] for r in runs])
    tiles = np.array([r[2] for r in runs])
    a_exp = np.repeat(d_exp[:, starts // block], block, axis=0)[:m]               # (M, R)
    b_exp = np.where(tiles[:, None] >= 0,
                     np.repeat(x_exp[:, np.maximum(tiles, 0)], block, axis=0)[:c].T,
                     0)                                                          # (R, C)
    return _sum_runs(d, a_exp.astype(np.int8), cols.astype(np.int8), b_exp.astype(np.int8),
                     [r[1] for r in runs])


def bias_grad(d: np.ndarray, d_exp: np.ndarray, *, block: int = 32) -> np.ndarray:
    """The bias gradient of a weight-gradient descriptor (``DESC_CONV.BIAS_GRAD``): the
    sums of the deltas' rows.

    Per row ``r``: ``S = +0``; for each tile column ``t`` of ``d`` in order ``S =
    float32(S + rescale(P, E))``, ``P`` the exact int32 sum of ``d[r, t*T:(t+1)*T]`` and
    ``E = d_exp[r // T, t]``. This is :func:`weight_grad_offset` of a row of ones
    (:func:`sim.models.bfp.ones_row`) against ``d``, a 1 x 1 kernel's weight gradient, bit
    for bit.

    Parameters
    ----------
    d, d_exp : numpy.ndarray of int8
        The deltas (``Cout x K``, K the output positions) and their tile exponents.
    block : int

    Returns
    -------
    numpy.ndarray of float32, shape (Cout,)

    Raises
    ------
    TypeError, ValueError
        As :func:`weight_grad_offset`.
    """
    block = _check_block(block)
    if not isinstance(d, np.ndarray) or d.ndim != 2:
        raise ValueError("d must be a 2-D matrix")
    k = d.shape[1]
    return weight_grad_offset(*bfp.ones_row(k, block=block), d, d_exp, np.arange(k),
                              block=block)[0]


# --------------------------------------------------------------------------- pooling

def _check_pool(x, geometry, name="x", out=False) -> ConvGeometry:
    g = _check_geometry(geometry)
    if g.out_channels != g.channels:
        raise ValueError(f"geometry must have out_channels == channels for pooling, not "
                         f"{g.out_channels} != {g.channels}")
    if g.padding != (0, 0):
        raise ValueError(f"geometry must have no padding for pooling, not {g.padding}")
    cols = g.out_positions if out else g.positions
    _check_array(name, x, np.float32, (g.channels, cols))
    return g


def _reciprocal(count: int) -> np.float32:
    """The float32 nearest to ``1 / count`` (IEEE division)."""
    return np.float32(1.0) / np.float32(count)


def max_pool(x: np.ndarray, geometry: ConvGeometry) -> tuple[np.ndarray, np.ndarray]:
    """Max pooling of a float32 activation matrix, with the argmax of each window.

    Parameters
    ----------
    x : numpy.ndarray of float32, shape (channels, positions)
        CHWN layout.
    geometry : ConvGeometry
        The window (kernel, stride, dilation), from :func:`pool_geometry`.

    Returns
    -------
    y : numpy.ndarray of float32, shape (channels, out_positions)
        The window's maximum: starting from the window's first element, the window offsets
        in row-major order replace the running maximum when strictly greater (``v > y``), so
        ties and ``-0 / +0`` keep the earliest, and a NaN never replaces it.
    argmax : numpy.ndarray of uint8, shape (channels, out_positions)
        The row-major window offset ``dy * kw + dx`` of the element ``y`` took.

    Raises
    ------
    TypeError, ValueError
        ``x`` is not float32 or does not match ``geometry``; ``geometry`` has padding, a
        window over 256 elements, or ``out_channels != channels``.
    """
    g = _check_pool(x, geometry)
    if len(g.offsets) > 256:
        raise ValueError(f"geometry's window must have at most 256 elements, not "
                         f"{len(g.offsets)}")
    y = x[:, g.input_index(0, 0)]
    arg = np.zeros(y.shape, ARGMAX_DTYPE)
    for i, (dy, dx) in enumerate(g.offsets[1:], 1):
        v = x[:, g.input_index(dy, dx)]
        better = v > y
        y = np.where(better, v, y)
        arg[better] = i
    return np.ascontiguousarray(y, np.float32), arg


def max_pool_backward(dy: np.ndarray, argmax: np.ndarray,
                      geometry: ConvGeometry) -> np.ndarray:
    """Route the deltas of a max pool through its argmax.

    Parameters
    ----------
    dy : numpy.ndarray of float32, shape (channels, out_positions)
    argmax : numpy.ndarray of uint8, shape (channels, out_positions)
        From :func:`max_pool`.
    geometry : ConvGeometry

    Returns
    -------
    numpy.ndarray of float32, shape (channels, positions)
        ``dx = +0``; for each window offset ``i`` in row-major order, ``dx[c, q] =
        float32(dx[c, q] + dy[c, p])`` where ``argmax[c, p] == i`` and ``q`` is the input
        offset ``i`` of ``p`` reads. Without overlapping windows each input takes at most one
        delta (a ``-0`` delta arrives as ``+0``).

    Raises
    ------
    TypeError, ValueError
        As :func:`max_pool`; ``argmax`` of the wrong dtype or shape.
    """
    g = _check_pool(dy, geometry, "dy", out=True)
    _check_array("argmax", argmax, ARGMAX_DTYPE, dy.shape)
    dx = np.zeros((g.channels, g.positions), np.float32)
    for i, (oy, ox) in enumerate(g.offsets):
        idx = g.input_index(oy, ox)          # distinct columns at one offset
        dx[:, idx] = dx[:, idx] + np.where(argmax == i, dy, np.float32(0.0))
    return dx


def avg_pool(x: np.ndarray, geometry: ConvGeometry) -> np.ndarray:
    """Average pooling of a float32 activation matrix.

    Parameters
    ----------
    x : numpy.ndarray of float32, shape (channels, positions)
    geometry : ConvGeometry
        The window, from :func:`pool_geometry`.

    Returns
    -------
    numpy.ndarray of float32, shape (channels, out_positions)
        ``s = +0``; ``s = float32(s + v)`` over the window in row-major order; then
        ``float32(s * r)`` with ``r`` the float32 nearest to ``1 / (kh * kw)`` (exact when
        ``kh * kw`` is a power of two).

    Raises
    ------
    TypeError, ValueError
        As :func:`max_pool`.
    """
    g = _check_pool(x, geometry)
    s = np.zeros((g.channels, g.out_positions), np.float32)
    for dy, dx in g.offsets:
        s = s + x[:, g.input_index(dy, dx)]
    return s * _reciprocal(len(g.offsets))


def avg_pool_backward(dy: np.ndarray, geometry: ConvGeometry) -> np.ndarray:
    """The backward pass of :func:`avg_pool`.

    Parameters
    ----------
    dy : numpy.ndarray of float32, shape (channels, out_positions)
    geometry : ConvGeometry

    Returns
    -------
    numpy.ndarray of float32, shape (channels, positions)
        ``g = float32(dy * r)`` (``r`` as in :func:`avg_pool`); ``dx = +0``; for each window
        offset in row-major order, ``dx[c, q] = float32(dx[c, q] + g[c, p])`` for the input
        ``q`` that ``p`` reads at that offset.

    Raises
    ------
    TypeError, ValueError
        As :func:`max_pool`.
    """
    g = _check_pool(dy, geometry, "dy", out=True)
    share = dy * _reciprocal(len(g.offsets))
    dx = np.zeros((g.channels, g.positions), np.float32)
    for oy, ox in g.offsets:
        idx = g.input_index(oy, ox)
        dx[:, idx] = dx[:, idx] + share
    return dx


def _global(x, batch, height, width, name):
    for arg, v in (("batch", batch), ("height", height), ("width", width)):
        if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)):
            raise TypeError(f"{arg} must be an int, not {type(v).__name__}")
        if v < 1:
            raise ValueError(f"{arg} must be at least 1, not {v}")
    if not isinstance(x, np.ndarray) or x.ndim != 2:
        raise ValueError(f"{name} must be a 2-D matrix, not {getattr(x, 'shape', x)!r}")
    return pool_geometry(batch, x.shape[0], height, width, (height, width))


def global_avg_pool(x: np.ndarray, batch: int, height: int, width: int) -> np.ndarray:
    """Global average pooling: :func:`avg_pool` with one ``height x width`` window.

    Parameters
    ----------
    x : numpy.ndarray of float32, shape (C, H * W * N)
    batch, height, width : int

    Returns
    -------
    numpy.ndarray of float32, shape (C, N)
        Each image's channel mean: the sum over the positions in stored order from +0, times
        the float32 nearest to ``1 / (height * width)``. In the CHWN layout this is the
        ``features x batch`` matrix a fully connected layer reads.

    Raises
    ------
    TypeError, ValueError
        ``x`` is not a float32 matrix of ``height * width * batch`` columns, or a size is not
        a positive int.
    """
    return avg_pool(x, _global(x, batch, height, width, "x"))


def global_avg_pool_backward(dy: np.ndarray, batch: int, height: int,
                             width: int) -> np.ndarray:
    """The backward pass of :func:`global_avg_pool` (:func:`avg_pool_backward`).

    Parameters
    ----------
    dy : numpy.ndarray of float32, shape (C, N)
    batch, height, width : int

    Returns
    -------
    numpy.ndarray of float32, shape (C, H * W * N)

    Raises
    ------
    TypeError, ValueError
        As :func:`global_avg_pool`.
    """
    return avg_pool_backward(dy, _global(dy, batch, height, width, "dy"))


# --------------------------------------------------------------------------- the write path

#: The pooling stages of the write path: ``DESC_POOL.KIND`` 0 and 1.
POOL_KINDS = ("max", "avg")


@dataclass(frozen=True)
class Pooling:
    """A pooling stage of a convolution's write path.

    Parameters
    ----------
    kind : {"max", "avg"}
        :func:`max_pool` (with its argmax) or :func:`avg_pool`; a global average pool is
        ``"avg"`` with one window over the image.
    geometry : ConvGeometry
        The pool's window over its input (:func:`pool_geometry`: no padding, ``out_channels
        == channels``).

    Raises
    ------
    TypeError, ValueError
        ``kind`` is not one of :data:`POOL_KINDS`, ``geometry`` is not a pooling geometry,
        or a max pool's window has over 256 elements.
    """

    kind: str
    geometry: ConvGeometry

    def __post_init__(self):
        if self.kind not in POOL_KINDS:
            raise ValueError(f"kind must be one of {POOL_KINDS}, not {self.kind!r}")
        g = _check_geometry(self.geometry)
        if g.out_channels != g.channels or g.padding != (0, 0):
            raise ValueError("geometry must be a pooling geometry (pool_geometry): "
                             "out_channels == channels and no padding")
        if self.kind == "max" and len(g.offsets) > 256:
            raise ValueError(f"a max pool's window must have at most 256 elements, not "
                             f"{len(g.offsets)}")


def _check_pooling(pooling) -> Pooling:
    if not isinstance(pooling, Pooling):
        raise TypeError(f"pooling must be a Pooling, not {type(pooling).__name__}")
    return pooling


def pool(v: np.ndarray, pooling: Pooling) -> tuple[np.ndarray, np.ndarray | None]:
    """The forward pooling stage: :func:`max_pool` (value and argmax) or :func:`avg_pool`
    (value and None)."""
    p = _check_pooling(pooling)
    if p.kind == "max":
        return max_pool(v, p.geometry)
    return avg_pool(v, p.geometry), None


def unpool(dy: np.ndarray, pooling: Pooling, argmax: np.ndarray | None = None) -> np.ndarray:
    """The backward pooling stage: :func:`max_pool_backward` through ``argmax`` (needed for
    ``"max"``) or :func:`avg_pool_backward`.

    Raises
    ------
    TypeError, ValueError
        As those functions; a max pool without ``argmax``.
    """
    p = _check_pooling(pooling)
    if p.kind == "max":
        if argmax is None:
            raise ValueError("argmax is needed to route deltas through a max pool")
        return max_pool_backward(dy, argmax, p.geometry)
    return avg_pool_backward(dy, p.geometry)


@dataclass
class ConvEpilogue:
    """What :func:`conv_epilogue` writes back: :class:`sim.models.bfp.Epilogue`'s fields
    (``value``, ``q``, ``exp`` over C as written; ``mask`` over the pool's input) and the
    max pool's ``argmax`` (uint8, over C as written; None without one)."""

    value: np.ndarray
    q: np.ndarray | None
    exp: np.ndarray | None
    mask: np.ndarray | None
    argmax: np.ndarray | None


def conv_epilogue(c: np.ndarray, *, bias: np.ndarray | None = None, relu: bool = False,
                  mask_in: np.ndarray | None = None, pool_out: Pooling | None = None,
                  unpool_in: Pooling | None = None, argmax: np.ndarray | None = None,
                  residual: np.ndarray | None = None, out: str = "fp32",
                  rounding: str = "nearest", seed: int = 0, block: int = 32) -> ConvEpilogue:
    """A convolution descriptor's write path, per element, in this order::

        unpool_in: v = unpool(c, unpool_in, argmax)      (backward-data: the pool's input)
        residual:  v = v + residual                      (float32, DESC_CONV.ADD)
        bias, relu, mask_in: as sim.models.bfp.epilogue (bias one per row, a channel's)
        pool_out:  v, argmax = pool(v, pool_out)         (forward: the pool's output)
        out:       v as float32, or quantize_tiles(v, block, rounding, seed)

    Parameters
    ----------
    c : numpy.ndarray of float32, shape (channels, positions)
        The implicit GEMM's result.
    bias, relu, mask_in, out, rounding, seed, block
        As :func:`sim.models.bfp.epilogue` takes them (``bias_axis="row"``; ``mask_in`` and
        ReLU's mask have the shape after ``unpool_in``, before ``pool_out``).
    pool_out, unpool_in : Pooling, optional
        A pooling stage after ReLU, or a pool's backward pass before the bias; not both.
    argmax : numpy.ndarray of uint8, optional
        ``unpool_in``'s argmax (a max pool's, shape of ``c``).
    residual : numpy.ndarray of float32, optional
        A matrix of the shape ReLU's mask has, added before the bias: a residual
        connection's shortcut (forward), or another path's deltas (backward-data); on the
        device a BFP8 matrix, dequantised exactly.

    Returns
    -------
    ConvEpilogue

    Raises
    ------
    TypeError, ValueError
        As :func:`sim.models.bfp.epilogue`, :func:`pool` and :func:`unpool`; both pooling
        stages; a shape that does not match a stage's geometry.
    """
    if pool_out is not None and unpool_in is not None:
        raise ValueError("pool_out and unpool_in: a descriptor has one pooling stage")
    v = c
    if unpool_in is not None:
        v = unpool(c, unpool_in, argmax)
    if residual is not None:
        if not isinstance(residual, np.ndarray) or residual.dtype != np.float32 \
                or residual.shape != v.shape:
            raise TypeError(f"residual must be a float32 array of shape {v.shape}, not "
                            f"{getattr(residual, 'dtype', type(residual).__name__)} "
                            f"{getattr(residual, 'shape', '')}")
        v = (v + residual).astype(np.float32)
    r = bfp.epilogue(v, bias=bias, bias_axis="row", relu=relu, mask_in=mask_in, out="fp32")
    v, arg = r.value, None
    if pool_out is not None:
        v, arg = pool(v, pool_out)
    if out == "fp32":
        return ConvEpilogue(v, None, None, r.mask, arg)
    if out != "bfp8":
        raise ValueError(f"out must be 'fp32' or 'bfp8', not {out!r}")
    if not np.isfinite(v).all():
        raise ValueError("c must give finite values to quantise (it gives inf or NaN)")
    q, exp = bfp.quantize_tiles(v, block=block, rounding=rounding, seed=seed)
    return ConvEpilogue(v, q, exp, r.mask, arg)


def quantize_stack(x: np.ndarray, *, block: int = 32, rounding: str = "nearest",
                   seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Quantise a stack of matrices (a convolution's weights, :func:`weight_stack`) to BFP8:
    each matrix in its own tile blocks, the random bits of stochastic rounding those of its
    rows in the stack.

    Parameters
    ----------
    x : numpy.ndarray of float32, shape (offsets, M, N)
    block, rounding, seed
        As :func:`sim.models.bfp.quantize_tiles`.

    Returns
    -------
    q : numpy.ndarray of int8, shape (offsets, M, N)
    exp : numpy.ndarray of int8, shape (offsets, ceil(M/T), ceil(N/T))
        Matrix ``o`` is ``quantize_tiles(x[o], ..., row0=o * M)``.

    Raises
    ------
    TypeError, ValueError
        ``x`` is not a 3-D float32 array; as :func:`sim.models.bfp.quantize_tiles`.
    """
    if not isinstance(x, np.ndarray) or x.dtype != np.float32 or x.ndim != 3 or not x.size:
        raise TypeError(f"x must be a non-empty float32 (offsets, M, N) array, not "
                        f"{getattr(x, 'dtype', type(x).__name__)} {getattr(x, 'shape', '')}")
    parts = [bfp.quantize_tiles(np.ascontiguousarray(x[o]), block=block, rounding=rounding,
                                seed=seed, row0=o * x.shape[1]) for o in range(x.shape[0])]
    return np.stack([p[0] for p in parts]), np.stack([p[1] for p in parts])


def dequantize_stack(q: np.ndarray, exp: np.ndarray, *, block: int = 32) -> np.ndarray:
    """The inverse of :func:`quantize_stack` (exact): ``(offsets, M, N)`` float32."""
    return np.stack([bfp.dequantize_tiles(q[o], exp[o], block=block)
                     for o in range(q.shape[0])])
