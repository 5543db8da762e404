"""The flow network as scenarios: sharing, FIFO, message semantics, and the link monitor."""

from __future__ import annotations

import numpy as np
import pytest
import simpy
from simhelpers import BW, LAT, cluster, send_recv_times

from vgcsim.core.errors import UnknownNameError
from vgcsim.simulator.network import Comm, LinkMonitor, make_network
from vgcsim.simulator.topology import build_topology
from vgcsim.simulator.waterfill import maxmin_rates

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


# The link monitor's flow count and what an empty message costs, on a star with dyadic
# numbers: bandwidth 2^20 B/s, host -> switch -> host latency 2^-10 s; the max-min solver on
# inputs of other numeric types.

B = 2.0**20
A = 2.0**-10
N_DYADIC = 2**20


def _star(mode, hosts):
    env = simpy.Environment()
    topo = build_topology(cluster(bandwidth_Bps=B, latency_s=A), hosts)
    monitor = LinkMonitor(topo.n_channels, record_intervals=True)
    return env, topo, make_network(mode, env, topo, monitor), monitor


@pytest.mark.parametrize("mode", ["fair", "fifo"])
def test_monitor_counts_every_flow_that_takes_channels_once(mode):
    """Reference: hand count. Three messages between different hosts (two sharing h0's
    uplink, one started later) are three flows; a message to oneself takes no channel and
    is not a flow. The count is the engine's ``flows`` statistic."""
    env, _, net, monitor = _star(mode, 3)

    def later():
        yield env.timeout(0.25)
        net.start(2, 0, N_DYADIC // 4)

    env.process(later())
    net.start(0, 1, N_DYADIC)
    net.start(0, 2, N_DYADIC // 2)
    net.start(1, 1, N_DYADIC)
    env.run()
    assert monitor.flows == 3
    assert len({(iv[1], iv[4], iv[5]) for iv in monitor.intervals}) == 3


@pytest.mark.parametrize("mode", ["fair", "fifo"])
def test_an_empty_message_arrives_after_the_latency_and_is_no_flow(mode):
    """Reference: a message of 0 bytes has no serialisation time: it is sent at once and
    arrives one path latency (2^-10 s) later, and takes no channel (no flow, no interval,
    no bytes)."""
    env, _, net, monitor = _star(mode, 2)
    seen = []
    net.start(
        0, 1, 0, lambda: seen.append(("sent", env.now)), lambda: seen.append(("arr", env.now))
    )
    env.run()
    assert seen == [("sent", 0.0), ("arr", A)]
    assert monitor.flows == 0
    assert monitor.intervals == []
    assert monitor.bytes.sum() == 0


@pytest.mark.parametrize(
    ("ptr", "channels", "cap"),
    [
        ([0, 1, 3, 4], [0, 0, 1, 1], [2, 4]),  # Python ints everywhere (capacities too)
        (np.array([0.0, 1.0, 3.0, 4.0]), np.array([0.0, 0.0, 1.0, 1.0]), np.array([2.0, 4.0])),
    ],
)
def test_maxmin_rates_accepts_integral_inputs_of_any_numeric_type(ptr, channels, cap):
    """Reference: progressive filling by hand. Flow 0 crosses channel 0 (2 B/s), flow 1
    channels 0 and 1, flow 2 channel 1 (4 B/s). Channel 0's share 2/2 = 1 is the smallest:
    flows 0 and 1 get 1; channel 1 has 4 - 1 = 3 left for flow 2. Integer capacities and
    float-typed CSR indices give the same rates."""
    assert maxmin_rates(ptr, channels, cap).tolist() == [1.0, 1.0, 3.0]


# Flow timing in the two sharing models against hand computations with small dyadic
# numbers: a star with 2 B/s links and no latency, so two flows sharing a channel get exactly
# 1 B/s each (a rate that equals neither the free-link rate nor zero).
#
# * fair sharing: flow A (4 B, 0 -> 1) starts alone at t = 0; flow B (4 B, same channels)
#   starts at t = 1. A has sent 2 B alone, then shares: 2 B at 1 B/s ends it at t = 3; B sent
#   2 B by then and sends its other 2 B alone at 2 B/s, ending at t = 4. Both entry points
#   (``start`` with callbacks, ``start_message`` with ``done``) must give these times.
# * FIFO: a one-byte message takes 1 B / 2 B/s = 0.5 s on the channel; only an empty message
#   arrives at once.


def _star_net(mode):
    env = simpy.Environment()
    topo = build_topology(cluster(bandwidth_Bps=2.0, latency_s=0.0), 2)
    return env, topo, make_network(mode, env, topo)


@pytest.mark.parametrize("entry", ["start", "start_message"])
def test_a_lone_flow_met_later_shares_from_then_on_hand_computed_finish_times(entry):
    """Reference: the hand computation of the module docstring, A ends at 3 s, B at 4 s."""
    env, topo, net = _star_net("fair")
    route = topo.route(0, 1)
    got: dict[str, float] = {}

    def begin(name):
        if entry == "start":
            net.start(0, 1, 4.0, on_arrived=lambda: got.__setitem__(name, env.now))
        else:
            net.start_message(route, 0, 1, 4.0, lambda _f: got.__setitem__(name, env.now))

    def later():
        yield env.timeout(1.0)
        begin("B")

    begin("A")
    env.process(later())
    env.run()
    assert got == {"A": 3.0, "B": 4.0}


@pytest.mark.parametrize("entry", ["start", "start_message"])
@pytest.mark.parametrize(("nbytes", "expected_s"), [(1.0, 0.5), (0.5, 0.25), (0.0, 0.0)])
def test_fifo_small_message_takes_bytes_over_bandwidth(entry, nbytes, expected_s):
    """Reference: nbytes / 2 B/s (no latency); only an empty message arrives at t = 0."""
    env, topo, net = _star_net("fifo")
    got: list[float] = []
    if entry == "start":
        net.start(0, 1, nbytes, on_arrived=lambda: got.append(env.now))
    else:
        net.start_message(topo.route(0, 1), 0, 1, nbytes, lambda _f: got.append(env.now))
    env.run()
    assert got == [expected_s]


@pytest.mark.parametrize(("nbytes", "expected_s"), [(1.0, 0.5), (0.5, 0.25), (0.0, 0.0)])
def test_fair_small_message_takes_bytes_over_bandwidth(nbytes, expected_s):
    """Reference: nbytes / 2 B/s on a free channel (no latency); an empty message arrives at
    once and, taking no channel, is not counted as a flow (hand count: 0 or 1)."""
    env, topo, net = _star_net("fair")
    got: list[float] = []
    net.start_message(topo.route(0, 1), 0, 1, nbytes, lambda _f: got.append(env.now))
    env.run()
    assert got == [expected_s]
    assert net.monitor.flows == (1 if nbytes > 0 else 0)


def test_lone_message_interval_names_its_sender_and_receiver():
    """A lone 4 B message from rank 0 to rank 1 at 2 B/s holds each channel of its route
    from 0 s to 2 s; the recorded intervals say so and name ranks 0 and 1 (hand reference)."""
    env = simpy.Environment()
    topo = build_topology(cluster(bandwidth_Bps=2.0, latency_s=0.0), 2)
    monitor = LinkMonitor(topo.n_channels, record_intervals=True)
    net = make_network("fair", env, topo, monitor)
    route = topo.route(0, 1)
    net.start_message(route, 0, 1, 4.0, lambda _f: None)
    env.run()
    assert sorted(monitor.intervals) == sorted((c, 0.0, 2.0, 4.0, 0, 1) for c in route.channels)


def test_small_maxmin_gives_a_flow_the_residual_below_one_byte_per_second():
    """Hand max-min: channel 1 (1 B/s) carries A, C, D, so they get 1/3 each; channel 0
    (1.2 B/s) carries A and B, so B gets the residual 1.2 - 1/3 (below 1 B/s, not zero)."""
    from types import SimpleNamespace

    from vgcsim.simulator.network import _maxmin_small

    group = [SimpleNamespace(channels=ch) for ch in ((0, 1), (0,), (1,), (1,))]
    rates = _maxmin_small(group, [1.2, 1.0])
    assert rates[0] == rates[2] == rates[3] == 1.0 / 3
    assert rates[1] == pytest.approx(1.2 - 1.0 / 3, rel=1e-12)
