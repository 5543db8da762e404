"""Real DDP jobs over shaped links against vgcsim's prediction: the fidelity benchmark.

    python benchmarks/real_ddp.py --json            # needs root, ip and tc; else says why, exit 0
    python benchmarks/real_ddp.py --rates 1gbit --world-sizes 2,4 --models mlp

A user's own DDP script (``benchmarks/ddp_job.py``: an MLP whose step the exchange dominates
on slow links and a CNN whose step is mostly compute, MNIST, SGD, batch 32 per rank) runs for
real, one rank per network namespace (``tests/distributed/_netns.py``), every host's link
shaped by ``tc tbf`` at each ``--rates`` value (``unshaped``: no shaper), at P = 2, 3, 4, with
plain DDP, torch's fp16 hook and vgcsim's variance hook (α = 2).

**The what-if is the test.** Each model is traced once, by vgcsim's hook
(``register_vgc_hook(trace_dir=...)``), at one setup (``--trace-setup``, default unshaped,
P = 2): the variance hook's own trace for the variance method, the hook with the ``dense``
compressor for plain DDP and fp16. Every setup is then predicted from those traces and the
setup's own cluster file, measured by ``vgcsim calibrate`` across the setup's namespaces
(``--host-cores`` the machine's cores and ``--ranks-per-host`` P: every namespace shares this
machine's cores; ``--burst`` the shaper's token bucket, which the sweep does not measure),
with ``vgcsim predict --compute trace``: plain DDP as the dense fp32
allreduce row, fp16 as the dense fp16 row, the variance hook as the compressed row priced
with the hook's own exchange (``allgatherv/bounded``), each anchored on the trace setup's own
cluster file (``--anchor``: the median of the traced steps' measured wall time less their
price there is added to every step; ``--no-anchor`` leaves it out). Measured and predicted
step times are medians over the timed steps.

``--cal-busy trace`` calibrates each setup once per model instead, every rank working that
model's traced compute per step (the plain job's median ``rank_compute_s``) before each timed
operation (``vgcsim calibrate --busy-before``): the exchange as a training step meets it,
after its work, where the default times the operations back to back.

``--engine simulate`` prices every setup with ``vgcsim simulate`` instead of ``vgcsim predict``
(the same flags). ``--from DIR`` predicts a kept run (``-o DIR``) again with this checkout's
models, without running anything: each setup's cluster file is refitted from its kept calibration
measurements (``vgcsim calibrate --from``, with the hosts and burst the run declared) and
every method predicted from the kept traces; the measured step times are the run's.

JSON keys: ``setups`` (rate × P), ``winner_called`` (setups where the prediction names the
faster of plain DDP and the variance hook; a tie — measured within 10 % — counts as called),
``median_abs_step_error`` and ``worst_abs_step_error`` per method (|predicted/measured − 1|),
``rows`` (one per setup, model and method: measured and predicted seconds, error),
``trace_setup`` (where the traces were made) and ``trace_drift`` (each traced job's CPU per
step against the same job's untraced run at that setup: :func:`trace_drift`; the what-if
assumes the machine kept its speed), ``cal_busy_before_s`` (per model, the work before each
calibrated operation; empty with ``--cal-busy 0``), ``anchored`` (whether ``--anchor``
priced the setups) and ``host_sharing`` (the rule the calibrations read the shared cores with,
``--host-sharing``: ``fullest-core``, the default, or ``fair``; docs/models.md, "Hosts with
cores").
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests" / "distributed"))

from _netns import (  # noqa: E402
    burst_bytes,
    calibrate_argv,
    missing_prerequisite,
    run_on_hosts,
    shaped_hosts,
)

from vgcsim.core.clusterspec import HOST_SHARINGS  # noqa: E402

METHODS = ("ddp", "fp16", "variance")
#: Which predicted row prices each method: (method column, encoding column).
PREDICTED_ROW = {
    "ddp": ("dense", "fp32"),
    "fp16": ("dense", "fp16"),
    "variance": ("compressed", None),
}
TIE = 0.10


def _job_argv(hosts, i: int, port: int, *args: str) -> list[str]:
    env = [f"RANK={i}", f"WORLD_SIZE={len(hosts.names)}", f"MASTER_ADDR={hosts.addrs[0]}"]
    env += [f"MASTER_PORT={port}", f"GLOO_SOCKET_IFNAME={hosts.iface}"]
    return ["env", *env, sys.executable, str(HERE / "ddp_job.py"), *args]


@contextlib.contextmanager
def hosts_at(n: int, rate: str):
    """``n`` namespaces; ``rate`` a tc rate, or ``unshaped`` (the shapers removed)."""
    with shaped_hosts(n, "100gbit" if rate == "unshaped" else rate) as hosts:
        if rate == "unshaped":
            for i, ns in enumerate(hosts.names):
                for where, dev in ((ns, "eth0"), (hosts.switch, f"p{i}")):
                    subprocess.run(
                        ["tc", "-n", where, "qdisc", "del", "dev", dev, "root"],
                        check=True,
                        capture_output=True,
                    )
        yield hosts


def run_job(hosts, port: int, out: Path, *args: str, timeout_s: float = 900) -> dict:
    """Run the job on every host; a job whose ranks fail is run once more (on the next
    port), and a second failure stops the benchmark with the ranks' output."""
    for attempt in range(2):
        out.unlink(missing_ok=True)
        argv = [*args, "--out", str(out)]
        cmds = [_job_argv(hosts, i, port + attempt, *argv) for i in range(len(hosts.names))]
        done = run_on_hosts(hosts, cmds, timeout_s=timeout_s)
        if not any(d.returncode for d in done) and out.exists():
            return json.loads(out.read_text())
        print(f"  ddp_job {' '.join(args)} failed (attempt {attempt + 1})", file=sys.stderr)
    tail = "\n".join(d.stdout[-1500:] for d in done)
    raise RuntimeError(f"ddp_job {' '.join(args)} failed twice:\n{tail}")


def calibrate(
    hosts,
    port: int,
    out: Path,
    sizes: str,
    repeats: int,
    rate: str,
    busy_before_s: float = 0.0,
    host_sharing: str = "fullest-core",
) -> Path:
    n = len(hosts.names)
    extra = ["--sizes", sizes, "--repeats", str(repeats), "--force"]
    extra += ["--busy-before", repr(float(busy_before_s))]
    extra += ["--host-cores", str(os.cpu_count()), "--ranks-per-host", str(n)]
    extra += ["--host-sharing", host_sharing]
    if rate != "unshaped":  # the shaper's token bucket, as the operator of the link knows it
        extra += ["--burst", str(burst_bytes(rate))]
    cmds = [calibrate_argv(hosts, i, port, out, *extra) for i in range(n)]
    done = run_on_hosts(hosts, cmds, timeout_s=1800)
    if any(d.returncode for d in done) or not out.exists():
        tail = "\n".join(d.stdout[-1500:] for d in done)
        raise RuntimeError(f"calibrate failed:\n{tail}")
    return out


def predict_step_s(
    trace: Path,
    cluster: Path,
    world_size: int,
    method: str,
    tmp: Path,
    engine: str = "predict",
    anchor: Path | None = None,
) -> float:
    """``vgcsim predict``'s (or ``simulate``'s: ``engine``) step time of ``method`` at
    ``world_size`` (median over steps); ``anchor``: the trace setup's cluster file
    (``--anchor``). The command runs in this process (its printed table discarded): the
    same parse and API call as typed, without an interpreter's start per setup."""
    import io

    import pandas as pd

    from vgcsim.cli import main as vgcsim

    tag = "-anchored" if anchor is not None else ""
    out = tmp / f"{engine}-{trace.name}-{cluster.stem}-{method}{tag}"
    argv = [engine, str(trace), "--cluster", str(cluster)]
    argv += ["--world-sizes", str(world_size), "--compute", "trace", "--per-step"]
    argv += ["--anchor", str(anchor)] if anchor is not None else []
    argv += ["--dense-encodings", "fp32,fp16", "-o", str(out), "--overwrite"]
    with contextlib.redirect_stdout(io.StringIO()):
        code = vgcsim(argv)
    if code != 0:
        raise RuntimeError(f"vgcsim {' '.join(argv)} exited with status {code}")
    df = pd.read_parquet(out / "results.parquet")
    kind, encoding = PREDICTED_ROW[method]
    rows = df[(df["method"] == kind) & (df["step"] >= 0)]
    if encoding is not None:
        rows = rows[rows["encoding"] == encoding]
    return float(rows["step_s"].median())


def cal_name(rate: str, n: int, model: str | None) -> str:
    """The stem of a setup's cluster file: one per model where each model's calibration
    works that model's compute before every operation (``--cal-busy trace``), else one."""
    return f"cal-{rate}-P{n}" + (f"-{model}" if model else "")


def traced_compute_s(trace: Path) -> float:
    """The median over steps of one rank's forward + backward in a hook-written trace (the
    work before each exchange)."""
    from vgcsim.traces.io import read_trace

    return float(read_trace(trace).steps["rank_compute_s"].median())


def refit(
    keep: Path,
    work: Path,
    rate: str,
    n: int,
    model: str | None = None,
    host_sharing: str = "fullest-core",
) -> Path:
    """The setup's cluster file fitted again from the kept run's measurements, with the hosts
    (ranks per host, host cores) written in its kept cluster file, ``host_sharing`` and the
    rate's burst; ``model``: that model's own calibration, where the kept run made one per
    model."""
    import tomllib

    stem = cal_name(rate, n, model)
    kept = tomllib.loads((keep / f"{stem}.toml").read_text())
    out = work / f"{stem}.toml"
    cmd = [sys.executable, "-m", "vgcsim", "calibrate", "-o", str(out), "--force"]
    cmd += ["--from", str(keep / f"{stem}.measurements.json")]
    cmd += ["--host-cores", str(kept.get("host_cores", os.cpu_count()))]
    cmd += ["--ranks-per-host", str(kept.get("ranks_per_host", n))]
    cmd += ["--host-sharing", host_sharing]
    if rate != "unshaped":
        cmd += ["--burst", str(burst_bytes(rate))]
    subprocess.run(cmd, check=True, capture_output=True, text=True)
    return out


def repredict(
    keep: Path,
    work: Path,
    log,
    engine: str = "predict",
    anchored: bool = True,
    host_sharing: str = "fullest-core",
) -> list[dict]:
    """The kept run's rows (``real_ddp.json`` in ``keep``) predicted again (module docstring)."""
    kept = json.loads((keep / "real_ddp.json").read_text())
    trace_rate, trace_n = kept.get("trace_setup", "unshaped:2").split(":")
    rows, clusters = [], {}

    def cluster(rate: str, n: int, model: str) -> Path:
        # runs kept before per-model calibrations have one cluster file per setup
        own = model if (keep / f"{cal_name(rate, n, model)}.toml").is_file() else None
        if (rate, n, own) not in clusters:
            clusters[(rate, n, own)] = refit(keep, work, rate, n, own, host_sharing)
        return clusters[(rate, n, own)]

    for r in kept["rows"]:
        rate, n, model, method = r["rate"], r["world_size"], r["model"], r["method"]
        trace = keep / f"trace-{model}-{'variance' if method == 'variance' else 'ddp'}"
        anchor = cluster(trace_rate, int(trace_n), model) if anchored else None
        pred = predict_step_s(trace, cluster(rate, n, model), n, method, work, engine, anchor)
        m = r["measured_s"]
        rows.append({**r, "predicted_s": pred, "error": pred / m - 1})
        print(
            f"{rate:>9} P={n} {model:>4} {method:>8}: measured {m * 1e3:8.2f} ms, "
            f"predicted {pred * 1e3:8.2f} ms ({pred / m - 1:+.0%})",
            file=log,
            flush=True,
        )
    return rows


def summarize(rows: list[dict]) -> dict:
    import numpy as np

    out: dict = {"median_abs_step_error": {}, "worst_abs_step_error": {}}
    for method in METHODS:
        errs = [abs(r["error"]) for r in rows if r["method"] == method]
        if errs:
            out["median_abs_step_error"][method] = float(np.median(errs))
            out["worst_abs_step_error"][method] = float(max(errs))
    setups = sorted({(r["rate"], r["world_size"], r["model"]) for r in rows})
    called = 0
    for rate, p, model in setups:
        by = {
            r["method"]: r
            for r in rows
            if (r["rate"], r["world_size"], r["model"]) == (rate, p, model)
        }
        if "ddp" not in by or "variance" not in by:
            continue
        m_ddp, m_var = by["ddp"]["measured_s"], by["variance"]["measured_s"]
        p_ddp, p_var = by["ddp"]["predicted_s"], by["variance"]["predicted_s"]
        tie = abs(m_var / m_ddp - 1) <= TIE
        called += int(tie or (m_var < m_ddp) == (p_var < p_ddp))
    out["setups"] = len(setups)
    out["winner_called"] = called
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rates", default="100mbit,1gbit,unshaped")
    p.add_argument("--world-sizes", default="2,3,4")
    p.add_argument("--models", default="mlp,cnn")
    p.add_argument("--methods", default=",".join(METHODS))
    p.add_argument("--steps", type=int, default=60, help="timed steps per job")
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--trace-setup", default="unshaped:2", help="RATE:P where the traces are made")
    p.add_argument("--cal-sizes", default="4,4KiB,64KiB,512KiB,4MiB")
    p.add_argument("--cal-repeats", type=int, default=5)
    p.add_argument(
        "--cal-busy",
        choices=("0", "trace"),
        default="0",
        help="0 (default): one calibration per setup, operations back to back; trace: one "
        "per setup and model, every rank working that model's traced compute per step before "
        "each timed operation (vgcsim calibrate --busy-before), as the job meets its exchange",
    )
    p.add_argument("--json", action="store_true")
    p.add_argument("--markdown", action="store_true", help="also print the table of every row")
    p.add_argument("-o", "--out", type=Path, help="keep traces, cluster files and rows here")
    p.add_argument(
        "--engine",
        choices=("predict", "simulate"),
        default="predict",
        help="price each setup with the closed forms (predict, the default) or the simulator",
    )
    p.add_argument(
        "--no-anchor",
        dest="anchor",
        action="store_false",
        help="predict without --anchor (the trace setup's measured time the models miss)",
    )
    p.add_argument(
        "--host-sharing",
        default="fullest-core",
        choices=HOST_SHARINGS,
        help="how the calibrations read the ranks' shared cores (vgcsim calibrate "
        "--host-sharing): the fullest core sets the pace (default) or fair sharing",
    )
    p.add_argument(
        "--from",
        dest="keep",
        type=Path,
        help="predict a kept run (-o DIR of an earlier run) again, running nothing",
    )
    args = p.parse_args(argv)
    if args.keep is not None:
        return _repredicted(args)
    rates = args.rates.split(",")
    sizes = [int(x) for x in args.world_sizes.split(",")]
    models, methods = args.models.split(","), args.methods.split(",")
    trace_rate, trace_p = args.trace_setup.split(":")
    if args.anchor and (trace_rate not in rates or int(trace_p) not in sizes):
        print(
            f"real_ddp: --anchor prices the trace setup {args.trace_setup}: add it to --rates "
            "and --world-sizes, or pass --no-anchor",
            file=sys.stderr,
        )
        return 2
    reason = missing_prerequisite()
    if reason:
        print(json.dumps({"skipped": reason}) if args.json else f"skipped: {reason}")
        return 0
    common = ["--steps", str(args.steps), "--warmup", str(args.warmup)]
    log = sys.stderr if args.json else sys.stdout
    port = 29700
    with tempfile.TemporaryDirectory(prefix="vgcsim-real-ddp-") as tmpdir:
        work = (args.out or Path(tmpdir)).resolve()
        work.mkdir(parents=True, exist_ok=True)
        traces: dict[tuple[str, str], Path] = {}
        with hosts_at(int(trace_p), trace_rate) as hosts:
            for model in models:
                for kind in ("ddp", "variance"):
                    port += 2  # a retry runs on port + 1
                    trace = work / f"trace-{model}-{kind}"
                    run_job(
                        hosts,
                        port,
                        work / f"trace-{model}-{kind}.json",
                        "--model",
                        model,
                        "--method",
                        kind,
                        "--trace",
                        str(trace),
                        *common,
                    )
                    traces[(model, kind)] = trace
                    print(f"traced {model} {kind} at {args.trace_setup}", file=log, flush=True)
        # the work before each exchange, per model: the plain job's traced compute per step
        busy = (
            {m: traced_compute_s(traces[(m, "ddp")]) for m in models}
            if args.cal_busy == "trace"
            else {}
        )
        rows, priced, all_clusters = [], [], {}
        for rate in rates:
            for n in sizes:
                t0 = time.monotonic()
                with hosts_at(n, rate) as hosts:
                    clusters = {}
                    for model in models if busy else [None]:
                        port += 1
                        clusters[model] = calibrate(
                            hosts,
                            port,
                            work / f"{cal_name(rate, n, model)}.toml",
                            args.cal_sizes,
                            args.cal_repeats,
                            rate,
                            busy.get(model, 0.0),
                            args.host_sharing,
                        )
                    measured = {}
                    for model in models:
                        for method in methods:
                            port += 2  # a retry runs on port + 1
                            res = run_job(
                                hosts,
                                port,
                                work / f"run-{rate}-P{n}-{model}-{method}.json",
                                "--model",
                                model,
                                "--method",
                                method,
                                *common,
                            )
                            measured[(model, method)] = res["median_step_s"]
                all_clusters[(rate, n)] = clusters
                priced += [(rate, n, model, method, m) for (model, method), m in measured.items()]
                print(f"  ({time.monotonic() - t0:.0f} s)", file=log, flush=True)
        # priced once every setup is calibrated: --anchor needs the trace setup's cluster
        for rate, n, model, method, m in priced:
            trace = traces[(model, "variance" if method == "variance" else "ddp")]
            cluster = all_clusters[(rate, n)][model if busy else None]
            anchor = (
                all_clusters[(trace_rate, int(trace_p))][model if busy else None]
                if args.anchor
                else None
            )
            pred = predict_step_s(trace, cluster, n, method, work, args.engine, anchor)
            rows.append(
                {
                    "rate": rate,
                    "world_size": n,
                    "model": model,
                    "method": method,
                    "measured_s": m,
                    "predicted_s": pred,
                    "error": pred / m - 1,
                }
            )
            print(
                f"{rate:>9} P={n} {model:>4} {method:>8}: measured {m * 1e3:8.2f} ms, "
                f"predicted {pred * 1e3:8.2f} ms ({pred / m - 1:+.0%})",
                file=log,
                flush=True,
            )
        result = {**summarize(rows), "rows": rows, "load_average": os.getloadavg()}
        result["engine"] = args.engine
        result["trace_setup"] = args.trace_setup
        result["trace_drift"] = trace_drift(work, args.trace_setup, models)
        result["cal_busy_before_s"] = busy
        result["anchored"] = args.anchor
        result["host_sharing"] = args.host_sharing
        if args.out:
            (work / "real_ddp.json").write_text(json.dumps(result, indent=1))
    _print(result, args.json, args.markdown)
    return 0


def trace_drift(folder: Path, trace_setup: str, models: list[str] | None = None) -> dict:
    """Each traced job against the same job measured without tracing at the trace's setup,
    from a run's files in ``folder`` (``trace-MODEL-KIND.json`` and
    ``run-RATE-PN-MODEL-METHOD.json``): ``{"MODEL/KIND": {"traced_cpu_s", "measured_cpu_s",
    "change"}}`` with the median CPU seconds per step of each and ``change`` = measured /
    traced − 1. The what-if predicts every setup from the traced jobs, so a machine whose
    speed moves between the two shows here as a change far from 0 (the traced plain-DDP job
    also runs the hook's bookkeeping: a few percent). Pairs with a file missing are left
    out."""
    rate, n = trace_setup.split(":")
    out = {}
    for model in models or ("mlp", "cnn"):
        for kind in ("ddp", "variance"):
            traced = folder / f"trace-{model}-{kind}.json"
            measured = folder / f"run-{rate}-P{n}-{model}-{kind}.json"
            if not (traced.is_file() and measured.is_file()):
                continue
            t = float(json.loads(traced.read_text())["median_cpu_s"])
            m = float(json.loads(measured.read_text())["median_cpu_s"])
            out[f"{model}/{kind}"] = {"traced_cpu_s": t, "measured_cpu_s": m, "change": m / t - 1}
    return out


def _repredicted(args: argparse.Namespace) -> int:
    if not (args.keep / "real_ddp.json").is_file():
        print(
            f"real_ddp: {args.keep} holds no real_ddp.json (run with -o DIR first)", file=sys.stderr
        )
        return 2
    log = sys.stderr if args.json else sys.stdout
    with tempfile.TemporaryDirectory(prefix="vgcsim-real-ddp-") as tmpdir:
        work = (args.out or Path(tmpdir)).resolve()
        work.mkdir(parents=True, exist_ok=True)
        rows = repredict(
            args.keep.resolve(), work, log, args.engine, args.anchor, args.host_sharing
        )
        result = {**summarize(rows), "rows": rows, "predicted_from": str(args.keep)}
        result["anchored"] = args.anchor
        result["engine"] = args.engine
        result["host_sharing"] = args.host_sharing
        # the setup the kept run traced at (runs kept before it was recorded: the flag's)
        kept = json.loads((args.keep / "real_ddp.json").read_text())
        result["trace_setup"] = kept.get("trace_setup", args.trace_setup)
        result["trace_drift"] = trace_drift(args.keep, result["trace_setup"])
        if args.out:
            (work / "real_ddp.json").write_text(json.dumps(result, indent=1))
    _print(result, args.json, args.markdown)
    return 0


def markdown_table(rows: list[dict]) -> str:
    """The docs' table: per setup and model, each method's measured / predicted step (ms,
    error) and the faster of plain DDP and the variance hook, measured → predicted."""

    def cell(r: dict | None) -> str:
        if r is None:
            return "-"
        m, q = r["measured_s"] * 1e3, r["predicted_s"] * 1e3
        return f"{m:.1f} / {q:.1f} ({r['error']:+.0%})"

    head = (
        "| link | P | model | plain DDP measured / predicted (ms) | fp16 | variance α = 2 "
        "| winner (measured → predicted) |\n|---|---|---|---|---|---|---|"
    )
    lines = [head]
    setups = dict.fromkeys((r["rate"], r["world_size"], r["model"]) for r in rows)
    for rate, n, model in setups:
        by = {
            r["method"]: r
            for r in rows
            if (r["rate"], r["world_size"], r["model"]) == (rate, n, model)
        }
        winner = "-"
        if "ddp" in by and "variance" in by:
            d, v = by["ddp"], by["variance"]

            def name(a: float, b: float) -> str:
                return "variance" if b < a else "DDP"

            measured = name(d["measured_s"], v["measured_s"])
            predicted = name(d["predicted_s"], v["predicted_s"])
            tie = abs(v["measured_s"] / d["measured_s"] - 1) <= TIE
            ok = "✓" if tie or measured == predicted else "✗"
            winner = f"{measured} → {predicted} ({ok}{', tie' if tie else ''})"
        cells = " | ".join(cell(by.get(m)) for m in METHODS)
        lines.append(f"| {rate} | {n} | {model} | {cells} | {winner} |")
    return "\n".join(lines)


def _print(result: dict, as_json: bool, markdown: bool = False) -> None:
    if as_json:
        print(json.dumps(result))
        return
    if markdown:
        print(markdown_table(result["rows"]))
        print()
    print(f"winner called in {result['winner_called']} of {result['setups']} setups")
    for method, err in result["median_abs_step_error"].items():
        worst = result["worst_abs_step_error"][method]
        print(f"{method}: median |step error| {err:.1%}, worst {worst:.1%}")
    drift = result.get("trace_drift") or {}
    if drift:
        print(
            "CPU per step, measured at the trace's setup against the traced job: "
            + ", ".join(f"{k} {v['change']:+.0%}" for k, v in drift.items())
        )


if __name__ == "__main__":
    raise SystemExit(main())
