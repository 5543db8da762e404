"""The message level's own bookkeeping: what it counts as an event, lazy messages that meet
another flow, the link monitor's deferred sums, and the garbage collector left as found."""

from __future__ import annotations

import gc

import numpy as np
import pytest
import simpy
from simhelpers import BW, LAT, cluster

from vgcsim.simulator.collectives import get_schedule, unit_sizes
from vgcsim.simulator.network import LinkMonitor, make_network
from vgcsim.simulator.paths.message import run_message
from vgcsim.simulator.paths.plan import Phase
from vgcsim.simulator.topology import build_topology

N = 1e6  # bytes


def _phase(key: str, p: int, sizes, ready_s: float = 0.0) -> Phase:
    s = get_schedule(key, p)
    return Phase(np.full(p, ready_s), s, unit_sizes(s, sizes))


def test_an_uncontended_ring_counts_one_arrival_and_one_resumption_per_flow():
    """Ring allgatherv on a star: every flow alone on its channels. Events: each flow's
    arrival, each rank's resumption after each round (one per flow: one send and one receive
    per rank and round), and each rank's start and end."""
    p = 6
    topo = build_topology(cluster(), p)
    sizes = np.random.default_rng(1).uniform(1e4, 1e6, p)
    stats: dict[str, int] = {}
    run_message([_phase("allgatherv/ring", p, sizes)], topo, stats=stats)
    assert stats["flows"] == p * (p - 1)
    assert stats["events"] == 2 * stats["flows"] + 2 * p


def test_timed_waits_count_one_event_each():
    """A second phase whose ready time is later than the first's end (one wait per rank) and
    a ring allreduce with a reduce cost (one wait per reducing round and rank)."""
    p = 5
    topo = build_topology(cluster(gamma_s_per_byte=1e-10), p)
    sizes = np.full(p, 1e5)
    key = "allreduce/ring"
    sched = get_schedule(key, p)
    reducing = sum(len(set(r.dst.tolist())) for r in sched.rounds if r.reduce)
    assert reducing > 0
    stats: dict[str, int] = {}
    phases = [_phase(key, p, sizes), _phase(key, p, sizes, ready_s=1.0)]
    fin = run_message(phases, topo, gamma_s_per_byte=1e-10, stats=stats)
    assert np.all(fin[1] > 1.0)
    flows = 2 * sum(len(r.src) for r in sched.rounds)
    assert stats["flows"] == flows
    assert stats["events"] == 2 * flows + 2 * p + p + 2 * reducing


def test_a_lazy_message_met_by_a_later_flow_shares_the_link_from_then_on():
    """Message A (0 -> 2) is alone until B (1 -> 2) starts at half its time: then both get
    half of 2's link; A's last byte leaves at 1.5 N/B, B's at 2 N/B (then alone)."""
    topo = build_topology(cluster(), 3)
    env = simpy.Environment()
    net = make_network("fair", env, topo)
    arrived: dict[tuple[int, int], float] = {}

    def done(flow) -> None:
        arrived[flow.src, flow.dst] = env.now

    def later():
        yield env.timeout(0.5 * N / BW)
        net.start_message(topo.route(1, 2), 1, 2, N, done)

    net.start_message(topo.route(0, 2), 0, 2, N, done)
    env.process(later())
    env.run()
    assert arrived[0, 2] == pytest.approx(1.5 * N / BW + LAT, rel=1e-12)
    assert arrived[1, 2] == pytest.approx(2 * N / BW + LAT, rel=1e-12)
    assert net.monitor.flows == 2
    down = topo.route(0, 2).channels[-1]
    assert net.monitor.bytes[down] == 2 * N
    assert net.monitor.busy_s[down] == pytest.approx(2 * N / BW, rel=1e-12)


def test_a_message_to_oneself_is_done_at_once_and_an_empty_one_after_the_latency():
    topo = build_topology(cluster(), 2)
    env = simpy.Environment()
    net = make_network("fair", env, topo)
    seen: list[tuple[int, int, float]] = []

    def done(flow) -> None:
        seen.append((flow.src, flow.dst, env.now))

    net.start_message(topo.route(1, 1), 1, 1, N, done)
    assert seen == [(1, 1, 0.0)]
    net.start_message(topo.route(0, 1), 0, 1, 0.0, done)
    env.run()
    assert seen[1] == (0, 1, pytest.approx(LAT, rel=1e-12))


@pytest.mark.parametrize("key", ["allgatherv/ring", "allgatherv/direct", "allreduce/ring"])
def test_held_lazy_flows_give_the_link_sums_of_flows_added_as_they_end(key):
    """The fair network hands lazy flows to the monitor in one append each and adds them
    later; a monitor that records intervals adds them as they end. Same sums to the bit,
    uncontended (ring) and contended (direct: every port shared)."""
    p = 6
    topo = build_topology(cluster(), p)
    sizes = np.random.default_rng(2).integers(10_000, 1_000_000, p).astype(float)
    if key.startswith("allreduce"):
        sizes[:] = sizes[0]
    held, eager = LinkMonitor(topo.n_channels), LinkMonitor(topo.n_channels, True)
    fin_held = run_message([_phase(key, p, sizes)], topo, monitor=held)
    fin_eager = run_message([_phase(key, p, sizes)], topo, monitor=eager)
    assert np.array_equal(fin_held, fin_eager)
    assert held.flows == eager.flows == sum(len(r.src) for r in get_schedule(key, p).rounds)
    assert np.array_equal(held.bytes, eager.bytes)
    assert np.array_equal(held.busy_s, eager.busy_s)
    assert held.bytes.sum() == pytest.approx(sum(i[3] for i in eager.intervals), rel=1e-12)


@pytest.mark.parametrize("enabled", [True, False])
def test_the_garbage_collector_is_left_as_it_was(enabled):
    p = 4
    topo = build_topology(cluster(), p)
    was = gc.isenabled()
    try:
        (gc.enable if enabled else gc.disable)()
        run_message([_phase("allgatherv/ring", p, np.full(p, 1e5))], topo)
        assert gc.isenabled() is enabled
    finally:
        (gc.enable if was else gc.disable)()


@pytest.mark.parametrize("semantics", ["rendezvous", "eager"])
@pytest.mark.parametrize("mode", ["fair", "fifo"])
def test_a_phase_starts_at_each_ranks_ready_time_and_after_its_previous_phase(semantics, mode):
    """Ranks 0..3 ready at 0, 1, 2, 3 ms for one direct allgatherv of tiny messages: nobody
    can finish before the last rank is ready, and a second phase ready at 0 queues behind."""
    p = 4
    topo = build_topology(cluster(), p)
    s = get_schedule("allgatherv/direct", p)
    first = Phase(np.arange(p) * 1e-3, s, unit_sizes(s, np.full(p, 10.0)))
    second = Phase(np.zeros(p), s, unit_sizes(s, np.full(p, 10.0)))
    fin = run_message([first, second], topo, semantics=semantics, mode=mode)
    assert np.all(fin[0] >= 3e-3)
    assert np.all(fin[1] > fin[0])
