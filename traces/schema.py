"""The data contract between stages: trace run directories and result tables.

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

A **result table** is a folder written by ``vgcsim predict`` and ``vgcsim simulate``::

    RESULTS/
      results.json      header (see RESULTS_HEADER_KEYS)
      results.parquet   one row per (world_size, method[, step]) — RESULT_COLUMNS
      results.csv       the same rows

Readers refuse unknown schema versions with a message saying what to do.
"""

from __future__ import annotations

TRACE_SCHEMA_VERSION = 1
RESULTS_SCHEMA_VERSION = 2
#: Result schema versions this vgcsim reads (older ones are upgraded on read, see
#: ``traces.results.read_results``).
RESULTS_SCHEMA_READABLE = (1, 2)

TRACE_KIND = "vgcsim-trace"
RESULTS_KIND = "vgcsim-results"

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

#: Collective vocabulary shared by models/ and simulator/ (registry keys are
#: f"{op}/{algorithm}"; a test asserts both registries have exactly these keys).
ALLREDUCE_ALGORITHMS = (
    "ring",
    "recursive_doubling",
    "rabenseifner",
    "binomial_tree",
    "hierarchical",
)
ALLGATHERV_ALGORITHMS = ("ring", "recursive_doubling", "bruck", "direct", "padded")
COLLECTIVE_KEYS = tuple(f"allreduce/{a}" for a in ALLREDUCE_ALGORITHMS) + tuple(
    f"allgatherv/{a}" for a in ALLGATHERV_ALGORITHMS
)

#: Keys every result header carries.
RESULTS_HEADER_KEYS = (
    "schema_version",
    "kind",  # "vgcsim-results"
    "source",  # "predicted" | "simulated"
    "traces",  # [{"path", "name", "compressor", "synthetic", "schema_version"}]
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
#:   over the device's memory bandwidth plus per-layer launch overhead (models.codec); the
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
    "path",  # "closed_form" | "message" | "collective" (which model produced the row)
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
