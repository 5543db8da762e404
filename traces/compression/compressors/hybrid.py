"""The paper's hybrid: the variance test AND Strom's threshold, values ±τ.

Tsuzuku, Imachi, Akiba 2018, Section 4: an element is sent when it passes both the
variance test r² > α·v and Strom's |r| ≥ τ.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from vgcsim.traces.compression.base import Payload
from vgcsim.traces.compression.compressors.sparse import sparse_payload
from vgcsim.traces.compression.compressors.strom import check_tau
from vgcsim.traces.compression.compressors.variance import VarianceCompressor, check_variance_test


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

    def _values_format(self) -> str:
        return "code4"

    def _validate(self) -> None:
        check_tau(self.name, self.config.tau)
        check_variance_test(self.name, self.config)

    def _above_floor(self, r: np.ndarray, indices: np.ndarray) -> np.ndarray:
        return indices

    def _select(self, r: np.ndarray, v: np.ndarray) -> np.ndarray:
        passes = (np.abs(r) >= np.float32(self.config.tau)) & (np.square(r) > self.config.alpha * v)
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
