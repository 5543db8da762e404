"""The two per-message rules both twins call (``vgcsim.core.collectives``), at their edges,
from the docstrings' formulas by hand: a message exactly at a size segment's start takes
that segment's line, and a token bucket of one byte gives one byte's credit."""

from __future__ import annotations

import numpy as np
import pytest

from vgcsim.core.collectives import burst_credit_s, message_time_s, wire_bytes
from vgcsim.core.specs import LinkSpec


def _segmented() -> LinkSpec:
    # α = 1 ms; from 0 B at 1000 B/s, from 100 B 1 s less at 100 B/s (the lines cross there:
    # 100 B costs 0.1 s on the first and −1 + 1 = 0 s on the second, floored at 0)
    return LinkSpec(
        name="t",
        bandwidth_Bps=100.0,
        latency_s=1e-3,
        segments=((0.0, 0.0, 1000.0), (100.0, -1.0, 100.0)),
    )


def test_a_message_at_a_segments_start_takes_that_segments_line():
    link = _segmented()
    # k is the segment of the largest from_bytes <= m: 100 B is the second segment's,
    # max(α, α − 1 + 100/100) = α; 99 B is still the first's, α + 99/1000
    got = message_time_s(link, np.array([99.0, 100.0, 300.0]))
    assert got == pytest.approx([1e-3 + 0.099, 1e-3, 1e-3 + 2.0], abs=1e-12)
    assert wire_bytes(link, np.array([100.0, 300.0])) == pytest.approx([0.0, 200.0])


def test_a_one_byte_bucket_gives_one_bytes_credit():
    # b = 1 B at B = 1 B/s: min(b/B, step − comm, comm) = min(1, 3, 2) = 1 s
    assert burst_credit_s([2.0], [5.0], 1.0, 1.0) == pytest.approx([1.0])
    # and none without a bucket, as floats whatever the inputs' type
    none = burst_credit_s(np.array([2, 3]), np.array([5, 5]), 0, 1.0)
    assert none.dtype == np.float64 and not none.any()


def test_a_message_below_the_first_segment_takes_the_first_segments_line():
    # segments may start above 0 B: a smaller message is priced on the first one (the
    # docstring's "the first below it"), not on the last
    link = LinkSpec(
        name="t",
        bandwidth_Bps=100.0,
        latency_s=1e-3,
        segments=((10.0, 0.0, 1000.0), (100.0, -1.0, 100.0)),
    )
    assert message_time_s(link, np.array([4.0])) == pytest.approx([1e-3 + 0.004], abs=1e-12)
