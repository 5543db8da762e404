"""Hosts in network namespaces on a shaped bridge: a small real cluster on one Linux machine.

:func:`shaped_hosts` builds N namespaces ("hosts"), each with one interface ``eth0`` joined
to a bridge that lives in its own namespace (the "switch"), and shapes every host's link with
``tc qdisc tbf`` on both ends of its veth pair (host → switch and switch → host), so every
host sends and receives at ``rate`` at once, like a full-duplex NIC. Nothing is created in
the caller's namespace; everything is deleted on exit, also on failure. Needs root.

Each name starts with a tag unique to the process (``vgcsim<pid>``) and the hosts sit on the
private subnet 10.213.0.0/24, reachable only from inside the namespaces.

Run as a script it reproduces the figures of docs/distributed.md ("Measured across network
namespaces"): ``python tests/distributed/_netns.py --rate 200mbit -o DIR`` builds 4 hosts,
measures TCP goodput between two of them, runs ``vgcsim calibrate`` across the 4, a second
sweep at 8 and 40 MB, ``vgcsim validate`` of the second against the first's cluster file
and against the same file without its allgatherv host cost (``allgatherv_host_s_per_byte``
= 0 and no ``allgatherv_host_s_per_byte_table``: the α-β(-γ) ring alone), prints the load average before and after (``os.getloadavg``;
the timings are load sensitive), with ``--record N`` also N-step dense and variance
recordings, validated, and tears everything down.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

SUBNET = "10.213.0"
#: TCP payload per Ethernet frame at MTU 1500 with timestamps: 1448 of 1514 bytes on the wire
#: (tbf counts the frame from its Ethernet header; preamble and gaps do not exist on a veth).
TCP_PAYLOAD_PER_FRAME = 1448 / 1514


def missing_prerequisite() -> str | None:
    """Why namespaces cannot be built here (None when they can)."""
    if os.geteuid() != 0:
        return "building network namespaces needs root"
    for tool in ("ip", "tc"):
        if shutil.which(tool) is None:
            return f"the {tool!r} command (iproute2) is missing"
    return None


def parse_rate_bps(rate: str) -> float:
    """tc's rate syntax ("200mbit", "1gbit") in bits per second."""
    units = {"kbit": 1e3, "mbit": 1e6, "gbit": 1e9, "bit": 1.0}
    for suffix, scale in units.items():
        if rate.endswith(suffix):
            return float(rate[: -len(suffix)]) * scale
    raise ValueError(f"rate {rate!r}: use kbit, mbit or gbit")


def tcp_goodput_Bps(rate: str) -> float:
    """Goodput of one TCP stream on a tbf at ``rate``: rate × 1448/1514 (bytes/s)."""
    return parse_rate_bps(rate) / 8 * TCP_PAYLOAD_PER_FRAME


#: The smallest tbf bucket: one whole 64 KiB GSO packet with its headers, and room to spare.
MIN_BURST_BYTES = 128 << 10


def burst_bytes(rate: str) -> int:
    """tbf bucket: 2 ms at ``rate``, at least ``MIN_BURST_BYTES``. A bucket smaller than a
    64 KiB GSO packet makes tbf cut every such packet into MTU frames, and the kernel's work
    per frame then takes most of two cores while four hosts send at 200 Mbit."""
    return max(MIN_BURST_BYTES, int(parse_rate_bps(rate) / 8 * 2e-3))


@dataclass(frozen=True)
class Hosts:
    """The namespaces built by :func:`shaped_hosts`."""

    names: tuple[str, ...]
    addrs: tuple[str, ...]
    switch: str
    rate: str
    iface: str = "eth0"

    def exec_argv(self, i: int, argv: Sequence[str]) -> list[str]:
        """``argv`` run inside host ``i``."""
        return ["ip", "netns", "exec", self.names[i], *argv]


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True)


def _tc(ns: str, dev: str, rate: str, burst: int, latency: str | None = None) -> None:
    # limit: the bucket plus 10 ms of queue at the rate, so TCP sees some delay before it
    # sees drops, without the seconds of queue that would inflate every round trip; or
    # tc's own ``latency`` (the longest a packet may wait) where given.
    queue = (
        ["latency", latency]
        if latency
        else ["limit", str(burst + int(parse_rate_bps(rate) / 8 * 10e-3))]
    )
    subprocess.run(
        ["tc", "-n", ns, "qdisc", "replace", "dev", dev, "root", "tbf", "rate", rate]
        + ["burst", str(burst), *queue],
        check=True,
        capture_output=True,
        text=True,
    )


@contextlib.contextmanager
def shaped_hosts(
    n: int,
    rate: str,
    *,
    tag: str | None = None,
    burst: int | None = None,
    latency: str | None = None,
) -> Iterator[Hosts]:
    """Build ``n`` hosts on a bridge, every link shaped to ``rate`` (tbf bucket ``burst``
    bytes, default :func:`burst_bytes`; queue bounded by ``latency``, default 10 ms of
    queue past the bucket); delete them on exit."""
    tag = tag or f"vgcsim{os.getpid()}"
    switch = f"{tag}-sw"
    names = tuple(f"{tag}-h{i}" for i in range(n))
    addrs = tuple(f"{SUBNET}.{i + 1}" for i in range(n))
    burst = burst_bytes(rate) if burst is None else int(burst)
    made: list[str] = []
    try:
        for ns in (switch, *names):
            _ip("netns", "add", ns)
            made.append(ns)
        _ip("-n", switch, "link", "add", "br0", "type", "bridge")
        _ip("-n", switch, "link", "set", "br0", "up")
        for i, (ns, addr) in enumerate(zip(names, addrs, strict=True)):
            port = f"p{i}"
            _ip(
                "link",
                "add",
                "eth0",
                "netns",
                ns,
                "type",
                "veth",
                "peer",
                "name",
                port,
                "netns",
                switch,
            )
            _ip("-n", switch, "link", "set", port, "master", "br0")
            _ip("-n", switch, "link", "set", port, "up")
            _ip("-n", ns, "addr", "add", f"{addr}/24", "dev", "eth0")
            _ip("-n", ns, "link", "set", "eth0", "up")
            _ip("-n", ns, "link", "set", "lo", "up")
            _tc(ns, "eth0", rate, burst, latency)
            _tc(switch, port, rate, burst, latency)
        yield Hosts(names, addrs, switch, rate)
    finally:
        for ns in reversed(made):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)


_TCP_PEER = textwrap.dedent(
    """
    import socket, sys, time
    mode, host, port, nbytes = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    if mode == "recv":
        srv = socket.create_server((host, port))
        conn, _ = srv.accept()
        buf, got, t0 = bytearray(1 << 20), 0, None
        while True:
            k = conn.recv_into(buf)
            if not k:
                break
            if t0 is None:
                t0 = time.perf_counter()
            got += k
        print(got / (time.perf_counter() - t0))
    else:
        for _ in range(200):
            try:
                s = socket.create_connection((host, port))
                break
            except OSError:
                time.sleep(0.05)
        chunk = bytes(1 << 20)
        for _ in range(nbytes >> 20):
            s.sendall(chunk)
        s.close()
    """
)


def measure_tcp_goodput_Bps(hosts: Hosts, nbytes: int, src: int = 0, dst: int = 1) -> float:
    """Bytes per second of one plain TCP stream of ``nbytes`` from host ``src`` to ``dst``
    (timed by the receiver, from its first byte)."""
    args = [hosts.addrs[dst], "5201", str(nbytes)]
    recv = subprocess.Popen(
        hosts.exec_argv(dst, [sys.executable, "-c", _TCP_PEER, "recv", *args]),
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        subprocess.run(
            hosts.exec_argv(src, [sys.executable, "-c", _TCP_PEER, "send", *args]),
            check=True,
            timeout=120,
        )
        out, _ = recv.communicate(timeout=30)
    finally:
        if recv.poll() is None:
            recv.kill()
            recv.wait()
    return float(out.strip())


def run_on_hosts(
    hosts: Hosts, argv_for: Sequence[Sequence[str]], *, timeout_s: float, cwd: Path | None = None
) -> list[subprocess.CompletedProcess]:
    """Run one command per host (``argv_for[i]`` in host ``i``) at once; wait for all."""
    procs = []
    logs = []
    with tempfile.TemporaryDirectory(prefix="vgcsim-netns-") as tmp:
        for i, argv in enumerate(argv_for):
            log = open(Path(tmp) / f"h{i}.log", "w+")  # noqa: SIM115 - closed below
            logs.append(log)
            procs.append(
                subprocess.Popen(
                    hosts.exec_argv(i, list(argv)),
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    text=True,
                    cwd=cwd,
                )
            )
        deadline = time.monotonic() + timeout_s
        try:
            for p in procs:
                p.wait(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            pass
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
                    p.wait()
        done = []
        for p, log in zip(procs, logs, strict=True):
            log.seek(0)
            done.append(subprocess.CompletedProcess(p.args, p.returncode, log.read(), ""))
            log.close()
    return done


def vgcsim_argv(*args: str) -> list[str]:
    """``vgcsim ARGS`` with this interpreter."""
    return [sys.executable, "-m", "vgcsim", *args]


def calibrate_argv(hosts: Hosts, i: int, port: int, out: Path, *extra: str) -> list[str]:
    """The ``vgcsim calibrate`` command node ``i`` runs (one rank per node)."""
    return vgcsim_argv(
        "calibrate",
        "--nnodes",
        str(len(hosts.names)),
        "--node-rank",
        str(i),
        "--master-addr",
        hosts.addrs[0],
        "--master-port",
        str(port),
        "--iface",
        hosts.iface,
        "-o",
        str(out),
        *extra,
    )


def record_argv(hosts: Hosts, i: int, port: int, out: Path, *settings: str) -> list[str]:
    """Host ``i``'s rank of ``python -m vgcsim.traces.training.distributed`` (what ``vgcsim record
    --backend gloo`` runs per rank) with the variables torchrun would set, one rank per host;
    ``settings`` are RecordConfig ``KEY=VALUE`` pairs."""
    env = [f"RANK={i}", "LOCAL_RANK=0", f"GROUP_RANK={i}", f"WORLD_SIZE={len(hosts.names)}"]
    env += [f"MASTER_ADDR={hosts.addrs[0]}", f"MASTER_PORT={port}"]
    env += [f"GLOO_SOCKET_IFNAME={hosts.iface}"]
    argv = [sys.executable, "-m", "vgcsim.traces.training.distributed", "--backend", "gloo"]
    argv += ["-o", str(out)]
    for kv in settings:
        argv += ["--set", kv]
    return ["env", *env, *argv]


#: The recordings of ``--record``: a dense MLP (2.4 MB fp32 allreduce per step) and the same
#: MLP with variance compression (an allgatherv of the compressed payloads).
RECORDINGS = {
    "dense": ("compressor.name=dense",),
    "variance": ("compressor.name=variance",),
}
RECORD_BASE = ("data.name=digits", "model.name=mlp", "model.width=4", "eval_every=0")


def _main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rate", default="200mbit")
    p.add_argument("--hosts", type=int, default=4)
    p.add_argument(
        "--ops",
        default="p2p,allreduce,allgatherv,allgatherv_skewed",
        help="ops of the calibration sweep",
    )
    p.add_argument("--sizes", default="4:64MiB", help="sizes of the calibration sweep")
    p.add_argument("--check-ops", default="p2p,allreduce,allgatherv")
    p.add_argument("--check-sizes", default="8MB,40MB")
    p.add_argument("--repeats", type=int, default=10)
    p.add_argument("--check-repeats", type=int, default=5, help="repeats of the check sweep")
    p.add_argument("--tolerance", default="0.05")
    p.add_argument("--record", type=int, default=0, help="also record N steps of each RECORDINGS")
    p.add_argument("-o", "--out", type=Path, required=True, help="folder for the files")
    args = p.parse_args(argv)
    reason = missing_prerequisite()
    if reason:
        print(reason, file=sys.stderr)
        return 2
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    sweeps = {
        "cal": ["--ops", args.ops, "--sizes", args.sizes, "--repeats", str(args.repeats)],
        "check": [
            "--ops",
            args.check_ops,
            "--sizes",
            args.check_sizes,
            "--repeats",
            str(args.check_repeats),
        ],
    }
    print("load average before: {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()), flush=True)
    with shaped_hosts(args.hosts, args.rate) as hosts:
        print(f"{args.hosts} hosts, every link tbf rate {args.rate} burst {burst_bytes(args.rate)}")
        goodput = measure_tcp_goodput_Bps(hosts, 64 << 20 if "m" in args.rate else 256 << 20)
        print(
            f"TCP goodput h0 -> h1: {goodput / 1e6:.2f} MB/s "
            f"(rate x 1448/1514 = {tcp_goodput_Bps(args.rate) / 1e6:.2f} MB/s)"
        )
        for k, (name, sweep) in enumerate(sweeps.items()):
            cmds = [
                calibrate_argv(hosts, i, 29511 + k, out / f"{name}.toml", *sweep, "--force")
                for i in range(args.hosts)
            ]
            t0 = time.monotonic()
            done = run_on_hosts(hosts, cmds, timeout_s=3600)
            print(f"$ vgcsim {' '.join(cmds[0][3:])}  (node 0; {time.monotonic() - t0:.0f} s)")
            print(done[0].stdout)
            if any(d.returncode for d in done):
                for d in done:
                    print(d.stdout[-2000:], file=sys.stderr)
                return 1
        for k, (name, settings) in enumerate(RECORDINGS.items() if args.record else ()):
            run = out / f"run-{name}"
            kv = (*RECORD_BASE, *settings, f"steps={args.record}")
            cmds = [record_argv(hosts, i, 29521 + k, run, *kv) for i in range(args.hosts)]
            done = run_on_hosts(hosts, cmds, timeout_s=3600)
            print(f"$ {' '.join(cmds[0][7:])}  (one rank per host)")
            if any(d.returncode for d in done):
                for d in done:
                    print(d.stdout[-2000:], file=sys.stderr)
                return 1
            cmd = vgcsim_argv("validate", str(run), "--cluster", str(out / "cal.toml"))
            print(f"$ vgcsim {' '.join(cmd[3:])}", flush=True)
            subprocess.run([*cmd, "--show-steps", "0", "--tolerance", args.tolerance])
    print("load average after: {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()), flush=True)
    # The same link without the allgatherv host cost: what the alpha-beta(-gamma) ring predicts.
    text = (out / "cal.toml").read_text()
    text = re.sub(r"(?m)^allgatherv_host_s_per_byte_table = .*\n", "", text)
    (out / "cal-nohost.toml").write_text(
        re.sub(r"(?m)^allgatherv_host_s_per_byte = .*$", "allgatherv_host_s_per_byte = 0.0", text)
    )
    for cluster in ("cal", "cal-nohost", "check"):
        cmd = vgcsim_argv(
            "validate",
            str(out / "check.measurements.json"),
            "--cluster",
            str(out / f"{cluster}.toml"),
            "--tolerance",
            args.tolerance,
        )
        print(f"$ vgcsim {' '.join(cmd[3:])}", flush=True)
        subprocess.run(cmd)
    return 0


if __name__ == "__main__":
    sys.exit(_main())
