"""Plot functions draw on the Axes they are given, with labelled axes and legends."""

from __future__ import annotations

import pandas as pd
import pytest
from matplotlib.figure import Figure
from report_data import build_payloads

from vgcsim.reports import plots, tables

LABELS = {"var2": "variance α=2", "strom": "strom τ=0.01", "qsgd": "qsgd s=4"}


def _check(ax, xlabel: str):
    assert xlabel in ax.get_xlabel()
    assert ax.get_ylabel()
    assert ax.get_title()
    return ax


def test_speedup_one_line_per_interconnect(results):
    wi = tables.what_if(results, LABELS)
    ax = Figure().subplots()
    out = plots.speedup_vs_world_size(wi[wi.trace == "var2"], ax)
    assert out is ax
    _check(ax, "workers P")
    labels = [line.get_label() for line in ax.get_lines()]
    assert {"1GbE", "10GbE", "IB-EDR"} <= set(labels)
    assert ax.get_xscale() == "log"
    assert ax.get_yscale() == "linear"  # 0.9× … 2×: a narrow span stays linear
    assert "simulated" in ax.get_title()


def test_speedup_log_scale_when_span_is_wide(results):
    wi = tables.what_if(results, LABELS)
    qsgd = wi[(wi.trace == "qsgd") & (wi.source == "simulated")]
    assert qsgd.speedup.max() / qsgd.speedup.min() > 10
    ax = plots.speedup_vs_world_size(qsgd)
    assert ax.get_yscale() == "log"


def test_breakdown_shares_sum_to_100_with_step_times_written(results):
    b = tables.breakdown(results, LABELS)
    one = b[(b.trace == "var2") & (b.cluster == "1GbE") & (b.source == "simulated")]
    ax = plots.step_breakdown(one)
    _check(ax, "workers P")
    assert "%" in ax.get_ylabel()
    # 9 world sizes × 2 methods × 4 parts; each bar's parts add up to 100 %
    assert len(ax.patches) == 9 * 2 * 4
    tops = {}
    for patch in ax.patches:
        key = round(patch.get_x(), 6)
        tops[key] = tops.get(key, 0.0) + patch.get_height()
    assert len(tops) == 18
    assert all(abs(v - 100) < 1e-9 for v in tops.values())
    written = sorted(float(t.get_text()) for t in ax.texts)
    expected = sorted(float(f"{v * 1e3:.3g}") if v < 0.1 else round(v * 1e3) for v in one.step_s)
    assert written == expected


def test_breakdown_labels_step_times_from_100_ms_in_whole_ms():
    rows = [
        {"trace": "t", "cluster": "c", "source": "predicted", "world_size": p, "method": m,
         "method_label": "v" if m == "compressed" else "dense", "step_s": s, "compute_s": s}
        for p, m, s in ((2, "dense", 1.4321), (2, "compressed", 0.09876), (4, "dense", 0.1004),
                        (4, "compressed", 0.0123456))
    ]  # fmt: skip
    ax = plots.step_breakdown(pd.DataFrame(rows))
    assert sorted(t.get_text() for t in ax.texts) == ["100", "12.3", "1432", "98.8"]


def test_crossover_map_marks_links_without_solution(results):
    c = tables.crossover(results, LABELS)
    ax = plots.crossover_map(c[c.trace == "var2"], achieved={"variance α=2": 400.0})
    _check(ax, "workers P")
    labels = [line.get_label() for line in ax.get_lines()]
    assert "IB-EDR: no ratio suffices at any P (▲ on the top edge)" in labels
    assert any(t.get_text().strip() == "achieved by variance α=2: 400.0×" for t in ax.texts)


def test_crossover_map_draws_infinite_points_on_the_top_edge(results):
    # r* = ∞ on IB-EDR at every P: the points are shown (one per P > 1), not dropped
    c = tables.crossover(results, LABELS)
    one = c[(c.trace == "var2") & (c.source == "simulated")]
    ax = plots.crossover_map(one)
    inf = [ln for ln in ax.get_lines() if ln.get_label().startswith("IB-EDR: no ratio")]
    assert len(inf) == 1
    assert list(inf[0].get_xdata()) == [2, 4, 8, 16, 32, 64, 128, 256]
    assert set(inf[0].get_ydata()) == {1.0}  # axes coordinates: the top edge
    assert not inf[0].get_clip_on()


def test_crossover_map_uses_each_methods_own_curve_and_ratio(results):
    # the curve of a method comes from its own overheads and its own achieved ratio: QSGD
    # (4 ms codec, no variance) needs a different ratio than variance (5 ms overhead)
    c = tables.crossover(results, LABELS)
    sim = c[c.source == "simulated"]
    ax_q = plots.crossover_map(sim[sim.trace == "qsgd"])
    ax_v = plots.crossover_map(sim[sim.trace == "var2"])
    q = {ln.get_label(): ln for ln in ax_q.get_lines()}
    v = {ln.get_label(): ln for ln in ax_v.get_lines()}
    expected_q = sim[(sim.trace == "qsgd") & (sim.cluster == "1GbE") & (sim.world_size > 1)]
    assert list(q["1GbE"].get_ydata()) == pytest.approx(list(expected_q.required_ratio))
    assert list(q["1GbE"].get_ydata()) != pytest.approx(list(v["1GbE"].get_ydata()))
    assert [t.get_text().strip() for t in ax_q.texts] == ["achieved by qsgd s=4: 8.0×"]
    assert "qsgd s=4" in ax_q.get_title()


def test_time_to_accuracy_plot_marks_methods_that_miss(results):
    ev = {
        "var2": pd.DataFrame({"step": [9, 19], "test_acc": [0.80, 0.91]}),
        "qsgd": pd.DataFrame({"step": [9, 19], "test_acc": [0.70, 0.85]}),
        "d": pd.DataFrame({"step": [9, 19], "test_acc": [0.90, 0.92]}),
    }
    tta = tables.time_to_accuracy(results, ev, 0.9, dense_trace="d", labels=LABELS)
    one = tta[tta.cluster == "10GbE"]
    ax = plots.time_to_accuracy(one)
    _check(ax, "workers P")
    assert ax.get_yscale() == "log"
    assert "90.0 %" in ax.get_title()
    lines = {ln.get_label(): ln for ln in ax.get_lines()}
    sim = one[(one.source == "simulated") & (one.trace == "var2") & (one.world_size > 1)]
    assert list(lines["variance α=2"].get_ydata()) == pytest.approx(
        list(20 * sim.compressed_step_s)
    )
    assert list(lines["dense allreduce"].get_ydata()) == pytest.approx(list(10 * sim.dense_step_s))
    missed = lines["qsgd s=4: never reaches it (✕ at top; 85.0 % after 20 steps)"]
    assert len(missed.get_xdata()) == 8 and set(missed.get_ydata()) == {1.0}


def test_density_heatmap_has_colorbar():
    p = build_payloads(steps=5, layers=(10, 100, 1000), density=0.05)
    ax = plots.density_heatmap(tables.layer_density(p), layer_names=["a", "b", "c"])
    _check(ax, "step")
    assert len(ax.figure.axes) == 2  # the heatmap and its colorbar
    assert [t.get_text() for t in ax.get_yticklabels()] == ["a", "b", "c"]


def test_trace_validation_plots():
    p = build_payloads(steps=5)
    r = tables.compression_over_steps(p, "packed32")
    r.insert(0, "label", "variance α=2")
    ax = plots.compression_ratio_over_steps(r)
    _check(ax, "step")
    ev = pd.DataFrame({"step": [0, 4], "test_acc": [0.5, 0.9], "train_acc": [0.5, 0.95]})
    curves = tables.accuracy_curves({"dense": ev, "variance α=2": ev.assign(test_acc=[0.5, 0.8])})
    ax = plots.accuracy_over_steps(curves)
    _check(ax, "step")
    assert "%" in ax.get_ylabel()
    assert ax.get_lines()[0].get_ydata()[-1] == pytest.approx(90.0)


def test_the_dense_run_is_black_in_both_trace_panels_under_its_own_label():
    dense, var = "dense on recorded small_cnn", "variance α=2 on recorded small_cnn"
    p = build_payloads(steps=5)
    r = tables.compression_over_steps(p, "packed32")
    ratios = pd.concat([r.assign(label=dense), r.assign(label=var)], ignore_index=True)
    ax = plots.compression_ratio_over_steps(ratios, dense=dense, legend=False)
    colors = {line.get_label(): line.get_color() for line in ax.get_lines()}
    assert colors[dense] == "black" and colors[var] != "black"
    assert ax.get_legend() is None
    assert plots.compression_ratio_over_steps(ratios, dense=dense).get_legend() is not None
    ev = pd.DataFrame({"step": [0, 4], "test_acc": [0.5, 0.9], "train_acc": [0.5, 0.95]})
    ax = plots.accuracy_over_steps(tables.accuracy_curves({var: ev, dense: ev}), dense=dense)
    lines = {line.get_label(): line for line in ax.get_lines()}
    assert lines[dense].get_color() == "black" and lines[dense].get_linewidth() == 2.5
    assert lines[var].get_color() == colors[var]  # the same colour as in the left panel


def test_simulated_vs_predicted_log_log(results):
    ax = plots.simulated_vs_predicted(tables.agreement(results))
    _check(ax, "predicted")
    assert ax.get_xscale() == ax.get_yscale() == "log"
    assert len(ax.collections) >= 6  # 3 clusters × 2 methods (+ the ±10 % band)
