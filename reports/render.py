"""Report rendering: the one module that writes report files.

It loads result tables and traces, builds the report from the sections of
:mod:`vgcsim.reports.sections` (each: tables of :mod:`vgcsim.reports.tables`, views of
:mod:`vgcsim.reports.plots`, captions), and writes into one output folder::

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
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pandas as pd

from vgcsim.core.errors import ResultsError, TraceError
from vgcsim.core.outdir import atomic_write, atomic_write_text
from vgcsim.reports import advice as _advice  # noqa: F401  (registers the advice section)
from vgcsim.reports import tables
from vgcsim.reports.sections import (
    SECTIONS,
    Plot,
    ReportInputs,
    SectionContext,
    Table,
)
from vgcsim.traces.labels import method_label
from vgcsim.traces.schema import HEADER_FILE

log = logging.getLogger(__name__)

PNG_DPI = 110


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
    if not isinstance(comp, dict):
        return str(comp)
    params = dict(comp.get("params") or {})
    if header.get("synthetic") and "synthetic_density" in params:
        # a synthesized trace: its density and layer list, not hyperparameters it never had
        layers = (header.get("config") or {}).get("layers", "?")
        return (
            f"{comp.get('name', '?')} at {float(params['synthetic_density']) * 100:.2g} % "
            f"density, {layers} (synthesized)"
        )
    return method_label(str(comp.get("name", "?")), params)


def _anchor_caveat(header: dict[str, Any], anchor: dict[str, Any]) -> str:
    """The line a report shows for a result table priced with ``--anchor``."""
    names = ", ".join(str(t.get("name", "?")) for t in header.get("traces", []) or []) or "?"
    cluster = (header.get("cluster") or {}).get("name", "?")
    return (
        f"the step times of {names} on {cluster} include an anchor offset of "
        f"{float(anchor['offset_s']) * 1e3:+.3g} ms, the time per step the traced job measured "
        f"beyond the models' price on {anchor['cluster']} at P = {anchor['world_size']} "
        "(--anchor), carried unchanged to every P and link"
    )


def load_inputs(
    result_paths: Sequence[str | Path],
    trace_paths: Sequence[str | Path] = (),
    *,
    target_accuracy: float | None = None,
) -> ReportInputs:
    """Read result tables (dirs or results.parquet) and traces into :class:`ReportInputs`.

    Method labels ("variance α=2") come from the trace headers: those of ``trace_paths``,
    else the header.json at the path a result table records for its trace (absolute, then
    as typed), when present; a trace found at neither is listed in ``missing`` (the
    report goes on without it and says so in its notes).
    ``target_accuracy`` (a fraction in (0, 1]) sets the time-to-accuracy target.
    """
    from vgcsim.core.results import read_results
    from vgcsim.traces import health
    from vgcsim.traces.io import read_header, read_trace

    if not result_paths and not trace_paths:
        raise ResultsError("nothing to report: give at least one result table or trace")
    if target_accuracy is not None and not (0.0 < target_accuracy <= 1.0):
        raise ResultsError(
            f"target accuracy must be a test accuracy in (0, 1], got {target_accuracy}"
        )
    frames, labels, unfound = [], {}, {}
    caveats: dict[str, None] = {}  # ordered, de-duplicated
    for path in result_paths:
        df, header = read_results(path)
        tables.check_results(df)
        frames.append(df)
        anchor = (header.get("options") or {}).get("anchor")
        if anchor:
            caveats[_anchor_caveat(header, anchor)] = None
        for entry in header.get("traces", []) or []:
            caveats.update(dict.fromkeys(entry.get("caveats") or []))
            name = entry.get("name")
            comp = entry.get("compressor")
            if isinstance(comp, dict):
                labels.setdefault(name, method_label(comp.get("name", "?"), comp.get("params")))
                continue
            # the absolute path first, then the path as typed (headers before both were
            # stored hold the typed one only)
            where = [str(entry[k]) for k in ("path", "path_given") if entry.get(k)]
            found = next((Path(w) for w in where if (Path(w) / HEADER_FILE).is_file()), None)
            if name and found is not None:
                try:
                    labels.setdefault(name, _label_from_header(read_header(found)))
                except TraceError as exc:
                    log.info("no label from %s: %s", found, exc)
            elif name and name not in labels:
                unfound.setdefault(name, (str(path), where[0] if where else "?"))
    traces = []
    for path in trace_paths:
        trace = read_trace(path)
        labels[trace.name] = _label_from_header(trace.header)
        traces.append(trace)
        caveats.update(dict.fromkeys(health.caveats(trace)))
    missing = tuple(
        f"Trace {name!r} of {result} is not at {where} (moved or deleted): methods are "
        "labelled by compressor name alone, without hyperparameters; give --trace RUN "
        "for the labels and the trace sections."
        for name, (result, where) in unfound.items()
        if name not in labels
    )
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
        caveats=tuple(caveats),
        missing=missing,
    )


# --- building ---------------------------------------------------------------------------


def build_report(inputs: ReportInputs) -> Report:
    """Compute every table and draw every plot of a report (nothing is written): the
    sections of :data:`vgcsim.reports.sections.SECTIONS` that apply, in order."""
    ctx = SectionContext(inputs)
    report = Report(
        summary=[],
        tables=[],
        plots=[],
        sources=list(inputs.result_paths),
        notes=list(inputs.missing),
    )
    report.notes.extend(f"Caution: {line}." for line in inputs.caveats)
    for sec in SECTIONS.values():
        if not sec.applies(ctx):
            continue
        part = sec.build(ctx)
        report.summary.extend(part.summary)
        report.tables.extend(part.tables)
        report.plots.extend(part.plots)
        report.notes.extend(part.notes)
    return report


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
.scroll td:first-child{position:sticky;left:0;background:#fff;z-index:1}
.scroll th:first-child{left:0;z-index:2}
td.win{color:#176b1e;font-weight:600}
.meta{color:#666;font-size:.85rem}
"""


def _png_bytes(fig: Any) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=PNG_DPI)
    return buf.getvalue()


def _svg_as_laid_out(fig: Any, path: str) -> None:
    """``fig`` as SVG in the layout its last draw (the PNG's) made, without running its layout
    engine again; the engine is put back afterwards, so the caller's figure is unchanged.

    With no engine at all (not the "none" placeholder) ``savefig`` skips the layout pass it
    otherwise draws first, one draw instead of two. The file's bytes depend on the figure
    alone: no date, and element ids from a fixed salt (``svg.hashsalt``), not a random one.
    """
    import matplotlib as mpl

    engine = fig.get_layout_engine()
    named = mpl.rcParams["figure.autolayout"] or mpl.rcParams["figure.constrained_layout.use"]
    fig.set_layout_engine("none" if named else None)  # None would pick the rcParam's engine
    try:
        with mpl.rc_context({"svg.hashsalt": "vgcsim"}):
            fig.savefig(path, format="svg", metadata={"Date": None})
    finally:
        fig.set_layout_engine(engine)


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
        # every file atomically: a full disk never leaves a half-written one
        atomic_write(
            out / "plots" / f"{plot.name}.png", lambda p, png=png: Path(p).write_bytes(png)
        )
        atomic_write(
            out / "plots" / f"{plot.name}.svg",
            lambda p, fig=plot.figure: _svg_as_laid_out(fig, p),
        )
        images[plot.name] = base64.b64encode(png).decode("ascii")

    md_parts = [f"# {title}\n", *(f"{n}\n" for n in notes)]
    if report.summary:
        md_parts.append("\n".join(f"- {s}" for s in report.summary) + "\n")
    for table in report.tables:
        atomic_write(
            out / "tables" / f"{table.name}.csv",
            lambda p, frame=table.frame: frame.to_csv(p, index=False),
        )
        md = f"## {table.title}\n\n{table.caption}\n\n{to_markdown(table.display)}"
        atomic_write_text(out / "tables" / f"{table.name}.md", md)
        if table.name in ("speedup_matrix", "what_if"):
            md_parts.append(md)
    md_parts.append(
        "## Plots\n\n" + "\n".join(f"- plots/{p.name}.png — {p.title}" for p in report.plots) + "\n"
    )
    atomic_write_text(out / "summary.md", "\n".join(md_parts))

    page = _html_page(report, images, title, notes)
    path = out / "index.html"
    atomic_write_text(path, page)
    atomic_write_text(
        out / "report.json",
        json.dumps(
            {
                "summary": report.summary,
                "sources": report.sources,
                "plots": [p.name for p in report.plots],
                "tables": [t.name for t in report.tables],
            },
            indent=2,
        ),
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
    labels: Mapping[str, str] | None = None,
) -> Path:
    """Load, build and write a report; return the path of its HTML page.

    ``target_accuracy``: the time-to-accuracy target as a fraction (None: the dense
    trace's final test accuracy minus 1 point). ``labels``: trace name -> method label,
    over those of the trace headers.
    """
    say = progress or (lambda _msg: None)
    say("reading result tables and traces")
    inputs = load_inputs(result_paths, trace_paths, target_accuracy=target_accuracy)
    if labels:
        inputs = replace(inputs, labels={**inputs.labels, **labels})
    say("computing tables and drawing plots")
    report = build_report(inputs)
    say(f"writing {len(report.plots)} plots and {len(report.tables)} tables")
    return write_report(report, out_dir, title=title, notes=notes)
