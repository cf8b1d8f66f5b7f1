"""Device-resident BFP8 tensors and the GEMMs that keep them on the device.

A :class:`BfpTensor` is a matrix in BFP8 tile blocks (:mod:`sim.models.bfp`) held in device
memory: its int8 mantissas and its grid of tile exponents. :meth:`firmware.Device.quantize`
makes one from float32 data with a quantise-only descriptor; :meth:`firmware.Device.bfp_gemm`
multiplies two of them with the tile exponents applied along K on the device, and writes its
result through the write-back epilogue — bias, ReLU with its mask, a stored mask applied
backward, and quantisation to BFP8 tile blocks again, or float32 — so that one layer's output
is the next layer's operand without leaving the device.

Each call is one descriptor with ``DESC_EPILOGUE`` options (:mod:`firmware.spec.regmap`).
A device whose ``CONFIG_FEATURES`` lacks the epilogue refuses these calls before anything
runs. On the ``golden`` backend the same results come straight from :mod:`sim.models.bfp`.
"""

from __future__ import annotations

import numpy as np

from firmware.spec import regmap
from sim.models import bfp
from sim.models import conv as convm

__all__ = ["BfpTensor", "MaskTensor", "quantize", "upload", "bfp_gemm", "offers", "ROUNDINGS"]

ROUNDINGS = ("nearest", "stochastic")


class BfpTensor:
    """A matrix in BFP8 tile blocks on a device; ``shape`` is the matrix's ``(M, N)``.

    Attributes
    ----------
    q : DeviceTensor
        The int8 mantissas, ``M x N``.
    exp : DeviceTensor
        The tile exponents, int8, stored as one row of ``ceil(M/T) * ceil(N/T)`` bytes
        (the grid row-major).
    block : int
        The tile side ``T``.
    """

    def __init__(self, q, exp, shape, block: int):
        self.q, self.exp, self.shape, self.block = q, exp, tuple(shape), block

    @property
    def grid(self) -> tuple[int, int]:
        """The exponent grid's shape."""
        return bfp.tile_grid(self.shape, block=self.block)

    def mantissas(self) -> np.ndarray:
        """A host copy of the int8 mantissas."""
        return self.q.numpy()

    def exponents(self) -> np.ndarray:
        """A host copy of the tile exponents, shaped as their grid."""
        return self.exp.numpy().reshape(self.grid)

    def numpy(self) -> np.ndarray:
        """The values as float32 (exact: :func:`sim.models.bfp.dequantize_tiles`)."""
        return bfp.dequantize_tiles(self.mantissas(), self.exponents(), block=self.block)

    def free(self) -> None:
        """Give both buffers back to the device."""
        self.q.free()
        self.exp.free()

    def __repr__(self):
        return f"BfpTensor(shape={self.shape}, block={self.block})"


class MaskTensor:
    """ReLU's mask on a device: one bit per element, each row packed LSB first
    (:func:`sim.models.bfp.pack_mask`); ``shape`` is the masked matrix's ``(M, N)``.

    Attributes
    ----------
    bits : DeviceTensor
        uint8, ``M x ceil(N/8)``.
    """

    def __init__(self, bits, shape):
        self.bits, self.shape = bits, tuple(shape)

    def numpy(self) -> np.ndarray:
        """The mask as a bool ``M x N`` array."""
        return bfp.unpack_mask(self.bits.numpy(), self.shape[1])

    def free(self) -> None:
        self.bits.free()

    def __repr__(self):
        return f"MaskTensor(shape={self.shape})"


def _check_rounding(rounding, seed):
    if rounding not in ROUNDINGS:
        raise ValueError(f"rounding must be one of {ROUNDINGS}, not {rounding!r}")
    if not isinstance(seed, (int, np.integer)) or isinstance(seed, bool) \
            or not 0 <= int(seed) < 1 << 64:
        raise ValueError(f"seed must be an integer in [0, 2**64), not {seed!r}")


def offers(dev, **ops) -> bool:
    """Whether ``dev`` runs a descriptor with tile exponents and the ``DESC_EPILOGUE``
    options ``ops`` (field values, as :func:`firmware.spec.regmap.pack` takes them), as
    :func:`_require` would let it: a caller with a host fallback asks this first.

    Examples
    --------
    >>> from firmware import Device
    >>> offers(Device("golden"), QUANTIZE_ONLY=1, BFP8=1)
    True
    """
    try:
        _require(dev, **ops)
    except RuntimeError:
        return False
    return True


def _require(dev, rows=1, **ops):
    """The device offers tile exponents and the ``DESC_EPILOGUE`` options ``ops`` (field
    values, as :func:`firmware.spec.regmap.pack` takes them), else a clear error. Where
    ``CONFIG_FEATURES.EPILOGUE`` is 0, ``RELU``, ``BIAS``, ``MASK_IN``, ``QUANTIZE_ONLY``
    and ``SGD`` in ``CONFIG_FEATURES.OPS`` are offered only with ``BFP8`` (a float32 C is
    refused here), but for the first three and ``SGD`` of one row (``rows``) where
    ``CONFIG_FEATURES.FP32`` is 1."""
    if dev.driver is None:
        return
    info = dev.driver.info
    want = regmap.pack("DESC_EPILOGUE", **ops) & 0xFF
    missing = [f.name for f in regmap.by_name("DESC_EPILOGUE").fields
               if f.lsb < 8 and ops.get(f.name) and want >> f.lsb & ~info.epilogue_ops >> f.lsb
               & ((1 << f.width) - 1)]
    if missing or not info.k_blocks:
        what = ("the write-back epilogue's " + ", ".join(missing) if missing
                else "tile exponents")
        raise RuntimeError(f"this {dev.backend} accelerator does not offer {what} "
                           f"(CONFIG_FEATURES): "
                           f"use the host path (firmware.ml's blocks policies) or "
                           f"Device('model')")
    bfp8_only = [name for name in ("RELU", "BIAS", "MASK_IN", "QUANTIZE_ONLY", "SGD")
                 if ops.get(name) and not (info.fp32 and name != "QUANTIZE_ONLY")]
    if bfp8_only and not ops.get("BFP8") and not info.epilogue:
        raise RuntimeError(f"this {dev.backend} accelerator offers the write-back epilogue's "
                           f"{', '.join(bfp8_only)} only with a BFP8 C (out='bfp8'; "
                           f"CONFIG_FEATURES.EPILOGUE is 0): use out='bfp8', the host path or "
                           f"Device('model')")
    if ops.get("SGD") and not ops.get("BFP8") and not info.epilogue and rows != 1:
        raise RuntimeError(f"this {dev.backend} accelerator steps a float32 C of one row "
                           f"only (a bias vector; CONFIG_FEATURES.FP32), not {rows} rows: "
                           f"use a BFP8 target, the host path or Device('model')")
    if info.tile_block != regmap.TILE_BLOCK:
        raise RuntimeError(f"the accelerator's tiles are {info.tile_block} wide, this "
                           f"runtime's {regmap.TILE_BLOCK}")


def _empty(dev, shape, dtype):
    """An uninitialised device matrix whose rows start on bus words (never packed: the
    write-back writes C, masks and exponents only there)."""
    from firmware.runtime.device import DeviceTensor, _round_up
    if dev.driver is None:
        return dev.empty(shape, dtype)
    stride = _round_up(shape[1] * np.dtype(dtype).itemsize, dev.bytes_per_word)
    return DeviceTensor(dev, shape, dtype, dev.pool.get(shape[0] * stride), stride)


def _empty_bfp(dev, shape) -> BfpTensor:
    grid = bfp.tile_grid(shape, block=regmap.TILE_BLOCK)
    return BfpTensor(_empty(dev, shape, np.int8), _empty(dev, (1, grid[0] * grid[1]), np.int8),
                     shape, regmap.TILE_BLOCK)


def _golden_bfp(dev, q, exp) -> BfpTensor:
    return BfpTensor(dev.tensor(q), dev.tensor(exp.reshape(1, -1)), q.shape, regmap.TILE_BLOCK)


def _check_dims(*dims):
    from firmware.runtime.device import MAX_DIM
    for name, v in dims:
        if v > MAX_DIM:
            raise ValueError(f"{name}={v} exceeds {MAX_DIM}: a BFP8 GEMM is one descriptor")


def _span(t) -> tuple[int, int]:
    """The bytes a device tensor covers, for the driver's address window."""
    return t.addr, t.addr + (t.shape[0] - 1) * t.stride + t.shape[1] * t.dtype.itemsize


def _run(dev, desc, tensors) -> None:
    desc["regions"] = [_span(t) for t in tensors]
    if dev._recording is not None:              # Device.record(): run at the replay
        dev._recording.add(desc)
        return
    _account(dev, dev.driver.run(desc, profile=dev.profile), 1)


def _account(dev, cnt: dict, descriptors: int) -> None:
    """A run's counters into ``dev.profile`` (its busy cycles) and ``dev.stats`` (whose
    ``macs`` the caller has set)."""
    cycles = cnt["busy_cycles"]
    dev.profile.cycles += cycles
    dev.stats.update(descriptors=descriptors, cycles=cycles,
                     active_cycles=cnt["active_cycles"], dma_stall_cycles=cnt["stall_cycles"],
                     utilization=dev.stats["macs"] / (dev.rows * dev.cols * cycles)
                     if cycles and dev.stats["macs"] else None)


def upload(dev, q, exp) -> BfpTensor:
    """See :meth:`firmware.Device.bfp_tensor`."""
    if not isinstance(q, np.ndarray) or q.dtype != np.int8 or q.ndim != 2 or not q.size:
        raise TypeError(f"q must be a non-empty int8 matrix, not "
                        f"{getattr(q, 'dtype', type(q).__name__)} {getattr(q, 'shape', '')}")
    grid = bfp.tile_grid(q.shape, block=regmap.TILE_BLOCK)
    if not isinstance(exp, np.ndarray) or exp.dtype != np.int8:
        raise TypeError(f"exp must be an int8 array, not "
                        f"{getattr(exp, 'dtype', type(exp).__name__)}")
    if exp.shape != grid:
        raise ValueError(f"exp must have the shape of q's tile grid, {grid}, not {exp.shape}")
    if dev.driver is None:
        return _golden_bfp(dev, q, exp)
    t = _empty_bfp(dev, q.shape)
    t.q.write(q)
    t.exp.write(np.ascontiguousarray(exp).reshape(1, -1))
    return t


def quantize(dev, x, *, rounding: str = "nearest", seed: int = 0,
             unfold=None) -> BfpTensor:
    """See :meth:`firmware.Device.quantize`."""
    from firmware.runtime.device import DeviceTensor
    _check_rounding(rounding, seed)
    _require(dev, QUANTIZE_ONLY=1, BFP8=1, STOCHASTIC=int(rounding == "stochastic"))
    g = None if unfold is None else _unfold_geometry(dev, unfold)
    if isinstance(x, DeviceTensor):
        x._live()
        if x.device is not dev:
            raise ValueError("x is a DeviceTensor of another device")
        if x.dtype != np.float32 or x.ndim != 2:
            raise TypeError(f"x must hold a float32 matrix, not {x.dtype} {x.shape}")
    elif not isinstance(x, np.ndarray) or x.dtype != np.float32 or x.ndim != 2 or not x.size:
        raise TypeError(f"x must be a non-empty float32 matrix (numpy or DeviceTensor), not "
                        f"{getattr(x, 'dtype', type(x).__name__)} {getattr(x, 'shape', '')}")
    if g is None:
        m, n = x.shape
        # (a device with convolution descriptors quantises an activation matrix's H*W*batch
        # columns in one descriptor: DESC_N)
        wide = dev.driver is None or dev.driver.info.conv
        _check_dims(("M", m), ("N", min(n, 0xFFFF) if wide else n))
        fields = dict(m=m, n=n)
    else:
        if x.shape != (g.channels, g.positions):
            raise TypeError(f"x must be the float32 {g.channels}x{g.positions} input matrix "
                            f"of unfold's geometry, not {x.dtype} {x.shape}")
        m, n = g.channels * len(g.offsets), g.out_positions
        _check_dims(("M", m))
        from firmware.runtime.convolution import _conv_fields
        fields = dict(m=1, n=1, conv=_conv_fields(g, 1))
    _begin(dev, m, n, 0)
    if dev.driver is None:
        host = x.numpy() if isinstance(x, DeviceTensor) else x
        if not np.isfinite(host).all():
            raise ValueError("x must be finite to quantise (it holds inf or NaN)")
        host = host if g is None else convm.unfold(host, g)
        return _golden_bfp(dev, *bfp.quantize_tiles(host, rounding=rounding, seed=int(seed)))
    return _quantize_on_device(dev, x, (m, n), rounding, seed, fields)


def _unfold_geometry(dev, g):
    """``unfold``'s geometry, checked: a :class:`sim.models.conv.ConvGeometry` within
    ``DESC_CONV``'s fields and the device's positions, its batch whole tile blocks, on a
    device that unfolds (``CONFIG_FEATURES.UNFOLD``)."""
    from firmware.runtime.convolution import _check_geometry, check_positions
    g = _check_geometry(g)
    if dev.driver is not None and not dev.driver.info.unfold:
        raise RuntimeError(f"this {dev.backend} accelerator does not unfold a convolution's "
                           f"input (CONFIG_FEATURES.UNFOLD)")
    check_positions(dev, g)
    if g.batch % regmap.TILE_BLOCK:
        raise ValueError(f"unfold: the batch ({g.batch}) must be a multiple of "
                         f"{regmap.TILE_BLOCK}, a tile block a position's images")
    return g


def _quantize_on_device(dev, x, shape, rounding, seed, fields) -> BfpTensor:
    """One quantise-only descriptor (``fields`` its own: M, N, a convolution's geometry)
    from the float32 ``x`` (copied to the device for the run if it is not there) into a
    new BFP8 tensor of ``shape``."""
    from firmware.runtime.device import DeviceTensor
    temp = None
    if not isinstance(x, DeviceTensor):
        x = temp = dev.tensor(x)
    out = _empty_bfp(dev, shape)
    try:
        _run(dev, dict(k=1, flags={}, a_addr=x.addr, a_stride=x.stride,
                       c_addr=out.q.addr, c_stride=out.q.stride, c_exp_addr=out.exp.addr,
                       seed=int(seed),
                       epilogue={"QUANTIZE_ONLY": 1, "BFP8": 1,
                                 "STOCHASTIC": int(rounding == "stochastic")}, **fields),
             [x, out.q, out.exp])
    except BaseException:
        out.free()
        raise
    finally:
        if temp is not None:
            temp.free()
    return out


def _operands(dev, a, b, transpose_a, transpose_b, rounding, seed) -> tuple[int, int, int]:
    """The checks of a BFP8 GEMM's operands, flags and rounding; its ``(M, N, K)``."""
    for name, t in (("a", a), ("b", b)):
        if not isinstance(t, BfpTensor):
            raise TypeError(f"{name} must be a BfpTensor (Device.quantize or bfp_gemm), not "
                            f"{type(t).__name__}")
        if t.q.device is not dev:
            raise ValueError(f"{name} is a BfpTensor of another device (or freed)")
    for name, flag in (("transpose_a", transpose_a), ("transpose_b", transpose_b)):
        if not isinstance(flag, (bool, np.bool_)):
            raise TypeError(f"{name} must be a bool, not {type(flag).__name__}")
    _check_rounding(rounding, seed)
    m, ka = a.shape[::-1] if transpose_a else a.shape
    kb, n = b.shape[::-1] if transpose_b else b.shape
    if ka != kb:
        raise ValueError(f"inner dimensions differ: op(a) is {m}x{ka} but op(b) is {kb}x{n}")
    _check_dims(("M", m), ("N", n), ("K", ka))
    return m, n, ka


def _begin(dev, m: int, n: int, k: int, macs: int | None = None) -> None:
    """A descriptor's ``dev.stats`` before it runs (``k`` 0: quantise-only, no GEMM;
    ``macs`` where they are not ``m * n * k``, a convolution's)."""
    dev.stats = {"backend": dev.backend, "macs": m * n * k if macs is None else macs,
                 "m": m, "n": n, "k": k,
                 "descriptors": 0, "cycles": None, "utilization": None}
    if k:
        dev.profile.count("gemms", 1)


def _golden_gemm(a, b, transpose_a, transpose_b) -> np.ndarray:
    return bfp.gemm_kblocks(a.mantissas(), a.exponents(), b.mantissas(), b.exponents(),
                            transpose_a=bool(transpose_a), transpose_b=bool(transpose_b))


def _operand_desc(a, b, m, n, k, transpose_a, transpose_b, seed) -> dict:
    """A BFP8 GEMM descriptor's operand fields (tile exponents along K)."""
    return dict(m=m, n=n, k=k, flags={"TRANSPOSE_A": int(transpose_a),
                                      "TRANSPOSE_B": int(transpose_b)},
                a_addr=a.q.addr, a_stride=a.q.stride, b_addr=b.q.addr, b_stride=b.q.stride,
                row_exp_addr=a.exp.addr, col_exp_addr=b.exp.addr, seed=int(seed))


def bfp_gemm(dev, a: BfpTensor, b: BfpTensor, *, transpose_a: bool = False,
             transpose_b: bool = False, bias=None, bias_axis: str = "col", relu: bool = False,
             mask_in: MaskTensor | None = None, out: str = "bfp8", rounding: str = "nearest",
             seed: int = 0):
    """See :meth:`firmware.Device.bfp_gemm`."""
    m, n, k = _operands(dev, a, b, transpose_a, transpose_b, rounding, seed)
    _check_output(dev, m, n, bias, bias_axis, relu, mask_in, out)
    _require(dev, BFP8=int(out == "bfp8"),
             STOCHASTIC=int(out == "bfp8" and rounding == "stochastic"),
             BIAS=0 if bias is None else 1 if bias_axis == "row" else 2, RELU=int(relu),
             MASK_IN=int(mask_in is not None))
    _begin(dev, m, n, k)
    return _emit(dev, m, n, lambda: _golden_gemm(a, b, transpose_a, transpose_b),
                 lambda: _operand_desc(a, b, m, n, k, transpose_a, transpose_b, seed),
                 [a.q, a.exp, b.q, b.exp], bias=bias, bias_axis=bias_axis, relu=relu,
                 mask_in=mask_in, out=out, rounding=rounding, seed=seed)


def _check_output(dev, m, n, bias, bias_axis, relu, mask_in, out) -> None:
    """The checks of what a descriptor's epilogue does to its ``m x n`` C."""
    from firmware.runtime.device import DeviceTensor
    if not isinstance(relu, (bool, np.bool_)):
        raise TypeError(f"relu must be a bool, not {type(relu).__name__}")
    if out not in ("bfp8", "float32"):
        raise ValueError(f"out must be 'bfp8' or 'float32', not {out!r}")
    if bias_axis not in ("row", "col"):
        raise ValueError(f"bias_axis must be 'row' or 'col', not {bias_axis!r}")
    if bias is not None:
        length = m if bias_axis == "row" else n
        # (a DeviceTensor's values stay on the device: only its shape is checked)
        if isinstance(bias, DeviceTensor):
            if bias.device is not dev or bias.dtype != np.float32:
                raise TypeError(f"bias must be a float32 vector of this device, not "
                                f"{bias.dtype}")
            size = bias.shape[0] * bias.shape[1]
        elif not isinstance(bias, np.ndarray) or bias.dtype != np.float32:
            raise TypeError(f"bias must be a float32 vector, not "
                            f"{getattr(bias, 'dtype', type(bias).__name__)}")
        else:
            size = bias.size
        if size != length:
            raise ValueError(f"bias must have {length} values (one per "
                             f"{'row' if bias_axis == 'row' else 'column'} of C), not "
                             f"{size}")
    if mask_in is not None:
        if not isinstance(mask_in, MaskTensor):
            raise TypeError(f"mask_in must be a MaskTensor (bfp_gemm with relu=True), not "
                            f"{type(mask_in).__name__}")
        if mask_in.shape != (m, n):
            raise ValueError(f"mask_in is {mask_in.shape[0]}x{mask_in.shape[1]}, C is {m}x{n}")


def _emit(dev, m, n, golden, desc, tensors, *, bias, bias_axis, relu, mask_in, out, rounding,
          seed, stage=None, residual=None):
    """Run one descriptor whose ``m x n`` C goes through the epilogue: ``golden()`` gives
    C before it on the golden backend; elsewhere ``desc()`` (its operand fields) and
    ``tensors`` (the operands' buffers) are completed with C's, the bias's and the masks'
    and run. ``stage``: a convolution's pooling stage, ``(mode, pooling, argmax)``
    (``DESC_POOL.MODE`` 1 pools C, 2 routes it back through the pool, reading ``argmax``);
    ``residual``: a convolution's BfpTensor added before the bias (``DESC_CONV.ADD``, which
    ``desc()`` sets).
    Returns C (a BfpTensor or a float32 DeviceTensor), then the mask with ``relu``, then the
    argmax (a uint8 DeviceTensor) where a max pool writes one."""
    from firmware.runtime.device import DeviceTensor
    mode, pooling, argmax_in = stage if stage is not None else (0, None, None)
    mid = (m, pooling.geometry.positions) if mode == 2 else (m, n)
    shape = (m, pooling.geometry.out_positions) if mode == 1 else mid
    writes_argmax = mode == 1 and pooling.kind == "max"
    if dev.driver is None:
        c = golden()
        host_bias = bias.numpy() if isinstance(bias, DeviceTensor) else bias
        host_bias = None if bias is None else host_bias.reshape(-1)
        host_mask = None if mask_in is None else mask_in.numpy()
        if stage is None and residual is None:
            r = bfp.epilogue(c, bias=host_bias, bias_axis=bias_axis, relu=bool(relu),
                             mask_in=host_mask, out="fp32")
            arg = None
        else:
            from sim.models import conv as convm
            r = convm.conv_epilogue(c, bias=host_bias, relu=bool(relu), mask_in=host_mask,
                                    pool_out=pooling if mode == 1 else None,
                                    unpool_in=pooling if mode == 2 else None,
                                    argmax=None if argmax_in is None else argmax_in.numpy(),
                                    residual=None if residual is None else residual.numpy(),
                                    out="fp32")
            arg = r.argmax
        if out == "bfp8" and not np.isfinite(r.value).all():
            raise ValueError("the result holds inf or NaN: it cannot be quantised")
        if out == "bfp8":
            result = _golden_bfp(dev, *bfp.quantize_tiles(r.value, rounding=rounding,
                                                          seed=int(seed)))
        else:
            result = dev.tensor(r.value)
        extra = (MaskTensor(dev.tensor(bfp.pack_mask(r.mask)), mid),) if relu else ()
        extra += (dev.tensor(arg),) if writes_argmax else ()
        return (result, *extra) if extra else result
    temps, made, tensors, desc = [], [], list(tensors), desc()
    try:
        epi = {"A_TILES": 1, "B_TILES": 1}
        if out == "bfp8":
            result = _empty_bfp(dev, shape)
            made.append(result)
            desc.update(c_addr=result.q.addr, c_stride=result.q.stride,
                        c_exp_addr=result.exp.addr)
            epi.update(BFP8=1, STOCHASTIC=int(rounding == "stochastic"))
            tensors += [result.q, result.exp]
        else:
            result = _empty(dev, shape, np.float32)
            made.append(result)
            desc.update(c_addr=result.addr, c_stride=result.stride)
            tensors.append(result)
        if bias is not None:
            bt = bias if isinstance(bias, DeviceTensor) else dev.tensor(bias.reshape(1, -1))
            if bt is not bias:
                temps.append(bt)
            desc["bias_addr"] = bt.addr
            epi["BIAS"] = 1 if bias_axis == "row" else 2
            tensors.append(bt)
        extra = ()
        if relu:
            mask = MaskTensor(_empty(dev, (m, -(-mid[1] // 8)), np.uint8), mid)
            made.append(mask)
            extra += (mask,)
            desc.update(mask_addr=mask.bits.addr, mask_stride=mask.bits.stride)
            epi["RELU"] = 1
            tensors.append(mask.bits)
        if mask_in is not None:
            if relu:
                raise ValueError("relu and mask_in share the mask address: use one at a time")
            desc.update(mask_addr=mask_in.bits.addr, mask_stride=mask_in.bits.stride)
            epi["MASK_IN"] = 1
            tensors.append(mask_in.bits)
        if writes_argmax:
            arg = _empty(dev, shape, np.uint8)
            made.append(arg)
            extra += (arg,)
        else:
            arg = argmax_in
        if arg is not None:
            desc.update(argmax_addr=arg.addr, argmax_stride=arg.stride)
            tensors.append(arg)
        desc["epilogue"] = epi
        _run(dev, desc, tensors)
    except BaseException:
        for t in made:
            t.free()
        raise
    finally:
        for t in temps:
            t.free()
    return (result, *extra) if extra else result


def sgd_update(dev, a: BfpTensor, b: BfpTensor, target, *, lr, weight_decay=0.0,
               transpose_a: bool = False, transpose_b: bool = False,
               rounding: str = "nearest", seed: int = 0) -> None:
    """See :meth:`firmware.Device.sgd_update`."""
    from firmware.runtime.device import DeviceTensor
    _check_rates(lr, weight_decay)
    m, n, k = _operands(dev, a, b, transpose_a, transpose_b, rounding, seed)
    bfp8 = isinstance(target, BfpTensor)
    if bfp8:
        if target.q.device is not dev:
            raise ValueError("target is a BfpTensor of another device (or freed)")
    elif not isinstance(target, DeviceTensor) or target.device is not dev \
            or target.dtype != np.float32 or target.ndim != 2:
        raise TypeError(f"target must be a BfpTensor or a float32 DeviceTensor matrix of "
                        f"this device, not {type(target).__name__}")
    if target.shape != (m, n):
        raise ValueError(f"target is {target.shape[0]}x{target.shape[1]}, the gradient "
                         f"{m}x{n}")
    _require(dev, rows=m, SGD=1, BFP8=int(bfp8),
             STOCHASTIC=int(bfp8 and rounding == "stochastic"))
    _begin(dev, m, n, k)
    if dev.driver is None:
        g = _golden_gemm(a, b, transpose_a, transpose_b)
        w = bfp.dequantize_tiles(target.mantissas(), target.exponents()) if bfp8 \
            else target.numpy()
        w = bfp.sgd_step(w, g, lr, weight_decay)
        if not bfp8:
            target.write(w)
            return
        if not np.isfinite(w).all():
            raise ValueError("the updated weights hold inf or NaN: they cannot be quantised")
        q, e = bfp.quantize_tiles(w, rounding=rounding, seed=int(seed))
        target.q.write(q)
        target.exp.write(e.reshape(1, -1))
        return
    desc = _operand_desc(a, b, m, n, k, transpose_a, transpose_b, seed)
    epi = {"A_TILES": 1, "B_TILES": 1}
    tensors = [a.q, a.exp, b.q, b.exp]
    _sgd_target(desc, epi, tensors, target, lr, weight_decay, rounding)
    desc["epilogue"] = epi
    _run(dev, desc, tensors)


def _check_rates(lr, weight_decay) -> None:
    """An SGD step's ``lr`` and ``weight_decay`` are finite numbers, else TypeError."""
    for name, v in (("lr", lr), ("weight_decay", weight_decay)):
        if not isinstance(v, (int, float, np.floating)) or isinstance(v, bool) \
                or not np.isfinite(v):
            raise TypeError(f"{name} must be a finite number, not {v!r}")


def _sgd_target(desc, epi, tensors, target, lr, weight_decay, rounding) -> None:
    """A descriptor's ``DESC_EPILOGUE.SGD`` fields for stepping ``target`` in place: a
    BfpTensor or stack (BFP8, rounded as ``rounding`` says) or a float32 DeviceTensor."""
    desc.update(lr=float(lr), decay=float(bfp.sgd_decay(lr, weight_decay)))
    epi["SGD"] = 1
    if hasattr(target, "exp"):
        desc.update(c_addr=target.q.addr, c_stride=target.q.stride,
                    c_exp_addr=target.exp.addr)
        epi.update(BFP8=1, STOCHASTIC=int(rounding == "stochastic"))
        tensors += [target.q, target.exp]
    else:
        desc.update(c_addr=target.addr, c_stride=target.stride)
        tensors.append(target)
