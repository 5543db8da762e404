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

import torch

SCALES = ("max", "mean")
ROUNDINGS = ("nearest", "log", "down")
_LOG2_4_3 = math.log2(4.0 / 3.0)


def quantize_log4(
    values: torch.Tensor, *, scale: str = "max", rounding: str = "nearest"
) -> tuple[torch.Tensor, float, torch.Tensor]:
    """Quantize ``values`` (1-D, all sent) to 4-bit codes.

    Returns ``(codes uint8, M, quantized fp32 values)`` with
    ``quantized = sign · M · 2^(−e)`` exactly as the receiver reconstructs it.
    """
    if values.numel() == 0:
        return torch.zeros(0, dtype=torch.uint8), 0.0, values.new_zeros(0)
    magnitude = values.abs()
    if scale == "max":
        m = magnitude.max()
    elif scale == "mean":
        m = magnitude.mean()
    else:
        raise ValueError(f"unknown scale rule {scale!r}")
    m_value = float(m.to(torch.float32))
    if m_value == 0.0 or not math.isfinite(m_value):
        codes = torch.zeros(values.numel(), dtype=torch.uint8)
        return codes, m_value, values.new_zeros(values.numel())
    # t = log2(M/|r|) in float64 so exact powers of two give exact integers.
    t = torch.log2(m.double() / magnitude.double())
    if rounding == "nearest":
        e = torch.ceil(t - _LOG2_4_3)
    elif rounding == "log":
        e = torch.round(t)
    elif rounding == "down":
        e = torch.ceil(t)
    else:
        raise ValueError(f"unknown rounding rule {rounding!r}")
    e = e.nan_to_num(7.0, 7.0, 0.0).clamp_(0, 7).to(torch.int64)
    negative = values < 0
    codes = (e | (negative.to(torch.int64) << 3)).to(torch.uint8)
    q = torch.ldexp(torch.tensor(m_value, dtype=torch.float32).expand_as(values), -e)
    q = torch.where(negative, -q, q).to(torch.float32)
    return codes, m_value, q
