"""Wire formats at the edges the other wire tests leave open, each from a buffer written out
by hand: bit-stream fields given as plain integers and 9 bits wide, header fields read as
unsigned 32-bit integers, packed32's per-chunk index masking
with a narrow index field, encoder objects built outside the registry, and the fp16 format
rounding the fp32 value of a float64 input (the encoders' table: fp32 / fp16 carry the
element as IEEE float after it was fp32)."""

from __future__ import annotations

import struct

import numpy as np
from vgcsim.traces.wire import bitstream
from vgcsim.traces.wire.encoders import ENCODINGS, DenseFloat, GapElias, Packed32
from vgcsim.traces.wire.messages import DenseMessage, SparseMessage

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
