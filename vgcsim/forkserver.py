"""The fork server that local sweep workers (a process pool's, or a Dask LocalCluster's) are
forked from, preloaded with the sweep's modules (and Dask, for a LocalCluster).

This module imports nothing heavy, so that ``vgcsim sweep`` can start the server before it
imports the simulator itself: the server's imports then overlap with the command's own, and
each worker starts with them done (one import in the server instead of one per worker)."""

from __future__ import annotations

import os
import sys
import threading

#: What the fork server imports before it forks the workers (``__main__``: the calling
#: script, so that functions it defines can be sent to the workers; then the sweep runners and
#: Dask, without garbage collections and frozen after: vgcsim.preload).
FORKSERVER_PRELOAD = ("__main__", "vgcsim.preload.sweep_dask")
#: The same for a process pool's workers, which do not use Dask.
POOL_PRELOAD = ("__main__", "vgcsim.preload.sweep_pool")


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


def _forget_inherited_fork_server() -> None:
    """In a process just forked from one that runs a fork server: forget that server.

    multiprocessing checks that its fork server is alive by waiting for it as a child
    process, which it is not of a forked child: there ``ensure_running`` raised
    ChildProcessError, so a process forked after a sweep could not run a sweep. The child
    drops its copy of the parent's handle (never the parent's socket file) and a lock another
    thread may have held at the fork; it starts a server of its own when it needs one."""
    module = sys.modules.get("multiprocessing.forkserver")
    server = getattr(module, "_forkserver", None)
    if getattr(server, "_forkserver_pid", None) is None:
        return
    alive_fd = getattr(server, "_forkserver_alive_fd", None)
    server._forkserver_pid = None
    server._forkserver_address = None
    server._forkserver_alive_fd = None
    server._lock = threading.Lock()
    if alive_fd is not None:
        os.close(alive_fd)  # the child's copy: the parent's keeps its server running


def _renew_dask_offload_thread() -> None:
    """In a process just forked from one that used Dask: give Dask a new offload thread.

    ``distributed`` runs some of a client's and a cluster's work (serialization, closing
    comms) on a module-level one-thread pool. A forked child gets that pool without its
    thread, which the pool still counts as running, so the work queues for ever: a sweep on
    a LocalCluster in a child forked after a sweep (a test session forked by a mutation
    tester, a user's fork of a notebook kernel) waited without end. The child gets a new pool
    of the same kind; the parent's is untouched."""
    utils = sys.modules.get("distributed.utils")
    executor = getattr(utils, "_offload_executor", None)
    if executor is None:
        return
    from concurrent.futures import ThreadPoolExecutor

    if isinstance(executor, ThreadPoolExecutor):
        utils._offload_executor = ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="Dask-Offload"
        )


os.register_at_fork(after_in_child=_forget_inherited_fork_server)
os.register_at_fork(after_in_child=_renew_dask_offload_thread)
