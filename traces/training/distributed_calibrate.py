"""Link calibration, the measuring part: time real messages and collectives over a size sweep.

Every rank runs the same sweep (:func:`measure`, a collective); rank 0 writes the measurement
file (:mod:`vgcsim.traces.calibration`). ``vgcsim calibrate`` starts the ranks (one process of
``python -m vgcsim.traces.training.distributed_calibrate CONFIG_JSON OUTPUT`` per rank, under
the torchrun environment) or is itself one rank under ``torchrun``; it then fits the link
(:mod:`vgcsim.models.linkfit`). Timed on every rank after a barrier (a repetition's time is the
slowest rank's):

* ``p2p``, a ping-pong between rank 0 and the first rank on another node (rank 1 when all
  ranks share one node), half the round trip
* ``p2p_intra``, the same between rank 0 and another rank of its own node; measured only
  when the job spans several nodes and rank 0's node holds more than one rank
* ring allreduce of ``n`` bytes (``torch.distributed.all_reduce`` of ``n/4`` float32)
* ring allgather of ``m`` bytes per rank
* vgcsim's allgatherv of ``m`` bytes per rank (:mod:`vgcsim.traces.training.distributed_allgatherv`:
  an all_gather of one int64 length, then the payload all_gather); ``allgatherv_skewed``: the
  same with rank r sending ``⌈m·(r+1)/P⌉`` bytes (:func:`~vgcsim.traces.calibration.skewed_sizes`)

A rank's node is its ``GROUP_RANK`` (torchrun sets it), else its host name.

The sweep: sizes log-spaced ×4 from 4 B to 64 MiB by default (a link's bandwidth shows only
once messages are well past its latency, its token bucket or its socket buffers); every size
gets ``warmup`` untimed repetitions, then ``repeats`` timed ones, fewer (never under 3) where
they would take longer than ``budget_s``. The timed repetitions are spread over ``passes``
passes through the whole sweep (every op and size in each; one untimed repetition opens each
visit after the first), so a slow spell of a shared host or link costs a few repetitions of
many sizes, not all of a few (see :class:`~vgcsim.traces.calibration.CalibrateConfig`). A
repetition is the mean of up to 16 back-to-back operations (:func:`back_to_back`: small
messages only) started after an untimed one-byte exchange that lines the ranks up past the
barrier (see :func:`_time_op`); with ``busy_before_s`` every rank then works that many seconds
of CPU and a repetition times one operation, as a training step meets its exchange.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from vgcsim.core.config import config_from_dict
from vgcsim.core.errors import ConfigError, VgcsimError
from vgcsim.traces.calibration import (
    MIN_REPEATS,
    CalibrateConfig,
    skewed_sizes,
    split_repeats,
    write_measurements,
)

log = logging.getLogger(__name__)


def p2p_pairs(nodes: Sequence[int]) -> dict[str, tuple[int, int]]:
    """The ping-pong pairs for ranks on ``nodes`` (node index per rank).

    ``p2p``: rank 0 and the first rank on another node, or rank 1 when there is one node;
    ``p2p_intra``: rank 0 and the first other rank on its node, when there are several nodes.
    """
    other = next((r for r in range(1, len(nodes)) if nodes[r] != nodes[0]), None)
    same = next((r for r in range(1, len(nodes)) if nodes[r] == nodes[0]), None)
    if other is None:
        return {"p2p": (0, 1)} if len(nodes) > 1 else {}
    pairs = {"p2p": (0, other)}
    if same is not None:
        pairs["p2p_intra"] = (0, same)
    return pairs


def node_layout(node: str) -> list[int]:
    """Every rank's node index (nodes numbered by their first rank); a collective."""
    import torch.distributed as dist

    keys: list = [None] * dist.get_world_size()
    dist.all_gather_object(keys, node)
    first: dict[str, int] = {}
    return [first.setdefault(k, len(first)) for k in keys]


#: Back-to-back operations per timed repetition: up to this many ...
MAX_BACK_TO_BACK = 16
#: ... while each moves at most this many bytes (a single operation past it).
BACK_TO_BACK_BYTES = 256 * 1024


def back_to_back(size_bytes: int) -> int:
    """Operations one timed repetition averages: ``clamp(256 KiB / n, 1, 16)``, so small
    messages are timed over several back-to-back operations and large ones over one."""
    return max(1, min(MAX_BACK_TO_BACK, BACK_TO_BACK_BYTES // max(int(size_bytes), 1)))


def _ops_per_repetition(size_bytes: int, busy_before_s: float) -> int:
    """Operations one timed repetition averages: one after ``busy_before_s`` of work, else
    :func:`back_to_back`'s count."""
    return 1 if busy_before_s > 0 else back_to_back(size_bytes)


def busy(seconds: float) -> None:
    """Keep this thread on the CPU for ``seconds`` of its own CPU time (a step's compute:
    where the host's cores are shared, it takes longer than ``seconds`` of wall time)."""
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


def _time_op(
    op: str,
    size_bytes: int,
    rank: int,
    world: int,
    device: str,
    pair: tuple[int, int],
    busy_before_s: float = 0.0,
) -> float:
    """One timed repetition on this rank: the mean of :func:`back_to_back` operations, or,
    with ``busy_before_s``, one operation after that much CPU work on every rank.

    A barrier releases the ranks up to a scheduler tick apart, and one small operation timed
    from there measures that skew. So the timed operations start after an untimed one-byte exchange:
    for p2p a one-byte round trip (the peer is then waiting in its receive when the clock
    starts), for the collectives a one-element all_reduce. The work comes after it, so the
    ranks start their work lined up, as after a training step's previous exchange, and the
    clock starts when this rank's work ends.
    """
    import torch
    import torch.distributed as dist

    count = _ops_per_repetition(size_bytes, busy_before_s)
    token = torch.zeros(1, dtype=torch.uint8, device=device)
    if op in ("p2p", "p2p_intra"):
        a, b = pair
        buf = torch.zeros(size_bytes, dtype=torch.uint8, device=device)

        def trip(x: torch.Tensor) -> None:
            if rank == a:
                dist.send(x, b)
                dist.recv(x, b)
            elif rank == b:
                dist.recv(x, a)
                dist.send(x, a)

        dist.barrier()
        trip(token)
        busy(busy_before_s)
        t0 = time.perf_counter()
        for _ in range(count):
            trip(buf)
        return (time.perf_counter() - t0) / (2 * count) if rank in pair else 0.0
    if op == "allreduce":
        buf = torch.ones(max(1, size_bytes // 4), dtype=torch.float32, device=device)

        def once() -> None:
            dist.all_reduce(buf)

    elif op in ("allgatherv", "allgatherv_skewed"):
        from vgcsim.traces.training.distributed_allgatherv import allgatherv_segments

        mine = skewed_sizes(size_bytes, world)[rank] if op == "allgatherv_skewed" else size_bytes
        payload = bytes(mine)

        def once() -> None:
            allgatherv_segments([payload], device=device)

    else:
        buf = torch.zeros(size_bytes, dtype=torch.uint8, device=device)
        out = [torch.empty_like(buf) for _ in range(world)]

        def once() -> None:
            dist.all_gather(out, buf)

    dist.barrier()
    dist.all_reduce(token)
    busy(busy_before_s)
    t0 = time.perf_counter()
    for _ in range(count):
        once()
    return (time.perf_counter() - t0) / count


def _slowest(values: list[float], device: str) -> list[float]:
    import torch
    import torch.distributed as dist

    t = torch.tensor(values, dtype=torch.float64, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return t.cpu().tolist()


def _repeats(
    cfg: CalibrateConfig,
    op: str,
    size: int,
    rank: int,
    world: int,
    device: str,
    pair: tuple[int, int],
) -> int:
    """Run ``op``'s warm-up at ``size`` and say how many timed repetitions it gets: ``repeats``,
    fewer (never under ``MIN_REPEATS``) where the slowest rank's last warm-up says they would
    take longer than ``budget_s``. A collective: every rank gets the same count."""
    last = 0.0
    for _ in range(cfg.warmup):
        last = _time_op(op, size, rank, world, device, pair, cfg.busy_before_s)
    if not cfg.warmup:
        return cfg.repeats
    # one repetition: its operations and the work before it
    slow = _slowest([last], device)[0] * _ops_per_repetition(size, cfg.busy_before_s)
    slow += cfg.busy_before_s
    fit = int(cfg.budget_s // slow) if slow > 0 else cfg.repeats
    return max(min(MIN_REPEATS, cfg.repeats), min(cfg.repeats, fit))


def measure(
    cfg: CalibrateConfig,
    rank: int,
    world: int,
    device: str = "cpu",
    nodes: Sequence[int] | None = None,
) -> list[dict]:
    """Run the sweep on this rank (a collective: every rank calls it with the same config).

    ``nodes`` gives every rank's node index (default: all on one node). Returns rows
    ``{"op", "size_bytes", "seconds": [per repetition, slowest rank]}`` (p2p rows also
    ``"pair"``), in op then size order, each row's repetitions in the order they were timed
    (pass by pass); an op that needs what the job lacks (``p2p_intra`` on one rank per node)
    is skipped.
    """
    if world < 2:
        raise ConfigError("calibration needs at least 2 processes (--nprocs >= 2)")
    pairs = p2p_pairs(list(nodes) if nodes is not None else [0] * world)
    plan = []  # (op, pair, size) in the order each pass visits them
    for op in cfg.ops:
        if op.startswith("p2p") and op not in pairs:
            log.info("%s skipped: no such pair in this job's node layout", op)
            continue
        plan += [(op, pairs.get(op, (0, 1)), size) for size in cfg.sizes_bytes]
    times: list[list[float]] = [[] for _ in plan]
    shares: list[list[int]] = []  # each visit's timed repetitions, one per pass
    for k in range(cfg.passes):
        for i, (op, pair, size) in enumerate(plan):
            if k == 0:
                shares.append(
                    split_repeats(_repeats(cfg, op, size, rank, world, device, pair), cfg.passes)
                )
            if not shares[i][k]:
                continue
            # Other sizes ran since this one's last pass: its buffers, the allocator and the
            # sockets are not where its repetitions left them, so one goes untimed again.
            if k and cfg.warmup:
                _time_op(op, size, rank, world, device, pair, cfg.busy_before_s)
            times[i] += [
                _time_op(op, size, rank, world, device, pair, cfg.busy_before_s)
                for _ in range(shares[i][k])
            ]
    rows = []
    for (op, pair, size), mine in zip(plan, times, strict=True):
        row = {"op": op, "size_bytes": size, "seconds": _slowest(mine, device)}
        if op.startswith("p2p"):
            row["pair"] = list(pair)
        row["back_to_back"] = _ops_per_repetition(size, cfg.busy_before_s)
        rows.append(row)
        log.debug("%s %d B: median %.3g s", op, size, float(np.median(row["seconds"])))
    return rows


# ----------------------------------------------------------------------------- one rank


def run_rank(cfg: CalibrateConfig, output: Path, iface: str | None = None) -> int:
    """Join the process group the environment describes, run the sweep, leave; rank 0 writes
    ``output``. Returns this rank's number."""
    import os

    from vgcsim.traces.training.distributed_launch import (
        device_for,
        init_process_group,
        leave_process_group,
        socket_iface_env,
    )

    os.environ.update(socket_iface_env(iface))
    env = init_process_group(cfg.backend)
    completed = False
    try:
        nodes = node_layout(env.node)
        rows = measure(cfg, env.rank, env.world_size, device_for(cfg.backend), nodes)
        if env.rank == 0:
            write_measurements(output, cfg, env.world_size, rows, nodes)
        completed = True
    finally:
        leave_process_group(completed=completed)
    return env.rank


USAGE = "usage: python -m vgcsim.traces.training.distributed_calibrate CONFIG_JSON OUTPUT"


def main(argv: Sequence[str] | None = None) -> int:
    """One rank of a sweep that ``vgcsim calibrate`` started: ``CONFIG_JSON`` is the
    :class:`CalibrateConfig` as a JSON object (the ``config`` of a measurement file), rank 0
    writes ``OUTPUT``. The options users give live in ``vgcsim calibrate``."""
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        if len(args) != 2:
            raise ConfigError(f"expected CONFIG_JSON and OUTPUT; {USAGE}")
        try:
            data = json.loads(args[0])
        except json.JSONDecodeError as exc:
            raise ConfigError(f"CONFIG_JSON is not JSON ({exc}); {USAGE}") from None
        run_rank(config_from_dict(CalibrateConfig, data), Path(args[1]))
    except VgcsimError as exc:
        print(f"calibrate: error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    from vgcsim.traces.training.distributed_launch import exit_rank

    exit_rank(main())
