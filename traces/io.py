"""Reading and writing trace run directories (torch-free).

A trace is a run directory (layout in :mod:`vgcsim.traces.schema`): ``header.json`` plus three
tables, each a folder of closed Parquet chunks. :class:`TraceWriter` buffers rows and writes
one chunk per table every ``chunk_steps`` steps, atomically (temporary file, fsync, rename),
payloads and evals first and steps last: a chunk of the steps table is the commit marker.
A run killed with SIGKILL therefore leaves a readable prefix and loses at most the open
chunk; :func:`read_trace` drops payload/eval rows of steps whose steps chunk never landed.

:class:`Trace` is the in-memory view later stages use: header fields as attributes, the three
tables as DataFrames, and :meth:`Trace.worker_bits` (bits each worker sends per step).
"""

from __future__ import annotations

import datetime as _dt
import json
import logging
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from vgcsim.traces import schema

from vgcsim.core.errors import SchemaVersionError, TraceError, unknown_name

log = logging.getLogger(__name__)

_PART_RE = re.compile(r"^part-(\d{6})\.parquet$")
#: statuses a header may carry
STATUSES = ("running", "complete", "stopped")


def _utc_now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:  # pragma: no cover - platforms without directory fds
        return
    try:
        os.fsync(fd)
    except OSError:  # pragma: no cover
        pass
    finally:
        os.close(fd)


def _atomic_write_bytes(path: Path, data: bytes) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    _fsync_dir(path.parent)


def write_header(run_dir: Path, header: Mapping[str, Any]) -> None:
    """Write ``header.json`` atomically."""
    text = json.dumps(header, indent=2, sort_keys=False, default=_json_default) + "\n"
    _atomic_write_bytes(Path(run_dir) / schema.HEADER_FILE, text.encode("utf-8"))


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
    pq.write_table(pa.Table.from_pandas(df, preserve_index=False), tmp, compression="zstd")
    with open(tmp, "rb+") as fh:
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    _fsync_dir(table_dir)


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


_PAYLOAD_INT = set(schema.PAYLOAD_COLUMNS)
_STEP_INT = {"step"}
_EVAL_INT = {"step"}


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
    """

    def __init__(
        self,
        run_dir: str | Path,
        header: Mapping[str, Any],
        chunk_steps: int = 50,
        *,
        overwrite: bool = False,
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
                _clear_run_dir(self.run_dir)
        try:
            self.run_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise TraceError(f"cannot create trace folder {self.run_dir}: {exc.strerror}") from None
        self.chunk_steps = int(chunk_steps)
        self.header: dict[str, Any] = dict(header)
        self.header.update(
            schema_version=schema.TRACE_SCHEMA_VERSION,
            kind=schema.TRACE_KIND,
            status="running",
            stop_reason=None,
            chunk_steps=self.chunk_steps,
        )
        self.header.setdefault("synthetic", False)
        self.header.setdefault("created_utc", _utc_now())
        missing = [k for k in schema.TRACE_HEADER_KEYS if k not in self.header]
        if missing:
            raise ValueError(f"trace header lacks keys: {', '.join(missing)}")
        self._bits_cols = [schema.BITS_PREFIX + e for e in self.header["encodings"]]
        self._payload_cols = list(schema.PAYLOAD_COLUMNS) + self._bits_cols
        self._payload_buf: list[pd.DataFrame] = []
        self._step_buf: list[dict[str, Any]] = []
        self._eval_buf: list[dict[str, Any]] = []
        self._chunk_index = 0
        self._steps_written = 0
        self._last_step: int | None = None
        self._finished = False
        write_header(self.run_dir, self.header)

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
        self._payload_buf.append(df[self._payload_cols])

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
            self.flush()

    def add_eval(self, row: Mapping[str, Any]) -> None:
        """Buffer one evaluation row (EVAL_COLUMNS)."""
        missing = [c for c in schema.EVAL_COLUMNS if c not in row]
        if missing:
            raise ValueError(f"eval row lacks columns: {', '.join(missing)}")
        self._eval_buf.append(dict(row))

    @property
    def steps_written(self) -> int:
        """Steps already in closed chunks on disk."""
        return self._steps_written

    def flush(self) -> None:
        """Write the buffered rows as one closed chunk per table (steps last: the commit)."""
        if not (self._step_buf or self._eval_buf or self._payload_buf):
            return
        idx = self._chunk_index
        if self._payload_buf:
            payloads = _normalize(pd.concat(self._payload_buf, ignore_index=True), _PAYLOAD_INT)
            _write_chunk(self.run_dir / schema.PAYLOADS_TABLE, idx, payloads)
        if self._eval_buf:
            evals = _normalize(pd.DataFrame(self._eval_buf), _EVAL_INT)
            _write_chunk(self.run_dir / schema.EVALS_TABLE, idx, evals)
        if self._step_buf:
            steps = _normalize(pd.DataFrame(self._step_buf), _STEP_INT)
            _write_chunk(self.run_dir / schema.STEPS_TABLE, idx, steps)
        self._steps_written += len(self._step_buf)
        self._payload_buf, self._eval_buf, self._step_buf = [], [], []
        self._chunk_index += 1

    def finish(self, status: str = "complete", stop_reason: str | None = None) -> Path:
        """Flush what is buffered and record the final status in the header."""
        if status not in STATUSES[1:]:
            raise ValueError(f"status must be one of {STATUSES[1:]}, got {status!r}")
        if self._finished:
            return self.run_dir
        self.flush()
        self.header.update(
            status=status,
            stop_reason=stop_reason,
            steps_recorded=self._steps_written,
            finished_utc=_utc_now(),
        )
        write_header(self.run_dir, self.header)
        self._finished = True
        return self.run_dir


def _clear_run_dir(run_dir: Path) -> None:
    """Remove a previous trace's files (only the names a trace writes)."""
    header = run_dir / schema.HEADER_FILE
    for table in schema.TRACE_TABLES:
        d = run_dir / table
        if d.is_dir():
            for f in d.iterdir():
                if f.name.startswith("part-"):
                    f.unlink()
    if header.exists():
        header.unlink()


# -- reading -------------------------------------------------------------------------------


def read_header(path: str | Path) -> dict[str, Any]:
    """Read and check a trace header (kind, schema version, required keys)."""
    run_dir = _run_dir(path)
    hp = run_dir / schema.HEADER_FILE
    if not hp.is_file():
        raise TraceError(f"{run_dir} is not a trace run directory (no {schema.HEADER_FILE})")
    try:
        header = json.loads(hp.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise TraceError(f"{hp} is corrupt (not valid JSON: {exc})") from None
    if not isinstance(header, dict):
        raise TraceError(f"{hp} is corrupt (expected a JSON object)")
    if header.get("kind") != schema.TRACE_KIND:
        raise TraceError(f"{hp} is not a vgcsim trace header (kind={header.get('kind')!r})")
    version = header.get("schema_version")
    if version != schema.TRACE_SCHEMA_VERSION:
        if isinstance(version, int) and version > schema.TRACE_SCHEMA_VERSION:
            hint = "it was written by a newer vgcsim; upgrade vgcsim to read it"
        else:
            hint = "re-record it with this version of vgcsim"
        raise SchemaVersionError(
            f"{run_dir}: trace schema version {version!r} is not supported "
            f"(this vgcsim reads version {schema.TRACE_SCHEMA_VERSION}); {hint}"
        )
    missing = [k for k in schema.TRACE_HEADER_KEYS if k not in header]
    if missing:
        raise TraceError(f"{hp} lacks required keys: {', '.join(missing)}")
    return header


def _run_dir(path: str | Path) -> Path:
    p = Path(path)
    if p.name == schema.HEADER_FILE:
        p = p.parent
    if not p.exists():
        raise TraceError(f"trace not found: {p}")
    if not p.is_dir():
        raise TraceError(f"{p} is not a trace run directory")
    return p


def chunk_files(run_dir: Path, table: str) -> list[Path]:
    """The closed chunk files of one table, in order (temporary files are ignored)."""
    d = run_dir / table
    if not d.is_dir():
        return []
    return sorted(f for f in d.iterdir() if _PART_RE.match(f.name))


def _read_table(run_dir: Path, table: str, columns: list[str]) -> pd.DataFrame:
    import pyarrow as pa
    import pyarrow.parquet as pq

    frames = []
    for f in chunk_files(run_dir, table):
        try:
            frames.append(pq.read_table(f).to_pandas())
        except (pa.ArrowException, OSError, ValueError) as exc:
            raise TraceError(
                f"{f} is truncated or corrupt ({exc}); "
                "delete that chunk and the ones after it to keep the valid prefix"
            ) from None
    if not frames:
        return pd.DataFrame(
            {c: pd.Series(dtype="int64" if c == "step" else "float64") for c in columns}
        )
    df = pd.concat(frames, ignore_index=True)
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise TraceError(f"{run_dir / table} lacks columns: {', '.join(missing)}")
    return df


class Trace:
    """A trace in memory: header fields as attributes plus the three tables as DataFrames."""

    def __init__(
        self,
        path: Path,
        header: dict[str, Any],
        payloads: pd.DataFrame,
        steps: pd.DataFrame,
        evals: pd.DataFrame,
    ) -> None:
        self.path = Path(path)
        self.name = self.path.name
        self.header = header
        self.payloads = payloads
        self.steps = steps
        self.evals = evals
        self.workers = int(header["workers"])
        self.layers: list[dict[str, Any]] = list(header["layers"])
        self.encodings: list[str] = list(header["encodings"])
        self.primary_encoding: str = header["primary_encoding"]
        self.compressor: str = header["compressor"]["name"]
        self.synthetic = bool(header["synthetic"])
        self.status: str = header["status"]

    @property
    def steps_count(self) -> int:
        """Number of recorded steps."""
        return len(self.steps)

    def __repr__(self) -> str:
        return (
            f"Trace({self.name!r}, compressor={self.compressor!r}, workers={self.workers}, "
            f"steps={self.steps_count}, layers={len(self.layers)}, status={self.status!r})"
        )

    def _bits_column(self, encoding: str | None) -> str:
        enc = self.primary_encoding if encoding is None else encoding
        if enc not in self.encodings:
            raise unknown_name("encoding of this trace", enc, self.encodings)
        return schema.BITS_PREFIX + enc

    def worker_bits(self, encoding: str | None = None) -> pd.DataFrame:
        """Total bits each worker sends per step (summed over layers) under ``encoding``.

        Index: step (every recorded step); columns: worker 0..W-1; values int64 bits.
        ``encoding`` defaults to the trace's primary encoding.
        """
        col = self._bits_column(encoding)
        wide = self.payloads.groupby(["step", "worker"], sort=True)[col].sum().unstack("worker")
        wide = wide.reindex(
            index=pd.Index(self.steps["step"].to_numpy(), name="step"),
            columns=range(self.workers),
            fill_value=0,
        )
        wide.columns.name = "worker"
        return wide.fillna(0).astype(np.int64)

    def layer_bits(self, encoding: str | None = None) -> pd.DataFrame:
        """Per-(step, worker, layer) bits under ``encoding`` as a long frame (step, worker, layer, bits)."""
        col = self._bits_column(encoding)
        df = self.payloads[["step", "worker", "layer", col]].rename(columns={col: "bits"})
        return df.sort_values(["step", "worker", "layer"], ignore_index=True)

    def dense_bits_per_worker(self) -> int:
        """Bits of one worker's full fp32 gradient: 32 × total numel."""
        return 32 * sum(int(layer["numel"]) for layer in self.layers)


def read_trace(path: str | Path) -> Trace:
    """Read a trace run directory (or its header.json).

    A run that did not finish (status ``running`` after a crash, or ``stopped``) is read up to
    its last closed steps chunk; rows of later steps in the other tables are dropped.
    Raises :class:`TraceError` for missing/corrupt files and :class:`SchemaVersionError` for
    unknown schema versions.
    """
    run_dir = _run_dir(path)
    header = read_header(run_dir)
    bits_cols = [schema.BITS_PREFIX + e for e in header["encodings"]]
    payloads = _read_table(run_dir, schema.PAYLOADS_TABLE, list(schema.PAYLOAD_COLUMNS) + bits_cols)
    steps = _read_table(run_dir, schema.STEPS_TABLE, list(schema.STEP_COLUMNS))
    evals = _read_table(run_dir, schema.EVALS_TABLE, list(schema.EVAL_COLUMNS))
    if header["status"] != "complete":
        last = int(steps["step"].max()) if len(steps) else -1
        dropped = int((payloads["step"] > last).sum()) if len(payloads) else 0
        if dropped:
            log.info(
                "%s: dropping %d payload rows after the last closed step %d", run_dir, dropped, last
            )
            payloads = payloads[payloads["step"] <= last].reset_index(drop=True)
        if len(evals):
            evals = evals[evals["step"] <= last].reset_index(drop=True)
    return Trace(run_dir, header, payloads, steps, evals)
