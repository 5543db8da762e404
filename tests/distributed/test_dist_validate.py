"""`vgcsim validate`: measured comm_s against the models and the simulator, per step and overall."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from traces.cluster import load_cluster
from traces.io import read_trace
from vgcsim.cli import main
from vgcsim.commands.validate import (
    ValidateOptions,
    validation_frame,
    validation_summary,
)

SAMPLE = Path(__file__).resolve().parents[1] / "data" / "sample_trace"


def with_comm(tmp_path: Path, comm_s) -> Path:
    """The committed sample trace with a comm_s column written into its steps chunks."""
    run = tmp_path / "run"
    shutil.copytree(SAMPLE, run)
    for part in sorted((run / "steps").glob("part-*.parquet")):
        df = pd.read_parquet(part)
        df["comm_s"] = comm_s(df["step"].to_numpy())
        df.to_parquet(part, index=False)
    return run


def test_errors_are_relative_to_the_measurement(tmp_path):
    cluster = load_cluster("10GbE")
    run = with_comm(tmp_path, lambda steps: np.ones(len(steps)))
    base = validation_frame(read_trace(run), cluster, ValidateOptions(simulate=False))
    # Now pretend the network measured exactly twice the closed-form prediction.
    doubled = dict(zip(base["step"], 2 * base["predicted_s"], strict=True))
    run2 = with_comm(tmp_path / "b", lambda steps: np.array([doubled[s] for s in steps]))
    df = validation_frame(read_trace(run2), cluster, ValidateOptions(simulate=True))
    assert df.attrs["collective"] == "allgatherv/padded" and df.attrs["world_size"] == 4
    np.testing.assert_allclose(df["predicted_rel_error"], -0.5, rtol=1e-9)
    summary = validation_summary(df).set_index("source")
    assert summary.loc["predicted", "mean_rel_error"] == pytest.approx(-0.5)
    assert summary.loc["predicted", "within_25pct"] == 0.0
    # On a non-blocking star with no contention the simulator agrees with the closed form.
    np.testing.assert_allclose(df["simulated_s"], df["predicted_s"], rtol=0.02)
    assert (df["payload_bytes_max"] >= df["payload_bytes_mean"]).all()


def test_cli_writes_table_and_plot(tmp_path, capsys):
    run = with_comm(tmp_path, lambda steps: np.full(len(steps), 1e-3))
    out = tmp_path / "val"
    assert main(["validate", str(run), "--cluster", "1GbE", "-o", str(out), "--steps", "3"]) == 0
    text = capsys.readouterr().out
    assert "measured" in text and "predicted" in text and "simulated" in text
    per_step = pd.read_csv(out / "validation.csv")
    assert len(per_step) == 100 and (per_step["measured_s"] == 1e-3).all()
    assert (out / "validation.png").stat().st_size > 5000
    assert set(pd.read_csv(out / "validation_summary.csv")["source"]) == {
        "measured",
        "predicted",
        "simulated",
    }


def test_trace_without_measurements_is_a_clear_error(capsys):
    assert main(["validate", str(SAMPLE), "--cluster", "10GbE"]) == 2
    assert "no measured comm_s" in capsys.readouterr().err


def test_output_path_that_is_a_file_is_a_clear_error(tmp_path, capsys):
    run = with_comm(tmp_path, lambda steps: np.full(len(steps), 1e-3))
    afile = tmp_path / "afile"
    afile.write_text("")
    assert main(["validate", str(run), "--cluster", "1GbE", "--no-simulate", "-o", str(afile)]) == 2
    err = capsys.readouterr().err
    assert "not a folder" in err and "Traceback" not in err
