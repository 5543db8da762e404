"""The paper's hybrid: the variance test AND Strom's threshold, values ±τ.

Tsuzuku, Imachi, Akiba 2018, Section 4: an element is sent when it passes both the
variance test r² > α·v and Strom's |r| ≥ τ.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from vgcsim.traces.compression.base import CodecProfile, Payload, label_number
from vgcsim.traces.compression.compressors.sparse import (
    SPARSE_DECODE_DERIVATION,
    SPARSE_ENCODE_DERIVATION,
    sparse_payload,
)
from vgcsim.traces.compression.compressors.strom import check_tau
from vgcsim.traces.compression.compressors.variance_based import (
    VarianceCompressor,
    check_variance_test,
    passes_test,
    reading_suffix,
)


@dataclass(frozen=True)
class HybridParams:
    """The paper's combination of the variance test with Strom's threshold.

    Element i is sent when BOTH |r_i| ≥ tau and r_i² > alpha·v_i, as ±tau (Strom's value);
    then v_i ← 0 and, by ``after_send``, r_i ← 0 ("reset", default, as for the variance
    compressor) or r_i ∓= tau ("error_feedback"); unsent, v *= zeta. ``variance`` and
    ``variance_scale`` read v's per-step term as for the variance compressor. There is no
    floor: every sent value is ±tau.
    """

    tau: float = 0.01
    alpha: float = 2.0
    zeta: float = 0.999
    variance: str = "sqsum"
    variance_scale: str = "batch_mean"
    after_send: str = "reset"


class HybridCompressor(VarianceCompressor):
    """Variance test AND Strom threshold; values ±τ (Tsuzuku et al. 2018, Section 4)."""

    name = "hybrid"
    needs_sqsum = True
    Params = HybridParams
    codec_profile = CodecProfile(
        34.0,
        20.0,
        7,
        8.0,
        2,
        0.0,
        16.0,
        2,
        "as variance (the same residual, variance and test passes) plus the Strom threshold "
        f"folded into the test kernel's compare; 7 kernels. {SPARSE_ENCODE_DERIVATION}. "
        f"{SPARSE_DECODE_DERIVATION}",
    )

    @classmethod
    def label(cls, params: Mapping[str, Any]) -> str:
        alpha, tau = label_number(params.get("alpha", "?")), label_number(params.get("tau", "?"))
        return f"hybrid α={alpha}, τ={tau}{reading_suffix(params)}"

    def _values_format(self) -> str:
        return "code4"

    def _validate(self) -> None:
        check_tau(self.name, self.config.tau)
        check_variance_test(self.name, self.config)

    def _above_floor(self, r: np.ndarray, indices: np.ndarray) -> np.ndarray:
        return indices

    def _select(self, r: np.ndarray, v: np.ndarray) -> np.ndarray:
        passes = (np.abs(r) >= np.float32(self.config.tau)) & passes_test(r, v, self.config.alpha)
        return np.flatnonzero(passes)

    def _send(self, r: np.ndarray, indices: np.ndarray, layer: int) -> Payload:
        return sparse_payload(
            self,
            r,
            indices,
            layer=layer,
            values="code4",
            fixed_magnitude=self.config.tau,
            after_send=self.config.after_send,
        )
