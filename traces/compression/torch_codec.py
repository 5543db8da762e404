"""The variance compressor in torch ops on the gradient's device: compress, pack, decode.

The DDP communication hook runs once per bucket inside the backward pass; a round trip
through NumPy (and the bit counts of every alternative encoding that
:meth:`vgcsim.traces.compression.base.Compressor.compress` also computes) costs more than
the work itself on small layers and does not run on a GPU. This module is the same rule as
:class:`vgcsim.traces.compression.compressors.variance.VarianceCompressor` written with torch
ops, producing the same bytes:

* the state update r += g, v += S/|B|² (or the ``centered``/``per_sample`` readings), the
  test r² > α·v, the ``below_floor`` rule, the 4-bit quantizer's integer rounding on the
  fp32 bit pattern (:func:`vgcsim.traces.wire.quantize.quantize_log4`), the post-send rule
  and v ← ζ·v, v_sent ← 0 are element-wise fp32 operations in the same order as the NumPy
  path, so residual, variance accumulator, codes and scale are bit-identical (tested on
  random inputs with exact ties, zeros, subnormals and bf16 gradients);
* the message is the primary encoding's buffer, built as little-endian 32-bit words:
  ``packed32`` (u32 layer, u32 k, f32 M, [u32 count per 2^28 chunk], k × (index << 4 | code))
  for the 4-bit code, ``coo64`` (u32 layer, u32 k, k × (u32 index, f32 value)) for
  ``values="fp32"`` — byte for byte what :mod:`vgcsim.traces.wire.encoders` writes;
* :func:`decode_sparse` reads either buffer back into indices and fp32 values.

The one step that leaves the device is ``scale="mean"``: M is the float64 mean of the sent
magnitudes, and NumPy's pairwise summation is used for it so M keeps its last bit.
"""

from __future__ import annotations

import numpy as np
import torch
from vgcsim.traces.compression.compressors.variance import VarianceCompressor, VarianceState
from vgcsim.traces.wire.quantize import _ROUND_UP_ADD
from vgcsim.traces.wire.sizes import PACKED32_INDEX_BITS

#: Header words of a coded sparse message (layer, count, scale) and of an uncoded one.
CODED_HEADER_WORDS = 3
UNCODED_HEADER_WORDS = 2
_FLOOR = float(np.float32(2.0**-7))
_EXPONENT_BIAS = 127
_MAX_E = 7
_CHUNK = 1 << PACKED32_INDEX_BITS


def supports(compressor: object) -> bool:
    """True when :func:`compress` implements ``compressor`` (the variance compressor)."""
    return type(compressor) is VarianceCompressor


def _f32(x: float) -> float:
    """``x`` rounded to fp32, as a Python float (a scalar torch multiplies with exactly)."""
    return float(np.float32(x))


def _signed_powers(m: torch.Tensor) -> torch.Tensor:
    """±M·2^(−e) for codes 0..15 (sign in bit 3), fp32 on M's device: the receiver's table."""
    powers = torch.ldexp(
        torch.ones(8, dtype=torch.float32, device=m.device),
        -torch.arange(8, dtype=torch.float32, device=m.device),
    )
    return m * torch.cat([powers, -powers])


def chunks(numel: int) -> int:
    """``packed32`` chunks of 2^28 elements a layer of ``numel`` is split into (≥ 1)."""
    return max(1, -(-numel // _CHUNK))


def compress(
    compressor: VarianceCompressor,
    grad: torch.Tensor,
    state: VarianceState,
    sqsum: torch.Tensor,
    *,
    batch_size: int,
    layer: int,
) -> tuple[torch.Tensor, int]:
    """One layer's variance step on ``grad``'s device: update ``state``, return the message.

    Returns ``(words, sent)``: the primary encoding's buffer as an int32 tensor (view it as
    uint8 for the bytes) and the number of elements sent. ``state`` tensors must live on
    ``grad``'s device (see :func:`state_to`).
    """
    c = compressor.config
    r, v = state.residual, state.variance
    g = grad.detach().reshape(-1).to(torch.float32)
    sq = sqsum.detach().reshape(-1).to(torch.float32)
    if g.numel() != r.numel() or sq.numel() != r.numel():
        raise ValueError(
            f"grad/sqsum have {g.numel()}/{sq.numel()} elements but the compressor state "
            f"holds {r.numel()} (a state belongs to one (worker, layer))"
        )
    r.add_(g)
    per_sample = c.variance_scale == "per_sample"
    b = _f32(batch_size)
    if c.variance == "sqsum":
        v.add_(sq / b if per_sample else sq * _f32(1.0 / float(batch_size) ** 2))
    else:
        centered = (sq / b - g * g).clamp_min_(0)
        v.add_(centered if per_sample else centered / b)
    if c.alpha == 0:
        idx = r.nonzero().view(-1)
    else:
        idx = (r.square() > _f32(c.alpha) * v).nonzero().view(-1)
    coded = c.values == "code4"
    if coded and c.below_floor == "keep":
        idx = _above_floor(r, idx, c.scale)
    picked = r[idx]
    if coded:
        codes, m, q = _quantize(picked, c.scale, c.rounding)
    else:
        codes, m, q = None, None, picked
    if c.after_send == "reset":
        r[idx] = 0.0
    else:
        r[idx] = picked - q
    v.mul_(_f32(c.zeta))
    v[idx] = 0.0
    return _pack(layer, r.numel(), idx, codes, m, picked), int(idx.numel())


def _scale(magnitude: torch.Tensor, scale: str) -> torch.Tensor:
    if scale == "max":
        return magnitude.max()
    mean = np.float32(magnitude.cpu().numpy().mean(dtype=np.float64))
    return torch.tensor(float(mean), dtype=torch.float32, device=magnitude.device)


def _above_floor(r: torch.Tensor, idx: torch.Tensor, scale: str) -> torch.Tensor:
    """``idx`` without elements below the message's smallest level M·2^-7 (``keep`` rule)."""
    while idx.numel():
        magnitude = r[idx].abs()
        keep = magnitude >= _scale(magnitude, scale) * _FLOOR
        if bool(keep.all()):
            break
        idx = idx[keep]
    return idx


def _quantize(values: torch.Tensor, scale: str, rounding: str):
    """:func:`vgcsim.traces.wire.quantize.quantize_log4` in torch: (codes, M, quantized)."""
    if values.numel() == 0:
        zero = torch.zeros((), dtype=torch.float32, device=values.device)
        return torch.zeros(0, dtype=torch.uint8, device=values.device), zero, values
    magnitude = values.abs()
    m = _scale(magnitude, scale)
    if not bool(torch.isfinite(m)) or bool(m == 0):
        return (
            torch.zeros(values.numel(), dtype=torch.uint8, device=values.device),
            m,
            torch.zeros_like(values),
        )
    # The quantizer's trick: adding 2^23 − threshold to the ratio's bit pattern carries into
    # the exponent field exactly when the mantissa says round up.
    t = (magnitude / m).view(torch.int32) + int(_ROUND_UP_ADD[rounding])
    t = (_EXPONENT_BIAS - (t >> 23)).clamp_(max=_MAX_E)
    if scale != "max":
        t.clamp_(min=0)
    codes = t.to(torch.uint8) | (torch.signbit(values).to(torch.uint8) << 3)
    return codes, m, _signed_powers(m)[codes.long()]


def _pack(
    layer: int,
    numel: int,
    idx: torch.Tensor,
    codes: torch.Tensor | None,
    m: torch.Tensor | None,
    values: torch.Tensor,
) -> torch.Tensor:
    """The ``packed32`` (coded) or ``coo64`` (fp32 values) buffer as int32 words."""
    device = idx.device
    k = idx.numel()
    if codes is None:
        head = torch.tensor([layer, k], dtype=torch.int32, device=device)
        body = torch.stack([idx.to(torch.int32), values.view(torch.int32)], dim=1).view(-1)
        return torch.cat([head, body])
    head = torch.tensor([layer, k, 0], dtype=torch.int32, device=device)
    head[2:] = m.reshape(1).view(torch.int32)
    parts = [head]
    n_chunks = chunks(numel)
    if n_chunks > 1:
        parts.append(torch.bincount(idx >> PACKED32_INDEX_BITS, minlength=n_chunks).to(torch.int32))
        idx = idx & (_CHUNK - 1)
    # index << 4 | code fits 32 bits unsigned; the int64 → int32 cast keeps the bit pattern.
    parts.append(((idx << 4) | codes.long()).to(torch.int32))
    return torch.cat(parts)


def decode_sparse(
    words: torch.Tensor, *, numel: int, coded: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    """Indices (int64) and fp32 values of one ``packed32`` / ``coo64`` buffer (int32 words)."""
    if not coded:
        k = int(words[1])
        rec = words[UNCODED_HEADER_WORDS : UNCODED_HEADER_WORDS + 2 * k].view(k, 2)
        return rec[:, 0].long() & 0xFFFFFFFF, rec[:, 1].contiguous().view(torch.float32)
    n_chunks = chunks(numel)
    start = CODED_HEADER_WORDS + (n_chunks if n_chunks > 1 else 0)
    packed = words[start:].long() & 0xFFFFFFFF
    idx = packed >> 4
    if n_chunks > 1:
        counts = words[CODED_HEADER_WORDS:start].long()
        base = torch.arange(n_chunks, device=words.device) << PACKED32_INDEX_BITS
        idx = idx + torch.repeat_interleave(base, counts)
    m = words[2:3].view(torch.float32)
    return idx, _signed_powers(m)[packed & 15]


def state_to(state: VarianceState, device: torch.device) -> None:
    """Move a layer's residual and variance accumulator to ``device`` (in place)."""
    if state.residual.device != device:
        state.residual = state.residual.to(device)
        state.variance = state.variance.to(device)
