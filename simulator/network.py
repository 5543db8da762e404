"""The flow-level network: bandwidth sharing on full-duplex links, messages, and a link monitor.

A message of ``n`` bytes from rank ``a`` to rank ``b`` is a *flow* over the directed channels
of ``a``'s route to ``b``. Its bytes leave at the flow's current rate; its last byte arrives
one path latency (sum of the channels' latencies) after it has left. A zero-byte message costs
the path latency alone; a message to oneself costs nothing.

Two sharing models (``MODES``):

* ``"fair"`` — **max-min fair** rates by progressive filling over every channel a flow
  crosses (:func:`vgcsim.simulator.waterfill.maxmin_rates`): repeatedly find the smallest
  remaining capacity per unfrozen flow over the channels, give that share to every unfrozen
  flow on a channel at that level, freeze them, subtract their rate from the channels they
  cross. Rates are recomputed once per simulated instant at which flows start or end, and
  only for the flows connected to them through shared channels (disjoint groups cannot
  influence each other under max-min fairness), so an uncontended flow costs O(path length).
* ``"fifo"`` — each channel serves one flow at a time, first come first served, at full
  bandwidth: a flow waits until it holds every channel of its route (requested in channel
  order, so no deadlock), then sends at the route's narrowest bandwidth and releases them.

With no two flows on a channel at once both models give ``latency + n / bandwidth``.

Message semantics (``SEMANTICS``):

* ``"eager"`` — the flow starts when the sender posts the send; the send completes when the
  last byte has left; the receive completes at max(posted, arrival).
* ``"rendezvous"`` — the flow starts only when both the send and the matching receive are
  posted (no extra handshake time is charged); both complete at arrival.

Observability: a :class:`LinkMonitor` accumulates bytes and busy time (time with at least one
flow) per channel, and optionally records every flow interval for a timeline.

Entry points: :class:`Comm` (``post_send``/``post_recv`` into a :class:`Waiter` whose event
fires when a rank's operations are done) is what the reference engine
(:mod:`vgcsim.simulator.paths.reference`) posts through; ``start`` (callbacks) and
``start_message`` (one ``done(flow)``, no callback per flow to build) are what the message
level (:func:`vgcsim.simulator.paths.message.run_message`) calls. Both reach the same flows. The
fair network's lazy flows and batched reshares (:class:`FairNetwork`) are optimizations of
progressive filling recomputed at every start and end:
``tests/simulator/test_maxmin_reference.py`` holds every flow's end to a certified max-min
reference, ``test_network_events.py`` its events to the hand-counted ones, and
``test_simgrid_crosscheck.py`` every flow's end to SimGrid's exact solver where it is
installed.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from heapq import heappop, heappush
from itertools import chain, compress

import numpy as np
import simpy

from vgcsim.core.errors import unknown_name
from vgcsim.core.options import MODES, SEMANTICS
from vgcsim.simulator.topology import Route, Topology
from vgcsim.simulator.waterfill import maxmin_rates

__all__ = [
    "MODES",
    "SEMANTICS",
    "Comm",
    "FairNetwork",
    "FifoNetwork",
    "LinkMonitor",
    "make_network",
]

# MODES and SEMANTICS: the replay vocabulary of vgcsim.core.options

# A flow's state in the fair network.
# alone on its channels / released after its last byte left alone / rate shared / ended shared
_LAZY, _SOLO_DONE, _SHARED, _SHARED_DONE = 1, 2, 3, 4

_new = object.__new__  # a _Msg is made without a class call (see _Msg)


@dataclass
class LinkMonitor:
    """Bytes and busy seconds per channel; optionally every (channel, start, end, bytes) interval."""

    n_channels: int
    record_intervals: bool = False
    intervals: list[tuple[int, float, float, float, int, int]] = field(default_factory=list)
    flows: int = 0
    _bytes: list[float] = field(init=False, repr=False)
    _busy: list[float] = field(init=False, repr=False)
    _active: list[int] = field(init=False, repr=False)
    _since: list[float] = field(init=False, repr=False)
    # Flows that were alone on their channels, not yet added: the fair network hands them
    # over in one append each and they are added, in that order, before anything else
    # touches the sums (so every sum takes the same additions in the same order).
    _held: list[_Flow | _Msg] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._bytes = [0.0] * self.n_channels
        self._busy = [0.0] * self.n_channels
        self._active = [0] * self.n_channels
        self._since = [0.0] * self.n_channels
        self._held = []

    @property
    def bytes(self) -> np.ndarray:
        """Bytes that crossed each channel."""
        self._add_held()
        return np.asarray(self._bytes)

    @property
    def busy_s(self) -> np.ndarray:
        """Seconds each channel carried at least one flow."""
        self._add_held()
        return np.asarray(self._busy)

    def _add_held(self) -> None:
        held = self._held
        if held:
            items = held[:]
            held.clear()  # in place: the network appends to this very list
            for f in items:
                self.solo_flow(f.channels, f.start, f.t_end, f.nbytes, f.src, f.dst)

    def flow_started(self, channels: tuple[int, ...], nbytes: float, now: float) -> None:
        self.flows += 1
        self.channels_taken(channels, nbytes, now)

    def channels_taken(self, channels: tuple[int, ...], nbytes: float, since: float) -> None:
        """A flow of ``nbytes`` holds ``channels`` from ``since`` (not counted as a new flow)."""
        if self._held:
            self._add_held()
        active, busy_since, nb = self._active, self._since, self._bytes
        for c in channels:
            nb[c] += nbytes
            if active[c] == 0:
                busy_since[c] = since
            active[c] += 1

    def flow_ended(
        self, channels: tuple[int, ...], start: float, now: float, nbytes: float, src: int, dst: int
    ) -> None:
        if self._held:
            self._add_held()
        active = self._active
        for c in channels:
            active[c] -= 1
            if active[c] == 0:
                self._busy[c] += now - self._since[c]
        if self.record_intervals:
            for c in channels:
                self.intervals.append((c, start, now, nbytes, src, dst))

    def solo_flow(
        self, channels: tuple[int, ...], start: float, end: float, nbytes: float, src: int, dst: int
    ) -> None:
        """A flow that was alone on ``channels`` from ``start`` to ``end`` (already counted):
        its bytes and busy time in one step, without the overlap bookkeeping."""
        if self._held:
            self._add_held()
        nb, busy = self._bytes, self._busy
        dur = end - start
        for c in channels:
            nb[c] += nbytes
            busy[c] += dur
        if self.record_intervals:
            for c in channels:
                self.intervals.append((c, start, end, nbytes, src, dst))


Callback = Callable[[], None]


class _Flow:
    __slots__ = (
        "channels",
        "remaining",
        "rate",
        "t_last",
        "version",
        "start",
        "nbytes",
        "src",
        "dst",
        "latency_s",
        "on_sent",
        "on_arrived",
        "state",
        "t_end",
        "waiters",
        "id",
        "done",
    )

    def __init__(
        self,
        route: Route,
        nbytes: float,
        now: float,
        src: int,
        dst: int,
        on_sent: Callback | None = None,
        on_arrived: Callback | None = None,
        waiters: tuple[Waiter, ...] = (),
        done: Callable[[_Flow], None] | None = None,
        state: int = 0,
        rate: float = 0.0,
        t_end: float = math.inf,
    ):
        # Each slot is written once here; remaining, t_last, version and id only matter to
        # a shared flow and are written when it becomes one (FairNetwork._share).
        self.channels = route.channels
        self.latency_s = route.latency_s
        self.nbytes = float(nbytes)
        self.rate = rate
        self.start = now
        self.src = src
        self.dst = dst
        self.on_sent = on_sent
        self.on_arrived = on_arrived
        self.waiters = waiters
        self.done = done  # called with the flow when its last byte has arrived
        self.state = state  # one of _LAZY, _SOLO_DONE, _SHARED, _SHARED_DONE in the fair network
        self.t_end = t_end  # a lazy flow's last byte leaves then


class _Msg:
    """A flow of :meth:`FairNetwork.start_message` while it is alone on its channels (lazy):
    what that needs, written once. If another flow meets it, a :class:`_Flow` takes over
    (:meth:`FairNetwork._unlazy`) and this one's arrival timer is void."""

    __slots__ = (
        "route",
        "channels",
        "start",
        "t_end",
        "nbytes",
        "src",
        "dst",
        "state",
        "done",
        "rate",
    )
    on_sent = None  # nobody waits for its last byte to leave
    # Its fields are set where it starts (FairNetwork.start_message): route, channels, start,
    # nbytes, src, dst and done there; state, rate and t_end (its last byte leaves then) when
    # it goes lazy. No __init__: a class call into a Python __init__ costs about as much as
    # the rest of a lone message's start.


class _NetworkBase:
    """Shared part of both sharing models: routes, latency, delivery, the monitor."""

    def __init__(
        self, env: simpy.Environment, topology: Topology, monitor: LinkMonitor | None = None
    ):
        self.env = env
        self.topology = topology
        self.monitor = monitor if monitor is not None else LinkMonitor(topology.n_channels)
        self._route = topology.route

    def start(
        self,
        src: int,
        dst: int,
        nbytes: float,
        on_sent: Callback | None = None,
        on_arrived: Callback | None = None,
        waiters: tuple[Waiter, ...] = (),
    ) -> None:
        """Start a message now; call ``on_sent`` when its last byte has left and
        ``on_arrived`` (and ``done_one`` of each of ``waiters``) when it has arrived."""
        if src == dst:
            if on_sent is not None:
                on_sent()
            if on_arrived is not None:
                on_arrived()
            for w in waiters:
                w.done_one()
            return
        route = self._route(src, dst)
        flow = _Flow(route, nbytes, self.env.now, src, dst, on_sent, on_arrived, waiters)
        if nbytes <= 0:
            self._transmitted(flow)
            return
        self._start(flow, route)

    def order_free(self) -> bool:
        """True when what happens next does not depend on the order in which this instant's
        flows start: then a rank may go on the moment its operations are done, rather than
        in an event queued behind the others of this instant. Never in general (a FIFO
        channel serves flows in the order they came)."""
        return False

    def start_message(
        self, route: Route, src: int, dst: int, nbytes: float, done: Callable[[_Flow], None]
    ) -> None:
        """Start a message of ``nbytes`` from ``src`` to ``dst`` over ``route`` (that pair's
        route) now; call ``done(flow)`` when its last byte has arrived (``flow.src``,
        ``flow.dst`` say whose). The message level's rendezvous transfers take this path:
        no callback per flow to build, nobody waiting for the last byte to leave."""
        flow = _Flow(route, nbytes, self.env.now, src, dst, done=done)
        if src == dst:
            done(flow)
        elif nbytes <= 0:
            self._transmitted(flow)
        else:
            self._start(flow, route)

    def transfer(self, src: int, dst: int, nbytes: float) -> tuple[simpy.Event, simpy.Event]:
        """Start a message now; return (last byte left, last byte arrived) events."""
        sent, arrived = self.env.event(), self.env.event()
        self.start(src, dst, nbytes, sent.succeed, arrived.succeed)
        return sent, arrived

    def _transmitted(self, flow: _Flow) -> None:
        if flow.on_sent is not None:
            flow.on_sent()
        if flow.on_arrived is None and not flow.waiters and flow.done is None:
            return
        if flow.latency_s > 0:
            self.env.timeout(flow.latency_s, flow).callbacks.append(self._arrival_cb)
        else:
            self._arrived(flow)

    def _arrival_cb(self, event: simpy.Event) -> None:
        self._arrived(event.value)

    @staticmethod
    def _arrived(flow: _Flow) -> None:
        if flow.done is not None:
            flow.done(flow)
        if flow.on_arrived is not None:
            flow.on_arrived()
        for w in flow.waiters:
            w.pending -= 1
            if w.pending == 0:
                w.event.succeed()

    def _start(self, flow: _Flow, route: Route) -> None:
        raise NotImplementedError


class FairNetwork(_NetworkBase):
    """Max-min fair sharing by progressive filling, recomputed once per instant per group.

    A flow alone on its channels is *lazy*: one timer at its arrival, no rate bookkeeping;
    it is released from its channels when that timer fires or when a later flow finds it
    there after its last byte has left. A flow that meets another on a channel is *shared*:
    every change to the shared flows at one simulated instant (flows that start, lazy flows
    that meet a newcomer, flows whose last byte leaves) marks their channels, and one
    reshare event at that instant recomputes the rates of every flow connected to a marked
    channel (:func:`vgcsim.simulator.waterfill.maxmin_rates`; a short pure-Python twin for
    small groups gives the same floats). Rates only matter over positive durations, so
    batching the changes of one instant does not change any result. Each shared flow whose
    rate changed gets a finish time ``now + remaining / rate`` in a heap; a single timer
    waits for the earliest one, and every flow due at that instant ends together.
    """

    # Groups up to this many flows are solved in Python: numpy's per-call overhead dominates
    # there (on a 2-core machine the two took the same time at about 100 flows in many
    # filling steps, and at about 500 in one).
    SMALL_GROUP = 64

    def __init__(
        self, env: simpy.Environment, topology: Topology, monitor: LinkMonitor | None = None
    ):
        super().__init__(env, topology, monitor)
        n = topology.n_channels
        self._lazy_on: list[_Flow | _Msg | None] = [None] * n  # the lazy flow alone on a channel
        self._on: list[set[_Flow]] = [set() for _ in range(n)]  # shared flows per channel
        self._cap_arr = np.asarray(topology.capacity_Bps, dtype=float)
        self._cap = self._cap_arr.tolist()
        self._dirty: set[int] = set()  # channels whose shared flows changed at this instant
        self._flush_pending = False
        self._ended: list[_Flow] = []  # shared flows ended since the last reshare
        self._grown = False  # a flow became shared since the last reshare
        # The last large group solved with numpy, and its CSR: (flows, the set of them, flow
        # lengths, local channel of each entry, global id of each local channel). While no
        # flow becomes shared, groups only shrink, so its flows still shared are a union of
        # whole groups and may be solved again as they are.
        self._last: tuple[list[_Flow], set[_Flow], np.ndarray, np.ndarray, np.ndarray] | None
        self._last = None
        self._heap: list[tuple[float, int, int, _Flow]] = []  # (finish, flow id, version, flow)
        self._timer_t = math.inf
        self._timer_token = 0
        self._ids = 0
        self._n_shared = 0  # flows in the shared state
        self._timeout = env.timeout
        self._on_lazy_end = self._lazy_cb  # bound once: one callback per lazy flow
        # where a released lazy flow goes: held by the monitor (one append) unless it
        # records intervals, which must come in the order flows end
        mon = self.monitor
        self._hold = None if mon.record_intervals else mon._held.append

    # -- flow start -----------------------------------------------------------------------

    def order_free(self) -> bool:
        """No shared flow and no reshare pending: every flow is lazy, and a lazy flow's
        times (start + bytes / bandwidth, + latency) and whether a newcomer finds it still
        sending (its last byte's time against now) do not depend on the order of starts."""
        return self._n_shared == 0 and not self._flush_pending

    def start(
        self,
        src: int,
        dst: int,
        nbytes: float,
        on_sent: Callback | None = None,
        on_arrived: Callback | None = None,
        waiters: tuple[Waiter, ...] = (),
    ) -> None:
        if src == dst or nbytes <= 0:
            super().start(src, dst, nbytes, on_sent, on_arrived, waiters)
            return
        route = self._route(src, dst)
        flow = _Flow(route, nbytes, self.env.now, src, dst, on_sent, on_arrived, waiters)
        self.start_message(route, src, dst, nbytes, None, flow)

    def start_message(
        self,
        route: Route,
        src: int,
        dst: int,
        nbytes: float,
        done: Callable[[_Flow], None] | None,
        flow: _Flow | _Msg | None = None,
    ) -> None:
        """Start a message (or ``flow``, a flow of :meth:`start` with its own callbacks) and
        put it on its channels: lazy if it is alone there and nobody waits for its last byte
        to leave (one timer at its arrival; until then it stays on its channels, and a later
        flow finding it there after ``t_end`` releases it), else shared. A message alone on
        its channels stays the light :class:`_Msg` (the message level's common case, one
        call per message); a :class:`_Flow` takes over where it meets another."""
        if src == dst or nbytes <= 0:
            super().start_message(route, src, dst, nbytes, done)
            return
        now = self.env.now
        if flow is None:
            flow = _new(_Msg)
            flow.route = route
            flow.channels = route.channels
            flow.start = now
            flow.nbytes = nbytes
            flow.src = src
            flow.dst = dst
            flow.done = done
        self.monitor.flows += 1
        lazy_on, on = self._lazy_on, self._on
        chans = flow.channels
        for c in chans:
            g = lazy_on[c]
            if g is not None:
                if g.t_end > now:
                    break
                self._release(g)  # its last byte has left: the channel is free
            elif on[c]:
                break
        else:
            rate = flow.rate = route.bandwidth_Bps
            if flow.on_sent is None:  # a _Msg's is None too (a class attribute)
                flow.state = _LAZY
                tx = flow.nbytes / rate
                flow.t_end = now + tx
                for c in chans:
                    lazy_on[c] = flow
                self._timeout(tx + route.latency_s, flow).callbacks.append(self._on_lazy_end)
                return
            self._share(flow, now, flow.nbytes)
            self._push(flow, now)
            self._arm()
            return
        if type(flow) is _Msg:
            flow = _Flow(route, flow.nbytes, now, flow.src, flow.dst, done=flow.done)
        # Contended: lazy neighbours become shared first (their channels were busy since
        # their own start), then this flow; one reshare at this instant sets every rate.
        for c in chans:
            g = lazy_on[c]
            if g is not None:
                if g.t_end <= now:
                    self._release(g)
                else:
                    self._unlazy(g, now)
        self._share(flow, now, flow.nbytes)
        self._mark(chans)

    def _share(self, flow: _Flow, now: float, remaining: float) -> None:
        """``flow`` shares its channels from now on, with ``remaining`` bytes to send."""
        self._n_shared += 1
        self._grown = True
        self._ids += 1
        flow.id = self._ids
        flow.state = _SHARED
        flow.remaining = remaining
        flow.version = 0
        flow.t_last = now
        on = self._on
        for c in flow.channels:
            on[c].add(flow)
        self.monitor.channels_taken(flow.channels, flow.nbytes, flow.start)

    def _unlazy(self, flow: _Flow | _Msg, now: float) -> None:
        """A lazy flow met another one: from now on its rate is shared."""
        lazy_on = self._lazy_on
        for c in flow.channels:
            lazy_on[c] = None
        if type(flow) is _Msg:  # a full flow takes over; the message's timer becomes void
            msg = flow
            msg.state = _SHARED
            flow = _Flow(
                msg.route, msg.nbytes, msg.start, msg.src, msg.dst, done=msg.done, rate=msg.rate
            )
        remaining = flow.nbytes - flow.rate * (now - flow.start)
        flow.rate = 0.0  # forces a new finish time at the reshare; its arrival timer is void
        self._share(flow, now, remaining)

    def _release(self, flow: _Flow | _Msg) -> None:
        """A lazy flow's last byte has left: free its channels, account its interval."""
        flow.state = _SOLO_DONE
        lazy_on = self._lazy_on
        for c in flow.channels:
            lazy_on[c] = None
        hold = self._hold
        if hold is not None:
            hold(flow)  # added to the monitor's sums later, in this order
        else:
            self.monitor.solo_flow(
                flow.channels, flow.start, flow.t_end, flow.nbytes, flow.src, flow.dst
            )

    def _lazy_cb(self, event: simpy.Event) -> None:
        """A lazy flow's arrival timer: it releases the flow if no later flow has, and
        delivers it; void if the flow met another one (the shared model ends it then)."""
        flow = event.value
        state = flow.state
        if state == _LAZY:
            self._release(flow)
        elif state != _SOLO_DONE:
            return  # it met another flow: this timer is void, the shared model ends it
        done = flow.done
        if done is not None:
            done(flow)
        else:
            self._arrived(flow)

    # -- reshare --------------------------------------------------------------------------

    def _mark(self, channels: tuple[int, ...]) -> None:
        self._dirty.update(channels)
        if not self._flush_pending:
            self._flush_pending = True
            self.env.timeout(0).callbacks.append(self._flush_cb)

    def _flush_cb(self, _event: simpy.Event) -> None:
        self._flush_pending = False
        dirty, self._dirty = self._dirty, set()
        ended, self._ended = self._ended, []
        if self._grown:
            self._grown = False
            self._last = None
        last = self._last
        if last is not None and all(f in last[1] for f in ended):
            # Only flows of the last large group ended: solve what is left of it. It may
            # hold more than the groups of the ended flows; the others keep their rates
            # (max-min rates of disjoint groups are independent), so nothing changes there.
            self._reshare_last(last)
        elif dirty:
            group = self._group(dirty)
            if group:
                self._reshare(group)
        self._arm()

    def _group(self, channels: set[int]) -> list[_Flow]:
        """Every shared flow connected to ``channels`` through shared channels (each channel
        scanned once)."""
        on = self._on
        seen: set[_Flow] = set()
        visited = set(channels)
        stack = list(channels)
        while stack:
            for g in on[stack.pop()]:
                if g not in seen:
                    seen.add(g)
                    for c in g.channels:
                        if c not in visited:
                            visited.add(c)
                            stack.append(c)
        return list(seen)

    def _reshare(self, group: list[_Flow]) -> None:
        if len(group) <= self.SMALL_GROUP:
            self._apply(group, _maxmin_small(group, self._cap))
            return
        chans = [f.channels for f in group]
        lens = np.fromiter(map(len, chans), np.int64, len(chans))
        flat = np.fromiter(chain.from_iterable(chans), np.int64, int(lens.sum()))
        used, local = np.unique(flat, return_inverse=True)
        self._last = (group, set(group), lens, local, used)
        self._apply(group, self._maxmin_numpy(lens, local, used))

    def _reshare_last(
        self, last: tuple[list[_Flow], set[_Flow], np.ndarray, np.ndarray, np.ndarray]
    ) -> None:
        group, members, lens, local, used = last
        alive = np.fromiter((f.state == _SHARED for f in group), bool, len(group))
        local = local[np.repeat(alive, lens)]
        lens = lens[alive]
        group = list(compress(group, alive.tolist()))
        self._last = (group, members, lens, local, used)
        if len(group) <= self.SMALL_GROUP:
            self._apply(group, _maxmin_small(group, self._cap))
        else:
            self._apply(group, self._maxmin_numpy(lens, local, used))

    def _maxmin_numpy(self, lens: np.ndarray, local: np.ndarray, used: np.ndarray) -> list[float]:
        ptr = np.zeros(len(lens) + 1, np.int64)
        np.cumsum(lens, out=ptr[1:])
        return maxmin_rates(ptr, local, self._cap_arr[used]).tolist()

    def _apply(self, group: list[_Flow], rates: list[float]) -> None:
        """New rates: a flow whose rate changed has sent ``rate × elapsed`` since its last
        change and gets a new finish time; the others keep theirs."""
        now = self.env.now
        heap = self._heap
        for f, rate in zip(group, rates, strict=True):
            if rate != f.rate:
                f.remaining -= f.rate * (now - f.t_last)
                f.t_last = now
                f.rate = rate
                f.version += 1
                if rate > 0:
                    heappush(heap, (now + max(f.remaining, 0.0) / rate, f.id, f.version, f))

    # -- finish ---------------------------------------------------------------------------

    def _push(self, flow: _Flow, now: float) -> None:
        flow.version += 1
        heappush(self._heap, (now + flow.remaining / flow.rate, flow.id, flow.version, flow))

    def _arm(self) -> None:
        """Make sure a timer waits for the earliest shared flow's last byte."""
        heap = self._heap
        while heap and heap[0][2] != heap[0][3].version:
            heappop(heap)  # superseded by a rate change
        if heap and heap[0][0] < self._timer_t:
            t = heap[0][0]
            self._timer_t = t
            self._timer_token += 1
            self.env.timeout(t - self.env.now, self._timer_token).callbacks.append(self._timer_cb)

    def _timer_cb(self, event: simpy.Event) -> None:
        if event.value != self._timer_token:
            return  # an earlier finish was armed since
        self._timer_t = math.inf
        now = self.env.now
        heap = self._heap
        due: list[_Flow] = []
        while heap and heap[0][0] <= now:
            _, _, version, f = heappop(heap)
            if version == f.version:
                due.append(f)
        on, mon = self._on, self.monitor
        for f in due:
            f.state = _SHARED_DONE
            self._n_shared -= 1
            f.remaining = 0.0
            f.version += 1
            for c in f.channels:
                on[c].discard(f)
            mon.flow_ended(f.channels, f.start, now, f.nbytes, f.src, f.dst)
        # Flows due together leave together: only a flow that leaves others behind on its
        # channels calls for a reshare (not one whose neighbour ends in this same timer).
        for f in due:
            if any(on[c] for c in f.channels):
                self._ended.append(f)
                self._mark(f.channels)
        for f in due:
            self._transmitted(f)
        if not self._flush_pending:
            self._arm()


def _maxmin_small(group: list[_Flow], capacity: list[float]) -> list[float]:
    """:func:`vgcsim.simulator.waterfill.maxmin_rates` in plain Python for a few flows: the
    same iterations, the same operations in the same order, hence the same floats."""
    cap: dict[int, float] = {}
    count: dict[int, int] = {}
    for f in group:
        for c in f.channels:
            if c in count:
                count[c] += 1
            else:
                count[c] = 1
                cap[c] = capacity[c]
    rates = [0.0] * len(group)
    pending = range(len(group))
    while pending:
        m = min(cap[c] / n for c, n in count.items() if n)
        sat = {c for c, n in count.items() if n and cap[c] / n == m}
        still = []
        for i in pending:
            chans = group[i].channels
            if sat.isdisjoint(chans):
                still.append(i)
                continue
            rates[i] = m
            for c in chans:
                cap[c] -= m
                count[c] -= 1
        for c, v in cap.items():
            if v < 0.0:
                cap[c] = 0.0
        pending = still
    return rates


class FifoNetwork(_NetworkBase):
    """Per-channel first-come-first-served: a flow holds all its channels while it sends."""

    def __init__(
        self, env: simpy.Environment, topology: Topology, monitor: LinkMonitor | None = None
    ):
        super().__init__(env, topology, monitor)
        self._res = [simpy.Resource(env, capacity=1) for _ in range(topology.n_channels)]

    def _start(self, flow: _Flow, route: Route) -> None:
        self.env.process(self._send(flow, route))

    def _send(self, flow: _Flow, route: Route):
        held = []
        for c in sorted(route.channels):
            req = self._res[c].request()
            yield req
            held.append((c, req))
        start = self.env.now
        flow.start = start
        self.monitor.flow_started(route.channels, flow.nbytes, start)
        yield self.env.timeout(flow.nbytes / route.bandwidth_Bps)
        for c, req in held:
            self._res[c].release(req)
        self.monitor.flow_ended(
            route.channels, start, self.env.now, flow.nbytes, flow.src, flow.dst
        )
        self._transmitted(flow)


_NETWORKS = {"fair": FairNetwork, "fifo": FifoNetwork}


def make_network(
    mode: str, env: simpy.Environment, topology: Topology, monitor: LinkMonitor | None = None
) -> _NetworkBase:
    """The network of sharing model ``mode`` (one of :data:`MODES`)."""
    try:
        cls = _NETWORKS[mode]
    except KeyError:
        raise unknown_name("network mode", mode, MODES) from None
    return cls(env, topology, monitor)


class Waiter:
    """Counts a rank's outstanding operations in a round; its event fires when all are done."""

    __slots__ = ("event", "pending")

    def __init__(self, env: simpy.Environment):
        self.event = simpy.Event(env)
        self.pending = 0

    def done_one(self) -> None:
        self.pending -= 1
        if self.pending == 0:
            self.event.succeed()


class Comm:
    """Point-to-point messages between ranks with eager or rendezvous matching.

    ``post_send(src, dst, nbytes, tag, waiter)`` and ``post_recv(dst, src, tag, waiter)`` add
    an operation to a :class:`Waiter`; a send matches the receive with the same
    (src, dst, tag). ``send``/``recv`` are the same with an event per operation.
    """

    def __init__(self, network: _NetworkBase, semantics: str = "eager"):
        if semantics not in SEMANTICS:
            raise unknown_name("message semantics", semantics, SEMANTICS)
        self.network = network
        self.env = network.env
        self.eager = semantics == "eager"
        # key -> Waiter of the side that posted first (or True: eager data already arrived)
        self._pending: dict[Hashable, object] = {}
        self._start = network.start

    def post_send(self, src: int, dst: int, nbytes: float, tag: Hashable, waiter: Waiter) -> None:
        key = (src, dst, tag)
        waiter.pending += 1
        if self.eager:
            self.network.start(src, dst, nbytes, waiter.done_one, lambda: self._arrive(key))
            return
        other = self._pending.pop(key, None)
        if other is None:
            self._pending[key] = (waiter, nbytes)
        else:  # the receive was posted first: both sides wait for the arrival
            self._start(src, dst, nbytes, None, None, (waiter, other))  # type: ignore[arg-type]

    def post_recv(self, dst: int, src: int, tag: Hashable, waiter: Waiter) -> None:
        key = (src, dst, tag)
        other = self._pending.pop(key, None)
        if self.eager:
            if other is None:
                waiter.pending += 1
                self._pending[key] = waiter
            # else: the data is already here
            return
        waiter.pending += 1
        if other is None:
            self._pending[key] = waiter
        else:
            send_waiter, nbytes = other  # type: ignore[misc]
            self._start(src, dst, nbytes, None, None, (send_waiter, waiter))

    def _arrive(self, key: Hashable) -> None:
        waiter = self._pending.pop(key, None)
        if waiter is None:
            self._pending[key] = True
        else:
            waiter.done_one()  # type: ignore[union-attr]

    def _single(self) -> Waiter:
        w = Waiter(self.env)
        w.pending += 1  # held until posting is done
        return w

    def send(self, src: int, dst: int, nbytes: float, tag: Hashable) -> simpy.Event:
        w = self._single()
        self.post_send(src, dst, nbytes, tag, w)
        w.done_one()
        return w.event

    def recv(self, dst: int, src: int, tag: Hashable) -> simpy.Event:
        w = self._single()
        self.post_recv(dst, src, tag, w)
        w.done_one()
        return w.event
