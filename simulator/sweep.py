"""Sweeps: a cartesian product of factors, each point a simulated replay, one result table out.

A sweep file (TOML) names the factors and the replay options::

    [sweep]
    traces = ["runs/variance", "runs/strom"]   # compressor-trace factor
    cluster = "10GbE"                          # base cluster: preset name or TOML file
    world_sizes = [8, 16, 64]                  # or "8:64:x2" (vgcsim.core.worldsizes); default 2:1024:x2
    bandwidths = ["10Gbps", "100Gbps"]         # optional: replaces the base link's bandwidth
    latencies = ["2us", "20us"]                # optional: replaces the base link's latency
                                               # (a graph's links: scaled by the same ratio)
    topologies = [{kind = "star"}, {kind = "leaf_spine", hosts_per_leaf = 8, oversubscription = 4.0}]
    compute = ""                               # optional: "model" | "trace" overrides the cluster's
    processes = 0                              # worker processes; 0 = one per CPU
    scheduler = "local"                        # "local" | "processes" | "tcp://HOST:PORT"

    [simulate]                                 # any SimulateConfig key
    max_steps = 50

:func:`expand_factors` is the one place factors become jobs (trace × bandwidth × latency ×
topology × world size); :func:`run_sweep` runs them and returns one result table, rows in job
order whatever ran them. Each cluster variant gets a name listing the factor values it
changed, so dense and compressed rows of one variant compare with each other, and every row
carries its factors as columns of their own (``FACTOR_COLUMNS`` of vgcsim.core.results:
``trace_path``, ``bandwidth_Bps``, ``latency_s``, ``topology_spec``) beside ``world_size`` and
``topology`` (the kind).

A ``graph`` topology prices its own links (the simulator routes over them; the closed-form
models see only ``cluster.link``): a bandwidth or latency factor multiplies every graph
link's bandwidth or latency by the factor's ratio to the base link's, so predict and simulate
move together, and ``topology_spec`` holds the graph as given. A latency factor on a base
link of latency 0 is refused for a graph (no ratio).

Where the jobs run (``SCHEDULERS``, or a Dask scheduler address):

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
(``LOCAL_DASK_CONFIG``): its workers are forked from the multiprocessing fork server, which
imports this module and Dask once (a spawned worker starts a fresh interpreter and imports
both again, and at the end winds that interpreter down for seconds; a forked one exits at
once); the workers' statistical profiler is off (it would take the GIL from the job every
10 ms), and the event-loop health checks, the system monitor and the memory monitor wake
every 1-2 s instead of every 20, 500 and 100 ms (each wake-up takes the GIL from the job).

Traces are read where the jobs run: this process only reads each trace's header
(``_check_traces``: a missing run directory, a corrupt header or an unknown schema version
fails at once, before anything starts), and each worker reads each trace once, a pool
worker in its first job of that trace, a LocalCluster worker as it starts (``dask_setup``,
before it joins the scheduler). A trace whose tables are broken fails the first job that
reads it; its error is the sweep's, and the jobs not yet started are cancelled. Reading
every trace here as well would put that reading before the first job and, for a local
cluster, hold this process's GIL while the scheduler in it registers the workers. The fork
server starts first (``vgcsim sweep`` starts it before it imports the simulator).
The jobs travel in chunks (``_task_chunks``: a few long tasks first, single jobs last), so
the scheduler, which shares the CPUs with the jobs, handles about a third as many tasks.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import logging
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
from vgcsim.simulator.replay import SimulateConfig
from vgcsim.simulator.topology import parse_topology

from vgcsim.core.cluster import COMPUTE_MODES, ClusterSpec, load_cluster
from vgcsim.core.config import config_from_dict, load_toml
from vgcsim.core.errors import ConfigError, VgcsimError, unknown_name
from vgcsim.core.forkserver import POOL_PRELOAD, start_fork_server
from vgcsim.core.units import format_bandwidth, format_time, parse_bandwidth_Bps, parse_time_s
from vgcsim.core.worldsizes import DEFAULT_WORLD_SIZES, parse_world_sizes

__all__ = [
    "SCHEDULERS",
    "SweepConfig",
    "SweepFile",
    "SweepJob",
    "expand_factors",
    "load_sweep",
    "local_cluster",
    "run_job",
    "run_jobs",
    "run_sweep",
]

SCHEDULERS = ("local", "processes")
# Seconds to wait for a remote Dask scheduler before calling it unreachable.
CONNECT_TIMEOUT_S = 5.0
# Dask settings of the local cluster (see the module docstring for why).
LOCAL_DASK_CONFIG = {
    "distributed.worker.profile.enabled": False,
    "distributed.admin.tick.interval": "1s",
    "distributed.admin.system-monitor.interval": "2s",
    "distributed.worker.memory.monitor-interval": "1s",
    # Each worker calls this module's dask_setup as it starts.
    "distributed.worker.preload": ["vgcsim.simulator.sweep"],
}
# The Dask setting (a list of run directories) of the traces a local worker reads as it starts.
TRACES_SETTING = "vgcsim.sweep-traces"

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SweepConfig:
    """The factors of a sweep (see the module docstring)."""

    traces: tuple[str, ...] = ()
    cluster: str = "10GbE"
    world_sizes: tuple[int, ...] = parse_world_sizes(DEFAULT_WORLD_SIZES)
    bandwidths: tuple[Any, ...] = ()
    latencies: tuple[Any, ...] = ()
    topologies: tuple[dict, ...] = ()
    compute: str = ""
    processes: int = 0
    scheduler: str = "local"

    def __post_init__(self) -> None:
        check_scheduler(self.scheduler)
        if self.compute not in ("", *COMPUTE_MODES):
            raise unknown_name("sweep.compute", self.compute, ("", *COMPUTE_MODES))
        if not self.traces:
            raise ConfigError("sweep.traces: give at least one trace run directory")
        parse_world_sizes(",".join(str(p) for p in self.world_sizes))  # 1..MAX_WORLD_SIZE
        if self.processes < 0:
            raise ConfigError("sweep.processes must be >= 0 (0 = one per CPU)")


@dataclass(frozen=True)
class SweepFile:
    """A whole sweep file: the factors and the replay options."""

    sweep: SweepConfig
    simulate: SimulateConfig = field(default_factory=SimulateConfig)


@dataclass(frozen=True)
class SweepJob:
    """One point of the sweep: a trace replayed on one cluster variant at one world size."""

    trace: str
    cluster: ClusterSpec
    world_size: int
    factors: tuple[tuple[str, str], ...]
    #: the topology as the sweep gives it (a graph before its links are scaled), for the
    #: ``topology_spec`` column; None: the cluster's
    topology_spec: Mapping[str, Any] | None = None


def check_scheduler(scheduler: str) -> str:
    """``scheduler`` if it names a known scheduler or looks like a Dask address, else ConfigError."""
    if scheduler in SCHEDULERS or "://" in scheduler:
        return scheduler
    raise ConfigError(
        f"sweep scheduler {scheduler!r}: use one of {', '.join(SCHEDULERS)} "
        "or a Dask scheduler address such as tcp://HOST:8786"
    )


def load_sweep(path: str | Path) -> SweepFile:
    """Read a sweep TOML file (unknown keys are a ConfigError listing the valid ones).

    ``world_sizes`` is a list of integers or a string in the ``--world-sizes`` syntax."""
    data = load_toml(path)
    if not isinstance(data.get("sweep"), dict):
        raise ConfigError(f"sweep file {path} needs a [sweep] table")
    sizes = data["sweep"].get("world_sizes")
    if isinstance(sizes, str):
        data["sweep"]["world_sizes"] = list(parse_world_sizes(sizes))
    return config_from_dict(SweepFile, data)


def _scaled_graph(topology: Mapping[str, Any], bw_ratio: float, lat_ratio: float) -> dict:
    """A graph topology with every link's payload bandwidth multiplied by ``bw_ratio`` and
    its latency by ``lat_ratio`` (inline links, efficiency 1: the payload rate as given)."""
    spec = parse_topology(topology)
    links = [
        {"a": a, "b": b, "bandwidth_Bps": bw * bw_ratio, "latency_s": lat * lat_ratio}
        for a, b, bw, lat in spec.links
    ]
    return {"kind": "graph", "hosts": list(spec.hosts), "links": links}


def _variant(
    base: ClusterSpec, bw: Any, lat: Any, topo: dict | None
) -> tuple[ClusterSpec, list, Mapping[str, Any] | None]:
    """The cluster of one factor combination, its factors, and the topology as given where
    the cluster's differs from it (a graph whose links the factors scaled)."""
    link = base.link
    factors: list[tuple[str, str]] = []
    if bw is not None:
        link = dataclasses.replace(link, bandwidth_Bps=parse_bandwidth_Bps(bw), source="sweep")
        factors.append(("bandwidth", format_bandwidth(link.bandwidth_Bps)))
    if lat is not None:
        link = dataclasses.replace(link, latency_s=parse_time_s(lat), source="sweep")
        factors.append(("latency", format_time(link.latency_s)))
    topology = base.topology
    if topo is not None:
        parse_topology(topo)  # fail before any job starts
        topology = dict(topo)
        params = ",".join(f"{k}={v}" for k, v in topo.items() if k != "kind")
        factors.append(("topology", f"{topo['kind']}({params})" if params else str(topo["kind"])))
    given = None
    if topology and topology.get("kind") == "graph" and (bw is not None or lat is not None):
        # a graph's own links carry the traffic the simulator sees (predict prices
        # ``cluster.link``): they move with the factors, by the same ratio as the base link
        if lat is not None and base.link.latency_s == 0 and link.latency_s != 0:
            raise ConfigError(
                "a latency factor scales a graph's link latencies by new / base latency, "
                f"and the base cluster {base.name!r} has latency 0; give the base link a latency"
            )
        lat_ratio = link.latency_s / base.link.latency_s if base.link.latency_s else 1.0
        given = topology
        topology = _scaled_graph(topology, link.bandwidth_Bps / base.link.bandwidth_Bps, lat_ratio)
    name = base.name + ("[" + ";".join(f"{k}={v}" for k, v in factors) + "]" if factors else "")
    return dataclasses.replace(base, name=name, link=link, topology=topology), factors, given


def expand_factors(cfg: SweepConfig) -> list[SweepJob]:
    """Every combination of the factors, in a stable order (trace-major, world size last)."""
    base = load_cluster(cfg.cluster)
    if cfg.compute and cfg.compute != base.compute:
        base = dataclasses.replace(base, compute=cfg.compute)
    bws = list(cfg.bandwidths) or [None]
    lats = list(cfg.latencies) or [None]
    topos: list[dict | None] = list(cfg.topologies) or [None]
    variants = [
        _variant(base, bw, lat, topo) for bw, lat, topo in itertools.product(bws, lats, topos)
    ]
    jobs = []
    for trace, (cluster, factors, given), p in itertools.product(
        cfg.traces, variants, cfg.world_sizes
    ):
        jobs.append(SweepJob(str(trace), cluster, int(p), tuple(factors), given))
    return jobs


def _trace(path: str):
    """The trace at ``path``, read once per process while its files stay as they are.

    A worker of a long-lived Dask cluster runs many sweeps: the cache key carries the
    modification times and sizes of the run directory's parts, so a trace recorded again
    at the same path is read again."""
    root = Path(path)
    if root.name == "header.json":
        root = root.parent
    stamp = []
    for part in (root, root / "header.json", root / "steps", root / "payloads"):
        try:
            st = part.stat()
        except OSError:  # read_trace names what is missing
            stamp.append(None)
        else:
            stamp.append((st.st_mtime_ns, st.st_size))
    return _read_trace(path, tuple(stamp))


@functools.lru_cache(maxsize=8)
def _read_trace(path: str, stamp: tuple):
    from vgcsim.traces.io import read_trace

    return read_trace(path)


def _cost_order(jobs: Sequence[SweepJob]) -> list[int]:
    """Job indices, largest world size first (stable): the longest jobs start first."""
    return sorted(range(len(jobs)), key=lambda i: -jobs[i].world_size)


def run_job(job: SweepJob, sim: SimulateConfig) -> pd.DataFrame:
    """One job's rows (what every scheduler runs): the replay's table with the job's factors."""
    import json

    from vgcsim.simulator.replay import simulate_trace

    from vgcsim.core.results import finalize_results

    trace = _trace(job.trace)
    df, _, _ = simulate_trace(trace, job.cluster, [job.world_size], sim)
    df = finalize_results(df, batch_size_per_worker=trace.header.get("batch_size_per_worker"))
    return df.assign(
        trace_path=job.trace,
        bandwidth_Bps=float(job.cluster.link.bandwidth_Bps),
        latency_s=float(job.cluster.link.latency_s),
        topology_spec=json.dumps(
            dict(job.topology_spec or job.cluster.topology or {}), sort_keys=True, default=str
        ),
    )


def run_sweep(
    sweep: SweepFile,
    *,
    processes: int | None = None,
    progress: Callable[[int], None] | None = None,
    scheduler: str | None = None,
    connect_timeout_s: float = CONNECT_TIMEOUT_S,
) -> tuple[pd.DataFrame, list[SweepJob]]:
    """Run every job of ``sweep`` → (table, jobs); rows are in job order for every scheduler.

    ``scheduler`` (default: ``sweep.sweep.scheduler``) is ``"local"`` (a Dask LocalCluster of
    ``processes`` single-threaded processes), ``"processes"`` (a process pool; one process
    runs in this process) or the address of a running Dask scheduler, which is given
    ``connect_timeout_s`` to answer before a ConfigError says it is unreachable. ``processes``
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
    """A pool of ``n`` worker processes forked from the fork server, which has imported this
    module once for all of them (a server that already runs in this process stays)."""
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
            _trace(path)
        except Exception:  # reported by the job that reads it
            log.debug("trace %s not read ahead", path, exc_info=True)


def local_cluster(n: int, traces: Sequence[str] = ()):
    """A LocalCluster of ``n`` single-threaded worker processes set up for sweep jobs.

    Each worker reads ``traces`` (run directories) as it starts. ``run_sweep(...,
    scheduler="local")`` starts one per sweep; to run several sweeps on one, pass
    ``scheduler=local_cluster(n).scheduler_address`` (and close it at the end)."""
    from vgcsim.core.preload import paused_gc

    with paused_gc():  # Dask's imports, without collections (vgcsim.core.preload)
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
    version there. A worker gets this function by importing this module, which imports the
    replay, so a worker that cannot run a job fails here."""
    from vgcsim.core.provenance import vgcsim_version

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
                f"{__name__} there failed ({version}); install this vgcsim "
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


def sweep_summary(jobs: Sequence[SweepJob]) -> dict[str, Any]:
    """The factor values a sweep covered (for the result header)."""
    return {
        "jobs": len(jobs),
        "traces": sorted({j.trace for j in jobs}),
        "clusters": sorted({j.cluster.name for j in jobs}),
        "world_sizes": sorted({j.world_size for j in jobs}),
    }
