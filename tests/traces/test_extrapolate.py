"""Extrapolating W recorded workers to P ranks."""

from __future__ import annotations

import numpy as np
import pytest

from vgcsim.core.errors import UnknownNameError
from vgcsim.traces.extrapolate import RULES, rank_bits, rank_workers


def test_modulo_maps_rank_j_to_worker_j_mod_w():
    wb = np.array([[10, 20, 30], [11, 21, 31]])
    out = rank_bits(wb, 7, "modulo")
    assert out.tolist() == [[10, 20, 30, 10, 20, 30, 10], [11, 21, 31, 11, 21, 31, 11]]


def test_modulo_fewer_ranks_than_workers():
    wb = np.arange(8).reshape(2, 4)
    assert rank_bits(wb, 2, "modulo").tolist() == [[0, 1], [4, 5]]


def test_resample_is_seeded_and_draws_from_the_same_step():
    wb = np.arange(12).reshape(3, 4) * 100 + np.arange(3)[:, None]
    a = rank_bits(wb, 50, "resample", seed=3)
    b = rank_bits(wb, 50, "resample", seed=3)
    c = rank_bits(wb, 50, "resample", seed=4)
    assert np.array_equal(a, b) and not np.array_equal(a, c)
    for t in range(3):
        assert set(a[t]) <= set(wb[t])
    idx = rank_workers(3, 4, 50, "resample", seed=3)
    assert idx.min() >= 0 and idx.max() == 3


def test_unknown_rule():
    assert RULES == ("modulo", "resample")
    with pytest.raises(UnknownNameError, match="modulo"):
        rank_bits(np.ones((1, 2)), 4, "nearest")
