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

    Parameters
    ----------
    dut : amaranth.lib.wiring.Component
        The design under test.
    *testbenches : async callable
        Testbenches (``sim.add_testbench``), each taking the simulator context.
    processes : iterable of async callable
        Processes (``sim.add_process``).
    deadline_cycles : int
        Bounds the run, so that a hung design fails the test instead of hanging it.

    Returns
    -------
    amaranth.sim.Simulator

    Notes
    -----
    ``DNN_VCD=path.vcd`` in the environment writes the run's waveforms there.
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
    """Drive ``payloads`` onto ``stream`` in order.

    Parameters
    ----------
    ctx : amaranth.sim.SimulatorContext
    stream : amaranth.lib.stream.Interface
        The stream the testbench drives (``valid``, ``payload``; it reads ``ready``).
    payloads : iterable
        The payloads, in order.
    rng : random.Random, optional
        With ``stall``, draws the idle cycles.
    stall : float
        Probability of an idle cycle (``valid`` low) before each beat.
    """
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
    """Accept ``count`` beats from ``stream``.

    Parameters
    ----------
    ctx : amaranth.sim.SimulatorContext
    stream : amaranth.lib.stream.Interface
        The stream the testbench takes (it drives ``ready``).
    count : int
        Beats to accept.
    rng : random.Random, optional
        With ``stall``, draws the cycles with ``ready`` low.
    stall : float
        Probability of ``ready`` low in a cycle.
    convert : callable
        Applied to each payload (e.g. :func:`layout_fields`).

    Returns
    -------
    list
        ``convert(payload)`` of each beat, in order.
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
