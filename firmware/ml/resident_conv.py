"""A convolutional network trained with its whole step on the device: no im2col, col2im or
pooling on the host.

:class:`ResidentConvNet` takes a :class:`firmware.ml.nn.Network` of convolutions, ReLUs,
pools, residual blocks and fully connected layers and runs every layer as a convolution
descriptor
(:meth:`firmware.Device.conv2d` and its backward passes) over activations in the ``CHWN``
layout of :mod:`sim.models.conv`, which each layer writes as the next one reads it:

* a :class:`~firmware.ml.nn.Conv2d` is a convolution; a ReLU after it is its epilogue's, and
  a :class:`~firmware.ml.nn.MaxPool2d` or :class:`~firmware.ml.nn.GlobalAvgPool2d` after that
  is its write path's pooling stage (the argmax stored for the backward pass, which routes
  the deltas back through it on the write path of the backward-data convolution above);
* a :class:`~firmware.ml.nn.Residual` block's sum is its body's last convolution's
  (``add=``, before the ReLU after the block); backward, the deltas of an output two layers
  read are summed on the second backward-data descriptor's write path, which applies the
  mask;
* a :class:`~firmware.ml.nn.Linear` after :class:`~firmware.ml.nn.Flatten` is a convolution
  whose kernel covers the whole image (``C x H x W`` features, PyTorch's flattening order),
  and one after another fully connected layer or a global pool a 1 x 1 convolution: in the
  ``CHWN`` layout a ``features x batch`` matrix is an image of one pixel.

Per step the host converts the input batch to the ``CHWN`` layout (one copy), writes it and
the loss gradient (each quantised on the device) and reads the logits; everything else stays
on the device. The optimiser is the device's (SWALP's 8-bit SGD,
:meth:`firmware.Device.conv2d_sgd_update`): each layer's weights are a BFP8 stack stepped in
place by its weight-gradient descriptor, its bias a float32 row stepped by the same
descriptor (``DESC_CONV.BIAS_GRAD``: the sums of the deltas' rows, taken as the array reads
them) or, on an accelerator without it (the RTL), by the weight gradient of a row of ones
against the deltas (a 1 x 1 convolution: the sum over positions), bit for bit the same.

Layer ``l``'s descriptors take the seeds of :func:`firmware.ml.resident.descriptor_seed`, so
the ``golden`` backend's weights are the ``model``'s bit for bit.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from firmware.ml import nn
from firmware.ml.nn import softmax_cross_entropy
from firmware.ml.resident import (
    MAX_LAYERS,
    SGD_SEED,
    SUM_SEED,
    check_device,
    check_seed,
    check_sgd,
    descriptor_seed,
    ones_row,
)
from firmware.runtime.convolution import check_positions, offers_bias_grad
from firmware.spec.regmap import TILE_BLOCK
from sim.models import conv as convm

__all__ = ["ConvStage", "stages_of", "unfolded", "ResidentConvNet"]


@dataclass(frozen=True)
class ConvStage:
    """One convolution descriptor of a network and what its write path does.

    Attributes
    ----------
    channels, height, width : int
        The input image (C x H x W).
    out_channels : int
    kernel, stride, padding : int or (int, int)
    relu : bool
        ReLU in the epilogue.
    pool : tuple or None
        ``(kind, kernel, stride)`` of the pooling stage after ReLU (``"max"`` or ``"avg"``).
    src : int
        The stage whose output this one reads (-1: the network's input).
    add : int or None
        The stage whose output (-1: the input) this one adds before its bias and ReLU
        (``DESC_CONV.ADD``: a residual block's sum), or None.
    unfold : ConvStage or None
        This stage is that first layer's convolution over its input unfolded
        (:func:`unfolded`), a 1 x 1 convolution of ``Cin * kh * kw`` channels over the
        output image; or None.
    """

    channels: int
    height: int
    width: int
    out_channels: int
    kernel: tuple
    stride: tuple = (1, 1)
    padding: tuple = (0, 0)
    relu: bool = False
    pool: tuple | None = None
    src: int = -1
    add: int | None = None
    unfold: ConvStage | None = None

    def geometry(self, batch: int) -> convm.ConvGeometry:
        return convm.ConvGeometry(batch, self.channels, self.height, self.width,
                                  self.out_channels, self.kernel, stride=self.stride,
                                  padding=self.padding)

    def pooling(self, batch: int) -> convm.Pooling | None:
        if self.pool is None:
            return None
        g = self.geometry(batch)
        kind, k, s = self.pool
        return convm.Pooling(kind, convm.pool_geometry(batch, self.out_channels, g.out_height,
                                                       g.out_width, k, s))

    def out_image(self) -> tuple[int, int, int]:
        """The image this stage writes (after its pool)."""
        p = self.pooling(1)
        g = self.geometry(1) if p is None else p.geometry
        return self.out_channels, g.out_height, g.out_width


def stages_of(net: nn.Network, input_shape) -> list[tuple[ConvStage, nn.Layer]]:
    """The convolution descriptors of ``net`` on images of ``input_shape`` (C, H, W), each
    with the layer whose weights it holds, in the order they run.

    A :class:`~firmware.ml.nn.Residual` block's shortcut layers come first, then its body;
    the body's last convolution adds the shortcut's output (or the block's input) on its
    write path (:attr:`ConvStage.add`), before the ReLU that follows the block.

    Raises
    ------
    TypeError
        ``net`` is not a :class:`firmware.ml.nn.Network`.
    ValueError
        A layer the device cannot run this way (naming it and why): a pool not after a
        convolution (and its ReLU), a fully connected layer over an image whose side
        exceeds 15 (``DESC_CONV``'s kernel field), a ReLU or pool after the last layer, a
        residual block whose body does not end in a convolution or whose shortcut's shape
        differs, an output read twice whose deltas need a sum no descriptor makes.
    """
    if not isinstance(net, nn.Network):
        raise TypeError(f"net must be a firmware.ml.nn.Network, not {type(net).__name__}")
    out: list = []

    def conv_stage(name, layer, cur, shape, flat):
        c, h, w = shape
        if isinstance(layer, nn.Conv2d):
            if flat:
                raise ValueError(f"{name}: a convolution after Flatten")
            return ConvStage(c, h, w, layer.cout, (layer.k, layer.k), (layer.stride,) * 2,
                             (layer.pad,) * 2, src=cur)
        fan_in, fan_out = layer.params["W"].shape
        if fan_in != c * h * w:
            raise ValueError(f"{name}: takes {fan_in} features, the image has {c}x{h}x{w}")
        if not flat and (h, w) != (1, 1):
            raise ValueError(f"{name}: a fully connected layer over an image needs "
                             f"Flatten first")
        if max(h, w) > 15:
            raise ValueError(f"{name}: over a {h}x{w} image, whose side exceeds "
                             f"DESC_CONV's kernel field (15); pool it first")
        return ConvStage(c, h, w, fan_out, (h, w), src=cur)

    def walk(layers, cur, shape, where):
        """The stages of ``layers`` reading activation ``cur`` of ``shape``: the last
        activation, its shape, and whether a stage of ``layers`` wrote it."""
        flat = fresh = False
        for i, layer in enumerate(layers):
            name = f"{where}layer {i} ({type(layer).__name__})"
            if isinstance(layer, (nn.Conv2d, nn.Linear)):
                st = conv_stage(name, layer, cur, shape, flat)
                out.append([st, layer])
                cur, fresh, flat = len(out) - 1, True, False
                shape = st.out_image() if isinstance(layer, nn.Conv2d) \
                    else (st.out_channels, 1, 1)
            elif isinstance(layer, nn.ReLU):
                if not fresh or out[cur][0].relu or out[cur][0].pool:
                    raise ValueError(f"{name}: a ReLU not right after a convolution, a fully "
                                     f"connected layer or a residual block")
                out[cur][0] = replace(out[cur][0], relu=True)
            elif isinstance(layer, (nn.MaxPool2d, nn.GlobalAvgPool2d)):
                if not fresh or out[cur][0].pool or flat:
                    raise ValueError(f"{name}: a pool not right after a convolution (and its "
                                     f"ReLU)")
                h, w = shape[1:]
                pool = ("max", layer.k, layer.k) if isinstance(layer, nn.MaxPool2d) \
                    else ("avg", (h, w), 1)
                if max(_pair(pool[1])) > 15:
                    raise ValueError(f"{name}: a {pool[1]} window exceeds DESC_POOL's field "
                                     f"(15)")
                out[cur][0] = replace(out[cur][0], pool=pool)
                shape = out[cur][0].out_image()
            elif isinstance(layer, nn.Flatten):
                flat = True
            elif isinstance(layer, nn.Residual):
                if flat:
                    raise ValueError(f"{name}: a residual block after Flatten")
                s_cur, s_shape, _ = walk(layer.shortcut, cur, shape, f"{name}: shortcut ")
                b_cur, b_shape, b_fresh = walk(layer.body, cur, shape, f"{name}: body ")
                last = out[b_cur][0] if b_fresh else None
                if last is None or last.relu or last.pool or last.add is not None:
                    raise ValueError(f"{name}: its body must end in a convolution (the sum "
                                     f"is its write path's, before the block's ReLU)")
                if b_shape != s_shape:
                    raise ValueError(f"{name}: the body gives {b_shape}, the shortcut "
                                     f"{s_shape}")
                out[b_cur][0] = replace(last, add=s_cur)
                cur, shape, fresh = b_cur, b_shape, True
            else:
                raise ValueError(f"{name}: the device runs convolutions, ReLU, max and "
                                 f"global average pools, fully connected layers and residual "
                                 f"blocks, not this")
        return cur, shape, fresh

    walk(net.layers, -1, tuple(int(v) for v in input_shape), "")
    if not out:
        raise ValueError("net has no convolution or fully connected layer")
    if out[-1][0].relu or out[-1][0].pool:
        raise ValueError("net: its last layer must be a convolution or fully connected "
                         "layer without ReLU or pool (the logits)")
    if len(out) > MAX_LAYERS:
        raise ValueError(f"net has {len(out)} layers, at most {MAX_LAYERS} fit the seeds")
    stages = [st for st, _ in out]
    for j, st in enumerate(stages[:-1]):
        # the deltas of output j: the consumers' terms in the order the backward pass
        # makes them, summed by the backward-data descriptors' DESC_CONV.ADD
        terms = _consumers(stages, j)
        if st.pool and len(terms) > 1:
            raise ValueError(f"layer {j}: its pooled output is read by {len(terms)} layers")
        pending = False
        for n, (_, kind) in enumerate(terms):
            if kind == "add" and pending:
                raise ValueError(f"layer {j}: its output is added twice with no convolution "
                                 f"between (no descriptor sums the deltas)")
            if kind == "add" and n == len(terms) - 1 and st.relu:
                raise ValueError(f"layer {j}: its ReLU's output is only added, and no "
                                 f"descriptor applies the mask to its deltas")
            pending = True
    return [tuple(s) for s in out]


def _consumers(stages, j: int) -> list[tuple[int, str]]:
    """The stages reading activation ``j`` (-1: the input) as ``(index, "src" or "add")``,
    in the order the backward pass visits them (the last stage first)."""
    terms = [(i, kind) for i, st in enumerate(stages)
             for kind, at in (("add", st.add), ("src", st.src)) if at == j]
    return sorted(terms, key=lambda t: (-t[0], t[1] == "src"))


def _pair(v):
    return tuple(v) if isinstance(v, tuple) else (v, v)


def unfolded(stages: list[ConvStage], device) -> list[ConvStage]:
    """``stages`` with the first one over its input unfolded where that pays and the device
    can: the input's only reader, a convolution of fewer than ``TILE_BLOCK`` input channels
    and a kernel above 1 x 1 (whose ``kh * kw`` K runs of ``Cin`` rows each take an array
    pass), on a device with ``CONFIG_FEATURES.UNFOLD``. The input is then quantised
    unfolded (:meth:`firmware.Device.quantize` with ``unfold``) and the layer is one 1 x 1
    convolution over ``Cin * kh * kw`` channels: K runs of up to ``TILE_BLOCK`` rows,
    forward and weight gradient. Its weights' BFP8 tiles then span kernel offsets (a
    ``Cout x Cin * kh * kw`` matrix) where a stack's span one offset each."""
    st = stages[0]
    info = device.driver.info if device.driver is not None else None
    if (info is not None and not info.unfold) or st.src != -1 \
            or _consumers(stages, -1) != [(0, "src")] or st.channels >= TILE_BLOCK \
            or st.kernel == (1, 1):
        return stages
    g = st.geometry(1)
    one = replace(st, channels=st.channels * len(g.offsets), height=g.out_height,
                  width=g.out_width, kernel=(1, 1), stride=(1, 1), padding=(0, 0), unfold=st)
    return [one, *stages[1:]]


def _to_stack(st: ConvStage, w: np.ndarray) -> np.ndarray:
    """A layer's float32 weights ``W`` (``Cin*kh*kw x Cout``, as firmware.ml.nn keeps them)
    as a stack (kh*kw, Cout, Cin)."""
    return convm.weight_stack(np.ascontiguousarray(
        w.T.reshape(st.out_channels, st.channels, *st.kernel)))


def _from_stack(st: ConvStage, stack: np.ndarray) -> np.ndarray:
    """The inverse of :func:`_to_stack`."""
    w4 = convm.weight_tensor(stack, st.kernel)     # Cout x Cin x kh x kw
    return np.ascontiguousarray(w4.reshape(st.out_channels, -1).T)


class ResidentConvNet:
    """See the module documentation.

    Parameters
    ----------
    net : firmware.ml.nn.Network
        Its initial weights are taken (rounded to nearest on the device); ``net`` itself is
        not changed.
    input_shape : tuple of int
        One sample's ``(C, H, W)``.
    device : firmware.Device
        With convolution descriptors and pooling stages (``golden`` or ``model``).
    seed : int
        In ``[0, 2**32)``: every descriptor's seed is made of it, the pass, the layer and
        the tensor's role.
    lr, weight_decay : float
        The device's SGD; ``lr`` may be changed between steps (a schedule).
    eval_batch : int
        Images per forward pass in :meth:`predict`.
    record : bool, optional
        Record the training step's descriptors once and replay them
        (:meth:`firmware.Device.record`); default where the device runs descriptor chains.
    unfold : bool, optional
        Run the first layer over its input unfolded (:func:`unfolded`); default where the
        layer qualifies and the device can. Its batches are then padded with zero images to
        whole tile blocks: the padding's loss gradient is 0, so it steps nothing, but every
        layer computes it, and its activations share BFP8 tile blocks with the real
        images' (a block's exponent may rise), so a padded batch's bits differ from an
        unpadded run's. Batches of whole tile blocks (the RTL's weight gradients need them)
        are not padded.

    Attributes
    ----------
    stages : list of ConvStage
    params : list of (str, numpy.ndarray)
        ``W0, b0, ...`` as ``net`` holds them (``W`` of a convolution ``Cin*k*k x Cout``),
        read back from the device (dequantised) when asked.
    steps : int
    recorded : bool
        :meth:`step` replays a recorded step.
    traffic : dict
        Bytes the host wrote to and read from the device in the last step, by what they were.

    Raises
    ------
    TypeError, ValueError
        A bad argument or a layer the device cannot run (:func:`stages_of`), named in the
        message; a device without the epilogue, convolutions, pooling or SGD.
    """

    def __init__(self, net, input_shape, device, *, seed: int = 0, lr: float = 0.05,
                 weight_decay: float = 0.0, eval_batch: int = 256, record=None,
                 unfold=None):
        check_device(device)
        info = device.driver.info if device.driver is not None else None
        # (all convolution descriptors and pooling stages, or the RTL's kinds of them,
        # whose limits each descriptor's call names)
        if info is not None and not (
                (info.conv or (info.conv_forward and info.conv_backward_data
                               and info.conv_weight_grad))
                and (info.pool or (info.pool_forward and info.pool_backward))):
            raise ValueError(f"device: this {device.backend} accelerator has no convolution "
                             f"descriptors or pooling stages (CONFIG_FEATURES.CONV, POOL, "
                             f"or CONV_FORWARD, CONV_BACKWARD_DATA, CONV_WEIGHT_GRAD, "
                             f"POOL_FORWARD and POOL_BACKWARD): use Device('model') or "
                             f"firmware.ml.nn on the host")
        check_sgd(device)
        check_seed(seed)
        if not lr > 0 or not weight_decay >= 0:
            raise ValueError(f"need lr > 0 and weight_decay >= 0, not {lr}, {weight_decay}")
        if not isinstance(eval_batch, int) or isinstance(eval_batch, bool) \
                or not 1 <= eval_batch <= 0xFFFF:
            raise ValueError(f"eval_batch must be an int in [1, 65535], not {eval_batch!r}")
        pairs = stages_of(net, input_shape)
        self.stages = [st for st, _ in pairs]
        if unfold is None or unfold:
            stages = unfolded(self.stages, device)
            if unfold and stages is self.stages:
                raise ValueError("unfold: the first layer is not a convolution of fewer than "
                                 f"{TILE_BLOCK} channels and a kernel above 1 x 1 read by no "
                                 f"other layer, or the device does not unfold "
                                 f"(CONFIG_FEATURES.UNFOLD)")
            self.stages = stages
            pairs = [(st, layer) for st, (_, layer) in zip(stages, pairs, strict=True)]
            if eval_batch + -eval_batch % TILE_BLOCK > 0xFFFF:
                raise ValueError(f"eval_batch: {eval_batch} images, padded to whole tile "
                                 f"blocks (the first layer's input unfolded), exceed 65535")
        self.input_shape = tuple(int(v) for v in input_shape)
        self.device, self.seed = device, int(seed)
        self.lr, self.weight_decay, self.eval_batch = float(lr), float(weight_decay), eval_batch
        self.steps, self.passes, self.traffic = 0, 0, {}
        self._ones: dict = {}
        #: whether each weight-gradient descriptor steps its layer's bias too
        #: (``CONFIG_FEATURES.BIAS_GRAD``), else a descriptor of its own does
        self.fused_bias = offers_bias_grad(device)
        self._plan = None
        # each output's last reader in the backward pass: it applies the mask to the deltas
        self._last_reader = {j: _consumers(self.stages, j)[-1]
                             for j in range(len(self.stages) - 1)}
        self.recorded = device.offers_chains() if record is None else bool(record)
        if self.recorded and not device.offers_chains():
            raise ValueError(f"record: this {device.backend} accelerator runs no descriptor "
                             f"chains (CONFIG_FEATURES.CHAIN)")
        self._weights = []
        for st, layer in pairs:
            q, e = convm.quantize_stack(_to_stack(st, layer.params["W"]), block=TILE_BLOCK)
            b = device.tensor(layer.params["b"].astype(np.float32).reshape(1, -1))
            self._weights.append((device.bfp_stack(q, e), b))

    @property
    def layers(self) -> int:
        return len(self.stages)

    def _seed(self, step: int, layer: int, role: int) -> int:
        return descriptor_seed(self.seed, step, layer, role)

    def _count(self, what: str, nbytes: int) -> None:
        self.traffic[what] = self.traffic.get(what, 0) + int(nbytes)

    def _ones_row(self, columns: int):
        return ones_row(self.device, self._ones, columns)

    @property
    def params(self) -> list:
        out = []
        for i, (st, (w, b)) in enumerate(zip(self.stages, self._weights, strict=True)):
            out += [(f"W{i}", _from_stack(st, w.numpy())), (f"b{i}", b.numpy().reshape(-1))]
        return out

    def load_params(self, values: dict) -> None:
        """Write ``W0, b0, ...`` (float32, the shapes of :attr:`params`; an SWA average) to
        the device, the weights rounded to nearest.

        Raises
        ------
        ValueError
            A name is missing or an array has the wrong shape or dtype.
        """
        current = dict(self.params)
        for name, a in current.items():
            v = values.get(name)
            if not isinstance(v, np.ndarray) or v.dtype != np.float32 or v.shape != a.shape:
                raise ValueError(f"values: {name} must be a float32 array of shape {a.shape}, "
                                 f"not {getattr(v, 'dtype', type(v).__name__)} "
                                 f"{getattr(v, 'shape', '')}")
        for i, (st, (w, b)) in enumerate(zip(self.stages, self._weights, strict=True)):
            q, e = convm.quantize_stack(_to_stack(st, values[f"W{i}"]), block=TILE_BLOCK)
            w.q.write(q.reshape(-1, q.shape[2]))
            w.exp.write(e.reshape(1, -1))
            b.write(values[f"b{i}"].reshape(1, -1))

    def _check_x(self, x) -> None:
        if not isinstance(x, np.ndarray) or x.dtype != np.float32 or x.ndim != 4 \
                or x.shape[1:] != self.input_shape or not 1 <= x.shape[0] <= 0xFFFF:
            raise TypeError(f"x must be a float32 (N, {', '.join(map(str, self.input_shape))}) "
                            f"array with 1 <= N <= 65535, not "
                            f"{getattr(x, 'dtype', type(x).__name__)} {getattr(x, 'shape', '')}")
        self._check_padded(x.shape[0], "x")

    def _check_padded(self, n: int, name: str) -> None:
        """A batch of ``n`` images, padded where the input is unfolded, within the batch
        field and the device's positions (ValueError naming ``name`` and the padding)."""
        first = self.stages[0].unfold
        if first is None:
            return
        padded = n + -n % TILE_BLOCK
        what = f"{name}: {n} images, padded to {padded} (the first layer's input unfolded)"
        if padded > 0xFFFF:
            raise ValueError(f"{what} exceed 65535")
        try:
            check_positions(self.device, first.geometry(padded))
        except ValueError as e:
            raise ValueError(f"{what}: {e}") from None

    def _forward_on_device(self, x_dev, batch: int, rounding: str, step: int):
        """The forward descriptors from the float32 ``CHWN`` input on the device: the
        float32 logits (``classes x N``, on the device) and what the backward pass needs
        (:class:`_Pass`: every stage's input, ReLU mask and argmax)."""
        dev = self.device
        saved = _Pass(self.layers)
        first = self.stages[0].unfold
        saved.acts[-1] = dev.quantize(x_dev, rounding=rounding, seed=self._seed(step, 0, 2),
                                      unfold=None if first is None else first.geometry(batch))
        try:
            for i, (st, (w, b)) in enumerate(zip(self.stages, self._weights, strict=True)):
                g = st.geometry(batch)
                h = saved.acts[st.src]
                add = None if st.add is None else saved.acts[st.add]
                if i == self.layers - 1:
                    return dev.conv2d(h, w, g, bias=b, add=add, out="float32"), saved
                res = dev.conv2d(h, w, g, bias=b, relu=st.relu, pool=st.pooling(batch),
                                 add=add, rounding=rounding, seed=self._seed(step, i, 0))
                res = res if isinstance(res, tuple) else (res,)
                saved.acts[i] = res[0]
                saved.masks[i] = res[1] if st.relu else None
                saved.args[i] = res[-1] if st.pool and st.pool[0] == "max" else None
        except BaseException:
            saved.free()
            raise

    def _backward_on_device(self, g_dev, saved, batch: int, step: int, *,
                            free: bool = True) -> list:
        """The backward descriptors from the float32 loss gradient on the device
        (``classes x N``): every layer's weights and bias stepped. Stage ``i``'s
        backward-data descriptor runs before its weights change; where an output has more
        than one reader (a residual block), each reader's deltas are summed into the next
        one's backward-data descriptor (``DESC_CONV.ADD``), the last applying the mask.
        With ``free`` the pass's tensors are freed at the end; else they are returned (a
        recording keeps them for its replays)."""
        dev, rounding, made = self.device, "stochastic", []
        delta = {self.layers - 1: dev.quantize(g_dev, rounding=rounding,
                                               seed=self._seed(step, self.layers, 3))}
        made.append(delta[self.layers - 1])
        pending: dict = {}
        try:
            for i in reversed(range(self.layers)):
                st, (w, b) = self.stages[i], self._weights[i]
                g = st.geometry(batch)
                d = delta[i]
                for kind, j in (("add", st.add), ("src", st.src)):
                    if j is None or j < 0:
                        continue
                    below = self.stages[j]
                    last = self._last_reader[j] == (i, kind)
                    if kind == "add":
                        # (stages_of allows this only as a sum's first term, or as the last
                        # one of an output without ReLU: the deltas themselves)
                        (delta if last else pending)[j] = d
                        continue
                    kw = dict(mask_in=saved.masks[j]) if last else {}
                    t = dev.conv2d_backward_data(
                        d, w, g, unpool=below.pooling(batch), argmax=saved.args[j],
                        add=pending.pop(j, None), rounding=rounding,
                        seed=self._seed(step, i, 1) ^ (0 if last else SUM_SEED), **kw)
                    made.append(t)
                    (delta if last else pending)[j] = t
                dev.conv2d_sgd_update(d, saved.acts[st.src], w, g, lr=self.lr,
                                      weight_decay=self.weight_decay, rounding=rounding,
                                      seed=self._seed(step, i, 1) ^ SGD_SEED,
                                      bias=b if self.fused_bias else None)
                if self.fused_bias:
                    continue
                ones = convm.ConvGeometry(batch, st.out_channels, g.out_height, g.out_width,
                                          1, 1)
                dev.conv2d_sgd_update(self._ones_row(g.out_positions), d, b, ones, lr=self.lr,
                                      weight_decay=self.weight_decay)
        except BaseException:
            saved.free()
            _free([made])
            raise
        if free:
            saved.free()
            _free([made])
            return []
        return made

    def _pad(self, x: np.ndarray) -> np.ndarray:
        """``x`` with zero images up to whole tile blocks where the input is unfolded (its
        quantise-only descriptor's rule), else ``x``."""
        extra = -x.shape[0] % TILE_BLOCK if self.stages[0].unfold is not None else 0
        if not extra:
            return x
        return np.concatenate([x, np.zeros((extra, *x.shape[1:]), x.dtype)])

    def _layout(self, x: np.ndarray) -> np.ndarray:
        with self.device.profile.time("layout"):
            xm = convm.activation_matrix(x)
        self._count("input batch", xm.nbytes)
        return xm

    def _logits(self, t) -> np.ndarray:
        """The device's ``classes x N`` logits read as ``N x classes``."""
        logits = t.numpy()
        self._count("logits", logits.nbytes)
        return np.ascontiguousarray(logits.T)

    def _loss_gradient(self, grad: np.ndarray) -> np.ndarray:
        """``N x classes`` as the ``classes x N`` matrix the device takes."""
        gt = np.ascontiguousarray(grad.T)
        self._count("loss gradient", gt.nbytes)
        return gt

    def forward(self, x: np.ndarray, *, train: bool = False):
        """The logits of a batch, ``N x classes`` float32; with ``train`` (stochastic
        rounding) also what the backward pass needs (else None). Each call runs its
        descriptors one by one (:meth:`step` replays a recorded step where it can)."""
        self._check_x(x)
        n = x.shape[0]
        x = self._pad(x)
        dev, batch = self.device, x.shape[0]
        rounding = "stochastic" if train else "nearest"
        step = self.passes
        if train:
            self.passes += 1
        x_dev = dev.tensor(self._layout(x))
        try:
            out, saved = self._forward_on_device(x_dev, batch, rounding, step)
        finally:
            x_dev.free()
        logits = self._logits(out)[:n]
        out.free()
        if not train:
            saved.free()
            return logits, None
        return logits, (step, batch, saved, n)

    def backward(self, saved, grad: np.ndarray) -> None:
        """Step every layer's weights and bias with the gradient of a kept forward pass
        (its tensors are freed)."""
        step, batch, layers, n = saved
        shape = (n, self.stages[-1].out_channels)
        if not isinstance(grad, np.ndarray) or grad.dtype != np.float32 or grad.shape != shape:
            layers.free()
            raise TypeError(f"grad must be a float32 {shape[0]}x{shape[1]} matrix")
        g_dev = self.device.tensor(self._loss_gradient(self._pad(grad)))
        try:
            self._backward_on_device(g_dev, layers, batch, step)
        finally:
            g_dev.free()

    def _recorded(self, batch: int):
        """The recorded step for ``batch`` images (recorded now if missing, or if the
        learning rate or weight decay changed since)."""
        plan = self._plan
        if plan is not None and plan["key"] == (batch, self.lr, self.weight_decay):
            return plan
        self.free_recording()
        dev, (c, h, w) = self.device, self.input_shape
        x_dev = dev.empty((c, h * w * batch), np.float32)
        g_dev = dev.empty((self.stages[-1].out_channels, batch), np.float32)
        with dev.record() as fwd:
            logits, saved = self._forward_on_device(x_dev, batch, "stochastic", 0)
        with dev.record() as bwd:
            made = self._backward_on_device(g_dev, saved, batch, 0, free=False)
        self._plan = {"key": (batch, self.lr, self.weight_decay), "x": x_dev, "g": g_dev,
                      "logits": logits, "tensors": saved.tensors() + made,
                      "forward": fwd, "backward": bwd}
        return self._plan

    def free_recording(self) -> None:
        """Give back the buffers of the recorded step (it is recorded again when needed)."""
        plan, self._plan = self._plan, None
        if plan is not None:
            for p in (plan["forward"], plan["backward"]):
                p.free()
            _free([plan["tensors"] + [plan["x"], plan["g"], plan["logits"]]])

    def step(self, x: np.ndarray, labels: np.ndarray) -> float:
        """One SGD step on a batch (NCHW float32 images, int labels); returns the mean
        loss. With :attr:`recorded`, the step's descriptors are recorded once per batch size
        (and learning rate) and replayed with two doorbells: the forward chain, then, once
        the host has the loss gradient, the backward chain."""
        self.traffic = {}
        if not self.recorded:
            logits, saved = self.forward(x, train=True)
            loss, grad = softmax_cross_entropy(logits, labels)
            self.backward(saved, grad.astype(np.float32))
            self.steps += 1
            return loss
        self._check_x(x)
        n = x.shape[0]
        x = self._pad(x)
        plan = self._recorded(x.shape[0])
        # pass 0's seeds recorded: this pass's bits XORed in (descriptor_seed)
        seed = (self.passes & 0xFFFFFF) << 8
        self.passes += 1
        plan["x"].write(self._layout(x))
        plan["forward"].run(seed=seed)
        loss, grad = softmax_cross_entropy(self._logits(plan["logits"])[:n], labels)
        plan["g"].write(self._loss_gradient(self._pad(grad.astype(np.float32))))
        plan["backward"].run(seed=seed)
        self.steps += 1
        return loss

    def predict(self, x: np.ndarray) -> np.ndarray:
        """Class indices (round-to-nearest quantisation), :attr:`eval_batch` images a pass."""
        self._check_x(x)
        return np.concatenate([self.forward(x[i:i + self.eval_batch])[0].argmax(axis=1)
                               for i in range(0, len(x), self.eval_batch)])


class _Pass:
    """What a forward pass keeps for the backward one: ``acts[i]`` stage ``i``'s output
    (``acts[-1]`` the quantised input), ``masks[i]`` its ReLU mask, ``args[i]`` its max
    pool's argmax (None where it has none)."""

    def __init__(self, layers: int):
        self.acts: dict = {}
        self.masks = [None] * layers
        self.args = [None] * layers

    def tensors(self) -> list:
        return [t for t in (*self.acts.values(), *self.masks, *self.args) if t is not None]

    def free(self) -> None:
        _free([self.tensors()])
        self.acts, self.masks, self.args = {}, [None] * len(self.masks), [None] * len(self.args)


def _free(groups) -> None:
    """Free every tensor of ``groups`` (iterables of tensors or None) once."""
    seen = set()
    for group in groups:
        for t in group:
            if t is not None and id(t) not in seen:
                seen.add(id(t))
                t.free()
