"""σ, the host CPU per byte a rank sends or receives: the rate cap it puts on a collective's
bytes where ranks share cores (hand-worked, closed form and simulator alike), its recovery by
the link fit from exact data, and refused values."""

from __future__ import annotations

import dataclasses

import pytest
from modelhelpers import called_measurements

from vgcsim import api
from vgcsim.cli import main
from vgcsim.core.cluster import get_cluster, load_cluster, shared_cluster, shared_link
from vgcsim.core.errors import ConfigError
from vgcsim.models.linkfit import fit_link

SIGMA = 1e-9  # s per byte sent or received


def _cluster(sigma=SIGMA, ranks_per_host=4, host_cores=2, efficiency=1.0):
    base = get_cluster("10GbE")
    link = dataclasses.replace(
        base.link,
        bandwidth_Bps=1.25e9,
        latency_s=50e-6,
        call_overhead_s=100e-6,
        gamma_s_per_byte=0.0,
        comm_cpu_s_per_byte=sigma,
        efficiency=efficiency,
    )
    return dataclasses.replace(
        base, link=link, ranks_per_host=ranks_per_host, host_cores=host_cores
    )


def test_the_cap_is_one_over_two_f_sigma_on_the_payload():
    # 4 ranks on 2 cores: f = 2, so a rank moves 1 / (2 · 2 · 1 ns) = 250 MB/s each way
    link = _cluster(efficiency=0.9).link
    shared = shared_link(link, 2.0)
    assert shared.payload_Bps == pytest.approx(2.5e8, rel=1e-12)
    assert shared.call_overhead_s == pytest.approx(200e-6, rel=1e-12)
    assert shared.latency_s == link.latency_s
    # one core each (f = 1): 500 MB/s, still below the 1.125 GB/s payload of the wire
    assert shared_link(link, 1.0).payload_Bps == pytest.approx(5e8, rel=1e-12)
    # a cap above the wire's rate leaves the wire's
    slow = dataclasses.replace(link, bandwidth_Bps=1.25e7)
    assert shared_link(slow, 2.0).bandwidth_Bps == slow.bandwidth_Bps


def test_size_segments_are_capped_too_and_no_sigma_changes_nothing():
    link = dataclasses.replace(
        _cluster().link, segments=((0.0, 0.0, 2.0e9), (262144.0, -1e-3, 1.25e9))
    )
    segments = shared_link(link, 2.0).segments
    assert [s[:2] for s in segments] == [(0.0, 0.0), (262144.0, -1e-3)]
    assert [s[2] for s in segments] == pytest.approx([2.5e8, 2.5e8], rel=1e-12)
    plain = _cluster(sigma=0.0)
    assert shared_link(plain.link, 1.0) is plain.link
    unshared = dataclasses.replace(plain, host_cores=0)
    assert shared_cluster(unshared, 4) is unshared


@pytest.mark.parametrize("engine", ["model", "simulate"])
def test_a_ring_allreduce_pays_its_bytes_at_the_cpu_rate(engine):
    # P = 4, n = 4 MB per rank: c·f + 2(P−1)·α + 2(P−1)/P·n·2fσ
    #   = 2·100 µs + 6·50 µs + 1.5 · 4e6 · 4 ns = 0.0245 s
    n = 4e6
    expected = 2 * 100e-6 + 6 * 50e-6 + 1.5 * n * 4e-9
    got = api.collective(_cluster(), "allreduce/ring", [n] * 4, engine=engine)
    assert got == pytest.approx(expected, rel=1e-9)
    # without σ the wire's 0.8 ns per byte: 0.0053 s
    plain = api.collective(_cluster(sigma=0.0), "allreduce/ring", [n] * 4, engine=engine)
    assert plain == pytest.approx(2 * 100e-6 + 6 * 50e-6 + 1.5 * n * 0.8e-9, rel=1e-9)


def test_an_allgatherv_sends_at_the_cpu_rate_in_both_engines():
    sizes = [1e6, 3e6, 2e6, 5e5]
    closed = api.collective(_cluster(), "allgatherv/ring", sizes, engine="model")
    simulated = api.collective(_cluster(), "allgatherv/ring", sizes, engine="simulate")
    assert simulated == pytest.approx(closed, rel=1e-9)
    plain = api.collective(_cluster(sigma=0.0), "allgatherv/ring", sizes, engine="model")
    assert closed > 3 * plain  # 4 ns against 0.8 ns per byte, the steps' α and c aside


SIZES = (4, 64, 1024, 16384, 262144, 1 << 20, 4 << 20, 16 << 20, 64 << 20)
ALPHA, BETA, CALL = 60e-6, 1 / 1.25e9, 400e-6


def synthetic(sigma, world):
    """Exact times: p2p on the wire, collectives' bytes at max(β, 2σ), c per call."""
    ops = ("p2p", "allreduce", "allgather")
    return called_measurements(ops, SIZES, world, ALPHA, BETA, CALL, max(BETA, 2 * sigma))


@pytest.mark.parametrize("world", [3, 4])
def test_the_fit_recovers_sigma_alpha_and_the_call_cost(world):
    fit, table = fit_link(synthetic(2e-9, world), comm_cpu=True)
    assert fit.comm_cpu_op == "allreduce"
    assert fit.comm_cpu_s_per_byte == pytest.approx(2e-9, rel=1e-3)
    assert fit.call_overhead_s == pytest.approx(CALL, rel=1e-3)
    assert fit.latency_s == pytest.approx(ALPHA, rel=1e-2)
    assert fit.gamma_s_per_byte == 0.0
    big = [r for r in table if r["op"] != "p2p" and r["size_bytes"] >= 1 << 20]
    assert max(abs(r["rel_error"]) for r in big) < 1e-3


def test_no_sigma_where_the_wire_explains_the_bytes_and_none_unless_asked():
    fit, _ = fit_link(synthetic(0.0, 4), comm_cpu=True)
    assert fit.comm_cpu_s_per_byte == 0.0 and fit.comm_cpu_op == ""
    fit, _ = fit_link(synthetic(2e-9, 4))
    assert fit.comm_cpu_s_per_byte == 0.0


def test_sigma_read_from_a_cluster_file(tmp_path):
    path = tmp_path / "c.toml"
    path.write_text('[link]\npreset = "1GbE"\ncomm_cpu_s_per_byte = 1.5e-9\n')
    assert load_cluster(path).link.comm_cpu_s_per_byte == 1.5e-9


@pytest.mark.parametrize("value", ["-1e-9", "2.0", "nan", '"fast"'])
def test_bad_sigma_is_one_line_and_exit_2(tmp_path, capsys, value):
    path = tmp_path / "bad.toml"
    path.write_text(f'[link]\npreset = "1GbE"\ncomm_cpu_s_per_byte = {value}\n')
    with pytest.raises(ConfigError):
        load_cluster(path)
    assert main(["clusters", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err


def test_predict_and_simulate_replay_a_trace_with_the_cap_alike():
    trace = api.load_trace("tests/data/sample_trace")
    cluster = dataclasses.replace(_cluster(sigma=5e-9), compute="trace")
    kw = dict(world_sizes=[4], dense_encodings=["fp32"], allgatherv=["ring"])
    pred = api.predict(trace, cluster, **kw)
    sim = api.simulate(trace, cluster, world_sizes=[4], dense_encodings=["fp32"], allgatherv=[])
    plain = api.predict(trace, dataclasses.replace(cluster, link=_cluster(0.0).link), **kw)

    def comm(df, method):
        return float(df[(df.step == -1) & (df.method == method)].comm_s.iloc[0])

    for method in ("dense", "compressed"):
        assert comm(sim, method) == pytest.approx(comm(pred, method), rel=1e-6)
        assert comm(pred, method) > comm(plain, method)


def test_calibrate_writes_sigma_unshared_only_for_ranks_that_shared_cores():
    doc = synthetic(2e-9, 4)
    shared = api.fit_calibration(doc, hosts=(4, 2))  # 4 ranks on 2 cores: f = 2
    assert shared.fit.comm_cpu_s_per_byte == pytest.approx(1e-9, rel=1e-3)
    assert "comm_cpu_s_per_byte = " in shared.toml
    own = api.fit_calibration(doc)  # a core each: the bytes' rate is the wire's, with γ
    assert own.fit.comm_cpu_s_per_byte == 0.0 and "comm_cpu" not in own.toml


def test_a_token_bucket_refills_at_the_capped_rate_in_predict_and_simulate_alike():
    trace = api.load_trace("tests/data/sample_trace")
    sigma = _cluster(sigma=5e-9)
    link = dataclasses.replace(sigma.link, burst_bytes=64e3)
    cluster = dataclasses.replace(sigma, link=link, compute="trace")
    pred = api.predict(trace, cluster, world_sizes=[4], dense_encodings=["fp32"])
    sim = api.simulate(trace, cluster, world_sizes=[4], dense_encodings=["fp32"], allgatherv=[])
    for method in ("dense", "compressed"):
        p = pred[(pred.step == -1) & (pred.method == method)]
        s = sim[(sim.step == -1) & (sim.method == method)]
        assert float(s.step_s.iloc[0]) == pytest.approx(float(p.step_s.iloc[0]), rel=1e-6)
