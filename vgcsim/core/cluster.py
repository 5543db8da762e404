"""What a cluster is: links, devices and topology, with sourced presets and TOML cluster files.

A :class:`ClusterSpec` is a frozen description (no behaviour) shared by the closed-form
models (``models``) and the discrete-event simulator (``simulator``): a topology dict whose
``kind`` the simulator interprets, the inter-node :class:`LinkSpec` (one NIC per rank in a
non-blocking fabric unless the topology says otherwise), an optional intra-node link with
``gpus_per_node`` ranks per node, a :class:`DeviceSpec`, and how compute time is obtained
(``"model"``, the default: every local time modelled on the cluster's device — FLOPs ÷ device
rate for forward + backward, bytes touched ÷ memory bandwidth + launch overhead for the
optimizer, compression, decoding and casts; ``"trace"``: the seconds measured on the recording
machine × ``compute_scale``).

A link's ``bandwidth_Bps`` is the nominal line (data) rate; ``efficiency`` is the payload bytes
carried per wire byte by the transport (framing, headers, preamble and inter-frame gap): the
rate a large transfer actually moves is ``bandwidth_Bps × efficiency`` (:data:`FRAMINGS` lists
the sourced values; a *measured* goodput, e.g. from ``vgcsim calibrate``, goes in with
``efficiency = 1``).

Numbers are SI (bytes/s, seconds, FLOP/s); human strings are parsed with :mod:`vgcsim.core.units`
when a cluster file is loaded. Preset values are nominal line rates from the cited
standards/datasheets; latencies are typical small-message MPI figures and are marked as
assumptions in each ``source``.

A cluster file (TOML) looks like::

    name = "my-10gbe"
    base = "10GbE"               # optional: start from a cluster preset
    compute = "model"            # "model" (default) or "trace"
    compute_scale = 1.0
    gpus_per_node = 4
    ranks_per_host = 4           # ranks sharing one host's cores (default 1)
    host_cores = 0               # cores per host; 0 (default): no processor sharing
    threads_per_rank = 1         # busy threads per rank (default 1)
    device = "V100"              # preset name, or a [device] table
    [topology]
    kind = "hierarchical"
    [link]                       # preset name string, or a table
    preset = "10GbE"             # optional base for the table (default: base's link)
    bandwidth = "10Gbps"         # or bandwidth_Bps = 1.25e9
    latency = "10us"             # or latency_s = 1e-5
    gamma_s_per_byte = 0.0
    allgatherv_host_s_per_byte = 0.0   # host copy time per gathered byte (vgcsim calibrate)
    # optional, written by vgcsim calibrate: [gathered bytes, s per byte] points; where given,
    # δ at a size is the value of the point at or below it (a step function), not one number
    allgatherv_host_s_per_byte_table = [[16777216, 1.9e-9], [67108864, 5.1e-9]]
    # optional, written by vgcsim calibrate: the share of that host time paid per padded
    # byte of an allgatherv of uneven blocks (the rest per real byte); default 0.5
    allgatherv_host_padded_share = 0.24
    call_overhead = "300us"      # software cost per collective call and rank (or call_overhead_s)
    burst = "256KiB"             # token-bucket depth of every host link (or burst_bytes)
    framing = "tcp-mtu9000"      # or efficiency = 0.99 (payload bytes per wire byte)
    [intra_link]
    preset = "NVLink2"

A ``[link]``, ``[intra_link]`` or ``[device]`` table overrides only the fields it gives, of its
``preset`` where it names one, else of the ``base`` cluster's. Unknown keys anywhere are a
:class:`~vgcsim.core.errors.ConfigError` listing the valid ones; a bad value is one naming the
field as the file spells it and the rule it breaks.
"""

from __future__ import annotations

import dataclasses
import json
import math
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from vgcsim.core.errors import ConfigError, TopologyError, unknown_name
from vgcsim.core.units import parse_bandwidth_Bps, parse_flops, parse_size_bytes, parse_time_s

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10 only
    import tomli as tomllib

__all__ = [
    "CLUSTER_PRESETS",
    "COMPUTE_MODES",
    "RANGES",
    "TOPOLOGIES",
    "GraphSpec",
    "HierarchicalSpec",
    "LeafSpineSpec",
    "RingSpec",
    "StarSpec",
    "Torus2dSpec",
    "parse_topology",
    "DEVICE_PRESETS",
    "FRAMINGS",
    "LINK_PRESETS",
    "ClusterSpec",
    "DeviceSpec",
    "LinkSpec",
    "cluster_from_dict",
    "cluster_to_dict",
    "get_device",
    "get_link",
    "host_share",
    "load_cluster",
    "shared_cluster",
    "shared_link",
]

COMPUTE_MODES = ("model", "trace")


#: Share of vgcsim's allgatherv host cost paid per padded byte (the P·m_max bytes of the
#: gathered buffer) by default, the rest per real byte (Σ m_r): a link's
#: ``allgatherv_host_padded_share`` where its file does not give one (``vgcsim calibrate``
#: did not fit one; :func:`vgcsim.core.collectives.padded_host_time_s`).
DEFAULT_HOST_PADDED_SHARE = 0.5


def _finite(value: float) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


#: Accepted ranges, wide enough for any real hardware and narrow enough that no step time
#: overflows or divides by a subnormal: (lowest, highest) in SI units.
RANGES: dict[str, tuple[float, float]] = {
    "bandwidth_Bps": (1.0, 1e15),  # 1 B/s .. 1 PB/s
    "latency_s": (0.0, 1.0),  # a start-up time above a second is a unit mistake
    "gamma_s_per_byte": (0.0, 1.0),
    "allgatherv_host_s_per_byte": (0.0, 1.0),
    "allgatherv_host_padded_share": (0.0, 1.0),
    "call_overhead_s": (0.0, 1.0),  # software cost of one collective call (per rank)
    "burst_bytes": (0.0, 1e15),  # token-bucket depth of a host link
    "peak_flops": (1e6, 1e21),  # 1 MFLOP/s .. 1 ZFLOP/s
    "memory_bandwidth_Bps": (1.0, 1e15),
    "launch_overhead_s": (0.0, 1.0),
    "compute_scale": (1e-6, 1e6),
    "gpus_per_node": (1, 2**20),
    "oversubscription": (1e-6, 1e6),
    "ranks_per_host": (1, 2**20),
    "host_cores": (0, 2**20),  # 0: unlimited cores (no processor sharing)
    "threads_per_rank": (1, 2**20),
}


def _check_range(owner: str, key: str, value: Any, *, shown: str | None = None) -> None:
    """ConfigError unless ``value`` is a finite number within ``RANGES[key]`` (the message
    names the field as ``shown``, by default ``owner: key``)."""
    lo, hi = RANGES[key]
    if not (_finite(value) and lo <= value <= hi):
        raise ConfigError(
            f"{shown or f'{owner}: {key}'} must be a finite number in [{lo:g}, {hi:g}], "
            f"got {value!r}"
        )


@dataclass(frozen=True)
class Framing:
    """How many payload bytes a transport carries per byte on the wire, and why."""

    name: str
    efficiency: float
    source: str


#: Transport efficiencies (payload bytes per wire byte) of common link framings.
FRAMINGS: dict[str, Framing] = {
    f.name: f
    for f in (
        Framing(
            "tcp-mtu1500",
            1448 / 1538,
            "TCP/IPv4 over Ethernet, MTU 1500: 1448 payload bytes (1500 − 20 IPv4 − 20 TCP − 12 "
            "TCP timestamp option, RFC 791/793/7323) per 1538 wire bytes (1500 + 14 Ethernet "
            "header + 4 FCS + 8 preamble/SFD + 12 inter-frame gap, IEEE 802.3 clauses 3-4) = "
            "0.9415. A tbf shaper counts 1514-byte frames: 1448/1514 = 0.9564",
        ),
        Framing(
            "tcp-mtu9000",
            8948 / 9038,
            "TCP/IPv4 over Ethernet jumbo frames, MTU 9000: 8948 payload bytes per 9038 wire "
            "bytes (same headers as tcp-mtu1500) = 0.9900",
        ),
        Framing(
            "ib-mtu4096",
            4096 / (4096 + 26),
            "InfiniBand reliable connection, 4096-byte MTU: per packet LRH 8 + BTH 12 + ICRC 4 "
            "+ VCRC 2 = 26 header bytes (IBTA InfiniBand Architecture Specification vol. 1, "
            "ch. 5 and 7) = 0.9937; the line rate is already after 64b/66b coding",
        ),
        Framing(
            "pcie-mps256",
            256 / (256 + 24),
            "PCI Express TLPs with 256-byte max payload: 24 bytes per TLP (framing 2 + sequence "
            "2 + 3DW/4DW header 12-16 + LCRC 4, PCI Express Base Specification; Xilinx WP350 "
            "'Understanding Performance of PCI Express Systems') = 0.914",
        ),
        Framing(
            "none",
            1.0,
            "no derating: the bandwidth is already a payload rate (a measured goodput) or the "
            "packet overhead is not modelled",
        ),
    )
}


def get_framing(name: str) -> Framing:
    """Look up a framing by name (UnknownNameError lists the valid names)."""
    try:
        return FRAMINGS[name]
    except KeyError:
        raise unknown_name("link framing", name, FRAMINGS) from None


def _number_rows(
    owner: str, key: str, value: Any, fields: str, n: int, what: tuple[str, str]
) -> list[Any]:
    """The items of ``value``: ConfigError unless it is a list whose every item is a list of
    ``n`` finite numbers (``fields`` names them; ``what``: an item's name, and the list's,
    e.g. ``("point", "pairs")``)."""
    if isinstance(value, (str, bytes, Mapping)) or not isinstance(value, (list, tuple)):
        raise ConfigError(
            f"{owner}: {key} must be a list of [{fields}] {what[1]}, got {value!r:.80}"
        )
    rows = []
    for point in value:
        if (
            isinstance(point, (str, bytes, Mapping))
            or not isinstance(point, (list, tuple))
            or len(point) != n
            or not all(_finite(v) for v in point)
        ):
            raise ConfigError(
                f"{owner}: {key}: each {what[0]} must be [{fields}] "
                f"({'two' if n == 2 else 'three'} finite numbers), got {point!r:.80}"
            )
        rows.append(point)
    return rows


def _host_table(owner: str, value: Any) -> tuple[tuple[float, float], ...]:
    """``value`` as a tuple of ``(gathered bytes, s per byte)`` points, ConfigError unless each
    is a pair of finite numbers, bytes >= 1 and strictly increasing, s per byte within
    ``RANGES["allgatherv_host_s_per_byte"]``."""
    key = "allgatherv_host_s_per_byte_table"
    points: list[tuple[float, float]] = []
    for point in _number_rows(owner, key, value, "bytes, s_per_byte", 2, ("point", "pairs")):
        size, per_byte = float(point[0]), float(point[1])
        if size < 1:
            raise ConfigError(f"{owner}: {key}: gathered bytes must be >= 1, got {point[0]!r}")
        _check_range(f"{owner} {key}", "allgatherv_host_s_per_byte", per_byte)
        if points and size <= points[-1][0]:
            raise ConfigError(f"{owner}: {key}: bytes must increase from point to point")
        points.append((size, per_byte))
    return tuple(points)


def _segments(owner: str, value: Any) -> tuple[tuple[float, float, float], ...]:
    """``value`` as ``(from_bytes, extra_latency_s, bandwidth_Bps)`` points: ConfigError
    unless each is three finite numbers, bytes >= 0 and strictly increasing, |extra latency|
    <= 1 s, bandwidth within ``RANGES["bandwidth_Bps"]``."""
    key = "segments"
    fields = "from_bytes, extra_latency_s, bandwidth_Bps"
    points: list[tuple[float, float, float]] = []
    for point in _number_rows(owner, key, value, fields, 3, ("segment", "triples")):
        start, extra, bw = (float(v) for v in point)
        if start < 0 or (points and start <= points[-1][0]):
            raise ConfigError(f"{owner}: {key}: from_bytes must be >= 0 and increase")
        if abs(extra) > 1.0:
            raise ConfigError(f"{owner}: {key}: extra_latency_s must be within 1 s, got {extra!r}")
        _check_range(f"{owner} {key}", "bandwidth_Bps", bw)
        points.append((start, extra, bw))
    return tuple(points)


@dataclass(frozen=True)
class LinkSpec:
    """A point-to-point link in the Hockney α-β(-γ) model.

    ``bandwidth_Bps`` is the nominal line rate in bytes per second per direction (full
    duplex); ``efficiency`` the payload bytes per wire byte of its transport (see
    :data:`FRAMINGS`), so payload moves at ``payload_Bps = bandwidth_Bps × efficiency``;
    ``latency_s`` is α, the per-message start-up time; ``gamma_s_per_byte`` is γ, the time to
    reduce one byte at the receiver (used by allreduce models); ``allgatherv_host_s_per_byte``
    is δ, the host time an allgatherv implementation spends per byte of the buffer it gathers
    (copying blocks in and out, P·m_max bytes per rank on the padded allgatherv; used by
    ``allgatherv/padded``; fitted by ``vgcsim calibrate``, 0 for the presets).
    ``allgatherv_host_s_per_byte_table``, where not empty, replaces that one number by a
    curve: ``(gathered bytes, s per byte)`` points in increasing bytes, δ at B gathered bytes
    the value of the largest point at or below B (the first point's below it; a step
    function, :func:`vgcsim.core.collectives.host_s_per_byte_at`). The host copies of a gathered buffer
    cost more per byte once it no longer fits the CPU's caches, so one slope fitted over
    1-64 MiB misprices the sizes on one side of that step; ``vgcsim calibrate`` writes the
    per-size points it measured. ``allgatherv_host_padded_share`` is the share s of that host
    time paid per padded byte when the blocks are uneven (the rest is paid per real byte:
    ``δ·(s·P·m_max + (1 − s)·Σ m_r)``, :func:`vgcsim.core.collectives.padded_host_time_s`);
    ``vgcsim calibrate`` fits it where it timed ``allgatherv_skewed``.

    ``call_overhead_s`` (c) is the fixed software time a rank spends in one collective call
    (argument checks, buffer set-up, the backend's work queue and completion), paid once per
    call and rank, not per algorithm step (α is the per-step start-up). It is CPU time: on a
    host whose ranks share cores (:class:`ClusterSpec` ``host_cores``) it stretches by the
    sharing factor (:func:`host_share`), as γ and δ do. A point-to-point message does not pay
    it. Every collective formula adds ``c`` per call (``calls_per_collective``, the closed
    forms in docs/models.md); 0 for the presets.

    ``segments``, where not empty, prices each message by its size, piecewise linear as
    SimGrid's SMPI does (Degomme et al., "Simulating MPI applications: the SMPI approach",
    IEEE TPDS 28(8), 2017: latency and bandwidth factors per message-size segment):
    ``(from_bytes, extra_latency_s, bandwidth_Bps)`` points in increasing bytes; a message
    of m bytes in the segment of the largest ``from_bytes`` ≤ m (the first one below it)
    takes ``α + max(0, extra_latency_s + m / bandwidth_Bps)`` instead of ``α + m·β``
    (:func:`vgcsim.core.collectives.message_time_s`). A token-bucket shaper's burst
    (messages within the bucket leave at the host's speed), TCP's window growth and eager /
    rendezvous protocol switches are such steps; ``vgcsim calibrate`` fits them where one
    line does not fit its point-to-point sizes. The last segment's bandwidth is the link's
    ``bandwidth_Bps`` (×``efficiency``) by construction of the fit; extra latencies may be
    negative (a burst shortens a large message by the bucket's bytes), but no message takes
    less than α.

    ``burst_bytes`` (b, default 0: no bucket) is the depth of a token bucket on every host
    link (Linux ``tc tbf``'s ``burst``; a cloud instance's network burst credit): tokens
    refill at the link's bandwidth while the host's link is idle and bytes covered by tokens
    leave at once. A synchronous step leaves the link idle for its local phases, so the
    exchange that follows starts with min(b, bandwidth × idle seconds) of tokens and is
    shorter by up to that many bytes' time (:func:`vgcsim.core.collectives.burst_credit_s`).
    """

    name: str
    bandwidth_Bps: float
    latency_s: float
    gamma_s_per_byte: float = 0.0
    source: str = ""
    efficiency: float = 1.0
    allgatherv_host_s_per_byte: float = 0.0
    allgatherv_host_s_per_byte_table: tuple[tuple[float, float], ...] = ()
    allgatherv_host_padded_share: float = DEFAULT_HOST_PADDED_SHARE
    call_overhead_s: float = 0.0
    segments: tuple[tuple[float, float, float], ...] = ()
    burst_bytes: float = 0.0

    def __post_init__(self) -> None:
        for key in (
            "bandwidth_Bps",
            "latency_s",
            "gamma_s_per_byte",
            "allgatherv_host_s_per_byte",
            "allgatherv_host_padded_share",
            "call_overhead_s",
            "burst_bytes",
        ):
            _check_range(f"link {self.name!r}", key, getattr(self, key))
        object.__setattr__(
            self,
            "allgatherv_host_s_per_byte_table",
            _host_table(f"link {self.name!r}", self.allgatherv_host_s_per_byte_table),
        )
        object.__setattr__(self, "segments", _segments(f"link {self.name!r}", self.segments))
        if not (_finite(self.efficiency) and 0 < self.efficiency <= 1):
            raise ConfigError(
                f"link {self.name!r}: efficiency (payload bytes per wire byte) must be in "
                f"(0, 1], got {self.efficiency!r}"
            )

    @property
    def payload_Bps(self) -> float:
        """Payload bytes per second of a large transfer: ``bandwidth_Bps × efficiency``."""
        return self.bandwidth_Bps * self.efficiency

    @property
    def beta_s_per_byte(self) -> float:
        """β = 1 / (bandwidth × efficiency): seconds to push one payload byte through the link."""
        return 1.0 / self.payload_Bps


@dataclass(frozen=True)
class DeviceSpec:
    """An accelerator: nominal peak FLOP/s and the fraction of it training reaches; memory
    bandwidth (datasheet) and the fraction a streaming kernel sustains; the fixed cost of one
    kernel launch (or, on a CPU, one framework op dispatch).

    ``memory_bandwidth_Bps`` / ``launch_overhead_s`` may be None for a custom device that only
    prices compute; the compression/decode/optimizer model then refuses to run.
    """

    name: str
    peak_flops: float
    efficiency: float
    source: str
    memory_bandwidth_Bps: float | None = None
    memory_efficiency: float = 1.0
    launch_overhead_s: float | None = None

    def __post_init__(self) -> None:
        _check_range(f"device {self.name!r}", "peak_flops", self.peak_flops)
        for what, value in (
            ("efficiency", self.efficiency),
            ("memory_efficiency", self.memory_efficiency),
        ):
            if not (_finite(value) and 0 < value <= 1):
                raise ConfigError(f"device {self.name!r}: {what} must be in (0, 1], got {value!r}")
        for key in ("memory_bandwidth_Bps", "launch_overhead_s"):
            if getattr(self, key) is not None:
                _check_range(f"device {self.name!r}", key, getattr(self, key))

    @property
    def sustained_memory_Bps(self) -> float:
        """Bytes/s a streaming kernel reaches: ``memory_bandwidth_Bps × memory_efficiency``."""
        if self.memory_bandwidth_Bps is None:
            raise ConfigError(
                f"device {self.name!r} has no memory_bandwidth: give it in the cluster file's "
                "[device] table (or measure it with `vgcsim calibrate --codec`)"
            )
        return self.memory_bandwidth_Bps * self.memory_efficiency

    @property
    def launch_s(self) -> float:
        """Seconds per kernel launch (or framework op on a CPU)."""
        if self.launch_overhead_s is None:
            raise ConfigError(
                f"device {self.name!r} has no launch_overhead: give it in the cluster file's "
                "[device] table (or measure it with `vgcsim calibrate --codec`)"
            )
        return self.launch_overhead_s

    @property
    def effective_flops(self) -> float:
        """Sustained FLOP/s = peak × efficiency."""
        return self.peak_flops * self.efficiency


@dataclass(frozen=True)
class ClusterSpec:
    """A cluster: topology, links, ranks per node, device and compute-time source.

    Hosts: ``ranks_per_host`` ranks (filled in rank order) run on one host of ``host_cores``
    cores, each rank with ``threads_per_rank`` busy threads; ``host_cores = 0`` (the default)
    gives every rank cores of its own. Where the ranks' threads outnumber the cores, the
    host's CPU work (compute, codec, a collective's per-call software cost and
    its per-byte host costs γ and δ) runs under processor sharing: see :func:`host_share`.
    ``ranks_per_host`` is apart from ``gpus_per_node`` (which sets who shares an intra-node
    link): ranks in network namespaces of one machine have a NIC each but share its cores.
    """

    name: str
    topology: dict
    link: LinkSpec
    intra_link: LinkSpec | None
    gpus_per_node: int
    device: DeviceSpec
    compute: str = "model"
    compute_scale: float = 1.0
    source: str = field(default="", compare=False)
    ranks_per_host: int = 1
    host_cores: int = 0
    threads_per_rank: int = 1

    def __post_init__(self) -> None:
        for key in ("ranks_per_host", "host_cores", "threads_per_rank"):
            value = getattr(self, key)
            if isinstance(value, bool) or not isinstance(value, int):
                raise ConfigError(f"cluster {self.name!r}: {key} must be an integer, got {value!r}")
            _check_range(f"cluster {self.name!r}", key, value)
        kind = self.topology.get("kind") if isinstance(self.topology, Mapping) else None
        if not isinstance(kind, str) or not kind:
            raise ConfigError(f"cluster {self.name!r}: topology needs a 'kind' string")
        if self.compute not in COMPUTE_MODES:
            raise unknown_name("compute mode", str(self.compute), COMPUTE_MODES)
        if isinstance(self.gpus_per_node, bool) or not isinstance(self.gpus_per_node, int):
            raise ConfigError(f"cluster {self.name!r}: gpus_per_node must be an integer >= 1")
        _check_range(f"cluster {self.name!r}", "gpus_per_node", self.gpus_per_node)
        _check_range(f"cluster {self.name!r}", "compute_scale", self.compute_scale)
        # the topology is checked here, where every cluster is built, so that predict and
        # simulate (and sweep) refuse the same topologies: kind, keys, values, connectivity
        spec = parse_topology(self.topology)
        if isinstance(spec, HierarchicalSpec) and self.intra_link is None:
            raise TopologyError(f"cluster {self.name!r}: hierarchical topology needs an intra_link")

    def __hash__(self) -> int:
        # the topology dict is not hashable; hash the canonical JSON so specs can key caches
        return hash(json.dumps(cluster_to_dict(self), sort_keys=True, default=str))


def host_share(cluster: ClusterSpec, world_size: int) -> float:
    """Processor-sharing factor of a host's CPU work for a job of ``world_size`` ranks:
    ``f = max(1, R·T / C)``, R = min(``ranks_per_host``, P) ranks on the fullest host (ranks
    fill hosts in order), T = ``threads_per_rank``, C = ``host_cores``; 1 where C = 0.

    Under egalitarian processor sharing, n equal jobs on C < n servers each progress at C/n
    of a server, so CPU work that every rank of a host runs at once takes f times its
    one-core time (L. Kleinrock, "Time-shared systems: a theoretical treatment", JACM 14(2),
    1967; the symmetric load of a synchronous data-parallel step). P = 4 ranks on 2 cores:
    f = 2, the compute time doubles. Assumption: the ranks' CPU phases coincide (lock-step
    data parallelism); ranks that compute while others wait would share less."""
    if cluster.host_cores == 0:
        return 1.0
    ranks = min(cluster.ranks_per_host, max(1, int(world_size)))
    return max(1.0, ranks * cluster.threads_per_rank / cluster.host_cores)


def shared_link(link: LinkSpec, share: float) -> LinkSpec:
    """``link`` with its CPU-time parameters stretched by the processor-sharing factor
    ``share`` (:func:`host_share`): ``c``, ``γ`` and ``δ`` (its table too) times
    ``share``; α and β (the wire) unchanged. ``share = 1`` returns ``link`` itself."""
    if share == 1.0:
        return link
    table = tuple((b, d * share) for b, d in link.allgatherv_host_s_per_byte_table)
    return dataclasses.replace(
        link,
        gamma_s_per_byte=link.gamma_s_per_byte * share,
        allgatherv_host_s_per_byte=link.allgatherv_host_s_per_byte * share,
        allgatherv_host_s_per_byte_table=table,
        call_overhead_s=link.call_overhead_s * share,
    )


def shared_cluster(cluster: ClusterSpec, world_size: int) -> ClusterSpec:
    """``cluster`` with its links' CPU-time parameters stretched for a job of ``world_size``
    ranks (:func:`shared_link` at :func:`host_share`); ``cluster`` itself where the factor is 1.
    What the cost models and the simulator both price collectives with."""
    share = host_share(cluster, world_size)
    if share == 1.0:
        return cluster
    intra = None if cluster.intra_link is None else shared_link(cluster.intra_link, share)
    return dataclasses.replace(cluster, link=shared_link(cluster.link, share), intra_link=intra)


# --------------------------------------------------------------------------------------------
# Topologies: the kinds, their parameters and the checks every cluster passes (the simulator
# builds their graphs; the models read the kind)
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class StarSpec:
    """A non-blocking switch with one NIC per rank."""


@dataclass(frozen=True)
class LeafSpineSpec:
    """Two-tier Clos: leaves of ``hosts_per_leaf`` hosts, ``spines`` spines, an oversubscription
    ratio; ``routing`` picks the spine of a cross-leaf flow (``dmodk``: the destination host's
    number modulo the spines; ``hash``: a per-flow hash)."""

    hosts_per_leaf: int = 16
    spines: int = 1
    oversubscription: float = 1.0
    placement: str = "packed"
    routing: str = "dmodk"


@dataclass(frozen=True)
class HierarchicalSpec:
    """``gpus_per_node`` ranks per node on the intra-node link, one NIC per node to a switch."""


@dataclass(frozen=True)
class RingSpec:
    """Hosts cabled in a ring (rank i to rank i+1 mod P)."""


@dataclass(frozen=True)
class Torus2dSpec:
    """A ``rows × cols`` 2-D torus; ``rows = 0`` picks the most square factorisation of P."""

    rows: int = 0


@dataclass(frozen=True)
class GraphSpec:
    """An arbitrary graph: hosts in rank order and links (inline or from a TOML ``file``)."""

    hosts: tuple[str, ...] = ()
    links: tuple[tuple[str, str, float, float], ...] = ()  # (a, b, payload_Bps, latency_s)
    file: str = ""


TOPOLOGIES: dict[str, type] = {
    "star": StarSpec,
    "leaf_spine": LeafSpineSpec,
    "hierarchical": HierarchicalSpec,
    "ring": RingSpec,
    "torus2d": Torus2dSpec,
    "graph": GraphSpec,
}

_PLACEMENTS = ("packed", "spread")
_ROUTINGS = ("dmodk", "hash")


def _int(where: str, value: Any, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigError(f"topology.{where}: expected an integer >= {minimum}, got {value!r}")
    return value


def _parse_graph_links(where: str, links: Any) -> tuple[tuple[str, str, float, float], ...]:
    if not isinstance(links, (list, tuple)) or not links:
        raise TopologyError(f"{where}: 'links' must be a non-empty list of tables")
    valid = (
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
    out = []
    for i, link in enumerate(links):
        if not isinstance(link, Mapping):
            raise TopologyError(f"{where}: links[{i}] must be a table, got {link!r}")
        for key in link:
            if key not in valid:
                raise ConfigError(
                    f"unknown key {key!r} in {where}.links[{i}]; valid keys: {', '.join(valid)}"
                )
        if "a" not in link or "b" not in link:
            raise TopologyError(f"{where}: links[{i}] needs endpoints 'a' and 'b'")
        base: LinkSpec | None = get_link(link["preset"]) if "preset" in link else None
        bw = link.get("bandwidth", link.get("bandwidth_Bps"))
        lat = link.get("latency", link.get("latency_s"))
        if base is None and (bw is None or lat is None):
            raise TopologyError(f"{where}: links[{i}] needs 'preset' or 'bandwidth' and 'latency'")
        bandwidth = parse_bandwidth_Bps(bw) if bw is not None else base.bandwidth_Bps
        latency = parse_time_s(lat) if lat is not None else base.latency_s
        _check_range(f"{where}: links[{i}]", "bandwidth_Bps", bandwidth)
        _check_range(f"{where}: links[{i}]", "latency_s", latency)
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


def _parse_graph(d: Mapping[str, Any]) -> GraphSpec:
    data: Mapping[str, Any] = d
    file = str(d.get("file", ""))
    if file:
        if "hosts" in d or "links" in d:
            raise ConfigError("topology: give either 'file' or inline 'hosts'/'links', not both")
        from vgcsim.core.config import load_toml

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
    spec = GraphSpec(
        hosts=hosts_t, links=_parse_graph_links("graph topology", data.get("links")), file=file
    )
    _check_connected(spec)
    return spec


def _check_connected(spec: GraphSpec) -> None:
    """TopologyError unless every host reaches every other one (no self-loops either)."""
    import networkx as nx

    g = nx.Graph()
    g.add_nodes_from(spec.hosts)
    for a, b, _, _ in spec.links:
        if a == b:
            raise TopologyError(f"graph topology: self-loop link on {a!r}")
        g.add_edge(a, b)
    reach = nx.node_connected_component(g, spec.hosts[0])
    missing = [h for h in spec.hosts if h not in reach]
    if missing:
        raise TopologyError(
            f"topology 'graph' is disconnected: hosts {', '.join(missing[:5])}"
            f"{' ...' if len(missing) > 5 else ''} cannot reach {spec.hosts[0]}"
        )


def parse_topology(d: Mapping[str, Any]) -> Any:
    """Validate a cluster's topology dict and return the kind's frozen spec.

    Unknown kinds raise UnknownNameError listing the valid kinds; unknown keys a ConfigError
    listing the kind's valid keys; bad values a ConfigError naming the key.
    """
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
    if cls is GraphSpec:
        return _parse_graph(d)
    params = {k: v for k, v in d.items() if k != "kind"}
    if cls is LeafSpineSpec:
        spec = LeafSpineSpec(**params)
        _int("hosts_per_leaf", spec.hosts_per_leaf, 1)
        _int("spines", spec.spines, 1)
        _check_range("topology", "oversubscription", spec.oversubscription)
        if not isinstance(spec.placement, str) or spec.placement not in _PLACEMENTS:
            raise unknown_name("leaf_spine placement", str(spec.placement), _PLACEMENTS)
        if not isinstance(spec.routing, str) or spec.routing not in _ROUTINGS:
            raise unknown_name("leaf_spine routing", str(spec.routing), _ROUTINGS)
        return spec
    if cls is Torus2dSpec:
        spec = Torus2dSpec(**params)
        _int("rows", spec.rows, 0)
        return spec
    return cls(**params)


# --------------------------------------------------------------------------------------------
# Presets. Bandwidth = nominal data rate per direction after line coding.
# --------------------------------------------------------------------------------------------

_ETH_LAT = "latency: typical MPI-over-TCP small-message latency (assumption)"
_IB_LAT = "latency: typical MPI small-message latency over InfiniBand verbs (assumption)"


def _link(name: str, bandwidth: str, latency: str, source: str) -> LinkSpec:
    framing = _PRESET_FRAMING[name]
    return LinkSpec(
        name=name,
        bandwidth_Bps=parse_bandwidth_Bps(bandwidth),
        latency_s=parse_time_s(latency),
        source=f"{source}; efficiency {framing.name}: {framing.source}",
        efficiency=framing.efficiency,
    )


#: Framing of each link preset: Ethernet presets carry TCP with the default MTU of 1500 (set
#: ``framing = "tcp-mtu9000"`` in a cluster file for jumbo frames), InfiniBand RC with a
#: 4096-byte MTU, PCIe TLPs of 256 bytes; NVLink is not derated (no packet-level figure used).
_PRESET_FRAMING: dict[str, Framing] = {
    **{n: FRAMINGS["tcp-mtu1500"] for n in ("1GbE", "10GbE", "25GbE", "40GbE", "100GbE")},
    **{n: FRAMINGS["ib-mtu4096"] for n in ("IB-FDR", "IB-FDR56", "IB-EDR", "IB-HDR", "IB-NDR")},
    **{n: FRAMINGS["pcie-mps256"] for n in ("PCIe3", "PCIe4")},
    **{n: FRAMINGS["none"] for n in ("NVLink2", "NVLink3", "NVLink4")},
}


LINK_PRESETS: dict[str, LinkSpec] = {
    spec.name: spec
    for spec in (
        _link("1GbE", "1Gbps", "50us", f"IEEE 802.3ab 1000BASE-T line rate; {_ETH_LAT}"),
        _link("10GbE", "10Gbps", "10us", f"IEEE 802.3ae 10GBASE line rate; {_ETH_LAT}"),
        _link("25GbE", "25Gbps", "5us", f"IEEE 802.3by 25GBASE line rate; {_ETH_LAT}"),
        _link("40GbE", "40Gbps", "5us", f"IEEE 802.3ba 40GBASE line rate; {_ETH_LAT}"),
        _link("100GbE", "100Gbps", "3us", f"IEEE 802.3ba/bj 100GBASE line rate; {_ETH_LAT}"),
        _link(
            "IB-FDR",
            "54.54Gbps",
            "0.7us",
            "InfiniBand 4x FDR: 4 lanes x 14.0625 Gb/s, 64b/66b coding = 54.5 Gb/s data "
            f"(IBTA spec 1.3); {_IB_LAT}",
        ),
        _link(
            "IB-FDR56",
            "56Gbps",
            "0.7us",
            "InfiniBand 4x FDR at its nominal 56 Gb/s, the '56 Gb InfiniBand' of Tsuzuku et "
            f"al. 2018; {_IB_LAT}",
        ),
        _link(
            "IB-EDR",
            "100Gbps",
            "0.6us",
            f"InfiniBand 4x EDR: 4 x 25.78 Gb/s, 64b/66b = 100 Gb/s (IBTA roadmap); {_IB_LAT}",
        ),
        _link(
            "IB-HDR",
            "200Gbps",
            "0.6us",
            f"InfiniBand 4x HDR: 200 Gb/s (IBTA roadmap; ConnectX-6 datasheet); {_IB_LAT}",
        ),
        _link(
            "IB-NDR",
            "400Gbps",
            "0.6us",
            f"InfiniBand 4x NDR: 400 Gb/s (IBTA roadmap; ConnectX-7 datasheet); {_IB_LAT}",
        ),
        _link(
            "PCIe3",
            "15.75GB/s",
            "1us",
            "PCI Express 3.0 x16: 8 GT/s x 16 lanes, 128b/130b coding = 15.75 GB/s per "
            "direction (PCI-SIG); latency: typical device-to-device copy start-up (assumption)",
        ),
        _link(
            "PCIe4",
            "31.5GB/s",
            "1us",
            "PCI Express 4.0 x16: 16 GT/s x 16 lanes, 128b/130b = 31.5 GB/s per direction "
            "(PCI-SIG); latency: typical device-to-device copy start-up (assumption)",
        ),
        _link(
            "NVLink2",
            "150GB/s",
            "2us",
            "NVLink 2.0 on V100 SXM2: 6 links x 25 GB/s per direction (NVIDIA Tesla V100 "
            "datasheet, 300 GB/s bidirectional); latency: typical NCCL p2p start-up (assumption)",
        ),
        _link(
            "NVLink3",
            "300GB/s",
            "2us",
            "NVLink 3.0 on A100 SXM4: 12 links x 25 GB/s per direction (NVIDIA A100 "
            "datasheet, 600 GB/s bidirectional); latency: typical NCCL p2p start-up (assumption)",
        ),
        _link(
            "NVLink4",
            "450GB/s",
            "2us",
            "NVLink 4.0 on H100 SXM5: 18 links x 25 GB/s per direction (NVIDIA H100 "
            "datasheet, 900 GB/s bidirectional); latency: typical NCCL p2p start-up (assumption)",
        ),
    )
}
LINK_PRESETS["NVLink"] = dataclasses.replace(
    LINK_PRESETS["NVLink2"],
    name="NVLink",
    source="alias of NVLink2; " + LINK_PRESETS["NVLink2"].source,
)

#: Links meant for inside a node; they get no star-cluster preset of their own.
INTRA_NODE_LINKS = ("PCIe3", "PCIe4", "NVLink", "NVLink2", "NVLink3", "NVLink4")

_EFF = "efficiency 0.4: typical sustained fraction of FP32 peak for CNN training (assumption)"
_MEM_EFF = (
    "memory_efficiency 0.83: a V100 streamed 750 of its 900 GB/s in Z. Jia, M. Maggioni, "
    "B. Staiger, D. Scarpazza, 'Dissecting the NVIDIA Volta GPU Architecture via "
    "Microbenchmarking', 2018 (assumed for the other GPUs)"
)
_LAUNCH = (
    "launch_overhead 4 us: ~3.8 us per short kernel launched back to back on a V100 in A. Gray, "
    "'Getting Started with CUDA Graphs', NVIDIA Technical Blog, 2019 (assumed for the other "
    "GPUs: launch cost is set by the driver and host)"
)


def _gpu(name: str, flops: float, flops_src: str, mem_Bps: float, mem_src: str) -> DeviceSpec:
    return DeviceSpec(
        name,
        flops,
        0.4,
        f"{flops_src}; {_EFF}; memory {mem_src}; {_MEM_EFF}; {_LAUNCH}",
        memory_bandwidth_Bps=mem_Bps,
        memory_efficiency=0.83,
        launch_overhead_s=4e-6,
    )


DEVICE_PRESETS: dict[str, DeviceSpec] = {
    spec.name: spec
    for spec in (
        _gpu(
            "P100",
            10.6e12,
            "NVIDIA Tesla P100 SXM2 datasheet: 10.6 TFLOPS FP32",
            732e9,
            "732 GB/s HBM2 (NVIDIA Tesla P100 datasheet)",
        ),
        _gpu(
            "V100",
            15.7e12,
            "NVIDIA Tesla V100 SXM2 datasheet: 15.7 TFLOPS FP32",
            900e9,
            "900 GB/s HBM2 (NVIDIA Tesla V100 datasheet)",
        ),
        _gpu(
            "A100",
            19.5e12,
            "NVIDIA A100 SXM4 datasheet: 19.5 TFLOPS FP32",
            1555e9,
            "1,555 GB/s HBM2 of the 40 GB A100 (NVIDIA A100 datasheet)",
        ),
        _gpu(
            "H100",
            67e12,
            "NVIDIA H100 SXM5 datasheet: 67 TFLOPS FP32",
            3.35e12,
            "3.35 TB/s HBM3 of the H100 SXM (NVIDIA H100 datasheet)",
        ),
        DeviceSpec(
            "cpu",
            160e9,
            0.3,
            "generic 2-core x86 CPU at 2.5 GHz with AVX2 FMA: 2 cores x 2.5e9 x 32 FP32 "
            "FLOP/cycle = 160 GFLOPS (assumption); efficiency 0.3 (assumption); memory: "
            "dual-channel DDR4-2666 = 2 x 8 B x 2666 MT/s = 42.7 GB/s (JEDEC JESD79-4 data "
            "rate), memory_efficiency 0.25 and launch_overhead 10 us per PyTorch op on 2 cores "
            "(assumptions of the order `vgcsim calibrate --codec --device-preset cpu` "
            "measures, see docs/models.md)",
            memory_bandwidth_Bps=42.7e9,
            memory_efficiency=0.25,
            launch_overhead_s=10e-6,
        ),
    )
}

_DEFAULT_DEVICE = "V100"


def _star(link_name: str) -> ClusterSpec:
    link = LINK_PRESETS[link_name]
    return ClusterSpec(
        name=link_name,
        topology={"kind": "star"},
        link=link,
        intra_link=None,
        gpus_per_node=1,
        device=DEVICE_PRESETS[_DEFAULT_DEVICE],
        compute="model",
        compute_scale=1.0,
        source=f"non-blocking star: one {link_name} NIC per rank into one switch",
    )


def _hier(name: str, inter: str, intra: str, gpus: int, device: str) -> ClusterSpec:
    return ClusterSpec(
        name=name,
        topology={"kind": "hierarchical"},
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


def get_link(name: str) -> LinkSpec:
    """Look up a link preset by name (UnknownNameError lists the valid names)."""
    try:
        return LINK_PRESETS[name]
    except KeyError:
        raise unknown_name("link preset", name, LINK_PRESETS) from None


def get_device(name: str) -> DeviceSpec:
    """Look up a device preset by name (UnknownNameError lists the valid names)."""
    try:
        return DEVICE_PRESETS[name]
    except KeyError:
        raise unknown_name("device preset", name, DEVICE_PRESETS) from None


# --------------------------------------------------------------------------------------------
# dict <-> spec
# --------------------------------------------------------------------------------------------


def _check_keys(where: str, d: Mapping[str, Any], valid: tuple[str, ...]) -> None:
    for key in d:
        if key not in valid:
            raise ConfigError(
                f"unknown key {where + '.' + key if where else key!r} in cluster spec; "
                f"valid keys here: {', '.join(valid)}"
            )


def _one_of(where: str, d: Mapping[str, Any], a: str, b: str) -> Any:
    if a in d and b in d:
        raise ConfigError(f"{where}: give either {a!r} or {b!r}, not both")
    return d.get(a, d.get(b))


_LINK_KEYS = (
    "preset",
    "name",
    "bandwidth",
    "bandwidth_Bps",
    "latency",
    "latency_s",
    "gamma_s_per_byte",
    "allgatherv_host_s_per_byte",
    "allgatherv_host_s_per_byte_table",
    "allgatherv_host_padded_share",
    "call_overhead",
    "call_overhead_s",
    "burst",
    "burst_bytes",
    "segments",
    "efficiency",
    "framing",
    "source",
)


def _number_key(where: str, key: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(f"{where}.{key}: expected a number, got {value!r}")
    return float(value)


def _given(d: Mapping[str, Any], *keys: str) -> str:
    """The spelling of a field the table used (the first of ``keys``, where none is given)."""
    return next((k for k in keys if k in d), keys[0])


def _quantity(where: str, key: str, parse: Any, value: Any) -> float:
    """``parse(value)``; its error names the field (``link.bandwidth: '-1Gbps' must be ...``)."""
    try:
        return parse(value)
    except ConfigError as exc:
        rule = str(exc).split(": ", 1)[-1]
        raise type(exc)(f"{where}.{key}: {rule}") from None


def _field_ranges(where: str, d: Mapping[str, Any], values: Mapping[tuple[str, ...], Any]) -> None:
    """Check each value against :data:`RANGES` under the name the table gave it (the first
    spelling is the ``RANGES`` key): ``link.latency_s must be a finite number in [0, 1]``."""
    for keys, value in values.items():
        if value is not None:
            _check_range(where, keys[0], value, shown=f"{where}.{_given(d, *keys)}")


def _preset_or_table(
    where: str,
    value: Any,
    spec_type: type,
    lookup: Any,
    keys: tuple[str, ...],
    what: str,
    inherited: Any = None,
) -> tuple[Any, Mapping[str, Any], Any]:
    """``(spec, {}, None)`` for a preset name or a spec; ``(None, table, base)`` for a table
    (its keys checked), where ``base`` is its ``preset``, else ``inherited`` (the spec of the
    cluster's ``base`` preset, whose fields the table overrides one by one), else None."""
    if isinstance(value, str):
        return lookup(value), {}, None
    if isinstance(value, spec_type):
        return value, {}, None
    if not isinstance(value, Mapping):
        raise ConfigError(f"{where}: expected a {what} preset name or a table, got {value!r:.80}")
    _check_keys(where, value, keys)
    preset = value.get("preset")
    if preset is not None and not isinstance(preset, str):
        raise ConfigError(f"{where}.preset: expected a {what} preset name, got {preset!r:.80}")
    return None, value, (lookup(preset) if preset is not None else inherited)


def _link_from(where: str, value: Any, inherited: LinkSpec | None = None) -> LinkSpec:
    spec, value, base = _preset_or_table(
        where, value, LinkSpec, get_link, _LINK_KEYS, "link", inherited
    )
    if spec is not None:
        return spec
    bw = _one_of(where, value, "bandwidth", "bandwidth_Bps")
    lat = _one_of(where, value, "latency", "latency_s")
    if base is None and (bw is None or lat is None):
        lacking = " and ".join(
            repr(k) for k, v in (("bandwidth", bw), ("latency", lat)) if v is None
        )
        raise ConfigError(
            f"{where}: no {lacking}: give it, or 'preset' (a link preset the table overrides), "
            "or a cluster 'base'"
        )
    gamma = _number_key(
        where,
        "gamma_s_per_byte",
        value.get("gamma_s_per_byte", base.gamma_s_per_byte if base else 0.0),
    )
    host = _number_key(
        where,
        "allgatherv_host_s_per_byte",
        value.get("allgatherv_host_s_per_byte", base.allgatherv_host_s_per_byte if base else 0.0),
    )
    host_table = value.get(
        "allgatherv_host_s_per_byte_table",
        base.allgatherv_host_s_per_byte_table if base else (),
    )
    share = _number_key(
        where,
        "allgatherv_host_padded_share",
        value.get(
            "allgatherv_host_padded_share",
            base.allgatherv_host_padded_share if base else DEFAULT_HOST_PADDED_SHARE,
        ),
    )
    overheads = {}
    for key in ("call_overhead",):
        given = _one_of(where, value, key, f"{key}_s")
        overheads[f"{key}_s"] = (
            parse_time_s(given) if given is not None else getattr(base, f"{key}_s", 0.0)
        )
    given = _one_of(where, value, "burst", "burst_bytes")
    burst = (
        _quantity(where, _given(value, "burst", "burst_bytes"), parse_size_bytes, given)
        if given is not None
        else getattr(base, "burst_bytes", 0.0)
    )
    framing = _one_of(where, value, "efficiency", "framing")
    if "framing" in value:
        if not isinstance(framing, str):
            raise ConfigError(f"{where}.framing: expected a framing name, got {framing!r}")
        try:
            eff = get_framing(framing).efficiency
        except ConfigError as exc:
            raise type(exc)(f"{where}.framing: {exc}") from None
    elif "efficiency" in value:
        eff = _number_key(where, "efficiency", framing)
        if not (math.isfinite(eff) and 0 < eff <= 1):
            raise ConfigError(
                f"{where}.efficiency: payload bytes per wire byte, must be in (0, 1], got {eff!r}"
            )
    else:
        eff = base.efficiency if base else 1.0
    name = value.get("name", base.name if base else where)
    changed = (
        bw is not None
        or lat is not None
        or "gamma_s_per_byte" in value
        or "allgatherv_host_s_per_byte" in value
        or "allgatherv_host_s_per_byte_table" in value
        or "allgatherv_host_padded_share" in value
        or any(k in value for k in ("call_overhead", "call_overhead_s"))
        or any(k in value for k in ("burst", "burst_bytes"))
        or "segments" in value
        or "efficiency" in value
        or "framing" in value
    )
    bandwidth = (
        _quantity(where, _given(value, "bandwidth", "bandwidth_Bps"), parse_bandwidth_Bps, bw)
        if bw is not None
        else base.bandwidth_Bps
    )
    latency = (
        _quantity(where, _given(value, "latency", "latency_s"), parse_time_s, lat)
        if lat is not None
        else base.latency_s
    )
    _field_ranges(
        where,
        value,
        {
            ("bandwidth_Bps", "bandwidth"): bandwidth,
            ("latency_s", "latency"): latency,
            ("gamma_s_per_byte",): gamma,
            ("allgatherv_host_s_per_byte",): host,
            ("allgatherv_host_padded_share",): share,
            ("burst_bytes", "burst"): burst,
        },
    )
    try:
        return LinkSpec(
            name=str(name),
            bandwidth_Bps=bandwidth,
            latency_s=latency,
            gamma_s_per_byte=gamma,
            source=str(value.get("source", base.source if base and not changed else "user")),
            efficiency=eff,
            allgatherv_host_s_per_byte=host,
            allgatherv_host_s_per_byte_table=host_table,
            allgatherv_host_padded_share=share,
            segments=value.get("segments", base.segments if base else ()),
            burst_bytes=burst,
            **overheads,
        )
    except ConfigError as exc:
        raise ConfigError(f"{where}: {exc}") from None


_DEVICE_KEYS = (
    "preset",
    "name",
    "peak_flops",
    "efficiency",
    "memory_bandwidth",
    "memory_bandwidth_Bps",
    "memory_efficiency",
    "launch_overhead",
    "launch_overhead_s",
    "source",
)


def _device_from(where: str, value: Any, inherited: DeviceSpec | None = None) -> DeviceSpec:
    spec, value, base = _preset_or_table(
        where, value, DeviceSpec, get_device, _DEVICE_KEYS, "device", inherited
    )
    if spec is not None:
        return spec
    if base is None and "peak_flops" not in value:
        raise ConfigError(
            f"{where}: no 'peak_flops': give it, or 'preset' (a device preset the table "
            "overrides), or a cluster 'base'"
        )
    eff = _number_key(
        where, "efficiency", value.get("efficiency", base.efficiency if base else 0.4)
    )
    mem_eff = _number_key(
        where,
        "memory_efficiency",
        value.get("memory_efficiency", base.memory_efficiency if base else 1.0),
    )
    peak = (
        _quantity(where, "peak_flops", parse_flops, value["peak_flops"])
        if "peak_flops" in value
        else base.peak_flops
    )
    mem = _one_of(where, value, "memory_bandwidth", "memory_bandwidth_Bps")
    launch = _one_of(where, value, "launch_overhead", "launch_overhead_s")
    changed = any(k in value for k in _DEVICE_KEYS if k not in ("preset", "name", "source"))
    mem_Bps = (
        _quantity(
            where,
            _given(value, "memory_bandwidth", "memory_bandwidth_Bps"),
            parse_bandwidth_Bps,
            mem,
        )
        if mem is not None
        else (base.memory_bandwidth_Bps if base else None)
    )
    launch_s = (
        _quantity(
            where, _given(value, "launch_overhead", "launch_overhead_s"), parse_time_s, launch
        )
        if launch is not None
        else (base.launch_overhead_s if base else None)
    )
    for key, fraction in (("efficiency", eff), ("memory_efficiency", mem_eff)):
        if not (math.isfinite(fraction) and 0 < fraction <= 1):
            raise ConfigError(
                f"{where}.{key}: a fraction of the peak, must be in (0, 1], got {fraction!r}"
            )
    _field_ranges(
        where,
        value,
        {
            ("peak_flops",): peak,
            ("memory_bandwidth_Bps", "memory_bandwidth"): mem_Bps,
            ("launch_overhead_s", "launch_overhead"): launch_s,
        },
    )
    try:
        return DeviceSpec(
            name=str(value.get("name", base.name if base else "custom")),
            peak_flops=peak,
            efficiency=eff,
            source=str(value.get("source", base.source if base and not changed else "user")),
            memory_bandwidth_Bps=mem_Bps,
            memory_efficiency=mem_eff,
            launch_overhead_s=launch_s,
        )
    except ConfigError as exc:
        raise ConfigError(f"{where}: {exc}") from None


_CLUSTER_KEYS = (
    "name",
    "base",
    "topology",
    "link",
    "intra_link",
    "gpus_per_node",
    "device",
    "compute",
    "compute_scale",
    "source",
    "ranks_per_host",
    "host_cores",
    "threads_per_rank",
)


def cluster_from_dict(d: Mapping[str, Any], *, default_name: str = "custom") -> ClusterSpec:
    """Build a :class:`ClusterSpec` from a dict (a parsed TOML file or :func:`cluster_to_dict`).

    Unknown keys, unknown preset names and malformed quantities raise ConfigError.
    """
    if not isinstance(d, Mapping):
        raise ConfigError(f"cluster spec must be a table, got {type(d).__name__}")
    _check_keys("", d, _CLUSTER_KEYS)
    if "base" in d and not isinstance(d["base"], str):
        raise ConfigError(f"base: expected a cluster preset name, got {d['base']!r:.80}")
    base = get_cluster(d["base"]) if "base" in d else None
    topology = d.get("topology", base.topology if base else {"kind": "star"})
    if not isinstance(topology, Mapping):
        raise ConfigError(f"topology: expected a table with 'kind', got {topology!r}")
    # a table overrides the fields it names of the base's link, intra link and device
    if "link" in d:
        link = _link_from("link", d["link"], base.link if base else None)
    elif base is not None:
        link = base.link
    else:
        raise ConfigError("cluster spec needs 'link' (a preset name or a table) or 'base'")
    intra = d.get("intra_link", base.intra_link if base else None)
    intra_link = (
        None
        if intra is None
        else _link_from("intra_link", intra, base.intra_link if base else None)
    )
    device = _device_from(
        "device",
        d.get("device", base.device if base else _DEFAULT_DEVICE),
        base.device if base else None,
    )
    gpn = d.get("gpus_per_node", base.gpus_per_node if base else 1)
    if isinstance(gpn, bool) or not isinstance(gpn, int):
        raise ConfigError(f"gpus_per_node: expected an integer, got {gpn!r}")
    scale = d.get("compute_scale", base.compute_scale if base else 1.0)
    if isinstance(scale, bool) or not isinstance(scale, (int, float)):
        raise ConfigError(f"compute_scale: expected a number, got {scale!r}")
    compute = d.get("compute", base.compute if base else "model")
    if not isinstance(compute, str):
        raise ConfigError(f"compute: expected 'model' or 'trace', got {compute!r}")
    hosts = {}
    for key, default in (("ranks_per_host", 1), ("host_cores", 0), ("threads_per_rank", 1)):
        value = d.get(key, getattr(base, key) if base else default)
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{key}: expected an integer, got {value!r:.80}")
        hosts[key] = value
    return ClusterSpec(
        name=str(d.get("name", base.name if base else default_name)),
        topology=dict(topology),
        link=link,
        intra_link=intra_link,
        gpus_per_node=gpn,
        device=device,
        compute=compute,
        compute_scale=float(scale),
        source=str(d.get("source", base.source if base else "user")),
        **hosts,
    )


def cluster_to_dict(spec: ClusterSpec) -> dict[str, Any]:
    """A JSON/TOML-able dict of ``spec`` that :func:`cluster_from_dict` reads back unchanged."""
    return dataclasses.asdict(spec)


def get_cluster(name: str) -> ClusterSpec:
    """Look up a cluster preset by name (UnknownNameError lists the valid names)."""
    try:
        return CLUSTER_PRESETS[name]
    except KeyError:
        raise unknown_name("cluster preset", name, CLUSTER_PRESETS) from None


def load_cluster(name_or_path: str | Path) -> ClusterSpec:
    """A cluster preset name (``"10GbE"``) or the path of a TOML cluster file."""
    text = str(name_or_path)
    if text in CLUSTER_PRESETS:
        return CLUSTER_PRESETS[text]
    path = Path(text)
    if not path.is_file():
        if path.suffix.lower() == ".toml" or "/" in text:
            raise ConfigError(f"cluster file not found: {path}")
        raise unknown_name("cluster (preset name or TOML file)", text, CLUSTER_PRESETS)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"cluster file {path} is not valid TOML: {exc}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read cluster file {path}: {exc}") from None
    except RecursionError:
        raise ConfigError(f"cluster file {path} nests tables too deeply to read") from None
    try:
        return cluster_from_dict(data, default_name=path.stem)
    except ConfigError as exc:  # name the file; keep the error's class (UnknownNameError, ...)
        raise type(exc)(f"cluster file {path}: {exc}") from None
