"""Overhead of the variance estimators and the codecs, measured in one run on a small CNN (CPU).

Prints (``--json``: one JSON object) three ratios, each a median over timed steps:

- ``fast_overhead_ratio``  = (forward+backward+variance+compress+encode, fast estimator)
                             / (plain forward+backward of the same W·B samples)
- ``exact_overhead_ratio`` = the same with the exact (per-sample torch.func) estimator
- ``codec_fraction``       = (encode + decode time) / fast step time, where encode is the
                             primary buffer plus the exact bits of every other encoding for
                             all W workers and layers, and decode is the primary buffer.

Targets: fast <= 1.3, exact <= 3.0, codec <= 0.10.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

import torch
from torch import nn

from traces.compression import get_compressor
from traces.compression.base import make_payload
from traces.compression.variance import worker_gradients


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


def _median_time(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def run(workers: int, batch: int, steps: int, compressor_name: str, seed: int) -> dict:
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    model = SmallCNN()
    loss_fn = nn.CrossEntropyLoss(reduction="none")
    n = workers * batch
    x = torch.randn(n, 3, 32, 32, generator=gen)
    y = torch.randint(0, 10, (n,), generator=gen)
    params = [p for p in model.parameters()]
    compressor = get_compressor(compressor_name)
    states = [[compressor.init_state(p.numel()) for p in params] for _ in range(workers)]
    last_payloads: list = []

    def plain() -> None:
        model.zero_grad(set_to_none=True)
        loss_fn(model(x), y).mean().backward()

    def step(estimator: str) -> None:
        wg = worker_gradients(model, loss_fn, x, y, workers, estimator)
        payloads = []
        for w in range(workers):
            for i in range(len(params)):
                sq = wg.sqsums[i][w] if wg.sqsums is not None else None
                payloads.append(
                    compressor.compress(
                        wg.grads[i][w],
                        states[w][i],
                        sqsum=sq,
                        batch_size=batch,
                        layer=i,
                        generator=gen,
                    )
                )
        last_payloads[:] = payloads
        with torch.no_grad():  # apply the aggregated update so the state evolves like training
            for i, p in enumerate(params):
                total = sum(payloads[w * len(params) + i].decode() for w in range(workers))
                p.add_(total.view_as(p), alpha=-0.05 / workers)

    def encode() -> None:
        for p in last_payloads:
            make_payload(
                p.message,
                sent=p.sent,
                encodings=compressor.encodings,
                primary=compressor.primary_encoding,
                decode_context=p.decode_context,
            )

    def decode() -> None:
        for p in last_payloads:
            p.decode()

    for _ in range(2):  # warm-up: allocator, torch.func tracing, compressor state
        plain()
        step("fast")
        step("exact")
    plain_s = _median_time(plain, steps)
    fast_s = _median_time(lambda: step("fast"), steps)
    exact_s = _median_time(lambda: step("exact"), steps)
    step("fast")
    encode_s = _median_time(encode, steps)
    decode_s = _median_time(decode, steps)
    sent = sum(p.sent for p in last_payloads)
    numel = sum(p.numel for p in last_payloads)
    return {
        "fast_overhead_ratio": fast_s / plain_s,
        "exact_overhead_ratio": exact_s / plain_s,
        "codec_fraction": (encode_s + decode_s) / fast_s,
        "forward_backward_s": plain_s,
        "fast_step_s": fast_s,
        "exact_step_s": exact_s,
        "encode_s": encode_s,
        "decode_s": decode_s,
        "density": sent / numel,
        "workers": workers,
        "batch_size_per_worker": batch,
        "parameters": sum(p.numel() for p in params),
        "layers": len(params),
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
    parser.add_argument("--steps", type=int, default=7, help="timed repeats (median)")
    parser.add_argument("--compressor", default="variance")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    result = run(args.workers, args.batch, args.steps, args.compressor, args.seed)
    if args.json:
        json.dump(result, sys.stdout)
        sys.stdout.write("\n")
    else:
        for key, value in result.items():
            print(f"{key:24s} {value}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
