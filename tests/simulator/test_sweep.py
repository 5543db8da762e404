"""Sweeps: factor expansion, one job's rows, the trace cache and the sweep file."""

from __future__ import annotations

import pandas as pd
import pytest

from vgcsim.core.errors import ConfigError, UnknownNameError
from vgcsim.simulator.replay import SimulateConfig
from vgcsim.simulator.sweep import SweepConfig, expand_factors, load_sweep


@pytest.fixture(scope="module")
def traces(sweep_traces):
    return sweep_traces


def test_expand_factors_is_the_cartesian_product(traces):
    cfg = SweepConfig(
        traces=tuple(traces),
        world_sizes=(2, 4, 8),
        bandwidths=("10Gbps", "100Gbps"),
        latencies=("1us", 5e-6),
        topologies=({"kind": "star"}, {"kind": "ring"}),
    )
    jobs = expand_factors(cfg)
    assert len(jobs) == 2 * 3 * 2 * 2 * 2
    assert len({(j.trace, j.cluster.name, j.world_size) for j in jobs}) == len(jobs)
    ring = [j for j in jobs if j.cluster.topology["kind"] == "ring"]
    assert len(ring) == len(jobs) // 2
    fast = [j for j in jobs if j.cluster.link.bandwidth_Bps == pytest.approx(12.5e9)]
    assert len(fast) == len(jobs) // 2


def test_bad_factors_fail_before_running(traces):
    with pytest.raises(UnknownNameError):
        expand_factors(SweepConfig(traces=tuple(traces), topologies=({"kind": "moebius"},)))
    with pytest.raises(ConfigError):
        expand_factors(SweepConfig(traces=tuple(traces), bandwidths=("fast",)))
    with pytest.raises(ConfigError, match="traces"):
        SweepConfig()


def test_a_sweep_table_is_refused_field_by_field_in_one_line(traces):
    """Each field's refusal names the field and what it takes; a timeout below a second is
    a timeout (0.5 s), zero is not."""
    given = tuple(traces)
    cases = [
        ({}, "sweep.traces: give at least one trace run directory"),
        (
            {"traces": given, "compute": "measured"},
            "unknown sweep.compute 'measured'; valid: model, trace (or leave it out: the "
            "cluster's own)",
        ),
        ({"traces": given, "processes": -1}, "sweep.processes must be >= 0 (0 = one per CPU)"),
    ]
    cases += [
        (
            {"traces": given, "connect_timeout_s": bad},
            f"sweep.connect_timeout_s must be a finite number of seconds > 0, got {bad!r}",
        )
        for bad in (0, -1.0, float("nan"), float("inf"))
    ]
    for fields, message in cases:
        with pytest.raises(ConfigError) as info:
            SweepConfig(**fields)
        assert str(info.value) == message
    with pytest.raises(UnknownNameError):
        SweepConfig(traces=given, compute="measured")
    assert SweepConfig(traces=given, connect_timeout_s=0.5).connect_timeout_s == 0.5
    assert SweepConfig(traces=given).connect_timeout_s == 5.0


def test_sweep_compute_overrides_the_cluster(traces):
    jobs = expand_factors(SweepConfig(traces=tuple(traces), compute="trace"))
    assert {j.cluster.compute for j in jobs} == {"trace"}
    assert {j.cluster.compute for j in expand_factors(SweepConfig(traces=tuple(traces)))} == {
        "model"
    }
    with pytest.raises(ConfigError):
        SweepConfig(traces=tuple(traces), compute="guess")


def test_trace_cache_reads_a_trace_again_when_its_files_change(traces):
    import os

    from vgcsim.simulator.sweep import cached_trace

    first = cached_trace(traces[0])
    assert cached_trace(traces[0]) is first  # read once while the files stay as they are
    header = os.path.join(traces[0], "header.json")
    st = os.stat(header)
    os.utime(header, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    again = cached_trace(traces[0])
    assert again is not first
    assert again.header == first.header


@pytest.mark.parametrize("given", ["run directory", "header.json"])
@pytest.mark.parametrize("part", ["header.json", "steps", "payloads"])
def test_trace_cache_watches_each_part_of_the_run_directory(traces, given, part):
    """A trace recorded again at the same path changes its header, or its steps or payloads
    folders (each chunk is renamed into its folder, which moves the folder's modification
    time): any one of them alone makes the cache read it again, whether the trace is named
    by its run directory or by its header.json."""
    import os

    from vgcsim.simulator.sweep import cached_trace

    path = traces[1] if given == "run directory" else os.path.join(traces[1], "header.json")
    first = cached_trace(path)
    assert cached_trace(path) is first
    target = os.path.join(traces[1], part)
    st = os.stat(target)
    os.utime(target, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    again = cached_trace(path)
    assert again is not first
    assert again.header == first.header


def test_run_job_rows_are_vgcsim_simulates_rows_with_the_jobs_factors(traces):
    """In this process (a pool or Dask worker runs the same call): a job's rows are what
    ``vgcsim.api.simulate`` gives for its trace, cluster variant, world size and simulate
    settings, throughput = P x batch per worker / step time (the trace header's batch), and
    the factor columns hold the job's own values, the topology as JSON with sorted keys."""
    import json

    from vgcsim import api
    from vgcsim.simulator.sweep import run_job

    topo = {"kind": "leaf_spine", "hosts_per_leaf": 2, "oversubscription": 2}  # keys unsorted
    cfg = SweepConfig(
        traces=(traces[0],), world_sizes=(4,), bandwidths=("2Gbps",), latencies=("3us",),
        topologies=(topo,),
    )  # fmt: skip
    (job,) = expand_factors(cfg)
    sim = SimulateConfig(max_steps=2, dense_encodings=("fp32",), overlap="none")
    rows = run_job(job, sim)
    reference = api.simulate(
        traces[0], job.cluster, [4], max_steps=2, dense_encodings=("fp32",), overlap="none"
    )
    assert len(rows) == 2  # dense fp32 + compressed: the settings reached the replay
    pd.testing.assert_frame_equal(rows[reference.columns], reference)
    batch = 32  # the synthetic trace's batch_size_per_worker
    assert rows["throughput_samples_per_s"].tolist() == pytest.approx(
        (4 * batch / rows["step_s"]).tolist(), rel=1e-12
    )
    assert set(rows["trace_path"]) == {traces[0]}
    assert set(rows["bandwidth_Bps"]) == {2e9 / 8} and set(rows["latency_s"]) == {3e-6}
    spec = rows["topology_spec"].iloc[0]
    assert json.loads(spec) == dict(job.cluster.topology)
    assert list(json.loads(spec)) == sorted(job.cluster.topology)  # canonical key order
    assert spec.startswith('{"hosts_per_leaf": 2')


def test_load_sweep_reads_world_sizes_as_a_list_or_in_the_cli_syntax(traces, tmp_path):
    """``world_sizes`` in a sweep file: a TOML list of integers, or a string in the
    ``--world-sizes`` syntax ("8, 2, 4" → the sorted sizes 2, 4, 8, as the CLI reads it)."""
    path = tmp_path / "sweep.toml"
    quoted = "[" + ", ".join(f'"{t}"' for t in traces) + "]"
    path.write_text(f'[sweep]\ntraces = {quoted}\nworld_sizes = "8, 2, 4"\n')
    assert load_sweep(path).sweep.world_sizes == (2, 4, 8)
    path.write_text(f"[sweep]\ntraces = {quoted}\nworld_sizes = [16, 32]\n")
    assert load_sweep(path).sweep.world_sizes == (16, 32)


def test_load_sweep_without_a_sweep_table_names_the_file(tmp_path):
    path = tmp_path / "bare.toml"
    path.write_text("[simulate]\nmax_steps = 2\n")
    with pytest.raises(ConfigError) as err:
        load_sweep(path)
    assert str(err.value) == f"sweep file {path} needs a [sweep] table"
    path.write_text('sweep = "all"\n')  # a [sweep] that is not a table
    with pytest.raises(ConfigError, match=r"needs a \[sweep\] table$"):
        load_sweep(path)


def _graph_star(p: int, half_latency: str) -> dict:
    """p hosts on one switch node, each cable a 10GbE link (its framing) of half the latency
    (host -> switch -> host = the 10GbE preset's α): the closed form's star, as a graph."""
    hosts = [f"h{i}" for i in range(p)]
    links = [{"a": h, "b": "sw", "preset": "10GbE", "latency": half_latency} for h in hosts]
    return {"kind": "graph", "hosts": hosts, "links": links}


def test_a_bandwidth_or_latency_factor_moves_a_graphs_links_as_predict_moves(traces):
    """On a graph topology predict prices ``cluster.link`` and simulate the graph's own links:
    a sweep factor scales both, so the closed form and the simulation of a ring allreduce on
    a 4-host graph star agree at every factor value as they agree at the base, and the
    ``topology_spec`` column keeps the graph as given."""
    import json

    from vgcsim import api
    from vgcsim.core.cluster import load_cluster
    from vgcsim.simulator.sweep import run_job

    alpha = load_cluster("10GbE").link.latency_s
    graph = _graph_star(4, f"{alpha / 2}s")
    cfg = SweepConfig(
        traces=(traces[0],),
        world_sizes=(4,),
        bandwidths=("1Gbps", "10Gbps", "40Gbps"),
        latencies=("2us", "50us"),
        topologies=(graph,),
    )
    jobs = expand_factors(cfg)
    assert len(jobs) == 6
    seen = set()
    for job in jobs:
        model = api.collective(job.cluster, "allreduce/ring", [4e6] * 4, engine="model")
        sim = api.collective(job.cluster, "allreduce/ring", [4e6] * 4, engine="simulate")
        assert sim == pytest.approx(model, rel=1e-9), job.cluster.name
        seen.add(round(model, 12))
    assert len(seen) == 6  # every factor value moved both
    row = run_job(jobs[0], SimulateConfig(max_steps=1))
    assert set(row["topology_spec"]) == {json.dumps(graph, sort_keys=True)}


def test_a_latency_factor_on_a_graph_needs_a_base_latency(traces, tmp_path):
    base = tmp_path / "zero.toml"
    base.write_text('base = "10GbE"\n[link]\npreset = "10GbE"\nlatency = "0s"\n')
    graph = _graph_star(2, "1us")
    cfg = SweepConfig(
        traces=(traces[0],), cluster=str(base), latencies=("5us",), topologies=(graph,)
    )
    with pytest.raises(ConfigError, match="latency 0"):
        expand_factors(cfg)
