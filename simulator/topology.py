"""Cluster topologies: frozen specs, their networkx graphs, and deterministic routing.

A cluster's ``topology`` is the typed spec of its kind (:data:`TOPOLOGIES`, in
:mod:`vgcsim.core.topologies`), read and checked once where the cluster spec is built, so that
predict and simulate refuse the same topologies and a graph's file is read once.
:func:`build_topology` turns a :class:`~vgcsim.core.cluster.ClusterSpec` and a world size
``P`` into a :class:`Topology` with the builder registered for the spec's type
(:data:`BUILDERS`): an undirected networkx graph whose every edge is a
**full-duplex** link (two independent *channels*, one per direction, each with the link's
bandwidth and latency), the host node of each rank, and a route for every rank pair.

Bandwidth: every channel carries payload at the link's ``payload_Bps`` = line rate ×
transport ``efficiency`` (``vgcsim.core.presets.FRAMINGS``), the same rate the closed-form models'
β uses; a ``graph`` link takes ``efficiency`` or ``framing`` (default: its preset's, else 1).

Latency: a link spec's ``latency_s`` is the end-to-end start-up time α of a message between
two hosts. Where hosts meet through a switch (star, leaf-spine, hierarchical) each cable gets
α/2, so host → switch → host costs α; each further switch-to-switch cable adds α/2 (a
cross-leaf path costs 2α). Directly cabled hosts (ring, torus2d) pay α per hop; a ``graph``
uses the latencies it gives.

Kinds (rank ``i`` lives on host ``h{i}``):

* ``star`` — every host has one NIC (``link``) into one non-blocking switch.
* ``leaf_spine`` — ``hosts_per_leaf`` hosts per leaf switch (``link``), every leaf wired to
  every one of ``spines`` spine switches. Each leaf–spine link carries
  ``hosts_per_leaf × B / (oversubscription × spines)`` so that a leaf's total uplink is its
  hosts' total bandwidth divided by the ``oversubscription`` ratio. ``placement = "packed"``
  fills leaves in rank order; ``"spread"`` deals ranks round-robin over the leaves (so a ring
  in rank order crosses the spine at every hop).
* ``hierarchical`` — ``gpus_per_node`` ranks per node joined through a node fabric on
  ``intra_link``; one NIC per node (``link``) into a non-blocking switch.
* ``ring`` — hosts cabled in a ring with ``link``, no switch.
* ``torus2d`` — ``rows × cols`` hosts with wrap-around links in both dimensions.
* ``graph`` — any graph: ``hosts`` (rank order) and ``links`` (``[{a, b, bandwidth,
  latency}]`` or ``preset``) inline, or in the TOML file named by ``file``.

Routing: minimum hop count. Among equal-cost next hops we pick deterministically per flow
(a CRC32 of source, destination and hop index chooses among the sorted candidates), the way a
switch hashes a flow's 5-tuple: equal-cost multipath without randomness. A leaf-spine routes
by ``routing``: ``"dmodk"`` (default) takes, among the sorted spines, the one numbered by the
destination host's number modulo the spine count — D-mod-K, the deterministic routing of
InfiniBand fat trees (Zahavi et al., "Optimized InfiniBand fat-tree routing for shift
all-to-all communication patterns", 2010), where a host's number counts leaf by leaf
(``leaf × hosts_per_leaf + slot``); every leaf's flows of a shift pattern (ring, Bruck,
recursive doubling) then split evenly over the spines when ``spines`` divides
``hosts_per_leaf``. ``"hash"`` is the per-flow CRC32 rule above: few flows per leaf can
then crowd one spine while another idles.
"""

from __future__ import annotations

import math
import zlib
from dataclasses import dataclass, field

import networkx as nx
import numpy as np

from vgcsim.core.cluster import ClusterSpec
from vgcsim.core.errors import ConfigError, TopologyError
from vgcsim.core.topologies import (
    TOPOLOGIES,
    GraphSpec,
    HierarchicalSpec,
    LeafSpineSpec,
    RingSpec,
    StarSpec,
    Torus2dSpec,
    parse_topology,
)

__all__ = [
    "BUILDERS",
    "TOPOLOGIES",
    "GraphSpec",
    "HierarchicalSpec",
    "LeafSpineSpec",
    "RingSpec",
    "Route",
    "StarSpec",
    "Topology",
    "Torus2dSpec",
    "build_topology",
    "parse_topology",
]

SWITCH = "sw"


@dataclass(frozen=True)
class Route:
    """A path from one rank to another: the directed channels it crosses, in order."""

    channels: tuple[int, ...]
    latency_s: float  # sum of the channels' latencies
    bandwidth_Bps: float  # the narrowest channel's bandwidth (inf for a rank to itself)


@dataclass
class Topology:
    """A built topology: graph, host of each rank, channel table and a route cache."""

    kind: str
    world_size: int
    graph: nx.Graph
    hosts: list[str]
    channel_ids: dict[tuple[str, str], int]
    channel_names: list[str]
    capacity_Bps: np.ndarray
    latency_s: np.ndarray
    #: D-mod-K number of each host node where the topology routes by it (else None)
    dmodk_number: dict[str, int] | None = None
    _dist: dict[str, dict[str, int]] = field(default_factory=dict, repr=False)
    _routes: dict[tuple[int, int], Route] = field(default_factory=dict, repr=False)

    @property
    def n_channels(self) -> int:
        return len(self.channel_names)

    def route(self, src: int, dst: int) -> Route:
        """The deterministic minimum-hop route from rank ``src`` to rank ``dst`` (cached)."""
        key = (src, dst)
        cached = self._routes.get(key)
        if cached is not None:
            return cached
        if src == dst:
            route = Route((), 0.0, math.inf)
        else:
            route = self._compute_route(src, dst)
        self._routes[key] = route
        return route

    def _hops_from(self, node: str) -> dict[str, int]:
        dist = self._dist.get(node)
        if dist is None:
            dist = self._dist[node] = nx.single_source_shortest_path_length(self.graph, node)
        return dist

    def _compute_route(self, src: int, dst: int) -> Route:
        target = self.hosts[dst]
        # A host on one link is one hop past its switch from everywhere else: one search per
        # switch instead of one per host (O(P) instead of O(P^2) routes on a star)
        attached = list(self.graph.neighbors(target))
        if len(attached) == 1:
            via = self._hops_from(attached[0])

            def hops(n: str, default: int = -1) -> int:
                return 0 if n == target else via[n] + 1 if n in via else default
        else:
            hops = self._hops_from(target).get
        node = self.hosts[src]
        channels: list[int] = []
        hop = 0
        while node != target:
            here = hops(node)
            if here == 1:  # the target is the only node 0 hops away
                nxt = [target]
            else:
                nxt = sorted(n for n in self.graph.neighbors(node) if hops(n, -1) == here - 1)
            if len(nxt) > 1:
                if self.dmodk_number is not None:
                    pick = self.dmodk_number[target] % len(nxt)
                else:
                    pick = zlib.crc32(f"{src}>{dst}#{hop}".encode()) % len(nxt)
                step = nxt[pick]
            else:
                step = nxt[0]
            channels.append(self.channel_ids[(node, step)])
            node = step
            hop += 1
        ch = np.asarray(channels, dtype=np.int64)
        return Route(
            tuple(channels),
            float(self.latency_s[ch].sum()),
            float(self.capacity_Bps[ch].min()),
        )


# --------------------------------------------------------------------------------------------
# graph builders: (spec, cluster, P) -> (graph with edge attrs, hosts in rank order)
# --------------------------------------------------------------------------------------------


def _edge(g: nx.Graph, a: str, b: str, bandwidth_Bps: float, latency_s: float) -> None:
    if not (bandwidth_Bps > 0) or not math.isfinite(bandwidth_Bps):
        raise TopologyError(f"link {a}-{b}: bandwidth must be positive and finite")
    if not (latency_s >= 0):
        raise TopologyError(f"link {a}-{b}: latency must be non-negative")
    g.add_edge(a, b, bandwidth_Bps=float(bandwidth_Bps), latency_s=float(latency_s))


def _hosts(p: int) -> list[str]:
    return [f"h{i}" for i in range(p)]


def _build_star(spec: StarSpec, cluster: ClusterSpec, p: int) -> tuple[nx.Graph, list[str]]:
    g = nx.Graph()
    hosts = _hosts(p)
    for h in hosts:
        _edge(g, h, SWITCH, cluster.link.payload_Bps, cluster.link.latency_s / 2)
    return g, hosts


def _build_leaf_spine(
    spec: LeafSpineSpec, cluster: ClusterSpec, p: int
) -> tuple[nx.Graph, list[str]]:
    g = nx.Graph()
    leaves = -(-p // spec.hosts_per_leaf)
    hosts = _hosts(p)
    link = cluster.link
    number = {}
    for rank, h in enumerate(hosts):
        if spec.placement == "packed":
            leaf, slot = divmod(rank, spec.hosts_per_leaf)
        else:
            slot, leaf = divmod(rank, leaves)
        number[h] = leaf * spec.hosts_per_leaf + slot
        _edge(g, h, f"leaf{leaf}", link.payload_Bps, link.latency_s / 2)
    if spec.routing == "dmodk":
        g.graph["dmodk_number"] = number
    uplink_Bps = spec.hosts_per_leaf * link.payload_Bps / (spec.oversubscription * spec.spines)
    if leaves > 1:
        for leaf in range(leaves):
            for s in range(spec.spines):
                _edge(g, f"leaf{leaf}", f"spine{s}", uplink_Bps, link.latency_s / 2)
    return g, hosts


def _build_hierarchical(
    spec: HierarchicalSpec, cluster: ClusterSpec, p: int
) -> tuple[nx.Graph, list[str]]:
    gpn = cluster.gpus_per_node
    if cluster.intra_link is None:
        raise TopologyError(f"cluster {cluster.name!r}: hierarchical topology needs an intra_link")
    if p % gpn:
        raise TopologyError(
            f"hierarchical topology: world size {p} is not a multiple of gpus_per_node={gpn}"
        )
    g = nx.Graph()
    hosts = _hosts(p)
    intra, link = cluster.intra_link, cluster.link
    for rank, h in enumerate(hosts):
        _edge(g, h, f"node{rank // gpn}", intra.payload_Bps, intra.latency_s / 2)
    for node in range(p // gpn):
        _edge(g, f"node{node}", SWITCH, link.payload_Bps, link.latency_s / 2)
    return g, hosts


def _build_ring(spec: RingSpec, cluster: ClusterSpec, p: int) -> tuple[nx.Graph, list[str]]:
    g = nx.Graph()
    hosts = _hosts(p)
    g.add_nodes_from(hosts)
    if p > 1:
        for i in range(p if p > 2 else 1):
            _edge(g, hosts[i], hosts[(i + 1) % p], cluster.link.payload_Bps, cluster.link.latency_s)
    return g, hosts


def _square_rows(p: int) -> int:
    rows = int(math.isqrt(p))
    while p % rows:
        rows -= 1
    return rows


def _build_torus2d(spec: Torus2dSpec, cluster: ClusterSpec, p: int) -> tuple[nx.Graph, list[str]]:
    rows = spec.rows or _square_rows(p)
    if p % rows:
        raise TopologyError(f"torus2d: world size {p} is not a multiple of rows={rows}")
    cols = p // rows
    g = nx.Graph()
    hosts = _hosts(p)
    g.add_nodes_from(hosts)
    link = cluster.link
    for r in range(rows):
        for c in range(cols):
            here = hosts[r * cols + c]
            for nr, nc in ((r, (c + 1) % cols), ((r + 1) % rows, c)):
                there = hosts[nr * cols + nc]
                if there != here:
                    _edge(g, here, there, link.payload_Bps, link.latency_s)
    return g, hosts


def _build_graph(spec: GraphSpec, cluster: ClusterSpec, p: int) -> tuple[nx.Graph, list[str]]:
    if len(spec.hosts) < p:
        raise TopologyError(
            f"graph topology has {len(spec.hosts)} hosts; world size {p} needs at least {p}"
        )
    g = nx.Graph()
    g.add_nodes_from(spec.hosts)
    for a, b, bw, lat in spec.links:
        if a == b:
            raise TopologyError(f"graph topology: self-loop link on {a!r}")
        _edge(g, a, b, bw, lat)
    return g, list(spec.hosts[:p])


#: The graph builder of each topology spec type (a new kind: its spec in
#: :mod:`vgcsim.core.topologies` and its builder here).
BUILDERS = {
    StarSpec: _build_star,
    LeafSpineSpec: _build_leaf_spine,
    HierarchicalSpec: _build_hierarchical,
    RingSpec: _build_ring,
    Torus2dSpec: _build_torus2d,
    GraphSpec: _build_graph,
}


def build_topology(cluster: ClusterSpec, world_size: int) -> Topology:
    """Build the :class:`Topology` of ``cluster`` for ``world_size`` ranks.

    Raises TopologyError when the graph is disconnected (a rank cannot reach another), a
    link has non-positive bandwidth, or the world size does not fit the topology.
    """
    if (
        isinstance(world_size, bool)
        or not isinstance(world_size, (int, np.integer))
        or world_size < 1
    ):
        raise ConfigError(f"world size must be an integer >= 1, got {world_size!r}")
    p = int(world_size)
    spec = cluster.topology
    graph, hosts = BUILDERS[type(spec)](spec, cluster, p)
    if p > 1:
        reach = nx.node_connected_component(graph, hosts[0]) if hosts[0] in graph else set()
        missing = [h for h in hosts if h not in reach]
        if missing:
            raise TopologyError(
                f"topology {spec.kind!r} is disconnected: ranks on "
                f"{', '.join(missing[:5])}{' ...' if len(missing) > 5 else ''} cannot reach {hosts[0]}"
            )
    channel_ids: dict[tuple[str, str], int] = {}
    names: list[str] = []
    caps: list[float] = []
    lats: list[float] = []
    for a, b, attrs in sorted(graph.edges(data=True), key=lambda e: (str(e[0]), str(e[1]))):
        for u, v in ((a, b), (b, a)):
            channel_ids[(u, v)] = len(names)
            names.append(f"{u}->{v}")
            caps.append(attrs["bandwidth_Bps"])
            lats.append(attrs["latency_s"])
    return Topology(
        kind=spec.kind,
        world_size=p,
        graph=graph,
        hosts=hosts,
        channel_ids=channel_ids,
        channel_names=names,
        capacity_Bps=np.asarray(caps, dtype=float),
        latency_s=np.asarray(lats, dtype=float),
        dmodk_number=graph.graph.get("dmodk_number"),
    )
