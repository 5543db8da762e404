"""Overhead of the variance estimators and the codecs, measured in one run on a small CNN (CPU).

Prints (``--json``: one JSON object) three ratios:

Each ratio is the median over interleaved rounds (order rotated every round) of the ratio
within a round; ratios of per-variant minimum times are printed too.

- ``fast_overhead_ratio``  = (forward+backward+variance+compress+encode, fast estimator)
                             / (plain forward+backward of the same W·B samples): per-worker
                             gradients and squared sums, then every worker's every layer
                             compressed and encoded into its wire buffer (the primary
                             encoding). The fast estimator runs at its default precision
                             (``sq_dtype="auto"``: bf16 squared-sum convolutions on CPUs with
                             native bf16, else fp32).
- ``exact_overhead_ratio`` = the same with the exact (per-sample torch.func) estimator
- ``codec_fraction``       = (encode + decode time) / fast step time, where encode is the
                             primary buffer plus the exact bits of every other encoding for
                             all W workers and layers, and decode is the primary buffer.

Measured in the same rounds, for context: ``fast_sized_overhead_ratio`` — the fast step as
``vgcsim record`` runs it, which also sizes every other encoding (coo64, Elias gaps,
bitmap) for the trace; ``fast_float32_overhead_ratio`` — the fast step with fp32 forced.

Targets: fast <= 1.3, exact <= 3.0, codec <= 0.10.

Like ``vgcsim record``, the benchmark first keeps freed memory in the process
(``vgcsim.traces.training.allocator``; ``--allocator default`` leaves glibc's malloc alone); the
setting applies to every variant, the plain forward+backward included.

``--gap`` instead measures, per layer, how far the fast squared-gradient sums are from the
exact ones on a small CNN trained on scikit-learn's digits (real data, shipped with the
package), at initialisation and after some SGD steps.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

import torch
from torch import nn

from vgcsim.traces.compression.base import make_payload
from vgcsim.traces.compression.compressors import get_compressor
from vgcsim.traces.compression.sqsum_estimators import SQ_DTYPES, resolve_sq_dtype, worker_gradients
from vgcsim.traces.training.allocator import ALLOCATOR_MODES, keep_freed_memory

VARIANTS = ("plain", "fast", "fast_sized", "fast_float32", "exact")
ROW_FIELDS = (
    *VARIANTS,
    "encode",
    "decode",
    "fast_gradients",
    "fast_sized_gradients",
    "fast_float32_gradients",
    "exact_gradients",
)


def wire_only(compressor):
    """The same compressor, sizing only its primary encoding (what crosses the wire).

    A deployment encodes one buffer per payload; sizing the other encodings is what the
    recorder adds for the trace.
    """
    cls = type(compressor)
    primary_only = property(lambda self: (self.primary_encoding,))
    return type(f"{cls.__name__}WireOnly", (cls,), {"encodings": primary_only})(**compressor.params)


class SmallCNN(nn.Module):
    """A plain CIFAR-sized CNN (no BatchNorm): 3 conv + 2 linear, ~0.3 M parameters."""

    def __init__(self, channels: int = 3, classes: int = 10, width: int = 32) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(channels, width, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(width, 2 * width, 3, padding=1),
            nn.GroupNorm(8, 2 * width),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(2 * width, 2 * width, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
        )
        self.head = nn.Sequential(
            nn.Flatten(), nn.Linear(2 * width * 16, 128), nn.ReLU(), nn.Linear(128, classes)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x))


class DigitsCNN(nn.Module):
    """Two 3x3 convolutions on 8x8 digits, then two linear layers (no BatchNorm)."""

    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Conv2d(1, 16, 3, padding=1),
            nn.ReLU(),
            nn.Conv2d(16, 32, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Flatten(),
            nn.Linear(32 * 16, 64),
            nn.ReLU(),
            nn.Linear(64, 10),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


def gap(workers: int, batch: int, steps: int, seed: int, sq_dtype: str = "auto") -> dict:
    """Per-layer fast-vs-exact gap of Σ_z (∇f_z)² on DigitsCNN, before and after training."""
    from sklearn.datasets import load_digits

    from vgcsim.traces.compression.sqsum_estimators import estimator_gap

    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    digits = load_digits()
    images = torch.tensor(digits.images, dtype=torch.float32).unsqueeze(1) / 16.0
    labels = torch.tensor(digits.target, dtype=torch.int64)
    model = DigitsCNN()
    loss_fn = nn.CrossEntropyLoss(reduction="none")
    n = workers * batch
    opt = torch.optim.SGD(model.parameters(), lr=0.1)

    def sample() -> tuple[torch.Tensor, torch.Tensor]:
        idx = torch.randint(0, len(labels), (n,), generator=gen)
        return images[idx], labels[idx]

    result = {
        "model": "DigitsCNN",
        "workers": workers,
        "batch_size_per_worker": batch,
        "sq_dtype": resolve_sq_dtype(sq_dtype),
    }
    x, y = sample()
    result["step_0"] = estimator_gap(model, loss_fn, x, y, workers, sq_dtype=sq_dtype)
    for _ in range(steps):
        xb, yb = sample()
        opt.zero_grad()
        loss_fn(model(xb), yb).mean().backward()
        opt.step()
    x, y = sample()
    result[f"step_{steps}"] = estimator_gap(model, loss_fn, x, y, workers, sq_dtype=sq_dtype)
    with torch.no_grad():
        result["train_loss"] = float(loss_fn(model(x), y).mean())
    return result


def run(
    workers: int, batch: int, rounds: int, compressor_name: str, seed: int, allocator: str
) -> dict:
    """Time plain / fast / fast fp32 / exact steps interleaved round by round.

    Interleaving makes each ratio compare steps run under the same machine load; each
    ratio is the median over rounds of the ratio within a round.
    """
    allocator_applied = keep_freed_memory() if allocator == "keep" else False
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    model = SmallCNN()
    loss_fn = nn.CrossEntropyLoss(reduction="none")
    n = workers * batch
    x = torch.randn(n, 3, 32, 32, generator=gen)
    y = torch.randint(0, 10, (n,), generator=gen)
    params = list(model.parameters())
    compressor = get_compressor(compressor_name)
    wire = wire_only(compressor)
    # Each compressed variant evolves its own compressor state.
    states = {
        v: [[compressor.init_state(p.numel()) for p in params] for _ in range(workers)]
        for v in VARIANTS[1:]
    }
    # variant -> (estimator, sq_dtype, compressor)
    estimators = {
        "fast": ("fast", "auto", wire),
        "fast_sized": ("fast", "auto", compressor),
        "fast_float32": ("fast", "float32", wire),
        "exact": ("exact", "auto", wire),
    }

    def plain() -> None:
        model.zero_grad(set_to_none=True)
        loss_fn(model(x), y).mean().backward()

    split: dict[str, float] = {}

    def step(variant: str) -> list:
        estimator, sq_dtype, comp = estimators[variant]
        t0 = time.perf_counter()
        wg = worker_gradients(model, loss_fn, x, y, workers, estimator, sq_dtype=sq_dtype)
        split[variant] = time.perf_counter() - t0
        payloads = []
        for w in range(workers):
            for i in range(len(params)):
                sq = wg.sqsums[i][w] if wg.sqsums is not None else None
                payloads.append(
                    comp.compress(
                        wg.grads[i][w],
                        states[variant][w][i],
                        sqsum=sq,
                        batch_size=batch,
                        layer=i,
                        generator=gen,
                    )
                )
        return payloads

    def encode(payloads: list) -> None:
        for p in payloads:
            make_payload(
                p.message,
                sent=p.sent,
                encodings=compressor.encodings,
                primary=compressor.primary_encoding,
                decode_context=p.decode_context,
            )

    def decode(payloads: list) -> list:
        return [p.decode() for p in payloads]

    def apply(decoded: list) -> None:
        # The aggregated update, so compressor state evolves as in training (not timed).
        with torch.no_grad():
            for i, p in enumerate(params):
                total = sum(decoded[w * len(params) + i] for w in range(workers))
                p.add_(total.view_as(p), alpha=-0.05 / workers)

    def timed(fn, *args):
        t0 = time.perf_counter()
        out = fn(*args)
        return time.perf_counter() - t0, out

    for _ in range(2):  # warm-up: allocator, torch.func tracing, compressor state
        plain()
        for variant in VARIANTS[2:]:
            step(variant)
        apply(decode(step("fast")))
    rows = []
    payloads: list = []
    order = list(VARIANTS)
    for r in range(rounds):
        # Rotate the order each round so no variant always follows the memory-hungry one.
        k = r % len(order)
        seconds = {}
        for name in order[k:] + order[:k]:
            if name == "plain":
                seconds[name], _ = timed(plain)
            elif name != "fast":
                seconds[name], _ = timed(step, name)
            else:
                seconds[name], payloads = timed(step, "fast")
                encode_s, _ = timed(encode, payloads)
                decode_s, decoded = timed(decode, payloads)
                apply(decoded)
        rows.append(
            {
                **seconds,
                "encode": encode_s,
                "decode": decode_s,
                **{f"{v}_gradients": split[v] for v in VARIANTS[1:]},
            }
        )
    # Ratios are medians of per-round ratios: the steps of one round run back to back under
    # nearly the same machine load, which on a shared host varies far more between rounds
    # than the steps differ. Times are medians too; ratios of per-variant minima are
    # reported alongside as a check.
    low = {k: min(r[k] for r in rows) for k in ROW_FIELDS}
    med = statistics.median
    sent = sum(p.sent for p in payloads)
    numel = sum(p.numel for p in payloads)
    return {
        "fast_overhead_ratio": med(r["fast"] / r["plain"] for r in rows),
        "exact_overhead_ratio": med(r["exact"] / r["plain"] for r in rows),
        "codec_fraction": med((r["encode"] + r["decode"]) / r["fast"] for r in rows),
        "fast_sized_overhead_ratio": med(r["fast_sized"] / r["plain"] for r in rows),
        "fast_float32_overhead_ratio": med(r["fast_float32"] / r["plain"] for r in rows),
        "min_time_ratios": {
            "fast_overhead_ratio": low["fast"] / low["plain"],
            "exact_overhead_ratio": low["exact"] / low["plain"],
            "codec_fraction": (low["encode"] + low["decode"]) / low["fast"],
            "fast_sized_overhead_ratio": low["fast_sized"] / low["plain"],
            "fast_float32_overhead_ratio": low["fast_float32"] / low["plain"],
        },
        "fast_sq_dtype": resolve_sq_dtype("auto"),
        "allocator": "keep" if allocator_applied else "default",
        "forward_backward_s": med(r["plain"] for r in rows),
        "fast_step_s": med(r["fast"] for r in rows),
        "fast_sized_step_s": med(r["fast_sized"] for r in rows),
        "fast_float32_step_s": med(r["fast_float32"] for r in rows),
        "exact_step_s": med(r["exact"] for r in rows),
        "fast_gradients_s": med(r["fast_gradients"] for r in rows),
        "exact_gradients_s": med(r["exact_gradients"] for r in rows),
        "fast_compress_s": med(r["fast"] - r["fast_gradients"] for r in rows),
        "encode_s": med(r["encode"] for r in rows),
        "decode_s": med(r["decode"] for r in rows),
        "fast_gradients_ratio": med(r["fast_gradients"] / r["plain"] for r in rows),
        "density": sent / numel,
        "workers": workers,
        "batch_size_per_worker": batch,
        "parameters": sum(p.numel() for p in params),
        "layers": len(params),
        "rounds": rounds,
        "compressor": compressor_name,
        "encodings": list(compressor.encodings),
        "torch_threads": torch.get_num_threads(),
        "targets": {
            "fast_overhead_ratio": 1.3,
            "exact_overhead_ratio": 3.0,
            "codec_fraction": 0.10,
        },
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--batch", type=int, default=32, help="samples per worker")
    parser.add_argument("--rounds", type=int, default=12, help="timed rounds (median of ratios)")
    parser.add_argument("--compressor", default="variance")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--threads", type=int, default=1, help="torch intra-op threads (1: stable on busy hosts)"
    )
    parser.add_argument(
        "--allocator",
        choices=ALLOCATOR_MODES,
        default="keep",
        help="keep freed memory in the process as vgcsim record does (default), or leave "
        "glibc's malloc alone",
    )
    parser.add_argument("--gap", action="store_true", help="per-layer fast-vs-exact gap instead")
    parser.add_argument("--train-steps", type=int, default=200, help="SGD steps for --gap")
    parser.add_argument(
        "--sq-dtype",
        choices=SQ_DTYPES,
        default="auto",
        help="precision of the fast estimator's conv squared sums, for --gap",
    )
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    if args.gap:
        result = gap(args.workers, args.batch, args.train_steps, args.seed, args.sq_dtype)
    else:
        result = run(
            args.workers, args.batch, args.rounds, args.compressor, args.seed, args.allocator
        )
    if args.json:
        json.dump(result, sys.stdout)
        sys.stdout.write("\n")
    else:
        for key, value in result.items():
            if isinstance(value, list) and value and isinstance(value[0], dict):
                print(key)
                for row in value:
                    print(
                        "  "
                        + "  ".join(
                            f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}"
                            for k, v in row.items()
                        )
                    )
            else:
                print(f"{key:24s} {value}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
