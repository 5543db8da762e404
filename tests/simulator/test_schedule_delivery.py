"""What every collective schedule delivers, by running it symbolically (no timing at all).

The simulator times schedules; these tests check their *contents*: each rank's buffer is a
set of symbols, each round moves symbols along its flows, and at the end the result must be
what the collective promises.

* allgatherv: rank i starts with block i; a rank may send only blocks it holds; at the end
  every rank holds all P blocks (``padded`` also: all P size headers, forwarded ring-wise).
* allreduce: rank i starts with contribution {i} in every chunk; a reducing round adds the
  received contributions, which must not overlap what the receiver already has (that would
  count a gradient twice); a non-reducing round copies and may carry only fully reduced
  chunks; at the end every rank holds every chunk fully reduced. Ring and Rabenseifner also
  pass through a reduce-scatter: after their last reducing round the fully reduced chunks
  are spread one per rank, covering every chunk.

Which units a flow carries is read from the bytes the engine would send
(``Schedule.round_bytes``) with unit u weighing 2^u bytes, so the bytes decode to exactly the
set of units, including any reordering (``unit_order``) and circular ranges.
"""

from __future__ import annotations

import numpy as np
import pytest

from vgcsim.core.collectives import COLLECTIVE_KEYS
from vgcsim.simulator.collectives import COLLECTIVES, get_schedule

WORLD_SIZES = (1, 2, 3, 4, 5, 6, 7, 8, 12, 13, 16)
# from the shared vocabulary, so that a key missing from the simulator's registry fails here
ALLGATHERV = sorted(k for k in COLLECTIVE_KEYS if k.startswith("allgatherv/"))
ALLREDUCE = sorted(k for k in COLLECTIVE_KEYS if k.startswith("allreduce/"))
SPARSE = sorted(k for k in COLLECTIVE_KEYS if k.startswith("sparse_allreduce/"))
RS_THEN_AG = ("allreduce/ring", "allreduce/rabenseifner")
HIERARCHICAL_GPN = (1, 2, 3, 4, 8)


def test_every_collective_key_is_covered():
    assert (
        set(ALLGATHERV) | set(ALLREDUCE) | set(SPARSE) == set(COLLECTIVE_KEYS) == set(COLLECTIVES)
    )
    assert len(ALLGATHERV) >= 5 and len(ALLREDUCE) >= 5


def _decoded_rounds(schedule):
    """Per round: (src, dst, set of unit indices, reduce) of every flow."""
    weights = 2.0 ** np.arange(schedule.n_units)
    out = []
    for rnd, nbytes in zip(schedule.rounds, schedule.round_bytes(weights), strict=True):
        flows = []
        for src, dst, b in zip(rnd.src.tolist(), rnd.dst.tolist(), nbytes.tolist(), strict=True):
            mask = int(round(b))
            assert mask == b, "unit bytes must decode exactly"
            units = {u for u in range(schedule.n_units) if mask >> u & 1}
            flows.append((src, dst, units))
        out.append((flows, bool(rnd.reduce)))
    return out


def run_allgatherv(schedule):
    """Symbolic allgatherv; returns each rank's blocks and size headers at the end."""
    p = schedule.world_size
    header_unit = p if schedule.pad else None
    blocks = [{i} for i in range(p)]
    headers = [{i} for i in range(p)]
    last_header = list(range(p))  # the header a rank forwards next (ring store-and-forward)
    for flows, reduce in _decoded_rounds(schedule):
        assert not reduce, "an allgatherv never reduces"
        snap_blocks = [set(b) for b in blocks]
        snap_last = list(last_header)
        for src, dst, units in flows:
            assert 0 <= src < p and 0 <= dst < p and src != dst
            data = units - {header_unit}
            if schedule.bounded:  # unit P + i: the bytes of rank i's message past the bound
                data = {u % p for u in data}
            missing = data - snap_blocks[src]
            assert not missing, f"rank {src} sends blocks {sorted(missing)} it does not hold"
            blocks[dst] |= data
            if header_unit in units:
                h = snap_last[src]
                assert h in headers[src]
                headers[dst].add(h)
                last_header[dst] = h
    return blocks, headers


def run_allreduce(schedule):
    """Symbolic allreduce; returns (final contributions [rank][unit], reduce-scatter state).

    The reduce-scatter state is the contributions right after the last reducing round.
    """
    p, n = schedule.world_size, schedule.n_units
    everyone = frozenset(range(p))
    have = [[frozenset({i}) for _ in range(n)] for i in range(p)]
    rounds = _decoded_rounds(schedule)
    last_reduce = max((k for k, (_, red) in enumerate(rounds) if red), default=-1)
    after_rs = [list(row) for row in have]
    for k, (flows, reduce) in enumerate(rounds):
        snap = [list(row) for row in have]
        for src, dst, units in flows:
            assert 0 <= src < p and 0 <= dst < p and src != dst
            for u in units:
                data = snap[src][u]
                if reduce:
                    twice = data & have[dst][u]
                    assert not twice, (
                        f"round {k}: rank {dst} would add contributions {sorted(twice)} to "
                        f"chunk {u} a second time"
                    )
                    have[dst][u] = have[dst][u] | data
                else:
                    assert data == everyone, (
                        f"round {k}: rank {src} copies chunk {u} to rank {dst} before it is "
                        f"fully reduced (has {sorted(data)})"
                    )
                    have[dst][u] = data
        if k == last_reduce:
            after_rs = [list(row) for row in have]
    return have, after_rs


def _gpns(key):
    return HIERARCHICAL_GPN if key == "allreduce/hierarchical" else (1,)


@pytest.mark.parametrize("p", WORLD_SIZES)
@pytest.mark.parametrize("key", ALLGATHERV)
def test_allgatherv_sends_only_held_blocks_and_every_rank_ends_with_all(key, p):
    s = get_schedule(key, p)
    blocks, headers = run_allgatherv(s)
    for rank in range(p):
        assert blocks[rank] == set(range(p)), f"rank {rank} ends with {sorted(blocks[rank])}"
        if s.pad:
            assert headers[rank] == set(range(p)), f"rank {rank} lacks size headers"


@pytest.mark.parametrize("p", WORLD_SIZES)
@pytest.mark.parametrize("key", ALLREDUCE)
def test_allreduce_counts_each_gradient_once_and_every_rank_ends_with_the_full_sum(key, p):
    for gpn in _gpns(key):
        s = get_schedule(key, p, gpn)
        have, _ = run_allreduce(s)
        full = frozenset(range(p))
        for rank in range(p):
            for u in range(s.n_units):
                assert have[rank][u] == full, (
                    f"gpn={gpn}: rank {rank} chunk {u} has contributions {sorted(have[rank][u])}"
                )


@pytest.mark.parametrize("p", tuple(q for q in WORLD_SIZES if q > 1))
@pytest.mark.parametrize("key", RS_THEN_AG)
def test_reduce_scatter_phase_leaves_each_rank_its_fully_reduced_chunk(key, p):
    s = get_schedule(key, p)
    _, after_rs = run_allreduce(s)
    full = frozenset(range(p))
    owned = [[u for u in range(s.n_units) if after_rs[r][u] == full] for r in range(p)]
    # ring: P ranks own one chunk each; Rabenseifner: the p' = 2^⌊log2 P⌋ ranks of the
    # halving own one chunk each (the folded ranks own none)
    q = p if key == "allreduce/ring" else 1 << (p.bit_length() - 1)
    assert s.n_units == q
    assert [len(o) for o in owned] == [1] * q + [0] * (p - q)
    assert sorted(u for o in owned for u in o) == list(range(q))


def test_the_symbolic_run_rejects_a_ring_that_sends_to_the_wrong_neighbour():
    # the checker itself must fail on a broken schedule: ring allgatherv to i - 1
    s = get_schedule("allgatherv/ring", 5)
    broken = type(s)(
        s.key,
        s.world_size,
        tuple(type(r)(r.src, (r.src - 1) % 5, r.lo, r.count, r.reduce) for r in s.rounds),
        s.n_units,
        s.allreduce,
    )
    with pytest.raises(AssertionError, match="does not hold"):
        run_allgatherv(broken)


def test_the_symbolic_run_rejects_a_halving_that_sends_the_kept_half():
    # Rabenseifner at P = 4 where every rank sends the half it keeps: the partner then adds
    # into a half nobody reduces further, so the result misses contributions
    s = get_schedule("allreduce/rabenseifner", 4)
    q = 4
    rounds = list(s.rounds)
    for k, half in ((0, 2), (1, 1)):
        r = rounds[k]
        other = np.where(r.lo % (2 * half) == 0, r.lo + half, r.lo - half)
        rounds[k] = type(r)(r.src, r.dst, other, r.count, r.reduce)
    broken = type(s)(s.key, s.world_size, tuple(rounds), q, s.allreduce)
    with pytest.raises(AssertionError):
        have, after_rs = run_allreduce(broken)
        full = frozenset(range(4))
        assert all(have[r][u] == full for r in range(4) for u in range(q))
