"""The paper scenario against its documented contract, on hand-worked numbers.

Expected values come from the module docstring of ``vgcsim.models.scenario`` (m = dense bytes
/ ratio per rank; compressed step = compute + codec + comm; the fastest algorithm per method)
and from the closed forms of the ring collectives, computed here by hand.
"""

from __future__ import annotations

import numpy as np
import pytest

from vgcsim.core.cluster import get_cluster, get_device
from vgcsim.core.errors import ConfigError, UnknownNameError
from vgcsim.models.scenario import (
    PAPER_NET_SPECS,
    Method,
    NetSpec,
    PaperScenarioConfig,
    best_rows,
    crossover_table,
    method_from_trace,
    paper_scenario,
)

ONE = Method("one", "x", 100.0, "paper-ratio", "by hand")


@pytest.mark.parametrize(
    ("over", "error", "message"),
    [
        ({"nets": ()}, ConfigError, "nets must not be empty"),
        ({"links": ()}, ConfigError, "links must not be empty"),
        ({"allreduce": ()}, ConfigError, "allreduce must not be empty"),
        ({"allgatherv": ()}, ConfigError, "allgatherv must not be empty"),
        ({"device": "Z80"}, UnknownNameError, "Z80"),
        (
            {"nets": ("alexnet",)},
            UnknownNameError,
            r"^unknown net 'alexnet'; valid: resnet50, vgg_like$",
        ),
        (
            {"links": ("2GbE",)},
            UnknownNameError,
            r"^unknown cluster preset '2GbE'; valid: .*\b1GbE\b",
        ),
        ({"allreduce": ("mesh",)}, UnknownNameError, "unknown allreduce algorithm 'mesh'"),
        ({"allgatherv": ("mesh",)}, UnknownNameError, "unknown allgatherv algorithm 'mesh'"),
        ({"world_sizes": ()}, ConfigError, r"^world_sizes must be integers >= 1$"),
        ({"world_sizes": (0, 2)}, ConfigError, "world_sizes must be integers >= 1"),
        (
            {"batch_size_per_worker": 0},
            ConfigError,
            r"^batch_size_per_worker must be >= 1 and codec_s a finite number >= 0$",
        ),
        ({"codec_s": -1e-3}, ConfigError, "codec_s a finite number >= 0"),
        ({"codec_s": float("inf")}, ConfigError, "codec_s a finite number >= 0"),
    ],
)
def test_config_refuses_each_bad_value(over, error, message):
    with pytest.raises(error, match=message):
        PaperScenarioConfig(**over)


def test_config_accepts_the_edges():
    PaperScenarioConfig(world_sizes=(1,), batch_size_per_worker=1, codec_s=0.0)


def test_net_dense_bytes_are_four_bytes_per_parameter():
    net = NetSpec("n", "N", 1000, 1.0, "src")
    assert net.dense_bytes == 4000
    vgg = PAPER_NET_SPECS["vgg_like"]()
    assert vgg.name == "vgg_like" and vgg.dense_bytes == 4 * vgg.params
    res = PAPER_NET_SPECS["resnet50"]()
    assert res.flops_per_sample == pytest.approx(3 * 2 * 4.09e9)


@pytest.fixture(scope="module")
def one_method():
    # vgg_like on 1GbE with one method of ratio 100, codec 2 ms, P = 1, 4; ring only
    cfg = PaperScenarioConfig(
        nets=("vgg_like",),
        links=("1GbE",),
        world_sizes=(4, 1, 4),
        allreduce=("ring",),
        allgatherv=("ring",),
        codec_s=2e-3,
        paper_ratios=False,
    )
    df, info = paper_scenario(cfg, [ONE])
    return cfg, df, info


def test_compressed_rows_by_hand(one_method):
    cfg, df, info = one_method
    net = PAPER_NET_SPECS["vgg_like"]()
    link = get_cluster("1GbE").link
    dev = get_device("P100")
    compute = net.flops_per_sample * 32 / (dev.peak_flops * dev.efficiency)
    n = 4.0 * net.params
    m = n / 100.0
    assert sorted(df.world_size.unique()) == [1, 4]  # each P once
    c = df[(df.method == "compressed") & (df.world_size == 4)]
    assert len(c) == 1
    c = c.iloc[0]
    comm = 3 * (link.latency_s + m * link.beta_s_per_byte)
    assert c.comm_s == pytest.approx(comm, rel=1e-12)
    assert c.codec_s == pytest.approx(2e-3, rel=1e-12)
    assert c.compute_s == pytest.approx(compute, rel=1e-12)
    assert c.step_s == pytest.approx(compute + 2e-3 + comm, rel=1e-12)
    assert c.payload_bytes_max == pytest.approx(m) and c.payload_bytes_mean == pytest.approx(m)
    assert (c.compressor, c.encoding, c.collective) == ("one", "paper-ratio", "allgatherv/ring")
    assert (c.trace, c.cluster, c.source, c.path) == (
        "vgg_like",
        "1GbE",
        "predicted",
        "closed_form",
    )
    assert (c.compute_mode, c.device, c.step) == ("model", "P100", -1)
    d = df[(df.method == "dense") & (df.world_size == 4)]
    assert len(d) == 1 and list(df.step.unique()) == [-1]  # one mean row per method and P
    d = d.iloc[0]
    assert d.topology == "star"
    dense = 6 * link.latency_s + 1.5 * n * link.beta_s_per_byte
    assert d.comm_s == pytest.approx(dense, rel=1e-12)
    assert d.step_s == pytest.approx(compute + dense, rel=1e-12)
    assert (d.compressor, d.encoding, d.codec_s) == ("dense", "fp32", 0.0)
    assert d.payload_bytes_max == n
    assert c.speedup_vs_dense == pytest.approx((compute + dense) / (compute + 2e-3 + comm))
    # throughput: P × batch / step
    assert c.throughput_samples_per_s == pytest.approx(4 * 32 / c.step_s)
    # P = 1: no communication on either side
    assert (df[df.world_size == 1].comm_s == 0).all()


def test_info_describes_nets_methods_device_and_links(one_method):
    cfg, _, info = one_method
    net = PAPER_NET_SPECS["vgg_like"]()
    dev = get_device("P100")
    (n,) = info["nets"]
    assert n["name"] == "vgg_like" and n["params"] == net.params
    assert n["dense_bytes"] == 4 * net.params
    assert n["compute_s"] == pytest.approx(
        net.flops_per_sample * 32 / (dev.peak_flops * dev.efficiency)
    )
    assert info["methods"] == [ONE.__dict__]
    assert info["device"] == dev.__dict__
    assert info["links"] == {"1GbE": get_cluster("1GbE").link.__dict__}


def test_crossover_table_skips_one_rank_and_takes_the_cheapest_allgatherv(one_method):
    cfg, df, _ = one_method
    cross = crossover_table(cfg, df)
    assert list(cross.columns) == [
        "net",
        "link",
        "world_size",
        "allreduce",
        "allgatherv",
        "crossover_ratio",
    ]
    assert len(cross) == 1  # P = 1 has no crossover
    r = cross.iloc[0]
    assert (r.net, r.link, r.world_size, r.allreduce, r.allgatherv) == (
        "vgg_like",
        "1GbE",
        4,
        "allreduce/ring",
        "allgatherv/ring",
    )
    # tie: 3(α + m*β) + codec = 6α + 1.5nβ  ⇒  m* = (3α + 1.5nβ − codec) / (3β); ratio n / m*
    link = get_cluster("1GbE").link
    n = 4.0 * PAPER_NET_SPECS["vgg_like"]().params
    a, b = link.latency_s, link.beta_s_per_byte
    m_star = (3 * a + 1.5 * n * b - 2e-3) / (3 * b)
    assert r.crossover_ratio == pytest.approx(n / m_star, rel=1e-9)


def test_crossover_table_picks_the_allgatherv_with_the_smallest_ratio():
    cfg = PaperScenarioConfig(
        nets=("vgg_like",),
        links=("10GbE",),
        world_sizes=(8,),
        allreduce=("ring",),
        allgatherv=("bruck", "direct", "ring"),
        paper_ratios=False,
    )
    df, _ = paper_scenario(cfg, [ONE])
    (r,) = crossover_table(cfg, df).itertuples()
    # balanced sizes, P = 8: ring 7α + 7mβ; bruck 3α + 7mβ; direct α + 7mβ. The least
    # latency needs the smallest ratio: direct.
    link = get_cluster("10GbE").link
    n = 4.0 * PAPER_NET_SPECS["vgg_like"]().params
    a, b = link.latency_s, link.beta_s_per_byte
    dense = 14 * a + 2 * 7 / 8 * n * b
    assert r.allgatherv == "allgatherv/direct"
    assert r.crossover_ratio == pytest.approx(n / ((dense - a) / (7 * b)), rel=1e-9)


def test_best_rows_keep_the_fastest_algorithm_per_method():
    cfg = PaperScenarioConfig(
        nets=("vgg_like",),
        links=("10GbE",),
        world_sizes=(8,),
        allreduce=("ring", "binomial_tree"),
        allgatherv=("ring", "direct"),
        paper_ratios=False,
    )
    df, _ = paper_scenario(cfg, [ONE])
    best = best_rows(df)
    assert list(best.method) == ["compressed", "dense"]  # sorted by the keys
    assert list(best.collective) == ["allgatherv/direct", "allreduce/ring"]
    for r in best.itertuples():
        same = df[(df.method == r.method)]
        assert r.step_s == same.step_s.min()
    assert list(best.index) == [0, 1]


def test_method_from_trace_names_its_label_source_and_refuses_silence(tiny_trace, tmp_path):
    m = method_from_trace(tiny_trace)
    assert m.label == "variance α=2 (tiny)"
    assert (m.compressor, m.encoding) == ("variance", "hand")
    assert m.source == "measured from trace tiny (hand, 3 steps, 2 workers, synthetic)"
    assert method_from_trace(tiny_trace, "hand2x").encoding == "hand2x"
    from tests.conftest import write_tiny_trace
    from vgcsim.traces.io import read_trace

    silent = read_trace(
        write_tiny_trace(tmp_path / "silent", bits=np.zeros((2, 2, 2), dtype=np.int64))
    )
    with pytest.raises(
        ConfigError, match="trace silent sends no bits; cannot derive a compression ratio"
    ):
        method_from_trace(silent)


def test_without_paper_ratios_only_the_given_methods_are_priced(one_method):
    _, df, _ = one_method
    assert set(df[df.method == "compressed"].compressor) == {"one"}
    with pytest.raises(
        ConfigError, match=r"^no compression methods: enable paper_ratios or give traces$"
    ):
        paper_scenario(PaperScenarioConfig(paper_ratios=False))


def test_two_ranks_have_a_crossover():
    cfg = PaperScenarioConfig(
        nets=("vgg_like",),
        links=("1GbE",),
        world_sizes=(2,),
        allreduce=("ring",),
        allgatherv=("ring",),
        paper_ratios=False,
    )
    df, _ = paper_scenario(cfg, [ONE])
    (r,) = crossover_table(cfg, df).itertuples()
    # P = 2: α + m*·β = 2α + n·β  ⇒  m* = n + α/β; ratio n / m*
    link = get_cluster("1GbE").link
    n = 4.0 * PAPER_NET_SPECS["vgg_like"]().params
    assert r.world_size == 2
    assert r.crossover_ratio == pytest.approx(
        n / (n + link.latency_s / link.beta_s_per_byte), rel=1e-9
    )


def test_hierarchical_allreduce_uses_the_intra_node_link_of_the_cluster():
    # 4 GPUs per node over PCIe3, nodes over IB-FDR56; P = 8: 2 nodes. Hierarchical formula:
    # ⌈lg 4⌉·(2α' + 2n·β') + ring over 2 nodes: 2α + 2·(1/2)·n·β (γ = 0 on both links)
    cfg = PaperScenarioConfig(
        nets=("vgg_like",),
        links=("4xP100-IB-FDR56",),
        world_sizes=(8,),
        allreduce=("hierarchical",),
        allgatherv=("ring",),
        paper_ratios=False,
    )
    df, _ = paper_scenario(cfg, [ONE])
    c = get_cluster("4xP100-IB-FDR56")
    n = 4.0 * PAPER_NET_SPECS["vgg_like"]().params
    il, ol = c.intra_link, c.link
    expected = 2 * (2 * il.latency_s + 2 * n * il.beta_s_per_byte) + (
        2 * ol.latency_s + n * ol.beta_s_per_byte
    )
    d = df[df.method == "dense"].iloc[0]
    assert d.comm_s == pytest.approx(expected, rel=1e-12)
    assert d.topology == "hierarchical"
