"""The notebook API runs the committed sample trace through predict, simulate, save and report."""

from __future__ import annotations

from pathlib import Path

import pytest

from vgcsim import api
from vgcsim.core.errors import ResultsError
from vgcsim.core.results import RESULT_COLUMNS

SAMPLE = Path(__file__).parent / "data" / "sample_trace"


def test_predict_and_simulate_agree_and_save(tmp_path):
    pred = api.predict(SAMPLE, "10GbE", world_sizes=[4, 8])
    sim = api.simulate(SAMPLE, "10GbE", world_sizes=[4, 8])
    for df, source in ((pred, "predicted"), (sim, "simulated")):
        assert list(df.columns) == list(RESULT_COLUMNS)
        assert set(df["source"]) == {source}
        assert set(df["method"]) == {"dense", "compressed"}
        dense = df[(df["method"] == "dense") & (df["encoding"] == "fp32")]
        assert (dense["speedup_vs_dense"] == 1.0).all()
        assert set(df["compute_mode"]) == {"model"} and set(df["device"]) == {"V100"}
    key = ["world_size", "method", "encoding"]
    merged = pred.merge(sim, on=key, suffixes=("_p", "_s"))
    # contention-free star, ring collectives: the simulator reproduces the closed form
    assert ((merged["step_s_s"] / merged["step_s_p"] - 1).abs() < 1e-3).all()

    out = api.save(pred, tmp_path / "pred", SAMPLE, "10GbE")
    html = api.report([out], [SAMPLE], tmp_path / "report")
    assert html.exists() and html.suffix == ".html"


def test_save_refuses_mixed_sources(tmp_path):
    pred = api.predict(SAMPLE, "1GbE", world_sizes=[2])
    mixed = pred.copy()
    mixed.loc[mixed.index[0], "source"] = "simulated"
    with pytest.raises(ResultsError):
        api.save(mixed, tmp_path / "x", SAMPLE, "1GbE")


def test_compute_override_is_the_same_in_predict_and_simulate():
    pred = api.predict(SAMPLE, "10GbE", world_sizes=[4], compute="trace")
    sim = api.simulate(SAMPLE, "10GbE", world_sizes=[4], compute="trace", max_steps=3)
    assert set(pred["compute_mode"]) == set(sim["compute_mode"]) == {"trace"}
    assert set(pred["device"]) == set(sim["device"])
    assert "V100" not in set(pred["device"])  # the recording machine, not the preset's device
