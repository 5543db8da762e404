"""``vgcsim calibrate``: measure this network with real collectives and write a cluster file.

Runs the size sweep of :mod:`traces.training.distributed_calibrate` on ``--nprocs`` local
ranks (or reads measurements a ``torchrun`` job wrote, ``--from FILE``), fits one α-β-γ link by
least squares, prints the fit error per size (and plots it, ``OUTPUT.fit.png``), and writes a
cluster TOML (a non-blocking star of the fitted link) that ``predict``, ``simulate`` and
``validate`` accept with ``--cluster FILE``.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
from pathlib import Path

from traces.errors import ConfigError, VgcsimError

HELP = (
    "measure point-to-point, allreduce, allgather(v) times; fit alpha, beta, gamma; "
    "write a cluster file"
)

log = logging.getLogger(__name__)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-o", "--output", type=Path, required=True, help="cluster TOML to write")
    parser.add_argument("--backend", default="gloo", help="gloo (CPU) or nccl (one GPU per rank)")
    parser.add_argument("--nprocs", type=int, default=2, help="local ranks to start (>= 2)")
    parser.add_argument(
        "--from",
        dest="from_file",
        type=Path,
        default=None,
        help="fit measurements written by a torchrun job instead of measuring here",
    )
    parser.add_argument(
        "--ops",
        default="p2p,allreduce,allgather,allgatherv",
        help="operations to time (comma-separated)",
    )
    parser.add_argument(
        "--fit-ops", default=None, help="operations the fit uses (default: all measured)"
    )
    parser.add_argument(
        "--sizes", default=None, help="message sizes, e.g. 4,1KiB,1MiB (default 4 B..4 MiB, x4)"
    )
    parser.add_argument("--repeats", type=int, default=10, help="timed repetitions per size")
    parser.add_argument("--warmup", type=int, default=2, help="untimed repetitions per size")
    parser.add_argument(
        "--statistic",
        default="median",
        help="median (what a step sees, default) or min (best case) over repetitions",
    )
    parser.add_argument("--name", default=None, help="cluster name (default calibrated-BACKEND-N)")
    parser.add_argument("--device", default="cpu", help="device preset written to the file")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds before giving up")


def toml_value(value: object) -> str:
    """A TOML literal for a string, bool, int or finite float."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise VgcsimError(f"cannot write non-finite number {value} to a cluster file")
        return repr(value)
    return json.dumps(str(value))


def cluster_toml(name: str, fit, device: str, note: str) -> str:
    """The cluster file text for a fitted link (a non-blocking star of identical NICs)."""
    source = (
        f"vgcsim calibrate: {fit.backend}, {fit.world_size} ranks, ring alpha-beta-gamma "
        f"log-ratio least squares, rms relative error {fit.rms_rel_error:.3f}, typical factor "
        f"{math.exp(fit.rms_log_error):.2f}; {note}"
    )
    lines = [
        f"# Written by vgcsim calibrate. {note}",
        f"name = {toml_value(name)}",
        f"device = {toml_value(device)}",
        'compute = "trace"',
        "",
        "[topology]",
        'kind = "star"',
        "",
        "[link]",
        f"name = {toml_value(name)}",
        f"bandwidth_Bps = {toml_value(float(fit.bandwidth_Bps))}",
        f"latency_s = {toml_value(float(fit.latency_s))}",
        f"gamma_s_per_byte = {toml_value(float(fit.gamma_s_per_byte))}",
        f"source = {toml_value(source)}",
        "",
    ]
    return "\n".join(lines)


def format_fit_table(table: list[dict]) -> str:
    """Per-size fit error as an aligned text table."""
    head = f"{'op':<10} {'size_bytes':>11} {'measured_s':>12} {'fitted_s':>12} {'rel_error':>9}"
    rows = [
        f"{r['op']:<10} {r['size_bytes']:>11d} {r['measured_s']:>12.4g} "
        f"{r['fitted_s']:>12.4g} {r['rel_error']:>+9.1%}"
        for r in table
    ]
    return "\n".join([head, *rows])


def _fit_ops(text: str | None) -> set[str]:
    """--fit-ops as a set of known op names (empty: fit all measured ops)."""
    from traces.training.distributed_calibrate import OPS

    ops = {o.strip() for o in (text or "").split(",") if o.strip()}
    unknown = sorted(ops - set(OPS))
    if unknown:
        raise ConfigError(f"--fit-ops: unknown op {unknown[0]!r}; valid: {', '.join(OPS)}")
    return ops


def run(args: argparse.Namespace) -> int:
    from traces.cluster import load_cluster
    from traces.training.distributed_calibrate import (
        config_from_args,
        fit_link,
        read_measurements,
    )

    out: Path = args.output
    fit_ops = _fit_ops(args.fit_ops)
    if out.is_dir():
        raise ConfigError(f"-o {out} is a folder; give the cluster TOML file to write")
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"-o {out}: cannot create its folder ({exc.strerror})") from None
    if args.from_file is not None:
        measurements = read_measurements(args.from_file)
        note = f"measurements from {args.from_file.name}"
    else:
        if args.nprocs < 2:
            raise ConfigError("--nprocs must be >= 2 (calibration times traffic between ranks)")
        if not 0 < args.timeout < math.inf:
            raise ConfigError(f"--timeout must be a positive number of seconds, got {args.timeout}")
        from traces.training.distributed_launch import check_backend, launch_local

        # Validate here so a bad option fails before any process starts.
        config_from_args(args.backend, args.ops, args.sizes, args.repeats, args.warmup)
        check_backend(args.backend)
        meas_path = out.with_name(out.stem + ".measurements.json")
        argv = [
            "-m",
            "traces.training.distributed_calibrate",
            "--backend",
            args.backend,
            "--ops",
            args.ops,
            "--repeats",
            str(args.repeats),
            "--warmup",
            str(args.warmup),
            "-o",
            str(meas_path),
        ]
        if args.sizes:
            argv += ["--sizes", args.sizes]
        launch_local(argv, args.nprocs, timeout_s=args.timeout)
        measurements = read_measurements(meas_path)
        note = f"measurements in {meas_path.name}"

    if fit_ops:
        measured = {r["op"] for r in measurements["rows"]}
        if not fit_ops & measured:
            raise ConfigError(
                f"--fit-ops {args.fit_ops!r}: none of these was measured "
                f"(measured: {', '.join(sorted(measured))})"
            )
        measurements = {
            **measurements,
            "rows": [r for r in measurements["rows"] if r["op"] in fit_ops],
        }
    fit, table = fit_link(measurements, args.statistic)
    if fit.bandwidth_Bps == float("inf"):
        raise VgcsimError(
            "the fit found no per-byte cost (beta = 0); include larger --sizes so the "
            "bandwidth term shows"
        )
    name = args.name or f"calibrated-{fit.backend}-{fit.world_size}"
    out.write_text(cluster_toml(name, fit, args.device, note))
    load_cluster(str(out))  # what predict/simulate will do: fail here, not later

    _save_plot(table, out.with_name(out.stem + ".fit.png"))
    print(format_fit_table(table))
    print(
        f"\nfit ({fit.backend}, {fit.world_size} ranks): alpha = {fit.latency_s * 1e6:.2f} us, "
        f"beta = 1/({fit.bandwidth_Bps / 1e9:.3f} GB/s), gamma = {fit.gamma_s_per_byte:.3g} s/B, "
        f"rms relative error {fit.rms_rel_error:.1%}, typical factor "
        f"x{math.exp(fit.rms_log_error):.2f}"
    )
    print(f"wrote {out} and {out.stem}.fit.png")
    return 0


def _save_plot(table: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from traces.training.distributed_calibrate import plot_fit

    fig, ax = plt.subplots(figsize=(6, 4))
    plot_fit(table, ax)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
