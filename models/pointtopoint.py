"""Point-to-point cost: the Hockney α-β model with an optional γ reduction term.

Every collective model in :mod:`vgcsim.models.collectives` is built from these two terms, so the
assumptions live here once.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

from vgcsim.core.cluster import LinkSpec

__all__ = ["p2p_time_s", "reduce_time_s"]


def p2p_time_s(n_bytes: ArrayLike, link: LinkSpec) -> np.ndarray:
    """Time to send one message of ``n_bytes`` over ``link``.

    Formula: ``T(n) = α + β·n`` with α = ``link.latency_s`` and β = 1 / (``link.bandwidth_Bps`` × ``link.efficiency``)
    (payload rate: line rate × transport efficiency);
    a zero-byte message still pays α (a size header or synchronisation is sent).

    Assumptions: full-duplex link (a rank can send and receive ``n`` at once at full rate);
    no contention; time linear in size (no protocol switches such as eager/rendezvous).

    Source: R. W. Hockney, "The communication challenge for MPP: Intel Paragon and Meiko
    CS-2", Parallel Computing 20(3), 1994.
    """
    n = np.asarray(n_bytes, dtype=np.float64)
    return link.latency_s + n * link.beta_s_per_byte


def reduce_time_s(n_bytes: ArrayLike, link: LinkSpec) -> np.ndarray:
    """Time to combine (sum) ``n_bytes`` of received data into a local buffer: ``γ·n``.

    Assumptions: reduction is compute-bound at a constant rate per byte, not overlapped with
    the transfer. γ = ``link.gamma_s_per_byte`` (0 by default: reductions on accelerators are
    much faster than the network).

    Source: R. Thakur, R. Rabenseifner and W. Gropp, "Optimization of Collective Communication
    Operations in MPICH", IJHPCA 19(1), 2005 (the α-β-γ cost model, §2).
    """
    n = np.asarray(n_bytes, dtype=np.float64)
    return link.gamma_s_per_byte * n
