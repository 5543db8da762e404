"""`vgcsim validate`'s report pieces: the summary table, the plot and the printed text."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from matplotlib.figure import Figure

from vgcsim.reports.validation import (
    collective_text,
    plot_validation,
    steps_text,
    validation_summary,
)


@pytest.fixture()
def frame():
    """Four steps: predicted 10 % high on every step; simulated exact but for step 3 (2×)."""
    measured = np.array([1.0, 2.0, 3.0, 4.0]) * 1e-3
    df = pd.DataFrame(
        {
            "step": [0, 1, 2, 3],
            "measured_s": measured,
            "predicted_s": measured * 1.1,
            "simulated_s": measured * np.array([1, 1, 1, 2]),
            "payload_bytes_max": [100, 200, 300, 400],
        }
    )
    df.attrs.update(collective="allgatherv/ring", world_size=4, cluster="10GbE", trace="t")
    return df


def test_summary_rows_per_source(frame):
    s = validation_summary(frame).set_index("source")
    assert list(s.index) == ["measured", "predicted", "simulated"]
    assert s.loc["measured", "total_s"] == pytest.approx(0.010)
    assert s.loc["predicted", "mean_rel_error"] == pytest.approx(0.1)
    assert s.loc["predicted", "median_abs_rel_error"] == pytest.approx(0.1)
    assert s.loc["predicted", "within_25pct"] == 1.0
    # simulated: mean 14 ms/4 vs 10 ms/4 -> +40 %; 3 of 4 steps within 25 %
    assert s.loc["simulated", "mean_rel_error"] == pytest.approx(0.4)
    assert s.loc["simulated", "within_25pct"] == 0.75


def test_summary_leaves_out_a_source_that_was_not_run(frame):
    frame["simulated_s"] = np.nan
    assert list(validation_summary(frame)["source"]) == ["measured", "predicted"]


def test_plot_draws_each_source_in_milliseconds_on_the_given_axes(frame):
    ax = Figure().subplots()
    assert plot_validation(frame, ax) is ax
    lines = {line.get_label(): line for line in ax.get_lines()}
    assert set(lines) == {"measured", "predicted", "simulated"}
    assert list(lines["predicted"].get_ydata()) == pytest.approx([1.1, 2.2, 3.3, 4.4])
    assert "allgatherv/ring, P=4 on 10GbE" in ax.get_title()


def test_text_shows_summary_then_the_first_steps(frame):
    text = steps_text(frame, validation_summary(frame), 2)
    summary, steps = text.split("\n\n")
    assert summary.splitlines()[1].split()[0] == "measured"
    assert len(steps.splitlines()) == 3  # header + 2 steps
    assert "\n\n" not in steps_text(frame, validation_summary(frame), 0)


def test_collective_text_formats_errors_as_percentages():
    df = pd.DataFrame(
        {
            "op": ["allreduce"],
            "collective": ["allreduce/ring"],
            "size_bytes": [1024],
            "measured_s": [2e-4],
            "predicted_s": [2.2e-4],
            "simulated_s": [1.9e-4],
            "predicted_rel_error": [0.1],
            "simulated_rel_error": [-0.05],
        }
    )
    text = collective_text(df)
    assert "+10.0%" in text and "-5.0%" in text and "0.0002" in text
