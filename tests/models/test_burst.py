"""A token bucket on the host link (``[link] burst``): the credit formula by hand, the cluster
file's spellings and refusals, and predict and simulate taking the same credit off a step."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from vgcsim.cli import main
from vgcsim.core.cluster import load_cluster
from vgcsim.core.collectives import burst_credit_s
from vgcsim.models.iteration import StepBreakdown, with_burst

DEMO = "vgcsim/data/demo_traces/dense"


def test_credit_by_hand():
    # 100 Mbit/s = 12.5 MB/s, a 125 kB bucket: 10 ms of tokens
    b, bw = 125e3, 12.5e6
    comm = np.array([0.050, 0.050, 0.003, 0.0])
    step = np.array([0.054, 0.080, 0.053, 0.010])
    # idle 4 ms (refills 50 kB: 4 ms off), 30 ms (the bucket caps it: 10 ms off),
    # 50 ms idle but a 3 ms exchange (it cannot go below zero), no exchange
    np.testing.assert_allclose(
        burst_credit_s(comm, step, b, bw), [0.004, 0.010, 0.003, 0.0], atol=1e-15
    )
    np.testing.assert_array_equal(burst_credit_s(comm, step, 0.0, bw), np.zeros(4))


def test_with_burst_takes_the_credit_off_the_exchange_and_the_step():
    z = np.zeros(2)
    bd = StepBreakdown(z, z, z, np.array([0.05, 0.01]), np.array([0.06, 0.04]))
    out = with_burst(bd, 125e3, 12.5e6)
    np.testing.assert_allclose(out.comm_s, [0.04, 0.0], atol=1e-15)
    np.testing.assert_allclose(out.step_s, [0.05, 0.03], atol=1e-15)
    assert with_burst(bd, 0.0, 12.5e6) is bd


def _cluster(tmp_path, line: str):
    path = tmp_path / "c.toml"
    path.write_text(f'name = "c"\n[topology]\nkind = "star"\n[link]\npreset = "1GbE"\n{line}\n')
    return path


@pytest.mark.parametrize(
    ("line", "expected"),
    [('burst = "256KiB"', 262144.0), ("burst_bytes = 250000", 250000.0), ("", 0.0)],
)
def test_the_cluster_file_spells_it_with_units_or_in_bytes(tmp_path, line, expected):
    assert load_cluster(_cluster(tmp_path, line)).link.burst_bytes == expected


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ('burst = "-3kB"', "link.burst"),
        ('burst = "lots"', "link.burst: cannot parse"),
        ("burst_bytes = 1e20", "link.burst_bytes must be a finite number in [0, 1e+15]"),
        ('burst = "1kB"\nburst_bytes = 1000', "give either 'burst' or 'burst_bytes'"),
    ],
)
def test_a_bad_burst_is_one_line_and_exit_2(tmp_path, capsys, line, message):
    argv = ["predict", DEMO, "--cluster", str(_cluster(tmp_path, line)), "--world-sizes", "2"]
    assert main([*argv, "-o", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1


@pytest.mark.parametrize("p", [2, 4])
def test_predict_and_simulate_take_the_same_credit(tmp_path, p):
    steps = {}
    for burst in ("", 'burst = "64kB"'):
        cluster = _cluster(tmp_path, burst)
        for cmd in ("predict", "simulate"):
            out = tmp_path / f"{cmd}{len(burst)}"
            argv = [cmd, DEMO, "--cluster", str(cluster), "--world-sizes", str(p), "-o", str(out)]
            assert main(argv) == 0
            df = pd.read_parquet(out / "results.parquet")
            m = df[(df["step"] == -1) & (df["encoding"] == "fp32") & (df["method"] == "dense")]
            steps[cmd, bool(burst)] = m[["step_s", "comm_s", "compute_s"]].iloc[0]
    for cmd in ("predict", "simulate"):
        plain, bucket = steps[cmd, False], steps[cmd, True]
        idle = plain.step_s - plain.comm_s
        credit = min(64e3 / 125e6, idle, plain.comm_s)  # 1GbE: 125 MB/s
        assert credit > 0
        assert bucket.step_s == pytest.approx(plain.step_s - credit, rel=1e-9)
    assert steps["predict", True].step_s == pytest.approx(steps["simulate", True].step_s, rel=1e-6)
