"""``vgcsim predict``: closed-form step times of a trace on a cluster, written as a result table."""

from __future__ import annotations

import argparse

from vgcsim.commands import add_out_option
from vgcsim.commands.cost_options import (
    add_replay_options,
    command_line,
    print_replay,
    replay_overrides,
)

HELP = "predict step times of dense allreduce vs compressed allgatherv from a trace (closed-form models)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "trace",
        metavar="RUN",
        help="trace run directory (from `vgcsim record` or `vgcsim trace synth`)",
    )
    parser.add_argument(
        "--cluster",
        required=True,
        metavar="NAME|FILE",
        help="cluster preset (see `vgcsim clusters`) or TOML file",
    )
    add_replay_options(parser, "PredictOptions")
    add_out_option(parser, "result table folder (pandas reads OUT/results.parquet)")


def run(args: argparse.Namespace) -> int:
    from vgcsim import api
    from vgcsim.commands import check_out, warn, world_sizes
    from vgcsim.core.config import apply_overrides
    from vgcsim.core.options import PredictOptions

    cluster = api.load_cluster(args.cluster)
    opts = PredictOptions(world_sizes=world_sizes(args.world_sizes))
    opts = apply_overrides(opts, replay_overrides(args))
    check_out(args, "predict")
    trace = api.load_trace(args.trace)
    df = api.predict(trace, cluster, compute=args.compute, config=opts, anchor=args.anchor)
    warn(args.command, api.trace_caveats(trace))  # also in the header, for `vgcsim report`
    out = api.save(
        df,
        args.out,
        trace,
        cluster,
        overwrite=args.overwrite,
        command=command_line(),
        writer=f"vgcsim {args.command}",
    )
    print_replay(df, trace, out, crossover=True)
    return 0
