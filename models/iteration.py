"""The training iteration: compute + variance + codec + communication + decode + optimizer,
with or without overlap.

A synchronous data-parallel step ends when the collective ends, and the collective cannot end
before the slowest rank has its payload ready, so per step the *critical rank* (largest
compute + variance + codec) sets the local part. After the collective every rank decodes and
accumulates what it received (``decode``: the P − 1 compressed payloads, or the cast back of a
bf16/fp16 allreduce), then takes its optimizer step; the slowest decoder sets the step.

Where decode sits: after the collective (per bucket: after that bucket's collective), not
overlapped with the transfer of later blocks inside one allgatherv, because the allgatherv
implementations priced here (gloo, NCCL, MPI through ``torch.distributed``) return the
received blocks only when the whole collective has ended. A per-block pipelined decoder could
hide all but the last block's decode; that bound is not modelled. Decode runs on the same
device as the backward pass, so it starts no earlier than the rank's local work ends.

Overlap modes (:data:`vgcsim.core.options.OVERLAPS`), with L = compute + variance + codec of the critical
rank, d the largest rank's decode and o the optimizer step:

``none``
    ``step = L + comm + d + o``.
``full``
    optimistic bound: communication starts with the backward pass and hides behind it,
    ``step = f·compute + max((1−f)·compute + variance + codec, comm) + d + o``
    (f = forward fraction).
``bucketed``
    buckets of layers as backward proceeds (PyTorch DDP style): bucket k is ready when the
    backward pass (and its share of variance + codec work) has covered its layers; its
    collective starts when it is ready and the previous bucket's collective has finished;
    its decode (its share of d) when the collective has ended, the previous decode has ended
    and the local work is done; ``step = end of the last decode + o``.
``per_layer``
    ``bucketed`` with every layer its own bucket (one collective per parameter tensor).

The names match the simulator's overlap modes (plus the closed-form-only ``full`` bound).
Buckets and the backward share at which each is ready come from :mod:`vgcsim.traces.buckets`,
the rule the simulator uses too.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from vgcsim.core.collectives import burst_credit_s
from vgcsim.core.errors import ConfigError, unknown_name
from vgcsim.core.options import OVERLAPS
from vgcsim.traces.buckets import FORWARD_FRACTION

__all__ = [
    "StepBreakdown",
    "bucketed_step_time_s",
    "critical_path",
    "iteration_time_s",
    "with_burst",
]


@dataclass(frozen=True)
class StepBreakdown:
    """Per-step times of the critical rank ``[T]`` (seconds)."""

    compute_s: np.ndarray
    variance_s: np.ndarray
    codec_s: np.ndarray
    comm_s: np.ndarray
    step_s: np.ndarray
    decode_s: np.ndarray | None = None
    optimizer_s: np.ndarray | None = None


def with_burst(
    bd: StepBreakdown, burst_bytes: float, bandwidth_Bps: float, wire_s: ArrayLike | None = None
) -> StepBreakdown:
    """``bd`` with a token bucket's credit taken off its exchange and its step.

    Formula: ``comm' = comm − credit``, ``step' = step − credit`` with ``credit =
    min(b / B, step − comm, comm, wire)`` (:func:`vgcsim.core.collectives.burst_credit_s`:
    the bucket refills while the link idles in the step's local phases; ``wire_s``, the
    exchange priced with the link's bandwidth alone, is the part tokens can shorten — its
    start-up, per-call and host terms are not). ``bd`` itself where b = 0.
    """
    if burst_bytes <= 0:
        return bd
    credit = burst_credit_s(bd.comm_s, bd.step_s, burst_bytes, bandwidth_Bps, wire_s)
    return dataclasses.replace(bd, comm_s=bd.comm_s - credit, step_s=bd.step_s - credit)


def _as_2d(x: ArrayLike, name: str) -> np.ndarray:
    a = np.asarray(x, dtype=np.float64)
    if a.ndim == 1:
        a = a[:, None]
    if a.ndim != 2:
        raise ConfigError(f"{name} must be [steps, ranks], got shape {a.shape}")
    return a


def critical_path(
    compute_s: ArrayLike, variance_s: ArrayLike, codec_s: ArrayLike
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Compute, variance and codec seconds ``[T]`` of the rank with the largest sum per step."""
    c, v, k = (
        _as_2d(x, n)
        for x, n in ((compute_s, "compute_s"), (variance_s, "variance_s"), (codec_s, "codec_s"))
    )
    c, v, k = np.broadcast_arrays(c, v, k)
    crit = np.argmax(c + v + k, axis=1)[:, None]
    pick = lambda a: np.take_along_axis(a, crit, axis=1)[:, 0]  # noqa: E731
    return pick(c), pick(v), pick(k)


def _after(x: ArrayLike | None, n: int, name: str) -> np.ndarray:
    """Decode ``[T, P]`` → the largest rank's ``[T]``; optimizer ``[T]`` (or scalar) → ``[T]``."""
    if x is None:
        return np.zeros(n)
    a = np.asarray(x, dtype=np.float64)
    if a.ndim == 2:
        a = a.max(axis=1)
    a = np.broadcast_to(a, (n,)).astype(np.float64)
    if np.any(~np.isfinite(a)) or np.any(a < 0):
        raise ConfigError(f"{name} must be finite and >= 0")
    return a


def iteration_time_s(
    compute_s: ArrayLike,
    variance_s: ArrayLike,
    codec_s: ArrayLike,
    comm_s: ArrayLike,
    *,
    decode_s: ArrayLike | None = None,
    optimizer_s: ArrayLike | None = None,
    overlap: str = "none",
    forward_fraction: float = FORWARD_FRACTION,
) -> StepBreakdown:
    """Step time per step from per-rank local times ``[T, P]`` and the collective's ``[T]``.

    Formula: ``none``: ``T = c + v + k + comm + d + o``; ``full``: ``T = f·c + max((1−f)·c
    + v + k, comm) + d + o``, with (c, v, k) the critical rank's compute, variance and codec
    seconds, d the largest rank's decode ``[T, P]`` (after the collective) and o the
    optimizer step ``[T]``.

    Assumptions: synchronous SGD, one collective per step; ``full`` is an optimistic bound
    (communication could start with the backward pass). For ``per_layer`` / ``bucketed`` use
    :func:`bucketed_step_time_s`.

    Source: the iteration model of Tsuzuku, Imachi & Akiba, "Variance-based Gradient
    Compression for Efficient Distributed Deep Learning", ICLR workshop 2018 (computation +
    communication cost, §5), and the wait-free backprop overlap of H. Zhang et al., "Poseidon",
    USENIX ATC 2017.
    """
    c, v, k = critical_path(compute_s, variance_s, codec_s)
    comm = np.broadcast_to(np.asarray(comm_s, dtype=np.float64), c.shape)
    d = _after(decode_s, len(c), "decode_s")
    o = _after(optimizer_s, len(c), "optimizer_s")
    if overlap == "none":
        step = c + v + k + comm
    elif overlap == "full":
        step = forward_fraction * c + np.maximum((1 - forward_fraction) * c + v + k, comm)
    elif overlap in ("per_layer", "bucketed"):
        raise ConfigError(f"overlap {overlap!r} needs per-bucket times: use bucketed_step_time_s")
    else:
        raise unknown_name("overlap mode", overlap, OVERLAPS)
    return StepBreakdown(c, v, k, comm.copy(), step + d + o, d, o)


def bucketed_step_time_s(
    compute_s: ArrayLike,
    variance_s: ArrayLike,
    codec_s: ArrayLike,
    bucket_comm_s: ArrayLike,
    backward_share: ArrayLike,
    *,
    decode_s: ArrayLike | None = None,
    optimizer_s: ArrayLike | None = None,
    forward_fraction: float = FORWARD_FRACTION,
) -> StepBreakdown:
    """Step time with per-bucket collectives overlapping the backward pass.

    Formula, for the critical rank (c, v, k) and buckets k = 1..K in backward order with
    cumulative backward share s_k (s_0 = 0) and collective time t_k:
    ``ready_k = f·c + s_k·((1−f)·c + v + k)``, ``end_k = max(ready_k, end_{k−1}) + t_k``,
    decode ``dec_0 = c + v + k``, ``dec_k = max(end_k, dec_{k−1}) + (s_k − s_{k−1})·d``,
    ``T = dec_K + o`` (with d = 0 this is ``max(c + v + k, end_K) + o``). ``comm_s`` reports
    Σ t_k (not only the exposed part).

    Assumptions: variance and codec work is spread over backward like the gradient (each
    layer is compressed as soon as it is ready); one collective at a time (a single
    communication stream); backward time per layer ∝ parameter count.

    Source: bucketed gradient reduction of S. Li et al., "PyTorch Distributed: Experiences on
    Accelerating Data Parallel Training", VLDB 13(12), 2020; the layer-wise timeline of
    Shi, Chu & Li, "MG-WFBP", INFOCOM 2019.
    """
    c, v, k = critical_path(compute_s, variance_s, codec_s)
    t = np.asarray(bucket_comm_s, dtype=np.float64)
    if t.ndim == 1:
        t = np.broadcast_to(t[None, :], (len(c), len(t)))
    share = np.asarray(backward_share, dtype=np.float64)
    if t.shape != (len(c), len(share)):
        raise ConfigError(f"bucket_comm_s must be [steps, buckets], got {t.shape}")
    d = _after(decode_s, len(c), "decode_s")
    o = _after(optimizer_s, len(c), "optimizer_s")
    forward = forward_fraction * c
    after = (1 - forward_fraction) * c + v + k
    end = np.zeros_like(c)
    dec = c + v + k
    prev = 0.0
    for b in range(len(share)):
        ready = forward + share[b] * after
        end = np.maximum(ready, end) + t[:, b]
        dec = np.maximum(end, dec) + (share[b] - prev) * d
        prev = share[b]
    return StepBreakdown(c, v, k, t.sum(axis=1), dec + o, d, o)
