"""One rank of a DDP run with torch's own ``powerSGD_hook`` (gloo on loopback).

Usage: _powersgd_torch_worker.py RANK_R[,RANK_R...] STEPS SEED OUT
For each approximation rank given, one run from the same weights. Every step each rank computes its local gradient (plain autograd on its own batch, what
DDP's bucket holds before the hook) and then runs the same batch through DDP with the hook,
whose reduced gradient lands in ``.grad``; SGD steps on it. One DDP bucket holds every
gradient. Rank 0 saves {RANK_R: {"local": [step][rank][layer], "reduced": [step][layer],
"shapes": [...]}} to OUT.
"""

from __future__ import annotations

import sys

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as psgd
from torch.nn.parallel import DistributedDataParallel as DDP

from vgcsim.traces.training.distributed_launch import (
    exit_rank,
    init_process_group,
    leave_process_group,
)

START_ITER, BATCH, LR = 2, 16, 0.05


def build_model(seed: int) -> nn.Module:
    """Tensors of every kind: a conv kernel, two same-shaped matrices apart, biases, and a
    matrix that stays plain at rank 4 (10 x 16)."""
    torch.manual_seed(seed)
    return nn.Sequential(
        nn.Conv2d(1, 4, 3, padding=1),
        nn.ReLU(),
        nn.Flatten(),
        nn.Linear(4 * 8 * 8, 16),
        nn.Tanh(),
        nn.Linear(16, 16),
        nn.Tanh(),
        nn.Linear(16, 10),
        nn.Tanh(),
        nn.Linear(10, 16),
        nn.Tanh(),
        nn.Linear(16, 16),
        nn.Tanh(),
        nn.Linear(16, 10),
    )


def batch(seed: int, step: int, rank: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed * 1000 + step * 10 + rank)
    x = torch.randn(BATCH, 1, 8, 8, generator=g)
    y = torch.randint(0, 10, (BATCH,), generator=g)
    return x, y


def one_run(rank_r: int, steps: int, seed: int, env) -> dict:
    model = build_model(seed)
    ddp = DDP(model, bucket_cap_mb=1000)
    state = psgd.PowerSGDState(
        process_group=None,
        matrix_approximation_rank=rank_r,
        start_powerSGD_iter=START_ITER,
        min_compression_rate=2,
        use_error_feedback=True,
        warm_start=True,
        random_seed=0,
    )
    ddp.register_comm_hook(state, psgd.powerSGD_hook)
    opt = torch.optim.SGD(ddp.parameters(), lr=LR)
    params = list(model.parameters())
    out = {"local": [], "reduced": [], "shapes": [tuple(p.shape) for p in params]}
    for step in range(steps):
        x, y = batch(seed, step, env.rank)
        local = torch.autograd.grad(F.cross_entropy(model(x), y), params)
        everyone = []
        for g in local:
            parts = [torch.empty_like(g) for _ in range(env.world_size)]
            dist.all_gather(parts, g.contiguous())
            everyone.append(parts)
        opt.zero_grad(set_to_none=True)
        F.cross_entropy(ddp(x), y).backward()
        out["local"].append(
            [
                [everyone[layer][r].clone() for layer in range(len(params))]
                for r in range(env.world_size)
            ]
        )
        out["reduced"].append([p.grad.detach().clone() for p in params])
        opt.step()
    return out


def main(ranks: list[int], steps: int, seed: int, path: str) -> int:
    env = init_process_group("gloo", timeout_s=300)
    out = {r: one_run(r, steps, seed, env) for r in ranks}
    if env.rank == 0:
        torch.save(out, path)
    leave_process_group(completed=True)
    return 0


if __name__ == "__main__":
    r, steps, seed, path = sys.argv[1:5]
    exit_rank(main([int(x) for x in r.split(",")], int(steps), int(seed), path))
