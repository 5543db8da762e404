"""Recording a trace from a real multi-process run on torch.distributed.

The same training as :func:`traces.training.record.record`, but each of the W workers is a
real process (a rank) and the compressed payloads cross a real network:

* every rank builds the same model from the same seed and walks the same seeded sampler, then
  keeps its own worker's slice of each step's minibatch (the emulation's data split);
* each rank computes its shard's gradient and squared-gradient sums
  (``worker_gradients(..., workers=1)``), compresses with its own state, and exchanges the
  encoded bytes with a real allgatherv (``dense``: an all_reduce), see
  :mod:`traces.training.distributed_hook`;
* rank 0 gathers every rank's counts and timings and writes the trace: the same schema as the
  emulated recorder, plus the steps column ``comm_s`` — the measured seconds of the exchange's
  collective, the slowest rank's (ranks wait at a barrier first, so it is the collective alone).

Seconds columns aggregate like the emulation's: ``compute_s``, ``variance_s``, ``compress_s``,
``encode_s`` and ``decode_s`` are summed over ranks (the emulation sums over workers), so
later stages keep dividing by W. ``grad_norm`` needs the uncompressed mean gradient, which one
extra all_reduce per step provides, outside the timed exchange. ``qsgd``'s random rounding
draws from one generator per rank, so its traces differ in the draws (not in distribution)
from the emulation's single generator; deterministic compressors reproduce the emulation.

Run it locally with ``vgcsim record --backend gloo --nprocs N`` (or
:func:`run_distributed_record`), or on a cluster with torchrun::

    torchrun --nnodes 2 --nproc-per-node 4 ... -m traces.training.distributed \\
        --config record.toml -o runs/x --backend nccl
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from traces.errors import ConfigError, TraceError, TrainingDivergedError, VgcsimError

log = logging.getLogger(__name__)

#: Step columns this recorder adds to :data:`traces.schema.STEP_COLUMNS`.
EXTRA_STEP_COLUMNS = ("comm_s", "decode_s")


def run_distributed_record(
    cfg,
    nprocs: int,
    *,
    out_dir: str | Path,
    backend: str = "gloo",
    overwrite: bool = False,
    timeout_s: float = 3600.0,
) -> Path:
    """Record ``cfg`` with ``nprocs`` local processes (one worker each) and return the run dir.

    ``cfg.workers`` is replaced by ``nprocs``. Raises :class:`ConfigError` for bad input before
    any process starts, and :class:`~traces.training.distributed_launch.DistributedRunError`
    when a rank fails (its message carries that rank's last output lines).
    """
    from traces.config import to_dict
    from traces.training.distributed_launch import check_backend, launch_local
    from traces.training.record import check_config

    if nprocs < 1:
        raise ConfigError(f"--nprocs must be >= 1, got {nprocs}")
    check_backend(backend)
    if cfg.workers != nprocs:
        log.info("workers = %d (one per process; the config said %d)", nprocs, cfg.workers)
        cfg = dataclasses.replace(cfg, workers=nprocs)
    check_config(cfg)
    out = Path(out_dir)
    if out.exists() and (not out.is_dir() or any(out.iterdir())) and not overwrite:
        raise TraceError(
            f"output directory {out} is not empty; choose another -o or pass --overwrite"
        )
    with tempfile.TemporaryDirectory(prefix="vgcsim-record-") as tmp:
        cfg_path = Path(tmp) / "config.json"
        cfg_path.write_text(json.dumps(to_dict(cfg)))
        argv = ["-m", __name__, "--config", str(cfg_path), "-o", str(out), "--backend", backend]
        if overwrite:
            argv.append("--overwrite")
        launch_local(argv, nprocs, timeout_s=timeout_s, threads_per_proc=cfg.threads or None)
    return out


# ----------------------------------------------------------------------------- one rank


def record_rank(cfg, out_dir: Path, *, backend: str, overwrite: bool = False) -> Path | None:
    """The per-rank loop (every rank calls it inside an initialised process group).

    Rank 0 writes the trace and returns its path; other ranks return None.
    """
    import numpy as np
    import torch
    import torch.distributed as dist

    from traces import schema
    from traces.compression import get_compressor
    from traces.compression.variance import worker_gradients
    from traces.io import TraceWriter
    from traces.training.allocator import keep_freed_memory
    from traces.training.datasets import load_dataset
    from traces.training.distributed_hook import VGCState, sync_gradients
    from traces.training.distributed_launch import device_for
    from traces.training.nets import build_net
    from traces.training.optim import build_optimizer
    from traces.training.record import (
        WorkerSampler,
        _per_sample_loss,
        build_header,
        check_config,
        evaluate,
        resolve_config,
    )

    rank, world = dist.get_rank(), dist.get_world_size()
    if cfg.workers != world:
        cfg = dataclasses.replace(cfg, workers=world)
    check_config(cfg)
    cfg = resolve_config(cfg)
    keep_freed_memory()
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    # Same construction order and seeds as the emulated recorder, so the runs coincide.
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(cfg.seed)
        # Rank 0 loads first (and downloads, where a dataset may); the others then read it.
        for turn in (0, 1):
            if (rank == 0) == (turn == 0):
                data = load_dataset(
                    cfg.data.name,
                    root=cfg.data.root,
                    seed=cfg.seed,
                    test_fraction=cfg.data.test_fraction,
                    download=cfg.data.download and rank == 0,
                )
            if turn == 0:
                dist.barrier()
        model = build_net(cfg.model.name, data.input_shape, data.num_classes, cfg.model.width)
    compressor = get_compressor(cfg.compressor.name, **cfg.compressor.params)
    params = list(model.parameters())
    optimizer, scheduler = build_optimizer(params, cfg.optimizer, cfg.steps)
    header = build_header(cfg, model, data, compressor)
    header["distributed"] = {
        "backend": backend,
        "world_size": world,
        "collective": "allreduce" if compressor.name == "dense" else "allgatherv",
        "padded_allgather": backend != "nccl",
        "comm_s": "slowest rank's seconds in the exchange collective, after a barrier",
    }
    # gloo: everything on the CPU; nccl: model, batches and collectives on this rank's GPU
    # (compression itself runs on the CPU, where the encoders are).
    device = torch.device(device_for(backend))
    model.to(device)
    sampler = WorkerSampler(len(data.y_train), world, cfg.batch_size, cfg.seed)
    eval_gen = np.random.default_rng([cfg.seed, 0xE7A1])
    train_eval = np.sort(eval_gen.permutation(len(data.y_train))[: cfg.eval_samples])
    test_eval = np.arange(min(cfg.eval_samples, len(data.y_test)))
    state = VGCState.for_model(
        model,
        compressor,
        batch_size=cfg.batch_size,
        generator=torch.Generator().manual_seed(cfg.seed + 0x9E37 + rank),
        device=str(device),
        barrier_before_comm=True,
        time_encode=True,
    )
    estimator = cfg.estimator if compressor.needs_sqsum else None
    encodings = list(compressor.encodings)
    numels = [p.numel() for p in params]
    lo, hi = rank * cfg.batch_size, (rank + 1) * cfg.batch_size
    compute_fraction = 1.0

    writer = (
        TraceWriter(out_dir, header, chunk_steps=cfg.chunk_steps, overwrite=overwrite)
        if (rank == 0)
        else None
    )
    try:
        for step in range(cfg.steps):
            idx = torch.from_numpy(sampler.next_indices()[lo:hi])
            x, y = data.x_train[idx].to(device), data.y_train[idx].to(device)
            t0 = time.perf_counter()
            wg = worker_gradients(
                model, _per_sample_loss, x, y, 1, estimator, sq_dtype=cfg.sq_dtype
            )
            pass_s = time.perf_counter() - t0
            finite = torch.tensor(
                [
                    float(
                        torch.isfinite(wg.losses).all()
                        and all(g.isfinite().all() for g in wg.grads)
                    )
                ],
                device=device,
            )
            dist.all_reduce(finite, op=dist.ReduceOp.MIN)
            if finite.item() < 1:
                reason = f"NaN or Inf in the loss or gradients at step {step}"
                if writer is not None:
                    writer.finish("stopped", reason)
                raise TrainingDivergedError(
                    f"{reason}; stopped and kept the steps before it in {out_dir} "
                    "(try a lower optimizer.lr)"
                )
            if estimator is not None and step % cfg.probe_every == 0:
                t0 = time.perf_counter()
                worker_gradients(model, _per_sample_loss, x, y, 1, None)
                compute_fraction = min(1.0, (time.perf_counter() - t0) / max(pass_s, 1e-12))
            for p, g in zip(params, wg.grads, strict=True):
                p.grad = g[0].clone()
            mean_grad = torch.cat([g[0].reshape(-1) for g in wg.grads])
            dist.all_reduce(mean_grad)
            grad_norm = float((mean_grad / world).double().square().sum().sqrt())
            sq = [s[0] for s in wg.sqsums] if wg.sqsums is not None and estimator else None
            stats = sync_gradients(model, state, sqsums=sq)
            lr = optimizer.param_groups[0]["lr"]
            optimizer.step()
            scheduler.step()

            mine = {
                "loss": float(wg.losses[0]),
                "sent": [stats.sent[i] for i in range(len(params))],
                "bits": [[stats.bits[i][e] for e in encodings] for i in range(len(params))],
                "compute_s": pass_s * compute_fraction,
                "variance_s": pass_s * (1.0 - compute_fraction),
                "compress_s": stats.compress_s,
                "encode_s": stats.encode_s,
                "decode_s": stats.decode_s,
                "comm_s": stats.comm_s,
            }
            everyone: list = [None] * world
            dist.all_gather_object(everyone, mine)
            if writer is None:
                continue
            rows = _payload_rows(step, everyone, numels, encodings, schema)
            writer.add_payload_rows(rows)
            sent_total = int(rows["sent"].sum())
            writer.add_step(
                {
                    "step": step,
                    "loss": float(torch.tensor([e["loss"] for e in everyone]).mean()),
                    "lr": float(lr),
                    "grad_norm": grad_norm,
                    "density": sent_total / (world * sum(numels)),
                    "compute_s": sum(e["compute_s"] for e in everyone),
                    "variance_s": sum(e["variance_s"] for e in everyone),
                    "compress_s": sum(e["compress_s"] for e in everyone),
                    "encode_s": sum(e["encode_s"] for e in everyone),
                    "decode_s": sum(e["decode_s"] for e in everyone),
                    "comm_s": max(e["comm_s"] for e in everyone),
                }
            )
            if (cfg.eval_every and (step + 1) % cfg.eval_every == 0) or step == cfg.steps - 1:
                train_loss, train_acc = evaluate(
                    model, data.x_train[train_eval].to(device), data.y_train[train_eval].to(device)
                )
                test_loss, test_acc = evaluate(
                    model, data.x_test[test_eval].to(device), data.y_test[test_eval].to(device)
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
            if step % 10 == 0 or step == cfg.steps - 1:
                log.info("step %d loss %.4f comm %.4g s", step, everyone[0]["loss"], mine["comm_s"])
    except BaseException as exc:
        if writer is not None:
            writer.finish("stopped", f"{type(exc).__name__}: {exc}")
        raise
    if writer is not None:
        return writer.finish("complete")
    return None


def _payload_rows(step: int, everyone: list[dict], numels: list[int], encodings, schema) -> dict:
    import numpy as np

    # Layer-major, worker-minor: the row order of the emulated recorder.
    world, layers = len(everyone), len(numels)
    rows = {
        "step": np.full(world * layers, step, dtype=np.int64),
        "worker": np.tile(np.arange(world, dtype=np.int64), layers),
        "layer": np.repeat(np.arange(layers, dtype=np.int64), world),
        "numel": np.repeat(np.asarray(numels, dtype=np.int64), world),
        "sent": np.asarray([e["sent"][i] for i in range(layers) for e in everyone], dtype=np.int64),
    }
    bits = np.asarray(
        [e["bits"][i] for i in range(layers) for e in everyone], dtype=np.int64
    ).reshape(world * layers, len(encodings))
    for k, e in enumerate(encodings):
        rows[schema.BITS_PREFIX + e] = bits[:, k]
    return rows


# ----------------------------------------------------------------------------- entry point


def _parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m traces.training.distributed",
        description=(
            "One rank of a distributed trace recording (start it with torchrun, or use "
            "`vgcsim record --backend gloo --nprocs N`). Rank 0 writes the trace."
        ),
    )
    p.add_argument("--config", type=Path, help="RecordConfig as TOML or JSON")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("-o", "--out", type=Path, required=True, help="output run directory")
    p.add_argument("--backend", default="gloo", help="gloo or nccl")
    p.add_argument("--overwrite", action="store_true")
    p.add_argument("-v", "--verbose", action="store_true")
    return p.parse_args(argv)


def _load_config(path: Path | None, overrides: list[str]):
    from traces.config import apply_overrides, config_from_dict, load_toml
    from traces.training.record_config import RecordConfig

    if path is None:
        cfg = RecordConfig()
    elif path.suffix == ".json":
        try:
            cfg = config_from_dict(RecordConfig, json.loads(path.read_text()))
        except (OSError, json.JSONDecodeError) as exc:
            raise ConfigError(f"cannot read config {path}: {exc}") from None
    else:
        cfg = config_from_dict(RecordConfig, load_toml(path))
    return apply_overrides(cfg, overrides)


def main(argv: Sequence[str] | None = None) -> int:
    """torchrun entry: join the process group, record, leave. Exit 2 on a user error."""

    from traces.training.distributed_launch import init_process_group, leave_process_group

    args = _parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(levelname)s %(name)s: %(message)s",
    )
    try:
        cfg = _load_config(args.config, args.set)
        init_process_group(args.backend)
        completed = False
        try:
            path = record_rank(cfg, args.out, backend=args.backend, overwrite=args.overwrite)
            completed = True
        except TrainingDivergedError:
            completed = True  # every rank stopped at the same step: leave together
            raise
        finally:
            leave_process_group(completed=completed)
    except VgcsimError as exc:
        print(f"record: error: {exc}", file=sys.stderr)
        return 2
    if path is not None:
        log.info("wrote trace %s", path)
    return 0


if __name__ == "__main__":
    from traces.training.distributed_launch import exit_rank

    exit_rank(main())
