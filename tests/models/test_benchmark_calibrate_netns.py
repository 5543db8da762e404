"""``benchmarks/calibrate_netns.py --from DIR``: a kept run's measurements fitted again without
root, with each op's typical error and the measurements' repeatability."""

from __future__ import annotations

import json

import pytest
from repo_scripts import load_script
from test_linkfit_gloo import gloo_rows

from vgcsim.traces.calibration import CalibrateConfig, write_measurements

netns = load_script("benchmarks/calibrate_netns.py")


@pytest.fixture
def kept(tmp_path):
    doc = gloo_rows(4)
    for r in doc["rows"]:
        t = r["seconds"][0]
        r["seconds"] = [t, 1.2 * t, t, 1.2 * t]
    write_measurements(
        tmp_path / "cal-1gbit-16kb.measurements.json",
        CalibrateConfig(),
        4,
        doc["rows"],
        [0, 1, 2, 3],
    )
    return tmp_path


def test_refit_reports_errors_and_repeatability(kept, capsys):
    assert netns.main(["--from", str(kept), "--setups", "1gbit:16kb", "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)["setups"]
    # medians: 1.1 t; the refit prices the collectives with the setup's 16 KiB bucket, which
    # these rows were made without: their byte terms move α by a little
    assert row["latency_s"] == pytest.approx(1.1 * 800e-6, rel=0.01)
    assert set(row["typical_error_per_op"]) == {"p2p", "allreduce", "allgather", "allgatherv"}
    assert row["repeatability_per_op"]["allreduce"] == pytest.approx(0.2)
    assert netns.main(["--from", str(kept), "--setups", "1gbit:16kb", "--markdown"]) == 0
    table = capsys.readouterr().out.splitlines()
    assert table[0].startswith("| setup | α (µs) | α_g (µs) | c (µs) |")
    alpha_us = f"{row['latency_s'] * 1e6:.0f}"
    assert table[2].startswith(f"| 1gbit, 16kb burst | {alpha_us} | ") and "(20.0 %)" in table[2]


def test_a_missing_kept_setup_fails_the_error_gate(kept, capsys):
    argv = ["--from", str(kept), "--setups", "1gbit:16kb,200mbit:16kb", "--max-error", "0.5"]
    assert netns.main(argv) == 1
    out = capsys.readouterr().out
    assert "200mbit burst 16kb: failed:" in out and "not found" in out


def test_a_missing_kept_folder_is_one_line_and_exit_2(tmp_path, capsys):
    assert netns.main(["--from", str(tmp_path / "nothing"), "--setups", "1gbit:16kb"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "no such folder" in err


def test_parts_switch_the_fit_on_part_by_part_and_end_at_the_default(kept, capsys):
    argv = ["--from", str(kept), "--setups", "1gbit:16kb,200mbit:16kb"]
    assert netns.main([*argv, "--json"]) == 0
    default = json.loads(capsys.readouterr().out)["setups"][0]["typical_error_per_op"]
    assert netns.main([*argv, "--parts"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[0].startswith("| setup | fit | α (µs) | c (µs) | α_g (µs) | p2p | allreduce |")
    rows = [line.split(" | ") for line in lines[2:]]
    n = len(netns.PARTS)
    assert [r[1] for r in rows[:n]] == [label for label, _ in netns.PARTS]
    assert rows[0][3] == "0"  # one line and α per step: no per-call cost
    ops = lines[0].strip("| ").split(" | ")[5:]
    last = dict(zip(ops, (c.strip(" |") for c in rows[n - 1][5:]), strict=True))
    assert last == {op: netns.pct(default[op]) for op in ops}  # the default fit's errors
    assert rows[n] == ["| 200mbit, 16kb", "not found |"]


def test_parts_without_a_kept_run_is_one_line_and_exit_2(capsys):
    assert netns.main(["--parts"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--from DIR" in err
