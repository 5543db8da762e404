"""How much the fast squared-gradient estimator changes what the variance compressor sends.

The fast estimator (``vgcsim.traces.compression.sqsum_estimators``) is exact for Linear
layers, biases and norm layers, and approximates Conv2d weights by summing squares over spatial positions
within a sample. This module measures the effect of that approximation on the send
decisions, not only on the squared sums:

one training run whose every step computes both estimators on the same batch and feeds
the same worker gradients to two copies of the compressor state — one driven by the
exact Σ_z (∇_i f_z)², one by the fast one. The model follows the exact copy (what a trace
recorded with ``estimator="exact"`` would do). Per layer it counts

- ``decision_diff``: the share of (step, worker, element) send decisions that differ
  between the two copies (|sent_exact Δ sent_fast| / (steps · W · numel));
- ``density_exact`` / ``density_fast``: the share of elements each copy sends, and
  ``density_ratio`` = density_fast / density_exact (the density change).

The two copies diverge after their first differing decision (a sent element is reset in
one copy only), so ``decision_diff`` includes that knock-on effect, as a trace would.

``python -m vgcsim.traces.compression.estimator_effect [--model small_cnn] [--width 1] [--steps 300]``
prints the per-layer table in markdown for mnist, W = 4 workers × 32, Adam (lr 1e-3,
constant), the default variance compressor (α = 2), seeded minibatches.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Iterable, Sequence

import numpy as np
import torch
from torch import nn

from vgcsim.traces.compression.base import Compressor
from vgcsim.traces.compression.sqsum_estimators import LossFn, worker_gradients


def send_decision_gap(
    model: nn.Module,
    loss_fn: LossFn,
    batches: Iterable[tuple[torch.Tensor, torch.Tensor]],
    workers: int,
    compressor: Compressor,
    optimizer: torch.optim.Optimizer,
    *,
    sq_dtype: str = "auto",
) -> list[dict]:
    """Per trainable parameter, the send decisions of the fast vs the exact estimator.

    ``batches`` yields ``(x, y)`` of ``workers·B`` samples (worker w owns
    ``[w·B, (w+1)·B)``); ``optimizer`` updates ``model`` with the mean of the decoded
    payloads of the exact-estimator copy. Returns one dict per parameter: ``layer``,
    ``name``, ``kind`` (owning module type), ``numel``, ``decisions`` (steps·W·numel),
    ``differ`` (count of differing decisions), ``decision_diff``, ``density_exact``,
    ``density_fast``, ``density_ratio`` (NaN when the exact copy sent nothing).
    """
    if not compressor.needs_sqsum:
        raise ValueError(f"compressor {compressor.name!r} does not use squared-gradient sums")
    params = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    owner = {id(p): type(m).__name__ for m in model.modules() for p in m.parameters(False)}
    numels = [p.numel() for _, p in params]
    states = {
        est: [[compressor.init_state(n) for n in numels] for _ in range(workers)]
        for est in ("exact", "fast")
    }
    differ = np.zeros(len(params), dtype=np.int64)
    sent = {"exact": np.zeros(len(params), dtype=np.int64), "fast": np.zeros_like(differ)}
    steps = 0
    for x, y in batches:
        b = x.shape[0] // workers
        exact = worker_gradients(model, loss_fn, x, y, workers, "exact")
        fast = worker_gradients(model, loss_fn, x, y, workers, "fast", sq_dtype=sq_dtype)
        assert exact.sqsums is not None and fast.sqsums is not None
        for i, (_, p) in enumerate(params):
            g = exact.grads[i].reshape(workers, -1)
            sq = {"exact": exact.sqsums[i].reshape(workers, -1)}
            sq["fast"] = fast.sqsums[i].reshape(workers, -1)
            agg = torch.zeros(numels[i], dtype=torch.float32)
            for w in range(workers):
                picked = {}
                for est in ("exact", "fast"):
                    payload = compressor.compress(
                        g[w], states[est][w][i], sqsum=sq[est][w], batch_size=b, layer=i
                    )
                    picked[est] = payload.message.indices
                    sent[est][i] += payload.sent
                    if est == "exact":
                        agg += payload.decode()
                differ[i] += np.setxor1d(picked["exact"], picked["fast"]).size
            p.grad = (agg / workers).view_as(p)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        steps += 1
    rows = []
    for i, (name, p) in enumerate(params):
        decisions = steps * workers * numels[i]
        d_exact = sent["exact"][i] / decisions if decisions else float("nan")
        d_fast = sent["fast"][i] / decisions if decisions else float("nan")
        rows.append(
            {
                "layer": i,
                "name": name,
                "kind": owner.get(id(p), "?"),
                "numel": numels[i],
                "decisions": decisions,
                "differ": int(differ[i]),
                "decision_diff": differ[i] / decisions if decisions else float("nan"),
                "density_exact": d_exact,
                "density_fast": d_fast,
                "density_ratio": d_fast / d_exact if d_exact else float("nan"),
            }
        )
    return rows


def totals(rows: Sequence[dict], keep: Callable[[dict], bool] = lambda r: True) -> dict:
    """Decision difference and densities pooled over the rows that ``keep`` selects."""
    picked = [r for r in rows if keep(r)]
    decisions = sum(r["decisions"] for r in picked)
    if not decisions:
        keys = ("decision_diff", "density_exact", "density_fast", "density_ratio")
        return {"numel": 0, **dict.fromkeys(keys, float("nan"))}
    s_exact = sum(r["density_exact"] * r["decisions"] for r in picked)
    s_fast = sum(r["density_fast"] * r["decisions"] for r in picked)
    return {
        "numel": sum(r["numel"] for r in picked),
        "decision_diff": sum(r["differ"] for r in picked) / decisions,
        "density_exact": s_exact / decisions,
        "density_fast": s_fast / decisions,
        "density_ratio": s_fast / s_exact if s_exact else float("nan"),
    }


def to_markdown(rows: Sequence[dict]) -> str:
    """The per-layer table, then the Conv2d weights and the whole model pooled."""
    lines = [
        "| parameter | kind | elements | decisions differing | density exact | density fast | fast / exact |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]

    def line(name: str, kind: str, r: dict) -> str:
        return (
            f"| {name} | {kind} | {r['numel']:,} | {100 * r['decision_diff']:.2f} % | "
            f"{100 * r['density_exact']:.2f} % | {100 * r['density_fast']:.2f} % | "
            f"{r['density_ratio']:.3f} |"
        )

    for r in rows:
        lines.append(line(r["name"], r["kind"], r))
    conv_weights = totals(rows, lambda r: r["kind"] == "Conv2d" and r["name"].endswith("weight"))
    if conv_weights["numel"]:
        lines.append(line("all Conv2d weights", "", conv_weights))
    lines.append(line("whole model", "", totals(rows)))
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", default="small_cnn")
    parser.add_argument("--width", type=float, default=1.0)
    parser.add_argument("--dataset", default="mnist")
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--alpha", type=float, default=2.0)
    parser.add_argument("--sq-dtype", default="auto")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    # The nets and datasets of `vgcsim record`; imported here so that the library part of
    # this module depends on compression code only.
    from vgcsim.traces.compression.compressors import get_compressor
    from vgcsim.traces.training.datasets import load_dataset
    from vgcsim.traces.training.nets import build_net

    torch.set_num_threads(1)
    torch.manual_seed(args.seed)
    data = load_dataset(args.dataset, root=None, seed=args.seed, test_fraction=0.2, download=True)
    model = build_net(args.model, data.input_shape, data.num_classes, args.width)
    rng = np.random.default_rng([args.seed, 0xE5E1])
    n = args.workers * args.batch_size

    def batches():
        for _ in range(args.steps):
            idx = torch.from_numpy(rng.choice(len(data.y_train), n, replace=False))
            yield data.x_train[idx], data.y_train[idx]

    rows = send_decision_gap(
        model,
        nn.CrossEntropyLoss(reduction="none"),
        batches(),
        args.workers,
        get_compressor("variance", alpha=args.alpha),
        torch.optim.Adam(model.parameters(), lr=1e-3),
        sq_dtype=args.sq_dtype,
    )
    params = sum(r["numel"] for r in rows)
    sys.stdout.write(
        f"{args.model} width {args.width:g} ({params:,} parameters), {args.dataset}, "
        f"{args.steps} steps, W={args.workers}×{args.batch_size}, variance α={args.alpha:g}\n\n"
    )
    sys.stdout.write(to_markdown(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
