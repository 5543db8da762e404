"""``vgcsim validate RUN --cluster FILE``: measured vs predicted vs simulated communication,
with a verdict.

A trace recorded on real ranks (``vgcsim record --backend gloo|nccl``) carries ``comm_s``:
the measured seconds of each step's exchange collective (allgatherv of the compressed
payloads; all_reduce for ``dense``). Replaying the same trace on a cluster — ideally the one
``vgcsim calibrate`` fitted on the same network — with the closed-form models
(``vgcsim.models.predict``) and the discrete-event simulator (``vgcsim.simulator.replay``) gives their
``comm_s`` for the same per-rank payloads. :func:`validation_frame` puts the three side by
side per step; :mod:`vgcsim.reports.validation` aggregates them (``validation_summary``) and
draws them (``plot_validation``, Axes in, Axes out). Errors are relative to the measurement:
``(model − measured) / measured``.

The command prints the aggregate table and the first steps, and with ``-o DIR`` writes
``validation.csv`` (per step), ``validation_summary.csv`` and ``validation.png``.

``RUN`` may also be a calibration measurement file (``vgcsim calibrate`` keeps one next to its
cluster file): :func:`collective_frame` then compares every measured (collective, size) with
the closed form and the simulator on the cluster — ideally a cluster fitted from *another*
sweep, so that the comparison checks predictions rather than the fit.

The verdict: the worst absolute relative error (trace: of the mean over steps, per source;
measurements: per collective and size) against ``--tolerance`` (default 10 %). Past it the
command names the worst case and exits with status 1. It lives at the front door because it
joins the later stages (models, simulator) with recorded measurements.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from vgcsim.commands import add_out_option
from vgcsim.core.errors import ConfigError, TraceError
from vgcsim.core.outdir import check_output, prepare_output

if TYPE_CHECKING:  # annotations only: the command imports the stages when it runs
    from vgcsim.core.cluster import ClusterSpec
    from vgcsim.traces.reading import Trace

HELP = "compare measured communication of a distributed run with the models and the simulator"

DEFAULT_TOLERANCE = 0.10


@dataclass(frozen=True)
class ValidateOptions:
    """Which collectives model the run. ``None``: what the recorder ran (padded allgatherv on
    gloo, ring allgatherv on NCCL; ring allreduce for ``dense``)."""

    allreduce: str = "ring"
    allgatherv: str | None = None
    simulate: bool = True


def measured_method(trace: Trace) -> str:
    """``"dense"`` (all_reduce was measured) or ``"compressed"`` (allgatherv was measured)."""
    return "dense" if trace.compressor == "dense" else "compressed"


def measured_allgatherv(trace: Trace) -> str:
    """The algorithm the measured allgatherv is: the trace's own exchange for traces the DDP
    hook wrote (:func:`vgcsim.traces.replay.default_allgatherv`, bounded); else what the
    recorder ran, padded on gloo and uneven (ring) on NCCL."""
    from vgcsim.traces.replay import default_allgatherv, is_hook_trace

    if is_hook_trace(trace):
        return default_allgatherv(trace)
    dist = trace.header.get("distributed") or {}
    return "padded" if dist.get("padded_allgather", True) else "ring"


def _predicted(trace: Trace, cluster: ClusterSpec, opts: ValidateOptions, allgatherv: str) -> Any:
    """predict's per-step rows of ``trace`` at its own world size (dense fp32 beside the
    compressed exchange), as both validations compare them."""
    from vgcsim import api
    from vgcsim.core.options import PredictOptions

    return api.predict(
        trace,
        cluster,
        config=PredictOptions(
            world_sizes=(int(trace.workers),),
            allreduce=(opts.allreduce,),
            allgatherv=(allgatherv,),
            per_step=True,
            dense_encodings=("fp32",),
        ),
    )


def _measured_rows(frame: Any, method: str) -> Any:
    """Per-step rows of ``method`` indexed by step; for ``dense`` the fp32 rows (what the
    recorder all-reduces), not the 2-byte what-if encodings."""
    rows = frame[(frame["method"] == method) & (frame["step"] >= 0)]
    if method == "dense" and "encoding" in rows.columns:
        rows = rows[rows["encoding"] == "fp32"]
    return rows.set_index("step")


def validation_frame(trace: Trace, cluster: ClusterSpec, opts: ValidateOptions = ValidateOptions()):
    """Per-step measured, predicted and simulated communication seconds of ``trace``.

    Columns: step, measured_s, predicted_s, simulated_s (NaN when not simulated),
    predicted_rel_error, simulated_rel_error, payload_bytes_max, payload_bytes_mean.
    """
    import numpy as np
    import pandas as pd

    from vgcsim.reports.validation import SOURCES

    if "comm_s" not in trace.steps.columns:
        raise TraceError(
            f"trace {trace.name} has no measured comm_s; record it on real ranks with "
            "`vgcsim record --backend gloo --nprocs N`"
        )
    p = int(trace.workers)
    method = measured_method(trace)
    allgatherv = opts.allgatherv or measured_allgatherv(trace)
    pred = _predicted(trace, cluster, opts, allgatherv)
    pred = _measured_rows(pred, method)
    out = pd.DataFrame({"step": trace.steps["step"].to_numpy(dtype=np.int64)})
    out["measured_s"] = trace.steps["comm_s"].to_numpy(dtype=float)
    out["predicted_s"] = pred["comm_s"].reindex(out["step"]).to_numpy(dtype=float)
    out["simulated_s"] = np.nan
    if opts.simulate:
        from vgcsim import api
        from vgcsim.core.options import SimulateConfig

        sim_cfg = SimulateConfig(
            world_sizes=(p,),
            allreduce=(opts.allreduce,),
            allgatherv=(allgatherv,),
            per_step=True,
            dense_encodings=("fp32",),
        )
        sim = api.simulate(trace, cluster, config=sim_cfg)
        sim = _measured_rows(sim, method)
        out["simulated_s"] = sim["comm_s"].reindex(out["step"]).to_numpy(dtype=float)
    for src in SOURCES:
        out[f"{src}_rel_error"] = (out[f"{src}_s"] - out["measured_s"]) / out["measured_s"]
    out["payload_bytes_max"] = pred["payload_bytes_max"].reindex(out["step"]).to_numpy()
    out["payload_bytes_mean"] = pred["payload_bytes_mean"].reindex(out["step"]).to_numpy()
    out.attrs.update(
        method=method,
        collective=f"allreduce/{opts.allreduce}"
        if method == "dense"
        else f"allgatherv/{allgatherv}",
        world_size=p,
        cluster=cluster.name,
        trace=trace.name,
    )
    return out


#: The terms of a step that a trace the DDP hook wrote measures (ranks table), in step order:
#: (term, ranks-table columns summed, reduction over ranks, result column of predict/simulate)
STEP_TERMS = (
    ("compute", ("compute_s", "overhead_s"), "max", "compute_s"),
    ("sqsum", ("sqsum_s",), "mean", "variance_s"),
    ("compress", ("compress_s", "encode_s"), "mean", "codec_s"),
    ("exchange", ("comm_s",), "min", "comm_s"),
    ("decode", ("decode_s",), "mean", "decode_s"),
    ("optimizer", ("optimizer_s",), "mean", "optimizer_s"),
    ("step", ("whole_step_s",), "max", "step_s"),
)


def measured_terms(trace: Trace):
    """Per step, the measured seconds of every term of :data:`STEP_TERMS` from the ranks
    table of a trace the DDP hook wrote: ``[steps, terms]`` (NaN where the script did not
    report a phase). Reductions over ranks: the compute's maximum (the rank every other one
    waits for; its compute plus the step's host overhead, ``step_wall_s − forward_backward_s
    − optimizer_s``, where the trace has ``step_wall_s``), the mean of the other local terms;
    the exchange's minimum (a rank's exchange runs from its own start to the gathered
    buffer, so every rank but the last to arrive also waits for the others; the last one's
    is the collective alone); the whole step's maximum (the slowest rank ends the step: its
    ``step_wall_s``, else its forward+backward + optimizer)."""
    import pandas as pd

    ranks = trace.ranks
    if ranks is None:
        raise TraceError(
            f"trace {trace.name} has no ranks table; per-term validation needs a trace the DDP "
            "hook wrote (register_vgc_hook(..., trace_dir=...))"
        )
    from vgcsim.traces.replay import host_overhead_s

    ranks = ranks.copy()
    inside = ranks["forward_backward_s"] + ranks["optimizer_s"]
    ranks["overhead_s"] = host_overhead_s(ranks).fillna(0.0)
    wall = ranks.get("step_wall_s")
    ranks["whole_step_s"] = inside if wall is None else wall.where(wall.notna(), inside)
    out = {}
    for term, cols, how, _ in STEP_TERMS:
        per_rank = ranks[list(cols)].sum(axis=1, min_count=len(cols))
        out[term] = per_rank.groupby(ranks["step"]).agg(how)
    return pd.DataFrame(out).rename_axis("step")


def term_frame(trace: Trace, cluster: ClusterSpec, opts: ValidateOptions = ValidateOptions()):
    """Per step and term: measured (:func:`measured_terms`), predicted and simulated seconds
    of the method the trace ran (``dense``: allreduce; else the compressed exchange) on
    ``cluster`` at the trace's world size, and their relative errors.

    Columns: step, term, measured_s, predicted_s, simulated_s (NaN when not simulated),
    predicted_rel_error, simulated_rel_error. Term ↔ result column: compute ↔ compute_s,
    sqsum ↔ variance_s, compress ↔ codec_s, exchange ↔ comm_s, decode ↔ decode_s,
    optimizer ↔ optimizer_s, step ↔ step_s."""
    import numpy as np
    import pandas as pd

    from vgcsim.reports.validation import SOURCES

    measured = measured_terms(trace)
    p = int(trace.workers)
    method = measured_method(trace)
    allgatherv = opts.allgatherv or measured_allgatherv(trace)
    frames = {"predicted": _predicted(trace, cluster, opts, allgatherv)}
    if opts.simulate:
        from vgcsim import api
        from vgcsim.core.options import SimulateConfig

        sim_cfg = SimulateConfig(
            world_sizes=(p,),
            allreduce=(opts.allreduce,),
            allgatherv=(allgatherv,),
            per_step=True,
            dense_encodings=("fp32",),
        )
        frames["simulated"] = api.simulate(trace, cluster, config=sim_cfg)
    rows = []
    for term, _, _, column in STEP_TERMS:
        part = pd.DataFrame({"step": measured.index.to_numpy(dtype=np.int64), "term": term})
        part["measured_s"] = measured[term].to_numpy(dtype=float)
        for src in SOURCES:
            if src in frames:
                modelled = _measured_rows(frames[src], method)[column]
                part[f"{src}_s"] = modelled.reindex(part["step"]).to_numpy(dtype=float)
            else:
                part[f"{src}_s"] = np.nan
        rows.append(part)
    out = pd.concat(rows, ignore_index=True)
    for src in SOURCES:
        out[f"{src}_rel_error"] = (out[f"{src}_s"] - out["measured_s"]) / out["measured_s"]
    out.attrs.update(method=method, compressor=trace.compressor, trace=trace.name)
    return out


def _model_key(op: str, backend: str) -> str | None:
    """The registry collective that models a calibration op (None: point-to-point)."""
    if op in ("p2p", "p2p_intra"):
        return None
    if op == "allreduce":
        return "allreduce/ring"
    if op == "allgather":
        return "allgatherv/ring"
    # vgcsim's allgatherv (even or skewed) pads on gloo (as the recorder does), sends exact
    # sizes on NCCL.
    return "allgatherv/padded" if backend == "gloo" else "allgatherv/ring"


def _simulated_s(key: str, sizes: Any, cluster: Any) -> float:
    """The simulator's time of one call, host copies included (as the closed form prices
    them): :func:`vgcsim.simulator.call.simulate_collective`."""
    from vgcsim.simulator.call import simulate_collective

    return simulate_collective(key, sizes, cluster).time_s


def collective_frame(
    measurements: dict, cluster: Any, *, statistic: str = "median", simulate: bool = True
):
    """Measured (``statistic`` over repetitions), predicted and simulated seconds of every
    (op, size) of a calibration measurement file on ``cluster``.

    Columns: op, collective (registry key; ``p2p`` for point-to-point, predicted as α + n·β
    of the link it crossed and not simulated), size_bytes, measured_s, predicted_s,
    simulated_s, predicted_rel_error, simulated_rel_error. ``allgather`` rows on gloo (torch's
    all_gather of equal blocks) add the host copy of its gathered buffer
    (:func:`vgcsim.core.collectives.plain_allgather_host_time_s`) to the ring allgatherv's
    time. ``allgatherv_skewed`` rows are
    priced with the per-rank blocks the sweep sent
    (:func:`~vgcsim.traces.calibration.skewed_sizes`), the others with ``size_bytes`` on
    every rank.
    """
    import numpy as np
    import pandas as pd

    from vgcsim.core.collectives import plain_allgather_host_time_s
    from vgcsim.models.collectives import collective_time_s
    from vgcsim.models.pointtopoint import p2p_time_s
    from vgcsim.reports.validation import SOURCES
    from vgcsim.traces.calibration import STATISTICS, skewed_sizes

    p = int(measurements["world_size"])
    backend = str(measurements.get("backend", "gloo"))
    reduce = STATISTICS[statistic]
    rows = []
    for r in measurements["rows"]:
        op, n = r["op"], int(r["size_bytes"])
        key = _model_key(op, backend)
        if key is None:
            link = cluster.intra_link if op == "p2p_intra" else cluster.link
            if link is None:
                continue
            pred, sim = float(p2p_time_s(n, link)), np.nan
        else:
            sizes = np.full(p, float(n))
            if op == "allgatherv_skewed":
                sizes = np.asarray(skewed_sizes(n, p), dtype=float)
            pred = float(collective_time_s(key, sizes[None, :], cluster)[0])
            sim = _simulated_s(key, sizes, cluster) if simulate else np.nan
            if op == "allgather" and backend == "gloo":
                # torch's all_gather copies the gathered buffer once on the host
                link = cluster.link
                extra = plain_allgather_host_time_s(
                    p,
                    float(n),
                    link.allgatherv_host_s_per_byte,
                    link.allgatherv_host_s_per_byte_table,
                )
                pred, sim = pred + float(extra), sim + float(extra)
        rows.append(
            {
                "op": op,
                "collective": key or "p2p",
                "size_bytes": n,
                "measured_s": float(reduce(r["seconds"])),
                "predicted_s": pred,
                "simulated_s": sim,
            }
        )
    df = pd.DataFrame(rows)
    for src in SOURCES:
        df[f"{src}_rel_error"] = (df[f"{src}_s"] - df["measured_s"]) / df["measured_s"]
    df.attrs.update(world_size=p, cluster=cluster.name, backend=backend)
    return df


@dataclass(frozen=True)
class Verdict:
    """The worst case of a validation against a tolerance."""

    passed: bool
    tolerance: float
    worst_case: str
    worst_error: float

    def line(self) -> str:
        word = "PASS" if self.passed else "FAIL"
        return (
            f"{word}: worst case {self.worst_case}, error {self.worst_error:+.1%} "
            f"(tolerance {self.tolerance:.0%})"
        )


def verdict(cases: dict[str, float], tolerance: float) -> Verdict:
    """``cases``: a label and a relative error each (NaN ignored); the worst decides."""
    import math

    known = {k: v for k, v in cases.items() if not math.isnan(v)}
    if not known:
        raise TraceError("nothing to validate: no case has both a measurement and a model")
    worst = max(known, key=lambda k: abs(known[k]))
    return Verdict(abs(known[worst]) <= tolerance, tolerance, worst, known[worst])


def _collective_cases(df: Any) -> dict[str, float]:
    from vgcsim.reports.validation import SOURCES

    cases = {}
    for row in df.itertuples(index=False):
        for src in SOURCES:
            cases[f"{row.op} {row.size_bytes} B {src}"] = float(getattr(row, f"{src}_rel_error"))
    return cases


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "run",
        help="trace run directory recorded with --backend gloo|nccl or written by the DDP "
        "hook, or a calibration measurement file (FILE.measurements.json)",
    )
    parser.add_argument(
        "other",
        nargs="?",
        default=None,
        metavar="OTHER_RUN",
        help="a second trace the DDP hook wrote of the same job with the other method (plain "
        "DDP, i.e. the dense compressor, or a compressor): says whether the predicted winner "
        "is the measured one",
    )
    parser.add_argument("--cluster", required=True, help="cluster preset name or TOML file")
    add_out_option(
        parser,
        "folder to write CSVs and a plot into (default: print only)",
        required=False,
        type=Path,
    )
    parser.add_argument("--allreduce", default="ring", help="allreduce algorithm (dense runs)")
    parser.add_argument(
        "--allgatherv",
        default=None,
        help="allgatherv algorithm (default: what the run used: padded on gloo, ring on nccl)",
    )
    parser.add_argument("--no-simulate", action="store_true", help="closed-form models only")
    parser.add_argument(
        "--compute",
        choices=("model", "trace"),
        default=None,
        help="override the cluster's compute mode: 'model' (local times on the cluster's "
        "device) or 'trace' (the seconds the run measured)",
    )
    parser.add_argument(
        "--show-steps",
        type=int,
        default=10,
        metavar="N",
        help="per-step rows to print (default 10)",
    )
    parser.add_argument(
        "--tolerance",
        type=float,
        default=DEFAULT_TOLERANCE,
        help="largest acceptable relative error (default 0.10); past it exit status 1",
    )
    parser.add_argument(
        "--ops", default=None, help="measurement file: ops to compare (comma-separated)"
    )
    parser.add_argument(
        "--sizes",
        default=None,
        help="measurement file: sizes to compare, MIN:MAX or a list (default: all)",
    )
    parser.add_argument(
        "--statistic", default="median", help="measurement file: median or min over repetitions"
    )


def _run_measurements(args: argparse.Namespace) -> int:
    from vgcsim.core.cluster import load_cluster
    from vgcsim.reports.validation import collective_text
    from vgcsim.traces.calibration import (
        STATISTICS,
        parse_sizes,
        read_measurements,
        select_rows,
    )

    if args.statistic not in STATISTICS:
        raise ConfigError(f"--statistic must be one of {', '.join(STATISTICS)}")
    measurements = read_measurements(Path(args.run))
    cluster = load_cluster(args.cluster)
    ops = {o.strip() for o in args.ops.split(",") if o.strip()} if args.ops else None
    sizes, bounds = parse_sizes(args.sizes) if args.sizes else (None, None)
    measurements = select_rows(measurements, ops=ops, sizes=sizes, bounds=bounds)
    df = collective_frame(
        measurements, cluster, statistic=args.statistic, simulate=not args.no_simulate
    )
    link = cluster.link
    print(
        f"{args.run}: {len(df)} measurements on {df.attrs['world_size']} ranks "
        f"({df.attrs['backend']}), cluster {cluster.name} (alpha {link.latency_s * 1e6:.1f} us, "
        f"{link.payload_Bps / 1e6:.2f} MB/s, gamma {link.gamma_s_per_byte:.3g} s/B, "
        f"allgatherv host {link.allgatherv_host_s_per_byte:.3g} s/B"
        + (
            f", by gathered size at {len(link.allgatherv_host_s_per_byte_table)} points)"
            if link.allgatherv_host_s_per_byte_table
            else ")"
        )
    )
    print(collective_text(df))
    if args.out is not None:
        out = prepare_output(
            args.out,
            "vgcsim validate",
            overwrite=args.overwrite,
            files=["validation_collectives.csv"],
        )
        out.write("validation_collectives.csv", lambda p: df.to_csv(p, index=False))
        out.commit()
        print(f"wrote {args.out / 'validation_collectives.csv'}")
    result = verdict(_collective_cases(df), args.tolerance)
    print(result.line())
    return 0 if result.passed else 1


def run(args: argparse.Namespace) -> int:
    from vgcsim import api
    from vgcsim.reports.validation import plot_validation, steps_text, validation_summary
    from vgcsim.traces.io import read_trace

    if not args.tolerance > 0:
        raise ConfigError(f"--tolerance must be positive, got {args.tolerance}")
    if args.out is not None:
        check_output(args.out, "vgcsim validate", overwrite=args.overwrite)
    if Path(args.run).is_file():
        if args.other is not None:
            raise ConfigError("a second run is compared only with a trace, not a measurement file")
        return _run_measurements(args)
    trace = read_trace(args.run)
    other = read_trace(args.other) if args.other is not None else None
    if other is not None and (trace.ranks is None or other.ranks is None):
        raise ConfigError(
            "comparing two runs needs two traces written by the DDP hook "
            "(register_vgc_hook(..., trace_dir=...))"
        )
    cluster = api.load_cluster(args.cluster, compute=args.compute)
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
    print(steps_text(df, summary, args.show_steps))
    terms = None
    if trace.ranks is not None:
        from vgcsim.reports.validation import term_summary, terms_text

        terms = term_frame(trace, cluster, opts)
        print()
        print(terms_text(term_summary(terms), terms.attrs))
    if other is not None:
        from vgcsim.reports.validation import winner_line

        frames = [terms, term_frame(other, cluster, opts)]
        print(winner_line(frames))
    if args.out is not None:
        files = ["validation.csv", "validation_summary.csv", "validation.png"]
        if terms is not None:
            files.append("validation_terms.csv")
        out = prepare_output(args.out, "vgcsim validate", overwrite=args.overwrite, files=files)
        if terms is not None:
            out.write("validation_terms.csv", lambda p: terms.to_csv(p, index=False))
        out.write("validation.csv", lambda p: df.to_csv(p, index=False))
        out.write("validation_summary.csv", lambda p: summary.to_csv(p, index=False))
        fig = plot_validation(df).figure
        out.write("validation.png", lambda p: fig.savefig(p, dpi=120, format="png"))
        out.commit()
        print(f"wrote {args.out / 'validation.csv'}, validation_summary.csv, validation.png")
    # The verdict is on the mean over steps: per-step times carry scheduling noise that a
    # model of the network does not claim to predict (the summary shows it).
    cases = {
        f"{a['collective']} mean over steps {row.source}": row.mean_rel_error
        for row in summary.itertuples(index=False)
        if row.source != "measured"
    }
    result = verdict(cases, args.tolerance)
    print(result.line())
    return 0 if result.passed else 1
