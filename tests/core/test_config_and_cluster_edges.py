"""Edges of `--set` overrides, ``to_dict``, a cluster's ``gpus_per_node`` and a shared host's
links, each as the one line a user reads or the value a model prices with."""

from __future__ import annotations

import dataclasses

import pytest

from vgcsim.core.cluster import get_cluster
from vgcsim.core.clusterspec import shared_cluster, shared_link
from vgcsim.core.config import apply_overrides, to_dict
from vgcsim.core.errors import ConfigError


@dataclasses.dataclass(frozen=True)
class _Inner:
    x: int = 1


@dataclasses.dataclass(frozen=True)
class _Outer:
    inner: _Inner = dataclasses.field(default_factory=_Inner)
    n: int = 0


@pytest.mark.parametrize("item", ["inner..x=2", "=2", " =2", "inner.=2", ".n=2"])
def test_an_override_with_an_empty_key_or_part_is_one_line(item):
    with pytest.raises(ConfigError) as err:
        apply_overrides(_Outer(), [item])
    assert str(err.value) == f"override {item!r} has an empty key"


def test_a_nested_override_sets_the_field_and_an_unknown_one_names_its_section():
    assert apply_overrides(_Outer(), ["inner.x=2", "n=3"]) == _Outer(_Inner(2), 3)
    with pytest.raises(ConfigError) as err:
        apply_overrides(_Outer(), ["inner.y=2"])
    assert str(err.value) == "unknown config key 'inner.y'; valid keys here: x"


@pytest.mark.parametrize(("value", "name"), [(5, "int"), (_Outer, "type"), (None, "NoneType")])
def test_to_dict_of_anything_but_a_dataclass_instance_names_its_type(value, name):
    with pytest.raises(TypeError) as err:
        to_dict(value)
    assert str(err.value) == f"to_dict expects a dataclass instance, got {name}"


@pytest.mark.parametrize("value", [1.5, "2", True])
def test_gpus_per_node_that_is_not_an_integer_is_one_line(value):
    with pytest.raises(ConfigError) as err:
        dataclasses.replace(get_cluster("10GbE"), gpus_per_node=value)
    assert str(err.value) == "cluster '10GbE': gpus_per_node must be an integer >= 1"


def test_gpus_per_node_out_of_range_names_the_cluster():
    with pytest.raises(ConfigError) as err:
        dataclasses.replace(get_cluster("10GbE"), gpus_per_node=0)
    assert str(err.value).startswith("cluster '10GbE'") and "gpus_per_node" in str(err.value)


def test_a_shared_host_stretches_the_intra_node_link_too_and_an_unshared_one_is_itself():
    base = get_cluster("10GbE")
    intra = dataclasses.replace(base.link, call_overhead_s=100e-6)
    link = dataclasses.replace(base.link, call_overhead_s=100e-6)
    # 4 ranks on 2 cores: every CPU-time parameter of both links doubles
    shared = dataclasses.replace(base, link=link, intra_link=intra, ranks_per_host=4, host_cores=2)
    out = shared_cluster(shared, 4)
    assert out.link == shared_link(link, 2.0) and out.intra_link == shared_link(intra, 2.0)
    assert out.intra_link.call_overhead_s == pytest.approx(200e-6, rel=1e-12)
    # one rank per core: nothing changes, and the cluster itself comes back
    alone = dataclasses.replace(shared, ranks_per_host=2, host_cores=2)
    assert shared_cluster(alone, 4) is alone
