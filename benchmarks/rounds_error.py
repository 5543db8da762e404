"""Error of the round-level evaluation where ranks run ahead, against the message level.

The round-level path (``vgcsim.simulator.paths.round``) is exact wherever its run-time check
passes (no channel carries flows of two rounds at once); the replay uses it only there. This
script measures what the check protects against: with ``check=False`` each round is
evaluated as if isolated even where uneven sizes let ranks run ahead into channels still
carrying an earlier round's flows. Cases: ResNet-50-sized synthetic trace (8 workers,
density 0.01, compressed bytes and ready times of the first steps, repeated over the ranks as
the replay does), 4:1 oversubscribed fabrics — the benchmark's leaf-spine (10GbE hosts, 16
per leaf, one spine, ``placement = "spread"``) and a dumbbell (10GbE hosts, half on each of
two switches joined by one link of ``P/2 × B / 4``) — at P = 16, 32, 64, rendezvous
semantics. Per case: whether the check passed, and the relative error of the slowest rank's
finish and the largest per-rank relative error of the isolated rounds.

Usage: python benchmarks/rounds_error.py [--steps N] [--sizes 16,32,64]
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import tempfile
from pathlib import Path

# Run as a script, this file's folder comes first on sys.path and the benchmark module
# "simulator" would shadow the package of the same name.
if sys.path and os.path.abspath(sys.path[0]) == os.path.dirname(os.path.abspath(__file__)):
    sys.path.pop(0)

import numpy as np  # noqa: E402

from vgcsim.core.cluster import load_cluster  # noqa: E402
from vgcsim.simulator.collectives import get_schedule, unit_sizes  # noqa: E402
from vgcsim.simulator.paths.message import run_message  # noqa: E402
from vgcsim.simulator.paths.plan import Phase, RunCache  # noqa: E402
from vgcsim.simulator.paths.round import RoundCache, run_rounds  # noqa: E402
from vgcsim.simulator.topology import build_topology  # noqa: E402
from vgcsim.traces.inputs import step_inputs  # noqa: E402
from vgcsim.traces.io import read_trace  # noqa: E402
from vgcsim.traces.synth import SynthConfig, synth_trace  # noqa: E402

KEYS = ("allgatherv/ring", "allgatherv/bruck", "allgatherv/recursive_doubling", "allreduce/ring")


def leaf_spine(p: int):
    """The benchmark's fabric: 16 hosts per leaf, one spine, 4:1, ranks spread over leaves."""
    base = load_cluster("10GbE")
    topo = {
        "kind": "leaf_spine",
        "hosts_per_leaf": 16,
        "spines": 1,
        "oversubscription": 4.0,
        "placement": "spread",
    }
    return dataclasses.replace(base, name="leaf-spine 4:1 spread", topology=topo)


def dumbbell(p: int):
    """Half the hosts on each of two switches joined by one link of P/2 x B / 4."""
    base = load_cluster("10GbE")
    bw, lat = base.link.payload_Bps, base.link.latency_s / 2
    hosts = [f"h{i}" for i in range(p)]
    links = [
        {"a": h, "b": "left" if i < p // 2 else "right", "bandwidth": bw, "latency": lat}
        for i, h in enumerate(hosts)
    ]
    links.append({"a": "left", "b": "right", "bandwidth": p / 2 * bw / 4, "latency": lat})
    topo = {"kind": "graph", "hosts": hosts, "links": links}
    return dataclasses.replace(base, name="dumbbell 4:1", topology=topo)


def measure(trace, fabrics, sizes: list[int], steps: int) -> list[dict]:
    rows = []
    for name, make in fabrics:
        for p in sizes:
            cluster = make(p)
            topo = build_topology(cluster, p)
            inputs = step_inputs(trace, cluster, p)
            run_cache, round_cache = RunCache(topo), RoundCache(topo)
            for key in KEYS:
                sched = get_schedule(key, p)
                for t in range(steps):
                    ready = inputs.compute_s[t] + inputs.variance_s[t] + inputs.codec_s[t]
                    blocks = inputs.rank_bytes[t].astype(float)
                    units = unit_sizes(sched, blocks.mean() * p if sched.allreduce else blocks)
                    ph = [Phase(ready - ready.min(), sched, units)]
                    exact = run_message(ph, topo, cache=run_cache)
                    checked = run_rounds(ph, topo, cache=round_cache) is not None
                    approx = run_rounds(ph, topo, check=False, cache=round_cache)
                    rows.append(
                        {
                            "fabric": name,
                            "P": p,
                            "collective": key,
                            "step": t,
                            "check": "passed" if checked else "refused",
                            "finish_rel_err": float(approx.max() / exact.max() - 1),
                            "max_rank_rel_err": float(np.max(np.abs(approx / exact - 1))),
                        }
                    )
                    print(rows[-1], file=sys.stderr, flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=2, help="trace steps per case (2)")
    parser.add_argument("--sizes", default="16,32,64", help="world sizes (16,32,64)")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    with tempfile.TemporaryDirectory() as tmp:
        cfg = SynthConfig(layers="resnet50", workers=8, steps=args.steps, density=0.01, seed=1)
        trace = read_trace(synth_trace(cfg, Path(tmp) / "resnet50"))
        rows = measure(
            trace, [("leaf-spine", leaf_spine), ("dumbbell", dumbbell)], sizes, args.steps
        )
    print("| fabric | P | collective | check | finish error (max over steps) | worst rank |")
    print("|---|---|---|---|---|---|")
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        groups.setdefault((r["fabric"], r["P"], r["collective"]), []).append(r)
    for (fabric, p, key), rs in groups.items():
        checks = "/".join(sorted({r["check"] for r in rs}))
        fin = max((r["finish_rel_err"] for r in rs), key=abs)
        worst = max(r["max_rank_rel_err"] for r in rs)
        print(f"| {fabric} | {p} | {key} | {checks} | {fin:+.2%} | {worst:.2%} |")


if __name__ == "__main__":
    main()
