"""Sweeps: a cartesian product of factors, each point a simulated replay, one result table out.

A sweep file (TOML) names the factors and the replay options::

    [sweep]
    traces = ["runs/variance", "runs/strom"]   # compressor-trace factor
    cluster = "10GbE"                          # base cluster: preset name or TOML file
    world_sizes = [8, 16, 64]
    bandwidths = ["10Gbps", "100Gbps"]         # optional: replaces the base link's bandwidth
    latencies = ["2us", "20us"]                # optional: replaces the base link's latency
    topologies = [{kind = "star"}, {kind = "leaf_spine", hosts_per_leaf = 8, oversubscription = 4.0}]
    compute = ""                               # optional: "model" | "trace" overrides the cluster's
    workers = 0                                # processes; 0 = one per CPU

    [simulate]                                 # any SimulateConfig key
    max_steps = 50

:func:`expand_factors` is the one place factors become jobs (trace × bandwidth × latency ×
topology × world size); :func:`run_sweep` runs them on a process pool with a progress bar
and returns one finalized result table. Each cluster variant gets a name listing the factor
values it changed, so dense and compressed rows of one variant compare with each other.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import logging
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from simulator.replay import SimulateConfig
from simulator.topology import parse_topology
from traces.cluster import COMPUTE_MODES, ClusterSpec, load_cluster
from traces.config import config_from_dict, load_toml
from traces.errors import ConfigError, unknown_name
from traces.units import format_bandwidth, format_time, parse_bandwidth_Bps, parse_time_s

__all__ = ["SweepConfig", "SweepFile", "SweepJob", "expand_factors", "load_sweep", "run_sweep"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SweepConfig:
    """The factors of a sweep (see the module docstring)."""

    traces: tuple[str, ...] = ()
    cluster: str = "10GbE"
    world_sizes: tuple[int, ...] = (8,)
    bandwidths: tuple[Any, ...] = ()
    latencies: tuple[Any, ...] = ()
    topologies: tuple[dict, ...] = ()
    compute: str = ""
    workers: int = 0

    def __post_init__(self) -> None:
        if self.compute not in ("", *COMPUTE_MODES):
            raise unknown_name("sweep.compute", self.compute, ("", *COMPUTE_MODES))
        if not self.traces:
            raise ConfigError("sweep.traces: give at least one trace run directory")
        if not self.world_sizes or any(p < 1 for p in self.world_sizes):
            raise ConfigError("sweep.world_sizes: give positive integers")
        if self.workers < 0:
            raise ConfigError("sweep.workers must be >= 0 (0 = one per CPU)")


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


def load_sweep(path: str | Path) -> SweepFile:
    """Read a sweep TOML file (unknown keys are a ConfigError listing the valid ones)."""
    data = load_toml(path)
    if "sweep" not in data:
        raise ConfigError(f"sweep file {path} needs a [sweep] table")
    return config_from_dict(SweepFile, data)


def _variant(base: ClusterSpec, bw: Any, lat: Any, topo: dict | None) -> tuple[ClusterSpec, list]:
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
    name = base.name + ("[" + ";".join(f"{k}={v}" for k, v in factors) + "]" if factors else "")
    return dataclasses.replace(base, name=name, link=link, topology=topology), factors


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
    for trace, (cluster, factors), p in itertools.product(cfg.traces, variants, cfg.world_sizes):
        jobs.append(SweepJob(str(trace), cluster, int(p), tuple(factors)))
    return jobs


@functools.lru_cache(maxsize=8)
def _trace(path: str):
    from traces.io import read_trace

    return read_trace(path)


def _run_job(job: SweepJob, sim: SimulateConfig) -> pd.DataFrame:
    from simulator.replay import simulate_trace
    from traces.results import finalize_results

    trace = _trace(job.trace)
    df, _, _ = simulate_trace(trace, job.cluster, [job.world_size], sim)
    return finalize_results(df, batch_size_per_worker=trace.header.get("batch_size_per_worker"))


def run_sweep(
    sweep: SweepFile,
    *,
    workers: int | None = None,
    progress: Callable[[int], None] | None = None,
) -> tuple[pd.DataFrame, list[SweepJob]]:
    """Run every job of ``sweep`` (on a process pool when more than one worker) → (table, jobs)."""
    jobs = expand_factors(sweep.sweep)
    for path in sorted({j.trace for j in jobs}):
        _trace(path)  # a missing or corrupt trace fails here, before the pool starts
    n = workers if workers is not None else (sweep.sweep.workers or os.cpu_count() or 1)
    n = max(1, min(n, len(jobs)))
    frames: list[pd.DataFrame | None] = [None] * len(jobs)
    if n == 1:
        for i, job in enumerate(jobs):
            frames[i] = _run_job(job, sweep.simulate)
            if progress is not None:
                progress(1)
    else:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor, as_completed

        # Not fork: forking a process that runs threads (pyarrow's, BLAS's) can deadlock the
        # child; forkserver (Python 3.14's default on Linux) starts workers from a clean one.
        methods = multiprocessing.get_all_start_methods()
        context = multiprocessing.get_context("forkserver" if "forkserver" in methods else None)
        with ProcessPoolExecutor(max_workers=n, mp_context=context) as pool:
            futures = {pool.submit(_run_job, job, sweep.simulate): i for i, job in enumerate(jobs)}
            for fut in as_completed(futures):
                frames[futures[fut]] = fut.result()
                if progress is not None:
                    progress(1)
    table = pd.concat([f for f in frames if f is not None], ignore_index=True)
    return table, jobs


def sweep_summary(jobs: Sequence[SweepJob]) -> dict[str, Any]:
    """The factor values a sweep covered (for the result header)."""
    return {
        "jobs": len(jobs),
        "traces": sorted({j.trace for j in jobs}),
        "clusters": sorted({j.cluster.name for j in jobs}),
        "world_sizes": sorted({j.world_size for j in jobs}),
    }
