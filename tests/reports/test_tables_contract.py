"""Report tables against their documented contracts, on small hand-built frames.

Each expected value below is worked out by hand from the definition of the column (the
docstrings of ``vgcsim.reports.tables`` and the module vocabulary), not read back from the
implementation: exact sentences, exact column lists, sums and ratios of a few integers.
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
from report_data import LINKS, _row, build_results

from vgcsim.core.errors import ResultsError
from vgcsim.reports import tables

LABELS = {"var2": "variance α=2", "strom": "strom τ=0.01", "qsgd": "qsgd s=4"}


# --- trace_overview -----------------------------------------------------------------------


def _trace(**over):
    """A loaded-trace stand-in: 2 steps x 2 workers x 1 layer of 100 elements."""
    payloads = pd.DataFrame(
        {
            "step": [0, 0, 1, 1],
            "worker": [0, 1, 0, 1],
            "layer": [0, 0, 0, 0],
            "numel": [100, 100, 100, 100],
            "sent": [10, 20, 30, 40],
            "bits_packed32": [400, 700, 1000, 1300],
            "bits_fp32": [3200, 3200, 3200, 3200],
        }
    )
    base = {
        "name": "v2",
        "compressor": "variance",
        "payloads": payloads,
        "primary_encoding": "packed32",
        "workers": 2,
        "steps_count": 2,
        # unsorted on purpose: the last evaluation is the one at step 20
        "evals": pd.DataFrame({"step": [20, 5, 10], "test_acc": [0.7, 0.9, 0.8]}),
        "header": {
            "config": {"optimizer": {"name": "adam", "lr": 0.1}},
            "compressor": {"name": "variance", "params": {"alpha": 2.0}},
        },
    }
    base.update(over)
    return SimpleNamespace(**base)


def test_trace_overview_fields_by_hand():
    row = tables.trace_overview(_trace())
    assert row == {
        "trace": "v2",
        "method_label": "variance",  # no label: the compressor's name
        "encoding": "packed32",  # the trace's primary encoding: its ratio's
        "compressor": "variance",
        "optimizer": "adam",
        "paper_key": "variance α=2",  # Table 1 row of variance with alpha = 2
        "workers": 2,
        "steps": 2,
        "final_test_acc": 0.7,  # the evaluation with the largest step (20)
        "bits": 400 + 700 + 1000 + 1300,  # Σ bits of the primary encoding = 3400
        "dense_bits": 32 * 400,  # 32 bits per element, 4 rows of 100 elements
        "mean_density": (10 + 20 + 30 + 40) / 400,  # 0.25
    }
    assert tables.trace_overview(_trace(), "my label")["method_label"] == "my label"


def test_trace_overview_without_header_config_or_evaluations():
    t = _trace(
        header={"compressor": {"name": "dense"}},
        compressor="dense",
        evals=pd.DataFrame(columns=["step", "test_acc"]),
    )
    row = tables.trace_overview(t)
    assert row["optimizer"] == ""
    assert row["paper_key"] == "dense"  # dense rows of Table 1 need no parameters
    assert math.isnan(row["final_test_acc"])
    # an eval table without a test accuracy column, and a config that is not a mapping
    t = _trace(header={"config": "run.toml"}, evals=pd.DataFrame({"step": [1, 2]}))
    row = tables.trace_overview(t)
    assert row["optimizer"] == "" and row["paper_key"] is None
    assert math.isnan(row["final_test_acc"])


def test_trace_overview_of_a_trace_without_elements_has_no_density():
    p = _trace().payloads.assign(numel=0, sent=0)
    row = tables.trace_overview(_trace(payloads=p))
    assert row["dense_bits"] == 0
    assert math.isnan(row["mean_density"])


# --- method_table -------------------------------------------------------------------------


def _overview_row(trace, compressor, optimizer, steps, acc, bits, dense_bits, key):
    return {
        "trace": trace,
        "method_label": trace.upper(),
        "compressor": compressor,
        "optimizer": optimizer,
        "paper_key": key,
        "workers": 4,
        "steps": steps,
        "final_test_acc": acc,
        "bits": bits,
        "dense_bits": dense_bits,
        "mean_density": 1.0 if compressor == "dense" else 0.01,
    }


OVERVIEW = pd.DataFrame(
    [
        _overview_row("d_short", "dense", "adam", 5, 0.80, 100, 100, "dense"),
        _overview_row("v", "variance", "adam", 10, 0.88, 10, 1000, "variance α=2"),
        _overview_row("d_long", "dense", "adam", 10, 0.90, 100, 100, "dense"),
        _overview_row("s", "strom", "adam", 10, 0.85, 50, 1000, None),
        _overview_row("m", "variance", "momentum_sgd", 10, 0.70, 4, 400, "variance α=2"),
    ]
)
PAPER = pd.DataFrame(
    {
        "optimizer": ["adam", "adam", "momentum_sgd"],
        "paper_key": ["dense", "variance α=2", "variance α=2"],
        "paper_test_acc": [0.881, 0.889, 0.77],
        "paper_compression_ratio": [1.0, 913.4, 500.0],
    }
)


def test_method_table_with_the_paper_beside_ours():
    t = tables.method_table(OVERVIEW, PAPER)
    assert list(t.columns) == [
        "method_label",
        "optimizer",
        "trace",
        "workers",
        "steps",
        "final_test_acc",
        "paper_test_acc",
        "acc_vs_dense",
        "encoding",
        "compression_ratio",
        "paper_encoding",
        "paper_compression_ratio",
        "mean_density",
    ]
    # a ratio beside the paper's names the encoding of each: the paper's only where it
    # gives a ratio (none for Strom τ=0.01 here)
    named = [e if isinstance(e, str) else None for e in t.paper_encoding]
    assert named == ["fp32", "fp32", None, "packed32", "packed32"]
    assert list(t.trace) == ["d_long", "d_short", "s", "v", "m"]
    assert list(t.index) == [0, 1, 2, 3, 4]
    # ratio = dense bits / bits: 100/100, 100/100, 1000/50, 1000/10, 400/4
    assert t.compression_ratio.tolist() == [1.0, 1.0, 20.0, 100.0, 100.0]
    # reference: the adam dense trace with the most steps (d_long, 90 %); none for momentum
    assert t.acc_vs_dense.iloc[:4].tolist() == pytest.approx([0.0, -0.10, -0.05, -0.02])
    assert math.isnan(t.acc_vs_dense.iloc[4])
    # the paper's row with the same optimizer and paper_key; none for Strom τ=0.01 here
    assert t.paper_test_acc.iloc[[0, 1, 3, 4]].tolist() == [0.881, 0.881, 0.889, 0.77]
    assert t.paper_compression_ratio.iloc[[0, 3, 4]].tolist() == [1.0, 913.4, 500.0]
    assert math.isnan(t.paper_test_acc.iloc[2]) and math.isnan(t.paper_compression_ratio.iloc[2])


def test_method_table_fills_a_missing_optimizer_and_paper_key():
    ov = OVERVIEW.drop(columns=["optimizer", "paper_key"])
    paper = PAPER.assign(optimizer="")
    t = tables.method_table(ov, paper)
    assert set(t.optimizer) == {""}
    assert t.paper_test_acc.isna().all()  # no paper_key: no paper row matches
    # one optimizer for all: the dense trace with the most steps (d_long, 90 %) is the reference
    assert t.set_index("trace").acc_vs_dense["m"] == pytest.approx(0.70 - 0.90)
    assert len(t) == 5


# --- accuracy_curves ----------------------------------------------------------------------


def test_accuracy_curves_long_frame():
    a = pd.DataFrame({"step": [0, 9], "test_acc": [0.5, 0.8], "train_acc": [0.6, 0.9], "x": 1})
    b = pd.DataFrame({"step": [4], "test_acc": [0.7], "train_acc": [0.75]})
    empty = pd.DataFrame(columns=["step", "test_acc", "train_acc"])
    out = tables.accuracy_curves({"A": a, "none": None, "empty": empty, "B": b})
    assert list(out.columns) == ["label", "step", "test_acc", "train_acc"]
    assert list(out.index) == [0, 1, 2]
    assert out.label.tolist() == ["A", "A", "B"]
    assert out.step.tolist() == [0, 9, 4]
    assert out.test_acc.tolist() == [0.5, 0.8, 0.7]
    assert out.train_acc.tolist() == [0.6, 0.9, 0.75]
    assert list(a.columns) == ["step", "test_acc", "train_acc", "x"]  # input left alone


def test_accuracy_curves_of_nothing_is_an_empty_frame_with_the_columns():
    for evals in ({}, {"a": None, "b": pd.DataFrame(columns=["step", "test_acc", "train_acc"])}):
        out = tables.accuracy_curves(evals)
        assert out.empty and list(out.columns) == ["label", "step", "test_acc", "train_acc"]


# --- time_to_accuracy_headline ------------------------------------------------------------


def _tta_rows(rows):
    cols = [
        "source",
        "cluster",
        "trace",
        "method_label",
        "world_size",
        "reached",
        "compressed_steps_to_target",
        "dense_steps_to_target",
        "speedup_to_accuracy",
        "compressed_final_test_acc",
        "compressed_steps_recorded",
    ]
    t = pd.DataFrame(rows, columns=cols)
    t["target_acc"] = 0.9
    for c in ("compressed_steps_to_target", "dense_steps_to_target"):
        t[c] = pd.array(t[c], dtype="Int64")
    t["speedup_to_accuracy"] = t["speedup_to_accuracy"].astype(float)
    return t


NA = None
SIM = "simulated"
TTA = [
    # source, cluster, trace, label, P, reached, steps, dense steps, speedup, final acc, recorded
    (SIM, "A", "r", "R", 2, False, NA, 20, math.nan, 0.85, 20),
    (SIM, "A", "q", "Q", 2, False, NA, 20, math.nan, 0.80, 40),
    (SIM, "B", "z", "Z", 2, True, 10, 20, 1.5, 0.95, 40),
    (SIM, "B", "z", "Z", 4, True, 10, 20, 1.0, 0.95, 40),  # a tie is no win
    (SIM, "B", "z", "Z", 8, True, 10, 20, 0.5, 0.95, 40),
    (SIM, "A", "a", "A-method", 2, True, 30, 20, 0.8, 0.95, 40),
    (SIM, "A", "n", "N", 2, True, 10, NA, math.nan, 0.95, 40),
    (SIM, "B", "w", "W", 1, True, 5, 20, 50.0, 0.95, 40),  # P = 1 is left out
    (SIM, "B", "w", "W", 2, True, 5, 20, 4.0, 0.95, 40),
    (SIM, "B", "w", "W", 4, True, 5, 20, 2.5, 0.95, 40),
    ("predicted", "B", "w", "W", 2, True, 5, 20, 100.0, 0.95, 40),  # simulated preferred
]


def test_time_to_accuracy_headline_sentences_by_hand():
    lines = tables.time_to_accuracy_headline(_tta_rows(TTA))
    assert lines == [
        # methods that miss the target first, in the table's order
        "R never reaches 90.0 % test accuracy (85.0 % after 20 steps), so it is slower to "
        "accuracy on every interconnect.",
        "Q never reaches 90.0 % test accuracy (80.0 % after 40 steps), so it is slower to "
        "accuracy on every interconnect.",
        # z: speedups 1.5, 1.0, 0.5 at P = 2, 4, 8: only P = 2 wins (a tie does not)
        "On B, to 90.0 % test accuracy (10 steps vs dense 20), Z is faster than dense up to "
        "P = 2, by up to 1.5× (at P = 2, simulated).",
        "On A, to 90.0 % test accuracy (30 steps vs dense 20), A-method is never faster than "
        "dense; its best is 0.8× at P = 2 (simulated).",
        "On A, N reaches 90.0 % test accuracy in 10 steps; no dense time to compare with (no "
        "dense trace, or dense misses the target).",
        # w: 4.0 and 2.5 at P = 2, 4 (P = 1's 50 and the predicted 100 do not count)
        "On B, to 90.0 % test accuracy (5 steps vs dense 20), W is faster than dense at every "
        "P up to 4, by up to 4× (at P = 2, simulated).",
    ]


def test_time_to_accuracy_headline_of_single_rows():
    miss = _tta_rows([TTA[1]])
    assert tables.time_to_accuracy_headline(miss) == [
        "Q never reaches 90.0 % test accuracy (80.0 % after 40 steps), so it is slower to "
        "accuracy on every interconnect."
    ]
    pred = _tta_rows([("predicted", *TTA[5][1:])])  # only predicted rows: those are used
    assert tables.time_to_accuracy_headline(pred) == [
        "On A, to 90.0 % test accuracy (30 steps vs dense 20), A-method is never faster than "
        "dense; its best is 0.8× at P = 2 (predicted)."
    ]
    one = _tta_rows([TTA[7]])  # only P = 1: kept (nothing else to show)
    assert tables.time_to_accuracy_headline(one) == [
        "On B, to 90.0 % test accuracy (5 steps vs dense 20), W is faster than dense at every "
        "P up to 1, by up to 50× (at P = 1, simulated)."
    ]
    assert tables.time_to_accuracy_headline(_tta_rows([])) == []


def test_time_to_accuracy_headline_leaves_out_p_1_beside_p_2_alone():
    # W at P = 1 and P = 2 only: P = 2 is the only P with communication, so P = 1's
    # 50× (no communication on either side) must not be the sentence's best
    lines = tables.time_to_accuracy_headline(_tta_rows([TTA[7], TTA[8]]))
    assert lines == [
        "On B, to 90.0 % test accuracy (5 steps vs dense 20), W is faster than dense at every "
        "P up to 2, by up to 4× (at P = 2, simulated)."
    ]


# --- time_to_accuracy ---------------------------------------------------------------------


def test_time_to_accuracy_column_types_and_empty_curves(results):
    evals = {
        "d": pd.DataFrame({"step": [9, 19], "test_acc": [0.5, 0.95]}),
        "var2": pd.DataFrame({"step": [4, 14], "test_acc": [0.6, 0.91]}),
        "strom": pd.DataFrame(columns=["step", "test_acc"]),  # no evaluation recorded
    }
    t = tables.time_to_accuracy(results, evals, 0.9, dense_trace="d", labels=LABELS)
    assert t.world_size.dtype == np.int64
    assert str(t.dense_steps_to_target.dtype) == "Int64"
    assert str(t.compressed_steps_to_target.dtype) == "Int64"
    assert t.reached.dtype == bool
    strom = t[t.trace == "strom"]
    assert len(strom) == 2 * 3 * 9 and not strom.reached.any()
    assert (strom.compressed_steps_recorded == 0).all()
    var2 = t[t.trace == "var2"]
    assert (var2.compressed_steps_to_target == 15).all()
    assert (var2.dense_steps_to_target == 20).all()
    assert np.allclose(var2.compressed_time_to_target_s, 15 * var2.compressed_step_s)
    # a target nobody reaches: every step count missing, still a nullable integer column
    t = tables.time_to_accuracy(results, evals, 0.99, dense_trace="d", labels=LABELS)
    assert str(t.compressed_steps_to_target.dtype) == "Int64"
    assert t.compressed_steps_to_target.isna().all() and not t.reached.any()
    # without a dense trace the dense side is missing and typed as a nullable integer
    t = tables.time_to_accuracy(results, evals, 0.9, labels=LABELS)
    assert str(t.dense_steps_to_target.dtype) == "Int64"
    assert t.dense_steps_to_target.isna().all() and t.dense_time_to_target_s.isna().all()


def test_time_to_accuracy_refuses_a_non_finite_target_and_has_columns_when_empty(results):
    with pytest.raises(ResultsError, match="finite number, got nan"):
        tables.time_to_accuracy(results, {}, math.nan)
    t = tables.time_to_accuracy(results, {"other": pd.DataFrame()}, 0.9)
    assert t.empty and list(t.columns) == list(tables.TIME_TO_ACCURACY_COLUMNS)


# --- _fit_comm ----------------------------------------------------------------------------


def _points(x, y):
    return pd.DataFrame({"payload_bytes_mean": x, "comm_s": y})


def test_fit_comm_exact_line_through_two_sizes():
    a, b = tables._fit_comm(_points([1.0, 2.0], [3.0, 5.0]))  # y = 1 + 2x
    assert (a, b) == pytest.approx((1.0, 2.0))


def test_fit_comm_falls_back_to_the_origin():
    # y = -1 + 2x has a negative intercept: line through the origin, b = Σy / Σx = 4 / 3
    assert tables._fit_comm(_points([1.0, 2.0], [1.0, 3.0])) == (0.0, pytest.approx(4 / 3))
    # one payload size: through the origin
    assert tables._fit_comm(_points([5.0, 5.0], [1.0, 2.0])) == (0.0, pytest.approx(3 / 10))
    # half a byte on average is still a size: b = 1 / 0.5
    assert tables._fit_comm(_points([0.25, 0.25], [0.5, 0.5])) == (0.0, pytest.approx(2.0))
    # nothing sent: no finite cost per byte
    assert tables._fit_comm(_points([0.0, 0.0], [1.0, 1.0])) == (0.0, math.inf)


def test_fit_comm_a_zero_slope_is_not_positive(monkeypatch):
    # a flat line (comm_s the same at both sizes) has slope 0, which the contract (b > 0)
    # refuses: through the origin, b = Σy / Σx = 2 / 3. np.polyfit's slope for flat data
    # is 0 or a rounding residue depending on the LAPACK build, so the fit is pinned to
    # exactly (0, 1) here.
    monkeypatch.setattr(tables.np, "polyfit", lambda x, y, deg: np.array([0.0, 1.0]))
    assert tables._fit_comm(_points([1.0, 2.0], [1.0, 1.0])) == (0.0, pytest.approx(2 / 3))


# --- crossover ----------------------------------------------------------------------------

CROSSOVER_COLUMNS = [
    "source",
    "cluster",
    "trace",
    "method_label",
    "world_size",
    "collective",
    "dense_step_s",
    "overhead_s",
    "required_ratio",
    "achieved_ratio",
    "wins",
]


def test_crossover_leaves_out_dense_traces_and_keeps_going_past_unmatched_rows():
    df = build_results(
        traces={"dense": ("dense", 1.0, 0.0, 0.0), "var2": ("variance", 400.0, 0.002, 0.003)}
    )
    c = tables.crossover(df, LABELS)
    assert list(c.columns) == CROSSOVER_COLUMNS
    assert set(c.trace) == {"var2"}
    assert len(c) == 2 * 3 * 9
    assert set(c.method_label) == {"variance α=2"} and set(c.collective) == {"allgatherv/ring"}
    assert set(tables.crossover(df).method_label) == {"variance"}  # unlabelled: the compressor
    # drop the dense rows of one configuration early in the order: only that row goes
    gone = (df.method == "dense") & (df.cluster == "10GbE") & (df.world_size == 1)
    c = tables.crossover(df[~gone], LABELS)
    assert len(c) == 2 * 3 * 9 - 2  # the var2 row of 10GbE, P = 1, of each source
    assert not ((c.cluster == "10GbE") & (c.world_size == 1)).any()


def test_crossover_of_dense_rows_only_is_empty_with_the_columns():
    df = build_results()
    c = tables.crossover(df[df.method == "dense"])
    assert c.empty and list(c.columns) == CROSSOVER_COLUMNS
    # compressed rows of one trace, dense rows of another: no pair, no row, the same columns
    apart = df[((df.method == "dense") & (df.trace == "var2")) | (df.trace == "strom")]
    apart = apart[~((apart.method == "dense") & (apart.trace == "strom"))]
    c = tables.crossover(apart)
    assert c.empty and list(c.columns) == CROSSOVER_COLUMNS


def _crossover_rows():
    """Hand-built mean rows of one trace at P = 2 on two clusters (dyadic numbers, exact).

    Dense on both: 0.5 s compute + 0.5 s communication, 1024 bytes. On A two compressed
    collectives, each alone at its size (so each fit is through the origin, b = comm/bytes):

    * ring: overhead 0.5 s, 0.5 s for 256 bytes: b = 2^-9, budget 1 − 0.5 = 0.5 s,
      r* = 2^-9·1024 / 0.5 = 4, achieved 1024 / 256 = 4 (a tie: no win), step 1.0 s;
    * padded: overhead 0.25 s, 0.5 s for 64 bytes: b = 2^-7, budget 0.75 s,
      r* = 8 / 0.75 = 10.67, step 0.75 s: faster, but needs the larger ratio.

    On B one compressed row whose overhead (1.0 s) is the whole dense step: budget 0."""
    # cluster, compressor, method, collective, compute_s, comm_s, payload bytes
    spec = [
        ("A", "dense", "dense", "allreduce/ring", 0.5, 0.5, 1024.0),
        ("B", "dense", "dense", "allreduce/ring", 0.5, 0.5, 1024.0),
        ("A", "variance", "compressed", "allgatherv/ring", 0.5, 0.5, 256.0),
        ("A", "variance", "compressed", "allgatherv/padded", 0.25, 0.5, 64.0),
        ("B", "variance", "compressed", "allgatherv/ring", 1.0, 0.25, 256.0),
    ]
    rows = [
        _row("predicted", "t", comp, cluster, 2, method, coll, compute, 0.0, 0.0, comm, size)
        for cluster, comp, method, coll, compute, comm, size in spec
    ]
    return pd.DataFrame(rows, columns=list(tables.RESULT_COLUMNS))


def test_crossover_by_hand_smallest_required_ratio_tie_and_zero_budget():
    c = tables.crossover(_crossover_rows()).set_index("cluster")
    a = c.loc["A"]
    # the option needing the smallest ratio is chosen, not the fastest step
    assert a.collective == "allgatherv/ring"
    assert a.required_ratio == 4.0 and a.achieved_ratio == 4.0 and a.overhead_s == 0.5
    assert not a.wins  # achieved == required: the compressed step ties the dense one
    b = c.loc["B"]
    # overhead = dense step: no budget left for communication, no ratio is enough
    assert b.overhead_s == 1.0 and b.required_ratio == math.inf and not b.wins
    assert b.dense_step_s == 1.0 and b.achieved_ratio == 4.0


# --- headline, _acc_note and headline_order -----------------------------------------------


def test_headline_of_predicted_rows_in_cluster_order(results):
    wi = tables.what_if(results[results.source == "predicted"], LABELS)
    lines = tables.headline(wi[wi.trace == "var2"])
    # the what-if order: slowest network first (1GbE, 10GbE, IB-EDR), not by name
    assert [x.split(",")[0] for x in lines] == ["On 1GbE", "On 10GbE", "On IB-EDR"]
    assert all(x.endswith("predicted).") for x in lines)


def test_headline_of_one_row_per_trace(results):
    wi = tables.what_if(results, LABELS)
    one = wi[(wi.source == "simulated") & (wi.world_size == 16) & (wi.cluster == "1GbE")]
    lines = tables.headline(one[one.trace == "var2"])
    assert lines == [
        "On 1GbE, variance α=2 beats dense allreduce at every P up to 16, by up to "
        f"{one[one.trace == 'var2'].speedup.item():.3g}× (at P = 16, simulated)."
    ]


def test_headline_names_the_largest_winning_p_below_the_largest_p():
    wi = pd.DataFrame(
        {
            "source": "simulated",
            "cluster": "A",
            "trace": "t",
            "method_label": "T",
            "world_size": [2, 4, 8],
            "speedup": [2.0, 1.25, 0.5],
            "winner": ["compressed", "compressed", "dense"],
        }
    )
    assert tables.headline(wi) == [
        "On A, T beats dense allreduce up to P = 4, by up to 2× (at P = 2, simulated)."
    ]


def test_headline_accuracy_notes():
    wi = pd.DataFrame(
        {
            "source": "simulated",
            "cluster": "A",
            "trace": ["t", "u"],
            "method_label": ["T", "U"],
            "world_size": 2,
            "speedup": 0.5,
            "winner": "dense",
        }
    )
    lines = tables.headline(wi, {"t": 0.9}, dense_accuracy=math.nan)
    assert lines == [
        "On A, T (test accuracy 90.0 %) never beats dense allreduce for P ≤ 2; its best is "
        "0.5× at P = 2 (simulated).",
        "On A, U (test accuracy not recorded) never beats dense allreduce for P ≤ 2; its "
        "best is 0.5× at P = 2 (simulated).",
    ]


def test_headline_expands_only_the_leading_dense_of_a_2_byte_baseline():
    wi = pd.DataFrame(
        {
            "source": "simulated",
            "cluster": "A",
            "trace": "dense-bf16",
            "method_label": "dense bf16 (dense rows of bf16)",
            "world_size": [2],
            "speedup": [1.5],
            "winner": ["compressed"],
        }
    )
    assert tables.headline(wi) == [
        "On A, dense allreduce of bf16 (dense rows of bf16) beats fp32 at every P up to 2, "
        "by up to 1.5× (at P = 2, simulated)."
    ]


def test_headline_order_puts_wins_first_then_losses_then_baselines():
    lines = [
        "qsgd s=4 never reaches 92 %, so it is slower.",
        "On B, strom τ=0.01 beats dense allreduce up to P = 8.",
        "On A, dense allreduce of bf16 beats fp32 at every P up to 64.",
        "hybrid never reaches 92 %.",
        "On A, qsgd s=4 beats dense allreduce up to P = 4.",
        "On 10GbE, strom τ=0.01 beats dense allreduce up to P = 2.",
        "On A, variance α=2 never beats dense allreduce for P ≤ 64.",
        "On B, variance α=2 beats dense allreduce up to P = 32.",
        "On 10GbE, variance α=2 never beats dense allreduce for P ≤ 64.",
    ]
    assert tables.headline_order(lines) == [
        # the wins, whatever the cluster: the preferred cluster first, then B, A by first
        # appearance, variance first within a cluster
        "On 10GbE, strom τ=0.01 beats dense allreduce up to P = 2.",
        "On B, variance α=2 beats dense allreduce up to P = 32.",
        "On B, strom τ=0.01 beats dense allreduce up to P = 8.",
        "On A, qsgd s=4 beats dense allreduce up to P = 4.",
        # then the rest in the same order (sentences without a cluster before B and A)
        "On 10GbE, variance α=2 never beats dense allreduce for P ≤ 64.",
        "qsgd s=4 never reaches 92 %, so it is slower.",
        "hybrid never reaches 92 %.",
        "On A, variance α=2 never beats dense allreduce for P ≤ 64.",
        # the 2-byte dense baseline after every compression method
        "On A, dense allreduce of bf16 beats fp32 at every P up to 64.",
    ]


# --- speedup_matrix -----------------------------------------------------------------------


def test_speedup_matrix_empty_predicted_only_and_missing_sizes():
    assert list(tables.speedup_matrix(pd.DataFrame()).columns) == [
        "source",
        "interconnect",
        "method",
    ]
    wi = pd.DataFrame(
        {
            "source": "predicted",
            "cluster": ["A", "A", "A"],
            "trace": ["t", "t", "u"],
            "method_label": ["T", "T", "U"],
            "world_size": [2, 4, 2],
            "speedup": [1.5, 0.5, 3.0],
            "largest_winning_world_size": pd.array([2, 2, 2], dtype="Int64"),
        }
    )
    m = tables.speedup_matrix(wi, {"t": 0.9})
    assert list(m.columns) == [
        "source",
        "interconnect",
        "method",
        "final_test_acc",
        "P=2",
        "P=4",
        "largest P where compression wins",
    ]
    assert m.source.tolist() == ["predicted", "predicted"]
    assert m.method.tolist() == ["T", "U"]
    assert m["P=2"].tolist() == [1.5, 3.0]
    assert m["P=4"].iloc[0] == 0.5 and math.isnan(m["P=4"].iloc[1])  # u has no P = 4 row
    assert m.final_test_acc.iloc[0] == 0.9 and math.isnan(m.final_test_acc.iloc[1])


# --- breakdown, agreement, local_times and the trace tables -------------------------------

BREAKDOWN_COLUMNS = [
    "source",
    "cluster",
    "trace",
    "method_label",
    "world_size",
    "method",
    "collective",
    *tables.TIME_COLUMNS,
    "other_s",
]


def test_breakdown_columns_labels_and_dense_trace():
    df = build_results(
        traces={"dense": ("dense", 1.0, 0.0, 0.0), "var2": ("variance", 400.0, 0.002, 0.003)}
    )
    b = tables.breakdown(df, LABELS)
    assert list(b.columns) == BREAKDOWN_COLUMNS
    # the dense trace has a dense row but no compressed one
    assert set(b[b.trace == "dense"].method) == {"dense"}
    assert len(b) == 2 * 3 * 9 * 3  # 2 sources, 3 clusters, 9 P: var2 twice, dense once
    var2 = b[(b.trace == "var2") & (b.method == "compressed")]
    assert set(var2.method_label) == {"variance α=2"}
    assert set(b[b.trace == "dense"].method_label) == {"dense"}  # unlabelled: compressor
    assert list(b.index) == list(range(len(b)))
    row = var2[(var2.source == "predicted") & (var2.cluster == "1GbE") & (var2.world_size == 16)]
    bw, lat = LINKS["1GbE"]
    assert row.comm_s.item() == pytest.approx(15 * lat + 15 * 1e4 / bw)
    assert row.variance_s.item() == 0.002 and row.codec_s.item() == 0.003


def test_agreement_columns_and_sources(results):
    a = tables.agreement(results)
    keys = ["trace", "compressor", "encoding", "cluster", "world_size", "method", "collective"]
    assert list(a.columns) == [
        *keys,
        "predicted_step_s",
        "predicted_comm_s",
        "simulated_step_s",
        "simulated_comm_s",
        "rel_error",
    ]
    assert list(a.index) == list(range(len(a)))
    row = a[(a.trace == "var2") & (a.cluster == "1GbE") & (a.world_size == 16)]
    row = row[row.method == "dense"]
    # predicted: the α-β ring allreduce; simulated: the same times 1.05 (report_data's skew)
    bw, lat = LINKS["1GbE"]
    comm = 2 * 15 * lat + 2 * 15 / 16 * 4e6 / bw
    assert row.predicted_comm_s.item() == pytest.approx(comm)
    assert row.simulated_comm_s.item() == pytest.approx(1.05 * comm)
    assert row.predicted_step_s.item() == pytest.approx(0.05 + comm)
    assert row.simulated_step_s.item() == pytest.approx(0.05 + 1.05 * comm)


def test_local_times_index_and_columns(results):
    lt = tables.local_times(results)
    assert list(lt.columns) == ["cluster", "compute_mode", "device"]
    assert list(lt.index) == [0, 1, 2]
    assert lt.cluster.tolist() == ["10GbE", "1GbE", "IB-EDR"]


def test_trace_tables_name_and_type_their_columns():
    p = pd.DataFrame(
        {
            "step": [0, 0, 1, 1],
            "worker": [0, 1, 0, 1],
            "layer": [0, 1, 0, 1],
            "numel": [10, 30, 10, 30],
            "sent": [1, 3, 5, 15],
            "bits_packed32": [96, 160, 224, 544],
        }
    )
    d = tables.layer_density(p)
    assert d.columns.name == "layer"
    assert d.loc[1, 1] == 0.5
    r = tables.compression_over_steps(p, "packed32")
    assert r.dense_bits.dtype == np.int64
    assert r.dense_bits.tolist() == [32 * 40, 32 * 40]
    assert r.compression_ratio.tolist() == [1280 / 256, 1280 / 768]


def test_accuracy_helpers_without_a_test_accuracy_column():
    ev = pd.DataFrame({"step": [1, 2], "train_acc": [0.5, 0.6]})
    assert tables.steps_to_accuracy(ev, 0.5) is None
    assert math.isnan(tables.final_accuracy(ev))


# --- 2-byte dense baselines ---------------------------------------------------------------


def _two_byte(fp16_step):
    """One source, cluster and trace at P = 2, 4: bf16 dense rows 10 and 20 ms faster than
    fp32, and fp16 rows whose step times ``fp16_step`` derives from bf16's."""
    df = build_results(sources=("predicted",), traces={"var2": ("variance", 400.0, 0.0, 0.0)})
    df = df[(df.cluster == "1GbE") & df.world_size.isin([2, 4])].reset_index(drop=True)
    bf16 = df[df.method == "dense"].assign(encoding="bf16")
    bf16["step_s"] = bf16["step_s"] - np.where(bf16.world_size == 2, 0.010, 0.020)
    fp16 = bf16.assign(encoding="fp16")
    fp16["step_s"] = fp16_step(bf16)
    return tables.what_if(pd.concat([df, bf16, fp16], ignore_index=True))


def test_fp16_is_kept_where_its_step_times_differ_from_bf16_by_more_than_1e_9():
    # 1e-7 relative (5 ns on a 50 ms step): not the same step time
    t = _two_byte(lambda b: b["step_s"] * (1 + 1e-7))
    assert {"dense-bf16", "dense-fp16"} <= set(t.trace)
    # the same mean over P, but not the same step time at each P
    swapped = _two_byte(lambda b: b["step_s"].to_numpy()[::-1])
    assert {"dense-bf16", "dense-fp16"} <= set(swapped.trace)
    same = _two_byte(lambda b: b["step_s"])
    assert "dense-bf16" in set(same.trace) and "dense-fp16" not in set(same.trace)


def _var2_at_p2(bf16_only):
    """var2 on 1GbE at P = 2 (predicted), with bf16 dense rows 10 ms faster than fp32's;
    ``bf16_only`` drops the fp32 dense rows, leaving a table of 2-byte allreduce only."""
    df = build_results(sources=("predicted",), traces={"var2": ("variance", 400.0, 0.0, 0.0)})
    df = df[(df.cluster == "1GbE") & (df.world_size == 2)].reset_index(drop=True)
    bf16 = df[df.method == "dense"].assign(encoding="bf16")
    bf16["step_s"] = bf16["step_s"] - 0.010
    if bf16_only:
        df = df[df.method != "dense"]
    t = tables.what_if(pd.concat([df, bf16], ignore_index=True))
    return t[t.trace == "var2"]


# Hand-worked, P = 2 on 1GbE (125e6 B/s, 50 us), 4 MB dense, ratio 400, 50 ms compute:
# fp32 ring allreduce 2*50e-6 + 2*(1/2)*4e6/125e6 = 0.0321 s -> step 0.0821 s; bf16 0.0721 s;
# compressed allgatherv 50e-6 + 1e4/125e6 = 0.00013 s -> step 0.05013 s.
def test_dense_baseline_is_fp32_when_the_table_has_fp32_dense_rows():
    row = _var2_at_p2(bf16_only=False)
    assert len(row) == 1
    assert row.dense_step_s.iloc[0] == pytest.approx(0.0821, rel=1e-12)  # not bf16's 0.0721
    assert row.speedup.iloc[0] == pytest.approx(0.0821 / 0.05013, rel=1e-12)


def test_dense_baseline_is_the_2_byte_allreduce_when_no_dense_row_is_fp32():
    row = _var2_at_p2(bf16_only=True)
    assert len(row) == 1
    assert row.dense_step_s.iloc[0] == pytest.approx(0.0721, rel=1e-12)
    assert row.speedup.iloc[0] == pytest.approx(0.0721 / 0.05013, rel=1e-12)


# --- mean_rows, what_if and the row order -------------------------------------------------


def test_mean_rows_keeps_the_result_columns_and_integer_world_sizes(results):
    m = tables.mean_rows(results.assign(world_size=results.world_size.astype(float)))
    assert list(m.columns) == list(tables.RESULT_COLUMNS)
    assert m.world_size.dtype == np.int64
    assert list(m.index) == list(range(len(m)))


def test_what_if_types_ties_and_emptiness():
    df = build_results(traces={"x": ("strom", 50.0, 0.0, 0.0)})  # no variance, no codec
    t = tables.what_if(df)
    assert t.world_size.dtype == np.int64
    assert str(t.largest_winning_world_size.dtype) == "Int64"
    # P = 1: no communication on either side, the same 50 ms step: a tie is not a win
    one = t[t.world_size == 1]
    assert (one.dense_step_s == one.compressed_step_s).all()
    assert (one.winner == "dense").all()
    empty = tables.what_if(df[df.method == "dense"])
    assert empty.empty and list(empty.columns) == list(tables.WHAT_IF_COLUMNS)


def test_tables_are_ordered_by_source_cluster_speed_trace_and_p(results):
    rank = {"1GbE": 0, "10GbE": 1, "IB-EDR": 2}  # slowest dense communication first
    assert tables.cluster_order(tables.mean_rows(results)) == list(rank)
    for t in (tables.what_if(results, LABELS), tables.crossover(results, LABELS)):
        got = list(zip(t.source, t.cluster, t.trace, t.world_size, strict=True))
        assert got == sorted(got, key=lambda r: (r[0], rank[r[1]], r[2], r[3]))
    # without dense rows: the clusters by name
    assert tables.cluster_order(results[results.method == "compressed"]) == sorted(rank)


def test_mean_rows_averages_a_configuration_whose_key_is_missing():
    # per-step rows of one configuration whose device is not known (None): averaged into
    # one mean row like any other, not dropped for its missing key
    rows = [
        _row("predicted", "t", "dense", "A", 2, "dense", "allreduce/ring", 0.5, 0.0, 0.0, c, 8.0)
        for c in (0.25, 0.75)
    ]
    df = pd.DataFrame(rows, columns=list(tables.RESULT_COLUMNS))
    df["step"] = [0, 1]
    df["device"] = None
    m = tables.mean_rows(df)
    assert len(m) == 1
    assert m.step.item() == -1 and pd.isna(m.device.item())
    assert m.comm_s.item() == 0.5 and m.step_s.item() == 1.0


def test_missing_columns_give_the_documented_line(results):
    with pytest.raises(ResultsError) as err:
        tables.check_results(results.drop(columns=["comm_s", "step_s"]))
    assert str(err.value) == (
        "result table lacks columns ['comm_s', 'step_s']; expected the columns of "
        "vgcsim.core.results.RESULT_COLUMNS (written by `vgcsim predict` / `vgcsim simulate`)"
    )


def test_dominant_term_names_the_largest_parts_against_the_dense_overhead():
    row = {"source": "simulated", "cluster": "A", "trace": "t", "world_size": 8}
    bd = pd.DataFrame(
        [
            # compressed: variance 0.01 ms (under a tenth of the parts), codec + decode
            # 0.2 + 0.13 = 0.33 ms, communication 0.083 ms; dense: 0.064 ms beyond compute
            {**row, "method": "compressed", "compute_s": 1.0, "variance_s": 1e-5,
             "codec_s": 2e-4, "decode_s": 1.3e-4, "comm_s": 8.3e-5, "step_s": 1.000423},
            {**row, "method": "dense", "compute_s": 1.0, "variance_s": 0.0, "codec_s": 0.0,
             "decode_s": 0.0, "comm_s": 6.4e-5, "step_s": 1.000064},
        ]
    )  # fmt: skip
    term = tables.dominant_term(bd, ("simulated", "A", "t", 8))
    assert term == (
        "compress + decode 0.33 ms and communication 0.083 ms against 0.064 ms of dense allreduce"
    )
    assert tables.dominant_term(bd, ("simulated", "A", "t", 16)) == ""  # no such row
    wi = pd.DataFrame({**row, "method_label": "T", "speedup": [0.15], "winner": ["dense"]})
    (line,) = tables.headline(wi, breakdown_table=bd)
    assert line.endswith(f"(simulated: {term}).")
