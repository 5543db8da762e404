"""The paper's variance-based compressor: delay an element until it is unambiguous.

Tsuzuku, Imachi, Akiba, *Variance-based Gradient Compression for Efficient Distributed Deep
Learning*, ICLR workshop 2018, Algorithm 1, and the readings of its ambiguous steps
(``docs/compression.md``). The paper's own rule (``after_send="reset"``, the default) keeps
what was not sent but clears ``r`` of a sent element, dropping its quantization error.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from vgcsim.traces.compression.base import LayerStep, Payload, check_choice
from vgcsim.traces.compression.compressors.sparse import (
    VALUE_FORMATS,
    SparseCompressor,
    sparse_payload,
    state_input,
)
from vgcsim.traces.wire.quantize import ROUNDINGS, SCALES

from vgcsim.core.errors import ConfigError

VARIANCE_READINGS = ("sqsum", "centered")
#: What happens to a sent element's state: the paper's r ← 0, v ← 0, or r −= q, v ← 0.
AFTER_SEND_RULES = ("reset", "error_feedback")
#: What happens to an element that passes the test with |r| below the smallest 4-bit level.
BELOW_FLOOR_RULES = ("keep", "floor")
#: Divisor of the per-step variance term: |B|² (variance of the minibatch mean) or |B|.
VARIANCE_SCALES = ("batch_mean", "per_sample")
#: The smallest magnitude of the 4-bit code relative to its scale M: M·2^-7.
_FLOOR = np.float32(2.0**-7)


@dataclass
class VarianceState:
    """Residual ``r`` and the variance accumulator ``v`` of the paper's Algorithm 1."""

    residual: torch.Tensor
    variance: torch.Tensor


def check_variance_test(name: str, c: Any) -> None:
    """ConfigError for the variance test's hyperparameters (variance and hybrid): alpha,
    zeta, the variance reading and scale, the post-send rule."""
    if not (c.alpha >= 0 and math.isfinite(c.alpha)):
        raise ConfigError(f"{name}: alpha must be a finite number >= 0, got {c.alpha}")
    if not 0 <= c.zeta <= 1:
        raise ConfigError(f"{name}: zeta must be in [0, 1], got {c.zeta}")
    check_choice("variance reading", c.variance, VARIANCE_READINGS)
    check_choice("variance_scale", c.variance_scale, VARIANCE_SCALES)
    check_choice("after_send rule", c.after_send, AFTER_SEND_RULES)


@dataclass(frozen=True)
class VarianceParams:
    """Hyperparameters of the paper's variance-based compressor.

    alpha: element i passes when r_i² > alpha·v_i (paper default 2; 0 passes every nonzero).
    zeta: decay of v for unsent elements per step (paper default 0.999).
    variance: reading of the per-step variance term added to v (S_i = Σ_z (∇_i f_z)²,
        g_i = ∇_i f_B the worker's mean gradient, D the divisor of ``variance_scale``) —
        "sqsum" (default, the paper's Algorithm 1): v += S_i / D;
        "centered": v += (S_i/|B| − g_i²)·|B| / D, the criterion's literal
        α′·V_B[∇_i f_z] with the (biased) sample variance.
    variance_scale: the divisor D — "batch_mean" (default, D = |B|², the variance of the
        minibatch mean: Σ_z g_z²/|B|² as Algorithm 1 prints it) or "per_sample" (D = |B|,
        the |B|-times-larger reading Σ_z g_z²/|B| of another public re-implementation).
    after_send: state of a sent element — "reset" (default, the paper's Algorithm 1 as
        both public re-implementations read it: r_i ← 0, v_i ← 0; the quantization error
        is dropped) or "error_feedback" (r_i −= q_i, v_i ← 0: the error stays in r).
    below_floor: values == "code4" only. An element that passes the test but whose |r_i|
        is below the smallest level M·2^-7 of its message — "keep" (default): it is not
        sent and stays in r and v like any unsent element (v decays by zeta); "floor":
        it is sent as ±M·2^-7. With scale "max", M is the max |r| of the elements that
        pass, so the largest element is always sent and M is the same under both rules;
        with scale "mean", M is recomputed over the kept elements until none falls below.
    scale: choice of the per-message scale M of the 4-bit code ("max" or "mean").
    rounding: 4-bit rounding rule ("nearest", "log", "down"); see vgcsim.traces.wire.quantize.
    values: "code4" (the paper's 4-bit code) or "fp32" (unquantized, for ablations).
    """

    alpha: float = 2.0
    zeta: float = 0.999
    variance: str = "sqsum"
    variance_scale: str = "batch_mean"
    after_send: str = "reset"
    below_floor: str = "keep"
    scale: str = "max"
    rounding: str = "nearest"
    values: str = "code4"


class VarianceCompressor(SparseCompressor):
    """Tsuzuku et al. 2018, Algorithm 1: delay an element until it is unambiguous.

    Per element: r += g; v += Σ_z (∇_i f_z)²/|B|² (``variance``, ``variance_scale``);
    the element passes when r² > α·v; with the 4-bit code and ``below_floor="keep"`` a
    passing element with |r| < M·2^-7 is held back. A sent element is coded as q and then
    r ← 0, v ← 0 (default ``after_send="reset"``) or r −= q, v ← 0 ("error_feedback");
    every unsent element keeps r and has v *= ζ.
    """

    name = "variance"
    needs_sqsum = True
    Params = VarianceParams

    def _validate(self) -> None:
        c = self.config
        check_variance_test(self.name, c)
        check_choice("below_floor rule", c.below_floor, BELOW_FLOOR_RULES)
        check_choice("scale rule", c.scale, SCALES)
        check_choice("rounding rule", c.rounding, ROUNDINGS)
        check_choice("value format", c.values, VALUE_FORMATS)

    def init_state(self, numel: int) -> VarianceState:
        zeros = torch.zeros(numel, dtype=torch.float32)
        return VarianceState(zeros, zeros.clone())

    def _select(self, r: np.ndarray, v: np.ndarray) -> np.ndarray:
        """Indices i that pass the test r_i² > alpha·v_i (alpha = 0: every nonzero r_i)."""
        if self.config.alpha == 0:
            return np.flatnonzero(r)
        return np.flatnonzero(np.square(r) > self.config.alpha * v)

    def _compress(self, grad: torch.Tensor, state: VarianceState, step: LayerStep) -> Payload:
        if step.sqsum is None:
            raise ValueError(f"{self.name} needs sqsum (per-element Σ_z (∇f_z)²)")
        r, v = state.residual.numpy(), state.variance.numpy()
        g, sq = state_input(grad, r.size, "grad"), state_input(step.sqsum, r.size, "sqsum")
        r += g
        b = np.float32(step.batch_size)
        per_sample = self.config.variance_scale == "per_sample"
        if self.config.variance == "sqsum":
            v += sq / b if per_sample else sq * np.float32(1.0 / float(step.batch_size) ** 2)
        else:
            centered = np.maximum(sq / b - g * g, 0)
            v += centered if per_sample else centered / b
        indices = self._select(r, v)
        indices = self._above_floor(r, indices)
        payload = self._send(r, indices, step.layer)
        v *= np.float32(self.config.zeta)
        v[indices] = 0.0
        return payload

    def _above_floor(self, r: np.ndarray, indices: np.ndarray) -> np.ndarray:
        """``indices`` without those whose |r| is below the message's smallest level M·2^-7.

        Only for the 4-bit code with ``below_floor="keep"``. With scale "max" one pass
        suffices (M = max |r| is never dropped); with "mean", dropping small elements
        raises M, so the rule is applied until no kept element falls below M·2^-7.
        """
        c = self.config
        if c.values != "code4" or c.below_floor != "keep":
            return indices
        while indices.size:
            magnitude = np.abs(r[indices])
            if c.scale == "max":
                m = magnitude.max()
            else:
                m = np.float32(magnitude.mean(dtype=np.float64))
            keep = magnitude >= m * _FLOOR
            if keep.all():
                break
            indices = indices[keep]
        return indices

    def _send(self, r: np.ndarray, indices: np.ndarray, layer: int) -> Payload:
        c = self.config
        return sparse_payload(
            self,
            r,
            indices,
            layer=layer,
            values=c.values,
            scale=c.scale,
            rounding=c.rounding,
            after_send=c.after_send,
        )
