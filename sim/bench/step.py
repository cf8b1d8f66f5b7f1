"""A training step end to end against PyTorch: ``python -m sim.bench step``.

For each network (``--net``) and board (``--board``) it measures, in one run on this
machine:

* **the step on the accelerator**: the int8 training step of :mod:`firmware.ml.nn` (batch
  ``--batch``, the exponent blocks of ``--blocks``) through ``Device("model")``, the real
  driver over the register-level functional model configured as the board's default on its
  memory port. Host time is measured here, by kind (:mod:`firmware.runtime.profile`); the
  accelerator's time is the analytic performance model's cycles for the step's descriptors
  at the board's clock. The step takes ``host + accelerator`` (the runtime does not overlap
  them);
* **the same step in PyTorch fp32 on one core** of this machine (``torch.set_num_threads(1)``,
  the same layers and shapes, forward, cross-entropy, backward, SGD);

and reports the step time, the host share ``host / step``, the speedup of the accelerated
step over PyTorch, and the end-to-end utilisation: the step's multiply-accumulates over the
board's peak (``rows x cols`` a cycle at its clock) in the step's time.

The networks: ``fashion-cnn`` (1x28x28: conv 3x3 1->32, pool, conv 32->64, pool,
3136->128->10), ``vgg11`` (VGG-11 on a CIFAR-10-shaped 3x32x32 input: eight 3x3
convolutions 64-128-256-256-512-512-512-512 with five 2x2 max-pools, then 512->10) and
``resnet20`` (ResNet-20 on 3x32x32: a 3x3 convolution to 16 channels, three stages of three
basic blocks at 16, 32 and 64 channels, strided 1x1 convolutions as the shortcuts where the
shape changes, global average pooling, 64->10; without batch normalisation, which the
runtime does not have). The data are synthetic (normal images, uniform labels): a step's
time does not depend on the values. Host time is an x86 core's; a board's ARM cores are
several times slower, so the host share on a board is higher still.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

import numpy as np

# (the --blocks value of the whole step on the device, as python -m sim.bench host names it)
from sim.bench.host import RESIDENT_SGD, add_array_options, array_overrides, board_device, machine

ROOT = Path(__file__).resolve().parents[2]

#: The learning rate of every measured step: a step's time does not depend on it, and it is
#: small enough that the synthetic data does not drive the weights to inf over the steps.
LR = 1e-3

__all__ = ["NETS", "vgg11", "resnet20", "to_torch", "step_macs", "step_macs_both", "measure",
           "torch_step", "table", "main"]


def vgg11(rng):
    """VGG-11 for 3x32x32 input (:class:`firmware.ml.nn.Network`), weights from ``rng``."""
    from firmware.ml import nn
    layers, cin = [], 3
    for v in (64, "M", 128, "M", 256, 256, "M", 512, 512, "M", 512, 512, "M"):
        if v == "M":
            layers.append(nn.MaxPool2d(2))
        else:
            layers += [nn.Conv2d(cin, v, 3, rng, padding=1), nn.ReLU()]
            cin = v
    return nn.Network([*layers, nn.Flatten(), nn.Linear(512, 10, rng)])


def resnet20(rng):
    """ResNet-20 for 3x32x32 input without batch normalisation
    (:class:`firmware.ml.nn.Network`), weights from ``rng``."""
    from firmware.ml import nn
    layers, cin = [nn.Conv2d(3, 16, 3, rng, padding=1), nn.ReLU()], 16
    for cout, stride in ((16, 1), (32, 2), (64, 2)):
        for i in range(3):
            s = stride if i == 0 else 1
            body = [nn.Conv2d(cin, cout, 3, rng, stride=s, padding=1), nn.ReLU(),
                    nn.Conv2d(cout, cout, 3, rng, padding=1)]
            short = [nn.Conv2d(cin, cout, 1, rng, stride=s)] if (s, cin) != (1, cout) else []
            layers += [nn.Residual(body, short), nn.ReLU()]
            cin = cout
    return nn.Network([*layers, nn.GlobalAvgPool2d(), nn.Linear(64, 10, rng)])


def _fashion_cnn(rng):
    from sim.bench.host import fashion_cnn
    return fashion_cnn(rng)


#: ``--net``: (builder, input shape of a sample).
NETS = {"fashion-cnn": (_fashion_cnn, (1, 28, 28)), "vgg11": (vgg11, (3, 32, 32)),
        "resnet20": (resnet20, (3, 32, 32))}


def to_torch(net):
    """The same layers as a ``torch.nn.Module`` (fresh weights: only the shapes matter)."""
    import torch

    from firmware.ml import nn

    class _Residual(torch.nn.Module):
        def __init__(self, body, short):
            super().__init__()
            self.body, self.short = body, short

        def forward(self, x):
            return self.body(x) + self.short(x)

    def convert(layers):
        out = []
        for layer in layers:
            if isinstance(layer, nn.Conv2d):
                out.append(torch.nn.Conv2d(layer.cin, layer.cout, layer.k, stride=layer.stride,
                                           padding=layer.pad))
            elif isinstance(layer, nn.Linear):
                fan_in, fan_out = layer.params["W"].shape
                out.append(torch.nn.Linear(fan_in, fan_out))
            elif isinstance(layer, nn.ReLU):
                out.append(torch.nn.ReLU())
            elif isinstance(layer, nn.MaxPool2d):
                out.append(torch.nn.MaxPool2d(layer.k))
            elif isinstance(layer, nn.Flatten):
                out.append(torch.nn.Flatten())
            elif isinstance(layer, nn.GlobalAvgPool2d):
                out += [torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten()]
            elif isinstance(layer, nn.Residual):
                out.append(_Residual(torch.nn.Sequential(*convert(layer.body)),
                                     torch.nn.Sequential(*convert(layer.shortcut))))
            else:
                raise TypeError(f"no torch counterpart for {type(layer).__name__}")
        return out

    return torch.nn.Sequential(*convert(net.layers))


def _data(shape, batch, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((batch, *shape)).astype(np.float32)
    return x, rng.integers(0, 10, batch)


def step_macs(net_name: str, batch: int = 128, padding: bool = False) -> int:
    """Multiply-accumulates of one training step: the forward GEMMs' (every convolution's
    and linear layer's ``outputs x fan-in``), as many for the weight gradients, and as many
    for the backward-data GEMMs but the first layer's (nobody needs the input's gradient).

    Without ``padding`` a convolution's products with its zero padding are left out (the
    work there is to do, and what the engine's ``MACS`` counter counts: the utilisation
    never exceeds 1); with it they are in, as the usual operation counts have them."""
    return step_macs_both(net_name, batch)[1 if padding else 0]


def step_macs_both(net_name: str, batch: int = 128) -> tuple[int, int]:
    """:func:`step_macs` without and with the padding's products, from one forward pass of
    one image (every count is the batch's multiple)."""
    import torch
    build, shape = NETS[net_name]
    model = to_torch(build(np.random.default_rng(0)))
    macs = []                               # (without padding, with it), a layer each

    def hook(mod, inp, out):
        if not isinstance(mod, torch.nn.Conv2d):
            macs.append((out.numel() * mod.in_features,) * 2)
            return
        per_tap = mod.out_channels * mod.in_channels
        # (the kernel taps inside the image, summed over the output positions)
        inside = torch.nn.functional.conv2d(
            torch.ones(1, 1, *inp[0].shape[2:]), torch.ones(1, 1, *mod.kernel_size),
            stride=mod.stride, padding=mod.padding).sum()
        taps = mod.kernel_size[0] * mod.kernel_size[1] * out.shape[2] * out.shape[3]
        macs.append((per_tap * int(inside), per_tap * taps))

    for mod in model.modules():
        if isinstance(mod, (torch.nn.Conv2d, torch.nn.Linear)):
            mod.register_forward_hook(hook)
    with torch.no_grad():
        model(torch.zeros(1, *shape))
    return tuple(batch * (3 * sum(col) - col[0]) for col in zip(*macs, strict=True))


def torch_step(net_name: str, batch: int = 128, steps: int = 5) -> float:
    """Seconds of one training step in PyTorch fp32 on one core of this machine: the median
    of ``steps`` steps, each timed on its own, after a warm-up step."""
    import torch
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        build, shape = NETS[net_name]
        torch.manual_seed(0)
        model = to_torch(build(np.random.default_rng(0)))
        opt = torch.optim.SGD(model.parameters(), lr=LR)
        x, y = (torch.from_numpy(a) for a in _data(shape, batch))
        loss_fn = torch.nn.CrossEntropyLoss()

        def step():
            opt.zero_grad()
            loss_fn(model(x), y).backward()
            opt.step()

        step()
        times = []
        for _ in range(steps):
            t0 = time.perf_counter()
            step()
            times.append(time.perf_counter() - t0)
        return float(np.median(times))
    finally:
        torch.set_num_threads(threads)




def resident_refusal(net_name: str) -> str | None:
    """Why ``net_name`` cannot train with its whole step on the device, or None."""
    from firmware.ml.resident_conv import stages_of
    build, shape = NETS[net_name]
    try:
        stages_of(build(np.random.default_rng(0)), shape)
    except ValueError as e:
        return str(e)
    return None


def measure(board: str, net_name: str, blocks: str = "fox", batch: int = 128,
            steps: int = 1, **overrides) -> dict:
    """The int8 step of ``net_name`` through ``Device("model")`` as ``board``'s default
    (with ``overrides`` of its array's ``rows`` and ``cols``): host seconds by kind,
    accelerator cycles and seconds, multiply-accumulates (a warm-up step first, then of
    ``steps`` steps the one of the median host time). ``blocks``: the host path's exponent
    blocks, or :data:`RESIDENT_SGD`, the whole step on the device."""
    from firmware.ml import nn
    from firmware.ml.optim import SGD
    from firmware.spec.ports import BOARD_PORTS
    from platforms import PLATFORMS
    b = PLATFORMS[board]
    cfg = b.config(**overrides)
    dev = board_device(board, memory=1 << 30, **overrides)
    build, shape = NETS[net_name]
    net = build(np.random.default_rng(0))
    x, y = _data(shape, batch)
    eng = None
    if blocks == RESIDENT_SGD:
        from firmware.ml.resident_conv import ResidentConvNet
        resident = ResidentConvNet(net, shape, dev, seed=0, lr=LR)
        profile = dev.profile

        def step():
            with profile.time("float"):
                resident.step(x, y)
    else:
        eng = nn.Engine("int8", dev, rng=np.random.default_rng(1),
                        blocks=nn.Blocks.parse(blocks))
        opt = SGD(net.parameters(), lr=LR)
        profile = eng.profile

        def step():
            with profile.time("float"):
                out = net.forward(x, eng)
                _, grad = nn.softmax_cross_entropy(out, y)
                net.backward(grad, eng)
                opt.step(net.gradients())

    step()
    desc0 = dev.sim.descriptors
    # (each step on its own: the one of the median host time)
    clock = b.clock_mhz * 1e6
    summaries = []
    for _ in range(steps):
        profile.reset()
        step()
        summaries.append(profile.summary(clock))
    summaries.sort(key=lambda x: x["host_seconds"])
    s = summaries[len(summaries) // 2]
    host, acc = s["host_seconds"], s["accelerator_seconds"]
    macs, dense = step_macs_both(net_name, batch)
    peak = cfg["rows"] * cfg["cols"]
    if eng is not None:
        eng.close()
    return {"board": board, "config": f"{cfg['rows']}x{cfg['cols']}@{cfg['data_width']}",
            "port": BOARD_PORTS[board], "clock_mhz": b.clock_mhz, "net": net_name,
            "blocks": blocks, "batch": batch, "steps": steps,
            "descriptors_per_step": (dev.sim.descriptors - desc0) / steps,
            "host_seconds": dict(s["seconds"]),
            "host_total": host, "accelerator_cycles": s["accelerator_cycles"],
            "accelerator_seconds": acc, "step_seconds": host + acc,
            "host_share": host / (host + acc), "macs_per_step": macs,
            "macs_per_step_with_padding": dense,
            "peak_macs_per_cycle": peak,
            "accelerator_utilization": macs / (peak * s["accelerator_cycles"]),
            "utilization": macs / (peak * clock * (host + acc))}


def compare(board: str, net_name: str, torch_seconds: float, blocks: str = "fox",
            batch: int = 128, steps: int = 1, **overrides) -> dict:
    """:func:`measure`'s record with ``torch_seconds`` (:func:`torch_step`) and the
    ``speedup`` over it."""
    r = measure(board, net_name, blocks, batch, steps, **overrides)
    r["torch_seconds"] = torch_seconds
    r["speedup"] = torch_seconds / r["step_seconds"]
    return r


def line(r) -> str:
    """One record of :func:`compare` as a line of text."""
    return (f"{r['net']} on {r['board']}: step {1e3 * r['step_seconds']:.0f} ms (host share "
            f"{100 * r['host_share']:.1f} %), PyTorch fp32 {1e3 * r['torch_seconds']:.0f} ms, "
            f"speedup {r['speedup']:.2f}, utilisation {100 * r['utilization']:.2f} % "
            f"({r['blocks']})")


def table(records) -> str:
    """Records (with ``torch_seconds``) as a Markdown table."""
    lines = ["| net | board | host (ms) | accelerator (ms) | step (ms) | host share | "
             "PyTorch fp32, 1 core (ms) | speedup | utilisation |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in records:
        lines.append(f"| {r['net']} | {r['board']} | {1e3 * r['host_total']:.0f} | "
                     f"{1e3 * r['accelerator_seconds']:.1f} | {1e3 * r['step_seconds']:.0f} | "
                     f"{100 * r['host_share']:.1f} % | {1e3 * r['torch_seconds']:.0f} | "
                     f"{r['speedup']:.2f} | {100 * r['utilization']:.2f} % |")
    return "\n".join(lines)


def plot(records, path: Path) -> None:
    """Records (with ``torch_seconds``) as a PNG bar chart: per network and board, the step's
    host and accelerator milliseconds stacked beside PyTorch fp32's, each labelled with its
    speedup and end-to-end utilisation."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    if not records:
        raise ValueError("records must not be empty")
    fig, ax = plt.subplots(figsize=(3.6 + 1.4 * len(records), 3.6))
    x = np.arange(len(records))
    host = np.array([1e3 * r["host_total"] for r in records])
    acc = np.array([1e3 * r["accelerator_seconds"] for r in records])
    ref = np.array([1e3 * r["torch_seconds"] for r in records])
    ax.bar(x - 0.2, acc, 0.4, label="accelerator (the model at the board's clock)",
           color="#3b6ea8")
    ax.bar(x - 0.2, host, 0.4, bottom=acc, label="host", color="#e0a030")
    ax.bar(x + 0.2, ref, 0.4, label="PyTorch fp32, one core", color="#999999")
    for i, r in enumerate(records):
        ax.annotate(f"{r['speedup']:.1f}x\n{100 * r['utilization']:.0f} %",
                    (i - 0.2, host[i] + acc[i]), ha="center", va="bottom", fontsize=8)
    ax.set_xticks(x, [f"{r['net']}\n{r['board']}\n{r['blocks']}" for r in records],
                  fontsize=8)
    ax.set_yscale("log")
    ax.set_ylim(bottom=0.3 * min(acc.min(), ref.min()))
    ax.set_ylabel("ms per training step (log)")
    ax.set_title(f"A training step, batch {records[0]['batch']}: speedup over PyTorch and "
                 f"end-to-end utilisation", fontsize=9)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    ax.margins(y=0.25)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv=None) -> int:
    """The command line, ``python -m sim.bench step``; the exit status."""
    p = argparse.ArgumentParser(prog="python -m sim.bench step", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--board", nargs="+", default=["zcu104"],
                   choices=["pynq-z1", "zcu104", "vu9p"], help="board defaults (default zcu104)")
    p.add_argument("--net", nargs="+", default=list(NETS), choices=list(NETS),
                   help="networks (default: all)")
    p.add_argument("--blocks", nargs="+", default=["fox"],
                   help="the host path's exponent blocks (fox, tensor, W,x,d or tile), or "
                        "resident-sgd: the whole step on the device, for the networks it "
                        "runs (default: fox)")
    add_array_options(p)
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--steps", type=int, default=3,
                   help="steps measured after a warm-up step, the median's reported (PyTorch's "
                        "median of at least 5)")
    p.add_argument("--out", type=Path, default=ROOT / "results" / "step.json")
    p.add_argument("--plot", type=Path, help="also draw the records as a PNG bar chart here")
    args = p.parse_args(argv)
    if args.plot is not None and args.plot.suffix != ".png":
        p.error(f"--plot must name a .png file, not {str(args.plot)!r}")
    if args.batch < 1 or args.steps < 1:
        p.error("--batch and --steps must be at least 1")
    overrides = array_overrides(p, args, args.board)
    from firmware.ml import nn
    for blocks in args.blocks:
        if blocks == RESIDENT_SGD:
            continue
        try:
            nn.Blocks.parse(blocks)
        except ValueError as e:
            p.error(str(e))
    records = []
    for net in args.net:
        runs = []
        for blocks in args.blocks:
            why = resident_refusal(net) if blocks == RESIDENT_SGD else None
            if why:
                print(f"  {net}: not {blocks}: {why}", file=sys.stderr)
            else:
                runs.append(blocks)
        t = torch_step(net, args.batch, max(5, args.steps)) if runs else None
        for blocks in runs:
            for board in args.board:
                r = compare(board, net, t, blocks, args.batch, args.steps, **overrides)
                print(f"  {line(r)}", file=sys.stderr)
                records.append(r)
    print(table(records))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    import torch
    args.out.write_text(json.dumps({
        "command": "python -m sim.bench step " + " ".join(argv if argv is not None
                                                          else sys.argv[1:]),
        "machine": machine(),
        "python": platform.python_version(), "torch": torch.__version__,
        "results": records}, indent=2) + "\n")
    print(f"\nwrote {args.out}")
    if args.plot is not None and records:
        plot(records, args.plot)
        print(f"wrote {args.plot}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
