"""Link calibration: time real messages and collectives over a size sweep and fit α, β, γ.

Each rank runs the same sweep (a torchrun-compatible entry point:
``python -m vgcsim.traces.training.distributed_calibrate --backend gloo -o measurements.json``, or
``vgcsim calibrate``, which also fits); rank 0 writes the measurements. Timed on every rank
after a barrier (a repetition's time is the slowest rank's):

* ``p2p``, a ping-pong between rank 0 and the first rank on another node (rank 1 when all
  ranks share one node), half the round trip: ``t = α + n·β``
* ``p2p_intra``, the same between rank 0 and another rank of its own node; measured only
  when the job spans several nodes and rank 0's node holds more than one rank
* ring allreduce of ``n`` bytes on ``P`` ranks:
  ``t = 2(P−1)·α + 2(P−1)/P·n·β + (P−1)/P·n·γ``
* ring allgather of ``m`` bytes per rank: ``t = (P−1)·α + (P−1)·m·β``
* vgcsim's allgatherv of ``m`` bytes per rank (:mod:`vgcsim.traces.training.distributed_allgatherv`:
  an all_gather of one int64 length, then the payload all_gather; on gloo the
  ``allgatherv/padded`` model): ``t = 2(P−1)·α + (P−1)·(m + 8)·β``

α is the per-message latency (s), β = 1/bandwidth (s/byte), γ the per-byte reduction cost
(s/byte); the formulas are the standard ring costs of Thakur, Rabenseifner & Gropp, "Optimization
of Collective Communication Operations in MPICH" (IJHPCA 2005). A rank's node is its
``GROUP_RANK`` (torchrun sets it), else its host name.

The sweep: sizes log-spaced ×4 from 4 B to 64 MiB by default (a link's bandwidth shows only
once messages are well past its latency, its token bucket or its socket buffers); every size
gets ``warmup`` untimed repetitions, then ``repeats`` timed ones, fewer (never under 3) where
they would take longer than ``budget_s``; the measurement is their median (``min``: the best
case).

The fit (:func:`fit_link`) takes latency from small messages and bandwidth from large ones,
so that neither regime's many points can drag the other's parameter:

1. *bandwidth regime*: the rows measured at least ``BANDWIDTH_FACTOR`` (4) times their op's
   fastest time. On them β, γ ≥ 0 and a free intercept minimise Σ (t̂ − t)², exactly
   (linear least squares over the active sets of β, γ): on the seconds themselves, so the
   largest messages, the least noisy relative to their time, set the slope. The intercept
   absorbs whatever only shifts large messages (a token-bucket burst sent at line rate, a
   rendezvous handshake) and is not used as α.
2. *latency regime*: the rows whose bandwidth terms explain at most a fifth of the measured
   time; α ≥ 0 is the median of (t − bandwidth terms) / (α's coefficient) over them (no such
   row: α = the intercept, if positive, else 0).
3. When the bandwidth regime holds fewer than two sizes (or finds no per-byte cost),
   α, β, γ ≥ 0 come from one fit minimising the squared log ratio Σ (log t̂ − log t)²
   (Levenberg–Marquardt on log-parameters, started from the exact non-negative
   relative-error least squares).

By default α and β come from ``p2p`` alone (the link, without a collective algorithm's
behaviour) and γ from ``allreduce``'s rows where β's term alone is at least half the measured
time, with α and β fixed, minimising the relative error Σ ((t̂ − t)/t)² (what allreduce pays
beyond moving its bytes: the reduction). The other collectives are predicted, not fitted: their
rows in the error table check the ring formulas on this link. ``p2p_intra`` is fitted the same
way into the intra-node link. The fit's *typical error* is exp(rms log(t̂/t)) − 1 over the rows
of the ops that fixed α and β; rows between the two regimes count too, so a link that the α-β
line does not describe (a large burst, a protocol switch) shows as a large typical error.
"""

from __future__ import annotations

import argparse
import itertools
import json
import logging
import math
import platform
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from vgcsim.core.errors import ConfigError, VgcsimError, unknown_name

log = logging.getLogger(__name__)

#: Operations the sweep can time, by the name used in measurement files and --ops.
OPS = ("p2p", "p2p_intra", "allreduce", "allgather", "allgatherv")
#: Operations timed by default (``p2p_intra`` only where a node holds several ranks).
DEFAULT_OPS = OPS
MEASUREMENTS_KIND = "vgcsim-calibration"
MEASUREMENTS_VERSION = 2
#: Versions :func:`read_measurements` accepts (1: one node, no pair or node layout).
READABLE_VERSIONS = (1, 2)
#: Timed repetitions kept even when ``budget_s`` would allow fewer.
MIN_REPEATS = 3
#: A row is in the bandwidth regime from this many times its op's fastest time.
BANDWIDTH_FACTOR = 4.0
#: A row is in the latency regime while the bandwidth terms explain at most this share.
LATENCY_SHARE = 0.2
#: Refuse to write a cluster file above this typical error (exp(rms log ratio) − 1).
DEFAULT_MAX_ERROR = 0.25


def sizes_between(lo_bytes: int, hi_bytes: int, factor: int = 4) -> tuple[int, ...]:
    """``lo, lo·factor, lo·factor², …`` below ``hi``, then ``hi`` itself (log-spaced)."""
    if lo_bytes < 1 or hi_bytes < lo_bytes:
        raise ConfigError(f"size range {lo_bytes}:{hi_bytes} must have 1 <= MIN <= MAX")
    out, n = [], lo_bytes
    while n < hi_bytes:
        out.append(n)
        n *= factor
    return (*out, hi_bytes)


def default_sizes_bytes() -> tuple[int, ...]:
    """4 B to 64 MiB in powers of four: latency-bound to well past any burst or buffer."""
    return sizes_between(4, 64 * 2**20)


def parse_sizes(text: str) -> tuple[tuple[int, ...], tuple[int, int] | None]:
    """``"MIN:MAX"`` (log-spaced ×4, both ends included) or a comma list ``"4,1KiB,1MiB"``.

    Returns the sizes and, for a range, its bounds (a refit keeps every measured size inside
    them).
    """
    from vgcsim.core.units import parse_size_bytes

    def one(v: str) -> int:
        try:
            n = parse_size_bytes(v.strip())
        except (ValueError, ConfigError) as exc:
            raise ConfigError(f"bad --sizes: {exc}") from None
        if n != int(n):
            raise ConfigError(f"bad --sizes: {v.strip()!r} is not a whole number of bytes")
        return int(n)

    try:
        if ":" in text:
            lo, _, hi = text.partition(":")
            bounds = (one(lo), one(hi))
            return sizes_between(*bounds), bounds
        return tuple(one(v) for v in text.split(",") if v.strip()), None
    except ValueError as exc:
        raise ConfigError(f"bad --sizes: {exc}") from None


@dataclass(frozen=True)
class CalibrateConfig:
    """What the sweep measures. Sizes are bytes per message (allgather: per rank).

    Every size gets ``warmup`` untimed repetitions, then ``repeats`` timed ones, fewer (at least
    :data:`MIN_REPEATS`) where the last warm-up says they would take longer than ``budget_s``.
    """

    backend: str = "gloo"
    ops: tuple[str, ...] = DEFAULT_OPS
    sizes_bytes: tuple[int, ...] = field(default_factory=default_sizes_bytes)
    repeats: int = 10
    warmup: int = 2
    budget_s: float = 10.0

    def __post_init__(self) -> None:
        if not self.ops:
            raise ConfigError(f"give at least one op to time; valid: {', '.join(OPS)}")
        unknown = [o for o in self.ops if o not in OPS]
        if unknown:
            raise ConfigError(f"unknown op {unknown[0]!r}; valid: {', '.join(OPS)}")
        if not self.sizes_bytes or min(self.sizes_bytes) < 4:
            raise ConfigError("sizes_bytes must be non-empty and each size >= 4 bytes")
        if self.repeats < 1 or self.warmup < 0:
            raise ConfigError("repeats must be >= 1 and warmup >= 0")
        if not self.budget_s > 0:
            raise ConfigError(f"budget_s must be positive, got {self.budget_s}")


# ----------------------------------------------------------------------------- measuring


def p2p_pairs(nodes: Sequence[int]) -> dict[str, tuple[int, int]]:
    """The ping-pong pairs for ranks on ``nodes`` (node index per rank).

    ``p2p``: rank 0 and the first rank on another node, or rank 1 when there is one node;
    ``p2p_intra``: rank 0 and the first other rank on its node, when there are several nodes.
    """
    other = next((r for r in range(1, len(nodes)) if nodes[r] != nodes[0]), None)
    same = next((r for r in range(1, len(nodes)) if nodes[r] == nodes[0]), None)
    if other is None:
        return {"p2p": (0, 1)} if len(nodes) > 1 else {}
    pairs = {"p2p": (0, other)}
    if same is not None:
        pairs["p2p_intra"] = (0, same)
    return pairs


def node_layout(node: str) -> list[int]:
    """Every rank's node index (nodes numbered by their first rank); a collective."""
    import torch.distributed as dist

    keys: list = [None] * dist.get_world_size()
    dist.all_gather_object(keys, node)
    first: dict[str, int] = {}
    return [first.setdefault(k, len(first)) for k in keys]


def _time_op(
    op: str, size_bytes: int, rank: int, world: int, device: str, pair: tuple[int, int]
) -> float:
    import torch
    import torch.distributed as dist

    if op in ("p2p", "p2p_intra"):
        a, b = pair
        buf = torch.zeros(size_bytes, dtype=torch.uint8, device=device)
        dist.barrier()
        t0 = time.perf_counter()
        if rank == a:
            dist.send(buf, b)
            dist.recv(buf, b)
        elif rank == b:
            dist.recv(buf, a)
            dist.send(buf, a)
        return (time.perf_counter() - t0) / 2 if rank in pair else 0.0
    if op == "allreduce":
        buf = torch.ones(max(1, size_bytes // 4), dtype=torch.float32, device=device)
        dist.barrier()
        t0 = time.perf_counter()
        dist.all_reduce(buf)
        return time.perf_counter() - t0
    if op == "allgatherv":
        from vgcsim.traces.training.distributed_allgatherv import allgatherv_segments

        payload = bytes(size_bytes)
        dist.barrier()
        t0 = time.perf_counter()
        allgatherv_segments([payload], device=device)
        return time.perf_counter() - t0
    buf = torch.zeros(size_bytes, dtype=torch.uint8, device=device)
    out = [torch.empty_like(buf) for _ in range(world)]
    dist.barrier()
    t0 = time.perf_counter()
    dist.all_gather(out, buf)
    return time.perf_counter() - t0


def _slowest(values: list[float], device: str) -> list[float]:
    import torch
    import torch.distributed as dist

    t = torch.tensor(values, dtype=torch.float64, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return t.cpu().tolist()


def measure(
    cfg: CalibrateConfig,
    rank: int,
    world: int,
    device: str = "cpu",
    nodes: Sequence[int] | None = None,
) -> list[dict]:
    """Run the sweep on this rank (a collective: every rank calls it with the same config).

    ``nodes`` gives every rank's node index (default: all on one node). Returns rows
    ``{"op", "size_bytes", "seconds": [per repetition, slowest rank]}`` (p2p rows also
    ``"pair"``); an op that needs what the job lacks (``p2p_intra`` on one rank per node) is
    skipped.
    """
    if world < 2:
        raise ConfigError("calibration needs at least 2 processes (--nprocs >= 2)")
    pairs = p2p_pairs(list(nodes) if nodes is not None else [0] * world)
    rows = []
    for op in cfg.ops:
        if op.startswith("p2p") and op not in pairs:
            log.info("%s skipped: no such pair in this job's node layout", op)
            continue
        pair = pairs.get(op, (0, 1))
        for size in cfg.sizes_bytes:
            last = 0.0
            for _ in range(cfg.warmup):
                last = _time_op(op, size, rank, world, device, pair)
            repeats = cfg.repeats
            if cfg.warmup:
                # Every rank must run the same count: agree on the slowest warm-up.
                slow = _slowest([last], device)[0]
                fit = int(cfg.budget_s // slow) if slow > 0 else repeats
                repeats = max(min(MIN_REPEATS, cfg.repeats), min(cfg.repeats, fit))
            times = [_time_op(op, size, rank, world, device, pair) for _ in range(repeats)]
            row = {"op": op, "size_bytes": size, "seconds": _slowest(times, device)}
            if op.startswith("p2p"):
                row["pair"] = list(pair)
            rows.append(row)
            log.debug("%s %d B: median %.3g s", op, size, float(np.median(row["seconds"])))
    return rows


def write_measurements(
    path: Path, cfg: CalibrateConfig, world: int, rows: list[dict], nodes: Sequence[int]
) -> None:
    doc = {
        "kind": MEASUREMENTS_KIND,
        "version": MEASUREMENTS_VERSION,
        "backend": cfg.backend,
        "world_size": world,
        "nodes": list(nodes),
        "config": {**asdict(cfg), "ops": list(cfg.ops), "sizes_bytes": list(cfg.sizes_bytes)},
        "machine": {"platform": platform.platform(), "node": platform.node()},
        "rows": rows,
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(doc, indent=1))
    tmp.replace(path)


def read_measurements(path: Path) -> dict:
    """Read a measurement file written by the calibration entry point."""
    try:
        doc = json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise ConfigError(f"no calibration measurements at {path}") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ConfigError(f"unreadable calibration measurements {path}: {exc}") from None
    if (
        not isinstance(doc, dict)
        or doc.get("kind") != MEASUREMENTS_KIND
        or doc.get("version") not in READABLE_VERSIONS
    ):
        raise ConfigError(
            f"{path} is not a version-{MEASUREMENTS_VERSION} calibration file; "
            "re-run the calibration with this version of vgcsim"
        )
    return doc


def select_rows(
    measurements: dict,
    *,
    ops: set[str] | None = None,
    sizes: Sequence[int] | None = None,
    bounds: tuple[int, int] | None = None,
) -> dict:
    """The measurements restricted to ``ops``, to the listed ``sizes`` or to sizes within
    ``bounds`` (inclusive); a selection that keeps nothing is a :class:`ConfigError`."""
    rows = measurements["rows"]
    if ops:
        rows = [r for r in rows if r["op"] in ops]
    if bounds is not None:
        rows = [r for r in rows if bounds[0] <= r["size_bytes"] <= bounds[1]]
    elif sizes:
        rows = [r for r in rows if r["size_bytes"] in set(sizes)]
    if not rows:
        have = sorted({r["size_bytes"] for r in measurements["rows"]})
        raise ConfigError(
            "no measurement left after selecting ops/sizes; measured sizes: "
            + ", ".join(str(s) for s in have)
        )
    return {**measurements, "rows": rows}


# ----------------------------------------------------------------------------- fitting


def cost_coefficients(op: str, size_bytes: float, world: int) -> tuple[float, float, float]:
    """Coefficients (of α, β, γ) of one measurement's ring cost; see the module docstring."""
    p, n = world, float(size_bytes)
    if op in ("p2p", "p2p_intra"):
        return (1.0, n, 0.0)
    if op == "allreduce":
        return (2.0 * (p - 1), 2.0 * (p - 1) / p * n, (p - 1) / p * n)
    if op == "allgather":
        return (float(p - 1), (p - 1) * n, 0.0)
    if op == "allgatherv":
        return (2.0 * (p - 1), (p - 1) * (n + 8.0), 0.0)
    raise ConfigError(f"unknown op {op!r}; valid: {', '.join(OPS)}")


@dataclass(frozen=True)
class LinkFit:
    """Fitted link: ``latency_s`` = α, ``bandwidth_Bps`` = 1/β, ``gamma_s_per_byte`` = γ.

    ``rms_rel_error`` and ``rms_log_error`` are over the rows of ``fit_ops`` (the ops that fixed
    α and β); ``typical_error`` = exp(rms_log_error) − 1.
    """

    latency_s: float
    bandwidth_Bps: float
    gamma_s_per_byte: float
    rms_rel_error: float
    rms_log_error: float  # sqrt(mean(log(fitted/measured)²)); exp() of it is a typical factor
    world_size: int
    backend: str
    fit_ops: tuple[str, ...] = ()
    gamma_op: str = ""
    method: str = "regimes"

    @property
    def typical_error(self) -> float:
        return math.expm1(self.rms_log_error)


def _nnls_small(a: np.ndarray, b: np.ndarray, free: Sequence[int] = ()) -> np.ndarray:
    """Exact least squares of ``a·x ≈ b`` with x ≥ 0 except the columns in ``free`` (any sign),
    for a handful of columns: the best solution over every active set."""
    k = a.shape[1]
    bound = [j for j in range(k) if j not in free]
    best, best_res = np.zeros(k), math.inf
    for r in range(len(bound) + 1):
        for extra in itertools.combinations(bound, r):
            cols = sorted([*free, *extra])
            if not cols:
                res = float(np.sum(b**2))
                if res < best_res:
                    best, best_res = np.zeros(k), res
                continue
            sub = a[:, cols]
            if np.linalg.matrix_rank(sub) < len(cols):
                continue
            x, *_ = np.linalg.lstsq(sub, b, rcond=None)
            if np.any(x[[cols.index(j) for j in extra]] < 0):
                continue
            res = float(np.sum((sub @ x - b) ** 2))
            if res < best_res:
                best, best_res = np.zeros(k), res
                best[cols] = x
    return best


#: How repetitions of one (op, size) become its measurement: the median is what a training
#: step sees (OS noise included); the minimum is the network's best case.
STATISTICS = {"median": np.median, "min": np.min}


def _fit_log_ratio(a: np.ndarray, t: np.ndarray, x0: np.ndarray) -> np.ndarray:
    """Minimise Σ (log(a·x) − log t)² over x ≥ 0 by Levenberg–Marquardt in log x, from x0."""
    active = np.flatnonzero(a.any(axis=0))
    x = np.zeros(a.shape[1])
    if active.size == 0:
        return x
    a = a[:, active]
    # Floor each start value at a thousandth of the time its term would need to explain alone,
    # so that a parameter the start set to 0 can still grow.
    with np.errstate(divide="ignore"):
        scale = np.array([np.median(t[a[:, j] > 0] / a[a[:, j] > 0, j]) for j in range(a.shape[1])])
    phi = np.log(np.maximum(x0[active], 1e-3 * scale))
    log_t = np.log(t)

    def residual(phi: np.ndarray) -> np.ndarray:
        return np.log(a @ np.exp(phi)) - log_t

    r = residual(phi)
    cost, damping = float(r @ r), 1e-3
    for _ in range(500):
        theta = np.exp(phi)
        jac = a * theta[None, :] / (a @ theta)[:, None]
        h = jac.T @ jac
        step = np.linalg.solve(h + damping * np.diag(np.diag(h) + 1e-12), -(jac.T @ r))
        r_new = residual(phi + step)
        if float(r_new @ r_new) < cost:
            phi, r, cost = phi + step, r_new, float(r_new @ r_new)
            damping = max(damping / 3, 1e-12)
            if np.max(np.abs(step)) < 1e-9:
                break
        else:
            damping *= 5
            if damping > 1e12:
                break
    theta = np.exp(phi)
    # A term that explains under a millionth of every measurement is zero, not 1e-90.
    share = (a * theta[None, :]) / (a @ theta)[:, None]
    theta[share.max(axis=0) < 1e-6] = 0.0
    x[active] = theta
    return x


def _fit_joint(a: np.ndarray, t: np.ndarray) -> np.ndarray:
    """α, β, γ ≥ 0 minimising the squared log ratio (started from the relative-error NNLS)."""
    return _fit_log_ratio(a, t, _nnls_small(a / t[:, None], np.ones_like(t)))


def _fit_regimes(
    a: np.ndarray, t: np.ndarray, ops: Sequence[str]
) -> tuple[np.ndarray, list[str], str]:
    """Latency from small messages, bandwidth from large ones (steps 1-3 of the module
    docstring). Returns (α, β, γ), each row's regime and the method used."""
    ops_arr = np.asarray(ops)
    floor = {op: float(t[ops_arr == op].min()) for op in set(ops)}
    band = np.array([ti >= BANDWIDTH_FACTOR * floor[op] for ti, op in zip(t, ops, strict=True)])
    if np.unique(a[band, 1]).size >= 2:
        # β, γ ≥ 0 and a free-sign intercept (column 0) by least squares on the seconds
        # themselves, so that the largest messages, the least noisy relative to their time,
        # set the slope (scaled by the largest time for conditioning only).
        scale = float(t[band].max())
        x_band = _nnls_small(a[band] / scale, t[band] / scale, free=(0,))
        if x_band[1] > 0:
            bw = a[:, 1] * x_band[1] + a[:, 2] * x_band[2]
            lat = bw <= LATENCY_SHARE * t
            alpha = (
                float(np.median((t[lat] - bw[lat]) / a[lat, 0])) if lat.any() else float(x_band[0])
            )
            roles = [
                "latency" if lat[i] else "bandwidth" if band[i] else "between"
                for i in range(len(t))
            ]
            return np.array([max(alpha, 0.0), x_band[1], x_band[2]]), roles, "regimes"
    return _fit_joint(a, t), ["joint"] * len(t), "joint"


def _gamma_given(a: np.ndarray, t: np.ndarray, alpha: float, beta: float) -> float:
    """γ ≥ 0 minimising Σ ((α·k_α + β·k_β + γ·k_γ − t)/t)² with α, β fixed (closed form)."""
    rest = t - a[:, 0] * alpha - a[:, 1] * beta
    c = a[:, 2] / t
    den = float(c @ c)
    return max(0.0, float(c @ (rest / t)) / den) if den > 0 else 0.0


def fit_link(
    measurements: dict,
    statistic: str = "median",
    *,
    ops: Sequence[str] | None = None,
    gamma_op: str | None = "allreduce",
) -> tuple[LinkFit, list[dict]]:
    """Fit α, β, γ to a measurement file's rows; returns the fit and the per-size error table.

    ``ops`` fix α and β (and γ when one of them has a γ term); default ``p2p`` when it was
    measured, else every measured collective. ``gamma_op`` (default ``allreduce``), when
    measured and not among ``ops``, then gives γ from its bandwidth-bound rows with α, β fixed.
    ``p2p_intra`` rows are left out (see :func:`fit_intra_link`). Each table row: op,
    size_bytes, measured_s (``statistic`` over repetitions), fitted_s, rel_error and role
    (latency, bandwidth, between, joint: how the row entered the fit; gamma; check: predicted
    only).
    """
    if statistic not in STATISTICS:
        raise unknown_name("statistic", statistic, STATISTICS)
    reduce = STATISTICS[statistic]
    world = int(measurements["world_size"])
    rows = [r for r in measurements["rows"] if r["op"] != "p2p_intra"]
    if not rows:
        raise ConfigError("calibration measurements hold no rows for the inter-node link")
    measured = {r["op"] for r in rows}
    if ops:
        fit_ops = tuple(o for o in ops if o in measured)
        if not fit_ops:
            raise ConfigError(
                f"none of the ops to fit ({', '.join(ops)}) was measured "
                f"(measured: {', '.join(sorted(measured))})"
            )
    else:
        fit_ops = ("p2p",) if "p2p" in measured else tuple(o for o in OPS if o in measured)
    a = np.array([cost_coefficients(r["op"], r["size_bytes"], world) for r in rows])
    t = np.array([float(reduce(r["seconds"])) for r in rows])
    if np.any(t <= 0):
        raise VgcsimError("a measured time is not positive; the timer or the sweep is broken")
    used = np.array([r["op"] in fit_ops for r in rows])
    used_ops = [r["op"] for r, u in zip(rows, used, strict=True) if u]
    x, used_roles, method = _fit_regimes(a[used], t[used], used_ops)
    roles = np.array(["check"] * len(rows), dtype=object)
    roles[used] = used_roles
    g_op = ""
    if gamma_op and gamma_op in measured and gamma_op not in fit_ops and x[2] == 0:
        g = np.array([r["op"] == gamma_op for r in rows])
        g_t = t[g]
        # Its rows that the fitted link already calls bandwidth-bound (β's term alone is at
        # least half the measured time), where a per-byte excess can show.
        g_band = a[g, 1] * x[1] >= 0.5 * g_t
        if g_band.any():
            x[2] = _gamma_given(a[g][g_band], g_t[g_band], x[0], x[1])
            g_idx = np.flatnonzero(g)[g_band]
            roles[g_idx] = "gamma"
            g_op = gamma_op
    fitted = a @ x
    rel = (fitted - t) / t
    with np.errstate(divide="ignore"):
        log_ratio = np.log(fitted / t)
    alpha, beta, gamma = (float(v) for v in x)
    fit = LinkFit(
        latency_s=alpha,
        bandwidth_Bps=(1.0 / beta) if beta > 0 else float("inf"),
        gamma_s_per_byte=gamma,
        rms_rel_error=float(np.sqrt(np.mean(rel[used] ** 2))),
        rms_log_error=float(np.sqrt(np.mean(log_ratio[used] ** 2))),
        world_size=world,
        backend=str(measurements.get("backend", "")),
        fit_ops=fit_ops,
        gamma_op=g_op,
        method=method,
    )
    return fit, _table(rows, t, fitted, rel, roles)


def _table(rows, t, fitted, rel, roles) -> list[dict]:
    return [
        {
            "op": r["op"],
            "size_bytes": int(r["size_bytes"]),
            "measured_s": float(ti),
            "fitted_s": float(fi),
            "rel_error": float(ei),
            "role": str(ro),
        }
        for r, ti, fi, ei, ro in zip(rows, t, fitted, rel, roles, strict=True)
    ]


def fit_intra_link(
    measurements: dict, statistic: str = "median"
) -> tuple[LinkFit, list[dict]] | None:
    """α and β of the intra-node link from the ``p2p_intra`` rows (None when not measured)."""
    rows = [r for r in measurements["rows"] if r["op"] == "p2p_intra"]
    if not rows:
        return None
    reduce = STATISTICS[statistic]
    a = np.array([cost_coefficients(r["op"], r["size_bytes"], 2) for r in rows])
    t = np.array([float(reduce(r["seconds"])) for r in rows])
    if np.any(t <= 0):
        raise VgcsimError("a measured time is not positive; the timer or the sweep is broken")
    x, roles, method = _fit_regimes(a, t, ["p2p_intra"] * len(rows))
    fitted = a @ x
    rel = (fitted - t) / t
    fit = LinkFit(
        latency_s=float(x[0]),
        bandwidth_Bps=(1.0 / x[1]) if x[1] > 0 else float("inf"),
        gamma_s_per_byte=0.0,
        rms_rel_error=float(np.sqrt(np.mean(rel**2))),
        rms_log_error=float(np.sqrt(np.mean(np.log(fitted / t) ** 2))),
        world_size=int(measurements["world_size"]),
        backend=str(measurements.get("backend", "")),
        fit_ops=("p2p_intra",),
        method=method,
    )
    return fit, _table(rows, t, fitted, rel, roles)


def protocol_switch(table: list[dict], op: str = "p2p") -> dict | None:
    """Where ``op``'s timings step from one α-β line to another (an eager/rendezvous switch).

    Tries every split of the sorted sizes with at least 3 sizes on each side, fits each side
    by the log-ratio fit, and reports the split when two lines halve the rms log error of one
    line that is itself over 10 % typical error: ``{"below_bytes", "above_bytes", "below":
    (α, β), "above": (α, β)}``. None when no split does that.
    """
    rows = sorted((r for r in table if r["op"] == op), key=lambda r: r["size_bytes"])
    if len(rows) < 6:
        return None
    n = np.array([r["size_bytes"] for r in rows], dtype=float)
    t = np.array([r["measured_s"] for r in rows])
    a = np.column_stack([np.ones_like(n), n])

    def rms(x: np.ndarray, sl: slice) -> float:
        return float(np.sum(np.log((a[sl] @ x) / t[sl]) ** 2))

    one = _fit_joint(a, t)
    base = math.sqrt(rms(one, slice(None)) / len(t))
    if math.expm1(base) <= 0.1:
        return None
    best = None
    for k in range(3, len(t) - 2):
        lo, hi = slice(0, k), slice(k, None)
        x_lo, x_hi = _fit_joint(a[lo], t[lo]), _fit_joint(a[hi], t[hi])
        if x_lo[1] <= 0 and x_hi[1] <= 0:
            continue
        two = math.sqrt((rms(x_lo, lo) + rms(x_hi, hi)) / len(t))
        if two < 0.5 * base and (best is None or two < best[0]):
            best = (two, k, x_lo, x_hi)
    if best is None:
        return None
    _, k, x_lo, x_hi = best
    return {
        "below_bytes": int(n[k - 1]),
        "above_bytes": int(n[k]),
        "below": (float(x_lo[0]), float(x_lo[1])),
        "above": (float(x_hi[0]), float(x_hi[1])),
    }


def plot_fit(table: list[dict], ax=None):
    """Measured (points) and fitted (lines) seconds against message size, one colour per op."""
    if ax is None:
        import matplotlib.pyplot as plt

        _, ax = plt.subplots(figsize=(6, 4))
    ops = list(dict.fromkeys(r["op"] for r in table))
    for k, op in enumerate(ops):
        rows = sorted((r for r in table if r["op"] == op), key=lambda r: r["size_bytes"])
        size = [r["size_bytes"] for r in rows]
        color = f"C{k}"
        ax.loglog(size, [r["measured_s"] for r in rows], "o", ms=4, color=color, label=op)
        ax.loglog(size, [r["fitted_s"] for r in rows], "-", lw=1, color=color)
    ax.set_xlabel("message size (bytes; allgather(v): per rank)")
    ax.set_ylabel("seconds (points: measured, lines: fit)")
    ax.legend(fontsize=8)
    return ax


# ----------------------------------------------------------------------------- entry point


def _parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m vgcsim.traces.training.distributed_calibrate",
        description="One rank of the link calibration sweep (run under torchrun or vgcsim calibrate).",
    )
    p.add_argument("--backend", default="gloo")
    p.add_argument("--ops", default=",".join(DEFAULT_OPS))
    p.add_argument("--sizes", default=None, help="MIN:MAX (x4) or a comma list (default 4:64MiB)")
    p.add_argument("--repeats", type=int, default=10)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--budget", type=float, default=10.0, help="seconds per size (>= 3 repeats)")
    p.add_argument("--iface", default=None, help="network interface for gloo/NCCL sockets")
    p.add_argument("-o", "--output", required=True, type=Path, help="measurements JSON (rank 0)")
    return p.parse_args(argv)


def config_from_args(
    backend: str,
    ops: str,
    sizes: str | None,
    repeats: int,
    warmup: int,
    budget_s: float = 10.0,
) -> CalibrateConfig:
    """Build a :class:`CalibrateConfig` from the command-line strings both entry points take."""
    size_list = parse_sizes(sizes)[0] if sizes else default_sizes_bytes()
    return CalibrateConfig(
        backend=backend,
        ops=tuple(o.strip() for o in ops.split(",") if o.strip()),
        sizes_bytes=size_list,
        repeats=repeats,
        warmup=warmup,
        budget_s=budget_s,
    )


def run_rank(cfg: CalibrateConfig, output: Path, iface: str | None = None) -> int:
    """Join the process group the environment describes, run the sweep, leave; rank 0 writes
    ``output``. Returns this rank's number."""
    import os

    from vgcsim.traces.training.distributed_launch import (
        device_for,
        init_process_group,
        leave_process_group,
        socket_iface_env,
    )

    os.environ.update(socket_iface_env(iface))
    env = init_process_group(cfg.backend)
    completed = False
    try:
        nodes = node_layout(env.node)
        rows = measure(cfg, env.rank, env.world_size, device_for(cfg.backend), nodes)
        if env.rank == 0:
            write_measurements(output, cfg, env.world_size, rows, nodes)
        completed = True
    finally:
        leave_process_group(completed=completed)
    return env.rank


def main(argv: Sequence[str] | None = None) -> int:
    """torchrun entry: every rank measures; rank 0 writes ``--output``."""
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    args = _parse_args(argv)
    try:
        cfg = config_from_args(
            args.backend, args.ops, args.sizes, args.repeats, args.warmup, args.budget
        )
        run_rank(cfg, args.output, args.iface)
    except VgcsimError as exc:
        print(f"calibrate: error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    from vgcsim.traces.training.distributed_launch import exit_rank

    exit_rank(main())
