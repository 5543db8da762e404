"""read_results refuses a result table that breaks its value rules, in one line naming the file
and the column (issue reproduction 11: report on step_s NaN raised ValueError; a negative
step_s was accepted)."""

from __future__ import annotations

import json
import shutil

import pandas as pd
import pytest

from vgcsim.cli import main
from vgcsim.core.errors import ResultsError
from vgcsim.core.results import read_results

GOLDEN = "tests/data/golden/results/predicted-10GbE"


def _table(tmp_path, column, value):
    run = tmp_path / "r"
    shutil.copytree(GOLDEN, run)
    df = pd.read_parquet(run / "results.parquet")
    df.loc[3, column] = value
    df.to_parquet(run / "results.parquet", index=False)
    return run


@pytest.mark.parametrize(
    ("column", "value", "needle"),
    [
        ("step_s", float("nan"), "column step_s contains NaN or Inf"),
        ("step_s", -0.001, "column step_s has negative values"),
        ("comm_s", float("inf"), "column comm_s contains NaN or Inf"),
        ("payload_bytes_max", -1.0, "column payload_bytes_max has negative values"),
        # the rounding tolerance is for seconds only: a byte count a hair below 0 is refused
        ("payload_bytes_max", -1e-19, "column payload_bytes_max has negative values"),
        (
            "speedup_vs_dense",
            float("inf"),
            "column speedup_vs_dense contains NaN or Inf (NaN only where a group has no dense row)",
        ),
        ("world_size", 0, "column world_size has values below 1"),
        ("step", -2, "column step has values below -1 (-1 is the mean over steps)"),
        ("method", "sparse", "column method holds 'sparse'; valid: dense, compressed"),
        ("source", "guessed", "column source holds 'guessed'; valid: predicted, simulated"),
    ],
)
def test_report_refuses_bad_values_in_one_line(tmp_path, capsys, column, value, needle):
    run = _table(tmp_path, column, value)
    with pytest.raises(ResultsError) as err:
        read_results(run)
    assert str(err.value) == f"{run / 'results.parquet'}: {needle}"
    assert main(["report", str(run), "-o", str(tmp_path / "rep")]) == 2
    err = capsys.readouterr().err
    assert needle in err and str(run / "results.parquet") in err and err.count("\n") == 1


def test_nan_relative_columns_and_float_rounding_are_accepted(tmp_path):
    run = _table(tmp_path, "speedup_vs_dense", float("nan"))  # a group without a dense row
    df = pd.read_parquet(run / "results.parquet")
    df.loc[4, "comm_s"] = -1e-19  # the simulator's comm_s of one rank
    df.loc[5, "payload_bytes_max"] = 0.0  # nothing sent: zero is not negative
    df.to_parquet(run / "results.parquet", index=False)
    assert len(read_results(run)[0]) == len(df)
    # a result read from its folder, its table or its header file is the same table
    for path in (run, run / "results.parquet", run / "results.json"):
        assert len(read_results(path)[0]) == len(df)


@pytest.mark.parametrize(
    ("field", "value"),
    [("traces", "x"), ("cluster", []), ("traces", [{"compressor": {"params": 5}}])],
)
def test_a_mistyped_result_header_is_refused(tmp_path, capsys, field, value):
    run = tmp_path / "r"
    shutil.copytree(GOLDEN, run)
    h = json.loads((run / "results.json").read_text())
    h[field] = value
    (run / "results.json").write_text(json.dumps(h))
    assert main(["report", str(run), "-o", str(tmp_path / "rep")]) == 2
    err = capsys.readouterr().err
    assert f"field {field}" in err and "Traceback" not in err and err.count("\n") == 1


@pytest.mark.parametrize("name", ["results.json", "results.parquet", "results.csv"])
def test_a_missing_result_file_names_its_folder(tmp_path, name):
    """A path to one of a result's files that is not there names the folder it would be in
    (not a folder of that file's name)."""
    folder = tmp_path / "nowhere"
    with pytest.raises(ResultsError) as err:
        read_results(folder / name)
    assert str(err.value) == (
        f"{folder} is not a result table (needs results.json and results.parquet); make one "
        "with `vgcsim predict` or `vgcsim simulate`"
    )


def _edit_header(run, **changes):
    head = json.loads((run / "results.json").read_text())
    head.update(changes)
    (run / "results.json").write_text(json.dumps(head))


@pytest.mark.parametrize(
    ("spoil", "message"),
    [
        (
            lambda run: (run / "results.parquet").unlink(),
            "{run} is not a result table (needs results.json and results.parquet); make one "
            "with `vgcsim predict` or `vgcsim simulate`",
        ),
        (
            lambda run: (run / "results.json").write_text("{bad"),
            "{run}/results.json is corrupt: Expecting property name enclosed in double quotes: "
            "line 1 column 2 (char 1)",
        ),
        (
            lambda run: (run / "results.json").write_text("[" * 100_000 + "]" * 100_000),
            "{run}/results.json is corrupt (JSON nested too deeply to read)",
        ),
        (
            lambda run: (run / "results.json").write_text(json.dumps({"kind": "other"})),
            "{run}/results.json is not a vgcsim result header",
        ),
        (
            lambda run: (run / "results.json").write_text("[1]"),
            "{run}/results.json is not a vgcsim result header",
        ),
        (
            lambda run: _edit_header(run, schema_version=99),
            "{run} has result schema version 99; this vgcsim reads version 2. Re-run "
            "predict/simulate with this version, or use the vgcsim version that wrote it",
        ),
        (
            lambda run: _edit_header(run, cluster=[]),
            "{run}/results.json: field cluster: input should be a valid dictionary (got [])",
        ),
    ],
    ids=["no table", "bad json", "deep json", "other kind", "a list", "newer", "cluster"],
)
def test_each_refusal_of_a_result_folder_is_its_whole_line(tmp_path, spoil, message):
    run = tmp_path / "r"
    shutil.copytree(GOLDEN, run)
    spoil(run)
    with pytest.raises(ResultsError) as err:
        read_results(run)
    assert str(err.value) == message.format(run=run)


def test_a_table_that_is_not_parquet_or_has_a_mistyped_column_is_named(tmp_path):
    run = tmp_path / "r"
    shutil.copytree(GOLDEN, run)
    (run / "results.parquet").write_bytes(b"not parquet")
    with pytest.raises(ResultsError) as err:
        read_results(run)
    assert str(err.value).startswith(f"{run / 'results.parquet'} is corrupt: ")
    shutil.copy(f"{GOLDEN}/results.parquet", run / "results.parquet")
    df = pd.read_parquet(run / "results.parquet")
    df["world_size"] = df["world_size"].astype(str) + "x"
    df.to_parquet(run / "results.parquet", index=False)
    with pytest.raises(ResultsError) as err:
        read_results(run)
    assert str(err.value) == (
        f"{run / 'results.parquet'}: result table has a column of the wrong type: invalid "
        "literal for int() with base 10: '1x'"
    )


def test_a_trace_entry_names_the_trace_as_typed_and_absolute(tmp_path, monkeypatch):
    from types import SimpleNamespace

    from vgcsim.core.results import trace_entry

    monkeypatch.chdir(tmp_path)
    trace = SimpleNamespace(
        path="runs/v",
        name="v",
        compressor="variance",
        synthetic=1,
        header={"schema_version": 3},
    )
    assert trace_entry(trace) == {
        "path": str((tmp_path / "runs" / "v").resolve()),
        "path_given": "runs/v",
        "name": "v",
        "compressor": "variance",
        "synthetic": True,
        "schema_version": 3,
    }


def test_save_results_prices_throughput_from_the_batch_and_keeps_an_earlier_table(tmp_path):
    """A table of one dense row at P = 4, 2 s per step, 32 samples per worker: 4 × 32 / 2 =
    64 samples/s; without a batch no throughput. A second save into the folder is refused
    unless asked to overwrite."""
    from tests.core.test_results import _row
    from vgcsim.core.outdir import OutputError
    from vgcsim.core.results import save_results

    df = pd.DataFrame([_row(method="dense", encoding="fp32", collective="allreduce/ring")])
    header = dict(source="predicted", traces=[], cluster={}, extrapolation={}, options={})
    out = save_results(df, tmp_path / "r", batch_size_per_worker=32, **header)
    table, _ = read_results(out)
    assert table["throughput_samples_per_s"].tolist() == [64.0]
    with pytest.raises(OutputError):
        save_results(df, tmp_path / "r", **header)
    save_results(df, tmp_path / "r", overwrite=True, **header)
    assert read_results(tmp_path / "r")[0]["throughput_samples_per_s"].isna().all()


def test_write_results_files_by_hand(tmp_path):
    """The header is written with sorted keys, two-space indents and a final newline (a Path
    as its text), the schema version and kind filled in; the CSV and the Parquet file hold
    the result columns and no index."""
    import pyarrow.parquet as pq

    from tests.core.test_results import _row
    from vgcsim.core.results import RESULT_COLUMNS, results_header, write_results

    df = pd.DataFrame([_row(), _row(step=0)])
    header = results_header(
        source="predicted",
        traces=[],
        cluster={"file": tmp_path / "c.toml"},
        extrapolation={},
        options={},
        command=("vgcsim", "predict"),
    )
    del header["schema_version"], header["kind"]
    out = write_results(df, tmp_path / "r", header)
    text = (out / "results.json").read_text()
    head = json.loads(text)
    assert text == json.dumps(head, indent=2, sort_keys=True) + "\n"
    assert (head["schema_version"], head["kind"]) == (2, "vgcsim-results")
    assert head["cluster"] == {"file": str(tmp_path / "c.toml")}
    assert head["command"] == ["vgcsim", "predict"]
    assert (out / "results.csv").read_text().splitlines()[0] == ",".join(RESULT_COLUMNS)
    assert pq.read_schema(out / "results.parquet").names == list(RESULT_COLUMNS)


def test_a_header_without_its_keys_is_refused_and_without_a_command_says_none(tmp_path):
    from tests.core.test_results import _row
    from vgcsim.core.results import results_header, write_results

    df = pd.DataFrame([_row()])
    with pytest.raises(ResultsError) as err:
        write_results(df, tmp_path / "r", {"source": "predicted"})
    # schema_version and kind are filled in; the other keys a header needs are named
    assert str(err.value) == (
        "result header lacks keys ['traces', 'cluster', 'extrapolation', 'options', "
        "'versions', 'git_commit', 'command']; build it with results_header()"
    )
    assert not (tmp_path / "r").exists()
    head = results_header(source="predicted", traces=[], cluster={}, extrapolation={}, options={})
    assert head["command"] is None and head["schema_version"] == 2
