"""``vgcsim clusters``: list cluster, link and device presets (with sources), or show one cluster."""

from __future__ import annotations

import argparse
import json

from vgcsim.commands import add_out_option
from vgcsim.core.errors import ConfigError

HELP = "list cluster/link/device presets with their sources, or show one cluster (preset or TOML)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "cluster",
        nargs="?",
        help="show this cluster (preset name or TOML file) in full, as JSON",
    )
    parser.add_argument(
        "--sources", action="store_true", help="also print where each preset value comes from"
    )
    add_out_option(
        parser,
        "also write the cluster (or, without NAME, every cluster preset) as a JSON file",
        required=False,
    )


def _row(cells: list[str], widths: list[int]) -> str:
    return "  ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)).rstrip()


def _table(header: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    lines = [_row(header, widths), _row(["-" * w for w in widths], widths)]
    lines += [_row(r, widths) for r in rows]
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    from vgcsim import api
    from vgcsim.core.units import format_bandwidth, format_time

    if args.cluster is not None and not args.cluster.strip():
        raise ConfigError("give a cluster preset name or TOML file, or no NAME to list them all")
    if args.cluster is not None and args.sources:
        raise ConfigError("--sources annotates the preset tables; NAME shows one cluster in full")
    presets = api.presets()
    shown = api.cluster_dict(args.cluster) if args.cluster else None
    if args.out is not None:
        from vgcsim.core.outdir import write_json_output

        if shown is not None:
            data = shown
        else:
            data = {"clusters": {n: api.cluster_dict(c) for n, c in presets.clusters.items()}}
        write_json_output(args.out, "vgcsim clusters", data, overwrite=args.overwrite)
    if shown is not None:
        print(json.dumps(shown, indent=2))
        return 0

    rows = []
    for name, c in presets.clusters.items():
        intra = (
            f"{c.intra_link.name} ({format_bandwidth(c.intra_link.bandwidth_Bps)})"
            if c.intra_link
            else "-"
        )
        rows.append(
            [
                name,
                c.topology["kind"],
                format_bandwidth(c.link.bandwidth_Bps),
                f"{c.link.efficiency:.4f}",
                format_time(c.link.latency_s),
                str(c.gpus_per_node),
                intra,
                c.device.name,
                c.compute,
            ]
        )
    print("Cluster presets (use with --cluster NAME; or write a TOML cluster file):")
    print(
        _table(
            [
                "name",
                "topology",
                "link bandwidth",
                "efficiency",
                "latency",
                "ranks/node",
                "intra-node",
                "device",
                "compute",
            ],
            rows,
        )
    )
    print()
    print(
        "Link presets (line rate per direction; efficiency = payload bytes per wire byte; "
        "payload rate = line rate × efficiency; α latency):"
    )
    link_rows = [
        [
            n,
            format_bandwidth(s.bandwidth_Bps),
            f"{s.efficiency:.4f}",
            f"{s.payload_Bps / 1e9:.4g} GB/s",
            format_time(s.latency_s),
        ]
        + ([s.source] if args.sources else [])
        for n, s in presets.links.items()
    ]
    print(
        _table(
            ["name", "line rate", "efficiency", "payload rate", "latency"]
            + (["source"] if args.sources else []),
            link_rows,
        )
    )
    print()
    print("Framings (set `framing = NAME` or `efficiency = X` in a cluster file's [link]):")
    fr_rows = [
        [f.name, f"{f.efficiency:.4f}"] + ([f.source] if args.sources else [])
        for f in presets.framings.values()
    ]
    print(_table(["name", "efficiency"] + (["source"] if args.sources else []), fr_rows))
    print()
    print(
        "Device presets (FP32 peak × efficiency; memory bandwidth × sustained fraction and "
        "launch overhead price compression, decode, casts and the optimizer):"
    )
    dev_rows = [
        [
            n,
            f"{s.peak_flops / 1e12:.4g} TFLOP/s",
            f"{s.efficiency:g}",
            f"{s.memory_bandwidth_Bps / 1e9:.4g} GB/s" if s.memory_bandwidth_Bps else "-",
            f"{s.memory_efficiency:g}",
            format_time(s.launch_overhead_s) if s.launch_overhead_s is not None else "-",
        ]
        + ([s.source] if args.sources else [])
        for n, s in presets.devices.items()
    ]
    print(
        _table(
            ["name", "peak", "efficiency", "memory", "mem. efficiency", "launch"]
            + (["source"] if args.sources else []),
            dev_rows,
        )
    )
    if not args.sources:
        print("\n(--sources shows where each value comes from)")
    return 0
