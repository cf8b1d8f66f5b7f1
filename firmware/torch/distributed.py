"""Data-parallel training over several accelerators with ``torch.distributed``.

Each process owns one :class:`firmware.Device` (one board, or one simulator) and a
contiguous share of every global batch; after ``loss.backward()`` the gradients are combined
across the processes (summed, then scaled by ``1 / world_size``) and every process takes the
same optimiser step, so the weights stay identical everywhere.

.. code-block:: python

    import torch.distributed as dist
    from firmware.torch.distributed import shard, reduce_gradients, broadcast_parameters

    dist.init_process_group("gloo")               # torchrun sets RANK, WORLD_SIZE, MASTER_*
    accel = ft.Accel(Device("pynq", board="zcu104"), per_sample=True, seed=0)
    model = ...; broadcast_parameters(model)
    opt = ft.SGD(model.parameters(), lr=0.05, seed=0)          # the same seed everywhere
    for xb, yb in batches:                                       # the global batch
        x, y = shard(accel, xb, yb)                              # this process's share
        opt.zero_grad()
        F.cross_entropy(model(x), y).backward()
        reduce_gradients(model, exact=True)
        opt.step()

Two ways to combine the gradients:

* ``exact=False``: one ``all_reduce`` (SUM) of the float32 gradients, then the scaling -- an
  ordinary data-parallel step (``torch.nn.parallel.DistributedDataParallel`` does the same).
  Every process ends with the same weights, but not bit for bit those of one process with
  the whole batch: the float32 partial gradients are rounded per process and summed in the
  all-reduce's order.
* ``exact=True`` (needs :class:`firmware.torch.Accel` with ``per_sample=True`` on every
  converted layer): the same weights bit for bit as one process training on the whole batch
  with the same ``Accel`` settings, when the batch is split into contiguous shares in rank
  order (:func:`shard`) and ``world_size`` is a power of two (or the loss is a sum scaled by
  the global batch size and ``scale=1``). Why this holds:

  - With per-sample blocks (``"sample"`` / ``"row"``) for activations and deltas, every
    forward and backward-data GEMM row belongs to one sample, with that sample's exponents
    only, and its int32 accumulation is exact: a sample's activations and deltas do not
    depend on the others. (Blocks over the whole batch -- ``"tensor"``, ``"channel"`` -- are
    computed from the whole batch, so they cannot be split; ``per_sample`` refuses them.)
  - Stochastic rounding draws for a sample's ``x̄`` and ``δ̄`` come from a stream keyed by
    (seed, layer, step, global sample index), and the weights' ``W̄`` from one keyed by
    (seed, layer, step): the same draws whatever process the sample lands on.
  - The weight gradient is ``Σ_r float64(P_r) 2**e_r`` over the maximal runs of equal
    per-sample exponents along the batch, added in float64 **in order** and rounded once
    (:func:`sim.models.golden.gemm_scaled`, the Device's own ``k_exp`` semantics). Float64
    addition is not associative, so the processes cannot add their own partial sums and
    all-reduce them: instead the running float64 sum is passed along the ranks in order
    (rank 0 -> 1 -> ... -> the last), each adding its runs' exact int32 partials, a run
    that continues across the boundary merged exactly first; the last rank rounds to
    float32 and broadcasts. The bias gradient is summed the same way, in float64 per sample
    in sample order.
  - Each process's mean loss divides by its own batch size ``b`` instead of ``N = W b``; for
    a power-of-two ``W`` this scales every delta by exactly ``W`` (as the exponents do), and
    the final ``1 / W`` undoes it exactly (barring float32 underflow).

  What is *not* exact: layers that are not :class:`~firmware.torch.Linear` /
  :class:`~firmware.torch.Conv2d` (their float32 gradients are all-reduced, with a warning),
  batch statistics (``BatchNorm``), a layer called more than once per step, unequal or
  non-contiguous shares, and ``world_size`` not a power of two with a mean loss. The ordered
  sum is sequential across the processes (the GEMMs run in parallel, the float64 additions
  one process after another).
"""

from __future__ import annotations

import warnings

import numpy as np
import torch
import torch.distributed as dist

from firmware.torch import Accel, Conv2d, Linear, _ordered_sum, _Sum

__all__ = ["shard", "reduce_gradients", "broadcast_parameters"]


def _world() -> tuple[int, int]:
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def shard(accel: Accel | None, *tensors: torch.Tensor, rank: int | None = None,
          world_size: int | None = None):
    """This process's contiguous share of a global batch (split along dim 0 in rank order,
    as ``torch.tensor_split``), and ``accel.sample_offset`` set to its first sample's global
    index.

    Parameters
    ----------
    accel : firmware.torch.Accel or None
        Its ``sample_offset`` is set (``None``: nothing to set).
    *tensors : torch.Tensor
        The global batch (the same on every process), equally long along dim 0.
    rank, world_size : int, optional
        Default: the initialised process group's (0 and 1 without one).

    Returns
    -------
    torch.Tensor or tuple of torch.Tensor
        One share per tensor (a single tensor when one was given).
    """
    if accel is not None and not isinstance(accel, Accel):
        raise TypeError(f"accel must be a firmware.torch.Accel or None, not "
                        f"{type(accel).__name__}")
    if not tensors:
        raise ValueError("shard needs at least one tensor")
    r, w = _world()
    rank = r if rank is None else rank
    world_size = w if world_size is None else world_size
    if not isinstance(world_size, int) or world_size < 1:
        raise ValueError(f"world_size must be a positive int, not {world_size!r}")
    if not isinstance(rank, int) or not 0 <= rank < world_size:
        raise ValueError(f"rank must be an int in [0, {world_size}), not {rank!r}")
    n = len(tensors[0])
    for t in tensors:
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"tensors must be torch.Tensor, not {type(t).__name__}")
        if len(t) != n:
            raise ValueError(f"tensors must have the same length along dim 0, not {n} and "
                             f"{len(t)}")
    if n < world_size:
        raise ValueError(f"a batch of {n} cannot be shared by {world_size} processes")
    sizes = [n // world_size + (r < n % world_size) for r in range(world_size)]
    bounds = np.cumsum([0] + sizes)                     # as torch.tensor_split
    start, stop = int(bounds[rank]), int(bounds[rank + 1])
    if accel is not None:
        accel.sample_offset = start
    out = tuple(t[start:stop] for t in tensors)
    return out[0] if len(out) == 1 else out


def broadcast_parameters(model: torch.nn.Module, src: int = 0) -> None:
    """Copy rank ``src``'s parameters and buffers to every process."""
    if _world()[1] == 1:
        return
    with torch.no_grad():
        for t in list(model.parameters()) + list(model.buffers()):
            dist.broadcast(t.data, src)


def _layers(model):
    return [m for m in model.modules() if isinstance(m, (Linear, Conv2d))]


def reduce_gradients(model: torch.nn.Module, *, exact: bool = False,
                     scale: float | None = None) -> None:
    """Sum the gradients of ``model`` over the processes and scale them (in place).

    Parameters
    ----------
    model : torch.nn.Module
    exact : bool
        ``False``: float32 ``all_reduce``. ``True``: the ordered reduction (module
        documentation) -- needs every converted layer on an ``Accel(per_sample=True)`` and
        one backward pass per layer since the last forward.
    scale : float, optional
        Applied after the sum; default ``1 / world_size``.

    Raises
    ------
    TypeError
        ``model`` is not a module, or ``exact`` / ``scale`` of the wrong type.
    ValueError
        ``exact=True`` with a layer not in ``per_sample`` int8 mode, or whose backward ran
        other than once.
    """
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, not {type(model).__name__}")
    if not isinstance(exact, bool):
        raise TypeError(f"exact must be a bool, not {type(exact).__name__}")
    if scale is not None and (not isinstance(scale, (int, float)) or isinstance(scale, bool)):
        raise TypeError(f"scale must be a number or None, not {type(scale).__name__}")
    rank, world = _world()
    scale = 1.0 / world if scale is None else float(scale)
    if not exact:
        params = [p for p in model.parameters() if p.grad is not None]
        _allreduce([p.grad for p in params], scale, world)
        return
    layers = _layers(model)
    for m in layers:
        if m.precision != "int8" or not m.accel.per_sample:
            raise ValueError(f"exact=True needs every layer in int8 mode on an "
                             f"Accel(per_sample=True); {m!r} is not")
    owned = {id(p) for m in layers for p in (m.weight, m.bias) if p is not None}
    others = [p for p in model.parameters() if id(p) not in owned and p.grad is not None]
    if others:
        warnings.warn(f"{len(others)} parameter(s) outside firmware.torch layers: their "
                      f"gradients are all-reduced in float32 (not exact)", RuntimeWarning,
                      stacklevel=2)
        _allreduce([p.grad for p in others], scale, world)
    work = []                            # (param, kind, terms[, re, ce]) in a fixed order
    for m in layers:
        terms = {t[0]: t for t in m._terms}
        if len(terms) != len(m._terms):
            raise ValueError(f"exact=True: the backward pass of {m!r} ran more than once "
                             f"since its forward pass (a layer called twice per step)")
        for name, p in (("weight", m.weight), ("bias", m.bias)):
            if p is None or p.grad is None:
                continue
            if name not in terms:
                raise ValueError(f"exact=True: {m!r} has a {name} gradient but no terms: "
                                 f"was it trained in train() mode with per_sample?")
            work.append((p, terms[name]))
        m._terms = []
    _ordered_reduce(work, rank, world, scale)


def _allreduce(grads, scale, world):
    if not grads:
        return
    if world > 1:
        flat = torch.cat([g.reshape(-1).to(torch.float32) for g in grads])
        dist.all_reduce(flat, op=dist.ReduceOp.SUM)
        i = 0
        for g in grads:
            g.copy_(flat[i:i + g.numel()].reshape(g.shape))
            i += g.numel()
    if scale != 1.0:
        for g in grads:
            g.mul_(scale)


def _ordered_reduce(work, rank, world, scale):
    """Pass the running float64 sums from rank to rank; the last rounds and broadcasts."""
    sums = []
    for _, term in work:
        if term[0] == "weight":
            _, terms, re, ce = term
            s = _Sum((len(re), len(ce)), re, ce)
            sums.append(("weight", s, terms))
        else:
            sums.append(("bias", np.zeros(term[1].shape[1]), term[1]))
    if rank > 0:                         # the running sums so far, from the previous rank
        shapes = [(s.total.shape if k == "weight" else s.shape) for k, s, _ in sums]
        sizes = [int(np.prod(sh)) for sh in shapes]
        nw = sum(sz for (k, _, _), sz in zip(sums, sizes, strict=True) if k == "weight")
        f = torch.empty(sum(sizes), dtype=torch.float64)
        i = torch.empty(nw + 2 * len(sums), dtype=torch.int64)
        dist.recv(f, rank - 1)
        dist.recv(i, rank - 1)
        f, i = f.numpy(), i.numpy()
        fo = io = 0
        for j, ((kind, s, _), sh, sz) in enumerate(zip(sums, shapes, sizes, strict=True)):
            if kind == "weight":
                s.total[...] = f[fo:fo + sz].reshape(sh)
                has, e = i[2 * j], i[2 * j + 1]
                if has:
                    s.pending, s.pending_e = i[io + 2 * len(sums):io + 2 * len(sums) + sz] \
                        .reshape(sh).copy(), int(e)
                io += sz
            else:
                s[...] = f[fo:fo + sz]
            fo += sz
    done = []
    for kind, s, terms in sums:
        if kind == "weight":
            s.add(terms)
            done.append((kind, s))
        else:
            done.append((kind, _ordered_sum(s, terms)))
    if rank < world - 1:
        fparts, pend, heads = [], [], []
        for kind, s in done:
            if kind == "weight":
                fparts.append(s.total.reshape(-1))
                has = s.pending is not None
                heads += [int(has), s.pending_e if has else 0]
                pend.append(s.pending.reshape(-1) if has else np.zeros(s.total.size, np.int64))
            else:
                fparts.append(s)
                heads += [0, 0]
        dist.send(torch.from_numpy(np.concatenate(fparts)), rank + 1)
        dist.send(torch.from_numpy(np.concatenate(
            [np.array(heads, np.int64)] + pend).astype(np.int64)), rank + 1)
    grads = []
    for (kind, s), (p, _) in zip(done, work, strict=True):
        if rank == world - 1:
            if kind == "weight":
                s.flush()
                total = s.total
            else:
                total = s
            g = (total * scale).astype(np.float32)            # rounded once, after scaling
            g = g.T.reshape(p.shape) if kind == "weight" else g
            grads.append(torch.from_numpy(np.ascontiguousarray(g)))
        else:
            grads.append(torch.empty(p.shape, dtype=torch.float32))
    if world > 1:
        flat = torch.cat([g.reshape(-1) for g in grads])
        dist.broadcast(flat, world - 1)
        i = 0
        for g in grads:
            g.copy_(flat[i:i + g.numel()].reshape(g.shape))
            i += g.numel()
    for g, (p, _) in zip(grads, work, strict=True):
        p.grad.copy_(g.to(p.grad.dtype))
