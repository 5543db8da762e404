"""What every path shares: the phase a step runs, a call's software cost, and the tables
derived from a schedule on a topology (:class:`RunCache`), each built on first use.

See :mod:`vgcsim.simulator.paths` for the paths and what a phase is.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from vgcsim.core.collectives import calls_per_collective
from vgcsim.core.errors import ConfigError, unknown_name
from vgcsim.simulator.collectives import Schedule
from vgcsim.simulator.network import SEMANTICS
from vgcsim.simulator.topology import Route, Topology

__all__ = [
    "Phase",
    "RankSpan",
    "RoundOps",
    "RunCache",
    "ScheduleTables",
    "cache_for",
    "call_s",
    "is_eager",
]


@dataclass(frozen=True, eq=False)
class Phase:
    """One collective call: per-rank ready times, the schedule, and its unit sizes."""

    ready_s: np.ndarray
    schedule: Schedule
    units: np.ndarray
    label: str = ""


@dataclass(frozen=True)
class RankSpan:
    """A timeline span on a rank's track."""

    rank: int
    name: str
    start_s: float
    end_s: float


#: Largest world size whose (src, dst) pairs are found through a P x P table (16 MiB of
#: booleans, then 64 MiB of indices, at this size) rather than by sorting every round's codes.
_DENSE_PAIRS_MAX = 4096

# (round, sends [(flow, dst)], receives [(flow, src)], operations, reduce) of one rank
RoundOps = tuple[int, list[tuple[int, int]], list[tuple[int, int]], int, bool]


class ScheduleTables:
    """What the paths derive from one schedule on one topology, each built on first use."""

    def __init__(self, schedule: Schedule, topology: Topology):
        self.schedule = schedule  # held, so that the id keying this entry is not reused
        self.topology = topology
        self._shift: dict[int, bool] = {}
        self._reduced: dict[int, list[tuple[np.ndarray, ...]]] = {}

    @cached_property
    def one_to_one(self) -> bool:
        """True when every rank sends at most one and receives at most one flow per round."""
        p = self.schedule.world_size
        return all(
            np.bincount(r.src, minlength=p).max() <= 1
            and np.bincount(r.dst, minlength=p).max() <= 1
            for r in self.schedule.rounds
            if len(r.src)
        )

    @cached_property
    def pairs(self) -> np.ndarray:
        """Unique (src, dst) pairs over all rounds, shape [n, 2]."""
        rounds = self.schedule.rounds
        if not rounds:
            return np.zeros((0, 2), dtype=np.int64)
        p = self.schedule.world_size
        if p <= _DENSE_PAIRS_MAX:  # mark the P x P table: no sort of rounds x P codes
            seen = np.zeros(p * p, dtype=bool)
            for r in rounds:
                seen[r.src * p + r.dst] = True
            code = np.flatnonzero(seen)
        else:
            code = np.unique(np.concatenate([r.src * p + r.dst for r in rounds]))
        return np.stack([code // p, code % p], axis=1)

    @cached_property
    def message_plan(self) -> tuple[list[list[RoundOps]], list[Route]]:
        """The message level's plan: per rank, [(round, sends [(flow, dst)], receives
        [(flow, src)], operations, reduce)] for the rounds it takes part in, flows numbered
        over the whole schedule round by round; and the route of every flow."""
        schedule = self.schedule
        route = self.topology.route
        rounds = schedule.rounds
        p = schedule.world_size
        routes: list[Route] = []
        if rounds:  # each distinct (src, dst) pair's route looked up once
            codes = np.concatenate([r.src * p + r.dst for r in rounds])
            pairs, which = np.unique(codes, return_inverse=True)
            found = [route(c // p, c % p) for c in pairs.tolist()]
            routes = list(map(found.__getitem__, which.tolist()))
        if self.one_to_one:
            return self._one_to_one_plan(), routes
        # rounds come in order, so a rank's entry for round k, if any, is its last one
        ops: list[list[tuple[int, list, list]]] = [[] for _ in range(schedule.world_size)]
        g = 0
        for k, rnd in enumerate(rounds):
            for s, d in zip(rnd.src.tolist(), rnd.dst.tolist(), strict=True):
                mine = ops[s]
                if not mine or mine[-1][0] != k:
                    mine.append((k, [], []))
                mine[-1][1].append((g, d))
                mine = ops[d]
                if not mine or mine[-1][0] != k:
                    mine.append((k, [], []))
                mine[-1][2].append((g, s))
                g += 1
        plan = [
            [
                (k, sends, recvs, len(sends) + len(recvs), rounds[k].reduce)
                for k, sends, recvs in per
            ]
            for per in ops
        ]
        return plan, routes

    def _one_to_one_plan(self) -> list[list[RoundOps]]:
        """:attr:`message_plan`'s rank plans where every rank sends and receives at most one
        flow per round: [round, rank] tables of each rank's flow and peer, then one pass."""
        rounds = self.schedule.rounds
        shape = (len(rounds), self.schedule.world_size)
        send_flow, recv_flow = np.full(shape, -1), np.full(shape, -1)
        send_peer, recv_peer = np.zeros(shape, np.int64), np.zeros(shape, np.int64)
        g = 0
        for k, rnd in enumerate(rounds):
            flows = np.arange(g, g + len(rnd.src))
            send_flow[k, rnd.src], send_peer[k, rnd.src] = flows, rnd.dst
            recv_flow[k, rnd.dst], recv_peer[k, rnd.dst] = flows, rnd.src
            g += len(rnd.src)
        reduce = [r.reduce for r in rounds]
        ks = range(len(rounds))
        return [
            [
                (k, [(a, b)] if a >= 0 else [], [(c, e)] if c >= 0 else [], (a >= 0) + (c >= 0), r)
                for k, a, b, c, e, r in zip(ks, sf, sp, rf, rp, reduce, strict=True)
                if a >= 0 or c >= 0
            ]
            for sf, sp, rf, rp in zip(
                send_flow.T.tolist(),
                send_peer.T.tolist(),
                recv_flow.T.tolist(),
                recv_peer.T.tolist(),
                strict=True,
            )
        ]

    @cached_property
    def pair_tables(self) -> list[tuple[np.ndarray, np.ndarray]]:
        """Per round: (bandwidth, latency) of each flow's route."""
        p = self.schedule.world_size
        pairs = self.pairs
        bw_of = np.empty(len(pairs))
        lat_of = np.empty(len(pairs))
        for j, (s, d) in enumerate(pairs.tolist()):
            route = self.topology.route(s, d)
            bw_of[j] = route.bandwidth_Bps
            lat_of[j] = route.latency_s
        codes = pairs[:, 0] * p + pairs[:, 1]
        if p <= _DENSE_PAIRS_MAX:  # index table of the P x P codes: a gather per round
            where = np.zeros(p * p, dtype=np.int32)
            where[codes] = np.arange(len(codes), dtype=np.int32)
            index = [where[rnd.src * p + rnd.dst] for rnd in self.schedule.rounds]
        else:
            index = [np.searchsorted(codes, rnd.src * p + rnd.dst) for rnd in self.schedule.rounds]
        return [(bw_of[j], lat_of[j]) for j in index]

    @cached_property
    def permutations(self) -> list[np.ndarray | None]:
        """Per round: the inverse of ``dst`` when ``src`` is every rank in order and ``dst`` a
        permutation (then the round needs gathers only), else None."""
        p = self.schedule.world_size
        ident = np.arange(p)
        out: list[np.ndarray | None] = []
        for rnd in self.schedule.rounds:
            inv = None
            if len(rnd.src) == p and np.array_equal(rnd.src, ident):
                inv = np.full(p, -1, dtype=np.int64)
                inv[rnd.dst] = ident
                if inv.min() < 0:  # some rank receives twice: not a permutation
                    inv = None
            out.append(inv)
        return out

    @cached_property
    def all_permutations(self) -> bool:
        """True when the schedule has rounds and every one is a permutation."""
        return bool(self.schedule.rounds) and all(v is not None for v in self.permutations)

    def shift_invariant(self, d: int) -> bool:
        """True when moving every rank by ``d`` (mod P) maps the schedule onto itself: in each
        round rank i + d sends to dst(i) + d over a route of the same bandwidth and latency,
        the same number of units, starting ``d`` units further on. Needs every round to be a
        permutation and one unit per rank."""
        hit = self._shift.get(d)
        if hit is None:
            hit = self._shift[d] = self._check_shift(d)
        return hit

    def _check_shift(self, d: int) -> bool:
        s = self.schedule
        p = s.world_size
        if not self.all_permutations or s.n_units != p or p % d:
            return False
        for rnd in s.rounds:
            if not (
                np.all((np.roll(rnd.dst, -d) - rnd.dst) % p == d % p)
                and np.all((np.roll(rnd.lo, -d) - rnd.lo) % p == d % p)
                and np.array_equal(np.roll(rnd.count, -d), rnd.count)
            ):
                return False
        # flows map to flows, so it is enough that every pair's route matches its shift's
        pairs = self.pairs
        routes = [self.topology.route(a, b) for a, b in pairs.tolist()]
        moved = [self.topology.route(a, b) for a, b in ((pairs + d) % p).tolist()]
        return all(
            r.bandwidth_Bps == m.bandwidth_Bps and r.latency_s == m.latency_s
            for r, m in zip(routes, moved, strict=True)
        )

    def reduced(self, d: int) -> Iterable[tuple[np.ndarray, ...]]:
        """Per round, the first ``d`` ranks' (lo, lo + count, dst mod d, inverse mod d,
        bandwidth, latency) of an all-permutation schedule (``d = P``: the whole round, made
        on the fly rather than kept: at P = 4096 the rounds of a ring allreduce would hold
        a gigabyte)."""
        if d == self.schedule.world_size:
            return (
                (rnd.lo, rnd.lo + rnd.count, rnd.dst, inv, bw, lat)
                for rnd, inv, (bw, lat) in zip(
                    self.schedule.rounds, self.permutations, self.pair_tables, strict=True
                )
            )
        hit = self._reduced.get(d)
        if hit is None:
            hit = []
            route = self.topology.route
            for rnd, inv in zip(self.schedule.rounds, self.permutations, strict=True):
                lo, hi, dst = rnd.lo[:d], (rnd.lo + rnd.count)[:d], rnd.dst[:d]
                routes = [route(i, j) for i, j in enumerate(dst.tolist())]
                bw = np.array([r.bandwidth_Bps for r in routes])
                lat = np.array([r.latency_s for r in routes])
                hit.append((lo, hi, dst % d, inv[:d] % d, bw, lat))
            self._reduced[d] = hit
        return hit

    @cached_property
    def stacked(self) -> tuple[np.ndarray, ...]:
        """All-permutation schedules as [rounds, P] matrices: lo, count, dst, inverse, bw, lat,
        and the reduce flag per round."""
        rounds = self.schedule.rounds
        tables = self.pair_tables
        return (
            np.stack([r.lo for r in rounds]),
            np.stack([r.count for r in rounds]),
            np.stack([r.dst for r in rounds]),
            np.stack(self.permutations),
            np.stack([bw for bw, _ in tables]),
            np.stack([lat for _, lat in tables]),
            np.array([r.reduce for r in rounds]),
        )


@dataclass(eq=False)
class RunCache:
    """Derived tables of the schedules run on one topology, kept by the run that owns them.

    Pass the same cache to every :func:`run_message`, :func:`run_collective` and
    :func:`contention_free` call of a run on ``topology`` to build each table once.
    """

    topology: Topology
    _tables: dict[int, ScheduleTables] = field(default_factory=dict, repr=False)

    def tables(self, schedule: Schedule) -> ScheduleTables:
        hit = self._tables.get(id(schedule))
        if hit is None or hit.schedule is not schedule:
            hit = ScheduleTables(schedule, self.topology)
            self._tables[id(schedule)] = hit
        return hit


def call_s(schedule: Schedule, call_overhead_s: float) -> float:
    """The software seconds a rank spends entering one phase of ``schedule``:
    ``call_overhead_s × calls_per_collective(key)`` where P > 1, else 0 (a collective of one
    rank is free, as in the cost models). The data-only and size-exchange schedules of a
    split padded allgatherv are one call each; ``allgatherv/bounded`` is one call, two where
    its schedule has the fallback round."""
    if schedule.world_size <= 1 or call_overhead_s == 0.0:
        return 0.0
    if schedule.bounded:  # the bound round, and a second all_gather where a fallback runs
        return call_overhead_s * (1 + (len(schedule.rounds) > schedule.world_size - 1))
    return call_overhead_s * calls_per_collective(schedule.key)


def is_eager(semantics: str) -> bool:
    """True for ``"eager"``, False for ``"rendezvous"``; any other name is refused
    (UnknownNameError listing :data:`~vgcsim.simulator.network.SEMANTICS`)."""
    if semantics not in SEMANTICS:
        raise unknown_name("message semantics", semantics, SEMANTICS)
    return semantics == "eager"


def cache_for(topology: Topology, cache: RunCache | None) -> RunCache:
    if cache is None:
        return RunCache(topology)
    if cache.topology is not topology:
        raise ConfigError("a RunCache serves the topology it was made for, not another one")
    return cache
