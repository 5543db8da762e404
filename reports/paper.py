"""The paper's published CIFAR-10 results, as reference rows for the methods table.

Tsuzuku, Imachi, Akiba (2018), *Variance-based Gradient Compression for Efficient
Distributed Deep Learning*, Table 1: final test accuracy (%) and compression ratio (×) of
each method, trained with Adam and with momentum SGD. ``None`` where the paper gives no
number. Recorded traces are matched to these rows by optimizer and by the key
hyperparameters of their compressor (:func:`paper_key`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pandas as pd

PAPER_SOURCE = "Tsuzuku, Imachi, Akiba 2018, Table 1 (CIFAR-10)"

#: (optimizer, method key) -> (test accuracy %, compression ratio ×)
PAPER_TABLE1: dict[tuple[str, str], tuple[float | None, float | None]] = {
    ("adam", "dense"): (88.1, 1.0),
    ("adam", "strom τ=0.001"): (62.8, 88.5),
    ("adam", "strom τ=0.01"): (85.0, 230.1),
    ("adam", "strom τ=0.1"): (88.0, 6942.8),
    ("adam", "variance α=1"): (88.9, 120.7),
    ("adam", "variance α=1.5"): (88.9, 453.3),
    ("adam", "variance α=2"): (88.9, 913.4),
    ("adam", "hybrid τ=0.01"): (85.0, 1942.2),
    ("adam", "hybrid τ=0.1"): (88.2, 12822.4),
    ("adam", "qsgd 2bit d=128"): (88.8, 12.3),
    ("adam", "qsgd 3bit d=512"): (87.4, 14.4),
    ("adam", "qsgd 4bit d=512"): (88.2, 11.0),
    ("momentum_sgd", "dense"): (91.7, 1.0),
    ("momentum_sgd", "strom τ=0.001"): (84.8, 6.6),
    ("momentum_sgd", "strom τ=0.01"): (10.6, 990.7),
    ("momentum_sgd", "strom τ=0.1"): (71.6, 8485.0),
    ("momentum_sgd", "variance α=2"): (None, 383.6),
    ("momentum_sgd", "hybrid τ=0.01"): (87.6, 983.9),
    ("momentum_sgd", "hybrid τ=0.1"): (87.1, 12396.8),
    ("momentum_sgd", "qsgd 2bit d=128"): (90.8, 6.6),
    ("momentum_sgd", "qsgd 3bit d=512"): (91.4, 7.0),
    ("momentum_sgd", "qsgd 4bit d=512"): (91.7, 4.0),
}


def _g(value: Any) -> str:
    return f"{value:g}" if isinstance(value, (int, float)) else str(value)


def paper_key(compressor: str, params: Mapping[str, Any] | None) -> str | None:
    """The Table 1 row a compressor configuration corresponds to, or None.

    Hybrid rows of the paper use α = 2; dense rows are fp32.
    """
    p = dict(params or {})
    if compressor == "dense":
        return "dense" if p.get("precision", "fp32") == "fp32" else None
    if compressor == "variance" and "alpha" in p:
        return f"variance α={_g(p['alpha'])}"
    if compressor == "strom" and "tau" in p:
        return f"strom τ={_g(p['tau'])}"
    if compressor == "hybrid" and "tau" in p and float(p.get("alpha", 2.0)) == 2.0:
        return f"hybrid τ={_g(p['tau'])}"
    if compressor == "qsgd" and "bits" in p and "bucket_size" in p:
        return f"qsgd {_g(p['bits'])}bit d={_g(p['bucket_size'])}"
    return None


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
