"""Gradient buckets of a data-parallel step and when they are ready during the backward pass.

One rule, shared by the closed-form models (:mod:`vgcsim.models.iteration`) and the simulator
(:mod:`vgcsim.simulator.replay`), which may not import each other:

* the forward pass takes :data:`FORWARD_FRACTION` of a rank's compute time, the backward pass
  the rest;
* the backward pass visits layers last to first, and its time per layer is proportional to
  the layer's parameter count;
* gradients are sent in buckets of consecutive layers in backward order (:func:`layer_groups`):
  one bucket (``overlap = "none"``), one per layer (``"per_layer"``), or PyTorch DDP's greedy
  buckets closed once they hold ``bucket_bytes`` of fp32 gradient (``"bucketed"``).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from numpy.typing import ArrayLike

from vgcsim.core.errors import ConfigError, unknown_name
from vgcsim.core.options import DDP_BUCKET_BYTES, FORWARD_FRACTION

__all__ = [
    "BUCKET_OVERLAPS",
    "DDP_BUCKET_BYTES",
    "FORWARD_FRACTION",
    "bucket_backward_share",
    "bucket_layers",
    "layer_groups",
]

# FORWARD_FRACTION (forward share of compute) and DDP_BUCKET_BYTES (DDP's default
# bucket_cap_mb) are the replay options' defaults, defined in vgcsim.core.options.

#: How gradients are grouped into collectives (see :func:`layer_groups`).
BUCKET_OVERLAPS = ("none", "per_layer", "bucketed")


def bucket_layers(
    layer_numel: Sequence[int] | ArrayLike,
    bucket_bytes: float = DDP_BUCKET_BYTES,
    bytes_per_element: int = 4,
) -> list[list[int]]:
    """Group layers into buckets in backward order (last layer first), each closed once it
    holds at least ``bucket_bytes`` of dense gradient; the rest forms the last bucket.

    Source: the greedy bucket assignment of PyTorch DDP, S. Li et al., "PyTorch Distributed:
    Experiences on Accelerating Data Parallel Training", VLDB 13(12), 2020, §3.2.3.
    """
    if not bucket_bytes > 0:
        raise ConfigError("bucket size must be positive")
    numel = np.asarray(layer_numel)
    groups: list[list[int]] = []
    current: list[int] = []
    size = 0.0
    for layer in reversed(range(len(numel))):
        current.append(layer)
        size += float(numel[layer]) * bytes_per_element
        if size >= bucket_bytes:
            groups.append(current)
            current, size = [], 0.0
    if current:
        groups.append(current)
    return groups


def layer_groups(
    layer_numel: Sequence[int] | ArrayLike,
    overlap: str,
    bucket_bytes: float = DDP_BUCKET_BYTES,
) -> list[list[int]]:
    """Layer-index groups in the order their gradients become ready (backward = reverse order):
    ``"none"`` one group of every layer, ``"per_layer"`` one group per layer, ``"bucketed"``
    :func:`bucket_layers`."""
    n = len(np.asarray(layer_numel))
    order = list(range(n - 1, -1, -1))
    if overlap == "none":
        return [order]
    if overlap == "per_layer":
        return [[i] for i in order]
    if overlap == "bucketed":
        return bucket_layers(layer_numel, bucket_bytes)
    raise unknown_name("bucket overlap", overlap, BUCKET_OVERLAPS)


def bucket_backward_share(
    layer_numel: Sequence[int] | ArrayLike, groups: Sequence[Sequence[int]]
) -> np.ndarray:
    """Fraction of the backward pass done when each group (in order) is ready ``[K]``.

    Formula: ``s_k = Σ_{j ≤ k} Σ_{l ∈ G_j} numel_l / Σ_l numel_l`` (1 for every group when the
    model has no parameters).

    Assumption: backward time per layer ∝ parameter count (true for dense layers; convolutions
    with large spatial maps are heavier early in the net).

    Source: the layer-wise gradient availability of S. Shi, X. Chu and B. Li, "MG-WFBP:
    Efficient data communication for distributed synchronous SGD algorithms", INFOCOM 2019.
    """
    numel = np.asarray(layer_numel, dtype=np.float64)
    total = numel.sum()
    sizes = np.array([numel[list(g)].sum() for g in groups])
    done = np.cumsum(sizes)
    return done / total if total > 0 else np.ones(len(groups))
