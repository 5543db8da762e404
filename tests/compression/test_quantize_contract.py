"""The paper's 4-bit code at hand-worked points: code = sign bit 3 + exponent e in 0..7,
value ±M·2^(−e) (``vgcsim.traces.wire.quantize``)."""

from __future__ import annotations

import numpy as np
import pytest

from vgcsim.traces.wire.messages import code_values
from vgcsim.traces.wire.quantize import quantize_log4


def _q(values, **kw):
    codes, m, q = quantize_log4(np.asarray(values, dtype=np.float32), **kw)
    assert codes.dtype == np.uint8 and q.dtype == np.float32 and isinstance(m, float)
    np.testing.assert_array_equal(q, code_values(codes, m))  # what the receiver decodes
    return codes.tolist(), m, q.tolist()


def test_max_scale_nearest_log_and_down_by_hand():
    # M = 1. 0.36 = 1.44·2^-2 lies between the levels 0.25 (e = 2) and 0.5 (e = 1):
    # linear midpoint 0.375 (1.5·2^-2): nearest -> 0.25; log2 midpoint √2·2^-2 ≈ 0.354:
    # log -> 0.5; down -> 0.25. 0.375 itself rounds up for nearest and log.
    x = [1.0, -0.5, 0.36, 0.375, -0.2]
    # -0.2 = 1.6·2^-3: nearest and log -> 0.25 (e = 2), down -> 0.125 (e = 3)
    assert _q(x, rounding="nearest") == ([0, 9, 2, 1, 10], 1.0, [1.0, -0.5, 0.25, 0.5, -0.25])
    assert _q(x, rounding="log") == ([0, 9, 1, 1, 10], 1.0, [1.0, -0.5, 0.5, 0.5, -0.25])
    assert _q(x, rounding="down") == ([0, 9, 2, 2, 11], 1.0, [1.0, -0.5, 0.25, 0.25, -0.125])


def test_elements_at_or_below_the_floor_take_the_smallest_level():
    # M = 2: the smallest level is 2·2^-7 = 1/64; 0, 1e-9 and -1/1000 all code e = 7
    codes, m, q = _q([2.0, 0.0, 1e-9, -1e-3])
    assert m == 2.0 and codes == [0, 7, 7, 15]
    assert q == [2.0, 2 / 128, 2 / 128, -2 / 128]


def test_mean_scale_clips_above_the_top_level():
    # M = mean(4, 1, 1, 2) = 2: 4/2 = 2 would be e = -1, clipped to e = 0 (value 2)
    assert _q([4.0, -1.0, 1.0, 2.0], scale="mean") == ([0, 9, 1, 0], 2.0, [2.0, -1.0, 1.0, 2.0])


def test_degenerate_scales_code_zeros():
    assert _q([]) == ([], 0.0, [])
    assert _q([0.0, -0.0, 0.0]) == ([0, 0, 0], 0.0, [0.0, 0.0, 0.0])
    codes, m, q = quantize_log4(np.float32([1.0, np.inf]))
    assert codes.tolist() == [0, 0] and m == np.inf and q.tolist() == [0.0, 0.0]
    codes, m, q = quantize_log4(np.float32([1.0, np.nan]), scale="mean")
    assert codes.tolist() == [0, 0] and np.isnan(m) and q.tolist() == [0.0, 0.0]


def test_unknown_rules_are_refused():
    with pytest.raises(ValueError) as exc:
        quantize_log4(np.float32([1.0]), scale="median")
    assert str(exc.value) == "unknown scale rule 'median'"
    with pytest.raises(ValueError) as exc:
        quantize_log4(np.float32([1.0]), rounding="up")
    assert str(exc.value) == "unknown rounding rule 'up'"


def test_input_is_not_modified():
    x = np.float32([0.3, -0.7, 0.01])
    before = x.copy()
    quantize_log4(x)
    np.testing.assert_array_equal(x, before)


def test_code_values_by_hand():
    np.testing.assert_array_equal(
        code_values(np.array([0, 3, 7, 8, 12, 15]), 4.0),
        np.float32([4.0, 0.5, 4 / 128, -4.0, -0.25, -4 / 128]),
    )
    assert code_values(np.array([1]), 4.0).dtype == np.float32


def test_mantissa_bits_and_the_log_rounding_boundary():
    from vgcsim.traces.wire import quantize

    # fp32 bit patterns: 1.5 = 0x3FC00000, 1.75 = 0x3FE00000, √2 = 0x3FB504F3
    assert quantize._mantissa_bits(1.5) == 0x400000
    assert quantize._mantissa_bits(1.75) == 0x600000
    assert quantize._mantissa_bits(1.0) == 0 and quantize._mantissa_bits(2.0) == 0
    assert quantize._mantissa_bits(float(np.float32(np.sqrt(2.0)))) == 0x3504F3
    assert quantize._mantissa_bits(float(np.nextafter(np.float32(1), np.float32(2)))) == 1
    # "log" rounds |r|/M = 1.f·2^x up at f >= the mantissa of √2 (0x3504F3), "nearest" at 1.5
    below = np.array([0x3F3504F2], dtype=np.int32).view(np.float32)  # just below √2/2
    at = np.array([0x3F3504F3], dtype=np.int32).view(np.float32)  # fp32(√2/2)
    codes, _, _ = quantize_log4(np.float32([1.0, below[0], at[0]]), rounding="log")
    assert codes.tolist() == [0, 1, 0]
    codes, _, _ = quantize_log4(np.float32([1.0, 0.75, np.nextafter(np.float32(0.75), 0)]))
    assert codes.tolist() == [0, 0, 1]


def test_float64_input_is_quantized_as_its_fp32_values():
    x = [1.0, -0.5, 0.36, 0.375, -0.2]
    codes64, m64, q64 = quantize_log4(np.array(x, dtype=np.float64))
    codes32, m32, q32 = quantize_log4(np.array(x, dtype=np.float32))
    assert codes64.tolist() == codes32.tolist() == [0, 9, 2, 1, 10]
    assert m64 == m32 and q64.dtype == np.float32 and q64.tolist() == q32.tolist()
