"""CROSS-CHECK simulator vs models: this test imports both packages on purpose.

On a non-blocking star (no contention, rendezvous messages so rounds stay lock-step) the
message-level simulation must equal every closed form of ``vgcsim.models.collectives`` within 0.1 %,
for P a power of two and not, equal and uneven sizes (uneven where the lock-step closed form
is exact; see tests/simulator/test_collectives.py for why).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from simhelpers import cluster

from vgcsim.core.cluster import load_cluster
from vgcsim.models import collectives as models_collectives
from vgcsim.models import predict
from vgcsim.simulator.collectives import COLLECTIVES, get_schedule, unit_sizes
from vgcsim.simulator.paths.message import run_message
from vgcsim.simulator.paths.plan import Phase
from vgcsim.simulator.replay import SimulateConfig, simulate_trace
from vgcsim.simulator.topology import build_topology
from vgcsim.traces.io import read_trace

SAMPLE_TRACE = Path(__file__).resolve().parents[1] / "data" / "sample_trace"

GAMMA = 2e-10
N = 4e6


def test_registries_have_the_same_keys():
    assert set(COLLECTIVES) == set(models_collectives.COLLECTIVES)


def _sizes(kind: str, p: int) -> np.ndarray:
    if kind == "equal":
        return np.full(p, 1e6)
    if kind == "rising":
        return 1e5 * (1 + np.arange(p))
    return np.where(np.arange(p) == p // 2, 4e6, 1e5)


CASES = [(k, p, "equal", 1) for k in COLLECTIVES for p in (2, 3, 4, 5, 8, 12)]
CASES += [("allreduce/hierarchical", p, "equal", g) for p in (4, 5, 8, 12) for g in (2, 4)]
CASES += [
    (k, p, "one_big", 1)
    for k in ("allgatherv/ring", "allgatherv/padded", "allgatherv/direct")
    for p in (3, 4, 8)
]
CASES += [
    (k, p, "rising", 1)
    for k in ("allgatherv/bruck", "allgatherv/recursive_doubling")
    for p in (4, 8)
]


@pytest.mark.parametrize(("key", "p", "kind", "gpn"), CASES)
def test_simulated_equals_closed_form(key, p, kind, gpn):
    cl = cluster(gamma_s_per_byte=GAMMA, gpus_per_node=gpn)
    topo = build_topology(cl, p)
    sched = get_schedule(key, p, gpn)
    sizes = np.full(p, N) if key.startswith("allreduce/") else _sizes(kind, p)
    phase = Phase(np.zeros(p), sched, unit_sizes(sched, sizes))
    sim = run_message([phase], topo, semantics="rendezvous", gamma_s_per_byte=GAMMA).max()
    closed = float(models_collectives.collective_time_s(key, sizes, cl))
    assert sim == pytest.approx(closed, rel=1e-3)


@pytest.mark.parametrize("key", ["allreduce/ring", "allgatherv/ring", "allgatherv/padded"])
@pytest.mark.parametrize(
    "topology", [{"kind": "star"}, {"kind": "leaf_spine", "hosts_per_leaf": 4}]
)
def test_transport_efficiency_is_applied_alike(key, topology):
    """A link with efficiency e behaves as a link of e × the bandwidth, in the simulator's
    channels and in the closed forms (which agree with each other on these topologies)."""
    import dataclasses

    p = 8
    base = cluster(topology)
    derated = dataclasses.replace(base, link=dataclasses.replace(base.link, efficiency=0.9))
    slower = dataclasses.replace(
        base, link=dataclasses.replace(base.link, bandwidth_Bps=0.9 * base.link.bandwidth_Bps)
    )
    sched = get_schedule(key, p)
    sizes = np.full(p, N) if key.startswith("allreduce/") else _sizes("rising", p)
    times = []
    for cl in (derated, slower):
        topo = build_topology(cl, p)
        phase = Phase(np.zeros(p), sched, unit_sizes(sched, sizes))
        sim = run_message([phase], topo, semantics="rendezvous").max()
        times.append((sim, float(models_collectives.collective_time_s(key, sizes, cl))))
    assert times[0] == pytest.approx(times[1], rel=1e-12)
    if topology["kind"] == "star":
        assert times[0][0] == pytest.approx(times[0][1], rel=1e-3)


@pytest.mark.parametrize(
    ("allreduce", "allgatherv"),
    [("ring", "ring"), ("rabenseifner", "bruck"), ("binomial_tree", "recursive_doubling")],
)
def test_replay_of_the_sample_trace_matches_predict(allreduce, allgatherv):
    trace = read_trace(SAMPLE_TRACE)
    cl = load_cluster("10GbE")
    sizes = (4, 6, 16)
    cfg = SimulateConfig(
        allreduce=(allreduce,),
        allgatherv=(allgatherv,),
        per_step=True,
    )
    sim, _, _ = simulate_trace(trace, cl, sizes, cfg)
    opts = predict.PredictOptions(
        world_sizes=sizes, allreduce=(allreduce,), allgatherv=(allgatherv,), per_step=True
    )
    pred = predict.predict_trace(trace, cl, opts)
    key = ["world_size", "method", "encoding", "step"]
    merged = sim.merge(pred, on=key, suffixes=("_sim", "_pred"))
    assert len(merged) == len(sim) and set(merged["encoding"]) >= {"fp32", "bf16", "fp16"}
    np.testing.assert_allclose(merged["step_s_sim"], merged["step_s_pred"], rtol=1e-3)
    # comm: the simulator reports step − max(local + decode) − optimizer; the rank with the most
    # local work need not be the slowest decoder, so allow a little more than for step_s
    np.testing.assert_allclose(merged["comm_s_sim"], merged["comm_s_pred"], rtol=5e-3, atol=1e-9)
    for c in ("decode_s", "optimizer_s"):  # both report the slowest decoder, one optimizer
        np.testing.assert_allclose(merged[f"{c}_sim"], merged[f"{c}_pred"], rtol=1e-9)
    # codec: the simulator's mean over ranks, the closed form's critical rank
    np.testing.assert_allclose(merged["codec_s_sim"], merged["codec_s_pred"], rtol=1e-2)


@pytest.mark.parametrize("mode", ["model", "trace"])
@pytest.mark.parametrize("size_exchange", [True, False])
@pytest.mark.parametrize("allgatherv", ["ring", "padded"])
def test_synthetic_resnet50_star_simulate_equals_predict(
    r50_trace, mode, size_exchange, allgatherv
):
    """The issue's check: a synthetic ResNet-50 trace at 100x on a 10GbE star, simulate and
    predict give the same step time (<= 0.1 %), in both compute modes, with and without the
    size exchange, dense fp32/bf16/fp16 and compressed rows alike."""
    import dataclasses

    from vgcsim.core.cluster import get_cluster
    from vgcsim.models.predict import PredictOptions, predict_trace
    from vgcsim.simulator.replay import SimulateConfig, simulate_trace

    cl = dataclasses.replace(get_cluster("10GbE"), compute=mode)
    sizes = (2, 16, 128)
    cfg = SimulateConfig(allgatherv=(allgatherv,), size_exchange=size_exchange)
    sim, _, _ = simulate_trace(r50_trace, cl, sizes, cfg)
    opts = PredictOptions(world_sizes=sizes, allgatherv=(allgatherv,), size_exchange=size_exchange)
    pred = predict_trace(r50_trace, cl, opts)
    merged = sim.merge(pred, on=["world_size", "method", "encoding"], suffixes=("_s", "_p"))
    assert len(merged) == len(sim) == 4 * len(sizes)
    np.testing.assert_allclose(merged["step_s_s"], merged["step_s_p"], rtol=1e-3)
    assert set(merged["compute_mode_s"]) == set(merged["compute_mode_p"]) == {mode}
    assert (merged["device_s"] == merged["device_p"]).all()


@pytest.fixture(scope="module")
def r50_trace(tmp_path_factory):
    from vgcsim.traces.io import read_trace
    from vgcsim.traces.synth import SynthConfig, synth_trace

    out = tmp_path_factory.mktemp("r50") / "r50"
    cfg = SynthConfig(layers="resnet50", workers=4, steps=2, target_ratio=100.0)
    return read_trace(synth_trace(cfg, out))


@pytest.mark.parametrize("overlap", ["per_layer", "bucketed"])
def test_overlapped_replay_matches_predict(overlap):
    """Per-layer and bucketed overlap: the simulator's schedule of backward, variance and
    codec work (one stream per device) is the closed form's, so they agree without contention."""
    trace = read_trace(SAMPLE_TRACE)
    cl = load_cluster("10GbE")
    sizes = (4, 8)
    bucket = 2.0**14
    sim, _, _ = simulate_trace(
        trace, cl, sizes, SimulateConfig(overlap=overlap, bucket_bytes=bucket, per_step=True)
    )
    opts = predict.PredictOptions(
        world_sizes=sizes, overlap=overlap, bucket_bytes=bucket, per_step=True
    )
    pred = predict.predict_trace(trace, cl, opts)
    merged = sim.merge(
        pred, on=["world_size", "method", "encoding", "step"], suffixes=("_sim", "_pred")
    )
    assert len(merged) == len(sim) and (merged["method"] == "compressed").any()
    np.testing.assert_allclose(merged["step_s_sim"], merged["step_s_pred"], rtol=1e-3)


def test_graph_links_take_efficiency_or_framing():
    import dataclasses

    from vgcsim.core.errors import ConfigError

    def graph(**extra):
        links = [{"a": "x", "b": "y", "bandwidth": "8Gbps", "latency": "1us", **extra}]
        return dataclasses.replace(
            cluster(), topology={"kind": "graph", "hosts": ["x", "y"], "links": links}
        )

    assert build_topology(graph(), 2).route(0, 1).bandwidth_Bps == pytest.approx(1e9)
    assert build_topology(graph(efficiency=0.5), 2).route(0, 1).bandwidth_Bps == pytest.approx(5e8)
    tcp = build_topology(graph(framing="tcp-mtu9000"), 2).route(0, 1).bandwidth_Bps
    assert tcp == pytest.approx(1e9 * 8948 / 9038)
    for bad in (0.0, 1.5, float("nan"), float("inf")):
        with pytest.raises(ConfigError, match="efficiency"):
            build_topology(graph(efficiency=bad), 2)
    with pytest.raises(ConfigError, match="framing"):
        build_topology(graph(framing="smoke-signals"), 2)
