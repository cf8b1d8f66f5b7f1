"""Recorded descriptor chains (``CTRL.RUN_CHAIN``, :meth:`firmware.Device.record`): a
replay computes what the calls compute one by one, ``CHAIN_SEED`` advances the rounding
bits, a chain may only write descriptor registers, and a recorded training step replays
with two doorbells bit for bit as the golden backend's step."""

import numpy as np
import pytest

from firmware import Device
from firmware.runtime.device import AcceleratorError
from firmware.spec import regmap
from firmware.spec.regmap import ErrorCode, offset
from sim.models import bfp
from tests.test_resident_conv import _same_params


@pytest.fixture()
def dev():
    return Device("model", rows=8, cols=8)


def test_replay_is_the_calls_and_the_seed_is_xored(dev):
    """A quantise and a GEMM recorded, replayed twice with seeds s: the stochastic roundings
    of seed ``seed ^ s``, the GEMM reading the quantised operand the chain wrote."""
    rng = np.random.default_rng(0)
    a, b = (rng.standard_normal(s).astype(np.float32) for s in ((40, 70), (70, 24)))
    xa, xb = dev.tensor(a), dev.tensor(b)
    with dev.record() as prog:
        qa = dev.quantize(xa, rounding="stochastic", seed=0x100)
        qb = dev.quantize(xb)
        c = dev.bfp_gemm(qa, qb, out="float32")
    assert prog.descriptors == 3 and prog.entries > 3
    for s in (0, 0x2300):
        prog.run(seed=s)
        ga = bfp.quantize_tiles(a, rounding="stochastic", seed=0x100 ^ s)
        np.testing.assert_array_equal(qa.mantissas(), ga[0])
        gb = bfp.quantize_tiles(b)
        want = bfp.gemm_kblocks(*ga, *gb)
        np.testing.assert_array_equal(c.numpy().view(np.uint32), want.view(np.uint32))
    assert dev.stats["descriptors"] == 3 and dev.stats["macs"] == 40 * 24 * 70


def test_recording_runs_nothing_and_refuses_what_would_run_out_of_order(dev):
    x = dev.tensor(np.ones((8, 8), np.float32))
    before = dev.sim.descriptors
    with dev.record() as prog:
        dev.quantize(x)
        with pytest.raises(RuntimeError, match="recording already"):
            with dev.record():
                pass
        with pytest.raises(RuntimeError, match="out of order"):
            dev.driver.run(dict(m=1, n=1, k=1))
    assert dev.sim.descriptors == before and prog.descriptors == 1
    with pytest.raises(RuntimeError, match="no descriptor chains"):
        with Device("golden").record():
            pass
    with pytest.raises(ValueError, match="made no descriptor"):
        with dev.record():
            pass
    with pytest.raises(ValueError, match="seed must be"):
        prog.run(seed=-1)
    prog.free()
    with pytest.raises(RuntimeError, match="not recorded"):
        prog.run()


def test_a_chain_may_write_descriptor_registers_only(dev):
    """An entry writing WINDOW_BASE, or CTRL with SOFT_RESET, stops the chain with
    BAD_CHAIN; a chain outside the window with OUT_OF_WINDOW."""
    enqueue = regmap.pack("CTRL", ENQUEUE=1)
    for entry in ((offset("WINDOW_BASE_LO"), 0), (offset("CTRL"), 2),
                  (offset("CTRL"), enqueue | 2)):
        chain = dev.tensor(np.array([[offset("DESC_M"), 1, *entry]], np.uint32))
        with pytest.raises(AcceleratorError) as e:
            dev.driver.run_chain(chain.addr, 2, regions=[(chain.addr, chain.addr + 16)],
                                 max_cycles=1 << 12)
        assert e.value.code is ErrorCode.BAD_CHAIN, entry
    chain = dev.tensor(np.array([[offset("DESC_M"), 1]], np.uint32))
    with pytest.raises(AcceleratorError) as e:
        dev.driver.run_chain(chain.addr, 1, regions=[(chain.addr + 4096, chain.addr + 8192)],
                             max_cycles=1 << 12)
    assert e.value.code is ErrorCode.OUT_OF_WINDOW
    dev.quantize(np.ones((4, 4), np.float32))            # and it works again


def test_recorded_training_step_matches_golden_and_rings_twice(monkeypatch):
    """ResidentConvNet on the model replays its recorded step (no per-descriptor runs after
    the recording): its weights are the golden backend's, also after the learning rate
    changes (a new recording)."""
    from firmware.ml import nn
    from firmware.ml.resident_conv import ResidentConvNet
    rng = np.random.default_rng(0)
    net = nn.Network([nn.Conv2d(2, 4, 3, rng, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                      nn.Flatten(), nn.Linear(4 * 3 * 3, 5, rng)])
    x = rng.standard_normal((8, 2, 6, 6)).astype(np.float32)
    y = rng.integers(0, 5, 8)
    model = Device("model", rows=8, cols=8)
    runs = {}
    for dev in (Device("golden"), model):
        r = ResidentConvNet(net, (2, 6, 6), dev, seed=1, lr=0.05)
        assert r.recorded == (dev is model)
        r.step(x, y)
        if dev is model:
            def refuse(*_a, **_k):
                raise AssertionError("a descriptor ran outside the recorded chains")
            monkeypatch.setattr(dev.driver, "run", refuse)
            chains = []
            real = dev.driver.run_chain
            monkeypatch.setattr(dev.driver, "run_chain",
                                lambda *a, _c=chains, _r=real, **k: _c.append(1) or _r(*a, **k))
        r.step(x, y)
        r.lr = 0.02
        r.step(x, y)
        if dev is model:
            assert len(chains) == 4
            monkeypatch.undo()
        runs[dev.backend] = r.params
    _same_params(runs["golden"], runs["model"])
