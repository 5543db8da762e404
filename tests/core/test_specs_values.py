"""Link and device specs: their refusals, one exact line each, and how a field is spelled.

Pinned here: a link's size segments (``(from_bytes, extra_latency_s, bandwidth_Bps)``
triples, from_bytes >= 0 and increasing, |extra latency| <= 1 s, bandwidth in
[1, 1e15] B/s) and its host table's points are refused with the one line that names the
link, the field and the rule; a framing is given by its name; a device's fractions lie in
(0, 1] (1 itself allowed) and its rates in their ranges; :func:`spelled` makes a dataclass
field that keeps its own default (or none) and the spelling :func:`spellings` reads back.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from vgcsim.core.clusterfile import cluster_from_dict
from vgcsim.core.errors import ConfigError
from vgcsim.core.specs import DeviceSpec, LinkSpec, Spelling, spelled, spellings
from vgcsim.core.units import parse_time_s

SEG = "[from_bytes, extra_latency_s, bandwidth_Bps]"

SEGMENT_REFUSALS = [
    ("fast", f"link 'x': segments must be a list of {SEG} triples, got 'fast'"),
    ({"a": 1}, f"link 'x': segments must be a list of {SEG} triples, got {{'a': 1}}"),
    (5, f"link 'x': segments must be a list of {SEG} triples, got 5"),
    (
        [[0, 0.0]],
        f"link 'x': segments: each segment must be {SEG} (three finite numbers), got [0, 0.0]",
    ),
    (
        [[0, 0.0, float("nan")]],
        f"link 'x': segments: each segment must be {SEG} (three finite numbers), got [0, 0.0, nan]",
    ),
    # a sequence that is not a list: its three numbers do not make it a segment
    (
        [range(3)],
        f"link 'x': segments: each segment must be {SEG} (three finite numbers), got range(0, 3)",
    ),
    ([[-1, 0.0, 1e9]], "link 'x': segments: from_bytes must be >= 0 and increase"),
    (
        [[10, 0.0, 1e9], [10, 0.0, 1e8]],
        "link 'x': segments: from_bytes must be >= 0 and increase",
    ),
    ([[0, 1.5, 1e9]], "link 'x': segments: extra_latency_s must be within 1 s, got 1.5"),
    ([[0, -1.5, 1e9]], "link 'x': segments: extra_latency_s must be within 1 s, got -1.5"),
    (
        [[0, 0.0, 0.5]],
        "link 'x' segments: bandwidth_Bps must be a finite number in [1, 1e+15], got 0.5",
    ),
]


@pytest.mark.parametrize(
    ("segments", "message"), SEGMENT_REFUSALS, ids=range(len(SEGMENT_REFUSALS))
)
def test_each_bad_size_segment_is_refused_with_its_one_line(segments, message):
    with pytest.raises(ConfigError) as err:
        LinkSpec("x", 1e9, 0.0, segments=segments)
    assert str(err.value) == message


def test_an_extra_latency_of_exactly_one_second_either_way_is_accepted():
    link = LinkSpec("x", 1e9, 0.0, segments=[[0, -1.0, 1e9], [1000, 1.0, 5e8]])
    assert link.segments == ((0.0, -1.0, 1e9), (1000.0, 1.0, 5e8))


def test_a_bad_segment_in_a_cluster_table_names_the_table_and_the_link():
    with pytest.raises(ConfigError) as err:
        cluster_from_dict(
            {"link": {"bandwidth": "10Gbps", "latency": "5us", "segments": [[0, 1.5, 1e9]]}}
        )
    assert str(err.value) == (
        "link: link 'link': segments: extra_latency_s must be within 1 s, got 1.5"
    )


def test_a_host_table_point_that_is_not_a_list_is_refused():
    with pytest.raises(ConfigError) as err:
        LinkSpec("x", 1e9, 0.0, allgatherv_host_s_per_byte_table=[range(1, 3)])
    assert str(err.value) == (
        "link 'x': allgatherv_host_s_per_byte_table: each point must be [bytes, s_per_byte] "
        "(two finite numbers), got range(1, 3)"
    )


def test_a_framing_is_given_by_its_name():
    link = {"bandwidth": "10Gbps", "latency": "5us"}
    spec = cluster_from_dict({"link": {**link, "framing": "tcp-mtu9000"}})
    # jumbo frames: 8948 payload bytes per 9038 wire bytes
    assert spec.link.efficiency == pytest.approx(8948 / 9038, rel=1e-15)
    with pytest.raises(ConfigError) as err:
        cluster_from_dict({"link": {**link, "framing": 3}})
    assert str(err.value) == "link.framing: expected a framing name, got 3"


def _device(**kw):
    return DeviceSpec(**{"name": "d", "peak_flops": 1e12, "efficiency": 0.5, **kw})


DEVICE_REFUSALS = [
    ({"efficiency": 0}, "device 'd': efficiency must be in (0, 1], got 0"),
    ({"efficiency": 1.5}, "device 'd': efficiency must be in (0, 1], got 1.5"),
    ({"efficiency": 2.0}, "device 'd': efficiency must be in (0, 1], got 2.0"),
    ({"efficiency": -0.5}, "device 'd': efficiency must be in (0, 1], got -0.5"),
    ({"efficiency": float("nan")}, "device 'd': efficiency must be in (0, 1], got nan"),
    ({"memory_efficiency": 0.0}, "device 'd': memory_efficiency must be in (0, 1], got 0.0"),
    ({"memory_efficiency": 1.01}, "device 'd': memory_efficiency must be in (0, 1], got 1.01"),
    (
        {"peak_flops": 1.0},
        "device 'd': peak_flops must be a finite number in [1e+06, 1e+21], got 1.0",
    ),
    (
        {"memory_bandwidth_Bps": 0.5},
        "device 'd': memory_bandwidth_Bps must be a finite number in [1, 1e+15], got 0.5",
    ),
    (
        {"launch_overhead_s": 2.0},
        "device 'd': launch_overhead_s must be a finite number in [0, 1], got 2.0",
    ),
]


@pytest.mark.parametrize(("fields", "message"), DEVICE_REFUSALS, ids=range(len(DEVICE_REFUSALS)))
def test_each_bad_device_field_is_refused_with_its_one_line(fields, message):
    with pytest.raises(ConfigError) as err:
        _device(**fields)
    assert str(err.value) == message


def test_a_device_fraction_of_exactly_one_is_accepted():
    device = _device(efficiency=1.0, memory_efficiency=1.0, memory_bandwidth_Bps=1e12)
    assert device.effective_flops == 1e12  # peak × 1
    assert device.sustained_memory_Bps == 1e12
    # the smallest fractions above zero and the range ends are accepted too
    device = _device(efficiency=1e-9, peak_flops=1e6, launch_overhead_s=1.0)
    assert device.effective_flops == pytest.approx(1e-3, rel=1e-12)  # 1e6 × 1e-9
    assert device.launch_s == 1.0


def test_a_device_without_memory_figures_is_accepted():
    device = _device()
    assert device.memory_bandwidth_Bps is None and device.launch_overhead_s is None
    assert device.memory_efficiency == 1.0


def test_a_spelled_field_keeps_its_default_and_its_spelling():
    @dataclass(frozen=True)
    class Probe:
        need: float = spelled(unit="need", parse=parse_time_s, range=(0.0, 1.0), required=True)
        plain: float = spelled(2.5, range=(0.0, 10.0))
        listed: tuple = spelled((), rows=True)
        other: int = 7

    # only the spelled fields are spelled, in declaration order, as declared
    assert spellings(Probe) == (
        ("need", Spelling(unit="need", parse=parse_time_s, range=(0.0, 1.0), required=True)),
        ("plain", Spelling(range=(0.0, 10.0))),
        ("listed", Spelling(rows=True)),
    )
    assert spellings(Probe)[0][1].keys("need_s") == ("need", "need_s")
    # a spelled field without a default is required; one with a default keeps it
    with pytest.raises(TypeError):
        Probe()
    probe = Probe(need=0.5)
    assert (probe.need, probe.plain, probe.listed, probe.other) == (0.5, 2.5, (), 7)


@pytest.mark.parametrize("efficiency", [0, 1.5, float("nan"), -0.5])
def test_a_link_built_directly_refuses_an_efficiency_outside_0_to_1(efficiency):
    with pytest.raises(ConfigError) as err:
        LinkSpec(name="l", bandwidth_Bps=1e9, latency_s=1e-5, efficiency=efficiency)
    assert str(err.value) == (
        f"link 'l': efficiency (payload bytes per wire byte) must be in (0, 1], got {efficiency!r}"
    )


def test_a_host_table_point_below_one_byte_names_its_size():
    link = {"bandwidth": "1Gbps", "latency": "5us"}
    with pytest.raises(ConfigError) as err:
        cluster_from_dict({"link": {**link, "allgatherv_host_s_per_byte_table": [[0, 1e-9]]}})
    assert str(err.value) == (
        "link: link 'link': allgatherv_host_s_per_byte_table: gathered bytes must be >= 1, got 0"
    )
    with pytest.raises(ConfigError) as err:
        cluster_from_dict({"link": {**link, "allgatherv_host_s_per_byte_table": [[10, -1e-9]]}})
    assert str(err.value) == (
        "link: link 'link' allgatherv_host_s_per_byte_table: allgatherv_host_s_per_byte must "
        "be a finite number in [0, 1], got -1e-09"
    )
    assert cluster_from_dict({"link": {**link, "efficiency": 1.0}}).link.efficiency == 1.0


def test_a_link_built_directly_names_itself_in_a_field_out_of_its_range():
    with pytest.raises(ConfigError) as err:
        LinkSpec(name="uplink", bandwidth_Bps=1e9, latency_s=-1e-5)
    assert str(err.value).startswith("link 'uplink': latency_s must be a finite number in [0, ")
