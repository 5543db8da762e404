"""The link monitor's flow count and what an empty message costs, on a star with dyadic
numbers: bandwidth 2^20 B/s, host -> switch -> host latency 2^-10 s; the max-min solver on
inputs of other numeric types."""

from __future__ import annotations

import numpy as np
import pytest
import simpy
from simhelpers import cluster
from vgcsim.simulator.network import LinkMonitor, make_network
from vgcsim.simulator.topology import build_topology
from vgcsim.simulator.waterfill import maxmin_rates

B = 2.0**20
A = 2.0**-10
N = 2**20


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
        net.start(2, 0, N // 4)

    env.process(later())
    net.start(0, 1, N)
    net.start(0, 2, N // 2)
    net.start(1, 1, N)
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
