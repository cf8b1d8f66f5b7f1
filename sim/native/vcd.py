"""Cycle counts from a native model's waveforms (``BFP_NATIVE_VCD``): how long a signal is
high, and how long an FSM spends in each state, the walker's by name.

``python -m sim.native.vcd run.vcd`` prints the walker's states over the run (from the
first cycle it leaves IDLE to the trace's end) and the cycles the engine's array steps;
with ``--k-blocks`` and ``--conv``, the state names of a walker built so (they set which
states exist, and so their encoding). A run's cycles in each state say where the walker
waits: EXP_WAIT for a bank of exponent registers, LOAD for the load sequencer, CMD for the
command queue or the cursor, PROBE for the offsets it skips. Trace with
``BFP_NATIVE_VCD_DEPTH=4`` at least (the walker's registers).
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path

__all__ = ["sample", "walker_states", "main"]

#: The engine's signals :func:`main` reads, by their dotted names from the accelerator.
WALK_STATE = "bfp_accel.engine.walker.walk_state"
STEP = "bfp_accel.engine.step"


def sample(path: str | Path, names: list[str]):
    """Each rising edge's values of the signals ``names`` (dotted from the accelerator, as
    ``WALK_STATE``): yields a tuple a cycle, in ``names``' order (x and z read as 0).

    Raises
    ------
    ValueError
        A name the VCD does not have (traced too shallow: ``BFP_NATIVE_VCD_DEPTH``).
    """
    want, ids, scope = {n: i for i, n in enumerate(names)}, {}, []
    with open(path) as f:
        for line in f:
            if line.startswith("$enddefinitions"):
                break
            t = line.split()
            if t[:1] == ["$scope"]:
                scope.append(t[2])
            elif t[:1] == ["$upscope"]:
                scope.pop()
            elif t[:1] == ["$var"]:
                name = ".".join(scope[1:] + [t[4]])
                if name in want:
                    ids.setdefault(t[3], want[name])
        missing = set(range(len(names))) - set(ids.values())
        if missing:
            raise ValueError(f"names: {sorted(names[i] for i in missing)} not in {path}")
        values, time = [0] * len(names), 0
        for line in f:
            c = line[0]
            if c == "#":
                if time % 2 == 1:                  # (odd times: after the rising edge)
                    yield tuple(values)
                time = int(line[1:])
            elif c in "01xz":
                i = ids.get(line[1:].strip())
                if i is not None:
                    values[i] = int(c == "1")
            elif c == "b":
                bits, ident = line[1:].split()
                i = ids.get(ident)
                if i is not None:
                    values[i] = int(bits.replace("x", "0").replace("z", "0"), 2)
        if time % 2 == 1:                          # (the last rising edge)
            yield tuple(values)


def walker_states(k_blocks: bool = False, conv: bool = False) -> dict[int, str]:
    """The walker's state names by encoding, as Amaranth numbers them for a
    :class:`rtl.walker.Walker` with ``k_blocks`` and ``conv``."""
    from amaranth.hdl import Fragment

    from rtl.walker import Walker
    walker = Walker(8, 8, depth=64, block=4, data_width=64, tag_width=4,
                    k_blocks=k_blocks or conv, conv=conv)
    frag = Fragment.get(walker, None)
    for stmts in frag.statements.values():
        for stmt in stmts:
            for sig in stmt._lhs_signals():
                if sig.name == "walk_state":
                    out = {}
                    for code in range(1 << len(sig)):
                        try:
                            out[code] = sig.decoder(code).split("/")[0]
                        except KeyError:
                            pass
                    return out
    raise RuntimeError("the walker's FSM state signal was not found")


def main(argv=None) -> int:
    """The command line, ``python -m sim.native.vcd``; the exit status."""
    p = argparse.ArgumentParser(prog="python -m sim.native.vcd", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("vcd", type=Path)
    p.add_argument("--k-blocks", action="store_true", help="the model was built with k_blocks")
    p.add_argument("--conv", action="store_true", help="... and with conv")
    args = p.parse_args(argv)
    if not args.vcd.is_file():
        p.error(f"no VCD at {args.vcd}")
    states = walker_states(args.k_blocks, args.conv)
    hist, steps, cycles = Counter(), 0, 0
    try:
        for state, step in sample(args.vcd, [WALK_STATE, STEP]):
            if state or cycles:
                cycles += 1
                hist[states.get(state, str(state))] += 1
                steps += step
    except ValueError as e:
        p.error(str(e))
    print(f"walker: {cycles} cycles from its first step out of IDLE; the array stepped in "
          f"{steps}")
    for name, n in hist.most_common():
        print(f"  {name:10s} {n:9d}  {100 * n / max(1, cycles):5.1f} %")
    return 0


if __name__ == "__main__":
    sys.exit(main())
