"""The link calibration's fit table as a view: measured against fitted seconds, per op and size.

Both functions take the per-size table of :func:`vgcsim.models.linkfit.fit_link` (rows with op,
size_bytes, measured_s, fitted_s, rel_error and role). :func:`plot_fit` draws on an Axes and
returns it (a missing Axes is created on a fresh ``Figure``; pyplot's global state is never
touched); :func:`fit_table_text` gives the aligned text ``vgcsim calibrate`` prints.
"""

from __future__ import annotations

from matplotlib.axes import Axes
from matplotlib.figure import Figure


def plot_fit(table: list[dict], ax: Axes | None = None) -> Axes:
    """Measured (points) and fitted (lines) seconds against message size, one colour per op."""
    if ax is None:
        ax = Figure(figsize=(6, 4), layout="constrained").subplots()
    ops = list(dict.fromkeys(r["op"] for r in table))
    for k, op in enumerate(ops):
        rows = sorted((r for r in table if r["op"] == op), key=lambda r: r["size_bytes"])
        size = [r["size_bytes"] for r in rows]
        color = f"C{k}"
        ax.loglog(size, [r["measured_s"] for r in rows], "o", ms=4, color=color, label=op)
        ax.loglog(size, [r["fitted_s"] for r in rows], "-", lw=1, color=color)
    ax.set_xlabel("message size (bytes; allgather(v): per rank)")
    ax.set_ylabel("seconds (points: measured, lines: fit)")
    ax.legend(fontsize=8)
    return ax


def fit_table_text(table: list[dict]) -> str:
    """Per-size fit error as an aligned text table, one line per (op, size)."""
    head = (
        f"{'op':<10} {'size_bytes':>11} {'measured_s':>12} {'fitted_s':>12} {'rel_error':>9} role"
    )
    rows = [
        f"{r['op']:<10} {r['size_bytes']:>11d} {r['measured_s']:>12.4g} "
        f"{r['fitted_s']:>12.4g} {r['rel_error']:>+9.1%} {r.get('role', '')}"
        for r in table
    ]
    return "\n".join([head, *rows])
