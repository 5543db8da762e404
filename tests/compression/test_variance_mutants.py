"""worker_gradients and estimator_gap at points the other variance tests leave open, each
worked out by hand: the torch.func fallback (a parameter outside Linear/Conv2d/norm layers)
with targets of more than one column and with dropout, the estimator gap with one sample per
worker (|B|² = 1 in the decision g² > α·Σ(∇f_z)²/|B|²), and the fast estimator's precision
reaching estimator_gap."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from vgcsim.traces.compression.sqsum_estimators import estimator_gap, worker_gradients


class _Scale(nn.Module):
    """out = w ⊙ x: a parameter the fast hooks do not know, so gradients go through torch.func."""

    def __init__(self, w):
        super().__init__()
        self.w = nn.Parameter(torch.tensor(w))

    def forward(self, x):
        return self.w * x


def _dot_loss(out, y):
    return (out * y).sum(1)


def test_torch_func_fallback_with_two_column_targets_by_hand():
    # loss_z = Σ_j w_j x_zj y_zj with w = (1, 2): per-sample gradients x_z ⊙ y_z
    #   (1,2)⊙(1,1) = (1,2); (3,0)⊙(2,1) = (6,0); (0,1)⊙(1,3) = (0,3); (2,2)⊙(0,1) = (0,2)
    # losses 5, 6, 6, 4; workers of 2: mean gradients (3.5, 1), (0, 2.5); losses 5.5, 5
    x = torch.tensor([[1.0, 2.0], [3.0, 0.0], [0.0, 1.0], [2.0, 2.0]])
    y = torch.tensor([[1.0, 1.0], [2.0, 1.0], [1.0, 3.0], [0.0, 1.0]])
    wg = worker_gradients(_Scale([1.0, 2.0]), _dot_loss, x, y, 2, None)
    assert wg.names == ["w"]
    assert wg.sqsums is None
    assert torch.equal(wg.losses, torch.tensor([5.5, 5.0]))
    assert torch.equal(wg.grads[0], torch.tensor([[3.5, 1.0], [0.0, 2.5]]))


def test_torch_func_fallback_draws_dropout_per_worker():
    # dropout inside vmap needs randomness="different"; with p = 0.5 each kept element is
    # doubled, so every per-sample gradient component is 0 or 2·x·y
    torch.manual_seed(3)
    model = nn.Sequential(nn.Dropout(0.5), _Scale([1.0, 1.0]))
    x, y = torch.ones(4, 2), torch.ones(4, 2)
    wg = worker_gradients(model, _dot_loss, x, y, 2, None)
    assert wg.grads[0].shape == (2, 2)
    # worker means of two samples' 0 / 2 components: 0, 1 or 2
    assert set(wg.grads[0].reshape(-1).tolist()) <= {0.0, 1.0, 2.0}


X = torch.tensor([[1.0, 2.0], [0.0, 1.0], [3.0, -1.0], [2.0, 2.0]]).reshape(4, 1, 1, 2)
Y = torch.zeros(4, dtype=torch.int64)


def _sum_loss(out, y):
    return out.sum(1)


def _conv():
    conv = nn.Conv2d(1, 1, 1, bias=False)
    with torch.no_grad():
        conv.weight.fill_(1.0)
    return nn.Sequential(conv, nn.Flatten())


def test_estimator_gap_with_one_sample_per_worker_by_hand():
    # W = 4, |B| = 1: g = a1 + a2 = 3, 1, 2, 4; exact Σ = g² = 9, 1, 4, 16; fast
    # a1² + a2² = 5, 1, 10, 8. α = 1: exact g² > g² never; fast 9 > 5 yes, 1 > 1 no,
    # 4 > 10 no, 16 > 8 yes: half of the decisions differ
    (row,) = estimator_gap(_conv(), _sum_loss, X, Y, 4, alpha=1.0, sq_dtype="float32")
    assert row["flip_rate"] == 0.5
    assert row["ratio"] == pytest.approx(24 / 30, rel=1e-12)


def test_estimator_gap_runs_the_fast_estimator_in_the_precision_asked():
    # inputs scaled by 1 + 2^-9: in bfloat16 (8 significant bits) 1, 2 and 3 times that
    # round back to 1, 2, 3, so the bf16 fast sums are 6 and 18 while the exact (always
    # fp32) ones are 10 and 20 times (1 + 2^-9)²; in float32 both scale alike
    s = 1 + 2**-9
    (f32,) = estimator_gap(_conv(), _sum_loss, X * s, Y, 2, sq_dtype="float32")
    (bf16,) = estimator_gap(_conv(), _sum_loss, X * s, Y, 2, sq_dtype="bfloat16")
    assert f32["ratio"] == pytest.approx(0.8, rel=1e-6)
    assert bf16["ratio"] == pytest.approx(0.8 / s**2, rel=1e-6)
