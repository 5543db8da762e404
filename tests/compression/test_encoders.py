"""Encoders: real bytes with headers, exact bit counts, round trips, golden sizes."""

from __future__ import annotations

import struct

import numpy as np
import pytest

from vgcsim.traces.wire import bitstream
from vgcsim.traces.wire.encoders import (
    DENSE_WIRE_ENCODINGS,
    ENCODINGS,
    QSGD_ENCODINGS,
    SPARSE_ENCODINGS,
    DenseFloat,
    GapElias,
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
    assert set(SPARSE_ENCODINGS + DENSE_WIRE_ENCODINGS + QSGD_ENCODINGS) == set(ENCODINGS)


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


@pytest.mark.parametrize("name", DENSE_WIRE_ENCODINGS)
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


# Wire formats at the edges the other wire tests leave open, each from a buffer written out
# by hand: bit-stream fields given as plain integers and 9 bits wide, header fields read as
# unsigned 32-bit integers, packed32's per-chunk index masking
# with a narrow index field, encoder objects built outside the registry, and the fp16 format
# rounding the fp32 value of a float64 input (the encoders' table: fp32 / fp16 carry the
# element as IEEE float after it was fp32).

# layer 3 of 10 elements; elements 1, 4, 9 sent with codes 0, 9, 7 and scale 0.5
MSG = SparseMessage(3, 10, np.array([1, 4, 9]), np.array([0, 9, 7], dtype=np.uint8), 0.5)
HEADER = struct.pack("<IIf", 3, 3, 0.5)
CODES = bytes([0x09, 0x70])  # 4-bit codes 0, 9, 7 padded to a byte


def test_uncoded_header_fields_are_unsigned_32_bit():
    # layer 2^31 + 5 needs the top bit of the u32: 05 00 00 80 little-endian
    layer = 2**31 + 5
    msg = SparseMessage(layer, 4, np.array([1]), values=np.array([0.5]))
    data = ENCODINGS["coo64"].encode(msg)
    assert data == bytes([5, 0, 0, 0x80, 1, 0, 0, 0]) + struct.pack("<If", 1, 0.5)
    got = ENCODINGS["coo64"].decode(data, numel=4, coded=False)
    assert got.layer == layer and got.indices.tolist() == [1]


def test_packed32_masks_indices_to_the_index_field_in_each_chunk():
    # index_bits = 3: chunks of 8 elements, 16 elements -> 2 chunks, one u32 count each;
    # index 2 (chunk 0) -> word 2 << 4 | 1 = 0x21; index 9 (chunk 1) -> (9 mod 8) << 4 | 5 = 0x15
    enc = Packed32(index_bits=3, name="p3")
    msg = SparseMessage(7, 16, np.array([2, 9]), np.array([1, 5], dtype=np.uint8), 0.25)
    data = enc.encode(msg)
    assert data == struct.pack("<IIf", 7, 2, 0.25) + struct.pack("<II", 1, 1) + struct.pack(
        "<II", 0x21, 0x15
    )
    assert enc.bit_length(msg) == 8 * len(data)
    got = enc.decode(data, numel=16)
    assert got.indices.tolist() == [2, 9] and got.codes.tolist() == [1, 5]


def test_encoders_built_outside_the_registry_encode_the_documented_bytes():
    # gaps 2, 3, 5: gamma 010 011 00101 -> 0100 1100 1010 0000; delta 0100 0101 01101
    gamma, delta = GapElias("gamma"), GapElias("delta")
    assert (gamma.name, delta.name) == ("gap_elias_gamma", "gap_elias_delta")
    assert gamma.encode(MSG) == HEADER + CODES + bytes([0x4C, 0xA0])
    assert delta.encode(MSG) == HEADER + CODES + bytes([0x45, 0x68])
    fp16 = DenseFloat("fp16", np.dtype("<f2"))
    assert fp16.name == "fp16" and fp16.dtype == np.dtype("<f2")
    # half 1.0 = 0x3C00, -2.0 = 0xC000, little-endian
    msg = DenseMessage(2, 2, np.float32([1.0, -2.0]))
    assert fp16.encode(msg) == struct.pack("<II", 2, 2) + bytes([0x00, 0x3C, 0x00, 0xC0])
    assert fp16.bit_length(msg) == 8 * (8 + 2 * 2)


def test_fp16_rounds_the_fp32_value_of_a_float64_input():
    # 1 + 2^-11 + 2^-30 as fp32 is 1 + 2^-11 (2^-30 is below half an fp32 ulp, 2^-24), exactly
    # half-way between the halves 1 and 1 + 2^-10: ties to even give 1.0 (0x3C00). Rounding the
    # float64 directly would give 1 + 2^-10 (0x3C01).
    msg = DenseMessage(0, 1, np.array([1 + 2**-11 + 2**-30]))
    assert ENCODINGS["fp16"].encode(msg) == struct.pack("<II", 0, 1) + bytes([0x00, 0x3C])
    assert ENCODINGS["fp32"].encode(msg) == struct.pack("<II", 0, 1) + struct.pack("<f", 1 + 2**-11)


def test_pack_fields_accepts_plain_python_integers():
    # 3 in 2 bits, 0 in 3, 1 in 1, 0x1FF in 9: 11 000 1 111111111 -> 1100 0111 1111 1110
    assert bitstream.pack_fields([3, 0, 1, 0x1FF], [2, 3, 1, 9]) == bytes([0xC7, 0xFE])


def test_nine_bit_fixed_fields_keep_their_ninth_bit():
    # 0x1FF and 1 in 9 bits: 111111111 000000001 + 6 pad bits -> 1111 1111 1000 0000 0100 0000
    data = bitstream.pack_fixed(np.array([0x1FF, 1]), 9)
    assert data == bytes([0xFF, 0x80, 0x40])
    assert bitstream.unpack_fixed(data, 9, 2).tolist() == [0x1FF, 1]
