"""Closed-form cost models of the collectives in ``COLLECTIVE_KEYS`` (α-β-γ, numpy).

Every model is a function ``f(sizes_bytes, link, *, intra_link=None, gpus_per_node=1)``:
``sizes_bytes`` is an array ``[..., P]`` of per-rank payload sizes (bytes) — the last axis is
the ranks, any leading axes (steps, scenarios) are evaluated at once — and the result is an
array ``[...]`` of seconds. ``P = sizes_bytes.shape[-1]``; P = 1 costs 0.

Notation: α = latency_s, β = 1/bandwidth_Bps, γ = gamma_s_per_byte of the link; m_i = rank
i's payload; M = Σ m_i; m_max = max m_i; for allreduce n = m_max (allreduce needs equal
sizes; a smaller rank is padded); lg = log2; p' = 2^⌊lg P⌋ (largest power of two ≤ P).

Common assumptions: every rank has its own full-duplex link into a non-blocking fabric (a
rank can send and receive at full rate at once; no contention between disjoint pairs);
rounds are lock-step (a round ends when its slowest transfer ends); no overlap of
reduction and transfer. Registry keys are the shared vocabulary with ``simulator``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from vgcsim.core.cluster import ClusterSpec, LinkSpec
from vgcsim.core.collectives import (
    COLLECTIVE_KEYS,
    SIZE_HEADER_BYTES,
    padded_host_time_s,
    sparse_stage_bytes,
    sparse_stages,
)
from vgcsim.core.errors import ConfigError, unknown_name

__all__ = [
    "COLLECTIVES",
    "CollectiveModel",
    "allgatherv_host_time_s",
    "allgatherv_padded_data",
    "size_exchange_time_s",
    "collective_key",
    "collective_time_s",
    "get_collective",
]

CostFn = Callable[..., np.ndarray]


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


def _fold_unfold_s(n: np.ndarray, p: int, link: LinkSpec) -> np.ndarray | float:
    """The fold and unfold of a recursive allreduce for P not a power of two:
    ``[P ≠ p']·(2α + 2n·β + n·γ)`` (the r = P − p' extra ranks send their vector to a partner,
    which reduces it, and receive the result at the end)."""
    if _pow2_floor(p) == p:
        return 0.0
    return 2 * link.latency_s + 2 * n * link.beta_s_per_byte + n * link.gamma_s_per_byte


# ------------------------------------------------------------------------------------------
# allreduce
# ------------------------------------------------------------------------------------------


def _ring_allreduce(n: np.ndarray, p: int, link: LinkSpec) -> np.ndarray:
    if p == 1:
        return np.zeros_like(n)
    a, b, g = link.latency_s, link.beta_s_per_byte, link.gamma_s_per_byte
    frac = (p - 1) / p
    return 2 * (p - 1) * a + 2 * frac * n * b + frac * n * g


def allreduce_ring(
    sizes_bytes: ArrayLike,
    link: LinkSpec,
    *,
    intra_link: LinkSpec | None = None,
    gpus_per_node: int = 1,
) -> np.ndarray:
    """Ring allreduce (reduce-scatter ring + allgather ring).

    Formula: ``T = 2(P−1)·α + 2·(P−1)/P·n·β + (P−1)/P·n·γ``.

    Assumptions: n divisible into P equal chunks; each of the 2(P−1) lock-step rounds moves
    n/P bytes per rank to its ring neighbour; bandwidth-optimal (Patarasuk & Yuan 2009).

    Source: P. Patarasuk and X. Yuan, "Bandwidth optimal all-reduce algorithms for clusters
    of workstations", JPDC 69(2), 2009; Thakur, Rabenseifner & Gropp, IJHPCA 2005, §4.
    """
    s = _sizes(sizes_bytes)
    return _ring_allreduce(s.max(axis=-1), s.shape[-1], link)


def allreduce_recursive_doubling(
    sizes_bytes: ArrayLike,
    link: LinkSpec,
    *,
    intra_link: LinkSpec | None = None,
    gpus_per_node: int = 1,
) -> np.ndarray:
    """Recursive-doubling allreduce: lg P rounds of full-vector pairwise exchange + reduce.

    Formula: ``T = lg p'·(α + n·β + n·γ) + [P ≠ p']·(2α + 2n·β + n·γ)``.

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
    a, b, g = link.latency_s, link.beta_s_per_byte, link.gamma_s_per_byte
    return math.log2(_pow2_floor(p)) * (a + n * b + n * g) + _fold_unfold_s(n, p, link)


def allreduce_rabenseifner(
    sizes_bytes: ArrayLike,
    link: LinkSpec,
    *,
    intra_link: LinkSpec | None = None,
    gpus_per_node: int = 1,
) -> np.ndarray:
    """Rabenseifner allreduce: recursive-halving reduce-scatter + recursive-doubling allgather.

    Formula: ``T = 2·lg p'·α + 2·(p'−1)/p'·n·β + (p'−1)/p'·n·γ + [P ≠ p']·(2α + 2n·β + n·γ)``.

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
    a, b, g = link.latency_s, link.beta_s_per_byte, link.gamma_s_per_byte
    pp = _pow2_floor(p)
    frac = (pp - 1) / pp
    t = 2 * math.log2(pp) * a + 2 * frac * n * b + frac * n * g
    return t + _fold_unfold_s(n, p, link)


def allreduce_binomial_tree(
    sizes_bytes: ArrayLike,
    link: LinkSpec,
    *,
    intra_link: LinkSpec | None = None,
    gpus_per_node: int = 1,
) -> np.ndarray:
    """Binomial-tree reduce to rank 0 followed by binomial-tree broadcast.

    Formula: ``T = ⌈lg P⌉·(α + n·β + n·γ) + ⌈lg P⌉·(α + n·β) = ⌈lg P⌉·(2α + 2n·β + n·γ)``.

    Assumptions: whole vector sent at every tree level (no pipelining or segmentation).

    Source: Thakur, Rabenseifner & Gropp, IJHPCA 2005, §3–4 (binomial reduce and broadcast).
    """
    s = _sizes(sizes_bytes)
    p = s.shape[-1]
    n = s.max(axis=-1)
    a, b, g = link.latency_s, link.beta_s_per_byte, link.gamma_s_per_byte
    return _ceil_lg(p) * (2 * a + 2 * n * b + n * g)


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
    ``T = ⌈lg g⌉·(α' + nβ' + nγ') + T_ring(N, n; α, β, γ) + ⌈lg g⌉·(α' + nβ')``.

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
    il = intra_link if intra_link is not None else link
    levels = _ceil_lg(g)
    intra = levels * (2 * il.latency_s + 2 * n * il.beta_s_per_byte + n * il.gamma_s_per_byte)
    return intra + _ring_allreduce(n, nodes, link)


# ------------------------------------------------------------------------------------------
# allgatherv
# ------------------------------------------------------------------------------------------


def allgatherv_ring(
    sizes_bytes: ArrayLike,
    link: LinkSpec,
    *,
    intra_link: LinkSpec | None = None,
    gpus_per_node: int = 1,
) -> np.ndarray:
    """Lock-step ring allgatherv: P−1 rounds, each rank forwards one block to its successor.

    Formula: ``T = Σ_{r=1}^{P−1} (α + β·max_i m_{(i−r+1) mod P}) = (P−1)·(α + β·m_max)``.
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
    return (p - 1) * (link.latency_s + s.max(axis=-1) * link.beta_s_per_byte)


def _rd_power_of_two(c: np.ndarray, link: LinkSpec) -> np.ndarray:
    """Σ over lg p rounds of α + β·(largest aligned group sum of size 2^k)."""
    t = _zeros_like_steps(c)
    g = c
    while g.shape[-1] > 1:
        t = t + link.latency_s + g.max(axis=-1) * link.beta_s_per_byte
        g = g.reshape(*g.shape[:-1], g.shape[-1] // 2, 2).sum(axis=-1)
    return t


def allgatherv_recursive_doubling(
    sizes_bytes: ArrayLike,
    link: LinkSpec,
    *,
    intra_link: LinkSpec | None = None,
    gpus_per_node: int = 1,
) -> np.ndarray:
    """Recursive-doubling allgatherv: in round k rank i swaps everything it holds with i XOR 2^k.

    Formula (P a power of two): ``T = Σ_{k=0}^{lg P−1} (α + β·max_G Σ_{i∈G} m_i)`` over the
    aligned groups G of 2^k ranks (what a rank holds, and sends, in round k).
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
    if pp == p:
        return _rd_power_of_two(s, link)
    r = p - pp
    extra = s[..., pp:]
    merged = s[..., :pp].copy()
    merged[..., :r] += extra
    total = s.sum(axis=-1)
    a, b = link.latency_s, link.beta_s_per_byte
    fold = a + extra.max(axis=-1) * b
    unfold = a + (total[..., None] - extra).max(axis=-1) * b
    return fold + _rd_power_of_two(merged, link) + unfold


def allgatherv_bruck(
    sizes_bytes: ArrayLike,
    link: LinkSpec,
    *,
    intra_link: LinkSpec | None = None,
    gpus_per_node: int = 1,
) -> np.ndarray:
    """Bruck allgatherv: ⌈lg P⌉ rounds; in round k rank i sends rank i−2^k the s_k blocks
    i, i+1, …, i+s_k−1 (mod P) it holds, s_k = min(2^k, P − 2^k).

    Formula: ``T = Σ_{k=0}^{⌈lg P⌉−1} (α + β·max_i Σ_{j=0}^{s_k−1} m_{(i+j) mod P})``.

    Assumptions: lock-step rounds; the final local rotation is free; works for any P.

    Source: J. Bruck, C.-T. Ho, S. Kipnis, E. Upfal and D. Weathersby, "Efficient algorithms
    for all-to-all communications in multiport message-passing systems", IEEE TPDS 8(11), 1997.
    """
    s = _sizes(sizes_bytes)
    p = s.shape[-1]
    t = _zeros_like_steps(s)
    if p == 1:
        return t
    doubled = np.concatenate([s, s], axis=-1)
    cs = np.concatenate([np.zeros((*s.shape[:-1], 1)), np.cumsum(doubled, axis=-1)], axis=-1)
    k = 1
    while k < p:
        w = min(k, p - k)
        window = cs[..., w : w + p] - cs[..., :p]
        t = t + link.latency_s + window.max(axis=-1) * link.beta_s_per_byte
        k *= 2
    return t


def allgatherv_direct(
    sizes_bytes: ArrayLike,
    link: LinkSpec,
    *,
    intra_link: LinkSpec | None = None,
    gpus_per_node: int = 1,
) -> np.ndarray:
    """Direct allgatherv: every rank sends its block to all others at once.

    Formula: ``T = α + β·max_i max((P−1)·m_i, M − m_i)`` — rank i's link must carry
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
    total = s.sum(axis=-1, keepdims=True)
    busiest = np.maximum((p - 1) * s, total - s).max(axis=-1)
    return link.latency_s + busiest * link.beta_s_per_byte


def size_exchange_time_s(world_size: int, link: LinkSpec) -> float:
    """The allgatherv size exchange, priced as its own small collective: a ring allgather of one
    int64 (:data:`SIZE_HEADER_BYTES`) per rank, run before the data collective.

    Formula: ``T = (P−1)·(α + 8β)`` (0 for P = 1).

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
    return (p - 1) * (link.latency_s + SIZE_HEADER_BYTES * link.beta_s_per_byte)


def allgatherv_host_time_s(sizes_bytes: ArrayLike, link: LinkSpec) -> np.ndarray:
    """Host time of the padded allgatherv's implementation: ``T_host = δ·(s·P·m_max +
    (1 − s)·Σ_r m_r)``, δ = ``link.allgatherv_host_s_per_byte``, or δ(P·m_max) from the link's
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
    )


def allgatherv_padded_data(sizes_bytes: ArrayLike, link: LinkSpec) -> np.ndarray:
    """The data phase of the padded allgatherv alone: a ring allgather of every block padded to
    the largest one and the implementation's host copies,
    ``T = (P−1)·(α + β·m_max) + δ·(s·P·m_max + (1 − s)·Σ m)`` (sizes known in advance;
    :func:`allgatherv_host_time_s`)."""
    s = _sizes(sizes_bytes)
    p = s.shape[-1]
    ring = (p - 1) * (link.latency_s + s.max(axis=-1) * link.beta_s_per_byte)
    return ring + allgatherv_host_time_s(s, link)


def allgatherv_padded(
    sizes_bytes: ArrayLike,
    link: LinkSpec,
    *,
    intra_link: LinkSpec | None = None,
    gpus_per_node: int = 1,
) -> np.ndarray:
    """Padded allgatherv: allgather the sizes, then a ring allgather of every block padded to
    the largest one (what gloo-backed ``torch.distributed`` and many frameworks do).

    Formula: ``T = (P−1)·(α + 8β) + (P−1)·(α + β·m_max) + δ·(s·P·m_max + (1 − s)·Σ m)`` —
    :func:`size_exchange_time_s` (one int64 per rank by ring allgather) +
    :func:`allgatherv_padded_data` (the padded ring and the host copies, δ =
    ``link.allgatherv_host_s_per_byte``, s = ``link.allgatherv_host_padded_share``,
    :func:`allgatherv_host_time_s`).

    Assumptions: both phases use the lock-step ring allgather; padding bytes cross the wire;
    the host copies of the gathered buffer add to the ring (δ = 0: the α-β ring alone).

    Source: Thakur, Rabenseifner & Gropp, IJHPCA 2005 (ring allgather); the two-phase
    size-then-data pattern of ``torch.distributed.all_gather`` with uneven tensors.
    """
    s = _sizes(sizes_bytes)
    return size_exchange_time_s(s.shape[-1], link) + allgatherv_padded_data(s, link)


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

    Formula: ``T = Σ_s (α + b_s·β + [reduce_s]·b_s·γ)`` over the stages of
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
    per_stage = link.latency_s + b * link.beta_s_per_byte + reduce * b * link.gamma_s_per_byte
    return per_stage.sum(axis=-1)


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
    """Seconds of collective ``key`` on ``cluster`` for per-rank sizes ``[..., P]``."""
    model = get_collective(key)
    return model.time_s(
        sizes_bytes,
        cluster.link,
        intra_link=cluster.intra_link,
        gpus_per_node=cluster.gpus_per_node,
    )
