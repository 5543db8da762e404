"""The fast engines: the message level and the collective-level recurrence.

What the simulator computes is defined by the reference engine,
:mod:`vgcsim.simulator.reference` (``path = "reference"``: one SimPy process per rank). The
functions here, and :func:`vgcsim.simulator.rounds.run_rounds`, are optimizations of it:
each computes the reference's finish times, on the runs where it claims to be exact, and
its docstring names the test that holds it to the reference. A user picks one with
``vgcsim simulate --path`` (``--set path=...``; ``auto`` takes the fastest exact one):

=============  ===================================  ==========================================
``--path``     function                             held to the reference by
=============  ===================================  ==========================================
reference      ``reference.run_reference``          (the definition)
message        :func:`run_message`                  ``tests/simulator/test_engine_reference.py``
collective     :func:`run_collective`,              ``test_engine_reference.py::test_every_``
               :func:`run_collective_steps`         ``optimized_path_equals_the_reference_...``
round          ``rounds.run_rounds``                the same test
=============  ===================================  ==========================================

A *phase* is one collective call: each rank's ready time (absolute seconds), the schedule and
its unit sizes. A step runs a list of phases; a rank starts phase b at max(its ready time,
the end of its phase b−1), so phases queue on one communication stream per rank. Every path
then charges the call's software cost, ``call_overhead_s`` × the calls its schedule's key
makes (:func:`call_s`; a link's ``call_overhead_s``), before the phase's first round: once
per call and rank, not per round, as the cost models do. Where the link prices messages by
size (its ``segments``), every path moves each flow's wire bytes
(``vgcsim.core.collectives.wire_bytes``, a ``wire`` function of the payload bytes) at the
route's rate, and reduces its payload bytes.

* :func:`run_message` — the reference's program without a SimPy process per rank: each rank
  is a plain generator that the flow network's completion callbacks resume directly (a
  trampoline over ``next()``), at that simulated instant and without a SimPy event of its
  own where the order of the instant's flow starts cannot matter, else through a zero-delay
  SimPy timeout queued where the process's wake-up would be. Exact everywhere: the same
  network, the same float operations.
* :func:`run_collective` — the same rounds evaluated with numpy, one vector operation per
  round over all ranks, using each route's uncontended time ``latency + bytes /
  bandwidth``. Exact whenever no two flows are ever on one channel at the same time.
  :func:`contention_free` decides that statically: every channel must carry flows of one
  sender only (a rank sends one flow at a time), or, of one receiver only; in the latter
  case under eager semantics :func:`run_collective` also checks at run time that messages
  into a rank never overlap, and returns ``None`` if they do.
* :func:`run_collective_steps` — the collective-level path for many steps at once, bit for
  bit ``run_collective`` per step (``tests/simulator/test_fast_steps.py``); where shifting
  every rank by ``d`` maps the steps and the schedule onto themselves it computes ranks
  0..d-1 only.

Derived tables of a schedule (who sends what in which round, route bandwidths and latencies
on a topology, the stacked matrices of the collective-level path) are built on first use
and kept in a :class:`RunCache` of one topology, which a caller that runs many steps keeps
for the run (``vgcsim.simulator.replay`` does); the frozen
:class:`~vgcsim.simulator.collectives.Schedule` itself is never written to. Without a cache
each call builds what it needs.
"""

from __future__ import annotations

import gc
import logging
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np
import simpy

from vgcsim.core.collectives import calls_per_collective
from vgcsim.core.errors import ConfigError, unknown_name
from vgcsim.simulator.collectives import Schedule, doubled_units, span_bytes
from vgcsim.simulator.network import SEMANTICS, LinkMonitor, make_network
from vgcsim.simulator.topology import Route, Topology

__all__ = [
    "Phase",
    "RankSpan",
    "RunCache",
    "call_s",
    "contention_free",
    "run_collective",
    "run_collective_steps",
    "run_fast",
    "run_fast_steps",
    "run_message",
]

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


#: Largest world size whose (src, dst) pairs are found through a P x P table (16 MiB of
#: booleans, then 64 MiB of indices, at this size) rather than by sorting every round's codes.
_DENSE_PAIRS_MAX = 4096

# (round, sends [(flow, dst)], receives [(flow, src)], operations, reduce) of one rank
_RoundOps = tuple[int, list[tuple[int, int]], list[tuple[int, int]], int, bool]


class _Tables:
    """What the engine derives from one schedule on one topology, each built on first use."""

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
    def message_plan(self) -> tuple[list[list[_RoundOps]], list[Route]]:
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

    def _one_to_one_plan(self) -> list[list[_RoundOps]]:
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
    _tables: dict[int, _Tables] = field(default_factory=dict, repr=False)

    def tables(self, schedule: Schedule) -> _Tables:
        hit = self._tables.get(id(schedule))
        if hit is None or hit.schedule is not schedule:
            hit = _Tables(schedule, self.topology)
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


def _is_eager(semantics: str) -> bool:
    """True for ``"eager"``, False for ``"rendezvous"``; any other name is refused
    (UnknownNameError listing :data:`~vgcsim.simulator.network.SEMANTICS`)."""
    if semantics not in SEMANTICS:
        raise unknown_name("message semantics", semantics, SEMANTICS)
    return semantics == "eager"


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


@contextmanager
def _gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector, as it was before afterwards. A message-level run
    allocates a flow, a timer and a few tuples per message and frees them by reference
    counting (it makes no cyclic garbage per message; the run's own few cycles are collected
    after it): the collector's passes over the live objects would be pure cost."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


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
    call_overhead_s: float = 0.0,
    wire: Callable[[np.ndarray], np.ndarray] | None = None,
) -> np.ndarray:
    """Simulate ``phases`` at message level; return each rank's finish time per phase [B, P].

    An optimization of :func:`vgcsim.simulator.reference.run_reference`, exact everywhere:
    ``tests/simulator/test_engine_reference.py`` holds every rank's finish time to the
    reference's bit for bit (every collective, three topologies, both sharing models and
    matchings, several phases with ready times, call cost and wire bytes) and, under FIFO
    sharing, the event count too.

    Each rank is a plain generator walking its rounds: it posts the round's sends and
    receives, then yields ``None`` until they are all done, or a positive number of seconds
    to wait (for its ready time, or to reduce ``γ × received bytes``). A send and its receive
    meet in a slot per flow of the phase (rendezvous: the second to be posted starts the
    flow, and its arrival completes both; eager: the send starts the flow at once and
    completes when its last byte has left, the receive at max(posted, arrival)). A rank whose
    operations are done is resumed from the callback that finished them, at that simulated
    instant and without a SimPy event of its own, where the order of the instant's flow
    starts cannot matter (:meth:`~vgcsim.simulator.network.FairNetwork.order_free`); else by
    a zero-delay timeout, queued where a SimPy process's wake-up event would be, so those
    runs process their events in that order. Timed waits are SimPy timeouts.

    ``spans``, if given, receives one span per rank per phase and per round it takes part in.
    ``stats``, if given, receives ``flows`` (flows started) and ``events``: the discrete
    events of the run, each counted once — every SimPy event processed (flow timers, reshare
    events, timed waits; the run ends when none is left, so every one scheduled), every
    resumption of a rank whose round's operations completed without a SimPy event of its
    own, and each rank's start and end.
    These are the events a SimPy process per rank, resumed by one event per completed round,
    processes for the same run (its Initialize, round-completion and termination events), so
    the count is that of the bare SimPy loop of ``benchmarks/simulator.py``: one per
    process start, resumption and end. Under FIFO sharing (every resumption queued) it is
    exactly that run's count. Under fair sharing a rank resumed inline may run ahead of an
    operation of its next round that completes later at the same instant; it is then
    resumed once more where the process would have found that operation done, and the
    count exceeds the process run's by one per such resumption (by none where no two of a
    rank's operations complete at one instant, as in an uncontended ring with latency > 0).
    ``cache``: see :class:`RunCache`. ``call_overhead_s``: each rank waits :func:`call_s`
    of a phase's schedule (a timed wait) before its first round.
    """
    with _gc_paused():
        return _run_message(
            phases,
            topology,
            mode,
            semantics,
            gamma_s_per_byte,
            monitor,
            spans,
            stats,
            cache,
            call_overhead_s,
            wire,
        )


def _run_message(
    phases: Sequence[Phase],
    topology: Topology,
    mode: str,
    semantics: str,
    gamma_s_per_byte: float,
    monitor: LinkMonitor | None,
    spans: list[RankSpan] | None,
    stats: dict[str, int] | None,
    cache: RunCache | None,
    call_overhead_s: float = 0.0,
    wire: Callable[[np.ndarray], np.ndarray] | None = None,
) -> np.ndarray:
    p = topology.world_size
    cache = _cache_for(topology, cache)
    env = simpy.Environment()
    net = make_network(mode, env, topology, monitor)
    finish = np.zeros((len(phases), p))
    eager = _is_eager(semantics)
    gamma = gamma_s_per_byte
    # per phase: (index, phase, rank plans, flow routes, flow bytes, ready times)
    plans = []
    for b, ph in enumerate(phases):
        rank_plans, routes = cache.tables(ph.schedule).message_plan
        fb = ph.schedule.round_bytes(ph.units)
        nbytes = np.concatenate(fb).tolist() if fb else []
        wbytes = nbytes if wire is None or not fb else wire(np.concatenate(fb)).tolist()
        plans.append(
            (
                b,
                ph,
                rank_plans,
                routes,
                nbytes,
                ph.ready_s.tolist(),
                call_s(ph.schedule, call_overhead_s),
                wbytes,
            )
        )
    slots = [bytearray(len(plan[3])) for plan in plans]  # per flow: who posted (see below)
    pending = [0] * p  # operations of each rank's current round not done yet (+1 while posting)
    runnable: deque[int] = deque()  # ranks to resume, in the order they became ready
    draining = False
    woken = 0  # resumptions of a rank whose round's operations completed
    ended = 0
    start_message = net.start_message
    start_flow = net.start
    order_free = net.order_free
    timeout = env.timeout

    def run_from(i: int) -> None:
        """Resume rank ``i``, then every rank made runnable meanwhile, until none is left; a
        rank that yields a delay gets a timeout."""
        nonlocal draining, ended
        draining = True
        try:
            while True:
                delay = next(gens[i], -1.0)
                if delay is not None:  # None: it waits for its operations
                    if delay > 0:
                        timeout(delay, i).callbacks.append(timed_out)
                    else:  # -1.0: the rank has ended (it yields only delays > 0)
                        ended += 1
                if not runnable:
                    break
                i = runnable.popleft()
        finally:
            draining = False

    def timed_out(event: simpy.Event) -> None:
        # A SimPy callback: it never runs while run_from does (nothing there steps the
        # environment), so it may resume its rank at once.
        run_from(event.value)

    def ready(i: int) -> None:
        """Rank ``i``'s operations are done: resume it now where the order of this instant's
        starts cannot matter, else in a zero-delay SimPy event queued behind the events
        already due now (what a SimPy process waiting on an event would see)."""
        nonlocal woken
        if order_free():
            woken += 1
            if draining:
                runnable.append(i)
            else:
                run_from(i)
        else:
            timeout(0.0, i).callbacks.append(timed_out)

    def one_done(i: int) -> None:
        n = pending[i] - 1
        pending[i] = n
        if n == 0:
            ready(i)

    def arrived(flow) -> None:
        """A rendezvous flow's last byte arrived: its send and its receive are done."""
        nonlocal woken
        s = flow.src
        n = pending[s] - 1
        pending[s] = n
        d = flow.dst
        m = pending[d] - 1
        pending[d] = m
        if n == 0:
            if m == 0:
                ready(s)
                ready(d)
                return
            i = s
        elif m == 0:
            i = d
        else:
            return
        if draining or not order_free():
            ready(i)
        else:  # ready(i), inline: the common case of the message level
            woken += 1
            run_from(i)

    def eager_send(i: int, d: int, g: int, nbytes: float, slot: bytearray) -> None:
        pending[i] += 1

        def landed() -> None:
            if slot[g] == 1:  # the receive is waiting
                one_done(d)
            else:
                slot[g] = 2

        start_flow(i, d, nbytes, lambda: one_done(i), landed)

    def rank(i: int):
        for b, ph, rank_plans, routes, nbytes, ready_s, entry_s, wbytes in plans:
            slot = slots[b]
            wait = ready_s[i] - env.now
            if wait > 0:
                yield wait
            t0 = env.now
            if entry_s > 0:  # the call's software cost, once per call (a timed wait)
                yield entry_s
            for k, sends, recvs, n_ops, reduce in rank_plans[i]:
                if spans is not None:
                    tk = env.now
                if eager:
                    pending[i] = 1  # held while posting
                    for g, d in sends:
                        eager_send(i, d, g, wbytes[g], slot)
                    for g, _ in recvs:
                        if slot[g] != 2:  # not arrived yet: wait for it
                            slot[g] = 1
                            pending[i] += 1
                else:
                    # slot 1: the other side has posted; the second side starts the flow
                    pending[i] = n_ops + 1  # + 1 held while posting
                    for g, d in sends:
                        if slot[g]:
                            start_message(routes[g], i, d, wbytes[g], arrived)
                        else:
                            slot[g] = 1
                    for g, s in recvs:
                        if slot[g]:
                            start_message(routes[g], s, i, wbytes[g], arrived)
                        else:
                            slot[g] = 1
                n = pending[i] - 1
                pending[i] = n
                if n:
                    yield None
                if reduce and gamma > 0:
                    got = 0.0
                    for g, _ in recvs:
                        got += nbytes[g]
                    reduce_s = gamma * got
                    if reduce_s > 0:  # a rank yields no 0 (it could underflow to 0)
                        yield reduce_s
                if spans is not None:
                    spans.append(RankSpan(i, f"{ph.label} r{k}", tk, env.now))
            finish[b, i] = env.now
            if spans is not None:
                spans.append(RankSpan(i, ph.label or ph.schedule.key, t0, env.now))

    gens = [rank(i) for i in range(p)]
    runnable.extend(range(1, p))
    run_from(0)
    if stats is None:
        env.run()
    else:
        processed = _run_counting(env)
        stats["events"] = stats.get("events", 0) + processed + woken + p + ended
        stats["flows"] = stats.get("flows", 0) + net.monitor.flows
    return finish


def contention_free(
    schedules: Sequence[Schedule], topology: Topology, *, cache: RunCache | None = None
) -> str | None:
    """Whether the collective-level path is exact for these schedules on this topology.

    Returns ``None`` if not; ``"src"`` if every channel carries flows of a single sender;
    ``"dst"`` if some channel carries flows of several senders but all to one receiver (exact
    under rendezvous; under eager it needs the run-time check of :func:`run_collective`).
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
    ph: Phase,
    tables: _Tables,
    t: np.ndarray,
    eager: bool,
    gamma_s_per_byte: float,
    wire: Callable[[np.ndarray], np.ndarray] | None = None,
) -> np.ndarray:
    """:func:`run_collective` for schedules whose every round is a permutation (ring, Bruck, ...):
    all byte counts and transfer times at once, then a few gathers per round."""
    lo, count, dst, inv, bw, lat, reduce = tables.stacked
    units = ph.units if ph.schedule.unit_order is None else ph.units[ph.schedule.unit_order]
    fb = span_bytes(*doubled_units(units), lo, count)
    tx = (fb if wire is None else wire(fb)) / bw
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


def _divisors(p: int) -> list[int]:
    return [d for d in range(1, p + 1) if p % d == 0]


def _periodic(x: np.ndarray, d: int) -> bool:
    """True when every row of ``x`` [S, P] repeats with period ``d``."""
    s, p = x.shape
    return bool(
        np.array_equal(x.reshape(s, p // d, d), np.broadcast_to(x[:, None, :d], (s, p // d, d)))
    )


def _exact_sums(v: np.ndarray) -> bool:
    """True when every partial sum of ``v`` twice over (the fast path's cumulative sums) is an
    exact float: whole, non-negative unit sizes summing below 2**53."""
    return bool(np.all(v >= 0) and np.all(v == np.floor(v)) and np.all(2 * v.sum(axis=1) < 2.0**53))


def _period(p: int, ready_s: Sequence[np.ndarray], units: Sequence[np.ndarray], tables) -> int:
    """The smallest ``d`` dividing P by which shifting every rank maps the steps onto
    themselves: ready times and (ordered) unit sizes repeat every ``d`` ranks, the sums of
    units are exact (so a shifted window of units sums to the same float) and every schedule
    is shift-invariant by ``d``; P when there is none."""
    if not all(v.shape[1] == p for v in units) or not all(_exact_sums(v) for v in units):
        return p
    for d in _divisors(p)[:-1]:
        if (
            all(_periodic(r, d) for r in ready_s)
            and all(_periodic(v, d) for v in units)
            and all(t.shift_invariant(d) for t in tables)
        ):
            return d
    return p


def run_collective_steps(
    schedules: Sequence[Schedule],
    ready_s: Sequence[np.ndarray],
    units: Sequence[np.ndarray],
    topology: Topology,
    *,
    semantics: str = "rendezvous",
    gamma_s_per_byte: float = 0.0,
    cache: RunCache | None = None,
    call_overhead_s: float = 0.0,
    wire: Callable[[np.ndarray], np.ndarray] | None = None,
) -> np.ndarray | None:
    """:func:`run_collective` without the overlap check for S steps at once; finish times
    [B, S, P]. Held to :func:`run_collective` bit for bit by
    ``tests/simulator/test_fast_steps.py``, and to the reference engine by
    ``tests/simulator/test_engine_reference.py::test_every_optimized_path_equals_the_reference_where_it_claims_to_be_exact``.

    Step s runs phases b = 0..B-1 with ready times ``ready_s[b][s]`` [P] and unit sizes
    ``units[b][s]`` of ``schedules[b]``; every step gives bit for bit what
    ``run_collective(..., check_overlap=False)`` gives for it alone (the same float operations on
    each rank's value, in the same order). Returns ``None`` unless every round of every
    schedule is a permutation (ring, Bruck, recursive doubling, ...).

    Symmetry: when moving every rank by ``d`` maps the inputs and the schedules onto
    themselves (``modulo`` extrapolation of W workers with W dividing P, equal ready times,
    a homogeneous topology; see :func:`_period`), every rank's time equals that of rank
    i mod d after every round, so only ranks 0..d-1 are computed and the result is tiled:
    O(S·rounds·d) work instead of O(S·rounds·P).
    """
    p = topology.world_size
    cache = _cache_for(topology, cache)
    tables = [cache.tables(s) for s in schedules]
    if not all(t.all_permutations for t in tables):
        return None
    ordered = [
        np.asarray(u, dtype=float) if s.unit_order is None else np.asarray(u)[:, s.unit_order]
        for u, s in zip(units, schedules, strict=True)
    ]
    d = _period(p, ready_s, ordered, tables)
    eager = _is_eager(semantics)
    n_steps = ready_s[0].shape[0]
    t = np.zeros((n_steps, d))
    finish = np.empty((len(schedules), n_steps, p))
    for b, (tab, ready, v) in enumerate(zip(tables, ready_s, ordered, strict=True)):
        t = np.maximum(t, ready[:, :d])
        entry = call_s(tab.schedule, call_overhead_s)
        if entry > 0:
            t = t + entry
        doubled, cs = doubled_units(v)
        reduce = [r.reduce for r in tab.schedule.rounds]
        for (lo, hi, dst, inv, bw, lat), red in zip(tab.reduced(d), reduce, strict=True):
            fb = span_bytes(doubled, cs, lo, hi - lo)
            tx = (fb if wire is None else wire(fb)) / bw
            if eager:
                done = t + tx
                arrive = done + lat
                t = np.maximum(done, arrive[:, inv])
            else:
                arrive = np.maximum(t, t[:, dst]) + (tx + lat)
                t = np.maximum(arrive, arrive[:, inv])
            if red and gamma_s_per_byte > 0:
                t += gamma_s_per_byte * fb[:, inv]
        finish[b] = np.tile(t, p // d)
    return finish


def run_collective(
    phases: Sequence[Phase],
    topology: Topology,
    *,
    semantics: str = "rendezvous",
    gamma_s_per_byte: float = 0.0,
    check_overlap: bool = True,
    cache: RunCache | None = None,
    call_overhead_s: float = 0.0,
    wire: Callable[[np.ndarray], np.ndarray] | None = None,
) -> np.ndarray | None:
    """Evaluate ``phases`` with the contention-free recurrence; finish times [B, P].

    Per round, for flows src→dst of ``n`` bytes on a route with latency ``α`` and bandwidth
    ``B``: eager — the send ends at ``t_src + n/B``, the message arrives at ``t_src + n/B + α``;
    rendezvous — the transfer starts at ``max(t_src, t_dst)`` and both ends finish on arrival.
    A rank's time becomes the max over its sends and receives, plus ``γ × received bytes`` in a
    reducing round. Returns ``None`` when ``check_overlap`` finds two messages into one rank
    overlapping in time (the message level must run instead). ``cache``: see :class:`RunCache`.

    An optimization of :func:`vgcsim.simulator.reference.run_reference` where
    :func:`contention_free` says so: held to it by
    ``tests/simulator/test_engine_reference.py::test_every_optimized_path_equals_the_reference_where_it_claims_to_be_exact``
    (every collective, both semantics, staggered ready times, γ and a call cost; to 1e-12:
    the same terms, summed by vector operations rather than in callback order).
    """
    p = topology.world_size
    cache = _cache_for(topology, cache)
    eager = _is_eager(semantics)
    t = np.zeros(p)
    busy_in = np.full(p, -np.inf)
    finish = np.zeros((len(phases), p))
    for b, ph in enumerate(phases):
        t = np.maximum(t, ph.ready_s)
        entry = call_s(ph.schedule, call_overhead_s)
        if entry > 0:  # the call's software cost before its first round (module docstring)
            t = t + entry
        tables = cache.tables(ph.schedule)
        perms = tables.permutations
        if not check_overlap and ph.schedule.rounds and all(v is not None for v in perms):
            t = _run_stacked(ph, tables, t, eager, gamma_s_per_byte, wire)
            finish[b] = t
            continue
        rounds = ph.schedule.rounds
        for rnd, fb, (bw, lat), inv in zip(
            rounds, ph.schedule.round_bytes(ph.units), tables.pair_tables, perms, strict=True
        ):
            tx = (fb if wire is None else wire(fb)) / bw
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


# The names these had before the paths named them (still imported by other modules' tests).
run_fast = run_collective
run_fast_steps = run_collective_steps
