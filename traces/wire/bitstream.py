"""Vectorized bit streams: MSB-first packing of variable-width fields and Elias codes.

Every function here works on whole numpy arrays; there is no per-element Python loop.
A *field* is a non-negative integer of at most 64 bits written with a given width; a
stream is the MSB-first concatenation of fields, zero-padded to whole bytes.

Elias codes (Elias 1975) of an integer ``n >= 1`` with ``N = floor(log2 n)``:

- gamma: ``N`` zeros then the ``N + 1`` binary digits of ``n``, i.e. ``n`` written in
  ``2N + 1`` bits (the leading zeros come for free);
- delta: ``gamma(N + 1)`` then the ``N`` low digits of ``n``: ``2 floor(log2(N+1)) + 1 + N`` bits.

Both fit one 64-bit field for ``n < 2**31``, which covers every index gap and QSGD level.
Decoding follows code boundaries with pointer doubling: for every bit position the start
of the next code is computed at once, and the chain from the first code is unrolled in
``log2(count)`` vector steps.
"""

from __future__ import annotations

import numpy as np

_U64 = np.uint64


def floor_log2(n: np.ndarray) -> np.ndarray:
    """Exact ``floor(log2 n)`` for integers ``1 <= n < 2**53`` (via ``frexp``, no rounding)."""
    _, exponent = np.frexp(np.asarray(n, dtype=np.float64))
    return exponent.astype(np.int64) - 1


def gamma_lengths(n: np.ndarray) -> np.ndarray:
    """Bit length of the Elias-gamma code of each ``n >= 1``: ``2 floor(log2 n) + 1``."""
    return 2 * floor_log2(n) + 1


def delta_lengths(n: np.ndarray) -> np.ndarray:
    """Bit length of the Elias-delta code of each ``n >= 1``: ``2 floor(log2(N+1)) + 1 + N``."""
    big_n = floor_log2(n)
    return 2 * floor_log2(big_n + 1) + 1 + big_n


def gamma_fields(n: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Elias-gamma codes of ``n >= 1`` as (field values, field widths)."""
    n = np.asarray(n, dtype=np.int64)
    return n.astype(_U64), gamma_lengths(n)


def delta_fields(n: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Elias-delta codes of ``n >= 1`` as (field values, field widths)."""
    n = np.asarray(n, dtype=np.int64)
    big_n = floor_log2(n)
    length_code = big_n + 1
    width = 2 * floor_log2(length_code) + 1 + big_n
    low = n - (np.int64(1) << big_n)
    values = (length_code.astype(_U64) << big_n.astype(_U64)) | low.astype(_U64)
    return values, width


def pack_fields(values: np.ndarray, widths: np.ndarray) -> bytes:
    """Concatenate fields MSB-first (each ``values[i]`` in ``widths[i]`` bits), pad to bytes."""
    widths = np.asarray(widths, dtype=np.int64)
    total = int(widths.sum())
    if total == 0:
        return b""
    values = np.asarray(values, dtype=_U64)
    starts = np.cumsum(widths) - widths
    owner = np.repeat(np.arange(widths.size), widths)
    shift = (np.repeat(starts + widths - 1, widths) - np.arange(total)).astype(_U64)
    bits = ((values[owner] >> shift) & _U64(1)).astype(np.uint8)
    return np.packbits(bits).tobytes()


def pack_fixed(values: np.ndarray, width: int) -> bytes:
    """Concatenate ``values`` MSB-first in ``width`` bits each, zero-padded to bytes."""
    values = np.asarray(values, dtype=np.uint8 if width <= 8 else _U64)
    if values.size == 0:
        return b""
    if width == 4:
        padded = values if values.size % 2 == 0 else np.append(values, np.uint8(0))
        return ((padded[0::2] << 4) | padded[1::2]).astype(np.uint8).tobytes()
    if width == 8:
        return values.astype(np.uint8).tobytes()
    shifts = np.arange(width - 1, -1, -1, dtype=values.dtype)
    bits = ((values[:, None] >> shifts) & values.dtype.type(1)).astype(np.uint8)
    return np.packbits(bits.ravel()).tobytes()


def unpack_fixed(data: bytes | np.ndarray, width: int, count: int) -> np.ndarray:
    """Inverse of :func:`pack_fixed`: ``count`` fields of ``width`` bits (int64)."""
    raw = np.frombuffer(data, dtype=np.uint8) if isinstance(data, bytes) else data
    if count == 0:
        return np.zeros(0, dtype=np.int64)
    if width == 4:
        out = np.empty(2 * raw.size, dtype=np.uint8)
        out[0::2] = raw >> 4
        out[1::2] = raw & 15
        return out[:count].astype(np.int64)
    if width == 8:
        return raw[:count].astype(np.int64)
    bits = np.unpackbits(raw)[: count * width].reshape(count, width).astype(np.int64)
    weights = np.int64(1) << np.arange(width - 1, -1, -1, dtype=np.int64)
    return bits @ weights


def read_fields(bits: np.ndarray, positions: np.ndarray, widths: np.ndarray) -> np.ndarray:
    """Read fields of ``widths[i]`` bits (``<= 64``) starting at bit ``positions[i]``."""
    widths = np.asarray(widths, dtype=np.int64)
    out = np.zeros(widths.size, dtype=_U64)
    nonzero = widths > 0
    if not nonzero.any():
        return out
    w = widths[nonzero]
    p = np.asarray(positions, dtype=np.int64)[nonzero]
    total = int(w.sum())
    starts = np.cumsum(w) - w
    offset = np.arange(total) - np.repeat(starts, w)
    b = bits[np.repeat(p, w) + offset].astype(_U64)
    shift = (np.repeat(w - 1, w) - offset).astype(_U64)
    out[nonzero] = np.add.reduceat(b << shift, starts)
    return out


def _zero_runs(bits: np.ndarray) -> np.ndarray:
    """For every position p (and p = len), the number of zeros from p to the next one bit."""
    size = bits.size
    positions = np.arange(size + 1, dtype=np.int64)
    # next one at or after p: a reversed running minimum over "p if bit p is set else size"
    marks = np.where(np.append(bits, np.uint8(1)).astype(bool), positions, size)
    next_one = np.minimum.accumulate(marks[::-1])[::-1]
    return next_one - positions


def _chain(next_start: np.ndarray, count: int) -> np.ndarray:
    """Positions of the first ``count`` codes, following ``next_start`` from position 0."""
    positions = np.zeros(1, dtype=np.int64)
    jump = next_start
    while positions.size < count:
        positions = np.concatenate([positions, jump[positions]])
        if positions.size < count:
            jump = jump[jump]
    positions = positions[:count]
    if positions.size and positions[-1] >= next_start.size - 1:
        raise ValueError("bit stream ends before all codes were read")
    return positions


def _bits_of(data: bytes | np.ndarray) -> np.ndarray:
    raw = np.frombuffer(data, dtype=np.uint8) if isinstance(data, bytes) else data
    return np.unpackbits(raw)


def decode_gamma(data: bytes | np.ndarray, count: int) -> np.ndarray:
    """Decode ``count`` consecutive Elias-gamma codes from the start of ``data`` (int64)."""
    if count == 0:
        return np.zeros(0, dtype=np.int64)
    bits = _bits_of(data)
    size = bits.size
    zeros = _zero_runs(bits)
    nxt = np.minimum(np.arange(size + 1) + 2 * zeros + 1, size)
    starts = _chain(nxt, count)
    z = zeros[starts]
    if (starts + 2 * z + 1 > size).any():
        raise ValueError("bit stream ends before all codes were read")
    return read_fields(bits, starts + z, z + 1).astype(np.int64)


def decode_delta(data: bytes | np.ndarray, count: int) -> np.ndarray:
    """Decode ``count`` consecutive Elias-delta codes from the start of ``data`` (int64)."""
    if count == 0:
        return np.zeros(0, dtype=np.int64)
    bits = _bits_of(data)
    size = bits.size
    zeros = _zero_runs(bits)
    # An int64 value has L <= 63 bits, so gamma(L) has at most 5 leading zeros; a longer
    # prefix (L >= 64: a value of 2^63 or more) is refused. L is read through an 8-bit window.
    padded = np.concatenate([bits, np.zeros(16, dtype=np.uint8)]).astype(np.int64)
    window = np.zeros(size + 9, dtype=np.int64)
    for j in range(8):
        window += padded[j : j + size + 9] << (7 - j)
    pos = np.arange(size + 1)
    z = np.minimum(zeros, 7)
    length_code = window[pos + z] >> (7 - z)
    valid = (zeros <= 5) & (length_code >= 1)
    nxt = np.where(valid, pos + 2 * z + 1 + length_code - 1, size)
    nxt = np.minimum(nxt, size)
    starts = _chain(nxt, count)
    z_s = z[starts]
    big_n = length_code[starts] - 1
    if not valid[starts].all() or (starts + 2 * z_s + 1 + big_n > size).any():
        raise ValueError("bit stream ends before all codes were read")
    low = read_fields(bits, starts + 2 * z_s + 1, big_n).astype(np.int64)
    return (np.int64(1) << big_n) | low


def decode_fields_sequence(
    data: bytes | np.ndarray, count: int, pattern: tuple[str, ...]
) -> list[np.ndarray]:
    """Decode ``count`` repetitions of a pattern of fields, e.g. ``("gamma", "bit", "gamma")``.

    Returns one int64 array per pattern entry. Only ``"gamma"`` and ``"bit"`` are supported.
    """
    out = [np.zeros(0, dtype=np.int64) for _ in pattern]
    if count == 0:
        return out
    bits = _bits_of(data)
    size = bits.size
    zeros = _zero_runs(bits)
    cursor = np.arange(size + 1)  # from each bit position: where one pattern ends
    for kind in pattern:
        here = np.minimum(cursor, size)
        step = 2 * zeros[here] + 1 if kind == "gamma" else np.ones(size + 1, dtype=np.int64)
        cursor = np.minimum(here + step, size)
    starts = _chain(cursor, count)
    cursor = starts
    for i, kind in enumerate(pattern):
        if kind == "gamma":
            z = zeros[cursor]
            out[i] = read_fields(bits, cursor + z, z + 1).astype(np.int64)
            cursor = cursor + 2 * z + 1
        elif kind == "bit":
            out[i] = bits[cursor].astype(np.int64)
            cursor = cursor + 1
        else:
            raise ValueError(f"unknown field kind {kind!r}")
    return out
