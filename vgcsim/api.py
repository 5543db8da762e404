"""A small notebook API over the four stages: record → predict / simulate → report.

Each function is a thin, documented wrapper around the stage that does the work, with lazy
imports so that ``import vgcsim.api`` stays light (torch is only loaded by :func:`record`)::

    from vgcsim import api
    run = api.record(out_dir="runs/v2", overrides=["compressor.name=variance"])
    pred = api.predict(run, "10GbE", world_sizes=[2, 8, 64])
    sim = api.simulate(run, "10GbE", world_sizes=[2, 8, 64])
    html = api.report([api.save(pred, "results/pred", run, "10GbE")], [run], "out/report")

Frames returned by :func:`predict` and :func:`simulate` have exactly
``vgcsim.core.results.RESULT_COLUMNS`` with the relative columns (speedup, efficiency) filled.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd

    from vgcsim.core.cluster import ClusterSpec
    from vgcsim.simulator.call import CollectiveRun
    from vgcsim.traces.io import Trace

__all__ = [
    "load_trace",
    "load_cluster",
    "record",
    "predict",
    "simulate",
    "save",
    "report",
    "collective",
    "advise",
]


def load_trace(trace: str | Path | Trace) -> Trace:
    """Read a trace run directory (a :class:`vgcsim.traces.io.Trace` passes through)."""
    from vgcsim.traces.io import Trace, read_trace

    return trace if isinstance(trace, Trace) else read_trace(trace)


def load_cluster(cluster: str | Path | ClusterSpec) -> ClusterSpec:
    """A cluster preset name (``vgcsim clusters`` lists them) or a cluster TOML file."""
    from vgcsim.core.cluster import ClusterSpec, load_cluster

    return cluster if isinstance(cluster, ClusterSpec) else load_cluster(str(cluster))


def record(
    config: Any = None,
    out_dir: str | Path = "runs/trace",
    *,
    overrides: Sequence[str] = (),
    progress: bool = False,
    overwrite: bool = False,
) -> Path:
    """Record a trace from real training with W emulated workers; return its directory.

    ``config`` is a :class:`vgcsim.traces.training.record_config.RecordConfig` (default: the
    default workload); ``overrides`` are ``key=value`` strings as on the command line.
    """
    from vgcsim.core.config import apply_overrides
    from vgcsim.traces.training.record import RecordConfig
    from vgcsim.traces.training.record import record as _record

    cfg = config if config is not None else RecordConfig()
    if overrides:
        cfg = apply_overrides(cfg, list(overrides))
    return _record(cfg, out_dir, progress=progress, overwrite=overwrite)


def _world_sizes(world_sizes: Sequence[int] | str | None) -> tuple[int, ...]:
    """World sizes as the commands read them: a list, or a string in the ``--world-sizes``
    syntax (vgcsim.core.worldsizes); None is the commands' default, 2:1024:x2."""
    from vgcsim.core.worldsizes import DEFAULT_WORLD_SIZES, parse_world_sizes

    if world_sizes is None:
        world_sizes = DEFAULT_WORLD_SIZES
    if not isinstance(world_sizes, str):
        world_sizes = ",".join(str(int(p)) for p in world_sizes)
    return parse_world_sizes(world_sizes)


def _with_compute(cluster: str | Path | ClusterSpec, compute: str | None) -> ClusterSpec:
    import dataclasses

    spec = load_cluster(cluster)
    if compute is not None and compute != spec.compute:
        spec = dataclasses.replace(spec, compute=compute)
    return spec


def predict(
    trace: str | Path | Trace,
    cluster: str | Path | ClusterSpec,
    world_sizes: Sequence[int] | str | None = None,
    *,
    compute: str | None = None,
    **options: Any,
) -> pd.DataFrame:
    """Closed-form step times of dense allreduce (fp32, bf16, fp16) vs compressed allgatherv
    (source="predicted").

    ``world_sizes``: a list or a ``--world-sizes`` string such as ``"2:1024:x2"`` (the
    default).

    ``compute`` overrides the cluster's compute mode (``"model"``: every local time on the
    cluster's device, the presets' default; ``"trace"``: the recorded seconds), as
    ``--compute`` does. ``options`` are the fields of :class:`vgcsim.models.predict.PredictOptions`
    (``allreduce``, ``allgatherv``, ``encoding``, ``rule``, ``seed``, ``per_step``,
    ``overlap``, ``dense_encodings``, ``size_exchange``, ...).
    """
    from vgcsim.models.predict import PredictOptions, predict_trace

    opts = PredictOptions(world_sizes=_world_sizes(world_sizes), **options)
    return predict_trace(load_trace(trace), _with_compute(cluster, compute), opts)


def simulate(
    trace: str | Path | Trace,
    cluster: str | Path | ClusterSpec,
    world_sizes: Sequence[int] | str | None = None,
    *,
    compute: str | None = None,
    **options: Any,
) -> pd.DataFrame:
    """Discrete-event replay of the trace on the cluster (source="simulated").

    ``world_sizes`` as for :func:`predict` (default ``"2:1024:x2"``).

    ``compute`` as for :func:`predict`. ``options`` are the fields of
    :class:`vgcsim.simulator.replay.SimulateConfig` (collectives, ``overlap``, ``mode``,
    ``semantics``, ``path``, ``jitter``, ``seed``, ``dense_encodings``, ``size_exchange``, ...).
    """
    from vgcsim.core.results import finalize_results
    from vgcsim.simulator.replay import SimulateConfig, simulate_trace

    t = load_trace(trace)
    df, _, _ = simulate_trace(
        t,
        _with_compute(cluster, compute),
        list(_world_sizes(world_sizes)),
        SimulateConfig(**options),
    )
    batch = t.header.get("batch_size_per_worker")
    return finalize_results(df, batch_size_per_worker=int(batch) if batch else None)


def save(
    df: pd.DataFrame,
    out_dir: str | Path,
    trace: str | Path | Trace,
    cluster: str | Path | ClusterSpec,
    *,
    overwrite: bool = False,
    **options: Any,
) -> Path:
    """Write a result frame as a versioned result table (what ``vgcsim report`` reads).

    The same path as the commands' (:func:`vgcsim.core.results.save_results`): relative
    columns finished, header, atomic files and the folder marker; an earlier vgcsim output in
    ``out_dir`` is replaced only with ``overwrite``, a folder vgcsim did not write never.
    """
    from vgcsim.core.cluster import cluster_to_dict
    from vgcsim.core.errors import ResultsError
    from vgcsim.core.results import save_results, trace_entry

    sources = sorted(set(df["source"]))
    if len(sources) != 1:
        raise ResultsError(f"save one source per result table, got {sources}")
    t = load_trace(trace)
    return save_results(
        df,
        out_dir,
        source=sources[0],
        traces=[trace_entry(t)],
        cluster=cluster_to_dict(load_cluster(cluster)),
        extrapolation={"rule": options.get("rule", "modulo"), "seed": options.get("seed")},
        options=dict(options),
        command=["vgcsim.api.save"],
        batch_size_per_worker=t.header.get("batch_size_per_worker"),
        overwrite=overwrite,
    )


def report(
    results: Sequence[str | Path],
    traces: Sequence[str | Path] = (),
    out_dir: str | Path = "out/report",
    *,
    title: str = "vgcsim report",
    overwrite: bool = False,
) -> Path:
    """Plots, tables and the self-contained HTML page; returns the HTML path.

    ``out_dir`` is checked and marked as the command's (``overwrite`` as for :func:`save`)."""
    from vgcsim.commands.report import report_folder
    from vgcsim.reports.render import render_report

    return report_folder(
        out_dir,
        lambda out: render_report(results, traces, out, title=title),
        overwrite,
        command="api.report",
    )


def collective(
    cluster: str | Path | Mapping[str, Any] | ClusterSpec,
    key: str,
    sizes_bytes: Sequence[float],
    *,
    engine: str = "model",
    detail: bool = False,
    mode: str = "fair",
    semantics: str = "rendezvous",
) -> float | CollectiveRun:
    """Seconds of one collective call of per-rank sizes ``sizes_bytes`` on ``cluster``.

    ``cluster``: a preset name (``"10GbE"``), a TOML file, a dict as a TOML file would hold
    (``{"base": "10GbE", "topology": {"kind": "graph", ...}}``) or a ``ClusterSpec``; any
    topology, a graph included. ``key``: one of ``vgcsim.core.collectives.COLLECTIVE_KEYS``
    (``"allreduce/ring"``, ``"allgatherv/bruck"``, ...). ``sizes_bytes``: one size per rank,
    so P = ``len(sizes_bytes)``; allreduce needs equal sizes.

    ``engine="model"``: the closed form (:func:`vgcsim.models.collectives.collective_time_s`,
    α-β-γ of the cluster's link on a non-blocking fabric; the topology is not priced).
    ``engine="simulate"``: the message-level simulation on the cluster's topology
    (:func:`vgcsim.simulator.call.simulate_collective`, ``mode`` and ``semantics`` of the
    network). Returns the seconds as a float; with ``detail=True`` (simulate only) the
    :class:`vgcsim.simulator.call.CollectiveRun`: ``time_s``, each rank's ``finish_s`` and
    ``links``, a DataFrame of the bytes, busy seconds and utilization of every link used.
    """
    import numpy as np

    from vgcsim.core.cluster import ClusterSpec, cluster_from_dict
    from vgcsim.core.collectives import COLLECTIVE_KEYS
    from vgcsim.core.errors import ConfigError, unknown_name

    engines = ("model", "simulate")
    if engine not in engines:
        raise unknown_name("collective engine", str(engine), engines)
    if key not in COLLECTIVE_KEYS:
        raise unknown_name("collective", str(key), COLLECTIVE_KEYS)
    if detail and engine != "simulate":
        raise ConfigError("per-link detail comes from the simulator: use engine='simulate'")
    if isinstance(cluster, Mapping):
        spec = cluster_from_dict(cluster)
    elif isinstance(cluster, ClusterSpec):
        spec = cluster
    else:
        spec = load_cluster(cluster)
    try:
        sizes = np.asarray(sizes_bytes, dtype=np.float64)
    except (TypeError, ValueError):
        raise ConfigError("sizes_bytes must be numbers, one per rank") from None
    if sizes.ndim != 1 or len(sizes) < 1:
        raise ConfigError("sizes_bytes must be a non-empty list with one size per rank")
    if not np.all(np.isfinite(sizes)) or np.any(sizes < 0):
        raise ConfigError("sizes_bytes must be finite and >= 0")
    if key.startswith("allreduce/") and np.any(sizes != sizes[0]):
        raise ConfigError(f"{key} needs the same size on every rank")
    if engine == "model":
        from vgcsim.models.collectives import collective_time_s

        return float(collective_time_s(key, sizes, spec))
    from vgcsim.simulator.call import simulate_collective

    run = simulate_collective(key, sizes, spec, mode=mode, semantics=semantics)
    return run if detail else run.time_s


def advise(
    traces: Sequence[str | Path | Trace],
    clusters: str | Path | ClusterSpec | Sequence[str | Path | ClusterSpec],
    world_sizes: Sequence[int] | str | None = None,
    *,
    target_accuracy: float | None = None,
    overlap: str = "bucketed",
    bucket_bytes: float | None = None,
) -> Any:
    """What to run: the methods of ``traces`` (one model and dataset) ranked per cluster and
    P by predicted step time (and time to ``target_accuracy`` where the traces have
    evaluations), the best per-bucket mix of dense and compressed buckets of each compressed
    trace, and one recommendation line per (cluster, P): a
    :class:`vgcsim.reports.advice.Advice` (``ranked``, ``mixes``, ``recommendations``)."""
    from vgcsim.core.cluster import ClusterSpec
    from vgcsim.core.errors import ConfigError
    from vgcsim.models.advise import predict_methods
    from vgcsim.reports.advice import Advice, rank_methods, recommendation
    from vgcsim.traces.buckets import DDP_BUCKET_BYTES

    if target_accuracy is not None and not 0 < target_accuracy <= 1:
        raise ConfigError(f"target accuracy must be in (0, 1], got {target_accuracy}")
    if isinstance(clusters, (str, Path, ClusterSpec)):
        clusters = [clusters]
    pm = predict_methods(
        [load_trace(t) for t in traces],
        [load_cluster(c) for c in clusters],
        _world_sizes(world_sizes),
        overlap=overlap,
        bucket_bytes=DDP_BUCKET_BYTES if bucket_bytes is None else bucket_bytes,
    )
    ranked = rank_methods(pm.results, pm.labels, pm.evals, pm.dense_trace, target_accuracy)
    return Advice(ranked, pm.mixes, recommendation(ranked, pm.mixes))
