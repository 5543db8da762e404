"""The cores of a host, shared by its ranks' local work: egalitarian processor sharing.

Where a cluster puts ``ranks_per_host`` ranks on hosts of ``host_cores`` cores
(``vgcsim.core.cluster.ClusterSpec``), the step inputs already stretch every local time by
the fullest host's factor f = ``host_share`` = max(1, R·T/C): right when the ranks of a host
carry equal work, as the ranks of an emulated trace do. The ranks of a trace the DDP hook
wrote carry their own measured times, and a host's ranks then finish their work apart: a
rank that is done stops competing for the cores and the others speed up. The simulator
prices the work each rank does from the start of its step to its last bucket's exchange
(forward, backward, variance and codec, or the dense cast) that way:

Egalitarian processor sharing (L. Kleinrock, "Time-shared systems: a theoretical
treatment", JACM 14(2), 1967) of one host's R ranks, all starting at the step's start, each
with w_i seconds of work on T cores of its own, on C cores: while n of them are busy, each
progresses at 1 / f_n of its own pace, f_n = max(1, n·T/C). Every busy rank progresses at
the same pace, so with the works sorted, w_(1) ≤ … ≤ w_(R), the host's clock is piecewise
linear in the work done x:

    t(x) = Σ_j  clip(x − w_(j), 0, w_(j+1) − w_(j)) · f_(R−j),   w_(0) = 0,  j = 0 … R−1

and a rank reaches the point x of its own work at t(x): its last byte of work at t(w_i),
each bucket's gradients where the bucket is ready. Positions past the host's largest work
(rounding) go on at the last segment's pace. The ranks of a host with equal work get
t(x) = f·x, the uniform stretch; a last host holding fewer ranks than the others shares its
cores among those only.

The step inputs arrive already stretched by f (x̃ = f·x), so :func:`host_clock` returns the
map x̃ → t(x̃ / f): the identity on a host whose ranks' works are equal (returned as is, bit
for bit), earlier points where they differ. Decode and the optimizer keep the uniform
stretch (they follow the exchange, which every rank leaves at nearly the same time), as do
the closed-form models (``vgcsim.models.predict``: the step's slowest rank, f × its time).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from vgcsim.core.cluster import ClusterSpec, host_share

__all__ = ["host_clock"]


def host_clock(
    cluster: ClusterSpec, work_s: np.ndarray
) -> Callable[[np.ndarray], np.ndarray] | None:
    """The processor-sharing clock of each step's hosts (module docstring), or ``None``
    where the ranks do not share cores (``host_share`` = 1).

    ``work_s`` ``[S, P]``: each rank's local work before its exchange, already stretched by
    ``host_share(cluster, P)``. The returned function maps positions ``[S, …, P]`` on those
    same stretched clocks (each rank's points of its own work) to wall seconds from the
    step's start."""
    work_s = np.asarray(work_s, dtype=np.float64)
    n_steps, p = work_s.shape
    share = host_share(cluster, p)
    if share == 1.0:
        return None
    r = min(cluster.ranks_per_host, p)
    hosts = math.ceil(p / r)
    pad = hosts * r - p  # the last host's missing ranks: no work, done at once
    work = np.concatenate([work_s / share, np.zeros((n_steps, pad))], axis=1)
    xs = np.sort(work.reshape(n_steps, hosts, r), axis=2)  # [S, H, R] w_(1) ... w_(R)
    starts = np.concatenate([np.zeros((n_steps, hosts, 1)), xs[:, :, :-1]], axis=2)  # w_(j)
    busy = r - np.arange(r)  # ranks still working in segment j
    stretch = np.maximum(1.0, busy * cluster.threads_per_rank / cluster.host_cores)  # f_n
    t_starts = np.concatenate(
        [np.zeros((n_steps, hosts, 1)), np.cumsum((xs - starts) * stretch, axis=2)[:, :, :-1]],
        axis=2,
    )
    # [S, P]: every rank of this rank's host has the same work
    same = np.repeat(xs[:, :, 0] == xs[:, :, -1], r, axis=1)[:, :p]

    def clock(points_s: np.ndarray) -> np.ndarray:
        points_s = np.asarray(points_s, dtype=np.float64)
        given = points_s.reshape(n_steps, -1, p)  # [S, M, P]
        out = np.empty_like(given)
        for m in range(given.shape[1]):  # one [S, H, R] slice at a time (memory)
            x = np.concatenate([given[:, m] / share, np.zeros((n_steps, pad))], axis=1)
            x = x.reshape(n_steps, hosts, r)
            # the segment each point falls in: how many of w_(1) … w_(R−1) it has passed
            seg = (x[..., None] >= xs[:, :, None, :-1]).sum(axis=-1)  # [S, H, R]
            s0 = np.take_along_axis(starts, seg, axis=2)
            t0 = np.take_along_axis(t_starts, seg, axis=2)
            t = (t0 + (x - s0) * stretch[seg]).reshape(n_steps, hosts * r)[:, :p]
            out[:, m] = np.where(same, given[:, m], t)
        return out.reshape(points_s.shape)

    return clock
