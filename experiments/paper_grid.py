"""The paper's grid (Tsuzuku et al. 2018, Table 1) on our offline workload, as one script.

``python experiments/paper_grid.py [--steps N] [--out runs/paper_grid] [--set KEY=VALUE]
[--methods SLUG,...] [--optimizers NAME,...] [--table docs/paper_grid.md]`` records every
method of the grid with Adam and with momentum SGD, then writes a markdown table of final
test accuracy, compression ratio (dense fp32 bits / sent bits under each trace's primary
encoding, over the whole run and over its last 20 % of steps) and density beside the
paper's CIFAR-10 numbers. Finished traces are reused, so an interrupted grid resumes.

Methods: dense; variance α ∈ {1, 1.5, 2} (the default reading: after_send "reset",
below_floor "keep", variance_scale "batch_mean") and, at α = 2, each alternative reading
alone (error_feedback, floor, per_sample) and the earlier rule (error_feedback + floor);
Strom τ ∈ {0.001, 0.01, 0.1}; hybrid τ ∈ {0.01, 0.1} with α = 2; QSGD 2 bit d = 128,
3 bit d = 512, 4 bit d = 512. ``--methods`` and ``--optimizers`` pick a subset (comma-separated;
a method by its slug, the label in lower case without spaces: ``variance_alpha1.5``,
``strom_tau0.01``, ``hybrid_alpha2_tau0.1``, ``qsgd_2_bit_d128``; its run folder has that name).

Settling: the last 20 % of steps are split into two halves; the trace counts as settled
when the two halves' densities differ by under 10 % (``drift_last20`` is that relative
difference).
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from vgcsim.core.config import apply_overrides
from vgcsim.core.errors import TraceError, TrainingDivergedError, VgcsimError, unknown_name
from vgcsim.traces import schema
from vgcsim.traces.io import read_trace
from vgcsim.traces.labels import method_label, slug
from vgcsim.traces.paper import PAPER_TABLE1
from vgcsim.traces.training.record import RecordConfig, record
from vgcsim.traces.validate import compression_ratios

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Method:
    """One row of the grid: a compressor and its hyperparameters, named by its method label
    (:func:`vgcsim.traces.labels.method_label`, as in reports and the paper's table)."""

    compressor: str
    params: tuple[tuple[str, float | int | str], ...] = ()

    @property
    def label(self) -> str:
        return method_label(self.compressor, dict(self.params))

    @property
    def slug(self) -> str:
        """The run folder's name and the ``--methods`` name, e.g. ``hybrid_alpha2_tau0.1``."""
        return slug(self.label)


METHODS: tuple[Method, ...] = (
    Method("dense"),
    Method("variance", (("alpha", 1.0),)),
    Method("variance", (("alpha", 1.5),)),
    Method("variance", (("alpha", 2.0),)),
    Method("variance", (("alpha", 2.0), ("after_send", "error_feedback"))),
    Method("variance", (("alpha", 2.0), ("below_floor", "floor"))),
    Method("variance", (("alpha", 2.0), ("variance_scale", "per_sample"))),
    Method(
        "variance", (("alpha", 2.0), ("after_send", "error_feedback"), ("below_floor", "floor"))
    ),
    Method("strom", (("tau", 0.001),)),
    Method("strom", (("tau", 0.01),)),
    Method("strom", (("tau", 0.1),)),
    Method("hybrid", (("tau", 0.01), ("alpha", 2.0))),
    Method("hybrid", (("tau", 0.1), ("alpha", 2.0))),
    Method("qsgd", (("bits", 2), ("bucket_size", 128))),
    Method("qsgd", (("bits", 3), ("bucket_size", 512))),
    Method("qsgd", (("bits", 4), ("bucket_size", 512))),
)

#: optimizer label -> overrides. Momentum SGD uses a larger base learning rate, as usual.
OPTIMIZERS: dict[str, tuple[str, ...]] = {
    "adam": ("optimizer.name=adam", "optimizer.lr=0.001"),
    "momentum_sgd": ("optimizer.name=momentum_sgd", "optimizer.lr=0.05", "optimizer.momentum=0.9"),
}

#: The paper's CIFAR-10 results (accuracy %, ratio ×), keyed by (optimizer, method label).
PAPER_CIFAR10 = PAPER_TABLE1
#: Relative change between the two halves of the last 20 % of steps under which a trace's
#: density counts as settled.
SETTLED_DRIFT = 0.10


def select(names: str | None, valid: Sequence[str], what: str) -> list[str]:
    """The comma-separated ``names`` (all of ``valid`` when None); ConfigError for others."""
    if names is None:
        return list(valid)
    picked = [n.strip() for n in names.split(",") if n.strip()]
    for n in picked:
        if n not in valid:
            raise unknown_name(what, n, valid)
    return picked


def method_config(base: RecordConfig, method: Method, optimizer: str) -> RecordConfig:
    """The RecordConfig of one grid cell."""
    overrides = [f"compressor.name={method.compressor}"]
    overrides += [f"compressor.{k}={v}" for k, v in method.params]
    return apply_overrides(base, overrides + list(OPTIMIZERS[optimizer]))


def run_grid(
    base: RecordConfig,
    out: Path,
    *,
    progress: bool = False,
    methods: Sequence[Method] | None = None,
    optimizers: Sequence[str] | None = None,
) -> pd.DataFrame:
    """Record every (optimizer, method) not yet complete under ``out``; return the table.

    ``methods`` / ``optimizers`` pick a subset (default: all of :data:`METHODS` and
    :data:`OPTIMIZERS`).
    """
    methods = METHODS if methods is None else methods
    optimizers = list(OPTIMIZERS) if optimizers is None else optimizers
    rows = []
    for optimizer in optimizers:
        for method in methods:
            run_dir = out / optimizer / method.slug
            cfg = method_config(base, method, optimizer)
            status = _status(run_dir)
            if status != "complete":
                t0 = time.perf_counter()
                try:
                    record(cfg, run_dir, progress=progress, overwrite=True)
                except TrainingDivergedError as exc:
                    log.warning("%s / %s diverged: %s", optimizer, method.label, exc)
                log.info(
                    "%s / %s recorded in %.0f s", optimizer, method.label, time.perf_counter() - t0
                )
            rows.append(_row(run_dir, optimizer, method))
    return pd.DataFrame(rows)


def _status(run_dir: Path) -> str | None:
    try:
        return read_trace(run_dir).status
    except TraceError:
        return None


def settling(payloads: pd.DataFrame, encoding_column: str) -> dict:
    """Density at the start and end of a trace, and whether it has settled.

    Per-step density = Σ sent / Σ numel over workers and layers. Returns
    ``density_first10`` (first 10 % of steps), ``density_last20`` (last 20 %),
    ``drift_last20`` (|d_b − d_a| / d_a for the two halves a, b of the last 20 %; 0 when
    both are 0), ``settled`` (drift under :data:`SETTLED_DRIFT`) and ``ratio_last20``
    (dense fp32 bits / ``encoding_column`` bits over the last 20 %).
    """
    g = payloads.groupby("step")
    per_step = pd.DataFrame(
        {"sent": g["sent"].sum(), "numel": g["numel"].sum(), "bits": g[encoding_column].sum()}
    ).sort_index()
    n = len(per_step)
    first = per_step.iloc[: max(1, n // 10)]
    last = per_step.iloc[n - max(2, n // 5) :]
    half = len(last) // 2
    a, b = last.iloc[:half], last.iloc[half:]

    def density(df: pd.DataFrame) -> float:
        return float(df["sent"].sum() / df["numel"].sum())

    da, db = density(a), density(b)
    drift = abs(db - da) / da if da > 0 else (0.0 if db == 0 else float("inf"))
    bits = float(last["bits"].sum())
    return {
        "density_first10": density(first),
        "density_last20": density(last),
        "drift_last20": drift,
        "settled": drift < SETTLED_DRIFT,
        "ratio_last20": 32.0 * float(last["numel"].sum()) / bits if bits > 0 else float("inf"),
    }


def _row(run_dir: Path, optimizer: str, method: Method) -> dict:
    t = read_trace(run_dir)
    ratio = compression_ratios(t)
    acc = float(t.evals["test_acc"].iloc[-1]) * 100 if len(t.evals) else float("nan")
    paper_acc, paper_ratio = PAPER_CIFAR10.get((optimizer, method.label), (None, None))
    best_sparse = max(
        (r for e, r in ratio.items() if e != "fp32"), default=ratio[t.primary_encoding]
    )
    return {
        "optimizer": optimizer,
        "method": method.label,
        "test_acc_pct": acc,
        "ratio_primary": ratio[t.primary_encoding],
        "primary_encoding": t.primary_encoding,
        "ratio_best": best_sparse,
        "density": float(t.payloads["sent"].sum() / t.payloads["numel"].sum()),
        **settling(t.payloads, schema.BITS_PREFIX + t.primary_encoding),
        "parameters": int(t.payloads.groupby("layer")["numel"].first().sum()),
        "steps": t.steps_count,
        "status": t.status,
        "paper_acc_pct": paper_acc,
        "paper_ratio": paper_ratio,
    }


def _fmt(x: float | None, spec: str, suffix: str = "") -> str:
    if x is None or x != x:
        return "—"
    return format(x, spec) + suffix


def to_markdown(df: pd.DataFrame) -> str:
    """The grid as a markdown table (ours beside the paper's CIFAR-10 numbers)."""
    lines = [
        "| optimizer | method | test acc % | ratio (primary) | last 20 % | encoding | "
        "ratio (best encoding) | density | first 10 % | last 20 % | settled (drift) | "
        "paper acc % | paper ratio |",
        "|---|---|---:|---:|---:|---|---:|---:|---:|---:|---|---:|---:|",
    ]
    for r in df.to_dict("records"):
        note = "" if r["status"] == "complete" else f" ({r['status']} at step {r['steps']})"
        settled = "yes" if r["settled"] else "**no**"
        lines.append(
            f"| {r['optimizer']} | {r['method']}{note} | {_fmt(r['test_acc_pct'], '.1f')} | "
            f"{_fmt(r['ratio_primary'], ',.1f', '×')} | {_fmt(r['ratio_last20'], ',.1f', '×')} | "
            f"{r['primary_encoding']} | {_fmt(r['ratio_best'], ',.1f', '×')} | "
            f"{_fmt(r['density'], '.2e')} | {_fmt(r['density_first10'], '.2e')} | "
            f"{_fmt(r['density_last20'], '.2e')} | {settled} ({_fmt(100 * r['drift_last20'], '.0f')} %) | "
            f"{_fmt(r['paper_acc_pct'], '.1f')} | {_fmt(r['paper_ratio'], ',.1f', '×')} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", default="runs/paper_grid", help="folder of the grid's traces")
    parser.add_argument("--steps", type=int, default=150, help="training steps per cell")
    parser.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", help="override for every cell"
    )
    parser.add_argument(
        "--methods", help="comma-separated method slugs, e.g. strom_tau0.01 (default: all)"
    )
    parser.add_argument("--optimizers", help="comma-separated optimizers (default: all)")
    parser.add_argument("--table", help="write the markdown table to this file")
    parser.add_argument("-q", "--quiet", action="store_true")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    try:
        base = apply_overrides(RecordConfig(), [f"steps={args.steps}", "eval_every=0", *args.set])
        by_slug = {m.slug: m for m in METHODS}
        methods = [by_slug[m] for m in select(args.methods, list(by_slug), "method")]
        optimizers = select(args.optimizers, list(OPTIMIZERS), "optimizer")
    except VgcsimError as exc:
        parser.exit(2, f"{parser.prog}: error: {exc}\n")
    df = run_grid(
        base, Path(args.out), progress=not args.quiet, methods=methods, optimizers=optimizers
    )
    table = to_markdown(df)
    df.to_csv(Path(args.out) / "grid.csv", index=False)
    if args.table:
        Path(args.table).write_text(table, encoding="utf-8")
    sys.stdout.write(table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
