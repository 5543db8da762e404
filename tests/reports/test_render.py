"""Writing a report: files on disk, a self-contained HTML page with the summary first."""

from __future__ import annotations

import re

import pandas as pd
import pytest
from report_data import LABELS, FakeTrace, build_results

from reports import render


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    inputs = render.ReportInputs(
        results=build_results(),
        result_paths=("results/a",),
        traces=(FakeTrace("d", "dense", 1.0), FakeTrace("var2", "variance", 0.01)),
        labels=LABELS,
    )
    report = render.build_report(inputs)
    return report, render.write_report(report, tmp_path_factory.mktemp("report"))


def test_files_written(written):
    report, html_path = written
    out = html_path.parent
    names = {p.name for p in report.plots}
    assert names == {
        "speedup",
        "breakdown",
        "crossover",
        "agreement",
        "density",
        "trace_validation",
    }
    for name in names:
        assert (out / "plots" / f"{name}.png").stat().st_size > 1000
        assert (out / "plots" / f"{name}.svg").read_text().lstrip().startswith("<?xml")
    for t in report.tables:
        assert (out / "tables" / f"{t.name}.csv").is_file()
        md = (out / "tables" / f"{t.name}.md").read_text()
        assert md.count("\n|") >= 2
    back = pd.read_csv(out / "tables" / "what_if.csv")
    by_name = {t.name: t for t in report.tables}
    assert len(back) == len(by_name["what_if"].frame)
    assert report.tables[0].name == "speedup_matrix"


def test_html_is_self_contained_with_summary_first(written):
    report, html_path = written
    page = html_path.read_text()
    assert page.index("Summary") < page.index("<img")
    assert report.summary[0].startswith("On 10GbE, variance α=2")
    assert "On 10GbE, variance α=2 beats dense allreduce" in page
    srcs = re.findall(r'src="([^"]+)"', page)
    assert len(srcs) == len(report.plots)
    assert all(s.startswith("data:image/png;base64,") for s in srcs)
    assert not re.search(r'(href|src)="(https?:)?//', page)


def test_summary_markdown_embeds_what_if(written):
    _, html_path = written
    md = (html_path.parent / "summary.md").read_text()
    assert md.startswith("# vgcsim report")
    assert "| interconnect |" in md
    assert "plots/speedup.png" in md


def test_to_markdown_escapes_pipes():
    md = render.to_markdown(pd.DataFrame({"a|b": ["x|y"], "n": [1.5]}))
    assert md.splitlines()[0] == "| a\\|b | n |"
    assert md.splitlines()[2] == "| x\\|y | 1.5 |"


def test_trace_only_report(tmp_path):
    inputs = render.ReportInputs(
        results=pd.DataFrame(columns=list(render.tables.RESULT_COLUMNS)),
        traces=(FakeTrace("var2", "variance", 0.01),),
        labels=LABELS,
    )
    path = render.write_report(render.build_report(inputs), tmp_path)
    assert "trace validation only" in path.read_text()
