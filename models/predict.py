"""Predicting step times of a recorded trace on a cluster with the closed-form models.

For each world size P the trace is extrapolated to P ranks (:func:`vgcsim.traces.inputs.step_inputs`,
shared with the simulator), then every requested allreduce algorithm prices the dense
baselines (fp32, and bf16 / fp16 with their casts: ``dense_encodings``) and every requested
allgatherv algorithm prices the compressed payloads, step by step, each allgatherv preceded
by its size exchange unless ``size_exchange`` is off (see
:func:`vgcsim.models.collectives.size_exchange_time_s`; the padded algorithm then drops its own). Rows follow ``RESULT_COLUMNS`` (``source="predicted"``,
``path="closed_form"``): one mean row per (P, method, collective) with ``step = -1`` and, with
``per_step``, one row per trace step as well. The dense baseline is always present.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from vgcsim.core.bounded import align_bytes, bounded_rounds
from vgcsim.core.cluster import ClusterSpec, shared_cluster, wire_cluster
from vgcsim.core.collectives import (
    ALLGATHERV_ALGORITHMS,
    ALLREDUCE_ALGORITHMS,
    idle_burst_bytes,
)
from vgcsim.core.config import to_dict
from vgcsim.core.errors import ConfigError, unknown_name
from vgcsim.core.options import PredictOptions
from vgcsim.core.results import RESULT_COLUMNS, finalize_results
from vgcsim.models.collectives import (
    allgatherv_bounded_history,
    allgatherv_padded_data,
    collective_key,
    get_collective,
    size_exchange_time_s,
)
from vgcsim.models.iteration import (
    StepBreakdown,
    bucketed_step_time_s,
    iteration_time_s,
    with_burst,
)
from vgcsim.traces.buckets import bucket_backward_share, layer_groups
from vgcsim.traces.inputs import (
    BucketMessages,
    StepInputs,
    bucket_messages,
    resolve_collectives,
    step_inputs,
)
from vgcsim.traces.sparseunion import has_unions, sparse_step_inputs

if TYPE_CHECKING:
    from vgcsim.traces.io import Trace

__all__ = [
    "PredictOptions",
    "bounded_comm_s",
    "bounded_wire_bytes",
    "frame_from_rows",
    "predict_trace",
    "rows_for",
]

log = logging.getLogger(__name__)

DENSE_ENCODING = "fp32"
_BUCKETED = ("per_layer", "bucketed")


def rows_for(
    breakdown: StepBreakdown,
    steps: np.ndarray,
    payload_max: np.ndarray | float,
    payload_mean: np.ndarray | float,
    *,
    per_step: bool,
    const: dict[str, Any],
) -> dict[str, np.ndarray]:
    """Result columns (RESULT_COLUMNS → arrays) for one (P, method, collective): the mean row
    (step −1), plus one row per step when ``per_step``. Relative columns are NaN, to be filled
    by :func:`finalize_results`. Concatenate with :func:`frame_from_rows`."""
    zeros = np.zeros_like(breakdown.compute_s)
    cols = {
        "compute_s": breakdown.compute_s,
        "optimizer_s": zeros if breakdown.optimizer_s is None else breakdown.optimizer_s,
        "variance_s": breakdown.variance_s,
        "codec_s": breakdown.codec_s,
        "decode_s": zeros if breakdown.decode_s is None else breakdown.decode_s,
        "comm_s": breakdown.comm_s,
        "step_s": breakdown.step_s,
        "payload_bytes_max": np.broadcast_to(
            np.asarray(payload_max, dtype=np.float64), steps.shape
        ),
        "payload_bytes_mean": np.broadcast_to(
            np.asarray(payload_mean, dtype=np.float64), steps.shape
        ),
    }
    out: dict[str, np.ndarray] = {}
    for k, v in cols.items():
        v = np.asarray(v, dtype=np.float64)
        out[k] = np.concatenate([[v.mean()], v]) if per_step else np.array([v.mean()])
    out["step"] = np.concatenate([[-1], steps]) if per_step else np.array([-1])
    n = len(out["step"])
    for k, v in const.items():
        out[k] = np.full(n, v, dtype=object if isinstance(v, str) else None)
    for k in ("speedup_vs_dense", "scaling_efficiency", "throughput_samples_per_s"):
        out[k] = np.full(n, np.nan)
    return out


def frame_from_rows(parts: Sequence[dict[str, np.ndarray]]) -> pd.DataFrame:
    """One result frame (RESULT_COLUMNS order) from :func:`rows_for` outputs."""
    return pd.DataFrame({c: np.concatenate([part[c] for part in parts]) for c in RESULT_COLUMNS})


def _dense_breakdown(
    si: StepInputs,
    key: str,
    cluster: ClusterSpec,
    opts: PredictOptions,
    buckets: Any,
    encoding: str = DENSE_ENCODING,
) -> StepBreakdown:
    """Dense allreduce of the gradient in ``encoding``: fp32, or a 2-byte float with a cast
    before (codec) and after (decode) the allreduce."""
    model = get_collective(key)
    p = si.world_size
    kw = {"intra_link": cluster.intra_link, "gpus_per_node": cluster.gpus_per_node}
    zeros = np.zeros_like(si.compute_s)
    payload, cast, uncast = si.dense_times(encoding)
    per_element = payload / (si.dense_bytes / 4) if si.dense_bytes else 0.0
    codec = np.full_like(si.compute_s, cast)
    decode = np.full_like(si.compute_s, uncast if p > 1 else 0.0)
    if p == 1:
        codec = zeros
    if opts.overlap in _BUCKETED:
        groups, share, numel = buckets
        bucket_bytes = np.array([per_element * numel[g].sum() for g in groups])
        per_bucket = model.time_s(
            np.broadcast_to(bucket_bytes[:, None], (len(groups), p)), cluster.link, **kw
        )
        return bucketed_step_time_s(
            si.compute_s,
            zeros,
            codec,
            per_bucket,
            share,
            decode_s=decode,
            optimizer_s=si.optimizer(),
        )
    comm = float(model.time_s(np.full((1, p), float(payload)), cluster.link, **kw)[0])
    return iteration_time_s(
        si.compute_s,
        zeros,
        codec,
        np.full(len(si.steps), comm),
        decode_s=decode,
        optimizer_s=si.optimizer(),
        overlap=opts.overlap,
    )


def allgatherv_time_s(
    key: str, sizes_bytes: np.ndarray, cluster: ClusterSpec, *, size_exchange: bool
) -> np.ndarray:
    """Seconds of one compressed allgatherv ``[...]`` for per-rank sizes ``[..., P]``: the data
    collective plus, when ``size_exchange``, its size exchange as a collective of its own
    (:func:`vgcsim.models.collectives.size_exchange_time_s`; the padded algorithm contains one, and
    without ``size_exchange`` only its data phase is priced)."""
    p = sizes_bytes.shape[-1]
    if key == "allgatherv/padded" and not size_exchange:
        return allgatherv_padded_data(sizes_bytes, cluster.link)
    if key == "allgatherv/bounded":  # its lengths travel in the message: no size exchange
        size_exchange = False
    model = get_collective(key)
    t = model.time_s(
        sizes_bytes,
        cluster.link,
        intra_link=cluster.intra_link,
        gpus_per_node=cluster.gpus_per_node,
    )
    if size_exchange and key != "allgatherv/padded":
        t = t + size_exchange_time_s(p, cluster.link)
    return t


def bounded_comm_s(bm: BucketMessages, cluster: ClusterSpec) -> np.ndarray:
    """Seconds of the hook's exchanges per step ``[T]``: Σ over the buckets a step exchanged
    of :func:`vgcsim.models.collectives.allgatherv_bounded`, each bucket's bound computed from
    its own earlier messages (first bound: its aligned header, as in the hook)."""
    out = np.zeros(bm.used.shape[0])
    for k in range(len(bm.buckets)):
        rows = np.flatnonzero(bm.used[:, k])
        if rows.size:
            out[rows] += allgatherv_bounded_history(
                bm.messages[rows, :, k],
                cluster.link,
                first_bound_bytes=align_bytes(int(bm.header_bytes[k])),
            )
    return out


def bounded_wire_bytes(bm: BucketMessages) -> np.ndarray:
    """Bytes one rank puts on the wire per step ``[T]`` in the hook's exchanges: Σ over the
    step's buckets of bound + fallback bytes (:func:`vgcsim.core.bounded.bounded_rounds`);
    the hook's own ``StepCommStats.wire_bytes``."""
    out = np.zeros(bm.used.shape[0], dtype=np.int64)
    for k in range(len(bm.buckets)):
        rows = np.flatnonzero(bm.used[:, k])
        if rows.size:
            bound, extra = bounded_rounds(
                bm.messages[rows, :, k], align_bytes(int(bm.header_bytes[k]))
            )
            out[rows] += bound + extra
    return out


def _compressed_breakdown(
    si: StepInputs, key: str, cluster: ClusterSpec, opts: PredictOptions, buckets: Any, trace=None
) -> StepBreakdown:
    xch = opts.size_exchange
    if key == "allgatherv/bounded":
        bm = bucket_messages(trace, si.layer_bytes, opts.bucket_bytes)
        return iteration_time_s(
            si.compute_s,
            si.variance_s,
            si.codec_s,
            bounded_comm_s(bm, cluster),
            decode_s=si.decode(),
            optimizer_s=si.optimizer(),
            overlap=opts.overlap,
        )
    if opts.overlap in _BUCKETED:
        _, share, _ = buckets
        lb = si.layer_bytes  # [T, P, K]
        per_bucket = np.stack(
            [
                allgatherv_time_s(key, lb[:, :, k], cluster, size_exchange=xch)
                for k in range(lb.shape[2])
            ],
            axis=1,
        )
        return bucketed_step_time_s(
            si.compute_s,
            si.variance_s,
            si.codec_s,
            per_bucket,
            share,
            decode_s=si.decode(),
            optimizer_s=si.optimizer(),
        )
    comm = allgatherv_time_s(key, si.rank_bytes, cluster, size_exchange=xch)
    return iteration_time_s(
        si.compute_s,
        si.variance_s,
        si.codec_s,
        comm,
        decode_s=si.decode(),
        optimizer_s=si.optimizer(),
        overlap=opts.overlap,
    )


def lowrank_time_s(
    key: str, allreduce_bytes: np.ndarray, world_size: int, cluster: ClusterSpec
) -> np.ndarray:
    """Seconds ``[T, K]`` of PowerSGD's exchange per step and group: the allreduces of the
    tensors sent plain, of P and of Q (``allreduce_bytes`` ``[T, K, 3]``, equal on every
    rank), one after the other as torch's ``powerSGD_hook`` chains them (it allreduces an
    empty buffer too, so each costs at least its latency terms; a warm-up step, sent plain,
    is priced the same way). Each is the allreduce model ``key`` at that size."""
    model = get_collective(key)
    b = np.asarray(allreduce_bytes, dtype=np.float64)
    sizes = np.broadcast_to(b[..., None], (*b.shape, world_size))
    t = model.time_s(
        sizes, cluster.link, intra_link=cluster.intra_link, gpus_per_node=cluster.gpus_per_node
    )
    return t.sum(axis=-1)


def _sparse_breakdown(
    si: StepInputs,
    key: str,
    stage: np.ndarray,
    dense: float,
    decode: np.ndarray,
    opts: PredictOptions,
    cluster: ClusterSpec,
) -> StepBreakdown:
    """The sparse allreduce ``key`` of the trace's union stages ``stage`` on ``cluster``."""
    p = si.world_size
    return iteration_time_s(
        si.compute_s,
        si.variance_s,
        si.codec_s,
        sparse_allreduce_time_s(key, stage, dense, p, cluster),
        decode_s=decode if p > 1 else np.zeros_like(decode),
        optimizer_s=si.optimizer(),
        overlap=opts.overlap,
    )


def _lowrank_breakdown(
    si: StepInputs, key: str, cluster: ClusterSpec, opts: PredictOptions, buckets: Any
) -> StepBreakdown:
    """PowerSGD: local work (codec) then its three allreduces per bucket."""
    assert si.allreduce_bytes is not None
    per_group = lowrank_time_s(key, si.allreduce_bytes, si.world_size, cluster)  # [T, K]
    if si.world_size == 1:
        per_group = np.zeros_like(per_group)
    if opts.overlap in _BUCKETED:
        _, share, _ = buckets
        return bucketed_step_time_s(
            si.compute_s,
            si.variance_s,
            si.codec_s,
            per_group,
            share,
            decode_s=si.decode(),
            optimizer_s=si.optimizer(),
        )
    return iteration_time_s(
        si.compute_s,
        si.variance_s,
        si.codec_s,
        per_group.sum(axis=1),
        decode_s=si.decode(),
        optimizer_s=si.optimizer(),
        overlap=opts.overlap,
    )


#: the encoding a sparse allreduce's rows name: 32-bit index + fp32 value per pair
SPARSE_ENCODING = "coo64"


def sparse_allreduce_time_s(
    key: str, stage: np.ndarray, dense: float, p: int, cluster: ClusterSpec
) -> np.ndarray:
    """Seconds ``[T]`` of the sparse allreduce ``key`` with per-stage messages ``stage``."""
    model = get_collective(key)
    return model.time_s(
        np.zeros((stage.shape[0], p)),
        cluster.link,
        intra_link=cluster.intra_link,
        gpus_per_node=cluster.gpus_per_node,
        stage_bytes=stage,
        dense_bytes=dense,
    )


def _burst_rows(
    breakdown: Callable[[ClusterSpec], StepBreakdown],
    cluster: ClusterSpec,
    si: StepInputs,
    sent_max: Any,
    sent_mean: Any,
    opts: PredictOptions,
    const: dict,
) -> dict[str, np.ndarray]:
    """Result rows of ``breakdown`` (a step's breakdown on a cluster) on ``cluster``, the
    host link's token-bucket credit taken off (:func:`vgcsim.models.iteration.with_burst`):
    the same breakdown on ``cluster`` with its link's bandwidth alone
    (:func:`vgcsim.core.clusterspec.wire_cluster`) gives the part of the exchange that the
    bucket's tokens can shorten."""
    bd = breakdown(cluster)
    link = cluster.link
    idle_bytes = idle_burst_bytes(link)
    if idle_bytes > 0:
        wire_s = breakdown(wire_cluster(cluster)).comm_s
        bd = with_burst(bd, idle_bytes, link.bandwidth_Bps, wire_s)
    return rows_for(bd, si.steps, sent_max, sent_mean, per_step=opts.per_step, const=const)


def predict_trace(trace: Trace, cluster: ClusterSpec, opts: PredictOptions) -> pd.DataFrame:
    """Closed-form predictions for ``trace`` on ``cluster`` (a finalized result frame)."""
    encoding = opts.encoding or trace.primary_encoding
    if encoding not in trace.encodings:
        raise unknown_name("encoding of this trace", encoding, trace.encodings)
    topology = str(cluster.topology.get("kind"))
    buckets = None
    layers: Any = False
    opts = resolve_collectives(opts, trace)  # empty allgatherv: the trace's own
    algorithms = opts.allgatherv
    if "bounded" in algorithms:
        if opts.overlap in _BUCKETED:
            raise ConfigError(
                "allgatherv/bounded prices the hook's own buckets; use --overlap none or full"
            )
        layers = True
    if opts.overlap in _BUCKETED:
        numel = np.array([int(layer["numel"]) for layer in trace.layers], dtype=np.float64)
        groups = layer_groups(numel, opts.overlap, opts.bucket_bytes)
        buckets = (groups, bucket_backward_share(numel, groups), numel)
        layers = groups
    base = {
        "source": "predicted",
        "path": "closed_form",
        "trace": trace.name,
        "cluster": cluster.name,
        "topology": topology,
        "compute_mode": cluster.compute,
    }
    frames = []
    # a sparse allreduce needs the recorded unions and one collective per step (no buckets)
    sparse = has_unions(trace) and opts.overlap not in _BUCKETED
    if has_unions(trace) and opts.overlap in _BUCKETED and opts.sparse_allreduce:
        log.info("sparse allreduce rows are priced without overlap buckets only; skipped")
    for p in sorted({int(x) for x in opts.world_sizes}):
        si = step_inputs(
            trace, cluster, p, encoding=encoding, rule=opts.rule, seed=opts.seed, layers=layers
        )
        cluster_p = shared_cluster(cluster, p)  # host processor sharing of CPU-time terms
        base["device"] = si.device
        for alg in opts.allreduce:
            key = collective_key("allreduce", alg)
            for enc in opts.dense_encodings:
                breakdown = partial(
                    _dense_breakdown, si, key, opts=opts, buckets=buckets, encoding=enc
                )
                const = {
                    **base,
                    "compressor": "dense",
                    "encoding": enc,
                    "world_size": p,
                    "method": "dense",
                    "collective": key,
                }
                payload = si.dense_times(enc)[0]
                frames.append(_burst_rows(breakdown, cluster_p, si, payload, payload, opts, const))
        pmax = si.rank_bytes.max(axis=1)
        pmean = si.rank_bytes.mean(axis=1)
        # PowerSGD's compressed exchange is allreduces; every other compressor's an allgatherv
        lowrank = si.allreduce_bytes is not None
        for alg in opts.allreduce if lowrank else algorithms:
            if lowrank:
                key = collective_key("allreduce", alg)
                breakdown = partial(_lowrank_breakdown, si, key, opts=opts, buckets=buckets)
            else:
                key = collective_key("allgatherv", alg)
                breakdown = partial(
                    _compressed_breakdown, si, key, opts=opts, buckets=buckets, trace=trace
                )
            const = {
                **base,
                "compressor": trace.compressor,
                "encoding": encoding,
                "world_size": p,
                "method": "compressed",
                "collective": key,
            }
            frames.append(_burst_rows(breakdown, cluster_p, si, pmax, pmean, opts, const))
        if sparse and opts.sparse_allreduce:
            stage, dense, decode = sparse_step_inputs(trace, si.steps, p, cluster)
            sent = stage.max(axis=1) if stage.shape[1] else np.zeros(len(si.steps))
            for alg in opts.sparse_allreduce:
                key = collective_key("sparse_allreduce", alg)
                breakdown = partial(_sparse_breakdown, si, key, stage, dense, decode, opts)
                const = {
                    **base,
                    "compressor": trace.compressor,
                    "encoding": SPARSE_ENCODING,
                    "world_size": p,
                    "method": "compressed",
                    "collective": key,
                }
                frames.append(_burst_rows(breakdown, cluster_p, si, sent, sent, opts, const))
        log.info("predicted P=%d (%d steps)", p, len(si.steps))
    df = frame_from_rows(frames)
    batch = trace.header.get("batch_size_per_worker")
    return finalize_results(df, batch_size_per_worker=int(batch) if batch else None)


def options_dict(opts: PredictOptions) -> dict[str, Any]:
    """The options as written into the result header: every field (lists for tuples), the
    ``extra`` entries merged in."""
    out = to_dict(opts)
    out["world_sizes"] = [int(p) for p in opts.world_sizes]
    return {**{k: v for k, v in out.items() if k != "extra"}, **opts.extra}


def parse_world_sizes(text: str) -> tuple[int, ...]:
    """World sizes in the one syntax every command reads (:mod:`vgcsim.core.worldsizes`)."""
    from vgcsim.core.worldsizes import parse_world_sizes as parse

    return parse(text)


def parse_algorithms(text: str, op: str) -> tuple[str, ...]:
    """``"ring,bruck"`` or ``"all"`` → algorithm names of ``op``, checked."""
    if text.strip() == "all":
        return tuple(
            a for a in (ALLREDUCE_ALGORITHMS if op == "allreduce" else ALLGATHERV_ALGORITHMS)
        )
    names = tuple(x.strip() for x in text.split(",") if x.strip())
    if not names:
        raise ConfigError(f"--{op}: give at least one algorithm or 'all'")
    for n in names:
        collective_key(op, n)
    return names


def summarize(df: pd.DataFrame, world_sizes: Sequence[int] | None = None) -> str:
    """A short text table of mean rows: P, method, encoding, collective, comm, decode, step
    time, speedup; headed by the compute mode and device the times come from."""
    m = df[df["step"] == -1]
    if world_sizes is not None:
        m = m[m["world_size"].isin(list(world_sizes))]
    modes = ", ".join(
        sorted({f"{a} on {b}" for a, b in zip(m.compute_mode, m.device, strict=True)})
    )
    lines = [
        f"local times: compute {modes}",
        f"{'P':>6}  {'method':<10}  {'encoding':<16}  {'collective':<26}  {'comm':>10}  "
        f"{'decode':>10}  {'step':>10}  {'speedup':>8}",
    ]
    for r in m.itertuples(index=False):
        lines.append(
            f"{r.world_size:>6}  {r.method:<10}  {r.encoding:<16}  {r.collective:<26}  "
            f"{r.comm_s * 1e3:>8.3f}ms  {r.decode_s * 1e3:>8.3f}ms  {r.step_s * 1e3:>8.3f}ms  "
            f"{r.speedup_vs_dense:>8.3f}"
        )
    return "\n".join(lines)


def sparse_crossover(df: pd.DataFrame) -> str | None:
    """One line saying at which P the sparse allreduce beats the fastest dense fp32
    allreduce (mean rows), and the P from which it stops beating it (the first P above the
    largest winning one); None without sparse rows."""
    m = df[df["step"] == -1]
    sp = m[m["collective"].str.startswith("sparse_allreduce/")]
    if sp.empty:
        return None
    dense = m[(m["method"] == "dense") & (m["encoding"] == "fp32")]
    best_dense = dense.groupby("world_size")["step_s"].min()
    best_sparse = sp.groupby("world_size")["step_s"].min()
    sizes = sorted(set(best_dense.index) & set(best_sparse.index) - {1})
    if not sizes:
        return None
    wins = [p for p in sizes if best_sparse[p] < best_dense[p]]
    if not wins:
        return f"sparse allreduce does not beat dense fp32 allreduce at any P given ({sizes[0]}..{sizes[-1]})"
    lo, hi = wins[0], wins[-1]
    losing = [p for p in sizes if p not in wins]
    line = f"sparse allreduce beats dense fp32 allreduce at P = {', '.join(map(str, wins))}"
    after = [p for p in losing if p > hi]
    if after:
        line += f"; it stops beating it from P = {after[0]}"
    else:
        line += f"; it still beats it at the largest P given ({sizes[-1]})"
    if any(p < lo for p in losing):
        line += f" (slower below P = {lo}: its local work outweighs the saving)"
    return line


def time_sources(trace: Trace, cluster: ClusterSpec) -> dict[str, str]:
    """Where each local time column comes from on ``cluster`` (measured or modelled, and on
    which device), for the result header's ``options.time_sources``."""
    si = step_inputs(trace, cluster, 1)
    return {"compute_mode": si.compute_mode, "device": si.device, **si.time_sources}
