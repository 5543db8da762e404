"""A trace of the user's own DDP job, written by the vgcsim hook (``register_vgc_hook(...,
trace_dir=...)``).

Every rank keeps, per step, what its exchange did (:class:`StepCommStats`: elements sent and
bits per layer, wire bytes, fallback rounds, compress / exchange / decode seconds), the
squared-sum seconds of the backward's hooks, the phases the script reports
(:meth:`HookTracer.timed`: ``forward_backward``, ``optimizer``) and the step's wall time
between two :meth:`HookTracer.step_done` calls, which close the steps (``step_wall_s``: the
script's whole step, its data loading and ``zero_grad`` included, the tracer's own gathers
excluded). Every ``gather_every`` steps (and at :meth:`HookTracer.close`) the ranks send
their rows to rank 0 in one ``gather_object`` on a gloo group of their own; rank 0 writes them
as a standard trace (``vgcsim.traces.io.TraceWriter``): the payloads and steps tables every
command reads, plus the ``ranks`` table (one row per step and rank, seconds and wire bytes
measured on that rank). The header says ``source = "ddp_hook"`` and carries the bucket layout
(``hook.layouts``: from which step on DDP handed over which buckets, each the list of its
layers, in order; DDP rebuilds its buckets after the first step), which prices the exchange
(``allgatherv/bounded``: a bucket's message is ``4·(L + 1)`` header bytes plus its layers'
bytes).

Steps-table columns follow the torch.distributed recordings (sums over ranks, so that a
reader divides by W): ``compute_s`` Σ_r (forward+backward − the hook's own seconds),
``variance_s`` Σ_r squared sums, ``compress_s``/``encode_s``/``decode_s`` Σ_r, ``comm_s``
the slowest rank's exchange, ``rank_compute_s`` mean_r compute, ``optimizer_s`` mean_r (NaN
where the script does not report it). ``loss``, ``lr`` and ``grad_norm`` are what the script
passes to ``step_done`` (0 where it passes nothing).
"""

from __future__ import annotations

import contextlib
import logging
import math
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from vgcsim.core.bounded import message_header_bytes
from vgcsim.core.errors import ConfigError
from vgcsim.core.provenance import git_commit, machine_info, package_versions
from vgcsim.traces import schema
from vgcsim.traces.io import TraceWriter, write_header

log = logging.getLogger(__name__)

#: What a script may time with :meth:`HookTracer.timed`.
PHASES = ("forward_backward", "optimizer")
#: Steps between two gathers to rank 0 (one gloo gather_object of every rank's rows).
DEFAULT_GATHER_EVERY = 50
#: The value of the header's ``source`` for traces the hook writes.
HOOK_SOURCE = "ddp_hook"


class HookTracer:
    """One rank's part of a hook-written trace (see the module docstring).

    Hyperparameters: ``trace_dir`` (rank 0 writes there; a folder vgcsim did not write is
    refused, ``overwrite`` replaces an earlier trace), ``gather_every`` (steps between gathers;
    each costs one gather of every rank's rows, a few kB per step on gloo).
    """

    def __init__(
        self,
        state: Any,
        model: torch.nn.Module,
        trace_dir: str | Path,
        *,
        gather_every: int = DEFAULT_GATHER_EVERY,
        overwrite: bool = False,
        flops_per_sample: float | None = None,
        config: dict[str, Any] | None = None,
    ) -> None:
        if int(gather_every) < 1:
            raise ConfigError(f"gather_every must be a positive integer, got {gather_every!r}")
        if flops_per_sample is not None and not float(flops_per_sample) > 0:
            raise ConfigError(f"flops_per_sample must be positive, got {flops_per_sample!r}")
        self.state = state
        self.trace_dir = Path(trace_dir)
        self.gather_every = int(gather_every)
        self.overwrite = overwrite
        self.flops_per_sample = None if flops_per_sample is None else float(flops_per_sample)
        self.config = dict(config or {})
        group = state.process_group
        self.rank = dist.get_rank(group)
        self.world = dist.get_world_size(group)
        ranks = dist.get_process_group_ranks(group or dist.group.WORLD)
        # gather_object on a gloo group of its own: CPU objects whatever the main backend
        self.group = dist.new_group(ranks, backend="gloo", use_local_synchronization=True)
        self.dst = ranks[0]
        # refused before the first step, not at the first gather, and on every rank: rank 0
        # alone looks at the folder and tells the others, so each raises the same error
        # instead of the peers failing later on a closed connection
        refusal: list[str | None] = [None]
        if self.rank == 0 and Path(self.trace_dir).exists() and not Path(self.trace_dir).is_dir():
            refusal[0] = f"trace_dir {self.trace_dir} is a file; give a folder"
        elif self.rank == 0 and not overwrite and _non_empty(self.trace_dir):
            refusal[0] = (
                f"trace folder {self.trace_dir} is not empty; choose another trace_dir or pass "
                "overwrite=True"
            )
        if self.world > 1:
            dist.broadcast_object_list(refusal, src=self.dst, group=self.group)
        if refusal[0] is not None:
            raise ConfigError(refusal[0])
        self.layers = [
            {"index": i, "name": n, "shape": list(p.shape), "numel": p.numel()}
            for i, (n, p) in enumerate(
                (n, p) for n, p in model.named_parameters() if p.requires_grad
            )
        ]
        self._rows: list[dict[str, Any]] = []
        self._phase_s: dict[str, float] = {}
        self._sqsum_mark = self._sqsum_seconds()
        self._step = 0
        # the end of the previous step_done: a step's wall time runs from there to the start
        # of the next step_done, so the tracer's own gathers and writes are not in it
        self._wall_mark: float | None = None
        self._writer: TraceWriter | None = None
        self._closed = False

    # -- per step, on every rank -----------------------------------------------------------
    @contextlib.contextmanager
    def timed(self, phase: str) -> Iterator[None]:
        """Time ``phase`` (``forward_backward`` or ``optimizer``) of the current step."""
        if phase not in PHASES:
            raise ConfigError(f"unknown phase {phase!r}; valid: {', '.join(PHASES)}")
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self._phase_s[phase] = self._phase_s.get(phase, 0.0) + time.perf_counter() - t0

    def step_done(
        self,
        *,
        loss: float | None = None,
        lr: float | None = None,
        grad_norm: float | None = None,
        forward_backward_s: float | None = None,
        optimizer_s: float | None = None,
    ) -> None:
        """Close this step on this rank (call it on every rank, after ``optimizer.step()``).

        Seconds measured by the script itself may be passed instead of :meth:`timed`.
        Every ``gather_every`` steps this call is a collective of the ranks (the gather)."""
        if self._closed:
            raise ConfigError("the hook's trace is closed: step_done after close_trace")
        now = time.perf_counter()
        wall = now - self._wall_mark if self._wall_mark is not None else math.nan
        stats = self.state.stats
        primary = self.state.compressor.primary_encoding
        phases = dict(self._phase_s)
        if forward_backward_s is not None:
            phases["forward_backward"] = float(forward_backward_s)
        if optimizer_s is not None:
            phases["optimizer"] = float(optimizer_s)
        sq_now = self._sqsum_seconds()
        own = stats.compress_s + stats.encode_s + stats.comm_s + stats.decode_s
        sqsum = max(0.0, sq_now - self._sqsum_mark)
        fb = phases.get("forward_backward", math.nan)
        row = {
            "step": self._step,
            "rank": self.rank,
            "loss": _finite(loss),
            "lr": _finite(lr),
            "grad_norm": _finite(grad_norm),
            "forward_backward_s": fb,
            "compute_s": max(0.0, fb - own - sqsum) if math.isfinite(fb) else math.nan,
            "sqsum_s": sqsum,
            "compress_s": stats.compress_s,
            "encode_s": stats.encode_s,
            "comm_s": stats.comm_s,
            "decode_s": stats.decode_s,
            "optimizer_s": phases.get("optimizer", math.nan),
            "step_wall_s": wall,
            "wire_bytes": int(stats.wire_bytes),
            "fallback_rounds": int(stats.fallback_rounds),
            "sent": dict(stats.sent),
            "bits": {i: int(b[primary]) for i, b in stats.bits.items()},
            "numel": dict(stats.numel),
            "buckets": [list(b) for b in stats.buckets],
        }
        self._rows.append(row)
        self._phase_s = {}
        self._sqsum_mark = sq_now
        self._step += 1
        if self._step % self.gather_every == 0:
            self._gather()
        self._wall_mark = time.perf_counter()

    def close(self, status: str = "complete") -> Path | None:
        """Gather what is left and finish the trace (rank 0: returns its folder). A
        collective of the ranks; call it once on every rank after the last step."""
        if self._closed:
            return self.trace_dir if self.rank == 0 else None
        self._gather()
        self._closed = True
        if self._writer is not None:
            self._writer.finish(status)
            return self.trace_dir
        return None

    # -- internals -------------------------------------------------------------------------
    def _sqsum_seconds(self) -> float:
        hooks = self.state.sqsum_hooks
        return float(getattr(hooks, "seconds", 0.0)) if hooks is not None else 0.0

    def _gather(self) -> None:
        mine, self._rows = self._rows, []
        everyone: list[Any] | None = [None] * self.world if self.rank == 0 else None
        dist.gather_object(mine, everyone, dst=self.dst, group=self.group)
        if self.rank != 0 or not mine:
            return
        assert everyone is not None
        by_step: dict[int, list[dict[str, Any]]] = {}
        for rows in everyone:
            for row in rows:
                by_step.setdefault(row["step"], []).append(row)
        payload: dict[str, list[int]] = {}
        rank_rows: list[dict[str, Any]] = []
        step_rows = [
            self._step_row(step, sorted(by_step[step], key=lambda r: r["rank"]), payload, rank_rows)
            for step in sorted(by_step)
        ]
        # one frame per table per gather (a gather holds at most one chunk of steps: the
        # steps' rows go in before the step that closes the chunk)
        assert self._writer is not None
        if payload.get("step"):
            self._writer.add_payload_rows(payload)
        self._writer.add_rank_rows(rank_rows)
        for row in step_rows:
            self._writer.add_step(row)
        self._writer.flush()

    def _open(self, buckets: list[list[int]]) -> TraceWriter:
        comp = self.state.compressor
        total = sum(layer["numel"] for layer in self.layers)
        header = {
            "synthetic": False,
            "source": HOOK_SOURCE,
            "config": {"source": HOOK_SOURCE, "gather_every": self.gather_every, **self.config},
            "seeds": {"seed": None},
            "versions": package_versions("torch"),
            "git_commit": git_commit(),
            "machine": machine_info(torch_threads=torch.get_num_threads()),
            "workers": self.world,
            "batch_size_per_worker": int(self.state.batch_size or 1),
            "compressor": {"name": comp.name, "params": dict(getattr(comp, "params", {}))},
            "encodings": [comp.primary_encoding],
            "primary_encoding": comp.primary_encoding,
            "layers": self.layers,
            "flops_per_sample": self.flops_per_sample,
            "dense_bytes_per_step": 4 * total,
            "device": {"type": str(self.state.device).split(":")[0]},
            "distributed": {
                "backend": str(dist.get_backend(self.state.process_group)),
                "world_size": self.world,
                "collective": self.state.collective,
            },
            "hook": {
                "exchange": "allgatherv/bounded"
                if self.state.collective == "allgatherv"
                else "allreduce/ring",
                "layouts": [{"from_step": 0, "buckets": buckets}],
                "header_bytes_per_layer": 4,
                "header_bytes_fixed": message_header_bytes(0),
            },
            "timing": {
                "compute_s": "sum over ranks of forward+backward minus the hook's own seconds "
                "(sqsum, compress, encode, exchange, decode); 0 where the script reports no "
                "forward_backward",
                "variance_s": "sum over ranks of the squared-sum hooks' seconds",
                "comm_s": "the slowest rank's exchange (gather start to gathered)",
                "optimizer_s": "mean over ranks of the reported optimizer step",
                "ranks": "one row per step and rank: every measured term and wire_bytes",
                "step_wall_s": "a rank's wall seconds from the end of one step_done to the "
                "start of the next (the whole step as the script runs it, data loading and "
                "zero_grad included, the tracer's own work excluded; NaN on the first step)",
            },
        }
        return TraceWriter(
            self.trace_dir, header, chunk_steps=self.gather_every, overwrite=self.overwrite
        )

    def _step_row(
        self,
        step: int,
        rows: list[dict[str, Any]],
        payload: dict[str, list[int]],
        rank_rows: list[dict[str, Any]],
    ) -> dict[str, Any]:
        """The steps-table row of ``step`` (every rank's ``rows``); its payload and rank rows
        are appended to ``payload`` and ``rank_rows``."""
        # the dense compressor all-reduces without the bounded buckets: one of every layer
        buckets = rows[0]["buckets"] or [[layer["index"] for layer in reversed(self.layers)]]
        if self._writer is None:
            self._writer = self._open(buckets)
        layouts = self._writer.header["hook"]["layouts"]
        if buckets != layouts[-1]["buckets"]:
            # DDP rebuilds its buckets after the first step: the header names every layout
            # and the step it starts at (rewritten at once, so a killed run says it too)
            layouts.append({"from_step": step, "buckets": buckets})
            write_header(self._writer.run_dir, self._writer.header)
        enc = schema.BITS_PREFIX + self._writer.header["primary_encoding"]
        for c in ("step", "worker", "layer", "numel", "sent", enc):
            payload.setdefault(c, [])
        for row in rows:
            for i in sorted(row["numel"]):
                payload["step"].append(step)
                payload["worker"].append(row["rank"])
                payload["layer"].append(i)
                payload["numel"].append(row["numel"][i])
                payload["sent"].append(row["sent"][i])
                payload[enc].append(row["bits"][i])
        sent = sum(sum(r["sent"].values()) for r in rows)
        numel = sum(sum(r["numel"].values()) for r in rows)
        computes = [r["compute_s"] for r in rows]
        optim = [r["optimizer_s"] for r in rows if math.isfinite(r["optimizer_s"])]
        rank_rows.extend({k: v for k, v in r.items() if k in schema.RANK_COLUMNS} for r in rows)
        return {
            "step": step,
            "loss": rows[0]["loss"],
            "lr": rows[0]["lr"],
            "grad_norm": rows[0]["grad_norm"],
            "density": sent / numel if numel else 0.0,
            "compute_s": sum(c for c in computes if math.isfinite(c)),
            "variance_s": sum(r["sqsum_s"] for r in rows),
            "compress_s": sum(r["compress_s"] for r in rows),
            "encode_s": sum(r["encode_s"] for r in rows),
            "decode_s": sum(r["decode_s"] for r in rows),
            "comm_s": max(r["comm_s"] for r in rows),
            "rank_compute_s": (
                sum(computes) / len(computes)
                if all(math.isfinite(c) for c in computes)
                else math.nan
            ),
            "optimizer_s": sum(optim) / len(optim) if optim else math.nan,
        }


def _non_empty(folder: Path) -> bool:
    return folder.exists() and (not folder.is_dir() or any(folder.iterdir()))


def _finite(value: float | None) -> float:
    if value is None:
        return 0.0
    v = float(value)
    if not math.isfinite(v):
        raise ConfigError(f"step_done: {value!r} is not a finite number")
    return v
