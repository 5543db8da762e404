"""benchmarks/simulator.py: the JSON report's keys, the cap on slow cases, SimGrid agreement."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "simulator.py"
KEYS = (
    "event_rate_ratio",
    "direct_agv_p16_s",
    "direct_agv_p64_s",
    "simgrid_direct_agv_p16_s",
    "simgrid_direct_agv_p64_s",
)


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("simulator_benchmark", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_capped_stops_a_slow_case_and_says_why(bench):
    def slow():
        time.sleep(5)
        return 1

    wall, value, why = bench.capped(0.2, slow)
    assert wall is None and value is None and "did not finish within 0.2 s" in why
    wall, value, why = bench.capped(5.0, lambda: 42)
    assert value == 42 and why == "" and 0 <= wall < 5


def test_direct_allgatherv_case_equals_the_fair_share_bound(bench):
    """alpha + max_i max((P-1) m_i, M - m_i) / beta on a non-blocking star (rendezvous, t = 0)."""
    from vgcsim.core.cluster import load_cluster
    from vgcsim.simulator.topology import build_topology

    p = 6
    sizes = bench.direct_agv_sizes(p)
    route = build_topology(load_cluster("10GbE"), p).route(0, 1)
    bound = (
        route.latency_s
        + max(max((p - 1) * m, sizes.sum() - m) for m in sizes) / route.bandwidth_Bps
    )
    assert bench.direct_agv_ours(p) == pytest.approx(bound, rel=1e-12)


def test_simgrid_agrees_on_the_direct_case_when_installed(bench):
    if not bench.simgrid_available("/usr/bin/python3"):
        pytest.skip("SimGrid's Python binding is not importable by /usr/bin/python3")
    for p in (4, 8):
        sg = bench.direct_agv_simgrid(p, "/usr/bin/python3", 60.0)
        assert sg["finish_s"] == pytest.approx(bench.direct_agv_ours(p), rel=1e-9)


@pytest.mark.slow
def test_json_report_has_every_key_and_a_reason_for_each_null():
    # a 0.2 s cap stops most cases: what is checked is that each one is a figure or a reason
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--json", "--quick", "--steps", "3", "--limit-s", "0.2"],
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    )
    out = json.loads(done.stdout)
    for key in KEYS:
        assert key in out
    assert "leafspine_p256_2steps_s" in out and "fast_p4096_3steps_s" in out
    assert 0 < out["event_rate_ratio"] < 10
    assert out["direct_agv_p16_s"] > 0
    for key, value in out.items():
        if key.endswith("_s") and value is None and not key.endswith("finish_s"):
            assert out["reasons"][key]
    if out["simgrid_direct_agv_p16_s"] is None:
        assert "skipped: simgrid not installed" in done.stderr
    else:
        assert out["simgrid_direct_agv_p16_finish_s"] == pytest.approx(
            out["direct_agv_p16_finish_s"], rel=1e-9
        )


def test_a_collective_s_peak_memory_is_its_own_not_the_benchmark_s(bench):
    # the benchmark process holds 1 GiB when it starts the child; a child that starts from
    # an exec keeps only its own address space's peak (a small P = 4 collective: < 512 MiB)
    held = bytearray(1 << 30)
    held[:: 1 << 12] = b"\1" * len(held[:: 1 << 12])  # touch every page: resident
    wall, peak, code = bench.collective_run("allgatherv/ring", 4, 60.0)
    assert code == 0 and wall > 0
    assert 0 < peak < 512 * 2**20
    assert bench._high_water_bytes(-1) == 0.0  # no such process: nothing read
