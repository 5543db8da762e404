"""Imports for a fork server and a command: done with the cyclic garbage collector paused.

Importing the simulator and Dask allocates some hundred thousand long-lived objects (modules,
functions, classes), and each allocation burst can trigger a collection that walks every
object tracked so far, none of which is garbage; docs/simulator.md (*Imports without the
garbage collector*) gives the time this saves and the command that measures it.
:func:`paused_gc` switches collections off for such a block and back on after it.

The fork server's preload modules (``sweep_pool``, ``sweep_dask``; ``FORKSERVER_PRELOAD`` of
vgcsim.forkserver) import the sweep's modules (and Dask) this way, then :func:`gc.freeze`
what they loaded, as Python's documentation of ``gc.freeze`` advises for a process that
forks without exec: the workers forked from the server never walk those objects in their
own collections, and leave the pages that hold them shared."""

from __future__ import annotations

import gc
import importlib
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["paused_gc", "warm"]


@contextmanager
def paused_gc() -> Iterator[None]:
    """No cyclic garbage collection inside the block (the collector's state is restored
    after it, also on error); reference counting frees memory as always."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def warm(*modules: str) -> None:
    """Import ``modules`` without collections, then freeze every object tracked so far (a
    fork server's preload: its children start with these objects outside their collections)."""
    with paused_gc():
        for name in modules:
            importlib.import_module(name)
    gc.freeze()
