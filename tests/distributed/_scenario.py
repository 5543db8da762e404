"""A small data-parallel scenario shared by the multi-process workers and the tests.

A two-layer MLP on a seeded synthetic classification stream; ``emulate`` is a minimal
single-process emulation of W workers built only from the compression API (each worker
compresses its shard's gradient with its own state; decoded payloads are summed in worker
order and divided by W), the reference the real multi-process runs must reproduce.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from vgcsim.traces.compression.compressors import get_compressor
from vgcsim.traces.compression.sqsum_estimators import worker_gradients

IN, HIDDEN, CLASSES = 12, 16, 3
BATCH_PER_WORKER = 8
LR = 0.1


def build_model(seed: int) -> nn.Module:
    model = nn.Sequential(nn.Linear(IN, HIDDEN), nn.Tanh(), nn.Linear(HIDDEN, CLASSES))
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(0.4 * torch.randn(p.shape, generator=g))
    return model


def global_batch(step: int, workers: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """All workers' samples of one step; worker w owns rows [w*B, (w+1)*B)."""
    g = torch.Generator().manual_seed(seed * 100_003 + step)
    n = workers * BATCH_PER_WORKER
    x = torch.randn(n, IN, generator=g)
    y = (x[:, 0] > 0).long() + (x[:, 1] > 0.5).long()
    return x, y


def loss_fn(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits, y, reduction="none")


def make_compressor(name: str):
    params = {"variance": {"alpha": 1.0}, "strom": {"tau": 0.01}}.get(name, {})
    return get_compressor(name, **params)


def emulate(name: str, workers: int, steps: int, seed: int):
    """Single-process emulation: returns (final parameters, sent[step][worker][layer])."""
    comp = make_compressor(name)
    model = build_model(seed)
    params = [p for p in model.parameters()]
    states = [[comp.init_state(p.numel()) for p in params] for _ in range(workers)]
    opt = torch.optim.SGD(params, lr=LR, momentum=0.9)
    sent = []
    for step in range(steps):
        x, y = global_batch(step, workers, seed)
        wg = worker_gradients(model, loss_fn, x, y, workers, "exact" if comp.needs_sqsum else None)
        step_sent = []
        for w in range(workers):
            row = []
            for i in range(len(params)):
                sq = wg.sqsums[i][w].reshape(-1) if comp.needs_sqsum else None
                payload = comp.compress(
                    wg.grads[i][w].reshape(-1),
                    states[w][i],
                    sqsum=sq,
                    batch_size=BATCH_PER_WORKER,
                    layer=i,
                )
                row.append((payload.sent, payload.decode()))
            step_sent.append(row)
        for i, p in enumerate(params):
            total = torch.zeros(p.numel())
            for w in range(workers):
                total += step_sent[w][i][1]
            p.grad = (total / workers).view_as(p)
        opt.step()
        sent.append([[s for s, _ in row] for row in step_sent])
    return [p.detach().clone() for p in params], sent


def segments_of(rank: int) -> list[bytes]:
    """Rank r's allgatherv segments: r*7 bytes, a segment only rank 0 fills, 3 rank bytes."""
    return [
        bytes((rank * 31 + i) % 256 for i in range(rank * 7)),
        b"\x01\x02" if rank == 0 else b"",
        bytes([rank]) * 3,
    ]
