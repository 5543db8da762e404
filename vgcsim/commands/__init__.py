"""Subcommand modules. Each exposes ``HELP``, ``add_arguments(parser)`` and ``run(args) -> int``; heavy imports stay inside ``run``.

The options every command spells the same way are defined here, once: ``-o/--out``,
``--overwrite``, ``--set KEY=VALUE`` and ``--world-sizes`` (the syntax of
:mod:`vgcsim.core.worldsizes`, parsed in ``run`` so that a mistake is one line and exit 2).
"""

from __future__ import annotations

import argparse
from collections.abc import Iterable, Sequence
from typing import Any


def add_set_option(
    parser: argparse.ArgumentParser, help: str = "override a config key", dest: str = "set"
) -> None:
    """The repeatable ``--set KEY=VALUE`` option every configurable command takes."""
    parser.add_argument(
        "--set", dest=dest, action="append", default=[], metavar="KEY=VALUE", help=help
    )


def add_out_option(
    parser: argparse.ArgumentParser,
    help: str,
    *,
    default: str | None = None,
    required: bool = True,
    **kwargs: Any,
) -> None:
    """``-o/--out`` (required unless a default is given or ``required=False``) and
    ``--overwrite``."""
    if default is not None:
        help = f"{help} (default: {default})"
    parser.add_argument(
        "-o",
        "--out",
        required=required and default is None,
        default=default,
        metavar="PATH",
        help=help,
        **kwargs,
    )
    parser.add_argument(
        "--overwrite",
        action="store_true",
        help="replace an earlier vgcsim output in --out (only files vgcsim wrote; nothing is "
        "deleted); a folder vgcsim did not write is never written into",
    )


def add_world_sizes_option(parser: argparse.ArgumentParser, default: str | None = None) -> None:
    """``--world-sizes`` in the one syntax (a string here; :func:`world_sizes` parses it)."""
    from vgcsim.core.worldsizes import DEFAULT_WORLD_SIZES, WORLD_SIZES_HELP

    shown = default or DEFAULT_WORLD_SIZES
    parser.add_argument(
        "--world-sizes",
        default=None,
        metavar="LIST",
        help=f"{WORLD_SIZES_HELP}; default: {shown}",
    )


def world_sizes(text: str | None, default: str | None = None) -> tuple[int, ...]:
    """``--world-sizes`` parsed (the default when not given); ConfigError on bad input."""
    from vgcsim.core.worldsizes import DEFAULT_WORLD_SIZES, parse_world_sizes

    return parse_world_sizes(text if text is not None else (default or DEFAULT_WORLD_SIZES))


def settings(items: Iterable[str], world_sizes_keys: Sequence[str] = ("world_sizes",)) -> list[str]:
    """``--set`` items with any ``world_sizes`` value read in the ``--world-sizes`` syntax
    (``--set world_sizes=2:64:x2``), so that one syntax holds wherever world sizes are given."""
    from vgcsim.core.worldsizes import parse_world_sizes

    out = []
    for item in items:
        key, sep, value = item.partition("=")
        if sep and key.strip() in world_sizes_keys:
            item = f"{key.strip()}={list(parse_world_sizes(value.strip().strip('[]')))}"
        out.append(item)
    return out


def check_out(
    args: argparse.Namespace, command: str, folder: Any = None, legacy: Any = None
) -> None:
    """Refuse ``-o`` before any work when vgcsim may not write it (see vgcsim.core.outdir);
    ``legacy`` recognises an output from before markers (default: a result table)."""
    from vgcsim.core.outdir import check_output
    from vgcsim.core.results import legacy_result_files

    check_output(
        args.out if folder is None else folder,
        f"vgcsim {command}",
        overwrite=args.overwrite,
        legacy=legacy or legacy_result_files,
    )


def warn(command: str, lines: Iterable[str]) -> None:
    """Print each line as ``vgcsim COMMAND: warning: LINE`` on stderr (results are still
    written: a warning says what they rest on, e.g. a partial or diverged trace)."""
    import sys

    for line in lines:
        print(f"vgcsim {command}: warning: {line}", file=sys.stderr)
