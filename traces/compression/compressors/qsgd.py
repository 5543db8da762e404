"""QSGD (Alistarh et al., *QSGD*, NeurIPS 2017): unbiased stochastic quantization per bucket.

No residual: every element is sent as a signed level of its bucket's norm.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from vgcsim.core.errors import ConfigError
from vgcsim.traces.compression.base import (
    CodecProfile,
    Compressor,
    LayerStep,
    Payload,
    check_choice,
    check_grad,
    make_payload,
)
from vgcsim.traces.wire.encoders import QSGD_ENCODINGS
from vgcsim.traces.wire.messages import QSGDMessage

if TYPE_CHECKING:
    import torch


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
    codec_profile = CodecProfile(
        9.0,
        0.0,
        3,
        0.0,
        2,
        9.0,
        0.0,
        2,
        "compress (D. Alistarh et al., QSGD, NeurIPS 2017): the norm (read g, 4 B), stochastic "
        "rounding with an in-register counter-based generator (read g 4 B, write a 1 B level) "
        "= 9 B per element; 3 kernels. encode: pack the levels (the 1 B levels are read by the "
        "compress count; the payload bytes are written), 2 kernels. decode: read a 1 B level and "
        "read + write the fp32 accumulator = 9 B per element of every received layer; 2 "
        "kernels per layer",
    )

    @classmethod
    def label(cls, params: Mapping[str, Any]) -> str:
        return f"QSGD {params.get('bits', '?')} bit, d={params.get('bucket_size', '?')}"

    def _validate(self) -> None:
        c = self.config
        if c.bits < 2 or c.bits > 16:
            raise ConfigError(f"qsgd: bits must be in 2..16, got {c.bits}")
        if c.bucket_size < 1:
            raise ConfigError(f"qsgd: bucket_size must be >= 1, got {c.bucket_size}")
        if c.levels < 0:
            raise ConfigError(f"qsgd: levels must be >= 0 (0 = from bits), got {c.levels}")
        check_choice("qsgd encoding", c.primary, QSGD_ENCODINGS)

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
        import torch

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

    def _compress(self, grad: torch.Tensor, state: object, step: LayerStep) -> Payload:
        if step.generator is None:
            raise ConfigError("qsgd draws random numbers: pass a seeded torch.Generator")
        g = check_grad(grad)
        norms, levels = self.quantize(g, step.generator)
        msg = QSGDMessage(
            step.layer, g.numel(), self.config.bucket_size, self.s, norms.numpy(), levels.numpy()
        )
        return make_payload(
            msg,
            sent=g.numel(),
            encodings=self.encodings,
            primary=self.primary_encoding,
            decode_context={"bucket_size": self.config.bucket_size, "s": self.s},
        )
