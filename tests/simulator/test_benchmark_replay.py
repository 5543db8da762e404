"""benchmarks/simulator.py, replay and sweep parts: the 64 sweep cases and the replay profile."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from vgcsim.simulator.sweep import expand_factors

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "simulator.py"


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("simulator_benchmark_replay", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_sweep_case_is_64_jobs_over_16_clusters_and_4_world_sizes(bench, tmp_path):
    jobs = expand_factors(bench.sweep64(tmp_path / "vgg").sweep)
    assert len(jobs) == 64
    assert len({j.cluster.name for j in jobs}) == 16
    assert sorted({j.world_size for j in jobs}) == [8, 16, 32, 64]
    assert len({(j.cluster.link.bandwidth_Bps, j.cluster.link.latency_s) for j in jobs}) == 16


def test_the_replay_profile_names_the_fast_path_and_its_counts(bench, capsys):
    bench.profile_replay(16, steps=3, top=3)
    out = capsys.readouterr().out
    assert "replay 16 ranks x 3 steps, path=auto" in out
    assert "'compressed': {'message': 0, 'collective': 3" in out
    assert "function calls" in out
