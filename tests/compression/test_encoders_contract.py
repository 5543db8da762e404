"""Wire formats: each decoder refuses each kind of malformed buffer with its own message,
decodes hand-built buffers field by field, and the encoder objects keep their contract."""

from __future__ import annotations

import struct

import numpy as np
import pytest

from vgcsim.traces.wire import bitstream
from vgcsim.traces.wire.encoders import ENCODINGS, Encoding, GapElias, Packed32
from vgcsim.traces.wire.messages import DenseMessage, QSGDMessage, SparseMessage

# layer 3 of 10 elements; elements 1, 4, 9 sent with codes +e0, −e1, +e7 and scale 0.5
MSG = SparseMessage(3, 10, np.array([1, 4, 9]), np.array([0, 9, 7], dtype=np.uint8), 0.5)
HEADER = struct.pack("<IIf", 3, 3, 0.5)
CODES = bytes([0x09, 0x70])  # 4-bit codes 0, 9, 7 padded to a byte


def _raises(enc: str, data: bytes, message: str, **ctx) -> None:
    with pytest.raises(ValueError) as exc:
        ENCODINGS[enc].decode(data, **ctx)
    assert str(exc.value) == message


def _same(a: SparseMessage, layer, numel, indices, codes=None, scale=0.0, values=None) -> None:
    assert (a.layer, a.numel, a.scale) == (layer, numel, scale)
    assert a.indices.dtype == np.int64
    np.testing.assert_array_equal(a.indices, indices)
    if codes is None:
        assert a.codes is None
    else:
        assert a.codes.dtype == np.uint8
        np.testing.assert_array_equal(a.codes, codes)
    if values is None:
        assert a.values is None
    else:
        assert a.values.dtype == np.float32
        np.testing.assert_array_equal(a.values, values)


def test_hand_built_sparse_buffers_decode_field_by_field():
    words = struct.pack("<III", 1 << 4 | 0, 4 << 4 | 9, 9 << 4 | 7)
    _same(ENCODINGS["packed32"].decode(HEADER + words, numel=10), 3, 10, [1, 4, 9], [0, 9, 7], 0.5)
    rec = struct.pack("<IfIfIf", 1, 0.5, 4, -0.25, 9, 0.5 / 128)
    got = ENCODINGS["coo64"].decode(HEADER + rec, numel=10)
    _same(got, 3, 10, [1, 4, 9], None, 0.5, np.float32([0.5, -0.25, 0.5 / 128]))
    # gaps 2, 3, 5: gamma 010 011 00101 -> 0100 1100 1010 0000
    got = ENCODINGS["gap_elias_gamma"].decode(HEADER + CODES + bytes([0x4C, 0xA0]), numel=10)
    _same(got, 3, 10, [1, 4, 9], [0, 9, 7], 0.5)
    # delta: 0100 0101 01101 -> 0100 0101 0110 1000
    got = ENCODINGS["gap_elias_delta"].decode(HEADER + CODES + bytes([0x45, 0x68]), numel=10)
    _same(got, 3, 10, [1, 4, 9], [0, 9, 7], 0.5)
    # presence bits 0100100001 -> 0100 1000 0100 0000
    got = ENCODINGS["bitmap"].decode(HEADER + bytes([0x48, 0x40]) + CODES, numel=10)
    _same(got, 3, 10, [1, 4, 9], [0, 9, 7], 0.5)
    # a padding bit past the 10th element is never read
    got = ENCODINGS["bitmap"].decode(HEADER + bytes([0x48, 0x41]) + CODES, numel=10)
    _same(got, 3, 10, [1, 4, 9], [0, 9, 7], 0.5)


def test_hand_built_uncoded_buffers_decode_without_a_scale():
    header = struct.pack("<II", 5, 2)
    values = struct.pack("<ff", 1.5, -2.0)
    # float64 values of an uncoded message still travel as fp32
    msg = SparseMessage(5, 8, np.array([0, 7]), values=np.array([1.5, -2.0]))
    assert ENCODINGS["gap_elias_gamma"].encode(msg) == header + values + bytes([0x9C])
    assert ENCODINGS["bitmap"].encode(msg) == header + bytes([0x81]) + values
    got = ENCODINGS["coo64"].decode(
        header + struct.pack("<IfIf", 0, 1.5, 7, -2.0), numel=8, coded=False
    )
    _same(got, 5, 8, [0, 7], None, 0.0, np.float32([1.5, -2.0]))
    # gaps 1, 7: gamma 1 00111 -> 1001 1100
    got = ENCODINGS["gap_elias_gamma"].decode(header + values + bytes([0x9C]), numel=8, coded=False)
    _same(got, 5, 8, [0, 7], None, 0.0, np.float32([1.5, -2.0]))
    got = ENCODINGS["bitmap"].decode(header + bytes([0x81]) + values, numel=8, coded=False)
    _same(got, 5, 8, [0, 7], None, 0.0, np.float32([1.5, -2.0]))


def test_sparse_decoders_refuse_short_and_inconsistent_buffers():
    short = "buffer shorter than its header"
    for enc in ("packed32", "coo64", "gap_elias_gamma", "gap_elias_delta", "bitmap"):
        _raises(enc, HEADER[:11], short, numel=10)
    # uncoded headers are 8 bytes: 7 are too few
    for enc in ("coo64", "gap_elias_gamma", "bitmap"):
        _raises(enc, struct.pack("<II", 0, 0)[:7], short, numel=10, coded=False)
    good = {
        name: ENCODINGS[name].encode(MSG)
        for name in ENCODINGS
        if name in ("packed32", "coo64", "gap_elias_gamma", "gap_elias_delta", "bitmap")
    }
    for name in ("packed32", "coo64"):
        message = f"{name} buffer length does not match its count"
        _raises(name, good[name][:-1], message, numel=10)
        _raises(name, good[name] + b"\0", message, numel=10)
    # the gap formats' value block is cut short
    for name in ("gap_elias_gamma", "gap_elias_delta"):
        _raises(name, HEADER + CODES[:1], "buffer ends inside the value block", numel=10)
    _raises(
        "bitmap",
        HEADER + bytes([0x48, 0x40]) + CODES[:1],
        "buffer ends inside the value block",
        numel=10,
    )
    _raises("bitmap", good["bitmap"] + b"\0", "bitmap buffer has trailing bytes", numel=10)
    # a presence map with a fourth bit (element 0) set for a count of 3; bits past
    # the 10th are padding and never read
    _raises(
        "bitmap",
        HEADER + bytes([0xC8, 0x40]) + CODES,
        "bitmap population does not match its count",
        numel=10,
    )


def test_dense_and_qsgd_decoders_refuse_a_buffer_of_another_layer_size():
    for name, size in (("fp32", 4), ("fp16", 2)):
        data = ENCODINGS[name].encode(DenseMessage(2, 3, np.float32([1, 2, 3])))
        assert len(data) == 8 + 3 * size
        message = f"{name} buffer does not hold 3 elements"
        _raises(name, data[:-1], message, numel=3)
        _raises(name, data + b"\0" * size, message, numel=3)
        _raises(name, data, f"{name} buffer does not hold 4 elements", numel=4)
        got = ENCODINGS[name].decode(data, numel=3)
        assert got.layer == 2 and got.numel == 3 and got.values.dtype == np.float32
    q = QSGDMessage(1, 5, 4, 3, np.float32([2.0, 1.0]), np.array([3, -1, 0, 2, -3]))
    data = ENCODINGS["qsgd_fixed"].encode(q)
    # 8 header + 2 norms × 4 + 5 × (1 + 2) bits = 15 bits -> 2 bytes
    assert len(data) == 18
    ctx = {"numel": 5, "bucket_size": 4, "s": 3}
    message = "qsgd_fixed buffer length does not match the layer"
    _raises("qsgd_fixed", data[:-1], message, **ctx)
    _raises("qsgd_fixed", data + b"\0", message, **ctx)
    _raises("qsgd_fixed", data, message, numel=6, bucket_size=4, s=3)


def test_hand_built_qsgd_fixed_buffer():
    # levels 3, −1, 0, 2, −3 with s = 3: 1 sign + 2 magnitude bits each:
    # 011 101 000 010 111 -> 0111 0100 0010 1110 (pad 0)
    data = struct.pack("<II", 1, 5) + struct.pack("<ff", 2.0, 1.0) + bytes([0x74, 0x2E])
    q = QSGDMessage(1, 5, 4, 3, np.float32([2.0, 1.0]), np.array([3, -1, 0, 2, -3]))
    assert ENCODINGS["qsgd_fixed"].encode(q) == data  # level 0 has no sign bit
    got = ENCODINGS["qsgd_fixed"].decode(data, numel=5, bucket_size=4, s=3)
    assert (got.layer, got.numel, got.bucket_size, got.s) == (1, 5, 4, 3)
    np.testing.assert_array_equal(got.norms, np.float32([2.0, 1.0]))
    np.testing.assert_array_equal(got.levels, [3, -1, 0, 2, -3])
    assert got.levels.dtype == np.int64 and got.norms.dtype == np.float32
    # element i is norm[i // 4] · level / 3
    np.testing.assert_array_equal(got.dense(), np.float32([2.0, -2 / 3, 0.0, 4 / 3, -1.0]))


def test_hand_built_qsgd_elias_buffer():
    # nonzero levels at 0, 1, 3, 4 -> gaps 1, 1, 2, 1; per element gamma(gap), sign, gamma(|l|)
    # 1 0 011 | 1 1 1 | 010 0 010 | 1 1 011 -> 1001 1111 0100 0101 1011 (pad)
    data = struct.pack("<II", 1, 4) + struct.pack("<ff", 2.0, 1.0) + bytes([0x9F, 0x45, 0xB0])
    q = QSGDMessage(1, 5, 4, 3, np.float32([2.0, 1.0]), np.array([3, -1, 0, 2, -3]))
    assert ENCODINGS["qsgd_elias"].encode(q) == data
    assert ENCODINGS["qsgd_elias"].bit_length(q) == 8 * len(data)
    got = ENCODINGS["qsgd_elias"].decode(data, numel=5, bucket_size=4, s=3)
    assert (got.layer, got.numel, got.bucket_size, got.s) == (1, 5, 4, 3)
    np.testing.assert_array_equal(got.levels, [3, -1, 0, 2, -3])
    assert got.levels.dtype == np.int64 and got.norms.dtype == np.float32


LAYER = 2**32 - 3  # header fields are u32: a layer number past 2^31 must survive


@pytest.mark.parametrize("name", sorted(ENCODINGS))
def test_every_format_carries_a_u32_layer_number(name):
    enc = ENCODINGS[name]
    if enc.kind == "sparse":
        msg = SparseMessage(
            LAYER, 10, np.array([1, 4, 9]), np.array([0, 9, 7], dtype=np.uint8), 0.5
        )
        ctx = {"numel": 10}
    elif enc.kind == "dense":
        msg, ctx = DenseMessage(LAYER, 3, np.float32([1, 2, 3])), {"numel": 3}
    else:
        msg = QSGDMessage(LAYER, 5, 4, 3, np.float32([2.0, 1.0]), np.array([3, -1, 0, 2, -3]))
        ctx = {"numel": 5, "bucket_size": 4, "s": 3}
    got = enc.decode(enc.encode(msg), **ctx)
    assert got.layer == LAYER and got.numel == ctx["numel"]
    np.testing.assert_array_equal(got.dense(), msg.dense())


def test_encoder_objects_keep_their_contract():
    with pytest.raises(ValueError) as exc:
        Packed32(index_bits=0)
    assert str(exc.value) == "index_bits must be in 1..28 (4 bits are the value code)"
    with pytest.raises(ValueError):
        Packed32(index_bits=29)
    assert Packed32(index_bits=1).index_bits == 1 and Packed32(index_bits=28).name == "packed32"
    with pytest.raises(ValueError) as exc:
        GapElias("omega")
    assert str(exc.value) == "code must be 'gamma' or 'delta'"
    assert repr(ENCODINGS["gap_elias_delta"]) == "<encoding gap_elias_delta>"
    uncoded = SparseMessage(0, 4, np.array([1]), values=np.float32([1.0]))
    assert ENCODINGS["packed32"].supports(MSG) and not ENCODINGS["packed32"].supports(uncoded)
    assert not ENCODINGS["packed32"].supports(DenseMessage(0, 1, np.float32([1])))
    assert ENCODINGS["coo64"].supports(uncoded)
    with pytest.raises(ValueError) as exc:
        ENCODINGS["packed32"].encode(uncoded)
    assert str(exc.value) == "packed32 carries 4-bit codes only; this message has fp32 values"
    kinds = {name: e.kind for name, e in ENCODINGS.items()}
    assert kinds == {
        "packed32": "sparse",
        "coo64": "sparse",
        "gap_elias_gamma": "sparse",
        "gap_elias_delta": "sparse",
        "bitmap": "sparse",
        "fp32": "dense",
        "fp16": "dense",
        "qsgd_fixed": "qsgd",
        "qsgd_elias": "qsgd",
    }

    class Fixed(Encoding):
        name = "fixed"

        def encode(self, msg):
            return b"abc"

    # the base bit_length is the real buffer's: 8 × 3 bytes
    assert Fixed().bit_length(None) == 24 and Fixed().supports(None)
    with pytest.raises(NotImplementedError):
        Encoding().encode(None)
    with pytest.raises(NotImplementedError):
        Encoding().decode(b"")


def test_unknown_field_kind_is_refused():
    data = bitstream.pack_fields(*bitstream.gamma_fields(np.array([1, 2])))
    with pytest.raises(ValueError) as exc:
        bitstream.decode_fields_sequence(data, 1, ("gamma", "nibble"))
    assert str(exc.value) == "unknown field kind 'nibble'"


def test_messages_hand_the_receiver_fp32_whatever_they_were_built_from():
    dense = DenseMessage(0, 3, np.array([1.0, 2.5, -3.0]))  # float64 values
    assert dense.dense().dtype == np.float32 and dense.dense().tolist() == [1.0, 2.5, -3.0]
    assert DenseMessage(0, 2, [1, 2]).dense().dtype == np.float32
    sparse = SparseMessage(0, 4, np.array([0, 3]), values=np.array([0.5, -1.0]))
    assert sparse.sent_values().dtype == np.float32
    assert sparse.dense().dtype == np.float32 and sparse.dense().tolist() == [0.5, 0, 0, -1.0]
    q = QSGDMessage(0, 3, 2, 3, np.array([3.0, 1.5]), np.array([3, -1, 2]))
    assert q.dense().dtype == np.float32 and q.dense().tolist() == [3.0, -1.0, 1.0]
    assert dense.count == 3 and sparse.count == 2 and q.count == 3


def test_qsgd_values_are_the_fp32_evaluation_of_norm_times_level_over_s():
    # The wire carries fp32 norms; sender and receiver evaluate norm·(level/s) in fp32, so a
    # value must not depend on whether the norms arrive as float64 or as their fp32 rounding.
    from vgcsim.traces.wire.messages import qsgd_values

    rng = np.random.default_rng(4)
    norms64 = rng.uniform(0.1, 10.0, 50)
    levels = rng.integers(-7, 8, 50 * 8)
    got = qsgd_values(norms64, levels, 8, 7)
    n32 = np.repeat(norms64.astype(np.float32), 8)
    ratio = levels.astype(np.float32) / np.float32(7)  # fp32 division
    assert ratio.dtype == np.float32
    want = n32 * ratio  # fp32 product
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(qsgd_values(norms64.astype(np.float32), levels, 8, 7), want)


def test_qsgd_norms_travel_as_fp32_whatever_their_dtype():
    q32 = QSGDMessage(1, 5, 4, 3, np.float32([2.0, 1.0]), np.array([3, -1, 0, 2, -3]))
    q64 = QSGDMessage(1, 5, 4, 3, np.array([2.0, 1.0]), np.array([3, -1, 0, 2, -3]))
    for name in ("qsgd_fixed", "qsgd_elias"):
        data = ENCODINGS[name].encode(q64)
        assert data == ENCODINGS[name].encode(q32)
        assert data[8:16] == struct.pack("<ff", 2.0, 1.0)


def test_packed32_defaults_to_28_index_bits_and_refuses_more():
    """The paper's word: a 28-bit index and a 4-bit code; 29 index bits leave no room."""
    from vgcsim.traces.wire.encoders import Packed32

    enc = Packed32()
    assert enc.index_bits == 28 and enc.name == "packed32"
    with pytest.raises(ValueError, match="index_bits must be in 1..28"):
        Packed32(index_bits=29)


def test_packed32_decodes_the_coded_layout_by_default():
    """packed32 is the 4-bit code's format: decode without ``coded`` reads the coded layout
    (index << 4 | code words after the scale)."""
    from vgcsim.traces.wire.encoders import Packed32
    from vgcsim.traces.wire.messages import SparseMessage

    msg = SparseMessage(3, 40, np.array([1, 5, 39]), np.array([0, 9, 2], dtype=np.uint8), 2.0)
    enc = Packed32()
    got = enc.decode(enc.encode(msg), numel=40)
    assert got.indices.tolist() == [1, 5, 39] and got.codes.tolist() == [0, 9, 2]
    assert got.scale == 2.0
