"""Fully connected PyTorch networks whose activations, masks and deltas stay on the device.

.. code-block:: python

    import torch
    from firmware import Device
    import firmware.torch as ft

    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(784, 256),
                                torch.nn.ReLU(), torch.nn.Linear(256, 10))
    model = ft.ResidentSequential(model, Device("model"), seed=0)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)   # any optimiser
    loss = torch.nn.functional.cross_entropy(model(x), y)
    loss.backward()
    opt.step()

:class:`ResidentSequential` runs the passes of :class:`firmware.ml.resident.ResidentChain`
(the same code as :class:`firmware.ml.resident.ResidentMLP`, bit for bit) under autograd:
every tensor of a step is in BFP8 tile blocks in device memory and each GEMM's epilogue
writes the next GEMM's operand, so per step the host writes the batch, the weights and the
loss gradient and reads the logits and the weight and bias gradients -- nothing else.
"""

from __future__ import annotations

from collections import OrderedDict

import numpy as np
import torch

from firmware.ml.resident import ResidentChain, check_device

__all__ = ["ResidentSequential"]


def _host(t: torch.Tensor) -> np.ndarray:
    """A float32 C-contiguous numpy copy-or-view of a CPU-side tensor."""
    return np.ascontiguousarray(t.detach().to("cpu", torch.float32).numpy())


class _Chain(torch.autograd.Function):
    """The whole chain as one autograd node: inputs the batch and every weight and bias."""

    @staticmethod
    def forward(ctx, module, x, *params):
        logits, ctx.saved = module.chain.forward(_host(x), module._pairs(params),
                                                 train=module.training, keep=True)
        ctx.module = module
        ctx.devices = x.device, [None if p is None else p.device for p in params]
        return torch.from_numpy(logits).to(x.device)

    @staticmethod
    def backward(ctx, dy):
        if torch.is_grad_enabled():
            raise RuntimeError("ResidentSequential: double backward (create_graph=True) is "
                               "not supported: its gradients are not differentiable")
        saved, ctx.saved = ctx.saved, None
        if saved is None or saved.spent:
            raise RuntimeError("ResidentSequential: a forward pass takes one backward pass "
                               "(its tensors on the device are freed by the first; "
                               "retain_graph=True does not keep them)")
        xdev, pdevs = ctx.devices
        grads, dx = ctx.module.chain.backward(saved, _host(dy), need=ctx.needs_input_grad[2:],
                                              input_grad=ctx.needs_input_grad[1])
        out = [None, None if dx is None else torch.from_numpy(dx).to(xdev)]
        for i, (g, dev) in enumerate(zip(grads, pdevs, strict=True)):
            if g is not None and i % 2 == 0:
                g = np.ascontiguousarray(g.T)          # fan_in x fan_out -> torch's out x in
            out.append(None if g is None else torch.from_numpy(g).to(dev))
        return tuple(out)


class ResidentSequential(torch.nn.Module):
    """A ``torch.nn.Sequential`` of ``[Flatten] Linear ReLU Linear ReLU ... Linear``
    trained with its activations, ReLU masks and deltas on a :class:`firmware.Device`.

    The forward pass is one ``torch.autograd.Function`` over the whole chain, not one per
    layer: a layer's output must stay on the device as the next layer's operand, which a
    per-layer Function (a torch tensor between layers) cannot express. Forward: the batch
    and the weights are quantised on the device, each layer's GEMM adds the bias (per
    column), applies ReLU (keeping its mask) and rounds its output to BFP8 tile blocks
    through the write-back epilogue; the last writes float32 logits. Backward: the logits'
    gradient is quantised on the device, the weight and bias gradients come back in float32
    and the deltas go through the stored masks, stochastically rounded, on the device.
    Autograd gets the weight and bias gradients (and the input's, if it requires one: one
    more GEMM), so any torch optimiser (or :class:`firmware.torch.SGD`) updates the float32
    master weights, which are written to the device again in the next forward pass.

    The weights cross as ``Wᵀ`` (``in x out``), the layout of
    :class:`firmware.ml.resident.ResidentMLP`: with the same weights, seed, data, loss
    gradient and plain SGD the two train to the same weights bit for bit.

    In ``train()`` mode every quantisation rounds stochastically, with a seed per
    descriptor made of ``seed``, the pass (:attr:`passes`), the layer and the tensor's
    role, so ``golden``, ``model`` and ``rtl`` give the same results bit for bit; in ``eval()`` mode
    everything rounds to nearest (deterministic inference, as ``ResidentMLP.predict``).
    A forward pass whose graph is needed (grad enabled and a parameter or the input
    requiring grad) keeps its tensors on the device until its backward pass, or until
    autograd frees the graph.

    Parameters
    ----------
    model : torch.nn.Sequential
        Optionally a ``Flatten`` (``start_dim=1``, ``end_dim=-1``) first, then ``Linear``
        layers whose sizes chain, each but the last optionally followed by one ``ReLU``.
        Its layers themselves (not copies) become this module's, under the same names: the
        ``state_dict`` keys are the same, and the float32 Parameters are the master weights.
    device : firmware.Device
        A device as :class:`firmware.ml.resident.ResidentChain` takes it (``golden``,
        ``model``, ``rtl`` built with the epilogue).
    seed : int
        In ``[0, 2**32)``: the stochastic rounding's seeds.

    Attributes
    ----------
    chain : firmware.ml.resident.ResidentChain
        The passes on the device.

    Raises
    ------
    TypeError
        ``model`` is not a ``torch.nn.Sequential``, ``device`` not a Device, or a
        parameter is not float32.
    ValueError
        A layer other than ``Linear``, ``ReLU`` or a leading ``Flatten``; a ``ReLU`` first,
        twice in a row or last; sizes that do not chain; a device without the epilogue; a
        bad ``seed``.
    """

    def __init__(self, model: torch.nn.Sequential, device, *, seed: int = 0):
        super().__init__()
        if not isinstance(model, torch.nn.Sequential):
            raise TypeError(f"model must be a torch.nn.Sequential, not {type(model).__name__}")
        check_device(device)
        sizes, relu = self._structure(list(model.named_children()))
        for name, m in model.named_children():
            self.add_module(name, m)
        self.chain = ResidentChain(sizes, device, seed=seed, relu=relu)
        self._check_dtypes()

    @staticmethod
    def _structure(children):
        """The chain's sizes and ReLU flags, or a ValueError naming the first bad layer."""
        sizes, relu = [], []
        for i, (name, m) in enumerate(children):
            what = f"model: layer {name!r} ({type(m).__name__})"
            if isinstance(m, torch.nn.Flatten):
                if i or (m.start_dim, m.end_dim) != (1, -1):
                    raise ValueError(f"{what}: a Flatten may only come first, with "
                                     f"start_dim=1 and end_dim=-1")
            elif isinstance(m, torch.nn.ReLU):
                if not sizes or len(relu) == len(sizes) - 1:
                    raise ValueError(f"{what}: a ReLU must follow a Linear (one per layer)")
                relu.append(True)
            elif isinstance(m, torch.nn.Linear):
                if sizes and m.in_features != sizes[-1]:
                    raise ValueError(f"{what} takes {m.in_features} features, but the layer "
                                     f"before gives {sizes[-1]}: the sizes must chain")
                if sizes and len(relu) < len(sizes) - 1:
                    relu.append(False)
                if not sizes:
                    sizes.append(m.in_features)
                sizes.append(m.out_features)
            else:
                raise ValueError(f"{what} is not Linear, ReLU or a leading Flatten: only "
                                 f"fully connected chains stay on the device (use "
                                 f"firmware.torch.convert for other layers)")
        if not sizes:
            raise ValueError("model has no Linear layer")
        if len(relu) == len(sizes) - 1:
            raise ValueError(f"model: layer {children[-1][0]!r} (ReLU) is last: the logits "
                             f"leave the device in float32 from the last Linear")
        return sizes, relu

    def _linears(self) -> list[torch.nn.Linear]:
        return [m for m in self.children() if isinstance(m, torch.nn.Linear)]

    def _check_dtypes(self) -> None:
        for name, p in self.named_parameters():
            if p.dtype != torch.float32:
                raise TypeError(f"parameter {name} is {p.dtype}: the master weights must be "
                                f"float32")

    @staticmethod
    def _pairs(params):
        """``(W, b)`` per layer as the chain takes them: ``W`` transposed to ``in x out``."""
        pairs = []
        for w, b in zip(params[::2], params[1::2], strict=True):
            pairs.append((np.ascontiguousarray(_host(w).T),
                          None if b is None else _host(b).copy()))
        return pairs

    @property
    def traffic(self) -> dict:
        """Bytes the host wrote to and read from the device since the last forward pass
        began, by what they were: after a forward and a backward pass, one step's."""
        return self.chain.traffic

    @property
    def passes(self) -> int:
        """Training (stochastic) forward passes run: the next one's index in the seeds."""
        return self.chain.passes

    def extra_repr(self) -> str:
        return f"device={self.chain.device.backend!r}, seed={self.chain.seed}"

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """The logits of a batch, float32 (see the class documentation).

        Raises
        ------
        TypeError
            ``x`` is not a floating-point tensor, or a parameter is not float32.
        ValueError
            ``x`` is not a matrix (after the leading ``Flatten``, if any) or has the wrong
            number of features.
        """
        if not isinstance(x, torch.Tensor) or not x.is_floating_point():
            raise TypeError(f"x must be a floating-point torch.Tensor, not "
                            f"{getattr(x, 'dtype', type(x).__name__)}")
        children = list(self.children())
        if isinstance(children[0], torch.nn.Flatten):
            x = children[0](x)
        if x.dim() != 2:
            raise ValueError(f"x must be batch x features (after the leading Flatten, if "
                             f"any), not shape {tuple(x.shape)}")
        self._check_dtypes()
        x = x.to(torch.float32)
        params = []
        for m in self._linears():
            params += [m.weight, m.bias]
        self.chain.traffic = {}
        if torch.is_grad_enabled() and (x.requires_grad or any(
                p is not None and p.requires_grad for p in params)):
            return _Chain.apply(self, x, *params)
        logits, _ = self.chain.forward(_host(x), self._pairs(params), train=self.training)
        return torch.from_numpy(logits).to(x.device)

    def to_sequential(self) -> torch.nn.Sequential:
        """A plain ``torch.nn.Sequential`` of the same layers (sharing their Parameters), to
        run in float32 torch."""
        return torch.nn.Sequential(OrderedDict(self.named_children()))
