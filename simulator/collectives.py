"""Collective algorithms as communication schedules: who sends which bytes to whom, round by round.

Every key of :data:`COLLECTIVES` (exactly ``vgcsim.core.collectives.COLLECTIVE_KEYS``) builds a
:class:`Schedule` for ``P`` ranks. A schedule is a list of :class:`Round`\\ s; in a round each
listed flow sends a contiguous (circular) range of *units* from ``src`` to ``dst``. Every rank
runs the rounds in order as its own SimPy process (:mod:`vgcsim.simulator.paths.reference`): it posts the round's
sends and receives, waits for all of them, and, in a reducing round, spends ``γ × bytes`` on
the bytes it received. A rank with nothing to do in a round goes straight to the next one;
ordering between ranks comes only from the messages themselves, so ranks that start late
(stragglers) or carry larger blocks delay exactly the ranks that depend on them.

Units: an allgatherv's units are the ranks' blocks (uneven sizes allowed); an allreduce's
units are ``n_units`` equal chunks of the ``n``-byte buffer (allreduce needs equal sizes).
``allgatherv/padded`` pads every block to the largest one and adds one size unit of
``vgcsim.core.collectives.SIZE_HEADER_BYTES``. Schedules may reorder units
(``unit_order``) so that the blocks a rank holds stay contiguous.

Algorithms (p' = largest power of two ≤ P, r = P − p'; for P not a power of two the
recursive algorithms first *fold*: rank p'+i sends its data to rank i, and *unfold* at the end:
rank i sends the result to rank p'+i):

* ``allreduce/ring`` — reduce-scatter then allgather around the ring, 2(P−1) rounds of n/P.
* ``allreduce/recursive_doubling`` — log p' pairwise exchanges of the full n (partner i XOR 2^k).
* ``allreduce/rabenseifner`` — reduce-scatter by recursive halving, allgather by recursive
  doubling, chunks of n/p'.
* ``allreduce/binomial_tree`` — binomial-tree reduce to rank 0, then binomial broadcast,
  ⌈log2 P⌉ rounds each way of the full n.
* ``allreduce/hierarchical`` — g = gpus_per_node ranks per node (ranks fill nodes in order):
  binomial-tree reduce to each node's leader, ring allreduce of the full vector among the
  N = ⌈P/g⌉ leaders, binomial-tree broadcast inside each node.
* ``allgatherv/ring`` — P−1 rounds, rank i forwards block (i−k) mod P to rank i+1.
* ``allgatherv/recursive_doubling`` — log p' exchanges of the accumulated blocks (with fold).
* ``allgatherv/bruck`` — ⌈log2 P⌉ rounds, rank i sends its first min(2^k, P−2^k) blocks to i−2^k.
* ``allgatherv/direct`` — one round: every rank sends its block to every other rank at once.
* ``allgatherv/padded`` — ring allgather of the 8-byte block sizes, then ring allgather of
  blocks padded to the largest block (what ``torch.distributed.all_gather`` needs).
* ``allgatherv/bounded`` — the DDP hook's exchange (``vgcsim.core.bounded``): a ring allgather
  of blocks of the bound, then a ring allgather of the bytes past it (the fallback round).
  Units: P bound blocks then P fallback blocks. One call has no history (bound 0); a replay
  gives each step its bound from the steps before (:func:`bounded_units`) and drops the
  fallback rounds where no message exceeds the bound (:func:`bounded_schedule`).
* ``sparse_allreduce/recursive_doubling`` — SparCML's sparse allreduce (Renggli et al.
  SC'19): fold, lg p' pairwise exchanges of the union each rank holds, unfold; one unit per
  stage (its message, the union's index-value pairs or the dense vector after the switch).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from vgcsim.core.bounded import bounded_rounds
from vgcsim.core.cluster import DEFAULT_HOST_PADDED_SHARE
from vgcsim.core.collectives import (
    COLLECTIVE_KEYS,
    SIZE_HEADER_BYTES,
    padded_host_time_s,
    plain_allgather_host_time_s,
    sparse_stage_bytes,
)
from vgcsim.core.errors import ConfigError, unknown_name

__all__ = [
    "COLLECTIVES",
    "bounded_schedule",
    "bounded_units",
    "Round",
    "Schedule",
    "doubled_units",
    "flow_count",
    "get_schedule",
    "host_time_s",
    "padded_data_schedule",
    "span_bytes",
    "unit_sizes",
]


@dataclass(frozen=True, eq=False)
class Round:
    """One round: flow f sends units ``[lo[f], lo[f] + count[f])`` (circular) from src to dst."""

    src: np.ndarray
    dst: np.ndarray
    lo: np.ndarray
    count: np.ndarray
    reduce: bool = False


@dataclass(frozen=True, eq=False)
class Schedule:
    """A collective for ``world_size`` ranks as rounds of flows over ``n_units`` units.

    A frozen spec: the paths keep what they derive from a schedule in its own run cache
    (``vgcsim.simulator.paths.plan.RunCache``), so one schedule may serve any number of runs."""

    key: str
    world_size: int
    rounds: tuple[Round, ...]
    n_units: int
    allreduce: bool
    unit_order: np.ndarray | None = None
    pad: bool = False
    bounded: bool = False  # allgatherv/bounded: P bound blocks, then P fallback blocks
    #: units are stages (the sparse allreduce): unit s is the message every flow of stage s
    #: carries (sizes from ``vgcsim.core.collectives.sparse_stage_bytes``)
    stages: bool = False

    def round_bytes(self, units: np.ndarray) -> list[np.ndarray]:
        """Bytes of every flow of every round for unit sizes ``units`` (see :func:`unit_sizes`)."""
        v = units if self.unit_order is None else units[self.unit_order]
        doubled, sums = doubled_units(v)
        return [span_bytes(doubled, sums, r.lo, r.count) for r in self.rounds]


def doubled_units(units: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The unit sizes twice along the last axis, and their running sums after a leading 0:
    the two arrays :func:`span_bytes` reads."""
    doubled = np.concatenate((units, units), axis=-1)
    zero = np.zeros((*doubled.shape[:-1], 1))
    return doubled, np.concatenate((zero, np.cumsum(doubled, axis=-1)), axis=-1)


def span_bytes(
    doubled: np.ndarray, sums: np.ndarray, lo: np.ndarray, count: np.ndarray
) -> np.ndarray:
    """Bytes of flows that carry the units ``[lo, lo + count)`` (circular).

    ``doubled`` holds the unit sizes twice along its last axis (so a circular range is a plain
    one) and ``sums`` its running sums (both from :func:`doubled_units`): a flow's bytes are
    ``sums[lo + count] − sums[lo]``, except that a flow of one unit carries exactly that unit,
    ``doubled[lo]``. A difference of running sums can lose a small unit's low bits after a
    large one (1 B after 2⁵³ B is lost entirely). Every path of the simulator (per round,
    stacked rounds, the stacked and periodic fast paths) takes a flow's bytes from here, so
    they agree to the bit.
    """
    one = count == 1
    if one.all():  # a saving: the general case below gives the same
        return doubled[..., lo]
    out = sums[..., lo + count] - sums[..., lo]
    if one.any():
        out = np.where(one, doubled[..., lo], out)
    return out


def unit_sizes(
    schedule: Schedule,
    sizes_bytes: np.ndarray | float,
    *,
    stage_bytes: np.ndarray | None = None,
    dense_bytes: float = float("inf"),
) -> np.ndarray:
    """Unit sizes for a collective call.

    allreduce: ``sizes_bytes`` is the buffer size n (a scalar, or P equal values); units are
    n / n_units each. allgatherv: ``sizes_bytes`` are the P per-rank block sizes; padded
    schedules use the largest for every block. sparse allreduce: the per-stage messages,
    ``stage_bytes`` when given (a trace's unions), else the disjoint-sets bound of the P
    per-rank sparse sizes, each capped at ``dense_bytes``
    (``vgcsim.core.collectives.sparse_stage_bytes``).
    """
    if schedule.stages:
        if schedule.world_size == 1:
            return np.zeros(schedule.n_units)
        if stage_bytes is not None:
            b = np.minimum(np.asarray(stage_bytes, dtype=float), dense_bytes)
            if b.shape != (schedule.n_units,):
                raise ConfigError(
                    f"{schedule.key}: got {b.size} stage sizes for {schedule.n_units} stages"
                )
            return b
        sizes = np.atleast_1d(np.asarray(sizes_bytes, dtype=float))
        if sizes.size != schedule.world_size:
            raise ConfigError(
                f"{schedule.key}: got {sizes.size} sizes for {schedule.world_size} ranks"
            )
        return sparse_stage_bytes(sizes, dense_bytes)
    sizes = np.atleast_1d(np.asarray(sizes_bytes, dtype=float))
    if schedule.allreduce:
        if sizes.size > 1 and not np.all(sizes == sizes[0]):
            raise ConfigError(f"{schedule.key} needs equal sizes on every rank")
        return np.full(schedule.n_units, sizes[0] / schedule.n_units)
    if sizes.size != schedule.world_size:
        raise ConfigError(
            f"{schedule.key}: got {sizes.size} block sizes for {schedule.world_size} ranks"
        )
    if schedule.pad:  # every block padded to the largest, plus the size header unit
        return np.append(np.full(schedule.world_size, sizes.max()), float(SIZE_HEADER_BYTES))
    if schedule.bounded:  # one exchange without history: bound 0, all in the fallback round
        bound, extra = bounded_rounds(np.ceil(sizes).astype(np.int64))
        return bounded_units(schedule.world_size, bound, extra)[0]
    return sizes


def bounded_units(p: int, bound_bytes, extra_bytes) -> np.ndarray:
    """Units ``[T, 2P]`` of ``allgatherv/bounded`` for T exchanges: P blocks of the bound,
    then P blocks of the fallback round (``vgcsim.core.bounded.bounded_rounds``)."""
    b = np.asarray(bound_bytes, dtype=float).reshape(-1, 1)
    e = np.asarray(extra_bytes, dtype=float).reshape(-1, 1)
    return np.concatenate([np.repeat(b, p, axis=1), np.repeat(e, p, axis=1)], axis=1)


def host_time_s(
    schedule: Schedule,
    units: np.ndarray,
    host_s_per_byte: float,
    table=(),
    copied_bytes=None,
    padded_share: float = DEFAULT_HOST_PADDED_SHARE,
    fixed_s: float = 0.0,
):
    """Host time of the allgatherv implementation after a call of ``schedule`` with unit sizes
    ``units`` (``[..., n_units]``, see :func:`unit_sizes`): ``h + δ·(s·P·m_max + (1 − s)·Σ
    m)`` on every rank for the padded schedules (``allgatherv/padded`` and its data-only twin), 0 for
    the others; ``copied_bytes`` = Σ m, the real bytes of the P blocks (``[...]``; None:
    every block as large as the padded one, P·m_max), which the padded units no longer tell.

    Formula and assumptions: ``vgcsim.core.collectives.padded_host_time_s`` (the same rule
    as the cost model's ``allgatherv/padded``); δ = a link's ``allgatherv_host_s_per_byte``,
    or δ at P·m_max from ``table`` (its ``allgatherv_host_s_per_byte_table``) where given,
    s = ``padded_share`` (its ``allgatherv_host_padded_share``), h = ``fixed_s`` (its
    ``allgatherv_host_s``), all fitted by ``vgcsim calibrate``. ``allgatherv/bounded``: two
    plain all_gathers of equal blocks, ``½·δ·P·b + ½·δ·P·e`` (``vgcsim.core.collectives.plain_allgather_host_time_s``; e only
    where the fallback round runs). The paths do not run it: callers add it to the
    phase's finish time (so it does not delay a later phase of the same step).
    """
    u = np.asarray(units, dtype=float)
    if schedule.bounded and (host_s_per_byte != 0 or table):
        p = schedule.world_size
        # the fallback round's copies only where it runs
        fallback = u[..., p] if len(schedule.rounds) > max(p - 1, 0) else 0.0 * u[..., p]
        return plain_allgather_host_time_s(
            p, u[..., 0], host_s_per_byte, table
        ) + plain_allgather_host_time_s(p, fallback, host_s_per_byte, table)
    if not schedule.pad or (host_s_per_byte == 0 and not table and not fixed_s):
        return np.zeros(u.shape[:-1]) if u.ndim > 1 else 0.0
    return padded_host_time_s(
        schedule.world_size,
        u[..., 0],
        host_s_per_byte,
        table,
        copied_bytes=copied_bytes,
        padded_share=padded_share,
        fixed_s=fixed_s,
    )


def _round(flows: list[tuple[int, int, int, int]], reduce: bool = False) -> Round:
    """flows: (src, dst, lo, count)."""
    a = np.asarray(flows, dtype=np.int64).reshape(-1, 4)
    return Round(a[:, 0].copy(), a[:, 1].copy(), a[:, 2].copy(), a[:, 3].copy(), reduce)


def _pow2_below(p: int) -> int:
    return 1 << (p.bit_length() - 1)


# ---------------------------------------------------------------------------- allgatherv


def _ring_rounds(p: int) -> list[Round]:
    i = np.arange(p)
    return [Round(i, (i + 1) % p, (i - k) % p, np.ones(p, dtype=np.int64)) for k in range(p - 1)]


def _ag_ring(p: int, gpn: int) -> Schedule:
    return Schedule("allgatherv/ring", p, tuple(_ring_rounds(p)), p, False)


def _ag_padded(p: int, gpn: int) -> Schedule:
    i = np.arange(p)
    header = [
        Round(i, (i + 1) % p, np.full(p, p), np.ones(p, dtype=np.int64)) for _ in range(p - 1)
    ]
    return Schedule("allgatherv/padded", p, tuple(header + _ring_rounds(p)), p + 1, False, pad=True)


@functools.lru_cache(maxsize=64)
def padded_data_schedule(p: int) -> Schedule:
    """The padded allgatherv without its size rounds (sizes known in advance): a ring
    allgather of blocks padded to the largest one. Units: P blocks plus the (unsent) size
    unit, so :func:`unit_sizes` of the padded key applies unchanged."""
    return Schedule("allgatherv/padded-data", p, tuple(_ring_rounds(p)), p + 1, False, pad=True)


@functools.lru_cache(maxsize=128)
def bounded_schedule(p: int, fallback: bool = True) -> Schedule:
    """``allgatherv/bounded`` for P ranks: a ring allgather of the P bound blocks, then (with
    ``fallback``) one of the P fallback blocks (units P … 2P − 1)."""
    rounds = _ring_rounds(p)
    if fallback:
        rounds += [Round(r.src, r.dst, r.lo + p, r.count, r.reduce) for r in _ring_rounds(p)]
    return Schedule("allgatherv/bounded", p, tuple(rounds), 2 * p, False, bounded=True)


def _ag_bounded(p: int, gpn: int) -> Schedule:
    return bounded_schedule(p, True)


def _ag_direct(p: int, gpn: int) -> Schedule:
    if p == 1:
        return Schedule("allgatherv/direct", p, (), p, False)
    # rank i sends its block to every j != i, i outer and j ascending (numpy, not a list
    # of P(P - 1) tuples)
    flow = np.arange(p * (p - 1), dtype=np.int64)
    src, k = np.divmod(flow, p - 1)
    dst = k + (k >= src)
    rnd = Round(src, dst, src.copy(), np.ones(len(flow), dtype=np.int64))
    return Schedule("allgatherv/direct", p, (rnd,), p, False)


def _ag_bruck(p: int, gpn: int) -> Schedule:
    rounds = []
    d = 1
    i = np.arange(p)
    while d < p:
        c = min(d, p - d)
        rounds.append(Round(i, (i - d) % p, i.copy(), np.full(p, c, dtype=np.int64)))
        d *= 2
    return Schedule("allgatherv/bruck", p, tuple(rounds), p, False)


def _fold_order(p: int) -> tuple[int, int, np.ndarray, np.ndarray]:
    """Unit order keeping each virtual rank's blocks together after a fold; start of each."""
    q = _pow2_below(p)
    r = p - q
    order: list[int] = []
    start = np.zeros(q + 1, dtype=np.int64)
    for v in range(q):
        start[v] = len(order)
        order.append(v)
        if v < r:
            order.append(q + v)
    start[q] = p
    return q, r, np.asarray(order, dtype=np.int64), start


def _ag_recursive_doubling(p: int, gpn: int) -> Schedule:
    q, r, order, start = _fold_order(p)
    pos = np.empty(p, dtype=np.int64)
    pos[order] = np.arange(p)
    rounds = []
    if r:
        rounds.append(_round([(q + v, v, pos[q + v], 1) for v in range(r)]))
    k = 1
    while k < q:
        flows = []
        for v in range(q):
            g = (v // k) * k
            flows.append((v, v ^ k, start[g], start[g + k] - start[g]))
        rounds.append(_round(flows))
        k *= 2
    if r:
        rounds.append(_round([(v, q + v, pos[q + v] + 1, p - 1) for v in range(r)]))
    return Schedule("allgatherv/recursive_doubling", p, tuple(rounds), p, False, unit_order=order)


# ---------------------------------------------------------------------------- allreduce


def _ar_ring(p: int, gpn: int) -> Schedule:
    i = np.arange(p)
    one = np.ones(p, dtype=np.int64)
    rs = [Round(i, (i + 1) % p, (i - k) % p, one, True) for k in range(p - 1)]
    ag = [Round(i, (i + 1) % p, (i + 1 - k) % p, one) for k in range(p - 1)]
    return Schedule("allreduce/ring", p, tuple(rs + ag), p, True)


def _fold(q: int, r: int, n: int) -> Round:
    return _round([(q + v, v, 0, n) for v in range(r)], reduce=True)


def _unfold(q: int, r: int, n: int) -> Round:
    return _round([(v, q + v, 0, n) for v in range(r)])


def _ar_recursive_doubling(p: int, gpn: int) -> Schedule:
    q = _pow2_below(p)
    r = p - q
    rounds = [_fold(q, r, 1)] if r else []
    k = 1
    while k < q:
        rounds.append(_round([(v, v ^ k, 0, 1) for v in range(q)], reduce=True))
        k *= 2
    if r:
        rounds.append(_unfold(q, r, 1))
    return Schedule("allreduce/recursive_doubling", p, tuple(rounds), 1, True)


def _ar_rabenseifner(p: int, gpn: int) -> Schedule:
    q = _pow2_below(p)
    r = p - q
    rounds = [_fold(q, r, q)] if r else []
    # reduce-scatter by recursive halving: rank v keeps the half of its range on v's side
    lo = np.zeros(q, dtype=np.int64)
    length = q
    mask = q // 2
    while mask:
        half = length // 2
        flows = []
        for v in range(q):
            upper = bool(v & mask)
            send_lo = lo[v] if upper else lo[v] + half
            flows.append((v, v ^ mask, send_lo, half))
        rounds.append(_round(flows, reduce=True))
        for v in range(q):
            if v & mask:
                lo[v] += half
        length = half
        mask //= 2
    # allgather by recursive doubling: rank v holds chunks [(v >> k) << k, + 2^k)
    k = 1
    while k < q:
        rounds.append(_round([(v, v ^ k, (v // k) * k, k) for v in range(q)]))
        k *= 2
    if r:
        rounds.append(_unfold(q, r, q))
    return Schedule("allreduce/rabenseifner", p, tuple(rounds), q, True)


def _ar_binomial_tree(p: int, gpn: int) -> Schedule:
    rounds = []
    k = 1
    while k < p:
        flows = [(v, v - k, 0, 1) for v in range(p) if v % (2 * k) == k]
        rounds.append(_round(flows, reduce=True))
        k *= 2
    bcast = []
    while k > 1:
        k //= 2
        flows = [(v, v + k, 0, 1) for v in range(p) if v % (2 * k) == 0 and v + k < p]
        bcast.append(_round(flows))
    return Schedule("allreduce/binomial_tree", p, tuple(rounds + bcast), 1, True)


def _ar_hierarchical(p: int, gpn: int) -> Schedule:
    g = max(1, min(gpn, p))
    nodes = -(-p // g)
    rounds: list[Round] = []
    # binomial reduce to each node's leader (local rank 0), all nodes at once
    k = 1
    while k < g:
        flows = [
            (node * g + v, node * g + v - k, 0, nodes)
            for node in range(nodes)
            for v in range(g)
            if v % (2 * k) == k and node * g + v < p
        ]
        rounds.append(_round(flows, reduce=True))
        k *= 2
    top = k
    # ring allreduce of the full vector among the leaders, in chunks of n / nodes
    lead = np.arange(nodes) * g
    nxt = np.roll(lead, -1)
    j = np.arange(nodes)
    one = np.ones(nodes, dtype=np.int64)
    if nodes > 1:
        for r in range(nodes - 1):
            rounds.append(Round(lead, nxt, (j - r) % nodes, one, True))
        for r in range(nodes - 1):
            rounds.append(Round(lead, nxt, (j + 1 - r) % nodes, one))
    # binomial broadcast from each leader
    k = top
    while k > 1:
        k //= 2
        flows = [
            (node * g + v, node * g + v + k, 0, nodes)
            for node in range(nodes)
            for v in range(g)
            if v % (2 * k) == 0 and v + k < g and node * g + v + k < p
        ]
        rounds.append(_round(flows))
    return Schedule(
        "allreduce/hierarchical", p, tuple(r for r in rounds if len(r.src)), nodes, True
    )


# ---------------------------------------------------------------------------- sparse allreduce


def _sar_recursive_doubling(p: int, gpn: int) -> Schedule:
    """SparCML's recursive-doubling sparse allreduce: one unit per stage
    (``vgcsim.core.collectives.sparse_stages``), whose size is that stage's message: fold
    (rank q + v → v), lg q exchanges v ↔ v XOR 2^s, unfold (v → q + v)."""
    q = _pow2_below(p)
    r = p - q
    rounds = []
    unit = 0
    if r:
        rounds.append(_round([(q + v, v, unit, 1) for v in range(r)], reduce=True))
        unit += 1
    k = 1
    while k < q:
        rounds.append(_round([(v, v ^ k, unit, 1) for v in range(q)], reduce=True))
        unit += 1
        k *= 2
    if r:
        rounds.append(_round([(v, q + v, unit, 1) for v in range(r)]))
        unit += 1
    return Schedule(
        "sparse_allreduce/recursive_doubling", p, tuple(rounds), max(unit, 1), False, stages=True
    )


COLLECTIVES: dict[str, Callable[[int, int], Schedule]] = {
    "allreduce/ring": _ar_ring,
    "allreduce/recursive_doubling": _ar_recursive_doubling,
    "allreduce/rabenseifner": _ar_rabenseifner,
    "allreduce/binomial_tree": _ar_binomial_tree,
    "allreduce/hierarchical": _ar_hierarchical,
    "allgatherv/ring": _ag_ring,
    "allgatherv/recursive_doubling": _ag_recursive_doubling,
    "allgatherv/bruck": _ag_bruck,
    "allgatherv/direct": _ag_direct,
    "allgatherv/padded": _ag_padded,
    "allgatherv/bounded": _ag_bounded,
    "sparse_allreduce/recursive_doubling": _sar_recursive_doubling,
}
assert set(COLLECTIVES) == set(COLLECTIVE_KEYS)


def flow_count(key: str, world_size: int, gpus_per_node: int = 1) -> int:
    """How many flows the schedule of ``key`` for ``world_size`` ranks has, without building
    it (what a run's memory grows with; ``tests/simulator/test_collectives.py`` checks it
    against every built schedule). p' = largest power of two ≤ P, r = P − p'."""
    if key not in COLLECTIVES:
        raise unknown_name("collective", key, COLLECTIVES)
    p = int(world_size)
    q = _pow2_below(p) if p >= 1 else 0
    r, log_q = p - q, q.bit_length() - 1
    if key in ("allgatherv/ring", "allgatherv/direct"):
        return p * (p - 1)
    if key in ("allgatherv/padded", "allgatherv/bounded", "allreduce/ring"):
        return 2 * p * (p - 1)  # bounded: the bound round and the fallback round
    if key == "allgatherv/bruck":
        return p * (p - 1).bit_length()  # ⌈log2 P⌉ rounds of P flows
    if key in (
        "allgatherv/recursive_doubling",
        "allreduce/recursive_doubling",
        "sparse_allreduce/recursive_doubling",
    ):
        return q * log_q + 2 * r
    if key == "allreduce/rabenseifner":
        return 2 * q * log_q + 2 * r
    if key == "allreduce/binomial_tree":
        return 2 * (p - 1)
    g = max(1, min(gpus_per_node, p))  # allreduce/hierarchical
    nodes = -(-p // g)
    return 2 * (p - nodes) + 2 * nodes * (nodes - 1)


@functools.lru_cache(maxsize=256)
def get_schedule(key: str, world_size: int, gpus_per_node: int = 1) -> Schedule:
    """The schedule of collective ``key`` for ``world_size`` ranks (cached).

    ``gpus_per_node`` matters only to ``allreduce/hierarchical``. Unknown keys raise
    UnknownNameError listing the valid ones.
    """
    try:
        builder = COLLECTIVES[key]
    except KeyError:
        raise unknown_name("collective", key, COLLECTIVES) from None
    if world_size < 1:
        raise ConfigError(f"world size must be >= 1, got {world_size}")
    gpn = gpus_per_node if key == "allreduce/hierarchical" else 1
    return builder(int(world_size), int(gpn))
