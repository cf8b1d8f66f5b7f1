import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rtl.rescale import Rescaler
from sim.models.golden import rescale_bits
from sim.testbenches.harness import run, stream_recv, stream_send


def expected_word(acc: int, exp: int, raw: bool) -> int:
    if raw:
        return acc & 0xFFFFFFFF
    with np.errstate(over="ignore"):
        ref = np.float32(np.float64(acc) * np.exp2(exp)).view(np.uint32)
    assert rescale_bits(acc, exp) == int(ref)  # the stage-by-stage algorithm is the spec
    return int(ref)


def simulate(lanes, beats, *, seed=0, stall=0.3):
    """``beats`` is a list of (accs, exps, raw); returns the output words per beat."""
    dut = Rescaler(lanes)
    rng = random.Random(seed)
    payloads = [{"acc": list(a), "exp": list(e), "raw": raw, "last": i == len(beats) - 1}
                for i, (a, e, raw) in enumerate(beats)]
    got = []

    async def producer(ctx):
        await stream_send(ctx, dut.i_stream, payloads, rng=rng, stall=stall)

    async def consumer(ctx):
        got.extend(await stream_recv(
            ctx, dut.o_stream, len(beats), rng=rng, stall=stall,
            convert=lambda p: ([int(w) for w in p.data], int(p.last))))

    run(dut, producer, consumer, deadline_cycles=20 * len(beats) + 100)
    assert len(got) == len(beats), "the rescaler lost or withheld beats"
    return got


def check(lanes, beats, **kw):
    got = simulate(lanes, beats, **kw)
    for i, ((accs, exps, raw), (words, last)) in enumerate(zip(beats, got, strict=True)):
        want = [expected_word(a, e, raw) for a, e in zip(accs, exps, strict=True)]
        assert words == want, f"beat {i}: acc={accs} exp={exps}: {words} != {want}"
        assert last == (i == len(beats) - 1)


EDGE_ACCS = [0, 1, -1, 2, 3, 2**31 - 1, -2**31, 2**24 - 1, 2**24, 2**24 + 1, 2**24 + 2,
             2**24 + 3, 0x1800000, 0x2800000, 0x7FFFFF80, 0x7FFFFFC0, -0x7FFFFFC0, 12345, -7]


def test_exponent_sweep_into_overflow_and_subnormals():
    # Every exponent from -256 to 254 over edge-case magnitudes: the subnormal range
    # (E < -126), the flush to zero (below 2**-150), ties, and overflow to infinity (E > 127).
    lanes = 4
    beats = []
    for exp in range(-256, 255):
        for i in range(0, len(EDGE_ACCS), lanes):
            accs = (EDGE_ACCS[i:i + lanes] + [5] * lanes)[:lanes]
            beats.append((accs, [exp] * lanes, False))
    check(lanes, beats, stall=0.0)


def test_every_leading_and_trailing_bit_position():
    # The zero counts (a tree over the magnitude's bits) for every highest and lowest set bit:
    # 2**i + 2**j and their negatives, at an exponent that keeps every bit and at ones where
    # the low bits decide rounding (sticky) and subnormals.
    lanes = 4
    accs = [s * ((1 << i) | (1 << j)) for i in range(31) for j in range(i, 31)
            for s in (1, -1)] + [-2**31]
    accs += [0] * (-len(accs) % lanes)
    beats = [(accs[i:i + lanes], [exp] * lanes, False) for exp in (0, -20, -140)
             for i in range(0, len(accs), lanes)]
    check(lanes, beats, stall=0.0)


def test_ties_round_to_even():
    # 2**24 + 1 and 2**24 + 3 are exact ties in float32: they must go to the even neighbour.
    ties = [2**24 + 1, 2**24 + 3, -(2**24 + 1), -(2**24 + 3)]
    got = simulate(4, [(ties, [0] * 4, False)])
    assert got[0][0] == [int(np.float32(v).view(np.uint32)) for v in
                         (2.0**24, 2.0**24 + 4, -(2.0**24), -(2.0**24 + 4))]


def test_raw_mode_passes_int32_through():
    check(3, [([-2**31, 2**31 - 1, -5], [17, -200, 3], True)])


@settings(max_examples=25, deadline=None)
@given(lanes=st.integers(1, 5), seed=st.integers(0, 2**16),
       data=st.data())
def test_random_with_stalls(lanes, seed, data):
    n = data.draw(st.integers(1, 12))
    acc = st.integers(-2**31, 2**31 - 1)
    exp = st.integers(-256, 254)
    beats = [(data.draw(st.lists(acc, min_size=lanes, max_size=lanes)),
              data.draw(st.lists(exp, min_size=lanes, max_size=lanes)),
              data.draw(st.booleans())) for _ in range(n)]
    check(lanes, beats, seed=seed, stall=0.4)


def test_bad_lanes():
    with pytest.raises(ValueError, match="lanes"):
        Rescaler(0)
