"""The options ``vgcsim predict`` and ``vgcsim simulate`` share, declared and parsed once.

Both commands take the same flags for the same settings; each flag is a shortcut for a
``--set`` key of the command's config (``PredictOptions`` for predict, ``SimulateConfig`` for
simulate), applied after the ``--set`` items. The keys agree but for the collectives, which
predict takes as algorithm lists and simulate as one collective key:

===================== =================================== =====================================
flag                  predict ``--set`` key               simulate ``--set`` key
===================== =================================== =====================================
--allreduce ALG       allreduce=ALG[,ALG...] (or all)     dense_collective=allreduce/ALG
--allgatherv ALG      allgatherv=ALG[,ALG...] (or all)    compressed_collective=allgatherv/ALG
--encoding NAME       encoding=NAME                       encoding=NAME
--extrapolation RULE  rule=RULE                           rule=RULE
--seed N              seed=N                              seed=N
--overlap MODE        overlap=MODE                        overlap=MODE
--bucket-size SIZE    bucket_bytes=BYTES                  bucket_bytes=BYTES
--per-step            per_step=true                       per_step=true
--dense-encodings L   dense_encodings=L                   dense_encodings=L
--no-size-exchange    size_exchange=false                 size_exchange=false
===================== =================================== =====================================

``--compute`` overrides the cluster's compute mode; ``--world-sizes`` is the one syntax of
:mod:`vgcsim.core.worldsizes` (``--set world_sizes=...`` reads the same syntax).
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Sequence
from typing import Any

from vgcsim.commands import add_set_option, add_world_sizes_option, settings

#: flag dest -> (metavar, help). Every flag defaults to None: not given, the config decides.
_VALUE_FLAGS: dict[str, tuple[str, str]] = {
    "allreduce": (
        "ALG",
        "dense baseline allreduce algorithm (predict: a comma list or 'all'; default: ring)",
    ),
    "allgatherv": (
        "ALG",
        "compressed allgatherv algorithm (predict: a comma list or 'all'; default: ring)",
    ),
    "encoding": ("NAME", "bits column to use (default: the trace's primary encoding)"),
    "extrapolation": ("RULE", "rule mapping P ranks to recorded workers: modulo | resample"),
    "seed": ("N", "seed of the 'resample' rule and of the simulator's jitter (default: 0)"),
    "overlap": (
        "MODE",
        "none | full (predict only: optimistic bound) | per_layer | bucketed (DDP-style, "
        "see --bucket-size); default: none",
    ),
    "bucket_size": ("SIZE", "bucket size for --overlap bucketed, e.g. 25MiB (default: 25MiB)"),
    "dense_encodings": (
        "LIST",
        "dense allreduce baselines: fp32 and any of bf16, fp16 (a cast before and after the "
        "allreduce; default: fp32,bf16,fp16)",
    ),
}


def add_replay_options(parser: argparse.ArgumentParser, config: str) -> None:
    """``--world-sizes``, the shared flags above, ``--compute`` and ``--set`` (keys of ``config``)."""
    add_world_sizes_option(parser)
    for dest, (metavar, help) in _VALUE_FLAGS.items():
        flag = "--" + dest.replace("_", "-")
        parser.add_argument(flag, dest=dest, default=None, metavar=metavar, help=help)
    parser.add_argument(
        "--per-step",
        action="store_true",
        help="also write one row per trace step (not only the mean)",
    )
    parser.add_argument(
        "--no-size-exchange",
        action="store_true",
        help="do not price the allgatherv size exchange (implementations that know the "
        "payload sizes in advance)",
    )
    parser.add_argument(
        "--compute",
        choices=("model", "trace"),
        default=None,
        help="override the cluster's compute mode: 'model' (every local time on the cluster's "
        "device; the presets' default) or 'trace' (the seconds measured on the recording machine)",
    )
    add_set_option(
        parser,
        f"set a {config} key (each flag above is a shortcut for one; see `vgcsim --help` of "
        "the command and the README), e.g. --set overlap=bucketed",
    )


def _one(value: str, flag: str) -> str:
    from vgcsim.core.errors import ConfigError

    if "," in value or value.strip() == "all":
        raise ConfigError(f"{flag} {value!r}: simulate replays one algorithm at a time")
    return value.strip()


def replay_overrides(args: argparse.Namespace, target: str) -> list[str]:
    """The ``--set`` items, then the flags given, as ``key=value`` for ``target``'s config
    (``"predict"``: PredictOptions, ``"simulate"``: SimulateConfig)."""
    from vgcsim.core.units import parse_size_bytes

    out = settings(args.set)
    for op in ("allreduce", "allgatherv"):
        value = getattr(args, op)
        if value is None:
            continue
        if target == "predict":
            from vgcsim.models.predict import parse_algorithms

            out.append(f"{op}={','.join(parse_algorithms(value, op))}")
        else:
            key = "dense_collective" if op == "allreduce" else "compressed_collective"
            out.append(f"{key}={op}/{_one(value, '--' + op)}")
    for dest, key in (
        ("encoding", "encoding"),
        ("extrapolation", "rule"),
        ("seed", "seed"),
        ("overlap", "overlap"),
        ("dense_encodings", "dense_encodings"),
    ):
        if getattr(args, dest) is not None:
            out.append(f"{key}={getattr(args, dest)}")
    if args.bucket_size is not None:
        out.append(f"bucket_bytes={parse_size_bytes(args.bucket_size)!r}")
    if args.per_step:
        out.append("per_step=true")
    if args.no_size_exchange:
        out.append("size_exchange=false")
    return out


def with_compute(args: argparse.Namespace, cluster: Any) -> Any:
    """``cluster`` with ``--compute`` applied."""
    if args.compute is not None and args.compute != cluster.compute:
        cluster = dataclasses.replace(cluster, compute=args.compute)
    return cluster


def save_replay(
    args: argparse.Namespace,
    df: Any,
    trace: Any,
    cluster: Any,
    *,
    source: str,
    config: Any,
    options: dict[str, Any],
    files: dict[str, Any] | None = None,
) -> Any:
    """predict's and simulate's result table: :func:`vgcsim.core.results.save_results` with the
    trace, the cluster, the extrapolation rule of ``config`` and the time sources."""
    import sys

    from vgcsim.commands import warn
    from vgcsim.core.cluster import cluster_to_dict
    from vgcsim.core.results import save_results, trace_entry
    from vgcsim.models.predict import time_sources
    from vgcsim.traces.health import caveats

    # a partial or diverged trace: say so now, and in the header for `vgcsim report`
    lines = caveats(trace)
    warn(args.command, lines)
    return save_results(
        df,
        args.out,
        source=source,
        traces=[{**trace_entry(trace), "caveats": lines}],
        cluster=cluster_to_dict(cluster),
        extrapolation={
            "rule": config.rule,
            "seed": config.seed if config.rule == "resample" else None,
        },
        options={**options, "time_sources": time_sources(trace, cluster)},
        command=["vgcsim", *sys.argv[1:]],
        batch_size_per_worker=trace.header.get("batch_size_per_worker"),
        overwrite=args.overwrite,
        files=files,
        writer=f"vgcsim {args.command}",
    )


def verdict(df: Any, trace: Any) -> str:
    """One line: where the trace's compressed allgatherv beats dense fp32 allreduce, in the
    report's words (:func:`vgcsim.reports.tables.headline`, naming what decides it)."""
    from vgcsim.reports import tables
    from vgcsim.traces.labels import method_label

    comp = trace.header.get("compressor") or {}
    labels = {trace.name: method_label(str(comp.get("name", trace.compressor)), comp.get("params"))}
    wi = tables.what_if(df, labels)
    lines = [
        s
        for s in tables.headline(wi, breakdown_table=tables.breakdown(df, labels))
        if not s.startswith("On ") or " dense allreduce of " not in s
    ]
    if not lines:
        return "verdict: no compressed exchange to compare with dense allreduce (a dense trace)"
    return "verdict: " + " ".join(lines)


def print_replay(df: Any, trace: Any, out: Any, extra: Sequence[str] = ()) -> None:
    """What predict and simulate print, in one format: the mean rows (P, method, encoding,
    collective, comm, decode, step, speedup over dense fp32), one verdict line, the lines of
    ``extra`` (predict: where the sparse allreduce stops paying), the folder."""
    from vgcsim.core.results import finalize_results
    from vgcsim.models.predict import summarize

    df = finalize_results(df)
    print(summarize(df))
    print(verdict(df, trace))
    for line in extra:
        print(line)
    print(f"wrote {len(df)} rows to {out}")
