"""Topology builders against their documented shapes, counted by hand.

A ring of P hosts has P links (one for P = 2, none for P = 1); a rows x cols torus has a
horizontal ring in every row and a vertical ring in every column (a ring of two hosts being
one link), rank i at row i // cols, column i % cols; without ``rows`` the torus takes the
largest divisor of P not above sqrt(P). Bad topologies are refused with one line that names
the problem.
"""

from __future__ import annotations

import pytest
from simhelpers import cluster

from vgcsim.core.cluster import LinkSpec
from vgcsim.core.errors import TopologyError
from vgcsim.simulator.topology import build_topology


def _edges(topo) -> set[frozenset[str]]:
    return {frozenset(e) for e in topo.graph.edges()}


def _ring_edges(p: int) -> set[frozenset[str]]:
    return {frozenset((f"h{i}", f"h{(i + 1) % p}")) for i in range(p)}


@pytest.mark.parametrize("p", [1, 2, 3, 5])
def test_ring_has_one_link_per_neighbour_pair(p):
    topo = build_topology(cluster({"kind": "ring"}), p)
    assert _edges(topo) == (_ring_edges(p) if p > 1 else set())
    assert topo.graph.number_of_edges() == {1: 0, 2: 1, 3: 3, 5: 5}[p]
    assert topo.n_channels == 2 * topo.graph.number_of_edges()


@pytest.mark.parametrize(
    ("p", "rows", "cols"), [(10, 2, 5), (12, 3, 4), (9, 3, 3), (7, 1, 7), (6, 2, 3)]
)
def test_torus_without_rows_takes_the_largest_divisor_up_to_the_square_root(p, rows, cols):
    topo = build_topology(cluster({"kind": "torus2d"}), p)
    expected = set()
    for i in range(p):
        r, c = divmod(i, cols)
        right = r * cols + (c + 1) % cols
        down = ((r + 1) % rows) * cols + c
        for j in (right, down):
            if j != i:
                expected.add(frozenset((f"h{i}", f"h{j}")))
    assert _edges(topo) == expected


def test_torus_neighbours_of_rank_zero_on_two_by_five():
    topo = build_topology(cluster({"kind": "torus2d"}), 10)
    assert set(topo.graph.neighbors("h0")) == {"h1", "h4", "h5"}


def test_torus_rows_given_are_used():
    # 12 ranks in 2 rows of 6 (the square default would be 3 x 4)
    topo = build_topology(cluster({"kind": "torus2d", "rows": 2}), 12)
    assert set(topo.graph.neighbors("h0")) == {"h1", "h5", "h6"}
    assert topo.graph.number_of_edges() == 12 + 6


def test_torus_refuses_a_world_size_not_a_multiple_of_rows():
    with pytest.raises(TopologyError, match=r"^torus2d: world size 7 is not a multiple of rows=2$"):
        build_topology(cluster({"kind": "torus2d", "rows": 2}), 7)


def test_graph_needs_a_host_per_rank():
    spec = cluster(
        {
            "kind": "graph",
            "hosts": ["a", "b"],
            "links": [{"a": "a", "b": "b", "bandwidth": 1e9, "latency": 1e-6}],
        }
    )
    with pytest.raises(
        TopologyError, match=r"^graph topology has 2 hosts; world size 3 needs at least 3$"
    ):
        build_topology(spec, 3)


def test_hierarchical_needs_an_intra_link():
    with pytest.raises(
        TopologyError, match=r"^cluster 'test': hierarchical topology needs an intra_link$"
    ):
        build_topology(cluster({"kind": "hierarchical"}, gpus_per_node=2), 4)


def test_hierarchical_with_intra_link_builds():
    spec = cluster({"kind": "hierarchical"}, gpus_per_node=2, intra=LinkSpec("f", 1e10, 1e-6))
    assert build_topology(spec, 4).graph.has_edge("h3", "node1")
