"""The round-level path (vgcsim.simulator.paths.round) against hand-worked fluid rounds and the
message level.

Fabrics: a leaf-spine with 4 hosts per leaf, one spine and 4:1 uplinks (each leaf's uplink
carries B), ranks dealt round-robin over the leaves (``spread``: every ring hop crosses the
spine, four flows share each uplink); and a *dumbbell*: two switches, half the hosts on
each, joined by one link of bandwidth ``B`` (every cross flow shares it).
"""

from __future__ import annotations

import logging
import re
import warnings

import numpy as np
import pytest
from simhelpers import BW, cluster, leaf_spine

from vgcsim.core.errors import ConfigError
from vgcsim.simulator.collectives import (
    COLLECTIVES,
    Round,
    Schedule,
    doubled_units,
    get_schedule,
    span_bytes,
    unit_sizes,
)
from vgcsim.simulator.paths.message import run_message
from vgcsim.simulator.paths.plan import Phase
from vgcsim.simulator.paths.round import RoundCache, run_rounds
from vgcsim.simulator.replay import SimulateConfig, simulate_trace
from vgcsim.simulator.topology import build_topology
from vgcsim.traces.io import read_trace

LINK_LAT = 2.5e-6


def _leaf_spine(placement: str = "spread"):
    return cluster(leaf_spine(4, placement=placement), latency_s=LINK_LAT)


def _dumbbell(p: int, middle_Bps: float = BW):
    hosts = [f"h{i}" for i in range(p)]
    links = [
        {"a": h, "b": "left" if i < p // 2 else "right", "bandwidth": BW, "latency": LINK_LAT}
        for i, h in enumerate(hosts)
    ]
    links.append({"a": "left", "b": "right", "bandwidth": middle_Bps, "latency": LINK_LAT})
    return cluster({"kind": "graph", "hosts": hosts, "links": links})


def _one_round(p: int, flows: list[tuple[int, int]]) -> Schedule:
    """One round; flow f sends unit f (so unit sizes are the flows' sizes)."""
    a = np.asarray(flows, dtype=np.int64)
    n = len(flows)
    rnd = Round(a[:, 0].copy(), a[:, 1].copy(), np.arange(n), np.ones(n, dtype=np.int64))
    return Schedule("test/one_round", p, (rnd,), n, False)


def test_a_bottleneck_shared_by_three_flows_of_sizes_n_2n_3n():
    # dumbbell, 3 flows left -> right over a middle link of B: B/3 each until the n-flow
    # ends at 3n/B, then B/2 each until the 2n-flow ends at 3n/B + n/(B/2) = 5n/B, then the
    # 3n-flow alone at B ends at 5n/B + n/B = 6n/B; each arrives one path latency (3 cables)
    p, n = 6, 1e6
    topo = build_topology(_dumbbell(p), p)
    sched = _one_round(p, [(0, 3), (1, 4), (2, 5)])
    ph = Phase(np.zeros(p), sched, np.array([n, 2 * n, 3 * n]))
    alpha = 3 * LINK_LAT
    want = np.array([3, 5, 6, 3, 5, 6]) * n / BW + alpha
    got = run_rounds([ph], topo)
    np.testing.assert_allclose(got[0], want, rtol=1e-12)
    np.testing.assert_allclose(run_message([ph], topo)[0], want, rtol=1e-12)


def test_a_flow_that_starts_later_shares_only_from_its_start():
    # dumbbell: flow A (2n bytes) starts at 0 alone at B; flow B (n bytes) starts at n/B,
    # when A has n left; both then get B/2 and end together at n/B + n/(B/2) = 3n/B
    p, n = 4, 1e6
    topo = build_topology(_dumbbell(p), p)
    sched = _one_round(p, [(0, 2), (1, 3)])
    ready = np.array([0.0, n / BW, 0.0, 0.0])
    ph = Phase(ready, sched, np.array([2 * n, n]))
    want = np.full(p, 3 * n / BW + 3 * LINK_LAT)
    np.testing.assert_allclose(run_rounds([ph], topo)[0], want, rtol=1e-12)
    np.testing.assert_allclose(run_message([ph], topo)[0], want, rtol=1e-12)


@pytest.mark.parametrize(
    ("n_a", "t_b", "n_b", "a_end", "b_end"),
    [
        # 1e9 bytes at 1 B/s; at t_B = 999999999 s exactly 1 byte is left, which is 1e-9 of
        # the flow (tol = 1e-9 · 1e9 = 1.0 exactly): rounding residue, A ends at t_B and B
        # (2 bytes) then goes alone: t_B + 2
        (1e9, 999999999.0, 2.0, 999999999.0, 1000000001.0),
        # 1 byte at 1 B/s; at t_B = 1 − 2^-29 the 2^-29 bytes left are more than 1e-9 of it:
        # sent at 1/2 B/s beside B until 1 + 2^-29, then B (1 byte, 2^-29 sent) alone: 2.0
        (1.0, 1 - 2.0**-29, 1.0, 1 + 2.0**-29, 2.0),
    ],
    ids=["residue-at-the-tolerance-ends", "more-than-the-tolerance-is-sent"],
)
def test_a_flows_last_residue_of_1e9_of_its_size_ends_it_at_an_event(n_a, t_b, n_b, a_end, b_end):
    # the sliver rule: at an event (here B's start), a flow with at most 1e-9 of its size
    # (at least 1e-9 byte) left has ended; dumbbell with a 1 B/s middle link, A: 0 -> 2 from
    # t = 0, B: 1 -> 3 from t_B; every number dyadic or an integer, so the times are exact
    p = 4
    topo = build_topology(_dumbbell(p, middle_Bps=1.0), p)
    sched = _one_round(p, [(0, 2), (1, 3)])
    ph = Phase(np.array([0.0, t_b, 0.0, 0.0]), sched, np.array([n_a, n_b]))
    alpha = 3 * LINK_LAT
    want = np.array([a_end, b_end, a_end, b_end]) + alpha
    np.testing.assert_allclose(run_rounds([ph], topo)[0], want, rtol=1e-13)


def test_an_empty_message_changes_no_other_flow_by_a_bit():
    # A: 12345 bytes 0 -> 2 over a 3 B/s middle link from t = 0; an empty message 1 -> 3
    # posted at t = 0.1 carries no byte, so A's fluid problem has no event at 0.1: A ends at
    # 12345 / 3 exactly as without it (splitting A's progress at 0.1 would round to
    # 4115.000000000001), and the empty message arrives one path latency after its start
    p = 4
    topo = build_topology(_dumbbell(p, middle_Bps=3.0), p)
    ready = np.array([0.0, 0.1, 0.0, 0.0])
    both = Phase(ready, _one_round(p, [(0, 2), (1, 3)]), np.array([12345.0, 0.0]))
    alone = Phase(ready, _one_round(p, [(0, 2)]), np.array([12345.0]))
    got, ref = run_rounds([both], topo)[0], run_rounds([alone], topo)[0]
    assert got[[0, 2]].tolist() == ref[[0, 2]].tolist()
    assert ref[0] == pytest.approx(4115.0 + 3 * LINK_LAT, rel=1e-15)
    assert got[[1, 3]] == pytest.approx(0.1 + 3 * LINK_LAT, rel=1e-12)


@pytest.mark.parametrize("semantics", ("rendezvous", "eager"))
@pytest.mark.parametrize("key", sorted(COLLECTIVES))
def test_equal_sizes_on_a_spread_leaf_spine_equal_the_message_level(key, semantics):
    # every flow of a round starts together and has the same size: no rank runs ahead, so
    # the rounds are isolated and each is the message level's fluid problem exactly
    p = 8
    topo = build_topology(_leaf_spine(), p)
    s = get_schedule(key, p)
    ph = Phase(np.zeros(p), s, unit_sizes(s, 4e6 if s.allreduce else np.full(p, 5e5)))
    kw = {"semantics": semantics, "gamma_s_per_byte": 1e-10}
    got = run_rounds([ph], topo, **kw)
    if got is None:
        # only where an eager sender can post its next round while its previous message
        # still shares an uplink (the binomial tree's reduce into its broadcast)
        assert (key, semantics) == ("allreduce/binomial_tree", "eager")
        return
    np.testing.assert_allclose(got, run_message([ph], topo, **kw), rtol=1e-12)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("semantics", ("rendezvous", "eager"))
@pytest.mark.parametrize(
    "fabric", ("spread", "packed", "dumbbell", "star", "2 spines dmodk", "2 spines hash")
)
def test_wherever_the_check_passes_the_result_is_the_message_levels(fabric, semantics, seed):
    # random sizes and ready times, two phases back to back: whatever run_rounds returns
    # must equal the message level; where it refuses, rounds really did overlap
    p = 8
    two = {
        f"2 spines {r}": cluster(leaf_spine(2, spines=2, routing=r), latency_s=LINK_LAT)
        for r in ("dmodk", "hash")
    }
    cl = {"dumbbell": _dumbbell(p), "star": cluster(), **two}.get(fabric) or _leaf_spine(fabric)
    topo = build_topology(cl, p)
    rng = np.random.default_rng(seed)
    cache = RoundCache(topo)
    passed = 0
    for key in sorted(COLLECTIVES):
        s = get_schedule(key, p)
        phases = [
            Phase(
                rng.uniform(0, 2e-4, p) + 1e-3 * b,
                s,
                unit_sizes(s, 4e6 if s.allreduce else rng.uniform(1e5, 1e6, p)),
            )
            for b in range(2)
        ]
        kw = {"semantics": semantics, "gamma_s_per_byte": 1e-10}
        got = run_rounds(phases, topo, cache=cache, **kw)
        if got is None:
            continue
        passed += 1
        np.testing.assert_allclose(got, run_message(phases, topo, **kw), rtol=1e-12)
    assert passed >= 2  # direct (one round) always passes, and at least one more


def test_uneven_sizes_that_keep_every_leaf_in_step_equal_the_message_level():
    # two leaves (even ranks, odd ranks): with blocks alternating a, b every flow of a leaf
    # carries the same block size in every round, and each rank waits for both leaves'
    # flows, so no rank runs ahead although the two leaves' sizes differ
    p = 8
    topo = build_topology(_leaf_spine(), p)
    for key in ("allgatherv/ring", "allgatherv/bruck"):
        s = get_schedule(key, p)
        ph = Phase(np.zeros(p), s, np.array([1e5, 9e5] * 4))
        got = run_rounds([ph], topo)
        assert got is not None, key
        np.testing.assert_allclose(got, run_message([ph], topo), rtol=1e-12)


@pytest.mark.parametrize("semantics", ("rendezvous", "eager"))
@pytest.mark.parametrize("fabric", ("spread", "dumbbell"))
def test_empty_blocks_occupy_no_channel(fabric, semantics):
    # a rank with nothing to send still sends a zero-byte message: it costs the path
    # latency and shares no bandwidth, at the message level and here (sizes that keep the
    # spread leaves in step; on the dumbbell only two ring hops cross the middle)
    p = 8
    if fabric == "spread":
        topo, sizes = build_topology(_leaf_spine(), p), np.array([0, 5e5] * 4)
    else:
        topo, sizes = build_topology(_dumbbell(p), p), np.array([0, 3e5, 0, 7e5, 1e5, 0, 2e5, 0])
    for key in ("allgatherv/ring", "allgatherv/direct"):
        ph = [Phase(np.zeros(p), get_schedule(key, p), sizes.astype(float))]
        got = run_rounds(ph, topo, semantics=semantics)
        assert got is not None, key
        np.testing.assert_allclose(got, run_message(ph, topo, semantics=semantics), rtol=1e-12)


def test_an_unknown_semantics_is_refused():
    topo = build_topology(_leaf_spine(), 8)
    s = get_schedule("allgatherv/ring", 8)
    with pytest.raises(ConfigError, match="message semantics"):
        run_rounds([Phase(np.zeros(8), s, np.ones(8))], topo, semantics="lazy")


def test_ranks_running_ahead_are_refused_and_the_isolated_rounds_would_be_wrong():
    # uneven blocks around a spread ring: a rank whose small block arrived starts the next
    # round while its leaf's uplink still carries the others' flows
    p = 8
    topo = build_topology(_leaf_spine(), p)
    s = get_schedule("allgatherv/ring", p)
    ph = Phase(np.zeros(p), s, np.array([1e5, 9e5, 3e5, 6e5, 2e5, 8e5, 4e5, 5e5]))
    assert run_rounds([ph], topo) is None
    approx = run_rounds([ph], topo, check=False).max()
    exact = run_message([ph], topo).max()
    assert abs(approx / exact - 1) > 0.01


def test_a_ring_builds_one_route_pattern_for_all_its_rounds():
    p = 8
    topo = build_topology(_leaf_spine(), p)
    cache = RoundCache(topo)
    s = get_schedule("allreduce/ring", p)
    assert len({id(shape) for shape in cache.shapes(s)}) == 1
    other = RoundCache(build_topology(_leaf_spine(), p))
    ph = Phase(np.zeros(p), s, unit_sizes(s, 1e6))
    with pytest.raises(ConfigError, match="RoundCache"):
        run_rounds([ph], topo, cache=other)


def test_the_replay_takes_the_round_path_where_it_is_exact_and_says_so():
    # P = 16 on the spread leaf-spine: the sample trace's 4 workers repeat every 4 ranks,
    # and every leaf holds ranks 4 apart, so each leaf's flows stay in step: round level
    trace = read_trace("tests/data/sample_trace")
    kw = {"max_steps": 2, "per_step": True}
    cl = _leaf_spine()
    auto, _, info = simulate_trace(trace, cl, [16], SimulateConfig(path="auto", **kw))
    forced, _, _ = simulate_trace(trace, cl, [16], SimulateConfig(path="round", **kw))
    msg, _, _ = simulate_trace(trace, cl, [16], SimulateConfig(path="message", **kw))
    assert set(auto["path"]) == {"round"}
    assert info["16"]["compressed"]["round"] == 2
    assert info["16"]["compressed"]["round_refused"] == 0
    for frame in (auto, forced):
        np.testing.assert_allclose(frame["step_s"], msg["step_s"], rtol=1e-12)


def test_a_two_spine_leaf_spine_replays_at_round_level_as_the_message_level():
    # 2 spines, 8 hosts per leaf, 4:1, spread, P = 32 (4 leaves): D-mod-K sends 4 of each
    # leaf's 8 ring flows through each spine, and every leaf holds ranks of one trace worker,
    # so each uplink's flows stay in step: every step at round level, equal to the message
    # level to rounding. Hashed per flow, the spines get uneven shares, ranks of one leaf
    # drift apart and the compressed steps go to the message level.
    trace = read_trace("tests/data/sample_trace")
    kw = {"max_steps": 2, "per_step": True}
    dmodk = cluster(leaf_spine(8, spines=2), latency_s=LINK_LAT)
    auto, _, info = simulate_trace(trace, dmodk, [32], SimulateConfig(path="auto", **kw))
    msg, _, _ = simulate_trace(trace, dmodk, [32], SimulateConfig(path="message", **kw))
    assert set(auto["path"]) == {"round"}
    assert info["32"]["compressed"]["round_refused"] == 0
    np.testing.assert_allclose(auto["step_s"], msg["step_s"], rtol=1e-12)
    hashed = cluster(leaf_spine(8, spines=2, routing="hash"), latency_s=LINK_LAT)
    _, _, info = simulate_trace(trace, hashed, [32], SimulateConfig(path="auto", max_steps=1))
    assert info["32"]["compressed"]["round_refused"] == 1


def test_forcing_the_round_path_where_it_is_not_exact_is_an_error():
    trace = read_trace("tests/data/sample_trace")
    cl = _leaf_spine()
    with pytest.raises(ConfigError, match="round-level path is not exact"):
        simulate_trace(trace, cl, [8], SimulateConfig(path="round", max_steps=2))
    with pytest.raises(ConfigError, match="fair sharing"):
        simulate_trace(trace, cl, [8], SimulateConfig(path="round", mode="fifo", max_steps=1))


def test_cli_simulate_path_round(tmp_path, capsys):
    # on the 10GbE star a ring never shares a channel, so the forced round-level path runs
    # every step and reports it; under fifo sharing it is a user error (one line, exit 2)
    from vgcsim.cli import main
    from vgcsim.core.results import read_results

    args = ["simulate", "tests/data/sample_trace", "--cluster", "10GbE", "--world-sizes", "8"]
    out = tmp_path / "res"
    assert main([*args, "--path", "round", "--per-step", "-o", str(out)]) == 0
    df, header = read_results(out)
    assert set(df["path"]) == {"round"}
    assert header["options"]["paths_run"]["8"]["compressed"]["round"] >= 1
    capsys.readouterr()
    assert main([*args, "--path", "round", "--set", "mode=fifo", "-o", str(tmp_path / "x")]) == 2
    assert "fair sharing" in capsys.readouterr().err


def _schedule_bytes(topo, s, units):
    return s.round_bytes(units)


def _cache_bytes(topo, s, units):
    return RoundCache(topo).round_bytes(s, units)


@pytest.mark.parametrize("getter", [_schedule_bytes, _cache_bytes], ids=["schedule", "cache"])
@pytest.mark.parametrize("p", [2, 3, 4, 7])
@pytest.mark.parametrize("key", ["allgatherv/ring", "allgatherv/padded"])
def test_one_unit_flows_carry_exactly_their_units(key, p, getter):
    """Schedule.round_bytes and RoundCache.round_bytes (stacked rounds): where a flow carries
    one unit (every ring allgatherv round, P = 2's single round included; the padded one's
    size and data rounds), its bytes are its unit's size itself, not a difference of running
    sums: a 1-byte block after a 2^53-byte one keeps its byte (2^53 + 1 is not a double).
    Block r goes round the ring: rank i sends block (i − k) mod P in round k."""
    topo = build_topology(_leaf_spine(), p)
    s = get_schedule(key, p)
    blocks = np.array([2.0**53] + [1.0] * (p - 1))
    units = unit_sizes(s, blocks)
    got = getter(topo, s, units)
    data = s.rounds[-(p - 1) :]  # the ring's rounds (the padded schedule's last P − 1)
    for k, (rnd, fb) in enumerate(zip(data, got[-(p - 1) :], strict=True)):
        assert rnd.src.tolist() == list(range(p))
        want = units[(np.arange(p) - k) % p]
        assert np.asarray(fb).tolist() == want.tolist(), k
    if key == "allgatherv/padded":  # the size rounds: the 8-byte header after P blocks of 2^53
        for fb in got[: p - 1]:
            assert np.asarray(fb).tolist() == [8.0] * p


@pytest.mark.parametrize("getter", [_schedule_bytes, _cache_bytes], ids=["schedule", "cache"])
def test_direct_allgatherv_flows_carry_exactly_their_blocks(getter):
    """The direct allgatherv's single round: every rank sends its own block to every other
    rank, so flow (i → j) carries block i exactly, also the 1-byte blocks after 2^53."""
    p = 4
    s = get_schedule("allgatherv/direct", p)
    blocks = np.array([2.0**53, 1.0, 3.0, 1.0])
    (rnd,) = s.rounds
    (fb,) = getter(build_topology(_leaf_spine(), p), s, unit_sizes(s, blocks))
    assert np.asarray(fb).tolist() == blocks[rnd.src].tolist()
    assert sorted(zip(rnd.src.tolist(), rnd.dst.tolist(), strict=True)) == [
        (i, j) for i in range(p) for j in range(p) if i != j
    ]


def test_span_bytes_takes_one_unit_flows_as_they_are_and_sums_the_others():
    """span_bytes by hand: units [2^53, 1, 1] twice; flow (lo 1, 1 unit) is the unit itself,
    flow (lo 0, 2 units) the difference of running sums 2^53 + 1 → 2^53 (rounded to even),
    flow (lo 2, 2 units: unit 2 and, circularly, unit 0) likewise 2^53; a flow of no unit 0;
    and a round whose every flow has several units: the differences alone."""
    units = np.array([2.0**53, 1.0, 1.0])
    lo = np.array([1, 0, 2, 1])
    count = np.array([1, 2, 2, 0])
    doubled, sums = doubled_units(units)
    assert doubled.tolist() == [2.0**53, 1.0, 1.0, 2.0**53, 1.0, 1.0]
    assert sums.tolist() == [0.0, 2.0**53, 2.0**53, 2.0**53, 2.0**54, 2.0**54, 2.0**54]
    got = span_bytes(doubled, sums, lo, count)
    assert got.tolist() == [1.0, 2.0**53, 2.0**53, 0.0]
    assert span_bytes(doubled, sums, lo[:1], count[:1]).tolist() == [1.0]
    # every flow of several units: differences of running sums only (units [1, 2, 4])
    small = doubled_units(np.array([1.0, 2.0, 4.0]))
    got = span_bytes(*small, np.array([0, 1, 2]), np.array([2, 3, 2]))
    assert got.tolist() == [3.0, 7.0, 5.0]
    # per step (rows): the same flows of two steps' units at once
    two = doubled_units(np.stack((units, 2 * units)))
    assert span_bytes(*two, lo, count).tolist() == [
        [1.0, 2.0**53, 2.0**53, 0.0],
        [2.0, 2.0**54, 2.0**54, 0.0],
    ]


@pytest.mark.parametrize("key", sorted(COLLECTIVES))
def test_round_bytes_are_the_same_bits_stacked_or_per_round(key):
    """RoundCache's stacked computation gives the bits Schedule.round_bytes gives, for every
    schedule (one-unit flows and flows of several units, seeded random unit sizes over ten
    orders of magnitude) at P = 2, 5 and 8."""
    rng = np.random.default_rng(11)
    for p in (2, 5, 8):
        topo = build_topology(_leaf_spine(), p)
        s = get_schedule(key, p, gpus_per_node=2)
        n = 1 if s.allreduce else p
        sizes = rng.uniform(1.0, 10.0, n) * 10.0 ** rng.integers(0, 10, n)
        units = unit_sizes(s, sizes if not s.allreduce else sizes[0])
        want = s.round_bytes(units)
        got = RoundCache(topo).round_bytes(s, units)
        assert len(got) == len(want)
        for a, b in zip(got, want, strict=True):
            assert np.asarray(a).tobytes() == np.asarray(b).tobytes(), (key, p)


# The round path (vgcsim.simulator.paths.round.run_rounds) on small hand-built rounds: where it
# answers, the message level's numbers; where a flow starts on a channel still in use, None.
#
# Reference: the message level (``run_message``), equal to 1e-12 wherever run_rounds returns a
# result, and for every refusal the isolated evaluation (``check=False``) differing from the
# message level (the rounds really shared a channel), or the documented check itself (a flow
# starting before the last byte of an earlier flow on its channel left). Numbers are dyadic:
# bandwidth 2^20 B/s, link latency 2^-10 s.
#
# The *dumbbell*: hosts 0 .. P/2-1 on a left switch, the others on a right switch, every host
# link and the middle link of bandwidth B; a left -> right flow crosses the sender's uplink,
# the middle (left -> right direction) and the receiver's downlink (three cables).

B = 2.0**20
L = 2.0**-10
N = 2.0**16  # a "big" message: N / B = 1/16 s
ROUTE = 3 * L  # host -> left -> right -> host


def _dumbbell_topology(p: int, latency_s: float = L, slow_host: int | None = None):
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
    topo = _dumbbell_topology(4)
    ph = [Phase(np.zeros(4), _schedule(4, [[(0, 2)]]), np.ones(1))]
    with pytest.raises(ConfigError, match=r"^unknown message semantics 'lazy'; valid: "):
        run_rounds(ph, topo, semantics="lazy")


def test_a_cache_of_another_topology_is_refused_with_its_message():
    topo = _dumbbell_topology(4)
    ph = [Phase(np.zeros(4), _schedule(4, [[(0, 2)]]), np.ones(1))]
    msg = "a RoundCache serves the topology it was made for, not another one"
    with pytest.raises(ConfigError, match="^" + re.escape(msg) + "$"):
        run_rounds(ph, topo, cache=RoundCache(_dumbbell_topology(4)))


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
    _overlap([Phase(np.zeros(4), s, sizes)], _dumbbell_topology(4))


def test_the_refusal_names_the_phase_and_round(caplog):
    """Reference: the documented debug line of a refusal (phase label, round index)."""
    s, sizes = _ahead(False)
    with caplog.at_level(logging.DEBUG, logger="vgcsim.simulator.paths.round"):
        assert run_rounds([Phase(np.zeros(4), s, sizes, "bucket7")], _dumbbell_topology(4)) is None
    msgs = [r.getMessage() for r in caplog.records if r.name == "vgcsim.simulator.paths.round"]
    assert msgs == ["bucket7 round 1: a flow starts on a channel still in use"]


def test_a_flow_that_starts_while_the_last_synced_round_still_sends_is_refused():
    """Two equal rounds 0 -> 3, 1 -> 4 (in step: one bundle on the middle), then a round
    2 -> 5 from an idle rank, which starts at 0 while the second round still sends."""
    s = _schedule(6, [[(0, 3), (1, 4)], [(0, 3), (1, 4)], [(2, 5)]])
    _overlap([Phase(np.zeros(6), s, np.full(5, N))], _dumbbell_topology(6))


def test_every_schedule_of_the_phases_is_checked():
    """The refusing schedule first, then a one-flow schedule: both are watched."""
    s, sizes = _ahead(False)
    other = _schedule(4, [[(0, 2)]])
    phases = [Phase(np.zeros(4), s, sizes), Phase(np.zeros(4), other, np.array([N]))]
    _overlap(phases, _dumbbell_topology(4))


def test_one_cache_serves_repeated_and_growing_lists_of_schedules():
    """Reference: a fresh cache per call (and the message level). The same cache is given
    one schedule of two route patterns twice, then that schedule and another."""
    topo = _dumbbell_topology(4)
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
    _exact([Phase(np.zeros(6), s, np.array([N, N / 64, 0.0]))], _dumbbell_topology(6))


@pytest.mark.parametrize("second", (N, 1.0))
def test_a_flow_beside_an_empty_one_onto_a_busy_channel_is_refused(second):
    """As above, but the second round also has a non-empty 1 -> 4 (N, or 1 byte) beside an
    empty 2 -> 5: the non-empty one starts on the busy middle (for 1 byte: the documented
    check, a flow starting before the channel's last byte left)."""
    s = _schedule(6, [[(0, 3), (1, 4)], [(1, 4), (2, 5)]])
    ph = [Phase(np.zeros(6), s, np.array([N, N / 64, second, 0.0]))]
    if second == N:
        _overlap(ph, _dumbbell_topology(6))
    else:
        assert run_rounds(ph, _dumbbell_topology(6)) is None


def test_a_late_empty_message_does_not_hold_its_channel():
    """Rank 0 is ready at 1/4 s and sends 0 bytes to 3; 1 -> 4 (N/64) shares the middle
    from 0. The next round's 1 -> 4 (N) starts long before 1/4 s: accepted, as the empty
    message occupied nothing."""
    s = _schedule(6, [[(0, 3), (1, 4)], [(1, 4)]])
    ready = np.array([0.25, 0, 0, 0, 0, 0])
    _exact([Phase(ready, s, np.array([0.0, N / 64, N]))], _dumbbell_topology(6))


def test_a_channel_emptied_only_by_a_non_empty_flow_beside_an_empty_one_is_watched():
    """0 -> 3 sends 0 bytes, 1 -> 4 sends N; the next round's 0 -> 3 (N) starts after the
    empty message arrived, while 1 -> 4 still sends on the middle: refused."""
    s = _schedule(6, [[(0, 3), (1, 4)], [(0, 3)]])
    _overlap([Phase(np.zeros(6), s, np.array([0.0, N, N]))], _dumbbell_topology(6))


def test_a_one_byte_flow_beside_an_empty_one_still_holds_its_channel():
    """0 -> 3 sends 0 bytes, 1 -> 4 sends 1 byte from 1/4 s (rank 1 ready then); the next
    round's 0 -> 3 (N = 1/16 s) starts at about one route latency: before the 1-byte
    flow's last byte left, so the check refuses, and the two flows really share the
    middle at the message level."""
    s = _schedule(6, [[(0, 3), (1, 4)], [(0, 3)]])
    ready = np.array([0, 0.25, 0, 0, 0, 0])
    ph = [Phase(ready, s, np.array([0.0, 1.0, 4 * N]))]
    _overlap(ph, _dumbbell_topology(6))


# -- zero latency: a round starts exactly when the previous one's last byte left ------------


@pytest.mark.parametrize("semantics", ("rendezvous", "eager"))
def test_with_zero_latency_back_to_back_rounds_are_isolated(semantics):
    """With no latency a rank enters the next round at the instant its flows' last bytes
    left: a flow starting exactly then does not share the channel (strict inequality)."""
    topo = _dumbbell_topology(4, latency_s=0.0)
    s = _schedule(4, [[(0, 2), (1, 3)], [(0, 2), (1, 3)], [(0, 2)]])
    _exact([Phase(np.zeros(4), s, np.full(5, N))], topo, semantics=semantics)


# -- event stepping --------------------------------------------------------------------------


def test_one_byte_flows_are_stepped_like_any_other():
    """Reference: hand-worked fluid sharing. A (2 bytes) starts at 0 alone at B; B (1 byte)
    starts at 1/B when A has 1 byte left; both then get B/2 and end together at 3/B."""
    s = _schedule(4, [[(0, 2), (1, 3)]])
    ready = np.array([0, 1 / B, 0, 0])
    got = _exact([Phase(ready, s, np.array([2.0, 1.0]))], _dumbbell_topology(4))
    np.testing.assert_allclose(got[0], 3 / B + ROUTE, rtol=1e-12)


def test_empty_messages_starting_apart_cost_only_the_latency():
    """Reference: hand. Two empty messages sharing the middle, their senders ready at 0 and
    1/32 s: each arrives one route latency after it starts."""
    s = _schedule(4, [[(0, 2), (1, 3)]])
    ready = np.array([0, 1 / 32, 0, 0])
    got = _exact([Phase(ready, s, np.zeros(2))], _dumbbell_topology(4))
    np.testing.assert_allclose(got[0], [ROUTE, 1 / 32 + ROUTE, ROUTE, 1 / 32 + ROUTE])


def test_bundles_of_different_widths_are_solved_without_floating_point_warnings():
    """0 -> 3, 1 -> 4, 2 -> 5 share the middle left -> right (three flows), 3 -> 0 crosses
    it alone right -> left: bundles of widths 3 and 1, solved together (the narrow one
    padded twice); no warning may escape, and the ends are the message level's."""
    s = _schedule(6, [[(0, 3), (1, 4), (2, 5), (3, 0)]])
    ph = [Phase(np.zeros(6), s, np.array([N, N / 2, N / 4, N]))]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = run_rounds(ph, _dumbbell_topology(6))
    assert got is not None
    np.testing.assert_allclose(got, run_message(ph, _dumbbell_topology(6)), rtol=1e-12)


def test_rounds_of_one_pattern_without_a_bundle_equal_the_message_level():
    """Host 1's link has B/2: 0 -> 2 and 1 -> 3 share the middle with unequal private caps
    (no bundle), in two rounds of the same pattern."""
    topo = _dumbbell_topology(4, slow_host=1)
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
    got = _exact(ph, _dumbbell_topology(4))
    first, second = 2 * N / B + ROUTE, 2 * N / B + 2.0**-37 + ROUTE
    assert got[0].tolist() == [first, second, first, second]


def test_an_empty_round_does_not_hide_a_busy_channel_from_the_next_round():
    """0 -> 3 sends N on the middle; then 1 -> 4 sends an empty message (occupies nothing)
    and, in the next round of the same pattern, N bytes: that flow starts one route latency
    in, while 0 -> 3 still sends on the middle: refused."""
    s = _schedule(6, [[(0, 3)], [(1, 4)], [(1, 4)]])
    _overlap([Phase(np.zeros(6), s, np.array([N, 0.0, N]))], _dumbbell_topology(6))


def test_an_empty_round_opening_a_phase_does_not_hide_a_busy_channel():
    """As above across phases: phase 1 is 0 -> 3 (N bytes); phase 2 is two rounds 1 -> 4,
    the first empty, the second N bytes, starting while 0 -> 3 still sends: refused."""
    y = _schedule(6, [[(0, 3)]])
    x = _schedule(6, [[(1, 4)], [(1, 4)]])
    phases = [Phase(np.zeros(6), y, np.array([N])), Phase(np.zeros(6), x, np.array([0.0, N]))]
    _overlap(phases, _dumbbell_topology(6))


def test_a_bundle_that_starts_together_keeps_exact_ends_beside_one_that_does_not():
    """The sliver case above (0 -> 3, 1 -> 4 starting together, sizes N and N + N/2^33)
    in a round that also has a bundle whose flows start apart (4 -> 1 at 0, 5 -> 2 at
    2^-6 s, N/4 each, right -> left): the first bundle's ends are still the message
    level's, to 1e-12 (a sliver dropped would be off by 6e-11)."""
    s = _schedule(6, [[(0, 3), (1, 4), (4, 1), (5, 2)]])
    ready = np.array([0, 0, 0, 0, 0, 2.0**-6])
    ph = [Phase(ready, s, np.array([N, N + N * 2.0**-33, N / 4, N / 4]))]
    got = _exact(ph, _dumbbell_topology(6))
    assert got[0][0] == 2 * N / B + ROUTE
