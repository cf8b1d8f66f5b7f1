"""The board runtime with numpy alone, as a PYNQ image runs it.

A child process where Amaranth, scikit-learn, matplotlib, scipy, torch, cocotb and pytest
cannot be imported drives ``Device("pynq", board="pynq-z1")`` over a software board (the
Pynq-Z1's default configuration as the compiled Verilator model, built here by the parent):
GEMMs, the first of which plans its schedule with the performance model, device-resident
tensors and int8 training steps, each checked against the golden backend.
"""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from firmware.spec import boards

ROOT = Path(__file__).resolve().parent.parent

#: Packages a board's Python does not have.
BLOCKED = ("amaranth", "amaranth_boards", "sklearn", "mlxtend", "matplotlib", "scipy", "torch",
           "cocotb", "pytest")

#: The child: argv[1] the compiled model, argv[2] a scratch directory. Prints one JSON line.
CHILD = r"""
import importlib.abc, json, sys

class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ImportError("blocked: " + name)

sys.meta_path.insert(0, Block())
library, scratch = sys.argv[1], sys.argv[2]

import numpy as np

from firmware import Device
from firmware.ml.train import TrainConfig, run
from sim.native.pynq_sim import SimBoard, write_bitstream_dir

board = SimBoard("pynq-z1", library=library)
board.install()
bit = write_bitstream_dir(scratch + "/overlay", "pynq-z1")
dev = Device("pynq", board="pynq-z1", bitfile=bit)
gold = Device("golden", rows=dev.rows, cols=dev.cols, data_width=dev.data_width)
rng = np.random.default_rng(7)

def i8(*shape):
    return rng.integers(-128, 128, shape, dtype=np.int8)

def same(x, y):
    return (type(x) is np.ndarray and x.dtype == y.dtype and x.shape == y.shape
            and np.array_equal(x, y))

checks = {}
# GEMMs: the first plans its schedule with the performance model
assert "firmware.runtime.perfmodel" not in sys.modules
gemms = [
    (i8(37, 70), i8(70, 29), {}),
    (i8(70, 37), i8(70, 29), {"transpose_a": True, "row_exp": -3, "col_exp": 2}),
    (i8(64, 256), i8(10, 256), {"transpose_b": True, "out": "int32"}),
    (i8(5, 300), i8(300, 48), {"row_exp": rng.integers(-4, 4, 5).astype(np.int8)}),
]
for i, (a, b, kw) in enumerate(gemms):
    checks[f"gemm{i}"] = same(dev.gemm(a, b, **kw), gold.gemm(a, b, **kw))
checks["planned"] = ("firmware.runtime.perfmodel" in sys.modules
                     and dev.memory_port() is not None and dev.stats["block"] >= 1)
# device-resident tensors: resident weights, a result kept on the device and reused
w, x, d = i8(48, 32), i8(20, 48), i8(20, 32)
wt = dev.tensor(w)
y = dev.gemm(x, wt, row_exp=-1, as_tensor=True)
checks["tensor_roundtrip"] = same(wt.numpy(), w)
checks["as_tensor"] = same(y.numpy(), gold.gemm(x, w, row_exp=-1))
checks["resident_b"] = same(dev.gemm(d, wt, transpose_b=True, out="int32"),
                            gold.gemm(d, w, transpose_b=True, out="int32"))
q = dev.empty((20, 48))
q.write(x)
checks["resident_a"] = same(dev.gemm(q, wt, out="int32"), gold.gemm(x, w, out="int32"))
for t in (wt, y, q):
    t.free()
# int8 training steps (firmware.ml) on the board and on the golden backend
cfg = TrainConfig(task="rf-anomaly", precision="int8", epochs=1, batch=32, train_subset=128,
                  seed=3)
on_board = run(cfg, backend="pynq", rows=None, cols=None, quiet=True, board="pynq-z1",
               bitfile=str(bit))
golden = run(cfg, backend="golden", rows=dev.rows, cols=dev.cols, quiet=True)
checks["training"] = (on_board["weights_digest"] == golden["weights_digest"]
                      and on_board["history"] == golden["history"])
steps = cfg.train_subset // cfg.batch
blocked = sorted(m for m in sys.modules if m.split(".")[0] in BLOCKED)
print(json.dumps({"checks": checks, "steps": steps, "gemms": on_board["gemms"],
                  "cycles": on_board["accelerator_cycles"], "blocked_loaded": blocked,
                  "board_loaded": board.loaded}))
"""


@pytest.fixture(scope="module")
def library():
    """The Pynq-Z1's default configuration as a compiled model (the one tests/test_pynq.py
    simulates; cached under build/native)."""
    from sim.native import build
    from sim.native.pynq_sim import sim_params

    return build(**sim_params(boards.config("pynq-z1")))


def _child(library, scratch, code=CHILD):
    prelude = f"BLOCKED = {BLOCKED!r}\n"
    return subprocess.run([sys.executable, "-c", prelude + code, str(library), str(scratch)],
                          capture_output=True, text=True, cwd=scratch,
                          env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}, timeout=300)


def test_pynq_runtime_runs_on_numpy_alone(library, tmp_path):
    proc = _child(library, tmp_path)
    assert proc.returncode == 0, proc.stderr[-4000:]
    out = json.loads(proc.stdout.splitlines()[-1])
    assert out["checks"] == dict.fromkeys(out["checks"], True) and len(out["checks"]) == 10
    assert out["steps"] >= 3 and out["gemms"] > 0 and out["cycles"] > 0
    assert out["blocked_loaded"] == [] and out["board_loaded"]


def test_the_child_cannot_import_what_a_board_lacks(library, tmp_path):
    """The blocker works: importing any blocked package fails in the child."""
    code = """
import importlib.abc, sys
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ImportError("blocked: " + name)
sys.meta_path.insert(0, Block())
failed = []
for name in BLOCKED:
    try:
        __import__(name)
    except ImportError:
        failed.append(name)
print(",".join(failed))
"""
    proc = _child(library, tmp_path, code)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == [",".join(BLOCKED)]
