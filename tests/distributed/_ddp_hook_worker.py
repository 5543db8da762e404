"""One rank of a user's DDP script with the vgcsim hook (torchrun pattern, gloo on loopback).

Usage: _ddp_hook_worker.py STEPS SEED OUT
Runs, one after the other in the same process group and from the same initial weights and
data: plain DDP, the hook at alpha = 0 with fp32 values, variance alpha = 2 with the fast
and the exact estimator, strom, and the dense compressor; every step accumulates two micro-batches with
``no_sync`` and DDP uses tiny buckets (several per backward). Rank 0 saves
{run: {"params": [step][rank] flat params, "stats": [...], "forwards": n, ...}} to OUT.
"""

from __future__ import annotations

import sys

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

from vgcsim.ddp import get_compressor, register_vgc_hook
from vgcsim.traces.training.distributed_launch import (
    exit_rank,
    init_process_group,
    leave_process_group,
)

MICRO_BATCH, MICRO_STEPS, LR = 8, 2, 0.05
RUNS = {
    "plain": None,
    "alpha0_fp32": ("variance", {"alpha": 0.0, "values": "fp32"}, "fast"),
    "variance_fast": ("variance", {"alpha": 2.0}, "fast"),
    "variance_exact": ("variance", {"alpha": 2.0}, "exact"),
    "strom": ("strom", {"tau": 0.01}, "fast"),
    "dense": ("dense", {}, "fast"),
}


def build_model(seed: int) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(
        nn.Conv2d(1, 4, 3, padding=1),
        nn.GroupNorm(2, 4),
        nn.ReLU(inplace=True),
        nn.Flatten(),
        nn.Linear(4 * 8 * 8, 16),
        nn.Tanh(),
        nn.Linear(16, 10),
    )


def dataset(seed: int) -> TensorDataset:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(512, 1, 8, 8, generator=g)
    y = (x.mean((1, 2, 3)) * 40).long().clamp(-5, 4) + 5
    return TensorDataset(x, y)


def one_run(name: str, steps: int, seed: int, rank: int, world: int) -> dict:
    model = build_model(seed)
    forwards = []
    model.register_forward_hook(lambda *_: forwards.append(1))
    ddp = DDP(model, bucket_cap_mb=0.001)
    state = None
    if RUNS[name] is not None:
        comp_name, params, estimator = RUNS[name]
        state = register_vgc_hook(
            ddp, get_compressor(comp_name, **params), batch_size=MICRO_BATCH, estimator=estimator
        )
    opt = torch.optim.SGD(ddp.parameters(), lr=LR, momentum=0.9)
    sampler = DistributedSampler(dataset(seed), num_replicas=world, rank=rank, seed=seed)
    loader = iter(DataLoader(dataset(seed), batch_size=MICRO_BATCH, sampler=sampler))
    out = {
        "params": [],
        "wire_bytes": [],
        "payload_bytes": [],
        "fallback_rounds": [],
        "sent": [],
        "compress_s": [],
        "forwards": [],
        "layer_backwards": [],
    }
    for _ in range(steps):
        opt.zero_grad(set_to_none=True)
        forwards.clear()
        before = state.sqsum_hooks.backward_calls if state and state.sqsum_hooks else 0
        for micro in range(MICRO_STEPS):
            x, y = next(loader)
            if micro < MICRO_STEPS - 1:
                with ddp.no_sync():
                    F.cross_entropy(ddp(x), y).backward()
            else:
                F.cross_entropy(ddp(x), y).backward()
        opt.step()
        flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
        everyone = [torch.empty_like(flat) for _ in range(world)]
        dist.all_gather(everyone, flat)
        out["params"].append(everyone)
        out["forwards"].append(len(forwards))
        if state is not None:
            out["wire_bytes"].append(state.stats.wire_bytes)
            out["payload_bytes"].append(
                sum(sum(b.values()) for b in state.stats.bits.values()) // 8
            )
            out["fallback_rounds"].append(state.stats.fallback_rounds)
            out["sent"].append(sum(state.stats.sent.values()))
            out["compress_s"].append(state.stats.compress_s)
            after = state.sqsum_hooks.backward_calls if state.sqsum_hooks else 0
            out["layer_backwards"].append(after - before)
    return out


def main(steps: int, seed: int, path: str) -> int:
    env = init_process_group("gloo", timeout_s=300)
    results = {name: one_run(name, steps, seed, env.rank, env.world_size) for name in RUNS}
    if env.rank == 0:
        torch.save(results, path)
    leave_process_group(completed=True)
    return 0


if __name__ == "__main__":
    steps, seed, path = sys.argv[1:4]
    exit_rank(main(int(steps), int(seed), path))
