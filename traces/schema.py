"""The trace contract: run directories written by ``vgcsim record`` and ``vgcsim trace synth``.

The result-table contract lives in :mod:`vgcsim.core.results`.

A **trace** is a run directory written by ``vgcsim record`` (or ``vgcsim trace synth``)::

    RUN/
      header.json              self-describing header (see TRACE_HEADER_KEYS)
      payloads/part-000000.parquet ...   one row per (step, worker, layer)
      steps/part-000000.parquet ...      one row per step
      evals/part-000000.parquet ...      one row per evaluation

Each table is a folder of closed Parquet chunks written atomically (temporary file, fsync,
rename), so ``pandas.read_parquet("RUN/payloads")`` reads it with pandas alone, and a run
killed with SIGKILL leaves a valid prefix. Columns whose name ends in ``_s`` are wall-clock
measurements; every other column is deterministic for a given config and seed.

Readers refuse unknown schema versions with a message saying what to do.
"""

from __future__ import annotations

TRACE_SCHEMA_VERSION = 1

TRACE_KIND = "vgcsim-trace"

HEADER_FILE = "header.json"
PAYLOADS_TABLE = "payloads"
STEPS_TABLE = "steps"
EVALS_TABLE = "evals"
TRACE_TABLES = (PAYLOADS_TABLE, STEPS_TABLE, EVALS_TABLE)

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

#: payloads table: one row per (step, worker, layer), plus one ``bits_<encoding>`` int64
#: column per name in header["encodings"] (exact bits of the encoded buffer, headers included).
PAYLOAD_COLUMNS = ("step", "worker", "layer", "numel", "sent")
BITS_PREFIX = "bits_"

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
