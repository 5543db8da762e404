"""Topology specs read from a ``[topology]`` table: the one line each bad table gets (these
lines are what predict, simulate and sweep print), the smallest values each kind accepts, a
graph's links as payload rates, a graph file read into a spec that reads back as
``{"kind": "graph", "file": ...}``, and a graph scaled to another link."""

from __future__ import annotations

import pytest

from vgcsim.core.errors import ConfigError, TopologyError, UnknownNameError
from vgcsim.core.topologies import GraphSpec, LeafSpineSpec, Torus2dSpec, parse_topology

LINK_KEYS = "a, b, preset, bandwidth, bandwidth_Bps, latency, latency_s, efficiency, framing"
OK = {"a": "a", "b": "sw", "preset": "10GbE"}  # a valid first link


def graph(links, hosts=("a",)):
    """A graph table; ``hosts`` goes in as given (what is not a list is refused)."""
    return {"kind": "graph", "hosts": hosts, "links": links}


def link(**extra):
    return {"a": "a", "b": "sw", **extra}


REFUSALS = {
    "no kind": ({}, ConfigError, "topology must be a table with a 'kind' key"),
    "table without kind": (
        {"rows": 2},
        ConfigError,
        "topology must be a table with a 'kind' key",
    ),
    "a list naming kind": (["kind"], ConfigError, "topology must be a table with a 'kind' key"),
    "unknown leaf_spine key": (
        {"kind": "leaf_spine", "radix": 4},
        ConfigError,
        "unknown key 'radix' in leaf_spine topology; valid keys: kind, hosts_per_leaf, spines, "
        "oversubscription, placement, routing",
    ),
    "no hosts per leaf": (
        {"kind": "leaf_spine", "hosts_per_leaf": 0},
        ConfigError,
        "topology.hosts_per_leaf: expected an integer >= 1, got 0",
    ),
    "no spines": (
        {"kind": "leaf_spine", "spines": 0},
        ConfigError,
        "topology.spines: expected an integer >= 1, got 0",
    ),
    "fractional spines": (
        {"kind": "leaf_spine", "spines": 2.5},
        ConfigError,
        "topology.spines: expected an integer >= 1, got 2.5",
    ),
    "boolean spines": (
        {"kind": "leaf_spine", "spines": True},
        ConfigError,
        "topology.spines: expected an integer >= 1, got True",
    ),
    "spines as text": (
        {"kind": "leaf_spine", "spines": "2"},
        ConfigError,
        "topology.spines: expected an integer >= 1, got '2'",
    ),
    "no oversubscription": (
        {"kind": "leaf_spine", "oversubscription": 0},
        ConfigError,
        "topology: oversubscription must be a finite number in [1e-06, 1e+06], got 0",
    ),
    "unknown placement": (
        {"kind": "leaf_spine", "placement": "diagonal"},
        UnknownNameError,
        "unknown leaf_spine placement 'diagonal'; valid: packed, spread",
    ),
    "unknown routing": (
        {"kind": "leaf_spine", "routing": "ecmp"},
        UnknownNameError,
        "unknown leaf_spine routing 'ecmp'; valid: dmodk, hash",
    ),
    "routing not a name": (
        {"kind": "leaf_spine", "routing": 3},
        UnknownNameError,
        "unknown leaf_spine routing '3'; valid: dmodk, hash",
    ),
    "negative rows": (
        {"kind": "torus2d", "rows": -1},
        ConfigError,
        "topology.rows: expected an integer >= 0, got -1",
    ),
    "no links": (
        graph([]),
        TopologyError,
        "graph topology: 'links' must be a non-empty list of tables",
    ),
    "links as one table": (
        graph(OK),
        TopologyError,
        "graph topology: 'links' must be a non-empty list of tables",
    ),
    "link not a table": (
        graph([OK, "a-sw"]),
        TopologyError,
        "graph topology: links[1] must be a table, got 'a-sw'",
    ),
    "unknown link key": (
        graph([OK, link(preset="10GbE", mtu=9000)]),
        ConfigError,
        f"unknown key 'mtu' in graph topology.links[1]; valid keys: {LINK_KEYS}",
    ),
    "link without b": (
        graph([OK, {"a": "a", "preset": "10GbE"}]),
        TopologyError,
        "graph topology: links[1] needs endpoints 'a' and 'b'",
    ),
    "link without a": (
        graph([OK, {"b": "sw", "preset": "10GbE"}]),
        TopologyError,
        "graph topology: links[1] needs endpoints 'a' and 'b'",
    ),
    "bandwidth without latency": (
        graph([OK, link(bandwidth="1Gbps")]),
        TopologyError,
        "graph topology: links[1] needs 'preset' or 'bandwidth' and 'latency'",
    ),
    "latency without bandwidth": (
        graph([OK, link(latency_s=1e-6)]),
        TopologyError,
        "graph topology: links[1] needs 'preset' or 'bandwidth' and 'latency'",
    ),
    "bandwidth below 1 B/s": (
        graph([OK, link(bandwidth=0.5, latency=0)]),
        ConfigError,
        "graph topology: links[1]: bandwidth_Bps must be a finite number in [1, 1e+15], got 0.5",
    ),
    "latency above a second": (
        graph([OK, link(bandwidth="1Gbps", latency=2)]),
        ConfigError,
        "graph topology: links[1]: latency_s must be a finite number in [0, 1], got 2.0",
    ),
    "framing and efficiency": (
        graph([OK, link(preset="10GbE", framing="tcp-mtu9000", efficiency=0.9)]),
        ConfigError,
        "graph topology: links[1]: give either 'efficiency' or 'framing'",
    ),
    "efficiency as text": (
        graph([OK, link(preset="10GbE", efficiency="0.5")]),
        ConfigError,
        "graph topology: links[1].efficiency: expected a number, got '0.5'",
    ),
    "boolean efficiency": (
        graph([OK, link(preset="10GbE", efficiency=True)]),
        ConfigError,
        "graph topology: links[1].efficiency: expected a number, got True",
    ),
    "efficiency above one": (
        graph([OK, link(preset="10GbE", efficiency=1.5)]),
        ConfigError,
        "graph topology: links[1].efficiency must be in (0, 1] (payload bytes per wire byte), "
        "got 1.5",
    ),
    "zero efficiency": (
        graph([OK, link(preset="10GbE", efficiency=0)]),
        ConfigError,
        "graph topology: links[1].efficiency must be in (0, 1] (payload bytes per wire byte), "
        "got 0",
    ),
    "negative efficiency": (
        graph([OK, link(preset="10GbE", efficiency=-0.5)]),
        ConfigError,
        "graph topology: links[1].efficiency must be in (0, 1] (payload bytes per wire byte), "
        "got -0.5",
    ),
    "no hosts": (
        graph([OK], hosts=[]),
        TopologyError,
        "graph topology: 'hosts' must be a non-empty list of node names",
    ),
    "hosts as one name": (
        graph([OK], hosts="ab"),
        TopologyError,
        "graph topology: 'hosts' must be a non-empty list of node names",
    ),
    "duplicate hosts": (
        graph([OK], hosts=["a", "a"]),
        TopologyError,
        "graph topology: 'hosts' has duplicate names",
    ),
    # the first host's component is {a}; b and c are cabled to each other only
    "two hosts cut off": (
        graph([{"a": "b", "b": "c", "preset": "10GbE"}], hosts=["a", "b", "c"]),
        TopologyError,
        "topology 'graph' is disconnected: hosts b, c cannot reach a",
    ),
    # five hosts cut off are all named
    "five hosts cut off": (
        graph(
            [{"a": "h0", "b": "sw", "preset": "10GbE"}, {"a": "h1", "b": "sw", "preset": "10GbE"}],
            hosts=[f"h{i}" for i in range(7)],
        ),
        TopologyError,
        "topology 'graph' is disconnected: hosts h2, h3, h4, h5, h6 cannot reach h0",
    ),
    # six: the first five, then an ellipsis
    "six hosts cut off": (
        graph([{"a": "h0", "b": "sw", "preset": "10GbE"}], hosts=[f"h{i}" for i in range(7)]),
        TopologyError,
        "topology 'graph' is disconnected: hosts h1, h2, h3, h4, h5 ... cannot reach h0",
    ),
}


@pytest.mark.parametrize("case", list(REFUSALS))
def test_a_bad_topology_table_is_refused_with_one_line(case):
    table, error, message = REFUSALS[case]
    with pytest.raises(error) as info:
        parse_topology(table)
    assert type(info.value) is error
    assert str(info.value) == message


def test_the_smallest_accepted_leaf_and_torus_values():
    spec = parse_topology({"kind": "leaf_spine", "hosts_per_leaf": 1, "spines": 1})
    assert spec == LeafSpineSpec(hosts_per_leaf=1, spines=1)
    assert dict(spec) == {"kind": "leaf_spine", "hosts_per_leaf": 1}
    # rows = 0 (the default) asks for the most square factorisation of P
    assert parse_topology({"kind": "torus2d"}) == Torus2dSpec(rows=0)
    assert dict(parse_topology({"kind": "torus2d", "rows": 0})) == {"kind": "torus2d"}


def test_a_graph_of_one_host_cabled_to_a_switch_is_connected():
    spec = parse_topology(graph([link(bandwidth_Bps=1e9, latency_s=1e-6)]))
    assert spec == GraphSpec(hosts=("a",), links=(("a", "sw", 1e9, 1e-6),))


def test_a_graph_links_payload_rate_is_its_line_rate_times_its_efficiency():
    spec = parse_topology(
        graph(
            [
                link(bandwidth="8Gbps", latency="2us", efficiency=0.5),
                link(bandwidth="8Gbps", latency="2us", framing="tcp-mtu9000"),
                link(bandwidth="8Gbps", latency="2us", efficiency=1),
                link(bandwidth="8Gbps", latency="2us"),
            ]
        )
    )
    rates = [bw for _, _, bw, _ in spec.links]
    assert rates[0] == 0.5e9
    assert rates[1] == pytest.approx(1e9 * 8948 / 9038, rel=1e-15)  # jumbo frames
    assert rates[2] == rates[3] == 1e9  # efficiency 1 is accepted; none given is 1


def test_a_graph_file_may_not_be_given_with_inline_hosts_or_links(tmp_path):
    f = tmp_path / "g.toml"
    f.write_text('hosts = ["a"]\nlinks = [{a = "a", b = "sw", preset = "10GbE"}]\n')
    both = "topology: give either 'file' or inline 'hosts'/'links', not both"
    for inline in ({"hosts": ["a"]}, {"links": [OK]}):
        with pytest.raises(ConfigError) as info:
            parse_topology({"kind": "graph", "file": str(f), **inline})
        assert str(info.value) == both


def test_a_graph_file_with_an_unknown_key_is_refused(tmp_path):
    f = tmp_path / "g.toml"
    f.write_text(
        'hosts = ["a"]\nswitches = ["sw"]\nlinks = [{a = "a", b = "sw", preset = "10GbE"}]\n'
    )
    with pytest.raises(ConfigError) as info:
        parse_topology({"kind": "graph", "file": str(f)})
    assert (
        str(info.value) == f"unknown key 'switches' in topology file {f}; valid keys: hosts, links"
    )


def test_a_graph_read_from_a_file_reads_as_its_file_and_scales_to_an_inline_graph(tmp_path):
    f = tmp_path / "g.toml"
    f.write_text(
        'hosts = ["x", "y"]\n'
        'links = [{a = "x", b = "sw", bandwidth_Bps = 1e9, latency_s = 2e-6},\n'
        '         {a = "y", b = "sw", bandwidth_Bps = 4e9, latency_s = 8e-6}]\n'
    )
    spec = parse_topology({"kind": "graph", "file": str(f)})
    assert dict(spec) == {"kind": "graph", "file": str(f)}
    assert spec.links == (("x", "sw", 1e9, 2e-6), ("y", "sw", 4e9, 8e-6))
    assert parse_topology(dict(spec)) == spec
    # twice the bandwidth, half the latency: every link, the hosts kept, no file any more
    fast = spec.scaled(2.0, 0.5)
    assert fast == GraphSpec(
        hosts=("x", "y"), links=(("x", "sw", 2e9, 1e-6), ("y", "sw", 8e9, 4e-6))
    )
    assert dict(fast) == {
        "kind": "graph",
        "hosts": ["x", "y"],
        "links": [
            {"a": "x", "b": "sw", "bandwidth_Bps": 2e9, "latency_s": 1e-6},
            {"a": "y", "b": "sw", "bandwidth_Bps": 8e9, "latency_s": 4e-6},
        ],
    }
