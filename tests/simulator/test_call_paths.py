"""simulate_collective's path choice and its limits: the collective-level path equals the
message level (time, every rank's finish and the per-link table) where it is taken; a run
that falls back says so once; world sizes above the limit and runs that cannot fit memory
are refused up front, with the estimate, in one line."""

from __future__ import annotations

import logging
import os
import resource
import subprocess
import sys

import numpy as np
import pytest
from simhelpers import cluster, leaf_spine

from vgcsim import api
from vgcsim.cli import main
from vgcsim.core.errors import ConfigError
from vgcsim.simulator.call import simulate_collective
from vgcsim.simulator.collectives import get_schedule, unit_sizes
from vgcsim.simulator.network import LinkMonitor
from vgcsim.simulator.paths.message import run_message
from vgcsim.simulator.paths.plan import Phase
from vgcsim.simulator.topology import build_topology


def _message_level(key, sizes, cl, semantics):
    """The reference: every message simulated, with a link monitor."""
    p = len(sizes)
    topo = build_topology(cl, p)
    s = get_schedule(key, p, cl.gpus_per_node)
    mon = LinkMonitor(topo.n_channels)
    fin = run_message(
        [Phase(np.zeros(p), s, unit_sizes(s, np.asarray(sizes, dtype=float)), key)],
        topo,
        semantics=semantics,
        gamma_s_per_byte=cl.link.gamma_s_per_byte,
        monitor=mon,
    )[0]
    used = mon.bytes > 0
    names = np.asarray(topo.channel_names)[used]
    return fin, dict(zip(names, zip(mon.bytes[used], mon.busy_s[used], strict=True), strict=True))


@pytest.mark.parametrize("semantics", ("rendezvous", "eager"))
@pytest.mark.parametrize(
    "key",
    [
        "allgatherv/ring",
        "allgatherv/bruck",
        "allgatherv/recursive_doubling",
        "allreduce/ring",
        "allreduce/binomial_tree",
    ],
)
def test_the_collective_level_path_equals_the_message_level(key, semantics):
    # a star, P = 12 (not a power of two), uneven blocks: no two flows ever share a channel,
    # so the recurrence is the message level's arithmetic (to float rounding) and each link
    # is busy for the sum of its flows' bytes / bandwidth
    p = 12
    rng = np.random.default_rng(7)
    sizes = np.full(p, 3e6) if key.startswith("allreduce/") else rng.uniform(1e5, 1e6, p)
    cl = cluster()
    run = simulate_collective(key, sizes, cl, semantics=semantics)
    fin, links = _message_level(key, sizes, cl, semantics)
    if semantics == "rendezvous":  # eager: where messages into a rank overlap, message level
        assert run.path == "collective"
    np.testing.assert_allclose(run.finish_s, fin, rtol=1e-12)
    got = {r.link: (r.bytes, r.busy_s) for r in run.links.itertuples()}
    assert got.keys() == links.keys()
    for name, (nbytes, busy) in links.items():
        assert got[name][0] == pytest.approx(nbytes, rel=1e-12)
        assert got[name][1] == pytest.approx(busy, rel=1e-9)


def test_a_run_that_falls_back_to_the_message_level_says_why_once(caplog):
    # the direct allgatherv puts P - 1 flows on every host link at once: message level
    p = 6
    sizes = np.linspace(1e5, 6e5, p)
    cl = cluster(leaf_spine(2))
    with caplog.at_level(logging.WARNING, logger="vgcsim.simulator.call"):
        run = simulate_collective("allgatherv/direct", sizes, cl)
    warned = [r for r in caplog.records if r.name == "vgcsim.simulator.call"]
    assert len(warned) == 1
    assert "allgatherv/direct" in warned[0].getMessage()
    assert "share links" in warned[0].getMessage()
    assert run.path == "message"
    fin, _ = _message_level("allgatherv/direct", sizes, cl, "rendezvous")
    np.testing.assert_array_equal(run.finish_s, fin)


@pytest.mark.parametrize("engine", ("model", "simulate"))
def test_every_engine_refuses_a_world_size_above_65536(engine, capsys):
    argv = ["collective", "10GbE", "allgatherv/ring", "--sizes-bytes", "1e6"]
    assert main([*argv, "--world-size", "1000000000", "--engine", engine]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "65536" in err[0]
    with pytest.raises(ConfigError, match="65536"):
        api.collective("10GbE", "allgatherv/ring", [1e6] * 65537, engine=engine)


def _limit_address_space():
    resource.setrlimit(resource.RLIMIT_AS, (3 * 2**30, 3 * 2**30))


@pytest.mark.skipif(sys.platform != "linux", reason="RLIMIT_AS and /proc are Linux's")
def test_a_run_that_cannot_fit_memory_is_refused_up_front_with_its_estimate():
    # a real process limited to 3 GiB of address space: the P = 16384 ring's 268 million
    # flows need far more, which it says in one line before building anything (exit 2)
    cmd = [sys.executable, "-m", "vgcsim", "collective", "10GbE", "allgatherv/ring"]
    cmd += ["--sizes-bytes", "1e6", "--world-size", "16384", "--engine", "simulate"]
    done = subprocess.run(
        cmd,
        capture_output=True,
        text=True,
        preexec_fn=_limit_address_space,
        env={**os.environ, "PYTHONWARNINGS": "ignore"},
        timeout=120,
    )
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert "P = 16384" in lines[0] and "268,419,072 flows" in lines[0]
    assert "GiB of memory" in lines[0] and "--engine model" in lines[0]
