"""``vgcsim demo``: the main job end to end — record, predict, simulate, report.

Stages talk only through files, in one direction::

    OUT/traces/<method>/                      record (real training, W emulated workers)
    OUT/results/predicted/<method>-<cluster>/ closed-form models read the trace
    OUT/results/simulated/<method>-<cluster>/ the discrete-event simulator reads the trace
    OUT/report/index.html                     the report reads result tables and traces

A trace is reused when its folder holds a *complete* trace recorded with the same
configuration; anything else (missing, interrupted, other settings) is recorded again.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from vgcsim.commands import add_set_option

HELP = (
    "record short real traces (dense, variance α=2, Strom, QSGD), predict and simulate them "
    "on 1GbE, 10GbE and 100 Gb InfiniBand for P up to 256, and write the HTML report"
)

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


@dataclass(frozen=True)
class DemoConfig:
    """What the demo records and evaluates (every field settable with ``--set key=value``).

    steps, workers, batch_size, eval_every, seed: the recording (default workload of
    ``vgcsim record`` otherwise). methods: keys of DEMO_METHODS. clusters: cluster presets
    or TOML files. compute: "model" times forward/backward on each cluster's device from
    the trace's FLOPs (codec and variance scaled by the same factor), "trace" uses the
    CPU times measured while recording. sim_steps: steps replayed per world size (0: all).
    """

    steps: int = 60
    workers: int = 4
    batch_size: int = 32
    eval_every: int = 10
    seed: int = 0
    methods: tuple[str, ...] = ("dense", "variance", "strom", "qsgd")
    clusters: tuple[str, ...] = ("1GbE", "10GbE", "IB-EDR")
    world_sizes: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64, 128, 256)
    compute: str = "model"
    sim_steps: int = 0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-o", "--out", default="out/demo", help="output folder (default: out/demo)")
    add_set_option(
        parser,
        "set a demo option: steps, workers, batch_size, eval_every, seed, methods, "
        "clusters, world_sizes, compute (model|trace), sim_steps",
        dest="overrides",
    )
    parser.add_argument("-q", "--quiet", action="store_true", help="no progress output")


def _check(cfg: DemoConfig) -> None:
    from traces.errors import ConfigError, unknown_name

    for m in cfg.methods:
        if m not in DEMO_METHODS:
            raise unknown_name("demo method", m, DEMO_METHODS)
    if cfg.compute not in COMPUTE_MODES:
        raise unknown_name("compute mode", cfg.compute, COMPUTE_MODES)
    if not cfg.clusters or not cfg.world_sizes or not cfg.methods:
        raise ConfigError("methods, clusters and world_sizes must not be empty")
    if any(int(p) < 1 for p in cfg.world_sizes):
        raise ConfigError("world_sizes must be >= 1")
    if cfg.steps < 1 or cfg.workers < 1 or cfg.sim_steps < 0:
        raise ConfigError("steps and workers must be >= 1, sim_steps >= 0")
    try:  # batch_size, seed, eval_every: checked where the recorder checks them
        _record_config(cfg, cfg.methods[0])
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


def _record_config(cfg: DemoConfig, method: str):
    from traces.training.record_config import CompressorConfig, RecordConfig

    name, params = DEMO_METHODS[method]
    return RecordConfig(
        compressor=CompressorConfig(name=name, params=dict(params)),
        workers=cfg.workers,
        batch_size=cfg.batch_size,
        steps=cfg.steps,
        seed=cfg.seed,
        eval_every=cfg.eval_every,
    )


def _normalized(obj: Any) -> Any:
    return json.loads(json.dumps(obj, sort_keys=True, default=str))


def _reusable(run_dir: Path, record_cfg: Any) -> bool:
    """True when ``run_dir`` holds a complete trace recorded with ``record_cfg``."""
    from traces.config import to_dict
    from traces.errors import TraceError
    from traces.io import read_header
    from traces.training.record import resolve_config

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


def _cluster(name: str, compute: str):
    from traces.cluster import load_cluster

    spec = load_cluster(name)
    return replace(spec, compute=compute) if spec.compute != compute else spec


def run(args: argparse.Namespace) -> int:
    from traces.config import apply_overrides, to_dict

    cfg = apply_overrides(DemoConfig(), args.overrides)
    _check(cfg)

    from models.predict import PredictOptions, options_dict, predict_trace, trace_entry
    from reports.render import render_report
    from simulator.replay import SimulateConfig, simulate_trace
    from traces.cluster import cluster_to_dict
    from traces.io import read_trace
    from traces.results import finalize_results, results_header, write_results
    from traces.training.record import record

    out = Path(args.out)
    sizes = tuple(sorted({int(p) for p in cfg.world_sizes}))
    clusters = [_cluster(c, cfg.compute) for c in cfg.clusters]
    compressed = [m for m in cfg.methods if DEMO_METHODS[m][0] != "dense"]
    steps_total = len(cfg.methods) + 2 * len(compressed) * len(clusters) + 1
    say = _Progress(args.quiet, steps_total)
    command = ["vgcsim", "demo", *sys.argv[2:]] if len(sys.argv) > 1 else ["vgcsim", "demo"]

    # 1. record (or reuse) one trace per method
    trace_dirs: dict[str, Path] = {}
    for method in cfg.methods:
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
    sim_cfg = SimulateConfig(max_steps=cfg.sim_steps)
    for method in compressed:
        trace = read_trace(trace_dirs[method])
        batch = trace.header.get("batch_size_per_worker")
        for cluster in clusters:
            tag = f"{method}-{cluster.name}"
            opts = PredictOptions(world_sizes=sizes)
            df = predict_trace(trace, cluster, opts)
            header = results_header(
                source="predicted",
                traces=[trace_entry(trace)],
                cluster=cluster_to_dict(cluster),
                extrapolation={"rule": opts.rule, "seed": None},
                options=options_dict(opts),
                command=command,
            )
            result_dirs.append(write_results(df, out / "results" / "predicted" / tag, header))
            say(f"predicted {tag} for P = {sizes[0]}..{sizes[-1]}")

            df, _, info = simulate_trace(trace, cluster, sizes, sim_cfg)
            df = finalize_results(df, batch_size_per_worker=int(batch) if batch else None)
            header = results_header(
                source="simulated",
                traces=[trace_entry(trace)],
                cluster=cluster_to_dict(cluster),
                extrapolation={"rule": sim_cfg.rule, "seed": None},
                options={**to_dict(sim_cfg), "world_sizes": list(sizes), "paths_run": info},
                command=command,
            )
            result_dirs.append(write_results(df, out / "results" / "simulated" / tag, header))
            say(f"simulated {tag} for P = {sizes[0]}..{sizes[-1]}")

    # 3. report from the result folders and the traces
    first = read_trace(trace_dirs[cfg.methods[0]]).header["config"]
    compute_note = (
        "forward/backward time modelled from the traces' FLOPs on each cluster's device "
        f"({', '.join(sorted({c.device.name for c in clusters}))}); variance and codec times "
        "scaled by the same factor"
        if cfg.compute == "model"
        else "forward/backward, variance and codec times as measured on this machine's CPU"
    )
    notes = [
        f"Traces: {cfg.steps} steps of {first['model']['name']} on {first['data']['name']}, "
        f"{cfg.workers} emulated workers × {cfg.batch_size} samples, seed {cfg.seed}. "
        f"Clusters: {', '.join(c.name for c in clusters)}; P = {', '.join(map(str, sizes))}.",
        f"Compute: {compute_note}.",
    ]
    html = render_report(
        result_dirs,
        list(trace_dirs.values()),
        out / "report",
        title="vgcsim demo report",
        notes=notes,
    )
    say(f"report written to {html.parent}")
    summary = (html.parent / "report.json").read_text(encoding="utf-8")
    for line in json.loads(summary).get("summary", [])[:3]:
        print(line)
    print(html)
    return 0
