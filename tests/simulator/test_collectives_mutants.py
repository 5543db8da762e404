"""Collective schedules against closed forms the cost models also use: the key a schedule
names, its kind (allreduce or allgatherv, which decides how unit sizes are read), its unit
count, its number of rounds (the latency term of each algorithm) and the bytes it sends in
all (the bandwidth term). The symbolic delivery checks live in test_schedule_delivery.py."""

from __future__ import annotations

import math

import numpy as np
import pytest
from vgcsim.simulator.collectives import COLLECTIVES, unit_sizes

from vgcsim.core.collectives import COLLECTIVE_KEYS
from vgcsim.core.errors import ConfigError

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
