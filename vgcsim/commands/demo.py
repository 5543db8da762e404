"""``vgcsim demo``: the main job end to end — traces, predict, simulate, report.

Parse → :func:`vgcsim.api.demo` → print. The demo reads the traces committed with the
project and installed with the package (:data:`vgcsim.api.DEMO_TRACES`): recorded by
``vgcsim record`` long enough for the variance compressor's density to settle (the commands
are in the README beside them; recording them takes longer than the demo's time budget on
two cores). With ``--set traces=record`` it records them itself with the same settings,
reusing a folder that holds a *complete* trace recorded with the same configuration.
:func:`vgcsim.api.demo` says which folders each stage writes.
"""

from __future__ import annotations

import argparse
import sys
import time

from vgcsim.api import DEMO_TRACES, DEMO_WORLD_SIZES
from vgcsim.commands import add_out_option, add_set_option, add_world_sizes_option

__all__ = ["DEMO_TRACES", "HELP", "add_arguments", "run"]

HELP = (
    "predict and simulate real traces (dense, variance α=2, Strom, QSGD; committed, or "
    "recorded with --set traces=record) on 1GbE, 10GbE and 100 Gb InfiniBand for P up to "
    "256, and write the HTML report"
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_set_option(
        parser,
        "set a demo option: traces (committed|record), steps, workers, batch_size, "
        "eval_every, seed, lr_milestones, methods, clusters, world_sizes, compute "
        "(model|trace), sim_steps, target_accuracy (percent), paper_nets (resnet50, "
        "vgg_like; [] for none), paper_steps",
        dest="overrides",
    )
    add_world_sizes_option(parser, default=DEMO_WORLD_SIZES)
    add_out_option(
        parser,
        "output folder (traces/ when recorded, results/, report/; --overwrite to run it "
        "again into the same folder)",
        default="out/demo",
    )
    parser.add_argument("-q", "--quiet", action="store_true", help="no progress output")


class _Progress:
    """Progress lines on stderr: ``[done/total elapsed s] what``."""

    def __init__(self) -> None:
        self.t0 = time.monotonic()

    def __call__(self, done: int, total: int, msg: str) -> None:
        elapsed = time.monotonic() - self.t0
        print(f"[{done}/{total} {elapsed:5.0f} s] {msg}", file=sys.stderr, flush=True)


def run(args: argparse.Namespace) -> int:
    from vgcsim import api
    from vgcsim.commands import settings
    from vgcsim.commands.report import target_fraction

    overrides = settings(args.overrides)
    if args.world_sizes is not None:
        overrides += settings([f"world_sizes={args.world_sizes}"])
    cfg = api.demo_config(overrides)
    target_fraction(cfg.target_accuracy or None)  # a percentage: one line with a hint
    command = ["vgcsim", "demo", *sys.argv[2:]] if len(sys.argv) > 1 else ["vgcsim", "demo"]
    done = api.demo(
        cfg,
        args.out,
        overwrite=args.overwrite,
        progress=None if args.quiet else _Progress(),
        command=command,
    )
    # the verdicts first (wins lead them), then what they rest on
    for line in done.summary[:4]:
        print(line)
    for note in done.notes[:-1]:
        print(note)
    print(done.report)
    return 0
