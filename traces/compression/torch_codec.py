"""The variance compressor in torch ops on the gradient's device: compress, pack, decode.

The DDP communication hook runs once per bucket inside the backward pass; a round trip
through NumPy (and the bit counts of every alternative encoding that
:meth:`vgcsim.traces.compression.base.Compressor.compress` also computes) costs more than
the work itself on small layers and does not run on a GPU. This module is the same rule as
:class:`vgcsim.traces.compression.compressors.variance_based.VarianceCompressor` written with torch
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

Each rule is written once per side: the device (torch) forms are :func:`accumulate_and_select`
(the state update and the test), :func:`log4_codes` (the quantizer's integer step) and
:func:`packed32_words` (the element word); the CPU passes call the NumPy reference, which
the recorder's compressors run (:func:`~vgcsim.traces.compression.compressors.variance_based.
add_to_state`, :func:`~vgcsim.traces.compression.compressors.variance_based.passes_test`,
:func:`vgcsim.traces.wire.quantize.log4_codes`, :func:`vgcsim.traces.wire.encoders.
packed32_words`). A bucket's message layout (each layer's header, then its elements) is
written by one class for both bucket passes, :class:`_Layout`.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from vgcsim.traces.compression.compressors.variance_based import (
    FLOOR,
    VarianceCompressor,
    VarianceState,
    add_to_state,
    passes_test,
)
from vgcsim.traces.wire import quantize
from vgcsim.traces.wire.encoders import packed32_words as packed32_words_np
from vgcsim.traces.wire.sizes import PACKED32_INDEX_BITS

#: Header words of a coded sparse message (layer, count, scale) and of an uncoded one.
CODED_HEADER_WORDS = 3
UNCODED_HEADER_WORDS = 2
_FLOOR = float(FLOOR)
_EXPONENT_BIAS = int(quantize.EXPONENT_BIAS)
_MAX_E = int(quantize.MAX_E)
CHUNK = 1 << PACKED32_INDEX_BITS

#: Whether CPU tensors take the NumPy shortcuts of :func:`accumulate_and_select` and
#: :func:`_nonzero` (``True``, the default: NumPy is faster there on the CPU). ``False`` sends
#: them through the torch ops a GPU runs, so that tests compare those ops with the NumPy path
#: on a machine without a GPU; both give the same indices. Read at each call.
NUMPY_ON_CPU = True


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
    return max(1, -(-numel // CHUNK))


def accumulate_and_select(
    c,
    r: torch.Tensor,
    v: torch.Tensor,
    grad: torch.Tensor,
    sqsum: torch.Tensor,
    batch_size: int,
    holder: str,
    note: str,
) -> torch.Tensor:
    """The variance rule's first half on the device, shared by :func:`compress` and the torch
    bucket pass: add ``grad`` to the residual ``r`` and the variance estimate from ``sqsum``
    to ``v`` (in place), then return the indices with r² > α·v (every nonzero r when α = 0).
    The same fp32 operations in the same order as the NumPy reference
    (:func:`~vgcsim.traces.compression.compressors.variance_based.add_to_state`,
    :func:`~vgcsim.traces.compression.compressors.variance_based.passes_test`)."""
    g = grad.detach().reshape(-1).to(torch.float32)
    sq = sqsum.detach().reshape(-1).to(torch.float32)
    if g.numel() != r.numel() or sq.numel() != r.numel():
        raise ValueError(
            f"grad/sqsum have {g.numel()}/{sq.numel()} elements but the {holder} "
            f"holds {r.numel()}{note}"
        )
    r.add_(g)
    per_sample = c.variance_scale == "per_sample"
    b = _f32(batch_size)
    if c.variance == "sqsum":
        v.add_(sq / b if per_sample else sq * _f32(1.0 / float(batch_size) ** 2))
    else:
        centered = (sq / b - g * g).clamp_min_(0)
        v.add_(centered if per_sample else centered / b)
    if NUMPY_ON_CPU and r.device.type == "cpu":
        # On the CPU torch's float-to-bool comparison and nonzero kernels cost several times
        # NumPy's at these sizes (the largest part of a small model's compression); the
        # arrays are views of the same memory and the test is the NumPy reference's.
        return torch.from_numpy(np.flatnonzero(passes_test(r.numpy(), v.numpy(), c.alpha)))
    if c.alpha == 0:
        return r.nonzero().view(-1)
    return (r.square() > _f32(c.alpha) * v).nonzero().view(-1)


def _nonzero(mask: torch.Tensor) -> torch.Tensor:
    """Ascending int64 positions of the true elements of a flat bool ``mask``."""
    if NUMPY_ON_CPU and mask.device.type == "cpu":
        return torch.from_numpy(np.flatnonzero(mask.numpy()))
    return mask.nonzero().view(-1)


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
    idx = accumulate_and_select(
        c,
        r,
        v,
        grad,
        sqsum,
        batch_size,
        "compressor state",
        " (a state belongs to one (worker, layer))",
    )
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


def log4_codes(
    magnitude: torch.Tensor, m: torch.Tensor, values: torch.Tensor, rounding: str, *, clip_top: bool
) -> torch.Tensor:
    """:func:`vgcsim.traces.wire.quantize.log4_codes` in torch: the 4-bit codes (int32: e in
    bits 0–2, the fp32 sign bit of ``values`` in bit 3) of ``magnitude = |values|`` against
    the scale ``m`` (one, or one per element), by the same integer add and shift on the
    ratio's fp32 bit pattern."""
    e = (magnitude / m).view(torch.int32).add_(int(quantize.ROUND_UP_ADD[rounding]))
    e = e.bitwise_right_shift_(23).neg_().add_(_EXPONENT_BIAS).clamp_(max=_MAX_E)
    if clip_top:
        e.clamp_(min=0)
    # the sign bit moved to bit 3 (an arithmetic shift; & 8 keeps it)
    return e.bitwise_or_(values.view(torch.int32).bitwise_right_shift(28).bitwise_and_(8))


def packed32_words(index: torch.Tensor, codes: torch.Tensor) -> torch.Tensor:
    """:func:`vgcsim.traces.wire.encoders.packed32_words` in torch: ``index << 4 | code`` as
    int32 words (indices within their 2^28 chunk; the u32 word's bit pattern is kept, as
    int32 arithmetic wraps)."""
    return (index.to(torch.int32) << 4).bitwise_or_(codes.to(torch.int32))


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
    codes = log4_codes(magnitude, m, values, rounding, clip_top=scale != "max").to(torch.uint8)
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
        idx = idx & (CHUNK - 1)
    parts.append(packed32_words(idx, codes))
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


# --------------------------------------------------------------------------- buckets
#
# A DDP bucket holds several layers back to back. Per-layer torch calls cost more than the
# arithmetic on small layers, so the hook runs the rule once over the bucket's flat
# gradient: element-wise steps are the same fp32 operations, the per-layer scale M is a
# segment maximum, and every element is quantized against its own layer's M. The layers'
# states become views of one flat residual and one flat variance accumulator per bucket.


@dataclass
class BucketState:
    """Flat residual and variance of a bucket's layers (each layer's state is a view)."""

    layers: tuple[int, ...]
    numels: list[int]
    offsets: torch.Tensor  # int64 [L + 1] start of each layer in the flat bucket
    residual: torch.Tensor
    variance: torch.Tensor
    layer_ids: torch.Tensor  # int64 [numel]: the bucket position (0..L-1) of every element
    local_index: torch.Tensor  # int32 [numel]: every element's index within its layer
    # CPU only: NumPy views of the above and reusable workspaces (see _scratch)
    scratch: dict = field(default_factory=dict, repr=False, compare=False)


def bucket_state(
    states: Sequence[VarianceState], layers: Sequence[int], device: torch.device
) -> BucketState:
    """Join the layers' states into flat tensors on ``device``; the layer states become views."""
    numels = [s.residual.numel() for s in states]
    residual = torch.cat([s.residual.to(device) for s in states])
    variance = torch.cat([s.variance.to(device) for s in states])
    start = 0
    for s, n in zip(states, numels, strict=True):
        s.residual, s.variance = residual[start : start + n], variance[start : start + n]
        start += n
    offsets = torch.tensor([0, *itertools.accumulate(numels)], dtype=torch.int64, device=device)
    sizes = torch.tensor(numels, device=device)
    # output_size: no device-to-host sync to learn the length (and it runs on "meta").
    layer_ids = torch.repeat_interleave(
        torch.arange(len(numels), device=device), sizes, output_size=sum(numels)
    )
    local_index = (
        torch.arange(sum(numels), device=device) - offsets.index_select(0, layer_ids)
    ).to(torch.int32)
    return BucketState(tuple(layers), numels, offsets, residual, variance, layer_ids, local_index)


def bucket_supported(compressor: object, numels: Sequence[int]) -> bool:
    """True when :func:`compress_bucket` serves this compressor and these layer sizes.

    It needs the variance compressor with ``scale="max"`` (a ``mean`` scale is recomputed
    per layer, :func:`compress` does it) and layers of at most 2^28 elements (one
    ``packed32`` chunk).
    """
    return (
        supports(compressor)
        and compressor.config.scale == "max"
        and all(n <= CHUNK for n in numels)
    )


_POW2: dict[torch.device, torch.Tensor] = {}


def _pow2(device: torch.device) -> torch.Tensor:
    """2^(−e) for e = 0..7 (fp32), one table per device."""
    table = _POW2.get(device)
    if table is None:
        table = torch.ldexp(
            torch.ones(8, dtype=torch.float32, device=device),
            -torch.arange(8, dtype=torch.float32, device=device),
        )
        _POW2[device] = table
    return table


def _signed_pow2(device: torch.device) -> torch.Tensor:
    """±2^(−e) for the 16 codes (sign in bit 3), fp32, one table per device."""
    table = _SIGNED_POW2.get(device)
    if table is None:
        powers = _pow2(device)
        table = torch.cat([powers, -powers])
        _SIGNED_POW2[device] = table
    return table


_SIGNED_POW2: dict[torch.device, torch.Tensor] = {}


def compress_bucket(
    compressor: VarianceCompressor,
    grad: torch.Tensor,
    sqsum: torch.Tensor,
    bucket: BucketState,
    *,
    batch_size: int,
    impl: str = "auto",
) -> tuple[torch.Tensor, list[int], list[int]]:
    """:func:`compress` of every layer of a bucket in one pass over the flat tensors.

    ``grad`` and ``sqsum`` are the bucket's layers back to back (flat, on the state's
    device). Returns ``(words, lengths, sent)``: the layers' buffers back to back as int32
    words (byte for byte :func:`compress` of each layer in turn), each buffer's length in
    bytes and each layer's elements sent. Requires :func:`bucket_supported`.

    ``impl``: ``"torch"`` (torch ops on the state's device), ``"numpy"`` (CPU state only:
    NumPy on views of the same memory) or ``"auto"`` (NumPy for a CPU state, where a torch
    call costs several microseconds more than the work on these sizes; torch elsewhere).
    Both give the same bytes and state (tested).
    """
    if impl == "numpy" or (impl == "auto" and bucket.residual.device.type == "cpu"):
        return _compress_bucket_numpy(compressor, grad, sqsum, bucket, batch_size=batch_size)
    c = compressor.config
    r, v = bucket.residual, bucket.variance
    idx = accumulate_and_select(c, r, v, grad, sqsum, batch_size, "bucket state", "")
    n_layers = len(bucket.layers)
    lid = bucket.layer_ids.index_select(0, idx)
    # index_select / index_fill_ / index_copy_: on CPU several times faster than r[idx].
    picked = r.index_select(0, idx)
    coded = c.values == "code4"
    if coded:
        magnitude = picked.abs()
        m = torch.zeros(n_layers, dtype=torch.float32, device=r.device)
        m.scatter_reduce_(0, lid, magnitude, "amax")
        m_e = m.index_select(0, lid)
        if c.below_floor == "keep":
            # With M = max |r| one pass is the NumPy loop: M itself is always kept.
            keep = magnitude >= m_e * _FLOOR
            if not bool(keep.all()):
                kept = _nonzero(keep)
                idx, lid, picked, magnitude, m_e = (
                    t.index_select(0, kept) for t in (idx, lid, picked, magnitude, m_e)
                )
        codes = log4_codes(magnitude, m_e, picked, c.rounding, clip_top=False)
        # ±M·2^(−e) from the signed table, as the quantizer does: M·(−p) = −(M·p) exactly.
        q = m_e * _signed_pow2(r.device).index_select(0, codes)
        m_list = m.tolist()
        # A zero or non-finite M codes every element of its layer 0 (layers sending nothing
        # have M = 0 here too; masking their no elements changes nothing).
        if not all(math.isfinite(x) and x != 0 for x in m_list):
            usable = torch.tensor([math.isfinite(x) and x != 0 for x in m_list], device=r.device)
            bad = ~usable.index_select(0, lid)
            codes.masked_fill_(bad, 0)
            q.masked_fill_(bad, 0.0)
    else:
        q = picked
    if c.after_send == "reset":
        r.index_fill_(0, idx, 0.0)
    else:
        r.index_copy_(0, idx, picked - q)
    v.mul_(_f32(c.zeta))
    v.index_fill_(0, idx, 0.0)
    counts = torch.bincount(lid, minlength=n_layers)
    sent = counts.tolist()
    layout = _Layout(sent, coded)
    device = r.device
    words = torch.empty(layout.words, dtype=torch.int32, device=device)
    local = bucket.local_index.index_select(0, idx)
    layers = torch.tensor(bucket.layers, dtype=torch.int32, device=device)
    layout.write(
        words,
        torch.from_numpy(layout.starts).to(device),
        [layers, counts.to(torch.int32), *([m.view(torch.int32)] if coded else [])],
        layout.element_positions(lid),
        [packed32_words(local, codes)] if coded else [local, picked.view(torch.int32)],
    )
    return words, layout.lengths, sent


def _word_shape(coded: bool) -> tuple[int, int]:
    """(header words, words per element) of one layer's ``packed32`` / ``coo64`` buffer."""
    return (CODED_HEADER_WORDS, 1) if coded else (UNCODED_HEADER_WORDS, 2)


class _Layout:
    """Where each word of a bucket message goes: the layers' buffers back to back, each its
    header (layer, count[, M's bit pattern]) then its elements, one word each (``packed32``)
    or two (``coo64``: index, fp32 value). The one writer of that layout for both bucket
    passes (torch, NumPy), and the split :func:`_split_messages` reads back."""

    def __init__(self, counts: Sequence[int] | np.ndarray, coded: bool) -> None:
        self.head_words, self.per = _word_shape(coded)
        counts = np.asarray(counts)  # integers: each layer's elements
        #: word offset of each layer's header: after the earlier headers and their elements
        self.starts = np.zeros(len(counts), dtype=np.int64)
        np.cumsum(self.head_words + self.per * counts[:-1], out=self.starts[1:])
        self.words = self.head_words * len(counts) + self.per * int(counts.sum())
        #: each layer's buffer in bytes
        self.lengths = (4 * (self.head_words + self.per * counts)).tolist()

    def element_positions(self, lid):
        """Word offsets of the elements (bucket order; ``lid`` each one's layer position, a
        torch tensor or NumPy array): element j of layer l sits after l + 1 headers and j
        earlier elements."""
        k, h, per = len(lid), self.head_words, self.per
        if isinstance(lid, torch.Tensor):
            return torch.arange(h, h + per * k, per, device=lid.device).add_(lid * h)
        pos = lid * h
        pos += np.arange(h, h + per * k, per)
        return pos

    @staticmethod
    def write(words, starts, headers: Sequence, pos, elements: Sequence) -> None:
        """Header word j of every layer at ``starts + j``, element word j of every element at
        ``pos + j`` (``words``, positions and columns all torch, int32 columns, or all NumPy)."""
        for at, columns in ((starts, headers), (pos, elements)):
            for j, column in enumerate(columns):
                if isinstance(words, torch.Tensor):
                    words.index_copy_(0, at + j, column)  # on CPU faster than words[at] =
                else:
                    words[at + j] = column


def _split_messages(words, lengths: Sequence[int], coded: bool) -> tuple[list, list, list]:
    """Each gathered message's element count, first word and body (``words`` a torch tensor or
    a NumPy array of int32 words; ``lengths`` in bytes): the split both decoders share."""
    head_words, per = _word_shape(coded)
    counts, starts, bodies, start = [], [], [], 0
    for n in lengths:
        counts.append((n // 4 - head_words) // per)
        starts.append(start)
        bodies.append(words[start + head_words : start + n // 4])
        start += n // 4
    return counts, starts, bodies


def decode_bucket_message(
    words: torch.Tensor,
    lengths: Sequence[int],
    offsets: torch.Tensor,
    *,
    coded: bool,
    impl: str = "auto",
) -> tuple[torch.Tensor, torch.Tensor]:
    """Bucket-flat indices and fp32 values of one rank's layer buffers (back to back).

    ``words`` are the buffers as int32 words, ``lengths`` their byte lengths (one per
    layer, as sent), ``offsets`` each layer's start in the flat bucket (int64, at least one
    entry per buffer). Layers must be single-chunk (see :func:`bucket_supported`). ``impl``
    as in :func:`compress_bucket`.
    """
    if impl == "numpy" or (impl == "auto" and words.device.type == "cpu"):
        return _decode_bucket_message_numpy(words, lengths, offsets, coded=coded)
    device = words.device
    counts, starts, bodies = _split_messages(words, lengths, coded)
    elements = torch.cat(bodies)
    total = sum(counts)
    repeats = torch.tensor(counts, device=device)
    base = torch.repeat_interleave(offsets[: len(lengths)], repeats, output_size=total)
    if not coded:
        pairs = elements.view(-1, 2)
        idx = base + (pairs[:, 0].long() & 0xFFFFFFFF)
        return idx, pairs[:, 1].contiguous().view(torch.float32)
    heads = torch.tensor([s + 2 for s in starts], device=device)
    m = words.index_select(0, heads).view(torch.float32)
    m_e = torch.repeat_interleave(m, repeats, output_size=total)
    # A 32-bit word index << 4 | code: the arithmetic shift's sign fill is masked off.
    idx = base + elements.bitwise_right_shift(4).bitwise_and_(0x0FFFFFFF)
    return idx, m_e * _signed_pow2(device).index_select(0, elements.bitwise_and(15))


# --------------------------------------------------------------------------- NumPy (CPU)
#
# The bucket pass once more, in NumPy on views of the CPU tensors: the same fp32 and int32
# operations in the same order as the torch pass above (and as the recorder's NumPy
# compressor), a fraction of a microsecond per call instead of several.

_SIGNED_POW2_NP = quantize.SIGNED_POWERS


def flat_f32(t: torch.Tensor) -> np.ndarray:
    """A flat fp32 NumPy view of a CPU tensor (a copy only when it is not contiguous fp32)."""
    if t.dtype == torch.float32 and not t.requires_grad and t.is_contiguous():
        return t.numpy().reshape(-1)
    t = t.detach()
    if t.dtype != torch.float32 or not t.is_contiguous():
        t = t.reshape(-1).to(torch.float32)
    return t.numpy().reshape(-1)


def _scratch(bucket: BucketState) -> dict:
    """NumPy views of the bucket's CPU arrays and reusable fp32 / bool workspaces."""
    s = bucket.scratch
    if "residual" not in s:
        n = bucket.residual.numel()
        s.update(
            residual=bucket.residual.numpy(),
            variance=bucket.variance.numpy(),
            local_index=bucket.local_index.numpy(),
            offsets=bucket.offsets.numpy(),
            layers=np.asarray(bucket.layers, dtype=np.int32),
            positions=np.arange(len(bucket.layers), dtype=np.int64),
            a=np.empty(n, dtype=np.float32),
            b=np.empty(n, dtype=np.float32),
            mask=np.empty(n, dtype=bool),
        )
    return s


def _compress_bucket_numpy(
    compressor: VarianceCompressor,
    grad: torch.Tensor,
    sqsum: torch.Tensor,
    bucket: BucketState,
    *,
    batch_size: int,
) -> tuple[torch.Tensor, list[int], list[int]]:
    """:func:`compress_bucket` for a CPU state (``impl="numpy"``).

    The element-wise passes write into workspaces kept with the bucket (no 4·numel
    allocation per pass); the arithmetic is the torch pass's, operation for operation.
    """
    c = compressor.config
    s = _scratch(bucket)
    r, v, a, b_ = s["residual"], s["variance"], s["a"], s["b"]
    g = flat_f32(grad)
    sq = flat_f32(sqsum)
    if g.size != r.size or sq.size != r.size:
        raise ValueError(
            f"grad/sqsum have {g.size}/{sq.size} elements but the bucket state holds {r.size}"
        )
    add_to_state(
        r, v, g, sq, batch_size, variance=c.variance, variance_scale=c.variance_scale, work=a
    )
    idx = passes_test(r, v, c.alpha, work=(a, b_), out=s["mask"]).nonzero()[0]
    n_layers = len(bucket.layers)
    # idx is ascending and the layers are contiguous: layer l's elements are the segment
    # ends[l]:ends[l + 1] of idx, so per-layer values spread over the elements by repeat.
    ends = idx.searchsorted(s["offsets"])
    per_layer = np.diff(ends)
    lid = np.repeat(s["positions"], per_layer)
    picked = r[idx]
    counts = per_layer
    coded = c.values == "code4"
    if coded:
        magnitude = np.abs(picked)
        some = per_layer > 0
        m = np.zeros(n_layers, dtype=np.float32)
        if idx.size:
            m[some] = np.maximum.reduceat(magnitude, ends[:-1][some])
        m_e = np.repeat(m, per_layer)
        keep = None
        if c.below_floor == "keep":
            # With M = max |r| one pass is the NumPy loop: M itself is always kept.
            keep = magnitude >= m_e * np.float32(_FLOOR)
        usable = np.isfinite(m) & (m != 0)
        all_usable = bool(usable.all())
        # The code of every selected element (element-wise, so computing it before the
        # floor test drops the same elements' codes as computing it after).
        with np.errstate(divide="ignore", invalid="ignore"):  # M = 0 layers: masked below
            codes = quantize.log4_codes(magnitude, m_e, picked, c.rounding, clip_top=False)
        if keep is not None and not keep.all():
            kept = keep.nonzero()[0]
            idx, lid, codes = idx[kept], lid[kept], codes[kept]
            if c.after_send != "reset":
                picked, m_e = picked[kept], m_e[kept]
            counts = np.bincount(lid, minlength=n_layers)
        if not all_usable:
            codes[~usable[lid]] = 0
        if c.after_send != "reset":
            q = m_e * _SIGNED_POW2_NP[codes]
            if not all_usable:
                q[~usable[lid]] = 0
    else:
        q = picked
    if c.after_send == "reset":
        r[idx] = 0
    else:
        r[idx] = picked - q
    v *= np.float32(c.zeta)
    v[idx] = 0
    layout = _Layout(counts, coded)
    words = np.empty(layout.words, dtype=np.int32)
    local = s["local_index"][idx]
    layout.write(
        words,
        layout.starts,
        [s["layers"], counts, *([m.view(np.int32)] if coded else [])],
        layout.element_positions(lid),
        [packed32_words_np(local, codes).view(np.int32)]
        if coded
        else [local, picked.view(np.int32)],
    )
    return torch.from_numpy(words), layout.lengths, counts.tolist()


def _decode_bucket_message_numpy(
    words: torch.Tensor, lengths: Sequence[int], offsets: torch.Tensor, *, coded: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`decode_bucket_message` of CPU words (``impl="numpy"``)."""
    idx, vals, _ = decode_messages([(words.numpy(), lengths)], offsets.numpy(), coded)
    return torch.from_numpy(idx), torch.from_numpy(vals)


def decode_messages(
    messages: Sequence[tuple[np.ndarray, Sequence[int]]], offsets: np.ndarray, coded: bool
) -> tuple[np.ndarray, np.ndarray, list[int]]:
    """:func:`decode_bucket_message` on NumPy arrays, for several messages of the same bucket
    (one per rank; each int32 words and their lengths in bytes; ``offsets`` int64) in one
    pass: their int64 bucket-flat indices and fp32 values back to back, and each message's
    element count."""
    counts, bodies, scales, sizes = [], [], [], []
    for w, lengths in messages:
        c, starts, b = _split_messages(w, lengths, coded)
        counts += c
        bodies += b
        sizes.append(sum(c))
        if coded:
            scales.append(w[np.asarray(starts, dtype=np.int64) + 2])
    elements = np.concatenate(bodies)
    base = np.repeat(np.concatenate([offsets[: len(lengths)] for _, lengths in messages]), counts)
    if not coded:
        pairs = elements.reshape(-1, 2)
        base += pairs[:, 0].view(np.uint32)
        return base, pairs[:, 1].copy().view(np.float32), sizes
    m_e = np.repeat(np.concatenate(scales).view(np.float32), counts)
    base += elements.view(np.uint32) >> 4
    m_e *= _SIGNED_POW2_NP[elements & 15]
    return base, m_e, sizes
