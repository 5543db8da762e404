"""Compute cost of one training step on one rank: forward + backward, and how it splits by layer.

Two sources of compute time (``ClusterSpec.compute``): the trace's measured seconds × a
scale factor, or the FLOP model :func:`compute_time_s` (defined once in
:mod:`vgcsim.traces.devicecost`, below both models and simulator, and re-exported here); both are
applied in :mod:`vgcsim.traces.replay`.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike
from vgcsim.traces.devicecost import (
    compute_time_s,  # one FLOP model, shared with vgcsim.traces.replay
)

from vgcsim.core.errors import ConfigError

__all__ = ["FORWARD_FRACTION", "compute_time_s", "layer_ready_fractions"]

#: Share of forward+backward time spent in the forward pass. The backward pass costs about
#: twice the forward pass (gradients w.r.t. activations and w.r.t. weights), hence 1/3.
#: Source: the 2N forward / 4N backward FLOP count per parameter of J. Kaplan et al.,
#: "Scaling Laws for Neural Language Models", 2020, §2.1. Assumption for other layer types.
FORWARD_FRACTION = 1.0 / 3.0


def layer_ready_fractions(
    layer_numel: ArrayLike, forward_fraction: float = FORWARD_FRACTION
) -> np.ndarray:
    """When each layer's gradient is ready, as a fraction of the step's compute time.

    Backward visits layers last-to-first; layer l is ready after the forward pass plus the
    backward work of layers l..L−1, taken proportional to parameter count.

    Formula: ``ready_l = f + (1 − f) · Σ_{j ≥ l} numel_j / Σ_j numel_j`` with f the forward
    fraction.

    Assumptions: backward time per layer ∝ its parameter count (true for dense layers;
    convolutions with large spatial maps are heavier early in the net).

    Source: the overlap model of S. Shi, X. Chu and B. Li, "MG-WFBP: Efficient data
    communication for distributed synchronous SGD algorithms", INFOCOM 2019 (layer-wise
    gradient availability during backward).
    """
    numel = np.asarray(layer_numel, dtype=np.float64)
    if numel.ndim != 1 or len(numel) == 0 or np.any(numel < 0):
        raise ConfigError("layer_numel must be a non-empty 1-D array of non-negative counts")
    if not 0 <= forward_fraction < 1:
        raise ConfigError("forward_fraction must be in [0, 1)")
    total = numel.sum()
    done_from_end = np.cumsum(numel[::-1])[::-1]
    share = done_from_end / total if total > 0 else np.ones_like(numel)
    return forward_fraction + (1.0 - forward_fraction) * share
