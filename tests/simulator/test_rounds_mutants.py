"""The round path (vgcsim.simulator.rounds.run_rounds) on small hand-built rounds: where it
answers, the message level's numbers; where a flow starts on a channel still in use, None.

Reference: the message level (``run_message``), equal to 1e-12 wherever run_rounds returns a
result, and for every refusal the isolated evaluation (``check=False``) differing from the
message level (the rounds really shared a channel), or the documented check itself (a flow
starting before the last byte of an earlier flow on its channel left). Numbers are dyadic:
bandwidth 2^20 B/s, link latency 2^-10 s.

The *dumbbell*: hosts 0 .. P/2-1 on a left switch, the others on a right switch, every host
link and the middle link of bandwidth B; a left -> right flow crosses the sender's uplink,
the middle (left -> right direction) and the receiver's downlink (three cables).
"""

from __future__ import annotations

import logging
import re
import warnings

import numpy as np
import pytest
from simhelpers import cluster
from vgcsim.simulator.collectives import Round, Schedule, get_schedule, unit_sizes
from vgcsim.simulator.engine import Phase, run_message
from vgcsim.simulator.rounds import RoundCache, run_rounds
from vgcsim.simulator.topology import build_topology

from vgcsim.core.errors import ConfigError

B = 2.0**20
L = 2.0**-10
N = 2.0**16  # a "big" message: N / B = 1/16 s
ROUTE = 3 * L  # host -> left -> right -> host


def _dumbbell(p: int, latency_s: float = L, slow_host: int | None = None):
    hosts = [f"h{i}" for i in range(p)]
    links = [
        {
            "a": h,
            "b": "left" if i < p // 2 else "right",
            "bandwidth": B / 2 if i == slow_host else B,
            "latency": latency_s,
        }
        for i, h in enumerate(hosts)
    ]
    links.append({"a": "left", "b": "right", "bandwidth": B, "latency": latency_s})
    return build_topology(cluster({"kind": "graph", "hosts": hosts, "links": links}), p)


def _schedule(p: int, rounds: list[list[tuple[int, int]]], reduce: bool = False) -> Schedule:
    """Rounds of (src, dst) flows; flow f of round r sends its own unit (count 1), so the
    unit sizes are the flows' sizes in order."""
    out, lo = [], 0
    for flows in rounds:
        a = np.asarray(flows, dtype=np.int64).reshape(-1, 2)
        n = len(a)
        out.append(
            Round(
                a[:, 0].copy(), a[:, 1].copy(), np.arange(lo, lo + n), np.ones(n, np.int64), reduce
            )
        )
        lo += n
    return Schedule("test/hand", p, tuple(out), lo, False)


def _exact(phases, topo, **kw) -> np.ndarray:
    got = run_rounds(phases, topo, **kw)
    assert got is not None
    np.testing.assert_allclose(got, run_message(phases, topo, **kw), rtol=1e-12, atol=0)
    return got


def _overlap(phases, topo, **kw) -> None:
    """run_rounds refuses, and the rounds really shared a channel: isolated rounds differ
    from the message level."""
    assert run_rounds(phases, topo, **kw) is None
    approx = run_rounds(phases, topo, check=False, **kw)
    assert not np.allclose(approx, run_message(phases, topo, **kw), rtol=1e-9, atol=0)


# -- arguments -----------------------------------------------------------------------------


def test_without_gamma_a_reducing_round_costs_no_reduction_time():
    """Reference: hand-worked ring allreduce on a star (every hop alone on its cables) and
    the message level, both with the default gamma of 0: 2(P-1) rounds of N/P bytes, each
    taking (N/P)/B plus the host -> switch -> host latency."""
    p = 4
    topo = build_topology(cluster(bandwidth_Bps=B, latency_s=L), p)
    s = get_schedule("allreduce/ring", p)
    ph = [Phase(np.zeros(p), s, unit_sizes(s, N))]
    got = _exact(ph, topo)
    hop = topo.route(0, 1).latency_s
    np.testing.assert_allclose(got[0], 2 * (p - 1) * (N / p / B + hop), rtol=1e-12)


def test_one_byte_received_in_a_reducing_round_costs_gamma():
    """Reference: the message level (γ × received bytes after every reducing round), with
    blocks of exactly 1 byte: ring allreduce of 4 bytes over 4 ranks, γ = 2^-12 s/B."""
    p = 4
    topo = build_topology(cluster(bandwidth_Bps=B, latency_s=L), p)
    s = get_schedule("allreduce/ring", p)
    ph = [Phase(np.zeros(p), s, unit_sizes(s, 4.0))]
    assert np.all(unit_sizes(s, 4.0) == 1.0)
    _exact(ph, topo, gamma_s_per_byte=2.0**-12)


def test_an_unknown_semantics_is_named_in_the_refusal():
    """Reference: the project's standard unknown-name message."""
    topo = _dumbbell(4)
    ph = [Phase(np.zeros(4), _schedule(4, [[(0, 2)]]), np.ones(1))]
    with pytest.raises(ConfigError, match=r"^unknown message semantics 'lazy'; valid: "):
        run_rounds(ph, topo, semantics="lazy")


def test_a_cache_of_another_topology_is_refused_with_its_message():
    topo = _dumbbell(4)
    ph = [Phase(np.zeros(4), _schedule(4, [[(0, 2)]]), np.ones(1))]
    msg = "a RoundCache serves the topology it was made for, not another one"
    with pytest.raises(ConfigError, match="^" + re.escape(msg) + "$"):
        run_rounds(ph, topo, cache=RoundCache(_dumbbell(4)))


# -- the isolation check -------------------------------------------------------------------


def _ahead(prefix: bool) -> tuple[Schedule, np.ndarray]:
    """Round A: 0 -> 2 (N bytes) and 1 -> 3 (N/64) share the middle; round B: 1 -> 3 again
    (N), which starts when the small message has arrived while 0 -> 2 still sends. With
    ``prefix``, a first round 2 -> 0 (1 byte) whose channels no other flow crosses."""
    rounds = [[(0, 2), (1, 3)], [(1, 3)]]
    sizes = [N, N / 64, N]
    if prefix:
        rounds, sizes = [[(2, 0)], *rounds], [1.0, *sizes]
    return _schedule(4, rounds), np.array(sizes)


@pytest.mark.parametrize("prefix", (False, True))
def test_a_rank_that_runs_ahead_onto_a_channel_of_two_senders_is_refused(prefix):
    """The middle (left -> right) has exactly two senders and two receivers: it must be
    watched; with an unwatched first round, the later rounds must be watched still."""
    s, sizes = _ahead(prefix)
    _overlap([Phase(np.zeros(4), s, sizes)], _dumbbell(4))


def test_the_refusal_names_the_phase_and_round(caplog):
    """Reference: the documented debug line of a refusal (phase label, round index)."""
    s, sizes = _ahead(False)
    with caplog.at_level(logging.DEBUG, logger="vgcsim.simulator.rounds"):
        assert run_rounds([Phase(np.zeros(4), s, sizes, "bucket7")], _dumbbell(4)) is None
    msgs = [r.getMessage() for r in caplog.records if r.name == "vgcsim.simulator.rounds"]
    assert msgs == ["bucket7 round 1: a flow starts on a channel still in use"]


def test_a_flow_that_starts_while_the_last_synced_round_still_sends_is_refused():
    """Two equal rounds 0 -> 3, 1 -> 4 (in step: one bundle on the middle), then a round
    2 -> 5 from an idle rank, which starts at 0 while the second round still sends."""
    s = _schedule(6, [[(0, 3), (1, 4)], [(0, 3), (1, 4)], [(2, 5)]])
    _overlap([Phase(np.zeros(6), s, np.full(5, N))], _dumbbell(6))


def test_every_schedule_of_the_phases_is_checked():
    """The refusing schedule first, then a one-flow schedule: both are watched."""
    s, sizes = _ahead(False)
    other = _schedule(4, [[(0, 2)]])
    phases = [Phase(np.zeros(4), s, sizes), Phase(np.zeros(4), other, np.array([N]))]
    _overlap(phases, _dumbbell(4))


def test_one_cache_serves_repeated_and_growing_lists_of_schedules():
    """Reference: a fresh cache per call (and the message level). The same cache is given
    one schedule of two route patterns twice, then that schedule and another."""
    topo = _dumbbell(4)
    s = _schedule(4, [[(0, 2), (1, 3)], [(2, 0), (3, 1)], [(0, 2), (1, 3)]])
    other = _schedule(4, [[(0, 3)]])
    one = [Phase(np.zeros(4), s, np.full(6, N))]
    two = [*one, Phase(np.full(4, 1.0), other, np.array([N]))]
    cache = RoundCache(topo)
    for phases in (one, one, two, one):
        got = run_rounds(phases, topo, cache=cache)
        assert got is not None
        np.testing.assert_array_equal(got, run_rounds(phases, topo))
        np.testing.assert_allclose(got, run_message(phases, topo), rtol=1e-12)


# -- empty messages occupy no channel --------------------------------------------------------


def test_an_empty_message_onto_a_busy_channel_is_accepted():
    """0 -> 3 (N) and 1 -> 4 (N/64) share the middle; then 1 -> 4 sends 0 bytes while
    0 -> 3 still sends: an empty message takes no channel, so the rounds are isolated."""
    s = _schedule(6, [[(0, 3), (1, 4)], [(1, 4)]])
    _exact([Phase(np.zeros(6), s, np.array([N, N / 64, 0.0]))], _dumbbell(6))


@pytest.mark.parametrize("second", (N, 1.0))
def test_a_flow_beside_an_empty_one_onto_a_busy_channel_is_refused(second):
    """As above, but the second round also has a non-empty 1 -> 4 (N, or 1 byte) beside an
    empty 2 -> 5: the non-empty one starts on the busy middle (for 1 byte: the documented
    check, a flow starting before the channel's last byte left)."""
    s = _schedule(6, [[(0, 3), (1, 4)], [(1, 4), (2, 5)]])
    ph = [Phase(np.zeros(6), s, np.array([N, N / 64, second, 0.0]))]
    if second == N:
        _overlap(ph, _dumbbell(6))
    else:
        assert run_rounds(ph, _dumbbell(6)) is None


def test_a_late_empty_message_does_not_hold_its_channel():
    """Rank 0 is ready at 1/4 s and sends 0 bytes to 3; 1 -> 4 (N/64) shares the middle
    from 0. The next round's 1 -> 4 (N) starts long before 1/4 s: accepted, as the empty
    message occupied nothing."""
    s = _schedule(6, [[(0, 3), (1, 4)], [(1, 4)]])
    ready = np.array([0.25, 0, 0, 0, 0, 0])
    _exact([Phase(ready, s, np.array([0.0, N / 64, N]))], _dumbbell(6))


def test_a_channel_emptied_only_by_a_non_empty_flow_beside_an_empty_one_is_watched():
    """0 -> 3 sends 0 bytes, 1 -> 4 sends N; the next round's 0 -> 3 (N) starts after the
    empty message arrived, while 1 -> 4 still sends on the middle: refused."""
    s = _schedule(6, [[(0, 3), (1, 4)], [(0, 3)]])
    _overlap([Phase(np.zeros(6), s, np.array([0.0, N, N]))], _dumbbell(6))


def test_a_one_byte_flow_beside_an_empty_one_still_holds_its_channel():
    """0 -> 3 sends 0 bytes, 1 -> 4 sends 1 byte from 1/4 s (rank 1 ready then); the next
    round's 0 -> 3 (N = 1/16 s) starts at about one route latency: before the 1-byte
    flow's last byte left, so the check refuses, and the two flows really share the
    middle at the message level."""
    s = _schedule(6, [[(0, 3), (1, 4)], [(0, 3)]])
    ready = np.array([0, 0.25, 0, 0, 0, 0])
    ph = [Phase(ready, s, np.array([0.0, 1.0, 4 * N]))]
    _overlap(ph, _dumbbell(6))


# -- zero latency: a round starts exactly when the previous one's last byte left ------------


@pytest.mark.parametrize("semantics", ("rendezvous", "eager"))
def test_with_zero_latency_back_to_back_rounds_are_isolated(semantics):
    """With no latency a rank enters the next round at the instant its flows' last bytes
    left: a flow starting exactly then does not share the channel (strict inequality)."""
    topo = _dumbbell(4, latency_s=0.0)
    s = _schedule(4, [[(0, 2), (1, 3)], [(0, 2), (1, 3)], [(0, 2)]])
    _exact([Phase(np.zeros(4), s, np.full(5, N))], topo, semantics=semantics)


# -- event stepping --------------------------------------------------------------------------


def test_one_byte_flows_are_stepped_like_any_other():
    """Reference: hand-worked fluid sharing. A (2 bytes) starts at 0 alone at B; B (1 byte)
    starts at 1/B when A has 1 byte left; both then get B/2 and end together at 3/B."""
    s = _schedule(4, [[(0, 2), (1, 3)]])
    ready = np.array([0, 1 / B, 0, 0])
    got = _exact([Phase(ready, s, np.array([2.0, 1.0]))], _dumbbell(4))
    np.testing.assert_allclose(got[0], 3 / B + ROUTE, rtol=1e-12)


def test_empty_messages_starting_apart_cost_only_the_latency():
    """Reference: hand. Two empty messages sharing the middle, their senders ready at 0 and
    1/32 s: each arrives one route latency after it starts."""
    s = _schedule(4, [[(0, 2), (1, 3)]])
    ready = np.array([0, 1 / 32, 0, 0])
    got = _exact([Phase(ready, s, np.zeros(2))], _dumbbell(4))
    np.testing.assert_allclose(got[0], [ROUTE, 1 / 32 + ROUTE, ROUTE, 1 / 32 + ROUTE])


def test_bundles_of_different_widths_are_solved_without_floating_point_warnings():
    """0 -> 3, 1 -> 4, 2 -> 5 share the middle left -> right (three flows), 3 -> 0 crosses
    it alone right -> left: bundles of widths 3 and 1, solved together (the narrow one
    padded twice); no warning may escape, and the ends are the message level's."""
    s = _schedule(6, [[(0, 3), (1, 4), (2, 5), (3, 0)]])
    ph = [Phase(np.zeros(6), s, np.array([N, N / 2, N / 4, N]))]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = run_rounds(ph, _dumbbell(6))
    assert got is not None
    np.testing.assert_allclose(got, run_message(ph, _dumbbell(6)), rtol=1e-12)


def test_rounds_of_one_pattern_without_a_bundle_equal_the_message_level():
    """Host 1's link has B/2: 0 -> 2 and 1 -> 3 share the middle with unequal private caps
    (no bundle), in two rounds of the same pattern."""
    topo = _dumbbell(4, slow_host=1)
    s = _schedule(4, [[(0, 2), (1, 3)], [(0, 2), (1, 3)]])
    _exact([Phase(np.zeros(4), s, np.full(4, N))], topo)


# -- flow sizes -----------------------------------------------------------------------------


def test_a_flow_of_several_units_carries_their_sum():
    """Reference: hand, on a star. Round 1: 0 -> 1 carries units 0, 1 (N + N/2); round 2:
    1 -> 0 carries units 2, 3 (N/4 + N/8). Each message alone on its cables."""
    p = 2
    topo = build_topology(cluster(bandwidth_Bps=B, latency_s=L), p)
    one = np.ones(1, np.int64)
    rounds = (
        Round(np.array([0]), np.array([1]), np.array([0]), 2 * one),
        Round(np.array([1]), np.array([0]), np.array([2]), 2 * one),
    )
    s = Schedule("test/two_units", p, rounds, 4, False)
    got = _exact([Phase(np.zeros(p), s, np.array([N, N / 2, N / 4, N / 8]))], topo)
    hop = topo.route(0, 1).latency_s
    np.testing.assert_allclose(got[0], (1.5 * N + 0.375 * N) / B + 2 * hop, rtol=1e-12)


def test_a_block_index_written_circularly_names_the_same_unit():
    """Reference: hand, on a star. Round 1 sends unit 2 of 2 units (circularly unit 0, N
    bytes), round 2 unit 1 (N/4)."""
    p = 2
    topo = build_topology(cluster(bandwidth_Bps=B, latency_s=L), p)
    one = np.ones(1, np.int64)
    rounds = (
        Round(np.array([0]), np.array([1]), np.array([2]), one),
        Round(np.array([1]), np.array([0]), np.array([1]), one),
    )
    s = Schedule("test/circular", p, rounds, 2, False)
    got = _exact([Phase(np.zeros(p), s, np.array([N, N / 4]))], topo)
    hop = topo.route(0, 1).latency_s
    np.testing.assert_allclose(got[0], 1.25 * N / B + 2 * hop, rtol=1e-12)


def test_a_one_rank_collective_finishes_at_its_ready_time_on_a_reused_cache():
    """Reference: hand. With one rank a collective has no rounds: the rank finishes each
    phase at its ready time, on the first and on a repeated call with the same cache."""
    topo = build_topology(cluster(bandwidth_Bps=B, latency_s=L), 1)
    s = get_schedule("allreduce/ring", 1)
    assert s.rounds == ()
    cache = RoundCache(topo)
    phases = [Phase(np.array([0.5]), s, unit_sizes(s, N))]
    for _ in range(2):
        got = run_rounds(phases, topo, cache=cache)
        assert got is not None and got.tolist() == [[0.5]]


def _star_two_rounds(lo, count, n_units, unit_order=None) -> tuple[Schedule, object]:
    """Two rounds on a 2-host star: 0 -> 1 then 1 -> 0, flow r with ``lo[r]``, ``count[r]``."""
    topo = build_topology(cluster(bandwidth_Bps=B, latency_s=L), 2)
    rounds = tuple(
        Round(np.array([a]), np.array([1 - a]), np.array([lo[a]]), np.array([count[a]]))
        for a in (0, 1)
    )
    return Schedule("test/star", 2, rounds, n_units, False, unit_order), topo


def test_a_flow_of_zero_units_is_an_empty_message():
    """Reference: hand. Round 1 carries unit 0 (N bytes), round 2 zero units from unit 1:
    an empty message, which costs only the latency."""
    s, topo = _star_two_rounds([0, 1], [1, 0], 2)
    got = _exact([Phase(np.zeros(2), s, np.array([N, N / 4]))], topo)
    hop = topo.route(0, 1).latency_s
    np.testing.assert_allclose(got[0], N / B + 2 * hop, rtol=1e-12)


def test_blocks_are_read_through_the_schedules_unit_order():
    """Reference: hand. unit_order [1, 0]: block 0 of the schedule is unit 1 (N/4 bytes);
    both rounds send block 0, so each carries N/4."""
    s, topo = _star_two_rounds([0, 0], [1, 1], 2, np.array([1, 0]))
    got = _exact([Phase(np.zeros(2), s, np.array([N, N / 4]))], topo)
    hop = topo.route(0, 1).latency_s
    np.testing.assert_allclose(got[0], 0.5 * N / B + 2 * hop, rtol=1e-12)


def test_flows_of_a_bundle_whose_sizes_differ_by_a_sliver_end_apart():
    """Reference: hand-worked processor sharing and the message level. 0 -> 2 (N bytes)
    and 1 -> 3 (N + N/2^33) share the middle at B/2 each until the first ends at 2N/B; the
    second then sends its last N/2^33 = 2^-17 bytes alone at B, ending 2^-37 s later (every
    number dyadic: the sums are exact)."""
    s = _schedule(4, [[(0, 2), (1, 3)]])
    ph = [Phase(np.zeros(4), s, np.array([N, N + N * 2.0**-33]))]
    got = _exact(ph, _dumbbell(4))
    first, second = 2 * N / B + ROUTE, 2 * N / B + 2.0**-37 + ROUTE
    assert got[0].tolist() == [first, second, first, second]


def test_an_empty_round_does_not_hide_a_busy_channel_from_the_next_round():
    """0 -> 3 sends N on the middle; then 1 -> 4 sends an empty message (occupies nothing)
    and, in the next round of the same pattern, N bytes: that flow starts one route latency
    in, while 0 -> 3 still sends on the middle: refused."""
    s = _schedule(6, [[(0, 3)], [(1, 4)], [(1, 4)]])
    _overlap([Phase(np.zeros(6), s, np.array([N, 0.0, N]))], _dumbbell(6))


def test_an_empty_round_opening_a_phase_does_not_hide_a_busy_channel():
    """As above across phases: phase 1 is 0 -> 3 (N bytes); phase 2 is two rounds 1 -> 4,
    the first empty, the second N bytes, starting while 0 -> 3 still sends: refused."""
    y = _schedule(6, [[(0, 3)]])
    x = _schedule(6, [[(1, 4)], [(1, 4)]])
    phases = [Phase(np.zeros(6), y, np.array([N])), Phase(np.zeros(6), x, np.array([0.0, N]))]
    _overlap(phases, _dumbbell(6))


def test_a_bundle_that_starts_together_keeps_exact_ends_beside_one_that_does_not():
    """The sliver case above (0 -> 3, 1 -> 4 starting together, sizes N and N + N/2^33)
    in a round that also has a bundle whose flows start apart (4 -> 1 at 0, 5 -> 2 at
    2^-6 s, N/4 each, right -> left): the first bundle's ends are still the message
    level's, to 1e-12 (a sliver dropped would be off by 6e-11)."""
    s = _schedule(6, [[(0, 3), (1, 4), (4, 1), (5, 2)]])
    ready = np.array([0, 0, 0, 0, 0, 2.0**-6])
    ph = [Phase(ready, s, np.array([N, N + N * 2.0**-33, N / 4, N / 4]))]
    got = _exact(ph, _dumbbell(6))
    assert got[0][0] == 2 * N / B + ROUTE
