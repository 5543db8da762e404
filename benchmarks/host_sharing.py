"""How the ranks of one host share its cores in lock step: the measured factor against the
two rules of ``host_sharing`` (``vgcsim.core.clusterspec.host_share``).

For each rank count R (``--ranks``, default 1 to twice this machine's cores) the script runs R
gloo ranks on loopback, one torch thread each. Every step, every rank spends c seconds of its
own CPU time (``vgcsim.traces.training.distributed_calibrate.busy``, the spin ``vgcsim
calibrate --busy-before`` runs) and then all-reduces one float, so the ranks move in lock
step as data-parallel training does; a step's time is the slowest rank's, from the end of
one all-reduce to the end of the next. For c in ``--work`` (default 2, 5, 10, 20, 40 ms):

    measured factor f = (median step − median step at c = 0) / c

beside the factor of each rule for R ranks of one thread on C cores (C: the cores this
process may run on): ``fullest-core`` ⌈R / C⌉ and ``fair`` R / C (both 1 at R ≤ C). The rule
nearer to the measured factor is the one to put in a cluster file (``host_sharing``) for
jobs whose compute phase lasts about c.

    python benchmarks/host_sharing.py
    python benchmarks/host_sharing.py --ranks 3,4 --work 5ms,10ms --steps 40 --json

JSON keys: ``cores``, ``rows`` (per R and c: ``ranks``, ``work_s``, ``step_s``,
``sync_s``, ``measured_factor``, ``fullest_core``, ``fair``, ``nearer``: the rule nearer
the measured factor, ``both`` where the rules agree) and ``nearer`` (in how many rows where
the rules differ each rule is nearer). Timing needs a quiet machine.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _ranks import launch_ranks, run_main  # noqa: E402


def _parse(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", help="rank counts, comma-separated (default 1 to 2 × cores)")
    ap.add_argument("--work", default="2ms,5ms,10ms,20ms,40ms", help="CPU work per step")
    ap.add_argument("--steps", type=int, default=40, help="timed steps per work size")
    ap.add_argument("--warmup", type=int, default=8, help="untimed steps first")
    ap.add_argument("--json", action="store_true", help="print the result as JSON")
    ap.add_argument("--rank-main", metavar="OUT", help=argparse.SUPPRESS)
    return ap.parse_args(argv)


def _work_s(text: str) -> list[float]:
    from vgcsim.core.errors import ConfigError
    from vgcsim.core.units import parse_time_s

    try:
        out = [parse_time_s(x) for x in text.split(",") if x.strip()]
    except (ValueError, ConfigError) as exc:
        raise ConfigError(f"--work {text!r}: {exc}") from None
    if not out or not all(0 < w <= 10 for w in out):
        raise ConfigError(f"--work {text!r}: give durations in (0, 10 s], e.g. 5ms,20ms")
    return out


def rank_main(args: argparse.Namespace) -> int:
    import torch
    import torch.distributed as dist

    from vgcsim.traces.training.distributed_calibrate import busy
    from vgcsim.traces.training.distributed_launch import (
        exit_rank,
        init_process_group,
        leave_process_group,
    )

    env = init_process_group("gloo", timeout_s=600)
    token = torch.zeros(1)
    medians = {}
    for work in [0.0, *_work_s(args.work)]:
        walls = []
        dist.all_reduce(token)
        for step in range(args.warmup + args.steps):
            t0 = time.perf_counter()
            busy(work)
            dist.all_reduce(token)
            if step >= args.warmup:
                walls.append(time.perf_counter() - t0)
        slowest = torch.tensor(walls, dtype=torch.float64)
        dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
        medians[work] = statistics.median(slowest.tolist())
    if env.rank == 0:
        Path(args.rank_main).write_text(json.dumps({"steps_s": list(medians.items())}))
    leave_process_group(completed=True)
    exit_rank(0)
    return 0


def rows_of(ranks: int, cores: int, steps_s: list[tuple[float, float]]) -> list[dict]:
    """One row per work size: the measured factor beside the two rules' (the factors the
    models use, ``vgcsim.core.clusterspec.sharing_factor``)."""
    from vgcsim.core.clusterspec import sharing_factor

    sync = dict(steps_s)[0.0]
    out = []
    for work, step in steps_s:
        if work == 0.0:
            continue
        measured = (step - sync) / work
        full, fair = (sharing_factor(ranks, 1, cores, rule) for rule in ("fullest-core", "fair"))
        out.append(
            {
                "ranks": ranks,
                "work_s": work,
                "step_s": step,
                "sync_s": sync,
                "measured_factor": measured,
                "fullest_core": full,
                "fair": fair,
                "nearer": (
                    "both"
                    if full == fair
                    else "fullest-core"
                    if abs(measured - full) <= abs(measured - fair)
                    else "fair"
                ),
            }
        )
    return out


def main(argv: list[str] | None = None) -> int:
    from vgcsim.core.errors import ConfigError

    args = _parse(argv)
    if args.rank_main:
        return rank_main(args)
    _work_s(args.work)
    if args.steps < 3 or args.warmup < 0:
        raise ConfigError("--steps must be at least 3 and --warmup at least 0")
    cores = len(os.sched_getaffinity(0))
    try:
        counts = [int(x) for x in args.ranks.split(",")] if args.ranks else None
    except ValueError:
        raise ConfigError(f"--ranks {args.ranks!r}: give whole numbers, e.g. 1,2,3,4") from None
    counts = counts or list(range(1, 2 * cores + 1))
    if not all(1 <= r <= 64 for r in counts):
        raise ConfigError(f"--ranks {args.ranks!r}: each from 1 to 64")
    rest = [a for a in (argv if argv is not None else sys.argv[1:]) if a != "--json"]
    rows = []
    for r in counts:
        result = launch_ranks(__file__, rest, r)
        rows += rows_of(r, cores, [tuple(x) for x in result["steps_s"]])
    over = [row for row in rows if row["nearer"] != "both"]
    nearer = {rule: sum(row["nearer"] == rule for row in over) for rule in ("fullest-core", "fair")}
    if args.json:
        print(json.dumps({"cores": cores, "rows": rows, "nearer": nearer}, indent=2))
        return 0
    print(f"{cores} cores; factor = (step - step at no work) / work")
    print("ranks  work_ms  step_ms  measured  fullest-core  fair  nearer")
    for row in rows:
        print(
            f"{row['ranks']:5d} {1e3 * row['work_s']:8.1f} {1e3 * row['step_s']:8.2f} "
            f"{row['measured_factor']:9.2f} {row['fullest_core']:13.2f} {row['fair']:5.2f}  "
            f"{row['nearer']}"
        )
    print(
        "where the rules differ (R not a multiple of C): nearer to fullest-core in "
        f"{nearer['fullest-core']} rows, to fair in {nearer['fair']}"
    )
    return 0


if __name__ == "__main__":
    run_main(main)
