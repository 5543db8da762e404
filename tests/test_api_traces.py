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
    assert done.stdout.splitlines() == [
        "3",
        f"checking a record config {extra}",
        f"resuming a recording {extra}",
    ]


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


# -- the measured terms of a hook-written trace, worked by hand ---------------------------------


def _hook_terms(tmp_path, wall=True, edit=None):
    from tests.conftest import write_hook_trace

    run = write_hook_trace(tmp_path, wall=wall)
    if edit is not None:
        part = run / "ranks" / "part-000000.parquet"
        ranks = pd.read_parquet(part)
        edit(ranks)
        ranks.to_parquet(part)
    trace = api.load_trace(run)
    return trace, api.measured_terms(trace)


def test_measured_terms_of_a_hook_trace_reduce_its_ranks_as_documented(tmp_path):
    """``write_hook_trace``: rank 0 computes (1 + t) ms at step t, rank 1 ten times that;
    forward + backward is the compute + 1 ms, the optimizer 0.5 ms, the script's whole step
    2 ms more (unknown at the first step); squared sums, compress, encode and the exchange
    0.25 ms each, decode 0.5 ms × W. So at step t ≥ 1 the compute term is the slowest rank's
    compute + its 2 ms of host overhead, the whole step that rank's 10(1 + t) + 1 + 0.5 + 2 ms;
    at the first step, without the script's wall time, no overhead and forward + backward +
    optimizer."""
    trace, terms = _hook_terms(tmp_path)
    w = int(trace.workers)
    steps = sorted(set(trace.ranks["step"]))
    assert list(terms.index) == steps and terms.index.name == "step"
    assert list(terms.columns) == [t[0] for t in api.STEP_TERMS]
    ms = 1e-3
    for t in steps:
        first = t == steps[0]
        row = terms.loc[t]
        assert row["compute"] == pytest.approx((10 * (1 + t) + (0 if first else 2)) * ms)
        assert row["sqsum"] == pytest.approx(0.25 * ms)
        assert row["compress"] == pytest.approx(0.5 * ms)  # compress + encode
        assert row["exchange"] == pytest.approx(0.25 * ms)
        assert row["decode"] == pytest.approx(0.5 * w * ms)
        assert row["optimizer"] == pytest.approx(0.5 * ms)
        assert row["step"] == pytest.approx((10 * (1 + t) + 1.5 + (0 if first else 2)) * ms)


def test_measured_terms_without_the_scripts_wall_time_take_the_hooks_own(tmp_path):
    trace, terms = _hook_terms(tmp_path, wall=False)
    t = sorted(set(trace.ranks["step"]))[3]
    assert terms.loc[t, "compute"] == pytest.approx(10 * (1 + t) * 1e-3)
    assert terms.loc[t, "step"] == pytest.approx((10 * (1 + t) + 1.5) * 1e-3)


def test_a_phase_a_rank_did_not_report_leaves_the_term_to_the_other_ranks(tmp_path):
    """A rank whose script did not report its optimizer step (NaN, as the hook writes it)
    drops out of that term's mean instead of counting as 0 s."""
    t = 5

    def edit(ranks):
        ranks.loc[(ranks["step"] == t) & (ranks["rank"] == 0), "optimizer_s"] = float("nan")

    _, terms = _hook_terms(tmp_path, edit=edit)
    assert terms.loc[t, "optimizer"] == pytest.approx(0.5e-3)


def test_measured_terms_need_the_hooks_ranks_table():
    trace = api.load_trace(SAMPLE)
    with pytest.raises(TraceError) as err:
        api.measured_terms(trace)
    assert str(err.value) == (
        f"trace {trace.name} has no ranks table; per-term validation needs a trace the DDP "
        "hook wrote (register_vgc_hook(..., trace_dir=...))"
    )


def test_term_rows_put_each_source_beside_the_measured_term_step_by_step():
    """``_term_rows`` with hand-made replays: the predicted frame's compressed rows come in
    reverse step order beside a dense row and the mean row (step −1), and every term is
    predicted at 3 ms against 2 ms measured at step 0 and 4 ms at step 1; the simulator did
    not run. Each row takes its own step's value of the method the trace ran."""
    import numpy as np

    trace = api.load_trace(SAMPLE)  # variance: its exchange is the compressed one
    terms = [t[0] for t in api.STEP_TERMS]
    columns = [t[3] for t in api.STEP_TERMS]
    measured = pd.DataFrame({t: [2e-3, 4e-3] for t in terms}, index=pd.Index([0, 1], name="step"))
    predicted = pd.DataFrame(
        [
            {"method": "compressed", "step": 1, **{c: 3e-3 for c in columns}},
            {"method": "compressed", "step": 0, **{c: 1e-3 for c in columns}},
            {"method": "dense", "step": 0, **{c: 9e-3 for c in columns}},
            {"method": "compressed", "step": -1, **{c: 7e-3 for c in columns}},
        ]
    )
    out = api._term_rows(trace, measured, {"predicted": predicted})
    assert out["term"].tolist() == [t for t in terms for _ in (0, 1)]
    assert out["step"].tolist() == [0, 1] * len(terms)
    assert out["predicted_s"].tolist() == [1e-3, 3e-3] * len(terms)
    np.testing.assert_allclose(out["predicted_rel_error"], [-0.5, -0.25] * len(terms))
    assert out["simulated_s"].dtype == float and out["simulated_s"].isna().all()
    assert out["simulated_rel_error"].isna().all()
    assert out.attrs == {"method": "compressed", "compressor": "variance", "trace": trace.name}


def test_synth_trace_takes_a_config_object_and_writes_under_runs_synth_by_default(
    tmp_path, monkeypatch
):
    from vgcsim.traces.synth import SynthConfig

    monkeypatch.chdir(tmp_path)
    cfg = SynthConfig(layers="resnet50", workers=2, steps=2, seed=11)
    path = api.synth_trace(cfg, overrides=["steps=3"])
    assert path == Path("runs/synth") and (tmp_path / "runs" / "synth" / "header.json").is_file()
    made = api.trace_header(path)["config"]
    assert (made["layers"], made["workers"], made["steps"], made["seed"]) == ("resnet50", 2, 3, 11)


def test_synth_trace_reads_the_keys_a_file_gives(tmp_path):
    toml = tmp_path / "synth.toml"
    toml.write_text('layers = "resnet50"\nworkers = 2\nsteps = 2\nseed = 7\n', encoding="utf-8")
    made = api.trace_header(api.synth_trace(toml, tmp_path / "s"))["config"]
    assert (made["layers"], made["workers"], made["steps"], made["seed"]) == ("resnet50", 2, 2, 7)


def test_record_hands_the_config_layout_and_folder_to_the_recorder_it_picks(tmp_path, monkeypatch):
    """Emulated (the default): the recorder gets the config with the overrides applied, the
    folder (``runs/trace`` unless given), no progress bar and no overwrite unless asked. A
    torch.distributed backend: one rank per worker unless ``nprocs`` says otherwise."""
    from vgcsim.traces.training import distributed
    from vgcsim.traces.training import record as recorder

    emulated, ranks = [], []
    monkeypatch.setattr(
        recorder, "record", lambda cfg, out, **kw: emulated.append((cfg, out, kw)) or Path(out)
    )
    monkeypatch.setattr(
        distributed,
        "run_distributed_record",
        lambda cfg, procs, **kw: ranks.append((cfg, procs, kw)) or Path(kw["out_dir"]),
    )
    monkeypatch.chdir(tmp_path)
    cfg = api.record_config(overrides=TINY)
    assert api.record(cfg) == Path("runs/trace")
    assert emulated == [(cfg, "runs/trace", {"progress": False, "overwrite": False})]
    api.record(cfg, tmp_path / "e", overrides=["steps=3"], progress=True, overwrite=True)
    assert emulated[-1] == (
        api.record_config(overrides=[*TINY, "steps=3"]),
        tmp_path / "e",
        {"progress": True, "overwrite": True},
    )
    api.record(cfg, tmp_path / "g", backend="gloo")
    assert ranks == [(cfg, 2, {"out_dir": tmp_path / "g", "backend": "gloo", "overwrite": False})]
    api.record(cfg, tmp_path / "g", backend="gloo", nprocs=3, overwrite=True)
    assert ranks[-1] == (cfg, 3, {"out_dir": tmp_path / "g", "backend": "gloo", "overwrite": True})


def test_record_config_checks_names_only_when_asked():
    """Building a config needs no registry: a dataset no registry knows is kept until
    ``check=True`` (which needs the training extra) looks it up."""
    cfg = api.record_config(overrides=["data.name=nope"])
    assert cfg.data.name == "nope"
    with pytest.raises(ConfigError, match="nope"):
        api.record_config(overrides=["data.name=nope"], check=True)


def test_resume_record_hands_the_run_config_and_progress_to_the_recorder(tmp_path, monkeypatch):
    from vgcsim.traces.training import record as recorder

    calls = []
    monkeypatch.setattr(
        recorder, "resume", lambda run, cfg, **kw: calls.append((run, cfg, kw)) or Path(run)
    )
    cfg = api.record_config(overrides=TINY)
    assert api.resume_record(tmp_path / "r") == tmp_path / "r"
    api.resume_record(tmp_path / "s", cfg, progress=True)
    assert calls == [
        (tmp_path / "r", None, {"progress": False}),
        (tmp_path / "s", cfg, {"progress": True}),
    ]
