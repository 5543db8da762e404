"""Progress of a long command: a bar on a terminal, a line every few seconds otherwise.

:class:`Progress` draws a tqdm bar when stderr is a terminal; elsewhere (a log file, CI) it
writes a line such as ``simulate: 120/400 steps (30 %), 12 s`` at most every ``every_s``
seconds (``VGCSIM_PROGRESS_S``, default 5), and one last line at the end when it wrote any;
with ``quiet`` it writes nothing. Warnings logged while a bar is drawn go above it.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from typing import TextIO

__all__ = ["Progress"]

#: Seconds between two progress lines where stderr is not a terminal.
DEFAULT_EVERY_S = 5.0


def _every_s() -> float:
    try:
        return max(0.0, float(os.environ.get("VGCSIM_PROGRESS_S", DEFAULT_EVERY_S)))
    except ValueError:
        return DEFAULT_EVERY_S


class Progress(contextlib.AbstractContextManager):
    """``with Progress(total, "simulate", "steps", quiet=args.quiet) as bar: ... bar.update(n)``"""

    def __init__(
        self, total: int, desc: str, unit: str, *, quiet: bool = False, stream: TextIO | None = None
    ):
        self.total, self.desc, self.unit = int(total), desc, unit
        self.quiet = quiet
        self.stream = stream if stream is not None else sys.stderr
        self.every_s = _every_s()
        self.done = 0
        self._bar = None
        self._redirect: contextlib.AbstractContextManager | None = None
        self._t0 = self._last = time.monotonic()
        self._lines = 0
        self._said = -1  # `done` at the last line written

    def __enter__(self) -> Progress:
        if not self.quiet and self.stream.isatty():
            from tqdm import tqdm
            from tqdm.contrib.logging import logging_redirect_tqdm

            self._bar = tqdm(total=self.total, desc=self.desc, unit=self.unit, file=self.stream)
            self._redirect = logging_redirect_tqdm()
            self._redirect.__enter__()
        return self

    def update(self, n: int = 1) -> None:
        self.done += n
        if self._bar is not None:
            self._bar.update(n)
        elif not self.quiet:
            now = time.monotonic()
            if now - self._last >= self.every_s:
                self._last = now
                self._line(now)

    def _line(self, now: float) -> None:
        share = f" ({100 * self.done / self.total:.0f} %)" if self.total else ""
        print(
            f"{self.desc}: {self.done}/{self.total} {self.unit}{share}, {now - self._t0:.0f} s",
            file=self.stream,
            flush=True,
        )
        self._lines += 1
        self._said = self.done

    def __exit__(self, *exc) -> None:
        if self._bar is not None:
            self._redirect.__exit__(*exc)
            self._bar.close()
        elif self._lines and exc[0] is None and self._said != self.done:
            self._line(time.monotonic())
