"""The flow-level network: bandwidth sharing on full-duplex links, messages, and a link monitor.

A message of ``n`` bytes from rank ``a`` to rank ``b`` is a *flow* over the directed channels
of ``a``'s route to ``b``. Its bytes leave at the flow's current rate; its last byte arrives
one path latency (sum of the channels' latencies) after it has left. A zero-byte message costs
the path latency alone; a message to oneself costs nothing.

Two sharing models (``MODES``):

* ``"fair"`` — **max-min fair** rates by progressive filling over every channel a flow
  crosses: repeatedly find the channel whose remaining capacity divided by its unfrozen flows
  is smallest, give each of those flows that share, freeze them, subtract their rate from the
  other channels they cross. Rates are recomputed whenever a flow starts or ends, but only for
  the flows connected to it through shared channels (disjoint groups cannot influence each
  other under max-min fairness), so an uncontended flow costs O(path length).
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
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field

import numpy as np
import simpy
from vgcsim.simulator.topology import Route, Topology

from vgcsim.core.errors import unknown_name

__all__ = [
    "MODES",
    "SEMANTICS",
    "Comm",
    "FairNetwork",
    "FifoNetwork",
    "LinkMonitor",
    "make_network",
]

MODES = ("fair", "fifo")
SEMANTICS = ("eager", "rendezvous")

# Remaining bytes below this are rounding residue of rate changes, not data.
_EPS_BYTES = 1e-6


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

    def __post_init__(self) -> None:
        self._bytes = [0.0] * self.n_channels
        self._busy = [0.0] * self.n_channels
        self._active = [0] * self.n_channels
        self._since = [0.0] * self.n_channels

    @property
    def bytes(self) -> np.ndarray:
        """Bytes that crossed each channel."""
        return np.asarray(self._bytes)

    @property
    def busy_s(self) -> np.ndarray:
        """Seconds each channel carried at least one flow."""
        return np.asarray(self._busy)

    def flow_started(self, channels: tuple[int, ...], nbytes: float, now: float) -> None:
        self.flows += 1
        active, since, nb = self._active, self._since, self._bytes
        for c in channels:
            nb[c] += nbytes
            if active[c] == 0:
                since[c] = now
            active[c] += 1

    def flow_ended(
        self, channels: tuple[int, ...], start: float, now: float, nbytes: float, src: int, dst: int
    ) -> None:
        active = self._active
        for c in channels:
            active[c] -= 1
            if active[c] == 0:
                self._busy[c] += now - self._since[c]
        if self.record_intervals:
            for c in channels:
                self.intervals.append((c, start, now, nbytes, src, dst))


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
        "lazy",
        "t_end",
        "waiters",
    )

    def __init__(
        self,
        route: Route,
        nbytes: float,
        now: float,
        src: int,
        dst: int,
        on_sent: Callback | None,
        on_arrived: Callback | None,
    ):
        self.channels = route.channels
        self.latency_s = route.latency_s
        self.remaining = float(nbytes)
        self.nbytes = float(nbytes)
        self.rate = 0.0
        self.t_last = now
        self.version = 0
        self.start = now
        self.src = src
        self.dst = dst
        self.on_sent = on_sent
        self.on_arrived = on_arrived
        self.lazy = False  # alone on its channels: one timer at arrival, release on demand
        self.t_end = math.inf
        self.waiters: tuple[Waiter, ...] = ()


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
        flow = _Flow(route, nbytes, self.env.now, src, dst, on_sent, on_arrived)
        flow.waiters = waiters
        if nbytes <= 0:
            self._transmitted(flow)
            return
        self._start(flow, route)

    def transfer(self, src: int, dst: int, nbytes: float) -> tuple[simpy.Event, simpy.Event]:
        """Start a message now; return (last byte left, last byte arrived) events."""
        sent, arrived = self.env.event(), self.env.event()
        self.start(src, dst, nbytes, sent.succeed, arrived.succeed)
        return sent, arrived

    def _transmitted(self, flow: _Flow) -> None:
        if flow.on_sent is not None:
            flow.on_sent()
        if flow.on_arrived is None and not flow.waiters:
            return
        if flow.latency_s > 0:
            self.env.timeout(flow.latency_s, flow).callbacks.append(self._arrival_cb)
        else:
            self._arrived(flow)

    def _arrival_cb(self, event: simpy.Event) -> None:
        self._arrived(event.value)

    @staticmethod
    def _arrived(flow: _Flow) -> None:
        if flow.on_arrived is not None:
            flow.on_arrived()
        for w in flow.waiters:
            w.done_one()

    def _start(self, flow: _Flow, route: Route) -> None:
        raise NotImplementedError


class FairNetwork(_NetworkBase):
    """Max-min fair sharing by progressive filling, recomputed per connected group of flows."""

    def __init__(
        self, env: simpy.Environment, topology: Topology, monitor: LinkMonitor | None = None
    ):
        super().__init__(env, topology, monitor)
        self._on: list[set[_Flow]] = [set() for _ in range(topology.n_channels)]
        self._cap = topology.capacity_Bps.tolist()

    def _start(self, flow: _Flow, route: Route) -> None:
        now = flow.start
        mon = self.monitor
        mon.flows += 1
        active, since, nb = mon._active, mon._since, mon._bytes
        nbytes = flow.nbytes
        alone = True
        for c in flow.channels:
            on = self._on[c]
            if on:
                # Release finished lazy flows before counting this one, so that a channel
                # idle since their last byte left does not count as busy until now.
                self._expire(on, now)
                if on:
                    alone = False
            nb[c] += nbytes
            if active[c] == 0:
                since[c] = now
            active[c] += 1
            on.add(flow)
        if not alone:
            self._reshare(self._group([flow]))
            return
        flow.rate = route.bandwidth_Bps
        if flow.on_sent is not None:
            self._schedule(flow)
            return
        # Nobody waits for the last byte to leave: one timer at arrival. Until then the flow
        # stays on its channels; a later flow finding it there after t_end releases it.
        flow.lazy = True
        tx = flow.nbytes / flow.rate
        flow.t_end = now + tx
        flow.version += 1
        self.env.timeout(tx + flow.latency_s, (flow, flow.version)).callbacks.append(self._lazy_cb)

    def _expire(self, on: set[_Flow], now: float) -> None:
        """Release lazy flows on a channel whose last byte has already left."""
        for g in [g for g in on if g.lazy and g.t_end <= now]:
            self._release(g)

    def _release(self, flow: _Flow) -> None:
        flow.lazy = False
        on = self._on
        for c in flow.channels:
            on[c].discard(flow)
        self.monitor.flow_ended(
            flow.channels, flow.start, flow.t_end, flow.nbytes, flow.src, flow.dst
        )

    def _lazy_cb(self, event: simpy.Event) -> None:
        flow, version = event.value
        if version != flow.version:
            return  # it met another flow and was rescheduled
        if flow.lazy:
            self._release(flow)
        self._arrived(flow)

    def _group(self, seeds: list[_Flow]) -> list[_Flow]:
        """Every flow connected to ``seeds`` through shared channels."""
        now = self.env.now
        seen = set(seeds)
        stack = list(seeds)
        # Each channel is scanned once: revisiting it from every flow on it made one reshare
        # cost flows x channels-per-flow x flows-per-channel (the profile's top entry).
        visited: set[int] = set()
        while stack:
            f = stack.pop()
            for c in f.channels:
                if c in visited:
                    continue
                visited.add(c)
                on = self._on[c]
                self._expire(on, now)
                for g in on:
                    if g not in seen:
                        seen.add(g)
                        stack.append(g)
        return list(seen)

    def _reshare(self, group: list[_Flow]) -> None:
        now = self.env.now
        for f in group:
            f.remaining -= f.rate * (now - f.t_last)
            f.t_last = now
        cap: dict[int, float] = {}
        count: dict[int, int] = {}
        for f in group:
            for c in f.channels:
                if c in count:
                    count[c] += 1
                else:
                    count[c] = 1
                    cap[c] = self._cap[c]
        new_rate: dict[_Flow, float] = {}
        while count:
            best = min(count, key=lambda c: (cap[c] / count[c], c))
            share = cap[best] / count[best]
            for f in self._on[best]:
                if f in new_rate:
                    continue
                new_rate[f] = share
                for c in f.channels:
                    cap[c] -= share
                    count[c] -= 1
                    if count[c] == 0:
                        del count[c]
        for f in group:
            rate = new_rate[f]
            if rate != f.rate or f.lazy:
                f.rate = rate
                f.lazy = False  # shared now: its end must reshare its neighbours on time
                self._schedule(f)

    def _schedule(self, flow: _Flow) -> None:
        flow.version += 1
        version = flow.version
        delay = max(flow.remaining, 0.0) / flow.rate
        self.env.timeout(delay).callbacks.append(lambda _e: self._finish(flow, version))

    def _finish(self, flow: _Flow, version: int) -> None:
        if version != flow.version:
            return  # superseded by a rate change
        now = self.env.now
        if now != flow.t_last:
            flow.remaining -= flow.rate * (now - flow.t_last)
            flow.t_last = now
            if flow.remaining > _EPS_BYTES * max(1.0, flow.nbytes * 1e-9):
                self._schedule(flow)  # float drift: a sliver left
                return
        neighbours: list[_Flow] = []
        for c in flow.channels:
            on = self._on[c]
            on.discard(flow)
            if on:
                self._expire(on, now)
                neighbours.extend(on)
        self.monitor.flow_ended(flow.channels, flow.start, now, flow.nbytes, flow.src, flow.dst)
        self._transmitted(flow)
        if neighbours:
            self._reshare(self._group(list(dict.fromkeys(neighbours))))


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
        self.event = env.event()
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

    def post_send(self, src: int, dst: int, nbytes: float, tag: Hashable, waiter: Waiter) -> None:
        key = (src, dst, tag)
        waiter.pending += 1
        if self.eager:
            self.network.start(src, dst, nbytes, waiter.done_one, lambda: self._arrive(key))
            return
        other = self._pending.pop(key, None)
        if other is None:
            self._pending[key] = (waiter, nbytes)
        else:
            self._rendezvous(src, dst, nbytes, waiter, other)  # type: ignore[arg-type]

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
            self._rendezvous(src, dst, nbytes, send_waiter, waiter)

    def _rendezvous(self, src: int, dst: int, nbytes: float, a: Waiter, b: Waiter) -> None:
        self.network.start(src, dst, nbytes, None, None, (a, b))

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
