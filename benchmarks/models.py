"""Speed of the closed-form collective models: every collective × P = 2 … 1024 × 1000 steps.

For each world size P (powers of two, 2 … 1024) one ``[steps, P]`` array of uneven per-rank
payloads (seeded lognormal around 100 kB) is priced by every model of
``vgcsim.models.collectives.COLLECTIVES`` in one vectorized call. Prints the wall time, the number
of (step, P, collective) evaluations, evaluations per second and the budget ratio
(time / 2 s; target ≤ 1). ``--json`` prints one JSON object instead.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

# Run as a script, this file's folder comes first on sys.path and this module ("models")
# would shadow the ``models`` package it measures.
if sys.path and os.path.abspath(sys.path[0]) == os.path.dirname(os.path.abspath(__file__)):
    sys.path.pop(0)

import numpy as np  # noqa: E402

from vgcsim.core.cluster import get_cluster  # noqa: E402
from vgcsim.models.collectives import COLLECTIVES  # noqa: E402

BUDGET_S = 2.0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--max-p", type=int, default=1024)
    parser.add_argument(
        "--cluster", default="dgx1-IB-EDR", help="cluster preset (hierarchical uses its intra link)"
    )
    parser.add_argument("--repeats", type=int, default=3, help="best of this many runs")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)

    cluster = get_cluster(args.cluster)
    rng = np.random.default_rng(0)
    world_sizes = [2**k for k in range(1, args.max_p.bit_length()) if 2**k <= args.max_p]
    inputs = {p: rng.lognormal(np.log(1e5), 0.5, size=(args.steps, p)) for p in world_sizes}
    kw = {"intra_link": cluster.intra_link, "gpus_per_node": cluster.gpus_per_node}

    best = float("inf")
    checksum = 0.0
    for _ in range(args.repeats):
        start = time.perf_counter()
        total = 0.0
        for sizes in inputs.values():
            for model in COLLECTIVES.values():
                total += float(model.time_s(sizes, cluster.link, **kw).sum())
        best = min(best, time.perf_counter() - start)
        checksum = total
    evaluations = args.steps * len(world_sizes) * len(COLLECTIVES)
    rank_values = args.steps * sum(world_sizes) * len(COLLECTIVES)
    out = {
        "seconds": best,
        "evaluations": evaluations,
        "rank_payloads_read": rank_values,
        "evaluations_per_s": evaluations / best,
        "budget_ratio": best / BUDGET_S,
        "world_sizes": world_sizes,
        "collectives": len(COLLECTIVES),
        "steps": args.steps,
        "checksum_s": checksum,
    }
    if args.json:
        print(json.dumps(out))
    else:
        print(
            f"{evaluations:,} evaluations ({args.steps} steps × {len(world_sizes)} world sizes "
            f"{world_sizes[0]}…{world_sizes[-1]} × {len(COLLECTIVES)} collectives; "
            f"{rank_values:,} per-rank payloads) in {best:.3f} s "
            f"(best of {args.repeats}); {evaluations / best:,.0f} evaluations/s; "
            f"time / {BUDGET_S:g} s budget = {best / BUDGET_S:.3f}"
        )
    return 0 if best <= BUDGET_S else 1


if __name__ == "__main__":
    sys.exit(main())
