"""Where a sweep's jobs run: a Dask cluster or a process pool, one result table out.

vgcsim.simulator.sweep expands a sweep file's factors into jobs and runs one job
(``run_job``); :func:`run_sweep` runs them all and returns one table, rows in job order
whatever ran them. The schedulers (``SCHEDULERS`` of vgcsim.simulator.sweep, or a Dask
scheduler address):

* ``"local"`` — a Dask distributed ``LocalCluster`` on this machine, ``processes``
  single-threaded worker processes (the default);
* ``"tcp://HOST:PORT"`` (any Dask address with a ``://``) — an existing Dask cluster, e.g.
  one started by dask-jobqueue on a batch system or by the Dask Kubernetes operator; its
  workers need this package installed, the same version (``check_workers`` asks each worker,
  the local cluster's too, before the jobs go out), and the trace directories at the same
  paths;
* ``"processes"`` — a local process pool without Dask (one process: in this process).

A job is a pure function of (trace, cluster variant, world size, simulate options), so every
scheduler gives the same rows. Jobs are handed out largest world size first (a long job
started last would leave the other workers idle at the end); rows still come back in job
order.

The LocalCluster is set up for jobs that are pure Python and hold the GIL throughout
(``LOCAL_DASK_CONFIG``): its workers are forked from the multiprocessing fork server
(vgcsim.forkserver), which imports this module and Dask once (a spawned worker starts a
fresh interpreter and imports both again, and at the end winds that interpreter down for
seconds; a forked one exits at once); the workers' statistical profiler is off (it would take
the GIL from the job every 10 ms), and the event-loop health checks, the system monitor and
the memory monitor wake every 1-2 s instead of every 20, 500 and 100 ms (each wake-up takes
the GIL from the job).

Traces are read where the jobs run: this process only reads each trace's header
(``_check_traces``: a missing run directory, a corrupt header or an unknown schema version
fails at once, before anything starts), and each worker reads each trace once
(``cached_trace`` of vgcsim.simulator.sweep), a pool worker in its first job of that trace, a
LocalCluster worker as it starts (``dask_setup``, before it joins the scheduler). A trace
whose tables are broken fails the first job that reads it; its error is the sweep's, and the
jobs not yet started are cancelled. Reading every trace here as well would put that reading
before the first job and, for a local cluster, hold this process's GIL while the scheduler in
it registers the workers. The fork server starts first (``vgcsim sweep`` starts it before it
imports the simulator). The jobs travel in chunks (``_task_chunks``: a few long tasks first,
single jobs last), so the scheduler, which shares the CPUs with the jobs, handles about a
third as many tasks.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Sequence

import pandas as pd

from vgcsim.core.errors import ConfigError, VgcsimError
from vgcsim.forkserver import POOL_PRELOAD, start_fork_server
from vgcsim.simulator.replay import SimulateConfig
from vgcsim.simulator.sweep import (
    SweepFile,
    SweepJob,
    cached_trace,
    check_scheduler,
    expand_factors,
    run_job,
)

__all__ = [
    "LOCAL_DASK_CONFIG",
    "check_workers",
    "local_cluster",
    "process_pool",
    "run_jobs",
    "run_sweep",
]

# Dask settings of the local cluster (see the module docstring for why).
LOCAL_DASK_CONFIG = {
    "distributed.worker.profile.enabled": False,
    "distributed.admin.tick.interval": "1s",
    "distributed.admin.system-monitor.interval": "2s",
    "distributed.worker.memory.monitor-interval": "1s",
    # Each worker calls this module's dask_setup as it starts.
    "distributed.worker.preload": [__name__],
}
# The module of the jobs (SweepJob, run_job) that a worker unpickles.
JOB_MODULE = SweepJob.__module__
# The Dask setting (a list of run directories) of the traces a local worker reads as it starts.
TRACES_SETTING = "vgcsim.sweep-traces"

log = logging.getLogger(__name__)


def _cost_order(jobs: Sequence[SweepJob]) -> list[int]:
    """Job indices, largest world size first (stable): the longest jobs start first."""
    return sorted(range(len(jobs)), key=lambda i: -jobs[i].world_size)


def run_sweep(
    sweep: SweepFile,
    *,
    processes: int | None = None,
    progress: Callable[[int], None] | None = None,
    scheduler: str | None = None,
    connect_timeout_s: float | None = None,
) -> tuple[pd.DataFrame, list[SweepJob]]:
    """Run every job of ``sweep`` → (table, jobs); rows are in job order for every scheduler.

    ``scheduler`` (default: ``sweep.sweep.scheduler``) is ``"local"`` (a Dask LocalCluster of
    ``processes`` single-threaded processes), ``"processes"`` (a process pool; one process
    runs in this process) or the address of a running Dask scheduler, which is given
    ``connect_timeout_s`` (default: ``sweep.sweep.connect_timeout_s``) to answer before a
    ConfigError says it is unreachable. ``processes``
    (default: ``sweep.sweep.processes``, 0 = one per CPU) does not apply to a remote cluster.
    ``progress(1)`` is called once for each job as its rows arrive. Every trace's header is
    read here first, so a missing run directory or a corrupt header fails before anything
    starts; a trace whose tables are broken fails the first job that reads it, with the
    reader's error, and the jobs not yet started are cancelled.
    """
    scheduler = check_scheduler(scheduler or sweep.sweep.scheduler)
    jobs = expand_factors(sweep.sweep)
    n = processes if processes is not None else (sweep.sweep.processes or os.cpu_count() or 1)
    n = max(1, min(n, len(jobs)))
    _check_traces(jobs)
    if scheduler == "processes":
        frames = _run_processes(jobs, sweep.simulate, n, progress)
        return pd.concat(frames, ignore_index=True), jobs
    if connect_timeout_s is None:
        connect_timeout_s = sweep.sweep.connect_timeout_s
    table = _run_dask(jobs, sweep.simulate, scheduler, n, progress, connect_timeout_s)
    return table, jobs


def _check_traces(jobs: Sequence[SweepJob]) -> None:
    """Read the header of every trace of ``jobs`` (``read_header``: a missing run directory,
    a corrupt header or an unknown schema version raises its one-line error); the tables
    are read by the workers."""
    from vgcsim.traces.reading import read_header

    for path in sorted({j.trace for j in jobs}):
        read_header(path)


def _run_processes(
    jobs: list[SweepJob],
    sim: SimulateConfig,
    n: int,
    progress: Callable[[int], None] | None,
) -> list[pd.DataFrame]:
    frames: list[pd.DataFrame | None] = [None] * len(jobs)
    if n == 1:
        for i, job in enumerate(jobs):
            frames[i] = run_job(job, sim)
            if progress is not None:
                progress(1)
        return frames  # type: ignore[return-value]
    from concurrent.futures import as_completed

    with process_pool(n) as pool:
        futures = {pool.submit(run_job, jobs[i], sim): i for i in _cost_order(jobs)}
        try:
            for fut in as_completed(futures):
                frames[futures[fut]] = fut.result()
                if progress is not None:
                    progress(1)
        except BaseException:
            # A failed job (or ^C) ends the sweep: the pool's exit would otherwise wait
            # for every job still queued.
            pool.shutdown(wait=False, cancel_futures=True)
            raise
    return frames  # type: ignore[return-value]


def process_pool(n: int):
    """A pool of ``n`` worker processes forked from the fork server, which has imported the
    simulator's sweep module once for all of them (a server that already runs in this
    process stays)."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    # Not fork: forking a process that runs threads (pyarrow's, BLAS's) can deadlock the
    # child; forkserver (Python 3.14's default on Linux) starts workers from a clean one.
    context = multiprocessing.get_context("forkserver" if start_fork_server(POOL_PRELOAD) else None)
    return ProcessPoolExecutor(max_workers=n, mp_context=context)


class _HeartbeatAtCloseFilter(logging.Filter):
    """Drops the error a worker logs when a heartbeat of its meets the scheduler closing.

    A worker's heartbeat that is under way while the cluster closes fails with
    CommClosedError, and the worker logs that with a traceback (dask/distributed#7105),
    after every result has arrived; nothing else is dropped."""

    def filter(self, record: logging.LogRecord) -> bool:
        from distributed.comm import CommClosedError

        exc = record.exc_info[1] if record.exc_info else None
        heartbeat = record.getMessage().startswith("Failed to communicate with scheduler")
        return not (heartbeat and isinstance(exc, CommClosedError))


class _CancelledAtCloseFilter(logging.Filter):
    """Drops the warning a worker logs for a task still running when the cluster closes.

    A sweep whose job failed closes its LocalCluster at once, and each worker then logs
    "Async instruction for <Task ...> ended with CancelledError" for the job it was running;
    the sweep's own error says what went wrong. Nothing else is dropped."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        return not (
            message.startswith("Async instruction for ")
            and message.endswith(" ended with CancelledError")
        )


def dask_setup(worker) -> None:
    """Set up a worker of ``local_cluster`` as it starts (Dask calls this: the
    ``distributed.worker.preload`` of ``LOCAL_DASK_CONFIG``): the heartbeat filter above, and
    the traces named by the Dask setting ``vgcsim.sweep-traces`` read into the worker's
    cache before it joins the scheduler, so that the reading overlaps with the cluster's
    start instead of delaying the worker's first job (a trace that fails to read here fails
    again, with its error, in the job that needs it)."""
    import dask

    logging.getLogger("distributed.worker").addFilter(_HeartbeatAtCloseFilter())
    logging.getLogger("distributed.worker.state_machine").addFilter(_CancelledAtCloseFilter())
    for path in dask.config.get(TRACES_SETTING, default=None) or ():
        try:
            cached_trace(path)
        except Exception:  # reported by the job that reads it
            log.debug("trace %s not read ahead", path, exc_info=True)


def local_cluster(n: int, traces: Sequence[str] = ()):
    """A LocalCluster of ``n`` single-threaded worker processes set up for sweep jobs.

    Each worker reads ``traces`` (run directories) as it starts. ``run_sweep(...,
    scheduler="local")`` starts one per sweep; to run several sweeps on one, pass
    ``scheduler=local_cluster(n).scheduler_address`` (and close it at the end)."""
    from vgcsim.preload import paused_gc

    with paused_gc():  # Dask's imports, without collections (vgcsim.preload)
        import dask
        from distributed import LocalCluster

    config = dict(LOCAL_DASK_CONFIG)
    config[TRACES_SETTING] = [str(t) for t in traces]
    if start_fork_server():
        config["distributed.worker.multiprocessing-method"] = "forkserver"
    with dask.config.set(config):
        # One thread per worker: a job is pure Python (SimPy) and holds the GIL throughout.
        return LocalCluster(
            n_workers=n,
            threads_per_worker=1,
            processes=True,
            dashboard_address=None,
            silence_logs=logging.WARNING,
        )


def _dask_client(scheduler: str, n: int, connect_timeout_s: float, jobs: Sequence[SweepJob]):
    """(client, cluster or None): a client of a fresh LocalCluster of ``n`` processes, whose
    workers read the traces of ``jobs`` as they start, or one connected to ``scheduler``."""
    if scheduler == "local":
        start_fork_server()  # a no-op where ``vgcsim sweep`` started it already
        return _local_client(n, sorted({j.trace for j in jobs}))
    from distributed import Client

    try:
        client = Client(scheduler, timeout=connect_timeout_s)
    except (OSError, TimeoutError, ValueError) as exc:
        raise ConfigError(
            f"cannot reach the Dask scheduler at {scheduler} within {connect_timeout_s:g} s "
            f"({type(exc).__name__}): is it running, and is the address right?"
        ) from None
    return client, None


def worker_version() -> str:
    """Run on each worker of a user's Dask cluster (``check_workers``): this package's
    version there. A worker gets this function by importing this module, and it imports the
    module of the jobs it will unpickle (``JOB_MODULE``, which imports the replay) even where
    this module was imported before, so a worker that cannot run a job fails here."""
    import importlib

    from vgcsim.core.provenance import vgcsim_version

    importlib.import_module(JOB_MODULE)

    return vgcsim_version()


def check_workers(client, scheduler: str) -> None:
    """Refuse a Dask cluster whose workers cannot run sweep jobs, in one line naming the
    first such worker: one that cannot import this package, or that has another version of
    it (rows must equal a serial run's). Dask does not fail a task that a worker cannot
    unpickle: the sweep would wait for it forever. Workers that join later are not
    checked; a cluster with no worker yet passes."""
    from vgcsim.core.provenance import vgcsim_version

    ours = vgcsim_version()
    # on_error="return": a worker that fails gives its exception as its value
    versions = client.run(worker_version, on_error="return")
    for worker, version in sorted(versions.items()):
        if isinstance(version, BaseException):  # Dask's Exception holds the error's repr
            raise ConfigError(
                f"the Dask worker {worker} at {scheduler} cannot run sweep jobs: importing "
                f"{__name__} or {JOB_MODULE} there failed ({version}); install this vgcsim "
                f"({ours}) where the workers run"
            )
        if version != ours:
            raise ConfigError(
                f"the Dask worker {worker} at {scheduler} has vgcsim {version}, this process "
                f"{ours}: install the same version on every worker"
            )


def _local_client(n: int, traces: Sequence[str]):
    from distributed import Client

    cluster = local_cluster(n, traces)
    try:
        return Client(cluster), cluster
    except BaseException:
        cluster.close()
        raise


def _close(client, cluster) -> None:
    client.close()
    if cluster is not None:
        cluster.close()


def _task_chunks(order: Sequence[int], n: int) -> list[list[int]]:
    """``order`` cut into consecutive chunks, each ``ceil(left / (4 n))`` jobs long.

    One Dask task per chunk: a few large tasks first (fewer round trips through the
    scheduler, whose work shares the CPUs with the jobs), single jobs at the end (the last
    tasks are short, so the workers finish together)."""
    chunks, start = [], 0
    while start < len(order):
        size = -(-(len(order) - start) // (4 * n))
        chunks.append(list(order[start : start + size]))
        start += size
    return chunks


def run_jobs(jobs: Sequence[SweepJob], sim: SimulateConfig) -> tuple[pd.DataFrame, list[int]]:
    """Several jobs in one call (one Dask task): their rows in one table, and each job's row
    count (the rows of ``jobs[0]`` first). Each job's rows are ``run_job``'s."""
    frames = [run_job(job, sim) for job in jobs]
    return pd.concat(frames, ignore_index=True), [len(f) for f in frames]


def _dask_task(
    jobs: Sequence[SweepJob], sim: SimulateConfig
) -> tuple[pd.DataFrame, list[int]] | VgcsimError:
    """``run_jobs`` as one Dask task: a VgcsimError (a trace the reader refuses, a cluster a
    job cannot build) comes back as the task's value, and the calling process raises it. As
    a failed task it would also be logged by the worker, traceback and all; an error that
    is not the user's (a bug) still fails the task and is logged."""
    try:
        return run_jobs(jobs, sim)
    except VgcsimError as exc:
        return exc


def _run_dask(
    jobs: list[SweepJob],
    sim: SimulateConfig,
    scheduler: str,
    n: int,
    progress: Callable[[int], None] | None,
    connect_timeout_s: float,
) -> pd.DataFrame:
    import numpy as np

    client, cluster = _dask_client(scheduler, n, connect_timeout_s, jobs)
    try:
        check_workers(client, scheduler)  # a refused cluster is closed below
        from distributed import as_completed

        log.info("sweep: %d jobs on Dask scheduler %s", len(jobs), client.scheduler.address)
        threads = sum(client.nthreads().values()) if cluster is None else n
        chunks = _task_chunks(_cost_order(jobs), max(1, threads))
        # pure=False: every task runs even if two were equal; keys stay unique per submission.
        futures = [client.submit(_dask_task, [jobs[i] for i in c], sim, pure=False) for c in chunks]
        index = {fut.key: c for c, fut in zip(chunks, futures, strict=True)}
        parts: list[pd.DataFrame] = []
        owners: list[np.ndarray] = []  # the job index of each row of each part
        for fut in as_completed(futures):
            result = fut.result()
            if isinstance(result, VgcsimError):
                raise result
            part, counts = result
            parts.append(part)
            owners.append(np.repeat(index[fut.key], counts))
            if progress is not None:
                for _ in counts:
                    progress(1)
    finally:
        _close(client, cluster)
    # Rows back into job order (a stable sort keeps each job's own row order).
    table = pd.concat(parts, ignore_index=True)
    rows = np.argsort(np.concatenate(owners), kind="stable")
    return table.take(rows).reset_index(drop=True)
