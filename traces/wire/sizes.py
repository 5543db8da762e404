"""Closed-form sizes of the wire formats: bits of a buffer from its element counts alone.

One place for every "how many bits does encoding E take for a layer of n elements of which
k are sent" formula. The encoders (:mod:`vgcsim.traces.wire.encoders`) use these for their
``bit_length`` shortcut (tests prove it equal to ``8 * len(encode(msg))``); synthetic traces
(:mod:`vgcsim.traces.synth`) size their payloads with them; trace validation
(:mod:`vgcsim.traces.validate`) checks recorded bit counts against them. numpy only: every
function takes Python ints or integer arrays (``numel`` = n, ``sent`` = k) and returns the
same kind, in bits of whole bytes (headers and padding included).

Layouts (little-endian header fields, see the encoders' table):

- sparse header: u32 layer, u32 k, plus f32 scale M when values travel as 4-bit codes
  (``coded``): 96 bits, 64 uncoded;
- value block: k 4-bit codes padded to a byte (coded), or k × f32;
- packed32: header + k × u32 word, plus one u32 count per 2^28-element chunk when the layer
  has more than one chunk;
- coo64: header + k × (u32 index, f32 value);
- bitmap: header + n presence bits padded to a byte + value block;
- gap_elias_gamma / gap_elias_delta: header + value block + Elias codes of the index gaps,
  padded to a byte (gap g costs 2⌊log2 g⌋ + 1 bits in gamma, N + 2⌊log2(N + 1)⌋ + 1 with
  N = ⌊log2 g⌋ in delta; Elias 1975);
- fp32 / fp16: u32 layer, u32 n, n × f32 / f16;
- qsgd_fixed: u32 layer, u32 n, ⌈n/d⌉ × f32 norm, n × (1 sign + ⌈log2(s+1)⌉ level bits), padded;
- qsgd_elias: u32 layer, u32 nnz, ⌈n/d⌉ × f32 norm, the Elias stream, padded.
"""

from __future__ import annotations

from typing import TypeVar

import numpy as np

Count = TypeVar("Count", int, np.ndarray)

#: Sparse header bits: u32 layer + u32 count (uncoded), plus f32 scale M (coded).
SPARSE_HEADER_BITS_UNCODED = 64
SPARSE_HEADER_BITS_CODED = 96
#: Dense and QSGD header bits: u32 layer + u32 element count.
DENSE_HEADER_BITS = 64
#: packed32 keeps 28 index bits beside the 4-bit code in one u32 word.
PACKED32_INDEX_BITS = 28
#: Bits of each element in the dense float formats.
DENSE_ELEMENT_BITS = {"fp32": 32, "fp16": 16}


def whole_bytes_bits(bits: Count) -> Count:
    """``bits`` rounded up to whole bytes (every buffer is a byte string)."""
    return 8 * ((bits + 7) // 8)


def sparse_header_bits(coded: bool) -> int:
    """Header bits of a sparse format: 96 with the f32 scale (coded values), else 64."""
    return SPARSE_HEADER_BITS_CODED if coded else SPARSE_HEADER_BITS_UNCODED


def value_block_bits(sent: Count, coded: bool) -> Count:
    """Bits of k values: 4-bit codes padded to a byte (coded) or k × f32."""
    return 8 * ((sent + 1) // 2) if coded else 32 * sent


def packed32_chunks(numel: Count, index_bits: int = PACKED32_INDEX_BITS) -> Count:
    """Chunks of at most 2^index_bits elements a layer of ``numel`` is split into (≥ 1)."""
    return np.maximum(1, -(-numel // (1 << index_bits)))


def packed32_bits(numel: Count, sent: Count, index_bits: int = PACKED32_INDEX_BITS) -> Count:
    """packed32: 96-bit header + 32·k, plus 32 bits per chunk when there is more than one."""
    chunks = packed32_chunks(numel, index_bits)
    return SPARSE_HEADER_BITS_CODED + 32 * sent + np.where(chunks > 1, 32 * chunks, 0)


def coo64_bits(sent: Count, coded: bool) -> Count:
    """coo64: header + 64·k (u32 index, f32 value per element)."""
    return sparse_header_bits(coded) + 64 * sent


def bitmap_bits(numel: Count, sent: Count, coded: bool) -> Count:
    """bitmap: header + ⌈n/8⌉ bytes of presence bits + the value block."""
    return sparse_header_bits(coded) + whole_bytes_bits(numel) + value_block_bits(sent, coded)


def gap_bits(sent: Count, stream_bits: Count, coded: bool) -> Count:
    """gap_elias_*: header + value block + ``stream_bits`` of gap codes padded to a byte."""
    return sparse_header_bits(coded) + value_block_bits(sent, coded) + whole_bytes_bits(stream_bits)


def elias_gamma_bits(log2_gap: Count) -> Count:
    """Bits of the Elias-gamma code of a gap g with ``log2_gap`` = ⌊log2 g⌋: 2N + 1.

    Linear in N, so with the real log2 of a mean gap it is also a concave upper bound.
    """
    return 2 * log2_gap + 1


def elias_delta_bits(log2_gap: Count) -> Count:
    """Bits of the Elias-delta code of a gap g with ``log2_gap`` = N = ⌊log2 g⌋ (integer):
    N + 2⌊log2(N + 1)⌋ + 1."""
    n = np.asarray(log2_gap, dtype=np.int64)
    _, exponent = np.frexp((n + 1).astype(np.float64))
    return n + 2 * (exponent.astype(np.int64) - 1) + 1


def elias_delta_bits_envelope(log2_gap: np.ndarray) -> np.ndarray:
    """Concave upper bound of :func:`elias_delta_bits` for a real N: N + 2 log2(N + 1) + 1.

    For Jensen bounds on a whole stream (the gaps of k sorted indices sum to at most n, so
    the stream is at most k times the code length of the mean gap n/k).
    """
    return log2_gap + 2 * np.log2(log2_gap + 1) + 1


def dense_bits(numel: Count, element_bits: int) -> Count:
    """fp32 / fp16: 64-bit header + n elements of ``element_bits``."""
    return DENSE_HEADER_BITS + element_bits * numel


def qsgd_level_bits(s: int) -> int:
    """Magnitude bits of a QSGD level in 0..s for the fixed-width format."""
    return max(1, int(s).bit_length())


def qsgd_buckets(numel: Count, bucket_size: int) -> Count:
    """Buckets of ``bucket_size`` elements (one f32 norm each) in a layer of ``numel``."""
    return -(-numel // bucket_size)


def qsgd_fixed_bits(numel: Count, buckets: Count, s: int) -> Count:
    """qsgd_fixed: 64-bit header + 32 per norm + n × (1 + level bits), padded to a byte."""
    width = 1 + qsgd_level_bits(s)
    return DENSE_HEADER_BITS + 32 * buckets + whole_bytes_bits(numel * width)


def qsgd_elias_bits(buckets: Count, stream_bits: Count) -> Count:
    """qsgd_elias: 64-bit header + 32 per norm + the Elias stream, padded to a byte."""
    return DENSE_HEADER_BITS + 32 * buckets + whole_bytes_bits(stream_bits)
