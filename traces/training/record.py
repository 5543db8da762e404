"""The emulated data-parallel loop: ``record(config) -> Path`` trains and writes a trace.

One process emulates W workers. Per step:

1. each worker draws its own minibatch of B samples from its own shard of the training set;
2. one batched pass (``traces.compression.variance.worker_gradients``) yields every worker's
   mean-loss gradient and, when the compressor needs it, Σ_z (∇f_z)² over its samples
   (``gradient_pass = "separate"`` runs W passes of B samples instead, for comparison);
3. every worker compresses every layer with its own compressor state; the payloads' exact
   bits under every encoding are recorded;
4. the decoded payloads are summed and divided by W, exactly as an allgatherv exchange
   followed by a local sum would deliver them on every worker; the optimizer steps.

Columns ending in ``_s`` are wall-clock seconds; everything else is deterministic for a
given config (same seed → identical tables). ``compute_s``/``variance_s`` split the
measured pass time by the fraction a pass without the estimator takes, probed every
``probe_every`` steps on the same batch; ``encode_s`` is measured by encoding the primary
buffer once more, and ``compress_s`` is the compress call minus that.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.nn import functional as F

from traces import schema
from traces.config import to_dict
from traces.errors import ConfigError, TrainingDivergedError, unknown_name
from traces.io import TraceWriter
from traces.provenance import git_commit, machine_info, package_versions
from traces.training.allocator import keep_freed_memory
from traces.training.datasets import DATASETS, Dataset, load_dataset
from traces.training.nets import NETS, build_net, flops_per_sample
from traces.training.optim import build_optimizer
from traces.training.record_config import GRADIENT_PASSES, RecordConfig

log = logging.getLogger(__name__)


def check_config(cfg: RecordConfig) -> None:
    """Refuse unknown names and bad hyperparameters before any work starts."""
    from traces.compression import get_compressor
    from traces.compression.variance import ESTIMATORS, SQ_DTYPES
    from traces.training.optim import OPTIMIZERS, SCHEDULES

    checks = (
        ("dataset", cfg.data.name, DATASETS),
        ("model", cfg.model.name, NETS),
        ("optimizer", cfg.optimizer.name, OPTIMIZERS),
        ("learning-rate schedule", cfg.optimizer.schedule, SCHEDULES),
        ("variance estimator", cfg.estimator, ESTIMATORS),
        ("squared-sum precision", cfg.sq_dtype, SQ_DTYPES),
        ("gradient pass", cfg.gradient_pass, GRADIENT_PASSES),
    )
    for kind, name, valid in checks:
        if name not in valid:
            raise unknown_name(kind, name, valid)
    get_compressor(cfg.compressor.name, **cfg.compressor.params)


def resolve_config(cfg: RecordConfig) -> RecordConfig:
    """``cfg`` with its machine-dependent settings made explicit (``sq_dtype="auto"`` →
    what this machine runs), as the trace header records it."""
    from traces.compression.variance import resolve_sq_dtype

    return dataclasses.replace(cfg, sq_dtype=resolve_sq_dtype(cfg.sq_dtype))


# -- data -------------------------------------------------------------------------------------


class WorkerSampler:
    """Worker w owns every W-th sample of a seeded permutation of the training set and walks
    through its shard in seeded reshuffled epochs, B samples per step."""

    def __init__(self, n: int, workers: int, batch_size: int, seed: int) -> None:
        root = np.random.SeedSequence([seed, 0x5A4D])
        perm = np.random.default_rng(root.spawn(1)[0]).permutation(n)
        self.shards = [perm[w::workers] for w in range(workers)]
        small = min(len(s) for s in self.shards)
        if small < batch_size:
            raise ConfigError(
                f"each worker's shard has {small} samples, fewer than batch_size={batch_size}; "
                "use fewer workers or a smaller batch"
            )
        self.rngs = [np.random.default_rng(s) for s in root.spawn(workers + 1)[1:]]
        self.batch_size = batch_size
        self._order = [
            rng.permutation(shard) for rng, shard in zip(self.rngs, self.shards, strict=True)
        ]
        self._pos = [0] * workers

    def next_indices(self) -> np.ndarray:
        """Indices of all workers' next minibatches, worker-major ([w*B, (w+1)*B) is worker w)."""
        out = []
        for w, shard in enumerate(self.shards):
            if self._pos[w] + self.batch_size > len(shard):
                self._order[w] = self.rngs[w].permutation(shard)
                self._pos[w] = 0
            out.append(self._order[w][self._pos[w] : self._pos[w] + self.batch_size])
            self._pos[w] += self.batch_size
        return np.concatenate(out)


def _per_sample_loss(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits, y, reduction="none")


@torch.no_grad()
def evaluate(
    model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, batch: int = 1000
) -> tuple[float, float]:
    """Mean cross-entropy and accuracy of ``model`` on (x, y)."""
    model.eval()
    loss_sum, correct = 0.0, 0
    for i in range(0, len(x), batch):
        logits = model(x[i : i + batch])
        loss_sum += float(F.cross_entropy(logits, y[i : i + batch], reduction="sum"))
        correct += int((logits.argmax(1) == y[i : i + batch]).sum())
    model.train()
    return loss_sum / len(x), correct / len(x)


# -- header -----------------------------------------------------------------------------------


def build_header(
    cfg: RecordConfig, model: torch.nn.Module, data: Dataset, compressor
) -> dict[str, Any]:
    """Trace header for a recording (everything but the fields the writer fills)."""
    layers = [
        {"index": i, "name": n, "shape": list(p.shape), "numel": p.numel()}
        for i, (n, p) in enumerate(model.named_parameters())
    ]
    total = sum(layer["numel"] for layer in layers)
    return {
        "synthetic": False,
        "config": to_dict(cfg),
        "seeds": {"seed": cfg.seed},
        "versions": package_versions("torch"),
        "git_commit": git_commit(),
        "machine": machine_info(torch_threads=torch.get_num_threads()),
        "workers": cfg.workers,
        "batch_size_per_worker": cfg.batch_size,
        "compressor": {"name": compressor.name, "params": compressor.params},
        "encodings": list(compressor.encodings),
        "primary_encoding": compressor.primary_encoding,
        "layers": layers,
        "flops_per_sample": flops_per_sample(
            model, data.input_shape, _per_sample_loss, data.num_classes
        ),
        "dense_bytes_per_step": 4 * total,
        "dataset": {
            "name": data.name,
            "train": len(data.y_train),
            "test": len(data.y_test),
            "input_shape": list(data.input_shape),
            "num_classes": data.num_classes,
        },
    }


# -- the loop ---------------------------------------------------------------------------------


def _gradients(model, x, y, cfg: RecordConfig, estimator: str | None):
    from traces.compression.variance import WorkerGrads, worker_gradients

    if cfg.gradient_pass == "batched":
        return worker_gradients(
            model, _per_sample_loss, x, y, cfg.workers, estimator, sq_dtype=cfg.sq_dtype
        )
    b = cfg.batch_size
    parts = [
        worker_gradients(
            model,
            _per_sample_loss,
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


def _all_finite(losses: torch.Tensor, grads: list[torch.Tensor]) -> bool:
    return bool(torch.isfinite(losses).all()) and all(bool(torch.isfinite(g).all()) for g in grads)


def record(
    cfg: RecordConfig,
    out_dir: str | Path,
    *,
    progress: bool = False,
    overwrite: bool = False,
) -> Path:
    """Train ``cfg`` with W emulated workers and write the trace to ``out_dir``.

    Raises :class:`TrainingDivergedError` when NaN/Inf appears (the trace keeps every step
    before it, status ``stopped``); config problems raise :class:`ConfigError` up front.
    """
    check_config(cfg)
    cfg = resolve_config(cfg)
    keep_freed_memory()
    saved_threads = torch.get_num_threads()
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    try:
        # Model initialisation uses torch's default generator: fork it so that the caller's
        # global RNG state is untouched and our draws depend on cfg.seed only.
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(cfg.seed)
            return _record(cfg, Path(out_dir), progress=progress, overwrite=overwrite)
    finally:
        torch.set_num_threads(saved_threads)


def _record(cfg: RecordConfig, out_dir: Path, *, progress: bool, overwrite: bool) -> Path:
    from traces.compression import ENCODINGS, get_compressor

    data = load_dataset(
        cfg.data.name,
        root=cfg.data.root,
        seed=cfg.seed,
        test_fraction=cfg.data.test_fraction,
        download=cfg.data.download,
    )
    model = build_net(cfg.model.name, data.input_shape, data.num_classes, cfg.model.width)
    compressor = get_compressor(cfg.compressor.name, **cfg.compressor.params)
    params = [p for p in model.parameters()]
    optimizer, scheduler = build_optimizer(params, cfg.optimizer, cfg.steps)
    header = build_header(cfg, model, data, compressor)
    sampler = WorkerSampler(len(data.y_train), cfg.workers, cfg.batch_size, cfg.seed)
    eval_gen = np.random.default_rng([cfg.seed, 0xE7A1])
    train_eval = np.sort(eval_gen.permutation(len(data.y_train))[: cfg.eval_samples])
    test_eval = np.arange(min(cfg.eval_samples, len(data.y_test)))
    qgen = torch.Generator().manual_seed(cfg.seed + 0x9E37)
    W, B = cfg.workers, cfg.batch_size
    numels = [p.numel() for p in params]
    states = [[compressor.init_state(n) for n in numels] for _ in range(W)]
    estimator = cfg.estimator if compressor.needs_sqsum else None
    encodings = list(compressor.encodings)
    primary = ENCODINGS[compressor.primary_encoding]
    numel_total = sum(numels)
    compute_fraction = 1.0
    bits_sum = dense_sum = 0
    last_acc = float("nan")

    bar = _progress(cfg.steps, progress)
    try:
        with TraceWriter(
            out_dir, header, chunk_steps=cfg.chunk_steps, overwrite=overwrite
        ) as writer:
            for step in range(cfg.steps):
                idx = torch.from_numpy(sampler.next_indices())
                x, y = data.x_train[idx], data.y_train[idx]
                t0 = time.perf_counter()
                wg = _gradients(model, x, y, cfg, estimator)
                pass_s = time.perf_counter() - t0
                if not _all_finite(wg.losses, wg.grads):
                    reason = f"NaN or Inf in the loss or gradients at step {step}"
                    writer.finish("stopped", reason)
                    raise TrainingDivergedError(
                        f"{reason}; stopped and kept the {writer.steps_written} steps before it in {out_dir} "
                        "(try a lower optimizer.lr)"
                    )
                if estimator is not None and step % cfg.probe_every == 0:
                    t0 = time.perf_counter()
                    _gradients(model, x, y, cfg, None)
                    compute_fraction = min(1.0, (time.perf_counter() - t0) / max(pass_s, 1e-12))

                rows = {
                    c: np.empty(W * len(params), dtype=np.int64)
                    for c in (*schema.PAYLOAD_COLUMNS, *encodings)
                }
                compress_s = encode_s = decode_s = 0.0
                sq_grad_norm = 0.0
                r = 0
                for layer, p in enumerate(params):
                    g = wg.grads[layer].reshape(W, -1)
                    sq = (
                        wg.sqsums[layer].reshape(W, -1)
                        if wg.sqsums is not None and estimator
                        else None
                    )
                    sq_grad_norm += float(g.mean(0).double().square().sum())
                    agg = torch.zeros(numels[layer], dtype=torch.float32)
                    for w in range(W):
                        t0 = time.perf_counter()
                        payload = compressor.compress(
                            g[w],
                            states[w][layer],
                            sqsum=None if sq is None else sq[w],
                            batch_size=B,
                            layer=layer,
                            generator=qgen,
                        )
                        t1 = time.perf_counter()
                        if payload.message is not None:
                            primary.encode(payload.message)
                        t2 = time.perf_counter()
                        agg += payload.decode()
                        t3 = time.perf_counter()
                        enc_s = t2 - t1
                        encode_s += enc_s
                        compress_s += max(0.0, (t1 - t0) - enc_s)
                        decode_s += t3 - t2
                        for c, v in (
                            ("step", step),
                            ("worker", w),
                            ("layer", layer),
                            ("numel", numels[layer]),
                            ("sent", payload.sent),
                        ):
                            rows[c][r] = v
                        for e in encodings:
                            rows[e][r] = payload.bits[e]
                        r += 1
                    p.grad = (agg / W).view_as(p)

                lr = optimizer.param_groups[0]["lr"]
                optimizer.step()
                scheduler.step()
                payload_rows = {c: rows[c] for c in schema.PAYLOAD_COLUMNS}
                payload_rows.update({schema.BITS_PREFIX + e: rows[e] for e in encodings})
                writer.add_payload_rows(payload_rows)
                sent_total = int(rows["sent"].sum())
                writer.add_step(
                    {
                        "step": step,
                        "loss": float(wg.losses.mean()),
                        "lr": float(lr),
                        "grad_norm": math.sqrt(sq_grad_norm),
                        "density": sent_total / (W * numel_total),
                        "compute_s": pass_s * compute_fraction,
                        "variance_s": pass_s * (1.0 - compute_fraction),
                        "compress_s": compress_s,
                        "encode_s": encode_s,
                        "decode_s": decode_s,
                    }
                )
                bits_sum += int(rows[compressor.primary_encoding].sum())
                dense_sum += 32 * W * numel_total
                if (cfg.eval_every and (step + 1) % cfg.eval_every == 0) or step == cfg.steps - 1:
                    train_loss, train_acc = evaluate(
                        model, data.x_train[train_eval], data.y_train[train_eval]
                    )
                    test_loss, test_acc = evaluate(
                        model, data.x_test[test_eval], data.y_test[test_eval]
                    )
                    writer.add_eval(
                        {
                            "step": step,
                            "train_loss": train_loss,
                            "train_acc": train_acc,
                            "test_loss": test_loss,
                            "test_acc": test_acc,
                        }
                    )
                    last_acc = test_acc
                if bar is not None:
                    bar.update(1)
                    if step % 5 == 0 or step == cfg.steps - 1:
                        bar.set_postfix(
                            loss=f"{float(wg.losses.mean()):.3f}",
                            acc="-" if math.isnan(last_acc) else f"{last_acc:.3f}",
                            ratio=f"{dense_sum / max(bits_sum, 1):.1f}x",
                        )
            writer.finish("complete")
    finally:
        if bar is not None:
            bar.close()
    return out_dir


def _progress(total: int, enabled: bool) -> Any:
    if not enabled:
        return None
    from tqdm import tqdm

    return tqdm(total=total, unit="step", dynamic_ncols=True, leave=True)
