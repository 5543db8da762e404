"""allgatherv/bounded, the DDP hook's exchange: the closed form by hand, and the simulator's
replay of a step history against it."""

from __future__ import annotations

import numpy as np
import pytest

from vgcsim.core.bounded import bounded_rounds
from vgcsim.core.cluster import ClusterSpec, LinkSpec, get_cluster
from vgcsim.models.collectives import allgatherv_bounded, allgatherv_bounded_history
from vgcsim.simulator.collectives import bounded_schedule, bounded_units, host_time_s
from vgcsim.simulator.paths.message import run_message
from vgcsim.simulator.paths.plan import Phase
from vgcsim.simulator.topology import build_topology

# α = 1 s, β = 1 s/B: hand arithmetic stays exact
UNIT = LinkSpec("unit", bandwidth_Bps=1.0, latency_s=1.0)


def test_closed_form_of_four_exchanges_by_hand():
    # the history of tests/core/test_bounded.py: bounds 16, 112, 112, 144; fallbacks 88, 0, 24, 0
    messages = np.array([[100, 40], [90, 90], [10, 130], [60, 2]], dtype=float)
    got = allgatherv_bounded_history(messages, UNIT, first_bound_bytes=16)
    # P = 2: one ring round each, (α + β·b) + [e > 0]·(α + β·e)
    want = [(1 + 16) + (1 + 88), 1 + 112, (1 + 112) + (1 + 24), 1 + 144]
    assert got.tolist() == want


def test_host_copies_of_both_rounds_are_half_delta_per_gathered_byte():
    link = LinkSpec("h", bandwidth_Bps=1.0, latency_s=1.0, allgatherv_host_s_per_byte=0.25)
    got = allgatherv_bounded(np.array([[100.0, 40.0]]), link, bound_bytes=16)
    # rounds 16 and 88 B per rank on 2 ranks: ½·δ·P·b = 0.25·16 and 0.25·88
    assert got.tolist() == [(1 + 16) + 0.25 * 16 + (1 + 88) + 0.25 * 88]


def test_one_rank_costs_nothing():
    assert allgatherv_bounded(np.array([[5.0], [9.0]]), UNIT).tolist() == [0.0, 0.0]


def test_a_message_within_its_bound_runs_no_fallback_round():
    # bound 112: messages 90 and 112 fit (one round of 112 B); 113 does not (align 120: 8 more)
    got = allgatherv_bounded(np.array([[90.0, 112.0], [113.0, 1.0]]), UNIT, bound_bytes=112)
    assert got.tolist() == [1 + 112, (1 + 112) + (1 + 8)]


@pytest.mark.parametrize("p", (2, 3, 5))
def test_simulated_history_equals_the_closed_form_on_a_star(p):
    cluster: ClusterSpec = get_cluster("10GbE")
    rng = np.random.default_rng(p)
    messages = rng.integers(1_000, 60_000, size=(24, p))
    bound, extra = bounded_rounds(messages, 16)
    topo = build_topology(cluster, p)
    want = allgatherv_bounded_history(messages.astype(float), cluster.link, first_bound_bytes=16)
    assert (extra > 0).any() and (extra == 0).any()  # both kinds of exchange occur
    for t in range(len(messages)):
        schedule = bounded_schedule(p, bool(extra[t] > 0))
        units = bounded_units(p, bound[t], extra[t])[0]
        finish = run_message([Phase(np.zeros(p), schedule, units)], topo).max()
        finish += host_time_s(schedule, units, cluster.link.allgatherv_host_s_per_byte)
        assert finish == pytest.approx(want[t], rel=1e-9)
