"""The ``resample`` extrapolation rule draws independently per (step, rank).

Reference: under the documented rule the worker index of rank j at step t is uniform on
0..W−1 and independent of every other (step, rank). So the pair (worker at t, worker at
t+1) of one rank is uniform over the W² pairs, and so is the pair (rank j, rank j') at one
step; a Pearson χ² test on those W² counts (W² − 1 degrees of freedom) must not reject.
A rule that draws once and reuses the draw at every step puts all pairs on the diagonal
(χ² ≈ T·(W − 1)), one that draws one worker per step for all ranks does the same across
ranks. Seeds are fixed, so the tests are deterministic.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import chi2

from vgcsim.core.cluster import get_cluster
from vgcsim.traces.extrapolate import rank_bits, rank_workers
from vgcsim.traces.inputs import step_inputs
from vgcsim.traces.io import read_trace

W = 4
T = 4000
# reject only at p < 1e-6: a correct rule fails this with probability 1e-6 per seed
CRITICAL = chi2.ppf(1 - 1e-6, W * W - 1)


def _chi2_uniform_pairs(a: np.ndarray, b: np.ndarray, w: int) -> float:
    counts = np.bincount(a * w + b, minlength=w * w).astype(float)
    expected = len(a) / (w * w)
    return float(((counts - expected) ** 2 / expected).sum())


@pytest.mark.parametrize("seed", (0, 1, 2))
def test_resample_draws_independently_across_steps(seed):
    idx = rank_workers(T, W, 3, "resample", seed=seed)
    for j in range(3):
        stat = _chi2_uniform_pairs(idx[:-1, j], idx[1:, j], W)
        assert stat < CRITICAL, f"rank {j}: consecutive steps are dependent (χ² = {stat:.1f})"
        # the same worker at t and t+1 about 1/W of the time (not always)
        same = float(np.mean(idx[:-1, j] == idx[1:, j]))
        assert same == pytest.approx(1 / W, abs=5 * np.sqrt(1 / W * (1 - 1 / W) / T))


@pytest.mark.parametrize("seed", (0, 1, 2))
def test_resample_draws_independently_across_ranks(seed):
    idx = rank_workers(T, W, 3, "resample", seed=seed)
    for j, k in ((0, 1), (1, 2), (0, 2)):
        stat = _chi2_uniform_pairs(idx[:, j], idx[:, k], W)
        assert stat < CRITICAL, f"ranks {j}, {k} are dependent (χ² = {stat:.1f})"


def test_resample_marginal_is_uniform_over_workers():
    idx = rank_workers(T, W, 5, "resample", seed=9)
    counts = np.bincount(idx.ravel(), minlength=W).astype(float)
    expected = idx.size / W
    assert ((counts - expected) ** 2 / expected).sum() < chi2.ppf(1 - 1e-6, W - 1)


def test_the_check_rejects_a_draw_reused_at_every_step():
    # the statistic itself must separate: one draw per rank repeated over all steps
    rng = np.random.default_rng(0)
    once = np.broadcast_to(rng.integers(0, W, size=3), (T, 3))
    assert _chi2_uniform_pairs(once[:-1, 0], once[1:, 0], W) > CRITICAL


def test_rank_bits_follow_an_independent_worker_per_step():
    # worker w at step t sent 1000·t + w bits, so each value names the worker it came from
    values = 1000 * np.arange(T)[:, None] + np.arange(W)[None, :]
    out = rank_bits(values, 2, "resample", seed=5)
    assert np.array_equal(out // 1000, np.broadcast_to(np.arange(T)[:, None], out.shape))
    worker = out % 1000
    assert _chi2_uniform_pairs(worker[:-1, 0], worker[1:, 0], W) < CRITICAL


def test_step_inputs_resample_picks_a_fresh_worker_every_step():
    # sample trace: 4 workers, 100 steps. Where a step's 4 workers all sent different byte
    # counts, the bytes name the worker a rank took; across steps those picks must vary.
    trace = read_trace("tests/data/sample_trace")
    cl = get_cluster("10GbE")
    si = step_inputs(trace, cl, 6, rule="resample", seed=1)
    wb = trace.worker_bits(None).to_numpy(dtype=np.int64)
    worker_bytes = (wb + 7) // 8
    picks = []
    for t in range(len(si.steps)):
        row = worker_bytes[t]
        if len(set(row.tolist())) < W:
            continue
        picks.append([int(np.flatnonzero(row == b)[0]) for b in si.rank_bytes[t]])
    picks = np.asarray(picks)
    assert len(picks) >= 50
    for j in range(6):
        # the fraction of consecutive (distinguishable) steps keeping the same worker is
        # about 1/4, far from the 1 of a draw reused at every step
        same = float(np.mean(picks[:-1, j] == picks[1:, j]))
        assert same < 0.6, f"rank {j} keeps its worker {same:.0%} of the time"
    assert len({tuple(r) for r in picks}) > len(picks) // 2
