"""Starting torch.distributed process groups: a local launcher and the torchrun environment.

Every multi-process entry point in vgcsim (``python -m vgcsim.traces.training.distributed``, the
calibration benchmark) reads the environment variables ``torchrun`` sets: ``RANK``,
``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR``, ``MASTER_PORT`` and ``GROUP_RANK`` (the
node's index), so the same command runs under ``torchrun`` on a real cluster.
:func:`launch_local` plays torchrun's part: it starts N copies of the command with those
variables set, waits for all of them, and turns a failed rank into a
:class:`DistributedRunError` carrying that rank's last lines of output. On one machine the
ranks meet on a free loopback port; across machines every node runs it with the same
``nnodes``, ``master_addr`` and ``master_port`` and its own ``node_rank`` (a static
rendezvous, like ``torchrun --nnodes N --node-rank I --master-addr A --master-port P``).

Which network interface gloo and NCCL use is their own choice unless ``GLOO_SOCKET_IFNAME``
and ``NCCL_SOCKET_IFNAME`` name one (:func:`socket_iface_env`): gloo otherwise binds to the
address the host name resolves to, which on a multi-homed host may not reach the other nodes
(the ranks then wait until the rendezvous times out).
"""

from __future__ import annotations

import datetime
import logging
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

from vgcsim.core.errors import ConfigError, VgcsimError

log = logging.getLogger(__name__)

#: Backends the entry points accept. gloo runs on CPU anywhere; nccl needs one GPU per rank.
BACKENDS = ("gloo", "nccl")


class DistributedRunError(VgcsimError):
    """A rank of a multi-process run failed, timed out, or the process group could not start."""


@dataclass(frozen=True)
class RankEnv:
    """Where this process sits in the job, as torchrun describes it."""

    rank: int
    world_size: int
    local_rank: int
    master_addr: str
    master_port: int
    #: the node the rank runs on: ``GROUP_RANK`` (torchrun and :func:`launch_local` set it),
    #: else the host name
    node: str = ""


def socket_iface_env(iface: str | None) -> dict[str, str]:
    """Environment that makes gloo and NCCL use network interface ``iface`` (None: no change)."""
    if not iface:
        return {}
    if len(iface) > 15 or any(c.isspace() or c in "/,:" for c in iface):
        raise ConfigError(f"--iface {iface!r} is not a network interface name")
    return {"GLOO_SOCKET_IFNAME": iface, "NCCL_SOCKET_IFNAME": iface}


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free a moment ago (the OS picks it; a race is possible but rare)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def rank_env(environ: Mapping[str, str] | None = None) -> RankEnv:
    """Read the torchrun variables; a missing or malformed one is a :class:`ConfigError`."""
    env = os.environ if environ is None else environ
    missing = [k for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT") if k not in env]
    if missing:
        raise ConfigError(
            f"not started as a distributed job: missing environment variable(s) {', '.join(missing)}; "
            "start it with torchrun (torchrun --nproc-per-node N -m ...) or through "
            "the --nprocs option of the vgcsim command"
        )
    try:
        rank, world = int(env["RANK"]), int(env["WORLD_SIZE"])
        local = int(env.get("LOCAL_RANK", env["RANK"]))
        port = int(env["MASTER_PORT"])
    except ValueError as exc:
        raise ConfigError(f"malformed torchrun environment: {exc}") from None
    if not 0 <= rank < world:
        raise ConfigError(f"RANK={rank} is outside 0..WORLD_SIZE-1 (WORLD_SIZE={world})")
    node = env.get("GROUP_RANK") or socket.gethostname()
    return RankEnv(rank, world, local, env["MASTER_ADDR"], port, node)


def check_backend(backend: str) -> str:
    """Validate a backend name against :data:`BACKENDS` and what this torch build provides."""
    import torch.distributed as dist

    if backend not in BACKENDS:
        raise ConfigError(f"unknown backend {backend!r}; valid: {', '.join(BACKENDS)}")
    available = {"gloo": dist.is_gloo_available(), "nccl": dist.is_nccl_available()}
    if not available[backend]:
        raise ConfigError(f"backend {backend!r} is not available in this torch build")
    return backend


def init_process_group(backend: str, *, timeout_s: float = 300.0) -> RankEnv:
    """Join the process group described by the environment; returns this rank's place in it.

    With ``nccl`` each rank uses GPU ``LOCAL_RANK``.
    """
    import torch
    import torch.distributed as dist

    check_backend(backend)
    env = rank_env()
    if backend == "nccl":
        torch.cuda.set_device(env.local_rank)
    dist.init_process_group(
        backend=backend,
        init_method=f"tcp://{env.master_addr}:{env.master_port}",
        rank=env.rank,
        world_size=env.world_size,
        timeout=datetime.timedelta(seconds=timeout_s),
    )
    return env


def leave_process_group(*, completed: bool) -> None:
    """Leave the process group. After a completed run every rank first meets the others at a
    barrier, so no rank tears its connections down while a peer is still finishing (gloo can
    abort a process that exits while its peers still hold connections to it)."""
    import torch.distributed as dist

    if not dist.is_initialized():
        return
    if completed:
        dist.barrier()
    dist.destroy_process_group()


def exit_rank(code: int) -> NoReturn:
    """End a rank's process with ``code`` once it has left the process group.

    Seen rarely on gloo (once in several full test runs, not reproduced in isolation): a rank
    that finished, met its peers at the barrier and destroyed the group still aborted while
    the interpreter shut down ("terminate called without an active exception", a native
    thread torn down unjoined). Every file is closed by then, so the rank flushes its output
    and exits without running finalizers.
    """
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def device_for(backend: str) -> str:
    """Tensors exchanged on ``backend`` live here (gloo: CPU; nccl: this rank's GPU)."""
    if backend == "nccl":
        import torch

        return f"cuda:{torch.cuda.current_device()}"
    return "cpu"


def launch_local(
    argv: Sequence[str],
    nprocs: int,
    *,
    timeout_s: float = 600.0,
    master_addr: str = "127.0.0.1",
    master_port: int | None = None,
    nnodes: int = 1,
    node_rank: int = 0,
    iface: str | None = None,
    threads_per_proc: int | None = None,
    extra_env: Mapping[str, str] | None = None,
    cwd: str | Path | None = None,
) -> None:
    """Run ``python <argv...>`` as ``nprocs`` ranks on this machine, like torchrun does.

    Each rank gets the torchrun variables (``RANK = node_rank·nprocs + LOCAL_RANK``,
    ``WORLD_SIZE = nnodes·nprocs``, ``GROUP_RANK = node_rank``), the interface variables of
    :func:`socket_iface_env` when ``iface`` is given, and, unless ``threads_per_proc`` says
    otherwise, ``OMP_NUM_THREADS = max(1, cpus // nprocs)`` so the ranks do not oversubscribe
    the cores. Returns when every rank exited 0. If one fails, the others are terminated and a
    :class:`DistributedRunError` shows the failed rank's last output lines; the whole job is
    killed after ``timeout_s`` seconds. Without ``master_port`` (one node only) the rendezvous
    port is picked free, and a port that another process binds between being picked and rank 0
    binding it is retried on a fresh port (3 attempts); with several nodes every node must be
    given the same ``master_port``.
    """
    if nprocs < 1:
        raise ConfigError(f"nprocs must be >= 1, got {nprocs}")
    if nnodes < 1 or not 0 <= node_rank < nnodes:
        raise ConfigError(f"--node-rank must be in 0..{max(nnodes, 1) - 1} for --nnodes {nnodes}")
    if nnodes > 1 and master_port is None:
        raise ConfigError("with --nnodes > 1 give --master-port (the same on every node)")
    if master_port is not None and not 0 < master_port < 65536:
        raise ConfigError(f"--master-port must be in 1..65535, got {master_port}")
    env = {**(extra_env or {}), **socket_iface_env(iface)}
    threads = threads_per_proc or max(1, (os.cpu_count() or 1) // nprocs)
    layout = _Layout(nprocs, nnodes, node_rank, master_addr)
    if master_port is not None:
        _run_once(argv, layout, master_port, threads, timeout_s, env, cwd)
        return
    for attempt in range(1, _PORT_ATTEMPTS + 1):
        port = free_port(master_addr)
        try:
            _run_once(argv, layout, port, threads, timeout_s, env, cwd)
            return
        except _PortTaken:
            # The port was free when picked but another process bound it before rank 0 did.
            log.warning("rendezvous port %d was taken (attempt %d); retrying", port, attempt)
    raise DistributedRunError(
        f"no free rendezvous port on {master_addr} after {_PORT_ATTEMPTS} attempts"
    )


@dataclass(frozen=True)
class _Layout:
    """Where this launcher's ranks sit: ``nprocs`` on node ``node_rank`` of ``nnodes``."""

    nprocs: int
    nnodes: int
    node_rank: int
    master_addr: str


_PORT_ATTEMPTS = 3
_PORT_TAKEN_MARKERS = ("Address already in use", "EADDRINUSE", "address already in use")


class _PortTaken(Exception):
    pass


def _run_once(
    argv: Sequence[str],
    layout: _Layout,
    port: int,
    threads: int,
    timeout_s: float,
    extra_env: Mapping[str, str],
    cwd: str | Path | None,
) -> None:
    procs: list[subprocess.Popen] = []
    logs: list[Path] = []
    nprocs, master_addr = layout.nprocs, layout.master_addr
    with tempfile.TemporaryDirectory(prefix="vgcsim-ranks-") as tmp:
        for local in range(nprocs):
            rank = layout.node_rank * nprocs + local
            env = dict(os.environ)
            env.update(extra_env)
            env.update(
                RANK=str(rank),
                LOCAL_RANK=str(local),
                WORLD_SIZE=str(layout.nnodes * nprocs),
                LOCAL_WORLD_SIZE=str(nprocs),
                GROUP_RANK=str(layout.node_rank),
                MASTER_ADDR=master_addr,
                MASTER_PORT=str(port),
                OMP_NUM_THREADS=str(threads),
            )
            log_path = Path(tmp) / f"rank{rank}.log"
            logs.append(log_path)
            with open(log_path, "wb") as out:
                procs.append(
                    subprocess.Popen(
                        [sys.executable, *argv],
                        env=env,
                        stdout=out,
                        stderr=subprocess.STDOUT,
                        cwd=cwd,
                    )
                )
        log.info("launched %d ranks on %s:%d: %s", nprocs, master_addr, port, " ".join(argv))
        _wait_all(procs, logs, timeout_s, first_rank=layout.node_rank * nprocs)


def _wait_all(
    procs: list[subprocess.Popen], logs: list[Path], timeout_s: float, first_rank: int = 0
) -> None:
    deadline = time.monotonic() + timeout_s
    failed: int | None = None
    try:
        while True:
            codes = [p.poll() for p in procs]
            bad = [r for r, c in enumerate(codes) if c not in (None, 0)]
            if bad:
                failed = bad[0]
                break
            if all(c == 0 for c in codes):
                return
            if time.monotonic() > deadline:
                raise DistributedRunError(
                    f"distributed run timed out after {timeout_s:.0f} s;\n"
                    + _tails(logs, first_rank)
                )
            time.sleep(0.05)
    finally:
        for p in procs:
            if p.poll() is None:
                p.terminate()
        for p in procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
    tail = _tail(logs[failed])
    if any(m in tail for m in _PORT_TAKEN_MARKERS):
        raise _PortTaken(tail)
    raise DistributedRunError(
        f"rank {first_rank + failed} exited with status {procs[failed].returncode}; its last output:\n{tail}"
    )


def _tail(path: Path, lines: int = 25) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return "(no output)"
    return "\n".join(text.splitlines()[-lines:]) or "(no output)"


def _tails(logs: list[Path], first_rank: int = 0) -> str:
    return "\n".join(f"--- rank {first_rank + r} ---\n{_tail(p, 8)}" for r, p in enumerate(logs))
