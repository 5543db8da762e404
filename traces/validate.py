"""Checking and summarising traces (torch-free): the invariants behind ``vgcsim trace validate``
(and behind every reader: :func:`vgcsim.traces.io.read_trace` refuses a trace that breaks
one) and the numbers behind ``vgcsim trace info``.

Invariants (:func:`check_trace`): the header against its typed description
(:class:`vgcsim.traces.schema.TraceHeader`: types, ranges, finiteness) and consistent with
itself (layers indexed 0..L-1, numel = prod(shape), dense bytes = 4 × Σ numel, primary
encoding listed, encodings unique); each table's columns against ``schema.*_TABLE`` (type,
finite, range; NaN only in the optional step columns, "not measured"); steps contiguous
from 0 and unique; exactly one payload row per (step, worker, layer) for every recorded
step; ``0 ≤ sent ≤ numel`` and numel equal to the header's; bits of every encoding within
that encoding's size formula (:data:`ENCODING_BOUNDS`); evaluation steps among the recorded
steps, and a complete recording evaluated where its config says (every ``eval_every`` steps
and its last step).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from vgcsim.core.errors import TraceError
from vgcsim.traces import schema
from vgcsim.traces.reading import Trace, printable, read_trace_parts
from vgcsim.traces.wire import sizes

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


def _gap_bounds(
    code_len: Callable[[np.ndarray], np.ndarray], numel: np.ndarray, sent: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Gap-coded sparse: header + values (4-bit codes or fp32) + Elias codes of index gaps.

    Each gap g >= 1 costs at least one bit; the gaps of k sorted indices sum to at most n,
    so by Jensen (code length is concave in g) the stream is at most k * L(n / k).
    ``code_len`` is the Elias code's length in bits for a log2 ratio (bound with
    functools.partial in :data:`ENCODING_BOUNDS`).
    """
    lo = SPARSE_HEADER_BITS[0] + 4 * sent + sent
    hi = (
        SPARSE_HEADER_BITS[1]
        + 32 * sent
        + np.ceil(sent * code_len(_log2_ratio(numel, sent)))
        + PAD_BITS
    )
    return lo, hi


def _packed32_bounds(numel: np.ndarray, sent: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    exact = sizes.packed32_bits(numel, sent)
    return exact, exact


def _coo64_bounds(numel: np.ndarray, sent: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return sizes.coo64_bits(sent, coded=False), sizes.coo64_bits(sent, coded=True)


def _bitmap_bounds(numel: np.ndarray, sent: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    lo = SPARSE_HEADER_BITS[0] + numel + 4 * sent
    return lo, SPARSE_HEADER_BITS[1] + numel + 32 * sent + PAD_BITS


def _dense_bounds(
    bits_per_element: int, numel: np.ndarray, sent: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Dense: exactly the header and ``bits_per_element`` per element (bound with
    functools.partial in :data:`ENCODING_BOUNDS`)."""
    exact = sizes.dense_bits(numel, bits_per_element)
    return exact, exact


def _lowrank_bounds(numel: np.ndarray, sent: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    # PowerSGD's allreduced buffers: exactly 32 bits per sent fp32 element, no header
    return 32 * sent, 32 * sent


def _qsgd_bounds(numel: np.ndarray, sent: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    # header, then at least one bit per element or one norm per bucket; at most a norm
    # per element plus sign, level and gap codes (very loose: sizes depend on s and d)
    return DENSE_HEADER_BITS + 0 * numel, DENSE_HEADER_BITS + 128 * numel + PAD_BITS


#: encoding -> (numel, sent) -> (lowest, highest) bit count its wire format allows
#: (formats: :mod:`vgcsim.traces.wire.sizes`; values as 4-bit codes or fp32).
#: The parametrised ones are partials of module functions rather than closures built at
#: import, so mutation testing reaches their bodies (docs/testing.md).
ENCODING_BOUNDS: dict[str, Bounds] = {
    "fp32": functools.partial(_dense_bounds, sizes.DENSE_ELEMENT_BITS["fp32"]),
    "fp16": functools.partial(_dense_bounds, sizes.DENSE_ELEMENT_BITS["fp16"]),
    "packed32": _packed32_bounds,
    "coo64": _coo64_bounds,
    "bitmap": _bitmap_bounds,
    "gap_elias_gamma": functools.partial(_gap_bounds, sizes.elias_gamma_bits),
    "gap_elias_delta": functools.partial(_gap_bounds, sizes.elias_delta_bits_envelope),
    "lowrank_fp32": _lowrank_bounds,
    "qsgd_fixed": _qsgd_bounds,
    "qsgd_elias": _qsgd_bounds,
}

_MAX_LISTED = 8


def _examples(df: pd.DataFrame, mask: np.ndarray, cols: list[str]) -> str:
    rows = df.loc[mask, cols].head(3).to_dict("records")
    return "; e.g. " + ", ".join(str(r) for r in rows)


def check_trace(trace: Trace) -> list[str]:
    """Every violated invariant of ``trace`` as a one-line message (empty list: valid)."""
    return trace_problems(trace.header, trace.payloads, trace.steps, trace.evals) + (
        [] if trace.ranks is None else rank_problems(trace.header, trace.ranks, trace.steps)
    )


def rank_problems(header: Mapping[str, Any], ranks: pd.DataFrame, steps: pd.DataFrame) -> list[str]:
    """The optional ranks table (traces the DDP hook writes): the column types and ranges of
    ``schema.RANK_TABLE``, one row per recorded step and rank, ranks below W."""
    problems, ok = _column_problems(ranks, "ranks", schema.RANK_TABLE, None)
    if not ok or not {"step", "rank"} <= set(ranks.columns) or "step" not in steps.columns:
        return problems
    workers = header.get("workers")
    if isinstance(workers, int) and (ranks["rank"] >= workers).any():
        problems.append(f"ranks table names a rank outside 0..{workers - 1}")
    if ranks.duplicated(["step", "rank"]).any():
        problems.append("ranks table has more than one row for a step and rank")
    if not ranks["step"].isin(steps["step"]).all():
        problems.append("ranks table refers to steps that are not in the steps table")
    return problems


def trace_problems(
    header: Any, payloads: pd.DataFrame, steps: pd.DataFrame, evals: pd.DataFrame
) -> list[str]:
    """Every violated invariant of a trace given as its header and three tables."""
    problems = header_problems(header)
    if schema.header_type_problems(header):  # the tables cannot be read against a bad header
        return problems
    return problems + table_problems(header, payloads, steps, evals)


def header_problems(header: Any) -> list[str]:
    """Every violated rule of the header alone: types and ranges first; the relations between
    fields only when the types are right (they read the fields as numbers and lists)."""
    problems = schema.header_type_problems(header)
    if problems:
        return problems
    h = header
    layers = h["layers"]
    if [layer["index"] for layer in layers] != list(range(len(layers))):
        problems.append("header layers are not indexed 0..L-1 in order")
    for layer in layers:
        if layer["numel"] != math.prod(layer["shape"]):
            problems.append(
                f"header layer {layer['name']!r}: numel {layer['numel']} != prod(shape {layer['shape']})"
            )
    total = sum(layer["numel"] for layer in layers)
    if h["dense_bytes_per_step"] != 4 * total:
        problems.append(
            f"header dense_bytes_per_step {h['dense_bytes_per_step']} != 4 x total numel {4 * total}"
        )
    if h["primary_encoding"] not in h["encodings"]:
        problems.append(
            f"primary encoding {h['primary_encoding']!r} is not among encodings {h['encodings']}"
        )
    if len(set(h["encodings"])) != len(h["encodings"]):
        problems.append(f"header encodings {h['encodings']} name an encoding twice")
    return problems


_KIND_NAMES = {"int": "integers", "float": "numbers"}


def _column_problems(
    df: pd.DataFrame, table: str, columns: tuple[schema.Column, ...], extra: schema.Column | None
) -> tuple[list[str], bool]:
    """Type, finiteness and range of each described column (``extra``: the description of
    columns not listed, e.g. ``bits_*``). Returns (problems, types_ok)."""
    described = {c.name: c for c in columns}
    problems: list[str] = []
    types_ok = True
    for name in df.columns:
        col = described.get(name, extra)
        series = df[name]
        if col is None:  # a column this version does not describe: numbers must be finite
            if pd.api.types.is_numeric_dtype(series) and not pd.api.types.is_bool_dtype(series):
                if not np.isfinite(series.to_numpy(dtype=np.float64, na_value=np.nan)).all():
                    problems.append(f"{table} column {name} contains NaN or Inf")
            continue
        if pd.api.types.is_bool_dtype(series) or not pd.api.types.is_numeric_dtype(series):
            problems.append(
                f"{table} column {name} has type {series.dtype}; expected {_KIND_NAMES[col.kind]}"
            )
            types_ok = False
            continue
        values = series.to_numpy(dtype=np.float64, na_value=np.nan)
        finite = np.isfinite(values)
        if col.nan_ok:
            finite |= np.isnan(values)
        if not finite.all():
            problems.append(f"{table} column {name} contains NaN or Inf")
            if col.kind == "int":
                types_ok = False
            continue
        if col.kind == "int" and (
            not np.array_equal(values, np.round(values)) or (np.abs(values) > 2.0**62).any()
        ):
            problems.append(f"{table} column {name} has values that are not int64 integers")
            types_ok = False
            continue
        known = values[~np.isnan(values)]
        if col.le is not None and ((known < col.ge) | (known > col.le)).any():
            problems.append(f"{table} column {name} is outside [{col.ge:g}, {col.le:g}]")
        elif col.ge is not None and (known < col.ge).any():
            what = (
                "seconds"
                if name.endswith("_s")
                else "bits"
                if name.startswith("bits_")
                else "values"
            )
            problems.append(f"{table} column {name} has negative {what}")
    return problems, types_ok


def _expected_eval_steps(header: Mapping[str, Any], step_ids: np.ndarray) -> set[int] | None:
    """Steps a complete recording evaluated (the training loop evaluates every ``eval_every``
    steps and at its last step), or None where the header does not say (synthetic traces)."""
    cfg = header.get("config")
    if header.get("synthetic") or header.get("status") != "complete" or not isinstance(cfg, dict):
        return None
    every, steps = cfg.get("eval_every"), cfg.get("steps")
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in (every, steps)):
        return None
    if every < 0 or steps < 1 or len(step_ids) != steps:
        return None
    return {int(s) for s in step_ids if (every and (s + 1) % every == 0) or s == steps - 1}


def table_problems(
    header: Mapping[str, Any], payloads: pd.DataFrame, steps: pd.DataFrame, evals: pd.DataFrame
) -> list[str]:
    """Every violated rule of the three tables (``header`` must pass :func:`header_problems`)."""
    problems: list[str] = []
    if steps.empty:
        problems.append(
            "the trace has no recorded steps (recording stopped before its first chunk)"
        )
    found, steps_ok = _column_problems(steps, "steps", schema.STEP_TABLE, None)
    problems += found
    if not steps_ok or "step" not in steps.columns:
        return problems
    step_ids = steps["step"].to_numpy()
    if len(step_ids) and not np.array_equal(step_ids, np.arange(len(step_ids))):
        problems.append(
            "steps are not contiguous from 0 (missing, repeated or out-of-order step numbers)"
        )
    recorded = header.get("steps_recorded")
    if header["status"] == "complete" and recorded is not None and recorded != len(steps):
        problems.append(
            f"header says {recorded} steps were recorded but the steps table has {len(steps)}"
        )

    problems += _check_payloads(header, payloads, set(step_ids.tolist()))

    found, evals_ok = _column_problems(evals, "evals", schema.EVAL_TABLE, None)
    problems += found
    if evals_ok and len(evals) and not evals["step"].isin(step_ids).all():
        problems.append("evals refer to steps that are not in the steps table")
        evals_ok = False
    expected = _expected_eval_steps(header, step_ids)
    if evals_ok and expected is not None:
        have = set(evals["step"].astype(np.int64).tolist()) if len(evals) else set()
        missing = sorted(expected - have)
        if missing:
            problems.append(
                f"evals lack {len(missing)} of the {len(expected)} evaluations a complete "
                f"recording makes (config eval_every, and the last step), e.g. step {missing[0]}; "
                "was the evals folder or a chunk of it deleted?"
            )
    return problems


def _check_payloads(header: Mapping[str, Any], p: pd.DataFrame, step_ids: set[int]) -> list[str]:
    encodings = header["encodings"]
    problems, types_ok = _column_problems(
        p, "payloads", schema.PAYLOAD_TABLE + schema.OPTIONAL_PAYLOAD_TABLE, schema.BITS_COLUMN
    )
    if not types_ok:
        return problems
    workers = header["workers"]
    layers = header["layers"]
    n_layers = len(layers)
    expected_rows = len(step_ids) * workers * n_layers
    if len(p) != expected_rows:
        problems.append(
            f"payloads has {len(p)} rows; expected steps x workers x layers = "
            f"{len(step_ids)} x {workers} x {n_layers} = {expected_rows}"
        )
    if p.duplicated(["step", "worker", "layer"]).any():
        problems.append("payloads has repeated (step, worker, layer) rows")
    if not set(p["step"].unique().tolist()) <= step_ids:
        problems.append("payloads has rows for steps that are not in the steps table")
    bad_w = (p["worker"] < 0) | (p["worker"] >= workers)
    if bad_w.any():
        problems.append(f"payloads worker outside 0..{workers - 1}")
    bad_l = (p["layer"] < 0) | (p["layer"] >= n_layers)
    if bad_l.any():
        problems.append(f"payloads layer outside 0..{n_layers - 1}")
        return problems
    if p.empty:  # nothing to check per row (and an empty column cannot index numel_h)
        return problems
    numel_h = np.array([layer["numel"] for layer in layers], dtype=np.int64)
    numel = p["numel"].to_numpy()
    sent = p["sent"].to_numpy()
    mism = numel != numel_h[p["layer"].to_numpy().astype(np.int64)]
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
    if {"lowrank_p_elements", "lowrank_q_elements"} <= set(p.columns):
        pq = p["lowrank_p_elements"].to_numpy() + p["lowrank_q_elements"].to_numpy()
        off = (pq > 0) & (pq != sent)
        if off.any():
            problems.append(
                "payloads sent differs from lowrank_p_elements + lowrank_q_elements"
                + _examples(p, off, ["step", "worker", "layer", "sent"])
            )
    if "union_prefix" in p.columns:
        union = p["union_prefix"].to_numpy()
        off = (union > numel) | ((p["worker"].to_numpy() == 0) & (union != sent))
        if off.any():
            problems.append(
                "payloads union_prefix exceeds numel or differs from worker 0's sent"
                + _examples(p, off, ["step", "worker", "layer", "sent", "union_prefix"])
            )
        ordered = p.sort_values(["step", "layer", "worker"])
        steps_back = ordered.groupby(["step", "layer"])["union_prefix"].diff() < 0
        if steps_back.any():
            problems.append("payloads union_prefix decreases from one worker to the next")
    for enc in encodings:
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
    trace = path if isinstance(path, Trace) else read_trace_parts(path)
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


def recording_info(header: dict[str, Any]) -> dict[str, Any]:
    """What a trace was recorded from: model, dataset, optimizer, the compressor's reading,
    device and CPU (None where the header does not say: a synthetic trace, an older one)."""
    from vgcsim.traces.labels import compressor_reading

    def table(value: Any) -> dict[str, Any]:  # fields a newer writer added may be anything
        return value if isinstance(value, dict) else {}

    config = table(header.get("config"))
    model = table(config.get("model"))
    data = table(header.get("dataset")) or table(config.get("data"))
    optimizer = table(config.get("optimizer"))
    machine = table(header.get("machine"))
    comp = table(header.get("compressor"))
    device = header.get("device")
    return {
        # a synthetic trace names its layer list instead of a model
        "model": model.get("name") or config.get("layers"),
        "dataset": {k: data[k] for k in ("name", "train", "test", "num_classes") if k in data}
        or None,
        "optimizer": {
            k: optimizer[k]
            for k in ("name", "lr", "momentum", "weight_decay", "schedule", "milestones", "gamma")
            if k in optimizer
        }
        or None,
        "reading": None
        if header.get("synthetic")
        else compressor_reading(str(comp.get("name", "")), comp.get("params") or {}),
        "device": device if isinstance(device, dict) else None,
        "cpu_model": machine.get("cpu_model"),
        "processor": machine.get("processor"),
    }


def trace_info(trace: Trace) -> dict[str, Any]:
    """The summary ``vgcsim trace info`` prints (JSON-able).

    ``status`` is the header's; ``state`` is what is true now (``interrupted`` for a
    ``running`` header whose writer is gone, :mod:`vgcsim.traces.health`), ``state_line``
    says it in words, ``divergence`` is the run's divergence verdict (None: healthy) and
    ``caveats`` the lines predict, simulate and report warn with.
    """
    from vgcsim.traces import health

    h = trace.header
    ev = trace.evals
    last_eval = ev.iloc[-1].to_dict() if len(ev) else {}
    steps = trace.steps
    seconds = {c: float(steps[c].sum()) for c in steps.columns if c.endswith("_s")}
    return {
        "path": printable(trace.path),
        "name": trace.name,
        "status": trace.status,
        "state": health.trace_state(trace),
        "state_line": health.state_line(trace),
        "stop_reason": h.get("stop_reason"),
        "synthetic": trace.synthetic,
        "divergence": health.trace_divergence(trace),
        "caveats": health.caveats(trace),
        "recording": recording_info(h),
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
