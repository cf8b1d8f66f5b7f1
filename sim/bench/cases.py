"""The benchmark's configurations and GEMMs, and running one GEMM checked on ``Device("rtl")``."""

from __future__ import annotations

import time

import numpy as np

__all__ = ["BENCH_CONFIGS", "BENCH_SCALE", "LAYERS"]


def _training_gemms(batch, fan_in, fan_out):
    """The GEMMs of one training step of a layer y = x W (x: batch x in, W: in x out), as
    ``(name, M, N, K, transpose_a, transpose_b)``, operands stored as the layer keeps them."""
    return [("forward y = x W", batch, fan_out, fan_in, False, False),
            ("backward-data dx = dy W^T", batch, fan_in, fan_out, False, True),
            ("weight-gradient dW = x^T dy", fan_in, fan_out, batch, True, False)]


#: The array each board's benchmarks simulate. Where a board's default is too big to build
#: and simulate, a smaller array on a narrower bus with the same operand bytes per cycle over
#: bus bytes per cycle, (rows + cols) / bus bytes: each cycle the array takes a column of A
#: (rows bytes) and a row of B (cols bytes). Pynq-Z1 16x16 @ 64 bits: 32/8 = 4, simulated as
#: is. ZCU104 32x64 @ 128: 96/16 = 6 -> 16x32 @ 64: 48/8 = 6. VU9P 64x128 @ 512: 192/64 = 3
#: -> 8x16 @ 64: 24/8 = 3 (64 bits is the narrowest bus; the arrays are the smallest powers
#: of two with the ratio). C's ratio, the bytes of a C tile over the bytes a cycle its write
#: ports take, rows * cols * 4 / (write_ports * bus bytes), is kept too on the ZCU104: its
#: default writes through six 16-byte ports, 32 * 64 * 4 / 96 = 85.3, the stand-in through
#: three 8-byte ports, 16 * 32 * 4 / 24 = 85.3. The VU9P's (64 * 128 * 4 / 64 = 512) cannot
#: be kept with its operand ratio at any smaller size: its stand-in's (8 * 16 * 4 / 8 = 64)
#: writes are 8 times easier than the board's, and firmware.runtime.perfmodel predicts the
#: default itself. The ZCU104 reads A and B through two ports, as its default does (two
#: 16-byte ports for 96 operand bytes a cycle, 3 per bus byte; the stand-in's two 8-byte
#: ports for 48, 3 too).
BENCH_CONFIGS = {
    "pynq-z1": {"rows": 16, "cols": 16, "data_width": 64, "write_ports": 4, "read_ports": 3,
                "packing": 2, "dsp_slice": "DSP48E1"},
    "zcu104": {"rows": 16, "cols": 32, "data_width": 64, "write_ports": 3, "read_ports": 4},
    "vu9p": {"rows": 8, "cols": 16, "data_width": 64},
}


#: How many times larger each board's default is than its BENCH_CONFIGS array, in rows,
#: columns and bus width alike (Pynq-Z1 16x16 @ 64 as is; ZCU104 32x64 @ 128 over 16x32 @ 64;
#: VU9P 64x128 @ 512 over 8x16 @ 64). The board's GEMMs run with M and N divided by it
#: (:func:`_bench_cases`): a 16x32 array running the board's 64x256x256 unscaled would find
#: four tile rows to reuse each B tile over where the board's 32 rows find two, and report a
#: utilisation the board does not reach. The VU9P stand-in stays optimistic (its C is 8 times
#: easier, above), so its table carries the model's prediction of the default beside the
#: measurement.
BENCH_SCALE = {"pynq-z1": 1, "zcu104": 2, "vu9p": 8}


#: Layers y = x W (fan_in -> fan_out): fully connected, and convolution-shaped (im2col of a
#: 3x3 convolution, 64 -> 128 and 128 -> 256 channels).
LAYERS = [("fc 784->256", 784, 256), ("fc 256->256", 256, 256), ("fc 256->10", 256, 10),
          ("conv 576->128", 576, 128), ("conv 1152->256", 1152, 256)]


def _bench_params(board: str) -> dict:
    """A board's benchmark array (:data:`BENCH_CONFIGS`) at the board's default buffer depth
    and reuse block: the ``Device("rtl", ...)`` keywords ``utilization``, ``trace`` and
    ``sweep`` build it with."""
    from platforms import PLATFORMS

    default = PLATFORMS[board].default
    return {**BENCH_CONFIGS[board], "depth": default["depth"], "block": default["block"]}


def _bench_cases(rows, cols, quick, scale=1):
    """(group, name, M, N, K, transpose_a, transpose_b, board M, board N) of one board's run.

    ``scale`` > 1: the simulated array stands in for one ``scale`` times as large in rows,
    columns and bus width (:data:`BENCH_SCALE`); the board's GEMMs (the layers' shapes as a
    user runs them) are simulated with M and N divided by ``scale`` (rounded up) and K kept,
    so that each simulated tile row and column, each operand byte per bus byte and each
    block's reuse stand for the board's own. The squares are sized for the simulated array
    (M = N = 8x, K = 16x its larger side) and stand for ``scale`` times their M and N."""
    d = max(rows, cols)
    m, k = (4 * d, 8 * d) if quick else (8 * d, 16 * d)
    cases = [("square", *g, scale * g[1], scale * g[2]) for g in (
        ("forward", m, m, k, False, False), ("A transposed", m, m, k, True, False),
        ("B transposed", m, m, k, False, True), ("both transposed", m, m, k, True, True))]
    layers = [("fc 256->10", 256, 10)] if quick else LAYERS
    for batch in ((64,) if quick else (64, 128)):
        for label, fan_in, fan_out in layers:
            for name, bm, bn, bk, ta, tb in _training_gemms(batch, fan_in, fan_out):
                cases.append((f"{label} b{batch}", name, -(-bm // scale), -(-bn // scale), bk,
                              ta, tb, bm, bn))
    return cases


def _port_spec(port: dict) -> dict:
    """A resolved port's knobs as a record carries them (``port_spec``), so that a dict of
    knobs (named ``"<preset>+"``) can be predicted again
    (:func:`firmware.runtime.perfmodel.record_config`)."""
    from firmware.spec.ports import KNOBS

    return {key: port[key] for key in (*KNOBS, "data_width", "clock_mhz") if key in port}


def _operands(rng, m, n, k, ta, tb):
    """Random int8 A and B of an ``m x n x k`` GEMM, stored transposed or not."""
    return (rng.integers(-128, 128, (k, m) if ta else (m, k), dtype=np.int8),
            rng.integers(-128, 128, (n, k) if tb else (k, n), dtype=np.int8))


def _run_checked(dev, label, m, n, k, ta, tb, rng, block=None) -> float:
    """One random int32 GEMM on ``dev`` (operands from ``rng``), checked bit for bit against
    :func:`sim.models.golden.gemm`, for AXI protocol violations and for the memory model's
    own DRAM accounting; its wall seconds."""
    from sim.models import golden

    a, b = _operands(rng, m, n, k, ta, tb)
    t0 = time.monotonic()
    c = dev.gemm(a, b, transpose_a=ta, transpose_b=tb, out="int32", block=block)
    wall = time.monotonic() - t0
    if not np.array_equal(c, golden.gemm(a, b, ta, tb)):
        raise AssertionError(f"{label}: the accelerator's result differs from golden")
    if dev.sim.violations:
        raise AssertionError(f"{label}: {dev.sim.violations} AXI protocol violations")
    if dev.sim.counters["dram_overdrawn_cycles"]:
        raise AssertionError(f"{label}: the memory model's DRAM budget was overdrawn")
    return wall


def _run_plan(dev, label, m, n, k, ta, tb, rng, block, turned=False, chunk=0,
              queued=True) -> int:
    """One schedule of a random GEMM (operands from ``rng``) on ``dev``: at reuse block
    ``block``, ``DESC_FLAGS.CHUNK`` ``chunk``, and as its transpose where ``turned`` (as
    :class:`firmware.Device` runs it where :func:`firmware.runtime.perfmodel.best_plan` says
    so). Its ``BUSY_CYCLES`` alone, or with ``queued`` its cycles behind another in the descriptor
    queue: the same GEMM queued twice, the second with ``DESC_FLAGS.OVERLAP`` (it reads
    nothing the first writes), less the first alone. The last C is checked bit for bit
    against :func:`sim.models.golden.gemm`, and the run for AXI protocol violations."""
    from firmware.runtime.perfmodel import run_shape
    from sim.models import golden

    a, b = _operands(rng, m, n, k, ta, tb)
    drv = dev.driver
    ta_, tb_ = dev.tensor(a), dev.tensor(b)
    # the GEMM run: C = op(A) op(B), or C^T = op(B)^T op(A)^T
    x, y = (tb_, ta_) if turned else (ta_, tb_)
    rm, rn, _, rta, rtb = run_shape(m, n, k, ta, tb, turned)
    cs = [dev.empty((rm, rn), np.int32) for _ in range(2 if queued else 1)]
    what = f"{label}, queued" if queued else label
    try:
        descs = [drv.descriptors(x, y, c, m=rm, n=rn, k0=0, k1=k, transpose_a=rta,
                                 transpose_b=rtb, row_exp=0, col_exp=0, raw=True,
                                 block=block, chunk=chunk) for c in cs]
        one = drv.run(*descs[0])["busy_cycles"]
        two = drv.run(*descs[0], *descs[1])["busy_cycles"] if queued else None
        c = cs[-1].numpy()
        if not np.array_equal(c.T if turned else c, golden.gemm(a, b, ta, tb)):
            raise AssertionError(f"{what}: the accelerator's result differs from golden")
        if dev.sim.violations:
            raise AssertionError(f"{what}: {dev.sim.violations} AXI protocol violations")
        return two - one if queued else one
    finally:
        for t in (ta_, tb_, *cs):
            t.free()
