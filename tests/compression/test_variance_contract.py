"""Worker gradients, squared-gradient sums and the estimator gap worked out by hand.

A 1×1 convolution without bias on 1×1×2 inputs, weight 1, loss = sum of the two outputs:
the output gradient δ is 1 at both positions, so sample z = (a1, a2) has loss a1 + a2 and
weight gradient ∇f_z = a1 + a2. The exact squared sum of a worker is Σ_z (a1 + a2)²; the
fast estimator sums squares over positions within a sample, Σ_z (a1² + a2²)
(``vgcsim.traces.compression.variance`` module docstring).

Worker 0 holds (1, 2) and (0, 1), worker 1 holds (3, −1) and (2, 2) (B = 2):

==========  ==============  =========  ==================  ==================
worker      ∇f_z            mean grad  exact Σ (∇f_z)²     fast Σ_z Σ_pos
==========  ==============  =========  ==================  ==================
0           3, 1            2          9 + 1 = 10          (1+4) + (0+1) = 6
1           2, 4            3          4 + 16 = 20         (9+1) + (4+4) = 18
==========  ==============  =========  ==================  ==================
"""

from __future__ import annotations

import pytest
import torch
from torch import nn
from vgcsim.traces.compression.variance import estimator_gap, worker_gradients

X = torch.tensor([[1.0, 2.0], [0.0, 1.0], [3.0, -1.0], [2.0, 2.0]]).reshape(4, 1, 1, 2)
Y = torch.zeros(4, dtype=torch.int64)


def _sum_loss(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return out.sum(1)


def _model() -> nn.Module:
    conv = nn.Conv2d(1, 1, 1, bias=False)
    with torch.no_grad():
        conv.weight.fill_(1.0)
    return nn.Sequential(conv, nn.Flatten())


@pytest.mark.parametrize("estimator", ["exact", "fast", None])
def test_worker_means_and_losses_by_hand(estimator):
    wg = worker_gradients(_model(), _sum_loss, X, Y, 2, estimator, sq_dtype="float32")
    assert wg.names == ["0.weight"]
    assert torch.equal(wg.losses, torch.tensor([2.0, 3.0]))
    (grad,) = wg.grads
    assert grad.shape == (2, 1, 1, 1, 1)
    assert torch.equal(grad.reshape(-1), torch.tensor([2.0, 3.0]))
    if estimator is None:
        assert wg.sqsums is None
    else:
        (sq,) = wg.sqsums
        expected = [10.0, 20.0] if estimator == "exact" else [6.0, 18.0]
        assert sq.shape == (2, 1, 1, 1, 1)
        assert torch.equal(sq.reshape(-1), torch.tensor(expected))


def test_estimator_gap_by_hand():
    # Σ exact = 30, Σ fast = 24: rel_error = (|6−10| + |18−20|) / 30 = 0.2, ratio 0.8.
    # First-step decisions g² > α·S/|B|² with α = 2, |B|² = 4:
    #   worker 0: 4 > 2·10/4 = 5 no, 4 > 2·6/4 = 3 yes  -> differs
    #   worker 1: 9 > 2·20/4 = 10 no, 9 > 2·18/4 = 9 no -> same
    (row,) = estimator_gap(_model(), _sum_loss, X, Y, 2, sq_dtype="float32")
    assert row["layer"] == 0 and row["name"] == "0.weight" and row["kind"] == "Conv2d"
    assert row["rel_error"] == pytest.approx(0.2, rel=1e-12)
    assert row["ratio"] == pytest.approx(0.8, rel=1e-12)
    assert row["grad_rel_error"] == 0.0
    assert row["flip_rate"] == 0.5
    # α = 1: worker 0: 4 > 2.5 and 4 > 1.5 (same); worker 1: 9 > 5 and 9 > 4.5 (same)
    (row,) = estimator_gap(_model(), _sum_loss, X, Y, 2, alpha=1.0, sq_dtype="float32")
    assert row["flip_rate"] == 0.0
    # α = 1.9: worker 0: 4 > 4.75 no, 4 > 2.85 yes; worker 1: 9 > 9.5 no, 9 > 8.55 yes
    (row,) = estimator_gap(_model(), _sum_loss, X, Y, 2, alpha=1.9, sq_dtype="float32")
    assert row["flip_rate"] == 1.0


def test_estimator_gap_of_a_layer_without_squared_sums():
    # all-zero inputs: every gradient and squared sum is 0, so the relative errors are 0
    # and the ratio of two zero sums is not a number
    (row,) = estimator_gap(_model(), _sum_loss, torch.zeros_like(X), Y, 2, sq_dtype="float32")
    assert row["rel_error"] == 0.0 and row["grad_rel_error"] == 0.0 and row["flip_rate"] == 0.0
    assert row["ratio"] != row["ratio"]
