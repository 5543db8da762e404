"""A full disk during ``vgcsim record``: one line and exit 2, the trace a valid prefix with a
stop reason (never left ``running``), nothing half-written; after space is freed,
``--resume`` completes it to the uninterrupted run.

The disk is a 1.2 MB tmpfs mounted in the test's temporary folder, so the test needs root
(CI runs as root) and is skipped otherwise.
"""

from __future__ import annotations

import os
import shutil
import subprocess

import pandas as pd
import pytest

from vgcsim.cli import main
from vgcsim.core.config import apply_overrides
from vgcsim.traces.io import RESERVE_FILE, read_header
from vgcsim.traces.training.record import RecordConfig, record
from vgcsim.traces.validate import validate_trace

SETTINGS = [
    "data.name=synthetic",
    "model.name=mlp",
    "model.width=0.5",
    "workers=2",
    "batch_size=8",
    "steps=40",
    "eval_every=5",
    "eval_samples=100",
    "chunk_steps=2",
]

pytestmark = pytest.mark.skipif(
    not hasattr(os, "geteuid") or os.geteuid() != 0 or shutil.which("mount") is None,
    reason="mounting a small tmpfs needs root",
)


@pytest.fixture
def small_disk(tmp_path):
    """A 1.2 MB tmpfs at tmp_path/disk, unmounted whatever happens."""
    disk = tmp_path / "disk"
    disk.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1200k", "tmpfs", str(disk)], check=True)
    try:
        yield disk
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)


@pytest.mark.slow
def test_full_disk_stops_with_a_valid_prefix_then_resumes(tmp_path, small_disk, capsys):
    run = small_disk / "run"
    args = [a for s in SETTINGS for a in ("--set", s)]
    assert main(["record", "-q", "-o", str(run), *args]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert "no space left on device" in err and f"vgcsim record --resume {run}" in err

    header = read_header(run)
    assert header["status"] == "stopped"
    assert "no space left on device" in header["stop_reason"]
    trace = validate_trace(run)
    assert 0 < trace.steps_count < 40 and header["steps_recorded"] == trace.steps_count
    assert set(trace.payloads["step"]) == set(range(trace.steps_count))
    assert not list(run.rglob("*.tmp")) and not (run / RESERVE_FILE).exists()

    # Free space (a larger disk), then continue: the same trace as an uninterrupted run.
    subprocess.run(["mount", "-o", "remount,size=64m", str(small_disk)], check=True)
    assert main(["record", "--resume", str(run), "-q"]) == 0
    full = record(apply_overrides(RecordConfig(), SETTINGS), tmp_path / "full")
    a, b = validate_trace(full), validate_trace(run)
    for table in ("payloads", "steps", "evals"):
        x, y = getattr(a, table), getattr(b, table)
        cols = [c for c in x.columns if not c.endswith("_s")]
        pd.testing.assert_frame_equal(x[cols], y[cols], check_exact=True, obj=table)
    assert b.status == "complete" and b.header["resumes"][0]["from_step"] <= trace.steps_count
