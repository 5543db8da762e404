"""Flow timing in the two sharing models against hand computations with small dyadic
numbers: a star with 2 B/s links and no latency, so two flows sharing a channel get exactly
1 B/s each (a rate that equals neither the free-link rate nor zero).

* fair sharing: flow A (4 B, 0 -> 1) starts alone at t = 0; flow B (4 B, same channels)
  starts at t = 1. A has sent 2 B alone, then shares: 2 B at 1 B/s ends it at t = 3; B sent
  2 B by then and sends its other 2 B alone at 2 B/s, ending at t = 4. Both entry points
  (``start`` with callbacks, ``start_message`` with ``done``) must give these times.
* FIFO: a one-byte message takes 1 B / 2 B/s = 0.5 s on the channel; only an empty message
  arrives at once.
"""

from __future__ import annotations

import pytest
import simpy
from simhelpers import cluster
from vgcsim.simulator.network import LinkMonitor, make_network
from vgcsim.simulator.topology import build_topology


def _star(mode):
    env = simpy.Environment()
    topo = build_topology(cluster(bandwidth_Bps=2.0, latency_s=0.0), 2)
    return env, topo, make_network(mode, env, topo)


@pytest.mark.parametrize("entry", ["start", "start_message"])
def test_a_lone_flow_met_later_shares_from_then_on_hand_computed_finish_times(entry):
    """Reference: the hand computation of the module docstring, A ends at 3 s, B at 4 s."""
    env, topo, net = _star("fair")
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
    env, topo, net = _star("fifo")
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
    env, topo, net = _star("fair")
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
