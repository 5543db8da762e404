"""A topology added as a spec and a graph builder, each entered in its registry, is seen by
every stage that reads clusters: the cluster file reader, the result headers, the simulator's
routes and its replays (docs/extending.md, "Adding a topology")."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from _toy_topology import DumbbellSpec, build_dumbbell

from vgcsim import api
from vgcsim.core.cluster import cluster_from_dict, cluster_to_dict, get_cluster, load_cluster
from vgcsim.core.errors import ConfigError, UnknownNameError
from vgcsim.core.topologies import TOPOLOGIES
from vgcsim.simulator import topology as simulator_topology
from vgcsim.simulator.topology import build_topology

ROOT = Path(__file__).resolve().parents[2]
SAMPLE_TRACE = ROOT / "tests" / "data" / "sample_trace"


@pytest.fixture
def dumbbell(monkeypatch):
    """The two registry entries the recipe adds, undone after the test."""
    monkeypatch.setitem(TOPOLOGIES, DumbbellSpec.kind, DumbbellSpec)
    monkeypatch.setitem(simulator_topology.BUILDERS, DumbbellSpec, build_dumbbell)
    return DumbbellSpec


def test_a_cluster_file_names_the_kind_and_a_result_header_reads_back(dumbbell, tmp_path):
    f = tmp_path / "c.toml"
    f.write_text('base = "10GbE"\n[topology]\nkind = "dumbbell"\ncore_ratio = 0.5\n')
    c = load_cluster(f)
    assert c.topology == DumbbellSpec(core_ratio=0.5)
    assert dict(c.topology) == {"kind": "dumbbell", "core_ratio": 0.5}
    assert cluster_from_dict(cluster_to_dict(c)) == c


@pytest.mark.parametrize(
    ("table", "error", "match"),
    [
        ({"kind": "dumbbell", "core_ratio": 0.0}, ConfigError, "core_ratio must be"),
        ({"kind": "dumbbell", "spines": 2}, ConfigError, "valid keys: kind, core_ratio"),
        ({"kind": "dumbell"}, UnknownNameError, "dumbbell, graph"),
    ],
)
def test_bad_tables_are_refused_by_name(dumbbell, table, error, match):
    with pytest.raises(error, match=match):
        dataclasses.replace(get_cluster("10GbE"), topology=table)


def test_the_simulator_routes_over_the_builders_graph(dumbbell):
    """P = 4, core at half rate: ranks 0, 1 on the left switch, 2, 3 on the right. A ring
    allgatherv's rounds each send one block across the core each way (1 → 2, 3 → 0, on the
    cable's two channels), so every round takes 1.5α + m / (B/2), by hand."""
    c = dataclasses.replace(get_cluster("10GbE"), topology={"kind": "dumbbell", "core_ratio": 0.5})
    link, m = c.link, 1e6
    topo = build_topology(c, 4)
    assert topo.kind == "dumbbell"
    assert topo.route(0, 1).latency_s == pytest.approx(link.latency_s, rel=1e-12)
    assert topo.route(1, 2).latency_s == pytest.approx(1.5 * link.latency_s, rel=1e-12)
    assert topo.route(1, 2).bandwidth_Bps == 0.5 * link.payload_Bps
    by_hand = link.call_overhead_s + 3 * (1.5 * link.latency_s + m / (0.5 * link.payload_Bps))
    got = api.collective(c, "allgatherv/ring", [m] * 4, engine="simulate")
    assert got == pytest.approx(by_hand, rel=1e-12)
    # the closed form prices a non-blocking fabric whatever the topology
    assert api.collective(c, "allgatherv/ring", [m] * 4) == api.collective(
        "10GbE", "allgatherv/ring", [m] * 4
    )


def test_simulate_and_predict_name_the_kind_and_only_simulate_pays_the_core(dumbbell):
    c = dataclasses.replace(get_cluster("10GbE"), topology={"kind": "dumbbell", "core_ratio": 0.5})
    sim = api.simulate(SAMPLE_TRACE, c, world_sizes=[4])
    star = api.simulate(SAMPLE_TRACE, "10GbE", world_sizes=[4])
    pred = api.predict(SAMPLE_TRACE, c, world_sizes=[4])
    assert set(sim["topology"]) == set(pred["topology"]) == {"dumbbell"}
    assert (sim["comm_s"].to_numpy() > star["comm_s"].to_numpy()).all()
    assert pred["comm_s"].to_numpy() == pytest.approx(star["comm_s"].to_numpy(), rel=1e-3)
