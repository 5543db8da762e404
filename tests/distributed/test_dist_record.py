"""`vgcsim record --backend gloo`: real ranks write the emulated recorder's trace, plus comm_s.

With a deterministic compressor, the same config and seed, a 4-process gloo run on 127.0.0.1
must write the same payload table (elements sent and exact bits per worker, layer and step),
the same losses and the same evaluations as the project's single-process emulation of 4
workers (``vgcsim.traces.training.record.record``), and a measured ``comm_s`` per step.
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from vgcsim.cli import main
from vgcsim.core.config import apply_overrides
from vgcsim.traces import schema
from vgcsim.traces.io import read_trace
from vgcsim.traces.training.record import RecordConfig, record
from vgcsim.traces.validate import validate_trace

pytestmark = pytest.mark.distributed

SETTINGS = [
    "data.name=synthetic",
    "model.name=mlp",
    "model.width=0.25",
    "batch_size=8",
    "steps=4",
    "eval_every=2",
    "eval_samples=100",
    "chunk_steps=2",
    "compressor.name=variance",
    "compressor.alpha=1.0",
]


def deterministic(df: pd.DataFrame) -> pd.DataFrame:
    """Without wall-clock seconds, and without the optional payload columns that only the
    emulated recorder writes (the union of the workers' index sets needs every worker's
    indices in one process; torch.distributed recordings leave it out)."""
    optional = set(schema.OPTIONAL_PAYLOAD_COLUMNS)
    keep = [c for c in df.columns if not c.endswith("_s") and c not in optional]
    return df[keep].reset_index(drop=True)


@pytest.mark.slow
def test_gloo_record_matches_the_emulated_recorder(tmp_path, capsys):
    out = tmp_path / "gloo"
    args = ["record", "--backend", "gloo", "--nprocs", "3", "-q", "-o", str(out)]
    for s in SETTINGS:
        args += ["--set", s]
    assert main(args) == 0

    emulated = record(apply_overrides(RecordConfig(), [*SETTINGS, "workers=3"]), tmp_path / "emu")
    real, emu = read_trace(out), read_trace(emulated)
    validate_trace(out)
    assert real.workers == 3 and real.header["distributed"]["backend"] == "gloo"
    pd.testing.assert_frame_equal(deterministic(real.payloads), deterministic(emu.payloads))
    assert 0 < real.payloads["sent"].sum() < real.payloads["numel"].sum()
    np.testing.assert_allclose(real.steps["loss"], emu.steps["loss"], rtol=0, atol=1e-6)
    np.testing.assert_allclose(real.steps["grad_norm"], emu.steps["grad_norm"], rtol=1e-5)
    pd.testing.assert_frame_equal(real.evals, emu.evals, atol=1e-6, check_exact=False)
    assert (real.steps["comm_s"] > 0).all() and (real.steps["comm_s"] < 5).all()
    # One loop: the same per-rank timings, sampled on the same steps as the emulation.
    pd.testing.assert_series_equal(
        real.steps["rank_compute_s"].isna(), emu.steps["rank_compute_s"].isna()
    )
    assert (real.steps["rank_compute_s"].dropna() > 0).all() and (
        real.steps["optimizer_s"] > 0
    ).all()
    assert real.header["device"]["type"] == "cpu" and real.header["config"]["device"] == "cpu"
    assert json.loads((out / "header.json").read_text())["config"]["workers"] == 3


def test_user_errors_exit_2_before_any_rank_starts(tmp_path, capsys):
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "file").write_text("x")
    base = ["record", "--backend", "gloo", "--nprocs", "2", "-q"]
    assert main([*base, "-o", str(tmp_path / "busy")]) == 2
    assert main([*base, "--set", "compressor.name=nope", "-o", str(tmp_path / "a")]) == 2
    assert main(["record", "--backend", "mpi", "-q", "-o", str(tmp_path / "b")]) == 2
    err = capsys.readouterr().err
    assert "not empty" in err and "unknown compressor 'nope'" in err and "unknown backend" in err
    assert main([*base, "--device", "cuda", "-o", str(tmp_path / "c")]) == 2
    assert "--device cuda does not apply to backend 'gloo'" in capsys.readouterr().err


@pytest.mark.slow
def test_divergence_stops_every_rank_and_keeps_the_prefix(tmp_path, capsys):
    out = tmp_path / "nan"
    args = ["record", "--backend", "gloo", "--nprocs", "2", "-q", "-o", str(out)]
    for s in [*SETTINGS, "optimizer.lr=1e30", "chunk_steps=1"]:
        args += ["--set", s]
    assert main(args) == 2
    assert "NaN or Inf in the loss or gradients at step" in capsys.readouterr().err
    trace = read_trace(out)
    assert trace.header["status"] == "stopped" and trace.steps_count >= 1
    validate_trace(out)


def test_workers_that_contradict_nprocs_exit_2(tmp_path, capsys):
    # --workers 4 with --nprocs 2 silently recorded a 2-worker trace
    argv = ["record", "--backend", "gloo", "--nprocs", "2", "--workers", "4", "-q"]
    assert main([*argv, "-o", str(tmp_path / "r")]) == 2
    assert "--workers 4 and --nprocs 2 disagree" in capsys.readouterr().err
    assert not (tmp_path / "r").exists()
