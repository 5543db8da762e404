"""The paper's published CIFAR-10 results: the one reference table every stage compares with.

Tsuzuku, Imachi, Akiba (2018), *Variance-based Gradient Compression for Efficient Distributed
Deep Learning*, Table 1: final test accuracy (%) and compression ratio (×) of each method,
trained with Adam and with momentum SGD. ``None`` where the paper gives no number.
Torch-free data, read by the grid script (experiments/paper_grid.py), the cost-model
scenario (vgcsim.models.scenario) and the report (vgcsim.reports.paper).
"""

from __future__ import annotations

from vgcsim.traces.labels import method_label

PAPER_SOURCE = "Tsuzuku, Imachi, Akiba 2018, Table 1 (CIFAR-10)"

#: The paper's rows: (optimizer, compressor, key hyperparameters, test accuracy %,
#: compression ratio ×). Hybrid rows use α = 2; QSGD's d is 128 at 2 bit, 512 at 3 and 4 bit.
PAPER_ROWS: tuple[tuple[str, str, dict[str, float], float | None, float | None], ...] = (
    ("adam", "dense", {}, 88.1, 1.0),
    ("adam", "strom", {"tau": 0.001}, 62.8, 88.5),
    ("adam", "strom", {"tau": 0.01}, 85.0, 230.1),
    ("adam", "strom", {"tau": 0.1}, 88.0, 6942.8),
    ("adam", "variance", {"alpha": 1}, 88.9, 120.7),
    ("adam", "variance", {"alpha": 1.5}, 88.9, 453.3),
    ("adam", "variance", {"alpha": 2}, 88.9, 913.4),
    ("adam", "hybrid", {"alpha": 2, "tau": 0.01}, 85.0, 1942.2),
    ("adam", "hybrid", {"alpha": 2, "tau": 0.1}, 88.2, 12822.4),
    ("adam", "qsgd", {"bits": 2, "bucket_size": 128}, 88.8, 12.3),
    ("adam", "qsgd", {"bits": 3, "bucket_size": 512}, 87.4, 14.4),
    ("adam", "qsgd", {"bits": 4, "bucket_size": 512}, 88.2, 11.0),
    ("momentum_sgd", "dense", {}, 91.7, 1.0),
    ("momentum_sgd", "strom", {"tau": 0.001}, 84.8, 6.6),
    ("momentum_sgd", "strom", {"tau": 0.01}, 10.6, 990.7),
    ("momentum_sgd", "strom", {"tau": 0.1}, 71.6, 8485.0),
    ("momentum_sgd", "variance", {"alpha": 2}, None, 383.6),
    ("momentum_sgd", "hybrid", {"alpha": 2, "tau": 0.01}, 87.6, 983.9),
    ("momentum_sgd", "hybrid", {"alpha": 2, "tau": 0.1}, 87.1, 12396.8),
    ("momentum_sgd", "qsgd", {"bits": 2, "bucket_size": 128}, 90.8, 6.6),
    ("momentum_sgd", "qsgd", {"bits": 3, "bucket_size": 512}, 91.4, 7.0),
    ("momentum_sgd", "qsgd", {"bits": 4, "bucket_size": 512}, 91.7, 4.0),
)

#: (optimizer, method label) -> (test accuracy %, compression ratio ×); labels are
#: :func:`vgcsim.traces.labels.method_label`'s.
PAPER_TABLE1: dict[tuple[str, str], tuple[float | None, float | None]] = {
    (opt, method_label(name, params)): (acc, ratio) for opt, name, params, acc, ratio in PAPER_ROWS
}


def paper_ratio(optimizer: str, key: str) -> float:
    """The paper's compression ratio of one method (KeyError if the paper gives none)."""
    ratio = PAPER_TABLE1[(optimizer, key)][1]
    if ratio is None:
        raise KeyError((optimizer, key))
    return ratio
