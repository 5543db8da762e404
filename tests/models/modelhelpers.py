"""Shared by the models tests: a one-link star cluster with a V100 device."""

from __future__ import annotations

from vgcsim.core.cluster import ClusterSpec, LinkSpec, get_device


def star_cluster(latency_s=0.0, bandwidth_Bps=1e9) -> ClusterSpec:
    """A star of ``bandwidth_Bps`` links with ``latency_s``, one V100 per node."""
    return ClusterSpec(
        name="t",
        topology={"kind": "star"},
        link=LinkSpec("t", bandwidth_Bps=bandwidth_Bps, latency_s=latency_s),
        intra_link=None,
        gpus_per_node=1,
        device=get_device("V100"),
    )
