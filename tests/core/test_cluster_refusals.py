"""Cluster specs read from a dict (a parsed cluster file): each refusal is one line naming
the field as the file spelled it and the rule it breaks, and a ``base`` preset's link,
device, intra link, topology and counts are inherited field by field."""

from __future__ import annotations

import pytest

from vgcsim.core.clusterfile import cluster_from_dict
from vgcsim.core.clusterspec import get_cluster
from vgcsim.core.errors import ConfigError

LINK = {"bandwidth": "10Gbps", "latency": "5us"}
LINK_KEYS = (
    "preset, name, bandwidth, bandwidth_Bps, latency, latency_s, gamma_s_per_byte, "
    "allgatherv_host_s_per_byte, allgatherv_host_s_per_byte_table, "
    "allgatherv_host_padded_share, allgatherv_host, allgatherv_host_s, call_overhead, "
    "call_overhead_s, allgather_latency, allgather_latency_s, comm_cpu_s_per_byte, segments, burst, burst_bytes, efficiency, framing, "
    "source"
)
NEEDS = "give it, or 'preset' (a link preset the table overrides), or a cluster 'base'"

REFUSALS = [
    ([1, 2], "cluster spec must be a table, got list"),
    (
        {"bogus": 1},
        "unknown key 'bogus' in cluster spec; valid keys here: name, base, topology, link, "
        "intra_link, gpus_per_node, device, compute, compute_scale, source, ranks_per_host, "
        "host_cores, threads_per_rank, host_sharing",
    ),
    ({"base": 3}, "base: expected a cluster preset name, got 3"),
    (
        {"base": "10GbE", "topology": "star"},
        "topology: expected a table with 'kind', got 'star'",
    ),
    ({"name": "x"}, "cluster spec needs 'link' (a preset name or a table) or 'base'"),
    (
        {"link": {**LINK, "bogus": 1}},
        f"unknown key 'link.bogus' in cluster spec; valid keys here: {LINK_KEYS}",
    ),
    (
        {"link": "10GbE", "intra_link": {"bogus": 1}},
        f"unknown key 'intra_link.bogus' in cluster spec; valid keys here: {LINK_KEYS}",
    ),
    ({"link": {"latency": "5us"}}, f"link: no 'bandwidth': {NEEDS}"),
    ({"link": {"bandwidth": "10Gbps"}}, f"link: no 'latency': {NEEDS}"),
    ({"link": {}}, f"link: no 'bandwidth' and 'latency': {NEEDS}"),
    (
        {"link": {**LINK, "bandwidth_Bps": 1e9}},
        "link: give either 'bandwidth' or 'bandwidth_Bps', not both",
    ),
    (
        {"link": {**LINK, "gamma_s_per_byte": "x"}},
        "link.gamma_s_per_byte: expected a number, got 'x'",
    ),
    (
        {"link": {**LINK, "gamma_s_per_byte": True}},
        "link.gamma_s_per_byte: expected a number, got True",
    ),
    (
        {"link": {"bandwidth": "-1Gbps", "latency": "5us"}},
        "link.bandwidth: '-1Gbps' must be a finite positive quantity",
    ),
    (
        {"link": {**LINK, "efficiency": 0}},
        "link.efficiency: payload bytes per wire byte, must be in (0, 1], got 0.0",
    ),
    (
        {"link": {**LINK, "efficiency": 1.5}},
        "link.efficiency: payload bytes per wire byte, must be in (0, 1], got 1.5",
    ),
    (
        {"link": {**LINK, "call_overhead_s": -1}},
        "link.call_overhead_s: -1 must be a finite non-negative quantity",
    ),
    (
        {"link": {**LINK, "burst_bytes": "x"}},
        "link.burst_bytes: cannot parse 'x'; use e.g. '64MiB', '1.5GB', '800Mb' (bits) or bytes",
    ),
    ({"link": "10GbE", "gpus_per_node": 1.5}, "gpus_per_node: expected an integer, got 1.5"),
    ({"link": "10GbE", "name": ""}, "name: expected a non-empty string, got ''"),
    ({"link": "10GbE", "name": 5}, "name: expected a non-empty string, got 5"),
    ({"link": "10GbE", "gpus_per_node": True}, "gpus_per_node: expected an integer, got True"),
    ({"link": "10GbE", "compute_scale": "2"}, "compute_scale: expected a number, got '2'"),
    ({"link": "10GbE", "compute": 1}, "compute: expected 'model' or 'trace', got 1"),
    ({"link": "10GbE", "ranks_per_host": 1.5}, "ranks_per_host: expected an integer, got 1.5"),
    ({"link": "10GbE", "ranks_per_host": "2"}, "ranks_per_host: expected an integer, got '2'"),
    (
        {"link": {"bandwidth": "1: 2", "latency": "5us"}},
        "link.bandwidth: cannot parse '1: 2'; use e.g. '10Gbps' or '10Gb/s' (bits), "
        "'12.5GB/s' (bytes), '1GiB/s' (binary bytes), or a number in bytes/s",
    ),
    (
        {"link": "10GbE", "device": {"efficiency": 0.5}},
        "device: no 'peak_flops': give it, or 'preset' (a device preset the table overrides), "
        "or a cluster 'base'",
    ),
    ({"link": {"preset": 5}}, "link.preset: expected a link preset name, got 5"),
    ({"link": 5}, "link: expected a link preset name or a table, got 5"),
    (
        {"link": "10GbE", "device": {"bogus": 1}},
        "unknown key 'device.bogus' in cluster spec; valid keys here: preset, name, "
        "peak_flops, efficiency, memory_bandwidth, memory_bandwidth_Bps, memory_efficiency, "
        "launch_overhead, launch_overhead_s, source",
    ),
]


@pytest.mark.parametrize(("spec", "message"), REFUSALS, ids=range(len(REFUSALS)))
def test_each_refusal_is_its_one_line(spec, message):
    with pytest.raises(ConfigError) as err:
        cluster_from_dict(spec)
    assert str(err.value) == message


def test_a_base_preset_is_inherited_field_by_field():
    base = get_cluster("dgxa100-IB-HDR")
    assert base.intra_link is not None and base.gpus_per_node > 1  # the preset's own parts
    spec = cluster_from_dict({"base": "dgxa100-IB-HDR", "link": {"latency": "9us"}})
    # the link table overrides one field of the base's link and keeps the others
    assert spec.link.latency_s == pytest.approx(9e-6)
    assert spec.link.bandwidth_Bps == base.link.bandwidth_Bps
    assert spec.link.name == base.link.name and spec.link.source == "user"
    # everything the file does not give comes from the base
    assert spec.intra_link == base.intra_link and spec.device == base.device
    assert spec.gpus_per_node == base.gpus_per_node and spec.topology == base.topology
    assert (spec.compute, spec.compute_scale) == (base.compute, base.compute_scale)
    assert (spec.name, spec.source) == (base.name, base.source)
    # the intra link and the device are overridden the same way
    spec = cluster_from_dict(
        {"base": "dgxa100-IB-HDR", "intra_link": {"latency": "1us"}, "device": {"efficiency": 0.5}}
    )
    assert spec.intra_link.latency_s == pytest.approx(1e-6)
    assert spec.intra_link.bandwidth_Bps == base.intra_link.bandwidth_Bps
    assert spec.device.efficiency == 0.5 and spec.device.peak_flops == base.device.peak_flops
    assert spec.link == base.link


def test_without_a_base_the_defaults_hold():
    spec = cluster_from_dict({"link": LINK}, default_name="mine")
    assert spec.name == "mine" and spec.source == "user"
    assert spec.intra_link is None and spec.gpus_per_node == 1
    assert (spec.compute, spec.compute_scale) == ("model", 1.0)
    assert spec.topology.table() == {"kind": "star"}
    assert spec.link.name == "link" and spec.link.source == "user"
    # a preset named in the table, unchanged, keeps its own name and source
    spec = cluster_from_dict({"link": {"preset": "10GbE"}})
    assert spec.link == get_cluster("10GbE").link


def test_a_table_that_only_renames_its_preset_keeps_the_presets_source():
    preset = get_cluster("10GbE").link
    spec = cluster_from_dict({"link": {"preset": "10GbE", "name": "mine"}})
    assert (spec.link.name, spec.link.source) == ("mine", preset.source)
    assert spec.link.bandwidth_Bps == preset.bandwidth_Bps
    spec = cluster_from_dict({"link": {"preset": "10GbE", "latency": "1us"}})
    assert (spec.link.name, spec.link.source) == (preset.name, "user")
    spec = cluster_from_dict({"link": {"preset": "10GbE", "latency": "1us", "source": "lab"}})
    assert spec.link.source == "lab"


def test_a_device_table_without_preset_or_base_is_named_custom():
    device = {
        "peak_flops": "10TFLOPS",
        "efficiency": 0.5,
        "memory_bandwidth": "100GB/s",
        "memory_efficiency": 0.5,
        "launch_overhead": "5us",
    }
    spec = cluster_from_dict({"link": "10GbE", "device": device})
    assert (spec.device.name, spec.device.source) == ("custom", "user")
    assert spec.device.peak_flops == 1e13 and spec.device.memory_bandwidth_Bps == 1e11
    assert spec.device.launch_overhead_s == pytest.approx(5e-6)


PRESETS = (
    "100GbE, 10GbE, 1GbE, 25GbE, 40GbE, 4xP100-IB-FDR56, IB-EDR, IB-FDR, IB-FDR56, IB-HDR, "
    "IB-NDR, dgx1-IB-EDR, dgxa100-IB-HDR"
)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"ranks_per_host": 1.5}, "cluster '10GbE': ranks_per_host must be an integer, got 1.5"),
        ({"host_cores": True}, "cluster '10GbE': host_cores must be an integer, got True"),
        (
            {"ranks_per_host": 0},
            "cluster '10GbE': ranks_per_host must be a finite number in [1, 1.04858e+06], got 0",
        ),
        (
            {"threads_per_rank": 2**20 + 1},
            "cluster '10GbE': threads_per_rank must be a finite number in [1, 1.04858e+06], "
            "got 1048577",
        ),
        ({"topology": {"kind": ""}}, "cluster '10GbE': topology needs a 'kind' string"),
        ({"topology": {"x": 1}}, "cluster '10GbE': topology needs a 'kind' string"),
        ({"topology": 5}, "cluster '10GbE': topology needs a 'kind' string"),
        ({"compute": "fast"}, "unknown compute mode 'fast'; valid: model, trace"),
        (
            {"compute_scale": 0},
            "cluster '10GbE': compute_scale must be a finite number in [1e-06, 1e+06], got 0",
        ),
    ],
)
def test_a_cluster_spec_refuses_its_fields_in_one_line(changes, message):
    import dataclasses

    with pytest.raises(ConfigError) as err:
        dataclasses.replace(get_cluster("10GbE"), **changes)
    assert str(err.value) == message


def test_the_host_fields_take_their_range_ends():
    import dataclasses

    base = get_cluster("10GbE")
    for key, lo, hi in (("ranks_per_host", 1, 2**20), ("host_cores", 0, 2**20)):
        for value in (lo, hi):
            assert getattr(dataclasses.replace(base, **{key: value}), key) == value


def test_an_unknown_cluster_preset_lists_the_presets():
    with pytest.raises(ConfigError) as err:
        get_cluster("nope")
    assert str(err.value) == f"unknown cluster preset 'nope'; valid: {PRESETS}"


def test_a_device_table_without_efficiency_trains_at_0_4_of_its_peak():
    """A file's device with no ``efficiency`` is read at 0.4 (the loaded default)."""
    device = {
        "peak_flops": "10TFLOPS",
        "memory_bandwidth": "100GB/s",
        "memory_efficiency": 0.5,
        "launch_overhead": "5us",
    }
    assert cluster_from_dict({"link": "10GbE", "device": device}).device.efficiency == 0.4


def test_cluster_level_name_source_and_host_fields_from_a_dict():
    spec = cluster_from_dict({"link": "10GbE", "source": "my lab"})
    assert (spec.name, spec.source) == ("custom", "my lab")
    with pytest.raises(ConfigError) as err:
        cluster_from_dict({"link": "10GbE", "ranks_per_host": 0})
    # the range is the cluster spec's own check, named after the cluster
    assert str(err.value) == (
        "cluster 'custom': ranks_per_host must be a finite number in [1, 1.04858e+06], got 0"
    )


@pytest.mark.parametrize(
    ("gpus", "message"),
    [
        (1.5, "cluster '10GbE': gpus_per_node must be an integer >= 1"),
        (True, "cluster '10GbE': gpus_per_node must be an integer >= 1"),
        (0, "cluster '10GbE': gpus_per_node must be a finite number in [1, 1.04858e+06], got 0"),
    ],
)
def test_a_cluster_spec_refuses_a_gpu_count_that_is_not_a_whole_number_from_1(gpus, message):
    import dataclasses

    with pytest.raises(ConfigError) as err:
        dataclasses.replace(get_cluster("10GbE"), gpus_per_node=gpus)
    assert str(err.value) == message


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ("nope.toml", "cluster file not found: nope.toml"),
        ("NOPE.TOML", "cluster file not found: NOPE.TOML"),  # the suffix in any case
        ("dir/nope", "cluster file not found: dir/nope"),  # a path, by its slash
        ("nope", f"unknown cluster (preset name or TOML file) 'nope'; valid: {PRESETS}"),
    ],
)
def test_a_cluster_that_is_neither_a_preset_nor_a_file_is_named(
    tmp_path, monkeypatch, given, message
):
    from vgcsim.core.cluster import load_cluster

    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError) as err:
        load_cluster(given)
    assert str(err.value) == message


def test_a_cluster_file_is_read_as_utf8_and_named_after_its_stem(tmp_path):
    from tests.conftest import ascii_locale
    from vgcsim.core.cluster import load_cluster

    path = tmp_path / "lab.toml"
    path.write_text('source = "Zürich lab — 2 nodes"\nlink = "10GbE"\n', encoding="utf-8")
    with ascii_locale():
        spec = load_cluster(path)
    assert (spec.name, spec.source) == ("lab", "Zürich lab — 2 nodes")
