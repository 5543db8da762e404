"""One typed description of the trace, applied by every reader (issue reproductions 1, 2, 10,
13, 15, 16): an invalid trace is refused by validate, info, predict, simulate, report, scenario
and sweep alike, with one line naming the file, the field and the rule, exit 2."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pandas as pd
import pytest

from vgcsim.cli import main
from vgcsim.core.errors import TraceError
from vgcsim.traces import schema
from vgcsim.traces.io import read_trace
from vgcsim.traces.validate import check_trace

SAMPLE = Path("tests/data/sample_trace")


def _copy(tmp_path: Path, name: str = "T") -> Path:
    run = tmp_path / name
    shutil.copytree(SAMPLE, run)
    return run


def _edit(run: Path, **fields) -> None:
    h = json.loads((run / "header.json").read_text())
    for key, value in fields.items():
        if key.startswith("layer0_"):
            h["layers"][0][key[len("layer0_") :]] = value
        elif value is _DEL:
            del h["layers"][0]["numel"]
        else:
            h[key] = value
    (run / "header.json").write_text(json.dumps(h))


_DEL = object()

#: header edits of reproductions 1 and 16 -> the field the refusal names
HEADER_EDITS = {
    "compressor_empty": ({"compressor": {}}, "compressor.name"),
    "workers_text": ({"workers": "abc"}, "field workers"),
    "workers_null": ({"workers": None}, "field workers"),
    "workers_bool": ({"workers": True}, "field workers"),
    "layers_text": ({"layers": "x"}, "field layers"),
    "layer_without_numel": ({"layer_without_numel": _DEL}, "layers[0].numel"),
    "encodings_number": ({"encodings": 5}, "field encodings"),
    "dense_bytes_text": ({"dense_bytes_per_step": "x"}, "dense_bytes_per_step"),
    "flops_negative": ({"flops_per_sample": -1.0}, "flops_per_sample"),
    "flops_nan": ({"flops_per_sample": float("nan")}, "flops_per_sample"),
    "batch_null": ({"batch_size_per_worker": None}, "batch_size_per_worker"),
    "batch_negative": ({"batch_size_per_worker": -5}, "batch_size_per_worker"),
    "shape_negative": ({"layer0_shape": [-16, 1, 3, 3]}, "layers[0].shape[0]"),
}


def _commands(run: Path, out: Path) -> dict[str, list[str]]:
    sweep = out / "sweep.toml"
    sweep.parent.mkdir(parents=True, exist_ok=True)
    sweep.write_text(
        f'[sweep]\ntraces = ["{run}"]\ncluster = "10GbE"\nworld_sizes = [2]\n'
        'scheduler = "processes"\nprocesses = 1\n[simulate]\nmax_steps = 2\n'
    )
    return {
        "validate": ["trace", "validate", str(run)],
        "info": ["trace", "info", str(run)],
        "predict": [
            "predict",
            str(run),
            "--cluster",
            "10GbE",
            "--world-sizes",
            "8",
            "-o",
            str(out / "p"),
        ],
        "simulate": [
            "simulate",
            str(run),
            "--cluster",
            "10GbE",
            "--world-sizes",
            "2",
            "-o",
            str(out / "s"),
        ],
        "report": [
            "report",
            "tests/data/golden/results/predicted-10GbE",
            "--trace",
            str(run),
            "-o",
            str(out / "r"),
        ],
        "scenario": [
            "scenario",
            "paper",
            "--trace",
            str(run),
            "--world-sizes",
            "8",
            "-o",
            str(out / "c"),
        ],
        "sweep": ["sweep", str(sweep), "-o", str(out / "w")],
    }


def _refused(argv: list[str], capsys, *needles: str) -> str:
    assert main(argv) == 2, argv
    err = capsys.readouterr().err
    assert "Traceback" not in err
    for needle in needles:
        assert needle in err, err
    return err


@pytest.mark.parametrize("case", sorted(HEADER_EDITS))
def test_every_reader_refuses_a_mistyped_header_in_one_line(tmp_path, capsys, case):
    edit, field = HEADER_EDITS[case]
    run = _copy(tmp_path)
    _edit(run, **edit)
    for name, argv in _commands(run, tmp_path / "out").items():
        err = _refused(argv, capsys, field, str(run / "header.json"))
        assert err.count("\n") == 1, (name, err)


def test_the_refusal_states_the_rule(tmp_path, capsys):
    run = _copy(tmp_path)
    _edit(run, workers="abc")
    err = _refused(["trace", "info", str(run)], capsys)
    assert err == (
        f"vgcsim trace info: error: {run / 'header.json'}: header field workers: "
        "input should be a valid integer (got 'abc')\n"
    )


def _drop_payloads(run):
    shutil.rmtree(run / "payloads")


def _rewrite(table, fn):
    def edit(run):
        part = sorted((run / table).glob("part-*.parquet"))[1]
        df = pd.read_parquet(part)
        fn(df)
        df.to_parquet(part, index=False)

    return edit


def _duplicate_chunk(run):
    parts = sorted((run / "steps").glob("part-*.parquet"))
    shutil.copy(parts[1], run / "steps" / "part-000009.parquet")


def _delete_chunk(run):
    sorted((run / "payloads").glob("part-*.parquet"))[1].unlink()


#: table damage of reproductions 2 and 16 -> what the refusal says
TABLE_DAMAGE = {
    "payloads_deleted": (_drop_payloads, "payloads has 0 rows"),
    "sent_above_numel": (
        _rewrite("payloads", lambda df: df.__setitem__("sent", df["numel"] + 1)),
        "0 <= sent <= numel",
    ),
    "negative_bits": (
        _rewrite("payloads", lambda df: df.__setitem__("bits_coo64", -df["bits_coo64"])),
        "bits_coo64 has negative bits",
    ),
    "payload_chunk_deleted": (_delete_chunk, "payloads has 2400 rows"),
    "steps_chunk_duplicated": (_duplicate_chunk, "not contiguous"),
    "nan_loss": (
        _rewrite("steps", lambda df: df.loc.__setitem__((3, "loss"), float("nan"))),
        "loss contains NaN",
    ),
    "evals_deleted": (
        lambda run: shutil.rmtree(run / "evals"),
        "evals lack 4 of the 4 evaluations",
    ),
    "text_in_a_number_column": (
        _rewrite("steps", lambda df: df.__setitem__("lr", "high")),
        "steps column lr has Arrow type",
    ),
}


@pytest.mark.parametrize("case", sorted(TABLE_DAMAGE))
def test_readers_refuse_what_validate_refuses(tmp_path, capsys, case):
    damage, needle = TABLE_DAMAGE[case]
    run = _copy(tmp_path)
    damage(run)
    # validate lists it ...
    assert main(["trace", "validate", str(run)]) == 2
    assert needle in capsys.readouterr().err
    # ... and every reader refuses it in one line instead of predicting from it
    for name, argv in _commands(run, tmp_path / "out").items():
        if name == "validate":
            continue
        err = _refused(argv, capsys, needle, str(run))
        assert err.count("\n") == 1, (name, err)
    assert not (tmp_path / "out" / "p" / "results.csv").exists()


def test_predict_from_a_trace_without_payloads_was_a_result_now_a_refusal(tmp_path, capsys):
    # reproduction 2 exactly: predict reported a compressed comm of 0.070 ms
    run = _copy(tmp_path)
    shutil.rmtree(run / "payloads")
    _refused(
        [
            "predict",
            str(run),
            "--cluster",
            "10GbE",
            "--world-sizes",
            "8",
            "-o",
            str(tmp_path / "p"),
        ],
        capsys,
        "is not a valid trace: payloads has 0 rows; expected steps x workers x layers",
    )


@pytest.mark.parametrize("where", ["header", "layers"])
def test_a_deeply_nested_header_is_refused_without_recursion(tmp_path, capsys, where):
    # reproduction 10: 200,000 levels overflow json's recursion; 100 levels pass json but
    # not the header's depth rule (no reader walks them)
    for depth, needle in ((200_000, "nested too deeply"), (100, "nests deeper than 64 levels")):
        run = _copy(tmp_path, f"deep{depth}")
        text = (run / "header.json").read_text()
        nest = "[" * depth + "]" * depth
        key = '"config": {' if where == "header" else '"layers": ['
        text = text.replace(
            key, key + (f'"deep": {nest}, ' if where == "header" else f"{nest}, "), 1
        )
        (run / "header.json").write_text(text)
        for name in ("validate", "predict"):
            _refused(_commands(run, tmp_path / "out")[name], capsys, needle)


def test_a_valid_trace_in_a_non_utf8_folder_is_read(tmp_path, capsys):
    # reproduction 13: it was reported "truncated or corrupt"
    name = os.fsdecode(b"run\xff")
    run = tmp_path / name
    shutil.copytree(SAMPLE, run)
    assert main(["trace", "validate", str(run)]) == 0
    assert main(["trace", "info", str(run)]) == 0
    assert "run\ufffd" in capsys.readouterr().out
    t = read_trace(run)
    assert t.steps_count == 100 and t.name == "run\ufffd"
    out = tmp_path / "p"
    assert (
        main(["predict", str(run), "--cluster", "10GbE", "--world-sizes", "8", "-o", str(out)]) == 0
    )
    assert set(pd.read_parquet(out / "results.parquet")["trace"]) == {"run\ufffd"}


def test_validate_checks_and_reports_every_run(tmp_path, capsys):
    # reproduction 15: it stopped at the first invalid run
    bad1, bad2 = _copy(tmp_path, "bad1"), _copy(tmp_path, "bad2")
    _edit(bad1, workers="abc")
    shutil.rmtree(bad2 / "evals")
    assert main(["trace", "validate", str(bad1), str(SAMPLE), str(bad2)]) == 2
    out = capsys.readouterr()
    assert f"{SAMPLE}: valid" in out.out
    assert str(bad1) in out.err and str(bad2) in out.err and "evals lack" in out.err
    assert main(["trace", "validate", str(SAMPLE), str(SAMPLE)]) == 0


def test_readers_of_a_prefix_accept_it(tmp_path):
    # a recording killed mid-run (status running) is a valid prefix: readers take it
    run = _copy(tmp_path)
    h = json.loads((run / "header.json").read_text())
    h["status"] = "running"
    del h["steps_recorded"]
    (run / "header.json").write_text(json.dumps(h))
    for table in schema.TRACE_TABLES:
        sorted((run / table).glob("part-*.parquet"))[-1].unlink()
    t = read_trace(run)
    assert t.steps_count == 75 and check_trace(t) == []


def test_read_trace_without_check_still_refuses_a_mistyped_header(tmp_path):
    run = _copy(tmp_path)
    _edit(run, encodings=5)
    with pytest.raises(TraceError, match="header field encodings: input should be a valid list"):
        read_trace(run, check=False)
