"""The cost-model scenario as a Markdown report (``vgcsim scenario``'s scenario.md).

Pure rendering: the numbers come from :mod:`vgcsim.models.scenario` (its result frame's best
rows, the crossover table and the description of nets, methods and links); this module only
lays them out as tables.
"""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

__all__ = ["scenario_markdown"]


def _fmt_ratio(x: float) -> str:
    return "never" if math.isinf(x) else f"{x:,.1f}×"


def scenario_markdown(
    best: pd.DataFrame,
    cross: pd.DataFrame,
    info: dict[str, Any],
    command: str,
    *,
    codec_s: float,
    batch_size_per_worker: int,
) -> str:
    """The scenario report: assumptions, speedup vs P per link, crossover ratios, and where
    compression stops paying.

    ``best``: the scenario's fastest row per (net, link, P, method) (``best_rows``);
    ``cross``: its crossover table; ``info``: nets, methods, links and device as
    ``paper_scenario`` describes them; ``command``: the command line that made it.
    """
    labels = [m["label"] for m in info["methods"]]
    dev = info["device"]
    lines = [
        "# Dense allreduce vs compressed allgatherv: the paper's cost analysis",
        "",
        f"Made by: `{command}`",
        "",
        "Closed-form α-β models (`vgcsim.models.collectives`); at every P the dense baseline is the "
        "fastest allreduce algorithm and each compressed method its fastest allgatherv "
        "algorithm. Every rank sends dense bytes / ratio (balanced). Step = compute + "
        f"codec ({codec_s:g} s) + communication, no overlap. Compute: "
        f"{dev['name']} at {dev['peak_flops'] / 1e12:g} TFLOP/s × {dev['efficiency']:g}, "
        f"{batch_size_per_worker} samples per rank.",
        "",
        "| link | bandwidth | latency | source |",
        "|---|---|---|---|",
    ]
    for name, link in info["links"].items():
        lines.append(
            f"| {name} | {link['bandwidth_Bps'] * 8 / 1e9:g} Gb/s | {link['latency_s'] * 1e6:g} µs | {link['source']} |"
        )
    lines += ["", "| method | ratio | source |", "|---|---|---|"]
    for m in info["methods"]:
        lines.append(f"| {m['label']} | {m['ratio']:,.1f}× | {m['source']} |")
    for net in info["nets"]:
        lines += [
            "",
            f"## {net['title']}",
            "",
            f"{net['params']:,} parameters = {net['dense_bytes'] / 2**20:.1f} MiB fp32 gradient per "
            f"rank; compute {net['compute_s'] * 1e3:.1f} ms per step ({net['flops_per_sample'] / 1e9:.2f} "
            "GFLOP per sample forward+backward).",
            "",
            "### Speedup of compressed over dense step time",
            "",
        ]
        sub = best[best["trace"] == net["name"]]
        ps = sorted(sub["world_size"].unique())
        header = ["link", "method"] + [f"P={p}" for p in ps]
        lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        for link in info["links"]:
            for label in labels:
                cells = [link, label]
                for p in ps:
                    r = sub[
                        (sub["cluster"] == link)
                        & (sub["world_size"] == p)
                        & (sub["compressor"] == label)
                    ]
                    cells.append(f"{r['speedup_vs_dense'].iloc[0]:.2f}" if len(r) else "–")
                lines.append("| " + " | ".join(cells) + " |")
        lines += ["", "### Dense step time and the ratio at which compression ties", ""]
        header = (
            ["P"]
            + [f"{link} dense step" for link in info["links"]]
            + [f"{link} tie ratio" for link in info["links"]]
        )
        lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        csub = cross[cross["net"] == net["name"]] if len(cross) else cross
        for p in sorted(sub["world_size"].unique()):
            cells = [str(p)]
            for link in info["links"]:
                r = sub[
                    (sub["cluster"] == link) & (sub["world_size"] == p) & (sub["method"] == "dense")
                ]
                cells.append(
                    f"{r['step_s'].iloc[0] * 1e3:.1f} ms ({r['collective'].iloc[0].split('/')[1]})"
                )
            for link in info["links"]:
                c = csub[(csub["link"] == link) & (csub["world_size"] == p)] if len(csub) else csub
                cells.append(_fmt_ratio(c["crossover_ratio"].iloc[0]) if len(c) else "–")
            lines.append("| " + " | ".join(cells) + " |")
        lines += ["", "### Where compression stops paying", ""]
        lines += [
            "| link | method | ratio | speedup at smallest P | at largest P | pays up to P |",
            "|---|---|---|---|---|---|",
        ]
        for link in info["links"]:
            for m in info["methods"]:
                r = sub[(sub["cluster"] == link) & (sub["compressor"] == m["label"])].sort_values(
                    "world_size"
                )
                if not len(r):
                    continue
                pays = r[r["speedup_vs_dense"] > 1.0]["world_size"]
                stop = (
                    "never pays"
                    if not len(pays)
                    else (
                        f"all P ≤ {r['world_size'].max()}"
                        if len(pays) == len(r)
                        else f"{pays.max()}"
                    )
                )
                lines.append(
                    f"| {link} | {m['label']} | {m['ratio']:,.1f}× | {r['speedup_vs_dense'].iloc[0]:.2f} | "
                    f"{r['speedup_vs_dense'].iloc[-1]:.2f} | {stop} |"
                )
    return "\n".join(lines) + "\n"
