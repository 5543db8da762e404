"""Extrapolation rules at their edges: one worker, one rank, the default seed, clear errors."""

from __future__ import annotations

import numpy as np
import pytest

from vgcsim.core.errors import ConfigError, UnknownNameError
from vgcsim.traces.extrapolate import rank_bits, rank_workers


@pytest.mark.parametrize("rule", ("modulo", "resample"))
def test_a_single_recorded_worker_serves_every_rank(rule):
    # W = 1 is a valid trace (one emulated worker): every rank takes worker 0
    idx = rank_workers(5, 1, 3, rule, seed=2)
    assert idx.shape == (5, 3) and not idx.any()
    assert rank_bits(np.array([[7], [9]]), 3, rule).tolist() == [[7, 7, 7], [9, 9, 9]]


@pytest.mark.parametrize("rule", ("modulo", "resample"))
def test_a_single_rank(rule):
    idx = rank_workers(4, 3, 1, rule, seed=2)
    assert idx.shape == (4, 1) and ((idx >= 0) & (idx < 3)).all()


def test_resample_default_seed_is_zero():
    # results written without a seed say seed 0 in their header: the default must be 0
    assert np.array_equal(rank_workers(20, 4, 6, "resample"), rank_workers(20, 4, 6, "resample", 0))
    wb = np.arange(80).reshape(20, 4)
    assert np.array_equal(rank_bits(wb, 6, "resample"), rank_bits(wb, 6, "resample", seed=0))
    assert not np.array_equal(rank_bits(wb, 6, "resample"), rank_bits(wb, 6, "resample", seed=1))


def test_errors_say_what_is_wrong():
    with pytest.raises(
        UnknownNameError, match=r"unknown extrapolation rule 'nearest'; valid: modulo, resample"
    ):
        rank_workers(2, 2, 2, "nearest")
    with pytest.raises(ConfigError, match=r"at least one worker, got 0"):
        rank_workers(2, 0, 2, "modulo")
    with pytest.raises(ConfigError, match=r"world size must be >= 1, got 0"):
        rank_workers(2, 2, 0, "modulo")
    with pytest.raises(
        ConfigError, match=r"worker_bits must be 2-D \[steps, workers\], got shape \(4,\)"
    ):
        rank_bits(np.arange(4), 2, "modulo")


def test_modulo_is_the_same_at_every_step():
    idx = rank_workers(3, 4, 6, "modulo")
    assert idx.dtype == np.int64
    assert idx.tolist() == [[0, 1, 2, 3, 0, 1]] * 3
