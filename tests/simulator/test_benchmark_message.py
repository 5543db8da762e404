"""benchmarks/simulator.py, message-level parts: one replay case with its CPU seconds, the
ring profile, and ``--only message``."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "simulator.py"


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("simulator_benchmark_message", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_replay_case_reports_wall_and_cpu_seconds_or_null_with_the_reason(bench, tmp_path):
    trace = bench.vgg_trace(2, tmp_path)
    out: dict = {}
    reasons: dict = {}
    lines: list[str] = []
    bench.replay_case(trace, "message_p8_2steps_s", 8, "message", 60.0, out, reasons, lines.append)
    assert out["message_p8_2steps_s"] > 0 and out["message_p8_2steps_cpu_s"] > 0
    assert reasons == {} and "path=message" in lines[0]
    bench.replay_case(
        trace, "message_p64_2steps_s", 64, "message", 1e-3, out, reasons, lines.append
    )
    assert out["message_p64_2steps_s"] is None and out["message_p64_2steps_cpu_s"] is None
    assert "did not finish" in reasons["message_p64_2steps_s"]
    assert reasons["message_p64_2steps_cpu_s"] == reasons["message_p64_2steps_s"]


def test_the_ring_profile_names_the_workload_and_its_rates(bench, capsys):
    bench.profile_ring(8, top=3)
    out = capsys.readouterr().out
    assert "ring allgatherv P=8, 2 runs:" in out and "events/s" in out
    assert "function calls" in out


@pytest.mark.slow
def test_only_message_prints_the_event_rate_and_the_message_replay():
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--only", "message", "--json", "--quick", "--steps", "2"]
        + ["--limit-s", "30"],
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    )
    out = json.loads(done.stdout)
    assert 0 < out["event_rate_ratio"] < 10
    assert out["network_events_per_s"] / out["bare_simpy_events_per_s"] == out["event_rate_ratio"]
    key = "message_p64_2steps_s"
    assert (out[key] > 0 and out["message_p64_2steps_cpu_s"] > 0) or key in out["reasons"]
    assert "direct_agv_p16_s" not in out and "fast_p1024_2steps_s" not in out
