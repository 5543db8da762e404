"""The replay vocabulary: what ``predict`` and ``simulate`` are asked, in one frozen type.

:class:`ReplayOptions` holds every knob the closed-form models and the simulator share, under
one name each: the world sizes, the dense baselines' allreduce algorithms (``allreduce``) and
the compressed exchange's allgatherv algorithms (``allgatherv``; empty: the trace's own,
filled in by the one resolver of the trace layer, ``resolve_collectives``), the bits column (``encoding``), the
extrapolation ``rule`` and its ``seed``, ``per_step`` rows, the ``overlap`` mode and its
``bucket_bytes``, the dense baselines' encodings, the allgatherv size exchange and the sparse
allreduce algorithms. Each field is a ``--set`` key of both commands and a keyword of
``vgcsim.api.predict`` / ``vgcsim.api.simulate``; the replay flags (``--allreduce``,
``--overlap``, ...) are shortcuts for the key of the same name (``--extrapolation`` sets
``rule``, ``--bucket-size`` sets ``bucket_bytes``, ``--no-size-exchange`` sets
``size_exchange=false``).

:class:`SimulateConfig` adds what only the simulator has (network mode, message semantics,
execution path, straggler jitter, backward fraction, step limit) and refuses what it cannot
replay (more than one algorithm per collective, ``overlap = "full"``, the bounded exchange
with overlap buckets). :class:`PredictOptions` adds free-form header entries (``extra``).

The vocabularies live here, below both stages: :data:`OVERLAPS`, :data:`RULES`,
:data:`DENSE_ENCODINGS`, :data:`MODES`, :data:`SEMANTICS`, :data:`PATHS`.
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass, field
from typing import Any

from vgcsim.core.collectives import (
    ALLGATHERV_ALGORITHMS,
    ALLREDUCE_ALGORITHMS,
    SPARSE_ALLREDUCE_ALGORITHMS,
)
from vgcsim.core.errors import ConfigError, unknown_name

__all__ = [
    "DDP_BUCKET_BYTES",
    "DENSE_ENCODINGS",
    "FORWARD_FRACTION",
    "MAX_JITTER",
    "MODES",
    "OVERLAPS",
    "PATHS",
    "RULES",
    "SEMANTICS",
    "PredictOptions",
    "ReplayOptions",
    "SimulateConfig",
]

#: How a step overlaps communication with computation: ``none`` (all compute, then the
#: exchange), ``full`` (the optimistic closed-form bound: backward hides the exchange;
#: predict only), ``per_layer`` (one collective per layer), ``bucketed`` (DDP-style buckets).
OVERLAPS = ("none", "full", "per_layer", "bucketed")
#: Rules mapping P ranks to the recorded workers (the trace layer's extrapolation).
RULES = ("modulo", "resample")
#: Dense baselines: fp32 allreduce, and the 2-byte casts of PyTorch's bf16/fp16 compress hooks.
DENSE_ENCODINGS = ("fp32", "bf16", "fp16")
#: The simulator's bandwidth sharing between flows: max-min fair, or first come first served.
MODES = ("fair", "fifo")
#: When a simulated message may start: at once (eager) or when its receiver posts (rendezvous).
SEMANTICS = ("eager", "rendezvous")
#: Which simulator path runs a step: chosen per step, or one forced (`reference`: the plain
#: SimPy engine that defines the semantics, docs/simulator.md).
PATHS = ("auto", "message", "collective", "round", "reference")
#: Largest straggler jitter (coefficient of variation of the compute factor): 10 is a spread
#: of 1000 %, far beyond any measured straggler; larger values only overflow.
MAX_JITTER = 10.0

#: PyTorch DistributedDataParallel's default ``bucket_cap_mb`` (25 MiB).
DDP_BUCKET_BYTES = 25 * 2**20
#: Share of forward+backward time spent in the forward pass. The backward pass costs about
#: twice the forward pass (gradients w.r.t. activations and w.r.t. weights), hence 1/3.
#: Source: the 2N forward / 4N backward FLOP count per parameter of J. Kaplan et al.,
#: "Scaling Laws for Neural Language Models", 2020, §2.1. Assumption for other layer types.
FORWARD_FRACTION = 1.0 / 3.0

#: The default world sizes as a tuple: 2, 4, ..., 1024 (vgcsim.core.worldsizes' default).
_WORLD_SIZES = tuple(2**k for k in range(1, 11))


def _check_algorithms(op: str, names: tuple[str, ...], valid: tuple[str, ...]) -> None:
    for name in names:
        if name not in valid:
            raise unknown_name(f"{op} algorithm", str(name), valid)


@dataclass(frozen=True)
class ReplayOptions:
    """What predict and simulate share (every field a ``--set`` key of both commands)."""

    world_sizes: tuple[int, ...] = _WORLD_SIZES
    #: dense baselines' allreduce algorithms (simulate: exactly one)
    allreduce: tuple[str, ...] = ("ring",)
    #: compressed exchange's allgatherv algorithms (simulate: at most one); empty: the
    #: trace's own (``bounded`` for traces the DDP hook wrote, else ``ring``)
    allgatherv: tuple[str, ...] = ()
    #: bits column of the compressed payloads (None: the trace's primary encoding)
    encoding: str | None = None
    rule: str = "modulo"
    seed: int = 0
    per_step: bool = False
    overlap: str = "none"
    bucket_bytes: float = DDP_BUCKET_BYTES
    dense_encodings: tuple[str, ...] = DENSE_ENCODINGS
    size_exchange: bool = True
    #: sparse allreduce algorithms priced for traces that record their index-set unions
    #: (``()``: none); rows ``method = compressed``, ``collective = sparse_allreduce/<alg>``
    sparse_allreduce: tuple[str, ...] = SPARSE_ALLREDUCE_ALGORITHMS

    def __post_init__(self) -> None:
        if not self.world_sizes or any(int(p) < 1 for p in self.world_sizes):
            raise ConfigError("world sizes must be integers >= 1")
        _check_algorithms("allreduce", self.allreduce, ALLREDUCE_ALGORITHMS)
        _check_algorithms("allgatherv", self.allgatherv, ALLGATHERV_ALGORITHMS)
        _check_algorithms("sparse_allreduce", self.sparse_allreduce, SPARSE_ALLREDUCE_ALGORITHMS)
        if self.rule not in RULES:
            raise unknown_name("extrapolation rule", str(self.rule), RULES)
        if self.overlap not in OVERLAPS:
            raise unknown_name("overlap mode", str(self.overlap), OVERLAPS)
        if not (isinstance(self.bucket_bytes, numbers.Real) and 1 <= self.bucket_bytes <= 1e15):
            raise ConfigError(
                f"bucket_bytes must be a number of bytes in [1, 1e15], got {self.bucket_bytes}"
            )
        if self.encoding is not None and not (isinstance(self.encoding, str) and self.encoding):
            raise ConfigError(f"encoding must name a bits column, got {self.encoding!r}")
        if self.seed < 0:
            raise ConfigError(f"seed must be >= 0, got {self.seed}")
        encs = tuple(self.dense_encodings)
        if "fp32" not in encs:
            raise ConfigError("dense_encodings must include fp32 (the speedup baseline)")
        for e in encs:
            if e not in DENSE_ENCODINGS:
                raise unknown_name("dense encoding", str(e), DENSE_ENCODINGS)
        if len(set(encs)) != len(encs):
            raise ConfigError(f"dense_encodings lists an encoding twice: {list(encs)}")
        if not isinstance(self.size_exchange, bool):
            raise ConfigError(f"size_exchange must be true or false, got {self.size_exchange!r}")


@dataclass(frozen=True)
class PredictOptions(ReplayOptions):
    """What to predict: the shared :class:`ReplayOptions`, plus free-form header entries."""

    #: written into the result header's options as given
    extra: dict[str, Any] = field(default_factory=dict, compare=False)


@dataclass(frozen=True)
class SimulateConfig(ReplayOptions):
    """Options of a simulated replay: the shared :class:`ReplayOptions` (one algorithm per
    collective) and the simulator's own below (every field settable with ``--set key=value``)."""

    backward_fraction: float = 1.0 - FORWARD_FRACTION
    mode: str = "fair"
    semantics: str = "rendezvous"
    path: str = "auto"
    jitter: float = 0.0
    max_steps: int = 0

    def __post_init__(self) -> None:
        super().__post_init__()
        for op, names, most in (
            ("allreduce", self.allreduce, 1),
            ("allgatherv", self.allgatherv, 1),
        ):
            if len(names) > most or (op == "allreduce" and not names):
                raise ConfigError(
                    f"{op} {','.join(names)!r}: simulate replays one algorithm at a time"
                )
        if self.overlap == "full":
            raise ConfigError(
                "overlap 'full' is the closed form's optimistic bound; simulate replays none, "
                "per_layer or bucketed"
            )
        for name, value, valid in (
            ("network mode", self.mode, MODES),
            ("message semantics", self.semantics, SEMANTICS),
            ("path", self.path, PATHS),
        ):
            if value not in valid:
                raise unknown_name(name, str(value), valid)
        if not (0.0 <= self.backward_fraction <= 1.0):
            raise ConfigError("backward_fraction must be in [0, 1]")
        if not (0 <= self.jitter <= MAX_JITTER):  # also refuses NaN; jitter**2 must not overflow
            raise ConfigError(f"jitter must be a number in [0, {MAX_JITTER:g}], got {self.jitter}")
        if self.max_steps < 0:
            raise ConfigError("max_steps must be >= 0 (0 = all steps)")
        if self.allgatherv == ("bounded",) and self.overlap != "none":
            raise ConfigError("allgatherv/bounded replays the hook's own buckets; use overlap none")
