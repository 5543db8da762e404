"""benchmarks/real_ddp.py without namespaces: the engine that prices each setup, and a kept
run that is not one."""

from __future__ import annotations

import subprocess
import sys

import pytest
from repo_scripts import ROOT, load_script

from tests.conftest import write_hook_trace


@pytest.fixture(scope="module")
def real_ddp():
    return load_script("benchmarks/real_ddp.py")


def _cluster(path, hosts: str = ""):
    path.write_text(
        f'name = "c"\ncompute = "trace"\n{hosts}[topology]\nkind = "star"\n'
        '[link]\npreset = "10GbE"\n'
    )
    return path


@pytest.mark.slow  # six vgcsim commands in fresh interpreters
def test_both_engines_price_a_hook_trace_alike_with_and_without_shared_hosts(real_ddp, tmp_path):
    """The hook trace's rank 1 computes 10 × rank 0. Alone on their hosts, two ranks taking
    turns on one core (the fullest core's rule: rank 1's step waits for rank 0's turn too, so
    the step grows by rank 0's share, not by rank 1's), and the same under fair sharing (every
    local time stretched by 2, the slowest rank's too): predict and simulate agree on the
    variance hook's step."""
    trace = write_hook_trace(tmp_path)
    plain = _cluster(tmp_path / "plain.toml")
    shared = _cluster(tmp_path / "shared.toml", "ranks_per_host = 2\nhost_cores = 1\n")
    fair = _cluster(
        tmp_path / "fair.toml", 'ranks_per_host = 2\nhost_cores = 1\nhost_sharing = "fair"\n'
    )

    def step_s(cluster, engine):
        return real_ddp.predict_step_s(trace, cluster, 2, "variance", tmp_path, engine)

    alone = step_s(plain, "predict")
    assert step_s(plain, "simulate") == pytest.approx(alone, rel=0.02)
    turns = step_s(shared, "predict")
    assert alone < turns < 1.5 * alone
    assert step_s(shared, "simulate") == pytest.approx(turns, rel=0.02)
    stretched = step_s(fair, "predict")
    assert stretched > 1.5 * alone
    assert step_s(fair, "simulate") == pytest.approx(stretched, rel=0.02)


def test_a_folder_without_a_kept_run_is_one_line_and_exit_2(tmp_path):
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "real_ddp.py"), "--from", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2
    assert "holds no real_ddp.json" in done.stderr and len(done.stderr.splitlines()) == 1


def test_trace_drift_sets_each_traced_job_against_its_untraced_run(real_ddp, tmp_path):
    """CPU per step of the traced jobs against the same jobs measured at the trace's setup:
    the traced CNN's 10 ms against a measured 12.5 ms is +25 %; a pair with a file missing
    (the MLP's variance run) is left out."""
    import json

    def job(name: str, cpu_s: float) -> None:
        (tmp_path / f"{name}.json").write_text(json.dumps({"median_cpu_s": cpu_s}))

    job("trace-cnn-ddp", 0.010)
    job("run-unshaped-P2-cnn-ddp", 0.0125)
    job("trace-cnn-variance", 0.020)
    job("run-unshaped-P2-cnn-variance", 0.015)
    job("trace-mlp-variance", 0.004)
    job("run-1gbit-P2-mlp-variance", 0.004)  # another setup: not the trace's
    drift = real_ddp.trace_drift(tmp_path, "unshaped:2")
    assert set(drift) == {"cnn/ddp", "cnn/variance"}
    assert drift["cnn/ddp"] == {
        "traced_cpu_s": 0.010,
        "measured_cpu_s": 0.0125,
        "change": pytest.approx(0.25),
    }
    assert drift["cnn/variance"]["change"] == pytest.approx(-0.25)


def test_the_work_before_each_calibrated_operation_is_one_ranks_traced_compute(real_ddp, tmp_path):
    """``--cal-busy trace`` calibrates with the plain job's median ``rank_compute_s`` (one
    rank's forward + backward), not the steps table's ``compute_s`` (a sum over the ranks),
    and names one cluster file per setup and model."""
    import glob

    import pandas as pd

    trace = write_hook_trace(tmp_path)
    # the hook's steps column: the mean over ranks of each rank's compute (1 and 10 ms × (1 +
    # step) here), beside compute_s, the sum over the ranks
    ranks = pd.read_parquet(f"{trace}/ranks/part-000000.parquet")
    mean = ranks.groupby("step")["compute_s"].mean()
    for part in glob.glob(f"{trace}/steps/*.parquet"):
        steps = pd.read_parquet(part)
        steps["rank_compute_s"] = steps["step"].map(mean)
        steps["compute_s"] = steps["step"].map(ranks.groupby("step")["compute_s"].sum())
        steps.to_parquet(part)
    per_rank = float(mean.median())
    assert real_ddp.traced_compute_s(trace) == pytest.approx(per_rank, rel=1e-12)
    assert real_ddp.cal_name("1gbit", 3, "cnn") == "cal-1gbit-P3-cnn"
    assert real_ddp.cal_name("1gbit", 3, None) == "cal-1gbit-P3"


@pytest.mark.slow  # two vgcsim commands in fresh interpreters
def test_a_setup_is_priced_with_the_trace_setups_anchor(real_ddp, tmp_path):
    """``predict_step_s(..., anchor=)`` passes ``--anchor``: the step moves by the offset the
    API finds for the same trace and anchor (the benchmark's default; ``--no-anchor`` drops
    it)."""
    from vgcsim import api

    trace = write_hook_trace(tmp_path)
    own, other = _cluster(tmp_path / "own.toml"), _cluster(tmp_path / "other.toml")
    other.write_text(other.read_text().replace('"10GbE"', '"1GbE"'))
    plain = real_ddp.predict_step_s(trace, other, 4, "variance", tmp_path)
    anchored = real_ddp.predict_step_s(trace, other, 4, "variance", tmp_path, anchor=own)
    offset = api.predict(trace, other, [4], compute="trace", anchor=own).attrs["options"]
    assert anchored - plain == pytest.approx(offset["anchor"]["offset_s"], rel=1e-9, abs=1e-12)
    assert offset["anchor"]["offset_s"] != 0


def test_a_grid_without_the_trace_setup_is_refused_before_anything_runs(real_ddp, capsys):
    """``--anchor`` (the default) prices the trace setup's own cluster, so the grid must hold
    that setup: one line and exit 2, before any namespace or job."""
    assert real_ddp.main(["--rates", "1gbit", "--world-sizes", "2,4"]) == 2
    err = capsys.readouterr().err
    assert err == (
        "real_ddp: --anchor prices the trace setup unshaped:2: add it to --rates and "
        "--world-sizes, or pass --no-anchor\n"
    )
