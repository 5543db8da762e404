"""benchmarks/compression.py runs as a script and prints every figure it documents."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "compression.py"


def _run(*args: str) -> dict:
    out = subprocess.run(
        [sys.executable, str(SCRIPT), "--json", *args], capture_output=True, text=True, check=True
    )
    return json.loads(out.stdout)


@pytest.mark.slow
def test_overhead_figures_small():
    d = _run("--rounds", "1", "--workers", "2", "--batch", "4")
    for key in (
        "fast_overhead_ratio",
        "exact_overhead_ratio",
        "codec_fraction",
        "fast_sized_overhead_ratio",
        "fast_float32_overhead_ratio",
    ):
        assert math.isfinite(d[key]) and d[key] > 0, key
        assert key in d["min_time_ratios"]
    assert d["fast_sq_dtype"] in ("float32", "bfloat16")
    assert d["workers"] == 2 and d["batch_size_per_worker"] == 4 and d["layers"] == 12
    assert 0 < d["density"] <= 1
    assert d["targets"] == {
        "fast_overhead_ratio": 1.3,
        "exact_overhead_ratio": 3.0,
        "codec_fraction": 0.10,
    }


@pytest.mark.slow
def test_gap_small():
    d = _run(
        "--gap", "--train-steps", "2", "--workers", "2", "--batch", "4", "--sq-dtype", "float32"
    )
    assert d["sq_dtype"] == "float32"
    rows = {r["name"]: r for r in d["step_0"]}
    assert rows["net.0.weight"]["kind"] == "Conv2d" and rows["net.0.weight"]["rel_error"] > 0
    assert rows["net.6.weight"]["kind"] == "Linear" and rows["net.6.weight"]["rel_error"] < 1e-5
