"""Validation of a measured run as report pieces: the summary table, the plot and the
printed text of ``vgcsim validate``.

The per-step frame (measured, predicted and simulated communication seconds and their
relative errors) and the per-collective frame of a calibration measurement file are built
at the front door, which joins the models and the simulator with the measurement; this
module turns them into a table (frame in, frame out), a plot (Axes in, Axes out) and text
(``DataFrame.to_string``, which prints every column and row whatever pandas' display options).
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
    title = df.attrs.get("collective")
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
    formatters = {
        **{c: "{:.4g}".format for c in seconds},
        **{f"{src}_rel_error": "{:+.1%}".format for src in SOURCES},
    }
    return df[cols].to_string(index=False, formatters=formatters)


def term_summary(df: pd.DataFrame) -> pd.DataFrame:
    """Per term (in the frame's order) of a per-step term frame
    (``vgcsim.api.term_frame``): the median measured seconds and, per source,
    the median modelled seconds and the median and worst (largest absolute) per-step
    relative error. Steps without a measurement (NaN) are left out."""
    rows = []
    for term, part in df.groupby("term", sort=False):
        row = {"term": term, "measured_s": part["measured_s"].median()}
        for src in SOURCES:
            err = part[f"{src}_rel_error"].dropna()
            row[f"{src}_s"] = part[f"{src}_s"].median()
            row[f"{src}_median_error"] = err.median()  # NaN where no step was measured
            row[f"{src}_worst_error"] = (
                err.iloc[err.abs().to_numpy().argmax()] if len(err) else float("nan")
            )
        rows.append(row)
    return pd.DataFrame(rows)


def terms_text(summary: pd.DataFrame, attrs: dict) -> str:
    """What ``vgcsim validate`` prints for a trace the DDP hook wrote: one row per term."""
    head = (
        f"per term ({attrs.get('compressor')}, {attrs.get('method')}): median seconds over "
        "steps; errors per step (modelled - measured) / measured, median and worst"
    )
    errors = [c for c in summary.columns if c.endswith("_error")]
    formatters = {
        **{c: "{:.4g}".format for c in summary.columns if c.endswith("_s")},
        **{c: "{:+.1%}".format for c in errors},
    }
    return head + "\n" + summary.to_string(index=False, formatters=formatters)


def winner_line(frames: list[pd.DataFrame]) -> str:
    """Which of two runs of the same job is faster, measured and as predicted: the median
    whole-step seconds of each run's own method (term ``step`` of two term frames)."""
    labels, measured, predicted = [], [], []
    for df in frames:
        step = df[df["term"] == "step"]
        labels.append(
            "plain DDP (dense)" if df.attrs.get("method") == "dense" else df.attrs["compressor"]
        )
        measured.append(float(step["measured_s"].median()))
        predicted.append(float(step["predicted_s"].median()))
    m = 0 if measured[0] <= measured[1] else 1
    p = 0 if predicted[0] <= predicted[1] else 1
    verdict = "match" if m == p else "MISMATCH"
    return (
        f"winner: measured {labels[m]} ({measured[m] * 1e3:.3f} ms vs "
        f"{measured[1 - m] * 1e3:.3f} ms), predicted {labels[p]} ({predicted[p] * 1e3:.3f} ms "
        f"vs {predicted[1 - p] * 1e3:.3f} ms): {verdict}"
    )
