"""Cluster files: the per-call software cost and the host fields, read and refused."""

from __future__ import annotations

import pytest

from vgcsim.cli import main
from vgcsim.core.cluster import cluster_from_dict, cluster_to_dict, load_cluster
from vgcsim.core.clusterspec import host_share
from vgcsim.core.errors import ConfigError


def test_call_overhead_and_hosts_read_from_a_file(tmp_path):
    path = tmp_path / "c.toml"
    path.write_text(
        'base = "1GbE"\nranks_per_host = 4\nhost_cores = 2\nthreads_per_rank = 1\n'
        '[link]\npreset = "1GbE"\ncall_overhead = "300us"\n'
    )
    c = load_cluster(path)
    assert c.link.call_overhead_s == pytest.approx(300e-6, rel=1e-15)
    assert (c.ranks_per_host, c.host_cores, c.threads_per_rank) == (4, 2, 1)
    assert cluster_from_dict(cluster_to_dict(c)) == c
    # the seconds form, and the base's value kept when the file does not give one
    d = cluster_to_dict(c)
    d["link"]["call_overhead_s"] = 1e-3
    assert cluster_from_dict(d).link.call_overhead_s == 1e-3
    assert load_cluster("1GbE").link.call_overhead_s == 0.0
    assert load_cluster("1GbE").host_cores == 0


@pytest.mark.parametrize(("given", "factor"), [("", 2.0), ('host_sharing = "fair"\n', 1.5)])
def test_host_sharing_read_from_a_file(tmp_path, given, factor):
    # 3 ranks on a host of 2 cores: the fullest core (the default) holds 2, fair sharing 1.5
    path = tmp_path / "c.toml"
    path.write_text(f'base = "1GbE"\nranks_per_host = 3\nhost_cores = 2\n{given}')
    c = load_cluster(path)
    assert host_share(c, 3) == factor
    assert cluster_from_dict(cluster_to_dict(c)) == c


def test_a_bad_host_sharing_names_the_rules(tmp_path):
    path = tmp_path / "bad.toml"
    path.write_text('base = "1GbE"\nhost_sharing = "fifo"\n')
    with pytest.raises(ConfigError, match="host_sharing: expected one of 'fullest-core', 'fair'"):
        load_cluster(path)


@pytest.mark.parametrize(
    "text",
    [
        '[link]\npreset = "1GbE"\ncall_overhead = "-1us"\n',
        '[link]\npreset = "1GbE"\ncall_overhead = "2s"\n',
        '[link]\npreset = "1GbE"\ncall_overhead = "soon"\n',
        '[link]\npreset = "1GbE"\ncall_overhead_s = nan\n',
        '[link]\npreset = "1GbE"\ncall_overhead = "1us"\ncall_overhead_s = 1e-6\n',
        'link = "1GbE"\nranks_per_host = 0\n',
        'link = "1GbE"\nranks_per_host = 1.5\n',
        'link = "1GbE"\nhost_cores = -2\n',
        'link = "1GbE"\nhost_cores = "two"\n',
        'link = "1GbE"\nthreads_per_rank = 0\n',
        'link = "1GbE"\nthreads_per_rank = true\n',
        'link = "1GbE"\nhost_sharing = "fifo"\n',
        'link = "1GbE"\nhost_sharing = 1\n',
        'link = "1GbE"\nhost_sharing = ""\n',
    ],
)
def test_bad_values_are_one_line_and_exit_2(tmp_path, capsys, text):
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(ConfigError):
        load_cluster(path)
    assert main(["clusters", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err


def test_size_segments_read_from_a_file(tmp_path):
    path = tmp_path / "c.toml"
    path.write_text(
        '[link]\npreset = "1GbE"\nsegments = [[0, 0.0, 1.25e9], [262144, -0.0019, 1.25e8]]\n'
    )
    link = load_cluster(path).link
    assert link.segments == ((0.0, 0.0, 1.25e9), (262144.0, -0.0019, 1.25e8))
    assert cluster_from_dict(cluster_to_dict(load_cluster(path))).link == link


@pytest.mark.parametrize(
    "segments",
    [
        '"fast"',
        "[[0, 0.0]]",
        "[[0, 0.0, 0]]",
        "[[-1, 0.0, 1e9]]",
        "[[10, 0.0, 1e9], [10, 0.0, 1e8]]",
        "[[0, 5.0, 1e9]]",
        "[[0, nan, 1e9]]",
    ],
)
def test_bad_segments_are_one_line_and_exit_2(tmp_path, capsys, segments):
    path = tmp_path / "bad.toml"
    path.write_text(f'[link]\npreset = "1GbE"\nsegments = {segments}\n')
    assert main(["clusters", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err


@pytest.mark.parametrize(
    ("world_size", "share"), [(1, 1.0), (2, 2.0), (3, 3.0), (4, 4.0), (8, 4.0)]
)
def test_one_rank_alone_shares_no_core_and_the_fullest_host_sets_the_share(world_size, share):
    """f = max(1, R·T / C) with R = min(ranks_per_host, P): 4 ranks per host on 1 core, so a
    job of 1 rank runs alone (f = 1) and one of 8 fills two hosts of 4 (f = 4)."""
    c = cluster_from_dict({"base": "1GbE", "ranks_per_host": 4, "host_cores": 1})
    assert host_share(c, world_size) == share


def test_a_cluster_built_with_an_unknown_host_sharing_is_refused_by_name():
    import dataclasses

    from vgcsim.core.errors import UnknownNameError

    with pytest.raises(UnknownNameError) as err:
        dataclasses.replace(load_cluster("1GbE"), host_sharing="fifo")
    assert str(err.value) == "unknown host_sharing 'fifo'; valid: fair, fullest-core"


def test_the_compute_source_and_scale_are_read_from_a_file(tmp_path):
    path = tmp_path / "c.toml"
    path.write_text('base = "1GbE"\ncompute = "trace"\ncompute_scale = 2.5\n')
    c = load_cluster(path)
    assert (c.compute, c.compute_scale) == ("trace", 2.5)
    assert (load_cluster("1GbE").compute, load_cluster("1GbE").compute_scale) == ("model", 1.0)


def test_the_sharing_factor_of_an_unknown_rule_is_refused_by_name():
    from vgcsim.core.clusterspec import sharing_factor
    from vgcsim.core.errors import UnknownNameError

    assert (sharing_factor(3, 1, 2, "fullest-core"), sharing_factor(3, 1, 2, "fair")) == (2.0, 1.5)
    with pytest.raises(UnknownNameError) as err:
        sharing_factor(3, 1, 2, "fifo")
    assert str(err.value) == "unknown host_sharing 'fifo'; valid: fair, fullest-core"
