"""A small notebook API over the four stages: record → predict / simulate → report.

Each function is a thin, documented wrapper around the stage that does the work, with lazy
imports so that ``import vgcsim.api`` stays light (torch is loaded only by what trains:
:func:`record`, :func:`resume_record`, :func:`demo` where it records, and
``record_config(check=True)``)::

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

import inspect
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from vgcsim.core.errors import VgcsimError

if TYPE_CHECKING:
    import pandas as pd

    from vgcsim.core.cluster import ClusterSpec, DeviceSpec, Framing, LinkSpec
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
    "DemoConfig",
    "DemoRun",
    "demo_config",
    "demo",
    "trace_caveats",
    "save",
    "parse_algorithms",
    "replay_text",
    "simulate_units",
    "timeline_files",
    "advice_text",
    "ReportRun",
    "report_run",
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
    "calibrate",
    "calibrate_from",
    "fit_calibration",
    "calibration_config",
    "calibrate_codec",
    "calibration_defaults",
    "CalibrationRun",
    "CodecCalibrationRun",
    "CalibrationDefaults",
    "CalibrationError",
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


def _listed(value: Any, what: str) -> list[Any]:
    """One path (or Trace) or a sequence of them as a list; anything else a ConfigError naming
    ``what`` (a string is one path, not its characters)."""
    from vgcsim.core.errors import ConfigError
    from vgcsim.traces.io import Trace

    if isinstance(value, (str, os.PathLike, Trace)):
        return [value]
    try:
        return list(value)
    except TypeError:
        raise ConfigError(f"{what}: expected a path or a list of paths, got {value!r}") from None


def _accuracy(target_accuracy: Any) -> None:
    """ConfigError unless ``target_accuracy`` is None or a fraction in (0, 1]."""
    import numbers

    from vgcsim.core.errors import ConfigError

    if target_accuracy is None:
        return
    if isinstance(target_accuracy, bool) or not isinstance(target_accuracy, numbers.Real):
        raise ConfigError(f"target accuracy must be a number in (0, 1], got {target_accuracy!r}")
    if not 0 < target_accuracy <= 1:
        raise ConfigError(f"target accuracy must be in (0, 1], got {target_accuracy}")


def load_trace(trace: str | Path | Trace) -> Trace:
    """Read a trace run directory (a :class:`vgcsim.traces.io.Trace` passes through)."""
    from vgcsim.core.errors import ConfigError
    from vgcsim.traces.io import Trace, read_trace

    if isinstance(trace, Trace):
        return trace
    if not isinstance(trace, (str, os.PathLike)):
        raise ConfigError(f"a trace is a run folder's path or a Trace, got {trace!r}")
    return read_trace(trace)


def load_cluster(cluster: str | Path | ClusterSpec, *, compute: str | None = None) -> ClusterSpec:
    """A cluster preset name (``vgcsim clusters`` lists them) or a cluster TOML file (a
    :class:`vgcsim.core.cluster.ClusterSpec` passes through); ``compute`` overrides its
    compute mode (``"model"`` or ``"trace"``), as ``--compute`` does."""
    import dataclasses

    from vgcsim.core.cluster import ClusterSpec
    from vgcsim.core.cluster import load_cluster as _load
    from vgcsim.core.errors import ConfigError

    if not isinstance(cluster, (ClusterSpec, str, os.PathLike)):
        raise ConfigError(
            f"a cluster is a preset name, a TOML file's path or a ClusterSpec, got {cluster!r}"
        )
    spec = cluster if isinstance(cluster, ClusterSpec) else _load(str(cluster))
    if compute is not None and compute != spec.compute:
        spec = dataclasses.replace(spec, compute=compute)
    return spec


def cluster_dict(cluster: str | Path | ClusterSpec) -> dict[str, Any]:
    """``cluster`` (a preset name, a cluster TOML file or a spec) as the plain dict that
    ``vgcsim clusters NAME`` prints as JSON and writes with ``-o``."""
    from vgcsim.core.cluster import cluster_to_dict

    return cluster_to_dict(load_cluster(cluster))


@dataclass(frozen=True)
class Presets:
    """Every preset by name, as ``vgcsim clusters`` lists them: clusters, links, the link
    framings (payload bytes per wire byte) and devices, each spec carrying its sources."""

    clusters: Mapping[str, ClusterSpec]
    links: Mapping[str, LinkSpec]
    framings: Mapping[str, Framing]
    devices: Mapping[str, DeviceSpec]


def presets() -> Presets:
    """The cluster, link, framing and device presets (:class:`Presets`)."""
    from vgcsim.core.cluster import CLUSTER_PRESETS, DEVICE_PRESETS, FRAMINGS, LINK_PRESETS

    return Presets(CLUSTER_PRESETS, LINK_PRESETS, FRAMINGS, DEVICE_PRESETS)


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
        with _TrainingExtra("checking a record config "):
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
    with _TrainingExtra("resuming a recording "):
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
    import numbers

    from vgcsim.core.errors import ConfigError
    from vgcsim.core.worldsizes import DEFAULT_WORLD_SIZES, parse_world_sizes

    if world_sizes is None:
        world_sizes = DEFAULT_WORLD_SIZES
    if isinstance(world_sizes, numbers.Integral) and not isinstance(world_sizes, bool):
        world_sizes = [world_sizes]  # one P
    if not isinstance(world_sizes, str):
        try:
            given = list(world_sizes)
        except TypeError:
            raise ConfigError(
                f"world sizes: expected a list of integers or a string such as '2:64:x2', got "
                f"{world_sizes!r}"
            ) from None
        bad = [p for p in given if isinstance(p, bool) or not isinstance(p, numbers.Integral)]
        if bad:
            raise ConfigError(f"world sizes must be integers, got {bad[0]!r}")
        world_sizes = ",".join(str(int(p)) for p in given)
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
    anchor: str | Path | ClusterSpec | None = None,
    **options: Any,
) -> pd.DataFrame:
    """Closed-form step times of dense allreduce (fp32, bf16, fp16) vs compressed allgatherv
    (source="predicted").

    ``anchor``: the cluster of the setup the trace was recorded on (a trace the DDP hook
    wrote, with each step's measured wall time): every predicted step gets the trace's
    measured step time there less the predicted one (:func:`anchored`), as ``--anchor`` does.

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
    (:func:`vgcsim.traces.inputs.resolve_collectives`).
    """
    from vgcsim.core.options import PredictOptions
    from vgcsim.models.predict import predict_trace
    from vgcsim.traces.inputs import resolve_collectives

    t = load_trace(trace)
    opts = _config("predict", PredictOptions, config, world_sizes, options)
    spec = load_cluster(cluster, compute=compute)
    opts = resolve_collectives(opts, t)
    df, header = predict_trace(t, spec, opts), _header_options(opts, t)
    if anchor is not None:
        at = load_cluster(anchor, compute=compute)
        df, header["anchor"] = anchored(df, t, at, lambda o: predict_trace(t, at, o), opts)
    return _attrs(df, "predicted", spec, header)


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
    anchor: str | Path | ClusterSpec | None = None,
    **options: Any,
) -> SimulateRun:
    """:func:`simulate` with its timelines (``timeline_steps``: trace steps simulated again
    with link recording, at world sizes up to ``timeline_max_ranks``) and a ``progress``
    callback (steps done; :func:`vgcsim.simulator.replay.replay_units` in all). ``anchor``
    as for :func:`predict`, the trace's own setup simulated."""
    from vgcsim.core.options import SimulateConfig
    from vgcsim.core.results import finalize_results
    from vgcsim.simulator.replay import simulate_trace
    from vgcsim.traces.inputs import resolve_collectives

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
    header = {**_header_options(cfg, t), "paths_run": info}
    if anchor is not None:
        at = load_cluster(anchor, compute=compute)

        def own(o: SimulateConfig) -> pd.DataFrame:
            return simulate_trace(t, at, o.world_sizes, o)[0]

        df, header["anchor"] = anchored(df, t, at, own, cfg)
    df = _attrs(df, "simulated", spec, header)
    return SimulateRun(df, timelines, info)


def simulate(
    trace: str | Path | Trace,
    cluster: str | Path | ClusterSpec,
    world_sizes: Sequence[int] | str | None = None,
    *,
    compute: str | None = None,
    config: SimulateConfig | None = None,
    anchor: str | Path | ClusterSpec | None = None,
    **options: Any,
) -> pd.DataFrame:
    """Discrete-event replay of the trace on the cluster (source="simulated").

    ``world_sizes`` as for :func:`predict` (default ``"2:1024:x2"``).

    ``compute`` and ``anchor`` as for :func:`predict`. ``options`` are the fields of
    :class:`vgcsim.core.options.SimulateConfig`: the shared
    :class:`vgcsim.core.options.ReplayOptions` (one ``allreduce`` and at most one
    ``allgatherv`` algorithm; empty: the trace's own exchange) and the simulator's own
    (``mode``, ``semantics``, ``path``, ``jitter``, ``backward_fraction``, ``max_steps``),
    applied on top of ``config`` when one is given.
    """
    return simulate_run(
        trace, cluster, world_sizes, compute=compute, config=config, anchor=anchor, **options
    ).frame


def anchored(
    df: pd.DataFrame,
    trace: Trace,
    anchor: ClusterSpec,
    replay: Callable[[Any], pd.DataFrame],
    options: Any,
) -> tuple[pd.DataFrame, dict[str, Any]]:
    """``df`` with every row's ``step_s`` raised by the trace's **anchor offset**, and what
    the header records of it.

    The trace must carry each step's measured wall time (``ranks.step_wall_s``, which the DDP
    hook writes). ``replay(options)`` prices the trace at its own world size, one row per
    step, on ``anchor``, the cluster of the setup it was recorded on, with the exchange the
    trace ran whatever algorithms ``options`` ask for the rows: the ring allreduce, and the
    allgatherv that ``vgcsim.traces.inputs.resolve_collectives`` names for it
    (``allgatherv/bounded`` for a hook's trace). The trace's own method is its row there: a
    dense trace's dense row in its primary encoding (fp32 where that is no dense row's), else
    the compressed row. The offset is

        o = median over steps t of (max over ranks of step_wall_s[t]  −  predicted step_s[t])

    the time the job spent per step that the models do not price on the setup where both are
    known: Python and the framework between the hooks, an exchange that follows compute
    (waking the host's threads), a straggler's wait. It is added as is at every world size and
    cluster (an assumption: a per-step cost of the job and host, not of the link), and the
    relative columns are computed again. Refused in one line: a trace without measured wall
    times, no step in common, or an offset that would leave a step at or below 0 s.
    """
    import dataclasses

    from vgcsim.core.errors import ConfigError
    from vgcsim.core.results import finalize_results
    from vgcsim.traces.inputs import resolve_collectives

    ranks = trace.ranks
    if ranks is None or "step_wall_s" not in ranks or not ranks["step_wall_s"].notna().any():
        raise ConfigError(
            f"--anchor needs a trace with each step's measured wall time (one the DDP hook "
            f"wrote); {trace.name} has none"
        )
    wall = ranks.groupby("step")["step_wall_s"].max().dropna()
    # the trace's own exchange, whatever algorithms the rows are asked for
    at_own = dataclasses.replace(
        options, world_sizes=(trace.workers,), per_step=True, allreduce=("ring",), allgatherv=()
    )
    own = replay(resolve_collectives(at_own, trace))
    if trace.compressor == "dense":
        dense = own[own["method"] == "dense"]
        encoding = trace.primary_encoding
        own = dense[
            dense["encoding"] == (encoding if encoding in set(dense["encoding"]) else "fp32")
        ]
    else:
        own = own[own["method"] == "compressed"]
    predicted = own[own["step"] >= 0].groupby("step")["step_s"].first()
    common = wall.index.intersection(predicted.index)
    if common.empty:
        raise ConfigError(f"--anchor: no step of {trace.name} has both a wall time and a price")
    offset_s = float((wall[common] - predicted[common]).median())
    out = df.assign(step_s=df["step_s"] + offset_s)
    if len(out) and not (out["step_s"] > 0).all():
        raise ConfigError(
            f"--anchor: the offset ({offset_s * 1e3:.3g} ms, {anchor.name}) leaves a step at "
            "or below 0 s; is the anchor the cluster the trace was recorded on?"
        )
    out = finalize_results(out, batch_size_per_worker=int(trace.header["batch_size_per_worker"]))
    out.attrs = dict(df.attrs)
    info = {
        "cluster": anchor.name,
        "world_size": int(trace.workers),
        "steps": len(common),
        "offset_s": offset_s,
    }
    return out, info


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
    ``simulate`` (the replay options), ``summary`` (the factor values covered) and
    ``time_sources`` (per trace name, where each local time column comes from on the base
    cluster: the caller reads each trace once for it), which :func:`save` writes into the
    result header.
    """
    cfg = load_sweep(config, overrides=overrides)
    from vgcsim.core.cluster import cluster_to_dict
    from vgcsim.core.config import to_dict
    from vgcsim.models.predict import time_sources
    from vgcsim.simulator.sweep import sweep_summary
    from vgcsim.sweep_runners import run_sweep

    table, jobs = run_sweep(cfg, progress=progress)
    traces = [{"path": t, "name": t.rstrip("/").split("/")[-1]} for t in cfg.sweep.traces]
    spec = load_cluster(cfg.sweep.cluster)
    # every job's local times come from its trace on the base cluster's device and compute
    # mode (the factors move links and topologies only): one entry per trace
    base = load_cluster(spec, compute=cfg.sweep.compute or None)
    table.attrs.update(
        source="simulated",
        cluster=cluster_to_dict(spec),
        traces=traces,
        options={
            "sweep": to_dict(cfg.sweep),
            "simulate": to_dict(cfg.simulate),
            "summary": sweep_summary(jobs),
            "time_sources": {t["name"]: time_sources(load_trace(t["path"]), base) for t in traces},
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
    (the scenario, its configuration, nets, methods and ``time_sources``)."""
    from vgcsim.core.config import to_dict
    from vgcsim.core.results import trace_entry
    from vgcsim.models.scenario import best_rows, crossover_table, method_from_trace, time_sources
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
            "time_sources": time_sources(cfg),
        },
    )
    return ScenarioRun(df, cross, text)


#: Traces committed for the demo, installed with the package (their README has the commands).
DEMO_TRACES = Path(__file__).resolve().parent / "data" / "demo_traces"
#: Where :func:`demo` takes its traces from (``DemoConfig.traces``).
DEMO_TRACE_SOURCES = ("committed", "record")
#: Methods the demo can record: name -> (compressor, hyperparameters). The paper's settings:
#: variance α = 2 (Algorithm 1), Strom's threshold τ, QSGD with 2 bits and buckets of 128.
DEMO_METHODS: dict[str, tuple[str, dict[str, Any]]] = {
    "dense": ("dense", {}),
    "variance": ("variance", {"alpha": 2.0}),
    "strom": ("strom", {"tau": 0.01}),
    "qsgd": ("qsgd", {"bits": 2, "bucket_size": 128}),
    "hybrid": ("hybrid", {"alpha": 2.0, "tau": 0.01}),
}
DEMO_COMPUTE_MODES = ("trace", "model")
#: The demo's world sizes: its own default (P = 1 is the single-worker baseline of its plots;
#: it stops at 256 to keep the whole job within minutes on two cores).
DEMO_WORLD_SIZES = "1,2:256:x2"
#: Paper-size workloads the demo synthesizes: layer list of ``vgcsim trace synth`` -> name.
PAPER_NETS = {"resnet50": "ResNet-50", "vgg_like": "VGG-like"}
#: Encodings of the synthesized traces: those with closed-form sizes (the gap codes' exact
#: lengths cost seconds per step at ResNet-50 size).
PAPER_ENCODINGS = ("packed32", "coo64", "bitmap")
#: Fields that only shape a recording (must keep their defaults with committed traces).
DEMO_RECORD_FIELDS = ("steps", "workers", "batch_size", "eval_every", "seed", "lr_milestones")
#: What the demo writes into its folder.
DEMO_FOLDERS = ("traces", "results", "report")


@dataclass(frozen=True)
class DemoConfig:
    """What :func:`demo` evaluates (every field settable with ``--set key=value``).

    traces: "committed" reads the traces committed in vgcsim/data/demo_traces (recorded
    with the settings below), "record" records them into OUT/traces. steps, workers,
    batch_size, eval_every, seed, lr_milestones (Adam's learning rate × 0.1 at each):
    the recording (default workload of ``vgcsim record`` otherwise; a step schedule, so
    that the first steps of a recording do not depend on its length). methods: keys of
    DEMO_METHODS. clusters: cluster presets or TOML files. compute: "model" times
    forward/backward on each cluster's device, "trace" uses the CPU times measured while
    recording. sim_steps: steps replayed per world size (0: all). target_accuracy: test
    accuracy in percent for the time-to-accuracy table (0: the dense trace's final
    accuracy minus 1 point). paper_nets: paper-size workloads (layer lists of ``vgcsim
    trace synth``: resnet50, vgg_like; empty: none) synthesized with paper_steps steps at
    the density the recorded variance trace settles to (its mean over the last 20 % of
    steps), their compute modelled from their own FLOPs on each cluster's device, and
    predicted beside the recorded toy.
    """

    traces: str = "committed"
    steps: int = 500
    workers: int = 4
    batch_size: int = 32
    eval_every: int = 25
    seed: int = 0
    lr_milestones: tuple[int, ...] = (300, 400)
    methods: tuple[str, ...] = ("dense", "variance", "strom", "qsgd")
    clusters: tuple[str, ...] = ("1GbE", "10GbE", "IB-EDR")
    world_sizes: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64, 128, 256)
    compute: str = "model"
    sim_steps: int = 0
    target_accuracy: float = 0.0
    paper_nets: tuple[str, ...] = ("resnet50", "vgg_like")
    paper_steps: int = 20


@dataclass(frozen=True)
class DemoRun:
    """What :func:`demo` returns: the ``config`` it ran, the ``traces`` it read (method ->
    run folder: committed, recorded or reused) and the paper-size traces it
    ``synthesized`` (net -> run folder), the result folders (``results``: predicted and
    simulated, in the report's order), the ``report`` (its index.html), the ``headline``
    (what the numbers rest on: model, steps, each method's readings and accuracy), the
    report's ``notes`` (the headline with where the traces come from first, the clusters
    and compute last) and its ``summary`` (the verdict lines, wins first)."""

    config: DemoConfig
    traces: dict[str, Path]
    synthesized: dict[str, Path]
    results: tuple[Path, ...]
    report: Path
    headline: str
    notes: tuple[str, ...]
    summary: tuple[str, ...]


def demo_config(
    overrides: Sequence[str] = (),
    *,
    config: DemoConfig | None = None,
    world_sizes: Sequence[int] | str | None = None,
) -> DemoConfig:
    """``config`` (default :class:`DemoConfig`) with ``overrides`` applied: ``key=value``
    strings as ``vgcsim demo --set`` takes them (``"methods=[\\"dense\\",\\"variance\\"]"``,
    ``"clusters=10GbE"``; a misspelt key is refused with the valid ones), then
    ``world_sizes`` (a list or a ``--world-sizes`` string such as ``"2,4"``) when given."""
    from vgcsim.core.config import apply_overrides

    cfg = apply_overrides(config if config is not None else DemoConfig(), list(overrides))
    if world_sizes is not None:
        from dataclasses import replace

        cfg = replace(cfg, world_sizes=_world_sizes(world_sizes))
    return cfg


def _demo_record_config(cfg: DemoConfig, method: str) -> Any:
    """The :class:`~vgcsim.traces.training.record_config.RecordConfig` the demo records
    ``method`` with."""
    from vgcsim.traces.training.record_config import CompressorConfig, OptimConfig, RecordConfig

    name, params = DEMO_METHODS[method]
    return RecordConfig(
        compressor=CompressorConfig(name=name, params=dict(params)),
        optimizer=OptimConfig(schedule="step", milestones=tuple(cfg.lr_milestones)),
        workers=cfg.workers,
        batch_size=cfg.batch_size,
        steps=cfg.steps,
        seed=cfg.seed,
        eval_every=cfg.eval_every,
        chunk_steps=100,  # as the committed traces (their test re-records one chunk)
    )


def _demo_check(cfg: DemoConfig) -> None:
    """Refuse a demo configuration :func:`demo` cannot run, in one line (ConfigError)."""
    import math

    from vgcsim.core.errors import ConfigError, unknown_name

    for m in cfg.methods:
        if m not in DEMO_METHODS:
            raise unknown_name("demo method", m, DEMO_METHODS)
    if cfg.compute not in DEMO_COMPUTE_MODES:
        raise unknown_name("compute mode", cfg.compute, DEMO_COMPUTE_MODES)
    if cfg.traces not in DEMO_TRACE_SOURCES:
        raise unknown_name("demo trace source", cfg.traces, DEMO_TRACE_SOURCES)
    target = cfg.target_accuracy
    if target and not (math.isfinite(target) and 1.0 < target <= 100.0):
        raise ConfigError(f"target_accuracy is a percentage in (1, 100] or 0, got {target:g}")
    if cfg.traces == "committed":
        changed = [f for f in DEMO_RECORD_FIELDS if getattr(cfg, f) != getattr(DemoConfig(), f)]
        if changed:
            raise ConfigError(
                f"{', '.join(changed)} {'applies' if len(changed) == 1 else 'apply'} only to "
                "traces the demo records: add "
                "--set traces=record (the committed traces were recorded with the defaults)"
            )
        missing = [m for m in cfg.methods if not (DEMO_TRACES / m / "header.json").is_file()]
        if missing:
            raise ConfigError(
                f"no committed demo trace for {', '.join(missing)} in {DEMO_TRACES}: "
                "add --set traces=record to record it"
            )
    if not cfg.clusters or not cfg.world_sizes or not cfg.methods:
        raise ConfigError("methods, clusters and world_sizes must not be empty")
    if any(int(p) < 1 for p in cfg.world_sizes):
        raise ConfigError("world_sizes must be >= 1")
    if cfg.steps < 1 or cfg.workers < 1 or cfg.sim_steps < 0 or cfg.paper_steps < 1:
        raise ConfigError("steps, workers and paper_steps must be >= 1, sim_steps >= 0")
    for net in cfg.paper_nets:
        if net not in PAPER_NETS:
            raise unknown_name("paper-size net", net, PAPER_NETS)
    try:  # batch_size, seed, eval_every: checked where the recorder checks them
        _demo_record_config(cfg, cfg.methods[0])
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


def _demo_reusable(run_dir: Path, record_cfg: Any) -> bool:
    """True when ``run_dir`` holds a complete trace recorded with ``record_cfg``."""
    import json

    from vgcsim.core.config import to_dict
    from vgcsim.core.errors import TraceError
    from vgcsim.traces.io import read_header
    from vgcsim.traces.training.record import resolve_config

    def normalized(obj: Any) -> Any:
        return json.loads(json.dumps(obj, sort_keys=True, default=str))

    if not (run_dir / "header.json").is_file():
        return False
    try:
        header = read_header(run_dir)
    except TraceError:
        return False
    return header.get("status") == "complete" and normalized(header.get("config")) == (
        normalized(to_dict(resolve_config(record_cfg)))
    )


def _legacy_demo(out: Path) -> list[str] | None:
    """A demo folder written before folder markers existed: its report and results folders."""
    if (out / "report" / "report.json").is_file() and (out / "results").is_dir():
        return [name for name in DEMO_FOLDERS if (out / name).exists()]
    return None


def _paper_traces(
    cfg: DemoConfig, traces: Mapping[str, Trace], where: Path, done: Callable[[str], None]
) -> dict[str, Path]:
    """Synthesize each of ``cfg.paper_nets`` at the recorded variance trace's settled density
    (its workers, per-worker batch and seed) into ``where/<net>``, calling ``done`` after
    each; none without a variance trace."""
    from vgcsim.reports.demo_notes import settled_density
    from vgcsim.traces.synth import SynthConfig, synth_trace

    if "variance" not in traces or not cfg.paper_nets:
        return {}
    var = traces["variance"]
    density = settled_density(var)
    out = {}
    for net in cfg.paper_nets:
        synth = SynthConfig(
            layers=net,
            workers=int(var.workers),
            steps=cfg.paper_steps,
            seed=cfg.seed,
            compressor="variance",
            density=density,
            encodings=PAPER_ENCODINGS,
            primary_encoding="packed32",
            batch_size_per_worker=int(var.header.get("batch_size_per_worker") or 32),
            chunk_steps=cfg.paper_steps,
        )
        out[net] = synth_trace(synth, where / net, overwrite=True)
        done(f"synthesized {net} at {density * 100:.2g} % density -> {out[net]}")
    return out


def demo(
    config: DemoConfig | None = None,
    out_dir: str | Path = "out/demo",
    *,
    overrides: Sequence[str] = (),
    world_sizes: Sequence[int] | str | None = None,
    overwrite: bool = False,
    progress: Callable[[int, int, str], None] | None = None,
    command: Sequence[str] | None = None,
) -> DemoRun:
    """The main job end to end, what ``vgcsim demo`` runs: traces, predict, simulate, report.

    ``config`` (default :class:`DemoConfig`) with ``overrides`` and ``world_sizes`` applied
    as :func:`demo_config` does; a configuration the demo cannot run is refused before
    anything is written. Stages talk only through files in ``out_dir``, in one direction::

        vgcsim/data/demo_traces/<method>/             committed traces (default), or
        out_dir/traces/<method>/                      recorded (real training, W workers)
        out_dir/traces/synthesized/<net>/             paper-size traces (with a variance trace)
        out_dir/results/predicted/<method>-<cluster>/ closed-form models read the trace
        out_dir/results/simulated/<method>-<cluster>/ the discrete-event simulator reads it
        out_dir/report/index.html                     the report reads results and traces

    With ``traces="record"`` a trace is reused when its folder holds a *complete* trace
    recorded with the same configuration; anything else is recorded again (that needs the
    training extra: :class:`MissingExtraError` otherwise, before any folder is made). Each
    compressed trace is predicted and simulated on every cluster; the paper-size traces
    are predicted only, their compute modelled from their own FLOPs.

    ``out_dir`` is checked and marked as every vgcsim output folder (``overwrite`` as for
    :func:`save`); ``command`` is the line the result headers record (default
    ``vgcsim.api.demo``). ``progress(done, total, what)`` is called after each stage step
    (and the recorder shows its own progress when it is given).
    """
    import json
    from dataclasses import replace

    from vgcsim.core.options import PredictOptions, SimulateConfig
    from vgcsim.core.outdir import prepare_output

    cfg = demo_config(overrides, config=config, world_sizes=world_sizes)
    _demo_check(cfg)
    if cfg.traces == "record":
        # a core install stops here, in one line naming the extra, before any folder is made
        # (the committed traces need no torch) and before the report's plotting stack loads
        with _TrainingExtra("recording demo traces "):
            from vgcsim.traces.training.record import record as _record
    from vgcsim.reports.demo_notes import demo_headline, demo_labels, paper_note
    from vgcsim.reports.render import render_report

    clusters = [load_cluster(c, compute=cfg.compute) for c in cfg.clusters]  # before -o is made
    folder = prepare_output(
        out_dir, "vgcsim demo", overwrite=overwrite, files=DEMO_FOLDERS, legacy=_legacy_demo
    )
    out = folder.path
    line = list(command) if command is not None else ["vgcsim.api.demo"]
    sizes = tuple(sorted({int(p) for p in cfg.world_sizes}))
    compressed = [m for m in cfg.methods if DEMO_METHODS[m][0] != "dense"]
    total = len(cfg.methods) + 2 * len(compressed) * len(clusters) + 1
    if cfg.traces == "committed":
        total -= len(cfg.methods)
    if "variance" in cfg.methods:
        total += len(cfg.paper_nets) * (1 + len(clusters))
    done = 0

    def say(msg: str) -> None:
        nonlocal done
        done += 1
        if progress is not None:
            progress(done, total, msg)

    def saved(df: pd.DataFrame, where: Path, trace: Trace, cluster: ClusterSpec) -> Path:
        return save(
            df, where, trace, cluster, overwrite=overwrite, command=line, writer="vgcsim demo"
        )

    # 1. the committed traces, or record (or reuse) one trace per method
    trace_dirs: dict[str, Path] = {}
    for method in cfg.methods:
        if cfg.traces == "committed":
            trace_dirs[method] = DEMO_TRACES / method
            continue
        run_dir = out / "traces" / method
        rcfg = _demo_record_config(cfg, method)
        if _demo_reusable(run_dir, rcfg):
            say(f"reusing complete trace {run_dir}")
        else:
            say(f"recording {method}: {cfg.steps} steps, {cfg.workers} workers -> {run_dir}")
            _record(rcfg, run_dir, progress=progress is not None, overwrite=True)
        trace_dirs[method] = run_dir

    # 2. predict and simulate every compressed trace on every cluster, through files
    result_dirs: list[Path] = []
    sim_cfg = SimulateConfig(world_sizes=sizes, max_steps=cfg.sim_steps)
    for method in compressed:
        trace = load_trace(trace_dirs[method])
        for cluster in clusters:
            tag = f"{method}-{cluster.name}"
            predicted = predict(trace, cluster, config=PredictOptions(world_sizes=sizes))
            simulated = simulate(trace, cluster, config=sim_cfg)
            for source, df in (("predicted", predicted), ("simulated", simulated)):
                result_dirs.append(saved(df, out / "results" / source / tag, trace, cluster))
                say(f"{source} {tag} for P = {sizes[0]}..{sizes[-1]}")

    # 3. paper-size workloads, synthesized at the recorded variance trace's settled
    #    density, predicted with compute modelled from their own FLOPs
    traces = {m: load_trace(d) for m, d in trace_dirs.items()}
    synthesized = _paper_traces(cfg, traces, out / "traces" / "synthesized", say)
    for net, run_dir in synthesized.items():
        trace = load_trace(run_dir)
        for cluster in clusters:
            model_cluster = replace(cluster, compute="model")
            df = predict(trace, model_cluster, config=PredictOptions(world_sizes=sizes))
            dest = out / "results" / "predicted" / f"{net}-{cluster.name}"
            result_dirs.append(saved(df, dest, trace, model_cluster))
            say(f"predicted {net}-{cluster.name} (synthesized) for P = {sizes[0]}..{sizes[-1]}")

    # 4. report from the result folders and the traces
    compute_note = (
        "forward/backward time modelled from the traces' FLOPs on each cluster's device "
        f"({', '.join(sorted({c.device.name for c in clusters}))})"
        if cfg.compute == "model"
        else "forward/backward, variance and codec times as measured on the recording CPU"
    )
    where = (
        "committed with the project (vgcsim/data/demo_traces, installed with the package; "
        "recorded by `vgcsim record`, commands in its README)"
        if cfg.traces == "committed"
        else f"recorded into {out / 'traces'}"
    )
    headline = demo_headline(traces, cfg.methods)
    notes = [
        f"{headline} Traces {where}.",
        f"Clusters: {', '.join(c.name for c in clusters)}; P = {', '.join(map(str, sizes))}. "
        f"Compute: {compute_note}.",
    ]
    if synthesized:
        notes.insert(1, paper_note(synthesized, traces["variance"], PAPER_NETS))
    html = report_folder(
        out / "report",
        lambda where: render_report(
            result_dirs,
            list(trace_dirs.values()),  # the synthesized ones have nothing to validate
            where,
            title="vgcsim demo report",
            notes=notes,
            target_accuracy=cfg.target_accuracy / 100 if cfg.target_accuracy else None,
            labels=demo_labels(traces, synthesized, PAPER_NETS),
        ),
        overwrite,
        command="demo",
    )
    folder.commit()
    say(f"report written to {html.parent}")
    summary = json.loads((html.parent / "report.json").read_text(encoding="utf-8"))
    return DemoRun(
        config=cfg,
        traces=trace_dirs,
        synthesized=synthesized,
        results=tuple(result_dirs),
        report=html,
        headline=headline,
        notes=tuple(notes),
        summary=tuple(summary.get("summary", [])),
    )


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


# -- what the commands print and pass on, from the stages -------------------------------------


def parse_algorithms(text: str, op: str) -> tuple[str, ...]:
    """``"ring,bruck"`` or ``"all"`` → the algorithm names of ``op`` ("allreduce" or
    "allgatherv"), each checked against the collectives' registry
    (:func:`vgcsim.models.predict.parse_algorithms`); ConfigError names the valid ones."""
    from vgcsim.models.predict import parse_algorithms as parse

    return parse(text, op)


def replay_text(frame: pd.DataFrame, trace: Trace, *, crossover: bool = False) -> list[str]:
    """What ``vgcsim predict`` and ``vgcsim simulate`` print about a result frame, in one
    format: the mean rows (P, method, encoding, collective, comm, decode, step, speedup over
    dense fp32; :func:`vgcsim.models.predict.summarize`), one verdict line (where the trace's
    compressed allgatherv beats dense fp32 allreduce, in the report's words:
    :func:`vgcsim.reports.tables.headline`) and, with ``crossover``, the line saying where
    the sparse allreduce stops paying (:func:`vgcsim.models.predict.sparse_crossover`),
    where the frame has one."""
    from vgcsim.core.results import finalize_results, without_attrs
    from vgcsim.models.predict import sparse_crossover, summarize

    frame = without_attrs(frame)  # the text needs the rows only
    extra = sparse_crossover(frame) if crossover else None
    df = finalize_results(frame)
    return [summarize(df), _verdict(df, trace), *([extra] if extra else [])]


def _verdict(df: pd.DataFrame, trace: Trace) -> str:
    """One line: where the trace's compressed allgatherv beats dense fp32 allreduce, in the
    report's words (:func:`vgcsim.reports.tables.headline`, naming what decides it)."""
    from vgcsim.reports import tables
    from vgcsim.traces.labels import method_label

    comp = trace.header.get("compressor") or {}
    labels = {trace.name: method_label(str(comp.get("name", trace.compressor)), comp.get("params"))}
    wi = tables.what_if(df, labels)
    lines = [
        s
        for s in tables.headline(wi, breakdown_table=tables.breakdown(df, labels))
        if not s.startswith("On ") or " dense allreduce of " not in s
    ]
    if not lines:
        return "verdict: no compressed exchange to compare with dense allreduce (a dense trace)"
    return "verdict: " + " ".join(lines)


def simulate_units(config: SimulateConfig, trace: str | Path | Trace) -> int:
    """How many step replays :func:`simulate_run` with ``config`` makes on ``trace`` (its
    ``progress`` callback counts up to this; :func:`vgcsim.simulator.replay.replay_units`)."""
    from vgcsim.simulator.replay import replay_units

    return int(replay_units(config, config.world_sizes, load_trace(trace).steps_count))


def timeline_files(timelines: Sequence[Any]) -> dict[str, Callable[[Path], Any]]:
    """The files a simulate run's timelines make, as :func:`save`'s ``files``: ``timeline.json``
    (Chrome trace format, :func:`vgcsim.simulator.timeline.write_chrome_trace`) and
    ``links.csv`` (bytes per link and step); empty without timelines."""
    if not timelines:
        return {}
    import pandas as pd

    from vgcsim.simulator.timeline import write_chrome_trace

    links = pd.concat([t.link_table() for t in timelines], ignore_index=True)
    return {
        "timeline.json": lambda p: write_chrome_trace(timelines, p),
        "links.csv": lambda p: links.to_csv(p, index=False),
    }


def advice_text(advice: Any) -> str:
    """:func:`advise`'s answer as Markdown (the ranking, the per-bucket mixes and one
    recommendation per cluster and P: :func:`vgcsim.reports.advice_text.advice_markdown`)."""
    from vgcsim.reports.advice_text import advice_markdown

    return advice_markdown(advice.ranked, advice.mixes, advice.recommendations)


@dataclass(frozen=True)
class ReportRun:
    """What :func:`report_run` returns: the HTML page's ``path``, the report's first
    ``summary`` lines, how many ``plots`` and ``tables`` it holds, the inputs' ``caveats``
    (each also a note on the page) and the traces it could not find (``missing``)."""

    path: Path
    summary: list[str]
    plots: int
    tables: int
    caveats: list[str]
    missing: list[str]


def report_run(
    results: Sequence[str | Path],
    traces: Sequence[str | Path] = (),
    out_dir: str | Path = "out/report",
    *,
    title: str = "vgcsim report",
    overwrite: bool = False,
    target_accuracy: float | None = None,
    command: str = "api.report",
) -> ReportRun:
    """:func:`report` with what the page was made from: result tables and traces read
    (:func:`vgcsim.reports.render.load_inputs`; ``target_accuracy`` a fraction in (0, 1]
    for the time-to-accuracy tables), every section built and the folder written
    (``out_dir`` checked and marked as ``vgcsim command``'s)."""
    from vgcsim.core.errors import ConfigError
    from vgcsim.reports.render import build_report, load_inputs, write_report

    if not isinstance(title, str):
        raise ConfigError(f"title must be a string, got {title!r}")
    if not isinstance(out_dir, (str, os.PathLike)):
        raise ConfigError(f"out_dir must be a folder path, got {out_dir!r}")
    _accuracy(target_accuracy)
    results = _listed(results, "results")
    traces = _listed(traces, "traces")
    inputs = load_inputs(results, traces, target_accuracy=target_accuracy)
    built = build_report(inputs)
    path = report_folder(
        out_dir, lambda out: write_report(built, out, title=title), overwrite, command=command
    )
    return ReportRun(
        path,
        list(built.summary),
        len(built.plots),
        len(built.tables),
        list(inputs.caveats),
        list(inputs.missing),
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
    out.commit_changed(before, replace=True)  # no plot or table of an earlier report stays
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

    def __post_init__(self) -> None:
        from vgcsim.core.errors import ConfigError

        for name in ("allreduce", "allgatherv"):
            value = getattr(self, name)
            if value is not None and not (isinstance(value, str) and value.strip()):
                raise ConfigError(f"{name} {value!r} names no algorithm")


def _measured_method(trace: Trace) -> str:
    """``"dense"`` (all_reduce was measured) or ``"compressed"`` (allgatherv was measured)."""
    return "dense" if trace.compressor == "dense" else "compressed"


def _measured_allgatherv(trace: Trace) -> str:
    """The algorithm the measured allgatherv is: the trace's own exchange for traces the DDP
    hook wrote (:func:`vgcsim.traces.inputs.default_allgatherv`, bounded); else what the
    recorder ran, padded on gloo and uneven (ring) on NCCL."""
    from vgcsim.traces.inputs import default_allgatherv, is_hook_trace

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
    from vgcsim.traces.inputs import host_overhead_s

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


def _check_same_job(trace: Trace, second: Trace) -> None:
    """Two hook traces whose winner is called: one job (layers, dataset, ranks) under two
    methods, else ConfigError naming what differs."""
    from vgcsim.core.errors import ConfigError
    from vgcsim.models.advise import model_and_data

    names = f"({trace.name}, {second.name})"
    if (model_and_data(trace), trace.workers) != (model_and_data(second), second.workers):
        raise ConfigError(
            "the winner is called between two methods of one job: these traces' layers, "
            f"datasets or ranks differ {names}"
        )
    if trace.compressor == second.compressor and (trace.header["compressor"].get("params")) == (
        second.header["compressor"].get("params")
    ):
        raise ConfigError(
            "the winner is called between two methods of one job: these traces ran the same "
            f"method {names}"
        )


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
    from vgcsim.reports.validation import SOURCES, collective_text
    from vgcsim.traces.calibration import (
        check_statistic,
        parse_sizes,
        read_measurements,
        select_rows,
    )

    check_statistic(statistic)
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
        + (f", by gathered size at {len(table)} points" if table else "")
        + (f", {link.allgatherv_host_s * 1e6:.1f} us a call" if link.allgatherv_host_s else "")
        + ")"
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
    if second is not None:
        _check_same_job(trace, second)
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

    _accuracy(target_accuracy)
    traces = _listed(traces, "traces")
    if isinstance(clusters, (str, Path, ClusterSpec)):
        clusters = [clusters]
    if not clusters:
        raise ConfigError("advise needs at least one cluster")
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


# ---------------------------------------------------------------- calibrate: fit a link, write it


class CalibrationError(VgcsimError):
    """The measurements do not pin the link well enough to write a cluster file; ``run`` is the
    refused :class:`CalibrationRun` (its table and report) where the fit got that far."""

    def __init__(self, message: str, run: CalibrationRun | None = None) -> None:
        super().__init__(message)
        self.run = run


@dataclass(frozen=True)
class CalibrationDefaults:
    """The calibration's vocabulary and defaults, for a caller that builds options: the ops a
    sweep can time (``ops``), those it times by default (``default_ops``), the statistics over
    repetitions (``statistics``), the sweep's ``passes`` and timed ``repeats`` per size, and
    the largest typical fit error written without ``force`` (``max_error``)."""

    ops: tuple[str, ...]
    default_ops: tuple[str, ...]
    statistics: tuple[str, ...]
    passes: int
    max_error: float
    repeats: int


def calibration_defaults() -> CalibrationDefaults:
    """The calibration's op names, statistics and defaults (:class:`CalibrationDefaults`)."""
    from vgcsim.traces.calibration import (
        DEFAULT_MAX_ERROR,
        DEFAULT_OPS,
        DEFAULT_PASSES,
        DEFAULT_REPEATS,
        OPS,
        STATISTICS,
    )

    return CalibrationDefaults(
        tuple(OPS),
        tuple(DEFAULT_OPS),
        tuple(STATISTICS),
        DEFAULT_PASSES,
        DEFAULT_MAX_ERROR,
        DEFAULT_REPEATS,
    )


@dataclass(frozen=True)
class CalibrationRun:
    """What :func:`fit_calibration`, :func:`calibrate_from` and :func:`calibrate` return.

    - ``fit``: the link written as ``[link]`` (a :class:`vgcsim.models.linkfit.LinkFit`; its
      CPU-time terms divided by the host sharing they were measured under, where any);
      ``intra``: the ``[intra_link]`` fit from the ping-pong inside a node, or None.
    - ``table``: one row per (op, size): measured and fitted seconds, relative error, role;
      ``errors``: the typical error per op (predicted from the fit where not fitted);
      ``switch``: where the p2p times step between two regimes (None: no step, or the fit's
      size segments price it); ``repeatability``: per op, the typical error of the even
      repetitions' statistic against the odd ones'
      (:func:`vgcsim.traces.calibration.repeatability`), what the measurements can tell.
    - ``toml``: the cluster file's text (``vgcsim.core.clusterfile.cluster_toml``), read back
      by ``--cluster FILE`` and :func:`load_cluster`.
    - ``report``: the table and the fit lines as ``vgcsim calibrate`` prints them; ``notes``:
      lines about what was done to the fit before writing it.
    - ``out``, ``plot``, ``measurements``: the files written or read (None where none).
    """

    fit: Any
    intra: Any | None
    table: list[dict]
    errors: dict[str, float]
    switch: dict | None
    toml: str
    report: str
    notes: tuple[str, ...] = ()
    out: Path | None = None
    plot: Path | None = None
    measurements: Path | None = None
    repeatability: dict[str, float] = field(default_factory=dict)

    @property
    def worst(self) -> Any:
        """The fit (link or intra-node link) with the larger typical error."""
        fits = [f for f in (self.fit, self.intra) if f is not None]
        return max(fits, key=lambda f: f.typical_error)

    @property
    def typical_error(self) -> float:
        """The larger typical error (exp of the rms log ratio, minus one) of the fits."""
        return float(self.worst.typical_error)


def _unshared(world_size: int, hosts: tuple[int, int], host_sharing: str) -> float:
    """The sharing factor ranks of a ``world_size`` job (≥ 2, as every measurement file
    holds) ran under, ``hosts`` = (ranks_per_host, host_cores), one thread each, by
    ``host_sharing``, which the written file names
    (``vgcsim.core.clusterspec.sharing_factor``; an unknown rule is refused)."""
    from vgcsim.core.clusterspec import sharing_factor

    return sharing_factor(min(hosts[0], world_size), 1, hosts[1], host_sharing)


def fit_calibration(
    measurements: str | Path | Mapping[str, Any],
    *,
    statistic: str = "median",
    fit_ops: Sequence[str] = (),
    sizes: str | Sequence[int] | None = None,
    name: str | None = None,
    device: str = "cpu",
    hosts: tuple[int, int] = (1, 0),
    host_sharing: str = "fullest-core",
    burst_bytes: float = 0.0,
    note: str | None = None,
) -> CalibrationRun:
    """Fit the α-β-γ link of calibration measurements (a measurement file, or its contents as
    a dict) and build the cluster file's text, writing nothing.

    ``statistic``: ``"median"`` (what a step sees) or ``"min"`` over repetitions.
    ``fit_ops``: the ops that fix α and β (empty, the default: β from p2p; α from the small
    allreduces, γ from the large ones, the allgatherv host cost from allgatherv, its padded
    share from allgatherv_skewed). ``sizes``: the measured sizes to fit (``"MIN:MAX"`` or a
    list, as ``--sizes`` takes them; None: all). ``name`` (default
    ``calibrated-BACKEND-P``), ``device`` (a device preset), ``hosts`` = (ranks_per_host,
    host_cores) the measured ranks shared (host_cores 0: not shared; otherwise the fitted
    CPU-time terms are divided by the sharing factor of ``host_sharing``, ``"fullest-core"``
    or ``"fair"`` (``vgcsim.core.cluster.host_share``), and the file says so),
    ``burst_bytes`` (a host link's token bucket: the fit prices the collectives' rows with
    it, :func:`vgcsim.models.linkfit.fit_link`, and the file gets it where > 0) and ``note`` (the file's
    first line after its marker) go into the file. A fit without a per-byte cost is a
    :class:`CalibrationError`.
    """
    import dataclasses

    from vgcsim.core.clusterfile import cluster_toml
    from vgcsim.core.errors import unknown_name
    from vgcsim.models.linkfit import fit_intra_link, fit_link, op_errors, protocol_switch
    from vgcsim.reports.calibration import calibration_text
    from vgcsim.traces.calibration import (
        OPS,
        check_statistic,
        parse_sizes,
        read_measurements,
        repeatability,
        select_rows,
    )

    check_statistic(statistic)
    from vgcsim.core.presets import get_device

    get_device(device)  # an unknown preset is refused before any fitting or writing
    chosen = set(fit_ops)
    for op in sorted(chosen):
        if op not in OPS:
            raise unknown_name("fit op", str(op), OPS)
    path = None
    if isinstance(measurements, (str, Path)):
        path = Path(measurements)
        doc = read_measurements(path)
        told = f"measurements from {path.name}"
    else:
        doc = dict(measurements)
        told = "measurements given"
    if sizes:
        if isinstance(sizes, str):
            picked, bounds = parse_sizes(sizes)
            told += f", sizes {sizes}"
        else:
            picked, bounds = tuple(int(s) for s in sizes), None
            told += ", sizes " + ",".join(str(s) for s in picked)
        doc = select_rows(doc, sizes=picked, bounds=bounds)
    # the sharing the ranks were measured under (an unknown rule is refused here)
    share = _unshared(int(doc["world_size"]), hosts, host_sharing)
    fit, table = fit_link(
        doc,
        statistic,
        ops=sorted(chosen - {"p2p_intra"}) or None,
        gamma_op=None if chosen else "allreduce",
        host_op=None if chosen else "allgatherv",
        latency_op=None if chosen else "allreduce",
        share_op=None if chosen else "allgatherv_skewed",
        # ranks that shared cores: the collectives' bytes may show the host's CPU rate (σ)
        comm_cpu=not chosen and share > 1.0,
        burst_bytes=burst_bytes,
    )
    if fit.bandwidth_Bps == float("inf"):
        raise CalibrationError(
            "the fit found no per-byte cost (beta = 0); include larger --sizes so the "
            "bandwidth term shows"
        )
    intra_fit = fit_intra_link(doc, statistic)
    intra = None
    if intra_fit is not None:
        intra, intra_table = intra_fit
        table = table + intra_table
    errors = op_errors(table)
    switch = None if fit.segments else protocol_switch(table)  # segments price the steps
    repeat = repeatability(doc["rows"], statistic)
    report = calibration_text(table, fit, intra, errors, switch, repeat)
    nodes = doc.get("nodes") or [0] * int(doc["world_size"])
    notes: tuple[str, ...] = ()
    if share != 1.0:
        notes = (
            f"CPU-time terms divided by {share:.3g}, the host sharing ({host_sharing}) they "
            "were measured under",
        )
        fit = dataclasses.replace(
            fit,
            call_overhead_s=fit.call_overhead_s / share,
            gamma_s_per_byte=fit.gamma_s_per_byte / share,
            allgatherv_host_s_per_byte=fit.allgatherv_host_s_per_byte / share,
            allgatherv_host_s=fit.allgatherv_host_s / share,
            comm_cpu_s_per_byte=fit.comm_cpu_s_per_byte / share,
            allgatherv_host_s_per_byte_table=tuple(
                (b, v / share) for b, v in fit.allgatherv_host_s_per_byte_table
            ),
        )
    text = cluster_toml(
        name or f"calibrated-{fit.backend}-{fit.world_size}",
        fit,
        device,
        told if note is None else note,
        intra,
        nodes.count(nodes[0]),
        (int(hosts[0]), int(hosts[1])),
        float(burst_bytes),
        host_sharing,
    )
    return CalibrationRun(
        fit,
        intra,
        table,
        errors,
        switch,
        text,
        report,
        notes,
        measurements=path,
        repeatability=repeat,
    )


def _calibration_output(out: Path, overwrite: bool) -> None:
    """Refuse ``out`` where it is a folder, a file calibrate did not write, or one it did
    without ``overwrite``; create its folder."""
    from vgcsim.core.clusterfile import WRITTEN_BY_CALIBRATE
    from vgcsim.core.errors import ConfigError
    from vgcsim.core.outdir import OutputError

    if out.is_dir():
        raise ConfigError(f"{out} is a folder; give the cluster TOML file to write")
    if out.exists():
        try:
            with open(out, encoding="utf-8", errors="replace") as fh:
                first = fh.readline()
        except OSError:
            first = ""
        if not first.startswith(WRITTEN_BY_CALIBRATE):
            raise OutputError(
                f"{out} exists and was not written by vgcsim calibrate; not replacing it"
            )
        if not overwrite:
            raise OutputError(
                f"{out} already holds a cluster file from vgcsim calibrate; pass --overwrite to "
                "replace it, or choose another -o"
            )
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"{out}: cannot create its folder ({exc.strerror})") from None


def _write_calibration(
    run: CalibrationRun, out: Path, max_error: float | None, force: bool, plot: bool
) -> CalibrationRun:
    """Save the fit's plot (``OUT.fit.png``), refuse a fit whose typical error exceeds
    ``max_error`` (unless ``force``), write ``run.toml`` to ``out`` and read it back."""
    import dataclasses

    from vgcsim.core.cluster import load_cluster as _load
    from vgcsim.core.errors import ConfigError
    from vgcsim.core.outdir import atomic_write, atomic_write_text
    from vgcsim.traces.calibration import DEFAULT_MAX_ERROR

    limit = DEFAULT_MAX_ERROR if max_error is None else max_error
    if not limit > 0:
        raise ConfigError(f"max_error must be positive, got {limit}")
    png = None
    if plot:
        from vgcsim.reports.calibration import plot_fit

        png = out.with_name(out.stem + ".fit.png")
        figure = plot_fit(run.table).figure
        atomic_write(png, lambda p: figure.savefig(p, dpi=120, format="png"))
        run = dataclasses.replace(run, plot=png)
    worst = run.worst
    if worst.typical_error > limit and not force:
        raise CalibrationError(
            f"fit error too large: typical error {worst.typical_error:.0%} on "
            f"{'+'.join(worst.fit_ops)} exceeds --max-error {limit:.0%}; {out} not "
            "written (see the table; refit a size range with --from FILE --sizes MIN:MAX, or "
            "--force)",
            run,
        )
    # read back what predict/simulate will read, before it replaces anything: a file that
    # does not load fails here, and ``out`` keeps what it held
    check = out.with_name(f".{out.name}.check.toml")
    try:
        atomic_write_text(check, run.toml)
        _load(str(check))
        os.replace(check, out)
    finally:
        check.unlink(missing_ok=True)
    return dataclasses.replace(run, out=out)


def calibrate_from(
    measurements: str | Path,
    out: str | Path,
    *,
    max_error: float | None = None,
    force: bool = False,
    overwrite: bool = False,
    plot: bool = True,
    **fit_options: Any,
) -> CalibrationRun:
    """Fit a measurement file written earlier (``FILE.measurements.json`` of a calibration,
    or a torchrun job's) and write the cluster file ``out``, its fit plot beside it
    (``OUT.fit.png``, unless ``plot=False``).

    ``fit_options`` are those of :func:`fit_calibration` (``statistic``, ``fit_ops``,
    ``sizes``, ``name``, ``device``, ``hosts``, ``host_sharing``, ``burst_bytes``). A fit whose typical error
    exceeds ``max_error`` (default 0.25) is a :class:`CalibrationError` carrying the refused
    run, and ``out`` is not written, unless ``force``. ``out`` replaces only a file written
    by calibrate, and only with ``overwrite``.
    """
    out = Path(out)
    _calibration_output(out, overwrite)
    run = fit_calibration(measurements, **fit_options)
    return _write_calibration(run, out, max_error, force, plot)


def calibration_config(
    *,
    backend: str = "gloo",
    ops: str | Sequence[str] | None = None,
    sizes: str | Sequence[int] | None = None,
    repeats: int | None = None,
    warmup: int = 2,
    budget_s: float = 10.0,
    passes: int | None = None,
    busy_before_s: float | str = 0.0,
    overrides: Sequence[str] = (),
) -> Any:
    """The measurement sweep (a :class:`vgcsim.traces.calibration.CalibrateConfig`): ``ops``
    and ``sizes`` as lists or as the command line spells them (``"p2p,allreduce"``,
    ``"4:64MiB"``; None: the defaults; ``repeats`` and ``passes`` too; ``busy_before_s`` a
    number of seconds or a duration such as ``"8ms"``), then ``overrides`` (``key=value``
    strings as ``--set`` takes them); the backend is checked against this torch build."""
    from vgcsim.core.config import apply_overrides
    from vgcsim.core.units import parse_time_s
    from vgcsim.traces.calibration import (
        DEFAULT_OPS,
        DEFAULT_PASSES,
        DEFAULT_REPEATS,
        CalibrateConfig,
        default_sizes_bytes,
        parse_sizes,
    )
    from vgcsim.traces.training.distributed_launch import check_backend

    if isinstance(ops, str):
        ops = tuple(o.strip() for o in ops.split(",") if o.strip())
    if isinstance(sizes, str):
        sizes = parse_sizes(sizes)[0] if sizes else None
    cfg = CalibrateConfig(
        backend=backend,
        ops=DEFAULT_OPS if ops is None else tuple(ops),
        sizes_bytes=tuple(int(s) for s in sizes) if sizes else default_sizes_bytes(),
        repeats=DEFAULT_REPEATS if repeats is None else repeats,
        warmup=warmup,
        budget_s=budget_s,
        passes=DEFAULT_PASSES if passes is None else passes,
        busy_before_s=(
            parse_time_s(busy_before_s) if isinstance(busy_before_s, str) else busy_before_s
        ),
    )
    cfg = apply_overrides(cfg, list(overrides))
    check_backend(cfg.backend)
    return cfg


def _under_torchrun() -> bool:
    """True when this process was started as one rank of a torchrun-style job."""
    import os

    return all(k in os.environ for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"))


def calibrate(
    out: str | Path,
    sweep: Any = None,
    *,
    overrides: Sequence[str] = (),
    nprocs: int | None = None,
    nnodes: int = 1,
    node_rank: int = 0,
    master_addr: str = "127.0.0.1",
    master_port: int | None = None,
    iface: str | None = None,
    timeout_s: float = 1800.0,
    max_error: float | None = None,
    force: bool = False,
    overwrite: bool = False,
    plot: bool = True,
    **fit_options: Any,
) -> CalibrationRun | None:
    """Measure this network with real messages and collectives, fit the link and write the
    cluster file ``out`` (as :func:`calibrate_from`), keeping the measurements beside it
    (``OUT.measurements.json``).

    ``sweep``: what to measure, a :class:`vgcsim.traces.calibration.CalibrateConfig` or a
    dict of :func:`calibration_config`'s arguments (None: the defaults), with ``overrides``
    applied. Under torchrun (``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR``, ``MASTER_PORT`` set)
    this process is one rank and rank 0 fits; otherwise ``nprocs`` ranks start here (default
    2 on one node, 1 per node with ``nnodes``), every node runs the same call with its own
    ``node_rank`` and the same ``master_addr``/``master_port``, and node 0 fits. Returns
    None where this process or node only measured.
    """
    import json

    from vgcsim.core.config import apply_overrides, to_dict
    from vgcsim.core.errors import ConfigError, unknown_name
    from vgcsim.traces.calibration import CalibrateConfig
    from vgcsim.traces.training.distributed_launch import check_backend

    out = Path(out)
    _calibration_output(out, overwrite)
    if isinstance(sweep, CalibrateConfig):
        cfg = apply_overrides(sweep, list(overrides))
        check_backend(cfg.backend)
    else:
        # the sweep options are calibration_config's own keywords
        valid = tuple(
            k for k in inspect.signature(calibration_config).parameters if k != "overrides"
        )
        for key in sweep or {}:
            if key not in valid:
                raise unknown_name("calibration sweep option", str(key), valid)
        cfg = calibration_config(**dict(sweep or {}), overrides=overrides)
    meas_path = out.with_name(out.stem + ".measurements.json")
    if _under_torchrun():
        from vgcsim.traces.training.distributed_calibrate import run_rank

        if nnodes != 1 or node_rank != 0 or nprocs is not None:
            raise ConfigError(
                "started by torchrun: give the layout to torchrun, not --nnodes/--node-rank/--nprocs"
            )
        if run_rank(cfg, meas_path, iface) != 0:
            return None
    else:
        from vgcsim.traces.training import distributed_launch

        ranks = nprocs if nprocs is not None else (2 if nnodes == 1 else 1)
        if ranks * nnodes < 2:
            raise ConfigError(
                "--nprocs must be >= 2 (calibration times traffic between ranks), or give "
                "--nnodes >= 2"
            )
        # Each rank gets the sweep as the JSON of its config (what the measurement file records).
        argv = ["-m", "vgcsim.traces.training.distributed_calibrate"]
        argv += [json.dumps(to_dict(cfg)), str(meas_path)]
        distributed_launch.launch_local(
            argv,
            ranks,
            timeout_s=timeout_s,
            master_addr=master_addr,
            master_port=master_port,
            nnodes=nnodes,
            node_rank=node_rank,
            iface=iface,
        )
        if node_rank != 0:
            return None
    note = f"measurements in {meas_path.name}"
    run = fit_calibration(meas_path, note=note, **fit_options)
    return _write_calibration(run, out, max_error, force, plot)


@dataclass(frozen=True)
class CodecCalibrationRun:
    """What :func:`calibrate_codec` returns: the measured ``calibration`` (a
    :class:`vgcsim.traces.training.codec_calibrate.CodecCalibration`), its ``summary`` lines
    and the cluster file written (``out``)."""

    calibration: Any
    summary: str
    out: Path


def calibrate_codec(
    out: str | Path,
    *,
    device: str = "auto",
    preset: str = "cpu",
    repeats: int = 10,
    warmup: int = 2,
    name: str | None = None,
) -> CodecCalibrationRun:
    """Measure this device's memory bandwidth and launch overhead with torch kernels
    (``device``: ``"cpu"``, ``"cuda"`` or ``"auto"``) and write them as the ``[device]`` table
    of the cluster file ``out`` (the rest of an existing file is kept; ``preset``, a device
    preset, gives the peak FLOP/s and compute efficiency). Needs the training extra."""
    from vgcsim.core.cluster import get_device
    from vgcsim.core.errors import ConfigError
    from vgcsim.traces.training.codec_calibrate import (
        measure_device,
        resolve_device,
        summary,
        write_device_entry,
    )

    out = Path(out)
    if out.is_dir():
        raise ConfigError(f"{out} is a folder; give the cluster TOML file to write")
    resolved = resolve_device(device)
    get_device(preset)
    if resolved == "cuda" and preset == "cpu":
        raise ConfigError("--codec on cuda: name the GPU's preset with --device-preset (e.g. H100)")
    out.parent.mkdir(parents=True, exist_ok=True)
    cal = measure_device(resolved, repeats=repeats, warmup=warmup)
    write_device_entry(out, cal, preset=preset, name=name)
    return CodecCalibrationRun(cal, summary(cal), out)
