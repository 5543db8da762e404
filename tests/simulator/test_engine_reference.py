"""The message level (``path = "message"``, ``engine.run_message``) against the reference
engine (``path = "reference"``, ``vgcsim.simulator.paths.reference.run_reference``: one SimPy
process per rank, the definition of what the simulator computes).

The engine resumes ranks without SimPy events of their own where the order of an instant's
flow starts cannot matter (fair sharing with lazy flows), and must otherwise process its
events in the reference's order: under FIFO sharing a channel serves flows in the order
they came, so a rank that went on before the others' wake-ups would take a channel out of
turn. Every collective, on a star, a ring and a spread 4:1 leaf-spine (where flows share
uplinks), P = 3, 4, 5, both sharing models and both matchings, must give each rank the
reference's finish time exactly (the same network objects, so the same float operations);
under FIFO sharing, where the engine resumes every rank by an event as the reference does,
the run's event count (``stats["events"]``) must also equal the reference's. Several phases
with staggered ready times, a per-call software cost, size-priced wire bytes and a link
monitor must agree too.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from simhelpers import cluster, leaf_spine

from vgcsim.core.collectives import COLLECTIVE_KEYS
from vgcsim.simulator.collectives import Round, Schedule, get_schedule, unit_sizes
from vgcsim.simulator.network import LinkMonitor
from vgcsim.simulator.paths.message import run_message
from vgcsim.simulator.paths.plan import Phase
from vgcsim.simulator.paths.reference import run_reference
from vgcsim.simulator.topology import build_topology

B = 2.0**20  # bytes/s
A = 2.0**-10  # s
TOPOLOGIES = {
    "star": {"kind": "star"},
    "ring": {"kind": "ring"},
    "leaf-spine": leaf_spine(2),
}


def reference_run(schedule, units, topology, mode, semantics, gamma_s_per_byte):
    """Each rank's finish time on the reference engine, and the run's events as
    ``run_message``'s ``stats`` counts them: every SimPy event the reference processed, less
    the wake-up events of rounds done while their rank was still posting (the event fires,
    but nobody waits for it: the engine's rank just goes on)."""
    stats: dict[str, int] = {}
    finish = run_reference(
        [Phase(np.zeros(schedule.world_size), schedule, units, schedule.key)],
        topology,
        mode=mode,
        semantics=semantics,
        gamma_s_per_byte=gamma_s_per_byte,
        stats=stats,
    )[0]
    return finish, stats["events"] - stats["unwaited"]


@pytest.mark.parametrize("key", COLLECTIVE_KEYS)
def test_every_rank_finishes_when_the_simpy_reference_says(key):
    for name, topo in TOPOLOGIES.items():
        spec = cluster(topo, bandwidth_Bps=B, latency_s=A)
        for p in (3, 4, 5):
            schedule = get_schedule(key, p)
            if schedule.allreduce:
                sizes = np.full(p, 2.0**20)
                gammas = (0.0, 2.0**-22)
            else:  # uneven allgatherv blocks: ranks run out of step
                sizes = np.arange(1, p + 1) * 2.0**20
                gammas = (0.0,)
            units = unit_sizes(schedule, sizes)
            _check_against_reference(schedule, units, spec, name, gammas)


def _check_against_reference(schedule, units, spec, label, gammas=None):
    """Every rank's finish time against the reference's, under both sharing models and both
    matchings, for each γ of ``gammas`` (default: 0, and 3e-10 s/B where a round reduces),
    and under FIFO the event count too."""
    p = schedule.world_size
    topology = build_topology(spec, p)
    if gammas is None:
        gammas = (0.0, 3e-10) if any(r.reduce for r in schedule.rounds) else (0.0,)
    for mode in ("fifo", "fair"):
        for semantics in ("rendezvous", "eager"):
            for gamma in gammas:
                want, events = reference_run(schedule, units, topology, mode, semantics, gamma)
                stats: dict[str, int] = {}
                got = run_message(
                    [Phase(np.zeros(p), schedule, units, schedule.key)],
                    topology,
                    mode=mode,
                    semantics=semantics,
                    gamma_s_per_byte=gamma,
                    stats=stats,
                )[0]
                where = f"{label} P={p} {mode} {semantics} γ={gamma}"
                np.testing.assert_array_equal(got, want, err_msg=where)
                if mode == "fifo":  # no inline resumption: see run_message
                    assert stats["events"] == events, where


@pytest.mark.parametrize("key", COLLECTIVE_KEYS)
def test_every_rank_finishes_when_the_reference_says_at_any_float_and_without_latency(key):
    """Bandwidths, latencies and sizes that are not powers of two (so a flow timed another
    way, e.g. shared where it should be lazy, lands on another float), empty allgatherv
    blocks (a flow of 0 bytes is delivered at once where the latency is 0: its receive
    completes while the ranks are still posting) and a latency of 0."""
    for name, topo in TOPOLOGIES.items():
        for latency in (5e-6, 0.0):
            spec = cluster(topo, bandwidth_Bps=1.25e9, latency_s=latency)
            for p in (3, 5):
                schedule = get_schedule(key, p)
                if schedule.allreduce:  # equal sizes (n/P units of a chunk: not round)
                    sizes = np.full(p, 1.1e6 + 3)
                else:
                    sizes = np.array([3e5 + 7, 0.0, 0.0, 1.1e6 + 3, 7e5 + 1][:p])
                _check_against_reference(
                    schedule, unit_sizes(schedule, sizes), spec, f"{name} latency={latency}"
                )


def test_a_reducing_round_that_receives_two_blocks_reduces_both():
    """A hand-made schedule: ranks 1 and 2 send their blocks (1 and 3 MB) to rank 0 in one
    reducing round; rank 0 then reduces γ × 4 MB, so with γ > 0 it ends γ × 4 MB after the
    last arrival, which the reference computes from the bytes it received."""
    rnd = Round(np.array([1, 2]), np.array([0, 0]), np.array([1, 2]), np.array([1, 1]), True)
    schedule = Schedule("allreduce/hand-made", 3, (rnd,), 3, True)
    units = np.array([0.0, 1e6, 3e6])
    spec = cluster(bandwidth_Bps=1e9, latency_s=1e-6)
    _check_against_reference(schedule, units, spec, "star")
    topology = build_topology(spec, 3)
    fin = run_message(
        [Phase(np.zeros(3), schedule, units, "hand-made")], topology, gamma_s_per_byte=1e-9
    )[0]
    alone = run_message([Phase(np.zeros(3), schedule, units, "hand-made")], topology)[0]
    assert fin[0] - alone[0] == pytest.approx(4e6 * 1e-9, rel=1e-12)


def test_fair_sharing_resumes_inline_and_may_run_ahead_of_an_arrival_at_the_same_instant():
    """Binomial-tree allreduce, P = 3, eager, fair sharing on a star (2^20-byte chunks at
    2^20 B/s): rounds 1->0, 2->0, 0->2, 0->1. Both sends to rank 0 start at 0 and share its
    downlink; they end together at 2 s and land together at 2 s + A. At that instant no flow
    is shared and no reshare is pending, so the engine resumes rank 0 inline from the first
    landing: it posts its round-1 receive before the second landing (due at the same
    instant) completes it, and waits once more, one resumption the process run does not
    have (its rank 0 wakes once, behind both landings, and finds the second receive done).
    Every finish time is the reference's; the event count is the reference's + 1. A rank
    queued where it could go on inline would give the reference's count."""
    p = 3
    schedule = get_schedule("allreduce/binomial_tree", p)
    topology = build_topology(cluster(bandwidth_Bps=B, latency_s=A), p)
    units = unit_sizes(schedule, np.full(p, 2.0**20))
    want, events = reference_run(schedule, units, topology, "fair", "eager", 0.0)
    stats: dict[str, int] = {}
    got = run_message(
        [Phase(np.zeros(p), schedule, units, schedule.key)],
        topology,
        mode="fair",
        semantics="eager",
        stats=stats,
    )[0]
    np.testing.assert_array_equal(got, want)
    assert events == 22
    assert stats["events"] == events + 1


def test_a_rank_ready_while_shared_flows_are_due_at_that_instant_waits_behind_their_end():
    """A hand-made schedule on a star, rendezvous, fair sharing. Round 0: 4->3, whose last
    byte lands at exactly 2 s (2^21 - 2^10 bytes at 2^20 B/s, + 2^-10 s). Round 1: 1->5 and
    2->5 (ranks 1, 2 and 5 have nothing in round 0, so these start at 0 and share 5's
    downlink until both end at 2 s) and 3->5. At 2 s the landing comes first (its timer was
    set at 0, before the shared flows' reshare), while 1->5 and 2->5 are still on 5's
    downlink, due that instant. Rank 3 must go on behind their end, as a SimPy process
    would: 3->5 then finds the link free and runs alone (one lazy timer), ending at 3 s + A;
    resumed inline, it would meet the two flows and pay a reshare, a timer and a latency
    timeout for the same times. Finish times and the event count are the reference's."""
    p = 6
    rounds = (
        Round(np.array([4]), np.array([3]), np.array([4]), np.array([1])),
        Round(np.array([1, 2, 3]), np.array([5, 5, 5]), np.array([1, 2, 3]), np.array([1, 1, 1])),
    )
    schedule = Schedule("allgatherv/hand-made", p, rounds, p, False)
    units = np.array([0.0, 2.0**20, 2.0**20, 2.0**20, 2.0**21 - 2.0**10, 0.0])
    topology = build_topology(cluster(bandwidth_Bps=B, latency_s=A), p)
    want, events = reference_run(schedule, units, topology, "fair", "rendezvous", 0.0)
    stats: dict[str, int] = {}
    got = run_message([Phase(np.zeros(p), schedule, units, "hand-made")], topology, stats=stats)[0]
    np.testing.assert_array_equal(got, want)
    assert got[3] == got[5] == 3 + A
    assert stats["events"] == events


#: A token bucket of 256 KiB on the link (SMPI-style size segments): a message within it
#: moves as if at 10× the link's rate, so its wire bytes are a tenth of its payload.
_SEGMENTS = ((0.0, 0.0, 1.25e10), (262144.0, -262144.0 * (1 / 1.25e9 - 1 / 1.25e10), 1.25e9))


@pytest.mark.parametrize("mode", ["fair", "fifo"])
@pytest.mark.parametrize("semantics", ["rendezvous", "eager"])
def test_phases_with_ready_times_call_cost_and_wire_bytes_finish_when_the_reference_says(
    mode, semantics
):
    """Three phases (a ring allreduce, a size exchange, a Bruck allgatherv of uneven blocks)
    on a spread 4:1 leaf-spine, P = 6, with seeded staggered ready times (a rank starts a
    phase at max(its ready time, its previous phase's end)), a per-call software cost,
    size-priced wire bytes and γ > 0: every rank's finish time per phase, every link's bytes
    and busy seconds are the reference's, exactly."""
    import dataclasses

    from vgcsim.core.collectives import wire_bytes

    p = 6
    spec = cluster(leaf_spine(2), bandwidth_Bps=1.25e9, latency_s=3e-6)
    link = dataclasses.replace(spec.link, segments=_SEGMENTS)
    topology = build_topology(spec, p)
    rng = np.random.default_rng(41)
    keys = ("allreduce/ring", "allgatherv/ring", "allgatherv/bruck")
    sizes = (np.full(p, 3e6 + 1), np.full(p, 8.0), rng.integers(1, 4e5, p).astype(float))
    phases = []
    for b, (key, size) in enumerate(zip(keys, sizes, strict=True)):
        schedule = get_schedule(key, p)
        ready = b * 1e-3 + rng.uniform(0, 2e-3, p)
        phases.append(Phase(ready, schedule, unit_sizes(schedule, size), key))

    def wire(payload):
        return wire_bytes(link, payload)

    args = dict(
        mode=mode, semantics=semantics, gamma_s_per_byte=3e-10, call_overhead_s=7e-5, wire=wire
    )
    ref_links = LinkMonitor(topology.n_channels)
    want = run_reference(phases, topology, monitor=ref_links, **args)
    links = LinkMonitor(topology.n_channels)
    got = run_message(phases, topology, monitor=links, **args)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(links.bytes, ref_links.bytes)
    np.testing.assert_array_equal(links.busy_s, ref_links.busy_s)
    # the wire bytes, the call cost and γ each reach the run: without one, other times
    for name, off in (("wire", None), ("call_overhead_s", 0.0), ("gamma_s_per_byte", 0.0)):
        other = run_reference(phases, topology, **{**args, name: off})
        assert not np.array_equal(other, want), name


@pytest.mark.parametrize(
    "topology,semantics,overlap",
    [
        (None, "rendezvous", "none"),
        (leaf_spine(2), "eager", "per_layer"),
        (leaf_spine(2), "rendezvous", "bucketed"),
    ],
)
def test_a_replay_on_the_reference_path_gives_the_message_levels_table(
    topology, semantics, overlap
):
    """``simulate_trace`` of the committed sample trace with ``path = "reference"`` and with
    ``path = "message"``, P = 3 and 5, with straggler jitter: every column of every row is
    the same float; the ``path`` column and the path counts say which engine ran."""
    from vgcsim.simulator.replay import SimulateConfig, simulate_trace
    from vgcsim.traces.io import read_trace

    trace = read_trace(Path(__file__).resolve().parents[1] / "data" / "sample_trace")
    spec = cluster(topology, gamma_s_per_byte=1e-10)
    tables = {}
    for path in ("reference", "message"):
        cfg = SimulateConfig(
            path=path,
            semantics=semantics,
            overlap=overlap,
            bucket_bytes=2e5,
            jitter=0.2,
            per_step=True,
            max_steps=3,
        )
        table, _, info = simulate_trace(trace, spec, (3, 5), cfg)
        assert set(table["path"]) == {path}
        assert all(n[path] > 0 for per in info.values() for n in per.values())
        tables[path] = table.drop(columns="path")
    pd.testing.assert_frame_equal(tables["reference"], tables["message"], check_exact=True)


def _two_phases(first: str, second: str, p: int, rng, ready_spread_s: float) -> list[Phase]:
    """Two phases back to back, seeded sizes and ready times spread over ``ready_spread_s``
    (0: equal ready times, and equal sizes; else allgatherv blocks of uneven whole bytes)."""
    phases = []
    for b, key in enumerate((first, second)):
        schedule = get_schedule(key, p)
        if schedule.allreduce or ready_spread_s == 0:
            sizes = np.full(p, float(rng.integers(1e5, 2e6)))
        else:
            sizes = rng.integers(1e4, 1e6, p).astype(float)
        ready = b * 1e-3 + rng.uniform(0, ready_spread_s, p)
        phases.append(Phase(ready, schedule, unit_sizes(schedule, sizes), key))
    return phases


#: Finish times of the optimized paths against the reference: the same model, other float
#: operations (a vector max instead of a callback order, a fluid round's sums): a few
#: ulps of a sum of about 2P terms.
PATH_RTOL = 1e-12


@pytest.mark.parametrize("semantics", ["rendezvous", "eager"])
@pytest.mark.parametrize("key", COLLECTIVE_KEYS)
def test_every_optimized_path_equals_the_reference_where_it_claims_to_be_exact(key, semantics):
    """``path = "collective"`` (``run_collective``, with its run-time check where eager messages
    into one rank could overlap, and ``run_collective_steps`` for several steps at once) on a star,
    and ``path = "round"`` (``run_rounds``) on a spread 4:1 leaf-spine where flows share
    uplinks: wherever a path returns a result (it returns None, or is not offered, where it
    would not be exact), every rank's finish time per phase is the reference's to
    ``PATH_RTOL``. Each phase pair runs with equal ready times and sizes (where the paths
    must hold) and with seeded staggered ones and uneven blocks, with γ > 0 and a per-call
    software cost."""
    from vgcsim.simulator.paths.collective import (
        contention_free,
        run_collective,
        run_collective_steps,
    )
    from vgcsim.simulator.paths.round import run_rounds

    p, gamma, call = 8, 2e-10, 4e-5
    rng = np.random.default_rng(7)
    kw = dict(semantics=semantics, gamma_s_per_byte=gamma, call_overhead_s=call)
    ran = {"collective": 0, "collective_steps": 0, "round": 0}
    star = build_topology(cluster(gamma_s_per_byte=gamma), p)
    spread = build_topology(cluster(leaf_spine(2)), p)
    for spread_s in (0.0, 5e-4):
        phases = _two_phases(key, "allgatherv/ring", p, rng, spread_s)
        schedules = [ph.schedule for ph in phases]
        want = run_reference(phases, star, **kw)
        verdict = contention_free(schedules, star)
        if verdict is not None:
            checked = semantics == "eager" and verdict == "dst"
            got = run_collective(phases, star, check_overlap=checked, **kw)
            if got is not None:
                ran["collective"] += 1
                np.testing.assert_allclose(got, want, rtol=PATH_RTOL, atol=0)
            if not checked:
                steps = run_collective_steps(
                    schedules,
                    [ph.ready_s[None] for ph in phases],
                    [ph.units[None] for ph in phases],
                    star,
                    **kw,
                )
                if steps is not None:
                    ran["collective_steps"] += 1
                    np.testing.assert_allclose(steps[:, 0], want, rtol=PATH_RTOL, atol=0)
        got = run_rounds(phases, spread, **kw)
        if got is not None:
            ran["round"] += 1
            want = run_reference(phases, spread, **kw)
            np.testing.assert_allclose(got, want, rtol=PATH_RTOL, atol=0)
    if key != "allgatherv/direct":  # the one schedule with concurrent flows per rank
        assert ran["collective"] > 0, ran
    if key.endswith("/ring"):
        assert ran["collective_steps"] > 0, ran
    assert ran["round"] > 0 or (key, semantics) == ("allreduce/binomial_tree", "eager"), ran
