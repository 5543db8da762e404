"""Bad record settings are refused up front in one line (exit 2, no folder written): every
numeric setting finite and in range, seeds that fit a 64-bit generator, nets too large for
memory (with the estimate); an output folder named with a non-UTF-8 byte works."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from vgcsim.cli import main
from vgcsim.traces.validate import validate_trace

REPO = Path(__file__).resolve().parents[2]
TINY = [
    "--dataset", "synthetic", "--model", "mlp", "--steps", "2",
    "--set", "workers=2", "--set", "batch_size=8", "--set", "eval_samples=50",
]  # fmt: skip


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        # reproduction 8: a NaN decay factor gave a "complete" trace with lr NaN
        (
            ["optimizer.schedule=step", "optimizer.milestones=[1]", "optimizer.gamma=nan"],
            "optimizer.gamma must be a finite number in (0, inf), got nan",
        ),
        (["optimizer.gamma=inf"], "optimizer.gamma must be a finite number"),
        (["optimizer.gamma=0"], "optimizer.gamma must be a finite number"),
        (["optimizer.lr=nan"], "optimizer.lr must be a finite number in (0, inf)"),
        (["optimizer.lr=inf"], "optimizer.lr must be a finite number"),
        (["optimizer.lr=0"], "optimizer.lr must be a finite number"),
        (["optimizer.momentum=nan"], "optimizer.momentum must be a finite number"),
        (["optimizer.momentum=1"], "optimizer.momentum must be in [0, 1)"),
        (["optimizer.betas=[0.9,nan]"], "optimizer.betas must be two numbers in [0, 1)"),
        (["optimizer.weight_decay=nan"], "optimizer.weight_decay must be a finite number"),
        (["optimizer.weight_decay=inf"], "optimizer.weight_decay must be a finite number"),
        (["optimizer.weight_decay=-1"], "optimizer.weight_decay must be a finite number"),
        (["optimizer.warmup_steps=-1"], "optimizer.warmup_steps must be >= 0"),
        (["optimizer.milestones=[-1]"], "optimizer.milestones must be steps >= 0"),
        (["data.test_fraction=nan"], "data.test_fraction must be a finite number in (0, 0.9]"),
        (["data.test_fraction=1"], "data.test_fraction must be a finite number"),
        (["model.width=nan"], "model.width must be a finite number in (0, inf)"),
        (["model.width=inf"], "model.width must be a finite number"),
        (["model.width=0"], "model.width must be a finite number"),
        (["compressor.alpha=nan"], "alpha"),
        (["threads=100000"], "threads must be <= 1024"),
        (["eval_every=-1"], "eval_every must be >= 0, got -1"),
        (["threads=-2"], "threads must be >= 0, got -2"),
        (["chunk_steps=0"], "chunk_steps must be >= 1"),
        # reproduction 9: a seed past 64 bits overflowed inside torch
        (["seed=1180591620717411303424"], "seed must be in [0, 2**63)"),
        (["seed=-1"], "seed must be in [0, 2**63)"),
    ],
)
def test_bad_numbers_are_refused_in_one_line(tmp_path, capsys, settings, message):
    out = tmp_path / "x"
    args = [a for s in settings for a in ("--set", s)]
    assert main(["record", "-q", "-o", str(out), *TINY, *args]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err and err.count("\n") == 1
    assert not out.exists()


def test_seed_flag_overflow_is_refused(tmp_path, capsys):
    out = tmp_path / "x"
    assert main(["record", "-q", "-o", str(out), *TINY, "--seed", "1180591620717411303424"]) == 2
    assert "seed must be in [0, 2**63)" in capsys.readouterr().err
    assert not out.exists()


def test_largest_seed_records(tmp_path):
    out = tmp_path / "x"
    assert main(["record", "-q", "-o", str(out), *TINY, "--seed", str(2**63 - 1)]) == 0
    assert validate_trace(out).header["seeds"]["seed"] == 2**63 - 1


def test_net_too_large_for_memory_is_refused_with_the_estimate(tmp_path, capsys):
    """Reproduction 9: model.width=1e6 is sized on the meta device and refused."""
    out = tmp_path / "x"
    assert main(["record", "-q", "-o", str(out), *TINY, "--set", "model.width=1e6"]) == 2
    err = capsys.readouterr().err
    assert "model mlp at model.width=1e+06 has " in err and "GiB" in err
    assert "more than the" in err and "Traceback" not in err and err.count("\n") == 1
    assert not out.exists()


@pytest.mark.slow
def test_non_utf8_output_folder_records(tmp_path):
    """Reproduction 13: such a name as -o gave UnicodeEncodeError and a header-only folder."""
    out = os.path.join(os.fsencode(tmp_path), b"run\xff")
    env = dict(os.environ, PYTHONIOENCODING="utf-8")  # strict: a surrogate cannot print
    proc = subprocess.run(
        [sys.executable.encode(), b"-m", b"vgcsim", b"record", b"-o", out, *map(os.fsencode, TINY)],
        cwd=REPO,
        env=env,
        capture_output=True,
    )
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")
    assert b"wrote trace " in proc.stdout and b"run\\xff" in proc.stdout
    trace = validate_trace(os.fsdecode(out))
    assert trace.status == "complete" and trace.steps_count == 2
