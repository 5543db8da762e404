"""Link calibration: time real collectives over a size sweep and fit α, β, γ by least squares.

Each rank runs the same sweep (a torchrun-compatible entry point:
``python -m traces.training.distributed_calibrate --backend gloo -o measurements.json``);
rank 0 writes the measurements. :func:`fit_link` then fits one α-β-γ link to all of them:

* point-to-point, a ping-pong between ranks 0 and 1, half the round trip:
  ``t = α + n·β``
* ring allreduce of ``n`` bytes on ``P`` ranks:
  ``t = 2(P−1)·α + 2(P−1)/P·n·β + (P−1)/P·n·γ``
* ring allgather of ``m`` bytes per rank: ``t = (P−1)·α + (P−1)·m·β``
* vgcsim's allgatherv of ``m`` bytes per rank (:mod:`traces.training.distributed_allgatherv`:
  an all_gather of one int64 length, then the payload all_gather; on gloo the
  ``allgatherv/padded`` model): ``t = 2(P−1)·α + (P−1)·(m + 8)·β``

α is the per-message latency (s), β = 1/bandwidth (s/byte), γ the per-byte reduction cost
(s/byte); the formulas are the standard ring costs of Thakur, Rabenseifner & Gropp, "Optimization
of Collective Communication Operations in MPICH" (IJHPCA 2005). Assumptions: the backend runs
ring algorithms (gloo and NCCL both do for large messages; small messages may use others, which
shows up as fit error at small sizes); ranks start each repetition together after a barrier
(skew left after the barrier counts as communication); the slowest rank defines a repetition's
time and the median over repetitions (or the minimum, ``statistic="min"``) is the
measurement.

The fit minimises the squared log-ratio Σ (log t̂ − log t)² over α, β, γ ≥ 0: microsecond
and millisecond points weigh alike, and over- and under-prediction by the same factor cost
the same (a plain relative-error fit, Σ ((t̂ − t)/t)², caps under-prediction at −100 % and so
systematically under-predicts noisy timings). It starts from that relative-error fit, solved
exactly as a non-negative least squares over the 2³ active sets, and refines it with
Levenberg–Marquardt on log-parameters (which keeps them positive).
"""

from __future__ import annotations

import argparse
import itertools
import json
import logging
import platform
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from traces.errors import ConfigError, VgcsimError, unknown_name

log = logging.getLogger(__name__)

#: Operations the sweep can time, by the name used in measurement files and --ops.
OPS = ("p2p", "allreduce", "allgather", "allgatherv")
MEASUREMENTS_KIND = "vgcsim-calibration"
MEASUREMENTS_VERSION = 1


def default_sizes_bytes() -> tuple[int, ...]:
    """4 B to 4 MiB in powers of four: latency-bound to bandwidth-bound on common links."""
    return tuple(4**k for k in range(1, 12))


@dataclass(frozen=True)
class CalibrateConfig:
    """What the sweep measures. Sizes are bytes per message (allgather: per rank)."""

    backend: str = "gloo"
    ops: tuple[str, ...] = OPS
    sizes_bytes: tuple[int, ...] = field(default_factory=default_sizes_bytes)
    repeats: int = 10
    warmup: int = 2

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


# ----------------------------------------------------------------------------- measuring


def _time_op(op: str, size_bytes: int, rank: int, world: int, device: str) -> float:
    import torch
    import torch.distributed as dist

    if op == "p2p":
        buf = torch.zeros(size_bytes, dtype=torch.uint8, device=device)
        dist.barrier()
        t0 = time.perf_counter()
        if rank == 0:
            dist.send(buf, 1)
            dist.recv(buf, 1)
        elif rank == 1:
            dist.recv(buf, 0)
            dist.send(buf, 0)
        return (time.perf_counter() - t0) / 2 if rank in (0, 1) else 0.0
    if op == "allreduce":
        buf = torch.ones(max(1, size_bytes // 4), dtype=torch.float32, device=device)
        dist.barrier()
        t0 = time.perf_counter()
        dist.all_reduce(buf)
        return time.perf_counter() - t0
    if op == "allgatherv":
        from traces.training.distributed_allgatherv import allgatherv_segments

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


def measure(cfg: CalibrateConfig, rank: int, world: int, device: str = "cpu") -> list[dict]:
    """Run the sweep on this rank (a collective: every rank calls it with the same config).

    Returns rows ``{"op", "size_bytes", "seconds": [per repetition, slowest rank]}``.
    """
    import torch
    import torch.distributed as dist

    if world < 2:
        raise ConfigError("calibration needs at least 2 processes (--nprocs >= 2)")
    rows = []
    for op in cfg.ops:
        for size in cfg.sizes_bytes:
            times = []
            for rep in range(cfg.warmup + cfg.repeats):
                t = _time_op(op, size, rank, world, device)
                if rep >= cfg.warmup:
                    times.append(t)
            slowest = torch.tensor(times, dtype=torch.float64, device=device)
            dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
            rows.append({"op": op, "size_bytes": size, "seconds": slowest.cpu().tolist()})
            log.debug("%s %d B: median %.3g s", op, size, float(np.median(times)))
    return rows


def write_measurements(path: Path, cfg: CalibrateConfig, world: int, rows: list[dict]) -> None:
    doc = {
        "kind": MEASUREMENTS_KIND,
        "version": MEASUREMENTS_VERSION,
        "backend": cfg.backend,
        "world_size": world,
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
    if doc.get("kind") != MEASUREMENTS_KIND or doc.get("version") != MEASUREMENTS_VERSION:
        raise ConfigError(
            f"{path} is not a version-{MEASUREMENTS_VERSION} calibration file; "
            "re-run the calibration with this version of vgcsim"
        )
    return doc


# ----------------------------------------------------------------------------- fitting


def cost_coefficients(op: str, size_bytes: float, world: int) -> tuple[float, float, float]:
    """Coefficients (of α, β, γ) of one measurement's ring cost; see the module docstring."""
    p, n = world, float(size_bytes)
    if op == "p2p":
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
    """Fitted link: ``latency_s`` = α, ``bandwidth_Bps`` = 1/β, ``gamma_s_per_byte`` = γ."""

    latency_s: float
    bandwidth_Bps: float
    gamma_s_per_byte: float
    rms_rel_error: float
    rms_log_error: float  # sqrt(mean(log(fitted/measured)²)); exp() of it is a typical factor
    world_size: int
    backend: str


def _nnls_small(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Exact non-negative least squares for a handful of columns: best feasible active set."""
    k = a.shape[1]
    best, best_res = np.zeros(k), float(np.sum(b**2))
    for r in range(1, k + 1):
        for cols in itertools.combinations(range(k), r):
            sub = a[:, cols]
            if np.linalg.matrix_rank(sub) < r:
                continue
            x, *_ = np.linalg.lstsq(sub, b, rcond=None)
            if np.any(x < 0):
                continue
            res = float(np.sum((sub @ x - b) ** 2))
            if res < best_res:
                best, best_res = np.zeros(k), res
                best[list(cols)] = x
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


def fit_link(measurements: dict, statistic: str = "median") -> tuple[LinkFit, list[dict]]:
    """Fit α, β, γ to a measurement file's rows; returns the fit and the per-size error table.

    Each table row: op, size_bytes, measured_s (``statistic`` over repetitions), fitted_s,
    rel_error.
    """
    if statistic not in STATISTICS:
        raise unknown_name("statistic", statistic, STATISTICS)
    reduce = STATISTICS[statistic]
    world = int(measurements["world_size"])
    rows = measurements["rows"]
    if not rows:
        raise ConfigError("calibration measurements hold no rows")
    a = np.array([cost_coefficients(r["op"], r["size_bytes"], world) for r in rows])
    t = np.array([float(reduce(r["seconds"])) for r in rows])
    if np.any(t <= 0):
        raise VgcsimError("a measured time is not positive; the timer or the sweep is broken")
    x = _fit_log_ratio(a, t, _nnls_small(a / t[:, None], np.ones_like(t)))
    fitted = a @ x
    rel = (fitted - t) / t
    alpha, beta, gamma = (float(v) for v in x)
    fit = LinkFit(
        latency_s=alpha,
        bandwidth_Bps=(1.0 / beta) if beta > 0 else float("inf"),
        gamma_s_per_byte=gamma,
        rms_rel_error=float(np.sqrt(np.mean(rel**2))),
        rms_log_error=float(np.sqrt(np.mean(np.log(fitted / t) ** 2))),
        world_size=world,
        backend=str(measurements.get("backend", "")),
    )
    table = [
        {
            "op": r["op"],
            "size_bytes": int(r["size_bytes"]),
            "measured_s": float(ti),
            "fitted_s": float(fi),
            "rel_error": float(ei),
        }
        for r, ti, fi, ei in zip(rows, t, fitted, rel, strict=True)
    ]
    return fit, table


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
        prog="python -m traces.training.distributed_calibrate",
        description="One rank of the link calibration sweep (run under torchrun or vgcsim calibrate).",
    )
    p.add_argument("--backend", default="gloo")
    p.add_argument("--ops", default=",".join(OPS))
    p.add_argument("--sizes", default=None, help="comma-separated bytes (default 4..4Mi, x4)")
    p.add_argument("--repeats", type=int, default=10)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("-o", "--output", required=True, type=Path, help="measurements JSON (rank 0)")
    return p.parse_args(argv)


def config_from_args(
    backend: str, ops: str, sizes: str | None, repeats: int, warmup: int
) -> CalibrateConfig:
    """Build a :class:`CalibrateConfig` from the command-line strings both entry points take."""
    from traces.units import parse_size_bytes

    try:
        size_list = (
            tuple(int(parse_size_bytes(s.strip())) for s in sizes.split(",") if s.strip())
            if sizes
            else default_sizes_bytes()
        )
    except ValueError as exc:
        raise ConfigError(f"bad --sizes: {exc}") from None
    return CalibrateConfig(
        backend=backend,
        ops=tuple(o.strip() for o in ops.split(",") if o.strip()),
        sizes_bytes=size_list,
        repeats=repeats,
        warmup=warmup,
    )


def main(argv: Sequence[str] | None = None) -> int:
    """torchrun entry: every rank measures; rank 0 writes ``--output``."""

    from traces.training.distributed_launch import (
        device_for,
        init_process_group,
        leave_process_group,
    )

    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    args = _parse_args(argv)
    try:
        cfg = config_from_args(args.backend, args.ops, args.sizes, args.repeats, args.warmup)
        env = init_process_group(cfg.backend)
        completed = False
        try:
            rows = measure(cfg, env.rank, env.world_size, device_for(cfg.backend))
            if env.rank == 0:
                write_measurements(args.output, cfg, env.world_size, rows)
            completed = True
        finally:
            leave_process_group(completed=completed)
    except VgcsimError as exc:
        print(f"calibrate: error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    from traces.training.distributed_launch import exit_rank

    exit_rank(main())
