"""Emulated data-parallel recording: ``record(config) -> Path`` trains and writes a trace.

One process emulates W workers inside the shared loop (:func:`vgcsim.traces.training.loop.train`).
What :class:`EmulatedWorkers` does per step:

1. every worker's B samples go through one batched pass
   (``vgcsim.traces.compression.sqsum_estimators.worker_gradients``), yielding every worker's mean-loss
   gradient and, when the compressor needs it, Σ_z (∇f_z)² over its samples
   (``gradient_pass = "separate"`` runs W passes of B samples instead, for comparison);
   on ``device = "cuda"`` this pass runs on the GPU;
2. every worker compresses every layer with its own compressor state (on the CPU); the
   payloads' exact bits under every encoding are recorded;
3. the decoded payloads are summed and divided by W, exactly as an allgatherv exchange
   followed by a local sum would deliver them on every worker.

Columns ending in ``_s`` are wall-clock seconds; everything else is deterministic for a
given config (same seed → identical tables). ``encode_s`` is measured by encoding the
primary buffer once more, and ``compress_s`` is the compress call minus that; ``decode_s``
is the decode + sum. The loop's own timing columns are described in
:mod:`vgcsim.traces.training.loop`.

:func:`resume` continues an interrupted recording (SIGKILL, a signal, a full disk) from its
last checkpointed chunk; the result equals an uninterrupted run in every column but the
wall-clock seconds.
"""

from __future__ import annotations

import dataclasses
import math
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from vgcsim.core.config import config_from_dict
from vgcsim.core.errors import ConfigError, TraceError
from vgcsim.traces.io import find_resume_point
from vgcsim.traces.training.datasets import Dataset, load_dataset
from vgcsim.traces.training.loop import (
    WorkerSampler,
    build_header,
    check_config,
    evaluate,
    per_sample_loss,
    resolve_config,
    resolve_device,
    train,
)
from vgcsim.traces.training.record_config import GRADIENT_PASSES, RecordConfig

__all__ = [
    "GRADIENT_PASSES",
    "EmulatedWorkers",
    "RecordConfig",
    "WorkerSampler",
    "build_header",
    "check_config",
    "evaluate",
    "record",
    "resume",
    "resolve_config",
    "resolve_device",
]

# The loss every recording trains (kept under its old name for the speed script and tests).
_per_sample_loss = per_sample_loss


def _gradients(model, x, y, cfg: RecordConfig, estimator: str | None):
    from vgcsim.traces.compression.sqsum_estimators import WorkerGrads, worker_gradients

    if cfg.gradient_pass == "batched":
        return worker_gradients(
            model, per_sample_loss, x, y, cfg.workers, estimator, sq_dtype=cfg.sq_dtype
        )
    b = cfg.batch_size
    parts = [
        worker_gradients(
            model,
            per_sample_loss,
            x[w * b : (w + 1) * b],
            y[w * b : (w + 1) * b],
            1,
            estimator,
            sq_dtype=cfg.sq_dtype,
        )
        for w in range(cfg.workers)
    ]
    sq = (
        None
        if estimator is None
        else [torch.cat(t) for t in zip(*(p.sqsums for p in parts), strict=True)]
    )
    return WorkerGrads(
        torch.cat([p.losses for p in parts]),
        [torch.cat(t) for t in zip(*(p.grads for p in parts), strict=True)],
        sq,
        parts[0].names,
    )


class EmulatedWorkers:
    """All W workers in this process (see the module docstring); implements
    :class:`vgcsim.traces.training.loop.Workers`."""

    rank = 0

    def __init__(self, workers: int, device: str = "cpu") -> None:
        self.world = workers
        self.device = torch.device(resolve_device(device))

    def load_data(self, cfg: RecordConfig) -> Dataset:
        return load_dataset(
            cfg.data.name,
            root=cfg.data.root,
            seed=cfg.seed,
            test_fraction=cfg.data.test_fraction,
            download=cfg.data.download,
        )

    def start(self, cfg: RecordConfig, model: torch.nn.Module, compressor, header: dict) -> None:
        from vgcsim.traces.wire.encoders import ENCODINGS

        self.cfg = cfg
        self.compressor = compressor
        self.states = [
            [compressor.init_state(p.numel()) for p in model.parameters()]
            for _ in range(self.world)
        ]
        self.generator = torch.Generator().manual_seed(cfg.seed + 0x9E37)
        # A compressor whose workers' messages depend on each other (powersgd) exchanges all
        # W workers at once and keeps state they share.
        self.shared = compressor.init_shared() if compressor.collective else None
        self.shapes = [tuple(p.shape) for p in model.parameters()]
        if self.shared is None:
            self.primary = ENCODINGS[compressor.primary_encoding]
        # sparse payloads: record the union of workers 0..w's index sets (sparse allreduce)
        from vgcsim.traces.compression.compressors.sparse import SparseCompressor

        self.unions = isinstance(compressor, SparseCompressor)

    def local_indices(self, indices: np.ndarray) -> np.ndarray:
        return indices

    def checkpoint_state(self) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
        """Every worker's compressor state (``compressor/<worker>/<layer>/<field>``) and the
        compression generator, for :mod:`vgcsim.traces.training.checkpoint`."""
        tensors: dict[str, torch.Tensor] = {"generator": self.generator.get_state()}
        scalars: dict[str, Any] = {}
        if self.shared is not None:
            shared_t, scalars["compressor/shared"] = _shared_state(self.shared)
            tensors.update({f"compressor/shared/{k}": v for k, v in shared_t.items()})
        for w, layers in enumerate(self.states):
            for layer, state in enumerate(layers):
                for name, value in _state_fields(state).items():
                    key = f"compressor/{w}/{layer}/{name}"
                    if isinstance(value, torch.Tensor):
                        tensors[key] = value
                    else:
                        scalars[key] = value
        return tensors, scalars

    def load_checkpoint_state(
        self, tensors: dict[str, torch.Tensor], scalars: dict[str, Any]
    ) -> None:
        """Inverse of :meth:`checkpoint_state` (tensors copied into the live state in place)."""
        self.generator.set_state(tensors["generator"])
        if self.shared is not None:
            prefix = "compressor/shared/"
            shared_t = {k[len(prefix) :]: v for k, v in tensors.items() if k.startswith(prefix)}
            _load_shared_state(self.shared, shared_t, scalars["compressor/shared"])
        for w, layers in enumerate(self.states):
            for layer, state in enumerate(layers):
                for name, value in _state_fields(state).items():
                    key = f"compressor/{w}/{layer}/{name}"
                    if isinstance(value, torch.Tensor):
                        saved = tensors[key]
                        if saved.shape != value.shape or saved.dtype != value.dtype:
                            raise ValueError(f"{key} is {saved.dtype}{list(saved.shape)}")
                        value.copy_(saved)
                    else:
                        setattr(state, name, scalars[key])

    def gradients(self, model, x, y, estimator: str | None):
        return _gradients(model, x, y, self.cfg, estimator)

    def all_finite(self, finite: bool) -> bool:
        return finite

    def gather(self, mine: dict[str, Any]) -> list[dict[str, Any]]:
        return [mine]

    def exchange(self, step: int, wg, params: list) -> dict[str, Any]:
        if self.shared is not None:
            return self._exchange_together(wg, params)
        W, B = self.world, self.cfg.batch_size
        sent: list[list[int]] = []
        bits: list[list[dict[str, int]]] = []
        compress_s = encode_s = decode_s = 0.0
        sq_grad_norm = 0.0
        union_prefix: list[list[int]] = []
        for layer, p in enumerate(params):
            # Compression runs on the CPU, where the wire encoders are.
            g = wg.grads[layer].reshape(W, -1).cpu()
            sq = wg.sqsums[layer].reshape(W, -1).cpu() if wg.sqsums is not None else None
            sq_grad_norm += float(g.mean(0).double().square().sum())
            agg = torch.zeros(g.shape[1], dtype=torch.float32)
            layer_sent, layer_bits = [], []
            seen = np.zeros(g.shape[1], dtype=bool) if self.unions else None
            layer_union: list[int] = []
            for w in range(W):
                t0 = time.perf_counter()
                payload = self.compressor.compress(
                    g[w],
                    self.states[w][layer],
                    sqsum=None if sq is None else sq[w],
                    batch_size=B,
                    layer=layer,
                    generator=self.generator,
                )
                t1 = time.perf_counter()
                if payload.message is not None:
                    self.primary.encode(payload.message)
                t2 = time.perf_counter()
                agg += payload.decode()
                t3 = time.perf_counter()
                enc_s = t2 - t1
                encode_s += enc_s
                compress_s += max(0.0, (t1 - t0) - enc_s)
                decode_s += t3 - t2
                layer_sent.append(payload.sent)
                layer_bits.append(payload.bits)
                if seen is not None:
                    seen[payload.message.indices] = True
                    layer_union.append(int(np.count_nonzero(seen)))
            p.grad = (agg / W).view_as(p).to(p.device)
            sent.append(layer_sent)
            bits.append(layer_bits)
            union_prefix.append(layer_union)
        extra = {"union_prefix": union_prefix} if self.unions else {}
        return {
            "sent": sent,
            "bits": bits,
            "extra": extra,
            "grad_norm": math.sqrt(sq_grad_norm),
            "compress_s": compress_s,
            "encode_s": encode_s,
            "decode_s": decode_s,
        }

    def _exchange_together(self, wg, params: list) -> dict[str, Any]:
        """All W workers' exchange in one call of the compressor (powersgd): every worker
        sends, per layer, the same fp32 elements (its share of the allreduced buffers)."""
        W = self.world
        grads = [wg.grads[layer].reshape(W, -1).cpu() for layer in range(len(params))]
        sq_grad_norm = sum(float(g.mean(0).double().square().sum()) for g in grads)
        t0 = time.perf_counter()
        res = self.compressor.exchange(grads, self.shapes, self.states, self.shared)
        compress_s = time.perf_counter() - t0
        for p, mean in zip(params, res.means, strict=True):
            p.grad = mean.view_as(p).to(p.device)
        enc = self.compressor.primary_encoding
        return {
            "sent": [[n] * W for n in res.sent],
            "bits": [[{enc: 32 * n}] * W for n in res.sent],
            "extra": {
                "lowrank_p_elements": [[n] * W for n in res.p_elements],
                "lowrank_q_elements": [[n] * W for n in res.q_elements],
            },
            "grad_norm": math.sqrt(sq_grad_norm),
            # the whole exchange's local work (matmuls, orthogonalization, error feedback)
            # of all W workers: the codec of this compressor
            "compress_s": compress_s,
            "encode_s": 0.0,
            "decode_s": 0.0,
        }


def record(
    cfg: RecordConfig,
    out_dir: str | Path,
    *,
    progress: bool = False,
    overwrite: bool = False,
) -> Path:
    """Train ``cfg`` with W emulated workers on ``cfg.device`` and write the trace to
    ``out_dir``.

    Raises :class:`TrainingDivergedError` when NaN/Inf appears (the trace keeps every step
    before it, status ``stopped``); config problems raise :class:`ConfigError` up front.
    """
    check_config(cfg)
    workers = EmulatedWorkers(cfg.workers, cfg.device)
    path = train(cfg, workers, out_dir, progress=progress, overwrite=overwrite)
    assert path is not None  # rank 0 always writes
    return path


def resume(run_dir: str | Path, cfg: RecordConfig | None = None, *, progress: bool = False) -> Path:
    """Continue the interrupted recording in ``run_dir`` from its last checkpointed chunk.

    ``cfg`` defaults to the config in its header; a given one must equal it. Refuses
    (:class:`TraceError` / :class:`ConfigError`) a folder that is not a trace, a complete
    run, a synthetic or torch.distributed trace and a different config.
    """
    point = find_resume_point(run_dir)
    if "distributed" in point.header:
        raise ConfigError(
            f"{point.run_dir} was recorded with torch.distributed, whose ranks write no "
            "checkpoint; --resume continues emulated recordings only"
        )
    saved = point.header.get("config")
    if not isinstance(saved, dict):
        raise TraceError(f"{point.run_dir}: the header holds no record config to resume")
    if cfg is None:
        cfg = config_from_dict(RecordConfig, saved)
    check_config(cfg)
    workers = EmulatedWorkers(cfg.workers, cfg.device)
    path = train(cfg, workers, point.run_dir, progress=progress, resume=point)
    assert path is not None
    return path


def _shared_state(shared: Any) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """A collective compressor's shared state: its Q memory (tensors), step count and the
    numpy generator's state (JSON)."""
    kind, keys, pos, has_gauss, cached = shared.rng.get_state()
    tensors = {f"q/{layer}": q for layer, q in shared.q_memory.items()}
    tensors["rng_keys"] = torch.from_numpy(np.asarray(keys, dtype=np.int64))
    return tensors, {
        "iter": shared.iter,
        "rng": [kind, int(pos), int(has_gauss), float(cached)],
    }


def _load_shared_state(shared: Any, tensors: dict[str, torch.Tensor], scalars: dict) -> None:
    """Inverse of :func:`_shared_state`."""
    kind, pos, has_gauss, cached = scalars["rng"]
    keys = tensors["rng_keys"].numpy().astype(np.uint32)
    shared.rng.set_state((kind, keys, int(pos), int(has_gauss), float(cached)))
    shared.iter = int(scalars["iter"])
    shared.q_memory.clear()
    for key, q in tensors.items():
        if key.startswith("q/"):
            shared.q_memory[int(key[2:])] = q.clone()


def _state_fields(state: object) -> dict[str, Any]:
    """The fields of one (worker, layer) compressor state (None: a stateless compressor)."""
    if state is None:
        return {}
    if not dataclasses.is_dataclass(state):
        raise TypeError(f"cannot checkpoint compressor state {type(state).__name__}")
    return {f.name: getattr(state, f.name) for f in dataclasses.fields(state)}
