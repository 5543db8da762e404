"""The bounded exchange of vgcsim's DDP hook: the rule that sizes each bucket's all_gather.

The hook (the training stage's DDP communication hook) sends every rank's message of a bucket
(``int32 [total bytes, bytes of each layer]`` then the layers' encoded buffers) in one plain
``all_gather`` of equal blocks of ``bound`` bytes: each message cut or zero-padded to the
bound. When a rank's message was longer, every rank sees it in the gathered lengths and a
second ``all_gather`` (the *fallback round*) carries the bytes past the bound, every block
padded to ``align(largest message) − bound``. After each exchange the bucket's next bound is
:func:`message_bound_bytes` of the largest messages of its last :data:`BOUND_HISTORY`
exchanges. The first exchange of a bucket has no history: its bound is the aligned header.

This module holds the rule once, below the hook that runs it and the two stages that price
it (``allgatherv/bounded`` in the cost models' collectives and in the simulator's), so that
the bytes priced from a trace the hook wrote equal the bytes the hook counted
(``StepCommStats.wire_bytes``) to the byte.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

__all__ = [
    "BOUND_ALIGN",
    "BOUND_HEADROOM",
    "BOUND_HISTORY",
    "BOUND_QUANTILE",
    "align_bytes",
    "bounded_rounds",
    "message_bound_bytes",
    "message_header_bytes",
]

#: The next bound is the BOUND_QUANTILE quantile of the largest message (any rank, header
#: included) of each of the last BOUND_HISTORY exchanges of the bucket, times BOUND_HEADROOM,
#: rounded up to BOUND_ALIGN bytes. A message above the bound costs a second, smaller
#: all_gather (the bytes past the bound); a bound above the message costs padding. The bytes
#: sent per step against the payload, and the fallback rounds per step, are printed by
#: ``python benchmarks/ddp_hook.py --json`` (``bytes_per_step``, ``payload_bytes_per_step``,
#: ``fallback_rounds_per_step``).
BOUND_QUANTILE = 0.75
BOUND_HEADROOM = 1.1
BOUND_HISTORY = 16
#: Message bounds are multiples of this (keeps every rank's row 8-byte aligned).
BOUND_ALIGN = 8


def align_bytes(n: int) -> int:
    """``n`` rounded up to a multiple of :data:`BOUND_ALIGN`."""
    return -(-int(n) // BOUND_ALIGN) * BOUND_ALIGN


def message_header_bytes(n_layers: int) -> int:
    """Bytes of a bucket message's header: one int32 total plus one int32 per layer,
    ``4·(L + 1)``."""
    return 4 * (int(n_layers) + 1)


def message_bound_bytes(history: Sequence[int]) -> int:
    """The next exchange's bound from a bucket's recent largest messages (bytes):
    ``align(⌈m_(⌊q·n⌋) · h⌉)`` over the sorted ``n`` most recent (≤ 16) messages, q = 0.75,
    h = 1.1 (index clipped to n − 1)."""
    ordered = sorted(int(m) for m in history[-BOUND_HISTORY:])
    at = min(len(ordered) - 1, int(BOUND_QUANTILE * len(ordered)))
    return align_bytes(math.ceil(ordered[at] * BOUND_HEADROOM))


def bounded_rounds(message_bytes, first_bound_bytes: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Per exchange of one bucket, the block of the main round and of the fallback round.

    ``message_bytes`` is ``[T, P]`` (or ``[P]``: one exchange): every rank's message bytes
    (header included) of T successive exchanges of one bucket. Returns ``(bound, extra)``,
    each ``[T]`` int64: exchange t sends ``bound[t]`` bytes per rank, then, when its largest
    message ``m_t = max_r message[t, r]`` exceeds the bound, ``extra[t] = align(m_t) −
    bound[t]`` bytes per rank in the fallback round (else 0). ``bound[0] =
    first_bound_bytes`` (the hook: the aligned header, :func:`message_header_bytes`);
    ``bound[t] = message_bound_bytes(m_{t−16} … m_{t−1})``. Bytes one rank puts on the wire
    at exchange t: ``bound[t] + extra[t]`` (the hook's ``wire_bytes``)."""
    m = np.asarray(message_bytes)
    if m.ndim == 1:
        m = m[None, :]
    largest = [int(x) for x in np.max(m, axis=-1)] if m.shape[-1] else [0] * m.shape[0]
    bound = np.empty(len(largest), dtype=np.int64)
    extra = np.zeros(len(largest), dtype=np.int64)
    current = int(first_bound_bytes)
    for t, need in enumerate(largest):
        bound[t] = current
        if need > current:
            extra[t] = align_bytes(need) - current
        current = message_bound_bytes(largest[max(0, t + 1 - BOUND_HISTORY) : t + 1])
    return bound, extra
