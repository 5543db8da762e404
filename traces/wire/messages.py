"""What a compressor decides to send, before it is turned into bytes.

Three message shapes cover every compressor:

- :class:`SparseMessage` — sorted indices plus either 4-bit value codes with a per-message
  scale (variance, strom, hybrid, topk) or raw fp32 values (topk with ``values="fp32"``);
- :class:`DenseMessage` — every element as fp32 (or fp16-representable) values;
- :class:`QSGDMessage` — per-bucket norms and signed integer levels.

Encoders (``vgcsim.traces.wire.encoders``) turn a message into real bytes and back; a
message's :meth:`dense` is the tensor the receiver adds up.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

#: 4-bit value code: bit 3 is the sign (1 = negative), bits 0..2 the exponent e in 0..7.
CODE_SIGN_BIT = 8
CODE_EXPONENT_MASK = 7
MAX_EXPONENT = 7


def code_values(codes: np.ndarray, scale: float) -> np.ndarray:
    """fp32 values ``±scale·2^(−e)`` of 4-bit codes (exact: a power-of-two scaling)."""
    codes = np.asarray(codes, dtype=np.int64)
    magnitude = np.ldexp(np.float32(scale), -(codes & CODE_EXPONENT_MASK)).astype(np.float32)
    return np.where(codes & CODE_SIGN_BIT, -magnitude, magnitude).astype(np.float32)


@dataclass(frozen=True, eq=False)
class SparseMessage:
    """Elements ``indices`` (sorted, unique) of a layer of ``numel`` elements.

    Either ``codes`` (uint8 4-bit codes) with ``scale`` (fp32 M), or ``values`` (fp32).
    """

    layer: int
    numel: int
    indices: np.ndarray
    codes: np.ndarray | None = None
    scale: float = 0.0
    values: np.ndarray | None = None

    @property
    def coded(self) -> bool:
        return self.codes is not None

    @property
    def count(self) -> int:
        return int(self.indices.size)

    @cached_property
    def gap_log2_counts(self) -> np.ndarray:
        """How many sorted index gaps (first gap = index_0 + 1) have ``floor(log2 gap) = n``,
        for n = 0..64 (cached: both Elias sizes read it)."""
        idx = self.indices
        gaps = np.empty(idx.size, dtype=np.float64)
        if idx.size:
            gaps[0] = idx[0] + 1
            np.subtract(idx[1:], idx[:-1], out=gaps[1:], casting="unsafe")
        # frexp's exponent is floor(log2 gap) + 1, exact for gaps below 2^53.
        _, exponent = np.frexp(gaps)
        return np.bincount(exponent, minlength=66)[1:]

    def sent_values(self) -> np.ndarray:
        """fp32 value of every sent element, in index order."""
        if self.codes is not None:
            return code_values(self.codes, self.scale)
        assert self.values is not None
        return np.asarray(self.values, dtype=np.float32)

    def dense(self) -> np.ndarray:
        out = np.zeros(self.numel, dtype=np.float32)
        out[self.indices] = self.sent_values()
        return out


@dataclass(frozen=True, eq=False)
class DenseMessage:
    """Every element of a layer as fp32 values (fp16 encoders round them)."""

    layer: int
    numel: int
    values: np.ndarray

    @property
    def count(self) -> int:
        return self.numel

    def dense(self) -> np.ndarray:
        return np.asarray(self.values, dtype=np.float32)


@dataclass(frozen=True, eq=False)
class QSGDMessage:
    """QSGD levels: element i is ``norms[i // bucket_size] · levels_i / s`` (levels in −s..s)."""

    layer: int
    numel: int
    bucket_size: int
    s: int
    norms: np.ndarray
    levels: np.ndarray

    @property
    def count(self) -> int:
        return self.numel

    def dense(self) -> np.ndarray:
        return qsgd_values(self.norms, self.levels, self.bucket_size, self.s)


def qsgd_values(norms: np.ndarray, levels: np.ndarray, bucket_size: int, s: int) -> np.ndarray:
    """fp32 ``norm_bucket · level / s`` per element (the one formula both ends use)."""
    numel = levels.size
    per_element = np.repeat(np.asarray(norms, dtype=np.float32), bucket_size)[:numel]
    return (per_element * (levels.astype(np.float32) / np.float32(s))).astype(np.float32)
