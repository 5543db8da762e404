"""`vgcsim report` and `vgcsim demo` as a user runs them."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from no_training_extra import api_call_without_training_extra
from reports_golden import RESULTS, ROOT, TRACE

from vgcsim import api
from vgcsim.cli import main


@pytest.mark.slow
def test_report_cli_writes_html_with_the_target_accuracy_given(tmp_path, capsys, monkeypatch):
    """``vgcsim report`` prints the verdicts, then the page's path; ``--target-accuracy`` (a
    percentage) adds the time-to-accuracy section although no dense trace is given (without a
    target the section is left out and the summary asks for one:
    tests/reports/test_render.py::test_time_to_accuracy_needs_a_target_without_dense_trace)."""
    monkeypatch.chdir(ROOT)
    out = tmp_path / "rep"
    args = ["report", *[str(p.parent) for p in RESULTS], "--trace", str(TRACE), "-o", str(out)]
    assert main([*args, "--target-accuracy", "85"]) == 0
    printed = capsys.readouterr().out.strip().splitlines()
    assert printed[-1] == str(out / "index.html")
    assert printed[0].startswith("On 10GbE, variance α=2")
    meta = json.loads((out / "report.json").read_text())
    assert set(meta["plots"]) == {
        "speedup",
        "breakdown",
        "crossover",
        "agreement",
        "density",
        "trace_validation",
        "time_to_accuracy",
    }
    assert "Time to accuracy: target 85.0 % test accuracy (as given); no dense trace" in (
        " ".join(meta["summary"])
    )


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("0.9", "target accuracy must be a percentage in (1, 100], got 0.9 (a fraction? write 90)"),
        ("101", "target accuracy must be a percentage in (1, 100], got 101"),
        ("nan", "target accuracy must be a percentage in (1, 100], got nan"),
    ],
)
def test_report_cli_bad_target_accuracy_exits_2(tmp_path, capsys, value, message):
    code = main(["report", "--trace", str(TRACE), "-o", str(tmp_path), "--target-accuracy", value])
    assert code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0]


def test_report_cli_target_accuracy_needs_traces(tmp_path, capsys):
    code = main(["report", str(RESULTS[0].parent), "-o", str(tmp_path), "--target-accuracy", "90"])
    assert code == 2
    assert "--target-accuracy needs --trace" in capsys.readouterr().err


def test_report_cli_user_errors_exit_2(tmp_path, capsys):
    assert main(["report", "-o", str(tmp_path)]) == 2
    assert "nothing to report" in capsys.readouterr().err
    assert main(["report", str(tmp_path / "missing"), "-o", str(tmp_path)]) == 2
    assert "not a result table" in capsys.readouterr().err


def test_demo_rejects_unknown_method(tmp_path, capsys):
    assert main(["demo", "-o", str(tmp_path), "--set", 'methods=["dense","nope"]']) == 2
    err = capsys.readouterr().err
    assert "unknown demo method 'nope'" in err and "variance" in err


@pytest.mark.parametrize(
    ("override", "message"),
    [
        (
            "steps=100",
            "steps applies only to traces the demo records: add --set traces=record",
        ),
        (
            'methods=["dense","hybrid"]',
            "no committed demo trace for hybrid in",
        ),
        ("traces=download", "unknown demo trace source 'download'"),
        ("target_accuracy=0.97", "target accuracy must be a percentage in (1, 100]"),
    ],
)
def test_demo_user_errors_exit_2(tmp_path, capsys, override, message):
    assert main(["demo", "-o", str(tmp_path), "--set", override]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0]
    assert not (tmp_path / "results").exists()


def test_demo_reuses_only_complete_traces_with_same_config(tmp_path):
    from vgcsim.api import DemoConfig
    from vgcsim.api import _demo_record_config as _record_config
    from vgcsim.api import _demo_reusable as _reusable

    cfg = DemoConfig(steps=2)
    rcfg = _record_config(cfg, "variance")
    run = Path(tmp_path) / "variance"
    run.mkdir()
    assert not _reusable(run, rcfg)  # no header
    header = json.loads((TRACE / "header.json").read_text())
    from vgcsim.core.config import to_dict
    from vgcsim.traces.training.record import resolve_config

    # A header stores the resolved config (sq_dtype "auto" -> this machine's precision).
    header["config"] = to_dict(rcfg)
    (run / "header.json").write_text(json.dumps(header))
    assert not _reusable(run, rcfg)
    header["config"] = to_dict(resolve_config(rcfg))
    (run / "header.json").write_text(json.dumps(header))
    assert _reusable(run, rcfg)
    assert not _reusable(run, _record_config(DemoConfig(steps=3), "variance"))
    header["status"] = "running"
    (run / "header.json").write_text(json.dumps(header))
    assert not _reusable(run, rcfg)


@pytest.mark.slow
def test_demo_end_to_end_tiny(tmp_path, capsys):
    out = tmp_path / "demo"
    args = [
        "demo",
        "-o",
        str(out),
        "--quiet",
        "--set",
        "traces=record",
        "--set",
        "steps=3",
        "--set",
        "workers=2",
        "--set",
        "eval_every=2",
        "--set",
        'methods=["dense","variance"]',
        "--set",
        'clusters=["10GbE"]',
        "--set",
        "world_sizes=[2,4]",
    ]
    assert main(args) == 0
    html = Path(capsys.readouterr().out.strip().splitlines()[-1])
    assert html == out / "report" / "index.html" and html.is_file()
    assert (out / "results" / "simulated" / "variance-10GbE" / "results.parquet").is_file()
    assert "On 10GbE, variance α=2" in html.read_text()
    # an earlier output is never replaced silently (a run with --overwrite reusing the
    # complete traces: tests/test_api.py::test_the_demo_records_a_missing_trace_once_and_...)
    assert main(args) == 2
    assert "--overwrite" in capsys.readouterr().err


#: A fast demo: the committed dense and variance traces on 10GbE at P = 2 and 4, with a
#: two-step VGG-like trace synthesized beside them.
FAST_DEMO = [
    'methods=["dense","variance"]',
    'clusters=["10GbE"]',
    'paper_nets=["vgg_like"]',
    "paper_steps=2",
]


def _files(root: Path) -> list[str]:
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file())


@pytest.mark.slow
def test_api_demo_writes_what_the_command_writes_and_the_command_leads_with_wins(tmp_path, capsys):
    from vgcsim.api import DEMO_TRACES

    cli = tmp_path / "cli"
    args = ["demo", "-o", str(cli), "--quiet", "--world-sizes", "2,4"]
    for setting in FAST_DEMO:
        args += ["--set", setting]
    assert main(args) == 0
    printed = capsys.readouterr().out.strip().splitlines()
    # the paper-size row beside the toy; the first line printed is a verdict, wins lead, each
    # naming what decides it
    glance = pd.read_csv(cli / "report" / "tables" / "speedup_matrix.csv")
    methods = set(glance["method"])
    assert "variance α=2 on recorded small_cnn" in methods
    assert "variance α=2 on synthesized VGG-like" in methods
    synth = glance[glance["method"] == "variance α=2 on synthesized VGG-like"]
    assert set(synth["source"]) == {"predicted"}
    verdicts = [s for s in printed if s.startswith("On 10GbE, variance α=2")]
    assert printed[0] == verdicts[0] and len(verdicts) == 2
    wins = [" beats dense allreduce " in s and "never" not in s for s in verdicts]
    assert wins == sorted(wins, reverse=True)
    assert all(" against " in s and " of dense allreduce" in s for s in verdicts)
    assert any(line.startswith("Paper-size rows: VGG-like") for line in printed)

    calls: list[tuple[int, int, str]] = []
    out = tmp_path / "api"
    run = api.demo(
        out_dir=out,
        overrides=FAST_DEMO,
        world_sizes="2,4",
        progress=lambda done, total, what: calls.append((done, total, what)),
    )
    assert _files(out) == _files(cli) and "report/index.html" in _files(out)
    assert run.report == out / "report" / "index.html"
    assert printed == [*run.summary[:4], *run.notes[:-1], str(cli / "report" / "index.html")]
    assert run.notes[0].startswith(run.headline + " Traces committed with the project")
    assert run.headline.startswith("small_cnn (38,282 parameters) on mnist, 500 steps")
    assert "variance α=2 (after_send=reset" in run.headline
    assert run.notes[1].startswith("Paper-size rows: VGG-like")
    assert run.config.world_sizes == (2, 4) and run.config.paper_nets == ("vgg_like",)
    assert run.traces == {m: DEMO_TRACES / m for m in ("dense", "variance")}
    assert run.synthesized == {"vgg_like": out / "traces" / "synthesized" / "vgg_like"}
    assert [p.relative_to(out).as_posix() for p in run.results] == [
        "results/predicted/variance-10GbE",
        "results/simulated/variance-10GbE",
        "results/predicted/vgg_like-10GbE",
    ]
    for table in ("speedup_matrix.csv", "breakdown.md", "crossover.csv"):
        assert (out / "report" / "tables" / table).read_text(encoding="utf-8") == (
            cli / "report" / "tables" / table
        ).read_text(encoding="utf-8")
    # one call per stage step, counted up to the total announced from the first
    assert [c[:2] for c in calls] == [(i, 5) for i in range(1, 6)]
    assert calls[2][2].startswith("synthesized vgg_like at 1.2 % density")
    assert calls[-1][2] == f"report written to {out / 'report'}"


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("target_accuracy=0.97", "target_accuracy is a percentage in (1, 100] or 0, got 0.97"),
        ('methods=["dense","nope"]', "unknown demo method 'nope'"),
        ("steps=3", "steps applies only to traces the demo records"),
        ('clusters=["10GbE","nope"]', "unknown cluster (preset name or TOML file) 'nope'"),
    ],
)
def test_api_demo_refuses_a_config_it_cannot_run_before_writing(tmp_path, override, message):
    from vgcsim.core.errors import ConfigError

    with pytest.raises(ConfigError) as err:
        api.demo(out_dir=tmp_path / "demo", overrides=[override])
    assert message in str(err.value)
    assert not (tmp_path / "demo").exists()


def test_api_demo_recording_without_torch_names_the_extra_before_any_folder(tmp_path):
    out = tmp_path / "demo"
    done = api_call_without_training_extra(
        f"api.demo(out_dir={str(out)!r}, overrides=['traces=record'])"
    )
    assert done.returncode == 3, done.stderr
    assert done.stdout.startswith(
        "recording demo traces needs the training extra (torch is not installed): "
    )
    assert "vgcsim[train]" in done.stdout
    assert not out.exists()


def test_a_report_over_an_earlier_one_leaves_none_of_its_files_but_a_users(tmp_path):
    """--overwrite replaces the whole report: the earlier run's tables of the trace it was
    given are gone when the new one has no trace, and a file of the user's stays."""
    from vgcsim.core.outdir import read_marker

    out = tmp_path / "report"
    results = [str(p.parent) for p in RESULTS]
    assert main(["report", *results, "--trace", str(TRACE), "-o", str(out)]) == 0
    with_trace = {p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file()}
    (out / "notes.txt").write_text("mine")
    assert main(["report", *results, "-o", str(out), "--overwrite"]) == 0
    now = {p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file()}
    assert now < with_trace | {"notes.txt"} and "notes.txt" in now
    listed = set(read_marker(out)["files"])
    assert now - {"notes.txt", ".vgcsim.json"} == listed
