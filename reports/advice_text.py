"""`vgcsim advise`'s text: the recommendation lines, the ranking and the per-bucket mixes as
Markdown."""

from __future__ import annotations

import pandas as pd

from vgcsim.reports.advice import mix_display, ranking_display
from vgcsim.reports.render import to_markdown

__all__ = ["advice_markdown"]


def advice_markdown(ranked: pd.DataFrame, mixes: pd.DataFrame, lines: list[str]) -> str:
    """The ranking (first methods per cluster and P), the per-bucket mixes and the
    recommendation lines, as Markdown text."""
    parts = ["## Recommendation", "", *(f"- {line}" for line in lines), ""]
    parts += [
        "## Ranking (predicted step time)",
        "",
        to_markdown(ranking_display(ranked)),
    ]
    if len(mixes):
        parts += ["", "## Per-bucket mixes", "", to_markdown(mix_display(mixes))]
    return "\n".join(parts)
