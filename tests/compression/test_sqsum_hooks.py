"""Squared-gradient sums from module hooks in the ordinary backward equal the recorder's."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from vgcsim.core.errors import ConfigError
from vgcsim.traces.compression.sqsum_estimators import worker_gradients
from vgcsim.traces.compression.sqsum_hooks import SqsumHooks

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


# -- each rule of the hooks on its own, against independent references -----------------------


def _per_sample_sqsums(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> list[torch.Tensor]:
    """Σ_z (∇f_z / B)² by one backward per sample (the hooks see each sample's share of the
    mean loss): the definition, computed without any estimator."""
    params = [p for p in model.parameters() if p.requires_grad]
    sums = [torch.zeros_like(p) for p in params]
    n = x.shape[0]
    for z in range(n):
        model.zero_grad()
        (per_sample_loss(model(x[z : z + 1]), y[z : z + 1]).sum() / n).backward()
        for s, p in zip(sums, params, strict=True):
            s += p.grad.square()
    model.zero_grad()
    return sums


def test_exact_sums_equal_per_sample_backward_passes_for_dilated_non_square_convs():
    """The exact estimator's Conv2d weight sums equal the per-sample definition (one backward
    per sample) for a dilated convolution whose output has as many channels as rows would
    be wrong (O = 3 channels, a 5 × 7 output map): the unfold takes the dilation and the
    per-sample gradient reshapes by the output channels."""
    torch.manual_seed(3)
    model = nn.Sequential(
        nn.Conv2d(2, 3, 3, dilation=2, padding=2), nn.Flatten(), nn.Linear(3 * 5 * 7, 4)
    )
    g = torch.Generator().manual_seed(4)
    x, y = torch.randn(B, 2, 5, 7, generator=g), torch.randint(0, 4, (B,), generator=g)
    want = _per_sample_sqsums(model, x, y)
    hooks = SqsumHooks(model, "exact", sq_dtype="float32")
    per_sample_loss(model(x), y).mean().backward()
    for i, w in enumerate(want):
        assert torch.allclose(hooks.take(i), w, rtol=1e-4, atol=1e-12), i


def test_exact_on_2d_linear_layers_is_the_fast_formula_bit_for_bit():
    """For a Linear layer on [N, in] inputs the fast formula Σ_z δ_z² a_z² is already exact;
    the exact estimator computes it the same way (not through per-sample products), so the
    two estimators give the same bits there."""
    torch.manual_seed(5)
    model = nn.Sequential(nn.Linear(6, 5), nn.ReLU(), nn.Linear(5, 4))
    g = torch.Generator().manual_seed(6)
    x, y = torch.randn(B, 6, generator=g), torch.randint(0, 4, (B,), generator=g)
    sums = {}
    for estimator in ("fast", "exact"):
        hooks = SqsumHooks(model, estimator, sq_dtype="float32")
        per_sample_loss(model(x), y).mean().backward()
        sums[estimator] = [hooks.take(i) for i in range(4)]
        hooks.remove()
    for f, e in zip(sums["fast"], sums["exact"], strict=True):
        assert torch.equal(f, e)


def test_the_default_estimator_is_fast():
    model = small_cnn()
    x, y = batch()
    sums = {}
    for name, kwargs in (("default", {}), ("fast", {"estimator": "fast"})):
        hooks = SqsumHooks(model, sq_dtype="float32", **kwargs)
        per_sample_loss(model(x), y).mean().backward()
        sums[name] = [hooks.take(i) for i in range(8)]
        hooks.remove()
    for a, b in zip(sums["default"], sums["fast"], strict=True):
        assert torch.equal(a, b)


def test_bfloat16_sums_are_computed_in_bfloat16():
    """``sq_dtype="bfloat16"`` computes the Conv2d squared sums in bf16 (then stored as fp32):
    close to the fp32 sums, but not the same bits."""
    model = small_cnn()
    x, y = batch()
    sums = {}
    for dtype in ("float32", "bfloat16"):
        hooks = SqsumHooks(model, "fast", sq_dtype=dtype)
        per_sample_loss(model(x), y).mean().backward()
        sums[dtype] = [hooks.take(i) for i in range(8)]
        hooks.remove()
    conv_w = (sums["float32"][0], sums["bfloat16"][0])
    assert conv_w[1].dtype == torch.float32
    assert not torch.equal(*conv_w)
    assert torch.allclose(conv_w[1], conv_w[0], rtol=0.05, atol=1e-12)


def test_a_frozen_weight_leaves_the_bias_of_its_layer_served():
    """A Linear whose weight is frozen and whose bias trains: the bias (layer 0 among the
    trainable parameters) still gets its sums, equal to the per-sample definition."""
    torch.manual_seed(7)
    model = nn.Sequential(nn.Linear(4, 3), nn.ReLU(), nn.Linear(3, 2))
    model[0].weight.requires_grad_(False)
    g = torch.Generator().manual_seed(8)
    x, y = torch.randn(B, 4, generator=g), torch.randint(0, 2, (B,), generator=g)
    want = _per_sample_sqsums(model, x, y)
    hooks = SqsumHooks(model, "fast", sq_dtype="float32")
    per_sample_loss(model(x), y).mean().backward()
    assert len(want) == 3  # bias 0, weight and bias of the last layer
    for i, w in enumerate(want):
        assert torch.allclose(hooks.take(i), w, rtol=1e-4, atol=1e-12), i


def test_a_backward_with_create_graph_gives_the_same_sums_outside_the_graph():
    """A backward with ``create_graph=True`` (a gradient penalty, say) runs the hooks with
    grad mode on: the sums equal an ordinary backward's and do not require grad."""
    model = small_cnn()
    x, y = batch()
    hooks = SqsumHooks(model, "fast", sq_dtype="float32")
    per_sample_loss(model(x), y).mean().backward()
    plain = [hooks.take(i) for i in range(8)]
    loss = per_sample_loss(model(x), y).mean()
    torch.autograd.grad(loss, list(model.parameters()), create_graph=True)
    graph = [hooks.take(i) for i in range(8)]
    for a, b in zip(plain, graph, strict=True):
        assert not b.requires_grad
        assert torch.allclose(a, b, rtol=1e-6, atol=0)


def test_seconds_add_up_the_time_of_every_hook_call(monkeypatch):
    """``seconds`` sums the time each hook call takes: with a clock that advances 0.25 s per
    reading, each call adds exactly 0.25 s."""
    import vgcsim.traces.compression.sqsum_hooks as mod

    ticks = iter(range(10_000))
    monkeypatch.setattr(mod.time, "perf_counter", lambda: 0.25 * next(ticks) + 1000.0)
    model = small_cnn()
    x, y = batch()
    hooks = SqsumHooks(model, "fast", sq_dtype="float32")
    per_sample_loss(model(x), y).mean().backward()
    per_sample_loss(model(x), y).mean().backward()
    assert hooks.backward_calls == 10
    assert hooks.seconds == 10 * 0.25


def test_a_model_frozen_after_the_hooks_were_attached_is_left_alone():
    """Freezing every parameter after attaching the hooks: a forward under grad mode gives
    outputs that do not require grad, and the hooks register nothing on them."""
    model = small_cnn()
    x, _ = batch()
    hooks = SqsumHooks(model, "fast")
    model.requires_grad_(False)
    out = model(x)
    assert not out.requires_grad
    assert hooks.sums == {} and hooks.backward_calls == 0


def test_remove_detaches_every_hook_and_may_be_called_twice():
    model = small_cnn()
    x, y = batch()
    hooks = SqsumHooks(model, "fast")
    hooks.remove()
    hooks.remove()
    per_sample_loss(model(x), y).mean().backward()
    assert hooks.sums == {} and hooks.backward_calls == 0


def test_every_refusal_is_its_whole_message():
    with pytest.raises(ConfigError) as err:
        SqsumHooks(small_cnn(), "approx")
    assert str(err.value).startswith("unknown variance estimator 'approx'")
    with pytest.raises(ConfigError) as err:
        SqsumHooks(nn.Sequential(nn.Linear(3, 3), nn.BatchNorm1d(3)), "fast")
    assert str(err.value) == "per-sample gradients are ill-defined with BatchNorm; use GroupNorm"
    with pytest.raises(ConfigError) as err:
        SqsumHooks(nn.Sequential(nn.Conv1d(2, 2, 3), nn.Embedding(4, 2)), "fast")
    assert str(err.value) == (
        "squared-gradient sums from the backward support parameters of "
        "Linear, Conv2d, GroupNorm, LayerNorm only; found Conv1d, Embedding"
    )
    with pytest.raises(ConfigError) as err:
        SqsumHooks(nn.Sequential(nn.Conv2d(2, 2, 3, groups=2)), "exact")
    assert str(err.value) == (
        "exact squared-gradient sums from the backward need Conv2d groups=1 "
        "(found groups=2); use estimator 'fast'"
    )


def test_an_input_changed_in_place_after_its_forward_is_the_whole_message():
    """The second Linear's input is changed in place after its forward: the backward refuses
    with the message naming the module type."""
    torch.manual_seed(9)
    lin1, lin2 = nn.Linear(3, 3), nn.Linear(3, 2)
    model = nn.Sequential(lin1, lin2)
    SqsumHooks(model, "fast")
    h = lin1(torch.randn(B, 3))
    out = lin2(h)
    with torch.no_grad():
        h.mul_(2.0)
    with pytest.raises(ConfigError) as err:
        out.sum().backward()
    assert str(err.value) == (
        "the input of Linear was modified in place after its forward; squared-gradient sums "
        "need it unchanged (avoid inplace=True there)"
    )
