"""Report plots: each function draws one view of a table frame on a Matplotlib Axes.

Every function takes the frame produced by the matching :mod:`vgcsim.reports.tables` function
and an optional Axes, draws on it and returns it; none of them saves, shows or touches
pyplot's global state (a missing Axes is created on a fresh ``Figure``). Rendering to
files lives in :mod:`vgcsim.reports.render`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.colors import LogNorm
from matplotlib.figure import Figure
from matplotlib.ticker import FixedLocator, FuncFormatter, LogLocator, MaxNLocator, NullLocator
from matplotlib.transforms import offset_copy

from vgcsim.reports.tables import is_baseline, prefer_simulated

#: Stacking order and colours of the step-time parts.
PARTS = (
    ("compute_s", "compute (forward + backward)", "#4c72b0"),
    ("optimizer_s", "optimizer step", "#8c8c8c"),
    ("variance_s", "variance estimate", "#dd8452"),
    ("codec_s", "compress + encode", "#937860"),
    ("comm_s", "communication", "#c44e52"),
    ("decode_s", "decode + accumulate", "#da8bc3"),
)
_COLORS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf")
_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")


def _axes(ax: Axes | None, figsize: tuple[float, float] = (7.0, 4.5)) -> Axes:
    if ax is not None:
        return ax
    return Figure(figsize=figsize, layout="constrained").subplots()


def _world_size_axis(ax: Axes, sizes: Sequence[int]) -> None:
    """Log2 x axis labelled with the world sizes themselves (1, 2, 4, … 256)."""
    sizes = sorted({int(s) for s in sizes})
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_locator(FixedLocator(sizes))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.xaxis.set_minor_locator(NullLocator())
    if sizes:  # explicit: markers drawn on the top edge do not widen the data limits
        ax.set_xlim(sizes[0] / 1.25, sizes[-1] * 1.25)
    ax.set_xlabel("workers P (log scale)")


def _edge_transform(ax: Axes, row: int):
    """x in data, y above the top edge of the axes: marker row ``row`` (9 pt per row).

    Points without a value (no ratio suffices, target never reached) are drawn there, one
    row per series so that two series at the same P do not hide each other.
    """
    return offset_copy(ax.get_xaxis_transform(), fig=ax.figure, y=6.0 + 9.0 * row, units="points")


def _edge_markers(ax: Axes, x: pd.Series, row: int, marker: str, color: object, label: str) -> None:
    """Markers at ``x`` on marker row ``row`` above the top edge (see :func:`_edge_transform`)."""
    ax.plot(
        x,
        np.ones(len(x)),
        transform=_edge_transform(ax, row),
        linestyle="none",
        marker=marker,
        markersize=8,
        color=color,
        clip_on=False,
        label=label,
    )


def _ratio_formatter(v: float, _: object) -> str:
    return f"{v:g}×"


def _ratio_axis(ax: Axes, values: pd.Series) -> str:
    """Log y axis for ratios spanning more than a decade, linear otherwise; "×" tick labels."""
    v = values.to_numpy(dtype=float)
    v = v[np.isfinite(v) & (v > 0)]
    wide = v.size > 0 and v.max() / v.min() > 10
    if wide:
        ax.set_yscale("log")
        # Enough labelled ticks that the top and bottom of a curve can be read off: 1-2-3-5
        # per decade over up to two decades, 1-2-5 up to three, powers of ten beyond.
        span = v.max() / v.min()
        if span < 100:
            ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 3.0, 5.0)))
        elif span < 1000:
            ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
        ax.yaxis.set_minor_formatter(FuncFormatter(lambda _v, _: ""))
    ax.yaxis.set_major_formatter(FuncFormatter(_ratio_formatter))
    return ", log scale" if wide else ""


def _prefer_source(df: pd.DataFrame, source: str | None) -> pd.DataFrame:
    """Rows of ``source``; without one, each (cluster, trace)'s simulated rows where it
    has any, else its predicted ones (a predicted-only input is drawn, not dropped)."""
    if source is not None:
        return df[df["source"] == source]
    return prefer_simulated(df)


def _style(keys: Sequence[str]) -> dict[str, tuple[str, str]]:
    return {k: (_COLORS[i % len(_COLORS)], _MARKERS[i % len(_MARKERS)]) for i, k in enumerate(keys)}


def speedup_vs_world_size(
    what_if: pd.DataFrame,
    ax: Axes | None = None,
    *,
    source: str | None = None,
    scale_values: pd.Series | None = None,
) -> Axes:
    """Speedup of compressed allgatherv over dense allreduce vs P, one line per interconnect.

    ``what_if`` is a :func:`vgcsim.reports.tables.what_if` frame; several method labels are drawn
    with different line styles. Rows of a 2-byte dense allreduce (trace ``dense-<enc>``)
    are baselines: thin dotted lines in their interconnect's colour, "(baseline)" in the
    legend. Each interconnect's legend entry names its source (predicted or simulated)
    when the panel mixes them. Above the dashed line at 1× compression is faster.
    ``scale_values``: the speedups that choose a log or linear y axis (default: those
    drawn), so that panels sharing a y axis choose alike.
    """
    ax = _axes(ax)
    t = _prefer_source(what_if, source)
    if (t["world_size"] > 1).any():
        t = t[t["world_size"] > 1]  # a single worker communicates nothing
    base = t["trace"].map(is_baseline).astype(bool) if "trace" in t else pd.Series(False, t.index)
    clusters = list(dict.fromkeys(t["cluster"]))
    labels = list(dict.fromkeys(t.loc[~base, "method_label"]))
    base_labels = list(dict.fromkeys(t.loc[base, "method_label"]))
    mixed = t["source"].nunique() > 1
    styles = _style(clusters)
    dashes = ("-", "--", ":", "-.")
    series = [(label, False) for label in labels] + [(label, True) for label in base_labels]
    for li, (label, baseline) in enumerate(series):
        for cluster in clusters:
            g = t[(t["cluster"] == cluster) & (t["method_label"] == label) & (base == baseline)]
            g = g.sort_values("world_size")
            if g.empty:
                continue
            color, marker = styles[cluster]
            where = f"{cluster} ({g['source'].iloc[0]})" if mixed else cluster
            if baseline:
                name = f"{where}, {label} (baseline)"
            else:
                name = where if len(labels) == 1 else f"{where}, {label}"
            ax.plot(
                g["world_size"],
                g["speedup"],
                marker=None if baseline else marker,
                color=color,
                linestyle=":" if baseline else dashes[li % len(dashes)],
                linewidth=1.0 if baseline else 1.5,
                alpha=0.7 if baseline else 1.0,
                label=name,
            )
    ax.axhline(1.0, color="black", linewidth=1, linestyle="--", label="break-even (dense = 1×)")
    scale = _ratio_axis(ax, t["speedup"] if scale_values is None else scale_values)
    _world_size_axis(ax, t["world_size"])
    ax.set_ylabel(f"speedup over dense fp32 allreduce (×{scale})")
    src = ", ".join(sorted(set(t["source"])))
    if not labels and base_labels:  # baselines alone
        ax.set_title(f"{base_labels[0]} allreduce vs dense fp32 ({src})", fontsize="medium")
    else:  # the y label says what is compared: the title names the method
        what = labels[0] if len(labels) == 1 else "compressed allgatherv"
        ax.set_title(f"{what} ({src})", fontsize="medium")
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(title="interconnect", fontsize="small")
    return ax


def step_breakdown(
    breakdown: pd.DataFrame, ax: Axes | None = None, *, source: str | None = None
) -> Axes:
    """Share of each step-time part per P: dense (hatched, left) beside compressed (right).

    ``breakdown`` is a :func:`vgcsim.reports.tables.breakdown` frame for one cluster and one
    trace (the caller filters). Bars are normalised to 100 % of the parts' sum, because
    step times span orders of magnitude over P; the absolute step time (ms) is written
    above each bar.
    """
    ax = _axes(ax, (8.0, 4.5))
    t = _prefer_source(breakdown, source)
    sizes = sorted(set(int(p) for p in t["world_size"]))
    x = np.arange(len(sizes), dtype=float)
    width = 0.4
    # parts a result table does not charge (all zero or missing) stay out of the legend
    parts_shown = [
        part for part in PARTS if part[0] in t and t[part[0]].fillna(0.0).to_numpy().any()
    ]
    cols = [c for c, _, _ in parts_shown]
    for offset, method, hatch in ((-width / 2, "dense", "//"), (width / 2, "compressed", "")):
        g = t[t["method"] == method].set_index("world_size").reindex(sizes)
        parts = g[cols].fillna(0.0).to_numpy(dtype=float)
        total = parts.sum(axis=1)
        share = np.divide(
            parts * 100, total[:, None], out=np.zeros_like(parts), where=total[:, None] > 0
        )
        bottom = np.zeros(len(sizes))
        for k, (_, name, color) in enumerate(parts_shown):
            ax.bar(
                x + offset,
                share[:, k],
                width,
                bottom=bottom,
                color=color,
                hatch=hatch,
                edgecolor="white" if hatch else color,
                linewidth=0.5,
                label=name if method == "compressed" else None,
            )
            bottom += share[:, k]
        for xi, step_s in zip(x + offset, g["step_s"].to_numpy(dtype=float), strict=True):
            if np.isfinite(step_s):
                ax.text(
                    xi,
                    101,
                    _ms_label(step_s),
                    ha="center",
                    va="bottom",
                    fontsize="x-small",
                    rotation=90,
                )
    ax.set_ylim(0, 125)
    ax.set_yticks([0, 25, 50, 75, 100])
    ax.set_xticks(x, [str(p) for p in sizes])
    ax.set_xlabel("workers P  (left, hatched: dense allreduce · right: compressed)")
    ax.set_ylabel("share of step time (%)")
    cluster = ", ".join(dict.fromkeys(t["cluster"]))
    label = ", ".join(dict.fromkeys(t.loc[t["method"] == "compressed", "method_label"]))
    ax.set_title(f"{cluster}: dense vs {label}\n(numbers above bars: step time in ms)")
    ax.legend(fontsize="small", loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=2)
    ax.grid(True, axis="y", alpha=0.3)
    return ax


def crossover_map(
    crossover: pd.DataFrame,
    ax: Axes | None = None,
    *,
    source: str | None = None,
    achieved: Mapping[str, float] | None = None,
) -> Axes:
    """Compression ratio needed to beat dense allreduce vs P, one line per interconnect.

    ``crossover`` is a :func:`vgcsim.reports.tables.crossover` frame for one method (one trace):
    every curve uses that method's own overheads (compute, variance, codec). The ratio the
    method achieves is drawn as a labelled dashed horizontal line (the median of the
    frame's ``achieved_ratio``; ``achieved`` maps labels to ratios to draw instead): the
    method wins on a link wherever its line lies above that link's curve. Points where no
    ratio suffices (the overhead alone exceeds the dense step, r* = ∞) are drawn as
    triangles on the top edge of the axes, with a note in the legend.
    """
    ax = _axes(ax)
    t = _prefer_source(crossover, source)
    t = t[t["world_size"] > 1]  # a single worker communicates nothing
    clusters = list(dict.fromkeys(t["cluster"]))
    styles = _style(clusters)
    finite_all = t.loc[np.isfinite(t["required_ratio"].astype(float)), "required_ratio"]
    if achieved is None:
        achieved = {
            label: float(g["achieved_ratio"].median())
            for label, g in t.groupby("method_label", sort=False)
        }
    lines = {k: v for k, v in achieved.items() if v and math.isfinite(v)}
    values = [*finite_all.astype(float), *lines.values()]
    lo = min(values) / 2 if values else 1.0
    hi = max(values) * 3 if values else 10.0
    rows = 0  # marker rows used on the top edge
    for cluster in clusters:
        g = t[t["cluster"] == cluster].sort_values("world_size")
        req = g["required_ratio"].astype(float)
        fin, inf = g[np.isfinite(req)], g[~np.isfinite(req)]
        color, marker = styles[cluster]
        if len(fin):
            ax.plot(
                fin["world_size"], fin["required_ratio"], marker=marker, color=color, label=cluster
            )
        if len(inf):
            where = ", ".join(str(int(p)) for p in inf["world_size"])
            at = "at any P" if fin.empty else f"at P = {where}"
            note = f"no ratio suffices {at} (▲ on the top edge)"
            _edge_markers(ax, inf["world_size"], rows, "^", color, f"{cluster}: {note}")
            rows += 1
    for label, ratio in lines.items():
        ax.axhline(ratio, color="0.35", linestyle="--", linewidth=1.0)
        ax.text(
            0.01,
            ratio,
            f" achieved by {label}: {ratio:,.1f}×",
            transform=ax.get_yaxis_transform(),
            ha="left",
            va="bottom",
            fontsize="x-small",
            color="0.2",
        )
    ax.set_yscale("log")
    ax.set_ylim(lo, hi)
    if hi / lo < 1000:  # label enough ticks to read a curve off (1-2-5 per decade)
        ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
        ax.yaxis.set_minor_formatter(FuncFormatter(lambda _v, _: ""))
    ax.yaxis.set_major_formatter(FuncFormatter(_ratio_formatter))
    if len(t):
        _world_size_axis(ax, t["world_size"])
    ax.set_ylabel("compression ratio needed (×, log scale)")
    label = ", ".join(dict.fromkeys(t["method_label"]))
    ax.set_title(
        f"Ratio needed to beat dense allreduce\n(with {label}'s own overheads)",
        pad=12 + 9 * rows,
    )
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(fontsize="x-small", title="interconnect", title_fontsize="small")
    return ax


def time_to_accuracy(
    tta: pd.DataFrame, ax: Axes | None = None, *, source: str | None = None
) -> Axes:
    """Time to the target test accuracy vs P, dense (black) and each method, one cluster.

    ``tta`` is a :func:`vgcsim.reports.tables.time_to_accuracy` frame for one interconnect (the
    caller filters). Dense is the median over the rows' dense times (identical when the
    traces share the model and compute is modelled). A method that never reaches the
    target within its recorded steps is drawn as crosses on the top edge of the axes and
    named so in the legend, never dropped.
    """
    ax = _axes(ax)
    t = _prefer_source(tta, source)
    if (t["world_size"] > 1).any():
        t = t[t["world_size"] > 1]
    labels = list(dict.fromkeys(t["method_label"]))
    styles = _style(labels)
    target = float(t["target_acc"].iloc[0]) * 100 if len(t) else math.nan
    rows = 0  # marker rows used on the top edge
    dense = t.groupby("world_size")["dense_time_to_target_s"].median().dropna()
    if len(dense):
        ax.plot(
            dense.index, dense.to_numpy(), color="black", linewidth=2.5, label="dense allreduce"
        )
    elif len(t):
        missing = t["dense_steps_to_target"].isna().all() and t["dense_step_s"].notna().any()
        ax.plot(
            [],
            [],
            color="black",
            linewidth=2.5,
            label="dense: no curve reaching the target" if missing else "dense: no data",
        )
    for label in labels:
        g = t[t["method_label"] == label].sort_values("world_size")
        color, marker = styles[label]
        reached = g[g["reached"].astype(bool)]
        if len(reached):
            ax.plot(
                reached["world_size"],
                reached["compressed_time_to_target_s"],
                color=color,
                marker=marker,
                label=label,
            )
        missed = g[~g["reached"].astype(bool)]
        if len(missed):
            acc = float(missed["compressed_final_test_acc"].iloc[0]) * 100
            n = int(missed["compressed_steps_recorded"].iloc[0])
            note = f"never reaches it (✕ at top; {acc:.1f} % after {n} steps)"
            _edge_markers(ax, missed["world_size"], rows, "X", color, f"{label}: {note}")
            rows += 1
    ax.set_yscale("log")
    ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.yaxis.set_minor_formatter(FuncFormatter(lambda _v, _: ""))
    if len(t):
        _world_size_axis(ax, t["world_size"])
    ax.set_ylabel("time to target accuracy (s, log scale)")
    cluster = ", ".join(dict.fromkeys(t["cluster"]))
    src = ", ".join(sorted(set(t["source"])))
    # room above the axes for the markers of methods that miss the target
    ax.set_title(f"{cluster}: time to {target:.1f} % test accuracy ({src})", pad=12 + 9 * rows)
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(fontsize="x-small")
    return ax


def density_heatmap(
    density: pd.DataFrame,
    ax: Axes | None = None,
    *,
    layer_names: Sequence[str] | None = None,
    title: str = "",
) -> Axes:
    """Per-layer density over steps as a heatmap (log colour scale).

    ``density`` is a :func:`vgcsim.reports.tables.layer_density` frame (index step, columns layer).
    Density 0 (nothing sent) shows in the lowest colour.
    """
    ax = _axes(ax, (8.0, 4.0))
    values = density.to_numpy(dtype=float).T  # layers x steps
    positive = values[values > 0]
    vmin = float(positive.min()) if positive.size else 1e-6
    vmax = max(float(values.max()) if values.size else 1.0, vmin * 10)
    shown = np.where(values > 0, values, vmin)
    steps = density.index.to_numpy()
    extent = (
        float(steps.min()) - 0.5 if len(steps) else 0,
        float(steps.max()) + 0.5 if len(steps) else 1,
        len(density.columns) - 0.5,
        -0.5,
    )
    im = ax.imshow(
        shown,
        aspect="auto",
        interpolation="nearest",
        norm=LogNorm(vmin=vmin, vmax=min(vmax, 1.0) if vmin < 1 else vmax),
        cmap="viridis",
        extent=extent,
    )
    ax.figure.colorbar(im, ax=ax, label="density (elements sent / layer size, log)")
    ax.set_xlabel("training step")
    ax.set_ylabel("layer (parameter tensor)")
    n = len(density.columns)
    if layer_names is not None and n <= 24:
        ax.set_yticks(range(n), list(layer_names)[:n], fontsize="x-small")
    ax.set_title(title or "Per-layer density over steps")
    return ax


def _ms_label(step_s: float) -> str:
    """A step time in ms for a bar's label: three significant digits, whole ms from 100 ms
    (1430, not 1.43e+03)."""
    ms = step_s * 1e3
    return f"{ms:.0f}" if ms >= 100 else f"{ms:.3g}"


def compression_ratio_over_steps(
    ratios: pd.DataFrame, ax: Axes | None = None, *, dense: str = "dense", legend: bool = True
) -> Axes:
    """Compression ratio per step, one line per trace (log scale); the trace labelled
    ``dense`` drawn black.

    ``ratios`` is a long frame with columns label, step, compression_ratio (the
    concatenation of :func:`vgcsim.reports.tables.compression_over_steps` frames). Without
    ``legend`` the lines are named only by their colours (a panel beside this one, such as
    :func:`accuracy_over_steps` given the same labels, holds the legend).
    """
    ax = _axes(ax)
    labels = list(dict.fromkeys(ratios["label"]))
    styles = _style([x for x in labels if x != dense])
    for label in labels:
        g = ratios[ratios["label"] == label].sort_values("step")
        color = "black" if label == dense else styles[label][0]
        ax.plot(g["step"], g["compression_ratio"], color=color, label=label)
    scale = _ratio_axis(ax, ratios["compression_ratio"])
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("training step")
    ax.set_ylabel(f"compression ratio (fp32 bits / bits sent{scale})")
    ax.set_title("Compression ratio over training")
    ax.grid(True, which="major", alpha=0.3)
    if legend:
        ax.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return ax


def accuracy_over_steps(
    curves: pd.DataFrame, ax: Axes | None = None, *, dense: str = "dense"
) -> Axes:
    """Test accuracy over steps per trace; the trace labelled ``dense`` drawn thick and black.

    ``curves`` is a :func:`vgcsim.reports.tables.accuracy_curves` frame.
    """
    ax = _axes(ax)
    labels = list(dict.fromkeys(curves["label"]))
    styles = _style([x for x in labels if x != dense])
    for label in labels:
        g = curves[curves["label"] == label].sort_values("step")
        if label == dense:
            ax.plot(g["step"], g["test_acc"] * 100, color="black", linewidth=2.5, label=label)
        else:
            color, marker = styles[label]
            ax.plot(g["step"], g["test_acc"] * 100, color=color, marker=marker, label=label)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("training step")
    ax.set_ylabel("test accuracy (%)")
    ax.set_title("Accuracy vs the dense run")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize="small")
    return ax


def simulated_vs_predicted(agreement: pd.DataFrame, ax: Axes | None = None) -> Axes:
    """Simulated vs predicted mean step time, one colour per cluster (log-log).

    ``agreement`` is a :func:`vgcsim.reports.tables.agreement` frame. Points on the diagonal
    agree; the grey band is ±10 %.
    """
    ax = _axes(ax, (5.5, 5.0))
    clusters = list(dict.fromkeys(agreement["cluster"]))
    styles = _style(clusters)
    for cluster in clusters:
        g = agreement[agreement["cluster"] == cluster]
        color, _ = styles[cluster]
        for method, marker in (("dense", "o"), ("compressed", "x")):
            h = g[g["method"] == method]
            if h.empty:
                continue
            ax.scatter(
                h["predicted_step_s"] * 1e3,
                h["simulated_step_s"] * 1e3,
                color=color,
                marker=marker,
                label=f"{cluster}, {method}",
                zorder=3,
            )
    vals = agreement[["predicted_step_s", "simulated_step_s"]].to_numpy(dtype=float).ravel() * 1e3
    vals = vals[np.isfinite(vals) & (vals > 0)]
    if vals.size:
        lo, hi = vals.min() / 1.5, vals.max() * 1.5
        line = np.geomspace(lo, hi, 50)
        ax.plot(line, line, color="black", linewidth=1, label="simulated = predicted", zorder=2)
        ax.fill_between(line, line * 0.9, line * 1.1, color="0.88", label="±10 %", zorder=1)
        ax.set_xlim(lo, hi)
        ax.set_ylim(lo, hi)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("predicted step time (ms, log)")
    ax.set_ylabel("simulated step time (ms, log)")
    ax.set_title("Simulator vs closed-form model")
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(fontsize="x-small")
    return ax
