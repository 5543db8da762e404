"""Compressors and byte-honest encoders (torch): variance, strom, qsgd, hybrid, topk, dense.

Public surface::

    COMPRESSORS, get_compressor(name, **params) -> Compressor
    ENCODINGS, SPARSE_ENCODINGS, DENSE_ENCODINGS, QSGD_ENCODINGS
    Compressor, Payload
    vgcsim.traces.compression.variance: ESTIMATORS, worker_gradients(...) -> WorkerGrads

A "layer" is one trainable parameter tensor, in ``model.named_parameters()`` order.
"""

from __future__ import annotations

from vgcsim.traces.compression.base import Compressor, Payload
from vgcsim.traces.compression.compressors import COMPRESSORS, get_compressor
from vgcsim.traces.compression.encoders import (
    DENSE_ENCODINGS,
    ENCODINGS,
    QSGD_ENCODINGS,
    SPARSE_ENCODINGS,
)

__all__ = [
    "COMPRESSORS",
    "DENSE_ENCODINGS",
    "ENCODINGS",
    "QSGD_ENCODINGS",
    "SPARSE_ENCODINGS",
    "Compressor",
    "Payload",
    "get_compressor",
]
