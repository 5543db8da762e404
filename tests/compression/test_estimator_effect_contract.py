"""The estimator-effect report's arithmetic and command, checked against hand-computed rows.

``totals`` pools per-layer rows weighted by their decision counts; ``to_markdown`` prints
them; ``main`` runs :func:`send_decision_gap` on the setup its docstring documents (mnist,
W = 4 workers × 32, Adam lr 1e-3, variance α = 2, seeded minibatches). The expected values
below are worked out by hand from those definitions.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torch import nn
from torchhelpers import default_dtype

from vgcsim.traces.compression import estimator_effect
from vgcsim.traces.compression.estimator_effect import main, to_markdown, totals

# Two layers: 100 and 300 decisions. Pooled by hand:
#   decision_diff = (10 + 3) / 400 = 0.0325
#   density_exact = (0.2·100 + 0.1·300) / 400 = 50 / 400 = 0.125
#   density_fast  = (0.3·100 + 0.05·300) / 400 = 45 / 400 = 0.1125
#   density_ratio = 45 / 50 = 0.9
CONV_W = {
    "layer": 0,
    "name": "c.weight",
    "kind": "Conv2d",
    "numel": 25,
    "decisions": 100,
    "differ": 10,
    "decision_diff": 0.1,
    "density_exact": 0.2,
    "density_fast": 0.3,
    "density_ratio": 1.5,
}
LIN_W = {
    "layer": 1,
    "name": "l.weight",
    "kind": "Linear",
    "numel": 1500,
    "decisions": 300,
    "differ": 3,
    "decision_diff": 0.01,
    "density_exact": 0.1,
    "density_fast": 0.05,
    "density_ratio": 0.5,
}
CONV_B = {
    "layer": 2,
    "name": "c.bias",
    "kind": "Conv2d",
    "numel": 5,
    "decisions": 100,
    "differ": 0,
    "decision_diff": 0.0,
    "density_exact": 0.0,
    "density_fast": 0.0,
    "density_ratio": float("nan"),
}


def test_totals_weights_each_layer_by_its_decisions():
    t = totals([CONV_W, LIN_W])
    assert t["numel"] == 1525
    assert t["decision_diff"] == pytest.approx(0.0325, rel=1e-12)
    assert t["density_exact"] == pytest.approx(0.125, rel=1e-12)
    assert t["density_fast"] == pytest.approx(0.1125, rel=1e-12)
    assert t["density_ratio"] == pytest.approx(0.9, rel=1e-12)


def test_totals_keeps_only_the_selected_rows():
    t = totals([CONV_W, LIN_W], lambda r: r["kind"] == "Linear")
    assert t == pytest.approx(
        {
            "numel": 1500,
            "decision_diff": 0.01,
            "density_exact": 0.1,
            "density_fast": 0.05,
            "density_ratio": 0.5,
        },
        rel=1e-12,
    )


def test_totals_of_no_rows_or_no_exact_sends_are_nan():
    empty = totals([CONV_W], lambda r: False)
    assert set(empty) == {
        "numel",
        "decision_diff",
        "density_exact",
        "density_fast",
        "density_ratio",
    }
    assert empty["numel"] == 0
    assert all(math.isnan(empty[k]) for k in empty if k != "numel")
    silent = totals([CONV_B])
    assert silent["numel"] == 5 and silent["decision_diff"] == 0.0
    assert silent["density_exact"] == 0.0 and silent["density_fast"] == 0.0
    assert math.isnan(silent["density_ratio"])


def test_markdown_table_lines_by_hand():
    table = to_markdown([CONV_W, LIN_W, CONV_B])
    assert table.endswith("|\n") and not table.endswith("\n\n")
    assert table.splitlines() == [
        "| parameter | kind | elements | decisions differing | density exact | density fast | fast / exact |",
        "|---|---|---:|---:|---:|---:|---:|",
        "| c.weight | Conv2d | 25 | 10.00 % | 20.00 % | 30.00 % | 1.500 |",
        "| l.weight | Linear | 1,500 | 1.00 % | 10.00 % | 5.00 % | 0.500 |",
        "| c.bias | Conv2d | 5 | 0.00 % | 0.00 % | 0.00 % | nan |",
        # the conv weights only: c.weight (the bias is not a weight)
        "| all Conv2d weights |  | 25 | 10.00 % | 20.00 % | 30.00 % | 1.500 |",
        # all three: differ 13 / 500, exact 50 / 500, fast 45 / 500, ratio 0.9
        "| whole model |  | 1,530 | 2.60 % | 10.00 % | 9.00 % | 0.900 |",
    ]


def test_markdown_without_conv_weights_has_no_conv_line():
    lines = to_markdown([LIN_W]).splitlines()
    assert len(lines) == 4
    assert not any("all Conv2d weights" in ln for ln in lines)
    assert lines[-1] == "| whole model |  | 1,500 | 1.00 % | 10.00 % | 5.00 % | 0.500 |"


class _Recorder:
    """Stands in for send_decision_gap: records what main passes and returns fixed rows."""

    def __init__(self):
        self.calls = []

    def __call__(self, model, loss_fn, batches, workers, compressor, optimizer, *, sq_dtype):
        self.calls.append(
            {
                "model": model,
                "loss_fn": loss_fn,
                "batches": [(x.clone(), y.clone()) for x, y in batches],
                "workers": workers,
                "compressor": compressor,
                "optimizer": optimizer,
                "sq_dtype": sq_dtype,
            }
        )
        return [CONV_W, LIN_W]


@pytest.fixture
def recorder(monkeypatch):
    rec = _Recorder()
    monkeypatch.setattr(estimator_effect, "send_decision_gap", rec)
    threads = torch.get_num_threads()
    yield rec
    torch.set_num_threads(threads)


def test_command_defaults_are_the_documented_setup(recorder, capsys):
    from vgcsim.traces.training.datasets import load_dataset
    from vgcsim.traces.training.nets import build_net

    assert main(["--dataset", "synthetic", "--steps", "3"]) == 0
    (call,) = recorder.calls
    # W = 4 workers × 32 samples, 3 steps
    assert call["workers"] == 4
    assert len(call["batches"]) == 3
    data = load_dataset("synthetic", seed=0)
    for x, y in call["batches"]:
        assert x.shape == (128, *data.input_shape) and y.shape == (128,)
    # the default variance compressor with alpha = 2
    comp = call["compressor"]
    assert comp.name == "variance" and comp.params["alpha"] == 2.0
    assert comp.params == type(comp)(alpha=2.0).params
    # Adam, lr 1e-3, constant
    opt = call["optimizer"]
    assert isinstance(opt, torch.optim.Adam)
    assert [g["lr"] for g in opt.param_groups] == [1e-3]
    assert call["sq_dtype"] == "auto"
    # per-sample losses (reduction "none")
    logits = torch.zeros(5, data.num_classes)
    assert call["loss_fn"](logits, torch.zeros(5, dtype=torch.int64)).shape == (5,)
    # small_cnn of width 1, the optimizer holds its parameters
    model = call["model"]
    ref = build_net("small_cnn", data.input_shape, data.num_classes, 1.0)
    assert [p.shape for p in model.parameters()] == [p.shape for p in ref.parameters()]
    assert [p for g in opt.param_groups for p in g["params"]] == list(model.parameters())
    assert torch.get_num_threads() == 1
    # the parameter count is the rows' (the fake's 25 + 1,500 elements)
    out = capsys.readouterr().out
    assert out == (
        "small_cnn width 1 (1,525 parameters), synthetic, 3 steps, W=4×32, variance α=2\n\n"
        + to_markdown([CONV_W, LIN_W])
    )


def test_command_options_reach_the_run(recorder, capsys):
    argv = ["--dataset", "synthetic", "--model", "mlp", "--width", "0.5", "--steps", "2"]
    argv += ["--workers", "2", "--batch-size", "3", "--alpha", "0.5", "--sq-dtype", "float32"]
    assert main(argv) == 0
    (call,) = recorder.calls
    assert call["workers"] == 2 and call["sq_dtype"] == "float32"
    assert [x.shape[0] for x, _ in call["batches"]] == [6, 6]
    assert call["compressor"].params["alpha"] == 0.5
    first = capsys.readouterr().out.splitlines()[0]
    assert first == "mlp width 0.5 (1,525 parameters), synthetic, 2 steps, W=2×3, variance α=0.5"
    # width 0.5 halves the mlp's hidden layers (256, 128 -> 128, 64)
    assert [m.out_features for m in call["model"] if isinstance(m, nn.Linear)][:2] == [128, 64]


def _draw(recorder, seed: int):
    recorder.calls.clear()
    main(["--dataset", "synthetic", "--steps", "2", "--seed", str(seed)])
    (call,) = recorder.calls
    return call


def test_command_minibatches_are_seeded_and_drawn_without_replacement(recorder, capsys):
    from vgcsim.traces.training.datasets import load_dataset

    a, b, c = _draw(recorder, 0), _draw(recorder, 0), _draw(recorder, 1)
    for (xa, ya), (xb, yb) in zip(a["batches"], b["batches"], strict=True):
        assert torch.equal(xa, xb) and torch.equal(ya, yb)
    assert not torch.equal(a["batches"][0][0], c["batches"][0][0])
    # the same seed initialises the same model, another seed another one
    pa, pb, pc = (next(call["model"].parameters()) for call in (a, b, c))
    assert torch.equal(pa, pb) and not torch.equal(pa, pc)
    # each minibatch holds 128 distinct training samples, and the two steps differ
    train = load_dataset("synthetic", seed=0).x_train.flatten(1)
    rows = {tuple(r.tolist()): i for i, r in enumerate(train)}
    picked = [[rows[tuple(r.tolist())] for r in x.flatten(1)] for x, _ in a["batches"]]
    assert all(len(set(p)) == 128 for p in picked)
    assert picked[0] != picked[1]
    # drawn from the training split, seeded by --seed
    assert np.asarray(picked).max() < train.shape[0]


def test_command_runs_the_real_comparison_on_a_tiny_setup(capsys):
    threads = torch.get_num_threads()
    try:
        argv = ["--dataset", "synthetic", "--model", "mlp", "--width", "0.125", "--steps", "1"]
        assert main([*argv, "--workers", "2", "--batch-size", "2"]) == 0
    finally:
        torch.set_num_threads(threads)
    lines = capsys.readouterr().out.splitlines()
    # mlp of width 1/8 on 1×8×8 inputs, 4 classes: 64·32+32, 32·16+16, 16·4+4 = 2,080 + 528 + 68 = 2,676
    assert lines[0] == "mlp width 0.125 (2,676 parameters), synthetic, 1 steps, W=2×2, variance α=2"
    assert lines[1] == ""
    body = [ln for ln in lines[2:] if ln.startswith("| ") and "---" not in ln][1:]
    assert [ln.split(" | ")[0][2:] for ln in body] == [
        "1.weight",
        "1.bias",
        "3.weight",
        "3.bias",
        "5.weight",
        "5.bias",
        "whole model",
    ]
    assert body[-1].startswith("| whole model |  | 2,676 | ")


# --------------------------------------------------------------------------- send_decision_gap


def _mean_loss_sgd_steps(model: nn.Module, batches, lr: float) -> list[torch.Tensor]:
    """Reference: plain SGD on the mean loss over all W·B samples (autograd)."""
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    for x, y in batches:
        opt.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
    return [p.detach().clone() for p in model.parameters()]


def _tiny_batches(steps: int, workers: int, b: int, seed: int = 3):
    g = torch.Generator().manual_seed(seed)
    return [
        (torch.randn(workers * b, 5, generator=g), torch.randint(0, 3, (workers * b,), generator=g))
        for _ in range(steps)
    ]


def test_model_follows_the_mean_of_the_exact_copys_decoded_payloads():
    # alpha = 0 with fp32 values sends every nonzero residual as it is; after the reset the
    # next step's residual is the new gradient. So the decoded mean is the mean of the
    # workers' gradients = the gradient of the mean loss over all W·B samples, and SGD with
    # lr 0.5 must follow plain SGD on the whole batch, step for step.
    from vgcsim.traces.compression.compressors import get_compressor

    torch.manual_seed(5)
    model = nn.Sequential(nn.Linear(5, 4), nn.Tanh(), nn.Linear(4, 3))
    ref = nn.Sequential(nn.Linear(5, 4), nn.Tanh(), nn.Linear(4, 3))
    ref.load_state_dict(model.state_dict())
    batches = _tiny_batches(3, 2, 4)
    rows = estimator_effect.send_decision_gap(
        model,
        nn.CrossEntropyLoss(reduction="none"),
        iter(batches),
        2,
        get_compressor("variance", alpha=0.0, values="fp32"),
        torch.optim.SGD(model.parameters(), lr=0.5),
        sq_dtype="float32",
    )
    expected = _mean_loss_sgd_steps(ref, batches, 0.5)
    for p, q in zip(model.parameters(), expected, strict=True):
        torch.testing.assert_close(p.detach(), q, rtol=1e-5, atol=1e-6)
        assert p.grad is None  # zero_grad(set_to_none=True) after the step
    # every element of every worker is sent in every step by both copies
    for r, p in zip(rows, model.parameters(), strict=True):
        assert r["numel"] == p.numel() and r["decisions"] == 3 * 2 * p.numel()
        assert r["differ"] == 0 and r["decision_diff"] == 0
        assert r["density_exact"] == 1 and r["density_fast"] == 1 and r["density_ratio"] == 1
    assert [r["name"] for r in rows] == ["0.weight", "0.bias", "2.weight", "2.bias"]
    assert [r["kind"] for r in rows] == ["Linear"] * 4
    assert [r["layer"] for r in rows] == [0, 1, 2, 3]


class _ThresholdOnSqsum:
    """A stand-in compressor whose send decision is known: element i is sent when its
    squared-gradient sum exceeds ``threshold``; nothing is decoded (the model stays put)."""

    name = "threshold"
    needs_sqsum = True

    def __init__(self, threshold: float):
        self.threshold = threshold
        self.calls = []

    def init_state(self, numel: int) -> dict:
        return {"numel": numel, "calls": 0}

    def compress(self, grad, state, *, sqsum, batch_size, layer):
        from types import SimpleNamespace

        state["calls"] += 1
        self.calls.append((id(state), layer, batch_size, grad.numel(), sqsum.numel()))
        idx = np.flatnonzero(sqsum.numpy() > self.threshold)
        return SimpleNamespace(
            message=SimpleNamespace(indices=idx),
            sent=idx.size,
            decode=lambda: torch.zeros(state["numel"]),
        )


def test_decision_counts_against_the_two_estimators_squared_sums():
    from vgcsim.traces.compression.sqsum_estimators import worker_gradients

    torch.manual_seed(7)
    model = nn.Sequential(
        nn.Conv2d(1, 2, 3, padding=1), nn.ReLU(), nn.Flatten(), nn.Linear(2 * 4 * 4, 3)
    )
    g = torch.Generator().manual_seed(8)
    workers, b, steps = 2, 3, 2
    batches = [
        (
            torch.randn(workers * b, 1, 4, 4, generator=g),
            torch.randint(0, 3, (workers * b,), generator=g),
        )
        for _ in range(steps)
    ]
    loss = nn.CrossEntropyLoss(reduction="none")
    exact = worker_gradients(model, loss, *batches[0], workers, "exact")
    # a threshold inside the conv weight's exact sums, so the two estimators disagree there
    threshold = float(exact.sqsums[0].median())
    comp = _ThresholdOnSqsum(threshold)
    rows = estimator_effect.send_decision_gap(
        model, loss, iter(batches), workers, comp, torch.optim.SGD(model.parameters(), lr=1.0)
    )
    # the model never moves (nothing decoded): recompute both sums per step by hand
    numels = [p.numel() for p in model.parameters()]
    differ = np.zeros(len(numels), dtype=np.int64)
    sent = {"exact": np.zeros(len(numels)), "fast": np.zeros(len(numels))}
    for x, y in batches:
        sq = {
            est: worker_gradients(model, loss, x, y, workers, est, sq_dtype="float32").sqsums
            for est in ("exact", "fast")
        }
        for i in range(len(numels)):
            for w in range(workers):
                pick = {
                    e: set(np.flatnonzero(sq[e][i][w].reshape(-1).numpy() > threshold)) for e in sq
                }
                differ[i] += len(pick["exact"] ^ pick["fast"])
                for e in sq:
                    sent[e][i] += len(pick[e])
    assert differ[0] > 0  # the conv weight's decisions differ on this case
    for i, r in enumerate(rows):
        decisions = steps * workers * numels[i]
        assert r["decisions"] == decisions and r["differ"] == differ[i]
        assert r["decision_diff"] == pytest.approx(differ[i] / decisions, rel=1e-12)
        assert r["density_exact"] == pytest.approx(sent["exact"][i] / decisions, rel=1e-12)
        assert r["density_fast"] == pytest.approx(sent["fast"][i] / decisions, rel=1e-12)
        if sent["exact"][i]:
            ratio = sent["fast"][i] / sent["exact"][i]
            assert r["density_ratio"] == pytest.approx(ratio, rel=1e-12)
        else:
            assert math.isnan(r["density_ratio"])
    assert [r["kind"] for r in rows] == ["Conv2d", "Conv2d", "Linear", "Linear"]
    # one state per (estimator, worker, layer), each called once per step, with the
    # worker's batch size, its layer number and tensors of the layer's size
    states = {c[0] for c in comp.calls}
    assert len(states) == 2 * workers * len(numels)
    assert len(comp.calls) == steps * 2 * workers * len(numels)
    assert {c[2] for c in comp.calls} == {b}
    for _, layer, _, n_grad, n_sq in comp.calls:
        assert n_grad == n_sq == numels[layer]
    assert sorted({c[1] for c in comp.calls}) == list(range(len(numels)))


def test_command_help_is_the_module_docstring_verbatim(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    # line breaks and indentation kept (the docstring's lists and the usage line)
    assert estimator_effect.__doc__.strip() in out
    for flag in ("--model", "--width", "--dataset", "--steps", "--workers", "--batch-size"):
        assert flag in out
    for flag in ("--alpha", "--sq-dtype", "--seed"):
        assert flag in out


def test_command_without_options_is_mnist_for_300_steps(recorder, capsys, monkeypatch):
    # the documented defaults; mnist itself is stood in for by the synthetic set
    from vgcsim.traces.training import datasets

    asked = []
    real_load = datasets.load_dataset

    def fake_load(name, **kw):
        asked.append((name, kw))
        return real_load("synthetic", seed=kw["seed"])

    monkeypatch.setattr(datasets, "load_dataset", fake_load)
    assert main([]) == 0
    assert asked == [("mnist", {"root": None, "seed": 0, "test_fraction": 0.2, "download": True})]
    (call,) = recorder.calls
    assert len(call["batches"]) == 300 and call["workers"] == 4
    assert capsys.readouterr().out.startswith(
        "small_cnn width 1 (1,525 parameters), mnist, 300 steps, W=4×32, variance α=2\n"
    )


def test_command_minibatch_stream_is_the_recorded_one(recorder, capsys):
    # Reproducibility of the published tables: step s draws W·B distinct training indices
    # from numpy's Generator keyed [seed, 0xE5E1] (the stream the command has always used).
    from vgcsim.traces.training.datasets import load_dataset

    call = _draw(recorder, 3)
    data = load_dataset("synthetic", seed=3)
    rng = np.random.default_rng([3, 0xE5E1])
    for x, y in call["batches"]:
        idx = torch.from_numpy(rng.choice(len(data.y_train), 128, replace=False))
        assert torch.equal(x, data.x_train[idx]) and torch.equal(y, data.y_train[idx])


def _conv_model() -> nn.Module:
    torch.manual_seed(11)
    return nn.Sequential(nn.Conv2d(1, 2, 3, padding=1), nn.Flatten(), nn.Linear(2 * 4 * 4, 3))


def _conv_batches(steps: int, workers: int, b: int):
    g = torch.Generator().manual_seed(12)
    return [
        (
            torch.randn(workers * b, 1, 4, 4, generator=g),
            torch.randint(0, 3, (workers * b,), generator=g),
        )
        for _ in range(steps)
    ]


def test_model_follows_the_exact_copy_where_the_two_copies_send_differently():
    """A conv model (where the fast estimator's sums differ from the exact ones) and the
    variance compressor at α = 1: the copies' decisions differ, and the model follows the
    exact copy's decoded payloads. Reference, from the docstring's definition: the exact
    estimator's worker gradients and sums, the compressor on per-worker states, SGD on the
    mean of the decoded payloads."""
    from vgcsim.traces.compression.compressors import get_compressor
    from vgcsim.traces.compression.sqsum_estimators import worker_gradients

    workers, b, lr = 2, 4, 0.5
    loss = nn.CrossEntropyLoss(reduction="none")
    batches = _conv_batches(3, workers, b)
    model, ref = _conv_model(), _conv_model()
    comp = get_compressor("variance", alpha=1.0)
    rows = estimator_effect.send_decision_gap(
        model,
        loss,
        iter(batches),
        workers,
        comp,
        torch.optim.SGD(model.parameters(), lr=lr),
        sq_dtype="float32",
    )
    assert sum(r["differ"] for r in rows) > 0  # the two copies do decide differently
    params = list(ref.parameters())
    states = [[comp.init_state(p.numel()) for p in params] for _ in range(workers)]
    for x, y in batches:
        wg = worker_gradients(ref, loss, x, y, workers, "exact")
        with torch.no_grad():
            for i, p in enumerate(params):
                g = wg.grads[i].reshape(workers, -1)
                sq = wg.sqsums[i].reshape(workers, -1)
                mean = (
                    sum(
                        comp.compress(
                            g[w], states[w][i], sqsum=sq[w], batch_size=b, layer=i
                        ).decode()
                        for w in range(workers)
                    )
                    / workers
                )
                p -= lr * mean.view_as(p)
    for p, q in zip(model.parameters(), ref.parameters(), strict=True):
        torch.testing.assert_close(p.detach(), q.detach(), rtol=1e-6, atol=1e-7)


def _gap_without_warnings(model, batches, name, **params) -> list[dict]:
    """send_decision_gap on 2 workers (SGD lr 0.1, fp32 sums) with every warning an error."""
    import warnings

    from vgcsim.traces.compression.compressors import get_compressor

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        return estimator_effect.send_decision_gap(
            model,
            nn.CrossEntropyLoss(reduction="none"),
            iter(batches),
            2,
            get_compressor(name, **params),
            torch.optim.SGD(model.parameters(), lr=0.1),
            sq_dtype="float32",
        )


def test_no_batches_give_rows_with_zero_decisions_and_nan_figures():
    """An empty iterable of batches: every trainable parameter still has its row, with 0
    decisions and NaN for each rate, set as NaN (no division by zero, no warning)."""
    rows = _gap_without_warnings(_conv_model(), [], "variance")
    assert [r["kind"] for r in rows] == ["Conv2d", "Conv2d", "Linear", "Linear"]
    for r in rows:
        assert r["decisions"] == 0 and r["differ"] == 0
        for key in ("decision_diff", "density_exact", "density_fast", "density_ratio"):
            assert math.isnan(r[key]), key


def test_the_fast_copy_runs_at_the_requested_precision(monkeypatch):
    """``sq_dtype`` reaches the fast estimator's worker gradients (the exact estimator has
    no precision setting): a spy on worker_gradients sees each call's estimator and dtype."""
    from vgcsim.traces.compression.compressors import get_compressor

    real = estimator_effect.worker_gradients
    seen = []

    def spy(*args, **kwargs):
        seen.append((args[5], kwargs.get("sq_dtype")))
        return real(*args, **kwargs)

    monkeypatch.setattr(estimator_effect, "worker_gradients", spy)
    model = _conv_model()
    estimator_effect.send_decision_gap(
        model,
        nn.CrossEntropyLoss(reduction="none"),
        iter(_conv_batches(1, 2, 2)),
        2,
        get_compressor("variance"),
        torch.optim.SGD(model.parameters(), lr=0.1),
        sq_dtype="bfloat16",
    )
    assert seen == [("exact", None), ("fast", "bfloat16")]


def test_rows_do_not_depend_on_the_default_dtype():
    """The same rows and the same trained model with torch's default dtype set to float64
    (the model itself fp32): the aggregate the model follows is fp32 by the function's own
    choice."""
    from vgcsim.traces.compression.compressors import get_compressor

    out = {}
    for dtype in (torch.float32, torch.float64):
        model, batches = _conv_model(), _conv_batches(2, 2, 2)
        with default_dtype(dtype):
            rows = estimator_effect.send_decision_gap(
                model,
                nn.CrossEntropyLoss(reduction="none"),
                iter(batches),
                2,
                get_compressor("variance", alpha=1.0),
                torch.optim.SGD(model.parameters(), lr=0.5),
                sq_dtype="float32",
            )
        out[dtype] = (rows, [p.detach().clone() for p in model.parameters()])
    assert out[torch.float32][0] == out[torch.float64][0]
    for a, b in zip(out[torch.float32][1], out[torch.float64][1], strict=True):
        assert torch.equal(a, b)


def test_a_layer_the_exact_copy_never_sends_has_a_nan_density_ratio():
    """α = 10^30: neither copy sends anything, so both densities are 0 and the ratio is set to
    NaN (no 0/0, no warning), while the decision counts are those of the steps run."""
    model = _conv_model()
    rows = _gap_without_warnings(model, _conv_batches(1, 2, 2), "variance", alpha=1e30)
    for r, p in zip(rows, model.parameters(), strict=True):
        assert r["decisions"] == 2 * p.numel() and r["differ"] == 0
        assert r["density_exact"] == 0 and r["density_fast"] == 0
        assert r["decision_diff"] == 0 and math.isnan(r["density_ratio"])
