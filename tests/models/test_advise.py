"""The per-bucket mix chooser and the ranking of `vgcsim advise`.

The chooser's check (issue): on synthetic ResNet-50 and VGG traces across 1/10/100 GbE and
P = 8 … 1024, its pick is never slower than the best single method (all buckets dense or all
compressed) and equals brute force over every per-bucket mix (buckets ≤ 12).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from vgcsim import api
from vgcsim.commands.demo import DEMO_TRACES
from vgcsim.core.cluster import load_cluster
from vgcsim.core.errors import ConfigError
from vgcsim.models.advise import (
    MixInputs,
    brute_force_mix,
    choose_mix,
    mix_inputs,
    mix_step_time_s,
)
from vgcsim.models.iteration import bucketed_step_time_s
from vgcsim.traces.io import read_trace
from vgcsim.traces.synth import SynthConfig, synth_trace

DATA = Path(__file__).resolve().parents[1] / "data"
POWERSGD = DATA / "powersgd_trace"
BUCKET_BYTES = {"resnet50": 10 * 2**20, "vgg_like": 2 * 2**20}


@pytest.fixture(scope="module")
def synth(tmp_path_factory):
    out = {}
    for layers, ratio in (("resnet50", 100.0), ("vgg_like", 30.0)):
        cfg = SynthConfig(layers=layers, workers=4, steps=3, target_ratio=ratio, seed=1)
        out[layers] = read_trace(synth_trace(cfg, tmp_path_factory.mktemp(layers) / "t"))
    return out


@pytest.mark.slow
@pytest.mark.parametrize("layers", ["resnet50", "vgg_like"])
def test_chooser_equals_brute_force_and_never_loses_to_a_single_method(synth, layers):
    trace = synth[layers]
    for name in ("1GbE", "10GbE", "100GbE"):
        cl = load_cluster(name)
        for p in (8, 32, 128, 1024):
            mi = mix_inputs(trace, cl, p, bucket_bytes=BUCKET_BYTES[layers])
            assert 2 <= mi.buckets <= 12
            mask, t = choose_mix(mi)
            brute_mask, brute_t = brute_force_mix(mi)
            assert t == pytest.approx(brute_t, rel=1e-12, abs=1e-15), (name, p)
            assert mix_step_time_s(mi, mask) == pytest.approx(t, rel=1e-12)
            single = min(
                mix_step_time_s(mi, [False] * mi.buckets),
                mix_step_time_s(mi, [True] * mi.buckets),
            )
            assert t <= single * (1 + 1e-12)


def test_all_compressed_mix_is_the_bucketed_iteration_model():
    rng = np.random.default_rng(3)
    k = 5
    mi = MixInputs(
        compute_s=0.2,
        optimizer_s=0.01,
        share=np.cumsum(np.full(k, 1 / k)),
        dense_comm_s=rng.uniform(0.01, 0.05, k),
        comp_comm_s=rng.uniform(0.001, 0.02, k),
        comp_local_s=np.full(k, 0.03 / k),
        comp_decode_s=np.full(k, 0.02 / k),
    )
    ref = bucketed_step_time_s(
        np.array([[0.2]]),
        np.array([[0.0]]),
        np.array([[0.03]]),
        mi.comp_comm_s[None, :],
        mi.share,
        decode_s=np.array([[0.02]]),
        optimizer_s=np.array([0.01]),
    )
    assert mix_step_time_s(mi, [True] * k) == pytest.approx(float(ref.step_s[0]), rel=1e-12)
    ref_dense = bucketed_step_time_s(
        np.array([[0.2]]),
        np.array([[0.0]]),
        np.array([[0.0]]),
        mi.dense_comm_s[None, :],
        mi.share,
        optimizer_s=np.array([0.01]),
    )
    assert mix_step_time_s(mi, [False] * k) == pytest.approx(float(ref_dense.step_s[0]), rel=1e-12)


def test_a_hand_worked_mix_beats_both_single_methods():
    """Two buckets, no forward share: compute 1 s (bucket 0 ready at 0.5 s, bucket 1 at 1 s).
    Dense: 0.1 s and 2 s; compressed: 0.5 s and 0.3 s, local work 0.05 s each, no decode.
    Dense bucket 0 + compressed bucket 1: local 0.05 s in total, bucket 1 ready at 1.05 s,
    end = 1.35 s. All compressed: ready 0.55 → end 1.05, bucket 1 ready 1.1 → 1.4 s. All
    dense: 0.6, then 3.0 s. So the mix (DC) wins with 1.35 s."""
    mi = MixInputs(
        compute_s=1.0,
        optimizer_s=0.0,
        share=np.array([0.5, 1.0]),
        dense_comm_s=np.array([0.1, 2.0]),
        comp_comm_s=np.array([0.5, 0.3]),
        comp_local_s=np.array([0.05, 0.05]),
        comp_decode_s=np.zeros(2),
        forward_fraction=0.0,
    )
    assert mix_step_time_s(mi, [True, True]) == pytest.approx(1.4)
    assert mix_step_time_s(mi, [False, False]) == pytest.approx(3.0)
    mask, t = choose_mix(mi)
    assert mask == (False, True) and t == pytest.approx(1.35)


@pytest.mark.slow
def test_advise_ranks_the_demo_traces_and_refuses_other_models():
    names = ("dense", "variance", "strom", "qsgd")
    traces = [read_trace(DEMO_TRACES / n) for n in names]
    a = api.advise(traces, "1GbE", [8, 64], target_accuracy=0.95)
    assert set(a.ranked["world_size"]) == {8, 64}
    for _, g in a.ranked.groupby("world_size"):
        assert g["rank"].tolist() == list(range(1, len(g) + 1))
        ttt = g["time_to_target_s"].to_numpy()
        assert np.all(np.diff(ttt[np.isfinite(ttt)]) >= 0)
    assert len(a.recommendations) == 2 and all("run " in line for line in a.recommendations)
    assert (a.mixes["step_s"] <= a.mixes["best_single_s"] * (1 + 1e-12)).all()
    with pytest.raises(ConfigError, match="one model"):
        api.advise([traces[0], POWERSGD], "1GbE", [8])


def test_advise_ranks_the_sparse_allreduce_of_a_trace_with_unions():
    a = api.advise([DATA / "topk_w8_trace"], "1GbE", [8, 64])
    colls = set(a.ranked["collective"])
    assert {"sparse_allreduce/recursive_doubling", "allgatherv/ring", "allreduce/ring"} <= colls
    # the mix is over buckets of the allgatherv; the sparse rows stand beside it
    assert set(a.mixes["world_size"]) == {8, 64}


def test_advise_hands_its_options_to_the_ranking_and_the_recommendation():
    """The committed dense and variance traces at P = 8 on 1GbE: with a 90 % target the
    ranking reads both traces' evaluations (the dense rows through the dense trace) and bf16
    dense reaches it first; without one the fastest step wins. Smaller buckets cut the
    gradient into more of them, and the overlap mode given is the one priced; at 2 KiB
    buckets and P = 2 a per-bucket mix beats every single method and is recommended."""
    traces = [DEMO_TRACES / "dense", DEMO_TRACES / "variance"]
    a = api.advise(traces, "1GbE", [8], target_accuracy=0.9)
    assert np.isfinite(a.ranked["time_to_target_s"]).all()
    dense = a.ranked[a.ranked["method"] == "dense"]
    assert dense["final_test_acc"].iloc[0] == pytest.approx(0.978)
    assert a.recommendations[0].startswith(
        "1GbE, P=8: run dense bf16 — reaches the target first (0.143 s); fastest predicted step"
    )
    fastest = api.advise(traces, "1GbE", [8])
    assert fastest.recommendations[0].startswith(
        "1GbE, P=8: run variance α=2 (allgatherv/ring) — fastest predicted step, 1.63 ms"
    )
    assert fastest.mixes["buckets"].tolist() == [1]
    small = api.advise(traces, "1GbE", [8], bucket_bytes=16384)
    apart = api.advise(traces, "1GbE", [8], bucket_bytes=16384, overlap="none")
    assert small.mixes["buckets"].tolist() == [3]
    step = {k: r.ranked.set_index("method")["step_s"] for k, r in (("b", small), ("n", apart))}
    assert step["b"]["dense"] != pytest.approx(step["n"]["dense"], rel=1e-3)
    mixed = api.advise(traces, "1GbE", [2], bucket_bytes=2048)
    assert mixed.recommendations == [
        "1GbE, P=2: run variance α=2 on 3 of 4 buckets, the rest dense — per-bucket mix, "
        "0.654 ms, 1.01x faster than variance α=2 (allgatherv/ring)"
    ]


@pytest.mark.parametrize("target", [0, -0.1, 1.5])
def test_advise_refuses_a_target_accuracy_outside_0_to_1(target):
    with pytest.raises(ConfigError) as err:
        api.advise([DEMO_TRACES / "dense"], "1GbE", [8], target_accuracy=target)
    assert str(err.value) == f"target accuracy must be in (0, 1], got {target}"


def test_advise_takes_a_target_accuracy_of_one():
    a = api.advise([DEMO_TRACES / "dense"], "1GbE", [8], target_accuracy=1)
    assert len(a.recommendations) == 1


def test_a_calibration_op_is_priced_by_the_collective_that_runs_it():
    key = api._calibration_model_key
    assert key("p2p", "gloo") is None and key("p2p_intra", "nccl") is None
    assert key("allreduce", "gloo") == "allreduce/ring"
    assert key("allgather", "nccl") == "allgatherv/ring"
    for op in ("allgatherv", "allgatherv_skewed"):
        assert key(op, "gloo") == "allgatherv/padded"
        assert key(op, "nccl") == "allgatherv/ring"
