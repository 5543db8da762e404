"""Method labels: one name per compressor configuration, shared by every stage."""

from __future__ import annotations

import pytest

from vgcsim.traces.labels import method_label, slug
from vgcsim.traces.paper import PAPER_ROWS, PAPER_TABLE1


@pytest.mark.parametrize(
    ("name", "params", "label"),
    [
        ("variance", {"alpha": 2.0, "zeta": 0.999, "rounding": "nearest"}, "variance α=2"),
        # the default reading is not named; another one is, so the two stay apart
        ("variance", {"alpha": 2, "after_send": "reset", "below_floor": "keep"}, "variance α=2"),
        (
            "variance",
            {"alpha": 2, "after_send": "error_feedback", "below_floor": "floor"},
            "variance α=2 (error_feedback, floor)",
        ),
        (
            "hybrid",
            {"alpha": 1, "tau": 0.01, "variance_scale": "per_sample"},
            "hybrid α=1, τ=0.01 (per_sample)",
        ),
        ("strom", {"tau": 0.01}, "Strom τ=0.01"),
        ("qsgd", {"bits": 2, "bucket_size": 128, "levels": 0}, "QSGD 2 bit, d=128"),
        ("dense", {"precision": "fp32"}, "dense"),
        ("topk", {"k": 0.01, "x": [1]}, "topk k=0.01"),
        ("powersgd", {"rank": 4, "start_iter": 2, "seed": 0}, "PowerSGD r=4"),
    ],
)
def test_method_label(name, params, label):
    assert method_label(name, params) == label


@pytest.mark.parametrize(
    ("label", "expected"),
    [
        ("hybrid α=2, τ=0.1", "hybrid_alpha2_tau0.1"),
        ("variance α=2 (error_feedback, floor)", "variance_alpha2_error_feedback_floor"),
        ("QSGD 2 bit, d=128", "qsgd_2_bit_d128"),
        ("Strom τ=0.001", "strom_tau0.001"),
    ],
)
def test_slug_is_a_plain_folder_name(label, expected):
    assert slug(label) == expected


def test_paper_table_is_keyed_by_the_shared_labels():
    """Every paper row is named by method_label; no two rows of one optimizer collide."""
    assert len(PAPER_TABLE1) == len(PAPER_ROWS)
    for opt, name, params, acc, ratio in PAPER_ROWS:
        assert PAPER_TABLE1[(opt, method_label(name, params))] == (acc, ratio)
    assert ("adam", "Strom τ=0.01") in PAPER_TABLE1
    assert ("adam", "QSGD 2 bit, d=128") in PAPER_TABLE1
