"""``vgcsim collective``: what one collective of given per-rank sizes costs on a cluster."""

from __future__ import annotations

import argparse

HELP = "price one collective call (closed form or simulation) for given per-rank sizes"


def _sizes(text: str) -> list[float]:
    """'4e6,4e6,1MiB' → bytes per rank (a number of bytes or a size such as 4MB, 1MiB)."""
    from vgcsim.core.errors import ConfigError
    from vgcsim.core.units import parse_size_bytes

    try:
        sizes = [parse_size_bytes(v) for v in text.replace(",", " ").split()]
    except ConfigError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    if not sizes:
        raise argparse.ArgumentTypeError("give at least one size")
    for size in sizes:
        if size != int(size) or size > MAX_SIZE_BYTES:
            raise argparse.ArgumentTypeError(
                f"{size:g} is not a whole number of bytes up to {MAX_SIZE_BYTES:g}"
            )
    return sizes


#: The largest size a rank may send (a petabyte): beyond it a figure is a typo, not a job.
MAX_SIZE_BYTES = 1e15


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from vgcsim.commands import add_out_option

    parser.add_argument("cluster", metavar="CLUSTER", help="cluster preset name or TOML file")
    parser.add_argument("key", metavar="COLLECTIVE", help="op/algorithm, e.g. allgatherv/bruck")
    parser.add_argument(
        "--sizes-bytes",
        required=True,
        type=_sizes,
        metavar="LIST",
        help="bytes per rank, comma-separated, P = their count (e.g. 4e6,4e6,2MiB)",
    )
    parser.add_argument("--world-size", type=int, metavar="P", help="one size for P ranks")
    parser.add_argument(
        "--engine",
        choices=("model", "simulate"),
        default="model",
        help="closed form (default) or simulation on the cluster's topology (collective "
        "level where no two flows share a link, else every message)",
    )
    parser.add_argument("--mode", default="fair", help="simulate: link sharing (fair, fifo)")
    parser.add_argument(
        "--semantics", default="rendezvous", help="simulate: messages (rendezvous, eager)"
    )
    add_out_option(
        parser,
        "also write a table (.csv or .parquet): the call's collective, cluster, world_size, "
        "engine, time_s, and with --engine simulate one row per link used",
        required=False,
    )


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    import pandas as pd

    from vgcsim import api
    from vgcsim.core.errors import ConfigError
    from vgcsim.core.units import format_bytes, format_time
    from vgcsim.core.worldsizes import MAX_WORLD_SIZE

    sizes = args.sizes_bytes
    if args.world_size is not None:
        if len(sizes) != 1 or args.world_size < 1:
            raise ConfigError("--world-size P takes one --sizes-bytes value and P >= 1")
        if args.world_size > MAX_WORLD_SIZE:
            raise ConfigError(
                f"--world-size {args.world_size} exceeds the largest supported world size, "
                f"{MAX_WORLD_SIZE}"
            )
        sizes = sizes * args.world_size
    out = Path(args.out) if args.out else None
    if out is not None and out.suffix.lower() not in (".csv", ".parquet"):
        raise ConfigError(f"--out {out}: give a .csv or .parquet file")
    if out is not None and out.exists() and not args.overwrite:
        raise ConfigError(f"--out {out} exists; pass --overwrite to replace it")
    simulate = args.engine == "simulate"
    if not simulate and (args.mode != "fair" or args.semantics != "rendezvous"):
        raise ConfigError("--mode and --semantics choose how --engine simulate runs; add it")
    result = api.collective(
        args.cluster,
        args.key,
        sizes,
        engine=args.engine,
        detail=simulate,
        mode=args.mode,
        semantics=args.semantics,
    )
    time_s = float(result)
    lines = [
        f"{args.key} on {args.cluster}, P = {len(sizes)}, {format_bytes(sum(sizes))} in all: "
        f"{format_time(time_s)} ({args.engine}"
        f"{f', {result.path} level' if simulate else ''}; time_s = {time_s:.9g})"
    ]
    summary = {
        "collective": args.key,
        "cluster": args.cluster,
        "world_size": len(sizes),
        "engine": args.engine,
        "time_s": time_s,
    }
    if simulate:
        links = result.links.sort_values(["busy_s", "link"], ascending=[False, True])
        lines += [
            f"  {row.link}: {format_bytes(row.bytes)}, busy {format_time(row.busy_s)} "
            f"({row.utilization:.0%})"
            for row in links.head(5).itertuples()
        ]
        if len(links) > 5:
            lines.append(f"  ... {len(links) - 5} more links (-o FILE writes all)")
        table = links.assign(**summary)[[*summary, *links.columns]]
    else:
        table = pd.DataFrame([summary])
    if out is not None:  # written before anything is printed: a closed pipe loses nothing
        from vgcsim.core.outdir import atomic_write, write_error

        try:
            out.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise write_error(exc, out) from None
        if out.suffix.lower() == ".parquet":
            atomic_write(out, lambda p: table.to_parquet(p, index=False))
        else:
            atomic_write(out, lambda p: table.to_csv(p, index=False))
        lines.append(f"wrote {out}")
    print("\n".join(lines))
    return 0
