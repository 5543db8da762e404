"""benchmarks/host_sharing.py: real gloo ranks in lock step, every documented key, the two
rules' factors by hand, and bad input as one line and exit 2."""

from __future__ import annotations

import json
import math

import pytest

from tests.repo_scripts import load_script, run_script

SCRIPT = "benchmarks/host_sharing.py"
rows_of = load_script(SCRIPT).rows_of

pytestmark = pytest.mark.distributed


def test_rows_by_hand():
    # 3 ranks on 2 cores: a step of 25 ms with 10 ms of work, 5 ms without: factor 2.0,
    # the fullest core's 2 (nearer) against fair sharing's 1.5
    (row,) = rows_of(3, 2, [(0.0, 0.005), (0.010, 0.025)])
    assert row["measured_factor"] == pytest.approx(2.0, rel=1e-12)
    assert (row["fullest_core"], row["fair"], row["nearer"]) == (2.0, 1.5, "fullest-core")
    (row,) = rows_of(3, 2, [(0.0, 0.005), (0.010, 0.021)])  # factor 1.6: nearer fair
    assert row["nearer"] == "fair"
    (row,) = rows_of(4, 2, [(0.0, 0.005), (0.010, 0.025)])  # the rules agree at 2
    assert (row["fullest_core"], row["fair"], row["nearer"]) == (2.0, 2.0, "both")
    (row,) = rows_of(1, 2, [(0.0, 0.001), (0.002, 0.003)])  # fewer ranks than cores
    assert (row["fullest_core"], row["fair"], row["nearer"]) == (1.0, 1.0, "both")


def test_benchmark_runs_ranks_in_lock_step_and_prints_every_key():
    argv = ["--ranks", "1,3", "--work", "2ms", "--steps", "3", "--warmup", "0", "--json"]
    d = json.loads(run_script(SCRIPT, *argv, timeout=300).stdout)
    cores = d["cores"]
    assert [(r["ranks"], r["work_s"]) for r in d["rows"]] == [(1, 0.002), (3, 0.002)]
    for r in d["rows"]:
        # every rank spins 2 ms of its own CPU time a step, so no step is shorter than that
        assert r["step_s"] >= 0.002 and r["sync_s"] > 0
        assert r["measured_factor"] == pytest.approx((r["step_s"] - r["sync_s"]) / 0.002)
        assert r["fullest_core"] == max(1.0, float(math.ceil(r["ranks"] / cores)))
        assert r["fair"] == max(1.0, r["ranks"] / cores)
    differ = [r for r in d["rows"] if r["fullest_core"] != r["fair"]]
    assert sum(d["nearer"].values()) == len(differ)


@pytest.mark.parametrize(
    "argv",
    [["--work", "0s"], ["--work", "soon"], ["--ranks", "x"], ["--ranks", "0"], ["--steps", "1"]],
)
def test_bad_input_is_one_line_and_exit_2(argv):
    out = run_script(SCRIPT, *argv, timeout=120, check=False)
    assert out.returncode == 2, out.stderr
    assert len(out.stderr.strip().splitlines()) == 1 and "Traceback" not in out.stderr
