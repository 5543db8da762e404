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
from collections.abc import Hashable
from dataclasses import dataclass, field

import numpy as np
import simpy

from simulator.topology import Route, Topology
from traces.errors import unknown_name

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
    bytes: np.ndarray = field(init=False)
    busy_s: np.ndarray = field(init=False)
    intervals: list[tuple[int, float, float, float, int, int]] = field(default_factory=list)
    flows: int = 0
    _active: np.ndarray = field(init=False, repr=False)
    _since: np.ndarray = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.bytes = np.zeros(self.n_channels)
        self.busy_s = np.zeros(self.n_channels)
        self._active = np.zeros(self.n_channels, dtype=np.int64)
        self._since = np.zeros(self.n_channels)

    def flow_started(self, channels: tuple[int, ...], nbytes: float, now: float) -> None:
        self.flows += 1
        for c in channels:
            self.bytes[c] += nbytes
            if self._active[c] == 0:
                self._since[c] = now
            self._active[c] += 1

    def flow_ended(
        self, channels: tuple[int, ...], start: float, now: float, nbytes: float, src: int, dst: int
    ) -> None:
        for c in channels:
            self._active[c] -= 1
            if self._active[c] == 0:
                self.busy_s[c] += now - self._since[c]
            if self.record_intervals:
                self.intervals.append((c, start, now, nbytes, src, dst))


class _Flow:
    __slots__ = (
        "channels",
        "remaining",
        "rate",
        "t_last",
        "version",
        "done",
        "start",
        "nbytes",
        "src",
        "dst",
    )

    def __init__(
        self,
        channels: tuple[int, ...],
        nbytes: float,
        now: float,
        done: simpy.Event,
        src: int,
        dst: int,
    ):
        self.channels = channels
        self.remaining = float(nbytes)
        self.nbytes = float(nbytes)
        self.rate = 0.0
        self.t_last = now
        self.version = 0
        self.done = done
        self.start = now
        self.src = src
        self.dst = dst


class _NetworkBase:
    """Shared part of both sharing models: routes, latency, delivery events, the monitor."""

    def __init__(
        self, env: simpy.Environment, topology: Topology, monitor: LinkMonitor | None = None
    ):
        self.env = env
        self.topology = topology
        self.monitor = monitor if monitor is not None else LinkMonitor(topology.n_channels)

    def transfer(self, src: int, dst: int, nbytes: float) -> tuple[simpy.Event, simpy.Event]:
        """Start a message now; return (last byte left, last byte arrived) events."""
        env = self.env
        if src == dst:
            ev = env.event()
            ev.succeed()
            return ev, ev
        route = self.topology.route(src, dst)
        arrived = env.event()
        if nbytes <= 0:
            sent = env.event()
            sent.succeed()
            env.timeout(route.latency_s).callbacks.append(lambda _e: arrived.succeed())
            return sent, arrived
        sent = env.event()
        sent.callbacks.append(lambda _e: self._after_latency(route, arrived))
        self._start(route, float(nbytes), sent, src, dst)
        return sent, arrived

    def _after_latency(self, route: Route, arrived: simpy.Event) -> None:
        if route.latency_s > 0:
            self.env.timeout(route.latency_s).callbacks.append(lambda _e: arrived.succeed())
        else:
            arrived.succeed()

    def _start(self, route: Route, nbytes: float, sent: simpy.Event, src: int, dst: int) -> None:
        raise NotImplementedError


class FairNetwork(_NetworkBase):
    """Max-min fair sharing by progressive filling, recomputed per connected group of flows."""

    def __init__(
        self, env: simpy.Environment, topology: Topology, monitor: LinkMonitor | None = None
    ):
        super().__init__(env, topology, monitor)
        self._on: list[set[_Flow]] = [set() for _ in range(topology.n_channels)]
        self._cap = topology.capacity_Bps

    def _start(self, route: Route, nbytes: float, sent: simpy.Event, src: int, dst: int) -> None:
        now = self.env.now
        flow = _Flow(route.channels, nbytes, now, sent, src, dst)
        self.monitor.flow_started(route.channels, nbytes, now)
        alone = True
        for c in route.channels:
            on = self._on[c]
            if on:
                alone = False
            on.add(flow)
        if alone:
            flow.rate = route.bandwidth_Bps
            self._schedule(flow)
        else:
            self._reshare(self._group([flow]))

    def _group(self, seeds: list[_Flow]) -> list[_Flow]:
        """Every flow connected to ``seeds`` through shared channels."""
        seen = set(seeds)
        stack = list(seeds)
        while stack:
            f = stack.pop()
            for c in f.channels:
                for g in self._on[c]:
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
                    cap[c] = float(self._cap[c])
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
            if rate != f.rate:
                f.rate = rate
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
        flow.remaining -= flow.rate * (now - flow.t_last)
        flow.t_last = now
        if flow.remaining > _EPS_BYTES * max(1.0, flow.nbytes * 1e-9):
            self._schedule(flow)  # float drift: a sliver left
            return
        neighbours: list[_Flow] = []
        for c in flow.channels:
            on = self._on[c]
            on.discard(flow)
            neighbours.extend(on)
        self.monitor.flow_ended(flow.channels, flow.start, now, flow.nbytes, flow.src, flow.dst)
        flow.done.succeed()
        if neighbours:
            self._reshare(self._group(list(dict.fromkeys(neighbours))))


class FifoNetwork(_NetworkBase):
    """Per-channel first-come-first-served: a flow holds all its channels while it sends."""

    def __init__(
        self, env: simpy.Environment, topology: Topology, monitor: LinkMonitor | None = None
    ):
        super().__init__(env, topology, monitor)
        self._res = [simpy.Resource(env, capacity=1) for _ in range(topology.n_channels)]

    def _start(self, route: Route, nbytes: float, sent: simpy.Event, src: int, dst: int) -> None:
        self.env.process(self._send(route, nbytes, sent, src, dst))

    def _send(self, route: Route, nbytes: float, sent: simpy.Event, src: int, dst: int):
        held = []
        for c in sorted(route.channels):
            req = self._res[c].request()
            yield req
            held.append((c, req))
        start = self.env.now
        self.monitor.flow_started(route.channels, nbytes, start)
        yield self.env.timeout(nbytes / route.bandwidth_Bps)
        for c, req in held:
            self._res[c].release(req)
        self.monitor.flow_ended(route.channels, start, self.env.now, nbytes, src, dst)
        sent.succeed()


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


class _Match:
    __slots__ = ("send_ev", "recv_ev", "nbytes", "posted_send", "posted_recv", "arrived")

    def __init__(self) -> None:
        self.send_ev: simpy.Event | None = None
        self.recv_ev: simpy.Event | None = None
        self.nbytes = 0.0
        self.posted_send = False
        self.posted_recv = False
        self.arrived = False


class Comm:
    """Point-to-point messages between ranks with eager or rendezvous matching.

    ``send(src, dst, nbytes, tag)`` and ``recv(dst, src, tag)`` return events; a send matches
    the receive with the same (src, dst, tag).
    """

    def __init__(self, network: _NetworkBase, semantics: str = "eager"):
        if semantics not in SEMANTICS:
            raise unknown_name("message semantics", semantics, SEMANTICS)
        self.network = network
        self.env = network.env
        self.eager = semantics == "eager"
        self._pending: dict[Hashable, _Match] = {}

    def _match(self, key: Hashable) -> _Match:
        m = self._pending.get(key)
        if m is None:
            m = _Match()
            self._pending[key] = m
        return m

    def send(self, src: int, dst: int, nbytes: float, tag: Hashable) -> simpy.Event:
        key = (src, dst, tag)
        m = self._match(key)
        m.posted_send = True
        m.nbytes = nbytes
        if self.eager:
            sent, arrived = self.network.transfer(src, dst, nbytes)
            arrived.callbacks.append(lambda _e: self._arrive(key))
            return sent
        m.send_ev = self.env.event()
        if m.posted_recv:
            self._start_rendezvous(key, m)
        return m.send_ev

    def recv(self, dst: int, src: int, tag: Hashable) -> simpy.Event:
        key = (src, dst, tag)
        m = self._match(key)
        m.posted_recv = True
        if self.eager and m.arrived:
            del self._pending[key]
            ev = self.env.event()
            ev.succeed()
            return ev
        m.recv_ev = self.env.event()
        if not self.eager and m.posted_send:
            self._start_rendezvous(key, m)
        return m.recv_ev

    def _arrive(self, key: Hashable) -> None:
        m = self._pending[key]
        if m.recv_ev is not None:
            del self._pending[key]
            m.recv_ev.succeed()
        else:
            m.arrived = True

    def _start_rendezvous(self, key: Hashable, m: _Match) -> None:
        del self._pending[key]
        src, dst, _tag = key  # type: ignore[misc]
        _sent, arrived = self.network.transfer(src, dst, m.nbytes)
        send_ev, recv_ev = m.send_ev, m.recv_ev

        def done(_e: simpy.Event) -> None:
            send_ev.succeed()
            recv_ev.succeed()

        arrived.callbacks.append(done)


def bottleneck_time_s(route: Route, nbytes: float) -> float:
    """Uncontended message time: ``latency + nbytes / bandwidth`` (0 for a rank to itself)."""
    if math.isinf(route.bandwidth_Bps):
        return 0.0
    return route.latency_s + nbytes / route.bandwidth_Bps
