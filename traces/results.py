"""Result tables: the versioned files ``vgcsim predict`` and ``vgcsim simulate`` write.

A result table is a folder holding ``results.json`` (the header, see
``schema.RESULTS_HEADER_KEYS``), ``results.parquet`` and ``results.csv`` (the same rows, with
exactly ``schema.RESULT_COLUMNS``). Both the closed-form models and the simulator emit this
format, so reports and cross-checks read one thing.

:func:`finalize_results` derives the relative columns from the absolute ones:
``speedup_vs_dense`` = dense ``step_s`` / ``step_s`` and ``scaling_efficiency`` = single-worker
step time / ``step_s``, each within the same (source, path, trace, cluster, compute_mode,
world_size, step) group (a model-mode row is never compared with a trace-mode one), where
"dense" is the fastest ``method == "dense"`` row of the group with encoding
``fp32`` (the plain DDP baseline; bf16/fp16 dense rows are compared with it like any method)
and the single-worker step time is that dense row's ``compute_s + optimizer_s`` (one worker
alone neither communicates nor compresses: weak scaling).

Schema version 1 tables (written before ``compute_mode``, ``device``, ``optimizer_s`` and
``decode_s`` existed) are upgraded on read: ``compute_mode`` and ``device`` come from the
header's cluster, ``optimizer_s`` and ``decode_s`` are 0 (version 1 did not charge them).
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from traces import schema
from traces.errors import ResultsError
from traces.provenance import git_commit, package_versions

__all__ = [
    "GROUP_COLUMNS",
    "RESULTS_CSV",
    "RESULTS_JSON",
    "RESULTS_PARQUET",
    "empty_results",
    "finalize_results",
    "read_results",
    "results_header",
    "write_results",
]

log = logging.getLogger(__name__)

RESULTS_JSON = "results.json"
RESULTS_PARQUET = "results.parquet"
RESULTS_CSV = "results.csv"

#: Rows that share these values are compared with each other (dense vs compressed).
GROUP_COLUMNS = ("source", "path", "trace", "cluster", "compute_mode", "world_size", "step")

_STR_COLUMNS = tuple(c for c in schema.RESULT_CONFIG_COLUMNS if c != "world_size")
_INT_COLUMNS = ("world_size", "step")
_FLOAT_COLUMNS = tuple(
    c for c in schema.RESULT_COLUMNS if c not in _STR_COLUMNS and c not in _INT_COLUMNS
)


def empty_results() -> pd.DataFrame:
    """A zero-row frame with the result columns and dtypes."""
    return _coerce(pd.DataFrame({c: [] for c in schema.RESULT_COLUMNS}))


def _coerce(df: pd.DataFrame) -> pd.DataFrame:
    cols = list(df.columns)
    missing = [c for c in schema.RESULT_COLUMNS if c not in cols]
    extra = [c for c in cols if c not in schema.RESULT_COLUMNS]
    if missing or extra:
        raise ResultsError(
            f"result table columns differ from schema.RESULT_COLUMNS: missing {missing}, "
            f"unexpected {extra}"
        )
    out = df.loc[:, list(schema.RESULT_COLUMNS)].copy()
    try:
        for c in _STR_COLUMNS:
            out[c] = out[c].astype(str)
        for c in _INT_COLUMNS:
            out[c] = out[c].astype(np.int64)
        for c in _FLOAT_COLUMNS:
            out[c] = out[c].astype(np.float64)
    except (TypeError, ValueError) as exc:
        raise ResultsError(f"result table has a column of the wrong type: {exc}") from None
    return out.reset_index(drop=True)


def results_header(
    *,
    source: str,
    traces: Sequence[Mapping[str, Any]],
    cluster: Mapping[str, Any],
    extrapolation: Mapping[str, Any],
    options: Mapping[str, Any],
    command: Sequence[str] | None = None,
) -> dict[str, Any]:
    """A complete result header (schema version, versions, git commit filled in)."""
    return {
        "schema_version": schema.RESULTS_SCHEMA_VERSION,
        "kind": schema.RESULTS_KIND,
        "source": source,
        "traces": [dict(t) for t in traces],
        "cluster": dict(cluster),
        "extrapolation": dict(extrapolation),
        "options": dict(options),
        "versions": package_versions(),
        "git_commit": git_commit(),
        "command": list(command) if command is not None else None,
    }


def _atomic_write(path: Path, write) -> None:
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    os.close(fd)
    try:
        write(tmp)
        with open(tmp, "rb") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def write_results(df: pd.DataFrame, out_dir: str | Path, header: Mapping[str, Any]) -> Path:
    """Write ``df`` (exactly RESULT_COLUMNS) and ``header`` into ``out_dir``; return the dir.

    Each file is written atomically (temporary file, fsync, rename).
    """
    df = _coerce(df)
    full = dict(header)
    full.setdefault("schema_version", schema.RESULTS_SCHEMA_VERSION)
    full.setdefault("kind", schema.RESULTS_KIND)
    missing = [k for k in schema.RESULTS_HEADER_KEYS if k not in full]
    if missing:
        raise ResultsError(f"result header lacks keys {missing}; build it with results_header()")
    out = Path(out_dir)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        reason = "it is not a folder" if out.is_file() else exc.strerror
        raise ResultsError(f"cannot write results to {out}: {reason}") from None
    _atomic_write(out / RESULTS_PARQUET, lambda p: df.to_parquet(p, index=False))
    _atomic_write(out / RESULTS_CSV, lambda p: df.to_csv(p, index=False))
    text = json.dumps(full, indent=2, sort_keys=True, default=str)
    _atomic_write(out / RESULTS_JSON, lambda p: Path(p).write_text(text + "\n", encoding="utf-8"))
    log.info("wrote %d result rows to %s", len(df), out)
    return out


def read_results(path: str | Path) -> tuple[pd.DataFrame, dict[str, Any]]:
    """Read a result folder (or its ``results.parquet``) → ``(df, header)``.

    Raises ResultsError when files are missing or corrupt, or the schema version is unknown.
    """
    p = Path(path)
    folder = p.parent if p.is_file() or p.suffix in (".parquet", ".json", ".csv") else p
    head_path = folder / RESULTS_JSON
    table_path = folder / RESULTS_PARQUET
    if not head_path.is_file() or not table_path.is_file():
        raise ResultsError(
            f"{folder} is not a result table (needs {RESULTS_JSON} and {RESULTS_PARQUET}); "
            "make one with `vgcsim predict` or `vgcsim simulate`"
        )
    try:
        header = json.loads(head_path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ResultsError(f"{head_path} is corrupt: {exc}") from None
    if not isinstance(header, dict) or header.get("kind") != schema.RESULTS_KIND:
        raise ResultsError(f"{head_path} is not a vgcsim result header")
    version = header.get("schema_version")
    if version not in schema.RESULTS_SCHEMA_READABLE:
        raise ResultsError(
            f"{folder} has result schema version {version!r}; this vgcsim reads version "
            f"{schema.RESULTS_SCHEMA_VERSION}. Re-run predict/simulate with this version, or "
            "use the vgcsim version that wrote it"
        )
    try:
        df = pd.read_parquet(table_path)
    except Exception as exc:  # pyarrow raises several unrelated types for corrupt files
        raise ResultsError(f"{table_path} is corrupt: {exc}") from None
    if version == 1:
        df = _upgrade_v1(df, header)
    return _coerce(df), header


def _upgrade_v1(df: pd.DataFrame, header: Mapping[str, Any]) -> pd.DataFrame:
    """Version-1 rows in the version-2 columns (see the module doc)."""
    cluster = header.get("cluster") or {}
    device = cluster.get("device") or {}
    out = df.copy()
    mode = str(cluster.get("compute", "trace"))
    out["compute_mode"] = mode
    if mode == "trace":  # version 1 did not record which machine measured the trace
        out["device"] = "recorded"
    else:
        out["device"] = str(device.get("name", "")) if isinstance(device, Mapping) else str(device)
    out["optimizer_s"] = 0.0
    out["decode_s"] = 0.0
    return out


def finalize_results(df: pd.DataFrame, *, batch_size_per_worker: int | None = None) -> pd.DataFrame:
    """Fill ``speedup_vs_dense``, ``scaling_efficiency`` and (given the per-worker batch)
    ``throughput_samples_per_s`` from the dense fp32 rows of the same group (see module doc).

    Rows whose group has no dense row get NaN in the relative columns.
    """
    out = _coerce(df)
    if out.empty:
        return out
    key = list(GROUP_COLUMNS)
    dense = out[(out["method"] == "dense") & (out["encoding"] == "fp32")]
    if dense.empty:
        dense = out[out["method"] == "dense"]
    dense = dense.assign(_single_s=dense["compute_s"] + dense["optimizer_s"])
    best = (
        dense.sort_values("step_s", kind="stable")
        .drop_duplicates(key, keep="first")
        .loc[:, [*key, "step_s", "_single_s"]]
        .rename(columns={"step_s": "_dense_step_s"})
    )
    merged = out.merge(best, on=key, how="left", validate="many_to_one")
    with np.errstate(divide="ignore", invalid="ignore"):
        out["speedup_vs_dense"] = (merged["_dense_step_s"] / merged["step_s"]).to_numpy()
        out["scaling_efficiency"] = (merged["_single_s"] / merged["step_s"]).to_numpy()
        if batch_size_per_worker is not None:
            out["throughput_samples_per_s"] = (
                out["world_size"].to_numpy() * float(batch_size_per_worker) / out["step_s"]
            )
    return out
