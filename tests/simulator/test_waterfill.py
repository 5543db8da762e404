"""The static max-min solver against hand-worked cases and the certified reference."""

from __future__ import annotations

import numpy as np
import pytest
from test_maxmin_reference import _assert_max_min_fair, _water_level_rates
from vgcsim.simulator.waterfill import maxmin_rates

B = 1.25e9


def _csr(channels: list[tuple[int, ...]]) -> tuple[np.ndarray, np.ndarray]:
    ptr = np.zeros(len(channels) + 1, dtype=np.int64)
    ptr[1:] = np.cumsum([len(c) for c in channels])
    flat = np.array([c for chans in channels for c in chans], dtype=np.int64)
    return ptr, flat


def _rates(channels, cap):
    return maxmin_rates(*_csr(channels), np.asarray(cap, dtype=float))


def test_a_flow_takes_what_a_slow_neighbour_leaves():
    # channels: 0 = a's uplink (B), 1 = b's uplink (B/4), 2 = c's downlink (B).
    # a -> c crosses 0, 2; b -> c crosses 1, 2. By hand: b's uplink binds first at B/4
    # (share B/4 < B/2 on c's downlink); a -> c then gets c's downlink less B/4 = 3B/4.
    rate = _rates([(0, 2), (1, 2)], [B, B / 4, B])
    assert rate.tolist() == [3 * B / 4, B / 4]


def test_second_bottleneck_and_a_free_channel():
    # 0: b's uplink B/4 shared by b -> c and b -> d: B/8 each. 1: c's downlink B, shared by
    # a -> c and b -> c: a -> c gets B - B/8 = 7B/8. 2: d's downlink carries b -> d only.
    # 3: a's uplink (B). By hand: [7B/8, B/8, B/8].
    rate = _rates([(3, 1), (0, 1), (0, 2)], [B / 4, B, B, B])
    assert rate.tolist() == [7 * B / 8, B / 8, B / 8]


def test_equal_flows_share_a_channel_equally_and_ties_saturate_together():
    # a star of 3 hosts, every pair in both directions: channels 0-2 up, 3-5 down, each
    # carrying 2 flows; all six channels tie at B/2 and every flow gets exactly B/2.
    flows = [(s, 3 + d) for s in range(3) for d in range(3) if s != d]
    rate = _rates(flows, [B] * 6)
    assert rate.tolist() == [B / 2] * 6


def test_a_flow_on_no_channel_is_unconstrained_and_an_empty_problem_is_empty():
    rate = _rates([(0,), ()], [B])
    assert rate.tolist() == [B, np.inf]
    assert maxmin_rates(np.zeros(1, np.int64), np.zeros(0, np.int64), np.ones(2)).size == 0


@pytest.mark.parametrize("seed", range(20))
def test_random_instances_match_the_certified_water_level_reference(seed):
    rng = np.random.default_rng(seed)
    n_channels = int(rng.integers(2, 9))
    cap = B * rng.choice([0.25, 0.5, 0.75, 1.0, 2.0], n_channels)
    flows = []
    for _ in range(int(rng.integers(1, 14))):
        k = int(rng.integers(1, min(4, n_channels) + 1))
        flows.append(tuple(int(c) for c in rng.choice(n_channels, k, replace=False)))
    rate = _rates(flows, cap)
    _assert_max_min_fair(flows, cap, rate)
    np.testing.assert_allclose(rate, _water_level_rates(flows, cap), rtol=1e-12)


def test_malformed_csr_is_refused():
    with pytest.raises(ValueError, match="end at"):
        maxmin_rates(np.array([0, 3]), np.array([0, 1]), np.ones(2))
    with pytest.raises(ValueError, match="index"):
        maxmin_rates(np.array([0, 1]), np.array([2]), np.ones(2))


@pytest.mark.parametrize("seed", range(10))
def test_the_networks_python_twin_for_small_groups_gives_the_same_floats(seed):
    # The flow network solves small groups in plain Python; it must repeat maxmin_rates to
    # the last bit, or results would depend on the group size threshold.
    from types import SimpleNamespace

    from vgcsim.simulator.network import _maxmin_small

    rng = np.random.default_rng(100 + seed)
    n_channels = int(rng.integers(2, 9))
    cap = B * rng.choice([0.25, 1 / 3, 0.5, 0.7, 1.0, 4.0], n_channels)
    flows = []
    for _ in range(int(rng.integers(1, 20))):
        k = int(rng.integers(1, min(4, n_channels) + 1))
        flows.append(tuple(int(c) for c in rng.choice(n_channels, k, replace=False)))
    group = [SimpleNamespace(channels=f) for f in flows]
    assert _maxmin_small(group, cap.tolist()) == _rates(flows, cap).tolist()
