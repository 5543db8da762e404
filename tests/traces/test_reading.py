"""Reading a trace as it lies on disk (``vgcsim.traces.reading``): each refusal's one line,
the tables' types, a run that did not finish, and the bits per worker and layer."""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.conftest import write_hook_trace, write_tiny_trace
from vgcsim.core.errors import SchemaVersionError, TraceError
from vgcsim.traces import schema
from vgcsim.traces.reading import (
    printable,
    read_header,
    read_trace_parts,
    run_dir_of,
)


@pytest.fixture
def run(tmp_path) -> Path:
    return write_tiny_trace(tmp_path / "tiny")


def _edit_header(run: Path, **changes) -> Path:
    path = run / "header.json"
    header = json.loads(path.read_text())
    for key, value in changes.items():
        if value is None:
            header.pop(key, None)
        else:
            header[key] = value
    path.write_text(json.dumps(header))
    return path


def _refusal(run) -> str:
    with pytest.raises(TraceError) as info:
        read_header(run)
    return str(info.value)


def test_each_header_refusal_is_one_line_naming_the_file(run):
    hp = run / "header.json"
    hp.write_text("[1, 2]")
    assert _refusal(run) == f"{hp} is corrupt (expected a JSON object)"
    hp.write_text(json.dumps({"kind": "something else"}))
    assert _refusal(run) == f"{hp} is not a vgcsim trace header (kind='something else')"


def test_a_header_without_required_keys_names_them_all(run):
    hp = run / "header.json"
    header = json.loads(hp.read_text())
    for key in ("workers", "layers"):
        del header[key]
    hp.write_text(json.dumps(header))
    assert _refusal(run) == f"{hp} lacks required keys: workers, layers"


def test_the_first_type_problem_is_named_with_the_count_of_the_others(run):
    hp = _edit_header(run, workers="two")
    one = _refusal(run)
    assert one.startswith(f"{hp}: ") and "workers" in one and "more)" not in one
    _edit_header(run, workers="two", batch_size_per_worker="eight", flops_per_sample="many")
    assert _refusal(run).endswith(" (and 2 more)")
    _edit_header(run, workers="two", batch_size_per_worker="eight", flops_per_sample=1e9)
    assert _refusal(run).endswith(" (and 1 more)")


@pytest.mark.parametrize(
    ("version", "hint"),
    [
        (schema.TRACE_SCHEMA_VERSION + 1, "it was written by a newer vgcsim; upgrade vgcsim"),
        (schema.TRACE_SCHEMA_VERSION - 1, "re-record it with this version of vgcsim"),
        (True, "re-record it with this version of vgcsim"),
        ("x", "re-record it with this version of vgcsim"),
    ],
)
def test_a_schema_version_this_vgcsim_cannot_read_says_what_to_do(run, version, hint):
    _edit_header(run, schema_version=version)
    with pytest.raises(SchemaVersionError) as info:
        read_header(run)
    assert f"trace schema version {version!r} is not supported" in str(info.value)
    assert str(info.value).endswith(hint + (" to read it" if "newer" in hint else ""))


def test_a_header_json_path_reads_its_folder_and_a_file_is_refused(run, tmp_path):
    assert run_dir_of(run / "header.json") == run
    assert read_header(run / "header.json")["workers"] == 2
    f = tmp_path / "plain.txt"
    f.write_text("x")
    with pytest.raises(TraceError, match=r"^.*plain.txt is not a trace run directory$"):
        run_dir_of(f)


def test_printable_replaces_bytes_that_are_not_utf8():
    name = b"run-\xff\xfe".decode("utf-8", "surrogateescape")
    assert printable(Path("/x") / name) == "/x/run-\ufffd\ufffd"
    assert printable("µs") == "µs"


def _rewrite_chunk(path: Path, **columns) -> None:
    table = pq.read_table(path)
    for name, array in columns.items():
        i = table.schema.get_field_index(name)
        table = table.set_column(i, name, array)
    pq.write_table(table, path)


def test_a_column_of_the_wrong_type_is_named_with_the_type_expected(run):
    chunk = run / "payloads" / "part-000000.parquet"
    n = pq.read_table(chunk).num_rows
    _rewrite_chunk(chunk, worker=pa.array([0.5] * n))
    with pytest.raises(TraceError) as info:
        read_trace_parts(run)
    assert str(info.value) == (
        f"{chunk}: payloads column worker has Arrow type double; expected an integer type"
    )
    write_tiny_trace(run.parent / "again")
    chunk = run.parent / "again" / "steps" / "part-000000.parquet"
    rows = pq.read_table(chunk).num_rows
    _rewrite_chunk(chunk, loss=pa.array(["high"] * rows))
    with pytest.raises(
        TraceError, match="steps column loss has Arrow type string; expected a numeric type$"
    ):
        read_trace_parts(run.parent / "again")


def test_a_bits_column_is_judged_as_integer_bits(run):
    chunk = run / "payloads" / "part-000000.parquet"
    n = pq.read_table(chunk).num_rows
    _rewrite_chunk(chunk, bits_hand=pa.array([1.5] * n))
    with pytest.raises(
        TraceError,
        match="payloads column bits_hand has Arrow type double; expected an integer type$",
    ):
        read_trace_parts(run)


def test_a_corrupt_chunk_says_how_to_keep_the_valid_prefix(run):
    chunk = run / "steps" / "part-000001.parquet"
    chunk.write_bytes(b"not parquet")
    with pytest.raises(TraceError) as info:
        read_trace_parts(run)
    text = str(info.value)
    assert text.startswith(f"{chunk} is truncated or corrupt (")
    assert text.endswith("); delete that chunk and the ones after it to keep the valid prefix")


def test_a_table_lacking_columns_names_them(run):
    for chunk in sorted((run / "steps").glob("part-*.parquet")):
        table = pq.read_table(chunk).drop_columns(["loss", "lr"])
        pq.write_table(table, chunk)
    with pytest.raises(TraceError) as info:
        read_trace_parts(run)
    assert str(info.value) == f"{run / 'steps'} lacks columns: loss, lr"


def test_tables_of_several_chunks_are_indexed_from_zero_and_an_empty_one_is_typed(run):
    t = read_trace_parts(run)
    assert len(list((run / "payloads").glob("part-*.parquet"))) == 2
    assert list(t.payloads.index) == list(range(len(t.payloads)))
    assert list(t.steps.index) == [0, 1, 2]
    # no evals were recorded: an empty table of the described columns, step as int64
    assert t.evals.empty and list(t.evals.columns) == list(schema.EVAL_COLUMNS)
    assert t.evals["step"].dtype == np.int64
    floats = {t.evals[c].dtype for c in schema.EVAL_COLUMNS if c != "step"}
    assert floats == {np.dtype("float64")}


def test_a_run_that_did_not_finish_reads_up_to_its_last_closed_step(run, caplog):
    (run / "steps" / "part-000001.parquet").unlink()  # steps 0 and 1 closed, step 2 not
    _edit_header(run, status="stopped")
    with caplog.at_level(logging.INFO, logger="vgcsim.traces.reading"):
        t = read_trace_parts(run)
    assert list(t.steps["step"]) == [0, 1]
    assert sorted(set(t.payloads["step"])) == [0, 1]  # step 1 kept: <= the last closed step
    assert list(t.payloads.index) == list(range(len(t.payloads)))
    assert caplog.messages == [f"{run}: dropping 4 payload rows after the last closed step 1"]


def test_a_complete_run_keeps_every_row(run, caplog):
    with caplog.at_level(logging.INFO, logger="vgcsim.traces.reading"):
        t = read_trace_parts(run)
    assert sorted(set(t.payloads["step"])) == [0, 1, 2] and caplog.messages == []


def test_a_run_stopped_before_its_first_closed_step_keeps_no_row(run):
    shutil.rmtree(run / "steps")
    _edit_header(run, status="running")
    t = read_trace_parts(run)
    assert t.steps.empty and t.payloads.empty


def test_the_ranks_table_is_read_and_trimmed_like_the_others(tmp_path):
    run = write_hook_trace(tmp_path)
    t = read_trace_parts(run)
    assert t.ranks is not None
    steps = sorted(set(t.steps["step"]))
    assert sorted(set(t.ranks["step"])) == steps
    assert set(schema.REQUIRED_RANK_COLUMNS) <= set(t.ranks.columns)
    # stopped inside the first steps chunk: the ranks rows after its last step go, that
    # step's rows stay
    steps_chunk = sorted((run / "steps").glob("part-*.parquet"))[0]
    table = pq.read_table(steps_chunk)
    last = int(pa.compute.max(table["step"]).as_py()) - 1
    pq.write_table(table.filter(pa.compute.less_equal(table["step"], last)), steps_chunk)
    for extra in sorted((run / "steps").glob("part-*.parquet"))[1:]:
        extra.unlink()
    _edit_header(run, status="stopped")
    t = read_trace_parts(run)
    assert sorted(set(t.ranks["step"])) == [s for s in steps if s <= last]
    assert list(t.ranks.index) == list(range(len(t.ranks)))
    assert "index" not in t.ranks.columns


def test_a_trace_without_a_ranks_table_has_none(run):
    assert read_trace_parts(run).ranks is None


def test_worker_bits_per_step_and_worker_with_zeros_where_nothing_was_sent(run):
    t = read_trace_parts(run)
    t.payloads = t.payloads[~((t.payloads["step"] == 1) & (t.payloads["worker"] == 1))]
    t.payloads = t.payloads.iloc[::-1]  # rows in any order
    wide = t.worker_bits()
    assert wide.index.name == "step" and wide.columns.name == "worker"
    assert list(wide.index) == [0, 1, 2] and list(wide.columns) == [0, 1]
    assert wide.dtypes.unique().tolist() == [np.dtype("int64")]
    assert wide.to_numpy().tolist() == [[960, 1920], [804, 0], [9600, 32]]
    assert t.worker_bits("hand2x").to_numpy().tolist() == [[1920, 3840], [1608, 0], [19200, 64]]


def test_layer_bits_long_and_sorted(run):
    t = read_trace_parts(run)
    t.payloads = t.payloads.iloc[::-1].reset_index(drop=True)
    long = t.layer_bits()
    assert list(long.columns) == ["step", "worker", "layer", "bits"]
    assert list(long.index) == list(range(len(long)))
    keys = list(zip(long["step"], long["worker"], long["layer"], strict=True))
    assert keys == sorted(keys)
    assert long["bits"].tolist()[:4] == [800, 160, 1600, 320]
    assert t.layer_bits("hand2x")["bits"].tolist()[:2] == [1600, 320]


def test_an_encoding_the_trace_lacks_is_refused_with_the_ones_it_has(run):
    t = read_trace_parts(run)
    with pytest.raises(Exception) as info:
        t.worker_bits("packed32")
    assert str(info.value) == "unknown encoding of this trace 'packed32'; valid: hand, hand2x"


def test_a_worker_that_never_sent_gets_zero_bits(run):
    t = read_trace_parts(run)
    t.payloads = t.payloads[t.payloads["worker"] == 0]
    assert t.worker_bits().to_numpy().tolist() == [[960, 0], [804, 0], [9600, 0]]


def test_a_column_no_table_describes_is_read_whatever_its_type(run):
    chunk = run / "payloads" / "part-000000.parquet"
    table = pq.read_table(chunk)
    pq.write_table(table.append_column("note", pa.array(["x"] * table.num_rows)), chunk)
    assert set(read_trace_parts(run).payloads["note"].dropna()) == {"x"}


def test_an_unreadable_header_is_one_line_with_the_reason(run, monkeypatch):
    def refuse(self, *args, **kwargs):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(Path, "read_text", refuse)
    assert _refusal(run) == f"cannot read {run / 'header.json'}: Permission denied"


def test_a_complete_run_is_read_as_it_lies(run):
    """Rows past the last step of a complete run are not trimmed: validation judges them."""
    (run / "steps" / "part-000001.parquet").unlink()
    t = read_trace_parts(run)
    assert list(t.steps["step"]) == [0, 1] and 2 in set(t.payloads["step"])


def test_trimmed_tables_are_indexed_afresh_without_an_index_column(run):
    (run / "evals").mkdir()
    evals = pd.DataFrame({c: [0.5, 0.5, 0.5] for c in schema.EVAL_COLUMNS})
    evals["step"] = [0, 1, 2]
    evals.to_parquet(run / "evals" / "part-000000.parquet")
    (run / "steps" / "part-000001.parquet").unlink()
    _edit_header(run, status="stopped")
    t = read_trace_parts(run)
    assert list(t.payloads.columns) == [*schema.PAYLOAD_COLUMNS, "bits_hand", "bits_hand2x"]
    assert list(t.evals.columns) == list(schema.EVAL_COLUMNS)
    assert list(t.evals["step"]) == [0, 1] and list(t.evals.index) == [0, 1]


def test_a_stopped_run_without_payloads_logs_nothing(run, caplog):
    shutil.rmtree(run / "payloads")
    _edit_header(run, status="stopped")
    with caplog.at_level(logging.INFO, logger="vgcsim.traces.reading"):
        t = read_trace_parts(run)
    assert t.payloads.empty and caplog.messages == []
