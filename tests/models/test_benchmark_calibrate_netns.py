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
    assert row["latency_s"] == pytest.approx(1.1 * 800e-6, rel=1e-6)  # medians: 1.1 t
    assert set(row["typical_error_per_op"]) == {"p2p", "allreduce", "allgather", "allgatherv"}
    assert row["repeatability_per_op"]["allreduce"] == pytest.approx(0.2)
    assert netns.main(["--from", str(kept), "--setups", "1gbit:16kb", "--markdown"]) == 0
    table = capsys.readouterr().out.splitlines()
    assert table[0].startswith("| setup | α (µs) | c (µs) |")
    assert table[2].startswith("| 1gbit, 16kb burst | 880 | ") and "(20.0 %)" in table[2]


def test_a_missing_kept_setup_fails_the_error_gate(kept, capsys):
    argv = ["--from", str(kept), "--setups", "1gbit:16kb,200mbit:16kb", "--max-error", "0.5"]
    assert netns.main(argv) == 1
    out = capsys.readouterr().out
    assert "200mbit burst 16kb: failed:" in out and "not found" in out


def test_a_missing_kept_folder_is_one_line_and_exit_2(tmp_path, capsys):
    assert netns.main(["--from", str(tmp_path / "nothing"), "--setups", "1gbit:16kb"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "no such folder" in err
