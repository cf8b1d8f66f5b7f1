"""The README's PyTorch example runs: a short training run on the golden backend, and bad
options exit with status 2."""

import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch", reason="PyTorch is the optional extra 'torch'")

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "torch_fashion_mnist.py"


def run(*args):
    return subprocess.run([sys.executable, str(EXAMPLE), *args], capture_output=True,
                          text=True, cwd=ROOT, timeout=300)


def test_torch_example_trains_an_epoch():
    proc = run("--epochs", "1", "--swa-epochs", "0", "--train-subset", "256",
               "--test-subset", "100")
    assert proc.returncode == 0, proc.stderr[-3000:]
    epochs = [line for line in proc.stdout.splitlines() if line.startswith("epoch ")]
    assert len(epochs) == 1
    assert "test accuracy" in epochs[0] and "GEMMs" in epochs[0]
    assert int(epochs[0].split(" GEMMs")[0].rsplit(" ", 1)[1]) > 0


@pytest.mark.parametrize("args,message", [
    (["--epochs", "0"], "--epochs"),
    (["--backend", "cuda"], "--backend"),
])
def test_torch_example_rejects_bad_options(args, message):
    proc = run(*args)
    assert proc.returncode == 2
    assert message in proc.stderr
