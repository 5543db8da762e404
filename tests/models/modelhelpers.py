"""Shared by the models tests: a one-link star cluster with a V100 device; exact measurement
times of the link fit's cost model."""

from __future__ import annotations

from vgcsim.core.cluster import DEFAULT_HOST_PADDED_SHARE, ClusterSpec, LinkSpec, get_device
from vgcsim.models.linkfit import call_coefficient, cost_coefficients, host_coefficient


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


def exact_time_s(
    op, size_bytes, world, alpha, beta, *, gamma=0.0, delta=0.0, share=DEFAULT_HOST_PADDED_SHARE
):
    """A measurement's time as the link fit prices it: ``k_α·α + k_β·β + k_γ·γ + k_δ·δ``
    (``vgcsim.models.linkfit.cost_coefficients`` and ``host_coefficient``, the latter with the
    padded share ``share``, default the model's); ``delta`` a number, or a function of the
    gathered bytes ``P·m`` (δ by size)."""
    a, b, g = cost_coefficients(op, size_bytes, world)
    k = host_coefficient(op, size_bytes, world, share)
    d = delta(world * size_bytes) if callable(delta) else delta
    return a * alpha + b * beta + g * gamma + k * d


def exact_rows(ops, sizes, world, alpha, beta, **link) -> list[dict]:
    """One measurement row per op and size, each one repetition of :func:`exact_time_s`."""
    return [
        {"op": op, "size_bytes": n, "seconds": [exact_time_s(op, n, world, alpha, beta, **link)]}
        for op in ops
        for n in sizes
    ]


def called_measurements(ops, sizes, world, alpha, beta, call_s, collective_beta=None) -> dict:
    """A gloo measurement file of exact times: :func:`exact_time_s` plus ``call_s`` per
    collective call (``call_coefficient``); the collectives' bytes at ``collective_beta``
    where given (p2p always at ``beta``)."""
    rows = []
    for op in ops:
        b = beta if op == "p2p" or collective_beta is None else collective_beta
        for n in sizes:
            t = exact_time_s(op, n, world, alpha, b) + call_coefficient(op, world) * call_s
            rows.append({"op": op, "size_bytes": n, "seconds": [t]})
    return {"world_size": world, "backend": "gloo", "rows": rows}
