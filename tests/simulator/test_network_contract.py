"""Comm's message matching (eager and rendezvous) against hand-worked timelines.

A star of two hosts, bandwidth 2^20 B/s, host -> switch -> host latency 2^-10 s, messages of
2^20 bytes (1 s on the wire): every time is dyadic and compared with ``==``. The reference is
the documented semantics (vgcsim.simulator.network): eager — the flow starts when the send is
posted, the send completes when its last byte has left, the receive at max(posted, arrival);
rendezvous — the flow starts when both are posted, both complete at arrival.
"""

from __future__ import annotations

import pytest
import simpy
from simhelpers import cluster, send_recv_times

from vgcsim.core.errors import UnknownNameError
from vgcsim.simulator.network import Comm, LinkMonitor, Waiter, make_network
from vgcsim.simulator.topology import build_topology

B = 2.0**20
A = 2.0**-10
N = 2**20


def _comm(*semantics):
    env = simpy.Environment()
    net = make_network("fair", env, build_topology(cluster(bandwidth_Bps=B, latency_s=A), 2))
    return env, Comm(net, *semantics)


def _run(env, comm, send_at, recv_at):
    return send_recv_times(env, comm, N, send_at, recv_at)


def test_rendezvous_receive_posted_first_starts_the_flow_at_the_send():
    env, comm = _comm("rendezvous")
    out = _run(env, comm, send_at=0.125, recv_at=0.0)
    assert out == {"send": 0.125 + 1.0 + A, "recv": 0.125 + 1.0 + A}


def test_eager_receive_posted_first_completes_at_arrival():
    env, comm = _comm("eager")
    out = _run(env, comm, send_at=0.125, recv_at=0.0)
    assert out == {"send": 0.125 + 1.0, "recv": 0.125 + 1.0 + A}


def test_eager_is_the_default_semantics():
    env, comm = _comm()
    out = _run(env, comm, send_at=0.0, recv_at=2.0)
    # the send is done when its last byte has left, long before the receive is posted
    assert out == {"send": 1.0, "recv": 2.0}


@pytest.mark.parametrize("semantics", ["eager", "rendezvous"])
def test_a_waiter_fires_when_all_its_operations_are_done(semantics):
    # each rank posts its send and its receive on one waiter; rank 0 sends N, rank 1 N/2.
    # eager: rank 0 done at max(1 s sent, N/2 arrived at 0.5 + α) = 1; rank 1 at 1 + α.
    # rendezvous: every operation completes at its arrival: both ranks at 1 + α.
    env, comm = _comm(semantics)
    done = {}

    def rank(me, other, nbytes):
        w = Waiter(env)
        w.pending += 1  # held while posting
        comm.post_recv(me, other, "t", w)
        comm.post_send(me, other, nbytes, "t", w)
        w.done_one()
        yield w.event
        done[me] = env.now

    env.process(rank(0, 1, N))
    env.process(rank(1, 0, N // 2))
    env.run()
    assert done == ({0: 1.0, 1: 1.0 + A} if semantics == "eager" else {0: 1.0 + A, 1: 1.0 + A})


@pytest.mark.parametrize("semantics", ["eager", "rendezvous"])
def test_two_receives_on_one_waiter_wait_for_both_messages(semantics):
    # rank 1 receives two tagged messages from rank 0 (N and N/2, sent one after the
    # other's last byte left): its waiter fires at the later arrival only
    env, comm = _comm(semantics)
    done = {}

    def receiver():
        w = Waiter(env)
        w.pending += 1
        comm.post_recv(1, 0, "a", w)
        comm.post_recv(1, 0, "b", w)
        w.done_one()
        yield w.event
        done["recv"] = env.now

    def sender():
        yield comm.send(0, 1, N, "a")
        yield comm.send(0, 1, N // 2, "b")
        done["send"] = env.now

    env.process(receiver())
    env.process(sender())
    env.run()
    if semantics == "eager":
        assert done == {"send": 1.5, "recv": 1.5 + A}
    else:  # each send completes at its arrival: the second starts at 1 + α
        assert done == {"send": 1.5 + 2 * A, "recv": 1.5 + 2 * A}


def test_unknown_semantics_names_the_valid_ones():
    env = simpy.Environment()
    net = make_network("fair", env, build_topology(cluster(), 2))
    with pytest.raises(
        UnknownNameError, match=r"^unknown message semantics 'buffered'; valid: eager, rendezvous$"
    ):
        Comm(net, "buffered")


def _monitored(mode):
    env = simpy.Environment()
    topo = build_topology(cluster(bandwidth_Bps=B, latency_s=A), 2)
    monitor = LinkMonitor(topo.n_channels, record_intervals=True)
    return env, topo, make_network(mode, env, topo, monitor), monitor


@pytest.mark.parametrize("mode", ["fair", "fifo"])
def test_monitor_records_each_flow_interval_with_its_bytes_and_ranks(mode):
    # 0 -> 1: N bytes posted at 0.25 s, alone on its channels: [0.25, 1.25] (last byte left);
    # 1 -> 0: one byte at 0: [0, 2^-20]. The latency is not channel time.
    env, topo, net, monitor = _monitored(mode)
    seen = []

    def later():
        yield env.timeout(0.25)
        net.start(
            0,
            1,
            N,
            lambda: seen.append(("sent", env.now)),
            lambda: seen.append(("arrived", env.now)),
        )

    env.process(later())
    net.start(1, 0, 1)
    env.run()
    assert seen == [("sent", 1.25), ("arrived", 1.25 + A)]
    ch = topo.channel_ids
    expected = {
        (ch[("h0", "sw")], 0.25, 1.25, float(N), 0, 1),
        (ch[("sw", "h1")], 0.25, 1.25, float(N), 0, 1),
        (ch[("h1", "sw")], 0.0, 2.0**-20, 1.0, 1, 0),
        (ch[("sw", "h0")], 0.0, 2.0**-20, 1.0, 1, 0),
    }
    assert {
        tuple(float(x) if i in (1, 2, 3) else x for i, x in enumerate(iv))
        for iv in monitor.intervals
    } == expected
    assert len(monitor.intervals) == 4
    assert monitor.bytes[ch[("h0", "sw")]] == N
    assert monitor.busy_s[ch[("h1", "sw")]] == 2.0**-20


@pytest.mark.parametrize("mode", ["fair", "fifo"])
def test_two_flows_on_one_uplink_are_recorded_with_their_own_ranks(mode):
    # star of three: 0 -> 1 (N) and 0 -> 2 (N/2) share h0's uplink from t = 0.
    # fair: halves until the N/2 flow ends at 1 s, then the N flow alone: ends at 1.5 s.
    # fifo: one after the other on the uplink: [0, 1] and [1, 1.5] (0 -> 1 was started first).
    env = simpy.Environment()
    topo = build_topology(cluster(bandwidth_Bps=B, latency_s=A), 3)
    monitor = LinkMonitor(topo.n_channels, record_intervals=True)
    net = make_network(mode, env, topo, monitor)
    net.start(0, 1, N)
    net.start(0, 2, N // 2)
    env.run()
    up = topo.channel_ids[("h0", "sw")]
    on_up = sorted((iv[1], iv[2], iv[3], iv[4], iv[5]) for iv in monitor.intervals if iv[0] == up)
    if mode == "fair":
        assert on_up == [(0.0, 1.0, N / 2, 0, 2), (0.0, 1.5, float(N), 0, 1)]
    else:
        assert on_up == [(0.0, 1.0, float(N), 0, 1), (1.0, 1.5, N / 2, 0, 2)]
    assert monitor.busy_s[up] == 1.5
    assert monitor.bytes[up] == 1.5 * N


@pytest.mark.parametrize("mode", ["fair", "fifo"])
def test_a_message_to_oneself_completes_at_once_and_uses_no_channel(mode):
    env, topo, net, monitor = _monitored(mode)
    seen = []
    net.start(1, 1, N, lambda: seen.append("sent"), lambda: seen.append("arrived"))
    net.start(1, 1, N)
    assert seen == ["sent", "arrived"]
    env.run()
    assert monitor.intervals == []
    assert monitor.bytes.sum() == 0


@pytest.mark.parametrize("mode", ["fair", "fifo"])
def test_rendezvous_empty_message_costs_the_latency_and_one_to_oneself_nothing(mode):
    # an empty message: both sides complete at its arrival, one path latency after posting;
    # a message to oneself completes both sides at once
    env = simpy.Environment()
    net = make_network(mode, env, build_topology(cluster(bandwidth_Bps=B, latency_s=A), 2))
    comm = Comm(net, "rendezvous")
    done = {}

    def rank(me, peer, key):
        w = Waiter(env)
        w.pending += 1
        comm.post_send(me, peer, 0, key, w)
        comm.post_recv(me, peer, key, w)
        w.done_one()
        yield w.event
        done[key, me] = env.now

    env.process(rank(0, 0, "self"))
    env.process(rank(1, 1, "self"))
    env.process(rank(0, 1, "empty"))
    env.process(rank(1, 0, "empty"))
    env.run()
    assert done == {("self", 0): 0.0, ("self", 1): 0.0, ("empty", 0): A, ("empty", 1): A}
