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


@pytest.mark.slow  # four vgcsim commands in fresh interpreters
def test_both_engines_price_a_hook_trace_alike_with_and_without_shared_hosts(real_ddp, tmp_path):
    """The hook trace's rank 1 computes 10 × rank 0. Alone on their hosts, and two ranks on one
    core (every local time stretched by 2, the slowest rank's too), predict and simulate agree
    on the variance hook's step."""
    trace = write_hook_trace(tmp_path)
    plain = _cluster(tmp_path / "plain.toml")
    shared = _cluster(tmp_path / "shared.toml", "ranks_per_host = 2\nhost_cores = 1\n")

    def step_s(cluster, engine):
        return real_ddp.predict_step_s(trace, cluster, 2, "variance", tmp_path, engine)

    alone = step_s(plain, "predict")
    assert step_s(plain, "simulate") == pytest.approx(alone, rel=0.02)
    predicted = step_s(shared, "predict")
    assert predicted > 1.5 * alone
    assert step_s(shared, "simulate") == pytest.approx(predicted, rel=0.02)


def test_a_folder_without_a_kept_run_is_one_line_and_exit_2(tmp_path):
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "real_ddp.py"), "--from", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2
    assert "holds no real_ddp.json" in done.stderr and len(done.stderr.splitlines()) == 1
