"""The paper's published CIFAR-10 results, as reference rows for the methods table.

Tsuzuku, Imachi, Akiba (2018), *Variance-based Gradient Compression for Efficient
Distributed Deep Learning*, Table 1: final test accuracy (%) and compression ratio (×) of
each method, trained with Adam and with momentum SGD. ``None`` where the paper gives no
number. Recorded traces are matched to these rows by optimizer and by the key
hyperparameters of their compressor: its method label (:func:`paper_key`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pandas as pd

from vgcsim.traces.labels import method_label
from vgcsim.traces.paper import PAPER_SOURCE, PAPER_TABLE1

__all__ = ["PAPER_SOURCE", "PAPER_TABLE1", "paper_encoding", "paper_frame", "paper_key"]

_PAPER_LABELS = frozenset(label for _, label in PAPER_TABLE1)


def paper_key(compressor: str, params: Mapping[str, Any] | None) -> str | None:
    """The Table 1 row a compressor configuration corresponds to (its
    :func:`~vgcsim.traces.labels.method_label`), or None.

    Hybrid rows of the paper use α = 2; dense rows are fp32. Variance and hybrid traces
    recorded under another reading of the post-send rule than the paper's (``after_send``
    other than "reset", ``below_floor`` other than "keep", ``variance_scale`` other than
    "batch_mean") name that reading in their label and so match no row; traces whose
    parameters do not name the reading match.
    """
    label = method_label(compressor, params)
    return label if label in _PAPER_LABELS else None


def paper_encoding(compressor: str) -> str:
    """The encoding under which the paper counts a method's bits, in our encodings' names:
    dense fp32 values, QSGD's Elias-coded levels (``qsgd_elias``), and for the sparse
    methods one 32-bit word per element, a 28-bit index and a 4-bit code (``packed32``,
    our reading of the paper's format; docs/compression.md)."""
    if compressor == "dense":
        return "fp32"
    if compressor == "qsgd":
        return "qsgd_elias"
    return "packed32"


def paper_frame() -> pd.DataFrame:
    """Table 1 as a frame: optimizer, paper_key, paper_test_acc (fraction), paper_ratio."""
    rows = [
        {
            "optimizer": opt,
            "paper_key": key,
            "paper_test_acc": None if acc is None else acc / 100.0,
            "paper_compression_ratio": ratio,
        }
        for (opt, key), (acc, ratio) in PAPER_TABLE1.items()
    ]
    return pd.DataFrame(rows).astype(
        {"paper_test_acc": "float64", "paper_compression_ratio": "float64"}
    )
