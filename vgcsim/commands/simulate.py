"""``vgcsim simulate``: replay a trace on a simulated cluster (SimPy) and write a result table."""

from __future__ import annotations

import argparse

from vgcsim.commands import add_out_option
from vgcsim.commands.cost_options import (
    add_replay_options,
    command_line,
    print_replay,
    replay_overrides,
)
from vgcsim.core.errors import ConfigError

HELP = "replay a trace on a discrete-event cluster model; write the result table (source=simulated)"


def _steps(text: str) -> list[int]:
    try:
        values = [int(v) for v in text.replace(",", " ").split()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected step numbers like '0,1', got {text!r}"
        ) from None
    if not values or any(v < 0 for v in values):
        raise argparse.ArgumentTypeError(f"expected step numbers >= 0, got {text!r}")
    return values


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run", metavar="RUN", help="trace run directory")
    parser.add_argument(
        "--cluster",
        required=True,
        metavar="NAME|FILE",
        help="cluster preset name (see `vgcsim clusters`) or TOML file",
    )
    add_replay_options(parser, "SimulateConfig")
    parser.add_argument(
        "--path",
        choices=("auto", "message", "collective", "round", "reference"),
        default=None,
        help="message-level simulation, collective-level fast path, round-level path "
        "(contended fabrics), the reference engine (one SimPy process per rank: the "
        "definition the others are tested against; slowest), or auto (default; --set path=...)",
    )
    parser.add_argument(
        "--timeline",
        type=_steps,
        default=None,
        metavar="STEPS",
        help="write timeline.json (Chrome/Perfetto trace) and links.csv (bytes, busy time per "
        "link) of these trace steps, e.g. 0,1",
    )
    parser.add_argument(
        "--timeline-max-ranks",
        type=int,
        default=64,
        metavar="N",
        help="record timelines only at world sizes <= N (default 64: larger ones make "
        "files of gigabytes that Perfetto cannot open)",
    )
    parser.add_argument(
        "-q",
        "--quiet",
        action="store_true",
        help="no progress (a bar on a terminal, else a line every few seconds)",
    )
    add_out_option(parser, "result table folder (pandas reads OUT/results.parquet)")


def run(args: argparse.Namespace) -> int:
    from vgcsim import api
    from vgcsim.commands import check_out, warn, world_sizes
    from vgcsim.commands.progress import Progress
    from vgcsim.core.config import apply_overrides
    from vgcsim.core.options import SimulateConfig

    overrides = replay_overrides(args)
    if args.path:
        overrides.append(f"path={args.path}")
    cfg = apply_overrides(SimulateConfig(world_sizes=world_sizes(args.world_sizes)), overrides)
    cluster = api.load_cluster(args.cluster)
    check_out(args, "simulate")
    if args.timeline_max_ranks < 1:
        raise ConfigError(f"--timeline-max-ranks must be >= 1, got {args.timeline_max_ranks}")
    trace = api.load_trace(args.run)
    total = api.simulate_units(cfg, trace)
    with Progress(total, "simulate", "steps", quiet=args.quiet) as bar:
        run = api.simulate_run(
            trace,
            cluster,
            compute=args.compute,
            config=cfg,
            anchor=args.anchor,
            timeline_steps=args.timeline or (),
            timeline_max_ranks=args.timeline_max_ranks,
            progress=bar.update,
        )
    timelines = run.timelines
    files = api.timeline_files(timelines)
    warn(args.command, api.trace_caveats(trace))  # also in the header, for `vgcsim report`
    out = api.save(
        run.frame,
        args.out,
        trace,
        cluster,
        overwrite=args.overwrite,
        files=files,
        command=command_line(),
        writer=f"vgcsim {args.command}",
    )
    if args.timeline and not timelines:
        print(
            f"timeline: none written (no world size <= --timeline-max-ranks "
            f"{args.timeline_max_ranks})"
        )
    if timelines:
        print(
            f"timeline: {out / 'timeline.json'} (open in https://ui.perfetto.dev); "
            "per-link bytes: links.csv"
        )
    print_replay(run.frame, trace, out)
    return 0
