"""Compute, buckets, iteration (overlap modes) and crossover models against hand-computed
numbers."""

from __future__ import annotations

import numpy as np
import pytest
from modelhelpers import star_cluster

from vgcsim.core.cluster import get_cluster, get_device
from vgcsim.core.errors import ConfigError, UnknownNameError
from vgcsim.models.collectives import COLLECTIVES
from vgcsim.models.crossover import crossover_density, crossover_payload_bytes, crossover_ratio
from vgcsim.models.iteration import bucketed_step_time_s, critical_path, iteration_time_s
from vgcsim.traces.buckets import bucket_backward_share, bucket_layers, layer_groups
from vgcsim.traces.devicecost import compute_time_s


def test_compute_model_by_hand():
    dev = get_device("V100")  # 15.7 TFLOP/s × 0.4
    assert compute_time_s(12.3e9, 32, dev) == pytest.approx(12.3e9 * 32 / 6.28e12)


def test_layer_groups_follow_backward_order_for_every_overlap():
    numel = [100, 300, 50, 200]  # fp32 bytes 400, 1200, 200, 800
    assert layer_groups(numel, "none") == [[3, 2, 1, 0]]
    assert layer_groups(numel, "per_layer") == [[3], [2], [1], [0]]
    # greedy: 800 closes bucket [3]; 200 + 1200 closes [2, 1]; 400 is the rest
    assert layer_groups(numel, "bucketed", bucket_bytes=800) == [[3], [2, 1], [0]]
    share = bucket_backward_share(numel, layer_groups(numel, "per_layer"))
    assert share.tolist() == pytest.approx([200 / 650, 250 / 650, 550 / 650, 1.0])
    with pytest.raises(UnknownNameError):
        layer_groups(numel, "full")
    with pytest.raises(ConfigError):
        bucket_layers(numel, bucket_bytes=0)


def test_no_overlap_sums_the_critical_rank():
    compute = np.array([[1.0, 2.0], [3.0, 1.0]])
    var = np.array([[0.5, 0.0], [0.0, 0.0]])
    codec = np.array([[0.1, 0.1], [0.2, 0.9]])
    out = iteration_time_s(compute, var, codec, [10.0, 20.0])
    # step 0: rank 1 (2.1) beats rank 0 (1.6); step 1: rank 0 (3.2) beats rank 1 (1.9)
    assert out.compute_s.tolist() == [2.0, 3.0]
    assert out.codec_s.tolist() == pytest.approx([0.1, 0.2])
    assert out.step_s.tolist() == pytest.approx([12.1, 23.2])


def test_full_overlap_hides_comm_behind_backward():
    out = iteration_time_s([[3.0]], [[0.0]], [[0.0]], [1.0], overlap="full", forward_fraction=1 / 3)
    assert out.step_s[0] == pytest.approx(3.0)  # 1 forward + max(2 backward, 1 comm)
    out = iteration_time_s([[3.0]], [[0.0]], [[0.0]], [5.0], overlap="full", forward_fraction=1 / 3)
    assert out.step_s[0] == pytest.approx(6.0)
    with pytest.raises(UnknownNameError):
        iteration_time_s([[1.0]], [[0.0]], [[0.0]], [1.0], overlap="sometimes")


def test_buckets_by_hand():
    numel = [100, 100, 200]  # bytes 400, 400, 800
    groups = bucket_layers(numel, bucket_bytes=800)
    assert groups == [[2], [1, 0]]
    share = bucket_backward_share(numel, groups)
    assert share.tolist() == pytest.approx([0.5, 1.0])
    # c = 3 (forward 1, backward 2), no codec; bucket 0 ready at 1 + 0.5·2 = 2, comm 1.5 → 3.5;
    # bucket 1 ready at 3, starts at 3.5, comm 1 → 4.5
    out = bucketed_step_time_s(
        [[3.0]], [[0.0]], [[0.0]], [[1.5, 1.0]], share, forward_fraction=1 / 3
    )
    assert out.step_s[0] == pytest.approx(4.5)
    assert out.comm_s[0] == pytest.approx(2.5)
    # tiny collectives are fully hidden except the last one after backward ends
    out = bucketed_step_time_s(
        [[3.0]], [[0.0]], [[0.0]], [[0.1, 0.1]], share, forward_fraction=1 / 3
    )
    assert out.step_s[0] == pytest.approx(3.1)


@pytest.mark.parametrize("p", [2, 4, 16, 100, 1024])
def test_balanced_coo64_crossover_is_density_one_over_p(p):
    d = crossover_density(
        4e8, p, star_cluster(latency_s=0.0), bits_per_sent=64, bits_per_element=32
    )
    assert d == pytest.approx(1.0 / p, rel=1e-9)


@pytest.mark.parametrize("agv", ["ring", "recursive_doubling", "bruck", "direct", "padded"])
def test_crossover_ties_the_two_step_times(agv):
    c = star_cluster(latency_s=5e-6)
    n, p = 1e8, 48
    m = crossover_payload_bytes(n, p, c, allgatherv=f"allgatherv/{agv}", overhead_s=1e-3)
    dense = COLLECTIVES["allreduce/ring"].time_s(np.full((1, p), n), c.link)[0]
    comp = COLLECTIVES[f"allgatherv/{agv}"].time_s(np.full((1, p), m), c.link)[0] + 1e-3
    assert comp == pytest.approx(dense, rel=1e-9)
    assert crossover_ratio(
        n, p, c, allgatherv=f"allgatherv/{agv}", overhead_s=1e-3
    ) == pytest.approx(n / m)


def test_crossover_never_pays_when_latency_dominates():
    c = get_cluster("1GbE")
    # ring allgatherv pays 1023 α even at zero payload; a log-depth allreduce pays 10 (α + nβ)
    assert crossover_ratio(1000.0, 1024, c, allreduce="allreduce/recursive_doubling") == float(
        "inf"
    )
    # against a ring allreduce (2·1023 α) a payload larger than dense still ties: ratio < 1
    assert crossover_ratio(1000.0, 1024, c) < 1
    with pytest.raises(ConfigError):
        crossover_ratio(1000.0, 1, c)


def test_crossover_ratio_grows_with_p_on_ring():
    c = get_cluster("10GbE")
    ratios = [crossover_ratio(1e8, p, c) for p in (2, 8, 64, 512)]
    assert all(b > a for a, b in zip(ratios, ratios[1:], strict=False))


# Hand-worked checks of the iteration model: expected numbers from the formulas in its docstrings
# on small, exact inputs, documented contracts and one-line error messages.


def _message(exc_info) -> str:
    return str(exc_info.value)


@pytest.mark.parametrize("mode", ["per_layer", "bucketed"])
def test_bucketed_modes_are_sent_to_bucketed_step_time_s(mode):
    with pytest.raises(ConfigError) as e:
        iteration_time_s([[1.0]], [[0.0]], [[0.0]], [1.0], overlap=mode)
    assert type(e.value) is ConfigError
    assert _message(e) == f"overlap '{mode}' needs per-bucket times: use bucketed_step_time_s"


def test_unknown_overlap_mode_message_lists_the_modes():
    with pytest.raises(UnknownNameError) as e:
        iteration_time_s([[1.0]], [[0.0]], [[0.0]], [1.0], overlap="some")
    assert _message(e) == "unknown overlap mode 'some'; valid: bucketed, full, none, per_layer"


def test_negative_optimizer_time_is_refused_by_name():
    with pytest.raises(ConfigError) as e:
        iteration_time_s([[1.0]], [[0.0]], [[0.0]], [1.0], optimizer_s=-1.0)
    assert _message(e) == "optimizer_s must be finite and >= 0"


@pytest.mark.parametrize("bad", ["compute_s", "variance_s", "codec_s"])
def test_critical_path_names_the_input_of_the_wrong_shape(bad):
    args = {"compute_s": [[1.0]], "variance_s": [[0.0]], "codec_s": [[0.0]]}
    args[bad] = np.zeros((1, 1, 1))
    with pytest.raises(ConfigError) as e:
        critical_path(**args)
    assert _message(e) == f"{bad} must be [steps, ranks], got shape (1, 1, 1)"


def test_one_dimensional_local_times_are_one_rank_per_step():
    """``[T]`` inputs are one rank: the critical rank is that rank at every step."""
    c, v, k = critical_path([1.0, 2.0], [3.0, 4.0], [5.0, 6.0])
    assert c.tolist() == [1.0, 2.0] and v.tolist() == [3.0, 4.0] and k.tolist() == [5.0, 6.0]


def test_critical_rank_is_chosen_by_the_true_sum_of_narrow_integer_times():
    """Rank 0: 200 + 100 = 300, rank 1: 100 + 100 = 200; rank 0 is critical (300 wraps to 44 in
    8 bits, which would pick rank 1)."""
    c, v, k = critical_path(
        np.array([[200, 100]], dtype=np.uint8),
        np.array([[100, 100]], dtype=np.uint8),
        np.zeros((1, 2), dtype=np.uint8),
    )
    assert (float(c[0]), float(v[0]), float(k[0])) == (200.0, 100.0, 0.0)


def test_decode_is_the_largest_rank_of_each_step_not_of_the_run():
    """none: T = c + v + k + comm + d, d = max over ranks per step: steps' decodes [1, 2] and
    [3, 4] give d = 2 then 4."""
    bd = iteration_time_s(
        [[1.0], [1.0]],
        [[0.0], [0.0]],
        [[0.0], [0.0]],
        [1.0, 1.0],
        decode_s=[[1.0, 2.0], [3.0, 4.0]],
    )
    assert bd.decode_s.tolist() == [2.0, 4.0]
    assert bd.step_s.tolist() == [4.0, 6.0]


def test_decode_times_given_as_decimal_text_are_compared_as_numbers():
    """A decode table read as text ("10", "9") is taken as 10 s and 9 s: the largest is 10 (as
    text, "9" > "10")."""
    bd = iteration_time_s(
        [[1.0, 1.0]], [[0.0, 0.0]], [[0.0, 0.0]], [0.0], decode_s=np.array([["10", "9"]])
    )
    assert bd.decode_s.tolist() == [10.0]
    assert bd.step_s.tolist() == [11.0]


# ------------------------------------------------------------------------------------------
