"""Amaranth-simulator helpers: stream drivers and monitors with random valid/ready stalls.

Waveforms are written only on request: set ``DNN_VCD=path.vcd`` to dump the next simulation.
"""

from __future__ import annotations

import os
import random

from amaranth.sim import Simulator

__all__ = ["run", "stream_send", "stream_recv", "stream_collect", "layout_fields"]


def run(dut, *testbenches, processes=(), deadline_cycles: int = 200_000):
    """Simulate ``dut`` with a 1 MHz ``sync`` clock until every testbench returns.

    ``deadline_cycles`` bounds the run so a hung design fails the test instead of hanging it.
    """
    sim = Simulator(dut)
    sim.add_clock(1e-6)
    for tb in testbenches:
        sim.add_testbench(tb)
    for proc in processes:
        sim.add_process(proc)
    vcd = os.environ.get("DNN_VCD")
    if vcd:
        with sim.write_vcd(vcd):
            sim.run_until(deadline_cycles * 1e-6)
    else:
        sim.run_until(deadline_cycles * 1e-6)
    return sim


async def stream_send(ctx, stream, payloads, *, rng: random.Random | None = None,
                      stall: float = 0.0):
    """Drive ``payloads`` onto ``stream`` in order, idling a random cycle with prob. ``stall``."""
    for payload in payloads:
        while rng is not None and rng.random() < stall:
            ctx.set(stream.valid, 0)
            await ctx.tick()
        ctx.set(stream.payload, payload)
        ctx.set(stream.valid, 1)
        await ctx.tick().until(stream.ready)
    ctx.set(stream.valid, 0)


async def stream_recv(ctx, stream, count: int, *, rng: random.Random | None = None,
                      stall: float = 0.0, convert=lambda p: p):
    """Accept ``count`` beats from ``stream``, deasserting ready at random with prob. ``stall``.

    Returns the list of ``convert(payload)`` for each beat, in order.
    """
    beats = []
    while len(beats) < count:
        ready = not (rng is not None and rng.random() < stall)
        ctx.set(stream.ready, ready)
        _, _, valid, payload = await ctx.tick().sample(stream.valid, stream.payload)
        if ready and valid:
            beats.append(convert(payload))
    ctx.set(stream.ready, 0)
    return beats


def stream_collect(got: dict, name: str, stream, count: int, *,
                   rng: random.Random | None = None, stall: float = 0.0, convert=lambda p: p):
    """A testbench that receives ``count`` beats from ``stream`` (:func:`stream_recv`, with
    its ``rng``, ``stall`` and ``convert``) into ``got[name]``."""
    async def take(ctx):
        got[name] = await stream_recv(ctx, stream, count, rng=rng, stall=stall,
                                      convert=convert)
    return take


def layout_fields(layout):
    """A :func:`stream_recv` ``convert`` for a ``lib.data`` struct payload: its fields as a
    dict of ints, in the layout's order."""
    names = [name for name, _ in layout]
    return lambda p: {name: int(getattr(p, name)) for name in names}
