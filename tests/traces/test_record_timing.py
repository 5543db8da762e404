"""Per-rank timings (rank_compute_s, optimizer_s), the device header and optional columns."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
import torch

from vgcsim.cli import main
from vgcsim.core.config import apply_overrides
from vgcsim.core.errors import TraceError
from vgcsim.traces import schema
from vgcsim.traces.io import read_trace
from vgcsim.traces.training import loop
from vgcsim.traces.training.record import RecordConfig, record
from vgcsim.traces.validate import validate_trace

SETTINGS = [
    "data.name=synthetic",
    "model.name=mlp",
    "model.width=0.25",
    "workers=3",
    "batch_size=8",
    "steps=7",
    "eval_every=0",
    "eval_samples=100",
    "chunk_steps=4",
]


def tiny(*overrides: str) -> RecordConfig:
    return apply_overrides(RecordConfig(), [*SETTINGS, *overrides])


def test_rank_compute_is_sampled_at_one_workers_batch_and_optimizer_every_step(
    tmp_path, monkeypatch
):
    batches = []
    real = loop.time_forward_backward

    def spy(model, x, y):
        batches.append(len(x))
        return real(model, x, y)

    monkeypatch.setattr(loop, "time_forward_backward", spy)
    t = validate_trace(record(tiny("rank_time_every=3"), tmp_path / "r"))
    assert batches == [8, 8, 8]  # one worker's B samples, not W·B, at steps 0, 3, 6
    measured = t.steps["rank_compute_s"].notna()
    assert list(t.steps["step"][measured]) == [0, 3, 6]
    assert (t.steps["rank_compute_s"][measured] > 0).all()
    assert np.isfinite(t.steps["optimizer_s"]).all() and (t.steps["optimizer_s"] > 0).all()
    assert "step % 3 == 0" in t.header["timing"]["rank_compute_s"]


def test_timing_passes_do_not_change_the_training(tmp_path):
    every = read_trace(record(tiny("rank_time_every=1"), tmp_path / "every"))
    rare = read_trace(record(tiny("rank_time_every=100"), tmp_path / "rare"))
    assert every.steps["rank_compute_s"].notna().all()
    assert rare.steps["rank_compute_s"].notna().sum() == 1
    for table in ("payloads", "steps"):
        a, b = getattr(every, table), getattr(rare, table)
        keep = [c for c in a.columns if not c.endswith("_s")]
        pd.testing.assert_frame_equal(a[keep], b[keep])


def test_header_names_the_device(tmp_path):
    h = read_trace(record(tiny(), tmp_path / "cpu")).header
    assert h["device"]["type"] == "cpu" and h["config"]["device"] == "cpu"
    assert isinstance(h["device"]["name"], str) and h["device"]["name"]


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the machine without CUDA")
def test_auto_device_without_cuda_records_on_the_cpu_and_cuda_exits_2(tmp_path, capsys):
    h = read_trace(record(tiny("device=auto"), tmp_path / "auto")).header
    assert h["config"]["device"] == "cpu" and h["device"]["type"] == "cpu"
    argv = ["record", "-q", "--device", "cuda", "-o", str(tmp_path / "x")]
    assert main([*argv, "--dataset", "synthetic", "--model", "mlp"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "device cuda requested but torch sees no CUDA device" in err
    assert not (tmp_path / "x").exists()


def _rewrite_steps(run, change) -> None:
    for f in sorted((run / "steps").glob("part-*.parquet")):
        df = pd.read_parquet(f)
        change(df).to_parquet(f, index=False)


def test_traces_without_the_optional_columns_stay_valid(tmp_path, capsys):
    run = record(tiny(), tmp_path / "old")
    _rewrite_steps(
        run, lambda df: df.drop(columns=list(schema.OPTIONAL_STEP_COLUMNS), errors="ignore")
    )
    t = validate_trace(run)
    assert not set(schema.OPTIONAL_STEP_COLUMNS) & set(t.steps.columns)
    assert main(["trace", "info", str(run)]) == 0


def test_inf_in_an_optional_column_is_invalid(tmp_path):
    run = record(tiny(), tmp_path / "inf")

    def poison(df):
        df["optimizer_s"] = math.inf
        return df

    _rewrite_steps(run, poison)
    with pytest.raises(TraceError, match="steps column optimizer_s contains NaN or Inf"):
        validate_trace(run)
