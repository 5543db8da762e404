"""Recording speed: one batched gradient pass vs W separate passes, and steps per second.

``python benchmarks/recording.py [--workers 4] [--batch-size 32] [--repeats 10] [--steps 40]``
prints one JSON object measured in one run on the default workload (or ``--set`` overrides):

* ``pass_s``: median seconds of the per-worker gradient computation for every
  (gradient_pass, estimator) pair — estimator ``none`` (gradients only), ``fast``, ``exact``;
* ``separate_over_batched``: the ratio of the two passes per estimator (> 1: batched wins);
* ``record_steps_per_s``: steps per second of ``record`` (whole loop: data, pass,
  compression of every layer of every worker, decode, optimizer, trace writing) per estimator.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import torch

from vgcsim.core.config import apply_overrides
from vgcsim.traces.training.allocator import keep_freed_memory
from vgcsim.traces.training.datasets import load_dataset
from vgcsim.traces.training.nets import build_net
from vgcsim.traces.training.record import (
    GRADIENT_PASSES,
    RecordConfig,
    WorkerSampler,
    _gradients,
    record,
    resolve_config,
)

ESTIMATOR_CHOICES = ("none", "fast", "exact")


def time_passes(cfg: RecordConfig, repeats: int) -> dict[str, dict[str, float]]:
    """Median seconds per gradient pass for each gradient_pass × estimator."""
    data = load_dataset(cfg.data.name, root=cfg.data.root, seed=cfg.seed, download=False)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(cfg.seed)
        model = build_net(cfg.model.name, data.input_shape, data.num_classes, cfg.model.width)
    sampler = WorkerSampler(len(data.y_train), cfg.workers, cfg.batch_size, cfg.seed)
    batches = []
    for _ in range(repeats + 1):
        idx = torch.from_numpy(sampler.next_indices())
        batches.append((data.x_train[idx], data.y_train[idx]))
    out: dict[str, dict[str, float]] = {}
    for gp in GRADIENT_PASSES:
        c = apply_overrides(cfg, [f"gradient_pass={gp}"])
        out[gp] = {}
        for est in ESTIMATOR_CHOICES:
            e = None if est == "none" else est
            _gradients(model, *batches[0], c, e)  # warm-up
            times = []
            for x, y in batches[1:]:
                t0 = time.perf_counter()
                _gradients(model, x, y, c, e)
                times.append(time.perf_counter() - t0)
            out[gp][est] = statistics.median(times)
    return out


def record_speed(cfg: RecordConfig, steps: int) -> dict[str, float]:
    """Steps per second of a short recording for each estimator (variance compressor)."""
    out = {}
    for est in ("fast", "exact"):
        c = apply_overrides(cfg, [f"estimator={est}", f"steps={steps}", "eval_every=0"])
        with tempfile.TemporaryDirectory() as tmp:
            t0 = time.perf_counter()
            record(c, Path(tmp) / "run")
            out[est] = steps / (time.perf_counter() - t0)
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--steps", type=int, default=40, help="steps of each timed recording")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    args = parser.parse_args(argv)
    cfg = resolve_config(apply_overrides(RecordConfig(), args.set))
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    # As record does, so the passes and the recordings run under the same allocator.
    allocator = "keep" if keep_freed_memory() else "default"
    passes = time_passes(cfg, args.repeats)
    result = {
        "workload": {
            "dataset": cfg.data.name,
            "model": cfg.model.name,
            "workers": cfg.workers,
            "batch_size": cfg.batch_size,
            "torch_threads": torch.get_num_threads(),
            "sq_dtype": cfg.sq_dtype,
            "allocator": allocator,
        },
        "pass_s": passes,
        "separate_over_batched": {
            e: passes["separate"][e] / passes["batched"][e] for e in ESTIMATOR_CHOICES
        },
        "record_steps_per_s": record_speed(cfg, args.steps),
    }
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
