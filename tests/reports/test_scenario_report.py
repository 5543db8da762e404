"""The cost-model scenario's Markdown report (reports.scenario) from the scenario's frames."""

from __future__ import annotations

import pytest

from vgcsim.models.scenario import (
    PaperScenarioConfig,
    best_rows,
    crossover_table,
    paper_scenario,
)
from vgcsim.reports.scenario import scenario_markdown


@pytest.fixture(scope="module")
def report():
    cfg = PaperScenarioConfig(
        nets=("resnet50",), links=("10GbE", "1GbE"), world_sizes=(2, 64, 1024), codec_s=0.002
    )
    df, info = paper_scenario(cfg)
    best = best_rows(df)
    text = scenario_markdown(
        best,
        crossover_table(cfg, df),
        info,
        "vgcsim scenario paper -o out",
        codec_s=cfg.codec_s,
        batch_size_per_worker=cfg.batch_size_per_worker,
    )
    return text, best


def test_markdown_has_the_tables(report):
    text, _ = report
    assert "`vgcsim scenario paper -o out`" in text
    assert "codec (0.002 s)" in text and "32 samples per rank" in text
    assert "### Speedup of compressed over dense step time" in text
    assert "### Where compression stops paying" in text
    assert "| 10GbE | QSGD 2 bit, d=128 |" in text


def test_speedup_cells_are_the_frames_numbers(report):
    text, best = report
    r = best[
        (best.cluster == "1GbE") & (best.world_size == 64) & (best.compressor == "variance α=2")
    ].iloc[0]
    row = next(line for line in text.splitlines() if line.startswith("| 1GbE | variance α=2 |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    # cells: link, method, P=2, P=64, P=1024
    assert cells[3] == f"{r.speedup_vs_dense:.2f}"
