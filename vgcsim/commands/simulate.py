"""``vgcsim simulate``: replay a trace on a simulated cluster (SimPy) and write a result table."""

from __future__ import annotations

import argparse
import dataclasses
import sys

from vgcsim.commands import add_set_option
from vgcsim.commands.cost_options import add_cost_options, parse_cost_options

HELP = "replay a trace on a discrete-event cluster model; write the result table (source=simulated)"


def _ints(text: str, minimum: int) -> list[int]:
    try:
        values = [int(v) for v in text.replace(",", " ").split()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected integers like '8,16,64', got {text!r}"
        ) from None
    if not values or any(v < minimum for v in values):
        raise argparse.ArgumentTypeError(f"expected integers >= {minimum}, got {text!r}")
    return values


def _int_list(text: str) -> list[int]:
    """World sizes in `vgcsim predict`'s syntax: '8,16,64' or '2,4,...,256'."""
    from vgcsim.core.errors import ConfigError
    from vgcsim.models.predict import parse_world_sizes

    try:
        return list(parse_world_sizes(text.replace(" ", ",")))
    except ConfigError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _step_list(text: str) -> list[int]:
    return _ints(text, 0)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run", metavar="RUN", help="trace run directory")
    parser.add_argument(
        "--cluster",
        required=True,
        metavar="NAME|FILE",
        help="cluster preset name (see `vgcsim clusters`) or TOML file",
    )
    parser.add_argument(
        "--world-sizes",
        required=True,
        type=_int_list,
        metavar="LIST",
        help="ranks P to simulate, e.g. 8,16,64 or 2,4,...,256 (doubling)",
    )
    parser.add_argument(
        "--per-step", action="store_true", help="also write one row per step (not only the mean)"
    )
    parser.add_argument(
        "--timeline",
        type=_step_list,
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
        "--path",
        choices=("auto", "message", "collective"),
        default=None,
        help="message-level simulation, collective-level fast path, or auto (default)",
    )
    add_cost_options(parser)
    add_set_option(
        parser,
        "set a SimulateConfig key: dense_collective, compressed_collective, overlap "
        "(none|per_layer|bucketed), bucket_bytes, mode (fair|fifo), semantics "
        "(rendezvous|eager), jitter, seed, rule, encoding, max_steps, dense_encodings, "
        "size_exchange",
        dest="overrides",
    )
    parser.add_argument("-o", "--out", required=True, metavar="DIR", help="output result directory")


def run(args: argparse.Namespace) -> int:
    from vgcsim.core.cluster import cluster_to_dict, load_cluster
    from vgcsim.core.config import apply_overrides, to_dict
    from vgcsim.core.results import finalize_results, results_header, write_results
    from vgcsim.models.predict import time_sources
    from vgcsim.simulator.replay import SimulateConfig, simulate_trace
    from vgcsim.simulator.timeline import write_chrome_trace
    from vgcsim.traces.io import read_trace

    cfg = apply_overrides(SimulateConfig(), args.overrides)
    if args.path:
        cfg = apply_overrides(cfg, [f"path={args.path}"])
    if args.per_step:
        cfg = apply_overrides(cfg, ["per_step=true"])
    trace = read_trace(args.run)
    cluster, dense_encodings, size_exchange = parse_cost_options(args, load_cluster(args.cluster))
    if args.dense_encodings != "fp32,bf16,fp16":
        cfg = dataclasses.replace(cfg, dense_encodings=dense_encodings)
    if not size_exchange:
        cfg = dataclasses.replace(cfg, size_exchange=False)
    total = len(args.world_sizes) * (
        min(trace.steps_count, cfg.max_steps) if cfg.max_steps else trace.steps_count
    )
    from tqdm import tqdm

    with tqdm(total=total, desc="simulate", unit="step", disable=not sys.stderr.isatty()) as bar:
        df, timelines, info = simulate_trace(
            trace,
            cluster,
            args.world_sizes,
            cfg,
            timeline_steps=args.timeline or (),
            timeline_max_ranks=args.timeline_max_ranks,
            progress=bar.update,
        )
    df = finalize_results(df, batch_size_per_worker=trace.header.get("batch_size_per_worker"))
    header = results_header(
        source="simulated",
        traces=[
            {
                "path": str(trace.path),
                "name": trace.name,
                "compressor": trace.compressor,
                "synthetic": trace.synthetic,
                "schema_version": trace.header.get("schema_version"),
            }
        ],
        cluster=cluster_to_dict(cluster),
        extrapolation={"rule": cfg.rule, "seed": cfg.seed if cfg.rule == "resample" else None},
        options={
            **to_dict(cfg),
            "world_sizes": list(args.world_sizes),
            "paths_run": info,
            "time_sources": time_sources(trace, cluster),
        },
        command=["vgcsim", *sys.argv[1:]],
    )
    out = write_results(df, args.out, header)
    if args.timeline and not timelines:
        print(
            f"timeline: none written (no world size <= --timeline-max-ranks "
            f"{args.timeline_max_ranks})"
        )
    if timelines:
        import pandas as pd

        path = write_chrome_trace(timelines, out / "timeline.json")
        links = pd.concat([t.link_table() for t in timelines], ignore_index=True)
        links.to_csv(out / "links.csv", index=False)
        print(f"timeline: {path} (open in https://ui.perfetto.dev); per-link bytes: links.csv")
    means = df[df["step"] == -1]
    cols = [
        "world_size",
        "method",
        "encoding",
        "collective",
        "path",
        "comm_s",
        "decode_s",
        "step_s",
        "speedup_vs_dense",
    ]
    print(f"local times: compute {cluster.compute} on {means['device'].iloc[0]}")
    print(means[cols].to_string(index=False, float_format=lambda v: f"{v:.6g}"))
    print(f"results: {out}")
    return 0
