"""vgcsim.core.bounded.bounded_rounds worked by hand at its edges: int64 results, exchanges
without ranks, a message exactly at an unaligned first bound, and the 16-exchange window
sliding past the oldest message."""

from __future__ import annotations

import numpy as np

from vgcsim.core.bounded import bounded_rounds


def test_bounds_and_fallback_blocks_are_int64_arrays_of_one_entry_per_exchange():
    bound, extra = bounded_rounds([[100, 40], [90, 90]], first_bound_bytes=16)
    assert bound.dtype == np.int64 and extra.dtype == np.int64
    assert bound.shape == (2,) and extra.shape == (2,)


def test_exchanges_without_ranks_send_nothing():
    # no rank: the largest message is 0 bytes, which never exceeds a bound; the next bound is
    # align(⌈0 · 1.1⌉) = 0
    bound, extra = bounded_rounds(np.zeros((3, 0), dtype=np.int64))
    assert (bound.tolist(), extra.tolist()) == ([0, 0, 0], [0, 0, 0])
    bound, extra = bounded_rounds([])  # one exchange, no rank
    assert (bound.tolist(), extra.tolist()) == ([0], [0])


def test_a_message_exactly_at_the_bound_needs_no_fallback_round():
    # an unaligned first bound of 12 bytes: a 12-byte message fits; a 13-byte one sends
    # align(13) − 12 = 16 − 12 = 4 bytes in the fallback round
    bound, extra = bounded_rounds([12, 5], first_bound_bytes=12)
    assert (bound.tolist(), extra.tolist()) == ([12], [0])
    bound, extra = bounded_rounds([13, 5], first_bound_bytes=12)
    assert (bound.tolist(), extra.tolist()) == ([12], [4])


def test_the_bound_forgets_the_exchange_sixteen_back():
    # largest messages: four of 1000 B, then fourteen of 100 B (the other rank sends less)
    messages = [[1000, 3]] * 4 + [[100, 7]] * 14
    bound, extra = bounded_rounds(messages)
    # t0: bound 0, fallback align(1000) − 0 = 1000.
    # t1..t16: the window holds all four 1000s; index ⌊0.75·n⌋ (clipped to n − 1) of the
    #   sorted window is the 4th largest (n ≥ 4) or the largest (n < 4): 1000 · 1.1 = 1100,
    #   aligned 1104; every later message fits.
    # t17: the window is exchanges 1..16: three 1000s and thirteen 100s, index 12 of 16 is
    #   100: 110 → 112.
    assert bound.tolist() == [0] + [1104] * 16 + [112]
    assert extra.tolist() == [1000] + [0] * 17
