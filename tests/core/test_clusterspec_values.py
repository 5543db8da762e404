"""Cluster presets and wire-only clusters, pinned field by field against hand values.

A star preset is one NIC of its link per rank into one switch, one rank per node, on the
default V100, compute modelled at scale 1; a hierarchical (DGX-style) preset puts ``gpus``
devices on an intra-node link behind one NIC per node. The link numbers below are worked out
from the preset table (``presets.py``: nominal data rate / 8, the latency, the framing's
payload bytes per wire byte; the tables of tests/core/test_presets_values.py), not read back
from the code. The preset builders are called
here at test time as well as looked up, so that each field they set is checked where it is
made. ``wire_link`` / ``wire_cluster`` keep a link's bandwidth alone: α, c, γ, δ (its table
and fixed part) and the size segments go to zero, every link of the cluster so treated.
"""

from __future__ import annotations

import dataclasses

import pytest

from tests.core.test_presets_values import DEVICES, LINKS
from vgcsim.core import clusterspec
from vgcsim.core.clusterspec import get_cluster, wire_cluster, wire_link
from vgcsim.core.collectives import message_time_s
from vgcsim.core.specs import LinkSpec
from vgcsim.core.topologies import HierarchicalSpec, StarSpec


def _assert_link(link, name):
    bandwidth, latency, efficiency = LINKS[name]
    assert isinstance(link, LinkSpec)
    assert link.name == name
    assert link.bandwidth_Bps == pytest.approx(bandwidth, rel=1e-12)
    assert link.latency_s == pytest.approx(latency, rel=1e-12)
    assert link.efficiency == pytest.approx(efficiency, rel=1e-12)


def _assert_device(device, name):
    peak, efficiency, memory = DEVICES[name][:3]
    assert device.name == name
    assert device.peak_flops == pytest.approx(peak, rel=1e-12)
    assert device.efficiency == efficiency
    assert device.memory_bandwidth_Bps == pytest.approx(memory, rel=1e-12)


STARS = ["1GbE", "10GbE", "100GbE", "IB-EDR"]


@pytest.mark.parametrize("made", ["built now", "looked up"])
@pytest.mark.parametrize("name", STARS)
def test_a_star_preset_is_one_nic_per_rank_on_the_default_device(name, made):
    spec = clusterspec._star(name) if made == "built now" else get_cluster(name)
    assert spec.name == name
    assert isinstance(spec.topology, StarSpec) and spec.topology.table() == {"kind": "star"}
    _assert_link(spec.link, name)
    assert spec.intra_link is None
    assert spec.gpus_per_node == 1
    _assert_device(spec.device, "V100")
    assert spec.compute == "model"
    assert spec.compute_scale == 1.0
    assert spec.source == f"non-blocking star: one {name} NIC per rank into one switch"
    # one rank per host, each with cores of its own
    assert (spec.ranks_per_host, spec.host_cores, spec.threads_per_rank) == (1, 0, 1)


HIERS = [
    ("dgx1-IB-EDR", "IB-EDR", "NVLink2", 8, "V100"),
    ("dgxa100-IB-HDR", "IB-HDR", "NVLink3", 8, "A100"),
    ("4xP100-IB-FDR56", "IB-FDR56", "PCIe3", 4, "P100"),
]


@pytest.mark.parametrize("made", ["built now", "looked up"])
@pytest.mark.parametrize(("name", "inter", "intra", "gpus", "device"), HIERS)
def test_a_dgx_style_preset_puts_its_gpus_on_the_intra_link_behind_one_nic(
    name, inter, intra, gpus, device, made
):
    if made == "built now":
        spec = clusterspec._hier(name, inter, intra, gpus, device)
    else:
        spec = get_cluster(name)
    assert spec.name == name
    assert isinstance(spec.topology, HierarchicalSpec)
    assert spec.topology.table() == {"kind": "hierarchical"}
    _assert_link(spec.link, inter)
    _assert_link(spec.intra_link, intra)
    assert spec.gpus_per_node == gpus
    _assert_device(spec.device, device)
    assert spec.compute == "model"
    assert spec.compute_scale == 1.0
    assert spec.source == (
        f"{gpus} x {device} per node on {intra}, one {inter} NIC per node "
        "(DGX-style node; assumption)"
    )


def test_the_dgx1_source_reads_as_written():
    spec = clusterspec._hier("dgx1-IB-EDR", "IB-EDR", "NVLink2", 8, "V100")
    assert spec.source == (
        "8 x V100 per node on NVLink2, one IB-EDR NIC per node (DGX-style node; assumption)"
    )
    assert get_cluster("dgx1-IB-EDR").source == spec.source


def _costly_link(name: str) -> LinkSpec:
    return LinkSpec(
        name=name,
        bandwidth_Bps=2e9,
        latency_s=20e-6,
        gamma_s_per_byte=1e-10,
        allgatherv_host_s_per_byte=2e-10,
        allgatherv_host_s_per_byte_table=((1.0, 3e-10), (1e6, 4e-10)),
        allgatherv_host_padded_share=0.25,
        allgatherv_host_s=1e-4,
        call_overhead_s=5e-5,
        comm_cpu_s_per_byte=1e-10,
        segments=((0.0, -1e-3, 5e8), (1e6, 0.0, 2e9)),
        burst_bytes=1e6,
        efficiency=0.5,
        source="test",
    )


def test_a_wire_link_keeps_its_bandwidth_alone():
    wired = wire_link(_costly_link("eth"))
    # every start-up and host cost is zero, and no size segment is left
    assert wired.latency_s == 0.0
    assert wired.gamma_s_per_byte == 0.0
    assert wired.allgatherv_host_s_per_byte == 0.0
    assert wired.allgatherv_host_s_per_byte_table == ()
    assert wired.allgatherv_host_s == 0.0
    assert wired.call_overhead_s == 0.0
    assert wired.segments == ()
    # the rate and what is not a cost of the call stay
    assert wired.name == "eth"
    assert wired.bandwidth_Bps == 2e9 and wired.efficiency == 0.5
    assert wired.payload_Bps == 1e9  # 2e9 B/s × 0.5
    assert wired.allgatherv_host_padded_share == 0.25
    assert wired.comm_cpu_s_per_byte == 1e-10
    assert wired.burst_bytes == 1e6


def test_a_message_on_a_wire_link_takes_its_bytes_time_at_the_payload_rate():
    wired = wire_link(_costly_link("eth"))
    # the source's bucket refills α × payload rate = 20 µs × 1e9 B/s = 20 kB per start-up,
    # which the stripped link (α = 0) keeps: those bytes leave at once
    assert wired.start_refill_bytes == pytest.approx(20e3, rel=1e-12)
    # 4 MB at 2e9 B/s × 0.5 efficiency = 1e9 payload B/s, less the refilled 20 kB: 3.98 ms
    assert float(message_time_s(wired, 4e6)) == pytest.approx(3.98e-3, rel=1e-12)
    assert float(message_time_s(wired, 1000.0)) == 0.0  # within the refill
    # without a bucket: the bytes' whole time
    bare = wire_link(dataclasses.replace(_costly_link("eth"), burst_bytes=0.0))
    assert float(message_time_s(bare, 4e6)) == pytest.approx(4e-3, rel=1e-12)
    assert float(message_time_s(bare, 1000.0)) == pytest.approx(1e-6, rel=1e-12)


def test_a_wire_cluster_wires_its_intra_node_link_too():
    spec = wire_cluster(get_cluster("dgx1-IB-EDR"))
    assert isinstance(spec.topology, HierarchicalSpec)
    assert spec.link.name == "IB-EDR" and spec.link.latency_s == 0.0
    assert spec.link.bandwidth_Bps == pytest.approx(100e9 / 8, rel=1e-12)
    assert spec.intra_link is not None
    assert spec.intra_link.name == "NVLink2"
    assert spec.intra_link.latency_s == 0.0
    assert spec.intra_link.bandwidth_Bps == pytest.approx(150e9, rel=1e-12)
    assert spec.intra_link.efficiency == 1.0
    assert (spec.name, spec.gpus_per_node, spec.device.name) == ("dgx1-IB-EDR", 8, "V100")


def test_a_wire_cluster_zeroes_every_cost_of_the_intra_link():
    base = get_cluster("dgx1-IB-EDR")
    spec = dataclasses.replace(base, link=_costly_link("nic"), intra_link=_costly_link("bus"))
    wired = wire_cluster(spec)
    for link, name in ((wired.link, "nic"), (wired.intra_link, "bus")):
        assert link.name == name
        assert link.latency_s == 0.0
        assert link.gamma_s_per_byte == 0.0
        assert link.allgatherv_host_s_per_byte == 0.0
        assert link.allgatherv_host_s_per_byte_table == ()
        assert link.allgatherv_host_s == 0.0
        assert link.call_overhead_s == 0.0
        assert link.segments == ()
        assert link.bandwidth_Bps == 2e9 and link.efficiency == 0.5


def test_a_wire_star_cluster_has_no_intra_node_link():
    spec = wire_cluster(get_cluster("10GbE"))
    assert spec.intra_link is None
    assert spec.link.latency_s == 0.0
    assert spec.link.bandwidth_Bps == pytest.approx(10e9 / 8, rel=1e-12)


def test_shared_link_by_hand():
    """σ = 1 ns per byte, two ranks per core (f = 2): a rank moves 1 / (2 · 2 · 1e-9) = 2.5e8
    payload bytes/s each way, so a 10 Gb/s link at efficiency 0.5 (5e8 payload bytes/s)
    drops to 2.5e8 / 0.5 = 5e8 wire bytes/s, and each segment's rate is capped at 2.5e8; the
    CPU-time terms double, α stays."""
    link = LinkSpec(
        name="l",
        bandwidth_Bps=1.25e9,
        latency_s=1e-5,
        efficiency=0.5,
        gamma_s_per_byte=1e-10,
        allgatherv_host_s_per_byte=2e-10,
        allgatherv_host_s_per_byte_table=((1000, 1e-9),),
        allgatherv_host_s=3e-6,
        call_overhead_s=4e-6,
        comm_cpu_s_per_byte=1e-9,
        segments=((0.0, 0.0, 1e9), (16384.0, -1e-5, 1e8)),
    )
    got = clusterspec.shared_link(link, 2.0)
    assert got.bandwidth_Bps == pytest.approx(5e8, rel=1e-12)
    assert [s[:2] for s in got.segments] == [(0.0, 0.0), (16384.0, -1e-5)]
    assert [s[2] for s in got.segments] == pytest.approx([2.5e8, 1e8], rel=1e-12)
    assert got.latency_s == 1e-5
    assert got.gamma_s_per_byte == pytest.approx(2e-10, rel=1e-12)
    assert got.allgatherv_host_s_per_byte == pytest.approx(4e-10, rel=1e-12)
    assert got.allgatherv_host_s_per_byte_table == ((1000, 2e-9),)
    assert got.allgatherv_host_s == pytest.approx(6e-6, rel=1e-12)
    assert got.call_overhead_s == pytest.approx(8e-6, rel=1e-12)
    # without σ only the CPU terms stretch
    plain = dataclasses.replace(link, comm_cpu_s_per_byte=0.0)
    stretched = clusterspec.shared_link(plain, 2.0)
    assert stretched.bandwidth_Bps == 1.25e9 and stretched.segments == link.segments
    assert clusterspec.shared_link(plain, 1.0) is plain
    # a share of 1 with σ still caps: 1 / (2 · 1e-9) = 5e8 payload bytes/s
    alone = clusterspec.shared_link(link, 1.0)
    assert alone.bandwidth_Bps == pytest.approx(1e9, rel=1e-12)
    assert [s[2] for s in alone.segments] == pytest.approx([5e8, 1e8], rel=1e-12)
