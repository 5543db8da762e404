"""The notebook API runs the committed sample trace through predict, simulate, save and report."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from no_training_extra import api_call_without_training_extra

from vgcsim import api
from vgcsim.core.errors import ConfigError, ResultsError, UnknownNameError
from vgcsim.core.outdir import read_marker
from vgcsim.core.results import RESULT_COLUMNS, read_results

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
    done = api_call_without_training_extra(f"api.record(out_dir={str(tmp_path / 'run')!r})")
    assert done.returncode == 3, done.stderr
    assert done.stdout.startswith("record needs the training extra (torch is not installed): ")
    assert "vgcsim[train]" in done.stdout
    assert not (tmp_path / "run").exists()


def test_report_run_writes_the_page_it_describes(tmp_path, monkeypatch):
    """``report_run`` into ``out/report`` by default, titled "vgcsim report" and marked as
    ``vgcsim api.report``'s, an earlier report replaced only with ``overwrite``; the counts it
    returns are the page's plots and tables; a title, a target accuracy and the command are
    handed on; without the trace its trace sections are left out."""
    import json

    from vgcsim.core.outdir import OutputError

    monkeypatch.chdir(tmp_path)
    out = api.save(
        api.predict(SAMPLE, "10GbE", world_sizes=[4, 8]), tmp_path / "p", SAMPLE, "10GbE"
    )
    run = api.report_run([out], [SAMPLE])
    where = tmp_path / "out" / "report"
    assert run.path == Path("out/report/index.html")
    meta = json.loads((where / "report.json").read_text(encoding="utf-8"))
    assert (run.plots, run.tables) == (len(meta["plots"]), len(meta["tables"])) == (5, 6)
    assert run.summary == meta["summary"] and run.missing == [] and run.caveats == []
    assert "<title>vgcsim report</title>" in (where / "index.html").read_text(encoding="utf-8")
    assert read_marker(where)["command"] == "vgcsim api.report"
    with pytest.raises(OutputError, match="--overwrite"):
        api.report_run([out], [SAMPLE])
    titled = api.report_run(
        [out], [SAMPLE], tmp_path / "t", title="Mine", target_accuracy=0.85, command="report"
    )
    page = (tmp_path / "t" / "index.html").read_text(encoding="utf-8")
    assert (
        "<title>Mine</title>" in page and read_marker(tmp_path / "t")["command"] == "vgcsim report"
    )
    assert any(
        s.startswith("Time to accuracy: target 85.0 % test accuracy (as given)")
        for s in titled.summary
    )
    bare = api.report_run([out], [], where, overwrite=True)
    assert (bare.plots, bare.tables) == (3, 5)


# -- sweeps -----------------------------------------------------------------------------------


def _sweep_file(tmp_path: Path) -> Path:
    """Two bandwidths × world sizes 2 and 4 of the sample trace: 4 jobs, run in this process;
    the resample rule puts a seed into the header's extrapolation."""
    cfg = tmp_path / "sweep.toml"
    cfg.write_text(
        f'[sweep]\ntraces = ["{SAMPLE.as_posix()}"]\nworld_sizes = [2, 4]\n'
        'bandwidths = ["1Gbps", "10Gbps"]\nscheduler = "processes"\nprocesses = 1\n\n'
        '[simulate]\nmax_steps = 2\nrule = "resample"\nseed = 3\n',
        encoding="utf-8",
    )
    return cfg


def test_a_notebook_sweep_returns_its_table_jobs_and_what_made_them(tmp_path):
    from vgcsim.core.results import FACTOR_COLUMNS

    done: list[int] = []
    run = api.sweep(
        _sweep_file(tmp_path), overrides=["sweep.world_sizes=[4]"], progress=done.append
    )
    assert [(j.world_size, dict(j.factors)["bandwidth"]) for j in run.jobs] == [
        (4, "1 Gb/s"),
        (4, "10 Gb/s"),
    ]
    assert done == [1, 1]  # one call per job
    df = run.frame
    assert list(df.columns) == [*RESULT_COLUMNS, *FACTOR_COLUMNS]
    assert set(df["world_size"]) == {4} and set(df["source"]) == {"simulated"}
    assert sorted(set(df["bandwidth_Bps"])) == [1e9 / 8, 1e10 / 8]
    assert df.attrs["source"] == "simulated" and df.attrs["cluster"]["name"] == "10GbE"
    assert df.attrs["traces"] == [{"path": SAMPLE.as_posix(), "name": "sample_trace"}]
    options = df.attrs["options"]
    assert list(options) == ["sweep", "simulate", "summary", "time_sources"]
    assert options["sweep"]["world_sizes"] == [4] and options["simulate"]["seed"] == 3
    assert options["summary"]["jobs"] == 2
    # a loaded sweep file runs the same, and the jobs are listed without running them
    loaded = api.load_sweep(_sweep_file(tmp_path), overrides=["sweep.world_sizes=[4]"])
    assert api.sweep_jobs(loaded) == run.jobs == api.sweep(loaded).jobs


def test_a_sweep_from_python_writes_the_header_the_command_writes(tmp_path, monkeypatch, capsys):
    """``vgcsim sweep`` saves through ``api.save``, the one header writer, and an
    ``api.sweep`` saved from Python gives the same header and table."""
    import pandas as pd

    from vgcsim.cli import main
    from vgcsim.core.results import read_results

    cfg = _sweep_file(tmp_path)
    saved: list[Path] = []
    real_save = api.save

    def spy(*args, **kwargs):
        saved.append(real_save(*args, **kwargs))
        return saved[-1]

    monkeypatch.setattr(api, "save", spy)
    assert main(["sweep", str(cfg), "-q", "-o", str(tmp_path / "cli")]) == 0
    assert saved == [tmp_path / "cli"]
    monkeypatch.undo()
    api.save(api.sweep(cfg).frame, tmp_path / "api")

    cli_df, cli = read_results(tmp_path / "cli")
    api_df, via_api = read_results(tmp_path / "api")
    pd.testing.assert_frame_equal(cli_df, api_df)
    assert cli.pop("command")[0] == "vgcsim"  # the process's argv, here pytest's
    assert via_api.pop("command") == ["vgcsim.api.save"]
    assert cli == via_api
    assert cli["traces"] == [{"path": SAMPLE.as_posix(), "name": "sample_trace"}]
    assert cli["cluster"]["name"] == "10GbE"
    assert cli["extrapolation"] == {"rule": "resample", "seed": 3}
    assert sorted(cli["options"]) == ["simulate", "summary", "sweep", "time_sources"]
    assert cli["options"]["summary"]["jobs"] == 4
    # every header says where the local times came from: a sweep per trace, as predict does
    # for that trace on the base cluster (10GbE models compute on its device, a V100)
    sources = cli["options"]["time_sources"]
    assert list(sources) == ["sample_trace"]
    assert sources["sample_trace"]["compute_mode"] == "model"
    assert sources["sample_trace"]["device"] == "V100"
    assert sources["sample_trace"]["compute_s"].startswith("modelled on V100")
    pred_dir = tmp_path / "pred"
    api.save(api.predict(SAMPLE, "10GbE", world_sizes=[2]), pred_dir, SAMPLE, "10GbE")
    assert read_results(pred_dir)[1]["options"]["time_sources"] == sources["sample_trace"]


def test_save_tells_a_sweep_frame_from_a_replay_frame(tmp_path):
    run = api.sweep(_sweep_file(tmp_path), overrides=["sweep.world_sizes=[2]"])
    with pytest.raises(ResultsError, match="save it without them"):
        api.save(run.frame, tmp_path / "x", SAMPLE, "10GbE")
    pred = api.predict(SAMPLE, "10GbE", world_sizes=[2])
    with pytest.raises(ResultsError, match="with its trace and cluster"):
        api.save(pred, tmp_path / "y")
    assert not (tmp_path / "x").exists() and not (tmp_path / "y").exists()


def test_a_scenario_from_python_writes_the_header_the_command_writes(tmp_path, monkeypatch, capsys):
    """``vgcsim scenario`` saves through ``api.save``; ``api.scenario`` saved from Python
    gives the same header and table, and the summary the command prints."""
    import pandas as pd

    from vgcsim.cli import main
    from vgcsim.core.results import read_results

    saved: list[Path] = []
    real_save = api.save

    def spy(*args, **kwargs):
        saved.append(real_save(*args, **kwargs))
        return saved[-1]

    sets = ["--set", "links=1GbE", "--world-sizes", "2,16"]
    monkeypatch.setattr(api, "save", spy)
    argv = ["scenario", "paper", "--trace", str(SAMPLE), *sets, "-o", str(tmp_path / "cli")]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert saved == [tmp_path / "cli"]
    monkeypatch.undo()
    cfg = api.scenario_config("paper", overrides=["links=1GbE", "world_sizes=[2, 16]"])
    run = api.scenario(config=cfg, traces=[SAMPLE], command="same")
    api.save(run.frame, tmp_path / "api")

    cli_df, cli = read_results(tmp_path / "cli")
    api_df, via_api = read_results(tmp_path / "api")
    pd.testing.assert_frame_equal(cli_df, api_df)
    assert cli.pop("command")[0] == "vgcsim" and via_api.pop("command") == ["vgcsim.api.save"]
    assert cli == via_api
    assert cli["extrapolation"] == {"rule": None, "seed": None}
    assert [t["name"] for t in cli["traces"]] == ["sample_trace"]
    assert set(cli["cluster"]) == {"scenario_links", "device"}
    assert cli["options"]["scenario"] == "paper" and cli["options"]["world_sizes"] == [2, 16]
    # its local times: compute modelled on the scenario's device, codec_s as set, no other
    sources = cli["options"]["time_sources"]
    assert sources["compute_mode"] == "model" and sources["device"] == cfg.device
    assert sources["compute_s"].startswith(f"modelled on {cfg.device}")
    assert sources["codec_s"].startswith(f"set: codec_s = {cfg.codec_s:g} s")
    for column in ("variance_s", "decode_s", "optimizer_s"):
        assert sources[column].startswith("none")
    assert sorted(run.frame["world_size"].unique()) == [2, 16]
    # the trace adds its measured compression as one more method beside the scenario's own
    assert "variance α=2 (sample_trace)" in set(run.frame["compressor"])
    assert "variance α=2 (sample_trace)" not in set(api.scenario(config=cfg).frame["compressor"])
    assert run.crossover.to_csv(index=False) == (tmp_path / "cli" / "crossover.csv").read_text()
    # the summary the command printed and saved, with the command line it quotes
    import shlex

    line = "vgcsim " + " ".join(shlex.quote(a) for a in sys.argv[1:])
    md = (tmp_path / "cli" / "scenario.md").read_text()
    assert md in printed and line in md
    assert md.replace(line, "same") == run.markdown


def test_an_unknown_scenario_or_key_is_one_clear_error():
    with pytest.raises(ConfigError, match="paper"):
        api.scenario_config("nope")
    with pytest.raises(ConfigError, match="bogus"):
        api.scenario_config("paper", overrides=["bogus=1"])


# ----------------------------------------------------------------------------- demo's checks

_RECORD = {"traces": "record"}  # the fields the committed traces fix are free when recording


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        (
            {"methods": ("dense", "nope")},
            "unknown demo method 'nope'; valid: dense, hybrid, qsgd, strom, variance",
        ),
        ({"compute": "guess"}, "unknown compute mode 'guess'; valid: model, trace"),
        ({"traces": "download"}, "unknown demo trace source 'download'; valid: committed, record"),
        (
            {"target_accuracy": 1.0},
            "target_accuracy is a percentage in (1, 100] or 0, got 1",
        ),
        (
            {"target_accuracy": 100.5},
            "target_accuracy is a percentage in (1, 100] or 0, got 100.5",
        ),
        (
            {"target_accuracy": float("inf")},
            "target_accuracy is a percentage in (1, 100] or 0, got inf",
        ),
        (
            {"steps": 100},
            "steps applies only to traces the demo records: add --set traces=record (the "
            "committed traces were recorded with the defaults)",
        ),
        (
            {"workers": 8, "seed": 1},
            "workers, seed apply only to traces the demo records: add --set traces=record "
            "(the committed traces were recorded with the defaults)",
        ),
        ({"clusters": ()}, "methods, clusters and world_sizes must not be empty"),
        ({"world_sizes": ()}, "methods, clusters and world_sizes must not be empty"),
        ({"methods": ()}, "methods, clusters and world_sizes must not be empty"),
        ({"world_sizes": (2, 0)}, "world_sizes must be >= 1"),
        (
            {**_RECORD, "steps": 0},
            "steps, workers and paper_steps must be >= 1, sim_steps >= 0",
        ),
        (
            {**_RECORD, "workers": 0},
            "steps, workers and paper_steps must be >= 1, sim_steps >= 0",
        ),
        ({"sim_steps": -1}, "steps, workers and paper_steps must be >= 1, sim_steps >= 0"),
        ({"paper_steps": 0}, "steps, workers and paper_steps must be >= 1, sim_steps >= 0"),
        (
            {"paper_nets": ("resnet50", "bert")},
            "unknown paper-size net 'bert'; valid: resnet50, vgg_like",
        ),
    ],
)
def test_demo_refuses_each_config_it_cannot_run_in_one_exact_line(fields, message):
    from dataclasses import replace

    with pytest.raises(ConfigError) as err:
        api._demo_check(replace(api.DemoConfig(), **fields))
    assert str(err.value) == message


def test_demo_refuses_a_method_without_a_committed_trace_unless_it_records(tmp_path):
    from dataclasses import replace

    cfg = replace(api.DemoConfig(), methods=("dense", "hybrid"))
    with pytest.raises(ConfigError) as err:
        api._demo_check(cfg)
    assert str(err.value) == (
        f"no committed demo trace for hybrid in {api.DEMO_TRACES}: add --set traces=record "
        "to record it"
    )
    api._demo_check(replace(cfg, traces="record"))  # recorded: nothing missing


def test_demo_names_every_method_whose_committed_trace_is_missing(tmp_path, monkeypatch):
    from dataclasses import replace

    monkeypatch.setattr(api, "DEMO_TRACES", tmp_path)  # a folder without any trace
    with pytest.raises(ConfigError) as err:
        api._demo_check(replace(api.DemoConfig(), methods=("dense", "variance")))
    assert str(err.value).startswith(f"no committed demo trace for dense, variance in {tmp_path}:")


@pytest.mark.parametrize(
    "fields",
    [
        {},
        {"target_accuracy": 0.0},  # 0: the dense trace's final accuracy minus a point
        {"target_accuracy": 1.5},
        {"target_accuracy": 100.0},
        {"sim_steps": 0},
        {"world_sizes": (1,)},
        {"paper_nets": ()},
        {"paper_steps": 1},
        {**_RECORD, "steps": 1, "workers": 1, "batch_size": 1, "seed": 7},
    ],
)
def test_demo_accepts_the_edges_of_every_range(fields):
    from dataclasses import replace

    assert api._demo_check(replace(api.DemoConfig(), **fields)) is None


def test_demo_refuses_a_batch_size_the_recorder_refuses_as_a_config_error():
    from dataclasses import replace

    for methods in (("dense", "variance"), ("variance",)):
        cfg = replace(api.DemoConfig(), traces="record", batch_size=0, methods=methods)
        with pytest.raises(ConfigError, match="batch"):
            api._demo_check(cfg)


def test_demo_does_not_reuse_a_folder_whose_header_it_cannot_read(tmp_path):
    # a header.json that is not a trace header is a trace to record again, not one to reuse
    run = tmp_path / "variance"
    run.mkdir()
    (run / "header.json").write_text("{not json")
    record_cfg = api._demo_record_config(api.DemoConfig(steps=2), "variance")
    assert api._demo_reusable(run, record_cfg) is False


# ----------------------------------------------------------------------------- calibrate's sweep


def test_the_calibration_sweep_defaults_are_the_measurement_configs():
    from vgcsim.traces.calibration import DEFAULT_OPS, CalibrateConfig, default_sizes_bytes

    cfg = api.calibration_config()
    assert cfg == CalibrateConfig()
    assert (cfg.repeats, cfg.warmup, cfg.budget_s, cfg.passes) == (30, 2, 10.0, 3)
    assert cfg.ops == DEFAULT_OPS and cfg.sizes_bytes == default_sizes_bytes()


def test_every_calibration_sweep_argument_reaches_its_config():
    cfg = api.calibration_config(
        ops="p2p, allreduce",
        sizes="4,1KiB",
        repeats=7,
        warmup=0,
        budget_s=2.5,
        passes=2,
        overrides=["passes=4"],
    )
    assert cfg.ops == ("p2p", "allreduce")
    assert cfg.sizes_bytes == (4, 1024)
    # the overrides apply after the arguments of the same names
    assert (cfg.repeats, cfg.warmup, cfg.budget_s, cfg.passes) == (7, 0, 2.5, 4)
    # lists as the notebook gives them; a range string as the command line does
    listed = api.calibration_config(ops=["allgather"], sizes=[16.0, 64])
    assert listed.ops == ("allgather",) and listed.sizes_bytes == (16, 64)
    assert all(isinstance(s, int) for s in listed.sizes_bytes)
    assert api.calibration_config(sizes="4:64").sizes_bytes == (4, 16, 64)
    assert api.calibration_config(sizes="").sizes_bytes == api.calibration_config().sizes_bytes


@pytest.mark.parametrize("missing", ["RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", None])
def test_a_rank_of_torchrun_is_told_by_all_four_of_its_variables(monkeypatch, missing):
    env = {"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"}
    for key in env:
        monkeypatch.delenv(key, raising=False)
        monkeypatch.delenv(key.lower(), raising=False)
    for key, value in env.items():
        if key != missing:
            monkeypatch.setenv(key, value)
    assert api._under_torchrun() is (missing is None)


# -- the demo end to end, small: what it writes, says and returns ---------------------------


def test_the_demo_writes_and_reports_each_stage_in_order(tmp_path):
    """Committed traces (dense and variance), two clusters on two devices, P = 2 and 4, one
    paper-size net: the compressed trace predicted and simulated on each cluster, the net
    synthesized and predicted on each, the report; every stage said once, counted (an integer)
    against the stages the configuration has; every folder marked as the demo's."""
    import json

    import pandas as pd

    a100 = tmp_path / "a100.toml"
    a100.write_text('device = "A100"\n[link]\npreset = "25GbE"\n', encoding="utf-8")
    cfg = api.DemoConfig(
        clusters=("10GbE", str(a100)),
        world_sizes=(4, 2),
        sim_steps=3,
        methods=("dense", "variance"),
        paper_nets=("resnet50",),
        paper_steps=2,
    )
    calls = []
    out = tmp_path / "demo"
    run = api.demo(cfg, out, progress=lambda *a: calls.append(a))
    synth = out / "traces" / "synthesized" / "resnet50"
    assert calls == [
        (1, 8, "predicted variance-10GbE for P = 2..4"),
        (2, 8, "simulated variance-10GbE for P = 2..4"),
        (3, 8, "predicted variance-a100 for P = 2..4"),
        (4, 8, "simulated variance-a100 for P = 2..4"),
        (5, 8, f"synthesized resnet50 at 1.2 % density -> {synth}"),
        (6, 8, "predicted resnet50-10GbE (synthesized) for P = 2..4"),
        (7, 8, "predicted resnet50-a100 (synthesized) for P = 2..4"),
        (8, 8, f"report written to {out / 'report'}"),
    ]
    assert all(type(total) is int for _, total, _ in calls)
    assert run.traces == {m: api.DEMO_TRACES / m for m in ("dense", "variance")}
    assert run.synthesized == {"resnet50": synth}
    assert run.results == (
        out / "results" / "predicted" / "variance-10GbE",
        out / "results" / "simulated" / "variance-10GbE",
        out / "results" / "predicted" / "variance-a100",
        out / "results" / "simulated" / "variance-a100",
        out / "results" / "predicted" / "resnet50-10GbE",
        out / "results" / "predicted" / "resnet50-a100",
    )
    assert run.config == api.demo_config(config=cfg)
    assert run.report == out / "report" / "index.html" and run.report.is_file()
    assert run.headline.startswith("small_cnn (38,282 parameters) on mnist, 500 steps")
    assert run.notes[0] == (
        f"{run.headline} Traces committed with the project (vgcsim/data/demo_traces, "
        "installed with the package; recorded by `vgcsim record`, commands in its README)."
    )
    assert run.notes[1].startswith("Paper-size rows: ResNet-50 (25.6 M parameters")
    assert run.notes[2] == (
        "Clusters: 10GbE, a100; P = 2, 4. Compute: forward/backward time modelled "
        "from the traces' FLOPs on each cluster's device (A100, V100)."
    )
    report = json.loads((out / "report" / "report.json").read_text(encoding="utf-8"))
    assert tuple(report["summary"]) == run.summary and run.summary
    page = run.report.read_text(encoding="utf-8")
    assert "<title>vgcsim demo report</title>" in page
    assert "Clusters: 10GbE, a100; P = 2, 4." in page  # the notes reach the page
    glance = pd.read_csv(out / "report" / "tables" / "speedup_matrix.csv")
    assert {"variance α=2 on recorded small_cnn", "variance α=2 on synthesized ResNet-50"} <= set(
        glance["method"]
    )  # the demo's labels, not the traces' folder names
    marker = read_marker(out)
    assert marker["command"] == "vgcsim demo" and set(marker["files"]) == {
        "traces",
        "results",
        "report",
    }
    assert read_marker(out / "report")["command"] == "vgcsim demo"
    for where in run.results:
        df, header = read_results(where)
        assert header["command"] == ["vgcsim.api.demo"]
        assert read_marker(where)["command"] == "vgcsim demo"
        assert sorted(set(df["world_size"])) == [2, 4]
    _, sim = read_results(run.results[1])
    assert sim["options"]["max_steps"] == 3  # sim_steps
    _, paper = read_results(run.results[4])
    assert paper["cluster"]["compute"] == "model"
    # the paper-size net: synthesized beside the committed variance trace, at its settled
    # density, with its workers and batch, the demo's seed and the paper steps
    from vgcsim.reports.demo_notes import settled_density

    recorded = api.load_trace(api.DEMO_TRACES / "variance")
    made = api.load_trace(synth).header["config"]
    assert {k: made[k] for k in ("layers", "workers", "steps", "seed", "compressor")} == {
        "layers": "resnet50",
        "workers": int(recorded.workers),
        "steps": 2,
        "seed": 0,
        "compressor": "variance",
    }
    assert made["density"] == settled_density(recorded) and 0.01 < made["density"] < 0.015
    assert made["encodings"] == list(api.PAPER_ENCODINGS) and made["primary_encoding"] == "packed32"
    assert (made["batch_size_per_worker"], made["chunk_steps"]) == (32, 2)


def test_the_demo_on_measured_compute_says_so_and_models_only_the_paper_nets(tmp_path, monkeypatch):
    """``compute="trace"``: the recorded trace is priced on its measured times, the
    paper-size net (which has none) on the model; the world sizes given to the call replace
    the configuration's; the command line given is the one every result header records; the
    target accuracy reaches the report as a percentage. Run from a folder, without naming
    one, under an ASCII locale: it writes ``out/demo`` there (its UTF-8 files read back as
    UTF-8), and a second run is refused without ``overwrite``."""
    from tests.conftest import ascii_locale
    from vgcsim.core.outdir import OutputError

    monkeypatch.chdir(tmp_path)
    calls = []
    cfg = api.DemoConfig(
        clusters=("10GbE",),
        world_sizes=(4, 2),
        sim_steps=3,
        methods=("variance",),
        paper_nets=("vgg_like",),
        paper_steps=2,
        compute="trace",
        target_accuracy=85,
    )
    with ascii_locale():
        run = api.demo(
            cfg,
            world_sizes=[2, 3, 4],
            command=("vgcsim", "demo", "--given"),
            progress=lambda *a: calls.append(a),
        )
    out = tmp_path / "out" / "demo"
    assert run.report == Path("out/demo/report/index.html") and (out / "report").is_dir()
    with pytest.raises(OutputError, match="--overwrite"):
        api.demo(cfg)
    synth = Path("out/demo/traces/synthesized/vgg_like")
    assert [c[:2] for c in calls] == [(1, 5), (2, 5), (3, 5), (4, 5), (5, 5)]
    assert calls[0][2] == "predicted variance-10GbE for P = 2..4"
    assert calls[3][2] == "predicted vgg_like-10GbE (synthesized) for P = 2..4"
    assert run.synthesized == {"vgg_like": synth} and len(run.results) == 3
    assert run.notes[-1] == (
        "Clusters: 10GbE; P = 2, 3, 4. Compute: forward/backward, variance and codec times as "
        "measured on the recording CPU."
    )
    computes = []
    for where in run.results:
        _, header = read_results(where)
        assert header["command"] == ["vgcsim", "demo", "--given"]
        computes.append(header["cluster"]["compute"])
    assert computes == ["trace", "trace", "model"]
    assert any(
        s.startswith("Time to accuracy: target 85.0 % test accuracy (as given)")
        for s in run.summary
    ), run.summary


# -- a report folder from before folder markers ----------------------------------------------


def _old_report(tmp_path, *names):
    folder = tmp_path / "old"
    for name in names:
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text("x")
    return folder


def test_an_unmarked_report_folder_is_known_by_its_page_and_summary_and_lists_what_it_wrote(
    tmp_path,
):
    folder = _old_report(
        tmp_path,
        "index.html",
        "report.json",
        "notes.txt",  # the user's: not a report file
        "plots/speedup.svg",
        "plots/speedup.png",
        "tables/breakdown.md",
        "plots/sub/deeper.png",  # only the files directly in plots/ and tables/
    )
    (folder / "tables" / "folder").mkdir()
    assert api.legacy_report(folder) == [
        "index.html",
        "report.json",
        "plots/speedup.png",
        "plots/speedup.svg",
        "tables/breakdown.md",
    ]
    assert api.legacy_report(
        _old_report(tmp_path / "b", "index.html", "summary.md", "report.json")
    ) == [
        "index.html",
        "summary.md",
        "report.json",
    ]


@pytest.mark.parametrize("present", [("index.html",), ("report.json",), ()])
def test_a_folder_without_both_the_page_and_its_summary_is_no_old_report(tmp_path, present):
    assert api.legacy_report(_old_report(tmp_path, *present, "plots/speedup.png")) is None


def test_a_config_file_table_replaces_a_value_and_a_value_replaces_a_table():
    """Tables merge key by key; where one side is a table and the other is not, the file's
    side wins whole (a table over a number, a number over a table)."""
    base = {"optimizer": {"lr": 0.1, "momentum": 0.9}, "steps": 10, "compressor": "dense"}
    top = {"optimizer": {"lr": 0.2}, "steps": {"n": 5}, "compressor": {"name": "variance"}}
    assert api._merged(base, top) == {
        "optimizer": {"lr": 0.2, "momentum": 0.9},
        "steps": {"n": 5},
        "compressor": {"name": "variance"},
    }
    assert api._merged({"optimizer": {"lr": 0.1}}, {"optimizer": 3}) == {"optimizer": 3}
    assert base["optimizer"] == {"lr": 0.1, "momentum": 0.9}  # the base is not changed


def test_the_demo_records_each_method_with_its_own_settings():
    fields = {"steps": 7, "workers": 3, "batch_size": 16, "eval_every": 5, "seed": 9}
    cfg = api.DemoConfig(traces="record", lr_milestones=(4, 6), **fields)
    rc = api._demo_record_config(cfg, "qsgd")
    assert (rc.workers, rc.batch_size, rc.steps, rc.seed, rc.eval_every) == (3, 16, 7, 9, 5)
    assert (rc.compressor.name, rc.compressor.params) == ("qsgd", {"bits": 2, "bucket_size": 128})
    assert (rc.optimizer.schedule, tuple(rc.optimizer.milestones)) == ("step", (4, 6))
    assert rc.chunk_steps == 100


def test_demo_config_takes_world_sizes_as_text_or_a_list_and_keeps_the_default_without():
    assert api.demo_config(world_sizes="2,4").world_sizes == (2, 4)
    assert api.demo_config(["clusters=10GbE"], world_sizes=[8, 2]).world_sizes == (2, 8)
    default = api.demo_config(["clusters=10GbE"])
    assert default.world_sizes == api.DemoConfig().world_sizes
    assert default.clusters == ("10GbE",)


# -- calibrate_codec: what it measures with and where it writes (the measuring is faked) ----


def test_calibrate_codec_measures_with_the_given_settings_and_writes_the_named_device(
    tmp_path, monkeypatch
):
    import tomllib

    from vgcsim.traces.training import codec_calibrate as cc

    asked = []
    measured = cc.CodecCalibration(
        device="cpu",
        device_name="x86_64",
        memory_bandwidth_Bps=4e9,
        launch_overhead_s=1e-4,
        cast_measured_s=0.03,
        cast_predicted_s=0.024,
        size_bytes=64 << 20,
        repeats=3,
        threads=2,
        torch_version="t",
    )

    def fake(device, *, repeats, warmup, **_):
        asked.append((device, repeats, warmup))
        return measured

    monkeypatch.setattr(cc, "measure_device", fake)
    out = tmp_path / "new" / "deeper" / "c.toml"
    run = api.calibrate_codec(out, device="cpu", preset="V100", repeats=3, warmup=1, name="box")
    assert asked == [("cpu", 3, 1)]
    assert run.out == out and run.calibration is measured and run.summary == cc.summary(measured)
    device = tomllib.loads(out.read_text(encoding="utf-8"))["device"]
    assert (device["preset"], device["name"], device["memory_bandwidth_Bps"]) == (
        "V100",
        "box",
        4e9,
    )
    api.calibrate_codec(out, device="cpu")  # the same file again, with the defaults
    assert asked[-1] == ("cpu", 10, 2)


def test_calibrate_codec_refuses_a_folder_and_an_unknown_preset_before_measuring(
    tmp_path, monkeypatch
):
    from vgcsim.traces.training import codec_calibrate as cc

    monkeypatch.setattr(cc, "measure_device", lambda *a, **k: pytest.fail("measured"))
    with pytest.raises(ConfigError) as err:
        api.calibrate_codec(tmp_path, device="cpu")
    assert str(err.value) == f"{tmp_path} is a folder; give the cluster TOML file to write"
    with pytest.raises(UnknownNameError):
        api.calibrate_codec(tmp_path / "c.toml", device="cpu", preset="nope")
    assert not (tmp_path / "c.toml").exists()


def test_calibrate_codec_resolves_auto_and_asks_a_gpu_for_its_preset(tmp_path, monkeypatch):
    from vgcsim.traces.training import codec_calibrate as cc

    resolved = []
    monkeypatch.setattr(cc, "resolve_device", lambda name: resolved.append(name) or "cuda")
    monkeypatch.setattr(cc, "measure_device", lambda *a, **k: pytest.fail("measured"))
    with pytest.raises(ConfigError) as err:
        api.calibrate_codec(tmp_path / "c.toml")
    assert resolved == ["auto"]
    assert str(err.value) == (
        "--codec on cuda: name the GPU's preset with --device-preset (e.g. H100)"
    )

    class Reached(Exception):
        pass

    def measure(*a, **k):
        raise Reached

    monkeypatch.setattr(cc, "measure_device", measure)
    with pytest.raises(Reached):  # a GPU preset: on to measuring
        api.calibrate_codec(tmp_path / "c.toml", preset="H100")


# -- save: what a frame needs, and what the header and table get from the trace --------------


def test_save_writes_throughput_from_the_traces_batch_and_keeps_an_earlier_table(tmp_path):
    import json

    import pandas as pd

    from vgcsim.core.outdir import OutputError

    df = api.predict(SAMPLE, "10GbE", world_sizes=[4])
    out = api.save(df, tmp_path / "r", SAMPLE, "10GbE")
    table = pd.read_parquet(out / "results.parquet")
    batch = json.loads((SAMPLE / "header.json").read_text(encoding="utf-8"))[
        "batch_size_per_worker"
    ]
    assert batch == 32
    expected = 32 * table["world_size"] / table["step_s"]
    assert (table["throughput_samples_per_s"] - expected).abs().max() <= 1e-9 * expected.max()
    with pytest.raises(OutputError, match="pass --overwrite"):
        api.save(df, tmp_path / "r", SAMPLE, "10GbE")  # an earlier table stays by default
    # the replay's seed is recorded only for the rule that draws with it
    assert df.attrs["options"]["seed"] == 0 and df.attrs["options"]["rule"] == "modulo"
    _, header = read_results(out)
    assert header["extrapolation"] == {"rule": "modulo", "seed": None}


@pytest.mark.parametrize("given", [{}, {"trace": SAMPLE}, {"cluster": "10GbE"}])
def test_save_needs_both_the_trace_and_the_cluster_of_a_predict_frame(tmp_path, given):
    df = api.predict(SAMPLE, "10GbE", world_sizes=[4])
    with pytest.raises(ResultsError) as err:
        api.save(df, tmp_path / "r", **given)
    assert str(err.value) == "save a predict or simulate frame with its trace and cluster"


@pytest.mark.parametrize("given", [{"trace": SAMPLE}, {"cluster": "10GbE"}])
def test_save_refuses_a_trace_or_a_cluster_beside_a_frame_that_names_its_own(tmp_path, given):
    df = api.predict(SAMPLE, "10GbE", world_sizes=[4])
    df.attrs = {"traces": [{"name": "t"}], "cluster": {"name": "10GbE"}, "options": {}}
    with pytest.raises(ResultsError, match="names its own traces and cluster"):
        api.save(df, tmp_path / "r", **given)


def test_a_frame_naming_its_own_traces_is_saved_with_the_default_extrapolation(tmp_path):
    df = api.predict(SAMPLE, "10GbE", world_sizes=[4])
    df.attrs = {"traces": [{"name": "t"}], "cluster": {"name": "10GbE"}, "options": {}}
    _, header = read_results(api.save(df, tmp_path / "r"))
    assert header["extrapolation"] == {"rule": "modulo", "seed": None}
    assert header["traces"] == [{"name": "t"}] and header["cluster"] == {"name": "10GbE"}


def test_save_refuses_a_frame_of_two_sources_naming_them(tmp_path):
    import pandas as pd

    both = pd.concat(
        [
            api.predict(SAMPLE, "10GbE", world_sizes=[4]),
            api.simulate(SAMPLE, "10GbE", world_sizes=[4]),
        ]
    )
    with pytest.raises(ResultsError) as err:
        api.save(both, tmp_path / "r", SAMPLE, "10GbE")
    assert str(err.value) == "save one source per result table, got ['predicted', 'simulated']"


def test_predict_names_itself_in_a_misspelt_option_and_a_wrong_config():
    with pytest.raises(UnknownNameError) as err:
        api.predict(SAMPLE, "10GbE", world_sizes=[4], nope=1)
    assert str(err.value).startswith("unknown predict option 'nope'; valid: ")
    with pytest.raises(ConfigError) as err:
        api.predict(SAMPLE, "10GbE", config=object())
    assert str(err.value) == "predict config must be a PredictOptions, got object"


def test_scenario_by_name_applies_its_overrides_and_says_what_made_the_frame():
    run = api.scenario("paper", overrides=["links=1GbE", "world_sizes=[2, 8]"])
    assert sorted(run.frame["world_size"].unique()) == [2, 8]
    attrs = run.frame.attrs
    assert attrs["source"] == "predicted" and attrs["traces"] == []
    assert attrs["options"]["scenario"] == "paper" and attrs["options"]["links"] == ["1GbE"]
    assert [n["name"] for n in attrs["options"]["nets"]] == ["resnet50", "vgg_like"]
    assert [m["compressor"] for m in attrs["options"]["methods"]] == ["variance", "hybrid", "qsgd"]
    assert "Made by: `vgcsim.api.scenario`" in run.markdown  # the default command it quotes
    assert "32 samples per rank." in run.markdown  # the scenario's batch
    small = api.scenario(overrides=["links=1GbE", "world_sizes=[2]", "batch_size_per_worker=8"])
    assert "8 samples per rank." in small.markdown
    with pytest.raises(UnknownNameError, match="unknown scenario 'nope'"):
        api.scenario("nope")


def test_simulate_run_draws_timelines_up_to_the_rank_limit_and_reports_progress():
    calls = []
    run = api.simulate_run(
        SAMPLE,
        "10GbE",
        world_sizes=[2, 4],
        timeline_steps=[0],
        timeline_max_ranks=2,
        progress=calls.append,
    )
    assert {t.world_size for t in run.timelines} == {2} and {t.step for t in run.timelines} == {0}
    assert sorted(run.frame["world_size"].unique()) == [2, 4]
    assert calls and all(c > 0 for c in calls)
    assert run.paths_run and run.frame.attrs["options"]["paths_run"] == run.paths_run
    every = api.simulate_run(SAMPLE, "10GbE", world_sizes=[2, 4], timeline_steps=[0])
    assert {t.world_size for t in every.timelines} == {2, 4}
    with pytest.raises(UnknownNameError) as err:
        api.simulate_run(SAMPLE, "10GbE", world_sizes=[2], nope=1)
    assert str(err.value).startswith("unknown simulate option 'nope'; valid: ")


# -- the demo's paper-size traces, synthesized alone ------------------------------------------


def _variance_trace(batch):
    """The committed variance trace, its header's batch per worker replaced (None: left out)."""
    trace = api.load_trace(api.DEMO_TRACES / "variance")
    if batch is None:
        trace.header.pop("batch_size_per_worker", None)
    else:
        trace.header["batch_size_per_worker"] = batch
    return trace


@pytest.mark.parametrize(("batch", "expected"), [(16, 16), (None, 32)])
def test_paper_traces_take_the_variance_traces_settings_and_the_demos_seed(
    tmp_path, batch, expected
):
    from vgcsim.reports.demo_notes import settled_density

    var = _variance_trace(batch)
    said = []
    cfg = api.DemoConfig(paper_nets=("vgg_like",), paper_steps=1, seed=5)
    out = api._paper_traces(cfg, {"variance": var}, tmp_path / "s", said.append)
    assert out == {"vgg_like": tmp_path / "s" / "vgg_like"}
    made = api.load_trace(out["vgg_like"]).header["config"]
    density = settled_density(var)
    assert (made["layers"], made["seed"], made["steps"]) == ("vgg_like", 5, 1)
    assert (made["workers"], made["batch_size_per_worker"]) == (int(var.workers), expected)
    assert said == [f"synthesized vgg_like at {density * 100:.2g} % density -> {out['vgg_like']}"]
    # a second demo run writes them again over its own
    again = api._paper_traces(cfg, {"variance": var}, tmp_path / "s", said.append)
    assert again == out and len(said) == 2


def test_the_paper_trace_line_gives_the_density_in_percent_to_two_figures(tmp_path, monkeypatch):
    from vgcsim.reports import demo_notes

    monkeypatch.setattr(demo_notes, "settled_density", lambda trace: 0.01245)
    said = []
    cfg = api.DemoConfig(paper_nets=("vgg_like",), paper_steps=1)
    out = api._paper_traces(cfg, {"variance": _variance_trace(32)}, tmp_path / "s", said.append)
    assert said == [f"synthesized vgg_like at 1.2 % density -> {out['vgg_like']}"]
    assert api.load_trace(out["vgg_like"]).header["config"]["density"] == 0.01245


def test_trace_header_of_a_loaded_trace_is_its_own_header():
    trace = api.load_trace(api.DEMO_TRACES / "dense")
    trace.header["note"] = "held in memory"
    assert api.trace_header(trace) is trace.header


def test_no_paper_traces_without_a_variance_trace_or_without_nets(tmp_path):
    dense = api.load_trace(api.DEMO_TRACES / "dense")
    with_nets = api.DemoConfig(paper_nets=("vgg_like",), paper_steps=1)
    assert api._paper_traces(with_nets, {"dense": dense}, tmp_path / "a", print) == {}
    none = api.DemoConfig(paper_nets=())
    assert api._paper_traces(none, {"variance": _variance_trace(32)}, tmp_path / "b", print) == {}
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def test_the_demo_records_a_missing_trace_once_and_reuses_it_after(tmp_path, monkeypatch):
    """With ``traces="record"`` the demo records each method's trace into its folder (here a
    stand-in recorder copies the committed trace under the configuration it was asked for),
    and a second run into the same folder reuses the complete trace instead."""
    import json
    import shutil

    from vgcsim.core.config import to_dict
    from vgcsim.traces.training import record as recorder

    asked = []

    def fake(cfg, run_dir, *, progress=False, overwrite=False):
        asked.append((cfg, Path(run_dir), progress, overwrite))
        shutil.copytree(api.DEMO_TRACES / "variance", run_dir, dirs_exist_ok=True)
        head = json.loads((Path(run_dir) / "header.json").read_text(encoding="utf-8"))
        head["config"] = to_dict(recorder.resolve_config(cfg))
        (Path(run_dir) / "header.json").write_text(json.dumps(head), encoding="utf-8")
        return Path(run_dir)

    monkeypatch.setattr(recorder, "record", fake)
    out = tmp_path / "demo"
    cfg = api.DemoConfig(
        traces="record",
        methods=("variance",),
        clusters=("10GbE",),
        world_sizes=(2,),
        sim_steps=1,
        paper_nets=(),
    )
    calls = []
    run = api.demo(cfg, out, progress=lambda *a: calls.append(a))
    where = out / "traces" / "variance"
    assert [(c.compressor.name, d, p, o) for c, d, p, o in asked] == [
        ("variance", where, True, True)
    ]
    assert asked[0][0] == api._demo_record_config(cfg, "variance")
    assert calls[0] == (1, 4, f"recording variance: 500 steps, 4 workers -> {where}")
    assert [c[:2] for c in calls] == [(1, 4), (2, 4), (3, 4), (4, 4)]
    assert run.traces == {"variance": where}
    assert run.notes[0].endswith(f" Traces recorded into {out / 'traces'}.")
    calls.clear()
    api.demo(cfg, out, overwrite=True, progress=lambda *a: calls.append(a))
    assert len(asked) == 1 and calls[0] == (1, 4, f"reusing complete trace {where}")


def test_a_trace_without_a_batch_size_simulates_without_a_throughput():
    """A header without ``batch_size_per_worker``, priced on its recorded compute: the step
    times are simulated and the throughput column stays empty instead of failing."""
    with_batch = api.load_trace(api.DEMO_TRACES / "variance")
    without = api.load_trace(api.DEMO_TRACES / "variance")
    without.header.pop("batch_size_per_worker")
    a = api.simulate(with_batch, "10GbE", [2], compute="trace", max_steps=1)
    b = api.simulate(without, "10GbE", [2], compute="trace", max_steps=1)
    assert a["throughput_samples_per_s"].notna().all()
    assert b["throughput_samples_per_s"].isna().all()
    assert a["step_s"].tolist() == b["step_s"].tolist()


def test_the_verdict_names_the_method_by_its_compressor_and_parameters():
    """The sample trace's header: variance with α = 2 (and other parameters the label does
    not show); the line names it as the report does and says what decides it."""
    trace = api.load_trace(SAMPLE)
    line = api._verdict(api.predict(trace, "10GbE", [2, 8]), trace)
    assert line == (
        "verdict: On 10GbE, variance α=2 never beats dense allreduce for P ≤ 8; its best is "
        "0.608× at P = 8 (predicted: compress + decode 0.32 ms and communication 0.3 ms "
        "against 0.4 ms of dense allreduce)."
    )
    trace.header["compressor"]["params"]["alpha"] = 1.5
    assert "variance α=1.5 never beats" in api._verdict(api.predict(trace, "10GbE", [2, 8]), trace)
    dense = api.load_trace(api.DEMO_TRACES / "dense")
    assert api._verdict(api.predict(dense, "10GbE", [2, 8]), dense) == (
        "verdict: no compressed exchange to compare with dense allreduce (a dense trace)"
    )


def test_a_report_folder_is_marked_as_the_report_commands_by_default(tmp_path):
    def write(folder: Path) -> Path:
        (folder / "index.html").write_text("<html></html>", encoding="utf-8")
        return folder / "index.html"

    assert api.report_folder(tmp_path / "r", write, False) == tmp_path / "r" / "index.html"
    assert read_marker(tmp_path / "r")["command"] == "vgcsim report"


def test_the_api_parses_algorithm_lists_as_the_models_do():
    from vgcsim.models.predict import ALLGATHERV_ALGORITHMS

    assert api.parse_algorithms(" ring , bruck ,", "allgatherv") == ("ring", "bruck")
    assert api.parse_algorithms("all", "allgatherv") == ALLGATHERV_ALGORITHMS
    assert api.parse_algorithms("recursive_doubling", "allreduce") == ("recursive_doubling",)
    with pytest.raises(ConfigError, match="ring"):
        api.parse_algorithms("nope", "allreduce")


def test_timeline_files_write_the_runs_timelines_and_link_bytes(tmp_path):
    """The timelines of one step at two world sizes (one per method and encoding):
    ``timeline.json`` holds the Chrome trace ``write_chrome_trace`` writes of them all,
    ``links.csv`` their link tables one after the other with a fresh row count and no index
    column; no timelines, no files."""
    import pandas as pd

    from vgcsim.simulator.timeline import write_chrome_trace

    run = api.simulate_run(SAMPLE, "10GbE", [2, 4], max_steps=1, timeline_steps=[0])
    assert len(run.timelines) > 1
    files = api.timeline_files(run.timelines)
    assert set(files) == {"timeline.json", "links.csv"}
    for name, write in files.items():
        write(tmp_path / name)
    write_chrome_trace(run.timelines, tmp_path / "expected.json")
    assert (tmp_path / "timeline.json").read_bytes() == (tmp_path / "expected.json").read_bytes()
    expected = pd.concat([t.link_table() for t in run.timelines], ignore_index=True)
    links = pd.read_csv(tmp_path / "links.csv")
    assert list(links.columns) == list(expected.columns)
    assert list(links.index) == list(range(len(expected)))
    assert len(links) > len(run.timelines[0].link_table())
    assert api.timeline_files([]) == {}


def test_report_writes_into_out_report_by_default_titled_and_marked_as_the_apis(
    tmp_path, monkeypatch
):
    from vgcsim.core.outdir import OutputError

    monkeypatch.chdir(tmp_path)
    out = api.save(api.predict(SAMPLE, "10GbE", world_sizes=[2]), tmp_path / "p", SAMPLE, "10GbE")
    html = api.report([out])
    assert html == Path("out/report/index.html")
    assert "<title>vgcsim report</title>" in html.read_text(encoding="utf-8")
    assert read_marker(tmp_path / "out" / "report")["command"] == "vgcsim api.report"
    with pytest.raises(OutputError, match="--overwrite"):
        api.report([out])
    again = api.report([out], title="Again", overwrite=True)
    assert "<title>Again</title>" in again.read_text(encoding="utf-8")


def test_a_missing_training_module_becomes_one_line_naming_the_extra():
    """Inside ``_TrainingExtra(what)``: a missing module of the training extra (by its top
    package) is :class:`MissingExtraError` led by ``what``; any other missing module, a
    nameless one, or another error passes through as it is."""
    with pytest.raises(api.MissingExtraError) as err:
        with api._TrainingExtra("doing this "):
            raise ModuleNotFoundError("no torch.nn", name="torch.nn")
    assert str(err.value) == (
        f"doing this needs the training extra (torch is not installed): {api.TRAIN_EXTRA_HINT}"
    )
    for raised in (
        ModuleNotFoundError("no yaml", name="yaml"),
        ModuleNotFoundError("no name"),
        ValueError("not an import"),
    ):
        with pytest.raises(type(raised)) as err:
            with api._TrainingExtra("doing this "):
                raise raised
        assert err.value is raised
    with api._TrainingExtra():
        pass


def test_the_measured_allgatherv_is_what_the_run_used():
    """A recording on real ranks says in its header whether its all_gather was padded (the
    default: gloo) or exact (ring)."""
    trace = api.load_trace(SAMPLE)
    trace.header.pop("distributed", None)
    assert api._measured_allgatherv(trace) == "padded"
    trace.header["distributed"] = {"padded_allgather": False}
    assert api._measured_allgatherv(trace) == "ring"
    trace.header["distributed"] = {"padded_allgather": True}
    assert api._measured_allgatherv(trace) == "padded"


def test_a_hook_trace_was_exchanged_as_the_hook_does(tmp_path):
    from tests.conftest import write_hook_trace
    from vgcsim.traces.inputs import default_allgatherv

    hooked = api.load_trace(write_hook_trace(tmp_path))
    hooked.header["distributed"] = {"padded_allgather": False}  # not what decides it
    assert api._measured_allgatherv(hooked) == default_allgatherv(hooked)
    assert default_allgatherv(hooked) not in ("padded", "ring")


def test_clusters_lists_the_apis_presets_and_shows_the_apis_dict(capsys):
    """``vgcsim clusters`` is parse → api → print: its listing names every preset the API
    returns, and ``vgcsim clusters NAME`` prints ``api.cluster_dict(NAME)``."""
    from vgcsim.cli import main

    presets = api.presets()
    assert "10GbE" in presets.clusters and presets.links and presets.framings
    assert presets.devices
    assert main(["clusters"]) == 0
    listed = {line.split()[0] for line in capsys.readouterr().out.splitlines() if line.strip()}
    for names in (presets.clusters, presets.links, presets.devices):
        assert set(names) <= listed
    assert {f.name for f in presets.framings.values()} <= listed
    assert main(["clusters", "10GbE"]) == 0
    shown = json.loads(json.dumps(api.cluster_dict("10GbE")))  # tuples as JSON lists
    assert json.loads(capsys.readouterr().out) == shown
    spec = api.load_cluster("10GbE")
    assert api.cluster_dict(spec) == api.cluster_dict("10GbE")
    assert api.cluster_dict("10GbE")["link"]["bandwidth_Bps"] == spec.link.bandwidth_Bps


def test_a_sweeps_time_sources_follow_its_compute_and_name_each_trace_by_its_folder(tmp_path):
    """``sweep.compute`` changes where the jobs' local times come from, and the header says
    so; a trace given with a trailing slash is named by its folder."""
    cfg = tmp_path / "sweep.toml"
    cfg.write_text(
        f'[sweep]\ntraces = ["{SAMPLE.as_posix()}/"]\nworld_sizes = [2]\ncompute = "trace"\n'
        'scheduler = "processes"\nprocesses = 1\n\n[simulate]\nmax_steps = 1\n',
        encoding="utf-8",
    )
    run = api.sweep(cfg)
    assert run.frame.attrs["traces"] == [{"path": f"{SAMPLE.as_posix()}/", "name": "sample_trace"}]
    sources = run.frame.attrs["options"]["time_sources"]
    assert list(sources) == ["sample_trace"]
    assert sources["sample_trace"]["compute_mode"] == "trace"
    assert sources["sample_trace"]["compute_s"].startswith("measured")
    assert set(run.frame["compute_mode"]) == {"trace"}
    assert run.config.sweep.compute == "trace"


@pytest.mark.parametrize(
    ("call", "says"),
    [
        (lambda: api.predict(None, "10GbE", [2]), "a trace is a run folder's path or a Trace"),
        (lambda: api.predict([SAMPLE], "10GbE", [2]), "a trace is a run folder's path"),
        (lambda: api.predict(SAMPLE, None, [2]), "a cluster is a preset name"),
        (lambda: api.predict(SAMPLE, "10GbE", [2.5]), "world sizes must be integers, got 2.5"),
        (lambda: api.predict(SAMPLE, "10GbE", [True]), "world sizes must be integers, got True"),
        (lambda: api.predict(SAMPLE, "10GbE", 2.5), "expected a list of integers"),
        (lambda: api.advise(None, "10GbE", [2]), "traces: expected a path or a list"),
        (lambda: api.advise([SAMPLE], "10GbE", [2], target_accuracy="x"), "a number in (0, 1]"),
        (lambda: api.advise([SAMPLE], "10GbE", [2], bucket_bytes="x"), "bucket_bytes must be"),
        (lambda: api.report_run(5), "results: expected a path or a list"),
        (lambda: api.report_run([SAMPLE], title=None), "title must be a string"),
        (lambda: api.report_run([SAMPLE], out_dir=None), "out_dir must be a folder path"),
    ],
)
def test_an_argument_of_the_wrong_kind_is_a_config_error_naming_it(call, says):
    """From a notebook a wrong type is the project's error with its message, not a TypeError
    from deep inside (nor a string read as a list of one-letter paths)."""
    from vgcsim.core.errors import ConfigError

    with pytest.raises(ConfigError) as err:
        call()
    assert says in str(err.value)


def test_one_world_size_and_one_trace_path_need_no_list():
    assert api.predict(SAMPLE, "10GbE", 4).equals(api.predict(SAMPLE, "10GbE", [4]))
    one = api.advise(str(api.DEMO_TRACES / "dense"), "10GbE", [4])
    assert one.ranked.equals(api.advise([str(api.DEMO_TRACES / "dense")], "10GbE", [4]).ranked)
