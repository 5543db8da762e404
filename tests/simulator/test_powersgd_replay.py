"""PowerSGD traces priced as dense allreduces: predict against the allreduce closed forms of
the sizes worked out from the layer shapes, and simulate against predict on a star."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from vgcsim import api
from vgcsim.core.cluster import DeviceSpec, load_cluster
from vgcsim.models import predict
from vgcsim.simulator.replay import SimulateConfig, simulate_trace
from vgcsim.traces import devicecost
from vgcsim.traces.io import read_trace

TRACE = Path(__file__).resolve().parents[1] / "data" / "powersgd_trace"
RANK, START = 2, 2


def allreduce_sizes(layers: list[dict], step: int) -> tuple[float, float, float]:
    """Bytes of the plain, P and Q allreduces of one step, from torch's rule by hand."""
    plain = p_el = q_el = 0
    for layer in layers:
        shape = layer["shape"]
        numel = math.prod(shape)
        n = shape[0]
        m = numel // n
        r = min(n, m, RANK)
        if step >= START and len(shape) and (n + m) * r * 2 < n * m:
            p_el, q_el = p_el + n * r, q_el + m * r
        else:
            plain += numel
    return 4.0 * plain, 4.0 * p_el, 4.0 * q_el


@pytest.mark.parametrize("p", [2, 5, 16])
def test_predict_prices_three_allreduces_of_the_closed_form_sizes(p):
    trace = read_trace(TRACE)
    cl = load_cluster("10GbE")
    opts = predict.PredictOptions(world_sizes=(p,), per_step=True)
    df = predict.predict_trace(trace, cl, opts)
    rows = df[(df["method"] == "compressed") & (df["step"] >= 0)]
    assert set(rows["collective"]) == {"allreduce/ring"}
    assert set(rows["encoding"]) == {"lowrank_fp32"}
    for step in (0, 1, 2, 39):
        sizes = allreduce_sizes(trace.layers, step)
        want = sum(api.collective(cl, "allreduce/ring", [b] * p) for b in sizes)
        got = float(rows.loc[rows["step"] == step, "comm_s"].iloc[0])
        assert got == pytest.approx(want, rel=1e-12)
        payload = float(rows.loc[rows["step"] == step, "payload_bytes_max"].iloc[0])
        assert payload == sum(sizes)


def test_powersgd_sends_fewer_bytes_than_dense_after_the_warm_up():
    trace = read_trace(TRACE)
    df = predict.predict_trace(
        trace, load_cluster("10GbE"), predict.PredictOptions(world_sizes=(4,), per_step=True)
    )
    comp = df[(df["method"] == "compressed") & (df["step"] >= START)]
    dense = df[(df["method"] == "dense") & (df["encoding"] == "fp32") & (df["step"] >= 0)]
    assert comp["payload_bytes_max"].max() < 0.5 * dense["payload_bytes_max"].min()


@pytest.mark.parametrize("overlap", ["none", "bucketed"])
def test_simulate_equals_predict_on_a_star(overlap):
    trace = read_trace(TRACE)
    cl = load_cluster("10GbE")
    sizes = (2, 8, 32)
    extra = {"bucket_bytes": 40_000.0} if overlap == "bucketed" else {}
    sim, _, _ = simulate_trace(
        trace, cl, sizes, SimulateConfig(overlap=overlap, per_step=True, **extra)
    )
    pred = predict.predict_trace(
        trace,
        cl,
        predict.PredictOptions(world_sizes=sizes, overlap=overlap, per_step=True, **extra),
    )
    key = ["world_size", "method", "encoding", "step"]
    merged = sim.merge(pred, on=key, suffixes=("_sim", "_pred"))
    assert len(merged) == len(sim)
    comp = merged[merged["method"] == "compressed"]
    assert set(comp["collective_sim"]) == {"allreduce/ring"}
    np.testing.assert_allclose(comp["step_s_sim"], comp["step_s_pred"], rtol=1e-3)


def test_device_model_of_one_compressed_and_one_plain_tensor():
    """Hand-worked: a 64 x 100 matrix at r' = 2 (p = 128, q = 200) and a 64-element bias on a
    device of 1e12 FLOP/s effective, 1e11 B/s sustained, 5 µs per launch. FLOPs 6·6400·2 =
    76,800 (76.8 ns); bytes 44·6400 + 4·328·(3 + 6) + 40·64 = 281,600 + 11,808 + 2,560 =
    295,968 (2.95968 µs, the larger); launches (5 + 12) + 2 + 3 = 22 (110 µs)."""
    dev = DeviceSpec(
        name="hand",
        peak_flops=1e12,
        efficiency=1.0,
        source="a test device",
        memory_bandwidth_Bps=1e11,
        memory_efficiency=1.0,
        launch_overhead_s=5e-6,
    )
    assert dev.effective_flops == 1e12 and dev.sustained_memory_Bps == 1e11
    t = devicecost.powersgd_time_s([6400, 64], [128, 0], [200, 0], dev)
    assert float(t) == pytest.approx(295_968 / 1e11 + 22 * 5e-6, rel=1e-12)
