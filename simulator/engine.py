"""Running collectives: message-level SimPy processes and the collective-level fast path.

A *phase* is one collective call: each rank's ready time (absolute seconds), the schedule and
its unit sizes. A step runs a list of phases; a rank starts phase b at max(its ready time,
the end of its phase b−1), so phases queue on one communication stream per rank.

* :func:`run_message` — one SimPy process per rank walks the schedule's rounds, posting each
  send and receive on the flow network (:mod:`vgcsim.simulator.network`), waiting for all of them,
  then reducing (``γ × received bytes``) in a reducing round. Contention, stragglers and
  fair sharing all come out of the event simulation.
* :func:`run_fast` — the same rounds evaluated with numpy, one vector operation per round over
  all ranks, using each route's uncontended time ``latency + bytes / bandwidth``. It is exact —
  the same arithmetic as the message level — whenever no two flows are ever on one channel at
  the same time. :func:`contention_free` decides that statically: every channel must carry
  flows of one sender only (a rank sends one flow at a time), or, of one receiver only; in
  the latter case under eager semantics :func:`run_fast` also checks at run time that
  messages into a rank never overlap, and returns ``None`` if they do.

Derived tables of a schedule (who sends what in which round, route bandwidths and latencies
on a topology, the stacked matrices of the fast path) are built on first use and kept in a
:class:`RunCache` of one topology, which a caller that runs many steps keeps for the run
(``vgcsim.simulator.replay`` does); the frozen :class:`~vgcsim.simulator.collectives.Schedule`
itself is never written to. Without a cache each call builds what it needs.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np
import simpy
from vgcsim.simulator.collectives import Schedule
from vgcsim.simulator.network import Comm, LinkMonitor, Waiter, make_network
from vgcsim.simulator.topology import Topology

from vgcsim.core.errors import ConfigError

__all__ = ["Phase", "RankSpan", "RunCache", "contention_free", "run_fast", "run_message"]

log = logging.getLogger(__name__)


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


RankOps = list[list[tuple[int, list[tuple[int, int]], list[tuple[int, int]], bool]]]


class _Tables:
    """What the engine derives from one schedule on one topology, each built on first use."""

    def __init__(self, schedule: Schedule, topology: Topology):
        self.schedule = schedule  # held, so that the id keying this entry is not reused
        self.topology = topology

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
        code = np.unique(np.concatenate([r.src * p + r.dst for r in rounds]))
        return np.stack([code // p, code % p], axis=1)

    @cached_property
    def rank_ops(self) -> RankOps:
        """Per rank: [(round, [(dst, flow)], [(src, flow)], reduce)] for the rounds it takes
        part in."""
        schedule = self.schedule
        ops: list[dict[int, tuple[list, list]]] = [{} for _ in range(schedule.world_size)]
        for k, rnd in enumerate(schedule.rounds):
            for f, (s, d) in enumerate(zip(rnd.src.tolist(), rnd.dst.tolist(), strict=True)):
                ops[s].setdefault(k, ([], []))[0].append((d, f))
                ops[d].setdefault(k, ([], []))[1].append((s, f))
        return [
            [
                (k, sends, recvs, schedule.rounds[k].reduce)
                for k, (sends, recvs) in sorted(per.items())
            ]
            for per in ops
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
        out = []
        for rnd in self.schedule.rounds:
            j = np.searchsorted(codes, rnd.src * p + rnd.dst)
            out.append((bw_of[j], lat_of[j]))
        return out

    @cached_property
    def permutations(self) -> list[np.ndarray | None]:
        """Per round: the inverse of ``dst`` when ``src`` is every rank in order and ``dst`` a
        permutation (then the round needs gathers only), else None."""
        p = self.schedule.world_size
        ident = np.arange(p)
        out: list[np.ndarray | None] = []
        for rnd in self.schedule.rounds:
            if (
                len(rnd.src) == p
                and np.array_equal(rnd.src, ident)
                and len(np.unique(rnd.dst)) == p
            ):
                inv = np.empty(p, dtype=np.int64)
                inv[rnd.dst] = ident
                out.append(inv)
            else:
                out.append(None)
        return out

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

    Pass the same cache to every :func:`run_message`, :func:`run_fast` and
    :func:`contention_free` call of a run on ``topology`` to build each table once.
    """

    topology: Topology
    _tables: dict[int, _Tables] = field(default_factory=dict, repr=False)

    def tables(self, schedule: Schedule) -> _Tables:
        hit = self._tables.get(id(schedule))
        if hit is None or hit.schedule is not schedule:
            hit = _Tables(schedule, self.topology)
            self._tables[id(schedule)] = hit
        return hit


def _cache_for(topology: Topology, cache: RunCache | None) -> RunCache:
    if cache is None:
        return RunCache(topology)
    if cache.topology is not topology:
        raise ConfigError("a RunCache serves the topology it was made for, not another one")
    return cache


def _run_counting(env: simpy.Environment) -> int:
    """Run ``env`` until no event is left; return how many events it processed. With nothing
    left at the end every scheduled event was processed exactly once."""
    n = 0
    step = env.step
    try:
        while True:
            step()
            n += 1
    except simpy.core.EmptySchedule:
        return n


def run_message(
    phases: Sequence[Phase],
    topology: Topology,
    *,
    mode: str = "fair",
    semantics: str = "rendezvous",
    gamma_s_per_byte: float = 0.0,
    monitor: LinkMonitor | None = None,
    spans: list[RankSpan] | None = None,
    stats: dict[str, int] | None = None,
    cache: RunCache | None = None,
) -> np.ndarray:
    """Simulate ``phases`` at message level; return each rank's finish time per phase [B, P].

    ``spans``, if given, receives one span per rank per phase and per round it takes part in.
    ``stats``, if given, receives the number of SimPy events processed (every event scheduled,
    since the run ends when none is left) and flows started. ``cache``: see :class:`RunCache`.
    """
    p = topology.world_size
    cache = _cache_for(topology, cache)
    env = simpy.Environment()
    net = make_network(mode, env, topology, monitor)
    comm = Comm(net, semantics)
    finish = np.zeros((len(phases), p))
    plans = [
        (
            ph,
            cache.tables(ph.schedule).rank_ops,
            [fb.tolist() for fb in ph.schedule.round_bytes(ph.units)],
        )
        for ph in phases
    ]

    def rank_proc(i: int):
        for b, (ph, ops, nbytes) in enumerate(plans):
            wait = float(ph.ready_s[i]) - env.now
            if wait > 0:
                yield env.timeout(wait)
            t0 = env.now
            for k, sends, recvs, reduce in ops[i]:
                tk = env.now
                fb = nbytes[k]
                w = Waiter(env)
                w.pending = 1  # held while posting
                for d, f in sends:
                    comm.post_send(i, d, fb[f], (b, k), w)
                got = 0.0
                for s, f in recvs:
                    comm.post_recv(i, s, (b, k), w)
                    got += fb[f]
                w.pending -= 1
                if w.pending:
                    yield w.event
                if reduce and gamma_s_per_byte > 0 and got > 0:
                    yield env.timeout(gamma_s_per_byte * got)
                if spans is not None:
                    spans.append(RankSpan(i, f"{ph.label} r{k}", tk, env.now))
            finish[b, i] = env.now
            if spans is not None:
                spans.append(RankSpan(i, ph.label or ph.schedule.key, t0, env.now))

    for i in range(p):
        env.process(rank_proc(i))
    if stats is None:
        env.run()
    else:
        stats["events"] = stats.get("events", 0) + _run_counting(env)
        stats["flows"] = stats.get("flows", 0) + net.monitor.flows
    return finish


def contention_free(
    schedules: Sequence[Schedule], topology: Topology, *, cache: RunCache | None = None
) -> str | None:
    """Whether the fast path is exact for these schedules on this topology.

    Returns ``None`` if not; ``"src"`` if every channel carries flows of a single sender;
    ``"dst"`` if some channel carries flows of several senders but all to one receiver (exact
    under rendezvous; under eager it needs the run-time check of :func:`run_fast`).
    """
    cache = _cache_for(topology, cache)
    tables = [cache.tables(s) for s in schedules]
    if not all(t.one_to_one for t in tables):
        return None
    pairs = np.unique(
        np.concatenate([t.pairs for t in tables] + [np.zeros((0, 2), np.int64)]), axis=0
    )
    srcs: dict[int, set[int]] = {}
    dsts: dict[int, set[int]] = {}
    for s, d in pairs.tolist():
        for c in topology.route(s, d).channels:
            srcs.setdefault(c, set()).add(s)
            dsts.setdefault(c, set()).add(d)
    verdict = "src"
    for c, ss in srcs.items():
        if len(ss) > 1:
            if len(dsts[c]) > 1:
                return None
            verdict = "dst"
    return verdict


def _run_stacked(
    ph: Phase, tables: _Tables, t: np.ndarray, eager: bool, gamma_s_per_byte: float
) -> np.ndarray:
    """:func:`run_fast` for schedules whose every round is a permutation (ring, Bruck, ...):
    all byte counts and transfer times at once, then a few gathers per round."""
    lo, count, dst, inv, bw, lat, reduce = tables.stacked
    units = ph.units if ph.schedule.unit_order is None else ph.units[ph.schedule.unit_order]
    cs = np.concatenate(([0.0], np.cumsum(np.concatenate((units, units)))))
    fb = cs[lo + count] - cs[lo]
    tx = fb / bw
    gam = gamma_s_per_byte * np.take_along_axis(fb, inv, axis=1) if gamma_s_per_byte > 0 else None
    if eager:
        for k in range(len(tx)):
            done = t + tx[k]
            arrive = done + lat[k]
            t = np.maximum(done, arrive[inv[k]])
            if gam is not None and reduce[k]:
                t += gam[k]
    else:
        total = tx + lat
        for k in range(len(tx)):
            arrive = np.maximum(t, t[dst[k]]) + total[k]
            t = np.maximum(arrive, arrive[inv[k]])
            if gam is not None and reduce[k]:
                t += gam[k]
    return t


def run_fast(
    phases: Sequence[Phase],
    topology: Topology,
    *,
    semantics: str = "rendezvous",
    gamma_s_per_byte: float = 0.0,
    check_overlap: bool = True,
    cache: RunCache | None = None,
) -> np.ndarray | None:
    """Evaluate ``phases`` with the contention-free recurrence; finish times [B, P].

    Per round, for flows src→dst of ``n`` bytes on a route with latency ``α`` and bandwidth
    ``B``: eager — the send ends at ``t_src + n/B``, the message arrives at ``t_src + n/B + α``;
    rendezvous — the transfer starts at ``max(t_src, t_dst)`` and both ends finish on arrival.
    A rank's time becomes the max over its sends and receives, plus ``γ × received bytes`` in a
    reducing round. Returns ``None`` when ``check_overlap`` finds two messages into one rank
    overlapping in time (the message level must run instead). ``cache``: see :class:`RunCache`.
    """
    p = topology.world_size
    cache = _cache_for(topology, cache)
    eager = semantics == "eager"
    t = np.zeros(p)
    busy_in = np.full(p, -np.inf)
    finish = np.zeros((len(phases), p))
    for b, ph in enumerate(phases):
        t = np.maximum(t, ph.ready_s)
        tables = cache.tables(ph.schedule)
        perms = tables.permutations
        if not check_overlap and ph.schedule.rounds and all(v is not None for v in perms):
            t = _run_stacked(ph, tables, t, eager, gamma_s_per_byte)
            finish[b] = t
            continue
        rounds = ph.schedule.rounds
        for rnd, fb, (bw, lat), inv in zip(
            rounds, ph.schedule.round_bytes(ph.units), tables.pair_tables, perms, strict=True
        ):
            tx = fb / bw
            if inv is not None:  # every rank sends once and receives once: gathers only
                if eager:
                    done = t + tx
                    arrive = done + lat
                    if check_overlap:
                        if np.any(t < busy_in[rnd.dst]):
                            return None
                        busy_in[rnd.dst] = done
                    new = np.maximum(done, arrive[inv])
                else:
                    arrive = np.maximum(t, t[rnd.dst]) + tx + lat
                    new = np.maximum(arrive, arrive[inv])
                if rnd.reduce and gamma_s_per_byte > 0:
                    new += gamma_s_per_byte * fb[inv]
                t = new
                continue
            src, dst = rnd.src, rnd.dst
            if eager:
                start = t[src]
                done = start + tx
                arrive = done + lat
                if check_overlap:
                    if np.any(start < busy_in[dst]):
                        return None
                    busy_in[dst] = done
                new = t.copy()
                new[src] = np.maximum(new[src], done)
            else:
                start = np.maximum(t[src], t[dst])
                arrive = start + tx + lat
                new = t.copy()
                new[src] = np.maximum(new[src], arrive)
            new[dst] = np.maximum(new[dst], arrive)
            if rnd.reduce and gamma_s_per_byte > 0:
                new[dst] += gamma_s_per_byte * fb
            t = new
        finish[b] = t
    return finish
