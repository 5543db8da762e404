"""traces.replay: the [T, P] inputs both models and simulator replay, on a hand-made trace."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from traces.cluster import get_cluster
from traces.errors import TraceError
from traces.replay import step_inputs

TINY_BITS = np.array(
    [[[800, 160], [1600, 320]], [[804, 0], [80, 8]], [[8000, 1600], [16, 16]]], dtype=np.int64
)


def test_bytes_are_ceil_of_total_bits_over_8(tiny_trace):
    si = step_inputs(tiny_trace, get_cluster("10GbE"), 4)
    totals = TINY_BITS.sum(axis=2)  # [T, W]
    expected = -(-totals // 8)
    assert si.rank_bytes.shape == (3, 4)
    assert si.rank_bytes[:, :2].tolist() == expected.tolist()
    assert si.rank_bytes[:, 2:].tolist() == expected.tolist()  # modulo
    assert si.rank_bytes[1].tolist() == [101, 11, 101, 11]  # 804 bits -> 100.5 -> 101 bytes
    assert si.dense_bytes == 4 * 1250
    assert si.steps.tolist() == [0, 1, 2]


def test_encoding_selects_bits_column(tiny_trace):
    si = step_inputs(tiny_trace, get_cluster("10GbE"), 2, encoding="coo64")
    assert si.rank_bytes[0].tolist() == [240, 480]


def test_trace_compute_is_per_worker_times_scale(tiny_trace):
    cluster = dataclasses.replace(get_cluster("10GbE"), compute_scale=0.5)
    si = step_inputs(tiny_trace, cluster, 3)
    assert np.allclose(si.compute_s, 0.2 / 2 * 0.5)
    assert np.allclose(si.variance_s, 0.02 / 2 * 0.5)
    assert np.allclose(si.codec_s, 0.06 / 2 * 0.5)


def test_model_compute_uses_device_flops(tiny_trace):
    cluster = dataclasses.replace(get_cluster("10GbE"), compute="model")
    si = step_inputs(tiny_trace, cluster, 2)
    modelled = 1e9 * 8 / (15.7e12 * 0.4)
    assert np.allclose(si.compute_s, modelled)
    factor = modelled / 0.1
    assert np.allclose(si.codec_s, 0.03 * factor)


def test_layer_bytes_and_groups(tiny_trace):
    si = step_inputs(tiny_trace, get_cluster("10GbE"), 3, layers=True)
    assert si.layer_bytes.shape == (3, 3, 2)
    assert si.layer_bytes[0].tolist() == [[100, 20], [200, 40], [100, 20]]
    grouped = step_inputs(tiny_trace, get_cluster("10GbE"), 3, layers=[[0, 1]])
    assert grouped.layer_bytes.shape == (3, 3, 1)
    assert np.array_equal(grouped.layer_bytes[..., 0], grouped.rank_bytes)


def test_resample_rule_is_seeded(tiny_trace):
    a = step_inputs(tiny_trace, get_cluster("10GbE"), 64, rule="resample", seed=1)
    b = step_inputs(tiny_trace, get_cluster("10GbE"), 64, rule="resample", seed=1)
    assert np.array_equal(a.rank_bytes, b.rank_bytes)
    assert set(a.rank_bytes[0]) == {120, 240}


def test_bad_layer_group(tiny_trace):
    with pytest.raises(TraceError):
        step_inputs(tiny_trace, get_cluster("10GbE"), 2, layers=[[5]])
