"""Trace io: write in chunks, read back, crash prefixes, corrupt files, worker_bits."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from vgcsim.core.errors import SchemaVersionError, TraceError, UnknownNameError
from vgcsim.traces import schema
from vgcsim.traces.io import TraceWriter, chunk_files, read_trace

LAYERS = [
    {"index": 0, "name": "w", "shape": [4, 3], "numel": 12},
    {"index": 1, "name": "b", "shape": [4], "numel": 4},
]


def make_header(workers: int = 2) -> dict:
    return {
        "synthetic": True,
        "config": {"x": 1},
        "seeds": {"seed": 0},
        "versions": {},
        "git_commit": None,
        "machine": {},
        "workers": workers,
        "batch_size_per_worker": 8,
        "compressor": {"name": "fake", "params": {}},
        "encodings": ["packed32", "fp32"],
        "primary_encoding": "packed32",
        "layers": LAYERS,
        "flops_per_sample": 100.0,
        "dense_bytes_per_step": 64,
    }


def write_steps(w: TraceWriter, steps: range, workers: int = 2) -> None:
    for s in steps:
        rows = {c: [] for c in (*schema.PAYLOAD_COLUMNS, "bits_packed32", "bits_fp32")}
        for k in range(workers):
            for layer in LAYERS:
                sent = (s + k + layer["index"]) % (layer["numel"] + 1)
                for c, v in zip(
                    rows,
                    (
                        s,
                        k,
                        layer["index"],
                        layer["numel"],
                        sent,
                        32 * sent + 96,  # packed32: u32 layer, count, f32 scale + 32 per value
                        32 * layer["numel"] + 64,  # fp32: u32 layer, count + 32 per element
                    ),
                    strict=True,
                ):
                    rows[c].append(v)
        w.add_payload_rows(rows)
        w.add_step(
            {
                "step": s,
                "loss": 1.0 / (s + 1),
                "lr": 0.1,
                "grad_norm": 1.0,
                "density": 0.5,
                "compute_s": 0.01,
                "variance_s": 0.0,
                "compress_s": 0.0,
                "encode_s": 0.0,
            }
        )
        if s % 4 == 3:
            w.add_eval(
                {"step": s, "train_loss": 1.0, "train_acc": 0.5, "test_loss": 1.0, "test_acc": 0.4}
            )


def test_round_trip_and_chunks(tmp_path):
    run = tmp_path / "run"
    with TraceWriter(run, make_header(), chunk_steps=3) as w:
        write_steps(w, range(10))
    assert len(chunk_files(run, "steps")) == 4
    t = read_trace(run)
    assert t.status == "complete" and t.steps_count == 10 and t.workers == 2
    assert len(t.payloads) == 10 * 2 * 2
    assert list(t.evals["step"]) == [3, 7]
    assert t.dense_bits_per_worker() == 32 * 16
    assert t.compressor == "fake" and t.synthetic and t.encodings == ["packed32", "fp32"]
    # pandas alone reads each table
    assert len(pd.read_parquet(run / "payloads")) == 40


def test_worker_bits_sums_layers(tmp_path):
    run = tmp_path / "run"
    with TraceWriter(run, make_header(), chunk_steps=4) as w:
        write_steps(w, range(5))
    t = read_trace(run)
    wb = t.worker_bits()
    assert list(wb.columns) == [0, 1] and list(wb.index) == [0, 1, 2, 3, 4]
    p = t.payloads
    expect = p[(p.step == 2) & (p.worker == 1)]["bits_packed32"].sum()
    assert wb.loc[2, 1] == expect
    assert (t.worker_bits("fp32").to_numpy() == 32 * 16 + 2 * 64).all()
    with pytest.raises(UnknownNameError, match="packed32"):
        t.worker_bits("bitmap")


def test_exception_marks_stopped_and_keeps_rows(tmp_path):
    run = tmp_path / "run"
    with pytest.raises(RuntimeError):
        with TraceWriter(run, make_header(), chunk_steps=50) as w:
            write_steps(w, range(7))
            raise RuntimeError("boom")
    t = read_trace(run)
    assert t.status == "stopped" and "boom" in t.header["stop_reason"] and t.steps_count == 7


def test_unfinished_run_reads_closed_prefix(tmp_path):
    run = tmp_path / "run"
    w = TraceWriter(run, make_header(), chunk_steps=4)
    write_steps(w, range(10))  # chunks for steps 0-3 and 4-7 closed; 8-9 buffered (lost)
    t = read_trace(run)
    assert t.status == "running" and list(t.steps["step"]) == list(range(8))
    # a payload chunk that landed without its steps chunk is dropped on read
    w.flush()
    (run / "steps" / "part-000002.parquet").unlink()
    t = read_trace(run)
    assert t.steps_count == 8 and t.payloads["step"].max() == 7


def test_an_unfinished_run_keeps_the_evaluation_at_its_last_closed_step(tmp_path):
    run = tmp_path / "run"
    w = TraceWriter(run, make_header(), chunk_steps=4)
    write_steps(w, range(9))  # evaluations at steps 3 and 7, the last steps of two chunks
    w.add_eval({"step": 8, "train_loss": 1.0, "train_acc": 0.5, "test_loss": 1.0, "test_acc": 0.4})
    w.flush()
    # the run dies before the steps chunk of step 8 lands (its payload and eval chunks did):
    # the last closed step is 7, whose evaluation stays; step 8's goes with its step
    (run / "steps" / "part-000002.parquet").unlink()
    assert list(pd.read_parquet(run / "evals")["step"]) == [3, 7, 8]
    t = read_trace(run)
    assert t.status == "running" and t.steps_count == 8
    assert list(t.evals["step"]) == [3, 7]


def test_nonempty_output_refused(tmp_path):
    run = tmp_path / "run"
    with TraceWriter(run, make_header()) as w:
        write_steps(w, range(2))
    with pytest.raises(TraceError, match="not empty"):
        TraceWriter(run, make_header())
    with TraceWriter(run, make_header(), overwrite=True) as w:
        write_steps(w, range(1))
    assert read_trace(run).steps_count == 1


def test_missing_and_corrupt(tmp_path):
    with pytest.raises(TraceError, match="not found"):
        read_trace(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(TraceError, match="no header.json"):
        read_trace(tmp_path / "empty")
    run = tmp_path / "run"
    with TraceWriter(run, make_header(), chunk_steps=2) as w:
        write_steps(w, range(4))
    part = run / "payloads" / "part-000001.parquet"
    part.write_bytes(part.read_bytes()[:50])
    with pytest.raises(TraceError, match="part-000001.parquet is truncated or corrupt"):
        read_trace(run)
    (run / "header.json").write_text("{not json")
    with pytest.raises(TraceError, match="corrupt"):
        read_trace(run)


def test_schema_version_refused(tmp_path):
    run = tmp_path / "run"
    with TraceWriter(run, make_header()) as w:
        write_steps(w, range(1))
    h = json.loads((run / "header.json").read_text())
    h["schema_version"] = schema.TRACE_SCHEMA_VERSION + 1
    (run / "header.json").write_text(json.dumps(h))
    with pytest.raises(SchemaVersionError, match="upgrade vgcsim"):
        read_trace(run)


def test_int_columns_stay_int(tmp_path):
    run = tmp_path / "run"
    with TraceWriter(run, make_header(), chunk_steps=2) as w:
        write_steps(w, range(3))
    t = read_trace(run)
    for c in (*schema.PAYLOAD_COLUMNS, "bits_packed32"):
        assert t.payloads[c].dtype == np.int64
    assert t.steps["step"].dtype == np.int64
