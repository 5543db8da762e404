"""The reference engine (``path = "reference"``): what the simulator computes, as plain SimPy.

This module *defines* the simulator's semantics. The other paths (``message``,
``collective``, ``round``: the modules of those names beside this one, :mod:`vgcsim.simulator.paths`)
compute the same numbers faster, and each names the test that holds it to this one.

The program is one SimPy process per rank. A step is a list of *phases* (one collective
call each: :class:`~vgcsim.simulator.paths.plan.Phase`, with every rank's ready time, the
schedule and its unit sizes). For each phase in turn, rank ``i``:

1. waits until its ready time (a timeout; phases queue on one communication stream per
   rank, so it starts phase b at max(its ready time, the end of its phase b − 1));
2. waits the call's software cost, :func:`~vgcsim.simulator.paths.plan.call_s` (a timeout, once
   per call);
3. walks the schedule's rounds. In a round it takes part in, it posts its sends, then its
   receives, through :class:`~vgcsim.simulator.network.Comm` (eager or rendezvous matching,
   :data:`~vgcsim.simulator.network.SEMANTICS`) on the flow network
   (:func:`~vgcsim.simulator.network.make_network`: max-min fair or FIFO sharing,
   :data:`~vgcsim.simulator.network.MODES`), and waits on one event that fires when they are
   all done. A round whose operations are all done while the rank is still posting (a
   message to itself, an empty message where the latency is 0, a receive whose eager data
   already arrived) does not wait: the rank goes straight on. In a reducing round it then spends ``γ × the payload bytes it
   received`` (a timeout, where that product is > 0). A rank with nothing in a round goes
   straight on; the order between ranks comes only from the messages;
4. records the phase's finish time, ``env.now``.

Where the link prices messages by size (``segments``), a flow moves its *wire* bytes
(``wire``: :func:`vgcsim.core.collectives.wire_bytes` of the payload bytes) at the route's
rate, and the reduction counts payload bytes. Flows carry the bytes
:meth:`~vgcsim.simulator.collectives.Schedule.round_bytes` gives, and a send matches the
receive of the same (source, destination, phase, flow number).

A rank's wake-up is a SimPy event, queued behind the events already due at that instant:
under FIFO sharing a channel serves flows in the order they came, so this order is part of
the semantics.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import simpy

from vgcsim.simulator.network import Comm, LinkMonitor, Waiter, make_network
from vgcsim.simulator.paths.plan import Phase, call_s
from vgcsim.simulator.topology import Topology

__all__ = ["run_reference"]

# One round of one rank: its sends [(dst, tag, wire bytes)], its receives [(src, tag,
# payload bytes)], and whether the round reduces.
_RankRound = tuple[list[tuple[int, tuple, float]], list[tuple[int, tuple, float]], bool]


def _rank_rounds(
    b: int, phase: Phase, wire: Callable[[np.ndarray], np.ndarray] | None
) -> list[list[_RankRound]]:
    """Per rank, the rounds of phase ``b`` it takes part in. Flows are numbered over the
    whole schedule, round by round; a flow's tag is ``(b, number)``."""
    schedule = phase.schedule
    payload = schedule.round_bytes(phase.units)
    flat = np.concatenate(payload) if payload else np.zeros(0)
    payload_bytes = flat.tolist()
    wire_of = payload_bytes if wire is None or not payload else wire(flat).tolist()
    rounds: list[list[_RankRound]] = [[] for _ in range(schedule.world_size)]
    g = 0
    for rnd in schedule.rounds:
        mine: dict[int, _RankRound] = {}
        for s, d in zip(rnd.src.tolist(), rnd.dst.tolist(), strict=True):
            tag = (b, g)
            mine.setdefault(s, ([], [], rnd.reduce))[0].append((d, tag, wire_of[g]))
            mine.setdefault(d, ([], [], rnd.reduce))[1].append((s, tag, payload_bytes[g]))
            g += 1
        for i, ops in mine.items():
            rounds[i].append(ops)
    return rounds


def run_reference(
    phases: Sequence[Phase],
    topology: Topology,
    *,
    mode: str = "fair",
    semantics: str = "rendezvous",
    gamma_s_per_byte: float = 0.0,
    call_overhead_s: float = 0.0,
    wire: Callable[[np.ndarray], np.ndarray] | None = None,
    monitor: LinkMonitor | None = None,
    stats: dict[str, int] | None = None,
) -> np.ndarray:
    """Run ``phases`` as the module docstring says; each rank's finish time per phase [B, P].

    ``monitor`` receives every flow's bytes and busy time. ``stats``, if given, receives
    ``events`` (every SimPy event processed: each process's start and end, each wake-up,
    timeout and network event) and ``unwaited`` (wake-up events of rounds done while their
    rank was still posting: the event fires, but nobody waits for it).
    """
    p = topology.world_size
    env = simpy.Environment()
    comm = Comm(make_network(mode, env, topology, monitor), semantics)
    plans = [_rank_rounds(b, ph, wire) for b, ph in enumerate(phases)]
    entry_s = [call_s(ph.schedule, call_overhead_s) for ph in phases]
    finish = np.zeros((len(phases), p))
    unwaited = 0

    def rank(i: int):
        nonlocal unwaited
        for b, ph in enumerate(phases):
            wait = float(ph.ready_s[i]) - env.now
            if wait > 0:
                yield env.timeout(wait)
            if entry_s[b] > 0:
                yield env.timeout(entry_s[b])
            for sends, recvs, reduce in plans[b][i]:
                done = Waiter(env)
                done.pending += 1  # held while posting
                for dst, tag, nbytes in sends:
                    comm.post_send(i, dst, nbytes, tag, done)
                for src, tag, _ in recvs:
                    comm.post_recv(i, src, tag, done)
                done.done_one()
                if done.event.triggered:  # done while posting: it goes straight on
                    unwaited += 1
                else:
                    yield done.event
                if reduce and gamma_s_per_byte > 0:
                    reduce_s = gamma_s_per_byte * sum(nbytes for _, _, nbytes in recvs)
                    if reduce_s > 0:
                        yield env.timeout(reduce_s)
            finish[b, i] = env.now

    for i in range(p):
        env.process(rank(i))
    if stats is None:
        env.run()
    else:
        events = 0
        try:
            while True:
                env.step()
                events += 1
        except simpy.core.EmptySchedule:
            pass
        stats["events"] = stats.get("events", 0) + events
        stats["unwaited"] = stats.get("unwaited", 0) + unwaited
    return finish
