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


def padded_host_time_s(world_size: int, block_bytes, host_s_per_byte: float):
    """Host time of a padded allgatherv's implementation: ``δ·P·m_max`` (0 for P = 1), δ =
    ``host_s_per_byte`` (a link's ``allgatherv_host_s_per_byte``), ``block_bytes`` = m_max
    (a number or an array of them). The one rule the cost model and the simulator price:
    every rank's gathered buffer holds P padded blocks, and the host work of copying them is
    taken as proportional to those bytes."""
    if world_size <= 1:
        return 0.0 * block_bytes
    return host_s_per_byte * world_size * block_bytes
