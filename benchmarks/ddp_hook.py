"""The same DDP training script timed with no hook, torch's hooks and the vgcsim hook.

Two gloo ranks on loopback (``--ranks``) train scikit-learn's digits (real data shipped with
the package) on ``small_cnn`` from the same initial weights, one DDP model per variant, on
the CPU or (``--device cuda``) rank ``LOCAL_RANK`` on GPU ``LOCAL_RANK % device_count``
with ``--backend nccl`` (one rank per GPU: NCCL refuses two ranks on one device) or gloo
(which takes the CUDA gradients of plain DDP, fp16 and PowerSGD; the vgcsim hook stages its
all_gather through the CPU on gloo):

- ``plain``          DDP's own allreduce (no hook)
- ``fp16``           torch's ``default_hooks.fp16_compress_hook``
- ``powersgd_r1/2/4`` torch's ``powerSGD_hook`` at matrix rank 1, 2, 4 (PowerSGD from the
                     second step, error feedback and warm start on: torch's defaults)
- ``variance_fast``  ``vgcsim.ddp.register_vgc_hook`` with variance α = 2, fast estimator
- ``variance_exact`` the same with the exact estimator

The variants run interleaved: every round trains each variant ``--chunk`` steps (default 1),
order rotated every round, so the machine's load, which on a shared machine changes within
a second, falls on all of them alike. Per variant (rank 0's view):

- ``step_s``: median wall time of a training step (zero_grad, forward, backward with the
  exchange, optimizer step) after ``--warmup`` steps;
- ``cpu_s``: CPU seconds of the rank's process (all its threads, user + system) per timed
  step, averaged — the work a step costs, without the waits;
- ``bytes_per_step``: bytes this rank contributes to the collectives per step, averaged over
  the timed steps — plain DDP 4·numel (fp32 allreduce), fp16 2·numel, PowerSGD 4 × the
  elements its state counts after compression (``PowerSGDState.compression_stats``), the
  variance hook its measured ``state.stats.wire_bytes`` (length exchange, payload and gloo
  padding);
- ``test_accuracy`` on the held-out split after all steps;
- variance rows only: the medians of ``sqsum_s`` (the squared-sum module hooks in the
  backward, ``SqsumHooks.seconds``), ``state.stats.compress_s`` (squared sums of the bucket
  joined, compress and pack), ``comm_s`` (all_gather start to its callback, summed over
  buckets: the transfer plus any wait for the other rank) and ``decode_s`` (decode and
  average, in the callback); ``payload_bytes_per_step`` (the layers' buffers, without the
  length header and the padding to the bound) and ``fallback_rounds_per_step``.

Keys: ``variance_step_ratio`` = variance_fast step / plain step (same run; target ≤ 1.5),
``variance_exact_step_ratio``, and ``second_backward``: measured — true unless every
variance step ran exactly one model forward and one hooked-layer backward per layer.

The JSON records the backend, the device and, on CUDA, ``torch.cuda.get_device_name()``.

Usage: ``python benchmarks/ddp_hook.py --json [--rounds R --chunk K --warmup W --batch B]
[--device cpu|cuda --backend gloo|nccl --ranks P]``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

from _ranks import launch_ranks, run_main

VARIANTS = (
    "plain",
    "fp16",
    "powersgd_r1",
    "powersgd_r2",
    "powersgd_r4",
    "variance_fast",
    "variance_exact",
)
TARGET_RATIO = 1.5


def _parse(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    ap.add_argument("--backend", choices=("gloo", "nccl"), default="gloo")
    ap.add_argument("--rounds", type=int, default=80)
    ap.add_argument("--chunk", type=int, default=1, help="steps per variant per round")
    ap.add_argument("--warmup", type=int, default=5, help="untimed first steps per variant")
    ap.add_argument("--batch", type=int, default=32, help="samples per rank per step")
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--rank-main", metavar="OUT", help=argparse.SUPPRESS)
    return ap.parse_args(argv)


class Variant:
    """One DDP model with its hook, its own data order and its counters."""

    def __init__(self, name: str, data, args, rank: int, world: int, device):
        import torch
        import torch.nn.functional as F
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook
        from torch.nn.parallel import DistributedDataParallel as DDP

        from vgcsim.ddp import get_compressor, register_vgc_hook
        from vgcsim.traces.training.nets import build_net

        torch.manual_seed(args.seed)
        self.name, self.data, self.args, self.F = name, data, args, F
        self.model = build_net("small_cnn", data.input_shape, data.num_classes).to(device)
        self.numel = sum(p.numel() for p in self.model.parameters())
        self.forwards = 0
        self.model.register_forward_hook(self._count)
        self.device = device
        self.ddp = DDP(self.model, device_ids=[device.index] if device.type == "cuda" else None)
        self.state = self.psgd = None
        if name == "fp16":
            self.ddp.register_comm_hook(None, default_hooks.fp16_compress_hook)
        elif name.startswith("powersgd"):
            self.psgd = powerSGD_hook.PowerSGDState(
                process_group=None,
                matrix_approximation_rank=int(name[-1]),
                start_powerSGD_iter=2,
                random_seed=args.seed,
            )
            self.ddp.register_comm_hook(self.psgd, powerSGD_hook.powerSGD_hook)
        elif name.startswith("variance"):
            self.state = register_vgc_hook(
                self.ddp,
                get_compressor("variance", alpha=2.0),
                batch_size=args.batch,
                estimator=name.split("_")[1],
            )
        self.opt = torch.optim.SGD(self.ddp.parameters(), lr=args.lr, momentum=0.9)
        self.gen = torch.Generator().manual_seed(args.seed * 1000 + rank)
        self.rank, self.world = rank, world
        self.times: list[float] = []
        self.bytes: list[int] = []
        self.split: list[tuple[float, ...]] = []
        self.payload: list[int] = []
        self.fallbacks: list[int] = []
        self.cpu_s = 0.0
        self.steps = 0
        self.one_pass = True

    def _count(self, *_):
        self.forwards += 1

    def _psgd_after(self) -> int:
        return self.psgd.compression_stats()[2] if self.psgd is not None else 0

    def step(self) -> None:
        import torch

        n = self.data.x_train.shape[0]
        # Each rank its own disjoint share of a seeded permutation (DistributedSampler-like).
        idx = torch.randperm(n, generator=self.gen)[: self.args.batch * self.world]
        idx = idx.reshape(self.world, -1)[self.rank]
        x, y = self.data.x_train[idx], self.data.y_train[idx]
        cuda = self.device.type == "cuda"
        if cuda:
            x, y = x.to(self.device), y.to(self.device)
            torch.cuda.synchronize(self.device)
        forwards = self.forwards
        hooked = self.state.sqsum_hooks.backward_calls if self.state else 0
        after = self._psgd_after()
        sq_s = self.state.sqsum_hooks.seconds if self.state else 0.0
        c0 = time.process_time()
        t0 = time.perf_counter()
        self.opt.zero_grad(set_to_none=True)
        self.F.cross_entropy(self.ddp(x), y).backward()
        self.opt.step()
        if cuda:
            torch.cuda.synchronize(self.device)
        dt = time.perf_counter() - t0
        cpu = time.process_time() - c0
        self.steps += 1
        if self.state is not None:
            layers = sum(
                1 for m in self.model.modules() if any(True for _ in m.parameters(recurse=False))
            )
            calls = self.state.sqsum_hooks.backward_calls - hooked
            self.one_pass &= self.forwards - forwards == 1 and calls == layers
        if self.steps <= self.args.warmup:
            return
        self.times.append(dt)
        self.cpu_s += cpu
        if self.name == "plain":
            self.bytes.append(4 * self.numel)
        elif self.name == "fp16":
            self.bytes.append(2 * self.numel)
        elif self.psgd is not None:
            self.bytes.append(4 * (self._psgd_after() - after))
        else:
            st = self.state.stats
            self.bytes.append(st.wire_bytes)
            self.payload.append(sum(sum(b.values()) for b in st.bits.values()) // 8)
            self.fallbacks.append(st.fallback_rounds)
            sq_s = self.state.sqsum_hooks.seconds - sq_s
            self.split.append((sq_s, st.compress_s, st.comm_s, st.decode_s))

    def accuracy(self) -> float:
        import torch

        with torch.no_grad():
            pred = self.model(self.data.x_test.to(self.device)).argmax(1).cpu()
        return float((pred == self.data.y_test).double().mean())


def rank_main(args: argparse.Namespace) -> int:
    import torch

    from vgcsim.traces.training.datasets import load_dataset
    from vgcsim.traces.training.distributed_launch import (
        exit_rank,
        init_process_group,
        leave_process_group,
    )

    env = init_process_group(args.backend, timeout_s=600)
    device = torch.device("cpu")
    if args.device == "cuda":
        device = torch.device("cuda", env.local_rank % torch.cuda.device_count())
        torch.cuda.set_device(device)
    data = load_dataset("digits", root=None, seed=args.seed, test_fraction=0.2, download=False)
    variants = [Variant(n, data, args, env.rank, env.world_size, device) for n in VARIANTS]
    for r in range(args.rounds):
        k = r % len(variants)
        for v in variants[k:] + variants[:k]:
            for _ in range(args.chunk):
                v.step()
    rows = {
        v.name: {
            "step_s": statistics.median(v.times),
            "bytes_per_step": statistics.fmean(v.bytes),
            "test_accuracy": v.accuracy(),
            "steps": v.steps,
            "cpu_s": v.cpu_s / len(v.times),
        }
        for v in variants
    }
    for v in variants:
        if v.split:
            for k, key in enumerate(("sqsum_s", "compress_s", "comm_s", "decode_s")):
                rows[v.name][key] = statistics.median(s[k] for s in v.split)
            rows[v.name]["payload_bytes_per_step"] = statistics.fmean(v.payload)
            rows[v.name]["fallback_rounds_per_step"] = statistics.fmean(v.fallbacks)
    one_pass = all(v.one_pass for v in variants if v.state is not None)
    if env.rank == 0:
        result = {
            "backend": args.backend,
            "device": str(device),
            "device_name": (torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"),
            "ranks": env.world_size,
            "net": "small_cnn",
            "dataset": "digits",
            "batch_per_rank": args.batch,
            "torch": torch.__version__,
            "rows": rows,
            "variance_step_ratio": rows["variance_fast"]["step_s"] / rows["plain"]["step_s"],
            "variance_exact_step_ratio": rows["variance_exact"]["step_s"] / rows["plain"]["step_s"],
            "variance_cpu_ratio": rows["variance_fast"]["cpu_s"] / rows["plain"]["cpu_s"],
            "target_variance_step_ratio": TARGET_RATIO,
            "second_backward": not one_pass,
        }
        Path(args.rank_main).write_text(json.dumps(result))
    leave_process_group(completed=True)
    exit_rank(0)


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    if args.rank_main:
        return rank_main(args)
    from vgcsim.core.errors import ConfigError

    if args.ranks < 1 or args.rounds < 1 or args.chunk < 1 or args.batch < 1:
        raise ConfigError("--ranks, --rounds, --chunk and --batch must be positive")
    if args.warmup >= args.rounds * args.chunk:
        raise ConfigError("--warmup must be below --rounds × --chunk (no step left to time)")
    if args.backend == "nccl" and args.device != "cuda":
        raise ConfigError("--backend nccl needs --device cuda")
    if args.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            raise ConfigError("--device cuda: no CUDA device is available to this torch")
        if args.backend == "nccl" and args.ranks > torch.cuda.device_count():
            raise ConfigError(
                f"--backend nccl runs one rank per GPU: --ranks {args.ranks} but "
                f"{torch.cuda.device_count()} GPU(s)"
            )
    result = launch_ranks(__file__, argv, args.ranks)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        for name, row in result["rows"].items():
            print(
                f"{name:15s} step {1e3 * row['step_s']:7.2f} ms  "
                f"{row['bytes_per_step']:10.0f} B/step  acc {row['test_accuracy']:.3f}"
            )
        print(
            f"variance_step_ratio {result['variance_step_ratio']:.2f} "
            f"(target <= {TARGET_RATIO}); second_backward {result['second_backward']}"
        )
    return 0


if __name__ == "__main__":
    run_main(main)
