"""Imports with the garbage collector paused, and the fork servers' preloads that use them
(vgcsim.preload), in this process and in real workers forked from a server."""

from __future__ import annotations

import gc
import importlib.util
import multiprocessing
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from vgcsim.forkserver import FORKSERVER_PRELOAD, POOL_PRELOAD
from vgcsim.preload import paused_gc


def test_paused_gc_switches_collections_off_and_back_on():
    assert gc.isenabled()
    with paused_gc():
        assert not gc.isenabled()
    assert gc.isenabled()


def test_paused_gc_restores_the_collector_after_an_error():
    with pytest.raises(ZeroDivisionError), paused_gc():
        1 / 0  # noqa: B018
    assert gc.isenabled()


def test_paused_gc_leaves_a_disabled_collector_disabled():
    gc.disable()
    try:
        with paused_gc():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_warm_imports_then_freezes_with_the_collector_back_on():
    """In a fresh interpreter (a freeze here would last for the whole test session)."""
    program = textwrap.dedent(
        """
        import gc, sys
        assert gc.get_freeze_count() == 0
        from vgcsim.preload import warm
        warm("json", "vgcsim.core.units")
        assert "vgcsim.core.units" in sys.modules and "json" in sys.modules
        assert gc.isenabled()
        print(gc.get_freeze_count())
        """
    )
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, timeout=120)
    assert done.returncode == 0, done.stderr.decode()
    assert int(done.stdout) > 1000  # the objects of the modules imported so far


@pytest.mark.parametrize("preload", [POOL_PRELOAD, FORKSERVER_PRELOAD])
def test_the_preloads_name_modules_that_import(preload):
    """multiprocessing ignores a preload module that fails to import: a wrong name here would
    silently leave every worker importing the simulator itself."""
    modules = [m for m in preload if m != "__main__"]
    assert modules
    for name in modules:
        assert importlib.util.find_spec(name) is not None, name


def _freeze_count() -> int:
    return gc.get_freeze_count()


@pytest.mark.slow
@pytest.mark.skipif(
    "forkserver" not in multiprocessing.get_all_start_methods(), reason="no fork server here"
)
def test_pool_workers_start_with_the_preloaded_objects_frozen():
    """A worker of the sweep's process pool, forked from its fork server, holds the server's
    frozen objects (its own collections skip them)."""
    program = textwrap.dedent(
        """
        import gc, sys
        sys.path.insert(0, sys.argv[1])
        from test_preload import _freeze_count
        from vgcsim.sweep_runners import process_pool
        with process_pool(1) as pool:
            frozen = pool.submit(_freeze_count).result()
        print(frozen)
        """
    )
    here = str(Path(__file__).parent)
    done = subprocess.run([sys.executable, "-c", program, here], capture_output=True, timeout=300)
    assert done.returncode == 0, done.stderr.decode()
    assert int(done.stdout) > 10000
