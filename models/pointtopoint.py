"""Point-to-point cost: the Hockney α-β model of one message (what ``vgcsim validate`` and the
torch.distributed validation compare measured point-to-point sends against)."""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

from vgcsim.core.cluster import LinkSpec

__all__ = ["p2p_time_s"]


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
