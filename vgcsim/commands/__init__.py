"""Subcommand modules. Each exposes ``HELP``, ``add_arguments(parser)`` and ``run(args) -> int``; heavy imports stay inside ``run``."""

from __future__ import annotations

import argparse


def add_set_option(
    parser: argparse.ArgumentParser, help: str = "override a config key", dest: str = "set"
) -> None:
    """The repeatable ``--set KEY=VALUE`` option every configurable command takes."""
    parser.add_argument(
        "--set", dest=dest, action="append", default=[], metavar="KEY=VALUE", help=help
    )
