"""``vgcsim record --resume``: a recording killed at a random point (a real SIGKILL) and then
resumed equals an uninterrupted run in every column but the wall-clock seconds; what cannot
be resumed is refused in one line."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from vgcsim.cli import main
from vgcsim.core.config import apply_overrides
from vgcsim.traces.io import CHECKPOINT_DIR, RESERVE_FILE, read_trace
from vgcsim.traces.training.record import RecordConfig, record
from vgcsim.traces.validate import validate_trace

# processes that record, are killed and resume: the slow set (they run in make test and CI)
pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]

#: small, fast and stateful: evals fall inside chunks and on their last step
BASE = [
    "data.name=synthetic",
    "model.name=mlp",
    "model.width=0.25",
    "workers=2",
    "batch_size=8",
    "steps=60",
    "eval_every=4",
    "eval_samples=100",
    "chunk_steps=3",
]
#: the variance compressor (r and v per worker) under Adam + cosine; QSGD's stochastic
#: rounding (the compression generator) under momentum SGD with a step schedule; PowerSGD's
#: state shared by the workers (warm-start Q, the generator of Q's seeds, the step count)
SETUPS = {
    "powersgd-adam": ["compressor.name=powersgd", "compressor.rank=2"],
    "variance-adam": ["compressor.name=variance", "compressor.alpha=1.5"],
    "qsgd-sgd-step": [
        "compressor.name=qsgd",
        "optimizer.name=momentum_sgd",
        "optimizer.lr=0.05",
        "optimizer.schedule=step",
        "optimizer.milestones=[20,40]",
        "optimizer.gamma=0.5",
    ],
}
#: header fields that say when, where and from which commit a run was written, not what it
#: computed (other commits may land between the two runs)
PROVENANCE_FIELDS = {
    "created_utc",
    "finished_utc",
    "status",
    "stop_reason",
    "resumes",
    "machine",
    "git_commit",
}


def _cli_args(overrides: list[str]) -> list[str]:
    return [a for o in overrides for a in ("--set", o)]


def assert_same_trace(a: Path, b: Path) -> None:
    """Every table column but the ``*_s`` seconds bit-identical, and the header too."""
    ta, tb = validate_trace(a), validate_trace(b)
    for table in ("payloads", "steps", "evals"):
        x, y = getattr(ta, table), getattr(tb, table)
        assert list(x.columns) == list(y.columns), table
        cols = [c for c in x.columns if not c.endswith("_s")]
        pd.testing.assert_frame_equal(x[cols], y[cols], check_exact=True, obj=table)
    ha = {k: v for k, v in ta.header.items() if k not in PROVENANCE_FIELDS}
    hb = {k: v for k, v in tb.header.items() if k not in PROVENANCE_FIELDS}
    assert ha == hb
    assert ta.status == tb.status == "complete"


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    """One uninterrupted run per setup, recorded in this process."""
    root = tmp_path_factory.mktemp("uninterrupted")
    return {
        name: record(apply_overrides(RecordConfig(), BASE + extra), root / name)
        for name, extra in SETUPS.items()
    }


def _kill_at_random_chunk(run: Path, overrides: list[str], rng: np.random.Generator) -> int:
    """Start ``vgcsim record`` in a child process and SIGKILL it once a randomly drawn chunk
    has landed (plus a random delay of up to 50 ms); return that chunk's index."""
    chunk = int(rng.integers(1, 7))
    delay_s = float(rng.uniform(0.0, 0.05))
    cmd = [sys.executable, "-m", "vgcsim", "record", "-q", "-o", str(run), *_cli_args(overrides)]
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    marker = run / "steps" / f"part-{chunk:06d}.parquet"
    try:
        deadline = time.monotonic() + 120
        while not marker.exists():
            assert proc.poll() is None, proc.stderr.read().decode()
            assert time.monotonic() < deadline, f"no chunk {chunk} in 120 s"
            time.sleep(0.005)
        time.sleep(delay_s)
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        proc.stderr.close()
    return chunk


@pytest.mark.slow
@pytest.mark.parametrize("setup", sorted(SETUPS))
def test_sigkill_then_resume_equals_uninterrupted(tmp_path, uninterrupted, setup, capsys):
    overrides = BASE + SETUPS[setup]
    run = tmp_path / "killed"
    rng = np.random.default_rng([14, len(setup)])
    chunk = _kill_at_random_chunk(run, overrides, rng)
    killed = read_trace(run)
    assert killed.status == "running", "the child finished before it was killed; retry"
    assert chunk + 1 <= killed.steps_count // 3 < 20
    assert main(["record", "--resume", str(run), "-q"]) == 0
    assert capsys.readouterr().err == ""
    assert_same_trace(uninterrupted[setup], run)
    resumed = read_trace(run).header["resumes"]
    assert len(resumed) == 1 and resumed[0]["from_step"] == killed.steps_count
    # a complete run keeps no resume state
    assert not (run / CHECKPOINT_DIR).exists() and not (run / RESERVE_FILE).exists()


@pytest.mark.slow
def test_resume_twice_and_from_a_run_with_no_checkpoint(tmp_path, uninterrupted):
    """Resuming a resumed run works; a run that never closed a chunk starts over."""
    first = apply_overrides(RecordConfig(), BASE + SETUPS["variance-adam"])
    run = record(first, tmp_path / "r")
    header = json.loads((run / "header.json").read_text())
    # Make it a run killed before any chunk closed: header running, no chunk, no checkpoint.
    for table in ("payloads", "steps", "evals"):
        for f in (run / table).iterdir():
            f.unlink()
    header.update(status="running", stop_reason=None)
    (run / "header.json").write_text(json.dumps(header))
    assert main(["record", "--resume", str(run), "-q"]) == 0
    assert_same_trace(uninterrupted["variance-adam"], run)
    assert read_trace(run).header["resumes"][0]["from_step"] == 0


#: QSGD's stochastic rounding draws from the compression generator at every step; a test
#: fraction of 0.9 leaves 120 of the synthetic set's 1200 samples for training, a shard of 60
#: for each of the 2 workers, 7 batches of 8: the sampler draws a new order from its
#: generators at steps 7, 14, 21, 28 and 35
RESHUFFLING = [
    *(o for o in BASE if not o.startswith("steps=")),
    "steps=36",
    "data.test_fraction=0.9",
    *SETUPS["qsgd-sgd-step"],
]


@pytest.fixture(scope="module")
def stopped_run(tmp_path_factory) -> Path:
    """A run stopped by SIGTERM in a child process (status stopped, a checkpoint kept), after
    the sampler's first reshuffle and before its next (``RESHUFFLING``: chunk 3 holds steps
    9-11, its checkpoint comes after the reshuffle at step 7)."""
    run = tmp_path_factory.mktemp("stopped") / "run"
    _record_until_sigterm(run, RESHUFFLING, chunk=3)
    assert read_trace(run).status == "stopped"
    return run


def _record_until_sigterm(run: Path, overrides: list[str], chunk: int) -> None:
    """``vgcsim record`` in a child process, stopped by SIGTERM once its steps chunk number
    ``chunk`` is on disk (the child exits 128 + SIGTERM)."""
    cmd = [sys.executable, "-m", "vgcsim", "record", "-q", "-o", str(run), *_cli_args(overrides)]
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        while not (run / "steps" / f"part-{chunk:06d}.parquet").exists():
            assert proc.poll() is None, proc.stderr.read().decode()
            time.sleep(0.005)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 128 + signal.SIGTERM
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stderr.close()


def _stopped_copy(stopped_run: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(stopped_run, tmp_path / "stopped"))


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--steps", "61"], "change the config"),
        (["--set", "optimizer.lr=0.1"], "change the config"),
        (["--overwrite"], "drop -o, --overwrite"),
        (["-o", "elsewhere"], "continues a run in place; drop -o"),  # not ignored
    ],
)
def test_resume_refuses_another_config(tmp_path, stopped_run, capsys, extra, message):
    run = _stopped_copy(stopped_run, tmp_path)
    before = (run / "header.json").read_bytes()
    assert main(["record", "--resume", str(run), "-q", *extra]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err and err.count("\n") == 1
    assert (run / "header.json").read_bytes() == before


@pytest.mark.slow
def test_resume_refuses_complete_runs(uninterrupted, capsys):
    complete = uninterrupted["variance-adam"]
    before = (complete / "header.json").read_bytes()
    assert main(["record", "--resume", str(complete), "-q"]) == 2
    assert "nothing to resume" in capsys.readouterr().err
    assert (complete / "header.json").read_bytes() == before


def test_resume_refuses_non_traces(tmp_path, capsys):
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "notes.txt").write_text("mine")
    assert main(["record", "--resume", str(plain), "-q"]) == 2
    err = capsys.readouterr().err
    assert "not a trace" in err and "Traceback" not in err
    assert sorted(p.name for p in plain.iterdir()) == ["notes.txt"]
    assert main(["record", "--resume", str(tmp_path / "absent"), "-q"]) == 2
    assert "not found" in capsys.readouterr().err


def test_resume_refuses_a_pickled_checkpoint(tmp_path, stopped_run, capsys):
    """The state file is read with weights_only=True: an arbitrary object is refused."""
    run = _stopped_copy(stopped_run, tmp_path)
    (state,) = (run / CHECKPOINT_DIR).iterdir()
    with open(state / "state.pt", "wb") as fh:
        torch.save({"model/0.weight": torch.zeros(1), "x": pd.Timestamp(0)}, fh)
    assert main(["record", "--resume", str(run), "-q"]) == 2
    err = capsys.readouterr().err
    assert "unreadable" in err and "Traceback" not in err
    assert read_trace(run).status == "stopped"


def test_resume_after_sigterm_equals_uninterrupted(tmp_path, stopped_run):
    """The open chunk a signal kept is recomputed from the last checkpoint. The run stopped
    after the sampler's first reshuffle and resumes before its next: the resumed run draws
    the next order and the rounding noise as the uninterrupted run did, which holds only if
    the sampler's and the compressor's generators were restored."""
    uninterrupted = record(apply_overrides(RecordConfig(), RESHUFFLING), tmp_path / "whole")
    run = _stopped_copy(stopped_run, tmp_path)
    kept = read_trace(run).steps_count
    assert main(["record", "--resume", str(run), "-q"]) == 0
    assert_same_trace(uninterrupted, run)
    (entry,) = read_trace(run).header["resumes"]
    assert entry["from_step"] == 3 * (entry["from_step"] // 3) <= kept
    assert 12 <= entry["from_step"] <= 35, "stopped after the last reshuffle; retry"


def test_resume_refuses_a_distributed_recording(tmp_path, stopped_run, capsys):
    run = _stopped_copy(stopped_run, tmp_path)
    header = json.loads((run / "header.json").read_text())
    header["distributed"] = {"backend": "gloo", "world_size": 2}
    (run / "header.json").write_text(json.dumps(header))
    assert main(["record", "--resume", str(run), "-q"]) == 2
    err = capsys.readouterr().err
    assert "torch.distributed" in err and "emulated recordings only" in err
    assert read_trace(run).status == "stopped"
