"""Train a small PyTorch CNN on Fashion-MNIST with every GEMM on the accelerator (8-bit block
floating point, SWALP: 8-bit SGD and weight averaging), on one or several accelerators.

One process::

    .venv/bin/python examples/torch_fashion_mnist.py --backend golden --epochs 2

A quick run on a subset (under a minute)::

    .venv/bin/python examples/torch_fashion_mnist.py --epochs 1 --swa-epochs 0 \
        --train-subset 1024 --test-subset 1000

``--backend rtl`` runs the GEMMs on the simulated Verilog (8x8, or with ``--board`` the board's
default configuration behind its memory-port model); ``--backend pynq --board pynq-z1`` on a
board (PyTorch has wheels for 64-bit ARM boards such as the ZCU104, not for the Pynq-Z1).

Data-parallel, one process per accelerator (here two on one machine; across boards run the
same command on each with ``--nnodes``, ``--node-rank`` and ``--master-addr``)::

    .venv/bin/torchrun --nproc-per-node 2 examples/torch_fashion_mnist.py --backend golden

With ``--exact`` the weights are bit for bit those of one process with the whole batch
(:mod:`firmware.torch.distributed`; needs a power-of-two number of processes).
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.optim.swa_utils import AveragedModel

import firmware.torch as ft
from firmware import Device
from firmware.ml.data import fashion_mnist
from firmware.spec import boards
from firmware.spec.ports import BOARD_PORTS
from firmware.torch.distributed import broadcast_parameters, reduce_gradients, shard


def cnn(accel: ft.Accel) -> torch.nn.Module:
    """conv 8 - pool - conv 16 - pool - 784x10, written as a plain torch model and converted."""
    model = torch.nn.Sequential(
        torch.nn.Conv2d(1, 8, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(8, 16, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Flatten(), torch.nn.Linear(16 * 7 * 7, 10))
    return ft.convert(model, accel)


def device_for(backend: str, board: str | None) -> Device:
    """The Device: on ``pynq`` the board's build; on ``rtl`` or ``model`` the board's default
    configuration behind its memory-port preset (8x8 without ``--board``)."""
    if board is None:
        return Device(backend)
    if backend == "pynq":
        return Device("pynq", board=board)
    cfg = boards.config(board)
    keys = ["rows", "cols", "data_width", "depth", "block", "packing", "write_ports",
            "read_ports"] + (["dsp_slice"] if backend == "rtl" else ["queue"])
    return Device(backend, port=BOARD_PORTS[board], **{k: cfg[k] for k in keys})


def accuracy(model, x, y, batch=1000) -> float:
    model.eval()
    with torch.no_grad():
        hits = sum((model(x[i:i + batch]).argmax(1) == y[i:i + batch]).sum().item()
                   for i in range(0, len(x), batch))
    model.train()
    return hits / len(x)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0].replace("\n", " "))
    ap.add_argument("--backend", default="golden", choices=("golden", "rtl", "pynq", "model"))
    ap.add_argument("--board", choices=sorted(boards.BOARDS),
                    help="pynq: the board to run on; rtl/model: its default configuration")
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--swa-epochs", type=int, default=1, help="averaging epochs at the end")
    ap.add_argument("--batch", type=int, default=128, help="the global batch")
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--train-subset", type=int, default=10000,
                    help="train on the first N training images (default 10000)")
    ap.add_argument("--test-subset", type=int, default=None,
                    help="test on the first N test images (default: all 10000)")
    ap.add_argument("--exact", action="store_true", help="bit-exact data parallelism")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    if args.board is not None and args.backend == "golden":
        ap.error("--board: only with --backend pynq, rtl or model")
    for name in ("epochs", "batch", "train_subset"):
        if getattr(args, name) < 1:
            ap.error(f"--{name.replace('_', '-')} must be at least 1")
    if args.test_subset is not None and args.test_subset < 1:
        ap.error("--test-subset must be at least 1")
    if not 0 <= args.swa_epochs <= args.epochs:
        ap.error("--swa-epochs must be between 0 and --epochs")

    distributed = int(os.environ.get("WORLD_SIZE", "1")) > 1
    if distributed:                      # torchrun sets RANK, WORLD_SIZE, MASTER_ADDR/PORT
        dist.init_process_group("gloo")
    rank = dist.get_rank() if distributed else 0
    device = device_for(args.backend, args.board)
    accel = ft.Accel(device, seed=args.seed, per_sample=args.exact)
    torch.manual_seed(args.seed)
    model = cnn(accel)
    broadcast_parameters(model)
    opt = ft.SGD(model.parameters(), lr=args.lr, momentum=0.9, weight_decay=5e-4,
                 seed=args.seed)
    budget = args.epochs - args.swa_epochs
    sched = ft.swalp_scheduler(opt, budget=max(budget, 1), swa_lr=0.1 * args.lr)
    swa = AveragedModel(model)

    x, y, xt, yt = fashion_mnist(image=True)
    x, y = torch.from_numpy(x[:args.train_subset]), torch.from_numpy(y[:args.train_subset])
    xt, yt = torch.from_numpy(xt[:args.test_subset]), torch.from_numpy(yt[:args.test_subset])
    order = np.random.default_rng(args.seed)       # the same order on every process
    for epoch in range(args.epochs):
        t0 = time.time()
        perm = torch.from_numpy(order.permutation(len(x)))
        for i in range(0, len(x) - args.batch + 1, args.batch):
            idx = perm[i:i + args.batch]
            xb, yb = shard(accel, x[idx], y[idx])
            opt.zero_grad()
            loss = F.cross_entropy(model(xb), yb)
            loss.backward()
            reduce_gradients(model, exact=args.exact)
            opt.step()
        sched.step()
        if epoch >= budget:
            swa.update_parameters(model)
        if rank == 0:
            print(f"epoch {epoch}: loss {loss.item():.3f}, test accuracy "
                  f"{accuracy(model, xt, yt):.4f}, {time.time() - t0:.1f} s, "
                  f"{accel.gemms} GEMMs, {accel.cycles} cycles", flush=True)
    if rank == 0 and args.swa_epochs:
        print(f"SWA test accuracy {accuracy(swa, xt, yt):.4f}")
    if distributed:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
