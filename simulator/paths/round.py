"""The round-level path: each round of a collective as a fluid max-min problem, solved with numpy.

The reference engine (:mod:`vgcsim.simulator.paths.reference`) and its fast twin, the message level
(:func:`vgcsim.simulator.paths.message.run_message`), recompute max-min fair rates
(:class:`vgcsim.simulator.network.FairNetwork`) whenever a flow starts or ends anywhere:
about ``P`` flows and ``2P`` rate changes per round. This path (``path = "round"``)
evaluates the same model one round at a time:

1. *Start times* — as in the collective-level recurrence (``run_collective``): rank ``i`` enters a
   round at ``t_i``; a flow ``src → dst`` starts at ``max(t_src, t_dst)`` under rendezvous
   semantics, at ``t_src`` under eager semantics.
2. *Fluid max-min* — the round's flows share channels. Rates change only when one of them
   starts or ends, so the round is a short sequence of water-filling problems. Flows are
   split once per route pattern (cached across rounds: the rounds of a ring all share one)
   into *components* that share no channel. A *bundle* is a component in which every
   channel is crossed either by all of its flows or by one only: with equal private caps
   ``c`` (the narrowest private channel) and shared capacity ``C`` (the narrowest shared
   channel) it is processor sharing with a per-flow cap. When its flows start together,
   sorted sizes ``n₁ ≤ … ≤ n_m`` finish at

       T_j = s + Σ_{i ≤ j} (n_i − n_{i−1}) / min(c, C / (m − i + 1))       (n₀ = 0)

   — one sort and one cumulative sum for all bundles at once. Any other component (flows
   starting at different times, several bottlenecks) is stepped event by event with
   :func:`vgcsim.simulator.waterfill.maxmin_rates` (static progressive filling) between
   consecutive starts and ends.
3. *Completion* — a flow's last byte arrives one route latency after it has left; rank
   times advance exactly as at the message level (rendezvous: both ends at arrival; eager:
   the sender when its last byte has left, the receiver at arrival), plus ``γ × received
   bytes`` in a reducing round.

**Exactness.** The message level couples rounds only through channels: a flow of round
``k + 1`` that starts while a flow of round ``k`` is still sending on one of its channels
slows that flow down, which an isolated round does not see. With ``check=True``,
:func:`run_rounds` keeps, per channel, the time its last flow's last byte left and returns
``None`` as soon as a flow starts on a channel before that time (some rank ran ahead into a
channel still in use): the caller must then run the message level. When it returns a
result, no channel carried flows of two rounds (or two phases) at once, so each round's
fluid problem is exactly the message level's — the same max-min rates between the same
events — and the finish times agree up to floating-point rounding (about 1e-15 relative).
That holds, for example, for equal sizes with symmetric placement, and for sizes and ready
times that repeat with a period dividing the ranks-per-leaf stride of a spread leaf-spine
(every flow on a leaf uplink then belongs to ranks in the same state).

With ``check=False`` the rounds are evaluated as if isolated even where ranks run ahead: an
approximation that ignores cross-round sharing (it gives each round's flows at least the
bandwidth they have at the message level). Its error is measured in ``docs/simulator.md``;
the replay never uses it unasked.

Only the ``fair`` sharing model is evaluated here (``fifo`` queues whole flows, which a
fluid round does not describe).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from vgcsim.core.errors import ConfigError, unknown_name
from vgcsim.simulator.collectives import Schedule, doubled_units, span_bytes
from vgcsim.simulator.network import SEMANTICS
from vgcsim.simulator.paths.plan import Phase, call_s
from vgcsim.simulator.topology import Topology

__all__ = ["RoundCache", "RoundShape", "run_rounds"]

log = logging.getLogger(__name__)

# Remaining bytes below this share of a flow's size are rounding residue (the message
# level's sliver rule, vgcsim.simulator.network._EPS_BYTES, scaled the same way).
_EPS_REL = 1e-9


@dataclass(eq=False)
class RoundShape:
    """The flows of one route pattern (``src``, ``dst``) on a topology and their components.

    Built once per distinct pattern and shared by every round with that pattern.
    """

    topology: Topology
    src: np.ndarray
    dst: np.ndarray

    @cached_property
    def _routes(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """CSR incidence (ptr, channels), latency and route bandwidth of every flow."""
        route = self.topology.route
        ptr = [0]
        chans: list[int] = []
        lat = np.empty(len(self.src))
        bw = np.empty(len(self.src))
        for f, (s, d) in enumerate(zip(self.src.tolist(), self.dst.tolist(), strict=True)):
            r = route(s, d)
            chans.extend(r.channels)
            ptr.append(len(chans))
            lat[f] = r.latency_s
            bw[f] = r.bandwidth_Bps
        return np.asarray(ptr, dtype=np.int64), np.asarray(chans, dtype=np.int64), lat, bw

    @property
    def n_flows(self) -> int:
        return len(self.src)

    @property
    def flow_ptr(self) -> np.ndarray:
        return self._routes[0]

    @property
    def flow_channels(self) -> np.ndarray:
        return self._routes[1]

    @property
    def latency_s(self) -> np.ndarray:
        return self._routes[2]

    @cached_property
    def inc_flow(self) -> np.ndarray:
        """Flow index of every incidence entry."""
        return np.repeat(np.arange(self.n_flows), np.diff(self.flow_ptr))

    @cached_property
    def channel_order(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Incidence entries sorted by channel: (the flow of each entry, distinct channels,
        start of each channel's segment)."""
        ch = self.flow_channels
        order = np.argsort(ch, kind="stable")
        uniq, starts = np.unique(ch[order], return_index=True)
        return self.inc_flow[order], uniq, starts

    @cached_property
    def permutation(self) -> np.ndarray | None:
        """The inverse of ``dst`` when ``src`` is every rank in order and ``dst`` a permutation."""
        p = self.topology.world_size
        ident = np.arange(p)
        if len(self.src) != p or not np.array_equal(self.src, ident):
            return None
        if len(np.unique(self.dst)) != p:
            return None
        inv = np.empty(p, dtype=np.int64)
        inv[self.dst] = ident
        return inv

    @cached_property
    def _components(self) -> tuple[list[np.ndarray], list[bool], np.ndarray, np.ndarray]:
        """Components (flows linked through shared channels), whether each is a bundle with
        equal private caps, and per component its shared capacity and private cap."""
        n = self.n_flows
        ptr, chans = self.flow_ptr, self.flow_channels
        cap = self.topology.capacity_Bps
        count = np.bincount(chans, minlength=self.topology.n_channels)
        parent = list(range(n))

        def find(a: int) -> int:
            while parent[a] != a:
                parent[a] = parent[parent[a]]
                a = parent[a]
            return a

        first: dict[int, int] = {}
        for f, c in zip(self.inc_flow.tolist(), chans.tolist(), strict=True):
            if count[c] < 2:
                continue
            g = first.setdefault(c, f)
            ra, rb = find(f), find(g)
            if ra != rb:
                parent[max(ra, rb)] = min(ra, rb)
        roots = np.fromiter((find(f) for f in range(n)), dtype=np.int64, count=n)
        comps = [np.flatnonzero(roots == r) for r in np.unique(roots)]
        bundle, shared_cap, private_cap = [], [], []
        for flows in comps:
            m = len(flows)
            shared: set[int] = set()
            privates = []
            ok = True
            for f in flows.tolist():
                cs = chans[ptr[f] : ptr[f + 1]]
                priv = cs[count[cs] == 1]
                privates.append(cap[priv].min() if len(priv) else np.inf)
                for c in cs[count[cs] > 1].tolist():
                    shared.add(c)
                    ok = ok and count[c] == m
            ok = ok and len(set(privates)) == 1
            bundle.append(bool(ok))
            shared_cap.append(cap[sorted(shared)].min() if shared else np.inf)
            private_cap.append(privates[0] if ok else np.nan)
        return comps, bundle, np.asarray(shared_cap), np.asarray(private_cap)

    @cached_property
    def bundles(self) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
        """The bundles as a padded matrix of flow indices [bundles, m] (padding repeats the
        bundle's first flow), the mask of real entries and the rate of each step of
        processor sharing [bundles, m]; None if there is no bundle."""
        comps, bundle, shared_cap, private_cap = self._components
        sel = [k for k, b in enumerate(bundle) if b]
        if not sel:
            return None
        sizes = np.array([len(comps[k]) for k in sel])
        width = int(sizes.max())
        idx = np.empty((len(sel), width), dtype=np.int64)
        for row, k in enumerate(sel):
            idx[row, :] = comps[k][0]
            idx[row, : sizes[row]] = comps[k]
        j = np.arange(width)
        real = j[None, :] < sizes[:, None]
        active = np.maximum(sizes[:, None] - j[None, :], 1)
        with np.errstate(divide="ignore"):
            rate = np.minimum(private_cap[sel][:, None], shared_cap[sel][:, None] / active)
        return idx, real, rate

    @cached_property
    def bundle_row(self) -> np.ndarray | None:
        """The bundle row of every flow when every flow is in a bundle, else None."""
        if self.bundles is None or len(self.other_flows):
            return None
        idx, real, _ = self.bundles
        row = np.empty(self.n_flows, dtype=np.int64)
        row[idx[real]] = np.nonzero(real)[0]
        return row

    @cached_property
    def other_flows(self) -> np.ndarray:
        """Flows of components that are not bundles (stepped event by event)."""
        comps, bundle, _, _ = self._components
        rest = [c for c, b in zip(comps, bundle, strict=True) if not b]
        return np.sort(np.concatenate(rest)) if rest else np.zeros(0, dtype=np.int64)

    @cached_property
    def bundle_first(self) -> np.ndarray:
        """The first flow of each bundle."""
        return self.bundles[0][:, 0]

    def even(self, nbytes: np.ndarray) -> np.ndarray:
        """Per round (rows of ``nbytes``, [rounds, flows]): every flow in a bundle and the
        flows of each bundle of the same positive size."""
        if self.bundle_row is None:
            return np.zeros(len(nbytes), dtype=bool)
        n0 = nbytes[:, self.bundle_first]
        return (n0.min(axis=1) > 0) & (nbytes == n0[:, self.bundle_row]).all(axis=1)

    def synced(
        self, start: np.ndarray, nbytes: np.ndarray, even: bool | None = None
    ) -> tuple[np.ndarray, np.ndarray] | None:
        """(start, bytes) per bundle when every flow is in a bundle and the flows of each
        bundle start together with the same positive size; else None. ``even``: that of
        :meth:`even` for this round, when already known."""
        row = self.bundle_row
        if row is None or even is False:
            return None
        first = self.bundle_first
        s0 = start[first]
        # equal bytes are equal numbers here (no NaN; a -0.0 only costs the general path)
        if start.tobytes() != s0[row].tobytes():
            return None
        n0 = nbytes[first]
        if even is None and not (n0.min() > 0 and nbytes.tobytes() == n0[row].tobytes()):
            return None
        return s0, n0

    def ends(self, start: np.ndarray, nbytes: np.ndarray) -> np.ndarray:
        """When each flow's last byte leaves, for flows starting at ``start`` with ``nbytes``."""
        end = np.empty(self.n_flows)
        others = self.other_flows
        if self.bundles is not None:
            left = self._bundle_ends(start, nbytes, end)
            if len(left):
                others = np.union1d(others, left)
        if len(others):
            _events(self, others, start, nbytes, end)
        return end

    def _bundle_ends(self, start: np.ndarray, nbytes: np.ndarray, end: np.ndarray) -> np.ndarray:
        """Fill ``end`` for the bundles whose flows start together (sorted sizes, one
        cumulative sum); return the flows of the other bundles."""
        idx, real, rate = self.bundles
        s = start[idx]
        together = np.all(s == s[:, :1], axis=1)
        rest = idx[~together][real[~together]]
        if not together.all():
            idx, real, rate, s = idx[together], real[together], rate[together], s[together]
        if not len(idx):
            return rest
        n = np.where(real, nbytes[idx], np.inf)
        order = np.argsort(n, axis=1, kind="stable")
        rows = np.arange(len(idx))[:, None]
        ns = n[rows, order]
        with np.errstate(invalid="ignore"):  # padding: inf - inf, past every real flow
            step = np.diff(ns, axis=1, prepend=0.0)
            t = s[:, :1] + np.cumsum(step / rate, axis=1)
        sorted_real = real[rows, order]
        end[idx[rows, order][sorted_real]] = t[sorted_real]
        return rest


@dataclass(eq=False)
class RoundCache:
    """Route patterns of the rounds run on one topology, each built on first use.

    A caller that runs many steps keeps one for the run (as ``RunCache``)."""

    topology: Topology
    _by_pattern: dict[tuple[bytes, bytes], RoundShape] = field(default_factory=dict, repr=False)
    _by_schedule: dict[int, tuple[Schedule, list[RoundShape]]] = field(
        default_factory=dict, repr=False
    )
    _guards: dict[tuple, tuple[list[Schedule], dict[int, _Guard | None]]] = field(
        default_factory=dict, repr=False
    )
    _stacked: dict[int, tuple[Schedule, np.ndarray | None, np.ndarray | None]] = field(
        default_factory=dict, repr=False
    )

    def round_bytes(self, schedule: Schedule, units: np.ndarray) -> Sequence[np.ndarray]:
        """Bytes of every flow of every round (``Schedule.round_bytes``), in one array
        operation when every round has the same number of flows."""
        hit = self._stacked.get(id(schedule))
        if hit is None or hit[0] is not schedule:
            rounds = schedule.rounds
            same = len({len(r.src) for r in rounds}) == 1
            lo = np.stack([r.lo for r in rounds]) if same else None
            count = np.stack([r.count for r in rounds]) if same else None
            hit = (schedule, lo, count)
            self._stacked[id(schedule)] = hit
        _, lo, count = hit
        if lo is None:
            return schedule.round_bytes(units)
        v = units if schedule.unit_order is None else units[schedule.unit_order]
        return span_bytes(*doubled_units(v), lo, count)

    def shapes(self, schedule: Schedule) -> list[RoundShape]:
        """The route pattern of each round of ``schedule``."""
        hit = self._by_schedule.get(id(schedule))
        if hit is not None and hit[0] is schedule:
            return hit[1]
        out = []
        for rnd in schedule.rounds:
            key = (rnd.src.tobytes(), rnd.dst.tobytes())
            shape = self._by_pattern.get(key)
            if shape is None:
                shape = RoundShape(self.topology, rnd.src, rnd.dst)
                self._by_pattern[key] = shape
            out.append(shape)
        self._by_schedule[id(schedule)] = (schedule, out)  # held: its id is not reused
        return out

    def guards(self, schedules: Sequence[Schedule], eager: bool) -> dict[int, _Guard | None]:
        """Per route pattern (by id) of these schedules, the incidences the isolation check
        must watch: those on channels where flows of two rounds can meet.

        A channel that only one rank ever sends on cannot: a rank starts a round after its
        sends of the previous one have left. Under rendezvous neither can a channel into one
        receiver only: a flow into a rank starts after that rank entered the round, after
        every earlier message into it has arrived."""
        uniq = sorted({id(s): s for s in schedules}.values(), key=id)
        key = (tuple(id(s) for s in uniq), eager)
        hit = self._guards.get(key)
        if hit is not None and all(a is b for a, b in zip(hit[0], uniq, strict=True)):
            return hit[1]
        shapes = list({id(sh): sh for s in uniq for sh in self.shapes(s)}.values())
        n = self.topology.n_channels
        senders = [set() for _ in range(n)]
        receivers = [set() for _ in range(n)]
        for sh in shapes:
            fl, ch = sh.inc_flow.tolist(), sh.flow_channels.tolist()
            for f, c in zip(fl, ch, strict=True):
                senders[c].add(int(sh.src[f]))
                receivers[c].add(int(sh.dst[f]))
        watch = np.array(
            [len(senders[c]) > 1 and (eager or len(receivers[c]) > 1) for c in range(n)],
            dtype=bool,
        )
        out: dict[int, _Guard | None] = {}
        for sh in shapes:
            inc, chans, seg = sh.channel_order
            keep = watch[chans]
            if not keep.any():
                out[id(sh)] = None
                continue
            counts = np.diff(np.append(seg, len(inc)))
            entry = np.repeat(keep, counts)
            kept_counts = counts[keep]
            out[id(sh)] = _Guard(
                inc[entry], chans[keep], np.concatenate(([0], np.cumsum(kept_counts)[:-1]))
            )
        self._guards[key] = (uniq, out)
        return out


@dataclass(frozen=True, eq=False)
class _Guard:
    """Incidences watched by the isolation check, sorted by channel: the flow of each entry,
    the distinct channels and the start of each channel's segment."""

    flow: np.ndarray
    channels: np.ndarray
    seg: np.ndarray


def _events(
    shape: RoundShape,
    flows: np.ndarray,
    start: np.ndarray,
    nbytes: np.ndarray,
    end: np.ndarray,
) -> None:
    """Fill ``end`` for ``flows`` by stepping their fluid max-min problem from event to event
    (a flow starts or ends), the rates of the active flows from static progressive filling."""
    from vgcsim.simulator.waterfill import maxmin_rates

    ptr, chans = shape.flow_ptr, shape.flow_channels
    cap = shape.topology.capacity_Bps
    s = start[flows]
    rem = nbytes[flows].astype(float)
    tol = _EPS_REL * np.maximum(rem, 1.0)
    done = rem <= 0
    e = np.where(done, s, np.nan)
    started = done.copy()
    now = float(s[~done].min()) if (~done).any() else 0.0
    lengths = np.diff(ptr)[flows]
    while not done.all():
        started |= s <= now
        act = np.flatnonzero(started & ~done)
        if len(act) == 0:
            now = float(s[~started].min())
            continue
        f = flows[act]
        sub_ptr = np.concatenate(([0], np.cumsum(lengths[act])))
        sub_ch = np.concatenate([chans[ptr[g] : ptr[g + 1]] for g in f.tolist()])
        r = np.asarray(maxmin_rates(sub_ptr, sub_ch, cap), dtype=float)
        fin = now + rem[act] / r
        t_fin = float(fin.min())
        waiting = s[~started]
        t_next = min(t_fin, float(waiting.min())) if len(waiting) else t_fin
        rem[act] -= r * (t_next - now)
        ended = (fin <= t_next) | (rem[act] <= tol[act])
        e[act[ended]] = np.where(fin[ended] <= t_next, fin[ended], t_next)
        done[act[ended]] = True
        now = t_next
    end[flows] = e


def run_rounds(
    phases: Sequence[Phase],
    topology: Topology,
    *,
    semantics: str = "rendezvous",
    gamma_s_per_byte: float = 0.0,
    check: bool = True,
    cache: RoundCache | None = None,
    call_overhead_s: float = 0.0,
) -> np.ndarray | None:
    """Evaluate ``phases`` round by round as fluid max-min problems; finish times [B, P].

    Per flow ``f`` of ``n_f`` bytes on a route of latency ``α_f``: it starts at ``s_f``
    (rendezvous: ``max(t_src, t_dst)``; eager: ``t_src``), its last byte leaves at ``e_f``
    from the round's max-min fluid solution (module docstring), and arrives at
    ``e_f + α_f``. A rank's time becomes the max of its own, its sends' completions
    (rendezvous: arrival; eager: ``e_f``) and its receives' arrivals, plus
    ``γ × received bytes`` in a reducing round (γ = ``gamma_s_per_byte``). Source: the
    max-min fair flow model of :mod:`vgcsim.simulator.network` (progressive filling,
    Bertsekas & Gallager, *Data Networks*, 2nd ed., §6.5.2).

    With ``check`` (the default), returns ``None`` when a flow starts on a channel that a
    flow of an earlier round or phase is still sending on: the rounds are then not
    isolated and only the message level is exact. ``cache``: see :class:`RoundCache`.

    An optimization of :func:`vgcsim.simulator.paths.reference.run_reference` wherever it returns a
    result: held to it by
    ``tests/simulator/test_engine_reference.py::test_every_optimized_path_equals_the_reference_where_it_claims_to_be_exact``
    (every collective on a spread 4:1 leaf-spine, both semantics, to 1e-12) and to the
    message level on random sizes, ready times and fabrics by ``tests/simulator/test_rounds.py``.
    """
    p = topology.world_size
    if semantics not in SEMANTICS:
        raise unknown_name("message semantics", semantics, SEMANTICS)
    if cache is None:
        cache = RoundCache(topology)
    elif cache.topology is not topology:
        raise ConfigError("a RoundCache serves the topology it was made for, not another one")
    eager = semantics == "eager"
    guards = cache.guards([ph.schedule for ph in phases], eager) if check else {}
    busy = np.full(topology.n_channels, -np.inf)  # when each channel's last byte left
    # A run of rounds with one route pattern whose bundles are in step (see `synced`): the
    # same pairs as the previous round, so only a bundle's shared channels can see two rounds,
    # and it suffices that each bundle starts after its previous round ended. ``pending``:
    # the last round's ends, written into ``busy`` when the run ends.
    run_shape: RoundShape | None = None
    run_end = np.zeros(0)
    pending: tuple[_Guard, np.ndarray, np.ndarray] | None = None
    t = np.zeros(p)
    finish = np.zeros((len(phases), p))
    for b, ph in enumerate(phases):
        t = np.maximum(t, ph.ready_s) + call_s(ph.schedule, call_overhead_s)
        schedule = ph.schedule
        shapes = cache.shapes(schedule)
        fbs = cache.round_bytes(schedule, ph.units)
        evens: Sequence[bool | None] = [None] * len(shapes)
        if isinstance(fbs, np.ndarray) and all(sh is shapes[0] for sh in shapes):
            evens = shapes[0].even(fbs).tolist()  # every round at once
        for k, (rnd, fb, shape, even) in enumerate(
            zip(schedule.rounds, fbs, shapes, evens, strict=True)
        ):
            src, dst = rnd.src, rnd.dst
            inv = shape.permutation
            if inv is not None:  # src is every rank in order
                start = t if eager else np.maximum(t, t[dst])
            else:
                start = t[src] if eager else np.maximum(t[src], t[dst])
            synced = shape.synced(start, fb, even)
            guard = guards.get(id(shape))
            if synced is not None:
                s0, n0 = synced
                e0 = s0 + n0 / shape.bundles[2][:, 0]
                end = e0[shape.bundle_row]
            if guard is not None and synced is not None and shape is run_shape:
                if np.any(s0 < run_end):
                    log.debug(
                        "%s round %d: a bundle starts before its last round ended", ph.label, k
                    )
                    return None
                pending = (guard, end, fb)
            else:
                if pending is not None:
                    _mark(busy, *pending)
                    pending = None
                if guard is not None and not _free(busy, guard, start, fb):
                    log.debug("%s round %d: a flow starts on a channel still in use", ph.label, k)
                    return None
                if synced is None:
                    end = shape.ends(start, fb)
                    run_shape = None
                else:
                    run_shape = shape
                if guard is not None:
                    pending = (guard, end, fb)
            if synced is not None:
                run_end = e0
            arrive = end + shape.latency_s
            if inv is not None:
                new = np.maximum(end if eager else arrive, arrive[inv])
            else:
                new = t.copy()
                np.maximum.at(new, src, end if eager else arrive)
                np.maximum.at(new, dst, arrive)
            if rnd.reduce and gamma_s_per_byte > 0:
                got = np.bincount(dst, weights=fb, minlength=p)
                new = np.where(got > 0, new + gamma_s_per_byte * got, new)
            t = new
        finish[b] = t
    return finish


def _free(busy: np.ndarray, guard: _Guard, start: np.ndarray, nbytes: np.ndarray) -> bool:
    """Whether every watched channel is idle (its last byte left) when its flows start."""
    inc = guard.flow
    s = start[inc]
    if nbytes.min() <= 0:
        s = np.where(nbytes[inc] > 0, s, np.inf)  # an empty message occupies no channel
    return not np.any(np.minimum.reduceat(s, guard.seg) < busy[guard.channels])


def _mark(busy: np.ndarray, guard: _Guard, end: np.ndarray, nbytes: np.ndarray) -> None:
    """Record when each watched channel's last byte of a round left."""
    inc = guard.flow
    e = end[inc]
    if nbytes.min() <= 0:
        e = np.where(nbytes[inc] > 0, e, -np.inf)
    ch = guard.channels
    busy[ch] = np.maximum(busy[ch], np.maximum.reduceat(e, guard.seg))
