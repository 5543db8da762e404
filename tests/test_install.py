"""What ``pip install vgcsim`` gives: one import name, a core without torch, a clear extra."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "tests" / "data" / "sample_trace"

# Make torch, scikit-learn and mlxtend unimportable in the child, as on a core install.
BLOCK = "import sys\nfor m in ('torch', 'sklearn', 'mlxtend'): sys.modules[m] = None\n"


def _cli(tmp_path: Path, *argv: str) -> subprocess.CompletedProcess:
    code = BLOCK + f"from vgcsim.cli import main\nraise SystemExit(main({list(argv)!r}))\n"
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, timeout=300
    )


def test_core_dependencies_leave_out_the_training_stack():
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    core = " ".join(meta["dependencies"]).lower()
    assert not any(name in core for name in ("torch", "scikit-learn", "mlxtend"))
    train = " ".join(meta["optional-dependencies"]["train"]).lower()
    assert all(name in train for name in ("torch", "scikit-learn", "mlxtend"))


def test_predict_runs_without_torch(tmp_path):
    out = tmp_path / "p"
    done = _cli(
        tmp_path, "predict", str(SAMPLE), "--cluster", "10GbE", "--world-sizes", "2,8",
        "-o", str(out),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert (out / "results.parquet").is_file()


def test_record_without_torch_names_the_extra(tmp_path):
    done = _cli(tmp_path, "record", "--steps", "1", "-o", str(tmp_path / "run"))
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert "vgcsim[train]" in lines[0] and "torch" in lines[0]
    assert not (tmp_path / "run").exists()
