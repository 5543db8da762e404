"""`vgcsim predict` and vgcsim.models.predict end to end, on a hand-made and a synthetic ResNet-50 trace."""

from __future__ import annotations

import dataclasses
import json
from fractions import Fraction
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from modelhelpers import star_cluster

from vgcsim.cli import main
from vgcsim.core.cluster import get_cluster
from vgcsim.core.collectives import ALLGATHERV_ALGORITHMS, ALLREDUCE_ALGORITHMS
from vgcsim.core.errors import ConfigError, UnknownNameError
from vgcsim.core.results import RESULT_COLUMNS, read_results
from vgcsim.models.predict import (
    PredictOptions,
    _dense_breakdown,
    parse_algorithms,
    parse_world_sizes,
    predict_trace,
    rows_for,
)
from vgcsim.traces.inputs import StepInputs, step_inputs
from vgcsim.traces.io import read_trace

ALPHA = 10e-6  # 10GbE preset latency
BETA = 1 / (1.25e9 * 1448 / 1538)  # 10 Gb/s line rate x TCP/MTU-1500 efficiency
TRACE_10GBE = dataclasses.replace(get_cluster("10GbE"), compute="trace")


def test_tiny_trace_by_hand(tiny_trace):
    opts = PredictOptions(
        world_sizes=(1, 2), allreduce=("ring",), allgatherv=("ring", "padded"), per_step=True
    )
    df = predict_trace(tiny_trace, TRACE_10GBE, opts)
    assert list(df.columns) == list(RESULT_COLUMNS)
    assert set(df.compute_mode) == {"trace"} and set(df.device) == {"synthetic"}

    def row(p, coll, step, enc=None):
        sel = df[(df.world_size == p) & (df.collective == coll) & (df.step == step)]
        if enc is not None:
            sel = sel[sel.encoding == enc]
        return sel.iloc[0]

    opt = float(df.optimizer_s.iloc[0])  # modelled (the tiny trace has no optimizer_s)
    assert opt > 0 and (df.optimizer_s == opt).all()
    dense = row(2, "allreduce/ring", 0, "fp32")
    assert dense.comm_s == pytest.approx(2 * ALPHA + 5000 * BETA)
    assert dense.step_s == pytest.approx(0.1 + 2 * ALPHA + 5000 * BETA + opt)
    assert dense.payload_bytes_max == 5000 and dense.compressor == "dense" and dense.decode_s == 0
    bf16 = row(2, "allreduce/ring", 0, "bf16")  # half the bytes, a cast each way
    assert bf16.comm_s == pytest.approx(2 * ALPHA + 2500 * BETA)
    assert bf16.codec_s > 0 and bf16.decode_s == bf16.codec_s
    assert bf16.step_s == pytest.approx(0.1 + bf16.codec_s + bf16.comm_s + bf16.decode_s + opt)
    comp = row(2, "allgatherv/ring", 0)  # ranks send 120 and 240 bytes
    # the size exchange (one int64 per rank, ring) is its own collective before the data
    assert comp.comm_s == pytest.approx((ALPHA + 8 * BETA) + (ALPHA + 240 * BETA))
    assert comp.compute_s == pytest.approx(0.1)
    assert comp.codec_s == pytest.approx(0.03) and comp.variance_s == pytest.approx(0.01)
    assert comp.decode_s > 0  # modelled: the trace has no decode_s
    assert comp.step_s == pytest.approx(0.14 + comp.comm_s + comp.decode_s + opt)
    assert comp.payload_bytes_max == 240 and comp.payload_bytes_mean == 180
    assert comp.speedup_vs_dense == pytest.approx(dense.step_s / comp.step_s)
    assert comp.scaling_efficiency == pytest.approx((0.1 + opt) / comp.step_s)
    assert comp.throughput_samples_per_s == pytest.approx(2 * 8 / comp.step_s)
    padded = row(2, "allgatherv/padded", 0)
    assert padded.comm_s == pytest.approx(comp.comm_s)  # its exchange is built in, not doubled
    mean = row(2, "allgatherv/ring", -1)
    per_step = df[(df.world_size == 2) & (df.collective == "allgatherv/ring") & (df.step >= 0)]
    assert mean.step_s == pytest.approx(per_step.step_s.mean())
    # one rank: no communication at all
    assert (df[df.world_size == 1].comm_s == 0).all()
    # dense baseline present at every P
    assert set(df[df.method == "dense"].world_size) == {1, 2}


def test_buckets_never_slower_than_no_overlap(tiny_trace):
    # trace seconds (0.1 s compute per rank): enough backward to hide every bucket's start-up
    cluster = dataclasses.replace(get_cluster("1GbE"), compute="trace")
    base = PredictOptions(world_sizes=(4, 16), allgatherv=("ring",))
    plain = predict_trace(tiny_trace, cluster, base)

    over = predict_trace(
        tiny_trace, cluster, dataclasses.replace(base, overlap="bucketed", bucket_bytes=1000)
    )
    full = predict_trace(tiny_trace, cluster, dataclasses.replace(base, overlap="full"))
    per_layer = predict_trace(tiny_trace, cluster, dataclasses.replace(base, overlap="per_layer"))
    one = predict_trace(tiny_trace, cluster, dataclasses.replace(base, overlap="bucketed"))
    assert np.all(over.step_s.to_numpy() <= plain.step_s.to_numpy() + 1e-12)
    assert np.all(full.step_s.to_numpy() <= over.step_s.to_numpy() + 1e-12)
    # 1000-byte buckets split this trace's two layers apart, as per_layer does
    assert np.allclose(per_layer.step_s, over.step_s)
    # one 25 MiB bucket holds everything: ready when backward ends, i.e. no overlap at all
    assert np.allclose(one.step_s, plain.step_s)
    assert (over.comm_s.to_numpy() > 0).all()


def test_cli_end_to_end_on_synthetic_resnet50(tmp_path, capsys):
    from vgcsim.traces.synth import SynthConfig, synth_trace

    run = synth_trace(
        SynthConfig(layers="resnet50", workers=4, steps=4, target_ratio=913.4), tmp_path / "r50"
    )
    out = tmp_path / "res"
    rc = main(
        [
            "predict",
            str(run),
            "--cluster",
            "10GbE",
            "--world-sizes",
            "2:1024:x2",
            "--allgatherv",
            "all",
            "--extrapolation",
            "resample",
            "--seed",
            "7",
            "--per-step",
            "-o",
            str(out),
        ]
    )
    assert rc == 0
    df, header = read_results(out)
    assert header["source"] == "predicted"
    assert header["extrapolation"] == {"rule": "resample", "seed": 7}
    assert header["cluster"]["name"] == "10GbE" and header["traces"][0]["synthetic"] is True
    assert sorted(df.world_size.unique()) == [2**k for k in range(1, 11)]
    # P × (3 dense + every allgatherv) × (mean + 4 steps)
    assert len(df) == 10 * (3 + len(ALLGATHERV_ALGORITHMS)) * 5
    dense = df[(df.method == "dense") & (df.step == -1) & (df.encoding == "fp32")]
    trace = read_trace(run)
    assert (dense.payload_bytes_max == trace.header["dense_bytes_per_step"]).all()
    # ~913× compression on 10 GbE: compressed allgatherv is faster than dense ring at small P
    small = df[(df.world_size == 8) & (df.step == -1) & (df.method == "compressed")]
    assert (small.speedup_vs_dense > 1).all()
    assert json.loads((out / "results.json").read_text())["options"]["allgatherv"] == list(
        ALLGATHERV_ALGORITHMS
    )


def test_cli_user_errors_exit_2(tmp_path, tiny_trace_dir, capsys):
    bad = tmp_path / "bad.toml"
    bad.write_text('link = "10GbE"\nlink_speed = 3\n')
    assert (
        main(["predict", str(tiny_trace_dir), "--cluster", str(bad), "-o", str(tmp_path / "o")])
        == 2
    )
    assert "link_speed" in capsys.readouterr().err
    assert (
        main(
            [
                "predict",
                str(tiny_trace_dir),
                "--cluster",
                "10GbE",
                "--allgatherv",
                "mesh",
                "-o",
                str(tmp_path / "o"),
            ]
        )
        == 2
    )
    assert (
        main(["predict", str(tmp_path / "nope"), "--cluster", "10GbE", "-o", str(tmp_path / "o")])
        == 2
    )
    assert (
        main(
            [
                "predict",
                str(tiny_trace_dir),
                "--cluster",
                "10GbE",
                "--encoding",
                "zip",
                "-o",
                str(tmp_path / "o"),
            ]
        )
        == 2
    )


def test_world_size_parsing():
    assert parse_world_sizes("2:1024:x2") == tuple(2**k for k in range(1, 11))
    assert parse_world_sizes("10,20,...,50") == (10, 20, 30, 40, 50)
    assert parse_world_sizes("1,3,8") == (1, 3, 8)
    for bad in ["", "0,2", "a,b", "2,4,...", "2,4,...,1001", "2,4,...,1024"]:
        with pytest.raises(ConfigError):
            parse_world_sizes(bad)
    assert parse_algorithms("all", "allreduce") == ALLREDUCE_ALGORITHMS
    with pytest.raises(UnknownNameError):
        parse_algorithms("ring,mesh", "allgatherv")


SAMPLE = Path(__file__).resolve().parents[1] / "data" / "sample_trace"


@pytest.mark.skipif(not SAMPLE.is_dir(), reason="committed sample trace not present")
def test_committed_sample_trace_with_modelled_compute(tmp_path):
    trace = read_trace(SAMPLE)
    cfg = tmp_path / "v100.toml"
    cfg.write_text('base = "IB-EDR"\ncompute = "model"\ndevice = "V100"\n')
    from vgcsim.core.cluster import load_cluster

    cluster = load_cluster(cfg)
    df = predict_trace(
        trace, cluster, PredictOptions(world_sizes=(4, 256), allgatherv=("ring", "bruck"))
    )
    compute = (
        trace.header["flops_per_sample"] * trace.header["batch_size_per_worker"] / (15.7e12 * 0.4)
    )
    assert np.allclose(df.compute_s, compute)
    dense = df[(df.method == "dense") & (df.encoding == "fp32")]
    assert (dense.payload_bytes_max == trace.header["dense_bytes_per_step"]).all()
    comp = df[df.method == "compressed"]
    assert (comp.payload_bytes_max >= comp.payload_bytes_mean).all()
    assert (comp.payload_bytes_mean < trace.header["dense_bytes_per_step"]).all()


# Hand-worked checks of the predict model: expected numbers from the formulas in its docstrings
# on small, exact inputs, documented contracts and one-line error messages.


def _message(exc_info) -> str:
    return str(exc_info.value)


@pytest.mark.parametrize(
    ("over", "message"),
    [
        ({"world_sizes": ()}, "world sizes must be integers >= 1"),
        ({"bucket_bytes": 0}, "bucket_bytes must be a number of bytes in [1, 1e15], got 0"),
        (
            {"dense_encodings": ("bf16",)},
            "dense_encodings must include fp32 (the speedup baseline)",
        ),
    ],
)
def test_predict_options_messages_are_exact(over, message):
    with pytest.raises(ConfigError) as e:
        PredictOptions(**over)
    assert _message(e) == message


def _trace_cluster():
    return dataclasses.replace(star_cluster(latency_s=1e-3), compute="trace")


def test_predicted_rows_name_the_topology_and_the_closed_form_path(tiny_trace):
    """Rows carry ``path="closed_form"`` and the cluster's topology kind (a star here)."""
    df = predict_trace(tiny_trace, _trace_cluster(), PredictOptions(world_sizes=(2,)))
    assert set(df["path"]) == {"closed_form"}
    assert set(df["topology"]) == {"star"}


def test_predict_prices_the_encoding_asked_for(tiny_trace):
    """The tiny trace's second encoding, ``hand2x``, has twice the bits of its primary one: at
    step 0 the workers send 960 and 1920 bits, 240 and 480 bytes in hand2x."""
    opts = PredictOptions(world_sizes=(2,), encoding="hand2x", per_step=True)
    df = predict_trace(tiny_trace, _trace_cluster(), opts)
    row = df[(df.method == "compressed") & (df.step == 0)].iloc[0]
    assert row.encoding == "hand2x"
    assert row.payload_bytes_max == 480 and row.payload_bytes_mean == 360


@pytest.mark.parametrize(("rule", "seed"), [("resample", 3), ("resample", 11)])
def test_predict_extrapolates_with_the_rule_and_seed_asked_for(tiny_trace, rule, seed):
    """Per-step payload columns are those of the extrapolation (``step_inputs``) with the
    options' rule and seed, not the default modulo rule or seed 0."""
    cluster = _trace_cluster()
    p = 8
    ref = step_inputs(tiny_trace, cluster, p, rule=rule, seed=seed).rank_bytes
    default = step_inputs(tiny_trace, cluster, p).rank_bytes
    seed0 = step_inputs(tiny_trace, cluster, p, rule=rule, seed=0).rank_bytes
    # the check can only fail a wrong rule or seed if the extrapolations differ
    assert not np.array_equal(ref.mean(axis=1), default.mean(axis=1))
    assert not np.array_equal(ref.mean(axis=1), seed0.mean(axis=1))
    opts = PredictOptions(world_sizes=(p,), rule=rule, seed=seed, per_step=True)
    df = predict_trace(tiny_trace, cluster, opts)
    comp = df[(df.method == "compressed") & (df.step >= 0)].sort_values("step")
    assert comp.payload_bytes_mean.tolist() == pytest.approx(ref.mean(axis=1).tolist())
    assert comp.payload_bytes_max.tolist() == pytest.approx(ref.max(axis=1).tolist())


def test_predict_without_a_batch_size_leaves_throughput_empty(tiny_trace):
    """No ``batch_size_per_worker`` in the header: predictions still come, throughput is NaN."""
    tiny_trace.header.pop("batch_size_per_worker")
    df = predict_trace(tiny_trace, _trace_cluster(), PredictOptions(world_sizes=(2,)))
    assert len(df) > 0 and df["throughput_samples_per_s"].isna().all()


def _bd(values):
    a = np.asarray(values)
    return (a, a, a, a, a)


def test_rows_for_columns_are_float_and_text_stays_object():
    """Numeric columns come out float64 whatever the input's type (exact Fractions here: the
    mean of 1/2 and 1 is 3/4); text constants are object arrays (any length fits) and numeric
    constants stay numeric."""
    from vgcsim.models.iteration import StepBreakdown

    vals = np.array([Fraction(1, 2), Fraction(1)], dtype=object)
    bd = StepBreakdown(*_bd(vals))
    out = rows_for(
        bd, np.array([0, 1]), vals, vals, per_step=False, const={"method": "dense", "world_size": 4}
    )
    for k in ("compute_s", "step_s", "payload_bytes_max", "payload_bytes_mean"):
        assert out[k].dtype == np.float64 and out[k].tolist() == [0.75]
    assert out["method"].dtype == object
    out["method"][0] = "compressed"
    assert out["method"][0] == "compressed"
    assert np.issubdtype(out["world_size"].dtype, np.integer)
    assert pd.api.types.is_integer_dtype(
        pd.Series(np.concatenate([out["world_size"], out["world_size"]]))
    )


def test_zero_byte_dense_gradient_buckets_carry_no_bytes():
    """A model of 0 dense bytes: each bucket's ring allreduce moves nothing and costs its
    latency alone, 2(P−1)·α = 2 ms at P = 2 and α = 1 ms; two buckets report Σ t_k = 4 ms."""
    cluster = star_cluster(latency_s=1e-3, bandwidth_Bps=1e3)
    si = StepInputs(
        steps=np.array([0]),
        rank_bytes=np.zeros((1, 2)),
        dense_bytes=0,
        compute_s=np.full((1, 2), 0.5),
        variance_s=np.zeros((1, 2)),
        codec_s=np.zeros((1, 2)),
    )
    numel = np.array([1000.0, 250.0])
    buckets = ([[1], [0]], np.array([0.2, 1.0]), numel)
    opts = PredictOptions(world_sizes=(2,), overlap="bucketed")
    bd = _dense_breakdown(si, "allreduce/ring", cluster, opts, buckets)
    assert float(bd.comm_s[0]) == pytest.approx(4e-3, rel=1e-12)


# ------------------------------------------------------------------------------------------
