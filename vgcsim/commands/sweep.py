"""``vgcsim sweep``: run a factorial sweep of simulated replays into one result table."""

from __future__ import annotations

import argparse
import dataclasses
import sys

from vgcsim.commands import add_set_option

HELP = (
    "run a sweep (bandwidth x latency x P x topology x trace) of simulated replays; one table out"
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("config", help="sweep TOML file ([sweep] factors, [simulate] options)")
    parser.add_argument("-o", "--out", required=True, metavar="DIR", help="output result directory")
    parser.add_argument(
        "--workers",
        type=int,
        default=None,
        help="worker processes for local/processes (default: sweep.workers, 0 = CPUs)",
    )
    parser.add_argument(
        "--scheduler",
        default=None,
        metavar="WHERE",
        help="local (a Dask LocalCluster, default: sweep.scheduler), processes (a process pool "
        "without Dask) or a running Dask scheduler's address, e.g. tcp://HOST:8786",
    )
    add_set_option(
        parser,
        "override a sweep file key, e.g. sweep.world_sizes=8,16 or simulate.max_steps=10",
        dest="overrides",
    )
    parser.add_argument(
        "--dry-run", action="store_true", help="list the jobs the factors expand to and exit"
    )


def run(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from vgcsim.core.cluster import cluster_to_dict, load_cluster
    from vgcsim.core.config import apply_overrides, to_dict
    from vgcsim.core.errors import ConfigError
    from vgcsim.core.results import finalize_results, results_header, write_results
    from vgcsim.simulator.sweep import expand_factors, load_sweep, run_sweep, sweep_summary

    sweep = apply_overrides(load_sweep(args.config), args.overrides)
    if args.workers is not None and args.workers < 0:
        raise ConfigError("--workers must be >= 0")
    if args.scheduler is not None:  # validated by SweepConfig; recorded in the result header
        sweep = dataclasses.replace(
            sweep, sweep=dataclasses.replace(sweep.sweep, scheduler=args.scheduler)
        )
    jobs = expand_factors(sweep.sweep)
    if args.dry_run:
        for job in jobs:
            print(f"{job.trace}  {job.cluster.name}  P={job.world_size}")
        print(f"{len(jobs)} jobs")
        return 0
    with tqdm(total=len(jobs), desc="sweep", unit="job", disable=not sys.stderr.isatty()) as bar:
        table, jobs = run_sweep(sweep, workers=args.workers or None, progress=bar.update)
    table = finalize_results(table)
    header = results_header(
        source="simulated",
        traces=[{"path": t, "name": t.rstrip("/").split("/")[-1]} for t in sweep.sweep.traces],
        cluster=cluster_to_dict(load_cluster(sweep.sweep.cluster)),
        extrapolation={
            "rule": sweep.simulate.rule,
            "seed": sweep.simulate.seed if sweep.simulate.rule == "resample" else None,
        },
        options={
            "sweep": to_dict(sweep.sweep),
            "simulate": to_dict(sweep.simulate),
            "summary": sweep_summary(jobs),
        },
        command=["vgcsim", *sys.argv[1:]],
    )
    out = write_results(table, args.out, header)
    print(f"{len(jobs)} jobs on {sweep.sweep.scheduler}, {len(table)} rows -> {out}")
    return 0
