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
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import simpy
from vgcsim.simulator.collectives import Schedule
from vgcsim.simulator.network import Comm, LinkMonitor, Waiter, make_network
from vgcsim.simulator.topology import Topology

__all__ = ["Phase", "RankSpan", "contention_free", "run_fast", "run_message"]

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


def _rank_ops(
    schedule: Schedule,
) -> list[list[tuple[int, list[tuple[int, int]], list[tuple[int, int]], bool]]]:
    """Per rank: [(round, [(dst, flow)], [(src, flow)], reduce)] for the rounds it takes part in."""
    hit = schedule._cache.get("rank_ops")
    if hit is not None:
        return hit
    ops: list[dict[int, tuple[list, list]]] = [{} for _ in range(schedule.world_size)]
    for k, rnd in enumerate(schedule.rounds):
        for f, (s, d) in enumerate(zip(rnd.src.tolist(), rnd.dst.tolist(), strict=True)):
            ops[s].setdefault(k, ([], []))[0].append((d, f))
            ops[d].setdefault(k, ([], []))[1].append((s, f))
    out = [
        [(k, sends, recvs, schedule.rounds[k].reduce) for k, (sends, recvs) in sorted(per.items())]
        for per in ops
    ]
    schedule._cache["rank_ops"] = out
    return out


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
) -> np.ndarray:
    """Simulate ``phases`` at message level; return each rank's finish time per phase [B, P].

    ``spans``, if given, receives one span per rank per phase and per round it takes part in.
    ``stats``, if given, receives the number of SimPy events scheduled and flows started.
    """
    p = topology.world_size
    env = simpy.Environment()
    net = make_network(mode, env, topology, monitor)
    comm = Comm(net, semantics)
    finish = np.zeros((len(phases), p))
    plans = [
        (ph, _rank_ops(ph.schedule), [fb.tolist() for fb in ph.schedule.round_bytes(ph.units)])
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
    env.run()
    if stats is not None:
        # SimPy numbers every scheduled event from one counter; its next value is the count.
        stats["events"] = stats.get("events", 0) + next(env._eid)  # type: ignore[attr-defined]
        stats["flows"] = stats.get("flows", 0) + net.monitor.flows
    return finish


def contention_free(schedules: Sequence[Schedule], topology: Topology) -> str | None:
    """Whether the fast path is exact for these schedules on this topology.

    Returns ``None`` if not; ``"src"`` if every channel carries flows of a single sender;
    ``"dst"`` if some channel carries flows of several senders but all to one receiver (exact
    under rendezvous; under eager it needs the run-time check of :func:`run_fast`).
    """
    if not all(s.one_to_one for s in schedules):
        return None
    pairs = np.unique(
        np.concatenate([s.pairs() for s in schedules] + [np.zeros((0, 2), np.int64)]), axis=0
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


def _pair_tables(schedule: Schedule, topology: Topology) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per round: (bandwidth, latency) of each flow's route."""
    key = ("pair_tables", id(topology))
    hit = schedule._cache.get(key)
    if hit is not None and hit[0] is topology:
        return hit[1]
    p = schedule.world_size
    pairs = schedule.pairs()
    bw_of = np.empty(len(pairs))
    lat_of = np.empty(len(pairs))
    for j, (s, d) in enumerate(pairs.tolist()):
        route = topology.route(s, d)
        bw_of[j] = route.bandwidth_Bps
        lat_of[j] = route.latency_s
    codes = pairs[:, 0] * p + pairs[:, 1]
    out = []
    for rnd in schedule.rounds:
        j = np.searchsorted(codes, rnd.src * p + rnd.dst)
        out.append((bw_of[j], lat_of[j]))
    schedule._cache[key] = (topology, out)
    return out


def _permutations(schedule: Schedule) -> list[np.ndarray | None]:
    """Per round: the inverse of ``dst`` when ``src`` is every rank in order and ``dst`` a
    permutation (then the round needs gathers only), else None."""
    hit = schedule._cache.get("permutations")
    if hit is None:
        p = schedule.world_size
        ident = np.arange(p)
        hit = []
        for rnd in schedule.rounds:
            if (
                len(rnd.src) == p
                and np.array_equal(rnd.src, ident)
                and len(np.unique(rnd.dst)) == p
            ):
                inv = np.empty(p, dtype=np.int64)
                inv[rnd.dst] = ident
                hit.append(inv)
            else:
                hit.append(None)
        schedule._cache["permutations"] = hit
    return hit


def _stacked(schedule: Schedule, topology: Topology) -> tuple[np.ndarray, ...]:
    """All-permutation schedules as [rounds, P] matrices: lo, count, dst, inverse, bw, lat."""
    key = ("stacked", id(topology))
    hit = schedule._cache.get(key)
    if hit is not None and hit[0] is topology:
        return hit[1]
    rounds = schedule.rounds
    tables = _pair_tables(schedule, topology)
    out = (
        np.stack([r.lo for r in rounds]),
        np.stack([r.count for r in rounds]),
        np.stack([r.dst for r in rounds]),
        np.stack(_permutations(schedule)),
        np.stack([bw for bw, _ in tables]),
        np.stack([lat for _, lat in tables]),
        np.array([r.reduce for r in rounds]),
    )
    schedule._cache[key] = (topology, out)
    return out


def _run_stacked(
    ph: Phase, topology: Topology, t: np.ndarray, eager: bool, gamma_s_per_byte: float
) -> np.ndarray:
    """:func:`run_fast` for schedules whose every round is a permutation (ring, Bruck, ...):
    all byte counts and transfer times at once, then a few gathers per round."""
    lo, count, dst, inv, bw, lat, reduce = _stacked(ph.schedule, topology)
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
) -> np.ndarray | None:
    """Evaluate ``phases`` with the contention-free recurrence; finish times [B, P].

    Per round, for flows src→dst of ``n`` bytes on a route with latency ``α`` and bandwidth
    ``B``: eager — the send ends at ``t_src + n/B``, the message arrives at ``t_src + n/B + α``;
    rendezvous — the transfer starts at ``max(t_src, t_dst)`` and both ends finish on arrival.
    A rank's time becomes the max over its sends and receives, plus ``γ × received bytes`` in a
    reducing round. Returns ``None`` when ``check_overlap`` finds two messages into one rank
    overlapping in time (the message level must run instead).
    """
    p = topology.world_size
    eager = semantics == "eager"
    t = np.zeros(p)
    busy_in = np.full(p, -np.inf)
    finish = np.zeros((len(phases), p))
    for b, ph in enumerate(phases):
        t = np.maximum(t, ph.ready_s)
        perms = _permutations(ph.schedule)
        if not check_overlap and ph.schedule.rounds and all(v is not None for v in perms):
            t = _run_stacked(ph, topology, t, eager, gamma_s_per_byte)
            finish[b] = t
            continue
        tables = _pair_tables(ph.schedule, topology)
        rounds = ph.schedule.rounds
        for rnd, fb, (bw, lat), inv in zip(
            rounds, ph.schedule.round_bytes(ph.units), tables, perms, strict=True
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
