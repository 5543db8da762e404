"""The writer's lock on a trace run folder, and how any process tells a live recording.

A :class:`vgcsim.traces.io.TraceWriter` holds an exclusive ``flock`` on its run folder from
its first write to its final header. The kernel releases the lock when the holding process
ends, however it ends (SIGKILL included), so another process that can take the lock knows
no recorder is writing the folder: a header still saying ``running`` is then an interrupted
recording (:mod:`vgcsim.traces.health`). Where there is no ``flock`` (not POSIX) no lock is
taken and every folder reads as not being written.
"""

from __future__ import annotations

import os
from pathlib import Path


def lock_folder(folder: Path) -> int | None:
    """An exclusive, non-blocking ``flock`` on ``folder``: its descriptor (close it to
    unlock), or None where there is no flock. Raises BlockingIOError when another open
    holds it."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not POSIX
        return None
    fd = os.open(folder, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        raise
    return fd


def being_written(run_dir: str | Path) -> bool:
    """True while a :class:`TraceWriter` (in any process) holds ``run_dir``'s lock."""
    try:
        fd = lock_folder(Path(run_dir))
    except BlockingIOError:
        return True
    except OSError:
        return False
    if fd is not None:
        os.close(fd)
    return False
