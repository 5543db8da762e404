"""Cluster values finite and in range, and the topology checked where every cluster is built:
predict and simulate refuse the same files with the same one line (issue reproductions 5, 6)."""

from __future__ import annotations

import pytest

from vgcsim.cli import main
from vgcsim.core.cluster import RANGES, LinkSpec, cluster_from_dict, load_cluster
from vgcsim.core.errors import ConfigError, TopologyError, UnknownNameError
from vgcsim.simulator.topology import build_topology

SAMPLE = "tests/data/sample_trace"

BAD_FILES = {
    "gamma_inf": (
        'base = "10GbE"\n[link]\npreset = "10GbE"\ngamma_s_per_byte = inf\n',
        "gamma_s_per_byte",
    ),
    "scale_inf": ('base = "10GbE"\ncompute_scale = inf\n', "compute_scale"),
    "bandwidth_subnormal": (
        'base = "10GbE"\n[link]\npreset = "10GbE"\nbandwidth_Bps = 1e-320\n',
        "bandwidth_Bps",
    ),
    "flops_subnormal": (
        'base = "10GbE"\n[device]\npreset = "V100"\npeak_flops = 1e-320\n',
        "peak_flops",
    ),
    "latency_nan": ('base = "10GbE"\n[link]\npreset = "10GbE"\nlatency_s = nan\n', "latency"),
    "mesh": ('base = "10GbE"\n[topology]\nkind = "mesh"\n', "unknown topology kind 'mesh'"),
    "unknown_key": ('base = "10GbE"\n[topology]\nkind = "star"\nfoo = 1\n', "unknown key 'foo'"),
    "disconnected": (
        'base = "10GbE"\n[topology]\nkind = "graph"\nhosts = ["a", "b", "c"]\n'
        'links = [{a = "a", b = "b", preset = "10GbE"}]\n',
        "disconnected",
    ),
    "oversubscription_inf": (
        'base = "10GbE"\n[topology]\nkind = "leaf_spine"\noversubscription = inf\n',
        "oversubscription",
    ),
    "hierarchical_without_intra_link": (
        'base = "10GbE"\n[topology]\nkind = "hierarchical"\n',
        "intra_link",
    ),
    "preset_not_a_name": ('base = "10GbE"\n[link]\npreset = [1]\n', "preset name"),
    "base_not_a_name": ("base = 5\n", "preset name"),
}


@pytest.mark.parametrize("case", sorted(BAD_FILES))
@pytest.mark.parametrize("command", ["predict", "simulate"])
def test_predict_and_simulate_refuse_the_same_cluster_files(tmp_path, capsys, case, command):
    text, needle = BAD_FILES[case]
    f = tmp_path / f"{case}.toml"
    f.write_text(text)
    argv = [
        command,
        SAMPLE,
        "--cluster",
        str(f),
        "--world-sizes",
        "2:8:x2",
        "-o",
        str(tmp_path / "o"),
    ]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and needle in err and str(f) in err, err
    assert not (tmp_path / "o" / "results.csv").exists()


def test_the_rule_names_the_range():
    with pytest.raises(
        ConfigError, match=r"bandwidth_Bps must be a finite number in \[1, 1e\+15\], got 1e-320"
    ):
        LinkSpec("l", 1e-320, 0.0)
    lo, hi = RANGES["latency_s"]
    LinkSpec("edge", 1.0, hi)  # the bounds themselves are accepted
    LinkSpec("edge", 1e15, lo)
    with pytest.raises(ConfigError, match="latency_s"):
        LinkSpec("l", 1.0, hi * 1.5)
    with pytest.raises(ConfigError, match="latency_s"):
        LinkSpec("l", 1.0, True)  # a bool is not a number


def test_a_connected_graph_with_a_switch_is_accepted():
    spec = cluster_from_dict(
        {
            "link": "10GbE",
            "topology": {
                "kind": "graph",
                "hosts": ["a", "b"],
                "links": [
                    {"a": "a", "b": "sw", "preset": "10GbE"},
                    {"a": "b", "b": "sw", "preset": "10GbE"},
                ],
            },
        }
    )
    assert spec.topology["kind"] == "graph"


@pytest.mark.parametrize(
    ("link", "payload_Bps"),
    [
        # a preset's link carries payload at its line rate × its framing's efficiency: 10GbE is
        # 10 Gb/s = 1.25e9 B/s under TCP with MTU 1500 (1448 payload bytes per 1538 on the wire)
        ({"preset": "10GbE"}, 1.25e9 * 1448 / 1538),
        # a bandwidth given with a preset keeps the preset's framing
        ({"preset": "10GbE", "bandwidth": "8Gbps"}, 1e9 * 1448 / 1538),
        # a framing or an efficiency given replaces the preset's
        ({"preset": "10GbE", "framing": "tcp-mtu9000"}, 1.25e9 * 8948 / 9038),
        ({"preset": "10GbE", "efficiency": 0.5}, 0.625e9),
        # no preset, no framing: the bandwidth is already the payload rate
        ({"bandwidth": "8Gbps", "latency": "1us"}, 1e9),
    ],
    ids=["preset", "preset-and-bandwidth", "framing", "efficiency", "no-preset"],
)
def test_a_graph_link_carries_payload_at_its_rate_times_its_transport_efficiency(link, payload_Bps):
    spec = cluster_from_dict(
        {
            "base": "10GbE",
            "topology": {
                "kind": "graph",
                "hosts": ["x", "y"],
                "links": [{"a": "x", "b": "y", **link}],
            },
        }
    )
    route = build_topology(spec, 2).route(0, 1)
    assert route.bandwidth_Bps == pytest.approx(payload_Bps, rel=1e-12)


def test_errors_keep_their_class_and_name_the_file(tmp_path):
    f = tmp_path / "c.toml"
    f.write_text('base = "10GbE"\n[topology]\nkind = "mesh"\n')
    with pytest.raises(UnknownNameError, match=f"cluster file {f}: unknown topology kind"):
        load_cluster(f)
    f.write_text(
        'base = "10GbE"\n[topology]\nkind = "graph"\nhosts = ["a", "b"]\nlinks = [{a = "a", b = "a", preset = "10GbE"}]\n'
    )
    with pytest.raises(TopologyError, match="self-loop"):
        load_cluster(f)
