"""The DDP hook's bound rule (vgcsim.core.bounded), worked by hand."""

from __future__ import annotations

import numpy as np

from vgcsim.core.bounded import (
    align_bytes,
    bounded_rounds,
    message_bound_bytes,
    message_header_bytes,
)


def test_header_is_one_int32_total_plus_one_per_layer():
    assert message_header_bytes(1) == 8
    assert message_header_bytes(4) == 20


def test_alignment_rounds_up_to_eight_bytes():
    assert [align_bytes(n) for n in (0, 1, 8, 9, 20)] == [0, 8, 8, 16, 24]


def test_only_the_last_sixteen_messages_set_the_bound():
    # 20 messages: the first four (huge) have left the window; of 16 × 100 B the bound is
    # 100 · 1.1 = 110, aligned 112
    assert message_bound_bytes([10_000] * 4 + [100] * 16) == 112


def test_rounds_of_four_exchanges_by_hand():
    # two ranks; largest messages 100, 90, 130, 60; first bound the aligned 12-byte header
    messages = np.array([[100, 40], [90, 90], [10, 130], [60, 2]])
    bound, extra = bounded_rounds(messages, first_bound_bytes=align_bytes(12))
    # t0: bound 16, 100 > 16: fallback align(100) − 16 = 88
    # t1: history [100] → ⌈110⌉ = 110 → 112; 90 fits
    # t2: history [100, 90]: sorted [90, 100], index ⌊0.75·2⌋ = 1 → 100 → 112; 130 > 112:
    #     fallback align(130) − 112 = 136 − 112 = 24
    # t3: history [100, 90, 130]: sorted [90, 100, 130], index 2 → 130 · 1.1 = 143 → 144
    assert bound.tolist() == [16, 112, 112, 144]
    assert extra.tolist() == [88, 0, 24, 0]


def test_one_exchange_without_history_sends_everything_in_the_fallback_round():
    bound, extra = bounded_rounds([5, 17, 3])
    assert (bound.tolist(), extra.tolist()) == ([0], [24])
