"""Convolutions on a device as implicit GEMMs (``DESC_CONV``): no im2col, no col2im.

The activations and deltas are :class:`firmware.runtime.epilogue.BfpTensor` matrices in the
``CHWN`` layout of :mod:`sim.models.conv` (C rows, ``H * W * N`` columns, the batch
innermost), so one layer's output is the next layer's input as written; a convolution's
weights are a :class:`BfpStack`, one ``Cout x Cin`` BFP8 matrix per kernel offset. The
engine generates the operand addresses from the descriptor's geometry, reads padding as
zeros, and sends C through the write-back epilogue as a GEMM's (bias per output channel,
ReLU and its mask, a stored mask, a residual's sum, BFP8 or float32). On the ``golden``
backend the results come from :mod:`sim.models.conv` and :func:`sim.models.bfp.epilogue`.
"""

from __future__ import annotations

import numpy as np

from firmware.runtime.epilogue import (
    BfpTensor,
    _begin,
    _check_output,
    _check_rates,
    _check_rounding,
    _emit,
    _empty,
    _require,
    _run,
    _sgd_target,
)
from firmware.spec import regmap
from sim.models import bfp
from sim.models import conv as convm

__all__ = ["BfpStack", "upload_stack", "conv2d", "conv2d_backward_data",
           "conv2d_weight_grad", "conv2d_sgd_update"]

#: Largest values of ``DESC_CONV``'s fields: kernel, stride, padding, dilation.
LIMITS = {"kernel": 15, "stride": 7, "padding": 15, "dilation": 7}
#: Largest values of ``DESC_POOL``'s fields: window and stride.
POOL_LIMITS = {"kernel": 15, "stride": 15}


class BfpStack:
    """A convolution's weights on a device: one ``Cout x Cin`` matrix in BFP8 tile blocks per
    kernel offset (offsets in row-major order, :func:`sim.models.conv.weight_stack`);
    ``shape`` is ``(offsets, Cout, Cin)``.

    Attributes
    ----------
    q : DeviceTensor
        The int8 mantissas, the matrices one after another: ``offsets * Cout x Cin``.
    exp : DeviceTensor
        Each matrix's tile exponent grid, row-major, one after another (one row of bytes).
    """

    def __init__(self, q, exp, shape, block: int):
        self.q, self.exp, self.shape, self.block = q, exp, tuple(shape), block

    @property
    def grid(self) -> tuple[int, int]:
        """One matrix's exponent grid."""
        return bfp.tile_grid(self.shape[1:], block=self.block)

    def mantissas(self) -> np.ndarray:
        return self.q.numpy().reshape(self.shape)

    def exponents(self) -> np.ndarray:
        return self.exp.numpy().reshape(self.shape[0], *self.grid)

    def numpy(self) -> np.ndarray:
        """The weights as float32, ``(offsets, Cout, Cin)`` (exact)."""
        return convm.dequantize_stack(self.mantissas(), self.exponents(), block=self.block)

    def free(self) -> None:
        self.q.free()
        self.exp.free()

    def __repr__(self):
        return f"BfpStack(shape={self.shape}, block={self.block})"


def upload_stack(dev, q, exp) -> BfpStack:
    """See :meth:`firmware.Device.bfp_stack`."""
    if not isinstance(q, np.ndarray) or q.dtype != np.int8 or q.ndim != 3 or not q.size:
        raise TypeError(f"q must be a non-empty int8 (offsets, Cout, Cin) array, not "
                        f"{getattr(q, 'dtype', type(q).__name__)} {getattr(q, 'shape', '')}")
    kk, cout, cin = q.shape
    grid = bfp.tile_grid((cout, cin), block=regmap.TILE_BLOCK)
    if not isinstance(exp, np.ndarray) or exp.dtype != np.int8:
        raise TypeError(f"exp must be an int8 array, not "
                        f"{getattr(exp, 'dtype', type(exp).__name__)}")
    if exp.shape != (kk, *grid):
        raise ValueError(f"exp must have shape {(kk, *grid)} (a tile grid per offset), not "
                         f"{exp.shape}")
    flat_q = np.ascontiguousarray(q.reshape(kk * cout, cin))
    flat_e = np.ascontiguousarray(exp.reshape(1, -1))
    if dev.driver is None:
        return BfpStack(dev.tensor(flat_q), dev.tensor(flat_e), q.shape, regmap.TILE_BLOCK)
    s = BfpStack(_empty(dev, flat_q.shape, np.int8), _empty(dev, flat_e.shape, np.int8),
                 q.shape, regmap.TILE_BLOCK)
    s.q.write(flat_q)
    s.exp.write(flat_e)
    return s


def _check_geometry(geometry) -> convm.ConvGeometry:
    if not isinstance(geometry, convm.ConvGeometry):
        raise TypeError(f"geometry must be a sim.models.conv.ConvGeometry, not "
                        f"{type(geometry).__name__}")
    for name, top in LIMITS.items():
        if max(getattr(geometry, name)) > top:
            raise ValueError(f"geometry: {name} {getattr(geometry, name)} exceeds {top} "
                             f"(DESC_CONV's field)")
    for name in ("batch", "channels", "height", "width", "out_channels"):
        if getattr(geometry, name) > 0xFFFF:
            raise ValueError(f"geometry: {name} {getattr(geometry, name)} exceeds 65535")
    return geometry


def _conv_fields(g: convm.ConvGeometry, mode: int) -> dict:
    return {"fields": {"MODE": mode, "KERNEL_H": g.kernel[0], "KERNEL_W": g.kernel[1],
                       "STRIDE_H": g.stride[0], "STRIDE_W": g.stride[1],
                       "PAD_H": g.padding[0], "PAD_W": g.padding[1],
                       "DILATION_H": g.dilation[0], "DILATION_W": g.dilation[1]},
            "height": g.height, "width": g.width, "channels": g.channels,
            "out_channels": g.out_channels, "batch": g.batch}


def _check_operands(dev, x, w, g, x_rows, x_cols):
    if not isinstance(x, BfpTensor):
        raise TypeError(f"the activations must be a BfpTensor, not {type(x).__name__}")
    if not isinstance(w, BfpStack):
        raise TypeError(f"w must be a BfpStack (Device.bfp_stack), not {type(w).__name__}")
    for name, t in (("x", x), ("w", w)):
        if t.q.device is not dev:
            raise ValueError(f"{name} belongs to another device (or is freed)")
    if x.shape != (x_rows, x_cols):
        raise ValueError(f"the activations are {x.shape[0]}x{x.shape[1]}, the geometry's "
                         f"{x_rows}x{x_cols}")
    if w.shape != (len(g.offsets), g.out_channels, g.channels):
        raise ValueError(f"w is {w.shape}, the geometry's "
                         f"{(len(g.offsets), g.out_channels, g.channels)}")


def check_positions(dev, g: convm.ConvGeometry) -> None:
    """On an accelerator with only the kinds of convolution descriptors
    (``CONFIG_FEATURES.CONV`` 0: the RTL) a convolution's input and output positions
    (``H * W * batch``, ``OH * OW * batch``) are at most 65535, its checker's limit on a
    GEMM's N and K and on B's columns; ValueError naming the batch otherwise."""
    info = dev.driver.info if dev.driver is not None else None
    if info is None or info.conv:
        return
    most, what = max(((g.positions, "input positions (H*W*batch)"),
                      (g.out_positions, "output positions (OH*OW*batch)")), key=lambda t: t[0])
    if most > 0xFFFF:
        top = g.batch * 0xFFFF // most
        raise ValueError(f"batch {g.batch}: {most} {what} exceed 65535, "
                         f"this {dev.backend} accelerator's limit on a convolution "
                         f"(CONFIG_FEATURES.CONV 0); at most {top} images of "
                         f"{g.height}x{g.width}")


def _require_conv(dev, mode: int = 3, g=None) -> None:
    """Whether ``dev`` runs convolution descriptors of ``mode`` on ``g``: all of them
    (``CONFIG_FEATURES.CONV``), or forward (``CONV_FORWARD``) and backward-data ones
    (``CONV_BACKWARD_DATA``) with the batch a multiple of the array's columns, and weight
    gradients (``CONV_WEIGHT_GRAD``) with the batch a multiple of the tile size."""
    info = dev.driver.info if dev.driver is not None else None
    if info is not None and not info.conv and (
            (mode == 1 and info.conv_forward) or (mode == 2 and info.conv_backward_data)
            or (mode == 3 and info.conv_weight_grad)):
        check_positions(dev, g)
    if info is not None and not info.conv and (
            (mode == 1 and info.conv_forward) or (mode == 2 and info.conv_backward_data)):
        if g.batch % info.cols:
            field = "CONV_FORWARD" if mode == 1 else "CONV_BACKWARD_DATA"
            raise ValueError(f"batch {g.batch}: this {dev.backend} accelerator runs "
                             f"{'forward' if mode == 1 else 'backward-data'} convolutions on "
                             f"batches of a multiple of its {info.cols} columns "
                             f"(CONFIG_FEATURES.{field})")
        return
    if info is not None and not info.conv and mode == 3 and info.conv_weight_grad:
        if g.batch % info.tile_block:
            raise ValueError(f"batch {g.batch}: this {dev.backend} accelerator runs weight "
                             f"gradients on batches of a multiple of {info.tile_block} "
                             f"(CONFIG_FEATURES.CONV_WEIGHT_GRAD)")
        return
    if info is not None and not info.conv:
        raise RuntimeError(f"this {dev.backend} accelerator has no convolution descriptors "
                           f"(CONFIG_FEATURES.CONV): use Device('model') or the host's im2col "
                           f"(firmware.ml.nn.Conv2d)")


def _check_pooling(dev, pooling, mode, g, argmax):
    """The checks of a pooling stage (``mode`` 1 after a forward convolution, 2 before a
    backward-data one's bias): its geometry against the convolution's; a max pool's
    ``argmax`` for mode 2."""
    if pooling is None:
        if argmax is not None:
            raise ValueError("argmax: only with unpool (a max pool's backward pass)")
        return None
    if not isinstance(pooling, convm.Pooling):
        raise TypeError(f"{'pool' if mode == 1 else 'unpool'} must be a "
                        f"sim.models.conv.Pooling, not {type(pooling).__name__}")
    p = pooling.geometry
    info = dev.driver.info if dev.driver is not None else None
    if info is not None and not info.pool:
        if not info.pool_forward:
            raise RuntimeError(f"this {dev.backend} accelerator has no pooling stage "
                               f"(CONFIG_FEATURES.POOL): use Device('model') or the host's "
                               f"pooling (firmware.ml.nn.MaxPool2d)")
        ok = (pooling.kind == "max" and p.stride == p.kernel
              and not (p.height % p.kernel[0] or p.width % p.kernel[1]))
        if mode == 1 and not ok or mode == 2 and not (ok and info.pool_backward):
            raise RuntimeError(f"this {dev.backend} accelerator pools on the write path only "
                               f"with a max pool after a forward convolution, or its "
                               f"backward pass before a backward-data one, windows as "
                               f"their stride tiling the image (CONFIG_FEATURES."
                               f"POOL_FORWARD, POOL_BACKWARD), not a {pooling.kind} pool "
                               f"{'after' if mode == 1 else 'before'} it, kernel {p.kernel}, "
                               f"stride {p.stride} on {p.height} x {p.width}")
        if mode == 2 and g.batch % info.tile_block:
            raise ValueError(f"batch {g.batch}: this {dev.backend} accelerator routes deltas "
                             f"back through a max pool on batches of a multiple of "
                             f"{info.tile_block} (CONFIG_FEATURES.POOL_BACKWARD)")
    for name, top in POOL_LIMITS.items():
        if max(getattr(p, name)) > top:
            raise ValueError(f"pool: {name} {getattr(p, name)} exceeds {top} "
                             f"(DESC_POOL's field)")
    if p.dilation != (1, 1):
        raise ValueError(f"pool: dilation {p.dilation}: DESC_POOL has none")
    if mode == 1:
        want = (g.batch, g.out_channels, g.out_height, g.out_width)
        have = (p.batch, p.channels, p.height, p.width)
        what = "its input"
    else:
        want = (g.batch, g.channels, g.height, g.width)
        have = (p.batch, p.channels, p.out_height, p.out_width)
        what = "its output"
    if have != want:
        raise ValueError(f"{'pool' if mode == 1 else 'unpool'}: {what} is {have} (batch, "
                         f"channels, height, width), the convolution's {want}")
    if mode == 2 and pooling.kind == "max":
        from firmware.runtime.device import DeviceTensor
        shape = (p.channels, p.out_positions)
        if not isinstance(argmax, DeviceTensor) or argmax.device is not dev \
                or argmax.dtype != np.uint8 or argmax.shape != shape:
            raise TypeError(f"argmax must be the uint8 {shape[0]}x{shape[1]} DeviceTensor "
                            f"the max pool wrote (conv2d with pool=), not "
                            f"{type(argmax).__name__} {getattr(argmax, 'shape', '')}")
    elif argmax is not None:
        raise ValueError("argmax: only for a max pool")
    return (mode, pooling, argmax)


def _pool_fields(stage) -> dict:
    mode, pooling, _ = stage
    p = pooling.geometry
    return {"fields": {"MODE": mode, "KIND": convm.POOL_KINDS.index(pooling.kind),
                       "KERNEL_H": p.kernel[0], "KERNEL_W": p.kernel[1],
                       "STRIDE_H": p.stride[0], "STRIDE_W": p.stride[1]},
            "height": p.height, "width": p.width}


def _conv_desc(a, b, g, mode: int, seed) -> dict:
    """A convolution descriptor's operand fields: A and B (BFP8, their tile grids as the
    row and column exponents), the geometry and the seed; DESC_M, N and K unused (1)."""
    return dict(m=1, n=1, k=1, flags={}, a_addr=a.q.addr, a_stride=a.q.stride,
                b_addr=b.q.addr, b_stride=b.q.stride, row_exp_addr=a.exp.addr,
                col_exp_addr=b.exp.addr, seed=int(seed), conv=_conv_fields(g, mode))


def _check_add(dev, add, shape):
    """``add`` (DESC_CONV.ADD's matrix): None, or a BFP8 matrix of ``shape`` on ``dev``."""
    if add is None:
        return
    if not isinstance(add, BfpTensor):
        raise TypeError(f"add must be a BfpTensor, not {type(add).__name__}")
    if add.q.device is not dev:
        raise ValueError("add belongs to another device (or is freed)")
    if add.shape != shape:
        raise ValueError(f"add is {add.shape[0]}x{add.shape[1]}, the sum is "
                         f"{shape[0]}x{shape[1]} (C before a pool, after an unpool)")
    if dev.driver is not None and not dev.driver.info.add:
        raise RuntimeError(f"this {dev.backend} accelerator adds no residual on the write "
                           f"path (CONFIG_FEATURES.ADD)")


def _run_conv(dev, mode, x, w, g, m, n, golden, *, bias, relu, mask_in, out, rounding,
              seed, stage=None, add=None):
    _require_conv(dev, mode, g)
    _require(dev, BFP8=int(out == "bfp8"),
             STOCHASTIC=int(out == "bfp8" and rounding == "stochastic"),
             BIAS=0 if bias is None else 1, RELU=int(relu), MASK_IN=int(mask_in is not None))
    _begin(dev, *g.implicit_gemm(mode))
    tensors = [w.q, w.exp, x.q, x.exp]
    if add is not None:
        tensors += [add.q, add.exp]

    def desc():
        d = _conv_desc(w, x, g, mode, seed)
        if stage is not None:
            d["pool"] = _pool_fields(stage)
        if add is not None:
            d["conv"]["fields"]["ADD"] = 1
            d.update(add_addr=add.q.addr, add_stride=add.q.stride, add_exp_addr=add.exp.addr)
        return d

    return _emit(dev, m, n, golden, desc, tensors, bias=bias,
                 bias_axis="row", relu=relu, mask_in=mask_in, out=out, rounding=rounding,
                 seed=seed, stage=stage, residual=add)


def _pass(dev, mode, x, w, geometry, *, bias, relu, mask_in, out, rounding, seed,
          pooling=None, argmax=None, add=None):
    """One forward (``mode`` 1) or backward-data (2) descriptor: its checks, then
    :func:`_run_conv` with the implicit GEMM's shape and the golden model's pass."""
    g = _check_geometry(geometry)
    forward = mode == 1
    x_rows, x_cols = ((g.channels, g.positions) if forward
                      else (g.out_channels, g.out_positions))
    _check_operands(dev, x, w, g, x_rows, x_cols)
    _check_rounding(rounding, seed)
    m, n = (g.out_channels, g.out_positions) if forward else (g.channels, g.positions)
    stage = _check_pooling(dev, pooling, mode, g, argmax)
    if stage is not None and dev.driver is not None and not dev.driver.info.pool and (
            out != "bfp8" or (mode == 1 and mask_in is not None)):
        raise RuntimeError(f"this {dev.backend} accelerator pools only into a BFP8 output, "
                           f"a forward convolution's without a stored mask (CONFIG_FEATURES."
                           f"POOL_FORWARD, POOL_BACKWARD), not "
                           f"out={out!r}{' with mask_in' if mask_in is not None else ''}")
    # (ReLU and the masks see the pool's input)
    mid = n if stage is None or mode == 1 else pooling.geometry.positions
    _check_output(dev, m, mid, bias, "row", relu, mask_in, out)
    _check_add(dev, add, (m, mid))
    run = convm.conv2d_forward if forward else convm.conv2d_backward_data

    def golden():
        return run(x.mantissas(), x.exponents(), w.mantissas(), w.exponents(), g,
                   block=regmap.TILE_BLOCK)

    return _run_conv(dev, mode, x, w, g, m, n, golden, bias=bias,
                     relu=relu, mask_in=mask_in, out=out, rounding=rounding, seed=seed,
                     stage=stage, add=add)


def conv2d(dev, x: BfpTensor, w: BfpStack, geometry, *, bias=None, relu: bool = False,
           pool=None, add=None, out: str = "bfp8", rounding: str = "nearest", seed: int = 0):
    """See :meth:`firmware.Device.conv2d`."""
    return _pass(dev, 1, x, w, geometry, bias=bias, relu=relu, mask_in=None, out=out,
                 rounding=rounding, seed=seed, pooling=pool, add=add)


def conv2d_backward_data(dev, d: BfpTensor, w: BfpStack, geometry, *, mask_in=None,
                         unpool=None, argmax=None, add=None, out: str = "bfp8",
                         rounding: str = "nearest", seed: int = 0):
    """See :meth:`firmware.Device.conv2d_backward_data`."""
    return _pass(dev, 2, d, w, geometry, bias=None, relu=False, mask_in=mask_in, out=out,
                 rounding=rounding, seed=seed, pooling=unpool, argmax=argmax, add=add)


def _weight_grad(dev, d, x, geometry, target, *, lr=None, weight_decay=0.0,
                 rounding="nearest", seed=0, bias=None):
    """One weight-gradient descriptor (``DESC_CONV.MODE`` 3): the float32 stack it writes
    (``target`` None), or the SGD step of ``target`` (a BfpStack, or a float32 stack), and
    with ``bias`` (``DESC_CONV.BIAS_GRAD``) the SGD step of that float32 bias row too."""
    from firmware.runtime.device import DeviceTensor
    g = _check_geometry(geometry)
    for name, t, shape in (("d", d, (g.out_channels, g.out_positions)),
                           ("x", x, (g.channels, g.positions))):
        if not isinstance(t, BfpTensor):
            raise TypeError(f"{name} must be a BfpTensor, not {type(t).__name__}")
        if t.q.device is not dev:
            raise ValueError(f"{name} belongs to another device (or is freed)")
        if t.shape != shape:
            raise ValueError(f"{name} is {t.shape[0]}x{t.shape[1]}, the geometry's "
                             f"{shape[0]}x{shape[1]}")
    _check_rounding(rounding, seed)
    kk = len(g.offsets)
    m, n = kk * g.out_channels, g.channels
    bfp8 = isinstance(target, BfpStack)
    if bfp8:
        if target.q.device is not dev:
            raise ValueError("target belongs to another device (or is freed)")
        if target.shape != (kk, g.out_channels, g.channels):
            raise ValueError(f"target is {target.shape}, the geometry's "
                             f"{(kk, g.out_channels, g.channels)}")
    elif target is not None and (not isinstance(target, DeviceTensor)
                                 or target.device is not dev or target.dtype != np.float32
                                 or target.shape != (m, n)):
        raise TypeError(f"target must be a BfpStack or this device's float32 {m}x{n} "
                        f"DeviceTensor (the stack's matrices one after another), not "
                        f"{type(target).__name__} {getattr(target, 'shape', '')}")
    if target is not None:
        _check_rates(lr, weight_decay)
    _require_conv(dev, 3, g)
    if bias is not None:
        _check_bias_row(dev, bias, g.out_channels, target)
    ops = {"SGD": 1} if target is not None else {}
    _require(dev, rows=m, BFP8=int(bfp8), STOCHASTIC=int(bfp8 and rounding == "stochastic"),
             **ops)
    _begin(dev, *g.implicit_gemm(3))
    if dev.driver is None:
        grad = convm.conv2d_weight_grad(d.mantissas(), d.exponents(), x.mantissas(),
                                        x.exponents(), g, block=regmap.TILE_BLOCK)
        grad = grad.reshape(m, n)
        if target is None:
            return dev.tensor(grad)
        w = target.numpy().reshape(m, n) if bfp8 else target.numpy()
        w = bfp.sgd_step(w, grad, lr, weight_decay)
        if bfp8 and not np.isfinite(w).all():
            raise ValueError("the updated weights hold inf or NaN: they cannot be quantised")
        if bias is not None:
            db = convm.bias_grad(d.mantissas(), d.exponents(), block=regmap.TILE_BLOCK)
            bias.write(bfp.sgd_step(bias.numpy(), db.reshape(1, -1), lr, weight_decay))
        if not bfp8:
            target.write(w)
            return None
        q, e = convm.quantize_stack(w.reshape(target.shape), rounding=rounding,
                                    seed=int(seed), block=regmap.TILE_BLOCK)
        target.q.write(q.reshape(m, n))
        target.exp.write(e.reshape(1, -1))
        return None
    desc = _conv_desc(d, x, g, 3, seed)
    epi = {"A_TILES": 1, "B_TILES": 1}
    tensors = [d.q, d.exp, x.q, x.exp]
    made = None
    if target is None:
        made = _empty(dev, (m, n), np.float32)
        desc.update(c_addr=made.addr, c_stride=made.stride)
        tensors.append(made)
    else:
        _sgd_target(desc, epi, tensors, target, lr, weight_decay, rounding)
    if bias is not None:
        desc["conv"]["fields"]["BIAS_GRAD"] = 1
        desc["bias_addr"] = bias.addr
        tensors.append(bias)
    desc["epilogue"] = epi
    try:
        _run(dev, desc, tensors)
    except BaseException:
        if made is not None:
            made.free()
        raise
    return made


def conv2d_weight_grad(dev, d: BfpTensor, x: BfpTensor, geometry):
    """See :meth:`firmware.Device.conv2d_weight_grad`."""
    return _weight_grad(dev, d, x, geometry, None)


def conv2d_sgd_update(dev, d: BfpTensor, x: BfpTensor, target, geometry, *, lr,
                      weight_decay=0.0, rounding: str = "nearest", seed: int = 0,
                      bias=None) -> None:
    """See :meth:`firmware.Device.conv2d_sgd_update`."""
    if target is None:
        raise TypeError("target must be a BfpStack or a float32 DeviceTensor, not None")
    _weight_grad(dev, d, x, geometry, target, lr=lr, weight_decay=weight_decay,
                 rounding=rounding, seed=seed, bias=bias)


def offers_bias_grad(dev) -> bool:
    """Whether ``dev`` steps a bias in its weight gradient's descriptor
    (``CONFIG_FEATURES.BIAS_GRAD``; the golden backend does)."""
    return dev.driver is None or dev.driver.info.bias_grad


def _check_bias_row(dev, bias, cout: int, target) -> None:
    """``bias`` of :func:`conv2d_sgd_update`: a float32 ``1 x cout`` DeviceTensor on
    ``dev``, apart from ``target``, on a device that offers ``DESC_CONV.BIAS_GRAD``."""
    from firmware.runtime.device import DeviceTensor
    if not isinstance(bias, DeviceTensor) or bias.dtype != np.float32 \
            or bias.shape != (1, cout):
        raise TypeError(f"bias must be a float32 1x{cout} DeviceTensor, not "
                        f"{type(bias).__name__} {getattr(bias, 'shape', '')}")
    if bias.device is not dev:
        raise ValueError("bias belongs to another device (or is freed)")
    if bias is target:
        raise ValueError("bias must not be the target itself")
    if not offers_bias_grad(dev):
        raise RuntimeError(f"this {dev.backend} accelerator does not step a bias in a weight "
                           f"gradient's descriptor (CONFIG_FEATURES.BIAS_GRAD): step it with "
                           f"a 1 x 1 weight gradient against a row of ones")
