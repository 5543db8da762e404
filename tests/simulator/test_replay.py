"""Trace replay: result table, paths, memoization, overlap, jitter determinism, timeline, CLI."""

from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pandas as pd
import pytest
from simhelpers import cluster as _cluster
from simhelpers import leaf_spine
from vgcsim.simulator.replay import SimulateConfig, simulate_trace
from vgcsim.simulator.timeline import chrome_trace
from vgcsim.traces.io import read_trace
from vgcsim.traces.synth import SynthConfig, synth_trace

from vgcsim.cli import main
from vgcsim.core.cluster import load_cluster
from vgcsim.core.errors import ConfigError, UnknownNameError
from vgcsim.core.results import RESULT_COLUMNS, read_results

LABELS = {"dense", "dense/bf16", "dense/fp16", "compressed"}


def cluster(*args, **kw):
    """The helpers' star in trace mode: the synthetic trace's seconds, not a device model."""
    return dataclasses.replace(_cluster(*args, **kw), compute="trace")


@pytest.fixture(scope="module")
def trace_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("trace") / "vgg"
    cfg = SynthConfig(
        layers="vgg_like",
        workers=4,
        steps=6,
        density=0.01,
        compute_s_per_worker=0.02,
        variance_s_per_worker=0.002,
        codec_s_per_worker=0.003,
    )
    return synth_trace(cfg, out)


@pytest.fixture(scope="module")
def trace(trace_dir):
    return read_trace(trace_dir)


def test_rows_have_the_shared_columns_and_one_mean_per_method(trace):
    df, _, info = simulate_trace(trace, cluster(), [4, 6], SimulateConfig(per_step=True))
    assert list(df.columns) == list(RESULT_COLUMNS)
    assert set(df["source"]) == {"simulated"}
    # the relative columns are not filled yet (finalize_results does): float NaN in every row,
    # on the mean rows and the per-step rows alike
    for col in ("speedup_vs_dense", "scaling_efficiency", "throughput_samples_per_s"):
        assert df[col].dtype == np.float64, col
        assert df[col].isna().all(), col
    means = df[df["step"] == -1]
    # per P: dense fp32, bf16, fp16 and the compressed method
    assert len(means) == 8 and set(means["method"]) == {"dense", "compressed"}
    assert len(df) == 8 + 2 * 4 * 6
    assert set(means["encoding"]) == {"fp32", "bf16", "fp16", trace.primary_encoding}
    assert set(means["compute_mode"]) == {"trace"} and set(means["device"]) == {"synthetic"}
    dense = means[(means["method"] == "dense") & (means["encoding"] == "fp32")].iloc[0]
    assert dense["collective"] == "allreduce/ring" and dense["compressor"] == "dense"
    bf16 = means[(means["encoding"] == "bf16")].iloc[0]
    assert bf16["payload_bytes_max"] == dense["payload_bytes_max"] / 2
    comp = means[means["method"] == "compressed"].iloc[0]
    assert comp["payload_bytes_max"] >= comp["payload_bytes_mean"] > 0
    for r in (comp, dense, bf16):
        assert r["step_s"] == pytest.approx(
            r["compute_s"]
            + r["variance_s"]
            + r["codec_s"]
            + r["comm_s"]
            + r["decode_s"]
            + r["optimizer_s"]
        )
    assert info["4"]["dense"]["memo"] == 5  # identical dense steps are simulated once


def test_message_level_and_fast_path_agree_on_a_star(trace):
    msg, _, _ = simulate_trace(trace, cluster(), [5], SimulateConfig(path="message", per_step=True))
    fast, _, info = simulate_trace(
        trace, cluster(), [5], SimulateConfig(path="collective", per_step=True)
    )
    assert set(msg["path"]) == {"message"} and set(fast["path"]) == {"collective"}
    np.testing.assert_allclose(fast["step_s"], msg["step_s"], rtol=1e-12)
    assert info["5"]["compressed"]["collective"] == 6


def test_auto_path_leaves_the_fast_path_under_contention(trace):
    # a direct allgatherv shares every host link, so the collective-level path is not exact;
    # its single round is always isolated, so auto runs it at round level (exact), not at
    # message level (the fall-back to the message level: test_fast_path_contention.py)
    cfg = SimulateConfig(allgatherv=("direct",))
    df, _, info = simulate_trace(trace, cluster(), [4], cfg)
    assert set(df["path"]) == {"round"}
    assert info["4"]["compressed"]["round"] >= 1 and info["4"]["compressed"]["message"] == 0
    msg, _, _ = simulate_trace(trace, cluster(), [4], dataclasses.replace(cfg, path="message"))
    np.testing.assert_allclose(df["step_s"], msg["step_s"], rtol=1e-12)
    with pytest.raises(ConfigError, match="not exact"):
        simulate_trace(
            trace,
            cluster(),
            [4],
            SimulateConfig(allgatherv=("direct",), path="collective"),
        )


def test_same_seed_same_numbers_with_jitter(trace):
    cfg = SimulateConfig(jitter=0.3, seed=7, per_step=True)
    a, _, _ = simulate_trace(trace, cluster(), [6], cfg)
    b, _, _ = simulate_trace(trace, cluster(), [6], cfg)
    pd.testing.assert_frame_equal(a, b)
    c, _, _ = simulate_trace(
        trace, cluster(), [6], SimulateConfig(jitter=0.3, seed=8, per_step=True)
    )
    assert not np.allclose(a["step_s"], c["step_s"])
    base, _, _ = simulate_trace(trace, cluster(), [6], SimulateConfig(per_step=True))
    assert not np.allclose(a["compute_s"], base["compute_s"])


def test_bucketed_overlap_hides_dense_communication(trace):
    none, _, _ = simulate_trace(trace, cluster(), [4], SimulateConfig())
    bucketed, _, _ = simulate_trace(
        trace, cluster(), [4], SimulateConfig(overlap="bucketed", bucket_bytes=2**20)
    )
    per_layer, _, _ = simulate_trace(trace, cluster(), [4], SimulateConfig(overlap="per_layer"))

    def dense_step(df):
        return df[(df["method"] == "dense") & (df["step"] == -1)]["step_s"].iloc[0]

    assert dense_step(bucketed) < dense_step(none)
    assert dense_step(per_layer) < dense_step(none)
    comp = bucketed[(bucketed["method"] == "compressed")]
    assert (comp["step_s"] > 0).all()


def test_compute_model_mode_uses_the_device(trace):
    model = dataclasses.replace(cluster(), compute="model")
    df, _, _ = simulate_trace(trace, model, [4], SimulateConfig())
    flops = trace.header["flops_per_sample"] * trace.header["batch_size_per_worker"]
    expected = flops / model.device.effective_flops
    assert df["compute_s"].iloc[0] == pytest.approx(expected)


def test_hierarchical_preset_runs(trace):
    cfg = SimulateConfig(allreduce=("hierarchical",), max_steps=2)
    df, _, _ = simulate_trace(trace, load_cluster("dgx1-IB-EDR"), [16], cfg)
    assert (df["step_s"] > 0).all()


def test_timeline_has_rank_and_link_tracks(trace):
    _, timelines, _ = simulate_trace(trace, cluster(), [3], SimulateConfig(), timeline_steps=[0, 1])
    assert {(t.method, t.step) for t in timelines} == {(m, s) for m in LABELS for s in (0, 1)}
    doc = json.loads(json.dumps(chrome_trace(timelines)))
    events = doc["traceEvents"]
    names = {e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    assert {"rank 0", "rank 2", "h0->sw", "sw->h2"} <= names
    spans = [e for e in events if e["ph"] == "X"]
    assert all(e["dur"] >= 0 and e["ts"] >= 0 for e in spans)
    flows = [e for e in spans if e["cat"] == "flow"]
    assert flows and all(e["args"]["bytes"] > 0 for e in flows)


def test_timeline_only_up_to_max_ranks(trace):
    _, timelines, _ = simulate_trace(
        trace, cluster(), [2, 3, 4], SimulateConfig(), timeline_steps=[0], timeline_max_ranks=3
    )
    assert sorted({t.world_size for t in timelines}) == [2, 3]


@pytest.mark.parametrize(
    ("label", "link", "options"),
    [
        ("dense", {"gamma_s_per_byte": 1e-9}, {}),  # γ adds to every reducing round
        ("compressed", {}, {"mode": "fifo", "allgatherv": ("direct",)}),
        ("compressed", {}, {"semantics": "eager", "allgatherv": ("ring",)}),
    ],
    ids=["gamma", "fifo", "eager"],
)
def test_a_timeline_is_the_step_its_row_prices(trace, label, link, options):
    """A step's timeline is simulated again under the run's own γ, sharing model and message
    matching: its end (the last collective's last rank) lies where its row puts the
    communication's end: between step − optimizer − the largest decode and step − optimizer
    (each rank decodes its own share after its collective; this step is communication-bound
    on a 4:1 leaf-spine at 1 Gbit/s). Each setting moves that end, so a timeline simulated
    under the defaults would fall outside."""

    def run(link_kw, cfg_kw):
        spec = cluster(leaf_spine(2), bandwidth_Bps=1.25e8, **link_kw)
        cfg = SimulateConfig(path="message", per_step=True, dense_encodings=("fp32",), **cfg_kw)
        df, timelines, _ = simulate_trace(trace, spec, [4], cfg, timeline_steps=[1])
        (tl,) = [t for t in timelines if t.method == label]
        (row,) = df[(df["step"] == 1) & (df["method"] == label)].itertuples()
        return tl, row

    tl, row = run(link, options)
    default, _ = run({}, {k: v for k, v in options.items() if k == "allgatherv"})
    assert tl.step_s != pytest.approx(default.step_s, rel=1e-3)
    end = row.step_s - row.optimizer_s
    assert end - row.decode_s - 1e-12 * end <= tl.step_s <= end * (1 + 1e-12)


def test_timeline_of_a_missing_step_is_an_error(trace):
    with pytest.raises(ConfigError, match="timeline steps"):
        simulate_trace(trace, cluster(), [2], SimulateConfig(), timeline_steps=[999])


def test_bad_options_are_clear_errors():
    with pytest.raises(UnknownNameError, match="'nope'; valid: bounded, bruck"):
        SimulateConfig(allgatherv=("nope",))
    with pytest.raises(UnknownNameError, match="bucketed, full, none, per_layer"):
        SimulateConfig(overlap="sometimes")
    with pytest.raises(ConfigError, match="simulate replays none, per_layer or bucketed"):
        SimulateConfig(overlap="full")
    with pytest.raises(ConfigError, match="one algorithm at a time"):
        SimulateConfig(allgatherv=("ring", "bruck"))
    with pytest.raises(ConfigError, match="jitter"):
        SimulateConfig(jitter=-1.0)


def test_cli_simulate_writes_results_and_timeline(trace_dir, tmp_path, capsys):
    out = tmp_path / "res"
    rc = main(
        [
            "simulate",
            str(trace_dir),
            "--cluster",
            "10GbE",
            "--world-sizes",
            "4,8",
            "--per-step",
            "--timeline",
            "0",
            "--set",
            "jitter=0.1",
            "-o",
            str(out),
        ]
    )
    assert rc == 0
    df, header = read_results(out)
    assert header["source"] == "simulated" and header["options"]["jitter"] == 0.1
    assert set(df["world_size"]) == {4, 8}
    assert df["speedup_vs_dense"].notna().all()
    assert (out / "timeline.json").is_file()
    links = pd.read_csv(out / "links.csv")
    assert set(links["method"]) == LABELS
    assert (links["bytes"] > 0).all() and (links["utilization"] <= 1 + 1e-9).all()


def test_cli_simulate_user_errors_exit_2(trace_dir, tmp_path, capsys):
    args = ["simulate", str(trace_dir), "--world-sizes", "4", "-o", str(tmp_path / "x")]
    assert main([*args, "--cluster", "no-such-cluster"]) == 2
    assert "unknown cluster" in capsys.readouterr().err
    assert main([*args, "--cluster", "10GbE", "--set", "overlap=maybe"]) == 2
    assert (
        main(
            [
                *args,
                "--cluster",
                "10GbE",
                "--set",
                "allgatherv=direct",
                "--path",
                "collective",
            ]
        )
        == 2
    )


def test_encoding_rule_and_seed_reach_the_replays_inputs(trace):
    """SimulateConfig's encoding, extrapolation rule and seed reach the inputs of every world
    size: the compressed rows price the named encoding (coo64: 64 bits per sent element, more
    than packed32's 32 + its index words), and at P = 8 from 4 recorded workers the resample
    rule draws workers with the seed (seeds 1 and 2 give different payloads; the same seed the
    same), while the modulo rule ignores the seed."""

    def compressed(**kw):
        df, _, _ = simulate_trace(trace, cluster(), [8], SimulateConfig(**kw))
        return df[(df["method"] == "compressed") & (df["step"] == -1)].iloc[0]

    packed, coo = compressed(), compressed(encoding="coo64")
    assert (packed["encoding"], coo["encoding"]) == (trace.primary_encoding, "coo64")
    assert coo["payload_bytes_mean"] > packed["payload_bytes_mean"]
    one = compressed(rule="resample", seed=1)
    assert compressed(rule="resample", seed=1)["payload_bytes_mean"] == one["payload_bytes_mean"]
    two = compressed(rule="resample", seed=2)
    assert one["payload_bytes_mean"] != two["payload_bytes_mean"]
    assert compressed(seed=1)["payload_bytes_mean"] == compressed(seed=2)["payload_bytes_mean"]


@pytest.mark.parametrize(("g", "nodes"), [(4, 2), (2, 3)])
def test_dense_hierarchical_allreduce_is_priced_with_the_clusters_gpus_per_node(trace, g, nodes):
    """The replay's dense hierarchical allreduce groups ranks by the cluster's gpus_per_node:
    comm_s is the closed form ⌈lg g⌉(2α_i + 2nβ_i) + 2(N−1)(α_e + β·n/N) over N = P/g nodes
    (γ = 0; one bucket, so n is the whole fp32 gradient). Grouping by 1 GPU per node instead
    prices a flat ring over all P ranks."""
    from simhelpers import BW, LAT

    from vgcsim.core.cluster import LinkSpec

    bw_i, lat_i = 20 * BW, 1e-6
    spec = _cluster(
        {"kind": "hierarchical"}, intra=LinkSpec("nvlink", bw_i, lat_i), gpus_per_node=g
    )
    spec = dataclasses.replace(spec, compute="trace")
    cfg = SimulateConfig(allreduce=("hierarchical",), overlap="none", max_steps=2)
    df, _, _ = simulate_trace(trace, spec, [g * nodes], cfg)
    row = df[(df["method"] == "dense") & (df["encoding"] == "fp32") & (df["step"] == -1)]
    assert row["collective"].tolist() == ["allreduce/hierarchical"]
    n = 32 * sum(int(layer["numel"]) for layer in trace.layers) / 8
    a_e = lat_i + LAT  # leader -> node switch -> top switch -> node switch -> leader
    lg = math.ceil(math.log2(g))
    ring = 2 * (nodes - 1) * (a_e + n / nodes / BW)
    closed = lg * (2 * lat_i + 2 * n / bw_i) + ring
    assert row["comm_s"].iloc[0] == pytest.approx(closed, rel=1e-3)
