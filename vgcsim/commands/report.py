"""``vgcsim report``: turn result tables (and traces) into plots, tables and an HTML page."""

from __future__ import annotations

import argparse

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
        "-o", "--out", default="out/report", help="output folder (default: out/report)"
    )
    parser.add_argument(
        "--title", default="vgcsim report", help="heading of the HTML page (default: %(default)s)"
    )


def run(args: argparse.Namespace) -> int:
    from reports.render import build_report, load_inputs, write_report
    from traces.errors import ResultsError

    if not args.results and not args.trace:
        raise ResultsError("nothing to report: give RESULTS folders and/or --trace RUN folders")
    inputs = load_inputs(args.results, args.trace)
    report = build_report(inputs)
    path = write_report(report, args.out, title=args.title)
    for line in report.summary[:3]:
        print(line)
    print(f"{len(report.plots)} plots, {len(report.tables)} tables in {path.parent}")
    print(path)
    return 0
