"""The front door: help, version, and exit codes for usage errors."""

from __future__ import annotations

import pytest

from vgcsim.cli import main


def test_help_lists_subcommands(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["--help"])
    assert exc.value.code == 0
    assert "COMMAND" in capsys.readouterr().out


def test_no_command_is_usage_error(capsys):
    assert main([]) == 2


def test_unknown_command_exits_2(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["no-such-command"])
    assert exc.value.code == 2


SAMPLE = "tests/data/sample_trace"


@pytest.mark.parametrize(
    "argv",
    [
        ["predict", SAMPLE, "--cluster", "10GbE", "--world-sizes", "4", "-o"],
        ["simulate", SAMPLE, "--cluster", "10GbE", "--world-sizes", "4", "-o"],
        ["report", "--trace", SAMPLE, "-o"],
    ],
    ids=["predict", "simulate", "report"],
)
def test_output_path_that_is_a_file_is_a_user_error(argv, tmp_path, capsys):
    afile = tmp_path / "afile"
    afile.write_text("")
    assert main([*argv, str(afile)]) == 2
    err = capsys.readouterr().err
    assert "error:" in err and str(afile) in err and "Traceback" not in err


def test_trace_folder_under_a_file_is_a_user_error(tmp_path, capsys):
    afile = tmp_path / "afile"
    afile.write_text("")
    out = afile / "run"
    assert main(["trace", "synth", "-o", str(out), "--steps", "1", "--layers", "vgg_like"]) == 2
    err = capsys.readouterr().err
    assert "cannot create trace folder" in err and "Traceback" not in err


def test_simulate_takes_predicts_world_size_syntax(tmp_path, capsys):
    # README: `vgcsim simulate RUN --world-sizes 2:256:x2`; simulate once rejected predict's syntax
    out = tmp_path / "s"
    argv = ["simulate", SAMPLE, "--cluster", "10GbE", "--world-sizes", "2:8:x2"]
    assert main([*argv, "--set", "max_steps=2", "-o", str(out)]) == 0
    from vgcsim.core.results import read_results

    df, _ = read_results(out)
    assert sorted(set(df["world_size"])) == [2, 4, 8]


@pytest.mark.parametrize(
    "argv",
    [
        ["predict", SAMPLE, "--cluster", "10GbE", "--extrapolation", "resample", "--seed", "-1"],
        ["simulate", SAMPLE, "--cluster", "10GbE", "--world-sizes", "8", "--set", "seed=-1"],
        ["trace", "synth", "--layers", "vgg_like", "--steps", "1", "--seed", "-1"],
        ["record", "--steps", "1", "--seed", "-1", "-q"],
        ["demo", "-q", "--set", "traces=record", "--set", "seed=-1"],
        ["demo", "-q", "--set", "traces=record", "--set", "batch_size=0"],
    ],
    ids=["predict", "simulate", "synth", "record", "demo-seed", "demo-batch"],
)
def test_negative_seed_and_bad_demo_record_options_exit_2(argv, tmp_path, capsys):
    # numpy's default_rng(-1) raised ValueError with a traceback; demo passed bad record
    # options straight to RecordConfig, whose ValueError also escaped
    assert main([*argv, "-o", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert ("must be >=" in err or "must be in [0," in err) and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1
    assert not (tmp_path / "out").exists()


def test_sweep_help_states_the_connect_timeout_sweep_config_defaults_to(capsys):
    """The parser writes the default as text (reading it from SweepConfig would import the
    simulator whenever the parser is built); this holds the two together."""
    import dataclasses
    import re

    from vgcsim.simulator.sweep import SweepConfig

    with pytest.raises(SystemExit):
        main(["sweep", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    stated = re.search(r"sweep\.connect_timeout_s \(([0-9.]+) s\)", text)
    assert stated, text
    field = {f.name: f for f in dataclasses.fields(SweepConfig)}["connect_timeout_s"]
    assert float(stated.group(1)) == field.default


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (
            ["predict", SAMPLE, "--cluster", "10GbE", "--compute", "foo", "-o", "x"],
            "invalid choice",
        ),
        (["collective", "10GbE", "allreduce/ring", "--sizes-bytes", "-4e6"], "--OPTION=VALUE"),
        (["calibrate", "--max-error", "25%"], "invalid float value"),
        (["no-such-command"], "invalid choice"),
    ],
    ids=["choice", "negative", "type", "command"],
)
def test_an_argument_the_parser_refuses_is_one_line_and_exit_2(argv, says, capsys):
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "usage:" not in err, err
    assert says in err and err.startswith("vgcsim") and err.rstrip().endswith("--help)")


COLLECTIVE = ["collective", "10GbE", "allreduce/ring", "--world-size", "8"]


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        ([*COLLECTIVE, "--sizes-bytes", ""], "give at least one size"),
        ([*COLLECTIVE, "--sizes-bytes", "0.3"], "0.3 is not a whole number of bytes"),
        ([*COLLECTIVE, "--sizes-bytes", "1e30"], "not a whole number of bytes up to 1e+15"),
        ([*COLLECTIVE, "--sizes-bytes", "4e6", "--mode", "fifo"], "--engine simulate"),
        (["predict", SAMPLE, "--cluster", "10GbE", "--bucket-size", "3b"], "got 0.375"),
        (["predict", SAMPLE, "--cluster", "10GbE", "--encoding", ""], "--encoding '' names"),
        (["predict", SAMPLE, "--cluster", "10GbE", "--allgatherv", ","], "names nothing"),
        (["predict", SAMPLE, "--cluster", "tests/data"], "is a folder; give a TOML file"),
        (["predict", SAMPLE, "--cluster", "10GbE", "--world-sizes", "2:64:x0"], "ratio >= 2"),
        (["simulate", SAMPLE, "--cluster", "10GbE", "--timeline-max-ranks", "0"], ">= 1, got 0"),
        (["validate", SAMPLE, "--cluster", "10GbE", "--show-steps", "-1"], ">= 0, got -1"),
        (["validate", SAMPLE, "--cluster", "10GbE", "--statistic", "min"], "applies to the rows"),
        (["validate", SAMPLE, "--cluster", "10GbE", "--allgatherv", " "], "names no algorithm"),
        (["clusters", ""], "give a cluster preset name or TOML file"),
        (["trace", "synth", "--layers", "vgg_like", "--compressor", "nope"], "unknown compressor"),
        (["trace", "synth", "--density", "0.1", "--ratio", "1000"], "--ratio and --density both"),
        (["clusters", "10GbE", "--sources"], "--sources annotates the preset tables"),
    ],
)
def test_a_value_that_means_nothing_is_refused_in_one_line(argv, says, tmp_path, capsys):
    out = ["-o", str(tmp_path / "out")] if argv[0] in ("predict", "simulate", "trace") else []
    try:
        code = main([*argv, *out])
    except SystemExit as exc:  # what the argument parser refuses
        code = exc.code
    assert code == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and says in err, err
    assert not (tmp_path / "out").exists()
