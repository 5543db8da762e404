"""``vgcsim record``: real training with W emulated data-parallel workers, written as a trace."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from vgcsim.commands import add_out_option, add_set_option

if TYPE_CHECKING:
    from vgcsim.traces.training.record_config import RecordConfig

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


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from vgcsim.core.config import valid_keys
    from vgcsim.traces.training.record_config import RecordConfig

    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = _EPILOG.format(keys="\n  ".join(valid_keys(RecordConfig)))
    add_out_option(parser, "output run directory", default="runs/record")
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


def build_config(args: argparse.Namespace, base: dict | None = None) -> RecordConfig:
    """RecordConfig from --config, --set and the shortcut flags (in that order), on top of
    the defaults or of ``base`` (a trace header's config, for --resume)."""
    from vgcsim.core.config import apply_overrides, config_from_dict, load_toml
    from vgcsim.traces.training.record_config import RecordConfig

    data = dict(base or {})
    if args.config:
        data = _merged(data, load_toml(args.config))
    cfg = config_from_dict(RecordConfig, data) if data else RecordConfig()
    cfg = apply_overrides(cfg, args.set)
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
    return apply_overrides(cfg, [f"{k}={v}" for k, v in flags.items() if v is not None])


def _shown(path: object) -> str:
    """A path printable on any terminal: bytes that are not UTF-8 (a folder named with
    one) are shown as \\xNN escapes instead of failing the print."""
    return str(path).encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


def _merged(base: dict, top: dict) -> dict:
    out = dict(base)
    for k, v in top.items():
        out[k] = _merged(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def _resume(args: argparse.Namespace) -> int:
    from vgcsim.core.config import to_dict
    from vgcsim.core.errors import ConfigError
    from vgcsim.traces.io import find_resume_point
    from vgcsim.traces.training.record import resume

    if args.overwrite or args.backend != "emulated":
        raise ConfigError("--resume continues a run in place; drop --overwrite and --backend")
    point = find_resume_point(args.resume)
    saved = point.header.get("config")
    cfg = build_config(args, saved if isinstance(saved, dict) else {})
    if to_dict(cfg) != saved:
        raise ConfigError(
            f"the options given with --resume change the config recorded in {point.run_dir}; "
            "resume with the trace's own config (give no options) or record a new run"
        )
    path = resume(point.run_dir, cfg, progress=not args.quiet)
    if not args.quiet:
        print(f"resumed and completed trace {_shown(path)}")
    _warn_diverged(path)
    return 0


def _warn_diverged(path) -> None:
    """A run that completed but diverged (its header's ``divergence``) is said so, even -q."""
    from vgcsim.commands import warn
    from vgcsim.traces.io import read_header

    verdict = read_header(path).get("divergence")
    if verdict:
        warn(
            "record",
            [
                f"training diverged ({verdict['reason']}); the trace records it "
                "(try a lower optimizer.lr)"
            ],
        )


def run(args: argparse.Namespace) -> int:
    from vgcsim.traces.training.loop import RecordingInterrupted

    out = args.resume if args.resume is not None else args.out
    try:
        return _resume(args) if args.resume is not None else _record(args)
    except RecordingInterrupted as exc:
        import sys
        from pathlib import Path

        kept = (
            f"; {out} keeps every step recorded (status stopped); continue it with: "
            f"vgcsim record --resume {out}"
            if (Path(out) / "header.json").is_file()
            else ""
        )
        print(f"vgcsim record: {exc}{kept}", file=sys.stderr)
        return 128 + exc.signum


def _record(args: argparse.Namespace) -> int:
    from vgcsim.core.errors import ConfigError
    from vgcsim.traces.training.record import check_config, record, resolve_device

    cfg = build_config(args)
    check_config(cfg)
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
        try:
            from vgcsim.traces.training.distributed import run_distributed_record
        except ImportError:
            raise ConfigError(
                f"backend {args.backend!r} needs vgcsim.traces.training.distributed, which is not available; "
                "use --backend emulated"
            ) from None
        path = run_distributed_record(
            cfg, args.nprocs, out_dir=args.out, backend=args.backend, overwrite=args.overwrite
        )
    else:
        resolve_device(cfg.device)  # cuda asked for but absent: one line, before any work
        path = record(cfg, args.out, progress=not args.quiet, overwrite=args.overwrite)
    if not args.quiet:
        print(f"wrote trace {_shown(path)}")
        print(f"inspect it with: vgcsim trace info {_shown(path)}")
    _warn_diverged(path)
    return 0
