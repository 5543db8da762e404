"""The compressors: dense, the paper's variance-based method, and its baselines.

Each compressor maps one worker's mean minibatch gradient for one layer (1-D fp32), plus
its explicit per-(worker, layer) state, to a :class:`~vgcsim.traces.compression.base.Payload`.
Error-feedback compressors (Strom, top-k, and the variance/hybrid compressors with
``after_send="error_feedback"``) keep what they did not send and the quantization error of
what they did in a residual ``r``, so Σ decoded + r == Σ inputs element by element. The
paper's own rule (``after_send="reset"``, the default) keeps what was not sent but clears
``r`` of a sent element, dropping its quantization error.

Sources: Tsuzuku, Imachi, Akiba, *Variance-based Gradient Compression for Efficient
Distributed Deep Learning*, ICLR workshop 2018 (variance, hybrid, the 4-bit code);
Strom, *Scalable distributed DNN training using commodity GPU cloud computing*,
Interspeech 2015 (strom); Alistarh et al., *QSGD*, NeurIPS 2017 (qsgd); Aji & Heafield
2017 / Lin et al. (DGC) 2018 (topk with error feedback).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
from vgcsim.traces.compression.base import Compressor, Payload, check_grad, make_payload
from vgcsim.traces.compression.encoders import (
    DENSE_ENCODINGS,
    QSGD_ENCODINGS,
    SPARSE_ENCODINGS,
)
from vgcsim.traces.compression.messages import (
    CODE_SIGN_BIT,
    DenseMessage,
    QSGDMessage,
    SparseMessage,
)
from vgcsim.traces.compression.quantize import ROUNDINGS, SCALES, quantize_log4

from vgcsim.core.errors import ConfigError, unknown_name

VALUE_FORMATS = ("code4", "fp32")
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
class ResidualState:
    """Error-feedback residual ``r`` (what was accumulated but not yet sent)."""

    residual: torch.Tensor


@dataclass
class VarianceState:
    """Residual ``r`` and the variance accumulator ``v`` of the paper's Algorithm 1."""

    residual: torch.Tensor
    variance: torch.Tensor


def _check_choice(kind: str, value: str, valid: tuple[str, ...]) -> None:
    if value not in valid:
        raise unknown_name(kind, value, valid)


def _as_numpy(t: torch.Tensor) -> np.ndarray:
    """1-D fp32 numpy view (shared memory) of a gradient or state tensor."""
    return check_grad(t).numpy()


def _state_input(t: torch.Tensor, state_numel: int, what: str) -> np.ndarray:
    """:func:`_as_numpy` of a gradient or sqsum that must match the state's element count.

    numpy would broadcast a one-element input over the whole residual without a word.
    """
    a = _as_numpy(t)
    if a.size != state_numel:
        raise ValueError(
            f"{what} has {a.size} elements but the compressor state holds {state_numel} "
            "(a state belongs to one (worker, layer))"
        )
    return a


def _sparse_payload(
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


class _SparseCompressor(Compressor):
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
        return ResidualState(torch.zeros(numel, dtype=torch.float32))


# --------------------------------------------------------------------------- dense


@dataclass(frozen=True)
class DenseParams:
    """precision: "fp32" (what a dense allreduce carries) or "fp16" (values rounded to half)."""

    precision: str = "fp32"


class DenseCompressor(Compressor):
    """No compression: every element, fp32 (or fp16). Stateless; sends numel elements."""

    name = "dense"
    Params = DenseParams

    def _validate(self) -> None:
        _check_choice("precision", self.config.precision, DENSE_ENCODINGS)

    @property
    def encodings(self) -> tuple[str, ...]:
        return DENSE_ENCODINGS

    @property
    def primary_encoding(self) -> str:
        return self.config.precision

    def compress(
        self,
        grad: torch.Tensor,
        state: object,
        *,
        sqsum: torch.Tensor | None = None,
        batch_size: int = 1,
        layer: int = 0,
        generator: torch.Generator | None = None,
    ) -> Payload:
        g = check_grad(grad)
        if self.config.precision == "fp16":
            g = g.to(torch.float16).to(torch.float32)
        # A copy: the message must not alias the caller's gradient buffer.
        msg = DenseMessage(layer, g.numel(), g.numpy().copy())
        return make_payload(
            msg, sent=g.numel(), encodings=self.encodings, primary=self.primary_encoding
        )


# --------------------------------------------------------------------------- variance


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
    rounding: 4-bit rounding rule ("nearest", "log", "down"); see quantize.py.
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


class VarianceCompressor(_SparseCompressor):
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
        if not (c.alpha >= 0 and math.isfinite(c.alpha)):
            raise ConfigError(f"variance: alpha must be a finite number >= 0, got {c.alpha}")
        if not 0 <= c.zeta <= 1:
            raise ConfigError(f"variance: zeta must be in [0, 1], got {c.zeta}")
        _check_choice("variance reading", c.variance, VARIANCE_READINGS)
        _check_choice("variance_scale", c.variance_scale, VARIANCE_SCALES)
        _check_choice("after_send rule", c.after_send, AFTER_SEND_RULES)
        _check_choice("below_floor rule", c.below_floor, BELOW_FLOOR_RULES)
        _check_choice("scale rule", c.scale, SCALES)
        _check_choice("rounding rule", c.rounding, ROUNDINGS)
        _check_choice("value format", c.values, VALUE_FORMATS)

    def init_state(self, numel: int) -> VarianceState:
        zeros = torch.zeros(numel, dtype=torch.float32)
        return VarianceState(zeros, zeros.clone())

    def _select(self, r: np.ndarray, v: np.ndarray) -> np.ndarray:
        """Indices i that pass the test r_i² > alpha·v_i (alpha = 0: every nonzero r_i)."""
        if self.config.alpha == 0:
            return np.flatnonzero(r)
        return np.flatnonzero(np.square(r) > self.config.alpha * v)

    def compress(
        self,
        grad: torch.Tensor,
        state: VarianceState,
        *,
        sqsum: torch.Tensor | None = None,
        batch_size: int = 1,
        layer: int = 0,
        generator: torch.Generator | None = None,
    ) -> Payload:
        if sqsum is None:
            raise ValueError(f"{self.name} needs sqsum (per-element Σ_z (∇f_z)²)")
        r, v = state.residual.numpy(), state.variance.numpy()
        g, sq = _state_input(grad, r.size, "grad"), _state_input(sqsum, r.size, "sqsum")
        r += g
        b = np.float32(batch_size)
        per_sample = self.config.variance_scale == "per_sample"
        if self.config.variance == "sqsum":
            v += sq / b if per_sample else sq * np.float32(1.0 / float(batch_size) ** 2)
        else:
            centered = np.maximum(sq / b - g * g, 0)
            v += centered if per_sample else centered / b
        indices = self._select(r, v)
        indices = self._above_floor(r, indices)
        payload = self._send(r, indices, layer)
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
        return _sparse_payload(
            self,
            r,
            indices,
            layer=layer,
            values=c.values,
            scale=c.scale,
            rounding=c.rounding,
            after_send=c.after_send,
        )


# --------------------------------------------------------------------------- strom


@dataclass(frozen=True)
class StromParams:
    """tau: threshold τ; elements with |r_i| ≥ τ are sent as ±τ (τ = 0 sends every element)."""

    tau: float = 0.01


class StromCompressor(_SparseCompressor):
    """Strom 2015: r += g; send ±τ where |r_i| ≥ τ; r_i ∓= τ."""

    name = "strom"
    Params = StromParams

    def _validate(self) -> None:
        tau = self.config.tau
        if not (tau >= 0 and math.isfinite(tau)):
            raise ConfigError(f"strom: tau must be a finite number >= 0, got {tau}")

    def compress(
        self,
        grad: torch.Tensor,
        state: ResidualState,
        *,
        sqsum: torch.Tensor | None = None,
        batch_size: int = 1,
        layer: int = 0,
        generator: torch.Generator | None = None,
    ) -> Payload:
        r = state.residual.numpy()
        r += _state_input(grad, r.size, "grad")
        indices = np.flatnonzero(np.abs(r) >= np.float32(self.config.tau))
        return _sparse_payload(
            self, r, indices, layer=layer, values="code4", fixed_magnitude=self.config.tau
        )


# --------------------------------------------------------------------------- hybrid


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
        c = self.config
        if not (c.tau >= 0 and math.isfinite(c.tau)):
            raise ConfigError(f"hybrid: tau must be a finite number >= 0, got {c.tau}")
        if not (c.alpha >= 0 and math.isfinite(c.alpha)):
            raise ConfigError(f"hybrid: alpha must be a finite number >= 0, got {c.alpha}")
        if not 0 <= c.zeta <= 1:
            raise ConfigError(f"hybrid: zeta must be in [0, 1], got {c.zeta}")
        _check_choice("variance reading", c.variance, VARIANCE_READINGS)
        _check_choice("variance_scale", c.variance_scale, VARIANCE_SCALES)
        _check_choice("after_send rule", c.after_send, AFTER_SEND_RULES)

    def _above_floor(self, r: np.ndarray, indices: np.ndarray) -> np.ndarray:
        return indices

    def _select(self, r: np.ndarray, v: np.ndarray) -> np.ndarray:
        passes = (np.abs(r) >= np.float32(self.config.tau)) & (np.square(r) > self.config.alpha * v)
        return np.flatnonzero(passes)

    def _send(self, r: np.ndarray, indices: np.ndarray, layer: int) -> Payload:
        return _sparse_payload(
            self,
            r,
            indices,
            layer=layer,
            values="code4",
            fixed_magnitude=self.config.tau,
            after_send=self.config.after_send,
        )


# --------------------------------------------------------------------------- topk


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


class TopKCompressor(_SparseCompressor):
    """Top-k magnitude selection with error feedback (beyond the paper; today's reference)."""

    name = "topk"
    Params = TopKParams

    def _validate(self) -> None:
        c = self.config
        if not 0 < c.fraction <= 1:
            raise ConfigError(f"topk: fraction must be in (0, 1], got {c.fraction}")
        _check_choice("value format", c.values, VALUE_FORMATS)
        _check_choice("scale rule", c.scale, SCALES)
        _check_choice("rounding rule", c.rounding, ROUNDINGS)

    def compress(
        self,
        grad: torch.Tensor,
        state: ResidualState,
        *,
        sqsum: torch.Tensor | None = None,
        batch_size: int = 1,
        layer: int = 0,
        generator: torch.Generator | None = None,
    ) -> Payload:
        r = state.residual.numpy()
        r += _state_input(grad, r.size, "grad")
        n = r.size
        k = min(n, max(1, math.ceil(self.config.fraction * n)))
        if k == n:
            indices = np.arange(n)
        else:
            indices = np.sort(np.argpartition(np.abs(r), n - k)[n - k :])
        c = self.config
        return _sparse_payload(
            self, r, indices, layer=layer, values=c.values, scale=c.scale, rounding=c.rounding
        )


# --------------------------------------------------------------------------- qsgd


@dataclass(frozen=True)
class QSGDParams:
    """bits: bits per element including the sign (the paper's settings: 2, 3, 4).

    bucket_size: d, elements per bucket sharing one fp32 norm (paper: 128 for 2 bit, 512
        for 3 and 4 bit).
    levels: s, quantization levels; 0 means the default reading s = 2^(bits−1) − 1 (a sign
        bit plus a (bits−1)-bit magnitude in 0..s fills the fixed-width code exactly).
    primary: encoding that crosses the wire ("qsgd_elias" or "qsgd_fixed").
    """

    bits: int = 4
    bucket_size: int = 512
    levels: int = 0
    primary: str = "qsgd_elias"


class QSGDCompressor(Compressor):
    """Alistarh et al. 2017: per bucket, unbiased stochastic rounding of |x|/‖x‖·s.

    level_i = floor(s·|x_i|/‖x_b‖ + u_i), u_i ~ U[0, 1), value = sign·‖x_b‖·level_i/s, so
    E[value] = x_i and E‖value − x‖² ≤ min(d/s², √d/s)·‖x‖² (QSGD Lemma 3.1). No residual.
    """

    name = "qsgd"
    Params = QSGDParams

    def _validate(self) -> None:
        c = self.config
        if c.bits < 2 or c.bits > 16:
            raise ConfigError(f"qsgd: bits must be in 2..16, got {c.bits}")
        if c.bucket_size < 1:
            raise ConfigError(f"qsgd: bucket_size must be >= 1, got {c.bucket_size}")
        if c.levels < 0:
            raise ConfigError(f"qsgd: levels must be >= 0 (0 = from bits), got {c.levels}")
        _check_choice("qsgd encoding", c.primary, QSGD_ENCODINGS)

    @property
    def s(self) -> int:
        return self.config.levels or (1 << (self.config.bits - 1)) - 1

    @property
    def encodings(self) -> tuple[str, ...]:
        return QSGD_ENCODINGS

    @property
    def primary_encoding(self) -> str:
        return self.config.primary

    def quantize(
        self, g: torch.Tensor, generator: torch.Generator
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Per-bucket fp32 norms and signed integer levels of a 1-D fp32 tensor."""
        n, d, s = g.numel(), self.config.bucket_size, self.s
        buckets = -(-n // d)
        padded = torch.zeros(buckets * d, dtype=torch.float32)
        padded[:n] = g
        norms = padded.view(buckets, d).norm(dim=1)
        # An all-zero bucket has only zero elements: dividing them by 1 keeps level 0.
        safe = torch.where(norms > 0, norms, torch.ones_like(norms))
        ratio = g.abs().div_(safe.repeat_interleave(d)[:n]).mul_(s)
        ratio.add_(torch.rand(n, generator=generator, dtype=torch.float32))
        level = ratio.floor_().clamp_(0, s)
        return norms, torch.copysign(level, g).to(torch.int64)

    def compress(
        self,
        grad: torch.Tensor,
        state: object,
        *,
        sqsum: torch.Tensor | None = None,
        batch_size: int = 1,
        layer: int = 0,
        generator: torch.Generator | None = None,
    ) -> Payload:
        if generator is None:
            raise ConfigError("qsgd draws random numbers: pass a seeded torch.Generator")
        g = check_grad(grad)
        norms, levels = self.quantize(g, generator)
        msg = QSGDMessage(
            layer, g.numel(), self.config.bucket_size, self.s, norms.numpy(), levels.numpy()
        )
        return make_payload(
            msg,
            sent=g.numel(),
            encodings=self.encodings,
            primary=self.primary_encoding,
            decode_context={"bucket_size": self.config.bucket_size, "s": self.s},
        )


#: Registry of compressors by the name used in configs, CLI flags and trace headers.
COMPRESSORS: dict[str, type[Compressor]] = {
    c.name: c
    for c in (
        DenseCompressor,
        VarianceCompressor,
        StromCompressor,
        QSGDCompressor,
        HybridCompressor,
        TopKCompressor,
    )
}


def get_compressor(name: str, **params: object) -> Compressor:
    """Build a compressor by registry name; UnknownNameError / ConfigError on bad input."""
    if name not in COMPRESSORS:
        raise unknown_name("compressor", name, COMPRESSORS)
    return COMPRESSORS[name](**params)
