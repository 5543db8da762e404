"""δ, the allgatherv implementation's host time per gathered byte: recovered exactly from a
synthetic link with a known host cost, a slope and not a per-call overhead, written to the
cluster file, and priced alike by the closed form and the simulator."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from modelhelpers import exact_time_s

from vgcsim.core.cluster import LinkSpec, load_cluster
from vgcsim.core.clusterfile import cluster_toml
from vgcsim.core.errors import ConfigError
from vgcsim.models.collectives import allgatherv_host_time_s, collective_time_s
from vgcsim.models.linkfit import cost_coefficients, fit_link, host_coefficient
from vgcsim.simulator.call import simulate_collective

SIZES = (4, 64, 1024, 16384, 262144, 1 << 20, 4 << 20, 16 << 20)


def synthetic(alpha, beta, gamma, delta, world, *, extra_s=0.0):
    """Exact times of p2p, allreduce and allgatherv on a link with these α, β, γ, δ;
    ``extra_s`` is a per-call overhead on every allgatherv (not per byte)."""
    rows = []
    for op in ("p2p", "allreduce", "allgatherv"):
        for size in SIZES:
            t = exact_time_s(op, size, world, alpha, beta, gamma=gamma, delta=delta)
            t += extra_s if op == "allgatherv" else 0.0
            rows.append({"op": op, "size_bytes": size, "seconds": [t, t * 1.001, t * 0.999]})
    return {"world_size": world, "backend": "gloo", "rows": rows}


@pytest.mark.parametrize("world", [2, 4, 8])
def test_fit_recovers_a_known_host_cost_exactly(world):
    fit, table = fit_link(synthetic(300e-6, 1 / 25e6, 2e-9, 3e-9, world))
    assert fit.latency_s == pytest.approx(300e-6, rel=1e-9)
    assert fit.bandwidth_Bps == pytest.approx(25e6, rel=1e-9)
    assert fit.gamma_s_per_byte == pytest.approx(2e-9, rel=1e-6)
    assert fit.allgatherv_host_s_per_byte == pytest.approx(3e-9, rel=1e-6)
    assert fit.host_op == "allgatherv"
    assert max(abs(r["rel_error"]) for r in table) < 1e-6
    host_rows = {r["size_bytes"] for r in table if r["role"] == "host"}
    assert host_rows and all(r["op"] == "allgatherv" for r in table if r["role"] == "host")
    # the smallest allgatherv rows are latency-bound: checked, not fitted
    assert 4 not in host_rows and 16 << 20 in host_rows


def test_a_fixed_cost_per_allgatherv_is_fitted_as_h_not_as_delta():
    # 20 ms more on every allgatherv call, whatever its size: δ stays the slope (3 ns/B),
    # h (allgatherv_host_s) takes the 20 ms from the small sizes, and the size-by-size
    # points, taken beyond h, stay at δ.
    fit, table = fit_link(synthetic(300e-6, 1 / 25e6, 0.0, 3e-9, 4, extra_s=0.02))
    assert fit.allgatherv_host_s_per_byte == pytest.approx(3e-9, rel=1e-6)
    assert fit.allgatherv_host_s == pytest.approx(0.02, rel=1e-9)
    assert fit.host_call_op == "allgatherv"
    points = dict(fit.allgatherv_host_s_per_byte_table)
    assert points and all(v == pytest.approx(3e-9, rel=1e-6) for v in points.values())
    # every allgatherv row is priced as measured, the small ones as h's rows
    rows = [r for r in table if r["op"] == "allgatherv"]
    assert max(abs(r["rel_error"]) for r in rows) < 1e-6
    assert {r["size_bytes"] for r in rows if r["role"] == "fixed"} >= {4, 64, 1024}
    assert {r["size_bytes"] for r in rows if r["role"] == "host"} >= {1 << 20, 16 << 20}
    # without one, h is 0 and the cluster file says nothing of it
    bare, _ = fit_link(synthetic(300e-6, 1 / 25e6, 0.0, 3e-9, 4))
    assert bare.allgatherv_host_s == pytest.approx(0.0, abs=1e-15)


def test_h_enters_the_cluster_file_and_both_twins_once_per_allgatherv(tmp_path):
    fit, _ = fit_link(synthetic(300e-6, 1 / 25e6, 0.0, 3e-9, 4, extra_s=0.02))
    path = tmp_path / "cal.toml"
    path.write_text(cluster_toml("cal", fit, "cpu", "synthetic"))
    assert "allgatherv_host_s = " in path.read_text()
    cluster = load_cluster(str(path))
    assert cluster.link.allgatherv_host_s == pytest.approx(0.02, rel=1e-9)
    without = load_cluster(str(path))
    without = dataclasses.replace(
        without, link=dataclasses.replace(without.link, allgatherv_host_s=0.0)
    )
    sizes = np.array([1e6, 3e6, 2.5e5, 5e5])
    for key in ("allgatherv/padded", "allgatherv/bounded", "allgatherv/ring"):
        added = 0.02 if key == "allgatherv/padded" else 0.0  # h is the padded one's code
        with_h = float(collective_time_s(key, sizes[None, :], cluster)[0])
        bare = float(collective_time_s(key, sizes[None, :], without)[0])
        assert with_h - bare == pytest.approx(added, abs=1e-12)
        simulated = simulate_collective(key, sizes, cluster).time_s
        assert simulated == pytest.approx(with_h, rel=1e-9)
    # one rank gathers nothing: no host time at all
    assert float(allgatherv_host_time_s(np.array([5e6]), cluster.link)) == 0.0
    # a host whose 4 ranks share 2 cores stretches h as it stretches δ (CPU time)
    from vgcsim.core.clusterspec import shared_link

    assert shared_link(cluster.link, 2.0).allgatherv_host_s == pytest.approx(0.04, rel=1e-12)


@pytest.mark.parametrize("value", ["-1ms", "2s", "fast"])
def test_a_bad_allgatherv_host_time_is_one_line_and_exit_2(tmp_path, capsys, value):
    from vgcsim.cli import main

    path = tmp_path / "c.toml"
    path.write_text(
        f'name = "c"\n[link]\nbandwidth = "1Gbps"\nlatency = "10us"\nallgatherv_host = "{value}"\n'
    )
    assert main(["clusters", str(path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "allgatherv_host" in err[0]


def test_without_a_host_op_delta_is_zero_and_allgatherv_rows_are_only_checked():
    fit, table = fit_link(synthetic(300e-6, 1 / 25e6, 0.0, 3e-9, 4), host_op=None)
    assert fit.allgatherv_host_s_per_byte == 0.0 and fit.host_op == ""
    big = next(r for r in table if r["op"] == "allgatherv" and r["size_bytes"] == 16 << 20)
    assert big["role"] == "check"
    assert big["measured_s"] - big["fitted_s"] == pytest.approx(4 * (16 << 20) * 3e-9, rel=1e-3)


def test_a_link_without_host_cost_fits_delta_zero():
    fit, _ = fit_link(synthetic(300e-6, 1 / 25e6, 1e-9, 0.0, 4))
    assert fit.allgatherv_host_s_per_byte == pytest.approx(0.0, abs=1e-15)


def test_host_coefficient_is_the_gathered_buffer():
    assert host_coefficient("allgatherv", 1000, 4) == 4000.0
    assert host_coefficient("allreduce", 1000, 4) == 0.0
    assert host_coefficient("p2p", 1000, 4) == 0.0
    with pytest.raises(ConfigError, match="unknown op 'bcast'"):
        host_coefficient("bcast", 8, 2)


def test_the_cluster_file_carries_delta_and_models_and_simulator_price_it_alike(tmp_path):
    fit, _ = fit_link(synthetic(300e-6, 1 / 25e6, 2e-9, 3e-9, 4))
    path = tmp_path / "cal.toml"
    path.write_text(cluster_toml("cal", fit, "cpu", "synthetic"))
    cluster = load_cluster(str(path))
    link = cluster.link
    assert link.allgatherv_host_s_per_byte == pytest.approx(3e-9, rel=1e-6)
    # skewed blocks: the padded allgatherv pads to the largest on the wire; of its two host
    # copies the backend's takes the 4 x 3 MB padded buffer and the copy out each block at
    # its own length, 4.75 MB: ½·12 MB + ½·4.75 MB = 8.375 MB
    sizes = np.array([1e6, 3e6, 2.5e5, 5e5])
    ring = 3 * (link.latency_s + 8 * link.beta_s_per_byte)
    ring += 3 * (link.latency_s + 3e6 * link.beta_s_per_byte)
    host = 8.375e6 * link.allgatherv_host_s_per_byte
    assert float(allgatherv_host_time_s(sizes, link)) == pytest.approx(host, rel=1e-12)
    predicted = float(collective_time_s("allgatherv/padded", sizes[None, :], cluster)[0])
    assert predicted == pytest.approx(ring + host, rel=1e-12)
    simulated = simulate_collective("allgatherv/padded", sizes, cluster).time_s
    assert simulated == pytest.approx(predicted, rel=1e-9)
    # the other allgatherv algorithms have no host term
    plain = float(collective_time_s("allgatherv/ring", sizes[None, :], cluster)[0])
    assert plain == pytest.approx(3 * (link.latency_s + 3e6 * link.beta_s_per_byte), rel=1e-12)
    assert simulate_collective("allgatherv/ring", sizes, cluster).time_s == pytest.approx(plain)


def test_one_rank_has_no_host_cost():
    link = LinkSpec("l", 1e9, 1e-5, allgatherv_host_s_per_byte=1e-9)
    assert float(allgatherv_host_time_s(np.array([5e6]), link)) == 0.0


def test_a_negative_host_cost_is_refused():
    with pytest.raises(ConfigError, match="allgatherv_host_s_per_byte"):
        LinkSpec("l", 1e9, 1e-5, allgatherv_host_s_per_byte=-1e-9)


@pytest.mark.parametrize("size_exchange", [True, False])
def test_replay_and_predict_of_a_trace_price_the_host_cost_alike(size_exchange):
    import dataclasses
    from pathlib import Path

    from vgcsim.models.predict import PredictOptions, predict_trace
    from vgcsim.simulator.replay import SimulateConfig, simulate_trace
    from vgcsim.traces.io import read_trace

    trace = read_trace(Path(__file__).resolve().parents[1] / "data" / "sample_trace")
    base = load_cluster("10GbE")
    # 2 ns per gathered byte: on 10GbE about as much as the wire (0.8 ns/B)
    cl = dataclasses.replace(
        base, link=dataclasses.replace(base.link, allgatherv_host_s_per_byte=2e-9)
    )
    sizes = (4, 6)
    frames = {}
    for name, cluster in (("host", cl), ("none", base)):
        cfg = SimulateConfig(allgatherv=("padded",), per_step=True, size_exchange=size_exchange)
        sim, _, _ = simulate_trace(trace, cluster, sizes, cfg)
        opts = PredictOptions(
            world_sizes=sizes, allgatherv=("padded",), per_step=True, size_exchange=size_exchange
        )
        pred = predict_trace(trace, cluster, opts)
        key = ["world_size", "method", "encoding", "step"]
        merged = sim.merge(pred, on=key, suffixes=("_sim", "_pred"))
        frames[name] = merged[(merged["method"] == "compressed") & (merged["step"] >= 0)]
    host, none = frames["host"], frames["none"]
    np.testing.assert_allclose(host["comm_s_sim"], host["comm_s_pred"], rtol=5e-3)
    # the closed form's comm grows by exactly delta * (½ the P padded payloads + ½ the P real
    # ones) per step
    p = host["world_size"].to_numpy()
    padded = p * host["payload_bytes_max_pred"].to_numpy()
    extra = 2e-9 * (0.5 * padded + 0.5 * p * host["payload_bytes_mean_pred"].to_numpy())
    grown = host["comm_s_pred"].to_numpy() - none["comm_s_pred"].to_numpy()
    assert np.all(extra > 0.05 * host["comm_s_pred"].to_numpy())
    np.testing.assert_allclose(grown, extra, rtol=1e-6)


def test_skewed_allgatherv_rows_are_checked_with_their_blocks_and_the_host_cost(tmp_path):
    from vgcsim.api import collective_frame
    from vgcsim.traces.calibration import skewed_sizes

    assert skewed_sizes(1000, 4) == [250, 500, 750, 1000]
    assert skewed_sizes(10, 4) == [3, 5, 8, 10]  # rounded up: every rank sends something
    fit, _ = fit_link(synthetic(300e-6, 1 / 25e6, 0.0, 3e-9, 4))
    path = tmp_path / "cal.toml"
    path.write_text(cluster_toml("cal", fit, "cpu", "synthetic"))
    cluster = load_cluster(str(path))
    link = cluster.link
    m = 8_000_000
    ring = 6 * link.latency_s + 3 * (m + 8) * link.beta_s_per_byte
    # padded to m on the wire; the backend's host copy takes the 4 x 8 = 32 MB padded
    # buffer, the copy out the real blocks, 2+4+6+8 = 20 MB: ½·32 + ½·20 = 26 MB
    truth = ring + 26_000_000 * 3e-9
    rows = [{"op": op, "size_bytes": m, "seconds": [truth]} for op in ("allgatherv_skewed",)]
    df = collective_frame({"world_size": 4, "backend": "gloo", "rows": rows}, cluster)
    row = df.iloc[0]
    assert row["collective"] == "allgatherv/padded"
    # its wire time is the even allgatherv's of m, its host time that of the two copies
    assert row["predicted_s"] == pytest.approx(truth, rel=1e-6)
    assert row["simulated_s"] == pytest.approx(truth, rel=1e-6)
    # and the fit's own table prices a skewed row the same way
    meas = synthetic(300e-6, 1 / 25e6, 0.0, 3e-9, 4)
    meas["rows"].append({"op": "allgatherv_skewed", "size_bytes": m, "seconds": [truth]})
    refit, table = fit_link(meas)
    skew = next(r for r in table if r["op"] == "allgatherv_skewed")
    # the row gives the padded share, ½ here, and is priced with it
    assert skew["role"] == "share" and abs(skew["rel_error"]) < 1e-6
    assert refit.share_op == "allgatherv_skewed"
    assert refit.allgatherv_host_padded_share == pytest.approx(0.5, rel=1e-9)


def test_a_host_cost_several_times_the_wire_time_is_still_recovered():
    # delta = 5 ns per gathered byte on a 1 GB/s link: the host term is 20/3 times the wire
    # term of every allgatherv, whose beta term is then a seventh of its time.
    fit, table = fit_link(synthetic(300e-6, 1 / 1e9, 0.0, 5e-9, 4))
    assert fit.allgatherv_host_s_per_byte == pytest.approx(5e-9, rel=1e-6)
    assert {r["size_bytes"] for r in table if r["role"] == "host"} >= {4 << 20, 16 << 20}


def _stepped_delta(k: float) -> float:
    """A host cost per gathered byte that steps up past 64 MiB (a buffer outgrowing a cache)."""
    return 2e-9 if k <= 64 << 20 else 5e-9


def stepped(world: int = 4) -> dict:
    """Exact p2p, allreduce and allgatherv times with δ = ``_stepped_delta(P·m)``."""
    rows = []
    for op in ("p2p", "allreduce", "allgatherv"):
        for size in (*SIZES, 32 << 20):
            a, b, g = cost_coefficients(op, size, world)
            k = host_coefficient(op, size, world)
            t = a * 300e-6 + b / 25e6 + k * _stepped_delta(k)
            rows.append({"op": op, "size_bytes": size, "seconds": [t]})
    return {"world_size": world, "backend": "gloo", "rows": rows}


def test_the_fit_keeps_delta_size_by_size_where_one_slope_cannot_price_every_size():
    fit, table = fit_link(stepped())
    points = dict(fit.allgatherv_host_s_per_byte_table)
    host_sizes = sorted(4 * r["size_bytes"] for r in table if r["role"] == "host")
    assert sorted(points) == host_sizes and len(points) >= 3
    for k, per_byte in points.items():
        assert per_byte == pytest.approx(_stepped_delta(k), rel=1e-9)
    # every fitted row is priced as measured, the host rows by their own points
    assert max(abs(r["rel_error"]) for r in table) < 1e-9
    # one slope (with its free intercept) cannot: it misprices the 16 MiB rows by > 10 %
    k16 = 4 * (16 << 20)  # 64 MiB gathered: 2 ns/B
    slope_host = fit.allgatherv_host_s_per_byte * k16
    assert abs(slope_host - 2e-9 * k16) > 0.10 * 2e-9 * k16


def test_one_measured_size_gives_no_table():
    from vgcsim.models.linkfit import host_points

    assert host_points(np.array([4e6, 4e6]), np.array([0.01, 0.012])) == ()
    # an excess below the ring (noise) counts as no host cost, not a negative one
    pts = host_points(np.array([4e6, 16e6, 16e6, 16e6]), np.array([-0.01, 0.016, 0.032, -1.0]))
    assert pts == ((4e6, 0.0), (16e6, 1e-9))


def test_the_cluster_file_carries_the_table_and_prices_between_its_points(tmp_path):
    fit, _ = fit_link(stepped())
    path = tmp_path / "cal.toml"
    path.write_text(cluster_toml("cal", fit, "cpu", "synthetic"))
    assert "allgatherv_host_s_per_byte_table = [[" in path.read_text()
    cluster = load_cluster(str(path))
    link = cluster.link
    # written with repr: every float reads back exactly
    assert link.allgatherv_host_s_per_byte_table == fit.allgatherv_host_s_per_byte_table
    # 24 MiB per rank: 96 MiB gathered, between the 64 MiB (2 ns/B) and 128 MiB (5 ns/B)
    # points: the 64 MiB point's 2 ns/B (a step); 40 MiB per rank, 160 MiB, the last point's
    for m, delta in ((24 << 20, 2e-9), (40 << 20, 5e-9)):
        _check_padded(cluster, m, delta)


def _check_padded(cluster, m: int, delta: float) -> None:
    link = cluster.link
    ring = 3 * (link.latency_s + 8 * link.beta_s_per_byte)
    ring += 3 * (link.latency_s + m * link.beta_s_per_byte)
    expected = ring + delta * 4 * m
    sizes = np.full(4, float(m))
    predicted = float(collective_time_s("allgatherv/padded", sizes[None, :], cluster)[0])
    assert predicted == pytest.approx(expected, rel=1e-12)
    simulated = simulate_collective("allgatherv/padded", sizes, cluster).time_s
    assert simulated == pytest.approx(expected, rel=1e-9)


def test_calibrate_writes_the_points_and_validate_prices_with_them(tmp_path, capsys):
    """``vgcsim calibrate --from`` prints δ size by size and writes it; ``vgcsim validate``
    then predicts an allgatherv between two points at the lower point's δ (hand-computed)."""
    import json

    from vgcsim.cli import main
    from vgcsim.traces.calibration import MEASUREMENTS_KIND, MEASUREMENTS_VERSION

    doc = {"kind": MEASUREMENTS_KIND, "version": MEASUREMENTS_VERSION, "nodes": [0, 1, 2, 3]}
    doc.update(stepped())
    meas = tmp_path / "m.json"
    meas.write_text(json.dumps(doc))
    out = tmp_path / "c.toml"
    assert main(["calibrate", "--from", str(meas), "-o", str(out)]) == 0
    text = capsys.readouterr().out
    assert (
        "(by gathered size: 1 MiB 2e-09, 4 MiB 2e-09, 16 MiB 2e-09, 64 MiB 2e-09, 128 MiB 5e-09)"
        in text
    )
    # 24 MiB per rank, 96 MiB gathered: the 64 MiB point's 2 ns/B
    m = 24 << 20
    link = load_cluster(str(out)).link
    truth = 6 * link.latency_s + 3 * (m + 8) * link.beta_s_per_byte + 4 * m * 2e-9
    check = tmp_path / "check.json"
    check.write_text(
        json.dumps({**doc, "rows": [{"op": "allgatherv", "size_bytes": m, "seconds": [truth]}]})
    )
    assert main(["validate", str(check), "--cluster", str(out), "--tolerance", "0.001"]) == 0
    shown = capsys.readouterr().out
    assert "by gathered size at 5 points" in shown and "+0.0%" in shown
