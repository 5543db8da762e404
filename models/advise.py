"""What to run: the methods of several traces ranked per cluster and P, and the best
per-bucket mix of dense and compressed buckets.

**Methods** (ranked by :mod:`vgcsim.reports.advice`). Each trace is predicted (:func:`vgcsim.models.predict.predict_trace`, with the
step's overlap, ``bucketed`` by default); its mean rows are the methods: dense fp32 / bf16 /
fp16 allreduce, the trace's compressor over its collective (allgatherv; PowerSGD's
allreduces; the sparse allreduce where the trace records unions, always without overlap
buckets: one collective per step). Per (cluster, P) they are
ranked by predicted step time and, where the traces have evaluations and a target accuracy
is given, by time to that accuracy: (first evaluated step whose test accuracy reaches the
target + 1) × step time (a method whose trace never reaches it: infinite). Dense rows take
the accuracy of a dense trace among the inputs, when there is one.

**Per-bucket mix** (after Espresso, Wang et al., EuroSys'23, which chooses per-tensor
compression strategies with a timeline model): buckets as DDP forms them
(:mod:`vgcsim.traces.buckets`); each bucket either dense (fp32 allreduce, no local work) or
compressed (the trace's collective for that bucket's payload, its element share of the
compressor's local work before and of the decode after). The step, for the critical rank
(compute c, forward share f, bucket k ready after the backward share s_k; x_j, y_j, t_j the
local work, decode and collective of bucket j in its chosen form; o the optimizer step)::

    ready_k = f·c + s_k·(1 − f)·c + Σ_{j≤k} x_j      end_k = max(ready_k, end_{k−1}) + t_k
    dec_0 = c + Σ_j x_j                               dec_k = max(end_k, dec_{k−1}) + y_k
    T = dec_K + o

— :func:`vgcsim.models.iteration.bucketed_step_time_s` when every bucket is compressed (or
dense), evaluated on the step means. :func:`choose_mix` finds the mask minimising T exactly by
dynamic programming over the buckets: with X, Y the local work and decode so far, E the last
collective's end and Z = max_j (end_j − Y_{j−1}), ``T = Y_K + max(c + X_K, Z_K) + o`` is
non-decreasing in each of (X, Y, E, Z), so a partial mix dominated in all four is dropped
(a Pareto frontier per bucket). :func:`brute_force_mix` tries every mask (tests compare them).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np
import pandas as pd

from vgcsim.core.cluster import ClusterSpec
from vgcsim.core.errors import ConfigError
from vgcsim.models.collectives import collective_key, get_collective
from vgcsim.models.iteration import FORWARD_FRACTION
from vgcsim.models.predict import (
    PredictOptions,
    allgatherv_time_s,
    lowrank_time_s,
    predict_trace,
)
from vgcsim.traces.buckets import DDP_BUCKET_BYTES, bucket_backward_share, layer_groups
from vgcsim.traces.inputs import step_inputs
from vgcsim.traces.labels import method_label
from vgcsim.traces.sparseunion import has_unions

__all__ = [
    "MethodPredictions",
    "MixInputs",
    "brute_force_mix",
    "choose_mix",
    "mix_inputs",
    "mix_step_time_s",
    "predict_methods",
]

#: most buckets brute force is run for (2^12 masks)
BRUTE_FORCE_MAX_BUCKETS = 12


@dataclass(frozen=True)
class MixInputs:
    """The step means a per-bucket mix is chosen on (seconds; arrays over K buckets in
    backward order)."""

    compute_s: float
    optimizer_s: float
    share: np.ndarray  # [K] cumulative backward share when bucket k is ready
    dense_comm_s: np.ndarray  # [K] fp32 allreduce of the bucket
    comp_comm_s: np.ndarray  # [K] the trace's collective for the bucket's payload
    comp_local_s: np.ndarray  # [K] variance + codec share of the bucket
    comp_decode_s: np.ndarray  # [K] decode share of the bucket
    forward_fraction: float = FORWARD_FRACTION

    @property
    def buckets(self) -> int:
        return len(self.share)


def mix_step_time_s(mi: MixInputs, compressed: Sequence[bool]) -> float:
    """Step seconds of one mask (``compressed[k]``: bucket k compressed); the module
    docstring's recursion, run forward."""
    mask = np.asarray(compressed, dtype=bool)
    if mask.shape != (mi.buckets,):
        raise ConfigError(f"a mix needs {mi.buckets} bucket choices, got {mask.shape}")
    c, f = mi.compute_s, mi.forward_fraction
    x = np.where(mask, mi.comp_local_s, 0.0)
    y = np.where(mask, mi.comp_decode_s, 0.0)
    t = np.where(mask, mi.comp_comm_s, mi.dense_comm_s)
    end, local = 0.0, 0.0
    ends = []
    for k in range(mi.buckets):
        local += x[k]
        ready = f * c + mi.share[k] * (1 - f) * c + local
        end = max(ready, end) + t[k]
        ends.append(end)
    dec = c + float(x.sum())
    for k in range(mi.buckets):
        dec = max(ends[k], dec) + y[k]
    return dec + mi.optimizer_s


def brute_force_mix(mi: MixInputs) -> tuple[tuple[bool, ...], float]:
    """The best of all 2^K masks by :func:`mix_step_time_s` (first in mask order on ties)."""
    if mi.buckets > BRUTE_FORCE_MAX_BUCKETS:
        raise ConfigError(f"brute force over {mi.buckets} buckets is too large")
    best: tuple[tuple[bool, ...], float] | None = None
    for mask in itertools.product((False, True), repeat=mi.buckets):
        t = mix_step_time_s(mi, mask)
        if best is None or t < best[1]:
            best = (mask, t)
    assert best is not None
    return best


def choose_mix(mi: MixInputs) -> tuple[tuple[bool, ...], float]:
    """The mask with the shortest step, exactly, by the Pareto dynamic programme of the
    module docstring; returns (mask, step seconds)."""
    c, f = mi.compute_s, mi.forward_fraction
    # state: (X, Y, E, Z, mask)
    states: list[tuple[float, float, float, float, tuple[bool, ...]]] = [
        (0.0, 0.0, 0.0, -math.inf, ())
    ]
    for k in range(mi.buckets):
        nxt = []
        for X, Y, E, Z, mask in states:
            for comp in (False, True):
                x = mi.comp_local_s[k] if comp else 0.0
                y = mi.comp_decode_s[k] if comp else 0.0
                t = mi.comp_comm_s[k] if comp else mi.dense_comm_s[k]
                X2 = X + x
                ready = f * c + mi.share[k] * (1 - f) * c + X2
                E2 = max(ready, E) + t
                nxt.append((X2, Y + y, E2, max(Z, E2 - Y), (*mask, comp)))
        states = _pareto(nxt)
    finals = [(Y + max(c + X, Z) + mi.optimizer_s, mask) for X, Y, E, Z, mask in states]
    t, mask = min(finals, key=lambda item: item[0])
    return mask, float(t)


def _pareto(states: list) -> list:
    """The states no other state beats or ties in all four of (X, Y, E, Z)."""
    states = sorted(states, key=lambda s: s[:4])
    kept: list = []
    for s in states:
        if not any(all(k[i] <= s[i] for i in range(4)) for k in kept):
            kept.append(s)
    return kept


def mix_inputs(
    trace, cluster: ClusterSpec, world_size: int, *, bucket_bytes: float = DDP_BUCKET_BYTES
) -> MixInputs:
    """The step means of ``trace`` on ``cluster`` at P ranks that a mix is chosen on: per
    bucket the fp32 allreduce (ring) and the trace's collective (ring allgatherv with its
    size exchange, or PowerSGD's three ring allreduces), and the critical rank's local work."""
    numel = np.array([int(layer["numel"]) for layer in trace.layers], dtype=np.float64)
    groups = layer_groups(numel, "bucketed", bucket_bytes)
    share = np.asarray(bucket_backward_share(numel, groups), dtype=np.float64)
    frac = np.diff(share, prepend=0.0)
    p = int(world_size)
    si = step_inputs(trace, cluster, p, layers=groups)
    ar = collective_key("allreduce", "ring")
    kw = {"intra_link": cluster.intra_link, "gpus_per_node": cluster.gpus_per_node}
    bucket_dense = np.array([4.0 * numel[g].sum() for g in groups])
    dense = get_collective(ar).time_s(
        np.broadcast_to(bucket_dense[:, None], (len(groups), p)), cluster.link, **kw
    )
    if si.allreduce_bytes is not None:
        comp = lowrank_time_s(ar, si.allreduce_bytes, p, cluster).mean(axis=0)
    else:
        assert si.layer_bytes is not None
        ag = collective_key("allgatherv", "ring")
        comp = np.array(
            [
                allgatherv_time_s(ag, si.layer_bytes[:, :, k], cluster, size_exchange=True).mean()
                for k in range(len(groups))
            ]
        )
    if p == 1:
        dense, comp = np.zeros_like(dense), np.zeros_like(comp)
    rank = np.argmax((si.compute_s + si.variance_s + si.codec_s).mean(axis=0))
    local = float((si.variance_s + si.codec_s)[:, rank].mean())
    decode = float(si.decode().max(axis=1).mean()) if p > 1 else 0.0
    return MixInputs(
        compute_s=float(si.compute_s[:, rank].mean()),
        optimizer_s=float(si.optimizer().mean()),
        share=share,
        dense_comm_s=np.asarray(dense, dtype=np.float64),
        comp_comm_s=np.asarray(comp, dtype=np.float64),
        comp_local_s=local * frac,
        comp_decode_s=decode * frac,
    )


@dataclass(frozen=True)
class MethodPredictions:
    """What the advice is made of: the mean predicted rows of every trace on every cluster
    (``results``), the best per-bucket mix of each compressed trace per cluster and P
    (``mixes``: buckets, compressed_buckets, mask, step_s, best_single_s), each trace's
    method label, evaluations, and the dense trace's name (None without one)."""

    results: pd.DataFrame
    mixes: pd.DataFrame
    labels: dict[str, str]
    evals: dict[str, pd.DataFrame]
    dense_trace: str | None


def model_and_data(trace) -> tuple[list, str | None]:
    """What makes two traces one job's: the layers' shapes and the dataset's name (advise
    ranks methods of one job; validate calls a winner between two of them)."""
    return [layer["shape"] for layer in trace.layers], (trace.header.get("dataset") or {}).get(
        "name"
    )


def predict_methods(
    traces: Sequence,
    clusters: Sequence[ClusterSpec],
    world_sizes: Sequence[int],
    *,
    overlap: str = "bucketed",
    bucket_bytes: float = DDP_BUCKET_BYTES,
) -> MethodPredictions:
    """Predict every method of ``traces`` on each cluster for each P and choose the best
    per-bucket mix of each compressed trace (see the module docstring); the ranking and
    the recommendation are :mod:`vgcsim.reports.advice`'s."""
    if not traces:
        raise ConfigError("advise needs at least one trace")
    shapes = [model_and_data(t) for t in traces]
    if any(s != shapes[0] for s in shapes[1:]):
        raise ConfigError(
            "advise compares methods on one model and dataset: these traces' layers or datasets "
            "differ (" + ", ".join(t.name for t in traces) + ")"
        )
    labels = {
        t.name: method_label(t.compressor, t.header["compressor"].get("params")) for t in traces
    }
    if len(set(labels.values())) < len(labels):
        labels = {t.name: f"{labels[t.name]} [{t.name}]" for t in traces}
    evals = {t.name: t.evals for t in traces if t.evals is not None and len(t.evals)}
    dense_trace = next((t.name for t in traces if t.compressor == "dense"), None)
    opts = PredictOptions(
        world_sizes=tuple(int(p) for p in world_sizes), overlap=overlap, bucket_bytes=bucket_bytes
    )
    frames, mixes = [], []
    for cluster in clusters:
        for trace in traces:
            frames.append(predict_trace(trace, cluster, opts))
            if has_unions(trace) and overlap in ("bucketed", "per_layer"):
                # the sparse allreduce is one collective per step: priced without buckets
                flat = predict_trace(trace, cluster, replace(opts, overlap="none"))
                frames.append(flat[flat["collective"].str.startswith("sparse_allreduce/")])
            if trace.compressor == "dense":
                continue
            for p in opts.world_sizes:
                mi = mix_inputs(trace, cluster, p, bucket_bytes=bucket_bytes)
                mask, t = choose_mix(mi)
                single = min(
                    mix_step_time_s(mi, [False] * mi.buckets),
                    mix_step_time_s(mi, [True] * mi.buckets),
                )
                mixes.append(
                    {
                        "cluster": cluster.name,
                        "world_size": int(p),
                        "method": labels[trace.name],
                        "trace": trace.name,
                        "buckets": mi.buckets,
                        "compressed_buckets": int(sum(mask)),
                        "mask": "".join("C" if m else "D" for m in mask),
                        "step_s": t,
                        "best_single_s": single,
                    }
                )
    return MethodPredictions(
        pd.concat(frames, ignore_index=True), pd.DataFrame(mixes), labels, evals, dense_trace
    )
