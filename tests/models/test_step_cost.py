"""The complete step cost: decode × P, device-modelled compression, transport efficiency, the
allgatherv size exchange, bf16/fp16 dense baselines and the optimizer — from closed forms and
hand computations."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from tests.conftest import write_tiny_trace
from vgcsim.cli import main
from vgcsim.core.cluster import FRAMINGS, ClusterSpec, LinkSpec, get_cluster, get_device
from vgcsim.core.collectives import SIZE_HEADER_BYTES
from vgcsim.core.errors import ConfigError
from vgcsim.models.collectives import (
    allgatherv_padded_data,
    collective_time_s,
    size_exchange_time_s,
)
from vgcsim.models.iteration import bucketed_step_time_s, iteration_time_s
from vgcsim.models.predict import PredictOptions, predict_trace
from vgcsim.traces import devicecost
from vgcsim.traces.io import read_trace

V100 = get_device("V100")
MEM = 900e9 * 0.83
LAUNCH = 4e-6


def _star(link: LinkSpec, compute: str = "model") -> ClusterSpec:
    return ClusterSpec("t", {"kind": "star"}, link, None, 1, V100, compute=compute)


# ------------------------------------------------------------------------------ device model


def test_stream_time_is_bytes_over_sustained_bandwidth_plus_launches():
    assert devicecost.stream_time_s(747e6, 10, V100) == pytest.approx(747e6 / MEM + 10 * LAUNCH)


def test_optimizer_bytes_by_hand():
    n, layers = 1_000_000, 7
    adam = devicecost.optimizer_time_s("adam", 0.0, n, layers, V100)
    assert adam == pytest.approx(28 * n / MEM + layers * LAUNCH)
    sgd = devicecost.optimizer_time_s("sgd", 0.0, n, layers, V100)
    assert sgd == pytest.approx(12 * n / MEM + layers * LAUNCH)
    mom = devicecost.optimizer_time_s("sgd", 0.9, n, layers, V100)
    assert mom == devicecost.optimizer_time_s("momentum_sgd", 0.9, n, layers, V100)
    assert mom == pytest.approx(20 * n / MEM + layers * LAUNCH)


def test_qsgd_decode_is_dense_and_sparse_decode_follows_sent():
    # QSGD: 9 B per element of every received layer, independent of what was "sent"
    assert devicecost.decode_bytes("qsgd", 1000, 0, 250) == 250 + 9 * 1000
    # sparse: 16 B per sent element, nothing per unsent element
    assert devicecost.decode_bytes("variance", 10**6, 100, 400) == 400 + 16 * 100


def test_a_device_without_memory_figures_refuses_the_codec_model():
    bare = dataclasses.replace(V100, memory_bandwidth_Bps=None, launch_overhead_s=None)
    with pytest.raises(ConfigError, match="memory_bandwidth"):
        devicecost.stream_time_s(1.0, 0, bare)


# ------------------------------------------------------------------------------ efficiency


@pytest.mark.parametrize("key", ["allreduce/ring", "allgatherv/ring", "allgatherv/bruck"])
def test_efficiency_scales_the_bandwidth_term_exactly(key):
    line = LinkSpec("l", 1e9, 5e-6)
    tcp = dataclasses.replace(line, efficiency=FRAMINGS["tcp-mtu1500"].efficiency)
    double = dataclasses.replace(line, bandwidth_Bps=2e9)
    sizes = np.array([[4e6, 3e6, 5e6, 1e6, 2e6, 4e6, 4e6, 4e6]])
    if key.startswith("allreduce"):
        sizes = np.full((1, 8), 4e6)

    def t(link):
        return float(collective_time_s(key, sizes, _star(link))[0])

    lat = 2 * t(double) - t(line)  # T = A + B·β is affine in β: the latency terms A alone
    assert t(tcp) - lat == pytest.approx((t(line) - lat) * 1538 / 1448, rel=1e-12)


def test_framings_by_hand():
    assert FRAMINGS["tcp-mtu1500"].efficiency == pytest.approx(1448 / 1538)
    assert FRAMINGS["tcp-mtu9000"].efficiency == pytest.approx(8948 / 9038)
    assert FRAMINGS["ib-mtu4096"].efficiency == pytest.approx(4096 / 4122)
    assert get_cluster("10GbE").link.payload_Bps == pytest.approx(1.25e9 * 1448 / 1538)
    assert get_cluster("IB-EDR").link.efficiency == FRAMINGS["ib-mtu4096"].efficiency


@pytest.mark.parametrize("bad", ["0", "-0.5", "1.5", "nan", "inf"])
def test_bad_efficiency_is_one_line_and_exit_2(tmp_path, capsys, bad):
    f = tmp_path / "c.toml"
    f.write_text(f'[link]\npreset = "10GbE"\nefficiency = {bad}\n')
    assert main(["clusters", str(f)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "efficiency" in err and "Traceback" not in err


@pytest.mark.parametrize(
    "text",
    [
        '[link]\nbandwidth = "10Gbps"\nlatency = "nan"\n',
        "[link]\nbandwidth_Bps = inf\nlatency_s = 1e-6\n",
        '[link]\npreset = "10GbE"\ngamma_s_per_byte = nan\n',
        '[link]\npreset = "10GbE"\nframing = "carrier-pigeon"\n',
        'base = "10GbE"\ncompute_scale = inf\n',
        'base = "10GbE"\n[device]\npreset = "V100"\nmemory_efficiency = 1.2\n',
        'base = "10GbE"\n[device]\npreset = "V100"\nlaunch_overhead = "-1us"\n',
    ],
)
def test_bad_cluster_values_are_one_line_and_exit_2(tmp_path, capsys, text):
    f = tmp_path / "c.toml"
    f.write_text(text)
    assert main(["clusters", str(f)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err


def test_framing_and_device_figures_from_a_file(tmp_path):
    from vgcsim.core.cluster import load_cluster

    f = tmp_path / "c.toml"
    f.write_text(
        'base = "10GbE"\n[link]\npreset = "10GbE"\nframing = "tcp-mtu9000"\n'
        '[device]\npreset = "V100"\nmemory_bandwidth = "500GB/s"\nlaunch_overhead = "6us"\n'
    )
    c = load_cluster(f)
    assert c.link.efficiency == pytest.approx(8948 / 9038)
    assert c.device.sustained_memory_Bps == pytest.approx(500e9 * 0.83)
    assert c.device.launch_s == pytest.approx(6e-6)


def test_clusters_lists_efficiency_and_device_figures(capsys):
    assert main(["clusters"]) == 0
    out = capsys.readouterr().out
    assert "efficiency" in out and "0.9415" in out and "tcp-mtu9000" in out
    assert "900 GB/s" in out and "4 us" in out


# ------------------------------------------------------------------------------ size exchange


def test_size_exchange_is_its_own_ring_allgather_of_one_int64():
    link = LinkSpec("l", 2e9, 3e-6)
    assert size_exchange_time_s(16, link) == pytest.approx(15 * (3e-6 + SIZE_HEADER_BYTES / 2e9))
    assert size_exchange_time_s(1, link) == 0.0
    sizes = np.array([[100.0, 400.0, 50.0, 7.0]])
    padded = collective_time_s("allgatherv/padded", sizes, _star(link))
    assert float(padded[0]) == pytest.approx(
        size_exchange_time_s(4, link) + float(allgatherv_padded_data(sizes, link)[0])
    )


@pytest.mark.parametrize("alg", ["ring", "bruck", "padded"])
def test_size_exchange_switch_by_hand(tiny_trace, alg):
    cl = get_cluster("10GbE")
    on = predict_trace(tiny_trace, cl, PredictOptions(world_sizes=(4,), allgatherv=(alg,)))
    off = predict_trace(
        tiny_trace, cl, PredictOptions(world_sizes=(4,), allgatherv=(alg,), size_exchange=False)
    )
    c_on = on[on.method == "compressed"].comm_s.iloc[0]
    c_off = off[off.method == "compressed"].comm_s.iloc[0]
    assert c_on - c_off == pytest.approx(size_exchange_time_s(4, cl.link), rel=1e-9)
    d_on, d_off = on[on.method == "dense"], off[off.method == "dense"]
    assert np.allclose(d_on.comm_s, d_off.comm_s)  # allreduce needs no sizes


# ------------------------------------------------------------------------------ dense bf16/fp16


def test_bf16_allreduce_moves_half_the_bytes(tiny_trace):
    cl = _star(LinkSpec("l", 1e9, 0.0))  # no latency: comm is the bandwidth term alone
    df = predict_trace(tiny_trace, cl, PredictOptions(world_sizes=(8,), allgatherv=("ring",)))
    dense = df[df.method == "dense"].set_index("encoding")
    assert dense.loc["bf16", "comm_s"] == pytest.approx(dense.loc["fp32", "comm_s"] / 2)
    assert dense.loc["fp16", "comm_s"] == dense.loc["bf16", "comm_s"]
    cast = 6 * 1250 / MEM + LAUNCH  # one bucket of 1250 elements, read 4 B + write 2 B
    assert dense.loc["bf16", "codec_s"] == pytest.approx(cast)
    assert dense.loc["bf16", "decode_s"] == pytest.approx(cast)
    assert dense.loc["fp32", "codec_s"] == 0 and dense.loc["fp32", "decode_s"] == 0
    assert dense.loc["fp32", "speedup_vs_dense"] == 1.0
    assert dense.loc["bf16", "speedup_vs_dense"] == pytest.approx(
        dense.loc["fp32", "step_s"] / dense.loc["bf16", "step_s"]
    )


def test_dense_encodings_option(tiny_trace):
    cl = get_cluster("10GbE")
    df = predict_trace(tiny_trace, cl, PredictOptions(world_sizes=(2,), dense_encodings=("fp32",)))
    assert set(df[df.method == "dense"].encoding) == {"fp32"}
    with pytest.raises(ConfigError, match="fp32"):
        PredictOptions(dense_encodings=("bf16",))


# ------------------------------------------------------------------------------ decode × P


def test_trace_mode_decode_is_p_minus_1_times_one_payload_decode(tmp_path):
    rows = [{"decode_s": 0.006}, {"decode_s": 0.006}, {"decode_s": 0.006}]
    run = read_trace(write_tiny_trace(tmp_path / "t", step_rows=rows))
    cl = dataclasses.replace(get_cluster("10GbE"), compute="trace")
    df = predict_trace(run, cl, PredictOptions(world_sizes=(2, 16, 128)))
    comp = df[df.method == "compressed"].set_index("world_size")
    for p in (2, 16, 128):  # W = 2 workers decoded 0.006 s: 0.003 s per payload
        assert comp.loc[p, "decode_s"] == pytest.approx((p - 1) * 0.003)
        assert comp.loc[p, "step_s"] == pytest.approx(
            comp.loc[p, ["compute_s", "variance_s", "codec_s", "comm_s", "decode_s"]].sum()
            + comp.loc[p, "optimizer_s"]
        )


def test_decode_and_optimizer_in_the_iteration_by_hand():
    c = np.array([[1.0, 1.0]])
    v = np.array([[0.1, 0.1]])
    k = np.array([[0.2, 0.4]])  # rank 1 is critical
    d = np.array([[0.5, 0.3]])  # rank 0 decodes longest
    bd = iteration_time_s(c, v, k, [2.0], decode_s=d, optimizer_s=[0.25])
    assert bd.step_s[0] == pytest.approx(1.5 + 2.0 + 0.5 + 0.25)
    full = iteration_time_s(c, v, k, [2.0], decode_s=d, optimizer_s=[0.25], overlap="full")
    f = 1 / 3
    assert full.step_s[0] == pytest.approx(f + max((1 - f) + 0.5, 2.0) + 0.5 + 0.25)


def test_bucketed_decode_waits_for_its_collective_and_the_local_work():
    # one rank: c = 3 (forward 1, backward 2), two buckets of half the backward each
    c, zero = np.array([[3.0]]), np.array([[0.0]])
    share = np.array([0.5, 1.0])
    t = np.array([[0.5, 4.0]])  # collectives: bucket 0 ready 2.0 ends 2.5; bucket 1 ready 3 ends 7
    bd = bucketed_step_time_s(c, zero, zero, t, share, decode_s=[[1.0]], optimizer_s=[0.5])
    # decode 0: max(2.5, local end 3.0) + 0.5 = 3.5; decode 1: max(7, 3.5) + 0.5 = 7.5; + 0.5
    assert bd.step_s[0] == pytest.approx(8.0)
    plain = bucketed_step_time_s(c, zero, zero, t, share)
    assert plain.step_s[0] == pytest.approx(7.0)


# ------------------------------------------------------------------------------ the check


def test_synthetic_resnet50_on_10gbe(tmp_path):
    """decode_s grows with P for the compressed rows; bf16 comm is half of fp32 where bandwidth
    dominates; compute_mode is model (the preset's default)."""
    from vgcsim.traces.synth import SynthConfig, synth_trace

    run = read_trace(
        synth_trace(
            SynthConfig(layers="resnet50", workers=4, steps=2, target_ratio=100.0),
            tmp_path / "r50",
        )
    )
    df = predict_trace(run, get_cluster("10GbE"), PredictOptions(world_sizes=(2, 16, 128, 1024)))
    assert set(df.compute_mode) == {"model"} and set(df.device) == {"V100"}
    comp = df[df.method == "compressed"].sort_values("world_size")
    assert np.all(np.diff(comp.decode_s.to_numpy()) > 0)
    dense = df[df.method == "dense"].pivot(index="world_size", columns="encoding", values="comm_s")
    ratio = dense["bf16"] / dense["fp32"]
    assert ((ratio.loc[[2, 16, 128]] > 0.45) & (ratio.loc[[2, 16, 128]] < 0.55)).all()
    assert ratio.loc[1024] > ratio.loc[128]  # the unchanged latency term shows
    assert not math.isnan(comp.speedup_vs_dense.iloc[0])


# ------------------------------------------------------------------------------ the commands


def test_predict_and_simulate_take_the_same_cost_options(tiny_trace_dir, tmp_path, capsys):
    from vgcsim.core.results import read_results

    common = [
        str(tiny_trace_dir),
        "--cluster",
        "10GbE",
        "--world-sizes",
        "4",
        "--compute",
        "trace",
        "--dense-encodings",
        "fp32,bf16",
        "--no-size-exchange",
    ]
    assert main(["predict", *common, "-o", str(tmp_path / "p")]) == 0
    assert main(["simulate", *common, "-o", str(tmp_path / "s")]) == 0
    out = capsys.readouterr().out
    assert "local times: compute trace" in out
    pred, head_p = read_results(tmp_path / "p")
    sim, head_s = read_results(tmp_path / "s")
    for df, head in ((pred, head_p), (sim, head_s)):
        assert set(df.compute_mode) == {"trace"} and head["cluster"]["compute"] == "trace"
        assert set(df[df.method == "dense"].encoding) == {"fp32", "bf16"}
        src = head["options"]["time_sources"]
        assert src["compute_mode"] == "trace" and "decode_s" in src and "optimizer_s" in src
    assert (
        head_p["options"]["size_exchange"] is False and head_s["options"]["size_exchange"] is False
    )
    merged = pred.merge(sim, on=["world_size", "method", "encoding"], suffixes=("_p", "_s"))
    assert len(merged) == 3
    np.testing.assert_allclose(merged.step_s_s, merged.step_s_p, rtol=1e-3)
    bad = ["predict", str(tiny_trace_dir), "--cluster", "10GbE", "-o", str(tmp_path / "x")]
    assert main([*bad, "--dense-encodings", "bf16"]) == 2
    assert main([*bad, "--dense-encodings", "fp32,int8"]) == 2


@pytest.mark.parametrize("agv", ["ring", "bruck", "padded"])
def test_crossover_with_decode_and_size_exchange_ties_the_step(agv):
    from vgcsim.models.crossover import crossover_payload_bytes

    link = LinkSpec("l", 1.25e9, 5e-6, efficiency=0.94)
    c = _star(link)
    n, p, delta, over = 1e8, 32, 2e-12, 1e-4
    key = f"allgatherv/{agv}"
    m = crossover_payload_bytes(
        n, p, c, allgatherv=key, overhead_s=over, decode_s_per_byte=delta, size_exchange=True
    )
    dense = float(collective_time_s("allreduce/ring", np.full((1, p), n), c)[0])
    comm = float(collective_time_s(key, np.full((1, p), m), c)[0])
    if agv != "padded":
        comm += size_exchange_time_s(p, link)
    assert comm + over + (p - 1) * m * delta == pytest.approx(dense, rel=1e-9)
    # decode makes the tie payload smaller (compression must work harder)
    assert m < crossover_payload_bytes(n, p, c, allgatherv=key, overhead_s=over)
