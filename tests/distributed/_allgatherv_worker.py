"""One rank of the allgatherv scenario: uneven, empty and all-empty payloads arrive intact."""

from __future__ import annotations

import sys

import torch.distributed as dist

from traces.training.distributed_allgatherv import allgatherv_segments, wire_bytes
from traces.training.distributed_launch import init_process_group


def segments_of(rank: int) -> list[bytes]:
    # rank r sends r*7 bytes in segment 0, nothing in segment 1 except on rank 0, and
    # a third segment whose content depends on the rank.
    return [
        bytes((rank * 31 + i) % 256 for i in range(rank * 7)),
        b"\x01\x02" if rank == 0 else b"",
        bytes([rank]) * 3,
    ]


def main() -> int:
    env = init_process_group("gloo", timeout_s=60)
    world = env.world_size
    res = allgatherv_segments(segments_of(env.rank))
    assert res.segments == [segments_of(r) for r in range(world)], res.segments
    assert res.rank_bytes == [sum(map(len, segments_of(r))) for r in range(world)]
    assert res.padded and wire_bytes(res) == [max(res.rank_bytes)] * world
    empty = allgatherv_segments([b"", b""])
    assert empty.segments == [[b"", b""]] * world
    assert wire_bytes(empty) == [1] * world
    none = allgatherv_segments([])
    assert none.segments == [[]] * world
    dist.destroy_process_group()
    print(f"rank {env.rank} ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
