"""A toy topology, as docs/extending.md's "Adding a topology" describes: its spec (the
parameters a cluster file's ``[topology]`` table gives, checked) and its graph builder.
Registered by the test that uses it (tests/simulator/test_adding_a_topology.py), never by
the product."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import networkx as nx

from vgcsim.core.cluster import ClusterSpec
from vgcsim.core.specs import check_range
from vgcsim.core.topologies import TopologySpec


@dataclass(frozen=True)
class DumbbellSpec(TopologySpec):
    """Two switches joined by one core cable of ``core_ratio`` × a host link's rate; ranks
    0 … ⌈P/2⌉ − 1 on the left switch, the others on the right one."""

    kind: ClassVar[str] = "dumbbell"
    core_ratio: float = 1.0

    def check(self) -> None:
        check_range("topology", "core_ratio", self.core_ratio, bounds=(1e-6, 1e6))


def build_dumbbell(spec: DumbbellSpec, cluster: ClusterSpec, p: int) -> tuple[nx.Graph, list[str]]:
    """The graph (every edge a full-duplex link with its payload rate and latency) and the
    host of each rank: host cables carry the link's payload rate and α/2, so host → switch
    → host costs α; the core cable adds α/2."""
    link = cluster.link
    g = nx.Graph()
    hosts = [f"h{i}" for i in range(p)]
    for rank, host in enumerate(hosts):
        switch = "left" if rank < (p + 1) // 2 else "right"
        g.add_edge(host, switch, bandwidth_Bps=link.payload_Bps, latency_s=link.latency_s / 2)
    g.add_edge(
        "left",
        "right",
        bandwidth_Bps=spec.core_ratio * link.payload_Bps,
        latency_s=link.latency_s / 2,
    )
    return g, hosts
