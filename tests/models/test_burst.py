"""A token bucket on the host link (``[link] burst``): the credit formula by hand, the cluster
file's spellings and refusals, and predict and simulate taking the same credit off a step."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from vgcsim.cli import main
from vgcsim.core.cluster import load_cluster
from vgcsim.core.collectives import burst_credit_s, refill_bytes
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
    # only the bytes' time: an exchange of 50 ms with 1 ms of it on the wire (its start-up
    # and per-call terms stay) loses 1 ms, not the 10 ms the idle time and bucket allow
    wire = np.array([0.001, 0.050, 0.003, 0.0])
    np.testing.assert_allclose(
        burst_credit_s(comm, step, b, bw, wire), [0.001, 0.010, 0.003, 0.0], atol=1e-15
    )


def test_with_burst_takes_the_credit_off_the_exchange_and_the_step():
    z = np.zeros(2)
    bd = StepBreakdown(z, z, z, np.array([0.05, 0.01]), np.array([0.06, 0.04]))
    out = with_burst(bd, 125e3, 12.5e6)
    np.testing.assert_allclose(out.comm_s, [0.04, 0.0], atol=1e-15)
    np.testing.assert_allclose(out.step_s, [0.05, 0.03], atol=1e-15)
    assert with_burst(bd, 0.0, 12.5e6) is bd
    capped = with_burst(bd, 125e3, 12.5e6, np.array([0.002, 0.002]))
    np.testing.assert_allclose(capped.comm_s, [0.048, 0.008], atol=1e-15)


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
        # tc's spelling: 256 KiB to tc, 32 000 bytes (256 kilobits) to a size of this project
        ('burst = "256kb"', "link.burst: '256kb' is ambiguous: tc reads it as 262144 bytes"),
        ("burst_bytes = 1e20", "link.burst_bytes must be a finite number in [0, 1e+15]"),
        ('burst = "1kB"\nburst_bytes = 1000', "give either 'burst' or 'burst_bytes'"),
        ('allgather_latency = "-1ms"', "link.allgather_latency"),
        ('allgather_latency = "2s"', "link.allgather_latency"),
        ('allgather_latency_s = 1e-3\nallgather_latency = "1ms"', "give either"),
    ],
)
def test_a_bad_burst_or_allgather_latency_is_one_line_and_exit_2(tmp_path, capsys, line, message):
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
    link = load_cluster(str(cluster)).link
    # 1GbE's start-up refills α × payload rate of the bucket before each message
    refill = link.latency_s * link.payload_Bps
    assert refill_bytes(link) == pytest.approx(refill) and 0 < refill < 64e3
    msgs, n = 2 * (p - 1), 4 * 38282  # a ring allreduce's messages of n / P, fp32 gradient
    assert n / p > refill
    start = msgs * refill / link.payload_Bps  # each message's first bytes leave at once
    wire = msgs * (n / p - refill) / link.payload_Bps  # the rest wait for tokens
    for cmd in ("predict", "simulate"):
        plain, bucket = steps[cmd, False], steps[cmd, True]
        idle = plain.step_s - plain.comm_s
        # the idle refill adds the depth beyond one start-up's refill (1GbE: 125 MB/s)
        credit = min((64e3 - refill) / 125e6, idle, plain.comm_s - start, wire)
        assert credit > 0
        assert bucket.step_s == pytest.approx(plain.step_s - start - credit, rel=1e-9)
    assert steps["predict", True].step_s == pytest.approx(steps["simulate", True].step_s, rel=1e-6)


def test_the_credit_is_the_bytes_time_alone_in_predict_and_simulate(tmp_path):
    """A 2 ms start-up per message and a bucket of 100 MB: idle time and bucket would take
    the whole exchange; the tokens shorten only its bandwidth time, which the same cluster
    with its link's bandwidth alone prices (``wire_cluster``), so the start-up terms stay."""
    from vgcsim.core.cluster import wire_cluster

    steps = {}
    for burst in ("", 'burst = "100MB"'):
        # the traced compute x 1000: idle seconds enough to refill what the exchange uses
        cluster = _cluster(tmp_path, f'latency = "2ms"\n{burst}')
        cluster.write_text('compute = "trace"\ncompute_scale = 1000.0\n' + cluster.read_text())
        for cmd in ("predict", "simulate"):
            out = tmp_path / f"{cmd}{len(burst)}"
            argv = [cmd, DEMO, "--cluster", str(cluster), "--world-sizes", "4", "-o", str(out)]
            assert main(argv) == 0
            df = pd.read_parquet(out / "results.parquet")
            m = df[(df["step"] == -1) & (df["encoding"] == "fp32") & (df["method"] == "dense")]
            steps[cmd, bool(burst)] = m[["step_s", "comm_s"]].iloc[0]
    link = wire_cluster(load_cluster(str(cluster))).link
    assert link.latency_s == 0 and link.call_overhead_s == 0 and link.burst_bytes == 100e6
    for cmd in ("predict", "simulate"):
        plain, bucket = steps[cmd, False], steps[cmd, True]
        # a ring allreduce of P = 4 pays 2(P - 1) = 6 start-ups of 2 ms that tokens do not cut;
        # its bytes, 2(P - 1)/P of the 38,282 fp32 gradient, leave with the tokens
        wire_s = 1.5 * 4 * 38282 / link.payload_Bps
        assert plain.comm_s == pytest.approx(6 * 0.002 + wire_s, rel=1e-6)
        assert bucket.comm_s == pytest.approx(6 * 0.002, rel=1e-6)
        assert plain.step_s - bucket.step_s == pytest.approx(wire_s, rel=1e-6)
    assert steps["predict", True].step_s == pytest.approx(steps["simulate", True].step_s, rel=1e-6)


def test_the_cluster_file_spells_the_allgather_latency_with_units(tmp_path):
    link = load_cluster(_cluster(tmp_path, 'allgather_latency = "1.3ms"')).link
    assert link.allgather_latency_s == pytest.approx(1.3e-3)
