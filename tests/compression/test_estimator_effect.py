"""The fast estimator's effect on what the variance compressor sends, bounded on a fixed case."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from vgcsim.traces.compression.compressors import get_compressor
from vgcsim.traces.compression.estimator_effect import send_decision_gap, to_markdown, totals

W, B, STEPS = 4, 8, 8
LOSS = nn.CrossEntropyLoss(reduction="none")


def conv_net() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Conv2d(1, 4, 3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(4, 8, 3, padding=1),
        nn.ReLU(),
        nn.Flatten(),
        nn.Linear(8 * 4 * 4, 3),
    )


def batches(steps: int = STEPS):
    """Three noisy 8×8 prototypes, seeded: a learnable task, so the decisions move."""
    g = torch.Generator().manual_seed(1)
    protos = torch.randn(3, 1, 8, 8, generator=g)
    for _ in range(steps):
        y = torch.randint(0, 3, (W * B,), generator=g)
        yield protos[y] + 0.8 * torch.randn(W * B, 1, 8, 8, generator=g), y


def gap(model: nn.Module) -> list[dict]:
    return send_decision_gap(
        model,
        LOSS,
        batches(),
        W,
        get_compressor("variance"),
        torch.optim.Adam(model.parameters(), lr=1e-2),
        sq_dtype="float32",
    )


@pytest.fixture(scope="module")
def conv_rows() -> list[dict]:
    return gap(conv_net())


def test_layers_with_exact_squared_sums_decide_alike(conv_rows):
    # Linear weights, every bias: the fast squared sums equal the exact ones (up to fp32
    # summation order), so both compressor copies send the same elements.
    for r in conv_rows:
        assert r["decisions"] == STEPS * W * r["numel"]
        if not (r["kind"] == "Conv2d" and r["name"].endswith("weight")):
            assert r["decision_diff"] == 0, r["name"]
            assert r["density_ratio"] == 1, r["name"]


def test_conv_weight_decisions_differ_within_the_bound(conv_rows):
    # Squares summed over spatial positions within a sample: the conv weights' decisions
    # differ. On this fixed case 10.35 % of them differ and the fast copy sends 0.939× as
    # many (measured with to_markdown on these rows, float32 squared sums); the bounds are
    # 15 % of the decisions and ±25 % of the density. A mutant that makes the conv sums
    # exact fails the lower bound, one that drops them (v = 0) fails the upper ones.
    conv = totals(conv_rows, lambda r: r["kind"] == "Conv2d" and r["name"].endswith("weight"))
    assert 0 < conv["decision_diff"] < 0.15
    assert 0.75 < conv["density_ratio"] < 1.25
    whole = totals(conv_rows)
    assert whole["decision_diff"] < conv["decision_diff"]


def test_linear_only_model_has_no_gap():
    torch.manual_seed(2)
    model = nn.Sequential(nn.Flatten(), nn.Linear(64, 16), nn.Tanh(), nn.Linear(16, 3))
    rows = gap(model)
    assert all(r["differ"] == 0 for r in rows)
    assert totals(rows)["density_exact"] > 0
    table = to_markdown(rows)
    assert "| whole model |  | 1,091 | 0.00 % |" in table


def test_compressor_without_squared_sums_is_refused():
    with pytest.raises(ValueError, match="does not use"):
        model = conv_net()
        sgd = torch.optim.SGD(model.parameters(), lr=1.0)
        send_decision_gap(model, LOSS, batches(1), W, get_compressor("strom"), sgd)
