"""Training on the accelerator: the Python API and ``python -m firmware.ml.train``.

.. code-block:: text

    python -m firmware.ml.train --task {digits-mlp,digits-cnn,mnist-logreg,rf-anomaly,
                                    fashion-mlp,fashion-cnn} [--train-subset N]
           --precision {fp32,int8} [--swa] --backend {golden,rtl,pynq} [--rows R --cols C]
           [--data-width W] [--board {pynq-z1,zcu104,vu9p} [--bitfile F] [--base-addr A]
           [--report R]]
           --epochs N --seed S [--out results.json] [--checkpoint DIR] [--resume]

``fp32`` trains in float32 numpy with float32 SGD (the reference). ``int8`` runs every GEMM of
training — forward, backward-data, weight-gradient — on a :class:`firmware.Device` in 8-bit
block floating point with stochastic rounding (see :mod:`firmware.ml.nn`), with float32 master
weights; with ``--swa`` it is SWALP: 8-bit weights, gradients and momentum, the SWALP
learning-rate schedule, and weights averaged once per epoch (``--swa-every iteration``: every
step) over the last quarter of the epochs, evaluated with the average. ``--blocks tile``
trains in the accelerator's own format, BFP8 tile blocks, with each GEMM computed as its
tile-exponent path computes it (on the host, bit for bit :mod:`sim.models.bfp`). ``--weights`` picks
float32 master weights or 8-bit weights, gradients and momentum independently of ``--swa``.
``--blocks device`` runs the whole step of a CNN task on the device
(:class:`firmware.ml.resident_conv.ResidentConvNet`: convolutions, pooling and the device's
SGD, which keeps no momentum: ``--momentum 0``); with ``--swa`` the host averages the
weights it reads back.

Every random draw comes from generators seeded by ``--seed`` (data order, initialisation,
rounding), and a checkpoint saves their states, so ``--resume`` reaches the same weights bit
for bit as an uninterrupted run.
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from firmware.ml import data, nn
from firmware.ml.optim import SCHEDULES, SGD, SWA, schedule_lr

__all__ = ["TASKS", "DEVICE", "TrainConfig", "build", "fit", "evaluate", "run", "main"]

#: ``blocks`` value: the whole training step on the device (int8 CNN tasks).
DEVICE = "device"


@dataclass
class Task:
    name: str
    load: callable
    make: callable            # rng -> Network
    loss: str                 # "xent" or "mse"
    metric: str               # "accuracy" or "f1"
    lr: float
    batch: int


def _mlp(rng):
    return nn.Network([nn.Linear(64, 64, rng), nn.ReLU(), nn.Linear(64, 10, rng)])


def _cnn(rng):
    return nn.Network([nn.Conv2d(1, 8, 3, rng, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                       nn.Conv2d(8, 16, 3, rng, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                       nn.Flatten(), nn.Linear(64, 10, rng)])


def _logreg(rng):
    return nn.Network([nn.Linear(784, 10, rng)])


def _fashion_mlp(rng):
    """Fashion-MNIST MLP: 784 -> 256 -> 10 with ReLU."""
    return nn.Network([nn.Linear(784, 256, rng), nn.ReLU(), nn.Linear(256, 10, rng)])


def _fashion_cnn(rng):
    """Fashion-MNIST VGG-style CNN on 1x28x28: 3x3 convolutions (padding 1) 1 -> 16 and
    16 -> 32, each followed by ReLU and 2x2 max pooling, then 32*7*7 -> 64 -> 10."""
    return nn.Network([nn.Conv2d(1, 16, 3, rng, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                       nn.Conv2d(16, 32, 3, rng, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                       nn.Flatten(), nn.Linear(32 * 7 * 7, 64, rng), nn.ReLU(),
                       nn.Linear(64, 10, rng)])


def _autoencoder(rng):
    return nn.Network([nn.Linear(32, 16, rng), nn.ReLU(), nn.Linear(16, 8, rng), nn.ReLU(),
                       nn.Linear(8, 16, rng), nn.ReLU(), nn.Linear(16, 32, rng)])


TASKS = {
    "digits-mlp": Task("digits-mlp", data.digits, _mlp, "xent", "accuracy", 0.05, 32),
    "digits-cnn": Task("digits-cnn", lambda: data.digits(image=True), _cnn, "xent",
                       "accuracy", 0.05, 32),
    "mnist-logreg": Task("mnist-logreg", data.mnist, _logreg, "xent", "accuracy", 0.05, 64),
    "rf-anomaly": Task("rf-anomaly", data.rf_anomaly, _autoencoder, "mse", "f1", 0.05, 32),
    # Fashion-MNIST at full size (60,000 / 10,000): Debian's dataset-fashion-mnist package,
    # or BFP_FASHION_DIR (see data.fashion_mnist)
    "fashion-mlp": Task("fashion-mlp", data.fashion_mnist, _fashion_mlp, "xent", "accuracy",
                        0.05, 128),
    "fashion-cnn": Task("fashion-cnn", lambda: data.fashion_mnist(image=True), _fashion_cnn,
                        "xent", "accuracy", 0.05, 128),
}


@dataclass
class TrainConfig:
    """One training run's settings (the command line's options).

    Attributes
    ----------
    task : str
        A :data:`TASKS` name.
    precision : {"fp32", "int8"}
        float32 numpy GEMMs, or int8 block floating point on a :class:`firmware.Device`.
    swa : bool
        Average the weights (SWA) after the pre-averaging budget, the first
        ``round(0.75 epochs)`` epochs.
    epochs, seed : int
        Epochs to train; the seed of the data order, rounding and initial weights.
    batch : int, optional
        Minibatch size (None: the task's).
    lr : float, optional
        Initial learning rate (None: the task's).
    momentum, weight_decay : float
        :class:`firmware.ml.optim.SGD`'s.
    weights : {"fp32", "int8"}, optional
        Float32 master weights, or weights, gradients and momentum in int8 (None: int8 with
        SWA, else float32).
    swa_every : {"epoch", "iteration"}
        How often the average takes the weights once it has started.
    schedule : {"swalp", "constant"}
        The learning-rate schedule (:func:`firmware.ml.optim.schedule_lr`).
    swa_lr : float, optional
        The averaging phase's learning rate (None: 0.1 times the initial one).
    blocks : str
        Block granularity (:meth:`firmware.ml.nn.Blocks.parse`): ``"fox"``, ``"tensor"``,
        ``"tile"`` (BFP8 tile blocks, :data:`firmware.ml.nn.TILE`) or
        ``"weights,activations,deltas"``; or :data:`DEVICE`, the whole step of an int8 CNN
        on the device (:class:`firmware.ml.resident_conv.ResidentConvNet`).
    train_subset : int, optional
        Train on the first this many examples only (the test set is whole).
    """

    task: str = "digits-mlp"
    precision: str = "fp32"
    swa: bool = False
    epochs: int = 10
    seed: int = 0
    batch: int | None = None
    lr: float | None = None
    momentum: float = 0.9
    weight_decay: float = 5e-4
    weights: str | None = None
    swa_every: str = "epoch"
    schedule: str = "swalp"
    swa_lr: float | None = None
    blocks: str = "fox"
    train_subset: int | None = None

    def check(self):
        if self.task not in TASKS:
            raise ValueError(f"task must be one of {sorted(TASKS)}, not {self.task!r}")
        if self.blocks == DEVICE:
            if self.precision == "int8" and self.momentum:
                raise ValueError(f"momentum must be 0 with blocks {DEVICE!r} (the device's "
                                 f"SGD keeps none), not {self.momentum!r}")
            if self.precision == "int8" and self.weights not in (None, "int8"):
                raise ValueError(f"weights: with blocks {DEVICE!r} they live on the device "
                                 f"in BFP8, not {self.weights!r}")
        else:
            nn.Blocks.parse(self.blocks)            # raises ValueError naming blocks
        if self.precision not in ("fp32", "int8"):
            raise ValueError(f"precision must be 'fp32' or 'int8', not {self.precision!r}")
        if not isinstance(self.epochs, int) or self.epochs < 1:
            raise ValueError(f"epochs must be a positive integer, not {self.epochs!r}")
        if self.batch is not None and self.batch < 1:
            raise ValueError(f"batch must be positive, not {self.batch!r}")
        if self.weights not in (None, "fp32", "int8"):
            raise ValueError(f"weights must be 'fp32' or 'int8', not {self.weights!r}")
        if self.swa_every not in ("epoch", "iteration"):
            raise ValueError(f"swa_every must be 'epoch' or 'iteration', not "
                             f"{self.swa_every!r}")
        if self.schedule not in SCHEDULES:
            raise ValueError(f"schedule must be one of {SCHEDULES}, not {self.schedule!r}")
        if self.swa_lr is not None and not self.swa_lr > 0:
            raise ValueError(f"swa_lr must be positive, not {self.swa_lr!r}")
        if self.train_subset is not None and (not isinstance(self.train_subset, int)
                                              or self.train_subset < 1):
            raise ValueError(f"train_subset must be a positive integer or None, not "
                             f"{self.train_subset!r}")


def _step(net, eng, opt, kind, x, target):
    """One SGD step on a batch: ``target`` is the labels ("xent") or the wanted output
    ("mse"). Returns the loss."""
    with eng.profile.time("float"):       # what the inner blocks do not claim is float work
        out = net.forward(x, eng)
        loss, grad = (nn.softmax_cross_entropy(out, target) if kind == "xent"
                      else nn.mse(out, target))
        net.backward(grad, eng)
        opt.step(net.gradients())
    eng.profile.count("steps")
    return loss


def evaluate(net, eng, task: Task, x, y, threshold=None, batch: int = 256) -> dict:
    """The task's metric on ``(x, y)``: accuracy, or F1 of anomaly detection by threshold
    on the per-window reconstruction error."""
    outs = [net.forward(x[i:i + batch], eng) for i in range(0, len(x), batch)]
    out = np.concatenate(outs)
    if task.metric == "accuracy":
        return {"accuracy": float(np.mean(out.argmax(axis=1) == y))}
    err = np.mean((out - x) ** 2, axis=1)
    if threshold is None:
        return {"errors": err}
    pred = err > threshold
    tp = int(np.sum(pred & (y == 1)))
    fp = int(np.sum(pred & (y == 0)))
    fn = int(np.sum(~pred & (y == 1)))
    f1 = 2 * tp / (2 * tp + fp + fn) if tp else 0.0
    return {"f1": float(f1), "threshold": float(threshold)}


class Run:
    """The state of one training run (everything a checkpoint holds)."""

    def __init__(self, cfg: TrainConfig, device):
        cfg.check()
        self.cfg, self.task = cfg, TASKS[cfg.task]
        self.data = self.task.load()
        if cfg.train_subset is not None:           # the first N training examples
            xtr, ytr, xte, yte = self.data
            self.data = (xtr[:cfg.train_subset], ytr[:cfg.train_subset], xte, yte)
        s = cfg.seed
        self.rng_data = np.random.default_rng([s, 0])
        self.net = self.task.make(np.random.default_rng([s, 1]))
        blocks = nn.Blocks.parse("fox" if cfg.blocks == DEVICE else cfg.blocks)
        self.eng = nn.Engine(cfg.precision, device if cfg.precision == "int8" else None,
                             rng=np.random.default_rng([s, 2]), blocks=blocks)
        # evaluation rounds to nearest and leaves the training's random streams alone
        self.eval_eng = nn.Engine(cfg.precision, self.eng.device, rounding="nearest",
                                  blocks=blocks)
        self.lr0 = cfg.lr or self.task.lr
        self.opt = SGD(self.net.parameters(), lr=self.lr0, momentum=cfg.momentum,
                       weight_decay=cfg.weight_decay,
                       weights=cfg.weights or ("int8" if cfg.swa and cfg.precision == "int8"
                                               else "fp32"),
                       rng=np.random.default_rng([s, 3]))
        # the pre-averaging budget, the same for every arm (the schedule decays over it)
        self.swa_start = max(1, int(round(0.75 * cfg.epochs)))
        self.swa_lr = (cfg.swa_lr or 0.1 * self.lr0) if cfg.swa else None
        self.resident = None
        if cfg.blocks == DEVICE and cfg.precision == "int8":
            from firmware.ml.resident_conv import ResidentConvNet
            if self.data[0].ndim != 4 or self.task.loss != "xent":
                raise ValueError(f"blocks {DEVICE!r} trains classifiers of images (a CNN "
                                 f"task), not {cfg.task!r}")
            self.resident = ResidentConvNet(
                self.net, self.data[0].shape[1:], device, seed=s & 0xFFFF_FFFF, lr=self.lr0,
                weight_decay=cfg.weight_decay)
        self.swa = SWA(self._params()) if cfg.swa else None
        self.epoch = 0
        self.history = []

    def _params(self) -> list:
        """The weights the optimiser steps: the host's, or read back from the device."""
        return self.resident.params if self.resident is not None else self.net.parameters()

    # -- checkpoints -------------------------------------------------------------------------
    def state(self) -> dict:
        r = self.resident
        return {"config": self.cfg.__dict__, "epoch": self.epoch, "history": self.history,
                "net": self.net.state(), "opt": self.opt.state(),
                "resident": None if r is None else {"params": dict(r.params),
                                                    "passes": r.passes, "steps": r.steps},
                "swa": self.swa.state() if self.swa else None,
                "rng": [g.bit_generator.state for g in (self.rng_data, self.eng.rng,
                                                        self.opt.rng)],
                "engine": {"gemms": self.eng.gemms, "cycles": self.eng.cycles,
                           "eval_gemms": self.eval_eng.gemms,
                           "eval_cycles": self.eval_eng.cycles}}

    def load(self, state: dict) -> None:
        if state["config"] != self.cfg.__dict__:
            raise ValueError("the checkpoint was written by a run with a different "
                             f"configuration: {state['config']}")
        self.epoch, self.history = state["epoch"], state["history"]
        self.net.load_state(state["net"])
        self.opt.load_state(state["opt"])
        if self.resident is not None:
            saved = state["resident"]
            self.resident.load_params(saved["params"])
            self.resident.passes, self.resident.steps = saved["passes"], saved["steps"]
        if self.swa:
            self.swa.load_state(state["swa"])
        for g, s in zip((self.rng_data, self.eng.rng, self.opt.rng), state["rng"],
                        strict=True):
            g.bit_generator.state = s
        counts = state["engine"]
        self.eng.gemms, self.eng.cycles = counts["gemms"], counts["cycles"]
        self.eval_eng.gemms, self.eval_eng.cycles = counts["eval_gemms"], counts["eval_cycles"]

    def save(self, directory: Path) -> Path:
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / "checkpoint.pkl"
        tmp = directory / f".checkpoint.pkl.tmp{os.getpid()}"
        with open(tmp, "wb") as f:
            pickle.dump(self.state(), f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)                      # atomic: old or new, never half
        return path

    # -- training ----------------------------------------------------------------------------
    def lr(self) -> float:
        """The learning rate of the next epoch: the config's schedule over the pre-averaging
        budget ``swa_start``, then ``swa_lr`` if averaging (see :func:`schedule_lr`)."""
        return schedule_lr(self.cfg.schedule, self.epoch, self.lr0, self.swa_start,
                           self.swa_lr)

    def train_epoch(self, progress=None) -> float:
        x, y = self.data[0], self.data[1]
        batch = self.cfg.batch or self.task.batch
        order = self.rng_data.permutation(len(x))
        self.opt.lr = self.lr()
        if self.resident is not None:
            self.resident.lr = self.opt.lr
        losses = []
        steps = -(-len(x) // batch)
        for i in range(steps):
            idx = order[i * batch:(i + 1) * batch]
            target = y[idx] if self.task.loss == "xent" else x[idx]   # autoencoders: x
            if self.resident is not None:
                loss = self.resident.step(x[idx], target)
            else:
                loss = _step(self.net, self.eng, self.opt, self.task.loss, x[idx], target)
            if (self.swa is not None and self.cfg.swa_every == "iteration"
                    and self.epoch + 1 >= self.swa_start):
                self.swa.update(self._params())
            losses.append(loss)
            if progress:
                progress(i + 1, steps, loss)
        self.epoch += 1
        if (self.swa is not None and self.cfg.swa_every == "epoch"
                and self.epoch >= self.swa_start):
            self.swa.update(self._params())
        return float(np.mean(losses))

    def metric(self) -> dict:
        """The test metric, with the averaged weights when SWA has started."""
        if self.resident is not None:
            return self._device_metric()
        saved = None
        if self.swa is not None and self.swa.count:
            saved = self.net.state()
            self.net.load_state(self.swa.averaged())
        try:
            xtr, _, xte, yte = self.data
            threshold = None
            if self.task.metric == "f1":   # 95th percentile of the normal training error
                errs = evaluate(self.net, self.eval_eng, self.task, xtr[:1000],
                                None)["errors"]
                threshold = float(np.percentile(errs, 95))
            return evaluate(self.net, self.eval_eng, self.task, xte, yte, threshold)
        finally:
            if saved is not None:
                self.net.load_state(saved)

    def _device_metric(self) -> dict:
        """Accuracy of the weights on the device (the average, while SWA has started)."""
        r, saved = self.resident, None
        if self.swa is not None and self.swa.count:
            saved = dict(r.params)
            r.load_params(self.swa.averaged())
        try:
            _, _, xte, yte = self.data
            return {"accuracy": float((r.predict(xte) == yte).mean())}
        finally:
            if saved is not None:
                r.load_params(saved)


def build(cfg: TrainConfig, backend: str = "golden", rows: int | None = 8,
          cols: int | None = 8, **device_options) -> Run:
    """A :class:`Run` on a new :class:`firmware.Device` (int8) or none (fp32).

    On ``pynq``, ``rows``, ``cols`` and ``data_width`` of None mean the hardware's (read from
    its CONFIG registers and checked against the build report); ``board``, ``bitfile``,
    ``report``, ``base_addr``, ``clock_hz`` and ``ip_name`` say which board and build (see
    :func:`firmware.runtime.pynq_backend.connect`)."""
    from firmware.runtime.device import Device
    if cfg.precision != "int8":
        return Run(cfg, None)
    if backend != "pynq":
        rows, cols = rows or 8, cols or 8
        if device_options.get("data_width", 0) is None:
            del device_options["data_width"]
    return Run(cfg, Device(backend, rows=rows, cols=cols, **device_options))


def fit(net, x, y, *, loss: str = "xent", epochs: int = 10, batch: int = 32,
        lr: float = 0.05, momentum: float = 0.9, weight_decay: float = 5e-4,
        precision: str = "fp32", device=None, seed: int = 0) -> nn.Engine:
    """Train ``net`` on numpy arrays (``loss`` "xent" with integer labels ``y``, or "mse"
    against ``y`` as targets). Returns the engine (its ``gemms`` and ``cycles``)."""
    eng = nn.Engine(precision, device, rng=np.random.default_rng([seed, 2]))
    opt = SGD(net.parameters(), lr=lr, momentum=momentum, weight_decay=weight_decay,
              rng=np.random.default_rng([seed, 3]))
    order_rng = np.random.default_rng([seed, 0])
    for _ in range(epochs):
        order = order_rng.permutation(len(x))
        for i in range(0, len(x), batch):
            idx = order[i:i + batch]
            _step(net, eng, opt, loss, x[idx], y[idx])
    return eng


def _bar(epoch, epochs):
    def show(i, n, loss):
        width = 30
        done = int(width * i / n)
        sys.stderr.write(f"\repoch {epoch}/{epochs} [{'#' * done}{'.' * (width - done)}] "
                         f"{i}/{n} loss {loss:.4f}")
        if i == n:
            sys.stderr.write("\n")
        sys.stderr.flush()
    return show


def run(cfg: TrainConfig, *, backend="golden", rows=8, cols=8, checkpoint=None,
        resume=False, quiet=False, stop_after: int | None = None,
        clock_mhz: float | None = None, **device_options) -> dict:
    """Train as the command line does.

    Parameters
    ----------
    cfg : TrainConfig
        What to train and how.
    backend : {"golden", "rtl", "pynq", "model"}
        Where int8 GEMMs run (:class:`firmware.Device`).
    rows, cols : int, optional
        The array's shape; on ``pynq`` pass None to take the hardware's.
    checkpoint : path-like, optional
        A directory where each epoch's state is saved.
    resume : bool
        Continue from the checkpoint there.
    quiet : bool
        Print no progress.
    stop_after : int, optional
        End after this many epochs, as if interrupted (resume later).
    clock_mhz : float, optional
        The clock at which the profile turns cycles into seconds (default: the board's on
        ``pynq``, else none).
    **device_options :
        More :class:`firmware.Device` options (``board``, ``bitfile``, ``port``...).

    Returns
    -------
    dict
        The results: ``test_metric``, ``history`` (per epoch), ``gemms``,
        ``accelerator_cycles``, ``profile``, ``weights_digest`` and the settings.

    Raises
    ------
    FileNotFoundError
        ``resume`` without a checkpoint.
    ValueError
        A bad setting in ``cfg``.
    """
    r = build(cfg, backend, rows, cols, **device_options)
    ckpt = Path(checkpoint) if checkpoint else None
    if resume:
        if ckpt is None or not (ckpt / "checkpoint.pkl").exists():
            raise FileNotFoundError(f"no checkpoint to resume in {ckpt}")
        with open(ckpt / "checkpoint.pkl", "rb") as f:
            r.load(pickle.load(f))
    t0 = time.monotonic()
    last = cfg.epochs if stop_after is None else min(cfg.epochs, r.epoch + stop_after)
    while r.epoch < last:
        loss = r.train_epoch(None if quiet else _bar(r.epoch + 1, cfg.epochs))
        metric = r.metric()
        r.history.append({"epoch": r.epoch, "loss": loss, "lr": r.opt.lr,
                          r.task.metric: metric[r.task.metric]})
        if not quiet:
            print(f"epoch {r.epoch}: loss {loss:.4f}  {r.task.metric} "
                  f"{metric[r.task.metric]:.4f}", file=sys.stderr)
        if ckpt:
            r.save(ckpt)
    final = r.history[-1]
    if r.resident is not None:          # the whole step on the device: its own profile
        prof = r.resident.device.profile
        cycles, gemms = prof.cycles, prof.summary()["counts"].get("gemms", 0)
    else:
        prof = r.eng.profile
        cycles, gemms = r.eng.cycles + r.eval_eng.cycles, r.eng.gemms + r.eval_eng.gemms
    return {"task": cfg.task, "precision": cfg.precision, "swa": cfg.swa,
            "backend": backend if cfg.precision == "int8" else "numpy",
            "seed": cfg.seed, "epochs": cfg.epochs, "metric": r.task.metric,
            "test_metric": final[r.task.metric], "history": r.history,
            "accelerator_cycles": cycles, "gemms": gemms,
            "array": ([r.eng.device.rows, r.eng.device.cols] if r.eng.device is not None
                      else [rows, cols]),
            "blocks": cfg.blocks, "schedule": cfg.schedule,
            "seconds": round(time.monotonic() - t0, 2),
            "profile": prof.summary(_clock_hz(r.eng.device, clock_mhz)),
            "weights_digest": _digest(r._params())}


def _profile_text(s: dict) -> str:
    """The ``--profile`` printout of a :meth:`firmware.runtime.profile.Profile.summary`."""
    steps = s["counts"].get("steps", 0) or 1
    host = s["host_seconds"] or 1e-12
    lines = [f"profile of {steps} training steps (per step; evaluation excluded):"]
    for k, v in s["seconds"].items():
        if k != "wait":
            lines.append(f"  host {k:9s} {1e3 * v / steps:10.2f} ms  {100 * v / host:5.1f} %")
    lines.append(f"  host total     {1e3 * s['host_seconds'] / steps:10.2f} ms")
    lines.append(f"  waiting        {1e3 * s['seconds']['wait'] / steps:10.2f} ms  (the "
                 f"simulator, golden model or board: not host work)")
    lines.append(f"  accelerator    {s['accelerator_cycles'] / steps:10.0f} cycles"
                 + (f" = {1e3 * s['accelerator_seconds'] / steps:.3f} ms at "
                    f"{s['clock_mhz']:g} MHz; host share {100 * s['host_share']:.1f} %"
                    if "clock_mhz" in s else " (no clock given: --clock-mhz)"))
    return "\n".join(lines)


def _clock_hz(device, clock_mhz):
    if clock_mhz:
        return clock_mhz * 1e6
    target = getattr(getattr(device, "driver", None), "target", None)
    clock = getattr(target, "clock_hz", None)
    return clock if isinstance(clock, (int, float)) else None


def _digest(params) -> str:
    import hashlib
    h = hashlib.sha256()
    for name, p in params:
        h.update(name.encode())
        h.update(np.ascontiguousarray(p).tobytes())
    return h.hexdigest()[:16]


def _address(text: str) -> int:
    """An argparse type: an address, decimal or 0x-hex."""
    try:
        value = int(text, 0)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an address such as 0x43C00000, got "
                                         f"{text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a non-negative address, got {text!r}")
    return value


def main(argv=None) -> int:
    from firmware.spec import boards
    # the module docstring without its usage block (argparse prints its own)
    about = __doc__.split("\n\n")
    description = "\n\n".join([about[0], *about[3:]])
    p = argparse.ArgumentParser(prog="python -m firmware.ml.train", description=description,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--task", choices=sorted(TASKS), required=True)
    p.add_argument("--precision", choices=["fp32", "int8"], default="int8")
    p.add_argument("--swa", action="store_true", help="SWALP: 8-bit weights and averaging")
    p.add_argument("--weights", choices=["fp32", "int8"],
                   help="master weights (default: int8 with --swa, else fp32)")
    p.add_argument("--swa-every", choices=["epoch", "iteration"], default="epoch")
    p.add_argument("--backend", choices=["golden", "rtl", "pynq", "model"], default="golden",
                   help="golden: numpy; rtl: the cycle-accurate Verilator model; pynq: a "
                        "board; model: the driver over a functional model (sim.models.functional)")
    p.add_argument("--blocks", default="fox",
                   help="block floating-point granularity: fox (weights per tensor, "
                        "activations and deltas per sample), tensor, tile (the accelerator's "
                        "BFP8 32x32 tile blocks everywhere, its K-block GEMMs emulated on the "
                        "host), or three of tensor/sample/channel/row as "
                        "'weights,activations,deltas'; or device: a CNN's whole step on the "
                        "device (with --momentum 0)")
    p.add_argument("--schedule", choices=["swalp", "constant"], default="swalp",
                   help="learning-rate schedule of every arm (default: SWALP's)")
    p.add_argument("--swa-lr", type=float, help="averaging phase's rate (default 0.1 lr)")
    p.add_argument("--profile", action="store_true",
                   help="print where the host's time went and the accelerator's cycles")
    p.add_argument("--clock-mhz", type=float,
                   help="accelerator clock for the profile (default: the board's)")
    p.add_argument("--board", choices=sorted(boards.BOARDS),
                   help="pynq: the board; its array, bus, register address and clock come "
                        "from its build report (build/BOARD/report.json or beside the "
                        "bitstream), the .hwh and the hardware's CONFIG registers. rtl, "
                        "model: the board's default configuration behind its port preset")
    p.add_argument("--bitfile", type=Path,
                   help="pynq: the overlay to load (default: the board build's, if found)")
    p.add_argument("--base-addr", type=_address,
                   help="pynq: the registers' physical address (default: the report's)")
    p.add_argument("--report", type=Path,
                   help="pynq: build.py's report.json (or its directory)")
    p.add_argument("--rows", type=int,
                   help="array rows (default: 8; pynq: the hardware's)")
    p.add_argument("--cols", type=int, help="array columns (default: 8; pynq: the hardware's)")
    p.add_argument("--data-width", type=int, choices=[64, 128, 256, 512],
                   help="memory bus bits (default: 128; pynq: the hardware's)")
    p.add_argument("--epochs", type=int, required=True)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--batch", type=int)
    p.add_argument("--lr", type=float)
    p.add_argument("--momentum", type=float, default=0.9,
                   help="SGD momentum (default 0.9; 0 with --blocks device)")
    p.add_argument("--train-subset", type=int, metavar="N",
                   help="train on the first N training examples only (quick runs)")
    p.add_argument("--out", type=Path)
    p.add_argument("--checkpoint", type=Path)
    p.add_argument("--resume", action="store_true")
    args = p.parse_args(argv)
    if args.epochs < 1:
        p.error("--epochs must be at least 1")
    if args.batch is not None and args.batch < 1:
        p.error("--batch must be at least 1")
    if args.lr is not None and args.lr <= 0:
        p.error("--lr must be positive")
    if args.train_subset is not None and args.train_subset < 1:
        p.error("--train-subset must be at least 1")
    if args.resume and args.checkpoint is None:
        p.error("--resume needs --checkpoint DIR")
    if args.swa and args.precision != "int8":
        p.error("--swa is SWALP, an int8 method: use it with --precision int8")
    if args.blocks == "tile" and args.backend != "golden":
        p.error("--blocks tile computes its GEMMs with the golden model (sim.models.bfp) on "
                "the host: use --backend golden")
    if args.weights == "int8" and args.precision != "int8":
        p.error("--weights int8 needs --precision int8")
    for name in ("rows", "cols"):
        if getattr(args, name) is not None and getattr(args, name) < 1:
            p.error(f"--{name} must be at least 1")
    board_args = {"board": args.board, "bitfile": args.bitfile, "base_addr": args.base_addr,
                  "report": args.report}
    device_options = {} if args.data_width is None else {"data_width": args.data_width}
    if args.backend == "pynq":
        if args.board is None and args.report is None:
            p.error(f"--backend pynq needs --board ({', '.join(sorted(boards.BOARDS))}) or "
                    "--report")
        from firmware.runtime.pynq_backend import resolve
        try:
            target = resolve(**board_args)
        except (ValueError, FileNotFoundError) as e:
            p.error(str(e))
        # the build's array and bus (the hardware is checked against them when connecting)
        want = target.expected or {}
        args.rows = args.rows or want.get("rows")
        args.cols = args.cols or want.get("cols")
        if want.get("data_width") and args.data_width is None:
            device_options["data_width"] = want["data_width"]
        device_options.update({k: v for k, v in board_args.items() if v is not None})
    else:
        given = [f"--{k.replace('_', '-')}" for k, v in board_args.items()
                 if v is not None and k != "board"]
        if given:
            p.error(f"{', '.join(given)}: only with --backend pynq")
        if args.board is not None and args.backend == "golden":
            p.error("--board: only with --backend pynq, rtl or model")
        if args.board is not None:        # rtl / model: the board's default on its port
            from firmware.spec.ports import BOARD_PORTS
            bcfg = boards.config(args.board)
            args.rows, args.cols = args.rows or bcfg["rows"], args.cols or bcfg["cols"]
            device_options.setdefault("data_width", bcfg["data_width"])
            device_options.update(depth=bcfg["depth"], block=bcfg["block"],
                                  packing=bcfg["packing"], port=BOARD_PORTS[args.board],
                                  read_ports=bcfg.get("read_ports", 1),
                                  write_ports=bcfg.get("write_ports", 1))
            if args.backend == "rtl":     # the pairs modelled on the board's own slice
                device_options["dsp_slice"] = bcfg["dsp_slice"]
        args.rows, args.cols = args.rows or 8, args.cols or 8
    if args.swa_lr is not None and args.swa_lr <= 0:
        p.error("--swa-lr must be positive")
    if args.clock_mhz is not None and args.clock_mhz <= 0:
        p.error("--clock-mhz must be positive")
    clock = args.clock_mhz or (boards.board(args.board).clock_mhz if args.board else None)
    cfg = TrainConfig(task=args.task, precision=args.precision, swa=args.swa,
                      epochs=args.epochs, seed=args.seed, batch=args.batch, lr=args.lr,
                      weights=args.weights, swa_every=args.swa_every, blocks=args.blocks,
                      schedule=args.schedule, swa_lr=args.swa_lr,
                      train_subset=args.train_subset, momentum=args.momentum)
    try:
        cfg.check()
    except ValueError as e:
        p.error(str(e))
    try:
        result = run(cfg, backend=args.backend, rows=args.rows, cols=args.cols,
                     checkpoint=args.checkpoint, resume=args.resume, clock_mhz=clock,
                     **device_options)
    except (ValueError, FileNotFoundError, RuntimeError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if args.profile:
        print(_profile_text(result["profile"]), file=sys.stderr)
    print(json.dumps({k: v for k, v in result.items() if k != "history"}, indent=2))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
