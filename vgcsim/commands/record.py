"""``vgcsim record``: real training with W emulated data-parallel workers, written as a trace."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from vgcsim.commands import add_out_option, add_set_option

HELP = "record a compression trace from real training with W emulated workers"

_EPILOG = """\
Every RecordConfig key can be given in a TOML file (--config) and/or with --set KEY=VALUE,
applied in that order, then the shortcut flags. Compressor hyperparameters go under
compressor.<hyperparameter>, e.g. --set compressor.alpha=1.5. Keys:
  {keys}
Example:
  vgcsim record --compressor variance --set compressor.alpha=1.5 --workers 8 --steps 500 -o runs/x
  vgcsim record --model vgg_like --set model.width=0.25 --compressor dense --device auto -o runs/vgg
Step columns rank_compute_s (one worker's forward + backward at its own batch, every
rank_time_every steps) and optimizer_s (one optimizer step) time what a single rank runs.
SIGINT, SIGTERM and SIGHUP stop a recording cleanly (status stopped, exit 130/143/129);
  vgcsim record --resume runs/x
continues a stopped or killed recording from its last complete chunk, with the config in
its header (options given with it must agree with that config).
"""


#: Where a recording goes without -o.
DEFAULT_OUT = "runs/record"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from vgcsim import api

    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = _EPILOG.format(keys="\n  ".join(api.record_config_keys()))
    add_out_option(parser, "output run directory", default=DEFAULT_OUT)
    parser.add_argument("--config", help="TOML file with RecordConfig keys")
    add_set_option(parser)
    parser.add_argument(
        "--compressor", help="compressor name (dense, variance, strom, qsgd, hybrid, topk)"
    )
    parser.add_argument("--workers", type=int, help="emulated data-parallel workers W")
    parser.add_argument("--steps", type=int, help="training steps")
    parser.add_argument("--dataset", help="dataset name (digits, mnist, cifar10, synthetic)")
    parser.add_argument("--model", help="network name (mlp, small_cnn, vgg_like, resnet20)")
    parser.add_argument("--optimizer", help="optimizer name (adam, momentum_sgd)")
    parser.add_argument("--seed", type=int, help="random seed")
    parser.add_argument(
        "--device",
        metavar="{cpu,cuda,auto}",
        help="where emulated workers run forward, backward and the variance estimate: cpu "
        "(default), cuda, or auto (cuda when torch sees a GPU); compression stays on the CPU. "
        "A torch.distributed backend decides its own device (gloo: cpu, nccl: cuda)",
    )
    parser.add_argument("-q", "--quiet", action="store_true", help="no progress bar (for CI)")
    parser.add_argument(
        "--backend",
        default="emulated",
        help="emulated (one process, default) or a torch.distributed backend (gloo, nccl)",
    )
    parser.add_argument(
        "--nprocs", type=int, default=2, help="processes for a torch.distributed backend"
    )
    parser.add_argument(
        "--resume",
        metavar="RUN",
        help="continue the interrupted recording in RUN (killed, stopped by a signal or a full "
        "disk) from its last complete chunk; the trace equals an uninterrupted run's",
    )


def build_config(args: argparse.Namespace, base: dict | None = None, *, check: bool = False) -> Any:
    """The RecordConfig of --config, --set and the shortcut flags (in that order), on top of
    the defaults or of ``base`` (a trace header's config, for --resume); ``check``: also
    refuse unknown names up front (:func:`vgcsim.api.record_config`)."""
    from vgcsim import api

    flags = {
        "compressor.name": args.compressor,
        "workers": args.workers,
        "steps": args.steps,
        "data.name": args.dataset,
        "model.name": args.model,
        "optimizer.name": args.optimizer,
        "seed": args.seed,
        "device": args.device,
    }
    return api.record_config(
        args.config or None,
        base=base,
        overrides=[*args.set, *(f"{k}={v}" for k, v in flags.items() if v is not None)],
        check=check,
    )


def _shown(path: object) -> str:
    """A path printable on any terminal: bytes that are not UTF-8 (a folder named with
    one) are shown as \\xNN escapes instead of failing the print."""
    return str(path).encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


def _resume(args: argparse.Namespace) -> int:
    from vgcsim import api
    from vgcsim.core.config import to_dict
    from vgcsim.core.errors import ConfigError

    moved = args.out is not None and Path(args.out) != Path(DEFAULT_OUT)
    if args.overwrite or args.backend != "emulated" or moved:
        raise ConfigError("--resume continues a run in place; drop -o, --overwrite and --backend")
    point = api.resume_point(args.resume)
    saved = point.header.get("config")
    cfg = build_config(args, saved if isinstance(saved, dict) else {})
    if to_dict(cfg) != saved:
        raise ConfigError(
            f"the options given with --resume change the config recorded in {point.run_dir}; "
            "resume with the trace's own config (give no options) or record a new run"
        )
    path = api.resume_record(point.run_dir, cfg, progress=not args.quiet)
    if not args.quiet:
        print(f"resumed and completed trace {_shown(path)}")
    _warn_diverged(path)
    return 0


def _warn_diverged(path) -> None:
    """A run that completed but diverged (its header's ``divergence``) is said so, even -q."""
    from vgcsim import api
    from vgcsim.commands import warn

    verdict = api.trace_header(path).get("divergence")
    if verdict:
        warn(
            "record",
            [
                f"training diverged ({verdict['reason']}); the trace records it "
                "(try a lower optimizer.lr)"
            ],
        )


def run(args: argparse.Namespace) -> int:
    out = args.resume if args.resume is not None else args.out
    try:
        return _resume(args) if args.resume is not None else _record(args)
    except KeyboardInterrupt as exc:
        # a stopping signal during the recording is a KeyboardInterrupt with its signum
        # (RecordingInterrupted, see vgcsim.api.record); a plain one goes to the CLI's handler
        signum = getattr(exc, "signum", None)
        if signum is None:
            raise
        import sys
        from pathlib import Path

        kept = (
            f"; {out} keeps every step recorded (status stopped); continue it with: "
            f"vgcsim record --resume {out}"
            if (Path(out) / "header.json").is_file()
            else ""
        )
        print(f"vgcsim record: {exc}{kept}", file=sys.stderr)
        return 128 + signum


def _record(args: argparse.Namespace) -> int:
    from vgcsim import api
    from vgcsim.core.errors import ConfigError

    cfg = build_config(args, check=True)
    if args.backend != "emulated":
        if args.workers is not None and args.workers != args.nprocs:
            raise ConfigError(
                f"--workers {args.workers} and --nprocs {args.nprocs} disagree: with a "
                "torch.distributed backend each process is one worker; give --nprocs only"
            )
        backend_device = "cuda" if args.backend == "nccl" else "cpu"
        if cfg.device not in ("auto", backend_device) and (
            args.device is not None or cfg.device != "cpu"
        ):
            raise ConfigError(
                f"--device {cfg.device} does not apply to backend {args.backend!r}, whose ranks "
                f"run on {backend_device}; drop --device or use --backend emulated"
            )
    path = api.record(
        cfg,
        args.out,
        backend=args.backend,
        nprocs=args.nprocs,
        progress=not args.quiet,
        overwrite=args.overwrite,
    )
    if not args.quiet:
        print(f"wrote trace {_shown(path)}")
        print(f"inspect it with: vgcsim trace info {_shown(path)}")
    _warn_diverged(path)
    return 0
