"""Link and device presets: the numbers each one carries, worked out by hand from the cited
standards and datasheets, and the one line a misspelt preset name gets.

The preset tables are built once, when :mod:`vgcsim.core.presets` is imported, by two small
builders (``_link``: a line rate, a latency and the framing the preset's name carries;
``_gpu``: a datasheet GPU with the assumed efficiencies and launch cost). The builders are
called here with hand-picked figures too, so that what they do is checked where it runs,
not only through the tables they already built.
"""

from __future__ import annotations

import pytest

from vgcsim.core.errors import UnknownNameError
from vgcsim.core.presets import (
    DEVICE_PRESETS,
    LINK_PRESETS,
    _gpu,
    _link,
    get_device,
    get_link,
)

# payload bytes per wire byte, by hand from the header sizes in the framings' sources
TCP_MTU1500 = 1448 / 1538  # 1500 - 20 IPv4 - 20 TCP - 12 timestamps, per 1500 + 38 on the wire
IB_MTU4096 = 4096 / 4122  # 26 header bytes per 4096-byte packet
PCIE_MPS256 = 256 / 280  # 24 bytes per 256-byte TLP


def test_an_infiniband_link_is_its_line_rate_latency_and_rc_framing():
    spec = _link("IB-EDR", "100Gbps", "0.6us", "my figures")
    assert spec.name == "IB-EDR"
    assert spec.bandwidth_Bps == 12.5e9  # 100 Gb/s / 8
    assert spec.latency_s == pytest.approx(0.6e-6, rel=1e-12)
    assert spec.efficiency == pytest.approx(IB_MTU4096, rel=1e-15)
    assert spec.payload_Bps == pytest.approx(12.5e9 * 4096 / 4122, rel=1e-15)
    # the source keeps the caller's citation and adds the framing's own
    assert spec.source.startswith("my figures; efficiency ib-mtu4096: InfiniBand reliable ")
    assert "26 header bytes" in spec.source and spec.source.count("my figures") == 1


def test_an_ethernet_link_carries_tcp_with_the_default_mtu():
    spec = _link("10GbE", "10Gbps", "10us", "IEEE 802.3ae")
    assert spec.name == "10GbE"
    assert spec.bandwidth_Bps == 1.25e9
    assert spec.latency_s == pytest.approx(10e-6, rel=1e-12)
    assert spec.efficiency == pytest.approx(TCP_MTU1500, rel=1e-15)
    assert spec.source.startswith("IEEE 802.3ae; efficiency tcp-mtu1500: TCP/IPv4 over Ethernet")


def test_an_nvlink_is_not_derated():
    spec = _link("NVLink3", "300GB/s", "2us", "A100 datasheet")
    assert (spec.name, spec.bandwidth_Bps, spec.efficiency) == ("NVLink3", 300e9, 1.0)
    assert spec.latency_s == pytest.approx(2e-6, rel=1e-12)
    assert spec.source.startswith("A100 datasheet; efficiency none: no derating")


# name: (line rate in B/s, latency in s, payload bytes per wire byte)
LINKS = {
    "1GbE": (1e9 / 8, 50e-6, TCP_MTU1500),
    "10GbE": (10e9 / 8, 10e-6, TCP_MTU1500),
    "25GbE": (25e9 / 8, 5e-6, TCP_MTU1500),
    "40GbE": (40e9 / 8, 5e-6, TCP_MTU1500),
    "100GbE": (100e9 / 8, 3e-6, TCP_MTU1500),
    "IB-FDR": (54.54e9 / 8, 0.7e-6, IB_MTU4096),
    "IB-FDR56": (56e9 / 8, 0.7e-6, IB_MTU4096),
    "IB-EDR": (100e9 / 8, 0.6e-6, IB_MTU4096),
    "IB-HDR": (200e9 / 8, 0.6e-6, IB_MTU4096),
    "IB-NDR": (400e9 / 8, 0.6e-6, IB_MTU4096),
    "PCIe3": (15.75e9, 1e-6, PCIE_MPS256),
    "PCIe4": (31.5e9, 1e-6, PCIE_MPS256),
    "NVLink": (150e9, 2e-6, 1.0),
    "NVLink2": (150e9, 2e-6, 1.0),
    "NVLink3": (300e9, 2e-6, 1.0),
    "NVLink4": (450e9, 2e-6, 1.0),
}


@pytest.mark.parametrize("name", sorted(LINKS))
def test_each_link_preset_has_its_cited_rate_latency_and_framing(name):
    bandwidth_Bps, latency_s, efficiency = LINKS[name]
    spec = get_link(name)
    assert spec.name == name
    assert spec.bandwidth_Bps == pytest.approx(bandwidth_Bps, rel=1e-12)
    assert spec.latency_s == pytest.approx(latency_s, rel=1e-12)
    assert spec.efficiency == pytest.approx(efficiency, rel=1e-15)


def test_the_link_presets_are_exactly_the_listed_ones():
    assert sorted(LINK_PRESETS) == sorted(LINKS)
    assert get_link("NVLink").source.startswith("alias of NVLink2; NVLink 2.0 on V100")


def test_a_datasheet_gpu_gets_the_assumed_efficiencies_and_launch_cost():
    dev = _gpu("X1", 12e12, "X1 datasheet: 12 TFLOPS", 2e12, "2 TB/s HBM (X1 datasheet)")
    assert dev.name == "X1"
    assert dev.peak_flops == 12e12
    assert dev.efficiency == 0.4
    assert dev.memory_bandwidth_Bps == 2e12
    assert dev.memory_efficiency == 0.83
    assert dev.launch_overhead_s == 4e-6
    assert dev.sustained_memory_Bps == pytest.approx(1.66e12, rel=1e-15)  # 2e12 x 0.83
    # the source cites the datasheet figures first, then each assumption
    assert dev.source.startswith("X1 datasheet: 12 TFLOPS; efficiency 0.4: ")
    assert "; memory 2 TB/s HBM (X1 datasheet); memory_efficiency 0.83: " in dev.source
    assert "launch_overhead 4 us" in dev.source


# name: (peak FP32 FLOP/s, training efficiency, memory B/s, memory efficiency, launch s)
DEVICES = {
    "P100": (10.6e12, 0.4, 732e9, 0.83, 4e-6),
    "V100": (15.7e12, 0.4, 900e9, 0.83, 4e-6),
    "A100": (19.5e12, 0.4, 1555e9, 0.83, 4e-6),
    "H100": (67e12, 0.4, 3.35e12, 0.83, 4e-6),
    # 2 cores x 2.5 GHz x 32 FLOP/cycle; dual-channel DDR4-2666: 2 x 8 B x 2666 MT/s
    "cpu": (2 * 2.5e9 * 32, 0.3, 42.7e9, 0.25, 10e-6),
}


@pytest.mark.parametrize("name", sorted(DEVICES))
def test_each_device_preset_has_its_datasheet_figures(name):
    flops, eff, mem_Bps, mem_eff, launch_s = DEVICES[name]
    dev = get_device(name)
    assert dev.name == name
    assert dev.peak_flops == pytest.approx(flops, rel=1e-12)
    assert dev.efficiency == eff and dev.memory_efficiency == mem_eff
    assert dev.memory_bandwidth_Bps == pytest.approx(mem_Bps, rel=1e-12)
    assert dev.launch_overhead_s == pytest.approx(launch_s, rel=1e-12)
    assert sorted(DEVICE_PRESETS) == sorted(DEVICES)


def test_an_unknown_link_preset_is_one_line_listing_the_valid_names():
    with pytest.raises(UnknownNameError) as info:
        get_link("11GbE")
    assert str(info.value) == (
        "unknown link preset '11GbE'; valid: 100GbE, 10GbE, 1GbE, 25GbE, 40GbE, IB-EDR, "
        "IB-FDR, IB-FDR56, IB-HDR, IB-NDR, NVLink, NVLink2, NVLink3, NVLink4, PCIe3, PCIe4"
    )


def test_an_unknown_device_preset_is_one_line_listing_the_valid_names():
    with pytest.raises(UnknownNameError) as info:
        get_device("B200")
    assert str(info.value) == "unknown device preset 'B200'; valid: A100, H100, P100, V100, cpu"
