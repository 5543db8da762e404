"""What a cluster is: a frozen :class:`ClusterSpec` of typed parts, and the cluster presets.

A :class:`ClusterSpec` is a frozen description (no behaviour) shared by the closed-form
models (``models``) and the discrete-event simulator (``simulator``): a typed topology spec
(:mod:`vgcsim.core.topologies`), the inter-node :class:`~vgcsim.core.specs.LinkSpec` (one
NIC per rank in a non-blocking fabric unless the topology says otherwise), an optional
intra-node link with ``gpus_per_node`` ranks per node, a
:class:`~vgcsim.core.specs.DeviceSpec`, and how compute time is obtained (``"model"``, the
default: every local time modelled on the cluster's device — FLOPs ÷ device rate for forward
+ backward, bytes touched ÷ memory bandwidth + launch overhead for the optimizer,
compression, decoding and casts; ``"trace"``: the seconds measured on the recording machine
× ``compute_scale``).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from vgcsim.core.errors import ConfigError, TopologyError, unknown_name
from vgcsim.core.presets import DEFAULT_DEVICE, DEVICE_PRESETS, INTRA_NODE_LINKS, LINK_PRESETS
from vgcsim.core.specs import (
    RANGES,
    DeviceSpec,
    LinkSpec,
    check_range,
    refill_bytes,
    spelled,
    spellings,
)
from vgcsim.core.topologies import HierarchicalSpec, StarSpec, TopologySpec, parse_topology

__all__ = [
    "CLUSTER_PRESETS",
    "COMPUTE_MODES",
    "ClusterSpec",
    "get_cluster",
    "HOST_SHARINGS",
    "host_share",
    "sharing_factor",
    "shared_cluster",
    "shared_link",
    "wire_cluster",
    "wire_link",
    "gather_cluster",
    "gather_link",
]

COMPUTE_MODES = ("model", "trace")
#: How the ranks of a host share its cores (``ClusterSpec.host_sharing``; :func:`host_share`).
HOST_SHARINGS = ("fullest-core", "fair")


@dataclass(frozen=True)
class ClusterSpec:
    """A cluster: topology, links, ranks per node, device and compute-time source.

    Hosts: ``ranks_per_host`` ranks (filled in rank order) run on one host of ``host_cores``
    cores, each rank with ``threads_per_rank`` busy threads; ``host_cores = 0`` (the default)
    gives every rank cores of its own. Where the ranks' threads outnumber the cores, the
    host's CPU work (compute, codec, a collective's per-call software cost and
    its per-byte host costs γ and δ) is stretched by the sharing factor of
    ``host_sharing`` (``"fullest-core"``, the default, or ``"fair"``): see :func:`host_share`.
    ``ranks_per_host`` is apart from ``gpus_per_node`` (which sets who shares an intra-node
    link): ranks in network namespaces of one machine have a NIC each but share its cores.
    """

    name: str
    topology: TopologySpec
    link: LinkSpec
    intra_link: LinkSpec | None
    gpus_per_node: int
    device: DeviceSpec
    compute: str = "model"
    compute_scale: float = 1.0
    source: str = field(default="", compare=False)
    # the host fields: each is read from a cluster file by its declaration alone
    ranks_per_host: int = spelled(1, integer=True, range=(1, 2**20))
    host_cores: int = spelled(0, integer=True, range=(0, 2**20))  # 0: unlimited cores
    threads_per_rank: int = spelled(1, integer=True, range=(1, 2**20))
    host_sharing: str = spelled("fullest-core", choices=HOST_SHARINGS)

    def __post_init__(self) -> None:
        for key, spelling in spellings(type(self)):
            value = getattr(self, key)
            if spelling.integer and (isinstance(value, bool) or not isinstance(value, int)):
                raise ConfigError(f"cluster {self.name!r}: {key} must be an integer, got {value!r}")
            if spelling.range is not None:
                check_range(f"cluster {self.name!r}", key, value, bounds=spelling.range)
            if spelling.choices and value not in spelling.choices:
                raise unknown_name(key, str(value), spelling.choices)
        if not isinstance(self.topology, TopologySpec):
            kind = self.topology.get("kind") if isinstance(self.topology, Mapping) else None
            if not isinstance(kind, str) or not kind:
                raise ConfigError(f"cluster {self.name!r}: topology needs a 'kind' string")
        if self.compute not in COMPUTE_MODES:
            raise unknown_name("compute mode", str(self.compute), COMPUTE_MODES)
        if isinstance(self.gpus_per_node, bool) or not isinstance(self.gpus_per_node, int):
            raise ConfigError(f"cluster {self.name!r}: gpus_per_node must be an integer >= 1")
        check_range(f"cluster {self.name!r}", "gpus_per_node", self.gpus_per_node)
        check_range(f"cluster {self.name!r}", "compute_scale", self.compute_scale)
        # the topology is read here, once, where every cluster is built (a table becomes its
        # typed spec), so that predict and simulate (and sweep) refuse the same topologies:
        # kind, keys, values, connectivity
        if not isinstance(self.topology, TopologySpec):
            object.__setattr__(self, "topology", parse_topology(self.topology))
        if isinstance(self.topology, HierarchicalSpec) and self.intra_link is None:
            raise TopologyError(f"cluster {self.name!r}: hierarchical topology needs an intra_link")


RANGES.update((key, s.range) for key, s in spellings(ClusterSpec) if s.range is not None)


def host_share(cluster: ClusterSpec, world_size: int) -> float:
    """Sharing factor of a host's CPU work for a job of ``world_size`` ranks: the time CPU
    work that every rank of the fullest host runs at once takes, over its one-core time.
    R = min(``ranks_per_host``, P) ranks on the fullest host (ranks fill hosts in order),
    T = ``threads_per_rank``, C = ``host_cores``; 1 where C = 0 or R·T ≤ C.

    * ``host_sharing = "fullest-core"`` (the default): ``f = ⌈R·T / C⌉``. The R·T busy
      threads sit on the C cores as evenly as whole threads allow, and the core holding the
      most, ⌈R·T / C⌉, sets the pace: a lock-step step waits for the last rank. A scheduler
      with per-core run queues (Linux) rarely moves a thread that ran a moment ago to a core
      that went idle, so within a phase of milliseconds the threads stay where they were
      woken. How much an oversubscribed barrier-synchronised program loses under Linux's
      load balancing depends on how often it synchronises (C. Iancu, S. Hofmeyr,
      F. Blagojević, Y. Zheng, "Oversubscription on multicore processors", IPDPS 2010); a
      training step synchronises once per step. 3 ranks on 2 cores: f = 2; 4 on 2: f = 2.
    * ``host_sharing = "fair"``: ``f = R·T / C``, egalitarian processor sharing: n equal jobs
      on C < n servers each progress at C/n of a server (L. Kleinrock, "Time-shared systems: a
      theoretical treatment", JACM 14(2), 1967), the limit of a scheduler that balances
      threads across cores continuously (long phases). 3 ranks on 2 cores: f = 1.5.

    Which rule a machine follows for a given phase length is measured by
    ``python benchmarks/host_sharing.py`` (docs/models.md, "Hosts with cores"). Assumption
    of both: the ranks' CPU phases coincide (lock-step data parallelism)."""
    ranks = min(cluster.ranks_per_host, max(1, int(world_size)))
    return sharing_factor(ranks, cluster.threads_per_rank, cluster.host_cores, cluster.host_sharing)


def sharing_factor(ranks: int, threads_per_rank: int, host_cores: int, rule: str) -> float:
    """The factor of :func:`host_share` for ``ranks`` ranks of ``threads_per_rank`` busy
    threads on one host of ``host_cores`` cores (0: unlimited) under ``rule``, one of
    :data:`HOST_SHARINGS`: ``max(1, ⌈R·T/C⌉)`` (``"fullest-core"``) or ``max(1, R·T/C)``
    (``"fair"``). An unknown rule is an :class:`~vgcsim.core.errors.UnknownNameError`."""
    if rule not in HOST_SHARINGS:
        raise unknown_name("host_sharing", str(rule), HOST_SHARINGS)
    if host_cores == 0:
        return 1.0
    load = ranks * threads_per_rank / host_cores
    return max(1.0, float(math.ceil(load)) if rule == "fullest-core" else load)


def shared_link(link: LinkSpec, share: float) -> LinkSpec:
    """``link`` as a collective's ranks meet it on hosts whose cores they share with the
    processor-sharing factor ``share`` (:func:`host_share`): its CPU-time parameters ``c``,
    ``γ`` and ``δ`` (its table and its fixed part too) times ``share``, α unchanged, and
    where σ (``comm_cpu_s_per_byte``) > 0 its bandwidth and every size segment's capped at the rate
    a rank's share of a core moves bytes while it sends and receives at once::

        bandwidth' = min(bandwidth, 1 / (2 · f · σ · efficiency))   # payload: 1 / (2·f·σ)
        segment bandwidth' = min(segment bandwidth, 1 / (2 · f · σ))

    (each byte costs σ of CPU on the way out and σ on the way in; a rank on a core shared f
    ways progresses at 1/f of it, :func:`host_share`).
    ``share = 1`` and σ = 0 return ``link`` itself."""
    sigma = link.comm_cpu_s_per_byte
    if share == 1.0 and sigma == 0.0:
        return link
    table = tuple((b, d * share) for b, d in link.allgatherv_host_s_per_byte_table)
    changes: dict = {}
    if sigma > 0.0:
        cap_Bps = 1.0 / (2.0 * share * sigma)  # payload bytes per second each way
        changes["bandwidth_Bps"] = min(link.bandwidth_Bps, cap_Bps / link.efficiency)
        changes["segments"] = tuple(
            (start, extra, min(bw, cap_Bps)) for start, extra, bw in link.segments
        )
    return dataclasses.replace(
        link,
        gamma_s_per_byte=link.gamma_s_per_byte * share,
        allgatherv_host_s_per_byte=link.allgatherv_host_s_per_byte * share,
        allgatherv_host_s_per_byte_table=table,
        allgatherv_host_s=link.allgatherv_host_s * share,
        call_overhead_s=link.call_overhead_s * share,
        **changes,
    )


def shared_cluster(cluster: ClusterSpec, world_size: int) -> ClusterSpec:
    """``cluster`` with its links' CPU-time parameters stretched for a job of ``world_size``
    ranks, and their rates capped by σ (:func:`shared_link` at :func:`host_share`);
    ``cluster`` itself where the factor is 1 and no link has σ.
    What the cost models and the simulator both price collectives with."""
    share = host_share(cluster, world_size)
    link = shared_link(cluster.link, share)
    intra = None if cluster.intra_link is None else shared_link(cluster.intra_link, share)
    if link is cluster.link and intra is cluster.intra_link:
        return cluster
    return dataclasses.replace(cluster, link=link, intra_link=intra)


def wire_link(link: LinkSpec) -> LinkSpec:
    """``link`` with its bandwidth alone: α, the per-call cost c, γ, δ (its table and fixed
    part too) and the size segments set to zero, so that a collective priced on it takes its bytes' time at
    the payload rate, ``bytes / (bandwidth × efficiency)``: the part of an exchange a token
    bucket's tokens can shorten (:func:`vgcsim.core.collectives.burst_credit_s`). Each
    message's bytes are those its start-up's refill leaves
    (:func:`vgcsim.core.collectives.refill_bytes` of ``link``, kept as
    ``start_refill_bytes``): the bytes still waiting for tokens."""
    return dataclasses.replace(
        link,
        start_refill_bytes=refill_bytes(link),
        latency_s=0.0,
        allgather_latency_s=0.0,
        gamma_s_per_byte=0.0,
        allgatherv_host_s_per_byte=0.0,
        allgatherv_host_s_per_byte_table=(),
        allgatherv_host_s=0.0,
        call_overhead_s=0.0,
        segments=(),
    )


def gather_link(link: LinkSpec) -> LinkSpec:
    """``link`` as an allgather-type collective (every ``allgatherv/*`` key) meets it: its
    start-up α is ``allgather_latency_s`` where that is set (> 0), else ``link`` itself."""
    if link.allgather_latency_s <= 0.0 or link.allgather_latency_s == link.latency_s:
        return link
    return dataclasses.replace(link, latency_s=link.allgather_latency_s)


def gather_cluster(cluster: ClusterSpec) -> ClusterSpec:
    """``cluster`` with its host link as an allgather-type collective meets it
    (:func:`gather_link`); ``cluster`` itself where that is the same link."""
    link = gather_link(cluster.link)
    return cluster if link is cluster.link else dataclasses.replace(cluster, link=link)


def wire_cluster(cluster: ClusterSpec) -> ClusterSpec:
    """``cluster`` with every link's bandwidth alone (:func:`wire_link`)."""
    intra = None if cluster.intra_link is None else wire_link(cluster.intra_link)
    return dataclasses.replace(cluster, link=wire_link(cluster.link), intra_link=intra)


def _star(link_name: str) -> ClusterSpec:
    link = LINK_PRESETS[link_name]
    return ClusterSpec(
        name=link_name,
        topology=StarSpec(),
        link=link,
        intra_link=None,
        gpus_per_node=1,
        device=DEVICE_PRESETS[DEFAULT_DEVICE],
        compute="model",
        compute_scale=1.0,
        source=f"non-blocking star: one {link_name} NIC per rank into one switch",
    )


def _hier(name: str, inter: str, intra: str, gpus: int, device: str) -> ClusterSpec:
    return ClusterSpec(
        name=name,
        topology=HierarchicalSpec(),
        link=LINK_PRESETS[inter],
        intra_link=LINK_PRESETS[intra],
        gpus_per_node=gpus,
        device=DEVICE_PRESETS[device],
        compute="model",
        compute_scale=1.0,
        source=f"{gpus} x {device} per node on {intra}, one {inter} NIC per node "
        "(DGX-style node; assumption)",
    )


CLUSTER_PRESETS: dict[str, ClusterSpec] = {
    name: _star(name) for name in LINK_PRESETS if name not in INTRA_NODE_LINKS
}
for _spec in (
    _hier("dgx1-IB-EDR", "IB-EDR", "NVLink2", 8, "V100"),
    _hier("dgxa100-IB-HDR", "IB-HDR", "NVLink3", 8, "A100"),
    _hier("4xP100-IB-FDR56", "IB-FDR56", "PCIe3", 4, "P100"),
):
    CLUSTER_PRESETS[_spec.name] = _spec


def get_cluster(name: str) -> ClusterSpec:
    """Look up a cluster preset by name (UnknownNameError lists the valid names)."""
    try:
        return CLUSTER_PRESETS[name]
    except KeyError:
        raise unknown_name("cluster preset", name, CLUSTER_PRESETS) from None
