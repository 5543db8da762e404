"""vgcsim.core.results by value: the version-1 upgrade's ``compute_mode`` and ``device`` for
every shape of a version-1 cluster, the writer a result folder's marker names (from the header's
command), the empty result frame, and which folders count as result tables from before
markers."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from tests.conftest import ascii_locale
from tests.core.test_results import _row
from vgcsim.core.outdir import MARKER
from vgcsim.core.results import (
    RESULT_COLUMNS,
    RESULTS_HEADER_KEYS,
    empty_results,
    legacy_result_files,
    read_results,
    write_results,
)


def _header(**kw):
    head = {
        "schema_version": 2,
        "kind": "vgcsim-results",
        "source": "predicted",
        "traces": [{"name": "t"}],
        "cluster": {"name": "10GbE"},
        "extrapolation": {"rule": "modulo", "seed": None},
        "options": {},
        "versions": {},
        "git_commit": None,
        "command": None,
    }
    head.update(kw)
    return head


# --- version-1 tables: compute_mode and device from the header's cluster -------------------


def _read_v1(tmp_path, cluster):
    """A version-1 table (no compute_mode, device, optimizer_s, decode_s) read back."""
    folder = tmp_path / "v1"
    folder.mkdir()
    old = pd.DataFrame([_row(), _row(method="dense", step_s=3.0)]).drop(
        columns=["compute_mode", "device", "optimizer_s", "decode_s"]
    )
    old.to_parquet(folder / "results.parquet", index=False)
    head = _header(schema_version=1, cluster=cluster)
    (folder / "results.json").write_text(json.dumps(head), encoding="utf-8")
    df, _ = read_results(folder)
    return df


def test_a_version_1_cluster_without_compute_was_measured_on_the_recording_machine(tmp_path):
    df = _read_v1(tmp_path, {"name": "10GbE", "device": {"name": "A100"}})
    assert df["compute_mode"].tolist() == ["trace", "trace"]
    assert df["device"].tolist() == ["recorded", "recorded"]
    assert df["optimizer_s"].tolist() == [0.0, 0.0] and df["decode_s"].tolist() == [0.0, 0.0]


def test_a_version_1_device_given_by_name_alone_is_that_name(tmp_path):
    df = _read_v1(tmp_path, {"compute": "model", "device": "A100"})
    assert df["compute_mode"].tolist() == ["model", "model"]
    assert df["device"].tolist() == ["A100", "A100"]


@pytest.mark.parametrize(
    "cluster",
    [{"compute": "model"}, {"compute": "model", "device": {"peak_flops": 1e12}}],
    ids=["no device", "device without a name"],
)
def test_a_version_1_model_cluster_without_a_device_name_leaves_device_empty(tmp_path, cluster):
    df = _read_v1(tmp_path, cluster)
    assert df["compute_mode"].tolist() == ["model", "model"]
    assert df["device"].tolist() == ["", ""]


# --- the writer a result folder's marker names ----------------------------------------------


@pytest.mark.parametrize(
    ("command", "writer"),
    [
        (["vgcsim", "predict", "--cluster", "10GbE"], "vgcsim predict"),
        (["/usr/local/bin/vgcsim", "simulate"], "vgcsim simulate"),
        (["vgcsim"], "vgcsim"),
        (["study.py", "--fast"], "study.py"),
        (["predict", "vgcsim"], "predict"),  # only a first word ending in vgcsim is vgcsim
        ([], "vgcsim"),
        (None, "vgcsim"),
    ],
)
def test_the_marker_names_the_command_that_wrote_the_table(tmp_path, command, writer):
    out = write_results(empty_results(), tmp_path / "res", _header(command=command))
    marker = json.loads((out / MARKER).read_text(encoding="utf-8"))
    assert marker["command"] == writer


def test_an_explicit_writer_is_what_the_marker_names(tmp_path):
    head = _header(command=["vgcsim", "predict"])
    out = write_results(empty_results(), tmp_path / "res", head, writer="vgcsim.api")
    assert json.loads((out / MARKER).read_text(encoding="utf-8"))["command"] == "vgcsim.api"


# --- empty_results ----------------------------------------------------------------------------


def test_the_empty_result_frame_has_the_result_columns_and_their_dtypes():
    df = empty_results()
    assert len(df) == 0
    assert list(df.columns) == list(RESULT_COLUMNS)
    assert df["world_size"].dtype == np.int64 and df["step"].dtype == np.int64
    for col in ("compute_s", "comm_s", "step_s", "payload_bytes_max", "speedup_vs_dense"):
        assert df[col].dtype == np.float64, col
    for col in ("source", "method", "device", "collective"):
        assert pd.api.types.is_string_dtype(df[col]), col


def test_an_empty_table_writes_and_reads_back_empty(tmp_path):
    out = write_results(empty_results(), tmp_path / "res", _header())
    df, header = read_results(out)
    assert len(df) == 0 and list(df.columns) == list(RESULT_COLUMNS)
    assert set(RESULTS_HEADER_KEYS) <= set(header)


# --- legacy_result_files: result tables from before markers ----------------------------------


def test_a_folder_whose_results_json_is_not_a_result_header_is_not_a_result_table(tmp_path):
    (tmp_path / "results.csv").write_text("a,b\n", encoding="utf-8")
    (tmp_path / "results.json").write_text('{"kind": "vgcsim-trace"}', encoding="utf-8")
    assert legacy_result_files(tmp_path) is None
    (tmp_path / "results.json").write_text('["kind", "vgcsim-results"]', encoding="utf-8")
    assert legacy_result_files(tmp_path) is None
    (tmp_path / "results.json").write_text("{not json", encoding="utf-8")
    assert legacy_result_files(tmp_path) is None
    (tmp_path / "results.json").unlink()
    assert legacy_result_files(tmp_path) is None


def test_a_legacy_result_table_lists_the_vgcsim_files_it_holds_whatever_the_locale(tmp_path):
    head = {"kind": "vgcsim-results", "cluster": {"name": "Zürich 10 µs"}}
    (tmp_path / "results.json").write_text(json.dumps(head, ensure_ascii=False), "utf-8")
    for name in ("results.csv", "scenario.md", "notes.txt"):
        (tmp_path / name).write_text("x", encoding="utf-8")
    with ascii_locale():
        files = legacy_result_files(tmp_path)
    assert files == ["results.json", "results.csv", "scenario.md"]  # not the user's notes
