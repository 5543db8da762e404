"""Per-step, per-rank inputs of a replay: what each of P ranks computes and sends at each step.

Both the closed-form models and the simulator build their inputs with :func:`step_inputs`, so
they see identical numbers. The rules (shared contract):

* payload bytes of a rank at a step = ⌈bits / 8⌉ of the total bits its recorded worker sent
  in that step under the chosen encoding (default: the trace's primary encoding); ranks map to
  recorded workers by :mod:`traces.extrapolate` (``modulo`` or seeded ``resample``);
* the dense baseline sends ``dense_bytes_per_step`` (fp32 gradient) per rank with allreduce;
* compute per rank and step: ``compute: "trace"`` → the trace's measured ``compute_s / W``
  (all W emulated workers are measured together) × ``compute_scale``; ``compute: "model"`` →
  ``flops_per_sample × batch_size_per_worker / (peak_flops × efficiency)``;
* ``variance_s`` and ``codec_s`` (= ``compress_s + encode_s``) per rank = the step's measured
  value / W, scaled like compute: × ``compute_scale`` in trace mode; in model mode × (modelled
  compute / mean measured per-worker compute), i.e. assuming the codec speeds up on the
  modelled device as much as the forward/backward pass does.

Per-layer bytes (for bucketed overlap) are optional and may be grouped into buckets on the
fly, because ``[steps, P, layers]`` for ResNet-50 at P = 1024 would not fit in memory.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from traces import schema
from traces.cluster import ClusterSpec
from traces.errors import TraceError
from traces.extrapolate import rank_workers

__all__ = ["StepInputs", "compute_scale_factor", "step_inputs"]


@dataclass(frozen=True)
class StepInputs:
    """What P ranks do at each of T steps (arrays, SI units)."""

    steps: np.ndarray  # [T] trace step numbers
    rank_bytes: np.ndarray  # [T, P] compressed payload bytes per rank
    dense_bytes: int  # fp32 gradient bytes per rank (allreduce payload)
    compute_s: np.ndarray  # [T, P] forward + backward seconds per rank
    variance_s: np.ndarray  # [T, P]
    codec_s: np.ndarray  # [T, P] compress + encode seconds per rank
    layer_bytes: np.ndarray | None = None  # [T, P, L] per-layer (or per-bucket) bytes

    @property
    def world_size(self) -> int:
        return int(self.rank_bytes.shape[1])


def _bits_to_bytes(bits: np.ndarray) -> np.ndarray:
    bits = np.asarray(bits, dtype=np.int64)
    return (bits + 7) // 8


def _step_column(trace: Any, name: str) -> np.ndarray:
    steps = trace.steps
    if name not in steps.columns:
        raise TraceError(f"trace {trace.name}: steps table lacks column {name!r}")
    return steps[name].to_numpy(dtype=np.float64)


def compute_scale_factor(trace: Any, cluster: ClusterSpec) -> tuple[np.ndarray, float]:
    """Per-worker compute seconds per step ``[T]`` under ``cluster`` and the factor applied to
    the trace's measured per-worker variance and codec seconds."""
    workers = int(trace.workers)
    measured = _step_column(trace, "compute_s") / workers
    if cluster.compute == "trace":
        return measured * cluster.compute_scale, float(cluster.compute_scale)
    header = trace.header
    flops = header.get("flops_per_sample")
    batch = header.get("batch_size_per_worker")
    if not flops or not batch:
        raise TraceError(
            f"trace {trace.name}: compute 'model' needs flops_per_sample and "
            "batch_size_per_worker in the header"
        )
    modelled = float(flops) * float(batch) / cluster.device.effective_flops
    mean_measured = float(np.mean(measured)) if len(measured) else 0.0
    factor = modelled / mean_measured if mean_measured > 0 else 1.0
    return np.full(len(measured), modelled), factor


def _layer_groups(trace: Any, layers: bool | Sequence[Sequence[int]]) -> list[list[int]]:
    n_layers = len(trace.layers)
    if layers is True:
        return [[i] for i in range(n_layers)]
    groups = [list(g) for g in layers]  # type: ignore[union-attr]
    flat = [i for g in groups for i in g]
    if any(i < 0 or i >= n_layers for i in flat):
        raise TraceError(f"layer groups name layers outside 0..{n_layers - 1}")
    return groups


def _layer_group_bits(
    trace: Any, encoding: str | None, groups: list[list[int]], step_index: np.ndarray
) -> np.ndarray:
    """Bits per (step, worker, group): ``[T, W, K]``."""
    enc = trace.primary_encoding if encoding is None else encoding
    col = schema.BITS_PREFIX + enc
    p = trace.payloads
    if col not in p.columns:
        raise TraceError(f"trace {trace.name}: payloads lack column {col!r}")
    n_layers = len(trace.layers)
    group_of = np.full(n_layers, -1, dtype=np.int64)
    for k, g in enumerate(groups):
        group_of[g] = k
    pos = np.searchsorted(step_index, p["step"].to_numpy())
    pos = np.clip(pos, 0, len(step_index) - 1)
    keep = step_index[pos] == p["step"].to_numpy()
    g = group_of[p["layer"].to_numpy()]
    keep &= g >= 0
    out = np.zeros((len(step_index), int(trace.workers), len(groups)), dtype=np.int64)
    np.add.at(
        out,
        (pos[keep], p["worker"].to_numpy()[keep], g[keep]),
        p[col].to_numpy(dtype=np.int64)[keep],
    )
    return out


def step_inputs(
    trace: Any,
    cluster: ClusterSpec,
    world_size: int,
    *,
    encoding: str | None = None,
    rule: str = "modulo",
    seed: int = 0,
    layers: bool | Sequence[Sequence[int]] = False,
) -> StepInputs:
    """Build the [T, P] inputs of a replay of ``trace`` on ``cluster`` with ``world_size`` ranks.

    ``layers=True`` adds per-layer bytes ``[T, P, L]``; a list of layer-index groups adds
    per-group bytes ``[T, P, K]`` (each group's bits summed before rounding up to bytes).
    """
    wb = trace.worker_bits(encoding)
    steps = wb.index.to_numpy(dtype=np.int64)
    bits = wb.to_numpy(dtype=np.int64)
    workers = int(trace.workers)
    if bits.shape[1] != workers:
        raise TraceError(
            f"trace {trace.name}: worker_bits has {bits.shape[1]} columns for {workers} workers"
        )
    n_steps = len(steps)
    if n_steps == 0:
        raise TraceError(f"trace {trace.name} has no recorded steps")
    idx = rank_workers(n_steps, workers, world_size, rule, seed)
    rank_bytes = _bits_to_bytes(np.take_along_axis(bits, idx, axis=1))

    trace_steps = trace.steps["step"].to_numpy(dtype=np.int64)
    if len(trace_steps) != n_steps or not np.array_equal(trace_steps, steps):
        raise TraceError(f"trace {trace.name}: steps table and payloads disagree on the steps")
    compute, factor = compute_scale_factor(trace, cluster)
    variance = _step_column(trace, "variance_s") / workers * factor
    codec = (_step_column(trace, "compress_s") + _step_column(trace, "encode_s")) / workers * factor
    shape = (n_steps, world_size)

    layer_bytes = None
    if layers is not False:
        groups = _layer_groups(trace, layers)
        gbits = _layer_group_bits(trace, encoding, groups, steps)  # [T, W, K]
        per_rank = np.take_along_axis(gbits, idx[:, :, None], axis=1)
        layer_bytes = _bits_to_bytes(per_rank)

    dense = trace.header.get("dense_bytes_per_step")
    if dense is None:
        dense = trace.dense_bits_per_worker() // 8
    return StepInputs(
        steps=steps,
        rank_bytes=rank_bytes,
        dense_bytes=int(dense),
        compute_s=np.broadcast_to(compute[:, None], shape).copy(),
        variance_s=np.broadcast_to(variance[:, None], shape).copy(),
        codec_s=np.broadcast_to(codec[:, None], shape).copy(),
        layer_bytes=layer_bytes,
    )
