"""Result tables: the versioned files ``vgcsim predict`` and ``vgcsim simulate`` write.

A result table is a folder holding ``results.json`` (the header, see
``RESULTS_HEADER_KEYS``), ``results.parquet`` and ``results.csv`` (the same rows, with
``RESULT_COLUMNS`` and, in a sweep's table, the ``FACTOR_COLUMNS``), and the folder marker
``.vgcsim.json`` (:mod:`vgcsim.core.outdir`). Both the closed-form models and the simulator
emit this format, so reports and cross-checks read one thing. ``results.parquet`` is the file
pandas reads: ``pd.read_parquet("OUT/results.parquet")``.

:func:`save_results` is the one path from a frame to a folder: finish (relative columns) →
header → write (each file atomically, mode 0644 under umask 022, never over a file vgcsim did
not write).

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

import functools
import json
import logging
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import pandas as pd

from vgcsim.core.errors import ResultsError
from vgcsim.core.outdir import prepare_output
from vgcsim.core.provenance import git_commit, package_versions

RESULTS_SCHEMA_VERSION = 2
#: Result schema versions this vgcsim reads (older ones are upgraded on read, see
#: ``vgcsim.core.results.read_results``).
RESULTS_SCHEMA_READABLE = (1, 2)
RESULTS_KIND = "vgcsim-results"

#: Keys every result header carries.
RESULTS_HEADER_KEYS = (
    "schema_version",
    "kind",  # "vgcsim-results"
    "source",  # "predicted" | "simulated"
    # [{"path", "name", "compressor", "synthetic", "schema_version", "caveats"}]; caveats:
    # lines on a partial or diverged input trace (the traces' health check), absent before them
    "traces",
    "cluster",  # the full cluster spec as a dict
    "extrapolation",  # {"rule": "modulo"|"resample", "seed": int|None}
    "options",  # command options (collectives, overlap, per_step, ...)
    "versions",
    "git_commit",
    "command",  # argv that produced it
)

#: Result table columns (predict and simulate emit the same ones).
#:
#: Which parts of a step are measured and which modelled (``compute_mode``):
#:
#: * ``"model"`` (the presets' default): every time is modelled on ``device`` — compute from
#:   FLOPs, the optimizer step, compression, encoding, decoding and casts from bytes touched
#:   over the device's memory bandwidth plus per-layer launch overhead (the traces' device costs); the
#:   squared-gradient estimator's extra backward work scales with the modelled compute by its
#:   measured share. Only the payload bits (and the sent counts) come from the trace.
#: * ``"trace"``: the seconds measured on the recording machine: ``compute_s`` = one worker's
#:   own forward + backward at its batch (steps column ``rank_compute_s``; for traces without it
#:   ``compute_s / W`` of the batched pass), ``optimizer_s`` (steps column ``optimizer_s``),
#:   ``variance_s``, ``codec_s`` and ``decode_s`` per worker as recorded; what a trace lacks is
#:   modelled on ``device``. The result header's ``options.time_sources`` names the source of
#:   every time column.
RESULT_COLUMNS = (
    "source",  # "predicted" | "simulated"
    "path",  # "closed_form" | "message" | "collective" | "round" | "reference" (which model made it)
    "trace",  # trace name
    "compressor",  # compressor name of the trace ("dense" for the baseline rows)
    "encoding",  # encoding whose bits were used; dense rows: "fp32" | "bf16" | "fp16"
    "cluster",  # cluster name
    "topology",  # topology kind
    "compute_mode",  # "model" | "trace": where the local times come from (see above)
    "device",  # device whose times these are (cluster device, or the recording device)
    "world_size",  # P
    "method",  # "dense" (allreduce of the gradient in `encoding`) | "compressed" (allgatherv)
    "collective",  # e.g. "allreduce/ring", "allgatherv/ring"
    "step",  # trace step for per-step rows; -1 for the mean over steps
    "compute_s",  # one rank's forward + backward at its own batch
    "optimizer_s",  # one optimizer step on one rank
    "variance_s",  # squared-gradient estimator (compressed rows)
    "codec_s",  # compress + encode on one rank (dense bf16/fp16 rows: the fp32 -> 2-byte cast)
    "decode_s",  # decode + accumulate of the P - 1 received payloads (dense 2-byte rows: the
    #             cast back to fp32); charged after the collective
    "comm_s",  # collective time (incl. the allgatherv size exchange when priced)
    "step_s",
    "payload_bytes_max",  # largest rank's payload (bytes) in the step
    "payload_bytes_mean",  # mean rank payload (bytes)
    "speedup_vs_dense",  # dense fp32 step_s / this step_s, same cluster, P and step
    "scaling_efficiency",  # single-worker step time / step_s (weak scaling)
    "throughput_samples_per_s",
)

#: The result columns that identify one configuration (everything before ``step``): rows
#: that agree on all of them belong to one curve.
RESULT_CONFIG_COLUMNS = RESULT_COLUMNS[: RESULT_COLUMNS.index("step")]

#: Optional columns after RESULT_COLUMNS: the factors a sweep varies, one value per row, so
#: that a sweep's table filters and groups by them without parsing the cluster name.
FACTOR_COLUMNS: dict[str, type] = {
    "trace_path": str,  # the trace run directory the row replays
    "bandwidth_Bps": float,  # line rate of the cluster's (inter-node) link
    "latency_s": float,  # latency of that link
    "topology_spec": str,  # the topology table as JSON, e.g. {"kind": "star"}
}


__all__ = [
    "FACTOR_COLUMNS",
    "GROUP_COLUMNS",
    "RESULTS_CSV",
    "RESULTS_JSON",
    "RESULTS_PARQUET",
    "empty_results",
    "finalize_results",
    "legacy_result_files",
    "read_results",
    "results_header",
    "save_results",
    "trace_entry",
    "TraceLike",
    "without_attrs",
    "write_results",
]

log = logging.getLogger(__name__)

RESULTS_JSON = "results.json"
RESULTS_PARQUET = "results.parquet"
RESULTS_CSV = "results.csv"

#: Rows that share these values are compared with each other (dense vs compressed).
GROUP_COLUMNS = ("source", "path", "trace", "cluster", "compute_mode", "world_size", "step")

_STR_COLUMNS = tuple(c for c in RESULT_CONFIG_COLUMNS if c != "world_size")
_INT_COLUMNS = ("world_size", "step")
_FLOAT_COLUMNS = tuple(c for c in RESULT_COLUMNS if c not in _STR_COLUMNS and c not in _INT_COLUMNS)


def empty_results() -> pd.DataFrame:
    """A zero-row frame with the result columns and dtypes."""
    return _coerce(pd.DataFrame({c: [] for c in RESULT_COLUMNS}))


def _coerce(df: pd.DataFrame) -> pd.DataFrame:
    cols = list(df.columns)
    missing = [c for c in RESULT_COLUMNS if c not in cols]
    extra = [c for c in cols if c not in RESULT_COLUMNS and c not in FACTOR_COLUMNS]
    if missing or extra:
        raise ResultsError(
            f"result table columns differ from RESULT_COLUMNS: missing {missing}, "
            f"unexpected {extra}"
        )
    factors = [c for c in FACTOR_COLUMNS if c in cols]
    out = df.loc[:, [*RESULT_COLUMNS, *factors]].copy()
    try:
        for c in (*_STR_COLUMNS, *(f for f in factors if FACTOR_COLUMNS[f] is str)):
            out[c] = out[c].astype(str)
        for c in _INT_COLUMNS:
            out[c] = out[c].astype(np.int64)
        for c in (*_FLOAT_COLUMNS, *(f for f in factors if FACTOR_COLUMNS[f] is float)):
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
        "schema_version": RESULTS_SCHEMA_VERSION,
        "kind": RESULTS_KIND,
        "source": source,
        "traces": [dict(t) for t in traces],
        "cluster": dict(cluster),
        "extrapolation": dict(extrapolation),
        "options": dict(options),
        "versions": package_versions(),
        "git_commit": git_commit(),
        "command": list(command) if command is not None else None,
    }


class TraceLike(Protocol):
    """What a result header reads of a trace: the fields of the trace reader's ``Trace``
    (spelled here by its fields, because the shared bottom names no stage)."""

    @property
    def path(self) -> Path: ...

    @property
    def name(self) -> str: ...

    @property
    def compressor(self) -> str: ...

    @property
    def synthetic(self) -> bool: ...

    @property
    def header(self) -> Mapping[str, Any]: ...


def trace_entry(trace: TraceLike) -> dict[str, Any]:
    """The result-header entry of one input trace (a ``Trace`` as the trace reader returns it).

    ``path`` is absolute (a report run from another folder still finds the trace),
    ``path_given`` the path as it was typed.
    """
    given = Path(trace.path)
    return {
        "path": str(given.resolve()),
        "path_given": str(given),
        "name": trace.name,
        "compressor": trace.compressor,
        "synthetic": bool(trace.synthetic),
        "schema_version": trace.header.get("schema_version"),
    }


#: Files of a result folder written before folder markers existed (vgcsim.core.outdir).
_LEGACY_FILES = (
    RESULTS_JSON,
    RESULTS_PARQUET,
    RESULTS_CSV,
    "timeline.json",
    "links.csv",
    "crossover.csv",
    "scenario.md",
)


def legacy_result_files(folder: Path) -> list[str] | None:
    """The files of a result table written before markers existed (its ``results.json`` is a
    vgcsim result header), so that ``--overwrite`` replaces it; None for any other folder."""
    try:
        header = json.loads((Path(folder) / RESULTS_JSON).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError):
        return None
    if not isinstance(header, dict) or header.get("kind") != RESULTS_KIND:
        return None
    return [name for name in _LEGACY_FILES if (Path(folder) / name).exists()]


def _command_name(command: Sequence[str] | None) -> str:
    words = [str(w) for w in (command or [])]
    if len(words) > 1 and words[0].endswith("vgcsim"):
        return f"vgcsim {words[1]}"
    return words[0] if words else "vgcsim"


def write_results(
    df: pd.DataFrame,
    out_dir: str | Path,
    header: Mapping[str, Any],
    *,
    overwrite: bool = False,
    files: Mapping[str, Callable[[str], Any]] | None = None,
    writer: str | None = None,
) -> Path:
    """Write ``df`` (RESULT_COLUMNS, optionally FACTOR_COLUMNS) and ``header`` into ``out_dir``,
    then ``files`` (name -> ``write(path)``) beside them; return the dir. ``writer`` names
    what wrote the folder in its marker (default: from the header's command).

    The folder is checked and marked by :func:`vgcsim.core.outdir.prepare_output` (an earlier
    vgcsim output is replaced only with ``overwrite``; a folder vgcsim did not write never).
    Each file is written atomically (temporary file, fsync, rename).
    """
    df = _coerce(df)
    full = dict(header)
    full.setdefault("schema_version", RESULTS_SCHEMA_VERSION)
    full.setdefault("kind", RESULTS_KIND)
    missing = [k for k in RESULTS_HEADER_KEYS if k not in full]
    if missing:
        raise ResultsError(f"result header lacks keys {missing}; build it with results_header()")
    extra = dict(files or {})
    out = prepare_output(
        out_dir,
        writer or _command_name(full.get("command")),
        overwrite=overwrite,
        files=[RESULTS_PARQUET, RESULTS_CSV, RESULTS_JSON, *extra],
        legacy=legacy_result_files,
    )
    out.write(RESULTS_PARQUET, lambda p: df.to_parquet(p, index=False))
    out.write(RESULTS_CSV, lambda p: df.to_csv(p, index=False))
    text = json.dumps(full, indent=2, sort_keys=True, default=str)
    out.write_text(RESULTS_JSON, text + "\n")
    for name, write in extra.items():
        out.write(name, write)
    out.commit()
    log.info("wrote %d result rows to %s", len(df), out.path)
    return out.path


def save_results(
    df: pd.DataFrame,
    out_dir: str | Path,
    *,
    batch_size_per_worker: int | None = None,
    overwrite: bool = False,
    files: Mapping[str, Callable[[str], Any]] | None = None,
    writer: str | None = None,
    **header: Any,
) -> Path:
    """Finish, head and write a result table: the one path every command and the API take.

    :func:`finalize_results` (relative columns; throughput given ``batch_size_per_worker``) →
    :func:`results_header` of ``header`` (its keyword arguments: ``source``, ``traces``,
    ``cluster``, ``extrapolation``, ``options``, ``command``) → :func:`write_results` (with
    ``overwrite``, extra ``files`` and the marker's ``writer``, e.g. ``"vgcsim predict"``).
    """
    batch = int(batch_size_per_worker) if batch_size_per_worker else None
    finished = finalize_results(df, batch_size_per_worker=batch)
    return write_results(
        finished,
        out_dir,
        results_header(**header),
        overwrite=overwrite,
        files=files,
        writer=writer,
    )


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
    except RecursionError:
        raise ResultsError(f"{head_path} is corrupt (JSON nested too deeply to read)") from None
    if not isinstance(header, dict) or header.get("kind") != RESULTS_KIND:
        raise ResultsError(f"{head_path} is not a vgcsim result header")
    version = header.get("schema_version")
    if isinstance(version, bool) or version not in RESULTS_SCHEMA_READABLE:
        raise ResultsError(
            f"{folder} has result schema version {version!r:.60}; this vgcsim reads version "
            f"{RESULTS_SCHEMA_VERSION}. Re-run predict/simulate with this version, or "
            "use the vgcsim version that wrote it"
        )
    problem = _header_problem(header)
    if problem:
        raise ResultsError(f"{head_path}: {problem}")
    try:
        # through a Python file object: pyarrow cannot open paths that are not UTF-8
        with open(table_path, "rb") as fh:
            df = pd.read_parquet(fh)
    except Exception as exc:  # pyarrow raises several unrelated types for corrupt files
        raise ResultsError(f"{table_path} is corrupt: {exc}") from None
    if version == 1:
        df = _upgrade_v1(df, header)
    try:
        df = _coerce(df)
    except ResultsError as exc:
        raise ResultsError(f"{table_path}: {exc}") from None
    problem = _value_problem(df)
    if problem:
        raise ResultsError(f"{table_path}: {problem}")
    return df, header


#: Values a result row may hold: string columns from a fixed vocabulary; times and sizes
#: finite and >= 0 (times: >= -ROUNDING_S); world size >= 1; step >= -1 (the mean row); the relative columns NaN
#: (no dense row in the group) or finite and >= 0.
RESULT_VOCABULARY = {
    "source": ("predicted", "simulated"),
    "method": ("dense", "compressed"),
    "compute_mode": ("model", "trace"),
}
#: Times are differences of simulated clocks: a time within 1 ns below zero is float rounding
#: (the simulator's comm_s of one rank is -1e-19 s), anything lower is refused.
ROUNDING_S = 1e-9
_RELATIVE_COLUMNS = ("speedup_vs_dense", "scaling_efficiency", "throughput_samples_per_s")


def _value_problem(df: pd.DataFrame) -> str | None:
    """The first rule a result table breaks, as one line naming the column (None: valid)."""
    for col, valid in RESULT_VOCABULARY.items():
        bad = ~df[col].isin(valid)
        if bad.any():
            return f"column {col} holds {df.loc[bad, col].iloc[0]!r:.40}; valid: {', '.join(valid)}"
    if (df["world_size"] < 1).any():
        return "column world_size has values below 1"
    if (df["step"] < -1).any():
        return "column step has values below -1 (-1 is the mean over steps)"
    for col in _FLOAT_COLUMNS:
        values = df[col].to_numpy()
        known = values[~np.isnan(values)] if col in _RELATIVE_COLUMNS else values
        if not np.isfinite(known).all():
            nan_ok = (
                " (NaN only where a group has no dense row)" if col in _RELATIVE_COLUMNS else ""
            )
            return f"column {col} contains NaN or Inf{nan_ok}"
        if (known < (-ROUNDING_S if col.endswith("_s") else 0.0)).any():
            return f"column {col} has negative values"
    return None


@functools.cache
def _header_model() -> Any:
    """The typed description of a result header (pydantic, built on first use so that
    importing vgcsim.core stays light)."""
    from pydantic import BaseModel, ConfigDict

    class _Strict(BaseModel):
        model_config = ConfigDict(strict=True, extra="allow")

    class CompressorEntry(_Strict):
        name: str = "?"
        params: dict[str, Any] | None = None

    class TraceEntry(_Strict):
        name: str | None = None
        path: str | None = None
        compressor: str | CompressorEntry | None = None
        caveats: list[str] = []

    class ResultsHeader(_Strict):
        source: str
        traces: list[TraceEntry]
        cluster: dict[str, Any]
        extrapolation: dict[str, Any]
        options: dict[str, Any]

    return ResultsHeader


def _header_problem(header: Mapping[str, Any]) -> str | None:
    """The first field of a result header with the wrong type (None: the types are right)."""
    from pydantic import ValidationError

    try:
        _header_model().model_validate(header)
    except ValidationError as exc:
        err = exc.errors(include_url=False)[0]
        where = ".".join(str(p) for p in err["loc"])
        return f"field {where}: {err['msg'].lower()} (got {err.get('input')!r:.60})"
    return None


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


def without_attrs(df: pd.DataFrame) -> pd.DataFrame:
    """``df``'s columns (shared, not copied) without its ``attrs``: pandas deep-copies a
    frame's ``attrs`` into the result of every operation on it, which costs more than the
    operations themselves on a result frame whose ``attrs`` hold a cluster and its options."""
    return pd.DataFrame(df)  # copy-on-write: the columns are shared until written


def finalize_results(df: pd.DataFrame, *, batch_size_per_worker: int | None = None) -> pd.DataFrame:
    """Fill ``speedup_vs_dense``, ``scaling_efficiency`` and (given the per-worker batch)
    ``throughput_samples_per_s`` from the dense fp32 rows of the same group (see module doc).

    Rows whose group has no dense row get NaN in the relative columns. The result has no
    ``attrs``: what made the frame is its caller's to say (:func:`without_attrs`).
    """
    out = _coerce(without_attrs(df))
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
