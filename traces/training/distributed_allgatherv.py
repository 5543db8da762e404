"""A real allgatherv of variable-length byte payloads over torch.distributed.

Compressed gradients differ in size from rank to rank, and an allgather of equal-sized
tensors cannot carry them directly. :func:`allgatherv_segments` does what an MPI
``Allgatherv`` does, in two collectives:

1. every rank contributes the byte length of each of its segments (one int64 per segment);
   an all_gather of those small vectors tells every rank every length;
2. the payload bytes themselves travel in one all_gather of ``uint8`` tensors. On NCCL
   that all_gather takes uneven sizes directly (a list of outputs). Gloo rejects uneven
   tensors and empty ones, so there every rank pads its buffer to the largest rank's length
   (at least one byte), and the padded blocks are gathered into one flat tensor
   (``all_gather_single``, formerly ``all_gather_into_tensor``) whose slot for this rank is
   the send buffer: the segments are written into it once and only the padding is zeroed.
   (torch's gloo binding still gathers into a flat buffer of its own and copies that into
   the output, for the flat and the list all_gather alike: a copy this module cannot avoid.)

Each rank then slices the gathered buffer back into per-rank, per-segment ``bytes`` (one
copy of each gathered byte).
The padding is real traffic on gloo: :func:`wire_bytes` says how many bytes each rank put on
the wire so measured times can be compared with the ``allgatherv/padded`` cost model. The
host work that remains (writing the own block, copying P blocks out) is what the cluster
file's ``allgatherv_host_s_per_byte`` prices (fitted by ``vgcsim calibrate``).
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


def _gather_flat(
    output: torch.Tensor,
    block: torch.Tensor,
    group: dist.ProcessGroup | None,
    async_op: bool = False,
):
    """All_gather of equal blocks into one flat ``output`` (``block`` may be a view of this
    rank's slot in it): ``all_gather_single`` where torch has it, else its older name."""
    gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
    return gather(output, block, group=group, async_op=async_op)


def _write_segments(dest: np.ndarray, segments: Sequence[bytes]) -> None:
    """Copy ``segments`` one after another into ``dest``; zero the rest (the padding)."""
    offset = 0
    for segment in segments:
        dest[offset : offset + len(segment)] = np.frombuffer(segment, dtype=np.uint8)
        offset += len(segment)
    dest[offset:] = 0


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
    gathered_lengths = torch.empty(world * n, dtype=torch.int64, device=device)
    _gather_flat(gathered_lengths, lengths, group)
    flat_lengths = gathered_lengths.cpu().tolist()
    per_rank = [flat_lengths[r * n : (r + 1) * n] for r in range(world)]
    totals = [sum(lens) for lens in per_rank]

    uneven = _backend(group) in UNEVEN_ALLGATHER_BACKENDS
    rank = dist.get_rank(group)
    if uneven:
        # Zero-length tensors are avoided on every backend: one pad byte keeps the op valid.
        sizes = [max(t, 1) for t in totals]
        mine = torch.empty(sizes[rank], dtype=torch.uint8)
        _write_segments(mine.numpy(), segments)
        mine = mine.to(device)
        outputs = [torch.empty(s, dtype=torch.uint8, device=device) for s in sizes]
        work = dist.all_gather(outputs, mine, group=group, async_op=True)
    else:
        block = max(max(totals), 1)
        sizes = [block] * world
        flat = torch.empty(world * block, dtype=torch.uint8)
        # This rank's block is its slot of the output: written once, no separate send buffer.
        _write_segments(flat[rank * block : (rank + 1) * block].numpy(), segments)
        flat = flat.to(device)
        outputs = [flat[r * block : (r + 1) * block] for r in range(world)]
        work = _gather_flat(flat, outputs[rank], group, async_op=True)
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
