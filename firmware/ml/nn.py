"""Layers whose every GEMM runs on a :class:`firmware.Device` in block floating point.

An :class:`Engine` decides where the GEMMs run: ``precision="fp32"`` computes them in float32
numpy (the reference); ``precision="int8"`` runs them on the Device in 8-bit block floating
point, as Fox et al.'s Algorithm 1 partitions the work:

* each tensor is quantised **once per step** (:func:`firmware.ml.quant.quantize`, stochastic
  rounding): the weights ``W̄`` in the forward pass (reused by backward-data), the input
  activations ``x̄`` in the forward pass (kept in 8 bits, and on the device, for the
  weight gradient), the deltas ``δ̄`` once in the backward pass (for backward-data and the
  weight gradient);
* the quantised tensors go to device memory once (:meth:`firmware.Device.tensor`, into
  buffers reused every step) and the Device's transposes stand in for transposed copies;
* the first layer's backward-data GEMM is skipped (nobody needs the input's gradient).

============================  ===============  ===============  ===========
GEMM of ``y = x W``           A                B                Device call
============================  ===============  ===============  ===========
forward ``x W``               x̄                W̄                ``A B``
backward-data ``δ Wᵀ``        δ̄                W̄                ``A Bᵀ``
weight-gradient ``xᵀ δ``      x̄                δ̄                ``Aᵀ B``
============================  ===============  ===============  ===========

Block granularity is a named policy per tensor (:class:`Blocks`): ``"tensor"`` (one exponent),
``"sample"`` (one per sample of the batch), ``"channel"`` (one per feature / channel: a
column of ``W``, an input feature of ``x``, an output feature of ``δ``) and ``"row"`` (one per
``im2col`` row, i.e. per output position of a convolution; the same as ``"sample"`` for a
fully-connected layer). The default, :data:`FOX`, is Fox et al.'s: one exponent for the
weights, one per sample for the activations and the deltas. Blocks along a GEMM's output rows
or columns become the descriptor's ``row_exp`` / ``col_exp``; blocks along its reduction axis
(per-sample ``x̄`` and ``δ̄`` in the weight gradient, where the batch is the reduction) become
``k_exp``: one descriptor per run of equal exponents, whose exact int32 partial sums the host
combines (:func:`sim.models.golden.gemm_scaled`) — Fox et al.'s per-sample weight-gradient loop.
``Blocks("tensor", "tensor", "tensor")`` (SWALP's big block) makes every GEMM one descriptor
with no host arithmetic. Convolutions quantise ``x`` and ``δ`` in their NCHW layout and then
``im2col`` the 8-bit values (layout only); ``"row"`` quantises the ``im2col`` matrix instead.

The policy ``"tile"`` (:data:`TILE`, ``--blocks tile``) is the accelerator's own format,
BFP8 tile blocks (:mod:`sim.models.bfp`): weights, activations and deltas are each quantised
to one exponent per 32 x 32 tile (:func:`firmware.ml.quant.quantize_tiles`, stochastic
rounding seeded from the Engine's generator, one 64-bit seed per tensor as a descriptor
carries it), and each GEMM is computed as the tile-exponent path computes it: the exact int32
partial of each K block of 32, rescaled once to float32 and accumulated in float32 in K order
(:func:`tile_gemm`, bit for bit :func:`sim.models.bfp.gemm_kblocks`). One quantised copy of
each tensor serves its GEMMs as stored or transposed. The float32 work between the GEMMs
follows the write-back epilogue's order: bias added in float32, then ReLU (forward); the
delta masked by ReLU's mask, then quantised (backward); convolutions quantise their
``im2col`` matrices. These GEMMs run on the host (the ``"wait"`` of the profile).

Bias, activations, pooling and the losses stay in float32 on the host. The Engine's
:class:`firmware.runtime.profile.Profile` times every kind of host work.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from firmware.ml.quant import quantize, quantize_tiles
from firmware.runtime.profile import Profile
from sim.models.bfp import gemm_kblocks
from sim.models.golden import MAX_K

__all__ = ["Engine", "Blocks", "FOX", "BIG_BLOCK", "TILE", "POLICIES", "Q", "tile_gemm",
           "Linear", "Conv2d", "ReLU", "MaxPool2d", "GlobalAvgPool2d", "Flatten", "Residual",
           "Network", "softmax_cross_entropy", "mse"]

#: Block granularities.
POLICIES = ("tensor", "sample", "channel", "row")

#: The tile side of the ``"tile"`` policy (the accelerator's).
TILE_BLOCK = 32


@dataclass(frozen=True)
class Blocks:
    """One exponent per what, for each tensor (see the module documentation)."""

    weights: str = "tensor"
    activations: str = "sample"
    deltas: str = "sample"

    def __post_init__(self):
        names = ("weights", "activations", "deltas")
        values = [getattr(self, name) for name in names]
        if "tile" in values:
            if values != ["tile"] * 3:
                raise ValueError(f"blocks 'tile' applies to every tensor: weights, activations "
                                 f"and deltas must all be 'tile', not {','.join(values)!r}")
            return
        for name, v in zip(names, values, strict=True):
            allowed = ("tensor", "channel") if name == "weights" else POLICIES
            if v not in allowed:
                raise ValueError(f"blocks.{name} must be one of {allowed} (or all 'tile'), "
                                 f"not {v!r}")

    @property
    def tile(self) -> bool:
        """Whether this is the ``"tile"`` policy (BFP8 tile blocks everywhere)."""
        return self.weights == "tile"

    @classmethod
    def parse(cls, text: str) -> Blocks:
        """``"fox"``, ``"tensor"``, ``"tile"`` or ``"W,x,δ"`` such as
        ``"tensor,sample,sample"``."""
        if text == "fox":
            return FOX
        if text == "tensor":
            return BIG_BLOCK
        if text == "tile":
            return TILE
        parts = text.split(",")
        if len(parts) != 3:
            raise ValueError(f"blocks must be 'fox', 'tensor', 'tile' or three policies "
                             f"'weights,activations,deltas', not {text!r}")
        return cls(*parts)

    def __str__(self):
        return f"{self.weights},{self.activations},{self.deltas}"


#: Fox et al.: one exponent for the weights, one per sample for activations and deltas.
FOX = Blocks()
#: SWALP's big block: one exponent per tensor everywhere.
BIG_BLOCK = Blocks("tensor", "tensor", "tensor")
#: The accelerator's format: BFP8 tile blocks (one exponent per 32 x 32 tile) everywhere.
TILE = Blocks("tile", "tile", "tile")


def tile_gemm(a: np.ndarray, a_exp: np.ndarray, b: np.ndarray, b_exp: np.ndarray, *,
              transpose_a: bool = False, transpose_b: bool = False,
              block: int = TILE_BLOCK) -> np.ndarray:
    """``op(A) @ op(B)`` of two matrices in tile blocks, as the accelerator computes it:
    :func:`sim.models.bfp.gemm_kblocks` (which batches its K blocks into one exact matmul),
    with the tile side defaulting to the hardware's.

    Parameters
    ----------
    a, b : numpy.ndarray of int8
        Mantissas as stored (``op(a)`` M x K, ``op(b)`` K x N).
    a_exp, b_exp : numpy.ndarray of int8
        Their tile exponents, as stored (read transposed with their operand).
    transpose_a, transpose_b : bool
    block : int
        The tile side ``T``.

    Returns
    -------
    numpy.ndarray of float32, shape (M, N)

    Raises
    ------
    TypeError, ValueError
        As :func:`sim.models.bfp.gemm_kblocks`.
    """
    return gemm_kblocks(a, a_exp, b, b_exp, transpose_a=transpose_a, transpose_b=transpose_b,
                        block=block)


class Q:
    """A quantised matrix: int8 mantissas and their exponents, with at most one of
    ``row_exp`` (one per row), ``col_exp`` (one per column), ``tile_exp`` (one per tile, the
    ``"tile"`` policy) set, else the scalar ``exp``. ``tensor`` is its device copy once
    uploaded."""

    def __init__(self, data, *, exp=0, row_exp=None, col_exp=None, tile_exp=None):
        self.data, self.exp, self.row_exp, self.col_exp = data, int(exp), row_exp, col_exp
        self.tile_exp = tile_exp
        self.tensor = None


class Engine:
    """Where the GEMMs run; counts them and the accelerator cycles they took.

    Parameters
    ----------
    precision : {"fp32", "int8"}
    device : firmware.Device
        Needed for ``"int8"`` (except with the ``"tile"`` policy, whose GEMMs run on the
        host).
    rounding : {"stochastic", "nearest"}
    rng : numpy.random.Generator
        The stochastic rounding's draws.
    blocks : Blocks
        Block granularity (default :data:`FOX`).
    """

    def __init__(self, precision: str = "fp32", device=None, *, rounding: str = "stochastic",
                 rng: np.random.Generator | None = None, blocks: Blocks = FOX):
        if precision not in ("fp32", "int8"):
            raise ValueError(f"precision must be 'fp32' or 'int8', not {precision!r}")
        if rounding not in ("nearest", "stochastic"):
            raise ValueError(f"rounding must be 'nearest' or 'stochastic', not {rounding!r}")
        if not isinstance(blocks, Blocks):
            raise TypeError(f"blocks must be a firmware.ml.nn.Blocks, not {type(blocks).__name__}")
        if precision == "int8" and device is None and not blocks.tile:
            raise ValueError("precision='int8' needs a device (firmware.Device)")
        self.precision, self.device, self.rounding = precision, device, rounding
        self.rng = rng if rng is not None else np.random.default_rng(0)
        self.blocks = blocks
        self.profile = Profile()
        self.gemms = 0
        self.cycles = 0
        self._slots = {}

    @property
    def int8(self) -> bool:
        return self.precision == "int8"

    def time(self, kind: str):
        return self.profile.time(kind)

    # -- quantisation ------------------------------------------------------------------------
    def quantize(self, x: np.ndarray, axis: int | None) -> tuple[np.ndarray, np.ndarray]:
        """``(q, exp)`` of ``x`` with one exponent per slice along ``axis`` (None: one)."""
        with self.profile.time("quantize"):
            return quantize(np.asarray(x, np.float32), axis=axis, rounding=self.rounding,
                            rng=self.rng)

    def matrix(self, x: np.ndarray, axis: int | None) -> Q:
        """Quantise a matrix with blocks along ``axis`` (0: rows, 1: columns, None: one);
        with the ``"tile"`` policy, to tile blocks whatever ``axis``."""
        if self.blocks.tile:
            with self.profile.time("quantize"):
                q, e = quantize_tiles(np.asarray(x, np.float32), rounding=self.rounding,
                                      rng=self.rng, block=TILE_BLOCK)
            return Q(q, tile_exp=e)
        q, e = self.quantize(x, axis)
        if axis is None:
            return Q(q, exp=e)
        return Q(q, row_exp=e) if axis == 0 else Q(q, col_exp=e)

    def upload(self, q: Q, key) -> None:
        """Put ``q`` on the device (once), in the buffer kept for ``key`` when it fits."""
        if _on_device(q):
            return
        slot = self._slots.get(key)
        if slot is not None and slot.shape == q.data.shape:
            q.tensor = self.device.tensor(q.data, into=slot)
        else:
            if slot is not None:
                slot.free()
            q.tensor = self._slots[key] = self.device.tensor(q.data)

    def close(self) -> None:
        """Free every device buffer the engine keeps (the uploaded weights, activations and
        deltas, one buffer per key), back to the device's pool.

        The engine stays usable: a later GEMM uploads its operands again, including those
        of a :class:`Q` uploaded before. Closing twice does nothing more.

        Notes
        -----
        The buffers go to the pool of :attr:`device`, not to the board's memory:
        :meth:`firmware.Device.close` then gives the pool's idle buffers back::

            eng.close()
            eng.device.close()
        """
        slots, self._slots = self._slots, {}
        for t in slots.values():
            t.free()

    # -- GEMMs -------------------------------------------------------------------------------
    def gemm(self, qa: Q, qb: Q, *, transpose_a: bool = False, transpose_b: bool = False,
             keys=(None, None)) -> np.ndarray:
        """``op(a) @ op(b)`` of two quantised matrices on the device, as float32."""
        return self.queued_gemms([(qa, qb, dict(transpose_a=transpose_a,
                                                transpose_b=transpose_b, keys=keys))])[0]

    def queued_gemms(self, calls) -> list[np.ndarray]:
        """Independent GEMMs queued on the device together (:meth:`firmware.Device.gemms`):
        ``calls`` is a list of ``(qa, qb, options)``, ``options`` the keywords of
        :meth:`gemm`; the results as float32, each bit for bit :meth:`gemm`'s."""
        for i, (_, _, opts) in enumerate(calls):
            unknown = set(opts) - {"transpose_a", "transpose_b", "keys"}
            if unknown:
                raise TypeError(f"calls[{i}] has unknown option(s) {sorted(unknown)}; valid: "
                                f"transpose_a, transpose_b, keys")
        self.gemms += len(calls)
        if self.blocks.tile:           # the tile-exponent path, emulated on the host
            with self.profile.time("wait"):
                return [tile_gemm(qa.data, qa.tile_exp, qb.data, qb.tile_exp,
                                  transpose_a=opts.get("transpose_a", False),
                                  transpose_b=opts.get("transpose_b", False))
                        for qa, qb, opts in calls]
        if any(_reduction(qa, opts.get("transpose_a", False), True) > MAX_K
               for qa, _, opts in calls):
            # K above the int32 accumulator's limit: the GEMM in parts of at most MAX_K
            # steps, added in float32 in K order
            out = []
            for qa, qb, opts in calls:
                ta, tb = opts.get("transpose_a", False), opts.get("transpose_b", False)
                k = _reduction(qa, ta, True)
                parts = self.queued_gemms([
                    (_k_slice(qa, ta, True, s), _k_slice(qb, tb, False, s),
                     dict(transpose_a=ta, transpose_b=tb))
                    for s in (slice(i, min(i + MAX_K, k)) for i in range(0, k, MAX_K))])
                with self.profile.time("combine"):
                    total = parts[0]
                    for part in parts[1:]:
                        total = total + part
                out.append(total)
            return out
        dev = self.device
        dev.profile = self.profile
        args = []
        for qa, qb, opts in calls:
            ta, tb = opts.get("transpose_a", False), opts.get("transpose_b", False)
            for q, key in zip((qa, qb), opts.get("keys", (None, None)), strict=True):
                if key is not None:
                    self.upload(q, key)
            # exponents of A along (M, K) and of B along (K, N)
            a_m, a_k = (qa.col_exp, qa.row_exp) if ta else (qa.row_exp, qa.col_exp)
            b_k, b_n = (qb.col_exp, qb.row_exp) if tb else (qb.row_exp, qb.col_exp)
            k = qa.data.shape[0] if ta else qa.data.shape[1]
            k_exp = np.full(k, qa.exp + qb.exp, np.int16)
            for v in (a_k, b_k):
                if v is not None:
                    k_exp += v
            args.append(dict(a=qa.tensor if _on_device(qa) else qa.data,
                             b=qb.tensor if _on_device(qb) else qb.data,
                             transpose_a=ta, transpose_b=tb,
                             row_exp=a_m if a_m is not None else 0,
                             col_exp=b_n if b_n is not None else 0, k_exp=k_exp))
        out = dev.gemms(args)
        self.cycles += dev.stats.get("cycles") or 0
        return out

    def matmul(self, a, b, *, transpose_a=False, transpose_b=False):
        """``op(a) @ op(b)`` in float32 (the fp32 reference path)."""
        self.gemms += 1
        with self.profile.time("float"):
            oa = a.T if transpose_a else a
            ob = b.T if transpose_b else b
            return oa @ ob           # float32 operands give float32


def _reduction(q: Q, transposed: bool, is_a: bool) -> int:
    """K of a GEMM operand (A's columns, B's rows, as used)."""
    return q.data.shape[0 if transposed == is_a else 1]


def _k_slice(q: Q, transposed: bool, is_a: bool, s: slice) -> Q:
    """The steps ``s`` of an operand's reduction axis, with their exponents."""
    if transposed == is_a:         # K along the stored rows
        return Q(q.data[s], exp=q.exp, row_exp=None if q.row_exp is None else q.row_exp[s],
                 col_exp=q.col_exp)
    return Q(q.data[:, s], exp=q.exp, row_exp=q.row_exp,
             col_exp=None if q.col_exp is None else q.col_exp[s])


def _on_device(q: Q) -> bool:
    """Whether ``q`` has a device copy not freed (:meth:`Engine.close` frees them)."""
    return q.tensor is not None and q.tensor.device is not None


def _axis(policy: str, sample_axis, channel_axis):
    return {"tensor": None, "sample": sample_axis, "channel": channel_axis,
            "tile": None}[policy]


def _patch_blocks(cols, e, policy: str, positions: int, kernel: int) -> Q:
    """The :class:`Q` of ``im2col`` patches of an NCHW tensor quantised with ``policy``'s
    blocks (exponents ``e``): one per tensor, per sample (its ``positions`` patch rows) or
    per channel (its ``kernel`` patch columns)."""
    if policy == "tensor":
        return Q(cols, exp=e)
    if policy == "sample":
        return Q(cols, row_exp=np.repeat(e, positions))
    return Q(cols, col_exp=np.repeat(e, kernel))


def _backward_gemms(eng: Engine, layer, qx: Q, qd: Q, need_input_grad: bool):
    """A layer's weight gradient ``qxᵀ qd`` and, if needed, its input gradient
    ``qd Wᵀ`` (else None), queued together on the device."""
    key = id(layer)
    calls = [(qx, qd, dict(transpose_a=True, keys=((key, "x"), (key, "dy"))))]
    if need_input_grad:
        calls.append((qd, layer.qw, dict(transpose_b=True, keys=((key, "dy"), (key, "W")))))
    dw, *dx = eng.queued_gemms(calls)
    return dw, dx[0] if dx else None


class Layer:
    """A layer: ``forward(x, eng)`` and ``backward(dy, eng)``, float32 arrays in and out.

    Attributes
    ----------
    params : dict
        The trainable arrays by name, updated in place by the optimiser.
    grads : dict
        Their gradients from the last :meth:`backward`.
    """

    params: dict
    grads: dict

    def __init__(self):
        self.params, self.grads = {}, {}


class Linear(Layer):
    """Fully connected layer ``y = x W + b``.

    Parameters
    ----------
    fan_in, fan_out : int
        ``W`` is ``fan_in x fan_out`` (He-uniform initialised); ``b`` has ``fan_out`` zeros.
    rng : numpy.random.Generator
        Draws the initial weights.

    Notes
    -----
    With an int8 :class:`Engine` the forward, backward-data and weight-gradient GEMMs run
    on its device (see the module documentation).
    """

    def __init__(self, fan_in: int, fan_out: int, rng: np.random.Generator):
        super().__init__()
        bound = np.sqrt(6.0 / fan_in)
        self.params = {"W": rng.uniform(-bound, bound, (fan_in, fan_out)).astype(np.float32),
                       "b": np.zeros(fan_out, np.float32)}

    def forward(self, x, eng):
        if not eng.int8:
            self.x = x
            return eng.matmul(x, self.params["W"]) + self.params["b"]
        policy = eng.blocks
        self.qx = eng.matrix(x, _axis("sample" if policy.activations == "row"
                                      else policy.activations, 0, 1))
        self.qw = eng.matrix(self.params["W"], _axis(policy.weights, None, 1))
        y = eng.gemm(self.qx, self.qw, keys=((id(self), "x"), (id(self), "W")))
        return y + self.params["b"]

    def backward(self, dy, eng, need_input_grad: bool = True):
        self.grads["b"] = dy.sum(axis=0).astype(dy.dtype)
        if not eng.int8:
            self.grads["W"] = eng.matmul(self.x, dy, transpose_a=True)
            return eng.matmul(dy, self.params["W"], transpose_b=True) if need_input_grad \
                else None
        policy = eng.blocks
        qd = eng.matrix(dy, _axis("sample" if policy.deltas == "row" else policy.deltas, 0, 1))
        self.grads["W"], dx = _backward_gemms(eng, self, self.qx, qd, need_input_grad)
        return dx


class Conv2d(Layer):
    """2-D convolution (NCHW) as a GEMM over ``im2col`` patches.

    Parameters
    ----------
    cin, cout : int
        Input and output channels.
    k : int
        The square kernel's side; ``W`` is ``(cin * k * k) x cout``.
    rng : numpy.random.Generator
        Draws the initial weights (He-uniform).
    stride, padding : int
        As in PyTorch's ``Conv2d``.
    """

    def __init__(self, cin: int, cout: int, k: int, rng: np.random.Generator, *,
                 stride: int = 1, padding: int = 0):
        super().__init__()
        self.cin, self.cout, self.k, self.stride, self.pad = cin, cout, k, stride, padding
        fan_in = cin * k * k
        bound = np.sqrt(6.0 / fan_in)
        self.params = {"W": rng.uniform(-bound, bound, (fan_in, cout)).astype(np.float32),
                       "b": np.zeros(cout, np.float32)}

    def _cols(self, x):
        """``im2col``: ``(n oh ow) x (c k k)`` patches of an NCHW array (any dtype), columns
        ordered (channel, kernel row, kernel column)."""
        n, c, h, w = x.shape
        k, st, pad = self.k, self.stride, self.pad
        xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad))) if pad else x
        win = np.lib.stride_tricks.sliding_window_view(xp, (k, k), axis=(2, 3))[:, :, ::st, ::st]
        oh, ow = win.shape[2], win.shape[3]                 # n c oh ow k k
        return win.transpose(0, 2, 3, 1, 4, 5).reshape(n * oh * ow, c * k * k), oh, ow

    def _col2im(self, dcols, shape, oh, ow):
        """The adjoint of :meth:`_cols`: patches summed back into an NCHW array."""
        n, c, h, w = shape
        k, st, pad = self.k, self.stride, self.pad
        d = dcols.reshape(n, oh, ow, c, k, k).transpose(0, 3, 1, 2, 4, 5)   # n c oh ow k k
        dxp = np.zeros((n, c, h + 2 * pad, w + 2 * pad), dcols.dtype)
        for i in range(k):
            for j in range(k):
                dxp[:, :, i:i + st * oh:st, j:j + st * ow:st] += d[..., i, j]
        return dxp[:, :, pad:pad + h, pad:pad + w] if pad else dxp

    def _quantized_cols(self, x, eng) -> tuple[Q, int, int]:
        policy = eng.blocks.activations
        if policy in ("row", "tile"):         # per im2col row or tile: quantise the patches
            with eng.time("layout"):
                cols, oh, ow = self._cols(x)
            return eng.matrix(cols, 0), oh, ow
        q, e = eng.quantize(x, _axis(policy, 0, 1))
        with eng.time("layout"):
            cols, oh, ow = self._cols(q)
            return _patch_blocks(cols, e, policy, oh * ow, self.k * self.k), oh, ow

    def forward(self, x, eng):
        n = x.shape[0]
        if not eng.int8:
            cols, oh, ow = self._cols(x)
            self.cache = (x.shape, cols, oh, ow)
            y = eng.matmul(cols, self.params["W"]) + self.params["b"]
        else:
            qcols, oh, ow = self._quantized_cols(x, eng)
            self.cache = (x.shape, qcols, oh, ow)
            self.qw = eng.matrix(self.params["W"], _axis(eng.blocks.weights, None, 1))
            y = eng.gemm(qcols, self.qw, keys=((id(self), "x"), (id(self), "W")))
            y += self.params["b"]
        with eng.time("layout"):
            return y.reshape(n, oh, ow, self.cout).transpose(0, 3, 1, 2)

    def _quantized_deltas(self, dy, eng) -> Q:
        policy = eng.blocks.deltas
        n, _, oh, ow = dy.shape
        if policy in ("row", "tile"):
            with eng.time("layout"):
                mat = dy.transpose(0, 2, 3, 1).reshape(n * oh * ow, self.cout)
            return eng.matrix(mat, 0)
        q, e = eng.quantize(dy, _axis(policy, 0, 1))
        with eng.time("layout"):
            mat = np.ascontiguousarray(q.transpose(0, 2, 3, 1).reshape(n * oh * ow, self.cout))
        if policy == "tensor":
            return Q(mat, exp=e)
        if policy == "sample":
            return Q(mat, row_exp=np.repeat(e, oh * ow))
        return Q(mat, col_exp=e)

    def backward(self, dy, eng, need_input_grad: bool = True):
        shape, cols, oh, ow = self.cache
        n, c, h, w = shape
        self.grads["b"] = dy.sum(axis=(0, 2, 3)).astype(dy.dtype)
        if not eng.int8:
            dy_mat = dy.transpose(0, 2, 3, 1).reshape(n * oh * ow, self.cout)
            self.grads["W"] = eng.matmul(cols, dy_mat, transpose_a=True)
            if not need_input_grad:
                return None
            dcols = eng.matmul(dy_mat, self.params["W"], transpose_b=True)
        else:
            qd = self._quantized_deltas(dy, eng)
            self.grads["W"], dcols = _backward_gemms(eng, self, cols, qd, need_input_grad)
            if not need_input_grad:
                return None
        with eng.time("layout"):
            return self._col2im(dcols, shape, oh, ow)


class ReLU(Layer):
    """``max(x, 0)``, element-wise."""

    def forward(self, x, eng):
        self.mask = x > 0
        return np.where(self.mask, x, x.dtype.type(0))

    def backward(self, dy, eng):
        return np.where(self.mask, dy, dy.dtype.type(0))


class MaxPool2d(Layer):
    """Non-overlapping ``k x k`` max pooling (NCHW).

    Parameters
    ----------
    k : int
        The window's side; the input's height and width must be multiples of it.

    Raises
    ------
    ValueError
        From :meth:`forward`: H or W is not a multiple of ``k``.
    """

    def __init__(self, k: int = 2):
        super().__init__()
        self.k = k

    def forward(self, x, eng):
        n, c, h, w = x.shape
        k = self.k
        if h % k or w % k:
            raise ValueError(f"MaxPool2d({k}) needs H and W divisible by {k}, not {h}x{w}")
        # the gradient goes to the first maximum of each window in row-major order only, so
        # it is not duplicated on ties
        out = x[:, :, 0::k, 0::k].copy()
        winner = np.zeros(out.shape, np.uint8)
        for i in range(1, k * k):
            v = x[:, :, i // k::k, i % k::k]
            better = v > out
            np.copyto(out, v, where=better)
            winner[better] = i
        self.winner, self.shape = winner, x.shape
        return out

    def backward(self, dy, eng):
        k = self.k
        grad = np.zeros(self.shape, dy.dtype)
        for i in range(k * k):
            grad[:, :, i // k::k, i % k::k] = np.where(self.winner == i, dy, dy.dtype.type(0))
        return grad


class Flatten(Layer):
    """``(N, ...)`` to ``(N, -1)``."""

    def forward(self, x, eng):
        self.shape = x.shape
        return x.reshape(x.shape[0], -1)

    def backward(self, dy, eng):
        return dy.reshape(self.shape)


class GlobalAvgPool2d(Layer):
    """The mean over each channel's positions: ``(N, C, H, W)`` to ``(N, C)``, in float32
    (the sum in float64, rounded once)."""

    def forward(self, x, eng):
        self.shape = x.shape
        return x.mean(axis=(2, 3), dtype=np.float64).astype(x.dtype)

    def backward(self, dy, eng):
        n, c, h, w = self.shape
        g = (dy / dy.dtype.type(h * w)).astype(dy.dtype)
        return np.broadcast_to(g[:, :, None, None], self.shape).copy()


class Residual(Layer):
    """``y = body(x) + shortcut(x)``, a residual block (ResNet's).

    Parameters
    ----------
    body : iterable of Layer
        Applied in order to ``x``.
    shortcut : iterable of Layer, optional
        Applied in order to ``x`` (for example a strided 1 x 1 :class:`Conv2d` where the
        block changes the shape); the identity when empty or None.

    Notes
    -----
    :attr:`params` and :attr:`grads` hold the sub-layers' arrays under ``body.<i>.<name>``
    and ``shortcut.<i>.<name>`` (the same arrays: the optimiser updates the sub-layers).
    """

    def __init__(self, body, shortcut=None):
        super().__init__()
        self.body, self.shortcut = list(body), list(shortcut or ())
        if not self.body:
            raise ValueError("body must hold at least one layer")
        self.params = {f"{part}.{i}.{name}": p
                       for part, layers in (("body", self.body), ("shortcut", self.shortcut))
                       for i, layer in enumerate(layers) for name, p in layer.params.items()}

    def forward(self, x, eng):
        y = x
        for layer in self.body:
            y = layer.forward(y, eng)
        s = x
        for layer in self.shortcut:
            s = layer.forward(s, eng)
        return y + s

    def backward(self, dy, eng):
        d_body, d_short = dy, dy
        for layer in reversed(self.body):
            d_body = layer.backward(d_body, eng)
        for layer in reversed(self.shortcut):
            d_short = layer.backward(d_short, eng)
        self.grads = {f"{part}.{i}.{name}": g
                      for part, layers in (("body", self.body), ("shortcut", self.shortcut))
                      for i, layer in enumerate(layers) for name, g in layer.grads.items()}
        return d_body + d_short


class Network:
    """A sequence of layers.

    Parameters
    ----------
    layers : iterable of Layer
        Applied in order by :meth:`forward`, in reverse by :meth:`backward`.
    """

    def __init__(self, layers):
        self.layers = list(layers)

    def forward(self, x, eng):
        for layer in self.layers:
            x = layer.forward(x, eng)
        return x

    def backward(self, dy, eng, need_input_grad: bool = False):
        """Every parameter's gradient, from the loss's gradient w.r.t. the output.

        Parameters
        ----------
        dy : numpy.ndarray
            The loss's gradient w.r.t. the network's output.
        eng : Engine
            Where the GEMMs run.
        need_input_grad : bool
            Run the first layer's backward-data GEMM too.

        Returns
        -------
        numpy.ndarray or None
            The input's gradient with ``need_input_grad``, else None.
        """
        for i in range(len(self.layers) - 1, -1, -1):
            layer = self.layers[i]
            if i == 0 and isinstance(layer, (Linear, Conv2d)):
                return layer.backward(dy, eng, need_input_grad=need_input_grad)
            dy = layer.backward(dy, eng)
            if dy is None:
                return None
        return dy

    def parameters(self):
        """``(name, array)`` of every parameter, in a fixed order."""
        return [(f"{i}.{name}", p) for i, layer in enumerate(self.layers)
                for name, p in layer.params.items()]

    def gradients(self):
        """The gradients, in :meth:`parameters`' order."""
        return [layer.grads[name] for layer in self.layers for name in layer.params]

    def state(self) -> dict:
        """A copy of every parameter, by name."""
        return {name: p.copy() for name, p in self.parameters()}

    def load_state(self, state: dict) -> None:
        """Overwrite the parameters with :meth:`state`'s copies."""
        for name, p in self.parameters():
            p[...] = state[name]


def softmax_cross_entropy(logits, labels):
    """Softmax cross-entropy.

    Parameters
    ----------
    logits : numpy.ndarray
        ``N x classes``.
    labels : numpy.ndarray
        ``N`` integer class labels.

    Returns
    -------
    tuple of (float, numpy.ndarray)
        The mean loss and its float32 gradient w.r.t. ``logits``.
    """
    z = logits - logits.max(axis=1, keepdims=True)
    p = np.exp(z)
    p /= p.sum(axis=1, keepdims=True)
    n = logits.shape[0]
    loss = -np.log(np.maximum(p[np.arange(n), labels], 1e-30)).mean()
    grad = p
    grad[np.arange(n), labels] -= 1
    return float(loss), (grad / n).astype(np.float32)


def mse(pred, target):
    """Mean squared error over every element.

    Parameters
    ----------
    pred, target : numpy.ndarray
        Of the same shape.

    Returns
    -------
    tuple of (float, numpy.ndarray)
        The loss and its float32 gradient w.r.t. ``pred``.
    """
    diff = pred - target
    return float(np.mean(diff ** 2)), (2 * diff / diff.size).astype(np.float32)
