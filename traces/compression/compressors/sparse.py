"""What the sparse compressors share: the residual state, the quantize-and-send step, and
the sparse encodings (variance, strom, hybrid, topk).

Error feedback (strom, topk, and variance/hybrid with ``after_send="error_feedback"``) keeps
what was not sent and the quantization error of what was in the residual ``r``, so
Σ decoded + r == Σ inputs element by element.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from vgcsim.traces.compression.base import Compressor, Payload, check_grad, make_payload
from vgcsim.traces.wire.encoders import SPARSE_ENCODINGS
from vgcsim.traces.wire.messages import CODE_SIGN_BIT, SparseMessage
from vgcsim.traces.wire.quantize import quantize_log4

if TYPE_CHECKING:
    import torch

VALUE_FORMATS = ("code4", "fp32")

#: How the sparse compressors' codec profiles count decode and encode (their
#: ``codec_profile`` derivations end with these).
SPARSE_DECODE_DERIVATION = (
    "decode: read the payload bytes, unpack each sent element to (index, value) and "
    "scatter-add it into the fp32 accumulator: read index + value 8 B, read + write the "
    "accumulator 8 B = 16 B per sent element; 2 kernels per layer (unpack, scatter-add)"
)
SPARSE_ENCODE_DERIVATION = (
    "encode: read each sent element's index and code (8 B) and write the payload bytes; "
    "2 kernels per layer (bit-length prefix sum, write)"
)


@dataclass
class ResidualState:
    """Error-feedback residual ``r`` (what was accumulated but not yet sent)."""

    residual: torch.Tensor


def state_input(t: torch.Tensor, state_numel: int, what: str) -> np.ndarray:
    """1-D fp32 numpy view (shared memory) of a gradient or sqsum that must match the
    state's element count: numpy would broadcast a one-element input over the whole
    residual without a word."""
    a = check_grad(t).numpy()
    if a.size != state_numel:
        raise ValueError(
            f"{what} has {a.size} elements but the compressor state holds {state_numel} "
            "(a state belongs to one (worker, layer))"
        )
    return a


def sparse_payload(
    compressor: Compressor,
    residual: np.ndarray,
    indices: np.ndarray,
    *,
    layer: int,
    values: str,
    scale: str = "max",
    rounding: str = "nearest",
    fixed_magnitude: float | None = None,
    after_send: str = "error_feedback",
) -> Payload:
    """Quantize ``residual[indices]``, update it, and build the payload.

    ``residual`` is a numpy view of the state tensor (updated in place): after the send,
    ``after_send="error_feedback"`` leaves ``r − q`` (the quantization error) in it,
    ``"reset"`` sets it to 0. ``fixed_magnitude``
    sends ``±fixed_magnitude`` (strom, hybrid) as code ``e = 0`` with scale
    ``M = fixed_magnitude``. Elementwise work is numpy: single-threaded and free of
    per-op dispatch cost, which dominates on the many small layers of a model.
    """
    numel = residual.size
    picked = residual[indices]
    if fixed_magnitude is not None:
        tau = np.float32(fixed_magnitude)
        negative = picked < 0
        codes = negative.astype(np.uint8) * np.uint8(CODE_SIGN_BIT)
        q = np.where(negative, -tau, tau).astype(np.float32)
        msg = SparseMessage(layer, numel, indices, codes, float(tau))
    elif values == "code4":
        codes, m, q = quantize_log4(picked, scale=scale, rounding=rounding)
        msg = SparseMessage(layer, numel, indices, codes, m)
    else:
        q = picked
        msg = SparseMessage(layer, numel, indices, values=q)
    if after_send == "reset":
        residual[indices] = 0.0
    else:
        residual[indices] = picked - q
    return make_payload(
        msg,
        sent=indices.size,
        encodings=compressor.encodings,
        primary=compressor.primary_encoding,
        decode_context={"coded": msg.coded},
    )


class SparseCompressor(Compressor):
    """Shared encodings for compressors whose payload is a sparse message."""

    def _values_format(self) -> str:
        return getattr(self.config, "values", "code4")

    @property
    def encodings(self) -> tuple[str, ...]:
        if self._values_format() == "code4":
            return SPARSE_ENCODINGS
        return tuple(e for e in SPARSE_ENCODINGS if e != "packed32")

    @property
    def primary_encoding(self) -> str:
        return "packed32" if self._values_format() == "code4" else "coo64"

    def init_state(self, numel: int) -> ResidualState:
        import torch

        return ResidualState(torch.zeros(numel, dtype=torch.float32))
