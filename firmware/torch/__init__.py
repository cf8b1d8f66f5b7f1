"""A PyTorch front end: ``Linear`` and ``Conv2d`` whose GEMMs run on a :class:`firmware.Device`.

.. code-block:: python

    import torch
    from firmware import Device
    import firmware.torch as ft

    accel = ft.Accel(Device("golden"), seed=0)            # or Device("rtl"), Device("pynq")
    model = torch.nn.Sequential(ft.Conv2d(1, 8, 3, padding=1, accel=accel), torch.nn.ReLU(),
                                torch.nn.Flatten(), ft.Linear(8 * 28 * 28, 10, accel=accel))
    model = ft.convert(existing_model, accel)            # or swap the layers of a model
    opt = ft.SGD(model.parameters(), lr=0.05, momentum=0.9)   # 8-bit weights, grads, momentum

:class:`Linear` and :class:`Conv2d` subclass ``torch.nn.Linear`` / ``torch.nn.Conv2d`` (same
constructor, weight layout ``out x in`` / ``cout x cin x kh x kw``, initialisation and
``state_dict``) and add two keyword arguments: ``accel`` (an :class:`Accel` or a bare
:class:`firmware.Device`) and ``precision`` (``"int8"``, the default, or ``"fp32"``). Their
forward pass is a ``torch.autograd.Function`` whose three GEMMs -- forward ``x Wᵀ``,
backward-data ``δ W`` and weight-gradient ``δᵀ x`` -- run on the Device in 8-bit block
floating point with the runtime's own machinery (:mod:`firmware.ml.nn`:
:class:`~firmware.ml.nn.Engine`, :class:`~firmware.ml.nn.Blocks`, :class:`~firmware.ml.nn.Q`,
:func:`firmware.ml.quant.quantize`), with the same semantics as :class:`firmware.ml.nn.Linear`
/ :class:`firmware.ml.nn.Conv2d` (tested bit for
bit):

* each tensor is quantised **once per step** with stochastic rounding: ``x̄`` and ``W̄`` in
  the forward pass (kept, and on the device, for the backward pass), ``δ̄`` once in the
  backward pass for both of its GEMMs;
* block granularity per tensor (:class:`firmware.ml.nn.Blocks`, default Fox et al.'s: one
  exponent for the weights, one per sample for activations and deltas);
* GEMMs that autograd does not need are skipped (``ctx.needs_input_grad``): the first
  layer's backward-data GEMM when the input does not require grad, the weight gradient of a
  frozen weight.

Bias, activations, pooling and the loss stay in float32 torch on the host. In ``eval()`` mode
the quantisation rounds to nearest (deterministic inference, as :mod:`firmware.ml.train`
evaluates). ``precision="fp32"`` runs the same ``autograd.Function`` with the GEMMs in torch
in float32 (float64 for float64 input, for gradient checks).

What the layers refuse, and what they accept:

* the input must be floating point: an integer, boolean or complex tensor raises
  ``TypeError`` naming the layer (its class and, after :func:`convert`, its name in the model)
  and the dtype;
* float16 and bfloat16 inputs and parameters are computed in float32 (where each of their
  values is exact): output and gradients come back in the input's and the parameters' dtypes,
  bit for bit the float32 results cast to them;
* a second backward pass through the same graph works with ``retain_graph=True`` (the
  quantised ``x̄`` and ``W̄`` are kept until autograd frees the graph; ``δ`` is quantised again
  in each pass), else autograd refuses it as for any torch layer; double backward
  (``create_graph=True``) raises ``RuntimeError``;
* :func:`convert` checks every layer before it swaps any and lists those it cannot swap
  (grouped convolutions, other padding modes, layers inside attention modules whose forward
  pass would skip them, ...); ``unsupported="keep"`` leaves them in torch, with a warning,
  and ``model.conversion`` records what was swapped and what was kept.

:class:`SGD` is the 8-bit optimiser of :class:`firmware.ml.optim.SGD` (``weights="int8"``:
weights, gradients and momentum in 8-bit block floating point, stochastic rounding, one
exponent per tensor -- SWALP) as a ``torch.optim.Optimizer``; a param group may ask for
float32 master weights (``weights="fp32"``). :func:`swalp_scheduler` is SWALP's learning-rate
schedule as a ``LambdaLR``; weight averaging is ``torch.optim.swa_utils.AveragedModel``.
Data-parallel training over several accelerators: :mod:`firmware.torch.distributed`.

:func:`train_on_device` (:mod:`firmware.torch.step`) trains a CNN with its whole step on the
device, recorded once and replayed, where every layer runs there.

:class:`ResidentSequential` (:mod:`firmware.torch.resident`) trains a fully connected chain
(``[Flatten] Linear ReLU ... Linear``) in BFP8 tile blocks with its activations, ReLU masks and
deltas kept on a Device with the write-back epilogue (bias, ReLU and quantisation run there).
"""

from __future__ import annotations

import itertools
import warnings

import numpy as np

try:
    import torch
    import torch.nn.functional as F
except ImportError as e:                                     # pragma: no cover
    raise ImportError("firmware.torch needs PyTorch: pip install -e '.[torch]'") from e

from firmware.ml.nn import FOX, Blocks, Engine, Q, _patch_blocks
from firmware.ml.optim import schedule_lr
from firmware.ml.quant import dequantize, quantize
from firmware.runtime.device import Device
from sim.models import golden

__all__ = ["Accel", "Linear", "Conv2d", "convert", "Conversion", "SGD", "swalp_scheduler",
           "ResidentSequential", "DeviceTrainer", "train_on_device", "PRECISIONS"]

PRECISIONS = ("int8", "fp32")

_uids = itertools.count()


class Accel:
    """The accelerator of a set of layers: a :class:`firmware.Device` and how to quantise.

    Every layer built with the same ``Accel`` shares its random stream, its device buffers
    and its :attr:`profile`.

    Parameters
    ----------
    device : firmware.Device
        Any backend (``golden``, ``rtl``, ``pynq``, ``model``).
    blocks : firmware.ml.nn.Blocks or str, optional
        Block granularity: a :class:`~firmware.ml.nn.Blocks` or a string for
        :meth:`firmware.ml.nn.Blocks.parse` (``"fox"``, ``"tensor"``, ``"W,x,δ"``). Default Fox.
    rounding : {"stochastic", "nearest"}
        Rounding of the training passes (``eval()`` always rounds to nearest).
    seed : int
        Seed of the stochastic rounding's draws.
    per_sample : bool
        Make every sample's arithmetic independent of how the batch is split (for exact
        data-parallel training, :mod:`firmware.torch.distributed`): the draws of a sample's
        ``x̄`` and ``δ̄`` come from a stream of their own, keyed by the seed, the layer, the
        step and the sample's global index (``sample_offset`` plus its index in the batch);
        the weight gradient is formed from the exact int32 partial sums of its runs of
        equal exponents (the Device's ``k_exp`` semantics, bit for bit) and the bias gradient
        summed in float64 in sample order, both kept for an ordered reduction across
        processes. Needs ``"sample"`` or ``"row"`` blocks for activations and deltas.

    Attributes
    ----------
    sample_offset : int
        Global index of the first sample of the next batch (``per_sample``; set by
        :func:`firmware.torch.distributed.shard`).
    engine, eval_engine : firmware.ml.nn.Engine
        The training (stochastic) and evaluation (nearest) engines over ``device``.
    """

    def __init__(self, device: Device, *, blocks: Blocks | str = FOX,
                 rounding: str = "stochastic", seed: int = 0, per_sample: bool = False):
        if not isinstance(device, Device):
            raise TypeError(f"device must be a firmware.Device, not {type(device).__name__}")
        if isinstance(blocks, str):
            blocks = Blocks.parse(blocks)
        elif not isinstance(blocks, Blocks):
            raise TypeError(f"blocks must be a firmware.ml.nn.Blocks or a string, not "
                            f"{type(blocks).__name__}")
        if blocks.tile:
            raise ValueError("blocks='tile' (BFP8 tile blocks) is not supported by Accel's "
                             "layers: use 'fox', 'tensor' or per-tensor policies, "
                             "ResidentSequential for fully connected chains, or firmware.ml "
                             "(--blocks tile)")
        if rounding not in ("stochastic", "nearest"):
            raise ValueError(f"rounding must be 'stochastic' or 'nearest', not {rounding!r}")
        if not isinstance(seed, (int, np.integer)) or isinstance(seed, bool):
            raise TypeError(f"seed must be an int, not {type(seed).__name__}")
        if seed < 0:
            raise ValueError(f"seed must be non-negative, not {seed}")
        if not isinstance(per_sample, bool):
            raise TypeError(f"per_sample must be a bool, not {type(per_sample).__name__}")
        if per_sample and (blocks.activations not in ("sample", "row")
                           or blocks.deltas not in ("sample", "row")):
            raise ValueError(f"per_sample=True needs 'sample' or 'row' blocks for activations "
                             f"and deltas (blocks spanning the batch depend on its split), not "
                             f"blocks={str(blocks)!r}")
        self.device, self.blocks, self.rounding = device, blocks, rounding
        self.seed, self.per_sample = int(seed), per_sample
        self.engine = Engine("int8", device, rounding=rounding,
                             rng=np.random.default_rng(self.seed), blocks=blocks)
        self.eval_engine = Engine("int8", device, rounding="nearest", blocks=blocks)
        self.eval_engine.profile = self.engine.profile
        self.sample_offset = 0
        self._layers = 0
        self._slots: dict = {}
        self._owners: dict = {}

    def __repr__(self):
        return (f"Accel({self.device.backend!r}, blocks={str(self.blocks)!r}, "
                f"rounding={self.rounding!r}, seed={self.seed}, per_sample={self.per_sample})")

    def __deepcopy__(self, memo):
        return self          # copies of a model (AveragedModel) share the accelerator

    @property
    def profile(self):
        """Host time by kind and accelerator cycles (:class:`firmware.runtime.profile.Profile`)."""
        return self.engine.profile

    @property
    def gemms(self) -> int:
        """GEMMs run so far (Device calls)."""
        return self.engine.gemms + self.eval_engine.gemms

    @property
    def cycles(self) -> int:
        """Accelerator cycles so far (0 on ``golden``)."""
        return self.engine.cycles + self.eval_engine.cycles

    # -- internals ---------------------------------------------------------------------------
    def _register(self) -> int:
        index = self._layers
        self._layers += 1
        return index

    def _rng(self, *key: int) -> np.random.Generator:
        return np.random.default_rng([self.seed, *(int(k) for k in key)])

    def _upload(self, q: Q, key) -> None:
        """Put ``q`` on the device in the buffer kept for ``key`` -- again if another
        quantised tensor has been put there since (a layer called twice before backward)."""
        if q.tensor is not None and self._owners.get(key) is q:
            return
        dev = self.device
        slot = self._slots.get(key)
        if slot is not None and slot.device is dev and slot.shape == q.data.shape \
                and slot.dtype == q.data.dtype:
            q.tensor = dev.tensor(q.data, into=slot)
        else:
            if slot is not None:
                slot.free()
            q.tensor = self._slots[key] = dev.tensor(q.data)
        self._owners[key] = q

    def _gemm(self, eng: Engine, qa: Q, qb: Q, keys, **kw) -> np.ndarray:
        return self._gemms(eng, [(qa, qb, keys, kw)])[0]

    def _gemms(self, eng: Engine, calls) -> list[np.ndarray]:
        """``(qa, qb, keys, options)`` GEMMs, independent, queued together on the device."""
        for qa, qb, keys, _ in calls:
            for q, key in zip((qa, qb), keys, strict=True):
                self._upload(q, key)
        return eng.queued_gemms([(qa, qb, kw) for qa, qb, _, kw in calls])

    def _runs(self, eng: Engine, qa: Q, qb: Q) -> tuple[list, np.ndarray, np.ndarray]:
        """``qaᵀ qb`` (the weight gradient: K is the rows of both) as the exact int32 partial
        sums of the maximal runs of equal ``k_exp`` -- what :meth:`firmware.Device.gemm`
        combines -- with the row and column exponents."""
        k = qa.data.shape[0]
        k_exp = np.full(k, qa.exp + qb.exp, np.int64)
        for v in (qa.row_exp, qb.row_exp):
            if v is not None:
                k_exp += v
        m, n = qa.data.shape[1], qb.data.shape[1]
        re = golden.exponent_vector("row_exp", qa.col_exp if qa.col_exp is not None else 0,
                                    m, "row")
        ce = golden.exponent_vector("col_exp", qb.col_exp if qb.col_exp is not None else 0,
                                    n, "column")
        dev = self.device
        dev.profile = eng.profile
        runs = golden.k_runs(golden._k_exp_vector(k_exp, k))
        eng.gemms += len(runs)
        parts = dev.gemms([dict(a=qa.data[start:stop], b=qb.data[start:stop],
                                transpose_a=True, out="int32") for start, stop, _ in runs])
        eng.cycles += dev.stats.get("cycles") or 0
        return [(p, e) for p, (_, _, e) in zip(parts, runs, strict=True)], re, ce


class _Sum:
    """An ordered float64 sum of exact terms ``P 2**(re + ce + e)`` (``P`` an integer
    matrix): a run that continues the previous one (same ``e``) is merged into it exactly
    before it is added, as :meth:`firmware.Device.gemm` combines ``k_exp`` runs."""

    def __init__(self, shape, re, ce):
        self.total = np.zeros(shape, np.float64)
        self.re, self.ce = re, ce
        self.pending, self.pending_e = None, 0

    def add(self, terms) -> None:
        for p, e in terms:
            if self.pending is not None and e == self.pending_e:
                self.pending = self.pending + p
                continue
            self.flush()
            self.pending, self.pending_e = p.astype(np.int64), int(e)

    def flush(self) -> None:
        if self.pending is not None:
            with np.errstate(over="ignore"):
                self.total += self.pending.astype(np.float64) * np.exp2(
                    self.re[:, None] + self.ce[None, :] + self.pending_e)
            self.pending = None

    def result(self) -> np.ndarray:
        self.flush()
        return self.total.astype(np.float32)


def _ordered_sum(start: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """``start + rows[0] + rows[1] + ...`` in float64, left to right."""
    return np.cumsum(np.concatenate([start[None], rows]), axis=0)[-1]


def _axis(policy: str, sample_axis, channel_axis):
    return {"tensor": None, "sample": sample_axis, "row": sample_axis,
            "channel": channel_axis}[policy]


def _numpy32(t: torch.Tensor) -> np.ndarray:
    return t.detach().to("cpu", torch.float32).numpy()


def _check_accel(accel, precision):
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {PRECISIONS}, not {precision!r}")
    if isinstance(accel, Device):
        accel = Accel(accel)
    elif accel is not None and not isinstance(accel, Accel):
        raise TypeError(f"accel must be a firmware.torch.Accel, a firmware.Device or None, not "
                        f"{type(accel).__name__}")
    if precision == "int8" and accel is None:
        raise ValueError("precision='int8' needs accel (a firmware.torch.Accel or "
                         "firmware.Device)")
    return accel


class _Layer:
    """What :class:`Linear` and :class:`Conv2d` share (a mixin over the torch module)."""

    def _setup(self, accel, precision):
        self.accel = _check_accel(accel, precision)
        self.precision = precision
        self._uid = next(_uids)
        self._index = self.accel._register() if self.accel is not None else 0
        self._calls = 0
        self._terms: list = []
        self._layer_name: str | None = None

    def _label(self) -> str:
        """The layer's class and, once :func:`convert` has named it, its name in the model."""
        kind = type(self).__name__
        return kind if self._layer_name is None else f"{kind} {self._layer_name or 'model'!r}"

    def _engine(self) -> Engine:
        return self.accel.engine if self.training else self.accel.eval_engine

    def _per_sample(self) -> bool:
        return self.training and self.accel.per_sample

    def _quantize_samples(self, parts, axis, call, kind) -> tuple[np.ndarray, np.ndarray]:
        """Quantise each sample's array with its own stream; ``(q, exp)`` concatenated."""
        eng, acc = self.accel.engine, self.accel
        qs, es = [], []
        with eng.time("quantize"):
            for i, part in enumerate(parts):
                rng = acc._rng(self._index, call, kind, acc.sample_offset + i) \
                    if acc.rounding == "stochastic" else None
                q, e = quantize(np.asarray(part, np.float32), axis=axis, rounding=acc.rounding,
                                rng=rng)
                qs.append(q)
                es.append(np.atleast_1d(e))
        return np.concatenate(qs), np.concatenate(es)

    def _quantize_weight(self, w_in_out: np.ndarray, call) -> Q:
        """``W̄`` as ``firmware.ml.nn`` holds it (``fan_in x fan_out``)."""
        eng = self._engine()
        axis = _axis(self.accel.blocks.weights, None, 1)
        if not self._per_sample():
            return eng.matrix(w_in_out, axis)
        with eng.time("quantize"):
            rng = self.accel._rng(self._index, call, 2) \
                if self.accel.rounding == "stochastic" else None
            q, e = quantize(np.asarray(w_in_out, np.float32), axis=axis,
                            rounding=self.accel.rounding, rng=rng)
        return Q(q, exp=e) if axis is None else Q(q, col_exp=e)

    def _grads(self, eng, qa: Q, qd: Q, qw: Q, need_w: bool, need_x: bool):
        """``(qaᵀ qd, qd qwᵀ)``, each where needed (else None): the weight gradient
        (:meth:`_weight_grad`) and the data gradient, queued together on the device when
        both are needed and the weight gradient is one GEMM (not ``per_sample``)."""
        uid = self._uid
        dx_call = (qd, qw, ((uid, "dy"), (uid, "W")), {"transpose_b": True})
        if need_w and need_x and not self._per_sample():
            return tuple(self.accel._gemms(eng, [
                (qa, qd, ((uid, "x"), (uid, "dy")), {"transpose_a": True}), dx_call]))
        dw = self._weight_grad(eng, qa, qd) if need_w else None
        dx = self.accel._gemms(eng, [dx_call])[0] if need_x else None
        return dw, dx

    def _weight_grad(self, eng, qa: Q, qd: Q) -> np.ndarray:
        """``qaᵀ qd`` (``fan_in x fan_out``); in ``per_sample`` mode from the runs' exact
        partials, which are kept for :func:`firmware.torch.distributed.reduce_gradients`."""
        uid = self._uid
        if not self._per_sample():
            return self.accel._gemm(eng, qa, qd, ((uid, "x"), (uid, "dy")), transpose_a=True)
        terms, re, ce = self.accel._runs(eng, qa, qd)
        s = _Sum((qa.data.shape[1], qd.data.shape[1]), re, ce)
        s.add(terms)
        self._terms.append(("weight", terms, re, ce))
        return s.result()

    def _bias_grad(self, per_sample_rows, dy32_sum) -> np.ndarray:
        """The bias gradient: ``dy32_sum()`` (float32, as firmware.ml.nn), or in ``per_sample``
        mode the float64 sum of ``per_sample_rows()`` (one row per sample) in sample order,
        kept for the ordered reduction."""
        if not self._per_sample():
            return dy32_sum()
        rows = per_sample_rows()
        self._terms.append(("bias", rows))
        return _ordered_sum(np.zeros(rows.shape[1]), rows).astype(np.float32)

    def _forward(self, x, fn):
        if not x.is_floating_point():
            raise TypeError(f"{self._label()}: x must be a floating-point tensor (float32, "
                            f"float64, float16 or bfloat16), not {x.dtype}")
        if self.precision == "int8" and self._per_sample() and torch.is_grad_enabled():
            self._terms = []              # a new step: the last one's terms are spent
        return fn.apply(x, self.weight, self.bias, self)


class _Function(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias, layer):
        ctx.layer = layer
        ctx.dtypes = x.dtype, weight.dtype
        if layer.precision == "fp32":
            ct = torch.promote_types(x.dtype, torch.float32)
            xc, wc = x.to(ct), weight.to(ct)
            y, ctx.extra = layer._fp32_forward(xc, wc, None if bias is None else bias.to(ct))
            ctx.save_for_backward(xc, wc)
            ctx.state = None
            return y.to(x.dtype)
        y, ctx.state = layer._int8_forward(x, weight, bias)
        # the quantised operands as saved tensors (sharing their memory): autograd frees them
        # after a backward pass unless retain_graph=True, and refuses a second pass then
        for q in ctx.state[:2]:
            if not q.data.flags.writeable:
                q.data = q.data.copy()
        ctx.save_for_backward(*(torch.from_numpy(q.data) for q in ctx.state[:2]))
        return y

    @staticmethod
    def backward(ctx, dy):
        layer = ctx.layer
        if torch.is_grad_enabled():
            raise RuntimeError(f"{layer._label()}: double backward (a backward pass with "
                               f"create_graph=True) is not supported: its gradients are not "
                               f"differentiable")
        saved = ctx.saved_tensors
        need = ctx.needs_input_grad[:3]
        xdtype, wdtype = ctx.dtypes
        if layer.precision == "fp32":
            x, weight = saved
            dx, dw, db = layer._fp32_backward(x, weight, ctx.extra, dy.to(x.dtype), *need)
            return (None if dx is None else dx.to(xdtype), None if dw is None else dw.to(wdtype),
                    None if db is None else db.to(wdtype), None)
        qs = ctx.state[:2]
        for q, t in zip(qs, saved, strict=True):
            q.data = t.numpy()
        try:
            dx, dw, db = layer._int8_backward(ctx.state, dy, *need)
        finally:
            for q in qs:                 # the saved tensors own the memory
                q.data = None
        return dx, dw, db, None


class Linear(_Layer, torch.nn.Linear):
    """``torch.nn.Linear`` whose GEMMs run on the accelerator.

    Parameters
    ----------
    in_features, out_features, bias, device, dtype
        As ``torch.nn.Linear`` (weight ``out_features x in_features``).
    accel : Accel or firmware.Device, optional
        The accelerator (a bare Device gets an :class:`Accel` with default settings). Needed
        for ``precision="int8"``.
    precision : {"int8", "fp32"}
        ``"int8"``: block floating point on the Device. ``"fp32"``: the same autograd
        Function with the GEMMs in torch, in float32 or the input's wider dtype (the
        reference).

    Notes
    -----
    Input ``(*, in_features)``: the rows of its flattening to a matrix are the blocks of
    ``"sample"`` (one exponent per row, i.e. per sample for a batch of vectors).
    """

    def __init__(self, in_features: int, out_features: int, bias: bool = True, device=None,
                 dtype=None, *, accel: Accel | Device | None = None, precision: str = "int8"):
        super().__init__(in_features, out_features, bias=bias, device=device, dtype=dtype)
        self._setup(accel, precision)

    def extra_repr(self) -> str:
        return super().extra_repr() + f", precision={self.precision!r}"

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not isinstance(x, torch.Tensor):
            raise TypeError(f"x must be a torch.Tensor, not {type(x).__name__}")
        if x.dim() == 0 or x.shape[-1] != self.in_features:
            raise ValueError(f"x must have shape (*, {self.in_features}), not "
                             f"{tuple(x.shape)}")
        return self._forward(x, _Function)

    # -- fp32 --------------------------------------------------------------------------------
    def _fp32_forward(self, x, weight, bias):
        y = x @ weight.T
        return (y + bias if bias is not None else y), None

    def _fp32_backward(self, x, weight, extra, dy, need_x, need_w, need_b):
        x2 = x.reshape(-1, self.in_features)
        dy2 = dy.reshape(-1, self.out_features)
        dx = (dy2 @ weight).reshape(x.shape) if need_x else None
        dw = dy2.T @ x2 if need_w else None
        db = dy2.sum(0) if need_b else None
        return dx, dw, db

    # -- int8 --------------------------------------------------------------------------------
    def _int8_forward(self, x, weight, bias):
        eng, acc = self._engine(), self.accel
        call = self._calls
        if self.training:
            self._calls += 1
        x2 = _numpy32(x).reshape(-1, self.in_features)
        n = x.shape[0] if x.dim() > 1 else 1
        policy = acc.blocks.activations
        axis = _axis(policy, 0, 1)
        if self._per_sample():
            q, e = self._quantize_samples(np.split(x2, n), 0, call, 0)
            qx = Q(q, row_exp=e)
        else:
            qx = eng.matrix(x2, axis)
        qw = self._quantize_weight(_numpy32(weight).T, call)
        uid = self._uid
        y = acc._gemm(eng, qx, qw, ((uid, "x"), (uid, "W")))
        if bias is not None:
            y += _numpy32(bias)
        out = torch.from_numpy(y.reshape(*x.shape[:-1], self.out_features)).to(x.dtype)
        return out, (qx, qw, call, n, x.shape, x.dtype, weight.dtype, eng)

    def _int8_backward(self, state, dy, need_x, need_w, need_b):
        qx, qw, call, n, shape, xdtype, wdtype, eng = state
        acc = self.accel
        dy2 = _numpy32(dy).reshape(-1, self.out_features)
        db = None
        if need_b:
            db = self._bias_grad(
                lambda: dy2.reshape(n, -1, self.out_features).astype(np.float64).sum(axis=1),
                lambda: dy2.sum(axis=0).astype(np.float32))
        if not (need_x or need_w):
            return None, None, _tensor(db, wdtype)
        if self._per_sample():
            q, e = self._quantize_samples(np.split(dy2, n), 0, call, 1)
            qd = Q(q, row_exp=e)
        else:
            qd = eng.matrix(dy2, _axis(acc.blocks.deltas, 0, 1))
        dw, dx = self._grads(eng, qx, qd, qw, need_w, need_x)
        dw = dw.T if need_w else None
        if need_x:
            dx = torch.from_numpy(dx.reshape(shape)).to(xdtype)
        return dx, _tensor(dw, wdtype), _tensor(db, wdtype)


def _tensor(a, dtype):
    return None if a is None else torch.from_numpy(np.ascontiguousarray(a)).to(dtype)


def _pair(v) -> tuple[int, int]:
    return (v, v) if isinstance(v, int) else tuple(v)


class Conv2d(_Layer, torch.nn.Conv2d):
    """``torch.nn.Conv2d`` whose GEMMs run on the accelerator (``im2col`` on the host, as
    :class:`firmware.ml.nn.Conv2d`: layout only).

    Parameters
    ----------
    in_channels, out_channels, kernel_size, stride, padding, dilation, bias, device, dtype
        As ``torch.nn.Conv2d`` (weight ``out x in x kh x kw``; ``padding`` an int, a pair,
        ``"valid"`` or ``"same"``).
    groups : int
        Must be 1.
    padding_mode : str
        Must be ``"zeros"``.
    accel, precision
        As :class:`Linear`.
    """

    def __init__(self, in_channels: int, out_channels: int, kernel_size, stride=1, padding=0,
                 dilation=1, groups: int = 1, bias: bool = True, padding_mode: str = "zeros",
                 device=None, dtype=None, *, accel: Accel | Device | None = None,
                 precision: str = "int8"):
        if groups != 1:
            raise ValueError(f"groups must be 1 (grouped convolutions are not GEMMs of one "
                             f"weight matrix here), not {groups!r}")
        if padding_mode != "zeros":
            raise ValueError(f"padding_mode must be 'zeros', not {padding_mode!r}")
        super().__init__(in_channels, out_channels, kernel_size, stride=stride,
                         padding=padding, dilation=dilation, groups=groups, bias=bias,
                         padding_mode=padding_mode, device=device, dtype=dtype)
        self._setup(accel, precision)

    def extra_repr(self) -> str:
        return super().extra_repr() + f", precision={self.precision!r}"

    def _pads(self) -> tuple[int, int, int, int]:
        """(top, bottom, left, right)."""
        kh, kw = self.kernel_size
        dh, dw = self.dilation
        if self.padding == "valid":
            return 0, 0, 0, 0
        if self.padding == "same":
            th, tw = dh * (kh - 1), dw * (kw - 1)
            return th // 2, th - th // 2, tw // 2, tw - tw // 2
        ph, pw = _pair(self.padding)
        return ph, ph, pw, pw

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not isinstance(x, torch.Tensor):
            raise TypeError(f"x must be a torch.Tensor, not {type(x).__name__}")
        if x.dim() != 4 or x.shape[1] != self.in_channels:
            raise ValueError(f"x must have shape (N, {self.in_channels}, H, W), not "
                             f"{tuple(x.shape)}")
        return self._forward(x, _Function)

    # -- im2col ------------------------------------------------------------------------------
    def _cols(self, x: np.ndarray):
        """``(n oh ow) x (c kh kw)`` patches of an NCHW array (as firmware.ml.nn.Conv2d)."""
        n, c, h, w = x.shape
        kh, kw = self.kernel_size
        sh, sw = self.stride
        dh, dw = self.dilation
        t, b, left, r = self._pads()
        xp = np.pad(x, ((0, 0), (0, 0), (t, b), (left, r))) if t or b or left or r else x
        eh, ew = dh * (kh - 1) + 1, dw * (kw - 1) + 1
        if xp.shape[2] < eh or xp.shape[3] < ew:
            raise ValueError(f"the input ({h}x{w}, padded {xp.shape[2]}x{xp.shape[3]}) is "
                             f"smaller than the kernel ({eh}x{ew})")
        win = np.lib.stride_tricks.sliding_window_view(xp, (eh, ew), axis=(2, 3))
        win = win[:, :, ::sh, ::sw, ::dh, ::dw]                      # n c oh ow kh kw
        oh, ow = win.shape[2], win.shape[3]
        return win.transpose(0, 2, 3, 1, 4, 5).reshape(n * oh * ow, c * kh * kw), oh, ow

    def _col2im(self, dcols: np.ndarray, shape, oh, ow) -> np.ndarray:
        n, c, h, w = shape
        kh, kw = self.kernel_size
        sh, sw = self.stride
        dh, dw = self.dilation
        t, b, left, r = self._pads()
        d = dcols.reshape(n, oh, ow, c, kh, kw).transpose(0, 3, 1, 2, 4, 5)
        dxp = np.zeros((n, c, h + t + b, w + left + r), dcols.dtype)
        for i in range(kh):
            for j in range(kw):
                dxp[:, :, i * dh:i * dh + sh * (oh - 1) + 1:sh,
                    j * dw:j * dw + sw * (ow - 1) + 1:sw] += d[..., i, j]
        return dxp[:, :, t:t + h, left:left + w]

    # -- fp32 --------------------------------------------------------------------------------
    def _fp32_cols(self, x):
        t, b, left, r = self._pads()
        xp = F.pad(x, (left, r, t, b)) if t or b or left or r else x
        cols = F.unfold(xp, self.kernel_size, dilation=self.dilation, stride=self.stride)
        return cols, xp.shape[2:]

    def _fp32_forward(self, x, weight, bias):
        kh, kw = self.kernel_size
        sh, sw = self.stride
        dh, dw = self.dilation
        cols, padded = self._fp32_cols(x)                          # n (c kh kw) L
        oh = (padded[0] - dh * (kh - 1) - 1) // sh + 1
        ow = (padded[1] - dw * (kw - 1) - 1) // sw + 1
        y = (weight.reshape(self.out_channels, -1) @ cols).reshape(x.shape[0], -1, oh, ow)
        if bias is not None:
            y = y + bias.reshape(1, -1, 1, 1)
        return y, (padded,)

    def _fp32_backward(self, x, weight, extra, dy, need_x, need_w, need_b):
        (padded,) = extra
        n = x.shape[0]
        dy2 = dy.reshape(n, self.out_channels, -1)                # n cout L
        w2 = weight.reshape(self.out_channels, -1)
        dx = dw = db = None
        if need_w:
            cols, _ = self._fp32_cols(x)
            dw = (dy2 @ cols.transpose(1, 2)).sum(0).reshape(weight.shape)
        if need_x:
            t, b, left, r = self._pads()
            dxp = F.fold(w2.T @ dy2, tuple(padded), self.kernel_size, dilation=self.dilation,
                         stride=self.stride)
            dx = dxp[:, :, t:t + x.shape[2], left:left + x.shape[3]]
        if need_b:
            db = dy.sum((0, 2, 3))
        return dx, dw, db

    # -- int8 --------------------------------------------------------------------------------
    def _quantized_cols(self, x: np.ndarray, call) -> tuple[Q, int, int]:
        eng, acc = self._engine(), self.accel
        policy = acc.blocks.activations
        n = x.shape[0]
        if policy == "row":                   # per im2col row: quantise the patches
            with eng.time("layout"):
                cols, oh, ow = self._cols(x)
            if self._per_sample():
                q, e = self._quantize_samples(np.split(cols, n), 0, call, 0)
                return Q(q, row_exp=e), oh, ow
            return eng.matrix(cols, 0), oh, ow
        if self._per_sample():                # "sample"
            q, e = self._quantize_samples(np.split(x, n), 0, call, 0)
        else:
            q, e = eng.quantize(x, _axis(policy, 0, 1))
        with eng.time("layout"):
            cols, oh, ow = self._cols(q)
            kk = self.kernel_size[0] * self.kernel_size[1]
            return _patch_blocks(cols, e, policy, oh * ow, kk), oh, ow

    def _quantized_deltas(self, dy: np.ndarray, call, eng) -> Q:
        policy = self.accel.blocks.deltas
        n, cout, oh, ow = dy.shape
        if policy == "row":
            with eng.time("layout"):
                mat = dy.transpose(0, 2, 3, 1).reshape(n * oh * ow, cout)
            if self._per_sample():
                q, e = self._quantize_samples(np.split(mat, n), 0, call, 1)
                return Q(q, row_exp=e)
            return eng.matrix(mat, 0)
        if self._per_sample():
            q, e = self._quantize_samples(np.split(dy, n), 0, call, 1)
        else:
            q, e = eng.quantize(dy, _axis(policy, 0, 1))
        with eng.time("layout"):
            mat = np.ascontiguousarray(q.transpose(0, 2, 3, 1).reshape(n * oh * ow, cout))
        if policy == "tensor":
            return Q(mat, exp=e)
        if policy == "sample":
            return Q(mat, row_exp=np.repeat(e, oh * ow))
        return Q(mat, col_exp=e)

    def _int8_forward(self, x, weight, bias):
        eng, acc = self._engine(), self.accel
        call = self._calls
        if self.training:
            self._calls += 1
        xn = _numpy32(x)
        qcols, oh, ow = self._quantized_cols(xn, call)
        qw = self._quantize_weight(_numpy32(weight).reshape(self.out_channels, -1).T, call)
        uid = self._uid
        y = acc._gemm(eng, qcols, qw, ((uid, "x"), (uid, "W")))
        if bias is not None:
            y += _numpy32(bias)
        with eng.time("layout"):
            y = y.reshape(x.shape[0], oh, ow, self.out_channels).transpose(0, 3, 1, 2)
            out = torch.from_numpy(np.ascontiguousarray(y)).to(x.dtype)
        return out, (qcols, qw, call, oh, ow, x.shape, x.dtype, weight.dtype, eng)

    def _int8_backward(self, state, dy, need_x, need_w, need_b):
        qcols, qw, call, oh, ow, shape, xdtype, wdtype, eng = state
        dyn = _numpy32(dy)
        n = dyn.shape[0]
        db = None
        if need_b:
            db = self._bias_grad(
                lambda: dyn.reshape(n * self.out_channels, -1).astype(np.float64).sum(
                    axis=1).reshape(n, self.out_channels),
                lambda: dyn.sum(axis=(0, 2, 3)).astype(np.float32))
        if not (need_x or need_w):
            return None, None, _tensor(db, wdtype)
        qd = self._quantized_deltas(dyn, call, eng)
        dw, dcols = self._grads(eng, qcols, qd, qw, need_w, need_x)
        if need_w:
            dw = dw.T.reshape(self.out_channels, self.in_channels, *self.kernel_size)
        dx = None
        if need_x:
            with eng.time("layout"):
                dx = torch.from_numpy(self._col2im(dcols, shape, oh, ow)).to(xdtype)
        return dx, _tensor(dw, wdtype), _tensor(db, wdtype)


class Conversion:
    """What :func:`convert` did to a model, kept as its ``conversion`` attribute.

    Attributes
    ----------
    swapped : list of str
        The names (as ``model.named_modules()`` gives them, ``""`` for ``model`` itself) of the
        layers now on the accelerator.
    kept : dict of str to str
        The layers left in torch, by name, each with the reason (``unsupported="keep"``).
    """

    def __init__(self, swapped: list[str], kept: dict[str, str]):
        self.swapped, self.kept = list(swapped), dict(kept)

    def __repr__(self) -> str:
        return f"Conversion(swapped={self.swapped!r}, kept={self.kept!r})"

    def __str__(self) -> str:
        lines = [f"on the accelerator: "
                 f"{', '.join(n or 'model' for n in self.swapped) or 'none'}"]
        lines += [f"kept in torch: {n or 'model'}: {why}" for n, why in self.kept.items()]
        return "\n".join(lines)


#: Modules whose forward pass computes with their own (or their children's) weights directly,
#: so swapped layers inside them would not run, or not always.
_BYPASSES = {
    torch.nn.MultiheadAttention:
        "MultiheadAttention computes its projections from in_proj_weight and out_proj.weight "
        "directly (torch.nn.functional.multi_head_attention_forward), never through Linear "
        "modules",
    torch.nn.TransformerEncoderLayer:
        "in eval() under no_grad, TransformerEncoderLayer's fast path "
        "(torch._transformer_encoder_layer_fwd) computes linear1, linear2 and its attention "
        "from their weights directly, bypassing swapped layers",
}


def _unsupported(m: torch.nn.Module) -> str | None:
    """Why ``m`` (a ``torch.nn.Linear`` or ``torch.nn.Conv2d``) cannot be swapped, or None."""
    if isinstance(m, torch.nn.modules.lazy.LazyModuleMixin) and m.has_uninitialized_params():
        return (f"{type(m).__name__} has uninitialised parameters (run a batch through the "
                f"model before converting it)")
    if type(m) not in (torch.nn.Linear, torch.nn.Conv2d):
        base = "Linear" if isinstance(m, torch.nn.Linear) else "Conv2d"
        return (f"{type(m).__name__} is a subclass of torch.nn.{base} (its forward pass may "
                f"differ from {base}'s)")
    bad = []
    if type(m) is torch.nn.Conv2d:
        if m.groups != 1:
            bad.append(f"groups={m.groups} (grouped and depthwise convolutions are not one "
                       f"GEMM; groups=1 only)")
        if m.padding_mode != "zeros":
            bad.append(f"padding_mode={m.padding_mode!r} ('zeros' only)")
    devices = {p.device.type for p in m.parameters(recurse=False)}
    if devices - {"cpu"}:
        bad.append(f"parameters on {', '.join(sorted(devices - {'cpu'}))} (CPU only)")
    ints = {p.dtype for p in m.parameters(recurse=False) if not p.is_floating_point()}
    if ints:
        bad.append(f"parameters of dtype {', '.join(map(str, ints))} (floating point only)")
    return f"a {type(m).__name__} with " + " and ".join(bad) if bad else None


def convert(model: torch.nn.Module, accel: Accel | Device | None, *, precision: str = "int8",
            unsupported: str = "raise") -> torch.nn.Module:
    """Swap every ``torch.nn.Linear`` and ``torch.nn.Conv2d`` of ``model`` for :class:`Linear`
    / :class:`Conv2d` on ``accel``, all or nothing.

    The new layers take over the old ones' parameters (the same ``Parameter`` objects, so
    ``requires_grad``, tied weights and an optimiser built before the conversion carry over),
    their training mode and their name in the model (in error messages). A layer that appears
    at several places in the model becomes one new layer.

    Every layer is checked before anything is changed. These cannot be swapped:

    * a ``Conv2d`` with ``groups != 1`` (grouped, depthwise) or a ``padding_mode`` other than
      ``"zeros"``, a layer with parameters not on the CPU;
    * subclasses of ``torch.nn.Linear`` / ``torch.nn.Conv2d`` (their forward pass may differ),
      and lazy layers not yet initialised;
    * the layers of a ``torch.nn.MultiheadAttention`` (it computes its projections from its
      weights directly, never through its ``Linear`` modules) and of a
      ``torch.nn.TransformerEncoderLayer`` (in ``eval()`` under ``no_grad`` its fast path does
      the same), and so of ``torch.nn.Transformer`` / ``TransformerEncoder`` built of them:
      swapped, they would be skipped without a word.

    Parameters
    ----------
    model : torch.nn.Module
        Changed in place.
    accel : Accel or firmware.Device or None
        The accelerator (``None`` only with ``precision="fp32"``).
    precision : {"int8", "fp32"}
        As :class:`Linear`.
    unsupported : {"raise", "keep"}
        ``"raise"``: if any layer cannot be swapped, raise and leave ``model`` untouched.
        ``"keep"``: swap the others and leave those in torch, with a warning.

    Returns
    -------
    torch.nn.Module
        ``model``, or the new layer when ``model`` itself is one. Its attribute
        ``conversion`` (a :class:`Conversion`) lists the layers swapped and those kept in
        torch, with the reasons.

    Raises
    ------
    TypeError
        ``model`` is not a ``torch.nn.Module``, or ``accel`` is of the wrong type.
    ValueError
        Some layers cannot be swapped and ``unsupported="raise"`` (the message names each
        one and why); ``model`` has a ``conversion`` attribute of its own; ``precision`` or
        ``unsupported`` is unknown.

    Warns
    -----
    UserWarning
        With ``unsupported="keep"``, when layers stay in torch (naming them).
    """
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, not {type(model).__name__}")
    if unsupported not in ("raise", "keep"):
        raise ValueError(f"unsupported must be 'raise' or 'keep', not {unsupported!r}")
    accel = _check_accel(accel, precision)
    if not isinstance(getattr(model, "conversion", None), (Conversion, type(None))):
        raise ValueError("model has an attribute 'conversion' of its own, where convert "
                         "records what it did; rename it")

    # plan: (parent or None, attribute, name, module) to swap; the names kept, and why
    plan, kept = [], {}
    inside: list[str] = []                  # modules whose layers are not swapped

    def visit(parent, attr, name, m):
        if isinstance(m, (Linear, Conv2d)):
            return
        for kind, why in _BYPASSES.items():
            if isinstance(m, kind):
                kept.setdefault(name, why)
                inside.append(name)
                return
        if not isinstance(m, (torch.nn.Linear, torch.nn.Conv2d)):
            return
        why = _unsupported(m)
        if why is not None:
            kept.setdefault(name, why)
        else:
            plan.append((parent, attr, name, m))

    visit(None, None, "", model)
    for name, parent in model.named_modules():
        if any(name == p or name.startswith(p + ".") for p in inside if p) or "" in inside:
            continue
        for attr, child in list(parent._modules.items()):      # each place of a shared one
            if child is not None:
                visit(parent, attr, f"{name}.{attr}" if name else attr, child)
    if kept and unsupported == "raise":
        raise ValueError("convert: these layers cannot run on the accelerator (nothing was "
                         "converted; unsupported='keep' leaves them in torch): "
                         + "; ".join(f"{n or 'model'}: {why}" for n, why in kept.items()))

    new_of: dict[int, torch.nn.Module] = {}
    for _, _, name, m in plan:              # build every new layer before changing anything
        if id(m) in new_of:
            continue
        kw = dict(device=m.weight.device, dtype=m.weight.dtype, accel=accel,
                  precision=precision)
        if type(m) is torch.nn.Linear:
            new = Linear(m.in_features, m.out_features, bias=m.bias is not None, **kw)
        else:
            new = Conv2d(m.in_channels, m.out_channels, m.kernel_size, stride=m.stride,
                         padding=m.padding, dilation=m.dilation, bias=m.bias is not None, **kw)
        new.weight = m.weight
        if m.bias is not None:
            new.bias = m.bias
        new.train(m.training)
        new._layer_name = name
        new_of[id(m)] = new
    swapped = []
    for parent, attr, name, m in plan:
        if parent is None:
            model = new_of[id(m)]
        else:
            setattr(parent, attr, new_of[id(m)])
        swapped.append(name)
    if kept:
        warnings.warn("convert: these layers stay in torch, not on the accelerator: "
                      + "; ".join(f"{n or 'model'}: {why}" for n, why in kept.items()),
                      stacklevel=2)
    model.conversion = Conversion(swapped, kept)
    return model


# -- the 8-bit optimiser -------------------------------------------------------------------
def _q(x: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """As :func:`firmware.ml.optim._q`: one exponent per tensor, stochastic rounding."""
    q, e = quantize(np.asarray(x, np.float32), rounding="stochastic", rng=rng)
    return dequantize(q, e)


class SGD(torch.optim.Optimizer):
    """SGD with momentum and weight decay, 8-bit (SWALP) or float32, as a
    ``torch.optim.Optimizer``: the update of :class:`firmware.ml.optim.SGD`, bit for bit.

    Per param group, ``weights="int8"`` keeps weights, gradients and momentum in 8-bit block
    floating point, one exponent per tensor, quantised with stochastic rounding after every
    step: ``g = Q(grad)``, ``v = Q(momentum v + g + weight_decay w)``, ``w = Q(w - lr v)``
    (the weights are quantised when the group is added, so they are always on the 8-bit
    grid). ``weights="fp32"`` keeps float32 master weights and momentum:
    ``v = momentum v + grad + weight_decay w``, ``w = w - lr v``.

    Parameters
    ----------
    params : iterable
        Parameters or param groups (dicts, which may set ``lr``, ``momentum``,
        ``weight_decay`` and ``weights`` of their own).
    lr : float
        Learning rate (> 0).
    momentum : float
        In [0, 1).
    weight_decay : float
        >= 0.
    weights : {"int8", "fp32"}
        The default of the groups.
    seed : int
        Seed of the stochastic rounding's draws (a ``numpy.random.Generator``, saved in
        :meth:`state_dict`).
    """

    def __init__(self, params, lr: float = 0.1, momentum: float = 0.9,
                 weight_decay: float = 0.0, *, weights: str = "int8", seed: int = 0):
        if not isinstance(seed, (int, np.integer)) or isinstance(seed, bool) or seed < 0:
            raise ValueError(f"seed must be a non-negative int, not {seed!r}")
        self.rng = np.random.default_rng(int(seed))
        defaults = dict(lr=lr, momentum=momentum, weight_decay=weight_decay, weights=weights)
        _check_group(defaults)
        super().__init__(params, defaults)

    def add_param_group(self, param_group: dict) -> None:
        """As ``torch.optim.Optimizer.add_param_group``; an ``"int8"`` group's parameters are
        quantised to the 8-bit grid."""
        _plain(torch.optim.Optimizer.add_param_group)(self, param_group)
        group = self.param_groups[-1]
        _check_group(group)
        for p in group["params"]:
            if p.dtype not in (torch.float32, torch.float64):
                raise TypeError(f"params must be float32 or float64 tensors, not {p.dtype}")
        if group["weights"] == "int8":
            with torch.no_grad():
                for p in group["params"]:
                    p.copy_(torch.from_numpy(_q(_numpy32(p), self.rng)))

    def zero_grad(self, set_to_none: bool = True) -> None:
        """As ``torch.optim.Optimizer.zero_grad``."""
        _plain(torch.optim.Optimizer.zero_grad)(self, set_to_none)

    @torch.no_grad()
    def step(self, closure=None):
        """One update of every parameter that has a gradient."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            lr, m, wd = group["lr"], group["momentum"], group["weight_decay"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if "momentum_buffer" not in state:
                    state["momentum_buffer"] = torch.zeros_like(p, dtype=torch.float32)
                v = state["momentum_buffer"].numpy()
                w, g = _numpy32(p), _numpy32(p.grad)
                if group["weights"] == "fp32":
                    v *= m
                    v += g + wd * w
                    w = w - lr * v
                else:
                    g = _q(g, self.rng)
                    v[...] = _q(m * v + g + wd * w, self.rng)
                    w = _q(w - lr * v, self.rng)
                p.copy_(torch.from_numpy(w))
        return loss

    def state_dict(self) -> dict:
        sd = _plain(torch.optim.Optimizer.state_dict)(self)
        sd["rng"] = self.rng.bit_generator.state
        return sd

    def load_state_dict(self, state_dict: dict) -> None:
        state_dict = dict(state_dict)
        rng = state_dict.pop("rng", None)
        _plain(torch.optim.Optimizer.load_state_dict)(self, state_dict)
        for s in self.state.values():        # keep the buffers float32 CPU (numpy views)
            if "momentum_buffer" in s:
                s["momentum_buffer"] = s["momentum_buffer"].to("cpu", torch.float32)
        if rng is not None:
            self.rng.bit_generator.state = rng


def _plain(method):
    """``method`` without ``torch._disable_dynamo``'s wrapper, whose first call imports
    ``torch._dynamo`` (seconds, in every process) for an optimiser that is never compiled."""
    return getattr(method, "__wrapped__", method)


def _check_group(g: dict) -> None:
    for name in ("lr", "momentum", "weight_decay"):
        v = g[name]
        if not isinstance(v, (int, float)) or isinstance(v, bool):
            raise TypeError(f"{name} must be a number, not {type(v).__name__}")
    if not g["lr"] > 0:
        raise ValueError(f"lr must be positive, not {g['lr']!r}")
    if not 0 <= g["momentum"] < 1:
        raise ValueError(f"momentum must be in [0, 1), not {g['momentum']!r}")
    if g["weight_decay"] < 0:
        raise ValueError(f"weight_decay must be >= 0, not {g['weight_decay']!r}")
    if g["weights"] not in ("int8", "fp32"):
        raise ValueError(f"weights must be 'int8' or 'fp32', not {g['weights']!r}")


def swalp_scheduler(optimizer: torch.optim.Optimizer, budget: float, *,
                    swa_lr: float | None = None, schedule: str = "swalp"):
    """SWALP's learning-rate schedule (:func:`firmware.ml.optim.schedule_lr`) as a
    ``torch.optim.lr_scheduler.LambdaLR``: call ``step()`` once per epoch.

    Parameters
    ----------
    optimizer : torch.optim.Optimizer
        Its groups' ``lr`` is ``lr0``.
    budget : float
        The pre-averaging budget in epochs.
    swa_lr : float, optional
        The averaging phase's learning rate (``None``: no averaging phase).
    schedule : {"swalp", "constant"}
    """
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise TypeError(f"optimizer must be a torch.optim.Optimizer, not "
                        f"{type(optimizer).__name__}")
    lambdas = []
    for group in optimizer.param_groups:
        lr0 = group["lr"]
        schedule_lr(schedule, 0, lr0, budget, swa_lr)           # checks the arguments

        def factor(epoch, lr0=lr0):
            return schedule_lr(schedule, epoch, lr0, budget, swa_lr) / lr0
        lambdas.append(factor)
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lambdas)


from firmware.torch.resident import ResidentSequential  # noqa: E402
from firmware.torch.step import DeviceTrainer, train_on_device  # noqa: E402
