"""A report section added as one function registered with ``@section`` (and its frame → frame
table function) is run by ``build_report`` after the sections registered before it and
written by ``write_report`` like every other table (docs/extending.md, "Adding a report
section")."""

from __future__ import annotations

import importlib
import json
import sys

import pandas as pd
import pytest
from report_data import LABELS, TRACES, build_results

from vgcsim.reports import render
from vgcsim.reports.sections import SECTIONS, ReportInputs, SectionContext, section

MODULE = "_toy_section"


@pytest.fixture
def payloads_section():
    """The module imported as the product imports its sections (which registers it), and
    the registry as it was before, after the test."""
    before = dict(SECTIONS)
    try:
        yield importlib.import_module(MODULE)
    finally:
        sys.modules.pop(MODULE, None)
        SECTIONS.clear()
        SECTIONS.update(before)


def _inputs() -> ReportInputs:
    """Predicted rows of one trace on one interconnect (report_data's α-β numbers)."""
    results = build_results(("predicted",), {"var2": TRACES["var2"]})
    return ReportInputs(results=results[results["cluster"] == "10GbE"], labels=LABELS)


def test_importing_the_module_registers_the_section_last_once(payloads_section):
    assert list(SECTIONS)[-1] == "payloads"
    assert SECTIONS["payloads"].build is payloads_section._payloads
    with pytest.raises(ValueError, match="registered twice"):
        section("payloads", needs="results")(payloads_section._payloads)


def test_the_section_is_left_out_without_result_tables(payloads_section):
    ctx = SectionContext(ReportInputs(results=pd.DataFrame()))
    assert not SECTIONS["payloads"].applies(ctx)


def test_the_report_builds_and_writes_its_table_and_summary(payloads_section, tmp_path):
    report = render.build_report(_inputs())
    table = report.tables[-1]
    assert table.name == "payloads"
    # report_data: the dense rows send DENSE_BYTES, the compressed ones DENSE_BYTES / 400
    got = table.frame.set_index(["trace", "method"])["payload_bytes_max"].to_dict()
    assert got == {("var2", "compressed"): 10_000.0, ("var2", "dense"): 4_000_000.0}
    assert table.display.to_dict("list") == {
        "trace": ["variance α=2", "variance α=2"],
        "method": ["compressed", "dense"],
        "largest payload (kB)": ["10.0", "4,000.0"],
    }
    line = "Smallest payload per rank: 10.0 kB (variance α=2, compressed)."
    assert report.summary[-1] == line

    page = render.write_report(report, tmp_path)
    written = pd.read_csv(tmp_path / "tables" / "payloads.csv")
    assert written["payload_bytes_max"].tolist() == [10_000.0, 4_000_000.0]
    md = (tmp_path / "tables" / "payloads.md").read_text(encoding="utf-8")
    assert "| variance α=2 | compressed | 10.0 |" in md
    assert "payloads" in json.loads((tmp_path / "report.json").read_text())["tables"]
    html = page.read_text(encoding="utf-8")
    assert 'id="table-payloads"' in html and line in html
