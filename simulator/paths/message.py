"""The message level (``path = "message"``): the reference's program without a SimPy process
per rank.

Each rank is a plain generator that the flow network's completion callbacks resume directly (a
trampoline over ``next()``), at that simulated instant and without a SimPy event of its own
where the order of the instant's flow starts cannot matter, else through a zero-delay SimPy
timeout queued where the process's wake-up would be. Exact everywhere: the same network, the
same float operations (:func:`run_message`; held to :mod:`vgcsim.simulator.paths.reference`
by ``tests/simulator/test_engine_reference.py``).
"""

from __future__ import annotations

import gc
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager

import numpy as np
import simpy

from vgcsim.simulator.network import LinkMonitor, make_network
from vgcsim.simulator.paths.plan import Phase, RankSpan, RunCache, cache_for, call_s, is_eager
from vgcsim.simulator.topology import Topology

__all__ = ["run_message"]


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

    An optimization of :func:`vgcsim.simulator.paths.reference.run_reference`, exact everywhere:
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
    cache = cache_for(topology, cache)
    env = simpy.Environment()
    net = make_network(mode, env, topology, monitor)
    finish = np.zeros((len(phases), p))
    eager = is_eager(semantics)
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
