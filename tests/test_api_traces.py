"""The notebook API's trace functions, called from Python as ``vgcsim trace`` and ``vgcsim
record`` call them: inspect, validate, synthesise, build a record config, record, resume."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest
from no_training_extra import run_without_training_extra

from vgcsim import api
from vgcsim.core.errors import ConfigError, TraceError

DATA = Path(__file__).parent / "data"
SAMPLE = DATA / "sample_trace"  # variance, 4 workers x 100 steps x 8 layers, complete

#: a recording of a few seconds: two emulated workers, two chunks of three steps
TINY = [
    "data.name=synthetic",
    "model.name=mlp",
    "model.width=0.25",
    "workers=2",
    "batch_size=8",
    "steps=6",
    "eval_every=3",
    "eval_samples=50",
    "chunk_steps=3",
    "compressor.name=qsgd",  # stochastic rounding: draws from the compression generator
]


def _edited_copy(src: Path, dst: Path, **fields) -> Path:
    """A copy of the trace ``src`` whose header has ``fields`` replaced."""
    shutil.copytree(src, dst)
    header = json.loads((dst / "header.json").read_text(encoding="utf-8"))
    header.update(fields)
    (dst / "header.json").write_text(json.dumps(header), encoding="utf-8")
    return dst


# -- trace info, validate ---------------------------------------------------------------------


def test_trace_info_summarises_the_sample_trace():
    info = api.trace_info(SAMPLE)
    assert (info["steps"], info["workers"], info["layers"]) == (100, 4, 8)
    assert info["compressor"]["name"] == "variance" and info["synthetic"] is False
    assert (info["status"], info["state"], info["divergence"]) == ("complete", "complete", None)
    assert len(info["per_layer"]) == 8
    # ratio of each encoding: dense fp32 bits / sent bits, so above 1 for a sparse trace
    assert info["primary_encoding"] in info["compression_ratio"]
    assert all(r > 1 for r in info["compression_ratio"].values())
    # a loaded trace gives the same summary as its folder
    assert api.trace_info(api.load_trace(SAMPLE))["per_layer"] == info["per_layer"]


def test_validate_trace_reports_a_valid_run_with_its_state():
    check = api.validate_trace(SAMPLE)
    assert check.valid and check.error is None and check.trace.steps_count == 100
    assert check.to_dict() == {
        "run": str(SAMPLE),
        "valid": True,
        "status": "complete",
        "state": "complete",
        "divergence": None,
    }


def test_validate_trace_calls_a_running_header_without_writer_interrupted(tmp_path):
    run = _edited_copy(SAMPLE, tmp_path / "crashed", status="running")
    check = api.validate_trace(run)
    assert check.valid and check.trace.status == "running"
    assert check.state == "interrupted"
    assert check.state_line.endswith(f"resume with `vgcsim record --resume {run}`")


def test_validate_trace_returns_the_violations_instead_of_raising(tmp_path):
    # 100 steps x 4 workers x 8 layers = 3200 payload rows; a header saying 5 workers wants 4000
    run = _edited_copy(SAMPLE, tmp_path / "broken", workers=5)
    check = api.validate_trace(run)
    assert not check.valid and check.trace is None
    assert "expected steps x workers x layers = 100 x 5 x 8 = 4000" in check.error
    assert check.to_dict() == {"run": str(run), "valid": False, "error": check.error}
    missing = api.validate_trace(tmp_path / "absent")
    assert not missing.valid and missing.error == f"trace not found: {tmp_path / 'absent'}"


# -- synth ------------------------------------------------------------------------------------


def test_synth_trace_applies_the_file_then_the_overrides_in_order(tmp_path):
    toml = tmp_path / "synth.toml"
    toml.write_text('layers = "vgg_like"\nworkers = 3\nsteps = 4\nseed = 7\n', encoding="utf-8")
    path = api.synth_trace(toml, tmp_path / "s", overrides=["workers=5", "steps=2", "steps=6"])
    header = api.trace_header(path)
    assert header["synthetic"] is True
    check = api.validate_trace(path)
    assert check.valid and (check.trace.workers, check.trace.steps_count) == (5, 6)
    # the same description written again is the same trace
    again = api.synth_trace(toml, tmp_path / "s2", overrides=["workers=5", "steps=6"])
    for table in ("payloads", "steps"):
        a, b = pd.read_parquet(path / table), pd.read_parquet(again / table)
        pd.testing.assert_frame_equal(a, b, check_exact=True)


def test_synth_trace_refuses_a_misspelt_key_and_a_used_folder(tmp_path):
    with pytest.raises(ConfigError, match="unknown config key 'bogus'"):
        api.synth_trace(None, tmp_path / "x", overrides=["bogus=1"])
    out = api.synth_trace(None, tmp_path / "s", overrides=["steps=2"])
    with pytest.raises(TraceError, match="not empty"):
        api.synth_trace(None, out, overrides=["steps=2"])
    assert api.synth_trace(None, out, overrides=["steps=3"], overwrite=True) == out
    assert api.validate_trace(out).trace.steps_count == 3


# -- record config ----------------------------------------------------------------------------


def test_record_config_merges_a_file_onto_a_base_table_by_table(tmp_path):
    toml = tmp_path / "rec.toml"
    toml.write_text("workers = 3\n[optimizer]\nlr = 0.05\n", encoding="utf-8")
    base = {"steps": 9, "optimizer": {"name": "momentum_sgd", "lr": 0.5}}
    cfg = api.record_config(toml, base=base, overrides=["workers=4", "steps=11"])
    # the file replaces lr only: the base's optimizer name stays; overrides come last
    assert (cfg.optimizer.name, cfg.optimizer.lr) == ("momentum_sgd", 0.05)
    assert (cfg.workers, cfg.steps) == (4, 11)
    # a RecordConfig passes through and takes the overrides only
    assert api.record_config(cfg, overrides=["seed=3"]).seed == 3
    assert api.record_config(cfg).workers == 4


def test_record_config_keys_are_the_dotted_keys_overrides_take():
    keys = api.record_config_keys()
    assert {"workers", "steps", "compressor.name", "optimizer.lr", "model.name"} <= set(keys)
    assert len(keys) == len(set(keys))
    with pytest.raises(ConfigError, match="unknown config key 'bogus'"):
        api.record_config(overrides=["bogus=1"])


def test_building_a_record_config_needs_no_torch_and_checking_it_names_the_extra():
    code = (
        "from vgcsim import api\n"
        "cfg = api.record_config(overrides=['workers=3'])\n"
        "print(cfg.workers)\n"
        "for call in (lambda: api.record_config(check=True), lambda: api.resume_record('x')):\n"
        "    try:\n"
        "        call()\n"
        "    except api.MissingExtraError as exc:\n"
        "        print(exc)\n"
    )
    done = run_without_training_extra(code)
    assert done.returncode == 0, done.stderr
    extra = "needs the training extra (torch is not installed): pip install 'vgcsim[train]'"
    assert done.stdout.splitlines() == ["3", extra, extra]


# -- record, resume ---------------------------------------------------------------------------


def test_check_refuses_an_unknown_compressor_before_any_work():
    pytest.importorskip("torch")  # the training extra
    with pytest.raises(ConfigError, match="unknown compressor 'bogus'"):
        api.record_config(overrides=[*TINY, "compressor.name=bogus"], check=True)


@pytest.mark.slow
def test_resume_record_from_the_start_equals_an_uninterrupted_run(tmp_path):
    """A recording killed before its first chunk closed (header running, no chunk) resumes
    from step 0 and ends equal to the uninterrupted run in every column but the seconds."""
    pytest.importorskip("torch")  # the training extra
    cfg = api.record_config(overrides=TINY, check=True)
    whole = api.record(cfg, tmp_path / "whole")
    run = api.record(cfg, tmp_path / "run")
    for table in ("payloads", "steps", "evals"):
        for f in (run / table).iterdir():
            f.unlink()
    header = api.trace_header(run)
    (run / "header.json").write_text(
        json.dumps({**header, "status": "running", "stop_reason": None}), encoding="utf-8"
    )
    point = api.resume_point(run)
    assert (point.run_dir, point.chunk_index, point.steps_written) == (run, 0, 0)
    assert point.header["config"]["steps"] == 6
    with pytest.raises(ConfigError):  # a config other than the recorded one is refused
        api.resume_record(run, api.record_config(cfg, overrides=["steps=7"]))
    assert api.resume_record(run, cfg) == run
    a, b = api.validate_trace(whole), api.validate_trace(run)
    assert a.valid and b.valid and b.state == "complete"
    for table in ("payloads", "steps", "evals"):
        x, y = getattr(a.trace, table), getattr(b.trace, table)
        cols = [c for c in x.columns if not c.endswith("_s")]
        pd.testing.assert_frame_equal(x[cols], y[cols], check_exact=True, obj=table)
    assert api.trace_header(run)["resumes"][0]["from_step"] == 0
    with pytest.raises(TraceError, match="nothing to resume"):
        api.resume_point(run)


def test_resume_point_refuses_a_synthetic_trace():
    with pytest.raises(TraceError, match="synthetic"):
        api.resume_point(DATA / "synth_resnet50")
