"""Checking and summarising traces (torch-free): the invariants behind ``vgcsim trace validate``
and the numbers behind ``vgcsim trace info``.

Invariants (:func:`check_trace`): known schema version and status; header consistent with
itself (numel = prod(shape), dense bytes = 4 × Σ numel, primary encoding listed); steps
contiguous from 0 and unique; exactly one payload row per (step, worker, layer) for every
recorded step; ``0 ≤ sent ≤ numel`` and numel equal to the header's; bits of every encoding
within that encoding's size formula (:data:`ENCODING_BOUNDS`); no NaN or Inf anywhere
(except NaN, "not measured on this step", in the optional step columns);
accuracies in [0, 1]; evaluation steps among the recorded steps.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from vgcsim.traces import schema
from vgcsim.traces.io import STATUSES, Trace, read_trace
from vgcsim.traces.wire import sizes

from vgcsim.core.errors import TraceError

#: Sparse formats: header of u32 layer, u32 count and (for 4-bit coded values) f32 scale.
SPARSE_HEADER_BITS = (sizes.SPARSE_HEADER_BITS_UNCODED, sizes.SPARSE_HEADER_BITS_CODED)
DENSE_HEADER_BITS = sizes.DENSE_HEADER_BITS
#: Slack for variable-length formats: byte padding of up to two bit streams.
PAD_BITS = 16

Bounds = Callable[[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]


def _log2_ratio(numel: np.ndarray, sent: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        m = np.where(sent > 0, numel / np.maximum(sent, 1), 1.0)
    return np.log2(np.maximum(m, 1.0))


def _gap_bounds(code_len: Callable[[np.ndarray], np.ndarray]) -> Bounds:
    """Gap-coded sparse: header + values (4-bit codes or fp32) + Elias codes of index gaps.

    Each gap g >= 1 costs at least one bit; the gaps of k sorted indices sum to at most n,
    so by Jensen (code length is concave in g) the stream is at most k * L(n / k).
    """

    def bounds(numel: np.ndarray, sent: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        lo = SPARSE_HEADER_BITS[0] + 4 * sent + sent
        hi = (
            SPARSE_HEADER_BITS[1]
            + 32 * sent
            + np.ceil(sent * code_len(_log2_ratio(numel, sent)))
            + PAD_BITS
        )
        return lo, hi

    return bounds


def _packed32_bounds(numel: np.ndarray, sent: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    exact = sizes.packed32_bits(numel, sent)
    return exact, exact


def _coo64_bounds(numel: np.ndarray, sent: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return sizes.coo64_bits(sent, coded=False), sizes.coo64_bits(sent, coded=True)


def _bitmap_bounds(numel: np.ndarray, sent: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    lo = SPARSE_HEADER_BITS[0] + numel + 4 * sent
    return lo, SPARSE_HEADER_BITS[1] + numel + 32 * sent + PAD_BITS


def _dense_bounds(bits_per_element: int) -> Bounds:
    def bounds(numel: np.ndarray, sent: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        exact = sizes.dense_bits(numel, bits_per_element)
        return exact, exact

    return bounds


def _qsgd_bounds(numel: np.ndarray, sent: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    # header, then at least one bit per element or one norm per bucket; at most a norm
    # per element plus sign, level and gap codes (very loose: sizes depend on s and d)
    return DENSE_HEADER_BITS + 0 * numel, DENSE_HEADER_BITS + 128 * numel + PAD_BITS


#: encoding -> (numel, sent) -> (lowest, highest) bit count its wire format allows
#: (formats: :mod:`vgcsim.traces.wire.sizes`; values as 4-bit codes or fp32).
ENCODING_BOUNDS: dict[str, Bounds] = {
    "fp32": _dense_bounds(sizes.DENSE_ELEMENT_BITS["fp32"]),
    "fp16": _dense_bounds(sizes.DENSE_ELEMENT_BITS["fp16"]),
    "packed32": _packed32_bounds,
    "coo64": _coo64_bounds,
    "bitmap": _bitmap_bounds,
    "gap_elias_gamma": _gap_bounds(sizes.elias_gamma_bits),
    "gap_elias_delta": _gap_bounds(sizes.elias_delta_bits_envelope),
    "qsgd_fixed": _qsgd_bounds,
    "qsgd_elias": _qsgd_bounds,
}

_MAX_LISTED = 8


def _examples(df: pd.DataFrame, mask: np.ndarray, cols: list[str]) -> str:
    rows = df.loc[mask, cols].head(3).to_dict("records")
    return "; e.g. " + ", ".join(str(r) for r in rows)


def check_trace(trace: Trace) -> list[str]:
    """Every violated invariant of ``trace`` as a readable message (empty list: valid)."""
    problems: list[str] = []
    h = trace.header
    if h["status"] not in STATUSES:
        problems.append(f"header status {h['status']!r} is not one of {', '.join(STATUSES)}")
    layers = trace.layers
    if [int(layer.get("index", -1)) for layer in layers] != list(range(len(layers))):
        problems.append("header layers are not indexed 0..L-1 in order")
    for layer in layers:
        if int(layer["numel"]) != math.prod(int(d) for d in layer["shape"]):
            problems.append(
                f"header layer {layer['name']!r}: numel {layer['numel']} != prod(shape {layer['shape']})"
            )
    total = sum(int(layer["numel"]) for layer in layers)
    if int(h["dense_bytes_per_step"]) != 4 * total:
        problems.append(
            f"header dense_bytes_per_step {h['dense_bytes_per_step']} != 4 x total numel {4 * total}"
        )
    if trace.primary_encoding not in trace.encodings:
        problems.append(
            f"primary encoding {trace.primary_encoding!r} is not among encodings {trace.encodings}"
        )
    if trace.workers < 1:
        problems.append(f"header workers must be >= 1, got {trace.workers}")

    steps = trace.steps
    if steps.empty:
        problems.append(
            "the trace has no recorded steps (recording stopped before its first chunk)"
        )
    problems += _no_nan(steps, "steps", nan_ok=schema.OPTIONAL_STEP_COLUMNS)
    step_ids = steps["step"].to_numpy()
    if len(step_ids) and not np.array_equal(step_ids, np.arange(len(step_ids))):
        problems.append(
            "steps are not contiguous from 0 (missing, repeated or out-of-order step numbers)"
        )
    for col in steps.columns:
        if col.endswith("_s") and len(steps) and (steps[col] < 0).any():
            problems.append(f"steps column {col} has negative seconds")
    if len(steps) and ((steps["density"] < 0) | (steps["density"] > 1)).any():
        problems.append("steps column density is outside [0, 1]")
    if (
        h["status"] == "complete"
        and "steps_recorded" in h
        and int(h["steps_recorded"]) != len(steps)
    ):
        problems.append(
            f"header says {h['steps_recorded']} steps were recorded but the steps table has {len(steps)}"
        )

    problems += _check_payloads(trace, set(step_ids.tolist()))

    ev = trace.evals
    problems += _no_nan(ev, "evals")
    if len(ev):
        if not ev["step"].isin(step_ids).all():
            problems.append("evals refer to steps that are not in the steps table")
        for col in ("train_acc", "test_acc"):
            if ((ev[col] < 0) | (ev[col] > 1)).any():
                problems.append(f"evals column {col} is outside [0, 1]")
    return problems


def _no_nan(df: pd.DataFrame, table: str, nan_ok: tuple[str, ...] = ()) -> list[str]:
    out = []
    for col in df.columns:
        if pd.api.types.is_numeric_dtype(df[col]):
            values = df[col].to_numpy(dtype=np.float64)
            if col in nan_ok:
                values = values[~np.isnan(values)]
            if not np.isfinite(values).all():
                out.append(f"{table} column {col} contains NaN or Inf")
    return out


def _check_payloads(trace: Trace, step_ids: set[int]) -> list[str]:
    p = trace.payloads
    problems = _no_nan(p, "payloads")
    if problems:
        return problems
    n_layers = len(trace.layers)
    expected_rows = len(step_ids) * trace.workers * n_layers
    if len(p) != expected_rows:
        problems.append(
            f"payloads has {len(p)} rows; expected steps x workers x layers = "
            f"{len(step_ids)} x {trace.workers} x {n_layers} = {expected_rows}"
        )
    if p.duplicated(["step", "worker", "layer"]).any():
        problems.append("payloads has repeated (step, worker, layer) rows")
    if not set(p["step"].unique().tolist()) <= step_ids:
        problems.append("payloads has rows for steps that are not in the steps table")
    bad_w = (p["worker"] < 0) | (p["worker"] >= trace.workers)
    if bad_w.any():
        problems.append(f"payloads worker outside 0..{trace.workers - 1}")
    bad_l = (p["layer"] < 0) | (p["layer"] >= n_layers)
    if bad_l.any():
        problems.append(f"payloads layer outside 0..{n_layers - 1}")
        return problems
    if p.empty:  # nothing to check per row (and an empty column cannot index numel_h)
        return problems
    numel_h = np.array([int(layer["numel"]) for layer in trace.layers], dtype=np.int64)
    numel = p["numel"].to_numpy()
    sent = p["sent"].to_numpy()
    mism = numel != numel_h[p["layer"].to_numpy()]
    if mism.any():
        problems.append(
            "payloads numel differs from the header's layer numel"
            + _examples(p, mism, ["step", "layer", "numel"])
        )
    bad = (sent < 0) | (sent > numel)
    if bad.any():
        problems.append(
            "payloads violate 0 <= sent <= numel"
            + _examples(p, bad, ["step", "worker", "layer", "numel", "sent"])
        )
    for enc in trace.encodings:
        col = schema.BITS_PREFIX + enc
        if col not in p.columns:
            problems.append(f"payloads lacks column {col} for encoding {enc!r}")
            continue
        bits = p[col].to_numpy()
        if (bits < 0).any():
            problems.append(f"payloads column {col} has negative bits")
            continue
        bounds = ENCODING_BOUNDS.get(enc)
        if bounds is None:
            continue
        lo, hi = bounds(numel.astype(np.float64), sent.astype(np.float64))
        out = (bits < lo) | (bits > hi)
        if out.any():
            problems.append(
                f"payloads column {col}: {int(out.sum())} rows have bits outside the {enc} size formula"
                + _examples(p, out, ["step", "worker", "layer", "numel", "sent", col])
            )
    return problems


def validate_trace(path: str | Path | Trace) -> Trace:
    """Read (if needed) and check a trace; raise :class:`TraceError` listing every violation."""
    trace = path if isinstance(path, Trace) else read_trace(path)
    problems = check_trace(trace)
    if problems:
        listed = problems[:_MAX_LISTED]
        more = (
            f"\n  ... and {len(problems) - _MAX_LISTED} more" if len(problems) > _MAX_LISTED else ""
        )
        raise TraceError(f"{trace.path} is not a valid trace:\n  - " + "\n  - ".join(listed) + more)
    return trace


# -- summary ---------------------------------------------------------------------------------


def compression_ratios(trace: Trace) -> dict[str, float]:
    """Per encoding: dense fp32 bits / sent bits over the whole trace (all steps, workers, layers)."""
    p = trace.payloads
    dense = 32.0 * float(p["numel"].sum())
    out = {}
    for enc in trace.encodings:
        sent_bits = float(p[schema.BITS_PREFIX + enc].sum())
        out[enc] = dense / sent_bits if sent_bits > 0 else math.inf
    return out


def layer_ratios(trace: Trace) -> pd.DataFrame:
    """Per layer: name, numel, density and compression ratio under every encoding."""
    p = trace.payloads
    g = p.groupby("layer")
    df = pd.DataFrame({"numel": g["numel"].first(), "density": g["sent"].sum() / g["numel"].sum()})
    dense = 32.0 * g["numel"].sum()
    for enc in trace.encodings:
        df[f"ratio_{enc}"] = dense / g[schema.BITS_PREFIX + enc].sum().replace(0, np.nan)
    names = {int(layer["index"]): layer["name"] for layer in trace.layers}
    df.insert(0, "name", [names.get(int(i), str(i)) for i in df.index])
    return df.reset_index()


def density_over_time(trace: Trace, bins: int = 10) -> list[dict[str, Any]]:
    """Mean density per step range (``bins`` equal ranges of steps)."""
    s = trace.steps
    if not len(s):
        return []
    edges = np.linspace(0, len(s), min(bins, len(s)) + 1).astype(int)
    out = []
    for a, b in zip(edges[:-1], edges[1:], strict=True):
        part = s.iloc[a:b]
        out.append(
            {
                "steps": [int(part["step"].iloc[0]), int(part["step"].iloc[-1])],
                "density": float(part["density"].mean()),
            }
        )
    return out


def trace_info(trace: Trace) -> dict[str, Any]:
    """The summary ``vgcsim trace info`` prints (JSON-able)."""
    h = trace.header
    ev = trace.evals
    last_eval = ev.iloc[-1].to_dict() if len(ev) else {}
    steps = trace.steps
    seconds = {c: float(steps[c].sum()) for c in steps.columns if c.endswith("_s")}
    return {
        "path": str(trace.path),
        "name": trace.name,
        "status": trace.status,
        "stop_reason": h.get("stop_reason"),
        "synthetic": trace.synthetic,
        "compressor": h["compressor"],
        "workers": trace.workers,
        "batch_size_per_worker": h["batch_size_per_worker"],
        "steps": trace.steps_count,
        "layers": len(trace.layers),
        "parameters": sum(int(layer["numel"]) for layer in trace.layers),
        "dense_bytes_per_step": h["dense_bytes_per_step"],
        "flops_per_sample": h["flops_per_sample"],
        "encodings": trace.encodings,
        "primary_encoding": trace.primary_encoding,
        "compression_ratio": compression_ratios(trace),
        "density": float(trace.payloads["sent"].sum() / max(1, trace.payloads["numel"].sum())),
        "density_over_time": density_over_time(trace),
        "final_loss": float(steps["loss"].iloc[-1]) if len(steps) else None,
        "final_eval": {k: (int(v) if k == "step" else float(v)) for k, v in last_eval.items()},
        "seconds": seconds,
        "per_layer": layer_ratios(trace).to_dict("records"),
    }
