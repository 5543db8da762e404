"""What a link and a device are: frozen specs whose fields say how a cluster file spells them.

A link is priced in the Hockney α-β(-γ) model (:class:`LinkSpec`); ``bandwidth_Bps`` is the
nominal line (data) rate and ``efficiency`` the payload bytes carried per wire byte by the
transport (framing, headers, preamble and inter-frame gap): the rate a large transfer
actually moves is ``bandwidth_Bps × efficiency`` (:data:`FRAMINGS` lists the sourced values;
a *measured* goodput, e.g. from ``vgcsim calibrate``, goes in with ``efficiency = 1``). A
:class:`DeviceSpec` is an accelerator's rates.

Numbers are SI (bytes/s, seconds, FLOP/s). Each field a cluster file may give declares how
(:func:`spelled`: the file's spellings, the unit parser, the accepted range, a fraction's
rule); the one loader, :func:`vgcsim.core.clusterfile.read_table`, reads every ``[link]``,
``[intra_link]`` and ``[device]`` table by it, and :data:`RANGES` collects the ranges. A new
link field is one line in :class:`LinkSpec`.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Mapping
from dataclasses import MISSING, dataclass, field, fields
from typing import Any

from vgcsim.core.errors import ConfigError, unknown_name
from vgcsim.core.units import (
    parse_bandwidth_Bps,
    parse_burst_bytes,
    parse_flops,
    parse_time_s,
)

__all__ = [
    "DEFAULT_HOST_PADDED_SHARE",
    "FRAMINGS",
    "RANGES",
    "DeviceSpec",
    "Framing",
    "LinkSpec",
    "Spelling",
    "check_range",
    "finite",
    "get_framing",
    "spelled",
    "spellings",
]

#: Share of vgcsim's allgatherv host cost paid per padded byte (the P·m_max bytes of the
#: gathered buffer) by default, the rest per real byte (Σ m_r): a link's
#: ``allgatherv_host_padded_share`` where its file does not give one (``vgcsim calibrate``
#: did not fit one; :func:`vgcsim.core.collectives.padded_host_time_s`).
DEFAULT_HOST_PADDED_SHARE = 0.5


def finite(value: Any) -> bool:
    """A real number (not a bool) that is finite."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


@dataclass(frozen=True)
class Spelling:
    """How a spec field is written in a cluster file's table (read by
    :func:`vgcsim.core.clusterfile.read_table`).

    ``unit``: the spelling with units (``"bandwidth"``), read with ``parse`` as is the field's
    own SI spelling (``bandwidth_Bps``); ``parse`` None: a plain number. ``range``: the
    accepted SI range (:data:`RANGES`). ``fraction``: a share in (0, 1], what it is of (for the
    message). ``by_name``: another key naming the value, and its lookup (``framing``).
    ``rows``: a list of numeric rows the spec checks itself. ``integer``: a whole number (a
    cluster's host fields). ``choices``: a string, one of these names. ``required``: a table without a
    preset or base must give it. ``loaded``: the value a table without a preset or base gets
    where the field has no default of its own (None: the field's default).
    """

    unit: str | None = None
    parse: Callable[[Any], float] | None = None
    range: tuple[float, float] | None = None
    fraction: str = ""
    by_name: tuple[str, Callable[[Any], float]] | None = None
    rows: bool = False
    integer: bool = False
    choices: tuple[str, ...] = ()
    required: bool = False
    loaded: Any = None

    def keys(self, name: str) -> tuple[str, ...]:
        """The file keys of the field ``name``, in the order the valid keys are listed."""
        own = (self.unit, name) if self.unit else (name,)
        return own + ((self.by_name[0],) if self.by_name else ())


def spelled(default: Any = MISSING, **spelling: Any) -> Any:
    """A dataclass field that a cluster file may give, spelled as :class:`Spelling` says."""
    return field(default=default, metadata={"file": Spelling(**spelling)})


@functools.cache
def spellings(spec_type: type) -> tuple[tuple[str, Spelling], ...]:
    """``(field name, spelling)`` of every field of ``spec_type`` a cluster file may give."""
    return tuple((f.name, f.metadata["file"]) for f in fields(spec_type) if "file" in f.metadata)


def check_range(
    owner: str,
    key: str,
    value: Any,
    *,
    shown: str | None = None,
    bounds: tuple[float, float] | None = None,
) -> None:
    """ConfigError unless ``value`` is a finite number within ``bounds`` (by default
    ``RANGES[key]``); the message names the field as ``shown``, by default ``owner: key``."""
    lo, hi = RANGES[key] if bounds is None else bounds
    if not (finite(value) and lo <= value <= hi):
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


def _framing_efficiency(name: Any) -> float:
    """The efficiency of the framing ``name`` (:data:`vgcsim.core.presets.FRAMINGS`)."""
    if not isinstance(name, str):
        raise ConfigError(f"expected a framing name, got {name!r}")
    return get_framing(name).efficiency


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
            or not all(finite(v) for v in point)
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
        check_range(f"{owner} {key}", "allgatherv_host_s_per_byte", per_byte)
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
        check_range(f"{owner} {key}", "bandwidth_Bps", bw)
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
    ``vgcsim calibrate`` fits it where it timed ``allgatherv_skewed``. ``allgatherv_host_s``
    (default 0) is the fixed host time of one such allgatherv beyond its two collective
    calls' costs (turning the gathered lengths into Python values, the future that cuts the
    gathered bytes into segments and hands them to the caller): it adds once per allgatherv
    to the host time δ prices (``allgatherv/padded`` and its simulator twin; not the DDP
    hook's bounded exchange, which does not run that code), stretches with host sharing as δ
    does, and ``vgcsim calibrate`` fits it from the small allgathervs.

    ``call_overhead_s`` (c) is the fixed software time a rank spends in one collective call
    (argument checks, buffer set-up, the backend's work queue and completion), paid once per
    call and rank, not per algorithm step (α is the per-step start-up). It is CPU time: on a
    host whose ranks share cores (:class:`ClusterSpec` ``host_cores``) it stretches by the
    sharing factor (:func:`host_share`), as γ and δ do. A point-to-point message does not pay
    it. Every collective formula adds ``c`` per call (``calls_per_collective``, the closed
    forms in docs/models.md); 0 for the presets.

    ``comm_cpu_s_per_byte`` (σ, default 0) is the host CPU time a rank spends per byte it
    sends and per byte it receives (the kernel's TCP stack, socket copies): where a
    collective's ranks send and receive at once, a rank moves at most 1 / (2·σ) bytes per
    second each way on a core of its own, and 1 / (2·f·σ) where f ranks' threads share
    each core (:func:`host_share`): the link's bandwidth, and each size segment's, is
    capped at that rate for collectives (:func:`shared_link`). On a fast link the CPU, not
    the wire, sets the rate once ranks share cores; ``vgcsim calibrate`` fits σ where the
    ranks it measured shared cores (``--host-cores``). A point-to-point message is priced
    on the link as it is.

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

    ``allgather_latency_s`` (default 0: ``latency_s``) is α of one step of an allgather-type
    collective, every ``allgatherv/*`` key (vgcsim's allgatherv is all_gather calls), where
    a backend's all_gather steps start up slower or faster than its allreduce's (gloo's ring
    allreduce keeps two segments in flight, its all_gather one message per step): the
    allgatherv keys are priced on the link with ``latency_s`` = this
    (:func:`vgcsim.core.clusterspec.gather_link`); ``vgcsim calibrate`` fits it from the
    allgather's small messages where it measured both.

    ``burst_bytes`` (b, default 0: no bucket) is the depth of a token bucket on every host
    link (Linux ``tc tbf``'s ``burst``; a cloud instance's network burst credit): tokens
    refill at the link's bandwidth while the host's link is idle and bytes covered by tokens
    leave at once. Within a collective, each step's start-up α refills ``min(b, α/β)``
    bytes, which the step's message sends at once (:func:`vgcsim.core.collectives.refill_bytes`,
    priced in :func:`~vgcsim.core.collectives.message_time_s`); the rest of the message
    waits for tokens at the link's rate. A synchronous step leaves the link idle for its
    local phases, so the exchange that follows starts with up to the rest of the bucket,
    ``min(b − min(b, α/β), bandwidth × idle seconds)`` more tokens, and is shorter by up to
    that many bytes' time (:func:`vgcsim.core.collectives.burst_credit_s`).
    """

    name: str
    bandwidth_Bps: float = spelled(
        unit="bandwidth", parse=parse_bandwidth_Bps, range=(1.0, 1e15), required=True
    )  # 1 B/s .. 1 PB/s
    # a start-up time above a second is a unit mistake
    latency_s: float = spelled(unit="latency", parse=parse_time_s, range=(0.0, 1.0), required=True)
    gamma_s_per_byte: float = spelled(0.0, range=(0.0, 1.0))
    allgatherv_host_s_per_byte: float = spelled(0.0, range=(0.0, 1.0))
    allgatherv_host_s_per_byte_table: tuple[tuple[float, float], ...] = spelled((), rows=True)
    allgatherv_host_padded_share: float = spelled(DEFAULT_HOST_PADDED_SHARE, range=(0.0, 1.0))
    # fixed host time of one allgatherv of vgcsim's implementation, beyond its two calls
    allgatherv_host_s: float = spelled(
        0.0, unit="allgatherv_host", parse=parse_time_s, range=(0.0, 1.0)
    )
    # software cost of one collective call (per rank)
    call_overhead_s: float = spelled(
        0.0, unit="call_overhead", parse=parse_time_s, range=(0.0, 1.0)
    )
    # α of one step of an allgather-type collective (the allgatherv keys) where it differs
    allgather_latency_s: float = spelled(
        0.0, unit="allgather_latency", parse=parse_time_s, range=(0.0, 1.0)
    )
    # host CPU per byte sent or received (σ): caps a collective's rate under core sharing
    comm_cpu_s_per_byte: float = spelled(0.0, range=(0.0, 1.0))
    segments: tuple[tuple[float, float, float], ...] = spelled((), rows=True)
    # token-bucket depth of a host link (tc tbf's burst)
    burst_bytes: float = spelled(0.0, unit="burst", parse=parse_burst_bytes, range=(0.0, 1e15))
    # A new field is one line here, e.g. ``x_s: float = spelled(0.0, unit="x",
    # parse=parse_time_s, range=(0.0, 1.0))``: the loader reads ``x``/``x_s`` from a [link]
    # table (inherited from its preset or base), checks it, and lists its range in RANGES.
    efficiency: float = spelled(
        1.0, fraction="payload bytes per wire byte", by_name=("framing", _framing_efficiency)
    )
    source: str = ""
    #: Not a file field: the bytes of each message a token bucket's start-up refill covers
    #: where ≥ 0 (:func:`vgcsim.core.collectives.refill_bytes`), kept by
    #: :func:`vgcsim.core.clusterspec.wire_link` from the link it strips of α; −1: the
    #: link's own, ``min(burst_bytes, α/β)``.
    start_refill_bytes: float = -1.0

    def __post_init__(self) -> None:
        for key, spelling in spellings(type(self)):
            if spelling.range is not None:
                check_range(f"link {self.name!r}", key, getattr(self, key), bounds=spelling.range)
        object.__setattr__(
            self,
            "allgatherv_host_s_per_byte_table",
            _host_table(f"link {self.name!r}", self.allgatherv_host_s_per_byte_table),
        )
        object.__setattr__(self, "segments", _segments(f"link {self.name!r}", self.segments))
        if not (finite(self.efficiency) and 0 < self.efficiency <= 1):
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
    peak_flops: float = spelled(parse=parse_flops, range=(1e6, 1e21), required=True)
    efficiency: float = spelled(fraction="a fraction of the peak", loaded=0.4)
    source: str = ""
    memory_bandwidth_Bps: float | None = spelled(
        None, unit="memory_bandwidth", parse=parse_bandwidth_Bps, range=(1.0, 1e15)
    )
    memory_efficiency: float = spelled(1.0, fraction="a fraction of the peak")
    launch_overhead_s: float | None = spelled(
        None, unit="launch_overhead", parse=parse_time_s, range=(0.0, 1.0)
    )

    def __post_init__(self) -> None:
        owner = f"device {self.name!r}"
        for key, spelling in spellings(type(self)):
            value = getattr(self, key)
            if spelling.fraction and not (finite(value) and 0 < value <= 1):
                raise ConfigError(f"{owner}: {key} must be in (0, 1], got {value!r}")
            if spelling.range is not None and value is not None:
                check_range(owner, key, value, bounds=spelling.range)

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


#: Accepted ranges, wide enough for any real hardware and narrow enough that no step time
#: overflows or divides by a subnormal: (lowest, highest) in SI units. A link's or device's
#: come from its fields (:func:`spelled`).
RANGES: dict[str, tuple[float, float]] = {
    **{
        key: spelling.range
        for spec_type in (LinkSpec, DeviceSpec)
        for key, spelling in spellings(spec_type)
        if spelling.range is not None
    },
    # a cluster's own fields (checked by ClusterSpec; its host fields add their ranges where
    # it is defined) and a leaf-spine's oversubscription
    "compute_scale": (1e-6, 1e6),
    "gpus_per_node": (1, 2**20),
    "oversubscription": (1e-6, 1e6),
}


def refill_bytes(link) -> float:
    """Bytes a token bucket on ``link`` (``burst_bytes`` b > 0) refills during one step's
    start-up: ``min(b, α / β)``, the link's rate over α, capped by the bucket's depth; 0
    without a bucket.

    A collective's ranks send step after step, each step's bytes after its start-up α (the
    neighbour's message, gloo's handshakes): the bucket refills at the link's rate while the
    step starts, so each message's first ``min(b, α/β)`` bytes leave at once however many
    steps the call has. A message longer than that waits for tokens at the link's rate: a
    stream of back-to-back messages cannot average faster than the bucket's rate, and a
    bucket no deeper than α's worth of bytes gives every message its whole depth.

    Source: the token-bucket filter (J. Turner, "New directions in communications", IEEE
    Communications Magazine 24(10), 1986; Linux ``tc-tbf(8)``: rate, burst), tokens
    accruing at the rate while the link idles."""
    if link.start_refill_bytes >= 0.0:  # a link stripped of α keeps its source's (wire_link)
        return float(link.start_refill_bytes)
    return start_refill_bytes(link.burst_bytes, link.latency_s, link.beta_s_per_byte)


def start_refill_bytes(burst_bytes: float, latency_s: float, beta_s_per_byte: float) -> float:
    """``min(b, α/β)``, the bytes a token bucket of ``burst_bytes`` b refills while a step
    starts up for ``latency_s`` α at ``beta_s_per_byte`` β (:func:`refill_bytes`, the rule
    the models price a link with and calibrate's fit prices its rows with); 0 without a
    bucket or a rate."""
    if burst_bytes <= 0.0 or beta_s_per_byte <= 0.0:
        return 0.0
    return min(float(burst_bytes), latency_s / beta_s_per_byte)
