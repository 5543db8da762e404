"""The trace writer's side of stopping and resuming, without training: a write that fails
removes its chunk and leaves a ``stopped`` prefix; checkpoints land before the steps chunk
that commits them and only the last one is kept; a resume point drops what came after it."""

from __future__ import annotations

import errno
import json

import pytest

from vgcsim.core.errors import TraceError
from vgcsim.traces import schema
from vgcsim.traces.io import (
    CHECKPOINT_DIR,
    CHECKPOINT_FILE,
    RESERVE_FILE,
    TraceWriter,
    being_written,
    find_resume_point,
    read_header,
    read_trace,
)

HEADER = {
    "synthetic": False,
    "config": {"test": True},
    "seeds": {"seed": 0},
    "versions": {},
    "git_commit": None,
    "machine": {},
    "workers": 1,
    "batch_size_per_worker": 8,
    "compressor": {"name": "dense", "params": {}},
    "encodings": ["hand"],
    "primary_encoding": "hand",
    "layers": [{"index": 0, "name": "w", "shape": [10], "numel": 10}],
    "flops_per_sample": 1e6,
    "dense_bytes_per_step": 40,
}


def _step(w: TraceWriter, t: int) -> None:
    w.add_payload_rows(
        {"step": [t], "worker": [0], "layer": [0], "numel": [10], "sent": [10], "bits_hand": [320]}
    )
    w.add_step(
        {
            "step": t,
            "loss": 1.0 / (t + 1),
            "lr": 0.1,
            "grad_norm": 1.0,
            "density": 1.0,
            "compute_s": 0.1,
            "variance_s": 0.0,
            "compress_s": 0.0,
            "encode_s": 0.0,
        }
    )


def test_checkpoint_lands_before_its_chunk_and_only_the_last_is_kept(tmp_path):
    seen: list[list[str]] = []

    def save(folder):
        # What is on disk when the state is taken: the steps chunk of this index is not.
        steps = sorted(p.name for p in (tmp_path / "r" / "steps").glob("part-*.parquet"))
        seen.append(steps)
        (folder / "state.json").write_text(json.dumps({"n": len(steps)}))

    w = TraceWriter(tmp_path / "r", HEADER, chunk_steps=2, checkpoint=save)
    assert (tmp_path / "r" / RESERVE_FILE).is_file()
    for t in range(5):
        _step(w, t)
    assert seen == [[], ["part-000000.parquet"]]
    kept = sorted(p.name for p in (tmp_path / "r" / CHECKPOINT_DIR).iterdir())
    assert kept == ["chunk-000001"]
    info = json.loads(
        (tmp_path / "r" / CHECKPOINT_DIR / "chunk-000001" / CHECKPOINT_FILE).read_text()
    )
    assert info == {"chunk_index": 1, "steps_written": 4}
    w.finish("complete")
    assert not (tmp_path / "r" / CHECKPOINT_DIR).exists()
    assert not (tmp_path / "r" / RESERVE_FILE).exists()
    with pytest.raises(TraceError, match="nothing to resume"):
        find_resume_point(tmp_path / "r")


def test_failed_write_removes_its_chunk_and_stops_the_run(tmp_path):
    calls = []

    def full_disk(folder):
        calls.append(folder.name)
        if len(calls) == 2:
            (folder / "state.pt").write_bytes(b"\0" * 100)
            raise OSError(errno.ENOSPC, "No space left on device")

    run = tmp_path / "r"
    w = TraceWriter(run, HEADER, chunk_steps=2, checkpoint=full_disk)
    _step(w, 0)
    _step(w, 1)
    _step(w, 2)
    with pytest.raises(TraceError, match="no space left on device") as exc:
        _step(w, 3)
    assert "checkpoint/chunk-000001" in str(exc.value) and "keeps the 2 steps" in str(exc.value)
    # chunk 1's payloads were written before the checkpoint failed: removed again
    assert sorted(p.name for p in (run / "payloads").iterdir()) == ["part-000000.parquet"]
    assert sorted(p.name for p in (run / CHECKPOINT_DIR).iterdir()) == ["chunk-000000"]
    assert read_header(run)["status"] == "running"
    w.finish("stopped", str(exc.value))
    header = read_header(run)
    assert header["status"] == "stopped" and "no space left" in header["stop_reason"]
    assert header["steps_recorded"] == 2 and read_trace(run).steps_count == 2
    assert not list(run.rglob("*.tmp")) and not (run / RESERVE_FILE).exists()
    # the prefix resumes from chunk 0's checkpoint
    point = find_resume_point(run)
    assert (point.chunk_index, point.steps_written) == (1, 2)


def test_resume_drops_later_chunks_and_stale_checkpoints(tmp_path):
    run = tmp_path / "r"
    w = TraceWriter(run, HEADER, chunk_steps=2, checkpoint=lambda folder: None)
    for t in range(5):
        _step(w, t)
    w.finish("stopped", "interrupted by SIGTERM")  # chunk 2 (step 4) kept, no checkpoint
    (run / CHECKPOINT_DIR / "chunk-000000.tmp").mkdir()
    point = find_resume_point(run)
    assert (point.chunk_index, point.steps_written) == (2, 4)
    w2 = TraceWriter.resume(point, checkpoint=lambda folder: None)
    assert read_trace(run).steps_count == 4
    assert sorted(p.name for p in (run / CHECKPOINT_DIR).iterdir()) == ["chunk-000001"]
    for t in range(4, 6):
        _step(w2, t)
    w2.finish("complete")
    t = read_trace(run)
    assert list(t.steps["step"]) == list(range(6)) and t.status == "complete"
    assert t.header["resumes"][0]["from_step"] == 4 and t.header["steps_recorded"] == 6


def test_steps_chunks_with_a_gap_are_not_resumed(tmp_path):
    run = tmp_path / "r"
    w = TraceWriter(run, HEADER, chunk_steps=1)
    for t in range(3):
        _step(w, t)
    w.finish("stopped", "test")
    (run / schema.STEPS_TABLE / "part-000001.parquet").unlink()
    with pytest.raises(TraceError, match="cannot be resumed"):
        find_resume_point(run)


def test_a_run_being_written_is_not_resumed(tmp_path):
    """The writer locks its folder: resuming it meanwhile is refused; after finish it is not."""
    run = tmp_path / "r"
    w = TraceWriter(run, HEADER, chunk_steps=2, checkpoint=lambda folder: None)
    for t in range(3):
        _step(w, t)
    assert being_written(run)
    with pytest.raises(TraceError, match="being written by another running vgcsim process"):
        find_resume_point(run)
    w.finish("stopped", "test")
    assert not being_written(run)
    w2 = TraceWriter.resume(find_resume_point(run))
    assert being_written(run)
    w2.finish("stopped", "test")
