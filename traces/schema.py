"""The trace contract: run directories written by ``vgcsim record`` and ``vgcsim trace synth``.

The result-table contract lives in :mod:`vgcsim.core.results`.

A **trace** is a run directory written by ``vgcsim record`` (or ``vgcsim trace synth``)::

    RUN/
      header.json              self-describing header (see TRACE_HEADER_KEYS)
      payloads/part-000000.parquet ...   one row per (step, worker, layer)
      steps/part-000000.parquet ...      one row per step
      evals/part-000000.parquet ...      one row per evaluation
      ranks/part-000000.parquet ...      optional: one row per (step, rank), traces the DDP
                                         hook writes (seconds and wire bytes of each rank)

Each table is a folder of closed Parquet chunks written atomically (temporary file, fsync,
rename), so ``pandas.read_parquet("RUN/payloads")`` reads it with pandas alone, and a run
killed with SIGKILL leaves a valid prefix. Columns whose name ends in ``_s`` are wall-clock
measurements; every other column is deterministic for a given config and seed.

Readers refuse unknown schema versions with a message saying what to do.

**The typed description.** :class:`TraceHeader` (pydantic v2, strict: no coercion of ``"4"``
to ``4``, no NaN or Inf) states the type and range of every header field; the ``*_TABLE``
tuples of :class:`Column` state each table's columns, their Arrow type class and their range.
:mod:`vgcsim.traces.invariants` applies both, plus the rules that relate fields and rows
(numel = prod(shape), one payload row per step, worker and layer, ...); every reader of a
trace (``read_trace``) refuses what ``vgcsim trace validate`` refuses.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

TRACE_SCHEMA_VERSION = 1

TRACE_KIND = "vgcsim-trace"

HEADER_FILE = "header.json"
PAYLOADS_TABLE = "payloads"
STEPS_TABLE = "steps"
EVALS_TABLE = "evals"
TRACE_TABLES = (PAYLOADS_TABLE, STEPS_TABLE, EVALS_TABLE)
RANKS_TABLE = "ranks"
#: tables a trace may have (written by the DDP hook, ``vgcsim.traces.training.hook_trace``)
OPTIONAL_TABLES = (RANKS_TABLE,)

#: Keys every trace header carries.
TRACE_HEADER_KEYS = (
    "schema_version",  # int, == TRACE_SCHEMA_VERSION
    "kind",  # "vgcsim-trace"
    "synthetic",  # bool: True for `vgcsim trace synth`
    "status",  # "running" | "complete" | "stopped" (diverged / interrupted)
    "stop_reason",  # str | None
    "config",  # full record (or synth) config as a dict
    "seeds",  # {"seed": int, ...}
    "versions",  # {"vgcsim", "python", "torch", "numpy", ...}
    "git_commit",  # str | None
    "machine",  # {"platform", "processor", "cpus", ...}
    "workers",  # W: emulated data-parallel workers
    "batch_size_per_worker",  # samples per worker per step
    "compressor",  # {"name": str, "params": {...}}
    "encodings",  # list[str]: every encoding with a bits_<name> column
    "primary_encoding",  # str: the encoding later stages use by default
    "layers",  # [{"index": int, "name": str, "shape": [int], "numel": int}]
    "flops_per_sample",  # forward+backward FLOPs per sample (torch.utils.flop_counter)
    "dense_bytes_per_step",  # fp32 bytes of one worker's full gradient
    "chunk_steps",  # steps per closed chunk
)

#: statuses a header may carry
STATUSES = ("running", "complete", "stopped")

#: Largest integer a count may hold: the tables store counts as int64.
INT64_MAX = 2**63 - 1
#: Deepest nesting of JSON containers a header may have (the deepest a writer produces is 4:
#: config -> optimizer -> betas -> value); deeper is refused before anything walks it.
MAX_HEADER_DEPTH = 64

_Count = Annotated[int, Field(ge=0, le=INT64_MAX)]
_Positive = Annotated[int, Field(ge=1, le=INT64_MAX)]
_Name = Annotated[str, Field(min_length=1)]


class _Strict(BaseModel):
    # strict: JSON types as written ("4" is not 4, true is not 1); no NaN or Inf; fields this
    # version does not know (a header may carry "dataset", "timing", "device", ...) are kept
    model_config = ConfigDict(strict=True, allow_inf_nan=False, extra="allow")


class LayerHeader(_Strict):
    """One gradient tensor: position in the payload table, name, shape and element count."""

    index: _Count
    name: str
    shape: list[_Count]
    numel: _Count


class CompressorHeader(_Strict):
    """The compressor that produced the payloads and its hyperparameters."""

    name: _Name
    params: dict[str, Any] = Field(default_factory=dict)


class TraceHeader(_Strict):
    """``header.json``: the type and range of every field (see :data:`TRACE_HEADER_KEYS`)."""

    schema_version: Literal[1]
    kind: Literal["vgcsim-trace"]
    synthetic: bool
    status: Literal["running", "complete", "stopped"]
    stop_reason: str | None
    config: dict[str, Any]
    seeds: dict[str, Any]
    versions: dict[str, Any]
    git_commit: str | None
    machine: dict[str, Any]
    workers: _Positive
    batch_size_per_worker: _Positive
    compressor: CompressorHeader
    encodings: list[_Name] = Field(min_length=1)
    primary_encoding: _Name
    layers: list[LayerHeader] = Field(min_length=1)
    #: None: unknown (a synthetic trace of a custom layer list); compute "model" then refuses
    flops_per_sample: Annotated[float, Field(gt=0)] | None
    dense_bytes_per_step: _Count
    chunk_steps: _Positive
    steps_recorded: _Count | None = None
    created_utc: str | None = None
    finished_utc: str | None = None
    #: the recorder's divergence verdict (vgcsim.traces.health.divergence): None when the run
    #: is healthy; absent in traces recorded before it (then judged from the tables)
    divergence: dict[str, Any] | None = None


@dataclass(frozen=True)
class Column:
    """One table column: name, Arrow type class (``"int"``: any Arrow integer, read as int64;
    ``"float"``: any Arrow floating point or integer, read as float64), closed range
    ``[ge, le]`` and whether NaN ("not measured") is allowed. Values are always finite."""

    name: str
    kind: Literal["int", "float"]
    ge: float | None = None
    le: float | None = None
    nan_ok: bool = False


#: payloads table: one row per (step, worker, layer), plus one ``bits_<encoding>`` int64
#: column per name in header["encodings"] (exact bits of the encoded buffer, headers included).
#: Their ranges are relations checked row by row (step among the recorded steps, worker < W,
#: layer < L, numel = the header's, 0 <= sent <= numel, bits within the encoding's formula).
PAYLOAD_TABLE = (
    Column("step", "int"),
    Column("worker", "int"),
    Column("layer", "int"),
    Column("numel", "int"),
    Column("sent", "int"),
)
PAYLOAD_COLUMNS = tuple(c.name for c in PAYLOAD_TABLE)
#: payloads table, optional columns: a recorder writes them for the compressors that have
#: them (the same value in every worker's row where they describe a collective).
#: ``lowrank_p_elements`` / ``lowrank_q_elements``: fp32 elements of PowerSGD's P (n·r) and
#: Q (m·r) for the layer (0 for a layer sent uncompressed); ``sent`` is their sum, or numel.
#: ``union_prefix`` (sparse compressors): in worker w's row, |I_0 ∪ … ∪ I_w|, the number of
#: distinct indices workers 0..w sent for the layer (what a sparse allreduce carries).
OPTIONAL_PAYLOAD_TABLE = (
    Column("lowrank_p_elements", "int", ge=0),
    Column("lowrank_q_elements", "int", ge=0),
    Column("union_prefix", "int", ge=0),
)
OPTIONAL_PAYLOAD_COLUMNS = tuple(c.name for c in OPTIONAL_PAYLOAD_TABLE)
BITS_PREFIX = "bits_"
#: the column type of every ``bits_<encoding>`` column (its range, >= 0 and within the
#: encoding's size formula, is checked per encoding)
BITS_COLUMN = Column(BITS_PREFIX + "<encoding>", "int")

#: steps table: one row per step. ``*_s`` columns are wall-clock seconds (not deterministic).
STEP_COLUMNS = (
    "step",
    "loss",
    "lr",
    "grad_norm",
    "density",  # sent / numel over all workers and layers
    "compute_s",  # forward + backward (all emulated workers)
    "variance_s",  # squared-gradient estimator
    "compress_s",
    "encode_s",
)

#: steps table, optional columns: a recorder writes them where it measures them, and readers
#: accept their absence (older traces, synthetic traces). NaN means "not measured on this
#: step"; never Inf.
OPTIONAL_STEP_COLUMNS = (
    "decode_s",  # decode + sum of the received payloads (all workers)
    "comm_s",  # torch.distributed recordings: the slowest rank's exchange collective
    "rank_compute_s",  # one worker's forward + backward at its own batch B (sampled steps)
    "optimizer_s",  # one optimizer.step() on the averaged gradient
)

#: evals table: one row per evaluation.
EVAL_COLUMNS = ("step", "train_loss", "train_acc", "test_loss", "test_acc")

#: steps table, every column (optional ones included): ``*_s`` are seconds >= 0.
STEP_TABLE = (
    Column("step", "int", ge=0),
    Column("loss", "float"),
    Column("lr", "float", ge=0),
    Column("grad_norm", "float", ge=0),
    Column("density", "float", ge=0, le=1),
    *(Column(c, "float", ge=0) for c in STEP_COLUMNS if c.endswith("_s")),
    *(Column(c, "float", ge=0, nan_ok=True) for c in OPTIONAL_STEP_COLUMNS),
)
#: evals table: accuracies are fractions in [0, 1].
EVAL_TABLE = (
    Column("step", "int", ge=0),
    Column("train_loss", "float"),
    Column("train_acc", "float", ge=0, le=1),
    Column("test_loss", "float"),
    Column("test_acc", "float", ge=0, le=1),
)
#: ranks table (optional; traces the DDP hook writes): one row per (step, rank), what that
#: rank measured. ``forward_backward_s`` and ``optimizer_s`` are NaN where the script does not
#: report them; ``compute_s`` = forward_backward_s minus the hook's own seconds (sqsum,
#: compress, encode, comm, decode), NaN with it; ``wire_bytes``: every byte the rank sent in
#: the exchange, padding and fallback rounds included; ``fallback_rounds``: buckets whose
#: message exceeded its bound; ``step_wall_s`` (optional: traces written before it lack it):
#: the rank's wall seconds of the whole step as the script runs it (from the end of one
#: ``step_done`` to the start of the next; NaN on the first step), whose part outside
#: forward+backward and the optimizer step is the step's host overhead.
RANK_TABLE = (
    Column("step", "int", ge=0),
    Column("rank", "int", ge=0),
    Column("forward_backward_s", "float", ge=0, nan_ok=True),
    Column("compute_s", "float", ge=0, nan_ok=True),
    Column("sqsum_s", "float", ge=0),
    Column("compress_s", "float", ge=0),
    Column("encode_s", "float", ge=0),
    Column("comm_s", "float", ge=0),
    Column("decode_s", "float", ge=0),
    Column("optimizer_s", "float", ge=0, nan_ok=True),
    Column("step_wall_s", "float", ge=0, nan_ok=True),
    Column("wire_bytes", "int", ge=0),
    Column("fallback_rounds", "int", ge=0),
)
RANK_COLUMNS = tuple(c.name for c in RANK_TABLE)
#: ranks-table columns a trace may lack (added after the table: older traces are read as they are)
OPTIONAL_RANK_COLUMNS = ("step_wall_s",)
#: ranks-table columns every ranks table has
REQUIRED_RANK_COLUMNS = tuple(c for c in RANK_COLUMNS if c not in OPTIONAL_RANK_COLUMNS)
#: table folder -> its column descriptions
TABLE_COLUMNS = {
    PAYLOADS_TABLE: PAYLOAD_TABLE,
    STEPS_TABLE: STEP_TABLE,
    EVALS_TABLE: EVAL_TABLE,
    RANKS_TABLE: RANK_TABLE,
}


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _nests_deeper(obj: Any, limit: int) -> bool:
    """Whether JSON containers in ``obj`` nest deeper than ``limit`` (iterative: no recursion)."""
    stack = [(obj, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        if depth > limit:
            return True
        stack.extend((child, depth + 1) for child in children)
    return False


def header_type_problems(header: Any) -> list[str]:
    """``header`` against :class:`TraceHeader`: one line per field of the wrong type or out of
    range, ``header field <path>: <rule> (got <value>)``; empty when the types are right."""
    if not isinstance(header, dict):
        return [f"the header is a JSON {type(header).__name__}, expected an object"]
    if _nests_deeper(header, MAX_HEADER_DEPTH):
        return [f"the header nests deeper than {MAX_HEADER_DEPTH} levels"]
    try:
        TraceHeader.model_validate(header)
    except ValidationError as exc:
        out = []
        for err in exc.errors(include_url=False):
            where = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in err["loc"])
            got = "" if err["type"] == "missing" else f" (got {_shown(err.get('input'))})"
            out.append(f"header field {where.lstrip('.')}: {err['msg'].lower()}{got}")
        return out
    return []
