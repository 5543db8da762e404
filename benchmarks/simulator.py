"""Simulator performance, measured in one run on this machine.

1. Event rate of the flow network (message-level ring allgatherv, 64 ranks) against a bare
   SimPy loop of timeouts: events per second of each and their ratio.
2. Replay of 64 ranks x 1000 steps at message level (dense ring allreduce + ring allgatherv;
   repeated dense steps are reused, every compressed step is simulated). Target <= 30 s.
3. Replay of 1024 ranks x 1000 steps on the collective-level fast path. Target <= 60 s.

The trace is synthetic (VGG-like layer list, 8 recorded workers, 1000 steps, density 1 %),
written to a temporary directory. ``--steps`` and ``--quick`` shrink the runs.

Usage: python benchmarks/simulator.py [--steps N] [--quick]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

# Run as a script, this file's folder comes first on sys.path and this module ("simulator")
# would shadow the package of the same name.
if sys.path and os.path.abspath(sys.path[0]) == os.path.dirname(os.path.abspath(__file__)):
    sys.path.pop(0)

import numpy as np  # noqa: E402
import simpy  # noqa: E402

from simulator.collectives import get_schedule, unit_sizes  # noqa: E402
from simulator.engine import Phase, run_message  # noqa: E402
from simulator.replay import SimulateConfig, simulate_trace  # noqa: E402
from simulator.topology import build_topology  # noqa: E402
from traces.cluster import load_cluster  # noqa: E402
from traces.io import read_trace  # noqa: E402
from traces.synth import SynthConfig, synth_trace  # noqa: E402


def bare_simpy_rate(processes: int = 64, timeouts: int = 3000) -> float:
    """Events per second of SimPy processes that only yield timeouts."""
    env = simpy.Environment()

    def proc(i: int):
        for k in range(timeouts):
            yield env.timeout(1e-6 * ((i + k) % 7 + 1))

    for i in range(processes):
        env.process(proc(i))
    t0 = time.perf_counter()
    env.run()
    wall = time.perf_counter() - t0
    return next(env._eid) / wall  # SimPy's event counter: events scheduled


def network_rate(world_size: int = 64, repeats: int = 10) -> tuple[float, float]:
    """(events/s, flows/s) of the message-level network on a ring allgatherv."""
    cluster = load_cluster("10GbE")
    topo = build_topology(cluster, world_size)
    sched = get_schedule("allgatherv/ring", world_size)
    rng = np.random.default_rng(0)
    stats: dict[str, int] = {}
    t0 = time.perf_counter()
    for _ in range(repeats):
        sizes = rng.uniform(1e4, 1e6, world_size)
        run_message(
            [Phase(np.zeros(world_size), sched, unit_sizes(sched, sizes))], topo, stats=stats
        )
    wall = time.perf_counter() - t0
    return stats["events"] / wall, stats["flows"] / wall


def replay_seconds(trace, world_size: int, path: str) -> tuple[float, dict]:
    cfg = SimulateConfig(path=path)
    t0 = time.perf_counter()
    _, _, info = simulate_trace(trace, load_cluster("10GbE"), [world_size], cfg)
    return time.perf_counter() - t0, info[str(world_size)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=1000, help="trace steps to replay")
    parser.add_argument("--quick", action="store_true", help="100 steps, smaller loops")
    args = parser.parse_args()
    steps = 100 if args.quick else args.steps

    bare = bare_simpy_rate(timeouts=1000 if args.quick else 3000)
    ours, flows = network_rate(repeats=3 if args.quick else 10)
    print("event rate (same run):")
    print(f"  bare SimPy loop      {bare:12,.0f} events/s")
    print(f"  flow network (P=64)  {ours:12,.0f} events/s  ({flows:,.0f} flows/s)")
    print(f"  ratio ours / bare    {ours / bare:12.3f}")

    with tempfile.TemporaryDirectory() as tmp:
        cfg = SynthConfig(layers="vgg_like", workers=8, steps=steps, density=0.01, seed=1)
        trace = read_trace(synth_trace(cfg, Path(tmp) / "trace"))
        msg_s, msg_info = replay_seconds(trace, 64, "message")
        fast_s, fast_info = replay_seconds(trace, 1024, "auto")
    print(f"replay {steps} steps (dense ring allreduce + ring allgatherv, 10GbE star):")
    print(
        f"  64 ranks, message level     {msg_s:8.2f} s   ({msg_s / steps * 1e3:.1f} ms/step; "
        f"target <= {30 * steps / 1000:.0f} s)  paths {msg_info}"
    )
    print(
        f"  1024 ranks, fast path       {fast_s:8.2f} s   ({fast_s / steps * 1e3:.1f} ms/step; "
        f"target <= {60 * steps / 1000:.0f} s)  paths {fast_info}"
    )
    # The machine's speed in this run, as the bare loop saw it: a projection, not a measurement.
    scale = bare / 1e6
    print(
        f"scaled to a core running bare SimPy at 1M events/s (x{scale:.2f}, projection): "
        f"message level {msg_s * scale:.1f} s, fast path {fast_s * scale:.1f} s"
    )


if __name__ == "__main__":
    main()
