"""Per-rank local times of a hook-written trace (``vgcsim.traces.inputs.hook_rank_times``):
each recorded rank keeps its own row, ranks beyond the recording draw measured rows with a
seeded generator, the step's host overhead is the whole step minus forward+backward and the
optimizer, and the step waits for the slowest rank."""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd
import pytest

from tests.conftest import write_hook_trace
from vgcsim.cli import main
from vgcsim.core.cluster import get_cluster
from vgcsim.models.predict import PredictOptions, predict_trace
from vgcsim.traces.inputs import hook_rank_times, step_inputs
from vgcsim.traces.io import read_trace


def test_recorded_ranks_keep_their_own_rows_and_the_overhead_is_added(tmp_path):
    t = read_trace(write_hook_trace(tmp_path))
    steps = t.steps["step"].to_numpy()
    w = int(t.workers)
    times = hook_rank_times(t, steps, w)
    expected = (1.0 + steps[:, None]) * 1e-3 * np.where(np.arange(w) == 1, 10.0, 1.0)
    # 2 ms of host overhead on every step (the first step's NaN wall takes its rank's median)
    np.testing.assert_allclose(times["compute"], expected + 2e-3, rtol=1e-12)
    np.testing.assert_allclose(times["overhead"], 2e-3, rtol=1e-9)
    np.testing.assert_allclose(times["codec"], 0.5e-3, rtol=1e-12)  # compress + encode
    np.testing.assert_allclose(times["decode"], 0.5e-3, rtol=1e-12)  # per payload: / W


def test_without_a_wall_time_there_is_no_overhead(tmp_path):
    t = read_trace(write_hook_trace(tmp_path, wall=False))
    times = hook_rank_times(t, t.steps["step"].to_numpy(), int(t.workers))
    assert (times["overhead"] == 0).all()


def test_ranks_beyond_the_recording_draw_measured_rows_seeded(tmp_path):
    t = read_trace(write_hook_trace(tmp_path))
    steps = t.steps["step"].to_numpy()
    w = int(t.workers)
    measured = set(np.round(hook_rank_times(t, steps, w)["compute"].ravel(), 12))
    a = hook_rank_times(t, steps, 4 * w, seed=3)["compute"]
    b = hook_rank_times(t, steps, 4 * w, seed=3)["compute"]
    c = hook_rank_times(t, steps, 4 * w, seed=4)["compute"]
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)
    assert set(np.round(a.ravel(), 12)) <= measured
    # the recorded ranks keep their own rows at P > W
    np.testing.assert_array_equal(a[:, :w], hook_rank_times(t, steps, w)["compute"])


def test_the_step_waits_for_the_slowest_rank(tmp_path):
    """Rank 1 computes 10x longer: every prediction's compute is rank 1's, not the mean."""
    t = read_trace(write_hook_trace(tmp_path))
    cluster = dataclasses.replace(get_cluster("10GbE"), compute="trace")
    si = step_inputs(t, cluster, int(t.workers))
    steps = t.steps["step"].to_numpy()
    slowest = (1.0 + steps) * 1e-2 + 2e-3
    np.testing.assert_allclose(si.compute_s.max(axis=1), slowest, rtol=1e-12)
    opts = PredictOptions(world_sizes=(int(t.workers),), per_step=True, allgatherv=("ring",))
    df = predict_trace(t, cluster, opts)
    dense = (df["method"] == "dense") & (df["encoding"] == "fp32")
    rows = df[(df["step"] >= 0) & dense].sort_values("step")
    np.testing.assert_allclose(rows["compute_s"].to_numpy(), slowest, rtol=1e-12)
    assert "host overhead" in si.time_sources["compute_s"]


@pytest.mark.parametrize("p", [1, 2, 5])
def test_predict_and_simulate_see_the_same_per_rank_times(tmp_path, p):
    run = write_hook_trace(tmp_path)
    cluster = tmp_path / "c.toml"
    cluster.write_text(
        'name = "c"\ncompute = "trace"\n[topology]\nkind = "star"\n[link]\npreset = "10GbE"\n'
    )
    frames = {}
    for cmd in ("predict", "simulate"):
        argv = [cmd, str(run), "--cluster", str(cluster), "--world-sizes", str(p)]
        argv += ["--allgatherv", "ring", "--compute", "trace", "-o", str(tmp_path / cmd)]
        assert main(argv) == 0
        frames[cmd] = pd.read_parquet(tmp_path / cmd / "results.parquet")
    key = ["method", "encoding", "collective"]
    a, b = (f[f["step"] == -1].set_index(key)["step_s"] for f in frames.values())
    common = a.index.intersection(b.index)
    assert len(common) >= 4
    np.testing.assert_allclose(a[common], b[common], rtol=1e-6)


def test_ranks_that_share_a_core_take_turns_on_it(tmp_path):
    """4 recorded ranks on one host of 2 cores: ranks 0 and 2 on core 0, ranks 1 and 3 on
    core 1. Rank 1 computes 10x longer than the others, so core 1 is done after rank 1's time
    plus rank 3's, and that core, not twice rank 1's time, sets the step. Fair sharing (and
    equal ranks) keep the factor."""
    t = read_trace(write_hook_trace(tmp_path))
    w = int(t.workers)
    assert w == 4
    steps = t.steps["step"].to_numpy()
    fast, slow = (1.0 + steps) * 1e-3 + 2e-3, (1.0 + steps) * 1e-2 + 2e-3
    base = dataclasses.replace(get_cluster("10GbE"), compute="trace")
    shared = dataclasses.replace(base, ranks_per_host=4, host_cores=2)
    si = step_inputs(t, shared, w)
    for r in (0, 2):
        np.testing.assert_allclose(si.compute_s[:, r], 2 * fast, rtol=1e-12)
    for r in (1, 3):
        np.testing.assert_allclose(si.compute_s[:, r], slow + fast, rtol=1e-12)
    # the codec's times are equal on every rank: the factor, exactly
    np.testing.assert_array_equal(si.codec_s, 2 * step_inputs(t, base, w).codec_s)
    fair = step_inputs(t, dataclasses.replace(shared, host_sharing="fair"), w)
    np.testing.assert_allclose(fair.compute_s.max(axis=1), 2 * slow, rtol=1e-12)
    opts = PredictOptions(world_sizes=(w,), per_step=True, allgatherv=("ring",))
    df = predict_trace(t, shared, opts)
    dense = (df["method"] == "dense") & (df["encoding"] == "fp32") & (df["step"] >= 0)
    rows = df[dense].sort_values("step")
    np.testing.assert_allclose(rows["compute_s"].to_numpy(), slow + fast, rtol=1e-12)


@pytest.mark.parametrize(
    ("hosts", "times", "expected"),
    [
        # 3 ranks on 2 cores: core 0 holds ranks 0 and 2 (1 + 3 = 4 ms), core 1 rank 1 alone,
        # charged the fullest core's factor 2 (2 x 2 = 4 ms)
        ((4, 2), [1.0, 2.0, 3.0], [4.0, 4.0, 4.0]),
        # 4 ranks on 2 cores: cores {0, 2} and {1, 3}
        ((4, 2), [1.0, 2.0, 3.0, 4.0], [4.0, 6.0, 4.0, 6.0]),
        # 2 hosts of 2 ranks on 1 core each: ranks {0, 1} and {2, 3}
        ((2, 1), [1.0, 2.0, 3.0, 4.0], [3.0, 3.0, 7.0, 7.0]),
        # 5 ranks on 2 cores: core 0 holds 0, 2, 4 (9 ms, the fullest); core 1 holds 1, 3
        # (6 ms, charged 3/2 of it: 9 ms)
        ((8, 2), [1.0, 2.0, 3.0, 4.0, 5.0], [9.0, 9.0, 9.0, 9.0, 9.0]),
    ],
)
def test_core_shared_by_hand(hosts, times, expected):
    from vgcsim.core.cluster import host_share
    from vgcsim.traces.inputs import core_shared

    c = dataclasses.replace(get_cluster("1GbE"), ranks_per_host=hosts[0], host_cores=hosts[1])
    p = len(times)
    a = np.array([times, [2.0] * p])  # a second step with equal ranks
    out = core_shared(a, c, p, host_share(c, p))
    np.testing.assert_allclose(out[0], expected, rtol=1e-12)
    np.testing.assert_array_equal(out[1], 2.0 * host_share(c, p))  # equal: the factor
    # fair sharing, several threads per rank, or one time for every rank: the factor
    for other in (
        dataclasses.replace(c, host_sharing="fair"),
        dataclasses.replace(c, threads_per_rank=2),
    ):
        f = host_share(other, p)
        np.testing.assert_array_equal(core_shared(a, other, p, f), a * f)
    np.testing.assert_array_equal(core_shared(a[:, 0], c, p, 2.0), a[:, 0] * 2.0)


def test_core_cohorts_number_every_core_once_across_hosts():
    from vgcsim.traces.inputs import core_cohorts

    c = dataclasses.replace(get_cluster("1GbE"), ranks_per_host=4, host_cores=2)
    # host 0 holds ranks 0-3 on its cores 0 and 1; host 1 ranks 4-7 on its cores 2 and 3
    np.testing.assert_array_equal(core_cohorts(c, 8), [0, 1, 0, 1, 2, 3, 2, 3])
    three = dataclasses.replace(c, ranks_per_host=5, host_cores=3)
    np.testing.assert_array_equal(core_cohorts(three, 7), [0, 1, 2, 0, 1, 3, 4])
