"""Cluster files read once into typed specs: the topology as its kind's frozen spec (a graph's
file read when the cluster is loaded, never again), one loader for every link and device table
driven by the fields' spellings, and the one import path of the cluster names."""

from __future__ import annotations

import dataclasses
import re

import pytest

from vgcsim.core import cluster as cluster_mod
from vgcsim.core.cluster import (
    TOPOLOGIES,
    GraphSpec,
    LeafSpineSpec,
    LinkSpec,
    RingSpec,
    TopologySpec,
    cluster_from_dict,
    cluster_to_dict,
    get_link,
    load_cluster,
    parse_topology,
    read_table,
    shared_cluster,
    spelled,
)
from vgcsim.core.errors import ConfigError, UnitError
from vgcsim.core.units import parse_time_s
from vgcsim.simulator.topology import build_topology


def test_a_topology_table_becomes_its_kinds_frozen_spec_and_reads_as_its_table(tmp_path):
    f = tmp_path / "c.toml"
    f.write_text(
        'base = "10GbE"\n[topology]\nkind = "leaf_spine"\nhosts_per_leaf = 4\nspines = 2\n'
    )
    c = load_cluster(f)
    assert c.topology == LeafSpineSpec(hosts_per_leaf=4, spines=2)
    assert c.topology.oversubscription == 1.0 and c.topology.routing == "dmodk"
    # the table view: the kind and the parameters the spec does not default
    assert c.topology["kind"] == "leaf_spine"
    assert dict(c.topology) == {"kind": "leaf_spine", "hosts_per_leaf": 4, "spines": 2}
    assert cluster_to_dict(c)["topology"] == dict(c.topology)
    assert cluster_from_dict(cluster_to_dict(c)) == c
    with pytest.raises(dataclasses.FrozenInstanceError):
        c.topology.spines = 3  # type: ignore[misc]


def test_every_kind_is_registered_under_its_own_name_and_a_spec_passes_through():
    assert sorted(TOPOLOGIES) == ["graph", "hierarchical", "leaf_spine", "ring", "star", "torus2d"]
    for kind, cls in TOPOLOGIES.items():
        assert issubclass(cls, TopologySpec) and cls.kind == kind
    spec = RingSpec()
    assert parse_topology(spec) is spec
    assert parse_topology({"kind": "ring"}) == spec


def test_a_cluster_built_from_a_table_holds_the_typed_spec_and_hashes_by_value():
    base = load_cluster("10GbE")
    ring = dataclasses.replace(base, topology={"kind": "ring"})
    assert isinstance(ring.topology, RingSpec)
    again = dataclasses.replace(base, topology=RingSpec())
    assert ring == again and hash(ring) == hash(again) and ring != base


def test_a_graph_file_is_read_once_when_the_cluster_is_loaded(tmp_path):
    """The file gives two hosts on one 10GbE cable (latency 4 us): every build afterwards, at
    any world size and after processor sharing rebuilt the spec, uses what was read, even
    with the file gone."""
    graph = tmp_path / "g.toml"
    graph.write_text(
        'hosts = ["x", "y"]\nlinks = [{a = "x", b = "y", preset = "10GbE", latency = "4us"}]\n'
    )
    f = tmp_path / "c.toml"
    f.write_text(
        f'base = "10GbE"\nranks_per_host = 2\nhost_cores = 1\n'
        f'[topology]\nkind = "graph"\nfile = "{graph}"\n'
    )
    c = load_cluster(f)
    graph.unlink()
    payload_Bps = 1.25e9 * 1448 / 1538  # 10 Gb/s under TCP, MTU 1500
    assert isinstance(c.topology, GraphSpec) and c.topology.file == str(graph)
    assert c.topology.links == (("x", "y", pytest.approx(payload_Bps, rel=1e-15), 4e-6),)
    shared = shared_cluster(c, 2)  # a new ClusterSpec (sharing factor 2): no new read
    assert shared is not c and shared.topology is c.topology
    for p in (1, 2):
        route = build_topology(shared, p).route(0, p - 1)
        assert route.latency_s == (4e-6 if p == 2 else 0.0)
    assert build_topology(c, 2).route(0, 1).bandwidth_Bps == pytest.approx(payload_Bps, rel=1e-15)


def test_a_graph_reads_back_from_its_table_with_the_payload_rates_it_resolved():
    c = cluster_from_dict(
        {
            "base": "10GbE",
            "topology": {
                "kind": "graph",
                "hosts": ["x", "y"],
                "links": [{"a": "x", "b": "y", "bandwidth": "8Gbps", "latency": "2us"}],
            },
        }
    )
    table = dict(c.topology)
    assert table == {
        "kind": "graph",
        "hosts": ["x", "y"],
        "links": [{"a": "x", "b": "y", "bandwidth_Bps": 1e9, "latency_s": 2e-6}],
    }
    assert cluster_from_dict(cluster_to_dict(c)) == c


def test_the_link_tables_keys_are_the_spellings_of_the_link_fields(tmp_path):
    f = tmp_path / "c.toml"
    f.write_text('base = "10GbE"\n[link]\nbogus = 1\n')
    with pytest.raises(ConfigError) as info:
        load_cluster(f)
    listed = str(info.value).split("valid keys here: ")[1].split(", ")
    spelled_keys = [
        key
        for fld in dataclasses.fields(LinkSpec)
        if "file" in fld.metadata
        for key in fld.metadata["file"].keys(fld.name)
    ]
    assert listed == ["preset", "name", *spelled_keys, "source"]
    assert listed[2:6] == ["bandwidth", "bandwidth_Bps", "latency", "latency_s"]
    assert listed[-3:] == ["efficiency", "framing", "source"]


@dataclasses.dataclass(frozen=True)
class _LinkWithCopy(LinkSpec):
    """A link with one more field, declared the way a new LinkSpec field is."""

    host_copy_s: float = spelled(0.0, unit="host_copy", parse=parse_time_s, range=(0.0, 1.0))


def _toy_link(name: str) -> _LinkWithCopy:
    return _LinkWithCopy(**dataclasses.asdict(get_link(name)))


def test_a_new_link_field_is_read_checked_and_inherited_from_its_declaration_alone():
    link = read_table(
        "link", {"preset": "1GbE", "host_copy": "3us"}, _LinkWithCopy, _toy_link, "link"
    )
    assert link.host_copy_s == pytest.approx(3e-6, rel=1e-15)
    assert link.bandwidth_Bps == 1.25e8 and link.source == "user"
    assert read_table("link", {"preset": "1GbE"}, _LinkWithCopy, _toy_link, "link").host_copy_s == 0
    with pytest.raises(
        ConfigError, match=r"^link\.host_copy must be a finite number in \[0, 1\], got 2\.0$"
    ):
        read_table("link", {"preset": "1GbE", "host_copy": "2s"}, _LinkWithCopy, _toy_link, "link")
    with pytest.raises(ConfigError, match="give either 'host_copy' or 'host_copy_s'"):
        read_table(
            "link",
            {"preset": "1GbE", "host_copy": "2us", "host_copy_s": 2e-6},
            _LinkWithCopy,
            _toy_link,
            "link",
        )
    with pytest.raises(ConfigError, match=r"host_copy_s must be a finite number in \[0, 1\]"):
        _LinkWithCopy("l", 1e9, 1e-6, host_copy_s=-1.0)  # the spec checks it too


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ('"soon"', "link.call_overhead: cannot parse 'soon'"),
        ('"-1us"', "link.call_overhead: '-1us' must be a finite non-negative quantity"),
        ('"2s"', r"link.call_overhead must be a finite number in \[0, 1\], got 2.0"),
    ],
)
def test_a_bad_call_overhead_is_named_with_its_rule(tmp_path, value, message):
    f = tmp_path / "c.toml"
    f.write_text(f'[link]\npreset = "1GbE"\ncall_overhead = {value}\n')
    with pytest.raises(ConfigError, match=f"^cluster file {re.escape(str(f))}: {message}"):
        load_cluster(f)


def test_a_unit_error_keeps_its_class():
    with pytest.raises(UnitError, match=r"^link\.call_overhead_s: cannot parse"):
        cluster_from_dict({"link": {"preset": "1GbE", "call_overhead_s": "soon"}})


def test_the_one_import_path_answers_every_public_cluster_name():
    for name in cluster_mod.__all__:
        assert getattr(cluster_mod, name) is not None, name
