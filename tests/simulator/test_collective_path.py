"""The collective-level path (`vgcsim.simulator.paths.collective`): its checks, the run cache and
the contention classes."""

from __future__ import annotations

import numpy as np
import pytest
from simhelpers import cluster

from vgcsim.core.errors import ConfigError
from vgcsim.simulator.collectives import Round, Schedule, get_schedule
from vgcsim.simulator.paths.collective import (
    _exact_sums,
    _period,
    contention_free,
    run_collective,
    run_collective_steps,
)
from vgcsim.simulator.paths.plan import Phase, RunCache
from vgcsim.simulator.topology import build_topology

# Collective-level path numbers worked by hand on tiny schedules (1 B/s links, zero latency, whole
# bytes, so every time is an exact small float): eager overlap detection at its boundary, the
# γ term of reducing rounds on both fast paths, unit order on the stacked path, the defaults,
# the contention verdicts and the rank-shift period of the many-steps path.


def _topo(p: int, topology: dict | None = None):
    """A 1 B/s, zero-latency cluster: a transfer of n bytes takes n seconds."""
    return build_topology(cluster(topology, bandwidth_Bps=1.0, latency_s=0.0), p)


def _rnd(src, dst, lo, count, reduce=False) -> Round:
    a = [np.asarray(x, dtype=np.int64) for x in (src, dst, lo, count)]
    return Round(*a, reduce=reduce)


def _sched(p, rounds, n_units, unit_order=None, allreduce=False) -> Schedule:
    order = None if unit_order is None else np.asarray(unit_order, dtype=np.int64)
    return Schedule("test/hand", p, tuple(rounds), n_units, allreduce, order)


# Two rounds on P = 3: every rank i sends its own unit to i + 1, then to i - 1.
def _there_and_back() -> Schedule:
    r1 = _rnd([0, 1, 2], [1, 2, 0], [0, 1, 2], [1, 1, 1])
    r2 = _rnd([0, 1, 2], [2, 0, 1], [0, 1, 2], [1, 1, 1])
    return _sched(3, [r1, r2], 3)


def test_eager_touching_messages_are_not_an_overlap():
    """Eager, ready 0, 1-byte units: round 1 sends end at t = 1 and every rank is at 1; round 2
    starts at exactly 1, when the previous message into each receiver has just finished
    (touching, not overlapping), so the fast path holds and every rank ends at 2 (hand)."""
    topo = _topo(3)
    ph = Phase(np.zeros(3), _there_and_back(), np.ones(3))
    got = run_collective([ph], topo, semantics="eager", check_overlap=True)
    assert got is not None
    np.testing.assert_array_equal(got[0], [2.0, 2.0, 2.0])


def test_eager_overlapping_messages_refuse_the_fast_path_by_default():
    """Eager, ready (0, 0, 10): rank 2's round-1 message into rank 0 is sent over [10, 11],
    and rank 1 (at 1 after round 1) sends its round-2 message into rank 0 at 1 < 11: two
    messages into rank 0 overlap, so run_collective (overlap check on by default) returns None."""
    topo = _topo(3)
    ph = Phase(np.array([0.0, 0.0, 10.0]), _there_and_back(), np.ones(3))
    assert run_collective([ph], topo, semantics="eager") is None


def test_eager_touching_messages_on_a_partial_round_are_not_an_overlap():
    """Rounds that are not permutations (0 -> 1, then 2 -> 1), eager, ready (0, 0, 1): the first
    message into rank 1 is sent over [0, 1], the second starts at 1 (touching): no overlap;
    ranks end at (1, 2, 2) by hand. With ready (0, 0, 0) the second starts at 0 < 1: None."""
    topo = _topo(3)
    s = _sched(3, [_rnd([0], [1], [0], [1]), _rnd([2], [1], [2], [1])], 3)
    got = run_collective([Phase(np.array([0.0, 0.0, 1.0]), s, np.ones(3))], topo, semantics="eager")
    assert got is not None
    np.testing.assert_array_equal(got[0], [1.0, 2.0, 2.0])
    assert run_collective([Phase(np.zeros(3), s, np.ones(3))], topo, semantics="eager") is None


# One reducing exchange on P = 2: rank 0 sends unit 0 (1 byte), rank 1 unit 1 (2 bytes).
def _exchange(reduce=True) -> Schedule:
    return _sched(2, [_rnd([0, 1], [1, 0], [0, 1], [1, 1], reduce=reduce)], 2, allreduce=True)


@pytest.mark.parametrize("check_overlap", [True, False])
def test_reducing_round_adds_gamma_times_received_bytes(check_overlap):
    """Rendezvous, γ = 1/2 s/B: both transfers start at 0 and end at 1 and 2, both ranks wait for
    the later (2), then rank 0 reduces the 2 bytes it received (+1 s) and rank 1 its 1 byte
    (+0.5 s): (3, 2.5) by hand, on the per-round path and on the stacked path alike."""
    topo = _topo(2)
    ph = Phase(np.zeros(2), _exchange(), np.array([1.0, 2.0]))
    got = run_collective([ph], topo, gamma_s_per_byte=0.5, check_overlap=check_overlap)
    np.testing.assert_array_equal(got[0], [3.0, 2.5])


def test_many_steps_reducing_round_adds_gamma_and_defaults_to_rendezvous():
    """run_collective_steps on the same exchange, γ = 1/2 s/B, semantics left to its default
    (rendezvous): (3, 2.5) by hand; with γ left to its default (0): (2, 2)."""
    topo = _topo(2)
    s = _exchange()
    ready, units = np.zeros((1, 2)), np.array([[1.0, 2.0]])
    got = run_collective_steps([s], [ready], [units], topo, gamma_s_per_byte=0.5)
    np.testing.assert_array_equal(got[0, 0], [3.0, 2.5])
    got0 = run_collective_steps([s], [ready], [units], topo)
    np.testing.assert_array_equal(got0[0, 0], [2.0, 2.0])


@pytest.mark.parametrize("check_overlap", [True, False])
def test_gamma_defaults_to_zero(check_overlap):
    """run_collective without γ: no reduction time, both ranks end when the 2-byte transfer does (2)."""
    topo = _topo(2)
    got = run_collective(
        [Phase(np.zeros(2), _exchange(), np.array([1.0, 2.0]))], topo, check_overlap=check_overlap
    )
    np.testing.assert_array_equal(got[0], [2.0, 2.0])


def test_unit_order_is_applied_on_every_fast_path():
    """P = 3, rank i sends ordered unit i to i + 1, unit order (2, 0, 1), unit sizes (1, 2, 4):
    ordered sizes (4, 1, 2), so rendezvous transfers end at 4 (0 -> 1), 1 (1 -> 2), 2 (2 -> 0)
    and a rank ends at the later of its send and its receive: (4, 4, 2) by hand. (In unit
    order (1, 2, 4) it would be (4, 2, 4).) The same on the per-round, stacked and many-steps
    paths."""
    topo = _topo(3)
    s = _sched(3, [_rnd([0, 1, 2], [1, 2, 0], [0, 1, 2], [1, 1, 1])], 3, unit_order=[2, 0, 1])
    units = np.array([1.0, 2.0, 4.0])
    for check in (True, False):
        got = run_collective([Phase(np.zeros(3), s, units)], topo, check_overlap=check)
        np.testing.assert_array_equal(got[0], [4.0, 4.0, 2.0])
    steps = run_collective_steps([s], [np.zeros((1, 3))], [units[None, :]], topo)
    np.testing.assert_array_equal(steps[0, 0], [4.0, 4.0, 2.0])


def test_a_run_cache_of_another_topology_is_refused():
    """A RunCache serves one topology: handing it to a run on another topology is a ConfigError
    for run_collective, run_collective_steps and contention_free alike."""
    topo, other = _topo(2), _topo(2)
    cache = RunCache(other)
    s = _exchange()
    with pytest.raises(ConfigError):
        run_collective([Phase(np.zeros(2), s, np.ones(2))], topo, cache=cache)
    with pytest.raises(ConfigError):
        run_collective_steps([s], [np.zeros((1, 2))], [np.ones((1, 2))], topo, cache=cache)
    with pytest.raises(ConfigError):
        contention_free([s], topo, cache=cache)


def test_many_steps_refuse_inputs_of_another_length_than_the_schedules():
    """One list entry per schedule: a units or ready list shorter than the schedules is an
    error, not a silently shorter run leaving a phase's finish times unset."""
    topo = _topo(2)
    s = _exchange(reduce=False)
    ready, units = np.zeros((1, 2)), np.ones((1, 2))
    with pytest.raises(ValueError):
        run_collective_steps([s, s], [ready, ready], [units], topo)
    with pytest.raises(ValueError):
        run_collective_steps([s, s], [ready], [units, units], topo)
    with pytest.raises(ValueError):  # one units entry too many is refused as well
        run_collective_steps([s], [ready], [units, units], topo)


def test_ring_on_a_star_is_contention_free_by_sender():
    """Ring allgatherv on a star: every host link carries only its own host's sends (up) or
    only its neighbour's (down), so each channel has a single sender: verdict "src"."""
    p = 4
    assert contention_free([get_schedule("allgatherv/ring", p)], _topo(p)) == "src"


def test_two_senders_to_two_receivers_over_one_uplink_is_contended():
    """Leaf-spine, 2 hosts per leaf, one spine: ranks 0, 1 (leaf 0) send to ranks 2, 3 (leaf 1)
    at once, so the leaf0 -> spine0 uplink carries two senders to two receivers: not exact
    under either semantics (None). Rank 0 -> rank 2 alone: one sender per channel ("src").
    """
    spec = {"kind": "leaf_spine", "hosts_per_leaf": 2, "spines": 1, "oversubscription": 1.0}
    topo = _topo(4, spec)
    cross = _sched(4, [_rnd([0, 1], [2, 3], [0, 1], [1, 1])], 4)
    assert contention_free([cross], topo) is None
    alone = _sched(4, [_rnd([0], [2], [0], [1])], 4)
    assert contention_free([alone], topo) == "src"


def test_two_senders_to_one_receiver_is_contended_by_receiver_only():
    """Same leaf-spine: rank 2 sends to rank 0 in one round and rank 3 to rank 0 in the next, so
    the leaf1 -> spine0 uplink carries two senders but a single receiver: verdict "dst" (exact
    under rendezvous). The reverse (rank 0 to ranks 2 and 3): one sender per channel, "src"."""
    spec = {"kind": "leaf_spine", "hosts_per_leaf": 2, "spines": 1, "oversubscription": 1.0}
    topo = _topo(4, spec)
    gather = _sched(4, [_rnd([2], [0], [2], [1]), _rnd([3], [0], [3], [1])], 4)
    assert contention_free([gather], topo) == "dst"
    scatter = _sched(4, [_rnd([0], [2], [0], [1]), _rnd([0], [3], [0], [1])], 4)
    assert contention_free([scatter], topo) == "src"


def test_period_of_inputs_repeating_every_two_ranks_is_two():
    """Ring allgatherv, P = 4 on a homogeneous star, ready times (0, 1, 0, 1) and unit sizes
    (1, 2, 1, 2): shifting every rank by 2 maps the inputs onto themselves and by 1 does not,
    so the smallest period is 2 (hand); with ready times (0, 1, 2, 3) there is none: P."""
    p = 4
    topo = _topo(p)
    s = get_schedule("allgatherv/ring", p)
    tab = RunCache(topo).tables(s)
    units = np.array([[1.0, 2.0, 1.0, 2.0]])
    assert _period(p, [np.array([[0.0, 1.0, 0.0, 1.0]])], [units], [tab]) == 2
    assert _period(p, [np.array([[0.0, 1.0, 2.0, 3.0]])], [units], [tab]) == p


def test_exact_sums_bound_is_two_to_the_53_over_the_doubled_row():
    """The fast path sums each row of unit sizes twice over; those partial sums are exact
    floats when the sizes are whole, non-negative and the doubled row sum is below 2**53
    (floats hold every integer up to 2**53). Zero-size units are whole and non-negative."""
    assert _exact_sums(np.array([[0.0, 0.0]]))
    assert _exact_sums(np.array([[0.0, 3.0, 5.0]]))
    assert not _exact_sums(np.array([[-1.0, 3.0]]))
    assert not _exact_sums(np.array([[0.5, 3.0]]))
    # row sum 3 * 2**50: doubled 3 * 2**51 < 2**53; exactly 2**52: doubled 2**53, not below
    assert _exact_sums(np.array([[2.0**51, 2.0**50]]))
    assert not _exact_sums(np.array([[2.0**51, 2.0**51]]))
    # the bound is per row: two rows of 3 * 2**50 each are fine although they total 3 * 2**51
    assert _exact_sums(np.array([[2.0**51, 2.0**50], [2.0**51, 2.0**50]]))


def test_leaf_spine_within_one_leaf_has_no_spine_links():
    """Leaf-spine with all P = 3 ranks on one leaf (4 hosts per leaf): no traffic leaves the
    leaf, so the topology is the 3 host cables alone, each a channel in both directions:
    2 x 3 = 6 channels, every one named after a host (hand count)."""
    spec = {"kind": "leaf_spine", "hosts_per_leaf": 4, "spines": 2, "oversubscription": 1.0}
    topo = _topo(3, spec)
    assert topo.n_channels == 6
    assert not any("spine" in name for name in topo.channel_names)
