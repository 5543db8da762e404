"""The engine keeps what it derives from a schedule in a RunCache, never in the frozen Schedule."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from simhelpers import cluster

from vgcsim.core.errors import ConfigError
from vgcsim.simulator.collectives import Schedule, get_schedule, unit_sizes
from vgcsim.simulator.paths.collective import contention_free, run_collective
from vgcsim.simulator.paths.message import run_message
from vgcsim.simulator.paths.plan import Phase, RunCache
from vgcsim.simulator.topology import build_topology


def _phase(key: str, p: int, nbytes: float = 1e6) -> Phase:
    s = get_schedule(key, p)
    return Phase(np.zeros(p), s, unit_sizes(s, np.full(p, nbytes)))


def test_schedule_is_a_spec_without_runtime_state():
    assert {f.name for f in dataclasses.fields(Schedule)} == {
        "key",
        "world_size",
        "rounds",
        "n_units",
        "allreduce",
        "unit_order",
        "pad",
        "stages",
        "bounded",
    }
    ph = _phase("allreduce/ring", 6)
    before = dict(vars(ph.schedule))
    topo = build_topology(cluster(), 6)
    run_message([ph], topo)
    run_collective([ph], topo, check_overlap=False)
    contention_free([ph.schedule], topo)
    assert vars(ph.schedule).keys() == before.keys()
    assert all(vars(ph.schedule)[k] is v for k, v in before.items())


def test_one_cache_serves_a_run_and_gives_the_same_times_as_none():
    topo = build_topology(cluster(), 8)
    cache = RunCache(topo)
    ph = _phase("allgatherv/bruck", 8)
    fresh = run_message([ph], topo)
    cached = [run_message([ph], topo, cache=cache) for _ in range(2)]
    assert all(np.array_equal(fresh, c) for c in cached)
    assert cache.tables(ph.schedule) is cache.tables(ph.schedule)
    fast = run_collective([ph], topo, check_overlap=False, cache=cache)
    assert np.array_equal(fast, run_collective([ph], topo, check_overlap=False))
    # Bruck sends to i - 2^k: a switch port into a rank carries several senders, one receiver
    assert contention_free([ph.schedule], topo, cache=cache) == "dst"


def test_a_cache_refuses_another_topology():
    cache = RunCache(build_topology(cluster(), 4))
    other = build_topology(cluster(), 4)
    with pytest.raises(ConfigError, match="topology"):
        run_message([_phase("allgatherv/ring", 4)], other, cache=cache)


def test_event_count_is_the_same_for_the_same_run_and_adds_up():
    topo = build_topology(cluster(), 4)
    ph = _phase("allgatherv/ring", 4)
    one: dict[str, int] = {}
    run_message([ph], topo, stats=one)
    two: dict[str, int] = {}
    run_message([ph], topo, stats=two)
    run_message([ph], topo, stats=two)
    # 4 ranks x 3 rounds = 12 flows; every flow needs at least its arrival event
    assert one["flows"] == 12 and one["events"] >= 12
    assert two == {"events": 2 * one["events"], "flows": 24}


def test_shift_invariance_by_hand():
    """ScheduleTables.shift_invariant(d), from its definition: moving every rank by d (mod P) maps
    each round onto itself, over routes of the same bandwidth and latency, and only for an
    all-permutation schedule of one unit per rank with d dividing P.

    * ring allgatherv, P = 8, star: every shift by a divisor of 8 (1, 2, 4, 8), none by 3;
    * the same ring on a leaf-spine of two leaves of 4 hosts, ranks packed: only the
      shifts by 4 and 8 map the leaves onto each other (rank 3 → 4 crosses the spine,
      rank 4 → 5 does not, so a shift by 1 or 2 moves a crossing hop onto a local one);
    * the direct allgatherv (not a permutation) and the padded one (P + 1 units): never."""
    from simhelpers import cluster, leaf_spine

    from vgcsim.simulator.collectives import get_schedule
    from vgcsim.simulator.paths.plan import RunCache
    from vgcsim.simulator.topology import build_topology

    ring = get_schedule("allgatherv/ring", 8)
    star = RunCache(build_topology(cluster(), 8)).tables(ring)
    assert [d for d in range(1, 9) if star.shift_invariant(d)] == [1, 2, 4, 8]
    leaves = build_topology(cluster(leaf_spine(4, placement="packed")), 8)
    assert [d for d in range(1, 9) if RunCache(leaves).tables(ring).shift_invariant(d)] == [4, 8]
    for key in ("allgatherv/direct", "allgatherv/padded"):
        tab = RunCache(build_topology(cluster(), 4)).tables(get_schedule(key, 4))
        assert [d for d in range(1, 5) if tab.shift_invariant(d)] == [], key
