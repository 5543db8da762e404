"""Worker gradients, squared-gradient sums and the estimator gap worked out by hand.

A 1×1 convolution without bias on 1×1×2 inputs, weight 1, loss = sum of the two outputs:
the output gradient δ is 1 at both positions, so sample z = (a1, a2) has loss a1 + a2 and
weight gradient ∇f_z = a1 + a2. The exact squared sum of a worker is Σ_z (a1 + a2)²; the
fast estimator sums squares over positions within a sample, Σ_z (a1² + a2²)
(``vgcsim.traces.compression.sqsum_estimators`` module docstring).

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
from torchhelpers import default_dtype

from vgcsim.traces.compression.sqsum_estimators import estimator_gap, worker_gradients

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


# ----------------------------------------------- sequence inputs, norm layers, frozen layers


class _SeqNet(nn.Module):
    """LayerNorm over [N, 3, 4] sequences, a frozen Linear, GroupNorm over [N, 4, 3], a head."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(11)
        self.ln = nn.LayerNorm(4)
        self.frozen = nn.Linear(4, 4)
        self.frozen.requires_grad_(False)
        self.gn = nn.GroupNorm(2, 4)
        self.head = nn.Linear(12, 3)
        with torch.no_grad():  # affine parameters away from their 1 / 0 defaults
            for p in (self.ln.weight, self.ln.bias, self.gn.weight, self.gn.bias):
                p.add_(torch.randn(p.shape))

    def forward(self, x):
        h = self.frozen(self.ln(x)).tanh()
        return self.head(self.gn(h.transpose(1, 2)).flatten(1))


def _per_sample_reference(model, x, y, workers):
    """Each sample's gradient by its own autograd backward: per-worker means and Σ_z g_z²."""
    params = [p for p in model.parameters() if p.requires_grad]
    per = []
    for z in range(x.shape[0]):
        gs = torch.autograd.grad(
            nn.functional.cross_entropy(model(x[z : z + 1]), y[z : z + 1]), params
        )
        per.append([g.detach() for g in gs])
    b = x.shape[0] // workers
    grads, sqsums = [], []
    for i in range(len(params)):
        stack = torch.stack([per[z][i] for z in range(x.shape[0])]).reshape(
            workers, b, *params[i].shape
        )
        grads.append(stack.mean(1))
        sqsums.append(stack.square().sum(1))
    return grads, sqsums


@pytest.mark.parametrize("estimator", ["exact", "fast", None])
def test_norm_layers_on_sequences_and_frozen_layers_against_per_sample_autograd(estimator):
    model = _SeqNet()
    g = torch.Generator().manual_seed(12)
    x, y = torch.randn(6, 3, 4, generator=g), torch.randint(0, 3, (6,), generator=g)
    loss = nn.CrossEntropyLoss(reduction="none")
    wg = worker_gradients(model, loss, x, y, 2, estimator, sq_dtype="float32")
    # the frozen Linear is no layer: LayerNorm, GroupNorm and head parameters only
    assert wg.names == ["ln.weight", "ln.bias", "gn.weight", "gn.bias", "head.weight", "head.bias"]
    grads, sqsums = _per_sample_reference(model, x, y, 2)
    torch.testing.assert_close(wg.losses, loss(model(x), y).reshape(2, 3).mean(1))
    for got, want in zip(wg.grads, grads, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-7)
    if estimator is None:
        assert wg.sqsums is None
    else:
        # every one of these parameters is exact in the fast path too
        for got, want in zip(wg.sqsums, sqsums, strict=True):
            torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-9)


@pytest.mark.parametrize("estimator", ["exact", "fast"])
def test_backward_hooks_on_sequences_and_frozen_layers_against_per_sample_autograd(estimator):
    from vgcsim.traces.compression.sqsum_hooks import SqsumHooks

    model = _SeqNet()
    g = torch.Generator().manual_seed(13)
    x, y = torch.randn(4, 3, 4, generator=g), torch.randint(0, 3, (4,), generator=g)
    _, sqsums = _per_sample_reference(model, x, y, 1)
    hooks = SqsumHooks(model, estimator, sq_dtype="float32")
    nn.functional.cross_entropy(model(x), y, reduction="sum").backward()
    # a sum loss: each sample's own gradient reaches the hooks unscaled
    assert hooks.backward_calls == 3  # LayerNorm, GroupNorm, head; not the frozen Linear
    for i, want in enumerate(sqsums):
        torch.testing.assert_close(hooks.take(i), want[0], rtol=1e-4, atol=1e-9)
    assert hooks.take(0) is None and hooks.sums == {}
    hooks.remove()
    nn.functional.cross_entropy(model(x), y).backward()
    assert hooks.backward_calls == 3 and hooks.sums == {}


def test_estimator_gap_and_worker_gradients_default_to_the_auto_precision():
    # the hand case is exact in bfloat16 too (small integers), so "auto" gives the same rows
    # whichever precision it resolves to on this machine
    rows = estimator_gap(_model(), _sum_loss, X, Y, 2)
    assert rows == estimator_gap(_model(), _sum_loss, X, Y, 2, sq_dtype="float32")
    wg = worker_gradients(_model(), _sum_loss, X, Y, 2, "fast")
    assert torch.equal(wg.sqsums[0].reshape(-1), torch.tensor([6.0, 18.0]))


def test_exact_backward_hooks_of_a_linear_over_sequences_against_per_sample_autograd():
    from vgcsim.traces.compression.sqsum_hooks import SqsumHooks

    torch.manual_seed(14)
    model = nn.Sequential(nn.Linear(4, 2), nn.Flatten(), nn.Linear(6, 3))
    g = torch.Generator().manual_seed(15)
    x, y = torch.randn(5, 3, 4, generator=g), torch.randint(0, 3, (5,), generator=g)
    _, sqsums = _per_sample_reference(model, x, y, 1)
    hooks = SqsumHooks(model, "exact", sq_dtype="float32")
    assert hooks.seconds == 0.0
    nn.functional.cross_entropy(model(x), y, reduction="sum").backward()
    assert hooks.seconds > 0.0  # time spent in the hooks, a diagnostic
    for i, want in enumerate(sqsums):
        torch.testing.assert_close(hooks.take(i), want[0], rtol=1e-4, atol=1e-9)


# torch warns that an even kernel with padding="same" may copy the input: the case is on purpose
@pytest.mark.filterwarnings("ignore:Using padding='same' with even kernel lengths")
def test_same_padding_convs_are_served_and_asymmetric_ones_refused():
    from vgcsim.core.errors import ConfigError

    torch.manual_seed(16)
    model = nn.Sequential(
        nn.Conv2d(1, 2, 3, padding="same", dilation=2), nn.Flatten(), nn.Linear(32, 3)
    )
    g = torch.Generator().manual_seed(17)
    x, y = torch.randn(4, 1, 4, 4, generator=g), torch.randint(0, 3, (4,), generator=g)
    loss = nn.CrossEntropyLoss(reduction="none")
    grads, _ = _per_sample_reference(model, x, y, 2)
    # 'same' with k = 3, dilation 2: 2 rows of padding each side; the taps' gradients are exact
    wg = worker_gradients(model, loss, x, y, 2, "fast", sq_dtype="float32")
    for got, want in zip(wg.grads, grads, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-7)
    even = nn.Sequential(nn.Conv2d(1, 2, 2, padding="same"), nn.Flatten(), nn.Linear(32, 3))
    with pytest.raises(ConfigError) as exc:
        worker_gradients(even, loss, x, y, 2, "fast")
    assert str(exc.value) == "fast estimator: asymmetric 'same' Conv2d padding unsupported"


def test_estimator_gap_figures_do_not_depend_on_the_scale_of_the_loss():
    """Every figure of estimator_gap is a ratio: a loss scaled by 2^-12 (gradients scaled
    exactly, their L1 norms far below 1) gives the same rows, the gradient gap included,
    where a conv weight's fast and exact gradients differ in their last bits."""
    from torch import nn

    def model():
        torch.manual_seed(11)
        return nn.Sequential(nn.Conv2d(1, 2, 3, padding=1), nn.Flatten(), nn.Linear(32, 3))

    g = torch.Generator().manual_seed(12)
    x, y = torch.randn(8, 1, 4, 4, generator=g), torch.randint(0, 3, (8,), generator=g)
    ce = nn.CrossEntropyLoss(reduction="none")
    rows = estimator_gap(model(), ce, x, y, 2, sq_dtype="float32")
    small = estimator_gap(model(), lambda o, t: ce(o, t) * 2.0**-12, x, y, 2, sq_dtype="float32")
    assert rows[0]["grad_rel_error"] > 0  # the conv weight's gradients differ a little
    for a, b in zip(rows, small, strict=True):
        for key in ("rel_error", "ratio", "grad_rel_error", "flip_rate"):
            assert b[key] == pytest.approx(a[key], rel=1e-9, abs=0), (a["name"], key)


def test_gradients_alone_take_the_tapped_pass_where_its_convolutions_serve():
    """estimator=None on a model whose convolutions the tapped pass serves (zeros padding):
    the same pass as the fast estimator, so the same gradient bits; with a padding it lacks
    (reflect), the torch.func fallback, equal to the exact estimator's gradients."""
    from torch import nn

    g = torch.Generator().manual_seed(21)
    x, y = torch.randn(8, 1, 5, 5, generator=g), torch.randint(0, 3, (8,), generator=g)
    ce = nn.CrossEntropyLoss(reduction="none")
    for padding_mode, ref in (("zeros", "fast"), ("reflect", "exact")):
        torch.manual_seed(22)
        model = nn.Sequential(
            nn.Conv2d(1, 2, 3, padding=1, padding_mode=padding_mode),
            nn.Flatten(),
            nn.Linear(50, 3),
        )
        plain = worker_gradients(model, ce, x, y, 2, None)
        if ref == "fast":
            want = worker_gradients(model, ce, x, y, 2, "fast", sq_dtype="float32")
            for a, b in zip(plain.grads, want.grads, strict=True):
                assert torch.equal(a, b)
        else:
            want = worker_gradients(model, ce, x, y, 2, "exact")
            for a, b in zip(plain.grads, want.grads, strict=True):
                torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-7)
        assert plain.sqsums is None


def _per_worker_autograd(model, loss_fn, x, y, workers):
    """Each worker's gradient of its mean loss, by one ordinary backward per worker."""
    b = x.shape[0] // workers
    out = []
    for w in range(workers):
        model.zero_grad()
        loss_fn(model(x[w * b : (w + 1) * b]), y[w * b : (w + 1) * b]).mean().backward()
        out.append(
            [torch.zeros_like(p) if p.grad is None else p.grad.clone() for p in model.parameters()]
        )
    model.zero_grad()
    return [torch.stack([o[i] for o in out]) for i in range(len(out[0]))]


@pytest.mark.parametrize(
    "conv",
    [
        {"kernel_size": 3, "padding": (1, 2)},  # explicit, a different padding per side
        {"kernel_size": (3, 5), "padding": "same"},  # "same" with a non-square kernel
        {"kernel_size": (3, 3), "padding": "same", "dilation": (1, 2)},  # and dilation
    ],
    ids=["explicit-1-2", "same-3x5", "same-dilated"],
)
def test_conv_gradients_with_uneven_padding_equal_per_worker_autograd(conv):
    """The tapped pass computes each worker's conv weight gradient with the conv's own
    padding per side (rows and columns differ here): equal to one ordinary backward per
    worker, for the gradients alone and with the fast estimator's sums."""
    from torch import nn

    torch.manual_seed(31)
    c = nn.Conv2d(1, 2, **conv)
    g = torch.Generator().manual_seed(32)
    x = torch.randn(8, 1, 5, 6, generator=g)
    with torch.no_grad():
        flat = c(x).flatten(1).shape[1]
    model = nn.Sequential(c, nn.Flatten(), nn.Linear(flat, 3))
    y = torch.randint(0, 3, (8,), generator=g)
    ce = nn.CrossEntropyLoss(reduction="none")
    want = _per_worker_autograd(model, ce, x, y, 2)
    for estimator in (None, "fast"):
        got = worker_gradients(model, ce, x, y, 2, estimator, sq_dtype="float32")
        for a, b in zip(got.grads, want, strict=True):
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-7)


def test_worker_gradients_do_not_depend_on_the_default_dtype():
    """The same gradients and sums, dtype and bits, with torch's default dtype set to float64
    (the model and data fp32): every buffer takes the parameter's dtype."""
    from torch import nn

    torch.manual_seed(33)
    model = nn.Sequential(nn.Conv2d(1, 2, 3, padding=1), nn.Flatten(), nn.Linear(32, 3))
    g = torch.Generator().manual_seed(34)
    x, y = torch.randn(8, 1, 4, 4, generator=g), torch.randint(0, 3, (8,), generator=g)
    ce = nn.CrossEntropyLoss(reduction="none")
    ref = worker_gradients(model, ce, x, y, 2, "fast", sq_dtype="float32")
    with default_dtype(torch.float64):
        got = worker_gradients(model, ce, x, y, 2, "fast", sq_dtype="float32")
    for a, b in zip(got.grads + got.sqsums, ref.grads + ref.sqsums, strict=True):
        assert a.dtype == b.dtype == torch.float32
        assert torch.equal(a, b)


@pytest.mark.parametrize(
    ("budget", "chunks"),
    [
        (lambda s: 3 * s, [3, 3, 2]),  # exactly three samples' gradients
        (lambda s: 3 * s - 1, [2, 2, 2, 2]),  # one byte short of three
        (lambda s: s - 1, [1] * 8),  # not even one sample: one at a time
        (lambda s: 100 * s, [8]),  # the whole batch at once
    ],
    ids=["3", "just-under-3", "under-1", "all"],
)
def test_exact_estimator_holds_at_most_its_memory_budget_of_per_sample_gradients(
    monkeypatch, budget, chunks
):
    """The exact estimator computes per-sample gradients (4 bytes per parameter per sample)
    in chunks of as many samples as ``EXACT_CHUNK_BYTES`` holds, at least one: a spy on
    torch.func.vmap sees the chunk sizes; the results equal the one-pass results."""
    import torch.func
    from torch import nn

    import vgcsim.traces.compression.sqsum_estimators as variance

    torch.manual_seed(41)
    model = nn.Sequential(nn.Conv2d(1, 2, 3, padding=1), nn.Flatten(), nn.Linear(32, 3))
    per_sample = 4 * sum(p.numel() for p in model.parameters())
    g = torch.Generator().manual_seed(42)
    x, y = torch.randn(8, 1, 4, 4, generator=g), torch.randint(0, 3, (8,), generator=g)
    ce = nn.CrossEntropyLoss(reduction="none")
    whole = worker_gradients(model, ce, x, y, 2, "exact")
    seen = []
    real_vmap = torch.func.vmap

    def spy_vmap(fn, *args, **kwargs):
        inner = real_vmap(fn, *args, **kwargs)

        def call(params, xs, ys):
            seen.append(xs.shape[0])
            return inner(params, xs, ys)

        return call

    monkeypatch.setattr(torch.func, "vmap", spy_vmap)
    monkeypatch.setattr(variance, "EXACT_CHUNK_BYTES", budget(per_sample))
    got = worker_gradients(model, ce, x, y, 2, "exact")
    assert seen == chunks
    # Equal up to float32 summation order: chunks add the samples in another order, and an
    # element whose terms cancel keeps the absolute rounding of the large ones (on one CPU an
    # element of 4.7e-4 came out 2.6e-8 apart, 5.6e-5 relative, in a tensor whose largest
    # element is 0.27). So the tolerance is relative to each tensor's scale: 1e-6 of its
    # largest element, about 6 times the largest difference seen in any tensor (1.7e-7 of
    # its scale, under 1.5 float32 epsilons); a chunk that dropped or repeated a sample
    # would move elements by a sizeable fraction of that scale.
    for a, b in zip(got.grads + got.sqsums, whole.grads + whole.sqsums, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6 * float(b.abs().max()))


def test_exact_estimator_draws_independent_dropout_masks_per_sample():
    """A model with dropout in training mode: the per-sample pass draws each sample's mask
    (torch.func's randomness="different"); it runs, and the same seed gives the same sums."""
    from torch import nn

    torch.manual_seed(43)
    model = nn.Sequential(nn.Flatten(), nn.Linear(16, 8), nn.Dropout(0.5), nn.Linear(8, 3))
    model.train()
    g = torch.Generator().manual_seed(44)
    x, y = torch.randn(8, 1, 4, 4, generator=g), torch.randint(0, 3, (8,), generator=g)
    ce = nn.CrossEntropyLoss(reduction="none")
    torch.manual_seed(45)
    a = worker_gradients(model, ce, x, y, 2, "exact")
    torch.manual_seed(45)
    b = worker_gradients(model, ce, x, y, 2, "exact")
    for u, v in zip(a.sqsums, b.sqsums, strict=True):
        assert torch.equal(u, v)


class _Branchy(torch.nn.Module):
    """Runs a Linear layer whose output it discards (``unused``) beside the one it returns."""

    def __init__(self):
        super().__init__()
        self.used = torch.nn.Linear(4, 3)
        self.unused = torch.nn.Linear(4, 2)

    def forward(self, x):
        self.unused(x)  # computed and discarded
        return self.used(x)


def test_a_hooked_layer_whose_output_never_reaches_the_loss_gets_zero_gradients():
    """A model whose forward also runs a Linear layer whose output it discards: the tapped
    pass asks autograd for that output's gradient too (allowed to be unused) and gives the
    layer zero gradients and zero sums, the others equal to per-worker autograd."""
    from torch import nn

    torch.manual_seed(51)
    model = _Branchy()
    g = torch.Generator().manual_seed(52)
    x, y = torch.randn(8, 4, generator=g), torch.randint(0, 3, (8,), generator=g)
    ce = nn.CrossEntropyLoss(reduction="none")
    got = worker_gradients(model, ce, x, y, 2, "fast", sq_dtype="float32")
    names = [n for n, _ in model.named_parameters()]
    for name, grad, sq, p in zip(names, got.grads, got.sqsums, model.parameters(), strict=True):
        assert grad.shape == sq.shape == (2, *p.shape), name  # [workers, *shape]
        if name.startswith("unused"):
            assert torch.count_nonzero(grad) == 0 and torch.count_nonzero(sq) == 0, name
    want = _per_worker_autograd(model, ce, x, y, 2)
    for name, a, b in zip(names, got.grads, want, strict=True):
        if name.startswith("used"):
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-7)


def test_a_layer_applied_twice_adds_the_contributions_of_both_taps():
    """A Linear layer applied twice (shared weights): its gradient is the sum of both
    applications' (equal to per-worker autograd), and its fast squared sums are the sum of
    the two taps' sums, which two separate layers with the same weights give one by one."""
    from torch import nn

    class Twice(nn.Module):
        def __init__(self, first, second):
            super().__init__()
            self.first, self.second = first, second

        def forward(self, x):
            return self.second(torch.tanh(self.first(x)))

    torch.manual_seed(61)
    shared = nn.Linear(4, 4)
    model = Twice(shared, shared)
    g = torch.Generator().manual_seed(62)
    x, y = torch.randn(8, 4, generator=g), torch.randint(0, 4, (8,), generator=g)
    ce = nn.CrossEntropyLoss(reduction="none")
    got = worker_gradients(model, ce, x, y, 2, "fast", sq_dtype="float32")
    want = _per_worker_autograd(model, ce, x, y, 2)
    for a, b in zip(got.grads, want, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-7)
    a_copy, b_copy = nn.Linear(4, 4), nn.Linear(4, 4)
    a_copy.load_state_dict(shared.state_dict())
    b_copy.load_state_dict(shared.state_dict())
    apart = worker_gradients(Twice(a_copy, b_copy), ce, x, y, 2, "fast", sq_dtype="float32")
    # apart: first.weight, first.bias, second.weight, second.bias
    for i in range(2):
        torch.testing.assert_close(
            got.sqsums[i], apart.sqsums[i] + apart.sqsums[i + 2], rtol=1e-6, atol=0
        )
        torch.testing.assert_close(
            got.grads[i], apart.grads[i] + apart.grads[i + 2], rtol=1e-6, atol=1e-9
        )


def test_a_frozen_weight_leaves_its_layers_bias_served_and_the_layers_after_it():
    """A Linear whose weight is frozen (not a trainable parameter) before another layer: its
    bias and the next layer's parameters still get their gradients and sums."""
    from torch import nn

    torch.manual_seed(63)
    model = nn.Sequential(nn.Linear(4, 3), nn.Tanh(), nn.Linear(3, 2))
    model[0].weight.requires_grad_(False)
    g = torch.Generator().manual_seed(64)
    x, y = torch.randn(8, 4, generator=g), torch.randint(0, 2, (8,), generator=g)
    ce = nn.CrossEntropyLoss(reduction="none")
    got = worker_gradients(model, ce, x, y, 2, "fast", sq_dtype="float32")
    assert got.names == ["0.bias", "2.weight", "2.bias"]
    params = [p for p in model.parameters() if p.requires_grad]
    b = 4
    for w in range(2):
        model.zero_grad()
        ce(model(x[w * b : (w + 1) * b]), y[w * b : (w + 1) * b]).mean().backward()
        for i, p in enumerate(params):
            torch.testing.assert_close(got.grads[i][w], p.grad, rtol=1e-5, atol=1e-7)
    assert all(torch.count_nonzero(s) > 0 for s in got.sqsums)


def test_a_parameter_without_gradient_is_logged_at_debug_level(caplog):
    """The discarded layer of a model gets zero gradients, and the pass says so in one DEBUG
    line per parameter: 'parameter NAME received no gradient'."""
    import logging

    from torch import nn

    torch.manual_seed(65)
    g = torch.Generator().manual_seed(66)
    x, y = torch.randn(4, 4, generator=g), torch.randint(0, 3, (4,), generator=g)
    with caplog.at_level(logging.DEBUG, logger="vgcsim.traces.compression.sqsum_estimators"):
        worker_gradients(_Branchy(), nn.CrossEntropyLoss(reduction="none"), x, y, 2, None)
    lines = [r.getMessage() for r in caplog.records if r.name.endswith("sqsum_estimators")]
    assert "parameter unused.weight received no gradient" in lines
    assert "parameter unused.bias received no gradient" in lines


def test_norm_layers_with_their_own_eps_and_a_frozen_weight_equal_per_worker_autograd():
    """GroupNorm and LayerNorm with a non-default eps (0.5: large enough to move every
    normalized value), and a last LayerNorm whose weight is frozen and bias trained: each
    worker's gradients equal one ordinary backward per worker."""
    from torch import nn

    torch.manual_seed(71)
    model = nn.Sequential(
        nn.Conv2d(1, 4, 3, padding=1),
        nn.GroupNorm(2, 4, eps=0.5),
        nn.Flatten(),
        nn.Linear(4 * 4 * 4, 6),
        nn.LayerNorm(6, eps=0.5),
        nn.Linear(6, 3),
        nn.LayerNorm(3),
    )
    model[6].weight.requires_grad_(False)
    g = torch.Generator().manual_seed(72)
    x, y = torch.randn(8, 1, 4, 4, generator=g), torch.randint(0, 3, (8,), generator=g)
    ce = nn.CrossEntropyLoss(reduction="none")
    got = worker_gradients(model, ce, x, y, 2, "fast", sq_dtype="float32")
    assert "6.bias" in got.names and "6.weight" not in got.names
    params = [p for p in model.parameters() if p.requires_grad]
    for w in range(2):
        model.zero_grad()
        ce(model(x[4 * w : 4 * w + 4]), y[4 * w : 4 * w + 4]).mean().backward()
        for name, gw, p in zip(got.names, got.grads, params, strict=True):
            torch.testing.assert_close(gw[w], p.grad, rtol=1e-4, atol=1e-7, msg=name)


def test_worker_gradients_refusals_are_their_whole_messages():
    from torch import nn

    from vgcsim.core.errors import ConfigError

    model = nn.Sequential(nn.Flatten(), nn.Linear(3, 2))
    x, y = torch.randn(7, 3), torch.zeros(7, dtype=torch.int64)
    ce = nn.CrossEntropyLoss(reduction="none")
    with pytest.raises(ConfigError) as err:
        worker_gradients(model, ce, x, y, 2, None)
    assert str(err.value) == "batch of 7 samples does not split into 2 workers"
    with pytest.raises(ConfigError) as err:
        worker_gradients(model, ce, x[:6], y[:6], 2, "approx")
    assert str(err.value).startswith("unknown variance estimator 'approx'")
    bn = nn.Sequential(nn.Linear(3, 3), nn.BatchNorm1d(3))
    with pytest.raises(ConfigError) as err:
        worker_gradients(bn, ce, x[:6], y[:6], 2, "fast")
    assert str(err.value) == "per-sample gradients are ill-defined with BatchNorm; use GroupNorm"


def test_fast_estimator_and_precision_refusals_are_their_whole_messages():
    from torch import nn

    from vgcsim.core.errors import ConfigError
    from vgcsim.traces.compression.sqsum_estimators import resolve_sq_dtype

    model = nn.Sequential(nn.Conv1d(1, 2, 3), nn.Flatten(), nn.Linear(4, 2), nn.Embedding(3, 2))
    x, y = torch.randn(4, 1, 4), torch.zeros(4, dtype=torch.int64)
    with pytest.raises(ConfigError) as err:
        worker_gradients(model, nn.CrossEntropyLoss(reduction="none"), x, y, 2, "fast")
    assert str(err.value) == (
        "the fast variance estimator supports parameters of Linear, Conv2d, GroupNorm, "
        "LayerNorm only; found Conv1d, Embedding (use estimator 'exact')"
    )
    with pytest.raises(ConfigError) as err:
        resolve_sq_dtype("float8")
    assert str(err.value).startswith("unknown squared-sum precision 'float8'")
