"""The flow network as scenarios: sharing, FIFO, message semantics, and the link monitor."""

from __future__ import annotations

import numpy as np
import pytest
import simpy
from simhelpers import BW, LAT, cluster, send_recv_times
from vgcsim.simulator.network import Comm, LinkMonitor, make_network
from vgcsim.simulator.topology import build_topology

from vgcsim.core.errors import UnknownNameError

N = 1e6  # bytes


def _run_transfers(topo, flows, mode="fair"):
    """Start (src, dst, nbytes, at_s) flows; return {index: (sent_s, arrived_s)}."""
    env = simpy.Environment()
    net = make_network(mode, env, topo)
    times: dict[int, list[float]] = {}

    def starter(i, src, dst, nbytes, at):
        yield env.timeout(at)
        sent, arrived = net.transfer(src, dst, nbytes)
        yield sent
        times[i] = [env.now]
        yield arrived
        times[i].append(env.now)

    for i, (src, dst, nbytes, at) in enumerate(flows):
        env.process(starter(i, src, dst, nbytes, at))
    env.run()
    return times, net


def test_one_flow_takes_latency_plus_size_over_bandwidth():
    topo = build_topology(cluster(), 2)
    times, _ = _run_transfers(topo, [(0, 1, N, 0.0)])
    assert times[0] == pytest.approx([N / BW, N / BW + LAT], rel=1e-12)


def test_two_flows_into_one_link_get_half_each():
    topo = build_topology(cluster(), 3)
    times, _ = _run_transfers(topo, [(0, 2, N, 0.0), (1, 2, N, 0.0)])
    for i in (0, 1):
        assert times[i][0] == pytest.approx(2 * N / BW, rel=1e-9)


def test_rates_are_recomputed_when_a_flow_ends():
    topo = build_topology(cluster(), 3)
    times, _ = _run_transfers(topo, [(0, 2, N, 0.0), (1, 2, 2 * N, 0.0)])
    assert times[0][0] == pytest.approx(2 * N / BW, rel=1e-9)  # half rate for N bytes
    assert times[1][0] == pytest.approx(3 * N / BW, rel=1e-9)  # then alone for the last N


def test_rates_are_recomputed_when_a_flow_starts():
    topo = build_topology(cluster(), 3)
    t_join = 0.5 * N / BW
    times, _ = _run_transfers(topo, [(0, 2, N, 0.0), (1, 2, N, t_join)])
    # flow 0 sends N/2 alone, then shares: N/2 more at B/2
    assert times[0][0] == pytest.approx(t_join + N / BW, rel=1e-9)
    assert times[1][0] == pytest.approx(t_join + 1.5 * N / BW, rel=1e-9)


def test_max_min_fairness_gives_leftover_capacity_to_unconstrained_flows():
    # a and b send to c; a also sends to d; b's NIC is slow (B/4).
    links = [
        {"a": "a", "b": "sw", "bandwidth_Bps": BW, "latency_s": 0.0},
        {"a": "b", "b": "sw", "bandwidth_Bps": BW / 4, "latency_s": 0.0},
        {"a": "c", "b": "sw", "bandwidth_Bps": BW, "latency_s": 0.0},
        {"a": "d", "b": "sw", "bandwidth_Bps": BW, "latency_s": 0.0},
    ]
    topo = build_topology(
        cluster({"kind": "graph", "hosts": ["a", "b", "c", "d"], "links": links}), 4
    )
    times, _ = _run_transfers(topo, [(0, 2, N, 0.0), (1, 2, N, 0.0), (0, 3, N, 0.0)])
    # b->c is held to B/4 by its NIC; a's NIC is split B/2 + B/2 between a->c and a->d
    assert times[0][0] == pytest.approx(2 * N / BW, rel=1e-9)
    assert times[2][0] == pytest.approx(2 * N / BW, rel=1e-9)
    assert times[1][0] == pytest.approx(4 * N / BW, rel=1e-9)


def test_fifo_serves_one_flow_at_a_time():
    topo = build_topology(cluster(), 3)
    times, _ = _run_transfers(topo, [(0, 2, N, 0.0), (1, 2, N, 0.0)], mode="fifo")
    assert sorted(t[0] for t in times.values()) == pytest.approx([N / BW, 2 * N / BW], rel=1e-12)


def test_fifo_equals_fair_without_contention():
    topo = build_topology(cluster({"kind": "leaf_spine", "hosts_per_leaf": 2}), 4)
    fair, _ = _run_transfers(topo, [(0, 3, N, 0.0), (2, 1, N, 0.0)])
    fifo, _ = _run_transfers(topo, [(0, 3, N, 0.0), (2, 1, N, 0.0)], mode="fifo")
    assert fair == fifo


def test_monitor_counts_bytes_and_busy_time():
    topo = build_topology(cluster(), 3)
    _, net = _run_transfers(topo, [(0, 2, N, 0.0), (1, 2, N, 0.0)])
    down = topo.channel_ids[("sw", "h2")]
    up0 = topo.channel_ids[("h0", "sw")]
    mon: LinkMonitor = net.monitor
    assert mon.bytes[down] == 2 * N and mon.bytes[up0] == N
    assert mon.busy_s[down] == pytest.approx(2 * N / BW, rel=1e-9)
    assert mon.flows == 2


def test_busy_time_excludes_the_gap_after_a_flow_whose_last_byte_has_left():
    # Rendezvous-style flows (no one waits for the last byte to leave) into h2: the first
    # has left by N/B but is still in flight (latency 1 s) when the second starts 0.5 s
    # later on the same downlink; the channel was idle in between.
    topo = build_topology(cluster(latency_s=1.0), 3)
    env = simpy.Environment()
    net = make_network("fair", env, topo)

    def senders():
        net.start(0, 2, N, None, lambda: None)
        yield env.timeout(N / BW + 0.5)
        net.start(1, 2, N, None, lambda: None)

    env.process(senders())
    env.run()
    down = topo.channel_ids[("sw", "h2")]
    assert net.monitor.busy_s[down] == pytest.approx(2 * N / BW, rel=1e-9)


def _message(semantics):
    topo = build_topology(cluster(), 2)
    env = simpy.Environment()
    comm = Comm(make_network("fair", env, topo), semantics)
    return send_recv_times(env, comm, N, send_at=0.0, recv_at=1e-3)


def test_eager_sends_before_the_receive_is_posted():
    out = _message("eager")
    assert out["send"] == pytest.approx(N / BW)
    assert out["recv"] == pytest.approx(1e-3)  # data had arrived at 0.81 ms


def test_rendezvous_waits_for_the_receive():
    out = _message("rendezvous")
    expected = 1e-3 + LAT + N / BW
    assert out["send"] == pytest.approx(expected) and out["recv"] == pytest.approx(expected)


def test_unknown_mode_and_semantics_list_valid_names():
    topo = build_topology(cluster(), 2)
    env = simpy.Environment()
    with pytest.raises(UnknownNameError, match="fair, fifo"):
        make_network("wfq", env, topo)
    with pytest.raises(UnknownNameError, match="eager, rendezvous"):
        Comm(make_network("fair", env, topo), "buffered")


def test_a_flow_that_meets_another_arrives_once_at_its_shared_finish():
    # Nobody waits for the last byte to leave (on_sent None), so the first flow starts with
    # one timer at its solo arrival (N/B + L, L = 1 ms). The second joins at N/(2B) on the
    # same downlink: the first sends its last N/2 at B/2, its last byte leaves at 1.5 N/B and
    # it arrives at 1.5 N/B + L, once: its solo timer (earlier) must deliver nothing. The
    # second has sent N/2 by then and sends the rest alone at B: last byte at 2 N/B.
    lat = 1e-3
    topo = build_topology(cluster(latency_s=lat), 3)  # L end to end
    env = simpy.Environment()
    net = make_network("fair", env, topo)
    arrivals: list[tuple[int, float]] = []

    def senders():
        net.start(0, 2, N, None, lambda: arrivals.append((0, env.now)))
        yield env.timeout(0.5 * N / BW)
        net.start(1, 2, N, None, lambda: arrivals.append((1, env.now)))

    env.process(senders())
    env.run()
    assert [i for i, _ in arrivals] == [0, 1]
    assert arrivals[0][1] == pytest.approx(1.5 * N / BW + lat, rel=1e-12)
    assert arrivals[1][1] == pytest.approx(2 * N / BW + lat, rel=1e-12)
    down = topo.channel_ids[("sw", "h2")]
    assert net.monitor.busy_s[down] == pytest.approx(2 * N / BW, rel=1e-12)
    assert net.monitor.bytes[down] == 2 * N and net.monitor.flows == 2


def test_flows_that_start_and_end_at_one_instant_share_as_if_one_at_a_time():
    # Eight flows into h8 start together and four of them end together: 8 at B/8 until the
    # four small ones (N) are done at 8N/B, then the other four (2N) share B/4 for their last
    # N: 8N/B + 4N/B.
    topo = build_topology(cluster(), 9)
    flows = [(i, 8, N if i < 4 else 2 * N, 0.0) for i in range(8)]
    times, _ = _run_transfers(topo, flows)
    for i in range(8):
        expected = 8 * N / BW if i < 4 else 12 * N / BW
        assert times[i] == pytest.approx([expected, expected + LAT], rel=1e-12)


@pytest.mark.parametrize("seed", range(4))
def test_numpy_and_python_solvers_and_the_cached_group_give_the_same_times(seed):
    # Two disjoint sets of hosts on one star (their flows never share a channel), all pairs
    # inside each set, random sizes, half the flows starting later. With every group solved
    # by numpy (and what is left of the last large group solved again without a group
    # search) or every group solved in Python after a group search, each flow's last byte
    # leaves at the same float.
    rng = np.random.default_rng(seed)
    topo = build_topology(cluster(), 10)
    flows = [
        (s, d, float(rng.integers(1, 50)) * N / 10, float(rng.choice([0.0, 0.3, 0.7])) * N / BW)
        for hosts in (range(0, 5), range(5, 10))
        for s in hosts
        for d in hosts
        if s != d
    ]

    def sent_times(small_group: int) -> list[float]:
        env = simpy.Environment()
        net = make_network("fair", env, topo)
        net.SMALL_GROUP = small_group
        out = [0.0] * len(flows)

        def run(i, src, dst, nbytes, at):
            yield env.timeout(at)
            sent, _ = net.transfer(src, dst, nbytes)
            yield sent
            out[i] = env.now

        for i, flow in enumerate(flows):
            env.process(run(i, *flow))
        env.run()
        return out

    assert sent_times(0) == sent_times(10**9)
