"""The paper's 4-bit value quantizer: 1 sign bit + 3-bit exponent, ``±M·2^(−e)``, e ∈ 0..7.

``M`` is a per-message scale carried in the payload header. The paper fixes the code
(sign + 3-bit exponent relative to a scale) but leaves the choice of ``M`` and the rounding
rule open; both are parameters here:

- ``scale``: ``"max"`` (default) — ``M = max |r_i|`` over the elements sent in the layer, so
  the largest element is represented exactly and nothing overshoots the top level;
  ``"mean"`` — ``M = mean |r_i|`` of the sent elements (larger elements are clipped to M).
- ``rounding``: ``"nearest"`` (default) — the level nearest to ``|r_i|`` on the linear scale
  (smallest quantization error, so the smallest leftover in the residual);
  ``"log"`` — nearest in log2 (``e = round(log2(M/|r_i|))``); ``"down"`` — the largest level
  not above ``|r_i|`` (never overshoots, the residual keeps its sign).

This quantizer codes every element it is given: one below ``M·2^(−7)`` becomes
``M·2^(−7)`` (code e = 7). Whether such an element is sent at all is the compressor's
choice (``below_floor`` of the variance compressor: by default it is held back).

:func:`log4_codes` is the quantizer's integer step, shared by :func:`quantize_log4` (one
message) and the hook codec's CPU bucket pass (a scale per element); the device (torch) form
is :func:`vgcsim.traces.compression.torch_codec.log4_codes`.
"""

from __future__ import annotations

import math

import numpy as np

SCALES = ("max", "mean")
ROUNDINGS = ("nearest", "log", "down")
_INV_SQRT2 = 1.0 / math.sqrt(2.0)
_MANTISSA_ONE = 1 << 23


def _mantissa_bits(x: float) -> int:
    return int(np.array([x], dtype=np.float32).view(np.int32)[0]) & (_MANTISSA_ONE - 1)


#: Round up to the next level when the ratio's fp32 mantissa bits are at least this:
#: nearest on the linear scale at 1.5·2^x (the midpoint of the two levels), nearest in
#: log2 at √2·2^x (2·fp32(1/√2), exact), never for "down".
_ROUND_UP_AT = {
    "nearest": _mantissa_bits(1.5),
    "log": _mantissa_bits(float(np.float32(_INV_SQRT2)) * 2.0),
    "down": _MANTISSA_ONE,
}
#: what is added to the ratio's fp32 bit pattern (see :func:`log4_codes`), per rounding rule
ROUND_UP_ADD = {k: np.int32(_MANTISSA_ONE - v) for k, v in _ROUND_UP_AT.items()}
#: the fp32 exponent bias and the largest code exponent e (the level M·2^-7)
EXPONENT_BIAS = np.int32(127)
MAX_E = np.int32(7)
_POWERS = np.ldexp(np.float32(1), -np.arange(8)).astype(np.float32)
#: ±2^(−e) for the 16 codes (sign in bit 3): code → value is M times this table, exactly
SIGNED_POWERS = np.concatenate([_POWERS, -_POWERS])


def log4_codes(
    magnitude: np.ndarray,
    m: np.ndarray | np.float32,
    values: np.ndarray,
    rounding: str,
    *,
    clip_top: bool,
) -> np.ndarray:
    """The 4-bit codes (int32: e in bits 0–2, the sign of ``values`` in bit 3) of fp32
    ``values`` with ``magnitude = |values|`` against the scale ``m`` (one, or one per
    element; finite and nonzero). ``magnitude`` is overwritten (it holds the result).

    ``|r|/M = 1.f·2^x`` (x <= 0): the two neighbouring levels are M·2^x (e = −x) and
    M·2^(x+1) (e = −x − 1); which one is decided by the mantissa bits f alone. Adding
    2^23 − threshold to the fp32 bit pattern carries into the exponent field exactly when
    f >= threshold, so one integer add and shift give x (+1 when rounding up). Zero and
    subnormal ratios have exponent field 0 and land on e = 7. ``clip_top``: ratios above 1
    (a mean scale) would give e < 0 and are clipped to the top level.
    """
    t = np.divide(magnitude, m, out=magnitude).view(np.int32)
    t += ROUND_UP_ADD[rounding]
    t >>= 23
    np.subtract(EXPONENT_BIAS, t, out=t)
    np.minimum(t, MAX_E, out=t)
    if clip_top:
        np.maximum(t, 0, out=t)
    sign = values.view(np.int32) >> 28
    sign &= 8
    return np.bitwise_or(t, sign, out=t)


def quantize_log4(
    values: np.ndarray, *, scale: str = "max", rounding: str = "nearest"
) -> tuple[np.ndarray, float, np.ndarray]:
    """Quantize ``values`` (1-D fp32, all sent) to 4-bit codes.

    Returns ``(codes uint8, M, quantized fp32 values)`` with
    ``quantized = sign · M · 2^(−e)`` exactly as the receiver reconstructs it.
    """
    values = np.asarray(values, dtype=np.float32)
    if values.size == 0:
        return np.zeros(0, dtype=np.uint8), 0.0, np.zeros(0, dtype=np.float32)
    magnitude = np.abs(values)
    if scale == "max":
        m = np.float32(magnitude.max())
    elif scale == "mean":
        m = np.float32(magnitude.mean(dtype=np.float64))
    else:
        raise ValueError(f"unknown scale rule {scale!r}")
    if rounding not in _ROUND_UP_AT:
        raise ValueError(f"unknown rounding rule {rounding!r}")
    if m == 0 or not np.isfinite(m):
        return np.zeros(values.size, dtype=np.uint8), float(m), np.zeros_like(values)
    codes = log4_codes(magnitude, m, values, rounding, clip_top=scale != "max").astype(np.uint8)
    # Code → value table ±M·2^(−e), sign in bit 3: exact, a power-of-two scaling.
    return codes, float(m), (m * SIGNED_POWERS)[codes]
