"""The step-cost options ``vgcsim predict`` and ``vgcsim simulate`` share, parsed the same way."""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any


def add_cost_options(parser: argparse.ArgumentParser) -> None:
    """``--compute``, ``--dense-encodings`` and ``--no-size-exchange``."""
    parser.add_argument(
        "--compute",
        choices=("model", "trace"),
        default=None,
        help="override the cluster's compute mode: 'model' (every local time on the cluster's "
        "device; the presets' default) or 'trace' (the seconds measured on the recording machine)",
    )
    parser.add_argument(
        "--dense-encodings",
        default="fp32,bf16,fp16",
        metavar="LIST",
        help="dense allreduce baselines: fp32 and any of bf16, fp16 (a cast before and after "
        "the allreduce; default: %(default)s)",
    )
    parser.add_argument(
        "--no-size-exchange",
        action="store_true",
        help="do not price the allgatherv size exchange (implementations that know the "
        "payload sizes in advance)",
    )


def parse_cost_options(args: argparse.Namespace, cluster: Any) -> tuple[Any, tuple[str, ...], bool]:
    """``(cluster with --compute applied, dense encodings, size_exchange)``."""
    from vgcsim.core.errors import ConfigError, unknown_name
    from vgcsim.traces.replay import DENSE_ENCODINGS

    if args.compute is not None and args.compute != cluster.compute:
        cluster = dataclasses.replace(cluster, compute=args.compute)
    encs = tuple(e.strip() for e in str(args.dense_encodings).split(",") if e.strip())
    for e in encs:
        if e not in DENSE_ENCODINGS:
            raise unknown_name("dense encoding", e, DENSE_ENCODINGS)
    if "fp32" not in encs:
        raise ConfigError("--dense-encodings must include fp32 (the speedup baseline)")
    return cluster, encs, not args.no_size_exchange
