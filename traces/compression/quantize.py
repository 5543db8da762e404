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

Elements below ``M·2^(−7)`` are sent as ``M·2^(−7)``; error feedback returns the overshoot.
"""

from __future__ import annotations

import math

import numpy as np

SCALES = ("max", "mean")
ROUNDINGS = ("nearest", "log", "down")
_INV_SQRT2 = 1.0 / math.sqrt(2.0)


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
    if m == 0 or not np.isfinite(m):
        return np.zeros(values.size, dtype=np.uint8), float(m), np.zeros_like(values)
    # |r|/M = frac·2^ex with frac in [0.5, 1): the two neighbouring levels are
    # M·2^(ex−1) (e = 1 − ex) and M·2^ex (e = −ex); pick one by the mantissa alone.
    with np.errstate(divide="ignore", invalid="ignore"):
        frac, ex = np.frexp(magnitude / m)
    if rounding == "nearest":
        upper = frac >= np.float32(0.75)
    elif rounding == "log":
        upper = frac >= np.float32(_INV_SQRT2)
    elif rounding == "down":
        upper = np.zeros(frac.shape, dtype=bool)
    else:
        raise ValueError(f"unknown rounding rule {rounding!r}")
    e = np.clip(1 - ex.astype(np.int64) - upper, 0, 7).astype(np.int8)
    e[magnitude == 0] = 7
    negative = np.signbit(values)
    codes = (e | (negative.astype(np.int8) << 3)).astype(np.uint8)
    q = np.ldexp(m, -e).astype(np.float32)
    np.negative(q, out=q, where=negative)
    return codes, float(m), q
