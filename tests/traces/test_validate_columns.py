"""``trace validate``'s column rules and its expected evaluations, one rule per test.

The column rules (:func:`vgcsim.traces.validate.table_problems` on the committed sample
trace, valid as committed): a column the format does not describe must hold finite numbers
(or be non-numeric or boolean, which is not checked); a described column must be numeric and
not boolean; finite unless NaN is allowed; an ``int`` column integral and within ±2⁶²; then
within its range. A column whose type is wrong stops the checks that rely on that table.
The expected problem lines are written out by hand from those rules and the column
descriptions of ``vgcsim.traces.schema`` (``lr`` ≥ 0, ``density`` in [0, 1], ``step`` int).

The expected evaluations: a complete, non-synthetic recording whose config gives integer
``eval_every`` ≥ 0 and ``steps`` ≥ 1, with that many steps recorded, evaluated at every step
s with (s + 1) divisible by eval_every, and at its last step; otherwise nothing is expected.
"""

from __future__ import annotations

import copy

import numpy as np
import pandas as pd
import pytest
from trace_parts import SAMPLE, trace_parts, trace_problems

from vgcsim.traces.io import Trace, read_trace
from vgcsim.traces.validate import _expected_eval_steps

CONTIGUITY = "steps are not contiguous from 0 (missing, repeated or out-of-order step numbers)"


@pytest.fixture(scope="module")
def sample() -> Trace:
    return read_trace(SAMPLE)


def _break_payloads(parts: dict) -> None:
    """A payload problem that is reported only when the steps table's types are right:
    a repeated (step, worker, layer) row in place of another."""
    p = parts["payloads"]
    p.loc[1, ["step", "worker", "layer"]] = p.loc[0, ["step", "worker", "layer"]].to_numpy()


# -- columns the format does not describe -----------------------------------------------------


def test_an_undescribed_numeric_column_must_be_finite_and_later_columns_are_still_checked(
    sample,
):
    t = trace_parts(sample)
    s = t["steps"]
    s.insert(0, "extra_x", np.ones(len(s)))
    s.loc[3, "extra_x"] = np.inf
    s.loc[2, "lr"] = -1e-3  # a later column with a problem of its own
    assert trace_problems(t) == [
        "steps column extra_x contains NaN or Inf",
        "steps column lr has negative values",
    ]


def test_an_undescribed_nullable_integer_column_with_a_missing_value_is_not_finite(sample):
    t = trace_parts(sample)
    t["steps"]["extra_n"] = pd.array([1] * len(t["steps"]), dtype="Int64")
    t["steps"].loc[4, "extra_n"] = pd.NA
    assert trace_problems(t) == ["steps column extra_n contains NaN or Inf"]


def test_undescribed_finite_boolean_and_text_columns_are_accepted(sample):
    t = trace_parts(sample)
    n = len(t["steps"])
    t["steps"]["extra_f"] = np.arange(n, dtype=np.float64)
    t["steps"]["extra_b"] = np.ones(n, dtype=bool)
    t["steps"]["extra_t"] = ["a"] * n
    assert trace_problems(t) == []


# -- described columns: type -----------------------------------------------------------------


def test_a_boolean_number_column_is_the_wrong_type_and_stops_the_dependent_checks(sample):
    t = trace_parts(sample)
    t["steps"]["lr"] = True
    t["steps"].loc[1, "density"] = 2.0  # a later column of the same table: still reported
    _break_payloads(t)  # not reported: the steps table's types are wrong
    assert trace_problems(t) == [
        "steps column lr has type bool; expected numbers",
        "steps column density is outside [0, 1]",
    ]


def test_a_boolean_step_column_is_the_wrong_type(sample):
    t = trace_parts(sample)
    t["steps"]["step"] = t["steps"]["step"] > 0
    assert trace_problems(t) == ["steps column step has type bool; expected integers"]


# -- described columns: finiteness and integers ----------------------------------------------


def test_nan_in_an_integer_column_stops_the_dependent_checks(sample):
    t = trace_parts(sample)
    t["steps"]["step"] = t["steps"]["step"].astype(np.float64)
    t["steps"].loc[5, "step"] = np.nan
    _break_payloads(t)
    # not also "steps are not contiguous": a NaN step number is not compared
    assert trace_problems(t) == ["steps column step contains NaN or Inf"]


def test_a_fractional_integer_column_is_not_int64_and_stops_the_dependent_checks(sample):
    t = trace_parts(sample)
    t["steps"]["step"] = t["steps"]["step"].astype(np.float64)
    t["steps"].loc[5, "step"] = 5.5
    t["steps"].loc[1, "density"] = -0.5  # a later column: still reported
    _break_payloads(t)
    assert trace_problems(t) == [
        "steps column step has values that are not int64 integers",
        "steps column density is outside [0, 1]",
    ]


def test_integers_beyond_two_to_the_62_are_refused_and_two_to_the_62_is_not(sample):
    # 1.5 × 2⁶² (below 2⁶³, above 2⁶²) is refused as not an int64 integer
    t = trace_parts(sample)
    t["steps"]["step"] = t["steps"]["step"].astype(np.float64)
    t["steps"].loc[5, "step"] = 1.5 * 2.0**62
    assert trace_problems(t) == ["steps column step has values that are not int64 integers"]
    # exactly 2⁶² is an integer in range: what is wrong is only the step order
    t = trace_parts(sample)
    t["steps"]["step"] = t["steps"]["step"].astype(np.float64)
    t["steps"].loc[99, "step"] = 2.0**62
    problems = trace_problems(t)
    assert problems[0] == CONTIGUITY
    assert not any("int64" in p for p in problems)


def test_bits_columns_are_described_as_int64_integers(sample):
    # bits_<encoding> columns are not listed by name: their description is BITS_COLUMN (int)
    t = trace_parts(sample)
    p = t["payloads"]
    p["bits_coo64"] = p["bits_coo64"].astype(np.float64)
    p.loc[7, "bits_coo64"] += 0.5
    assert trace_problems(t) == [
        "payloads column bits_coo64 has values that are not int64 integers"
    ]


# -- expected evaluations ----------------------------------------------------------------------


def _header(every=2, steps=5, **over):
    return {
        "synthetic": False,
        "status": "complete",
        "config": {"eval_every": every, "steps": steps},
        **over,
    }


def test_expected_evaluations_every_k_steps_and_at_the_last_step():
    # eval_every 2, 5 steps: (s + 1) % 2 == 0 at s = 1, 3; the last step 4
    assert _expected_eval_steps(_header(), np.arange(5)) == {1, 3, 4}
    # eval_every 0: only the last step
    assert _expected_eval_steps(_header(every=0, steps=4), np.arange(4)) == {3}
    # one step: it is the last
    assert _expected_eval_steps(_header(every=3, steps=1), np.arange(1)) == {0}


@pytest.mark.parametrize(
    "header",
    [
        _header(synthetic=True),
        _header(status="stopped"),
        _header(status="running"),
        {"synthetic": False, "status": "complete", "config": None},
        _header(every=2.0),
        _header(every=True),
        _header(steps=5.0),
        _header(every=-1),
        _header(steps=0),
        _header(steps=6),  # 5 steps recorded, 6 configured
    ],
    ids=[
        "synthetic",
        "stopped",
        "running",
        "no-config",
        "float-every",
        "bool-every",
        "float-steps",
        "negative-every",
        "zero-steps",
        "steps-not-all-recorded",
    ],
)
def test_nothing_is_expected_where_the_header_does_not_say(header):
    assert _expected_eval_steps(header, np.arange(5)) is None


# -- the evaluations a complete recording lacks, and repeated encodings ----------------------

LACK = (
    "evals lack {n} of the 4 evaluations a complete recording makes (config eval_every, and "
    "the last step), e.g. step {first}; was the evals folder or a chunk of it deleted?"
)


def test_missing_evaluations_name_how_many_and_the_first(sample):
    # the sample: complete, eval_every 25, 100 steps: evaluations at steps 24, 49, 74, 99
    t = trace_parts(sample)
    t["evals"] = t["evals"][~t["evals"]["step"].isin([49, 74])]
    assert trace_problems(t) == [LACK.format(n=2, first=49)]


def test_a_trace_without_an_evaluation_table_lacks_every_evaluation(sample):
    t = trace_parts(sample)
    t["evals"] = pd.DataFrame()
    assert trace_problems(t) == [LACK.format(n=4, first=24)]


def test_an_encoding_named_twice_is_a_header_problem(sample):
    from vgcsim.traces.validate import header_problems

    h = copy.deepcopy(sample.header)
    h["encodings"] = ["packed32", "coo64", "coo64"]
    assert header_problems(h) == [
        "header encodings ['packed32', 'coo64', 'coo64'] name an encoding twice"
    ]
