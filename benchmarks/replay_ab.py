"""Same-window A/B of the message-level replay: this working tree against a git revision.

Wall times on two shared cores move by up to ±20 % from one run to the next, more than a
change of a few per cent. So besides wall and CPU seconds (sides in turns, best and median),
this benchmark counts each side's executed instructions per replayed step with valgrind's
cachegrind (``--cache-sim=no``), which the load does not move.

Each side (the working tree, and ``REV`` checked out into a temporary git worktree) is
installed into a temporary folder (``pip install --no-deps --target``) and run in fresh
interpreters that import it from there. Each writes the replay benchmark's VGG trace with its
own ``benchmarks/simulator.py`` (``vgg_trace``: synthetic, seed 1) and replays it at
``path = "message"`` on the 10GbE star, at ``--ranks`` ranks:

* ``instructions_per_step``: (I(S2) − I(S1)) / (S2 − S1), I(S) the whole interpreter's
  instructions replaying S steps (``max_steps``) of the same trace, so that start-up, imports
  and the trace's synthesis cancel (``--instruction-steps S1,S2``; null without valgrind);
* ``wall_s`` and ``cpu_s``: ``--rounds`` replays of ``--steps`` steps per side, in turns;
* ``tables_equal``: whether both sides' step tables are the same, value for value.

Usage: python benchmarks/replay_ab.py REV [--ranks 64] [--steps 100] [--rounds 3]
       [--instruction-steps 2,12 | --no-instructions] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import site
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]

# The replay each side runs, in a fresh interpreter: argv = checkout, trace steps, replayed
# steps, ranks, repeats. Prints {"wall_s": [...], "cpu_s": [...], "table": csv}.
CHILD = """
import json, sys, tempfile, time
from pathlib import Path
checkout, trace_steps, steps, ranks, repeats = sys.argv[1], *map(int, sys.argv[2:6])
sys.path.insert(0, str(Path(checkout) / "benchmarks"))
import simulator as bench
import vgcsim
from vgcsim.core.cluster import load_cluster
from vgcsim.simulator.replay import SimulateConfig, simulate_trace
assert Path(vgcsim.__file__).resolve().is_relative_to(Path(sys.argv[6]).resolve()), vgcsim.__file__
with tempfile.TemporaryDirectory() as tmp:
    trace = bench.vgg_trace(trace_steps, Path(tmp))
    cluster = load_cluster("10GbE")
    wall, cpu = [], []
    for _ in range(repeats):
        t0, c0 = time.perf_counter(), time.process_time()
        table, _, _ = simulate_trace(
            trace, cluster, [ranks], SimulateConfig(path="message", max_steps=steps)
        )
        wall.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    print(json.dumps({"wall_s": wall, "cpu_s": cpu, "table": table.to_csv(index=False)}))
"""


def install(source: Path, target: Path) -> None:
    """``source``'s package (no dependencies) into ``target``; the build's own folders
    (``build/``, ``*.egg-info``) are removed from ``source`` unless they were there before."""
    before = {p.name for p in source.iterdir()}
    command = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation"]
    subprocess.run([*command, "--target", str(target), str(source)], check=True)
    for made in source.iterdir():
        if made.name not in before and (made.name == "build" or made.name.endswith(".egg-info")):
            shutil.rmtree(made)


def replay(
    side: dict[str, Path],
    trace_steps: int,
    steps: int,
    ranks: int,
    repeats: int,
    valgrind: bool = False,
) -> dict[str, Any] | int:
    """One child run of ``side``: its JSON, or (``valgrind``) its instruction count."""
    args = [str(side["checkout"]), str(trace_steps), str(steps), str(ranks), str(repeats)]
    args.append(str(side["site"]))
    # -S and a cwd outside the checkout: no site processing, so that no editable install's
    # finder (a .pth file) can take the import of vgcsim from the side's folder; the
    # environment's packages come by path.
    path = os.pathsep.join([str(side["site"]), *site.getsitepackages()])
    env = {**os.environ, "PYTHONPATH": path}
    command = [sys.executable, "-S", "-c", CHILD, *args]
    if not valgrind:
        done = subprocess.run(
            command, env=env, cwd=side["site"], check=True, capture_output=True, text=True
        )
        return json.loads(done.stdout)
    with tempfile.NamedTemporaryFile(suffix=".cachegrind") as out:
        grind = ["valgrind", "--tool=cachegrind", "--cache-sim=no"]
        grind.append(f"--cachegrind-out-file={out.name}")
        subprocess.run(
            [*grind, *command], env=env, cwd=side["site"], check=True, capture_output=True
        )
        for line in Path(out.name).read_text().splitlines():
            if line.startswith("summary:"):
                return int(line.split()[1])
    raise RuntimeError("cachegrind wrote no summary line")


def measure(args: argparse.Namespace, log) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="replay-ab-"))
    base_tree = work / "base-tree"
    try:
        subprocess.run(
            ["git", "-C", str(ROOT), "worktree", "add", "--detach", str(base_tree), args.rev],
            check=True,
            capture_output=True,
        )
        sides = {
            "this": {"checkout": ROOT, "site": work / "this-site"},
            "base": {"checkout": base_tree, "site": work / "base-site"},
        }
        for name, side in sides.items():
            log(f"installing {name} ...")
            install(side["checkout"], side["site"])
        s1, s2 = args.instruction_steps
        out: dict[str, Any] = {
            "rev": args.rev,
            "ranks": args.ranks,
            "steps": args.steps,
            "machine_cpus": os.cpu_count(),
            "load_average_1min": os.getloadavg()[0],
        }
        out["instructions_per_step"] = out["instructions_ratio"] = None
        if not args.no_instructions and shutil.which("valgrind"):
            per_step = {}
            for name, side in sides.items():
                log(f"counting {name}'s instructions at {s1} and {s2} steps ...")
                i1 = replay(side, s2, s1, args.ranks, 1, valgrind=True)
                i2 = replay(side, s2, s2, args.ranks, 1, valgrind=True)
                per_step[name] = (i2 - i1) / (s2 - s1)
            out["instructions_per_step"] = per_step
            out["instructions_ratio"] = per_step["this"] / per_step["base"]
        elif not args.no_instructions:
            log("valgrind not installed: no instruction counts")
        runs: dict[str, list[dict[str, Any]]] = {"this": [], "base": []}
        for r in range(args.rounds):
            for name in ("base", "this") if r % 2 else ("this", "base"):
                log(f"round {r + 1}: {name} ...")
                runs[name].append(replay(sides[name], args.steps, args.steps, args.ranks, 1))
        for key in ("wall_s", "cpu_s"):
            out[key] = {
                name: {
                    "runs": [run[key][0] for run in runs[name]],
                    "best": min(run[key][0] for run in runs[name]),
                    "median": statistics.median(run[key][0] for run in runs[name]),
                }
                for name in runs
            }
        out["tables_equal"] = all(
            a["table"] == b["table"] for a, b in zip(runs["this"], runs["base"], strict=True)
        )
        return out
    finally:
        subprocess.run(
            ["git", "-C", str(ROOT), "worktree", "remove", "--force", str(base_tree)],
            capture_output=True,
        )
        shutil.rmtree(work, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("rev", help="the git revision to compare the working tree with")
    parser.add_argument("--ranks", type=int, default=64, help="ranks replayed (default 64)")
    parser.add_argument("--steps", type=int, default=100, help="steps per timed run (100)")
    parser.add_argument("--rounds", type=int, default=3, help="timed runs per side (3)")
    parser.add_argument(
        "--instruction-steps",
        default="2,12",
        help="S1,S2: the two step counts whose instruction difference is divided (2,12)",
    )
    parser.add_argument(
        "--no-instructions", action="store_true", help="skip the instruction counts"
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    try:
        s1, s2 = (int(v) for v in args.instruction_steps.split(","))
    except ValueError:
        parser.exit(
            2, f"--instruction-steps must be two integers S1,S2, got {args.instruction_steps!r}\n"
        )
    if not 0 < s1 < s2 or min(args.ranks, args.steps, args.rounds) < 1:
        parser.exit(2, "need 0 < S1 < S2 and --ranks, --steps, --rounds >= 1\n")
    args.instruction_steps = (s1, s2)
    done = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--verify", "--quiet", f"{args.rev}^{{commit}}"],
        capture_output=True,
    )
    if done.returncode != 0:
        parser.exit(2, f"no such git revision: {args.rev}\n")

    def log(message: str) -> None:
        print(message, file=sys.stderr, flush=True)

    out = measure(args, log)
    if args.json:
        print(json.dumps(out, indent=2))
        return 0
    ips = out["instructions_per_step"]
    if ips:
        print(
            f"instructions per step: this {ips['this'] / 1e6:.1f} M, {out['rev']} "
            f"{ips['base'] / 1e6:.1f} M (ratio {out['instructions_ratio']:.4f})"
        )
    for key in ("wall_s", "cpu_s"):
        this, base = out[key]["this"], out[key]["base"]
        print(
            f"{key}: this best {this['best']:.3f} median {this['median']:.3f}; "
            f"{out['rev']} best {base['best']:.3f} median {base['median']:.3f}"
        )
    print(f"tables equal: {out['tables_equal']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
