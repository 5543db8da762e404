"""Collective vocabulary shared by models and simulator (registry keys ``op/algorithm``)."""

from __future__ import annotations

#: Collective vocabulary shared by models/ and simulator/ (registry keys are
#: f"{op}/{algorithm}"; a test asserts both registries have exactly these keys).
ALLREDUCE_ALGORITHMS = (
    "ring",
    "recursive_doubling",
    "rabenseifner",
    "binomial_tree",
    "hierarchical",
)
ALLGATHERV_ALGORITHMS = ("ring", "recursive_doubling", "bruck", "direct", "padded")
COLLECTIVE_KEYS = tuple(f"allreduce/{a}" for a in ALLREDUCE_ALGORITHMS) + tuple(
    f"allgatherv/{a}" for a in ALLGATHERV_ALGORITHMS
)
