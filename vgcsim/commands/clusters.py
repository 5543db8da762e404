"""``vgcsim clusters``: list cluster, link and device presets (with sources), or show one cluster."""

from __future__ import annotations

import argparse
import json

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


def _row(cells: list[str], widths: list[int]) -> str:
    return "  ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)).rstrip()


def _table(header: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    lines = [_row(header, widths), _row(["-" * w for w in widths], widths)]
    lines += [_row(r, widths) for r in rows]
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    from traces.cluster import (
        CLUSTER_PRESETS,
        DEVICE_PRESETS,
        LINK_PRESETS,
        cluster_to_dict,
        load_cluster,
    )
    from traces.units import format_bandwidth, format_time

    if args.cluster:
        spec = load_cluster(args.cluster)
        print(json.dumps(cluster_to_dict(spec), indent=2))
        return 0

    rows = []
    for name, c in CLUSTER_PRESETS.items():
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
                format_time(c.link.latency_s),
                str(c.gpus_per_node),
                intra,
                c.device.name,
            ]
        )
    print("Cluster presets (use with --cluster NAME; or write a TOML cluster file):")
    print(
        _table(
            ["name", "topology", "link bandwidth", "latency", "ranks/node", "intra-node", "device"],
            rows,
        )
    )
    print()
    print("Link presets (bandwidth per direction, α latency):")
    link_rows = [
        [
            n,
            format_bandwidth(s.bandwidth_Bps),
            f"{s.bandwidth_Bps / 1e9:.4g} GB/s",
            format_time(s.latency_s),
        ]
        + ([s.source] if args.sources else [])
        for n, s in LINK_PRESETS.items()
    ]
    print(
        _table(
            ["name", "bandwidth", "bytes/s", "latency"] + (["source"] if args.sources else []),
            link_rows,
        )
    )
    print()
    print("Device presets (FP32 peak × efficiency):")
    dev_rows = [
        [n, f"{s.peak_flops / 1e12:.4g} TFLOP/s", f"{s.efficiency:g}"]
        + ([s.source] if args.sources else [])
        for n, s in DEVICE_PRESETS.items()
    ]
    print(_table(["name", "peak", "efficiency"] + (["source"] if args.sources else []), dev_rows))
    if not args.sources:
        print("\n(--sources shows where each value comes from)")
    return 0
