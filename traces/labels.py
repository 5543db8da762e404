"""Method labels: the one name of a compressor configuration that every stage shows.

A label names a compressor and the hyperparameters a reader compares by ("variance α=2",
"Strom τ=0.01", "hybrid α=2, τ=0.1", "QSGD 2 bit, d=128", "dense"). Each compressor module
says how its label reads (``Compressor.label``); reports, the cost-model scenario, the paper's
reference table and the paper-grid script all take their labels from :func:`method_label`,
so one configuration has one name everywhere. The registry is imported when a label is
asked for (it needs no torch), not when this module is.

``READING_DEFAULTS``, ``READING_KEYS``, ``reading_suffix`` and ``label_number`` are defined
by the compressor modules (:mod:`~vgcsim.traces.compression.compressors.variance_based`,
:mod:`~vgcsim.traces.compression.base`) and named here for the callers that import them
from this module.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from vgcsim.traces.compression.base import label_number
from vgcsim.traces.compression.compressors.variance_based import (
    READING_DEFAULTS,
    READING_KEYS,
    reading_suffix,
)

__all__ = [
    "READING_DEFAULTS",
    "READING_KEYS",
    "compressor_reading",
    "label_number",
    "method_label",
    "reading_suffix",
    "slug",
]


def method_label(name: str, params: Mapping[str, Any] | None) -> str:
    """Human label of a compressor and its key hyperparameters, e.g. "variance α=2": the
    registered compressor's ``label``; a name the registry does not know (a trace of another
    version) shows up to two scalar hyperparameters."""
    from vgcsim.traces.compression.compressors import COMPRESSORS

    params = dict(params or {})
    if name in COMPRESSORS:
        return COMPRESSORS[name].label(params)
    shown = [
        f"{k}={label_number(v)}"
        for k, v in sorted(params.items())
        if isinstance(v, (int, float, str))
    ][:2]
    return f"{name} {', '.join(shown)}" if shown else name


def compressor_reading(name: str, params: Mapping[str, Any] | None) -> str | None:
    """Which reading of the paper a variance-test compressor ran, e.g. "after_send=reset,
    below_floor=keep, variance_scale=batch_mean"; "reading not recorded" for one whose header
    predates these parameters; None for a compressor without readings (``readings`` of its
    class empty and none of the keys in ``params``)."""
    from vgcsim.traces.compression.compressors import COMPRESSORS

    params = dict(params or {})
    has_readings = name in COMPRESSORS and bool(COMPRESSORS[name].readings)
    if not has_readings and not any(k in params for k in READING_KEYS):
        return None
    shown = [f"{k}={params[k]}" for k in READING_KEYS if k in params]
    return ", ".join(shown) if shown else "reading not recorded"


def slug(label: str) -> str:
    """A label as a folder or option name: lower case, no spaces, commas or brackets
    ("hybrid α=2, τ=0.1" -> "hybrid_alpha2_tau0.1")."""
    s = label.lower().replace("α=", "alpha").replace("τ=", "tau")
    for ch in "(),":
        s = s.replace(ch, " ")
    s = s.replace("=", "").replace("+", " ")
    return "_".join(s.split())
