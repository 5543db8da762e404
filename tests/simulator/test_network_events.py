"""The fair network's discrete events, counted by hand from its documented design.

:class:`~vgcsim.simulator.network.FairNetwork` promises (its docstring): a flow alone on its
channels is *lazy*, one timer at its arrival; a flow that meets another is *shared*; every
change to the shared flows at one instant marks their channels, and **one** reshare event at
that instant recomputes their rates; **a single timer** waits for the earliest shared flow's
last byte (a timer armed for a later finish stays queued and is ignored when it fires), and
every flow due then ends together; a shared flow's last byte is delivered after the route's
latency by a timeout, at once where the latency is 0. A newcomer that finds a lazy flow whose
last byte has left (``t_end <= now``) frees its channels and does not meet it.

These events are what ``run_message(..., stats=...)`` reports and what the event-rate
benchmark divides by, so their number is part of the contract, not an implementation detail:
each test drives the network directly, counts every SimPy event processed (``env.step`` until
the queue is empty) and checks the count against the list of events written out in its
docstring, and the delivery times against hand-worked processor sharing. Sizes and times are
powers of two (bandwidth 2^20 B/s, latency 2^-10 s), so every time is exact.
"""

from __future__ import annotations

import pytest
import simpy
from simhelpers import cluster, count_events

from vgcsim.core.errors import UnknownNameError
from vgcsim.simulator.network import FairNetwork, make_network
from vgcsim.simulator.topology import build_topology

B = 2.0**20  # bytes/s: one n-byte flow alone takes 1 s
A = 2.0**-10  # s
N = 2.0**20  # bytes


def _network(p: int, *, bandwidth_Bps: float = B, latency_s: float = A):
    env = simpy.Environment()
    topology = build_topology(cluster(bandwidth_Bps=bandwidth_Bps, latency_s=latency_s), p)
    return env, FairNetwork(env, topology)


def _start(env, net, arrived: dict, flows, at: float = 0.0) -> None:
    """Start ``flows`` ((src, dst, bytes), ...) at ``at`` (one SimPy event if ``at`` > 0);
    ``arrived[(src, dst)]`` receives each one's arrival time."""

    def go(_event=None):
        for s, d, n in flows:
            net.start(s, d, n, on_arrived=lambda s=s, d=d: arrived.__setitem__((s, d), env.now))

    if at > 0:
        env.timeout(at).callbacks.append(go)
    else:
        go()


def test_flows_meeting_at_one_instant_share_one_reshare_event():
    """1->0, 2->0, 3->0 (N each) at 0 through 0's downlink. Events: 1->0's lazy timer (void:
    2->0 met it), the one reshare at 0 (3->0 joins the same one), the timer at 3 s (rate B/3
    each, all three due together), three latency timeouts: 6."""
    env, net = _network(4)
    arrived: dict = {}
    _start(env, net, arrived, [(1, 0, N), (2, 0, N), (3, 0, N)])
    assert count_events(env) == 6
    t = N / (B / 3) + A
    assert arrived == {(1, 0): t, (2, 0): t, (3, 0): t}


def test_a_reshare_that_keeps_the_earliest_finish_arms_no_second_timer():
    """1->0, 2->0 at 0 (finish at 2 s, rate B/2); 5->4, 6->4 at 0.5 s, another group (finish at
    2.5 s). The reshare at 0.5 s leaves the earliest finish at 2 s, whose timer is armed
    already. Events: 1->0's lazy timer, reshare at 0, timer at 2 s, the start event at 0.5 s,
    5->4's lazy timer, reshare at 0.5 s, timer at 2.5 s, four latency timeouts: 11."""
    env, net = _network(7)
    arrived: dict = {}
    _start(env, net, arrived, [(1, 0, N), (2, 0, N)])
    _start(env, net, arrived, [(5, 4, N), (6, 4, N)], at=0.5)
    assert count_events(env) == 11
    assert arrived == {(1, 0): 2 + A, (2, 0): 2 + A, (5, 4): 2.5 + A, (6, 4): 2.5 + A}


def test_a_superseded_timer_fires_void_and_arms_nothing():
    """X = 1->0 and Y = 2->0 (4N each) at 0: rate B/2, timer at 8 s. Z = 3->0 (N/4) joins at
    1 s: rates B/3, Z's last byte at 1.75 s, an earlier timer; X and Y then have 3.25 N left
    at B/2 each: 8.25 s. The timer armed for 8 s fires void and arms nothing. Events: X's
    lazy timer, reshare at 0, the void timer at 8 s, the start event at 1 s, reshare at 1 s,
    timer at 1.75 s, reshare at 1.75 s (Z left 0's downlink), timer at 8.25 s, three latency
    timeouts: 11."""
    env, net = _network(4)
    arrived: dict = {}
    _start(env, net, arrived, [(1, 0, 4 * N), (2, 0, 4 * N)])
    _start(env, net, arrived, [(3, 0, N / 4)], at=1.0)
    assert count_events(env) == 11
    r3 = B / 3
    z_end = 1 + (N / 4) / r3
    left = 4 * N - (B / 2) * 1 - r3 * (z_end - 1)
    xy_end = z_end + left / (B / 2)
    assert 1.74 < z_end < 1.76 and 8.24 < xy_end < 8.26
    assert arrived == {(3, 0): z_end + A, (1, 0): xy_end + A, (2, 0): xy_end + A}


def test_a_newcomer_frees_a_lazy_flow_whose_last_byte_left_at_that_instant():
    """1->0 (N) alone from 0: its last byte leaves at exactly 1 s, when 2->0 (N) starts on the
    same downlink. 2->0 finds the channel free: lazy itself, 1 s alone. Events: the two lazy
    timers and the start event: 3."""
    env, net = _network(3)
    arrived: dict = {}
    _start(env, net, arrived, [(1, 0, N)])
    _start(env, net, arrived, [(2, 0, N)], at=1.0)
    assert count_events(env) == 3
    assert arrived == {(1, 0): 1 + A, (2, 0): 2 + A}


def test_a_contended_newcomer_frees_the_lazy_flow_that_just_ended_and_shares_the_other():
    """2->3 (4N) and 1->0 (N) alone from 0. At 1 s, as 1->0's last byte leaves, 2->0 (N)
    starts: it meets 2->3 on 2's uplink (3 N left) and finds 1->0 done on 0's downlink. Both
    sharing 2's uplink get B/2: 2->0 ends at 3 s, 2->3 (2 N left) then alone at B ends at
    5 s. Events: two lazy timers (2->3's void), the start event, reshare at 1 s, timer at
    3 s, reshare at 3 s, timer at 5 s, two latency timeouts: 9."""
    env, net = _network(4)
    arrived: dict = {}
    _start(env, net, arrived, [(2, 3, 4 * N), (1, 0, N)])
    _start(env, net, arrived, [(2, 0, N)], at=1.0)
    assert count_events(env) == 9
    assert arrived == {(1, 0): 1 + A, (2, 0): 3 + A, (2, 3): 5 + A}


def test_without_latency_a_shared_flow_arrives_inside_its_timer():
    """Latency 0: 1->0 and 2->0 (N each) share 0's downlink and both arrive at 2 s, delivered
    by the timer itself. Events: 1->0's lazy timer, the reshare, the timer: 3."""
    env, net = _network(3, latency_s=0.0)
    arrived: dict = {}
    _start(env, net, arrived, [(1, 0, N), (2, 0, N)])
    assert count_events(env) == 3
    assert arrived == {(1, 0): 2.0, (2, 0): 2.0}


def test_a_max_min_rate_of_exactly_one_byte_per_second_still_ends_the_flow():
    """A 2 B/s star: 1->0 (4 bytes) alone, then 2->0 (2 bytes) meets it at 0 on 0's downlink:
    1 B/s each. 2->0 ends at 2 s; 1->0 then has 2 bytes left at 2 B/s and ends at 3 s. A
    newcomer's rate before its first reshare must not pass for the rate it is given."""
    env, net = _network(3, bandwidth_Bps=2.0)
    arrived: dict = {}
    _start(env, net, arrived, [(1, 0, 4.0), (2, 0, 2.0)])
    count_events(env)
    assert arrived == {(2, 0): 2 + A, (1, 0): 3 + A}


def test_an_unknown_sharing_model_is_refused_by_name():
    """The one line a user sees for a mistyped mode: what it is, what was given, what exists."""
    topology = build_topology(cluster(), 2)
    with pytest.raises(UnknownNameError) as err:
        make_network("bogus", simpy.Environment(), topology)
    assert str(err.value) == "unknown network mode 'bogus'; valid: fair, fifo"


def test_a_newcomer_at_the_instant_a_shared_flow_ends_shares_nothing_with_it():
    """1->0 (N) starts shared at 0 (a sender waits for its last byte to leave: on_sent), so
    its timer, not a lazy one, ends it at 1 s. 2->0 (N) starts at 1 s, in an event queued
    before that timer: it meets 1->0, with nothing left to send, on 0's downlink. The timer
    then ends 1->0 and leaves 2->0 alone; the reshare at 1 s gives it the whole link: it ends
    at 2 s. Events: the start event, 1->0's timer, its latency timeout, the reshare, 2->0's
    timer, its latency timeout: 6."""
    env, net = _network(3)
    arrived: dict = {}
    _start(env, net, arrived, [(2, 0, N)], at=1.0)  # queued first
    sent: list[float] = []
    net.start(
        1,
        0,
        N,
        on_sent=lambda: sent.append(env.now),
        on_arrived=lambda: arrived.__setitem__((1, 0), env.now),
    )
    assert count_events(env) == 6
    assert sent == [1.0]
    assert arrived == {(1, 0): 1 + A, (2, 0): 2 + A}
