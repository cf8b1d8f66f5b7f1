"""One GEMM's bus words read and written per interval of its run (``python -m sim.bench
trace``)."""

from __future__ import annotations

import numpy as np

from .cases import _operands

__all__ = ["trace", "trace_table"]


def trace(dev, m: int, n: int, k: int, transpose_a: bool = False, transpose_b: bool = False,
          *, block: int, chunk: int = 0, queued: bool = False, every: int = 32) -> dict:
    """Bus words read and written in each ``every`` cycles of one GEMM's run.

    The operands are random; the driver's status polls are the sampling points, so the first
    interval starts at the enqueue. The C is checked bit for bit against
    :func:`sim.models.golden.gemm`.

    Parameters
    ----------
    dev : firmware.Device
        A ``Device("rtl")``.
    m, n, k : int
        The GEMM's shape.
    transpose_a, transpose_b : bool
        Whether A and B are stored transposed.
    block : int
        The reuse block side.
    chunk : int
        ``DESC_FLAGS.CHUNK``.
    queued : bool
        Two descriptors of the GEMM back to back, the second with OVERLAP (the samples
        cover both).
    every : int
        Cycles per interval.

    Returns
    -------
    dict
        ``busy_cycles`` (``BUSY_CYCLES``), ``every``, ``samples``: ``[cycle from the first
        sample, words read, words written]`` per interval, and the totals ``read_words``,
        ``write_words``.

    Raises
    ------
    ValueError
        ``every`` is not a positive integer.
    AssertionError
        The accelerator's C differs from the golden model's.
    """
    from sim.models import golden

    if not isinstance(every, int) or isinstance(every, bool) or every < 1:
        raise ValueError(f"every must be a positive integer, not {every!r}")
    a, b = _operands(np.random.default_rng(0), m, n, k, transpose_a, transpose_b)
    drv, sim = dev.driver, dev.sim
    x, y = dev.tensor(a), dev.tensor(b)
    cs = [dev.empty((m, n), np.int32) for _ in range(2 if queued else 1)]
    samples, step, poll = [], sim.step, drv.poll_cycles

    def sampled(cycles):
        step(cycles)
        samples.append((sim.cycle, sim.read_beats, sim.write_beats))
    try:
        descs = [d for c in cs for d in drv.descriptors(
            x, y, c, m=m, n=n, k0=0, k1=k, transpose_a=transpose_a, transpose_b=transpose_b,
            row_exp=0, col_exp=0, raw=True, block=block, chunk=chunk)]
        samples.append((sim.cycle, sim.read_beats, sim.write_beats))
        sim.step, drv.poll_cycles = sampled, every
        busy = drv.run(*descs)["busy_cycles"]
        for c in cs:
            if not np.array_equal(c.numpy(), golden.gemm(a, b, transpose_a, transpose_b)):
                raise AssertionError("trace: the accelerator's result differs from golden")
    finally:
        sim.step, drv.poll_cycles = step, poll
        for t in (x, y, *cs):
            t.free()
    c0, r0, w0 = samples[0]
    rows = [[c - c0, r - rp, w - wp]
            for (c, r, w), (_, rp, wp) in zip(samples[1:], samples[:-1], strict=True)]
    return {"busy_cycles": busy, "every": every, "samples": rows,
            "read_words": samples[-1][1] - r0, "write_words": samples[-1][2] - w0}


def trace_table(record: dict, width: int = 40) -> str:
    """A :func:`trace` as a Markdown table of words per interval, read (``r``) and written
    (``w``) drawn to scale against the most words any interval moved."""
    peak = max([r + w for _, r, w in record["samples"]] + [1])
    lines = [f"| cycle | read | written | (each {record['every']} cycles) |",
             "|---:|---:|---:|---|"]
    for c, r, w in record["samples"]:
        bar = "r" * round(width * r / peak) + "w" * round(width * w / peak)
        lines.append(f"| {c} | {r} | {w} | `{bar}` |")
    lines.append(f"\nBUSY_CYCLES {record['busy_cycles']}; {record['read_words']} words read, "
                 f"{record['write_words']} written")
    return "\n".join(lines)
