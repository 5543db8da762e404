"""The collective-level path (``path = "collective"``): the rounds evaluated with numpy.

* :func:`run_collective` — one vector operation per round over all ranks, using each route's
  uncontended time ``latency + bytes / bandwidth``. Exact whenever no two flows are ever on
  one channel at the same time. :func:`contention_free` decides that statically: every
  channel must carry flows of one sender only (a rank sends one flow at a time), or, of one
  receiver only; in the latter case under eager semantics :func:`run_collective` also checks
  at run time that messages into a rank never overlap, and returns ``None`` if they do.
* :func:`run_collective_steps` — the same path for many steps at once, bit for bit
  ``run_collective`` per step (``tests/simulator/test_fast_steps.py``); where shifting every
  rank by ``d`` maps the steps and the schedule onto themselves it computes ranks 0..d-1
  only.

Both are held to :mod:`vgcsim.simulator.paths.reference` by
``tests/simulator/test_engine_reference.py``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from vgcsim.simulator.collectives import Schedule, doubled_units, span_bytes
from vgcsim.simulator.paths.plan import Phase, RunCache, ScheduleTables, cache_for, call_s, is_eager
from vgcsim.simulator.topology import Topology

__all__ = ["contention_free", "run_collective", "run_collective_steps"]


def contention_free(
    schedules: Sequence[Schedule], topology: Topology, *, cache: RunCache | None = None
) -> str | None:
    """Whether the collective-level path is exact for these schedules on this topology.

    Returns ``None`` if not; ``"src"`` if every channel carries flows of a single sender;
    ``"dst"`` if some channel carries flows of several senders but all to one receiver (exact
    under rendezvous; under eager it needs the run-time check of :func:`run_collective`).
    """
    cache = cache_for(topology, cache)
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
    tables: ScheduleTables,
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
    cache = cache_for(topology, cache)
    tables = [cache.tables(s) for s in schedules]
    if not all(t.all_permutations for t in tables):
        return None
    ordered = [
        np.asarray(u, dtype=float) if s.unit_order is None else np.asarray(u)[:, s.unit_order]
        for u, s in zip(units, schedules, strict=True)
    ]
    d = _period(p, ready_s, ordered, tables)
    eager = is_eager(semantics)
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

    An optimization of :func:`vgcsim.simulator.paths.reference.run_reference` where
    :func:`contention_free` says so: held to it by
    ``tests/simulator/test_engine_reference.py::test_every_optimized_path_equals_the_reference_where_it_claims_to_be_exact``
    (every collective, both semantics, staggered ready times, γ and a call cost; to 1e-12:
    the same terms, summed by vector operations rather than in callback order).
    """
    p = topology.world_size
    cache = cache_for(topology, cache)
    eager = is_eager(semantics)
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
