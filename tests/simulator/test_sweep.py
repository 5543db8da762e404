"""Sweeps: factor expansion, running jobs into one table, and the CLI."""

from __future__ import annotations

import pytest

from simulator.replay import SimulateConfig
from simulator.sweep import SweepConfig, SweepFile, expand_factors, load_sweep, run_sweep
from traces.errors import ConfigError, UnknownNameError
from traces.results import read_results
from traces.synth import SynthConfig, synth_trace
from vgcsim.cli import main


@pytest.fixture(scope="module")
def traces(tmp_path_factory):
    root = tmp_path_factory.mktemp("sweep")
    a = synth_trace(SynthConfig(layers="vgg_like", workers=2, steps=3, density=0.01), root / "a")
    b = synth_trace(SynthConfig(layers="vgg_like", workers=2, steps=3, density=0.1), root / "b")
    return [str(a), str(b)]


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


def test_run_sweep_returns_one_table(traces):
    sweep = SweepFile(
        SweepConfig(traces=tuple(traces), world_sizes=(2, 4), latencies=("1us", "100us")),
        SimulateConfig(max_steps=2),
    )
    table, jobs = run_sweep(sweep, workers=1)
    assert len(jobs) == 8 and len(table) == 8 * 4  # dense fp32/bf16/fp16 + compressed
    slow = table[table["cluster"].str.contains("100 us")]
    quick = table[table["cluster"].str.contains("1 us")]
    assert slow["step_s"].sum() > quick["step_s"].sum()


def test_cli_sweep_on_a_process_pool(traces, tmp_path):
    cfg = tmp_path / "sweep.toml"
    cfg.write_text(
        f'[sweep]\ntraces = {traces!r}\ncluster = "10GbE"\nworld_sizes = [2, 3]\n'
        'bandwidths = ["1Gbps", "10Gbps"]\n\n[simulate]\nmax_steps = 2\n'.replace("'", '"')
    )
    assert load_sweep(cfg).simulate.max_steps == 2
    out = tmp_path / "out"
    assert main(["sweep", str(cfg), "-o", str(out), "--workers", "2"]) == 0
    df, header = read_results(out)
    assert len(df) == 2 * 2 * 2 * 4  # traces x P x bandwidths x (3 dense + compressed)
    assert header["options"]["summary"]["jobs"] == 8
    assert main(["sweep", str(cfg), "-o", str(out), "--set", "sweep.colour=red"]) == 2


def test_sweep_compute_overrides_the_cluster(traces):
    jobs = expand_factors(SweepConfig(traces=tuple(traces), compute="trace"))
    assert {j.cluster.compute for j in jobs} == {"trace"}
    assert {j.cluster.compute for j in expand_factors(SweepConfig(traces=tuple(traces)))} == {
        "model"
    }
    with pytest.raises(ConfigError):
        SweepConfig(traces=tuple(traces), compute="guess")
