"""What the benchmarks that run gloo ranks on this machine share: start the script itself as
P ranks (``--rank-main FILE``: rank 0 writes its result there) and read that result, and the
``__main__`` guard that turns a user mistake into one line and exit status 2."""

from __future__ import annotations

import json
import os
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path


def launch_ranks(script: str, argv: list[str] | None, ranks: int) -> dict:
    """Run ``script`` with this command line (less ``--json``) as ``ranks`` local gloo ranks,
    one torch thread each, and return what rank 0 wrote to ``--rank-main``."""
    from vgcsim.traces.training.distributed_launch import launch_local

    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "result.json"
        rest = [a for a in (argv if argv is not None else sys.argv[1:]) if a != "--json"]
        launch_local(
            [os.path.abspath(script), *rest, "--rank-main", str(out)],
            ranks,
            timeout_s=1800,
            threads_per_proc=1,
        )
        return json.loads(out.read_text())


def run_main(main: Callable[[], int]) -> None:
    """``sys.exit(main())``; a :class:`~vgcsim.core.errors.VgcsimError` is one line, exit 2."""
    try:
        sys.exit(main())
    except Exception as exc:  # noqa: BLE001 - user mistakes: one line and exit 2
        from vgcsim.core.errors import VgcsimError

        if isinstance(exc, VgcsimError):
            print(f"error: {exc}", file=sys.stderr)
            sys.exit(2)
        raise
