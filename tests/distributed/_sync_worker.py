"""One rank of the equivalence scenario: real compressed exchanges over gloo.

Usage: _sync_worker.py RUNS STEPS SEED OUT
RUNS is a comma-separated list of MODE:COMPRESSOR (MODE: sync | ddp), run one after the other
in the same process group, or "allgatherv:-" (uneven, empty and no segments through the raw
allgatherv); rank 0 saves {run: result} to OUT.
"""

from __future__ import annotations

import sys

import torch
import torch.distributed as dist
from _scenario import (
    BATCH_PER_WORKER,
    LR,
    build_model,
    global_batch,
    loss_fn,
    make_compressor,
    segments_of,
)

from vgcsim.traces.compression.sqsum_estimators import worker_gradients
from vgcsim.traces.training.distributed_allgatherv import allgatherv_segments, wire_bytes
from vgcsim.traces.training.distributed_hook import VGCState, sync_gradients, vgc_hook
from vgcsim.traces.training.distributed_launch import (
    exit_rank,
    init_process_group,
    leave_process_group,
)


def one_run(mode: str, name: str, steps: int, seed: int, rank: int, world: int) -> dict:
    comp = make_compressor(name)
    model = build_model(seed)
    state = VGCState.for_model(model, comp, batch_size=BATCH_PER_WORKER)
    net = model
    if mode == "ddp":
        net = torch.nn.parallel.DistributedDataParallel(model)
        net.register_comm_hook(state, vgc_hook)
    opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=0.9)
    estimator = "exact" if comp.needs_sqsum else None
    sent = []
    for step in range(steps):
        x, y = global_batch(step, world, seed)
        lo, hi = rank * BATCH_PER_WORKER, (rank + 1) * BATCH_PER_WORKER
        xs, ys = x[lo:hi], y[lo:hi]
        opt.zero_grad(set_to_none=True)
        if mode == "sync":
            wg = worker_gradients(model, loss_fn, xs, ys, 1, estimator)
            for p, g in zip(model.parameters(), wg.grads, strict=True):
                p.grad = g[0].clone()
            sq = [s[0] for s in wg.sqsums] if wg.sqsums is not None else None
            stats = sync_gradients(model, state, sqsums=sq)
        else:
            sq = None
            if comp.needs_sqsum:
                wg = worker_gradients(model, loss_fn, xs, ys, 1, estimator)
                sq = [s[0] for s in wg.sqsums]
            state.start_step(sqsums=sq)
            loss_fn(net(xs), ys).mean().backward()
            stats = state.stats
        opt.step()
        everyone = [None] * world
        dist.all_gather_object(everyone, [stats.sent[i] for i in range(len(stats.sent))])
        sent.append(everyone)
    return {"params": [p.detach().clone() for p in model.parameters()], "sent": sent}


def gathers(rank: int) -> dict:
    out = {}
    for name, segments in (("uneven", segments_of(rank)), ("empty", [b"", b""]), ("none", [])):
        res = allgatherv_segments(segments)
        out[name] = {
            "segments": res.segments,
            "rank_bytes": res.rank_bytes,
            "padded": res.padded,
            "wire_bytes": wire_bytes(res),
        }
    return out


def main(runs: str, steps: int, seed: int, out: str) -> int:
    env = init_process_group("gloo", timeout_s=300)
    results = {}
    for run in runs.split(","):
        mode, name = run.split(":")
        if mode == "allgatherv":
            results[run] = gathers(env.rank)
        else:
            results[run] = one_run(mode, name, steps, seed, env.rank, env.world_size)
    if env.rank == 0:
        torch.save(results, out)
    leave_process_group(completed=True)
    return 0


if __name__ == "__main__":
    runs, steps, seed, out = sys.argv[1:5]
    exit_rank(main(runs, int(steps), int(seed), out))
