"""Byte-honest encoders: each turns a message into the real bytes that cross the wire.

Every encoder has ``encode(message) -> bytes``, ``decode(data, numel=..., ...) -> message``
and ``bit_length(message) -> int``. ``bit_length`` is a closed-form shortcut used on the hot
path for the non-primary encodings; tests assert it equals ``8 * len(encode(message))`` for
the same input, so every bit count in a trace is the length of a real buffer. Buffers are
whole bytes: a variable-length bit stream is zero-padded to the next byte, and that padding
is counted.

Wire formats (little-endian header fields; ``k`` = elements sent, ``n`` = layer numel):

==================  =========================================================  ==========
name                layout                                                     bytes
==================  =========================================================  ==========
packed32            u32 layer, u32 k, f32 M, [u32 count per 2^28 chunk when     12 + 4k
                    n > 2^28], k × u32 word = (index mod 2^28) << 4 | code      (+4·chunks)
coo64               u32 layer, u32 k, [f32 M if coded], k × (u32 index,         12 + 8k
                    f32 value)                                                  (8 + 8k
                                                                                uncoded)
gap_elias_gamma     u32 layer, u32 k, f32 M, k 4-bit codes (padded to a byte),  see text
                    Elias-gamma codes of index gaps (padded to a byte)
gap_elias_delta     same with Elias-delta gap codes
bitmap              u32 layer, u32 k, f32 M, n-bit presence map (padded),       12 + ⌈n/8⌉
                    k 4-bit codes (padded)                                      + ⌈k/2⌉
fp32 / fp16         u32 layer, u32 n, n × f32 / f16                             8 + 4n / 2n
qsgd_fixed          u32 layer, u32 n, ⌈n/d⌉ × f32 norm, n × (1 sign +           see text
                    ⌈log2(s+1)⌉ level bits), padded
qsgd_elias          u32 layer, u32 nnz, ⌈n/d⌉ × f32 norm, per nonzero:          see text
                    gamma(gap), sign bit, gamma(|level|), padded
==================  =========================================================  ==========

The first gap is ``index_0 + 1`` and later gaps ``index_i − index_(i−1)`` (all ≥ 1, as Elias
codes need). Sparse encoders also accept uncoded (fp32-valued) messages, writing fp32 values
where codes would go and no scale — except ``packed32``, whose word has room for 4-bit
codes only. The scale M is carried only when the message is coded; coo64 of a coded
message writes each value's fp32 decoding, so the receiver needs no scale but the header
still carries it for uniformity.
"""

from __future__ import annotations

import struct
from typing import Any

import numpy as np

from vgcsim.traces.wire import bitstream, sizes
from vgcsim.traces.wire.messages import (
    DenseMessage,
    QSGDMessage,
    SparseMessage,
    code_values,
)

_LE_U32 = np.dtype("<u4")
_LE_F32 = np.dtype("<f4")
_LE_F16 = np.dtype("<f2")


def _header_bytes(coded: bool) -> int:
    return sizes.sparse_header_bits(coded) // 8


def _sparse_header(msg: SparseMessage) -> bytes:
    if msg.coded:
        return struct.pack("<IIf", msg.layer, msg.count, msg.scale)
    return struct.pack("<II", msg.layer, msg.count)


def _read_sparse_header(data: bytes, coded: bool) -> tuple[int, int, float, int]:
    size = _header_bytes(coded)
    if len(data) < size:
        raise ValueError("buffer shorter than its header")
    if coded:
        layer, count, scale = struct.unpack_from("<IIf", data)
    else:
        layer, count = struct.unpack_from("<II", data)
        scale = 0.0
    return layer, count, float(scale), size


def _value_block(msg: SparseMessage) -> bytes:
    if msg.coded:
        return bitstream.pack_fixed(msg.codes, 4)
    return np.asarray(msg.values, dtype=_LE_F32).tobytes()


def _value_block_bytes(count: int, coded: bool) -> int:
    return sizes.value_block_bits(count, coded) // 8


def _read_value_block(
    data: bytes, offset: int, count: int, coded: bool
) -> tuple[np.ndarray | None, np.ndarray | None, int]:
    size = _value_block_bytes(count, coded)
    block = data[offset : offset + size]
    if len(block) != size:
        raise ValueError("buffer ends inside the value block")
    if coded:
        return bitstream.unpack_fixed(block, 4, count).astype(np.uint8), None, offset + size
    return None, np.frombuffer(block, dtype=_LE_F32).astype(np.float32), offset + size


#: Bits of the Elias-gamma and Elias-delta codes of a gap with floor(log2 gap) = N, N = 0..64.
_N = np.arange(65, dtype=np.int64)
_GAMMA_BITS = sizes.elias_gamma_bits(_N)
_DELTA_BITS = sizes.elias_delta_bits(_N)


def packed32_words(index: np.ndarray, codes: np.ndarray) -> np.ndarray:
    """The ``packed32`` element words ``index << 4 | code`` (uint32) of indices within their
    2^28 chunk and 4-bit codes (any integer dtype): the one writer of the word, for the
    encoder below and the hook codec's CPU bucket pass."""
    words = np.asarray(index).astype(_LE_U32)
    words <<= 4
    return np.bitwise_or(words, codes, out=words, casting="unsafe")


def _gaps(indices: np.ndarray) -> np.ndarray:
    return np.diff(np.asarray(indices, dtype=np.int64), prepend=-1)


class Encoding:
    """Base class: one wire format. Subclasses set ``name`` and ``kind``."""

    name: str = ""
    kind: str = ""  # "sparse" | "dense" | "qsgd"

    def encode(self, msg: Any) -> bytes:
        raise NotImplementedError

    def decode(self, data: bytes, **ctx: Any) -> Any:
        raise NotImplementedError

    def bit_length(self, msg: Any) -> int:
        """Exact ``8 * len(self.encode(msg))`` without building the buffer."""
        return 8 * len(self.encode(msg))

    def supports(self, msg: Any) -> bool:
        return True

    def __repr__(self) -> str:
        return f"<encoding {self.name}>"


class Packed32(Encoding):
    """28-bit index + 4-bit code in one 32-bit word (the paper's format, our reading).

    Layers above ``2**index_bits`` elements are split into chunks of that size; the
    header then carries one u32 element count per chunk so indices stay 28 bits wide.
    """

    kind = "sparse"

    def __init__(self, index_bits: int = 28, name: str = "packed32") -> None:
        if not 1 <= index_bits <= 28:
            raise ValueError("index_bits must be in 1..28 (4 bits are the value code)")
        self.index_bits = index_bits
        self.name = name

    def _chunks(self, numel: int) -> int:
        return int(sizes.packed32_chunks(numel, self.index_bits))

    def supports(self, msg: Any) -> bool:
        return isinstance(msg, SparseMessage) and msg.coded

    def encode(self, msg: SparseMessage) -> bytes:
        if not msg.coded:
            raise ValueError("packed32 carries 4-bit codes only; this message has fp32 values")
        idx = np.asarray(msg.indices, dtype=np.int64)
        chunks = self._chunks(msg.numel)
        parts = [_sparse_header(msg)]
        if chunks > 1:
            counts = np.bincount(idx >> self.index_bits, minlength=chunks)
            parts.append(counts.astype(_LE_U32).tobytes())
        mask = (1 << self.index_bits) - 1
        parts.append(packed32_words((idx & mask) if chunks > 1 else idx, msg.codes).tobytes())
        return b"".join(parts)

    def bit_length(self, msg: SparseMessage) -> int:
        return int(sizes.packed32_bits(msg.numel, msg.count, self.index_bits))

    def decode(self, data: bytes, *, numel: int, coded: bool = True, **_: Any) -> SparseMessage:
        layer, count, scale, offset = _read_sparse_header(data, True)
        chunks = self._chunks(numel)
        if chunks > 1:
            counts = np.frombuffer(data, dtype=_LE_U32, count=chunks, offset=offset)
            offset += 4 * chunks
            base = np.repeat(np.arange(chunks, dtype=np.int64) << self.index_bits, counts)
        else:
            base = np.zeros(count, dtype=np.int64)
        if len(data) != offset + 4 * count:
            raise ValueError("packed32 buffer length does not match its count")
        words = np.frombuffer(data, dtype=_LE_U32, count=count, offset=offset).astype(np.int64)
        return SparseMessage(
            layer, numel, base + (words >> 4), (words & 15).astype(np.uint8), scale
        )


class Coo64(Encoding):
    """u32 index + fp32 value per element (COO); coded messages write decoded values."""

    name = "coo64"
    kind = "sparse"

    def encode(self, msg: SparseMessage) -> bytes:
        rec = np.empty(msg.count, dtype=[("i", _LE_U32), ("v", _LE_F32)])
        rec["i"] = msg.indices
        rec["v"] = msg.sent_values()
        return _sparse_header(msg) + rec.tobytes()

    def bit_length(self, msg: SparseMessage) -> int:
        return sizes.coo64_bits(msg.count, msg.coded)

    def decode(self, data: bytes, *, numel: int, coded: bool = True, **_: Any) -> SparseMessage:
        layer, count, scale, offset = _read_sparse_header(data, coded)
        if len(data) != offset + 8 * count:
            raise ValueError("coo64 buffer length does not match its count")
        rec = np.frombuffer(data, dtype=[("i", _LE_U32), ("v", _LE_F32)], offset=offset)
        values = rec["v"].astype(np.float32)
        return SparseMessage(layer, numel, rec["i"].astype(np.int64), None, scale, values)


class GapElias(Encoding):
    """Sorted index gaps, Elias-gamma or Elias-delta coded, plus the value block."""

    kind = "sparse"

    def __init__(self, code: str) -> None:
        if code not in ("gamma", "delta"):
            raise ValueError("code must be 'gamma' or 'delta'")
        self.code = code
        self.name = f"gap_elias_{code}"

    def encode(self, msg: SparseMessage) -> bytes:
        fields = bitstream.gamma_fields if self.code == "gamma" else bitstream.delta_fields
        stream = bitstream.pack_fields(*fields(_gaps(msg.indices)))
        return _sparse_header(msg) + _value_block(msg) + stream

    def bit_length(self, msg: SparseMessage) -> int:
        stream_bits = 0
        if msg.count:
            # Code lengths depend on N = floor(log2 gap) only: sum them over N's histogram.
            stream_bits = int(self.code_bits[: msg.gap_log2_counts.size] @ msg.gap_log2_counts)
        return self.buffer_bits(msg.count, msg.coded, stream_bits)

    @property
    def code_bits(self) -> np.ndarray:
        """Bits of the code of a gap with floor(log2 gap) = N, indexed by N = 0..64."""
        return _GAMMA_BITS if self.code == "gamma" else _DELTA_BITS

    @staticmethod
    def buffer_bits(count: int, coded: bool, stream_bits: int) -> int:
        """Buffer bits for ``count`` elements whose gap codes take ``stream_bits``."""
        return sizes.gap_bits(count, stream_bits, coded)

    def decode(self, data: bytes, *, numel: int, coded: bool = True, **_: Any) -> SparseMessage:
        layer, count, scale, offset = _read_sparse_header(data, coded)
        codes, values, offset = _read_value_block(data, offset, count, coded)
        decode = bitstream.decode_gamma if self.code == "gamma" else bitstream.decode_delta
        gaps = decode(np.frombuffer(data, dtype=np.uint8, offset=offset), count)
        return SparseMessage(layer, numel, np.cumsum(gaps) - 1, codes, scale, values)


class Bitmap(Encoding):
    """One presence bit per element of the layer, then the value block."""

    name = "bitmap"
    kind = "sparse"

    def encode(self, msg: SparseMessage) -> bytes:
        mask = np.zeros(msg.numel, dtype=np.uint8)
        mask[msg.indices] = 1
        return _sparse_header(msg) + np.packbits(mask).tobytes() + _value_block(msg)

    def bit_length(self, msg: SparseMessage) -> int:
        return sizes.bitmap_bits(msg.numel, msg.count, msg.coded)

    def decode(self, data: bytes, *, numel: int, coded: bool = True, **_: Any) -> SparseMessage:
        layer, count, scale, offset = _read_sparse_header(data, coded)
        map_bytes = (numel + 7) // 8
        raw = np.frombuffer(data, dtype=np.uint8, count=map_bytes, offset=offset)
        indices = np.flatnonzero(np.unpackbits(raw)[:numel]).astype(np.int64)
        if indices.size != count:
            raise ValueError("bitmap population does not match its count")
        codes, values, end = _read_value_block(data, offset + map_bytes, count, coded)
        if end != len(data):
            raise ValueError("bitmap buffer has trailing bytes")
        return SparseMessage(layer, numel, indices, codes, scale, values)


class DenseFloat(Encoding):
    """Every element as IEEE float (fp32 or fp16), after a (layer, count) header."""

    kind = "dense"

    def __init__(self, name: str, dtype: np.dtype) -> None:
        self.name = name
        self.dtype = np.dtype(dtype)

    def encode(self, msg: DenseMessage) -> bytes:
        values = np.asarray(msg.values, dtype=np.float32).astype(self.dtype)
        return struct.pack("<II", msg.layer, msg.numel) + values.tobytes()

    def bit_length(self, msg: DenseMessage) -> int:
        return sizes.dense_bits(msg.numel, 8 * self.dtype.itemsize)

    def decode(self, data: bytes, *, numel: int, **_: Any) -> DenseMessage:
        layer, count = struct.unpack_from("<II", data)
        if count != numel or len(data) != 8 + self.dtype.itemsize * numel:
            raise ValueError(f"{self.name} buffer does not hold {numel} elements")
        values = np.frombuffer(data, dtype=self.dtype, offset=8).astype(np.float32)
        return DenseMessage(layer, numel, values)


class QSGDFixed(Encoding):
    """QSGD with fixed-width levels: 1 sign bit + ⌈log2(s+1)⌉ magnitude bits per element."""

    name = "qsgd_fixed"
    kind = "qsgd"

    def encode(self, msg: QSGDMessage) -> bytes:
        width = 1 + sizes.qsgd_level_bits(msg.s)
        lv = np.asarray(msg.levels, dtype=np.int64)
        fields = ((lv < 0).astype(np.int64) << (width - 1)) | np.abs(lv)
        return (
            struct.pack("<II", msg.layer, msg.numel)
            + np.asarray(msg.norms, dtype=_LE_F32).tobytes()
            + bitstream.pack_fixed(fields, width)
        )

    def bit_length(self, msg: QSGDMessage) -> int:
        return sizes.qsgd_fixed_bits(msg.numel, msg.norms.size, msg.s)

    def decode(self, data: bytes, *, numel: int, bucket_size: int, s: int, **_: Any) -> QSGDMessage:
        layer, count = struct.unpack_from("<II", data)
        buckets = sizes.qsgd_buckets(numel, bucket_size)
        norms = np.frombuffer(data, dtype=_LE_F32, count=buckets, offset=8).astype(np.float32)
        width = 1 + sizes.qsgd_level_bits(s)
        offset = 8 + 4 * buckets
        if count != numel or len(data) != offset + (numel * width + 7) // 8:
            raise ValueError("qsgd_fixed buffer length does not match the layer")
        fields = bitstream.unpack_fixed(
            np.frombuffer(data, dtype=np.uint8, offset=offset), width, numel
        )
        magnitude = fields & ((1 << (width - 1)) - 1)
        levels = np.where(fields >> (width - 1), -magnitude, magnitude)
        return QSGDMessage(layer, numel, bucket_size, s, norms, levels.astype(np.int64))


class QSGDElias(Encoding):
    """QSGD's Elias coding: for each nonzero level, gamma(index gap), sign, gamma(|level|)."""

    name = "qsgd_elias"
    kind = "qsgd"

    @staticmethod
    def _fields(msg: QSGDMessage) -> tuple[np.ndarray, np.ndarray]:
        lv = np.asarray(msg.levels, dtype=np.int64)
        nz = np.flatnonzero(lv)
        gap_v, gap_w = bitstream.gamma_fields(_gaps(nz))
        mag_v, mag_w = bitstream.gamma_fields(np.abs(lv[nz]))
        values = np.empty(3 * nz.size, dtype=np.uint64)
        widths = np.empty(3 * nz.size, dtype=np.int64)
        values[0::3], values[1::3], values[2::3] = gap_v, (lv[nz] < 0), mag_v
        widths[0::3], widths[1::3], widths[2::3] = gap_w, 1, mag_w
        return values, widths

    def encode(self, msg: QSGDMessage) -> bytes:
        nnz = int(np.count_nonzero(msg.levels))
        return (
            struct.pack("<II", msg.layer, nnz)
            + np.asarray(msg.norms, dtype=_LE_F32).tobytes()
            + bitstream.pack_fields(*self._fields(msg))
        )

    def bit_length(self, msg: QSGDMessage) -> int:
        lv = np.asarray(msg.levels, dtype=np.int64)
        nz = np.flatnonzero(lv)
        stream = 0
        if nz.size:
            stream = int(bitstream.gamma_lengths(_gaps(nz)).sum())
            stream += nz.size + int(bitstream.gamma_lengths(np.abs(lv[nz])).sum())
        return sizes.qsgd_elias_bits(msg.norms.size, stream)

    def decode(self, data: bytes, *, numel: int, bucket_size: int, s: int, **_: Any) -> QSGDMessage:
        layer, nnz = struct.unpack_from("<II", data)
        buckets = sizes.qsgd_buckets(numel, bucket_size)
        norms = np.frombuffer(data, dtype=_LE_F32, count=buckets, offset=8).astype(np.float32)
        stream = np.frombuffer(data, dtype=np.uint8, offset=8 + 4 * buckets)
        gaps, neg, mag = bitstream.decode_fields_sequence(stream, nnz, ("gamma", "bit", "gamma"))
        levels = np.zeros(numel, dtype=np.int64)
        levels[np.cumsum(gaps) - 1] = np.where(neg == 1, -mag, mag)
        return QSGDMessage(layer, numel, bucket_size, s, norms, levels)


#: Registry of encoders by the name used in configs and trace columns (``bits_<name>``).
ENCODINGS: dict[str, Encoding] = {
    e.name: e
    for e in (
        Packed32(),
        Coo64(),
        GapElias("gamma"),
        GapElias("delta"),
        Bitmap(),
        DenseFloat("fp32", np.dtype("<f4")),
        DenseFloat("fp16", np.dtype("<f2")),
        QSGDFixed(),
        QSGDElias(),
    )
}

SPARSE_ENCODINGS = ("packed32", "coo64", "gap_elias_gamma", "gap_elias_delta", "bitmap")
#: the dense wire formats the `dense` compressor writes (the replay's dense baselines are
#: `vgcsim.core.options.DENSE_ENCODINGS`)
DENSE_WIRE_ENCODINGS = ("fp32", "fp16")
QSGD_ENCODINGS = ("qsgd_fixed", "qsgd_elias")

__all__ = [
    "DENSE_WIRE_ENCODINGS",
    "ENCODINGS",
    "QSGD_ENCODINGS",
    "SPARSE_ENCODINGS",
    "Encoding",
    "code_values",
]
