"""Squared-gradient sums from module hooks in the ordinary backward equal the recorder's."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from vgcsim.traces.compression.sqsum_hooks import SqsumHooks
from vgcsim.traces.compression.variance import worker_gradients

from vgcsim.core.errors import ConfigError

B = 6


def per_sample_loss(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(out, y, reduction="none")


def small_cnn() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Conv2d(2, 4, 3, padding=1, stride=2),
        nn.GroupNorm(2, 4),
        nn.ReLU(inplace=True),
        nn.Flatten(),
        nn.Linear(4 * 4 * 4, 8),
        nn.LayerNorm(8),
        nn.Linear(8, 5),
    )


def batch() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    return torch.randn(B, 2, 8, 8, generator=g), torch.randint(0, 5, (B,), generator=g)


@pytest.mark.parametrize("estimator", ["fast", "exact"])
def test_hook_sums_of_a_mean_loss_backward_equal_worker_gradients(estimator):
    model = small_cnn()
    x, y = batch()
    ref = worker_gradients(model, per_sample_loss, x, y, 1, estimator, sq_dtype="float32")
    hooks = SqsumHooks(model, estimator, sq_dtype="float32")
    per_sample_loss(model(x), y).mean().backward()
    for i, want in enumerate(ref.sqsums):
        got = hooks.take(i)
        # The hooks see each sample's share of the mean loss, (∇f_z / B)².
        assert torch.allclose(got * B**2, want[0], rtol=1e-4, atol=1e-9), i
        assert hooks.take(i) is None  # taken once
    assert hooks.backward_calls == 5  # Conv2d, GroupNorm, Linear, LayerNorm, Linear


def test_fast_and_exact_differ_on_the_conv_weight_only():
    model = small_cnn()
    x, y = batch()
    sums = {}
    for estimator in ("fast", "exact"):
        hooks = SqsumHooks(model, estimator, sq_dtype="float32")
        per_sample_loss(model(x), y).mean().backward()
        sums[estimator] = [hooks.take(i) for i in range(8)]
        hooks.remove()
    assert not torch.allclose(sums["fast"][0], sums["exact"][0], rtol=1e-3)
    for i in range(1, 8):
        assert torch.allclose(sums["fast"][i], sums["exact"][i], rtol=1e-4, atol=1e-12), i


def test_accumulated_micro_batches_add_their_sums():
    model = small_cnn()
    x, y = batch()
    hooks = SqsumHooks(model, "fast", sq_dtype="float32")
    per_sample_loss(model(x[:3]), y[:3]).mean().backward()
    per_sample_loss(model(x[3:]), y[3:]).mean().backward()
    two = [hooks.take(i) for i in range(8)]
    per_sample_loss(model(x[:3]), y[:3]).mean().backward()
    first = [hooks.take(i) for i in range(8)]
    per_sample_loss(model(x[3:]), y[3:]).mean().backward()
    second = [hooks.take(i) for i in range(8)]
    for t, a, b in zip(two, first, second, strict=True):
        assert torch.allclose(t, a + b, rtol=1e-5, atol=1e-12)


def test_no_grad_forward_leaves_nothing_behind():
    model = small_cnn()
    x, _ = batch()
    hooks = SqsumHooks(model, "fast")
    with torch.no_grad():
        model(x)
    assert hooks.sums == {} and hooks.backward_calls == 0


@pytest.mark.parametrize(
    ("model", "match"),
    [
        (nn.Sequential(nn.Conv1d(2, 2, 3)), "found Conv1d"),
        (nn.Sequential(nn.Linear(3, 3), nn.BatchNorm1d(3)), "BatchNorm"),
        (nn.Sequential(nn.Conv2d(2, 2, 3, padding_mode="circular")), "padding_mode"),
    ],
)
def test_unsupported_layers_are_one_clear_error(model, match):
    with pytest.raises(ConfigError, match=match):
        SqsumHooks(model, "fast")


def test_exact_needs_ungrouped_convs_and_a_known_estimator():
    with pytest.raises(ConfigError, match="groups=1"):
        SqsumHooks(nn.Sequential(nn.Conv2d(2, 2, 3, groups=2)), "exact")
    with pytest.raises(ConfigError, match="unknown variance estimator"):
        SqsumHooks(small_cnn(), "approx")
