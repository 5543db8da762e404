"""Per-layer and per-bucket bytes of a replay (``step_inputs(layers=...)``) against the trace.

Reference: the payload table itself, summed with pandas per (step, worker, group) and
rounded up to whole bytes once per group (⌈bits / 8⌉ of the group's total), then mapped to
ranks by ``j mod W`` (the ``modulo`` rule).
"""

from __future__ import annotations

import numpy as np
import pytest

from vgcsim.core.cluster import get_cluster
from vgcsim.core.errors import TraceError
from vgcsim.traces.inputs import step_inputs
from vgcsim.traces.io import read_trace

P = 6


@pytest.fixture(scope="module")
def trace():
    return read_trace("tests/data/sample_trace")


def _reference(trace, groups, encoding):
    p = trace.payloads
    steps = np.sort(p["step"].unique())
    w = trace.workers
    out = np.zeros((len(steps), w, len(groups)), dtype=np.int64)
    for k, g in enumerate(groups):
        sub = p[p["layer"].isin(g)]
        bits = sub.groupby(["step", "worker"])[f"bits_{encoding}"].sum()
        for (step, worker), b in bits.items():
            out[int(np.searchsorted(steps, step)), int(worker), k] = -(-int(b) // 8)
    return out[:, np.arange(P) % w, :]


@pytest.mark.parametrize("encoding", ("packed32", "coo64", "gap_elias_delta"))
def test_bucket_bytes_sum_only_their_layers(trace, encoding):
    # layers 3..7 belong to no bucket here: they must not count anywhere
    groups = [[0, 1], [2]]
    si = step_inputs(trace, get_cluster("10GbE"), P, encoding=encoding, layers=groups)
    assert si.layer_bytes.shape == (100, P, 2)
    np.testing.assert_array_equal(si.layer_bytes, _reference(trace, groups, encoding))


def test_per_layer_bytes_follow_the_chosen_encoding(trace):
    si = step_inputs(trace, get_cluster("10GbE"), P, encoding="bitmap", layers=True)
    groups = [[i] for i in range(8)]
    np.testing.assert_array_equal(si.layer_bytes, _reference(trace, groups, "bitmap"))
    primary = step_inputs(trace, get_cluster("10GbE"), P, layers=True)
    np.testing.assert_array_equal(primary.layer_bytes, _reference(trace, groups, "packed32"))
    assert not np.array_equal(si.layer_bytes, primary.layer_bytes)


@pytest.mark.parametrize("bad", ([[0, 8]], [[-1]]))
def test_groups_naming_layers_outside_the_trace_are_refused(trace, bad):
    with pytest.raises(TraceError, match=r"layer groups name layers outside 0\.\.7$"):
        step_inputs(trace, get_cluster("10GbE"), P, layers=bad)


def test_the_last_layer_is_a_valid_group(trace):
    si = step_inputs(trace, get_cluster("10GbE"), P, layers=[[7]])
    np.testing.assert_array_equal(si.layer_bytes, _reference(trace, [[7]], "packed32"))
