"""benchmarks/simulator.py, leaf-spine part: the cluster it replays on and the agreement figure."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from vgcsim.simulator.topology import build_topology
from vgcsim.traces.io import read_trace

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "simulator.py"


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("simulator_benchmark_leafspine", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_leaf_spine_is_4_to_1_with_every_ring_hop_through_the_spine(bench):
    topo = build_topology(bench.leaf_spine_cluster(), 64)  # 4 leaves of 16 hosts
    host = topo.capacity_Bps[topo.route(0, 1).channels[0]]
    for r in range(64):
        route = topo.route(r, (r + 1) % 64)
        assert len(route.channels) == 4  # host -> leaf -> spine -> leaf -> host
        uplink = topo.capacity_Bps[route.channels[1]]
        assert uplink == pytest.approx(16 * host / 4, rel=1e-12)


def test_agreement_figure_compares_auto_with_the_message_level(bench):
    # P = 64 on 4 leaves: the sample trace's 4 workers repeat every 4 ranks, so each leaf's
    # ranks stay in step and auto runs every step at round level; P = 32 (2 leaves) mixes
    # workers on a leaf and the compressed steps go to the message level
    trace = read_trace("tests/data/sample_trace")
    rel, paths = bench.leafspine_agreement(trace, 64, 2, bench.leaf_spine_cluster())
    assert paths == ["round"] and rel <= 1e-12
    rel, paths = bench.leafspine_agreement(trace, 32, 2, bench.leaf_spine_cluster())
    assert paths == ["message", "round"] and rel <= 1e-12


def test_the_two_spine_leaf_spine_splits_each_leafs_ring_flows_evenly(bench):
    """leafspine2_*: 8 hosts per leaf, 2 spines, D-mod-K: at P = 64 (8 leaves) every uplink
    carries 4 of its leaf's 8 ring hops, at a quarter of a leaf's 8 host links (4:1, 2 spines)."""
    topo = build_topology(bench.leaf_spine_cluster(hosts_per_leaf=8, spines=2), 64)
    host = topo.capacity_Bps[topo.route(0, 1).channels[0]]
    per_uplink: dict[int, int] = {}
    for r in range(64):
        up = topo.route(r, (r + 1) % 64).channels[1]
        per_uplink[up] = per_uplink.get(up, 0) + 1
        assert topo.capacity_Bps[up] == pytest.approx(8 * host / (4 * 2), rel=1e-12)
    assert sorted(per_uplink.values()) == [4] * 16
