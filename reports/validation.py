"""Validation of a measured run as report pieces: the summary table, the plot and the
printed text of ``vgcsim validate``.

The per-step frame (measured, predicted and simulated communication seconds and their
relative errors) and the per-collective frame of a calibration measurement file are built
at the front door, which joins the models and the simulator with the measurement; this
module turns them into a table (frame in, frame out), a plot (Axes in, Axes out) and text.
"""

from __future__ import annotations

import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure

#: The modelled sources compared with the measurement.
SOURCES = ("predicted", "simulated")

__all__ = [
    "SOURCES",
    "collective_text",
    "plot_validation",
    "steps_text",
    "validation_summary",
]


def validation_summary(df: pd.DataFrame) -> pd.DataFrame:
    """Aggregate rows, one per source: total and mean seconds over steps, the error of the
    mean, the median and 90th-percentile absolute per-step error, and how often the model
    is within 25 % of the measurement."""
    rows = []
    measured = df["measured_s"]
    for src in ("measured", *SOURCES):
        col = df[f"{src}_s"]
        if col.isna().all():
            continue
        row = {"source": src, "total_s": float(col.sum()), "mean_s": float(col.mean())}
        if src == "measured":
            row.update(
                mean_rel_error=0.0,
                median_abs_rel_error=0.0,
                p90_abs_rel_error=0.0,
                within_25pct=1.0,
            )
        else:
            err = (col - measured).abs() / measured
            row.update(
                mean_rel_error=float((col.mean() - measured.mean()) / measured.mean()),
                median_abs_rel_error=float(err.median()),
                p90_abs_rel_error=float(err.quantile(0.9)),
                within_25pct=float((err <= 0.25).mean()),
            )
        rows.append(row)
    return pd.DataFrame(rows)


def plot_validation(df: pd.DataFrame, ax: Axes | None = None) -> Axes:
    """Measured, predicted and simulated communication seconds per step on one Axes (a
    missing Axes is made on a fresh Figure; pyplot's global state is never touched)."""
    if ax is None:
        ax = Figure(figsize=(7, 3.5), layout="constrained").subplots()
    ax.plot(df["step"], df["measured_s"] * 1e3, "o-", ms=3, lw=1, label="measured", color="k")
    styles = {"predicted": ("--", "", "tab:blue"), "simulated": (":", "x", "tab:orange")}
    for src, (ls, marker, color) in styles.items():
        if not df[f"{src}_s"].isna().all():
            ax.plot(
                df["step"],
                df[f"{src}_s"] * 1e3,
                ls=ls,
                marker=marker,
                ms=4,
                lw=1.5,
                label=src,
                color=color,
            )
    ax.set_xlabel("step")
    ax.set_ylabel("communication per step (ms)")
    title = df.attrs.get("collective", "")
    if title:
        ax.set_title(
            f"{df.attrs.get('trace', '')}: {title}, P={df.attrs.get('world_size')} "
            f"on {df.attrs.get('cluster', '')}",
            fontsize=9,
        )
    ax.set_ylim(bottom=0)
    ax.legend(fontsize=8)
    return ax


def steps_text(df: pd.DataFrame, summary: pd.DataFrame, show_steps: int) -> str:
    """What ``vgcsim validate RUN`` prints: the summary and the first ``show_steps`` steps."""
    with pd.option_context("display.width", 120, "display.max_columns", 20):
        text = summary.to_string(index=False, float_format=lambda v: f"{v:.4g}")
        if show_steps > 0:
            cols = ["step", "measured_s", "predicted_s", "simulated_s", "payload_bytes_max"]
            rows = df[cols].head(show_steps)
            text += "\n\n" + rows.to_string(index=False, float_format=lambda v: f"{v:.4g}")
    return text


def collective_text(df: pd.DataFrame) -> str:
    """What ``vgcsim validate FILE.measurements.json`` prints: one row per (op, size)."""
    cols = ["op", "collective", "size_bytes", "measured_s", "predicted_s", "simulated_s"]
    cols += [f"{src}_rel_error" for src in SOURCES]
    seconds = ("measured_s", "predicted_s", "simulated_s")
    with pd.option_context("display.width", 140, "display.max_columns", 20):
        return df[cols].to_string(
            index=False,
            formatters={
                **{c: "{:.4g}".format for c in seconds},
                **{f"{src}_rel_error": "{:+.1%}".format for src in SOURCES},
            },
        )
