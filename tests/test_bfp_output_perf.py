"""The performance model of a BFP8 C (walked in blocks of one tile block,
:func:`sim.models.functional.bfp8_block`) and of a quantise-only descriptor against the
RTL's cycles on the Pynq-Z1's shape, bus and ports."""

import numpy as np
import pytest

from firmware import Device
from sim.models import bfp
from sim.models.functional import bfp8_block

OPTIONS = dict(rows=16, cols=16, data_width=64, depth=64, block=8, write_ports=4,
               read_ports=3)


@pytest.fixture(scope="module")
def devs():
    rtl = Device("rtl", latency=24, pause=0.2, seed=7, k_blocks=True, epilogue=True,
                 **OPTIONS)
    model = Device("model", port=rtl.sim.port, burst_beats=rtl.sim.params["burst_beats"],
                   **OPTIONS)
    yield rtl, model
    assert rtl.sim.violations == 0


def test_block_of_one_tile_block():
    assert [bfp8_block(r, c) for r, c in ((16, 16), (8, 8), (4, 4), (16, 32))] == [2, 4, 8, 1]
    # whole tile blocks in every C tile: the walk keeps its block
    assert bfp8_block(32, 64) is None and bfp8_block(64, 128) is None


@pytest.mark.slow
@pytest.mark.parametrize("m,n,k,ta,tb", [(64, 64, 256, False, False),
                                         (128, 128, 128, False, True),
                                         (256, 256, 64, False, False)])
def test_bfp8_cycles_match_the_model(devs, m, n, k, ta, tb):
    """Within 8 % of the functional model's prediction, which times the smaller block;
    the float32 C of the same GEMM is faster (the board's block of 8 reloads less)."""
    rtl, model = devs
    rng = np.random.default_rng(k + m)
    qa, ea = bfp.quantize_tiles(rng.standard_normal((k, m) if ta else (m, k)).astype(np.float32))
    qb, eb = bfp.quantize_tiles(rng.standard_normal((n, k) if tb else (k, n)).astype(np.float32))
    cycles = {}
    for dev in (rtl, model):
        for out in ("bfp8", "float32"):
            dev.bfp_gemm(dev.bfp_tensor(qa, ea), dev.bfp_tensor(qb, eb), transpose_a=ta,
                         transpose_b=tb, out=out)
            cycles[dev.backend, out] = dev.stats["cycles"]
    assert abs(cycles["model", "bfp8"] / cycles["rtl", "bfp8"] - 1) < 0.08
    assert cycles["rtl", "float32"] < cycles["rtl", "bfp8"]
    assert cycles["model", "float32"] < cycles["model", "bfp8"]


@pytest.mark.slow
@pytest.mark.parametrize("m,n", [(64, 64), (40, 70), (128, 128), (128, 10), (1, 256),
                                 (3, 64)])
def test_quantize_cycles_match_the_model(devs, m, n):
    """A quantise-only descriptor within 8 % of
    :func:`firmware.runtime.perfmodel.predict_quantize`: the float32 matrix read a tile row
    a burst, a slot a cycle for the bus words beyond N and the tile rows beyond M (an input
    batch of one channel is one row), the last unit through the write-back (narrow
    matrices' short bursts are the model's largest error)."""
    rtl, model = devs
    x = np.random.default_rng(m + n).standard_normal((m, n)).astype(np.float32)
    cycles = {}
    for dev in (rtl, model):
        dev.quantize(x, rounding="stochastic", seed=3)
        cycles[dev.backend] = dev.stats["cycles"]
    assert abs(cycles["model"] / cycles["rtl"] - 1) < 0.08, cycles
