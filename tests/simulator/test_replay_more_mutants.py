"""The runner's path choice (:meth:`_Runner._run`, :meth:`_Runner._rounds`) against the engine.

The message level (:func:`run_message`) is the exact reference every faster path must equal:

* eager semantics with a ``"dst"`` verdict (several senders into one rank) needs the fast
  path's run-time overlap check; on a Bruck allgatherv with staggered ready times the check
  finds overlapping arrivals and the unchecked recurrence is wrong there, so ``auto`` must
  give the message-level finish times on another path, and a forced ``collective`` path must
  refuse with the documented message;
* ``mode="fifo"`` must reach the message level as fifo (fair sharing gives other times);
* a ring allreduce on an oversubscribed leaf-spine with staggered ready times makes the
  round level refuse: ``auto`` counts each refusal and falls back to the message level, a
  forced ``round`` path refuses with the documented message, and a forced ``round`` path
  with ``mode="fifo"`` refuses with its own message.
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

sys.path.insert(0, str(Path(__file__).parent))
import vgcsim.simulator.replay as replay_module  # noqa: E402
from simhelpers import cluster as _cluster  # noqa: E402
from simhelpers import run_phases  # noqa: E402
from vgcsim.simulator.collectives import get_schedule, unit_sizes  # noqa: E402
from vgcsim.simulator.engine import (  # noqa: E402
    Phase,
    RunCache,
    contention_free,
    run_fast,
    run_message,
)
from vgcsim.simulator.replay import SimulateConfig, _Block, _Runner, simulate_trace  # noqa: E402
from vgcsim.simulator.topology import build_topology  # noqa: E402
from vgcsim.traces.io import read_trace  # noqa: E402
from vgcsim.traces.synth import SynthConfig, synth_trace  # noqa: E402

from vgcsim.core.errors import ConfigError  # noqa: E402

LEAF_SPINE = {
    "kind": "leaf_spine",
    "hosts_per_leaf": 2,
    "spines": 1,
    "oversubscription": 4.0,
    "placement": "spread",
}


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
    unchecked = run_fast([ph], topo, semantics="eager", check_overlap=False)
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
    assert run_fast([ph], topo, semantics="eager", check_overlap=True) is None
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
