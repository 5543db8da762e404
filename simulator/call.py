"""One collective call on a cluster, simulated, with per-link traffic.

:func:`simulate_collective` builds the cluster's topology for P = ``len(sizes_bytes)`` ranks
(any topology, a ``graph`` included), the schedule of the collective (a key of
``vgcsim.core.collectives.COLLECTIVE_KEYS``), starts every rank at t = 0 and runs it on the
fastest exact path: the collective-level recurrence
(:func:`vgcsim.simulator.paths.collective.run_collective_steps` /
:func:`~vgcsim.simulator.paths.collective.run_collective`) where no two flows ever share a channel
(:func:`~vgcsim.simulator.paths.collective.contention_free`), else the message-level engine
(:func:`vgcsim.simulator.paths.message.run_message`) with a link monitor, after one warning saying
why. Both are optimizations of the reference engine (:mod:`vgcsim.simulator.paths.reference`),
held to it by ``tests/simulator/test_engine_reference.py``; the collective-level path's
link table is held to the message level's monitor by ``tests/simulator/test_call_paths.py``.
The result is the time until the last rank has finished, each rank's finish time, the path
and a table of the links that carried bytes (on the collective-level path a link's busy
seconds are the sum of its flows' transfer times, its flows never overlapping). It is the
simulated twin of :func:`vgcsim.models.collectives.collective_time_s`;
``vgcsim.api.collective`` and ``vgcsim collective`` offer both.

Memory grows with the schedule's flows (:func:`~vgcsim.simulator.collectives.flow_count`):
P(P − 1) for a ring, P·⌈log2 P⌉ for Bruck. :func:`memory_estimate_bytes` prices a run from
that count, and a run whose estimate exceeds the memory available is refused before it
starts (:func:`vgcsim.core.memory.check_fits`).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from vgcsim.core.cluster import ClusterSpec, gather_cluster, shared_cluster
from vgcsim.core.collectives import prices_by_size, wire_bytes
from vgcsim.core.errors import ConfigError, unknown_name
from vgcsim.core.memory import check_fits
from vgcsim.core.worldsizes import MAX_WORLD_SIZE
from vgcsim.simulator.collectives import (
    Schedule,
    doubled_units,
    flow_count,
    get_schedule,
    host_time_s,
    span_bytes,
    unit_sizes,
)
from vgcsim.simulator.network import MODES, SEMANTICS, LinkMonitor
from vgcsim.simulator.paths.collective import contention_free, run_collective, run_collective_steps
from vgcsim.simulator.paths.message import run_message
from vgcsim.simulator.paths.plan import Phase, RunCache
from vgcsim.simulator.topology import Topology, build_topology

__all__ = ["LINK_COLUMNS", "CollectiveRun", "memory_estimate_bytes", "simulate_collective"]

log = logging.getLogger(__name__)

#: Bytes a run holds per flow of its schedule, by path, and what any run holds besides
#: (the interpreter with numpy, pandas, networkx and SimPy imported). Peak RSS of
#: ``vgcsim collective 10GbE allgatherv/ring --engine simulate`` measured at two world sizes
#: (docs/simulator.md, "One collective call"), rounded up.
BYTES_PER_FLOW = {"collective": 64, "message": 1800}
BASE_BYTES = 200 * 2**20

#: Columns of :attr:`CollectiveRun.links`, one row per directed link that carried bytes.
LINK_COLUMNS = ("link", "bytes", "busy_s", "utilization")


@dataclass(frozen=True)
class CollectiveRun:
    """A simulated collective call: its time, each rank's finish time and per-link traffic.

    ``links`` has :data:`LINK_COLUMNS`: the directed link (``"h0->sw"``), the bytes it
    carried, the seconds it carried at least one flow and ``busy_s / time_s``.
    """

    key: str
    cluster: str
    topology: str
    world_size: int
    time_s: float
    finish_s: np.ndarray  # [P] seconds
    links: pd.DataFrame
    path: str = "message"  # "collective" (contention-free recurrence) or "message"

    def __float__(self) -> float:
        return self.time_s


def memory_estimate_bytes(key: str, world_size: int, path: str, gpus_per_node: int = 1) -> int:
    """Peak memory of simulating ``key`` for ``world_size`` ranks on ``path`` (``"collective"``
    or ``"message"``): ``BASE_BYTES + BYTES_PER_FLOW[path] × flows``, an upper estimate."""
    flows = flow_count(key, world_size, gpus_per_node)
    return BASE_BYTES + BYTES_PER_FLOW[path] * flows


def _refuse_if_too_big(key: str, p: int, path: str, gpn: int) -> None:
    check_fits(
        memory_estimate_bytes(key, p, path, gpn),
        f"simulating {key} for P = {p} "
        f"({'every message' if path == 'message' else 'collective level'}, "
        f"{flow_count(key, p, gpn):,} flows)",
        "use --engine model or a smaller world size",
    )


def simulate_collective(
    key: str,
    sizes_bytes: Sequence[float] | np.ndarray,
    cluster: ClusterSpec,
    *,
    mode: str = "fair",
    semantics: str = "rendezvous",
) -> CollectiveRun:
    """Simulate collective ``key`` of per-rank sizes ``sizes_bytes`` (P values) on ``cluster``.

    allreduce needs equal sizes on every rank; allgatherv takes any sizes. ``mode`` and
    ``semantics`` are the network's sharing model and message matching
    (:data:`vgcsim.simulator.network.MODES`, :data:`~vgcsim.simulator.network.SEMANTICS`).
    P above ``MAX_WORLD_SIZE`` and runs whose memory estimate exceeds the memory available
    are refused (ConfigError) before anything is built.
    """
    sizes = np.asarray(sizes_bytes, dtype=np.float64)
    if sizes.ndim != 1 or len(sizes) < 1:
        raise ConfigError("sizes_bytes must be a list of per-rank sizes (one per rank)")
    p = len(sizes)
    if p > MAX_WORLD_SIZE:
        raise ConfigError(
            f"world size {p} exceeds the largest supported world size, {MAX_WORLD_SIZE}"
        )
    if mode not in MODES:
        raise unknown_name("network mode", str(mode), MODES)
    if semantics not in SEMANTICS:
        raise unknown_name("message semantics", str(semantics), SEMANTICS)
    gpn = cluster.gpus_per_node
    _refuse_if_too_big(key, p, "collective", gpn)
    cluster = shared_cluster(cluster, p)  # CPU-time terms under the hosts' sharing
    if key.startswith("allgatherv/"):  # a gather's start-up (allgather_latency_s where set)
        cluster = gather_cluster(cluster)
    topo = build_topology(cluster, p)
    schedule = get_schedule(key, p, gpn)
    units = unit_sizes(schedule, sizes)
    gamma = cluster.link.gamma_s_per_byte
    cache = RunCache(topo)
    call = cluster.link.call_overhead_s
    wire = functools.partial(wire_bytes, cluster.link) if prices_by_size(cluster.link) else None
    finish, why = _collective_level(schedule, units, topo, semantics, gamma, cache, call, wire)
    if finish is not None:
        path = "collective"
        link_bytes, link_busy = _link_use(schedule, units, topo, cache)
    else:
        path = "message"
        log.warning(
            "%s on this %s topology: %s, so the collective-level path is not exact; "
            "simulating every message (slower)",
            key,
            topo.kind,
            why,
        )
        _refuse_if_too_big(key, p, "message", gpn)
        monitor = LinkMonitor(topo.n_channels)
        finish = run_message(
            [Phase(np.zeros(p), schedule, units, key)],
            topo,
            mode=mode,
            semantics=semantics,
            gamma_s_per_byte=gamma,
            monitor=monitor,
            cache=cache,
            call_overhead_s=call,
            wire=wire,
        )[0]
        link_bytes, link_busy = monitor.bytes, monitor.busy_s
    # the padded allgatherv's host copies after the transfers (0 unless the link has them)
    link = cluster.link
    finish = finish + host_time_s(
        schedule,
        units,
        link.allgatherv_host_s_per_byte,
        link.allgatherv_host_s_per_byte_table,
        copied_bytes=float(np.sum(sizes)) if schedule.pad else None,
        padded_share=link.allgatherv_host_padded_share,
        fixed_s=link.allgatherv_host_s,
    )
    time_s = float(finish.max())
    used = link_bytes > 0
    busy = link_busy[used]
    links = pd.DataFrame(
        {
            "link": np.asarray(topo.channel_names, dtype=object)[used],
            "bytes": link_bytes[used],
            "busy_s": busy,
            "utilization": busy / time_s if time_s > 0 else np.zeros(len(busy)),
        },
        columns=list(LINK_COLUMNS),
    )
    return CollectiveRun(key, cluster.name, topo.kind, p, time_s, finish, links, path)


def _collective_level(
    schedule: Schedule,
    units: np.ndarray,
    topo: Topology,
    semantics: str,
    gamma: float,
    cache: RunCache,
    call_overhead_s: float = 0.0,
    wire: Callable[[np.ndarray], np.ndarray] | None = None,
) -> tuple[np.ndarray | None, str]:
    """Each rank's finish time on the collective-level path where it is exact, else None
    and the reason.

    Rounds that are all permutations (ring, Bruck, recursive doubling) go through
    :func:`run_collective_steps`, which makes each round's tables on the fly (no [rounds, P]
    matrices); others through :func:`run_collective`, with its overlap check where eager
    messages into one rank could overlap."""
    verdict = contention_free([schedule], topo, cache=cache)
    if verdict is None:
        return None, "flows share links"
    p = topo.world_size
    checked = semantics == "eager" and verdict == "dst"
    if not checked and cache.tables(schedule).all_permutations:
        fin = run_collective_steps(
            [schedule],
            [np.zeros((1, p))],
            [units[None, :]],
            topo,
            semantics=semantics,
            gamma_s_per_byte=gamma,
            cache=cache,
            call_overhead_s=call_overhead_s,
            wire=wire,
        )
        return fin[0, 0], ""  # not None: every round is a permutation
    fin = run_collective(
        [Phase(np.zeros(p), schedule, units, schedule.key)],
        topo,
        semantics=semantics,
        gamma_s_per_byte=gamma,
        check_overlap=checked,
        cache=cache,
        call_overhead_s=call_overhead_s,
        wire=wire,
    )
    if fin is None:
        return None, "eager messages into one rank overlap"
    return fin[0], ""


def _link_use(
    schedule: Schedule, units: np.ndarray, topo: Topology, cache: RunCache
) -> tuple[np.ndarray, np.ndarray]:
    """Bytes and busy seconds per channel on the collective-level path: every flow crosses
    its route's channels at the route's bandwidth, alone, so a channel's busy time is the
    sum of its flows' ``bytes / bandwidth``."""
    p = topo.world_size
    pairs = cache.tables(schedule).pairs  # sorted by src * P + dst
    codes = pairs[:, 0] * p + pairs[:, 1]
    routes = [topo.route(a, b) for a, b in pairs.tolist()]
    bw = np.array([r.bandwidth_Bps for r in routes])
    pair_bytes = np.zeros(len(pairs))
    pair_busy = np.zeros(len(pairs))
    v = units if schedule.unit_order is None else units[schedule.unit_order]
    doubled, sums = doubled_units(v)
    for rnd in schedule.rounds:
        fb = span_bytes(doubled, sums, rnd.lo, rnd.count)
        j = np.searchsorted(codes, rnd.src * p + rnd.dst)
        np.add.at(pair_bytes, j, fb)
        np.add.at(pair_busy, j, fb / bw[j])
    lengths = np.array([len(r.channels) for r in routes], dtype=np.int64)
    chans = np.fromiter((c for r in routes for c in r.channels), dtype=np.int64)
    link_bytes = np.zeros(topo.n_channels)
    link_busy = np.zeros(topo.n_channels)
    np.add.at(link_bytes, chans, np.repeat(pair_bytes, lengths))
    np.add.at(link_busy, chans, np.repeat(pair_busy, lengths))
    return link_bytes, link_busy
