"""The pairwise generator the test grids use covers every pair of values and is deterministic."""

from __future__ import annotations

import itertools

import pytest
from pairwise import covers_every_pair, joined, pairwise

FACTORS = {"a": [1, 2, 3], "b": ["x", "y"], "c": [True, False], "d": [0.5, 1.5, 2.5, 3.5]}


def test_every_pair_of_values_occurs_in_some_row():
    rows = pairwise(FACTORS)
    for x, y in itertools.combinations(FACTORS, 2):
        seen = {(r[x], r[y]) for r in rows}
        assert seen == set(itertools.product(FACTORS[x], FACTORS[y])), (x, y)
    assert covers_every_pair(rows, FACTORS)


def test_rows_are_fewer_than_the_product_and_repeat_run_to_run():
    rows = pairwise(FACTORS)
    # at least |a| x |d| = 12 rows are needed; the full product has 48
    assert 12 <= len(rows) < 48
    assert pairwise(FACTORS) == rows
    assert all(set(r) == set(FACTORS) for r in rows)


def test_a_missing_pair_is_noticed():
    rows = pairwise(FACTORS)
    # each greedy row covers a pair no earlier row does: the last one is needed
    assert not covers_every_pair(rows[:-1], FACTORS)


def test_joined_factors_keep_their_full_product():
    quant = joined(values=["code4"], rounding=["nearest", "down"], floor=["keep", "floor"])
    assert len(quant) == 4
    rows = pairwise({"alpha": [0, 1], "quant": quant})
    assert len(rows) == 8  # two factors: pairwise is the product
    assert covers_every_pair(rows, {"alpha": [0, 1], "quant": quant})


def test_an_empty_factor_is_refused():
    with pytest.raises(ValueError, match="at least one value"):
        pairwise({"a": [1], "b": []})
