"""benchmarks/ddp_hook.py runs small and prints every row and key it documents."""

from __future__ import annotations

import json
import math

import pytest

from tests.repo_scripts import run_script

SCRIPT = "benchmarks/ddp_hook.py"

pytestmark = pytest.mark.distributed


@pytest.mark.slow
def test_benchmark_prints_every_variant_and_the_ratio():
    out = run_script(SCRIPT, "--json", "--rounds", "1", "--chunk", "3", "--warmup", "1")
    d = json.loads(out.stdout)
    rows = d["rows"]
    assert set(rows) == {
        "plain",
        "fp16",
        "powersgd_r1",
        "powersgd_r2",
        "powersgd_r4",
        "variance_fast",
        "variance_exact",
    }
    for name, row in rows.items():
        assert row["step_s"] > 0 and row["steps"] == 3 and 0 <= row["test_accuracy"] <= 1, name
    numel = rows["plain"]["bytes_per_step"] / 4
    assert rows["fp16"]["bytes_per_step"] == 2 * numel
    # PowerSGD's bytes grow with the rank and stay below plain DDP's.
    r1, r2, r4 = (rows[f"powersgd_r{r}"]["bytes_per_step"] for r in (1, 2, 4))
    assert 0 < r1 < r2 < r4 < 4 * numel
    assert 0 < rows["variance_fast"]["bytes_per_step"] < 4 * numel
    for name in ("variance_fast", "variance_exact"):
        row = rows[name]
        # The padded messages hold the payload; the breakdown is per step and positive.
        assert 0 < row["payload_bytes_per_step"] < row["bytes_per_step"], name
        assert row["fallback_rounds_per_step"] >= 0, name
        assert all(row[k] > 0 for k in ("sqsum_s", "compress_s", "comm_s", "decode_s")), name
    assert all(row["cpu_s"] > 0 for row in rows.values())
    assert math.isclose(
        d["variance_cpu_ratio"], rows["variance_fast"]["cpu_s"] / rows["plain"]["cpu_s"]
    )
    ratio = rows["variance_fast"]["step_s"] / rows["plain"]["step_s"]
    assert math.isclose(d["variance_step_ratio"], ratio)
    assert d["second_backward"] is False and d["target_variance_step_ratio"] == 1.5


def test_bad_arguments_are_one_line_and_exit_2():
    out = run_script(
        SCRIPT, "--rounds", "1", "--chunk", "2", "--warmup", "5", timeout=120, check=False
    )
    assert out.returncode == 2
    assert out.stderr.strip().splitlines() == [
        "error: --warmup must be below --rounds × --chunk (no step left to time)"
    ]
