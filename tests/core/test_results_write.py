"""``write_results`` as a command meets it: an earlier table is kept unless asked, a run stopped
half-way leaves a folder vgcsim may write again, and the log names what was written."""

from __future__ import annotations

import logging

import pandas as pd
import pytest

from tests.core.test_results import _header, _row
from vgcsim.core.outdir import OutputError, read_marker
from vgcsim.core.results import write_results


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
