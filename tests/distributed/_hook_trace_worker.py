"""One rank of a user's DDP script that asks the vgcsim hook for a trace (gloo on loopback).

Usage: _hook_trace_worker.py STEPS SEED TRACE_ROOT OUT COMPRESSOR[,COMPRESSOR...]
For each compressor named (``variance`` at α = 2; ``dense`` is plain DDP's allreduce), one
run from the same weights: a small CNN + MLP, several DDP buckets; the script times
forward+backward and the optimizer step with ``state.timed`` and closes each step with
``state.step_done(loss=...)``; ``gather_every = 3`` so that the run gathers several times.
Rank 0 writes TRACE_ROOT/<compressor> and saves every rank's ``state.stats.wire_bytes`` per
step to OUT ({compressor: {"wire_bytes": [step][rank]}}), and, under "refused", each rank's
error from asking for a trace in the first compressor's folder once more (written by then).
"""

from __future__ import annotations

import sys

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

from vgcsim.core.errors import ConfigError
from vgcsim.ddp import get_compressor, register_vgc_hook
from vgcsim.traces.training.distributed_launch import (
    exit_rank,
    init_process_group,
    leave_process_group,
)

BATCH, LR, GATHER_EVERY = 16, 0.05, 3
PARAMS = {"variance": {"alpha": 2.0}}


def build_model(seed: int) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(
        nn.Conv2d(1, 4, 3, padding=1),
        nn.ReLU(),
        nn.Flatten(),
        nn.Linear(4 * 8 * 8, 32),
        nn.Tanh(),
        nn.Linear(32, 10),
    )


def one_run(compressor: str, steps: int, seed: int, trace_dir: str, rank: int, world: int):
    ddp = DDP(build_model(seed), bucket_cap_mb=0.004)
    state = register_vgc_hook(
        ddp,
        get_compressor(compressor, **PARAMS.get(compressor, {})),
        batch_size=BATCH,
        trace_dir=trace_dir,
        gather_every=GATHER_EVERY,
    )
    opt = torch.optim.SGD(ddp.parameters(), lr=LR, momentum=0.9)
    g = torch.Generator().manual_seed(seed + rank)
    wire = []
    for _ in range(steps):
        x = torch.randn(BATCH, 1, 8, 8, generator=g)
        y = torch.randint(0, 10, (BATCH,), generator=g)
        opt.zero_grad(set_to_none=True)
        with state.timed("forward_backward"):
            loss = F.cross_entropy(ddp(x), y)
            loss.backward()
        with state.timed("optimizer"):
            opt.step()
        mine = torch.tensor([state.stats.wire_bytes], dtype=torch.int64)
        everyone = [torch.zeros_like(mine) for _ in range(world)]
        dist.all_gather(everyone, mine)
        wire.append([int(t) for t in everyone])
        state.step_done(loss=loss.item(), lr=LR)
    state.close_trace()
    return {"wire_bytes": wire}


def refusal(seed: int, trace_dir: str, world: int) -> list[str]:
    """Each rank's error from asking for a trace in ``trace_dir`` again (a folder a run has
    filled), or "" where a rank was not refused."""
    try:
        register_vgc_hook(
            DDP(build_model(seed)), get_compressor("dense"), batch_size=BATCH, trace_dir=trace_dir
        )
        mine = ""
    except ConfigError as exc:
        mine = str(exc)
    everyone: list[str] = [""] * world
    dist.all_gather_object(everyone, mine)
    return everyone


def main(steps: int, seed: int, root: str, path: str, compressors: list[str]) -> int:
    env = init_process_group("gloo", timeout_s=300)
    out = {c: one_run(c, steps, seed, f"{root}/{c}", env.rank, env.world_size) for c in compressors}
    out["refused"] = refusal(seed, f"{root}/{compressors[0]}", env.world_size)
    if env.rank == 0:
        torch.save(out, path)
    leave_process_group(completed=True)
    return 0


if __name__ == "__main__":
    steps, seed, root, path, names = sys.argv[1:6]
    exit_rank(main(int(steps), int(seed), root, path, names.split(",")))
