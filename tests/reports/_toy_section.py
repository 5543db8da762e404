"""A toy report section, as docs/extending.md's "Adding a report section" describes: a
frame → frame table function and one function registered with ``@section``. Importing the
module registers the section; only the test that uses it imports it
(tests/reports/test_adding_a_report_section.py), never the product."""

from __future__ import annotations

import pandas as pd

from vgcsim.reports.sections import SectionContext, SectionOutput, Table, display, section


def largest_payloads(results: pd.DataFrame) -> pd.DataFrame:
    """The largest payload one rank sends in a step (bytes), per trace and method, over the
    mean rows (``step == -1``) of every interconnect and P."""
    mean = results[results["step"] == -1]
    return mean.groupby(["trace", "method"], as_index=False)["payload_bytes_max"].max()


@section("payloads", needs="results")
def _payloads(ctx: SectionContext) -> SectionOutput:
    frame = largest_payloads(ctx.results)
    columns = [
        ("trace", lambda t: t["trace"].map(ctx.label), None),
        ("method", "method", None),
        ("largest payload (kB)", "payload_bytes_max", lambda v: f"{v / 1e3:,.1f}"),
    ]
    table = Table(
        "payloads",
        "Largest payload per rank",
        "The largest payload one rank sends in a step, per trace and method, over every "
        "interconnect and P of the result tables.",
        frame,
        display(frame, columns),
    )
    least = frame.loc[frame["payload_bytes_max"].idxmin()]
    summary = (
        f"Smallest payload per rank: {least['payload_bytes_max'] / 1e3:,.1f} kB "
        f"({ctx.label(least['trace'])}, {least['method']})."
    )
    return SectionOutput(tables=[table], summary=[summary])
