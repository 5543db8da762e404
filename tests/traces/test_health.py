"""A trace a user can trust: an interrupted recording is told from a live one, a diverged run
is caught, and both are said wherever results come from them."""

from __future__ import annotations

import math
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pandas as pd
import pytest

from vgcsim.cli import main
from vgcsim.commands.demo import DEMO_TRACES
from vgcsim.traces.health import (
    CHANCE_SIGMAS,
    EXPLODE_FACTOR,
    MIN_STEPS_FOR_CHANCE,
    caveats,
    divergence,
    trace_divergence,
    trace_state,
)
from vgcsim.traces.io import read_header, read_trace

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "tests" / "data" / "sample_trace"


def _steps(losses: list[float]) -> pd.DataFrame:
    return pd.DataFrame({"step": range(len(losses)), "loss": losses})


def _evals(step: int, acc: float) -> pd.DataFrame:
    return pd.DataFrame({"step": [step], "test_acc": [acc]})


# -- the divergence rules, by hand ----------------------------------------------------------


def test_a_falling_loss_above_chance_is_healthy():
    losses = [2.3 * 0.97**t for t in range(40)]
    assert divergence(_steps(losses), _evals(39, 0.6), num_classes=10, test_samples=500) is None


def test_a_loss_tenfold_its_start_has_exploded_from_the_first_step_above_the_bound():
    # 40 steps: the windows are 4 steps; the start is step 0's loss (the initial model)
    losses = [2.0, 2.0, 19.0, 25.0, *[30.0] * 36]
    verdict = divergence(_steps(losses), pd.DataFrame(columns=["step", "test_acc"]))
    assert verdict["rules"] == ["exploded"] and verdict["step"] == 3  # 25 > 10 × 2
    assert verdict["loss_start"] == 2.0 and verdict["loss_final"] == 30.0
    assert "loss exploded from 2 to 30" in verdict["reason"]


def test_the_explosion_bound_is_strict():
    start = 2.0
    at_bound = [start, *[EXPLODE_FACTOR * start] * 39]
    assert divergence(_steps(at_bound), _evals(39, 0.9), num_classes=10) is None
    above = [start, *[math.nextafter(EXPLODE_FACTOR * start, math.inf)] * 39]
    assert divergence(_steps(above), _evals(39, 0.9), num_classes=10)["rules"] == ["exploded"]


def test_one_loud_step_is_not_an_explosion():
    # the last window's median ignores one spike (40 steps: windows of 4)
    losses = [2.3 * 0.97**t for t in range(40)]
    losses[-2] = 1e9
    assert divergence(_steps(losses), _evals(39, 0.7), num_classes=10) is None


def test_accuracy_at_chance_without_progress_is_divergence():
    n, classes = 1000, 10
    ceiling = 0.1 + CHANCE_SIGMAS * math.sqrt(0.1 * 0.9 / n)  # 0.12846
    flat = [2.3] * MIN_STEPS_FOR_CHANCE
    last = MIN_STEPS_FOR_CHANCE - 1
    at = divergence(_steps(flat), _evals(last, ceiling - 1e-9), num_classes=classes, test_samples=n)
    assert at["rules"] == ["at_chance"] and at["chance"] == 0.1
    assert "test accuracy 12.8 % is at chance (1/10 = 10.0 %, 1000 samples)" in at["reason"]
    above = _evals(last, ceiling + 1e-9)
    assert divergence(_steps(flat), above, num_classes=classes, test_samples=n) is None


def test_chance_accuracy_is_no_verdict_for_a_short_run_or_a_falling_loss():
    short = [2.3] * (MIN_STEPS_FOR_CHANCE - 1)
    early = _evals(MIN_STEPS_FOR_CHANCE - 2, 0.1)
    assert divergence(_steps(short), early, num_classes=10, test_samples=1000) is None
    falling = [2.3 - 0.01 * t for t in range(MIN_STEPS_FOR_CHANCE)]
    late = _evals(MIN_STEPS_FOR_CHANCE - 1, 0.1)
    assert divergence(_steps(falling), late, num_classes=10, test_samples=1000) is None


def test_a_non_finite_stop_is_divergence():
    reason = "NaN or Inf in the loss or gradients at step 7"
    verdict = divergence(_steps([2.3] * 7), _evals(6, 0.5), num_classes=10, stop_reason=reason)
    assert verdict["rules"] == ["non_finite"] and reason in verdict["reason"]


@pytest.mark.parametrize("method", ["dense", "variance", "strom", "qsgd"])
def test_the_committed_demo_traces_did_not_diverge(method):
    trace = read_trace(DEMO_TRACES / method)
    assert trace_divergence(trace) is None and caveats(trace) == []


# -- an interrupted recording: a real writer process, killed -----------------------------------

WRITER = """
import sys, time
from vgcsim.traces.io import TraceWriter, read_trace

sample, out = sys.argv[1], sys.argv[2]
t = read_trace(sample)
filled = ("schema_version", "kind", "status", "stop_reason", "chunk_steps", "steps_recorded",
          "finished_utc", "created_utc")
w = TraceWriter(out, {k: v for k, v in t.header.items() if k not in filled}, chunk_steps=1)
for s in range(3):
    p = t.payloads[t.payloads["step"] == s]
    w.add_payload_rows({c: p[c].to_numpy() for c in p.columns})
    w.add_step(t.steps[t.steps["step"] == s].iloc[0].to_dict())
print("ready", flush=True)
time.sleep(600)
"""


@pytest.fixture
def live_writer(tmp_path):
    run = tmp_path / "run"
    proc = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(WRITER), str(SAMPLE), str(run)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout.readline().strip() == "ready"
        yield run, proc
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=60)
        proc.stdout.close()


@pytest.mark.slow
def test_a_killed_writer_leaves_an_interrupted_trace_that_every_stage_names(
    live_writer, tmp_path, capsys
):
    run, proc = live_writer
    assert read_header(run)["status"] == "running"
    assert trace_state(read_trace(run)) == "running"
    assert main(["trace", "info", str(run)]) == 0
    assert "status     running (a live recorder is writing it)" in capsys.readouterr().out

    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=60)
    assert read_header(run)["status"] == "running"  # the header cannot know
    trace = read_trace(run)
    assert trace_state(trace) == "interrupted"

    assert main(["trace", "info", str(run)]) == 0
    shown = f"interrupted (no live writer); resume with `vgcsim record --resume {run}`"
    assert f"status     {shown}" in capsys.readouterr().out
    assert main(["trace", "validate", str(run)]) == 0
    assert shown in capsys.readouterr().out

    out = tmp_path / "p"
    argv = ["predict", str(run), "--cluster", "10GbE", "--world-sizes", "2,4", "-o", str(out)]
    assert main(argv) == 0
    warned = capsys.readouterr().err.strip().splitlines()
    assert warned == [
        f"vgcsim predict: warning: {run} is a partial trace, interrupted (no live writer) "
        f"after 3 of 100 steps; resume with `vgcsim record --resume {run}`"
    ]
    assert main(["report", str(out), "-o", str(tmp_path / "r")]) == 0
    assert capsys.readouterr().err.strip() == warned[0].replace("predict", "report", 1)
    assert "Caution: " in (tmp_path / "r" / "index.html").read_text(encoding="utf-8")


def test_a_complete_trace_has_no_caveats(capsys, tmp_path):
    out = tmp_path / "p"
    argv = ["predict", str(SAMPLE), "--cluster", "10GbE", "--world-sizes", "2", "-o", str(out)]
    assert main(argv) == 0
    assert "warning" not in capsys.readouterr().err


# -- a diverged recording ----------------------------------------------------------------------


@pytest.mark.slow
def test_a_diverged_recording_is_recorded_shown_and_warned_without_numpy_noise(tmp_path):
    pytest.importorskip("torch")  # the training extra
    run = tmp_path / "run"
    argv = [
        "record", "--set", "optimizer.lr=1e6", "--set", "data.name=digits",
        "--steps", str(MIN_STEPS_FOR_CHANCE), "--workers", "2", "--quiet", "-o", str(run),
    ]  # fmt: skip
    done = subprocess.run(
        [sys.executable, "-m", "vgcsim", *argv],
        capture_output=True, text=True, cwd=tmp_path, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    # one warning line, no numpy RuntimeWarnings
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("vgcsim record: warning: training diverged")
    header = read_header(run)
    assert header["status"] == "complete"
    verdict = header["divergence"]
    assert verdict["rules"] == ["exploded", "at_chance"]
    assert verdict["loss_final"] > EXPLODE_FACTOR * verdict["loss_start"]

    from vgcsim.core.provenance import cpu_model

    info = subprocess.run(
        [sys.executable, "-m", "vgcsim", "trace", "info", str(run)],
        capture_output=True, text=True, timeout=300,
    ).stdout  # fmt: skip
    assert f"DIVERGED   {verdict['reason']}" in info
    assert "model      small_cnn (" in info and " on digits (" in info
    assert "optimizer  adam, lr 1e+06" in info
    assert "reading    after_send=reset, below_floor=keep, variance_scale=batch_mean" in info
    assert f"cpu        {cpu_model()}" in info
    valid = subprocess.run(
        [sys.executable, "-m", "vgcsim", "trace", "validate", str(run)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert valid.returncode == 0 and f"DIVERGED: {verdict['reason']}" in valid.stdout
