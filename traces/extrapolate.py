"""Extrapolating a trace of W recorded workers to P simulated ranks.

A trace records what W emulated workers sent at each step; predictions and simulations go to
P ranks (up to 1024 and beyond). The rule that maps ranks to recorded workers is explicit,
selectable and written into every result header:

``modulo``
    rank j at every step takes worker ``j mod W``. Deterministic; for P ≤ W it keeps the
    first P workers, for P > W each worker is repeated ⌈P/W⌉ or ⌊P/W⌋ times, so the
    imbalance pattern between workers is preserved.
``resample``
    rank j at step t takes a worker drawn uniformly (with replacement) from the W workers,
    independently per (step, rank), from ``numpy.random.default_rng(seed)``. The largest of
    P draws grows with P the way the maximum of P independent ranks would, under the
    assumption that workers are exchangeable.
"""

from __future__ import annotations

import numpy as np

from vgcsim.core.errors import ConfigError, unknown_name
from vgcsim.core.options import RULES

__all__ = ["RULES", "rank_bits", "rank_workers"]


def rank_workers(
    n_steps: int, workers: int, world_size: int, rule: str, seed: int = 0
) -> np.ndarray:
    """The recorded worker each rank takes at each step: int array ``[n_steps, world_size]``."""
    if rule not in RULES:
        raise unknown_name("extrapolation rule", rule, RULES)
    if workers < 1:
        raise ConfigError(f"a trace needs at least one worker, got {workers}")
    if world_size < 1:
        raise ConfigError(f"world size must be >= 1, got {world_size}")
    if rule == "modulo":
        row = np.arange(world_size, dtype=np.int64) % workers
        return np.broadcast_to(row, (n_steps, world_size)).copy()
    rng = np.random.default_rng(seed)
    return rng.integers(0, workers, size=(n_steps, world_size), dtype=np.int64)


def rank_bits(worker_bits: np.ndarray, world_size: int, rule: str, seed: int = 0) -> np.ndarray:
    """Map per-worker values ``[steps, W]`` to per-rank values ``[steps, P]`` under ``rule``.

    Works for any per-(step, worker) quantity (bits, bytes, seconds).
    """
    worker_bits = np.asarray(worker_bits)
    if worker_bits.ndim != 2:
        raise ConfigError(
            f"worker_bits must be 2-D [steps, workers], got shape {worker_bits.shape}"
        )
    n_steps, workers = worker_bits.shape
    idx = rank_workers(n_steps, workers, world_size, rule, seed)
    return np.take_along_axis(worker_bits, idx, axis=1)
