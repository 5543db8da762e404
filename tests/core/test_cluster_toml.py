"""The cluster file ``vgcsim calibrate`` writes (``vgcsim.core.clusterfile.cluster_toml``):
every fitted number read back by a TOML parser equal to the fit's, the ``source`` line
written out by hand, the optional fields present exactly where the fit has them, and the
file loaded by ``load_cluster`` as the same link."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import tomllib

from vgcsim.core.cluster import load_cluster
from vgcsim.core.clusterfile import WRITTEN_BY_CALIBRATE, cluster_toml, toml_value
from vgcsim.core.errors import VgcsimError


def bare_fit(**changes):
    """A fit with alpha and beta only (no optional part)."""
    fit = SimpleNamespace(
        backend="gloo",
        world_size=4,
        fit_ops=("allreduce", "allgather"),
        latency_op="",
        gamma_op="",
        host_op="",
        host_call_op="",
        share_op="",
        call_ops=(),
        comm_cpu_op="",
        allgather_latency_op="",
        allgather_latency_s=0.0,
        method="nnls",
        typical_error=0.0625,
        bandwidth_Bps=1.25e8,
        latency_s=5e-5,
        gamma_s_per_byte=0.0,
        allgatherv_host_s_per_byte=0.0,
        call_overhead_s=0.0,
        comm_cpu_s_per_byte=0.0,
        segments=(),
        allgatherv_host_s_per_byte_table=(),
        allgatherv_host_s=0.0,
        allgatherv_host_padded_share=0.0,
    )
    for k, v in changes.items():
        setattr(fit, k, v)
    return fit


def full_fit():
    """Every optional part fitted."""
    return bare_fit(
        latency_op="p2p",
        gamma_op="allreduce",
        host_op="allgatherv",
        host_call_op="allgatherv",
        share_op="allgatherv_skewed",
        call_ops=("allreduce", "allgather"),
        comm_cpu_op="allreduce",
        allgather_latency_op="allgather",
        allgather_latency_s=1.5e-4,
        gamma_s_per_byte=2.5e-10,
        allgatherv_host_s_per_byte=1.5e-9,
        call_overhead_s=1.25e-4,
        comm_cpu_s_per_byte=3e-10,
        segments=((0.0, 0.0, 2.5e9), (16384.0, -6.5e-5, 1.25e8)),
        allgatherv_host_s_per_byte_table=((1000000, 1e-9), (100000000, 3e-9)),
        allgatherv_host_s=2e-4,
        allgatherv_host_padded_share=0.375,
    )


def test_a_bare_fit_is_a_star_with_alpha_beta_and_no_optional_field():
    text = cluster_toml("cal", bare_fit(), "cpu", "measured on loopback")
    assert text.splitlines()[0] == f"{WRITTEN_BY_CALIBRATE} measured on loopback"
    doc = tomllib.loads(text)
    assert doc == {
        "name": "cal",
        "device": "cpu",
        "compute": "trace",
        "topology": {"kind": "star"},
        "link": {
            "name": "cal",
            "bandwidth_Bps": 1.25e8,
            "latency_s": 5e-5,
            "gamma_s_per_byte": 0.0,
            "allgatherv_host_s_per_byte": 0.0,
            "efficiency": 1.0,
            "source": "vgcsim calibrate: link, gloo, 4 ranks, alpha and beta from "
            "allreduce+allgather (nnls fit), typical error 6.2%",
        },
    }


def test_every_fitted_part_is_written_and_named_in_the_source():
    text = cluster_toml("cal", full_fit(), "cpu", "n", hosts=(4, 2), burst_bytes=262144.0)
    doc = tomllib.loads(text)
    assert (doc["ranks_per_host"], doc["host_cores"]) == (4, 2)
    link = doc["link"]
    assert link["call_overhead_s"] == 1.25e-4
    assert link["allgather_latency_s"] == 1.5e-4
    assert link["comm_cpu_s_per_byte"] == 3e-10
    assert link["gamma_s_per_byte"] == 2.5e-10
    assert link["allgatherv_host_s_per_byte"] == 1.5e-9
    assert link["segments"] == [[0.0, 0.0, 2.5e9], [16384.0, -6.5e-5, 1.25e8]]
    assert link["allgatherv_host_s_per_byte_table"] == [[1000000, 1e-9], [100000000, 3e-9]]
    assert link["allgatherv_host_s"] == 2e-4
    assert link["allgatherv_host_padded_share"] == 0.375
    assert link["burst_bytes"] == 262144.0
    assert link["source"] == (
        "vgcsim calibrate: link, gloo, 4 ranks, alpha from p2p's small messages, beta from "
        "allreduce+allgather, gamma from allreduce, allgatherv host cost from allgatherv, its "
        "fixed part from allgatherv, its padded share from allgatherv_skewed, per-call cost "
        "from allreduce+allgather, an allgather step's alpha from allgather, host CPU per byte "
        "from allreduce (nnls fit), typical error 6.2%"
    )
    # and the simulator's loader reads the same link
    spec_link = _load(text).link
    assert (spec_link.bandwidth_Bps, spec_link.latency_s) == (1.25e8, 5e-5)
    assert spec_link.call_overhead_s == 1.25e-4 and spec_link.burst_bytes == 262144.0
    assert spec_link.allgather_latency_s == 1.5e-4
    assert [tuple(s) for s in spec_link.segments] == [(0.0, 0.0, 2.5e9), (16384.0, -6.5e-5, 1.25e8)]


def test_no_hosts_no_burst_no_intra_link_where_none_was_given():
    doc = tomllib.loads(cluster_toml("cal", full_fit(), "cpu", "n"))
    assert "ranks_per_host" not in doc and "host_cores" not in doc
    assert "burst_bytes" not in doc["link"] and "gpus_per_node" not in doc
    doc = tomllib.loads(cluster_toml("cal", full_fit(), "cpu", "n", hosts=(4, 0)))
    assert "ranks_per_host" not in doc  # host cores unknown: nothing about hosts


def test_a_hierarchical_cluster_has_the_intra_link_under_its_own_name():
    intra = bare_fit(bandwidth_Bps=1e10, latency_s=2e-6, world_size=8, backend="nccl")
    text = cluster_toml("cal", bare_fit(), "a100", "n", intra=intra, ranks_per_node=4)
    doc = tomllib.loads(text)
    assert doc["gpus_per_node"] == 4 and doc["topology"] == {"kind": "hierarchical"}
    assert doc["link"]["source"].startswith("vgcsim calibrate: inter-node link, gloo, 4 ranks")
    assert doc["intra_link"]["name"] == "cal-intra"
    assert doc["intra_link"]["bandwidth_Bps"] == 1e10
    assert doc["intra_link"]["source"].startswith("vgcsim calibrate: intra-node link, nccl, 8")


def test_toml_values_by_hand():
    assert toml_value(True) == "true" and toml_value(False) == "false"
    assert toml_value(7) == "7"
    assert toml_value('a "b"') == '"a \\"b\\""'
    assert tomllib.loads(f"x = {toml_value(1e-300)}")["x"] == 1e-300
    with pytest.raises(VgcsimError, match="non-finite"):
        toml_value(math.inf)


def _load(text: str):
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "c.toml"
        path.write_text(text)
        return load_cluster(str(path))


def test_one_host_core_and_a_one_byte_bucket_are_written_beside_the_rest():
    text = cluster_toml("cal", bare_fit(), "cpu", "n", hosts=(3, 1), burst_bytes=1.0)
    doc = tomllib.loads(text)
    assert (doc["ranks_per_host"], doc["host_cores"]) == (3, 1)
    assert (doc["name"], doc["device"], doc["compute"]) == ("cal", "cpu", "trace")
    assert doc["link"]["burst_bytes"] == 1.0


def test_an_intra_link_without_a_rank_count_has_one_rank_per_node():
    text = cluster_toml("cal", bare_fit(), "cpu", "n", intra=bare_fit())
    assert tomllib.loads(text)["gpus_per_node"] == 1


def test_a_cluster_file_that_is_not_utf8_is_one_line_naming_it(tmp_path):
    path = tmp_path / "c.toml"
    path.write_bytes(b'name = "\xff\xfe"\n')
    with pytest.raises(VgcsimError) as err:
        load_cluster(path)
    assert str(err.value).startswith(f"cannot read cluster file {path}: 'utf-8' codec")
    assert "\n" not in str(err.value)


def test_a_cluster_file_nested_too_deeply_for_the_parser_is_one_line_naming_it(tmp_path):
    path = tmp_path / "c.toml"
    path.write_text("a = " + "[" * 100_000 + "]" * 100_000 + "\n")
    with pytest.raises(VgcsimError) as err:
        load_cluster(path)
    assert str(err.value) == f"cluster file {path} nests tables too deeply to read"
