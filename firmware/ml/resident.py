"""A fully connected ReLU network whose activations, masks and deltas stay on the device.

:class:`ResidentMLP` trains with :meth:`firmware.Device.quantize` and
:meth:`firmware.Device.bfp_gemm`: every tensor of a step is in BFP8 tile blocks
(:mod:`sim.models.bfp`) in device memory, and every GEMM writes its output through the
write-back epilogue as the next GEMM's operand. Per step the host

* writes the input batch (quantised on the device) and reads the logits (float32);
* computes the loss and writes its gradient (quantised on the device);
* runs the optimiser: it reads each layer's weight and bias gradients (float32, written by
  the device) and writes the float32 master weights, which the device quantises.

Nothing else crosses: ReLU, its mask, the bias, the deltas through the mask, and every
quantisation run on the device. With ``optimizer="device"`` the optimiser runs there too:
the weights stay on the device in BFP8 tile blocks (the biases in float32) and each
weight-gradient GEMM steps them in its epilogue (:meth:`firmware.Device.sgd_update`), so
per step only the batch, the loss gradient and the logits cross. The ``golden`` backend
gives the same weights bit for bit as
``model`` and ``rtl``: the stochastic rounding's bits come from a counter-based generator
seeded per descriptor, never from the order of the work.

A device needs BFP8 outputs with bias, ReLU and the mask applied backward
(``CONFIG_FEATURES``). Where it has no quantise-only descriptor, or no bias on a float32
output, the chain does that part on the host, bit for bit: it quantises the batch, the loss
gradient and the weights with the same seeds before writing them (BFP8 crosses instead of
float32), or adds the last layer's bias to the logits it reads
(:attr:`ResidentChain.host_quantize`, :attr:`ResidentChain.host_bias`; the RTL's epilogue
builds whose tile row is whole bus words have both, ``CONFIG_FEATURES.FP32``).

Layer ``l`` computes ``h_l = relu(h_{l-1} W_l + b_l)`` (no ReLU on the last), with ``W_l``
of shape ``(fan_in, fan_out)`` as :class:`firmware.ml.nn.Linear` keeps it. Backward, with
``d_l`` the quantised delta at layer ``l``'s output:

* ``dW_l = h_{l-1}^T d_l`` and ``db_l = 1^T d_l`` (float32, for the optimiser);
* ``d_{l-1} = mask_{l-1} * (d_l W_l^T)``, quantised with stochastic rounding.

:class:`ResidentChain` is those passes without the weights or the optimiser, for front ends
that keep the master weights themselves (:class:`ResidentMLP`, and
:class:`firmware.torch.ResidentSequential` for PyTorch).
"""

from __future__ import annotations

import copy

import numpy as np

from firmware.ml.nn import softmax_cross_entropy
from firmware.ml.optim import SGD
from firmware.spec.regmap import TILE_BLOCK
from sim.models import bfp

__all__ = ["ResidentChain", "ResidentPass", "ResidentMLP", "descriptor_seed"]

#: the most layers a chain may have: a descriptor's seed gives the layer 6 bits
MAX_LAYERS = 63
#: XORed into a weight update's seed (the chain's seed bits): apart from every other role
SGD_SEED = 0x5EED << 48
#: XORed into the seed of a backward-data descriptor whose deltas are summed into another
#: (a residual block's first term): apart from the layer's own deltas and weight update
SUM_SEED = 0xA5A5 << 48


def descriptor_seed(seed: int, step: int, layer: int, role: int) -> int:
    """The 64-bit seed of one descriptor of a resident network: the network's seed (32
    bits), the pass (24 bits, from bit 8), the layer (6 bits) and the role (0 activation, 1
    delta, 2 input, 3 loss gradient), never reused within ``2**24`` passes. A recorded pass
    0 replays as pass ``p`` with ``p << 8`` XORed in (``CHAIN_SEED``)."""
    return ((seed << 32) | (step & 0xFFFFFF) << 8 | layer << 2 | role) \
        & 0xFFFF_FFFF_FFFF_FFFF


def check_seed(seed) -> None:
    """A resident network's seed is an integer in ``[0, 2**32)``, else ValueError."""
    if not isinstance(seed, (int, np.integer)) or isinstance(seed, bool) \
            or not 0 <= seed < 1 << 32:
        raise ValueError(f"seed must be an integer in [0, 2**32), not {seed!r}")


def check_sgd(device, hint: str = "") -> None:
    """``device`` steps BFP8 (stochastically rounded) and float32 targets
    (``DESC_EPILOGUE.SGD``), else ValueError ending with ``hint``."""
    from firmware.runtime.epilogue import offers
    if not offers(device, SGD=1, BFP8=1, STOCHASTIC=1) or not offers(device, SGD=1):
        raise ValueError(f"device: this {device.backend} accelerator does not offer "
                         f"DESC_EPILOGUE.SGD (CONFIG_FEATURES.OPS){hint}")


def ones_row(device, cache: dict, columns: int):
    """A ``1 x columns`` BfpTensor of ones on ``device`` (:func:`sim.models.bfp.ones_row`),
    kept in ``cache``: ``1^T d`` sums a delta's rows exactly."""
    if columns not in cache:
        cache[columns] = device.bfp_tensor(*bfp.ones_row(columns, block=TILE_BLOCK))
    return cache[columns]


def check_device(device) -> None:
    """Refuse a device that cannot keep a chain resident.

    Raises
    ------
    TypeError
        ``device`` is not a :class:`firmware.Device`.
    ValueError
        Its ``CONFIG_FEATURES`` lack the write-back epilogue or tile exponents.
    """
    from firmware.runtime.device import Device
    from firmware.runtime.epilogue import offers
    if not isinstance(device, Device):
        raise TypeError(f"device must be a firmware.Device, not {type(device).__name__}")
    # (what has no host fallback: BFP8 outputs with bias, ReLU and the mask backward)
    if not offers(device, BFP8=1, STOCHASTIC=1, BIAS=2, RELU=1) \
            or not offers(device, BFP8=1, STOCHASTIC=1, MASK_IN=1):
        raise ValueError(f"device: this {device.backend} accelerator has no write-back "
                         f"epilogue or tile exponents (CONFIG_FEATURES), which resident "
                         f"layers need: use Device('golden') or Device('model'), or the host "
                         f"path (firmware.ml's blocks policies, firmware.torch.Linear)")


def _free(layers, keep=()) -> None:
    """Free the tensors of ``layers`` but those in ``keep`` (resident weights)."""
    for saved in layers:
        for t in saved:
            if t is not None and not any(t is k for k in keep):
                t.free()


class ResidentPass:
    """What one forward pass of a :class:`ResidentChain` keeps on the device for its
    backward pass: each layer's input, quantised weights and ReLU mask.

    Attributes
    ----------
    step : int
        The pass's index in the seeds of its descriptors.
    rounding : {"stochastic", "nearest"}
        The rounding of its descriptors, forward and backward.
    batch : int
        Its rows.
    """

    def __init__(self, step: int, rounding: str, batch: int, layers: list, keep=()):
        self.step, self.rounding, self.batch = step, rounding, batch
        self.layers, self.keep = layers, tuple(keep)

    @property
    def spent(self) -> bool:
        """The tensors were freed (after the backward pass, or by :meth:`free`)."""
        return self.layers is None

    def free(self) -> None:
        """Give the device buffers back."""
        layers, self.layers = self.layers, None
        _free(layers or (), self.keep)

    def __del__(self):
        try:
            self.free()
        except Exception:                                   # pragma: no cover
            pass              # the device may be gone already (interpreter shutdown)


class ResidentChain:
    """The forward and backward passes of a chain of fully connected layers on a device,
    without its weights or optimiser (see the module documentation).

    Parameters
    ----------
    sizes : sequence of int
        Input features, the hidden layers' widths, the outputs (at least two entries).
    device : firmware.Device
        A device whose ``CONFIG_FEATURES`` offers BFP8 outputs with bias, ReLU and the mask
        applied backward (``golden``, ``model``, or ``rtl`` built with the epilogue).
    seed : int
        In ``[0, 2**32)``: every descriptor's seed is made of it, the pass, the layer and
        the tensor's role, so no two descriptors share one (within ``2**24`` passes).
    relu : sequence of bool, optional
        Whether a ReLU follows each layer but the last; default all.

    Attributes
    ----------
    passes : int
        Stochastic (training) forward passes run; the next one's index in the seeds.
    host_quantize : bool
        The device has no quantise-only descriptor: the host quantises what it writes.
    host_bias : bool
        The device has no bias on a float32 output: the host adds the last layer's bias.
    traffic : dict
        Bytes the host wrote to and read from the device, by what they were, since the
        caller last cleared it.

    Raises
    ------
    TypeError, ValueError
        A bad argument, named in the message; a device without the epilogue.
    """

    def __init__(self, sizes, device, *, seed: int = 0, relu=None):
        sizes = [int(s) for s in sizes]
        if len(sizes) < 2 or min(sizes) < 1:
            raise ValueError(f"sizes must be at least two positive widths, not {sizes}")
        if len(sizes) - 1 > MAX_LAYERS:
            raise ValueError(f"sizes gives {len(sizes) - 1} layers, at most {MAX_LAYERS} "
                             f"fit the descriptors' seeds")
        check_seed(seed)
        relu = [True] * (len(sizes) - 2) if relu is None else [bool(r) for r in relu]
        if len(relu) != len(sizes) - 2:
            raise ValueError(f"relu must have one flag per layer but the last, "
                             f"{len(sizes) - 2}, not {len(relu)}")
        check_device(device)
        self.sizes, self.device, self.seed, self.relu = sizes, device, int(seed), relu
        # the host's part where the device lacks it (bit for bit the same results): the
        # quantisation of what the host writes, and the last layer's bias on its float32
        # outputs
        from firmware.runtime.epilogue import offers
        self.host_quantize = not (offers(device, QUANTIZE_ONLY=1, BFP8=1, STOCHASTIC=1))
        self.host_bias = not offers(device, BIAS=2)
        self.passes = 0
        self.traffic: dict = {}
        self._ones: dict = {}

    @property
    def layers(self) -> int:
        return len(self.sizes) - 1

    def __deepcopy__(self, memo):
        """A copy on the same device (a model's copy, as ``AveragedModel`` makes, shares
        the accelerator)."""
        new = copy.copy(self)
        new.sizes, new.relu, new.traffic, new._ones = list(self.sizes), list(self.relu), {}, {}
        return new

    def _seed(self, step: int, layer: int, role: int) -> int:
        """:func:`descriptor_seed` of this chain's seed."""
        return descriptor_seed(self.seed, step, layer, role)

    def _ones_row(self, batch: int):
        """A 1 x batch BfpTensor of ones (mantissa 64, exponent -6): ``1^T d`` sums a delta's
        rows exactly."""
        return ones_row(self.device, self._ones, batch)

    def _quantize(self, what: str, x: np.ndarray, rounding: str, seed: int):
        """``x`` written to the device as a BfpTensor: quantised there, or, where the device
        has no quantise-only descriptor (:attr:`host_quantize`), here with the same seed."""
        dev = self.device
        if not self.host_quantize:
            self._count(what, x.nbytes)
            return dev.quantize(x, rounding=rounding, seed=seed)
        with dev.profile.time("quantize"):
            q, e = bfp.quantize_tiles(x, rounding=rounding, seed=seed)
        self._count(what, q.nbytes + e.nbytes)
        return dev.bfp_tensor(q, e)

    def _count(self, what: str, nbytes: int) -> None:
        self.traffic[what] = self.traffic.get(what, 0) + int(nbytes)

    def _check_params(self, params) -> None:
        from firmware.runtime.device import DeviceTensor
        from firmware.runtime.epilogue import BfpTensor
        if len(params) != self.layers:
            raise ValueError(f"params must hold {self.layers} (W, b) pairs, not {len(params)}")
        for i, ((w, b), fan_in, fan_out) in enumerate(zip(params, self.sizes, self.sizes[1:],
                                                          strict=False)):
            if isinstance(w, BfpTensor) and w.shape == (fan_in, fan_out) \
                    and w.q.device is self.device:
                pass                                   # resident weights
            elif not isinstance(w, np.ndarray) or w.dtype != np.float32 \
                    or w.shape != (fan_in, fan_out):
                raise ValueError(f"params: W{i} must be a float32 {fan_in}x{fan_out} matrix, "
                                 f"not {getattr(w, 'dtype', type(w).__name__)} "
                                 f"{getattr(w, 'shape', '')}")
            if isinstance(b, DeviceTensor) and b.device is self.device \
                    and b.dtype == np.float32 and b.shape == (1, fan_out):
                continue                               # a resident bias
            if b is not None and (not isinstance(b, np.ndarray) or b.dtype != np.float32
                                  or b.shape != (fan_out,)):
                raise ValueError(f"params: b{i} must be None or a float32 vector of "
                                 f"{fan_out}, not {getattr(b, 'dtype', type(b).__name__)} "
                                 f"{getattr(b, 'shape', '')}")

    def forward(self, x: np.ndarray, params, *, train: bool = False, keep: bool = False):
        """The outputs of a batch.

        Parameters
        ----------
        x : numpy.ndarray
            float32, ``batch x sizes[0]``; written to the device and quantised there.
        params : sequence of (numpy.ndarray, numpy.ndarray or None)
            Each layer's float32 ``W`` (``fan_in x fan_out``) and bias (or None), written to
            the device and quantised there.
        train : bool
            Stochastic rounding (a new pass index for the seeds); else round to nearest.
        keep : bool
            Keep what the backward pass needs on the device.

        Returns
        -------
        tuple of (numpy.ndarray, ResidentPass or None)
            The float32 outputs, ``batch x sizes[-1]``, and with ``keep`` the pass for
            :meth:`backward`.

        Raises
        ------
        TypeError, ValueError
            A bad ``x`` or ``params``.
        """
        if not isinstance(x, np.ndarray) or x.dtype != np.float32 or x.ndim != 2:
            raise TypeError(f"x must be a float32 matrix, not "
                            f"{getattr(x, 'dtype', type(x).__name__)} {getattr(x, 'shape', '')}")
        if x.shape[1] != self.sizes[0]:
            raise ValueError(f"x has {x.shape[1]} features, the network takes {self.sizes[0]}")
        self._check_params(params)
        dev = self.device
        rounding = "stochastic" if train else "nearest"
        step = self.passes
        if train:
            self.passes += 1
        from firmware.runtime.device import DeviceTensor
        from firmware.runtime.epilogue import BfpTensor
        h = self._quantize("input batch", x, rounding, self._seed(step, 0, 2))
        saved = []
        resident = tuple(w for w, _ in params if isinstance(w, BfpTensor))
        last_bias = None
        try:
            for i, (w, b) in enumerate(params):
                qw = w if isinstance(w, BfpTensor) else self._quantize(
                    "weights", w, rounding, self._seed(step, i, 0) ^ 0x5A5A)
                saved.append((h, qw, None))
                if i == self.layers - 1 and self.host_bias:
                    if isinstance(b, DeviceTensor):
                        raise ValueError("params: this device adds no bias to a float32 "
                                         "output, so the last bias must be the host's")
                    last_bias, b = b, None           # added to the outputs here
                if isinstance(b, np.ndarray):
                    self._count("weights", b.nbytes)
                if i == self.layers - 1:
                    h = dev.bfp_gemm(h, qw, bias=b, out="float32")
                elif self.relu[i]:
                    h, mask = dev.bfp_gemm(h, qw, bias=b, relu=True, rounding=rounding,
                                           seed=self._seed(step, i, 0))
                    saved[-1] = saved[-1][:2] + (mask,)
                else:
                    h = dev.bfp_gemm(h, qw, bias=b, rounding=rounding,
                                     seed=self._seed(step, i, 0))
        except BaseException:
            _free(saved if saved and saved[-1][0] is h else saved + [(h,)], resident)
            raise
        logits = h.numpy()
        self._count("logits", logits.nbytes)
        h.free()
        if last_bias is not None:
            with dev.profile.time("float"):
                logits = bfp.add_float32(logits, last_bias[None, :])
        result = ResidentPass(step, rounding, x.shape[0], saved, resident)
        if keep:
            return logits, result
        result.free()
        return logits, None

    def backward(self, saved: ResidentPass, grad: np.ndarray, *, need=None,
                 input_grad: bool = False, update=None):
        """The gradients of a kept forward pass, whose tensors it frees.

        Parameters
        ----------
        saved : ResidentPass
            From :meth:`forward` with ``keep=True``, not yet spent.
        grad : numpy.ndarray
            float32, the loss's gradient with respect to the outputs; written to the device
            and quantised there.
        need : sequence of bool, optional
            Per parameter (``W0, b0, W1, ...``): whether to compute its gradient (a layer
            without bias has no bias gradient). Default all.
        input_grad : bool
            Also compute the gradient with respect to ``x`` (one more GEMM, float32 out).
        update : tuple of (list, float, float), optional
            ``(params, lr, weight_decay)``: instead of returning each gradient, step the
            resident ``params`` (the forward pass's BFP8 weights and float32 device biases)
            with it on the device (:meth:`firmware.Device.sgd_update`), each layer's weights
            once the delta below it is computed; the weights are rounded as the pass was.

        Returns
        -------
        tuple of (list, numpy.ndarray or None)
            ``[dW0, db0, dW1, db1, ...]`` (float32; None where not needed, without bias, or
            stepped on the device) and the input's gradient (or None).

        Raises
        ------
        TypeError, ValueError
            A bad argument, or a pass already spent.
        """
        if not isinstance(saved, ResidentPass):
            raise TypeError(f"saved must be a ResidentPass (forward with keep=True), not "
                            f"{type(saved).__name__}")
        if saved.spent:
            raise ValueError("saved: this pass's tensors were freed; a forward pass takes one "
                             "backward pass")
        shape = (saved.batch, self.sizes[-1])
        if not isinstance(grad, np.ndarray) or grad.dtype != np.float32 or grad.shape != shape:
            raise TypeError(f"grad must be a float32 {shape[0]}x{shape[1]} matrix, not "
                            f"{getattr(grad, 'dtype', type(grad).__name__)} "
                            f"{getattr(grad, 'shape', '')}")
        need = [True] * (2 * self.layers) if need is None else [bool(n) for n in need]
        if len(need) != 2 * self.layers:
            raise ValueError(f"need must have {2 * self.layers} flags, not {len(need)}")
        if update is not None:
            if input_grad:
                raise ValueError("input_grad: not with update (the input's gradient is a "
                                 "host path's)")
            params, lr, wd = update
            if [w for w, _ in params] != list(saved.keep) or len(params) != self.layers:
                raise ValueError("update: the params must be the resident ones the forward "
                                 "pass used")
        dev, step, rounding = self.device, saved.step, saved.rounding
        layers, saved.layers = saved.layers, None
        keep = saved.keep
        try:
            d = self._quantize("loss gradient", grad, rounding,
                               self._seed(step, self.layers, 3))
            grads, dx = [None] * (2 * self.layers), None
            for i in reversed(range(self.layers)):
                h, qw, _ = layers[i]
                # the delta below (through the ReLU mask) first: an update steps qw in place
                d_next = dev.bfp_gemm(d, qw, transpose_b=True, mask_in=layers[i - 1][2],
                                      rounding=rounding,
                                      seed=self._seed(step, i, 1)) if i else None
                if update is not None:
                    w, b = params[i]
                    dev.sgd_update(h, d, w, lr=lr, weight_decay=wd, transpose_a=True,
                                   rounding=rounding, seed=self._seed(step, i, 1) ^ SGD_SEED)
                    if b is not None:
                        dev.sgd_update(self._ones_row(saved.batch), d, b, lr=lr,
                                       weight_decay=wd)
                else:
                    if need[2 * i]:
                        dw = dev.bfp_gemm(h, d, transpose_a=True, out="float32")
                        grads[2 * i] = dw.numpy()
                        dw.free()
                    if need[2 * i + 1]:
                        db = dev.bfp_gemm(self._ones_row(saved.batch), d, out="float32")
                        grads[2 * i + 1] = db.numpy().reshape(-1)
                        db.free()
                    self._count("gradients", sum(g.nbytes for g in grads[2 * i:2 * i + 2]
                                                 if g is not None))
                if not i and input_grad:
                    g = dev.bfp_gemm(d, qw, transpose_b=True, out="float32")
                    dx = g.numpy()
                    g.free()
                    self._count("input gradient", dx.nbytes)
                d.free()
                _free(layers[i:i + 1], keep)
                layers[i] = (None, None, None)
                d = d_next
        finally:
            _free(layers, keep)
        return grads, dx


class ResidentMLP:
    """See the module documentation.

    Parameters
    ----------
    sizes : sequence of int
        Input features, the hidden layers' widths, the classes (at least two entries).
    device : firmware.Device
        A device as :class:`ResidentChain` takes it (``golden``, ``model``, ``rtl``).
    seed : int
        Seeds the weights' initialisation and every descriptor's stochastic rounding.
    lr, momentum, weight_decay : float
        :class:`firmware.ml.optim.SGD`'s (float32 master weights); with ``optimizer``
        "device", the device's SGD (no momentum: ``momentum`` must be 0). ``lr`` may be
        changed between steps (a schedule).
    optimizer : {"host", "device"}
        "host": float32 master weights on the host, written every step and quantised on the
        device, the gradients read back. "device": the weights live on the device in BFP8
        tile blocks and the biases in float32, each weight-gradient GEMM steps them in its
        epilogue (:meth:`firmware.Device.sgd_update`, SWALP's 8-bit SGD): per step the host
        writes the batch and the loss gradient and reads the logits, nothing else.

    Attributes
    ----------
    params : list of (str, numpy.ndarray)
        ``W0, b0, W1, b1, ...``: with ``optimizer`` "host" the float32 master weights,
        updated in place; with "device" the device's weights read back (dequantised) when
        asked: an SWA average (:class:`firmware.ml.optim.SWA`) reads them once per
        averaging period, and :meth:`load_params` writes the average back to evaluate.
    steps : int
        Training steps taken.
    traffic : dict
        Bytes the host wrote to and read from the device in the last step, by what they were.
    chain : ResidentChain
        The passes on the device.

    Raises
    ------
    TypeError, ValueError
        A bad argument, named in the message; a device without the epilogue (or, with
        ``optimizer`` "device", without ``SGD``).
    """

    def __init__(self, sizes, device, *, seed: int = 0, lr: float = 0.05,
                 momentum: float = 0.9, weight_decay: float = 0.0, optimizer: str = "host"):
        if optimizer not in ("host", "device"):
            raise ValueError(f"optimizer must be 'host' or 'device', not {optimizer!r}")
        self.chain = ResidentChain(sizes, device, seed=seed)
        self.sizes, self.device, self.seed = self.chain.sizes, device, seed
        self.optimizer_kind = optimizer
        rng = np.random.default_rng(seed)
        params = []
        for i, (fan_in, fan_out) in enumerate(zip(self.sizes, self.sizes[1:], strict=False)):
            bound = np.sqrt(6.0 / fan_in)
            params += [(f"W{i}", rng.uniform(-bound, bound, (fan_in, fan_out))
                        .astype(np.float32)),
                       (f"b{i}", np.zeros(fan_out, np.float32))]
        if optimizer == "host":
            self._params = params
            self.optimizer = SGD(self._params, lr=lr, momentum=momentum,
                                 weight_decay=weight_decay)
            self._resident = None
        else:
            if momentum:
                raise ValueError(f"momentum must be 0 with optimizer='device' (the device's "
                                 f"SGD keeps no momentum), not {momentum!r}")
            check_sgd(device, ": use optimizer='host'")
            if self.chain.host_bias:
                raise ValueError("device: it adds no bias to a float32 output: use "
                                 "optimizer='host'")
            if lr <= 0 or weight_decay < 0:
                raise ValueError(f"need lr > 0 and weight_decay >= 0, not {lr}, "
                                 f"{weight_decay}")
            self.lr, self.weight_decay = float(lr), float(weight_decay)
            # the initial weights rounded to nearest, the biases as they are
            self._resident = [(device.quantize(w), device.tensor(b.reshape(1, -1)))
                              for (_, w), (_, b) in zip(params[::2], params[1::2],
                                                        strict=True)]
            self.optimizer = None
        self.steps = 0
        self._saved = None

    @property
    def params(self) -> list:
        if self._resident is None:
            return self._params
        out = []
        for i, (w, b) in enumerate(self._resident):
            out += [(f"W{i}", bfp.dequantize_tiles(w.mantissas(), w.exponents())),
                    (f"b{i}", b.numpy().reshape(-1))]
        return out

    def load_params(self, values: dict) -> None:
        """Set the weights: ``values`` maps ``W0, b0, ...`` to float32 arrays of their
        shapes (an SWA average, :meth:`firmware.ml.optim.SWA.averaged`). With ``optimizer``
        "device" they are written to the device, the weights quantised there (round to
        nearest).

        Raises
        ------
        ValueError
            A name is missing or an array has the wrong shape or dtype.
        """
        shapes = {}
        for i, (fan_in, fan_out) in enumerate(zip(self.sizes, self.sizes[1:], strict=False)):
            shapes.update({f"W{i}": (fan_in, fan_out), f"b{i}": (fan_out,)})
        for n in shapes:
            v = values.get(n)
            if not isinstance(v, np.ndarray) or v.dtype != np.float32 or v.shape != shapes[n]:
                raise ValueError(f"values: {n} must be a float32 array of shape {shapes[n]}, "
                                 f"not {getattr(v, 'dtype', type(v).__name__)} "
                                 f"{getattr(v, 'shape', '')}")
        if self._resident is None:
            for n, a in self._params:
                a[...] = values[n]
            return
        for i, (w, b) in enumerate(self._resident):
            new = self.device.quantize(values[f"W{i}"])
            w.free()
            b.write(values[f"b{i}"].reshape(1, -1))
            self._resident[i] = (new, b)

    @property
    def layers(self) -> int:
        return self.chain.layers

    @property
    def traffic(self) -> dict:
        return self.chain.traffic

    def _pairs(self):
        if self._resident is not None:
            return self._resident
        p = [a for _, a in self._params]
        return list(zip(p[::2], p[1::2], strict=True))

    def forward(self, x: np.ndarray, *, train: bool = False):
        """The logits of a batch (float32); with ``train`` the device keeps what the
        backward pass needs."""
        logits, saved = self.chain.forward(x, self._pairs(), train=train, keep=train)
        if train:
            self._saved = saved
        return logits

    def step(self, x: np.ndarray, labels: np.ndarray) -> float:
        """One SGD step on a batch; returns the mean loss."""
        self.chain.traffic = {}
        logits = self.forward(x, train=True)
        loss, grad = softmax_cross_entropy(logits, labels)
        saved, self._saved = self._saved, None
        if self._resident is None:
            grads, _ = self.chain.backward(saved, grad)
            self.optimizer.step(grads)
        else:
            self.chain.backward(saved, grad,
                                update=(self._resident, self.lr, self.weight_decay))
        self.steps += 1
        return loss

    def predict(self, x: np.ndarray) -> np.ndarray:
        """Class indices (round-to-nearest quantisation)."""
        return self.forward(x).argmax(axis=1)
