"""Trace replay: every step of a trace on a simulated cluster, dense allreduce vs allgatherv.

For each world size P and each recorded step, the per-rank inputs come from
:func:`vgcsim.traces.inputs.step_inputs` (the same numbers the closed-form models see: compute,
variance, codec, decode and optimizer seconds from the cluster's device or from the trace,
per ``cluster.compute``). A rank computes (forward, then backward producing gradients in
reverse layer order), runs the squared-gradient estimator and the codec (for the bf16 / fp16
dense baselines: the cast) on each bucket's gradients, and sends each bucket with the
method's collective as soon as that bucket is ready and its previous collective has finished
(one communication stream per rank); a compressed bucket's allgatherv is preceded by its size
exchange (a ring allgather of one int64 per rank, ``size_exchange``; padded contains one).
After each bucket's collective the rank decodes it (its element share of the rank's decode
time) once the previous decode and its local work are done; the optimizer step follows the
last decode. Methods: ``dense`` allreduce in each of ``dense_encodings`` and ``compressed``
allgatherv. Buckets:

* ``overlap = "none"`` — one bucket, the whole model, after all compute and codec;
* ``overlap = "per_layer"`` — one bucket per layer;
* ``overlap = "bucketed"`` — consecutive layers (in backward order) grouped until their fp32
  size reaches ``bucket_bytes`` (PyTorch DDP's default is 25 MiB).

Backward is the last ``backward_fraction`` of the compute time (default: all but
``vgcsim.core.options.FORWARD_FRACTION``) and is split among layers in proportion to their
element count; variance and codec time are split the same way. Buckets and their backward
shares come from :mod:`vgcsim.traces.buckets`, the rule the closed-form models use too.
Optional seeded straggler jitter multiplies each (step, rank) compute time by a mean-one
lognormal factor with coefficient of variation ``jitter``.

Each step runs on the message level (:mod:`vgcsim.simulator.paths.message`), on the
collective-level fast path (:mod:`vgcsim.simulator.paths.collective`) or on the round-level
path (:mod:`vgcsim.simulator.paths.round`):
``path = "auto"`` takes the collective-level path when it is exact (no two flows ever share a
channel), else the round-level path when it is exact (``fair`` sharing, and no channel ever
carries flows of two rounds at once: checked while it runs), else the message level;
``"message"``/``"collective"``/``"round"`` force one (a forced path that is not exact is an
error); ``"reference"`` runs every step on the reference engine
(:mod:`vgcsim.simulator.paths.reference`, the definition the other paths are tested against).
Steps whose sizes and relative start times repeat reuse the earlier result. The ``path``
column says which ran (the slowest any part of that world size's step group needed:
``"reference"``, ``"message"``, ``"round"``, then ``"collective"``); ``info`` counts the
steps of each path and, as ``round_refused``, the steps the round-level path handed to the
message level; the first step that falls to the message level under ``path = "auto"`` logs
one warning per :func:`simulate_trace` call, saying where and why.

Columns: ``compute_s``, ``variance_s``, ``codec_s`` are means over ranks, ``decode_s`` the
slowest rank's; ``step_s`` is the last rank's finish time (after its optimizer step);
``comm_s = step_s − optimizer − max over ranks of (compute + variance + codec + decode)``, the
communication time not hidden behind computation. A host link with a token bucket
(``LinkSpec.burst_bytes``) then takes the bucket's credit off ``comm_s`` and ``step_s`` as the
closed form does (:func:`vgcsim.core.collectives.burst_credit_s`, from the step's idle
seconds): the flows themselves run at the links' rates, and step timelines show them so.
"""

from __future__ import annotations

import functools
import logging
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from vgcsim.core.bounded import align_bytes, bounded_rounds
from vgcsim.core.cluster import ClusterSpec, gather_cluster, shared_cluster, wire_cluster
from vgcsim.core.collectives import (
    SIZE_HEADER_BYTES,
    burst_credit_s,
    idle_burst_bytes,
    prices_by_size,
    wire_bytes,
)
from vgcsim.core.errors import ConfigError
from vgcsim.core.options import PATHS, SimulateConfig
from vgcsim.core.results import RESULT_COLUMNS
from vgcsim.simulator.collectives import (
    Schedule,
    bounded_schedule,
    bounded_units,
    get_schedule,
    host_time_s,
    padded_data_schedule,
    unit_sizes,
)
from vgcsim.simulator.network import LinkMonitor
from vgcsim.simulator.paths.collective import contention_free, run_collective, run_collective_steps
from vgcsim.simulator.paths.message import run_message
from vgcsim.simulator.paths.plan import Phase, RankSpan, RunCache
from vgcsim.simulator.paths.reference import run_reference
from vgcsim.simulator.paths.round import RoundCache, run_rounds
from vgcsim.simulator.topology import Topology, build_topology
from vgcsim.traces.buckets import bucket_backward_share, layer_groups
from vgcsim.traces.inputs import (
    StepInputs,
    bucket_messages,
    is_lowrank,
    resolve_collectives,
    step_inputs,
)
from vgcsim.traces.sparseunion import has_unions, sparse_step_inputs

__all__ = [
    "PATHS",
    "SimulateConfig",
    "StepTimeline",
    "replay_units",
    "simulate_trace",
]

if TYPE_CHECKING:
    from vgcsim.traces.io import Trace

log = logging.getLogger(__name__)

#: PowerSGD's allreduces per bucket, in the order torch's powerSGD_hook runs them
LOWRANK_PARTS = ("plain", "P", "Q")
METHODS = ("dense", "compressed")
SPARSE_COLLECTIVE = (
    "sparse_allreduce/recursive_doubling"  # result `method` values (dense rows: one per encoding)
)
_BLOCK_STEPS = 256  # most steps replayed at once
_BLOCK_VALUES = 1 << 20  # most values (steps x ranks) of one array of a block


@dataclass
class StepTimeline:
    """What happened in one simulated step, for a Chrome/Perfetto trace."""

    world_size: int
    method: str
    step: int
    step_s: float
    spans: list[RankSpan]
    link_intervals: list[tuple[int, float, float, float, int, int]]
    channel_names: list[str]
    link_bytes: np.ndarray  # [channels] bytes carried in the step
    link_busy_s: np.ndarray  # [channels] seconds with at least one flow

    def link_table(self) -> pd.DataFrame:
        """Per directed link: bytes, busy seconds and utilisation (busy / step time)."""
        used = self.link_bytes > 0
        return pd.DataFrame(
            {
                "world_size": self.world_size,
                "method": self.method,
                "step": self.step,
                "link": np.asarray(self.channel_names)[used],
                "bytes": self.link_bytes[used],
                "busy_s": self.link_busy_s[used],
                "utilization": self.link_busy_s[used] / self.step_s if self.step_s > 0 else 0.0,
            }
        )


@dataclass
class _Outcome:
    finish: np.ndarray  # [phases, P] finish per phase and rank
    path: str


@dataclass
class _Notice:
    """Says once per replay that steps fell back to the message level, and why."""

    said: bool = False

    def fell_back(self, where: str, why: str) -> None:
        if not self.said:
            self.said = True
            log.warning(
                "%s: %s; those steps run at message level, much slower (said once per run; "
                "the result header's options.paths_run counts the steps of each path)",
                where,
                why,
            )


@dataclass
class _Runner:
    """Runs steps of one (world size, method) with memoization and the path choice."""

    topology: Topology
    cfg: SimulateConfig
    gamma_s_per_byte: float
    cache: RunCache
    label: str = ""
    notice: _Notice = field(default_factory=_Notice)
    progress: Callable[[int], None] | None = None
    call_overhead_s: float = 0.0  # the link's per-call software cost (paths.plan.call_s)
    wire: Callable[[np.ndarray], np.ndarray] | None = None  # size segments' wire bytes
    memo: dict[Any, _Outcome] = field(default_factory=dict)
    verdicts: dict[tuple[str, ...], str | None] = field(default_factory=dict)
    counts: dict[str, int] = field(
        default_factory=lambda: {
            "message": 0,
            "collective": 0,
            "round": 0,
            "memo": 0,
            "round_refused": 0,
        }
    )
    rounds: RoundCache | None = None  # the round-level path's tables, built on first use

    def run_steps(self, block: _Block) -> tuple[np.ndarray, list[str]]:
        """Every step of ``block``: finish times [S, B, P] and each step's path. A step is keyed
        by its schedules, units and ready times relative to its earliest ready time; a key met
        before (in this block or an earlier one) is a memo hit, its finish times shifted to the
        step's start. Steps not in the memo go to the collective-level path together
        (:func:`run_collective_steps`) where it is exact without a run-time check, else one by
        one through :meth:`_run`, with the same bits either way."""
        n = block.n_steps
        base = np.min([r.min(axis=1) for r in block.ready], axis=0)  # [S]
        rel = [r - base[:, None] for r in block.ready]
        keys = [
            tuple(
                (sched.key, u[i].tobytes(), r[i].tobytes())
                for sched, u, r in zip(block.schedules, block.units, rel, strict=True)
            )
            for i in range(n)
        ]
        fresh: dict[Any, int] = {}  # key -> first step of the block that runs it
        for i, key in enumerate(keys):
            if key not in self.memo and key not in fresh:
                fresh[key] = i
        todo = list(fresh.values())
        if todo and self._batchable(block.schedules):
            fin = run_collective_steps(
                block.schedules,
                [r[todo] for r in rel],
                [u[todo] for u in block.units],
                self.topology,
                semantics=self.cfg.semantics,
                gamma_s_per_byte=self.gamma_s_per_byte,
                call_overhead_s=self.call_overhead_s,
                wire=self.wire,
                cache=self.cache,
            )
            if fin is not None:
                for j, i in enumerate(todo):
                    self.memo[keys[i]] = _Outcome(fin[:, j], "collective")
                todo = []
        for i in todo:
            phases = [
                Phase(r[i], sched, u[i], f"{block.label} {name}")
                for sched, u, r, name in zip(
                    block.schedules, block.units, rel, block.names, strict=True
                )
            ]
            self.memo[keys[i]] = self._run(phases)
            if self.progress is not None:
                self.progress(1)
        if self.progress is not None and n > len(todo):
            self.progress(n - len(todo))
        finish = np.empty((n, len(block.schedules), self.topology.world_size))
        paths = []
        for i, key in enumerate(keys):
            out = self.memo[key]
            if fresh.get(key) == i:
                self.counts[out.path] = self.counts.get(out.path, 0) + 1
            else:
                self.counts["memo"] += 1
            finish[i] = out.finish + base[i]
            paths.append(out.path)
        return finish, paths

    def _batchable(self, schedules: Sequence[Schedule]) -> bool:
        """True when :meth:`_run` would take the fast path without its run-time overlap check."""
        if self.cfg.path not in ("auto", "collective"):
            return False
        verdict = self.verdict(schedules)
        if verdict is None:
            return False
        return not (self.cfg.semantics == "eager" and verdict == "dst")

    def verdict(self, schedules: Sequence[Schedule]) -> str | None:
        key = tuple(sorted({s.key for s in schedules}))
        if key not in self.verdicts:
            self.verdicts[key] = contention_free(schedules, self.topology, cache=self.cache)
        return self.verdicts[key]

    def _run(self, phases: list[Phase]) -> _Outcome:
        cfg = self.cfg
        if cfg.path == "reference":
            fin = run_reference(
                phases,
                self.topology,
                mode=cfg.mode,
                semantics=cfg.semantics,
                gamma_s_per_byte=self.gamma_s_per_byte,
                call_overhead_s=self.call_overhead_s,
                wire=self.wire,
            )
            return _Outcome(fin, "reference")
        if cfg.path in ("auto", "collective"):
            verdict = self.verdict([ph.schedule for ph in phases])
            if verdict is None and cfg.path == "collective":
                raise ConfigError(
                    f"the collective-level fast path is not exact for "
                    f"{', '.join(sorted({ph.schedule.key for ph in phases}))} on this "
                    f"{self.topology.kind} topology (flows share links); use path=auto or message"
                )
            if verdict is not None:
                fin = run_collective(
                    phases,
                    self.topology,
                    semantics=cfg.semantics,
                    gamma_s_per_byte=self.gamma_s_per_byte,
                    call_overhead_s=self.call_overhead_s,
                    wire=self.wire,
                    check_overlap=cfg.semantics == "eager" and verdict == "dst",
                    cache=self.cache,
                )
                if fin is not None:
                    return _Outcome(fin, "collective")
                if cfg.path == "collective":
                    raise ConfigError(
                        "the collective-level fast path is not exact here: messages into one "
                        "rank overlap under eager semantics; use path=auto or message"
                    )
        if cfg.path in ("auto", "round"):
            fin = self._rounds(phases)
            if fin is not None:
                return _Outcome(fin, "round")
        if cfg.path == "auto":
            where = (
                f"{self.label} steps at P = {self.topology.world_size} on this {self.topology.kind}"
            )
            if cfg.mode != "fair":
                why = f"the round-level path models fair sharing, not mode = {cfg.mode!r}"
            else:
                why = (
                    "flows share links and the round-level path is not exact (a rank ran "
                    "ahead into a link that an earlier round's flow still uses)"
                )
            self.notice.fell_back(where, why)
        fin = run_message(
            phases,
            self.topology,
            mode=cfg.mode,
            semantics=cfg.semantics,
            gamma_s_per_byte=self.gamma_s_per_byte,
            cache=self.cache,
            call_overhead_s=self.call_overhead_s,
            wire=self.wire,
        )
        return _Outcome(fin, "message")

    def _rounds(self, phases: list[Phase]) -> np.ndarray | None:
        """The round-level path where it is exact: ``fair`` sharing, and no flow starting on
        a channel an earlier round's flow still sends on (checked by :func:`run_rounds`);
        else None, counted as ``round_refused`` (an error when the path is forced)."""
        cfg = self.cfg
        if self.wire is not None:  # the round level prices α + m·β alone
            if cfg.path == "round":
                raise ConfigError(
                    "the round-level path does not price messages by size (the link's size "
                    "segments or its token bucket's refill); "
                    "use path=auto or message"
                )
            return None
        if cfg.mode != "fair":
            if cfg.path == "round":
                raise ConfigError(
                    f"the round-level path models fair sharing, not mode={cfg.mode!r}; "
                    "use path=auto or message"
                )
            return None
        if self.rounds is None:
            self.rounds = RoundCache(self.topology)
        fin = run_rounds(
            phases,
            self.topology,
            semantics=cfg.semantics,
            gamma_s_per_byte=self.gamma_s_per_byte,
            cache=self.rounds,
            call_overhead_s=self.call_overhead_s,
        )
        if fin is None:
            if cfg.path == "round":
                raise ConfigError(
                    "the round-level path is not exact here: a rank ran ahead into a channel "
                    "that an earlier round's flow still uses; use path=auto or message"
                )
            self.counts["round_refused"] += 1
        return fin


def _jitter(cfg: SimulateConfig, world_size: int, shape: tuple[int, int]) -> np.ndarray:
    if cfg.jitter <= 0:
        return np.ones(shape)
    rng = np.random.default_rng([cfg.seed, world_size])
    sigma2 = math.log1p(cfg.jitter**2)
    return rng.lognormal(-sigma2 / 2, math.sqrt(sigma2), size=shape)


@dataclass(frozen=True)
class _Buckets:
    """The layer groups of a replay, in the order their gradients are ready."""

    groups: list[list[int]]
    numel: np.ndarray  # [K] elements per group
    frac: np.ndarray  # [K] each group's share of the backward pass (and of side work)
    cum: np.ndarray  # [K] share of the backward pass done when each group is ready

    @classmethod
    def of(cls, trace: Trace, cfg: SimulateConfig) -> _Buckets:
        numel = np.array([int(layer["numel"]) for layer in trace.layers], dtype=float)
        groups = layer_groups(numel, cfg.overlap, cfg.bucket_bytes)
        cum = bucket_backward_share(numel, groups)
        return cls(
            groups, np.array([numel[g].sum() for g in groups]), np.diff(cum, prepend=0.0), cum
        )


@dataclass(frozen=True)
class _WorldSize:
    """What stays fixed while the steps of one world size are replayed."""

    p: int
    #: the cluster as this P's collectives meet it: CPU-time terms under the hosts'
    #: processor sharing and rates under σ's cap (vgcsim.core.cluster.shared_cluster)
    cluster: ClusterSpec
    topology: Topology
    inputs: StepInputs
    n_steps: int
    compute: np.ndarray  # [T, P] with jitter
    fwd: np.ndarray  # [T, P]
    bwd: np.ndarray  # [T, P]
    comp_bytes: np.ndarray  # [T, P, K] compressed bytes per group
    decode: np.ndarray  # [T, P]
    optimizer: np.ndarray  # [T]
    data_schedules: dict[str, Schedule]  # method -> its collective's schedule
    exchange: Schedule | None  # the size exchange before a compressed collective
    # allgatherv/bounded: per step and bucket of the hook, whether it ran, its bound and its
    # fallback bytes per rank ([T, K] each; vgcsim.core.bounded.bounded_rounds)
    bounded: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
    #: (stage bytes [T, S], dense bytes, result scatter seconds [T, P]) of the sparse allreduce
    sparse: tuple[np.ndarray, float, np.ndarray] | None = None
    #: the host link's token bucket: (burst_bytes, bandwidth_Bps); no credit where 0 bytes
    burst: tuple[float, float] = (0.0, 1.0)


@dataclass(frozen=True)
class _StepPlan:
    """One step of one variant: the collectives it runs and the local work around them."""

    phases: list[Phase]
    data_index: list[int]  # which phases are the data collectives (one per group)
    local: np.ndarray  # [P] variance + codec (compressed) or cast (dense) seconds
    dec: np.ndarray  # [P] decode (compressed) or cast back (dense) seconds
    variance: np.ndarray  # [P]
    payload: np.ndarray  # [P] bytes sent per rank
    grad_ready: np.ndarray  # [K, P] when each group's gradients are ready
    ready: np.ndarray  # [K, P] when each group is ready to send (after its side work)


def _world_size(
    trace: Trace, cluster: ClusterSpec, p: int, cfg: SimulateConfig, buckets: _Buckets
) -> _WorldSize:
    is_bounded = _compressed_key(cfg) == "allgatherv/bounded"
    inputs = step_inputs(
        trace,
        cluster,
        p,
        encoding=cfg.encoding,
        rule=cfg.rule,
        seed=cfg.seed,
        layers=True if is_bounded else buckets.groups if cfg.overlap != "none" else False,
    )
    n_steps = len(inputs.steps)
    if cfg.max_steps:
        n_steps = min(n_steps, cfg.max_steps)
    compute = inputs.compute_s[:n_steps] * _jitter(cfg, p, (n_steps, p))
    bounded = None
    lowrank = inputs.allreduce_bytes is not None
    if is_bounded:
        bounded = _bounded_rounds(trace, inputs.layer_bytes[:n_steps], cfg)
        comp_bytes = inputs.rank_bytes[:n_steps, :, None].astype(float)
    elif lowrank:  # PowerSGD: every rank allreduces the same buffers
        per_group = inputs.allreduce_bytes[:n_steps].sum(axis=2)  # [T, K]
        comp_bytes = np.broadcast_to(per_group[:, None, :], (n_steps, p, per_group.shape[1]))
    elif inputs.layer_bytes is not None:
        comp_bytes = inputs.layer_bytes[:n_steps].astype(float)  # [T, P, K]
    else:
        comp_bytes = inputs.rank_bytes[:n_steps, :, None].astype(float)
    exchange = (
        get_schedule("allgatherv/ring", p)
        if cfg.size_exchange
        and _compressed_key(cfg) not in ("allgatherv/padded", "allgatherv/bounded")
        and not lowrank
        else None
    )
    dense_schedule = get_schedule(_dense_key(cfg), p, cluster.gpus_per_node)
    sparse = None
    if cfg.overlap == "none" and has_unions(trace):
        stage, dense, decode = sparse_step_inputs(trace, inputs.steps, p, cluster)
        sparse = (stage[:n_steps], dense, decode[:n_steps])
    shared = shared_cluster(cluster, p)
    return _WorldSize(
        p=p,
        cluster=shared,
        topology=build_topology(shared, p),
        inputs=inputs,
        n_steps=n_steps,
        compute=compute,
        fwd=compute * (1.0 - cfg.backward_fraction),
        bwd=compute * cfg.backward_fraction,
        comp_bytes=comp_bytes,
        decode=inputs.decode()[:n_steps],
        optimizer=inputs.optimizer()[:n_steps],
        data_schedules={
            "dense": dense_schedule,
            "compressed": dense_schedule if lowrank else _compressed_schedule(cfg, p),
            "sparse": get_schedule(SPARSE_COLLECTIVE, p),
        },
        exchange=exchange,
        burst=(idle_burst_bytes(shared.link), shared.link.bandwidth_Bps),
        bounded=bounded,
        sparse=sparse,
    )


def _gathers(ws: _WorldSize, label: str) -> bool:
    """Whether ``label``'s exchange is allgather-type (an ``allgatherv/*`` data schedule)."""
    schedule = ws.data_schedules.get(label.split("/")[0])
    return schedule is not None and schedule.key.startswith("allgatherv/")


def _on_links(
    ws: _WorldSize, labels: list[str], make: Callable[[ClusterSpec], ClusterSpec] | None = None
) -> dict[str, tuple[Topology, RunCache, Callable[[np.ndarray], np.ndarray] | None]]:
    """Per label, ``(topology, cache, wire)`` its steps run on: ``ws.cluster`` as the label's
    exchange meets it (:func:`vgcsim.core.clusterspec.gather_cluster` where it is
    allgather-type), then ``make`` (``wire_cluster`` for the bandwidth-only copy); one
    topology and cache per distinct cluster; ``wire`` prices messages by size where the link
    does (:func:`vgcsim.core.collectives.wire_bytes`)."""
    built: list[tuple[ClusterSpec, tuple]] = []
    out = {}
    for lab in labels:
        cluster = gather_cluster(ws.cluster) if _gathers(ws, lab) else ws.cluster
        if make is not None:
            cluster = make(cluster)
        run = next((r for c, r in built if c == cluster), None)
        if run is None:
            topo = ws.topology if cluster is ws.cluster else build_topology(cluster, ws.p)
            link = cluster.link
            wire = functools.partial(wire_bytes, link) if prices_by_size(link) else None
            run = (topo, RunCache(topo), wire)
            built.append((cluster, run))
        out[lab] = run
    return out


def _bounded_rounds(
    trace: Trace, layer_bytes: np.ndarray, cfg: SimulateConfig
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(used, bound, extra)`` ``[T, K]`` of the hook's buckets (see :class:`_WorldSize`)."""
    bm = bucket_messages(trace, layer_bytes, cfg.bucket_bytes)
    bound = np.zeros(bm.used.shape, dtype=np.int64)
    extra = np.zeros(bm.used.shape, dtype=np.int64)
    for k in range(len(bm.buckets)):
        rows = np.flatnonzero(bm.used[:, k])
        if rows.size:
            first = align_bytes(int(bm.header_bytes[k]))
            bound[rows, k], extra[rows, k] = bounded_rounds(bm.messages[rows, :, k], first)
    return bm.used, bound, extra


def _step_slices(ws: _WorldSize, size: int) -> list[slice]:
    """Blocks of at most ``size`` steps; with ``allgatherv/bounded`` also cut where the set of
    buckets a step exchanges, or which of them run a fallback round, changes (a block runs
    the same schedules at every step)."""
    cuts = set(range(0, ws.n_steps, size)) | {ws.n_steps}
    if ws.bounded is not None:
        used, _, extra = ws.bounded
        sig = np.concatenate([used, extra > 0], axis=1)
        changed = np.flatnonzero((sig[1:] != sig[:-1]).any(axis=1)) + 1
        cuts |= set(changed.tolist())
    edges = sorted(cuts)
    return [slice(a, b) for a, b in zip(edges[:-1], edges[1:], strict=True)]


def _bounded_phases(
    ws: _WorldSize, rows: np.ndarray | int
) -> list[tuple[Schedule, np.ndarray, str]]:
    """The hook's exchanges of the steps ``rows`` (the same buckets and fallbacks at each):
    one ``allgatherv/bounded`` phase per bucket the steps exchange, in bucket order."""
    used, bound, extra = ws.bounded  # type: ignore[misc]
    first = int(np.atleast_1d(rows)[0])
    out = []
    for k in np.flatnonzero(used[first]):
        schedule = bounded_schedule(ws.p, bool(extra[first, k] > 0))
        units = bounded_units(ws.p, bound[rows, k], extra[rows, k])
        out.append((schedule, units, f"b{k}"))
    return out


@dataclass(frozen=True)
class _Block:
    """Steps ``start .. start + n_steps - 1`` of one variant at once: the phases every step
    runs (the same schedules in each step) and the local work around them, as arrays over
    the steps. Row s holds what :func:`_step_plan` gives for step ``start + s``."""

    label: str
    start: int
    schedules: list[Schedule]  # [B] one per phase
    names: list[str]  # [B] phase labels (b0 sizes, b0, ...)
    ready: list[np.ndarray]  # [B] of [S, P] ready times
    units: list[np.ndarray]  # [B] of [S, units]
    data_index: list[int]  # which phases are the data collectives (one per group)
    copied: list[np.ndarray]  # [K] of [S]: the real bytes of each data collective's P blocks
    local: np.ndarray  # [S, P]
    dec: np.ndarray  # [S, P]
    variance: np.ndarray  # [S, P]
    payload: np.ndarray  # [S, P]
    # phases whose host copies are priced (copied[i] goes with host_phases[i]); None: data_index
    host_phases: list[int] | None = None

    @property
    def n_steps(self) -> int:
        return int(self.local.shape[0])


def _block(
    ws: _WorldSize,
    buckets: _Buckets,
    steps: slice,
    method: str,
    encoding: str,
    label: str,
) -> _Block:
    """:func:`_step_plan` for the steps ``steps`` at once (the same arithmetic per element)."""
    p, inputs, k_groups = ws.p, ws.inputs, len(buckets.groups)
    n = len(range(*steps.indices(ws.n_steps)))
    grad_ready = ws.fwd[steps][:, None, :] + ws.bwd[steps][:, None, :] * buckets.cum[None, :, None]
    schedule = ws.data_schedules[method]
    if method == "dense":
        payload_bytes, cast, uncast = inputs.dense_times(encoding)
        per_element = payload_bytes / max(inputs.dense_bytes / 4, 1.0)
        group_bytes = (
            per_element * buckets.numel if k_groups > 1 else np.array([float(payload_bytes)])
        )
        local = np.full((n, p), cast if p > 1 else 0.0)
        dec = np.full((n, p), uncast if p > 1 else 0.0)
        variance = np.zeros((n, p))
        payload = np.full((n, p), float(payload_bytes))
        units = [
            np.broadcast_to(unit_sizes(schedule, group_bytes[k]), (n, schedule.n_units))
            for k in range(k_groups)
        ]
        copied = [np.full(n, p * float(group_bytes[k])) for k in range(k_groups)]
    elif method == "sparse":
        assert ws.sparse is not None
        stage = ws.sparse[0][steps]  # [S, stages]
        variance = inputs.variance_s[steps]
        local = variance + inputs.codec_s[steps]
        dec = ws.sparse[2][steps]
        final = stage.max(axis=1) if stage.shape[1] else np.zeros(n)
        payload = np.broadcast_to(final[:, None], (n, p)).copy()
        units = [
            np.stack(
                [
                    unit_sizes(schedule, 0.0, stage_bytes=stage[i], dense_bytes=ws.sparse[1])
                    for i in range(n)
                ]
            )
        ]
        copied = [np.zeros(n)]
    else:
        variance = inputs.variance_s[steps]
        local = variance + inputs.codec_s[steps]
        dec = ws.decode[steps]
        comp = ws.comp_bytes[steps]  # [S, P, K]
        payload = comp.sum(axis=2)
        units = [
            np.stack([unit_sizes(schedule, comp[i, :, k]) for i in range(n)])
            for k in range(k_groups)
        ]
        copied = [comp[:, :, k].sum(axis=1) for k in range(k_groups)]
    side = local[:, None, :] * buckets.frac[None, :, None]  # [S, K, P]
    ready = grad_ready + np.cumsum(side, axis=1)
    schedules, names, readies, all_units, data_index = [], [], [], [], []
    if method == "compressed" and ws.bounded is not None:
        # the hook's buckets one after the other once the step's gradients are compressed
        rows = np.arange(ws.n_steps)[steps]
        phases = _bounded_phases(ws, rows)
        for sched, u, name in phases:
            schedules.append(sched)
            names.append(name)
            readies.append(ready[:, -1])
            all_units.append(u)
        data_index = [len(schedules) - 1]
        copied = [np.zeros(n) for _ in schedules]
        k_groups = 0
    parts = inputs.allreduce_bytes
    for k in range(k_groups):
        if method == "compressed" and parts is not None:
            # PowerSGD: the plain tensors', P's and Q's allreduces, in that order
            for j, part in enumerate(LOWRANK_PARTS):
                if j == len(LOWRANK_PARTS) - 1:
                    data_index.append(len(schedules))
                schedules.append(schedule)
                names.append(f"b{k} {part}")
                readies.append(ready[:, k])
                all_units.append(
                    np.stack([unit_sizes(schedule, parts[steps][i, k, j]) for i in range(n)])
                )
            continue
        if method == "compressed" and ws.exchange is not None:
            schedules.append(ws.exchange)
            names.append(f"b{k} sizes")
            readies.append(ready[:, k])
            all_units.append(np.full((n, p), float(SIZE_HEADER_BYTES)))
        data_index.append(len(schedules))
        schedules.append(schedule)
        names.append(f"b{k}")
        readies.append(ready[:, k])
        all_units.append(units[k])
    start = steps.indices(ws.n_steps)[0]
    host_phases = (
        list(range(len(schedules)))
        if method == "compressed" and ws.bounded is not None
        else list(data_index)
    )
    return _Block(
        label,
        start,
        schedules,
        names,
        readies,
        all_units,
        data_index,
        copied,
        local,
        dec,
        variance,
        payload,
        host_phases,
    )


def _exposed_comm(
    ws: _WorldSize, buckets: _Buckets, block: _Block, finish: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Each step's exposed exchange and step seconds ``([S], [S])`` from the finish times
    [S, B, P]: decode of bucket k runs after its collective, the previous decode and the
    rank's local work (the same device), for its share of the decode time; ``step_s`` is the
    last rank's finish plus the optimizer step."""
    steps = slice(block.start, block.start + block.n_steps)
    work = ws.compute[steps] + block.local
    done = work.copy()
    for k, b in enumerate(block.data_index):
        done = np.maximum(finish[:, b], done) + block.dec * buckets.frac[k]
    optimizer = ws.optimizer[steps]
    step_s = done.max(axis=1) + optimizer
    exposed = step_s - (work + block.dec).max(axis=1) - optimizer
    return np.where(0.0 > exposed, 0.0, exposed), step_s  # never below zero (P = 1 residue)


def _block_records(
    ws: _WorldSize,
    buckets: _Buckets,
    block: _Block,
    finish: np.ndarray,
    paths: list[str],
    wire_s: np.ndarray | None = None,
) -> list[dict[str, Any]]:
    """Each step's result columns (finish [S, B, P]; :func:`_exposed_comm`), the host link's
    token-bucket credit taken off where it has one (``wire_s``: the same steps' exchange on
    the link's bandwidth alone, :func:`vgcsim.core.collectives.burst_credit_s`)."""
    steps = slice(block.start, block.start + block.n_steps)
    compute = ws.compute[steps]
    optimizer = ws.optimizer[steps]
    comm, step_s = _exposed_comm(ws, buckets, block, finish)
    if ws.burst[0] > 0:  # the host link's token bucket refilled in the local phases
        credit = burst_credit_s(comm, step_s, *ws.burst, wire_s)
        comm, step_s = comm - credit, step_s - credit
    variance = block.variance.mean(axis=1)
    columns = {
        "step": ws.inputs.steps[steps].tolist(),
        "compute_s": compute.mean(axis=1).tolist(),
        "optimizer_s": optimizer.tolist(),
        "variance_s": variance.tolist(),
        "codec_s": (block.local.mean(axis=1) - variance).tolist(),
        "decode_s": block.dec.max(axis=1).tolist(),
        "comm_s": comm.tolist(),
        "step_s": step_s.tolist(),
        "payload_bytes_max": block.payload.max(axis=1).tolist(),
        "payload_bytes_mean": block.payload.mean(axis=1).tolist(),
    }
    return [{"path": path, **{c: v[i] for c, v in columns.items()}} for i, path in enumerate(paths)]


def _step_plan(
    ws: _WorldSize, buckets: _Buckets, t: int, method: str, encoding: str, label: str
) -> _StepPlan:
    """The phases of step ``t`` of one variant and the local work they wait for."""
    p, inputs, k_groups = ws.p, ws.inputs, len(buckets.groups)
    grad_ready = ws.fwd[t][None, :] + ws.bwd[t][None, :] * buckets.cum[:, None]  # [K, P]
    if method == "dense":
        payload_bytes, cast, uncast = inputs.dense_times(encoding)
        per_element = payload_bytes / max(inputs.dense_bytes / 4, 1.0)
        group_bytes = (
            per_element * buckets.numel if k_groups > 1 else np.array([float(payload_bytes)])
        )
        local = np.full(p, cast if p > 1 else 0.0)
        dec = np.full(p, uncast if p > 1 else 0.0)
        sizes = [group_bytes[k] for k in range(k_groups)]
        variance = np.zeros(p)
        payload = np.full(p, float(payload_bytes))
    elif method == "sparse":
        assert ws.sparse is not None
        variance = inputs.variance_s[t]
        local = variance + inputs.codec_s[t]
        dec = ws.sparse[2][t]
        stage = ws.sparse[0][t]
        final = float(stage.max()) if stage.size else 0.0
        payload = np.full(p, final)
        sizes = [None]
    else:
        variance = inputs.variance_s[t]
        local = variance + inputs.codec_s[t]
        dec = ws.decode[t]
        sizes = [ws.comp_bytes[t, :, k] for k in range(k_groups)]
        payload = ws.comp_bytes[t].sum(axis=1)
    # Variance, codec and cast work of each bucket runs on the same device as the backward
    # pass (one stream, as in vgcsim.models.iteration): it delays every later bucket's
    # gradients by its own duration.
    side = local[None, :] * buckets.frac[:, None]  # [K, P]
    ready = grad_ready + np.cumsum(side, axis=0)
    schedule = ws.data_schedules[method]
    phases: list[Phase] = []
    data_index = []
    if method == "compressed" and ws.bounded is not None:
        for sched, u, name in _bounded_phases(ws, t):
            phases.append(Phase(ready[-1], sched, u[0], f"{label} {name}"))
        data_index = [len(phases) - 1]
        k_groups = 0
    parts = inputs.allreduce_bytes
    for k in range(k_groups):
        if method == "compressed" and parts is not None:
            for j, part in enumerate(LOWRANK_PARTS):
                if j == len(LOWRANK_PARTS) - 1:
                    data_index.append(len(phases))
                units = unit_sizes(schedule, parts[t, k, j])
                phases.append(Phase(ready[k], schedule, units, f"{label} b{k} {part}"))
            continue
        if method == "compressed" and ws.exchange is not None:
            header = np.full(p, float(SIZE_HEADER_BYTES))
            phases.append(Phase(ready[k], ws.exchange, header, f"{label} b{k} sizes"))
        data_index.append(len(phases))
        if method == "sparse":
            assert ws.sparse is not None
            units = unit_sizes(schedule, 0.0, stage_bytes=ws.sparse[0][t], dense_bytes=ws.sparse[1])
        else:
            units = unit_sizes(schedule, sizes[k])
        phases.append(Phase(ready[k], schedule, units, f"{label} b{k}"))
    return _StepPlan(phases, data_index, local, dec, variance, payload, grad_ready, ready)


def _timeline_steps(ws: _WorldSize, timeline_steps: Sequence[int]) -> set[int]:
    want = {int(s) for s in timeline_steps}
    steps = ws.inputs.steps
    missing = want - {int(s) for s in steps[: ws.n_steps]}
    if missing:
        raise ConfigError(
            f"timeline steps {sorted(missing)} are not among the replayed steps "
            f"{int(steps[0])}..{int(steps[ws.n_steps - 1])}"
        )
    return want


def simulate_trace(
    trace: Trace,
    cluster: ClusterSpec,
    world_sizes: Sequence[int] | None = None,
    cfg: SimulateConfig | None = None,
    *,
    timeline_steps: Sequence[int] = (),
    timeline_max_ranks: int | None = None,
    progress: Callable[[int], None] | None = None,
) -> tuple[pd.DataFrame, list[StepTimeline], dict[str, Any]]:
    """Replay ``trace`` on ``cluster`` for each world size (None: ``cfg.world_sizes``), with
    the trace's own compressed exchange unless ``cfg`` names one
    (:func:`vgcsim.traces.inputs.resolve_collectives`).

    Returns ``(rows, timelines, info)``: result rows with ``RESULT_COLUMNS`` (not yet
    finalized: relative columns are NaN), a :class:`StepTimeline` per method for each trace
    step in ``timeline_steps`` (simulated again at message level with link recording) at
    every world size up to ``timeline_max_ranks`` (all when None; a timeline of a 1024-rank
    ring allreduce holds millions of flows), and ``info`` (how many steps ran on each path,
    per world size).

    ``progress``, if given, is called with the number of steps done as they finish, each
    variant's step counted apart: ``len(world_sizes) × steps × variants`` in all (variants:
    ``len(cfg.dense_encodings) + 1``; :func:`replay_units`). When steps fall back to the
    message level under ``path = "auto"``, one warning per call says where and why.
    """
    rows: list[dict[str, Any]] = []
    timelines: list[StepTimeline] = []
    info: dict[str, Any] = {}
    cfg = resolve_collectives(cfg or SimulateConfig(), trace)
    if world_sizes is None:
        world_sizes = cfg.world_sizes
    buckets = _Buckets.of(trace, cfg)
    encoding = cfg.encoding or trace.primary_encoding
    variants = [("dense", e) for e in cfg.dense_encodings] + [("compressed", encoding)]
    if cfg.overlap == "none" and has_unions(trace) and cfg.sparse_allreduce:
        variants.append(("sparse", "coo64"))
    labels = [_label(m, e) for m, e in variants]
    notice = _Notice()
    for p in world_sizes:
        ws = _world_size(trace, cluster, int(p), cfg, buckets)
        link = ws.cluster.link  # CPU-time terms under the hosts' processor sharing at this P
        gamma, call = link.gamma_s_per_byte, link.call_overhead_s
        host = (link.allgatherv_host_s_per_byte, link.allgatherv_host_s_per_byte_table)
        # each variant on its link: a gather's start-up may differ (allgather_latency_s)
        on_link = _on_links(ws, labels)
        runners = {
            lab: _Runner(topo, cfg, gamma, cache, lab, notice, progress, call, wire)
            for lab, (topo, cache, wire) in on_link.items()
        }
        # a token bucket on the host link: the same steps on its bandwidth alone (no α, c,
        # γ, δ, segments; each message's bytes beyond its start-up's refill) give the part
        # of each exchange that tokens can shorten
        wire_runners = {}
        if idle_burst_bytes(ws.cluster.link) > 0:
            wire_runners = {
                lab: _Runner(topo, cfg, 0.0, cache, lab, wire=wire)
                for lab, (topo, cache, wire) in _on_links(ws, labels, wire_cluster).items()
            }
        per_step: dict[str, list[dict[str, Any]]] = {lab: [] for lab in labels}
        want_timeline = _timeline_steps(ws, timeline_steps)
        draw = timeline_max_ranks is None or ws.p <= timeline_max_ranks
        # steps go in blocks of [S, P] arrays (about a million values each)
        size = max(1, min(_BLOCK_STEPS, _BLOCK_VALUES // ws.p))
        for steps in _step_slices(ws, size):
            for (method, enc), label in zip(variants, labels, strict=True):
                block = _block(ws, buckets, steps, method, enc, label)
                finish, paths = runners[label].run_steps(block)
                # the padded (or bounded) allgatherv's host copies, if priced; the bounded
                # buckets' copies delay the step's last exchange (one stream per rank)
                for b, copied in zip(block.host_phases, block.copied, strict=True):
                    extra = host_time_s(
                        block.schedules[b],
                        block.units[b],
                        *host,
                        copied_bytes=copied,
                        padded_share=link.allgatherv_host_padded_share,
                        fixed_s=link.allgatherv_host_s,
                    )
                    at = block.data_index[-1] if block.schedules[b].bounded else b
                    finish[:, at] += extra[:, None]
                wire_s = None
                if wire_runners:
                    bare_finish, _ = wire_runners[label].run_steps(block)
                    wire_s = _exposed_comm(ws, buckets, block, bare_finish)[0]
                per_step[label].extend(_block_records(ws, buckets, block, finish, paths, wire_s))
            if draw:
                for t in range(steps.start, steps.stop):
                    if int(ws.inputs.steps[t]) in want_timeline:
                        for (method, enc), label in zip(variants, labels, strict=True):
                            plan = _step_plan(ws, buckets, t, method, enc, label)
                            topo, cache, wire = on_link[label]
                            timelines.append(
                                _timeline(
                                    ws,
                                    plan,
                                    cfg=cfg,
                                    gamma=gamma,
                                    call=call,
                                    wire=wire,
                                    method=label,
                                    t=t,
                                    cache=cache,
                                    topology=topo,
                                )
                            )
        info[str(ws.p)] = {lab: dict(runners[lab].counts) for lab in labels}
        rows.extend(_rows(trace, cluster, ws.p, cfg, variants, ws.inputs.device, per_step))
    df = pd.DataFrame(rows, columns=list(RESULT_COLUMNS))
    return df, timelines, info


def replay_units(cfg: SimulateConfig, world_sizes: Sequence[int], n_steps: int) -> int:
    """How many units :func:`simulate_trace` reports through ``progress`` for ``n_steps``
    trace steps (before ``max_steps``): one per step, variant and world size."""
    steps = min(n_steps, cfg.max_steps) if cfg.max_steps else n_steps
    return len(world_sizes) * steps * (len(cfg.dense_encodings) + 1)


def _label(method: str, encoding: str) -> str:
    """The key of one replayed variant (in ``info`` and timelines): ``dense`` (fp32),
    ``dense/bf16``, ``dense/fp16``, ``compressed``."""
    if method == "sparse":
        return "sparse"
    if method != "dense":
        return "compressed"
    return "dense" if encoding == "fp32" else f"dense/{encoding}"


def _dense_key(cfg: SimulateConfig) -> str:
    """The dense baselines' allreduce, as a registry key."""
    return f"allreduce/{cfg.allreduce[0]}"


def _compressed_key(cfg: SimulateConfig) -> str:
    """The compressed exchange's allgatherv, as a registry key (``cfg`` resolved by
    :func:`vgcsim.traces.inputs.resolve_collectives`)."""
    return f"allgatherv/{cfg.allgatherv[0]}"


def _compressed_schedule(cfg: SimulateConfig, p: int) -> Schedule:
    """The compressed collective's schedule; the padded allgatherv without its size rounds
    when ``size_exchange`` is off (sizes known in advance)."""
    sched = get_schedule(_compressed_key(cfg), p)
    if _compressed_key(cfg) == "allgatherv/padded" and not cfg.size_exchange:
        return padded_data_schedule(p)
    return sched


def _slowest_path(paths: Sequence[str]) -> str:
    """The path a group of steps reports: the slowest any of them ran on."""
    for path in ("reference", "message", "round"):
        if path in paths:
            return path
    return "collective"


def _rows(
    trace: Trace,
    cluster: ClusterSpec,
    p: int,
    cfg: SimulateConfig,
    variants: list[tuple[str, str]],
    device: str,
    per_step: dict[str, list[dict[str, Any]]],
) -> list[dict[str, Any]]:
    labels = [_label(m, e) for m, e in variants]
    n = len(per_step[labels[0]])
    step_paths = [_slowest_path([per_step[lab][t]["path"] for lab in labels]) for t in range(n)]
    mean_path = _slowest_path(step_paths)
    rows = []
    for (method, enc), label in zip(variants, labels, strict=True):
        base = {
            "source": "simulated",
            "trace": trace.name,
            "compressor": "dense" if method == "dense" else trace.compressor,
            "encoding": enc,
            "cluster": cluster.name,
            "topology": str(cluster.topology["kind"]),
            "compute_mode": cluster.compute,
            "device": device,
            "world_size": p,
            "method": "compressed" if method == "sparse" else method,
            "collective": SPARSE_COLLECTIVE
            if method == "sparse"
            else _dense_key(cfg)
            if method == "dense" or is_lowrank(trace)
            else _compressed_key(cfg),
            "speedup_vs_dense": math.nan,
            "scaling_efficiency": math.nan,
            "throughput_samples_per_s": math.nan,
        }
        frame = pd.DataFrame(per_step[label])
        numeric = [
            "compute_s",
            "optimizer_s",
            "variance_s",
            "codec_s",
            "decode_s",
            "comm_s",
            "step_s",
            "payload_bytes_max",
            "payload_bytes_mean",
        ]
        mean = {c: float(frame[c].mean()) for c in numeric}
        rows.append({**base, **mean, "path": mean_path, "step": -1})
        if cfg.per_step:
            for t, rec in enumerate(per_step[label]):
                rows.append(
                    {
                        **base,
                        **{c: rec[c] for c in numeric},
                        "path": step_paths[t],
                        "step": rec["step"],
                    }
                )
    return rows


def _timeline(
    ws: _WorldSize,
    plan: _StepPlan,
    *,
    cfg: SimulateConfig,
    gamma: float,
    call: float,
    wire: Callable[[np.ndarray], np.ndarray] | None,
    method: str,
    t: int,
    cache: RunCache,
    topology: Topology,
) -> StepTimeline:
    """Step ``t`` of one variant again at message level on ``topology`` (the variant's own,
    :func:`_on_links`), recording every flow and rank span."""
    topo = topology
    monitor = LinkMonitor(topo.n_channels, record_intervals=True)
    spans: list[RankSpan] = []
    fin = run_message(
        plan.phases,
        topo,
        mode=cfg.mode,
        semantics=cfg.semantics,
        gamma_s_per_byte=gamma,
        monitor=monitor,
        spans=spans,
        cache=cache,
        call_overhead_s=call,
        wire=wire,
    )
    compute, fwd = ws.compute[t], ws.fwd[t]
    for r in range(ws.p):
        spans.append(RankSpan(r, "forward", 0.0, float(fwd[r])))
        spans.append(RankSpan(r, "backward", float(fwd[r]), float(compute[r])))
        if plan.local[r] > 0:
            start = float(plan.grad_ready[0, r])
            name = "variance+codec" if method == "compressed" else "cast"
            spans.append(RankSpan(r, name, start, float(plan.ready[-1, r])))
    return StepTimeline(
        world_size=ws.p,
        method=method,
        step=int(ws.inputs.steps[t]),
        step_s=float(fin[-1].max()),
        spans=spans,
        link_intervals=list(monitor.intervals),
        channel_names=list(topo.channel_names),
        link_bytes=monitor.bytes,
        link_busy_s=monitor.busy_s,
    )
