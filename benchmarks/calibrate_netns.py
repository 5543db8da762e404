"""``vgcsim calibrate`` across 4 network-namespace hosts behind tbf shapers: typical error per op.

Each setup builds 4 hosts on a bridge (``tests/distributed/_netns.py``), every link shaped by
``tc tbf rate R burst B latency 400ms`` on both ends, runs ``vgcsim calibrate --nnodes 4``
(one rank per host, the default sweep unless ``--sizes``/``--ops`` are given, ``--force`` so
that the file is written and its errors read whatever they are; ``--ranks-per-host 4
--host-cores`` the machine's cores, since the 4 hosts share them, so that the fit's CPU-time
terms and σ are read as the sharing they were measured under; ``--burst`` the shaper's
bucket, so that the fit prices the collectives' messages with it) and reports the fitted link
and the typical error per op that calibrate prints (exp of the rms log ratio of fitted to
measured time, minus one). Needs root; prints why and exits 0 where it cannot run.

    python benchmarks/calibrate_netns.py --json
    python benchmarks/calibrate_netns.py --setups 1gbit:256kb --max-error 0.1   # exit 1 above
    python benchmarks/calibrate_netns.py --setups 1gbit:256kb --sizes 4,1KiB,64KiB,1MiB,8MiB
    python benchmarks/calibrate_netns.py --statistic min   # the fit of each size's best case
    python benchmarks/calibrate_netns.py --statistic min --keep DIR --json
    python benchmarks/calibrate_netns.py --from DIR --statistic min --markdown   # refit only
    python benchmarks/calibrate_netns.py --from DIR --parts   # what each part of the fit adds

Beside each op's typical error it reports the measurements' own repeatability per op
(``vgcsim.traces.calibration.repeatability``: the statistic of the even repetitions against
the odd ones, the same measure), what these repetitions can tell apart from noise.
``--from DIR`` fits a kept run's measurements again with the current fit (the cores of the
machine that measured them, from the file), measuring nothing and needing no root; with
``--parts`` it prints, per setup, the typical error per op with the fit's parts switched on
one by one (:data:`PARTS`), the last row being the default fit.

Timing needs a quiet machine: the 4 ranks share its cores.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "distributed"))

from _netns import calibrate_argv, missing_prerequisite, run_on_hosts, shaped_hosts  # noqa: E402

from vgcsim.core.cluster import load_cluster  # noqa: E402
from vgcsim.core.units import parse_size_bytes  # noqa: E402

DEFAULT_SETUPS = ("200mbit:16kb", "200mbit:256kb", "1gbit:16kb", "1gbit:256kb")
_PER_OP = re.compile(r"typical error per op[^:]*: (.*)")
_REPEAT = re.compile(r"repeatability per op[^:]*: (.*)")


def tbf_bytes(text: str) -> int:
    """tc's size syntax ("16kb" = 16 KiB, tc's kb is 1024 bytes) in bytes."""
    m = re.fullmatch(r"(\d+)(kb|mb|b)?", text.strip().lower())
    if not m:
        raise SystemExit(f"burst {text!r}: use e.g. 16kb, 256kb")
    return int(m[1]) * {"kb": 1024, "mb": 1 << 20, "b": 1, None: 1}[m[2]]


def per_op_errors(stdout: str, line: re.Pattern = _PER_OP) -> dict[str, float]:
    """``{op: typical error}`` from calibrate's printed line (``line``: the typical error's,
    or the repeatability's)."""
    m = line.search(stdout)
    if not m:
        return {}
    out = {}
    for item in m[1].split(", "):
        op, pct = item.rsplit(" ", 1)
        out[op] = float(pct.rstrip("%")) / 100
    return out


def run_setup(
    rate: str, burst: str, extra: list[str], timeout_s: float, keep: Path | None = None
) -> dict:
    with tempfile.TemporaryDirectory(prefix="vgcsim-cal-") as tmp:
        out = (keep or Path(tmp)) / f"cal-{rate}-{burst}.toml"
        with shaped_hosts(4, rate, burst=tbf_bytes(burst), latency="400ms") as hosts:
            done = run_on_hosts(
                hosts,
                [
                    calibrate_argv(
                        hosts, i, 29600, out, "--force", "--burst", str(tbf_bytes(burst)), *extra
                    )
                    for i in range(4)
                ],
                timeout_s=timeout_s,
            )
        if done[0].returncode != 0 or not out.exists():
            return {"rate": rate, "burst": burst, "error": done[0].stdout[-2000:]}
        row = setup_row(
            rate,
            burst,
            load_cluster(str(out)).link,
            per_op_errors(done[0].stdout),
            per_op_errors(done[0].stdout, _REPEAT),
        )
        row["stdout_tail"] = done[0].stdout[-4000:]
        return row


def setup_row(rate: str, burst: str, link, errors: dict, repeat: dict) -> dict:
    """One setup's JSON row: the fitted link, the typical error and repeatability per op."""
    return {
        "rate": rate,
        "burst": burst,
        "latency_s": link.latency_s,
        "allgather_latency_s": link.allgather_latency_s,
        "call_overhead_s": link.call_overhead_s,
        "bandwidth_Bps": link.bandwidth_Bps,
        "gamma_s_per_byte": link.gamma_s_per_byte,
        "comm_cpu_s_per_byte": link.comm_cpu_s_per_byte,
        "typical_error_per_op": errors,
        "worst_typical_error": max(errors.values()) if errors else None,
        "repeatability_per_op": repeat,
    }


def refit_setup(rate: str, burst: str, folder: Path, statistic: str | None) -> dict:
    """A kept setup's measurements (``folder/cal-RATE-BURST.measurements.json``) fitted
    again as the live run fits them: 4 ranks per host on the measuring machine's cores."""
    from vgcsim import api

    kept = read_kept(folder, rate, burst)
    if isinstance(kept, str):
        return {"rate": rate, "burst": burst, "error": kept}
    doc, cores = kept
    run = api.fit_calibration(
        doc, statistic=statistic or "median", hosts=(4, cores), burst_bytes=tbf_bytes(burst)
    )
    return setup_row(rate, burst, run.fit, run.errors, run.repeatability)


def read_kept(folder: Path, rate: str, burst: str) -> tuple[dict, int] | str:
    """A kept setup's measurements (``folder/cal-RATE-BURST.measurements.json``, checked and
    read once: the fits take the document) and the cores of the machine that measured them
    (from the file; this machine's where it does not say), or why there are none."""
    from vgcsim.traces.calibration import read_measurements

    path = folder / f"cal-{rate}-{burst}.measurements.json"
    if not path.is_file():
        return f"{path} not found"
    doc = read_measurements(path)
    return doc, int((doc.get("machine") or {}).get("cpus") or os.cpu_count() or 1)


#: The fit's parts, switched on one by one (``--parts``): a label and ``fit_link``'s switches.
PARTS = (
    ("one line, α per step", {"segments": False, "call_ops": None, "gather_op": None}),
    ("+ per-call cost c", {"segments": False, "gather_op": None}),
    ("+ size segments", {"gather_op": None}),
    ("+ the token bucket", {"burst": True, "gather_op": None}),
    ("+ the allgather's own α (the default)", {"burst": True}),
)


def parts_table(folder: Path, setups: list[str], statistic: str | None) -> str:
    """The docs' table of what each part of the fit adds: per kept setup (``folder``'s
    ``cal-RATE-BURST.measurements.json``) and :data:`PARTS` row, α, c and each op's typical
    error, fitted as :func:`refit_setup` fits (σ where 4 ranks shared fewer cores)."""
    from vgcsim.models.linkfit import fit_link, op_errors

    blocks = []
    for setup in setups:
        rate, burst = setup.split(":")
        kept = read_kept(folder, rate, burst)
        if isinstance(kept, str):
            blocks.append((f"{rate}, {burst}", None))
            continue
        doc, cores = kept
        fits = []
        for label, switches in PARTS:
            kw = {k: v for k, v in switches.items() if k != "burst"}
            if switches.get("burst"):
                kw["burst_bytes"] = tbf_bytes(burst)
            fit, table = fit_link(doc, statistic or "median", comm_cpu=4 > cores, **kw)
            fits.append((label, fit, op_errors(table)))
        blocks.append((f"{rate}, {burst}", fits))
    ops = list(dict.fromkeys(op for _, fits in blocks for _, _, e in (fits or ()) for op in e))
    lines = [
        "| setup | fit | α (µs) | c (µs) | α_g (µs) | " + " | ".join(ops) + " |",
        "| --- | --- | ---: | ---: | ---: | " + " | ".join("---:" for _ in ops) + " |",
    ]
    for setup, fits in blocks:
        if fits is None:
            lines.append(f"| {setup} | not found |")
            continue
        for label, fit, errors in fits:
            cells = [pct(errors[op]) if op in errors else "" for op in ops]
            lines.append(
                f"| {setup} | {label} | {fit.latency_s * 1e6:.0f} | "
                f"{fit.call_overhead_s * 1e6:.0f} | {_gather_us(fit.allgather_latency_s)} | "
                + " | ".join(cells)
                + " |"
            )
    return "\n".join(lines)


def markdown(rows: list[dict]) -> str:
    """The docs' table: per setup the fitted link, each op's typical error and, in brackets,
    the measurements' repeatability for that op."""
    ops = list(dict.fromkeys(op for r in rows for op in r.get("typical_error_per_op", {})))
    head = (
        "| setup | α (µs) | α_g (µs) | c (µs) | σ (ns/B) | bandwidth (MB/s) | "
        + " | ".join(ops)
        + " |"
    )
    rule = "| --- | ---: | ---: | ---: | ---: | ---: | "
    lines = [head, rule + " | ".join("---:" for _ in ops) + " |"]
    for r in rows:
        if "typical_error_per_op" not in r:
            lines.append(f"| {r['rate']}, {r['burst']} burst | failed |")
            continue
        cells = []
        for op in ops:
            e, q = r["typical_error_per_op"].get(op), r["repeatability_per_op"].get(op)
            cells.append("" if e is None else pct(e) + ("" if q is None else f" ({pct(q)})"))
        lines.append(
            f"| {r['rate']}, {r['burst']} burst | {r['latency_s'] * 1e6:.0f} | "
            f"{_gather_us(r.get('allgather_latency_s'))} | "
            f"{r['call_overhead_s'] * 1e6:.0f} | {r['comm_cpu_s_per_byte'] * 1e9:.2f} | "
            f"{r['bandwidth_Bps'] / 1e6:.1f} | " + " | ".join(cells) + " |"
        )
    return "\n".join(lines)


def _gather_us(value_s: float | None) -> str:
    """An allgather step's α in µs, or "–" where the fit gave none (the link's α)."""
    return f"{value_s * 1e6:.0f}" if value_s else "–"


def pct(share: float) -> str:
    """A share as the docs write it: ``0.123`` → ``12.3 %``."""
    return f"{share * 100:.1f} %"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--setups", default=",".join(DEFAULT_SETUPS), help="RATE:BURST,...")
    parser.add_argument("--sizes", default=None, help="calibrate --sizes (default: its sweep)")
    parser.add_argument("--ops", default=None, help="calibrate --ops")
    parser.add_argument("--budget", default=None, help="calibrate --budget (seconds per size)")
    parser.add_argument(
        "--repeats", type=int, default=None, help="calibrate --repeats (timed, per size)"
    )
    parser.add_argument(
        "--statistic",
        default=None,
        help="calibrate --statistic: median (default, what a step sees) or min (the link's "
        "best case, without the contention of ranks that share this machine's cores)",
    )
    parser.add_argument("--timeout", type=float, default=1200.0, help="seconds per setup")
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    parser.add_argument(
        "--markdown", action="store_true", help="print the docs' table (errors, repeatability)"
    )
    parser.add_argument(
        "--from",
        dest="source",
        type=Path,
        default=None,
        help="refit the measurements a --keep run left in this folder; runs nothing",
    )
    parser.add_argument(
        "--parts",
        action="store_true",
        help="with --from: print what each part of the fit adds (typical error per op with "
        "the parts switched on one by one)",
    )
    parser.add_argument(
        "--max-error",
        type=float,
        default=None,
        help="exit 1 when any op's typical error of any setup exceeds this (e.g. 0.1)",
    )
    parser.add_argument(
        "--keep",
        type=Path,
        default=None,
        help="folder to keep each setup's cluster file and measurements in (refit them with "
        "`vgcsim calibrate --from FILE`)",
    )
    args = parser.parse_args(argv)
    if args.source is not None:
        if not args.source.is_dir():
            print(f"calibrate_netns: --from {args.source}: no such folder", file=sys.stderr)
            return 2
        if args.parts:
            print(parts_table(args.source, args.setups.split(","), args.statistic))
            return 0
        rows = [
            refit_setup(*setup.split(":"), args.source, args.statistic)
            for setup in args.setups.split(",")
        ]
        return report(rows, args)
    if args.parts:
        print("calibrate_netns: --parts refits a kept run: give --from DIR", file=sys.stderr)
        return 2
    reason = missing_prerequisite()
    if reason is not None:
        print(f"calibrate_netns: cannot run here: {reason}")
        return 0
    extra = ["--ranks-per-host", "4", "--host-cores", str(os.cpu_count() or 1)]
    for flag, value in (
        ("--sizes", args.sizes),
        ("--ops", args.ops),
        ("--budget", args.budget),
        ("--repeats", None if args.repeats is None else str(args.repeats)),
        ("--statistic", args.statistic),
    ):
        if value:
            extra += [flag, value]
    if args.sizes:
        [parse_size_bytes(s) for s in args.sizes.split(",")]  # refuse bad sizes early
    rows = []
    for setup in args.setups.split(","):
        rate, burst = setup.split(":")
        if args.keep is not None:
            args.keep.mkdir(parents=True, exist_ok=True)
        row = run_setup(rate, burst, extra, args.timeout, args.keep)
        rows.append(row)
        if not (args.json or args.markdown):
            print(setup_line(row))
    return report(rows, args, printed=True)


def setup_line(row: dict) -> str:
    """One setup's typical error per op, each op's repeatability in brackets."""
    errs, rep = row.get("typical_error_per_op", {}), row.get("repeatability_per_op", {})
    what = ", ".join(
        f"{k} {v:.1%}" + (f" ({rep[k]:.1%})" if k in rep else "") for k, v in errs.items()
    )
    return f"{row['rate']} burst {row['burst']}: {what or 'failed: ' + row.get('error', '')[-500:]}"


def report(rows: list[dict], args, printed: bool = False) -> int:
    """Print ``rows`` as asked (``--json``, ``--markdown`` or a line per setup, unless the
    lines were ``printed`` as the setups ran); exit status 1 above ``--max-error``."""
    if args.markdown:
        print(markdown(rows))
    elif not args.json and not printed:
        for row in rows:
            print(setup_line(row))
    if args.json:
        for r in rows:
            r.pop("stdout_tail", None)
        print(json.dumps({"setups": rows}, indent=1))
    if args.max_error is not None:
        worst = [r.get("worst_typical_error") for r in rows]
        if any(w is None or w > args.max_error for w in worst):
            print(f"calibrate_netns: a setup failed or exceeded --max-error {args.max_error:g}")
            return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
