"""What the DDP hook's trace (``register_vgc_hook(..., trace_dir=...)``) costs per step.

Two gloo ranks on loopback (``--ranks``) train the same small CNN + MLP on seeded random
images (batch ``--batch`` per rank) with the variance hook (α = 2), once without a trace
(``untraced``) and once with one (``traced``: ``state.timed`` around forward+backward and
the optimizer, ``state.step_done`` after each step, ``gather_every`` = ``--gather-every``,
rank 0 writing the trace to a temporary folder). The two run interleaved, ``--chunk`` steps
each per round, order rotated every round, so that a shared machine's load falls on both.

Per variant (rank 0): ``step_s``, the median wall time of a step (zero_grad, forward,
backward with the exchange, optimizer step, and for ``traced`` the ``step_done`` call with
its gathers) after ``--warmup`` steps. Keys: ``trace_step_ratio`` = traced / untraced,
``step_done_s`` (median seconds of a ``step_done`` that does not gather) and
``gather_s`` (median seconds of one that gathers and writes ``--gather-every`` steps).

Usage: ``python benchmarks/hook_trace.py --json [--rounds R --chunk K --warmup W --batch B
--gather-every N --ranks P]``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from _ranks import launch_ranks, run_main


def _parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--rounds", type=int, default=40)
    p.add_argument("--chunk", type=int, default=5)
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--gather-every", type=int, default=50)
    p.add_argument("--rank-main", default=None, help=argparse.SUPPRESS)
    return p.parse_args(argv)


def rank_main(args: argparse.Namespace) -> int:
    import torch
    import torch.nn.functional as F
    from torch import nn
    from torch.nn.parallel import DistributedDataParallel as DDP

    from vgcsim.ddp import get_compressor, register_vgc_hook
    from vgcsim.traces.training.distributed_launch import init_process_group, leave_process_group

    env = init_process_group("gloo", timeout_s=600)

    def model() -> nn.Module:
        torch.manual_seed(0)
        return nn.Sequential(
            nn.Conv2d(1, 8, 3, padding=1),
            nn.ReLU(),
            nn.Flatten(),
            nn.Linear(8 * 16 * 16, 64),
            nn.ReLU(),
            nn.Linear(64, 10),
        )

    tmp = tempfile.mkdtemp(prefix="hook_trace_bench_") if env.rank == 0 else None
    variants = {}
    for name in ("untraced", "traced"):
        ddp = DDP(model())
        kwargs = {}
        if name == "traced":  # only rank 0 writes; the other ranks' trace_dir is not used
            trace_dir = f"{tmp}/trace" if tmp else "unused"
            kwargs = {"trace_dir": trace_dir, "gather_every": args.gather_every}
        state = register_vgc_hook(
            ddp, get_compressor("variance", alpha=2.0), batch_size=args.batch, **kwargs
        )
        opt = torch.optim.SGD(ddp.parameters(), lr=0.01, momentum=0.9)
        variants[name] = (ddp, state, opt, [], [], [])
    g = torch.Generator().manual_seed(1 + env.rank)
    order = list(variants)
    steps = 0
    for r in range(args.rounds):
        for name in order[r % 2 :] + order[: r % 2]:
            ddp, state, opt, step_s, done_s, gather_s = variants[name]
            for _ in range(args.chunk):
                x = torch.randn(args.batch, 1, 16, 16, generator=g)
                y = torch.randint(0, 10, (args.batch,), generator=g)
                t0 = time.perf_counter()
                opt.zero_grad(set_to_none=True)
                with state.timed("forward_backward"):
                    F.cross_entropy(ddp(x), y).backward()
                with state.timed("optimizer"):
                    opt.step()
                t1 = time.perf_counter()
                state.step_done()
                t2 = time.perf_counter()
                if name == "traced" and len(step_s) >= args.warmup:
                    gathered = (len(step_s) + 1) % args.gather_every == 0
                    (gather_s if gathered else done_s).append(t2 - t1)
                step_s.append(t2 - t0)
        steps += args.chunk
    variants["traced"][1].close_trace()
    if env.rank == 0:
        rows = {
            name: {"step_s": statistics.median(v[3][args.warmup :])} for name, v in variants.items()
        }
        _, _, _, _, done_s, gather_s = variants["traced"]
        result = {
            "ranks": env.world_size,
            "batch": args.batch,
            "gather_every": args.gather_every,
            "steps_per_variant": steps,
            "rows": rows,
            "trace_step_ratio": rows["traced"]["step_s"] / rows["untraced"]["step_s"],
            "step_done_s": statistics.median(done_s) if done_s else None,
            "gather_s": statistics.median(gather_s) if gather_s else None,
        }
        Path(args.rank_main).write_text(json.dumps(result))
        shutil.rmtree(tmp, ignore_errors=True)
    leave_process_group(completed=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    if args.rank_main:
        return rank_main(args)
    from vgcsim.core.errors import ConfigError

    if min(args.ranks, args.rounds, args.chunk, args.batch, args.gather_every) < 1:
        raise ConfigError("--ranks, --rounds, --chunk, --batch and --gather-every must be positive")
    if args.warmup >= args.rounds * args.chunk:
        raise ConfigError("--warmup must be below --rounds × --chunk (no step left to time)")
    result = launch_ranks(__file__, argv, args.ranks)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        for name, row in result["rows"].items():
            print(f"{name:9s} step {1e3 * row['step_s']:7.3f} ms")
        print(f"trace_step_ratio {result['trace_step_ratio']:.3f}")
    return 0


if __name__ == "__main__":
    run_main(main)
