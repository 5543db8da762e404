"""The compressor registry: each compressor by the name used in configs, CLI flags and trace
headers. One module each: dense, variance_based, strom, hybrid, topk, qsgd, powersgd (sparse
holds what the sparse ones share). A module carries its compressor's parameters (``Params``),
validation, label (``label``) and device codec cost (``codec_profile``); a new compressor is
its module plus one line in :data:`COMPRESSORS`' list below (or a
:func:`register_compressor` call). Listing needs no torch: the modules import it where they
make a tensor.

Sources: Tsuzuku, Imachi, Akiba 2018 (variance, hybrid, the 4-bit code); Strom 2015
(strom); Alistarh et al. 2017 (qsgd); Aji & Heafield 2017 / Lin et al. 2018 (topk); Vogels,
Karimireddy & Jaggi 2019 and torch's ``powerSGD_hook`` (powersgd).
"""

from __future__ import annotations

from vgcsim.core.errors import ConfigError, unknown_name
from vgcsim.traces.compression.base import Compressor
from vgcsim.traces.compression.compressors.dense import DenseCompressor
from vgcsim.traces.compression.compressors.hybrid import HybridCompressor
from vgcsim.traces.compression.compressors.powersgd import PowerSGDCompressor
from vgcsim.traces.compression.compressors.qsgd import QSGDCompressor
from vgcsim.traces.compression.compressors.strom import StromCompressor
from vgcsim.traces.compression.compressors.topk import TopKCompressor
from vgcsim.traces.compression.compressors.variance_based import VarianceCompressor

__all__ = ["COMPRESSORS", "get_compressor", "register_compressor"]

#: Registry of compressors by the name used in configs, CLI flags and trace headers.
COMPRESSORS: dict[str, type[Compressor]] = {}


def register_compressor(cls: type[Compressor]) -> type[Compressor]:
    """Register ``cls`` under ``cls.name`` (returns it, so it also works as a decorator).

    Everything that looks a compressor up by name sees it from then on: ``get_compressor``
    (and so the recorder), :func:`vgcsim.traces.labels.method_label` and
    :func:`vgcsim.traces.devicecost.codec_profile`. ConfigError for a class without a name
    or a name taken by another class."""
    if not cls.name:
        raise ConfigError(f"compressor class {cls.__name__} has no name")
    if COMPRESSORS.get(cls.name, cls) is not cls:
        raise ConfigError(f"compressor name {cls.name!r} is taken by {COMPRESSORS[cls.name]}")
    COMPRESSORS[cls.name] = cls
    return cls


for _cls in (
    DenseCompressor,
    VarianceCompressor,
    StromCompressor,
    QSGDCompressor,
    HybridCompressor,
    TopKCompressor,
    PowerSGDCompressor,
):
    register_compressor(_cls)


def get_compressor(name: str, **params: object) -> Compressor:
    """Build a compressor by registry name; UnknownNameError / ConfigError on bad input."""
    if name not in COMPRESSORS:
        raise unknown_name("compressor", name, COMPRESSORS)
    return COMPRESSORS[name](**params)
