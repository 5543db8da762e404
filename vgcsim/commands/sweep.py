"""``vgcsim sweep``: run a factorial sweep of simulated replays into one result table."""

from __future__ import annotations

import argparse
import sys

from vgcsim.commands import add_out_option, add_set_option, add_world_sizes_option
from vgcsim.forkserver import POOL_PRELOAD, start_fork_server

HELP = (
    "run a sweep (bandwidth x latency x P x topology x trace) of simulated replays; one table out"
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("config", help="sweep TOML file ([sweep] factors, [simulate] options)")
    add_world_sizes_option(parser)
    parser.add_argument(
        "--processes",
        type=int,
        default=None,
        metavar="N",
        help="worker processes of the local/processes schedulers (--set sweep.processes=N; "
        "default: the file's, 0 = one per CPU)",
    )
    parser.add_argument(
        "--scheduler",
        default=None,
        metavar="WHERE",
        help="local (a Dask LocalCluster, default: sweep.scheduler), processes (a process pool "
        "without Dask) or a running Dask scheduler's address, e.g. tcp://HOST:8786, given "
        "sweep.connect_timeout_s (5 s) to answer",
    )
    add_set_option(
        parser,
        "override a sweep file key, e.g. sweep.world_sizes=8:64:x2 or simulate.max_steps=10",
    )
    parser.add_argument(
        "--dry-run", action="store_true", help="list the jobs the factors expand to and exit"
    )
    parser.add_argument(
        "-q",
        "--quiet",
        action="store_true",
        help="no progress (default: a bar on a terminal, else a line every few seconds)",
    )
    add_out_option(
        parser, "result table folder (pandas reads OUT/results.parquet; factors as columns)"
    )


def run(args: argparse.Namespace) -> int:
    # First: the fork server's imports take longest (a pool of one runs in this process).
    if args.scheduler in (None, "local") and not args.dry_run:
        start_fork_server()
    elif args.scheduler == "processes" and args.processes != 1 and not args.dry_run:
        start_fork_server(POOL_PRELOAD)
    from vgcsim.preload import paused_gc

    with paused_gc():  # the command's imports, without collections (vgcsim.preload)
        from vgcsim import api
        from vgcsim.commands import check_out, settings
        from vgcsim.commands.progress import Progress

    overrides = settings(args.set, ("sweep.world_sizes",))
    if args.world_sizes is not None:
        overrides += settings([f"sweep.world_sizes={args.world_sizes}"], ("sweep.world_sizes",))
    if args.processes is not None:
        overrides.append(f"sweep.processes={args.processes}")
    if args.scheduler is not None:  # validated by SweepConfig; recorded in the result header
        overrides.append(f"sweep.scheduler={args.scheduler}")
    sweep = api.load_sweep(args.config, overrides=overrides)  # the simulator's imports too
    jobs = api.sweep_jobs(sweep)
    check_out(args, "sweep")  # a dry run refuses what the run would refuse
    if args.dry_run:
        for trace in dict.fromkeys(job.trace for job in jobs):
            api.trace_header(trace)  # a trace the jobs could not read
        for job in jobs:
            print(f"{job.trace}  {job.cluster.name}  P={job.world_size}")
        print(f"{len(jobs)} jobs")
        return 0
    with Progress(len(jobs), "sweep", "jobs", quiet=args.quiet) as bar:
        run = api.sweep(sweep, progress=bar.update)
    out = api.save(
        run.frame,
        args.out,
        command=["vgcsim", *sys.argv[1:]],
        overwrite=args.overwrite,
        writer="vgcsim sweep",
    )
    print(f"{len(run.jobs)} jobs on {sweep.sweep.scheduler}, {len(run.frame)} rows -> {out}")
    return 0
