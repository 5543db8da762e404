"""Collective vocabulary shared by models and simulator (registry keys ``op/algorithm``) and the
size header an allgatherv exchanges before its data."""

from __future__ import annotations

import numpy as np

from vgcsim.core.cluster import DEFAULT_HOST_PADDED_SHARE

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
#: sparse allreduce of top-k-style payloads (SparCML, Renggli et al. SC'19; see sparse_stages)
SPARSE_ALLREDUCE_ALGORITHMS = ("recursive_doubling",)
COLLECTIVE_KEYS = (
    tuple(f"allreduce/{a}" for a in ALLREDUCE_ALGORITHMS)
    + tuple(f"allgatherv/{a}" for a in ALLGATHERV_ALGORITHMS)
    + tuple(f"sparse_allreduce/{a}" for a in SPARSE_ALLREDUCE_ALGORITHMS)
)

#: Bytes of the per-rank size announcement of an allgatherv (one int64 length per rank),
#: exchanged before the data when the receivers do not know the block sizes in advance
#: (MPI_Allgatherv's receive counts, torch.distributed's two-collective allgatherv). The one
#: definition used by the cost models, the simulator and the calibration.
SIZE_HEADER_BYTES = 8


def host_s_per_byte_at(gathered_bytes, host_s_per_byte: float, table=()):
    """δ, the host time per gathered byte, at ``gathered_bytes`` (a number or an array).

    Without ``table``: ``host_s_per_byte`` at every size. With a table of ``(bytes,
    s_per_byte)`` points (a link's ``allgatherv_host_s_per_byte_table``, bytes increasing):
    the value of the largest point at or below the size, ``δ(B) = y_i`` for ``x_i ≤ B <
    x_{i+1}``, and the first value below the first point: a step function, as SimGrid's SMPI
    prices message sizes by piecewise-constant factors, each from its size up (Degomme et
    al., "Simulating MPI applications: the SMPI approach", IEEE TPDS 2017).

    Steps rather than a line between points because the per-byte host cost changes at a
    size, not gradually: a gathered buffer either fits the CPU's last-level cache or not.
    Between a point below that size and one above it, a line over-prices every size still
    below it; the step keeps the lower point's cost up to the next measured size. On seven
    calibrations of 4 ranks on a 2-core host with a 32 MiB cache (200 Mbit/s and 1 Gbit/s
    links, ``docs/distributed.md``) the 8 MB-per-rank allgatherv (30.5 MiB gathered) came
    out within 5.4 % with steps (six of the seven within 2.8 %) and 2.6-17.9 % too slow
    with a line in log size."""
    if not table:
        return host_s_per_byte + 0.0 * np.asarray(gathered_bytes, dtype=float)
    xs = np.array([point[0] for point in table], dtype=float)
    ys = np.array([point[1] for point in table], dtype=float)
    at = np.searchsorted(xs, np.asarray(gathered_bytes, dtype=float), side="right") - 1
    return ys[np.clip(at, 0, len(xs) - 1)]


def host_copied_bytes(gathered_bytes, real_bytes, padded_share: float = DEFAULT_HOST_PADDED_SHARE):
    """The bytes δ prices for a padded allgatherv: ``s·P·m_max + (1 − s)·Σ m``, s =
    ``padded_share`` (the share of the host work that takes the ``gathered_bytes`` padded
    buffer; the rest takes the ``real_bytes`` blocks; see :func:`padded_host_time_s`)."""
    return padded_share * gathered_bytes + (1.0 - padded_share) * real_bytes


def padded_host_time_s(
    world_size: int,
    block_bytes,
    host_s_per_byte: float,
    table=(),
    copied_bytes=None,
    padded_share: float = DEFAULT_HOST_PADDED_SHARE,
):
    """Host time of a padded allgatherv's implementation:
    ``δ(P·m_max)·(s·P·m_max + (1 − s)·Σ_r m_r)`` (0 for P = 1), ``block_bytes`` = m_max and
    ``copied_bytes`` = Σ_r m_r, the real bytes of the P blocks (numbers or arrays of them;
    None: P·m_max, every block full, where the rule is ``δ·P·m_max`` whatever s). δ is
    ``host_s_per_byte`` (a link's ``allgatherv_host_s_per_byte``) or, where ``table`` (its
    ``allgatherv_host_s_per_byte_table``) is given, its value at the P·m_max bytes of the
    gathered buffer (:func:`host_s_per_byte_at`); s is ``padded_share`` (a link's
    ``allgatherv_host_padded_share``, default :data:`vgcsim.core.cluster.DEFAULT_HOST_PADDED_SHARE`).

    The one rule the cost model and the simulator price. δ is fitted on allgathervs of equal
    blocks, where every byte of the gathered buffer is a real byte. With uneven blocks part
    of the implementation's host work still takes the padding (torch's gloo binding gathers
    into a flat buffer of its own and copies it into the output, P padded blocks) and part
    takes each block at its real length (vgcsim's copy out into per-rank segments); the
    gathered buffer's size sets the cost per byte of both (whether it fits the CPU's caches).
    s, the first part's share, is fitted by ``vgcsim calibrate`` from allgathervs whose
    ranks send uneven blocks (``allgatherv_skewed``: blocks in the ratio 1:2:3:4 on four
    ranks, 5/8 of the padded bytes; :func:`vgcsim.models.linkfit.fit_link`).

    Why s is measured, not assumed: in four namespace runs at 1 Gbit/s and one at
    200 Mbit/s (``docs/distributed.md``) the skewed allgatherv of 40 MB per rank took
    0.21-0.28 s less than the even one, where s = ½ (the two copies of equal cost) priced
    0.15-0.18 s less: its 40 MB predictions were up to +6.5 % off the measured medians;
    those differences put s at 0.16-0.29; the calibrations of five later runs fitted
    0.40-0.56 (the largest skewed sizes set it). Pricing every copy at the real bytes (s = 0) put
    all eight 1 Gbit/s predictions at 8 and 40 MB low (−3.3 to −9.8 %), and pricing every
    copy at the padded bytes (s = 1) put 3 of 10 past 5 % high (up to +14.3 %)."""
    if world_size <= 1:
        return 0.0 * block_bytes
    gathered = world_size * block_bytes
    copied = (
        gathered
        if copied_bytes is None
        else host_copied_bytes(gathered, copied_bytes, padded_share)
    )
    if not table:
        return host_s_per_byte * copied
    return host_s_per_byte_at(gathered, host_s_per_byte, table) * copied


#: Share of vgcsim's allgatherv host cost that a plain torch all_gather of equal blocks pays on
#: gloo (:func:`plain_allgather_host_time_s`): the backend's copy alone, measured 0.52-0.64.
PLAIN_ALLGATHER_HOST_SHARE = 0.5


def plain_allgather_host_time_s(world_size: int, block_bytes, host_s_per_byte: float, table=()):
    """Host time of a plain ``torch.distributed.all_gather`` of equal ``block_bytes`` blocks on
    gloo: ``½·δ(P·m)·P·m`` (0 for P = 1), δ as in :func:`padded_host_time_s`.

    Assumption: the host work is copies of the gathered buffer. torch's gloo binding gathers
    into a flat buffer of its own and copies it into the outputs, one copy of the P blocks;
    vgcsim's allgatherv (what δ is fitted on) makes that copy and a second one, out into
    per-rank segments; so a plain all_gather pays half of δ per gathered byte. Measured: in
    the two namespace runs of ``docs/distributed.md`` with this rule (200 Mbit/s and
    1 Gbit/s, 4 ranks, 8 and 40 MB per rank) the plain all_gather's excess over its ring
    cost was 0.52-0.64 of the allgatherv's. Calibration, not the cost models, prices it: a trace's collectives are
    vgcsim's own."""
    return PLAIN_ALLGATHER_HOST_SHARE * padded_host_time_s(
        world_size, block_bytes, host_s_per_byte, table
    )


#: Bytes of one nonzero in a sparse allreduce's messages: a 32-bit index and an fp32 value
#: (SparCML's index-value pairs, Renggli et al. SC'19, §4).
SPARSE_ENTRY_BYTES = 8


def sparse_stages(world_size: int) -> tuple[np.ndarray, np.ndarray]:
    """The stages of SparCML's recursive-doubling sparse allreduce (SSAR_Recursive_double,
    Renggli et al., "SparCML: High-Performance Sparse Communication for Machine Learning",
    SC'19, §5.1) on P ranks, as ``(group_ranks, reduce)``: per stage, how many ranks' index
    sets the largest message carries the union of, and whether the receiver reduces it.

    With p' = 2^⌊lg P⌋ and r = P − p': for r > 0 a fold stage first (rank p' + i sends its
    own set to rank i: 1 rank); then lg p' exchanges, stage s between partners v and v XOR 2^s,
    each sending the union it holds: 2^s virtual ranks, of which min(2^s, r) carry a folded
    rank, so 2^s + min(2^s, r) real ranks; for r > 0 an unfold stage last (rank i sends the
    result, the union of all P, to rank p' + i; no reduction)."""
    p = int(world_size)
    if p <= 1:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=bool)
    q = 1 << (p.bit_length() - 1)
    r = p - q
    groups = [2**s + min(2**s, r) for s in range(q.bit_length() - 1)]
    reduce = [True] * len(groups)
    if r:
        groups = [1, *groups, p]
        reduce = [True, *reduce, False]
    return np.asarray(groups, dtype=np.int64), np.asarray(reduce, dtype=bool)


def sparse_stage_bytes(sizes_bytes, dense_bytes: float = float("inf")) -> np.ndarray:
    """Per-stage message bytes ``[..., S]`` of the sparse allreduce for per-rank sparse
    payloads ``sizes_bytes`` ``[..., P]`` (m_i = SPARSE_ENTRY_BYTES × rank i's nonzeros) when
    nothing is known of how the index sets overlap: the union of a group is bounded by the
    sum of its members' (disjoint sets, SparCML's worst case), and a message of the largest
    group at each stage (:func:`sparse_stages`; groups are aligned blocks of ranks in the
    fold order) is ``min(Σ_{i∈G} m_i, dense_bytes)``: SparCML's switch to the dense
    representation (DSAR) once the union's pairs outgrow the dense vector.
    A trace with recorded unions replaces this bound (``vgcsim.traces.sparseunion``)."""
    s = np.asarray(sizes_bytes, dtype=np.float64)
    p = s.shape[-1]
    groups, _ = sparse_stages(p)
    if p <= 1:
        return np.zeros((*s.shape[:-1], 0))
    q = 1 << (p.bit_length() - 1)
    r = p - q
    # virtual rank v holds rank v and, for v < r, rank q + v (the fold)
    virtual = s[..., :q].copy()
    virtual[..., :r] += s[..., q:]
    out = []
    if r:
        out.append(s[..., q:].max(axis=-1))
    k = 1
    while k < q:
        out.append(virtual.reshape(*virtual.shape[:-1], q // k, k).sum(axis=-1).max(axis=-1))
        k *= 2
    if r:
        out.append(s.sum(axis=-1))
    stage = np.stack(out, axis=-1)
    assert stage.shape[-1] == len(groups)
    return np.minimum(stage, dense_bytes)
