"""What a replay tells its user while it runs: one warning when steps fall back to the message
level (with the reason), and progress (a line every few seconds off a terminal, nothing with
``--quiet``)."""

from __future__ import annotations

import logging

import pytest
from simhelpers import cluster, leaf_spine

from vgcsim.cli import main
from vgcsim.simulator.replay import SimulateConfig, replay_units, simulate_trace
from vgcsim.traces.io import read_trace

TRACE = "tests/data/sample_trace"


def _notices(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "vgcsim.simulator.replay"]


def test_steps_falling_back_to_the_message_level_are_said_once_with_the_reason(caplog):
    # P = 8 on a spread leaf-spine of 4 hosts per leaf: the trace's 4 workers share leaves,
    # ranks of one leaf run ahead of each other and the compressed steps go to the message
    # level, at both world sizes and in both steps: one warning for the whole run
    trace = read_trace(TRACE)
    cl = cluster(leaf_spine(4))
    with caplog.at_level(logging.WARNING, logger="vgcsim.simulator.replay"):
        _, _, info = simulate_trace(trace, cl, [8, 12], SimulateConfig(max_steps=2))
    assert info["8"]["compressed"]["message"] >= 1 and info["12"]["compressed"]["message"] >= 1
    said = _notices(caplog)
    assert len(said) == 1
    assert "compressed steps at P = 8" in said[0]
    assert "round-level path is not exact" in said[0] and "message level" in said[0]


@pytest.mark.parametrize(
    ("topology", "cfg"),
    [
        (None, SimulateConfig(max_steps=2)),  # a star: collective level
        (leaf_spine(4), SimulateConfig(max_steps=2, path="message")),  # asked for
        (leaf_spine(4, spines=2), SimulateConfig(max_steps=2)),  # P = 16: round level
    ],
)
def test_a_run_without_a_fall_back_says_nothing(topology, cfg, caplog):
    trace = read_trace(TRACE)
    cl = cluster(topology) if topology else cluster()
    with caplog.at_level(logging.WARNING, logger="vgcsim.simulator.replay"):
        _, _, info = simulate_trace(trace, cl, [16], cfg)
    assert _notices(caplog) == []
    if cfg.path == "auto":
        assert all(v["message"] == 0 for v in info["16"].values())


def test_fifo_sharing_names_itself_as_the_reason(caplog):
    trace = read_trace(TRACE)
    with caplog.at_level(logging.WARNING, logger="vgcsim.simulator.replay"):
        simulate_trace(trace, cluster(leaf_spine(4)), [8], SimulateConfig(max_steps=1, mode="fifo"))
    said = _notices(caplog)
    assert len(said) == 1 and "mode = 'fifo'" in said[0]


def test_progress_counts_every_step_of_every_variant():
    trace = read_trace(TRACE)
    cfg = SimulateConfig(max_steps=3)
    seen: list[int] = []
    simulate_trace(trace, cluster(leaf_spine(4)), [8, 16], cfg, progress=seen.append)
    assert sum(seen) == replay_units(cfg, [8, 16], trace.steps_count) == 2 * 3 * 4
    assert len(seen) > 2  # reported as steps finish, not once per world size


@pytest.mark.parametrize("quiet", (False, True))
def test_cli_progress_lines_off_a_terminal_and_none_when_quiet(
    quiet, tmp_path, capsys, caplog, monkeypatch
):
    # stderr is not a terminal here: a line per update at VGCSIM_PROGRESS_S = 0, the last one
    # at 100 %; --quiet: none (the fall-back warning is not progress and stays)
    monkeypatch.setenv("VGCSIM_PROGRESS_S", "0")
    topo = tmp_path / "c.toml"
    topo.write_text(
        'base = "10GbE"\n[topology]\nkind = "leaf_spine"\nhosts_per_leaf = 4\n'
        'oversubscription = 4.0\nplacement = "spread"\n'
    )
    argv = ["simulate", TRACE, "--cluster", str(topo), "--world-sizes", "8"]
    argv += ["--set", "max_steps=2", "-o", str(tmp_path / "out")]
    assert main(argv + (["-q"] if quiet else [])) == 0
    err = capsys.readouterr().err.splitlines()
    lines = [e for e in err if e.startswith("simulate: ")]
    if quiet:
        assert lines == []
    else:
        assert lines and lines[-1].startswith("simulate: 8/8 steps (100 %)")
    assert sum("at message level" in m for m in _notices(caplog)) == 1
