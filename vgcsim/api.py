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
    from vgcsim.traces.io import ResumePoint, Trace

__all__ = [
    "MissingExtraError",
    "load_trace",
    "load_cluster",
    "record",
    "record_config",
    "record_config_keys",
    "resume_point",
    "resume_record",
    "trace_header",
    "trace_info",
    "TraceCheck",
    "validate_trace",
    "synth_trace",
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
    backend: str = "emulated",
    nprocs: int | None = None,
) -> Path:
    """Record a trace from real training; return its directory.

    ``config`` is a :class:`vgcsim.traces.training.record_config.RecordConfig` (default: the
    default workload; :func:`record_config` builds one); ``overrides`` are ``key=value``
    strings as on the command line. ``backend="emulated"`` trains ``config.workers``
    emulated workers in this process on ``config.device`` (CUDA asked for and absent is
    refused before any work). A torch.distributed backend (``"gloo"``: ranks on the CPU,
    ``"nccl"``: on CUDA) starts ``nprocs`` local processes of one worker each (default:
    ``config.workers``; :func:`vgcsim.traces.training.distributed.run_distributed_record`);
    ``progress`` is not shown there.

    SIGINT, SIGTERM and SIGHUP stop an emulated recording cleanly: the trace keeps every
    step recorded (status stopped; :func:`resume_record` continues it) and
    :class:`vgcsim.traces.training.loop.RecordingInterrupted` is raised, a
    ``KeyboardInterrupt`` whose ``signum`` names the signal. Without the training extra: :class:`MissingExtraError`, naming ``vgcsim[train]``.
    """
    from vgcsim.core.config import apply_overrides

    with _TrainingExtra("record "):
        from vgcsim.traces.training.record import RecordConfig, resolve_device
        from vgcsim.traces.training.record import record as _record

    cfg = config if config is not None else RecordConfig()
    if overrides:
        cfg = apply_overrides(cfg, list(overrides))
    if backend != "emulated":
        from vgcsim.traces.training.distributed import run_distributed_record

        procs = cfg.workers if nprocs is None else nprocs
        return run_distributed_record(
            cfg, procs, out_dir=out_dir, backend=backend, overwrite=overwrite
        )
    resolve_device(cfg.device)  # cuda asked for but absent: refused before any work
    return _record(cfg, out_dir, progress=progress, overwrite=overwrite)


# -- traces: record settings, resume, inspect, validate, synthesise ----------------------------


class _TrainingExtra:
    """A missing module of the training extra, imported in the ``with`` block, becomes
    :class:`MissingExtraError` ("``what``needs the training extra ..."); any other error
    passes through."""

    def __init__(self, what: str = "") -> None:
        self.what = what

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: Any, exc: Any, tb: Any) -> None:
        if kind is None or not issubclass(kind, ModuleNotFoundError):
            return
        top = (exc.name or "").split(".")[0]
        if top in TRAIN_MODULES:
            raise MissingExtraError(
                f"{self.what}needs the training extra ({top} is not installed): {TRAIN_EXTRA_HINT}"
            ) from None


def record_config_keys() -> list[str]:
    """Every key of a :class:`vgcsim.traces.training.record_config.RecordConfig`, dotted as
    ``overrides``, ``--set`` and TOML files spell them (e.g. ``compressor.name``); needs no
    training extra."""
    from vgcsim.core.config import valid_keys
    from vgcsim.traces.training.record_config import RecordConfig

    return valid_keys(RecordConfig)


def _merged(base: Mapping[str, Any], top: Mapping[str, Any]) -> dict[str, Any]:
    """``top`` over ``base``, table by table (a key of a nested table replaces only itself)."""
    out = dict(base)
    for k, v in top.items():
        out[k] = _merged(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def record_config(
    config: str | Path | Any = None,
    *,
    base: Mapping[str, Any] | None = None,
    overrides: Sequence[str] = (),
    check: bool = False,
) -> Any:
    """A :class:`vgcsim.traces.training.record_config.RecordConfig` as ``vgcsim record``
    builds it: ``config`` (a TOML file of its keys) merged table by table onto ``base`` (a
    dict as a trace header's ``config`` holds it; default: the defaults), then ``overrides``
    (``key=value`` strings, applied in order). A ``RecordConfig`` given as ``config`` takes
    the overrides only. A misspelt key or a bad value is a
    :class:`vgcsim.core.errors.ConfigError`; building needs no training extra.

    ``check=True`` also refuses, before any work, names that no registry knows (dataset,
    model, optimizer, schedule, variance estimator, device) and bad compressor
    hyperparameters (:func:`vgcsim.traces.training.loop.check_config`); that needs the
    training extra (:class:`MissingExtraError` without it).
    """
    from vgcsim.core.config import apply_overrides, config_from_dict, load_toml
    from vgcsim.traces.training.record_config import RecordConfig

    if isinstance(config, RecordConfig):
        cfg = config
    else:
        data = dict(base or {})
        if config is not None:
            data = _merged(data, load_toml(config))
        cfg = config_from_dict(RecordConfig, data) if data else RecordConfig()
    cfg = apply_overrides(cfg, list(overrides))
    if check:
        with _TrainingExtra():
            from vgcsim.traces.training.record import check_config

        check_config(cfg)
    return cfg


def resume_point(run: str | Path) -> ResumePoint:
    """Where the interrupted recording in ``run`` (killed, stopped by a signal or a full disk)
    continues: its ``run_dir``, ``header`` (the config recorded is ``header["config"]``) and
    last complete chunk (:class:`vgcsim.traces.io.ResumePoint`). A folder that is not a
    trace, a synthetic trace, a complete run or a run still being written is refused
    (:class:`vgcsim.core.errors.TraceError`); nothing is changed on disk; needs no training
    extra."""
    from vgcsim.traces.io import find_resume_point

    return find_resume_point(run)


def resume_record(run: str | Path, config: Any = None, *, progress: bool = False) -> Path:
    """Continue the interrupted recording in ``run`` from its last complete chunk (see
    :func:`resume_point`) and return its directory; the finished trace equals an
    uninterrupted run's in every column but the measured seconds.

    ``config`` (a ``RecordConfig``) defaults to the one in the trace's header; a given one
    must equal it. A torch.distributed recording (whose ranks write no checkpoint) is
    refused. Signals as for :func:`record`; without the training extra:
    :class:`MissingExtraError`.
    """
    with _TrainingExtra():
        from vgcsim.traces.training.record import resume

    return resume(run, config, progress=progress)


def trace_header(trace: str | Path | Trace) -> dict[str, Any]:
    """A trace's header (``header.json``: config, compressor, status, ``divergence``, ...),
    read and checked without its tables (a :class:`vgcsim.traces.io.Trace` gives its own)."""
    from vgcsim.traces.io import Trace, read_header

    return trace.header if isinstance(trace, Trace) else read_header(trace)


def trace_info(trace: str | Path | Trace) -> dict[str, Any]:
    """The summary ``vgcsim trace info`` prints (JSON-able but for non-finite ratios):
    ``path``, ``status`` (the header's) and ``state`` (what is true now: ``interrupted`` for
    a ``running`` header whose writer is gone) with ``state_line`` in words, ``divergence``
    (None: healthy), ``caveats``, what was recorded (``recording``, ``compressor``,
    ``workers``, ``steps``, ``layers``, ``parameters``), the compression ratio per encoding
    (dense fp32 bits / sent bits), density over time, the final evaluation, the measured
    seconds and ``per_layer`` (:func:`vgcsim.traces.validate.trace_info`)."""
    from vgcsim.traces.validate import trace_info as _info

    return _info(load_trace(trace))


@dataclass(frozen=True)
class TraceCheck:
    """What :func:`validate_trace` found for one run: ``run`` (its path as text any UTF-8
    stream prints), ``error`` (None: valid; else every violation, one per line) and, for a
    valid run, the ``trace``, its ``state`` (``complete``, ``stopped``, ``interrupted``,
    ``running``) with ``state_line`` in words, and its ``divergence`` verdict (None:
    healthy)."""

    run: str
    error: str | None = None
    trace: Trace | None = None
    state: str | None = None
    state_line: str | None = None
    divergence: dict[str, Any] | None = None

    @property
    def valid(self) -> bool:
        return self.error is None

    def to_dict(self) -> dict[str, Any]:
        """The verdict as ``vgcsim trace validate -o`` writes it (JSON)."""
        if self.trace is None:
            return {"run": self.run, "valid": False, "error": self.error}
        return {
            "run": self.run,
            "valid": True,
            "status": self.trace.status,
            "state": self.state,
            "divergence": self.divergence,
        }


def validate_trace(trace: str | Path | Trace) -> TraceCheck:
    """Check a trace against its schema version and invariants
    (:func:`vgcsim.traces.validate.validate_trace`): an unreadable or invalid run is a
    :class:`TraceCheck` with its ``error``, never an exception. A stopped or interrupted
    run is a valid prefix (its ``state`` says which)."""
    from vgcsim.traces.health import state_line, trace_divergence, trace_state
    from vgcsim.traces.reading import printable
    from vgcsim.traces.validate import validate_trace as _validate

    try:
        t = _validate(trace)
    except VgcsimError as exc:
        where = getattr(trace, "path", trace)
        return TraceCheck(printable(where), error=str(exc))
    return TraceCheck(
        printable(t.path),
        trace=t,
        state=trace_state(t),
        state_line=state_line(t),
        divergence=trace_divergence(t),
    )


def synth_trace(
    config: str | Path | Any = None,
    out_dir: str | Path = "runs/synth",
    *,
    overrides: Sequence[str] = (),
    overwrite: bool = False,
) -> Path:
    """Write a synthetic trace (header ``synthetic=true``) for what-if analysis and return its
    directory. ``config``: a :class:`vgcsim.traces.synth.SynthConfig`, a TOML file of its
    keys, or None (the defaults); ``overrides``: ``key=value`` strings applied in order, e.g.
    ``"layers=resnet50"``, ``"target_ratio=100"``, ``"density_model=exp_decay"``. ``out_dir``
    is refused when it is not empty, unless ``overwrite``."""
    from vgcsim.core.config import apply_overrides, config_from_dict, load_toml
    from vgcsim.traces.synth import SynthConfig
    from vgcsim.traces.synth import synth_trace as _synth

    if isinstance(config, SynthConfig):
        cfg = config
    else:
        cfg = config_from_dict(SynthConfig, load_toml(config)) if config else SynthConfig()
    cfg = apply_overrides(cfg, list(overrides))
    return _synth(cfg, out_dir, overwrite=overwrite)


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
