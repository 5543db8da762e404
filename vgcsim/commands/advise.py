"""``vgcsim advise``: what to run on a cluster, from traces of one model (ranking, per-bucket
mix, one recommendation line per cluster and P)."""

from __future__ import annotations

import argparse

from vgcsim.core.errors import ConfigError

HELP = "rank dense, compressed and per-bucket mixed methods per cluster and P, and recommend one"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from vgcsim.commands import add_out_option, add_world_sizes_option

    parser.add_argument(
        "traces", metavar="RUN", nargs="+", help="trace run directories of one model and dataset"
    )
    parser.add_argument(
        "--cluster",
        required=True,
        metavar="NAME|FILE[,...]",
        help="cluster preset(s) or TOML file(s), comma-separated",
    )
    add_world_sizes_option(parser)
    parser.add_argument(
        "--target-accuracy",
        type=float,
        metavar="PERCENT",
        help="rank by time to this test accuracy (in %%, e.g. 96.5, as vgcsim report takes it) "
        "where the traces have evaluations",
    )
    parser.add_argument(
        "--overlap",
        default="bucketed",
        help="overlap of the ranked step times (none, full, per_layer, bucketed; default bucketed)",
    )
    add_out_option(
        parser,
        "also write advice.csv (ranking), mixes.csv (per-bucket mixes) and advice.md",
        required=False,
    )


def run(args: argparse.Namespace) -> int:
    from vgcsim import api
    from vgcsim.commands import check_out, world_sizes
    from vgcsim.commands.report import target_fraction

    if args.out is not None:
        check_out(args, "advise")
    clusters = [c.strip() for c in args.cluster.split(",") if c.strip()]
    if not clusters:
        raise ConfigError(
            f"--cluster {args.cluster!r} names no cluster; give a preset or TOML file"
        )
    advice = api.advise(
        args.traces,
        clusters,
        world_sizes(args.world_sizes),
        target_accuracy=target_fraction(args.target_accuracy),
        overlap=args.overlap,
    )
    text = api.advice_text(advice)
    if args.out is not None:  # written before anything is printed: a closed pipe loses nothing
        from vgcsim.core.outdir import prepare_output

        out = prepare_output(
            args.out,
            "vgcsim advise",
            overwrite=args.overwrite,
            files=("advice.csv", "mixes.csv", "advice.md"),
        )
        out.write("advice.csv", lambda tmp: advice.ranked.to_csv(tmp, index=False))
        out.write("mixes.csv", lambda tmp: advice.mixes.to_csv(tmp, index=False))
        out.write_text("advice.md", text + "\n")
        out.commit()
    print(text)
    if args.out is not None:
        print(f"wrote {out.file('advice.csv').parent}")
    return 0
