"""Trace replay: result table, paths, memoization, overlap, jitter determinism, timeline, CLI."""

from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pandas as pd
import pytest
from simhelpers import cluster as _cluster
from simhelpers import (
    leaf_spine,
    run_phases,  # noqa: E402
)

import vgcsim.simulator.replay as replay_module  # noqa: E402
from vgcsim.cli import main
from vgcsim.core.cluster import load_cluster
from vgcsim.core.errors import ConfigError, UnknownNameError
from vgcsim.core.results import RESULT_COLUMNS, read_results
from vgcsim.simulator.collectives import (
    get_schedule,  # noqa: E402
    unit_sizes,  # noqa: E402
)
from vgcsim.simulator.paths.collective import contention_free, run_collective
from vgcsim.simulator.paths.message import run_message
from vgcsim.simulator.paths.plan import Phase, RunCache
from vgcsim.simulator.replay import (  # noqa: E402
    SimulateConfig,
    _Block,  # noqa: E402
    _block,
    _Buckets,
    _label,
    _Runner,
    _step_plan,
    _world_size,
    simulate_trace,
)
from vgcsim.simulator.timeline import chrome_trace
from vgcsim.simulator.topology import build_topology  # noqa: E402
from vgcsim.traces.inputs import resolve_collectives
from vgcsim.traces.io import read_trace
from vgcsim.traces.synth import SynthConfig, synth_trace

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


# The replay's one-step plan, its timeline and the runner's memo, against independent references.
#
# * :func:`_step_plan` (the one-step plan the timelines redraw) against :func:`_block` (the
#   block-at-once plan the result rows come from): the module documents that row s of a block
#   holds what the one-step plan gives, so every field must agree, for dense (fp32 and a cast
#   encoding) and compressed, one bucket and several, P = 1 and P > 1, with and without the size
#   exchange. Closed forms checked too: the last bucket's gradients are ready at the end of
#   compute, and it is ready to send after all of the rank's side work.
# * :func:`_timeline` spans against the hand rule (forward [0, fwd], backward [fwd, compute],
#   the side work from the first bucket's gradients to the last bucket's send, only where there
#   is side work), and its step time against the result row the block path computed for the
#   same step (fp32 dense: no cast back, so the row's ``step_s - optimizer_s`` is the last
#   collective's finish).
# * :meth:`_Runner.run_steps` (how the replay runs a block of steps) against :meth:`_Runner._run`
#   on each step's phases one by one, and its memo: a step whose ready times are another's
#   shifted by a dyadic amount gets that step's finish times shifted by that amount, counted as a
#   memo hit; a step with other units is run afresh.

LEAF_SPINE = {
    "kind": "leaf_spine",
    "hosts_per_leaf": 2,
    "spines": 1,
    "oversubscription": 4.0,
    "placement": "spread",
}


@pytest.fixture(scope="module")
def trace3(tmp_path_factory):
    cfg = SynthConfig(
        layers="vgg_like",
        workers=4,
        steps=3,
        density=0.01,
        compute_s_per_worker=0.02,
        variance_s_per_worker=0.002,
        codec_s_per_worker=0.003,
        seed=7,
    )
    return read_trace(synth_trace(cfg, tmp_path_factory.mktemp("mut") / "vgg"))


def _setup(trace3, p, **fields):
    cfg = resolve_collectives(SimulateConfig(**fields), trace3)
    cl = dataclasses.replace(_cluster(gamma_s_per_byte=1e-11), compute="trace")
    buckets = _Buckets.of(trace3, cfg)
    return cfg, cl, buckets, _world_size(trace3, cl, p, cfg, buckets)


PLAN_CASES = [
    (4, {"overlap": "bucketed", "bucket_bytes": 4e6}),
    (4, {"overlap": "per_layer"}),
    (4, {"overlap": "none"}),
    (1, {"overlap": "bucketed", "bucket_bytes": 4e6}),
    (4, {"overlap": "bucketed", "bucket_bytes": 4e6, "size_exchange": False}),
    (4, {"overlap": "per_layer", "allgatherv": ("padded",)}),
    (2, {"overlap": "bucketed", "bucket_bytes": 3e7}),  # two groups, two ranks
]


@pytest.mark.parametrize(("p", "fields"), PLAN_CASES)
@pytest.mark.parametrize(
    ("method", "enc"), [("dense", "fp32"), ("dense", "bf16"), ("compressed", None)]
)
def test_step_plan_equals_the_block_row_of_the_same_step(trace3, p, fields, method, enc):
    """Every field of the one-step plan equals row t of the block plan (the documented
    equality), and the closed forms: last bucket's gradients ready at compute's end, last
    bucket ready to send at compute + all side work."""
    cfg, _, buckets, ws = _setup(trace3, p, **fields)
    enc = enc or trace3.primary_encoding
    label = _label(method, enc)
    block = _block(ws, buckets, slice(0, ws.n_steps), method, enc, label)
    assert len(buckets.groups) > 1 or fields["overlap"] == "none"
    for t in range(ws.n_steps):
        plan = _step_plan(ws, buckets, t, method, enc, label)
        assert plan.data_index == block.data_index
        assert len(plan.phases) == len(block.schedules)
        for ph, sched, name, ready, units in zip(
            plan.phases, block.schedules, block.names, block.ready, block.units, strict=True
        ):
            assert ph.schedule.key == sched.key
            assert ph.label == f"{label} {name}"
            np.testing.assert_array_equal(ph.ready_s, ready[t])
            np.testing.assert_array_equal(ph.units, units[t])
        for f in ("local", "dec", "variance", "payload"):
            np.testing.assert_array_equal(getattr(plan, f), getattr(block, f)[t], err_msg=f)
        np.testing.assert_allclose(plan.grad_ready[-1], ws.compute[t], rtol=1e-12)
        np.testing.assert_allclose(plan.ready[-1], ws.compute[t] + plan.local, rtol=1e-12)
        np.testing.assert_allclose(plan.ready[0], plan.grad_ready[0] + plan.local * buckets.frac[0])
        if method == "dense":
            # the buckets' bytes add up to the whole encoded payload
            total = sum(_message_bytes(ph) for ph in plan.phases)
            assert total == pytest.approx(float(plan.payload[0]), rel=1e-9)


def _message_bytes(ph):
    """The message bytes of one dense phase: unit sizes are linear in the message size."""
    one = unit_sizes(ph.schedule, 1.0)
    return float(np.asarray(ph.units).sum() / np.asarray(one).sum())


TL_FIELDS = {
    "overlap": "bucketed",
    "bucket_bytes": 4e6,
    "path": "message",
    "semantics": "eager",
    "mode": "fifo",
    "per_step": True,
}


@pytest.fixture(scope="module")
def timelined(trace3):
    cl = dataclasses.replace(_cluster(LEAF_SPINE, gamma_s_per_byte=2**-30), compute="trace")
    cfg = resolve_collectives(SimulateConfig(**TL_FIELDS), trace3)
    _, _, _, ws = _setup(trace3, 4, **TL_FIELDS)
    df, tls, _ = simulate_trace(trace3, cl, [4], cfg, timeline_steps=[int(ws.inputs.steps[1])])
    return df, tls


def test_timeline_spans_follow_the_hand_rule(trace3, timelined):
    """Forward [0, fwd], backward [fwd, compute] per rank; a side-work span (cast for a
    cast encoding, variance+codec for compressed) from the first bucket's gradients to
    the last bucket's send, and none for fp32 (no cast); the collectives' own spans too."""
    df, tls = timelined
    cfg, _, buckets, ws = _setup(trace3, 4, **TL_FIELDS)
    by_method = {tl.method: tl for tl in tls}
    assert set(by_method) == {"dense", "dense/bf16", "dense/fp16", "compressed"}
    for label, tl in by_method.items():
        t = [int(s) for s in ws.inputs.steps].index(tl.step)
        fwd, compute = ws.fwd[t], ws.compute[t]
        mine = {"forward", "backward", "cast", "variance+codec"}
        for r in range(4):
            spans = [(s.name, s.start_s, s.end_s) for s in tl.spans if s.rank == r]
            assert ("forward", 0.0, float(fwd[r])) in spans
            assert ("backward", float(fwd[r]), float(compute[r])) in spans
            side = [s for s in spans if s[0] in ("cast", "variance+codec")]
            method = "compressed" if label == "compressed" else "dense"
            enc = (
                trace3.primary_encoding
                if method == "compressed"
                else (label.split("/") + ["fp32"])[1]
            )
            plan = _step_plan(ws, buckets, t, method, enc, label)
            if label == "dense":
                assert side == []
            else:
                name = "variance+codec" if label == "compressed" else "cast"
                assert side == [(name, float(plan.grad_ready[0, r]), float(plan.ready[-1, r]))]
            assert any(s[0] not in mine for s in spans), "the collectives' spans are missing"
        assert all(s.rank in range(4) for s in tl.spans)


def test_timeline_step_time_equals_the_result_row(trace3, timelined):
    """fp32 dense has no cast back, so the row's ``step_s - optimizer_s`` (block path,
    message level, fifo, eager, gamma > 0) is the last collective's finish: the timeline's
    ``step_s`` (the same step again with link recording) must equal it."""
    df, tls = timelined
    tl = next(tl for tl in tls if tl.method == "dense")
    row = df[(df.method == "dense") & (df.encoding == "fp32") & (df.step == tl.step)].iloc[0]
    assert tl.step_s == pytest.approx(row.step_s - row.optimizer_s, rel=1e-12)
    assert tl.link_bytes.sum() > 0


@pytest.mark.parametrize("path", ["message", "auto", "round"])
def test_run_steps_equals_one_by_one_runs_and_memo_shifts(trace3, path):
    """``run_steps`` on a block of four steps (a step, the same step with every ready time
    shifted by 1/8 s and by 1/4 s, and the step with twice the bytes) gives, for the first and
    the last, the finish times ``_run`` gives for their phases one by one (relative to their
    earliest ready time, then shifted back); the two shifted steps are memo hits whose finish
    times are the first's shifted by exactly 1/8 and 1/4 s; the doubled step runs afresh."""
    cfg, cl, buckets, ws = _setup(trace3, 4, overlap="bucketed", bucket_bytes=4e6, path=path)
    cache = RunCache(ws.topology)
    for method, enc in (("dense", "fp32"), ("compressed", trace3.primary_encoding)):
        label = _label(method, enc)
        one = _block(ws, buckets, slice(0, 1), method, enc, label)
        # ready times on a 2**-20 s grid, so shifting them by 1/8 s is exact
        ready = [np.round(r * 2**20) / 2**20 for r in one.ready]
        shifts = np.array([0.0, 0.125, 0.25, 0.0])
        block = dataclasses.replace(
            one,
            ready=[np.concatenate([r + s for s in shifts]) for r in ready],
            units=[np.concatenate([u, u, u, 2 * u]) for u in one.units],
            copied=[np.concatenate([c, c, c, 2 * c]) for c in one.copied],
            local=np.repeat(one.local, 4, axis=0),
            dec=np.repeat(one.dec, 4, axis=0),
            variance=np.repeat(one.variance, 4, axis=0),
            payload=np.repeat(one.payload, 4, axis=0),
        )
        runner = _Runner(ws.topology, cfg, cl.link.gamma_s_per_byte, cache)
        finish, paths = runner.run_steps(block)
        assert finish.shape == (4, len(one.schedules), ws.topology.world_size)
        for i, factor in ((0, 1), (3, 2)):
            base = min(float(r[0].min()) for r in ready)
            phases = [
                Phase(r[0] - base, sched, factor * u[0], f"{label} {name}")
                for sched, u, r, name in zip(
                    one.schedules, one.units, ready, one.names, strict=True
                )
            ]
            ref = _Runner(ws.topology, cfg, cl.link.gamma_s_per_byte, cache)._run(phases)
            assert paths[i] == ref.path
            np.testing.assert_allclose(finish[i], ref.finish + base, rtol=1e-12, atol=1e-15)
        for i in (1, 2):
            assert paths[i] == paths[0]
            np.testing.assert_allclose(finish[i], finish[0] + shifts[i], rtol=0, atol=1e-12)
        assert runner.counts["memo"] == 2
        assert sum(runner.counts[k] for k in PATHS3) == 2
        assert runner.counts[paths[0]] + runner.counts[paths[3]] == (
            4 if paths[0] == paths[3] else 2
        )
        # a later block with the first step again is all memo
        fin_again, _ = runner.run_steps(dataclasses.replace(one, ready=ready))
        assert runner.counts["memo"] == 3
        np.testing.assert_array_equal(fin_again[0], finish[0])


PATHS3 = ("message", "collective", "round")


@pytest.mark.parametrize("semantics", ["rendezvous", "eager"])
def test_runner_paths_agree_where_all_are_exact(trace3, semantics):
    """On a star (no two flows share a channel) the collective-level, round-level and
    message-level paths are all exact, so ``run_steps`` forced onto each gives the same
    finish times (with a per-byte reduction cost and either semantics: a path that ran with the
    defaults instead would differ); ``auto`` picks the collective level there."""
    cfg, cl, buckets, ws = _setup(trace3, 4, overlap="bucketed", bucket_bytes=4e6)
    gamma = 2**-26  # large enough to move every finish time
    cache = RunCache(ws.topology)
    for method, enc in (("dense", "fp32"), ("compressed", trace3.primary_encoding)):
        label = _label(method, enc)
        plan = _step_plan(ws, buckets, 0, method, enc, label)
        outs = {}
        for path in ("collective", "round", "message", "auto"):
            c = dataclasses.replace(cfg, path=path, semantics=semantics)
            outs[path] = run_phases(_Runner(ws.topology, c, gamma, cache), plan.phases)
        assert outs["auto"].path == "collective"
        assert outs["round"].path == "round" and outs["message"].path == "message"
        if method == "dense":  # the reduction's per-byte cost moves the allreduce's finish
            plain = dataclasses.replace(cfg, semantics=semantics)
            no_gamma = run_phases(_Runner(ws.topology, plain, 0.0, cache), plan.phases)
            assert not np.allclose(no_gamma.finish, outs["message"].finish, rtol=1e-6)
        for path in ("round", "message", "auto"):
            np.testing.assert_allclose(
                outs[path].finish, outs["collective"].finish, rtol=1e-9, err_msg=path
            )


def test_forced_collective_path_on_shared_links_names_every_collective(trace3):
    """A leaf-spine with two hosts per leaf and spread placement makes ring flows share the
    uplinks, so the collective-level path is not exact; forcing it is refused with a message
    that lists the step's collectives in sorted order, comma-separated."""
    cfg, cl, buckets, ws = _setup(trace3, 4, allgatherv=("bruck",))
    cl = dataclasses.replace(_cluster(LEAF_SPINE), compute="trace")
    ws = _world_size(trace3, cl, 4, cfg, buckets)
    plan = _step_plan(ws, buckets, 0, "compressed", trace3.primary_encoding, "compressed")
    forced = dataclasses.replace(cfg, path="collective")
    runner = _Runner(ws.topology, forced, 0.0, RunCache(ws.topology))
    with pytest.raises(ConfigError, match=r"not exact for allgatherv/bruck, allgatherv/ring on"):
        run_phases(runner, plan.phases)


# The runner's path choice (:meth:`_Runner._run`, :meth:`_Runner._rounds`) against the engine.
#
# The message level (:func:`run_message`) is the exact reference every faster path must equal:
#
# * eager semantics with a ``"dst"`` verdict (several senders into one rank) needs the fast
#   path's run-time overlap check; on a Bruck allgatherv with staggered ready times the check
#   finds overlapping arrivals and the unchecked recurrence is wrong there, so ``auto`` must
#   give the message-level finish times on another path, and a forced ``collective`` path must
#   refuse with the documented message;
# * ``mode="fifo"`` must reach the message level as fifo (fair sharing gives other times);
# * a ring allreduce on an oversubscribed leaf-spine with staggered ready times makes the
#   round level refuse: ``auto`` counts each refusal and falls back to the message level, a
#   forced ``round`` path refuses with the documented message, and a forced ``round`` path
#   with ``mode="fifo"`` refuses with its own message.


def _bruck_overlap():
    """Bruck allgatherv on a 4-rank star, ready times on a 2**-12 s grid and sizes in
    64 KiB steps (seeded draw 2): several senders into one rank, arrivals overlapping."""
    p = 4
    topo = build_topology(_cluster(), p)
    s = get_schedule("allgatherv/bruck", p)
    rng = np.random.default_rng(2)
    ready = rng.integers(0, 8, p) / 2**12
    sizes = rng.integers(1, 8, p) * 2.0**16
    return topo, Phase(ready, s, unit_sizes(s, sizes), "ag")


def _runner(topo, **fields):
    return _Runner(topo, SimulateConfig(**fields), 0.0, RunCache(topo))


def test_eager_overlap_auto_gives_the_message_level_times_not_the_unchecked_recurrence():
    """Eager, verdict "dst", overlapping arrivals: ``auto`` equals :func:`run_message` (the
    exact reference) and does not report the collective path; the unchecked recurrence
    differs from the reference here, so a runner that skipped the check would be wrong."""
    topo, ph = _bruck_overlap()
    assert contention_free([ph.schedule], topo) == "dst"
    ref = run_message([ph], topo, semantics="eager")
    unchecked = run_collective([ph], topo, semantics="eager", check_overlap=False)
    assert not np.allclose(unchecked, ref, rtol=1e-9, atol=0)  # the case has teeth
    runner = _runner(topo, semantics="eager")
    out = run_phases(runner, [ph])
    assert out.path != "collective"
    np.testing.assert_allclose(out.finish, ref, rtol=1e-12, atol=0)
    assert runner.counts["collective"] == 0 and runner.counts[out.path] == 1


def test_eager_overlap_forced_collective_path_refuses_with_the_documented_message():
    """A forced ``collective`` path refuses the overlapping eager case with the whole
    message (what is wrong and what to use instead)."""
    topo, ph = _bruck_overlap()
    with pytest.raises(ConfigError) as err:
        run_phases(_runner(topo, semantics="eager", path="collective"), [ph])
    assert str(err.value) == (
        "the collective-level fast path is not exact here: messages into one rank overlap "
        "under eager semantics; use path=auto or message"
    )


def test_rendezvous_dst_stays_on_the_collective_path_and_equals_the_message_level():
    """Rendezvous with a "dst" verdict is exact on the collective level (no run-time check):
    ``auto`` takes it and equals :func:`run_message`."""
    topo, ph = _bruck_overlap()
    runner = _runner(topo, semantics="rendezvous")
    out = run_phases(runner, [ph])
    assert out.path == "collective"
    np.testing.assert_allclose(out.finish, run_message([ph], topo), rtol=1e-12, atol=0)


def test_fifo_mode_reaches_the_message_level_as_fifo():
    """Direct allgatherv with uneven sizes on a star: the runner with ``mode="fifo"``
    equals :func:`run_message` in fifo mode, which differs from fair sharing here."""
    p = 4
    topo = build_topology(_cluster(), p)
    s = get_schedule("allgatherv/direct", p)
    ph = Phase(np.zeros(p), s, unit_sizes(s, np.array([1.0, 3.0, 5.0, 7.0]) * 2.0**16))
    fifo = run_message([ph], topo, mode="fifo")
    fair = run_message([ph], topo, mode="fair")
    assert not np.allclose(fifo, fair, rtol=1e-9, atol=0)
    for path in ("auto", "message"):
        out = run_phases(_runner(topo, mode="fifo", path=path), [ph])
        assert out.path == "message"
        np.testing.assert_allclose(out.finish, fifo, rtol=1e-12, atol=0)


def _ring_refused(seed: int):
    """Ring allreduce on an 8-rank oversubscribed leaf-spine, ready times on a 2**-12 s
    grid (seeded): a rank runs ahead into a channel an earlier round still uses."""
    p = 8
    topo = build_topology(_cluster(LEAF_SPINE), p)
    s = get_schedule("allreduce/ring", p)
    rng = np.random.default_rng(seed)
    ready = rng.integers(0, 8, p) / 2**12
    return topo, Phase(ready, s, unit_sizes(s, np.full(p, 2.0**18)), "ar")


def test_round_refusals_are_counted_one_each_and_fall_back_to_the_message_level():
    """Two different refused phases under ``auto``: each equals :func:`run_message` and
    ``round_refused`` counts 2 (one per refusal)."""
    topo, ph = _ring_refused(0)
    runner = _runner(topo)
    out = run_phases(runner, [ph])
    assert out.path == "message"
    np.testing.assert_allclose(out.finish, run_message([ph], topo), rtol=1e-12, atol=0)
    assert runner.counts["round_refused"] == 1
    later = Phase(ph.ready_s[::-1].copy(), ph.schedule, ph.units, "ar")
    out2 = run_phases(runner, [later])
    assert out2.path == "message"
    np.testing.assert_allclose(out2.finish, run_message([later], topo), rtol=1e-12, atol=0)
    assert runner.counts["round_refused"] == 2 and runner.counts["message"] == 2


def test_forced_round_path_refuses_with_the_documented_messages():
    """Forced ``round``: a refused phase raises the whole 'not exact here' message; fifo
    mode raises the 'models fair sharing' message naming the mode."""
    topo, ph = _ring_refused(0)
    with pytest.raises(ConfigError) as err:
        run_phases(_runner(topo, path="round"), [ph])
    assert str(err.value) == (
        "the round-level path is not exact here: a rank ran ahead into a channel "
        "that an earlier round's flow still uses; use path=auto or message"
    )
    with pytest.raises(ConfigError) as err:
        run_phases(_runner(topo, path="round", mode="fifo"), [ph])
    assert str(err.value) == (
        "the round-level path models fair sharing, not mode='fifo'; use path=auto or message"
    )


def test_eager_src_verdict_stays_on_the_collective_path_without_the_overlap_check():
    """Recursive-doubling allreduce on a 2x2 torus: every channel has one sender (verdict
    "src"), so the collective level is exact under eager semantics without the run-time
    check, even though two neighbours' messages into one rank overlap in time (the check
    would refuse them). ``auto`` takes the collective path and equals :func:`run_message`."""
    p = 4
    topo = build_topology(_cluster({"kind": "torus2d", "rows": 2}), p)
    s = get_schedule("allreduce/recursive_doubling", p)
    rng = np.random.default_rng(0)
    ph = Phase(rng.integers(0, 8, p) / 2**12, s, unit_sizes(s, np.full(p, 2.0**18)), "ar")
    assert contention_free([s], topo) == "src"
    assert run_collective([ph], topo, semantics="eager", check_overlap=True) is None
    runner = _runner(topo, semantics="eager")
    out = run_phases(runner, [ph])
    assert out.path == "collective"
    np.testing.assert_allclose(
        out.finish, run_message([ph], topo, semantics="eager"), rtol=1e-12, atol=0
    )


def _one_phase_block(ph: Phase, steps: int = 2) -> _Block:
    """A block of ``steps`` steps that all run ``ph`` (step s shifted by s/4 s, exact)."""
    p = ph.ready_s.size
    shift = np.arange(steps)[:, None] / 4
    zeros = np.zeros((steps, p))
    return _Block(
        label="x",
        start=0,
        schedules=[ph.schedule],
        names=["ag"],
        ready=[ph.ready_s[None, :] + shift],
        units=[np.repeat(ph.units[None, :], steps, axis=0)],
        data_index=[0],
        copied=[np.full(steps, float(ph.units[:p].sum()))],
        local=zeros,
        dec=zeros,
        variance=zeros,
        payload=zeros,
    )


@pytest.mark.parametrize("semantics", ["eager", "rendezvous"])
def test_run_steps_on_the_overlap_case_equals_the_message_level(semantics):
    """``run_steps`` (the replay's block route) on the Bruck case: each step equals
    :func:`run_message` on that step's phase (the exact reference), so the eager steps must
    not go through the unchecked batched recurrence; the collective path is reported only
    where it is exact (rendezvous)."""
    topo, ph = _bruck_overlap()
    block = _one_phase_block(ph)
    fin, paths = _runner(topo, semantics=semantics).run_steps(block)
    for s in range(block.n_steps):
        step = Phase(block.ready[0][s], ph.schedule, ph.units, "ag")
        ref = run_message([step], topo, semantics=semantics)
        np.testing.assert_allclose(fin[s], ref, rtol=1e-12, atol=0)
    assert all((p == "collective") == (semantics == "rendezvous") for p in paths)


def test_run_steps_eager_batch_uses_eager_semantics_and_counts_like_run():
    """Ring allreduce on a 4-rank star (verdict "src": batched without a check), eager,
    staggered ready times: each step equals :func:`run_message` with eager semantics (which
    differs from rendezvous here); and two calls of ``run_steps`` on a block whose steps
    repeat count paths and memo hits exactly as running the steps one block of one at a time."""
    p = 4
    topo = build_topology(_cluster(), p)
    s = get_schedule("allreduce/ring", p)
    rng = np.random.default_rng(3)
    ph = Phase(rng.integers(0, 8, p) / 2**12, s, unit_sizes(s, np.full(p, 2.0**18)), "ar")
    assert contention_free([s], topo) == "src"
    eager = run_message([ph], topo, semantics="eager")
    assert not np.allclose(eager, run_message([ph], topo), rtol=1e-9, atol=0)
    block = _one_phase_block(ph, steps=3)
    batched = _runner(topo, semantics="eager")
    one_by_one = _runner(topo, semantics="eager")
    for _ in range(2):
        fin, paths = batched.run_steps(block)
        for st in range(block.n_steps):
            step = Phase(block.ready[0][st], ph.schedule, ph.units, "ar")
            out = run_phases(one_by_one, [step])
            assert paths[st] == out.path == "collective"
            np.testing.assert_allclose(fin[st], out.finish, rtol=1e-12, atol=0)
            np.testing.assert_allclose(fin[st], eager + st / 4, rtol=1e-12, atol=0)
    assert batched.counts == one_by_one.counts
    assert batched.counts["collective"] == 1 and batched.counts["memo"] == 5


def test_missing_timeline_step_error_names_the_replayed_range(tmp_path):
    """A 3-step synthetic trace replays steps 0, 1 and 2; asking for step 7's timeline is an
    error naming the missing step and the whole replayed range, first to last (hand)."""
    cfg = SynthConfig(layers="vgg_like", workers=2, steps=3, density=0.01, seed=1)
    trace = read_trace(synth_trace(cfg, tmp_path / "t"))
    with pytest.raises(ConfigError) as err:
        simulate_trace(trace, _cluster(), [2], SimulateConfig(), timeline_steps=[1, 7])
    assert str(err.value) == "timeline steps [7] are not among the replayed steps 0..2"


def test_replay_in_one_step_blocks_equals_the_replay_at_once(tmp_path, monkeypatch):
    """Invariant: how the steps are cut into blocks does not change anything. A 3-step trace
    on 2 ranks replayed with blocks of at most 3 values (one step of 2 ranks each: 3 // 2)
    gives the same table, the same path counts and one timeline per variant for the asked
    step 0 (not one per block), as the replay in one block; progress reports every step of
    every variant once, 3 x variants in all, however the blocks are cut. Blocks of 2 steps then 1 (4 values) give the same again. Every timeline span of a collective is named after its variant."""
    cfg_t = SynthConfig(layers="vgg_like", workers=2, steps=3, density=0.01, seed=1)
    trace = read_trace(synth_trace(cfg_t, tmp_path / "t"))
    cfg = SimulateConfig(per_step=True)

    def replay():
        calls: list[int] = []
        df, tls, info = simulate_trace(
            trace, _cluster(), [2], cfg, timeline_steps=[0], progress=calls.append
        )
        return df, tls, info, calls

    df0, tls0, info0, calls0 = replay()
    monkeypatch.setattr(replay_module, "_BLOCK_VALUES", 3)
    df1, tls1, info1, calls1 = replay()
    pd.testing.assert_frame_equal(df1, df0)
    assert info1 == info0
    variants = sorted(info0["2"])  # one label per replayed variant
    assert len(variants) > 1
    assert sorted(t.method for t in tls1) == sorted(t.method for t in tls0) == variants
    monkeypatch.setattr(replay_module, "_BLOCK_VALUES", 4)  # blocks of 2 steps, then 1
    df2, tls2, info2, calls2 = replay()
    assert info2 == info0 and len(tls2) == len(tls0)
    assert sum(calls0) == sum(calls1) == sum(calls2) == 3 * len(variants)
    assert len(calls1) >= 3 * len(variants) // 2  # one-step blocks: reported step by step
    pd.testing.assert_frame_equal(df2, df0)
    for tl in tls0 + tls1:
        named = [s.name for s in tl.spans if s.name not in ("forward", "backward")]
        collective = [n for n in named if n not in ("cast", "variance+codec")]
        assert collective and all(n.startswith(f"{tl.method} ") for n in collective)


def test_padded_allgatherv_host_copies_add_delta_times_the_payload_bytes_to_the_step(tmp_path):
    """Priced host copies of the padded allgatherv (δ per copied byte) add δ·(½·P·m_max +
    ½·Σ m) to each step of the compressed variant (the closed form of ``host_time_s``: the
    backend's copy of the padded buffer, m_max the row's ``payload_bytes_max``, and the copy
    out of the real bytes, Σ m = P times its ``payload_bytes_mean``), with one bucket group,
    so the collective ends the step."""
    cfg_t = SynthConfig(layers="vgg_like", workers=2, steps=2, density=0.01, seed=1)
    trace = read_trace(synth_trace(cfg_t, tmp_path / "t"))
    cfg = SimulateConfig(per_step=True, overlap="none", allgatherv=("padded",))
    delta = 2.0**-20
    plain = _cluster()
    priced = dataclasses.replace(
        plain, link=dataclasses.replace(plain.link, allgatherv_host_s_per_byte=delta)
    )

    def steps(cl):
        df = simulate_trace(trace, cl, [4], cfg)[0]
        df = df[(df.method == "compressed") & (df.step >= 0)].sort_values("step")
        return (
            df.step_s.to_numpy(),
            df.payload_bytes_mean.to_numpy(),
            df.payload_bytes_max.to_numpy(),
        )

    base, mean, m_max = steps(plain)
    more, mean2, _ = steps(priced)
    np.testing.assert_array_equal(mean2, mean)
    assert np.all(mean < m_max)  # uneven payloads: the padded bytes would price more
    np.testing.assert_allclose(more - base, delta * (0.5 * 4 * m_max + 0.5 * 4 * mean), rtol=1e-6)
    # with the link's padded share s = 0.2: δ·(0.2·P·m_max + 0.8·Σ m)
    shared = dataclasses.replace(
        priced, link=dataclasses.replace(priced.link, allgatherv_host_padded_share=0.2)
    )
    less, _, _ = steps(shared)
    np.testing.assert_allclose(less - base, delta * (0.2 * 4 * m_max + 0.8 * 4 * mean), rtol=1e-6)


def test_one_rank_has_no_exposed_communication(tmp_path):
    """At P = 1 nothing is sent, so every step's ``comm_s`` is zero (at most a float residue
    of adding and removing the same times, never negative, never a placeholder): checked on
    every step of every variant of an 8-step trace with per-layer buckets."""
    cfg_t = SynthConfig(
        layers="vgg_like",
        workers=2,
        steps=8,
        density=0.01,
        compute_s_per_worker=0.02,
        variance_s_per_worker=0.002,
        codec_s_per_worker=0.003,
        seed=5,
    )
    trace = read_trace(synth_trace(cfg_t, tmp_path / "t"))
    for overlap in ("per_layer", "bucketed"):
        cfg = SimulateConfig(per_step=True, overlap=overlap)
        df = simulate_trace(trace, _cluster(), [1], cfg)[0]
        comm = df.comm_s.to_numpy(dtype=float)
        assert comm.size > 8 and np.all(comm >= 0.0) and np.all(comm <= 1e-12)


def test_a_layer_without_elements_takes_no_bytes_from_the_others(tmp_path):
    """A model whose layers hold 1 and 0 elements (an empty parameter is a valid layer:
    numel = prod([0]) = 0) sends one fp32 element, 4 bytes, per step: replayed with one
    bucket per layer, the 1-element layer's bucket carries those 4 bytes (4 bytes per
    element) and the empty one none. P = 2 on a 1 B/s star, ring allreduce of n = 4 bytes:
    2(P − 1)(α + n/(P·B)) = 2α + 4 s (Hockney), plus the empty bucket's latencies; in the
    result row and in the step's timeline."""
    import json

    from vgcsim.traces.reading import Trace

    layers = tmp_path / "layers.json"
    layers.write_text(json.dumps([1, 1]))
    cfg = SynthConfig(layers=str(layers), workers=2, steps=2, compute_s_per_worker=1e-6)
    base = read_trace(synth_trace(cfg, tmp_path / "t"))
    header = json.loads(json.dumps(base.header))
    header["layers"][0].update(shape=[0], numel=0)
    header["dense_bytes_per_step"] = 4
    empty = base.payloads["layer"] == 0
    payloads = base.payloads.copy()
    for col in ["numel", "sent", *[c for c in payloads.columns if c.startswith("bits_")]]:
        payloads.loc[empty, col] = 0
    trace = Trace(base.path, header, payloads, base.steps, base.evals)
    spec = dataclasses.replace(_cluster(bandwidth_Bps=1.0, latency_s=1e-6), compute="trace")
    sim = SimulateConfig(overlap="per_layer", dense_encodings=("fp32",), path="message")
    df, timelines, _ = simulate_trace(trace, spec, [2], sim, timeline_steps=[0])
    dense = df[df["method"] == "dense"].iloc[0]
    assert dense["comm_s"] == pytest.approx(4.0, rel=1e-4)
    # the step's timeline, simulated again from its own plan of the step, agrees
    (timeline,) = [t for t in timelines if t.method == "dense"]
    assert timeline.step_s == pytest.approx(4.0, rel=1e-4)


@pytest.mark.parametrize("field", ["allreduce", "allgatherv"])
def test_an_unknown_collective_is_refused_naming_the_option_the_value_and_the_valid_ones(field):
    """The documented "unknown X 'name'; valid: a, b, c" line, whole: which option, the
    value given and every algorithm the option takes (each one `get_schedule` builds)."""
    from vgcsim.core.collectives import ALLGATHERV_ALGORITHMS, ALLREDUCE_ALGORITHMS

    algorithms = ALLREDUCE_ALGORITHMS if field == "allreduce" else ALLGATHERV_ALGORITHMS
    names = ", ".join(sorted(algorithms))
    with pytest.raises(ConfigError) as info:
        SimulateConfig(**{field: ("nope",)})
    assert str(info.value) == f"unknown {field} algorithm 'nope'; valid: {names}"
    for a in algorithms:  # every listed name is accepted
        SimulateConfig(**{field: (a,)})


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"max_steps": -1}, "max_steps must be >= 0 (0 = all steps)"),
        ({"seed": -3}, "seed must be >= 0, got -3"),
        (
            {"dense_encodings": ("bf16", "fp16")},
            "dense_encodings must include fp32 (the speedup baseline)",
        ),
        (
            {"dense_encodings": ("fp32", "int8")},
            "unknown dense encoding 'int8'; valid: bf16, fp16, fp32",
        ),
    ],
)
def test_refused_simulate_options_give_their_documented_line(options, message):
    """Each refusal of SimulateConfig is the one line the CLI prints (exit 2), whole."""
    with pytest.raises(ConfigError) as info:
        SimulateConfig(**options)
    assert str(info.value) == message
