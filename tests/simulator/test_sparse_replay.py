"""The sparse allreduce replayed on a star equals its closed form (within 0.1 %)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from vgcsim.core.cluster import load_cluster
from vgcsim.models import predict
from vgcsim.simulator.replay import SimulateConfig, simulate_trace
from vgcsim.traces.io import read_trace

TRACE = Path(__file__).resolve().parents[1] / "data" / "topk_w8_trace"
KEY = "sparse_allreduce/recursive_doubling"


def test_sparse_allreduce_replay_equals_predict_on_a_star():
    trace = read_trace(TRACE)
    sizes = (2, 5, 16, 64)  # within the recording, folded, and extrapolated past W = 8
    for name in ("1GbE", "10GbE"):
        cl = load_cluster(name)
        sim, _, _ = simulate_trace(trace, cl, sizes, SimulateConfig(per_step=True))
        pred = predict.predict_trace(
            trace, cl, predict.PredictOptions(world_sizes=sizes, per_step=True)
        )
        s = sim[sim["collective"] == KEY].set_index(["world_size", "step"]).sort_index()
        p = pred[pred["collective"] == KEY].set_index(["world_size", "step"]).sort_index()
        assert len(s) == len(p) == len(sizes) * (len(trace.steps) + 1)
        np.testing.assert_allclose(s["step_s"], p["step_s"], rtol=1e-3)
        np.testing.assert_allclose(s["comm_s"], p["comm_s"], rtol=1e-3)


def test_no_sparse_rows_for_a_trace_without_unions_or_when_switched_off():
    sample = read_trace(Path(__file__).resolve().parents[1] / "data" / "sample_trace")
    sim, _, _ = simulate_trace(sample, load_cluster("10GbE"), (4,), SimulateConfig())
    assert KEY not in set(sim["collective"])
    trace = read_trace(TRACE)
    sim, _, _ = simulate_trace(
        trace, load_cluster("10GbE"), (4,), SimulateConfig(sparse_allreduce=())
    )
    assert KEY not in set(sim["collective"])
