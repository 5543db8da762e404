"""Per-step, per-rank inputs of a replay: what each of P ranks computes and sends at each step.

Both the closed-form models and the simulator build their inputs with :func:`step_inputs`, so
they see identical numbers. The rules (shared contract):

* payload bytes of a rank at a step = ⌈bits / 8⌉ of the total bits its recorded worker sent
  in that step under the chosen encoding (default: the trace's primary encoding); ranks map to
  recorded workers by :mod:`vgcsim.traces.extrapolate` (``modulo`` or seeded ``resample``);
* the dense baselines send ``dense_bytes_per_step`` (fp32 gradient) per rank with allreduce,
  or half of it as bf16 / fp16 (:data:`DENSE_ENCODINGS`), paying a cast before and after;
* local times per rank and step depend on ``cluster.compute`` (see ``vgcsim.traces.schema`` for the
  result columns and which parts are measured):

  ``"model"`` — everything on ``cluster.device``: compute = ``flops_per_sample × B /
  (peak × efficiency)``; the squared-gradient estimator = modelled compute × its measured
  share (Σ variance_s / Σ compute_s, FLOP-bound extra backward work); compress + encode,
  decode + accumulate, the 2-byte casts and the optimizer step from bytes touched over memory
  bandwidth plus launches (:mod:`vgcsim.traces.devicecost`), with the sent counts and payload bytes
  of the trace.

  ``"trace"`` — the seconds measured on the recording machine × ``compute_scale``: compute =
  one worker's own forward + backward at batch B (steps column ``rank_compute_s``, NaN on
  steps not sampled: those take ``compute_s / W`` × the mean measured ratio rank_compute_s /
  (compute_s / W)); traces without the column fall back to ``compute_s / W`` of the batched
  pass (which underestimates a rank's own pass); ``optimizer_s`` measured (NaN steps take the
  mean); variance, codec (compress + encode) = the step's value / W; decode of the P − 1
  received payloads = (P − 1) × one recorded decode + accumulate per payload (``decode_s`` /
  W for emulated traces, / W² for torch.distributed allgatherv recordings, where every rank
  decodes all W payloads and the column sums the ranks). Whatever the trace lacks (decode_s, optimizer_s, the casts) is modelled on
  ``cluster.device`` and named in ``time_sources``.

  Traces the DDP hook wrote (a ranks table) give every rank its own measured compute
  (plus the step's host overhead), variance, codec and decode instead
  (:func:`hook_rank_times`): the step then waits for its slowest rank.

Hosts with cores: where ``cluster.host_cores`` > 0, every local time above (compute,
variance, codec, decode, optimizer, the dense casts) is multiplied by the host's sharing
factor f = ``vgcsim.core.cluster.host_share(cluster, P)`` (R = min(ranks_per_host, P) ranks
of threads_per_rank threads on host_cores cores: ⌈R·T/C⌉ by default, R·T/C with
``host_sharing = "fair"``): the ranks of a host run their local work at once and share its
cores (f = 1 by default, and the times are unchanged). Where the ranks' times of a step differ
(a hook-written trace) and the fullest core sets the pace, the ranks of one core take turns
and are done together (:func:`core_shared`).

PowerSGD traces (payload columns :data:`LOWRANK_COLUMNS`) exchange by three allreduces per
bucket, in torch's order: the tensors sent plain, then P, then Q
(:attr:`StepInputs.allreduce_bytes`; equal on every rank, so no extrapolation rule is
needed); in model mode their local work is :func:`vgcsim.traces.devicecost.powersgd_time_s`
and they decode nothing.

Per-layer bytes (for bucketed overlap) are optional and may be grouped into buckets on the
fly, because ``[steps, P, layers]`` for ResNet-50 at P = 1024 would not fit in memory.

The DDP hook's bounded exchange (``allgatherv/bounded``) is priced per bucket message
(:func:`bucket_messages`: header plus layer bytes, the hook's bucket layouts from a trace it
wrote, else DDP's greedy buckets); :func:`default_allgatherv` is the algorithm predict and
simulate use when none is asked for.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TypeVar

import numpy as np
import pandas as pd

from vgcsim.core.cluster import ClusterSpec, host_share
from vgcsim.core.errors import TraceError, unknown_name
from vgcsim.core.options import DENSE_ENCODINGS, ReplayOptions
from vgcsim.traces import devicecost, schema
from vgcsim.traces.buckets import DDP_BUCKET_BYTES
from vgcsim.traces.extrapolate import rank_workers
from vgcsim.traces.reading import Trace

__all__ = [
    "DDP_BUCKET_BYTES",
    "DENSE_ENCODINGS",
    "LOWRANK_COLUMNS",
    "StepInputs",
    "compute_scale_factor",
    "hook_rank_times",
    "host_overhead_s",
    "is_lowrank",
    "recording_device",
    "resolve_collectives",
    "step_inputs",
]

# DENSE_ENCODINGS (fp32 and the 2-byte casts of PyTorch's bf16/fp16 compress hooks):
# vgcsim.core.options, the replay vocabulary.

_Options = TypeVar("_Options", bound=ReplayOptions)

# DDP_BUCKET_BYTES (PyTorch DDP's default bucket_cap_mb, vgcsim.traces.buckets): one cast
# kernel per bucket for the 2-byte dense baselines.


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
    decode_s: np.ndarray | None = None  # [T, P] decode + accumulate of the P − 1 received
    optimizer_s: np.ndarray | None = None  # [T] one optimizer step
    dense_cast_s: dict[str, tuple[float, float]] = field(default_factory=dict)
    #: [T, K, 3] PowerSGD traces only: per group (the whole model when ungrouped) the bytes
    #: of the three allreduces every rank runs in order: plain tensors, P, Q
    allreduce_bytes: np.ndarray | None = None
    compute_mode: str = "model"
    device: str = ""
    time_sources: dict[str, str] = field(default_factory=dict)

    @property
    def world_size(self) -> int:
        return int(self.rank_bytes.shape[1])

    def dense_times(self, encoding: str) -> tuple[float, float, float]:
        """``(payload_bytes, cast_s, uncast_s)`` of the dense baseline in ``encoding``."""
        if encoding not in DENSE_ENCODINGS:
            raise unknown_name("dense encoding", encoding, DENSE_ENCODINGS)
        numel = self.dense_bytes / 4
        cast, uncast = self.dense_cast_s.get(encoding, (0.0, 0.0))
        return numel * devicecost.DENSE_ENCODING_BYTES[encoding], cast, uncast

    def decode(self) -> np.ndarray:
        """``decode_s`` or zeros."""
        return np.zeros_like(self.codec_s) if self.decode_s is None else self.decode_s

    def optimizer(self) -> np.ndarray:
        """``optimizer_s`` ``[T]`` or zeros."""
        n = len(self.steps)
        return np.zeros(n) if self.optimizer_s is None else self.optimizer_s


def _bits_to_bytes(bits: np.ndarray) -> np.ndarray:
    bits = np.asarray(bits, dtype=np.int64)
    return (bits + 7) // 8


def _step_column(trace: Trace, name: str) -> np.ndarray:
    steps = trace.steps
    if name not in steps.columns:
        raise TraceError(f"trace {trace.name}: steps table lacks column {name!r}")
    return steps[name].to_numpy(dtype=np.float64)


def _optional_column(trace: Trace, name: str) -> np.ndarray | None:
    """A steps column with at least one finite value, else None."""
    if name not in trace.steps.columns:
        return None
    col = trace.steps[name].to_numpy(dtype=np.float64)
    return col if np.isfinite(col).any() else None


def recording_device(trace: Trace) -> str:
    """The device that measured the trace's seconds: the header's ``device`` (a name, or a
    table with ``type`` and ``name``: ``"cpu (AMD EPYC)"``); traces from before it was
    recorded ran on the CPU; synthetic traces say ``synthetic``."""
    dev = trace.header.get("device")
    if isinstance(dev, dict):  # {"type": "cpu" | "cuda", "name": ..., ...}
        kind, name = dev.get("type"), dev.get("name")
        if kind and name:
            return f"{kind} ({name})"
        dev = kind or name
    if dev:
        return str(dev)
    return "synthetic" if trace.synthetic else "cpu"


def _distributed_allgatherv(trace: Trace) -> bool:
    """True for a torch.distributed recording whose ranks exchanged by allgatherv."""
    dist = trace.header.get("distributed")
    return isinstance(dist, dict) and dist.get("collective") == "allgatherv"


def _rank_compute_trace(trace: Trace, cluster: ClusterSpec) -> tuple[np.ndarray, str]:
    workers = int(trace.workers)
    batched = _step_column(trace, "compute_s") / workers
    rank = _optional_column(trace, "rank_compute_s")
    if rank is None:
        return batched * cluster.compute_scale, (
            "measured: compute_s / W of the batched pass (the trace has no rank_compute_s; "
            "this underestimates one rank's own forward + backward)"
        )
    sampled = np.isfinite(rank) & (batched > 0)
    ratio = float(np.mean(rank[sampled] / batched[sampled])) if sampled.any() else 1.0
    out = np.where(np.isfinite(rank), rank, batched * ratio)
    return out * cluster.compute_scale, (
        f"measured: rank_compute_s on {int(np.isfinite(rank).sum())} of {len(rank)} steps; "
        f"other steps compute_s / W x {ratio:.3g} (mean measured ratio)"
    )


#: The ranks-table terms of :func:`hook_rank_times` (output key: ranks-table columns summed).
_RANK_TERMS = {
    "compute": ("compute_s",),
    "variance": ("sqsum_s",),
    "codec": ("compress_s", "encode_s"),
    "decode": ("decode_s",),
}


def host_overhead_s(ranks: pd.DataFrame) -> pd.Series:
    """Each ranks-table row's host overhead: the part of the script's whole step outside
    forward+backward and the optimizer, ``max(0, step_wall_s − forward_backward_s −
    optimizer_s)``; NaN where a term is missing (every row of a trace without
    ``step_wall_s``)."""
    if "step_wall_s" not in ranks.columns:
        return pd.Series(np.nan, index=ranks.index)
    inside = ranks["forward_backward_s"] + ranks["optimizer_s"]
    return (ranks["step_wall_s"] - inside).clip(lower=0.0)


def hook_rank_times(
    trace: Trace, steps: np.ndarray, world_size: int, seed: int = 0
) -> dict[str, np.ndarray] | None:
    """Per-rank local seconds ``[T, P]`` of a hook-written trace, from its ranks table.

    Rank r < W (the recorded world size) at step t takes recorded rank r's own row at step t;
    a rank beyond the recording takes the row of a (step, rank) drawn uniformly from the whole
    table by a generator seeded with ``(seed, P)``, a fresh draw per step and rank. So the
    step's slowest rank — the one every rank waits for in synchronous SGD — is the recorded
    slowest at P ≤ W and the maximum of P draws from the measured distribution beyond it (the
    straggler effect grows with P as the expected maximum of P samples does).

    Keys: ``compute`` (compute_s plus the step's host overhead where the trace has
    ``step_wall_s`` and ``optimizer_s``: overhead = max(0, step_wall_s − forward_backward_s −
    optimizer_s), the script's data loading, zero_grad and loop), ``variance`` (sqsum_s),
    ``codec`` (compress_s + encode_s), ``decode`` (decode_s / W per payload: multiply by the
    payloads decoded) and ``overhead`` (the overhead alone, for ``time_sources``). A missing
    value takes its rank's median. None when the trace has no ranks table with a measured
    compute_s.
    """
    ranks = trace.ranks
    if ranks is None or not len(ranks) or "compute_s" not in ranks.columns:
        return None
    if not np.isfinite(ranks["compute_s"].to_numpy(dtype=np.float64)).any():
        return None
    workers = int(trace.workers)
    frame = ranks.set_index(["step", "rank"]).sort_index()
    full = pd.MultiIndex.from_product([steps, range(workers)], names=["step", "rank"])
    frame = frame.reindex(full)
    values: dict[str, np.ndarray] = {}
    for key, cols in _RANK_TERMS.items():
        present = [c for c in cols if c in frame.columns]
        block = sum((frame[c].to_numpy(dtype=np.float64) for c in present), np.zeros(len(frame)))
        values[key] = block.reshape(len(steps), workers)
    values["overhead"] = (
        host_overhead_s(frame).to_numpy(dtype=np.float64).reshape(len(steps), workers)
    )
    for key, a in values.items():
        finite = np.isfinite(a)
        overall = float(np.median(a[finite])) if finite.any() else 0.0
        per_rank = [
            float(np.median(a[finite[:, w], w])) if finite[:, w].any() else overall
            for w in range(workers)
        ]
        values[key] = np.where(finite, a, np.asarray(per_rank)[None, :])
    values["compute"] = values["compute"] + values["overhead"]
    values["decode"] = values["decode"] / workers
    n = len(steps)
    own = min(world_size, workers)
    step_of = np.broadcast_to(np.arange(n)[:, None], (n, world_size)).copy()
    rank_of = np.broadcast_to(np.arange(world_size)[None, :], (n, world_size)).copy()
    if world_size > workers:
        rng = np.random.default_rng([int(seed), int(world_size)])
        extra = (n, world_size - own)
        step_of[:, own:] = rng.integers(0, n, size=extra)
        rank_of[:, own:] = rng.integers(0, workers, size=extra)
    return {key: a[step_of, rank_of] for key, a in values.items()}


def _model_compute(trace: Trace, cluster: ClusterSpec, n_steps: int) -> np.ndarray:
    header = trace.header
    flops = header.get("flops_per_sample")
    batch = header.get("batch_size_per_worker")
    if not flops or not batch:
        raise TraceError(
            f"trace {trace.name}: compute 'model' needs flops_per_sample and "
            "batch_size_per_worker in the header; use --compute trace (the recorded seconds)"
        )
    modelled = float(devicecost.compute_time_s(float(flops), float(batch), cluster.device))
    return np.full(n_steps, modelled)


def compute_scale_factor(trace: Trace, cluster: ClusterSpec) -> tuple[np.ndarray, float]:
    """Per-rank compute seconds per step ``[T]`` under ``cluster`` and the factor applied to
    the trace's measured per-worker variance seconds (trace mode: ``compute_scale``; model
    mode: modelled compute / mean batched per-worker compute, the estimator's measured share
    of the forward + backward pass carried to the modelled device)."""
    workers = int(trace.workers)
    batched = _step_column(trace, "compute_s") / workers
    if cluster.compute == "trace":
        compute, _ = _rank_compute_trace(trace, cluster)
        return compute, float(cluster.compute_scale)
    modelled = _model_compute(trace, cluster, len(batched))
    mean_measured = float(np.mean(batched)) if len(batched) else 0.0
    factor = float(modelled[0]) / mean_measured if mean_measured > 0 else 1.0
    return modelled, factor


def _layer_groups(trace: Trace, layers: bool | Sequence[Sequence[int]]) -> list[list[int]]:
    n_layers = len(trace.layers)
    if layers is True:
        return [[i] for i in range(n_layers)]
    groups = [list(g) for g in layers]  # type: ignore[union-attr]
    flat = [i for g in groups for i in g]
    if any(i < 0 or i >= n_layers for i in flat):
        raise TraceError(f"layer groups name layers outside 0..{n_layers - 1}")
    return groups


def _step_worker_sums(trace: Trace, step_index: np.ndarray, columns: Sequence[str]) -> list:
    """Per (step, worker) sums ``[T, W]`` of payload columns (numel, sent)."""
    p = trace.payloads
    pos = np.searchsorted(step_index, p["step"].to_numpy())
    pos = np.clip(pos, 0, len(step_index) - 1)
    keep = step_index[pos] == p["step"].to_numpy()
    w = p["worker"].to_numpy()[keep]
    out = []
    for c in columns:
        acc = np.zeros((len(step_index), int(trace.workers)), dtype=np.float64)
        np.add.at(acc, (pos[keep], w), p[c].to_numpy(dtype=np.float64)[keep])
        out.append(acc)
    return out


def _layer_group_bits(
    trace: Trace, encoding: str | None, groups: list[list[int]], step_index: np.ndarray
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


#: payload columns of a trace whose compressed exchange is allreduces of P and Q (powersgd)
LOWRANK_COLUMNS = ("lowrank_p_elements", "lowrank_q_elements")


def is_lowrank(trace: Trace) -> bool:
    """Whether the trace's compressed exchange is PowerSGD's allreduces (its payloads carry
    :data:`LOWRANK_COLUMNS`), not an allgatherv of per-worker payloads."""
    return set(LOWRANK_COLUMNS) <= set(trace.payloads.columns)


def _lowrank_layers(trace: Trace, step_index: np.ndarray) -> tuple[np.ndarray, ...]:
    """Per (step, layer) ``[T, L]``: numel, P elements, Q elements and the allreduced bytes,
    from worker 0's rows (every worker allreduces the same buffers)."""
    p = trace.payloads
    p = p[p["worker"] == 0]
    pos = np.searchsorted(step_index, p["step"].to_numpy())
    layer = p["layer"].to_numpy()
    shape = (len(step_index), len(trace.layers))
    out = []
    for col in ("numel", *LOWRANK_COLUMNS, schema.BITS_PREFIX + trace.primary_encoding):
        a = np.zeros(shape)
        a[pos, layer] = p[col].to_numpy(dtype=np.float64)
        out.append(a)
    numel, pe, qe, bits = out
    return numel, pe, qe, bits / 8


def _lowrank_allreduces(
    trace: Trace, groups: list[list[int]], step_index: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """``([T, K, 3] bytes of the plain, P and Q allreduces per group, [T, L] per-layer
    arrays for the device model)``."""
    numel, pe, qe, total = _lowrank_layers(trace, step_index)
    p_bytes, q_bytes = 4 * pe, 4 * qe
    plain = total - p_bytes - q_bytes
    parts = np.stack(
        [
            np.stack([a[:, g].sum(axis=1) for a in (plain, p_bytes, q_bytes)], axis=1)
            for g in groups
        ],
        axis=1,
    )
    return parts, np.stack([numel, pe, qe])


def _optimizer_spec(trace: Trace) -> tuple[str, float, str]:
    cfg = trace.header.get("config") or {}
    opt = cfg.get("optimizer") if isinstance(cfg, dict) else None
    if isinstance(opt, dict) and opt.get("name"):
        return str(opt["name"]), float(opt.get("momentum") or 0.0), "the trace's optimizer"
    return "momentum_sgd", 0.9, "momentum SGD assumed (the trace names no optimizer)"


def _model_optimizer(trace: Trace, cluster: ClusterSpec, n_steps: int) -> tuple[np.ndarray, str]:
    name, momentum, why = _optimizer_spec(trace)
    params = float(sum(int(layer["numel"]) for layer in trace.layers))
    t = devicecost.optimizer_time_s(name, momentum, params, len(trace.layers), cluster.device)
    return np.full(n_steps, t), (
        f"modelled on {cluster.device.name}: {name} step over {params:.0f} parameters ({why}), "
        "vgcsim.traces.devicecost.optimizer_time_s"
    )


def _dense_casts(dense_bytes: int, cluster: ClusterSpec) -> dict[str, tuple[float, float]]:
    numel = dense_bytes / 4
    launches = max(1, math.ceil(dense_bytes / DDP_BUCKET_BYTES))
    cast = devicecost.cast_time_s(numel, launches, cluster.device)
    return {"fp32": (0.0, 0.0), "bf16": (cast, cast), "fp16": (cast, cast)}


def step_inputs(
    trace: Trace,
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
    shape = (n_steps, world_size)
    n_layers = len(trace.layers)
    compressor = str(trace.compressor)
    device = cluster.device
    sources: dict[str, str] = {}

    compute, factor = compute_scale_factor(trace, cluster)
    variance = _step_column(trace, "variance_s") / workers * factor
    numel_w, sent_w = _step_worker_sums(trace, steps, ("numel", "sent"))
    numel_r = np.take_along_axis(numel_w, idx, axis=1)
    sent_r = np.take_along_axis(sent_w, idx, axis=1)
    rb = rank_bytes.astype(np.float64)

    def decode_model() -> np.ndarray:
        """Σ over the other ranks' payloads of their decode bytes, on the cluster's device."""
        if world_size == 1:
            return np.zeros(shape)
        per_payload = devicecost.decode_bytes(compressor, numel_r, sent_r, rb)  # [T, P]
        received = per_payload.sum(axis=1, keepdims=True)
        if not is_hook_trace(trace):  # the DDP hook decodes its own payload too
            received = received - per_payload
        return devicecost.decode_time_s(compressor, received, n_layers, device)

    allreduce_bytes = None
    lowrank = is_lowrank(trace)
    if lowrank:
        groups = [list(range(n_layers))] if layers is False else _layer_groups(trace, layers)
        allreduce_bytes, per_layer = _lowrank_allreduces(trace, groups, steps)

    if cluster.compute == "model":
        sources["compute_s"] = f"modelled on {device.name}: flops_per_sample x B / effective FLOP/s"
        sources["variance_s"] = (
            f"modelled on {device.name}: modelled compute x measured variance_s / compute_s"
        )
        if not lowrank:
            codec = devicecost.compress_time_s(compressor, numel_r, sent_r, rb, n_layers, device)
            sources["codec_s"] = (
                f"modelled on {device.name}: vgcsim.traces.devicecost.compress_time_s"
            )
            decode = decode_model()
            sources["decode_s"] = (
                f"modelled on {device.name}: vgcsim.traces.devicecost.decode_time_s of the "
                "P - 1 received payloads"
            )
        else:
            codec = np.broadcast_to(devicecost.powersgd_time_s(*per_layer, device)[:, None], shape)
            sources["codec_s"] = (
                f"modelled on {device.name}: vgcsim.traces.devicecost.powersgd_time_s "
                "(matmuls, orthogonalization, error feedback)"
            )
            decode = np.zeros(shape)
            sources["decode_s"] = "none: PowerSGD's decompression is part of codec_s"
        optimizer, sources["optimizer_s"] = _model_optimizer(trace, cluster, n_steps)
        dev_name = device.name
    else:
        scale = cluster.compute_scale
        _, sources["compute_s"] = _rank_compute_trace(trace, cluster)
        sources["variance_s"] = "measured: variance_s / W"
        codec_w = (_step_column(trace, "compress_s") + _step_column(trace, "encode_s")) / workers
        codec = np.broadcast_to((codec_w * scale)[:, None], shape).copy()
        sources["codec_s"] = "measured: (compress_s + encode_s) / W"
        dec = _optional_column(trace, "decode_s")
        if dec is not None:
            dec = np.nan_to_num(dec, nan=float(np.nanmean(dec)))
            # decodes per step in the recording: emulated, one per worker's payload (W);
            # torch.distributed allgatherv, every rank decodes all W payloads (W x W)
            per_step_decodes = workers * (workers if _distributed_allgatherv(trace) else 1)
            per = dec / per_step_decodes * scale
            # the DDP hook decodes every rank's payload, its own included (P per rank)
            decoded = world_size if is_hook_trace(trace) else world_size - 1
            decode = np.broadcast_to((per * decoded)[:, None], shape).copy()
            sources["decode_s"] = (
                f"measured: {'P' if decoded == world_size else '(P - 1)'} x decode_s / "
                f"{per_step_decodes} (decodes per recorded step: one per payload)"
            )
        else:
            decode = decode_model()
            sources["decode_s"] = (
                f"modelled on {device.name} (the trace has no decode_s): "
                "vgcsim.traces.devicecost.decode_time_s"
            )
        opt = _optional_column(trace, "optimizer_s")
        if opt is not None:
            optimizer = np.nan_to_num(opt, nan=float(np.nanmean(opt))) * scale
            sources["optimizer_s"] = "measured: optimizer_s (steps not sampled take the mean)"
        else:
            optimizer, why = _model_optimizer(trace, cluster, n_steps)
            sources["optimizer_s"] = f"{why} (the trace has no optimizer_s)"
        per_rank = hook_rank_times(trace, steps, world_size, seed) if not lowrank else None
        if per_rank is not None:
            # the hook's ranks table: each rank's own measured seconds (hook_rank_times)
            compute = per_rank["compute"] * scale
            variance = per_rank["variance"] * scale
            codec = per_rank["codec"] * scale
            decode = per_rank["decode"] * world_size * scale
            overhead = float(np.median(per_rank["overhead"]))
            sources["compute_s"] = (
                "measured per rank (ranks table): compute_s + the step's host overhead "
                f"(step_wall_s - forward_backward_s - optimizer_s, median {overhead:.3g} s); "
                "ranks beyond the recorded W draw seeded (step, rank) rows"
            )
            sources["variance_s"] = "measured per rank (ranks table): sqsum_s"
            sources["codec_s"] = "measured per rank (ranks table): compress_s + encode_s"
            sources["decode_s"] = "measured per rank (ranks table): P x decode_s / W"
        dev_name = recording_device(trace)
    sources["dense_cast_s"] = f"modelled on {device.name}: vgcsim.traces.devicecost.cast_time_s"

    layer_bytes = None
    if layers is not False:
        groups = _layer_groups(trace, layers)
        gbits = _layer_group_bits(trace, encoding, groups, steps)  # [T, W, K]
        per_rank = np.take_along_axis(gbits, idx[:, :, None], axis=1)
        layer_bytes = _bits_to_bytes(per_rank)

    dense = trace.header.get("dense_bytes_per_step")
    if dense is None:
        dense = trace.dense_bits_per_worker() // 8
    casts = _dense_casts(int(dense), cluster)
    share = host_share(cluster, world_size)
    if share != 1.0:  # the host's cores shared (module docstring)
        compute, variance, codec, decode, optimizer = (
            core_shared(x, cluster, world_size, share)
            for x in (compute, variance, codec, decode, optimizer)
        )
        casts = {k: (a * share, b * share) for k, (a, b) in casts.items()}
        for key in ("compute_s", "variance_s", "codec_s", "decode_s", "optimizer_s"):
            sources[key] += f"; x {share:.4g} (host sharing, {cluster.host_sharing})"
    return StepInputs(
        steps=steps,
        rank_bytes=rank_bytes,
        dense_bytes=int(dense),
        compute_s=_per_rank(compute, shape),
        variance_s=_per_rank(variance, shape),
        codec_s=np.asarray(codec, dtype=np.float64),
        layer_bytes=layer_bytes,
        decode_s=np.asarray(decode, dtype=np.float64),
        optimizer_s=np.asarray(optimizer, dtype=np.float64),
        dense_cast_s=casts,
        allreduce_bytes=allreduce_bytes,
        compute_mode=cluster.compute,
        device=dev_name,
        time_sources=sources,
    )


def core_cohorts(cluster: ClusterSpec, world_size: int) -> np.ndarray:
    """Per rank, the index of the core it runs on, unique across hosts: ranks fill hosts in
    order (``ranks_per_host`` each) and the ranks of a host take its ``host_cores`` cores in
    turn (local rank l on core l mod C), as a scheduler spreads single-threaded ranks."""
    r = np.arange(int(world_size))
    host, local = np.divmod(r, cluster.ranks_per_host)
    return host * cluster.host_cores + local % cluster.host_cores


def core_shared(a, cluster: ClusterSpec, world_size: int, share: float) -> np.ndarray:
    """Local times ``a`` (``[T]``, or ``[T, P]`` per rank) as ranks that share cores take them.

    ``share`` × ``a`` (:func:`vgcsim.core.cluster.host_share`), except where the ranks' times
    of a step differ and ``host_sharing = "fullest-core"`` with one thread per rank: the ranks
    of one core take turns on it, so every one of them is done when their summed time is, and a
    rank whose core holds n ranks takes f/n × that sum (f = ``share``: the sum itself on the
    fullest cores, f × the mean on the others, as the factor charges equal ranks). With equal
    times this is ``share`` × ``a`` exactly, which is what is returned for such steps; with
    unequal ones a slow rank's core-mates wait for it, and the slowest core — not f times the
    slowest rank — sets the pace. Ranks on cores (:func:`core_cohorts`)."""
    a = np.asarray(a, dtype=np.float64)
    out = a * share
    if (
        a.ndim != 2
        or cluster.host_sharing != "fullest-core"
        or cluster.threads_per_rank != 1
        or a.shape[1] != int(world_size)
    ):
        return out
    uneven = np.ptp(a, axis=1) > 0
    if not uneven.any():
        return out
    core = core_cohorts(cluster, world_size)
    _, inverse, counts = np.unique(core, return_inverse=True, return_counts=True)
    sums = np.zeros((a.shape[0], counts.size))
    np.add.at(sums, (slice(None), inverse), a)
    cored = sums[:, inverse] * (share / counts[inverse])[None, :]
    out[uneven] = cored[uneven]
    return out


def _per_rank(a: np.ndarray, shape: tuple[int, int]) -> np.ndarray:
    """``[T]`` (the same on every rank) or ``[T, P]`` → ``[T, P]``."""
    a = np.asarray(a, dtype=np.float64)
    return (a if a.ndim == 2 else np.broadcast_to(a[:, None], shape)).copy()


# -- the DDP hook's bounded exchange -------------------------------------------------------------

#: The header's ``source`` of traces the DDP hook writes (``vgcsim.traces.training.hook_trace``).
HOOK_SOURCE = "ddp_hook"


def is_hook_trace(trace: Trace) -> bool:
    """Whether the DDP hook wrote ``trace`` (header ``source = "ddp_hook"``)."""
    return trace.header.get("source") == HOOK_SOURCE


def default_allgatherv(trace: Trace) -> str:
    """The allgatherv algorithm predict and simulate price when none is asked for: the hook's
    own ``bounded`` exchange for traces it wrote, ``ring`` otherwise."""
    return "bounded" if is_hook_trace(trace) else "ring"


def resolve_collectives(options: _Options, trace: Trace) -> _Options:
    """``options`` with the trace's own exchange filled in: an empty ``allgatherv`` (the
    default) becomes :func:`default_allgatherv` of ``trace``; asked-for algorithms stay. The
    one place the default is resolved: predict, simulate, the commands, the API and sweeps
    all pass through it."""
    if options.allgatherv:
        return options
    return dataclasses.replace(options, allgatherv=(default_allgatherv(trace),))


@dataclass(frozen=True)
class BucketMessages:
    """Every bucket's message of every rank and step, as the hook builds it: ``4·(L + 1)``
    header bytes (``vgcsim.core.bounded.message_header_bytes``) plus the bytes of its L
    layers. ``buckets[k]`` is a tuple of layers; ``used[t, k]`` whether step t exchanged
    bucket k (DDP rebuilds its buckets after the first step); ``messages[t, r, k]`` the bytes
    (0 where unused)."""

    buckets: list[tuple[int, ...]]
    used: np.ndarray  # [T, K] bool
    messages: np.ndarray  # [T, P, K] int64
    header_bytes: np.ndarray  # [K] int64


def bucket_layouts(trace: Trace, bucket_bytes: float = DDP_BUCKET_BYTES) -> list[tuple[int, list]]:
    """``[(from_step, buckets), ...]``: the hook's bucket layouts (header ``hook.layouts``)
    for traces it wrote; otherwise one layout from step 0, DDP's greedy buckets of
    ``bucket_bytes`` (:func:`vgcsim.traces.buckets.bucket_layers`). Raises TraceError for a
    malformed ``hook`` header entry."""
    n_layers = len(trace.layers)
    if not is_hook_trace(trace):
        from vgcsim.traces.buckets import bucket_layers

        numel = [int(layer["numel"]) for layer in trace.layers]
        return [(0, bucket_layers(numel, bucket_bytes))]
    hook = trace.header.get("hook")
    try:
        layouts = [
            (int(x["from_step"]), [[int(i) for i in b] for b in x["buckets"]])
            for x in hook["layouts"]
        ]
    except (TypeError, KeyError, ValueError):
        raise TraceError(
            f"trace {trace.name}: header field hook.layouts must be a list of "
            "{from_step, buckets} entries (the DDP hook writes it)"
        ) from None
    for start, buckets in layouts:
        flat = [i for b in buckets for i in b]
        if not buckets or any(i < 0 or i >= n_layers for i in flat) or start < 0:
            raise TraceError(
                f"trace {trace.name}: header field hook.layouts names layers outside "
                f"0..{n_layers - 1} or an empty layout"
            )
    return layouts


def bucket_messages(
    trace: Trace, layer_bytes: np.ndarray, bucket_bytes: float = DDP_BUCKET_BYTES
) -> BucketMessages:
    """The hook's bucket messages from per-layer bytes ``[T, P, L]`` (``step_inputs(...,
    layers=True).layer_bytes``) and :func:`bucket_layouts`."""
    from vgcsim.core.bounded import message_header_bytes

    layouts = bucket_layouts(trace, bucket_bytes)
    steps = trace.steps["step"].to_numpy(dtype=np.int64)[: layer_bytes.shape[0]]
    keys: list[tuple[int, ...]] = []
    for _, buckets in layouts:
        for b in buckets:
            if tuple(b) not in keys:
                keys.append(tuple(b))
    n_t, n_p, _ = layer_bytes.shape
    used = np.zeros((n_t, len(keys)), dtype=bool)
    messages = np.zeros((n_t, n_p, len(keys)), dtype=np.int64)
    header = np.array([message_header_bytes(len(k)) for k in keys], dtype=np.int64)
    starts = [s for s, _ in layouts]
    which = np.searchsorted(starts, steps, side="right") - 1
    for li, (_, buckets) in enumerate(layouts):
        rows = np.flatnonzero(which == li)
        if rows.size == 0:
            continue
        for b in buckets:
            k = keys.index(tuple(b))
            used[rows, k] = True
            messages[rows, :, k] = header[k] + layer_bytes[rows][:, :, b].sum(axis=2)
    return BucketMessages(keys, used, messages, header)
