"""``vgcsim calibrate``: measure this network with real messages and collectives, fit the link,
write a cluster file.

Runs the size sweep of :mod:`vgcsim.traces.training.distributed_calibrate` (measurement file:
:mod:`vgcsim.traces.calibration`) and fits the α-β-γ link (:mod:`vgcsim.models.linkfit`:
latency from small messages, bandwidth from large ones), prints the fit error per size (and
plots it, ``OUTPUT.fit.png``), and writes a cluster TOML that ``predict``, ``simulate`` and
``validate`` accept with ``--cluster FILE``: a non-blocking star of the fitted link, or, when
the job spans several nodes with several ranks on each, a hierarchical cluster whose
``intra_link`` is fitted from a ping-pong inside a node.

Where the ranks come from:

* under ``torchrun`` (``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR``, ``MASTER_PORT`` set), this
  process is one rank; rank 0 fits and writes the file;
* otherwise it starts ``--nprocs`` ranks here; with ``--nnodes N`` every node runs the same
  command with its own ``--node-rank`` and the same ``--master-addr``/``--master-port``, and
  node 0 fits and writes the file;
* ``--from FILE`` fits measurements written earlier (``--sizes MIN:MAX`` keeps a subset).

A fit whose typical error (exp of the rms log ratio, minus one) exceeds ``--max-error`` is
refused with one line and exit status 2 unless ``--force``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import math
import os
from pathlib import Path

from vgcsim.commands import add_out_option, add_set_option
from vgcsim.core.errors import ConfigError, VgcsimError
from vgcsim.core.units import format_bytes

HELP = (
    "measure point-to-point, allreduce, allgather(v) times across ranks and nodes; fit "
    "alpha, beta, gamma; write a cluster file"
)

log = logging.getLogger(__name__)


class CalibrationError(VgcsimError):
    """The measurements do not pin the link well enough to write a cluster file."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from vgcsim.traces.calibration import DEFAULT_MAX_ERROR, DEFAULT_OPS, DEFAULT_PASSES

    add_out_option(parser, "cluster TOML file to write", type=Path)
    add_set_option(
        parser,
        "set a CalibrateConfig key of the measurement sweep (backend, ops, sizes_bytes, "
        "repeats, warmup, budget_s, passes), applied after the flags of the same names",
    )
    parser.add_argument(
        "--codec",
        action="store_true",
        help="measure this device's memory bandwidth and launch overhead with torch kernels "
        "instead of the network; write them as the [device] table of -o (kept otherwise)",
    )
    parser.add_argument(
        "--codec-device", default="auto", help="with --codec: cpu, cuda or auto (default)"
    )
    parser.add_argument("--backend", default="gloo", help="gloo (CPU) or nccl (one GPU per rank)")
    parser.add_argument(
        "--nprocs",
        type=int,
        default=None,
        help="ranks to start on this node (default 2 on one node, 1 per node with --nnodes)",
    )
    parser.add_argument("--nnodes", type=int, default=1, help="nodes in the job (default 1)")
    parser.add_argument("--node-rank", type=int, default=0, help="this node's index (0..N-1)")
    parser.add_argument(
        "--master-addr", default="127.0.0.1", help="address of node 0, reachable from every node"
    )
    parser.add_argument(
        "--master-port", type=int, default=None, help="rendezvous port on node 0 (with --nnodes)"
    )
    parser.add_argument(
        "--iface",
        default=None,
        help="network interface the ranks use (sets GLOO_SOCKET_IFNAME and NCCL_SOCKET_IFNAME)",
    )
    parser.add_argument(
        "--from",
        dest="from_file",
        type=Path,
        default=None,
        help="fit measurements written earlier (a torchrun job, or FILE.measurements.json)",
    )
    parser.add_argument(
        "--ops",
        default=",".join(DEFAULT_OPS),
        help=f"operations to time, comma-separated (default: {', '.join(DEFAULT_OPS)})",
    )
    parser.add_argument(
        "--fit-ops",
        default=None,
        help="operations that fix alpha and beta (default: beta from p2p; alpha from the small "
        "allreduces, gamma from the large ones, the allgatherv host cost from allgatherv, its "
        "padded share from allgatherv_skewed)",
    )
    parser.add_argument(
        "--sizes",
        default=None,
        help="MIN:MAX (log-spaced: x4, then x2 from 1 MiB) or a list 4,1KiB,1MiB (default 4:64MiB); "
        "with --from: the measured sizes to fit",
    )
    parser.add_argument("--repeats", type=int, default=10, help="timed repetitions per size")
    parser.add_argument("--warmup", type=int, default=2, help="untimed repetitions per size")
    parser.add_argument(
        "--passes",
        type=int,
        default=DEFAULT_PASSES,
        help="passes through the sweep that each size's repetitions are spread over, so a "
        f"slow spell hits a few repetitions of many sizes (default {DEFAULT_PASSES}; 1: all "
        "of a size's repetitions back to back)",
    )
    parser.add_argument(
        "--budget",
        type=float,
        default=10.0,
        help="seconds of timed repetitions per size; slow sizes get fewer (never under 3)",
    )
    parser.add_argument(
        "--statistic",
        default="median",
        help="median (what a step sees, default) or min (best case) over repetitions",
    )
    parser.add_argument(
        "--max-error",
        type=float,
        default=DEFAULT_MAX_ERROR,
        help="refuse to write the file when the fit's typical error exceeds this "
        f"(default {DEFAULT_MAX_ERROR:g}, i.e. {DEFAULT_MAX_ERROR * 100:.0f}%%)",
    )
    parser.add_argument("--force", action="store_true", help="write the file whatever the error")
    parser.add_argument(
        "--host-cores",
        type=int,
        default=0,
        help="cores of the host the measured ranks share (0, default: not shared); with "
        "--ranks-per-host, the fitted CPU-time terms (per-call cost, gamma, allgatherv host "
        "cost) are divided by the processor-sharing factor they were measured under and the "
        "file says so (ranks_per_host, host_cores)",
    )
    parser.add_argument(
        "--ranks-per-host",
        type=int,
        default=1,
        help="measured ranks per host (default 1); ranks in network namespaces of one "
        "machine share its cores",
    )
    parser.add_argument(
        "--burst",
        default=None,
        metavar="SIZE",
        help="token-bucket depth of every host link where a shaper or the provider sets one "
        "(tc tbf's burst, an instance's burst allowance), e.g. 256KiB: written as the file's "
        "[link] burst (not measured: the sweep's back-to-back messages drain the bucket)",
    )
    parser.add_argument("--name", default=None, help="cluster name (default calibrated-BACKEND-N)")
    parser.add_argument(
        "--device-preset",
        dest="device",
        default="cpu",
        metavar="NAME",
        help="device preset written to the file (see `vgcsim clusters`; default: cpu)",
    )
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds before giving up")


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


def _fit_source(fit) -> str:
    """Where the fit's alpha and beta come from, as the printed summary and the cluster file
    both say it."""
    ops = "+".join(fit.fit_ops)
    if fit.latency_op:
        return f"alpha from {fit.latency_op}'s small messages, beta from {ops}"
    return f"alpha and beta from {ops}"


def _link_lines(table: str, name: str, fit, what: str) -> list[str]:
    from vgcsim.core.cluster import LinkSpec

    source = (
        f"vgcsim calibrate: {what}, {fit.backend}, {fit.world_size} ranks, "
        + _fit_source(fit)
        + (f", gamma from {fit.gamma_op}" if fit.gamma_op else "")
        + (f", allgatherv host cost from {fit.host_op}" if fit.host_op else "")
        + (f", its padded share from {fit.share_op}" if fit.share_op else "")
        + (f", per-call cost from {'+'.join(fit.call_ops)}" if fit.call_ops else "")
        + f" ({fit.method} fit), typical error {fit.typical_error:.1%}"
    )
    lines = [
        f"[{table}]",
        f"name = {toml_value(name)}",
        f"bandwidth_Bps = {toml_value(float(fit.bandwidth_Bps))}",
        f"latency_s = {toml_value(float(fit.latency_s))}",
        f"gamma_s_per_byte = {toml_value(float(fit.gamma_s_per_byte))}",
        f"allgatherv_host_s_per_byte = {toml_value(float(fit.allgatherv_host_s_per_byte))}",
    ]
    if fit.call_ops:
        # the software cost of one collective call, fitted with alpha from small messages
        lines.append(f"call_overhead_s = {toml_value(float(fit.call_overhead_s))}")
    if fit.segments:
        # p2p priced by message size ([from_bytes, extra_latency_s, bandwidth_Bps])
        points = ", ".join(
            f"[{toml_value(float(b))}, {toml_value(float(e))}, {toml_value(float(w))}]"
            for b, e, w in fit.segments
        )
        lines.append(f"segments = [{points}]")
    host_table = fit.allgatherv_host_s_per_byte_table
    if host_table:
        # δ size by size ([gathered bytes, s per byte]); it prices the host time where given.
        points = ", ".join(f"[{int(b)}, {toml_value(float(v))}]" for b, v in host_table)
        lines.append(f"allgatherv_host_s_per_byte_table = [{points}]")
    if fit.share_op:
        # the share of that host time an allgatherv of uneven blocks pays per padded byte
        lines.append(
            f"allgatherv_host_padded_share = {toml_value(float(fit.allgatherv_host_padded_share))}"
        )
    if "efficiency" in {f.name for f in dataclasses.fields(LinkSpec)}:
        # The fit measures payload bytes per second: nothing is left to discount.
        lines.append("efficiency = 1.0")
    return [*lines, f"source = {toml_value(source)}", ""]


def cluster_toml(
    name: str,
    fit,
    device: str,
    note: str,
    intra=None,
    ranks_per_node: int = 1,
    hosts: tuple[int, int] = (1, 0),
    burst_bytes: float = 0.0,
) -> str:
    """The cluster file text for a fitted link: a non-blocking star of identical NICs, or a
    hierarchical cluster with ``ranks_per_node`` ranks per node on the fitted ``intra`` link;
    ``hosts`` = (ranks_per_host, host_cores), written where host_cores > 0; ``burst_bytes``,
    the host link's token bucket as given (``--burst``), written where > 0."""
    lines = [
        f"{WRITTEN_BY} {note}",
        f"name = {toml_value(name)}",
        f"device = {toml_value(device)}",
        'compute = "trace"',
    ]
    if hosts[1] > 0:
        lines += [f"ranks_per_host = {hosts[0]}", f"host_cores = {hosts[1]}"]
    if intra is not None:
        lines.append(f"gpus_per_node = {ranks_per_node}")
    lines += ["", "[topology]", f"kind = {toml_value('hierarchical' if intra else 'star')}", ""]
    lines += _link_lines("link", name, fit, "inter-node link" if intra else "link")
    if burst_bytes > 0:
        lines.append(f"burst_bytes = {toml_value(float(burst_bytes))}  # as given (--burst)")
    if intra is not None:
        lines += _link_lines("intra_link", f"{name}-intra", intra, "intra-node link")
    return "\n".join(lines)


def _fit_ops(text: str | None) -> set[str]:
    """--fit-ops as a set of known op names (empty: the default)."""
    from vgcsim.traces.calibration import OPS

    ops = {o.strip() for o in (text or "").split(",") if o.strip()}
    unknown = sorted(ops - set(OPS))
    if unknown:
        raise ConfigError(f"--fit-ops: unknown op {unknown[0]!r}; valid: {', '.join(OPS)}")
    return ops


def under_torchrun() -> bool:
    """True when this process was started as one rank of a torchrun-style job."""
    return all(k in os.environ for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"))


def _check_options(args: argparse.Namespace) -> None:
    from vgcsim.traces.calibration import STATISTICS

    if args.statistic not in STATISTICS:
        raise ConfigError(f"--statistic must be one of {', '.join(STATISTICS)}")
    if not args.max_error > 0:
        raise ConfigError(f"--max-error must be positive, got {args.max_error}")
    if not 0 < args.timeout < math.inf:
        raise ConfigError(f"--timeout must be a positive number of seconds, got {args.timeout}")
    if not 0 <= args.host_cores <= 2**20:
        raise ConfigError(f"--host-cores must be an integer >= 0, got {args.host_cores}")
    if not 1 <= args.ranks_per_host <= 2**20:
        raise ConfigError(f"--ranks-per-host must be an integer >= 1, got {args.ranks_per_host}")
    args.burst_bytes = 0.0
    if args.burst is not None:
        from vgcsim.core.units import parse_size_bytes

        try:
            args.burst_bytes = parse_size_bytes(args.burst)
        except ConfigError as exc:
            raise ConfigError(f"--burst: {str(exc).split(': ', 1)[-1]}") from None
        if args.burst_bytes > 1e15:
            raise ConfigError(f"--burst must be at most 1e15 bytes, got {args.burst}")


def _measure(args: argparse.Namespace, meas_path: Path) -> bool:
    """Run the sweep (this process as a torchrun rank, or ranks started here); True on the
    node or rank that fits and writes the file."""
    from vgcsim.core.config import apply_overrides, to_dict
    from vgcsim.traces.calibration import CalibrateConfig, default_sizes_bytes, parse_sizes
    from vgcsim.traces.training.distributed_calibrate import run_rank
    from vgcsim.traces.training.distributed_launch import check_backend, launch_local

    cfg = CalibrateConfig(
        backend=args.backend,
        ops=tuple(o.strip() for o in args.ops.split(",") if o.strip()),
        sizes_bytes=parse_sizes(args.sizes)[0] if args.sizes else default_sizes_bytes(),
        repeats=args.repeats,
        warmup=args.warmup,
        budget_s=args.budget,
        passes=args.passes,
    )
    cfg = apply_overrides(cfg, args.set)
    check_backend(cfg.backend)
    if under_torchrun():
        if args.nnodes != 1 or args.node_rank != 0 or args.nprocs is not None:
            raise ConfigError(
                "started by torchrun: give the layout to torchrun, not --nnodes/--node-rank/--nprocs"
            )
        return run_rank(cfg, meas_path, args.iface) == 0
    nprocs = args.nprocs if args.nprocs is not None else (2 if args.nnodes == 1 else 1)
    if nprocs * args.nnodes < 2:
        raise ConfigError(
            "--nprocs must be >= 2 (calibration times traffic between ranks), or give --nnodes >= 2"
        )
    # Each rank gets the sweep as the JSON of its config (what the measurement file records).
    argv = ["-m", "vgcsim.traces.training.distributed_calibrate"]
    argv += [json.dumps(to_dict(cfg)), str(meas_path)]
    launch_local(
        argv,
        nprocs,
        timeout_s=args.timeout,
        master_addr=args.master_addr,
        master_port=args.master_port,
        nnodes=args.nnodes,
        node_rank=args.node_rank,
        iface=args.iface,
    )
    return args.node_rank == 0


def _run_codec(args: argparse.Namespace, out: Path) -> int:
    """``--codec``: see :mod:`vgcsim.traces.training.codec_calibrate`."""
    from vgcsim.core.cluster import get_device
    from vgcsim.traces.training.codec_calibrate import (
        measure_device,
        resolve_device,
        summary,
        write_device_entry,
    )

    if out.is_dir():
        raise ConfigError(f"-o {out} is a folder; give the cluster TOML file to write")
    device = resolve_device(args.codec_device)
    get_device(args.device)
    if device == "cuda" and args.device == "cpu":
        raise ConfigError("--codec on cuda: name the GPU's preset with --device-preset (e.g. H100)")
    out.parent.mkdir(parents=True, exist_ok=True)
    cal = measure_device(device, repeats=max(args.repeats, 1), warmup=args.warmup)
    print(summary(cal))
    write_device_entry(out, cal, preset=args.device, name=args.name)
    print(f"wrote the [device] table of {out}")
    return 0


def run(args: argparse.Namespace) -> int:
    from vgcsim.core.cluster import load_cluster
    from vgcsim.core.outdir import atomic_write_text
    from vgcsim.models.linkfit import fit_intra_link, fit_link, op_errors, protocol_switch
    from vgcsim.reports.calibration import fit_table_text
    from vgcsim.traces.calibration import parse_sizes, read_measurements, select_rows

    out: Path = args.out
    if args.codec:
        return _run_codec(args, out)
    fit_ops = _fit_ops(args.fit_ops)
    _check_options(args)
    if out.is_dir():
        raise ConfigError(f"-o {out} is a folder; give the cluster TOML file to write")
    _check_out_file(out, args.overwrite)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"-o {out}: cannot create its folder ({exc.strerror})") from None
    if args.from_file is not None:
        measurements = read_measurements(args.from_file)
        note = f"measurements from {args.from_file.name}"
        if args.sizes:
            sizes, bounds = parse_sizes(args.sizes)
            measurements = select_rows(measurements, sizes=sizes, bounds=bounds)
            note += f", sizes {args.sizes}"
    else:
        meas_path = out.with_name(out.stem + ".measurements.json")
        if not _measure(args, meas_path):
            if not under_torchrun():
                print(f"node {args.node_rank}: measured; node 0 fits and writes the cluster file")
            return 0
        measurements = read_measurements(meas_path)
        note = f"measurements in {meas_path.name}"

    fit, table = fit_link(
        measurements,
        args.statistic,
        ops=sorted(fit_ops - {"p2p_intra"}) or None,
        gamma_op=None if fit_ops else "allreduce",
        host_op=None if fit_ops else "allgatherv",
        latency_op=None if fit_ops else "allreduce",
        share_op=None if fit_ops else "allgatherv_skewed",
    )
    if fit.bandwidth_Bps == float("inf"):
        raise CalibrationError(
            "the fit found no per-byte cost (beta = 0); include larger --sizes so the "
            "bandwidth term shows"
        )
    intra = fit_intra_link(measurements, args.statistic)
    if intra is not None:
        table += intra[1]
    _save_plot(table, out.with_name(out.stem + ".fit.png"))
    print(fit_table_text(table))
    print()
    _print_fit("link", fit)
    if intra is not None:
        _print_fit("intra_link", intra[0])
    errors = op_errors(table)
    print(
        "typical error per op (predicted from the fit where not fitted): "
        + ", ".join(f"{op} {e:.1%}" for op, e in errors.items())
    )
    switch = None if fit.segments else protocol_switch(table)  # segments price the steps
    if switch is not None:
        print(
            f"p2p steps between {switch['below_bytes']} and {switch['above_bytes']} B "
            "(a protocol switch, or a token bucket's burst): below alpha = "
            f"{switch['below'][0] * 1e6:.1f} us, above alpha = {switch['above'][0] * 1e6:.1f} us; "
            "fit one side with --from ... --sizes MIN:MAX"
        )
    worst = max((f for f in (fit, intra[0] if intra else None) if f), key=lambda f: f.typical_error)
    if worst.typical_error > args.max_error and not args.force:
        raise CalibrationError(
            f"fit error too large: typical error {worst.typical_error:.0%} on "
            f"{'+'.join(worst.fit_ops)} exceeds --max-error {args.max_error:.0%}; {out} not "
            "written (see the table; refit a size range with --from FILE --sizes MIN:MAX, or "
            "--force)"
        )
    nodes = measurements.get("nodes") or [0] * int(measurements["world_size"])
    ranks_per_node = nodes.count(nodes[0])
    name = args.name or f"calibrated-{fit.backend}-{fit.world_size}"
    hosts = (args.ranks_per_host, args.host_cores)
    share = unshared(fit, hosts)
    if share != 1.0:
        print(
            f"CPU-time terms divided by {share:.3g}, the processor sharing they were measured under"
        )
        fit = dataclasses.replace(
            fit,
            call_overhead_s=fit.call_overhead_s / share,
            gamma_s_per_byte=fit.gamma_s_per_byte / share,
            allgatherv_host_s_per_byte=fit.allgatherv_host_s_per_byte / share,
            allgatherv_host_s_per_byte_table=tuple(
                (b, v / share) for b, v in fit.allgatherv_host_s_per_byte_table
            ),
        )
    atomic_write_text(
        out,
        cluster_toml(
            name,
            fit,
            args.device,
            note,
            intra[0] if intra else None,
            ranks_per_node,
            hosts,
            getattr(args, "burst_bytes", 0.0),
        ),
    )
    load_cluster(str(out))  # what predict/simulate will do: fail here, not later
    print(f"wrote {out} and {out.stem}.fit.png")
    return 0


def unshared(fit, hosts: tuple[int, int]) -> float:
    """The processor-sharing factor the fit's ranks ran under (``vgcsim.core.cluster.host_share``
    of a star with ``hosts`` = (ranks_per_host, host_cores) at the fit's world size)."""
    from vgcsim.core.cluster import get_cluster, host_share

    star = dataclasses.replace(get_cluster("1GbE"), ranks_per_host=hosts[0], host_cores=hosts[1])
    return host_share(star, fit.world_size)


def _print_fit(label: str, fit) -> None:
    gamma = f", gamma = {fit.gamma_s_per_byte:.3g} s/B" if fit.gamma_op else ""
    if fit.host_op:
        gamma += f", allgatherv host {fit.allgatherv_host_s_per_byte:.3g} s/B"
        if fit.allgatherv_host_s_per_byte_table:
            gamma += (
                " (by gathered size: "
                + ", ".join(
                    f"{format_bytes(b)} {v:.3g}" for b, v in fit.allgatherv_host_s_per_byte_table
                )
                + ")"
            )
        if fit.share_op:
            gamma += f", {fit.allgatherv_host_padded_share:.2f} of it per padded byte"
    if fit.call_ops:
        gamma += f", {fit.call_overhead_s * 1e6:.1f} us per call ({'+'.join(fit.call_ops)})"
    if fit.segments:
        gamma += "; size segments from " + ", ".join(
            f"{format_bytes(b)}: {e * 1e6:+.1f} us, {w / 1e6:.2f} MB/s" for b, e, w in fit.segments
        )
    ops = "+".join(fit.fit_ops)
    source = _fit_source(fit)
    if fit.latency_op:
        alpha = (
            f"alpha = {fit.latency_s * 1e6:.2f} us a collective step "
            f"({ops} alone: {fit.fit_ops_latency_s * 1e6:.2f} us)"
        )
    else:
        alpha = f"alpha = {fit.latency_s * 1e6:.2f} us"
    print(
        f"{label} ({fit.backend}, {fit.world_size} ranks; {source}, {fit.method} fit): {alpha}, "
        f"beta = 1/({fit.bandwidth_Bps / 1e6:.2f} MB/s){gamma}; typical error "
        f"{fit.typical_error:.1%}, rms relative error {fit.rms_rel_error:.1%}"
    )


#: The first line of every cluster file calibrate writes: its marker (vgcsim.core.outdir).
WRITTEN_BY = "# Written by vgcsim calibrate."


def _check_out_file(out: Path, overwrite: bool) -> None:
    """Refuse to replace a file calibrate did not write, or one it did without --overwrite."""
    from vgcsim.core.outdir import OutputError

    if not out.exists():
        return
    try:
        with open(out, encoding="utf-8", errors="replace") as fh:
            first = fh.readline()
    except OSError:
        first = ""
    if not first.startswith(WRITTEN_BY):
        raise OutputError(f"{out} exists and was not written by vgcsim calibrate; not replacing it")
    if not overwrite:
        raise OutputError(
            f"{out} already holds a cluster file from vgcsim calibrate; pass --overwrite to "
            "replace it, or choose another -o"
        )


def _save_plot(table: list[dict], path: Path) -> None:
    from vgcsim.core.outdir import atomic_write
    from vgcsim.reports.calibration import plot_fit

    figure = plot_fit(table).figure
    atomic_write(path, lambda p: figure.savefig(p, dpi=120, format="png"))
