"""`vgcsim validate`'s report pieces: the summary table, the plot and the printed text."""

from __future__ import annotations

import matplotlib
import numpy as np
import pandas as pd
import pytest
from matplotlib.figure import Figure

from vgcsim.reports.validation import (
    collective_text,
    plot_validation,
    steps_text,
    term_summary,
    terms_text,
    validation_summary,
    winner_line,
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


def _one_collective(op: str, size_bytes: int, seconds, errors) -> pd.DataFrame:
    """One row of ``vgcsim validate FILE.measurements.json``'s frame: (measured, predicted,
    simulated) seconds and (predicted, simulated) relative errors."""
    names = ("measured_s", "predicted_s", "simulated_s")
    return pd.DataFrame(
        {
            "op": [op],
            "collective": [op if op == "p2p" else f"{op}/ring"],
            "size_bytes": [size_bytes],
            **{name: [v] for name, v in zip(names, seconds, strict=True)},
            **{
                f"{src}_rel_error": [e]
                for src, e in zip(("predicted", "simulated"), errors, strict=True)
            },
        }
    )


def test_collective_text_formats_errors_as_percentages():
    df = _one_collective("allreduce", 1024, (2e-4, 2.2e-4, 1.9e-4), (0.1, -0.05))
    text = collective_text(df)
    assert "+10.0%" in text and "-5.0%" in text and "0.0002" in text


def test_collective_text_prints_seconds_to_four_significant_digits_and_every_column():
    df = pd.DataFrame(
        {
            "op": ["allgather", "allreduce"],
            "collective": ["allgather/ring", "allreduce/ring"],
            "size_bytes": [64, 1048576],
            "measured_s": [1.234567e-3, 0.5],
            "predicted_s": [1.3e-3, 0.25],
            "simulated_s": [1.2e-3, 1.0],
            "predicted_rel_error": [0.053, -0.5],
            "simulated_rel_error": [-0.028, 1.0],
            "ignored": [1, 2],
        }
    )
    lines = collective_text(df).splitlines()
    assert lines[0].split() == [
        "op",
        "collective",
        "size_bytes",
        "measured_s",
        "predicted_s",
        "simulated_s",
        "predicted_rel_error",
        "simulated_rel_error",
    ]
    assert lines[1].split() == [
        "allgather", "allgather/ring", "64", "0.001235", "0.0013", "0.0012", "+5.3%", "-2.8%"
    ]  # fmt: skip
    assert lines[2].split() == [
        "allreduce", "allreduce/ring", "1048576", "0.5", "0.25", "1", "-50.0%", "+100.0%"
    ]  # fmt: skip


def test_steps_text_prints_four_significant_digits_and_the_chosen_columns(frame):
    frame["extra"] = 7
    text = steps_text(frame, validation_summary(frame), 4)
    summary, steps = text.split("\n\n")
    head = summary.splitlines()[0].split()
    assert head == [
        "source",
        "total_s",
        "mean_s",
        "mean_rel_error",
        "median_abs_rel_error",
        "p90_abs_rel_error",
        "within_25pct",
    ]
    # predicted: total 11 ms, mean 2.75 ms, +10 % everywhere
    assert summary.splitlines()[2].split() == [
        "predicted",
        "0.011",
        "0.00275",
        "0.1",
        "0.1",
        "0.1",
        "1",
    ]
    rows = steps.splitlines()
    assert rows[0].split() == [
        "step",
        "measured_s",
        "predicted_s",
        "simulated_s",
        "payload_bytes_max",
    ]
    assert rows[4].split() == ["3", "0.004", "0.0044", "0.008", "400"]
    assert len(rows) == 5
    # every float to 4 significant digits, small ones in lower-case exponent form
    frame.loc[0, ["measured_s", "predicted_s"]] = [1.23456789e-7, 2 / 3 * 1e-3]
    one = steps_text(frame, validation_summary(frame), 1).split("\n\n")[1].splitlines()
    assert len(one) == 2
    assert one[1].split() == ["0", "1.235e-07", "0.0006667", "0.001", "100"]


def test_summary_p90_and_median_of_the_absolute_errors():
    """Errors of +10, −20, +30, −40 and +50 %: median 30 %, 90th percentile 46 % (linear
    between 40 and 50), 2 of 5 within 25 %, mean 5.3 / 5 against 1: +6 %."""
    measured = np.ones(5)
    df = pd.DataFrame(
        {
            "step": range(5),
            "measured_s": measured,
            "predicted_s": measured * np.array([1.1, 0.8, 1.3, 0.6, 1.5]),
            "simulated_s": np.nan,
            "payload_bytes_max": 0,
        }
    )
    s = validation_summary(df).set_index("source")
    assert list(s.index) == ["measured", "predicted"]
    assert s.loc["measured", "mean_s"] == 1.0 and s.loc["measured", "within_25pct"] == 1.0
    assert s.loc["measured", "p90_abs_rel_error"] == 0.0
    assert s.loc["measured", "mean_rel_error"] == 0.0
    assert s.loc["measured", "median_abs_rel_error"] == 0.0
    assert s.loc["predicted", "median_abs_rel_error"] == pytest.approx(0.3)
    assert s.loc["predicted", "p90_abs_rel_error"] == pytest.approx(0.46)
    assert s.loc["predicted", "within_25pct"] == pytest.approx(0.4)
    assert s.loc["predicted", "mean_rel_error"] == pytest.approx(5.3 / 5 - 1)
    assert s.loc["predicted", "total_s"] == pytest.approx(5.3)


def test_the_error_within_25_percent_counts_its_bound():
    measured = np.ones(2)
    df = pd.DataFrame(
        {
            "step": [0, 1],
            "measured_s": measured,
            "predicted_s": [1.25, 1.5],
            "simulated_s": [0.75, 0.74],
            "payload_bytes_max": 0,
        }
    )
    s = validation_summary(df).set_index("source")
    assert s.loc["predicted", "within_25pct"] == 0.5  # exactly 25 % counts
    assert s.loc["simulated", "within_25pct"] == 0.5


def test_plot_styles_labels_and_a_missing_source(frame):
    frame["step"] = [10, 11, 12, 13]
    frame["simulated_s"] = np.nan
    with matplotlib.rc_context({"lines.linewidth": 3.0, "lines.markersize": 7.0}):
        ax = plot_validation(frame)  # a fresh figure of its own, laid out constrained
    assert ax.figure.get_size_inches() == pytest.approx([7, 3.5])
    assert type(ax.figure.get_layout_engine()).__name__ == "ConstrainedLayoutEngine"
    lines = {line.get_label(): line for line in ax.get_lines()}
    assert set(lines) == {"measured", "predicted"}
    measured, predicted = lines["measured"], lines["predicted"]
    assert list(measured.get_xdata()) == list(predicted.get_xdata()) == [10, 11, 12, 13]
    assert list(measured.get_ydata()) == pytest.approx([1, 2, 3, 4])
    style = (measured.get_marker(), measured.get_linestyle(), measured.get_color())
    assert style == ("o", "-", "k")
    assert (measured.get_markersize(), measured.get_linewidth()) == (3, 1)
    assert (predicted.get_linestyle(), predicted.get_color()) == ("--", "tab:blue")
    assert (predicted.get_markersize(), predicted.get_linewidth()) == (4, 1.5)
    assert ax.get_xlabel() == "step" and ax.get_ylabel() == "communication per step (ms)"
    assert ax.get_ylim()[0] == 0
    assert ax.get_title() == "t: allgatherv/ring, P=4 on 10GbE"
    assert ax.title.get_fontsize() == 9
    legend = ax.get_legend()
    assert [t.get_text() for t in legend.get_texts()] == ["measured", "predicted"]
    assert {t.get_fontsize() for t in legend.get_texts()} == {8}


def test_plot_without_a_collective_has_no_title(frame):
    frame["step"] = [5, 6, 7, 8]
    frame.attrs.clear()
    with matplotlib.rc_context({"lines.linewidth": 3.0, "lines.markersize": 7.0}):
        ax = plot_validation(frame)
    assert ax.get_title() == ""
    lines = {line.get_label(): line for line in ax.get_lines()}
    sim = lines["simulated"]
    assert (sim.get_linestyle(), sim.get_marker(), sim.get_color()) == (":", "x", "tab:orange")
    assert (sim.get_markersize(), sim.get_linewidth()) == (4, 1.5)
    assert list(sim.get_xdata()) == [5, 6, 7, 8]


def test_plot_title_leaves_out_what_the_frame_does_not_name(frame):
    frame.attrs.clear()
    frame.attrs.update(collective="allreduce/ring", world_size=2)
    assert plot_validation(frame).get_title() == ": allreduce/ring, P=2 on "


def _terms() -> pd.DataFrame:
    """Two terms over three steps; the exchange's first measurement is missing."""
    df = pd.DataFrame(
        {
            "term": ["compute"] * 3 + ["exchange"] * 3,
            "measured_s": [1.0, 2.0, 3.0, np.nan, 0.5, 1.0],
            "predicted_s": [1.1, 2.0, 2.4, 0.4, 0.5, 1.5],
            "simulated_s": [1.0, 2.2, 3.0, 0.4, 0.4, 1.2],
        }
    )
    for src in ("predicted", "simulated"):
        df[f"{src}_rel_error"] = df[f"{src}_s"] / df["measured_s"] - 1
    return df


def test_term_summary_medians_and_the_worst_error_with_its_sign():
    s = term_summary(_terms()).set_index("term")
    assert list(s.index) == ["compute", "exchange"]  # the frame's order
    assert s.loc["compute", "measured_s"] == 2.0
    assert s.loc["compute", "predicted_s"] == pytest.approx(2.0)
    # compute, predicted: errors +10 %, 0, −20 %: median 0, worst −20 %
    assert s.loc["compute", "predicted_median_error"] == pytest.approx(0.0)
    assert s.loc["compute", "predicted_worst_error"] == pytest.approx(-0.2)
    assert s.loc["compute", "simulated_worst_error"] == pytest.approx(0.1)
    # exchange: the missing measurement is left out of the errors, not of the medians
    assert s.loc["exchange", "measured_s"] == pytest.approx(0.75)
    assert s.loc["exchange", "predicted_s"] == pytest.approx(0.5)
    assert s.loc["exchange", "predicted_median_error"] == pytest.approx(0.25)
    assert s.loc["exchange", "predicted_worst_error"] == pytest.approx(0.5)
    assert s.loc["exchange", "simulated_worst_error"] == pytest.approx(-0.2)


def test_term_summary_of_a_term_never_measured_has_no_errors():
    df = _terms()
    df.loc[df["term"] == "exchange", "measured_s"] = np.nan
    for src in ("predicted", "simulated"):
        df[f"{src}_rel_error"] = df[f"{src}_s"] / df["measured_s"] - 1
    s = term_summary(df).set_index("term")
    assert np.isnan(s.loc["exchange", "predicted_median_error"])
    assert np.isnan(s.loc["exchange", "simulated_worst_error"])
    assert s.loc["exchange", "simulated_s"] == pytest.approx(0.4)


def test_terms_text_heads_the_table_and_formats_seconds_and_errors():
    text = terms_text(term_summary(_terms()), {"compressor": "variance", "method": "compressed"})
    lines = text.splitlines()
    assert lines[0] == (
        "per term (variance, compressed): median seconds over steps; errors per step "
        "(modelled - measured) / measured, median and worst"
    )
    assert lines[1].split() == [
        "term",
        "measured_s",
        "predicted_s",
        "predicted_median_error",
        "predicted_worst_error",
        "simulated_s",
        "simulated_median_error",
        "simulated_worst_error",
    ]
    assert lines[2].split() == ["compute", "2", "2", "+0.0%", "-20.0%", "2.2", "+0.0%", "+10.0%"]
    assert lines[3].split() == [
        "exchange",
        "0.75",
        "0.5",
        "+25.0%",
        "+50.0%",
        "0.4",
        "+0.0%",
        "-20.0%",
    ]


def _step_frame(method: str, measured: list[float], predicted: list[float], **attrs):
    df = pd.DataFrame(
        {
            "term": ["step"] * len(measured) + ["compute"],
            "measured_s": [*measured, 99.0],
            "predicted_s": [*predicted, 99.0],
        }
    )
    df.attrs.update(method=method, **attrs)
    return df


def test_winner_line_names_the_faster_run_measured_and_predicted():
    dense = _step_frame("dense", [0.010, 0.012, 0.011], [0.009, 0.009, 0.009])
    comp = _step_frame("compressed", [0.020, 0.008], [0.0085, 0.0085], compressor="variance")
    assert winner_line([dense, comp]) == (
        "winner: measured plain DDP (dense) (11.000 ms vs 14.000 ms), predicted variance "
        "(8.500 ms vs 9.000 ms): MISMATCH"
    )
    assert winner_line([comp, dense]) == (
        "winner: measured plain DDP (dense) (11.000 ms vs 14.000 ms), predicted variance "
        "(8.500 ms vs 9.000 ms): MISMATCH"
    )
    slow = _step_frame("compressed", [0.030], [0.031], compressor="topk")
    assert winner_line([dense, slow]).endswith(
        "measured plain DDP (dense) (11.000 ms vs 30.000 ms), predicted plain DDP (dense) "
        "(9.000 ms vs 31.000 ms): match"
    )


def test_winner_line_a_tie_goes_to_the_first_run():
    a = _step_frame("compressed", [0.01], [0.02], compressor="a")
    b = _step_frame("compressed", [0.01], [0.02], compressor="b")
    assert winner_line([a, b]) == (
        "winner: measured a (10.000 ms vs 10.000 ms), predicted a (20.000 ms vs 20.000 ms): match"
    )


def test_summary_goes_on_past_a_source_that_was_not_run(frame):
    frame["predicted_s"] = np.nan
    s = validation_summary(frame)
    assert list(s["source"]) == ["measured", "simulated"]


def test_texts_print_small_seconds_in_lower_case_exponent_form():
    df = _one_collective("p2p", 4, (1.23456e-7, 2e-7, 3e-7), (0.62, 1.43))
    assert collective_text(df).splitlines()[1].split()[3:6] == ["1.235e-07", "2e-07", "3e-07"]
    terms = df.drop(columns=["op", "collective", "size_bytes"]).assign(term="decode")
    line = terms_text(term_summary(terms), {}).splitlines()[2].split()
    assert line == [
        "decode",
        "1.235e-07",
        "2e-07",
        "+62.0%",
        "+62.0%",
        "3e-07",
        "+143.0%",
        "+143.0%",
    ]


def test_term_summary_keeps_the_frame_s_order_of_terms():
    df = _terms()
    df["term"] = df["term"].map({"compute": "step", "exchange": "exchange"})
    assert list(term_summary(df)["term"]) == ["step", "exchange"]


def test_the_measured_row_is_exact_even_where_a_step_was_not_measured(frame):
    frame.loc[2, "measured_s"] = np.nan
    s = validation_summary(frame).set_index("source")
    assert s.loc["measured", "within_25pct"] == 1.0
    assert s.loc["measured", "median_abs_rel_error"] == 0.0
    assert s.loc["predicted", "within_25pct"] == 0.75  # the unmeasured step is not within
