"""The notebook API runs the committed sample trace through predict, simulate, save and report."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from vgcsim import api
from vgcsim.core.errors import ResultsError, UnknownNameError
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


def test_frames_carry_their_cluster_and_options():
    pred = api.predict(SAMPLE, "1GbE", world_sizes=[2, 4], overlap="full")
    sim = api.simulate(SAMPLE, "1GbE", world_sizes=[2, 4], max_steps=2)
    for df, source in ((pred, "predicted"), (sim, "simulated")):
        assert df.attrs["source"] == source
        assert df.attrs["cluster"]["name"] == "1GbE"
        assert list(df.attrs["options"]["world_sizes"]) == [2, 4]
    assert pred.attrs["options"]["overlap"] == "full" and sim.attrs["options"]["max_steps"] == 2


@pytest.mark.parametrize(
    ("call", "typo", "valid"),
    [(api.predict, "allredcue", "allreduce"), (api.simulate, "max_step", "max_steps")],
)
def test_a_misspelt_option_lists_the_valid_ones(call, typo, valid):
    with pytest.raises(UnknownNameError) as exc:
        call(SAMPLE, "1GbE", world_sizes=[2], **{typo: 1})
    message = str(exc.value)
    assert repr(typo) in message and valid in message.split("valid:")[1]


def test_the_docstrings_name_every_result_column_and_the_mean_row():
    for fn in (api.predict, api.simulate):
        doc = fn.__doc__
        assert all(f"``{c}``" in doc for c in RESULT_COLUMNS), fn.__name__
        assert "-1 for the" in doc and "mean" in doc


def test_record_without_torch_names_the_extra(tmp_path):
    code = (
        "import sys\nfor m in ('torch', 'sklearn', 'mlxtend'): sys.modules[m] = None\n"
        "from vgcsim import api\n"
        "try:\n"
        f"    api.record(out_dir={str(tmp_path / 'run')!r})\n"
        "except api.MissingExtraError as exc:\n"
        "    print(exc)\n"
        "    raise SystemExit(3)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 3, done.stderr
    assert "vgcsim[train]" in done.stdout and "torch" in done.stdout
    assert not (tmp_path / "run").exists()
