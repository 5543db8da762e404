"""Report rendering: the one module that writes report files.

It loads result tables and traces, computes the frames of :mod:`vgcsim.reports.tables`, draws
the views of :mod:`vgcsim.reports.plots`, and writes into one output folder::

    OUT/
      index.html            self-contained page: summary first, plots embedded as PNG
      summary.md            the summary sentences and the what-if table in Markdown
      tables/<name>.csv     every table, full precision
      tables/<name>.md      the same tables formatted for reading
      plots/<name>.png      every plot, and its .svg twin

Nothing is fetched at view time: images are inlined as base64 data URIs and the page
carries its own CSS, so the HTML file can be mailed or archived alone.
"""

from __future__ import annotations

import base64
import html
import io
import json
import logging
import math
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
from vgcsim.reports import tables
from vgcsim.traces.labels import method_label
from vgcsim.traces.schema import HEADER_FILE

from vgcsim.core.errors import ResultsError, TraceError

log = logging.getLogger(__name__)

PNG_DPI = 110


@dataclass(frozen=True)
class ReportInputs:
    """What a report is made of: concatenated result rows and the traces to validate."""

    results: pd.DataFrame
    result_paths: tuple[str, ...] = ()
    traces: tuple[Any, ...] = ()  # vgcsim.traces.io.Trace
    labels: dict[str, str] = field(default_factory=dict)  # trace name -> method label
    #: time-to-accuracy target (test accuracy as a fraction); None: the dense trace's
    #: final test accuracy minus 1 point
    target_accuracy: float | None = None


@dataclass(frozen=True)
class Plot:
    """A drawn figure with its file stem, heading and the caption a reader needs."""

    name: str
    title: str
    caption: str
    figure: Any  # matplotlib.figure.Figure


@dataclass(frozen=True)
class Table:
    """A computed table: raw frame (CSV) and a display frame (Markdown / HTML)."""

    name: str
    title: str
    caption: str
    frame: pd.DataFrame
    display: pd.DataFrame
    collapsed: bool = False


@dataclass(frozen=True)
class Report:
    """Everything a report shows, in page order, before anything is written."""

    summary: list[str]
    tables: list[Table]
    plots: list[Plot]
    sources: list[str]
    notes: list[str] = field(default_factory=list)  # how the inputs were made


# --- loading --------------------------------------------------------------------------


def _label_from_header(header: dict[str, Any]) -> str:
    comp = header.get("compressor") or {}
    if isinstance(comp, dict):
        return method_label(str(comp.get("name", "?")), comp.get("params"))
    return str(comp)


def load_inputs(
    result_paths: Sequence[str | Path],
    trace_paths: Sequence[str | Path] = (),
    *,
    target_accuracy: float | None = None,
) -> ReportInputs:
    """Read result tables (dirs or results.parquet) and traces into :class:`ReportInputs`.

    Method labels ("variance α=2") come from the trace headers: those of ``trace_paths``,
    else the header.json at the path a result table records for its trace, when present.
    ``target_accuracy`` (a fraction in (0, 1]) sets the time-to-accuracy target.
    """
    from vgcsim.traces.io import read_header, read_trace

    from vgcsim.core.results import read_results

    if not result_paths and not trace_paths:
        raise ResultsError("nothing to report: give at least one result table or trace")
    if target_accuracy is not None and not (0.0 < target_accuracy <= 1.0):
        raise ResultsError(
            f"target accuracy must be a test accuracy in (0, 1], got {target_accuracy}"
        )
    frames, labels = [], {}
    for path in result_paths:
        df, header = read_results(path)
        tables.check_results(df)
        frames.append(df)
        for entry in header.get("traces", []) or []:
            name = entry.get("name")
            comp = entry.get("compressor")
            if isinstance(comp, dict):
                labels.setdefault(
                    name, method_label(comp.get("name", "?"), comp.get("params"))
                )
                continue
            tpath = Path(str(entry.get("path", "")))
            if name and (tpath / HEADER_FILE).is_file():
                try:
                    labels.setdefault(name, _label_from_header(read_header(tpath)))
                except TraceError as exc:
                    log.info("no label from %s: %s", tpath, exc)
    traces = []
    for path in trace_paths:
        trace = read_trace(path)
        labels[trace.name] = _label_from_header(trace.header)
        traces.append(trace)
    results = (
        pd.concat(frames, ignore_index=True)
        if frames
        else pd.DataFrame(columns=list(tables.RESULT_COLUMNS))
    )
    return ReportInputs(
        results=results,
        result_paths=tuple(str(p) for p in result_paths),
        traces=tuple(traces),
        labels=labels,
        target_accuracy=target_accuracy,
    )


# --- building ---------------------------------------------------------------------------


def _fmt_ms(v: float) -> str:
    return "" if pd.isna(v) else f"{v * 1e3:,.2f}"


def _fmt_x(v: float) -> str:
    if pd.isna(v):
        return ""
    if math.isinf(v):
        return "∞"
    return f"{v:,.2f}" if v < 100 else f"{v:,.0f}"


def _fmt_pct(v: float) -> str:
    return "" if pd.isna(v) else f"{v * 100:.1f}"


def _fmt_p(v: Any) -> str:
    return "never" if pd.isna(v) else str(int(v))


def display_what_if(t: pd.DataFrame) -> pd.DataFrame:
    """The what-if table with units in the headers and rounded numbers."""
    return pd.DataFrame(
        {
            "source": t["source"],
            "interconnect": t["cluster"],
            "method": t["method_label"],
            "P": t["world_size"].astype(int),
            "dense step (ms)": t["dense_step_s"].map(_fmt_ms),
            "compressed step (ms)": t["compressed_step_s"].map(_fmt_ms),
            "speedup (×)": t["speedup"].map(_fmt_x),
            "dense scaling eff. (%)": t["dense_scaling_efficiency"].map(_fmt_pct),
            "compressed scaling eff. (%)": t["compressed_scaling_efficiency"].map(_fmt_pct),
            "compression ratio (×)": t["compression_ratio"].map(_fmt_x),
            "winner": t["winner"],
            "largest P where compression wins": t["largest_winning_world_size"].map(_fmt_p),
            "collectives (dense / compressed)": t["dense_collective"]
            + " / "
            + t["compressed_collective"],
        }
    )


def _display_matrix(t: pd.DataFrame) -> pd.DataFrame:
    out = t.copy()
    if "final_test_acc" in out:
        out = out.rename(columns={"final_test_acc": "test accuracy (%)"})
        out["test accuracy (%)"] = out["test accuracy (%)"].map(_fmt_pct)
    for col in out.columns:
        if str(col).startswith("P="):
            out[col] = out[col].map(_fmt_x)
    last = "largest P where compression wins"
    if last in out:
        out[last] = out[last].map(_fmt_p)
    return out


def _display_crossover(t: pd.DataFrame) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "source": t["source"],
            "interconnect": t["cluster"],
            "method": t["method_label"],
            "P": t["world_size"],
            "dense step (ms)": t["dense_step_s"].map(_fmt_ms),
            "overhead (ms)": t["overhead_s"].map(_fmt_ms),
            "ratio needed (×)": t["required_ratio"].map(_fmt_x),
            "ratio achieved (×)": t["achieved_ratio"].map(_fmt_x),
            "compression wins": t["wins"].map({True: "yes", False: "no"}),
        }
    )


def _fmt_s(v: float) -> str:
    return "" if pd.isna(v) else f"{v:,.3g}"


def _display_time_to_accuracy(t: pd.DataFrame) -> pd.DataFrame:
    def steps(v: Any, reached: bool = True) -> str:
        return str(int(v)) if not pd.isna(v) else ("never" if reached is False else "—")

    never = [
        f"never ({a * 100:.1f} % after {n} steps)"
        for a, n in zip(t["compressed_final_test_acc"], t["compressed_steps_recorded"], strict=True)
    ]
    return pd.DataFrame(
        {
            "source": t["source"],
            "interconnect": t["cluster"],
            "method": t["method_label"],
            "P": t["world_size"],
            "target (%)": t["target_acc"].map(_fmt_pct),
            "dense steps": t["dense_steps_to_target"].map(steps),
            "dense time (s)": t["dense_time_to_target_s"].map(_fmt_s),
            "compressed steps": [
                steps(v) if r else n
                for v, r, n in zip(
                    t["compressed_steps_to_target"], t["reached"], never, strict=True
                )
            ],
            "compressed time (s)": t["compressed_time_to_target_s"].map(_fmt_s),
            "speedup to accuracy (×)": t["speedup_to_accuracy"].map(_fmt_x),
        }
    )


def _display_breakdown(t: pd.DataFrame) -> pd.DataFrame:
    out = t[["source", "cluster", "method_label", "world_size", "method", "collective"]].copy()
    out.columns = ["source", "interconnect", "trace method", "P", "exchange", "collective"]
    for col, name in (
        ("compute_s", "compute (ms)"),
        ("optimizer_s", "optimizer (ms)"),
        ("variance_s", "variance (ms)"),
        ("codec_s", "codec (ms)"),
        ("comm_s", "comm (ms)"),
        ("decode_s", "decode (ms)"),
        ("other_s", "other (ms)"),
        ("step_s", "step (ms)"),
    ):
        out[name] = t[col].map(_fmt_ms)
    return out


def _display_agreement(t: pd.DataFrame) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "trace": t["trace"],
            "interconnect": t["cluster"],
            "P": t["world_size"],
            "exchange": t["method"],
            "collective": t["collective"],
            "predicted step (ms)": t["predicted_step_s"].map(_fmt_ms),
            "simulated step (ms)": t["simulated_step_s"].map(_fmt_ms),
            "relative error (%)": t["rel_error"].map(_fmt_pct),
        }
    )


def _display_methods(t: pd.DataFrame) -> pd.DataFrame:
    out = pd.DataFrame(
        {
            "method": t["method_label"],
            "optimizer": t["optimizer"],
            "trace": t["trace"],
            "workers": t["workers"],
            "steps": t["steps"],
            "test accuracy (%)": t["final_test_acc"].map(_fmt_pct),
        }
    )
    if "paper_test_acc" in t:
        out["paper accuracy (%)"] = t["paper_test_acc"].map(_fmt_pct)
    out["vs dense (points)"] = t["acc_vs_dense"].map(
        lambda v: "" if pd.isna(v) else f"{v * 100:+.1f}"
    )
    out["compression ratio (×)"] = t["compression_ratio"].map(_fmt_x)
    if "paper_compression_ratio" in t:
        out["paper ratio (×)"] = t["paper_compression_ratio"].map(_fmt_x)
    out["mean density"] = t["mean_density"].map(lambda v: f"{v:.2e}")
    return out


def _subplots(n: int, width: float, height: float, ncols: int | None = None):
    from matplotlib.figure import Figure

    ncols = ncols or min(n, 3)
    nrows = math.ceil(n / ncols)
    fig = Figure(figsize=(width * ncols, height * nrows), layout="constrained")
    axes = fig.subplots(nrows, ncols, squeeze=False).ravel()
    for ax in axes[n:]:
        ax.set_visible(False)
    return fig, axes[:n]


def _preferred_trace(names: Iterable[str], labels: dict[str, str]) -> list[str]:
    """Trace names with variance-compressed ones first (the paper's method)."""
    names = list(dict.fromkeys(names))
    return sorted(names, key=lambda n: (not labels.get(n, n).startswith("variance"), n))


def _local_times_note(lt: pd.DataFrame) -> str:
    """One sentence saying, per cluster, whether local times are modelled or measured."""
    parts = []
    for (mode, device), g in lt.groupby(["compute_mode", "device"], sort=True, dropna=False):
        names = ", ".join(dict.fromkeys(g["cluster"].astype(str)))
        if mode == "model":
            parts.append(f"modelled on the cluster device ({device}) for {names}")
        elif mode == "trace":
            parts.append(f"as measured on the recording machine ({device}) for {names}")
        else:
            parts.append(f"from compute mode {mode} ({device}) for {names}")
    return "Local times (compute, optimizer, variance, codec, decode): " + "; ".join(parts) + "."


def _dense_trace(traces_: Sequence[Any]) -> Any | None:
    """The fp32 dense trace with the most steps among ``traces_`` (None without one)."""
    dense = [
        t
        for t in traces_
        if t.compressor == "dense"
        and ((t.header.get("compressor") or {}).get("params") or {}).get("precision", "fp32")
        == "fp32"
    ]
    return max(dense, key=lambda t: t.steps_count, default=None)


def build_report(inputs: ReportInputs) -> Report:
    """Compute every table and draw every plot of a report (nothing is written)."""
    from vgcsim.reports import plots

    labels = dict(inputs.labels)
    res = inputs.results
    out_tables: list[Table] = []
    out_plots: list[Plot] = []
    summary: list[str] = []
    notes: list[str] = []
    evals = {t.name: t.evals for t in inputs.traces if t.evals is not None and len(t.evals)}
    accuracy = {name: tables.final_accuracy(ev) for name, ev in evals.items()} or None
    dense = _dense_trace(inputs.traces)
    dense_acc = accuracy.get(dense.name) if (accuracy and dense is not None) else None

    if len(res):
        notes.append(_local_times_note(tables.local_times(res)))
        wi = tables.what_if(res, labels)
        summary = tables.headline_order(tables.headline(wi, accuracy, dense_acc))
        sm = tables.speedup_matrix(wi, accuracy)
        out_tables.append(
            Table(
                "speedup_matrix",
                "What-if at a glance: speedup of compression over dense allreduce",
                "Dense step time / compressed step time per interconnect and P (above 1× "
                "compression wins), and the largest P at which it still wins; test accuracy "
                "is the final evaluation of the method's trace (when given). Full numbers "
                "in the what-if table below.",
                sm,
                _display_matrix(sm),
            )
        )
        out_tables.append(
            Table(
                "what_if",
                "What-if: dense allreduce vs compressed allgatherv",
                "Per interconnect and P, the fastest dense collective against the fastest "
                "compressed one on the same measured compute. Speedup = dense step / "
                "compressed step; scaling efficiency = single-worker step / step.",
                wi,
                display_what_if(wi),
                collapsed=True,
            )
        )
        traces_c = _preferred_trace(wi["trace"], labels)
        if traces_c:
            fig, axes = _subplots(len(traces_c), 6.2, 4.4)
            for ax, trace in zip(axes, traces_c, strict=True):
                plots.speedup_vs_world_size(wi[wi["trace"] == trace], ax)
            out_plots.append(
                Plot(
                    "speedup",
                    "Speedup vs P per interconnect",
                    "Dense step time over compressed step time; above the dashed 1× line the "
                    "compressed allgatherv is faster. One panel per compression method.",
                    fig,
                )
            )
        bd = tables.breakdown(res, labels)
        out_tables.append(
            Table(
                "breakdown",
                "Step-time breakdown",
                "Mean step time split into compute, optimizer step, variance estimate, "
                "codec (compress + encode), communication and decode + accumulate of the "
                "received payloads (other = step − parts, negative with overlap).",
                bd,
                _display_breakdown(bd),
                collapsed=True,
            )
        )
        if len(bd) and traces_c:
            main = traces_c[0]
            b = bd[bd["trace"] == main]
            clusters = list(dict.fromkeys(b["cluster"]))
            fig, axes = _subplots(len(clusters), 6.5, 4.4)
            for ax, cluster in zip(axes, clusters, strict=True):
                plots.step_breakdown(b[b["cluster"] == cluster], ax)
            out_plots.append(
                Plot(
                    "breakdown",
                    f"Step-time breakdown per P ({labels.get(main, main)})",
                    "Left (hatched) bar of each pair: dense allreduce; right bar: compressed "
                    "allgatherv. Communication grows with P for allgatherv and stays nearly "
                    "flat for ring allreduce.",
                    fig,
                )
            )
        co = tables.crossover(res, labels)
        out_tables.append(
            Table(
                "crossover",
                "Crossover: compression ratio needed to beat dense",
                "Ratio r* at which the compressed step ties the dense step, from an affine "
                "fit of communication time in payload bytes at each P; ∞: the compute and "
                "codec overhead alone exceed the dense step.",
                co,
                _display_crossover(co),
                collapsed=True,
            )
        )
        traces_x = [t for t in _preferred_trace(co["trace"], labels)] if len(co) else []
        if traces_x:
            fig, axes = _subplots(len(traces_x), 6.4, 4.8, ncols=min(len(traces_x), 2))
            for ax, trace in zip(axes, traces_x, strict=True):
                plots.crossover_map(co[co["trace"] == trace], ax)
            out_plots.append(
                Plot(
                    "crossover",
                    "Crossover map",
                    "Compression ratio a compressed allgatherv needs to tie dense allreduce, "
                    "per interconnect; one panel per method, each with its own overheads "
                    "(compute, variance estimate, codec). The dashed line is the ratio that "
                    "method achieves: it wins where the line lies above a link's curve. "
                    "Triangles on the top edge: no ratio suffices there (the overhead alone "
                    "exceeds the dense step).",
                    fig,
                )
            )
        ag = tables.agreement(res)
        if len(ag):
            out_tables.append(
                Table(
                    "agreement",
                    "Simulated vs predicted",
                    "Mean step time from the discrete-event simulator against the closed-form "
                    f"model; median |relative error| {ag['rel_error'].abs().median() * 100:.1f} %, "
                    f"max {ag['rel_error'].abs().max() * 100:.1f} %.",
                    ag,
                    _display_agreement(ag),
                    collapsed=True,
                )
            )
            fig, axes = _subplots(1, 6.0, 5.4)
            plots.simulated_vs_predicted(ag, axes[0])
            out_plots.append(
                Plot(
                    "agreement",
                    "Simulated vs predicted step time",
                    "Each point is one (trace, interconnect, P, exchange); on the diagonal the "
                    "simulator and the closed-form model agree.",
                    fig,
                )
            )

        summary += _time_to_accuracy_section(
            inputs, res, labels, evals, dense, out_tables, out_plots, plots
        )
    elif inputs.target_accuracy is not None:
        summary.append("Time to accuracy needs result tables: none given.")

    if inputs.traces:
        _trace_section(inputs.traces, labels, out_tables, out_plots, plots)

    return Report(
        summary=summary,
        tables=out_tables,
        plots=out_plots,
        sources=list(inputs.result_paths),
        notes=notes,
    )


def _time_to_accuracy_section(
    inputs: ReportInputs,
    res: pd.DataFrame,
    labels: dict[str, str],
    evals: dict[str, pd.DataFrame],
    dense: Any | None,
    out_tables: list[Table],
    out_plots: list[Plot],
    plots: Any,
) -> list[str]:
    """Time-to-accuracy table and plot; returns the summary sentences (or why none)."""
    if not evals:
        if inputs.target_accuracy is not None:
            return ["Time to accuracy left out: no --trace run with evaluations was given."]
        return []
    if inputs.target_accuracy is not None:
        target = float(inputs.target_accuracy)
        how = "as given"
    elif dense is not None and dense.name in evals:
        target = tables.default_target_accuracy(evals[dense.name])
        final = tables.final_accuracy(evals[dense.name])
        how = f"the dense run's final test accuracy, {final * 100:.1f} %, minus 1 point"
    else:
        return [
            "Time to accuracy left out: no dense trace among the --trace runs sets the default "
            "target (its final test accuracy minus 1 point); give --target-accuracy."
        ]
    dense_name = dense.name if dense is not None else None
    tta = tables.time_to_accuracy(res, evals, target, dense_trace=dense_name, labels=labels)
    if tta.empty:
        return ["Time to accuracy left out: no result table belongs to a --trace run."]
    note = (
        f"Time to accuracy: target {target * 100:.1f} % test accuracy ({how})"
        + ("" if dense_name else "; no dense trace given, so no dense time to compare")
        + "."
    )
    out_tables.append(
        Table(
            "time_to_accuracy",
            "Time to accuracy",
            f"Target {target * 100:.1f} % test accuracy ({how}). Steps to the target = the "
            "first evaluation at or above it (no interpolation between evaluations, so a "
            "count is exact only to the trace's evaluation interval); time = steps × the "
            "mean step time at that interconnect and P. Dense uses the dense trace's "
            "curve, each method its own trace's curve; 'never': the method's trace ends "
            "below the target. Speedup to accuracy = dense time / compressed time.",
            tta,
            _display_time_to_accuracy(tta),
        )
    )
    clusters = list(dict.fromkeys(tta["cluster"]))
    fig, axes = _subplots(len(clusters), 6.2, 4.6)
    for ax, cluster in zip(axes, clusters, strict=True):
        plots.time_to_accuracy(tta[tta["cluster"] == cluster], ax)
    out_plots.append(
        Plot(
            "time_to_accuracy",
            f"Time to {target * 100:.1f} % test accuracy vs P",
            "Training steps to the target (first evaluation at or above it) × predicted step "
            "time, per interconnect; dense allreduce in black. Crosses on the top edge: the "
            "method never reaches the target within its recorded steps.",
            fig,
        )
    )
    return [note, *tables.headline_order(tables.time_to_accuracy_headline(tta))]


def _trace_section(traces_, labels, out_tables, out_plots, plots) -> None:
    overview = pd.DataFrame(
        [tables.trace_overview(t, labels.get(t.name)) for t in traces_],
    )
    from vgcsim.reports.paper import PAPER_SOURCE, paper_frame

    mt = tables.method_table(overview, paper_frame())
    out_tables.append(
        Table(
            "methods",
            "Recorded methods beside the paper's table (method, accuracy, compression ratio)",
            "Final test accuracy of each recorded trace, its difference to the dense run with "
            "the same optimizer, and the compression ratio over the whole run (fp32 bits / "
            "bits sent under the trace's primary encoding); beside them the numbers of "
            f"{PAPER_SOURCE} for the same method and optimizer (our workload is smaller and "
            "shorter, so expect lower ratios early in training).",
            mt,
            _display_methods(mt),
        )
    )
    ratios = []
    for t in traces_:
        r = tables.compression_over_steps(t.payloads, t.primary_encoding)
        r.insert(0, "label", labels.get(t.name, t.name))
        ratios.append(r)
    ratio_frame = pd.concat(ratios, ignore_index=True)
    curves = tables.accuracy_curves({labels.get(t.name, t.name): t.evals for t in traces_})

    sparse = [
        t
        for t in traces_
        if len(t.payloads) and t.payloads["sent"].sum() < t.payloads["numel"].sum()
    ]
    if sparse:
        fig, axes = _subplots(len(sparse), 6.5, 3.8, ncols=min(len(sparse), 2))
        for ax, t in zip(axes, sparse, strict=True):
            names = [layer.get("name", str(layer.get("index"))) for layer in t.layers]
            plots.density_heatmap(
                tables.layer_density(t.payloads),
                ax,
                layer_names=names,
                title=f"Per-layer density: {labels.get(t.name, t.name)}",
            )
        out_plots.append(
            Plot(
                "density",
                "Per-layer density over steps",
                "Fraction of each layer's elements sent per step (all workers), log colour "
                "scale. Dense and quantizing methods send every element and are left out.",
                fig,
            )
        )
    fig, axes = _subplots(2, 6.2, 4.3, ncols=2)
    plots.compression_ratio_over_steps(ratio_frame, axes[0])
    if len(curves):
        plots.accuracy_over_steps(curves, axes[1])
    else:
        axes[1].set_visible(False)
    out_plots.append(
        Plot(
            "trace_validation",
            "Compression ratio and accuracy over training",
            "Left: compression ratio per step. Right: test accuracy at each evaluation; the "
            "dense run is the thick black line.",
            fig,
        )
    )


# --- writing ----------------------------------------------------------------------------


def to_markdown(df: pd.DataFrame) -> str:
    """A GitHub-flavoured Markdown table of ``df`` (cells as strings, pipes escaped)."""

    def cell(v: Any) -> str:
        s = "" if v is None or (isinstance(v, float) and math.isnan(v)) else str(v)
        return s.replace("|", "\\|").replace("\n", " ")

    cols = [cell(c) for c in df.columns]
    lines = ["| " + " | ".join(cols) + " |", "|" + "|".join(" --- " for _ in cols) + "|"]
    for row in df.itertuples(index=False):
        lines.append("| " + " | ".join(cell(v) for v in row) + " |")
    return "\n".join(lines) + "\n"


def _to_html_table(df: pd.DataFrame) -> str:
    head = "".join(f"<th>{html.escape(str(c))}</th>" for c in df.columns)
    body = []
    for row in df.itertuples(index=False):
        cells = []
        for v in row:
            s = "" if v is None or (isinstance(v, float) and math.isnan(v)) else str(v)
            cls = ' class="win"' if s == "compressed" else ""
            cells.append(f"<td{cls}>{html.escape(s)}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


_CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:2rem auto;
max-width:1200px;padding:0 1rem;color:#222;line-height:1.45}
h1{margin-bottom:.2rem} h2{border-bottom:1px solid #ddd;padding-bottom:.2rem;margin-top:2.2rem}
.summary{background:#f3f7fb;border-left:4px solid #1f77b4;padding:.6rem 1rem}
.summary li{margin:.25rem 0}
figure{margin:1rem 0} figure img{max-width:100%;height:auto;border:1px solid #eee}
figcaption,.caption{color:#555;font-size:.92rem}
.scroll{max-height:32rem;overflow:auto;border:1px solid #eee}
table{border-collapse:collapse;font-size:.82rem;width:100%}
th,td{border:1px solid #ddd;padding:.2rem .45rem;text-align:right;white-space:nowrap}
th{background:#f5f5f5;position:sticky;top:0}
td.win{color:#176b1e;font-weight:600}
.meta{color:#666;font-size:.85rem}
"""


def _png_bytes(fig: Any) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=PNG_DPI)
    return buf.getvalue()


def write_report(
    report: Report,
    out_dir: str | Path,
    *,
    title: str = "vgcsim report",
    notes: Sequence[str] = (),
) -> Path:
    """Write plots, tables, summary and the self-contained HTML page; return the HTML path.

    ``notes`` are short paragraphs shown under the title (how the inputs were made), before
    the report's own notes.
    """
    out = Path(out_dir)
    notes = [*notes, *report.notes]
    try:
        (out / "plots").mkdir(parents=True, exist_ok=True)
        (out / "tables").mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        reason = "it is not a folder" if out.is_file() else exc.strerror
        raise ResultsError(f"cannot write the report to {out}: {reason}") from None

    images: dict[str, str] = {}
    for plot in report.plots:
        png = _png_bytes(plot.figure)
        (out / "plots" / f"{plot.name}.png").write_bytes(png)
        plot.figure.savefig(out / "plots" / f"{plot.name}.svg", format="svg")
        images[plot.name] = base64.b64encode(png).decode("ascii")

    md_parts = [f"# {title}\n", *(f"{n}\n" for n in notes)]
    if report.summary:
        md_parts.append("\n".join(f"- {s}" for s in report.summary) + "\n")
    for table in report.tables:
        table.frame.to_csv(out / "tables" / f"{table.name}.csv", index=False)
        md = f"## {table.title}\n\n{table.caption}\n\n{to_markdown(table.display)}"
        (out / "tables" / f"{table.name}.md").write_text(md, encoding="utf-8")
        if table.name in ("speedup_matrix", "what_if"):
            md_parts.append(md)
    md_parts.append(
        "## Plots\n\n" + "\n".join(f"- plots/{p.name}.png — {p.title}" for p in report.plots) + "\n"
    )
    (out / "summary.md").write_text("\n".join(md_parts), encoding="utf-8")

    page = _html_page(report, images, title, notes)
    path = out / "index.html"
    path.write_text(page, encoding="utf-8")
    (out / "report.json").write_text(
        json.dumps(
            {
                "summary": report.summary,
                "sources": report.sources,
                "plots": [p.name for p in report.plots],
                "tables": [t.name for t in report.tables],
            },
            indent=2,
        ),
        encoding="utf-8",
    )
    return path


def _slug(s: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", s.lower()).strip("-")


def _html_page(
    report: Report, images: dict[str, str], title: str, notes: Sequence[str] = ()
) -> str:
    esc = html.escape
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        '<link rel="icon" href="data:,">',
        f"<title>{esc(title)}</title><style>{_CSS}</style></head><body>",
        f"<h1>{esc(title)}</h1>",
    ]
    for note in notes:
        parts.append(f'<p class="meta">{esc(note)}</p>')
    parts.append('<h2 id="summary">Summary</h2>')
    if report.summary:
        # per-step speedups first, then the time-to-accuracy sentences under their target
        split = next(
            (i for i, s in enumerate(report.summary) if s.startswith("Time to accuracy")),
            len(report.summary),
        )
        step, tta = report.summary[:split], report.summary[split:]
        block = '<div class="summary">'
        if step:
            block += "<ul>" + "".join(f"<li>{esc(s)}</li>" for s in step) + "</ul>"
        if tta:
            block += f"<p><strong>{esc(tta[0])}</strong></p>"
            block += "<ul>" + "".join(f"<li>{esc(s)}</li>" for s in tta[1:]) + "</ul>"
        parts.append(block + "</div>")
    else:
        parts.append(
            '<div class="summary"><p>No result tables given: trace validation only.</p></div>'
        )
    toc = [(p.title, "plot-" + _slug(p.name)) for p in report.plots] + [
        (t.title, "table-" + _slug(t.name)) for t in report.tables
    ]
    parts.append(
        "<nav><ul>"
        + "".join(f'<li><a href="#{a}">{esc(t)}</a></li>' for t, a in toc)
        + "</ul></nav>"
    )
    main_tables = [t for t in report.tables if not t.collapsed]
    other_tables = [t for t in report.tables if t.collapsed]
    for t in main_tables[:1]:
        parts.append(_html_table_block(t))
    for p in report.plots:
        parts.append(
            f'<h2 id="plot-{_slug(p.name)}">{esc(p.title)}</h2><figure>'
            f'<img src="data:image/png;base64,{images[p.name]}" alt="{esc(p.title)}">'
            f"<figcaption>{esc(p.caption)} Files: plots/{esc(p.name)}.png, "
            f"plots/{esc(p.name)}.svg.</figcaption></figure>"
        )
    for t in main_tables[1:] + other_tables:
        parts.append(_html_table_block(t))
    if report.sources:
        parts.append(
            '<h2 id="inputs">Inputs</h2><details><summary>'
            f"{len(report.sources)} result tables</summary><ul>"
            + "".join(f"<li><code>{esc(s)}</code></li>" for s in report.sources)
            + "</ul></details>"
        )
    parts.append("</body></html>")
    return "\n".join(parts)


def _html_table_block(t: Table) -> str:
    esc = html.escape
    inner = f'<div class="scroll">{_to_html_table(t.display)}</div>'
    head = f'<h2 id="table-{_slug(t.name)}">{esc(t.title)}</h2>'
    cap = f'<p class="caption">{esc(t.caption)} Files: tables/{t.name}.csv, tables/{t.name}.md.</p>'
    if t.collapsed:
        return f"{head}{cap}<details><summary>show {len(t.display)} rows</summary>{inner}</details>"
    return head + cap + inner


def render_report(
    result_paths: Sequence[str | Path],
    trace_paths: Sequence[str | Path],
    out_dir: str | Path,
    *,
    title: str = "vgcsim report",
    notes: Sequence[str] = (),
    progress: Callable[[str], None] | None = None,
    target_accuracy: float | None = None,
) -> Path:
    """Load, build and write a report; return the path of its HTML page.

    ``target_accuracy``: the time-to-accuracy target as a fraction (None: the dense
    trace's final test accuracy minus 1 point).
    """
    say = progress or (lambda _msg: None)
    say("reading result tables and traces")
    inputs = load_inputs(result_paths, trace_paths, target_accuracy=target_accuracy)
    say("computing tables and drawing plots")
    report = build_report(inputs)
    say(f"writing {len(report.plots)} plots and {len(report.tables)} tables")
    return write_report(report, out_dir, title=title, notes=notes)
