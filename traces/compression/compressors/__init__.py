"""The compressor registry: each compressor by the name used in configs, CLI flags and trace
headers. One module each: dense, variance, strom, hybrid, topk, qsgd, powersgd (sparse holds
what the sparse ones share).

Sources: Tsuzuku, Imachi, Akiba 2018 (variance, hybrid, the 4-bit code); Strom 2015
(strom); Alistarh et al. 2017 (qsgd); Aji & Heafield 2017 / Lin et al. 2018 (topk); Vogels,
Karimireddy & Jaggi 2019 and torch's ``powerSGD_hook`` (powersgd).
"""

from __future__ import annotations

from vgcsim.traces.compression.base import Compressor
from vgcsim.traces.compression.compressors.dense import DenseCompressor
from vgcsim.traces.compression.compressors.hybrid import HybridCompressor
from vgcsim.traces.compression.compressors.powersgd import PowerSGDCompressor
from vgcsim.traces.compression.compressors.qsgd import QSGDCompressor
from vgcsim.traces.compression.compressors.strom import StromCompressor
from vgcsim.traces.compression.compressors.topk import TopKCompressor
from vgcsim.traces.compression.compressors.variance import VarianceCompressor

from vgcsim.core.errors import unknown_name

__all__ = ["COMPRESSORS", "get_compressor"]

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
        PowerSGDCompressor,
    )
}


def get_compressor(name: str, **params: object) -> Compressor:
    """Build a compressor by registry name; UnknownNameError / ConfigError on bad input."""
    if name not in COMPRESSORS:
        raise unknown_name("compressor", name, COMPRESSORS)
    return COMPRESSORS[name](**params)
