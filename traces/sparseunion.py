"""How the union of the workers' index sets grows with P: what a sparse allreduce carries.

A recording with a sparse compressor writes, per step and layer, the prefix unions
``U(g) = |I_0 ∪ … ∪ I_{g−1}|`` for g = 1 … W (payload column ``union_prefix``, in worker
g − 1's row). A sparse allreduce on P ranks sends at each stage the union of a group of
ranks (:func:`vgcsim.core.collectives.sparse_stages`), so it needs U(g) for g up to P.

The rule (per step and layer, n elements):

* g ≤ W: the recorded U(g) (ranks are exchangeable: any g workers' union is taken to be the
  first g's);
* g > W: a *hot + cold* model fitted to k̄ (the mean number of elements one worker sends) and
  U(W): H indices every worker sends (the large coordinates all top-k selections share) and,
  outside them, each worker picks each of the other n − H elements independently with
  probability q, so ``U(g) = H + (n − H)·(1 − (1 − q)^g)`` with ``H + (n − H)·q = k̄``. H is
  the one value in [0, k̄] with U(W) equal to the recorded one (U falls as H rises; found
  by bisection). When the recorded sets overlap less than independent picks would
  (U(W) > n·(1 − (1 − k̄/n)^W)), H = 0 and q = 1 − (1 − U(W)/n)^{1/W} (exact at W, and a
  union that grows at least as fast as independent picks beyond it).

Checked against recordings (``tests/traces/test_sparseunion.py``, docs/models.md): the rule
fitted on the first 2 or 4 workers of an 8-worker top-k recording predicts the recorded
U(4) and U(8).
"""

from __future__ import annotations

import numpy as np

from vgcsim.core.cluster import ClusterSpec
from vgcsim.core.collectives import SPARSE_ENTRY_BYTES, sparse_stages
from vgcsim.core.errors import TraceError
from vgcsim.traces.devicecost import sparse_result_time_s
from vgcsim.traces.reading import Trace

__all__ = [
    "UNION_COLUMN",
    "fit_hot_cold",
    "has_unions",
    "hot_cold_union",
    "sparse_stage_bytes_of_trace",
    "sparse_step_inputs",
    "union_curve",
    "unions_at",
]

UNION_COLUMN = "union_prefix"
_BISECTIONS = 60


def has_unions(trace: Trace) -> bool:
    """Whether the trace records the prefix unions (a sparse compressor's recording)."""
    return UNION_COLUMN in trace.payloads.columns


def union_curve(trace: Trace, step_index: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(U [T, L, W] prefix unions, sent [T, L, W])`` for the steps ``step_index``."""
    if not has_unions(trace):
        raise TraceError(
            f"trace {trace.name} records no {UNION_COLUMN} (record it again with a sparse "
            "compressor: topk, variance, strom, hybrid)"
        )
    p = trace.payloads
    pos = np.searchsorted(step_index, p["step"].to_numpy())
    shape = (len(step_index), len(trace.layers), int(trace.workers))
    idx = (pos, p["layer"].to_numpy(), p["worker"].to_numpy())
    union = np.zeros(shape)
    sent = np.zeros(shape)
    union[idx] = p[UNION_COLUMN].to_numpy(dtype=np.float64)
    sent[idx] = p["sent"].to_numpy(dtype=np.float64)
    return union, sent


def hot_cold_union(hot: np.ndarray, q: np.ndarray, numel: np.ndarray, g: float) -> np.ndarray:
    """``U(g) = H + (n − H)·(1 − (1 − q)^g)`` (the module docstring's model)."""
    return hot + (numel - hot) * (1.0 - (1.0 - q) ** g)


def fit_hot_cold(
    k_mean: np.ndarray, u_w: np.ndarray, numel: np.ndarray, workers: int
) -> tuple[np.ndarray, np.ndarray]:
    """``(H, q)`` of the hot + cold model with ``H + (n − H)·q = k̄`` and ``U(W) = u_w``
    (arrays of any one shape; see the module docstring for the rule and its fallback)."""
    k = np.asarray(k_mean, dtype=np.float64)
    u = np.asarray(u_w, dtype=np.float64)
    n = np.maximum(np.asarray(numel, dtype=np.float64), 1.0)
    w = float(workers)

    def union_w(h: np.ndarray) -> np.ndarray:
        cold = np.maximum(n - h, 1e-300)
        q = np.clip((k - h) / cold, 0.0, 1.0)
        return hot_cold_union(h, q, n, w)

    lo, hi = np.zeros_like(k), k.copy()
    for _ in range(_BISECTIONS):  # union_w falls from its independent value to k̄ as H → k̄
        mid = 0.5 * (lo + hi)
        above = union_w(mid) > u
        lo = np.where(above, mid, lo)
        hi = np.where(above, hi, mid)
    hot = 0.5 * (lo + hi)
    q = np.clip((k - hot) / np.maximum(n - hot, 1e-300), 0.0, 1.0)
    spread = u > union_w(np.zeros_like(k))  # less overlap than independent picks
    q_spread = 1.0 - (1.0 - np.clip(u / n, 0.0, 1.0)) ** (1.0 / w)
    return np.where(spread, 0.0, hot), np.where(spread, q_spread, q)


def unions_at(
    union: np.ndarray, sent: np.ndarray, numel: np.ndarray, groups: np.ndarray
) -> np.ndarray:
    """U(g) ``[T, L, G]`` for each g in ``groups`` from the recorded prefix unions
    ``union`` ``[T, L, W]`` and sends ``sent`` ``[T, L, W]``; ``numel`` ``[L]``."""
    w = union.shape[-1]
    n = np.broadcast_to(np.asarray(numel, dtype=np.float64)[None, :], union.shape[:2])
    hot, q = fit_hot_cold(sent.mean(axis=-1), union[..., -1], n, w)
    out = []
    for g in np.asarray(groups, dtype=np.int64):
        if g <= w:
            out.append(union[..., g - 1])
        else:
            out.append(np.minimum(hot_cold_union(hot, q, n, float(g)), n))
    return np.stack(out, axis=-1) if out else np.zeros((*union.shape[:2], 0))


def sparse_stage_bytes_of_trace(
    trace: Trace, world_size: int, step_index: np.ndarray
) -> tuple[np.ndarray, float]:
    """``(stage bytes [T, S], dense bytes)`` of a sparse allreduce of the trace's payloads on
    ``world_size`` ranks: stage s carries ``min(c·Σ_layers U(g_s), 4·Σ n)`` with g_s the
    stage's group (:func:`vgcsim.core.collectives.sparse_stages`) and c =
    ``SPARSE_ENTRY_BYTES`` (int32 index + fp32 value)."""
    groups, _ = sparse_stages(world_size)
    union, sent = union_curve(trace, step_index)
    numel = np.array([int(layer["numel"]) for layer in trace.layers], dtype=np.float64)
    dense = 4.0 * float(numel.sum())
    per_group = unions_at(union, sent, numel, groups).sum(axis=1)  # [T, G]
    return np.minimum(SPARSE_ENTRY_BYTES * per_group, dense), dense


def sparse_step_inputs(
    trace: Trace, step_index: np.ndarray, world_size: int, cluster: ClusterSpec
) -> tuple[np.ndarray, float, np.ndarray]:
    """``(stage bytes [T, S], dense bytes, result seconds [T, P])`` of a sparse allreduce of
    the trace's payloads on ``world_size`` ranks, for the closed forms and the simulator
    alike: the stages of :func:`sparse_stage_bytes_of_trace`, and applying the result (the
    union of all P sets, capped at the dense vector) on the cluster's device,
    :func:`vgcsim.traces.devicecost.sparse_result_time_s` (0 for P = 1)."""
    p = int(world_size)
    stage, dense = sparse_stage_bytes_of_trace(trace, p, step_index)
    shape = (len(step_index), p)
    if p == 1:
        return stage, dense, np.zeros(shape)
    union, sent = union_curve(trace, step_index)
    numel = np.array([int(layer["numel"]) for layer in trace.layers], dtype=np.float64)
    pairs = unions_at(union, sent, numel, np.array([p]))[..., 0].sum(axis=1)
    pairs = np.minimum(pairs, dense / SPARSE_ENTRY_BYTES)
    seconds = sparse_result_time_s(pairs, len(trace.layers), cluster.device)
    return stage, dense, np.broadcast_to(np.asarray(seconds)[:, None], shape).copy()
