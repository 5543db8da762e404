"""``vgcsim scenario``: built-in cost analyses from model sizes alone (e.g. the paper's)."""

from __future__ import annotations

import argparse
import shlex
import sys

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
    from pathlib import Path

    from vgcsim.commands import check_out, settings
    from vgcsim.core.config import apply_overrides, to_dict
    from vgcsim.core.errors import ConfigError, unknown_name
    from vgcsim.core.results import save_results, trace_entry
    from vgcsim.models.scenario import (
        SCENARIOS,
        best_rows,
        crossover_table,
        method_from_trace,
        paper_scenario,
    )
    from vgcsim.reports.scenario import scenario_markdown
    from vgcsim.traces.io import read_trace

    if args.name not in SCENARIOS:
        raise unknown_name("scenario", args.name, SCENARIOS)
    try:
        sets = settings(args.set)
        if args.world_sizes is not None:
            sets += settings([f"world_sizes={args.world_sizes}"])
        cfg = apply_overrides(SCENARIOS[args.name](), sets)
    except (TypeError, ValueError) as exc:
        raise ConfigError(str(exc)) from None
    check_out(args, "scenario")
    traces = [read_trace(p) for p in args.trace]
    methods = [method_from_trace(t) for t in traces]
    df, info = paper_scenario(cfg, methods)
    command = (
        "vgcsim " + " ".join(shlex.quote(a) for a in sys.argv[1:])
        if sys.argv
        else "vgcsim scenario"
    )
    cross = crossover_table(cfg, df)
    text = scenario_markdown(
        best_rows(df),
        cross,
        info,
        command,
        codec_s=cfg.codec_s,
        batch_size_per_worker=cfg.batch_size_per_worker,
    )
    out = save_results(
        df,
        args.out,
        source="predicted",
        traces=[trace_entry(t) for t in traces],
        cluster={"scenario_links": info["links"], "device": info["device"]},
        extrapolation={"rule": None, "seed": None},
        options={
            "scenario": args.name,
            **to_dict(cfg),
            "nets": info["nets"],
            "methods": info["methods"],
        },
        command=["vgcsim", *sys.argv[1:]],
        overwrite=args.overwrite,
        writer="vgcsim scenario",
        files={
            "crossover.csv": lambda p: cross.to_csv(p, index=False),
            "scenario.md": lambda p: Path(p).write_text(text, encoding="utf-8"),
        },
    )
    print(text)
    print(f"wrote {len(df)} rows, crossover.csv and scenario.md to {out}")
    return 0
