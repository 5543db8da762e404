"""vgcsim.core.results: writing, reading and finalizing result tables."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from vgcsim.core.errors import ResultsError
from vgcsim.core.results import (
    RESULT_COLUMNS,
    RESULTS_HEADER_KEYS,
    RESULTS_SCHEMA_VERSION,
    finalize_results,
    read_results,
    results_header,
    without_attrs,
    write_results,
)


def _row(**kw):
    base = {c: np.nan for c in RESULT_COLUMNS}
    base.update(
        source="predicted",
        path="closed_form",
        trace="t",
        compressor="variance",
        encoding="packed32",
        cluster="10GbE",
        topology="star",
        compute_mode="model",
        device="V100",
        world_size=4,
        method="compressed",
        collective="allgatherv/ring",
        step=-1,
        compute_s=1.0,
        optimizer_s=0.0,
        variance_s=0.0,
        codec_s=0.0,
        decode_s=0.0,
        comm_s=1.0,
        step_s=2.0,
        payload_bytes_max=10.0,
        payload_bytes_mean=5.0,
    )
    base.update(kw)
    return base


def _header():
    return results_header(
        source="predicted",
        traces=[{"name": "t"}],
        cluster={"name": "10GbE"},
        extrapolation={"rule": "modulo", "seed": None},
        options={},
        command=["vgcsim", "predict"],
    )


def test_finalize_speedup_and_efficiency():
    df = pd.DataFrame(
        [
            _row(),
            _row(method="dense", compressor="dense", collective="allreduce/ring", step_s=4.0),
            _row(
                method="dense", compressor="dense", collective="allreduce/binomial_tree", step_s=5.0
            ),
            _row(world_size=8, step_s=3.0),  # no dense row in its group
        ]
    )
    out = finalize_results(df, batch_size_per_worker=32)
    assert out.loc[0, "speedup_vs_dense"] == pytest.approx(2.0)  # fastest dense / 2.0
    assert out.loc[1, "speedup_vs_dense"] == pytest.approx(1.0)
    assert out.loc[2, "speedup_vs_dense"] == pytest.approx(0.8)
    assert out.loc[0, "scaling_efficiency"] == pytest.approx(0.5)
    assert np.isnan(out.loc[3, "speedup_vs_dense"])
    assert out.loc[0, "throughput_samples_per_s"] == pytest.approx(4 * 32 / 2.0)


def test_finalize_leaves_the_frames_attrs_behind_and_its_rows_untouched():
    """The input's attrs (a cluster, its options) stay with the input: the result has none,
    and the input keeps its rows and attrs; without_attrs shares the columns it hands on."""
    df = pd.DataFrame([_row(step_s=2.0), _row(method="dense", compressor="dense", step_s=4.0)])
    df.attrs = {"cluster": {"name": "10GbE", "link": {"bandwidth_Bps": 1.25e9}}}
    before = df.copy()
    out = finalize_results(df)
    assert out.attrs == {} and list(out["speedup_vs_dense"]) == pytest.approx([2.0, 1.0])
    pd.testing.assert_frame_equal(df, before)
    assert df.attrs == {"cluster": {"name": "10GbE", "link": {"bandwidth_Bps": 1.25e9}}}
    plain = without_attrs(df)
    assert plain.attrs == {} and list(plain.columns) == list(df.columns)
    assert np.shares_memory(plain["step_s"].to_numpy(), df["step_s"].to_numpy())


def test_finalize_baseline_is_dense_fp32_and_counts_the_optimizer():
    dense = dict(method="dense", compressor="dense", collective="allreduce/ring")
    df = pd.DataFrame(
        [
            _row(step_s=2.0),
            _row(**dense, encoding="fp32", step_s=4.0, compute_s=1.0, optimizer_s=0.5),
            _row(**dense, encoding="bf16", step_s=3.0),  # faster, but not the baseline
        ]
    )
    out = finalize_results(df)
    assert list(out["speedup_vs_dense"]) == pytest.approx([2.0, 1.0, 4.0 / 3.0])
    # single worker: compute + optimizer of the fp32 dense row = 1.5 s
    assert out.loc[0, "scaling_efficiency"] == pytest.approx(1.5 / 2.0)


def test_version_1_tables_are_upgraded_on_read(tmp_path):
    df = finalize_results(pd.DataFrame([_row(), _row(method="dense", step_s=3.0)]))
    old = df.drop(columns=["compute_mode", "device", "optimizer_s", "decode_s"])
    out = tmp_path / "v1"
    out.mkdir()
    old.to_parquet(out / "results.parquet", index=False)
    head = {
        **_header(),
        "schema_version": 1,
        "cluster": {"compute": "model", "device": {"name": "A100"}},
    }
    (out / "results.json").write_text(json.dumps(head))
    back, _ = read_results(out)
    assert set(back["compute_mode"]) == {"model"} and set(back["device"]) == {"A100"}
    assert (back["decode_s"] == 0).all() and (back["optimizer_s"] == 0).all()
    head["cluster"] = {"compute": "trace", "device": {"name": "V100"}}
    (out / "results.json").write_text(json.dumps(head))
    back, _ = read_results(out)
    assert set(back["device"]) == {"recorded"}  # not the unused V100 of a version-1 preset


def test_write_read_round_trip(tmp_path):
    df = finalize_results(pd.DataFrame([_row(), _row(method="dense", step_s=3.0)]))
    out = write_results(df, tmp_path / "res", _header())
    back, header = read_results(out)
    pd.testing.assert_frame_equal(back, df)
    assert header["schema_version"] == RESULTS_SCHEMA_VERSION
    assert set(RESULTS_HEADER_KEYS) <= set(header)
    back2, _ = read_results(out / "results.parquet")
    assert len(back2) == 2
    assert (out / "results.csv").read_text().startswith("source,path,trace")


def test_columns_must_match(tmp_path):
    df = pd.DataFrame([_row()]).drop(columns=["comm_s"])
    with pytest.raises(ResultsError, match="comm_s"):
        write_results(df, tmp_path, _header())


def test_unknown_version_and_corrupt(tmp_path):
    out = write_results(pd.DataFrame([_row()]), tmp_path / "r", _header())
    h = json.loads((out / "results.json").read_text())
    h["schema_version"] = 99
    (out / "results.json").write_text(json.dumps(h))
    with pytest.raises(ResultsError, match="version"):
        read_results(out)
    with pytest.raises(ResultsError, match="not a result table"):
        read_results(tmp_path / "missing")
    out2 = write_results(pd.DataFrame([_row()]), tmp_path / "r2", _header())
    (out2 / "results.parquet").write_bytes(b"garbage")
    with pytest.raises(ResultsError, match="corrupt"):
        read_results(out2)


def test_compute_modes_are_never_compared():
    dense = dict(method="dense", compressor="dense", encoding="fp32", collective="allreduce/ring")
    df = pd.DataFrame(
        [
            _row(step_s=2.0, compute_mode="model"),
            _row(**dense, step_s=4.0, compute_mode="model"),
            _row(step_s=2.0, compute_mode="trace"),
            _row(**dense, step_s=1.0, compute_mode="trace"),
        ]
    )
    out = finalize_results(df)
    assert list(out["speedup_vs_dense"]) == pytest.approx([2.0, 1.0, 0.5, 1.0])
