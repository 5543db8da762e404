"""One CLI grammar: -o/--out, --set, the shared replay flags, --world-sizes and option names."""

from __future__ import annotations

import pytest

from vgcsim.cli import build_parser, main
from vgcsim.core.errors import ConfigError
from vgcsim.core.worldsizes import DEFAULT_WORLD_SIZES, MAX_WORLD_SIZE, parse_world_sizes

SAMPLE = "tests/data/sample_trace"

#: The smallest argv of each command that writes something, before its output option.
WRITERS = {
    "demo": ["demo"],
    "record": ["record"],
    "trace synth": ["trace", "synth"],
    "predict": ["predict", "RUN", "--cluster", "10GbE"],
    "simulate": ["simulate", "RUN", "--cluster", "10GbE"],
    "sweep": ["sweep", "sweep.toml"],
    "scenario": ["scenario", "paper"],
    "report": ["report"],
    "calibrate": ["calibrate"],
    "validate": ["validate", "RUN", "--cluster", "10GbE"],
    "clusters": ["clusters"],
    "trace info": ["trace", "info", "RUN"],
    "trace validate": ["trace", "validate", "RUN"],
    "collective": ["collective", "10GbE", "allreduce/ring", "--sizes-bytes", "4"],
    "advise": ["advise", "RUN", "--cluster", "10GbE"],
}

#: Commands with a config: each takes --set KEY=VALUE (demo and trace synth too).
CONFIGURED = [
    "record",
    "predict",
    "simulate",
    "sweep",
    "scenario",
    "calibrate",
    "demo",
    "trace synth",
]


def test_the_table_covers_every_subcommand():
    from vgcsim.cli import SUBCOMMANDS

    assert {c.split()[0] for c in WRITERS} == set(SUBCOMMANDS)


@pytest.mark.parametrize("command", sorted(WRITERS))
@pytest.mark.parametrize("spelling", ["-o", "--out"])
def test_every_subcommand_takes_o_and_out(command, spelling):
    args = build_parser().parse_args([*WRITERS[command], spelling, "somewhere"])
    assert str(args.out) == "somewhere"
    assert getattr(args, "overwrite", False) is False


@pytest.mark.parametrize("command", ["predict", "scenario", "calibrate"])
def test_output_is_no_longer_spelled_output(command, capsys):
    with pytest.raises(SystemExit) as exc:
        build_parser().parse_args([*WRITERS[command], "--output", "somewhere"])
    assert exc.value.code == 2


@pytest.mark.parametrize("command", CONFIGURED)
def test_every_configured_command_takes_set(command):
    args = build_parser().parse_args([*WRITERS[command], "-o", "x", "--set", "a=1", "--set", "b=2"])
    sets = getattr(args, "set", None) or getattr(args, "overrides", None)
    assert sets == ["a=1", "b=2"]


#: Flags predict and simulate share, each a shortcut for a --set key of both configs
#: (flag, value, --set item, extra arguments that make the setting matter).
SHARED = [
    ("--encoding", "coo64", "encoding=coo64", []),
    ("--extrapolation", "resample", "rule=resample", []),
    ("--seed", "3", "seed=3", ["--extrapolation", "resample"]),
    ("--overlap", "bucketed", "overlap=bucketed", []),
    ("--bucket-size", "1MiB", "bucket_bytes=1048576", ["--overlap", "bucketed"]),
    ("--dense-encodings", "fp32,bf16", "dense_encodings=fp32,bf16", []),
    ("--no-size-exchange", None, "size_exchange=false", []),
    ("--per-step", None, "per_step=true", []),
]


def _run(argv, out):
    from vgcsim.core.results import read_results

    assert main([*argv, "-o", str(out)]) == 0
    df, header = read_results(out)
    return df, {k: header[k] for k in ("options", "extrapolation")}


_PLAIN: dict[tuple, tuple] = {}


@pytest.mark.parametrize("flag, value, setting, extra", SHARED, ids=[s[0] for s in SHARED])
@pytest.mark.parametrize("command", ["predict", "simulate"])
def test_flags_and_set_keys_agree(command, flag, value, setting, extra, tmp_path, capsys):
    import pandas as pd

    base = [command, SAMPLE, "--cluster", "10GbE", "--world-sizes", "2,8", *extra]
    if command == "simulate":
        base += ["--set", "max_steps=3"]
    by_flag, head_flag = _run([*base, flag, *([value] if value else [])], tmp_path / "flag")
    by_set, head_set = _run([*base, "--set", setting], tmp_path / "set")
    if tuple(base) not in _PLAIN:  # the run without the setting, once per command and extras
        _PLAIN[tuple(base)] = _run(base, tmp_path / "plain")
    plain, head_plain = _PLAIN[tuple(base)]
    pd.testing.assert_frame_equal(by_flag, by_set)
    assert head_flag == head_set
    # the setting is live: it changed the rows or what the header says was run
    assert head_flag != head_plain or not by_flag.equals(plain)


def test_collective_flags_set_the_same_key_in_both_commands(tmp_path, capsys):
    base = ["--cluster", "10GbE", "--world-sizes", "4", "--allreduce", "recursive_doubling"]
    _, pred = _run(["predict", SAMPLE, *base], tmp_path / "p")
    _, sim = _run(["simulate", SAMPLE, *base, "--set", "max_steps=2"], tmp_path / "s")
    assert pred["options"]["allreduce"] == ["recursive_doubling"]
    assert sim["options"]["allreduce"] == ["recursive_doubling"]
    _, sim2 = _run(
        ["simulate", SAMPLE, "--cluster", "10GbE", "--world-sizes", "4", "--set", "max_steps=2"]
        + ["--set", "allreduce=recursive_doubling"],
        tmp_path / "s2",
    )
    assert sim2["options"]["allreduce"] == sim["options"]["allreduce"]
    argv = ["simulate", SAMPLE, *base[:-1], "ring,recursive_doubling", "-o", str(tmp_path / "x")]
    assert main(argv) == 2
    assert "one algorithm at a time" in capsys.readouterr().err


# -- world sizes ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, sizes",
    [
        ("8,16,64", (8, 16, 64)),
        ("2:1024:x2", tuple(2**k for k in range(1, 11))),
        ("3:81:x3", (3, 9, 27, 81)),
        ("8:64:+8", (8, 16, 24, 32, 40, 48, 56, 64)),
        ("1,2:16:x2,24", (1, 2, 4, 8, 16, 24)),
        ("10,20,...,50", (10, 20, 30, 40, 50)),  # doubling misses 50: only counting fits
        ("2,4,...,10", (2, 4, 6, 8, 10)),
        ("64,8,8", (8, 64)),
    ],
)
def test_world_sizes_syntax(text, sizes):
    assert parse_world_sizes(text) == sizes


@pytest.mark.parametrize(
    "text, message",
    [
        ("2,4,...,1024", "ambiguous: write 2:1024:x2"),
        ("1,2,...,8", "ambiguous"),
        ("2:1000:x2", "1000 is not reached"),
        ("8:60:+8", "60 is not reached"),
        ("2:64", "not A:B:xR"),
        ("2:64:x1", "ratio >= 2"),
        ("0,2", "0 is not >= 1"),
        ("10000000", f"exceeds the largest supported world size, {MAX_WORLD_SIZE}"),
        ("1:100000000:+1", "exceeds the largest"),
        ("a,b", "is not an integer"),
        ("", "empty"),
    ],
)
def test_world_sizes_refused(text, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(")):
        parse_world_sizes(text)


WORLD_SIZE_COMMANDS = {
    "predict": ["predict", SAMPLE, "--cluster", "10GbE"],
    "simulate": ["simulate", SAMPLE, "--cluster", "10GbE"],
    "scenario": ["scenario", "paper"],
    "demo": ["demo"],
}


@pytest.mark.parametrize("bad", ["2,4,...,1024", "10000000"])
@pytest.mark.parametrize("command", sorted(WORLD_SIZE_COMMANDS))
def test_bad_world_sizes_are_one_line_and_exit_2(command, bad, tmp_path, capsys):
    out = tmp_path / "o"
    assert main([*WORLD_SIZE_COMMANDS[command], "--world-sizes", bad, "-o", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "world sizes" in err[0] and "Traceback" not in err[0]
    assert not out.exists()


@pytest.mark.parametrize("bad", ["2,4,...,1024", "10000000"])
def test_sweep_refuses_bad_world_sizes_in_flag_set_and_file(bad, tmp_path, capsys):
    cfg = tmp_path / "sweep.toml"
    cfg.write_text(f'[sweep]\ntraces = ["{SAMPLE}"]\nworld_sizes = "{bad}"\n')
    assert main(["sweep", str(cfg), "--dry-run", "-o", str(tmp_path / "o")]) == 2
    cfg.write_text(f'[sweep]\ntraces = ["{SAMPLE}"]\n')
    for extra in (["--world-sizes", bad], ["--set", f"sweep.world_sizes={bad}"]):
        assert main(["sweep", str(cfg), "--dry-run", *extra, "-o", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 3 and all("world sizes" in line for line in err)


def test_a_sweep_dry_run_refuses_what_the_run_would_refuse(tmp_path, capsys):
    """A missing trace, -o naming a file, -o holding another command's output: one line,
    exit 2, as the sweep itself; nothing is created."""
    cfg = tmp_path / "sweep.toml"
    afile = tmp_path / "afile"
    afile.write_text("mine")
    other = tmp_path / "adv"
    assert (
        main(["advise", SAMPLE, "--cluster", "10GbE", "--world-sizes", "4", "-o", str(other)]) == 0
    )
    capsys.readouterr()
    cases = [
        ('"/no/such/trace"', tmp_path / "o", "trace not found: /no/such/trace"),
        (f'"{SAMPLE}"', afile, "it is not a folder"),
        (f'"{SAMPLE}"', other, "already holds vgcsim advise output"),
    ]
    for trace, out, says in cases:
        cfg.write_text(f"[sweep]\ntraces = [{trace}]\nworld_sizes = [4]\n")
        assert main(["sweep", str(cfg), "--dry-run", "-o", str(out)]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and says in err[0], err
    assert not (tmp_path / "o").exists() and afile.read_text() == "mine"


def test_one_default_world_sizes(tmp_path, capsys):
    """predict, simulate (flag default), scenario, sweep and the API share 2:1024:x2."""
    import inspect

    from vgcsim import api
    from vgcsim.models.predict import PredictOptions
    from vgcsim.models.scenario import SCENARIOS
    from vgcsim.simulator.sweep import SweepConfig

    default = parse_world_sizes(DEFAULT_WORLD_SIZES)
    assert default == tuple(2**k for k in range(1, 11))
    assert PredictOptions().world_sizes == default
    assert SCENARIOS["paper"]().world_sizes == default
    assert SweepConfig(traces=(SAMPLE,)).world_sizes == default
    assert inspect.signature(api.predict).parameters["world_sizes"].default is None
    assert api._world_sizes(None) == default
    out = tmp_path / "p"
    assert main(["predict", SAMPLE, "--cluster", "10GbE", "-o", str(out)]) == 0
    from vgcsim.core.results import read_results

    df, _ = read_results(out)
    assert tuple(sorted(set(df["world_size"]))) == default
    cfg = tmp_path / "sweep.toml"
    cfg.write_text(f'[sweep]\ntraces = ["{SAMPLE}"]\n')
    capsys.readouterr()
    assert main(["sweep", str(cfg), "--dry-run", "-o", str(tmp_path / "o")]) == 0
    assert capsys.readouterr().out.strip().splitlines()[-1] == f"{len(default)} jobs"


def test_set_world_sizes_reads_the_same_syntax(tmp_path, capsys):
    out = tmp_path / "sc"
    assert main(["scenario", "paper", "--set", "world_sizes=4:16:x2", "-o", str(out)]) == 0
    from vgcsim.core.results import read_results

    df, _ = read_results(out)
    assert sorted(set(df["world_size"])) == [4, 8, 16]


# -- distinct names for distinct meanings ----------------------------------------------------


@pytest.mark.parametrize(
    "argv",
    [
        ["sweep", "s.toml", "-o", "x", "--workers", "2"],  # worker processes: --processes
        ["validate", "RUN", "--cluster", "c", "--steps", "3"],  # rows printed: --show-steps
        ["trace", "info", "RUN", "--layers"],  # per-layer listing: --per-layer
        ["calibrate", "-o", "c.toml", "--device", "H100"],  # preset written: --device-preset
    ],
    ids=["sweep-workers", "validate-steps", "info-layers", "calibrate-device"],
)
def test_options_that_meant_something_else_are_renamed(argv, capsys):
    with pytest.raises(SystemExit) as exc:
        build_parser().parse_args(argv)
    assert exc.value.code == 2


def test_renamed_options_parse():
    parse = build_parser().parse_args
    assert parse(["sweep", "s.toml", "-o", "x", "--processes", "2"]).processes == 2
    assert parse(["validate", "RUN", "--cluster", "c", "--show-steps", "3"]).show_steps == 3
    assert parse(["trace", "info", "RUN", "--per-layer"]).per_layer is True
    assert parse(["calibrate", "-o", "c.toml", "--device-preset", "H100"]).device == "H100"
    # --workers and --steps keep one meaning: emulated workers W and training steps
    assert parse(["record", "--workers", "8", "--steps", "5"]).workers == 8
    assert parse(["trace", "synth", "-o", "t", "--workers", "8", "--steps", "5"]).steps == 5


# -- the README table --------------------------------------------------------------------


def _readme_commands() -> dict[str, str]:
    """command name -> the first command line of its README table row."""
    import re
    from pathlib import Path

    text = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    rows = {}
    for line in text.splitlines():
        m = re.match(r"\| `(vgcsim [^`]+)`", line)
        if m:
            cmd = m.group(1).replace("\\|", "|")
            rows[cmd.split()[1]] = cmd
    return rows


def test_the_readme_table_lists_every_command_in_the_current_grammar():
    import re
    import shlex

    from vgcsim.cli import SUBCOMMANDS

    rows = _readme_commands()
    assert set(rows) == set(SUBCOMMANDS)
    parser = build_parser()
    for name, cmd in rows.items():
        line = re.sub(r"\[[^\]]*\]", "", cmd).replace("…", "")  # optional parts, ellipses
        args = parser.parse_args(shlex.split(line)[1:])
        assert args.command == name


def test_calibrate_set_reaches_the_sweep_config(tmp_path, monkeypatch, capsys):
    import json

    import vgcsim.traces.training.distributed_launch as launch

    seen: dict = {}

    def no_launch(argv, nprocs, **kwargs):
        seen.update(json.loads(argv[2]))
        raise ConfigError("stopped before measuring")

    monkeypatch.setattr(launch, "launch_local", no_launch)
    out = str(tmp_path / "c.toml")
    assert main(["calibrate", "--repeats", "9", "--set", "repeats=4", "-o", out]) == 2
    assert seen["repeats"] == 4  # --set applies after the flag of the same name
    assert main(["calibrate", "--set", "colour=red", "-o", out]) == 2
    assert "unknown config key 'colour'" in capsys.readouterr().err
