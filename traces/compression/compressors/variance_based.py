"""The paper's variance-based compressor: delay an element until it is unambiguous.

Tsuzuku, Imachi, Akiba, *Variance-based Gradient Compression for Efficient Distributed Deep
Learning*, ICLR workshop 2018, Algorithm 1, and the readings of its ambiguous steps
(``docs/compression.md``). The paper's own rule (``after_send="reset"``, the default) keeps
what was not sent but clears ``r`` of a sent element, dropping its quantization error.

The rule's element-wise steps are written once here in NumPy, :func:`add_to_state` and
:func:`passes_test` (the reference: the recorder's compressors and the hook codec's CPU pass
call them), and once in torch for the device
(:func:`vgcsim.traces.compression.torch_codec.accumulate_and_select`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from vgcsim.core.errors import ConfigError
from vgcsim.traces.compression.base import (
    CodecProfile,
    LayerStep,
    Payload,
    check_choice,
    label_number,
)
from vgcsim.traces.compression.compressors.sparse import (
    SPARSE_DECODE_DERIVATION,
    SPARSE_ENCODE_DERIVATION,
    VALUE_FORMATS,
    SparseCompressor,
    sparse_payload,
    state_input,
)
from vgcsim.traces.wire.quantize import ROUNDINGS, SCALES

if TYPE_CHECKING:
    import torch

VARIANCE_READINGS = ("sqsum", "centered")
#: What happens to a sent element's state: the paper's r ← 0, v ← 0, or r −= q, v ← 0.
AFTER_SEND_RULES = ("reset", "error_feedback")
#: What happens to an element that passes the test with |r| below the smallest 4-bit level.
BELOW_FLOOR_RULES = ("keep", "floor")
#: Divisor of the per-step variance term: |B|² (variance of the minibatch mean) or |B|.
VARIANCE_SCALES = ("batch_mean", "per_sample")
#: Readings of the variance/hybrid post-send rule and their defaults: a trace recorded under
#: another reading names it in its label, so two traces differing only in reading stay apart.
READING_DEFAULTS = {
    "after_send": "reset",
    "below_floor": "keep",
    "variance_scale": "batch_mean",
    "variance": "sqsum",
}
#: the parameters that choose a variance-test compressor's reading of the paper's rules
READING_KEYS = ("after_send", "below_floor", "variance_scale")


def reading_suffix(p: Mapping[str, Any]) -> str:
    """`` (error_feedback, floor)`` for the non-default readings present in ``p``, else ``""``."""
    other = [str(p[k]) for k, d in READING_DEFAULTS.items() if k in p and p[k] != d]
    return f" ({', '.join(other)})" if other else ""


#: The smallest magnitude of the 4-bit code relative to its scale M: M·2^-7.
FLOOR = np.float32(2.0**-7)


def add_to_state(
    r: np.ndarray,
    v: np.ndarray,
    g: np.ndarray,
    sq: np.ndarray,
    batch_size: int,
    *,
    variance: str,
    variance_scale: str,
    work: np.ndarray | None = None,
) -> None:
    """The rule's accumulation, in place on fp32 arrays: ``r += g`` and ``v +=`` the step's
    variance term from the squared sums ``sq`` over ``batch_size`` samples: S/|B|² ("sqsum",
    "batch_mean"), S/|B| ("per_sample"), or the centered (S/|B| − g²)⁺ over |B| or 1
    ("centered"). ``work``: an fp32 array of r's size for the term (no allocation)."""
    r += g
    b = np.float32(batch_size)
    per_sample = variance_scale == "per_sample"
    if variance == "sqsum":
        if per_sample:
            term = np.divide(sq, b, out=work)
        else:
            term = np.multiply(sq, np.float32(1.0 / float(batch_size) ** 2), out=work)
        v += term
    else:
        centered = np.maximum(sq / b - g * g, np.float32(0))
        v += centered if per_sample else centered / b


def passes_test(
    r: np.ndarray,
    v: np.ndarray,
    alpha: float,
    *,
    work: tuple[np.ndarray, np.ndarray] | None = None,
    out: np.ndarray | None = None,
) -> np.ndarray:
    """The variance test as a bool mask: r_i² > α·v_i in fp32 (α = 0: every nonzero r_i).
    ``work``: two fp32 arrays of r's size for r² and α·v; ``out``: the bool mask's array."""
    if alpha == 0:
        return np.not_equal(r, 0, out=out)
    a, b = work if work is not None else (None, None)
    return np.greater(np.square(r, out=a), np.multiply(v, np.float32(alpha), out=b), out=out)


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
    readings = READING_KEYS
    codec_profile = CodecProfile(
        34.0,
        20.0,
        6,
        8.0,
        2,
        0.0,
        16.0,
        2,
        "compress (Tsuzuku et al. 2018, Alg. 1): r ← r + g (read r, g, write r: 12 B), "
        "v ← v + σ² from the squared sums (read v, sq, write v: 12 B), test |r| > α√v (read r, "
        "v: 8 B, write a 1 B mask), compact the mask (1 B) = 34 B per element; per sent "
        "element read r (4 B), write index + code (8 B), reset r and v (8 B) = 20 B; 6 kernels. "
        f"{SPARSE_ENCODE_DERIVATION}. {SPARSE_DECODE_DERIVATION}",
    )

    @classmethod
    def label(cls, params: Mapping[str, Any]) -> str:
        return f"variance α={label_number(params.get('alpha', '?'))}{reading_suffix(params)}"

    def _validate(self) -> None:
        c = self.config
        check_variance_test(self.name, c)
        check_choice("below_floor rule", c.below_floor, BELOW_FLOOR_RULES)
        check_choice("scale rule", c.scale, SCALES)
        check_choice("rounding rule", c.rounding, ROUNDINGS)
        check_choice("value format", c.values, VALUE_FORMATS)

    def init_state(self, numel: int) -> VarianceState:
        import torch

        zeros = torch.zeros(numel, dtype=torch.float32)
        return VarianceState(zeros, zeros.clone())

    def _select(self, r: np.ndarray, v: np.ndarray) -> np.ndarray:
        """Indices i that pass the test r_i² > alpha·v_i (alpha = 0: every nonzero r_i)."""
        return np.flatnonzero(passes_test(r, v, self.config.alpha))

    def _compress(self, grad: torch.Tensor, state: VarianceState, step: LayerStep) -> Payload:
        if step.sqsum is None:
            raise ValueError(f"{self.name} needs sqsum (per-element Σ_z (∇f_z)²)")
        r, v = state.residual.numpy(), state.variance.numpy()
        g, sq = state_input(grad, r.size, "grad"), state_input(step.sqsum, r.size, "sqsum")
        c = self.config
        add_to_state(
            r, v, g, sq, step.batch_size, variance=c.variance, variance_scale=c.variance_scale
        )
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
            keep = magnitude >= m * FLOOR
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
