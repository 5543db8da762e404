"""``write_results`` as a command meets it: an earlier table is kept unless asked, a run stopped
half-way leaves a folder vgcsim may write again, and the log names what was written."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tests.conftest import ascii_locale
from tests.core.test_results import _header, _row
from tests.core.test_results_values import _edit_header
from vgcsim.core.errors import ResultsError
from vgcsim.core.outdir import OutputError, read_marker
from vgcsim.core.results import finalize_results, read_results, write_results


def test_an_earlier_table_is_kept_unless_overwrite_is_given(tmp_path):
    df = pd.DataFrame([_row()])
    out = write_results(df, tmp_path / "r", _header())
    before = (out / "results.parquet").read_bytes()
    with pytest.raises(OutputError, match="already holds vgcsim predict output; pass --overwrite"):
        write_results(pd.DataFrame([_row(), _row(step=0)]), out, _header())
    assert (out / "results.parquet").read_bytes() == before
    write_results(pd.DataFrame([_row(), _row(step=0)]), out, _header(), overwrite=True)
    assert len(pd.read_parquet(out / "results.parquet")) == 2


def test_a_run_stopped_half_way_leaves_every_planned_file_listed(tmp_path):
    def fails(path: str) -> None:
        raise RuntimeError("stopped")

    out = tmp_path / "r"
    with pytest.raises(RuntimeError, match="stopped"):
        write_results(pd.DataFrame([_row()]), out, _header(), files={"extra.txt": fails})
    listed = read_marker(out)["files"]
    assert listed == ["extra.txt", "results.csv", "results.json", "results.parquet"]
    # so the same command may write the folder again, with --overwrite
    write_results(
        pd.DataFrame([_row()]),
        out,
        _header(),
        overwrite=True,
        files={"extra.txt": lambda p: open(p, "w").close()},
    )
    assert (out / "extra.txt").is_file()


def test_the_log_names_the_rows_and_the_folder(tmp_path, caplog):
    with caplog.at_level(logging.INFO, logger="vgcsim"):
        out = write_results(pd.DataFrame([_row(), _row(step=0)]), tmp_path / "r", _header())
    assert f"wrote 2 result rows to {out}" in [r.getMessage() for r in caplog.records]


def test_the_dense_baseline_is_the_fastest_dense_row_and_ties_go_to_the_first_listed():
    """Of a group's dense fp32 rows the fastest sets the relative columns; among rows equally
    fast, the first in the table (a stable order, the same on every machine). 32 slower rows
    come first so that an unstable sort of 64 rows would pick another of the tied ones."""
    dense = [
        _row(method="dense", encoding="fp32", collective="allreduce/ring", device=f"d{i}",
             step_s=2.0 if i < 32 else 1.0, compute_s=0.1 + i / 1000)
        for i in range(64)
    ]  # fmt: skip
    out = finalize_results(pd.DataFrame([*dense, _row(step_s=0.5)]))
    mine = out.iloc[-1]
    assert mine["speedup_vs_dense"] == pytest.approx(1.0 / 0.5)
    assert mine["scaling_efficiency"] == pytest.approx((0.1 + 32 / 1000) / 0.5)
    assert out["scaling_efficiency"].iloc[40] == pytest.approx((0.1 + 32 / 1000) / 1.0)


def test_a_column_outside_the_result_and_factor_columns_is_refused_by_name():
    with pytest.raises(ResultsError) as err:
        finalize_results(pd.DataFrame([_row(notes="hand-added")]))
    assert "result table columns differ from RESULT_COLUMNS" in str(err.value)
    assert "'notes'" in str(err.value)


def test_a_sweeps_text_factor_given_as_a_path_is_stored_as_its_text():
    df = finalize_results(pd.DataFrame([_row(trace_path=Path("runs/a"), bandwidth_Bps=1.25e9)]))
    assert df["trace_path"].tolist() == ["runs/a"]
    assert df["bandwidth_Bps"].dtype == np.float64 and df["bandwidth_Bps"].tolist() == [1.25e9]


def test_a_result_header_with_utf8_text_is_read_whatever_the_locale(tmp_path):
    out = write_results(pd.DataFrame([_row()]), tmp_path / "r", _header())
    head = json.loads((out / "results.json").read_text(encoding="utf-8"))
    head["cluster"]["name"] = "Zürich 10 µs"
    (out / "results.json").write_text(json.dumps(head, ensure_ascii=False), encoding="utf-8")
    with ascii_locale():
        _, header = read_results(out)
    assert header["cluster"]["name"] == "Zürich 10 µs"


def test_a_mistyped_nested_header_field_is_named_by_its_dotted_path(tmp_path):
    out = write_results(pd.DataFrame([_row()]), tmp_path / "r", _header())
    _edit_header(out, traces=[{"name": 5}])
    with pytest.raises(ResultsError) as err:
        read_results(out)
    assert "field traces.0.name: " in str(err.value)
