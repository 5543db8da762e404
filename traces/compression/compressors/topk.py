"""Top-k magnitude selection with error feedback (beyond the paper; today's reference).

Aji & Heafield 2017; Lin et al. (DGC) 2018: per layer, send the k = ⌈fraction·n⌉ largest
|r_i| of the residual r += g, keep the rest (and the quantization error) in r.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from vgcsim.core.errors import ConfigError
from vgcsim.traces.compression.base import CodecProfile, LayerStep, Payload, check_choice
from vgcsim.traces.compression.compressors.sparse import (
    SPARSE_DECODE_DERIVATION,
    SPARSE_ENCODE_DERIVATION,
    VALUE_FORMATS,
    ResidualState,
    SparseCompressor,
    sparse_payload,
    state_input,
)
from vgcsim.traces.wire.quantize import ROUNDINGS, SCALES

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True)
class TopKParams:
    """fraction: share of elements sent per layer, k = ceil(fraction·n) (1.0 sends all).

    values: "code4" (default: the same 4-bit code as the paper's method, so comparisons
    isolate the selection rule) or "fp32" (the usual top-k wire format: index + fp32).
    scale / rounding: as for the variance compressor when values == "code4".
    """

    fraction: float = 0.01
    values: str = "code4"
    scale: str = "max"
    rounding: str = "nearest"


class TopKCompressor(SparseCompressor):
    """Top-k magnitude selection with error feedback. Its label is the default one (up to
    two scalar hyperparameters)."""

    name = "topk"
    Params = TopKParams
    codec_profile = CodecProfile(
        20.0,
        16.0,
        6,
        8.0,
        2,
        0.0,
        16.0,
        2,
        "compress: r ← r + g (12 B), radix top-k selection over |r| in two passes (8 B) = 20 B "
        "per element; per sent element gather r (4 B), write index + value (8 B), zero r (4 B) "
        f"= 16 B; 6 kernels. {SPARSE_ENCODE_DERIVATION}. {SPARSE_DECODE_DERIVATION}",
    )

    def _validate(self) -> None:
        c = self.config
        if not 0 < c.fraction <= 1:
            raise ConfigError(f"topk: fraction must be in (0, 1], got {c.fraction}")
        check_choice("value format", c.values, VALUE_FORMATS)
        check_choice("scale rule", c.scale, SCALES)
        check_choice("rounding rule", c.rounding, ROUNDINGS)

    def _compress(self, grad: torch.Tensor, state: ResidualState, step: LayerStep) -> Payload:
        r = state.residual.numpy()
        r += state_input(grad, r.size, "grad")
        n = r.size
        k = min(n, max(1, math.ceil(self.config.fraction * n)))
        if k == n:
            indices = np.arange(n)
        else:
            indices = np.sort(np.argpartition(np.abs(r), n - k)[n - k :])
        c = self.config
        return sparse_payload(
            self, r, indices, layer=step.layer, values=c.values, scale=c.scale, rounding=c.rounding
        )
