"""benchmarks/replay_ab.py: the same-window A/B of the message-level replay against a git
revision."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "replay_ab.py"


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=600
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["no-such-revision-xyz"], "no such git revision: no-such-revision-xyz"),
        (["HEAD", "--instruction-steps", "12"], "--instruction-steps must be two integers"),
        (["HEAD", "--instruction-steps", "5,2"], "need 0 < S1 < S2"),
        (["HEAD", "--rounds", "0"], "need 0 < S1 < S2 and --ranks, --steps, --rounds >= 1"),
    ],
)
def test_bad_arguments_get_one_line_and_exit_2(args, message):
    done = run(*args)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [done.stderr.strip()]
    assert message in done.stderr and "Traceback" not in done.stderr


@pytest.mark.slow
@pytest.mark.skipif(
    shutil.which("git") is None or not (ROOT / ".git").exists(), reason="needs a git checkout"
)
def test_the_working_tree_against_head_gives_equal_tables_and_timed_runs_per_side():
    before = {p.name for p in ROOT.iterdir()}
    done = run(
        "HEAD", "--ranks", "4", "--steps", "3", "--rounds", "2", "--no-instructions", "--json"
    )
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["tables_equal"] is True
    assert out["instructions_per_step"] is None
    for key in ("wall_s", "cpu_s"):
        for side in ("this", "base"):
            runs = out[key][side]["runs"]
            assert len(runs) == 2 and all(t > 0 for t in runs)
            assert out[key][side]["best"] == min(runs)
    # the temporary worktree is gone again
    listed = subprocess.run(
        ["git", "-C", str(ROOT), "worktree", "list"], capture_output=True, text=True, check=True
    ).stdout
    assert "replay-ab-" not in listed
    # and the installs left no build folder in the checkout
    assert {p.name for p in ROOT.iterdir()} <= before
