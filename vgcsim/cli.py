"""The ``vgcsim`` command: a subcommand dispatcher.

Each subcommand lives in ``vgcsim.commands.<module>`` and exposes ``HELP`` (one line),
``add_arguments(parser)`` and ``run(args) -> int``. Command modules keep heavy imports
(torch, simpy, matplotlib) inside ``run`` so that ``vgcsim --help`` and the torch-free
stages start fast. User mistakes raise :class:`vgcsim.core.errors.VgcsimError`: we print the
message and exit 2. Anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

import argparse
import errno
import importlib
import logging
import os
import sys
from collections.abc import Sequence
from typing import NoReturn

from vgcsim.api import TRAIN_EXTRA_HINT, TRAIN_MODULES
from vgcsim.core.errors import VgcsimError

# name -> module under vgcsim.commands. Order is the order shown in --help.
SUBCOMMANDS: dict[str, str] = {
    "demo": "demo",
    "record": "record",
    "trace": "trace",
    "predict": "predict",
    "advise": "advise",
    "scenario": "scenario",
    "clusters": "clusters",
    "simulate": "simulate",
    "collective": "collective",
    "sweep": "sweep",
    "report": "report",
    "calibrate": "calibrate",
    "validate": "validate",
}


#: errno values of a full disk or an exhausted quota: one line and exit 2, never a traceback.
_DISK_FULL = frozenset(e for e in (errno.ENOSPC, getattr(errno, "EDQUOT", None)) if e is not None)


class _Parser(argparse.ArgumentParser):
    """argparse exits 2 on usage errors already; keep its message short and clear.

    No abbreviations: a prefix such as ``--device`` must not quietly mean ``--device-preset``
    (options are renamed when their meaning differs between commands)."""

    def __init__(self, *args, **kwargs) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        """One line on stderr and exit 2 (argparse would print the usage block first). A
        value that starts with ``-`` reads as an option to argparse, which then says the
        option got no value: the line says how to give one."""
        if message.endswith("expected one argument"):
            message += " (a value that starts with '-' is given as --OPTION=VALUE)"
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def _load(module: str):
    try:
        return importlib.import_module(f"vgcsim.commands.{module}")
    except ModuleNotFoundError as exc:
        if exc.name == f"vgcsim.commands.{module}":
            return None
        raise


def build_parser() -> argparse.ArgumentParser:
    from vgcsim import __version__

    parser = _Parser(
        prog="vgcsim",
        description=(
            "Simulate and model gradient-compressed distributed training: record real "
            "compression traces, predict and simulate step times of dense allreduce vs "
            "sparse allgatherv on configurable clusters, and report."
        ),
    )
    parser.add_argument("--version", action="version", version=f"vgcsim {__version__}")
    parser.add_argument("-v", "--verbose", action="count", default=0, help="more logging")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, module_name in SUBCOMMANDS.items():
        module = _load(module_name)
        if module is None:
            continue
        p = sub.add_parser(name, help=module.HELP, description=module.HELP)
        module.add_arguments(p)
        p.set_defaults(_run=module.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    level = logging.WARNING - 10 * min(args.verbose, 2)
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s")
    # Libraries that set their own loggers' levels (Dask's scheduler logs at INFO) still go
    # through this handler: it shows only what -v asked for.
    for handler in logging.getLogger().handlers:
        handler.setLevel(level)
    if not getattr(args, "_run", None):
        parser.print_help()
        return 2
    # the command as typed, for messages: "vgcsim trace validate: error: ..."
    name = " ".join(filter(None, (args.command, getattr(args, "trace_command", None))))
    try:
        code = int(args._run(args) or 0)
        sys.stdout.flush()  # a closed pipe shows here, inside the handler, not at exit
        return code
    except VgcsimError as exc:
        print(f"vgcsim {name}: error: {exc}", file=sys.stderr)
        return 2
    except ModuleNotFoundError as exc:
        top = (exc.name or "").split(".")[0]
        if top not in TRAIN_MODULES:
            raise
        print(
            f"vgcsim {name}: error: needs the training extra ({top} is not installed): "
            f"{TRAIN_EXTRA_HINT}",
            file=sys.stderr,
        )
        return 2
    except KeyboardInterrupt:
        print(f"vgcsim {name}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # The reader went away (``vgcsim ... | head``): end quietly. Point stdout at devnull
        # so that the interpreter's final flush does not raise again.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 141
    except OSError as exc:
        if exc.errno not in _DISK_FULL:
            raise
        # Every output is written atomically: the files under their final names are complete.
        where = f" writing {exc.filename}" if exc.filename else ""
        print(
            f"vgcsim {name}: error: {os.strerror(exc.errno)}{where}; free space and run it again",
            file=sys.stderr,
        )
        return 2


def entry() -> None:
    """The ``vgcsim`` program (console script and ``python -m vgcsim``): ``main()``, then exit
    without tearing the interpreter down.

    Everything an exit owes the user still happens, in Python's own order: idle thread pools
    are stopped and non-daemon threads waited for, the ``atexit`` handlers run
    (multiprocessing's, Dask's, temporary files' and logging's among them) and stdout and
    stderr are flushed. What is skipped is the interpreter's final garbage collection and
    module teardown, which frees memory the operating system takes back anyway and, once
    pandas, pyarrow and Dask are loaded, costs a noticeable share of a short command's wall
    time (docs/simulator.md, *Exit without teardown*, gives the figure and its command). Output files are closed before ``main``
    returns. ``main(argv)`` itself returns as before, for notebooks and tests.
    """
    code = main()
    _exit_now(code)


def _exit_now(code: int) -> None:
    """End the process with ``code`` the way the interpreter's exit would, minus its teardown.

    CPython's exit (``Py_FinalizeEx`` in Python/pylifecycle.c) first calls
    ``threading._shutdown`` (the threading atexit callbacks, which stop idle thread-pool
    workers, then a join of every non-daemon thread) and then the ``atexit`` handlers; the
    same two calls run here. Where either is missing (another Python), the exit is Python's
    own, teardown included."""
    import atexit
    import threading

    shutdown = getattr(threading, "_shutdown", None)
    run_exitfuncs = getattr(atexit, "_run_exitfuncs", None)
    if shutdown is None or run_exitfuncs is None:
        raise SystemExit(code)
    shutdown()
    run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a reader gone away, a stream closed
            code = code or 120  # what Python exits with when the final flush fails
    os._exit(code)


if __name__ == "__main__":
    entry()
