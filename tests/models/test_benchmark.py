"""benchmarks/models.py runs as a script and reports its evaluation count."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from vgcsim.models.collectives import COLLECTIVES

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "models.py"


def test_benchmark_script_small():
    out = subprocess.run(
        [sys.executable, str(SCRIPT), "--steps", "20", "--max-p", "64", "--repeats", "1", "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    result = json.loads(out.stdout)
    assert result["evaluations"] == 20 * 6 * len(COLLECTIVES)
    assert result["world_sizes"] == [2, 4, 8, 16, 32, 64]
    assert result["seconds"] > 0 and result["checksum_s"] > 0
