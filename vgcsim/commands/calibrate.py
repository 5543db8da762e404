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

The work is :func:`vgcsim.api.calibrate`, :func:`vgcsim.api.calibrate_from` and
:func:`vgcsim.api.calibrate_codec`; this command parses, calls one of them and prints.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

from vgcsim.commands import add_out_option, add_set_option
from vgcsim.core.clusterspec import HOST_SHARINGS
from vgcsim.core.errors import ConfigError

HELP = (
    "measure point-to-point, allreduce, allgather(v) times across ranks and nodes; fit "
    "alpha, beta, gamma; write a cluster file"
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from vgcsim import api

    defaults = api.calibration_defaults()
    add_out_option(parser, "cluster TOML file to write", type=Path)
    add_set_option(
        parser,
        "set a CalibrateConfig key of the measurement sweep (backend, ops, sizes_bytes, "
        "repeats, warmup, budget_s, passes, busy_before_s), applied after the flags of the same "
        "names",
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
        default=",".join(defaults.default_ops),
        help=f"operations to time, comma-separated (default: {', '.join(defaults.default_ops)})",
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
    parser.add_argument(
        "--repeats",
        type=int,
        default=None,
        help=f"timed repetitions per size (default {defaults.repeats}; with --codec 10)",
    )
    parser.add_argument("--warmup", type=int, default=2, help="untimed repetitions per size")
    parser.add_argument(
        "--passes",
        type=int,
        default=defaults.passes,
        help="passes through the sweep that each size's repetitions are spread over, so a "
        f"slow spell hits a few repetitions of many sizes (default {defaults.passes}; 1: all "
        "of a size's repetitions back to back)",
    )
    parser.add_argument(
        "--busy-before",
        default="0",
        metavar="DURATION",
        help="CPU work every rank does before each timed operation, as a training step "
        "computes before its exchange (e.g. 8ms, a step's compute; default 0: operations "
        "back to back); each repetition then times one operation",
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
        default=defaults.max_error,
        help="refuse to write the file when the fit's typical error exceeds this "
        f"(default {defaults.max_error:g}, i.e. {defaults.max_error * 100:.0f}%%)",
    )
    parser.add_argument("--force", action="store_true", help="write the file whatever the error")
    parser.add_argument(
        "--host-cores",
        type=int,
        default=0,
        help="cores of the host the measured ranks share (0, default: not shared); with "
        "--ranks-per-host, the fitted CPU-time terms (per-call cost, gamma, allgatherv host "
        "cost) are divided by the sharing factor they were measured under (--host-sharing) "
        "and the file says so (ranks_per_host, host_cores, host_sharing)",
    )
    parser.add_argument(
        "--host-sharing",
        default="fullest-core",
        metavar="RULE",
        help="how the measured ranks shared the host's cores: fullest-core (default: "
        "ceil(ranks / cores), the fullest core sets the pace) or fair (ranks / cores, "
        "processor sharing); written into the file",
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
        "(tc tbf's burst, an instance's burst allowance), e.g. 256KiB (tc's 256kb; a bare b is "
        "refused as ambiguous): the fit prices the "
        "collectives' messages with it, and the file's [link] gets it (not measured)",
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


def _fit_ops(text: str | None) -> set[str]:
    """--fit-ops as a set of known op names (empty: the default)."""
    from vgcsim import api

    valid = api.calibration_defaults().ops
    ops = {o.strip() for o in (text or "").split(",") if o.strip()}
    unknown = sorted(ops - set(valid))
    if unknown:
        raise ConfigError(f"--fit-ops: unknown op {unknown[0]!r}; valid: {', '.join(valid)}")
    return ops


def _check_options(args: argparse.Namespace) -> None:
    from vgcsim import api

    statistics = api.calibration_defaults().statistics
    if args.statistic not in statistics:
        raise ConfigError(f"--statistic must be one of {', '.join(statistics)}")
    if not args.max_error > 0:
        raise ConfigError(f"--max-error must be positive, got {args.max_error}")
    if not 0 < args.timeout < math.inf:
        raise ConfigError(f"--timeout must be a positive number of seconds, got {args.timeout}")
    if not 0 <= args.host_cores <= 2**20:
        raise ConfigError(f"--host-cores must be an integer >= 0, got {args.host_cores}")
    if args.host_sharing not in HOST_SHARINGS:
        raise ConfigError(
            f"--host-sharing must be one of {', '.join(HOST_SHARINGS)}, got {args.host_sharing!r}"
        )
    if not 1 <= args.ranks_per_host <= 2**20:
        raise ConfigError(f"--ranks-per-host must be an integer >= 1, got {args.ranks_per_host}")
    from vgcsim.core.presets import get_device

    get_device(args.device)  # before anything is measured or written
    args.burst_bytes = 0.0
    if args.burst is not None:
        from vgcsim.core.units import parse_burst_bytes

        try:
            args.burst_bytes = parse_burst_bytes(args.burst)
        except ConfigError as exc:
            raise ConfigError(f"--burst: {str(exc).split(': ', 1)[-1]}") from None
        if args.burst_bytes > 1e15:
            raise ConfigError(f"--burst must be at most 1e15 bytes, got {args.burst}")


def _run_codec(args: argparse.Namespace, out: Path) -> int:
    """``--codec``: :func:`vgcsim.api.calibrate_codec`."""
    from vgcsim import api

    if out.is_dir():
        raise ConfigError(f"-o {out} is a folder; give the cluster TOML file to write")
    repeats = {} if args.repeats is None else {"repeats": max(args.repeats, 1)}
    result = api.calibrate_codec(
        out,
        device=args.codec_device,
        preset=args.device,
        warmup=args.warmup,
        name=args.name,
        **repeats,
    )
    print(result.summary)
    print(f"wrote the [device] table of {out}")
    return 0


#: Flags that only a measurement reads (``dest``: the flag): ``--from`` measures nothing.
_MEASURING = {
    "codec": "--codec",
    "backend": "--backend",
    "nprocs": "--nprocs",
    "nnodes": "--nnodes",
    "node_rank": "--node-rank",
    "master_addr": "--master-addr",
    "master_port": "--master-port",
    "iface": "--iface",
    "ops": "--ops",
    "repeats": "--repeats",
    "warmup": "--warmup",
    "passes": "--passes",
    "busy_before": "--busy-before",
    "budget": "--budget",
    "timeout": "--timeout",
    "set": "--set",
}


def _refuse_measuring_flags(args: argparse.Namespace) -> None:
    """``--from`` fits measurements already taken: a flag of the measurement would change
    nothing, so one given (away from its default) is refused rather than ignored."""
    defaults = argparse.ArgumentParser()
    add_arguments(defaults)
    given = [
        flag
        for dest, flag in _MEASURING.items()
        if getattr(args, dest, None) not in (None, [], defaults.get_default(dest))
    ]
    if given:
        raise ConfigError(
            f"{', '.join(given)} {'is an option' if len(given) == 1 else 'are options'} of a "
            f"measurement, and --from measures nothing (it fits {args.from_file}'s "
            f"measurements); leave {'it' if len(given) == 1 else 'them'} out"
        )


def run(args: argparse.Namespace) -> int:
    from vgcsim import api

    out: Path = args.out
    if args.from_file is not None:
        _refuse_measuring_flags(args)
    if args.codec:
        return _run_codec(args, out)
    fit_ops = _fit_ops(args.fit_ops)
    _check_options(args)
    if out.is_dir():
        raise ConfigError(f"-o {out} is a folder; give the cluster TOML file to write")
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"-o {out}: cannot create its folder ({exc.strerror})") from None
    options = dict(
        statistic=args.statistic,
        fit_ops=sorted(fit_ops),
        name=args.name,
        device=args.device,
        hosts=(args.ranks_per_host, args.host_cores),
        host_sharing=args.host_sharing,
        burst_bytes=args.burst_bytes,
        max_error=args.max_error,
        force=args.force,
        overwrite=args.overwrite,
    )
    try:
        if args.from_file is not None:
            result = api.calibrate_from(args.from_file, out, sizes=args.sizes, **options)
        else:
            sweep = dict(
                backend=args.backend,
                ops=args.ops,
                sizes=args.sizes,
                repeats=args.repeats,
                warmup=args.warmup,
                budget_s=args.budget,
                passes=args.passes,
                busy_before_s=args.busy_before,
            )
            result = api.calibrate(
                out,
                sweep,
                overrides=args.set,
                nprocs=args.nprocs,
                nnodes=args.nnodes,
                node_rank=args.node_rank,
                master_addr=args.master_addr,
                master_port=args.master_port,
                iface=args.iface,
                timeout_s=args.timeout,
                **options,
            )
    except api.CalibrationError as exc:
        if exc.run is not None:  # the refused fit: its table says why
            print(exc.run.report)
        raise
    if result is None:
        if args.node_rank != 0:
            print(f"node {args.node_rank}: measured; node 0 fits and writes the cluster file")
        return 0
    print(result.report)
    for line in result.notes:
        print(line)
    print(f"wrote {out} and {out.stem}.fit.png")
    return 0
