"""Collective vocabulary shared by models and simulator (registry keys ``op/algorithm``) and the
size header an allgatherv exchanges before its data."""

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

#: Bytes of the per-rank size announcement of an allgatherv (one int64 length per rank),
#: exchanged before the data when the receivers do not know the block sizes in advance
#: (MPI_Allgatherv's receive counts, torch.distributed's two-collective allgatherv). The one
#: definition used by the cost models, the simulator and the calibration.
SIZE_HEADER_BYTES = 8
