"""``vgcsim validate RUN --cluster FILE``: measured vs predicted vs simulated communication.

RUN is a trace recorded on real ranks (``vgcsim record --backend gloo --nprocs N``), whose
steps carry the measured ``comm_s``; FILE a cluster (preset name or TOML, e.g. the output of
``vgcsim calibrate``). Prints the aggregate table and the first steps, and with ``-o DIR``
writes ``validation.csv`` (per step), ``validation_summary.csv`` and ``validation.png``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

HELP = "compare measured communication of a distributed run with the models and the simulator"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run", help="trace run directory recorded with --backend gloo|nccl")
    parser.add_argument("--cluster", required=True, help="cluster preset name or TOML file")
    parser.add_argument("-o", "--out", type=Path, default=None, help="write CSVs and a plot here")
    parser.add_argument("--allreduce", default="ring", help="allreduce algorithm (dense runs)")
    parser.add_argument(
        "--allgatherv",
        default=None,
        help="allgatherv algorithm (default: what the run used: padded on gloo, ring on nccl)",
    )
    parser.add_argument("--no-simulate", action="store_true", help="closed-form models only")
    parser.add_argument("--steps", type=int, default=10, help="per-step rows to print")


def run(args: argparse.Namespace) -> int:
    import pandas as pd

    from traces.cluster import load_cluster
    from traces.io import read_trace
    from traces.training.distributed_validate import (
        ValidateOptions,
        plot_validation,
        validation_frame,
        validation_summary,
    )

    trace = read_trace(args.run)
    cluster = load_cluster(args.cluster)
    opts = ValidateOptions(
        allreduce=args.allreduce, allgatherv=args.allgatherv, simulate=not args.no_simulate
    )
    df = validation_frame(trace, cluster, opts)
    summary = validation_summary(df)
    a = df.attrs
    print(
        f"{a['trace']}: {a['collective']} on {a['world_size']} ranks, cluster {a['cluster']}, "
        f"{len(df)} steps"
    )
    with pd.option_context("display.width", 120, "display.max_columns", 20):
        print(summary.to_string(index=False, float_format=lambda v: f"{v:.4g}"))
        if args.steps > 0:
            cols = ["step", "measured_s", "predicted_s", "simulated_s", "payload_bytes_max"]
            print()
            print(
                df[cols].head(args.steps).to_string(index=False, float_format=lambda v: f"{v:.4g}")
            )
    if args.out is not None:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        args.out.mkdir(parents=True, exist_ok=True)
        df.to_csv(args.out / "validation.csv", index=False)
        summary.to_csv(args.out / "validation_summary.csv", index=False)
        fig, ax = plt.subplots(figsize=(7, 3.5))
        plot_validation(df, ax)
        fig.tight_layout()
        fig.savefig(args.out / "validation.png", dpi=120)
        plt.close(fig)
        print(f"wrote {args.out / 'validation.csv'}, validation_summary.csv, validation.png")
    return 0
