"""δ by gathered size: a link's ``allgatherv_host_s_per_byte_table``, a step function (each
point's value from its size up to the next point's, the first value below the first point),
checked against hand computations;
refused when malformed; read from and written to cluster files unchanged."""

from __future__ import annotations

import math

import numpy as np
import pytest

from vgcsim.core.cluster import LinkSpec, cluster_from_dict, cluster_to_dict, load_cluster
from vgcsim.core.collectives import host_s_per_byte_at, padded_host_time_s
from vgcsim.core.errors import ConfigError

# 1 ns/B at 1 MB, 3 ns/B at 100 MB, 2 ns/B at 10 GB: a rise, then a fall.
TABLE = ((1e6, 1e-9), (1e8, 3e-9), (1e10, 2e-9))


@pytest.mark.parametrize(
    ("gathered", "expected"),
    [
        (1e6, 1e-9),  # on a point: its value
        (1e8, 3e-9),
        (1e10, 2e-9),
        (1e7, 1e-9),  # between two points: the lower one's value
        (1e8 - 1, 1e-9),  # just below a point: still the lower one's
        (1e8 + 1, 3e-9),
        (1e9, 3e-9),  # between a rise and a fall
        (10.0, 1e-9),  # below the first point: the first value
        (1e12, 2e-9),  # above the last: the last value
        (0.0, 1e-9),  # an empty buffer: the first value (its host time is 0 anyway)
    ],
)
def test_delta_at_a_size_by_hand(gathered, expected):
    assert float(host_s_per_byte_at(gathered, 7e-9, TABLE)) == pytest.approx(expected, rel=1e-12)


def test_delta_without_a_table_is_the_one_number_at_every_size():
    out = host_s_per_byte_at(np.array([0.0, 1.0, 1e6, 1e9]), 7e-9)
    np.testing.assert_array_equal(out, [7e-9, 7e-9, 7e-9, 7e-9])


def test_delta_at_an_array_of_sizes_is_elementwise():
    sizes = np.array([[1e6, 1e7], [1e9, 1e12]])
    out = host_s_per_byte_at(sizes, 0.0, TABLE)
    assert out.shape == (2, 2)
    np.testing.assert_allclose(out, [[1e-9, 1e-9], [3e-9, 2e-9]], rtol=1e-12)


def test_padded_host_time_prices_the_gathered_buffer_at_its_own_delta():
    # P = 4 ranks, m_max = 2.5 MB: 10 MB gathered, delta(1e7) = 1 ns/B (the 1 MB point's)
    assert padded_host_time_s(4, 2.5e6, 0.0, TABLE) == pytest.approx(0.01, rel=1e-12)
    # the same buffer with the one-number delta of 7 ns/B
    assert padded_host_time_s(4, 2.5e6, 7e-9) == pytest.approx(0.07, rel=1e-12)
    # one rank gathers nothing
    assert padded_host_time_s(1, 2.5e6, 7e-9, TABLE) == 0.0
    blocks = np.array([2.5e5, 2.5e6, 2.5e7])  # 1 MB, 10 MB, 100 MB gathered
    np.testing.assert_allclose(
        padded_host_time_s(4, blocks, 0.0, TABLE), [1e-3, 0.01, 0.3], rtol=1e-12
    )


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ("1e6:1e-9", "list of \\[bytes, s_per_byte\\] pairs"),
        ([[1e6, 1e-9, 3]], "each point must be"),
        ([[1e6]], "each point must be"),
        ([["1MB", 1e-9]], "each point must be"),
        ([[1e6, math.nan]], "each point must be"),
        ([[0.5, 1e-9]], "gathered bytes must be >= 1"),
        ([[1e6, -1e-9]], "allgatherv_host_s_per_byte must be a finite number"),
        ([[1e6, 2.0]], "allgatherv_host_s_per_byte must be a finite number"),
        ([[1e8, 1e-9], [1e6, 2e-9]], "bytes must increase"),
        ([[1e6, 1e-9], [1e6, 2e-9]], "bytes must increase"),
    ],
)
def test_a_malformed_table_is_refused(table, message):
    with pytest.raises(ConfigError, match=message):
        LinkSpec("l", 1e9, 1e-5, allgatherv_host_s_per_byte_table=table)


def test_a_table_from_lists_becomes_tuples_of_floats():
    link = LinkSpec("l", 1e9, 1e-5, allgatherv_host_s_per_byte_table=[[1048576, 2e-9], [4e6, 3e-9]])
    assert link.allgatherv_host_s_per_byte_table == ((1048576.0, 2e-9), (4e6, 3e-9))
    hash(link)  # still usable as a key


def test_a_cluster_file_table_is_read_and_round_trips(tmp_path):
    path = tmp_path / "c.toml"
    path.write_text(
        'name = "c"\n'
        "[link]\n"
        'bandwidth = "1Gbps"\n'
        'latency = "10us"\n'
        "allgatherv_host_s_per_byte = 4e-9\n"
        "allgatherv_host_s_per_byte_table = [[16777216, 1.9e-9], [67108864, 5.1e-9]]\n"
    )
    cluster = load_cluster(str(path))
    assert cluster.link.allgatherv_host_s_per_byte_table == (
        (16777216.0, 1.9e-9),
        (67108864.0, 5.1e-9),
    )
    assert cluster.link.source == "user"
    back = cluster_from_dict(cluster_to_dict(cluster))
    assert back == cluster


def test_a_preset_based_link_inherits_no_table_and_a_bad_one_names_the_file(tmp_path):
    assert load_cluster("10GbE").link.allgatherv_host_s_per_byte_table == ()
    path = tmp_path / "bad.toml"
    path.write_text('name = "c"\n[link]\npreset = "10GbE"\nallgatherv_host_s_per_byte_table = 3\n')
    with pytest.raises(ConfigError, match="allgatherv_host_s_per_byte_table must be a list"):
        load_cluster(str(path))


def test_a_plain_all_gather_pays_half_the_host_cost_of_the_allgatherv():
    from vgcsim.core.collectives import plain_allgather_host_time_s

    # P = 4, m = 2.5e7: 1e8 gathered, δ(1e8) = 3 ns/B: the allgatherv's 0.3 s, halved
    assert plain_allgather_host_time_s(4, 2.5e7, 0.0, TABLE) == pytest.approx(0.15, rel=1e-12)
    assert plain_allgather_host_time_s(2, 1e6, 4e-9) == pytest.approx(4e-3, rel=1e-12)
    assert plain_allgather_host_time_s(1, 1e6, 4e-9) == 0.0


def test_validate_prices_a_gloo_all_gather_with_one_host_copy():
    from vgcsim.api import collective_frame
    from vgcsim.core.cluster import ClusterSpec

    base = load_cluster("10GbE")
    link = LinkSpec("l", 1e8, 1e-4, allgatherv_host_s_per_byte=2e-9)
    cluster = ClusterSpec(**{**base.__dict__, "link": link, "name": "l"})
    m = 4_000_000
    rows = [{"op": "allgather", "size_bytes": m, "seconds": [1.0]}]
    df = collective_frame({"world_size": 4, "backend": "gloo", "rows": rows}, cluster)
    # ring: 3 (α + m β) = 3 (1e-4 + 0.04) = 0.1203; host: ½ · 2e-9 · 4 · 4e6 = 0.016
    assert df["predicted_s"].iloc[0] == pytest.approx(0.1203 + 0.016, rel=1e-9)
    assert df["simulated_s"].iloc[0] == pytest.approx(0.1203 + 0.016, rel=1e-9)
    # not on NCCL, where the binding has no host-side gathered buffer to copy
    df = collective_frame({"world_size": 4, "backend": "nccl", "rows": rows}, cluster)
    assert df["predicted_s"].iloc[0] == pytest.approx(0.1203, rel=1e-9)
