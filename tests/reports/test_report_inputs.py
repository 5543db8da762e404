"""What a report shows of its inputs: every result table (predicted or simulated, labelled),
a trace found from another folder, a trace gone (a note, no crash), baselines as baselines."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pandas as pd
import pytest

from vgcsim.cli import main
from vgcsim.commands.demo import DEMO_TRACES
from vgcsim.reports import render

SIZES = "2,4,8"


@pytest.fixture(scope="module")
def mixed(tmp_path_factory) -> dict[str, Path]:
    """A predicted-only 1GbE result and a simulated 10GbE result of the committed variance
    trace, and a simulated 10GbE result of the QSGD one."""
    where = tmp_path_factory.mktemp("mixed")
    out = {
        "p-var-1g": ["predict", str(DEMO_TRACES / "variance"), "--cluster", "1GbE"],
        "s-var-10g": ["simulate", str(DEMO_TRACES / "variance"), "--cluster", "10GbE"],
        "s-qsgd-10g": ["simulate", str(DEMO_TRACES / "qsgd"), "--cluster", "10GbE"],
    }
    for name, argv in out.items():
        extra = ["--set", "max_steps=20"] if argv[0] == "simulate" else []
        assert main([*argv, "--world-sizes", SIZES, *extra, "-o", str(where / name)]) == 0
    return {name: where / name for name in out}


@pytest.mark.slow
def test_every_input_appears_labelled_predicted_or_simulated(mixed, tmp_path, capsys):
    results = [mixed["p-var-1g"], mixed["s-var-10g"]]
    assert main(["report", *map(str, results), "-o", str(tmp_path / "r")]) == 0
    capsys.readouterr()
    summary = json.loads((tmp_path / "r" / "report.json").read_text())["summary"]
    var = [s for s in summary if s.startswith("On ") and "variance α=2" in s]
    assert any(s.startswith("On 1GbE,") and "predicted" in s for s in var), var
    assert any(s.startswith("On 10GbE,") and "simulated" in s for s in var), var
    glance = pd.read_csv(tmp_path / "r" / "tables" / "speedup_matrix.csv")
    shown = set(zip(glance["source"], glance["interconnect"], strict=True))
    assert {("predicted", "1GbE"), ("simulated", "10GbE")} <= shown

    report = render.build_report(render.load_inputs(results))
    speedup = next(p for p in report.plots if p.name == "speedup").figure
    legend = speedup.axes[0].get_legend_handles_labels()[1]
    assert "1GbE (predicted)" in legend and "10GbE (simulated)" in legend


@pytest.mark.slow
def test_dense_2_byte_rows_are_baselines_and_panels_share_one_scale(mixed):
    results = [mixed["s-var-10g"], mixed["s-qsgd-10g"]]
    report = render.build_report(render.load_inputs(results))
    fig = next(p for p in report.plots if p.name == "speedup").figure
    panels = [ax for ax in fig.axes if ax.get_visible() and ax.get_title()]
    # one panel per compression method, none for the bf16 baseline, drawn in each panel
    assert len(panels) == 2
    assert not any(ax.get_title().startswith("dense ") for ax in panels)
    for ax in panels:
        assert any("(baseline)" in lab for lab in ax.get_legend_handles_labels()[1])
    assert panels[0].get_shared_y_axes().joined(panels[0], panels[1])
    assert panels[0].get_ylim() == panels[1].get_ylim()
    glance = next(t for t in report.tables if t.name == "speedup_matrix")
    methods = list(glance.frame["method"])
    assert methods[-1].endswith("(baseline)") and sum("baseline" in m for m in methods) == 1
    # the key column leads the at-a-glance table, and the page keeps it in view
    assert list(glance.display.columns)[0] == "method"
    page = render._html_page(report, {p.name: "" for p in report.plots}, "t")
    assert ".scroll td:first-child{position:sticky;left:0" in page
    baseline = [s for s in report.summary if "dense allreduce of bf16" in s]
    assert baseline and report.summary.index(baseline[0]) > max(
        i for i, s in enumerate(report.summary) if "QSGD" in s or "variance" in s
    )


@pytest.mark.slow
def test_report_from_another_folder_finds_the_trace_or_says_it_is_gone(
    tmp_path, monkeypatch, capsys
):
    ran, elsewhere = tmp_path / "ran", tmp_path / "elsewhere"
    ran.mkdir()
    elsewhere.mkdir()
    shutil.copytree(DEMO_TRACES / "variance", ran / "var")
    monkeypatch.chdir(ran)
    assert main(["predict", "var", "--cluster", "1GbE", "--world-sizes", SIZES, "-o", "p"]) == 0
    header = json.loads((ran / "p" / "results.json").read_text())["traces"][0]
    assert header["path"] == str((ran / "var").resolve()) and header["path_given"] == "var"
    capsys.readouterr()

    monkeypatch.chdir(elsewhere)
    assert main(["report", os.path.join("..", "ran", "p"), "-o", "r1"]) == 0
    out = capsys.readouterr()
    assert "variance α=2" in out.out and "note:" not in out.err  # found, labelled

    shutil.rmtree(ran / "var")
    assert main(["report", os.path.join("..", "ran", "p"), "-o", "r2"]) == 0
    out = capsys.readouterr()
    notes = out.err.strip().splitlines()
    assert len(notes) == 1 and "Trace 'var'" in notes[0] and "--trace" in notes[0], notes
    assert "variance" in out.out  # the rows are there, labelled by compressor name
    assert "is not at" in (elsewhere / "r2" / "index.html").read_text()


def test_a_table_priced_with_an_anchor_says_so_with_its_offset(tmp_path):
    """A result table written with ``--anchor`` reaches the report as one caution naming the
    trace, the cluster, the offset and the anchor; one written without adds none."""
    from tests.conftest import write_hook_trace
    from vgcsim import api

    trace = write_hook_trace(tmp_path)
    anchored = api.predict(trace, "10GbE", [2, 4], compute="trace", anchor="1GbE")
    offset_ms = anchored.attrs["options"]["anchor"]["offset_s"] * 1e3
    api.save(anchored, tmp_path / "a", trace, "10GbE")
    api.save(api.predict(trace, "10GbE", [2, 4], compute="trace"), tmp_path / "p", trace, "10GbE")
    assert render.load_inputs([tmp_path / "p"]).caveats == ()
    (line,) = render.load_inputs([tmp_path / "a", tmp_path / "p"]).caveats
    assert line == (
        f"the step times of run on 10GbE include an anchor offset of {offset_ms:+.3g} ms, the "
        "time per step the traced job measured beyond the models' price on 1GbE at P = 4 "
        "(--anchor), carried unchanged to every P and link"
    )
