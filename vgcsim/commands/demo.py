"""``vgcsim demo``: the main job end to end — traces, predict, simulate, report.

Stages talk only through files, in one direction::

    vgcsim/data/demo_traces/<method>/         committed traces (default), or
    OUT/traces/<method>/                      record (real training, W emulated workers)
    OUT/results/predicted/<method>-<cluster>/ closed-form models read the trace
    OUT/results/simulated/<method>-<cluster>/ the discrete-event simulator reads the trace
    OUT/report/index.html                     the report reads result tables and traces

By default the demo reads traces committed with the project and installed with the
package (:data:`DEMO_TRACES`): recorded by ``vgcsim record`` long enough for the variance
compressor's density to settle (the commands are in the README beside them; recording
them takes longer than the demo's time budget on two cores). With ``--set traces=record`` it records them itself with the same settings. A
recorded trace is reused when its folder holds a *complete* trace recorded with the same
configuration; anything else (missing, interrupted, other settings) is recorded again.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from vgcsim.commands import add_out_option, add_set_option, add_world_sizes_option

if TYPE_CHECKING:  # annotations only
    from vgcsim.traces.reading import Trace

HELP = (
    "predict and simulate real traces (dense, variance α=2, Strom, QSGD; committed, or "
    "recorded with --set traces=record) on 1GbE, 10GbE and 100 Gb InfiniBand for P up to "
    "256, and write the HTML report"
)

#: Traces committed for the demo, installed with the package (their README has the commands).
DEMO_TRACES = Path(__file__).resolve().parents[1] / "data" / "demo_traces"
TRACE_SOURCES = ("committed", "record")

#: Methods the demo can record: name -> (compressor, hyperparameters). The paper's settings:
#: variance α = 2 (Algorithm 1), Strom's threshold τ, QSGD with 2 bits and buckets of 128.
DEMO_METHODS: dict[str, tuple[str, dict[str, Any]]] = {
    "dense": ("dense", {}),
    "variance": ("variance", {"alpha": 2.0}),
    "strom": ("strom", {"tau": 0.01}),
    "qsgd": ("qsgd", {"bits": 2, "bucket_size": 128}),
    "hybrid": ("hybrid", {"alpha": 2.0, "tau": 0.01}),
}
COMPUTE_MODES = ("trace", "model")
#: The demo's world sizes: its own default (P = 1 is the single-worker baseline of its plots;
#: it stops at 256 to keep the whole job within minutes on two cores).
DEMO_WORLD_SIZES = "1,2:256:x2"
#: Paper-size workloads the demo synthesizes: layer list of ``vgcsim trace synth`` -> name.
PAPER_NETS = {"resnet50": "ResNet-50", "vgg_like": "VGG-like"}
#: Encodings of the synthesized traces: those with closed-form sizes (the gap codes' exact
#: lengths cost seconds per step at ResNet-50 size).
PAPER_ENCODINGS = ("packed32", "coo64", "bitmap")
#: Fields that only shape a recording (must keep their defaults with committed traces).
RECORD_FIELDS = ("steps", "workers", "batch_size", "eval_every", "seed", "lr_milestones")


@dataclass(frozen=True)
class DemoConfig:
    """What the demo evaluates (every field settable with ``--set key=value``).

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


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_set_option(
        parser,
        "set a demo option: traces (committed|record), steps, workers, batch_size, "
        "eval_every, seed, lr_milestones, methods, clusters, world_sizes, compute "
        "(model|trace), sim_steps, target_accuracy (percent), paper_nets (resnet50, "
        "vgg_like; [] for none), paper_steps",
        dest="overrides",
    )
    add_world_sizes_option(parser, default=DEMO_WORLD_SIZES)
    add_out_option(
        parser,
        "output folder (traces/ when recorded, results/, report/; --overwrite to run it "
        "again into the same folder)",
        default="out/demo",
    )
    parser.add_argument("-q", "--quiet", action="store_true", help="no progress output")


def _check(cfg: DemoConfig) -> None:
    from vgcsim.core.errors import ConfigError, unknown_name

    for m in cfg.methods:
        if m not in DEMO_METHODS:
            raise unknown_name("demo method", m, DEMO_METHODS)
    if cfg.compute not in COMPUTE_MODES:
        raise unknown_name("compute mode", cfg.compute, COMPUTE_MODES)
    if cfg.traces not in TRACE_SOURCES:
        raise unknown_name("demo trace source", cfg.traces, TRACE_SOURCES)
    if cfg.target_accuracy:
        from vgcsim.commands.report import target_fraction

        target_fraction(cfg.target_accuracy)
    if cfg.traces == "committed":
        changed = [f for f in RECORD_FIELDS if getattr(cfg, f) != getattr(DemoConfig(), f)]
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
        _record_config(cfg, cfg.methods[0])
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


def _record_config(cfg: DemoConfig, method: str):
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


def _normalized(obj: Any) -> Any:
    return json.loads(json.dumps(obj, sort_keys=True, default=str))


def _reusable(run_dir: Path, record_cfg: Any) -> bool:
    """True when ``run_dir`` holds a complete trace recorded with ``record_cfg``."""
    from vgcsim.core.config import to_dict
    from vgcsim.core.errors import TraceError
    from vgcsim.traces.io import read_header
    from vgcsim.traces.training.record import resolve_config

    if not (run_dir / "header.json").is_file():
        return False
    try:
        header = read_header(run_dir)
    except TraceError:
        return False
    return header.get("status") == "complete" and _normalized(header.get("config")) == (
        _normalized(to_dict(resolve_config(record_cfg)))
    )


class _Progress:
    def __init__(self, quiet: bool, total: int) -> None:
        self.quiet, self.total, self.done, self.t0 = quiet, total, 0, time.monotonic()

    def __call__(self, msg: str) -> None:
        self.done += 1
        if not self.quiet:
            elapsed = time.monotonic() - self.t0
            print(f"[{self.done}/{self.total} {elapsed:5.0f} s] {msg}", file=sys.stderr, flush=True)


#: What the demo writes into its folder.
DEMO_FOLDERS = ("traces", "results", "report")


def _legacy_demo(out: Path) -> list[str] | None:
    """A demo folder written before folder markers existed: its report and results folders."""
    if (out / "report" / "report.json").is_file() and (out / "results").is_dir():
        return [name for name in DEMO_FOLDERS if (out / name).exists()]
    return None


def _cluster(name: str, compute: str):
    from vgcsim.core.cluster import load_cluster

    spec = load_cluster(name)
    return replace(spec, compute=compute) if spec.compute != compute else spec


def run(args: argparse.Namespace) -> int:
    from vgcsim.commands import settings
    from vgcsim.core.config import apply_overrides

    overrides = settings(args.overrides)
    if args.world_sizes is not None:
        overrides += settings([f"world_sizes={args.world_sizes}"])
    cfg = apply_overrides(DemoConfig(), overrides)
    _check(cfg)

    from vgcsim import api
    from vgcsim.core.options import PredictOptions, SimulateConfig
    from vgcsim.core.outdir import prepare_output
    from vgcsim.reports.render import render_report
    from vgcsim.traces.io import read_trace

    if cfg.traces == "record":
        # needs the training extra: a core install stops here, in one line naming it,
        # before any folder is made (the committed traces need no torch)
        from vgcsim.traces.training.record import record

    folder = prepare_output(
        args.out,
        "vgcsim demo",
        overwrite=args.overwrite,
        files=DEMO_FOLDERS,
        legacy=_legacy_demo,
    )
    out = folder.path
    sizes = tuple(sorted({int(p) for p in cfg.world_sizes}))
    clusters = [_cluster(c, cfg.compute) for c in cfg.clusters]
    compressed = [m for m in cfg.methods if DEMO_METHODS[m][0] != "dense"]
    steps_total = len(cfg.methods) + 2 * len(compressed) * len(clusters) + 1
    if cfg.traces == "committed":
        steps_total -= len(cfg.methods)
    if "variance" in cfg.methods:
        steps_total += len(cfg.paper_nets) * (1 + len(clusters))
    say = _Progress(args.quiet, steps_total)
    command = ["vgcsim", "demo", *sys.argv[2:]] if len(sys.argv) > 1 else ["vgcsim", "demo"]

    # 1. the committed traces, or record (or reuse) one trace per method
    trace_dirs: dict[str, Path] = {}
    for method in cfg.methods:
        if cfg.traces == "committed":
            trace_dirs[method] = DEMO_TRACES / method
            continue
        run_dir = out / "traces" / method
        rcfg = _record_config(cfg, method)
        if _reusable(run_dir, rcfg):
            say(f"reusing complete trace {run_dir}")
        else:
            say(f"recording {method}: {cfg.steps} steps, {cfg.workers} workers -> {run_dir}")
            record(rcfg, run_dir, progress=not args.quiet, overwrite=True)
        trace_dirs[method] = run_dir

    # 2. predict and simulate every compressed trace on every cluster, through files
    result_dirs: list[Path] = []
    sim_cfg = SimulateConfig(world_sizes=sizes, max_steps=cfg.sim_steps)
    for method in compressed:
        trace = read_trace(trace_dirs[method])
        for cluster in clusters:
            tag = f"{method}-{cluster.name}"
            predicted = api.predict(trace, cluster, config=PredictOptions(world_sizes=sizes))
            simulated = api.simulate(trace, cluster, config=sim_cfg)
            for source, df in (("predicted", predicted), ("simulated", simulated)):
                result_dirs.append(
                    api.save(
                        df,
                        out / "results" / source / tag,
                        trace,
                        cluster,
                        overwrite=args.overwrite,
                        command=command,
                        writer="vgcsim demo",
                    )
                )
                say(f"{source} {tag} for P = {sizes[0]}..{sizes[-1]}")

    # 3. paper-size workloads, synthesized at the recorded variance trace's settled
    #    density, predicted with compute modelled from their own FLOPs
    traces = {m: read_trace(d) for m, d in trace_dirs.items()}
    synthesized = _paper_traces(cfg, traces, out / "traces" / "synthesized")
    for net, run_dir in synthesized.items():
        trace = read_trace(run_dir)
        for cluster in clusters:
            model_cluster = replace(cluster, compute="model")
            result_dirs.append(
                api.save(
                    api.predict(trace, model_cluster, config=PredictOptions(world_sizes=sizes)),
                    out / "results" / "predicted" / f"{net}-{cluster.name}",
                    trace,
                    model_cluster,
                    overwrite=args.overwrite,
                    command=command,
                    writer="vgcsim demo",
                )
            )
            say(f"predicted {net}-{cluster.name} (synthesized) for P = {sizes[0]}..{sizes[-1]}")

    # 4. report from the result folders and the traces
    labels = _labels(traces, synthesized)
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
    notes = [
        demo_headline(traces, cfg.methods) + f" Traces {where}.",
        f"Clusters: {', '.join(c.name for c in clusters)}; P = {', '.join(map(str, sizes))}. "
        f"Compute: {compute_note}.",
    ]
    if synthesized:
        notes.insert(1, paper_note(synthesized, traces["variance"]))
    html = api.report_folder(
        out / "report",
        lambda where: render_report(
            result_dirs,
            list(trace_dirs.values()),  # the synthesized ones have nothing to validate
            where,
            title="vgcsim demo report",
            notes=notes,
            target_accuracy=cfg.target_accuracy / 100 if cfg.target_accuracy else None,
            labels=labels,
        ),
        args.overwrite,
        command="demo",
    )
    folder.commit()
    say(f"report written to {html.parent}")
    summary = json.loads((html.parent / "report.json").read_text(encoding="utf-8"))
    # the verdicts first (wins lead them), then what they rest on
    for line in summary.get("summary", [])[:4]:
        print(line)
    for note in notes[:-1]:
        print(note)
    print(html)
    return 0


def _settled_density(trace: Trace) -> float:
    """A trace's mean density over its last 20 % of steps (where the variance compressor's
    density has settled)."""
    steps = trace.steps.sort_values("step")
    return float(steps["density"].iloc[-max(1, len(steps) // 5) :].mean())


def _paper_traces(cfg: DemoConfig, traces: dict[str, Trace], where: Path) -> dict[str, Path]:
    """Synthesize each of ``cfg.paper_nets`` at the recorded variance trace's settled density
    (its workers, per-worker batch and seed) into ``where/<net>``; none without a variance
    trace."""
    from vgcsim.traces.synth import SynthConfig, synth_trace

    if "variance" not in traces or not cfg.paper_nets:
        return {}
    var = traces["variance"]
    density = _settled_density(var)
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
    return out


def _labels(traces: dict[str, Trace], synthesized: dict[str, Path]) -> dict[str, str]:
    """Report labels saying which rows are recorded (the toy) and which synthesized."""
    from vgcsim.traces.labels import method_label

    labels = {}
    model = "?"
    for t in traces.values():
        comp = t.header.get("compressor") or {}
        model = ((t.header.get("config") or {}).get("model") or {}).get("name", "?")
        label = method_label(str(comp.get("name", t.compressor)), comp.get("params"))
        labels[t.name] = f"{label} on recorded {model}"
    var = traces.get("variance")
    if var is not None:
        comp = var.header.get("compressor") or {}
        label = method_label("variance", comp.get("params"))
        for net, path in synthesized.items():
            labels[Path(path).name] = f"{label} on synthesized {PAPER_NETS[net]}"
    return labels


def paper_note(synthesized: dict[str, Path], variance: Trace) -> str:
    """The paragraph saying how the paper-size rows were made."""
    from vgcsim.traces.synth import load_layers

    nets = []
    for net in synthesized:
        layers, flops = load_layers(net)
        n = sum(int(layer["numel"]) for layer in layers)
        nets.append(
            f"{PAPER_NETS[net]} ({n / 1e6:.1f} M parameters, {flops / 1e9:.2g} GFLOP/sample)"
        )
    return (
        f"Paper-size rows: {' and '.join(nets)} synthesized (`vgcsim trace synth`) at "
        f"{_settled_density(variance) * 100:.2g} % density, the recorded variance trace's "
        "mean over its last 20 % of steps; their compute, codec and decode times are "
        "modelled from their own sizes and FLOPs on each cluster's device; predicted "
        "(closed form) only."
    )


def _reading(params: dict[str, Any]) -> str:
    """The post-send reading of a variance/hybrid compressor, e.g. "after_send=reset"."""
    from vgcsim.traces.labels import compressor_reading

    return compressor_reading("variance", params) or "reading not recorded"


def demo_headline(traces: dict[str, Trace], methods: tuple[str, ...] | list[str]) -> str:
    """What the demo's numbers rest on: model, parameter count, steps, readings, accuracy.

    e.g. "small_cnn (38,282 parameters) on mnist, 500 steps of 4 workers × 32 samples;
    test accuracy: dense 98.4 %, variance α=2 (after_send=reset, below_floor=keep,
    variance_scale=batch_mean; density 2.1 % over all steps, 1.2 % over the last 20 %)
    97.9 %, …"
    """
    from vgcsim.reports.tables import final_accuracy
    from vgcsim.traces.labels import method_label

    first = traces[methods[0]]
    config = first.header.get("config") or {}
    n_params = sum(int(layer["numel"]) for layer in first.layers)
    parts = []
    for m in methods:
        t = traces[m]
        comp = t.header.get("compressor") or {}
        params = dict(comp.get("params") or {})
        label = method_label(str(comp.get("name", m)), params)
        detail = []
        if comp.get("name") in ("variance", "hybrid"):
            detail.append(_reading(params))
        steps = t.steps.sort_values("step")
        if comp.get("name") != "dense" and len(steps) and "density" in steps:
            last = steps["density"].iloc[-max(1, len(steps) // 5) :].mean()
            if steps["density"].mean() < 1.0:
                detail.append(
                    f"density {steps['density'].mean() * 100:.2g} % over all steps, "
                    f"{last * 100:.2g} % over the last 20 %"
                )
        acc = final_accuracy(t.evals)
        acc_s = "not evaluated" if acc != acc else f"{acc * 100:.1f} %"
        details = f" ({'; '.join(detail)})" if detail else ""
        parts.append(f"{label}{details} {acc_s}")
    return (
        f"{config.get('model', {}).get('name', '?')} ({n_params:,} parameters) on "
        f"{config.get('data', {}).get('name', '?')}, {first.steps_count} steps of "
        f"{first.workers} workers × {first.header.get('batch_size_per_worker', '?')} samples; "
        f"final test accuracy: {', '.join(parts)}."
    )
