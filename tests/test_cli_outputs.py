"""What commands write: one result path, pandas-readable tables, sweep factors as columns,
0644 files, no silent overwrite, a full disk in one line, a closed pipe ending quietly."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from vgcsim.cli import main
from vgcsim.core.outdir import MARKER
from vgcsim.core.results import read_results

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = str(ROOT / "tests" / "data" / "sample_trace")
GOLDEN = ROOT / "tests" / "data" / "golden" / "results" / "predicted-10GbE"


def _sweep_file(tmp_path: Path, **factors: str) -> Path:
    lines = [f'traces = ["{SAMPLE}"]', "world_sizes = [2]", 'scheduler = "processes"']
    lines += [f"{k} = {v}" for k, v in factors.items()]
    cfg = tmp_path / "sweep.toml"
    cfg.write_text("[sweep]\n" + "\n".join(lines) + "\n\n[simulate]\nmax_steps = 1\n")
    return cfg


#: Commands that write a result table, with their arguments before -o.
TABLES = {
    "predict": lambda tmp: ["predict", SAMPLE, "--cluster", "10GbE", "--world-sizes", "2,8"],
    "simulate": lambda tmp: [
        "simulate",
        SAMPLE,
        *("--cluster", "10GbE", "--world-sizes", "2,8", "--set", "max_steps=2"),
    ],
    "sweep": lambda tmp: ["sweep", str(_sweep_file(tmp)), "--processes", "1"],
}


@pytest.mark.parametrize("command", sorted(TABLES))
def test_pandas_reads_the_documented_file(command, tmp_path, capsys):
    out = tmp_path / "out"
    assert main([*TABLES[command](tmp_path), "-o", str(out)]) == 0
    df = pd.read_parquet(out / "results.parquet")
    ours, header = read_results(out)
    pd.testing.assert_frame_equal(df, ours)
    assert header["source"] in ("predicted", "simulated") and len(df) > 0
    assert json.loads((out / MARKER).read_text())["command"] == f"vgcsim {command}"


def test_sweep_rows_carry_their_factors_as_columns(tmp_path, capsys):
    from vgcsim.core.units import format_bandwidth, format_time

    cfg = _sweep_file(
        tmp_path,
        bandwidths='["1Gbps", "10Gbps"]',
        latencies='["1us", "50us"]',
        topologies='[{kind = "star"}, {kind = "ring"}]',
    )
    out = tmp_path / "out"
    assert main(["sweep", str(cfg), "--processes", "1", "-o", str(out)]) == 0
    df = pd.read_parquet(out / "results.parquet")
    assert set(df["bandwidth_Bps"]) == {1e9 / 8, 1e10 / 8}
    assert sorted(set(df["latency_s"])) == pytest.approx([1e-6, 50e-6])
    assert {json.loads(t)["kind"] for t in df["topology_spec"]} == {"star", "ring"}
    assert set(df["trace_path"]) == {SAMPLE}
    for row in df.itertuples():  # each row's columns are the factors its cluster was built from
        assert f"bandwidth={format_bandwidth(row.bandwidth_Bps)}" in row.cluster
        assert f"latency={format_time(row.latency_s)}" in row.cluster
        assert json.loads(row.topology_spec)["kind"] == row.topology
    # grouping by a factor needs no label parsing: the slower link never gives faster dense steps
    dense = df[(df.method == "dense") & (df.encoding == "fp32") & (df.step == -1)]
    by_bw = dense.groupby("bandwidth_Bps")["comm_s"].mean()
    assert by_bw[1e9 / 8] > by_bw[1e10 / 8]


@pytest.mark.parametrize("umask, mode", [(0o022, 0o644), (0o077, 0o600)])
def test_result_files_follow_the_umask(umask, mode, tmp_path, capsys):
    old = os.umask(umask)
    try:
        assert main(["scenario", "paper", "--world-sizes", "8", "-o", str(tmp_path / "sc")]) == 0
        assert main([*TABLES["predict"](tmp_path), "-o", str(tmp_path / "p")]) == 0
    finally:
        os.umask(old)
    files = [p for d in ("sc", "p") for p in (tmp_path / d).iterdir()]
    names = {p.name for p in files}
    assert {"results.parquet", "results.csv", "results.json", "scenario.md", MARKER} <= names
    assert {p.name: p.stat().st_mode & 0o777 for p in files} == {p.name: mode for p in files}


def test_every_command_and_the_api_write_through_save_results(tmp_path, monkeypatch, capsys):
    import vgcsim.core.results as results
    from vgcsim import api

    calls: list[str] = []
    real = results.save_results

    def spy(df, out_dir, **kwargs):
        calls.append(Path(out_dir).name)
        return real(df, out_dir, **kwargs)

    monkeypatch.setattr(results, "save_results", spy)
    for name, argv in TABLES.items():
        assert main([*argv(tmp_path), "-o", str(tmp_path / name)]) == 0
    assert main(["scenario", "paper", "--world-sizes", "8", "-o", str(tmp_path / "scenario")]) == 0
    pred = api.predict(SAMPLE, "10GbE", world_sizes=[2])
    api.save(pred, tmp_path / "api", SAMPLE, "10GbE")
    assert calls == ["predict", "simulate", "sweep", "scenario", "api"]


# -- no silent overwrite -------------------------------------------------------------------

#: command -> (argv before -o, a file name the command writes)
WRITERS = {
    "predict": (lambda tmp: TABLES["predict"](tmp), "results.csv"),
    "simulate": (lambda tmp: TABLES["simulate"](tmp), "results.json"),
    "sweep": (lambda tmp: TABLES["sweep"](tmp), "results.parquet"),
    "scenario": (lambda tmp: ["scenario", "paper", "--world-sizes", "8"], "scenario.md"),
    "report": (lambda tmp: ["report", str(GOLDEN)], "index.html"),
    "validate": (lambda tmp: ["validate", SAMPLE, "--cluster", "10GbE"], "validation.csv"),
    "demo": (lambda tmp: ["demo", "-q"], "report"),
}


@pytest.mark.parametrize("command", sorted(WRITERS))
def test_a_folder_vgcsim_did_not_write_is_never_written(command, tmp_path, capsys):
    argv, name = WRITERS[command]
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("my notes")
    for extra in ([], ["--overwrite"]):
        assert main([*argv(tmp_path), "-o", str(out), *extra]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and str(out) in err[0] and "not written by vgcsim" in err[0]
    assert sorted(p.name for p in out.iterdir()) == ["notes.txt"]
    assert (out / "notes.txt").read_text() == "my notes"


@pytest.mark.parametrize("command", ["predict", "simulate", "sweep", "scenario", "report"])
def test_an_earlier_output_is_replaced_only_with_overwrite(command, tmp_path, capsys):
    argv, name = WRITERS[command]
    out = tmp_path / "out"
    assert main([*argv(tmp_path), "-o", str(out)]) == 0
    (out / "notes.txt").write_text("added by hand")
    first = (out / name).stat().st_mtime_ns
    capsys.readouterr()
    assert main([*argv(tmp_path), "-o", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and str(out) in err[0] and "--overwrite" in err[0]
    assert (out / name).stat().st_mtime_ns == first
    assert main([*argv(tmp_path), "-o", str(out), "--overwrite"]) == 0
    assert (out / name).stat().st_mtime_ns != first
    assert (out / "notes.txt").read_text() == "added by hand"  # never deleted, never listed
    marker = json.loads((out / MARKER).read_text())
    assert name in marker["files"] and "notes.txt" not in marker["files"]


def test_overwrite_never_replaces_a_file_the_marker_does_not_list(tmp_path, capsys):
    out = tmp_path / "out"
    assert main([*TABLES["predict"](tmp_path), "-o", str(out)]) == 0
    (out / "timeline.json").write_text("my own timeline")  # a name simulate writes
    argv = [*TABLES["simulate"](tmp_path), "--timeline", "0", "-o", str(out), "--overwrite"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "timeline.json exists and was not written by vgcsim" in err
    assert (out / "timeline.json").read_text() == "my own timeline"


def test_a_result_table_from_before_markers_is_replaced_only_with_overwrite(tmp_path, capsys):
    old = tmp_path / "old"
    shutil.copytree(GOLDEN, old)
    assert not (old / MARKER).exists()
    (old / "notes.txt").write_text("mine")
    argv = [*TABLES["predict"](tmp_path), "-o", str(old)]
    assert main(argv) == 2
    assert "already holds an earlier vgcsim output" in capsys.readouterr().err
    assert main([*argv, "--overwrite"]) == 0
    assert sorted(set(read_results(old)[0]["world_size"])) == [2, 8]
    assert (old / "notes.txt").read_text() == "mine"


@pytest.mark.slow
def test_a_report_from_before_markers_is_replaced_only_with_overwrite(tmp_path, capsys):
    out = tmp_path / "rep"
    assert main(["report", str(GOLDEN), "-o", str(out)]) == 0
    (out / MARKER).unlink()  # as a report written before markers existed
    (out / "notes.txt").write_text("mine")
    assert main(["report", str(GOLDEN), "-o", str(out)]) == 2
    assert "already holds an earlier vgcsim output" in capsys.readouterr().err
    assert main(["report", str(GOLDEN), "-o", str(out), "--overwrite"]) == 0
    assert (out / "notes.txt").read_text() == "mine"
    assert "notes.txt" not in json.loads((out / MARKER).read_text())["files"]


def test_a_demo_folder_from_before_markers_needs_overwrite(tmp_path, capsys):
    old = tmp_path / "demo"
    (old / "report").mkdir(parents=True)
    (old / "results").mkdir()
    (old / "report" / "report.json").write_text("{}")
    assert main(["demo", "-q", "-o", str(old)]) == 2
    assert "already holds an earlier vgcsim output" in capsys.readouterr().err
    (old / "report" / "report.json").unlink()  # no longer a demo's folder: never written
    assert main(["demo", "-q", "-o", str(old), "--overwrite"]) == 2
    assert "not written by vgcsim" in capsys.readouterr().err


def test_results_never_go_into_a_trace_folder(tmp_path, capsys):
    run = tmp_path / "run"
    shutil.copytree(SAMPLE, run)
    assert main(["predict", str(run), "--cluster", "10GbE", "-o", str(run)]) == 2
    assert "holds a vgcsim trace" in capsys.readouterr().err


def _not_a_trace(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    out = tmp_path / "notatrace"
    files = {
        "header.json": '{"mine": true}',
        "payloads/part-000000.parquet": "my payloads",
        "steps/part-000000.parquet": "my steps",
        "evals/part-000000.parquet": "my evals",
    }
    for name, text in files.items():
        (out / name).parent.mkdir(parents=True, exist_ok=True)
        (out / name).write_text(text)
    return out, files


@pytest.mark.parametrize(
    "argv",
    [
        ["trace", "synth", "--layers", "vgg_like", "--steps", "1"],
        ["record", "-q", "--steps", "1", "--dataset", "synthetic", "--model", "mlp"],
    ],
    ids=["synth", "record"],
)
def test_trace_overwrite_refuses_a_folder_that_is_not_a_trace(argv, tmp_path, capsys):
    out, files = _not_a_trace(tmp_path)
    assert main([*argv, "-o", str(out), "--overwrite"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "not a vgcsim trace folder" in err[0]
    assert {n: (out / n).read_text() for n in files} == files


def test_calibrate_never_replaces_a_cluster_file_it_did_not_write(tmp_path, capsys):
    mine = tmp_path / "cluster.toml"
    mine.write_text('name = "mine"\n')
    for extra in ([], ["--overwrite"]):
        argv = ["calibrate", "--from", str(tmp_path / "m.json"), "-o", str(mine), *extra]
        assert main(argv) == 2
        assert "not written by vgcsim calibrate" in capsys.readouterr().err
    assert mine.read_text() == 'name = "mine"\n'


@pytest.mark.parametrize(
    "argv",
    [
        ["clusters", "10GbE"],
        ["trace", "info", SAMPLE],
        ["trace", "validate", SAMPLE],
    ],
    ids=["clusters", "trace-info", "trace-validate"],
)
def test_json_files_are_marked_and_never_replace_a_users_file(argv, tmp_path, capsys):
    mine = tmp_path / "mine.json"
    mine.write_text('{"mine": 1}')
    for extra in ([], ["--overwrite"]):
        assert main([*argv, "-o", str(mine), *extra]) == 2
        assert "not written by vgcsim" in capsys.readouterr().err
    assert mine.read_text() == '{"mine": 1}'
    ours = tmp_path / "ours.json"
    assert main([*argv, "-o", str(ours)]) == 0
    data = json.loads(ours.read_text())
    assert data["written_by"] == "vgcsim " + " ".join(argv[:2] if argv[0] == "trace" else argv[:1])
    assert main([*argv, "-o", str(ours)]) == 2
    assert "--overwrite" in capsys.readouterr().err
    assert main([*argv, "-o", str(ours), "--overwrite"]) == 0


# -- a full disk ----------------------------------------------------------------------------


@pytest.fixture
def full_disk(tmp_path):
    """A 512 KiB tmpfs filled to its last few KiB (root only; unmounted at the end)."""
    if os.geteuid() != 0 or not shutil.which("mount"):
        pytest.skip("mounting a tmpfs needs root")
    where = tmp_path / "disk"
    where.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=512k", "tmpfs", str(where)])
    if done.returncode:
        pytest.skip("cannot mount a tmpfs here")
    try:
        with open(where / "filler", "wb", buffering=0) as fh:
            try:
                while True:
                    fh.write(b"\0" * 4096)
            except OSError:
                pass
        os.truncate(where / "filler", os.path.getsize(where / "filler") - 16384)
        yield where
    finally:
        subprocess.run(["umount", str(where)], check=True)


FULL_DISK = {
    "predict": lambda: ["predict", SAMPLE, "--cluster", "10GbE", "--world-sizes", "2:64:x2"],
    "simulate": lambda: [*TABLES["simulate"](None)],
    "synth": lambda: ["trace", "synth", "--layers", "vgg_like", "--steps", "200"],
    "report": lambda: ["report", str(GOLDEN)],
    "scenario": lambda: ["scenario", "paper"],
}


@pytest.mark.parametrize("command", sorted(FULL_DISK))
def test_a_full_disk_is_one_line_and_no_half_written_file(command, full_disk, capsys):
    out = full_disk / "out"
    assert main([*FULL_DISK[command](), "-o", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no space left on device" in err[0].lower(), err
    assert "Traceback" not in err[0]
    leftovers = [p for p in full_disk.rglob("*") if p.name.endswith(".tmp")]
    assert leftovers == []
    for table in ("results.parquet", "results.csv", "results.json"):
        if (out / table).exists():  # what is there under its final name is complete
            if table.endswith(".parquet"):
                pd.read_parquet(out / table)
            elif table.endswith(".json"):
                json.loads((out / table).read_text())


# -- a closed pipe ---------------------------------------------------------------------------


@pytest.mark.slow  # whole commands in fresh interpreters
def test_a_closed_pipe_ends_quietly(tmp_path):
    """`vgcsim predict ... | head -1` on an output far larger than the pipe buffer, through a
    shell pipeline as a user types it: exit 141 (SIGPIPE) under pipefail, nothing on stderr,
    and the results written before printing."""
    argv = [sys.executable, "-m", "vgcsim", "predict", SAMPLE, "--cluster", "10GbE"]
    argv += ["--world-sizes", "1:300:+1", "-o", str(tmp_path / "q")]
    shell = " ".join(argv) + f" 2>{tmp_path / 'err'} | head -1"
    done = subprocess.run(
        ["bash", "-o", "pipefail", "-c", shell], capture_output=True, cwd=ROOT, timeout=300
    )
    assert done.returncode == 141 and done.stdout.startswith(b"local times")
    assert done.stdout.count(b"\n") == 1
    assert (tmp_path / "err").read_text() == ""
    assert len(read_results(tmp_path / "q")[0]) > 0


@pytest.mark.parametrize(
    ("argv", "written"),
    [
        (
            ["advise", SAMPLE, "--cluster", "10GbE", "-o", "adv"],
            ["adv/advice.csv", "adv/advice.md"],
        ),
        (["trace", "validate", SAMPLE, "-o", "tv.json"], ["tv.json"]),
        (
            ["collective", "10GbE", "allreduce/ring", "--sizes-bytes", "4e6", "--world-size", "4"]
            + ["--engine", "simulate", "-o", "col.csv"],
            ["col.csv"],
        ),
    ],
    ids=["advise", "trace-validate", "collective"],
)
def test_a_closed_pipe_loses_no_output_file(argv, written, tmp_path, monkeypatch):
    """The files of -o are written before the command prints: a reader that went away
    (``| head -1``) ends the command with 141, not with its results unwritten (validate's:
    tests/distributed/test_dist_validate.py)."""
    from tests.conftest import closed_stdout

    monkeypatch.chdir(tmp_path)
    with closed_stdout(tmp_path):
        assert main(argv) == 141
    for name in written:
        assert (tmp_path / name).is_file(), name


# -- a folder that cannot be written ----------------------------------------------------------


@pytest.fixture
def read_only(tmp_path):
    """A folder holding an earlier predict result, then made read-only: a tmpfs remounted
    read-only as root (permission bits do not stop root), mode 0555 otherwise."""
    where = tmp_path / "ro"
    where.mkdir()
    mounted = False
    if os.geteuid() == 0:
        if (
            not shutil.which("mount")
            or subprocess.run(
                ["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(where)]
            ).returncode
        ):
            pytest.skip("cannot mount a tmpfs here")
        mounted = True
    try:
        assert main([*TABLES["predict"](tmp_path), "-o", str(where / "result")]) == 0
        if mounted:
            subprocess.run(["mount", "-o", "remount,ro", str(where)], check=True)
        else:
            for p in (where, where / "result"):
                p.chmod(0o555)
        with pytest.raises(OSError):  # the folder really refuses writes
            (where / "probe").write_text("x")
        yield where
    finally:
        if mounted:
            subprocess.run(["umount", str(where)], check=True)
        else:
            for p in (where, where / "result"):
                p.chmod(0o755)


#: Commands writing into OUT (a folder, or a file for trace info and collective).
UNWRITABLE = {
    "predict": (TABLES["predict"], "new"),
    "predict --overwrite": (
        lambda tmp: [*TABLES["predict"](tmp), "--overwrite"],
        "result",
    ),
    "report": (lambda tmp: ["report", str(GOLDEN)], "report"),
    "trace info": (lambda tmp: ["trace", "info", SAMPLE], "info.json"),
    "collective": (
        lambda tmp: (
            ["collective", "10GbE", "allreduce/ring", "--sizes-bytes", "4e6"]
            + ["--world-size", "8"]
        ),
        "links.csv",
    ),
}


def _one_line_exit_2(argv, capsys, *expected):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "Traceback" not in err[0], err
    assert all(e in err[0] for e in expected), err
    return err[0]


@pytest.mark.parametrize("command", sorted(UNWRITABLE))
def test_a_read_only_folder_is_one_line_and_exit_2(command, read_only, tmp_path, capsys):
    argv, name = UNWRITABLE[command]
    line = _one_line_exit_2([*argv(tmp_path), "-o", str(read_only / name)], capsys, "cannot write")
    assert str(read_only) in line
    assert ("Read-only file system" in line) or ("Permission denied" in line), line


@pytest.mark.parametrize("command", sorted(UNWRITABLE))
def test_a_file_on_the_output_path_is_one_line_and_exit_2(command, tmp_path, capsys):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    argv, name = UNWRITABLE[command]
    _one_line_exit_2([*argv(tmp_path), "-o", str(blocker / "sub" / name)], capsys, str(blocker))
    assert blocker.read_text() == "not a folder"
