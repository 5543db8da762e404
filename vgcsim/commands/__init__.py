"""Subcommand modules. Each exposes ``HELP``, ``add_arguments(parser)`` and ``run(args) -> int``; heavy imports stay inside ``run``."""
