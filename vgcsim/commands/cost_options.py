"""The flags ``vgcsim predict`` and ``vgcsim simulate`` share, declared and parsed once, and
what both print.

Each flag is a shortcut for the ``--set`` key of the same name of the one replay vocabulary,
:class:`vgcsim.core.options.ReplayOptions` (``PredictOptions`` and ``SimulateConfig`` both
hold it), applied after the ``--set`` items: ``--allreduce``, ``--allgatherv`` (algorithm
names; predict takes a comma list or ``all``, simulate one), ``--encoding``, ``--seed``,
``--overlap``, ``--dense-encodings``, ``--per-step``; ``--extrapolation RULE`` sets ``rule``,
``--bucket-size SIZE`` sets ``bucket_bytes`` (read with its unit) and ``--no-size-exchange``
sets ``size_exchange=false``.

``--compute`` overrides the cluster's compute mode; ``--anchor CLUSTER`` prices the trace on
the cluster of its own setup and adds the job's measured time the models miss there
(:func:`vgcsim.api.anchored`); ``--world-sizes`` is the one syntax of
:mod:`vgcsim.core.worldsizes` (``--set world_sizes=...`` reads the same syntax).
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from vgcsim.commands import add_set_option, add_world_sizes_option, settings
from vgcsim.core.errors import ConfigError

if TYPE_CHECKING:  # annotations only: the commands import the stages when they run
    from vgcsim.traces.reading import Trace

#: flag dest -> (metavar, help). Every flag defaults to None: not given, the config decides.
_VALUE_FLAGS: dict[str, tuple[str, str]] = {
    "allreduce": (
        "ALG",
        "dense baseline allreduce algorithm (predict: a comma list or 'all'; default: ring)",
    ),
    "allgatherv": (
        "ALG",
        "compressed allgatherv algorithm (predict: a comma list or 'all'; default: the "
        "trace's own, bounded for traces the DDP hook wrote, else ring)",
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
    parser.add_argument(
        "--anchor",
        metavar="CLUSTER",
        default=None,
        help="the cluster (file or preset) of the setup a DDP-hook trace was recorded on: "
        "every step gets the trace's measured step time there less the predicted one "
        "(the median over steps; docs/models.md, 'Anchoring to the traced job')",
    )
    add_set_option(
        parser,
        f"set a {config} key (each flag above is a shortcut for one; see `vgcsim --help` of "
        "the command and the README), e.g. --set overlap=bucketed",
    )


#: flag dest -> the ReplayOptions field it sets, where the two names differ
_FIELD = {"extrapolation": "rule"}


def replay_overrides(args: argparse.Namespace) -> list[str]:
    """The ``--set`` items, then the flags given, as ``key=value`` items of the replay
    options (:class:`vgcsim.core.options.ReplayOptions`, the same keys for both commands)."""
    from vgcsim import api
    from vgcsim.core.units import parse_size_bytes

    out = settings(args.set)
    for dest in ("allreduce", "allgatherv", "encoding", "extrapolation", "overlap"):
        value = getattr(args, dest)
        if value is not None and not str(value).strip(" ,"):
            flag = "--" + dest.replace("_", "-")
            raise ConfigError(f"{flag} {value!r} names nothing; give a name or leave {flag} out")
    for op in ("allreduce", "allgatherv"):
        value = getattr(args, op)
        if value is not None:
            out.append(f"{op}={','.join(api.parse_algorithms(value, op))}")
    for dest in ("encoding", "extrapolation", "seed", "overlap", "dense_encodings"):
        if getattr(args, dest) is not None:
            out.append(f"{_FIELD.get(dest, dest)}={getattr(args, dest)}")
    if args.bucket_size is not None:
        out.append(f"bucket_bytes={parse_size_bytes(args.bucket_size)!r}")
    if args.per_step:
        out.append("per_step=true")
    if args.no_size_exchange:
        out.append("size_exchange=false")
    return out


def command_line() -> list[str]:
    """The command as typed, for the result header."""
    import sys

    return ["vgcsim", *sys.argv[1:]]


def print_replay(df: Any, trace: Trace, out: Any, crossover: bool = False) -> None:
    """What predict and simulate print, in one format (:func:`vgcsim.api.replay_text`: the
    mean rows, one verdict line and, with ``crossover``, where the sparse allreduce stops
    paying), then the folder."""
    from vgcsim import api

    for line in api.replay_text(df, trace, crossover=crossover):
        print(line)
    print(f"wrote {len(df)} rows to {out}")
