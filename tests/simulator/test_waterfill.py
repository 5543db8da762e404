"""The static max-min solver against hand-worked cases and the certified reference."""

from __future__ import annotations

import re

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


# The static max-min solver (vgcsim.simulator.waterfill.maxmin_rates): malformed input is
# refused with its own message, and rates below 1 B/s are solved like any others.
#
# References: progressive filling worked by hand with dyadic capacities (every quotient and
# difference exact), and the exact messages of the documented refusals.


def _refused(ptr, channels, cap, message: str) -> None:
    with pytest.raises(ValueError, match="^" + re.escape(message) + "$"):
        maxmin_rates(np.asarray(ptr), np.asarray(channels, dtype=np.int64), np.asarray(cap))


START = "flow_ptr must be a 1-D CSR pointer starting at 0"
ORDER = "flow_ptr must be non-decreasing and end at len(flow_channels)"
INDEX = "flow_channels must index capacity_Bps"


def test_an_empty_pointer_is_refused_as_not_a_csr_pointer():
    """Reference: the documented refusal. A CSR pointer has at least the entry 0; an empty
    one is refused with the 'starting at 0' message (not an IndexError)."""
    _refused(np.zeros(0, dtype=np.int64), [], [1.0], START)


def test_a_pointer_that_does_not_start_at_0_is_refused():
    """Reference: the documented refusal. [1, 2] over two incidences ends at
    len(flow_channels) but skips the first one."""
    _refused([1, 2], [0, 0], [1.0], START)


def test_a_two_dimensional_pointer_is_refused_with_the_csr_message():
    """Reference: the documented refusal, for a 2-D pointer whose first row starts at 0."""
    _refused(np.zeros((2, 2), dtype=np.int64), [], [1.0], START)


def test_a_decreasing_pointer_is_refused_with_the_order_message():
    """Reference: the documented refusal. [0, 2, 1, 3] ends at len(flow_channels) = 3 but
    flow 1 would have -1 channels."""
    _refused([0, 2, 1, 3], [0, 1, 0], [1.0, 1.0], ORDER)


def test_a_pointer_that_ends_early_is_refused_with_the_order_message():
    _refused([0, 1], [0, 1], [1.0, 1.0], ORDER)


def test_a_channel_index_past_the_capacities_is_refused_with_its_message():
    _refused([0, 1], [2], [1.0, 1.0], INDEX)


def test_rates_below_one_byte_per_second_follow_progressive_filling():
    """Reference: progressive filling by hand, dyadic capacities below 1 B/s.

    Channels: 0 = a's uplink (1/2 B/s), 1 = b's uplink (1/8), 2 = c's downlink (1/2).
    a -> c crosses 0, 2; b -> c crosses 1, 2. Shares: 1/4, 1/8, 1/4 -> b freezes at 1/8;
    channel 2 keeps 1/2 - 1/8 = 3/8 for a, channel 0 keeps 1/2: a gets 3/8. Nothing may
    raise a remaining capacity above what is left."""
    rate = maxmin_rates(np.array([0, 2, 4]), np.array([0, 2, 1, 2]), np.array([0.5, 0.125, 0.5]))
    assert rate.tolist() == [0.375, 0.125]


def test_scaling_every_capacity_by_a_power_of_two_scales_every_rate_by_it():
    """Reference: max-min fairness is homogeneous (scaling every capacity by k scales the
    allocation by k), and scaling by 2^-40 is exact in floating point. Three levels of
    filling: flows 0, 1 on channel 0 (1/4 each), flow 2 on channel 1 with flow 1
    (1 - 1/4 = 3/4), flow 3 alone on channel 2 (3)."""
    ptr = np.array([0, 1, 3, 4, 5])
    ch = np.array([0, 0, 1, 1, 2])
    cap = np.array([0.5, 1.0, 3.0])
    want = [0.25, 0.25, 0.75, 3.0]
    assert maxmin_rates(ptr, ch, cap).tolist() == want
    k = 2.0**-40
    assert maxmin_rates(ptr, ch, cap * k).tolist() == [w * k for w in want]
