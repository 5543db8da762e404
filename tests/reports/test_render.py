"""Writing a report: files on disk, a self-contained HTML page with the summary first."""

from __future__ import annotations

import re

import pandas as pd
import pytest
from report_data import LABELS, FakeTrace, build_results

from vgcsim.reports import render


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


@pytest.mark.slow
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
        "time_to_accuracy",
    }
    for name in names:
        assert (out / "plots" / f"{name}.png").stat().st_size > 1000
        assert (out / "plots" / f"{name}.svg").read_text().lstrip().startswith("<?xml")
    # writing leaves the caller's figures as they were: still laid out by constrained layout
    engines = {type(p.figure.get_layout_engine()).__name__ for p in report.plots}
    assert engines == {"ConstrainedLayoutEngine"}
    for t in report.tables:
        assert (out / "tables" / f"{t.name}.csv").is_file()
        md = (out / "tables" / f"{t.name}.md").read_text()
        assert md.count("\n|") >= 2
    back = pd.read_csv(out / "tables" / "what_if.csv")
    by_name = {t.name: t for t in report.tables}
    assert len(back) == len(by_name["what_if"].frame)
    assert report.tables[0].name == "speedup_matrix"


@pytest.mark.slow
def test_svg_bytes_depend_on_the_figure_alone(written, tmp_path):
    """Written again, a plot's SVG is the same file: no date, no random element ids."""
    report, html_path = written
    plot = report.plots[0]
    again = tmp_path / "again.svg"
    render._svg_as_laid_out(plot.figure, str(again))
    first = (html_path.parent / "plots" / f"{plot.name}.svg").read_bytes()
    assert again.read_bytes() == first
    assert b"<dc:date>" not in first


@pytest.mark.slow
def test_html_is_self_contained_with_summary_first(written):
    report, html_path = written
    page = html_path.read_text()
    assert page.index("Summary") < page.index("<img")
    assert report.summary[0].startswith("On 10GbE, variance α=2")
    assert "On 10GbE, variance α=2 (test accuracy 87.0 % vs dense 90.0 %) beats dense" in page
    assert (
        "Local times (compute, optimizer, variance, codec, decode): modelled on the cluster "
        "device (V100) for 10GbE, 1GbE, IB-EDR." in page
    )
    srcs = re.findall(r'src="([^"]+)"', page)
    assert len(srcs) == len(report.plots)
    assert all(s.startswith("data:image/png;base64,") for s in srcs)
    assert not re.search(r'(href|src)="(https?:)?//', page)


@pytest.mark.slow
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


@pytest.mark.slow
def test_trace_only_report(tmp_path):
    inputs = render.ReportInputs(
        results=pd.DataFrame(columns=list(render.tables.RESULT_COLUMNS)),
        traces=(FakeTrace("var2", "variance", 0.01),),
        labels=LABELS,
    )
    path = render.write_report(render.build_report(inputs), tmp_path)
    assert "trace validation only" in path.read_text()


@pytest.mark.slow
def test_summary_gives_accuracy_and_time_to_accuracy(written):
    report, html_path = written
    # FakeTrace: dense ends at 90 %, variance at 87 % -> default target 89 %, missed
    assert report.summary[0].startswith(
        "On 10GbE, variance α=2 (test accuracy 87.0 % vs dense 90.0 %) beats dense allreduce"
    )
    assert (
        "Time to accuracy: target 89.0 % test accuracy (the dense run's final test accuracy, "
        "90.0 %, minus 1 point)." in report.summary
    )
    assert any(s.startswith("variance α=2 never reaches 89.0 %") for s in report.summary)
    tta = {t.name: t for t in report.tables}["time_to_accuracy"]
    assert (tta.display["compressed steps"] == "never (87.0 % after 8 steps)").all()
    assert "never (87.0 % after 8 steps)" in html_path.read_text()


@pytest.mark.slow
def test_time_to_accuracy_needs_a_target_without_dense_trace():
    inputs = render.ReportInputs(
        results=build_results(),
        traces=(FakeTrace("var2", "variance", 0.01),),
        labels=LABELS,
    )
    report = render.build_report(inputs)
    assert "time_to_accuracy" not in {t.name for t in report.tables}
    assert report.summary[-1].startswith("Time to accuracy left out: no dense trace")
    assert "--target-accuracy" in report.summary[-1]
    given = render.build_report(
        render.ReportInputs(
            results=inputs.results,
            traces=inputs.traces,
            labels=LABELS,
            target_accuracy=0.3,
        )
    )
    tta = {t.name: t for t in given.tables}["time_to_accuracy"].frame
    assert (tta.compressed_steps_to_target == 1).all()  # 30 % at the eval after step 0
    assert tta.dense_steps_to_target.isna().all()
    assert any("no dense trace given" in s for s in given.summary)
