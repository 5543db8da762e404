"""``vgcsim predict``: closed-form step times of a trace on a cluster, written as a result table."""

from __future__ import annotations

import argparse
import sys

from vgcsim.commands.cost_options import add_cost_options, parse_cost_options

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
    parser.add_argument(
        "--world-sizes",
        default="2,4,...,1024",
        metavar="LIST",
        help="ranks to predict, e.g. '2,4,...,1024' (doubling) or '8,16,24' (default: %(default)s)",
    )
    parser.add_argument(
        "--allreduce",
        default="ring",
        metavar="ALGS",
        help="dense baseline algorithm(s), comma list or 'all' (default: ring)",
    )
    parser.add_argument(
        "--allgatherv",
        default="ring",
        metavar="ALGS",
        help="compressed allgatherv algorithm(s), comma list or 'all' (default: ring)",
    )
    parser.add_argument(
        "--encoding",
        default=None,
        metavar="NAME",
        help="bits column to use (default: the trace's primary encoding)",
    )
    parser.add_argument(
        "--extrapolation",
        default="modulo",
        metavar="RULE",
        help="rule mapping P ranks to recorded workers: modulo | resample",
    )
    parser.add_argument(
        "--seed", type=int, default=0, help="seed of the 'resample' rule (default: 0)"
    )
    parser.add_argument(
        "--overlap",
        default="none",
        metavar="MODE",
        help="none | full (optimistic bound) | per_layer | bucketed (DDP-style, see --bucket-size)",
    )
    parser.add_argument(
        "--bucket-size",
        default="25MiB",
        metavar="SIZE",
        help="bucket size for --overlap bucketed (default: 25MiB)",
    )
    add_cost_options(parser)
    parser.add_argument("--per-step", action="store_true", help="also write one row per trace step")
    parser.add_argument(
        "-o", "--output", required=True, metavar="DIR", help="result table directory"
    )


def run(args: argparse.Namespace) -> int:
    from vgcsim.core.cluster import cluster_to_dict, load_cluster
    from vgcsim.core.results import results_header, write_results
    from vgcsim.core.units import parse_size_bytes
    from vgcsim.models.predict import (
        PredictOptions,
        options_dict,
        parse_algorithms,
        parse_world_sizes,
        predict_trace,
        summarize,
        time_sources,
        trace_entry,
    )
    from vgcsim.traces.io import read_trace

    cluster, dense_encodings, size_exchange = parse_cost_options(args, load_cluster(args.cluster))
    opts = PredictOptions(
        world_sizes=parse_world_sizes(args.world_sizes),
        allreduce=parse_algorithms(args.allreduce, "allreduce"),
        allgatherv=parse_algorithms(args.allgatherv, "allgatherv"),
        encoding=args.encoding,
        rule=args.extrapolation,
        seed=args.seed,
        per_step=args.per_step,
        overlap=args.overlap,
        bucket_bytes=parse_size_bytes(args.bucket_size),
        dense_encodings=dense_encodings,
        size_exchange=size_exchange,
    )
    trace = read_trace(args.trace)
    df = predict_trace(trace, cluster, opts)
    header = results_header(
        source="predicted",
        traces=[trace_entry(trace)],
        cluster=cluster_to_dict(cluster),
        extrapolation={"rule": opts.rule, "seed": opts.seed if opts.rule == "resample" else None},
        options={
            **options_dict(opts),
            "encoding": opts.encoding or trace.primary_encoding,
            "time_sources": time_sources(trace, cluster),
        },
        command=list(sys.argv),
    )
    out = write_results(df, args.output, header)
    print(summarize(df))
    print(f"wrote {len(df)} rows to {out}")
    return 0
