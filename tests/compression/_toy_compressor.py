"""A toy compressor in one module, as docs/extending.md's "Adding a compressor" describes:
its parameters, validation, label, device codec cost and rule. Registered by the test that
uses it (tests/compression/test_adding_a_compressor.py), never by the product."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from vgcsim.core.errors import ConfigError
from vgcsim.traces.compression.base import CodecProfile, LayerStep, Payload
from vgcsim.traces.compression.compressors.sparse import (
    SparseCompressor,
    sparse_payload,
    state_input,
)


@dataclass(frozen=True)
class EveryNthParams:
    """stride: every stride-th element of a layer (0, stride, 2·stride, ...) is sent as fp32."""

    stride: int = 2


class EveryNthCompressor(SparseCompressor):
    """Send elements 0, s, 2s, ... of r += g as fp32 (coo64) and keep the rest in r."""

    name = "every_nth"
    Params = EveryNthParams
    codec_profile = CodecProfile(12.0, 16.0, 3, 8.0, 2, 0.0, 16.0, 2, "toy: r += g, gather, zero")

    @classmethod
    def label(cls, params: Mapping[str, Any]) -> str:
        return f"every {params.get('stride', '?')}th"

    def _validate(self) -> None:
        if self.config.stride < 1:
            raise ConfigError(f"every_nth: stride must be >= 1, got {self.config.stride}")

    def _values_format(self) -> str:
        return "fp32"

    def _compress(self, grad: Any, state: Any, step: LayerStep) -> Payload:
        r = state.residual.numpy()
        r += state_input(grad, r.size, "grad")
        indices = np.arange(0, r.size, self.config.stride)
        return sparse_payload(self, r, indices, layer=step.layer, values="fp32")
