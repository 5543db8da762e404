"""The static max-min solver (vgcsim.simulator.waterfill.maxmin_rates): malformed input is
refused with its own message, and rates below 1 B/s are solved like any others.

References: progressive filling worked by hand with dyadic capacities (every quotient and
difference exact), and the exact messages of the documented refusals."""

from __future__ import annotations

import re

import numpy as np
import pytest
from vgcsim.simulator.waterfill import maxmin_rates


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
