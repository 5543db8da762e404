"""Simulator performance, measured in one run on this machine.

1. Event rate of the flow network (message-level ring allgatherv, 64 ranks) against a bare
   SimPy loop of timeouts: events per second of each and their ratio.
2. Direct allgatherv on a 10GbE star, P = 16 and 64 (P(P-1) concurrent flows, max-min fair):
   wall time of one message-level run (the engine's run, on a star whose routes are already
   computed), and of SimGrid's exact max-min solver (CM02 model, no latency/bandwidth
   correction factors, no TCP window bound, split-duplex links; its engine's run, the
   platform loaded before) on the same sizes when Debian's ``python3-simgrid`` is
   importable by ``--simgrid-python``. SimGrid runs
   in a child process of that interpreter; it is not a dependency of this project. The
   simulated finish times of both are printed too: they must agree.
3. Replay of 64 ranks x 1000 steps at message level (dense ring allreduce + ring allgatherv;
   repeated dense steps are reused, every compressed step is simulated). Target <= 30 s.
4. Replay of 1024 and 4096 ranks x 1000 steps on the collective-level fast path (targets
   <= 60 s for 4096).
5. Leaf-spine 4:1, ``placement = "spread"``, ring allgatherv replayed from a ResNet-50-sized
   synthetic trace, 100 steps, P = 256 and 1024 (targets <= 30 s and <= 60 s; ``auto`` takes
   the round-level path where its run-time check passes), and the largest relative difference
   of step times between ``auto`` and the message level on the first 2 steps at P = 128
   (``leafspine_p128_auto_vs_message_rel``, target <= 1 %): one spine and 16 hosts per leaf
   (``leafspine_*``), and two spines (D-mod-K routing) and 8 hosts per leaf
   (``leafspine2_*``).
6. ``vgcsim sweep`` of 64 cases (the VGG trace of 3 and 4 on a star: 4 bandwidths x 4
   latencies x P = 8, 16, 32, 64) on a Dask LocalCluster of 2 worker processes and on a
   process pool of 2: the wall time of the whole command, each in a fresh interpreter
   (``python -m vgcsim sweep ... --processes 2 --scheduler local|processes``: everything its
   user waits for, from the start of the interpreter to the table written; neither run
   inherits the other's fork server, imports or trace cache), in turns (pool, Dask, pool,
   Dask, pool, Dask): the median of each (``sweep64_dask_s``, ``sweep64_pool_s``), every run
   (``sweep64_dask_runs_s``, ``sweep64_pool_runs_s``), their ratio
   (``sweep64_dask_over_pool``), and whether both wrote the same rows
   (``sweep64_rows_equal``; target: Dask no slower).

7. ``vgcsim collective 10GbE KEY --sizes-bytes 1e5 --world-size 4096 --engine simulate`` for
   the ring, Bruck and recursive-doubling allgatherv, each in a fresh interpreter: wall
   seconds and peak resident memory (``collective_*_p4096_s``, ``..._peak_rss_bytes``;
   target <= 2 GiB).

Every timed case runs under a wall-clock cap (``--cap-factor`` times its target, or
``--limit-s``); a case that does not finish is reported as null with the reason, never as an
estimate. The traces are synthetic, written to a temporary directory.

Usage: python benchmarks/simulator.py [--json] [--quick] [--steps N] [--limit-s S]
       python benchmarks/simulator.py --only solver [--json]   (figures 1 and 2 only)
       python benchmarks/simulator.py --only replay [--json]   (figures 3, 4 and 6 only)
       python benchmarks/simulator.py --only message [--json]  (figures 1 and 3 only)
       python benchmarks/simulator.py --only sweep [--json]    (figure 6 only)
       python benchmarks/simulator.py --only leafspine [--json] (figure 5 only)
       python benchmarks/simulator.py --only collective [--json] (figure 7 only)
       python benchmarks/simulator.py --profile-ring 64
       python benchmarks/simulator.py --profile-direct 32
       python benchmarks/simulator.py --profile-replay 1024 --steps 100
       python benchmarks/simulator.py --profile-sweep --steps 100
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

# Run as a script, this file's folder comes first on sys.path and this module ("simulator")
# would shadow the package of the same name.
if sys.path and os.path.abspath(sys.path[0]) == os.path.dirname(os.path.abspath(__file__)):
    sys.path.pop(0)

import numpy as np  # noqa: E402
import simpy  # noqa: E402

from vgcsim.core.cluster import load_cluster  # noqa: E402
from vgcsim.simulator.collectives import get_schedule, unit_sizes  # noqa: E402
from vgcsim.simulator.paths.message import run_message  # noqa: E402
from vgcsim.simulator.paths.plan import Phase, RunCache  # noqa: E402
from vgcsim.simulator.replay import SimulateConfig, simulate_trace  # noqa: E402
from vgcsim.simulator.sweep import (  # noqa: E402
    SweepConfig,
    SweepFile,
    expand_factors,
    run_job,
)
from vgcsim.simulator.topology import build_topology  # noqa: E402
from vgcsim.sweep_runners import local_cluster  # noqa: E402
from vgcsim.traces.io import read_trace  # noqa: E402
from vgcsim.traces.synth import SynthConfig, synth_trace  # noqa: E402


def bare_simpy_rate(processes: int = 64, timeouts: int = 3000) -> float:
    """Events per second of SimPy processes that only yield timeouts."""
    env = simpy.Environment()

    def proc(i: int):
        for k in range(timeouts):
            yield env.timeout(1e-6 * ((i + k) % 7 + 1))

    for i in range(processes):
        env.process(proc(i))
    t0 = time.perf_counter()
    env.run()
    wall = time.perf_counter() - t0
    return next(env._eid) / wall  # SimPy's event counter: events scheduled


def event_rates(rounds: int, timeouts: int, repeats: int) -> tuple[float, float, float]:
    """(bare SimPy events/s, network events/s, network flows/s), each the best of ``rounds``
    measurements taken in turn (bare, network, bare, network, ...): on a machine shared with
    other jobs the best of each is the closest to what the code itself costs, and taking the
    two in turn exposes both to the same load."""
    bare, ours, flows = 0.0, 0.0, 0.0
    for _ in range(rounds):
        bare = max(bare, bare_simpy_rate(timeouts=timeouts))
        ev, fl = network_rate(repeats=repeats)
        if ev > ours:
            ours, flows = ev, fl
    return bare, ours, flows


def network_rate(world_size: int = 64, repeats: int = 10) -> tuple[float, float]:
    """(events/s, flows/s) of the message-level network on a ring allgatherv."""
    cluster = load_cluster("10GbE")
    topo = build_topology(cluster, world_size)
    sched = get_schedule("allgatherv/ring", world_size)
    cache = RunCache(topo)  # as a replay keeps it: the schedule's tables are built once
    rng = np.random.default_rng(0)
    stats: dict[str, int] = {}
    t0 = time.perf_counter()
    for _ in range(repeats):
        sizes = rng.uniform(1e4, 1e6, world_size)
        run_message(
            [Phase(np.zeros(world_size), sched, unit_sizes(sched, sizes))],
            topo,
            stats=stats,
            cache=cache,
        )
    wall = time.perf_counter() - t0
    return stats["events"] / wall, stats["flows"] / wall


class _TimeUp(Exception):
    """A timed case ran past its cap."""


def capped(limit_s: float, fn: Callable[[], Any]) -> tuple[float | None, Any, str]:
    """(wall seconds, fn's value, "") or (None, None, reason) when fn runs past ``limit_s``."""

    def alarm(signum, frame):
        raise _TimeUp

    previous = signal.signal(signal.SIGALRM, alarm)
    signal.setitimer(signal.ITIMER_REAL, limit_s)
    t0 = time.perf_counter()
    try:
        value = fn()
    except _TimeUp:
        return None, None, f"did not finish within {limit_s:g} s (stopped there)"
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    return time.perf_counter() - t0, value, ""


def direct_agv_sizes(world_size: int) -> np.ndarray:
    """Seeded whole-byte message sizes for the direct allgatherv cases (SimGrid takes ints)."""
    return np.random.default_rng(world_size).integers(10_000, 1_000_000, world_size).astype(float)


def direct_agv_case(world_size: int) -> tuple[Any, list[Phase]]:
    """(topology, phases) of the direct allgatherv case: the 10GbE star with the route of
    every rank pair already computed (SimGrid's platform lists them), and the one phase."""
    topo = build_topology(load_cluster("10GbE"), world_size)
    for src in range(world_size):
        for dst in range(world_size):
            topo.route(src, dst)
    sched = get_schedule("allgatherv/direct", world_size)
    sizes = direct_agv_sizes(world_size)
    return topo, [Phase(np.zeros(world_size), sched, unit_sizes(sched, sizes))]


def direct_agv_ours(world_size: int) -> float:
    """Simulated finish (s) of a message-level direct allgatherv on the 10GbE star."""
    topo, phases = direct_agv_case(world_size)
    return float(run_message(phases, topo).max())


# Run by the SimGrid interpreter: the same star, one actor per rank posting all its sends and
# receives at once (rendezvous: a flow starts when both are posted, here at t = 0).
_SIMGRID_CHILD = r"""
import json, os, sys, tempfile, time
spec = json.load(sys.stdin)
p, sizes = spec["world_size"], spec["sizes_bytes"]
bw, lat = spec["bandwidth_Bps"], spec["channel_latency_s"]
from simgrid import Actor, Comm, Engine, Host, Mailbox
hosts = "".join(f'<host id="h{i}" speed="1Gf"/>' for i in range(p))
links = "".join(
    f'<link id="l{i}" bandwidth="{bw!r}Bps" latency="{lat!r}s" sharing_policy="SPLITDUPLEX"/>'
    for i in range(p))
routes = "".join(
    f'<route src="h{i}" dst="h{j}" symmetrical="NO"><link_ctn id="l{i}" direction="UP"/>'
    f'<link_ctn id="l{j}" direction="DOWN"/></route>'
    for i in range(p) for j in range(p) if i != j)
xml = ("<?xml version='1.0'?><!DOCTYPE platform SYSTEM \"https://simgrid.org/simgrid.dtd\">"
       f'<platform version="4.1"><zone id="star" routing="Full">{hosts}{links}{routes}</zone>'
       "</platform>")
with tempfile.TemporaryDirectory() as tmp:
    path = os.path.join(tmp, "star.xml")
    with open(path, "w") as f:
        f.write(xml)
    e = Engine(["bench", "--log=root.thres:critical", "--cfg=network/model:CM02",
                "--cfg=network/latency-factor:1", "--cfg=network/bandwidth-factor:1",
                "--cfg=network/TCP-gamma:0", "--cfg=network/crosstraffic:0"])
    e.load_platform(path)
finish = [0.0] * p
def rank(i):
    puts = [Mailbox.by_name(f"{j}<-{i}").put_async(i, int(sizes[i])) for j in range(p) if j != i]
    gets = [Mailbox.by_name(f"{i}<-{j}").get_async() for j in range(p) if j != i]
    Comm.wait_all(puts + [g[0] for g in gets])  # g[1] holds the data: keep it alive
    finish[i] = Engine.clock
for i in range(p):
    Actor.create(f"r{i}", Host.by_name(f"h{i}"), rank, i)
t0 = time.perf_counter()
e.run()
json.dump({"wall_s": time.perf_counter() - t0, "finish_s": max(finish)}, sys.stdout)
"""


def simgrid_available(python: str) -> bool:
    try:
        done = subprocess.run(
            [python, "-c", "import simgrid"], capture_output=True, timeout=60, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


def direct_agv_simgrid(world_size: int, python: str, limit_s: float) -> dict | None:
    """SimGrid's {"wall_s" (its engine's run only), "finish_s"} on the same case; None past the cap."""
    route = build_topology(load_cluster("10GbE"), world_size).route(0, 1)
    if len(route.channels) != 2:
        raise RuntimeError("the SimGrid star expects an up and a down channel per route")
    spec = {
        "world_size": world_size,
        "sizes_bytes": direct_agv_sizes(world_size).tolist(),
        "bandwidth_Bps": route.bandwidth_Bps,
        "channel_latency_s": route.latency_s / 2,
    }
    try:
        done = subprocess.run(
            [python, "-c", _SIMGRID_CHILD],
            input=json.dumps(spec),
            capture_output=True,
            text=True,
            timeout=limit_s,
            check=True,
        )
    except subprocess.TimeoutExpired:
        return None
    return json.loads(done.stdout)


def replay_seconds(trace, world_size: int, path: str, cluster=None) -> tuple[float, dict]:
    cfg = SimulateConfig(path=path)
    t0 = time.perf_counter()
    _, _, info = simulate_trace(trace, cluster or load_cluster("10GbE"), [world_size], cfg)
    return time.perf_counter() - t0, info[str(world_size)]


def leafspine_agreement(trace, world_size: int, steps: int, cluster) -> tuple[float, list[str]]:
    """Largest |auto / message - 1| of step_s over the first ``steps`` steps of every variant,
    and the paths ``auto`` took."""
    kw = {"max_steps": steps, "per_step": True}
    auto, _, _ = simulate_trace(trace, cluster, [world_size], SimulateConfig(path="auto", **kw))
    msg, _, _ = simulate_trace(trace, cluster, [world_size], SimulateConfig(path="message", **kw))
    a, m = auto[auto["step"] >= 0], msg[msg["step"] >= 0]
    rel = np.abs(a["step_s"].to_numpy() / m["step_s"].to_numpy() - 1)
    return float(rel.max()), sorted(set(a["path"]))


def sweep64(trace_dir: Path) -> SweepFile:
    """64 sweep cases on a star: 4 bandwidths x 4 latencies x P = 8, 16, 32, 64."""
    factors = SweepConfig(
        traces=(str(trace_dir),),
        cluster="10GbE",
        world_sizes=(8, 16, 32, 64),
        bandwidths=("1Gbps", "10Gbps", "25Gbps", "100Gbps"),
        latencies=("1us", "5us", "20us", "50us"),
    )
    return SweepFile(factors, SimulateConfig())


def sweep64_toml(trace_dir: Path, path: Path) -> Path:
    """``sweep64``'s cases as a sweep file at ``path`` (for ``vgcsim sweep``)."""
    factors = sweep64(trace_dir).sweep

    def quoted(values) -> str:
        return "[" + ", ".join(json.dumps(str(v)) for v in values) + "]"

    path.write_text(
        "[sweep]\n"
        f"traces = {quoted(factors.traces)}\n"
        f"cluster = {json.dumps(factors.cluster)}\n"
        f"world_sizes = {list(factors.world_sizes)}\n"
        f"bandwidths = {quoted(factors.bandwidths)}\n"
        f"latencies = {quoted(factors.latencies)}\n"
    )
    return path


def sweep_seconds(config: Path, scheduler: str, out: Path) -> tuple[float, Any]:
    """Wall seconds of ``vgcsim sweep CONFIG`` on 2 workers of ``scheduler``, run in a fresh
    interpreter, and the table it wrote."""
    from vgcsim.core.results import read_results

    command = [sys.executable, "-m", "vgcsim", "sweep", str(config), "--processes", "2"]
    command += ["--scheduler", scheduler, "-o", str(out), "--overwrite"]
    t0 = time.perf_counter()
    # A session of its own: stopped by the cap, the command goes with its fork server and
    # pool workers (killing the command alone would leave them holding this process's stderr).
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, start_new_session=True)
    try:
        code = proc.wait()
    except BaseException:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        raise
    if code != 0:
        raise subprocess.CalledProcessError(code, command)
    return time.perf_counter() - t0, read_results(out)[0]


def leaf_spine_cluster(hosts_per_leaf: int = 16, spines: int = 1):
    """10GbE hosts, 16 per leaf, one spine, 4:1 oversubscribed uplinks, ring neighbours spread
    (several spines: D-mod-K routing, the default)."""
    topo = {
        "kind": "leaf_spine",
        "hosts_per_leaf": hosts_per_leaf,
        "spines": spines,
        "oversubscription": 4.0,
        "placement": "spread",
    }
    base = load_cluster("10GbE")
    name = (
        f"[leaf_spine {hosts_per_leaf}/leaf {spines} spine{'s' if spines > 1 else ''} 4:1 spread]"
    )
    return dataclasses.replace(base, name=base.name + name, topology=topo)


def measure(args: argparse.Namespace, log: Callable[[str], None]) -> dict[str, Any]:
    """Every figure of one run → a flat dict (None + ``reasons[key]`` where a case did not run)."""
    quick = args.quick
    steps = args.steps or (100 if quick else 1000)

    def cap(target_s: float) -> float:
        return args.limit_s if args.limit_s else args.cap_factor * target_s

    out: dict[str, Any] = {"machine_cpus": os.cpu_count(), "load_average_1min": os.getloadavg()[0]}
    reasons: dict[str, str] = {}
    if args.only == "message":
        event_rate_figures(quick, out, log)
        with tempfile.TemporaryDirectory() as tmp:
            trace = vgg_trace(steps, Path(tmp))
            replay_case(
                trace, f"message_p64_{steps}steps_s", 64, "message", cap(30.0), out, reasons, log
            )
        out["reasons"] = reasons
        return out

    if args.only == "sweep":
        with tempfile.TemporaryDirectory() as tmp:
            vgg_trace(steps, Path(tmp))
            sweep_cases(cap, Path(tmp) / "vgg", out, reasons, log)
        out["reasons"] = reasons
        return out

    if args.only == "leafspine":
        with tempfile.TemporaryDirectory() as tmp:
            leafspine_cases(quick, cap, Path(tmp), out, reasons, log)
        out["reasons"] = reasons
        return out

    if args.only == "collective":
        collective_cases(cap, out, reasons, log)
        out["reasons"] = reasons
        return out

    if args.only == "replay":
        with tempfile.TemporaryDirectory() as tmp:
            replay_cases(args, steps, cap, Path(tmp), out, reasons, log)
        out["reasons"] = reasons
        return out
    event_rate_figures(quick, out, log)

    have_simgrid = simgrid_available(args.simgrid_python)
    if not have_simgrid:
        print("skipped: simgrid not installed", file=sys.stderr)
    for p in (16, 64):
        key = f"direct_agv_p{p}_s"
        # Like SimGrid's figure, the engine's run only: the platform is set up before.
        topo, phases = direct_agv_case(p)
        wall, finish, why = capped(
            cap(60.0), lambda topo=topo, phases=phases: float(run_message(phases, topo).max())
        )
        out[key], out[f"direct_agv_p{p}_finish_s"] = wall, finish
        if why:
            reasons[key] = why
        sg_key = f"simgrid_{key}"
        out[sg_key] = out[f"simgrid_direct_agv_p{p}_finish_s"] = None
        if not have_simgrid:
            reasons[sg_key] = "skipped: simgrid not installed"
        else:
            sg = direct_agv_simgrid(p, args.simgrid_python, cap(60.0))
            if sg is None:
                reasons[sg_key] = f"did not finish within {cap(60.0):g} s"
            else:
                out[sg_key], out[f"simgrid_direct_agv_p{p}_finish_s"] = sg["wall_s"], sg["finish_s"]
        log(
            f"direct allgatherv P={p}: ours {out[key]} s (finish {finish}), "
            f"SimGrid {out[sg_key]} s (finish {out[f'simgrid_direct_agv_p{p}_finish_s']})"
        )

    if args.only == "solver":
        out["reasons"] = reasons
        return out
    with tempfile.TemporaryDirectory() as tmp:
        replay_cases(args, steps, cap, Path(tmp), out, reasons, log)
        leafspine_cases(quick, cap, Path(tmp), out, reasons, log)
    collective_cases(cap, out, reasons, log)
    out["reasons"] = reasons
    return out


def leafspine_cases(
    quick: bool,
    cap: Callable[[float], float],
    tmp: Path,
    out: dict[str, Any],
    reasons: dict[str, str],
    log: Callable[[str], None],
) -> None:
    """Figure 5 into ``out``: the leaf-spine replays (one spine, and two spines of 8 hosts per
    leaf routed D-mod-K) and the agreement of ``auto`` with the message level."""
    ls_steps = 2 if quick else 100
    cfg = SynthConfig(layers="resnet50", workers=8, steps=ls_steps, density=0.01, seed=1)
    trace = read_trace(synth_trace(cfg, tmp / "resnet50"))
    for name, cluster in (
        ("leafspine", leaf_spine_cluster()),
        ("leafspine2", leaf_spine_cluster(hosts_per_leaf=8, spines=2)),
    ):
        for p, target in ((256, 30.0), (1024, 60.0)):
            key = f"{name}_p{p}_{ls_steps}steps_s"
            wall, res, why = capped(
                cap(target), lambda p=p, c=cluster: replay_seconds(trace, p, "auto", c)
            )
            out[key] = wall
            if why:
                reasons[key] = why
            log(f"{cluster.name}, {p} ranks x {ls_steps} steps: {wall} s {reasons.get(key, res)}")
        key = f"{name}_p128_auto_vs_message_rel"
        wall, res, why = capped(cap(60.0), lambda c=cluster: leafspine_agreement(trace, 128, 2, c))
        out[key] = res[0] if res else None
        if why:
            reasons[key] = why
        log(
            f"{cluster.name}, 128 ranks x 2 steps, auto {res[1] if res else ''} vs message: "
            f"largest relative step-time difference {out[key]} ({wall} s) {why}"
        )


COLLECTIVE_KEYS_4096 = ("allgatherv/ring", "allgatherv/bruck", "allgatherv/recursive_doubling")


def collective_run(key: str, world_size: int, limit_s: float) -> tuple[float, float, int]:
    """Wall seconds and peak resident memory (bytes) of ``vgcsim collective 10GbE KEY
    --sizes-bytes 1e5 --world-size P --engine simulate`` in a fresh interpreter, and its exit
    status (killed at ``limit_s``)."""
    command = [sys.executable, "-m", "vgcsim", "collective", "10GbE", key, "--sizes-bytes"]
    command += ["1e5", "--world-size", str(world_size), "--engine", "simulate"]
    t0 = time.perf_counter()
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = t0 + limit_s
    peak = 0.0
    while True:
        peak = max(peak, _high_water_bytes(proc.pid))
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            break
        if time.perf_counter() > deadline:
            proc.kill()
            pid, status, usage = os.wait4(proc.pid, 0)
            break
        time.sleep(0.01)
    proc.returncode = os.waitstatus_to_exitcode(status)
    # Where /proc cannot be read, the child's ru_maxrss (KiB on Linux). That one also counts
    # the memory this process held when it started the child (Linux keeps the larger of the
    # two address spaces' peaks across exec), so it is only right while this process is small.
    return time.perf_counter() - t0, peak or usage.ru_maxrss * 1024.0, proc.returncode


def _high_water_bytes(pid: int) -> float:
    """The peak resident memory of process ``pid``'s own address space so far (``VmHWM`` of
    /proc/PID/status, which starts afresh at exec); 0 where it cannot be read."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return float(line.split()[1]) * 1024.0
    except OSError:
        pass
    return 0.0


def collective_cases(
    cap: Callable[[float], float],
    out: dict[str, Any],
    reasons: dict[str, str],
    log: Callable[[str], None],
) -> None:
    """Figure 7 into ``out``: ``vgcsim collective --engine simulate`` at P = 4096 (seconds and
    peak memory, target <= 2 GiB) for the ring, Bruck and recursive-doubling allgatherv."""
    for key in COLLECTIVE_KEYS_4096:
        name = "collective_" + key.replace("/", "_") + "_p4096"
        wall, rss, code = collective_run(key, 4096, cap(60.0))
        ok = code == 0
        out[name + "_s"] = wall if ok else None
        out[name + "_peak_rss_bytes"] = rss if ok else None
        if not ok:
            reasons[name + "_s"] = f"exit status {code} after {wall:.1f} s"
        log(f"collective {key} P=4096 --engine simulate: {wall:.1f} s, peak {rss / 2**20:.0f} MiB")


def event_rate_figures(quick: bool, out: dict[str, Any], log: Callable[[str], None]) -> None:
    """Figure 1 into ``out``: bare SimPy and network events/s, flows/s, and their ratio."""
    bare, ours, flows = event_rates(rounds=2 if quick else 5, timeouts=1000, repeats=2)
    out.update(
        bare_simpy_events_per_s=bare,
        network_events_per_s=ours,
        network_flows_per_s=flows,
        event_rate_ratio=ours / bare,
    )
    log(f"event rate: bare SimPy {bare:,.0f}/s, network {ours:,.0f}/s, ratio {ours / bare:.3f}")


def replay_case(
    trace,
    key: str,
    world_size: int,
    path: str,
    limit_s: float,
    out: dict[str, Any],
    reasons: dict[str, str],
    log: Callable[[str], None],
) -> None:
    """One timed replay of ``trace`` at ``world_size`` ranks on ``path`` into ``out[key]``, and
    the CPU seconds this process spent on it into ``out[key[:-2] + "_cpu_s"]`` (on a machine
    shared with other jobs the wall time also counts their share of the cores)."""
    cpu0 = time.process_time()
    wall, res, why = capped(limit_s, lambda: replay_seconds(trace, world_size, path))
    cpu = time.process_time() - cpu0
    out[key], out[key[:-2] + "_cpu_s"] = wall, None if wall is None else cpu
    if why:
        reasons[key] = reasons[key[:-2] + "_cpu_s"] = why
    log(
        f"replay {world_size} ranks, path={path}: {wall} s ({cpu:.2f} CPU s) {res[1] if res else why}"
    )


def vgg_trace(steps: int, where: Path):
    """The synthetic VGG-like trace of the replay and sweep cases (8 workers, seed 1)."""
    cfg = SynthConfig(layers="vgg_like", workers=8, steps=steps, density=0.01, seed=1)
    return read_trace(synth_trace(cfg, where / "vgg"))


def replay_cases(
    args: argparse.Namespace,
    steps: int,
    cap: Callable[[float], float],
    tmp: Path,
    out: dict[str, Any],
    reasons: dict[str, str],
    log: Callable[[str], None],
) -> None:
    """Figures 3, 4 and 6 into ``out``: the VGG replays and the 64-case sweep."""
    trace = vgg_trace(steps, tmp)
    cases = [
        (f"message_p64_{steps}steps_s", 64, "message", 30.0),
        (f"fast_p1024_{steps}steps_s", 1024, "auto", 60.0),
        (f"fast_p4096_{steps}steps_s", 4096, "auto", 60.0),
    ]
    for key, p, path, target in cases:
        replay_case(trace, key, p, path, cap(target), out, reasons, log)
    sweep_cases(cap, tmp / "vgg", out, reasons, log, repeats=1 if args.quick else SWEEP_REPEATS)


#: Turns of the sweep figure (pool, then Dask, each turn).
SWEEP_REPEATS = 3


def sweep_cases(
    cap: Callable[[float], float],
    trace_dir: Path,
    out: dict[str, Any],
    reasons: dict[str, str],
    log: Callable[[str], None],
    repeats: int = SWEEP_REPEATS,
) -> None:
    """Figure 6 into ``out``: the 64-case sweep on a process pool and on a LocalCluster, in
    turn (pool, Dask, pool, Dask, ...) ``repeats`` times; each figure is the median of its
    runs, every run listed (``*_runs_s``). One run each says little on a machine whose speed
    moves by 10 % from minute to minute; turns spread that over both schedulers."""
    import statistics

    config = sweep64_toml(trace_dir, trace_dir.parent / "sweep64.toml")
    runs: dict[str, list[float]] = {"sweep64_pool_s": [], "sweep64_dask_s": []}
    tables: dict[str, Any] = {}
    for turn in range(repeats):
        for key, scheduler in (("sweep64_pool_s", "processes"), ("sweep64_dask_s", "local")):
            if key in reasons:
                continue
            result = trace_dir.parent / f"sweep64_{scheduler}"
            wall, table, why = capped(
                cap(120.0), lambda s=scheduler, o=result: sweep_seconds(config, s, o)[1]
            )
            log(f"sweep of 64 cases, 2 workers, {scheduler}, run {turn + 1}: {wall} s {why}")
            if why:
                reasons[key] = why
                continue
            runs[key].append(wall)
            tables.setdefault(key, table)
            if not table.equals(tables[key]):
                reasons[key] = f"run {turn + 1} wrote other rows than run 1"
    for key, walls in runs.items():
        out[key] = statistics.median(walls) if walls and key not in reasons else None
        out[key[: -len("_s")] + "_runs_s"] = walls
    pool, dask = tables.get("sweep64_pool_s"), tables.get("sweep64_dask_s")
    out["sweep64_rows_equal"] = None if pool is None or dask is None else bool(pool.equals(dask))
    if out["sweep64_rows_equal"] is None:
        reasons["sweep64_rows_equal"] = "a sweep did not finish"
    if out["sweep64_pool_s"] and out["sweep64_dask_s"]:
        out["sweep64_dask_over_pool"] = out["sweep64_dask_s"] / out["sweep64_pool_s"]
    log(
        f"sweep medians over {repeats} turns: Dask {out['sweep64_dask_s']} s, pool "
        f"{out['sweep64_pool_s']} s; rows equal (Dask vs process pool): {out['sweep64_rows_equal']}"
    )


def profile_replay(world_size: int, steps: int, top: int = 12) -> None:
    """cProfile of ``replay_seconds(trace, P, "auto")`` on the benchmark's VGG trace."""
    import cProfile
    import pstats

    with tempfile.TemporaryDirectory() as tmp:
        trace = vgg_trace(steps, Path(tmp))
        profiler = cProfile.Profile()
        profiler.enable()
        wall, info = replay_seconds(trace, world_size, "auto")
        profiler.disable()
    print(f"replay {world_size} ranks x {steps} steps, path=auto: {wall:.2f} s {info}")
    pstats.Stats(profiler).sort_stats("tottime").print_stats(top)


def profile_ring(world_size: int, top: int = 12) -> None:
    """cProfile of the event-rate workload: message-level ring allgatherv runs at P ranks."""
    import cProfile
    import pstats

    network_rate(world_size, repeats=1)  # imports and caches out of the profile
    profiler = cProfile.Profile()
    profiler.enable()
    events, flows = network_rate(world_size, repeats=2)
    profiler.disable()
    print(f"ring allgatherv P={world_size}, 2 runs: {events:,.0f} events/s, {flows:,.0f} flows/s")
    pstats.Stats(profiler).sort_stats("tottime").print_stats(top)


def profile_sweep(steps: int) -> None:
    """Where the 64-case sweep's time goes on a 2-worker LocalCluster, with Dask's defaults
    (spawned workers) and then with this package's ``local_cluster``: cluster start, first
    result, all results, close."""
    import logging

    from distributed import Client, LocalCluster, wait

    def dask_defaults():
        return LocalCluster(
            n_workers=2,
            threads_per_worker=1,
            processes=True,
            dashboard_address=None,
            silence_logs=logging.ERROR,
        )

    with tempfile.TemporaryDirectory() as tmp:
        vgg_trace(steps, Path(tmp))
        sweep = sweep64(Path(tmp) / "vgg")
        jobs = expand_factors(sweep.sweep)
        for label, start in (
            ("Dask defaults", dask_defaults),
            ("local_cluster", lambda: local_cluster(2)),
        ):
            t0 = time.perf_counter()
            cluster = start()
            client = Client(cluster)
            t1 = time.perf_counter()
            futures = [client.submit(run_job, job, sweep.simulate, pure=False) for job in jobs]
            wait(futures, return_when="FIRST_COMPLETED")
            t2 = time.perf_counter()
            client.gather(futures)
            t3 = time.perf_counter()
            client.close()
            cluster.close()
            t4 = time.perf_counter()
            print(
                f"{label}: cluster start {t1 - t0:.2f} s, first result {t2 - t1:.2f} s, "
                f"all results {t3 - t1:.2f} s, close {t4 - t3:.2f} s, total {t4 - t0:.2f} s",
                flush=True,
            )


def profile_direct(world_size: int, top: int = 8) -> None:
    """cProfile of one message-level direct allgatherv: where the max-min solver spends time."""
    import cProfile
    import pstats

    direct_agv_ours(min(world_size, 8))  # imports and caches out of the profile
    profiler = cProfile.Profile()
    profiler.enable()
    finish = direct_agv_ours(world_size)
    profiler.disable()
    print(f"direct allgatherv P={world_size}: simulated finish {finish!r} s")
    pstats.Stats(profiler).sort_stats("tottime").print_stats(top)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--steps", type=int, default=0, help="trace steps of the VGG replays (1000; --quick 100)"
    )
    parser.add_argument(
        "--quick", action="store_true", help="100 / 2 steps, smaller loops, one sweep turn"
    )
    parser.add_argument("--json", action="store_true", help="one JSON object on stdout")
    parser.add_argument(
        "--cap-factor", type=float, default=2.0, help="stop a case at this multiple of its target"
    )
    parser.add_argument("--limit-s", type=float, default=0.0, help="one cap for every case")
    parser.add_argument(
        "--simgrid-python",
        default="/usr/bin/python3",
        help="interpreter that can import simgrid (Debian's python3-simgrid)",
    )
    parser.add_argument(
        "--only",
        choices=["solver", "replay", "message", "sweep", "leafspine", "collective"],
        help="solver: only the event rate and the direct allgatherv cases (with SimGrid's); "
        "replay: only the VGG replays and the sweep; "
        "message: only the event rate and the 64-rank message-level replay; "
        "sweep: only the 64-case sweep; leafspine: only the leaf-spine replays; "
        "collective: only `vgcsim collective --engine simulate` at P = 4096",
    )
    parser.add_argument(
        "--profile-ring",
        type=int,
        default=0,
        metavar="P",
        help="only profile (cProfile) the event-rate workload (ring allgatherv) at P ranks",
    )
    parser.add_argument(
        "--profile-direct",
        type=int,
        default=0,
        metavar="P",
        help="only profile (cProfile) one direct allgatherv at P ranks and print the top entries",
    )
    parser.add_argument(
        "--profile-replay",
        type=int,
        default=0,
        metavar="P",
        help="only profile (cProfile) the fast-path replay at P ranks (--steps, default 100)",
    )
    parser.add_argument(
        "--profile-sweep",
        action="store_true",
        help="only time the phases of the 64-case sweep on a LocalCluster, with Dask's "
        "defaults and with vgcsim's settings (--steps, default 100)",
    )
    args = parser.parse_args()
    if args.profile_sweep:
        profile_sweep(args.steps or 100)
        return
    if args.profile_replay:
        profile_replay(args.profile_replay, args.steps or 100)
        return
    if args.profile_direct:
        profile_direct(args.profile_direct)
        return
    if args.profile_ring:
        profile_ring(args.profile_ring)
        return

    def log(line: str) -> None:
        print(line, file=sys.stderr if args.json else sys.stdout, flush=True)

    out = measure(args, log)
    if args.json:
        json.dump(out, sys.stdout, indent=1)
        print()
        return
    for key, value in out.items():
        if key != "reasons":
            print(f"{key:34s} {value}")
    for key, why in out["reasons"].items():
        print(f"{key}: {why}")


if __name__ == "__main__":
    main()
