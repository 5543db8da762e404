"""The demo report's text about its traces: what its numbers rest on (:func:`demo_headline`),
how its paper-size rows were made (:func:`paper_note`), and the labels that tell recorded
rows from synthesized ones (:func:`demo_labels`).

Pure text over :class:`~vgcsim.traces.reading.Trace` objects; ``vgcsim.api.demo`` passes it
to the report as its notes and labels.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # annotations only
    from vgcsim.traces.reading import Trace

__all__ = ["demo_headline", "demo_labels", "paper_note", "settled_density"]


def settled_density(trace: Trace) -> float:
    """A trace's mean density over its last 20 % of steps (where the variance compressor's
    density has settled)."""
    steps = trace.steps.sort_values("step")
    return float(steps["density"].iloc[-max(1, len(steps) // 5) :].mean())


def demo_labels(
    traces: Mapping[str, Trace],
    synthesized: Mapping[str, str | Path],
    net_names: Mapping[str, str],
) -> dict[str, str]:
    """Report labels (trace name -> label) saying which rows are recorded (the toy) and
    which synthesized: ``synthesized`` maps a paper-size net (a key of ``net_names``, its
    display name) to its trace folder, synthesized at the ``"variance"`` trace's density."""
    from vgcsim.traces.labels import method_label

    labels = {}
    model = "?"
    for t in traces.values():
        comp = t.header.get("compressor") or {}
        model = ((t.header.get("config") or {}).get("model") or {}).get("name", "?")
        label = method_label(str(comp.get("name", t.compressor)), comp.get("params"))
        labels[t.name] = f"{label} on recorded {model}"
    var = traces.get("variance")
    if var is not None:
        comp = var.header.get("compressor") or {}
        label = method_label("variance", comp.get("params"))
        for net, path in synthesized.items():
            labels[Path(path).name] = f"{label} on synthesized {net_names[net]}"
    return labels


def paper_note(nets: Iterable[str], variance: Trace, net_names: Mapping[str, str]) -> str:
    """The paragraph saying how the paper-size rows were made: ``nets`` (layer lists of
    ``vgcsim trace synth``, shown by their ``net_names``) synthesized at the
    :func:`settled_density` of the recorded ``variance`` trace."""
    from vgcsim.traces.synth import load_layers

    described = []
    for net in nets:
        layers, flops = load_layers(net)
        n = sum(int(layer["numel"]) for layer in layers)
        described.append(
            f"{net_names[net]} ({n / 1e6:.1f} M parameters, {flops / 1e9:.2g} GFLOP/sample)"
        )
    return (
        f"Paper-size rows: {' and '.join(described)} synthesized (`vgcsim trace synth`) at "
        f"{settled_density(variance) * 100:.2g} % density, the recorded variance trace's "
        "mean over its last 20 % of steps; their compute, codec and decode times are "
        "modelled from their own sizes and FLOPs on each cluster's device; predicted "
        "(closed form) only."
    )


def _reading(params: dict[str, Any]) -> str:
    """The post-send reading of a variance/hybrid compressor, e.g. "after_send=reset"."""
    from vgcsim.traces.labels import compressor_reading

    return compressor_reading("variance", params) or "reading not recorded"


def demo_headline(traces: Mapping[str, Trace], methods: Sequence[str]) -> str:
    """What the demo's numbers rest on: model, parameter count, steps, readings, accuracy
    (``traces``: method -> trace, shown in the order of ``methods``).

    e.g. "small_cnn (38,282 parameters) on mnist, 500 steps of 4 workers × 32 samples;
    test accuracy: dense 98.4 %, variance α=2 (after_send=reset, below_floor=keep,
    variance_scale=batch_mean; density 2.1 % over all steps, 1.2 % over the last 20 %)
    97.9 %, …"
    """
    from vgcsim.reports.tables import final_accuracy
    from vgcsim.traces.labels import method_label

    first = traces[methods[0]]
    config = first.header.get("config") or {}
    n_params = sum(int(layer["numel"]) for layer in first.layers)
    parts = []
    for m in methods:
        t = traces[m]
        comp = t.header.get("compressor") or {}
        params = dict(comp.get("params") or {})
        label = method_label(str(comp.get("name", m)), params)
        detail = []
        if comp.get("name") in ("variance", "hybrid"):
            detail.append(_reading(params))
        steps = t.steps.sort_values("step")
        if comp.get("name") != "dense" and len(steps) and "density" in steps:
            if steps["density"].mean() < 1.0:
                detail.append(
                    f"density {steps['density'].mean() * 100:.2g} % over all steps, "
                    f"{settled_density(t) * 100:.2g} % over the last 20 %"
                )
        acc = final_accuracy(t.evals)
        acc_s = "not evaluated" if acc != acc else f"{acc * 100:.1f} %"
        details = f" ({'; '.join(detail)})" if detail else ""
        parts.append(f"{label}{details} {acc_s}")
    return (
        f"{config.get('model', {}).get('name', '?')} ({n_params:,} parameters) on "
        f"{config.get('data', {}).get('name', '?')}, {first.steps_count} steps of "
        f"{first.workers} workers × {first.header.get('batch_size_per_worker', '?')} samples; "
        f"final test accuracy: {', '.join(parts)}."
    )
