"""Fashion-MNIST: the IDX loader (plain and gzipped, any directory, clear errors), the real
data's shapes when Debian's package is installed, and the fashion-mlp / fashion-cnn tasks
training a step in fp32 and int8 (golden backend) on tiny IDX files."""

import gzip
import json
import struct

import numpy as np
import pytest

from firmware.ml import data, nn
from firmware.ml.train import TASKS, TrainConfig, main, run

STEMS = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte",
         "t10k-labels-idx1-ubyte")


def _idx_bytes(a: np.ndarray) -> bytes:
    """``a`` (uint8) in the IDX format: two zero bytes, type 0x08, rank, big-endian dims."""
    a = np.ascontiguousarray(a, np.uint8)
    return bytes([0, 0, 0x08, a.ndim]) + struct.pack(f">{a.ndim}I", *a.shape) + a.tobytes()


def _write_set(directory, n_train=40, n_test=24, gz=True, seed=0, size=28):
    """Four IDX files of random images and labels 0..9 in ``directory``; the arrays."""
    rng = np.random.default_rng(seed)
    arrays = (rng.integers(0, 256, (n_train, size, size)), np.arange(n_train) % 10,
              rng.integers(0, 256, (n_test, size, size)), np.arange(n_test)[::-1] % 10)
    directory.mkdir(parents=True, exist_ok=True)
    for i, (stem, a) in enumerate(zip(STEMS, arrays, strict=True)):
        raw = _idx_bytes(a)
        zipped = gz if isinstance(gz, bool) else gz[i]
        if zipped:
            (directory / (stem + ".gz")).write_bytes(gzip.compress(raw))
        else:
            (directory / stem).write_bytes(raw)
    return arrays


@pytest.mark.parametrize("gz", [True, False, (True, False, False, True)],
                         ids=["gz", "plain", "mixed"])
def test_loader_reads_idx_files(tmp_path, gz):
    arrays = _write_set(tmp_path / "fm", gz=gz)
    xtr, ytr, xte, yte = data.fashion_mnist(tmp_path / "fm")
    assert xtr.shape == (40, 784) and xte.shape == (24, 784)
    assert xtr.dtype == xte.dtype == np.float32
    assert ytr.dtype == yte.dtype == np.int64
    np.testing.assert_array_equal(xtr, (arrays[0].reshape(40, 784) / 255.0).astype(np.float32))
    np.testing.assert_array_equal(ytr, arrays[1])
    np.testing.assert_array_equal(yte, arrays[3])
    assert 0.0 <= xtr.min() and xtr.max() <= 1.0
    img = data.fashion_mnist(str(tmp_path / "fm"), image=True)   # str works too
    assert img[0].shape == (40, 1, 28, 28) and img[2].shape == (24, 1, 28, 28)
    np.testing.assert_array_equal(img[0].reshape(40, 784), xtr)


def test_mnist_idx_shares_the_reader(tmp_path):
    _write_set(tmp_path, gz=False)
    for a, b in zip(data.mnist(tmp_path), data.fashion_mnist(tmp_path), strict=True):
        np.testing.assert_array_equal(a, b)
        assert a.dtype == b.dtype


def test_environment_variable_names_the_directory(tmp_path, monkeypatch):
    _write_set(tmp_path / "elsewhere", n_train=20, n_test=10)
    monkeypatch.setenv(data.FASHION_MNIST_ENV, str(tmp_path / "elsewhere"))
    assert data.fashion_mnist()[0].shape == (20, 784)
    _write_set(tmp_path / "given", n_train=30, n_test=10)
    assert data.fashion_mnist(tmp_path / "given")[0].shape == (30, 784)   # argument wins


def test_missing_directory_says_how_to_get_the_files(tmp_path, monkeypatch):
    missing = tmp_path / "nowhere"
    with pytest.raises(FileNotFoundError) as e:
        data.fashion_mnist(missing)
    msg = str(e.value)
    assert "idx_dir" in msg and str(missing) in msg
    assert "apt-get install dataset-fashion-mnist" in msg and "BFP_FASHION_DIR" in msg
    monkeypatch.setenv(data.FASHION_MNIST_ENV, str(missing))
    with pytest.raises(FileNotFoundError, match="nowhere"):
        data.fashion_mnist()


def test_missing_file_is_named(tmp_path):
    _write_set(tmp_path)
    (tmp_path / "t10k-labels-idx1-ubyte.gz").unlink()
    with pytest.raises(FileNotFoundError, match=r"has no t10k-labels-idx1-ubyte or "
                                                r"t10k-labels-idx1-ubyte\.gz") as e:
        data.fashion_mnist(tmp_path)
    assert str(tmp_path) in str(e.value)
    with pytest.raises(FileNotFoundError, match="idx_dir"):
        data.mnist(tmp_path)


def test_malformed_files_are_value_errors(tmp_path):
    _write_set(tmp_path, gz=False)
    (tmp_path / "train-labels-idx1-ubyte").write_bytes(_idx_bytes(np.zeros(39)))
    with pytest.raises(ValueError, match="40 images but .* 39 labels"):
        data.fashion_mnist(tmp_path)
    (tmp_path / "train-labels-idx1-ubyte").write_bytes(b"not an idx file")
    with pytest.raises(ValueError, match="not an IDX file"):
        data.fashion_mnist(tmp_path)
    (tmp_path / "train-labels-idx1-ubyte").write_bytes(_idx_bytes(np.zeros((40, 2))))
    with pytest.raises(ValueError, match="N labels"):
        data.fashion_mnist(tmp_path)


@pytest.mark.skipif(not (data.FASHION_MNIST_DIR / "train-images-idx3-ubyte.gz").exists(),
                    reason="Debian's dataset-fashion-mnist is not installed")
def test_real_data_shapes(monkeypatch):
    monkeypatch.delenv(data.FASHION_MNIST_ENV, raising=False)
    xtr, ytr, xte, yte = data.fashion_mnist()
    assert xtr.shape == (60000, 784) and xte.shape == (10000, 784)
    assert xtr.dtype == np.float32 and ytr.dtype == np.int64
    assert 0.0 == xtr.min() and xtr.max() == 1.0
    np.testing.assert_array_equal(np.bincount(ytr), [6000] * 10)
    np.testing.assert_array_equal(np.bincount(yte), [1000] * 10)


@pytest.fixture
def tiny_fashion(tmp_path, monkeypatch):
    """The fashion tasks read 64 training and 32 test images from tmp_path."""
    _write_set(tmp_path / "tiny", n_train=64, n_test=32)
    monkeypatch.setenv(data.FASHION_MNIST_ENV, str(tmp_path / "tiny"))
    return tmp_path / "tiny"


@pytest.mark.parametrize("precision", ["fp32", "int8"])
@pytest.mark.parametrize("task", ["fashion-mlp", "fashion-cnn"])
def test_tasks_train_a_step(tiny_fashion, task, precision):
    t = TASKS[task]
    assert t.batch == 128 and t.loss == "xent" and t.metric == "accuracy"
    xtr = t.load()[0]
    assert xtr.shape == ((64, 784) if task == "fashion-mlp" else (64, 1, 28, 28))
    out = t.make(np.random.default_rng(0)).forward(xtr[:3], nn.Engine())
    assert out.shape == (3, 10)
    r = run(TrainConfig(task=task, precision=precision, epochs=1, batch=16, train_subset=16),
            quiet=True)
    assert len(r["history"]) == 1 and np.isfinite(r["history"][0]["loss"])
    assert r["profile"]["counts"]["steps"] == 1           # 16 of the 64 images, one batch
    assert 0.0 <= r["test_metric"] <= 1.0
    assert r["backend"] == ("golden" if precision == "int8" else "numpy")


def test_train_subset_is_checked_and_on_the_command_line(tiny_fashion, tmp_path, capsys):
    with pytest.raises(ValueError, match="train_subset"):
        TrainConfig(task="fashion-mlp", train_subset=0).check()
    with pytest.raises(SystemExit):
        main(["--task", "fashion-mlp", "--epochs", "1", "--train-subset", "0"])
    assert "--train-subset" in capsys.readouterr().err
    out = tmp_path / "r.json"
    assert main(["--task", "fashion-mlp", "--precision", "fp32", "--epochs", "1",
                 "--batch", "8", "--train-subset", "24", "--out", str(out)]) == 0
    result = json.loads(out.read_text())
    assert result["task"] == "fashion-mlp" and result["profile"]["counts"]["steps"] == 3
