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
8. gather every process's counts and seconds on rank 0, which writes, every ``eval_every``
   steps, an evaluation, then the payload rows and the step row.

Stopping and resuming: SIGINT, SIGTERM and SIGHUP stop a recording cleanly (status
``stopped``, the open chunk kept, ``stop_reason`` naming the signal) by raising
:class:`RecordingInterrupted`; a write that fails (a full disk) stops it the same way with
one :class:`TraceError`. With emulated workers each closed chunk carries a checkpoint of the
training state (:mod:`vgcsim.traces.training.checkpoint`), and ``train(..., resume=point)``
continues from the last one: the resumed trace equals an uninterrupted run's in every
column but the wall-clock seconds. Every global generator (torch, numpy, Python) is seeded
from ``cfg.seed`` for the run and restored afterwards, so hidden draws are reproducible too.

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

import contextlib
import dataclasses
import logging
import math
import platform
import random
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import torch
from torch.nn import functional as F

from vgcsim.core.config import to_dict
from vgcsim.core.errors import (
    ConfigError,
    TraceError,
    TrainingDivergedError,
    VgcsimError,
    unknown_name,
)
from vgcsim.core.memory import available_memory_bytes
from vgcsim.core.provenance import git_commit, machine_info, package_versions
from vgcsim.traces import schema
from vgcsim.traces.health import NON_FINITE_REASON, run_divergence
from vgcsim.traces.io import STOP_SIGNALS, ResumePoint, TraceWriter
from vgcsim.traces.training import checkpoint as ckpt
from vgcsim.traces.training.allocator import keep_freed_memory
from vgcsim.traces.training.datasets import DATASETS, Dataset
from vgcsim.traces.training.nets import NETS, build_net, flops_per_sample
from vgcsim.traces.training.optim import build_optimizer
from vgcsim.traces.training.record_config import DEVICES, GRADIENT_PASSES, RecordConfig

log = logging.getLogger(__name__)

#: Step columns summed over processes (each process reports its workers' total).
SUMMED_SECONDS = ("compute_s", "variance_s", "compress_s", "encode_s", "decode_s")
#: Step columns that take the slowest process's value (the step waits for it).
SLOWEST_SECONDS = ("rank_compute_s", "optimizer_s", "comm_s")


# -- config -----------------------------------------------------------------------------------


def check_config(cfg: RecordConfig):
    """Refuse unknown names and bad hyperparameters before any work starts; returns the
    compressor ``cfg`` names, built (building it is what checks its parameters)."""
    from vgcsim.traces.compression.compressors import get_compressor
    from vgcsim.traces.compression.sqsum_estimators import ESTIMATORS, SQ_DTYPES
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
    from vgcsim.traces.training import factories

    for kind, name, valid in checks:
        if kind in ("dataset", "model") and factories.is_factory(name):
            factories.load_factory(name, kind)  # a bad name fails here, before any work
        elif name not in valid:
            raise unknown_name(kind, name, valid)
    return get_compressor(cfg.compressor.name, **cfg.compressor.params)


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
    from vgcsim.traces.compression.sqsum_estimators import resolve_sq_dtype

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

    def state(self) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
        """Where every worker is: its epoch's order (tensors), position and generator (JSON)."""
        orders = {str(w): torch.from_numpy(o.astype(np.int64)) for w, o in enumerate(self._order)}
        return orders, {
            "pos": list(self._pos),
            "rngs": [rng.bit_generator.state for rng in self.rngs],
        }

    def load_state(self, tensors: dict[str, torch.Tensor], scalars: dict[str, Any]) -> None:
        """Inverse of :meth:`state`."""
        self._order = [tensors[str(w)].numpy().copy() for w in range(len(self.shards))]
        self._pos = [int(p) for p in scalars["pos"]]
        for rng, saved in zip(self.rngs, scalars["rngs"], strict=True):
            rng.bit_generator.state = saved


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


# -- what a run needs, stopping and global generators ----------------------------------------


def state_bytes(cfg: RecordConfig, numel: int, input_numel: int, compressor) -> int:
    """Lower bound of the memory a recording holds, in bytes (activations not counted):

    ``4·P·(2 + m + W·(1 + s + q)) + 4·W·B·x``: P parameters, their gradient and the
    optimizer's m moments per parameter (adam 2, momentum_sgd 1); per worker w of W its
    gradient, its s compressor state tensors (variance: r and v) and, when the compressor
    needs it, its squared-gradient sum (q = 1); plus the float32 step batch of W·B inputs of
    x elements each.
    """
    moments = {"adam": 2, "momentum_sgd": 1}.get(cfg.optimizer.name, 2)
    state = compressor.init_state(1)
    slots = (
        sum(isinstance(getattr(state, f.name), torch.Tensor) for f in dataclasses.fields(state))
        if dataclasses.is_dataclass(state)
        else 0
    )
    per_worker = 1 + slots + (1 if compressor.needs_sqsum else 0)
    return 4 * numel * (2 + moments + cfg.workers * per_worker) + (
        4 * cfg.workers * cfg.batch_size * input_numel
    )


def check_memory(cfg: RecordConfig, data: Dataset, compressor) -> None:
    """Refuse, before anything is allocated or written, a net and worker count whose state
    (:func:`state_bytes`) exceeds the memory available; the net is sized on torch's meta
    device, which allocates nothing."""
    with torch.device("meta"):
        net = build_net(cfg.model.name, data.input_shape, data.num_classes, cfg.model.width)
    numel = sum(p.numel() for p in net.parameters())
    need = state_bytes(cfg, numel, math.prod(data.input_shape), compressor)
    have = available_memory_bytes()
    if have is not None and need > have:
        raise ConfigError(
            f"model {cfg.model.name} at model.width={cfg.model.width:g} has {numel:,} "
            f"parameters; recording it with {cfg.workers} workers needs at least "
            f"{need / 2**30:,.1f} GiB (parameters, gradients, optimizer and compressor state), "
            f"more than the {have / 2**30:,.1f} GiB available; use a smaller model.width or "
            "fewer workers"
        )


class RecordingInterrupted(KeyboardInterrupt):
    """A stopping signal (SIGINT, SIGTERM or SIGHUP) arrived while recording; ``signum``
    says which (a command exits 128 + signum, the shell convention)."""

    def __init__(self, signum: int) -> None:
        self.signum = int(signum)
        self.signal_name = signal.Signals(signum).name
        super().__init__(f"interrupted by {self.signal_name}")


@contextlib.contextmanager
def stop_on_signals() -> Iterator[None]:
    """Turn SIGINT, SIGTERM and SIGHUP into :class:`RecordingInterrupted` for the block
    (main thread only; a second signal while the first one stops the run is ignored)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    fired: list[int] = []

    def handler(signum: int, frame: Any) -> None:
        if fired:
            return
        fired.append(signum)
        raise RecordingInterrupted(signum)

    previous = {s: signal.signal(s, handler) for s in STOP_SIGNALS}
    try:
        yield
    finally:
        for s, h in previous.items():
            signal.signal(s, signal.SIG_DFL if h is None else h)


@contextlib.contextmanager
def seeded_global_rngs(seed: int) -> Iterator[None]:
    """Seed torch's, numpy's and Python's global generators from ``seed`` for the block and
    give the caller's states back afterwards."""
    np_state, py_state = np.random.get_state(), random.getstate()
    root = np.random.SeedSequence([seed, 0x61_0BA1])
    torch_seed, np_seed, py_seed = (int(x) for x in root.generate_state(3, dtype=np.uint32))
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(torch_seed)
        np.random.seed(np_seed)
        random.seed(py_seed)
        try:
            yield
        finally:
            np.random.set_state(np_state)
            random.setstate(py_state)


def stop_reason(exc: BaseException, step: int | None) -> str:
    """The header's ``stop_reason`` for a run that ended with ``exc`` during ``step``."""
    # A signal may be handled just after its step's row closed a chunk: the header's
    # steps_recorded, not a step number here, says how far the run got.
    if isinstance(exc, RecordingInterrupted):
        return str(exc)
    if isinstance(exc, KeyboardInterrupt):
        return "interrupted (KeyboardInterrupt)"
    where = "" if step is None else f" during step {step}"
    if isinstance(exc, VgcsimError):
        return str(exc)
    return f"{type(exc).__name__}: {exc}{where}"


# -- the loop ---------------------------------------------------------------------------------


def train(
    cfg: RecordConfig,
    workers: Workers,
    out_dir: str | Path,
    *,
    progress: bool = False,
    overwrite: bool = False,
    resume: ResumePoint | None = None,
) -> Path | None:
    """Record ``cfg`` as ``workers`` (one process's part); rank 0 returns the run directory.

    With ``resume`` (:func:`vgcsim.traces.io.find_resume_point` of ``out_dir``), continue that
    interrupted run from its last checkpoint instead (emulated workers only).

    Raises :class:`TrainingDivergedError` when NaN/Inf appears (the trace keeps every step
    before it, status ``stopped``), :class:`RecordingInterrupted` on SIGINT, SIGTERM or SIGHUP
    and :class:`TraceError` when the trace cannot be written (both: status ``stopped``, the
    steps before kept); config problems raise :class:`ConfigError` up front.
    """
    if cfg.workers != workers.world:
        cfg = dataclasses.replace(cfg, workers=workers.world)
    if cfg.device != workers.device.type:
        # "auto" resolved, or a torch.distributed backend's device: the header says what ran.
        cfg = dataclasses.replace(cfg, device=workers.device.type)
    compressor = check_config(cfg)
    cfg = resolve_config(cfg)
    keep_freed_memory()
    saved_threads = torch.get_num_threads()
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    try:
        with stop_on_signals():
            # Model initialisation uses torch's default generator: fork it so that the
            # caller's global RNG state is untouched and our draws depend on cfg.seed only.
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(cfg.seed)
                data = workers.load_data(cfg)
                check_memory(cfg, data, compressor)
                model = build_net(
                    cfg.model.name, data.input_shape, data.num_classes, cfg.model.width
                )
                from vgcsim.traces.training import factories

                if factories.is_factory(cfg.model.name) or factories.is_factory(cfg.data.name):
                    factories.check_fits(
                        model,
                        torch.as_tensor(data.x_train[:2]),
                        data.num_classes,
                        f"model {cfg.model.name} on dataset {cfg.data.name}",
                    )
            # A diverging run overflows float32 in the compressors' numpy code (r² of a huge
            # residual): inf is the right value there, and the divergence verdict in the
            # header says what happened, so numpy's per-call warnings stay off the terminal.
            with seeded_global_rngs(cfg.seed), np.errstate(over="ignore"):
                return _loop(
                    cfg,
                    workers,
                    data,
                    model,
                    compressor,
                    Path(out_dir),
                    progress,
                    overwrite,
                    resume,
                )
    finally:
        torch.set_num_threads(saved_threads)


def _loop(
    cfg: RecordConfig,
    workers: Workers,
    data: Dataset,
    model: torch.nn.Module,
    compressor,
    out_dir: Path,
    progress: bool,
    overwrite: bool,
    resume: ResumePoint | None,
) -> Path | None:
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

    resumable = hasattr(workers, "checkpoint_state")
    if resume is not None and not resumable:
        raise ConfigError(
            f"{type(workers).__name__} cannot resume a recording; resume with emulated workers"
        )

    def save_checkpoint(folder: Path) -> None:
        tensors = ckpt.prefixed("model", model.state_dict())
        opt_t, opt_j = ckpt.optimizer_state(optimizer)
        work_t, work_j = workers.checkpoint_state()  # type: ignore[attr-defined]
        samp_t, samp_j = sampler.state()
        rng_t, rng_j = ckpt.global_rng_state()
        for name, part in (
            ("optimizer", opt_t),
            ("workers", work_t),
            ("sampler", samp_t),
            ("rng", rng_t),
        ):
            tensors.update(ckpt.prefixed(name, part))
        scalars = {
            "optimizer": opt_j,
            "scheduler": scheduler.state_dict(),
            "workers": work_j,
            "sampler": samp_j,
            "rng": rng_j,
        }
        ckpt.save_state(folder, tensors, scalars)

    start = 0
    writer = None
    if workers.rank == 0:
        save = save_checkpoint if resumable else None
        if resume is None:
            writer = TraceWriter(
                out_dir, header, chunk_steps=cfg.chunk_steps, overwrite=overwrite, checkpoint=save
            )
        else:
            _check_same_run(resume.header, header, out_dir)
            if resume.state_dir is not None:
                tensors, scalars = ckpt.load_state(resume.state_dir)
                try:
                    model.load_state_dict(ckpt.unprefixed("model", tensors))
                    ckpt.load_optimizer_state(
                        optimizer, ckpt.unprefixed("optimizer", tensors), scalars["optimizer"]
                    )
                    scheduler.load_state_dict(scalars["scheduler"])
                    workers.load_checkpoint_state(  # type: ignore[attr-defined]
                        ckpt.unprefixed("workers", tensors), scalars["workers"]
                    )
                    sampler.load_state(ckpt.unprefixed("sampler", tensors), scalars["sampler"])
                    ckpt.set_global_rng_state(ckpt.unprefixed("rng", tensors), scalars["rng"])
                except (KeyError, ValueError, RuntimeError, TypeError, IndexError) as exc:
                    raise TraceError(
                        f"checkpoint {resume.state_dir} does not fit this run ({exc})"
                    ) from None
            writer = TraceWriter.resume(resume, checkpoint=save)
            start = resume.steps_written
    bar = _progress(cfg.steps, progress and writer is not None, start)
    step: int | None = None
    try:
        for step in range(start, cfg.steps):
            idx = torch.from_numpy(workers.local_indices(sampler.next_indices()))
            x, y = data.x_train[idx].to(device), data.y_train[idx].to(device)
            synchronize(device)
            t0 = time.perf_counter()
            wg = workers.gradients(model, x, y, estimator)
            synchronize(device)
            pass_s = time.perf_counter() - t0
            if not workers.all_finite(_all_finite(wg.losses, wg.grads)):
                reason = f"{NON_FINITE_REASON} at step {step}"
                kept = "the steps"
                if writer is not None:
                    _judge(writer, reason)
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
            bits_sum += int(rows[schema.BITS_PREFIX + compressor.primary_encoding].sum())
            dense_sum += 32 * cfg.workers * sum(numels)
            # The evaluation goes before the step row: the row may close the chunk, and a
            # chunk's checkpoint must come after everything its steps wrote.
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
            writer.add_step(row)
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
            writer.finish("stopped", stop_reason(exc, step))
            if isinstance(exc, TraceError) and resumable:
                raise TraceError(
                    f"{exc}; once it can be written, continue it with: "
                    f"vgcsim record --resume {out_dir}"
                ) from None
        raise
    finally:
        if bar is not None:
            bar.close()
    if writer is not None:
        _judge(writer, None)
        return writer.finish("complete")
    return None


def _judge(writer: TraceWriter, stop_reason: str | None) -> dict[str, Any] | None:
    """Write what is buffered and record the run's divergence verdict in its header
    (:mod:`vgcsim.traces.health`); a failed write is left to ``finish`` to report."""
    try:
        writer.flush()
    except TraceError:
        return None
    verdict = run_divergence(writer.run_dir, {**writer.header, "stop_reason": stop_reason})
    writer.header["divergence"] = verdict
    return verdict


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
    # optional columns (schema.OPTIONAL_PAYLOAD_COLUMNS) a compressor reports, e.g. powersgd's
    for name in everyone[0].get("extra", {}):
        rows[name] = np.asarray(
            [v for i in range(layers) for r in everyone for v in r["extra"][name][i]],
            dtype=np.int64,
        )
    return rows


def _all_finite(losses: torch.Tensor, grads: list[torch.Tensor]) -> bool:
    return bool(torch.isfinite(losses).all()) and all(bool(torch.isfinite(g).all()) for g in grads)


def _check_same_run(old: dict[str, Any], new: dict[str, Any], out_dir: Path) -> None:
    """Refuse to resume ``old`` (the header on disk) with a run whose header ``new`` differs
    in what the trace's numbers depend on."""
    if "distributed" in old:
        raise ConfigError(
            f"{out_dir} was recorded with torch.distributed ({old['distributed'].get('backend')}); "
            "--resume continues emulated recordings only"
        )
    keys = (
        "config",
        "workers",
        "batch_size_per_worker",
        "compressor",
        "encodings",
        "primary_encoding",
        "layers",
        "dataset",
    )
    differ = [k for k in keys if old.get(k) != new.get(k)]
    if differ:
        detail = ""
        if "config" in differ:
            a, b = _flat(old.get("config")), _flat(new.get("config"))
            diff = sorted(k for k in a.keys() | b.keys() if a.get(k) != b.get(k))
            detail = ": " + ", ".join(f"{k} {a.get(k)!r} -> {b.get(k)!r}" for k in diff[:5])
        raise ConfigError(
            f"cannot resume {out_dir}: this run's {', '.join(differ)} differ from the trace's"
            f"{detail}"
        )
    for pkg in ("torch", "numpy"):
        was, now = old.get("versions", {}).get(pkg), new.get("versions", {}).get(pkg)
        if was != now:
            log.warning("%s was recorded with %s %s, resuming with %s", out_dir, pkg, was, now)


def _flat(d: Any, prefix: str = "") -> dict[str, Any]:
    if not isinstance(d, dict):
        return {prefix.rstrip("."): d}
    out: dict[str, Any] = {}
    for k, v in d.items():
        out.update(_flat(v, f"{prefix}{k}.") if isinstance(v, dict) else {f"{prefix}{k}": v})
    return out


def _progress(total: int, enabled: bool, initial: int = 0) -> Any:
    if not enabled:
        return None
    from tqdm import tqdm

    return tqdm(total=total, initial=initial, unit="step", dynamic_ncols=True, leave=True)
