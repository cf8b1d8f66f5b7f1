"""A PyTorch CNN trained with its whole step on the device, recorded once and replayed.

.. code-block:: python

    import torch
    from firmware import Device
    import firmware.torch as ft

    model = torch.nn.Sequential(torch.nn.Conv2d(1, 8, 3, padding=1), torch.nn.ReLU(),
                                torch.nn.MaxPool2d(2), torch.nn.Flatten(),
                                torch.nn.Linear(8 * 14 * 14, 10))
    trainer = ft.train_on_device(model, Device("model"), (1, 28, 28), lr=0.05)
    print(trainer.plan)                 # what runs where, and why
    for x, y in batches:
        loss = trainer.step(x, y)       # one training step (forward, loss, backward, SGD)
    trainer.sync()                      # the device's weights into model's Parameters

:func:`train_on_device` converts a ``torch.nn.Sequential`` of ``Conv2d`` (``groups=1``, zero
padding, square kernels, with a bias), ``ReLU``, ``MaxPool2d`` (window equal to its stride,
no padding), ``AdaptiveAvgPool2d(1)`` (then ``Flatten``), ``Flatten`` and ``Linear`` into a
:class:`firmware.ml.nn.Network` with the model's weights, and trains it with
:class:`firmware.ml.resident_conv.ResidentConvNet`: every layer a convolution descriptor, the
optimiser the device's 8-bit SGD (SWALP's, no momentum), the step recorded once and
replayed with two doorbells where the device runs descriptor chains. Where a layer cannot
run that way, it falls back to :func:`firmware.torch.convert` (each ``Linear`` and
``Conv2d`` a layer of per-layer device calls, the rest in torch, any torch optimiser) and
:attr:`DeviceTrainer.plan` says which layer, and why.
"""

from __future__ import annotations

import numpy as np
import torch

from firmware.ml import nn
from firmware.ml.nn import softmax_cross_entropy
from firmware.ml.resident_conv import ResidentConvNet
from firmware.torch.resident import _host

__all__ = ["DeviceTrainer", "StepPlan", "to_network", "train_on_device"]


class StepPlan:
    """Where a model's training step runs (:func:`train_on_device`).

    Attributes
    ----------
    resident : bool
        The whole step on the device (:class:`ResidentConvNet`), recorded where it can be.
    recorded : bool
        The step is recorded once and replayed (the device runs descriptor chains).
    layers : list of str
        The model's layers, by name, as the device runs them.
    reason : str or None
        Why the step falls back to per-layer calls (the first layer that cannot run on the
        device, named), or None.
    """

    def __init__(self, resident, recorded, layers, reason=None):
        self.resident, self.recorded, self.layers, self.reason = (resident, recorded,
                                                                  list(layers), reason)

    def __str__(self) -> str:
        if self.resident:
            how = "recorded and replayed" if self.recorded else "descriptor by descriptor"
            return (f"the whole step on the device ({how}): "
                    f"{', '.join(self.layers)}")
        return (f"per-layer calls (firmware.torch.convert): {self.reason}")

    def __repr__(self) -> str:
        return (f"StepPlan(resident={self.resident}, recorded={self.recorded}, "
                f"reason={self.reason!r})")


def to_network(model: torch.nn.Sequential) -> tuple[nn.Network, list]:
    """``model``'s layers as a :class:`firmware.ml.nn.Network` with its weights (float32
    copies), and per layer of the network the torch module it came from (None for those
    without weights).

    Raises
    ------
    TypeError
        ``model`` is not a ``torch.nn.Sequential``.
    ValueError
        A layer with no counterpart, named with the reason.
    """
    if not isinstance(model, torch.nn.Sequential):
        raise TypeError(f"model must be a torch.nn.Sequential, not {type(model).__name__}")
    layers, sources = [], []
    children = list(model.named_children())
    rng = np.random.default_rng(0)                 # (shapes only: the weights are replaced)
    skip = False
    for i, (name, m) in enumerate(children):
        what = f"layer {name!r} ({type(m).__name__})"
        if skip:
            skip = False
            continue
        if type(m) is torch.nn.Conv2d:
            k, s, p = m.kernel_size, m.stride, m.padding
            bad = [f"groups={m.groups}"] if m.groups != 1 else []
            bad += [f"padding_mode={m.padding_mode!r}"] if m.padding_mode != "zeros" else []
            bad += [f"kernel {k}"] if k[0] != k[1] else []
            bad += [f"stride {s}"] if s[0] != s[1] else []
            bad += [f"padding {p}"] if isinstance(p, str) or p[0] != p[1] else []
            bad += [f"dilation {m.dilation}"] if m.dilation != (1, 1) else []
            bad += ["no bias"] if m.bias is None else []
            if bad:
                raise ValueError(f"{what}: {', '.join(bad)} (square kernels, equal strides "
                                 f"and padding, zero padding, groups=1, no dilation, a bias)")
            layer = nn.Conv2d(m.in_channels, m.out_channels, k[0], rng, stride=s[0],
                              padding=p[0])
            layer.params["W"][...] = _host(m.weight).reshape(m.out_channels, -1).T
            layer.params["b"][...] = _host(m.bias)
        elif type(m) is torch.nn.Linear:
            if m.bias is None:
                raise ValueError(f"{what}: no bias (the device's step trains one)")
            layer = nn.Linear(m.in_features, m.out_features, rng)
            layer.params["W"][...] = _host(m.weight).T
            layer.params["b"][...] = _host(m.bias)
        elif type(m) is torch.nn.ReLU:
            layer, m = nn.ReLU(), None
        elif type(m) is torch.nn.MaxPool2d:
            k = m.kernel_size
            k = k[0] if isinstance(k, tuple) and len(set(k)) == 1 else k
            if not isinstance(k, int) or m.stride not in (k, (k, k)) \
                    or m.padding not in (0, (0, 0)) \
                    or m.dilation not in (1, (1, 1)) or m.ceil_mode:
                raise ValueError(f"{what}: a square window equal to its stride, no padding, "
                                 f"dilation or ceil_mode")
            layer, m = nn.MaxPool2d(k), None
        elif type(m) is torch.nn.AdaptiveAvgPool2d:
            following = children[i + 1][1] if i + 1 < len(children) else None
            if m.output_size not in (1, (1, 1)) or type(following) is not torch.nn.Flatten:
                raise ValueError(f"{what}: only AdaptiveAvgPool2d(1) followed by Flatten (a "
                                 f"global average pool)")
            layer, m, skip = nn.GlobalAvgPool2d(), None, True
        elif type(m) is torch.nn.Flatten:
            if (m.start_dim, m.end_dim) != (1, -1):
                raise ValueError(f"{what}: start_dim=1 and end_dim=-1 only")
            layer, m = nn.Flatten(), None
        else:
            raise ValueError(f"{what}: no counterpart on the device (Conv2d, Linear, ReLU, "
                             f"MaxPool2d, AdaptiveAvgPool2d(1), Flatten)")
        layers.append(layer)
        sources.append(m)
    return nn.Network(layers), sources


class DeviceTrainer:
    """A model's training step on a device: the whole step (:class:`ResidentConvNet`), or
    per-layer calls where a layer cannot run that way (see the module documentation).

    Attributes
    ----------
    model : torch.nn.Module
        The model (converted by :func:`firmware.torch.convert` in the per-layer case).
    plan : StepPlan
    resident : firmware.ml.resident_conv.ResidentConvNet or None
    optimizer : torch.optim.Optimizer or None
        The per-layer case's (:class:`firmware.torch.SGD`, 8-bit weights, no momentum).
    """

    def __init__(self, model, device, input_shape, *, lr, weight_decay=0.0, seed=0):
        from firmware.ml.resident import check_seed
        if not isinstance(model, torch.nn.Module):
            raise TypeError(f"model must be a torch.nn.Module, not {type(model).__name__}")
        if not lr > 0 or not weight_decay >= 0:
            raise ValueError(f"need lr > 0 and weight_decay >= 0, not {lr}, {weight_decay}")
        check_seed(seed)
        self.model, self.resident, self.optimizer = model, None, None
        try:
            if not isinstance(model, torch.nn.Sequential):
                raise ValueError(f"model: a {type(model).__name__}, not a "
                                 f"torch.nn.Sequential")
            net, self._sources = to_network(model)
            self.resident = ResidentConvNet(net, input_shape, device, seed=seed, lr=lr,
                                            weight_decay=weight_decay)
        except ValueError as e:
            from firmware.torch import SGD, Accel, convert
            self.model = convert(model, Accel(device, seed=seed), unsupported="keep")
            self.optimizer = SGD(self.model.parameters(), lr=lr, momentum=0.0,
                                 weight_decay=weight_decay, seed=seed)
            self.plan = StepPlan(False, False, [], str(e))
            return
        names = [n for n, _ in model.named_children()]
        self.plan = StepPlan(True, self.resident.recorded, names)

    @property
    def lr(self) -> float:
        return self.resident.lr if self.resident is not None \
            else self.optimizer.param_groups[0]["lr"]

    @lr.setter
    def lr(self, value: float) -> None:
        if not value > 0:
            raise ValueError(f"lr must be positive, not {value!r}")
        if self.resident is not None:
            self.resident.lr = float(value)
        else:
            for g in self.optimizer.param_groups:
                g["lr"] = float(value)

    def step(self, x: torch.Tensor, y: torch.Tensor) -> float:
        """One training step on a batch (images ``N x C x H x W``, integer labels): the mean
        cross-entropy loss.

        Raises
        ------
        TypeError
            ``x`` is not a floating-point tensor or ``y`` not an integer one.
        """
        if not isinstance(x, torch.Tensor) or not x.is_floating_point():
            raise TypeError(f"x must be a floating-point torch.Tensor, not "
                            f"{getattr(x, 'dtype', type(x).__name__)}")
        if not isinstance(y, torch.Tensor) or y.is_floating_point() or y.is_complex():
            raise TypeError(f"y must be an integer torch.Tensor of labels, not "
                            f"{getattr(y, 'dtype', type(y).__name__)}")
        if self.resident is not None:
            return float(self.resident.step(_host(x), y.detach().cpu().numpy()))
        self.model.train()
        self.optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(self.model(x.to(torch.float32)), y)
        loss.backward()
        self.optimizer.step()
        return float(loss.detach())

    def logits(self, x: torch.Tensor) -> torch.Tensor:
        """The logits of a batch (round-to-nearest quantisation), float32."""
        if self.resident is not None:
            return torch.from_numpy(self.resident.forward(_host(x))[0])
        self.model.eval()
        with torch.no_grad():
            return self.model(x.to(torch.float32))

    def loss(self, x: torch.Tensor, y: torch.Tensor) -> float:
        """The mean cross-entropy of a batch's logits (:meth:`logits`)."""
        loss, _ = softmax_cross_entropy(self.logits(x).numpy(), y.detach().cpu().numpy())
        return float(loss)

    def sync(self) -> None:
        """Copy the device's weights (dequantised) into the model's Parameters (no-op for
        per-layer calls, whose Parameters are the weights)."""
        if self.resident is None:
            return
        params = dict(self.resident.params)
        i = 0
        for m in self._sources:
            if m is None:
                continue
            w, b = params[f"W{i}"], params[f"b{i}"]
            with torch.no_grad():
                m.weight.copy_(torch.from_numpy(np.ascontiguousarray(w.T)).reshape(
                    m.weight.shape))
                m.bias.copy_(torch.from_numpy(b))
            i += 1


def train_on_device(model, device, input_shape, *, lr, weight_decay=0.0,
                    seed=0) -> DeviceTrainer:
    """A :class:`DeviceTrainer` for ``model`` on ``device`` (images of ``input_shape``,
    ``(C, H, W)``): the whole step on the device where every layer runs there, else
    per-layer calls, :attr:`DeviceTrainer.plan` saying which and why."""
    return DeviceTrainer(model, device, input_shape, lr=lr, weight_decay=weight_decay,
                         seed=seed)
