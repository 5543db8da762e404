"""The advice: methods ranked per cluster and P and one recommendation each, as text (for
`vgcsim advise`) and as a report section (from the report's predicted result rows)."""

from __future__ import annotations

import math

import pandas as pd
from vgcsim.models.advise import rank_methods, recommendation
from vgcsim.reports.sections import SectionContext, SectionOutput, Table, section

__all__ = ["advice_markdown", "ranking_display"]

#: rows of the ranking shown per (cluster, P)
SHOWN = 5


def _ms(v: float) -> str:
    return "-" if not math.isfinite(v) else f"{v * 1e3:.3g}"


def _acc(v: float) -> str:
    return "-" if not math.isfinite(v) else f"{v * 100:.1f}"


def _tta(v: float) -> str:
    if isinstance(v, float) and math.isnan(v):
        return "-"
    return "never" if math.isinf(v) else f"{v:.3g}"


def ranking_display(ranked: pd.DataFrame, shown: int = SHOWN) -> pd.DataFrame:
    """The first ``shown`` methods of each (cluster, P), formatted for reading."""
    top = ranked[ranked["rank"] <= shown]
    return pd.DataFrame(
        {
            "interconnect": top["cluster"],
            "P": top["world_size"].astype(int),
            "rank": top["rank"].astype(int),
            "method": top["method"],
            "collective": top["collective"],
            "step (ms)": top["step_s"].map(_ms),
            "× dense fp32": top["speedup_vs_dense"].map(lambda v: f"{v:.2f}"),
            "final test acc. (%)": top["final_test_acc"].map(_acc),
            "time to target (s)": top["time_to_target_s"].map(_tta),
        }
    )


def _mix_display(mixes: pd.DataFrame) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "interconnect": mixes["cluster"],
            "P": mixes["world_size"].astype(int),
            "method": mixes["method"],
            "buckets (D dense, C compressed, backward order)": mixes["mask"],
            "mix step (ms)": mixes["step_s"].map(_ms),
            "best single (ms)": mixes["best_single_s"].map(_ms),
        }
    )


def advice_markdown(ranked: pd.DataFrame, mixes: pd.DataFrame, lines: list[str]) -> str:
    """The ranking (first methods per cluster and P), the per-bucket mixes and the
    recommendation lines, as Markdown text."""
    from vgcsim.reports.render import to_markdown  # render imports the sections

    parts = ["## Recommendation", "", *(f"- {line}" for line in lines), ""]
    parts += [
        "## Ranking (predicted step time)",
        "",
        to_markdown(ranking_display(ranked)),
    ]
    if len(mixes):
        parts += ["", "## Per-bucket mixes", "", to_markdown(_mix_display(mixes))]
    return "\n".join(parts)


@section("advice", needs="results")
def _advice(ctx: SectionContext) -> SectionOutput:
    """The methods of the report's predicted rows ranked per interconnect and P, and what to
    run (per-bucket mixes need the traces and clusters: `vgcsim advise`)."""
    rows = ctx.results
    if "source" in rows.columns and (rows["source"] == "predicted").any():
        rows = rows[rows["source"] == "predicted"]
    if rows.empty:
        return SectionOutput()
    dense = ctx.dense.name if ctx.dense is not None else None
    ranked = rank_methods(rows, ctx.labels, ctx.evals, dense, ctx.inputs.target_accuracy)
    if ranked.empty:
        return SectionOutput()
    lines = recommendation(ranked)
    out = SectionOutput()
    out.tables.append(
        Table(
            "advice",
            "Advice: methods ranked per interconnect and P",
            "Every method of the result tables (dense fp32/bf16/fp16 allreduce, each trace's "
            "compressor over its collective), ranked by mean predicted step time per "
            "interconnect and P (by time to the target accuracy when one is given and the "
            "traces have evaluations); the first five are shown. Recommendations: "
            + " ".join(lines)
            + " The best per-bucket mix of dense and compressed buckets is `vgcsim advise`'s.",
            ranked,
            ranking_display(ranked),
        )
    )
    return out
