"""Report tables: pure transforms from result tables and traces to summary frames.

Every function here maps DataFrames (or a loaded trace) to a new DataFrame and writes
nothing; :mod:`vgcsim.reports.render` turns the frames into CSV, Markdown and HTML.

Inputs are result tables with exactly ``vgcsim.core.results.RESULT_COLUMNS`` (from ``vgcsim
predict`` and ``vgcsim simulate``, possibly several concatenated) and trace tables
(payloads, steps, evals) as described in :mod:`vgcsim.traces.schema`.

Vocabulary used in column names:

* ``dense`` — fp32 gradients summed with an allreduce (the baseline rows, ``method ==
  "dense"``).
* ``compressed`` — the trace's encoded payloads exchanged with an allgatherv
  (``method == "compressed"``).
* ``speedup`` — dense step time / compressed step time at the same source, cluster and P;
  above 1 compression wins.
* ``compression_ratio`` — dense fp32 bytes per rank / mean compressed bytes per rank
  (the paper's definition: bits of the uncompressed gradient over bits sent).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from vgcsim.core.errors import ResultsError
from vgcsim.core.results import RESULT_COLUMNS, RESULT_CONFIG_COLUMNS
from vgcsim.traces.schema import BITS_PREFIX

if TYPE_CHECKING:  # annotations only
    from vgcsim.traces.reading import Trace

#: Columns identifying one configuration in a result table (everything but the step and
#: the measured quantities).
CONFIG_KEYS = RESULT_CONFIG_COLUMNS
#: The parts of a step, in the order they happen on a rank, then the step itself.
PART_COLUMNS = ("compute_s", "optimizer_s", "variance_s", "codec_s", "comm_s", "decode_s")
TIME_COLUMNS = (*PART_COLUMNS, "step_s")
MEAN_STEP = -1

WHAT_IF_COLUMNS = (
    "source",
    "cluster",
    "trace",
    "method_label",
    "world_size",
    "dense_collective",
    "dense_step_s",
    "compressed_collective",
    "compressed_step_s",
    "speedup",
    "dense_scaling_efficiency",
    "compressed_scaling_efficiency",
    "compression_ratio",
    "winner",
    "largest_winning_world_size",
)


def check_results(df: pd.DataFrame) -> pd.DataFrame:
    """Return ``df`` if it has every result column, else raise :class:`ResultsError`."""
    missing = [c for c in RESULT_COLUMNS if c not in df.columns]
    if missing:
        raise ResultsError(
            f"result table lacks columns {missing}; expected the columns of "
            "vgcsim.core.results.RESULT_COLUMNS (written by `vgcsim predict` / `vgcsim simulate`)"
        )
    return df


def mean_rows(df: pd.DataFrame) -> pd.DataFrame:
    """One row per configuration: the mean-over-steps rows (``step == -1``).

    Configurations that only have per-step rows are averaged here (arithmetic mean of
    every numeric column), so both kinds of result tables give the same view. A cluster
    whose rows come in more than one ``compute_mode`` is renamed "<cluster> (<mode>)" so
    that the two answers are never compared with each other.
    """
    check_results(df)
    keys = list(CONFIG_KEYS)
    has_mean = df[df["step"] == MEAN_STEP]
    per_step = df[df["step"] != MEAN_STEP]
    if not per_step.empty:
        covered = has_mean[keys].drop_duplicates()
        merged = per_step.merge(covered, on=keys, how="left", indicator=True)
        missing = merged[merged["_merge"] == "left_only"].drop(columns="_merge")
        if not missing.empty:
            numeric = [c for c in RESULT_COLUMNS if c not in CONFIG_KEYS and c != "step"]
            averaged = missing.groupby(keys, as_index=False, dropna=False)[numeric].mean()
            averaged["step"] = MEAN_STEP
            has_mean = pd.concat([has_mean, averaged[list(RESULT_COLUMNS)]], ignore_index=True)
    out = has_mean[list(RESULT_COLUMNS)].copy()
    out["world_size"] = out["world_size"].astype(int)
    # A cluster evaluated with local times from two sources (its device model and the
    # recording machine) gives two answers: keep them apart under distinct names.
    modes = out.groupby("cluster")["compute_mode"].transform("nunique")
    mixed = modes > 1
    out.loc[mixed, "cluster"] = (
        out.loc[mixed, "cluster"] + " (" + out.loc[mixed, "compute_mode"].astype(str) + ")"
    )
    return out.sort_values(keys).reset_index(drop=True)


def cluster_order(df: pd.DataFrame) -> list[str]:
    """Clusters from slowest to fastest network: by mean dense communication time."""
    dense = df[df["method"] == "dense"]
    if dense.empty:
        return sorted(set(df["cluster"]))
    comm = dense.groupby("cluster")["comm_s"].mean().sort_values(ascending=False)
    return list(comm.index) + sorted(set(df["cluster"]) - set(comm.index))


def _sort(out: pd.DataFrame, order: list[str], keys: list[str]) -> pd.DataFrame:
    rank = {c: i for i, c in enumerate(order)}
    out = out.assign(_rank=out["cluster"].map(rank))
    keys = [("_rank" if k == "cluster" else k) for k in keys]
    return out.sort_values(keys).drop(columns="_rank").reset_index(drop=True)


def prefer_simulated(t: pd.DataFrame, keys: Iterable[str] = ("cluster", "trace")) -> pd.DataFrame:
    """The rows to show per ``keys`` group: its simulated rows where it has any, else its
    predicted ones.

    Each (cluster, trace) keeps its own source, so a predicted-only result beside a
    simulated one is shown (labelled by its ``source``), never dropped.
    """
    if t.empty or "source" not in t:
        return t
    keys = [k for k in keys if k in t]
    if not keys:
        sim = t["source"] == "simulated"
        return t[sim] if sim.any() else t
    has_sim = (t["source"] == "simulated").groupby([t[k] for k in keys]).transform("any")
    return t[(t["source"] == "simulated") | ~has_sim.astype(bool)]


def is_baseline(trace: Trace) -> bool:
    """True for the what-if rows of a 2-byte dense allreduce (trace ``dense-<encoding>``):
    a baseline beside the compression methods, not one of them."""
    return str(trace).startswith("dense-")


def _label(labels: Mapping[str, str] | None, trace: str, compressor: str) -> str:
    if labels and trace in labels:
        return labels[trace]
    if compressor.startswith("dense-"):  # a 2-byte dense baseline (see what_if)
        return f"dense {compressor[len('dense-') :]}"
    return compressor


def _best(rows: pd.DataFrame, method: str) -> pd.DataFrame:
    """Per (source, cluster, trace, P): the row of ``method`` with the smallest step time.

    The dense baseline is the fp32 allreduce whenever ``rows`` hold any fp32 dense row:
    then only fp32 dense rows are candidates, and dense rows of 2-byte encodings (bf16,
    fp16) are baselines of their own (see :func:`_low_precision_dense`), never standing in
    for fp32 (a (source, cluster, trace, P) without an fp32 dense row then has no dense
    baseline). When no dense row at all is fp32 (a table of 2-byte allreduce only), every
    dense row is a candidate, so a bf16- or fp16-only table still gets a baseline and
    speedups.
    """
    sel = rows[rows["method"] == method]
    if method == "dense" and (sel["encoding"] == "fp32").any():
        sel = sel[sel["encoding"] == "fp32"]
    if sel.empty:
        return sel
    idx = sel.groupby(["source", "cluster", "trace", "world_size"])["step_s"].idxmin()
    return sel.loc[idx.to_numpy()]


def _low_precision_dense(rows: pd.DataFrame) -> pd.DataFrame:
    """Dense rows of 2-byte encodings as compressed-side rows of trace "dense-<encoding>".

    One trace's rows per (source, cluster): the first trace by name; fp16 only where its
    step times differ from bf16's. The returned rows keep
    that trace's name in ``trace`` (to pair them with its fp32 rows) and carry
    ``compressor = "dense-<encoding>"``; :func:`what_if` renames them.
    """
    low = rows[(rows["method"] == "dense") & (rows["encoding"] != "fp32")]
    if low.empty:
        return low
    first = low.groupby(["source", "cluster"])["trace"].transform("min")
    low = low[low["trace"] == first]
    idx = low.groupby(["source", "cluster", "trace", "world_size", "encoding"])["step_s"].idxmin()
    out = low.loc[idx.to_numpy()].copy()
    # fp16 and bf16 are both 2-byte values: where their step times agree, show bf16 only
    step = out.pivot_table(
        index=["source", "cluster", "trace", "world_size"], columns="encoding", values="step_s"
    )
    if {"bf16", "fp16"} <= set(step.columns) and np.allclose(
        step["bf16"], step["fp16"], rtol=1e-9, atol=0, equal_nan=True
    ):
        out = out[out["encoding"] != "fp16"]
    out["compressor"] = "dense-" + out["encoding"].astype(str)
    return out


def what_if(df: pd.DataFrame, labels: Mapping[str, str] | None = None) -> pd.DataFrame:
    """What-if table: dense allreduce vs compressed allgatherv per interconnect and P.

    For each (source, cluster, trace, world_size) the fastest dense collective and the
    fastest compressed collective are compared (both from the same result rows, so the
    same measured compute). ``speedup = dense_step_s / compressed_step_s``; the winner is
    the method with the smaller step time; ``largest_winning_world_size`` is the largest
    P of that (source, cluster, trace) at which compression is faster (``NA`` if never).
    Traces recorded without compression (compressor ``dense``) have no compressed side
    and are left out.

    Dense allreduce of 2-byte values (rows with encoding ``bf16`` / ``fp16``) is shown as
    a method of its own, trace ``dense-<encoding>``, label "dense <encoding>", against
    the fp32 baseline of the same rows: the free halving DDP users get from a compress
    hook. Its rows are taken from one trace per (source, cluster) (the first by name; the
    dense rows of every trace of one model agree when compute is modelled); fp16 is left
    out where its step times equal bf16's.
    """
    rows = mean_rows(df)
    dense = _best(rows, "dense")
    comp = _best(rows, "compressed")
    comp = comp[comp["compressor"] != "dense"]
    comp = pd.concat([comp, _low_precision_dense(rows)], ignore_index=True)
    keys = ["source", "cluster", "trace", "world_size"]
    if dense.empty or comp.empty:
        return pd.DataFrame(columns=list(WHAT_IF_COLUMNS))
    d = dense[keys + ["collective", "step_s", "scaling_efficiency", "payload_bytes_mean"]]
    c = comp[
        keys + ["compressor", "collective", "step_s", "scaling_efficiency", "payload_bytes_mean"]
    ]
    m = c.merge(d, on=keys, suffixes=("_c", "_d"), how="inner")
    low = m["compressor"].astype(str).str.startswith("dense-")
    m.loc[low, "trace"] = m.loc[low, "compressor"]
    out = pd.DataFrame(
        {
            "source": m["source"],
            "cluster": m["cluster"],
            "trace": m["trace"],
            "method_label": [
                _label(labels, t, k) for t, k in zip(m["trace"], m["compressor"], strict=True)
            ],
            "world_size": m["world_size"].astype(int),
            "dense_collective": m["collective_d"],
            "dense_step_s": m["step_s_d"],
            "compressed_collective": m["collective_c"],
            "compressed_step_s": m["step_s_c"],
            "speedup": m["step_s_d"] / m["step_s_c"],
            "dense_scaling_efficiency": m["scaling_efficiency_d"],
            "compressed_scaling_efficiency": m["scaling_efficiency_c"],
            "compression_ratio": m["payload_bytes_mean_d"] / m["payload_bytes_mean_c"],
        }
    )
    out["winner"] = np.where(out["compressed_step_s"] < out["dense_step_s"], "compressed", "dense")
    wins = out[out["winner"] == "compressed"]
    largest = wins.groupby(["source", "cluster", "trace"])["world_size"].max()
    out = out.merge(
        largest.rename("largest_winning_world_size").reset_index(),
        on=["source", "cluster", "trace"],
        how="left",
    )
    out["largest_winning_world_size"] = out["largest_winning_world_size"].astype("Int64")
    return _sort(out[list(WHAT_IF_COLUMNS)], cluster_order(rows), keys)


def speedup_matrix(
    what_if_table: pd.DataFrame, accuracy: Mapping[str, float] | None = None
) -> pd.DataFrame:
    """Compact what-if view: one row per (interconnect, method), one speedup column per P.

    Each (interconnect, trace) shows its simulated rows when it has any, else its
    predicted ones (:func:`prefer_simulated`; the ``source`` column says which). Within an
    interconnect the compression methods come first and the 2-byte dense allreduce
    baselines last, their method labelled "… (baseline)". Columns: source, interconnect,
    method, ``final_test_acc`` (only with ``accuracy``: trace name -> final test accuracy,
    NaN for traces it lacks), ``P=<n>`` speedups (×), and the largest P where compression
    wins.
    """
    t = what_if_table
    if t.empty:
        return pd.DataFrame(columns=["source", "interconnect", "method"])
    t = prefer_simulated(t)
    sizes = sorted(set(int(p) for p in t["world_size"]))
    traces_per_label = t.groupby("method_label")["trace"].nunique()
    rows = []
    groups = list(t.groupby(["cluster", "trace"], sort=False))
    clusters = list(dict.fromkeys(c for (c, _), _g in groups))
    groups.sort(key=lambda kg: (clusters.index(kg[0][0]), is_baseline(kg[0][1])))
    for (cluster, trace), g in groups:
        sp = g.set_index("world_size")["speedup"]
        label = g["method_label"].iloc[0]
        if traces_per_label[label] > 1:
            label = f"{label} ({trace})"
        if is_baseline(trace):
            label = f"{label} (baseline)"
        row: dict[str, Any] = {
            "source": g["source"].iloc[0],
            "interconnect": cluster,
            "method": label,
        }
        if accuracy is not None:
            row["final_test_acc"] = float(accuracy.get(trace, math.nan))
        for p in sizes:
            row[f"P={p}"] = float(sp.get(p, math.nan))
        row["largest P where compression wins"] = g["largest_winning_world_size"].iloc[0]
        rows.append(row)
    return pd.DataFrame(rows)


def _fit_comm(points: pd.DataFrame) -> tuple[float, float]:
    """Least-squares ``comm_s = a + b * payload_bytes`` with ``a >= 0``, ``b > 0``.

    With a single payload size (or a fit that comes out with a negative intercept or
    slope) the line goes through the origin: communication time proportional to bytes.
    """
    x = points["payload_bytes_mean"].to_numpy(dtype=float)
    y = points["comm_s"].to_numpy(dtype=float)
    if len(np.unique(x)) >= 2:
        b, a = np.polyfit(x, y, 1)
        if a >= 0.0 and b > 0.0:
            return float(a), float(b)
    total_x = float(x.sum())
    return 0.0, (float(y.sum()) / total_x if total_x > 0 else math.inf)


def crossover(df: pd.DataFrame, labels: Mapping[str, str] | None = None) -> pd.DataFrame:
    """Compression ratio a compressed allgatherv needs to beat dense allreduce, per P.

    Formula: for each (source, cluster, P, compressed collective) the compressed rows of
    all traces give points (mean payload bytes, comm_s); a line ``comm_s = a + b·bytes``
    is fitted (through the origin when there is one payload size). A trace's compressed
    step at ratio ``r`` then costs ``overhead + a + b·dense_bytes / r`` with ``overhead =
    step_s − comm_s`` of that trace (compute, variance, codec), and it ties with the
    fastest dense step when ``r* = b·dense_bytes / (dense_step_s − overhead − a)``.
    ``r*`` is infinite when the overhead alone exceeds the dense step (no ratio helps).

    Assumptions: communication time is affine in payload bytes at fixed P (holds for the
    α-β cost of ring/recursive-doubling allgatherv on a bandwidth-bound link); skew
    between ranks is that of the measured traces.

    Returns one row per (source, cluster, trace, world_size) with ``required_ratio``,
    ``achieved_ratio`` (the trace's dense bytes / compressed bytes) and ``wins``.
    """
    rows = mean_rows(df)
    dense = _best(rows, "dense")
    comp = rows[(rows["method"] == "compressed") & (rows["compressor"] != "dense")]
    cols = [
        "source",
        "cluster",
        "trace",
        "method_label",
        "world_size",
        "collective",
        "dense_step_s",
        "overhead_s",
        "required_ratio",
        "achieved_ratio",
        "wins",
    ]
    if dense.empty or comp.empty:
        return pd.DataFrame(columns=cols)
    fits = {
        k: _fit_comm(g) for k, g in comp.groupby(["source", "cluster", "world_size", "collective"])
    }
    d = dense.set_index(["source", "cluster", "trace", "world_size"])
    records: list[dict[str, Any]] = []
    for (source, cluster, trace, p), g in comp.groupby(
        ["source", "cluster", "trace", "world_size"]
    ):
        if (source, cluster, trace, p) not in d.index:
            continue
        drow = d.loc[(source, cluster, trace, p)]
        dense_bytes = float(drow["payload_bytes_mean"])
        options = []
        for _, crow in g.iterrows():
            a, b = fits[(source, cluster, p, crow["collective"])]
            overhead = float(crow["step_s"] - crow["comm_s"])
            budget = float(drow["step_s"]) - overhead - a
            req = b * dense_bytes / budget if budget > 0 else math.inf
            options.append((req, float(crow["step_s"]), crow))
        best_req, _, best = min(options, key=lambda o: (o[0], o[1]))
        achieved = dense_bytes / float(best["payload_bytes_mean"])
        records.append(
            {
                "source": source,
                "cluster": cluster,
                "trace": trace,
                "method_label": _label(labels, trace, best["compressor"]),
                "world_size": int(p),
                "collective": best["collective"],
                "dense_step_s": float(drow["step_s"]),
                "overhead_s": float(best["step_s"] - best["comm_s"]),
                "required_ratio": best_req,
                "achieved_ratio": achieved,
                "wins": bool(achieved > best_req),
            }
        )
    out = pd.DataFrame.from_records(records, columns=cols)
    return _sort(out, cluster_order(rows), ["source", "cluster", "trace", "world_size"])


def breakdown(df: pd.DataFrame, labels: Mapping[str, str] | None = None) -> pd.DataFrame:
    """Step-time breakdown (compute, optimizer, variance, codec, communication, decode) per P.

    One row per (source, cluster, trace, world_size, method) using the fastest collective
    of each method; ``other_s`` is what the step time holds beyond the parts of
    :data:`PART_COLUMNS` (negative when the model overlaps communication with compute).
    """
    rows = mean_rows(df)
    parts = pd.concat([_best(rows, "dense"), _best(rows, "compressed")], ignore_index=True)
    parts = parts[~((parts["method"] == "compressed") & (parts["compressor"] == "dense"))]
    out = parts[
        ["source", "cluster", "trace", "compressor", "world_size", "method", "collective"]
        + list(TIME_COLUMNS)
    ].copy()
    out.insert(
        3,
        "method_label",
        [_label(labels, t, k) for t, k in zip(out["trace"], out["compressor"], strict=True)],
    )
    out = out.drop(columns="compressor")
    out["other_s"] = out["step_s"] - out[list(PART_COLUMNS)].sum(axis=1)
    return _sort(out, cluster_order(rows), ["source", "cluster", "trace", "world_size", "method"])


def agreement(df: pd.DataFrame) -> pd.DataFrame:
    """Simulated vs predicted step times for the configurations both sources cover.

    Rows are matched on (trace, compressor, encoding, cluster, world_size, method,
    collective); ``rel_error = (simulated − predicted) / simulated``.
    """
    rows = mean_rows(df)
    keys = ["trace", "compressor", "encoding", "cluster", "world_size", "method", "collective"]
    val = ["step_s", "comm_s"]
    pred = rows[rows["source"] == "predicted"].groupby(keys, as_index=False)[val].mean()
    sim = rows[rows["source"] == "simulated"].groupby(keys, as_index=False)[val].mean()
    m = pred.merge(sim, on=keys, suffixes=("_predicted", "_simulated"))
    m = m.rename(
        columns={
            "step_s_predicted": "predicted_step_s",
            "step_s_simulated": "simulated_step_s",
            "comm_s_predicted": "predicted_comm_s",
            "comm_s_simulated": "simulated_comm_s",
        }
    )
    m["rel_error"] = (m["simulated_step_s"] - m["predicted_step_s"]) / m["simulated_step_s"]
    return m.sort_values(keys).reset_index(drop=True)


def _acc_note(
    trace: str, accuracy: Mapping[str, float] | None, dense_accuracy: float | None
) -> str:
    if accuracy is None:
        return ""
    if trace.startswith("dense-"):  # a 2-byte dense baseline: no trace of its own
        return " (test accuracy not recorded)"
    acc = accuracy.get(trace, math.nan)
    if pd.isna(acc):
        return " (test accuracy not recorded)"
    own = f"test accuracy {acc * 100:.1f} %"
    if dense_accuracy is not None and not pd.isna(dense_accuracy):
        own += f" vs dense {dense_accuracy * 100:.1f} %"
    return f" ({own})"


#: The parts of a compressed step beyond compute, as the headline names them.
_TERMS = (
    ("variance estimate", ("variance_s",)),
    ("compress + decode", ("codec_s", "decode_s")),
    ("communication", ("comm_s",)),
)


def _ms(v: float) -> str:
    """Seconds for reading: "0.064 ms", "9.95 ms", "1.3 s"."""
    if v >= 1.0:
        return f"{v:.3g} s"
    return f"{v * 1e3:.2g} ms" if v < 1e-3 else f"{v * 1e3:.3g} ms"


def dominant_term(breakdown_table: pd.DataFrame, key: tuple[Any, ...]) -> str:
    """What decides one what-if comparison, from a :func:`breakdown` table.

    ``key`` is (source, cluster, trace, world_size). The compressed step's parts beyond
    compute (compute is the same on both sides), named as the report names them
    (variance estimate, compress + decode, communication), largest first: the largest
    and every other holding at least a tenth of their sum, against the dense step's time
    beyond compute (its allreduce and optimizer step), e.g. "compress + decode 0.33 ms
    and communication 0.083 ms against 0.064 ms of dense allreduce". Empty when the
    table lacks the row.
    """
    b = breakdown_table
    if b is None or b.empty:
        return ""
    source, cluster, trace, p = key
    sel = b[(b["source"] == source) & (b["cluster"] == cluster) & (b["trace"] == trace)]
    sel = sel[sel["world_size"] == p]
    comp, dense = sel[sel["method"] == "compressed"], sel[sel["method"] == "dense"]
    if comp.empty or dense.empty:
        return ""
    c, d = comp.iloc[0], dense.iloc[0]
    parts = sorted(
        ((float(sum(c[col] for col in cols)), name) for name, cols in _TERMS),
        reverse=True,
    )
    total = sum(v for v, _ in parts)
    # the largest part, and any other that holds at least a tenth of the overhead
    shown = [f"{name} {_ms(v)}" for i, (v, name) in enumerate(parts) if i == 0 or v >= total / 10]
    dense_rest = float(d["step_s"] - d["compute_s"])
    return f"{' and '.join(shown)} against {_ms(dense_rest)} of dense allreduce"


def headline(
    what_if_table: pd.DataFrame,
    accuracy: Mapping[str, float] | None = None,
    dense_accuracy: float | None = None,
    breakdown_table: pd.DataFrame | None = None,
) -> list[str]:
    """Summary sentences, one per (cluster, compressed trace), from a :func:`what_if` table.

    Each (cluster, trace) speaks from its simulated rows when it has any, else from its
    predicted ones (:func:`prefer_simulated`), and says which. Example: "On 10GbE,
    variance α=2 beats dense allreduce up to P = 64, by up to 3.1× (simulated)."
    With ``accuracy`` (trace name -> final test accuracy) each method's accuracy is
    written beside it, and with ``dense_accuracy`` the dense run's: "On 10GbE, variance
    α=2 (test accuracy 97.1 % vs dense 97.8 %) beats dense allreduce …". With
    ``breakdown_table`` (:func:`breakdown` of the same rows) each compression method's
    sentence names what decides it at the P it quotes (:func:`dominant_term`).
    """
    if what_if_table.empty:
        return []
    t = prefer_simulated(what_if_table)
    traces_per_label = t.groupby("method_label")["trace"].nunique()
    lines = []
    for (cluster, trace), g in t.groupby(["cluster", "trace"], sort=False):
        label = g["method_label"].iloc[0]
        if traces_per_label[label] > 1:  # as speedup_matrix: keep such traces apart
            label = f"{label} ({trace})"
        label += _acc_note(trace, accuracy, dense_accuracy)
        base = "dense allreduce"
        if is_baseline(trace):  # a 2-byte dense baseline against fp32
            label, base = label.replace("dense ", "dense allreduce of ", 1), "fp32"
        source = g["source"].iloc[0]
        pmax = int(g["world_size"].max())
        wins = g[g["winner"] == "compressed"]
        best = g.loc[g["speedup"].idxmax()] if wins.empty else wins.loc[wins["speedup"].idxmax()]
        term = (
            ""
            if breakdown_table is None or is_baseline(trace)
            else dominant_term(breakdown_table, (source, cluster, trace, int(best["world_size"])))
        )
        why = f": {term}" if term else ""
        if wins.empty:
            lines.append(
                f"On {cluster}, {label} never beats {base} for P ≤ {pmax}; "
                f"its best is {best['speedup']:.3g}× at P = {int(best['world_size'])} "
                f"({source}{why})."
            )
            continue
        largest = int(wins["world_size"].max())
        upto = f"up to P = {largest}" if largest < pmax else f"at every P up to {pmax}"
        lines.append(
            f"On {cluster}, {label} beats {base} {upto}, "
            f"by up to {best['speedup']:.3g}× (at P = {int(best['world_size'])}, {source}{why})."
        )
    return lines


def headline_order(lines: Iterable[str], preferred: str = "10GbE") -> list[str]:
    """Sentences where compression wins first (so that a win is never buried under the
    losses), then the rest; within each, the ``preferred`` cluster first, then clusters
    in order of first appearance, variance methods first and the dense 2-byte baselines
    last within a cluster; sentences about no cluster keep their place among the
    clusters. Baseline sentences (dense allreduce of bf16/fp16 against fp32) come after
    every compression method's."""
    lines = list(lines)
    key = f"On {preferred},"

    def cluster(s: str) -> str:
        return s[3 : s.index(",")] if s.startswith("On ") and "," in s else ""

    order = list(dict.fromkeys(cluster(s) for s in lines))

    def rank(s: str) -> tuple[bool, bool, bool, int, bool]:
        method = s.split(", ", 1)[1] if ", " in s else s
        baseline = method.startswith("dense ")
        win = (" beats " in s and " never beats " not in s) or " is faster than " in s
        return (
            baseline,  # 2-byte dense baselines after the compressors
            not win,
            not s.startswith(key),
            order.index(cluster(s)),
            not method.startswith("variance"),
        )

    return sorted(lines, key=rank)


# --- trace validation -------------------------------------------------------------------


def layer_density(payloads: pd.DataFrame) -> pd.DataFrame:
    """Per-layer density over steps: Σ sent / Σ numel over workers; index step, columns layer."""
    g = payloads.groupby(["step", "layer"])[["sent", "numel"]].sum()
    dens = (g["sent"] / g["numel"]).rename("density").reset_index()
    out = dens.pivot(index="step", columns="layer", values="density").sort_index()
    out.columns.name = "layer"
    return out


def compression_over_steps(payloads: pd.DataFrame, encoding: str) -> pd.DataFrame:
    """Compression ratio per step: fp32 bits of every worker's gradient / bits sent.

    Columns: step, bits (Σ over workers and layers of ``bits_<encoding>``), dense_bits
    (32 · Σ numel) and compression_ratio.
    """
    col = f"{BITS_PREFIX}{encoding}"
    if col not in payloads.columns:
        have = sorted(c[len(BITS_PREFIX) :] for c in payloads.columns if c.startswith(BITS_PREFIX))
        raise ResultsError(f"trace has no bits for encoding {encoding!r}; it has: {have}")
    g = payloads.groupby("step").agg(bits=(col, "sum"), numel=("numel", "sum")).reset_index()
    g["dense_bits"] = 32 * g["numel"].astype("int64")
    g["compression_ratio"] = g["dense_bits"] / g["bits"]
    return g[["step", "bits", "dense_bits", "compression_ratio"]]


def method_table(overview: pd.DataFrame, paper: pd.DataFrame | None = None) -> pd.DataFrame:
    """The paper's Table layout (method, accuracy, compression ratio) from recorded traces.

    ``overview`` has one row per trace with columns trace, method_label, compressor,
    optimizer, paper_key, workers, steps, final_test_acc, bits (total bits sent),
    dense_bits (total fp32 bits of the same gradients) and mean_density. Adds
    ``compression_ratio`` (under the trace's primary encoding, column ``encoding`` when
    the overview has it) and ``acc_vs_dense`` (difference in test accuracy to the dense
    trace with the same optimizer and the most steps; NaN without one). With ``paper``
    (:func:`vgcsim.reports.paper.paper_frame`), the paper's accuracy and ratio of the matching
    row (same optimizer and paper_key) are set beside ours, with the encoding the paper
    counts its bits in (``paper_encoding``, :func:`vgcsim.reports.paper.paper_encoding`), so
    that a ratio compared with the paper's names both encodings.
    """
    t = overview.copy()
    for col, default in (("optimizer", ""), ("paper_key", None)):
        if col not in t:
            t[col] = default
    t["compression_ratio"] = t["dense_bits"] / t["bits"]
    dense = t[t["compressor"] == "dense"].sort_values("steps")
    ref = dense.groupby("optimizer")["final_test_acc"].last()
    t["acc_vs_dense"] = t["final_test_acc"] - t["optimizer"].map(ref).astype(float)
    if "encoding" not in t:
        t["encoding"] = None
    cols = [
        "method_label",
        "optimizer",
        "trace",
        "workers",
        "steps",
        "final_test_acc",
        "acc_vs_dense",
        "encoding",
        "compression_ratio",
        "mean_density",
    ]
    if paper is not None:
        from vgcsim.reports.paper import paper_encoding

        t = t.merge(paper, on=["optimizer", "paper_key"], how="left")
        t["paper_encoding"] = [
            paper_encoding(c) if not pd.isna(r) else None
            for c, r in zip(t["compressor"], t["paper_compression_ratio"], strict=True)
        ]
        cols[6:6] = ["paper_test_acc"]
        cols[-1:-1] = ["paper_encoding", "paper_compression_ratio"]
    return t[cols].sort_values(["optimizer", "compression_ratio", "trace"]).reset_index(drop=True)


def trace_overview(trace: Trace, label: str | None = None) -> dict[str, Any]:
    """One row of :func:`method_table` input from a loaded ``vgcsim.traces.io.Trace``."""
    from vgcsim.reports.paper import paper_key

    p = trace.payloads
    enc = trace.primary_encoding
    evals = trace.evals
    acc = (
        float(evals.sort_values("step")["test_acc"].iloc[-1])
        if len(evals) and "test_acc" in evals
        else math.nan
    )
    numel = int(p["numel"].sum())
    config = trace.header.get("config") or {}
    optimizer = (config.get("optimizer") or {}).get("name", "") if isinstance(config, dict) else ""
    comp = trace.header.get("compressor") or {}
    return {
        "trace": trace.name,
        "method_label": label or trace.compressor,
        "compressor": trace.compressor,
        "optimizer": optimizer,
        "paper_key": paper_key(trace.compressor, comp.get("params")),
        "encoding": enc,
        "workers": int(trace.workers),
        "steps": int(trace.steps_count),
        "final_test_acc": acc,
        "bits": int(p[f"{BITS_PREFIX}{enc}"].sum()),
        "dense_bits": 32 * numel,
        "mean_density": float(p["sent"].sum()) / numel if numel else math.nan,
    }


def accuracy_curves(evals_by_trace: Mapping[str, pd.DataFrame]) -> pd.DataFrame:
    """Long frame (label, step, test_acc, train_acc) of every trace's evaluations."""
    parts = []
    for label, ev in evals_by_trace.items():
        if ev is None or ev.empty:
            continue
        e = ev[["step", "test_acc", "train_acc"]].copy()
        e.insert(0, "label", label)
        parts.append(e)
    if not parts:
        return pd.DataFrame(columns=["label", "step", "test_acc", "train_acc"])
    return pd.concat(parts, ignore_index=True)


# --- time to accuracy -------------------------------------------------------------------

TIME_TO_ACCURACY_COLUMNS = (
    "source",
    "cluster",
    "trace",
    "method_label",
    "world_size",
    "target_acc",
    "dense_steps_to_target",
    "dense_step_s",
    "dense_time_to_target_s",
    "compressed_steps_to_target",
    "compressed_step_s",
    "compressed_time_to_target_s",
    "compressed_final_test_acc",
    "compressed_steps_recorded",
    "reached",
    "speedup_to_accuracy",
)


def steps_to_accuracy(evals: pd.DataFrame | None, target_acc: float) -> int | None:
    """Training steps until the first evaluation at or above ``target_acc``; None if never.

    ``evals`` is a trace's eval table (columns step, test_acc; step is the 0-based index of
    the step after which the model was evaluated, so reaching the target at ``step = s``
    took ``s + 1`` steps). No interpolation between evaluations: the count is the first
    *evaluated* step at or above the target, an upper bound with the resolution of the
    trace's ``eval_every``.
    """
    if evals is None or evals.empty or "test_acc" not in evals:
        return None
    e = evals.sort_values("step")
    hit = e[e["test_acc"].astype(float) >= target_acc]
    return int(hit["step"].iloc[0]) + 1 if len(hit) else None


def final_accuracy(evals: pd.DataFrame | None) -> float:
    """Test accuracy of a trace's last evaluation (NaN without evaluations)."""
    if evals is None or evals.empty or "test_acc" not in evals:
        return math.nan
    return float(evals.sort_values("step")["test_acc"].iloc[-1])


def default_target_accuracy(dense_evals: pd.DataFrame | None, margin: float = 0.01) -> float:
    """The default target: the dense trace's final test accuracy minus ``margin`` (1 point).

    NaN when there is no dense eval curve (the caller must then ask for a target).
    """
    return final_accuracy(dense_evals) - margin


def time_to_accuracy(
    df: pd.DataFrame,
    evals_by_trace: Mapping[str, pd.DataFrame],
    target_acc: float,
    *,
    dense_trace: str | None = None,
    labels: Mapping[str, str] | None = None,
) -> pd.DataFrame:
    """Wall-clock time to a target test accuracy, dense allreduce vs compressed allgatherv.

    Formula: ``time_to_target_s = steps_to_target × step_s``, where ``steps_to_target``
    is :func:`steps_to_accuracy` of a trace's eval curve (first evaluation at or above
    ``target_acc``, no interpolation) and ``step_s`` the predicted or simulated mean step
    time at that (source, cluster, P). The compressed side uses the compressed trace's
    curve and its fastest compressed collective; the dense side uses the eval curve of
    ``dense_trace`` (a trace recorded without compression) and the fastest dense
    collective of the same result rows as :func:`what_if` (same compute). Assumption: the
    number of steps to the target does not depend on P (the traces were recorded with W
    workers; at fixed per-worker batch a larger P means a larger global batch, which this
    ignores).

    One row per what-if row whose trace has an eval curve in ``evals_by_trace``.
    ``reached`` is False when the compressed trace never reaches the target within its
    recorded steps (its steps and time are then missing, ``speedup_to_accuracy`` too; the
    row stays). Dense columns are missing without ``dense_trace`` or when the dense run
    misses the target. ``speedup_to_accuracy = dense_time_to_target_s /
    compressed_time_to_target_s``.
    """
    cols = list(TIME_TO_ACCURACY_COLUMNS)
    if not math.isfinite(target_acc):
        raise ResultsError(f"target accuracy must be a finite number, got {target_acc}")
    wi = what_if(df, labels)
    wi = wi[wi["trace"].isin(list(evals_by_trace))]
    if wi.empty:
        return pd.DataFrame(columns=cols)
    dense_ev = evals_by_trace.get(dense_trace) if dense_trace else None
    dense_steps = steps_to_accuracy(dense_ev, target_acc)
    per_trace = {
        t: (
            steps_to_accuracy(evals_by_trace[t], target_acc),
            final_accuracy(evals_by_trace[t]),
            int(evals_by_trace[t]["step"].max()) + 1 if len(evals_by_trace[t]) else 0,
        )
        for t in set(wi["trace"])
    }
    comp_steps = wi["trace"].map(lambda t: per_trace[t][0])
    out = pd.DataFrame(
        {
            "source": wi["source"],
            "cluster": wi["cluster"],
            "trace": wi["trace"],
            "method_label": wi["method_label"],
            "world_size": wi["world_size"].astype(int),
            "target_acc": float(target_acc),
            "dense_steps_to_target": pd.array([dense_steps] * len(wi), dtype="Int64"),
            "dense_step_s": wi["dense_step_s"],
            "compressed_steps_to_target": pd.array(list(comp_steps), dtype="Int64"),
            "compressed_step_s": wi["compressed_step_s"],
            "compressed_final_test_acc": wi["trace"].map(lambda t: per_trace[t][1]),
            "compressed_steps_recorded": wi["trace"].map(lambda t: per_trace[t][2]),
        }
    )
    out["dense_time_to_target_s"] = (
        out["dense_steps_to_target"].astype("Float64") * out["dense_step_s"]
    ).astype(float)
    out["compressed_time_to_target_s"] = (
        out["compressed_steps_to_target"].astype("Float64") * out["compressed_step_s"]
    ).astype(float)
    out["reached"] = out["compressed_steps_to_target"].notna().to_numpy(dtype=bool)
    out["speedup_to_accuracy"] = out["dense_time_to_target_s"] / out["compressed_time_to_target_s"]
    return out[cols].reset_index(drop=True)


def _pct(v: float) -> str:
    return f"{v * 100:.1f} %"


def time_to_accuracy_headline(tta: pd.DataFrame) -> list[str]:
    """Summary sentences of a :func:`time_to_accuracy` table, one per (cluster, method).

    Each (cluster, trace) speaks from its simulated rows when it has any, else from its
    predicted ones. Examples: "On 10GbE, to 96.8 % test accuracy (300 steps vs
    dense 250), variance α=2 is faster than dense up to P = 64, by up to 2.9× (at P = 8,
    simulated)." and, once per method that misses the target, "QSGD 2 bit, d=128 never
    reaches 96.8 % test accuracy (95.1 % after 800 steps), so it is slower to accuracy on
    every interconnect."
    """
    if tta.empty:
        return []
    t = prefer_simulated(tta)
    if (t["world_size"] > 1).any():
        t = t[t["world_size"] > 1]
    target = _pct(float(t["target_acc"].iloc[0]))
    lines = []
    for _trace, g in t[~t["reached"].astype(bool)].groupby("trace", sort=False):
        # the steps to a target do not depend on the interconnect: one sentence per method
        acc = float(g["compressed_final_test_acc"].iloc[0])
        n = int(g["compressed_steps_recorded"].iloc[0])
        lines.append(
            f"{g['method_label'].iloc[0]} never reaches {target} test accuracy "
            f"({_pct(acc)} after {n} steps), so it is slower to accuracy on every interconnect."
        )
    for (cluster, _trace), g in t[t["reached"].astype(bool)].groupby(
        ["cluster", "trace"], sort=False
    ):
        label, source = g["method_label"].iloc[0], g["source"].iloc[0]
        steps = int(g["compressed_steps_to_target"].dropna().iloc[0])
        sp = g["speedup_to_accuracy"].astype(float)
        if sp.isna().all():
            lines.append(
                f"On {cluster}, {label} reaches {target} test accuracy in {steps} steps; "
                "no dense time to compare with (no dense trace, or dense misses the target)."
            )
            continue
        wins = g[sp > 1]
        dense_steps = int(g["dense_steps_to_target"].dropna().iloc[0])
        steps_note = f"{steps} steps vs dense {dense_steps}"
        if wins.empty:
            best = g.loc[sp.idxmax()]
            lines.append(
                f"On {cluster}, to {target} test accuracy ({steps_note}), {label} is never "
                f"faster than dense; its best is {best['speedup_to_accuracy']:.3g}× at "
                f"P = {int(best['world_size'])} ({source})."
            )
            continue
        largest = int(wins["world_size"].max())
        pmax = int(g["world_size"].max())
        best = wins.loc[wins["speedup_to_accuracy"].astype(float).idxmax()]
        upto = f"up to P = {largest}" if largest < pmax else f"at every P up to {pmax}"
        lines.append(
            f"On {cluster}, to {target} test accuracy ({steps_note}), {label} is faster than "
            f"dense {upto}, by up to {best['speedup_to_accuracy']:.3g}× "
            f"(at P = {int(best['world_size'])}, {source})."
        )
    return lines


def local_times(df: pd.DataFrame) -> pd.DataFrame:
    """Where each cluster's local (non-communication) times come from.

    One row per (cluster, compute_mode, device) of the result rows: ``compute_mode``
    "model" prices compute on the cluster's device, "trace" uses the seconds measured on
    the recording machine (``vgcsim.traces.schema``).
    """
    cols = ["cluster", "compute_mode", "device"]
    check_results(df)
    return df[cols].drop_duplicates().sort_values(cols).reset_index(drop=True)
