"""``vgcsim predict``: closed-form step times of a trace on a cluster, written as a result table."""

from __future__ import annotations

import argparse

from vgcsim.commands import add_out_option
from vgcsim.commands.cost_options import (
    add_replay_options,
    print_replay,
    replay_overrides,
    save_replay,
    with_compute,
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
    from vgcsim.commands import check_out, world_sizes
    from vgcsim.core.cluster import load_cluster
    from vgcsim.core.config import apply_overrides
    from vgcsim.models.predict import (
        PredictOptions,
        options_dict,
        predict_trace,
        sparse_crossover,
    )
    from vgcsim.traces.io import read_trace

    cluster = with_compute(args, load_cluster(args.cluster))
    opts = PredictOptions(world_sizes=world_sizes(args.world_sizes))
    opts = apply_overrides(opts, replay_overrides(args, "predict"))
    check_out(args, "predict")
    trace = read_trace(args.trace)
    if not opts.allgatherv:  # the trace's own exchange (bounded for the DDP hook's traces)
        import dataclasses

        from vgcsim.traces.replay import default_allgatherv

        opts = dataclasses.replace(opts, allgatherv=(default_allgatherv(trace),))
    df = predict_trace(trace, cluster, opts)
    options = {**options_dict(opts), "encoding": opts.encoding or trace.primary_encoding}
    out = save_replay(args, df, trace, cluster, source="predicted", config=opts, options=options)
    crossover = sparse_crossover(df)
    print_replay(df, trace, out, extra=[crossover] if crossover else [])
    return 0
