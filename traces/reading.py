"""Reading a trace run directory as it lies on disk (torch-free), before its invariants.

:func:`read_header` reads ``header.json`` and applies the header's typed description
(:func:`vgcsim.traces.schema.header_type_problems`); :func:`read_trace_parts` reads the three
tables, checks each chunk's column types against the table descriptions (``schema.*_TABLE``)
and returns a :class:`Trace`. Commands read traces through :func:`vgcsim.traces.io.read_trace`,
which adds the invariants of :mod:`vgcsim.traces.validate` and refuses an invalid trace.

Chunk files are opened through Python (``open``), so a run folder whose name is not valid
UTF-8 reads like any other.
"""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from vgcsim.core.errors import SchemaVersionError, TraceError, unknown_name
from vgcsim.traces import schema

log = logging.getLogger(__name__)

#: name of a closed chunk file: ``part-NNNNNN.parquet``
PART_RE = re.compile(r"^part-(\d{6})\.parquet$")


def read_header(path: str | Path) -> dict[str, Any]:
    """Read ``header.json`` and check it against the header's typed description.

    Raises :class:`TraceError` with one line naming the file, the field and the rule when a
    field has the wrong type or range (``schema.TraceHeader``), and
    :class:`SchemaVersionError` for a schema version this vgcsim cannot read.
    """
    run_dir = run_dir_of(path)
    hp = run_dir / schema.HEADER_FILE
    if not hp.is_file():
        raise TraceError(f"{run_dir} is not a trace run directory (no {schema.HEADER_FILE})")
    try:
        header = json.loads(hp.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise TraceError(f"{hp} is corrupt (not valid JSON: {exc})") from None
    except RecursionError:
        raise TraceError(
            f"{hp} is corrupt (JSON nested too deeply to read; a trace header nests at most "
            f"{schema.MAX_HEADER_DEPTH} levels)"
        ) from None
    except OSError as exc:
        raise TraceError(f"cannot read {hp}: {exc.strerror or exc}") from None
    if not isinstance(header, dict):
        raise TraceError(f"{hp} is corrupt (expected a JSON object)")
    if header.get("kind") != schema.TRACE_KIND:
        raise TraceError(f"{hp} is not a vgcsim trace header (kind={header.get('kind')!r:.60})")
    version = header.get("schema_version")
    if version != schema.TRACE_SCHEMA_VERSION or isinstance(version, bool):
        if isinstance(version, int) and version > schema.TRACE_SCHEMA_VERSION:
            hint = "it was written by a newer vgcsim; upgrade vgcsim to read it"
        else:
            hint = "re-record it with this version of vgcsim"
        raise SchemaVersionError(
            f"{run_dir}: trace schema version {version!r:.60} is not supported "
            f"(this vgcsim reads version {schema.TRACE_SCHEMA_VERSION}); {hint}"
        )
    missing = [k for k in schema.TRACE_HEADER_KEYS if k not in header]
    if missing:
        raise TraceError(f"{hp} lacks required keys: {', '.join(missing)}")
    problems = schema.header_type_problems(header)
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise TraceError(f"{hp}: {problems[0]}{more}")
    return header


def run_dir_of(path: str | Path) -> Path:
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
    return sorted(f for f in d.iterdir() if PART_RE.match(f.name))


def _type_problem(table: str, name: str, arrow_type: Any, column: schema.Column) -> str | None:
    import pyarrow as pa

    ok = pa.types.is_integer(arrow_type) or (
        column.kind == "float" and pa.types.is_floating(arrow_type)
    )
    if ok or pa.types.is_null(arrow_type):  # a column of nulls only: NaN, judged by value
        return None
    expected = "an integer type" if column.kind == "int" else "a numeric type"
    return f"{table} column {name} has Arrow type {arrow_type}; expected {expected}"


def _read_table(run_dir: Path, table: str, columns: list[str]) -> pd.DataFrame:
    import pyarrow as pa
    import pyarrow.parquet as pq

    described = {c.name: c for c in schema.TABLE_COLUMNS[table]}
    frames = []
    for f in chunk_files(run_dir, table):
        try:
            # through a Python file object: pyarrow cannot open paths that are not UTF-8
            with open(f, "rb") as fh:
                arrow = pq.read_table(fh)
        except (pa.ArrowException, OSError, ValueError) as exc:
            raise TraceError(
                f"{f} is truncated or corrupt ({exc}); "
                "delete that chunk and the ones after it to keep the valid prefix"
            ) from None
        for field in arrow.schema:
            column = described.get(field.name)
            if column is None and field.name.startswith(schema.BITS_PREFIX):
                column = schema.BITS_COLUMN
            problem = column and _type_problem(table, field.name, field.type, column)
            if problem:
                raise TraceError(f"{f}: {problem}")
        frames.append(arrow.to_pandas())
    if not frames:
        return pd.DataFrame(
            {c: pd.Series(dtype="int64" if c == "step" else "float64") for c in columns}
        )
    df = pd.concat(frames, ignore_index=True)
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise TraceError(f"{run_dir / table} lacks columns: {', '.join(missing)}")
    return df


def printable(path: str | Path) -> str:
    """``path`` as text any UTF-8 stream can print: bytes that are not UTF-8 (kept by Python
    as surrogate escapes) become U+FFFD."""
    return str(path).encode("utf-8", "surrogateescape").decode("utf-8", "replace")


class Trace:
    """A trace in memory: header fields as attributes plus the three tables as DataFrames."""

    def __init__(
        self,
        path: Path,
        header: dict[str, Any],
        payloads: pd.DataFrame,
        steps: pd.DataFrame,
        evals: pd.DataFrame,
        ranks: pd.DataFrame | None = None,
    ) -> None:
        self.path = Path(path)
        # the label results carry: a folder name that is not UTF-8 gets U+FFFD for its bad bytes
        self.name = printable(self.path.name)
        self.header = header
        self.payloads = payloads
        self.steps = steps
        self.evals = evals
        #: the optional ranks table (traces the DDP hook writes), else None
        self.ranks = ranks
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


def read_trace_parts(path: str | Path) -> Trace:
    """Read a trace run directory (or its header.json) without checking its invariants
    (``vgcsim.traces.io.read_trace`` checks them; ``vgcsim trace validate`` lists them).

    A run that did not finish (status ``running`` after a crash, or ``stopped``) is read up to
    its last closed steps chunk; rows of later steps in the other tables are dropped.
    Raises :class:`TraceError` for missing/corrupt files and :class:`SchemaVersionError` for
    unknown schema versions.
    """
    run_dir = run_dir_of(path)
    header = read_header(run_dir)
    bits_cols = [schema.BITS_PREFIX + e for e in header["encodings"]]
    payloads = _read_table(run_dir, schema.PAYLOADS_TABLE, list(schema.PAYLOAD_COLUMNS) + bits_cols)
    steps = _read_table(run_dir, schema.STEPS_TABLE, list(schema.STEP_COLUMNS))
    evals = _read_table(run_dir, schema.EVALS_TABLE, list(schema.EVAL_COLUMNS))
    ranks = (
        _read_table(run_dir, schema.RANKS_TABLE, list(schema.REQUIRED_RANK_COLUMNS))
        if chunk_files(run_dir, schema.RANKS_TABLE)
        else None
    )
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
        if ranks is not None and len(ranks):
            ranks = ranks[ranks["step"] <= last].reset_index(drop=True)
    return Trace(run_dir, header, payloads, steps, evals, ranks)
