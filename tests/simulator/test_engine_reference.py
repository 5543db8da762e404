"""The message level against a plain SimPy reference: one SimPy process per rank.

Each rank of the reference walks its schedule's rounds as the engine's documentation
describes (``vgcsim.simulator.engine.run_message``): it posts the round's sends, then its
receives, through :class:`~vgcsim.simulator.network.Comm`, and waits on one event that
fires when they are all done (a SimPy process's wake-up: queued behind the events already
due at that instant), then for γ × the bytes it received in a reducing round. The engine
resumes ranks without SimPy events of their own where the order of an instant's flow starts
cannot matter (fair sharing with lazy flows), and must otherwise process its events in the
reference's order: under FIFO sharing a channel serves flows in the order they came, so a
rank that went on before the others' wake-ups would take a channel out of turn. Every
collective, on a star, a ring and a spread 4:1 leaf-spine (where flows share uplinks), P =
3, 4, 5, both sharing models and both matchings, must give each rank the reference's
finish time exactly (the same network objects, so the same float operations).
"""

from __future__ import annotations

import numpy as np
import pytest
import simpy
from simhelpers import cluster, leaf_spine
from vgcsim.simulator.collectives import get_schedule, unit_sizes
from vgcsim.simulator.engine import Phase, run_message
from vgcsim.simulator.network import Comm, Waiter, make_network
from vgcsim.simulator.topology import build_topology

from vgcsim.core.collectives import COLLECTIVE_KEYS

B = 2.0**20  # bytes/s
A = 2.0**-10  # s
TOPOLOGIES = {
    "star": {"kind": "star"},
    "ring": {"kind": "ring"},
    "leaf-spine": leaf_spine(2),
}


def reference_finish_s(schedule, units, topology, mode, semantics, gamma_s_per_byte):
    """Each rank's finish time, one SimPy process per rank (see the module docstring)."""
    p = schedule.world_size
    env = simpy.Environment()
    comm = Comm(make_network(mode, env, topology), semantics)
    round_bytes = schedule.round_bytes(units)
    finish = np.zeros(p)

    def rank(i):
        first = 0  # flows are numbered over the whole schedule, round by round
        for k, rnd in enumerate(schedule.rounds):
            pairs = list(zip(rnd.src.tolist(), rnd.dst.tolist(), strict=True))
            sends = [(j, d) for j, (s, d) in enumerate(pairs) if s == i]
            recvs = [(j, s) for j, (s, d) in enumerate(pairs) if d == i]
            if sends or recvs:
                waiter = Waiter(env)
                waiter.pending += 1  # held while posting
                for j, d in sends:
                    comm.post_send(i, d, float(round_bytes[k][j]), first + j, waiter)
                for j, s in recvs:
                    comm.post_recv(i, s, first + j, waiter)
                waiter.done_one()
                if not waiter.event.triggered:  # done while posting: it goes straight on
                    yield waiter.event
                got = sum(float(round_bytes[k][j]) for j, _ in recvs)
                if rnd.reduce and gamma_s_per_byte > 0 and got > 0:
                    yield env.timeout(gamma_s_per_byte * got)
            first += len(pairs)
        finish[i] = env.now

    for i in range(p):
        env.process(rank(i))
    env.run()
    return finish


@pytest.mark.parametrize("key", COLLECTIVE_KEYS)
def test_every_rank_finishes_when_the_simpy_reference_says(key):
    for name, topo in TOPOLOGIES.items():
        spec = cluster(topo, bandwidth_Bps=B, latency_s=A)
        for p in (3, 4, 5):
            schedule = get_schedule(key, p)
            topology = build_topology(spec, p)
            if schedule.allreduce:
                sizes = np.full(p, 2.0**20)
                gammas = (0.0, 2.0**-22)
            else:  # uneven allgatherv blocks: ranks run out of step
                sizes = np.arange(1, p + 1) * 2.0**20
                gammas = (0.0,)
            units = unit_sizes(schedule, sizes)
            for mode in ("fifo", "fair"):
                for semantics in ("rendezvous", "eager"):
                    for gamma in gammas:
                        want = reference_finish_s(schedule, units, topology, mode, semantics, gamma)
                        got = run_message(
                            [Phase(np.zeros(p), schedule, units, key)],
                            topology,
                            mode=mode,
                            semantics=semantics,
                            gamma_s_per_byte=gamma,
                        )[0]
                        where = f"{name} P={p} {mode} {semantics} γ={gamma}"
                        np.testing.assert_array_equal(got, want, err_msg=where)
