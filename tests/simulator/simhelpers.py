"""Shared builders for simulator tests: small clusters with round numbers (imported by the tests)."""

from __future__ import annotations

import numpy as np
import simpy

from vgcsim.core.cluster import DEVICE_PRESETS, ClusterSpec, LinkSpec
from vgcsim.simulator.replay import _Block, _Outcome

BW = 1.25e9  # 10 Gb/s in bytes/s
LAT = 5e-6


def cluster(
    topology: dict | None = None,
    *,
    bandwidth_Bps: float = BW,
    latency_s: float = LAT,
    gamma_s_per_byte: float = 0.0,
    intra: LinkSpec | None = None,
    gpus_per_node: int = 1,
    name: str = "test",
) -> ClusterSpec:
    return ClusterSpec(
        name=name,
        topology=topology or {"kind": "star"},
        link=LinkSpec("nic", bandwidth_Bps, latency_s, gamma_s_per_byte),
        intra_link=intra,
        gpus_per_node=gpus_per_node,
        device=DEVICE_PRESETS["V100"],
    )


def leaf_spine(
    hosts_per_leaf: int,
    *,
    spines: int = 1,
    oversubscription: float = 4.0,
    placement: str = "spread",
    routing: str = "dmodk",
) -> dict:
    """A leaf-spine topology spec (ranks dealt round-robin over the leaves when ``spread``)."""
    return {
        "kind": "leaf_spine",
        "hosts_per_leaf": hosts_per_leaf,
        "spines": spines,
        "oversubscription": oversubscription,
        "placement": placement,
        "routing": routing,
    }


def count_events(env) -> int:
    """Run ``env`` until no event is left, one ``env.step()`` at a time; return how many events
    it processed (as ``run_message``'s ``stats["events"]`` counts SimPy events)."""
    n = 0
    while True:
        try:
            env.step()
        except simpy.core.EmptySchedule:
            return n
        n += 1


def send_recv_times(env, comm, nbytes: float, send_at: float, recv_at: float) -> dict:
    """One message of ``nbytes`` from rank 0 to rank 1 over ``comm``: the send posted at
    ``send_at``, the receive at ``recv_at``; returns when each completed (``send``,
    ``recv``), after running ``env`` to its end."""
    out = {}

    def sender():
        yield env.timeout(send_at)
        yield comm.send(0, 1, nbytes, "t")
        out["send"] = env.now

    def receiver():
        yield env.timeout(recv_at)
        yield comm.recv(1, 0, "t")
        out["recv"] = env.now

    env.process(sender())
    env.process(receiver())
    env.run()
    return out


def run_phases(runner, phases):
    """One step of ``phases`` through ``runner.run_steps`` (the replay's route): a block of one
    step holding just those phases. Returns its outcome: ``.finish`` [B, P] and ``.path``."""
    zeros = np.zeros((1, runner.topology.world_size))
    block = _Block(
        label="test",
        start=0,
        schedules=[ph.schedule for ph in phases],
        names=[ph.label for ph in phases],
        ready=[np.asarray(ph.ready_s, dtype=float)[None] for ph in phases],
        units=[np.asarray(ph.units)[None] for ph in phases],
        data_index=[],
        copied=[],
        local=zeros,
        dec=zeros,
        variance=zeros,
        payload=zeros,
    )
    finish, paths = runner.run_steps(block)
    return _Outcome(finish[0], paths[0])
