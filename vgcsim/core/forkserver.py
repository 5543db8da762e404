"""The fork server that local sweep workers (a process pool's, or a Dask LocalCluster's) are
forked from, preloaded with the simulator's sweep module (and Dask, for a LocalCluster).

It lives here, below the simulator, so that ``vgcsim sweep`` can start it before it imports
the simulator itself: the server's imports then overlap with the command's own, and each
worker starts with them done (one import in the server instead of one per worker)."""

from __future__ import annotations

#: What the fork server imports before it forks the workers (``__main__``: the calling
#: script, so that functions it defines can be sent to the workers).
FORKSERVER_PRELOAD = ("__main__", "vgcsim.simulator.sweep", "distributed")
#: The same for a process pool's workers, which do not use Dask.
POOL_PRELOAD = ("__main__", "vgcsim.simulator.sweep")


def start_fork_server(preload: tuple[str, ...] = FORKSERVER_PRELOAD) -> bool:
    """Start the fork server (preloading ``preload``); False where there is none.

    The fork server is one per process: where one already runs (a process pool of this
    process started it), it stays, and workers forked from it import what it lacks."""
    import multiprocessing

    if "forkserver" not in multiprocessing.get_all_start_methods():
        return False
    import multiprocessing.forkserver

    multiprocessing.set_forkserver_preload(list(preload))
    multiprocessing.forkserver.ensure_running()
    return True
