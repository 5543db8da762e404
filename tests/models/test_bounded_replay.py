"""allgatherv/bounded on a recorded trace (DDP's greedy buckets of bucket_bytes): predict and
simulate agree step by step on a star, the bytes are the bound rule's, and the options the
bounded exchange does not take are refused in one line."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from vgcsim.core.bounded import align_bytes, bounded_rounds
from vgcsim.core.cluster import get_cluster
from vgcsim.core.errors import ConfigError
from vgcsim.models.predict import (
    PredictOptions,
    bounded_comm_s,
    bounded_wire_bytes,
    predict_trace,
)
from vgcsim.simulator.replay import SimulateConfig, simulate_trace
from vgcsim.traces.buckets import bucket_layers
from vgcsim.traces.inputs import bucket_messages, default_allgatherv, step_inputs
from vgcsim.traces.io import read_trace

SAMPLE = Path(__file__).resolve().parents[1] / "data" / "sample_trace"
BUCKET = 64 * 1024.0  # several buckets of the sample trace's layers


@pytest.fixture(scope="module")
def trace():
    return read_trace(SAMPLE)


def _cluster():
    return dataclasses.replace(get_cluster("10GbE"), compute="trace")


def test_a_recorded_trace_defaults_to_ring_and_buckets_like_ddp(trace):
    assert default_allgatherv(trace) == "ring"
    si = step_inputs(trace, _cluster(), 4, layers=True)
    bm = bucket_messages(trace, si.layer_bytes, BUCKET)
    numel = [int(layer["numel"]) for layer in trace.layers]
    assert bm.buckets == [tuple(b) for b in bucket_layers(numel, BUCKET)]
    assert len(bm.buckets) > 1 and bm.used.all()
    # a message is the 4-byte total plus 4 bytes per layer, then the layers' bytes
    k = 0
    want = 4 * (len(bm.buckets[k]) + 1) + si.layer_bytes[:, :, list(bm.buckets[k])].sum(axis=2)
    assert (bm.messages[:, :, k] == want).all()


def test_wire_bytes_are_bound_plus_fallback_of_every_bucket(trace):
    si = step_inputs(trace, _cluster(), 4, layers=True)
    bm = bucket_messages(trace, si.layer_bytes, BUCKET)
    want = np.zeros(len(si.steps), dtype=np.int64)
    for k in range(len(bm.buckets)):
        b, e = bounded_rounds(bm.messages[:, :, k], align_bytes(int(bm.header_bytes[k])))
        want += b + e
    assert bounded_wire_bytes(bm).tolist() == want.tolist()
    # every rank sends at least its largest message's bytes over a step's buckets
    assert (bounded_wire_bytes(bm) >= bm.messages.max(axis=1).sum(axis=1)).all()


@pytest.mark.parametrize("p", (2, 4))
def test_predict_and_simulate_agree_step_by_step_on_a_star(trace, p):
    cluster = _cluster()
    pred = predict_trace(
        trace,
        cluster,
        PredictOptions(
            world_sizes=(p,), allgatherv=("bounded",), per_step=True, bucket_bytes=BUCKET
        ),
    )
    sim, _, _ = simulate_trace(
        trace,
        cluster,
        [p],
        SimulateConfig(allgatherv=("bounded",), per_step=True, bucket_bytes=BUCKET),
    )
    rows = {
        name: df[(df["method"] == "compressed") & (df["step"] >= 0)].set_index("step")
        for name, df in (("pred", pred), ("sim", sim))
    }
    assert len(rows["pred"]) == trace.steps_count
    assert np.allclose(rows["sim"]["comm_s"], rows["pred"]["comm_s"], rtol=1e-9, atol=1e-12)
    assert np.allclose(rows["sim"]["step_s"], rows["pred"]["step_s"], rtol=1e-9, atol=1e-12)
    si = step_inputs(trace, cluster, p, layers=True)
    comm = bounded_comm_s(bucket_messages(trace, si.layer_bytes, BUCKET), cluster)
    assert np.allclose(rows["pred"]["comm_s"].to_numpy(), comm, rtol=1e-12)


def test_bucketed_overlap_is_refused_with_the_bounded_exchange(trace):
    with pytest.raises(ConfigError, match="overlap none or full"):
        predict_trace(
            trace,
            _cluster(),
            PredictOptions(world_sizes=(2,), allgatherv=("bounded",), overlap="bucketed"),
        )
    with pytest.raises(ConfigError, match="overlap none"):
        SimulateConfig(allgatherv=("bounded",), overlap="bucketed")
