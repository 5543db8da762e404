"""``vgcsim validate RUN --cluster FILE``: measured vs predicted vs simulated communication,
with a verdict.

A trace recorded on real ranks (``vgcsim record --backend gloo|nccl``) carries ``comm_s``:
the measured seconds of each step's exchange collective (allgatherv of the compressed
payloads; all_reduce for ``dense``). :func:`vgcsim.api.validate` replays the same trace on a
cluster — ideally the one ``vgcsim calibrate`` fitted on the same network — with the
closed-form models and the discrete-event simulator, and puts the three side by side per
step (and per term of the step for a trace the DDP hook wrote). ``RUN`` may also be a
calibration measurement file (``vgcsim calibrate`` keeps one next to its cluster file):
every measured (collective, size) is then compared with the closed form and the simulator.

The command prints the aggregate table and the first steps (or the per-collective table),
with ``-o DIR`` writes the files of :func:`vgcsim.api.save_validation`, and ends with the
verdict: the worst absolute relative error (trace: of the mean over steps, per source;
measurements: per collective and size) against ``--tolerance`` (default 10 %). Past it the
command names the worst case and exits with status 1.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from vgcsim import api
from vgcsim.commands import add_out_option
from vgcsim.core.errors import ConfigError
from vgcsim.core.outdir import check_output

HELP = "compare measured communication of a distributed run with the models and the simulator"


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
        help="allgatherv algorithm (default: what the run used: bounded for a trace the DDP hook "
        "wrote, else padded on gloo and ring on nccl)",
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
        default=api.VALIDATE_TOLERANCE,
        help=f"largest acceptable relative error (default {api.VALIDATE_TOLERANCE:.2f}); past it "
        "exit status 1",
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


def run(args: argparse.Namespace) -> int:
    if not args.tolerance > 0:
        raise ConfigError(f"--tolerance must be positive, got {args.tolerance}")
    if args.show_steps < 0:
        raise ConfigError(f"--show-steps must be >= 0, got {args.show_steps}")
    if not Path(args.run).is_file():  # a trace: the measurement file's selections do not apply
        given = [
            flag
            for flag, value in (("--ops", args.ops), ("--sizes", args.sizes))
            if value is not None
        ] + (["--statistic"] if args.statistic != "median" else [])
        if given:
            raise ConfigError(
                f"{', '.join(given)} {'applies' if len(given) == 1 else 'apply'} to the rows "
                f"of a measurement file; {args.run} is a trace run"
            )
    if args.out is not None:
        check_output(args.out, "vgcsim validate", overwrite=args.overwrite)
    ops = [o.strip() for o in args.ops.split(",") if o.strip()] if args.ops else None
    result = api.validate(
        args.run,
        args.cluster,
        args.other,
        compute=args.compute,
        tolerance=args.tolerance,
        allreduce=args.allreduce,
        allgatherv=args.allgatherv,
        simulate=not args.no_simulate,
        show_steps=args.show_steps,
        statistic=args.statistic,
        ops=ops,
        sizes=args.sizes,
    )
    if args.out is not None:  # written before anything is printed: a closed pipe loses nothing
        api.save_validation(result, args.out, overwrite=args.overwrite, command="validate")
    print(result.text)
    if args.out is not None:
        if result.kind == "measurements":
            print(f"wrote {args.out / 'validation_collectives.csv'}")
        else:
            print(f"wrote {args.out / 'validation.csv'}, validation_summary.csv, validation.png")
    verdict = result.verdict
    print(verdict.line())
    return 0 if verdict.passed else 1
