"""Closed-form collective models against hand-computed numbers, limits and properties."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vgcsim.core.cluster import LinkSpec, get_cluster
from vgcsim.core.collectives import (
    ALLGATHERV_ALGORITHMS,
    ALLREDUCE_ALGORITHMS,
    COLLECTIVE_KEYS,
    SIZE_HEADER_BYTES,
)
from vgcsim.core.errors import ConfigError, UnknownNameError
from vgcsim.models import collectives as mc
from vgcsim.models.collectives import (
    COLLECTIVES,
    collective_key,
    collective_time_s,
    get_collective,
)

# α = 1 s, β = 1 s/B, γ = 0.5 s/B: hand arithmetic stays exact.
UNIT = LinkSpec("unit", bandwidth_Bps=1.0, latency_s=1.0, gamma_s_per_byte=0.5)
# intra-node: α = 0.5, β = 0.5, γ = 0
FAST = LinkSpec("fast", bandwidth_Bps=2.0, latency_s=0.5)


def t(key, sizes, link=UNIT, **kw):
    return float(COLLECTIVES[key].time_s(np.asarray([sizes], dtype=float), link, **kw)[0])


def test_registry_keys_are_the_shared_vocabulary():
    assert set(COLLECTIVES) == set(COLLECTIVE_KEYS)
    for key, model in COLLECTIVES.items():
        assert key == f"{model.op}/{model.algorithm}"
        doc = model.time_s.__doc__
        assert "Formula" in doc and "Assumptions" in doc and "Source" in doc, key


def test_unknown_names_list_valid_ones():
    with pytest.raises(UnknownNameError, match="recursive_doubling"):
        collective_key("allgatherv", "butterfly")
    with pytest.raises(UnknownNameError, match="allgatherv"):
        collective_key("alltoall", "ring")
    with pytest.raises(UnknownNameError):
        get_collective("allreduce/nccl")


@pytest.mark.parametrize(
    ("key", "sizes", "expected"),
    [
        # 2·3·1 + 2·¾·8 + ¾·8·½
        ("allreduce/ring", [8] * 4, 21.0),
        # lg4·(1 + 8 + 4)
        ("allreduce/recursive_doubling", [8] * 4, 26.0),
        # lg4·13 + (2 + 16 + 4) fold/unfold
        ("allreduce/recursive_doubling", [8] * 6, 48.0),
        # 2·2·1 + 2·¾·8 + ¾·8·½
        ("allreduce/rabenseifner", [8] * 4, 19.0),
        ("allreduce/rabenseifner", [8] * 5, 41.0),
        # ⌈lg P⌉·(2 + 16 + 4)
        ("allreduce/binomial_tree", [8] * 4, 44.0),
        ("allreduce/binomial_tree", [8] * 5, 66.0),
        # allreduce pads to the largest rank
        ("allreduce/ring", [8, 1, 1, 1], 21.0),
        # (P−1)(α + β·max)
        ("allgatherv/ring", [1, 2, 3, 4], 15.0),
        # rounds: max single 4 → 5; max pair (3+4) → 8
        ("allgatherv/recursive_doubling", [1, 2, 3, 4], 13.0),
        # fold 3 → 4; merged [4, 2]: 1+4 → 5; unfold 6−3 → 4
        ("allgatherv/recursive_doubling", [1, 2, 3], 13.0),
        # windows of 1 → 5; windows of 2 (3+4) → 8
        ("allgatherv/bruck", [1, 2, 3, 4], 13.0),
        ("allgatherv/bruck", [1, 2, 3], 8.0),
        # max_i max(3·m_i, 10 − m_i) = 12
        ("allgatherv/direct", [1, 2, 3, 4], 13.0),
        # 3·(1 + 8) + 3·(1 + 4)
        ("allgatherv/padded", [1, 2, 3, 4], 42.0),
    ],
)
def test_hand_computed(key, sizes, expected):
    assert t(key, sizes) == pytest.approx(expected)


def test_hierarchical_by_hand():
    # g = 4 → 2 levels: 2·(2·0.5 + 2·8·0.5) = 18 intra; 2 nodes ring: 2 + 8 + 2 = 12
    assert t("allreduce/hierarchical", [8] * 8, intra_link=FAST, gpus_per_node=4) == pytest.approx(
        30.0
    )
    # one rank per node = flat ring
    assert t("allreduce/hierarchical", [8] * 4, gpus_per_node=1) == t("allreduce/ring", [8] * 4)
    # without an intra link the inter link is used inside nodes as well
    assert t("allreduce/hierarchical", [8] * 2, gpus_per_node=2) == pytest.approx(2 * 1 + 2 * 8 + 4)


@pytest.mark.parametrize("key", COLLECTIVE_KEYS)
def test_one_rank_costs_nothing(key):
    assert t(key, [123.0], gpus_per_node=4) == 0.0


@pytest.mark.parametrize("key", COLLECTIVE_KEYS)
def test_zero_latency_is_linear_in_size(key):
    link = dataclasses.replace(UNIT, latency_s=0.0)
    sizes = np.array([3.0, 5.0, 7.0, 1.0, 2.0])
    zero = t(key, 0 * sizes, link)
    a = t(key, sizes, link) - zero
    assert a > 0
    assert t(key, 2 * sizes, link) - zero == pytest.approx(2 * a)
    # with α = 0 only the padded variant's size header costs anything at zero payload
    assert zero == (4 * SIZE_HEADER_BYTES if key == "allgatherv/padded" else 0.0)


def test_equal_sizes_ring_equals_padded_data_phase():
    for p in (2, 3, 8, 33):
        sizes = [1000.0] * p
        exchange = (p - 1) * (UNIT.latency_s + SIZE_HEADER_BYTES / UNIT.bandwidth_Bps)
        assert t("allgatherv/padded", sizes) - exchange == pytest.approx(
            t("allgatherv/ring", sizes)
        )


def test_equal_sizes_ring_matches_textbook_allgather():
    # (P−1)α + (P−1)/P · (P·m) · β
    p, m = 16, 1e6
    assert t("allgatherv/ring", [m] * p) == pytest.approx((p - 1) + (p - 1) / p * p * m)


def test_vectorized_over_steps_equals_row_by_row():
    rng = np.random.default_rng(0)
    sizes = rng.integers(0, 10_000, size=(7, 13)).astype(float)
    for key, model in COLLECTIVES.items():
        whole = model.time_s(sizes, UNIT, intra_link=FAST, gpus_per_node=4)
        rows = [
            float(model.time_s(sizes[i : i + 1], UNIT, intra_link=FAST, gpus_per_node=4)[0])
            for i in range(7)
        ]
        assert whole.shape == (7,)
        assert np.allclose(whole, rows), key


@pytest.mark.parametrize(
    "key",
    [
        "allreduce/ring",
        "allreduce/binomial_tree",
        "allreduce/hierarchical",
        "allgatherv/ring",
        "allgatherv/bruck",
        "allgatherv/direct",
        "allgatherv/padded",
    ],
)
def test_monotone_in_world_size_for_equal_payloads(key):
    # (recursive doubling is not: P = 2^k + 1 pays a fold and an unfold of almost everything)
    times = [t(key, [1000.0] * p, intra_link=FAST, gpus_per_node=4) for p in range(1, 70)]
    assert all(b >= a - 1e-9 for a, b in zip(times, times[1:], strict=False)), key


@settings(max_examples=60, deadline=None)
@given(
    sizes=st.lists(st.integers(0, 10**6), min_size=1, max_size=40),
    bump=st.integers(0, 10**5),
    who=st.integers(0, 1000),
)
def test_properties_uneven_sizes(sizes, bump, who):
    s = np.array(sizes, dtype=float)
    p = len(s)
    total = s.sum()
    grown = s.copy()
    grown[who % p] += bump
    for key in COLLECTIVE_KEYS:
        base = t(key, s)
        # monotone in any rank's size
        assert t(key, grown) >= base - 1e-9 * max(1.0, base), key
        if key.startswith("allgatherv/") and p > 1:
            # every rank must receive everything it lacks
            assert base >= (total - s.min()) / UNIT.bandwidth_Bps - 1e-6, key
    assert t("allgatherv/padded", s) >= t("allgatherv/ring", s)
    # the largest payload sets the lock-step ring
    assert t("allgatherv/ring", s) == pytest.approx((p - 1) * (1 + s.max()))


def test_recursive_doubling_fold_makes_non_powers_of_two_expensive():
    assert t("allgatherv/recursive_doubling", [1.0] * 9) > t(
        "allgatherv/recursive_doubling", [1.0] * 16
    )


def test_cluster_convenience_uses_the_cluster_links():
    c = get_cluster("dgx1-IB-EDR")
    sizes = np.full((1, 64), 1e8)
    direct = COLLECTIVES["allreduce/hierarchical"].time_s(
        sizes, c.link, intra_link=c.intra_link, gpus_per_node=8
    )
    assert collective_time_s("allreduce/hierarchical", sizes, c) == pytest.approx(direct)
    # NVLink inside nodes beats a flat ring over IB at 8 ranks per node
    assert direct[0] < collective_time_s("allreduce/ring", sizes, c)[0] * 2


# Hand-worked checks of the collectives model: expected numbers from the formulas in its docstrings
# on small, exact inputs, documented contracts and one-line error messages.

UNIT_AB = LinkSpec("unit", bandwidth_Bps=1.0, latency_s=1.0)  # α = 1 s, β = 1 s/B


def _message(exc_info) -> str:
    return str(exc_info.value)


@pytest.mark.parametrize(
    ("sizes", "message"),
    [
        (5.0, "collective sizes must have a rank axis (last axis = P ranks)"),
        (np.zeros((2, 0)), "collective needs at least one rank"),
        ([3.0, -1.0], "payload sizes must be non-negative"),
    ],
)
def test_collective_sizes_are_refused_with_their_exact_message(sizes, message):
    """Every collective checks its sizes: a scalar (no rank axis), no rank, a negative size."""
    with pytest.raises(ConfigError) as e:
        mc.allgatherv_ring(sizes, UNIT_AB)
    assert _message(e) == message


def test_narrow_unsigned_sizes_are_byte_counts_not_wrapped_integers():
    """Direct allgatherv, T = α + β·max_i max((P−1)·m_i, M − m_i): sizes [100, 0, 0, 0] as uint8
    give (P−1)·m_0 = 300 B (which would wrap to 44 in 8 bits), so T = 1 + 300 s on the unit
    link."""
    sizes = np.array([100, 0, 0, 0], dtype=np.uint8)
    assert float(mc.allgatherv_direct(sizes, UNIT_AB)) == 301.0


def test_unknown_collective_operation_and_key_messages():
    with pytest.raises(UnknownNameError) as e:
        mc.collective_key("scatter", "ring")
    assert (
        _message(e)
        == "unknown collective operation 'scatter'; valid: allgatherv, allreduce, sparse_allreduce"
    )
    keys = sorted(
        [f"allreduce/{a}" for a in ALLREDUCE_ALGORITHMS]
        + [f"allgatherv/{a}" for a in ALLGATHERV_ALGORITHMS]
        + ["sparse_allreduce/recursive_doubling"]
    )
    with pytest.raises(UnknownNameError) as e:
        mc.get_collective("allreduce/mesh")
    assert _message(e) == f"unknown collective 'allreduce/mesh'; valid: {', '.join(keys)}"


def test_size_exchange_refuses_zero_ranks_with_its_message():
    with pytest.raises(ConfigError) as e:
        mc.size_exchange_time_s(0, UNIT_AB)
    assert _message(e) == "world size must be >= 1, got 0"


def test_padded_host_time_looks_delta_up_step_by_step():
    """T_host = δ(P·m_max)·Σ m per step, δ from the table: step 0 gathers 2·1 = 2 B (below the
    first point: its value, 1/4 s/B) and copies 2 B → 0.5 s; step 1 gathers 2·10 = 20 B
    (≥ 16: 1/2 s/B) and copies 20 B → 10 s. Each step's own m_max, not the largest over all
    steps."""
    link = LinkSpec(
        "t",
        bandwidth_Bps=1.0,
        latency_s=1.0,
        allgatherv_host_s_per_byte=0.125,
        allgatherv_host_s_per_byte_table=((4.0, 0.25), (16.0, 0.5)),
    )
    got = mc.allgatherv_host_time_s(np.array([[1.0, 1.0], [10.0, 10.0]]), link)
    assert got.tolist() == [0.5, 10.0]


# ------------------------------------------------------------------------------------------
