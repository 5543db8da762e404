"""``vgcsim trace``: inspect (info), check (validate) and synthesise (synth) trace run directories."""

from __future__ import annotations

import argparse
import json
import math
import sys
from typing import Any

from vgcsim.commands import add_out_option, add_set_option

HELP = "inspect, validate or synthesise compression traces"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="trace_command", metavar="ACTION", required=True)

    info = sub.add_parser(
        "info", help="steps, workers, layers, compression ratios, density, accuracy"
    )
    info.add_argument("run", metavar="RUN", help="trace run directory")
    info.add_argument("--json", action="store_true", help="print the summary as JSON")
    info.add_argument("--per-layer", action="store_true", help="also list per-layer ratios")
    add_out_option(info, "also write the summary as a JSON file", required=False)

    val = sub.add_parser(
        "validate", help="check schema version and invariants; exit 2 on any violation"
    )
    val.add_argument("run", metavar="RUN", nargs="+", help="trace run directory")
    add_out_option(val, "also write each run's verdict to a JSON file", required=False)

    syn = sub.add_parser(
        "synth",
        help="write a synthetic trace from a layer list and a density model",
        description=(
            "Write a synthetic trace (header synthetic=true) for what-if analysis. Layer lists: "
            "resnet50, vgg_like, or a JSON file. Any SynthConfig key can be set with --set, "
            "e.g. --set density_model=exp_decay --set worker_cv=0.3."
        ),
    )
    add_out_option(syn, "output run directory")
    syn.add_argument("--layers", help="built-in layer list (resnet50, vgg_like) or JSON file")
    syn.add_argument("--workers", type=int, help="emulated workers W")
    syn.add_argument("--steps", type=int, help="steps to write")
    syn.add_argument(
        "--ratio", type=float, help="target compression ratio (dense bits / sent bits)"
    )
    syn.add_argument("--density", type=float, help="target density (fraction of elements sent)")
    syn.add_argument(
        "--compressor", help="compressor label for the header (dense writes fp32 payloads)"
    )
    syn.add_argument("--seed", type=int, help="random seed")
    syn.add_argument("--config", help="TOML file with SynthConfig keys")
    add_set_option(syn)


def run(args: argparse.Namespace) -> int:
    return {"info": _info, "validate": _validate, "synth": _synth}[args.trace_command](args)


def _fmt_ratio(x: float) -> str:
    return "inf" if math.isinf(x) else f"{x:,.1f}x"


def _info(args: argparse.Namespace) -> int:
    from vgcsim import api

    info = api.trace_info(args.run)
    if args.out is not None:
        from vgcsim.core.outdir import write_json_output

        summary = json.loads(json.dumps(_strict(info), default=_json_default))
        write_json_output(args.out, "vgcsim trace info", summary, overwrite=args.overwrite)
    if args.json:
        print(json.dumps(_strict(info), indent=2, default=_json_default, allow_nan=False))
        return 0
    print(_render_info(info, with_layers=args.per_layer))
    return 0


def _strict(obj: Any) -> Any:
    """``obj`` with non-finite floats spelled as strict JSON allows: inf as "inf", NaN as
    null (json.dumps writes them as the non-JSON tokens Infinity/NaN, never via ``default``)."""
    if isinstance(obj, dict):
        return {k: _strict(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_strict(v) for v in obj]
    if isinstance(obj, float) and not math.isfinite(obj):
        return None if math.isnan(obj) else ("inf" if obj > 0 else "-inf")
    return obj


def _json_default(obj: Any) -> Any:
    if hasattr(obj, "item"):
        return obj.item()
    if isinstance(obj, float) and math.isinf(obj):
        return "inf"
    raise TypeError(type(obj).__name__)


def _recording_lines(info: dict[str, Any]) -> list[str]:
    """model, optimizer, device and CPU lines of ``trace info`` (what was recorded)."""
    rec = info["recording"]
    data = rec["dataset"] or {}
    sizes = ", ".join(f"{data[k]:,} {k}" for k in ("train", "test") if isinstance(data.get(k), int))
    classes = f", {data['num_classes']} classes" if data.get("num_classes") else ""
    on = f" on {data['name']}" + (f" ({sizes}{classes})" if sizes else "") if data else ""
    lines = [f"model      {rec['model'] or 'not recorded'} ({info['parameters']:,} parameters){on}"]
    opt = rec["optimizer"]
    if opt:
        extra = []
        if opt.get("schedule"):
            extra.append(f"schedule {opt['schedule']}")
        if isinstance(opt.get("milestones"), list) and opt["milestones"]:
            extra.append(f"milestones {', '.join(map(str, opt['milestones']))}")
        lr = opt.get("lr")
        lines.append(
            f"optimizer  {opt.get('name', '?')}, lr "
            + (f"{lr:g}" if isinstance(lr, int | float) else "?")
            + (f" ({', '.join(extra)})" if extra else "")
        )
    if not info["synthetic"]:
        dev = rec["device"] or {}
        threads = dev.get("threads")
        lines.append(
            f"device     {dev.get('type', 'not recorded')}"
            + (f": {dev['name']}" if dev.get("name") else "")
            + (f" ({threads} thread{'s' if threads != 1 else ''})" if threads else "")
        )
        cpu = rec["cpu_model"] or f"not recorded (processor {rec['processor'] or '?'})"
        lines.append(f"cpu        {cpu}")
    return lines


def _render_info(info: dict[str, Any], with_layers: bool) -> str:
    comp = info["compressor"]
    params = ", ".join(f"{k}={v}" for k, v in comp.get("params", {}).items())
    lines = [
        f"trace      {info['path']}" + ("  (synthetic)" if info["synthetic"] else ""),
        f"status     {info['state_line']}",
    ]
    if info["divergence"]:
        lines.append(f"DIVERGED   {info['divergence']['reason']}")
    lines += _recording_lines(info)
    lines += [
        f"compressor {comp['name']}" + (f" ({params})" if params else ""),
    ]
    if info["recording"]["reading"]:
        lines.append(f"reading    {info['recording']['reading']}")
    lines += [
        f"workers    {info['workers']} x {info['batch_size_per_worker']} samples/step",
        f"steps      {info['steps']}",
        f"layers     {info['layers']} tensors, {info['parameters']:,} parameters "
        f"({info['dense_bytes_per_step'] / 1e6:.3f} MB fp32 per worker per step)",
        f"density    {info['density']:.3g} (elements sent / elements)",
        "compression ratio (dense fp32 bits / sent bits):",
    ]
    for enc, r in info["compression_ratio"].items():
        mark = "  (primary)" if enc == info["primary_encoding"] else ""
        lines.append(f"  {enc:<16} {_fmt_ratio(r)}{mark}")
    lines.append("density over time:")
    for d in info["density_over_time"]:
        lines.append(f"  steps {d['steps'][0]:>6}-{d['steps'][1]:<6} {d['density']:.4g}")
    ev = info["final_eval"]
    if ev:
        lines.append(
            f"final eval step {ev['step']}: train acc {ev['train_acc']:.4f}, test acc {ev['test_acc']:.4f}, "
            f"test loss {ev['test_loss']:.4f}"
        )
    if info["final_loss"] is not None and not info["synthetic"]:
        lines.append(f"final loss {info['final_loss']:.4f}")
    secs = info["seconds"]
    if secs:
        lines.append(
            "measured seconds (all workers): " + ", ".join(f"{k} {v:.2f}" for k, v in secs.items())
        )
    if with_layers:
        encs = list(info["compression_ratio"])
        lines.append("per layer (compression ratio under each encoding):")
        head = f"  {'#':>3} {'name':<36} {'numel':>11} {'density':>8}"
        lines.append(head + "".join(f" {e[:16]:>16}" for e in encs))
        for row in info["per_layer"]:
            cells = ""
            for e in encs:
                r = row.get(f"ratio_{e}")
                ok = r is not None and not (isinstance(r, float) and math.isnan(r))
                cells += f" {_fmt_ratio(r) if ok else 'n/a':>16}"
            lines.append(
                f"  {row['layer']:>3} {row['name'][:36]:<36} {row['numel']:>11,} {row['density']:>8.4f}"
                + cells
            )
    return "\n".join(lines)


def _validate(args: argparse.Namespace) -> int:
    from vgcsim import api

    if args.out is not None:
        from vgcsim.core.outdir import check_output_file

        check_output_file(args.out, "vgcsim trace validate", overwrite=args.overwrite)
    checks = []  # every run is checked and reported; exit 2 when any is invalid
    said: list[tuple[bool, str]] = []  # (to stderr, line), printed after -o is written
    for run_dir in args.run:
        check = api.validate_trace(run_dir)
        checks.append(check)
        if not check.valid:
            said.append((True, f"vgcsim trace validate: error: {check.error}"))
            continue
        t = check.trace
        note = "" if check.state == "complete" else f" (status {check.state_line}: a valid prefix)"
        diverged = f"; DIVERGED: {check.divergence['reason']}" if check.divergence else ""
        said.append(
            (
                False,
                f"{check.run}: valid — {t.steps_count} steps, {t.workers} workers, "
                f"{len(t.layers)} layers{note}{diverged}",
            )
        )
    if args.out is not None:  # written before anything is printed: a closed pipe loses nothing
        from vgcsim.core.outdir import write_json_output

        data = {"runs": [check.to_dict() for check in checks]}
        write_json_output(args.out, "vgcsim trace validate", data, overwrite=args.overwrite)
    for to_stderr, line in said:
        print(line, file=sys.stderr if to_stderr else sys.stdout)
    return 2 if any(not check.valid for check in checks) else 0


def _synth(args: argparse.Namespace) -> int:
    from vgcsim import api
    from vgcsim.core.errors import ConfigError

    if args.ratio is not None and args.density is not None:
        raise ConfigError("--ratio and --density both set how much is sent; give one")

    flags = {
        "layers": args.layers,
        "workers": args.workers,
        "steps": args.steps,
        "target_ratio": args.ratio,
        "density": args.density,
        "compressor": args.compressor,
        "seed": args.seed,
    }
    path = api.synth_trace(
        args.config or None,
        args.out,
        overrides=[f"{k}={v}" for k, v in flags.items() if v is not None] + list(args.set),
        overwrite=args.overwrite,
    )
    print(f"wrote synthetic trace {path}")
    return 0
