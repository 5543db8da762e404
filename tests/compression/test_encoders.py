"""Encoders: real bytes with headers, exact bit counts, round trips, golden sizes."""

from __future__ import annotations

import struct

import numpy as np
import pytest
from vgcsim.traces.wire.encoders import (
    DENSE_ENCODINGS,
    ENCODINGS,
    QSGD_ENCODINGS,
    SPARSE_ENCODINGS,
    Packed32,
)
from vgcsim.traces.wire.messages import (
    DenseMessage,
    QSGDMessage,
    SparseMessage,
    code_values,
)


def sparse(n: int, k: int, seed: int = 0, coded: bool = True, layer: int = 7) -> SparseMessage:
    rng = np.random.default_rng(seed)
    idx = np.sort(rng.choice(n, size=k, replace=False)).astype(np.int64)
    if coded:
        codes = rng.integers(0, 16, k).astype(np.uint8)
        return SparseMessage(layer, n, idx, codes, 0.375)
    return SparseMessage(layer, n, idx, values=rng.standard_normal(k).astype(np.float32))


def test_registry_and_groups():
    assert set(SPARSE_ENCODINGS + DENSE_ENCODINGS + QSGD_ENCODINGS) == set(ENCODINGS)


def test_4bit_code_values():
    codes = np.array([0, 1, 7, 8, 9, 15], dtype=np.uint8)
    np.testing.assert_array_equal(
        code_values(codes, 2.0), np.float32([2.0, 1.0, 2.0 / 128, -2.0, -1.0, -2.0 / 128])
    )


@pytest.mark.parametrize("name", SPARSE_ENCODINGS)
@pytest.mark.parametrize("n,k", [(1, 0), (1, 1), (10, 3), (1000, 0), (1000, 17), (4097, 4097)])
def test_sparse_round_trip_and_exact_bits(name, n, k):
    enc = ENCODINGS[name]
    msg = sparse(n, k, seed=n + k)
    data = enc.encode(msg)
    assert enc.bit_length(msg) == 8 * len(data)
    back = enc.decode(data, numel=n, coded=True)
    assert back.layer == 7 and back.count == k
    np.testing.assert_array_equal(back.indices, msg.indices)
    np.testing.assert_array_equal(back.dense(), msg.dense())


@pytest.mark.parametrize("name", [e for e in SPARSE_ENCODINGS if e != "packed32"])
def test_uncoded_sparse_round_trip(name):
    enc = ENCODINGS[name]
    msg = sparse(500, 40, coded=False)
    data = enc.encode(msg)
    assert enc.bit_length(msg) == 8 * len(data)
    np.testing.assert_array_equal(enc.decode(data, numel=500, coded=False).dense(), msg.dense())


def test_packed32_refuses_fp32_values():
    with pytest.raises(ValueError, match="4-bit codes"):
        ENCODINGS["packed32"].encode(sparse(10, 2, coded=False))


def test_golden_sparse_bytes_and_sizes():
    msg = SparseMessage(3, 100, np.array([0, 5, 6]), np.array([0, 9, 2], dtype=np.uint8), 0.5)
    header = struct.pack("<IIf", 3, 3, 0.5)
    # packed32: word = index << 4 | code.
    assert ENCODINGS["packed32"].encode(msg) == header + struct.pack(
        "<III", 0, 5 << 4 | 9, 6 << 4 | 2
    )
    # coo64 of a coded message: u32 index + decoded fp32 value.
    assert ENCODINGS["coo64"].encode(msg) == header + struct.pack(
        "<IfIfIf", 0, 0.5, 5, -0.25, 6, 0.125
    )
    # gaps 1, 5, 1 -> gamma "1" "00101" "1" = 1001 0110 -> 0x96; codes 0,9,2 -> 0x09 0x20.
    assert ENCODINGS["gap_elias_gamma"].encode(msg) == header + bytes([0x09, 0x20, 0x96])
    # delta: "1" "01101" "1" = 1011 0110 -> 0xb6.
    assert ENCODINGS["gap_elias_delta"].encode(msg) == header + bytes([0x09, 0x20, 0xB6])
    # bitmap: 100 bits -> 13 bytes; bits 0, 5, 6 set -> 0x86 then zeros.
    bitmap = ENCODINGS["bitmap"].encode(msg)
    assert bitmap == header + bytes([0x86]) + bytes(12) + bytes([0x09, 0x20])
    sizes = {name: ENCODINGS[name].bit_length(msg) for name in SPARSE_ENCODINGS}
    assert sizes == {
        "packed32": 8 * (12 + 12),
        "coo64": 8 * (12 + 24),
        "gap_elias_gamma": 8 * (12 + 2 + 1),
        "gap_elias_delta": 8 * (12 + 2 + 1),
        "bitmap": 8 * (12 + 13 + 2),
    }


def test_packed32_chunks_large_layers():
    # With 4 index bits, a 100-element layer spans 7 chunks of 16; words keep 4-bit offsets.
    enc = Packed32(index_bits=4)
    msg = sparse(100, 30, seed=5)
    data = enc.encode(msg)
    assert len(data) == 12 + 4 * 7 + 4 * 30 == enc.bit_length(msg) // 8
    back = enc.decode(data, numel=100)
    np.testing.assert_array_equal(back.indices, msg.indices)
    np.testing.assert_array_equal(back.codes, msg.codes)
    # The registered packed32 chunks at 2^28 elements: one u32 count per chunk above that.
    big = SparseMessage(0, 2**28 + 1, np.array([2**28]), np.array([3], dtype=np.uint8), 1.0)
    assert ENCODINGS["packed32"].bit_length(big) == 8 * (12 + 4 * 2 + 4)
    small = SparseMessage(0, 2**28, np.array([2**28 - 1]), np.array([3], dtype=np.uint8), 1.0)
    assert ENCODINGS["packed32"].bit_length(small) == 8 * (12 + 4)


@pytest.mark.parametrize("name", SPARSE_ENCODINGS)
def test_bits_grow_with_k(name):
    enc = ENCODINGS[name]
    rng = np.random.default_rng(11)
    order = rng.permutation(5000)
    codes = rng.integers(0, 16, 5000).astype(np.uint8)
    sizes = []
    for k in (0, 1, 10, 100, 1000, 5000):
        idx = np.sort(order[:k])  # nested index sets
        sizes.append(enc.bit_length(SparseMessage(0, 5000, idx, codes[:k], 1.0)))
    assert sizes == sorted(sizes)
    if name != "bitmap":
        assert len(set(sizes)) == len(sizes)  # strictly growing


def test_bitmap_vs_coo64_break_even():
    # coded: coo64 = 12 + 8k bytes; bitmap = 12 + ceil(n/8) + ceil(k/2) bytes.
    # Equal when 8k - ceil(k/2) = ceil(n/8): for n = 6000, k* = 750 / 7.5 = 100 (density 1/60).
    n = 6000

    def size(name, k):
        return 8 * len(ENCODINGS[name].encode(sparse(n, k, seed=k)))

    assert size("coo64", 99) < size("bitmap", 99)
    assert size("coo64", 100) == size("bitmap", 100)
    assert size("coo64", 101) > size("bitmap", 101)


@pytest.mark.parametrize("name", DENSE_ENCODINGS)
def test_dense_round_trip(name):
    rng = np.random.default_rng(1)
    values = rng.standard_normal(333).astype(np.float32)
    if name == "fp16":
        values = values.astype(np.float16).astype(np.float32)
    msg = DenseMessage(4, 333, values)
    data = ENCODINGS[name].encode(msg)
    assert (
        8 * len(data)
        == ENCODINGS[name].bit_length(msg)
        == 64 + 333 * (32 if name == "fp32" else 16)
    )
    np.testing.assert_array_equal(ENCODINGS[name].decode(data, numel=333).dense(), values)


def qsgd_msg(n: int, d: int, s: int, density: float, seed: int = 0) -> QSGDMessage:
    rng = np.random.default_rng(seed)
    levels = rng.integers(-s, s + 1, n) * (rng.random(n) < density)
    norms = rng.random(-(-n // d)).astype(np.float32)
    return QSGDMessage(2, n, d, s, norms, levels.astype(np.int64))


@pytest.mark.parametrize("name", QSGD_ENCODINGS)
@pytest.mark.parametrize(
    "n,d,s,density", [(1, 1, 1, 1.0), (130, 128, 1, 0.5), (1000, 512, 7, 0.1), (1024, 512, 3, 0.0)]
)
def test_qsgd_round_trip(name, n, d, s, density):
    msg = qsgd_msg(n, d, s, density)
    enc = ENCODINGS[name]
    data = enc.encode(msg)
    assert enc.bit_length(msg) == 8 * len(data)
    back = enc.decode(data, numel=n, bucket_size=d, s=s)
    np.testing.assert_array_equal(back.levels, msg.levels)
    np.testing.assert_array_equal(back.dense(), msg.dense())


def test_qsgd_fixed_golden_size():
    # 4-bit QSGD (s = 7): 1 sign + 3 level bits; 1000 elements in 2 buckets of 512.
    msg = qsgd_msg(1000, 512, 7, 0.5)
    assert ENCODINGS["qsgd_fixed"].bit_length(msg) == 8 * (8 + 2 * 4 + 1000 * 4 // 8)


def test_corrupt_buffers_raise():
    data = ENCODINGS["packed32"].encode(sparse(100, 10))
    with pytest.raises(ValueError):
        ENCODINGS["packed32"].decode(data[:-1], numel=100)
    with pytest.raises(ValueError):
        ENCODINGS["bitmap"].decode(ENCODINGS["bitmap"].encode(sparse(100, 10))[:-1], numel=100)
