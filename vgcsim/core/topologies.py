"""Topology specs: one frozen, typed spec per kind, looked up by the ``kind`` a cluster file names.

A cluster's ``[topology]`` table is read once, when the cluster is built
(:func:`parse_topology`), into the spec of its kind in :data:`TOPOLOGIES`; predict, simulate
and sweep then use that spec (a ``graph`` topology's ``file`` is read at that moment, not on
every build of the simulator's graph). Each kind checks its own values in ``check`` (and a
``graph`` reads its table in ``from_table``); a new kind is a spec class here plus its graph
builder in the simulator.

A spec reads as its table: ``spec["kind"]``, ``dict(spec)`` (the kind and the parameters that
differ from their defaults; a graph's hosts and links in SI numbers, or its ``file``) is what
result headers and the sweep's ``topology_spec`` column record, and what
:func:`parse_topology` reads back into an equal spec.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from dataclasses import MISSING, dataclass, fields
from pathlib import Path
from typing import Any, ClassVar

from vgcsim.core.config import load_toml
from vgcsim.core.errors import ConfigError, TopologyError, unknown_name
from vgcsim.core.presets import get_link
from vgcsim.core.specs import check_range, get_framing
from vgcsim.core.units import parse_bandwidth_Bps, parse_time_s

__all__ = [
    "TOPOLOGIES",
    "GraphSpec",
    "HierarchicalSpec",
    "LeafSpineSpec",
    "RingSpec",
    "StarSpec",
    "TopologySpec",
    "Torus2dSpec",
    "parse_topology",
]


class TopologySpec(Mapping):
    """Base of the topology specs: a kind name and a read-only view of the spec as its table."""

    kind: ClassVar[str] = ""

    def table(self) -> dict[str, Any]:
        """``{"kind": ..., parameter: value}`` for the parameters that differ from their defaults."""
        out: dict[str, Any] = {"kind": self.kind}
        for f in fields(self):  # type: ignore[arg-type]
            value = getattr(self, f.name)
            if f.default is MISSING or value != f.default or type(value) is not type(f.default):
                out[f.name] = value
        return out

    def __getitem__(self, key: str) -> Any:
        return self.kind if key == "kind" else self.table()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.table())

    def __len__(self) -> int:
        return len(self.table())

    @classmethod
    def from_table(cls, d: Mapping[str, Any]) -> TopologySpec:
        """The spec of a ``[topology]`` table of this kind (its keys already checked)."""
        spec = cls(**{k: v for k, v in d.items() if k != "kind"})
        spec.check()
        return spec

    def check(self) -> None:
        """ConfigError unless the parameters are valid (each kind its own rules)."""


def _int(where: str, value: Any, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigError(f"topology.{where}: expected an integer >= {minimum}, got {value!r}")
    return value


@dataclass(frozen=True)
class StarSpec(TopologySpec):
    """A non-blocking switch with one NIC per rank."""

    kind: ClassVar[str] = "star"


_PLACEMENTS = ("packed", "spread")
_ROUTINGS = ("dmodk", "hash")


@dataclass(frozen=True)
class LeafSpineSpec(TopologySpec):
    """Two-tier Clos: leaves of ``hosts_per_leaf`` hosts, ``spines`` spines, an oversubscription
    ratio; ``routing`` picks the spine of a cross-leaf flow (``dmodk``: the destination host's
    number modulo the spines; ``hash``: a per-flow hash)."""

    kind: ClassVar[str] = "leaf_spine"
    hosts_per_leaf: int = 16
    spines: int = 1
    oversubscription: float = 1.0
    placement: str = "packed"
    routing: str = "dmodk"

    def check(self) -> None:
        _int("hosts_per_leaf", self.hosts_per_leaf, 1)
        _int("spines", self.spines, 1)
        check_range("topology", "oversubscription", self.oversubscription)
        if not isinstance(self.placement, str) or self.placement not in _PLACEMENTS:
            raise unknown_name("leaf_spine placement", str(self.placement), _PLACEMENTS)
        if not isinstance(self.routing, str) or self.routing not in _ROUTINGS:
            raise unknown_name("leaf_spine routing", str(self.routing), _ROUTINGS)


@dataclass(frozen=True)
class HierarchicalSpec(TopologySpec):
    """``gpus_per_node`` ranks per node on the intra-node link, one NIC per node to a switch."""

    kind: ClassVar[str] = "hierarchical"


@dataclass(frozen=True)
class RingSpec(TopologySpec):
    """Hosts cabled in a ring (rank i to rank i+1 mod P)."""

    kind: ClassVar[str] = "ring"


@dataclass(frozen=True)
class Torus2dSpec(TopologySpec):
    """A ``rows × cols`` 2-D torus; ``rows = 0`` picks the most square factorisation of P."""

    kind: ClassVar[str] = "torus2d"
    rows: int = 0

    def check(self) -> None:
        _int("rows", self.rows, 0)


_GRAPH_LINK_KEYS = (
    "a",
    "b",
    "preset",
    "bandwidth",
    "bandwidth_Bps",
    "latency",
    "latency_s",
    "efficiency",
    "framing",
)


def _graph_links(where: str, links: Any) -> tuple[tuple[str, str, float, float], ...]:
    """A graph's ``links`` table as ``(a, b, payload_Bps, latency_s)``: a link's ``preset``
    gives what it does not, ``efficiency`` or ``framing`` derates its line rate."""
    if not isinstance(links, (list, tuple)) or not links:
        raise TopologyError(f"{where}: 'links' must be a non-empty list of tables")
    out = []
    for i, link in enumerate(links):
        if not isinstance(link, Mapping):
            raise TopologyError(f"{where}: links[{i}] must be a table, got {link!r}")
        for key in link:
            if key not in _GRAPH_LINK_KEYS:
                raise ConfigError(
                    f"unknown key {key!r} in {where}.links[{i}]; valid keys: "
                    f"{', '.join(_GRAPH_LINK_KEYS)}"
                )
        if "a" not in link or "b" not in link:
            raise TopologyError(f"{where}: links[{i}] needs endpoints 'a' and 'b'")
        base = get_link(link["preset"]) if "preset" in link else None
        bw = link.get("bandwidth", link.get("bandwidth_Bps"))
        lat = link.get("latency", link.get("latency_s"))
        if base is None and (bw is None or lat is None):
            raise TopologyError(f"{where}: links[{i}] needs 'preset' or 'bandwidth' and 'latency'")
        bandwidth = parse_bandwidth_Bps(bw) if bw is not None else base.bandwidth_Bps
        latency = parse_time_s(lat) if lat is not None else base.latency_s
        check_range(f"{where}: links[{i}]", "bandwidth_Bps", bandwidth)
        check_range(f"{where}: links[{i}]", "latency_s", latency)
        if "framing" in link and "efficiency" in link:
            raise ConfigError(f"{where}: links[{i}]: give either 'efficiency' or 'framing'")
        if "framing" in link:
            eff = get_framing(str(link["framing"])).efficiency
        elif "efficiency" in link:
            eff = link["efficiency"]
            if isinstance(eff, bool) or not isinstance(eff, (int, float)):
                raise ConfigError(f"{where}: links[{i}].efficiency: expected a number, got {eff!r}")
        else:
            eff = base.efficiency if base is not None else 1.0
        if not (math.isfinite(eff) and 0 < eff <= 1):
            raise ConfigError(
                f"{where}: links[{i}].efficiency must be in (0, 1] (payload bytes per wire "
                f"byte), got {eff!r}"
            )
        out.append((str(link["a"]), str(link["b"]), float(bandwidth) * float(eff), float(latency)))
    return tuple(out)


@dataclass(frozen=True)
class GraphSpec(TopologySpec):
    """An arbitrary graph: hosts in rank order and links (inline or from a TOML ``file``,
    read once when the spec is made), each ``(a, b, payload_Bps, latency_s)``."""

    kind: ClassVar[str] = "graph"
    hosts: tuple[str, ...] = ()
    links: tuple[tuple[str, str, float, float], ...] = ()  # (a, b, payload_Bps, latency_s)
    file: str = ""

    def table(self) -> dict[str, Any]:
        if self.file:
            return {"kind": self.kind, "file": self.file}
        links = [
            {"a": a, "b": b, "bandwidth_Bps": bw, "latency_s": lat} for a, b, bw, lat in self.links
        ]
        return {"kind": self.kind, "hosts": list(self.hosts), "links": links}

    def scaled(self, bw_ratio: float, lat_ratio: float) -> GraphSpec:
        """This graph inline, every link's payload rate times ``bw_ratio`` and latency times
        ``lat_ratio``."""
        links = tuple((a, b, bw * bw_ratio, lat * lat_ratio) for a, b, bw, lat in self.links)
        return GraphSpec(hosts=self.hosts, links=links)

    @classmethod
    def from_table(cls, d: Mapping[str, Any]) -> GraphSpec:
        data: Mapping[str, Any] = d
        file = str(d.get("file", ""))
        if file:
            if "hosts" in d or "links" in d:
                raise ConfigError(
                    "topology: give either 'file' or inline 'hosts'/'links', not both"
                )
            data = load_toml(Path(file))
            for key in data:
                if key not in ("hosts", "links"):
                    raise ConfigError(
                        f"unknown key {key!r} in topology file {file}; valid keys: hosts, links"
                    )
        hosts = data.get("hosts")
        if not isinstance(hosts, (list, tuple)) or not hosts:
            raise TopologyError("graph topology: 'hosts' must be a non-empty list of node names")
        hosts_t = tuple(str(h) for h in hosts)
        if len(set(hosts_t)) != len(hosts_t):
            raise TopologyError("graph topology: 'hosts' has duplicate names")
        spec = cls(
            hosts=hosts_t, links=_graph_links("graph topology", data.get("links")), file=file
        )
        spec.check()
        return spec

    def check(self) -> None:
        """TopologyError unless every host reaches every other one (no self-loops either)."""
        import networkx as nx

        g = nx.Graph()
        g.add_nodes_from(self.hosts)
        for a, b, _, _ in self.links:
            if a == b:
                raise TopologyError(f"graph topology: self-loop link on {a!r}")
            g.add_edge(a, b)
        reach = nx.node_connected_component(g, self.hosts[0])
        missing = [h for h in self.hosts if h not in reach]
        if missing:
            raise TopologyError(
                f"topology 'graph' is disconnected: hosts {', '.join(missing[:5])}"
                f"{' ...' if len(missing) > 5 else ''} cannot reach {self.hosts[0]}"
            )


#: The topology kinds by the name a cluster file's ``[topology] kind`` gives.
TOPOLOGIES: dict[str, type[TopologySpec]] = {
    cls.kind: cls
    for cls in (StarSpec, LeafSpineSpec, HierarchicalSpec, RingSpec, Torus2dSpec, GraphSpec)
}


def parse_topology(d: Mapping[str, Any]) -> TopologySpec:
    """The typed spec of a ``[topology]`` table (a spec passes through unchanged).

    Unknown kinds raise UnknownNameError listing the valid kinds; unknown keys a ConfigError
    listing the kind's valid keys; bad values a ConfigError naming the key.
    """
    if isinstance(d, TopologySpec):
        return d
    if not isinstance(d, Mapping) or "kind" not in d:
        raise ConfigError("topology must be a table with a 'kind' key")
    kind = d["kind"]
    if kind not in TOPOLOGIES:
        raise unknown_name("topology kind", str(kind), TOPOLOGIES)
    cls = TOPOLOGIES[kind]
    valid = ("kind",) + tuple(f.name for f in fields(cls))
    for key in d:
        if key not in valid:
            raise ConfigError(
                f"unknown key {key!r} in {kind} topology; valid keys: {', '.join(valid)}"
            )
    return cls.from_table(d)
