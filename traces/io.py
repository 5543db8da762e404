"""Reading and writing trace run directories (torch-free).

A trace is a run directory (layout in :mod:`vgcsim.traces.schema`): ``header.json`` plus three
tables, each a folder of closed Parquet chunks. :class:`TraceWriter` buffers rows and writes
one chunk per table every ``chunk_steps`` steps, atomically (temporary file, fsync, rename),
payloads and evals first and steps last: a chunk of the steps table is the commit marker.
A run killed with SIGKILL therefore leaves a readable prefix and loses at most the open
chunk; :func:`read_trace` drops payload/eval rows of steps whose steps chunk never landed.

Stopping signals (SIGINT, SIGTERM, SIGHUP) are held while a chunk is written, so a chunk and
its checkpoint land whole. A failed write (a full disk, a quota, an I/O error) removes the
chunk it was writing, ends the run as ``stopped`` with the reason in the header — a small
reserve file, freed first, leaves room for that header on a full disk — and raises one
:class:`TraceError`. A recorder can pass a ``checkpoint`` callback: its training state is
then written into ``checkpoint/chunk-NNNNNN/`` before that chunk's steps file commits it,
and :func:`find_resume_point` + :meth:`TraceWriter.resume` continue the run from there.

:class:`Trace` is the in-memory view later stages use: header fields as attributes, the three
tables as DataFrames, and :meth:`Trace.worker_bits` (bits each worker sends per step).
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import json
import logging
import os
import re
import shutil
import signal
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from vgcsim.core.errors import TraceError
from vgcsim.core.outdir import fsync_dir as _fsync_dir
from vgcsim.core.outdir import is_trace_dir
from vgcsim.traces import schema
from vgcsim.traces.lock import being_written
from vgcsim.traces.lock import lock_folder as _lock_folder
from vgcsim.traces.reading import (
    PART_RE,
    Trace,
    chunk_files,
    read_header,
    read_trace_parts,
    run_dir_of,
)
from vgcsim.traces.validate import check_trace

log = logging.getLogger(__name__)

_PART_RE = PART_RE
_CHECKPOINT_RE = re.compile(r"^chunk-(\d{6})$")
#: folder of a recording's resume state: ``chunk-NNNNNN/`` holds the training state after
#: the steps of chunks 0..NNNNNN (``checkpoint.json`` + the recorder's files)
CHECKPOINT_DIR = "checkpoint"
CHECKPOINT_FILE = "checkpoint.json"
#: file kept while a run is written so that a full disk still leaves room for its header
RESERVE_FILE = ".reserve"
_RESERVE_MIN_BYTES = 64 * 1024
#: signals held while a chunk is written (a recorder turns them into a clean stop)
STOP_SIGNALS = tuple(
    getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, name)
)
#: statuses a header may carry
STATUSES = schema.STATUSES


def _utc_now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _unlink(path: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        path.unlink()


@contextlib.contextmanager
def _signals_held() -> Iterator[None]:
    """Hold :data:`STOP_SIGNALS` for the block; they are raised again when it ends.

    Python runs a signal's handler between bytecodes, possibly well after the signal came,
    so the handlers themselves are swapped for one that only notes the signal (a mask at the
    OS level would not stop a handler already due).
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught: list[int] = []
    previous = {
        s: signal.signal(s, lambda signum, frame: caught.append(signum)) for s in STOP_SIGNALS
    }
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, signal.SIG_DFL if handler is None else handler)
        for s in dict.fromkeys(caught):
            signal.raise_signal(s)


def _atomic_write_bytes(path: Path, data: bytes) -> None:
    tmp = path.with_name(path.name + ".tmp")
    try:
        with open(tmp, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        _unlink(tmp)
        raise
    _fsync_dir(path.parent)


def _header_text(header: Mapping[str, Any]) -> bytes:
    text = json.dumps(header, indent=2, sort_keys=False, default=_json_default) + "\n"
    return text.encode("utf-8")


def write_header(run_dir: Path, header: Mapping[str, Any]) -> None:
    """Write ``header.json`` atomically."""
    _atomic_write_bytes(Path(run_dir) / schema.HEADER_FILE, _header_text(header))


def _why(exc: OSError) -> str:
    """An OSError in words: "no space left on device" rather than "[Errno 28] ..."."""
    return (exc.strerror or str(exc)).lower()


def _checkpoint_name(index: int) -> str:
    return f"chunk-{index:06d}"


def _remove_checkpoints(run_dir: Path, keep: str | None) -> None:
    """Remove the checkpoint folders a writer made (all but ``keep``); the checkpoint folder
    goes too once empty (only what vgcsim wrote is removed)."""
    root = run_dir / CHECKPOINT_DIR
    if not root.is_dir():
        return
    for d in root.iterdir():
        if d.name != keep and d.is_dir() and _CHECKPOINT_RE.match(d.name.removesuffix(".tmp")):
            shutil.rmtree(d, ignore_errors=True)
    if keep is None:
        with contextlib.suppress(OSError):
            root.rmdir()


def _json_default(obj: Any) -> Any:
    if isinstance(obj, np.integer):
        return int(obj)
    if isinstance(obj, np.floating):
        return float(obj)
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, Path):
        return str(obj)
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")


def _write_chunk(table_dir: Path, index: int, df: pd.DataFrame) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    table_dir.mkdir(parents=True, exist_ok=True)
    path = table_dir / f"part-{index:06d}.parquet"
    tmp = path.with_name(path.name + ".tmp")
    try:
        # A Python file object, not a str path: pyarrow encodes paths as strict UTF-8, which
        # a folder named with a non-UTF-8 byte is not.
        with open(tmp, "wb") as fh:
            pq.write_table(pa.Table.from_pandas(df, preserve_index=False), fh, compression="zstd")
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        _unlink(tmp)
        raise
    _fsync_dir(table_dir)


def _fsync_tree(folder: Path) -> None:
    for f in folder.iterdir():
        if f.is_file():
            with open(f, "rb") as fh:
                os.fsync(fh.fileno())
    _fsync_dir(folder)


def _normalize(df: pd.DataFrame, int_cols: set[str]) -> pd.DataFrame:
    """Fix dtypes so every chunk of a table has the same schema: listed ints int64, rest float64."""
    out = {}
    for col in df.columns:
        if col in int_cols or col.startswith(schema.BITS_PREFIX):
            out[col] = df[col].to_numpy().astype(np.int64, copy=False)
        elif df[col].dtype == object:
            out[col] = df[col]
        else:
            out[col] = df[col].to_numpy().astype(np.float64, copy=False)
    return pd.DataFrame(out)


_PAYLOAD_INT = set(schema.PAYLOAD_COLUMNS) | set(schema.OPTIONAL_PAYLOAD_COLUMNS)
_STEP_INT = {"step"}
_EVAL_INT = {"step"}
_RANK_INT = {"step", "rank", "wire_bytes", "fallback_rounds"}


class TraceWriter:
    """Write a trace run directory in closed, crash-safe chunks.

    Usage::

        with TraceWriter(run_dir, header, chunk_steps=50) as w:
            for step in ...:
                w.add_payload_rows({"step": ..., "worker": ..., "layer": ..., "numel": ...,
                                    "sent": ..., "bits_packed32": ..., ...})
                w.add_step({"step": step, "loss": ..., ...})   # closes the step
                w.add_eval({...})                               # optional
            w.finish("complete")

    ``header`` must carry the keys in :data:`vgcsim.traces.schema.TRACE_HEADER_KEYS` except those the
    writer fills (schema_version, kind, status, stop_reason, chunk_steps). Leaving the ``with``
    block through an exception finishes the run as ``stopped`` and keeps every full step.

    ``checkpoint(folder)``, when given, is called each time ``add_step`` closes a chunk: it
    writes the recorder's state after that chunk's last step into ``folder``, which becomes
    ``checkpoint/chunk-NNNNNN/`` before the chunk's steps file lands (so the two never
    disagree); earlier checkpoints are then removed, and a ``complete`` run removes its last.
    """

    def __init__(
        self,
        run_dir: str | Path,
        header: Mapping[str, Any],
        chunk_steps: int = 50,
        *,
        overwrite: bool = False,
        checkpoint: Callable[[Path], None] | None = None,
    ) -> None:
        if chunk_steps < 1:
            raise ValueError("chunk_steps must be >= 1")
        self.run_dir = Path(run_dir)
        if self.run_dir.exists():
            if not self.run_dir.is_dir():
                raise TraceError(f"output path {self.run_dir} exists and is not a directory")
            if any(self.run_dir.iterdir()):
                if not overwrite:
                    raise TraceError(
                        f"output directory {self.run_dir} is not empty; "
                        "choose another -o or pass --overwrite"
                    )
                if not is_trace_dir(self.run_dir):  # --overwrite replaces a trace, nothing else
                    raise TraceError(
                        f"{self.run_dir} is not a vgcsim trace folder (no trace header.json); "
                        "--overwrite replaces only a trace's files: choose another -o"
                    )
                _clear_run_dir(self.run_dir)
        created = not self.run_dir.exists()
        try:
            self.run_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise TraceError(f"cannot create trace folder {self.run_dir}: {exc.strerror}") from None
        self.chunk_steps = int(chunk_steps)
        header = dict(header)
        header.update(
            schema_version=schema.TRACE_SCHEMA_VERSION,
            kind=schema.TRACE_KIND,
            status="running",
            stop_reason=None,
            chunk_steps=self.chunk_steps,
        )
        header.setdefault("synthetic", False)
        header.setdefault("created_utc", _utc_now())
        missing = [k for k in schema.TRACE_HEADER_KEYS if k not in header]
        if missing:
            raise ValueError(f"trace header lacks keys: {', '.join(missing)}")
        self._setup(header, checkpoint, chunk_index=0, steps_written=0)
        try:
            self._start()
        except OSError as exc:
            self._unlock()
            # Nothing was recorded yet: leave no header-only folder behind.
            for name in (schema.HEADER_FILE, RESERVE_FILE):
                _unlink(self.run_dir / name)
            if created:
                with contextlib.suppress(OSError):
                    self.run_dir.rmdir()
            raise TraceError(f"cannot write trace {self.run_dir}: {_why(exc)}") from None

    def _setup(
        self,
        header: dict[str, Any],
        checkpoint: Callable[[Path], None] | None,
        *,
        chunk_index: int,
        steps_written: int,
    ) -> None:
        self.header = header
        self._checkpoint = checkpoint
        self._bits_cols = [schema.BITS_PREFIX + e for e in self.header["encodings"]]
        self._payload_cols = list(schema.PAYLOAD_COLUMNS) + self._bits_cols
        self._payload_buf: list[pd.DataFrame] = []
        self._step_buf: list[dict[str, Any]] = []
        self._eval_buf: list[dict[str, Any]] = []
        self._rank_buf: list[dict[str, Any]] = []
        self._chunk_index = chunk_index
        self._steps_written = steps_written
        self._last_step: int | None = steps_written - 1 if steps_written else None
        self._finished = False
        self._failed: str | None = None
        self._target: Path = self.run_dir
        self._lock_fd: int | None = None

    def _lock(self) -> None:
        """Hold the run folder's lock while writing: a second writer (``--resume`` of a
        run that is still recording) is refused; the lock goes with the process, even on
        SIGKILL."""
        if self._lock_fd is not None:
            return
        try:
            self._lock_fd = _lock_folder(self.run_dir)
        except BlockingIOError:
            raise TraceError(
                f"{self.run_dir} is being written by another running vgcsim process"
            ) from None

    def _unlock(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    def _start(self) -> None:
        """Lock the run, write the reserve, then the ``running`` header."""
        self._lock()
        text = _header_text(self.header)
        size = max(_RESERVE_MIN_BYTES, 4 * len(text))
        _atomic_write_bytes(self.run_dir / RESERVE_FILE, b"\0" * size)
        _atomic_write_bytes(self.run_dir / schema.HEADER_FILE, text)

    @classmethod
    def resume(
        cls, point: ResumePoint, *, checkpoint: Callable[[Path], None] | None = None
    ) -> TraceWriter:
        """Reopen an interrupted run at ``point`` (see :func:`find_resume_point`): remove the
        chunks after it and every other checkpoint, mark the header ``running`` again (with a
        ``resumes`` entry) and continue writing at the next chunk."""
        self = cls.__new__(cls)
        self.run_dir = point.run_dir
        self.chunk_steps = int(point.header["chunk_steps"])
        header = dict(point.header)
        for key in ("steps_recorded", "finished_utc"):
            header.pop(key, None)
        header.update(status="running", stop_reason=None)
        header["resumes"] = [
            *header.get("resumes", []),
            {"from_step": point.steps_written, "utc": _utc_now()},
        ]
        self._setup(
            header,
            checkpoint,
            chunk_index=point.chunk_index,
            steps_written=point.steps_written,
        )
        self._lock()
        try:
            with _signals_held():
                for table in schema.TRACE_TABLES + schema.OPTIONAL_TABLES:
                    d = self.run_dir / table
                    if not d.is_dir():
                        continue
                    for f in d.iterdir():
                        m = _PART_RE.match(f.name)
                        if f.name.endswith(".tmp") or (m and int(m.group(1)) >= point.chunk_index):
                            f.unlink()
                keep = point.state_dir.name if point.state_dir is not None else None
                _remove_checkpoints(self.run_dir, keep=keep)
                self._start()
        except OSError as exc:
            raise TraceError(f"cannot resume {self.run_dir}: {_why(exc)}") from None
        return self

    # -- context manager -------------------------------------------------------------------
    def __enter__(self) -> TraceWriter:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if self._finished:
            return
        if exc_type is None:
            self.finish("complete")
        else:
            reason = f"{exc_type.__name__}: {exc}" if str(exc) else exc_type.__name__
            self.finish("stopped", reason)

    # -- rows ------------------------------------------------------------------------------
    def add_payload_rows(self, rows: pd.DataFrame | Mapping[str, Any]) -> None:
        """Buffer payload rows (columns: PAYLOAD_COLUMNS + one bits_<encoding> per encoding)."""
        df = rows if isinstance(rows, pd.DataFrame) else pd.DataFrame(dict(rows))
        missing = [c for c in self._payload_cols if c not in df.columns]
        if missing:
            raise ValueError(f"payload rows lack columns: {', '.join(missing)}")
        optional = [c for c in schema.OPTIONAL_PAYLOAD_COLUMNS if c in df.columns]
        self._payload_buf.append(df[self._payload_cols + optional])

    def add_step(self, row: Mapping[str, Any]) -> None:
        """Buffer one step row (closes that step); writes a chunk when ``chunk_steps`` are buffered."""
        missing = [c for c in schema.STEP_COLUMNS if c not in row]
        if missing:
            raise ValueError(f"step row lacks columns: {', '.join(missing)}")
        step = int(row["step"])
        if self._last_step is not None and step != self._last_step + 1:
            raise ValueError(f"steps must be contiguous: got {step} after {self._last_step}")
        self._last_step = step
        self._step_buf.append(dict(row))
        if len(self._step_buf) >= self.chunk_steps:
            self.flush(checkpoint=True)

    def add_eval(self, row: Mapping[str, Any]) -> None:
        """Buffer one evaluation row (EVAL_COLUMNS)."""
        missing = [c for c in schema.EVAL_COLUMNS if c not in row]
        if missing:
            raise ValueError(f"eval row lacks columns: {', '.join(missing)}")
        self._eval_buf.append(dict(row))

    def add_rank_rows(self, rows: list[Mapping[str, Any]]) -> None:
        """Buffer rows of the optional ranks table (``schema.RANK_COLUMNS``, one per step and
        rank; written by the DDP hook)."""
        for row in rows:
            missing = [c for c in schema.REQUIRED_RANK_COLUMNS if c not in row]
            if missing:
                raise ValueError(f"rank row lacks columns: {', '.join(missing)}")
            self._rank_buf.append(dict(row))

    @property
    def steps_written(self) -> int:
        """Steps already in closed chunks on disk."""
        return self._steps_written

    def flush(self, *, checkpoint: bool = False) -> None:
        """Write the buffered rows as one closed chunk per table (steps last: the commit),
        and with ``checkpoint`` the recorder's state before the commit.

        A failed write removes what this chunk wrote, drops its rows, and raises
        :class:`TraceError`; the run keeps every step before it (finish it ``stopped``).
        """
        if self._failed is not None:
            raise TraceError(self._failed)
        if not (self._step_buf or self._eval_buf or self._payload_buf or self._rank_buf):
            return
        idx = self._chunk_index
        with _signals_held():
            try:
                self._write_chunks(idx, checkpoint and self._checkpoint is not None)
            except OSError as exc:
                self._discard_chunk(idx)
                self._payload_buf, self._eval_buf, self._step_buf, self._rank_buf = [], [], [], []
                where = exc.filename if exc.filename else self._target
                self._failed = (
                    f"cannot write {where}: {_why(exc)}; {self.run_dir} keeps the "
                    f"{self._steps_written} steps recorded before it"
                )
                raise TraceError(self._failed) from None
            self._steps_written += len(self._step_buf)
            self._payload_buf, self._eval_buf, self._step_buf, self._rank_buf = [], [], [], []
            self._chunk_index += 1

    def _write_chunks(self, idx: int, checkpoint: bool) -> None:
        # _target names what is being written, for the message when a write fails.
        part = f"part-{idx:06d}.parquet"
        if self._payload_buf:
            payloads = _normalize(pd.concat(self._payload_buf, ignore_index=True), _PAYLOAD_INT)
            self._target = self.run_dir / schema.PAYLOADS_TABLE / part
            _write_chunk(self.run_dir / schema.PAYLOADS_TABLE, idx, payloads)
        if self._eval_buf:
            evals = _normalize(pd.DataFrame(self._eval_buf), _EVAL_INT)
            self._target = self.run_dir / schema.EVALS_TABLE / part
            _write_chunk(self.run_dir / schema.EVALS_TABLE, idx, evals)
        if self._rank_buf:
            ranks = _normalize(pd.DataFrame(self._rank_buf), _RANK_INT)
            self._target = self.run_dir / schema.RANKS_TABLE / part
            _write_chunk(self.run_dir / schema.RANKS_TABLE, idx, ranks)
        if checkpoint:
            self._target = self.run_dir / CHECKPOINT_DIR / _checkpoint_name(idx)
            self._write_checkpoint(idx, self._steps_written + len(self._step_buf))
        if self._step_buf:
            steps = _normalize(pd.DataFrame(self._step_buf), _STEP_INT)
            self._target = self.run_dir / schema.STEPS_TABLE / part
            _write_chunk(self.run_dir / schema.STEPS_TABLE, idx, steps)
        if checkpoint:
            _remove_checkpoints(self.run_dir, keep=_checkpoint_name(idx))

    def _write_checkpoint(self, idx: int, steps_written: int) -> None:
        root = self.run_dir / CHECKPOINT_DIR
        final = root / _checkpoint_name(idx)
        tmp = root / (final.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        assert self._checkpoint is not None
        self._checkpoint(tmp)
        info = {"chunk_index": idx, "steps_written": steps_written}
        (tmp / CHECKPOINT_FILE).write_text(json.dumps(info) + "\n", encoding="utf-8")
        _fsync_tree(tmp)
        shutil.rmtree(final, ignore_errors=True)
        os.replace(tmp, final)
        _fsync_dir(root)

    def _discard_chunk(self, idx: int) -> None:
        """Remove whatever chunk ``idx`` wrote (it never committed), freeing its space."""
        for table in schema.TRACE_TABLES + schema.OPTIONAL_TABLES:
            for name in (f"part-{idx:06d}.parquet", f"part-{idx:06d}.parquet.tmp"):
                _unlink(self.run_dir / table / name)
        for name in (_checkpoint_name(idx), _checkpoint_name(idx) + ".tmp"):
            shutil.rmtree(self.run_dir / CHECKPOINT_DIR / name, ignore_errors=True)

    def finish(self, status: str = "complete", stop_reason: str | None = None) -> Path:
        """Flush what is buffered and record the final status in the header.

        A ``complete`` run drops its checkpoints (there is nothing left to resume). When the
        last chunk cannot be written the run ends ``stopped`` with that reason and the
        :class:`TraceError` is raised after the header is written.
        """
        if status not in STATUSES[1:]:
            raise ValueError(f"status must be one of {STATUSES[1:]}, got {status!r}")
        if self._finished:
            return self.run_dir
        error: TraceError | None = None
        if self._failed is None:
            try:
                self.flush()
            except TraceError as exc:
                error = exc
        with _signals_held():
            if self._failed is not None:
                status = "stopped"
                if stop_reason is None or error is not None:
                    stop_reason = self._failed
            self.header.update(
                status=status,
                stop_reason=stop_reason,
                steps_recorded=self._steps_written,
                finished_utc=_utc_now(),
            )
            # The reserve goes first: on a full disk its space takes the new header.
            _unlink(self.run_dir / RESERVE_FILE)
            try:
                write_header(self.run_dir, self.header)
            except OSError as exc:
                self._unlock()
                raise TraceError(
                    f"cannot update {self.run_dir / schema.HEADER_FILE}: {_why(exc)} "
                    f"(it still says running; the {self._steps_written} steps recorded are kept)"
                ) from None
            if status == "complete":
                _remove_checkpoints(self.run_dir, keep=None)
            self._finished = True
            self._unlock()
        if error is not None:
            raise error
        return self.run_dir


def _clear_run_dir(run_dir: Path) -> None:
    """Remove a previous trace's files (only the names a trace writes)."""
    header = run_dir / schema.HEADER_FILE
    for table in schema.TRACE_TABLES + schema.OPTIONAL_TABLES:
        d = run_dir / table
        if d.is_dir():
            for f in d.iterdir():
                if f.name.startswith("part-"):
                    f.unlink()
    if header.exists():
        header.unlink()
    _remove_checkpoints(run_dir, keep=None)
    _unlink(run_dir / RESERVE_FILE)


@dataclass(frozen=True)
class ResumePoint:
    """Where an interrupted recording continues: every chunk before ``chunk_index`` (holding
    ``steps_written`` steps) is kept, and ``state_dir`` holds the training state after them
    (None: no chunk closed with a checkpoint; the run starts over from step 0)."""

    run_dir: Path
    header: dict[str, Any]
    chunk_index: int
    steps_written: int
    state_dir: Path | None


def _parquet_rows(path: Path) -> int:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        with open(path, "rb") as fh:
            return int(pq.ParquetFile(fh).metadata.num_rows)
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise TraceError(f"{path} is truncated or corrupt ({exc})") from None


def find_resume_point(path: str | Path) -> ResumePoint:
    """The last closed chunk of an interrupted recording that has a checkpoint.

    Refuses (:class:`TraceError`) a folder that is not a trace, a synthetic trace, a
    complete run, and a steps table whose chunks are not 0, 1, 2, ... . Nothing is changed
    on disk (:meth:`TraceWriter.resume` does that).
    """
    run_dir = run_dir_of(path)
    header = read_header(run_dir)
    if header.get("synthetic"):
        raise TraceError(f"{run_dir} is a synthetic trace; only a recording can be resumed")
    if being_written(run_dir):
        raise TraceError(
            f"{run_dir} is being written by another running vgcsim process; "
            "resume it once that process has ended"
        )
    if header.get("status") == "complete":
        raise TraceError(
            f"{run_dir} is complete ({header.get('steps_recorded', '?')} steps); nothing to resume"
        )
    steps = chunk_files(run_dir, schema.STEPS_TABLE)
    indices = [int(_PART_RE.match(f.name).group(1)) for f in steps]  # type: ignore[union-attr]
    if indices != list(range(len(indices))):
        raise TraceError(
            f"{run_dir / schema.STEPS_TABLE} has chunks {indices}, not 0, 1, 2, ...; "
            "it cannot be resumed"
        )
    root = run_dir / CHECKPOINT_DIR
    found = sorted(
        (int(m.group(1)), d)
        for d in (root.iterdir() if root.is_dir() else ())
        if (m := _CHECKPOINT_RE.match(d.name)) and (d / CHECKPOINT_FILE).is_file()
    )
    usable = [(i, d) for i, d in found if i < len(steps)]
    if not usable:
        return ResumePoint(run_dir, header, 0, 0, None)
    idx, state_dir = usable[-1]
    try:
        info = json.loads((state_dir / CHECKPOINT_FILE).read_text(encoding="utf-8"))
        written = int(info["steps_written"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise TraceError(f"{state_dir / CHECKPOINT_FILE} is corrupt ({exc})") from None
    rows = sum(_parquet_rows(f) for f in steps[: idx + 1])
    if info.get("chunk_index") != idx or rows != written:
        raise TraceError(
            f"{state_dir} says {written} steps but chunks 0..{idx} of "
            f"{run_dir / schema.STEPS_TABLE} hold {rows}; it cannot be resumed"
        )
    return ResumePoint(run_dir, header, idx + 1, written, state_dir)


# -- reading (vgcsim.traces.reading reads; read_trace adds the invariants) -----------------


def read_trace(path: str | Path, *, check: bool = True) -> Trace:
    """Read a trace run directory (or its header.json) and refuse it unless it is valid.

    A run that did not finish (status ``running`` after a crash, or ``stopped``) is read up to
    its last closed steps chunk; rows of later steps in the other tables are dropped.
    Raises :class:`TraceError` for missing/corrupt files, a header or table that breaks the
    trace's typed description (one line naming the file, the field and the rule) or, with
    ``check`` (the default: every command reads this way), any invariant ``vgcsim trace
    validate`` checks; :class:`SchemaVersionError` for unknown schema versions.
    """
    trace = read_trace_parts(path)
    if check:
        problems = check_trace(trace)
        if problems:
            more = (
                f" (and {len(problems) - 1} more; `vgcsim trace validate` lists them)"
                if len(problems) > 1
                else ""
            )
            raise TraceError(f"{trace.path} is not a valid trace: {problems[0]}{more}")
    return trace
