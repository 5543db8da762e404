"""Sourced presets: links and devices, looked up by name.

Preset values are nominal line rates from the cited standards and datasheets (bandwidth =
nominal data rate per direction after line coding); latencies are typical small-message MPI
figures, marked as assumptions in each ``source``. A cluster file names them (``base``,
``[link] preset``, ``device``, a graph topology's links); ``vgcsim clusters`` lists them. The
cluster presets built from them are in :mod:`vgcsim.core.clusterspec`; the link framings in
:mod:`vgcsim.core.specs`.
"""

from __future__ import annotations

import dataclasses

from vgcsim.core.errors import unknown_name
from vgcsim.core.specs import FRAMINGS, DeviceSpec, Framing, LinkSpec
from vgcsim.core.units import parse_bandwidth_Bps, parse_time_s

__all__ = [
    "DEFAULT_DEVICE",
    "DEVICE_PRESETS",
    "INTRA_NODE_LINKS",
    "LINK_PRESETS",
    "get_device",
    "get_link",
]


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

#: The device of a cluster whose file names none.
DEFAULT_DEVICE = "V100"


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
