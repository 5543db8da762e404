"""The CLI shows log records only at the level -v asks for, libraries' own loggers included."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "tests" / "data" / "sample_trace"

SWEEP = f"""
[sweep]
traces = ["{SAMPLE.as_posix()}"]
cluster = "10GbE"
world_sizes = "8"
processes = 1

[simulate]
max_steps = 2
"""


def _sweep(tmp_path: Path, *extra: str) -> subprocess.CompletedProcess:
    spec = tmp_path / "sweep.toml"
    spec.write_text(SWEEP, encoding="utf-8")
    out = tmp_path / f"out{len(extra)}"
    argv = ["-m", "vgcsim", *extra, "sweep", str(spec), "-o", str(out)]
    return subprocess.run(
        [sys.executable, *argv], capture_output=True, text=True, cwd=tmp_path, timeout=300
    )


@pytest.mark.slow
def test_dask_scheduler_chatter_stays_hidden_without_verbose(tmp_path):
    quiet = _sweep(tmp_path)
    assert quiet.returncode == 0, quiet.stderr
    assert "INFO" not in quiet.stderr, quiet.stderr
    loud = _sweep(tmp_path, "-v")
    assert loud.returncode == 0, loud.stderr
    assert "INFO distributed" in loud.stderr
