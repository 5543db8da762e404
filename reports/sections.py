"""Report sections as a registry: each section is one place that makes its tables (frame and
display), its plots and their captions, and the summary sentences it contributes.

A section is a function of a :class:`SectionContext` (the inputs and the frames several
sections share, computed once) registered with :func:`section`; the report is the sections
in registration order (:data:`SECTIONS`), each run when its inputs are there (result tables,
traces, or either). Adding a plot to the report is adding one section here.

Display frames (units in the headers, rounded cells) come from one column-spec helper,
:func:`display`, and the cell formatters below.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np
import pandas as pd

from vgcsim.reports import plots, tables
from vgcsim.reports.paper import PAPER_SOURCE, paper_frame

__all__ = [
    "SECTIONS",
    "Plot",
    "ReportInputs",
    "Section",
    "SectionContext",
    "SectionOutput",
    "Table",
    "display",
    "display_what_if",
    "section",
]


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
    #: one line per partial or diverged input trace (vgcsim.traces.health), de-duplicated
    caveats: tuple[str, ...] = ()
    #: sentences naming inputs a result table refers to but that were not found
    missing: tuple[str, ...] = ()


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


@dataclass
class SectionOutput:
    """What one section adds to the report, in page order within the section."""

    tables: list[Table] = field(default_factory=list)
    plots: list[Plot] = field(default_factory=list)
    summary: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


# --- cell formatters and display frames -------------------------------------------------


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


def _fmt_s(v: float) -> str:
    return "" if pd.isna(v) else f"{v:,.3g}"


def _fmt_points(v: float) -> str:
    return "" if pd.isna(v) else f"{v * 100:+.1f}"


#: One display column: (header, source column or a function of the frame, cell formatter
#: or mapping; None keeps the values).
Column = tuple[str, "str | Callable[[pd.DataFrame], Any]", "Callable[[Any], str] | Mapping | None"]


def display(t: pd.DataFrame, columns: Sequence[Column]) -> pd.DataFrame:
    """The display frame of ``t``: one column per spec, in order, formatted for reading."""
    out = {}
    for header, source, fmt in columns:
        values = t[source] if isinstance(source, str) else source(t)
        out[header] = values.map(fmt) if fmt is not None else values
    return pd.DataFrame(out)


WHAT_IF_COLUMNS: tuple[Column, ...] = (
    ("source", "source", None),
    ("interconnect", "cluster", None),
    ("method", "method_label", None),
    ("P", lambda t: t["world_size"].astype(int), None),
    ("dense step (ms)", "dense_step_s", _fmt_ms),
    ("compressed step (ms)", "compressed_step_s", _fmt_ms),
    ("speedup (×)", "speedup", _fmt_x),
    ("dense scaling eff. (%)", "dense_scaling_efficiency", _fmt_pct),
    ("compressed scaling eff. (%)", "compressed_scaling_efficiency", _fmt_pct),
    ("compression ratio (×)", "compression_ratio", _fmt_x),
    ("winner", "winner", None),
    ("largest P where compression wins", "largest_winning_world_size", _fmt_p),
    (
        "collectives (dense / compressed)",
        lambda t: t["dense_collective"] + " / " + t["compressed_collective"],
        None,
    ),
)

CROSSOVER_COLUMNS: tuple[Column, ...] = (
    ("source", "source", None),
    ("interconnect", "cluster", None),
    ("method", "method_label", None),
    ("P", "world_size", None),
    ("dense step (ms)", "dense_step_s", _fmt_ms),
    ("overhead (ms)", "overhead_s", _fmt_ms),
    ("ratio needed (×)", "required_ratio", _fmt_x),
    ("ratio achieved (×)", "achieved_ratio", _fmt_x),
    ("compression wins", "wins", {True: "yes", False: "no"}),
)

BREAKDOWN_COLUMNS: tuple[Column, ...] = (
    ("source", "source", None),
    ("interconnect", "cluster", None),
    ("trace method", "method_label", None),
    ("P", "world_size", None),
    ("exchange", "method", None),
    ("collective", "collective", None),
    *(
        (f"{part} (ms)", f"{part}_s", _fmt_ms)
        for part in ("compute", "optimizer", "variance", "codec", "comm", "decode", "other")
    ),
    ("step (ms)", "step_s", _fmt_ms),
)

AGREEMENT_COLUMNS: tuple[Column, ...] = (
    ("trace", "trace", None),
    ("interconnect", "cluster", None),
    ("P", "world_size", None),
    ("exchange", "method", None),
    ("collective", "collective", None),
    ("predicted step (ms)", "predicted_step_s", _fmt_ms),
    ("simulated step (ms)", "simulated_step_s", _fmt_ms),
    ("relative error (%)", "rel_error", _fmt_pct),
)

#: Columns of the methods table; those whose source column a frame lacks (the paper's,
#: without a paper frame) are left out.
METHODS_COLUMNS: tuple[Column, ...] = (
    ("method", "method_label", None),
    ("optimizer", "optimizer", None),
    ("trace", "trace", None),
    ("workers", "workers", None),
    ("steps", "steps", None),
    ("test accuracy (%)", "final_test_acc", _fmt_pct),
    ("paper accuracy (%)", "paper_test_acc", _fmt_pct),
    ("vs dense (points)", "acc_vs_dense", _fmt_points),
    ("encoding", "encoding", None),
    ("compression ratio (×)", "compression_ratio", _fmt_x),
    ("paper encoding", "paper_encoding", None),
    ("paper ratio (×)", "paper_compression_ratio", _fmt_x),
    ("mean density", "mean_density", lambda v: f"{v:.2e}"),
)


def _tta_steps(v: Any) -> str:
    return "—" if pd.isna(v) else str(int(v))


def _tta_compressed_steps(t: pd.DataFrame) -> list[str]:
    """Steps to the target, or "never (final accuracy after n steps)" when not reached."""
    return [
        _tta_steps(v) if r else f"never ({a * 100:.1f} % after {n} steps)"
        for v, r, a, n in zip(
            t["compressed_steps_to_target"],
            t["reached"],
            t["compressed_final_test_acc"],
            t["compressed_steps_recorded"],
            strict=True,
        )
    ]


TIME_TO_ACCURACY_COLUMNS: tuple[Column, ...] = (
    ("source", "source", None),
    ("interconnect", "cluster", None),
    ("method", "method_label", None),
    ("P", "world_size", None),
    ("target (%)", "target_acc", _fmt_pct),
    ("dense steps", "dense_steps_to_target", _tta_steps),
    ("dense time (s)", "dense_time_to_target_s", _fmt_s),
    ("compressed steps", _tta_compressed_steps, None),
    ("compressed time (s)", "compressed_time_to_target_s", _fmt_s),
    ("speedup to accuracy (×)", "speedup_to_accuracy", _fmt_x),
)


def display_what_if(t: pd.DataFrame) -> pd.DataFrame:
    """The what-if table with units in the headers and rounded numbers."""
    return display(t, WHAT_IF_COLUMNS)


def _display_matrix(t: pd.DataFrame) -> pd.DataFrame:
    """The speedup matrix: its columns depend on the world sizes (one per P). The key
    column, method, comes first (the HTML page keeps the first column in view)."""
    out = t.copy()
    if "method" in out:
        out = out[["method", *[c for c in out.columns if c != "method"]]]
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


# --- figures ----------------------------------------------------------------------------


def _subplots(n: int, width: float, height: float, ncols: int | None = None, sharey: bool = False):
    from matplotlib.figure import Figure

    n = max(n, 1)
    ncols = max(1, min(ncols or min(n, 3), n))
    nrows = math.ceil(n / ncols)
    fig = Figure(figsize=(width * ncols, height * nrows), layout="constrained")
    axes = fig.subplots(nrows, ncols, squeeze=False, sharey=sharey).ravel()
    for ax in axes[n:]:
        ax.set_visible(False)
    return fig, axes[:n]


def _panels(
    frame: pd.DataFrame,
    column: str,
    keys: Sequence[Any],
    draw: Callable[[pd.DataFrame, Any], Any],
    width: float,
    height: float,
    ncols: int | None = None,
    sharey: bool = False,
) -> Any:
    """One panel per key: ``draw(frame[frame[column] == key], ax)``; returns the Figure.

    ``sharey``: every panel on one y scale (limits, log or linear, ticks).
    """
    fig, axes = _subplots(len(keys), width, height, ncols=ncols, sharey=sharey)
    for ax, key in zip(axes, keys, strict=False):
        draw(frame[frame[column] == key], ax)
    return fig


# --- what every section reads -----------------------------------------------------------


def _preferred_trace(names: Iterable[str], labels: dict[str, str]) -> list[str]:
    """Trace names with variance-compressed ones first (the paper's method)."""
    names = list(dict.fromkeys(names))
    return sorted(names, key=lambda n: (not labels.get(n, n).startswith("variance"), n))


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


class SectionContext:
    """The inputs of a report and the frames several sections share, computed once."""

    def __init__(self, inputs: ReportInputs) -> None:
        self.inputs = inputs
        self.labels = dict(inputs.labels)
        self.results = inputs.results
        self.traces = inputs.traces
        self.evals = {
            t.name: t.evals for t in inputs.traces if t.evals is not None and len(t.evals)
        }
        acc = {name: tables.final_accuracy(ev) for name, ev in self.evals.items()}
        self.accuracy: dict[str, float] | None = acc or None
        self.dense = _dense_trace(inputs.traces)
        self.dense_acc = (
            self.accuracy.get(self.dense.name)
            if (self.accuracy and self.dense is not None)
            else None
        )

    def label(self, trace: str) -> str:
        return self.labels.get(trace, trace)

    @cached_property
    def what_if(self) -> pd.DataFrame:
        return tables.what_if(self.results, self.labels)

    @cached_property
    def breakdown(self) -> pd.DataFrame:
        return tables.breakdown(self.results, self.labels)

    @cached_property
    def compressed_traces(self) -> list[str]:
        """Compressed traces of the what-if table, variance first (the 2-byte dense
        baselines, traces ``dense-<encoding>``, are not among them)."""
        names = [n for n in self.what_if["trace"] if not tables.is_baseline(n)]
        labels = dict(zip(self.what_if["trace"], self.what_if["method_label"], strict=True))
        return _preferred_trace(names, {**labels, **self.labels})

    @cached_property
    def baseline_traces(self) -> list[str]:
        """The 2-byte dense allreduce baselines of the what-if table (``dense-<encoding>``)."""
        return [n for n in dict.fromkeys(self.what_if["trace"]) if tables.is_baseline(n)]


@dataclass(frozen=True)
class Section:
    """One report section: its name, what it needs and the function that makes it."""

    name: str
    needs: str  # "results", "traces" or "any"
    build: Callable[[SectionContext], SectionOutput]

    def applies(self, ctx: SectionContext) -> bool:
        if self.needs == "results":
            return len(ctx.results) > 0
        if self.needs == "traces":
            return bool(ctx.traces)
        return True


#: section name -> section, in page order
SECTIONS: dict[str, Section] = {}


def section(
    name: str, needs: str
) -> Callable[[Callable[[SectionContext], SectionOutput]], Callable]:
    """Register ``build`` as the report section ``name`` (after those registered before)."""
    if needs not in ("results", "traces", "any"):
        raise ValueError(f"needs must be results, traces or any, got {needs!r}")

    def register(build: Callable[[SectionContext], SectionOutput]) -> Callable:
        if name in SECTIONS:
            raise ValueError(f"report section {name!r} is registered twice")
        SECTIONS[name] = Section(name, needs, build)
        return build

    return register


def _same_model(baselines: pd.DataFrame, rows: pd.DataFrame) -> pd.DataFrame:
    """The baseline what-if rows (dense 2-byte allreduce) that belong beside ``rows``: same
    source, cluster and P, and the same dense fp32 step (the same model; a baseline taken
    from a 38 k-parameter trace says nothing about a ResNet-50 panel)."""
    keys = ["source", "cluster", "world_size"]
    ref = tables.prefer_simulated(rows)[[*keys, "dense_step_s"]].drop_duplicates(keys)
    b = baselines.merge(ref, on=keys, suffixes=("", "_panel"))
    same = np.isclose(b["dense_step_s"], b["dense_step_s_panel"], rtol=1e-6, atol=0.0)
    return b[same].drop(columns="dense_step_s_panel")


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


# --- the sections, in page order ----------------------------------------------------------


@section("what_if", needs="results")
def _what_if(ctx: SectionContext) -> SectionOutput:
    wi = ctx.what_if
    sm = tables.speedup_matrix(wi, ctx.accuracy)
    out = SectionOutput(
        summary=tables.headline_order(
            tables.headline(wi, ctx.accuracy, ctx.dense_acc, ctx.breakdown)
        ),
        notes=[_local_times_note(tables.local_times(ctx.results))],
    )
    out.tables.append(
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
    out.tables.append(
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
    if ctx.compressed_traces or ctx.baseline_traces:
        shown = tables.prefer_simulated(wi)
        shown = shown[shown["world_size"] > 1] if (shown["world_size"] > 1).any() else shown
        baselines = wi[wi["trace"].isin(ctx.baseline_traces)]
        panels = ctx.compressed_traces or ctx.baseline_traces[:1]

        def draw(rows: pd.DataFrame, ax: Any) -> Any:
            return plots.speedup_vs_world_size(
                pd.concat([rows, _same_model(baselines, rows)]) if ctx.compressed_traces else rows,
                ax,
                scale_values=shown["speedup"],
            )

        out.plots.append(
            Plot(
                "speedup",
                "Speedup vs P per interconnect",
                "Dense fp32 step time over compressed step time; above the dashed 1× line "
                "the compressed allgatherv is faster. One panel per compression method, "
                "all on one y scale; each interconnect says whether it is predicted or "
                "simulated where both appear. Dotted lines: dense allreduce of 2-byte "
                "values (bf16/fp16) of the same model, a baseline, not a compression method.",
                _panels(wi, "trace", panels, draw, 6.2, 4.4, sharey=True),
            )
        )
    return out


@section("breakdown", needs="results")
def _breakdown(ctx: SectionContext) -> SectionOutput:
    bd = ctx.breakdown
    out = SectionOutput()
    out.tables.append(
        Table(
            "breakdown",
            "Step-time breakdown",
            "Mean step time split into compute, optimizer step, variance estimate, "
            "codec (compress + encode), communication and decode + accumulate of the "
            "received payloads (other = step − parts, negative with overlap).",
            bd,
            display(bd, BREAKDOWN_COLUMNS),
            collapsed=True,
        )
    )
    main = ctx.compressed_traces[0] if ctx.compressed_traces else None
    b = tables.prefer_simulated(bd[bd["trace"] == main]) if len(bd) else bd
    clusters = list(dict.fromkeys(b["cluster"]))
    if clusters:
        out.plots.append(
            Plot(
                "breakdown",
                f"Step-time breakdown per P ({ctx.label(main)})",
                "Left (hatched) bar of each pair: dense allreduce; right bar: compressed "
                "allgatherv. Communication grows with P for allgatherv and stays nearly "
                "flat for ring allreduce.",
                _panels(b, "cluster", clusters, plots.step_breakdown, 6.5, 4.4),
            )
        )
    return out


@section("crossover", needs="results")
def _crossover(ctx: SectionContext) -> SectionOutput:
    co = tables.crossover(ctx.results, ctx.labels)
    out = SectionOutput()
    out.tables.append(
        Table(
            "crossover",
            "Crossover: compression ratio needed to beat dense",
            "Ratio r* at which the compressed step ties the dense step, from an affine "
            "fit of communication time in payload bytes at each P; ∞: the compute and "
            "codec overhead alone exceed the dense step.",
            co,
            display(co, CROSSOVER_COLUMNS),
            collapsed=True,
        )
    )
    traces_x = _preferred_trace(co["trace"], ctx.labels) if len(co) else []
    if traces_x:
        out.plots.append(
            Plot(
                "crossover",
                "Crossover map",
                "Compression ratio a compressed allgatherv needs to tie dense allreduce, "
                "per interconnect; one panel per method, each with its own overheads "
                "(compute, variance estimate, codec). The dashed line is the ratio that "
                "method achieves: it wins where the line lies above a link's curve. "
                "Triangles on the top edge: no ratio suffices there (the overhead alone "
                "exceeds the dense step).",
                _panels(
                    co,
                    "trace",
                    traces_x,
                    plots.crossover_map,
                    6.4,
                    4.8,
                    ncols=min(len(traces_x), 2),
                ),
            )
        )
    return out


@section("agreement", needs="results")
def _agreement(ctx: SectionContext) -> SectionOutput:
    ag = tables.agreement(ctx.results)
    out = SectionOutput()
    if not len(ag):
        return out
    err = ag["rel_error"].abs()
    out.tables.append(
        Table(
            "agreement",
            "Simulated vs predicted",
            "Mean step time from the discrete-event simulator against the closed-form "
            f"model; median |relative error| {err.median() * 100:.1f} %, "
            f"max {err.max() * 100:.1f} %.",
            ag,
            display(ag, AGREEMENT_COLUMNS),
            collapsed=True,
        )
    )
    fig, axes = _subplots(1, 6.0, 5.4)
    plots.simulated_vs_predicted(ag, axes[0])
    out.plots.append(
        Plot(
            "agreement",
            "Simulated vs predicted step time",
            "Each point is one (trace, interconnect, P, exchange); on the diagonal the "
            "simulator and the closed-form model agree.",
            fig,
        )
    )
    return out


@section("time_to_accuracy", needs="any")
def _time_to_accuracy(ctx: SectionContext) -> SectionOutput:
    """Time-to-accuracy table and plot; the summary says the target (or why none)."""
    given = ctx.inputs.target_accuracy
    if not len(ctx.results):
        msg = "Time to accuracy needs result tables: none given."
        return SectionOutput(summary=[msg] if given is not None else [])
    if not ctx.evals:
        msg = "Time to accuracy left out: no --trace run with evaluations was given."
        return SectionOutput(summary=[msg] if given is not None else [])
    dense = ctx.dense
    if given is not None:
        target = float(given)
        how = "as given"
    elif dense is not None and dense.name in ctx.evals:
        target = tables.default_target_accuracy(ctx.evals[dense.name])
        final = tables.final_accuracy(ctx.evals[dense.name])
        how = f"the dense run's final test accuracy, {final * 100:.1f} %, minus 1 point"
    else:
        return SectionOutput(
            summary=[
                "Time to accuracy left out: no dense trace among the --trace runs sets the "
                "default target (its final test accuracy minus 1 point); give "
                "--target-accuracy."
            ]
        )
    dense_name = dense.name if dense is not None else None
    tta = tables.time_to_accuracy(
        ctx.results, ctx.evals, target, dense_trace=dense_name, labels=ctx.labels
    )
    if tta.empty:
        return SectionOutput(
            summary=["Time to accuracy left out: no result table belongs to a --trace run."]
        )
    note = (
        f"Time to accuracy: target {target * 100:.1f} % test accuracy ({how})"
        + ("" if dense_name else "; no dense trace given, so no dense time to compare")
        + "."
    )
    out = SectionOutput(
        summary=[note, *tables.headline_order(tables.time_to_accuracy_headline(tta))]
    )
    out.tables.append(
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
            display(tta, TIME_TO_ACCURACY_COLUMNS),
        )
    )
    clusters = list(dict.fromkeys(tta["cluster"]))
    out.plots.append(
        Plot(
            "time_to_accuracy",
            f"Time to {target * 100:.1f} % test accuracy vs P",
            "Training steps to the target (first evaluation at or above it) × predicted step "
            "time, per interconnect; dense allreduce in black. Crosses on the top edge: the "
            "method never reaches the target within its recorded steps.",
            _panels(tta, "cluster", clusters, plots.time_to_accuracy, 6.2, 4.6),
        )
    )
    return out


@section("methods", needs="traces")
def _methods(ctx: SectionContext) -> SectionOutput:
    overview = pd.DataFrame(
        [tables.trace_overview(t, ctx.labels.get(t.name)) for t in ctx.traces],
    )
    mt = tables.method_table(overview, paper_frame())
    columns = [c for c in METHODS_COLUMNS if not isinstance(c[1], str) or c[1] in mt]
    table = Table(
        "methods",
        "Recorded methods beside the paper's table (method, accuracy, compression ratio)",
        "Final test accuracy of each recorded trace, its difference to the dense run with "
        "the same optimizer, and the compression ratio over the whole run (fp32 bits / "
        "bits sent under the encoding named beside it, the trace's primary one); beside "
        "them, with the encoding the paper counts its bits in, the numbers of "
        f"{PAPER_SOURCE} for the same method and optimizer (our workload is smaller and "
        "shorter, so expect lower ratios early in training).",
        mt,
        display(mt, columns),
    )
    return SectionOutput(tables=[table])


@section("density", needs="traces")
def _density(ctx: SectionContext) -> SectionOutput:
    sparse = [
        t
        for t in ctx.traces
        if len(t.payloads) and t.payloads["sent"].sum() < t.payloads["numel"].sum()
    ]
    if not sparse:
        return SectionOutput()
    fig, axes = _subplots(len(sparse), 6.5, 3.8, ncols=min(len(sparse), 2))
    for ax, t in zip(axes, sparse, strict=True):
        names = [layer.get("name", str(layer.get("index"))) for layer in t.layers]
        plots.density_heatmap(
            tables.layer_density(t.payloads),
            ax,
            layer_names=names,
            title=f"Per-layer density: {ctx.label(t.name)}",
        )
    plot = Plot(
        "density",
        "Per-layer density over steps",
        "Fraction of each layer's elements sent per step (all workers), log colour "
        "scale. Dense and quantizing methods send every element and are left out.",
        fig,
    )
    return SectionOutput(plots=[plot])


@section("trace_validation", needs="traces")
def _trace_validation(ctx: SectionContext) -> SectionOutput:
    ratios = []
    for t in ctx.traces:
        r = tables.compression_over_steps(t.payloads, t.primary_encoding)
        r.insert(0, "label", ctx.label(t.name))
        ratios.append(r)
    curves = tables.accuracy_curves({ctx.label(t.name): t.evals for t in ctx.traces})
    # the reference dense run is the black line in both panels; with both panels drawn, the
    # accuracy panel's legend names the lines of both (same labels, same colours)
    dense = ctx.label(ctx.dense.name) if ctx.dense is not None else "dense"
    fig, axes = _subplots(2, 6.2, 4.3, ncols=2)
    plots.compression_ratio_over_steps(
        pd.concat(ratios, ignore_index=True), axes[0], dense=dense, legend=not len(curves)
    )
    if len(curves):
        plots.accuracy_over_steps(curves, axes[1], dense=dense)
    else:
        axes[1].set_visible(False)
    plot = Plot(
        "trace_validation",
        "Compression ratio and accuracy over training",
        "Left: compression ratio per step. Right: test accuracy at each evaluation, with "
        "the legend of both panels. The dense fp32 run is drawn black."
        if len(curves)
        else "Compression ratio per step (no trace recorded an evaluation). The dense fp32 "
        "run is drawn black.",
        fig,
    )
    return SectionOutput(plots=[plot])
