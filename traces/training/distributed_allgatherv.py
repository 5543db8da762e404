"""A real allgatherv of variable-length byte payloads over torch.distributed.

Compressed gradients differ in size from rank to rank, and an allgather of equal-sized
tensors cannot carry them directly. :func:`allgatherv_segments` does what an MPI
``Allgatherv`` does, in two collectives:

1. every rank contributes the byte length of each of its segments (one int64 per segment);
   an ``all_gather`` of those small vectors tells every rank every length;
2. the payload bytes themselves travel in one ``all_gather`` of ``uint8`` tensors. On NCCL
   that all_gather takes uneven sizes directly. Gloo rejects uneven tensors and empty ones,
   so there every rank pads its buffer to the largest rank's length (at least one byte).

Each rank then slices the gathered buffers back into per-rank, per-segment ``bytes``.
The padding is real traffic on gloo: :func:`wire_bytes` says how many bytes each rank put on
the wire so measured times can be compared with the ``allgatherv/padded`` cost model.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
import torch.distributed as dist

#: Backends whose all_gather accepts tensors of different sizes on different ranks.
UNEVEN_ALLGATHER_BACKENDS = frozenset({"nccl"})


@dataclass(frozen=True)
class GatherResult:
    """What one allgatherv delivered: ``segments[rank][i]`` is rank ``rank``'s segment ``i``."""

    segments: list[list[bytes]]
    rank_bytes: list[int]  # payload bytes each rank contributed (sum of its segments)
    padded: bool  # True when every rank sent max(rank_bytes) bytes (gloo)


def _backend(group: dist.ProcessGroup | None) -> str:
    return str(dist.get_backend(group)).lower()


def allgatherv_segments(
    segments: Sequence[bytes],
    *,
    group: dist.ProcessGroup | None = None,
    device: torch.device | str = "cpu",
) -> GatherResult:
    """Gather every rank's list of byte segments on every rank (a collective: all ranks call it).

    All ranks must pass the same number of segments (one per layer, say); a segment may be
    empty. Returns the segments of every rank in rank order.
    """
    return start_allgatherv_segments(segments, group=group, device=device)[0].wait()


def start_allgatherv_segments(
    segments: Sequence[bytes],
    *,
    group: dist.ProcessGroup | None = None,
    device: torch.device | str = "cpu",
) -> tuple[torch.futures.Future, int]:
    """:func:`allgatherv_segments` with the payload all_gather left running.

    The length exchange runs now (it is small and sizes the payload buffers); the payload
    all_gather is asynchronous. Returns a future of the :class:`GatherResult` and the bytes
    this rank put on the wire (its lengths, plus its payload with any padding).
    """
    world = dist.get_world_size(group)
    n = len(segments)
    if n == 0:
        done: torch.futures.Future = torch.futures.Future()
        done.set_result(GatherResult([[] for _ in range(world)], [0] * world, False))
        return done, 0
    lengths = torch.tensor([len(s) for s in segments], dtype=torch.int64, device=device)
    gathered_lengths = [torch.empty_like(lengths) for _ in range(world)]
    dist.all_gather(gathered_lengths, lengths, group=group)
    per_rank = [[int(v) for v in t.cpu().tolist()] for t in gathered_lengths]
    totals = [sum(lens) for lens in per_rank]

    uneven = _backend(group) in UNEVEN_ALLGATHER_BACKENDS
    if uneven:
        # Zero-length tensors are avoided on every backend: one pad byte keeps the op valid.
        sizes = [max(t, 1) for t in totals]
    else:
        sizes = [max(max(totals), 1)] * world
    rank = dist.get_rank(group)
    # Each segment is copied once, straight into the send buffer (joining them into one
    # bytes object first, then into a bytearray for torch, cost two more copies per call).
    mine = torch.zeros(sizes[rank], dtype=torch.uint8)
    view = mine.numpy()
    offset = 0
    for segment in segments:
        view[offset : offset + len(segment)] = np.frombuffer(segment, dtype=np.uint8)
        offset += len(segment)
    mine = mine.to(device)
    outputs = [torch.empty(s, dtype=torch.uint8, device=device) for s in sizes]
    work = dist.all_gather(outputs, mine, group=group, async_op=True)
    sent = lengths.numel() * lengths.element_size() + sizes[rank]

    def split(_: torch.futures.Future) -> GatherResult:
        result: list[list[bytes]] = []
        for r in range(world):
            raw = outputs[r].cpu().numpy()  # a view on CPU: each segment is copied once
            parts, offset = [], 0
            for length in per_rank[r]:
                parts.append(raw[offset : offset + length].tobytes())
                offset += length
            result.append(parts)
        return GatherResult(result, totals, not uneven)

    return work.get_future().then(split), sent


def wire_bytes(result: GatherResult) -> list[int]:
    """Bytes each rank put on the wire in the payload all_gather (padding included)."""
    if result.padded:
        return [max(max(result.rank_bytes), 1)] * len(result.rank_bytes)
    return [max(b, 1) for b in result.rank_bytes]
