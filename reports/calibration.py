"""The link calibration's fit table as a view: measured against fitted seconds, per op and size.

The functions take the per-size table of :func:`vgcsim.models.linkfit.fit_link` (rows with op,
size_bytes, measured_s, fitted_s, rel_error and role). :func:`plot_fit` draws on an Axes and
returns it (a missing Axes is created on a fresh ``Figure``; pyplot's global state is never
touched); :func:`fit_table_text` gives the aligned table and :func:`calibration_text` the
whole text ``vgcsim calibrate`` prints (the table, :func:`fit_line` per fitted link, the
typical error per op).
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


def fit_line(label: str, fit) -> str:
    """One line naming a fitted link's parameters, where they come from and its errors (``fit``:
    a link fit of :func:`vgcsim.models.linkfit.fit_link` or ``fit_intra_link``)."""
    from vgcsim.core.clusterfile import fit_source
    from vgcsim.core.units import format_bytes

    gamma = f", gamma = {fit.gamma_s_per_byte:.3g} s/B" if fit.gamma_op else ""
    if fit.host_op:
        gamma += f", allgatherv host {fit.allgatherv_host_s_per_byte:.3g} s/B"
        if fit.allgatherv_host_s_per_byte_table:
            gamma += (
                " (by gathered size: "
                + ", ".join(
                    f"{format_bytes(b)} {v:.3g}" for b, v in fit.allgatherv_host_s_per_byte_table
                )
                + ")"
            )
        if fit.share_op:
            gamma += f", {fit.allgatherv_host_padded_share:.2f} of it per padded byte"
    if fit.host_call_op:
        gamma += f", {fit.allgatherv_host_s * 1e6:.1f} us per {fit.host_call_op} beyond its calls"
    if fit.call_ops:
        gamma += f", {fit.call_overhead_s * 1e6:.1f} us per call ({'+'.join(fit.call_ops)})"
    if fit.allgather_latency_op:
        gamma += (
            f", alpha = {fit.allgather_latency_s * 1e6:.2f} us an allgather step "
            f"({fit.allgather_latency_op})"
        )
    if fit.comm_cpu_op:
        gamma += f", host CPU {fit.comm_cpu_s_per_byte:.3g} s per byte sent or received"
    if fit.segments:
        gamma += "; size segments from " + ", ".join(
            f"{format_bytes(b)}: {e * 1e6:+.1f} us, {w / 1e6:.2f} MB/s" for b, e, w in fit.segments
        )
    ops = "+".join(fit.fit_ops)
    if fit.latency_op:
        alpha = (
            f"alpha = {fit.latency_s * 1e6:.2f} us a collective step "
            f"({ops} alone: {fit.fit_ops_latency_s * 1e6:.2f} us)"
        )
    else:
        alpha = f"alpha = {fit.latency_s * 1e6:.2f} us"
    return (
        f"{label} ({fit.backend}, {fit.world_size} ranks; {fit_source(fit)}, {fit.method} fit): "
        f"{alpha}, beta = 1/({fit.bandwidth_Bps / 1e6:.2f} MB/s){gamma}; typical error "
        f"{fit.typical_error:.1%}, rms relative error {fit.rms_rel_error:.1%}"
    )


def calibration_text(
    table: list[dict],
    fit,
    intra=None,
    errors: dict | None = None,
    switch: dict | None = None,
    repeat: dict | None = None,
) -> str:
    """What ``vgcsim calibrate`` prints about a fit: the per-size table, a line per fitted link
    (:func:`fit_line`; ``intra``: the intra-node link's fit or None), the typical error per op
    (``errors``, :func:`vgcsim.models.linkfit.op_errors`), where ``repeat`` holds any the
    measurements' own repeatability per op (:func:`vgcsim.traces.calibration.repeatability`)
    and, where ``switch`` holds one
    (:func:`vgcsim.models.linkfit.protocol_switch`), the step between two p2p regimes."""
    lines = [fit_table_text(table), "", fit_line("link", fit)]
    if intra is not None:
        lines.append(fit_line("intra_link", intra))
    lines.append(
        "typical error per op (predicted from the fit where not fitted): "
        + ", ".join(f"{op} {e:.1%}" for op, e in (errors or {}).items())
    )
    if repeat:
        lines.append(
            "repeatability per op (the statistic of the even repetitions against the odd "
            "ones): " + ", ".join(f"{op} {e:.1%}" for op, e in repeat.items())
        )
    if switch is not None:
        lines.append(
            f"p2p steps between {switch['below_bytes']} and {switch['above_bytes']} B "
            "(a protocol switch, or a token bucket's burst): below alpha = "
            f"{switch['below'][0] * 1e6:.1f} us, above alpha = {switch['above'][0] * 1e6:.1f} us; "
            "fit one side with --from ... --sizes MIN:MAX"
        )
    return "\n".join(lines)
