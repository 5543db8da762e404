"""Max-min fair rates of flows over shared channels, by progressive filling in numpy.

The static problem behind the flow network (:mod:`vgcsim.simulator.network`): flows cross
channels of given capacity; find the *max-min fair* allocation — feasible (no channel carries
more than its capacity) and such that no flow's rate can rise without lowering the rate of a
flow that has no more.
"""

from __future__ import annotations

import numpy as np

__all__ = ["maxmin_rates"]


def maxmin_rates(
    flow_ptr: np.ndarray, flow_channels: np.ndarray, capacity_Bps: np.ndarray
) -> np.ndarray:
    """Each flow's max-min fair rate (B/s), by progressive filling.

    Input in CSR form: flow ``f`` crosses channels ``flow_channels[flow_ptr[f]:flow_ptr[f+1]]``
    (int64 indices into ``capacity_Bps``; a flow lists each channel once), channel ``c`` carries
    at most ``capacity_Bps[c]`` bytes per second.

    Algorithm (Bertsekas & Gallager, *Data Networks*, 2nd ed., §6.5.2, progressive filling):
    with ``R_c`` the capacity channel ``c`` has left and ``n_c`` its unfrozen flows, repeat

        m = min_c R_c / n_c                      over channels with n_c > 0
        every unfrozen flow crossing a channel with R_c / n_c = m gets rate m and is frozen;
        R_c -= m and n_c -= 1 on every channel c of each frozen flow

    until every flow is frozen. The result is max-min fair: each flow crosses a saturated
    channel on which no flow has a larger rate (the bottleneck theorem, same section).

    Exactly tied channels saturate in the same iteration (no tie-break order); the subtraction
    ``R_c -= m`` is applied once per frozen flow, in sequence (``np.subtract.at``), as a
    per-flow loop would. A remaining capacity that rounding drives below zero is taken as 0.
    A flow that crosses no channel is unconstrained: its rate is ``inf``.
    """
    flow_ptr = np.asarray(flow_ptr, dtype=np.int64)
    flow_channels = np.asarray(flow_channels, dtype=np.int64)
    cap = np.array(capacity_Bps, dtype=float)  # a copy: consumed below
    if flow_ptr.ndim != 1 or flow_ptr.size == 0 or flow_ptr[0] != 0:
        raise ValueError("flow_ptr must be a 1-D CSR pointer starting at 0")
    if flow_ptr[-1] != flow_channels.size or np.any(np.diff(flow_ptr) < 0):
        raise ValueError("flow_ptr must be non-decreasing and end at len(flow_channels)")
    n_flows, n_channels = flow_ptr.size - 1, cap.size
    if flow_channels.size and (flow_channels.min() < 0 or flow_channels.max() >= n_channels):
        raise ValueError("flow_channels must index capacity_Bps")
    rate = np.full(n_flows, np.inf)
    live_ch = flow_channels
    live_fl = np.repeat(np.arange(n_flows), np.diff(flow_ptr))
    count = np.bincount(live_ch, minlength=n_channels).astype(float)
    share = np.empty(n_channels)
    newly = np.zeros(n_flows, dtype=bool)
    while live_ch.size:
        share.fill(np.inf)
        np.divide(cap, count, out=share, where=count > 0)
        m = share.min()
        hit = live_fl[(share == m)[live_ch]]
        rate[hit] = m
        newly[hit] = True
        sel = newly[live_fl]
        newly[hit] = False
        frozen_ch = live_ch[sel]
        np.subtract.at(cap, frozen_ch, m)
        np.maximum(cap, 0.0, out=cap)
        count -= np.bincount(frozen_ch, minlength=n_channels)
        keep = ~sel
        live_ch, live_fl = live_ch[keep], live_fl[keep]
    return rate
