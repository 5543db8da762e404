"""Former name of :mod:`vgcsim.traces.compression.sqsum_estimators` (per-worker gradients and
per-sample squared-gradient sums), kept importable for the callers that still use it."""

from __future__ import annotations

from vgcsim.traces.compression.sqsum_estimators import (
    ESTIMATORS,
    EXACT_CHUNK_BYTES,
    SQ_DTYPES,
    WorkerGrads,
    conv_padding,
    estimator_gap,
    resolve_sq_dtype,
    worker_gradients,
)

#: the name :mod:`vgcsim.traces.training.distributed_hook` imports
_conv_padding = conv_padding

__all__ = [
    "ESTIMATORS",
    "EXACT_CHUNK_BYTES",
    "SQ_DTYPES",
    "WorkerGrads",
    "conv_padding",
    "estimator_gap",
    "resolve_sq_dtype",
    "worker_gradients",
]
