"""``vgcsim scenario``: built-in cost analyses from model sizes alone (e.g. the paper's)."""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

from vgcsim.commands import add_out_option, add_set_option, add_world_sizes_option

HELP = "run a built-in cost-model scenario (paper: ResNet-50/VGG-like on 1/10 GbE and 56 Gb IB, P=2..1024)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("name", metavar="NAME", help="scenario: paper")
    parser.add_argument(
        "--trace",
        action="append",
        default=[],
        metavar="RUN",
        help="also use the compression ratio measured from this trace (repeatable)",
    )
    add_set_option(
        parser,
        "override a scenario key, e.g. --set device=V100 --set links=1GbE,IB-EDR "
        "--set codec_s=0.01",
    )
    add_world_sizes_option(parser)
    add_out_option(
        parser, "output folder: result table (OUT/results.parquet), crossover.csv, scenario.md"
    )


def run(args: argparse.Namespace) -> int:
    from vgcsim import api
    from vgcsim.commands import check_out, settings

    sets = settings(args.set)
    if args.world_sizes is not None:
        sets += settings([f"world_sizes={args.world_sizes}"])
    cfg = api.scenario_config(args.name, overrides=sets)
    check_out(args, "scenario")
    command = (
        "vgcsim " + " ".join(shlex.quote(a) for a in sys.argv[1:])
        if sys.argv
        else "vgcsim scenario"
    )
    run = api.scenario(args.name, config=cfg, traces=args.trace, command=command)
    out = api.save(
        run.frame,
        args.out,
        command=["vgcsim", *sys.argv[1:]],
        overwrite=args.overwrite,
        writer="vgcsim scenario",
        files={
            "crossover.csv": lambda p: run.crossover.to_csv(p, index=False),
            "scenario.md": lambda p: Path(p).write_text(run.markdown, encoding="utf-8"),
        },
    )
    print(run.markdown)
    print(f"wrote {len(run.frame)} rows, crossover.csv and scenario.md to {out}")
    return 0
