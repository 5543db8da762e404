"""The calibration fit as a view: points for measurements, lines for the fit, one colour per op,
and the aligned text table ``vgcsim calibrate`` prints."""

from __future__ import annotations

from matplotlib.figure import Figure

from vgcsim.reports.calibration import fit_table_text, plot_fit

TABLE = [
    {"op": "p2p", "size_bytes": 4096, "measured_s": 3e-4, "fitted_s": 2.5e-4, "rel_error": -1 / 6},
    {"op": "p2p", "size_bytes": 64, "measured_s": 1e-4, "fitted_s": 1e-4, "rel_error": 0.0},
    {
        "op": "allreduce",
        "size_bytes": 64,
        "measured_s": 2e-4,
        "fitted_s": 3e-4,
        "rel_error": 0.5,
        "role": "gamma",
    },
]


def test_plot_draws_points_and_a_line_per_op_sorted_by_size():
    ax = plot_fit(TABLE)
    lines = ax.get_lines()
    assert len(lines) == 4  # measured points and fitted line for each of the two ops
    p2p_points, p2p_fit, ar_points, _ = lines
    assert list(p2p_points.get_xdata()) == [64, 4096]
    assert list(p2p_points.get_ydata()) == [1e-4, 3e-4]
    assert list(p2p_fit.get_ydata()) == [1e-4, 2.5e-4]
    assert p2p_points.get_linestyle() == "None" and p2p_fit.get_linestyle() == "-"
    assert p2p_points.get_color() == p2p_fit.get_color() != ar_points.get_color()
    assert ax.get_xscale() == "log" and ax.get_yscale() == "log"
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["p2p", "allreduce"]


def test_plot_draws_on_the_axes_it_is_given():
    ax = Figure().subplots()
    assert plot_fit(TABLE, ax) is ax


def test_table_text_has_one_aligned_line_per_row():
    lines = fit_table_text(TABLE).splitlines()
    assert len(lines) == 1 + len(TABLE)
    assert lines[0].split() == ["op", "size_bytes", "measured_s", "fitted_s", "rel_error", "role"]
    assert lines[1].split() == ["p2p", "4096", "0.0003", "0.00025", "-16.7%"]
    assert lines[3].split() == ["allreduce", "64", "0.0002", "0.0003", "+50.0%", "gamma"]
    assert len({len(line.rstrip()) for line in lines[1:3]}) == 1  # columns aligned
