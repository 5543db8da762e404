"""The topology's own checks and routing rules, each from its documented definition: the
refusals of ``build_topology`` and ``_edge`` (exact one-line messages), the connectivity
check behind every builder, a rank's route to itself, channel numbering, and the ECMP rule
(a CRC32 of source, destination and hop index picks among the sorted equal-cost next hops)."""

from __future__ import annotations

import math
import zlib

import networkx as nx
import pytest
from simhelpers import BW, LAT, cluster

from vgcsim.core.errors import ConfigError, TopologyError
from vgcsim.simulator import topology as topo_mod
from vgcsim.simulator.topology import StarSpec, _edge, build_topology


@pytest.mark.parametrize("bandwidth", [0.0, -1.0, math.inf, math.nan])
def test_a_link_without_a_positive_finite_bandwidth_is_refused_by_name(bandwidth):
    with pytest.raises(TopologyError) as info:
        _edge(nx.Graph(), "a", "b", bandwidth, 0.0)
    assert str(info.value) == "link a-b: bandwidth must be positive and finite"


@pytest.mark.parametrize("latency", [-1e-9, math.nan])
def test_a_link_with_a_negative_latency_is_refused_by_name(latency):
    with pytest.raises(TopologyError) as info:
        _edge(nx.Graph(), "a", "b", 1.0, latency)
    assert str(info.value) == "link a-b: latency must be non-negative"


def test_a_valid_link_is_added_with_float_attributes():
    g = nx.Graph()
    _edge(g, "a", "b", 5, 0)
    assert g.edges["a", "b"] == {"bandwidth_Bps": 5.0, "latency_s": 0.0}


@pytest.mark.parametrize("world_size", [True, 2.0, 0, -3, "4"])
def test_a_world_size_that_is_not_a_positive_integer_is_refused_by_name(world_size):
    with pytest.raises(ConfigError) as info:
        build_topology(cluster(), world_size)
    assert str(info.value) == f"world size must be an integer >= 1, got {world_size!r}"


def _with_builder(monkeypatch, build):
    """The star kind built by ``build(p) -> (graph, hosts)`` instead of its own builder: the
    public specs never give build_topology a disconnected graph (the cluster parser refuses
    one), so its own check, the net behind every builder, is reached this way."""
    monkeypatch.setitem(topo_mod.BUILDERS, StarSpec, lambda spec, cl, p: build(p))


def _islands(p: int, joined: int):
    """Hosts h0..h{p-1}; h0..h{joined-1} on one switch, the others on links of their own."""
    g = nx.Graph()
    hosts = [f"h{i}" for i in range(p)]
    for h in hosts[:joined]:
        g.add_edge(h, "sw", bandwidth_Bps=BW, latency_s=LAT)
    for h in hosts[joined:]:
        g.add_edge(h, f"{h}-island", bandwidth_Bps=BW, latency_s=LAT)
    return g, hosts


def test_two_ranks_that_cannot_reach_each_other_are_refused(monkeypatch):
    _with_builder(monkeypatch, lambda p: _islands(p, 1))
    with pytest.raises(TopologyError) as info:
        build_topology(cluster(), 2)
    assert str(info.value) == "topology 'star' is disconnected: ranks on h1 cannot reach h0"


def test_the_message_names_five_unreachable_ranks_then_an_ellipsis(monkeypatch):
    _with_builder(monkeypatch, lambda p: _islands(p, 2))
    with pytest.raises(TopologyError) as info:
        build_topology(cluster(), 7)  # h2..h6: five
    assert str(info.value) == (
        "topology 'star' is disconnected: ranks on h2, h3, h4, h5, h6 cannot reach h0"
    )
    with pytest.raises(TopologyError) as info:
        build_topology(cluster(), 8)  # h2..h7: six
    assert str(info.value) == (
        "topology 'star' is disconnected: ranks on h2, h3, h4, h5, h6 ... cannot reach h0"
    )


def test_reach_is_counted_from_rank_0(monkeypatch):
    """h0 and h2 share a switch, h1 is alone: h1 is the one named, from h0's side."""

    def build(p):
        hosts = [f"h{i}" for i in range(p)]
        g = nx.Graph()
        g.add_edge("h0", "sw", bandwidth_Bps=BW, latency_s=LAT)
        g.add_edge("h2", "sw", bandwidth_Bps=BW, latency_s=LAT)
        g.add_edge("h1", "h1-island", bandwidth_Bps=BW, latency_s=LAT)
        return g, hosts

    _with_builder(monkeypatch, build)
    with pytest.raises(TopologyError) as info:
        build_topology(cluster(), 3)
    assert str(info.value) == "topology 'star' is disconnected: ranks on h1 cannot reach h0"


def test_rank_0_missing_from_the_graph_is_refused_not_a_networkx_error(monkeypatch):
    def build(p):
        g = nx.Graph()
        g.add_edge("h1", "sw", bandwidth_Bps=BW, latency_s=LAT)
        return g, ["h0", "h1"]

    _with_builder(monkeypatch, build)
    with pytest.raises(TopologyError) as info:
        build_topology(cluster(), 2)
    assert str(info.value) == "topology 'star' is disconnected: ranks on h0, h1 cannot reach h0"


def test_one_rank_needs_no_links(monkeypatch):
    """A single rank has nobody to reach: no connectivity check, even with no graph at all."""
    _with_builder(monkeypatch, lambda p: (nx.Graph(), ["h0"]))
    topo = build_topology(cluster(), 1)
    assert topo.n_channels == 0 and topo.hosts == ["h0"]


def test_a_ranks_route_to_itself_is_empty_free_and_unlimited():
    topo = build_topology(cluster(), 3)
    r = topo.route(1, 1)
    assert r.channels == ()
    assert r.latency_s == 0.0
    assert r.bandwidth_Bps == math.inf


def test_channels_are_numbered_by_link_name_each_direction_in_turn():
    """Both directions of each link, links in the order of their (a, b) names, a before b as
    the graph stores them."""
    spec = {"kind": "leaf_spine", "hosts_per_leaf": 2, "spines": 2, "oversubscription": 1.0}
    topo = build_topology(cluster(spec), 4)
    edges = sorted((str(a), str(b)) for a, b in topo.graph.edges())
    expected = [name for a, b in edges for name in (f"{a}->{b}", f"{b}->{a}")]
    assert topo.channel_names == expected
    assert [topo.channel_ids[tuple(n.split("->"))] for n in expected] == list(range(len(expected)))
    assert topo.capacity_Bps.dtype == float and topo.latency_s.dtype == float


def test_channel_numbers_follow_the_link_names_not_the_order_links_were_given():
    """Links given as x-z before x-y: x->y is still numbered before x->z."""
    links = [
        {"a": "x", "b": "z", "bandwidth": "1Gbps", "latency": "1us"},
        {"a": "x", "b": "y", "bandwidth": "10Gbps", "latency": "1us"},
        {"a": "y", "b": "z", "bandwidth": "10Gbps", "latency": "1us"},
    ]
    topo = build_topology(cluster({"kind": "graph", "hosts": ["x", "y", "z"], "links": links}), 3)
    assert topo.channel_names == ["x->y", "y->x", "x->z", "z->x", "y->z", "z->y"]
    assert topo.capacity_Bps[0] == pytest.approx(1.25e9)


def _ecmp_walk(topo, src, dst):
    """The route by the module's definition: from each node, the neighbours one hop closer to
    the destination, sorted; with several, index crc32("src>dst#hop") mod their count."""
    target = topo.hosts[dst]
    dist = nx.single_source_shortest_path_length(topo.graph, target)
    node, names = topo.hosts[src], []
    for hop in range(dist[topo.hosts[src]]):
        nxt = sorted(n for n in topo.graph.neighbors(node) if dist[n] == dist[node] - 1)
        step = nxt[zlib.crc32(f"{src}>{dst}#{hop}".encode()) % len(nxt)] if len(nxt) > 1 else nxt[0]
        names.append(f"{node}->{step}")
        node = step
    return names


@pytest.mark.parametrize(
    "spec",
    [
        {"kind": "leaf_spine", "hosts_per_leaf": 2, "spines": 3, "routing": "hash"},
        {"kind": "leaf_spine", "hosts_per_leaf": 2, "spines": 2, "routing": "hash"},
        {"kind": "torus2d", "rows": 3},
        {"kind": "torus2d", "rows": 4},
    ],
)
def test_every_route_follows_the_ecmp_rule(spec):
    p = 4 * spec["rows"] if spec["kind"] == "torus2d" else 8
    topo = build_topology(cluster(spec), p)
    picked_later_hops = False
    for src in range(p):
        for dst in range(p):
            if src == dst:
                continue
            route = topo.route(src, dst)
            names = [topo.channel_names[c] for c in route.channels]
            assert names == _ecmp_walk(topo, src, dst), (src, dst)
            assert route.latency_s == pytest.approx(len(names) * topo.latency_s[0])
            picked_later_hops |= len(names) > 2
    assert picked_later_hops


@pytest.mark.parametrize("placement", ["packed", "spread"])
def test_dmodk_takes_the_spine_numbered_by_the_destination_host(placement):
    """routing = "dmodk" (the default): a cross-leaf flow leaves its leaf for spine
    (destination's number mod spines) among the sorted spines, the number counted leaf by
    leaf; with spines dividing hosts_per_leaf, every leaf's flows of a ring (each rank to
    the next) split evenly over the spines (2 spines, 4 hosts per leaf, 16 ranks)."""
    spec = {"kind": "leaf_spine", "hosts_per_leaf": 4, "spines": 2, "placement": placement}
    p = 16
    topo = build_topology(cluster(spec), p)
    leaves = p // 4
    per_spine: dict[str, int] = {}
    for src in range(p):
        for dst in range(p):
            names = [topo.channel_names[c] for c in topo.route(src, dst).channels]
            if len(names) < 4:
                continue
            if placement == "packed":
                leaf, slot = divmod(dst, 4)
            else:
                slot, leaf = divmod(dst, leaves)
            spines = sorted(n for n in topo.graph.nodes if n.startswith("spine"))
            assert names[1].endswith("->" + spines[(leaf * 4 + slot) % 2]), (src, dst)
            if dst == (src + 1) % p:
                per_spine[names[1]] = per_spine.get(names[1], 0) + 1
    if placement == "spread":  # every ring hop leaves its leaf: 2 flows per uplink
        assert sorted(per_spine.values()) == [2] * (2 * leaves)


def test_the_ecmp_hash_counts_every_hop():
    """Three equal-cost next hops at hop 2 (s-a-b, then b to m1, m2 or m3, then c-d): the pick
    is crc32("1>0#2") mod 3 among the sorted candidates (rank 1 is s, rank 0 is d), the hop index counted from 0. (Two
    candidates would not tell hop 1 from hop 2: CRC32 is affine, so strings that differ
    only in that digit always share their lowest bit.)"""
    names = ["s-a", "a-b", "b-m1", "b-m2", "b-m3", "m1-c", "m2-c", "m3-c", "c-d"]
    links = [
        {"a": n.split("-")[0], "b": n.split("-")[1], "bandwidth": "10Gbps", "latency": "1us"}
        for n in names
    ]
    topo = build_topology(cluster({"kind": "graph", "hosts": ["d", "s"], "links": links}), 2)
    middle = ["m1", "m2", "m3"][zlib.crc32(b"1>0#2") % 3]
    route = [topo.channel_names[c] for c in topo.route(1, 0).channels]
    assert route == ["s->a", "a->b", f"b->{middle}", f"{middle}->c", "c->d"]
    assert route == _ecmp_walk(topo, 1, 0)
    assert zlib.crc32(b"1>0#2") % 3 != zlib.crc32(b"1>0#1") % 3  # the case tells them apart
