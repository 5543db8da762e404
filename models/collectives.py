"""Closed-form cost models of the collectives in ``COLLECTIVE_KEYS`` (α-β-γ, numpy).

Every model is a function ``f(sizes_bytes, link, *, intra_link=None, gpus_per_node=1)``:
``sizes_bytes`` is an array ``[..., P]`` of per-rank payload sizes (bytes) — the last axis is
the ranks, any leading axes (steps, scenarios) are evaluated at once — and the result is an
array ``[...]`` of seconds. ``P = sizes_bytes.shape[-1]``; P = 1 costs 0.

Notation: α = latency_s, β = 1/bandwidth_Bps, γ = gamma_s_per_byte of the link; m_i = rank
i's payload; M = Σ m_i; m_max = max m_i; for allreduce n = m_max (allreduce needs equal
sizes; a smaller rank is padded); lg = log2; p' = 2^⌊lg P⌋ (largest power of two ≤ P).

Software cost (every formula below, P > 1): each collective call adds ``c`` =
``call_overhead_s`` of the link once (every rank pays it, in parallel, so once to the
time): ``calls·c``, ``calls`` = :func:`vgcsim.core.collectives.calls_per_collective` (2
for ``allgatherv/padded``: the size exchange and the data are two calls). c enters neither
the per-step start-up α (paid 2(P−1) times by a ring allreduce, P−1 times by a ring
allgather) nor any per-byte term. Source of the structure: LogP's per-message overhead o,
paid by the processor apart from the wire latency L (D. Culler et al., "LogP: towards a
realistic model of parallel computation", PPoPP 1993), here per call; 0 by default, fitted
by ``vgcsim calibrate`` (``vgcsim.models.linkfit``).

Start-up of a gather: every ``allgatherv/*`` model (and its parts: the size exchange, the
padded data, the bounded history) prices its steps with α = the link's
``allgather_latency_s`` where set (:func:`vgcsim.core.clusterspec.gather_link`), else
``latency_s``: a backend's all_gather step need not start up like its allreduce's (gloo's
ring allreduce keeps two segments in flight, its all_gather waits on each message).

Size segments: where the link has ``segments`` (SMPI-style piecewise pricing by message
size, :class:`vgcsim.core.cluster.LinkSpec`), every step's ``α + β·m`` term below is
priced as one message of its m bytes, ``msg(m)`` =
:func:`vgcsim.core.collectives.message_time_s`: e.g. the ring allreduce is ``c + 2(P−1)·
msg(n/P) + (P−1)/P·n·γ`` and Rabenseifner's halving and doubling ``2·Σ_k msg(n/2^k)``;
``allgatherv/direct``, whose P−1 messages share a rank's link, moves each message's
:func:`~vgcsim.core.collectives.wire_bytes`. Without segments the formulas are as written.

Common assumptions: every rank has its own full-duplex link into a non-blocking fabric (a
rank can send and receive at full rate at once; no contention between disjoint pairs);
rounds are lock-step (a round ends when its slowest transfer ends); no overlap of
reduction and transfer. Registry keys are the shared vocabulary with ``simulator``.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from vgcsim.core.bounded import BOUND_ALIGN, bounded_rounds
from vgcsim.core.cluster import ClusterSpec, LinkSpec, gather_link, shared_cluster
from vgcsim.core.collectives import (
    COLLECTIVE_KEYS,
    SIZE_HEADER_BYTES,
    message_time_s,
    padded_host_time_s,
    plain_allgather_host_time_s,
    prices_by_size,
    sparse_stage_bytes,
    sparse_stages,
    wire_bytes,
)
from vgcsim.core.errors import ConfigError, unknown_name

__all__ = [
    "COLLECTIVES",
    "CollectiveModel",
    "allgatherv_host_time_s",
    "allgatherv_bounded",
    "allgatherv_bounded_history",
    "allgatherv_padded_data",
    "size_exchange_time_s",
    "collective_key",
    "collective_time_s",
    "get_collective",
]

CostFn = Callable[..., np.ndarray]


def _on_gather_link(fn: Callable) -> Callable:
    """``fn(first, link, ...)`` priced on ``link`` as an allgather-type collective meets it
    (:func:`vgcsim.core.clusterspec.gather_link`: α = ``allgather_latency_s`` where set):
    every allgatherv model and its parts."""

    @functools.wraps(fn)
    def on_gather_link(first, link, *args, **kwargs):
        return fn(first, gather_link(link), *args, **kwargs)

    return on_gather_link


def _sizes(sizes_bytes: ArrayLike) -> np.ndarray:
    s = np.asarray(sizes_bytes, dtype=np.float64)
    if s.ndim == 0:
        raise ConfigError("collective sizes must have a rank axis (last axis = P ranks)")
    if s.shape[-1] < 1:
        raise ConfigError("collective needs at least one rank")
    if np.any(s < 0):
        raise ConfigError("payload sizes must be non-negative")
    return s


def _pow2_floor(p: int) -> int:
    return 1 << (p.bit_length() - 1)


def _ceil_lg(p: int) -> int:
    return (p - 1).bit_length()


def _zeros_like_steps(s: np.ndarray) -> np.ndarray:
    return np.zeros(s.shape[:-1], dtype=np.float64)


def _software(link: LinkSpec) -> tuple[LinkSpec, float]:
    """``(link, c)``: the link the formulas price steps with and its per-call cost."""
    return link, link.call_overhead_s


def _msg(link: LinkSpec, m):
    """One step's ``α + β·m`` (the same float operations as written in the formulas), or
    ``msg(m)`` of the link's size segments where it has them."""
    if prices_by_size(link):
        return message_time_s(link, m)
    return link.latency_s + m * link.beta_s_per_byte


def _plus_calls(t: np.ndarray, p: int, call_s: float, calls: int = 1):
    """``t + calls·c`` for P > 1 (a collective of one rank is free, as in every formula)."""
    if p <= 1 or call_s == 0.0:
        return t
    return t + calls * call_s


def _fold_unfold_s(n: np.ndarray, p: int, link: LinkSpec) -> np.ndarray | float:
    """The fold and unfold of a recursive allreduce for P not a power of two:
    ``[P ≠ p']·(2α + 2n·β + n·γ)`` (the r = P − p' extra ranks send their vector to a partner,
    which reduces it, and receive the result at the end)."""
    if _pow2_floor(p) == p:
        return 0.0
    if prices_by_size(link):
        return 2 * message_time_s(link, n) + n * link.gamma_s_per_byte
    return 2 * link.latency_s + 2 * n * link.beta_s_per_byte + n * link.gamma_s_per_byte


# ------------------------------------------------------------------------------------------
# allreduce
# ------------------------------------------------------------------------------------------


def _ring_allreduce(n: np.ndarray, p: int, link: LinkSpec) -> np.ndarray:
    if p == 1:
        return np.zeros_like(n)
    a, b, g = link.latency_s, link.beta_s_per_byte, link.gamma_s_per_byte
    frac = (p - 1) / p
    if prices_by_size(link):
        return 2 * (p - 1) * message_time_s(link, n / p) + frac * n * g
    return 2 * (p - 1) * a + 2 * frac * n * b + frac * n * g


def allreduce_ring(
    sizes_bytes: ArrayLike,
    link: LinkSpec,
    *,
    intra_link: LinkSpec | None = None,
    gpus_per_node: int = 1,
) -> np.ndarray:
    """Ring allreduce (reduce-scatter ring + allgather ring).

    Formula: ``T = c + 2(P−1)·α + 2·(P−1)/P·n·β + (P−1)/P·n·γ``.

    Assumptions: n divisible into P equal chunks; each of the 2(P−1) lock-step rounds moves
    n/P bytes per rank to its ring neighbour; bandwidth-optimal (Patarasuk & Yuan 2009).

    Source: P. Patarasuk and X. Yuan, "Bandwidth optimal all-reduce algorithms for clusters
    of workstations", JPDC 69(2), 2009; Thakur, Rabenseifner & Gropp, IJHPCA 2005, §4.
    """
    s = _sizes(sizes_bytes)
    link, call_s = _software(link)
    return _plus_calls(_ring_allreduce(s.max(axis=-1), s.shape[-1], link), s.shape[-1], call_s)


def allreduce_recursive_doubling(
    sizes_bytes: ArrayLike,
    link: LinkSpec,
    *,
    intra_link: LinkSpec | None = None,
    gpus_per_node: int = 1,
) -> np.ndarray:
    """Recursive-doubling allreduce: lg P rounds of full-vector pairwise exchange + reduce.

    Formula: ``T = c + lg p'·(α + n·β + n·γ) + [P ≠ p']·(2α + 2n·β + n·γ)``.

    Assumptions: for P not a power of two, the r = P − p' extra ranks first send their vector
    to a partner (α + nβ, reduced: nγ) and receive the result at the end (α + nβ).

    Source: Thakur, Rabenseifner & Gropp, "Optimization of Collective Communication
    Operations in MPICH", IJHPCA 19(1), 2005, §4.
    """
    s = _sizes(sizes_bytes)
    p = s.shape[-1]
    n = s.max(axis=-1)
    if p == 1:
        return np.zeros_like(n)
    link, call_s = _software(link)
    a, b, g = link.latency_s, link.beta_s_per_byte, link.gamma_s_per_byte
    if prices_by_size(link):
        t = math.log2(_pow2_floor(p)) * (message_time_s(link, n) + n * g)
        return _plus_calls(t + _fold_unfold_s(n, p, link), p, call_s)
    t = math.log2(_pow2_floor(p)) * (a + n * b + n * g) + _fold_unfold_s(n, p, link)
    return _plus_calls(t, p, call_s)


def allreduce_rabenseifner(
    sizes_bytes: ArrayLike,
    link: LinkSpec,
    *,
    intra_link: LinkSpec | None = None,
    gpus_per_node: int = 1,
) -> np.ndarray:
    """Rabenseifner allreduce: recursive-halving reduce-scatter + recursive-doubling allgather.

    Formula: ``T = c + 2·lg p'·α + 2·(p'−1)/p'·n·β + (p'−1)/p'·n·γ
    + [P ≠ p']·(2α + 2n·β + n·γ)``.

    Assumptions: as recursive doubling for the fold of non-power-of-two P; vector divisible
    into p' equal pieces.

    Source: R. Rabenseifner, "Optimization of collective reduction operations", ICCS 2004;
    Thakur, Rabenseifner & Gropp, IJHPCA 2005, §4.
    """
    s = _sizes(sizes_bytes)
    p = s.shape[-1]
    n = s.max(axis=-1)
    if p == 1:
        return np.zeros_like(n)
    link, call_s = _software(link)
    a, b, g = link.latency_s, link.beta_s_per_byte, link.gamma_s_per_byte
    pp = _pow2_floor(p)
    frac = (pp - 1) / pp
    if prices_by_size(link):  # halving then doubling: messages of n/2, n/4, ..., n/p' each way
        levels = int(math.log2(pp))
        t = frac * n * g + 2 * sum(message_time_s(link, n / 2**k) for k in range(1, levels + 1))
    else:
        t = 2 * math.log2(pp) * a + 2 * frac * n * b + frac * n * g
    return _plus_calls(t + _fold_unfold_s(n, p, link), p, call_s)


def allreduce_binomial_tree(
    sizes_bytes: ArrayLike,
    link: LinkSpec,
    *,
    intra_link: LinkSpec | None = None,
    gpus_per_node: int = 1,
) -> np.ndarray:
    """Binomial-tree reduce to rank 0 followed by binomial-tree broadcast.

    Formula: ``T = c + ⌈lg P⌉·(α + n·β + n·γ) + ⌈lg P⌉·(α + n·β)
    = c + ⌈lg P⌉·(2α + 2n·β + n·γ)``.

    Assumptions: whole vector sent at every tree level (no pipelining or segmentation).

    Source: Thakur, Rabenseifner & Gropp, IJHPCA 2005, §3–4 (binomial reduce and broadcast).
    """
    s = _sizes(sizes_bytes)
    p = s.shape[-1]
    n = s.max(axis=-1)
    link, call_s = _software(link)
    a, b, g = link.latency_s, link.beta_s_per_byte, link.gamma_s_per_byte
    if prices_by_size(link):
        return _plus_calls(_ceil_lg(p) * (2 * message_time_s(link, n) + n * g), p, call_s)
    return _plus_calls(_ceil_lg(p) * (2 * a + 2 * n * b + n * g), p, call_s)


def allreduce_hierarchical(
    sizes_bytes: ArrayLike,
    link: LinkSpec,
    *,
    intra_link: LinkSpec | None = None,
    gpus_per_node: int = 1,
) -> np.ndarray:
    """Hierarchical allreduce: intra-node reduce, inter-node ring allreduce, intra-node broadcast.

    Formula, with g = min(gpus_per_node, P) ranks per node, N = ⌈P/g⌉ nodes and (α', β', γ')
    of the intra-node link (the inter-node link if none is given):
    ``T = c + ⌈lg g⌉·(α' + nβ' + nγ') + T_ring(N, n; α, β, γ)
    + ⌈lg g⌉·(α' + nβ')`` (c of the inter-node link; one call).

    Assumptions: ranks fill nodes in order; one leader per node takes part in the inter-node
    ring with the node's full vector; binomial trees inside a node. g = 1 gives the flat ring.

    Source: hierarchical all-reduce as in X. Jia et al., "Highly Scalable Deep Learning
    Training System with Mixed-Precision: Training ImageNet in Four Minutes", 2018, and
    Horovod's hierarchical allreduce (A. Sergeev and M. Del Balso, 2018).
    """
    s = _sizes(sizes_bytes)
    p = s.shape[-1]
    n = s.max(axis=-1)
    g = max(1, min(int(gpus_per_node), p))
    nodes = -(-p // g)
    il, _ = _software(intra_link if intra_link is not None else link)
    link, call_s = _software(link)
    levels = _ceil_lg(g)
    if prices_by_size(il):
        intra = levels * (2 * message_time_s(il, n) + n * il.gamma_s_per_byte)
    else:
        intra = levels * (2 * il.latency_s + 2 * n * il.beta_s_per_byte + n * il.gamma_s_per_byte)
    return _plus_calls(intra + _ring_allreduce(n, nodes, link), p, call_s)


# ------------------------------------------------------------------------------------------
# allgatherv
# ------------------------------------------------------------------------------------------


@_on_gather_link
def allgatherv_ring(
    sizes_bytes: ArrayLike,
    link: LinkSpec,
    *,
    intra_link: LinkSpec | None = None,
    gpus_per_node: int = 1,
) -> np.ndarray:
    """Lock-step ring allgatherv: P−1 rounds, each rank forwards one block to its successor.

    Formula: ``T = c + Σ_{r=1}^{P−1} (α + β·max_i m_{(i−r+1) mod P})
    = c + (P−1)·(α + β·m_max)``.
    In every round each of the P blocks is in flight on exactly one link, so the largest
    block sets every round.

    Assumptions: lock-step rounds (a rank forwards a block only after the round ends); no
    segmentation or pipelining of large blocks.

    Source: Thakur, Rabenseifner & Gropp, IJHPCA 2005, §4 (ring allgather); for irregular
    sizes J. L. Träff et al., "A pipelined algorithm for large, irregular all-gather
    problems", IJHPCA 24(1), 2010.
    """
    s = _sizes(sizes_bytes)
    p = s.shape[-1]
    link, call_s = _software(link)
    t = (p - 1) * _msg(link, s.max(axis=-1))
    return _plus_calls(t, p, call_s)


def _rd_power_of_two(c: np.ndarray, link: LinkSpec) -> np.ndarray:
    """Σ over lg p rounds of α + β·(largest aligned group sum of size 2^k)."""
    t = _zeros_like_steps(c)
    g = c
    while g.shape[-1] > 1:
        t = t + _msg(link, g.max(axis=-1))
        g = g.reshape(*g.shape[:-1], g.shape[-1] // 2, 2).sum(axis=-1)
    return t


@_on_gather_link
def allgatherv_recursive_doubling(
    sizes_bytes: ArrayLike,
    link: LinkSpec,
    *,
    intra_link: LinkSpec | None = None,
    gpus_per_node: int = 1,
) -> np.ndarray:
    """Recursive-doubling allgatherv: in round k rank i swaps everything it holds with i XOR 2^k.

    Formula (P a power of two): ``T = c + Σ_{k=0}^{lg P−1} (α + β·max_G Σ_{i∈G} m_i)``
    over the aligned groups G of 2^k ranks (what a rank holds, and sends, in round k); the
    fold and unfold below are steps too (α each).
    P not a power of two: the r = P − p' extra ranks p'+j first send their block to rank j
    (α + β·max_j m_{p'+j}), the p' ranks run the above on the merged blocks, then rank j
    sends rank p'+j everything it lacks (α + β·max_j (M − m_{p'+j})).

    Assumptions: lock-step rounds; pairwise exchange is full duplex (a round costs the larger
    of send and receive of the slowest pair).

    Source: Thakur, Rabenseifner & Gropp, IJHPCA 2005, §4 (recursive doubling allgather and
    the fold for non-powers of two).
    """
    s = _sizes(sizes_bytes)
    p = s.shape[-1]
    pp = _pow2_floor(p)
    link, call_s = _software(link)
    if pp == p:
        return _plus_calls(_rd_power_of_two(s, link), p, call_s)
    r = p - pp
    extra = s[..., pp:]
    merged = s[..., :pp].copy()
    merged[..., :r] += extra
    total = s.sum(axis=-1)
    fold = _msg(link, extra.max(axis=-1))
    unfold = _msg(link, (total[..., None] - extra).max(axis=-1))
    return _plus_calls(fold + _rd_power_of_two(merged, link) + unfold, p, call_s)


@_on_gather_link
def allgatherv_bruck(
    sizes_bytes: ArrayLike,
    link: LinkSpec,
    *,
    intra_link: LinkSpec | None = None,
    gpus_per_node: int = 1,
) -> np.ndarray:
    """Bruck allgatherv: ⌈lg P⌉ rounds; in round k rank i sends rank i−2^k the s_k blocks
    i, i+1, …, i+s_k−1 (mod P) it holds, s_k = min(2^k, P − 2^k).

    Formula: ``T = c + Σ_{k=0}^{⌈lg P⌉−1} (α + β·max_i Σ_{j=0}^{s_k−1} m_{(i+j) mod P})``.

    Assumptions: lock-step rounds; the final local rotation is free; works for any P.

    Source: J. Bruck, C.-T. Ho, S. Kipnis, E. Upfal and D. Weathersby, "Efficient algorithms
    for all-to-all communications in multiport message-passing systems", IEEE TPDS 8(11), 1997.
    """
    s = _sizes(sizes_bytes)
    p = s.shape[-1]
    t = _zeros_like_steps(s)
    if p == 1:
        return t
    link, call_s = _software(link)
    doubled = np.concatenate([s, s], axis=-1)
    cs = np.concatenate([np.zeros((*s.shape[:-1], 1)), np.cumsum(doubled, axis=-1)], axis=-1)
    k = 1
    while k < p:
        w = min(k, p - k)
        window = cs[..., w : w + p] - cs[..., :p]
        t = t + _msg(link, window.max(axis=-1))
        k *= 2
    return _plus_calls(t, p, call_s)


@_on_gather_link
def allgatherv_direct(
    sizes_bytes: ArrayLike,
    link: LinkSpec,
    *,
    intra_link: LinkSpec | None = None,
    gpus_per_node: int = 1,
) -> np.ndarray:
    """Direct allgatherv: every rank sends its block to all others at once.

    Formula: ``T = c + α + β·max_i max((P−1)·m_i, M − m_i)`` (one step) — rank i's link must carry
    (P−1)·m_i out and M − m_i in; the busiest direction of the busiest rank sets the time.

    Assumptions: fair sharing of each rank's link among its concurrent flows, a non-blocking
    fabric, and one α for all P−1 concurrent messages (their start-ups overlap).

    Source: the fair-share bound on a non-blocking switch, cf. Träff et al., IJHPCA 2010,
    and Thakur, Rabenseifner & Gropp, IJHPCA 2005 (α-β model).
    """
    s = _sizes(sizes_bytes)
    p = s.shape[-1]
    if p == 1:
        return _zeros_like_steps(s)
    w = wire_bytes(link, s)  # s itself without size segments
    total = w.sum(axis=-1, keepdims=True)
    busiest = np.maximum((p - 1) * w, total - w).max(axis=-1)
    link, call_s = _software(link)
    return _plus_calls(link.latency_s + busiest * link.beta_s_per_byte, p, call_s)


@_on_gather_link
def size_exchange_time_s(world_size: int, link: LinkSpec) -> float:
    """The allgatherv size exchange, priced as its own small collective: a ring allgather of one
    int64 (:data:`SIZE_HEADER_BYTES`) per rank, run before the data collective.

    Formula: ``T = c + (P−1)·(α + 8β)`` (0 for P = 1; one call of its own).

    Assumptions: one length per rank per call (an implementation sending one length per
    layer, as ``vgcsim.traces.training.distributed_allgatherv`` does, moves 8 B × layers instead);
    the ring allgather of gloo and NCCL; every round pays the link's α. Implementations that
    know the sizes in advance skip it (``size_exchange = false`` in predict and simulate).

    Source: the two-collective allgatherv of ``torch.distributed`` users (an ``all_gather``
    of sizes, then of the data; gloo's ``allgather`` rejects uneven tensors) and MPI_Allgatherv,
    whose receive counts every rank must know before the call (MPI 4.0 standard, §6.7);
    ring allgather cost of Thakur, Rabenseifner & Gropp, IJHPCA 2005, §4.
    """
    p = int(world_size)
    if p < 1:
        raise ConfigError(f"world size must be >= 1, got {world_size}")
    link, call_s = _software(link)
    return _plus_calls((p - 1) * _msg(link, SIZE_HEADER_BYTES), p, call_s)


def allgatherv_host_time_s(sizes_bytes: ArrayLike, link: LinkSpec) -> np.ndarray:
    """Host time of the padded allgatherv's implementation: ``T_host = h + δ·(s·P·m_max +
    (1 − s)·Σ_r m_r)``, h = ``link.allgatherv_host_s`` (its fixed host time per allgatherv),
    δ = ``link.allgatherv_host_s_per_byte``, or δ(P·m_max) from the link's
    ``allgatherv_host_s_per_byte_table`` where it has one (a step function of the gathered
    buffer's size, ``vgcsim.core.collectives.host_s_per_byte_at``), s =
    ``link.allgatherv_host_padded_share``; 0 for P = 1.

    Assumptions: the host work copies each rank's gathered buffer, part of it at the P blocks
    padded to m_max (the backend's gathered buffer) and part at their real lengths (vgcsim's
    copy out into per-rank segments, ``vgcsim.traces.training.distributed_allgatherv``), s
    the first part's share (``vgcsim.core.collectives.padded_host_time_s``, where the rule
    and its checks are); it runs on every rank at once and adds to the ring's time (no
    overlap with the transfers).

    Source: δ is measured, not derived: ``vgcsim calibrate`` fits it as the slope of the
    measured allgatherv time beyond its α-β ring cost against P·m
    (``vgcsim.models.linkfit``), as γ is the slope of allreduce's excess (the α-β-γ model of
    Thakur, Rabenseifner & Gropp, IJHPCA 2005, with a per-byte host term of the same form).
    """
    s = _sizes(sizes_bytes)
    return padded_host_time_s(
        s.shape[-1],
        s.max(axis=-1),
        link.allgatherv_host_s_per_byte,
        link.allgatherv_host_s_per_byte_table,
        copied_bytes=s.sum(axis=-1),
        padded_share=link.allgatherv_host_padded_share,
        fixed_s=link.allgatherv_host_s,
    )


@_on_gather_link
def allgatherv_padded_data(sizes_bytes: ArrayLike, link: LinkSpec) -> np.ndarray:
    """The data phase of the padded allgatherv alone: a ring allgather of every block padded to
    the largest one and the implementation's host copies,
    ``T = c + (P−1)·(α + β·m_max) + h + δ·(s·P·m_max + (1 − s)·Σ m)`` (sizes known in
    advance; one call; :func:`allgatherv_host_time_s`)."""
    s = _sizes(sizes_bytes)
    p = s.shape[-1]
    stepped, call_s = _software(link)
    ring = (p - 1) * _msg(stepped, s.max(axis=-1))
    return _plus_calls(ring + allgatherv_host_time_s(s, link), p, call_s)


@_on_gather_link
def allgatherv_padded(
    sizes_bytes: ArrayLike,
    link: LinkSpec,
    *,
    intra_link: LinkSpec | None = None,
    gpus_per_node: int = 1,
) -> np.ndarray:
    """Padded allgatherv: allgather the sizes, then a ring allgather of every block padded to
    the largest one (what gloo-backed ``torch.distributed`` and many frameworks do).

    Formula: ``T = 2c + (P−1)·(α + 8β) + (P−1)·(α + β·m_max)
    + h + δ·(s·P·m_max + (1 − s)·Σ m)`` (two calls) —
    :func:`size_exchange_time_s` (one int64 per rank by ring allgather) +
    :func:`allgatherv_padded_data` (the padded ring and the host work, h =
    ``link.allgatherv_host_s``, δ =
    ``link.allgatherv_host_s_per_byte``, s = ``link.allgatherv_host_padded_share``,
    :func:`allgatherv_host_time_s`).

    Assumptions: both phases use the lock-step ring allgather; padding bytes cross the wire;
    the host copies of the gathered buffer add to the ring (δ = 0: the α-β ring alone).

    Source: Thakur, Rabenseifner & Gropp, IJHPCA 2005 (ring allgather); the two-phase
    size-then-data pattern of ``torch.distributed.all_gather`` with uneven tensors.
    """
    s = _sizes(sizes_bytes)
    return size_exchange_time_s(s.shape[-1], link) + allgatherv_padded_data(s, link)


@_on_gather_link
def allgatherv_bounded(
    sizes_bytes: ArrayLike,
    link: LinkSpec,
    *,
    intra_link: LinkSpec | None = None,
    gpus_per_node: int = 1,
    bound_bytes: ArrayLike = 0,
) -> np.ndarray:
    """One exchange of the DDP hook's bounded allgatherv: a plain all_gather of every rank's
    message cut or padded to the bound b, plus a fallback all_gather of e bytes per rank when
    the largest message exceeds it (``vgcsim.core.bounded``).

    ``sizes_bytes`` ``[..., P]``: every rank's message (bytes, header included), each row one
    exchange; ``bound_bytes`` its bound b (a number or ``[...]``; 0, the default: an exchange
    without history, everything in the fallback round). e = align8(max_r m_r) − b where
    max_r m_r > b, else 0. :func:`allgatherv_bounded_history` gives each of a bucket's
    successive exchanges the bound the hook computes from the ones before.

    Formula: ``T = c + (P−1)·(α + β·b) + ½·δ·P·b + [e > 0]·(c + (P−1)·(α + β·e) + ½·δ·P·e)``
    — two ring allgather calls of equal blocks (c the link's per-call cost; with size
    segments each ``α + β·m`` is ``msg(m)``) and their host copies
    (:func:`vgcsim.core.collectives.plain_allgather_host_time_s`, δ =
    ``link.allgatherv_host_s_per_byte``); no size exchange (the lengths travel in the
    message's header). 0 for P = 1.

    Assumptions: the lock-step ring allgather of gloo; padding bytes cross the wire; the
    fallback round starts after the main round (it needs the gathered lengths).

    Source: ``vgcsim.traces.training.distributed_hook._start_bucket_gather`` (the hook's
    exchange, whose ``wire_bytes`` per rank is b + e); ring allgather of Thakur,
    Rabenseifner & Gropp, IJHPCA 2005.
    """
    s = _sizes(sizes_bytes)
    p = s.shape[-1]
    if p == 1:
        return _zeros_like_steps(s)
    bound = np.broadcast_to(np.asarray(bound_bytes, dtype=np.float64), s.shape[:-1])
    need = np.ceil(s.max(axis=-1))
    aligned = np.ceil(need / BOUND_ALIGN) * BOUND_ALIGN
    extra = np.where(need > bound, aligned - bound, 0.0)
    return _plain_ring_s(p, bound, link) + np.where(extra > 0, _plain_ring_s(p, extra, link), 0.0)


@_on_gather_link
def allgatherv_bounded_history(
    sizes_bytes: ArrayLike, link: LinkSpec, *, first_bound_bytes: int = 0
) -> np.ndarray:
    """:func:`allgatherv_bounded` of T successive exchanges of one bucket ``[T, P]`` → ``[T]``,
    exchange t at the bound the hook computes from the largest messages of the (at most 16)
    exchanges before it (:func:`vgcsim.core.bounded.bounded_rounds`; b_0 =
    ``first_bound_bytes``, the hook's aligned header)."""
    s = _sizes(sizes_bytes)
    if s.ndim != 2:
        raise ConfigError("a bounded exchange history is [exchanges, ranks]")
    bound, _ = bounded_rounds(np.ceil(s).astype(np.int64), first_bound_bytes)
    return allgatherv_bounded(s, link, bound_bytes=bound)


def _plain_ring_s(p: int, block_bytes: np.ndarray, link: LinkSpec) -> np.ndarray:
    """A plain ring all_gather call of equal blocks and its host copies:
    ``c + (P−1)·msg(b) + ½·δ(P·b)·P·b`` (``msg(b)`` = α + β·b without size segments)."""
    b = np.asarray(block_bytes, dtype=np.float64)
    ring = link.call_overhead_s + (p - 1) * message_time_s(link, b)
    return ring + plain_allgather_host_time_s(
        p, b, link.allgatherv_host_s_per_byte, link.allgatherv_host_s_per_byte_table
    )


# ------------------------------------------------------------------------------------------
# sparse allreduce
# ------------------------------------------------------------------------------------------


def sparse_allreduce_recursive_doubling(
    sizes_bytes: ArrayLike,
    link: LinkSpec,
    *,
    intra_link: LinkSpec | None = None,
    gpus_per_node: int = 1,
    stage_bytes: ArrayLike | None = None,
    dense_bytes: float = math.inf,
) -> np.ndarray:
    """SparCML's recursive-doubling sparse allreduce with its switch to dense.

    Formula: ``T = c + Σ_s (α + b_s·β + [reduce_s]·b_s·γ)`` (c the link's per-call cost;
    with size segments each ``α + b_s·β`` is ``msg(b_s)``) over the stages of
    :func:`vgcsim.core.collectives.sparse_stages` (a fold for P ≠ p', lg p' pairwise
    exchanges, an unfold without reduction), where b_s is the message of stage s: the union
    of the index-value pairs its group holds, ``b_s = min(c·|∪_{i∈G_s} I_i|, dense_bytes)``
    (c = 8 B per pair; a union whose pairs outgrow the dense vector is sent dense).
    ``stage_bytes`` ``[..., S]`` gives the b_s (from a trace's recorded unions); without it
    they are the disjoint-sets bound of ``sizes_bytes`` ``[..., P]``
    (:func:`vgcsim.core.collectives.sparse_stage_bytes`). Bounds (SparCML §5.1): with k
    nonzeros per rank, ``lg P·(α + ckβ)`` when every rank picks the same indices and
    ``lg P·α + (P − 1)·ckβ`` when they are disjoint, below the dense switch.

    Assumptions: as every model here (full duplex, no contention between pairs); the
    largest group's message sets each stage (lock-step); after the switch a stage sends
    the whole dense vector (the recursive-doubling form, not a bandwidth-optimal dense
    allreduce).

    Source: C. Renggli, S. Ashkboos, M. Aghagolzadeh, D. Alistarh, T. Hoefler, "SparCML:
    High-Performance Sparse Communication for Machine Learning", SC'19, §5 (SSAR_Recursive_
    double and the dynamic switch to the dense representation, DSAR).
    """
    s = _sizes(sizes_bytes)
    p = s.shape[-1]
    if p == 1:
        return _zeros_like_steps(s)
    _, reduce = sparse_stages(p)
    if stage_bytes is None:
        b = sparse_stage_bytes(s, dense_bytes)
    else:
        b = np.minimum(np.asarray(stage_bytes, dtype=np.float64), dense_bytes)
        if b.shape[-1] != len(reduce):
            raise ConfigError(
                f"sparse allreduce on {p} ranks has {len(reduce)} stages; got {b.shape[-1]} sizes"
            )
    per_stage = message_time_s(link, b) + reduce * b * link.gamma_s_per_byte
    return link.call_overhead_s + per_stage.sum(axis=-1)


# ------------------------------------------------------------------------------------------
# registry
# ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CollectiveModel:
    """A registered closed-form collective model."""

    key: str  # "allreduce/ring", ...
    op: str  # "allreduce" | "allgatherv" | "sparse_allreduce"
    algorithm: str
    time_s: CostFn


_FUNCTIONS: dict[str, CostFn] = {
    "allreduce/ring": allreduce_ring,
    "allreduce/recursive_doubling": allreduce_recursive_doubling,
    "allreduce/rabenseifner": allreduce_rabenseifner,
    "allreduce/binomial_tree": allreduce_binomial_tree,
    "allreduce/hierarchical": allreduce_hierarchical,
    "allgatherv/ring": allgatherv_ring,
    "allgatherv/recursive_doubling": allgatherv_recursive_doubling,
    "allgatherv/bruck": allgatherv_bruck,
    "allgatherv/direct": allgatherv_direct,
    "allgatherv/padded": allgatherv_padded,
    "allgatherv/bounded": allgatherv_bounded,
    "sparse_allreduce/recursive_doubling": sparse_allreduce_recursive_doubling,
}

COLLECTIVES: dict[str, CollectiveModel] = {
    key: CollectiveModel(key, key.split("/")[0], key.split("/")[1], _FUNCTIONS[key])
    for key in COLLECTIVE_KEYS
}


def collective_key(op: str, algorithm: str) -> str:
    """``("allgatherv", "ring")`` → ``"allgatherv/ring"``, checked against the registry."""
    key = f"{op}/{algorithm}"
    if key not in COLLECTIVES:
        valid = sorted(c.algorithm for c in COLLECTIVES.values() if c.op == op)
        if not valid:
            raise unknown_name("collective operation", op, {c.op for c in COLLECTIVES.values()})
        raise unknown_name(f"{op} algorithm", algorithm, valid)
    return key


def get_collective(key: str) -> CollectiveModel:
    """Look up a collective model by registry key (UnknownNameError lists the keys)."""
    try:
        return COLLECTIVES[key]
    except KeyError:
        raise unknown_name("collective", key, COLLECTIVES) from None


def collective_time_s(key: str, sizes_bytes: ArrayLike, cluster: ClusterSpec) -> np.ndarray:
    """Seconds of collective ``key`` on ``cluster`` for per-rank sizes ``[..., P]`` (its links'
    CPU-time terms stretched by the hosts' processor sharing,
    :func:`vgcsim.core.cluster.shared_cluster`)."""
    model = get_collective(key)
    cluster = shared_cluster(cluster, np.shape(sizes_bytes)[-1])
    return model.time_s(
        sizes_bytes,
        cluster.link,
        intra_link=cluster.intra_link,
        gpus_per_node=cluster.gpus_per_node,
    )
