"""The paper-grid script and the speed script, on a tiny workload."""

from __future__ import annotations

import json

import pytest
from repo_scripts import load_script

from vgcsim.core.config import apply_overrides
from vgcsim.traces.training.record_config import RecordConfig

paper_grid = load_script("experiments/paper_grid.py")
speed = load_script("benchmarks/recording.py")

TINY = [
    "data.name=synthetic",
    "model.name=mlp",
    "model.width=0.25",
    "workers=2",
    "batch_size=8",
    "steps=3",
    "eval_every=0",
    "eval_samples=50",
]


def test_grid_covers_the_papers_table():
    labels = {m.label for m in paper_grid.METHODS}
    assert len(paper_grid.METHODS) == 16 and set(paper_grid.OPTIMIZERS) == {"adam", "momentum_sgd"}
    assert {label for _, label in paper_grid.PAPER_CIFAR10} <= labels
    cfg = paper_grid.method_config(RecordConfig(), paper_grid.METHODS[-3], "momentum_sgd")
    assert cfg.compressor.name == "qsgd" and cfg.compressor.params == {
        "bits": 2,
        "bucket_size": 128,
    }
    assert cfg.optimizer.name == "momentum_sgd"


@pytest.mark.slow
def test_grid_runs_resumes_and_writes_table(tmp_path, monkeypatch):
    methods = (paper_grid.METHODS[0], paper_grid.METHODS[3])
    monkeypatch.setattr(paper_grid, "METHODS", methods)
    monkeypatch.setattr(paper_grid, "OPTIMIZERS", {"adam": paper_grid.OPTIMIZERS["adam"]})
    base = apply_overrides(RecordConfig(), TINY)
    df = paper_grid.run_grid(base, tmp_path)
    assert list(df["method"]) == ["dense", "variance α=2"]
    assert df.loc[0, "ratio_primary"] < 1.0 + 1e-3 and df.loc[1, "ratio_primary"] > 1.0
    assert df.loc[1, "paper_ratio"] == 913.4
    mtime = (tmp_path / "adam" / "dense" / "header.json").stat().st_mtime
    paper_grid.run_grid(base, tmp_path)  # complete traces are reused
    assert (tmp_path / "adam" / "dense" / "header.json").stat().st_mtime == mtime
    table = paper_grid.to_markdown(df)
    assert "| adam | variance α=2 |" in table and "913.4×" in table


def test_settling_compares_the_two_halves_of_the_last_fifth():
    import pandas as pd

    # 10 steps, one row each, 10 elements: 5 sent in steps 0-7, then 2 and 2. First 10 %
    # = step 0 (0.5); last 20 % = steps 8, 9 (0.2), halves 0.2 and 0.2: drift 0. Bits: 4
    # per element sent, so the last-20 % ratio is 32·20 / (4·4) = 40.
    numel = 10
    sent = [5] * 8 + [2, 2]
    df = pd.DataFrame(
        {"step": range(10), "numel": numel, "sent": sent, "bits_x": [4 * s for s in sent]}
    )
    s = paper_grid.settling(df, "bits_x")
    assert s["density_first10"] == 0.5 and s["density_last20"] == 0.2
    assert s["drift_last20"] == 0 and s["settled"]
    assert s["ratio_last20"] == 32 * 20 / (4 * 4)
    df.loc[9, "sent"] = 3  # halves 0.2 and 0.3: drift 50 %
    s = paper_grid.settling(df, "bits_x")
    assert s["drift_last20"] == pytest.approx(0.5) and not s["settled"]


@pytest.mark.slow
def test_speed_reports_both_passes(capsys):
    cfg = apply_overrides(RecordConfig(), TINY)
    passes = speed.time_passes(cfg, repeats=1)
    assert set(passes) == {"batched", "separate"}
    assert all(v > 0 for d in passes.values() for v in d.values())
    assert (
        speed.main(["--repeats", "1", "--steps", "2", *sum((["--set", s] for s in TINY), [])]) == 0
    )
    out = json.loads(capsys.readouterr().out)
    assert out["record_steps_per_s"]["exact"] > 0
