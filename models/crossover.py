"""Where compression stops paying: the payload, ratio or density at which compressed
allgatherv ties dense allreduce, as a function of P and the link.

With balanced payloads (every rank sends m bytes) every allgatherv model is affine in m,
``T_agv(m) = a + b·m``, so the tie ``T_agv(m*) + overhead = T_ar(n)`` has the closed form
``m* = (T_ar(n) − overhead − a) / b``. Compression pays for payloads below m*, i.e. for
compression ratios above ``n / m*``. If ``T_ar(n) − overhead ≤ a`` no ratio pays (the
allgatherv's latency alone exceeds the dense allreduce): m* = 0 and the ratio is infinite.

Worked example (the test of this module): α = 0, ring vs ring, coo64 (64 bits per sent
element) vs fp32 (32 bits per element): ``(P−1)·m·β = 2·(P−1)/P·n·β`` ⇒ m* = 2n/P ⇒
density* = m*·8/(64·n/4) = 1/P.
"""

from __future__ import annotations

import numpy as np

from vgcsim.core.cluster import ClusterSpec
from vgcsim.core.errors import ConfigError
from vgcsim.models.collectives import get_collective, size_exchange_time_s

__all__ = ["crossover_density", "crossover_payload_bytes", "crossover_ratio"]


def crossover_payload_bytes(
    dense_bytes: float,
    world_size: int,
    cluster: ClusterSpec,
    *,
    allreduce: str = "allreduce/ring",
    allgatherv: str = "allgatherv/ring",
    overhead_s: float = 0.0,
    decode_s_per_byte: float = 0.0,
    size_exchange: bool = False,
) -> float:
    """Per-rank compressed payload m* (bytes) at which the compressed step ties the dense one.

    Formula: ``m* = max(0, (T_ar(n) − overhead_s − T_agv(0) − X) / (b + (P−1)·δ))`` with
    ``b = (T_agv(n) − T_agv(0)) / n`` (balanced sizes, affine models), δ =
    ``decode_s_per_byte`` (decode + accumulate seconds per received payload byte: every rank
    decodes the P − 1 others' m bytes after the allgatherv) and X the size exchange
    (:func:`vgcsim.models.collectives.size_exchange_time_s`) when ``size_exchange`` and the
    allgatherv is not the padded one (which contains it).

    Assumptions: every rank sends the same m; ``overhead_s`` = extra local time of the
    compressed step besides decode (variance + codec, minus any dense-side cast), the compute
    and optimizer being equal on both sides; decode linear in the bytes received (its fixed
    launch cost belongs in ``overhead_s``).

    Source: the cost comparison of Tsuzuku, Imachi & Akiba 2018 (§5), solved in closed form,
    with the per-received-payload decode of ``vgcsim.traces.devicecost.decode_time_s``.
    """
    if world_size < 2:
        raise ConfigError("a crossover needs at least 2 ranks (P = 1 does not communicate)")
    if dense_bytes <= 0:
        raise ConfigError("dense_bytes must be positive")
    if not decode_s_per_byte >= 0:
        raise ConfigError("decode_s_per_byte must be >= 0")
    ar = get_collective(allreduce)
    agv = get_collective(allgatherv)
    if ar.op != "allreduce" or agv.op != "allgatherv":
        raise ConfigError("crossover compares an allreduce with an allgatherv")
    kw = {"intra_link": cluster.intra_link, "gpus_per_node": cluster.gpus_per_node}
    dense = float(ar.time_s(np.full((1, world_size), float(dense_bytes)), cluster.link, **kw)[0])
    t0 = float(agv.time_s(np.zeros((1, world_size)), cluster.link, **kw)[0])
    tn = float(agv.time_s(np.full((1, world_size), float(dense_bytes)), cluster.link, **kw)[0])
    slope = (tn - t0) / dense_bytes + (world_size - 1) * decode_s_per_byte
    if size_exchange and allgatherv != "allgatherv/padded":
        t0 += size_exchange_time_s(world_size, cluster.link)
    budget = dense - overhead_s - t0
    if budget <= 0:
        return 0.0
    return budget / slope


def crossover_ratio(dense_bytes: float, world_size: int, cluster: ClusterSpec, **kw) -> float:
    """Compression ratio (dense bytes / compressed bytes) needed to tie; ``inf`` if none pays."""
    m = crossover_payload_bytes(dense_bytes, world_size, cluster, **kw)
    return float("inf") if m <= 0 else dense_bytes / m


def crossover_density(
    dense_bytes: float,
    world_size: int,
    cluster: ClusterSpec,
    *,
    bits_per_sent: float = 64.0,
    bits_per_element: float = 32.0,
    **kw,
) -> float:
    """Density (sent elements / all elements) at which a sparse encoding of ``bits_per_sent``
    bits per sent element ties dense; e.g. coo64 = 32-bit index + 32-bit value = 64 bits.

    Formula: ``d* = 8·m* / (bits_per_sent · N)`` with ``N = 8·dense_bytes / bits_per_element``.
    """
    m = crossover_payload_bytes(dense_bytes, world_size, cluster, **kw)
    elements = 8.0 * dense_bytes / bits_per_element
    return 8.0 * m / (bits_per_sent * elements)
