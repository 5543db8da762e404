"""Closed-form wire sizes at hand-worked points (layouts in ``vgcsim.traces.wire.sizes``)."""

from __future__ import annotations

import numpy as np

from vgcsim.traces.wire import sizes


def test_elias_delta_envelope_at_hand_points():
    # N + 2 log2(N + 1) + 1: N = 0, 1, 3, 7 (N + 1 a power of two: the exact code length)
    np.testing.assert_array_equal(
        sizes.elias_delta_bits_envelope(np.array([0.0, 1.0, 3.0, 7.0])), [1.0, 4.0, 8.0, 14.0]
    )
    np.testing.assert_array_equal(sizes.elias_delta_bits(np.array([0, 1, 3, 7])), [1, 4, 8, 14])
    # between powers it is above the exact length: N = 2: 3 + 2 log2 3 = 6.17 > 5
    assert sizes.elias_delta_bits(2) == 5
    # integer counts in, integer counts out
    assert sizes.elias_delta_bits(np.array([0, 1, 3, 7])).dtype == np.int64
    assert sizes.elias_gamma_bits(np.array([0, 1])).dtype == np.int64
    assert abs(sizes.elias_delta_bits_envelope(np.float64(2.0)) - (3 + 2 * np.log2(3))) < 1e-12


def test_elias_gamma_and_delta_lengths_by_hand():
    # gamma: 2N + 1; delta: N + 2 floor(log2(N + 1)) + 1
    np.testing.assert_array_equal(sizes.elias_gamma_bits(np.array([0, 1, 5, 30])), [1, 3, 11, 61])
    np.testing.assert_array_equal(
        sizes.elias_delta_bits(np.array([0, 1, 2, 3, 4, 6, 7, 14, 15, 63])),
        [1, 4, 5, 8, 9, 11, 14, 21, 24, 76],
    )


def test_sparse_sizes_by_hand():
    # coded header 96 bits, uncoded 64; 4-bit codes padded to a byte; fp32 values 32 bits
    assert sizes.sparse_header_bits(True) == 96 and sizes.sparse_header_bits(False) == 64
    assert sizes.value_block_bits(0, True) == 0
    assert sizes.value_block_bits(3, True) == 16 and sizes.value_block_bits(4, True) == 16
    assert sizes.value_block_bits(5, True) == 24 and sizes.value_block_bits(3, False) == 96
    assert sizes.coo64_bits(3, True) == 96 + 192 and sizes.coo64_bits(3, False) == 64 + 192
    # bitmap: 10 presence bits -> 16, plus the value block
    assert sizes.bitmap_bits(10, 3, True) == 96 + 16 + 16
    assert sizes.bitmap_bits(16, 3, False) == 64 + 16 + 96
    assert sizes.bitmap_bits(17, 0, True) == 96 + 24
    # gap formats: stream of 11 bits -> 16
    assert sizes.gap_bits(3, 11, True) == 96 + 16 + 16
    assert sizes.gap_bits(3, 16, False) == 64 + 96 + 16
    assert sizes.gap_bits(0, 0, True) == 96
    assert sizes.whole_bytes_bits(0) == 0 and sizes.whole_bytes_bits(1) == 8
    assert sizes.whole_bytes_bits(8) == 8 and sizes.whole_bytes_bits(9) == 16


def test_packed32_sizes_by_hand():
    # one chunk up to 2^28 elements: 96 + 32 k; above, one u32 count per chunk
    assert sizes.packed32_chunks(1) == 1 and sizes.packed32_chunks(2**28) == 1
    assert sizes.packed32_chunks(2**28 + 1) == 2 and sizes.packed32_chunks(0) == 1
    assert sizes.packed32_bits(100, 3) == 96 + 96
    assert sizes.packed32_bits(2**28, 3) == 96 + 96
    assert sizes.packed32_bits(2**28 + 1, 3) == 96 + 96 + 64
    # 4 index bits: 16 elements per chunk, 100 elements -> 7 chunks
    assert sizes.packed32_chunks(100, 4) == 7 and sizes.packed32_chunks(16, 4) == 1
    assert sizes.packed32_bits(100, 2, 4) == 96 + 64 + 7 * 32
    assert sizes.packed32_bits(16, 2, 4) == 96 + 64
    np.testing.assert_array_equal(
        sizes.packed32_bits(np.array([16, 17]), np.array([1, 1]), 4), [128, 128 + 64]
    )


def test_dense_and_qsgd_sizes_by_hand():
    assert sizes.dense_bits(3, 32) == 64 + 96 and sizes.dense_bits(3, 16) == 64 + 48
    assert sizes.DENSE_ELEMENT_BITS == {"fp32": 32, "fp16": 16}
    # level bits: bit length of s, at least 1
    assert [sizes.qsgd_level_bits(s) for s in (0, 1, 2, 3, 4, 7, 8, 127)] == [
        1,
        1,
        2,
        2,
        3,
        3,
        4,
        7,
    ]
    assert sizes.qsgd_buckets(5, 4) == 2 and sizes.qsgd_buckets(8, 4) == 2
    assert sizes.qsgd_buckets(9, 4) == 3 and sizes.qsgd_buckets(1, 512) == 1
    # 5 elements × (1 + 2) bits = 15 -> 16; 2 norms
    assert sizes.qsgd_fixed_bits(5, 2, 3) == 64 + 64 + 16
    assert sizes.qsgd_fixed_bits(8, 1, 1) == 64 + 32 + 16
    assert sizes.qsgd_elias_bits(2, 20) == 64 + 64 + 24
    assert sizes.qsgd_elias_bits(1, 0) == 64 + 32
