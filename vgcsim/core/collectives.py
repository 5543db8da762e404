"""Collective vocabulary shared by models and simulator (registry keys ``op/algorithm``) and the
size header an allgatherv exchanges before its data."""

from __future__ import annotations

import numpy as np

from vgcsim.core.cluster import DEFAULT_HOST_PADDED_SHARE
from vgcsim.core.specs import refill_bytes

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
# the DDP hook's exchange: equal blocks of a bound from past messages + a fallback round
ALLGATHERV_ALGORITHMS += ("bounded",)
#: sparse allreduce of top-k-style payloads (SparCML, Renggli et al. SC'19; see sparse_stages)
SPARSE_ALLREDUCE_ALGORITHMS = ("recursive_doubling",)
COLLECTIVE_KEYS = (
    tuple(f"allreduce/{a}" for a in ALLREDUCE_ALGORITHMS)
    + tuple(f"allgatherv/{a}" for a in ALLGATHERV_ALGORITHMS)
    + tuple(f"sparse_allreduce/{a}" for a in SPARSE_ALLREDUCE_ALGORITHMS)
)

#: Collective calls a registry key makes (each pays a link's ``call_overhead_s`` once): the
#: padded allgatherv is two calls, the size exchange and the data; every other key one.
_CALLS = {"allgatherv/padded": 2}


def burst_credit_s(comm_s, step_s, burst_bytes: float, bandwidth_Bps: float, wire_s=None):
    """Seconds a token bucket on the host link takes off each step's exchange ``[T]``.

    Formula: ``credit = min(b / B, step − comm, comm, wire)`` with b the bucket's depth
    (``LinkSpec.burst_bytes``), B the link's bandwidth, ``step − comm`` the seconds the link
    is idle in the step (its local phases), ``comm`` the exchange and ``wire`` (``wire_s``;
    ``comm`` where None) the exchange's bandwidth time, the same exchange priced on the link
    with its bandwidth alone (:func:`vgcsim.core.clusterspec.wire_cluster`): while the link
    is idle the bucket refills at B up to b, and the exchange's first tokens' worth of bytes
    leaves at once instead of at B, so it ends ``min(b, B·idle, bytes)/B`` earlier; its
    start-up, per-call and host terms stay. The step loses the same seconds. With b = 0 (no
    bucket) the credit is 0.

    Assumptions: one exchange per step that drains the bucket (a steady state in which the
    tokens at the exchange's start are what the idle seconds refilled); bytes covered by
    tokens leave at the host's speed (tbf without a peak rate).

    Source: the token-bucket filter (J. Turner, "New directions in communications", IEEE
    Communications Magazine 24(10), 1986; Linux ``tc-tbf(8)``: rate, burst).
    """
    comm = np.asarray(comm_s, dtype=np.float64)
    if burst_bytes <= 0:
        return np.zeros_like(comm)
    idle = np.maximum(0.0, np.asarray(step_s, dtype=np.float64) - comm)
    credit = np.minimum(np.minimum(burst_bytes / bandwidth_Bps, idle), np.maximum(comm, 0.0))
    if wire_s is not None:
        credit = np.minimum(credit, np.maximum(np.asarray(wire_s, dtype=np.float64), 0.0))
    return credit


def calls_per_collective(key: str) -> int:
    """How many collective calls ``key`` makes (2 for ``allgatherv/padded``, else 1): the
    count of ``call_overhead_s`` the cost models and the simulator add, the one rule both
    use."""
    return _CALLS.get(key, 1)


def idle_burst_bytes(link) -> float:
    """The bucket's depth beyond one start-up's refill, ``b − min(b, α/β)``
    (:func:`refill_bytes`): what a long idle before an exchange adds to the tokens its first
    message meets, the depth :func:`burst_credit_s` credits (0 without a bucket)."""
    return max(0.0, float(link.burst_bytes) - refill_bytes(link))


def prices_by_size(link) -> bool:
    """Whether ``link`` prices a message other than ``α + m·β`` (:func:`message_time_s`): it
    has size segments, or a token bucket whose start-up refill is not 0."""
    return bool(link.segments) or refill_bytes(link) > 0.0


def message_time_s(link, size_bytes):
    """Seconds of one uncontended message of ``size_bytes`` (a number or an array) on ``link``:
    ``α + m·β`` without segments; with the link's ``segments`` (``(from_bytes,
    extra_latency_s, bandwidth_Bps)``, SMPI-style piecewise pricing by message size, Degomme
    et al., IEEE TPDS 2017), ``max(α, α + extra_k + m / bandwidth_k)`` with k the segment of
    the largest ``from_bytes`` ≤ m (the first below it). With a token bucket (``burst_bytes``
    > 0) the message's first :func:`refill_bytes` ``r = min(b, α/β)`` bytes leave at once:
    the rule above priced on ``max(0, m − r)`` bytes (``α + max(0, m − r)·β`` without
    segments). The one rule the cost models use per message and the simulator turns into
    wire bytes (:func:`wire_bytes`)."""
    m = np.maximum(0.0, np.asarray(size_bytes, dtype=float) - refill_bytes(link))
    if not link.segments:
        return link.latency_s + m * link.beta_s_per_byte
    starts = np.array([s[0] for s in link.segments])
    extra = np.array([s[1] for s in link.segments])
    bw = np.array([s[2] for s in link.segments])
    k = np.clip(np.searchsorted(starts, m, side="right") - 1, 0, len(starts) - 1)
    return link.latency_s + np.maximum(0.0, extra[k] + m / bw[k])


def wire_bytes(link, size_bytes):
    """The bytes a simulated flow moves at the link's payload rate so that an uncontended
    message of ``size_bytes`` takes :func:`message_time_s`: ``(message_time_s − α) /
    β``; ``size_bytes`` itself (the same array) where the link prices by ``α + m·β``
    (:func:`prices_by_size`)."""
    if not prices_by_size(link):
        return size_bytes
    return (message_time_s(link, size_bytes) - link.latency_s) / link.beta_s_per_byte


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
    below it; the step keeps the lower point's cost up to the next measured size. The
    calibrations that compare steps with a line are in ``docs/distributed.md`` ("The fit and
    what its error means")."""
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
    fixed_s: float = 0.0,
):
    """Host time of a padded allgatherv's implementation:
    ``h + δ(P·m_max)·(s·P·m_max + (1 − s)·Σ_r m_r)`` (0 for P = 1), h = ``fixed_s`` (a link's
    ``allgatherv_host_s``: the implementation's fixed host time per allgatherv, beyond its
    calls; 0 by default, and for the plain all_gather of
    :func:`plain_allgather_host_time_s`), ``block_bytes`` = m_max and
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
    ranks, 5/8 of the padded bytes; the cost models' ``fit_link``).

    s is measured, not assumed: it depends on the host, and the bounds s = 0 (every copy at
    the real bytes) and s = 1 (every copy at the padded bytes) each misprice skewed
    allgathervs; the namespace runs that show it are in ``docs/distributed.md`` ("The fit and
    what its error means", "Measured across network namespaces")."""
    if world_size <= 1:
        return 0.0 * block_bytes
    gathered = world_size * block_bytes
    copied = (
        gathered
        if copied_bytes is None
        else host_copied_bytes(gathered, copied_bytes, padded_share)
    )
    per_byte = host_s_per_byte_at(gathered, host_s_per_byte, table) if table else host_s_per_byte
    return fixed_s + per_byte * copied


#: Share of vgcsim's allgatherv host cost that a plain torch all_gather of equal blocks pays on
#: gloo (:func:`plain_allgather_host_time_s`): the backend's copy alone.
PLAIN_ALLGATHER_HOST_SHARE = 0.5


def plain_allgather_host_time_s(world_size: int, block_bytes, host_s_per_byte: float, table=()):
    """Host time of a plain ``torch.distributed.all_gather`` of equal ``block_bytes`` blocks on
    gloo: ``½·δ(P·m)·P·m`` (0 for P = 1), δ as in :func:`padded_host_time_s`.

    Assumption: the host work is copies of the gathered buffer. torch's gloo binding gathers
    into a flat buffer of its own and copies it into the outputs, one copy of the P blocks;
    vgcsim's allgatherv (what δ is fitted on) makes that copy and a second one, out into
    per-rank segments; so a plain all_gather pays half of δ per gathered byte (checked by
    ``vgcsim validate`` on a calibrated cluster: its ``allgather`` rows, docs/distributed.md,
    "Validation"). Calibration, not the cost models, prices it: a trace's collectives are
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
    A trace with recorded unions replaces this bound (its recorded union sizes, docs/models.md)."""
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
