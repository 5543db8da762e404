"""Many steps at once on the fast path: bit for bit what run_collective gives for each step alone,
with the rank-shift symmetry used only where it holds."""

from __future__ import annotations

import numpy as np
import pytest
from simhelpers import cluster

from vgcsim.simulator.collectives import get_schedule, unit_sizes
from vgcsim.simulator.paths.collective import _period, run_collective, run_collective_steps
from vgcsim.simulator.paths.plan import Phase, RunCache
from vgcsim.simulator.topology import build_topology

GAMMA = 1e-11


def _steps(rng, p: int, periodic: bool, n: int = 4):
    """(ready [n, P], whole-byte sizes [n, P]): repeating every 4 ranks, or not at all."""
    if periodic:
        sizes = np.tile(rng.integers(1, 10**6, (n, 4)).astype(float), p // 4)
        ready = np.tile(rng.uniform(0, 1e-3, (n, 1)), p)
    else:
        sizes = rng.integers(1, 10**6, (n, p)).astype(float)
        ready = rng.uniform(0, 1e-3, (n, p))
    return ready, sizes


@pytest.mark.parametrize(
    "key",
    [
        "allgatherv/ring",
        "allgatherv/bruck",
        "allgatherv/recursive_doubling",
        "allreduce/ring",
        "allreduce/recursive_doubling",
    ],
)
@pytest.mark.parametrize("semantics", ["rendezvous", "eager"])
@pytest.mark.parametrize("periodic", [False, True])
def test_every_step_equals_run_fast_alone(key, semantics, periodic):
    rng = np.random.default_rng(len(key) + 7 * periodic)
    p = 16
    topo = build_topology(cluster(gamma_s_per_byte=GAMMA), p)
    cache = RunCache(topo)
    header, data = get_schedule("allgatherv/ring", p), get_schedule(key, p)
    ready, sizes = _steps(rng, p, periodic)
    units = np.stack([unit_sizes(data, 4e6 if data.allreduce else s) for s in sizes])
    heads = np.full((len(ready), p), 8.0)
    got = run_collective_steps(
        [header, data],
        [ready, ready + 1e-4],
        [heads, units],
        topo,
        semantics=semantics,
        gamma_s_per_byte=GAMMA,
        cache=cache,
    )
    assert got.shape == (2, len(ready), p)
    for i in range(len(ready)):
        alone = run_collective(
            [Phase(ready[i], header, heads[i]), Phase(ready[i] + 1e-4, data, units[i])],
            topo,
            semantics=semantics,
            gamma_s_per_byte=GAMMA,
            check_overlap=False,
        )
        np.testing.assert_array_equal(got[:, i], alone)


def test_the_symmetry_is_used_only_where_inputs_and_schedule_repeat():
    p = 16
    rng = np.random.default_rng(1)
    topo = build_topology(cluster(), p)
    cache = RunCache(topo)
    ring = cache.tables(get_schedule("allgatherv/ring", p))
    ready, sizes = _steps(rng, p, periodic=True)
    assert _period(p, [ready], [sizes], [ring]) == 4
    assert _period(p, [ready], [np.full_like(sizes, 8.0)], [ring]) == 1
    # a rank out of step, a size that is not whole bytes: no symmetry
    late = ready.copy()
    late[0, 5] += 1e-6
    assert _period(p, [late], [sizes], [ring]) == p
    assert _period(p, [ready], [sizes + 0.5], [ring]) == p
    # recursive doubling's partners are i XOR 2^k: a shift by 4 is not a symmetry of it
    rd = cache.tables(get_schedule("allgatherv/recursive_doubling", p))
    assert not rd.shift_invariant(4) and rd.shift_invariant(16)
    assert ring.shift_invariant(1)


def test_a_fabric_whose_routes_differ_by_rank_is_not_shift_invariant():
    spread = {
        "kind": "leaf_spine",
        "hosts_per_leaf": 4,
        "spines": 1,
        "oversubscription": 4.0,
        "placement": "packed",
    }
    p = 16
    topo = build_topology(cluster(spread), p)
    ring = RunCache(topo).tables(get_schedule("allgatherv/ring", p))
    # ranks 3 -> 4 cross an uplink, ranks 0 -> 1 do not: only whole leaves shift onto each other
    assert not ring.shift_invariant(1) and not ring.shift_invariant(2)
    assert ring.shift_invariant(4)


def test_schedules_with_a_round_that_is_not_a_permutation_are_refused():
    p = 8
    topo = build_topology(cluster(), p)
    direct = get_schedule("allgatherv/direct", p)
    ready = np.zeros((2, p))
    units = np.ones((2, p))
    assert run_collective_steps([direct], [ready], [units], topo) is None
