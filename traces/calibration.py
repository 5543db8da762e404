"""The link-calibration measurement file: what the sweep times, and how it is written and read.

A measurement file is JSON written by rank 0 of the calibration sweep
(:mod:`vgcsim.traces.training.distributed_calibrate`) and read by ``vgcsim calibrate``
(which fits it, :mod:`vgcsim.models.linkfit`) and ``vgcsim validate`` (which compares it with
the models and the simulator). Version 2::

    {"kind": "vgcsim-calibration", "version": 2, "backend": "gloo", "world_size": 4,
     "nodes": [0, 0, 1, 1],                 # node index of every rank
     "config": {...},                        # the CalibrateConfig that ran
     "machine": {"platform": ..., "processor": ..., "cpu_model": ..., "cpus": ...,
                 "node": ...},               # a trace header's machine keys, and the host name
     "rows": [{"op": "p2p", "size_bytes": 64, "seconds": [...], "pair": [0, 2]}, ...]}

``seconds`` holds one time per timed repetition (the slowest rank's); ``pair`` only on
point-to-point rows; ``back_to_back``, how many back-to-back operations each repetition
averaged (absent in files written before it: one; always one with ``busy_before_s``). Version 1 (one node) has no ``nodes`` and no ``pair``. The reader checks
every field it relies on and refuses a file that breaks one with a single line naming the file,
the field and the rule (:class:`~vgcsim.core.errors.ConfigError`).
"""

from __future__ import annotations

import json
import math
import platform
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vgcsim.core.config import to_dict
from vgcsim.core.errors import ConfigError, unknown_name
from vgcsim.core.provenance import machine_info

#: Operations the sweep can time, by the name used in measurement files and ``--ops``.
OPS = ("p2p", "p2p_intra", "allreduce", "allgather", "allgatherv", "allgatherv_skewed")
#: Operations timed by default (``p2p_intra`` only where a node holds several ranks).
DEFAULT_OPS = ("p2p", "p2p_intra", "allreduce", "allgather", "allgatherv", "allgatherv_skewed")


def skewed_sizes(size_bytes: int, world: int) -> list[int]:
    """Per-rank payloads of ``allgatherv_skewed`` of size ``m``: rank r sends
    ``⌈m·(r+1)/P⌉`` bytes (the last rank m, the first m/P), so every rank pads to m on gloo
    while the ranks' own blocks differ, as compressed gradients do."""
    return [-(-int(size_bytes) * (r + 1) // world) for r in range(world)]


MEASUREMENTS_KIND = "vgcsim-calibration"
MEASUREMENTS_VERSION = 2
#: Versions :func:`read_measurements` accepts (1: one node, no pair or node layout).
READABLE_VERSIONS = (1, 2)
#: Timed repetitions kept even when ``budget_s`` would allow fewer.
MIN_REPEATS = 3
#: Timed repetitions per size by default (``CalibrateConfig.repeats``; ``--repeats``).
DEFAULT_REPEATS = 30
#: Passes through the sweep that its timed repetitions are spread over (``CalibrateConfig``).
DEFAULT_PASSES = 3


def split_repeats(repeats: int, passes: int) -> list[int]:
    """``repeats`` timed repetitions shared out over ``passes`` passes: as even as can be,
    the first passes taking one more where they do not divide (10 over 3: 4, 3, 3), and no
    pass past the ``repeats``-th (2 over 3: 1, 1, 0)."""
    base, extra = divmod(repeats, passes)
    return [base + (i < extra) for i in range(passes)]


def _median(seconds):
    import numpy as np  # here, not at import: ``vgcsim --help`` reads this module's defaults

    return np.median(seconds)


def _min(seconds):
    import numpy as np

    return np.min(seconds)


#: How repetitions of one (op, size) become its measurement: the median is what a training
#: step sees (OS noise included); the minimum is the network's best case.
STATISTICS = {"median": _median, "min": _min}
#: ``vgcsim calibrate`` refuses to write a cluster file above this typical error of the fit
#: (exp(rms log ratio) − 1; :func:`vgcsim.models.linkfit.fit_link`).
DEFAULT_MAX_ERROR = 0.25


#: From this size up, a size range steps by 2 instead of 4 (:func:`sizes_between`).
FINE_FROM_BYTES = 1 << 20


def sizes_between(
    lo_bytes: int, hi_bytes: int, factor: int = 4, fine_from_bytes: int = FINE_FROM_BYTES
) -> tuple[int, ...]:
    """``lo, lo·factor, lo·factor², …`` below ``hi``, then ``hi`` itself (log-spaced), each
    step ×2 instead of ×``factor`` once a size reaches ``fine_from_bytes``.

    The finer steps are where the per-byte costs change with size: the host copies of an
    allgatherv cost more per byte once its gathered buffer outgrows the CPU's last-level
    cache, and the cluster file's ``allgatherv_host_s_per_byte_table`` prices each size at
    the measured point at or below it: with steps of 2 the size where that cost steps up is
    known within a factor of 2 instead of 4."""
    if lo_bytes < 1 or hi_bytes < lo_bytes:
        raise ConfigError(f"size range {lo_bytes}:{hi_bytes} must have 1 <= MIN <= MAX")
    out, n = [], lo_bytes
    while n < hi_bytes:
        out.append(n)
        n *= 2 if n >= fine_from_bytes else factor
    return (*out, hi_bytes)


def default_sizes_bytes() -> tuple[int, ...]:
    """4 B to 64 MiB (powers of four to 1 MiB, then of two): latency-bound to well past any
    burst or buffer."""
    return sizes_between(4, 64 * 2**20)


def parse_sizes(text: str) -> tuple[tuple[int, ...], tuple[int, int] | None]:
    """``"MIN:MAX"`` (log-spaced, ×4 then ×2 from 1 MiB, both ends included; :func:`sizes_between`)
    or a comma list ``"4,1KiB,1MiB"``.

    Returns the sizes and, for a range, its bounds (a refit keeps every measured size inside
    them).
    """
    from vgcsim.core.units import parse_size_bytes

    def one(v: str) -> int:
        try:
            n = parse_size_bytes(v.strip())
        except (ValueError, ConfigError) as exc:
            raise ConfigError(f"bad --sizes: {exc}") from None
        if n != int(n):
            raise ConfigError(f"bad --sizes: {v.strip()!r} is not a whole number of bytes")
        return int(n)

    try:
        if ":" in text:
            lo, _, hi = text.partition(":")
            bounds = (one(lo), one(hi))
            return sizes_between(*bounds), bounds
        return tuple(one(v) for v in text.split(",") if v.strip()), None
    except ValueError as exc:
        raise ConfigError(f"bad --sizes: {exc}") from None


@dataclass(frozen=True)
class CalibrateConfig:
    """What the sweep measures. Sizes are bytes per message (allgather: per rank).

    Every size gets ``warmup`` untimed repetitions, then ``repeats`` timed ones, fewer (at least
    :data:`MIN_REPEATS`) where the last warm-up says they would take longer than ``budget_s``.
    The timed repetitions are spread over ``passes`` passes through the whole sweep (every op
    and size once per pass; :func:`split_repeats`), so that a slow spell of the host or the
    network lands on a few repetitions of many sizes, which the median discards, instead of
    on every repetition of the sizes that happened to be timed during it.

    ``busy_before_s`` (default 0): seconds of CPU work every rank does before each timed
    operation, as a training step computes before its exchange; each repetition then times
    one operation, not the mean of several back to back. 0 times the collectives back to
    back, as a loop of collectives meets them. Where a host's threads pay for waking after
    a stretch of work (a virtual machine's idle vCPUs, a deep CPU idle state), a collective
    that follows work takes longer than one that follows another collective, and only this
    measures what a training step's exchange costs (docs/distributed.md).
    """

    backend: str = "gloo"
    ops: tuple[str, ...] = DEFAULT_OPS
    sizes_bytes: tuple[int, ...] = field(default_factory=default_sizes_bytes)
    repeats: int = DEFAULT_REPEATS
    warmup: int = 2
    budget_s: float = 10.0
    passes: int = DEFAULT_PASSES
    busy_before_s: float = 0.0

    def __post_init__(self) -> None:
        if not self.ops:
            raise ConfigError(f"give at least one op to time; valid: {', '.join(OPS)}")
        unknown = [o for o in self.ops if o not in OPS]
        if unknown:
            raise ConfigError(f"unknown op {unknown[0]!r}; valid: {', '.join(OPS)}")
        if not self.sizes_bytes or min(self.sizes_bytes) < 4:
            raise ConfigError("sizes_bytes must be non-empty and each size >= 4 bytes")
        if self.repeats < 1 or self.warmup < 0:
            raise ConfigError("repeats must be >= 1 and warmup >= 0")
        if isinstance(self.passes, bool) or not isinstance(self.passes, int) or self.passes < 1:
            raise ConfigError(f"passes must be a whole number >= 1, got {self.passes!r}")
        if not self.budget_s > 0:
            raise ConfigError(f"budget_s must be positive, got {self.budget_s}")
        busy = self.busy_before_s
        if isinstance(busy, bool) or not isinstance(busy, (int, float)) or not 0 <= busy <= 10:
            raise ConfigError(f"busy_before_s must be in [0, 10] seconds, got {busy!r}")


def write_measurements(
    path: Path, cfg: CalibrateConfig, world: int, rows: list[dict], nodes: Sequence[int]
) -> None:
    """Write a version-:data:`MEASUREMENTS_VERSION` file atomically (temporary file, rename)."""
    doc = {
        "kind": MEASUREMENTS_KIND,
        "version": MEASUREMENTS_VERSION,
        "backend": cfg.backend,
        "world_size": world,
        "nodes": list(nodes),
        "config": to_dict(cfg),
        "machine": machine_info(node=platform.node()),
        "rows": rows,
    }
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(doc, indent=1))
    tmp.replace(path)


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_seconds(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v > 0


def _check_row(row: Any, i: int, world: int) -> str | None:
    """The first rule row ``i`` breaks, as ``field: rule``; None when it keeps them all."""
    where = f"rows[{i}]"
    if not isinstance(row, dict):
        return f"{where}: must be an object, got {type(row).__name__}"
    if row.get("op") not in OPS:
        return f"{where}.op: must be one of {', '.join(OPS)}, got {row.get('op')!r}"
    size = row.get("size_bytes")
    if not _is_int(size) or size < 1:
        return f"{where}.size_bytes: must be a whole number of bytes >= 1, got {size!r}"
    seconds = row.get("seconds")
    if not isinstance(seconds, list) or not seconds:
        return f"{where}.seconds: must be a non-empty list of times"
    bad = [s for s in seconds if not _is_seconds(s)]
    if bad:
        return f"{where}.seconds: every time must be a positive finite number, got {bad[0]!r}"
    if "pair" in row:
        pair = row["pair"]
        if (
            not isinstance(pair, list)
            or len(pair) != 2
            or not all(_is_int(r) and 0 <= r < world for r in pair)
            or pair[0] == pair[1]
        ):
            return f"{where}.pair: must be two distinct ranks in 0..{world - 1}, got {pair!r}"
    return None


def check_measurements(doc: Any) -> str | None:
    """The first rule a parsed measurement document breaks (``field: rule``), or None."""
    if not isinstance(doc, dict):
        return f"must be a JSON object, got {type(doc).__name__}"
    version = doc.get("version")
    if (
        doc.get("kind") == MEASUREMENTS_KIND
        and _is_int(version)
        and version > max(READABLE_VERSIONS)
    ):
        return (
            f"is a version-{version} calibration file, newer than this vgcsim reads "
            f"(version {MEASUREMENTS_VERSION}); upgrade vgcsim to read it"
        )
    if doc.get("kind") != MEASUREMENTS_KIND or version not in READABLE_VERSIONS:
        return (
            f"is not a version-{MEASUREMENTS_VERSION} calibration file; "
            "re-run the calibration with this version of vgcsim"
        )
    world = doc.get("world_size")
    if not _is_int(world) or world < 2:
        return f"world_size: must be a whole number >= 2, got {world!r}"
    if not isinstance(doc.get("backend", ""), str):
        return f"backend: must be a string, got {doc['backend']!r}"
    nodes = doc.get("nodes")
    if nodes is not None and (
        not isinstance(nodes, list)
        or len(nodes) != world
        or not all(_is_int(n) and 0 <= n < world for n in nodes)
    ):
        return f"nodes: must list one node index in 0..{world - 1} per rank ({world})"
    rows = doc.get("rows")
    if not isinstance(rows, list) or not rows:
        return "rows: must be a non-empty list of measurements"
    for i, row in enumerate(rows):
        problem = _check_row(row, i, world)
        if problem:
            return problem
    return None


def read_measurements(path: Path) -> dict:
    """Read a measurement file written by the calibration sweep; a missing, unreadable or
    malformed file is one :class:`ConfigError` line naming the file and the broken field."""
    try:
        doc = json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise ConfigError(f"no calibration measurements at {path}") from None
    except IsADirectoryError:
        raise ConfigError(f"{path} is a folder, not a calibration measurement file") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        msg = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
        raise ConfigError(f"unreadable calibration measurements {path}: {msg}") from None
    problem = check_measurements(doc)
    if problem is not None:
        sep = " " if problem.startswith("is not") else ": "
        raise ConfigError(f"{path}{sep}{problem}")
    return doc


def check_statistic(statistic: str) -> str:
    """``statistic`` if it names one of :data:`STATISTICS`, else UnknownNameError listing them."""
    if statistic not in STATISTICS:
        raise unknown_name("statistic", str(statistic), STATISTICS)
    return statistic


def measured_seconds(row: dict, statistic: str = "median") -> float:
    """One row's measurement: ``statistic`` (see :data:`STATISTICS`) over its repetitions."""
    return float(STATISTICS[check_statistic(statistic)](row["seconds"]))


#: Repetitions a row needs for :func:`repeatability` (two halves of at least two each).
REPEATABILITY_MIN_REPEATS = 4


def repeatability(rows: Sequence[dict], statistic: str = "median") -> dict[str, float]:
    """How well a measurement agrees with itself, per op: ``exp(rms log(s_even / s_odd)) − 1``
    over the op's rows of at least :data:`REPEATABILITY_MIN_REPEATS` repetitions, where
    ``s_even`` and ``s_odd`` are ``statistic`` over the row's even- and odd-numbered
    repetitions (each half samples every pass of the sweep). It is the typical error of one
    half predicting the other — the same measure as the fit's typical error per op
    (:func:`vgcsim.models.linkfit.op_errors`) — so a fit whose typical error is near it is
    as close as these repetitions can tell; ops without such rows are left out.

    Example: one row with seconds ``[1, 2, 1, 2]`` gives ``median(1, 1) / median(2, 2)``
    = ½, so ``exp(|log ½|) − 1`` = 100 %."""
    pick = STATISTICS[check_statistic(statistic)]
    logs: dict[str, list[float]] = {}
    for r in rows:
        s = list(r["seconds"])
        if len(s) < REPEATABILITY_MIN_REPEATS:
            continue
        even, odd = float(pick(s[0::2])), float(pick(s[1::2]))
        if even > 0 and odd > 0:
            logs.setdefault(r["op"], []).append(math.log(even / odd) ** 2)
    return {op: math.expm1(math.sqrt(sum(v) / len(v))) for op, v in logs.items()}


def select_rows(
    measurements: dict,
    *,
    ops: set[str] | None = None,
    sizes: Sequence[int] | None = None,
    bounds: tuple[int, int] | None = None,
) -> dict:
    """The measurements restricted to ``ops``, to the listed ``sizes`` or to sizes within
    ``bounds`` (inclusive); a selection that keeps nothing is a :class:`ConfigError`."""
    rows = measurements["rows"]
    if ops:
        measured = {r["op"] for r in rows}
        missing = sorted(set(ops) - measured)
        if missing:
            raise ConfigError(
                f"no {', '.join(missing)} among the measurements; measured ops: "
                + ", ".join(sorted(measured))
            )
        rows = [r for r in rows if r["op"] in ops]
    if bounds is not None:
        rows = [r for r in rows if bounds[0] <= r["size_bytes"] <= bounds[1]]
    elif sizes:
        rows = [r for r in rows if r["size_bytes"] in set(sizes)]
    if not rows:
        have = sorted({r["size_bytes"] for r in measurements["rows"]})
        raise ConfigError(
            "no measurement left after selecting ops/sizes; measured sizes: "
            + ", ".join(str(s) for s in have)
        )
    return {**measurements, "rows": rows}
