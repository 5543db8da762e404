"""Collectives: registry, accuracy against closed forms, fair-share and contention scenarios.

Closed forms (Hockney α-β-γ; α = route latency, β = 1 / route bandwidth, γ = reduce seconds
per byte, n = allreduce bytes, m_i = allgatherv block of rank i, p' = largest power of two
<= P, L = ⌈log2 P⌉), written out here independently of the simulator:

    allreduce/ring                2(P-1)(α + βn/P) + (P-1)γn/P
    allreduce/recursive_doubling  log2 p'·(α + βn + γn)            [+ 2(α + βn) + γn if P != p']
    allreduce/rabenseifner        2 log2 p'·α + 2(p'-1)/p'·βn + (p'-1)/p'·γn   [+ same fold]
    allreduce/binomial_tree       2L(α + βn) + Lγn
    allreduce/hierarchical        ⌈lg g⌉(2α_i + 2nβ_i + nγ) + ring allreduce over N = P/g leaders
    allgatherv/ring               (P-1)(α + β max m)
    allgatherv/padded             (P-1)(α + 8β) + (P-1)(α + β max m)
    allgatherv/bruck, rec. doubl. Σ_rounds (α + β max_i bytes_i,round)   (lock-step)
    allgatherv/direct (star)      α + β max(max_i (P-1) m_i, max_j Σ_{i≠j} m_i)   (fair-share bound)
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from simhelpers import BW, LAT, cluster, leaf_spine

from vgcsim.core.cluster import LinkSpec
from vgcsim.core.collectives import COLLECTIVE_KEYS
from vgcsim.core.errors import ConfigError, UnknownNameError
from vgcsim.simulator.collectives import COLLECTIVES, get_schedule, unit_sizes
from vgcsim.simulator.paths.collective import contention_free, run_collective
from vgcsim.simulator.paths.message import run_message
from vgcsim.simulator.paths.plan import Phase
from vgcsim.simulator.topology import build_topology

ALPHA = LAT  # host -> switch -> host: α end to end
BETA = 1.0 / BW
GAMMA = 2e-10
N = 8e6
SIZES = (2, 4, 8, 3, 5, 6, 12)


def test_registry_keys_match_the_shared_vocabulary():
    assert set(COLLECTIVES) == set(COLLECTIVE_KEYS)
    with pytest.raises(UnknownNameError, match="allgatherv/bruck"):
        get_schedule("allgatherv/butterfly", 4)


def _sim(key, p, sizes, *, topo=None, semantics="rendezvous", gamma=0.0, gpn=1, mode="fair"):
    topo = topo or build_topology(cluster(gamma_s_per_byte=gamma), p)
    s = get_schedule(key, p, gpn)
    ph = Phase(np.zeros(p), s, unit_sizes(s, sizes))
    return run_message([ph], topo, semantics=semantics, gamma_s_per_byte=gamma, mode=mode).max()


def _closed_allreduce(key, p, n, gamma):
    a, b, g = ALPHA, BETA, gamma
    q = 1 << (p.bit_length() - 1)
    fold = 0.0 if q == p else 2 * (a + b * n) + g * n
    lg = int(math.log2(q))
    if key == "allreduce/ring":
        return 2 * (p - 1) * (a + b * n / p) + (p - 1) * g * n / p
    if key == "allreduce/recursive_doubling":
        return lg * (a + b * n + g * n) + fold
    if key == "allreduce/rabenseifner":
        return 2 * lg * a + 2 * (q - 1) / q * b * n + (q - 1) / q * g * n + fold
    if key == "allreduce/binomial_tree":
        L = math.ceil(math.log2(p))
        return 2 * L * (a + b * n) + L * g * n
    if key == "allreduce/hierarchical":  # one rank per node on a star: a ring over nodes
        return 2 * (p - 1) * (a + b * n / p) + (p - 1) * g * n / p
    raise AssertionError(key)


@pytest.mark.parametrize("p", SIZES)
@pytest.mark.parametrize("key", [k for k in COLLECTIVE_KEYS if k.startswith("allreduce/")])
def test_allreduce_matches_closed_form(key, p):
    sim = _sim(key, p, N, gamma=GAMMA)
    assert sim == pytest.approx(_closed_allreduce(key, p, N, GAMMA), rel=1e-3)


def _lockstep_bruck(m):
    p = len(m)
    total, d = 0.0, 1
    while d < p:
        c = min(d, p - d)
        worst = max(sum(m[(i + j) % p] for j in range(c)) for i in range(p))
        total += ALPHA + BETA * worst
        d *= 2
    return total


def _lockstep_recursive_doubling(m):
    p = len(m)
    q = 1 << (p.bit_length() - 1)
    r = p - q
    held = [m[v] + (m[q + v] if v < r else 0.0) for v in range(q)]  # after the fold
    total = ALPHA + BETA * max(m[q:]) if r else 0.0
    k = 1
    while k < q:
        total += ALPHA + BETA * max(sum(held[g : g + k]) for g in range(0, q, k))
        k *= 2
    if r:
        total += ALPHA + BETA * max(sum(m) - m[q + v] for v in range(r))
    return total


def _closed_allgatherv(key, m):
    p = len(m)
    if key == "allgatherv/ring":
        return (p - 1) * (ALPHA + BETA * max(m))
    if key == "allgatherv/padded":  # sizes first (one int64 each), then padded blocks
        return (p - 1) * (ALPHA + BETA * 8) + (p - 1) * (ALPHA + BETA * max(m))
    if key == "allgatherv/bruck":
        return _lockstep_bruck(m)
    if key == "allgatherv/recursive_doubling":
        return _lockstep_recursive_doubling(m)
    if key == "allgatherv/direct":
        up = max((p - 1) * x for x in m)
        down = max(sum(m) - x for x in m)
        return ALPHA + BETA * max(up, down)
    if key == "allgatherv/bounded":  # no history: bound 0, then the largest aligned to 8 B
        return (p - 1) * ALPHA + (p - 1) * (ALPHA + BETA * (-(-max(m) // 8) * 8))
    raise AssertionError(key)


def _equal(p):
    return [1e6] * p


def _rising(p):
    return [1e5 * (1 + i) for i in range(p)]


def _one_big(p):
    return [4e6 if i == p // 2 else 1e5 for i in range(p)]


AG_CASES = [(k, p, "equal") for k in COLLECTIVE_KEYS if k.startswith("allgatherv/") for p in SIZES]
# uneven sizes where the closed form is exact (see module doc): ring/padded/direct always,
# bruck and recursive doubling on powers of two with rising sizes, and P = 3, 6, 12 for bruck
AG_CASES += [(k, p, "rising") for k in ("allgatherv/ring", "allgatherv/padded") for p in SIZES]
AG_CASES += [(k, p, "one_big") for k in ("allgatherv/ring", "allgatherv/direct") for p in SIZES]
AG_CASES += [
    (k, p, "rising")
    for k in ("allgatherv/bruck", "allgatherv/recursive_doubling")
    for p in (2, 4, 8)
]
AG_CASES += [("allgatherv/bruck", p, "one_big") for p in (4, 8, 5, 6, 12)]


@pytest.mark.parametrize(("key", "p", "sizes"), AG_CASES)
def test_allgatherv_matches_closed_form(key, p, sizes):
    m = {"equal": _equal, "rising": _rising, "one_big": _one_big}[sizes](p)
    assert _sim(key, p, np.array(m)) == pytest.approx(_closed_allgatherv(key, m), rel=1e-3)


@pytest.mark.parametrize("p", (5, 6, 12))
@pytest.mark.parametrize("key", ("allgatherv/bruck", "allgatherv/recursive_doubling"))
def test_uneven_allgatherv_never_exceeds_the_lockstep_bound(key, p):
    for m in (_rising(p), _one_big(p)):
        assert _sim(key, p, np.array(m)) <= _closed_allgatherv(key, m) * (1 + 1e-9)


@pytest.mark.parametrize("p", (4, 6))
def test_direct_allgatherv_on_a_star_equals_the_fair_share_bound(p):
    for m in (_equal(p), _one_big(p)):
        bound = _closed_allgatherv("allgatherv/direct", m)
        assert _sim("allgatherv/direct", p, np.array(m)) == pytest.approx(bound, rel=1e-3)


@pytest.mark.parametrize(("g", "nodes"), [(4, 3), (8, 2), (2, 5)])
def test_hierarchical_allreduce_matches_closed_form(g, nodes):
    intra = LinkSpec("nvlink", 20 * BW, 1e-6)
    cl = cluster({"kind": "hierarchical"}, intra=intra, gpus_per_node=g, gamma_s_per_byte=GAMMA)
    topo = build_topology(cl, g * nodes)
    sim = _sim("allreduce/hierarchical", g * nodes, N, topo=topo, gpn=g, gamma=GAMMA)
    a_i, b_i = 1e-6, 1 / (20 * BW)
    a_e = 1e-6 + LAT  # leader -> node switch -> top switch -> node switch -> leader
    lg = math.ceil(math.log2(g))
    ring = 2 * (nodes - 1) * (a_e + BETA * N / nodes) + (nodes - 1) * GAMMA * N / nodes
    closed = lg * (2 * a_i + 2 * b_i * N + GAMMA * N) + ring
    assert sim == pytest.approx(closed, rel=1e-3)


def test_hierarchical_beats_flat_ring_with_fast_intra_node_links():
    g = 8
    intra = LinkSpec("nvlink", 100 * BW, 1e-6)
    topo = build_topology(cluster({"kind": "hierarchical"}, intra=intra, gpus_per_node=g), 16)
    hier = _sim("allreduce/hierarchical", 16, N, topo=topo, gpn=g)
    flat = _sim("allreduce/ring", 16, N, topo=topo)
    assert hier < 0.7 * flat


@pytest.mark.parametrize("ratio", (2.0, 4.0))
def test_oversubscribed_leaf_spine_slows_spine_crossing_ring_by_the_ratio(ratio):
    p, h = 8, 4

    def ring_time(r):
        spec = {
            "kind": "leaf_spine",
            "hosts_per_leaf": h,
            "oversubscription": r,
            "placement": "spread",
        }
        topo = build_topology(cluster(spec, latency_s=0.0), p)
        return _sim("allreduce/ring", p, N, topo=topo)

    # every hop crosses the spine; the 4 flows leaving a leaf share h*B/r of uplink: B/r each
    assert ring_time(ratio) / ring_time(1.0) == pytest.approx(ratio, rel=1e-3)
    assert ring_time(1.0) == pytest.approx(2 * (p - 1) * N / p * BETA, rel=1e-9)


@pytest.mark.parametrize("semantics", ("eager", "rendezvous"))
@pytest.mark.parametrize("p", (4, 6, 8))
@pytest.mark.parametrize("key", COLLECTIVE_KEYS)
def test_fast_path_is_identical_where_contention_free(key, p, semantics):
    topo = build_topology(cluster(gamma_s_per_byte=GAMMA), p)
    s = get_schedule(key, p)
    rng = np.random.default_rng(p)
    sizes = N if s.allreduce else rng.uniform(1e4, 1e6, p)
    ready = rng.uniform(0, 1e-3, p)
    ph = Phase(ready, s, unit_sizes(s, sizes))
    msg = run_message([ph], topo, semantics=semantics, gamma_s_per_byte=GAMMA)
    verdict = contention_free([s], topo)
    if verdict is None:
        assert key == "allgatherv/direct"
        return
    fast = run_collective(
        [ph],
        topo,
        semantics=semantics,
        gamma_s_per_byte=GAMMA,
        check_overlap=semantics == "eager" and verdict == "dst",
    )
    if fast is None:  # overlapping arrivals detected: the message level is the answer
        assert semantics == "eager" and verdict == "dst"
        return
    np.testing.assert_allclose(fast, msg, rtol=1e-12, atol=0)


def test_fifo_mode_is_slower_than_fair_sharing_for_direct_allgatherv_uneven():
    p = 4
    m = np.array(_rising(p))
    assert _sim("allgatherv/direct", p, m, mode="fifo") >= _sim("allgatherv/direct", p, m) * (
        1 - 1e-9
    )


def test_padded_size_rounds_are_the_ring_allgather_of_the_8_byte_sizes():
    """allgatherv/padded starts with a ring allgather of the 8-byte block sizes (the module
    docstring; gloo's ring sends to the right neighbour): its first P − 1 rounds end, on every
    rank, when allgatherv/ring's rounds of P 8-byte blocks end. On a 3-spine leaf-spine the
    spine of each flow is hashed from (src, dst), so a ring the other way round takes other
    spines and, here, other times."""
    p = 8
    topo = build_topology(cluster(leaf_spine(2, spines=3, routing="hash")), p)

    def round_ends(key, blocks):
        schedule = get_schedule(key, p)
        spans = []
        ph = Phase(np.zeros(p), schedule, unit_sizes(schedule, blocks), key)
        run_message([ph], topo, spans=spans)
        return {(s.rank, s.name.split()[-1]): s.end_s for s in spans if " r" in s.name}

    padded = round_ends("allgatherv/padded", np.full(p, 1e6))
    ring = round_ends("allgatherv/ring", np.full(p, 8.0))
    assert len(ring) == p * (p - 1)
    for where, end in ring.items():
        assert padded[where] == end, where


def test_host_time_by_hand_at_one_second_a_byte():
    """host_time_s of the padded allgatherv, δ·(½·P·m_max + ½·Σ m) on every rank: blocks of
    1, 2, 3 and 4 B at δ = 1 s/B: the backend's copy of the 4 × 4 = 16 padded bytes and the
    copy out of the 10 real ones, ½·16 + ½·10 = 13 s; without the real sizes, every block
    full: 16 s; per step, one value per row of units (doubled blocks: ½·32 + ½·20 = 26 s);
    δ = 0 and no table, or a schedule that is not padded: 0."""
    from vgcsim.simulator.collectives import host_time_s

    s = get_schedule("allgatherv/padded", 4)
    units = unit_sizes(s, np.array([1.0, 2.0, 3.0, 4.0]))
    assert host_time_s(s, units, 1.0, copied_bytes=10.0) == 13.0
    assert host_time_s(s, units, 1.0) == 16.0
    two = np.stack((units, 2 * units))
    assert host_time_s(s, two, 1.0, copied_bytes=np.array([10.0, 20.0])).tolist() == [13.0, 26.0]
    assert host_time_s(s, units, 0.0) == 0.0
    assert host_time_s(s, two, 0.0).tolist() == [0.0, 0.0]
    ring = get_schedule("allgatherv/ring", 4)
    assert host_time_s(ring, unit_sizes(ring, np.array([1.0, 2.0, 3.0, 4.0])), 1.0) == 0.0


@pytest.mark.parametrize(("share", "expected"), [(0.0, 10.0), (0.25, 11.5), (1.0, 16.0)])
def test_host_time_by_hand_with_a_padded_share(share, expected):
    """δ·(s·P·m_max + (1 − s)·Σ m) at δ = 1 s/B, blocks of 1, 2, 3 and 4 B: 16 padded bytes,
    10 real ones; s = ¼: 4 + 7.5 = 11.5 s. Full blocks pay 16 s whatever s."""
    from vgcsim.simulator.collectives import host_time_s

    s = get_schedule("allgatherv/padded", 4)
    units = unit_sizes(s, np.array([1.0, 2.0, 3.0, 4.0]))
    assert host_time_s(s, units, 1.0, copied_bytes=10.0, padded_share=share) == expected
    assert host_time_s(s, units, 1.0, padded_share=share) == 16.0


def test_doubled_units_work_along_the_last_axis_of_stacked_rounds():
    """Two stacked rows of units [1, 2, 3] and [4, 5, 6]: each row doubled on its own, and each
    row's running sums after a leading 0 (by hand), not one flattened sequence."""
    from vgcsim.simulator.collectives import doubled_units

    doubled, sums = doubled_units(np.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]))
    assert doubled.tolist() == [[1, 2, 3, 1, 2, 3], [4, 5, 6, 4, 5, 6]]
    assert sums.tolist() == [[0, 1, 3, 6, 7, 9, 12], [0, 4, 9, 15, 19, 24, 30]]


@pytest.mark.parametrize("key", sorted(COLLECTIVE_KEYS))
def test_flow_count_is_the_built_schedules_number_of_flows(key):
    """flow_count (what memory estimates use, without building a schedule) equals the flows
    of the schedule built for every P up to 40, powers of two and not, and 1 to 8 GPUs per
    node (hierarchical)."""
    from vgcsim.simulator.collectives import flow_count

    for p in [*range(1, 41), 64, 100]:
        for gpn in (1, 3, 4, 8):
            built = sum(len(r.src) for r in get_schedule(key, p, gpn).rounds)
            assert flow_count(key, p, gpn) == built, (p, gpn)


# Collective schedules against closed forms the cost models also use: the key a schedule
# names, its kind (allreduce or allgatherv, which decides how unit sizes are read), its unit
# count, its number of rounds (the latency term of each algorithm) and the bytes it sends in
# all (the bandwidth term). The symbolic delivery checks live in test_schedule_delivery.py.

WORLD_SIZES = (1, 2, 3, 4, 5, 6, 8)


@pytest.mark.parametrize("key", sorted(COLLECTIVE_KEYS))
@pytest.mark.parametrize("p", WORLD_SIZES)
def test_schedule_names_its_collective_and_kind(key, p):
    """Reference: the registry key. A schedule carries the key it was built for (error
    messages and result rows name it), and its kind is a bool equal to the key's prefix."""
    s = COLLECTIVES[key](p, 2)
    assert s.key == key
    assert s.allreduce is key.startswith("allreduce/")


@pytest.mark.parametrize("key", sorted(k for k in COLLECTIVE_KEYS if k.startswith("allgatherv/")))
@pytest.mark.parametrize("p", (1, 2, 3))
def test_allgatherv_refuses_a_wrong_number_of_equal_blocks(key, p):
    """Reference: the allgatherv contract, one block size per rank. P + 1 equal sizes are
    refused with an error naming the key (an allreduce would accept equal sizes)."""
    s = COLLECTIVES[key](p, 1)
    with pytest.raises(ConfigError, match=key):
        unit_sizes(s, np.full(p + 1, 3.0))


@pytest.mark.parametrize("key", sorted(COLLECTIVE_KEYS))
@pytest.mark.parametrize("p", WORLD_SIZES)
def test_unit_sizes_have_one_entry_per_unit(key, p):
    """Reference: n_units, the length every consumer of unit sizes indexes by; padded
    allgatherv has P blocks plus one size header (P + 1 units)."""
    s = COLLECTIVES[key](p, 2)
    sizes = 1.0 if s.allreduce else np.arange(1.0, p + 1.0)
    assert unit_sizes(s, sizes).shape == (s.n_units,)
    if key == "allgatherv/padded":
        assert s.n_units == p + 1


def _log2_ceil(p: int) -> int:
    return math.ceil(math.log2(p)) if p > 1 else 0


@pytest.mark.parametrize("p", (1, 2, 3, 4, 5, 7, 8, 16))
def test_round_counts_match_the_latency_terms(p):
    """Reference: the α terms of the closed forms (Thakur, Rabenseifner, Gropp 2005):
    binomial tree 2⌈log2 P⌉ rounds; recursive doubling log2 q rounds plus a fold and an
    unfold when P is not a power of two (q = largest power of two ≤ P); Rabenseifner
    2·log2 q plus the same fold and unfold. No round is empty."""
    q = 1 << (p.bit_length() - 1)
    extra = 2 if p != q else 0
    want = {
        "allreduce/binomial_tree": 2 * _log2_ceil(p),
        "allreduce/recursive_doubling": int(math.log2(q)) + extra,
        "allreduce/rabenseifner": 2 * int(math.log2(q)) + extra,
    }
    for key, n in want.items():
        s = COLLECTIVES[key](p, 1)
        assert len(s.rounds) == n, key
        assert all(len(r.src) > 0 for r in s.rounds), key


@pytest.mark.parametrize(("p", "g"), [(6, 3), (7, 3), (8, 4), (12, 4), (10, 4), (5, 2)])
def test_hierarchical_total_bytes_match_the_closed_form(p, g):
    """Reference: hand count with buffer n = 1 byte. Every non-leader sends its buffer once
    up the tree and receives it once down: 2·(P − N)·n; the leaders' ring allreduce sends
    2·(N − 1)·n in all (N = ⌈P / g⌉ nodes). Each non-leader receives exactly one broadcast
    copy and no leader receives one."""
    s = COLLECTIVES["allreduce/hierarchical"](p, g)
    nodes = -(-p // g)
    units = unit_sizes(s, 1.0)
    total = sum(float(b.sum()) for b in s.round_bytes(units))
    assert total == pytest.approx(2 * (p - nodes) + 2 * (nodes - 1))
    bcast = [r for r in s.rounds if not r.reduce and np.all(r.dst % g != 0)]
    got = sorted(int(d) for r in bcast for d in r.dst)
    assert got == [i for i in range(p) if i % g != 0]
