"""The α-β-γ link fit of a calibration: cost coefficients of each measured op, the fit, its error.

The measurement file (:mod:`vgcsim.traces.calibration`) gives, per op and size, repetitions of
a time. Each op's cost is linear in α (per-message latency, s), β = 1/bandwidth (s/byte) and
γ (per-byte reduction cost, s/byte), the standard ring costs of Thakur, Rabenseifner & Gropp,
"Optimization of Collective Communication Operations in MPICH" (IJHPCA 2005), on ``P`` ranks:

* ``p2p`` / ``p2p_intra``, half a ping-pong round trip of ``n`` bytes: ``t = α + n·β``
* ring allreduce of ``n`` bytes: ``t = c + 2(P−1)·α + 2(P−1)/P·n·β + (P−1)/P·n·γ``; on
  gloo the 2(P−1) steps are scaled by the share of gloo's segments that carry bytes
  (:func:`gloo_allreduce_share`: 1 from (2P)² float32 elements on)
* ring allgather of ``m`` bytes per rank: ``t = c + (P−1)·α + (P−1)·m·β``
* vgcsim's allgatherv of ``m`` bytes per rank (an all_gather of one int64 length, then the
  payload all_gather; on gloo the ``allgatherv/padded`` model):
  ``t = 2c + 2(P−1)·α + (P−1)·(m + 8)·β + h + P·m·δ`` (two calls; 8 B =
  :data:`~vgcsim.core.collectives.SIZE_HEADER_BYTES`), h the implementation's fixed host
  time per allgatherv (``allgatherv_host_s``) and δ its host time per
  gathered byte (``allgatherv_host_s_per_byte``: copying the P blocks in and out, which the
  ring's α-β terms do not price; :func:`host_coefficient`)

c is the software cost of one collective call (``call_overhead_s``, 0 unless fitted; see
step 4 below).

The fit (:func:`fit_link`) takes latency from small messages and bandwidth from large ones,
so that neither regime's many points can drag the other's parameter:

1. *bandwidth regime*: the rows measured at least ``BANDWIDTH_FACTOR`` (4) times their op's
   fastest time. On them β, γ ≥ 0 and a free intercept minimise Σ (t̂ − t)², exactly
   (linear least squares over the active sets of β, γ): on the seconds themselves, so the
   largest messages, the least noisy relative to their time, set the slope. The intercept
   absorbs whatever only shifts large messages (a token-bucket burst sent at line rate, a
   rendezvous handshake) and is not used as α.
2. *latency regime*: the rows whose bandwidth terms explain at most a fifth of the measured
   time; α ≥ 0 is the median of (t − bandwidth terms) / (α's coefficient) over them (no such
   row: α = the intercept, if positive, else 0).
3. When the bandwidth regime holds fewer than two sizes (or finds no per-byte cost),
   α, β, γ ≥ 0 come from one fit minimising the squared log ratio Σ (log t̂ − log t)²
   (Levenberg–Marquardt on log-parameters, started from the exact non-negative
   relative-error least squares).

4. *per call and per step*: where the latency regime holds collectives with different
   ratios of steps to calls (allreduce: 2(P−1) steps in one call; allgather: P−1 in one;
   :data:`CALL_OPS`), α (per step) and c (per call) ≥ 0 come together from those rows, least squares on the relative error (:func:`fit_call_overhead`): a
   per-call software cost that one α would charge 2(P−1) times per allreduce and P−1 times
   per allgather.

5. *the allgather's own start-up*: where gloo's small allreduces alone hold two ratios of
   steps to calls (its share of segments that carry bytes), α and c come from them alone
   and the allgather's small rows give α_g (``allgather_latency_s``), the start-up of an
   allgather-type step, which prices every allgather, allgatherv and skewed allgatherv row
   (:data:`GATHER_OPS`; ``gather_op``).
6. *a token bucket* (``burst_bytes`` b, given): every collective row's messages are priced
   with it (:func:`bucket_terms`: each step's start-up refills min(b, α/β) bytes that leave
   at once, the rest at 1/β), as the models price a link with a bucket, instead of with the
   p2p size segments, which describe a ping-pong's bucket.

By default β comes from ``p2p`` alone (the link, without a collective algorithm's
behaviour), α from ``allreduce``'s small messages (:data:`LATENCY_OP`; ``p2p``'s own α
where allreduce was not measured) and γ from ``allreduce``'s rows where β's term alone is
at least half the measured time, with α and β fixed, as the slope of what those rows pay beyond α and β's terms
(least squares on the seconds with a free intercept, like β: what allreduce pays per byte
beyond moving it, the reduction). δ comes the same way from ``allgatherv``'s rows where α's
terms explain at most a tenth of the measured time (:data:`HOST_LATENCY_SHARE`), with α, β
fixed: the slope of their excess over the ring's α-β terms against P·m, least squares on
the seconds with a free intercept (what vgcsim's allgatherv pays per gathered byte beyond
the ring: its host copies and whatever the backend's all_gather loses per byte).
h, the allgatherv's fixed host time beyond its two calls (``allgatherv_host_s``: turning the
gathered lengths into Python values, the future that cuts the gathered bytes into
segments), comes first, from ``allgatherv``'s rows in the latency regime (β and γ's terms
at most a fifth of the time) with α, β and c fixed: the median of their time beyond the
ring's terms and the two calls (a robust estimate, as for α); δ's and s's rows are then
taken beyond h as well.
s, the share of that host time an allgatherv of uneven blocks pays per padded byte
(``allgatherv_host_padded_share``; the rest per real byte), comes from
``allgatherv_skewed``'s rows where α's terms explain at most a tenth of the time, with α, β
and δ fixed: each such row's excess over its ring terms is ``δ·(s·P·m + (1 − s)·Σ m_r)``,
so ``excess − δ·Σ m_r = s·δ·(P·m − Σ m_r)``: each row gives one value of s, and s is their
median (a robust estimate, as for α), kept within [0, 1] (:func:`padded_share_given`).
α comes from the collective and not from p2p because a collective's step pays more than a
ping-pong's one-way latency (gloo's ring synchronises neighbours at every step), and the
larger allreduces pay that latency too (docs/distributed.md, "The fit and what its error
means").
The other collectives are predicted, not fitted: their
rows in the error table check the ring formulas on this link. ``p2p_intra`` is fitted the same
way into the intra-node link. The fit's *typical error* is exp(rms log(t̂/t)) − 1 over the rows
of the ops that fixed α and β; rows between the two regimes count too, so a link that the α-β
line does not describe (a large burst, a protocol switch) shows as a large typical error.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from vgcsim.core.cluster import DEFAULT_HOST_PADDED_SHARE
from vgcsim.core.collectives import (
    SIZE_HEADER_BYTES,
    host_copied_bytes,
    host_s_per_byte_at,
    plain_allgather_host_time_s,
)
from vgcsim.core.errors import ConfigError, VgcsimError
from vgcsim.core.specs import start_refill_bytes
from vgcsim.traces.calibration import OPS, measured_seconds, skewed_sizes

#: A row is in the bandwidth regime from this many times its op's fastest time.
BANDWIDTH_FACTOR = 4.0
#: A row is in the latency regime while the bandwidth terms explain at most this share.
LATENCY_SHARE = 0.2
#: allgatherv rows enter δ's fit while α's terms explain at most this share of the measured
#: time. Not γ's rule (β's term at least half the time): the per-byte excess of an
#: allgatherv can be several times its wire time, and those rows are the ones that show it.
HOST_LATENCY_SHARE = 0.1
#: The op whose rows give δ (``allgatherv_host_s_per_byte``) by default.
HOST_OP = "allgatherv"
#: The op whose small messages give the link's α by default (:func:`fit_link`).
LATENCY_OP = "allreduce"
#: The op whose rows give s (``allgatherv_host_padded_share``) by default.
SHARE_OP = "allgatherv_skewed"
#: The collectives whose small messages give α and the per-call cost c together by default:
#: a ring allreduce (2(P−1) steps in one call) and a ring allgather (P−1 in one). Not the
#: allgatherv, whose small rows carry its host copies (δ, fitted after α) as well.
CALL_OPS = ("allreduce", "allgather")
#: The op whose small messages give the start-up α of an allgather-type collective's step
#: (``allgather_latency_s``) where it differs from the allreduce's, and the ops it prices:
#: vgcsim's allgatherv is all_gather calls.
GATHER_OP = "allgather"
GATHER_OPS = ("allgather", "allgatherv", "allgatherv_skewed")


#: σ is fitted (``fit_link(comm_cpu=True)``) only where the collective's bytes took at least
#: this much longer per byte than β: within it, the wire explains them.
COMM_CPU_MARGIN = 0.10
#: Rounds of (α and c, then σ) where σ is fitted: each prices the small rows with the last σ.
COMM_CPU_PASSES = 3


#: A point-to-point fit is split into size segments only where one α-β line leaves a
#: typical error above this (:func:`fit_segments`).
SEGMENT_ERROR = 0.10
#: Sizes per segment at least, and segments at most.
SEGMENT_MIN_SIZES = 3
SEGMENT_MAX = 4


def step_messages(op: str, size_bytes: float, world: int) -> tuple[tuple[float, float], ...]:
    """``(count, bytes)`` of the messages one rank sends, step after step, in one measurement
    of ``op`` (the ring algorithms of :func:`cost_coefficients`): what size segments price
    message by message. p2p: one of n; allreduce: 2(P−1) of n/P; allgather: P−1 of m;
    vgcsim's allgatherv: P−1 of the 8-byte header, then P−1 of m (the largest block)."""
    p, n = world, float(size_bytes)
    if op in ("p2p", "p2p_intra"):
        return ((1.0, n),)
    if op == "allreduce":
        return ((2.0 * (p - 1), n / p),)
    if op == "allgather":
        return ((float(p - 1), n),)
    if op in ("allgatherv", "allgatherv_skewed"):
        return ((float(p - 1), float(SIZE_HEADER_BYTES)), (float(p - 1), n))
    raise ConfigError(f"unknown op {op!r}; valid: {', '.join(OPS)}")


def segment_terms(rows: Sequence[dict], world: int, segments) -> np.ndarray:
    """Per row, the seconds its messages take beyond α under size ``segments``
    (``(from_bytes, extra_latency_s, bandwidth_Bps)``): Σ count·max(0, extra_k + m/bw_k)
    over :func:`step_messages` (:func:`vgcsim.core.collectives.message_time_s` − α)."""
    starts = np.array([s[0] for s in segments])
    extra = np.array([s[1] for s in segments])
    bw = np.array([s[2] for s in segments])
    out = np.zeros(len(rows))
    for i, r in enumerate(rows):
        for count, m in step_messages(r["op"], r["size_bytes"], world):
            k = int(np.clip(np.searchsorted(starts, m, side="right") - 1, 0, len(starts) - 1))
            out[i] += count * max(0.0, extra[k] + m / bw[k])
    return out


def bucket_terms(
    rows: Sequence[dict], world: int, burst_bytes: float, latency_s, beta_s_per_byte: float
) -> np.ndarray:
    """Per row, the seconds its messages take beyond α on a link with a token bucket of
    ``burst_bytes`` b: ``Σ count·max(0, m − r)·β`` over :func:`step_messages`, ``r = min(b,
    α/β)`` the bytes the bucket refills during each step's start-up
    (:func:`vgcsim.core.collectives.refill_bytes`; :func:`vgcsim.core.collectives.message_time_s`
    − α on such a link). ``latency_s``: α, or one per row (an allgather-type row's own α).
    p2p rows get 0 (a ping-pong is priced by its own fit)."""
    lat = np.broadcast_to(np.asarray(latency_s, dtype=float), (len(rows),))
    out = np.zeros(len(rows))
    for i, r in enumerate(rows):
        if r["op"].startswith("p2p"):
            continue
        refill = start_refill_bytes(burst_bytes, lat[i], beta_s_per_byte)
        for count, m in step_messages(r["op"], r["size_bytes"], world):
            out[i] += count * max(0.0, m - refill) * beta_s_per_byte
    return out


def _line_rel(n: np.ndarray, t: np.ndarray, free_intercept: bool) -> tuple[np.ndarray, float]:
    """``(α, β)`` of ``t ≈ α + n·β`` minimising Σ (fit/t − 1)², β ≥ 0 (α ≥ 0 unless
    ``free_intercept``), and its Σ log² ratio (inf where a fitted time is not positive)."""
    a = np.column_stack([np.ones_like(n), n]) / t[:, None]
    x = _nnls_small(a, np.ones_like(t), free=(0,) if free_intercept else ())
    fit = x[0] + n * x[1]
    if np.any(fit <= 0):
        return x, math.inf
    return x, float(np.sum(np.log(fit / t) ** 2))


def fit_segments(
    sizes_bytes, seconds
) -> tuple[float, tuple[tuple[float, float, float], ...]] | None:
    """Point-to-point times as piecewise α-β lines by message size, as SMPI prices messages
    (Degomme, Legrand, Markomanolis, Quinson, Stillwell, Suter, "Simulating MPI applications:
    the SMPI approach", IEEE TPDS 28(8), 2017: piecewise-linear latency and bandwidth
    factors per message-size segment, the breakpoints read off measurements).

    The breakpoints are chosen by the data: over every split of the sorted sizes into 1 to
    :data:`SEGMENT_MAX` runs of at least :data:`SEGMENT_MIN_SIZES` sizes (exact dynamic
    programming), each run fitted by its own line (least squares on the relative error, β ≥
    0; the first run's α ≥ 0, the later runs' intercepts of any sign: a token bucket's burst
    makes a large message's line start below zero), the split with the least Bayesian
    information criterion ``N·ln(SSE/N) + (3K − 1)·ln N`` (SSE: Σ log² of fitted over
    measured, K runs: two parameters each and K − 1 breakpoints). Returns ``(α, segments)``
    with α the first run's intercept and ``segments`` =
    ``((from_bytes, α_k − α, 1/β_k), ...)``, ``from_bytes`` where run k's line crosses run
    k − 1's when that lies between their measured sizes (a token bucket's two lines cross
    at its burst size), else run k's smallest measured size (0 for the first); None with fewer than 2·:data:`SEGMENT_MIN_SIZES` sizes, or where one
    line wins."""
    n = np.asarray(sizes_bytes, dtype=float)
    t = np.asarray(seconds, dtype=float)
    order = np.argsort(n, kind="stable")
    n, t = n[order], t[order]
    total = len(n)
    if total < 2 * SEGMENT_MIN_SIZES or np.unique(n).size != total:
        return None
    cost: dict[tuple[int, int], tuple[float, np.ndarray]] = {}
    for i in range(total):
        for j in range(i + SEGMENT_MIN_SIZES, total + 1):
            x, sse = _line_rel(n[i:j], t[i:j], free_intercept=i > 0)
            if x[1] <= 0:
                sse = math.inf  # a segment needs a bandwidth
            cost[(i, j)] = (sse, x)
    # best[k][j]: least SSE of sizes [0, j) in k runs, and the split
    best = [{0: (0.0, [])}]
    for k in range(1, SEGMENT_MAX + 1):
        row = {}
        for j in range(k * SEGMENT_MIN_SIZES, total + 1):
            options = [
                (prev + cost[(i, j)][0], [*cuts, i])
                for i, (prev, cuts) in best[k - 1].items()
                if (i, j) in cost and prev < math.inf
            ]
            if options:
                row[j] = min(options, key=lambda o: o[0])
        best.append(row)

    def bic(k: int) -> float:
        sse = best[k].get(total, (math.inf, []))[0]
        if not math.isfinite(sse):
            return math.inf
        return total * math.log(max(sse, 1e-300) / total) + (3 * k - 1) * math.log(total)

    k_best = min(range(1, SEGMENT_MAX + 1), key=bic)
    if k_best == 1 or not math.isfinite(bic(k_best)):
        return None
    starts = best[k_best][total][1]
    ends = [*starts[1:], total]
    lines = [cost[(i, j)][1] for i, j in zip(starts, ends, strict=True)]
    alpha = float(lines[0][0])
    segments = [(0.0, 0.0, 1.0 / float(lines[0][1]))]
    for i, prev, x in zip(starts[1:], lines, lines[1:], strict=False):
        # where the two lines cross, if between the last size of one run and the first of
        # the next (a token bucket's lines cross at its burst); else the next run's first size
        lo, hi = float(n[i - 1]), float(n[i])
        slope = float(prev[1]) - float(x[1])
        cross = (float(x[0]) - float(prev[0])) / slope if slope != 0 else hi
        near = 1e-6 * hi  # the crossing of exact data lands on a measured size, give or take
        start = min(max(cross, lo), hi) if lo - near <= cross <= hi + near else hi
        segments.append((start, float(x[0]) - alpha, 1.0 / float(x[1])))
    return alpha, tuple(segments)


def call_coefficient(op: str, world: int) -> float:
    """Coefficient ``k_c`` of the per-call software cost c (``call_overhead_s``) in one
    measurement's cost: 0 for ``p2p`` (no collective call), 1 for ``allreduce`` and
    ``allgather``, 2 for vgcsim's allgatherv (an all_gather of the lengths, then one of the
    data; :func:`vgcsim.core.collectives.calls_per_collective`); 0 for P = 1."""
    if op not in OPS:
        raise ConfigError(f"unknown op {op!r}; valid: {', '.join(OPS)}")
    if world <= 1 or op.startswith("p2p"):
        return 0.0
    return 2.0 if op.startswith("allgatherv") else 1.0


def fit_call_overhead(
    k_alpha: np.ndarray, k_call: np.ndarray, rest: np.ndarray
) -> tuple[float, float] | None:
    """``(α, c) ≥ 0`` from latency-regime rows of collectives, ``rest`` being each row's
    measured time beyond its β and γ terms: rows of one ratio k_α / k_c (one op) give one
    point, the median of their ``rest`` at the median of their k_α and k_c (robust, as α's
    median of :func:`fit_link`: a small collective on a busy host scatters by 2x and more
    from size to size); (α, c) minimise Σ ((k_α·α + k_c·c − rest) / rest)² over those
    points (the relative error, exact non-negative least squares over the active sets; two
    points: the exact solution where it is non-negative). None unless the rows hold two
    different ratios (a per-step and a per-call cost cannot be told apart otherwise): a
    ring allreduce pays 2(P−1) steps per call, a ring allgather P−1.

    Which structure the data choose (per step, per call, both) is this fit's answer: c = 0
    where the collectives' small-message times grow with their step counts alone, α = 0
    where they do not grow with them at all."""
    ok = (k_call > 0) & (rest > 0)
    if not ok.any():
        return None
    ratio = np.round(k_alpha / np.where(k_call > 0, k_call, 1.0), 12)
    groups = np.unique(ratio[ok])
    if groups.size < 2:
        return None
    pts = np.array(
        [
            (
                float(np.median(k_alpha[ok & (ratio == g)])),
                float(np.median(k_call[ok & (ratio == g)])),
                float(np.median(rest[ok & (ratio == g)])),
            )
            for g in groups
        ]
    )
    a = pts[:, :2] / pts[:, 2:3]
    x = _nnls_small(a, np.ones(len(pts)))
    return float(x[0]), float(x[1])


#: gloo's ring allreduce (``gloo/allreduce.cc``, ``ring()``): at most this many bytes per
#: segment (``AllreduceOptions::kMaxSegmentSize``, 1 MiB), and at least two segments per rank.
GLOO_MAX_SEGMENT_BYTES = 1 << 20
#: The calibration's allreduce moves float32 elements (``traces/training/distributed_calibrate``).
ALLREDUCE_ELEMENT_BYTES = 4


def gloo_allreduce_share(
    size_bytes: float,
    world: int,
    element_bytes: int = ALLREDUCE_ELEMENT_BYTES,
    max_segment_bytes: int = GLOO_MAX_SEGMENT_BYTES,
) -> float:
    """The share of gloo's ring-allreduce segments that carry bytes, ``k / S``: what an
    allreduce of ``size_bytes`` pays of the ring's 2(P−1) steps of α on gloo.

    gloo's ring (``gloo/allreduce.cc``, ``ring()``) cuts ``n`` bytes into
    ``S = roundUp(max(⌈n / M⌉, 2P), P)`` segments of ``b = roundUp(⌈n / S⌉, e)`` bytes (M the
    maximum segment size, 1 MiB; e the element size) and passes every segment P − 1 times
    in the reduce-scatter and P − 1 times in the allgather; a segment beyond the ``n`` bytes
    is empty and is neither sent nor waited for. ``k = ⌈n / b⌉`` segments carry bytes, so
    the ring's messages — and, on ranks that share cores, the CPU each costs — scale by
    ``k / S``. It is 1 from (2P)² elements on (and wherever ``b`` divides ``n`` into all
    ``S`` segments); below, a size may leave segments empty (17 float32 at P = 4: b = 12 B,
    k = 6 of S = 8; one float32: 1 of 8; docs/distributed.md, "The fit and what its error
    means", shows the measured small allreduces).

    Example: ``gloo_allreduce_share(16, 4)`` = 0.5 (S = 8, b = 4 B, k = 4)."""
    p, n = int(world), int(size_bytes)
    if p <= 1 or n <= 0:
        return 1.0
    e = max(1, int(element_bytes))

    def ceil_div(a: int, b: int) -> int:
        return -(-a // b)

    m = e * max(1, int(max_segment_bytes) // e)
    segments = ceil_div(max(ceil_div(n, m), 2 * p), p) * p
    seg_bytes = ceil_div(ceil_div(n, segments), e) * e
    return ceil_div(n, seg_bytes) / segments  # ≤ 1: seg_bytes ≥ n / segments


def cost_coefficients(
    op: str, size_bytes: float, world: int, backend: str = "gloo"
) -> tuple[float, float, float]:
    """Coefficients ``(k_α, k_β, k_γ)`` of one measurement's cost ``t = k_α·α + k_β·β + k_γ·γ``
    (the ring costs of the module docstring, after Thakur, Rabenseifner & Gropp 2005). On
    ``backend`` gloo (a measurement file's default) an allreduce's 2(P−1) steps of α are
    scaled by the share of gloo's segments that carry bytes (:func:`gloo_allreduce_share`:
    below 1 only for allreduces of fewer than (2P)² elements)."""
    p, n = world, float(size_bytes)
    if op in ("p2p", "p2p_intra"):
        return (1.0, n, 0.0)
    if op == "allreduce":
        steps = 2.0 * (p - 1)
        if str(backend).lower() == "gloo":
            steps *= gloo_allreduce_share(n, p)
        return (steps, 2.0 * (p - 1) / p * n, (p - 1) / p * n)
    if op == "allgather":
        return (float(p - 1), (p - 1) * n, 0.0)
    if op in ("allgatherv", "allgatherv_skewed"):  # skewed: padded to its largest block, n
        return (2.0 * (p - 1), (p - 1) * (n + SIZE_HEADER_BYTES), 0.0)
    raise ConfigError(f"unknown op {op!r}; valid: {', '.join(OPS)}")


def host_coefficient(
    op: str, size_bytes: float, world: int, padded_share: float = DEFAULT_HOST_PADDED_SHARE
) -> float:
    """Coefficient ``k_δ`` of δ (``allgatherv_host_s_per_byte``) in one measurement's cost,
    the bytes its host copies take (:func:`vgcsim.core.collectives.padded_host_time_s`):
    ``P·m`` for vgcsim's allgatherv of ``m`` bytes per rank; for ``allgatherv_skewed``, whose
    blocks (:func:`~vgcsim.traces.calibration.skewed_sizes`) are padded to the largest,
    ``m``, ``s·P·m + (1 − s)·Σ m_r``, s = ``padded_share`` (the share of the copying that
    takes the padded buffer; the rest takes each block at its own length); 0 for the other
    ops (:func:`vgcsim.models.collectives.allgatherv_host_time_s`). δ itself is looked up at
    the gathered buffer's ``P·m`` bytes (:func:`gathered_bytes`)."""
    if op not in OPS:
        raise ConfigError(f"unknown op {op!r}; valid: {', '.join(OPS)}")
    if op == "allgatherv_skewed":
        return host_copied_bytes(
            float(world) * float(size_bytes), real_bytes(op, size_bytes, world), padded_share
        )
    return float(world) * float(size_bytes) if op.startswith("allgatherv") else 0.0


def real_bytes(op: str, size_bytes: float, world: int) -> float:
    """Σ m_r, the bytes the P ranks of an allgatherv of ``op`` really send (without padding):
    ``P·m`` for equal blocks, the sum of :func:`~vgcsim.traces.calibration.skewed_sizes` for
    ``allgatherv_skewed``; 0 for the other ops."""
    if op == "allgatherv_skewed":
        return float(sum(skewed_sizes(int(size_bytes), world)))
    return gathered_bytes(op, size_bytes, world)


def gathered_bytes(op: str, size_bytes: float, world: int) -> float:
    """Bytes of the buffer an allgatherv of ``op`` gathers into, ``P·m`` (``m`` = the largest
    block), where δ is looked up; 0 for the other ops."""
    if op not in OPS:
        raise ConfigError(f"unknown op {op!r}; valid: {', '.join(OPS)}")
    return float(world) * float(size_bytes) if op.startswith("allgatherv") else 0.0


@dataclass(frozen=True)
class LinkFit:
    """Fitted link: ``latency_s`` = α, ``bandwidth_Bps`` = 1/β, ``gamma_s_per_byte`` = γ,
    ``allgatherv_host_s_per_byte`` = δ (from ``host_op``'s rows; 0 when not fitted) and
    ``allgatherv_host_s_per_byte_table`` = δ size by size (what prices the host time where
    it is not empty).

    ``rms_rel_error`` and ``rms_log_error`` are over the rows of ``fit_ops`` (the ops that fixed
    α and β); ``typical_error`` = exp(rms_log_error) − 1.
    """

    latency_s: float
    bandwidth_Bps: float
    gamma_s_per_byte: float
    rms_rel_error: float
    rms_log_error: float  # sqrt(mean(log(fitted/measured)²)); exp() of it is a typical factor
    world_size: int
    backend: str
    fit_ops: tuple[str, ...] = ()
    gamma_op: str = ""
    method: str = "regimes"
    allgatherv_host_s_per_byte: float = 0.0
    host_op: str = ""
    #: δ measured size by size: ``(P·m, excess per gathered byte)`` of each size of
    #: ``host_op``'s rows that gave δ (:func:`host_points`); empty when fewer than two sizes.
    allgatherv_host_s_per_byte_table: tuple[tuple[float, float], ...] = ()
    #: s, the share of δ's host time paid per padded byte of uneven blocks, and the op whose
    #: rows gave it ("" where not fitted: the default, :func:`padded_share_given`).
    allgatherv_host_padded_share: float = DEFAULT_HOST_PADDED_SHARE
    share_op: str = ""
    #: h, the fixed host time of one allgatherv beyond its two calls, and the op whose small
    #: messages gave it ("" where not fitted: h = 0).
    allgatherv_host_s: float = 0.0
    host_call_op: str = ""
    #: The op whose small messages gave α (``latency_s``), "" when α is the fit ops' own;
    #: ``fit_ops_latency_s`` is the fit ops' α either way (their rows are priced with it).
    latency_op: str = ""
    fit_ops_latency_s: float = 0.0
    #: c, the software cost of one collective call (``call_overhead_s``), and the ops whose
    #: small messages gave it with α (empty: not fitted, c = 0).
    call_overhead_s: float = 0.0
    call_ops: tuple[str, ...] = ()
    #: size segments ``(from_bytes, extra_latency_s, bandwidth_Bps)`` of the link where one
    #: α-β line did not fit the point-to-point sizes (:func:`fit_segments`); empty otherwise.
    segments: tuple[tuple[float, float, float], ...] = ()
    #: σ, the host CPU per byte a rank sends or receives at the ranks' measured sharing
    #: (``comm_cpu_s_per_byte``; 0: not fitted), and the op whose rows gave it.
    comm_cpu_s_per_byte: float = 0.0
    comm_cpu_op: str = ""
    #: α of an allgather-type collective's step (``allgather_latency_s``; 0: not fitted,
    #: ``latency_s``) and the op whose small messages gave it.
    allgather_latency_s: float = 0.0
    allgather_latency_op: str = ""

    @property
    def typical_error(self) -> float:
        return math.expm1(self.rms_log_error)


def _nnls_small(a: np.ndarray, b: np.ndarray, free: Sequence[int] = ()) -> np.ndarray:
    """Exact least squares of ``a·x ≈ b`` with x ≥ 0 except the columns in ``free`` (any sign),
    for a handful of columns: the best solution over every active set."""
    k = a.shape[1]
    bound = [j for j in range(k) if j not in free]
    best, best_res = np.zeros(k), math.inf
    for r in range(len(bound) + 1):
        for extra in itertools.combinations(bound, r):
            cols = sorted([*free, *extra])
            if not cols:
                res = float(np.sum(b**2))
                if res < best_res:
                    best, best_res = np.zeros(k), res
                continue
            sub = a[:, cols]
            if np.linalg.matrix_rank(sub) < len(cols):
                continue
            x, *_ = np.linalg.lstsq(sub, b, rcond=None)
            if np.any(x[[cols.index(j) for j in extra]] < 0):
                continue
            res = float(np.sum((sub @ x - b) ** 2))
            if res < best_res:
                best, best_res = np.zeros(k), res
                best[cols] = x
    return best


def _fit_log_ratio(a: np.ndarray, t: np.ndarray, x0: np.ndarray) -> np.ndarray:
    """Minimise Σ (log(a·x) − log t)² over x ≥ 0 by Levenberg–Marquardt in log x, from x0."""
    active = np.flatnonzero(a.any(axis=0))
    x = np.zeros(a.shape[1])
    if active.size == 0:
        return x
    a = a[:, active]
    # Floor each start value at a thousandth of the time its term would need to explain alone,
    # so that a parameter the start set to 0 can still grow.
    with np.errstate(divide="ignore"):
        scale = np.array([np.median(t[a[:, j] > 0] / a[a[:, j] > 0, j]) for j in range(a.shape[1])])
    phi = np.log(np.maximum(x0[active], 1e-3 * scale))
    log_t = np.log(t)

    def residual(phi: np.ndarray) -> np.ndarray:
        return np.log(a @ np.exp(phi)) - log_t

    r = residual(phi)
    cost, damping = float(r @ r), 1e-3
    for _ in range(500):
        theta = np.exp(phi)
        jac = a * theta[None, :] / (a @ theta)[:, None]
        h = jac.T @ jac
        step = np.linalg.solve(h + damping * np.diag(np.diag(h) + 1e-12), -(jac.T @ r))
        r_new = residual(phi + step)
        if float(r_new @ r_new) < cost:
            phi, r, cost = phi + step, r_new, float(r_new @ r_new)
            damping = max(damping / 3, 1e-12)
            if np.max(np.abs(step)) < 1e-9:
                break
        else:
            damping *= 5
            if damping > 1e12:
                break
    theta = np.exp(phi)
    # A term that explains under a millionth of every measurement is zero, not 1e-90.
    share = (a * theta[None, :]) / (a @ theta)[:, None]
    theta[share.max(axis=0) < 1e-6] = 0.0
    x[active] = theta
    return x


def _fit_joint(a: np.ndarray, t: np.ndarray) -> np.ndarray:
    """α, β, γ ≥ 0 minimising the squared log ratio (started from the relative-error NNLS)."""
    return _fit_log_ratio(a, t, _nnls_small(a / t[:, None], np.ones_like(t)))


def _fit_regimes(
    a: np.ndarray, t: np.ndarray, ops: Sequence[str]
) -> tuple[np.ndarray, list[str], str]:
    """Latency from small messages, bandwidth from large ones (steps 1-3 of the module
    docstring). Returns (α, β, γ), each row's regime and the method used."""
    ops_arr = np.asarray(ops)
    floor = {op: float(t[ops_arr == op].min()) for op in set(ops)}
    band = np.array([ti >= BANDWIDTH_FACTOR * floor[op] for ti, op in zip(t, ops, strict=True)])
    if np.unique(a[band, 1]).size >= 2:
        # β, γ ≥ 0 and a free-sign intercept (column 0) by least squares on the seconds
        # themselves, so that the largest messages, the least noisy relative to their time,
        # set the slope (scaled by the largest time for conditioning only).
        scale = float(t[band].max())
        x_band = _nnls_small(a[band] / scale, t[band] / scale, free=(0,))
        if x_band[1] > 0:
            bw = a[:, 1] * x_band[1] + a[:, 2] * x_band[2]
            lat = bw <= LATENCY_SHARE * t
            alpha = (
                float(np.median((t[lat] - bw[lat]) / a[lat, 0])) if lat.any() else float(x_band[0])
            )
            roles = [
                "latency" if lat[i] else "bandwidth" if band[i] else "between"
                for i in range(len(t))
            ]
            return np.array([max(alpha, 0.0), x_band[1], x_band[2]]), roles, "regimes"
    return _fit_joint(a, t), ["joint"] * len(t), "joint"


def _gamma_given(a: np.ndarray, t: np.ndarray, alpha: float, beta: float) -> float:
    """γ ≥ 0 with α, β fixed: the slope of what the rows pay beyond α and β's terms,
    ``t − α·k_α − β·k_β ≈ c + γ·k_γ``, by least squares on the seconds with a free intercept
    ``c`` (as in the bandwidth regime of :func:`_fit_regimes`).

    On the seconds, the largest messages set the slope: a per-message overhead of the
    collective algorithm (several handshakes per step of gloo's ring, a token-bucket burst)
    shifts every row by about the same time and goes into ``c``, which is not used. Fitting
    relative errors instead would let the smallest bandwidth-bound rows, where such overheads
    are a large share of the time, set γ. With a single distinct size the
    intercept cannot be told from the slope and γ is that row's excess per byte."""
    return _excess_slope(a[:, 2], t - a[:, 0] * alpha - a[:, 1] * beta, t)


def _excess_slope(k: np.ndarray, rest: np.ndarray, t: np.ndarray) -> float:
    """Slope ≥ 0 of ``rest ≈ c + slope·k`` by least squares on the seconds with a free
    intercept ``c`` (unused); one distinct ``k``: that row's ``rest / k``. ``t`` (the measured
    times) only scales the problem. Shared by γ (:func:`_gamma_given`) and δ."""
    if np.unique(k).size < 2:
        den = float(k @ k)
        return max(0.0, float(k @ rest) / den) if den > 0 else 0.0
    scale = float(t.max())
    design = np.column_stack([np.ones_like(k), k]) / scale
    return float(_nnls_small(design, rest / scale, free=(0,))[1])


def host_points(k: np.ndarray, rest: np.ndarray) -> tuple[tuple[float, float], ...]:
    """δ size by size: for each distinct gathered size ``k`` (P·m bytes), the median over its
    rows of ``max(rest, 0) / k``, ``rest`` being a row's measured time beyond the ring's α-β-γ
    terms; ``(k, δ_k)`` in increasing ``k``. Empty with fewer than two distinct sizes (one
    size says nothing about how δ changes with size; the slope then prices it alone).

    The per-byte host cost is not one number: copying a gathered buffer that fits the CPU's
    last-level cache costs less per byte than copying one that does not, so the excess of
    vgcsim's allgatherv over its ring grows faster than its bytes across that size
    (``vgcsim calibrate`` prints the points it fits).
    These points let the cost model price each size at the measured point at or below it
    (:func:`vgcsim.core.collectives.host_s_per_byte_at`) instead of pricing every size at
    one slope."""
    sizes = np.unique(k)
    if sizes.size < 2:
        return ()
    return tuple(
        (float(s), float(np.median(np.maximum(rest[k == s], 0.0) / s))) for s in sizes if s > 0
    )


def fit_link(
    measurements: dict,
    statistic: str = "median",
    *,
    ops: Sequence[str] | None = None,
    gamma_op: str | None = "allreduce",
    host_op: str | None = HOST_OP,
    latency_op: str | None = LATENCY_OP,
    share_op: str | None = SHARE_OP,
    call_ops: Sequence[str] | None = CALL_OPS,
    segments: bool = True,
    comm_cpu: bool = False,
    burst_bytes: float = 0.0,
    gather_op: str | None = GATHER_OP,
) -> tuple[LinkFit, list[dict]]:
    """Fit α, β, γ to a measurement file's rows; returns the fit and the per-size error table.

    ``ops`` fix α and β (and γ when one of them has a γ term); default ``p2p`` when it was
    measured, else every measured collective. ``gamma_op`` (default ``allreduce``), when
    measured and not among ``ops``, then gives γ from its bandwidth-bound rows with α, β fixed.
    ``host_op`` (default ``allgatherv``), when measured and not among ``ops``, gives δ
    (``allgatherv_host_s_per_byte``) from its rows where α's terms explain at most
    :data:`HOST_LATENCY_SHARE` of the measured time, with α and β fixed: the slope of their
    excess over α, β and γ's terms against :func:`host_coefficient` (P·m), least squares on
    the seconds with a free intercept. ``latency_op`` (default ``allreduce``), when
    measured and not among ``ops``, gives the link's α (``latency_s``) from its rows in the
    latency regime (β and γ's terms at most :data:`LATENCY_SHARE` of the time): the median
    of their time beyond β and γ's terms over α's coefficient, the latency of one step of a
    collective as the collectives pay it; the fit ops' rows keep their own α
    (``fit_ops_latency_s``) in the table and the typical error; δ's excess is taken over
    the link's α. ``call_ops`` (default :data:`CALL_OPS`), when two or more of them were
    measured (none among ``ops``) and ``latency_op`` gave α, give α and the per-call cost c
    (``call_overhead_s``) together instead, from their rows in the latency regime
    (:func:`fit_call_overhead`; every collective row is then priced with c × its calls,
    :func:`call_coefficient`). ``comm_cpu`` (for ranks that shared cores while measured) fits
    σ (``comm_cpu_s_per_byte``; where found, in place of γ) from ``gamma_op``'s rows where the α and c terms
    are at most half the time: ``2σ`` = the median of their time beyond α's and c's terms
    per byte of β's coefficient, where that exceeds β by :data:`COMM_CPU_MARGIN`; every
    collective row is then priced with its bytes at ``max(β, 2σ)`` (size segments capped at
    ``1/(2σ)``), as :func:`vgcsim.core.clusterspec.shared_link` prices them (at the
    measured sharing: the command divides σ by it). ``share_op`` (default ``allgatherv_skewed``), when measured, δ fitted and
    not among ``ops``, gives s (``allgatherv_host_padded_share``) from its rows where α's
    terms explain at most :data:`HOST_LATENCY_SHARE` of the time, with α, β, γ and δ fixed
    (:func:`padded_share_given`); else s is the default
    (:data:`~vgcsim.core.cluster.DEFAULT_HOST_PADDED_SHARE`). ``p2p_intra`` rows are left out
    (see :func:`fit_intra_link`). ``burst_bytes`` (b > 0: the links' token bucket, as given)
    prices every collective row's messages as the fitted link with that bucket prices them
    (:func:`bucket_terms`: each message's first ``min(b, α/β)`` bytes leave at once, the rest
    at 1/β), not with the point-to-point size segments, which describe a ping-pong's bucket
    (refilled while the reply travels); the segments then price the ``p2p`` rows alone and
    are not part of the fitted link. ``gather_op`` (default :data:`GATHER_OP`), when measured
    beside ``latency_op`` among ``call_ops`` and ``latency_op``'s small rows hold two ratios
    of steps to calls (gloo's allreduce does: its share of segments that carry bytes), gives
    the allgather-type collectives' own α (``allgather_latency_s``): α and c come from
    ``latency_op``'s rows alone (:func:`fit_call_overhead`), then the gather's α is the median
    of its latency-regime rows' time beyond their β and c terms over α's coefficient; every
    row of :data:`GATHER_OPS` is priced with it. Each table row: op, size_bytes, measured_s (``statistic``
    over repetitions), fitted_s, rel_error and role (latency, bandwidth, between, joint: how
    the row entered the fit; gamma; host; share; check: predicted only).
    """
    world = int(measurements["world_size"])
    rows = [r for r in measurements["rows"] if r["op"] != "p2p_intra"]
    if not rows:
        raise ConfigError("calibration measurements hold no rows for the inter-node link")
    measured = {r["op"] for r in rows}
    if ops:
        fit_ops = tuple(o for o in ops if o in measured)
        if not fit_ops:
            raise ConfigError(
                f"none of the ops to fit ({', '.join(ops)}) was measured "
                f"(measured: {', '.join(sorted(measured))})"
            )
    else:
        fit_ops = ("p2p",) if "p2p" in measured else tuple(o for o in OPS if o in measured)
    backend = str(measurements.get("backend", "gloo"))
    a = np.array([cost_coefficients(r["op"], r["size_bytes"], world, backend) for r in rows])
    t = np.array([measured_seconds(r, statistic) for r in rows])
    if np.any(t <= 0):
        raise VgcsimError("a measured time is not positive; the timer or the sweep is broken")
    used = np.array([r["op"] in fit_ops for r in rows])
    used_ops = [r["op"] for r, u in zip(rows, used, strict=True) if u]
    x, used_roles, method = _fit_regimes(a[used], t[used], used_ops)
    roles = np.array(["check"] * len(rows), dtype=object)
    roles[used] = used_roles
    segs: tuple[tuple[float, float, float], ...] = ()
    if segments and fit_ops == ("p2p",):
        one = a[used] @ x
        if (
            one.min() > 0
            and math.expm1(math.sqrt(float(np.mean(np.log(one / t[used]) ** 2)))) > SEGMENT_ERROR
        ):
            found = fit_segments(a[used, 1], t[used])
            if found is not None:
                x[0], segs = found
                x[1] = 1.0 / segs[-1][2]
                method = f"{len(segs)} size segments"
                roles[used] = "segment"

    collective = np.array([not r["op"].startswith("p2p") for r in rows])
    if burst_bytes > 0 and collective.any():
        method = f"{method}; collectives with the token bucket"
    ops_c = np.array([r["op"] for r in rows], dtype=object)
    gathers = np.isin(ops_c, GATHER_OPS)
    alpha_g = 0.0  # the allgather-type rows' own α, once fitted
    bucket = max(0.0, float(burst_bytes))

    def row_alpha() -> np.ndarray:
        """Each row's α: the link's, or the allgather-type collectives' own once fitted."""
        return np.where(gathers & (alpha_g > 0), alpha_g, x[0])

    sigma = 0.0  # σ at the measured sharing: collectives' bytes at max(β, 2σ) once fitted

    def bw_terms() -> np.ndarray:
        """Each row's seconds beyond α and γ's terms: β's, or its size segments'; a
        collective's capped by σ's rate once σ is fitted, and priced with the token bucket
        where one was given."""
        base = segment_terms(rows, world, segs) if segs else a[:, 1] * x[1]
        if bucket > 0:
            beta_c = max(x[1], 2.0 * sigma)  # σ's cap, as shared_link prices it
            refill_alpha = row_alpha()
            return np.where(
                collective, bucket_terms(rows, world, bucket, refill_alpha, beta_c), base
            )
        if sigma <= 0:
            return base
        if segs:
            cap = 1.0 / (2.0 * sigma)
            capped = tuple((f, e, min(bw, cap)) for f, e, bw in segs)
            slow = segment_terms(rows, world, capped)
        else:
            slow = a[:, 1] * max(x[1], 2.0 * sigma)
        return np.where(collective, slow, base)

    def linear(mask) -> np.ndarray:
        """α, β (or segments, capped by σ) and γ's terms of the rows in ``mask``."""
        if segs or sigma > 0 or bucket > 0 or alpha_g > 0:
            return a[mask, 0] * row_alpha()[mask] + bw_terms()[mask] + a[mask, 2] * x[2]
        return a[mask] @ x

    g_op = ""
    if gamma_op and gamma_op in measured and gamma_op not in fit_ops and x[2] == 0:
        g = np.array([r["op"] == gamma_op for r in rows])
        g_t = t[g]
        # Its rows that the fitted link already calls bandwidth-bound (β's term alone is at
        # least half the measured time), where a per-byte excess can show.
        g_band = bw_terms()[g] >= 0.5 * g_t
        if g_band.any() and segs:
            ag = a[g][g_band]
            rest_g = g_t[g_band] - ag[:, 0] * x[0] - bw_terms()[g][g_band]
            x[2] = _excess_slope(ag[:, 2], rest_g, g_t[g_band])
        elif g_band.any():
            x[2] = _gamma_given(a[g][g_band], g_t[g_band], x[0], x[1])
        if g_band.any():
            g_idx = np.flatnonzero(g)[g_band]
            roles[g_idx] = "gamma"
            g_op = gamma_op
    # α of the fit ops (their own rows are priced with it); the link's α may come from a
    # collective's small messages instead.
    fit_alpha, l_op = float(x[0]), ""
    k_call = np.array([call_coefficient(r["op"], world) for r in rows])
    cpu_op = ""
    measured_calls = [o for o in (call_ops or ()) if o in measured and o not in fit_ops]
    fit_sigma = comm_cpu and gamma_op in measured and gamma_op not in fit_ops and x[1] > 0
    # with σ, α and c are fitted again on the rows priced with its cap, and σ on theirs
    # α refills a bucket: its fit and the bytes' terms settle over passes too
    for _ in range(COMM_CPU_PASSES if comm_cpu or bucket > 0 else 1):
        l_op = ""
        if latency_op and latency_op in measured and latency_op not in fit_ops and x[1] > 0:
            c = np.array([r["op"] == latency_op for r in rows])
            rest = t - bw_terms() - a[:, 2] * x[2]
            # its latency regime: β and γ's terms at most LATENCY_SHARE of the measured time
            c_lat = c & (a[:, 0] > 0) & (t - rest <= LATENCY_SHARE * t)
            if c_lat.any():
                x[0] = max(0.0, float(np.median(rest[c_lat] / a[c_lat, 0])))
                roles[c_lat] = "latency"
                l_op = latency_op
        call_s, c_ops = 0.0, ()
        ag_op = ""
        if l_op and len(measured_calls) >= 2:
            c = np.array([r["op"] in measured_calls for r in rows])
            rest = t - bw_terms() - a[:, 2] * x[2]
            c_lat = c & (a[:, 0] > 0) & (t - rest <= LATENCY_SHARE * t)
            own = None  # α and c from the allreduce alone, where its rows tell them apart
            g_lat = c_lat & (ops_c == gather_op)
            if gather_op and gather_op in measured_calls and g_lat.any():
                ar = c_lat & (ops_c == latency_op)
                own = fit_call_overhead(a[ar, 0], k_call[ar], rest[ar])
            if own is not None:
                x[0], call_s = own
                ratio = (rest[g_lat] - k_call[g_lat] * call_s) / a[g_lat, 0]
                alpha_g, ag_op = max(0.0, float(np.median(ratio))), str(gather_op)
                roles[c_lat & ((ops_c == latency_op) | g_lat)] = "latency"
                c_ops = (str(latency_op),)
            else:
                alpha_g = 0.0
                both = fit_call_overhead(a[c_lat, 0], k_call[c_lat], rest[c_lat])
                if both is not None:
                    x[0], call_s = both
                    roles[c_lat] = "latency"
                    c_ops = tuple(o for o in measured_calls if (c_lat & c).any())
        calls = k_call * call_s  # each row's per-call software seconds
        if fit_sigma:
            g = np.array([r["op"] == gamma_op for r in rows])
            beyond = t - a[:, 0] * x[0] - calls  # the time beyond α's and c's terms
            g_band = g & (a[:, 1] > 0) & (beyond >= 0.5 * t)
            if g_band.any():
                per_byte = float(np.median(beyond[g_band] / a[g_band, 1]))
                if per_byte > x[1] * (1.0 + COMM_CPU_MARGIN):
                    sigma, cpu_op = 0.5 * per_byte, gamma_op
                    roles[g_band] = "cpu"
                    x[2], g_op = 0.0, ""  # σ prices the reduction's bytes: no γ beside it
    k_host = np.array([host_coefficient(r["op"], r["size_bytes"], world) for r in rows])
    k_gathered = np.array([gathered_bytes(r["op"], r["size_bytes"], world) for r in rows])
    delta, h_op, h_table = 0.0, "", ()
    is_host = k_host > 0
    h = np.array([r["op"] == host_op for r in rows])
    h_band, h_lat = h & False, h & False
    priced = linear(np.ones(len(rows), dtype=bool))  # every row's α, β and γ terms

    def host_slope(band: np.ndarray) -> float:
        """δ from ``band``'s rows: their excess's slope against P·m, whose free intercept
        takes h, so that δ does not depend on it."""
        if not band.any():
            return 0.0
        return _excess_slope(k_host[band], t[band] - priced[band] - calls[band], t[band])

    if host_op and host_op in measured and host_op not in fit_ops and x[1] > 0:
        # α's terms at most HOST_LATENCY_SHARE of the time: the per-byte costs dominate.
        h_band = h & (a[:, 0] * row_alpha() + calls <= HOST_LATENCY_SHARE * t) & is_host
        delta = host_slope(h_band)
        if l_op:
            # h's rows: the latency regime, as α's (β, γ and δ's terms at most LATENCY_SHARE
            # of the time); where a fixed cost dominates them they leave δ's rows
            h_lat = h & (priced - a[:, 0] * row_alpha() + k_host * delta <= LATENCY_SHARE * t)
            if (h_band & h_lat).any():
                h_band &= ~h_lat
                delta = host_slope(h_band)
        h_op = host_op if h_band.any() else ""
        roles[h_band] = "host"
    fixed, f_op = 0.0, ""  # h, the allgatherv's fixed host time, and the op that gave it
    if h_lat.any():
        fixed = max(0.0, float(np.median((t - priced - calls - k_host * delta)[h_lat])))
        roles[h_lat] = "fixed"
        f_op = host_op
    fixed_s = np.where(is_host, fixed, 0.0)  # each row's fixed host seconds
    if h_band.any():
        h_table = host_points(k_host[h_band], (t - priced - calls - fixed_s)[h_band])
    share, s_op = DEFAULT_HOST_PADDED_SHARE, ""
    if share_op and share_op in measured and share_op not in fit_ops and h_op:
        sk = np.array([r["op"] == share_op for r in rows])
        sk_band = sk & (a[:, 0] * row_alpha() + calls <= HOST_LATENCY_SHARE * t)
        k_real = np.array([real_bytes(r["op"], r["size_bytes"], world) for r in rows])
        fitted_share = padded_share_given(
            (t - priced - calls - fixed_s)[sk_band],
            host_s_per_byte_at(k_gathered[sk_band], delta, h_table),
            k_gathered[sk_band],
            k_real[sk_band],
        )
        if fitted_share is not None:
            share, s_op = fitted_share, share_op
            roles[sk_band] = "share"
    k_host = np.array([host_coefficient(r["op"], r["size_bytes"], world, share) for r in rows])
    # the fit ops' rows with their own α, every other row with the link's
    alphas = np.where(used, fit_alpha, row_alpha())
    if segs or sigma > 0 or bucket > 0 or alpha_g > 0:
        fitted = a[:, 0] * alphas + bw_terms() + a[:, 2] * x[2] + calls
    else:
        fitted = a[:, 0] * alphas + a[:, 1:] @ x[1:] + calls
    fitted = fitted + k_host * host_s_per_byte_at(k_gathered, delta, h_table) + fixed_s
    if h_op and backend == "gloo":
        # a plain all_gather on gloo copies its gathered buffer once: ½·δ(P·m)·P·m, as
        # `vgcsim validate` prices it (vgcsim.core.collectives.plain_allgather_host_time_s)
        for i, r in enumerate(rows):
            if r["op"] == "allgather":
                fitted[i] += float(
                    plain_allgather_host_time_s(world, float(r["size_bytes"]), delta, h_table)
                )
    rel = (fitted - t) / t
    with np.errstate(divide="ignore"):
        log_ratio = np.log(fitted / t)
    alpha, beta, gamma = (float(v) for v in x)
    fit = LinkFit(
        latency_s=alpha,
        bandwidth_Bps=(1.0 / beta) if beta > 0 else float("inf"),
        gamma_s_per_byte=gamma,
        rms_rel_error=float(np.sqrt(np.mean(rel[used] ** 2))),
        rms_log_error=float(np.sqrt(np.mean(log_ratio[used] ** 2))),
        world_size=world,
        backend=str(measurements.get("backend", "")),
        fit_ops=fit_ops,
        gamma_op=g_op,
        method=method,
        allgatherv_host_s_per_byte=float(delta),
        host_op=h_op,
        allgatherv_host_s_per_byte_table=h_table,
        latency_op=l_op,
        fit_ops_latency_s=fit_alpha,
        allgatherv_host_padded_share=float(share),
        share_op=s_op,
        allgatherv_host_s=float(fixed),
        host_call_op=f_op,
        call_overhead_s=float(call_s),
        call_ops=c_ops,
        segments=() if bucket > 0 else segs,
        comm_cpu_s_per_byte=float(sigma),
        comm_cpu_op=cpu_op,
        allgather_latency_s=float(alpha_g),
        allgather_latency_op=ag_op,
    )
    return fit, _table(rows, t, fitted, rel, roles)


def padded_share_given(excess_s, host_s_per_byte, padded_bytes, real_bytes) -> float | None:
    """s, the share of an allgatherv's host time paid per padded byte, from rows of uneven
    blocks: each row's ``excess_s`` (measured time beyond its ring's α-β-γ terms) is
    ``δ·(s·B_pad + (1 − s)·B_real)``, δ = ``host_s_per_byte`` at its size, B_pad =
    ``padded_bytes`` (P·m_max) and B_real = ``real_bytes`` (Σ m_r); so each row gives
    ``s_i = (excess − δ·B_real) / (δ·(B_pad − B_real))``, and s is the median of those, clipped
    to [0, 1] (the rows without padding to price, δ·(B_pad − B_real) = 0, give none).

    The median, as for α (:func:`fit_link`), not a least-squares slope: each s_i is a small
    difference of two noisy excesses (the skewed row's and, through δ, the even row's at the
    same size), and on the seconds the largest size alone would set the slope.
    None where no row has padding to price, or no row at all."""
    excess = np.asarray(excess_s, dtype=float)
    delta = np.asarray(host_s_per_byte, dtype=float)
    u = delta * (np.asarray(padded_bytes, dtype=float) - np.asarray(real_bytes, dtype=float))
    v = excess - delta * np.asarray(real_bytes, dtype=float)
    priced = u > 0
    if not priced.any():
        return None
    return float(np.clip(np.median(v[priced] / u[priced]), 0.0, 1.0))


def _table(rows, t, fitted, rel, roles) -> list[dict]:
    return [
        {
            "op": r["op"],
            "size_bytes": int(r["size_bytes"]),
            "measured_s": float(ti),
            "fitted_s": float(fi),
            "rel_error": float(ei),
            "role": str(ro),
        }
        for r, ti, fi, ei, ro in zip(rows, t, fitted, rel, roles, strict=True)
    ]


def fit_intra_link(
    measurements: dict, statistic: str = "median"
) -> tuple[LinkFit, list[dict]] | None:
    """α and β of the intra-node link from the ``p2p_intra`` rows (None when not measured)."""
    rows = [r for r in measurements["rows"] if r["op"] == "p2p_intra"]
    if not rows:
        return None
    a = np.array([cost_coefficients(r["op"], r["size_bytes"], 2) for r in rows])
    t = np.array([measured_seconds(r, statistic) for r in rows])
    if np.any(t <= 0):
        raise VgcsimError("a measured time is not positive; the timer or the sweep is broken")
    x, roles, method = _fit_regimes(a, t, ["p2p_intra"] * len(rows))
    fitted = a @ x
    rel = (fitted - t) / t
    fit = LinkFit(
        latency_s=float(x[0]),
        bandwidth_Bps=(1.0 / x[1]) if x[1] > 0 else float("inf"),
        gamma_s_per_byte=0.0,
        rms_rel_error=float(np.sqrt(np.mean(rel**2))),
        rms_log_error=float(np.sqrt(np.mean(np.log(fitted / t) ** 2))),
        world_size=int(measurements["world_size"]),
        backend=str(measurements.get("backend", "")),
        fit_ops=("p2p_intra",),
        method=method,
    )
    return fit, _table(rows, t, fitted, rel, roles)


def protocol_switch(table: list[dict], op: str = "p2p") -> dict | None:
    """Where ``op``'s timings step from one α-β line to another (an eager/rendezvous switch).

    Tries every split of the sorted sizes with at least 3 sizes on each side, fits each side
    by the log-ratio fit, and reports the split when two lines halve the rms log error of one
    line that is itself over 10 % typical error: ``{"below_bytes", "above_bytes", "below":
    (α, β), "above": (α, β)}``. None when no split does that.
    """
    rows = sorted((r for r in table if r["op"] == op), key=lambda r: r["size_bytes"])
    if len(rows) < 6:
        return None
    n = np.array([r["size_bytes"] for r in rows], dtype=float)
    t = np.array([r["measured_s"] for r in rows])
    a = np.column_stack([np.ones_like(n), n])

    def rms(x: np.ndarray, sl: slice) -> float:
        return float(np.sum(np.log((a[sl] @ x) / t[sl]) ** 2))

    one = _fit_joint(a, t)
    base = math.sqrt(rms(one, slice(None)) / len(t))
    if math.expm1(base) <= 0.1:
        return None
    best = None
    for k in range(3, len(t) - 2):
        lo, hi = slice(0, k), slice(k, None)
        x_lo, x_hi = _fit_joint(a[lo], t[lo]), _fit_joint(a[hi], t[hi])
        if x_lo[1] <= 0 and x_hi[1] <= 0:
            continue
        two = math.sqrt((rms(x_lo, lo) + rms(x_hi, hi)) / len(t))
        if two < 0.5 * base and (best is None or two < best[0]):
            best = (two, k, x_lo, x_hi)
    if best is None:
        return None
    _, k, x_lo, x_hi = best
    return {
        "below_bytes": int(n[k - 1]),
        "above_bytes": int(n[k]),
        "below": (float(x_lo[0]), float(x_lo[1])),
        "above": (float(x_hi[0]), float(x_hi[1])),
    }


def op_errors(table: list[dict]) -> dict[str, float]:
    """Typical error per op: exp(rms log(fitted/measured)) − 1 over its rows."""
    out = {}
    for op in dict.fromkeys(r["op"] for r in table):
        logs = [math.log(r["fitted_s"] / r["measured_s"]) ** 2 for r in table if r["op"] == op]
        out[op] = math.expm1(math.sqrt(sum(logs) / len(logs)))
    return out
