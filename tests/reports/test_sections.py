"""Report sections as a registry: page order, applicability, a new plot in one place."""

from __future__ import annotations

import pandas as pd
import pytest
from report_data import LABELS, FakeTrace, build_results

from vgcsim.reports import render, sections
from vgcsim.reports.sections import SECTIONS, Plot, SectionOutput, Table, display


def _inputs(results=True, traces=True):
    return render.ReportInputs(
        results=build_results() if results else pd.DataFrame(),
        traces=(FakeTrace("d", "dense", 1.0), FakeTrace("var2", "variance", 0.01))
        if traces
        else (),
        labels=LABELS,
    )


def test_sections_in_page_order():
    assert list(SECTIONS) == [
        "what_if",
        "breakdown",
        "crossover",
        "agreement",
        "time_to_accuracy",
        "methods",
        "density",
        "trace_validation",
        "advice",
    ]


@pytest.mark.slow
def test_report_is_the_sections_that_apply():
    only_traces = render.build_report(_inputs(results=False))
    assert [t.name for t in only_traces.tables] == ["methods"]
    assert [p.name for p in only_traces.plots] == ["density", "trace_validation"]
    only_results = render.build_report(_inputs(traces=False))
    assert [t.name for t in only_results.tables] == [
        "speedup_matrix",
        "what_if",
        "breakdown",
        "crossover",
        "agreement",
        "advice",
    ]
    assert only_results.notes and only_results.notes[0].startswith("Local times")


@pytest.mark.slow
def test_a_new_section_is_one_registration(monkeypatch):
    monkeypatch.setattr(sections, "SECTIONS", dict(SECTIONS))
    monkeypatch.setattr(render, "SECTIONS", sections.SECTIONS)

    @sections.section("worlds", needs="results")
    def _worlds(ctx):
        sizes = ctx.results[["world_size"]].drop_duplicates()
        fig, axes = sections._subplots(1, 3, 2)
        axes[0].plot(sizes["world_size"])
        return SectionOutput(
            tables=[Table("worlds", "World sizes", "Every P.", sizes, sizes)],
            plots=[Plot("worlds", "World sizes", "Every P.", fig)],
            summary=["P from the results."],
        )

    report = render.build_report(_inputs())
    assert report.tables[-1].name == "worlds" and report.plots[-1].name == "worlds"
    assert report.summary[-1] == "P from the results."
    assert "worlds" not in SECTIONS  # the registry outside this test is untouched
    with pytest.raises(ValueError, match="registered twice"):
        sections.section("worlds", needs="results")(_worlds)


def test_display_applies_each_column_spec():
    t = pd.DataFrame({"a_s": [0.0012, float("nan")], "w": [True, False], "n": [1, 2]})
    out = display(
        t,
        [
            ("time (ms)", "a_s", sections._fmt_ms),
            ("wins", "w", {True: "yes", False: "no"}),
            ("double", lambda f: f["n"] * 2, None),
        ],
    )
    assert out.to_dict("list") == {
        "time (ms)": ["1.20", ""],
        "wins": ["yes", "no"],
        "double": [2, 4],
    }


@pytest.mark.slow
def test_advice_section_ranks_each_interconnect_and_p():
    report = render.build_report(_inputs())
    table = {t.name: t for t in report.tables}["advice"]
    ranked = table.frame
    for _, g in ranked.groupby(["cluster", "world_size"]):
        assert g["rank"].tolist() == list(range(1, len(g) + 1))
        assert g["step_s"].is_monotonic_increasing
    assert "run " in table.caption
