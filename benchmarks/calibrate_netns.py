"""``vgcsim calibrate`` across 4 network-namespace hosts behind tbf shapers: typical error per op.

Each setup builds 4 hosts on a bridge (``tests/distributed/_netns.py``), every link shaped by
``tc tbf rate R burst B latency 400ms`` on both ends, runs ``vgcsim calibrate --nnodes 4``
(one rank per host, the default sweep unless ``--sizes``/``--ops`` are given, ``--force`` so
that the file is written and its errors read whatever they are; ``--ranks-per-host 4
--host-cores`` the machine's cores, since the 4 hosts share them, so that the fit's CPU-time
terms and σ are read as the sharing they were measured under) and reports the fitted link
and the typical error per op that calibrate prints (exp of the rms log ratio of fitted to
measured time, minus one). Needs root; prints why and exits 0 where it cannot run.

    python benchmarks/calibrate_netns.py --json
    python benchmarks/calibrate_netns.py --setups 1gbit:256kb --max-error 0.1   # exit 1 above
    python benchmarks/calibrate_netns.py --setups 1gbit:256kb --sizes 4,1KiB,64KiB,1MiB,8MiB
    python benchmarks/calibrate_netns.py --statistic min   # the fit of each size's best case

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


def tbf_bytes(text: str) -> int:
    """tc's size syntax ("16kb" = 16 KiB, tc's kb is 1024 bytes) in bytes."""
    m = re.fullmatch(r"(\d+)(kb|mb|b)?", text.strip().lower())
    if not m:
        raise SystemExit(f"burst {text!r}: use e.g. 16kb, 256kb")
    return int(m[1]) * {"kb": 1024, "mb": 1 << 20, "b": 1, None: 1}[m[2]]


def per_op_errors(stdout: str) -> dict[str, float]:
    """``{op: typical error}`` from calibrate's printed line."""
    m = _PER_OP.search(stdout)
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
                [calibrate_argv(hosts, i, 29600, out, "--force", *extra) for i in range(4)],
                timeout_s=timeout_s,
            )
        if done[0].returncode != 0 or not out.exists():
            return {"rate": rate, "burst": burst, "error": done[0].stdout[-2000:]}
        link = load_cluster(str(out)).link
        errors = per_op_errors(done[0].stdout)
        return {
            "rate": rate,
            "burst": burst,
            "latency_s": link.latency_s,
            "call_overhead_s": link.call_overhead_s,
            "bandwidth_Bps": link.bandwidth_Bps,
            "gamma_s_per_byte": link.gamma_s_per_byte,
            "comm_cpu_s_per_byte": link.comm_cpu_s_per_byte,
            "typical_error_per_op": errors,
            "worst_typical_error": max(errors.values()) if errors else None,
            "stdout_tail": done[0].stdout[-4000:],
        }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--setups", default=",".join(DEFAULT_SETUPS), help="RATE:BURST,...")
    parser.add_argument("--sizes", default=None, help="calibrate --sizes (default: its sweep)")
    parser.add_argument("--ops", default=None, help="calibrate --ops")
    parser.add_argument("--budget", default=None, help="calibrate --budget (seconds per size)")
    parser.add_argument(
        "--statistic",
        default=None,
        help="calibrate --statistic: median (default, what a step sees) or min (the link's "
        "best case, without the contention of ranks that share this machine's cores)",
    )
    parser.add_argument("--timeout", type=float, default=1200.0, help="seconds per setup")
    parser.add_argument("--json", action="store_true", help="print one JSON document")
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
    reason = missing_prerequisite()
    if reason is not None:
        print(f"calibrate_netns: cannot run here: {reason}")
        return 0
    extra = ["--ranks-per-host", "4", "--host-cores", str(os.cpu_count() or 1)]
    for flag, value in (
        ("--sizes", args.sizes),
        ("--ops", args.ops),
        ("--budget", args.budget),
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
        if not args.json:
            errs = row.get("typical_error_per_op", {})
            what = ", ".join(f"{k} {v:.1%}" for k, v in errs.items())
            print(f"{rate} burst {burst}: {what or 'failed: ' + row.get('error', '')[-500:]}")
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
