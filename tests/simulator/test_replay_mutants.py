"""The replay's one-step plan, its timeline and the runner's memo, against independent references.

* :func:`_step_plan` (the one-step plan the timelines redraw) against :func:`_block` (the
  block-at-once plan the result rows come from): the module documents that row s of a block
  holds what the one-step plan gives, so every field must agree, for dense (fp32 and a cast
  encoding) and compressed, one bucket and several, P = 1 and P > 1, with and without the size
  exchange. Closed forms checked too: the last bucket's gradients are ready at the end of
  compute, and it is ready to send after all of the rank's side work.
* :func:`_timeline` spans against the hand rule (forward [0, fwd], backward [fwd, compute],
  the side work from the first bucket's gradients to the last bucket's send, only where there
  is side work), and its step time against the result row the block path computed for the
  same step (fp32 dense: no cast back, so the row's ``step_s - optimizer_s`` is the last
  collective's finish).
* :meth:`_Runner.run_steps` (how the replay runs a block of steps) against :meth:`_Runner._run`
  on each step's phases one by one, and its memo: a step whose ready times are another's
  shifted by a dyadic amount gets that step's finish times shifted by that amount, counted as a
  memo hit; a step with other units is run afresh.
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parent))
from simhelpers import cluster as _cluster  # noqa: E402
from simhelpers import run_phases  # noqa: E402
from vgcsim.simulator.collectives import unit_sizes  # noqa: E402
from vgcsim.simulator.engine import Phase, RunCache  # noqa: E402
from vgcsim.simulator.replay import (  # noqa: E402
    SimulateConfig,
    _block,
    _Buckets,
    _label,
    _Runner,
    _step_plan,
    _world_size,
    simulate_trace,
)
from vgcsim.traces.io import read_trace  # noqa: E402
from vgcsim.traces.replay import resolve_collectives  # noqa: E402
from vgcsim.traces.synth import SynthConfig, synth_trace  # noqa: E402

from vgcsim.core.errors import ConfigError  # noqa: E402

LEAF_SPINE = {
    "kind": "leaf_spine",
    "hosts_per_leaf": 2,
    "spines": 1,
    "oversubscription": 4.0,
    "placement": "spread",
}


@pytest.fixture(scope="module")
def trace(tmp_path_factory):
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


def _setup(trace, p, **fields):
    cfg = resolve_collectives(SimulateConfig(**fields), trace)
    cl = dataclasses.replace(_cluster(gamma_s_per_byte=1e-11), compute="trace")
    buckets = _Buckets.of(trace, cfg)
    return cfg, cl, buckets, _world_size(trace, cl, p, cfg, buckets)


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
def test_step_plan_equals_the_block_row_of_the_same_step(trace, p, fields, method, enc):
    """Every field of the one-step plan equals row t of the block plan (the documented
    equality), and the closed forms: last bucket's gradients ready at compute's end, last
    bucket ready to send at compute + all side work."""
    cfg, _, buckets, ws = _setup(trace, p, **fields)
    enc = enc or trace.primary_encoding
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
def timelined(trace):
    cl = dataclasses.replace(_cluster(LEAF_SPINE, gamma_s_per_byte=2**-30), compute="trace")
    cfg = resolve_collectives(SimulateConfig(**TL_FIELDS), trace)
    _, _, _, ws = _setup(trace, 4, **TL_FIELDS)
    df, tls, _ = simulate_trace(trace, cl, [4], cfg, timeline_steps=[int(ws.inputs.steps[1])])
    return df, tls


def test_timeline_spans_follow_the_hand_rule(trace, timelined):
    """Forward [0, fwd], backward [fwd, compute] per rank; a side-work span (cast for a
    cast encoding, variance+codec for compressed) from the first bucket's gradients to
    the last bucket's send, and none for fp32 (no cast); the collectives' own spans too."""
    df, tls = timelined
    cfg, _, buckets, ws = _setup(trace, 4, **TL_FIELDS)
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
                trace.primary_encoding
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


def test_timeline_step_time_equals_the_result_row(trace, timelined):
    """fp32 dense has no cast back, so the row's ``step_s - optimizer_s`` (block path,
    message level, fifo, eager, gamma > 0) is the last collective's finish: the timeline's
    ``step_s`` (the same step again with link recording) must equal it."""
    df, tls = timelined
    tl = next(tl for tl in tls if tl.method == "dense")
    row = df[(df.method == "dense") & (df.encoding == "fp32") & (df.step == tl.step)].iloc[0]
    assert tl.step_s == pytest.approx(row.step_s - row.optimizer_s, rel=1e-12)
    assert tl.link_bytes.sum() > 0


@pytest.mark.parametrize("path", ["message", "auto", "round"])
def test_run_steps_equals_one_by_one_runs_and_memo_shifts(trace, path):
    """``run_steps`` on a block of four steps (a step, the same step with every ready time
    shifted by 1/8 s and by 1/4 s, and the step with twice the bytes) gives, for the first and
    the last, the finish times ``_run`` gives for their phases one by one (relative to their
    earliest ready time, then shifted back); the two shifted steps are memo hits whose finish
    times are the first's shifted by exactly 1/8 and 1/4 s; the doubled step runs afresh."""
    cfg, cl, buckets, ws = _setup(trace, 4, overlap="bucketed", bucket_bytes=4e6, path=path)
    cache = RunCache(ws.topology)
    for method, enc in (("dense", "fp32"), ("compressed", trace.primary_encoding)):
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
def test_runner_paths_agree_where_all_are_exact(trace, semantics):
    """On a star (no two flows share a channel) the collective-level, round-level and
    message-level paths are all exact, so ``run_steps`` forced onto each gives the same
    finish times (with a per-byte reduction cost and either semantics: a path that ran with the
    defaults instead would differ); ``auto`` picks the collective level there."""
    cfg, cl, buckets, ws = _setup(trace, 4, overlap="bucketed", bucket_bytes=4e6)
    gamma = 2**-26  # large enough to move every finish time
    cache = RunCache(ws.topology)
    for method, enc in (("dense", "fp32"), ("compressed", trace.primary_encoding)):
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


def test_forced_collective_path_on_shared_links_names_every_collective(trace):
    """A leaf-spine with two hosts per leaf and spread placement makes ring flows share the
    uplinks, so the collective-level path is not exact; forcing it is refused with a message
    that lists the step's collectives in sorted order, comma-separated."""
    cfg, cl, buckets, ws = _setup(trace, 4, allgatherv=("bruck",))
    cl = dataclasses.replace(_cluster(LEAF_SPINE), compute="trace")
    ws = _world_size(trace, cl, 4, cfg, buckets)
    plan = _step_plan(ws, buckets, 0, "compressed", trace.primary_encoding, "compressed")
    forced = dataclasses.replace(cfg, path="collective")
    runner = _Runner(ws.topology, forced, 0.0, RunCache(ws.topology))
    with pytest.raises(ConfigError, match=r"not exact for allgatherv/bruck, allgatherv/ring on"):
        run_phases(runner, plan.phases)
