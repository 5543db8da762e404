"""The one training loop behind every recording, emulated or on torch.distributed.

:func:`train` reads top to bottom: check and resolve the config, seed, load the data, build
the net, optimizer and trace header, then per step

1. draw every worker's minibatch from the seeded sampler and keep this process's part;
2. compute the gradients (and squared-gradient sums when the compressor needs them), timed;
3. stop with :class:`TrainingDivergedError` on NaN/Inf (every process agrees);
4. probe, every ``probe_every`` steps, how much of that pass the estimator costs;
5. time one worker's own forward + backward at its batch B, every ``rank_time_every`` steps;
6. compress, exchange, decode and average the gradients (the :class:`Workers` in use);
7. step the optimizer (timed) and the schedule;
8. gather every process's counts and seconds on rank 0, which writes the payload rows, the
   step row and, every ``eval_every`` steps, an evaluation.

What differs between one process emulating W workers and W real ranks — which samples a
process trains on, how its gradients are computed, how the NaN verdict and the step's
records are shared, and the exchange itself — sits behind :class:`Workers`:
:class:`vgcsim.traces.training.record.EmulatedWorkers` and
:class:`vgcsim.traces.training.distributed.RankWorkers`.

Timing columns (all wall-clock seconds; CUDA work is synchronised before a clock is read):

* ``compute_s`` / ``variance_s``: the step's gradient pass over all workers' samples, split
  by the fraction a pass without the estimator takes (probed on the same batch), summed over
  processes;
* ``rank_compute_s``: one plain forward + backward (mean loss, no estimator) of a single
  worker's own B samples — what one data-parallel rank spends — measured on the steps where
  ``step % rank_time_every == 0`` (NaN on the others); on torch.distributed the slowest
  rank's;
* ``optimizer_s``: one ``optimizer.step()`` on the averaged gradient, every step (each rank
  runs exactly this); on torch.distributed the slowest rank's.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import platform
import time
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import torch
from torch.nn import functional as F
from vgcsim.traces import schema
from vgcsim.traces.io import TraceWriter
from vgcsim.traces.training.allocator import keep_freed_memory
from vgcsim.traces.training.datasets import DATASETS, Dataset
from vgcsim.traces.training.nets import NETS, build_net, flops_per_sample
from vgcsim.traces.training.optim import build_optimizer
from vgcsim.traces.training.record_config import DEVICES, GRADIENT_PASSES, RecordConfig

from vgcsim.core.config import to_dict
from vgcsim.core.errors import ConfigError, TrainingDivergedError, unknown_name
from vgcsim.core.provenance import git_commit, machine_info, package_versions

log = logging.getLogger(__name__)

#: Step columns summed over processes (each process reports its workers' total).
SUMMED_SECONDS = ("compute_s", "variance_s", "compress_s", "encode_s", "decode_s")
#: Step columns that take the slowest process's value (the step waits for it).
SLOWEST_SECONDS = ("rank_compute_s", "optimizer_s", "comm_s")


# -- config -----------------------------------------------------------------------------------


def check_config(cfg: RecordConfig) -> None:
    """Refuse unknown names and bad hyperparameters before any work starts."""
    from vgcsim.traces.compression import get_compressor
    from vgcsim.traces.compression.variance import ESTIMATORS, SQ_DTYPES
    from vgcsim.traces.training.optim import OPTIMIZERS, SCHEDULES

    checks = (
        ("dataset", cfg.data.name, DATASETS),
        ("model", cfg.model.name, NETS),
        ("optimizer", cfg.optimizer.name, OPTIMIZERS),
        ("learning-rate schedule", cfg.optimizer.schedule, SCHEDULES),
        ("variance estimator", cfg.estimator, ESTIMATORS),
        ("squared-sum precision", cfg.sq_dtype, SQ_DTYPES),
        ("gradient pass", cfg.gradient_pass, GRADIENT_PASSES),
        ("device", cfg.device, DEVICES),
    )
    for kind, name, valid in checks:
        if name not in valid:
            raise unknown_name(kind, name, valid)
    get_compressor(cfg.compressor.name, **cfg.compressor.params)


def resolve_device(name: str) -> str:
    """``"cpu"`` or ``"cuda"`` for a ``device`` setting; ``"auto"`` picks CUDA when torch sees
    a GPU. Raises :class:`ConfigError` when CUDA is asked for and unavailable."""
    if name not in DEVICES:
        raise unknown_name("device", name, DEVICES)
    if name == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if name == "cuda" and not torch.cuda.is_available():
        raise ConfigError(
            "device cuda requested but torch sees no CUDA device "
            f"(torch {torch.__version__}); use --device cpu or --device auto"
        )
    return name


def resolve_config(cfg: RecordConfig) -> RecordConfig:
    """``cfg`` with its machine-dependent settings made explicit, as the trace header records
    them: ``sq_dtype="auto"`` → the precision this machine runs, ``device="auto"`` → cpu or
    cuda."""
    from vgcsim.traces.compression.variance import resolve_sq_dtype

    return dataclasses.replace(
        cfg, sq_dtype=resolve_sq_dtype(cfg.sq_dtype), device=resolve_device(cfg.device)
    )


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


def per_sample_loss(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Cross-entropy of every sample (reduction none): the loss every recording trains."""
    return F.cross_entropy(logits, y, reduction="none")


@torch.no_grad()
def evaluate(
    model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, batch: int = 1000
) -> tuple[float, float]:
    """Mean cross-entropy and accuracy of ``model`` on (x, y) (moved to the model's device)."""
    device = next(model.parameters()).device
    model.eval()
    loss_sum, correct = 0.0, 0
    for i in range(0, len(x), batch):
        xb, yb = x[i : i + batch].to(device), y[i : i + batch].to(device)
        logits = model(xb)
        loss_sum += float(F.cross_entropy(logits, yb, reduction="sum"))
        correct += int((logits.argmax(1) == yb).sum())
    model.train()
    return loss_sum / len(x), correct / len(x)


# -- devices and clocks -----------------------------------------------------------------------


def synchronize(device: torch.device) -> None:
    """Wait for queued CUDA work so that a wall clock read next covers it (no-op on CPU)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def cpu_name() -> str:
    """The CPU's model name (/proc/cpuinfo on Linux), else what ``platform`` reports."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def device_info(device: torch.device) -> dict[str, Any]:
    """Header entry naming where the gradient passes ran: type, name and (CUDA) the runtime."""
    if device.type == "cuda":
        index = device.index if device.index is not None else torch.cuda.current_device()
        return {
            "type": "cuda",
            "name": torch.cuda.get_device_name(index),
            "index": index,
            "cuda": torch.version.cuda,
        }
    return {"type": "cpu", "name": cpu_name(), "threads": torch.get_num_threads()}


def time_forward_backward(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor) -> float:
    """Seconds of one plain forward + backward of the mean loss on (x, y), as one data-parallel
    rank runs it; the gradients are discarded (``torch.autograd.grad``, ``.grad`` untouched)."""
    params = [p for p in model.parameters() if p.requires_grad]
    device = x.device
    synchronize(device)
    t0 = time.perf_counter()
    torch.autograd.grad(F.cross_entropy(model(x), y), params)
    synchronize(device)
    return time.perf_counter() - t0


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
            model, data.input_shape, per_sample_loss, data.num_classes
        ),
        "dense_bytes_per_step": 4 * total,
        "dataset": {
            "name": data.name,
            "train": len(data.y_train),
            "test": len(data.y_test),
            "input_shape": list(data.input_shape),
            "num_classes": data.num_classes,
        },
        "timing": {
            "rank_compute_s": (
                "one worker's plain forward + backward at its own batch, on steps where "
                f"step % {cfg.rank_time_every} == 0 (NaN elsewhere)"
            ),
            "optimizer_s": "one optimizer.step() on the averaged gradient, every step",
        },
    }


# -- what differs between emulated workers and real ranks --------------------------------------


class Workers(Protocol):
    """One process's part in a recording (see the module docstring).

    ``rank`` 0 writes the trace; ``world`` is W; ``device`` runs the gradient passes.
    """

    rank: int
    world: int
    device: torch.device

    def load_data(self, cfg: RecordConfig) -> Dataset:
        """The dataset (a distributed run lets rank 0 download first)."""
        ...

    def start(self, cfg: RecordConfig, model: torch.nn.Module, compressor, header: dict) -> None:
        """Build the per-worker compression state; add this kind's entries to ``header``."""
        ...

    def local_indices(self, indices: np.ndarray) -> np.ndarray:
        """This process's samples among every worker's (worker-major) step indices."""
        ...

    def gradients(self, model, x, y, estimator: str | None):
        """``WorkerGrads`` of this process's workers (one row per local worker)."""
        ...

    def all_finite(self, finite: bool) -> bool:
        """True when every process's loss and gradients are finite."""
        ...

    def exchange(self, step: int, wg, params: list) -> dict[str, Any]:
        """Compress, exchange, decode and average: set every ``p.grad``; return this process's
        record: ``sent[layer][local worker]``, ``bits[layer][local worker][encoding]``,
        ``grad_norm`` (of the uncompressed mean gradient over all workers) and seconds."""
        ...

    def gather(self, mine: dict[str, Any]) -> list[dict[str, Any]] | None:
        """Every process's record on rank 0, in rank order; None on the other ranks."""
        ...


# -- the loop ---------------------------------------------------------------------------------


def train(
    cfg: RecordConfig,
    workers: Workers,
    out_dir: str | Path,
    *,
    progress: bool = False,
    overwrite: bool = False,
) -> Path | None:
    """Record ``cfg`` as ``workers`` (one process's part); rank 0 returns the run directory.

    Raises :class:`TrainingDivergedError` when NaN/Inf appears (the trace keeps every step
    before it, status ``stopped``); config problems raise :class:`ConfigError` up front.
    """
    if cfg.workers != workers.world:
        cfg = dataclasses.replace(cfg, workers=workers.world)
    if cfg.device != workers.device.type:
        # "auto" resolved, or a torch.distributed backend's device: the header says what ran.
        cfg = dataclasses.replace(cfg, device=workers.device.type)
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
            data = workers.load_data(cfg)
            model = build_net(cfg.model.name, data.input_shape, data.num_classes, cfg.model.width)
        return _loop(cfg, workers, data, model, Path(out_dir), progress, overwrite)
    finally:
        torch.set_num_threads(saved_threads)


def _loop(
    cfg: RecordConfig,
    workers: Workers,
    data: Dataset,
    model: torch.nn.Module,
    out_dir: Path,
    progress: bool,
    overwrite: bool,
) -> Path | None:
    from vgcsim.traces.compression import get_compressor

    compressor = get_compressor(cfg.compressor.name, **cfg.compressor.params)
    params = list(model.parameters())
    optimizer, scheduler = build_optimizer(params, cfg.optimizer, cfg.steps)
    header = build_header(cfg, model, data, compressor)
    device = workers.device
    model.to(device)
    header["device"] = device_info(device)
    workers.start(cfg, model, compressor, header)
    sampler = WorkerSampler(len(data.y_train), cfg.workers, cfg.batch_size, cfg.seed)
    eval_gen = np.random.default_rng([cfg.seed, 0xE7A1])
    train_eval = np.sort(eval_gen.permutation(len(data.y_train))[: cfg.eval_samples])
    test_eval = np.arange(min(cfg.eval_samples, len(data.y_test)))
    estimator = cfg.estimator if compressor.needs_sqsum else None
    encodings = list(compressor.encodings)
    numels = [p.numel() for p in params]
    B = cfg.batch_size
    compute_fraction = 1.0
    bits_sum = dense_sum = 0
    last_acc = float("nan")

    writer = (
        TraceWriter(out_dir, header, chunk_steps=cfg.chunk_steps, overwrite=overwrite)
        if workers.rank == 0
        else None
    )
    bar = _progress(cfg.steps, progress and writer is not None)
    try:
        for step in range(cfg.steps):
            idx = torch.from_numpy(workers.local_indices(sampler.next_indices()))
            x, y = data.x_train[idx].to(device), data.y_train[idx].to(device)
            synchronize(device)
            t0 = time.perf_counter()
            wg = workers.gradients(model, x, y, estimator)
            synchronize(device)
            pass_s = time.perf_counter() - t0
            if not workers.all_finite(_all_finite(wg.losses, wg.grads)):
                reason = f"NaN or Inf in the loss or gradients at step {step}"
                kept = "the steps"
                if writer is not None:
                    writer.finish("stopped", reason)
                    kept = f"the {writer.steps_written} steps"
                raise TrainingDivergedError(
                    f"{reason}; stopped and kept {kept} before it in {out_dir} "
                    "(try a lower optimizer.lr)"
                )
            if estimator is not None and step % cfg.probe_every == 0:
                synchronize(device)
                t0 = time.perf_counter()
                workers.gradients(model, x, y, None)
                synchronize(device)
                compute_fraction = min(1.0, (time.perf_counter() - t0) / max(pass_s, 1e-12))
            rank_compute_s = (
                time_forward_backward(model, x[:B], y[:B])
                if step % cfg.rank_time_every == 0
                else math.nan
            )

            mine = workers.exchange(step, wg, params)
            lr = optimizer.param_groups[0]["lr"]
            synchronize(device)
            t0 = time.perf_counter()
            optimizer.step()
            synchronize(device)
            optimizer_s = time.perf_counter() - t0
            scheduler.step()
            mine.update(
                losses=[float(v) for v in wg.losses],
                compute_s=pass_s * compute_fraction,
                variance_s=pass_s * (1.0 - compute_fraction),
                rank_compute_s=rank_compute_s,
                optimizer_s=optimizer_s,
            )
            everyone = workers.gather(mine)
            if writer is None or everyone is None:
                continue

            rows = payload_rows(step, everyone, numels, encodings)
            writer.add_payload_rows(rows)
            losses = [v for e in everyone for v in e["losses"]]
            row = {
                "step": step,
                "loss": float(torch.tensor(losses).mean()),
                "lr": float(lr),
                "grad_norm": everyone[0]["grad_norm"],
                "density": int(rows["sent"].sum()) / (cfg.workers * sum(numels)),
            }
            for c in SUMMED_SECONDS:
                row[c] = sum(e[c] for e in everyone)
            for c in SLOWEST_SECONDS:
                if c in mine:
                    # NaN when not measured on this step (max() would hide it behind ranks).
                    vals = [e[c] for e in everyone]
                    row[c] = math.nan if any(math.isnan(v) for v in vals) else max(vals)
            writer.add_step(row)
            bits_sum += int(rows[schema.BITS_PREFIX + compressor.primary_encoding].sum())
            dense_sum += 32 * cfg.workers * sum(numels)
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
                        loss=f"{row['loss']:.3f}",
                        acc="-" if math.isnan(last_acc) else f"{last_acc:.3f}",
                        ratio=f"{dense_sum / max(bits_sum, 1):.1f}x",
                    )
            elif step % 10 == 0 or step == cfg.steps - 1:
                log.info("step %d loss %.4f", step, row["loss"])
    except BaseException as exc:
        if writer is not None:
            writer.finish("stopped", f"{type(exc).__name__}: {exc}")
        raise
    finally:
        if bar is not None:
            bar.close()
    if writer is not None:
        return writer.finish("complete")
    return None


def payload_rows(
    step: int, everyone: list[dict[str, Any]], numels: list[int], encodings: list[str]
) -> dict[str, np.ndarray]:
    """One step's payload table rows, layer-major and worker-minor (global worker index =
    process rank × local workers + local index), from every process's record."""
    layers = len(numels)
    sent = np.asarray(
        [[s for e in everyone for s in e["sent"][i]] for i in range(layers)], dtype=np.int64
    )
    world = sent.shape[1]
    rows = {
        "step": np.full(world * layers, step, dtype=np.int64),
        "worker": np.tile(np.arange(world, dtype=np.int64), layers),
        "layer": np.repeat(np.arange(layers, dtype=np.int64), world),
        "numel": np.repeat(np.asarray(numels, dtype=np.int64), world),
        "sent": sent.reshape(-1),
    }
    for e in encodings:
        rows[schema.BITS_PREFIX + e] = np.asarray(
            [b[e] for i in range(layers) for r in everyone for b in r["bits"][i]], dtype=np.int64
        )
    return rows


def _all_finite(losses: torch.Tensor, grads: list[torch.Tensor]) -> bool:
    return bool(torch.isfinite(losses).all()) and all(bool(torch.isfinite(g).all()) for g in grads)


def _progress(total: int, enabled: bool) -> Any:
    if not enabled:
        return None
    from tqdm import tqdm

    return tqdm(total=total, unit="step", dynamic_ncols=True, leave=True)
