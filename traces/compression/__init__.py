"""Compressors: dense, variance, strom, hybrid, topk, qsgd, powersgd, one module each (torch
is imported where a tensor is made, so listing them needs none).

Modules::

    vgcsim.traces.compression.compressors: COMPRESSORS, get_compressor(name, **params),
        register_compressor(cls)
    vgcsim.traces.compression.base: Compressor, Payload, make_payload
    vgcsim.traces.compression.sqsum_estimators: ESTIMATORS, worker_gradients(...) -> WorkerGrads
    vgcsim.traces.wire (torch-free): messages, encoders (ENCODINGS), sizes, bitstream

A "layer" is one trainable parameter tensor, in ``model.named_parameters()`` order.

Importing this package loads nothing: the names below are looked up on first use
(PEP 562), so ``vgcsim.traces.compression`` never pulls torch in by itself.
"""

from __future__ import annotations

import importlib
from typing import Any

#: public name -> the module that defines it
_LAZY = {
    "COMPRESSORS": "vgcsim.traces.compression.compressors",
    "get_compressor": "vgcsim.traces.compression.compressors",
    "Compressor": "vgcsim.traces.compression.base",
    "Payload": "vgcsim.traces.compression.base",
    "ENCODINGS": "vgcsim.traces.wire.encoders",
    "SPARSE_ENCODINGS": "vgcsim.traces.wire.encoders",
    "DENSE_WIRE_ENCODINGS": "vgcsim.traces.wire.encoders",
    "QSGD_ENCODINGS": "vgcsim.traces.wire.encoders",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
