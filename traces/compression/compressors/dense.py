"""No compression: the dense baseline (what a plain allreduce carries), fp32 or fp16."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from vgcsim.traces.compression.base import (
    CodecProfile,
    Compressor,
    LayerStep,
    Payload,
    check_choice,
    check_grad,
    make_payload,
)
from vgcsim.traces.wire.encoders import DENSE_WIRE_ENCODINGS
from vgcsim.traces.wire.messages import DenseMessage

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True)
class DenseParams:
    """precision: "fp32" (what a dense allreduce carries) or "fp16" (values rounded to half)."""

    precision: str = "fp32"


class DenseCompressor(Compressor):
    """No compression: every element, fp32 (or fp16). Stateless; sends numel elements."""

    name = "dense"
    Params = DenseParams
    codec_profile = CodecProfile(
        0.0,
        0.0,
        0,
        0.0,
        0,
        8.0,
        0.0,
        1,
        "no compression: nothing to compress or encode (the payload is the fp32 gradient); "
        "decode: read the received fp32 payload and read + write the accumulator (8 B per "
        "element besides the payload bytes), 1 kernel per layer",
    )

    @classmethod
    def label(cls, params: Mapping[str, Any]) -> str:
        precision = params.get("precision", "fp32")
        return "dense" if precision == "fp32" else f"dense {precision}"

    def _validate(self) -> None:
        check_choice("precision", self.config.precision, DENSE_WIRE_ENCODINGS)

    @property
    def encodings(self) -> tuple[str, ...]:
        return DENSE_WIRE_ENCODINGS

    @property
    def primary_encoding(self) -> str:
        return self.config.precision

    def _compress(self, grad: torch.Tensor, state: object, step: LayerStep) -> Payload:
        import torch

        g = check_grad(grad)
        if self.config.precision == "fp16":
            g = g.to(torch.float16).to(torch.float32)
        # A copy: the message must not alias the caller's gradient buffer.
        msg = DenseMessage(step.layer, g.numel(), g.numpy().copy())
        return make_payload(
            msg, sent=g.numel(), encodings=self.encodings, primary=self.primary_encoding
        )
