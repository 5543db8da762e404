"""One collective call on a cluster, simulated at message level, with per-link traffic.

:func:`simulate_collective` builds the cluster's topology for P = ``len(sizes_bytes)`` ranks
(any topology, a ``graph`` included), the schedule of the collective (a key of
``vgcsim.core.collectives.COLLECTIVE_KEYS``), starts every rank at t = 0 and runs the
message-level engine (:func:`vgcsim.simulator.engine.run_message`) with a link monitor. The
result is the time until the last rank has finished, each rank's finish time and a table of
the links that carried bytes. It is the simulated twin of
:func:`vgcsim.models.collectives.collective_time_s`; ``vgcsim.api.collective`` and
``vgcsim collective`` offer both.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
from vgcsim.simulator.collectives import get_schedule, host_time_s, unit_sizes
from vgcsim.simulator.engine import Phase, run_message
from vgcsim.simulator.network import LinkMonitor
from vgcsim.simulator.topology import build_topology

from vgcsim.core.cluster import ClusterSpec, shared_cluster
from vgcsim.core.collectives import wire_bytes
from vgcsim.core.errors import ConfigError

__all__ = ["LINK_COLUMNS", "CollectiveRun", "simulate_collective"]

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

    def __float__(self) -> float:
        return self.time_s


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
    """
    sizes = np.asarray(sizes_bytes, dtype=np.float64)
    if sizes.ndim != 1 or len(sizes) < 1:
        raise ConfigError("sizes_bytes must be a list of per-rank sizes (one per rank)")
    p = len(sizes)
    cluster = shared_cluster(cluster, p)  # CPU-time terms under the hosts' sharing
    topo = build_topology(cluster, p)
    schedule = get_schedule(key, p, cluster.gpus_per_node)
    monitor = LinkMonitor(topo.n_channels)
    units = unit_sizes(schedule, sizes)
    finish = run_message(
        [Phase(np.zeros(p), schedule, units, key)],
        topo,
        mode=mode,
        semantics=semantics,
        gamma_s_per_byte=cluster.link.gamma_s_per_byte,
        monitor=monitor,
        call_overhead_s=cluster.link.call_overhead_s,
        wire=functools.partial(wire_bytes, cluster.link) if cluster.link.segments else None,
    )[0]
    # the padded allgatherv's host copies after the transfers (0 unless the link has them)
    link = cluster.link
    finish = finish + host_time_s(
        schedule,
        units,
        link.allgatherv_host_s_per_byte,
        link.allgatherv_host_s_per_byte_table,
        copied_bytes=float(np.sum(sizes)) if schedule.pad else None,
        padded_share=link.allgatherv_host_padded_share,
    )
    time_s = float(finish.max())
    used = monitor.bytes > 0
    busy = monitor.busy_s[used]
    links = pd.DataFrame(
        {
            "link": np.asarray(topo.channel_names, dtype=object)[used],
            "bytes": monitor.bytes[used],
            "busy_s": busy,
            "utilization": busy / time_s if time_s > 0 else np.zeros(len(busy)),
        },
        columns=list(LINK_COLUMNS),
    )
    return CollectiveRun(key, cluster.name, topo.kind, p, time_s, finish, links)
