"""Recording a trace from a real multi-process run on torch.distributed.

The same training loop as :func:`vgcsim.traces.training.record.record`
(:func:`vgcsim.traces.training.loop.train`), but each of the W workers is a real process (a rank,
:class:`RankWorkers`) and the compressed payloads cross a real network:

* every rank builds the same model from the same seed and walks the same seeded sampler, then
  keeps its own worker's slice of each step's minibatch (the emulation's data split);
* each rank computes its shard's gradient and squared-gradient sums
  (``worker_gradients(..., workers=1)``), compresses with its own state, and exchanges the
  encoded bytes with a real allgatherv (``dense``: an all_reduce), see
  :mod:`vgcsim.traces.training.distributed_hook`;
* rank 0 gathers every rank's counts and timings and writes the trace: the same schema as the
  emulated recorder, plus the steps column ``comm_s`` — the measured seconds of the exchange's
  collective, the slowest rank's (ranks wait at a barrier first, so it is the collective alone).

Seconds columns aggregate like the emulation's: ``compute_s``, ``variance_s``, ``compress_s``,
``encode_s`` and ``decode_s`` are summed over ranks (the emulation sums over workers), so
later stages keep dividing by W; the per-rank ``rank_compute_s`` and ``optimizer_s`` are the
slowest rank's. ``grad_norm`` needs the uncompressed mean gradient, which one
extra all_reduce per step provides, outside the timed exchange. ``qsgd``'s random rounding
draws from one generator per rank, so its traces differ in the draws (not in distribution)
from the emulation's single generator; deterministic compressors reproduce the emulation.

Run it locally with ``vgcsim record --backend gloo --nprocs N`` (or
:func:`run_distributed_record`), or on a cluster with torchrun::

    torchrun --nnodes 2 --nproc-per-node 4 ... -m vgcsim.traces.training.distributed \\
        --config record.toml -o runs/x --backend nccl
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from vgcsim.core.errors import ConfigError, TraceError, TrainingDivergedError, VgcsimError

log = logging.getLogger(__name__)

#: Step columns this recorder adds to :data:`vgcsim.traces.schema.STEP_COLUMNS`.
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
    any process starts, and :class:`~vgcsim.traces.training.distributed_launch.DistributedRunError`
    when a rank fails (its message carries that rank's last output lines).
    """
    from vgcsim.core.config import to_dict
    from vgcsim.traces.training.distributed_launch import check_backend, launch_local
    from vgcsim.traces.training.record import check_config

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


class RankWorkers:
    """This rank is one worker (implements :class:`vgcsim.traces.training.loop.Workers`): it keeps its
    own slice of each step's minibatch, computes its gradient and squared-gradient sums
    (``worker_gradients(..., workers=1)``) on its device, and exchanges the compressed
    gradients through :func:`vgcsim.traces.training.distributed_hook.sync_gradients`."""

    def __init__(self, backend: str) -> None:
        import torch
        import torch.distributed as dist

        from vgcsim.traces.training.distributed_launch import device_for

        self.backend = backend
        self.rank, self.world = dist.get_rank(), dist.get_world_size()
        # gloo: everything on the CPU; nccl: model, batches and collectives on this rank's GPU
        # (compression itself runs on the CPU, where the encoders are).
        self.device = torch.device(device_for(backend))

    def load_data(self, cfg):
        import torch.distributed as dist

        from vgcsim.traces.training.datasets import load_dataset

        # Rank 0 loads first (and downloads, where a dataset may); the others then read it.
        if self.rank != 0:
            dist.barrier()
        data = load_dataset(
            cfg.data.name,
            root=cfg.data.root,
            seed=cfg.seed,
            test_fraction=cfg.data.test_fraction,
            download=cfg.data.download and self.rank == 0,
        )
        if self.rank == 0:
            dist.barrier()
        return data

    def start(self, cfg, model, compressor, header: dict) -> None:
        import torch

        from vgcsim.core.errors import ConfigError
        from vgcsim.traces.training.distributed_hook import VGCState

        if compressor.collective:
            raise ConfigError(
                f"compressor {compressor.name} records with emulated workers only "
                "(drop --backend/--nprocs); on real ranks use torch's own DDP hook"
            )

        self.cfg, self.model = cfg, model
        header["distributed"] = {
            "backend": self.backend,
            "world_size": self.world,
            "collective": "allreduce" if compressor.name == "dense" else "allgatherv",
            "padded_allgather": self.backend != "nccl",
            "comm_s": "slowest rank's seconds in the exchange collective, after a barrier",
        }
        self.state = VGCState.for_model(
            model,
            compressor,
            batch_size=cfg.batch_size,
            generator=torch.Generator().manual_seed(cfg.seed + 0x9E37 + self.rank),
            device=str(self.device),
            barrier_before_comm=True,
            time_encode=True,
        )

    def local_indices(self, indices):
        b = self.cfg.batch_size
        return indices[self.rank * b : (self.rank + 1) * b]

    def gradients(self, model, x, y, estimator):
        from vgcsim.traces.compression.sqsum_estimators import worker_gradients
        from vgcsim.traces.training.loop import per_sample_loss

        return worker_gradients(
            model, per_sample_loss, x, y, 1, estimator, sq_dtype=self.cfg.sq_dtype
        )

    def all_finite(self, finite: bool) -> bool:
        import torch
        import torch.distributed as dist

        flag = torch.tensor([float(finite)], device=self.device)
        dist.all_reduce(flag, op=dist.ReduceOp.MIN)
        return flag.item() >= 1

    def exchange(self, step: int, wg, params: list) -> dict:
        import torch
        import torch.distributed as dist

        from vgcsim.traces.training.distributed_hook import sync_gradients

        for p, g in zip(params, wg.grads, strict=True):
            p.grad = g[0].clone()
        # The uncompressed mean gradient's norm: one all_reduce outside the timed exchange.
        mean_grad = torch.cat([g[0].reshape(-1) for g in wg.grads])
        dist.all_reduce(mean_grad)
        grad_norm = float((mean_grad / self.world).double().square().sum().sqrt())
        sq = [s[0] for s in wg.sqsums] if wg.sqsums is not None else None
        stats = sync_gradients(self.model, self.state, sqsums=sq)
        layers = range(len(params))
        return {
            "sent": [[stats.sent[i]] for i in layers],
            "bits": [[stats.bits[i]] for i in layers],
            "grad_norm": grad_norm,
            "compress_s": stats.compress_s,
            "encode_s": stats.encode_s,
            "decode_s": stats.decode_s,
            "comm_s": stats.comm_s,
        }

    def gather(self, mine: dict) -> list[dict] | None:
        import torch.distributed as dist

        everyone: list = [None] * self.world
        dist.all_gather_object(everyone, mine)
        return everyone if self.rank == 0 else None


def record_rank(cfg, out_dir: Path, *, backend: str, overwrite: bool = False) -> Path | None:
    """The per-rank recording (every rank calls it inside an initialised process group): the
    shared loop :func:`vgcsim.traces.training.loop.train` with this rank as one worker.

    Rank 0 writes the trace and returns its path; other ranks return None.
    """
    from vgcsim.traces.training.loop import train

    return train(cfg, RankWorkers(backend), out_dir, overwrite=overwrite)


# ----------------------------------------------------------------------------- entry point


def _parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m vgcsim.traces.training.distributed",
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
    from vgcsim.core.config import apply_overrides, config_from_dict, load_toml
    from vgcsim.traces.training.record_config import RecordConfig

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

    from vgcsim.traces.training.distributed_launch import init_process_group, leave_process_group

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
    from vgcsim.traces.training.distributed_launch import exit_rank

    exit_rank(main())
