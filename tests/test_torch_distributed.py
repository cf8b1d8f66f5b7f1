"""Data-parallel training with torch.distributed (gloo over TCP on localhost): processes that
each own a golden Device and a share of the batch end with the weights of one process that
trains on the whole batch, bit for bit, with the ordered reduction (exact=True)."""

import os
import socket

import pytest

torch = pytest.importorskip("torch", reason="PyTorch is the optional extra 'torch': "
                                            "pip install -e '.[torch]'")
dist = pytest.importorskip("torch.distributed")
if not (dist.is_available() and dist.is_gloo_available()):
    pytest.skip("torch.distributed with gloo is not available", allow_module_level=True)

import torch.multiprocessing as mp  # noqa: E402

import firmware.torch as ft  # noqa: E402
from firmware import Device  # noqa: E402
from firmware.torch.distributed import (  # noqa: E402
    broadcast_parameters,
    reduce_gradients,
    shard,
)

F = torch.nn.functional
BATCH, STEPS = 8, 3


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _train(exact: bool, blocks: str = "fox"):
    """Three steps of a small CNN on this process's share of each global batch."""
    accel = ft.Accel(Device("golden"), seed=1, per_sample=exact, blocks=blocks)
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        ft.Conv2d(1, 4, 3, padding=1, accel=accel), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Flatten(), ft.Linear(4 * 4 * 4, 16, accel=accel), torch.nn.ReLU(),
        ft.Linear(16, 5, accel=accel))
    broadcast_parameters(model)
    opt = ft.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4, seed=2)
    g = torch.Generator().manual_seed(3)
    for _ in range(STEPS):
        x = torch.randn(BATCH, 1, 8, 8, generator=g)
        x[::3] *= 16                          # samples of other exponents
        y = torch.randint(0, 5, (BATCH,), generator=g)
        xs, ys = shard(accel, x, y)
        opt.zero_grad()
        F.cross_entropy(model(xs), ys).backward()
        reduce_gradients(model, exact=exact)
        opt.step()
    return [p.detach().clone() for p in model.parameters()]


def _worker(rank, world, port, exact, blocks, out):
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world)
    try:
        torch.save(_train(exact, blocks), os.path.join(out, f"{rank}.pt"))
    finally:
        dist.destroy_process_group()


def _spawn(world, exact, tmp_path, blocks="fox"):
    # a fork server imports torch once for every test's processes (spawn: once per process)
    mp.get_context("forkserver").set_forkserver_preload(["torch", __name__])
    mp.start_processes(_worker, args=(world, _free_port(), exact, blocks, str(tmp_path)),
                       nprocs=world, join=True, start_method="forkserver")
    return [torch.load(tmp_path / f"{r}.pt") for r in range(world)]


def _same(a, b):
    return all(u.dtype == v.dtype and torch.equal(u, v) for u, v in zip(a, b, strict=True))


@pytest.mark.parametrize("world, blocks", [(2, "fox"), (4, "fox"), (2, "channel,row,row")])
def test_exact_data_parallel_equals_one_process(tmp_path, world, blocks):
    single = _train(exact=True, blocks=blocks)
    ranks = _spawn(world, True, tmp_path, blocks)
    for weights in ranks:
        assert _same(weights, single)


def test_all_reduce_keeps_the_processes_together(tmp_path):
    """exact=False: an ordinary float32 all-reduce -- every process has the same weights,
    close to (not bit for bit) one process's."""
    single = _train(exact=False)
    ranks = _spawn(2, False, tmp_path)
    assert _same(ranks[0], ranks[1])
    for u, v in zip(ranks[0], single, strict=True):
        assert (u - v).abs().max() <= 0.1 * v.abs().max()


def test_one_process_without_a_group_is_plain_training():
    """reduce_gradients without a process group changes nothing (world size 1)."""
    assert _same(_train(exact=True), _train(exact=True))
    with pytest.raises(ValueError, match="per_sample"):
        accel = ft.Accel(Device("golden"))
        m = ft.Linear(3, 2, accel=accel)
        m(torch.randn(2, 3)).sum().backward()
        reduce_gradients(m, exact=True)


def test_shard():
    accel = ft.Accel(Device("golden"), per_sample=True)
    x, y = torch.arange(10), torch.arange(10) * 2
    parts = [shard(accel, x, y, rank=r, world_size=3) for r in range(3)]
    assert [p[0].tolist() for p in parts] == [t.tolist() for t in torch.tensor_split(x, 3)]
    assert accel.sample_offset == 7
    assert torch.equal(shard(None, x, rank=1, world_size=2), x[5:])
    with pytest.raises(ValueError, match="rank"):
        shard(accel, x, rank=2, world_size=2)
    with pytest.raises(ValueError, match="same length"):
        shard(accel, x, y[:3], rank=0, world_size=2)
    with pytest.raises(TypeError, match="accel"):
        shard(Device("golden"), x)
