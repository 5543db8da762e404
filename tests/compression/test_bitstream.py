"""Bit streams: golden Elias codes, exact lengths, and vectorized decode round trips."""

from __future__ import annotations

import numpy as np
import pytest

from vgcsim.traces.wire import bitstream

# Elias (1975): gamma(1)=1, gamma(2)=010, gamma(5)=00101, gamma(9)=0001001;
# delta(1)=1, delta(2)=0100, delta(5)=01101, delta(17)=001010001.
GAMMA = {1: "1", 2: "010", 3: "011", 4: "00100", 5: "00101", 9: "0001001"}
DELTA = {1: "1", 2: "0100", 3: "0101", 4: "01100", 5: "01101", 17: "001010001"}


def _as_bits(values, widths) -> str:
    return "".join(format(int(v), f"0{int(w)}b") for v, w in zip(values, widths, strict=True))


@pytest.mark.parametrize("n,code", GAMMA.items())
def test_gamma_golden(n, code):
    values, widths = bitstream.gamma_fields(np.array([n]))
    assert _as_bits(values, widths) == code
    assert bitstream.gamma_lengths(np.array([n]))[0] == len(code)


@pytest.mark.parametrize("n,code", DELTA.items())
def test_delta_golden(n, code):
    values, widths = bitstream.delta_fields(np.array([n]))
    assert _as_bits(values, widths) == code
    assert bitstream.delta_lengths(np.array([n]))[0] == len(code)


def test_packed_stream_golden_bytes():
    # 1 010 011 00100 -> 1010 0110 0100 (+ 4 zero pad bits) = a6 40
    assert bitstream.pack_fields(*bitstream.gamma_fields(np.array([1, 2, 3, 4]))).hex() == "a640"


@pytest.mark.parametrize("kind", ["gamma", "delta"])
def test_elias_round_trip_wide_range(kind):
    rng = np.random.default_rng(0)
    n = np.concatenate(
        [
            np.arange(1, 300),
            rng.integers(1, 2**31, 2000),
            2 ** np.arange(31),
            2 ** np.arange(31) - 1,
        ]
    )
    n = n[n >= 1]
    fields = bitstream.gamma_fields if kind == "gamma" else bitstream.delta_fields
    decode = bitstream.decode_gamma if kind == "gamma" else bitstream.decode_delta
    data = bitstream.pack_fields(*fields(n))
    widths = fields(n)[1]
    assert len(data) == (int(widths.sum()) + 7) // 8
    np.testing.assert_array_equal(decode(data, n.size), n)


def test_floor_log2_exact_at_powers_of_two():
    k = np.arange(0, 52)
    np.testing.assert_array_equal(bitstream.floor_log2(2**k), k)
    np.testing.assert_array_equal(bitstream.floor_log2(2 ** k[1:] - 1), k[1:] - 1)


@pytest.mark.parametrize("width", [1, 2, 3, 4, 5, 8, 11])
def test_fixed_width_round_trip(width):
    rng = np.random.default_rng(width)
    values = rng.integers(0, 2**width, 1001)
    data = bitstream.pack_fixed(values, width)
    assert len(data) == (1001 * width + 7) // 8
    np.testing.assert_array_equal(bitstream.unpack_fixed(data, width, 1001), values)


def test_mixed_field_sequence_round_trip():
    rng = np.random.default_rng(3)
    gaps = rng.integers(1, 5000, 500)
    signs = rng.integers(0, 2, 500)
    levels = rng.integers(1, 16, 500)
    gv, gw = bitstream.gamma_fields(gaps)
    lv, lw = bitstream.gamma_fields(levels)
    values = np.stack([gv, signs.astype(np.uint64), lv], 1).ravel()
    widths = np.stack([gw, np.ones(500, dtype=np.int64), lw], 1).ravel()
    out = bitstream.decode_fields_sequence(
        bitstream.pack_fields(values, widths), 500, ("gamma", "bit", "gamma")
    )
    for got, want in zip(out, (gaps, signs, levels), strict=True):
        np.testing.assert_array_equal(got, want)


def test_truncated_stream_is_an_error():
    data = bitstream.pack_fields(*bitstream.gamma_fields(np.array([100, 200, 300])))
    with pytest.raises(ValueError):
        bitstream.decode_gamma(data[:2], 3)
