"""Layers whose every GEMM runs on a :class:`firmware.Device` in block floating point.

A :class:`Engine` decides where the GEMMs run: ``precision="fp32"`` computes them in float32
numpy (the reference); ``precision="int8"`` quantises both operands with
:func:`firmware.quant.quantize` and runs ``Device.gemm`` with the blocks' exponents as
``row_exp`` / ``col_exp``, using the Device's transposes instead of transposed copies:

============================  ======================  ==========================  ===========
GEMM of ``y = x W``           A (exponents)           B (exponents)               Device call
============================  ======================  ==========================  ===========
forward ``x W``               x, per sample           W, per layer                ``A B``
backward-data ``dy Wᵀ``       dy, per sample          W, per layer                ``A Bᵀ``
weight-gradient ``xᵀ dy``     x, per input feature    dy, per output feature      ``Aᵀ B``
============================  ======================  ==========================  ===========

In the weight-gradient GEMM the batch is the reduction dimension, so per-sample exponents
cannot be factored out of the sum; there ``x`` and ``dy`` get one exponent per feature (per
row and column of ``dW``). Bias, activations, pooling and the losses stay in float32.
Convolutions are GEMMs over ``im2col`` patches (one exponent per output position).
"""

from __future__ import annotations

import numpy as np

from .quant import quantize

__all__ = ["Engine", "Linear", "Conv2d", "ReLU", "MaxPool2d", "Flatten", "Network",
           "softmax_cross_entropy", "mse"]


class Engine:
    """Where the GEMMs run; counts them and the accelerator cycles they took."""

    def __init__(self, precision: str = "fp32", device=None, *, rounding: str = "stochastic",
                 rng: np.random.Generator | None = None):
        if precision not in ("fp32", "int8"):
            raise ValueError(f"precision must be 'fp32' or 'int8', not {precision!r}")
        if precision == "int8" and device is None:
            raise ValueError("precision='int8' needs a device (firmware.Device)")
        if rounding not in ("nearest", "stochastic"):
            raise ValueError(f"rounding must be 'nearest' or 'stochastic', not {rounding!r}")
        self.precision, self.device, self.rounding = precision, device, rounding
        self.rng = rng if rng is not None else np.random.default_rng(0)
        self.gemms = 0
        self.cycles = 0

    def matmul(self, a, b, *, transpose_a=False, transpose_b=False, a_block="row",
               b_block="tensor"):
        """``op(a) @ op(b)`` in float32. Blocks: ``"row"`` (per row of ``op(a)``),
        ``"col"`` (per column of ``op(b)``) or ``"tensor"``."""
        self.gemms += 1
        if self.precision == "fp32":
            oa = a.T if transpose_a else a
            ob = b.T if transpose_b else b
            return oa @ ob           # float32 operands give float32
        a_axis = None if a_block == "tensor" else (1 if transpose_a else 0)
        b_axis = None if b_block == "tensor" else (0 if transpose_b else 1)
        qa, ea = quantize(np.ascontiguousarray(a, np.float32), axis=a_axis,
                          rounding=self.rounding, rng=self.rng)
        qb, eb = quantize(np.ascontiguousarray(b, np.float32), axis=b_axis,
                          rounding=self.rounding, rng=self.rng)
        c = self.device.gemm(qa, qb, transpose_a=transpose_a, transpose_b=transpose_b,
                             row_exp=ea, col_exp=eb, out="float32")
        self.cycles += self.device.stats.get("cycles") or 0
        return c


class Layer:
    params: dict
    grads: dict

    def __init__(self):
        self.params, self.grads = {}, {}


class Linear(Layer):
    """``y = x W + b`` with ``W`` of shape ``in x out`` (He-uniform initialised)."""

    def __init__(self, fan_in: int, fan_out: int, rng: np.random.Generator):
        super().__init__()
        bound = np.sqrt(6.0 / fan_in)
        self.params = {"W": rng.uniform(-bound, bound, (fan_in, fan_out)).astype(np.float32),
                       "b": np.zeros(fan_out, np.float32)}

    def forward(self, x, eng):
        self.x = x
        return eng.matmul(x, self.params["W"]) + self.params["b"]

    def backward(self, dy, eng):
        self.grads["W"] = eng.matmul(self.x, dy, transpose_a=True, a_block="row",
                                     b_block="col")
        self.grads["b"] = dy.sum(axis=0).astype(dy.dtype)
        return eng.matmul(dy, self.params["W"], transpose_b=True)


def _im2col_indices(c, h, w, k, stride, pad):
    oh = (h + 2 * pad - k) // stride + 1
    ow = (w + 2 * pad - k) // stride + 1
    i0 = np.repeat(np.arange(k), k)
    i0 = np.tile(i0, c)
    i1 = stride * np.repeat(np.arange(oh), ow)
    j0 = np.tile(np.arange(k), k * c)
    j1 = stride * np.tile(np.arange(ow), oh)
    i = i0.reshape(-1, 1) + i1.reshape(1, -1)
    j = j0.reshape(-1, 1) + j1.reshape(1, -1)
    ch = np.repeat(np.arange(c), k * k).reshape(-1, 1)
    return ch, i, j, oh, ow


class Conv2d(Layer):
    """2-D convolution (NCHW) as a GEMM over ``im2col`` patches; ``W`` is
    ``(cin * k * k) x cout``."""

    def __init__(self, cin: int, cout: int, k: int, rng: np.random.Generator, *,
                 stride: int = 1, padding: int = 0):
        super().__init__()
        self.cin, self.cout, self.k, self.stride, self.pad = cin, cout, k, stride, padding
        fan_in = cin * k * k
        bound = np.sqrt(6.0 / fan_in)
        self.params = {"W": rng.uniform(-bound, bound, (fan_in, cout)).astype(np.float32),
                       "b": np.zeros(cout, np.float32)}

    def forward(self, x, eng):
        n, c, h, w = x.shape
        ch, i, j, oh, ow = _im2col_indices(c, h, w, self.k, self.stride, self.pad)
        xp = np.pad(x, ((0, 0), (0, 0), (self.pad, self.pad), (self.pad, self.pad)))
        cols = xp[:, ch, i, j]                                  # n x (c k k) x (oh ow)
        cols = cols.transpose(0, 2, 1).reshape(n * oh * ow, -1)
        self.cache = (x.shape, cols, oh, ow)
        y = eng.matmul(cols, self.params["W"]) + self.params["b"]
        return y.reshape(n, oh, ow, self.cout).transpose(0, 3, 1, 2)

    def backward(self, dy, eng):
        shape, cols, oh, ow = self.cache
        n, c, h, w = shape
        dy_mat = dy.transpose(0, 2, 3, 1).reshape(n * oh * ow, self.cout)
        self.grads["W"] = eng.matmul(cols, dy_mat, transpose_a=True, a_block="row",
                                     b_block="col")
        self.grads["b"] = dy_mat.sum(axis=0).astype(dy.dtype)
        dcols = eng.matmul(dy_mat, self.params["W"], transpose_b=True)
        dcols = dcols.reshape(n, oh * ow, -1).transpose(0, 2, 1)
        ch, i, j, _, _ = _im2col_indices(c, h, w, self.k, self.stride, self.pad)
        dxp = np.zeros((n, c, h + 2 * self.pad, w + 2 * self.pad), dcols.dtype)
        np.add.at(dxp, (slice(None), ch, i, j), dcols)
        if self.pad:
            return dxp[:, :, self.pad:-self.pad, self.pad:-self.pad]
        return dxp


class ReLU(Layer):
    def forward(self, x, eng):
        self.mask = x > 0
        return np.where(self.mask, x, 0).astype(x.dtype)

    def backward(self, dy, eng):
        return np.where(self.mask, dy, 0).astype(dy.dtype)


class MaxPool2d(Layer):
    """Non-overlapping ``k x k`` max pooling (NCHW; H and W multiples of ``k``)."""

    def __init__(self, k: int = 2):
        super().__init__()
        self.k = k

    def forward(self, x, eng):
        n, c, h, w = x.shape
        k = self.k
        if h % k or w % k:
            raise ValueError(f"MaxPool2d({k}) needs H and W divisible by {k}, not {h}x{w}")
        blocks = x.reshape(n, c, h // k, k, w // k, k)
        out = blocks.max(axis=(3, 5))
        winners = blocks == out[:, :, :, None, :, None]
        # one winner per window, so the gradient is not duplicated on ties
        flat = winners.transpose(0, 1, 2, 4, 3, 5).reshape(n, c, h // k, w // k, k * k)
        first = np.zeros_like(flat)
        np.put_along_axis(first, flat.argmax(axis=-1)[..., None], True, axis=-1)
        self.mask = first.reshape(n, c, h // k, w // k, k, k).transpose(0, 1, 2, 4, 3, 5)
        return out

    def backward(self, dy, eng):
        return (self.mask * dy[:, :, :, None, :, None]).reshape(
            self.mask.shape[0], self.mask.shape[1], self.mask.shape[2] * self.k,
            self.mask.shape[4] * self.k).astype(dy.dtype)


class Flatten(Layer):
    def forward(self, x, eng):
        self.shape = x.shape
        return x.reshape(x.shape[0], -1)

    def backward(self, dy, eng):
        return dy.reshape(self.shape)


class Network:
    """A sequence of layers."""

    def __init__(self, layers):
        self.layers = list(layers)

    def forward(self, x, eng):
        for layer in self.layers:
            x = layer.forward(x, eng)
        return x

    def backward(self, dy, eng):
        for layer in reversed(self.layers):
            dy = layer.backward(dy, eng)
        return dy

    def parameters(self):
        """``(name, array)`` of every parameter, in a fixed order."""
        return [(f"{i}.{name}", p) for i, layer in enumerate(self.layers)
                for name, p in layer.params.items()]

    def gradients(self):
        return [layer.grads[name] for layer in self.layers for name in layer.params]

    def state(self) -> dict:
        return {name: p.copy() for name, p in self.parameters()}

    def load_state(self, state: dict) -> None:
        for name, p in self.parameters():
            p[...] = state[name]


def softmax_cross_entropy(logits, labels):
    """Mean cross-entropy of integer ``labels`` and its gradient w.r.t. ``logits``."""
    z = logits - logits.max(axis=1, keepdims=True)
    p = np.exp(z)
    p /= p.sum(axis=1, keepdims=True)
    n = logits.shape[0]
    loss = -np.log(np.maximum(p[np.arange(n), labels], 1e-30)).mean()
    grad = p
    grad[np.arange(n), labels] -= 1
    return float(loss), (grad / n).astype(np.float32)


def mse(pred, target):
    """Mean squared error (mean over every element) and its gradient."""
    diff = pred - target
    return float(np.mean(diff ** 2)), (2 * diff / diff.size).astype(np.float32)
