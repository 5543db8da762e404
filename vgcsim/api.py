"""A small notebook API over the four stages: record → predict / simulate → report.

Each function is a thin, documented wrapper around the stage that does the work, with lazy
imports so that ``import vgcsim.api`` stays light (torch is only loaded by :func:`record`)::

    from vgcsim import api
    run = api.record(out_dir="runs/v2", overrides=["compressor.name=variance"])
    pred = api.predict(run, "10GbE", world_sizes=[2, 8, 64])
    sim = api.simulate(run, "10GbE", world_sizes=[2, 8, 64])
    html = api.report([api.save(pred, "results/pred", run, "10GbE")], [run], "out/report")
    swept = api.sweep("sweep.toml", overrides=["simulate.max_steps=10"])
    api.save(swept.frame, "results/sweep")  # a sweep's frame names its traces and cluster

Frames returned by :func:`predict` and :func:`simulate` have exactly
``vgcsim.core.results.RESULT_COLUMNS`` with the relative columns (speedup, efficiency) filled
(each function's docstring lists them with their units), and carry what made them in
``df.attrs``: ``source``, ``cluster`` (the cluster as a dict, as a result header holds it)
and ``options`` (every option used, defaults included). A misspelt option is refused with
the list of valid ones; :func:`record` without the training extra names it. :func:`sweep`
runs a sweep file's jobs (factor columns beside these) and :func:`save` writes every frame
here, a sweep's too, with the one header writer of every command.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from vgcsim.core.errors import VgcsimError

if TYPE_CHECKING:
    import pandas as pd

    from vgcsim.core.cluster import ClusterSpec
    from vgcsim.core.options import PredictOptions, SimulateConfig
    from vgcsim.simulator.call import CollectiveRun
    from vgcsim.simulator.sweep import SweepFile, SweepJob
    from vgcsim.traces.io import Trace

__all__ = [
    "MissingExtraError",
    "load_trace",
    "load_cluster",
    "record",
    "predict",
    "simulate",
    "simulate_run",
    "SimulateRun",
    "load_sweep",
    "sweep_jobs",
    "sweep",
    "SweepRun",
    "trace_caveats",
    "save",
    "report",
    "validate",
    "ValidationRun",
    "ValidateOptions",
    "Verdict",
    "verdict",
    "save_validation",
    "validation_frame",
    "term_frame",
    "measured_terms",
    "collective_frame",
    "collective",
    "advise",
]


#: What a frame of :func:`predict` and :func:`simulate` holds, one row per (trace step or
#: mean, P, method, encoding, collective); appended to both docstrings.
RESULT_FRAME_DOC = """
    Returns a DataFrame with these columns (times in seconds, sizes in bytes, per rank):

    - ``source``: "predicted" (closed form) or "simulated" (discrete-event replay);
      ``path``: which model made the row ("closed_form", "collective", "round",
      "message").
    - ``trace``, ``compressor``: the trace's name and compressor ("dense" for a dense
      trace); ``encoding``: the wire format whose bits were used (dense rows: "fp32",
      "bf16" or "fp16").
    - ``cluster``, ``topology``, ``compute_mode`` ("model": local times priced on the
      cluster's device; "trace": the seconds measured while recording), ``device``.
    - ``world_size``: P; ``method``: "dense" (allreduce of the gradient in ``encoding``)
      or "compressed" (allgatherv of the trace's payloads); ``collective``, e.g.
      "allreduce/ring".
    - ``step``: the trace step of a per-step row (``per_step=True``), or **-1 for the
      mean over all replayed steps** (the row to read; the only rows without
      ``per_step``).
    - ``compute_s`` (forward + backward), ``optimizer_s``, ``variance_s`` (squared-gradient
      estimate), ``codec_s`` (compress + encode), ``decode_s`` (decode + accumulate of the
      P - 1 received payloads), ``comm_s`` (the collective, with the size exchange when
      priced), ``step_s`` (the whole step): seconds.
    - ``payload_bytes_max``, ``payload_bytes_mean``: bytes one rank sends (largest, mean).
    - ``speedup_vs_dense``: dense fp32 ``step_s`` / this ``step_s`` at the same cluster,
      P and step (above 1: faster than dense); ``scaling_efficiency``: single-worker
      step time / ``step_s``; ``throughput_samples_per_s``: samples per second over all P
      ranks.

    ``df.attrs`` holds ``source``, ``cluster`` (a dict) and ``options`` (every option
    used).
"""


#: The top-level modules of the training extra, and how to install it.
TRAIN_MODULES = frozenset({"torch", "sklearn", "mlxtend"})
TRAIN_EXTRA_HINT = "pip install 'vgcsim[train]'"


class MissingExtraError(VgcsimError, ImportError):
    """A function needs the training extra (torch, scikit-learn, mlxtend), not installed."""


def _attrs(
    df: pd.DataFrame, source: str, cluster: ClusterSpec, options: dict[str, Any]
) -> pd.DataFrame:
    from vgcsim.core.cluster import cluster_to_dict

    df.attrs.update(source=source, cluster=cluster_to_dict(cluster), options=options)
    return df


def load_trace(trace: str | Path | Trace) -> Trace:
    """Read a trace run directory (a :class:`vgcsim.traces.io.Trace` passes through)."""
    from vgcsim.traces.io import Trace, read_trace

    return trace if isinstance(trace, Trace) else read_trace(trace)


def load_cluster(cluster: str | Path | ClusterSpec, *, compute: str | None = None) -> ClusterSpec:
    """A cluster preset name (``vgcsim clusters`` lists them) or a cluster TOML file (a
    :class:`vgcsim.core.cluster.ClusterSpec` passes through); ``compute`` overrides its
    compute mode (``"model"`` or ``"trace"``), as ``--compute`` does."""
    import dataclasses

    from vgcsim.core.cluster import ClusterSpec
    from vgcsim.core.cluster import load_cluster as _load

    spec = cluster if isinstance(cluster, ClusterSpec) else _load(str(cluster))
    if compute is not None and compute != spec.compute:
        spec = dataclasses.replace(spec, compute=compute)
    return spec


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
    Without the training extra: :class:`MissingExtraError`, naming ``vgcsim[train]``.
    """
    from vgcsim.core.config import apply_overrides

    try:
        from vgcsim.traces.training.record import RecordConfig
        from vgcsim.traces.training.record import record as _record
    except ModuleNotFoundError as exc:
        top = (exc.name or "").split(".")[0]
        if top not in TRAIN_MODULES:
            raise
        raise MissingExtraError(
            f"record needs the training extra ({top} is not installed): {TRAIN_EXTRA_HINT}"
        ) from None

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


def _config(
    kind: str,
    cls: type,
    config: Any,
    world_sizes: Sequence[int] | str | None,
    options: Mapping[str, Any],
) -> Any:
    """``config`` (default ``cls()``) with ``world_sizes`` (when given, or without
    ``config``) and ``options`` applied, refusing a misspelt option with the valid ones."""
    import dataclasses

    from vgcsim.core.errors import ConfigError, unknown_name

    if config is not None and not isinstance(config, cls):
        raise ConfigError(f"{kind} config must be a {cls.__name__}, got {type(config).__name__}")
    valid = [f.name for f in dataclasses.fields(cls) if f.init]
    for name in options:
        if name not in valid:
            raise unknown_name(f"{kind} option", name, valid)
    changes = dict(options)
    if world_sizes is not None or config is None:
        changes["world_sizes"] = _world_sizes(world_sizes)
    return cls(**changes) if config is None else dataclasses.replace(config, **changes)


def _header_options(opts: Any, trace: Trace) -> dict[str, Any]:
    """What a result header's ``options`` holds for a replay: every option used (the
    compressed exchange and the encoding resolved for ``trace``; predict's ``extra`` merged)."""
    from vgcsim.core.config import to_dict

    out = to_dict(opts)
    extra = out.pop("extra", None) or {}
    out["world_sizes"] = [int(p) for p in opts.world_sizes]
    out["encoding"] = opts.encoding or trace.primary_encoding
    return {**out, **extra}


def predict(
    trace: str | Path | Trace,
    cluster: str | Path | ClusterSpec,
    world_sizes: Sequence[int] | str | None = None,
    *,
    compute: str | None = None,
    config: PredictOptions | None = None,
    **options: Any,
) -> pd.DataFrame:
    """Closed-form step times of dense allreduce (fp32, bf16, fp16) vs compressed allgatherv
    (source="predicted").

    ``world_sizes``: a list or a ``--world-sizes`` string such as ``"2:1024:x2"`` (the
    default).

    ``compute`` overrides the cluster's compute mode (``"model"``: every local time on the
    cluster's device, the presets' default; ``"trace"``: the recorded seconds), as
    ``--compute`` does. ``options`` are the fields of :class:`vgcsim.core.options.PredictOptions`
    (the shared :class:`vgcsim.core.options.ReplayOptions`: ``allreduce``, ``allgatherv``,
    ``encoding``, ``rule``, ``seed``, ``per_step``, ``overlap``, ``bucket_bytes``,
    ``dense_encodings``, ``size_exchange``, ``sparse_allreduce``; and ``extra``), applied on
    top of ``config`` (a whole ``PredictOptions``) when one is given. An empty ``allgatherv``
    (the default) prices the trace's own exchange
    (:func:`vgcsim.traces.replay.resolve_collectives`).
    """
    from vgcsim.core.options import PredictOptions
    from vgcsim.models.predict import predict_trace
    from vgcsim.traces.replay import resolve_collectives

    t = load_trace(trace)
    opts = _config("predict", PredictOptions, config, world_sizes, options)
    spec = load_cluster(cluster, compute=compute)
    opts = resolve_collectives(opts, t)
    return _attrs(predict_trace(t, spec, opts), "predicted", spec, _header_options(opts, t))


@dataclass(frozen=True)
class SimulateRun:
    """What :func:`simulate_run` returns: the result ``frame`` (as :func:`simulate`), the
    :class:`vgcsim.simulator.replay.StepTimeline` of each step asked for, and how many
    steps ran on each simulator path per world size (``paths_run``, also in
    ``frame.attrs["options"]``)."""

    frame: pd.DataFrame
    timelines: list[Any]
    paths_run: dict[str, Any]


def simulate_run(
    trace: str | Path | Trace,
    cluster: str | Path | ClusterSpec,
    world_sizes: Sequence[int] | str | None = None,
    *,
    compute: str | None = None,
    config: SimulateConfig | None = None,
    timeline_steps: Sequence[int] = (),
    timeline_max_ranks: int | None = None,
    progress: Callable[[int], None] | None = None,
    **options: Any,
) -> SimulateRun:
    """:func:`simulate` with its timelines (``timeline_steps``: trace steps simulated again
    with link recording, at world sizes up to ``timeline_max_ranks``) and a ``progress``
    callback (steps done; :func:`vgcsim.simulator.replay.replay_units` in all)."""
    from vgcsim.core.options import SimulateConfig
    from vgcsim.core.results import finalize_results
    from vgcsim.simulator.replay import simulate_trace
    from vgcsim.traces.replay import resolve_collectives

    t = load_trace(trace)
    cfg = _config("simulate", SimulateConfig, config, world_sizes, options)
    spec = load_cluster(cluster, compute=compute)
    cfg = resolve_collectives(cfg, t)
    df, timelines, info = simulate_trace(
        t,
        spec,
        cfg.world_sizes,
        cfg,
        timeline_steps=timeline_steps,
        timeline_max_ranks=timeline_max_ranks,
        progress=progress,
    )
    batch = t.header.get("batch_size_per_worker")
    df = finalize_results(df, batch_size_per_worker=int(batch) if batch else None)
    df = _attrs(df, "simulated", spec, {**_header_options(cfg, t), "paths_run": info})
    return SimulateRun(df, timelines, info)


def simulate(
    trace: str | Path | Trace,
    cluster: str | Path | ClusterSpec,
    world_sizes: Sequence[int] | str | None = None,
    *,
    compute: str | None = None,
    config: SimulateConfig | None = None,
    **options: Any,
) -> pd.DataFrame:
    """Discrete-event replay of the trace on the cluster (source="simulated").

    ``world_sizes`` as for :func:`predict` (default ``"2:1024:x2"``).

    ``compute`` as for :func:`predict`. ``options`` are the fields of
    :class:`vgcsim.core.options.SimulateConfig`: the shared
    :class:`vgcsim.core.options.ReplayOptions` (one ``allreduce`` and at most one
    ``allgatherv`` algorithm; empty: the trace's own exchange) and the simulator's own
    (``mode``, ``semantics``, ``path``, ``jitter``, ``backward_fraction``, ``max_steps``),
    applied on top of ``config`` when one is given.
    """
    return simulate_run(
        trace, cluster, world_sizes, compute=compute, config=config, **options
    ).frame


def load_sweep(config: str | Path | SweepFile, *, overrides: Sequence[str] = ()) -> SweepFile:
    """A sweep file (a TOML path; a :class:`vgcsim.simulator.sweep.SweepFile` passes through)
    with ``overrides`` applied: ``key=value`` strings as ``--set`` takes them, e.g.
    ``"sweep.world_sizes=[8, 16]"``, ``"sweep.scheduler=processes"``,
    ``"simulate.max_steps=10"``; a misspelt key is refused with the valid ones.

    The sweep's modules (the simulator and the sweep runners) are imported here without
    garbage collections (:func:`vgcsim.preload.paused_gc`)."""
    from vgcsim.preload import paused_gc

    with paused_gc():  # the simulator's imports, without collections (vgcsim.preload)
        import vgcsim.sweep_runners  # noqa: F401  (sweep's runners, imported here too)
        from vgcsim.core.config import apply_overrides
        from vgcsim.simulator.sweep import SweepFile
        from vgcsim.simulator.sweep import load_sweep as _load

    sweep = config if isinstance(config, SweepFile) else _load(config)
    return apply_overrides(sweep, list(overrides))


def sweep_jobs(config: str | Path | SweepFile, *, overrides: Sequence[str] = ()) -> list[SweepJob]:
    """The jobs a sweep's factors expand to (trace × bandwidth × latency × topology × world
    size, in the order of the table's rows), without running them; ``config`` and
    ``overrides`` as for :func:`load_sweep`."""
    from vgcsim.simulator.sweep import expand_factors

    return expand_factors(load_sweep(config, overrides=overrides).sweep)


@dataclass(frozen=True)
class SweepRun:
    """What :func:`sweep` returns: the result ``frame`` (rows in job order), the ``jobs`` it
    ran (:class:`vgcsim.simulator.sweep.SweepJob`) and the sweep ``config`` with the
    overrides applied."""

    frame: pd.DataFrame
    jobs: list[SweepJob]
    config: SweepFile


def sweep(
    config: str | Path | SweepFile,
    *,
    overrides: Sequence[str] = (),
    progress: Callable[[int], None] | None = None,
) -> SweepRun:
    """Run every job of a sweep (a factorial of simulated replays) into one table.

    ``config``: a sweep TOML file or a loaded :class:`vgcsim.simulator.sweep.SweepFile`;
    ``overrides`` as for :func:`load_sweep` (``sweep.scheduler``: ``"local"``, a Dask
    LocalCluster, the default; ``"processes"``, a process pool; or a Dask scheduler's
    address; ``sweep.processes``: worker processes, 0 = one per CPU). ``progress(1)`` is
    called as each job's rows arrive. The jobs run through
    :func:`vgcsim.sweep_runners.run_sweep`; every scheduler gives the same rows.

    ``frame`` has the columns of :func:`simulate`'s frames and the factors (``trace_path``,
    ``bandwidth_Bps``, ``latency_s``, ``topology_spec``); ``frame.attrs`` holds ``source``
    ("simulated"), ``cluster`` (the base cluster as a dict), ``traces`` (each trace's path as
    the sweep file names it, and its name) and ``options``: ``sweep`` (the factors),
    ``simulate`` (the replay options) and ``summary`` (the factor values covered), which
    :func:`save` writes into the result header.
    """
    cfg = load_sweep(config, overrides=overrides)
    from vgcsim.core.cluster import cluster_to_dict
    from vgcsim.core.config import to_dict
    from vgcsim.simulator.sweep import sweep_summary
    from vgcsim.sweep_runners import run_sweep

    table, jobs = run_sweep(cfg, progress=progress)
    table.attrs.update(
        source="simulated",
        cluster=cluster_to_dict(load_cluster(cfg.sweep.cluster)),
        traces=[{"path": t, "name": t.rstrip("/").split("/")[-1]} for t in cfg.sweep.traces],
        options={
            "sweep": to_dict(cfg.sweep),
            "simulate": to_dict(cfg.simulate),
            "summary": sweep_summary(jobs),
        },
    )
    return SweepRun(table, jobs, cfg)


def scenario_config(name: str = "paper", *, overrides: Sequence[str] = ()) -> Any:
    """A built-in cost-model scenario's configuration (``name``: ``"paper"``) with
    ``overrides`` applied: ``key=value`` strings as ``--set`` takes them, e.g.
    ``"device=V100"``, ``"links=1GbE,IB-EDR"``, ``"world_sizes=[2, 8, 64]"``; an unknown
    scenario or key is refused with the valid ones."""
    from vgcsim.core.config import apply_overrides
    from vgcsim.core.errors import ConfigError, unknown_name
    from vgcsim.models.scenario import SCENARIOS

    if name not in SCENARIOS:
        raise unknown_name("scenario", name, SCENARIOS)
    try:
        return apply_overrides(SCENARIOS[name](), list(overrides))
    except (TypeError, ValueError) as exc:
        raise ConfigError(str(exc)) from None


@dataclass(frozen=True)
class ScenarioRun:
    """What :func:`scenario` returns: the result ``frame``, the ``crossover`` table (the
    world size at which each method stops beating dense allreduce, per link) and the
    ``markdown`` summary that ``vgcsim scenario`` prints and saves as ``scenario.md``."""

    frame: pd.DataFrame
    crossover: pd.DataFrame
    markdown: str


def scenario(
    name: str = "paper",
    *,
    config: Any = None,
    traces: Sequence[str | Path | Trace] = (),
    overrides: Sequence[str] = (),
    command: str = "vgcsim.api.scenario",
) -> ScenarioRun:
    """Run a built-in cost analysis from model sizes alone (``"paper"``: the paper's
    ResNet-50- and VGG-like models on its links, P = 2…1024), adding the compression
    ratio measured from each of ``traces``. ``config`` (from :func:`scenario_config`)
    replaces ``name``'s defaults and ``overrides``; ``command`` is the line the summary
    quotes. ``frame.attrs`` holds what :func:`save` writes into the header: ``traces``,
    ``cluster`` (the scenario's links and device), ``extrapolation`` (none) and ``options``
    (the scenario, its configuration, nets and methods)."""
    from vgcsim.core.config import to_dict
    from vgcsim.core.results import trace_entry
    from vgcsim.models.scenario import best_rows, crossover_table, method_from_trace
    from vgcsim.models.scenario import paper_scenario as _paper
    from vgcsim.reports.scenario import scenario_markdown

    cfg = config if config is not None else scenario_config(name, overrides=overrides)
    loaded = [load_trace(t) for t in traces]
    df, info = _paper(cfg, [method_from_trace(t) for t in loaded])
    cross = crossover_table(cfg, df)
    text = scenario_markdown(
        best_rows(df),
        cross,
        info,
        command,
        codec_s=cfg.codec_s,
        batch_size_per_worker=cfg.batch_size_per_worker,
    )
    df.attrs.update(
        source="predicted",
        traces=[trace_entry(t) for t in loaded],
        cluster={"scenario_links": info["links"], "device": info["device"]},
        extrapolation={"rule": None, "seed": None},
        options={
            "scenario": name,
            **to_dict(cfg),
            "nets": info["nets"],
            "methods": info["methods"],
        },
    )
    return ScenarioRun(df, cross, text)


def trace_caveats(trace: str | Path | Trace) -> list[str]:
    """Lines saying why a trace's numbers need care (a partial or diverged run; empty when
    none): what :func:`save` writes into the header and ``vgcsim report`` repeats."""
    from vgcsim.traces.health import caveats

    return list(caveats(load_trace(trace)))


def save(
    df: pd.DataFrame,
    out_dir: str | Path,
    trace: str | Path | Trace | None = None,
    cluster: str | Path | ClusterSpec | None = None,
    *,
    overwrite: bool = False,
    files: Mapping[str, Callable[[Path], Any]] | None = None,
    command: Sequence[str] | None = None,
    writer: str | None = None,
    **options: Any,
) -> Path:
    """Write a result frame of :func:`predict`, :func:`simulate` or :func:`sweep` as a
    versioned result table (what ``vgcsim report`` reads): the one header writer of every
    command that writes a result table.

    A frame of :func:`predict` or :func:`simulate` is saved with its ``trace`` and
    ``cluster``: the header holds the trace (with its caveats, :func:`trace_caveats`), the
    cluster (with the frame's compute mode), the options of ``df.attrs`` updated by
    ``options`` and their ``time_sources`` (where each local time column comes from on that
    cluster). A sweep's frame (``SweepRun.frame``) names its traces and base cluster in
    ``df.attrs`` and is saved without them; its header holds those and the options
    ``sweep``, ``simulate`` and ``summary``; a scenario's frame (``ScenarioRun.frame``) the
    same way, with its own ``extrapolation`` (none). Each holds the extrapolation rule of
    the replay options (and its seed under ``resample``) and ``command`` (default
    ``vgcsim.api.save``).
    Written by :func:`vgcsim.core.results.save_results`: relative columns finished, atomic
    files (``files``: extra name → writer) and the folder marker (``writer``); an earlier
    vgcsim output in ``out_dir`` is replaced only with ``overwrite``, a folder vgcsim did
    not write never.
    """
    from vgcsim.core.cluster import cluster_to_dict
    from vgcsim.core.errors import ResultsError
    from vgcsim.core.results import save_results, trace_entry

    sources = sorted(set(df["source"]))
    if len(sources) != 1:
        raise ResultsError(f"save one source per result table, got {sources}")
    opts = {**(df.attrs.get("options") or {}), **options}
    if "traces" in df.attrs:  # a sweep's or scenario's frame: traces and cluster in attrs
        if trace is not None or cluster is not None:
            raise ResultsError(
                "a sweep's or scenario's frame names its own traces and cluster: save it "
                "without them"
            )
        traces = [dict(entry) for entry in df.attrs["traces"]]
        cluster_dict = dict(df.attrs["cluster"])
        replay = opts.get("simulate") or {}
        batch = None
    else:
        from vgcsim.models.predict import time_sources

        if trace is None or cluster is None:
            raise ResultsError("save a predict or simulate frame with its trace and cluster")
        t = load_trace(trace)
        spec = load_cluster(cluster, compute=(df.attrs.get("cluster") or {}).get("compute"))
        traces = [{**trace_entry(t), "caveats": trace_caveats(t)}]
        cluster_dict = cluster_to_dict(spec)
        opts["time_sources"] = time_sources(t, spec)
        replay = opts
        batch = t.header.get("batch_size_per_worker")
    rule = replay.get("rule", "modulo")
    extrapolation = {"rule": rule, "seed": replay.get("seed") if rule == "resample" else None}
    if "extrapolation" in df.attrs:  # a scenario's frame: no trace steps to extrapolate
        extrapolation = dict(df.attrs["extrapolation"])
    table = df.copy(deep=False)
    table.attrs = {}  # what made the frame goes into the header, not the table's metadata
    return save_results(
        table,
        out_dir,
        source=sources[0],
        traces=traces,
        cluster=cluster_dict,
        extrapolation=extrapolation,
        options=opts,
        command=list(command) if command is not None else ["vgcsim.api.save"],
        batch_size_per_worker=batch,
        overwrite=overwrite,
        files=files,
        writer=writer,
    )


#: The report's files at the top of its folder (plots/ and tables/ hold the rest).
REPORT_FILES = ("index.html", "summary.md", "report.json")


def legacy_report(out: Path) -> list[str] | None:
    """A report folder written before folder markers existed: its top files and those in
    plots/ and tables/ (what the report writes there)."""
    if not ((out / "report.json").is_file() and (out / "index.html").is_file()):
        return None
    names = [name for name in REPORT_FILES if (out / name).exists()]
    for sub in ("plots", "tables"):
        names += [f"{sub}/{p.name}" for p in sorted((out / sub).glob("*")) if p.is_file()]
    return names


def report_folder(
    out_dir: str | Path, write: Callable[[Path], Path], overwrite: bool, command: str = "report"
) -> Path:
    """Run ``write(folder)`` (a report writer returning its HTML path) into ``out_dir``, checked
    and marked as every vgcsim output folder is (vgcsim.core.outdir); return the HTML path."""
    from vgcsim.core.outdir import prepare_output

    out = prepare_output(
        out_dir,
        f"vgcsim {command}",
        overwrite=overwrite,
        files=REPORT_FILES,
        legacy=legacy_report,
    )
    before = out.snapshot()
    path = write(out.path)
    out.commit_changed(before)
    return path


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
    from vgcsim.reports.render import render_report

    return report_folder(
        out_dir,
        lambda out: render_report(results, traces, out, title=title),
        overwrite,
        command="api.report",
    )


#: What ``vgcsim validate`` tolerates by default: the largest absolute relative error of the
#: worst case (:func:`validate`).
VALIDATE_TOLERANCE = 0.10


@dataclass(frozen=True)
class ValidateOptions:
    """Which collectives model a measured run in :func:`validate`: ``allreduce`` (the dense
    baseline's algorithm, as :class:`vgcsim.core.options.ReplayOptions`' ``allreduce`` but
    one name) and ``allgatherv`` (the compressed exchange's; ``None``: what the recorder ran,
    padded on gloo and ring on NCCL, or the DDP hook's own exchange); ``simulate``: also
    replay on the simulator (else closed forms only)."""

    allreduce: str = "ring"
    allgatherv: str | None = None
    simulate: bool = True


def _measured_method(trace: Trace) -> str:
    """``"dense"`` (all_reduce was measured) or ``"compressed"`` (allgatherv was measured)."""
    return "dense" if trace.compressor == "dense" else "compressed"


def _measured_allgatherv(trace: Trace) -> str:
    """The algorithm the measured allgatherv is: the trace's own exchange for traces the DDP
    hook wrote (:func:`vgcsim.traces.replay.default_allgatherv`, bounded); else what the
    recorder ran, padded on gloo and uneven (ring) on NCCL."""
    from vgcsim.traces.replay import default_allgatherv, is_hook_trace

    if is_hook_trace(trace):
        return default_allgatherv(trace)
    dist = trace.header.get("distributed") or {}
    return "padded" if dist.get("padded_allgather", True) else "ring"


def _validation_replays(
    trace: Trace, cluster: ClusterSpec, opts: ValidateOptions, allgatherv: str
) -> dict[str, pd.DataFrame]:
    """The per-step rows of :func:`predict` (and of :func:`simulate` with ``opts.simulate``)
    of ``trace`` at its own world size, dense fp32 beside the compressed exchange: what both
    validations of a trace compare, by source."""
    from vgcsim.core.options import PredictOptions, SimulateConfig

    shared = dict(
        world_sizes=(int(trace.workers),),
        allreduce=(opts.allreduce,),
        allgatherv=(allgatherv,),
        per_step=True,
        dense_encodings=("fp32",),
    )
    frames = {"predicted": predict(trace, cluster, config=PredictOptions(**shared))}
    if opts.simulate:
        frames["simulated"] = simulate(trace, cluster, config=SimulateConfig(**shared))
    return frames


def _measured_rows(frame: pd.DataFrame, method: str) -> pd.DataFrame:
    """Per-step rows of ``method`` indexed by step; for ``dense`` the fp32 rows (what the
    recorder all-reduces), not the 2-byte what-if encodings."""
    rows = frame[(frame["method"] == method) & (frame["step"] >= 0)]
    if method == "dense" and "encoding" in rows.columns:
        rows = rows[rows["encoding"] == "fp32"]
    return rows.set_index("step")


def _check_measured_comm(trace: Trace) -> None:
    from vgcsim.core.errors import TraceError

    if "comm_s" not in trace.steps.columns:
        raise TraceError(
            f"trace {trace.name} has no measured comm_s; record it on real ranks with "
            "`vgcsim record --backend gloo --nprocs N`"
        )


def validation_frame(
    trace: Trace, cluster: ClusterSpec, opts: ValidateOptions = ValidateOptions()
) -> pd.DataFrame:
    """Per-step measured, predicted and simulated communication seconds of ``trace`` (a
    trace recorded on real ranks, whose steps carry the measured ``comm_s`` of the exchange
    collective: allgatherv of the compressed payloads, all_reduce for ``dense``) replayed on
    ``cluster`` at its own world size by :func:`predict` and :func:`simulate`. Errors are
    relative to the measurement: ``(model − measured) / measured``.

    Columns: step, measured_s, predicted_s, simulated_s (NaN when not simulated),
    predicted_rel_error, simulated_rel_error, payload_bytes_max, payload_bytes_mean.
    """
    _check_measured_comm(trace)
    allgatherv = opts.allgatherv or _measured_allgatherv(trace)
    frames = _validation_replays(trace, cluster, opts, allgatherv)
    return _comm_rows(trace, cluster, opts, allgatherv, frames)


def _comm_rows(
    trace: Trace,
    cluster: ClusterSpec,
    opts: ValidateOptions,
    allgatherv: str,
    frames: Mapping[str, pd.DataFrame],
) -> pd.DataFrame:
    """:func:`validation_frame` from the replays of :func:`_validation_replays`."""
    import numpy as np
    import pandas as pd

    from vgcsim.reports.validation import SOURCES

    method = _measured_method(trace)
    pred = _measured_rows(frames["predicted"], method)
    out = pd.DataFrame({"step": trace.steps["step"].to_numpy(dtype=np.int64)})
    out["measured_s"] = trace.steps["comm_s"].to_numpy(dtype=float)
    for src in SOURCES:
        if src in frames:
            modelled = _measured_rows(frames[src], method)["comm_s"]
            out[f"{src}_s"] = modelled.reindex(out["step"]).to_numpy(dtype=float)
        else:
            out[f"{src}_s"] = np.nan
    for src in SOURCES:
        out[f"{src}_rel_error"] = (out[f"{src}_s"] - out["measured_s"]) / out["measured_s"]
    out["payload_bytes_max"] = pred["payload_bytes_max"].reindex(out["step"]).to_numpy()
    out["payload_bytes_mean"] = pred["payload_bytes_mean"].reindex(out["step"]).to_numpy()
    out.attrs.update(
        method=method,
        collective=f"allreduce/{opts.allreduce}"
        if method == "dense"
        else f"allgatherv/{allgatherv}",
        world_size=int(trace.workers),
        cluster=cluster.name,
        trace=trace.name,
    )
    return out


#: The terms of a step that a trace the DDP hook wrote measures (ranks table), in step order:
#: (term, ranks-table columns summed, reduction over ranks, result column of predict/simulate)
STEP_TERMS = (
    ("compute", ("compute_s", "overhead_s"), "max", "compute_s"),
    ("sqsum", ("sqsum_s",), "mean", "variance_s"),
    ("compress", ("compress_s", "encode_s"), "mean", "codec_s"),
    ("exchange", ("comm_s",), "min", "comm_s"),
    ("decode", ("decode_s",), "mean", "decode_s"),
    ("optimizer", ("optimizer_s",), "mean", "optimizer_s"),
    ("step", ("whole_step_s",), "max", "step_s"),
)


def measured_terms(trace: Trace) -> pd.DataFrame:
    """Per step, the measured seconds of every term of :data:`STEP_TERMS` from the ranks
    table of a trace the DDP hook wrote: ``[steps, terms]`` (NaN where the script did not
    report a phase). Reductions over ranks: the compute's maximum (the rank every other one
    waits for; its compute plus the step's host overhead, ``step_wall_s − forward_backward_s
    − optimizer_s``, where the trace has ``step_wall_s``), the mean of the other local terms;
    the exchange's minimum (a rank's exchange runs from its own start to the gathered
    buffer, so every rank but the last to arrive also waits for the others; the last one's
    is the collective alone); the whole step's maximum (the slowest rank ends the step: its
    ``step_wall_s``, else its forward+backward + optimizer)."""
    import pandas as pd

    from vgcsim.core.errors import TraceError
    from vgcsim.traces.replay import host_overhead_s

    ranks = trace.ranks
    if ranks is None:
        raise TraceError(
            f"trace {trace.name} has no ranks table; per-term validation needs a trace the DDP "
            "hook wrote (register_vgc_hook(..., trace_dir=...))"
        )
    ranks = ranks.copy()
    inside = ranks["forward_backward_s"] + ranks["optimizer_s"]
    ranks["overhead_s"] = host_overhead_s(ranks).fillna(0.0)
    wall = ranks.get("step_wall_s")
    ranks["whole_step_s"] = inside if wall is None else wall.where(wall.notna(), inside)
    out = {}
    for term, cols, how, _ in STEP_TERMS:
        per_rank = ranks[list(cols)].sum(axis=1, min_count=len(cols))
        out[term] = per_rank.groupby(ranks["step"]).agg(how)
    return pd.DataFrame(out).rename_axis("step")


def term_frame(
    trace: Trace, cluster: ClusterSpec, opts: ValidateOptions = ValidateOptions()
) -> pd.DataFrame:
    """Per step and term: measured (:func:`measured_terms`), predicted and simulated seconds
    of the method the trace ran (``dense``: allreduce; else the compressed exchange) on
    ``cluster`` at the trace's world size, and their relative errors.

    Columns: step, term, measured_s, predicted_s, simulated_s (NaN when not simulated),
    predicted_rel_error, simulated_rel_error. Term ↔ result column: compute ↔ compute_s,
    sqsum ↔ variance_s, compress ↔ codec_s, exchange ↔ comm_s, decode ↔ decode_s,
    optimizer ↔ optimizer_s, step ↔ step_s."""
    measured = measured_terms(trace)
    allgatherv = opts.allgatherv or _measured_allgatherv(trace)
    return _term_rows(trace, measured, _validation_replays(trace, cluster, opts, allgatherv))


def _term_rows(
    trace: Trace, measured: pd.DataFrame, frames: Mapping[str, pd.DataFrame]
) -> pd.DataFrame:
    """:func:`term_frame` from the measured terms and the replays of
    :func:`_validation_replays`."""
    import numpy as np
    import pandas as pd

    from vgcsim.reports.validation import SOURCES

    method = _measured_method(trace)
    rows = []
    for term, _, _, column in STEP_TERMS:
        part = pd.DataFrame({"step": measured.index.to_numpy(dtype=np.int64), "term": term})
        part["measured_s"] = measured[term].to_numpy(dtype=float)
        for src in SOURCES:
            if src in frames:
                modelled = _measured_rows(frames[src], method)[column]
                part[f"{src}_s"] = modelled.reindex(part["step"]).to_numpy(dtype=float)
            else:
                part[f"{src}_s"] = np.nan
        rows.append(part)
    out = pd.concat(rows, ignore_index=True)
    for src in SOURCES:
        out[f"{src}_rel_error"] = (out[f"{src}_s"] - out["measured_s"]) / out["measured_s"]
    out.attrs.update(method=method, compressor=trace.compressor, trace=trace.name)
    return out


def _calibration_model_key(op: str, backend: str) -> str | None:
    """The registry collective that models a calibration op (None: point-to-point)."""
    if op in ("p2p", "p2p_intra"):
        return None
    if op == "allreduce":
        return "allreduce/ring"
    if op == "allgather":
        return "allgatherv/ring"
    # vgcsim's allgatherv (even or skewed) pads on gloo (as the recorder does), sends exact
    # sizes on NCCL.
    return "allgatherv/padded" if backend == "gloo" else "allgatherv/ring"


def collective_frame(
    measurements: Mapping[str, Any],
    cluster: ClusterSpec,
    *,
    statistic: str = "median",
    simulate: bool = True,
) -> pd.DataFrame:
    """Measured (``statistic`` over repetitions), predicted and simulated seconds of every
    (op, size) of a calibration measurement file (``vgcsim calibrate`` keeps one next to its
    cluster file) on ``cluster``: ideally a cluster fitted from *another* sweep, so that the
    comparison checks predictions rather than the fit.

    Columns: op, collective (registry key; ``p2p`` for point-to-point, predicted as α + n·β
    of the link it crossed and not simulated), size_bytes, measured_s, predicted_s,
    simulated_s, predicted_rel_error, simulated_rel_error. Predicted: the closed form
    (:func:`vgcsim.models.collectives.collective_time_s`); simulated: one call on the
    simulator, host copies included as the closed form prices them
    (:func:`vgcsim.simulator.call.simulate_collective`). ``allgather`` rows on gloo (torch's
    all_gather of equal blocks) add the host copy of its gathered buffer
    (:func:`vgcsim.core.collectives.plain_allgather_host_time_s`) to the ring allgatherv's
    time. ``allgatherv_skewed`` rows are priced with the per-rank blocks the sweep sent
    (:func:`~vgcsim.traces.calibration.skewed_sizes`), the others with ``size_bytes`` on
    every rank.
    """
    import numpy as np
    import pandas as pd

    from vgcsim.core.collectives import plain_allgather_host_time_s
    from vgcsim.models.collectives import collective_time_s
    from vgcsim.models.pointtopoint import p2p_time_s
    from vgcsim.reports.validation import SOURCES
    from vgcsim.simulator.call import simulate_collective
    from vgcsim.traces.calibration import STATISTICS, skewed_sizes

    p = int(measurements["world_size"])
    backend = str(measurements.get("backend", "gloo"))
    reduce = STATISTICS[statistic]
    rows = []
    for r in measurements["rows"]:
        op, n = r["op"], int(r["size_bytes"])
        key = _calibration_model_key(op, backend)
        if key is None:
            link = cluster.intra_link if op == "p2p_intra" else cluster.link
            if link is None:
                continue
            pred, sim = float(p2p_time_s(n, link)), np.nan
        else:
            sizes = np.full(p, float(n))
            if op == "allgatherv_skewed":
                sizes = np.asarray(skewed_sizes(n, p), dtype=float)
            pred = float(collective_time_s(key, sizes[None, :], cluster)[0])
            sim = simulate_collective(key, sizes, cluster).time_s if simulate else np.nan
            if op == "allgather" and backend == "gloo":
                # torch's all_gather copies the gathered buffer once on the host
                link = cluster.link
                extra = plain_allgather_host_time_s(
                    p,
                    float(n),
                    link.allgatherv_host_s_per_byte,
                    link.allgatherv_host_s_per_byte_table,
                )
                pred, sim = pred + float(extra), sim + float(extra)
        rows.append(
            {
                "op": op,
                "collective": key or "p2p",
                "size_bytes": n,
                "measured_s": float(reduce(r["seconds"])),
                "predicted_s": pred,
                "simulated_s": sim,
            }
        )
    df = pd.DataFrame(rows)
    for src in SOURCES:
        df[f"{src}_rel_error"] = (df[f"{src}_s"] - df["measured_s"]) / df["measured_s"]
    df.attrs.update(world_size=p, cluster=cluster.name, backend=backend)
    return df


@dataclass(frozen=True)
class Verdict:
    """The worst case of a validation against a tolerance."""

    passed: bool
    tolerance: float
    worst_case: str
    worst_error: float

    def line(self) -> str:
        word = "PASS" if self.passed else "FAIL"
        return (
            f"{word}: worst case {self.worst_case}, error {self.worst_error:+.1%} "
            f"(tolerance {self.tolerance:.0%})"
        )


def verdict(cases: Mapping[str, float], tolerance: float) -> Verdict:
    """``cases``: a label and a relative error each (NaN ignored); the worst decides."""
    import math

    from vgcsim.core.errors import TraceError

    known = {k: v for k, v in cases.items() if not math.isnan(v)}
    if not known:
        raise TraceError("nothing to validate: no case has both a measurement and a model")
    worst = max(known, key=lambda k: abs(known[k]))
    return Verdict(abs(known[worst]) <= tolerance, tolerance, worst, known[worst])


@dataclass(frozen=True)
class ValidationRun:
    """What :func:`validate` returns.

    ``kind``: ``"trace"`` or ``"measurements"``. ``frame``: :func:`validation_frame` (per
    step) or :func:`collective_frame` (per op and size); ``summary``: its aggregate per
    source (:func:`vgcsim.reports.validation.validation_summary`; trace only); ``terms``:
    :func:`term_frame` (a trace the DDP hook wrote); ``winner``: which of two runs is
    faster, measured and predicted (with a second run). ``cases``: the relative error of
    every case the verdict judges against ``tolerance`` (trace: the mean over steps per
    source, since per-step times carry scheduling noise that a network model does not claim
    to predict; measurements: per op, size and source); :attr:`verdict` names the worst.
    ``text``: what ``vgcsim validate`` prints before the verdict."""

    kind: str
    frame: pd.DataFrame
    summary: pd.DataFrame | None
    terms: pd.DataFrame | None
    winner: str | None
    cases: Mapping[str, float]
    tolerance: float
    text: str

    @property
    def verdict(self) -> Verdict:
        """The worst case against the tolerance (:func:`verdict`; no case with both a
        measurement and a model: :class:`vgcsim.core.errors.TraceError`)."""
        return verdict(self.cases, self.tolerance)

    @property
    def files(self) -> tuple[str, ...]:
        """The files :func:`save_validation` writes."""
        if self.kind == "measurements":
            return ("validation_collectives.csv",)
        names = ("validation.csv", "validation_summary.csv", "validation.png")
        return names if self.terms is None else (*names, "validation_terms.csv")


def _validate_measurements(
    run: str | Path,
    cluster: str | Path | ClusterSpec,
    *,
    compute: str | None,
    simulate: bool,
    tolerance: float,
    statistic: str,
    ops: Sequence[str] | None,
    sizes: str | None,
) -> ValidationRun:
    """:func:`validate` of a calibration measurement file."""
    from vgcsim.core.errors import unknown_name
    from vgcsim.reports.validation import SOURCES, collective_text
    from vgcsim.traces.calibration import (
        STATISTICS,
        parse_sizes,
        read_measurements,
        select_rows,
    )

    if statistic not in STATISTICS:
        raise unknown_name("statistic", str(statistic), STATISTICS)
    measurements = read_measurements(Path(run))
    spec = load_cluster(cluster, compute=compute)
    listed, bounds = parse_sizes(sizes) if sizes else (None, None)
    measurements = select_rows(
        measurements, ops=set(ops) if ops else None, sizes=listed, bounds=bounds
    )
    df = collective_frame(measurements, spec, statistic=statistic, simulate=simulate)
    link = spec.link
    table = link.allgatherv_host_s_per_byte_table
    head = (
        f"{run}: {len(df)} measurements on {df.attrs['world_size']} ranks "
        f"({df.attrs['backend']}), cluster {spec.name} (alpha {link.latency_s * 1e6:.1f} us, "
        f"{link.payload_Bps / 1e6:.2f} MB/s, gamma {link.gamma_s_per_byte:.3g} s/B, "
        f"allgatherv host {link.allgatherv_host_s_per_byte:.3g} s/B"
        + (f", by gathered size at {len(table)} points)" if table else ")")
    )
    cases = {
        f"{row.op} {row.size_bytes} B {src}": float(getattr(row, f"{src}_rel_error"))
        for row in df.itertuples(index=False)
        for src in SOURCES
    }
    text = f"{head}\n{collective_text(df)}"
    return ValidationRun("measurements", df, None, None, None, cases, tolerance, text)


def validate(
    run: str | Path | Trace,
    cluster: str | Path | ClusterSpec,
    other: str | Path | Trace | None = None,
    *,
    compute: str | None = None,
    tolerance: float = VALIDATE_TOLERANCE,
    allreduce: str = "ring",
    allgatherv: str | None = None,
    simulate: bool = True,
    show_steps: int = 10,
    statistic: str = "median",
    ops: Sequence[str] | None = None,
    sizes: str | None = None,
) -> ValidationRun:
    """Measured vs predicted vs simulated communication of a distributed run, with a verdict.

    ``run``: a trace recorded on real ranks (``vgcsim record --backend gloo|nccl``; its steps
    carry the measured ``comm_s``) or written by the DDP hook, or a calibration measurement
    file (``FILE.measurements.json`` of ``vgcsim calibrate``). A trace is replayed on
    ``cluster`` (``compute`` as for :func:`predict`) at its own world size with the dense
    baseline's ``allreduce`` or the compressed exchange's ``allgatherv`` (``None``: what
    the run used; :class:`ValidateOptions`), by the closed forms and, with ``simulate``, the
    simulator: :func:`validation_frame` per step, its summary per source, and for a trace
    the DDP hook wrote :func:`term_frame` per step and term; ``other``, a second hook trace
    of the same job with the other method (dense or a compressor), adds the ``winner``
    line. A measurement file is compared op by op and size by size
    (:func:`collective_frame`; ``statistic`` over repetitions, ``"median"`` or ``"min"``;
    ``ops`` and ``sizes``, ``"MIN:MAX"`` or a comma list, select rows).

    The verdict (:attr:`ValidationRun.verdict`): the worst absolute relative error against
    ``tolerance``. ``show_steps``: per-step rows in ``text``. Write the result with
    :func:`save_validation`.
    """
    from vgcsim.core.errors import ConfigError
    from vgcsim.traces.io import Trace

    if not tolerance > 0:
        raise ConfigError(f"tolerance must be positive, got {tolerance}")
    if not isinstance(run, Trace) and Path(run).is_file():
        if other is not None:
            raise ConfigError("a second run is compared only with a trace, not a measurement file")
        return _validate_measurements(
            run,
            cluster,
            compute=compute,
            simulate=simulate,
            tolerance=tolerance,
            statistic=statistic,
            ops=ops,
            sizes=sizes,
        )
    from vgcsim.reports.validation import (
        steps_text,
        term_summary,
        terms_text,
        validation_summary,
        winner_line,
    )

    trace = load_trace(run)
    second = load_trace(other) if other is not None else None
    if second is not None and (trace.ranks is None or second.ranks is None):
        raise ConfigError(
            "comparing two runs needs two traces written by the DDP hook "
            "(register_vgc_hook(..., trace_dir=...))"
        )
    spec = load_cluster(cluster, compute=compute)
    opts = ValidateOptions(allreduce=allreduce, allgatherv=allgatherv, simulate=simulate)
    _check_measured_comm(trace)
    allgatherv = opts.allgatherv or _measured_allgatherv(trace)
    frames = _validation_replays(trace, spec, opts, allgatherv)
    df = _comm_rows(trace, spec, opts, allgatherv, frames)
    summary = validation_summary(df)
    a = df.attrs
    blocks = [
        f"{a['trace']}: {a['collective']} on {a['world_size']} ranks, cluster {a['cluster']}, "
        f"{len(df)} steps",
        steps_text(df, summary, show_steps),
    ]
    terms = winner = None
    if trace.ranks is not None:
        terms = _term_rows(trace, measured_terms(trace), frames)
        blocks += ["", terms_text(term_summary(terms), terms.attrs)]
    if second is not None:
        winner = winner_line([terms, term_frame(second, spec, opts)])
        blocks.append(winner)
    cases = {
        f"{a['collective']} mean over steps {row.source}": row.mean_rel_error
        for row in summary.itertuples(index=False)
        if row.source != "measured"
    }
    text = "\n".join(blocks)
    return ValidationRun("trace", df, summary, terms, winner, cases, tolerance, text)


def save_validation(
    result: ValidationRun,
    out_dir: str | Path,
    *,
    overwrite: bool = False,
    command: str = "api.save_validation",
) -> list[Path]:
    """Write a :func:`validate` result into ``out_dir`` and return the files' paths: a
    trace's ``validation.csv`` (per step), ``validation_summary.csv``, ``validation.png``
    (:func:`vgcsim.reports.validation.plot_validation`) and, for a trace the DDP hook
    wrote, ``validation_terms.csv``; a measurement file's ``validation_collectives.csv``.
    The folder is checked and marked as every vgcsim output folder is
    (:func:`vgcsim.core.outdir.prepare_output`; ``overwrite`` as for :func:`save`), as
    written by ``vgcsim {command}``."""
    from vgcsim.core.outdir import prepare_output

    out = prepare_output(out_dir, f"vgcsim {command}", overwrite=overwrite, files=result.files)
    written = []
    if result.kind == "measurements":
        frame = result.frame
        written.append(
            out.write("validation_collectives.csv", lambda p: frame.to_csv(p, index=False))
        )
    else:
        from vgcsim.reports.validation import plot_validation

        df, summary, terms = result.frame, result.summary, result.terms
        if terms is not None:
            written.append(
                out.write("validation_terms.csv", lambda p: terms.to_csv(p, index=False))
            )
        written.append(out.write("validation.csv", lambda p: df.to_csv(p, index=False)))
        written.append(
            out.write("validation_summary.csv", lambda p: summary.to_csv(p, index=False))
        )
        fig = plot_validation(df).figure
        written.append(out.write("validation.png", lambda p: fig.savefig(p, dpi=120, format="png")))
    out.commit()
    return written


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
    so P = ``len(sizes_bytes)`` (at most ``vgcsim.core.worldsizes.MAX_WORLD_SIZE``, as in
    every command); allreduce needs equal sizes.

    ``engine="model"``: the closed form (:func:`vgcsim.models.collectives.collective_time_s`,
    α-β-γ of the cluster's link on a non-blocking fabric; the topology is not priced).
    ``engine="simulate"``: the simulation on the cluster's topology
    (:func:`vgcsim.simulator.call.simulate_collective`, ``mode`` and ``semantics`` of the
    network; the collective-level path where it is exact, else every message; a run whose
    memory estimate exceeds the memory available is refused up front). Returns the seconds as a float; with ``detail=True`` (simulate only) the
    :class:`vgcsim.simulator.call.CollectiveRun`: ``time_s``, each rank's ``finish_s`` and
    ``links``, a DataFrame of the bytes, busy seconds and utilization of every link used.
    """
    import numpy as np

    from vgcsim.core.cluster import ClusterSpec, cluster_from_dict
    from vgcsim.core.collectives import COLLECTIVE_KEYS
    from vgcsim.core.errors import ConfigError, unknown_name
    from vgcsim.core.worldsizes import MAX_WORLD_SIZE

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
    if len(sizes) > MAX_WORLD_SIZE:
        raise ConfigError(
            f"world size {len(sizes)} exceeds the largest supported world size, {MAX_WORLD_SIZE}"
        )
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


predict.__doc__ = (predict.__doc__ or "") + RESULT_FRAME_DOC
simulate.__doc__ = (simulate.__doc__ or "") + RESULT_FRAME_DOC
