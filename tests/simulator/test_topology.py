"""Topology specs → graphs: kinds, link parameters, routing, and clear errors for bad specs."""

from __future__ import annotations

import pytest
from simhelpers import BW, LAT, cluster

from vgcsim.core.cluster import LinkSpec
from vgcsim.core.errors import ConfigError, TopologyError, UnknownNameError
from vgcsim.simulator.topology import TOPOLOGIES, build_topology, parse_topology


def test_star_routes_cross_two_channels_full_duplex():
    topo = build_topology(cluster(), 4)
    assert topo.n_channels == 8  # 4 links x 2 directions
    r = topo.route(0, 3)
    assert len(r.channels) == 2
    assert r.latency_s == pytest.approx(LAT)
    assert r.bandwidth_Bps == BW
    back = topo.route(3, 0)
    assert set(back.channels).isdisjoint(r.channels)  # the other direction of each link


def test_leaf_spine_oversubscription_sets_uplink_bandwidth():
    spec = {"kind": "leaf_spine", "hosts_per_leaf": 4, "spines": 2, "oversubscription": 2.0}
    topo = build_topology(cluster(spec), 8)
    up = topo.channel_ids[("leaf0", "spine0")]
    assert topo.capacity_Bps[up] == pytest.approx(4 * BW / (2.0 * 2))
    r = topo.route(0, 5)  # leaf0 -> leaf1 through a spine: 4 hops
    assert len(r.channels) == 4
    names = [topo.channel_names[c] for c in r.channels]
    assert names[0] == "h0->leaf0" and names[-1] == "leaf1->h5"
    assert names[1].startswith("leaf0->spine") and names[2].endswith("->leaf1")
    # two hosts on one leaf stay below it: two hops, full host bandwidth
    same_leaf = topo.route(0, 1)
    assert [topo.channel_names[c] for c in same_leaf.channels] == ["h0->leaf0", "leaf0->h1"]
    assert same_leaf.bandwidth_Bps == BW


def test_leaf_spine_ecmp_is_deterministic_and_uses_several_spines():
    spec = {"kind": "leaf_spine", "hosts_per_leaf": 8, "spines": 4, "routing": "hash"}
    a = build_topology(cluster(spec), 16)
    b = build_topology(cluster(spec), 16)
    routes_a = [a.route(i, 8 + j).channels for i in range(8) for j in range(8)]
    routes_b = [b.route(i, 8 + j).channels for i in range(8) for j in range(8)]
    assert routes_a == routes_b
    spines = {a.channel_names[r[1]] for r in routes_a}
    assert len(spines) > 1


def test_spread_placement_deals_ranks_over_leaves():
    spec = {"kind": "leaf_spine", "hosts_per_leaf": 2, "placement": "spread"}
    topo = build_topology(cluster(spec), 4)
    assert len(topo.route(0, 1).channels) == 4  # neighbours in rank order sit on different leaves
    assert len(topo.route(0, 2).channels) == 2


def test_hierarchical_uses_intra_link_inside_a_node():
    intra = LinkSpec("nvlink", 100 * BW, 1e-6)
    topo = build_topology(cluster({"kind": "hierarchical"}, intra=intra, gpus_per_node=4), 8)
    inside = topo.route(0, 3)
    across = topo.route(0, 4)
    assert inside.bandwidth_Bps == 100 * BW and inside.latency_s == pytest.approx(1e-6)
    assert across.bandwidth_Bps == BW and across.latency_s == pytest.approx(1e-6 + LAT)


def test_ring_and_torus_hop_counts():
    ring = build_topology(cluster({"kind": "ring"}), 8)
    assert len(ring.route(0, 4).channels) == 4
    assert len(ring.route(0, 7).channels) == 1
    torus = build_topology(cluster({"kind": "torus2d", "rows": 4}), 16)
    assert len(torus.route(0, 15).channels) == 2  # wrap-around in both dimensions
    assert len(torus.route(0, 10).channels) == 4


def test_directly_cabled_hosts_pay_the_whole_link_latency_on_every_hop():
    # ring and torus2d have no switch: each cable is a host-to-host link of latency α, so a
    # route of h hops starts up in h·α (a star's host -> switch -> host is α in all)
    ring = build_topology(cluster({"kind": "ring"}), 8)
    for dst, hops in ((1, 1), (7, 1), (3, 3), (4, 4), (5, 3)):
        assert ring.route(0, dst).latency_s == pytest.approx(hops * LAT, rel=1e-12)
    assert ring.latency_s.tolist() == [LAT] * ring.n_channels
    two = build_topology(cluster({"kind": "ring"}), 2)  # one cable between the two hosts
    assert two.n_channels == 2 and two.route(1, 0).latency_s == LAT
    torus = build_topology(cluster({"kind": "torus2d", "rows": 4}), 16)
    assert torus.route(0, 15).latency_s == pytest.approx(2 * LAT, rel=1e-12)
    assert torus.route(0, 10).latency_s == pytest.approx(4 * LAT, rel=1e-12)


def test_graph_from_toml_file(tmp_path):
    f = tmp_path / "g.toml"
    f.write_text(
        'hosts = ["a", "b", "c"]\n'
        '[[links]]\na = "a"\nb = "sw"\nbandwidth = "10Gbps"\nlatency = "1us"\n'
        '[[links]]\na = "b"\nb = "sw"\npreset = "10GbE"\n'
        '[[links]]\na = "c"\nb = "sw"\nbandwidth = "1Gbps"\nlatency = "1us"\n'
    )
    topo = build_topology(cluster({"kind": "graph", "file": str(f)}), 3)
    assert topo.route(0, 2).bandwidth_Bps == pytest.approx(1.25e8)
    assert topo.route(0, 1).latency_s == pytest.approx(1e-6 + 10e-6)


def test_registry_lists_all_kinds():
    assert set(TOPOLOGIES) == {"star", "leaf_spine", "hierarchical", "ring", "torus2d", "graph"}


@pytest.mark.parametrize(
    ("topology", "error", "match"),
    [
        ({"kind": "butterfly"}, UnknownNameError, "valid: graph, hierarchical"),
        ({"kind": "star", "radix": 4}, ConfigError, "unknown key 'radix'.*valid keys: kind"),
        ({"kind": "leaf_spine", "spines": 0}, ConfigError, "spines"),
        ({"kind": "leaf_spine", "placement": "diagonal"}, UnknownNameError, "packed, spread"),
        (
            {
                "kind": "graph",
                "hosts": ["a", "b"],
                "links": [{"a": "a", "b": "x", "preset": "10GbE"}],
            },
            TopologyError,
            "disconnected",
        ),
        (
            {
                "kind": "graph",
                "hosts": ["a", "b"],
                "links": [{"a": "a", "b": "b", "bandwidth": 0, "latency": 0}],
            },
            ConfigError,
            "bandwidth.*positive",
        ),
        (
            {
                "kind": "graph",
                "hosts": ["a", "b"],
                "links": [{"a": "a", "b": "b", "preset": "99GbE"}],
            },
            UnknownNameError,
            "link preset",
        ),
        (
            {
                "kind": "graph",
                "hosts": ["a"],
                "links": [{"a": "a", "b": "b", "preset": "10GbE", "mtu": 9000}],
            },
            ConfigError,
            "mtu",
        ),
    ],
)
def test_bad_specs_are_clear_errors(topology, error, match):
    with pytest.raises(error, match=match):
        build_topology(cluster(topology), 2)


def test_hierarchical_needs_intra_link_and_whole_nodes():
    with pytest.raises(TopologyError, match="intra_link"):
        build_topology(cluster({"kind": "hierarchical"}, gpus_per_node=2), 4)
    intra = LinkSpec("nvlink", BW, 0.0)
    with pytest.raises(TopologyError, match="multiple of gpus_per_node"):
        build_topology(cluster({"kind": "hierarchical"}, intra=intra, gpus_per_node=4), 6)


def test_parse_returns_frozen_spec():
    spec = parse_topology({"kind": "leaf_spine", "hosts_per_leaf": 4})
    with pytest.raises(AttributeError):
        spec.spines = 3  # type: ignore[misc]
