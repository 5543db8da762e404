"""``vgcsim report``: turn result tables (and traces) into plots, tables and an HTML page."""

from __future__ import annotations

import argparse
import sys

from vgcsim.commands import add_out_option

HELP = "write plots, what-if tables and a self-contained HTML report from result tables"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "results",
        nargs="*",
        metavar="RESULTS",
        help="result folders (or results.parquet files) from `vgcsim predict` / `vgcsim simulate`",
    )
    parser.add_argument(
        "--trace",
        action="extend",
        nargs="+",
        default=[],
        metavar="RUN",
        help="trace run folders to validate (density, compression ratio, accuracy)",
    )
    parser.add_argument(
        "--title", default="vgcsim report", help="heading of the HTML page (default: %(default)s)"
    )
    parser.add_argument(
        "--target-accuracy",
        type=float,
        default=None,
        metavar="PERCENT",
        help="test accuracy (in %%, e.g. 96.5) for the time-to-accuracy table and plot "
        "(default: the final test accuracy of the dense --trace run minus 1 point)",
    )
    add_out_option(parser, "output folder", default="out/report")


def target_fraction(percent: float | None) -> float | None:
    """A target test accuracy given in percent as a fraction; ConfigError when out of range.

    Values up to 1 are refused: they read like fractions, and a 0.9 % target is no target.
    """
    import math

    from vgcsim.core.errors import ConfigError

    if percent is None:
        return None
    if not math.isfinite(percent) or not (1.0 < percent <= 100.0):
        hint = f" (a fraction? write {percent * 100:g})" if 0 < percent <= 1 else ""
        raise ConfigError(
            f"target accuracy must be a percentage in (1, 100], got {percent:g}{hint}"
        )
    return percent / 100.0


def run(args: argparse.Namespace) -> int:
    from vgcsim import api
    from vgcsim.commands import check_out, warn
    from vgcsim.core.errors import ResultsError

    if not args.results and not args.trace:
        raise ResultsError("nothing to report: give RESULTS folders and/or --trace RUN folders")
    target = target_fraction(args.target_accuracy)
    if target is not None and not args.trace:
        raise ResultsError(
            "--target-accuracy needs --trace RUN folders: the steps to a target come from "
            "the traces' evaluation curves"
        )
    check_out(args, "report", legacy=api.legacy_report)
    run = api.report_run(
        args.results,
        args.trace,
        args.out,
        title=args.title,
        overwrite=args.overwrite,
        target_accuracy=target,
        command="report",
    )
    warn("report", run.caveats)  # also a note on the page
    for line in run.missing:
        print(f"note: {line}", file=sys.stderr)
    for line in run.summary[:3]:
        print(line)
    print(f"{run.plots} plots, {run.tables} tables in {run.path.parent}")
    print(run.path)
    return 0
