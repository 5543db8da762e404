"""The notebook API runs the committed sample trace through predict, simulate, save and report."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from no_training_extra import api_call_without_training_extra

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
    done = api_call_without_training_extra(f"api.record(out_dir={str(tmp_path / 'run')!r})")
    assert done.returncode == 3, done.stderr
    assert "vgcsim[train]" in done.stdout and "torch" in done.stdout
    assert not (tmp_path / "run").exists()


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
    assert list(options) == ["sweep", "simulate", "summary"]
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
    assert sorted(cli["options"]) == ["simulate", "summary", "sweep"]
    assert cli["options"]["summary"]["jobs"] == 4


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
    assert sorted(run.frame["world_size"].unique()) == [2, 16]
    assert run.crossover.to_csv(index=False) == (tmp_path / "cli" / "crossover.csv").read_text()
    # the summary the command printed and saved, with the command line it quotes
    import shlex

    line = "vgcsim " + " ".join(shlex.quote(a) for a in sys.argv[1:])
    md = (tmp_path / "cli" / "scenario.md").read_text()
    assert md in printed and line in md
    assert md.replace(line, "same") == run.markdown


def test_an_unknown_scenario_or_key_is_one_clear_error():
    from vgcsim.core.errors import ConfigError

    with pytest.raises(ConfigError, match="paper"):
        api.scenario_config("nope")
    with pytest.raises(ConfigError, match="bogus"):
        api.scenario_config("paper", overrides=["bogus=1"])
