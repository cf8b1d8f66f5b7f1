"""Convolutions as implicit GEMMs on BFP8 tile blocks (:mod:`sim.models.conv`): the index maps
against an explicit ``im2col`` and one :func:`sim.models.bfp.gemm_kruns` over it (bit for
bit), against PyTorch in float64 on the dequantised operands, pooling, and bad arguments."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from sim.models import conv
from sim.models.bfp import (
    dequantize_tiles,
    gemm_kblocks,
    quantize_tiles,
    tile_exponents,
)
from sim.models.conv import ConvGeometry
from sim.models.golden import gemm, rescale

SEEDS = range(12)


# --------------------------------------------------------------------------- data

def _geometry(rng, *, batch=None) -> ConvGeometry:
    """A random valid geometry: kernels 1-5, strides 1-2, padding 0-2, dilation 1-2."""
    while True:
        k = tuple(int(v) for v in rng.integers(1, 6, 2)) if rng.random() < 0.3 \
            else int(rng.integers(1, 6))
        args = dict(batch=batch or int(rng.choice([1, 2, 3, 5, 8])),
                    channels=int(rng.choice([1, 3, 5, 9, 17])),
                    height=int(rng.integers(1, 12)), width=int(rng.integers(1, 12)),
                    out_channels=int(rng.choice([1, 4, 7, 13])), kernel=k,
                    stride=int(rng.integers(1, 3)), padding=int(rng.integers(0, 3)),
                    dilation=int(rng.integers(1, 3)))
        try:
            return ConvGeometry(**args)
        except ValueError:
            continue


def _values(rng, shape, spread=4.0):
    """float32 values with magnitudes spread over ``2**±spread`` (tiles differ in exponent)."""
    x = rng.standard_normal(shape) * np.exp2(rng.uniform(-spread, spread, shape))
    return x.astype(np.float32)


def _operands(rng, g: ConvGeometry, block: int):
    """Quantised input, weight stack and deltas for ``g``."""
    x = conv.activation_matrix(_values(rng, (g.batch, g.channels, g.height, g.width)))
    xq, xe = quantize_tiles(x, block=block)
    w = conv.weight_stack(_values(rng, (g.out_channels, g.channels, *g.kernel)))
    wq = np.empty(w.shape, np.int8)
    we = []
    for o in range(w.shape[0]):
        wq[o], e = quantize_tiles(w[o], block=block)
        we.append(e)
    d = conv.activation_matrix(_values(rng, (g.batch, g.out_channels, g.out_height,
                                             g.out_width)))
    dq, de = quantize_tiles(d, block=block)
    return (xq, xe), (wq, np.stack(we)), (dq, de)


def _elementwise(q, e, block, batch, height, width):
    """Mantissas, exponents and tile columns of a CHWN matrix, element by element, NCHW."""
    exps = tile_exponents(e, q.shape, block=block)
    tiles = np.broadcast_to(np.arange(q.shape[1]) // block, q.shape)
    return [conv.activation_tensor(np.ascontiguousarray(a), batch, height, width)
            for a in (q, exps, tiles)]


def _windows(t, g: ConvGeometry, fill):
    """Explicit ``im2col`` of an NCHW tensor: rows (dy, dx, c), columns (oh, ow, n)."""
    (kh, kw), (sy, sx), (py, px), (ry, rx) = g.kernel, g.stride, g.padding, g.dilation
    tp = np.pad(t, ((0, 0), (0, 0), (py, py), (px, px)), constant_values=fill)
    oh, ow = g.out_height, g.out_width
    rows = []
    for dy in range(kh):
        for dx in range(kw):
            y0, x0 = dy * ry, dx * rx
            s = tp[:, :, y0:y0 + sy * (oh - 1) + 1:sy, x0:x0 + sx * (ow - 1) + 1:sx]
            rows.append(s.transpose(1, 2, 3, 0).reshape(t.shape[1], oh * ow * t.shape[0]))
    return np.concatenate(rows)


def _channel_runs(count, channels, block):
    """K stops of (offset, channel block) runs over ``count`` offsets."""
    return [o * channels + min(lo + block, channels)
            for o in range(count) for lo in range(0, channels, block)]


def _run_exponents(ecols, stops):
    """The exponent of each run and column: constant over the run's rows (asserted)."""
    out, start = [], 0
    for stop in stops:
        seg = ecols[start:stop]
        assert (seg == seg[0]).all(), "an operand's exponent changes inside a K run"
        out.append(seg[0])
        start = stop
    return np.array(out, np.int8)


# --------------------------------------------------------------------------- references

def _kruns(a, a_exp, b, b_exp, stops):
    """The K-run GEMM from the datapath's primitives: each run's exact int32 partial
    (golden.gemm), rescaled once (golden.rescale), summed in float32 in run order from +0."""
    total = np.zeros((a.shape[0], b.shape[1]), np.float32)
    start = 0
    for j, stop in enumerate(stops):
        part = gemm(np.ascontiguousarray(a[:, start:stop]), np.ascontiguousarray(b[start:stop]))
        total = total + rescale(part, np.ascontiguousarray(a_exp[:, j], np.int8),
                                np.ascontiguousarray(b_exp[j], np.int8))
        start = stop
    return total


def _forward_ref(g, x, w, block):
    (xq, xe), (wq, we) = x, w
    mq, me, _ = _elementwise(xq, xe, block, g.batch, g.height, g.width)
    cols = _windows(mq, g, 0).astype(np.int8)
    ecols = _windows(me, g, 0)
    kk = len(g.offsets)
    stops = _channel_runs(kk, g.channels, block)
    wmat = np.concatenate(list(wq), axis=1)
    a_exp = np.concatenate([np.repeat(we[o], block, axis=0)[:g.out_channels]
                            for o in range(kk)], axis=1)
    return _kruns(wmat, a_exp, cols, _run_exponents(ecols, stops), stops)


def _backward_data_ref(g, d, w, block):
    """The transposed convolution as a stride-1 convolution of the zero-inserted, padded
    deltas with the rotated, transposed kernel."""
    (dq, de), (wq, we) = d, w
    (kh, kw), (sy, sx), (py, px), (ry, rx) = g.kernel, g.stride, g.padding, g.dilation
    mq, me, _ = _elementwise(dq, de, block, g.batch, g.out_height, g.out_width)
    hc = max(py + g.height + (kh - 1) * ry, ry * (kh - 1) + (g.out_height - 1) * sy + 1)
    wc = max(px + g.width + (kw - 1) * rx, rx * (kw - 1) + (g.out_width - 1) * sx + 1)
    canvas = np.zeros((2, g.batch, g.out_channels, hc, wc), np.int64)
    canvas[:, :, :, ry * (kh - 1)::sy, rx * (kw - 1)::sx][..., :g.out_height, :g.out_width] \
        = (mq, me)
    rows_q, rows_e, a_exp, wmat = [], [], [], []
    for fy in range(kh):
        for fx in range(kw):
            o = (kh - 1 - fy) * kw + (kw - 1 - fx)
            sl = canvas[:, :, :, py + fy * ry:py + fy * ry + g.height,
                        px + fx * rx:px + fx * rx + g.width]
            rows_q.append(conv.activation_matrix(sl[0]))
            rows_e.append(conv.activation_matrix(sl[1]))
            wmat.append(wq[o].T)
            a_exp.append(np.repeat(we[o].T, block, axis=0)[:g.channels])
    stops = _channel_runs(kh * kw, g.out_channels, block)
    cols = np.concatenate(rows_q).astype(np.int8)
    return _kruns(np.concatenate(wmat, axis=1), np.concatenate(a_exp, axis=1), cols,
                  _run_exponents(np.concatenate(rows_e), stops), stops)


def _weight_grad_ref(g, d, x, block):
    (dq, de), (xq, xe) = d, x
    mq, me, mt = _elementwise(xq, xe, block, g.batch, g.height, g.width)
    cols = _windows(mq, g, 0).astype(np.int8)
    ecols = _windows(me, g, 0)
    tcols = _windows(mt, g, -1)
    dexp = tile_exponents(de, dq.shape, block=block)
    out = []
    cin = g.channels
    for o in range(len(g.offsets)):
        c, e, t = (a[o * cin:(o + 1) * cin] for a in (cols, ecols, tcols))
        stops, a_exp, b_exp, start, last = [], [], [], 0, -1
        for p in range(c.shape[1] + 1):         # cut at T and where the X tile column changes
            end = p == c.shape[1] or p % block == 0 or (last >= 0 and t[0, p] >= 0
                                                         and t[0, p] != last)
            if p > start and end:
                valid = t[0, start:p] >= 0
                run_e = e[:, start:p][:, valid]
                assert (run_e == run_e[:, :1]).all()
                stops.append(p)
                a_exp.append(dexp[:, start])
                b_exp.append(run_e[:, 0] if valid.any() else np.zeros(cin, np.int64))
                start, last = p, -1
            if p < c.shape[1] and t[0, p] >= 0:
                last = t[0, p]
        out.append(_kruns(dq, np.array(a_exp, np.int8).T, c.T, np.array(b_exp, np.int8),
                          stops))
    return np.stack(out)


def _same(a, b):
    return a.shape == b.shape and np.array_equal(a.view(np.uint32), b.view(np.uint32))


# --------------------------------------------------------------------------- bit-exact

@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("block", [4, 8, 32])
def test_three_gemms_match_im2col(seed, block):
    rng = np.random.default_rng(1000 * block + seed)
    g = _geometry(rng)
    x, w, d = _operands(rng, g, block)
    y = conv.conv2d_forward(*x, *w, g, block=block)
    assert _same(y, _forward_ref(g, x, w, block))
    dx = conv.conv2d_backward_data(*d, *w, g, block=block)
    assert _same(dx, _backward_data_ref(g, d, w, block))
    gw = conv.conv2d_weight_grad(*d, *x, g, block=block)
    assert _same(gw, _weight_grad_ref(g, d, x, block))


@pytest.mark.parametrize("stride,padding", [(1, 1), (2, 0), (2, 2)])
def test_forward_is_gemm_kblocks_when_batch_fills_tiles(stride, padding):
    """With channels and batch multiples of T, the im2col's exponents are tile-structured:
    the forward convolution is exactly gemm_kblocks over it."""
    rng = np.random.default_rng(stride * 10 + padding)
    block = 4
    g = ConvGeometry(8, 8, 5, 6, 12, 3, stride=stride, padding=padding)
    x, w, _ = _operands(rng, g, block)
    mq, me, _ = _elementwise(*x, block, g.batch, g.height, g.width)
    cols = _windows(mq, g, 0).astype(np.int8)
    ecols = _windows(me, g, 0)
    grid = ecols[::block, ::block].astype(np.int8)
    assert (np.repeat(np.repeat(grid, block, 0), block, 1) == ecols).all()
    wmat = np.concatenate(list(w[0]), axis=1)
    wexp = np.concatenate(list(w[1]), axis=1)
    ref = gemm_kblocks(wmat, wexp, cols, grid, block=block)
    assert _same(conv.conv2d_forward(*x, *w, g, block=block), ref)


def test_weight_grad_never_straddles_when_batch_fills_tiles():
    """Batch innermost with N a multiple of T: every weight-gradient run is one whole K
    block, for every offset, stride, padding and dilation."""
    for stride in (1, 2):
        for padding in (0, 1, 2):
            for dilation in (1, 2):
                g = ConvGeometry(64, 3, 7, 9, 5, 3, stride=stride, padding=padding,
                                 dilation=dilation)
                for dy, dx in g.offsets:
                    runs = g.weight_grad_runs(dy, dx)
                    assert [r[:2] for r in runs] == [(s, s + 32)
                                                     for s in range(0, g.out_positions, 32)]


def test_weight_grad_runs_cut_at_straddles():
    g = ConvGeometry(1, 1, 4, 4, 1, 3, padding=1)
    runs = g.weight_grad_runs(0, 0, block=4)
    # output row 0 reads padding; rows 1-3 read input rows 0-2 shifted left by one column
    assert runs == [(0, 4, -1), (4, 8, 0), (8, 12, 1), (12, 16, 2)]
    g = ConvGeometry(1, 1, 5, 5, 1, 3, padding=1)
    runs = g.weight_grad_runs(1, 0, block=4)
    # q = 5 * oh + ow - 1 (padding at ow = 0): a padding position joins its run
    assert runs[:5] == [(0, 4, 0), (4, 6, 0), (6, 8, 1), (8, 9, 1), (9, 12, 2)]
    assert all(a[1] == b[0] for a, b in zip(runs, runs[1:], strict=False))


@pytest.mark.parametrize("batch, cols, side, want", [
    (128, 32, 8, 4), (128, 64, 8, 2), (32, 32, 8, 1), (96, 32, 8, 1), (64, 8, 4, 4),
    (32, 8, 3, 1), (16, 8, 6, 2), (256, 8, 8, 8), (8, 64, 8, 1), (100, 32, 8, 1)])
def test_b_group_is_a_positions_tiles_within_a_block(batch, cols, side, want):
    """The walker's B jobs of a convolution: a power of two dividing the tiles of one
    position's images and the block's side; every group's tiles read consecutive columns
    (the tile columns of a group are its first's plus cols each) or all only padding."""
    g = conv.b_group(batch, cols, side)
    assert g == want and side % g == 0
    if batch % cols:
        return
    assert (batch // cols) % g == 0
    geo = ConvGeometry(batch, 2, 5, 4, 3, 3, stride=1, padding=1)
    cols_of = conv.tile_columns(geo, 1, cols)
    for t0 in range(0, len(cols_of), g):
        group = cols_of[t0:t0 + g]
        for off in range(group.shape[1]):
            c = group[:, off]
            assert (c == -1).all() or (c == c[0] + cols * np.arange(len(c))).all()


@pytest.mark.parametrize("args, error", [((0, 8, 8), ValueError), ((8, -8, 8), ValueError),
                                         ((32, 8, 1.5), TypeError)])
def test_b_group_refuses(args, error):
    with pytest.raises(error):
        conv.b_group(*args)


def test_position_runs_random():
    rng = np.random.default_rng(11)
    for _ in range(200):
        block = int(rng.choice([4, 8]))
        k = int(rng.integers(1, 40))
        idx = rng.integers(0, 60, k)
        idx[rng.random(k) < 0.3] = -1
        want, start, last = [], 0, -1
        for p in range(k + 1):
            if p > start and (p == k or p % block == 0 or (idx[p] >= 0 and last >= 0
                                                           and idx[p] // block != last)):
                want.append((start, p, last))
                start, last = p, -1
            if p < k and idx[p] >= 0:
                last = idx[p] // block
        assert conv.position_runs(idx, block=block) == want


# --------------------------------------------------------------------------- against torch

def _torch(a):
    return torch.from_numpy(np.ascontiguousarray(a, np.float64))


@pytest.mark.parametrize("seed", SEEDS)
def test_against_torch_float64(seed):
    rng = np.random.default_rng(500 + seed)
    block = 8
    g = _geometry(rng)
    x, w, d = _operands(rng, g, block)
    xt = conv.activation_tensor(dequantize_tiles(*x, block=block), g.batch, g.height, g.width)
    wt = conv.weight_tensor(np.stack([dequantize_tiles(w[0][o], w[1][o], block=block)
                                      for o in range(len(g.offsets))]), g.kernel)
    dt = conv.activation_tensor(dequantize_tiles(*d, block=block), g.batch, g.out_height,
                                g.out_width)
    kw = dict(stride=g.stride, padding=g.padding, dilation=g.dilation)
    out_pad = tuple((size + 2 * p - r * (k - 1) - 1) % s for size, p, r, k, s in
                    zip((g.height, g.width), g.padding, g.dilation, g.kernel, g.stride,
                        strict=True))

    def grads(xa, wa, da):
        xv, wv = _torch(xa).requires_grad_(), _torch(wa).requires_grad_()
        y = F.conv2d(xv, wv, **kw)
        y.backward(_torch(da))
        dx = F.conv_transpose2d(_torch(da), _torch(wa), output_padding=out_pad, **kw)
        assert torch.allclose(dx, xv.grad)
        return y.detach().numpy(), dx.numpy(), wv.grad.numpy()

    exact = grads(xt, wt, dt)
    scale = grads(np.abs(xt), np.abs(wt), np.abs(dt))
    runs = max(len(g.offsets) * -(-max(g.channels, g.out_channels) // block),
               max(len(g.weight_grad_runs(*o, block=block)) for o in g.offsets))
    tol = [(runs + 1) * 2.0**-24 * s + 2.0**-140 for s in scale]
    got = (conv.activation_tensor(conv.conv2d_forward(*x, *w, g, block=block),
                                  g.batch, g.out_height, g.out_width),
           conv.activation_tensor(conv.conv2d_backward_data(*d, *w, g, block=block),
                                  g.batch, g.height, g.width),
           conv.weight_tensor(conv.conv2d_weight_grad(*d, *x, g, block=block), g.kernel))
    for name, a, e, t in zip(("forward", "backward-data", "weight-grad"), got, exact, tol,
                             strict=True):
        assert a.shape == e.shape, name
        assert (np.abs(a.astype(np.float64) - e) <= t).all(), name


# --------------------------------------------------------------------------- seeded bugs

def test_seeded_bug_unrotated_kernel_fails(monkeypatch):
    """Reading the deltas with the kernel not rotated (a wrong flip) must be caught."""
    rng = np.random.default_rng(7)
    block = 4
    g = ConvGeometry(2, 5, 7, 6, 6, 3, padding=1)
    x, w, d = _operands(rng, g, block)
    ref = _backward_data_ref(g, d, w, block)
    assert _same(conv.conv2d_backward_data(*d, *w, g, block=block), ref)
    original = ConvGeometry.output_index
    monkeypatch.setattr(ConvGeometry, "output_index", lambda self, dy, dx: original(
        self, self.kernel[0] - 1 - dy, self.kernel[1] - 1 - dx))
    assert not _same(conv.conv2d_backward_data(*d, *w, g, block=block), ref)


def test_seeded_bug_uncut_straddle_fails(monkeypatch):
    """Weight-gradient runs cut at T only (a straddle read with one tile's exponent) must
    be caught."""
    rng = np.random.default_rng(8)
    block = 4
    g = ConvGeometry(3, 5, 7, 6, 6, 3, padding=1)
    x, _, d = _operands(rng, g, block)
    ref = _weight_grad_ref(g, d, x, block)
    assert _same(conv.conv2d_weight_grad(*d, *x, g, block=block), ref)

    def uncut(idx, *, block=32):
        out = []
        for s in range(0, len(idx), block):
            seg = idx[s:s + block]
            t = int(seg[seg >= 0][0] // block) if (seg >= 0).any() else -1
            out.append((s, min(s + block, len(idx)), t))
        return out

    monkeypatch.setattr(conv, "position_runs", uncut)
    assert not _same(conv.conv2d_weight_grad(*d, *x, g, block=block), ref)


# --------------------------------------------------------------------------- pooling

def _pool_data(rng, n, c, h, w, ties=False):
    x = _values(rng, (n, c, h, w), spread=2.0)
    if ties:                                  # few distinct values: many ties, and zeros
        x = np.round(x).astype(np.float32)
        x[x == 0] = np.float32(-0.0)
    return x


@pytest.mark.parametrize("k,s,dil", [(2, 2, 1), (3, 2, 1), (3, 1, 1), (2, 1, 2), (3, 3, 1)])
def test_max_pool(k, s, dil):
    rng = np.random.default_rng(k * 100 + s * 10 + dil)
    n, c, h, w = 3, 4, 9, 8
    g = conv.pool_geometry(n, c, h, w, k, s, dil)
    for ties in (False, True):
        xt = _pool_data(rng, n, c, h, w, ties)
        x = conv.activation_matrix(xt)
        y, arg = conv.max_pool(x, g)
        ref = F.max_pool2d(_torch(xt), k, s, dilation=dil).numpy()
        assert np.array_equal(conv.activation_tensor(y, n, g.out_height, g.out_width), ref)
        # the first maximum in row-major window order
        wins = np.stack([x[:, g.input_index(dy, dx)] for dy, dx in g.offsets])
        first = np.argmax(wins == wins.max(axis=0), axis=0)
        assert np.array_equal(arg, first.astype(np.uint8))
        dy = _values(rng, y.shape)
        dx = conv.max_pool_backward(dy, arg, g)
        want = np.zeros(x.shape, np.float32)
        for i, (oy, ox) in enumerate(g.offsets):
            idx = g.input_index(oy, ox)
            for p in range(y.shape[1]):
                sel = arg[:, p] == i
                want[sel, idx[p]] = want[sel, idx[p]] + dy[sel, p]
        assert _same(dx, want)
        if not ties and k <= s:              # torch's gradient: to the (unique) maximum
            xv = _torch(xt).requires_grad_()
            F.max_pool2d(xv, k, s, dilation=dil).backward(
                _torch(conv.activation_tensor(dy, n, g.out_height, g.out_width)))
            assert np.array_equal(conv.activation_tensor(dx, n, h, w), xv.grad.numpy())


@pytest.mark.parametrize("k,s", [(2, 2), (3, 2), (3, 1)])
def test_avg_pool(k, s):
    rng = np.random.default_rng(k * 10 + s)
    n, c, h, w = 2, 3, 7, 9
    g = conv.pool_geometry(n, c, h, w, k, s)
    xt = _pool_data(rng, n, c, h, w)
    x = conv.activation_matrix(xt)
    y = conv.avg_pool(x, g)
    r = np.float32(1) / np.float32(k * k)
    acc = np.zeros(y.shape, np.float32)
    for dy, dx in g.offsets:
        acc = acc + x[:, g.input_index(dy, dx)]
    assert _same(y, acc * r)
    ref = F.avg_pool2d(_torch(xt), k, s).numpy()
    bound = (k * k + 2) * 2.0**-24 * F.avg_pool2d(_torch(np.abs(xt)), k, s).numpy()
    got = conv.activation_tensor(y, n, g.out_height, g.out_width).astype(np.float64)
    assert (np.abs(got - ref) <= bound).all()
    dyv = _values(rng, y.shape)
    dx = conv.avg_pool_backward(dyv, g)
    xv = _torch(xt).requires_grad_()
    F.avg_pool2d(xv, k, s).backward(_torch(conv.activation_tensor(dyv, n, g.out_height,
                                                                  g.out_width)))
    xa = _torch(xt).requires_grad_()
    F.avg_pool2d(xa, k, s).backward(_torch(np.abs(conv.activation_tensor(
        dyv, n, g.out_height, g.out_width))))
    bound = (k * k + 2) * 2.0**-24 * xa.grad.numpy()
    assert (np.abs(conv.activation_tensor(dx, n, h, w) - xv.grad.numpy()) <= bound).all()
    if k == s == 2:                          # 1/4 and the single contribution are exact
        assert np.array_equal(conv.activation_tensor(dx, n, h, w)[:, :, :6, :8],
                              xv.grad.numpy()[:, :, :6, :8].astype(np.float32))


def test_global_avg_pool():
    rng = np.random.default_rng(3)
    n, c, h, w = 5, 6, 4, 4
    xt = _pool_data(rng, n, c, h, w)
    x = conv.activation_matrix(xt)
    y = conv.global_avg_pool(x, n, h, w)
    assert y.shape == (c, n)
    acc = np.zeros((c, n), np.float32)
    for pos in range(h * w):                 # positions in stored order, whole batches
        acc = acc + x[:, pos * n:(pos + 1) * n]
    assert _same(y, acc * np.float32(1 / 16))
    assert np.allclose(y.T, xt.astype(np.float64).mean(axis=(2, 3)), rtol=2.0**-19)
    dy = _values(rng, (c, n))
    dx = conv.global_avg_pool_backward(dy, n, h, w)
    assert _same(dx, np.tile(dy * np.float32(1 / 16), (1, h * w)))


# --------------------------------------------------------------------------- layouts, errors

def test_layouts_round_trip():
    rng = np.random.default_rng(0)
    x = _values(rng, (2, 3, 4, 5))
    m = conv.activation_matrix(x)
    assert m[1, (2 * 5 + 3) * 2 + 1] == x[1, 1, 2, 3]
    assert np.array_equal(conv.activation_tensor(m, 2, 4, 5), x)
    w = _values(rng, (4, 3, 2, 5))
    s = conv.weight_stack(w)
    assert s[1 * 5 + 3, 2, 1] == w[2, 1, 1, 3]
    assert np.array_equal(conv.weight_tensor(s, (2, 5)), w)


def test_index_maps_are_inverse():
    g = ConvGeometry(3, 2, 9, 7, 2, (3, 2), stride=2, padding=(2, 1), dilation=(1, 2))
    for dy, dx in g.offsets:
        fwd, back = g.input_index(dy, dx), g.output_index(dy, dx)
        for p, q in enumerate(fwd):
            if q >= 0:
                assert back[q] == p
        assert ((back < 0) | (fwd[np.maximum(back, 0)] == np.arange(g.positions))).all()


@pytest.mark.parametrize("kwargs,name", [
    (dict(batch=0), "batch"), (dict(channels=-1), "channels"), (dict(height=0), "height"),
    (dict(out_channels=0), "out_channels"), (dict(kernel=0), "kernel"),
    (dict(kernel=(3, 3, 3)), "kernel"), (dict(stride=0), "stride"),
    (dict(padding=-1), "padding"), (dict(dilation=(1, 0)), "dilation"),
    (dict(kernel=6), "height"), (dict(kernel=(1, 4), dilation=3), "width"),
])
def test_geometry_value_errors(kwargs, name):
    args = dict(batch=2, channels=3, height=5, width=6, out_channels=4, kernel=3)
    args.update(kwargs)
    with pytest.raises(ValueError, match=name):
        ConvGeometry(**args)


def test_geometry_type_errors():
    with pytest.raises(TypeError, match="batch"):
        ConvGeometry(2.0, 3, 5, 5, 4, 3)
    with pytest.raises(TypeError, match="stride"):
        ConvGeometry(2, 3, 5, 5, 4, 3, stride=True)
    with pytest.raises(ValueError, match="dy"):
        ConvGeometry(2, 3, 5, 5, 4, 3).input_index(3, 0)


def test_gemm_argument_errors():
    rng = np.random.default_rng(1)
    g = ConvGeometry(2, 3, 5, 5, 4, 3, padding=1)
    x, w, d = _operands(rng, g, 32)
    with pytest.raises(ValueError, match="x must have shape"):
        conv.conv2d_forward(x[0][:, 1:], x[1], *w, g)
    with pytest.raises(ValueError, match="w_exp"):
        conv.conv2d_forward(*x, w[0], w[1][:, :, :0], g)
    with pytest.raises(TypeError, match="x must have dtype int8"):
        conv.conv2d_forward(x[0].astype(np.int16), x[1], *w, g)
    with pytest.raises(ValueError, match="d must have shape"):
        conv.conv2d_backward_data(d[0][:1], d[1], *w, g)
    with pytest.raises(TypeError, match="geometry"):
        conv.conv2d_weight_grad(*d, *x, (2, 3, 5, 5))
    with pytest.raises(ValueError, match="block"):
        conv.conv2d_weight_grad(*d, *x, g, block=3)
    pool = conv.pool_geometry(2, 3, 4, 4, 2)
    with pytest.raises(ValueError, match="padding"):
        conv.max_pool(np.zeros((3, 32), np.float32), ConvGeometry(2, 3, 4, 4, 3, 2, padding=1))
    with pytest.raises(ValueError, match="out_channels"):
        conv.avg_pool(np.zeros((3, 32), np.float32), ConvGeometry(2, 3, 4, 4, 4, 2))
    with pytest.raises(ValueError, match="argmax"):
        conv.max_pool_backward(np.zeros((3, 8), np.float32), np.zeros((3, 7), np.uint8), pool)
    with pytest.raises(TypeError, match="x must have dtype float32"):
        conv.max_pool(np.zeros((3, 32)), pool)
    with pytest.raises(ValueError, match="height"):
        conv.global_avg_pool(np.zeros((3, 32), np.float32), 2, 0, 4)


def test_quantize_stack_rows_are_stack_rows():
    """A stack whose matrices fill whole tile rows quantises as its matrices one above the
    other: each matrix's random bits are those of its rows in the stack, its grid its own."""
    rng = np.random.default_rng(8)
    x = (rng.standard_normal((3, 16, 20)) * 2.0 ** rng.integers(-4, 4, (3, 16, 1))).astype(
        np.float32)
    q, e = conv.quantize_stack(x, block=8, rounding="stochastic", seed=99)
    q1, e1 = quantize_tiles(x.reshape(48, 20), block=8, rounding="stochastic", seed=99)
    np.testing.assert_array_equal(q.reshape(48, 20), q1)
    np.testing.assert_array_equal(e.reshape(6, 3), e1)
    np.testing.assert_array_equal(conv.dequantize_stack(q, e, block=8),
                                  dequantize_tiles(q1, e1, block=8).reshape(x.shape))
    # a matrix of 10 rows: its own grid, not its neighbour's tile rows
    q, e = conv.quantize_stack(x[:, :10], block=8, rounding="nearest")
    assert e.shape == (3, 2, 3)
    np.testing.assert_array_equal(q[1], quantize_tiles(x[1, :10], block=8)[0])


def test_conv_epilogue_stages():
    """The write path's order: the pool after ReLU (the mask its input's), the unpool before
    the mask (the mask and the result the pool's input's)."""
    rng = np.random.default_rng(9)
    g = conv.pool_geometry(2, 3, 4, 6, 2)
    c = rng.standard_normal((3, g.positions)).astype(np.float32)
    bias = rng.standard_normal(3).astype(np.float32)
    r = conv.conv_epilogue(c, bias=bias, relu=True, pool_out=conv.Pooling("max", g))
    v = np.maximum(c + bias[:, None], 0)
    y, arg = conv.max_pool(v, g)
    np.testing.assert_array_equal(r.value, y)
    np.testing.assert_array_equal(r.argmax, arg)
    np.testing.assert_array_equal(r.mask, c + bias[:, None] > 0)
    d = rng.standard_normal((3, g.out_positions)).astype(np.float32)
    b = conv.conv_epilogue(d, mask_in=r.mask, unpool_in=conv.Pooling("max", g),
                           argmax=r.argmax, out="bfp8", block=8)
    want = np.where(r.mask, conv.max_pool_backward(d, arg, g), 0)
    np.testing.assert_array_equal(b.value, want)
    np.testing.assert_array_equal(b.q, quantize_tiles(want, block=8)[0])
    a = conv.conv_epilogue(d, unpool_in=conv.Pooling("avg", g))
    np.testing.assert_array_equal(a.value, conv.avg_pool_backward(d, g))
    with pytest.raises(ValueError, match="one pooling stage"):
        conv.conv_epilogue(c, pool_out=conv.Pooling("max", g), unpool_in=conv.Pooling("max", g))
    with pytest.raises(ValueError, match="argmax is needed"):
        conv.conv_epilogue(d, unpool_in=conv.Pooling("max", g))


@pytest.mark.parametrize("seed", range(6))
def test_implicit_gemm_counts_the_valid_products(seed):
    """Forward and backward-data skip the same products (each valid (input, output, offset)
    triple is one Cin x Cout product either way); the weight gradient skips none."""
    rng = np.random.default_rng(seed)
    k = int(rng.integers(1, 6))
    g = ConvGeometry(int(rng.integers(1, 4)), int(rng.integers(1, 5)), int(rng.integers(k, 12)),
                     int(rng.integers(k, 12)), int(rng.integers(1, 5)), k,
                     stride=int(rng.integers(1, 3)), padding=int(rng.integers(0, 3)))
    valid = sum(int((g.input_index(dy, dx) >= 0).sum()) for dy, dx in g.offsets)
    fwd, bwd, wgt = (g.implicit_gemm(mode) for mode in (1, 2, 3))
    assert fwd[3] == bwd[3] == valid * g.channels * g.out_channels
    assert wgt == (g.out_channels, len(g.offsets) * g.channels, g.out_positions,
                   g.out_channels * len(g.offsets) * g.channels * g.out_positions)
    assert fwd[:2] == (g.out_channels, g.out_positions) and bwd[:2] == (g.channels, g.positions)
    for m, n, kk, macs in (fwd, bwd):
        assert (kk - 1) * m * n < macs <= kk * m * n


def test_k_runs_are_the_golden_models_rescales():
    """A tile's K runs (what the engine walks and the performance model counts): one per
    kernel offset and block of 32 channels, forward the input's and backward-data the
    output's, as conv2d_forward and conv2d_backward_data rescale them; every offset, those
    over padding too (the walker loads zero rows for them), though the products leave
    them out."""
    g = ConvGeometry(4, 40, 9, 9, 3, 3, padding=1)
    _, _, _, macs = g.implicit_gemm(1)
    assert macs < 9 * 3 * g.out_positions * 40      # (7.9 of 9 offsets inside 9 x 9)
    assert g.k_runs(1) == (32, 8) * 9
    assert g.k_runs(2) == (3,) * 9
    assert ConvGeometry(2, 1, 28, 28, 32, 3, padding=1).k_runs(1) == (1,) * 9
    assert ConvGeometry(2, 64, 4, 4, 8, 1).k_runs(1, block=16) == (16,) * 4
    with pytest.raises(ValueError, match="mode must be 1 or 2"):
        g.k_runs(3)


def test_walked_offsets_skip_what_no_tile_of_a_block_reads():
    """The kernel offsets a block walks: the first and the last always, and each between
    them where a tile of the block reads B. A fully connected layer over a 5 x 5 image
    backward (a 1 x 1 image of deltas under a 5 x 5 kernel, padded by 4) reads B at one
    offset per position, the first position's the last offset and the last one's the
    first: a block of one position walks three of 25, one of two positions four (the last
    block holds one). A 3 x 3 layer on 8 x 8 skips offsets only at the image's edge."""
    from sim.models.conv import tile_columns, walked_offsets
    fc = ConvGeometry(32, 8, 5, 5, 16, 5)
    w = walked_offsets(fc, 2, 8, 4)
    assert [sum(b) for b in w] == [2] + [3] * 23 + [2]
    w = walked_offsets(fc, 2, 8, 8)
    assert [sum(b) for b in w] == [3] + [4] * 11 + [2]
    assert all(b[0] and b[-1] for b in w)
    assert walked_offsets(fc, 1, 8, 4) == ((True,) * 25,)      # (its forward: all inside)
    g = ConvGeometry(16, 4, 8, 8, 4, 3, padding=1)
    for mode in (1, 2):
        w = walked_offsets(g, mode, 8, 2)
        inside = tile_columns(g, mode, 8) >= 0
        for b, flags in enumerate(w):
            want = inside[2 * b:2 * b + 2].any(axis=0)
            want[0] = want[-1] = True
            assert flags == tuple(want)
        # (a block a position: the 28 at the edge skip two offsets each, the first and the
        # last walked always; the corners one or two more)
        assert sum(f.count(False) for f in w) == 28 * 2 + 2 + 1 + 1 + 2
    with pytest.raises(ValueError, match="side"):
        walked_offsets(g, 1, 8, 0)
    with pytest.raises(ValueError, match="mode"):
        walked_offsets(g, 3, 8, 2)


def test_weight_grad_beyond_max_k_continues_one_float32_sum():
    """A weight gradient over more output positions than one int32 partial may take
    (MAX_K): computed in calls of whole runs, the float32 sum continued from call to call,
    it equals the runs added one at a time."""
    from sim.models.bfp import gemm_kruns
    from sim.models.golden import MAX_K
    g = ConvGeometry(128, 2, 33, 33, 3, 1)
    assert g.out_positions > MAX_K
    rng = np.random.default_rng(4)
    d, x = (rng.integers(-127, 128, (c, g.out_positions), dtype=np.int8) for c in (3, 2))
    de, xe = (rng.integers(-20, 5, (1, g.out_positions // 32), dtype=np.int8).repeat(r, 0)
              for r in (1, 1))
    got = conv.conv2d_weight_grad(d, de, x, xe, g)[0]
    want = np.zeros((3, 2), np.float32)
    for j, start in enumerate(range(0, g.out_positions, 32)):
        s = slice(start, start + 32)
        want = want + gemm_kruns(d[:, s], np.repeat(de[:, j:j + 1], 3, 0), x[:, s],
                                 np.repeat(xe[:, j:j + 1], 2, 1), [32],
                                 transpose_b=True)
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))
