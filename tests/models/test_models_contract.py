"""Iteration, crossover and scenario pieces against hand-worked numbers and documented texts.

Each expected number is worked out here from the formula in the function's docstring
(``vgcsim.models.iteration.bucketed_step_time_s``, ``vgcsim.models.crossover``), not read
back from the implementation.
"""

from __future__ import annotations

import numpy as np
import pytest
from modelhelpers import star_cluster

from vgcsim.core.cluster import ClusterSpec, LinkSpec, get_device
from vgcsim.core.errors import ConfigError
from vgcsim.models.crossover import crossover_density, crossover_payload_bytes
from vgcsim.models.iteration import bucketed_step_time_s
from vgcsim.models.scenario import PAPER_NET_SPECS, method_from_trace

# -- bucketed overlap ----------------------------------------------------------------------


def _two_buckets(**kw):
    # critical rank: c = 1, v = 0.5, k = 0.25 (rank 0; rank 1 is faster); f = 1/3
    return bucketed_step_time_s(
        [[1.0, 0.5]],
        [[0.5, 0.5]],
        [[0.25, 0.0]],
        [[0.01, 0.01]],
        [0.5, 1.0],
        forward_fraction=1 / 3,
        **kw,
    )


def test_bucketed_decode_longer_than_the_last_collective_ends_after_the_whole_local_work():
    # ready_1 = 1/3 + 0.5·(2/3 + 0.75) = 1.04167, end_1 = 1.05167; dec_1 = max(end_1,
    # c + v + k = 1.75) + 0.5·d = 1.95 (d = 0.4); end_2 = max(1.75, end_1) + 0.01 = 1.76;
    # dec_2 = max(1.76, 1.95) + 0.5·0.4 = 2.15; T = dec_2 + o = 2.2 = c + v + k + d + o
    out = _two_buckets(decode_s=[[0.4, 0.1]], optimizer_s=[0.05])
    assert out.step_s.tolist() == pytest.approx([2.2], rel=1e-12)
    assert out.step_s.dtype == np.float64
    # the breakdown is the critical rank's, with the largest decode and the optimizer step
    assert out.compute_s.tolist() == [1.0] and out.variance_s.tolist() == [0.5]
    assert out.codec_s.tolist() == [0.25]
    assert out.decode_s.tolist() == [0.4] and out.optimizer_s.tolist() == [0.05]
    assert out.comm_s.tolist() == pytest.approx([0.02])


def test_bucketed_without_decode_is_the_later_of_local_work_and_the_last_collective():
    # d = 0: T = max(c + v + k, end_K) + o = max(1.75, 1.76) + 0 = 1.76
    out = _two_buckets()
    assert out.step_s.tolist() == pytest.approx([1.76], rel=1e-12)
    assert out.decode_s.tolist() == [0.0] and out.optimizer_s.tolist() == [0.0]


def test_bucketed_takes_integer_inputs_as_seconds():
    out = bucketed_step_time_s([[2]], [[0]], [[0]], [[1, 1]], [1, 1], forward_fraction=0.5)
    # ready = 1 + 1·1 = 2 for both; end = 3, then 4; T = 4
    assert out.step_s.tolist() == [4.0] and out.comm_s.dtype == np.float64
    assert out.comm_s.tolist() == [2.0]


def test_bucketed_refusals_name_the_argument():
    with pytest.raises(
        ConfigError, match=r"^bucket_comm_s must be \[steps, buckets\], got \(1, 3\)$"
    ):
        bucketed_step_time_s([[1.0]], [[0.0]], [[0.0]], [[0.1, 0.1, 0.1]], [0.5, 1.0])
    with pytest.raises(ConfigError, match=r"^decode_s must be finite and >= 0$"):
        bucketed_step_time_s([[1.0]], [[0.0]], [[0.0]], [[0.1]], [1.0], decode_s=[[-1.0]])
    with pytest.raises(ConfigError, match=r"^optimizer_s must be finite and >= 0$"):
        bucketed_step_time_s([[1.0]], [[0.0]], [[0.0]], [[0.1]], [1.0], optimizer_s=[np.inf])


# -- crossover density ----------------------------------------------------------------------


def test_crossover_density_defaults_to_coo64_against_fp32():
    # α = 0, ring vs ring, P = 4, 4 MB dense: (P−1)·m·β = 2·(P−1)/P·n·β ⇒ m* = 2n/P = 2 MB;
    # N = 8·4e6/32 = 1e6 elements; d* = 8·m*/(64·N) = 0.25 = 1/P
    cl = star_cluster()
    assert crossover_density(4e6, 4, cl) == pytest.approx(0.25, rel=1e-12)
    # 2-byte elements and 32-bit sent entries: N = 2e6, d* = 8·2e6/(32·2e6) = 0.25 as well;
    # 48-bit entries against fp32: 8·2e6/(48·1e6) = 1/3
    assert crossover_density(4e6, 4, cl, bits_per_sent=48.0) == pytest.approx(1 / 3, rel=1e-12)
    assert crossover_density(
        4e6, 4, cl, bits_per_element=16.0, bits_per_sent=32.0
    ) == pytest.approx(0.25, rel=1e-12)


def test_crossover_density_passes_the_cost_options_on():
    # an overhead of 1 ms on a 1 GB/s link, α = 0, P = 4: dense ring 2·(3/4)·4e6 B·1 ns/B =
    # 6 ms, allgatherv (P−1)·m·1 ns/B = 3m ns; the tie gives m* = (6 − 1) ms / 3 ns/B
    cl = star_cluster()
    m = crossover_payload_bytes(4e6, 4, cl, overhead_s=1e-3)
    assert m == pytest.approx(5e-3 / 3e-9, rel=1e-12)
    assert crossover_density(4e6, 4, cl, overhead_s=1e-3) == pytest.approx(
        8 * m / (64 * 1e6), rel=1e-12
    )


# -- the nets and the trace methods of the scenario ------------------------------------------


def test_the_nets_name_their_title_flops_and_source():
    res = PAPER_NET_SPECS["resnet50"]()
    assert (res.name, res.title) == ("resnet50", "ResNet-50 (ImageNet, 224×224)")
    assert res.flops_per_sample == 3 * 2 * 4.09e9
    assert res.source == (
        "layer list of vgcsim.traces.synth (torchvision layout); 4.09 GMAC forward "
        "(torchvision model card) × 2 × 3 for forward+backward"
    )
    vgg = PAPER_NET_SPECS["vgg_like"]()
    assert (vgg.name, vgg.title) == ("vgg_like", "VGG-like (CIFAR-10, 32×32)")
    assert vgg.source == (
        "layer list and FLOP count of vgcsim.traces.synth (the paper's VGG-like CIFAR-10 net)"
    )
    from vgcsim.traces.synth import vgg_like_flops_per_sample

    assert vgg.flops_per_sample == vgg_like_flops_per_sample()


def test_a_recorded_trace_is_named_without_synthetic_in_its_source():
    from vgcsim.traces.io import read_trace

    t = read_trace("tests/data/sample_trace")
    m = method_from_trace(t)
    assert m.source == (
        f"measured from trace {t.name} ({t.primary_encoding}, {t.steps_count} steps, "
        f"{t.workers} workers)"
    )


def test_a_trace_sending_under_one_bit_per_step_still_has_a_ratio(tmp_path):
    # 2 steps × 2 workers × 1 layer of 1000 elements; one payload of 2 bits, the rest 0:
    # mean bits per worker per step = 2/4 = 0.5; dense = 32·1000 bits; ratio 64 000
    from tests.conftest import write_tiny_trace
    from vgcsim.traces.io import read_trace

    bits = np.zeros((2, 2, 1), dtype=np.int64)
    bits[0, 0, 0] = 2
    t = read_trace(write_tiny_trace(tmp_path / "half", bits=bits, numel=(1000,)))
    assert method_from_trace(t).ratio == pytest.approx(32_000 / 0.5, rel=1e-12)


# -- crossover refusals and edges ------------------------------------------------------------


def test_crossover_refusals_name_the_problem_exactly():
    cl = star_cluster()
    with pytest.raises(
        ConfigError, match=r"^a crossover needs at least 2 ranks \(P = 1 does not communicate\)$"
    ):
        crossover_payload_bytes(4e6, 1, cl)
    with pytest.raises(ConfigError, match=r"^dense_bytes must be positive$"):
        crossover_payload_bytes(0.0, 4, cl)
    with pytest.raises(ConfigError, match=r"^decode_s_per_byte must be >= 0$"):
        crossover_payload_bytes(4e6, 4, cl, decode_s_per_byte=-1e-12)
    both = r"^crossover compares an allreduce with an allgatherv$"
    with pytest.raises(ConfigError, match=both):
        crossover_payload_bytes(4e6, 4, cl, allreduce="allgatherv/ring")
    with pytest.raises(ConfigError, match=both):
        crossover_payload_bytes(4e6, 4, cl, allgatherv="allreduce/ring")


def test_a_one_byte_gradient_has_a_finite_crossover_ratio():
    # α = 0, P = 2: ring allreduce of 1 B costs 2·(1/2)·1·β = β; allgatherv (P−1)·m·β = m·β:
    # m* = 1 B, ratio 1/1 = 1 (a payload of one byte ties; it is not "never pays")
    from vgcsim.models.crossover import crossover_ratio

    assert crossover_payload_bytes(1.0, 2, star_cluster()) == pytest.approx(1.0, rel=1e-12)
    assert crossover_ratio(1.0, 2, star_cluster()) == pytest.approx(1.0, rel=1e-12)
    # and half a byte of gradient is still a positive size
    assert crossover_payload_bytes(0.5, 2, star_cluster()) == pytest.approx(0.5, rel=1e-12)


def test_best_rows_keep_the_result_columns_and_a_fresh_index():
    from vgcsim.models.scenario import PaperScenarioConfig, best_rows, paper_scenario

    cfg = PaperScenarioConfig(
        nets=("vgg_like",),
        links=("1GbE",),
        world_sizes=(2, 4),
        allreduce=("ring", "binomial_tree"),
        allgatherv=("ring",),
    )
    df, _ = paper_scenario(cfg)
    best = best_rows(df)
    assert list(best.columns) == list(df.columns)
    assert list(best.index) == list(range(len(best)))


# -- collectives: β ≠ 1 and more leading axes -------------------------------------------------

# α = 1 s, β = 0.5 s/B (2 B/s), γ = 0.5 s/B: a per-byte term written n/β instead of n·β shows
HALF = LinkSpec("half", bandwidth_Bps=2.0, latency_s=1.0, gamma_s_per_byte=0.5)


def test_allreduce_closed_forms_by_hand_with_beta_one_half():
    from vgcsim.models.collectives import COLLECTIVES

    def t(key, sizes):
        return float(COLLECTIVES[key].time_s(np.asarray([sizes], dtype=float), HALF)[0])

    # binomial tree, P = 4, n = 8: ⌈lg 4⌉·(2α + 2n·β + n·γ) = 2·(2 + 8 + 4) = 28
    assert t("allreduce/binomial_tree", [8] * 4) == pytest.approx(28.0, rel=1e-12)
    # recursive doubling, P = 6 (p' = 4), n = 8: lg 4·(α + nβ + nγ) = 2·(1 + 4 + 4) = 18, plus
    # the fold and unfold 2α + 2nβ + nγ = 2 + 8 + 4 = 14: 32
    assert t("allreduce/recursive_doubling", [8] * 6) == pytest.approx(32.0, rel=1e-12)
    # ring, P = 4: 2·3·α + 2·(3/4)·8·β + (3/4)·8·γ = 6 + 6 + 3 = 15
    assert t("allreduce/ring", [8] * 4) == pytest.approx(15.0, rel=1e-12)
    # recursive-doubling allgatherv, P = 3 (p' = 2), sizes 1, 2, 3: fold α + 3β = 2.5; merged
    # blocks [4, 2]: α + 4β = 3; unfold α + (6 − 3)·β = 2.5: 8
    assert t("allgatherv/recursive_doubling", [1, 2, 3]) == pytest.approx(8.0, rel=1e-12)


@pytest.mark.parametrize(
    "key",
    [
        "allreduce/ring",
        "allreduce/recursive_doubling",
        "allreduce/rabenseifner",
        "allreduce/binomial_tree",
        "allreduce/hierarchical",
        "allgatherv/ring",
        "allgatherv/recursive_doubling",
        "allgatherv/bruck",
        "allgatherv/direct",
        "allgatherv/padded",
    ],
)
def test_any_number_of_leading_axes_is_evaluated_as_rows(key):
    # sizes [2 steps, 3 scenarios, P = 5]: each [P] row priced alone gives the same seconds
    from vgcsim.models.collectives import COLLECTIVES

    rng = np.random.default_rng(7)
    sizes = rng.integers(1, 1000, size=(2, 3, 5)).astype(float)
    f = COLLECTIVES[key].time_s
    got = f(sizes, HALF, intra_link=HALF, gpus_per_node=2)
    assert got.shape == (2, 3)
    for i in range(2):
        for j in range(3):
            row = f(sizes[i, j][None, :], HALF, intra_link=HALF, gpus_per_node=2)[0]
            assert got[i, j] == pytest.approx(row, rel=1e-12)


def test_hierarchical_allreduce_defaults_to_one_rank_per_node():
    from vgcsim.models.collectives import allreduce_hierarchical, allreduce_ring

    sizes = np.full((1, 6), 8.0)
    assert allreduce_hierarchical(sizes, HALF)[0] == pytest.approx(
        allreduce_ring(sizes, HALF)[0], rel=1e-12
    )


def test_crossover_on_a_hierarchical_cluster_uses_its_intra_node_link():
    # 4 GPUs per node on the intra link HALF' (α' = 0, β' = 0.5 s/B), nodes on α = 0, β = 1 s/B;
    # P = 8, n = 8 B: dense = ⌈lg 4⌉·2n·β' + ring over 2 nodes 2·(1/2)·n·β = 16 + 8 = 24 s;
    # allgatherv ring (P−1)·m·β = 7m: m* = 24/7 B
    intra = LinkSpec("intra", bandwidth_Bps=2.0, latency_s=0.0)
    cl = ClusterSpec(
        name="h",
        topology={"kind": "hierarchical"},
        link=LinkSpec("inter", bandwidth_Bps=1.0, latency_s=0.0),
        intra_link=intra,
        gpus_per_node=4,
        device=get_device("V100"),
    )
    m = crossover_payload_bytes(8.0, 8, cl, allreduce="allreduce/hierarchical")
    assert m == pytest.approx(24.0 / 7.0, rel=1e-12)


def test_hierarchical_allreduce_with_a_partly_filled_last_node():
    # P = 6 on nodes of 4: ⌈6/4⌉ = 2 nodes. Intra: ⌈lg 4⌉·(2α + 2n·β + n·γ) = 2·(2 + 8 + 4) =
    # 28; ring over 2 nodes: 2α + 2·(1/2)·n·β + (1/2)·n·γ = 2 + 4 + 2 = 8; 36 in all
    from vgcsim.models.collectives import allreduce_hierarchical

    got = allreduce_hierarchical(np.full((1, 6), 8.0), HALF, intra_link=HALF, gpus_per_node=4)
    assert got[0] == pytest.approx(36.0, rel=1e-12)


def test_iteration_takes_integer_communication_times_and_names_a_bad_decode():
    from vgcsim.models.iteration import iteration_time_s

    out = iteration_time_s([[1.0]], [[0.0]], [[0.0]], [2])
    assert out.comm_s.dtype == np.float64 and out.step_s.tolist() == [3.0]
    with pytest.raises(ConfigError, match=r"^decode_s must be finite and >= 0$"):
        iteration_time_s([[1.0]], [[0.0]], [[0.0]], [2.0], decode_s=[[np.nan]])
