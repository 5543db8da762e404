"""The collective-level fast path on an oversubscribed leaf-spine, where flows do contend.

Every other fast-path test runs on a star, where no two flows of a ring share a channel. On
a leaf-spine with 4 hosts per leaf, one spine and a 4:1 oversubscription, each leaf's uplink
carries 4 × B / 4 = B. With ranks dealt round-robin over the two leaves (``spread``), every
hop of a ring in rank order crosses the spine, so the 4 flows leaving a leaf share its
uplink: B/4 each. Closed forms (Hockney, α = cross-leaf path latency = 2 × link latency):

    uncontended (what a fast path that ignores sharing computes):  2(P−1)(α + n/(P·B))
    message level (fair sharing):                                  2(P−1)(α + n/(P·B/4))

With P = 8, n = 4 MB, B = 1.25 GB/s and α = 5 µs: 5.67 ms against 22.47 ms.
"""

from __future__ import annotations

import numpy as np
import pytest
from simhelpers import BW, cluster

from vgcsim.simulator.collectives import COLLECTIVES, get_schedule, unit_sizes
from vgcsim.simulator.paths.collective import contention_free, run_collective
from vgcsim.simulator.paths.message import run_message
from vgcsim.simulator.paths.plan import Phase
from vgcsim.simulator.replay import SimulateConfig, simulate_trace
from vgcsim.simulator.topology import build_topology
from vgcsim.traces.io import read_trace

P = 8
N = 4e6
LINK_LAT = 2.5e-6  # per link spec; a cross-leaf route costs 2 × this
RATIO = 4.0


def _leaf_spine(placement="spread", ratio=RATIO):
    spec = {
        "kind": "leaf_spine",
        "hosts_per_leaf": 4,
        "spines": 1,
        "oversubscription": ratio,
        "placement": placement,
    }
    return cluster(spec, latency_s=LINK_LAT)


def test_ring_on_an_oversubscribed_spine_is_not_contention_free():
    topo = build_topology(_leaf_spine(), P)
    s = get_schedule("allreduce/ring", P)
    assert contention_free([s], topo) is None


def test_message_level_pays_the_shared_uplink_and_the_uncontended_form_does_not():
    topo = build_topology(_leaf_spine(), P)
    s = get_schedule("allreduce/ring", P)
    ph = Phase(np.zeros(P), s, unit_sizes(s, N))
    alpha = 2 * LINK_LAT
    uncontended = 2 * (P - 1) * (alpha + N / (P * BW))
    shared = 2 * (P - 1) * (alpha + N / (P * BW / RATIO))
    assert uncontended == pytest.approx(5.67e-3, abs=5e-6)
    assert shared == pytest.approx(22.47e-3, abs=5e-6)
    msg = run_message([ph], topo, semantics="rendezvous").max()
    assert msg == pytest.approx(shared, rel=1e-9)
    # forcing the fast path here gives the uncontended figure: the reason it must not be taken
    fast = run_collective([ph], topo, semantics="rendezvous", gamma_s_per_byte=0.0).max()
    assert fast == pytest.approx(uncontended, rel=1e-9)


@pytest.mark.parametrize("placement", ("packed", "spread"))
@pytest.mark.parametrize("key", sorted(COLLECTIVES))
def test_fast_path_is_only_claimed_where_it_equals_the_message_level(key, placement):
    # whatever contention_free claims on this oversubscribed fabric must hold: the fast path
    # then gives the message level's numbers exactly
    topo = build_topology(_leaf_spine(placement), P)
    s = get_schedule(key, P)
    rng = np.random.default_rng(3)
    sizes = N if s.allreduce else rng.uniform(1e5, 1e6, P)
    ph = Phase(np.zeros(P), s, unit_sizes(s, sizes))
    verdict = contention_free([s], topo)
    if verdict is None:
        return
    fast = run_collective([ph], topo, semantics="rendezvous", gamma_s_per_byte=0.0)
    msg = run_message([ph], topo, semantics="rendezvous")
    np.testing.assert_allclose(fast, msg, rtol=1e-12)


def test_spread_ring_is_refused_by_contention_free_for_every_ring_like_key():
    topo = build_topology(_leaf_spine("spread"), P)
    for key in ("allreduce/ring", "allgatherv/ring", "allgatherv/padded"):
        assert contention_free([get_schedule(key, P)], topo) is None, key


@pytest.mark.parametrize("collective", ("compressed", "dense"))
def test_auto_path_agrees_with_the_message_level_on_an_oversubscribed_spine(collective):
    # the collective-level path is never taken here; the round-level path runs the steps it
    # can prove isolated (here: the dense steps, equal sizes) and hands the others on
    trace = read_trace("tests/data/sample_trace")
    cl = _leaf_spine()
    kw = {"max_steps": 3, "per_step": True}
    auto, _, info = simulate_trace(trace, cl, [P], SimulateConfig(path="auto", **kw))
    msg, _, _ = simulate_trace(trace, cl, [P], SimulateConfig(path="message", **kw))
    a = auto[auto["method"] == collective]
    m = msg[msg["method"] == collective]
    counts = info[str(P)]
    assert counts[collective]["collective"] == 0
    assert set(a["path"]) <= {"message", "round"}
    assert counts["dense"]["round"] == 1 and counts["dense"]["memo"] == 2
    assert counts["compressed"]["message"] == counts["compressed"]["round_refused"] >= 1
    np.testing.assert_allclose(a["step_s"].to_numpy(), m["step_s"].to_numpy(), rtol=1e-12)
    np.testing.assert_allclose(a["comm_s"].to_numpy(), m["comm_s"].to_numpy(), rtol=1e-12)
