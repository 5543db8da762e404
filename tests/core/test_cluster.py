"""Cluster specs: presets with sources, TOML cluster files, strict keys."""

from __future__ import annotations

import re

import pytest

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

from vgcsim.core.cluster import (
    CLUSTER_PRESETS,
    DEVICE_PRESETS,
    LINK_PRESETS,
    StarSpec,
    cluster_from_dict,
    cluster_to_dict,
    load_cluster,
)
from vgcsim.core.errors import ConfigError, UnitError, UnknownNameError


def test_every_preset_has_a_source():
    for spec in [*LINK_PRESETS.values(), *DEVICE_PRESETS.values()]:
        assert spec.source, spec.name
    for spec in CLUSTER_PRESETS.values():
        assert spec.link.source and spec.device.source


def test_issue_presets_exist():
    for name in [
        "1GbE",
        "10GbE",
        "25GbE",
        "40GbE",
        "100GbE",
        "IB-FDR",
        "IB-EDR",
        "IB-HDR",
        "IB-NDR",
        "IB-FDR56",
        "PCIe3",
        "PCIe4",
        "NVLink",
    ]:
        assert name in LINK_PRESETS
    for name in ["P100", "V100", "A100", "H100", "cpu"]:
        assert name in DEVICE_PRESETS


def test_10gbe_preset_is_a_star_of_10gbit_nics():
    c = load_cluster("10GbE")
    assert c.topology == StarSpec() and c.topology["kind"] == "star"
    assert c.link.bandwidth_Bps == pytest.approx(1.25e9)
    assert c.gpus_per_node == 1 and c.intra_link is None


def test_ib_fdr56_is_56_gigabits():
    assert LINK_PRESETS["IB-FDR56"].bandwidth_Bps == pytest.approx(56e9 / 8)


def test_round_trip_through_dict():
    for spec in CLUSTER_PRESETS.values():
        assert cluster_from_dict(cluster_to_dict(spec)) == spec


def test_toml_file(tmp_path):
    f = tmp_path / "mine.toml"
    f.write_text(
        """
compute = "model"
gpus_per_node = 4
device = "A100"
[topology]
kind = "hierarchical"
[link]
bandwidth = "25Gbps"
latency = "5us"
[intra_link]
preset = "NVLink3"
latency = "1us"
"""
    )
    c = load_cluster(f)
    assert c.name == "mine"
    assert c.link.bandwidth_Bps == pytest.approx(25e9 / 8)
    assert c.link.latency_s == pytest.approx(5e-6)
    assert c.intra_link.bandwidth_Bps == pytest.approx(300e9)
    assert c.intra_link.latency_s == pytest.approx(1e-6)
    assert c.device.name == "A100" and c.compute == "model" and c.gpus_per_node == 4


def test_base_preset_and_override(tmp_path):
    f = tmp_path / "c.toml"
    f.write_text('base = "1GbE"\ncompute_scale = 0.5\n[link]\npreset = "1GbE"\nlatency = "20us"\n')
    c = load_cluster(f)
    assert c.topology == StarSpec() and c.compute_scale == 0.5
    assert c.link.bandwidth_Bps == pytest.approx(125e6) and c.link.latency_s == pytest.approx(2e-5)


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ('link = "10GbE"\nbandwith = "1Gbps"\n', "bandwith"),
        ('[link]\npreset = "10GbE"\nlatnecy = "1us"\n', "latnecy"),
        ('link = "10GbE"\n[device]\npreset = "V100"\nflops = 1\n', "flops"),
    ],
)
def test_unknown_keys_are_errors(tmp_path, text, needle):
    f = tmp_path / "bad.toml"
    f.write_text(text)
    with pytest.raises(ConfigError, match=needle):
        load_cluster(f)


def test_bad_units_in_file(tmp_path):
    f = tmp_path / "bad.toml"
    f.write_text('[link]\nbandwidth = "10G"\nlatency = "1us"\n')
    with pytest.raises(UnitError):
        load_cluster(f)


def test_unknown_preset_lists_names():
    with pytest.raises(UnknownNameError, match="10GbE"):
        load_cluster("11GbE")
    with pytest.raises(UnknownNameError, match="NVLink"):
        cluster_from_dict({"link": "NVlink9"})


def test_missing_file_and_bad_toml(tmp_path):
    with pytest.raises(ConfigError, match="not found"):
        load_cluster(tmp_path / "nope.toml")
    f = tmp_path / "broken.toml"
    f.write_text("link = [")
    with pytest.raises(ConfigError, match="TOML"):
        load_cluster(f)


def test_non_positive_bandwidth_rejected():
    with pytest.raises(ConfigError):
        cluster_from_dict({"link": {"bandwidth_Bps": 0, "latency_s": 0}})


def test_specs_are_hashable_and_equal_by_value():
    a = load_cluster("10GbE")
    b = cluster_from_dict(cluster_to_dict(a))
    assert a == b and hash(a) == hash(b)
    assert len({a, b, load_cluster("1GbE")}) == 2


def test_a_link_table_overrides_one_field_of_the_base(tmp_path):
    f = tmp_path / "c.toml"
    f.write_text('base = "10GbE"\n[link]\nbandwidth = "25Gbps"\n')
    c = load_cluster(f)
    base = load_cluster("10GbE")
    assert c.link.bandwidth_Bps == pytest.approx(25e9 / 8)
    # every other field is the base's, the link's included
    assert c.link.latency_s == base.link.latency_s and c.link.efficiency == base.link.efficiency
    assert c.device == base.device and c.topology == base.topology
    assert c.link.source == "user"  # changed: the preset's source no longer describes it


def test_device_and_intra_link_tables_override_the_base():
    base = load_cluster("dgx1-IB-EDR")
    c = cluster_from_dict(
        {"base": base.name, "device": {"efficiency": 0.2}, "intra_link": {"latency": "2us"}}
    )
    assert c.device.efficiency == 0.2 and c.device.peak_flops == base.device.peak_flops
    assert c.intra_link.latency_s == pytest.approx(2e-6)
    assert c.intra_link.bandwidth_Bps == base.intra_link.bandwidth_Bps


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ('bandwidth = "-25Gbps"', "link.bandwidth: '-25Gbps' must be a finite positive quantity"),
        ("bandwidth_Bps = 1e30", r"link.bandwidth_Bps must be a finite number in \[1, 1e\+15\]"),
        ("latency_s = nan", "link.latency_s: nan must be a finite non-negative quantity"),
        ('latency = "5s"', r"link.latency must be a finite number in \[0, 1\], got 5.0"),
        ("efficiency = 1.5", r"link.efficiency: payload bytes per wire byte, must be in \(0, 1\]"),
        ('framing = "jumbo"', "link.framing: unknown link framing 'jumbo'"),
        ("gamma_s_per_byte = -1.0", "link.gamma_s_per_byte must be a finite number"),
    ],
)
def test_a_bad_link_field_is_named_with_its_rule(tmp_path, table, message):
    f = tmp_path / "c.toml"
    f.write_text(f'base = "10GbE"\n[link]\n{table}\n')
    with pytest.raises(ConfigError, match=f"^cluster file {re.escape(str(f))}: {message}"):
        load_cluster(f)


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ("efficiency = 1.5", r"device.efficiency: a fraction of the peak, must be in \(0, 1\]"),
        ("memory_efficiency = 0", r"device.memory_efficiency: .* must be in \(0, 1\], got 0"),
        ('peak_flops = "-1TFLOPS"', "device.peak_flops: '-1TFLOPS' must be a finite positive"),
        ('launch_overhead = "3s"', r"device.launch_overhead must be a finite number in \[0, 1\]"),
    ],
)
def test_a_bad_device_field_is_named_with_its_rule(table, message):
    with pytest.raises(ConfigError, match=f"^{message}"):
        cluster_from_dict({"base": "10GbE", "device": tomllib.loads(table)})


def test_a_table_without_a_base_names_what_it_lacks():
    with pytest.raises(ConfigError, match="^link: no 'latency': give it, or 'preset'"):
        cluster_from_dict({"link": {"bandwidth": "25Gbps"}})
    with pytest.raises(ConfigError, match="^device: no 'peak_flops'"):
        cluster_from_dict({"link": "10GbE", "device": {"efficiency": 0.5}})
