"""Processor sharing of a host's cores by its ranks' local work
(``vgcsim.simulator.hosts.host_clock``): hand-worked clocks, an event-by-event reference, and
the replay of a hook-written trace whose ranks compute unevenly."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import write_hook_trace
from vgcsim.cli import main
from vgcsim.core.cluster import get_cluster, host_share
from vgcsim.simulator.hosts import host_clock
from vgcsim.simulator.replay import SimulateConfig, simulate_trace
from vgcsim.traces.io import read_trace
from vgcsim.traces.replay import step_inputs


def _cluster(ranks_per_host=4, host_cores=2, threads_per_rank=1):
    return dataclasses.replace(
        get_cluster("1GbE"),
        ranks_per_host=ranks_per_host,
        host_cores=host_cores,
        threads_per_rank=threads_per_rank,
    )


def reference_finish_s(work_s, ranks_per_host, host_cores, threads_per_rank):
    """Each rank's finish under egalitarian processor sharing, event by event: all start at
    0; while n ranks of a host are busy each moves at 1 / max(1, n·T/C) of its own pace."""
    work_s = [float(w) for w in work_s]
    finish = [0.0] * len(work_s)
    for first in range(0, len(work_s), ranks_per_host):
        left = {i: work_s[i] for i in range(first, min(first + ranks_per_host, len(work_s)))}
        left = {i: w for i, w in left.items() if w > 0}
        now = 0.0
        while left:
            pace = 1.0 / max(1.0, len(left) * threads_per_rank / host_cores)
            step = min(left.values())
            now += step / pace
            for i in list(left):
                left[i] -= step
                if left[i] <= 1e-15 * max(work_s):
                    finish[i] = now
                    del left[i]
    return np.array(finish)


def test_four_ranks_on_two_cores_by_hand():
    """Works 10, 10, 10, 2 s on 4 ranks sharing 2 cores: all move at half pace until the
    short one is done (2 s of work, t = 4 s), then three share 2 cores at 2/3 pace: the
    others end at 4 + 8 × 1.5 = 16 s (the uniform stretch would say 20 s)."""
    c = _cluster()
    f = host_share(c, 4)
    assert f == 2.0
    work = np.array([[10.0, 10.0, 10.0, 2.0]]) * f  # as the step inputs give it
    clock = host_clock(c, work)
    np.testing.assert_allclose(clock(work), [[16.0, 16.0, 16.0, 4.0]], rtol=1e-15)
    # a point of the long ranks' work: 6 s of it is done at 4 + 4 × 1.5 = 10 s
    np.testing.assert_allclose(clock(np.array([[6.0, 6.0, 6.0, 1.0]]) * f), [[10, 10, 10, 2]])
    # positions with a bucket axis keep their shape
    assert clock(np.stack([work, work / 2], axis=1)).shape == (1, 2, 4)


def test_threads_per_rank_count_against_the_cores():
    """2 ranks of 2 threads each on 2 cores: f = 2 while both run, 1 once one is done.
    Works 4 and 2 s: the short one ends at 4 s, the long one at 4 + 2 = 6 s."""
    c = _cluster(ranks_per_host=2, host_cores=2, threads_per_rank=2)
    work = np.array([[4.0, 2.0]]) * host_share(c, 2)
    np.testing.assert_allclose(host_clock(c, work)(work), [[6.0, 4.0]], rtol=1e-15)


def test_equal_work_on_a_host_keeps_the_uniform_stretch_bit_for_bit():
    c = _cluster()
    rng = np.random.default_rng(0)
    work = np.repeat(rng.uniform(0.1, 1.0, (5, 1)), 8, axis=1)  # 2 full hosts, equal work
    points = work[:, None, :] * np.array([0.25, 0.5, 1.0])[None, :, None]
    out = host_clock(c, work)(points)
    assert np.array_equal(out, points)


def test_a_last_host_with_fewer_ranks_shares_among_those_only():
    """P = 6 with 4 ranks per host on 2 cores: the second host holds 2 ranks on 2 cores and
    does not share at all, though the step inputs stretched everyone by the fullest host's 2."""
    c = _cluster()
    work = np.full((1, 6), 5.0) * host_share(c, 6)
    np.testing.assert_allclose(host_clock(c, work)(work), [[10, 10, 10, 10, 5, 5]], rtol=1e-15)


def test_no_sharing_gives_no_clock():
    assert host_clock(get_cluster("1GbE"), np.ones((2, 4))) is None  # host_cores = 0
    assert host_clock(_cluster(ranks_per_host=2, host_cores=2), np.ones((2, 4))) is None


@settings(max_examples=60, deadline=None)
@given(
    works=st.lists(st.floats(0.001, 10.0), min_size=1, max_size=9),
    ranks_per_host=st.integers(1, 5),
    host_cores=st.integers(1, 4),
    threads=st.integers(1, 3),
)
def test_each_rank_ends_when_the_event_by_event_reference_says(
    works, ranks_per_host, host_cores, threads
):
    c = _cluster(ranks_per_host, host_cores, threads)
    p = len(works)
    f = host_share(c, p)
    work = np.array([works]) * f
    clock = host_clock(c, work)
    expected = reference_finish_s(works, min(ranks_per_host, p), host_cores, threads)
    got = work[0] if clock is None else clock(work)[0]
    np.testing.assert_allclose(got, expected, rtol=1e-9)
    # never later than the uniform stretch, never earlier than the work alone
    assert (got <= work[0] * (1 + 1e-12)).all() and (got >= np.array(works) * (1 - 1e-12)).all()


def test_a_hook_trace_whose_ranks_compute_unevenly_is_replayed_under_processor_sharing(
    tmp_path,
):
    """The hook trace's rank 1 computes 10 × rank 0. Both ranks on one core: they share it
    until rank 0's work w0 is done (at 2 w0), then rank 1 runs alone, ending at w0 + w1 —
    not at 2 w1 as the uniform stretch (and the closed form, which keeps it) has it."""
    trace = read_trace(write_hook_trace(tmp_path))
    base = dataclasses.replace(get_cluster("10GbE"), compute="trace")
    shared = dataclasses.replace(base, ranks_per_host=2, host_cores=1)
    si = step_inputs(trace, shared, 2)  # stretched by f = 2
    work = si.compute_s + si.variance_s + si.codec_s  # [T, 2] each
    decode = si.decode()
    assert work.shape == decode.shape == (len(si.steps), 2)
    cfg = SimulateConfig(per_step=True, allgatherv=("ring",), overlap="none")
    frame = simulate_trace(trace, shared, (2,), cfg)[0]
    rows = frame[(frame.step >= 0) & (frame.method == "compressed")].sort_values("step")
    # step − exposed exchange − optimizer = the last rank's local work and decode
    local = (rows.step_s - rows.comm_s - rows.optimizer_s).to_numpy()
    w0, w1 = work[:, 0] / 2, work[:, 1] / 2  # unstretched
    assert (w1 > w0).all()
    end = np.stack([2 * w0, w0 + w1], axis=1)
    expected = (end + decode).max(axis=1)
    np.testing.assert_allclose(local, expected[: len(local)], rtol=1e-9)
    assert (local < (work + decode).max(axis=1)[: len(local)]).all()  # the uniform stretch
    # the compute column is each rank's compute as its host ran it
    stretch = end / (work / 2)
    np.testing.assert_allclose(
        rows.compute_s.to_numpy(), (si.compute_s / 2 * stretch).mean(axis=1)[: len(rows)]
    )


def test_the_timeline_draws_each_rank_s_compute_as_its_shared_host_ran_it(tmp_path):
    """Step 1 of the hook trace: compute 4 ms on rank 0 and 22 ms on rank 1 (with the 2 ms
    host overhead), both ranks on one core, the dense fp32 step (no cast). Rank 0 ends at
    2 × 4 = 8 ms, rank 1 at 4 + 22 = 26 ms; rank 1's forward pass (a third of its compute,
    7.33 ms) ends at 8 + 3.33 = 11.33 ms."""
    run = write_hook_trace(tmp_path)
    cluster = tmp_path / "c.toml"
    cluster.write_text(
        'name = "c"\ncompute = "trace"\nranks_per_host = 2\nhost_cores = 1\n'
        '[topology]\nkind = "star"\n[link]\npreset = "10GbE"\n'
    )
    out = tmp_path / "sim"
    argv = ["simulate", str(run), "--cluster", str(cluster), "--world-sizes", "2"]
    argv += ["--allgatherv", "ring", "--compute", "trace", "--timeline", "1", "-o", str(out)]
    assert main(argv) == 0
    events = json.loads((out / "timeline.json").read_text())["traceEvents"]
    ends_ms = {
        (e["tid"], e["name"]): (e["ts"] + e["dur"]) / 1e3
        for e in events
        if e.get("cat") == "dense" and e.get("name") in ("forward", "backward")
    }
    assert ends_ms[(0, "backward")] == pytest.approx(8.0, rel=1e-12)
    assert ends_ms[(1, "backward")] == pytest.approx(26.0, rel=1e-12)
    assert ends_ms[(1, "forward")] == pytest.approx(8.0 + 22.0 / 3 - 4.0, rel=1e-12)
