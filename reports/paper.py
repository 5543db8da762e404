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
from vgcsim.traces.paper import PAPER_SOURCE, PAPER_TABLE1

__all__ = ["PAPER_SOURCE", "PAPER_TABLE1", "paper_frame", "paper_key"]


def _g(value: Any) -> str:
    return f"{value:g}" if isinstance(value, (int, float)) else str(value)


#: The paper's reading of Algorithm 1's post-send rule (compressor parameter -> value).
_PAPER_READING = {"after_send": "reset", "below_floor": "keep", "variance_scale": "batch_mean"}


def paper_key(compressor: str, params: Mapping[str, Any] | None) -> str | None:
    """The Table 1 row a compressor configuration corresponds to, or None.

    Hybrid rows of the paper use α = 2; dense rows are fp32. Variance and hybrid traces
    recorded under another reading of the post-send rule than the paper's (``after_send``
    other than "reset", ``below_floor`` other than "keep", ``variance_scale`` other than
    "batch_mean") match no row; traces whose parameters do not name the reading match.
    """
    p = dict(params or {})
    if compressor in ("variance", "hybrid") and any(
        k in p and p[k] != v for k, v in _PAPER_READING.items()
    ):
        return None
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
