"""SGD with momentum and weight decay, in float32 or fully 8-bit, the SWALP schedule, and SWA.

``SGD(weights="fp32")`` keeps float32 master weights and momentum (as Fox et al.).
``SGD(weights="int8")`` keeps weights, gradients and momentum in 8-bit block floating point,
one exponent per tensor, quantised with stochastic rounding after every step (as SWALP,
Yang et al. 2019): ``g = Q(grad)``, ``v = Q(momentum * v + g + wd * w)``, ``w = Q(w - lr v)``.

:func:`swalp_lr` is the SWALP learning-rate schedule and :func:`schedule_lr` picks a schedule
by name (every arm of a comparison uses the same one); :class:`SWA` averages the weights
(once per epoch or once per iteration) for evaluation.
"""

from __future__ import annotations

import numpy as np

from firmware.ml.quant import dequantize, quantize

__all__ = ["SCHEDULES", "SGD", "SWA", "schedule_lr", "swalp_lr"]


def _q(x, rng):
    q, e = quantize(np.asarray(x, np.float32), rounding="stochastic", rng=rng)
    return dequantize(q, e)


class SGD:
    """SGD with momentum and weight decay, in float32 or fully 8-bit.

    Parameters
    ----------
    params : list of (str, numpy.ndarray)
        The parameters (:meth:`firmware.ml.nn.Network.parameters`), updated in place.
    lr : float
        The learning rate (positive); :attr:`lr` may be changed between steps.
    momentum : float
        In ``[0, 1)``.
    weight_decay : float
        At least 0.
    weights : {"fp32", "int8"}
        Float32 master weights and momentum, or weights, gradients and momentum in 8-bit
        block floating point (one exponent per tensor, stochastic rounding).
    rng : numpy.random.Generator, optional
        The stochastic rounding's draws.

    Raises
    ------
    ValueError
        An argument out of range.
    """

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
        """One update from ``grads`` (in ``params``' order)."""
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
        """The momentum and learning rate, for a checkpoint."""
        return {"velocity": [v.copy() for v in self.velocity], "lr": self.lr}

    def load_state(self, state) -> None:
        """Restore :meth:`state`."""
        for v, s in zip(self.velocity, state["velocity"], strict=True):
            v[...] = s
        self.lr = state["lr"]


#: the learning-rate schedules a :class:`firmware.ml.train.TrainConfig` can name
SCHEDULES = ("swalp", "constant")
#: SWALP's final learning rate before averaging, as a fraction of ``lr0``
FINAL_RATIO = 0.01
#: the default averaging-phase learning rate, as a fraction of ``lr0``
SWA_LR_RATIO = 0.1


def swalp_lr(epoch: float, lr0: float, budget: float, swa_lr: float | None = None) -> float:
    """SWALP's learning-rate schedule (Yang et al. 2019).

    Parameters
    ----------
    epoch : float
        The epoch about to be trained, from 0.
    lr0 : float
        The initial learning rate.
    budget : float
        The epochs before averaging (SWALP's ``swa_start``).
    swa_lr : float, optional
        The averaging phase's learning rate; None for a run without one (it stays at
        ``0.01 lr0`` after the budget).

    Returns
    -------
    float
        With ``t = epoch / budget``: ``lr0`` for ``t <= 0.5``, a linear decay to
        ``0.01 lr0`` by ``t = 0.9``, ``0.01 lr0`` to ``t < 1``, then ``swa_lr``.

    Raises
    ------
    ValueError
        ``lr0``, ``budget`` or ``swa_lr`` is not positive.

    Notes
    -----
    As ``schedule()`` in the authors' code (github.com/stevenygd/SWALP, ``train.py``). Their
    scripts use ``swa_lr`` 0.1 or 0.2 times ``lr0``; :data:`SWA_LR_RATIO` takes 0.1.
    """
    if lr0 <= 0:
        raise ValueError(f"lr0 must be positive, not {lr0!r}")
    if budget <= 0:
        raise ValueError(f"budget must be positive, not {budget!r}")
    if swa_lr is not None and swa_lr <= 0:
        raise ValueError(f"swa_lr must be positive or None, not {swa_lr!r}")
    t = epoch / budget
    if t <= 0.5:
        return lr0
    if t <= 0.9:
        return lr0 * (1 - (1 - FINAL_RATIO) * (t - 0.5) / 0.4)
    if t < 1 or swa_lr is None:
        return lr0 * FINAL_RATIO
    return swa_lr


def schedule_lr(schedule: str, epoch: float, lr0: float, budget: float,
                swa_lr: float | None = None) -> float:
    """The learning rate of epoch ``epoch`` (from 0) under the named schedule.

    Parameters
    ----------
    schedule : {"swalp", "constant"}
        ``"swalp"``: :func:`swalp_lr`. ``"constant"``: ``lr0`` for every epoch, and
        ``swa_lr`` in the averaging phase (``epoch >= budget``) of a run that averages.
    epoch, lr0, budget, swa_lr
        As :func:`swalp_lr`; ``swa_lr=None`` for a run without an averaging phase.

    Returns
    -------
    float

    Raises
    ------
    ValueError
        An unknown schedule, or as :func:`swalp_lr`.
    """
    if schedule == "swalp":
        return swalp_lr(epoch, lr0, budget, swa_lr)
    if schedule == "constant":
        if lr0 <= 0:
            raise ValueError(f"lr0 must be positive, not {lr0!r}")
        if budget <= 0:
            raise ValueError(f"budget must be positive, not {budget!r}")
        return swa_lr if swa_lr is not None and epoch >= budget else lr0
    raise ValueError(f"schedule must be one of {SCHEDULES}, not {schedule!r}")


class SWA:
    """Running average of the weights, in float64.

    Parameters
    ----------
    params : list of (str, numpy.ndarray)
        The parameters to average (their names and shapes).
    """

    def __init__(self, params):
        self.names = [n for n, _ in params]
        self.mean = {n: np.zeros(p.shape, np.float64) for n, p in params}
        self.count = 0

    def update(self, params) -> None:
        """Add the parameters' current values to the average."""
        self.count += 1
        for n, p in params:
            self.mean[n] += (p - self.mean[n]) / self.count

    def averaged(self) -> dict:
        """The average so far, float32, by name."""
        return {n: m.astype(np.float32) for n, m in self.mean.items()}

    def state(self) -> dict:
        return {"mean": {n: m.copy() for n, m in self.mean.items()}, "count": self.count}

    def load_state(self, state) -> None:
        self.mean = {n: np.array(m) for n, m in state["mean"].items()}
        self.count = state["count"]
