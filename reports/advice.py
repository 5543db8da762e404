"""The advice: methods ranked per cluster and P and one recommendation each, and the report
section made of them (from the report's predicted result rows); its text for `vgcsim advise`
is :mod:`vgcsim.reports.advice_text`."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from vgcsim.reports.sections import SectionContext, SectionOutput, Table, section

__all__ = ["Advice", "mix_display", "rank_methods", "ranking_display", "recommendation"]

#: rows of the ranking shown per (cluster, P)
SHOWN = 5


def _time_to_target(evals: pd.DataFrame | None, target: float | None, step_s: float) -> float:
    if target is None or evals is None or not len(evals):
        return math.nan
    hit = evals[evals["test_acc"] >= target]
    if hit.empty:
        return math.inf
    return (int(hit["step"].min()) + 1) * step_s


def rank_methods(
    results: pd.DataFrame,
    labels: dict[str, str],
    evals: dict[str, pd.DataFrame] | None = None,
    dense_trace: str | None = None,
    target_accuracy: float | None = None,
) -> pd.DataFrame:
    """Per (cluster, P) the methods of the mean result rows ranked by step time (and by time
    to ``target_accuracy`` where evaluations allow): columns cluster, world_size, rank,
    method (label), trace, collective, encoding, step_s, speedup_vs_dense, final_test_acc,
    time_to_target_s. Dense rows appear once per encoding (from the first trace)."""
    evals = evals or {}
    m = results[results["step"] == -1]
    # a dense trace's "compressed" rows send its fp32 gradient by allgatherv: not a method
    m = m[~((m["method"] == "compressed") & (m["compressor"] == "dense"))].copy()
    m["label"] = [
        ("dense" if enc == "fp32" else f"dense {enc}")
        if meth == "dense"
        else f"{labels.get(tr, tr)} ({coll})"
        for meth, enc, coll, tr in zip(
            m["method"], m["encoding"], m["collective"], m["trace"], strict=True
        )
    ]
    m = m.sort_values(["cluster", "world_size", "step_s"]).drop_duplicates(
        ["cluster", "world_size", "label"]
    )
    rows = []
    for (cl, p), g in m.groupby(["cluster", "world_size"], sort=True):
        dense_fp32 = g.loc[(g["method"] == "dense") & (g["encoding"] == "fp32"), "step_s"].min()
        for r in g.itertuples(index=False):
            source = dense_trace if r.method == "dense" else r.trace
            ev = evals.get(source) if source else None
            acc = float(ev["test_acc"].iloc[-1]) if ev is not None and len(ev) else math.nan
            rows.append(
                {
                    "cluster": cl,
                    "world_size": int(p),
                    "method": r.label,
                    "trace": "" if r.method == "dense" else r.trace,
                    "collective": r.collective,
                    "encoding": r.encoding,
                    "step_s": float(r.step_s),
                    "speedup_vs_dense": float(dense_fp32 / r.step_s) if r.step_s > 0 else math.nan,
                    "final_test_acc": acc,
                    "time_to_target_s": _time_to_target(ev, target_accuracy, float(r.step_s)),
                }
            )
    out = pd.DataFrame(rows)
    if out.empty:
        return out
    by_target = target_accuracy is not None and out["time_to_target_s"].notna().any()
    key = ["time_to_target_s", "step_s"] if by_target else ["step_s"]
    out = out.sort_values(["cluster", "world_size", *key], ignore_index=True)
    out["rank"] = out.groupby(["cluster", "world_size"]).cumcount() + 1
    return out


def recommendation(ranked: pd.DataFrame, mixes: pd.DataFrame | None = None) -> list[str]:
    """One line per (cluster, P): what to run and why (the ranking's first row, and the
    per-bucket mix where it beats it)."""
    lines = []
    for (cl, p), g in ranked.groupby(["cluster", "world_size"], sort=True):
        best = g.iloc[0]
        dense = g["collective"].str.startswith("allreduce/") & g["method"].str.startswith("dense")
        # the best of the other kind (compressed if dense won, dense if compressed won)
        other = g[~dense] if bool(dense.iloc[0]) else g[dense]
        runner = other.iloc[0] if len(other) else None
        pick, step = best["method"], float(best["step_s"])
        reason = f"fastest predicted step, {step * 1e3:.3g} ms"
        if runner is not None:
            reason += f", {float(runner['step_s']) / step:.2f}x faster than {runner['method']}"
        if np.isfinite(best.get("time_to_target_s", math.nan)):
            reason = f"reaches the target first ({best['time_to_target_s']:.3g} s); " + reason
        if np.isfinite(best["final_test_acc"]):
            reason += f"; final test accuracy {best['final_test_acc']:.1%}"
        if mixes is not None and len(mixes):
            mm = mixes[(mixes["cluster"] == cl) & (mixes["world_size"] == p)]
            if len(mm):
                mix = mm.sort_values("step_s").iloc[0]
                n_comp, n = int(mix["compressed_buckets"]), int(mix["buckets"])
                if 0 < n_comp < n and float(mix["step_s"]) < step * (1 - 1e-9):
                    pick = f"{mix['method']} on {n_comp} of {n} buckets, the rest dense"
                    reason = (
                        f"per-bucket mix, {float(mix['step_s']) * 1e3:.3g} ms, "
                        f"{step / float(mix['step_s']):.2f}x faster than {best['method']}"
                    )
        if pick == "dense" or str(pick).startswith("dense "):
            reason += " (compression does not pay here)"
        lines.append(f"{cl}, P={int(p)}: run {pick} — {reason}")
    return lines


@dataclass(frozen=True)
class Advice:
    """``ranked`` (:func:`rank_methods`), ``mixes`` (one row per compressed trace, cluster
    and P: buckets, compressed_buckets, mask, step_s, best_single_s) and one
    recommendation line per (cluster, P)."""

    ranked: pd.DataFrame
    mixes: pd.DataFrame
    recommendations: list[str]


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


def mix_display(mixes: pd.DataFrame) -> pd.DataFrame:
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
