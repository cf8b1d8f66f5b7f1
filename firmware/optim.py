"""SGD with momentum and weight decay, in float32 or fully 8-bit, the SWALP schedule, and SWA.

``SGD(weights="fp32")`` keeps float32 master weights and momentum (as Fox et al.).
``SGD(weights="int8")`` keeps weights, gradients and momentum in 8-bit block floating point,
one exponent per tensor, quantised with stochastic rounding after every step (as SWALP,
Yang et al. 2019): ``g = Q(grad)``, ``v = Q(momentum * v + g + wd * w)``, ``w = Q(w - lr v)``.

:func:`swalp_lr` is the SWALP learning-rate schedule; :class:`SWA` averages the weights
(once per epoch or once per iteration) for evaluation.
"""

from __future__ import annotations

import numpy as np

from .quant import dequantize, quantize

__all__ = ["SGD", "SWA", "swalp_lr"]


def _q(x, rng):
    q, e = quantize(np.asarray(x, np.float32), rounding="stochastic", rng=rng)
    return dequantize(q, e)


class SGD:
    def __init__(self, params, *, lr: float = 0.1, momentum: float = 0.9,
                 weight_decay: float = 0.0, weights: str = "fp32",
                 rng: np.random.Generator | None = None):
        if weights not in ("fp32", "int8"):
            raise ValueError(f"weights must be 'fp32' or 'int8', not {weights!r}")
        if lr <= 0 or not 0 <= momentum < 1 or weight_decay < 0:
            raise ValueError("need lr > 0, 0 <= momentum < 1, weight_decay >= 0")
        self.params = [p for _, p in params]
        self.lr, self.momentum, self.weight_decay, self.weights = lr, momentum, weight_decay, \
            weights
        self.rng = rng if rng is not None else np.random.default_rng(0)
        self.velocity = [np.zeros_like(p) for p in self.params]
        if weights == "int8":
            for p in self.params:
                p[...] = _q(p, self.rng)

    def step(self, grads) -> None:
        for p, g, v in zip(self.params, grads, self.velocity, strict=True):
            if self.weights == "fp32":
                v *= self.momentum
                v += g + self.weight_decay * p
                p -= self.lr * v
            else:
                g = _q(g, self.rng)
                v[...] = _q(self.momentum * v + g + self.weight_decay * p, self.rng)
                p[...] = _q(p - self.lr * v, self.rng)

    def state(self) -> dict:
        return {"velocity": [v.copy() for v in self.velocity], "lr": self.lr}

    def load_state(self, state) -> None:
        for v, s in zip(self.velocity, state["velocity"], strict=True):
            v[...] = s
        self.lr = state["lr"]


def swalp_lr(epoch: float, lr0: float, swa_start: float, swa_lr: float) -> float:
    """SWALP's schedule: ``lr0`` for the first half of the pre-averaging budget, a linear
    decay to ``swa_lr`` until 90 % of it, then ``swa_lr`` (through the averaging phase)."""
    t = epoch / swa_start if swa_start > 0 else 1.0
    if t <= 0.5:
        return lr0
    if t <= 0.9:
        return lr0 * (1 - (1 - swa_lr / lr0) * (t - 0.5) / 0.4)
    return swa_lr


class SWA:
    """Running average of the weights (in float64), from ``start`` on."""

    def __init__(self, params):
        self.names = [n for n, _ in params]
        self.mean = {n: np.zeros(p.shape, np.float64) for n, p in params}
        self.count = 0

    def update(self, params) -> None:
        self.count += 1
        for n, p in params:
            self.mean[n] += (p - self.mean[n]) / self.count

    def averaged(self) -> dict:
        return {n: m.astype(np.float32) for n, m in self.mean.items()}

    def state(self) -> dict:
        return {"mean": {n: m.copy() for n, m in self.mean.items()}, "count": self.count}

    def load_state(self, state) -> None:
        self.mean = {n: np.array(m) for n, m in state["mean"].items()}
        self.count = state["count"]
