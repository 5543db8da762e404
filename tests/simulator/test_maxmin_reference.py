"""Max-min fair sharing against references computed outside the simulator.

Two hand-worked scenarios where progressive filling and "equal share per channel" disagree
(a flow must take the capacity a slower flow leaves on a shared channel), and random
instances checked against a water-level reference whose output is certified max-min fair by
the bottleneck theorem (Bertsekas & Gallager, *Data Networks*, 2nd ed., §6.5.2: a feasible
allocation is max-min fair iff every flow crosses a saturated channel on which no other flow
has a larger rate).

Trick for the random instances: flow i carries ``r_i × T`` bytes, where ``r_i`` is its
reference max-min rate. Under the right rates every flow ends at exactly T (no flow ends
earlier, so the rates never change); any other allocation makes some flow end before or
after T.
"""

from __future__ import annotations

import numpy as np
import pytest
import simpy
from simhelpers import BW, cluster

from vgcsim.simulator.network import make_network
from vgcsim.simulator.topology import build_topology

N = 1e6  # bytes


def _graph(nic_Bps: dict[str, float], extra_links=()):
    """Hosts with their NIC bandwidth into one switch ``sw`` (zero latency)."""
    links = [
        {"a": h, "b": "sw", "bandwidth_Bps": bw, "latency_s": 0.0} for h, bw in nic_Bps.items()
    ]
    links += list(extra_links)
    spec = {"kind": "graph", "hosts": list(nic_Bps), "links": links}
    return build_topology(cluster(spec, latency_s=0.0), len(nic_Bps))


def _sent_times(topo, flows):
    """Start every (src, dst, nbytes) at t = 0; the time each flow's last byte left."""
    env = simpy.Environment()
    net = make_network("fair", env, topo)
    out: dict[int, float] = {}

    def run(i, src, dst, nbytes):
        sent, _ = net.transfer(src, dst, nbytes)
        yield sent
        out[i] = env.now

    for i, (src, dst, nbytes) in enumerate(flows):
        env.process(run(i, src, dst, nbytes))
    env.run()
    return [out[i] for i in range(len(flows))]


def test_progressive_filling_gives_a_flow_what_a_slow_neighbour_leaves():
    # a -> c and b -> c share c's downlink; b's NIC is B/4. Progressive filling: b -> c is
    # frozen at B/4 by its NIC, a -> c takes the 3B/4 left on c's downlink (equal shares per
    # channel would give it only B/2). By hand: a -> c ends at N / (3B/4) = 4N / 3B; b -> c
    # has sent B/4 × 4N/3B = N/3 by then and sends the remaining 2N/3 alone at B/4, ending at
    # 4N/B.
    topo = _graph({"a": BW, "b": BW / 4, "c": BW})
    t_ac, t_bc = _sent_times(topo, [(0, 2, N), (1, 2, N)])
    assert t_ac == pytest.approx(4 * N / (3 * BW), rel=1e-9)
    assert t_bc == pytest.approx(4 * N / BW, rel=1e-9)


def test_progressive_filling_frees_capacity_through_a_second_channel():
    # b (NIC B/4) sends to c and d: the NIC is the first bottleneck, B/8 each. a -> c then
    # gets c's downlink less B/8 = 7B/8 (equal shares: B/2). By hand: a -> c ends at
    # 8N / 7B; b's flows keep B/8 each (their NIC still binds after a -> c ends): 8N / B.
    topo = _graph({"a": BW, "b": BW / 4, "c": BW, "d": BW})
    times = _sent_times(topo, [(0, 2, N), (1, 2, N), (1, 3, N)])
    assert times[0] == pytest.approx(8 * N / (7 * BW), rel=1e-9)
    assert times[1] == pytest.approx(8 * N / BW, rel=1e-9)
    assert times[2] == pytest.approx(8 * N / BW, rel=1e-9)


def _water_level_rates(channels: list[tuple[int, ...]], cap: np.ndarray) -> np.ndarray:
    """Max-min rates by raising one common level for all unfrozen flows (event-driven).

    Written as a water level rather than as the simulator's "smallest remaining share
    first": the level rises until some channel is full; every flow on a full channel stops
    rising there.
    """
    n = len(channels)
    rate = np.zeros(n)
    frozen = np.zeros(n, dtype=bool)
    level = 0.0
    while not frozen.all():
        # raise the level by the smallest step that fills a channel
        step = np.inf
        for c in range(len(cap)):
            rising = [i for i in range(n) if not frozen[i] and c in channels[i]]
            if rising:
                used = sum(rate[i] for i in range(n) if c in channels[i])
                step = min(step, (cap[c] - used) / len(rising))
        level += step
        rate[~frozen] = level
        for c in range(len(cap)):
            used = sum(rate[i] for i in range(n) if c in channels[i])
            if used >= cap[c] * (1 - 1e-12):
                for i in range(n):
                    if c in channels[i]:
                        frozen[i] = True
    return rate


def _assert_max_min_fair(channels, cap, rate):
    """The bottleneck theorem: feasible, and each flow has a saturated channel where it is
    among the largest."""
    for c in range(len(cap)):
        on = [i for i in range(len(rate)) if c in channels[i]]
        assert sum(rate[i] for i in on) <= cap[c] * (1 + 1e-9)
    for i, chans in enumerate(channels):
        assert any(
            sum(rate[j] for j in range(len(rate)) if c in channels[j]) >= cap[c] * (1 - 1e-9)
            and all(rate[j] <= rate[i] * (1 + 1e-9) for j in range(len(rate)) if c in channels[j])
            for c in chans
        ), f"flow {i} has no bottleneck channel"


@pytest.mark.parametrize("seed", range(6))
def test_random_instances_match_the_certified_water_level_reference(seed):
    rng = np.random.default_rng(seed)
    hosts = [f"h{i}" for i in range(6)]
    nic = {h: BW * float(rng.choice([0.25, 0.5, 1.0, 2.0])) for h in hosts}
    # two switches joined by a thin trunk: hosts 0-2 on sw, 3-5 on sw2
    links = [
        {"a": h, "b": "sw" if i < 3 else "sw2", "bandwidth_Bps": nic[h], "latency_s": 0.0}
        for i, h in enumerate(hosts)
    ]
    links.append({"a": "sw", "b": "sw2", "bandwidth_Bps": BW * 0.75, "latency_s": 0.0})
    spec = {"kind": "graph", "hosts": hosts, "links": links}
    topo = build_topology(cluster(spec, latency_s=0.0), len(hosts))
    pairs = {(int(a), int(b)) for a, b in rng.integers(0, 6, size=(9, 2)) if a != b}
    pairs = sorted(pairs)
    channels = [tuple(topo.route(s, d).channels) for s, d in pairs]
    cap = np.asarray(topo.capacity_Bps, dtype=float)
    rate = _water_level_rates(channels, cap)
    _assert_max_min_fair(channels, cap, rate)
    t_end = 1e-3
    times = _sent_times(topo, [(s, d, r * t_end) for (s, d), r in zip(pairs, rate, strict=True)])
    np.testing.assert_allclose(times, t_end, rtol=1e-9)
