"""What a trace's numbers can be trusted for: partial recordings and diverged training.

Two things make a valid trace a poor input to ``predict``, ``simulate`` and ``report``:

- **A partial recording.** A header says ``running`` from the moment a recorder starts
  until it finishes, so a recorder killed with SIGKILL (or a lost machine) leaves
  ``running`` behind. A live recorder holds an exclusive ``flock`` on the run folder
  (:class:`vgcsim.traces.io.TraceWriter`); the kernel drops it when the process ends,
  however it ends, so "running and nobody holds the lock" is an interrupted recording
  (:func:`trace_state`). Its steps are a valid prefix; ``vgcsim record --resume RUN``
  continues it.
- **Diverged training** (:func:`divergence`). A step whose loss or gradients are NaN/Inf stops
  the recorder (``stop_reason``). A finite but exploding loss (an optimizer's learning rate
  far too high: Adam at lr = 1e6 reaches a loss of 1e31 within a few steps) runs to the end
  and its gradients, all clipped into the compressor's code range, send little: the ratio
  flatters a run that learned nothing. The rules, each checked on the recorded tables:

  * *exploded*: the median loss of the last ``k`` steps (``k`` = a tenth of the steps, 1 to
    10) is above :data:`EXPLODE_FACTOR` times the first step's loss, the loss of the
    initial model (step 0's loss is computed before the first update). A training loss that
    grows tenfold is no noise: cross-entropy starts at about ln C and only falls while a
    run learns.
  * *at chance*: the last evaluation's test accuracy is within :data:`CHANCE_SIGMAS`
    binomial standard deviations of chance, 1/C over ``n`` test samples
    (1/C + 3·sqrt((1/C)(1 − 1/C)/n)), after at least :data:`MIN_STEPS_FOR_CHANCE` steps and
    with a final loss no lower than the first: a short run may still be near chance (not
    judged where the header gives neither C nor n).

  Either makes the run diverged; the verdict names every rule that holds. The recorder
  writes it into the header (``divergence``, None when healthy); traces written before the
  field existed are judged from their tables.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pandas as pd

from vgcsim.traces.lock import being_written
from vgcsim.traces.reading import Trace, printable

#: the last steps' median loss above this multiple of the first steps' is an exploded loss
EXPLODE_FACTOR = 10.0
#: test accuracy within this many binomial standard deviations of 1/C is at chance
CHANCE_SIGMAS = 3.0
#: a run shorter than this may still be at chance without having diverged
MIN_STEPS_FOR_CHANCE = 20
#: the stop reason the recorder writes when a loss or gradient is NaN/Inf
NON_FINITE_REASON = "NaN or Inf in the loss or gradients"


def _window(n: int) -> int:
    return max(1, min(10, n // 10))


def divergence(
    steps: pd.DataFrame,
    evals: pd.DataFrame,
    *,
    num_classes: int | None = None,
    test_samples: int | None = None,
    stop_reason: str | None = None,
) -> dict[str, Any] | None:
    """The divergence verdict of a recording's tables (module docstring), None if healthy.

    ``steps`` needs ``step`` and ``loss``; ``evals`` ``step`` and ``test_acc`` (may be empty).
    The verdict: ``reason`` (one line), ``rules`` (``non_finite``, ``exploded``,
    ``at_chance``), ``step`` (the first step the loss exceeded the explosion bound, or the
    stopping step), ``loss_start``, ``loss_final``, ``test_acc``, ``chance``.
    """
    rules: list[str] = []
    parts: list[str] = []
    step: int | None = None
    if stop_reason and stop_reason.startswith(NON_FINITE_REASON):
        rules.append("non_finite")
        parts.append(stop_reason)
    loss = steps.sort_values("step")[["step", "loss"]] if len(steps) else steps
    start = final = math.nan
    if len(loss) >= 2:
        k = _window(len(loss))
        start = float(loss["loss"].iloc[0])
        final = float(loss["loss"].iloc[-k:].median())
        bound = EXPLODE_FACTOR * start
        if start > 0 and final > bound:
            over = loss[loss["loss"] > bound]
            step = int(over["step"].iloc[0])
            rules.append("exploded")
            parts.append(
                f"loss exploded from {start:.3g} to {final:.3g} "
                f"(over {EXPLODE_FACTOR:g}× its start from step {step})"
            )
    acc = chance = math.nan
    if len(evals) and num_classes and num_classes > 1 and test_samples:
        last = evals.sort_values("step").iloc[-1]
        acc, chance = float(last["test_acc"]), 1.0 / num_classes
        n = int(test_samples)
        ceiling = chance + CHANCE_SIGMAS * math.sqrt(chance * (1 - chance) / n)
        long_enough = int(last["step"]) + 1 >= MIN_STEPS_FOR_CHANCE
        no_progress = not (final < start)  # NaN (a single step) counts as none
        if acc <= ceiling and long_enough and no_progress:
            rules.append("at_chance")
            parts.append(
                f"test accuracy {acc * 100:.1f} % is at chance (1/{num_classes} = "
                f"{chance * 100:.1f} %, {n} samples)"
            )
    if not rules:
        return None
    return {
        "reason": "; ".join(parts),
        "rules": rules,
        "step": step,
        "loss_start": None if math.isnan(start) else start,
        "loss_final": None if math.isnan(final) else final,
        "test_acc": None if math.isnan(acc) else acc,
        "chance": None if math.isnan(chance) else chance,
    }


def _table(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _test_samples(header: dict[str, Any]) -> int | None:
    dataset, config = _table(header.get("dataset")), _table(header.get("config"))
    sizes = [
        v
        for v in (dataset.get("test"), config.get("eval_samples"))
        if isinstance(v, int) and not isinstance(v, bool) and v > 0
    ]
    return min(sizes) if sizes else None


def _num_classes(header: dict[str, Any]) -> int | None:
    n = _table(header.get("dataset")).get("num_classes")
    return n if isinstance(n, int) and not isinstance(n, bool) and n > 1 else None


def trace_divergence(trace: Trace) -> dict[str, Any] | None:
    """The verdict the header records (``divergence``), else the one of its tables; None for
    a healthy or synthetic trace."""
    h = trace.header
    if trace.synthetic:
        return None
    if "divergence" in h:
        return h["divergence"]
    return divergence(
        trace.steps,
        trace.evals,
        num_classes=_num_classes(h),
        test_samples=_test_samples(h),
        stop_reason=h.get("stop_reason"),
    )


def header_divergence(
    header: dict[str, Any], steps: pd.DataFrame, evals: pd.DataFrame
) -> dict[str, Any] | None:
    """:func:`divergence` of a recording about to be finished (the recorder's call)."""
    return divergence(
        steps,
        evals,
        num_classes=_num_classes(header),
        test_samples=_test_samples(header),
        stop_reason=header.get("stop_reason"),
    )


#: what :func:`trace_state` returns beside the header's own statuses
INTERRUPTED = "interrupted"


def trace_state(trace: Trace) -> str:
    """The header's status, except ``running`` without a live writer: ``interrupted``."""
    if trace.status == "running" and not being_written(trace.path):
        return INTERRUPTED
    return trace.status


def state_line(trace: Trace) -> str:
    """How ``trace info`` words the state, e.g. "interrupted (no live writer); resume with
    `vgcsim record --resume RUN`"."""
    state = trace_state(trace)
    path = printable(trace.path)
    if state == INTERRUPTED:
        return f"{INTERRUPTED} (no live writer); resume with `vgcsim record --resume {path}`"
    if state == "running":
        return "running (a live recorder is writing it)"
    reason = trace.header.get("stop_reason")
    return f"{state} — {reason}" if reason else state


def caveats(trace: Trace) -> list[str]:
    """One line per reason not to trust results computed from ``trace`` (empty: none)."""
    path = printable(trace.path)
    state = trace_state(trace)
    planned = _table(trace.header.get("config")).get("steps")
    of = f" of {planned}" if isinstance(planned, int) else ""
    out = []
    if state == INTERRUPTED:
        out.append(
            f"{path} is a partial trace, interrupted (no live writer) after {trace.steps_count}"
            f"{of} steps; resume with `vgcsim record --resume {path}`"
        )
    elif state == "running":
        out.append(
            f"{path} is a partial trace, still being recorded ({trace.steps_count}{of} steps "
            "so far)"
        )
    elif state == "stopped":
        out.append(
            f"{path} is a partial trace, stopped after {trace.steps_count}{of} steps "
            f"({trace.header.get('stop_reason') or 'no reason recorded'})"
        )
    verdict = trace_divergence(trace)
    if verdict:
        out.append(
            f"{path}: training diverged ({verdict['reason']}); its compression figures "
            "describe a run that learned nothing"
        )
    return out


def run_divergence(run_dir: str | Path, header: dict[str, Any]) -> dict[str, Any] | None:
    """:func:`divergence` of the closed chunks in ``run_dir`` under ``header`` (the recorder
    judges what it wrote, resumed runs included, just before it finishes)."""
    from vgcsim.traces import schema
    from vgcsim.traces.reading import chunk_files

    def table(name: str, columns: list[str]) -> pd.DataFrame:
        files = chunk_files(Path(run_dir), name)
        if not files:
            return pd.DataFrame(columns=columns)
        frames = []
        for f in files:
            # through a Python file object: pyarrow cannot open paths that are not UTF-8
            with open(f, "rb") as fh:
                frames.append(pd.read_parquet(fh, columns=columns))
        return pd.concat(frames, ignore_index=True)

    return header_divergence(
        header,
        table(schema.STEPS_TABLE, ["step", "loss"]),
        table(schema.EVALS_TABLE, ["step", "test_acc"]),
    )
