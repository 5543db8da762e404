"""Shared builders for simulator tests: small clusters with round numbers (imported by the tests)."""

from __future__ import annotations

from vgcsim.core.cluster import DEVICE_PRESETS, ClusterSpec, LinkSpec

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
