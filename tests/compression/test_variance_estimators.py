"""worker_gradients: per-worker gradients and Σ_z (∇f_z)², exact vs fast, from one batched pass."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from vgcsim.core.errors import ConfigError, UnknownNameError
from vgcsim.traces.compression import sqsum_estimators as variance
from vgcsim.traces.compression.sqsum_estimators import (
    ESTIMATORS,
    estimator_gap,
    resolve_sq_dtype,
    worker_gradients,
)

W, B = 3, 5
LOSS = nn.CrossEntropyLoss(reduction="none")


def cnn() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Conv2d(2, 6, 3, padding=1),
        nn.GroupNorm(2, 6),
        nn.ReLU(inplace=True),
        nn.MaxPool2d(2),
        nn.Conv2d(6, 8, 3, stride=2, padding="valid", bias=False, groups=2),
        nn.ReLU(),
        nn.Flatten(),
        nn.Linear(8, 7),
        nn.LayerNorm(7),
        nn.Linear(7, 4),
    )


def mlp() -> nn.Module:
    torch.manual_seed(1)
    return nn.Sequential(
        nn.Linear(9, 16), nn.Tanh(), nn.Linear(16, 12), nn.ReLU(), nn.Linear(12, 4)
    )


def batch(shape, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(W * B, *shape, generator=g), torch.randint(0, 4, (W * B,), generator=g)


def reference(model, x, y):
    """Per-worker gradients and squared-gradient sums by plain autograd, one sample at a time."""
    params = [p for p in model.parameters()]
    grads = [torch.zeros(W, *p.shape) for p in params]
    sqs = [torch.zeros(W, *p.shape) for p in params]
    losses = torch.zeros(W)
    for i in range(W * B):
        loss = LOSS(model(x[i : i + 1]), y[i : i + 1]).sum()
        gs = torch.autograd.grad(loss, params)
        w = i // B
        losses[w] += loss.detach() / B
        for k, g in enumerate(gs):
            grads[k][w] += g / B
            sqs[k][w] += g * g
    return losses, grads, sqs


@pytest.mark.parametrize("estimator", [None, "fast", "exact"])
def test_worker_gradients_match_autograd(estimator):
    model = cnn()
    x, y = batch((2, 8, 8))
    losses, grads, sqs = reference(model, x, y)
    out = worker_gradients(model, LOSS, x, y, W, estimator)
    assert out.names == [n for n, _ in model.named_parameters()]
    torch.testing.assert_close(out.losses, losses, rtol=1e-5, atol=1e-6)
    for got, want in zip(out.grads, grads, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-6)
    if estimator is None:
        assert out.sqsums is None
    elif estimator == "exact":
        for got, want in zip(out.sqsums, sqs, strict=True):
            torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-7)


def test_fast_equals_exact_for_linear_layers():
    model = mlp()
    x, y = batch((9,), seed=2)
    exact = worker_gradients(model, LOSS, x, y, W, "exact")
    fast = worker_gradients(model, LOSS, x, y, W, "fast")
    for e, f in zip(exact.sqsums, fast.sqsums, strict=True):
        torch.testing.assert_close(f, e, rtol=1e-4, atol=1e-8)
    # sq_dtype only concerns Conv2d: Linear layers stay exact under every setting.
    for sq_dtype in ("auto", "bfloat16"):
        rows = estimator_gap(model, LOSS, x, y, W, sq_dtype=sq_dtype)
        assert all(row["rel_error"] < 1e-5 for row in rows), sq_dtype


def test_linear_on_sequences_sums_the_bias_gradient_over_positions():
    # A Linear layer fed [N, seq, in]: per-sample loss Σ_t y_t·(w·x_t + b), so per sample
    # ∂/∂b = Σ_t y_t (a SUM over positions; a mean would give a third of it) and
    # ∂/∂w = Σ_t y_t·x_t. Worked by hand, one worker, B = 2:
    #   sample 0: x = [[1,0],[0,1],[1,1]], y = [1,2,3] -> ∂b = 6, ∂w = [4, 5]
    #   sample 1: x = [[2,0],[0,0],[0,1]], y = [1,1,1] -> ∂b = 3, ∂w = [2, 1]
    # mean gradient: b 4.5, w [3, 3]; Σ_z squares: b 36 + 9 = 45, w [20, 26].
    # The fast weight sum squares per position: Σ_z Σ_t (y_t x_t)² = [1+0+9+4+0+0,
    # 0+4+9+0+0+1] = [14, 14] (the documented approximation); its bias sum is exact.
    model = nn.Linear(2, 1)
    x = torch.tensor([[[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]], [[2.0, 0.0], [0.0, 0.0], [0.0, 1.0]]])
    y = torch.tensor([[1.0, 2.0, 3.0], [1.0, 1.0, 1.0]])

    def loss(out, target):
        return (out.squeeze(-1) * target).sum(1)

    fast = worker_gradients(model, loss, x, y, 1, "fast")
    exact = worker_gradients(model, loss, x, y, 1, "exact")
    for out in (fast, exact):
        grads = dict(zip(out.names, out.grads, strict=True))
        sqsums = dict(zip(out.names, out.sqsums, strict=True))
        torch.testing.assert_close(grads["bias"], torch.tensor([[4.5]]), rtol=0, atol=1e-6)
        torch.testing.assert_close(grads["weight"], torch.tensor([[[3.0, 3.0]]]))
        torch.testing.assert_close(sqsums["bias"], torch.tensor([[45.0]]), rtol=0, atol=1e-5)
    torch.testing.assert_close(exact.sqsums[0], torch.tensor([[[20.0, 26.0]]]))
    torch.testing.assert_close(fast.sqsums[0], torch.tensor([[[14.0, 14.0]]]))


def test_conv_gap_is_measured_not_assumed():
    model = cnn()
    x, y = batch((2, 8, 8), seed=3)
    rows = {r["name"]: r for r in estimator_gap(model, LOSS, x, y, W, sq_dtype="float32")}
    # Conv weights with spatial extent: squares summed over positions differ from exact.
    assert rows["0.weight"]["kind"] == "Conv2d" and rows["0.weight"]["rel_error"] > 0.01
    # The second conv sees 4x4 inputs with a 3x3 stride-2 kernel: one output position, exact.
    assert rows["4.weight"]["kind"] == "Conv2d" and rows["4.weight"]["rel_error"] < 1e-5
    # Biases, GroupNorm, LayerNorm and Linear are exact in the fast path.
    for name in ("0.bias", "1.weight", "1.bias", "7.weight", "7.bias", "8.weight", "9.weight"):
        assert rows[name]["rel_error"] < 1e-5, name
    # And the gradients themselves agree everywhere.
    assert all(r["grad_rel_error"] < 1e-5 for r in rows.values())


def test_conv_with_one_output_position_is_exact():
    # A kernel covering the whole input has a single spatial position: fast == exact.
    torch.manual_seed(4)
    model = nn.Sequential(nn.Conv2d(3, 5, 4), nn.Flatten(), nn.Linear(5, 4))
    x, y = batch((3, 4, 4), seed=4)
    rows = estimator_gap(model, LOSS, x, y, W, sq_dtype="float32")
    assert all(r["rel_error"] < 1e-5 for r in rows)


def test_bfloat16_squared_sums_stay_within_a_percent_of_float32():
    # bf16 inputs (8-bit mantissa) with fp32 accumulation: each product is off by < 2^-7,
    # far below the fast-vs-exact gap; gradients and non-conv parameters are untouched.
    model = cnn()
    x, y = batch((2, 8, 8), seed=5)
    f32 = worker_gradients(model, LOSS, x, y, W, "fast", sq_dtype="float32")
    b16 = worker_gradients(model, LOSS, x, y, W, "fast", sq_dtype="bfloat16")
    convs = {"0.weight", "4.weight"}
    for name, s32, s16, g32, g16 in zip(
        f32.names, f32.sqsums, b16.sqsums, f32.grads, b16.grads, strict=True
    ):
        assert torch.equal(g32, g16), name
        if name in convs:
            rel = float((s16 - s32).abs().sum() / s32.abs().sum())
            assert 0 < rel < 1e-2, (name, rel)
        else:
            assert torch.equal(s32, s16), name


def test_auto_precision_follows_the_cpu(monkeypatch):
    monkeypatch.setattr(torch.backends.mkldnn, "is_available", lambda: True)
    monkeypatch.setattr(variance, "native_bf16", lambda: True)
    assert resolve_sq_dtype("auto") == "bfloat16"
    monkeypatch.setattr(torch.backends.mkldnn, "is_available", lambda: False)
    assert resolve_sq_dtype("auto") == "float32"
    monkeypatch.setattr(torch.backends.mkldnn, "is_available", lambda: True)
    monkeypatch.setattr(variance, "native_bf16", lambda: False)
    assert resolve_sq_dtype("auto") == "float32"
    assert resolve_sq_dtype("bfloat16") == "bfloat16"
    with pytest.raises(UnknownNameError, match="auto, bfloat16, float32"):
        resolve_sq_dtype("fp8")


def test_errors():
    x, y = batch((9,))
    with pytest.raises(UnknownNameError, match="exact, fast"):
        worker_gradients(mlp(), LOSS, x, y, W, "approx")
    with pytest.raises(ConfigError, match="split"):
        worker_gradients(mlp(), LOSS, x, y, 4, "fast")
    bn = nn.Sequential(nn.Linear(9, 4), nn.BatchNorm1d(4))
    with pytest.raises(ConfigError, match="BatchNorm"):
        worker_gradients(bn, LOSS, x, y, W, "exact")
    assert ESTIMATORS == ("exact", "fast")


def test_unsupported_module_fast_errors_and_none_falls_back():
    torch.manual_seed(5)
    model = nn.Sequential(nn.Embedding(10, 6), nn.Flatten(), nn.Linear(12, 4))
    g = torch.Generator().manual_seed(5)
    x = torch.randint(0, 10, (W * B, 2), generator=g)
    y = torch.randint(0, 4, (W * B,), generator=g)
    with pytest.raises(ConfigError, match="Embedding"):
        worker_gradients(model, LOSS, x, y, W, "fast")
    _, grads, sqs = reference(model, x, y)
    out = worker_gradients(model, LOSS, x, y, W, None)
    for got, want in zip(out.grads, grads, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-6)
    exact = worker_gradients(model, LOSS, x, y, W, "exact")
    for got, want in zip(exact.sqsums, sqs, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-7)


def test_in_place_use_of_a_tapped_output_is_detected_and_copied():
    from vgcsim.traces.compression.sqsum_estimators import _COPY_TAPS

    torch.manual_seed(6)
    model = nn.Sequential(nn.Linear(9, 8), nn.ReLU(inplace=True), nn.Linear(8, 4))
    x, y = batch((9,), seed=6)
    _, grads, sqs = reference(model, x, y)
    out = worker_gradients(model, LOSS, x, y, W, "fast")
    assert model[0] in _COPY_TAPS and model[2] not in _COPY_TAPS
    for got, want in zip(out.grads, grads, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-6)
    for got, want in zip(out.sqsums, sqs, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-7)


def test_exact_in_sample_chunks_matches_one_pass(monkeypatch):
    import vgcsim.traces.compression.sqsum_estimators as variance

    model = cnn()
    x, y = batch((2, 8, 8), seed=7)
    whole = worker_gradients(model, LOSS, x, y, W, "exact")
    per_sample = 4 * sum(p.numel() for p in model.parameters())
    monkeypatch.setattr(variance, "EXACT_CHUNK_BYTES", 4 * per_sample)  # chunks of 4 samples
    chunked = worker_gradients(model, LOSS, x, y, W, "exact")
    torch.testing.assert_close(chunked.losses, whole.losses)
    for a, b in zip(chunked.grads + chunked.sqsums, whole.grads + whole.sqsums, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)


def test_gradients_only_fall_back_for_a_conv_padding_the_taps_lack():
    # estimator=None once raised "fast estimator: Conv2d padding_mode 'reflect' unsupported"
    # although the torch.func fallback computes these gradients.
    torch.manual_seed(6)
    model = nn.Sequential(
        nn.Conv2d(2, 3, 3, padding=1, padding_mode="reflect"), nn.Flatten(), nn.Linear(48, 4)
    )
    x, y = batch((2, 4, 4), seed=6)
    _, grads, _ = reference(model, x, y)
    out = worker_gradients(model, LOSS, x, y, W, None)
    for got, want in zip(out.grads, grads, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-6)
    with pytest.raises(ConfigError, match="padding_mode 'reflect'"):
        worker_gradients(model, LOSS, x, y, W, "fast")


class _Residual(nn.Module):
    """A conv whose output feeds two branches (skip + conv), then a linear head."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(6)
        self.c1 = nn.Conv2d(2, 4, 3, padding=1)
        self.c2 = nn.Conv2d(4, 4, 3, padding=1)
        self.head = nn.Linear(4 * 8 * 8, 4)

    def forward(self, x):
        h = self.c1(x)
        return self.head((h + torch.relu(self.c2(h))).flatten(1))


def test_a_layer_output_used_twice_gets_its_whole_gradient():
    # Layer gradients are computed in backward hooks on the layer outputs; an output read
    # by two branches must see the sum of both branches' gradients.
    model = _Residual()
    x, y = batch((2, 8, 8), seed=6)
    losses, grads, sqs = reference(model, x, y)
    for estimator in ("fast", None):
        out = worker_gradients(model, LOSS, x, y, W, estimator)
        for got, want in zip(out.grads, grads, strict=True):
            torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-6)


# worker_gradients and estimator_gap at points the other variance tests leave open, each
# worked out by hand: the torch.func fallback (a parameter outside Linear/Conv2d/norm layers)
# with targets of more than one column and with dropout, the estimator gap with one sample per
# worker (|B|² = 1 in the decision g² > α·Σ(∇f_z)²/|B|²), and the fast estimator's precision
# reaching estimator_gap.


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
