"""Strom 2015: send ±τ where the accumulated residual reaches the threshold τ.

Strom, *Scalable distributed DNN training using commodity GPU cloud computing*,
Interspeech 2015. r += g; elements with |r_i| ≥ τ are sent as ±τ and r_i ∓= τ.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from vgcsim.core.errors import ConfigError
from vgcsim.traces.compression.base import CodecProfile, LayerStep, Payload, label_number
from vgcsim.traces.compression.compressors.sparse import (
    SPARSE_DECODE_DERIVATION,
    SPARSE_ENCODE_DERIVATION,
    ResidualState,
    SparseCompressor,
    sparse_payload,
    state_input,
)

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True)
class StromParams:
    """tau: threshold τ; elements with |r_i| ≥ τ are sent as ±τ (τ = 0 sends every element)."""

    tau: float = 0.01


def check_tau(name: str, tau: float) -> None:
    """ConfigError unless τ is a finite number ≥ 0 (strom and hybrid)."""
    if not (tau >= 0 and math.isfinite(tau)):
        raise ConfigError(f"{name}: tau must be a finite number >= 0, got {tau}")


class StromCompressor(SparseCompressor):
    """Strom 2015: r += g; send ±τ where |r_i| ≥ τ; r_i ∓= τ."""

    name = "strom"
    Params = StromParams
    codec_profile = CodecProfile(
        18.0,
        20.0,
        5,
        8.0,
        2,
        0.0,
        16.0,
        2,
        "compress (N. Strom, Interspeech 2015): r ← r + g (12 B), test |r| ≥ τ (read r 4 B, "
        "write a 1 B mask), compact the mask (1 B) = 18 B per element; per sent element read r, "
        "write index + code, subtract ±τ from r (read + write) = 20 B; 5 kernels. "
        f"{SPARSE_ENCODE_DERIVATION}. {SPARSE_DECODE_DERIVATION}",
    )

    @classmethod
    def label(cls, params: Mapping[str, Any]) -> str:
        return f"Strom τ={label_number(params.get('tau', '?'))}"

    def _validate(self) -> None:
        check_tau(self.name, self.config.tau)

    def _compress(self, grad: torch.Tensor, state: ResidualState, step: LayerStep) -> Payload:
        r = state.residual.numpy()
        r += state_input(grad, r.size, "grad")
        indices = np.flatnonzero(np.abs(r) >= np.float32(self.config.tau))
        return sparse_payload(
            self, r, indices, layer=step.layer, values="code4", fixed_magnitude=self.config.tau
        )
