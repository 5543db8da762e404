"""What a cluster is: links, devices and topology, with sourced presets and TOML cluster files.

A :class:`ClusterSpec` is a frozen description (no behaviour) shared by the closed-form
models (``models``) and the discrete-event simulator (``simulator``): a topology dict whose
``kind`` the simulator interprets, the inter-node :class:`LinkSpec` (one NIC per rank in a
non-blocking fabric unless the topology says otherwise), an optional intra-node link with
``gpus_per_node`` ranks per node, a :class:`DeviceSpec`, and how compute time is obtained
(``"trace"``: measured seconds × ``compute_scale``; ``"model"``: FLOPs ÷ device rate).

Numbers are SI (bytes/s, seconds, FLOP/s); human strings are parsed with :mod:`traces.units`
when a cluster file is loaded. Preset values are nominal line rates from the cited
standards/datasheets; latencies are typical small-message MPI figures and are marked as
assumptions in each ``source``.

A cluster file (TOML) looks like::

    name = "my-10gbe"
    base = "10GbE"               # optional: start from a cluster preset
    compute = "model"            # "trace" (default) or "model"
    compute_scale = 1.0
    gpus_per_node = 4
    device = "V100"              # preset name, or a [device] table
    [topology]
    kind = "hierarchical"
    [link]                       # preset name string, or a table
    preset = "10GbE"             # optional base for the table
    bandwidth = "10Gbps"         # or bandwidth_Bps = 1.25e9
    latency = "10us"             # or latency_s = 1e-5
    gamma_s_per_byte = 0.0
    [intra_link]
    preset = "NVLink2"

Unknown keys anywhere are a :class:`~traces.errors.ConfigError` listing the valid ones.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from traces.errors import ConfigError, unknown_name
from traces.units import parse_bandwidth_Bps, parse_flops, parse_time_s

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10 only
    import tomli as tomllib

__all__ = [
    "CLUSTER_PRESETS",
    "COMPUTE_MODES",
    "DEVICE_PRESETS",
    "LINK_PRESETS",
    "ClusterSpec",
    "DeviceSpec",
    "LinkSpec",
    "cluster_from_dict",
    "cluster_to_dict",
    "get_device",
    "get_link",
    "load_cluster",
]

COMPUTE_MODES = ("trace", "model")


@dataclass(frozen=True)
class LinkSpec:
    """A point-to-point link in the Hockney α-β(-γ) model.

    ``bandwidth_Bps`` is bytes per second per direction (full duplex); ``latency_s`` is α,
    the per-message start-up time; ``gamma_s_per_byte`` is γ, the time to reduce one byte
    at the receiver (used by allreduce models).
    """

    name: str
    bandwidth_Bps: float
    latency_s: float
    gamma_s_per_byte: float = 0.0
    source: str = ""

    def __post_init__(self) -> None:
        if not (self.bandwidth_Bps > 0):
            raise ConfigError(f"link {self.name!r}: bandwidth must be positive")
        if not (self.latency_s >= 0) or not (self.gamma_s_per_byte >= 0):
            raise ConfigError(f"link {self.name!r}: latency and gamma must be non-negative")

    @property
    def beta_s_per_byte(self) -> float:
        """β = 1 / bandwidth: seconds to push one byte through the link."""
        return 1.0 / self.bandwidth_Bps


@dataclass(frozen=True)
class DeviceSpec:
    """An accelerator: nominal peak FLOP/s and the fraction of it training reaches."""

    name: str
    peak_flops: float
    efficiency: float
    source: str

    def __post_init__(self) -> None:
        if not (self.peak_flops > 0):
            raise ConfigError(f"device {self.name!r}: peak_flops must be positive")
        if not (0 < self.efficiency <= 1):
            raise ConfigError(f"device {self.name!r}: efficiency must be in (0, 1]")

    @property
    def effective_flops(self) -> float:
        """Sustained FLOP/s = peak × efficiency."""
        return self.peak_flops * self.efficiency


@dataclass(frozen=True)
class ClusterSpec:
    """A cluster: topology, links, ranks per node, device and compute-time source."""

    name: str
    topology: dict
    link: LinkSpec
    intra_link: LinkSpec | None
    gpus_per_node: int
    device: DeviceSpec
    compute: str = "trace"
    compute_scale: float = 1.0
    source: str = field(default="", compare=False)

    def __post_init__(self) -> None:
        kind = self.topology.get("kind") if isinstance(self.topology, Mapping) else None
        if not isinstance(kind, str) or not kind:
            raise ConfigError(f"cluster {self.name!r}: topology needs a 'kind' string")
        if self.compute not in COMPUTE_MODES:
            raise unknown_name("compute mode", self.compute, COMPUTE_MODES)
        if not (isinstance(self.gpus_per_node, int) and self.gpus_per_node >= 1):
            raise ConfigError(f"cluster {self.name!r}: gpus_per_node must be an integer >= 1")
        if not (self.compute_scale > 0):
            raise ConfigError(f"cluster {self.name!r}: compute_scale must be positive")

    def __hash__(self) -> int:
        # the topology dict is not hashable; hash the canonical JSON so specs can key caches
        return hash(json.dumps(cluster_to_dict(self), sort_keys=True, default=str))


# --------------------------------------------------------------------------------------------
# Presets. Bandwidth = nominal data rate per direction after line coding.
# --------------------------------------------------------------------------------------------

_ETH_LAT = "latency: typical MPI-over-TCP small-message latency (assumption)"
_IB_LAT = "latency: typical MPI small-message latency over InfiniBand verbs (assumption)"


def _link(name: str, bandwidth: str, latency: str, source: str) -> LinkSpec:
    return LinkSpec(
        name=name,
        bandwidth_Bps=parse_bandwidth_Bps(bandwidth),
        latency_s=parse_time_s(latency),
        source=source,
    )


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

DEVICE_PRESETS: dict[str, DeviceSpec] = {
    spec.name: spec
    for spec in (
        DeviceSpec(
            "P100", 10.6e12, 0.4, f"NVIDIA Tesla P100 SXM2 datasheet: 10.6 TFLOPS FP32; {_EFF}"
        ),
        DeviceSpec(
            "V100", 15.7e12, 0.4, f"NVIDIA Tesla V100 SXM2 datasheet: 15.7 TFLOPS FP32; {_EFF}"
        ),
        DeviceSpec("A100", 19.5e12, 0.4, f"NVIDIA A100 SXM4 datasheet: 19.5 TFLOPS FP32; {_EFF}"),
        DeviceSpec("H100", 67e12, 0.4, f"NVIDIA H100 SXM5 datasheet: 67 TFLOPS FP32; {_EFF}"),
        DeviceSpec(
            "cpu",
            160e9,
            0.3,
            "generic 2-core x86 CPU at 2.5 GHz with AVX2 FMA: 2 cores x 2.5e9 x 32 FP32 "
            "FLOP/cycle = 160 GFLOPS (assumption); efficiency 0.3 (assumption)",
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
        compute="trace",
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
        compute="trace",
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
    "source",
)


def _link_from(where: str, value: Any) -> LinkSpec:
    if isinstance(value, str):
        return get_link(value)
    if isinstance(value, LinkSpec):
        return value
    if not isinstance(value, Mapping):
        raise ConfigError(f"{where}: expected a link preset name or a table, got {value!r}")
    _check_keys(where, value, _LINK_KEYS)
    base = get_link(value["preset"]) if "preset" in value else None
    bw = _one_of(where, value, "bandwidth", "bandwidth_Bps")
    lat = _one_of(where, value, "latency", "latency_s")
    if base is None and (bw is None or lat is None):
        raise ConfigError(f"{where}: give 'preset' or both 'bandwidth' and 'latency'")
    gamma = value.get("gamma_s_per_byte", base.gamma_s_per_byte if base else 0.0)
    if isinstance(gamma, bool) or not isinstance(gamma, (int, float)):
        raise ConfigError(f"{where}.gamma_s_per_byte: expected a number, got {gamma!r}")
    name = value.get("name", base.name if base else where)
    changed = bw is not None or lat is not None or "gamma_s_per_byte" in value
    return LinkSpec(
        name=str(name),
        bandwidth_Bps=parse_bandwidth_Bps(bw) if bw is not None else base.bandwidth_Bps,
        latency_s=parse_time_s(lat) if lat is not None else base.latency_s,
        gamma_s_per_byte=float(gamma),
        source=str(value.get("source", base.source if base and not changed else "user")),
    )


_DEVICE_KEYS = ("preset", "name", "peak_flops", "efficiency", "source")


def _device_from(where: str, value: Any) -> DeviceSpec:
    if isinstance(value, str):
        return get_device(value)
    if isinstance(value, DeviceSpec):
        return value
    if not isinstance(value, Mapping):
        raise ConfigError(f"{where}: expected a device preset name or a table, got {value!r}")
    _check_keys(where, value, _DEVICE_KEYS)
    base = get_device(value["preset"]) if "preset" in value else None
    if base is None and "peak_flops" not in value:
        raise ConfigError(f"{where}: give 'preset' or 'peak_flops'")
    eff = value.get("efficiency", base.efficiency if base else 0.4)
    if isinstance(eff, bool) or not isinstance(eff, (int, float)):
        raise ConfigError(f"{where}.efficiency: expected a number, got {eff!r}")
    peak = parse_flops(value["peak_flops"]) if "peak_flops" in value else base.peak_flops
    changed = "peak_flops" in value or "efficiency" in value
    return DeviceSpec(
        name=str(value.get("name", base.name if base else "custom")),
        peak_flops=peak,
        efficiency=float(eff),
        source=str(value.get("source", base.source if base and not changed else "user")),
    )


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
)


def cluster_from_dict(d: Mapping[str, Any], *, default_name: str = "custom") -> ClusterSpec:
    """Build a :class:`ClusterSpec` from a dict (a parsed TOML file or :func:`cluster_to_dict`).

    Unknown keys, unknown preset names and malformed quantities raise ConfigError.
    """
    if not isinstance(d, Mapping):
        raise ConfigError(f"cluster spec must be a table, got {type(d).__name__}")
    _check_keys("", d, _CLUSTER_KEYS)
    base = get_cluster(d["base"]) if "base" in d else None
    topology = d.get("topology", base.topology if base else {"kind": "star"})
    if not isinstance(topology, Mapping):
        raise ConfigError(f"topology: expected a table with 'kind', got {topology!r}")
    if "link" in d:
        link = _link_from("link", d["link"])
    elif base is not None:
        link = base.link
    else:
        raise ConfigError("cluster spec needs 'link' (a preset name or a table) or 'base'")
    intra = d.get("intra_link", base.intra_link if base else None)
    intra_link = None if intra is None else _link_from("intra_link", intra)
    device = _device_from("device", d.get("device", base.device if base else _DEFAULT_DEVICE))
    gpn = d.get("gpus_per_node", base.gpus_per_node if base else 1)
    if isinstance(gpn, bool) or not isinstance(gpn, int):
        raise ConfigError(f"gpus_per_node: expected an integer, got {gpn!r}")
    scale = d.get("compute_scale", base.compute_scale if base else 1.0)
    if isinstance(scale, bool) or not isinstance(scale, (int, float)):
        raise ConfigError(f"compute_scale: expected a number, got {scale!r}")
    return ClusterSpec(
        name=str(d.get("name", base.name if base else default_name)),
        topology=dict(topology),
        link=link,
        intra_link=intra_link,
        gpus_per_node=gpn,
        device=device,
        compute=str(d.get("compute", base.compute if base else "trace")),
        compute_scale=float(scale),
        source=str(d.get("source", base.source if base else "user")),
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
    return cluster_from_dict(data, default_name=path.stem)
