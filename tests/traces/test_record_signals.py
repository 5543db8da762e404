"""Stopping a recording: SIGINT, SIGTERM and SIGHUP sent to a real ``vgcsim record`` process
stop it cleanly (status ``stopped``, the open chunk kept, the signal in ``stop_reason``, one
line on stderr, exit 128 + signal number)."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

from vgcsim.traces.io import RESERVE_FILE, read_header
from vgcsim.traces.validate import validate_trace

REPO = Path(__file__).resolve().parents[2]

ARGS = [
    "--dataset", "synthetic", "--model", "mlp", "--steps", "100000",
    "--set", "model.width=0.25", "--set", "workers=2", "--set", "batch_size=8",
    "--set", "eval_every=0", "--set", "chunk_steps=1000",
]  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT])
def test_signal_stops_cleanly_and_keeps_the_open_chunk(tmp_path, signum):
    run = tmp_path / "run"
    # -v -q: no progress bar, but the loop logs "step N" every 10 steps on stderr.
    cmd = [sys.executable, "-m", "vgcsim", "-v", "record", "-q", "-o", str(run), *ARGS]
    proc = subprocess.Popen(
        cmd, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    try:
        # Wait until step 20 is done: every step so far sits in the open chunk (1000 steps).
        for line in proc.stderr:
            if "step 20 " in line:
                break
        else:
            pytest.fail(f"recording ended before step 20 (exit {proc.wait()})")
        proc.send_signal(signum)
        rc = proc.wait(timeout=60)
        err = proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stderr.close()
    name = signal.Signals(signum).name
    assert rc == 128 + signum
    lines = [x for x in err.splitlines() if not x.startswith("INFO")]
    assert lines == [
        f"vgcsim record: interrupted by {name}; {run} keeps every step recorded "
        f"(status stopped); continue it with: vgcsim record --resume {run}"
    ]
    trace = validate_trace(run)
    header = read_header(run)
    assert trace.status == "stopped" and header["stop_reason"] == f"interrupted by {name}"
    # No chunk of 1000 steps ever closed: every step kept is the open chunk's.
    assert trace.steps_count >= 21 and header["steps_recorded"] == trace.steps_count
    assert list(trace.steps["step"]) == list(range(trace.steps_count))
    assert set(trace.payloads["step"]) == set(range(trace.steps_count))
    assert not (run / RESERVE_FILE).exists()
    assert not list(run.rglob("*.tmp"))
