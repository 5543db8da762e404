"""Sweeps: a cartesian product of factors, each point a simulated replay.

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

    [simulate]                                 # any SimulateConfig key but world_sizes
    max_steps = 50

:func:`expand_factors` is the one place factors become jobs (trace × bandwidth × latency ×
topology × world size); :func:`run_job` runs one of them. Each cluster variant gets a name
listing the factor values it changed, so dense and compressed rows of one variant compare
with each other, and every row carries its factors as columns of their own
(``FACTOR_COLUMNS`` of vgcsim.core.results: ``trace_path``, ``bandwidth_Bps``, ``latency_s``,
``topology_spec``) beside ``world_size`` and ``topology`` (the kind).

A ``graph`` topology prices its own links (the simulator routes over them; the closed-form
models see only ``cluster.link``): a bandwidth or latency factor multiplies every graph
link's bandwidth or latency by the factor's ratio to the base link's, so predict and simulate
move together, and ``topology_spec`` holds the graph as given. A latency factor on a base
link of latency 0 is refused for a graph (no ratio).

A job is a pure function of (trace, cluster variant, world size, simulate options), so
whatever runs the jobs gives the same rows. Running them all (a Dask cluster, a process pool,
their fork server) is the front door's: ``vgcsim.sweep_runners.run_sweep``. ``processes`` and
``scheduler`` are read there; here they are only checked (``SCHEDULERS``, or a Dask scheduler
address, which has a ``://``).

Traces are read where the jobs run: :func:`cached_trace` reads each trace once per process
(a worker runs many jobs of one trace), and reads it again when its files change.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from vgcsim.core.cluster import COMPUTE_MODES, ClusterSpec, load_cluster
from vgcsim.core.config import config_from_dict, load_toml
from vgcsim.core.errors import ConfigError, UnknownNameError
from vgcsim.core.units import format_bandwidth, format_time, parse_bandwidth_Bps, parse_time_s
from vgcsim.core.worldsizes import DEFAULT_WORLD_SIZES, parse_world_sizes
from vgcsim.simulator.replay import SimulateConfig
from vgcsim.simulator.topology import GraphSpec, parse_topology

__all__ = [
    "SCHEDULERS",
    "SweepConfig",
    "SweepFile",
    "SweepJob",
    "cached_trace",
    "check_scheduler",
    "expand_factors",
    "load_sweep",
    "run_job",
    "sweep_summary",
]

#: The local schedulers a sweep file may name (besides a Dask scheduler address).
SCHEDULERS = ("local", "processes")


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
    #: seconds a scheduler address is given to answer before the sweep is refused
    connect_timeout_s: float = 5.0

    def __post_init__(self) -> None:
        check_scheduler(self.scheduler)
        if not 0 < self.connect_timeout_s < math.inf:
            raise ConfigError(
                "sweep.connect_timeout_s must be a finite number of seconds > 0, got "
                f"{self.connect_timeout_s!r}"
            )
        if self.compute not in ("", *COMPUTE_MODES):
            raise UnknownNameError(
                f"unknown sweep.compute {self.compute!r}; valid: {', '.join(COMPUTE_MODES)} "
                "(or leave it out: the cluster's own)"
            )
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
    if isinstance(data.get("simulate"), dict) and "world_sizes" in data["simulate"]:
        raise ConfigError(
            f"sweep file {path}: world sizes are a factor; set sweep.world_sizes, not "
            "simulate.world_sizes"
        )
    sizes = data["sweep"].get("world_sizes")
    if isinstance(sizes, str):
        data["sweep"]["world_sizes"] = list(parse_world_sizes(sizes))
    return config_from_dict(SweepFile, data)


def _variant(
    base: ClusterSpec, bw: Any, lat: Any, topo: dict | None
) -> tuple[ClusterSpec, list, Mapping[str, Any] | None]:
    """The cluster of one factor combination, its factors, and the topology as given where
    the sweep gives one or the cluster's differs from it (a graph whose links the factors
    scaled)."""
    link = base.link
    factors: list[tuple[str, str]] = []
    if bw is not None:
        link = dataclasses.replace(link, bandwidth_Bps=parse_bandwidth_Bps(bw), source="sweep")
        factors.append(("bandwidth", format_bandwidth(link.bandwidth_Bps)))
    if lat is not None:
        link = dataclasses.replace(link, latency_s=parse_time_s(lat), source="sweep")
        factors.append(("latency", format_time(link.latency_s)))
    topology = base.topology
    given = None
    if topo is not None:
        topology = parse_topology(topo)  # read once (a graph's file too), before any job starts
        given = topo
        params = ",".join(f"{k}={v}" for k, v in topo.items() if k != "kind")
        factors.append(("topology", f"{topo['kind']}({params})" if params else str(topo["kind"])))
    if isinstance(topology, GraphSpec) and (bw is not None or lat is not None):
        # a graph's own links carry the traffic the simulator sees (predict prices
        # ``cluster.link``): they move with the factors, by the same ratio as the base link
        if lat is not None and base.link.latency_s == 0 and link.latency_s != 0:
            raise ConfigError(
                "a latency factor scales a graph's link latencies by new / base latency, "
                f"and the base cluster {base.name!r} has latency 0; give the base link a latency"
            )
        lat_ratio = link.latency_s / base.link.latency_s if base.link.latency_s else 1.0
        given = given or topology
        topology = topology.scaled(link.bandwidth_Bps / base.link.bandwidth_Bps, lat_ratio)
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


def cached_trace(path: str):
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


def run_job(job: SweepJob, sim: SimulateConfig) -> pd.DataFrame:
    """One job's rows (what every scheduler runs): the replay's table with the job's factors."""
    import json

    from vgcsim.core.results import finalize_results
    from vgcsim.simulator.replay import simulate_trace

    trace = cached_trace(job.trace)
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


def sweep_summary(jobs: Sequence[SweepJob]) -> dict[str, Any]:
    """The factor values a sweep covered (for the result header)."""
    return {
        "jobs": len(jobs),
        "traces": sorted({j.trace for j in jobs}),
        "clusters": sorted({j.cluster.name for j in jobs}),
        "world_sizes": sorted({j.world_size for j in jobs}),
    }
