"""Host share of a training step: ``python -m sim.bench host``.

A VGG-style CNN on Fashion-MNIST-shaped input (1×28×28; conv 3×3 1→32, pool, conv 3×3 32→64,
pool, 3136→128→10), batch 128, trained in int8 with the runtime of :mod:`firmware.ml.nn` over
``Device("model")`` — the real driver, buffer pool and copies over the register-level
functional model of the accelerator (:mod:`sim.models.functional`) configured as each board's
default on its memory port. Per step it reports the host time by kind
(:mod:`firmware.runtime.profile`), measured on the machine that runs the benchmark, the
accelerator cycles (the analytic performance model's, summed over the step's descriptors)
and their time at the board's clock, and the host share ``host / (host + accelerator)``. The
images are the first 128 of the bundled MNIST subset (28×28, the Fashion-MNIST shape; the
host's work does not depend on which images).

Host time on a workstation is an x86 core's; a board's Cortex-A9 (Pynq-Z1) or Cortex-A53
(ZCU104) is several times slower, so the share on a board is higher still. The fp32 row is
the same step in float32 numpy on the same machine, for scale.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]

__all__ = ["fashion_cnn", "machine", "board_device", "measure", "table", "main"]


def machine() -> str:
    """This machine as the benchmarks' JSON names it: its architecture and, where Linux
    says, its processor's model name (host and PyTorch times depend on it)."""
    name = ""
    try:
        with open("/proc/cpuinfo") as f:
            name = next((line.split(":", 1)[1].strip() for line in f
                         if line.startswith("model name")), "")
    except OSError:
        pass
    name = name or platform.processor()
    return f"{platform.machine()} ({name})" if name else platform.machine()


def fashion_cnn(rng):
    """The benchmark's CNN (:class:`firmware.ml.nn.Network`), weights drawn from ``rng``."""
    from firmware.ml import nn
    return nn.Network([
        nn.Conv2d(1, 32, 3, rng, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3, rng, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(64 * 7 * 7, 128, rng), nn.ReLU(), nn.Linear(128, 10, rng)])


def _images(batch):
    from firmware.ml import data
    x, y, _, _ = data.mnist()
    reps = -(-batch // len(x))
    x = np.concatenate([x] * reps)[:batch].reshape(batch, 1, 28, 28)
    return x.astype(np.float32), np.concatenate([y] * reps)[:batch]


def _step(net, eng, opt, x, y):
    from firmware.ml import nn
    with eng.profile.time("float"):
        out = net.forward(x, eng)
        _, grad = nn.softmax_cross_entropy(out, y)
        net.backward(grad, eng)
        opt.step(net.gradients())


def fashion_mlp(rng):
    """The fashion-mlp task's network, 784 -> 256 -> 10 with ReLU."""
    from firmware.ml import nn
    return nn.Network([nn.Linear(784, 256, rng), nn.ReLU(), nn.Linear(256, 10, rng)])


#: The benchmark's networks: ``--net``.
NETS = {"cnn": fashion_cnn, "mlp": fashion_mlp}
#: ``--blocks`` value for :class:`firmware.ml.resident.ResidentMLP` (``--net mlp`` only):
#: activations, masks and deltas kept on the device in BFP8 tile blocks.
RESIDENT = "resident"
#: ... and the optimiser too (``optimizer="device"``): the weights stay on the device. With
#: ``--net cnn``, :class:`firmware.ml.resident_conv.ResidentConvNet`: the whole step there.
RESIDENT_SGD = "resident-sgd"


def measure(board: str, blocks: str, batch: int = 128, steps: int = 3,
            net_name: str = "cnn") -> dict:
    """One board's default on its port, ``steps`` steps after a warm-up step.

    Parameters
    ----------
    board : str
        A board's name (``platforms.PLATFORMS``).
    blocks : str
        The host path's exponent blocks (:meth:`firmware.ml.nn.Blocks.parse`), or
        ``"resident"`` (with ``net_name="mlp"``): :class:`firmware.ml.resident.ResidentMLP`;
        ``"resident-sgd"``: the same with its optimiser on the device, or for the CNN
        :class:`firmware.ml.resident_conv.ResidentConvNet` (the whole step on the device).
    batch : int
        The batch size.
    steps : int
        Steps measured.
    net_name : {"cnn", "mlp"}
        The network (:data:`NETS`).

    Returns
    -------
    dict
        Host seconds by kind, accelerator cycles and seconds, and the host share.
    """
    from firmware.ml import nn
    from firmware.ml.optim import SGD
    from firmware.spec.ports import BOARD_PORTS
    from platforms import PLATFORMS
    b = PLATFORMS[board]
    cfg = b.config()
    dev = board_device(board)
    rng = np.random.default_rng(0)
    x, y = _images(batch)
    if blocks == RESIDENT_SGD and net_name == "cnn":
        from firmware.ml.resident_conv import ResidentConvNet
        net = ResidentConvNet(NETS[net_name](rng), (1, 28, 28), dev, seed=0, lr=0.01)
        profile = dev.profile

        def step():
            with profile.time("float"):
                net.step(x, y)
    elif blocks in (RESIDENT, RESIDENT_SGD):
        from firmware.ml.resident import ResidentMLP
        net = ResidentMLP([784, 256, 10], dev, seed=0, lr=0.01) if blocks == RESIDENT \
            else ResidentMLP([784, 256, 10], dev, seed=0, lr=0.1, momentum=0.0,
                             optimizer="device")
        x = x.reshape(batch, -1)
        profile = dev.profile

        def step():
            with profile.time("float"):
                net.step(x, y)
    else:
        net = NETS[net_name](rng)
        eng = nn.Engine("int8", dev, rng=np.random.default_rng(1),
                        blocks=nn.Blocks.parse(blocks))
        opt = SGD(net.parameters(), lr=0.01)
        profile = eng.profile
        if net_name == "mlp":
            x = x.reshape(batch, -1)

        def step():
            _step(net, eng, opt, x, y)
    step()                                      # warm-up: buffers allocated once per shape
    profile.reset()
    descriptors0 = dev.sim.descriptors
    for _ in range(steps):
        step()
    clock = b.clock_mhz * 1e6
    s = profile.summary(clock)
    per = {k: v / steps for k, v in s["seconds"].items()}
    host = s["host_seconds"] / steps
    acc = s["accelerator_seconds"] / steps
    return {"board": board, "config": f"{cfg['rows']}x{cfg['cols']}@{cfg['data_width']}",
            "port": BOARD_PORTS[board], "clock_mhz": b.clock_mhz, "net": net_name,
            "blocks": blocks,
            "batch": batch, "steps": steps, "gemms_per_step": s["counts"]["gemms"] / steps,
            "descriptors_per_step": (dev.sim.descriptors - descriptors0) / steps,
            "host_seconds": per, "host_total": host,
            "accelerator_cycles": s["accelerator_cycles"] / steps,
            "accelerator_seconds": acc, "host_share": host / (host + acc)}


def add_array_options(parser) -> None:
    """``--rows`` and ``--cols``: the array's, in place of the board default's."""
    parser.add_argument("--rows", type=int,
                        help="the array's rows instead of the board default's (as build.py "
                             "takes them)")
    parser.add_argument("--cols", type=int,
                        help="the array's columns instead of the board default's")


def array_overrides(parser, args, boards) -> dict:
    """The ``--rows`` and ``--cols`` given (:func:`add_array_options`), checked on each of
    ``boards`` by configuring its model: a bad value exits 2 through ``parser.error``."""
    overrides = {k: v for k, v in (("rows", args.rows), ("cols", args.cols)) if v is not None}
    for board in boards:
        try:
            board_device(board, memory=1 << 20, **overrides)
        except (TypeError, ValueError) as e:
            parser.error(f"--rows/--cols on the {board}: {e}")
    return overrides


def board_device(board: str, memory: int = 512 << 20, **overrides):
    """``Device("model")`` configured as ``board``'s default on its memory port: its array,
    bus, buffers, reuse block, packing and write and read ports, with ``overrides`` (not
    None) of the default (``rows=32, cols=32``, as ``build.py --rows --cols`` takes them)."""
    from firmware import Device
    from firmware.spec.ports import BOARD_PORTS
    from platforms import PLATFORMS
    cfg = PLATFORMS[board].config(**overrides)
    return Device("model", rows=cfg["rows"], cols=cfg["cols"], data_width=cfg["data_width"],
                  depth=cfg["depth"], block=cfg["block"], packing=cfg["packing"],
                  queue=cfg["queue"], port=BOARD_PORTS[board], memory=memory,
                  write_ports=cfg.get("write_ports", 1), read_ports=cfg.get("read_ports", 1))


def fp32_step(batch: int = 128, steps: int = 3, net_name: str = "cnn") -> float:
    """Seconds of the same step in float32 numpy on this machine."""
    from firmware.ml import nn
    from firmware.ml.optim import SGD
    rng = np.random.default_rng(0)
    net = NETS[net_name](rng)
    eng = nn.Engine("fp32")
    opt = SGD(net.parameters(), lr=0.01)
    x, y = _images(batch)
    if net_name == "mlp":
        x = x.reshape(batch, -1)
    _step(net, eng, opt, x, y)
    t0 = time.perf_counter()
    for _ in range(steps):
        _step(net, eng, opt, x, y)
    return (time.perf_counter() - t0) / steps


def table(results, fp32: float | None = None) -> str:
    """Records of :func:`measure` as a Markdown table, with the fp32 step for scale."""
    kinds = ("quantize", "layout", "driver", "combine", "float")
    lines = ["| board (default, port, clock) | blocks | GEMMs / descriptors per step | "
             + " | ".join(f"host {k} (ms)" for k in kinds)
             + " | host total (ms) | accelerator (ms) | host share |",
             "|---|---|---:|" + "---:|" * (len(kinds) + 3)]
    for r in results:
        lines.append(
            f"| {r['board']} ({r['config']}, {r['port']}, {r['clock_mhz']:g} MHz) | "
            f"{r['blocks']} | {r['gemms_per_step']:.0f} / {r['descriptors_per_step']:.0f} | "
            + " | ".join(f"{1e3 * r['host_seconds'][k]:.1f}" for k in kinds)
            + f" | {1e3 * r['host_total']:.1f} | {1e3 * r['accelerator_seconds']:.2f} | "
            f"{100 * r['host_share']:.1f} % |")
    if fp32 is not None:
        lines.append(f"\nfp32 numpy, the same step on this machine: {1e3 * fp32:.0f} ms")
    return "\n".join(lines)


def main(argv=None) -> int:
    """The command line, ``python -m sim.bench host``; the exit status."""
    p = argparse.ArgumentParser(prog="python -m sim.bench host", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--boards", nargs="+", default=["zcu104", "pynq-z1", "vu9p"],
                   choices=["pynq-z1", "zcu104", "vu9p"])
    p.add_argument("--net", choices=sorted(NETS), default="cnn",
                   help="the network: the CNN (default) or fashion-mlp's 784-256-10 MLP")
    p.add_argument("--blocks", nargs="+", default=["fox", "tensor"],
                   help="host-path exponent blocks (fox, tensor, W,x,d) or, with --net mlp, "
                        "'resident' (tensors kept on the device), or 'resident-sgd' (and the "
                        "optimiser run there; with --net cnn the whole step)")
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--out", type=Path, default=ROOT / "results" / "host_profile.json")
    args = p.parse_args(argv)
    if args.batch < 1 or args.steps < 1:
        p.error("--batch and --steps must be at least 1")
    from firmware.ml import nn
    for b in args.blocks:
        if b in (RESIDENT, RESIDENT_SGD):
            if b == RESIDENT and args.net != "mlp":
                p.error(f"--blocks {b} needs --net mlp (the CNN stays on the device with "
                        f"its optimiser: resident-sgd)")
            continue
        try:
            nn.Blocks.parse(b)
        except ValueError as e:
            p.error(str(e))
    results = []
    for board in args.boards:
        for blocks in args.blocks:
            r = measure(board, blocks, args.batch, args.steps, args.net)
            print(f"  {board} {blocks}: host {1e3 * r['host_total']:.1f} ms, accelerator "
                  f"{1e3 * r['accelerator_seconds']:.2f} ms, host share "
                  f"{100 * r['host_share']:.1f} %", file=sys.stderr)
            results.append(r)
    fp32 = fp32_step(args.batch, args.steps, args.net)
    print(table(results, fp32))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({
        "command": "python -m sim.bench host " + " ".join(argv if argv is not None
                                                          else sys.argv[1:]),
        "machine": machine(),
        "python": platform.python_version(), "fp32_step_seconds": fp32,
        "results": results}, indent=2) + "\n")
    print(f"\nwrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
