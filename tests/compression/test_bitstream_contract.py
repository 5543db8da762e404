"""Bit streams at hand-worked points: MSB-first fixed fields of every width path, empty
inputs, ndarray inputs, wide Elias-delta codes, and the truncation message."""

from __future__ import annotations

import numpy as np
import pytest

from vgcsim.traces.wire import bitstream


@pytest.mark.parametrize(
    ("values", "width", "data"),
    [
        ([5, 3, 1], 4, bytes([0x53, 0x10])),  # nibbles, odd count padded with 0
        ([5, 3, 1, 15], 4, bytes([0x53, 0x1F])),
        ([5, 3, 250], 8, bytes([5, 3, 250])),
        ([5, 3, 1], 3, bytes([0xAC, 0x80])),  # 101 011 001 -> 1010 1100 1000 0000
        ([1, 0, 1], 1, bytes([0xA0])),
        ([0xABC, 0x123], 12, bytes([0xAB, 0xC1, 0x23])),
        ([0xFFFFF, 1], 20, bytes([0xFF, 0xFF, 0xF0, 0x00, 0x01])),
    ],
)
def test_fixed_fields_by_hand(values, width, data):
    assert bitstream.pack_fixed(np.array(values), width) == data
    for source in (data, np.frombuffer(data, dtype=np.uint8)):
        got = bitstream.unpack_fixed(source, width, len(values))
        assert got.dtype == np.int64
        assert got.tolist() == values


def test_empty_inputs():
    assert bitstream.pack_fixed(np.array([], dtype=np.int64), 4) == b""
    assert bitstream.pack_fixed(np.array([], dtype=np.int64), 12) == b""
    for width in (4, 8, 12):
        got = bitstream.unpack_fixed(b"\xff", width, 0)
        assert got.dtype == np.int64 and got.size == 0
    assert bitstream.pack_fields(np.array([], dtype=np.uint64), np.array([], dtype=np.int64)) == b""
    assert bitstream.pack_fields(np.array([7, 9], dtype=np.uint64), np.array([0, 0])) == b""
    for decode in (bitstream.decode_gamma, bitstream.decode_delta):
        got = decode(b"", 0)
        assert got.dtype == np.int64 and got.size == 0
    out = bitstream.decode_fields_sequence(b"", 0, ("gamma", "bit", "gamma"))
    assert len(out) == 3 and all(a.size == 0 and a.dtype == np.int64 for a in out)


def test_pack_fields_by_hand():
    # 3 in 2 bits, 0 in 3 bits, 1 in 1 bit, 0x1FF in 9 bits: 11 000 1 111111111 -> 1100 0111 1111 1110
    data = bitstream.pack_fields(
        np.array([3, 0, 1, 0x1FF], dtype=np.uint64), np.array([2, 3, 1, 9])
    )
    assert data == bytes([0xC7, 0xFE])


def test_read_fields_by_hand():
    bits = np.unpackbits(np.frombuffer(bytes([0xC7, 0xFE]), dtype=np.uint8))
    got = bitstream.read_fields(bits, np.array([0, 2, 5, 6, 3]), np.array([2, 3, 1, 9, 0]))
    assert got.dtype == np.uint64
    assert got.tolist() == [3, 0, 1, 0x1FF, 0]  # a zero-width field reads 0
    none = bitstream.read_fields(bits, np.array([4, 1]), np.array([0, 0]))
    assert none.tolist() == [0, 0] and none.dtype == np.uint64


def test_gamma_and_delta_decode_from_an_ndarray():
    # gamma 1 010 011 00100 -> a6 40; delta 1 0100 0101 01100 -> 1010 0010 1011 0000 = a2 b0
    assert bitstream.decode_gamma(
        np.frombuffer(bytes([0xA6, 0x40]), dtype=np.uint8), 4
    ).tolist() == [1, 2, 3, 4]
    assert bitstream.pack_fields(*bitstream.delta_fields(np.array([1, 2, 3, 4]))) == bytes(
        [0xA2, 0xB0]
    )
    assert bitstream.decode_delta(
        np.frombuffer(bytes([0xA2, 0xB0]), dtype=np.uint8), 4
    ).tolist() == [1, 2, 3, 4]


def test_wide_delta_codes_round_trip():
    # delta(n) takes 2·floor(log2(N+1)) + 1 + N bits, N = floor(log2 n): 61 bits for
    # N = 50, still one 64-bit field (the docstring promises n < 2^31 only)
    n = np.array([2**50 + 7, 2**40, 3, 2**33 - 1, 1])
    values, widths = bitstream.delta_fields(n)
    assert widths.tolist() == [61, 51, 4, 43, 1]
    got = bitstream.decode_delta(bitstream.pack_fields(values, widths), n.size)
    assert got.tolist() == n.tolist()


def test_truncated_streams_name_the_problem():
    data = bitstream.pack_fields(*bitstream.gamma_fields(np.array([100, 200, 300])))
    for decode, count in ((bitstream.decode_gamma, 3), (bitstream.decode_delta, 3)):
        with pytest.raises(ValueError) as exc:
            decode(data[:2], count)
        assert str(exc.value) == "bit stream ends before all codes were read"


def test_a_gamma_code_cut_off_by_the_end_of_the_stream_is_refused():
    # 0xA6 0x40 = 1 | 010 | 011 | 00100 | 0000: gamma codes 1, 2, 3, 4, and then four zero
    # bits, the start of a fifth code whose value bits are past the end: a ValueError (a bad
    # message), never an IndexError.
    assert bitstream.decode_gamma(bytes([0xA6, 0x40]), 4).tolist() == [1, 2, 3, 4]
    with pytest.raises(ValueError, match="ends before all codes were read"):
        bitstream.decode_gamma(bytes([0xA6, 0x40]), 5)
    with pytest.raises(ValueError, match="ends before all codes were read"):
        bitstream.decode_gamma(bytes([0x00]), 1)


def test_a_delta_code_cut_off_by_the_end_of_the_stream_is_refused():
    # 0x01 = 0000000 1: the gamma prefix of the length has 7 zeros, more than any length up to
    # 64 needs, and no bits follow.
    with pytest.raises(ValueError, match="ends before all codes were read"):
        bitstream.decode_delta(bytes([0x01]), 1)
    # 0x20 = 00100 000: length 4 needs 3 more bits after "00100", and the stream has exactly 3.
    assert bitstream.decode_delta(bytes([0x20]), 1).tolist() == [8]
    with pytest.raises(ValueError, match="ends before all codes were read"):
        bitstream.decode_delta(bytes([0x20]), 2)


# -- any bytes, any count: the decoders against a bit-by-bit reading of the definitions -----


def _ref_codes(data: bytes, count: int, kind: str) -> list[int] | None:
    """The first ``count`` Elias codes of ``data`` read bit by bit from the definitions, or
    None where the stream ends first. Gamma: z zeros, then the z + 1 bits of N (its first is
    the 1 that ends the zeros). Delta: gamma(L), then the low L − 1 bits of N (N has L bits;
    a length above 63 cannot be an int64 and is refused like a stream that ends)."""
    bits = "".join(f"{b:08b}" for b in data)
    pos, out = 0, []
    for _ in range(count):
        z = 0
        while pos + z < len(bits) and bits[pos + z] == "0":
            z += 1
        if pos + 2 * z + 1 > len(bits):
            return None
        first = int(bits[pos + z : pos + 2 * z + 1], 2)
        pos += 2 * z + 1
        if kind == "gamma":
            out.append(first)
            continue
        length = first
        if length > 63 or pos + length - 1 > len(bits):
            return None
        out.append(int("1" + bits[pos : pos + length - 1], 2))
        pos += length - 1
    return out


@pytest.mark.parametrize("kind", ["gamma", "delta"])
def test_any_bytes_decode_as_the_definition_reads_them_or_are_refused(kind):
    """Seeded random streams of 1–5 bytes (most of them not written by an encoder: zero runs
    that reach the end, codes that end exactly on the last bit or one bit past it), and
    every count from 1 to 7: the decoder returns what the bit-by-bit reading gives, or
    raises the truncation error exactly where that reading runs out of bits."""
    decode = bitstream.decode_gamma if kind == "gamma" else bitstream.decode_delta
    rng = np.random.default_rng(2018)
    ends_exactly = refused = 0
    for _ in range(1500):
        n = int(rng.integers(1, 6))
        # bias towards zeros so that long zero runs (big codes, ends of stream) are common
        raw = rng.integers(0, 256, n) & rng.integers(0, 256, n)
        data = bytes(int(v) for v in raw)
        for count in range(1, 8):
            want = _ref_codes(data, count, kind)
            if want is None:
                refused += 1
                with pytest.raises(ValueError) as exc:
                    decode(data, count)
                assert str(exc.value) == "bit stream ends before all codes were read"
            else:
                assert decode(data, count).tolist() == want, (data.hex(), count)
                assert decode(np.frombuffer(data, dtype=np.uint8), count).tolist() == want
                ends_exactly += _ref_codes(data + b"", count + 1, kind) is None
    assert refused > 1000 and ends_exactly > 200  # both sides of the boundary are exercised


def _bytes_of(bits: str) -> bytes:
    bits += "0" * (-len(bits) % 8)
    return bytes(int(bits[i : i + 8], 2) for i in range(0, len(bits), 8))


def test_delta_lengths_up_to_63_bits_and_no_further():
    """Delta codes written bit by bit: L = 63 (gamma(63) = 00000 111111) with the 62 low bits
    of 2^62 and of 2^63 − 1 decode to those int64 values, also followed by a second code;
    a length of 64 bits or more cannot be an int64 value and is refused whatever follows."""
    gamma63 = "00000" + "111111"
    assert bitstream.decode_delta(_bytes_of(gamma63 + "0" * 62), 1).tolist() == [2**62]
    top = gamma63 + "1" * 62
    assert bitstream.decode_delta(_bytes_of(top), 1).tolist() == [2**63 - 1]
    assert bitstream.decode_delta(_bytes_of(top + "1"), 2).tolist() == [2**63 - 1, 1]
    # L = 64 (gamma(64) = 000000 1000000) would be a value of 2^63 or more: refused, also with
    # all of its 63 low bits present; so are L = 127 and a prefix of seven zeros (L >= 128),
    # with more than enough bits after them
    for prefix in ("000000" + "1000000", "000000" + "1111111", "0000000" + "10000000"):
        with pytest.raises(ValueError, match="ends before all codes were read"):
            bitstream.decode_delta(_bytes_of(prefix + "1" * 300), 1)


def test_field_sequences_decode_to_int64_arrays():
    """decode_fields_sequence returns one int64 array per pattern entry, bits included: the
    pattern (gamma, bit) over 5 = 00101, 1 and 1 = 1, 0 packed by hand: 00101 1 1 0."""
    data = _bytes_of("00101" + "1" + "1" + "0")
    gammas, bits = bitstream.decode_fields_sequence(data, 2, ("gamma", "bit"))
    assert gammas.tolist() == [5, 1] and bits.tolist() == [1, 0]
    assert gammas.dtype == np.int64 and bits.dtype == np.int64


def test_a_field_sequence_past_the_end_of_the_stream_is_refused():
    """Nine one-bit patterns from one byte: the ninth starts where the stream ends, so the
    decoder refuses (a ValueError naming the problem, not an IndexError); eight decode."""
    data = _bytes_of("10110010")
    (bits,) = bitstream.decode_fields_sequence(data, 8, ("bit",))
    assert bits.tolist() == [1, 0, 1, 1, 0, 0, 1, 0]
    with pytest.raises(ValueError) as exc:
        bitstream.decode_fields_sequence(data, 9, ("bit",))
    assert str(exc.value) == "bit stream ends before all codes were read"
